//! The placement setting on the sim backend: which tier each allocation lands in (warps' through
//! the mailbox and the device caches, host code's), growth into the host tier, and the
//! configurations that are refused before any work.

use runtime::{BackendChoice, Error, Placement, Runtime, RuntimeBuilder, Tier};

fn tiered() -> RuntimeBuilder {
    Runtime::builder()
        .backend(BackendChoice::Sim)
        .arena_bytes(32 << 20)
        .placement(Placement::Tiered)
        .device_tier_bytes(8 << 20)
        .hot_object_bytes(64 << 10)
        .ports(64)
}

#[test]
fn a_tiered_arena_puts_hot_objects_in_the_device_tier_and_cold_ones_in_the_host_tier() {
    let rt = tiered().build().unwrap();
    let segments = rt.arena_segments();
    assert_eq!(segments.len(), 2, "{segments:?}");
    assert_eq!(segments[0].1, 8 << 20, "the device tier first");
    assert_eq!(rt.tier_of(segments[0].0), Some(Tier::Device));
    assert_eq!(rt.tier_of(segments[1].0), Some(Tier::Host));
    // Host code's objects.
    let hot = rt.alloc(1 << 20).unwrap();
    let cold = rt.alloc(4 << 10).unwrap();
    assert_eq!(rt.tier_of(hot.address()), Some(Tier::Device));
    assert_eq!(rt.tier_of(cold.address()), Some(Tier::Host));
    // Warps' objects: lanes of 64 KiB (the mailbox) and of 512 B (the device caches' slabs).
    let placed = std::sync::Mutex::new(Vec::new());
    rt.run_warps(4, |warp| {
        for lane_bytes in [64 << 10, 512] {
            let handles = warp.malloc(u32::MAX, &[lane_bytes; 32]).unwrap();
            placed
                .lock()
                .unwrap()
                .push((lane_bytes, handles[0].address()));
            warp.store(handles[3], 0, lane_bytes);
            assert_eq!(warp.load(handles[3], 0), lane_bytes);
            warp.free(u32::MAX, &handles);
        }
    })
    .unwrap();
    for (lane_bytes, address) in placed.into_inner().unwrap() {
        let wanted = if lane_bytes >= 64 << 10 {
            Tier::Device
        } else {
            Tier::Host
        };
        assert_eq!(rt.tier_of(address), Some(wanted), "{lane_bytes} B lanes");
    }
    let (device, host, untiered) = rt.object_bytes_by_tier();
    assert!(device >= 1 << 20 && host >= 4 << 10 && untiered == 0);
    rt.free(hot).unwrap();
    rt.free(cold).unwrap();
    rt.drain_caches().unwrap();
    rt.check_invariants().unwrap();
}

#[test]
fn hot_objects_spill_into_the_host_tier_and_growth_adds_to_it() {
    let rt = tiered().max_arena_bytes(64 << 20).build().unwrap();
    // 2 MiB chunks (32 lanes of 64 KiB): the 8 MiB device tier holds at most four.
    let chunks: Vec<_> = (0..20)
        .map(|_| rt.alloc_arranged(32, 64 << 10).unwrap())
        .collect();
    let tiers: Vec<_> = chunks
        .iter()
        .map(|c| rt.tier_of(c.handles()[0].address()).unwrap())
        .collect();
    let device = tiers.iter().filter(|&&t| t == Tier::Device).count();
    assert!((1..=4).contains(&device), "{tiers:?}");
    assert_eq!(tiers[0], Tier::Device, "asked first");
    assert!(rt.arena_segments().len() > 2, "the arena grew");
    for &(base, _) in &rt.arena_segments()[2..] {
        assert_eq!(rt.tier_of(base), Some(Tier::Host), "growth is host tier");
    }
    for c in chunks {
        rt.free_arranged(c).unwrap();
    }
    rt.check_invariants().unwrap();
}

#[test]
fn host_mapped_and_migrate_arenas_have_one_tier() {
    for (placement, tier) in [
        (Placement::HostMapped, Tier::Host),
        (Placement::Migrate, Tier::Any),
    ] {
        let rt = Runtime::builder()
            .backend(BackendChoice::Sim)
            .arena_bytes(16 << 20)
            .placement(placement)
            .build()
            .unwrap();
        let segments = rt.arena_segments();
        assert_eq!(segments.len(), 1);
        let h = rt.alloc(1 << 20).unwrap();
        assert_eq!(rt.tier_of(h.address()), Some(tier), "{placement:?}");
        rt.free(h).unwrap();
    }
}

#[test]
fn a_device_tier_that_leaves_a_tier_under_two_blocks_is_refused_naming_the_setting() {
    for device in [2 << 20, 30 << 20, 64 << 20] {
        let Err(err) = tiered().device_tier_bytes(device).build() else {
            panic!("a device tier of {device} bytes was accepted");
        };
        assert!(
            matches!(&err, Error::Config(m) if m.contains("ALIGNMALLOC_DEVICE_TIER_BYTES")),
            "{device}: {err}"
        );
    }
    let Err(err) = Runtime::builder()
        .backend(BackendChoice::Sim)
        .hot_object_bytes(4096)
        .build()
    else {
        panic!("a hot-object threshold without the tiered placement was accepted");
    };
    assert!(
        err.to_string().contains("ALIGNMALLOC_HOT_OBJECT_BYTES"),
        "{err}"
    ); // Several devices' arenas are each advised to live on their device: no second say.
    let Err(err) = tiered().device_advice(true).build() else {
        panic!("a placement beside per-device advice was accepted");
    };
    assert!(
        err.to_string().contains("ALIGNMALLOC_PLACEMENT=tiered"),
        "{err}"
    );
}
