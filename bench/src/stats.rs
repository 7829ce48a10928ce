//! Summaries of repeated measurements.

/// The median of `xs` (sorted in place; the upper middle of an even count; 0 when empty).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() { 0.0 } else { xs[xs.len() / 2] }
}
