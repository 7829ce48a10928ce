//! The resolver against a reference of what was handed out: random allocations of every class in
//! both layouts, and frees that are valid, double, stale, foreign, interior or forged. After every
//! step the resolver's invariants hold and no two live lane objects share a byte; at the end,
//! after freeing everything, the structures are empty.

use std::collections::BTreeMap;

use bytemuck::Zeroable;
use orchestrator::records::CONTIGUOUS_LAYOUT;
use orchestrator::{
    Allocation, LaneStatus, Op, ReplyRecord, RequestRecord, Resolver, ResolverConfig, Status,
};
use proptest::prelude::*;
use translator::{Arrangement, Geometry, Handle, HandleKind, SizeClass, SlotOrder};

const BASE: u64 = 1 << 40;
const BLOCKS: usize = 48;

fn resolver() -> Resolver {
    let mut config = ResolverConfig::new(BASE, BLOCKS);
    config.small_blocks = 2;
    Resolver::new(config).unwrap()
}

/// The same capacity in two segments with a gap between them: a small first one and a second
/// added as the arena grows.
fn segmented_resolver() -> Resolver {
    let mut config = ResolverConfig::new(BASE, 8);
    config.small_blocks = 1;
    let mut r = Resolver::new(config).unwrap();
    r.add_segment(BASE + (64 << 21), BLOCKS - 8).unwrap();
    r
}

/// A resolver that reuses freed places at once, to test generations on exact reuse: freed
/// places go straight back to the trees, so placement is leftmost-first, as the tests that build
/// a layout on purpose need.
fn resolver_without_quarantine() -> Resolver {
    let mut config = ResolverConfig::new(BASE, BLOCKS);
    config.small_blocks = 2;
    config.quarantine_chunks = 0;
    config.recycle_small = false;
    Resolver::new(config).unwrap()
}

/// The byte ranges of one lane object of `size` bytes behind `h`.
fn ranges(h: Handle, size: u64) -> Vec<(u64, u64)> {
    match h.kind() {
        HandleKind::Arranged => {
            let tile = 1u64 << h.tile_log2();
            (0..size.div_ceil(tile))
                .map(|k| {
                    let start = h.translate(k * tile);
                    (start, start + tile.min(size - k * tile))
                })
                .collect()
        }
        _ => vec![(h.address(), h.address() + size)],
    }
}

/// Live lane objects by start address -> (end, owner id), to find overlaps.
#[derive(Default)]
struct Occupancy(BTreeMap<u64, (u64, u64)>);

impl Occupancy {
    fn insert(&mut self, owner: u64, start: u64, end: u64) -> Result<(), TestCaseError> {
        if let Some((&s, &(e, o))) = self.0.range(..end).next_back() {
            prop_assert!(
                e <= start || s >= end,
                "objects {o} and {owner} overlap at {start:#x}"
            );
        }
        self.0.insert(start, (end, owner));
        Ok(())
    }

    fn remove(&mut self, start: u64) {
        self.0.remove(&start);
    }
}

#[derive(Clone, Debug)]
enum Step {
    Alloc {
        class: u8,
        mask: u32,
        seed: u64,
        contiguous: bool,
    },
    Free {
        pick: usize,
    },
    DoubleFree {
        pick: usize,
    },
    /// Free every live lane of one chunk in one request (the whole-chunk path when no lane was
    /// freed before), with a freed handle on another lane when `stale` is set.
    FreeWarp {
        pick: usize,
        stale: Option<usize>,
    },
    Interior {
        pick: usize,
        delta: u64,
        by_pointer: bool,
    },
    /// Free a live object by its address (`free(void*)`), from any lane.
    FreeByPointer {
        pick: usize,
        lane: u32,
    },
    /// Free a freed object again by its address.
    DoubleFreeByPointer {
        pick: usize,
    },
    Foreign {
        address: u64,
    },
    ForgeLane {
        pick: usize,
        lane: u32,
    },
    BadRequest {
        op: u32,
        mask: u32,
    },
    /// One plain object (`Resolver::alloc_plain`): packed small, or a run of whole blocks.
    AllocPlain {
        large: bool,
        seed: u64,
    },
    /// Free a plain object by its address, then (maybe) again, or by an address inside it.
    FreePlain {
        pick: usize,
        again: bool,
        delta: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..4, any::<u32>(), any::<u64>(), any::<bool>())
            .prop_map(|(class, mask, seed, contiguous)| Step::Alloc { class, mask, seed, contiguous }),
        6 => any::<usize>().prop_map(|pick| Step::Free { pick }),
        1 => any::<usize>().prop_map(|pick| Step::DoubleFree { pick }),
        2 => (any::<usize>(), prop::option::of(any::<usize>()))
            .prop_map(|(pick, stale)| Step::FreeWarp { pick, stale }),
        1 => (any::<usize>(), 1u64..5000, any::<bool>())
            .prop_map(|(pick, delta, by_pointer)| Step::Interior { pick, delta, by_pointer }),
        3 => (any::<usize>(), 0u32..32).prop_map(|(pick, lane)| Step::FreeByPointer { pick, lane }),
        1 => any::<usize>().prop_map(|pick| Step::DoubleFreeByPointer { pick }),
        1 => any::<u64>().prop_map(|address| Step::Foreign { address }),
        1 => (any::<usize>(), 0u32..32).prop_map(|(pick, lane)| Step::ForgeLane { pick, lane }),
        1 => (any::<u32>(), prop_oneof![Just(0u32), any::<u32>()]).prop_map(|(op, mask)| Step::BadRequest { op, mask }),
        3 => (any::<bool>(), any::<u64>()).prop_map(|(large, seed)| Step::AllocPlain { large, seed }),
        2 => (any::<usize>(), any::<bool>(), 0u64..3000).prop_map(|(pick, again, delta)| Step::FreePlain { pick, again, delta }),
    ]
}

/// Lane sizes of a class: 0 small, 1 portion, 2 large, 3 over the per-lane limit on one lane.
fn sizes_for(class: u8, mask: u32, seed: u64) -> [u64; 32] {
    let mut x = seed | 1;
    std::array::from_fn(|lane| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if mask >> lane & 1 == 0 || x.is_multiple_of(7) {
            return 0;
        }
        match class {
            0 => 1 + x % 2048,
            1 => 2049 + x % (30 << 10),
            2 => (32 << 10) + 1 + x % (200 << 10),
            _ if lane == 5 => (4 << 30) + 1,
            _ => 1 + x % 100,
        }
    })
}

fn alloc_request(op: Op, mask: u32, sizes: [u64; 32]) -> RequestRecord {
    RequestRecord {
        op: op as u32,
        lane_mask: mask,
        warp: 7,
        reserved: 0,
        words: sizes,
    }
}

fn free_one(r: &mut Resolver, lane: u32, h: Handle) -> LaneStatus {
    free_word(r, Op::Free, lane, h.0)
}

/// `free(void*)` of `address` from `lane`, through a request.
fn free_pointer(r: &mut Resolver, lane: u32, address: u64) -> LaneStatus {
    free_word(r, Op::FreePointer, lane, address)
}

fn free_word(r: &mut Resolver, op: Op, lane: u32, word: u64) -> LaneStatus {
    let mut words = [0u64; 32];
    words[lane as usize] = word;
    let reply = r.resolve(&RequestRecord {
        op: op as u32,
        lane_mask: 1 << lane,
        warp: 1,
        reserved: 0,
        words,
    });
    LaneStatus::from_code(reply.lane_status[lane as usize]).unwrap()
}

/// The resolver under test: the default one, two segments, one whose quarantine holds only
/// four chunks, so freed small runs reach the recycled lists and come back within a sequence, or
/// two tiers (objects of 4 KiB or more ask the first segment, the device tier, first; smaller
/// ones the second), so allocations skip segments and spill between them.
#[derive(Clone, Copy, Debug)]
enum Setup {
    Plain,
    Segmented,
    Recycling,
    Tiered,
}

fn run(steps: Vec<Step>, setup: Setup) -> Result<(), TestCaseError> {
    let mut r = match setup {
        Setup::Plain => resolver(),
        Setup::Segmented => segmented_resolver(),
        Setup::Recycling => {
            let mut config = ResolverConfig::new(BASE, BLOCKS);
            config.small_blocks = 1;
            config.quarantine_chunks = 4;
            Resolver::new(config).unwrap()
        }
        Setup::Tiered => {
            let mut config = ResolverConfig::new(BASE, 8);
            config.small_blocks = 1;
            config.tier = orchestrator::Tier::Device;
            config.placement = orchestrator::PlacementRule {
                hot_object_bytes: 4096,
            };
            let mut r = Resolver::new(config).unwrap();
            r.add_segment_in(BASE + (64 << 21), BLOCKS - 8, orchestrator::Tier::Host)
                .unwrap();
            r
        }
    };
    let mut occupied = Occupancy::default();
    // Live lane objects: (handle, size), and freed ones (for double frees).
    let mut live: Vec<(Handle, u64)> = Vec::new();
    let mut freed: Vec<Handle> = Vec::new();
    // Live plain objects: (address, size).
    let mut plain: Vec<(u64, u64)> = Vec::new();
    let mut next_owner = 0u64;
    for step in steps {
        match step {
            Step::Alloc {
                class,
                mask,
                seed,
                contiguous,
            } => {
                let sizes = match setup {
                    // One lane, three chunk lengths (1, 2, 3 units): one free empties a chunk,
                    // and freed runs find takers of their length.
                    Setup::Recycling if class == 0 => {
                        let mut one = [0u64; 32];
                        one[(seed % 32) as usize] = 256 * (1 + seed / 32 % 3);
                        one
                    }
                    _ => sizes_for(class, mask, seed),
                };
                let op = if contiguous {
                    Op::AllocContiguous
                } else {
                    Op::Alloc
                };
                let reply = r.resolve(&alloc_request(op, mask, sizes));
                let masked: [u64; 32] =
                    std::array::from_fn(|l| if mask >> l & 1 == 1 { sizes[l] } else { 0 });
                match Status::from_code(reply.status) {
                    Some(Status::Ok) => {
                        let handles = orchestrator::cpu::handles_from_reply(&reply, &masked);
                        // A request is packed when its chunk by the size-class table would be
                        // over twice the packed bytes (and small ones always are).
                        if let Some(table) = Geometry::of(&masked, &r.config().geometry).unwrap() {
                            let packed: u64 = masked.iter().map(|s| s.next_multiple_of(16)).sum();
                            let packs =
                                table.class == SizeClass::Small || table.chunk_bytes > 2 * packed;
                            prop_assert_eq!(reply.layout == CONTIGUOUS_LAYOUT, contiguous || packs);
                            prop_assert_eq!(reply.size_class == SizeClass::Small as u32, packs);
                        }
                        for lane in 0..32 {
                            prop_assert_eq!(handles[lane].is_null(), masked[lane] == 0);
                            if masked[lane] > 0 {
                                next_owner += 1;
                                for (s, e) in ranges(handles[lane], masked[lane]) {
                                    prop_assert!(
                                        r.segments().iter().any(|&(b, n)| s >= b && e <= b + n),
                                        "{s:#x}..{e:#x} in no segment"
                                    );
                                    occupied.insert(next_owner, s, e)?;
                                }
                                live.push((handles[lane], masked[lane]));
                            }
                        }
                    }
                    Some(Status::SizeOverLimit) => {
                        prop_assert!(masked.iter().any(|&s| s > 4 << 30))
                    }
                    Some(Status::EmptyMask) => prop_assert_eq!(mask, 0),
                    Some(Status::OutOfMemory) => {}
                    other => prop_assert!(false, "unexpected {other:?}"),
                }
            }
            Step::Free { pick } if !live.is_empty() => {
                let (h, size) = live.swap_remove(pick % live.len());
                prop_assert_eq!(free_one(&mut r, h.lane(), h), LaneStatus::Ok);
                for (s, _) in ranges(h, size) {
                    occupied.remove(s);
                }
                freed.push(h);
            }
            Step::FreeWarp { pick, stale } if !live.is_empty() => {
                let chunk = r.chunk_containing(live[pick % live.len()].0.address());
                prop_assert!(chunk.is_some(), "a live object lies in a live chunk");
                let (mine, rest): (Vec<_>, Vec<_>) = live
                    .drain(..)
                    .partition(|(h, _)| r.chunk_containing(h.address()) == chunk);
                live = rest;
                let mut words = [0u64; 32];
                for (h, _) in &mine {
                    words[h.lane() as usize] = h.0;
                }
                // A freed handle (never a live one: see DoubleFree) on a lane left free.
                let stale = stale
                    .filter(|_| !freed.is_empty())
                    .map(|i| freed[i % freed.len()])
                    .filter(|h| words[h.lane() as usize] == 0 && !live.iter().any(|(l, _)| l == h));
                if let Some(h) = stale {
                    words[h.lane() as usize] = h.0;
                }
                let mask = words
                    .iter()
                    .enumerate()
                    .fold(0u32, |m, (l, &w)| m | u32::from(w != 0) << l);
                let reply = r.resolve(&RequestRecord {
                    op: Op::Free as u32,
                    lane_mask: mask,
                    warp: 1,
                    reserved: 0,
                    words,
                });
                for (h, size) in mine {
                    let got = LaneStatus::from_code(reply.lane_status[h.lane() as usize]);
                    prop_assert_eq!(
                        got,
                        Some(LaneStatus::Ok),
                        "lane {} of a warp free",
                        h.lane()
                    );
                    for (s, _) in ranges(h, size) {
                        occupied.remove(s);
                    }
                    freed.push(h);
                }
                match stale {
                    Some(h) => {
                        let lane = h.lane() as usize;
                        prop_assert_eq!(Status::from_code(reply.status), Some(Status::Partial));
                        prop_assert_eq!(reply.failed_lanes, 1 << lane);
                        prop_assert_ne!(reply.lane_status[lane], LaneStatus::Ok as u8);
                    }
                    None => prop_assert_eq!(Status::from_code(reply.status), Some(Status::Ok)),
                }
            }
            Step::DoubleFree { pick } if !freed.is_empty() => {
                let h = freed[pick % freed.len()];
                // Unless the same address was handed out again with the same generation (127 reuses).
                if !live.iter().any(|(l, _)| *l == h) {
                    let got = free_one(&mut r, h.lane(), h);
                    prop_assert!(
                        matches!(
                            got,
                            LaneStatus::DoubleFree
                                | LaneStatus::InvalidHandle
                                | LaneStatus::InteriorPointer
                        ),
                        "double free of {h:?} gave {got:?}"
                    );
                    prop_assert_ne!(got, LaneStatus::Ok);
                }
            }
            Step::FreeByPointer { pick, lane } if !live.is_empty() => {
                let (h, size) = live.swap_remove(pick % live.len());
                prop_assert_eq!(free_pointer(&mut r, lane, h.address()), LaneStatus::Ok);
                for (s, _) in ranges(h, size) {
                    occupied.remove(s);
                }
                freed.push(h);
            }
            Step::DoubleFreeByPointer { pick } if !freed.is_empty() => {
                let h = freed[pick % freed.len()];
                // An address carries no generation: once a new object starts there, a free of
                // the address frees it.
                let starts_live = live.iter().any(|(l, _)| l.address() == h.address())
                    || plain.iter().any(|&(b, _)| b == h.address());
                if !starts_live {
                    let got = free_pointer(&mut r, (pick % 32) as u32, h.address());
                    prop_assert_ne!(got, LaneStatus::Ok, "second free of {:?}", h);
                }
            }
            Step::Interior {
                pick,
                delta,
                by_pointer,
            } if !live.is_empty() => {
                let (h, size) = live[pick % live.len()];
                let inner = Handle(h.0 + delta.min(size.max(2) - 1).max(1));
                let starts_live = live.iter().any(|(l, _)| l.address() == inner.address())
                    || plain.iter().any(|&(b, _)| b == inner.address());
                if !starts_live {
                    let got = if by_pointer {
                        free_pointer(&mut r, h.lane(), inner.address())
                    } else {
                        free_one(&mut r, inner.lane(), inner)
                    };
                    // Where an object of an earlier chunk started, the pointer is also that
                    // freed object's: a double free.
                    let once_a_start = freed.iter().any(|f| f.address() == inner.address());
                    prop_assert!(
                        matches!(got, LaneStatus::InteriorPointer | LaneStatus::InvalidHandle)
                            || (once_a_start && got == LaneStatus::DoubleFree),
                        "{got:?}"
                    );
                }
            }
            Step::Foreign { address } => {
                let h = Handle::plain(address % (1 << 39), (address % 32) as u32).unwrap();
                prop_assert_eq!(free_one(&mut r, h.lane(), h), LaneStatus::InvalidHandle);
                // A pointer outside the arena, of any width.
                if !r
                    .segments()
                    .iter()
                    .any(|&(b, n)| (b..b + n).contains(&address))
                {
                    prop_assert_eq!(
                        free_pointer(&mut r, h.lane(), address),
                        LaneStatus::InvalidHandle
                    );
                }
            }
            Step::ForgeLane { pick, lane } if !live.is_empty() => {
                let (h, _) = live[pick % live.len()];
                if lane != h.lane() {
                    let forged = Handle(h.0 & !(0x1f << 55) | u64::from(lane) << 55);
                    prop_assert_ne!(free_one(&mut r, lane, forged), LaneStatus::Ok);
                }
            }
            Step::BadRequest { op, mask } => {
                let reply = r.resolve(&RequestRecord {
                    op,
                    lane_mask: mask,
                    warp: 3,
                    reserved: 0,
                    words: [1; 32],
                });
                match Op::from_code(op) {
                    None => prop_assert_eq!(reply.status, Status::UnknownOp as u32),
                    Some(_) if mask == 0 => prop_assert_eq!(reply.status, Status::EmptyMask as u32),
                    Some(Op::Free | Op::FreePointer) => {
                        prop_assert_eq!(reply.status, Status::Partial as u32)
                    }
                    Some(_) => {
                        // A valid small allocation of 1 byte per lane: free it again.
                        prop_assert_eq!(reply.status, Status::Ok as u32);
                        let masked: [u64; 32] = std::array::from_fn(|l| u64::from(mask >> l & 1));
                        for h in orchestrator::cpu::handles_from_reply(&reply, &masked) {
                            if !h.is_null() {
                                prop_assert_eq!(free_one(&mut r, h.lane(), h), LaneStatus::Ok);
                            }
                        }
                    }
                }
            }
            Step::AllocPlain { large, seed } => {
                let size = if large {
                    orchestrator::PLAIN_SMALL_MAX + 1 + seed % (5 << 20)
                } else {
                    1 + seed % orchestrator::PLAIN_SMALL_MAX
                };
                match r.alloc_plain(size) {
                    Ok(base) => {
                        let align = if large { 2 << 20 } else { 256 };
                        prop_assert_eq!(base % align, 0, "{} B at {:#x}", size, base);
                        prop_assert!(
                            r.segments()
                                .iter()
                                .any(|&(b, n)| base >= b && base + size <= b + n),
                            "{base:#x} + {size} in no segment"
                        );
                        next_owner += 1;
                        // A large object owns its blocks whole: nothing else may start in them.
                        let end = if large {
                            base + size.next_multiple_of(2 << 20)
                        } else {
                            base + size
                        };
                        occupied.insert(next_owner, base, end)?;
                        plain.push((base, size));
                    }
                    Err(Status::OutOfMemory) => {}
                    Err(other) => prop_assert!(false, "plain {size} B: {other:?}"),
                }
            }
            Step::FreePlain { pick, again, delta } if !plain.is_empty() => {
                let (base, size) = plain[pick % plain.len()];
                let inner = base + delta.min(size - 1);
                if inner != base {
                    let got = free_pointer(&mut r, 3, inner);
                    prop_assert_eq!(
                        got,
                        LaneStatus::InteriorPointer,
                        "{:#x} inside {:#x}",
                        inner,
                        base
                    );
                }
                plain.swap_remove(pick % plain.len());
                prop_assert_eq!(free_pointer(&mut r, 0, base), LaneStatus::Ok);
                occupied.remove(base);
                if again {
                    prop_assert_ne!(free_pointer(&mut r, 9, base), LaneStatus::Ok);
                }
            }
            _ => {}
        }
        prop_assert_eq!(r.check_invariants(), Ok(()));
    }
    for (base, _) in plain.drain(..) {
        prop_assert_eq!(free_pointer(&mut r, 0, base), LaneStatus::Ok);
    }
    for (h, _) in live.drain(..) {
        prop_assert_eq!(free_one(&mut r, h.lane(), h), LaneStatus::Ok);
    }
    prop_assert_eq!(r.check_invariants(), Ok(()));
    r.drain_quarantine();
    prop_assert_eq!(r.check_invariants(), Ok(()));
    prop_assert!(r.is_empty(), "{} chunks still live", r.live_chunks());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn resolver_hands_out_disjoint_memory_and_rejects_bad_frees(steps in prop::collection::vec(step(), 1..250)) {
        run(steps, Setup::Plain)?;
    }

    #[test]
    fn segments_hand_out_disjoint_memory_and_judge_frees_alike(steps in prop::collection::vec(step(), 1..250)) {
        run(steps, Setup::Segmented)?;
    }

    #[test]
    fn recycled_small_runs_hand_out_disjoint_memory_and_judge_frees_alike(steps in prop::collection::vec(step(), 1..250)) {
        run(steps, Setup::Recycling)?;
    }

    #[test]
    fn tiers_hand_out_disjoint_memory_and_judge_frees_alike(steps in prop::collection::vec(step(), 1..250)) {
        run(steps, Setup::Tiered)?;
    }
}

#[test]
fn segments_fill_in_order_and_refuse_overlap() {
    let mut config = ResolverConfig::new(BASE, 4);
    config.small_blocks = 1;
    let mut r = Resolver::new(config).unwrap();
    let second = BASE + (16 << 21);
    assert!(
        r.add_segment(BASE + (2 << 21), 4).is_err(),
        "overlaps the first"
    );
    assert!(r.add_segment(second + 1, 4).is_err(), "not 2 MiB aligned");
    let large = |r: &mut Resolver| {
        // Lanes of 100 KiB, arranged: 2 units, a 4 MiB chunk of 2 VABlocks.
        r.alloc(&[100 << 10; 32], Arrangement::Arranged(SlotOrder::Pattern))
    };
    let first = large(&mut r).unwrap();
    assert!(first.chunk_base < BASE + (4 << 21));
    assert_eq!(large(&mut r), Err(Status::OutOfMemory));
    assert!(r.take_out_of_memory() && !r.take_out_of_memory());
    r.add_segment(second, 8).unwrap();
    let moved = large(&mut r).unwrap();
    assert!(moved.chunk_base >= second, "{:#x}", moved.chunk_base);
    assert_eq!(
        r.blocks_used(),
        (2 + 1 + 2, 12),
        "small spaces count whole; the first one's empty block went back at its out of memory"
    );
    // One warp frees objects of both segments and an address between them.
    let mut lanes = [Handle::NULL; 32];
    lanes[0] = first.handles[0];
    lanes[1] = moved.handles[0];
    lanes[2] = Handle(BASE + (8 << 21));
    let outcomes = r.free_lanes(&lanes);
    assert_eq!(
        outcomes[..3],
        [LaneStatus::Ok, LaneStatus::Ok, LaneStatus::InvalidHandle]
    );
    for h in first.handles[1..].iter().chain(&moved.handles[1..]) {
        assert_eq!(r.free(*h), LaneStatus::Ok);
    }
    r.check_invariants().unwrap();
    r.drain_quarantine();
    r.drain_quarantine();
    assert!(r.is_empty());
    assert_eq!(r.segments().len(), 2);
}

#[test]
fn zero_sizes_get_null_handles_and_no_chunk() {
    let mut r = resolver();
    let reply = r.resolve(&alloc_request(Op::Alloc, u32::MAX, [0; 32]));
    assert_eq!(reply.status, Status::Ok as u32);
    assert_eq!(reply.chunk_base, 0);
    let mut sizes = [0u64; 32];
    sizes[3] = 100;
    let reply = r.resolve(&alloc_request(Op::Alloc, u32::MAX, sizes));
    let handles = orchestrator::cpu::handles_from_reply(&reply, &sizes);
    assert!(
        handles
            .iter()
            .enumerate()
            .all(|(l, h)| h.is_null() == (l != 3))
    );
    assert_eq!(free_one(&mut r, 3, handles[3]), LaneStatus::Ok);
    assert_eq!(r.quarantined_chunks(), 1);
    r.drain_quarantine();
    r.drain_quarantine();
    assert!(r.is_empty());
}

#[test]
fn out_of_memory_leaks_nothing() {
    let mut r = resolver();
    // 40 KiB per lane: a large chunk of one VABlock each; every block of the arena can take
    // one, the small space's two (empty) blocks too.
    let sizes = [40 << 10; 32];
    let mut got = Vec::new();
    loop {
        let reply = r.resolve(&alloc_request(Op::Alloc, u32::MAX, sizes));
        if reply.status == Status::OutOfMemory as u32 {
            break;
        }
        assert_eq!(reply.status, Status::Ok as u32);
        got.push(orchestrator::cpu::handles_from_reply(&reply, &sizes));
    }
    assert_eq!(got.len(), BLOCKS);
    // Too large for the whole arena: out of memory, not a crash.
    let reply = r.resolve(&alloc_request(Op::Alloc, 1, [1 << 30; 32]));
    assert_eq!(reply.status, Status::OutOfMemory as u32);
    r.check_invariants().unwrap();
    for handles in got {
        for h in handles {
            assert_eq!(free_one(&mut r, h.lane(), h), LaneStatus::Ok);
        }
    }
    r.drain_quarantine();
    r.drain_quarantine();
    assert!(r.is_empty());
    assert_eq!(r.counters().by_status[Status::OutOfMemory as usize], 2);
}

#[test]
fn each_bad_free_has_its_status_and_harms_nothing() {
    let mut r = resolver_without_quarantine();
    let sizes = [3000u64; 32]; // portion class, 4 KiB tiles
    let reply = r.resolve(&alloc_request(Op::Alloc, u32::MAX, sizes));
    let handles = orchestrator::cpu::handles_from_reply(&reply, &sizes);
    assert_eq!(
        free_one(&mut r, 0, Handle(handles[0].0 + 64)),
        LaneStatus::InteriorPointer
    );
    assert_eq!(
        free_one(&mut r, 9, Handle::plain(0x1234_5000, 9).unwrap()),
        LaneStatus::InvalidHandle
    );
    let forged = Handle(handles[1].0 & !(0x1f << 55) | 2 << 55);
    assert_eq!(free_one(&mut r, 2, forged), LaneStatus::InvalidHandle);
    assert_eq!(free_one(&mut r, 0, handles[0]), LaneStatus::Ok);
    assert_eq!(free_one(&mut r, 0, handles[0]), LaneStatus::DoubleFree);
    for h in &handles[1..] {
        assert_eq!(free_one(&mut r, h.lane(), *h), LaneStatus::Ok);
    }
    // The chunk is gone: its handles are double frees (remembered), not foreign.
    assert_eq!(free_one(&mut r, 5, handles[5]), LaneStatus::DoubleFree);
    // The place is reused with a new generation: the old handle is stale.
    let again = orchestrator::cpu::handles_from_reply(
        &r.resolve(&alloc_request(Op::Alloc, u32::MAX, sizes)),
        &sizes,
    );
    assert_eq!(again[5].address(), handles[5].address());
    assert_ne!(again[5], handles[5]);
    assert_eq!(free_one(&mut r, 5, handles[5]), LaneStatus::DoubleFree);
    assert_eq!(free_one(&mut r, 5, again[5]), LaneStatus::Ok);
    r.check_invariants().unwrap();
    let reply = r.resolve(&RequestRecord {
        op: 77,
        ..RequestRecord::zeroed()
    });
    assert_eq!(reply, ReplyRecord::status(Status::UnknownOp));
    let counters = r.counters();
    assert_eq!(
        counters.by_lane_status[LaneStatus::InteriorPointer as usize],
        1
    );
    assert_eq!(counters.by_lane_status[LaneStatus::DoubleFree as usize], 3);
}

/// After a small chunk is gone, a free at a place an object can start is judged by the 256-byte
/// unit's generation counter: in a unit where an object started, a double free; in a unit where
/// none ever did, an invalid handle.
#[test]
fn frees_after_a_small_chunk_is_gone_are_judged_by_unit() {
    let mut r = resolver_without_quarantine();
    let mut sizes = [0u64; 32];
    sizes[0] = 64;
    sizes[1] = 64;
    let reply = r.resolve(&alloc_request(Op::Alloc, u32::MAX, sizes));
    let handles = orchestrator::cpu::handles_from_reply(&reply, &sizes);
    let base = handles[0].address();
    assert_eq!(handles[1].address(), base + 64);
    for lane in 0..2 {
        assert_eq!(
            free_one(&mut r, lane, handles[lane as usize]),
            LaneStatus::Ok
        );
    }
    let unit_start = base - base % 256;
    for (address, expect) in [
        (base + 64, LaneStatus::DoubleFree),     // an object started here
        (base + 128, LaneStatus::DoubleFree),    // none did, but one started in the unit
        (base + 136, LaneStatus::InvalidHandle), // not 16-byte aligned
        (unit_start + 256, LaneStatus::InvalidHandle), // no object ever started in that unit
    ] {
        let h = Handle::plain(address, 1).unwrap();
        assert_eq!(free_one(&mut r, 1, h), expect, "free at {address:#x}");
    }
    r.check_invariants().unwrap();
    r.drain_quarantine();
    assert!(r.is_empty());
}

#[test]
fn arrangement_reaches_the_handles() {
    let mut r = resolver();
    let sizes = [100 << 10; 32];
    let a = r
        .alloc(&sizes, Arrangement::Arranged(SlotOrder::Pattern))
        .unwrap();
    assert!(a.handles.iter().all(|h| h.kind() == HandleKind::Arranged));
    let c = r.alloc(&sizes, Arrangement::Contiguous).unwrap();
    assert!(c.handles.iter().all(|h| h.kind() == HandleKind::Plain));
    assert_eq!(c.arrangement, Arrangement::Contiguous);
    // Lanes of one size: the table's chunk (1.28x the packed bytes), at lane_span strides.
    assert_eq!(c.handles[3].address(), c.chunk_base + 3 * (128 << 10));
    // Lanes that diverge, asked contiguous: packed, each right after the one before.
    let mut diverging = [1000u64; 32];
    diverging[0] = 100 << 10;
    let p = r.alloc(&diverging, Arrangement::Contiguous).unwrap();
    assert_eq!(p.geometry.unwrap().class, SizeClass::Small);
    assert_eq!(
        p.handles[3].address(),
        p.chunk_base + (100 << 10) + 2 * 1008
    );
    // An arranged request whose lanes diverge (one 3 MiB lane, the rest 100 B) is packed too.
    let mut mixed = [100u64; 32];
    mixed[6] = 3 << 20;
    let m = r
        .alloc(&mixed, Arrangement::Arranged(SlotOrder::Pattern))
        .unwrap();
    assert_eq!(m.arrangement, Arrangement::Contiguous);
    assert!(m.handles.iter().all(|h| h.kind() == HandleKind::Plain));
    assert_eq!(m.handles[7].address(), m.chunk_base + 6 * 112 + (3 << 20));
    assert_eq!(m.geometry.unwrap().chunk_bytes, 31 * 112 + (3 << 20));
    assert_eq!(
        m.chunk_base % (2 << 20),
        0,
        "a packed chunk of a VABlock or more starts on one"
    );
    for h in a
        .handles
        .iter()
        .chain(&c.handles)
        .chain(&p.handles)
        .chain(&m.handles)
    {
        assert_eq!(r.free(*h), LaneStatus::Ok);
    }
    r.check_invariants().unwrap();
    r.drain_quarantine();
    r.drain_quarantine();
    assert!(r.is_empty());
}

/// A chunk that starts elsewhere can put a lane object at exactly the address a stale handle
/// points to, with the same lane id. Every chunk that starts an object in a unit advances that
/// unit's generation, so the stale handle never frees the new object, however often the pattern
/// repeats (fewer than 127 chunks in the unit between the free and the stale free).
#[test]
fn a_stale_handle_never_frees_a_new_object_at_its_address() {
    let mut r = resolver_without_quarantine();
    let mut sizes_x = [0u64; 32];
    sizes_x[0] = 16;
    sizes_x[1] = 16;
    let mut sizes_z = [0u64; 32];
    sizes_z[0] = 272; // lane 1 of Z lands 272 bytes in: 16 bytes into the next 256 B unit
    sizes_z[1] = 16;
    let mut filler = [0u64; 32];
    filler[0] = 256;
    for trial in 0..64 {
        let f = r
            .alloc(&filler, Arrangement::Arranged(SlotOrder::Pattern))
            .unwrap();
        let x = r
            .alloc(&sizes_x, Arrangement::Arranged(SlotOrder::Pattern))
            .unwrap();
        assert_eq!(
            x.chunk_base,
            f.chunk_base + 256,
            "trial {trial}: X follows the filler"
        );
        for h in f.handles.iter().chain(&x.handles).filter(|h| !h.is_null()) {
            assert_eq!(r.free(*h), LaneStatus::Ok);
        }
        let z = r
            .alloc(&sizes_z, Arrangement::Arranged(SlotOrder::Pattern))
            .unwrap();
        assert_eq!(
            z.handles[1].address(),
            x.handles[1].address(),
            "trial {trial}: same address"
        );
        assert_ne!(
            r.free(x.handles[1]),
            LaneStatus::Ok,
            "trial {trial}: stale handle freed a live object"
        );
        for h in z.handles.iter().filter(|h| !h.is_null()) {
            assert_eq!(
                r.free(*h),
                LaneStatus::Ok,
                "trial {trial}: the live object is intact"
            );
        }
        r.check_invariants().unwrap();
    }
    r.drain_quarantine();
    assert!(r.is_empty());
}

/// Freed chunks are held back before their places are reused, and an allocation that would not
/// fit drains the quarantine instead of failing.
#[test]
fn quarantine_delays_reuse_but_never_causes_out_of_memory() {
    let mut r = resolver();
    let sizes = [40 << 10; 32]; // arranged, one VABlock each; 48 fit
    let arranged = Arrangement::Arranged(SlotOrder::Pattern);
    let first = r.alloc(&sizes, arranged).unwrap();
    for h in first.handles {
        assert_eq!(r.free(h), LaneStatus::Ok);
    }
    let second = r.alloc(&sizes, arranged).unwrap();
    assert_ne!(
        second.chunk_base, first.chunk_base,
        "a quarantined place is not reused at once"
    );
    let mut held = vec![second];
    while let Ok(a) = r.alloc(&sizes, arranged) {
        held.push(a);
    }
    assert_eq!(
        held.len(),
        BLOCKS,
        "the quarantined block and the small space's empty blocks were given back for the last chunks"
    );
    assert_eq!(r.quarantined_chunks(), 0);
    r.check_invariants().unwrap();
}

/// One lane asking `bytes` (a small chunk of `bytes / 256` units when a multiple of 256).
fn one_lane(bytes: u64) -> [u64; 32] {
    let mut sizes = [0u64; 32];
    sizes[0] = bytes;
    sizes
}

fn recycling_resolver(small_blocks: usize) -> Resolver {
    recycling_resolver_of(BLOCKS, small_blocks)
}

fn recycling_resolver_of(blocks: usize, small_blocks: usize) -> Resolver {
    let mut config = ResolverConfig::new(BASE, blocks);
    config.small_blocks = small_blocks;
    config.quarantine_chunks = 0; // out of the quarantine at once
    assert!(config.recycle_small, "on by default");
    Resolver::new(config).unwrap()
}

/// A freed small run is taken back by the next chunk of the same length, last freed first, not
/// by a search for the leftmost hole; a chunk of another length still searches the tree.
#[test]
fn small_runs_are_recycled_by_length() {
    let mut r = recycling_resolver(2);
    let arranged = Arrangement::Arranged(SlotOrder::Pattern);
    let [a, b, c] = [(); 3].map(|_| r.alloc(&one_lane(256), arranged).unwrap());
    assert_eq!(
        (b.chunk_base, c.chunk_base),
        (a.chunk_base + 256, a.chunk_base + 512)
    );
    assert_eq!(r.free(a.handles[0]), LaneStatus::Ok);
    assert_eq!(r.free(c.handles[0]), LaneStatus::Ok);
    let two = r.alloc(&one_lane(512), arranged).unwrap();
    assert_eq!(
        two.chunk_base,
        c.chunk_base + 256,
        "two units: the tree's first fit"
    );
    let d = r.alloc(&one_lane(256), arranged).unwrap();
    let e = r.alloc(&one_lane(256), arranged).unwrap();
    assert_eq!(
        d.chunk_base, c.chunk_base,
        "the run freed last comes back first"
    );
    assert_eq!(e.chunk_base, a.chunk_base);
    // A recycled address still gets a new generation: the old handle is stale.
    assert_ne!(d.handles[0], c.handles[0]);
    assert_ne!(r.free(c.handles[0]), LaneStatus::Ok);
    r.check_invariants().unwrap();
    for h in [b, two, d, e].iter().map(|x| x.handles[0]) {
        assert_eq!(r.free(h), LaneStatus::Ok);
    }
    r.check_invariants().unwrap();
    assert!(r.is_empty(), "recycled runs are not allocations");
}

/// Recycled runs never cause an out-of-memory: with the whole arena full of one-unit chunks,
/// two freed neighbours (kept for one-unit chunks) still make room for a two-unit chunk.
#[test]
fn recycled_runs_go_back_to_the_tree_before_an_out_of_memory() {
    let mut r = recycling_resolver_of(2, 1);
    let arranged = Arrangement::Arranged(SlotOrder::Pattern);
    let mut chunks = Vec::new();
    loop {
        match r.alloc(&one_lane(256), arranged) {
            Ok(c) => chunks.push(c),
            Err(Status::OutOfMemory) => break,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        chunks.len(),
        2 * 8192,
        "both VABlocks of 256 B units (the small space grew into the second)"
    );
    assert_eq!(
        r.alloc(&one_lane(512), arranged).err(),
        Some(Status::OutOfMemory)
    );
    for c in &chunks[100..102] {
        assert_eq!(r.free(c.handles[0]), LaneStatus::Ok);
    }
    r.check_invariants().unwrap();
    let two = r.alloc(&one_lane(512), arranged).unwrap();
    assert_eq!(two.chunk_base, chunks[100].chunk_base);
    r.check_invariants().unwrap();
}

/// A warp free naming every lane of a chunk frees it at once only when every lane is still live:
/// with one lane freed before, that lane is a double free and the others are freed, lane by lane.
#[test]
fn a_warp_free_with_a_lane_freed_before_is_judged_lane_by_lane() {
    let mut r = resolver();
    for arrangement in [
        Arrangement::Contiguous,
        Arrangement::Arranged(SlotOrder::Pattern),
    ] {
        for size in [100, 8 << 10, 100 << 10] {
            let mut sizes = [0u64; 32];
            sizes[..4].fill(size);
            let a = r.alloc(&sizes, arrangement).unwrap();
            let words = a.handles.map(|h| h.0);
            let request = RequestRecord {
                op: Op::Free as u32,
                lane_mask: u32::MAX,
                warp: 1,
                reserved: 0,
                words,
            };
            assert_eq!(r.free(a.handles[2]), LaneStatus::Ok);
            let reply = r.resolve(&request);
            assert_eq!(Status::from_code(reply.status), Some(Status::Partial));
            assert_eq!(reply.failed_lanes, 1 << 2);
            assert_eq!(reply.lane_status[2], LaneStatus::DoubleFree as u8);
            for lane in [0, 1, 3] {
                assert_eq!(reply.lane_status[lane], LaneStatus::Ok as u8);
            }
            assert_eq!(r.chunk_containing(a.chunk_base), None, "released");
            r.check_invariants().unwrap();
            // The same request again: the chunk is gone, each lane a double free.
            let again = r.resolve(&request);
            assert_eq!(again.failed_lanes, 0b1111);
            r.check_invariants().unwrap();
        }
    }
    r.drain_quarantine();
    r.drain_quarantine();
    assert!(r.is_empty());
}

#[test]
fn each_bad_pointer_free_has_its_status_and_is_counted() {
    let mut r = resolver_without_quarantine();
    let sizes = [100u64; 32]; // small class: objects packed by lane
    let reply = r.resolve(&alloc_request(Op::AllocContiguous, u32::MAX, sizes));
    let handles = orchestrator::cpu::handles_from_reply(&reply, &sizes);
    let at = |lane: usize| handles[lane].address();
    assert_eq!(
        free_pointer(&mut r, 0, at(4) + 8),
        LaneStatus::InteriorPointer
    );
    assert_eq!(
        free_pointer(&mut r, 0, 0x1234_5000),
        LaneStatus::InvalidHandle
    );
    assert_eq!(free_pointer(&mut r, 0, u64::MAX), LaneStatus::InvalidHandle);
    // Any lane may free any object by its address; the object's own lane is freed.
    assert_eq!(free_pointer(&mut r, 7, at(4)), LaneStatus::Ok);
    assert_eq!(free_pointer(&mut r, 4, at(4)), LaneStatus::DoubleFree);
    assert_eq!(free_one(&mut r, 4, handles[4]), LaneStatus::DoubleFree);
    r.check_invariants().unwrap();
    // The whole warp's pointers in one request free the rest.
    let mut words = [0u64; 32];
    for (lane, word) in words.iter_mut().enumerate() {
        *word = if lane == 4 { 0 } else { at(lane) };
    }
    let reply = r.resolve(&RequestRecord {
        op: Op::FreePointer as u32,
        lane_mask: u32::MAX,
        warp: 1,
        reserved: 0,
        words,
    });
    assert_eq!(reply.status, Status::Ok as u32);
    r.drain_quarantine();
    assert!(r.is_empty());
    let counters = r.counters();
    assert_eq!(counters.lanes_freed, 32);
    assert_eq!(
        counters.by_lane_status[LaneStatus::InteriorPointer as usize],
        1
    );
    assert_eq!(
        counters.by_lane_status[LaneStatus::InvalidHandle as usize],
        2
    );
    assert_eq!(counters.by_lane_status[LaneStatus::DoubleFree as usize], 2);
}

/// One warp's divergent calls, as the GPU may serve them: lane 0 alone allocates, frees and
/// frees again by pointer while the other lanes allocate, free an interior pointer and free by
/// pointer, each call split into random groups of lanes, and four warps' requests interleaved.
#[test]
fn pointer_frees_from_split_groups_free_every_object() {
    let mut r = resolver();
    let mut rng = xorshift(12345);
    for round in 0..2000 {
        // Per warp: the requests in its order, each (lanes, step).
        let queues: Vec<Vec<(u32, u8)>> = (0..4)
            .map(|_| {
                let mut queue = vec![(1u32, 0u8), (1, 1), (1, 2)];
                for step in 3..6 {
                    let mut group = 0u32;
                    for lane in 0..32 {
                        if group != 0 && rng().is_multiple_of(5) {
                            queue.push((group, step));
                            group = 0;
                        }
                        group |= 1 << lane;
                    }
                    queue.push((group, step));
                }
                queue
            })
            .collect();
        let mut next = [0usize; 4];
        let mut lone = [0u64; 4];
        let mut objects = [[0u64; 32]; 4];
        while let Some(warp) = {
            let waiting: Vec<usize> = (0..4).filter(|&w| next[w] < queues[w].len()).collect();
            (!waiting.is_empty()).then(|| waiting[(rng() % waiting.len() as u64) as usize])
        } {
            let (mask, step) = queues[warp][next[warp]];
            next[warp] += 1;
            let sizes = |bytes: u64| -> [u64; 32] {
                std::array::from_fn(|l| if mask >> l & 1 == 1 { bytes } else { 0 })
            };
            match step {
                0 => {
                    let reply = r.resolve(&alloc_request(Op::AllocContiguous, mask, sizes(256)));
                    lone[warp] =
                        orchestrator::cpu::handles_from_reply(&reply, &sizes(256))[0].address();
                }
                1 | 2 => {
                    let want = if step == 1 {
                        LaneStatus::Ok
                    } else {
                        LaneStatus::DoubleFree
                    };
                    assert_eq!(free_pointer(&mut r, 0, lone[warp]), want, "round {round}");
                }
                3 => {
                    let reply = r.resolve(&alloc_request(Op::AllocContiguous, mask, sizes(4096)));
                    let handles = orchestrator::cpu::handles_from_reply(&reply, &sizes(4096));
                    for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
                        objects[warp][lane] = handles[lane].address();
                    }
                }
                _ => {
                    let offset = if step == 4 { 16 } else { 0 };
                    let words = std::array::from_fn(|l| {
                        if mask >> l & 1 == 1 {
                            objects[warp][l] + offset
                        } else {
                            0
                        }
                    });
                    let reply = r.resolve(&RequestRecord {
                        op: Op::FreePointer as u32,
                        lane_mask: mask,
                        warp: warp as u32,
                        reserved: 0,
                        words,
                    });
                    let want = if step == 4 {
                        LaneStatus::InteriorPointer
                    } else {
                        LaneStatus::Ok
                    };
                    for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
                        assert_eq!(
                            reply.lane_status[lane], want as u8,
                            "round {round} lane {lane}"
                        );
                    }
                }
            }
        }
        assert_eq!(r.live_chunks(), 0, "round {round}");
        r.check_invariants().unwrap();
    }
}

/// A small xorshift generator for the test above.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A segment added by growth is set up like the first in everything but its place and size:
/// with small-run recycling off, a freed run in the new segment goes back to its tree, so the
/// next small chunk takes the leftmost hole instead of the run freed last.
#[test]
fn an_added_segment_keeps_the_first_segments_configuration() {
    let mut config = ResolverConfig::new(BASE, 2);
    config.small_blocks = 1;
    config.quarantine_chunks = 0;
    config.recycle_small = false;
    let mut r = Resolver::new(config).unwrap();
    r.add_segment(BASE + (16 << 21), 4).unwrap();
    // Fill the first segment: a large chunk in its second block, and 64 KiB small chunks over
    // every unit of its small block (32 x 256 units).
    let arranged = Arrangement::Arranged(SlotOrder::Pattern);
    let large = r.alloc(&[40 << 10; 32], arranged).unwrap();
    assert!(large.chunk_base < BASE + (2 << 21));
    let mut filler: Vec<_> = (0..32)
        .map(|_| r.alloc(&[2048; 32], arranged).unwrap())
        .collect();
    filler.push(large);
    let [a, b, c] = [(); 3].map(|_| r.alloc(&one_lane(256), arranged).unwrap());
    assert!(a.chunk_base >= BASE + (16 << 21), "in the added segment");
    assert_eq!(r.free(a.handles[0]), LaneStatus::Ok);
    assert_eq!(r.free(c.handles[0]), LaneStatus::Ok);
    let d = r.alloc(&one_lane(256), arranged).unwrap();
    assert_eq!(
        d.chunk_base, a.chunk_base,
        "leftmost-first, as the first segment was configured"
    );
    for x in filler.iter().chain([&b, &d]) {
        assert!(
            r.free_lanes(&x.handles)
                .iter()
                .all(|&s| s == LaneStatus::Ok)
        );
    }
    r.check_invariants().unwrap();
    r.drain_quarantine();
    assert!(r.is_empty());
}

/// The growth signal fires when an allocation takes the arena past its growth mark and when one
/// finds no room, and not for allocations below the mark.
#[test]
fn growth_is_signalled_past_the_mark_and_on_no_room() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut config = ResolverConfig::new(BASE, 8);
    config.small_blocks = 1;
    let mut r = Resolver::new(config).unwrap();
    let signals = Arc::new(AtomicUsize::new(0));
    let seen = signals.clone();
    r.on_growth_wanted(Arc::new(move || {
        seen.fetch_add(1, Ordering::Relaxed);
    }));
    let arranged = Arrangement::Arranged(SlotOrder::Pattern);
    // Lanes of 320 KiB: a large chunk of 5 blocks; with the small space, 6 of 8 (not past 6).
    let a = r.alloc(&[5 * (64 << 10); 32], arranged).unwrap();
    assert_eq!(signals.load(Ordering::Relaxed), 0, "below the mark");
    let b = r.alloc(&[64 << 10; 32], arranged).unwrap();
    assert_eq!(
        signals.load(Ordering::Relaxed),
        1,
        "7 of 8 blocks: past the mark"
    );
    assert_eq!(
        r.alloc(&[2 * (64 << 10); 32], arranged),
        Err(Status::OutOfMemory)
    );
    assert_eq!(signals.load(Ordering::Relaxed), 2, "no room");
    for h in a.handles.iter().chain(&b.handles) {
        assert_eq!(r.free(*h), LaneStatus::Ok);
    }
}

/// The false out-of-memory of a fixed small space: small chunks worth three blocks in an arena
/// whose small space starts with one. The small space takes free blocks as it needs them, and
/// gives them back once empty when a large chunk needs the whole arena.
#[test]
fn small_objects_take_any_free_block_and_give_it_back() {
    let mut config = ResolverConfig::new(BASE, 8);
    config.small_blocks = 1;
    let mut r = Resolver::new(config).unwrap();
    let arranged = Arrangement::Arranged(SlotOrder::Pattern);
    // 64 KiB chunks: 32 fill a block; 93 need three blocks.
    let small: Vec<_> = (0..93)
        .map(|i| {
            r.alloc(&[2048; 32], arranged)
                .unwrap_or_else(|s| panic!("small chunk {i}: {s:?}"))
        })
        .collect();
    assert_eq!(r.blocks_used().0, 3);
    r.check_invariants().unwrap();
    for c in &small {
        assert!(
            r.free_lanes(&c.handles)
                .iter()
                .all(|&s| s == LaneStatus::Ok)
        );
    }
    // 32 lanes of 256 KiB: one large chunk of four blocks... of all eight, with 512 KiB lanes.
    let whole = r
        .alloc(&[512 << 10; 32], Arrangement::Contiguous)
        .expect("the empty small blocks go back to the arena");
    assert_eq!(whole.chunk_base, BASE);
    assert_eq!(r.blocks_used(), (8, 8));
    r.check_invariants().unwrap();
    assert!(
        r.free_lanes(&whole.handles)
            .iter()
            .all(|&s| s == LaneStatus::Ok)
    );
    r.drain_quarantine();
    r.check_invariants().unwrap();
    r.drain_quarantine();
    assert!(r.is_empty());
    // And small chunks come back after that.
    let again = r.alloc(&[2048; 32], arranged).unwrap();
    assert!(
        r.free_lanes(&again.handles)
            .iter()
            .all(|&s| s == LaneStatus::Ok)
    );
}

/// One step of [`an_allocation_fails_only_when_no_placement_of_any_kind_exists`].
#[derive(Clone, Debug)]
enum Use {
    /// A chunk whose lanes ask `size` each (0 for lanes past `lanes`).
    Alloc { size: u64, lanes: usize },
    /// Free the `pick`-th live chunk.
    Free { pick: usize },
}

fn uses() -> impl Strategy<Value = Use> {
    prop_oneof![
        // Small (up to 2 KiB), portion (to 32 KiB) and large (beyond) lanes.
        3 => (16u64..=2048, 1usize..=32).prop_map(|(size, lanes)| Use::Alloc { size, lanes }),
        2 => (2049u64..=32 << 10, 1usize..=32).prop_map(|(size, lanes)| Use::Alloc { size, lanes }),
        2 => ((32u64 << 10) + 1..=256 << 10, 1usize..=32)
            .prop_map(|(size, lanes)| Use::Alloc { size, lanes }),
        3 => any::<usize>().prop_map(|pick| Use::Free { pick }),
    ]
}

/// Whether a chunk of `geometry` had a place in an arena of `blocks` blocks holding `live`
/// chunks `(base, bytes, class)`, by the rules every class is placed by: a large chunk needs a
/// run of blocks no chunk touches; a small one a block no chunk touches, or a 256 B-aligned gap
/// before the fence of a block holding small chunks only; a portion chunk a block no chunk
/// touches, or a 256 B-aligned gap in a stretch of neighbouring blocks holding small chunks only;
/// a portion chunk a block no chunk touches (the room inside portion blocks is the warptree
/// arranger's, checked by its own tests).
fn had_a_place(geometry: &Geometry, blocks: usize, live: &[(u64, u64, SizeClass)]) -> bool {
    let block_bytes = ortree::VABLOCK_BYTES;
    let mut classes: Vec<Vec<SizeClass>> = vec![Vec::new(); blocks];
    for &(base, bytes, class) in live {
        let first = ((base - BASE) / block_bytes) as usize;
        let last = ((base + bytes - 1 - BASE) / block_bytes) as usize;
        for block in &mut classes[first..=last] {
            block.push(class);
        }
    }
    let free: Vec<bool> = classes.iter().map(Vec::is_empty).collect();
    match geometry.class {
        SizeClass::Large => {
            let run = geometry.units as usize;
            free.windows(run).any(|w| w.iter().all(|&f| f))
        }
        SizeClass::Portion => free.iter().any(|&f| f),
        SizeClass::Small => {
            if free.iter().any(|&f| f) {
                return true;
            }
            let need = geometry.chunk_bytes;
            let small_only: Vec<bool> = classes
                .iter()
                .map(|c| c.iter().all(|&c| c == SizeClass::Small))
                .collect();
            // Each stretch of neighbouring small-only blocks is one space for small runs.
            let mut b = 0;
            while b < blocks {
                if !small_only[b] {
                    b += 1;
                    continue;
                }
                let first = b;
                while b < blocks && small_only[b] {
                    b += 1;
                }
                let (start, end) = (
                    BASE + first as u64 * block_bytes,
                    BASE + b as u64 * block_bytes,
                );
                let mut taken: Vec<(u64, u64)> = live
                    .iter()
                    .filter(|&&(base, _, _)| base >= start && base < end)
                    .map(|&(base, bytes, _)| (base, base + bytes.next_multiple_of(256)))
                    .collect();
                taken.sort_unstable();
                let mut at = start;
                for (from, to) in taken {
                    if from >= at + need {
                        return true;
                    }
                    at = at.max(to);
                }
                if end >= at + need {
                    return true;
                }
            }
            false
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// An allocation is refused only when no placement of any kind exists: after random
    /// allocations of every class and frees, each `OutOfMemory` is checked against a model that
    /// knows only the live chunks and the placement rules (quarantined and recycled places
    /// count as free, since an allocation that finds no room takes them back first).
    #[test]
    fn an_allocation_fails_only_when_no_placement_of_any_kind_exists(
        steps in proptest::collection::vec(uses(), 1..300),
    ) {
        const ARENA: usize = 6;
        let mut config = ResolverConfig::new(BASE, ARENA);
        config.small_blocks = 1;
        let geometry_config = config.geometry;
        let mut r = Resolver::new(config).unwrap();
        let mut live: Vec<(u64, u64, SizeClass, Allocation)> = Vec::new();
        for step in steps {
            match step {
                Use::Alloc { size, lanes } => {
                    let mut sizes = [0u64; 32];
                    sizes[..lanes].fill(size);
                    let arrangement = if size % 3 == 0 {
                        Arrangement::Contiguous
                    } else {
                        Arrangement::Arranged(SlotOrder::Pattern)
                    };
                    match r.alloc(&sizes, arrangement) {
                        Ok(a) => {
                            let g = a.geometry.unwrap();
                            live.push((a.chunk_base, g.chunk_bytes, g.class, a));
                        }
                        Err(Status::OutOfMemory) => {
                            let g = Geometry::of(&sizes, &geometry_config).unwrap().unwrap();
                            let held: Vec<_> = live.iter().map(|l| (l.0, l.1, l.2)).collect();
                            prop_assert!(
                                !had_a_place(&g, ARENA, &held),
                                "refused {:?} chunk of {} B although it had a place",
                                g.class,
                                g.chunk_bytes
                            );
                        }
                        Err(other) => prop_assert!(false, "unexpected {other:?}"),
                    }
                }
                Use::Free { pick } if !live.is_empty() => {
                    let (_, _, _, a) = live.swap_remove(pick % live.len());
                    prop_assert!(r.free_lanes(&a.handles).iter().all(|&s| s == LaneStatus::Ok));
                }
                Use::Free { .. } => {}
            }
            r.check_invariants().map_err(TestCaseError::fail)?;
        }
        for (_, _, _, a) in live {
            prop_assert!(r.free_lanes(&a.handles).iter().all(|&s| s == LaneStatus::Ok));
        }
        r.drain_quarantine();
        r.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert!(r.is_empty());
    }
}

#[test]
fn the_last_bad_frees_are_kept_oldest_first_with_their_ranks() {
    let mut r = Resolver::new(ResolverConfig::new(1 << 30, 64)).unwrap();
    let foreign = |i: u64| Handle::plain(0x1000 + 16 * i, 0).unwrap();
    for i in 0..100 {
        assert_eq!(r.free(foreign(i)), LaneStatus::InvalidHandle);
    }
    let kept = r.last_bad_frees();
    assert_eq!(kept.len(), orchestrator::KEPT_BAD_FREES);
    let first = 100 - orchestrator::KEPT_BAD_FREES as u64;
    for (i, b) in kept.iter().enumerate() {
        assert_eq!(b.number, first + 1 + i as u64);
        assert_eq!(b.handle, foreign(first + i as u64));
        assert_eq!(b.outcome, LaneStatus::InvalidHandle);
    }
    assert_eq!(
        r.counters().by_lane_status[LaneStatus::InvalidHandle as usize],
        100
    );
    r.check_invariants().unwrap();
}

/// A warp's free that reaches the host for an object of a cache slab was declined by its
/// caches (no slab held the block), so the object was not live: a second free at an object's
/// start, an interior pointer elsewhere, never the host-only `CachedObject`. A host call into
/// the same slab still answers `CachedObject` (only device code frees cache objects). Once the
/// slab went back, its objects' starts stay second frees.
#[test]
fn warp_frees_into_a_cache_slab_the_caches_declined_are_judged_not_sent_back() {
    let mut r = resolver();
    let class = 2; // 64-byte objects
    let base = r.take_slab(1, class).expect("room for a slab");
    assert_eq!(free_pointer(&mut r, 3, base + 64), LaneStatus::DoubleFree);
    assert_eq!(
        free_pointer(&mut r, 3, base + 72),
        LaneStatus::InteriorPointer
    );
    let stale = Handle::cached(base + 128, 9);
    assert_eq!(free_one(&mut r, 0, stale), LaneStatus::DoubleFree);
    let made_up = Handle::arranged(base, 12, 0).unwrap();
    assert_eq!(free_one(&mut r, 0, made_up), LaneStatus::InvalidHandle);
    assert_eq!(r.free(stale), LaneStatus::CachedObject);
    assert_eq!(
        r.free_pointers(&[base + 64; 32])[0],
        LaneStatus::CachedObject
    );
    assert!(r.give_slab(base));
    // Given back (and its place returned): still a second free at one of its objects' starts.
    r.drain_quarantine();
    assert_eq!(free_pointer(&mut r, 3, base + 64), LaneStatus::DoubleFree);
    assert_eq!(free_one(&mut r, 0, stale), LaneStatus::DoubleFree);
    assert_eq!(
        free_pointer(&mut r, 3, base + 72),
        LaneStatus::InvalidHandle
    );
    r.check_invariants().unwrap();
    assert!(r.is_empty());
}
