//! Several devices on the sim backend: one runtime per simulated device, each with its own arena,
//! mailbox and service thread. Frees of another device's objects, from the host and from warps,
//! a device closed while another runs, and both devices' warps at once.

use orchestrator::LaneStatus;
use runtime::{BackendChoice, DeviceList, Devices, Error, Handle, Runtime};

fn two_devices() -> Devices {
    let builder = Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(256 << 20)
        .ports(64);
    Devices::open(builder, &DeviceList::Ordinals(vec![0, 1])).unwrap()
}

fn all_hold(devices: &Devices) {
    for (i, rt) in devices.iter() {
        rt.check_invariants()
            .unwrap_or_else(|e| panic!("device {i}: {e}"));
    }
}

#[test]
fn device_lists_parse_and_bad_ones_say_why() {
    assert_eq!("all".parse::<DeviceList>().unwrap(), DeviceList::All);
    assert_eq!(
        " 0 , 1 ".parse::<DeviceList>().unwrap(),
        DeviceList::Ordinals(vec![0, 1])
    );
    assert_eq!(
        "0,0".parse::<DeviceList>().unwrap(),
        DeviceList::Ordinals(vec![0, 0])
    );
    for bad in ["", "one", "0,,1", "-1"] {
        let err = bad.parse::<DeviceList>().unwrap_err();
        assert!(
            err.contains("ordinal") || err.contains("no device"),
            "{bad}: {err}"
        );
    }
    let builder = Runtime::builder().backend(BackendChoice::Sim);
    assert!(matches!(
        Devices::open(builder, &DeviceList::Ordinals(vec![])),
        Err(Error::Config(_))
    ));
}

#[test]
fn a_device_that_cannot_open_gives_its_typed_error_and_its_ordinal() {
    // Less than one 2 MiB block: every device's runtime refuses it.
    let builder = Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(1 << 20);
    let err = Devices::open(builder, &DeviceList::Ordinals(vec![0, 1]))
        .err()
        .expect("no device can open");
    let Error::DeviceOpen { ordinal, cause } = &err else {
        panic!("not a DeviceOpen: {err:?}")
    };
    assert_eq!(*ordinal, 0, "the first device stops the set");
    assert!(
        matches!(**cause, Error::Resolver(_) | Error::Config(_)),
        "the runtime's own error, typed: {cause:?}"
    );
    assert!(err.to_string().starts_with("device 0: "), "{err}");
}

#[test]
fn each_device_has_its_own_arena_and_host_frees_find_the_owner() {
    let devices = two_devices();
    assert_eq!(devices.len(), 2);
    let a = devices.get(0).unwrap().alloc(4096).unwrap();
    let b = devices.get(1).unwrap().alloc(4096).unwrap();
    assert_eq!(devices.owner_of(a.address()), Some(0));
    assert_eq!(devices.owner_of(b.address()), Some(1));
    let (a_base, a_bytes) = devices.get(0).unwrap().arena_segments()[0];
    let (b_base, b_bytes) = devices.get(1).unwrap().arena_segments()[0];
    assert!(a_base + a_bytes <= b_base || b_base + b_bytes <= a_base);

    // Asked of the wrong device: refused, named, nothing freed.
    match devices.free_on(0, b) {
        Err(Error::WrongDevice {
            asked: 0, owner: 1, ..
        }) => {}
        other => panic!("expected WrongDevice, got {other:?}"),
    }
    assert_eq!(devices.get(1).unwrap().live_chunks(), 1);
    all_hold(&devices);

    // A handle of no arena, and one past the set.
    assert!(matches!(
        devices.free(Handle::plain(0x1000, 0).unwrap()),
        Err(Error::NotInAnyArena { .. })
    ));
    assert!(matches!(
        devices.get(2),
        Err(Error::NoSuchDevice {
            index: 2,
            devices: 2
        })
    ));

    // Routed to the owner.
    devices.free(b).unwrap();
    devices.free_on(0, a).unwrap();
    devices.free(Handle::NULL).unwrap();
    all_hold(&devices);
    assert!(devices.iter().all(|(_, rt)| rt.is_empty()));
}

#[test]
fn a_warp_freeing_another_devices_objects_is_refused_and_changes_nothing() {
    let devices = two_devices();
    // Device 1's warp allocates a small (device cache) and a large (host) object per lane.
    let theirs = std::sync::Mutex::new(Vec::new());
    devices
        .get(1)
        .unwrap()
        .run_warps(1, |warp| {
            for bytes in [64, 64 << 10] {
                theirs
                    .lock()
                    .unwrap()
                    .push(warp.malloc(u32::MAX, &[bytes; 32]).unwrap());
            }
        })
        .unwrap();
    let theirs = theirs.into_inner().unwrap();
    let live_before = devices.get(1).unwrap().live_chunks();
    // Device 0's warp frees them through its own mailbox.
    devices
        .get(0)
        .unwrap()
        .run_warps(1, |warp| {
            // The small objects carry a device cache's generation on blocks where this
            // device's caches hold no slab: what a second free of an object whose slab went
            // back looks like, so DoubleFree. The large ones are in no arena of this device.
            for (handles, expected) in theirs
                .iter()
                .zip([LaneStatus::DoubleFree, LaneStatus::InvalidHandle])
            {
                let outcome = warp.free(u32::MAX, handles);
                assert!(
                    outcome.lanes.iter().all(|&s| s == expected),
                    "{:?}",
                    outcome.lanes
                );
            }
        })
        .unwrap();
    all_hold(&devices);
    assert_eq!(devices.get(1).unwrap().live_chunks(), live_before);
    assert!(devices.get(0).unwrap().is_empty());
    // Their own device frees them.
    devices
        .get(1)
        .unwrap()
        .run_warps(1, |warp| {
            for handles in &theirs {
                let outcome = warp.free(u32::MAX, handles);
                assert!(outcome.lanes.iter().all(|&s| s == LaneStatus::Ok));
            }
        })
        .unwrap();
    devices.get(1).unwrap().drain_caches().unwrap();
    all_hold(&devices);
    assert!(devices.get(1).unwrap().is_empty());
}

#[test]
fn both_devices_serve_their_warps_at_once() {
    let devices = two_devices();
    std::thread::scope(|scope| {
        for (i, rt) in devices.iter() {
            scope.spawn(move || {
                rt.run_warps(32, |warp| {
                    for round in 0..20u64 {
                        let bytes = [16u64, 1000, 40_000][(round % 3) as usize];
                        let handles = warp.malloc(u32::MAX, &[bytes; 32]).unwrap();
                        for (lane, h) in handles.iter().enumerate() {
                            warp.store(*h, 0, (i as u64) << 32 | lane as u64);
                        }
                        for (lane, h) in handles.iter().enumerate() {
                            assert_eq!(warp.load(*h, 0), (i as u64) << 32 | lane as u64);
                        }
                        let outcome = warp.free(u32::MAX, &handles);
                        assert!(outcome.lanes.iter().all(|&s| s == LaneStatus::Ok));
                    }
                })
                .unwrap();
            });
        }
    });
    for (i, rt) in devices.iter() {
        rt.drain_caches().unwrap();
        rt.check_invariants()
            .unwrap_or_else(|e| panic!("device {i}: {e}"));
        assert!(rt.is_empty(), "device {i}: {:?}", rt.describe_live_chunks());
        assert!(rt.service_stats().requests > 0, "device {i} served nothing");
    }
}

#[test]
fn a_closed_device_answers_closed_and_the_others_run_on() {
    let mut devices = two_devices();
    let kept = devices.get(1).unwrap().alloc(1 << 20).unwrap();
    devices.close(1).unwrap();
    assert!(matches!(
        devices.get(1),
        Err(Error::DeviceClosed {
            index: 1,
            ordinal: 1
        })
    ));
    assert!(matches!(devices.close(1), Err(Error::DeviceClosed { .. })));
    // Its arena went with it: the handle is in no open arena.
    assert!(matches!(
        devices.free(kept),
        Err(Error::NotInAnyArena { .. })
    ));
    assert_eq!(devices.iter().count(), 1);
    let rt = devices.get(0).unwrap();
    rt.run_warps(8, |warp| {
        let handles = warp.malloc(u32::MAX, &[4096; 32]).unwrap();
        assert!(
            warp.free(u32::MAX, &handles)
                .lanes
                .iter()
                .all(|&s| s == LaneStatus::Ok)
        );
    })
    .unwrap();
    rt.drain_caches().unwrap();
    rt.check_invariants().unwrap();
    assert!(rt.is_empty());
}

/// Fault counters of a set: the sim backend has none, and says so with a defined error.
#[cfg(feature = "cupti")]
#[test]
fn a_sets_fault_counters_need_the_gpu() {
    let devices = two_devices();
    assert!(matches!(
        devices.take_faults(),
        Err(Error::WrongBackend { .. })
    ));
}
