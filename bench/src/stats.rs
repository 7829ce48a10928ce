//! Summaries of repeated measurements.

/// The median of `xs` (sorted in place; the upper middle of an even count; 0 when empty).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() { 0.0 } else { xs[xs.len() / 2] }
}

/// The median of a figure that some runs do not have: `None` when no run has it.
pub fn median_present(xs: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut present: Vec<f64> = xs.into_iter().flatten().collect();
    (!present.is_empty()).then(|| median(&mut present))
}
