//! The driver's worked cases, through the whole simulator.

use uvmsim::{Allocation, Event, Kernel, SimConfig, Simulator, Trace, WarpTrace};

const BASE: u64 = 1 << 30;
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn config() -> SimConfig {
    SimConfig {
        record_batches: true,
        ..SimConfig::default()
    }
}

/// A kernel of one warp whose instructions each access one address.
fn one_warp(addresses: impl IntoIterator<Item = u64>) -> Kernel {
    let mut warp = WarpTrace::default();
    for a in addresses {
        warp.push(&[a]);
    }
    Kernel {
        name: "k".into(),
        warps: vec![warp],
    }
}

/// A simulator over one allocation whose pages the host wrote first.
fn host_first(bytes: u64, sim_config: SimConfig) -> Simulator {
    let trace = Trace {
        allocations: vec![Allocation { base: BASE, bytes }],
        events: vec![],
    };
    let mut sim = Simulator::new(sim_config, &trace).unwrap();
    sim.host_touch(BASE, bytes).unwrap();
    sim
}

#[test]
fn an_isolated_fault_moves_64_kib() {
    let mut sim = host_first(2 * MIB, config());
    sim.kernel(&one_warp([BASE + 100 * 4096])).unwrap();
    assert_eq!(sim.batch_htod_bytes(), [64 * KIB]);
    assert_eq!(sim.counts().faults_raw, 1);
    assert_eq!(sim.counts().htod_copies, 1);
}

#[test]
fn a_sequential_walk_through_a_fresh_block_doubles() {
    let mut sim = host_first(2 * MIB, config());
    sim.kernel(&one_warp((0..512).map(|p| BASE + p * 4096)))
        .unwrap();
    assert_eq!(
        sim.batch_htod_bytes(),
        [64 * KIB, 64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB, MIB]
    );
    assert_eq!(sim.counts().instructions, 512);
    assert_eq!(
        sim.counts().htod_copies,
        6,
        "one run of adjacent pages per batch"
    );
    sim.check_invariants().unwrap();
}

#[test]
fn a_warptree_with_an_empty_padding_half_never_pulls_in_its_neighbour() {
    // A 256 KiB warptree at the start of its 512 KiB aligned region; the neighbouring warp's data
    // from 512 KiB on. Touching every page of the warptree, in any order, moves it alone.
    let mut sim = host_first(2 * MIB, config());
    let order = (0..64u64).map(|i| (i * 37) % 64);
    sim.kernel(&one_warp(order.map(|p| BASE + p * 4096)))
        .unwrap();
    assert_eq!(sim.counts().htod_bytes(), 256 * KIB);
    assert_eq!(sim.gpu_pages(), 64);
}

#[test]
fn eviction_takes_the_chunk_populated_first_not_the_least_recently_used() {
    let capacity = SimConfig {
        gpu_capacity: Some(4 * MIB),
        ..config()
    };
    let mut sim = host_first(6 * MIB, capacity);
    let (a, b, c) = (BASE, BASE + 2 * MIB, BASE + 4 * MIB);
    // A, then B, then A again (a hit: A is now the most recently used), then C.
    sim.kernel(&one_warp([a, b, a, c])).unwrap();
    assert_eq!(sim.counts().evictions, 1);
    assert_eq!(
        sim.counts().dtoh_eviction_bytes,
        64 * KIB,
        "A's big page went back"
    );
    // B is still there (no fault); A faults again.
    let before = sim.counts().faults_raw;
    sim.kernel(&one_warp([b])).unwrap();
    assert_eq!(sim.counts().faults_raw, before);
    sim.kernel(&one_warp([a])).unwrap();
    assert_eq!(sim.counts().faults_raw, before + 1);
    assert_eq!(sim.lost_pages(), 0);
    sim.check_invariants().unwrap();
}

#[test]
fn pages_resident_nowhere_are_zero_filled_without_a_transfer() {
    let trace = Trace {
        allocations: vec![Allocation {
            base: BASE,
            bytes: 2 * MIB,
        }],
        events: vec![Event::Kernel(one_warp([BASE + 8192]))],
    };
    let report = Simulator::run(config(), &trace).unwrap();
    assert_eq!(report.total.htod_bytes(), 0);
    assert_eq!(report.total.zero_filled_pages, 16);
    assert_eq!(report.peak_gpu_bytes, 2 * MIB);
}

#[test]
fn prefetch_off_moves_only_the_faulted_pages() {
    let mut off = config();
    off.prefetch.enabled = false;
    let mut sim = host_first(2 * MIB, off);
    sim.kernel(&one_warp([BASE, BASE + 4096])).unwrap();
    assert_eq!(sim.batch_htod_bytes(), [4 * KIB, 4 * KIB]);
}

#[test]
fn a_batch_collects_the_faults_of_every_running_warp() {
    // 300 warps each fault on their own page of six 2 MiB blocks; with every entry ready, the
    // first batch takes 256 entries, the second the other 44.
    let whole_batches = SimConfig {
        ready_entries: 256,
        ..config()
    };
    let mut sim = host_first(12 * MIB, whole_batches);
    let warps = (0..300u64)
        .map(|w| {
            let mut t = WarpTrace::default();
            t.push(&[BASE + w * 10 * 4096]);
            t
        })
        .collect();
    sim.kernel(&Kernel {
        name: "k".into(),
        warps,
    })
    .unwrap();
    assert_eq!(sim.counts().faults_raw, 300);
    assert_eq!(sim.counts().batches, 2);
}

/// A host-written 2 MiB block read by one warp instruction (one address per lane), replayed
/// with fetches of `ready_entries`.
fn one_instruction_over_a_block(ready_entries: usize, lanes: &[u64]) -> Simulator {
    let mut sim = host_first(
        2 * MIB,
        SimConfig {
            ready_entries,
            ..config()
        },
    );
    let mut warp = WarpTrace::default();
    warp.push(lanes);
    sim.kernel(&Kernel {
        name: "row".into(),
        warps: vec![warp],
    })
    .unwrap();
    sim
}

#[test]
fn a_fetch_takes_only_the_entries_that_are_ready() {
    // One warp reads one page of each 64 KiB big page of a block at once (an arranged row).
    let lanes: Vec<u64> = (0..32).map(|l| BASE + l * 64 * KIB).collect();
    let row = |ready_entries| one_instruction_over_a_block(ready_entries, &lanes);
    // All 32 faults in one batch: every big page faulted, the whole block in one copy.
    let whole = row(256);
    assert_eq!(whole.batch_htod_bytes(), [2 * MIB]);
    assert_eq!(whole.counts().htod_copies, 1);
    // Eight at a time: the first two batches each fill a 512 KiB node (half of a 1 MiB node,
    // not over 51%), the third tips the block over the threshold and brings the rest.
    let eights = row(8);
    assert_eq!(eights.batch_htod_bytes(), [512 * KIB, 512 * KIB, MIB]);
    assert_eq!(eights.counts().batches, 3);
    assert_eq!(eights.counts().blocks_serviced, 3);
    assert_eq!(eights.counts().htod_copies, 3);
    assert_eq!(eights.counts().faults_coalesced, 24);
}

#[test]
fn a_fetch_that_stops_early_takes_the_first_lanes_pages() {
    // Lanes 0-15 read the even 64 KiB big pages of a block, lanes 16-31 the odd ones. Eight
    // entries at a time, in lane order: eight even big pages of the lower half (no node over
    // 51%, eight separate copies), then eight of the upper half, then the odd ones of the lower
    // half tip the block over the threshold and every odd big page arrives, one copy each. In
    // address order the batches would have been three runs of adjacent big pages, three copies.
    let lanes: Vec<u64> = (0..32)
        .map(|l| BASE + ((l % 16) * 2 + l / 16) * 64 * KIB)
        .collect();
    let sim = one_instruction_over_a_block(8, &lanes);
    assert_eq!(sim.batch_htod_bytes(), [512 * KIB, 512 * KIB, MIB]);
    assert_eq!(sim.counts().htod_copies, 8 + 8 + 16);
}

#[test]
fn bad_traces_are_refused() {
    let overlapping = Trace {
        allocations: vec![
            Allocation {
                base: BASE,
                bytes: 4 * MIB,
            },
            Allocation {
                base: BASE + 2 * MIB,
                bytes: MIB,
            },
        ],
        events: vec![],
    };
    assert!(Simulator::new(config(), &overlapping).is_err());
    let mut sim = host_first(2 * MIB, config());
    assert!(sim.kernel(&one_warp([BASE + 4 * MIB])).is_err());
    assert!(sim.host_touch(BASE - 4096, 8192).is_err());
}
