//! Service-thread statistics: batches, requests, batch sizes and service times, as counters and
//! log-linear histograms (8 buckets per power of two: a percentile is within 12.5%).

use std::sync::atomic::{AtomicU64, Ordering};

const SUB_BUCKETS: u64 = 8;
const BUCKETS: usize = 64 * SUB_BUCKETS as usize;

/// A histogram of `u64` samples with 8 buckets per power of two.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
    total: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU64::new(0),
        }
    }
}

fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS {
        return value as usize;
    }
    let log2 = 63 - value.leading_zeros() as u64;
    let sub = (value >> (log2 - 3)) & (SUB_BUCKETS - 1);
    ((log2 - 2) * SUB_BUCKETS + sub) as usize
}

/// The largest value that falls in `bucket`.
fn bucket_top(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < SUB_BUCKETS {
        return bucket;
    }
    let log2 = bucket / SUB_BUCKETS + 2;
    let sub = bucket % SUB_BUCKETS;
    let low = (SUB_BUCKETS + sub) << (log2 - 3);
    low + ((1 << (log2 - 3)) - 1)
}

impl Histogram {
    /// Count one sample.
    pub fn record(&self, value: u64) {
        self.counts[bucket_of(value)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// An upper bound of the `q`-quantile (`q` in 0..=1), within 12.5%; 0 with no samples.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count.load(Ordering::Relaxed);
            if seen >= rank {
                return bucket_top(bucket);
            }
        }
        u64::MAX
    }
}

/// What the service thread has done so far.
#[derive(Default)]
pub struct ServiceStats {
    /// Sweeps that found at least one request.
    pub batches: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Requests per batch.
    pub batch_sizes: Histogram,
    /// Nanoseconds from a batch's first read to its last acknowledgement.
    pub batch_nanos: Histogram,
    /// Sum of the batch times: how long the thread was busy serving.
    pub busy_nanos: AtomicU64,
    /// The part of `busy_nanos` spent collecting the batches (reading the ports).
    pub collect_nanos: AtomicU64,
    /// The part spent resolving them (the rest is answering: replies and acknowledgements).
    pub resolve_nanos: AtomicU64,
}

/// A plain copy of the statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Batches served.
    pub batches: u64,
    /// Requests served.
    pub requests: u64,
    /// Median and 99th percentile of the batch size.
    pub batch_size_p50_p99: (u64, u64),
    /// Median, 99th percentile and maximum of the batch service time, ns.
    pub batch_nanos_p50_p99_max: (u64, u64, u64),
    /// Total time spent serving batches, ns.
    pub busy_nanos: u64,
    /// The part of it spent collecting them, ns.
    pub collect_nanos: u64,
    /// The part of it spent resolving them, ns (the rest went to answering).
    pub resolve_nanos: u64,
}

impl ServiceStats {
    /// A snapshot.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            batches: self.batches.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            batch_size_p50_p99: (
                self.batch_sizes.quantile(0.5),
                self.batch_sizes.quantile(0.99),
            ),
            batch_nanos_p50_p99_max: (
                self.batch_nanos.quantile(0.5),
                self.batch_nanos.quantile(0.99),
                self.batch_nanos.quantile(1.0),
            ),
            busy_nanos: self.busy_nanos.load(Ordering::Relaxed),
            collect_nanos: self.collect_nanos.load(Ordering::Relaxed),
            resolve_nanos: self.resolve_nanos.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_in_order_within_an_eighth() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last || v > 5000, "buckets must not go backwards");
            last = b;
            let top = bucket_top(b);
            assert!(top >= v, "value {v} above its bucket's top {top}");
            assert!(top - v <= v / 8 + 1, "bucket of {v} too wide: top {top}");
        }
    }

    #[test]
    fn quantiles_of_a_known_sample() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=1000 {
            h.record(v);
        }
        let p50 = h.quantile(0.5);
        assert!((500..=563).contains(&p50), "p50 {p50}");
        let p99 = h.quantile(0.99);
        assert!((990..=1114).contains(&p99), "p99 {p99}");
        assert!(h.quantile(1.0) >= 1000);
    }
}
