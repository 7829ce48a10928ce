//! Placement by tier: each allocation asks its tier's segments first (by its largest lane
//! object) and the other tier's when its own has no room, so a tier never causes an
//! out-of-memory; plain and cache-slab allocations follow the same rule.

use orchestrator::{PlacementRule, Resolver, ResolverConfig, Status, Tier};
use translator::{Arrangement, SlotOrder};

const BASE: u64 = 1 << 40;
const DEVICE_BLOCKS: usize = 4;
const HOST: u64 = BASE + (64 << 21);
const HOST_BLOCKS: usize = 8;

/// A device tier of 4 blocks first, a host tier of 8 after a gap; objects of 64 KiB or more are
/// hot.
fn tiered() -> Resolver {
    let mut config = ResolverConfig::new(BASE, DEVICE_BLOCKS);
    config.small_blocks = 1;
    config.tier = Tier::Device;
    config.placement = PlacementRule {
        hot_object_bytes: 64 << 10,
    };
    let mut r = Resolver::new(config).unwrap();
    r.add_segment_in(HOST, HOST_BLOCKS, Tier::Host).unwrap();
    r
}

fn arranged(r: &mut Resolver, lane: u64) -> Result<u64, Status> {
    r.alloc(&[lane; 32], Arrangement::Arranged(SlotOrder::Pattern))
        .map(|a| a.chunk_base)
}

#[test]
fn hot_objects_ask_the_device_tier_and_cold_ones_the_host_tier() {
    let mut r = tiered();
    let hot = arranged(&mut r, 64 << 10).unwrap();
    let cold = arranged(&mut r, 1 << 10).unwrap();
    assert_eq!(r.tier_of(hot), Some(Tier::Device), "{hot:#x}");
    assert_eq!(r.tier_of(cold), Some(Tier::Host), "{cold:#x}");
    let (device, host, untiered) = r.object_bytes_by_tier();
    assert!(
        device >= 32 * (64 << 10) && host >= 32 << 10,
        "{device} {host}"
    );
    assert_eq!(untiered, 0);
    // Plain objects too: a 1 MiB one is hot, a 4 KiB one cold.
    let plain_hot = r.alloc_plain(1 << 20).unwrap();
    let plain_cold = r.alloc_plain(4 << 10).unwrap();
    assert_eq!(r.tier_of(plain_hot), Some(Tier::Device));
    assert_eq!(r.tier_of(plain_cold), Some(Tier::Host));
    r.check_invariants().unwrap();
}

#[test]
fn a_full_tier_spills_into_the_other_and_nothing_fails_while_either_has_room() {
    let mut r = tiered();
    // Lanes of 128 KiB arranged: 4 MiB chunks of 2 blocks; the device tier holds 2 of them.
    let mut tiers = Vec::new();
    loop {
        match arranged(&mut r, 128 << 10) {
            Ok(base) => tiers.push(r.tier_of(base).unwrap()),
            Err(Status::OutOfMemory) => break,
            Err(other) => panic!("{other:?}"),
        }
    }
    let device = tiers.iter().filter(|&&t| t == Tier::Device).count();
    let host = tiers.iter().filter(|&&t| t == Tier::Host).count();
    assert!(device >= 1, "the device tier was asked first: {tiers:?}");
    assert!(
        tiers
            .iter()
            .skip_while(|&&t| t == Tier::Device)
            .all(|&t| t == Tier::Host),
        "the device tier filled first, then the host tier: {tiers:?}"
    );
    assert!(
        host >= 3,
        "hot objects spilled into the host tier: {tiers:?}"
    );
    r.check_invariants().unwrap();
    let (used, total) = r.blocks_used();
    assert!(used <= total);
}

#[test]
fn cold_objects_spill_into_the_device_tier_when_the_host_tier_is_full() {
    let mut config = ResolverConfig::new(BASE, DEVICE_BLOCKS);
    config.small_blocks = 1;
    config.tier = Tier::Device;
    config.placement = PlacementRule {
        hot_object_bytes: u64::MAX,
    };
    let mut r = Resolver::new(config).unwrap();
    r.add_segment_in(HOST, 2, Tier::Host).unwrap();
    let mut seen = Vec::new();
    while let Ok(base) = arranged(&mut r, 128 << 10) {
        seen.push(r.tier_of(base).unwrap());
    }
    assert_eq!(seen.first(), Some(&Tier::Host), "{seen:?}");
    assert!(seen.contains(&Tier::Device), "{seen:?}");
    r.check_invariants().unwrap();
}

#[test]
fn segments_without_tiers_are_asked_in_reservation_order() {
    let mut config = ResolverConfig::new(BASE, 4);
    config.small_blocks = 1;
    config.placement = PlacementRule {
        hot_object_bytes: 1 << 30,
    };
    let mut r = Resolver::new(config).unwrap();
    r.add_segment(HOST, 8).unwrap();
    let first = arranged(&mut r, 100 << 10).unwrap();
    assert!(
        first < BASE + (4 << 21),
        "the first segment first: {first:#x}"
    );
    assert_eq!(r.tier_of(first), Some(Tier::Any));
    assert_eq!(r.tier_of(HOST), Some(Tier::Any), "added like the first");
    assert_eq!(r.tier_of(BASE - 1), None);
}
