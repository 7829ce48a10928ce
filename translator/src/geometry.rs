//! Size classes and chunk geometry of one warp request.
//!
//! With `m` the largest of the 32 lane sizes (`max` over active lanes; inactive lanes ask 0):
//!
//! | class   | when                 | tile | per-lane span `L`          | chunk                      | units            |
//! |---------|----------------------|------|----------------------------|----------------------------|------------------|
//! | small   | `m <= small_max`     | none | `round16(s_l)`, lane order | sum of spans (<= 64 KiB)   | 256 B units      |
//! | portion | `m <= portion_max`   | `L`  | `next_pow2(max(m, 4 KiB))` | `32 L` (128 KiB..=1 MiB)   | 64 KiB leaves    |
//! | large   | `m > portion_max`    | 64 K | `round_up(m, 64 KiB)`      | `(L / 64 KiB) x 2 MiB`     | 2 MiB VABlocks   |
//!
//! Invariants: `chunk_bytes == units * unit_bytes(class)`; for portion and large,
//! `chunk_bytes == 32 * lane_span` and `lane_span` is a multiple of the tile; a portion chunk is a
//! warptree of a power-of-two number of leaves (2..=16).
//!
//! What a request is given ([`Geometry::for_request`]) follows what its lanes ask, not 32 times
//! the largest lane. A request keeps the table above (arranged, or thread-contiguous at
//! `lane_span` strides) while its chunk is at most [`ARRANGED_MAX_EXPANSION`] times its *packed*
//! size, which holds for every warp whose active lanes all ask one size; a warp whose lanes
//! diverge further is packed: the small class's layout at any size, each lane's object at the
//! exclusive prefix sum of the rounded sizes of the lanes before it ([`small_offsets`]), so
//! the chunk is the bytes asked plus at most 15 per lane, and its lanes get plain handles (which
//! `translate` and `am::ptr` read like arranged ones). The table's chunks are placed in O(1)
//! structures with coarse bookkeeping (warptrees, runs of VA blocks); packed ones in the small
//! space's 256-byte units, which costs more per byte, so a request is packed only where that
//! saves memory.

use crate::error::LayoutError;
use crate::handle::Arrangement;
use crate::{
    LEAF_BYTES, MAX_TILE_LOG2, MIN_TILE_LOG2, SMALL_ALIGN, SMALL_UNIT_BYTES, VABLOCK_BYTES,
    WARP_LANES,
};

/// The three size classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum SizeClass {
    /// Packed by lane order in the small space.
    Small = 0,
    /// One warptree in a portion VABlock, one tile per lane.
    Portion = 1,
    /// Consecutive VABlocks, tile row `k` of all lanes in VABlock `k`.
    Large = 2,
}

impl SizeClass {
    /// Bytes of one unit the chunk is counted in.
    pub const fn unit_bytes(self) -> u64 {
        match self {
            SizeClass::Small => SMALL_UNIT_BYTES,
            SizeClass::Portion => LEAF_BYTES,
            SizeClass::Large => VABLOCK_BYTES,
        }
    }
}

/// A chunk of the size-class table may be at most this many times the request's packed size; a
/// request whose table chunk would be larger is packed (see the module docs). Tiles and spans
/// round a lane up to less than twice its size, so a warp whose lanes ask one size keeps the
/// table's placement.
pub const ARRANGED_MAX_EXPANSION: u64 = 2;

/// The per-lane limit can be set at most this high (1 TiB).
pub const MAX_LANE_BYTES_LIMIT: u64 = 1 << 40;

/// The class thresholds and the per-lane limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeometryConfig {
    small_max: u64,
    portion_max: u64,
    max_lane_bytes: u64,
}

impl Default for GeometryConfig {
    fn default() -> Self {
        Self {
            small_max: 2 << 10,
            portion_max: 32 << 10,
            max_lane_bytes: 4 << 30,
        }
    }
}

impl GeometryConfig {
    /// Thresholds: `small_max` a multiple of 16 in 16..=2048; `portion_max` a power of two in
    /// 4 KiB..=32 KiB; `max_lane_bytes` in `portion_max..=1 TiB` (so no span arithmetic overflows).
    pub fn new(small_max: u64, portion_max: u64, max_lane_bytes: u64) -> Result<Self, LayoutError> {
        if small_max == 0 || small_max > 2048 || !small_max.is_multiple_of(SMALL_ALIGN) {
            return Err(LayoutError::BadConfig(
                "small_max must be a multiple of 16 in 16..=2048",
            ));
        }
        let portion_range = 1 << MIN_TILE_LOG2..=1 << (MAX_TILE_LOG2 - 1);
        if !portion_max.is_power_of_two() || !portion_range.contains(&portion_max) {
            return Err(LayoutError::BadConfig(
                "portion_max must be a power of two in 4096..=32768",
            ));
        }
        if max_lane_bytes < portion_max || max_lane_bytes > MAX_LANE_BYTES_LIMIT {
            return Err(LayoutError::BadConfig(
                "max_lane_bytes must be in portion_max..=1 TiB",
            ));
        }
        Ok(Self {
            small_max,
            portion_max,
            max_lane_bytes,
        })
    }

    /// Largest lane size served by the small class.
    pub fn small_max(&self) -> u64 {
        self.small_max
    }

    /// Largest lane size served by the portion class.
    pub fn portion_max(&self) -> u64 {
        self.portion_max
    }

    /// Largest size one lane may ask for.
    pub fn max_lane_bytes(&self) -> u64 {
        self.max_lane_bytes
    }
}

/// The chunk one warp request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The size class.
    pub class: SizeClass,
    /// log2 of the tile (12..=16); 0 for the small class, which has no tile.
    pub tile_log2: u32,
    /// Per-lane span `L` (small: the largest rounded span).
    pub lane_span: u64,
    /// Bytes of the whole chunk.
    pub chunk_bytes: u64,
    /// The chunk in units of its class (256 B, 64 KiB leaves, 2 MiB VABlocks).
    pub units: u64,
}

impl Geometry {
    /// The geometry of the table above for these lane sizes (what an arranged request whose
    /// lanes agree is given; [`Geometry::for_request`] decides for any request); `Ok(None)` when
    /// every lane asks 0.
    pub fn of(
        sizes: &[u64; WARP_LANES],
        config: &GeometryConfig,
    ) -> Result<Option<Self>, LayoutError> {
        let max = check_limit(sizes, config)?;
        Ok(match max {
            0 => None,
            m if m <= config.small_max => Some(packed_of(sizes, m)),
            m => Some(arranged_of(m, config)),
        })
    }

    /// What a request laid out as `arrangement` is given: its geometry and the arrangement its
    /// lanes' handles follow (see the module docs). [`Geometry::of`] with the arrangement asked
    /// for, unless that chunk is over [`ARRANGED_MAX_EXPANSION`] times the packed one: then
    /// packed and contiguous.
    pub fn for_request(
        sizes: &[u64; WARP_LANES],
        config: &GeometryConfig,
        arrangement: Arrangement,
    ) -> Result<Option<(Self, Arrangement)>, LayoutError> {
        let max = check_limit(sizes, config)?;
        if max == 0 {
            return Ok(None);
        }
        let packed = packed_of(sizes, max);
        if max <= config.small_max {
            return Ok(Some((packed, Arrangement::Contiguous)));
        }
        let table = arranged_of(max, config);
        // The packed sum is at most 32 x 1 TiB: no overflow.
        if table.chunk_bytes > ARRANGED_MAX_EXPANSION * packed.chunk_bytes {
            Ok(Some((packed, Arrangement::Contiguous)))
        } else {
            Ok(Some((table, arrangement)))
        }
    }

    /// For the portion class: the warptree has `2^warptree_log2()` leaves.
    pub fn warptree_log2(&self) -> u32 {
        self.units.trailing_zeros()
    }

    /// Whether lanes get arranged (tiled) handles.
    pub fn is_arranged(&self) -> bool {
        self.class != SizeClass::Small
    }
}

/// The largest lane size; `SizeOverLimit` naming the first lane over the per-lane limit.
fn check_limit(sizes: &[u64; WARP_LANES], config: &GeometryConfig) -> Result<u64, LayoutError> {
    let max = sizes.iter().copied().max().unwrap_or(0);
    if max > config.max_lane_bytes {
        let lane = sizes
            .iter()
            .position(|&s| s > config.max_lane_bytes)
            .expect("the largest size is over the limit");
        return Err(LayoutError::SizeOverLimit {
            lane: lane as u32,
            size: sizes[lane],
            limit: config.max_lane_bytes,
        });
    }
    Ok(max)
}

/// The packed (small-class) geometry of sizes whose largest is `max` (within the limit, so the
/// sum of 32 rounded sizes cannot overflow).
fn packed_of(sizes: &[u64; WARP_LANES], max: u64) -> Geometry {
    let chunk_bytes: u64 = sizes.iter().map(|&s| round16(s)).sum();
    Geometry {
        class: SizeClass::Small,
        tile_log2: 0,
        lane_span: round16(max),
        chunk_bytes,
        units: chunk_bytes.div_ceil(SMALL_UNIT_BYTES),
    }
}

/// The arranged geometry (portion or large) of a request whose largest lane asks `max`, over
/// the small class's limit.
fn arranged_of(max: u64, config: &GeometryConfig) -> Geometry {
    if max <= config.portion_max {
        let tile_log2 = max.next_power_of_two().trailing_zeros().max(MIN_TILE_LOG2);
        let chunk_bytes = (WARP_LANES as u64) << tile_log2;
        Geometry {
            class: SizeClass::Portion,
            tile_log2,
            lane_span: 1 << tile_log2,
            chunk_bytes,
            units: chunk_bytes / LEAF_BYTES,
        }
    } else {
        let lane_span = max.next_multiple_of(LEAF_BYTES);
        let units = lane_span / LEAF_BYTES;
        Geometry {
            class: SizeClass::Large,
            tile_log2: MAX_TILE_LOG2,
            lane_span,
            chunk_bytes: units * VABLOCK_BYTES,
            units,
        }
    }
}

/// Small class: each lane's rounded span. Wrapping, so it is total: sizes that wrap are over
/// any limit and never reach a small chunk's geometry.
fn round16(size: u64) -> u64 {
    size.wrapping_add(SMALL_ALIGN - 1) & !(SMALL_ALIGN - 1)
}

/// Small class: each lane's offset in the chunk (exclusive prefix sums of the rounded spans,
/// wrapping like `round16`).
pub fn small_offsets(sizes: &[u64; WARP_LANES]) -> [u64; WARP_LANES] {
    let mut offsets = [0; WARP_LANES];
    let mut at = 0u64;
    for (offset, &size) in offsets.iter_mut().zip(sizes) {
        *offset = at;
        at = at.wrapping_add(round16(size));
    }
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(lane: usize, size: u64) -> [u64; WARP_LANES] {
        let mut sizes = [0; WARP_LANES];
        sizes[lane] = size;
        sizes
    }

    fn geo(sizes: [u64; WARP_LANES]) -> Geometry {
        Geometry::of(&sizes, &GeometryConfig::default())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn class_boundaries() {
        let g = geo(one(3, 2048));
        assert_eq!(
            (g.class, g.chunk_bytes, g.units),
            (SizeClass::Small, 2048, 8)
        );
        let g = geo([2048; 32]);
        assert_eq!((g.chunk_bytes, g.units), (64 << 10, 256));
        let g = geo(one(0, 2049));
        assert_eq!(
            (g.class, g.tile_log2, g.chunk_bytes, g.units),
            (SizeClass::Portion, 12, 128 << 10, 2)
        );
        assert_eq!(g.warptree_log2(), 1);
        let g = geo(one(31, 32 << 10));
        assert_eq!((g.tile_log2, g.chunk_bytes, g.units), (15, 1 << 20, 16));
        assert_eq!(g.warptree_log2(), 4);
        let g = geo(one(5, (32 << 10) + 1));
        assert_eq!(
            (g.class, g.tile_log2, g.lane_span, g.units),
            (SizeClass::Large, 16, 64 << 10, 1)
        );
        assert_eq!(g.chunk_bytes, 2 << 20);
        let g = geo(one(5, (1 << 20) + 1));
        assert_eq!(
            (g.lane_span, g.units, g.chunk_bytes),
            (17 << 16, 17, 34 << 20)
        );
    }

    #[test]
    fn small_sizes_round_to_16_and_pack_by_lane() {
        let mut sizes = [0; 32];
        sizes[0] = 1;
        sizes[1] = 16;
        sizes[2] = 17;
        sizes[5] = 100;
        let g = geo(sizes);
        assert_eq!(g.chunk_bytes, 16 + 16 + 32 + 112);
        assert_eq!(g.units, 1);
        let off = small_offsets(&sizes);
        assert_eq!(&off[..7], &[0, 16, 32, 64, 64, 64, 176]);
    }

    #[test]
    fn all_zero_is_no_request_and_oversize_is_an_error() {
        let cfg = GeometryConfig::default();
        assert_eq!(Geometry::of(&[0; 32], &cfg), Ok(None));
        assert_eq!(
            Geometry::of(&one(7, (4 << 30) + 1), &cfg),
            Err(LayoutError::SizeOverLimit {
                lane: 7,
                size: (4 << 30) + 1,
                limit: 4 << 30
            })
        );
        assert_eq!(
            Geometry::of(&one(7, u64::MAX), &cfg).unwrap_err(),
            LayoutError::SizeOverLimit {
                lane: 7,
                size: u64::MAX,
                limit: 4 << 30
            }
        );
    }

    fn request(sizes: [u64; WARP_LANES], arrangement: Arrangement) -> (Geometry, Arrangement) {
        Geometry::for_request(&sizes, &GeometryConfig::default(), arrangement)
            .unwrap()
            .unwrap()
    }

    const ARRANGED: Arrangement = Arrangement::Arranged(crate::SlotOrder::Pattern);

    #[test]
    fn contiguous_requests_whose_lanes_diverge_are_packed() {
        let mut sizes = [100; 32];
        sizes[17] = 3 << 20;
        let (g, a) = request(sizes, Arrangement::Contiguous);
        assert_eq!(a, Arrangement::Contiguous);
        assert_eq!(g.class, SizeClass::Small);
        assert_eq!(g.chunk_bytes, (3 << 20) + 31 * 112);
        assert_eq!(g.units, g.chunk_bytes.div_ceil(256));
        // One lane of 100 MiB takes 100 MiB, not 32 lanes' worth.
        let (g, _) = request(one(0, 100 << 20), Arrangement::Contiguous);
        assert_eq!(g.chunk_bytes, 100 << 20);
        // Lanes of one size keep the table's chunk, laid out at lane_span strides.
        let (g, a) = request([1 << 20; 32], Arrangement::Contiguous);
        assert_eq!((g.class, a), (SizeClass::Large, Arrangement::Contiguous));
        assert_eq!(g.chunk_bytes, 32 << 20);
    }

    #[test]
    fn arranged_requests_stay_arranged_while_lanes_agree() {
        // Every active lane one size: the tile rounds up by less than 2x.
        for size in [2049, 4097, 5 << 10, (32 << 10) + 1, (64 << 10) + 1, 3 << 20] {
            let (g, a) = request([size; 32], ARRANGED);
            assert_eq!(a, ARRANGED, "{size}");
            assert_eq!(
                Some(g),
                Geometry::of(&[size; 32], &GeometryConfig::default()).unwrap()
            );
        }
        // Small sizes are packed as before.
        assert_eq!(request([2048; 32], ARRANGED).1, Arrangement::Contiguous);
    }

    #[test]
    fn arranged_requests_whose_lanes_diverge_are_packed() {
        // One lane of 3 MiB among lanes of 100 B: 96 MiB arranged, 3 MiB packed.
        let mut sizes = [100; 32];
        sizes[5] = 3 << 20;
        let (g, a) = request(sizes, ARRANGED);
        assert_eq!((g.class, a), (SizeClass::Small, Arrangement::Contiguous));
        assert_eq!(g.chunk_bytes, (3 << 20) + 31 * 112);
        // Half the warp asking: 2x exactly stays arranged, past it is packed.
        let mut half = [0; 32];
        half[..16].fill(8 << 10);
        assert_eq!(request(half, ARRANGED).1, ARRANGED);
        let mut fewer = [0; 32];
        fewer[..15].fill(8 << 10);
        assert_eq!(request(fewer, ARRANGED).1, Arrangement::Contiguous);
    }

    #[test]
    fn requests_check_the_limit_and_empty_warps_like_of() {
        let cfg = GeometryConfig::default();
        for arrangement in [ARRANGED, Arrangement::Contiguous] {
            assert_eq!(Geometry::for_request(&[0; 32], &cfg, arrangement), Ok(None));
            assert!(matches!(
                Geometry::for_request(&one(9, u64::MAX), &cfg, arrangement),
                Err(LayoutError::SizeOverLimit { lane: 9, .. })
            ));
        }
    }

    #[test]
    fn thresholds_are_parameters() {
        let cfg = GeometryConfig::new(512, 8192, 1 << 20).unwrap();
        let g = Geometry::of(&one(0, 513), &cfg).unwrap().unwrap();
        assert_eq!((g.class, g.tile_log2), (SizeClass::Portion, 12));
        let g = Geometry::of(&one(0, 8193), &cfg).unwrap().unwrap();
        assert_eq!(g.class, SizeClass::Large);
        assert!(GeometryConfig::new(0, 8192, 1 << 20).is_err());
        assert!(GeometryConfig::new(24, 8192, 1 << 20).is_err());
        assert!(GeometryConfig::new(4096, 8192, 1 << 20).is_err());
        assert!(GeometryConfig::new(512, 6000, 1 << 20).is_err());
        assert!(GeometryConfig::new(512, 65536, 1 << 20).is_err());
        assert!(GeometryConfig::new(512, 8192, 4096).is_err());
        assert!(GeometryConfig::new(512, 8192, (1 << 40) + 1).is_err());
    }
}
