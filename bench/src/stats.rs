//! Summaries of repeated measurements.

/// The median of `xs` (sorted in place; the upper middle of an even count; 0 when empty).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() { 0.0 } else { xs[xs.len() / 2] }
}

/// The median of `xs` (sorted in place) with an even count's two middle values averaged, so two
/// runs give their mean rather than the larger (as comparisons of few runs need); 0 when empty.
pub fn median_of_middles(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// The median of a figure that some runs do not have: `None` when no run has it.
pub fn median_present(xs: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut present: Vec<f64> = xs.into_iter().flatten().collect();
    (!present.is_empty()).then(|| median(&mut present))
}

/// From the first start to the last end of runs given as (start, ms): how long runs started
/// together took as a whole, in ms. `None` for no runs.
pub fn span_ms(runs: impl IntoIterator<Item = (std::time::Instant, f64)>) -> Option<f64> {
    let mut first: Option<std::time::Instant> = None;
    let mut last: Option<std::time::Instant> = None;
    for (start, ms) in runs {
        let end = start + std::time::Duration::from_secs_f64(ms / 1e3);
        first = Some(first.map_or(start, |f| f.min(start)));
        last = Some(last.map_or(end, |l| l.max(end)));
    }
    Some((last? - first?).as_secs_f64() * 1e3)
}
