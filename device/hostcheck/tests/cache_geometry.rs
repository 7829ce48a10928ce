//! The functions of `cache_geometry.h` (built as host C++) against their Rust twins in
//! `orchestrator::caches`. The records, codes and constants both use are generated from Rust
//! (`detail/abi.h`, the `headergen` crate), so they need no check here.

#[test]
fn cache_geometry_matches() {
    use orchestrator::caches::{
        CACHE_CLASSES, CACHED_MAX_BYTES, RUN_CLASS, cache_class, channel::entry_parts,
        claims_ahead, device::hash_home, object_slots, run_class_serves, slab_blocks, slab_objects,
        slot_log2,
    };
    assert_eq!(hostcheck::cache(99, 0, 0), u64::MAX, "an unknown function");
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    for size in (0..=70_000)
        .chain((4 << 20) - 10..=(4 << 20) + 10)
        .chain((0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }))
    {
        let rust = cache_class(size).map_or(CACHE_CLASSES as u64, |c| c as u64);
        assert_eq!(hostcheck::cache(0, size, 0), rust, "class of {size}");
        let (base, id, generation) = entry_parts(size);
        assert_eq!(
            hostcheck::cache(3, size, 0),
            u64::from(translator::CACHE_STAMP_FLAG | generation)
        );
        assert_eq!(hostcheck::cache(8, size, 0), u64::from(id));
        assert_eq!(hostcheck::cache(9, size, 0), base);
        let len = 64usize << (size % 12);
        assert_eq!(
            hostcheck::cache(4, size >> 21, len as u64),
            hash_home(size >> 21, len) as u64
        );
    }
    for class in 0..CACHE_CLASSES {
        assert_eq!(hostcheck::cache(1, class as u64, 0), slab_blocks(class));
        assert_eq!(hostcheck::cache(2, class as u64, 0), slab_objects(class));
        assert_eq!(
            hostcheck::cache(17, class as u64, 0),
            u64::from(claims_ahead(class))
        );
        assert_eq!(
            hostcheck::cache(14, class as u64, 0),
            u64::from(slot_log2(class))
        );
    }
    let mut x = 0x0FED_CBA9_8765_4321u64;
    for size in (0..=CACHED_MAX_BYTES + 70_000)
        .step_by(997)
        .chain([CACHED_MAX_BYTES, CACHED_MAX_BYTES + 1])
    {
        let class = cache_class(size).unwrap_or(RUN_CLASS);
        assert_eq!(
            hostcheck::cache(15, class as u64, size),
            object_slots(class, size),
            "slots of {size}"
        );
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Half the draws around the warp's run-class cap, half far past it.
        let packed = x % (if x & 1 == 0 { 2 } else { 64 } * CACHED_MAX_BYTES);
        for arranged in [false, true] {
            assert_eq!(
                hostcheck::cache(16, size | u64::from(arranged) << 63, packed) != 0,
                run_class_serves(arranged, size, packed),
                "max {size}, packed {packed}, arranged {arranged}"
            );
        }
    }
}

#[test]
fn block_table_values_match() {
    use orchestrator::caches::channel::ENTRY_ID_BITS;
    use orchestrator::caches::device::{block_slab, block_value};
    use orchestrator::caches::geometry::CACHE_CLASSES;
    assert_eq!(hostcheck::cache(19, 0, 0), u64::MAX, "0 names no slab");
    assert_eq!(block_slab(0), None);
    for class in 0..CACHE_CLASSES {
        for id in [0, 1, 2, 977, (1 << ENTRY_ID_BITS) - 1] {
            let value = block_value(id, class);
            assert_eq!(
                hostcheck::cache(18, id.into(), class as u64),
                u64::from(value)
            );
            assert_ne!(value, 0);
            assert_eq!(block_slab(value), Some((id as usize, class)));
            assert_eq!(hostcheck::cache(19, value.into(), 0), u64::from(id));
            assert_eq!(hostcheck::cache(20, value.into(), 0), class as u64);
        }
    }
}
