//! The pool against a model of what the program holds: random managed allocations (packed and
//! block-sized), frees, second frees, interior frees and foreign frees, with the arena growing
//! to a cap and past it. After every step no two live allocations share a byte, the pool's
//! answers about every live allocation (owner, range) are the model's, and the resolver's
//! invariants hold.

use std::collections::BTreeMap;

use orchestrator::LaneStatus;
use proptest::prelude::*;
use wrap::pool::{Owner, PoolFree};
use wrap::tiers::{Split, TIER_MIN_BYTES};
use wrap::{Origin, PastCap, Placement, Pool, PoolAlloc, Reserve, WrapOptions};

/// Reservations at made-up addresses, a gap apart (never block aligned, as the driver's need
/// not be); refusals after `refuse_after` of them.
struct Addresses {
    next: u64,
    made: u32,
    refuse_after: u32,
}

impl Addresses {
    /// From `next`, refusing after `refuse_after` reservations.
    fn from(next: u64, refuse_after: u32) -> Self {
        Self {
            next,
            made: 0,
            refuse_after,
        }
    }
}

impl Reserve for Addresses {
    fn reserve(&mut self, bytes: u64) -> Result<u64, i32> {
        if self.made == self.refuse_after {
            return Err(2);
        }
        self.made += 1;
        let base = self.next;
        self.next += bytes + (3 << 20) + 4096;
        Ok(base)
    }
    fn gpu_free_bytes(&mut self) -> Option<u64> {
        Some(64 << 20)
    }
}

#[derive(Clone, Debug)]
enum Step {
    Alloc(u64),
    Free(usize),
    FreeAgain(usize),
    Interior(usize, u64),
    Foreign(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => prop_oneof![1u64..4096, 4096u64..(70 << 10), (64u64 << 10) + 1..(9u64 << 20)].prop_map(Step::Alloc),
        3 => any::<usize>().prop_map(Step::Free),
        1 => any::<usize>().prop_map(Step::FreeAgain),
        1 => (any::<usize>(), 1u64..100_000).prop_map(|(p, d)| Step::Interior(p, d)),
        1 => any::<u64>().prop_map(Step::Foreign),
    ]
}

/// `bytes` through [`Pool::alloc`] (odd sizes) or, as the preload does, [`Pool::try_alloc`]
/// with the driver's reservation made between the two calls (even sizes). A growth never takes
/// the reservations past the cap.
fn alloc_either_way(
    pool: &mut Pool<Addresses>,
    bytes: u64,
    now: u64,
) -> Result<PoolAlloc, TestCaseError> {
    if bytes % 2 == 1 {
        return Ok(pool.alloc(bytes, now, None));
    }
    Ok(match pool.try_alloc(bytes, now, None, true) {
        PoolAlloc::Grow(growth) => {
            prop_assert!(pool.counters().reserved_bytes + growth.bytes <= pool.cap());
            let reserved = pool.reserve_mut().reserve(growth.bytes);
            pool.finish_growth(growth, reserved);
            pool.try_alloc(bytes, now, None, false)
        }
        placed => placed,
    })
}

fn run(steps: Vec<Step>, past_cap: PastCap, refuse_after: u32) -> Result<(), TestCaseError> {
    let options = WrapOptions {
        arena_bytes: 4 << 20,
        max_arena_bytes: Some(40 << 20),
        past_cap,
        ..WrapOptions::default()
    };
    let mut pool = Pool::new(&options, Addresses::from((1 << 40) + 12345, refuse_after));
    // Live arena allocations: base -> bytes; freed bases.
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    let mut freed: Vec<u64> = Vec::new();
    let mut driver_next = 1u64 << 20;
    for (now, step) in steps.into_iter().enumerate() {
        let now = now as u64;
        match step {
            Step::Alloc(bytes) => match alloc_either_way(&mut pool, bytes, now)? {
                PoolAlloc::Arena(base) => {
                    let align = if bytes > (64 << 10) { 2 << 20 } else { 256 };
                    prop_assert_eq!(base % align, 0);
                    if let Some((&b, &n)) = live.range(..base + bytes).next_back() {
                        prop_assert!(
                            b + n <= base,
                            "{:#x}+{} overlaps {:#x}+{}",
                            base,
                            bytes,
                            b,
                            n
                        );
                    }
                    live.insert(base, bytes);
                }
                PoolAlloc::Driver(origin) => {
                    prop_assert_eq!(origin, Origin::DriverPastCap);
                    prop_assert_eq!(past_cap, PastCap::Driver);
                    // The driver's addresses lie outside the arena.
                    pool.record_driver(driver_next, bytes, origin, now, None);
                    prop_assert_eq!(pool.owner(driver_next), Owner::Driver);
                    prop_assert_eq!(pool.free(driver_next, now), PoolFree::Driver);
                    pool.record_driver_free(driver_next, now);
                    driver_next += bytes + 1;
                }
                PoolAlloc::OutOfMemory => prop_assert_eq!(past_cap, PastCap::Fail),
                PoolAlloc::Grow(_) => prop_assert!(false, "a second growth for one allocation"),
            },
            Step::Free(pick) if !live.is_empty() => {
                let base = *live.keys().nth(pick % live.len()).unwrap();
                live.remove(&base);
                prop_assert_eq!(pool.free(base, now), PoolFree::Freed);
                freed.push(base);
            }
            Step::FreeAgain(pick) if !freed.is_empty() => {
                let base = freed[pick % freed.len()];
                if !live.contains_key(&base) {
                    prop_assert!(matches!(
                        pool.free(base, now),
                        PoolFree::Refused(_) | PoolFree::Driver
                    ));
                }
            }
            Step::Interior(pick, delta) if !live.is_empty() => {
                let (&base, &bytes) = live.iter().nth(pick % live.len()).unwrap();
                if bytes > 1 {
                    let inner = base + 1 + delta % (bytes - 1);
                    prop_assert_eq!(
                        pool.free(inner, now),
                        PoolFree::Refused(LaneStatus::InteriorPointer)
                    );
                }
            }
            Step::Foreign(address) => {
                let address = address % (1 << 39);
                prop_assert_eq!(pool.owner(address), Owner::Driver);
                prop_assert_eq!(pool.free(address, now), PoolFree::Driver);
            }
            _ => {}
        }
        for (&base, &bytes) in &live {
            let owner = Owner::Allocation {
                base,
                bytes,
                id: match pool.owner(base) {
                    Owner::Allocation { id, .. } => id,
                    other => return Err(TestCaseError::fail(format!("{base:#x}: {other:?}"))),
                },
            };
            prop_assert_eq!(pool.owner(base + bytes - 1), owner);
            prop_assert_eq!(pool.range(base, bytes), Ok(owner));
            prop_assert!(pool.range(base, bytes + 1).is_err());
        }
        prop_assert_eq!(pool.check(), Ok(()));
        prop_assert!(pool.counters().reserved_bytes <= 40 << 20, "the cap holds");
    }
    for &base in live.keys() {
        prop_assert_eq!(pool.free(base, 1 << 40), PoolFree::Freed);
    }
    prop_assert_eq!(pool.summary().live_allocations, 0);
    prop_assert_eq!(pool.check(), Ok(()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_pool_hands_out_disjoint_memory_and_answers_as_the_driver(steps in prop::collection::vec(step(), 1..200)) {
        run(steps, PastCap::Driver, u32::MAX)?;
    }

    #[test]
    fn past_its_cap_the_pool_fails_when_asked(steps in prop::collection::vec(step(), 1..200)) {
        run(steps, PastCap::Fail, u32::MAX)?;
    }

    #[test]
    fn a_driver_that_refuses_to_grow_the_arena_is_a_cap(steps in prop::collection::vec(step(), 1..120)) {
        run(steps, PastCap::Driver, 1)?;
    }
}

#[test]
fn traffic_goes_to_the_allocation_that_held_its_address_at_its_time() {
    use wrap::report::{Traffic, TrafficKind};
    let mut pool = Pool::new(&WrapOptions::default(), Addresses::from(1 << 40, u32::MAX));
    let PoolAlloc::Arena(a) = pool.alloc(1 << 20, 10, None) else {
        panic!()
    };
    assert_eq!(pool.free(a, 20), PoolFree::Freed);
    let PoolAlloc::Arena(b) = pool.alloc(1 << 20, 30, None) else {
        panic!()
    };
    let t = |address, start_ns, value| Traffic {
        kind: TrafficKind::HtoD,
        value,
        address,
        start_ns,
    };
    let mut traffic = vec![
        t(a + 5, 15, 100),
        t(b + 5, 35, 7),
        t(a + (1 << 20) + 5, 15, 1),
        t(a, 25, 3),
    ];
    let (rows, total, unattributed) = pool.attribute(&mut traffic, 1.0);
    assert_eq!(total.htod_bytes, 111);
    let first = rows.iter().find(|r| r.id == 1).unwrap();
    let second = rows.iter().find(|r| r.id == 2).unwrap();
    assert_eq!(first.counts.htod_bytes, 100);
    assert_eq!(second.counts.htod_bytes, 7);
    // Past the first's end, and between the two lives.
    assert_eq!(unattributed.htod_bytes, 1 + 3);
    assert_eq!(rows[0].id, 1, "most traffic first");
}

/// With tiered placement, against a model of the device tier: every allocation of at least
/// [`TIER_MIN_BYTES`] gets the GPU part the budget has left (whole blocks when cut), smaller ones
/// and slab objects none, a free gives it back, and the summary adds up.
fn run_tiered(steps: Vec<(bool, u64, usize)>, budget: u64) -> Result<(), TestCaseError> {
    let options = WrapOptions {
        oversubscribe: true,
        placement: Placement::Tiered,
        device_tier_bytes: Some(budget),
        ..WrapOptions::default()
    };
    let mut pool = Pool::new(&options, Addresses::from((1 << 40) + 12345, u32::MAX));
    let mut live: BTreeMap<u64, (u64, Option<Split>)> = BTreeMap::new();
    let (mut gpu_live, mut placed) = (0u64, (0u64, 0u64, 0u64));
    for (now, (alloc, bytes, pick)) in steps.into_iter().enumerate() {
        if alloc || live.is_empty() {
            let PoolAlloc::Arena(base) = pool.alloc(bytes, now as u64, None) else {
                return Err(TestCaseError::fail("an unlimited arena placed nothing"));
            };
            let want = (bytes >= TIER_MIN_BYTES).then(|| {
                let left = budget - gpu_live;
                let device_bytes = if bytes <= left {
                    bytes
                } else {
                    left - left % (2 << 20)
                };
                Split {
                    device_bytes,
                    host_bytes: bytes - device_bytes,
                }
            });
            prop_assert_eq!(pool.split_of(base), want);
            if let Some(s) = want {
                gpu_live += s.device_bytes;
                placed = (
                    placed.0 + 1,
                    placed.1 + s.device_bytes,
                    placed.2 + s.host_bytes,
                );
            }
            live.insert(base, (bytes, want));
        } else {
            let base = *live.keys().nth(pick % live.len()).unwrap();
            let (_, split) = live.remove(&base).unwrap();
            prop_assert_eq!(pool.free(base, now as u64), PoolFree::Freed);
            prop_assert_eq!(pool.split_of(base), None);
            gpu_live -= split.map_or(0, |s| s.device_bytes);
        }
        prop_assert!(gpu_live <= budget);
        prop_assert_eq!(pool.check(), Ok(()));
    }
    let tiers = pool
        .summary()
        .tiers
        .expect("tiered placement reports its tiers");
    prop_assert_eq!(tiers.budget_bytes, budget);
    prop_assert_eq!(
        (
            tiers.tiered_allocations,
            tiers.device_bytes_placed,
            tiers.host_bytes_placed
        ),
        placed
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn tiered_placement_splits_large_allocations_within_the_gpu_budget(
        steps in prop::collection::vec(
            (any::<bool>(), prop_oneof![1u64..8192, (1u64 << 20)..(300 << 20)], any::<usize>()),
            1..80,
        ),
        budget_blocks in 0u64..400,
    ) {
        run_tiered(steps, budget_blocks * (2 << 20))?;
    }
}

#[test]
fn without_tiered_placement_nothing_is_split() {
    let mut pool = Pool::new(
        &WrapOptions {
            oversubscribe: true,
            ..WrapOptions::default()
        },
        Addresses::from(1 << 40, u32::MAX),
    );
    let PoolAlloc::Arena(a) = pool.alloc(1 << 30, 1, None) else {
        panic!()
    };
    assert_eq!(pool.split_of(a), None);
    assert_eq!(pool.summary().tiers, None);
}
