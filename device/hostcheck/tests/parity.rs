//! Parity of `device/include/alignmalloc/detail/layout.h` (built as host C++) with the `translator` crate,
//! on over a million random inputs per function family.

use hostcheck as cpp;
use hostcheck::cases::Rng;
use orchestrator::records::CONTIGUOUS_LAYOUT;
use translator::{
    Arrangement, Geometry, GeometryConfig, Handle, LayoutError, SizeClass, SlotOrder,
    contiguous_handles, small_offsets, warp_handles,
};

const ROUNDS: usize = 1_000_000;

fn to_c(config: &GeometryConfig) -> cpp::CGeometryConfig {
    cpp::CGeometryConfig {
        small_max: config.small_max(),
        portion_max: config.portion_max(),
        max_lane_bytes: config.max_lane_bytes(),
    }
}

fn order_of(code: u64) -> SlotOrder {
    if code == 0 {
        SlotOrder::Pattern
    } else {
        SlotOrder::Identity
    }
}

#[test]
fn default_configs_agree() {
    assert_eq!(cpp::default_config(), to_c(&GeometryConfig::default()));
}

#[test]
fn geometry_struct_layout_matches() {
    assert_eq!(
        cpp::sizeof_geometry() as usize,
        std::mem::size_of::<cpp::CGeometry>()
    );
    let offsets = [
        std::mem::offset_of!(cpp::CGeometry, size_class),
        std::mem::offset_of!(cpp::CGeometry, tile_log2),
        std::mem::offset_of!(cpp::CGeometry, lane_span),
        std::mem::offset_of!(cpp::CGeometry, chunk_bytes),
        std::mem::offset_of!(cpp::CGeometry, units),
    ];
    for (field, offset) in offsets.iter().enumerate() {
        assert_eq!(
            cpp::offsetof_geometry(field as u32) as usize,
            *offset,
            "field {field}"
        );
    }
}

#[test]
fn slot_orders_agree() {
    for code in 0..2u32 {
        let order = order_of(u64::from(code));
        for lane in 0..100u32 {
            assert_eq!(
                cpp::slot_of(code, lane),
                order.slot_of(lane),
                "order {code} lane {lane}"
            );
            assert_eq!(
                cpp::lane_at(code, lane),
                order.lane_at(lane),
                "order {code} slot {lane}"
            );
        }
    }
}

#[test]
fn translate_and_fields_agree_on_any_bits() {
    let mut rng = Rng(1);
    for _ in 0..ROUNDS {
        let h = rng.handle();
        let offset = rng.offset();
        let handle = Handle(h);
        assert_eq!(
            cpp::translate(h, offset),
            handle.translate(offset),
            "h {h:#x} off {offset:#x}"
        );
        assert_eq!(
            cpp::handle_fields(h),
            [
                u64::from(handle.kind_field()),
                u64::from(handle.tile_log2()),
                u64::from(handle.lane()),
                handle.address(),
                u64::from(handle.generation()),
            ]
        );
        let generation = (offset % 11) as u8;
        assert_eq!(
            cpp::handle_with_generation(h, u32::from(generation)),
            handle.with_generation(generation).0
        );
        assert_eq!(cpp::handle_free_stamp(h), handle.free_stamp(), "h {h:#x}");
        // Any address and any 32-bit generation (taken modulo the cache generations).
        let cache_generation = (offset >> 20) as u32;
        let cached = Handle::cached(h, cache_generation);
        assert_eq!(cpp::handle_cached(h, cache_generation), cached.0);
        // A cache's handle: plain, its address, and the stamp of its generation.
        assert_eq!(cached.kind(), translator::HandleKind::Plain);
        assert_eq!(cached.address(), handle.address());
        assert_eq!(
            cached.free_stamp(),
            translator::CACHE_STAMP_FLAG | (cache_generation % translator::CACHE_GENERATIONS)
        );
    }
}

#[test]
fn encoders_and_chunk_bases_agree() {
    let mut rng = Rng(2);
    for _ in 0..ROUNDS {
        let address = rng.below(1 << 48);
        let lane = rng.below(32) as u32;
        let tile_log2 = 12 + rng.below(5) as u32;
        let code = rng.below(2);
        let plain = Handle::plain(address, lane).unwrap();
        let arranged = Handle::arranged(address, tile_log2, lane).unwrap();
        assert_eq!(cpp::handle_plain(address, lane), plain.0);
        assert_eq!(cpp::handle_arranged(address, tile_log2, lane), arranged.0);
        match arranged.chunk_base(order_of(code)) {
            Ok(base) => assert_eq!(cpp::chunk_base(arranged.0, code as u32), base),
            Err(LayoutError::BadArrangedAddress(_)) => {
                assert!(address < u64::from(order_of(code).slot_of(lane)) << tile_log2)
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
}

#[test]
fn geometry_offsets_and_lane_handles_agree() {
    let mut rng = Rng(3);
    let mut seen = [0usize; 3];
    let rounds = ROUNDS / 4; // each round checks the geometry, 32 offsets and 32 handles
    for _ in 0..rounds {
        let config = rng.config();
        let sizes = rng.sizes(&config);
        let rust = Geometry::of(&sizes, &config);
        let c = cpp::geometry(&sizes, to_c(&config));
        let g = match (rust, c) {
            (Ok(Some(g)), Ok(cg)) => {
                assert_eq!(
                    cg,
                    cpp::CGeometry {
                        size_class: g.class as u32,
                        tile_log2: g.tile_log2,
                        lane_span: g.lane_span,
                        chunk_bytes: g.chunk_bytes,
                        units: g.units,
                    },
                    "sizes {sizes:?}"
                );
                seen[g.class as usize] += 1;
                (g, cg)
            }
            (Ok(None), Err(cpp::GeometryStatus::Empty)) => continue,
            (
                Err(LayoutError::SizeOverLimit { lane, .. }),
                Err(cpp::GeometryStatus::OverLimit(c)),
            ) => {
                assert_eq!(lane, c);
                continue;
            }
            (r, c) => panic!("disagree on {sizes:?}: rust {r:?}, c++ {c:?}"),
        };
        let offsets = small_offsets(&sizes);
        let code = rng.below(2);
        let unit = g.0.class.unit_bytes();
        let base = (1 << 40) + rng.below(1 << 20) * unit;
        let handles = warp_handles(&g.0, base, &sizes, order_of(code)).unwrap();
        let contiguous = contiguous_handles(&g.0, base, &sizes).unwrap();
        for lane in 0..32u32 {
            assert_eq!(cpp::small_offset(&sizes, lane), offsets[lane as usize]);
            assert_eq!(
                cpp::lane_handle(&g.1, base, &sizes, lane, code as u32),
                handles[lane as usize].0,
                "lane {lane} of {sizes:?}"
            );
            assert_eq!(
                cpp::lane_handle_contiguous(&g.1, base, &sizes, lane),
                contiguous[lane as usize].0,
                "contiguous lane {lane} of {sizes:?}"
            );
        }
    }
    for class in [SizeClass::Small, SizeClass::Portion, SizeClass::Large] {
        assert!(
            seen[class as usize] > rounds / 10,
            "class {class:?} drawn only {} times",
            seen[class as usize]
        );
    }
}

#[test]
fn ptr_index_arithmetic_matches_translate() {
    let mut rng = Rng(0x5eed);
    for _ in 0..100_000 {
        let address = rng.below(1 << 47) & !0xF;
        let tile_log2 = 12 + rng.below(5) as u32;
        let lane = rng.below(32) as u32;
        let h = if rng.below(2) == 0 {
            Handle::plain(address, lane).unwrap()
        } else {
            Handle::arranged(address, tile_log2, lane).unwrap()
        };
        let (first, index) = (rng.below(1 << 20), rng.below(1 << 20));
        for size_log2 in [0u32, 2, 3] {
            assert_eq!(
                cpp::ptr_address(h.0, first, index, size_log2),
                h.translate((first + index) << size_log2),
                "{h:?} first {first} index {index} size 2^{size_log2}"
            );
        }
    }
}

#[test]
fn ptr_loads_and_stores_elements_that_straddle_tiles() {
    // Host memory standing in for an arranged chunk of 4 KiB tiles: lane 5's tiles 0..8.
    let tile = 4096usize;
    let mut chunk = vec![0u8; 32 * 8 * tile + 4096];
    let base = (chunk.as_mut_ptr() as u64).next_multiple_of(4096);
    let h = Handle::arranged(base + 5 * tile as u64, 12, 5).unwrap();
    let elements = (8 * tile / 12) as u64 - 3;
    // SAFETY: elements 3..3 + elements of 12 bytes lie in lane 5's 8 tiles, inside `chunk`.
    let wrong = unsafe { cpp::ptr_store_triples(h.0, 3, elements) };
    assert_eq!(wrong, 0);
    // Read back through the Rust translator: element i's bytes, wherever each lies.
    for i in 0..elements {
        let word = |k: u64| {
            let at = h.translate((3 + i) * 12 + 4 * k);
            let off = (at - chunk.as_ptr() as u64) as usize;
            u32::from_le_bytes(chunk[off..off + 4].try_into().unwrap())
        };
        let i32_ = i as u32;
        assert_eq!(
            [word(0), word(1), word(2)],
            [3 * i32_, 3 * i32_ + 1, 3 * i32_ + 2]
        );
    }
    // Nothing was written outside lane 5's tiles.
    let lane_bytes: usize = (0..8)
        .map(|k| {
            let start = (h.translate(k * tile as u64) - chunk.as_ptr() as u64) as usize;
            chunk[start..start + tile]
                .iter()
                .filter(|&&b| b != 0)
                .count()
        })
        .sum();
    assert_eq!(lane_bytes, chunk.iter().filter(|&&b| b != 0).count());
}

/// What a request is given (`Geometry::for_request` against `am::request_geometry_of`), for
/// arranged (both slot orders) and contiguous requests, random and one-size warps: the same
/// geometry and the same layout for the handles, and each outcome drawn often.
#[test]
fn request_geometry_agrees() {
    let mut rng = Rng(0x33);
    // Packed, kept arranged, empty or over the limit.
    let mut seen = [0usize; 3];
    let rounds = ROUNDS / 4;
    for _ in 0..rounds {
        let config = rng.config();
        let mut sizes = rng.sizes(&config);
        if rng.below(4) == 0 {
            // A warp whose active lanes all ask one size.
            let one = sizes.iter().copied().max().unwrap_or(0);
            sizes.iter_mut().filter(|s| **s != 0).for_each(|s| *s = one);
        }
        let code = rng.below(3);
        let (arrangement, layout) = match code {
            2 => (Arrangement::Contiguous, CONTIGUOUS_LAYOUT),
            _ => (Arrangement::Arranged(order_of(code)), code as u32),
        };
        let rust = Geometry::for_request(&sizes, &config, arrangement);
        let c = cpp::request_geometry(&sizes, to_c(&config), layout);
        match (rust, c) {
            (Ok(Some((g, a))), Ok((cg, clayout))) => {
                let want = cpp::CGeometry {
                    size_class: g.class as u32,
                    tile_log2: g.tile_log2,
                    lane_span: g.lane_span,
                    chunk_bytes: g.chunk_bytes,
                    units: g.units,
                };
                assert_eq!(cg, want, "sizes {sizes:?} layout {layout}");
                let rust_layout = match a {
                    Arrangement::Contiguous => CONTIGUOUS_LAYOUT,
                    Arrangement::Arranged(order) => order.code(),
                };
                assert_eq!(clayout, rust_layout, "sizes {sizes:?} layout {layout}");
                seen[usize::from(a == Arrangement::Contiguous)] += 1;
            }
            (Ok(None), Err(cpp::GeometryStatus::Empty)) => seen[2] += 1,
            (
                Err(LayoutError::SizeOverLimit { lane, .. }),
                Err(cpp::GeometryStatus::OverLimit(c)),
            ) => {
                assert_eq!(lane, c);
                seen[2] += 1;
            }
            (r, c) => panic!("disagree on {sizes:?}: rust {r:?}, c++ {c:?}"),
        }
    }
    assert!(
        seen[0] > rounds / 10 && seen[1] > rounds / 10,
        "arranged {} / packed {} of {rounds}",
        seen[0],
        seen[1]
    );
}
