//! The cost model: modelled time as a sum of fixed costs per batch, per serviced VA block, per
//! faulted page and per copy from the host (a run of adjacent pages), costs per byte moved each
//! way and per zero-filled page, and a cost per warp instruction; and its fit to measured kernel
//! times.
//!
//! The fit minimises the squared relative error over the samples (each row divided by its
//! measured time) with every constant non-negative, by coordinate descent on the normal
//! equations (eight unknowns: it converges in a few hundred sweeps).

use serde::{Deserialize, Serialize};

use crate::sim::Counts;

/// Constants of the modelled time, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Per fault batch (fetch, sort, replay).
    pub per_batch_ns: f64,
    /// Per (VA block, batch) serviced.
    pub per_block_ns: f64,
    /// Per byte moved host to device.
    pub per_htod_byte_ns: f64,
    /// Per byte moved device to host.
    pub per_dtoh_byte_ns: f64,
    /// Per page zero-filled on the GPU.
    pub per_zero_page_ns: f64,
    /// Per warp instruction executed.
    pub per_instruction_ns: f64,
    /// Per faulted page serviced (coalesced).
    #[serde(default)]
    pub per_fault_ns: f64,
    /// Per copy from the host (a run of adjacent pages of one block).
    #[serde(default)]
    pub per_copy_ns: f64,
}

impl Default for CostModel {
    /// Uncalibrated round figures: 20 us per batch, 5 us per block, 55.6 GB/s each way (the
    /// H200's pinned copy rate), 0.5 us per zero-filled page, 1 ns per warp instruction, 1 us per
    /// faulted page, 5 us per copy.
    fn default() -> Self {
        Self {
            per_batch_ns: 20_000.0,
            per_block_ns: 5_000.0,
            per_htod_byte_ns: 1.0 / 55.6,
            per_dtoh_byte_ns: 1.0 / 55.6,
            per_zero_page_ns: 500.0,
            per_instruction_ns: 1.0,
            per_fault_ns: 1_000.0,
            per_copy_ns: 5_000.0,
        }
    }
}

/// Constants in the model.
const N: usize = 8;

/// One term of the model, in feature order: names a constant a fit may hold fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// [`CostModel::per_batch_ns`].
    Batch,
    /// [`CostModel::per_block_ns`].
    Block,
    /// [`CostModel::per_htod_byte_ns`].
    HtodByte,
    /// [`CostModel::per_dtoh_byte_ns`].
    DtohByte,
    /// [`CostModel::per_zero_page_ns`].
    ZeroPage,
    /// [`CostModel::per_instruction_ns`].
    Instruction,
    /// [`CostModel::per_fault_ns`].
    Fault,
    /// [`CostModel::per_copy_ns`].
    Copy,
}

/// The quantities the constants multiply, in the order of [`CostModel::to_array`].
pub fn features(c: &Counts) -> [f64; N] {
    [
        c.batches as f64,
        c.blocks_serviced as f64,
        c.htod_bytes() as f64,
        (c.dtoh_eviction_bytes + c.dtoh_host_bytes) as f64,
        c.zero_filled_pages as f64,
        c.instructions as f64,
        c.faults_coalesced as f64,
        c.htod_copies as f64,
    ]
}

impl CostModel {
    /// The constants in feature order.
    pub fn to_array(&self) -> [f64; N] {
        [
            self.per_batch_ns,
            self.per_block_ns,
            self.per_htod_byte_ns,
            self.per_dtoh_byte_ns,
            self.per_zero_page_ns,
            self.per_instruction_ns,
            self.per_fault_ns,
            self.per_copy_ns,
        ]
    }

    /// Constants from an array in feature order.
    pub fn from_array(a: [f64; N]) -> Self {
        Self {
            per_batch_ns: a[0],
            per_block_ns: a[1],
            per_htod_byte_ns: a[2],
            per_dtoh_byte_ns: a[3],
            per_zero_page_ns: a[4],
            per_instruction_ns: a[5],
            per_fault_ns: a[6],
            per_copy_ns: a[7],
        }
    }

    /// Modelled time of these counts.
    pub fn time_ns(&self, c: &Counts) -> f64 {
        features(c)
            .iter()
            .zip(self.to_array())
            .map(|(f, k)| f * k)
            .sum()
    }

    /// The non-negative constants that best explain `samples` of (counts, measured ns), in
    /// relative error. The terms in `held`, and constants whose feature is zero in every sample,
    /// stay at `prior`'s value (a held term's share of each time is taken off before the fit).
    pub fn fit(samples: &[(Counts, f64)], prior: &CostModel, held: &[Term]) -> CostModel {
        let mut x = prior.to_array();
        let is_held: [bool; N] = std::array::from_fn(|j| held.iter().any(|&t| t as usize == j));
        let rows: Vec<([f64; N], f64)> = samples
            .iter()
            .filter(|(_, t)| *t > 0.0)
            .map(|(c, t)| {
                let row = features(c).map(|f| f / t);
                let fixed: f64 = (0..N).filter(|&j| is_held[j]).map(|j| row[j] * x[j]).sum();
                (row, 1.0 - fixed)
            })
            .collect();
        let used: [bool; N] =
            std::array::from_fn(|j| !is_held[j] && rows.iter().any(|r| r.0[j] != 0.0));
        // Scale columns to unit norm so one sweep treats them alike.
        let norms: [f64; N] = std::array::from_fn(|j| {
            rows.iter()
                .map(|r| r.0[j] * r.0[j])
                .sum::<f64>()
                .sqrt()
                .max(f64::MIN_POSITIVE)
        });
        let mut a = [[0.0f64; N]; N];
        let mut b = [0.0f64; N];
        for (row, y) in &rows {
            for i in 0..N {
                b[i] += row[i] / norms[i] * y;
                for j in 0..N {
                    a[i][j] += row[i] / norms[i] * row[j] / norms[j];
                }
            }
        }
        let mut z: [f64; N] = std::array::from_fn(|j| if used[j] { x[j] * norms[j] } else { 0.0 });
        for _ in 0..5000 {
            for i in (0..N).filter(|&i| used[i] && a[i][i] > 0.0) {
                let r: f64 = b[i] - (0..N).map(|j| a[i][j] * z[j]).sum::<f64>();
                z[i] = (z[i] + r / a[i][i]).max(0.0);
            }
        }
        for j in (0..N).filter(|&j| used[j]) {
            x[j] = z[j] / norms[j];
        }
        CostModel::from_array(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(batches: u64, blocks: u64, htod: u64, instructions: u64) -> Counts {
        Counts {
            batches,
            blocks_serviced: blocks,
            htod_fault_bytes: htod,
            instructions,
            ..Counts::default()
        }
    }

    /// Sample counts with the times `truth` gives them.
    fn timed_by(truth: &CostModel) -> Vec<(Counts, f64)> {
        [
            counts(10, 40, 1 << 20, 1000),
            counts(100, 100, 64 << 20, 50_000),
            counts(5, 300, 8 << 20, 200),
            counts(1000, 1200, 512 << 20, 1_000_000),
            counts(50, 60, 2 << 20, 9_000_000),
        ]
        .into_iter()
        .map(|c| (c, truth.time_ns(&c)))
        .collect()
    }

    fn assert_fits(fitted: &CostModel, samples: &[(Counts, f64)]) {
        for (c, t) in samples {
            let err = (fitted.time_ns(c) - t).abs() / t;
            assert!(err < 0.01, "relative error {err} on {c:?}");
        }
    }

    #[test]
    fn the_fit_recovers_constants_that_generated_the_times() {
        let truth = CostModel {
            per_batch_ns: 30_000.0,
            per_block_ns: 2_000.0,
            per_htod_byte_ns: 0.03,
            per_dtoh_byte_ns: 0.0,
            per_zero_page_ns: 0.0,
            per_instruction_ns: 2.0,
            per_fault_ns: 0.0,
            per_copy_ns: 0.0,
        };
        let samples = timed_by(&truth);
        let fitted = CostModel::fit(&samples, &CostModel::default(), &[]);
        assert_fits(&fitted, &samples);
        assert!(fitted.to_array().iter().all(|&k| k >= 0.0));
        // Unused features keep the prior.
        assert_eq!(
            fitted.per_zero_page_ns,
            CostModel::default().per_zero_page_ns
        );
    }

    #[test]
    fn a_held_term_keeps_its_value_and_the_others_absorb_the_rest() {
        let truth = CostModel {
            per_batch_ns: 10_000.0,
            per_block_ns: 0.0,
            per_htod_byte_ns: 0.05,
            per_dtoh_byte_ns: 0.0,
            per_zero_page_ns: 0.0,
            per_instruction_ns: 1.0,
            per_fault_ns: 0.0,
            per_copy_ns: 0.0,
        };
        let samples = timed_by(&truth);
        // Holding the batch cost at its true value leaves the others to recover theirs.
        let prior = CostModel {
            per_batch_ns: 10_000.0,
            ..CostModel::default()
        };
        let fitted = CostModel::fit(&samples, &prior, &[Term::Batch]);
        assert_eq!(fitted.per_batch_ns, 10_000.0);
        assert_fits(&fitted, &samples);
        // Holding it at zero moves its share elsewhere but never makes a constant negative.
        let zero = CostModel {
            per_batch_ns: 0.0,
            ..CostModel::default()
        };
        let fitted = CostModel::fit(&samples, &zero, &[Term::Batch]);
        assert_eq!(fitted.per_batch_ns, 0.0);
        assert!(fitted.to_array().iter().all(|&k| k >= 0.0));
        let (c, t) = &samples[3];
        let without_batches = t - 1000.0 * 10_000.0;
        assert!(
            fitted.time_ns(c) > without_batches * 1.05,
            "the other terms took the batches' share"
        );
    }
}
