//! The block table's two ways of pointing runs of blocks at a slab (`detail/cache.cuh`):
//! `cache_map_blocks`, which a slab's return uses (a relaxed look at each block's first probe, a
//! block whose key is not there taking the full probe), against `cache_map_block` one block
//! after the other, which the differential test holds equal to the CPU warps' twin. On a table
//! small enough that keys collide, the same runs must leave the same words, every key where the
//! one-by-one way put it.

use std::sync::Arc;

use hostcheck::caches::HostCaches;
use hostcheck::cases::Rng;
use orchestrator::caches::device::hash_home;
use orchestrator::caches::{CacheChannel, CpuCaches};

/// The block table's index among the device arrays.
const BLOCK_TABLE: usize = 10;

fn table(caches: &CpuCaches) -> Vec<u64> {
    caches
        .save(BLOCK_TABLE)
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn runs_mapped_as_a_return_leave_the_table_as_one_by_one() {
    // An arena of 8 blocks: the smallest table (64 entries), so the runs below collide.
    let channel = Arc::new(CacheChannel::new(4));
    let returning = CpuCaches::new(channel.clone(), 8);
    let single = CpuCaches::new(channel.clone(), 8);
    let (b, s) = (
        HostCaches::new(&returning, &channel),
        HostCaches::new(&single, &channel),
    );
    let len = table(&returning).len();
    assert_eq!(len, 64);
    let mut rng = Rng(0x5EED_B10C);
    let mut away_and_mapped_again = 0u32;
    for step in 0..1500 {
        // Keys are never removed: 48 block numbers at most, so the table never fills. Runs of
        // up to 20 blocks, more than a slab has.
        let first = rng.below(40);
        let count = rng.range(1, 48 - first);
        let value = if rng.chance(40) {
            0
        } else {
            rng.range(1, 1000) as u32
        };
        let before = table(&single);
        b.map_blocks(first, count.min(20), value, true);
        s.map_blocks(first, count.min(20), value, false);
        let (after_b, after_s) = (table(&returning), table(&single));
        assert_eq!(
            after_b, after_s,
            "step {step}: blocks {first}+{count} -> {value}"
        );
        // A key already in the table away from its first probe: the return's full probe.
        away_and_mapped_again += (first..first + count.min(20))
            .filter(|&block| {
                let home = hash_home(block, len);
                before[home] >> 32 != block + 1 && before.iter().any(|&e| e >> 32 == block + 1)
            })
            .count() as u32;
    }
    assert!(
        away_and_mapped_again > 100,
        "keys away from their first probe mapped again: {away_and_mapped_again}"
    );
}
