//! The runtime on the sim backend: backend choice, host allocation and access through handles,
//! bad input from the host, CPU warps through the mailbox, invariants after everything.

use orchestrator::LaneStatus;
use runtime::{BackendChoice, BackendKind, Error, Handle, Runtime};

fn sim(arena_mib: u64) -> Runtime {
    Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(arena_mib << 20)
        .ports(64)
        .build()
        .expect("the sim backend always builds")
}

#[test]
fn auto_picks_cuda_only_when_a_gpu_opens() {
    let gpu = Runtime::builder()
        .backend(BackendChoice::Cuda)
        .arena_bytes(64 << 20)
        .ports(64)
        .build()
        .is_ok();
    let rt = Runtime::builder()
        .arena_bytes(64 << 20)
        .ports(64)
        .build()
        .unwrap();
    if gpu {
        assert_eq!(rt.backend(), BackendKind::Cuda);
    } else {
        assert_eq!(rt.backend(), BackendKind::Sim);
        assert!(
            rt.backend_reason().starts_with("no GPU"),
            "{}",
            rt.backend_reason()
        );
        assert!(matches!(
            rt.compile("x.cu", "__global__ void k() {}"),
            Err(Error::WrongBackend {
                needs: BackendKind::Cuda,
                ..
            })
        ));
        let forced = Runtime::builder().backend(BackendChoice::Cuda).build();
        assert!(matches!(forced, Err(Error::NoGpu(_))));
    }
    assert_eq!(sim(8).backend_reason(), "asked for");
}

#[test]
fn bad_configurations_are_refused_with_a_reason() {
    let tiny = Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(3 << 20)
        .build();
    assert!(matches!(tiny, Err(Error::Config(m)) if m.contains("minimum")));
    let fraction = Runtime::builder().arena_fraction(1.5).build();
    assert!(matches!(fraction, Err(Error::Config(m)) if m.contains("fraction")));
    assert!("gpu".parse::<BackendChoice>().is_err());
    assert_eq!("sim".parse::<BackendChoice>(), Ok(BackendChoice::Sim));
}

#[test]
fn a_cache_bound_over_three_quarters_of_the_arena_is_refused_and_three_quarters_is_kept() {
    let arena = 64u64 << 20;
    let most = arena / 4 * 3;
    let sim = || {
        Runtime::builder()
            .backend(BackendChoice::Sim)
            .arena_bytes(arena)
    };
    let over = sim().device_cache_bytes(most + (2 << 20)).build();
    assert!(
        matches!(&over, Err(Error::Config(m)) if m.contains("ALIGNMALLOC_DEVICE_CACHE_BYTES") && m.contains(&format!("at most {most}"))),
        "{:?}",
        over.err()
    );
    let kept = sim().device_cache_bytes(most).build().unwrap();
    assert_eq!(kept.cache_bound_bytes(), Some(most));
    let half = sim().device_cache_fraction(0.5).build().unwrap();
    assert_eq!(half.cache_bound_bytes(), Some(arena / 2));
    let default = sim().build().unwrap();
    assert_eq!(default.cache_bound_bytes(), Some(arena / 2));
    let too_much = sim().device_cache_fraction(0.8).build();
    assert!(
        matches!(too_much, Err(Error::Config(m)) if m.contains("ALIGNMALLOC_DEVICE_CACHE_FRACTION"))
    );
}

/// A byte pattern that differs per object and per offset.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(0x9E37)) as u8)
        .collect()
}

#[test]
fn host_objects_round_trip_through_their_layout() {
    let rt = sim(256);
    let plain: Vec<Handle> = [1u64, 100, 2048, 5000, 40_000, 300_000]
        .iter()
        .map(|&b| rt.alloc(b).unwrap())
        .collect();
    let arranged = rt.alloc_arranged(70, 20_000).unwrap();
    assert_eq!(arranged.handles().len(), 70);
    let all: Vec<(Handle, usize)> = plain
        .iter()
        .zip([1usize, 100, 2048, 5000, 40_000, 300_000])
        .map(|(&h, b)| (h, b))
        .chain(arranged.handles().iter().map(|&h| (h, 20_000)))
        .collect();
    for (i, &(h, len)) in all.iter().enumerate() {
        assert!(rt.capacity(h).unwrap() >= len as u64);
        rt.write(h, 0, &pattern(i as u64, len)).unwrap();
    }
    // Read back after everything was written: a shared byte would show here.
    for (i, &(h, len)) in all.iter().enumerate() {
        let mut out = vec![0u8; len];
        rt.read(h, 0, &mut out).unwrap();
        assert_eq!(out, pattern(i as u64, len), "object {i}");
    }
    // A piece in the middle, across tile boundaries.
    let h = arranged.handles()[33];
    let mut mid = vec![0u8; 9000];
    rt.read(h, 3000, &mut mid).unwrap();
    assert_eq!(mid, pattern(6 + 33, 20_000)[3000..12_000]);
    assert_eq!(rt.live_chunks(), 6 + 3);
    for h in plain {
        rt.free(h).unwrap();
    }
    rt.free_arranged(arranged).unwrap();
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn a_batch_free_frees_every_object_it_can_and_returns_the_first_refusal() {
    let rt = sim(64);
    let objects = rt.alloc_arranged(64, 256).unwrap();
    let freed_first = objects.handles()[5];
    rt.free(freed_first).unwrap();
    let err = rt.free_arranged(objects).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadHandle { handle, status: LaneStatus::DoubleFree, during: runtime::HandleUse::Free }
                if handle == freed_first.0
        ),
        "{err}"
    );
    // The other 63 went back: nothing is left, and the one refusal is on the list.
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
    let bad = rt.last_bad_frees();
    assert_eq!(bad.len(), 1, "{bad:?}");
}

#[test]
fn bad_host_input_gets_a_defined_error_and_leaves_the_allocator_whole() {
    let rt = sim(64);
    assert!(matches!(rt.alloc(0), Err(Error::ZeroSize)));
    assert!(matches!(rt.alloc_arranged(0, 8), Err(Error::ZeroSize)));
    assert!(matches!(
        rt.alloc(5 << 30),
        Err(Error::SizeOverLimit { .. })
    ));
    assert!(matches!(rt.alloc(1 << 30), Err(Error::OutOfMemory { .. })));
    // All or nothing: 4096 threads x 64 KiB do not fit in 64 MiB; nothing stays allocated.
    assert!(matches!(
        rt.alloc_arranged(4096, 64 << 10),
        Err(Error::OutOfMemory { objects: 4096, .. })
    ));
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());

    let h = rt.alloc(4096).unwrap();
    assert!(matches!(
        rt.write(h, 4000, &[0; 200]),
        Err(Error::OutOfBounds { capacity, .. }) if capacity >= 4096
    ));
    assert!(matches!(
        rt.write(h, u64::MAX, &[0; 2]),
        Err(Error::OutOfBounds { .. })
    ));
    let interior = Handle(h.0 + 16);
    assert!(matches!(
        rt.free(interior),
        Err(Error::BadHandle {
            status: LaneStatus::InteriorPointer,
            ..
        })
    ));
    assert!(matches!(
        rt.free(Handle(0x1234_5670)),
        Err(Error::BadHandle {
            status: LaneStatus::InvalidHandle,
            ..
        })
    ));
    rt.free(h).unwrap();
    assert!(matches!(
        rt.free(h),
        Err(Error::BadHandle {
            status: LaneStatus::DoubleFree,
            ..
        })
    ));
    assert!(matches!(
        rt.read(h, 0, &mut [0; 8]),
        Err(Error::BadHandle {
            status: LaneStatus::DoubleFree,
            ..
        })
    ));
    rt.free(Handle::NULL).unwrap();
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn cpu_warps_allocate_tag_check_and_free_through_the_mailbox() {
    warps_allocate_tag_check_and_free(Some(0));
}

#[test]
fn cpu_warps_allocate_tag_check_and_free_through_the_device_caches() {
    warps_allocate_tag_check_and_free(None);
}

/// Mixed sizes (0, small, portion and large) from divergent lanes, every word tagged and
/// checked, every object freed; `cache_bytes` Some(0) turns the caches off.
fn warps_allocate_tag_check_and_free(cache_bytes: Option<u64>) {
    let mut builder = Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(512 << 20);
    if let Some(bytes) = cache_bytes {
        builder = builder.device_cache_bytes(bytes);
    }
    let rt = builder.build().unwrap();
    let mismatches = std::sync::atomic::AtomicU64::new(0);
    rt.run_warps(96, |warp| {
        let mut seed = u64::from(warp.id()) * 0x9E37_79B9 + 1;
        for round in 0..20u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let sizes = std::array::from_fn(|l| match (seed >> l) % 4 {
                0 => 0,
                1 => 8 + (seed >> (l + 8)) % 2040,
                2 => 4096 + (seed >> (l + 8)) % 20_000,
                _ => 40_000,
            } & !7);
            let mask = (seed >> 32) as u32 | 1;
            let handles = if round % 3 == 0 {
                warp.malloc_contiguous(mask, &sizes)
            } else {
                warp.malloc(mask, &sizes)
            }
            .expect("room for every warp");
            for (l, h) in handles.iter().enumerate() {
                if h.is_null() {
                    continue;
                }
                for w in 0..sizes[l] / 8 {
                    warp.store(*h, w * 8, h.0 ^ w);
                }
            }
            for (l, h) in handles.iter().enumerate() {
                for w in 0..if h.is_null() { 0 } else { sizes[l] / 8 } {
                    if warp.load(*h, w * 8) != h.0 ^ w {
                        mismatches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            let freed = warp.free(u32::MAX, &handles);
            assert!(freed.lanes.iter().all(|&s| s == LaneStatus::Ok));
        }
    })
    .unwrap();
    assert_eq!(mismatches.into_inner(), 0);
    let counters = rt.counters().unwrap();
    match cache_bytes {
        // Every allocation and every free is a request.
        Some(0) => assert_eq!(counters.by_status[0], 96 * 20 * 2),
        // Only warps with a lane over 32 KiB ask the host (for those lanes).
        _ => {
            assert!(counters.by_status[0] < 96 * 20 * 2);
            let stats = rt.cache_stats().unwrap();
            assert!(stats.refills > 0);
            rt.check_invariants().unwrap();
            assert!(!rt.is_empty(), "the current slabs are held until drained");
            assert!(rt.drain_caches().unwrap() > 0);
            assert_eq!(rt.cache_stats().unwrap().held_bytes, 0);
        }
    }
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn dropping_a_runtime_with_live_objects_does_not_hang() {
    let rt = sim(16);
    let _kept = rt.alloc_arranged(64, 1000).unwrap();
    drop(rt);
}

#[test]
fn the_arena_grows_by_reservations_up_to_its_cap() {
    let rt = Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(8 << 20)
        .max_arena_bytes(32 << 20)
        .ports(64)
        .build()
        .unwrap();
    // Each request is one 2 MiB chunk (32 lanes x 64 KiB); a 4-block reservation holds four
    // (its small space's block, empty, goes back when a chunk needs it), so sixteen fill the cap
    // of four reservations.
    let chunks: Vec<_> = (0..16)
        .map(|i| {
            let objects = rt.alloc_arranged(32, 64 << 10).unwrap();
            rt.write(objects.handles()[31], 0, &pattern(i, 64 << 10))
                .unwrap();
            objects
        })
        .collect();
    assert_eq!(rt.arena_segments().len(), 4);
    assert_eq!(rt.arena_bytes(), 32 << 20);
    assert!(matches!(
        rt.alloc_arranged(32, 64 << 10),
        Err(Error::OutOfMemory { .. })
    ));
    for (i, objects) in chunks.iter().enumerate() {
        let mut out = vec![0; 64 << 10];
        rt.read(objects.handles()[31], 0, &mut out).unwrap();
        assert_eq!(out, pattern(i as u64, 64 << 10), "chunk {i}");
    }
    rt.check_invariants().unwrap();
    // CPU warps use every reservation too.
    rt.run_warps(4, |warp| {
        if let Ok(handles) = warp.malloc(u32::MAX, &[8; 32]) {
            warp.store(handles[5], 0, 42);
            assert_eq!(warp.load(handles[5], 0), 42);
            warp.free(u32::MAX, &handles);
        }
    })
    .unwrap();
    for objects in chunks {
        rt.free_arranged(objects).unwrap();
    }
    // The caches keep their current slabs until drained.
    rt.drain_caches().unwrap();
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn fault_counters_need_the_gpu() {
    let asked = Runtime::builder()
        .backend(BackendChoice::Sim)
        .fault_counters(true)
        .build();
    assert!(matches!(
        asked,
        Err(Error::WrongBackend {
            needs: BackendKind::Cuda,
            ..
        })
    ));
}

/// The host knows a run-class object's extent from the span the device caches recorded (its
/// size rounded up to 16 KiB), so a host write past it is refused instead of landing in the
/// next object.
#[test]
fn a_run_class_objects_capacity_is_its_own_slots() {
    let rt = sim(256);
    // Eight lanes, within the 4 MiB a warp the run class serves.
    let lanes = 0xFFu32;
    let sizes: [u64; 32] = std::array::from_fn(|l| {
        if l < 8 {
            (32 << 10) + 1 + l as u64 * 20_000
        } else {
            0
        }
    });
    let made = std::sync::Mutex::new([Handle::NULL; 32]);
    rt.run_warps(1, |warp| {
        *made.lock().unwrap() = warp.malloc_contiguous(lanes, &sizes).unwrap();
    })
    .unwrap();
    let handles = made.into_inner().unwrap();
    for (lane, &handle) in handles.iter().enumerate().take(8) {
        let capacity = rt.capacity(handle).unwrap();
        assert_eq!(
            capacity,
            sizes[lane].next_multiple_of(16 << 10),
            "lane {lane}"
        );
        rt.write(handle, capacity - 8, &[7; 8]).unwrap();
        assert!(matches!(
            rt.write(handle, capacity, &[7]),
            Err(Error::OutOfBounds { .. })
        ));
    }
    // A slot inside lane 0's object (3 slots), named by a pointer: no object starts there.
    let inside = Handle::plain(handles[0].address() + (16 << 10), 0).unwrap();
    assert!(matches!(
        rt.capacity(inside),
        Err(Error::BadHandle {
            status: LaneStatus::InteriorPointer,
            ..
        })
    ));
    assert!(
        rt.cache_stats().unwrap().refills >= 1,
        "a run-class slab served them"
    );
    rt.run_warps(1, |warp| {
        let freed = warp.free(lanes, &handles);
        assert!(freed.lanes[..8].iter().all(|&s| s == LaneStatus::Ok));
    })
    .unwrap();
    rt.drain_caches().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn frees_the_device_caches_judge_are_counted_with_the_others() {
    let rt = sim(256);
    let before = rt.counters().unwrap();
    rt.run_warps(1, |warp| {
        let handles = warp.malloc(u32::MAX, &[64; 32]).unwrap();
        assert!(
            warp.free(u32::MAX, &handles)
                .lanes
                .iter()
                .all(|&s| s == LaneStatus::Ok)
        );
        let again = warp.free(u32::MAX, &handles);
        assert!(again.lanes.iter().all(|&s| s == LaneStatus::DoubleFree));
    })
    .unwrap();
    let after = rt.counters().unwrap();
    // No request reached the host, yet every free shows.
    assert_eq!(after.by_status, before.by_status);
    assert_eq!(after.lanes_freed - before.lanes_freed, 32);
    let double = LaneStatus::DoubleFree as usize;
    assert_eq!(
        after.by_lane_status[double] - before.by_lane_status[double],
        32
    );
    rt.drain_caches().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn posted_frees_return_at_once_and_the_host_keeps_the_bad_ones() {
    let rt = sim(256);
    let before = rt.counters().unwrap();
    // 64 KiB objects: past the caches, so the host judges their frees.
    let handles = std::sync::Mutex::new(Vec::new());
    rt.run_warps(4, |warp| {
        let mine = warp.malloc(u32::MAX, &[64 << 10; 32]).unwrap();
        let posted = warp.post_free(u32::MAX, &mine);
        assert_eq!(posted.status, orchestrator::Status::Ok);
        // A second posted free of one object: the lane cannot know yet; the host will refuse it.
        let mut again = [Handle::NULL; 32];
        again[5] = mine[5];
        assert_eq!(warp.post_free(1 << 5, &again).lanes[5], LaneStatus::Ok);
        handles.lock().unwrap().push(mine[5]);
    })
    .unwrap();
    rt.settle().unwrap();
    let after = rt.counters().unwrap();
    assert_eq!(after.lanes_freed - before.lanes_freed, 4 * 32);
    let double = LaneStatus::DoubleFree as usize;
    assert_eq!(
        after.by_lane_status[double] - before.by_lane_status[double],
        4
    );
    let bad = rt.last_bad_frees();
    assert_eq!(bad.len(), 4);
    let mut refused: Vec<u64> = bad.iter().map(|b| b.handle.0).collect();
    let mut posted: Vec<u64> = handles.into_inner().unwrap().iter().map(|h| h.0).collect();
    refused.sort_unstable();
    posted.sort_unstable();
    assert_eq!(refused, posted);
    assert!(bad.iter().all(|b| b.outcome == LaneStatus::DoubleFree));
    rt.check_invariants().unwrap();
    rt.drain_caches().unwrap();
    assert!(rt.is_empty());
}

#[test]
fn a_stale_handle_of_a_returned_slab_is_a_double_free() {
    let rt = sim(256);
    let old = std::sync::Mutex::new([Handle::NULL; 32]);
    rt.run_warps(1, |warp| {
        let got = warp.malloc(u32::MAX, &[64; 32]).unwrap();
        assert!(
            warp.free(u32::MAX, &got)
                .lanes
                .iter()
                .all(|&s| s == LaneStatus::Ok)
        );
        *old.lock().unwrap() = got;
    })
    .unwrap();
    let old = old.into_inner().unwrap();
    // The slab goes back to the host, and the blocks of the next slabs may be its own.
    rt.drain_caches().unwrap();
    rt.run_warps(1, |warp| {
        let new = warp.malloc(u32::MAX, &[100; 32]).unwrap();
        let again = warp.free(u32::MAX, &old);
        assert!(
            again.lanes.iter().all(|&s| s == LaneStatus::DoubleFree),
            "{:?}",
            again.lanes
        );
        assert!(
            warp.free(u32::MAX, &new)
                .lanes
                .iter()
                .all(|&s| s == LaneStatus::Ok)
        );
    })
    .unwrap();
    rt.drain_caches().unwrap();
    // Every slab back: a cache handle is still told from an unknown one, on the device.
    rt.run_warps(1, |warp| {
        let again = warp.free(u32::MAX, &old);
        assert!(again.lanes.iter().all(|&s| s == LaneStatus::DoubleFree));
    })
    .unwrap();
    // And by the host.
    assert!(matches!(
        rt.free(old[3]),
        Err(runtime::Error::BadHandle {
            status: LaneStatus::DoubleFree,
            ..
        })
    ));
    rt.check_invariants().unwrap();
    rt.drain_caches().unwrap();
    assert!(rt.is_empty());
}

/// A 64-bit mix (splitmix64's finaliser): the churn tests' random numbers.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The lanes of `mask` free `handles` (each must answer Ok), then the lanes of `twice` (within
/// `mask`) free theirs again: a second free must never answer Ok (it would free another object);
/// DoubleFree, or InteriorPointer where the chunk's place was taken at once by a new chunk
/// (docs/usage.md). Returns the second frees answered otherwise.
fn free_then_free_again(
    warp: &runtime::CpuWarp<'_>,
    mask: u32,
    twice: u32,
    handles: &[Handle; 32],
) -> u64 {
    let freed = warp.free(mask, handles);
    assert!(
        (0..32)
            .filter(|l| mask >> l & 1 == 1)
            .all(|l| freed.lanes[l] == LaneStatus::Ok),
        "{:?}",
        freed.lanes
    );
    if twice == 0 {
        return 0;
    }
    let again = warp.free(twice, handles);
    (0..32)
        .filter(|l| twice >> l & 1 == 1)
        .filter(|&l| {
            !matches!(
                again.lanes[l],
                LaneStatus::DoubleFree | LaneStatus::InteriorPointer
            )
        })
        .count() as u64
}

/// A churn step's random word and the slot (of four) it works on: slot `step` in the last
/// round, which frees what each slot holds.
fn churn_pick(warp: u32, round: u32, step: u32, last: bool) -> (u64, usize) {
    let r = mix(u64::from(warp) << 40 | u64::from(round) << 20 | u64::from(step));
    (
        r,
        if last {
            step as usize
        } else {
            (r % 4) as usize
        },
    )
}

/// Steps of the churn tests: `ALIGNMALLOC_SOAK_STEPS`, or 40.
fn churn_steps() -> u32 {
    std::env::var("ALIGNMALLOC_SOAK_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

/// CPU warps keep objects of 1 B-1 MiB (power-of-two and run classes, contiguous) across
/// steps and write each object's handle into its first and last words: no object ever overlaps
/// another live one, whatever the order in which lanes take and free their slots.
#[test]
fn live_objects_of_every_class_never_overlap_under_churn() {
    use std::sync::Mutex;
    let rt = sim(2048);
    let warps = 48u32;
    let steps = churn_steps();
    // Per warp, three slots of (handles, sizes).
    type Held = [([Handle; 32], [u64; 32]); 3];
    let held: Vec<Mutex<Held>> = (0..warps)
        .map(|_| Mutex::new([([Handle::NULL; 32], [0; 32]); 3]))
        .collect();
    let damaged = std::sync::atomic::AtomicU64::new(0);
    let check_and_free =
        |warp: &runtime::CpuWarp<'_>, handles: &[Handle; 32], sizes: &[u64; 32]| {
            let mask = (0..32)
                .filter(|&l| !handles[l].is_null())
                .fold(0u32, |m, l| m | 1 << l);
            for l in (0..32).filter(|l| mask >> l & 1 == 1) {
                let last = (sizes[l] - 8) & !7;
                if warp.load(handles[l], 0) != handles[l].0
                    || warp.load(handles[l], last) != handles[l].0
                {
                    damaged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            if mask != 0 {
                let freed = warp.free(mask, handles);
                assert!(
                    (0..32)
                        .filter(|l| mask >> l & 1 == 1)
                        .all(|l| freed.lanes[l] == LaneStatus::Ok)
                );
            }
        };
    rt.run_warps(warps, |warp| {
        let mut mine = held[warp.id() as usize].lock().unwrap();
        for step in 0..steps {
            let r = mix(u64::from(warp.id()) << 32 | u64::from(step));
            let slot = (r % 3) as usize;
            let (handles, sizes) = mine[slot];
            check_and_free(&warp, &handles, &sizes);
            let sizes: [u64; 32] = std::array::from_fn(|l| {
                let x = mix(r ^ (l as u64 + 1) << 48);
                match x % 16 {
                    0 => (32 << 10) + 1 + (x >> 8) % (1 << 20), // the run class
                    1 => 0,
                    _ => 8 + (x >> 8) % (1 << (3 + x % 13)),
                }
            });
            let handles = warp.malloc_contiguous(u32::MAX, &sizes).unwrap();
            for l in (0..32).filter(|&l| sizes[l] != 0) {
                let last = (sizes[l] - 8) & !7;
                warp.store(handles[l], 0, handles[l].0);
                warp.store(handles[l], last, handles[l].0);
            }
            mine[slot] = (handles, sizes);
        }
        for (handles, sizes) in mine.iter() {
            check_and_free(&warp, handles, sizes);
        }
    })
    .unwrap();
    assert_eq!(damaged.into_inner(), 0, "objects overlapped");
    rt.drain_caches().unwrap();
    assert!(rt.is_empty());
}

/// The soak's pattern on CPU warps: each lane keeps 4 objects across rounds, frees a random one
/// each step (sometimes twice: the second must never answer Ok), allocates 1 B-32 KiB (one lane
/// in 20 32 KiB-1 MiB, from the run class), with drains between rounds; at the end everything is freed and nothing is left.
#[test]
fn second_frees_never_free_another_object_under_churn() {
    use std::sync::Mutex;
    let rt = sim(1024);
    let warps = 64u32;
    let steps = churn_steps();
    let rounds = 4u32;
    let slots: Vec<Mutex<[[Handle; 32]; 4]>> = (0..warps)
        .map(|_| Mutex::new([[Handle::NULL; 32]; 4]))
        .collect();
    let wrong = std::sync::atomic::AtomicU64::new(0);
    for round in 0..=rounds {
        rt.run_warps(warps, |warp| {
            let mut held = slots[warp.id() as usize].lock().unwrap();
            let last = round == rounds;
            for step in 0..if last { 4 } else { steps } {
                let (r, slot) = churn_pick(warp.id(), round, step, last);
                let old = held[slot];
                let mask = (0..32)
                    .filter(|&l| !old[l].is_null())
                    .fold(0u32, |m, l| m | 1 << l);
                if mask != 0 {
                    let twice = mask & (mix(r) as u32);
                    let misjudged = free_then_free_again(&warp, mask, twice, &old);
                    wrong.fetch_add(misjudged, std::sync::atomic::Ordering::Relaxed);
                    held[slot] = [Handle::NULL; 32];
                }
                if last {
                    continue;
                }
                let sizes: [u64; 32] = std::array::from_fn(|l| {
                    let x = mix(r ^ (l as u64 + 1) << 50);
                    if x % 64 < 3 {
                        (32 << 10) + 1 + (x >> 8) % (1 << 20) // the run class
                    } else {
                        1 + (x >> 8) % (1 << (x % 16))
                    }
                });
                held[slot] = warp.malloc(u32::MAX, &sizes).unwrap();
            }
        })
        .unwrap();
        rt.drain_caches().unwrap();
    }
    assert_eq!(
        wrong.into_inner(),
        0,
        "second frees answered other than DoubleFree or InteriorPointer"
    );
    rt.check_invariants().unwrap();
    assert!(rt.is_empty(), "{:?}", rt.describe_live_chunks());
}

#[test]
fn builder_settings_reach_the_resolver() {
    let first_address_after_a_free = |quarantine: Option<usize>| {
        let mut builder = Runtime::builder()
            .backend(BackendChoice::Sim)
            .arena_bytes(64 << 20);
        if let Some(chunks) = quarantine {
            builder = builder.quarantine_chunks(chunks);
        }
        let rt = builder.build().unwrap();
        // 8 KiB: a packed chunk short enough to be placed leftmost-first (longer ones go by
        // next fit and would move on regardless).
        let a = rt.alloc(8 << 10).unwrap();
        rt.free(a).unwrap();
        let b = rt.alloc(8 << 10).unwrap();
        rt.free(b).unwrap();
        (a.address(), b.address())
    };
    let (a, b) = first_address_after_a_free(Some(0));
    assert_eq!(a, b, "no quarantine: the freed place is reused at once");
    let (a, b) = first_address_after_a_free(None);
    assert_ne!(a, b, "the default quarantine holds the freed place back");
}

/// `drain_caches` takes back the caches' current slabs; while warps run it would take back
/// objects they are being handed (and hand them out again), or leave them waiting for a slab
/// that never comes. It waits for the running warps: warps that tag every object they hold with
/// their own tag and check it before freeing never find another's, however often another thread
/// drains meanwhile, and the whole run ends in time.
#[test]
fn draining_while_warps_run_waits_for_them_and_hands_nothing_out_twice() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let rt = Arc::new(
        Runtime::builder()
            .backend(BackendChoice::Sim)
            .arena_bytes(256 << 20)
            .build()
            .unwrap(),
    );
    assert!(rt.cache_bound_bytes().is_some(), "the caches are on");
    let (done, finished) = std::sync::mpsc::channel();
    let worker = {
        let rt = rt.clone();
        std::thread::spawn(move || {
            let stop = AtomicBool::new(false);
            let foreign = AtomicU64::new(0);
            let drains = AtomicU64::new(0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        rt.drain_caches().unwrap();
                        drains.fetch_add(1, Ordering::Relaxed);
                    }
                });
                for round in 0..20u64 {
                    rt.run_warps(64, |warp| {
                        let tag = |l: usize| (u64::from(warp.id()) << 32) | (round << 8) | l as u64;
                        for step in 0..40u64 {
                            let sizes = [16 + (step % 4) * 16; 32];
                            let Ok(handles) = warp.malloc(u32::MAX, &sizes) else {
                                continue;
                            };
                            for (l, &h) in handles.iter().enumerate() {
                                warp.store(h, 0, tag(l));
                            }
                            std::thread::yield_now();
                            for (l, &h) in handles.iter().enumerate() {
                                if warp.load(h, 0) != tag(l) {
                                    foreign.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            warp.free(u32::MAX, &handles);
                        }
                    })
                    .unwrap();
                }
                stop.store(true, Ordering::Relaxed);
            });
            let _ = done.send((foreign.into_inner(), drains.into_inner()));
        })
    };
    let (foreign, drains) = finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("warps and drains together did not finish in 2 minutes (a warp waits for a slab the drain took?)");
    worker.join().unwrap();
    assert!(drains > 0);
    assert_eq!(foreign, 0, "objects handed out twice");
    rt.drain_caches().unwrap();
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

/// A runtime of 128 MiB whose caches may hold three quarters of it, the most allowed.
fn caches_at_their_most_of_128_mib() -> Runtime {
    Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(128 << 20)
        .device_cache_fraction(0.75)
        .ports(64)
        .build()
        .unwrap()
}

/// The soak's pattern with the caches at three quarters of a small arena: the caches sit at
/// their bound and the host runs out of memory (answered cleanly, the warp's cached objects given
/// back); live objects never overlap, no second free frees anything, and everything goes back
/// at the end. With the quarantine emptied to serve an allocation, a second free can land in a
/// new packed chunk, where it is an interior pointer unless it matches an older object's start
/// (a lane and generation match by chance lets it pass as one); far longer runs
/// (`ALIGNMALLOC_SOAK_STEPS=3000`) can even see one answered Ok, once 63 new chunks started
/// objects in its unit before it arrived (docs/usage.md, second frees).
#[test]
fn churn_at_the_caches_bound_in_a_full_arena_stays_whole() {
    use std::sync::Mutex;
    let rt = caches_at_their_most_of_128_mib();
    let warps = 64u32;
    let steps = churn_steps().max(600);
    // Per warp, four slots of (handles, sizes).
    type Held = [([Handle; 32], [u64; 32]); 4];
    let held: Vec<Mutex<Held>> = (0..warps)
        .map(|_| Mutex::new([([Handle::NULL; 32], [0; 32]); 4]))
        .collect();
    let damaged = std::sync::atomic::AtomicU64::new(0);
    let wrong = std::sync::atomic::AtomicU64::new(0);
    let failed = std::sync::atomic::AtomicU64::new(0);
    for round in 0..3u32 {
        rt.run_warps(warps, |warp| {
            let mut mine = held[warp.id() as usize].lock().unwrap();
            let last = round == 2;
            for step in 0..if last { 4 } else { steps } {
                let (r, slot) = churn_pick(warp.id(), round, step, last);
                let (handles, sizes) = mine[slot];
                let mask = (0..32)
                    .filter(|&l| !handles[l].is_null())
                    .fold(0u32, |m, l| m | 1 << l);
                for l in (0..32).filter(|l| mask >> l & 1 == 1) {
                    let end = (sizes[l].max(8) - 8) & !7;
                    if warp.load(handles[l], 0) != handles[l].0
                        || warp.load(handles[l], end) != handles[l].0
                    {
                        damaged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                if mask != 0 {
                    let twice = mask & (mix(r) as u32) & 0x0101_0101;
                    let misjudged = free_then_free_again(&warp, mask, twice, &handles);
                    wrong.fetch_add(misjudged, std::sync::atomic::Ordering::Relaxed);
                    mine[slot] = ([Handle::NULL; 32], [0; 32]);
                }
                if last {
                    continue;
                }
                let sizes: [u64; 32] = std::array::from_fn(|l| {
                    let x = mix(r ^ (l as u64 + 1) << 50);
                    if x % 64 < 2 {
                        (32 << 10) + 1 + (x >> 8) % (96 << 10)
                    } else {
                        1 + (x >> 8) % (1 << (x % 16))
                    }
                });
                let got = if r.is_multiple_of(2) {
                    warp.malloc(u32::MAX, &sizes)
                } else {
                    warp.malloc_contiguous(u32::MAX, &sizes)
                };
                match got {
                    Ok(handles) => {
                        for l in 0..32 {
                            let end = (sizes[l].max(8) - 8) & !7;
                            warp.store(handles[l], 0, handles[l].0);
                            warp.store(handles[l], end, handles[l].0);
                        }
                        mine[slot] = (handles, sizes);
                    }
                    Err(status) => {
                        assert_eq!(status, orchestrator::Status::OutOfMemory);
                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        })
        .unwrap();
        rt.drain_caches().unwrap();
    }
    assert!(
        failed.into_inner() > 0,
        "the arena never ran out: the test no longer reaches the caches' bound"
    );
    assert_eq!(damaged.into_inner(), 0, "objects overlapped");
    assert_eq!(
        wrong.into_inner(),
        0,
        "second frees answered other than DoubleFree"
    );
    rt.check_invariants().unwrap();
    assert!(rt.is_empty(), "{:?}", rt.describe_live_chunks());
}

/// A runtime whose arena (128 MiB) holds two slabs of 8 KiB objects (32 MiB each): the one a
/// warp took, with its 32 objects, and one the host published ahead of need. Half the arena is
/// left: 64 MiB.
fn a_slab_published_ahead() -> (Runtime, [Handle; 32]) {
    let rt = caches_at_their_most_of_128_mib();
    let taken = std::sync::Mutex::new([Handle::NULL; 32]);
    rt.run_warps(1, |warp| {
        *taken.lock().unwrap() = warp.malloc(u32::MAX, &[8 << 10; 32]).unwrap();
    })
    .unwrap();
    // The service publishes the next slab once it sees the first one taken.
    let started = std::time::Instant::now();
    while rt.cache_stats().unwrap().held_bytes < 64 << 20 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "no slab published ahead: {:?}",
            rt.cache_stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(rt.cache_stats().unwrap().held_bytes, 64 << 20);
    (rt, taken.into_inner().unwrap())
}

/// The warp's objects are still whole and go back; the caches drain and the allocator is empty.
fn free_and_drain(rt: &Runtime, small: [Handle; 32]) {
    rt.run_warps(1, |warp| {
        for (l, &h) in small.iter().enumerate() {
            warp.store(h, 0, l as u64);
        }
        assert!(
            small
                .iter()
                .enumerate()
                .all(|(l, &h)| warp.load(h, 0) == l as u64)
        );
        assert!(
            warp.free(u32::MAX, &small)
                .lanes
                .iter()
                .all(|s| *s == LaneStatus::Ok)
        );
    })
    .unwrap();
    rt.drain_caches().unwrap();
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

/// An allocation that fits the arena only without the slab published ahead of need (66 MiB
/// asked, 64 MiB free): the host takes that slab back and serves it, counted once as served, for
/// a warp through the mailbox and for host code alike. The class's warps go on allocating.
#[test]
fn an_allocation_the_arena_has_no_room_for_takes_back_the_slabs_published_ahead() {
    const BIG: u64 = 66 << 20;
    // A warp's request through the mailbox.
    let (rt, small) = a_slab_published_ahead();
    let big = std::sync::Mutex::new(None);
    rt.run_warps(1, |warp| {
        let mut sizes = [0u64; 32];
        sizes[0] = BIG;
        *big.lock().unwrap() = Some(warp.malloc(1, &sizes));
    })
    .unwrap();
    let handles = big
        .into_inner()
        .unwrap()
        .unwrap()
        .expect("66 MiB after the slab came back");
    let stats = rt.cache_stats().unwrap();
    assert_eq!(stats.recalls, 1);
    assert_eq!(stats.held_bytes, 32 << 20);
    assert_eq!(
        rt.counters().unwrap().by_status[orchestrator::Status::OutOfMemory as usize],
        0,
        "served on the second try: one answer, Ok"
    );
    // The class's next warps still allocate (the current slab has room), nothing overlaps.
    rt.run_warps(1, |warp| {
        let more = warp.malloc(u32::MAX, &[8 << 10; 32]).unwrap();
        let lo = handles[0].address();
        assert!(
            more.iter()
                .all(|h| h.address() + (8 << 10) <= lo || h.address() >= lo + BIG)
        );
        assert!(
            warp.free(u32::MAX, &more)
                .lanes
                .iter()
                .all(|s| *s == LaneStatus::Ok)
        );
        assert_eq!(warp.free(1, &handles).lanes[0], LaneStatus::Ok);
    })
    .unwrap();
    free_and_drain(&rt, small);

    // Host code's allocation.
    let (rt, small) = a_slab_published_ahead();
    let host = rt.alloc(BIG).expect("66 MiB after the slab came back");
    assert_eq!(rt.cache_stats().unwrap().recalls, 1);
    rt.write(host, BIG - 8, &7u64.to_le_bytes()).unwrap();
    rt.free(host).unwrap();
    free_and_drain(&rt, small);
}

/// With the slab published ahead taken back and the arena still full, a warp of the class that
/// needs its next slab asks, is denied and goes through the mailbox, where it runs out of
/// memory cleanly; nothing is held that no object uses.
#[test]
fn a_class_whose_slab_was_taken_back_asks_again_and_is_answered() {
    let (rt, small) = a_slab_published_ahead();
    let host = rt.alloc(66 << 20).unwrap();
    // The rest of the arena, 2 MiB at a time.
    let rest: Vec<Handle> = std::iter::from_fn(|| rt.alloc(2 << 20).ok()).collect();
    assert!(!rest.is_empty());
    let outcome = std::sync::Mutex::new(Vec::new());
    rt.run_warps(1, |warp| {
        // 4096 objects fill the current slab; the next ones need a slab that has no room.
        for _ in 0..(4096 / 32 + 1) {
            outcome
                .lock()
                .unwrap()
                .push(warp.malloc(u32::MAX, &[8 << 10; 32]));
        }
        for got in outcome.lock().unwrap().iter().flatten() {
            assert!(
                warp.free(u32::MAX, got)
                    .lanes
                    .iter()
                    .all(|s| *s == LaneStatus::Ok)
            );
        }
    })
    .unwrap();
    let outcome = outcome.into_inner().unwrap();
    assert_eq!(
        outcome.iter().filter(|r| r.is_err()).count(),
        2,
        "the 32 objects taken first fill the slab's last places with the first 127 warps: {:?}",
        outcome.iter().map(|r| r.is_ok()).collect::<Vec<_>>()
    );
    rt.free(host).unwrap();
    for h in rest {
        rt.free(h).unwrap();
    }
    free_and_drain(&rt, small);
}
