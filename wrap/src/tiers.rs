//! Tiered placement: which part of each large allocation lives on the GPU.
//!
//! Data larger than the GPU thrashes when every page may migrate: each pass over it evicts what
//! the next pass needs first. With `--placement tiered` each allocation of at least
//! [`TIER_MIN_BYTES`] is split when it is made: a first part, as much as the device tier's budget
//! has left, is preferred on the GPU and prefetched there; the rest is preferred in host memory,
//! populated there and mapped for the GPU, which reads and writes it over the link without
//! migrating it. Smaller allocations (temporaries, activations) keep the driver's migration.
//! Allocations take the budget first come, first served, and give it back when freed.
//!
//! This module only decides (no CUDA); the preload library applies the advice and prefetches.
//!
//! Invariants: the GPU parts of live splits add up to [`Tiers::device_live_bytes`], which never
//! exceeds the budget; a split's parts add up to its allocation's size; a GPU part is a whole
//! number of 2 MiB blocks unless it is the whole allocation.

use ortree::VABLOCK_BYTES;

/// The smallest allocation split into tiers (32 VA blocks): below it, migration on demand costs
/// little and a temporary is better on the GPU whole.
pub const TIER_MIN_BYTES: u64 = 64 << 20;

/// GPU memory the default budget leaves outside the device tier: for allocations that migrate, the
/// CUDA context and the libraries' workspaces. A sixteenth of the free memory, at least this.
pub const MIN_HEADROOM_BYTES: u64 = 2 << 30;

/// Where one allocation's bytes live: the first `device_bytes` on the GPU, the rest in host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Split {
    /// Bytes from the allocation's start preferred on the GPU and prefetched there.
    pub device_bytes: u64,
    /// Bytes after them preferred in host memory and mapped for the GPU.
    pub host_bytes: u64,
}

/// What the tiers did, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TierSummary {
    /// Bytes the device tier may hold in all.
    pub budget_bytes: u64,
    /// Allocations split into tiers.
    pub tiered_allocations: u64,
    /// Bytes placed on the GPU, over all of them.
    pub device_bytes_placed: u64,
    /// Bytes placed in host memory, over all of them.
    pub host_bytes_placed: u64,
    /// Most GPU-tier bytes live at once.
    pub peak_device_bytes: u64,
    /// Nanoseconds spent placing (advice, prefetches queued, host pages populated).
    pub placing_ns: u64,
}

/// The device tier's budget and what live allocations hold of it.
#[derive(Clone, Debug)]
pub struct Tiers {
    device_live_bytes: u64,
    summary: TierSummary,
}

impl Tiers {
    /// Tiers whose GPU part may hold `budget_bytes`.
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            device_live_bytes: 0,
            summary: TierSummary {
                budget_bytes,
                ..TierSummary::default()
            },
        }
    }

    /// The default budget on a GPU with `gpu_free_bytes` free: all of it but the headroom.
    pub fn default_budget(gpu_free_bytes: u64) -> u64 {
        let headroom = (gpu_free_bytes / 16).max(MIN_HEADROOM_BYTES);
        let budget = gpu_free_bytes.saturating_sub(headroom);
        budget - budget % VABLOCK_BYTES
    }

    /// Where a new allocation of `bytes` goes (`None`: too small to split; it migrates), taking
    /// its GPU part from the budget.
    pub fn split(&mut self, bytes: u64) -> Option<Split> {
        if bytes < TIER_MIN_BYTES {
            return None;
        }
        let left = self.summary.budget_bytes - self.device_live_bytes;
        let device_bytes = if bytes <= left {
            bytes
        } else {
            left - left % VABLOCK_BYTES
        };
        let split = Split {
            device_bytes,
            host_bytes: bytes - device_bytes,
        };
        self.device_live_bytes += device_bytes;
        let s = &mut self.summary;
        s.tiered_allocations += 1;
        s.device_bytes_placed += split.device_bytes;
        s.host_bytes_placed += split.host_bytes;
        s.peak_device_bytes = s.peak_device_bytes.max(self.device_live_bytes);
        Some(split)
    }

    /// A split allocation was freed: its GPU part returns to the budget.
    pub fn release(&mut self, split: Split) {
        self.device_live_bytes -= split.device_bytes;
    }

    /// Count `ns` spent placing an allocation.
    pub fn add_placing_ns(&mut self, ns: u64) {
        self.summary.placing_ns += ns;
    }

    /// GPU-tier bytes of the live allocations.
    pub fn device_live_bytes(&self) -> u64 {
        self.device_live_bytes
    }

    /// What the tiers did so far.
    pub fn summary(&self) -> TierSummary {
        self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn small_allocations_migrate_and_large_ones_fill_the_gpu_first() {
        let mut t = Tiers::new(1024 * MIB);
        assert_eq!(t.split(TIER_MIN_BYTES - 1), None);
        let whole = t.split(600 * MIB).unwrap();
        assert_eq!(
            whole,
            Split {
                device_bytes: 600 * MIB,
                host_bytes: 0
            }
        );
        // 424 MiB left: the next one's GPU part stops there, in whole blocks.
        let cut = t.split(1000 * MIB + 5).unwrap();
        assert_eq!(cut.device_bytes, 424 * MIB);
        assert_eq!(cut.host_bytes, 576 * MIB + 5);
        assert_eq!(t.split(100 * MIB).unwrap().device_bytes, 0);
        t.release(whole);
        assert_eq!(t.device_live_bytes(), 424 * MIB);
        assert_eq!(t.split(100 * MIB).unwrap().device_bytes, 100 * MIB);
        let s = t.summary();
        assert_eq!(s.tiered_allocations, 4);
        assert_eq!(s.peak_device_bytes, 1024 * MIB);
        assert_eq!(s.host_bytes_placed, 576 * MIB + 5 + 100 * MIB);
    }

    #[test]
    fn the_default_budget_leaves_headroom() {
        assert_eq!(Tiers::default_budget(1 << 30), 0);
        assert_eq!(Tiers::default_budget(80 << 30), 75 << 30);
        assert_eq!(Tiers::default_budget(16 << 30), 14 << 30);
    }

    proptest! {
        /// Against a model that keeps every live split: the budget holds, each split covers its
        /// allocation, GPU parts are whole blocks unless whole, and the live sum is the model's.
        #[test]
        fn splits_follow_the_model(
            budget_blocks in 0u64..200,
            steps in proptest::collection::vec((any::<bool>(), 0u64..(600 * MIB), any::<prop::sample::Index>()), 1..60),
        ) {
            let budget = budget_blocks * VABLOCK_BYTES;
            let mut t = Tiers::new(budget);
            let mut live: Vec<Split> = Vec::new();
            for (alloc, bytes, pick) in steps {
                if alloc || live.is_empty() {
                    let free_before = budget - t.device_live_bytes();
                    match t.split(bytes) {
                        None => prop_assert!(bytes < TIER_MIN_BYTES),
                        Some(s) => {
                            prop_assert_eq!(s.device_bytes + s.host_bytes, bytes);
                            prop_assert!(s.device_bytes <= free_before);
                            prop_assert!(s.device_bytes == bytes || s.device_bytes % VABLOCK_BYTES == 0);
                            // As much as fits: less than a block left unused when cut.
                            prop_assert!(s.device_bytes == bytes || free_before - s.device_bytes < VABLOCK_BYTES);
                            live.push(s);
                        }
                    }
                } else {
                    t.release(live.swap_remove(pick.index(live.len())));
                }
                prop_assert_eq!(t.device_live_bytes(), live.iter().map(|s| s.device_bytes).sum::<u64>());
                prop_assert!(t.device_live_bytes() <= budget);
            }
        }
    }
}
