//! Property tests: random traces and settings; after every event the simulator's invariants
//! hold, the GPU never holds more than fits, no batch moves more than fits, and every page a
//! kernel touched is on the GPU or left it (evicted or taken back by the host).

use proptest::prelude::*;
use uvmsim::{
    Allocation, Kernel, PrefetchParams, SimConfig, SimError, Simulator, Trace, WarpTrace,
};

const BASE: u64 = 1 << 32;
const SPACING: u64 = 8 << 20;

#[derive(Clone, Debug)]
enum Step {
    Host {
        alloc: usize,
        from: u64,
        len: u64,
    },
    Kernel {
        warps: Vec<Vec<(usize, u64, Vec<u64>)>>,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let host = (0usize..3, 0u64..1 << 23, 1u64..1 << 22)
        .prop_map(|(alloc, from, len)| Step::Host { alloc, from, len });
    // An instruction: an allocation, an anchor, and lane offsets within 1 MiB of it.
    let instruction = (
        0usize..3,
        0u64..1 << 23,
        prop::collection::vec(0u64..1 << 20, 1..32),
    );
    let kernel = prop::collection::vec(prop::collection::vec(instruction, 1..12), 1..40)
        .prop_map(|warps| Step::Kernel { warps });
    prop_oneof![host, kernel]
}

fn config() -> impl Strategy<Value = SimConfig> {
    (
        prop::option::of(2u64..9),
        prop_oneof![Just(1usize), Just(8), Just(256)],
        1usize..64,
        any::<bool>(),
        1u32..=100,
        prop_oneof![Just(1usize), Just(5), Just(32), Just(256)],
    )
        .prop_map(
            |(chunks, batch, warps, prefetch, threshold, ready)| SimConfig {
                prefetch: PrefetchParams {
                    enabled: prefetch,
                    threshold,
                    ..PrefetchParams::default()
                },
                batch_count: batch,
                ready_entries: ready,
                gpu_capacity: chunks.map(|c| c * (2 << 20)),
                resident_warps: warps,
                record_batches: true,
                ..SimConfig::default()
            },
        )
}

fn run(sizes: [u64; 3], config: SimConfig, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let allocations: Vec<Allocation> = sizes
        .iter()
        .enumerate()
        .map(|(i, &units)| Allocation {
            base: BASE + i as u64 * SPACING,
            bytes: units * (64 << 10),
        })
        .collect();
    let trace = Trace {
        allocations: allocations.clone(),
        events: vec![],
    };
    let capacity = config.gpu_capacity;
    let mut sim = Simulator::new(config, &trace).unwrap();
    // An address inside allocation `a`, `offset` folded into it.
    let inside = |a: usize, offset: u64| allocations[a].base + offset % allocations[a].bytes;
    for step in steps {
        match step {
            Step::Host { alloc, from, len } => {
                let start = inside(alloc, from);
                let end = (start + len).min(allocations[alloc].base + allocations[alloc].bytes);
                sim.host_touch(start, end - start).unwrap();
            }
            Step::Kernel { warps } => {
                let warps = warps
                    .into_iter()
                    .map(|instructions| {
                        let mut w = WarpTrace::default();
                        for (a, anchor, lanes) in instructions {
                            let start = inside(a, anchor);
                            let end = allocations[a].base + allocations[a].bytes;
                            let addresses: Vec<u64> =
                                lanes.iter().map(|l| (start + l).min(end - 1)).collect();
                            w.push(&addresses);
                        }
                        w
                    })
                    .collect();
                match sim.kernel(&Kernel {
                    name: "k".into(),
                    warps,
                }) {
                    Ok(()) => {}
                    // An instruction spanning more blocks than fit is refused, never mishandled.
                    Err(SimError::CapacityTooSmall { needed, capacity }) => {
                        prop_assert!(needed > capacity)
                    }
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                }
            }
        }
        sim.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(sim.lost_pages(), 0);
        if let Some(bytes) = capacity {
            prop_assert!(sim.gpu_pages() as u64 * 4096 <= bytes);
            prop_assert!(sim.batch_htod_bytes().iter().all(|&b| b <= bytes));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_gpu_never_holds_more_than_fits_and_no_touched_page_is_lost(
        sizes in [1u64..97, 1u64..97, 1u64..97],
        config in config(),
        steps in prop::collection::vec(step(), 1..8),
    ) {
        run(sizes, config, steps)?;
    }
}
