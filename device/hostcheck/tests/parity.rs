//! Parity of `device/include/alignmalloc/layout.h` (built as host C++) with the `translator` crate,
//! on over a million random inputs per function family.

use hostcheck as cpp;
use hostcheck::cases::Rng;
use translator::{
    Geometry, GeometryConfig, Handle, LayoutError, SizeClass, SlotOrder, contiguous_handles,
    small_offsets, warp_handles,
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
