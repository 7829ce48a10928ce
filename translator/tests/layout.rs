//! Properties of the layout for random warp requests of every class: the map
//! (lane, byte offset) -> chunk offset is one-to-one and stays inside the chunk, lanes never
//! overlap, every lane's handle leads back to its chunk, handles round-trip, and a large chunk's
//! tile row `k` lies in VABlock `k`.

use proptest::prelude::*;
use translator::{
    Geometry, GeometryConfig, Handle, HandleKind, SizeClass, SlotOrder, VABLOCK_BYTES, WARP_LANES,
    warp_handles,
};

/// Lane sizes for one class: some lanes inactive (0), the rest up to the class's top.
fn sizes(top: u64) -> impl Strategy<Value = [u64; WARP_LANES]> {
    prop::collection::vec(prop_oneof![1 => Just(0u64), 4 => 1..=top], WARP_LANES)
        .prop_map(|v| v.try_into().unwrap())
}

fn any_class() -> impl Strategy<Value = [u64; WARP_LANES]> {
    prop_oneof![sizes(2048), sizes(32 << 10), sizes(3 << 20)]
}

fn order() -> impl Strategy<Value = SlotOrder> {
    prop_oneof![Just(SlotOrder::Pattern), Just(SlotOrder::Identity)]
}

/// A chunk base aligned to its class's unit, somewhere in a 47-bit address space.
fn base_for(g: &Geometry, pick: u64) -> u64 {
    let unit = g.class.unit_bytes();
    (pick % ((1u64 << 46) / unit)) * unit + (1 << 40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Byte-exact for small and portion chunks (every byte of every lane), tile-exact for large.
    #[test]
    fn lanes_tile_the_chunk_without_overlap(sizes in any_class(), order in order(), pick in any::<u64>()) {
        let cfg = GeometryConfig::default();
        let Some(g) = Geometry::of(&sizes, &cfg).unwrap() else {
            prop_assert!(sizes.iter().all(|&s| s == 0));
            return Ok(());
        };
        prop_assert_eq!(g.units, g.chunk_bytes.div_ceil(g.class.unit_bytes()));
        let base = base_for(&g, pick);
        let handles = warp_handles(&g, base, &sizes, order).unwrap();
        match g.class {
            SizeClass::Small | SizeClass::Portion => {
                let mut owner = vec![u8::MAX; g.chunk_bytes as usize];
                for lane in 0..WARP_LANES {
                    let h = handles[lane];
                    prop_assert_eq!(h.is_null(), sizes[lane] == 0);
                    for off in 0..sizes[lane] {
                        let at = h.translate(off).wrapping_sub(base);
                        prop_assert!(at < g.chunk_bytes, "lane {} offset {} lands outside", lane, off);
                        prop_assert_eq!(owner[at as usize], u8::MAX, "two bytes at chunk offset {}", at);
                        owner[at as usize] = lane as u8;
                    }
                }
            }
            SizeClass::Large => {
                let tile = 1u64 << g.tile_log2;
                let mut owner = vec![u8::MAX; (g.chunk_bytes / tile) as usize];
                for lane in 0..WARP_LANES {
                    let h = handles[lane];
                    prop_assert_eq!(h.is_null(), sizes[lane] == 0);
                    for k in 0..sizes[lane].div_ceil(tile) {
                        let at = h.translate(k * tile).wrapping_sub(base);
                        prop_assert_eq!(at % tile, 0);
                        prop_assert!(at < g.chunk_bytes);
                        prop_assert_eq!(at / VABLOCK_BYTES, k, "tile row {} outside VABlock {}", k, k);
                        prop_assert_eq!(owner[(at / tile) as usize], u8::MAX);
                        owner[(at / tile) as usize] = lane as u8;
                        // Inside a tile, translation is contiguous.
                        let last = (k * tile + tile - 1).min(sizes[lane] - 1);
                        prop_assert_eq!(h.translate(last) - h.translate(k * tile), last - k * tile);
                    }
                }
            }
        }
        for (lane, h) in handles.iter().enumerate() {
            if h.is_null() {
                continue;
            }
            prop_assert_eq!(h.lane(), lane as u32);
            if g.is_arranged() {
                prop_assert_eq!(h.kind(), HandleKind::Arranged);
                prop_assert_eq!(h.tile_log2(), g.tile_log2);
                prop_assert_eq!(h.chunk_base(order), Ok(base));
            } else {
                prop_assert_eq!(h.kind(), HandleKind::Plain);
            }
        }
    }

    #[test]
    fn handles_round_trip(address in 0u64..1 << 48, tile_log2 in 12u32..=16, lane in 0u32..32) {
        let h = Handle::arranged(address, tile_log2, lane).unwrap();
        prop_assert_eq!((h.address(), h.tile_log2(), h.lane()), (address, tile_log2, lane));
        prop_assert_eq!(h.kind(), HandleKind::Arranged);
        prop_assert_eq!(Handle(h.0), h);
        let p = Handle::plain(address, lane).unwrap();
        prop_assert_eq!((p.address(), p.lane(), p.kind()), (address, lane, HandleKind::Plain));
        prop_assert_eq!(p.translate(12345), address + 12345);
    }

    #[test]
    fn geometry_fits_the_largest_lane(sizes in any_class()) {
        let g = Geometry::of(&sizes, &GeometryConfig::default()).unwrap().unwrap();
        let max = *sizes.iter().max().unwrap();
        prop_assert!(g.lane_span >= max);
        if g.is_arranged() {
            prop_assert_eq!(g.chunk_bytes, 32 * g.lane_span);
            prop_assert_eq!(g.lane_span % (1 << g.tile_log2), 0);
        } else {
            prop_assert!(g.chunk_bytes <= 64 << 10);
        }
        if g.class == SizeClass::Portion {
            prop_assert!(g.units.is_power_of_two() && (2..=16).contains(&g.units));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Thread-contiguous chunks: lane `l`'s whole object lies at `l * lane_span`, contiguous, inside
    /// the chunk, and no two lanes overlap; the generation lands in every non-null handle.
    #[test]
    fn contiguous_lanes_are_disjoint_spans(sizes in any_class(), pick in any::<u64>(), generation in 0u8..8) {
        let Some(g) = Geometry::of(&sizes, &GeometryConfig::default()).unwrap() else {
            return Ok(());
        };
        let base = base_for(&g, pick);
        let handles = translator::lane_handles(&g, base, &sizes, translator::Arrangement::Contiguous, &[generation; 32]).unwrap();
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for (lane, h) in handles.iter().enumerate() {
            prop_assert_eq!(h.is_null(), sizes[lane] == 0);
            if h.is_null() {
                continue;
            }
            prop_assert_eq!(h.kind(), HandleKind::Plain);
            prop_assert_eq!(h.generation(), generation);
            let start = h.translate(0) - base;
            prop_assert_eq!(h.translate(sizes[lane] - 1) - base, start + sizes[lane] - 1);
            prop_assert!(start + sizes[lane] <= g.chunk_bytes);
            if g.is_arranged() {
                prop_assert_eq!(start, lane as u64 * g.lane_span);
            }
            spans.push((start, start + sizes[lane]));
        }
        spans.sort_unstable();
        for pair in spans.windows(2) {
            prop_assert!(pair[0].1 <= pair[1].0, "lanes overlap: {:?}", pair);
        }
    }
}

/// Sizes as a mixed-size kernel asks them: most lanes small, some a few KiB, a few MiB-sized,
/// some inactive; or a whole warp of one size.
fn mixed_or_uniform() -> impl Strategy<Value = [u64; WARP_LANES]> {
    let lane = prop_oneof![
        2 => Just(0u64),
        8 => 1u64..=256,
        4 => 257u64..=4096,
        3 => 4097u64..=(64 << 10),
        1 => (1u64 << 20)..=(3 << 20),
    ];
    let mixed = prop::collection::vec(lane, WARP_LANES).prop_map(|v| v.try_into().unwrap());
    let uniform = (1u64..=(4 << 20)).prop_map(|s| [s; WARP_LANES]);
    prop_oneof![3 => mixed, 1 => uniform]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// What a request is given (`Geometry::for_request`): every lane's object inside the chunk,
    /// no two lanes overlapping, objects 16-byte aligned; a packed chunk is the bytes asked plus
    /// at most 15 per lane, any other at most twice the packed size, and a warp whose lanes all
    /// ask one size keeps the placement of `Geometry::of` in the arrangement it asked for.
    #[test]
    fn requests_take_what_their_lanes_ask(sizes in mixed_or_uniform(), order in order(), contiguous in any::<bool>(), pick in any::<u64>()) {
        let cfg = GeometryConfig::default();
        let asked = translator::Arrangement::Arranged(order);
        let wanted = if contiguous { translator::Arrangement::Contiguous } else { asked };
        let Some((g, arrangement)) = Geometry::for_request(&sizes, &cfg, wanted).unwrap() else {
            prop_assert!(sizes.iter().all(|&s| s == 0));
            return Ok(());
        };
        let bytes: u64 = sizes.iter().sum();
        let packed = sizes.iter().map(|&s| s.next_multiple_of(16)).sum::<u64>();
        if g.class == SizeClass::Small {
            prop_assert_eq!(arrangement, translator::Arrangement::Contiguous);
            prop_assert_eq!(g.chunk_bytes, packed);
            prop_assert!(g.chunk_bytes <= bytes + 15 * WARP_LANES as u64);
        } else {
            prop_assert_eq!(arrangement, wanted);
            prop_assert!(g.chunk_bytes <= translator::ARRANGED_MAX_EXPANSION * packed);
        }
        if sizes.iter().all(|&s| s == sizes[0]) && sizes[0] > cfg.small_max() {
            prop_assert_eq!(arrangement, wanted);
            prop_assert_eq!(Some(g), Geometry::of(&sizes, &cfg).unwrap());
        }
        let base = base_for(&g, pick);
        let handles = translator::lane_handles(&g, base, &sizes, arrangement, &[1; 32]).unwrap();
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for (lane, h) in handles.iter().enumerate() {
            prop_assert_eq!(h.is_null(), sizes[lane] == 0);
            if h.is_null() {
                continue;
            }
            prop_assert_eq!(h.address() % 16, 0);
            if h.kind() == HandleKind::Arranged {
                // Tile-exact: each tile of the lane inside the chunk and tile-aligned.
                let tile = 1u64 << h.tile_log2();
                for k in 0..sizes[lane].div_ceil(tile) {
                    let at = h.translate(k * tile) - base;
                    prop_assert!(at + tile <= g.chunk_bytes);
                    spans.push((at, at + tile));
                }
            } else {
                let start = h.translate(0) - base;
                prop_assert!(start + sizes[lane] <= g.chunk_bytes);
                spans.push((start, start + sizes[lane]));
            }
        }
        spans.sort_unstable();
        for pair in spans.windows(2) {
            prop_assert!(pair[0].1 <= pair[1].0, "lanes overlap: {:?}", pair);
        }
    }
}
