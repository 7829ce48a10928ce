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

use crate::error::LayoutError;
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
    /// The geometry for these lane sizes; `Ok(None)` when every lane asks 0.
    pub fn of(
        sizes: &[u64; WARP_LANES],
        config: &GeometryConfig,
    ) -> Result<Option<Self>, LayoutError> {
        // One pass for the largest size and the packed bytes (the host resolves millions of
        // requests a second); the packed sum may wrap only when some size is over the limit,
        // and then it is not used.
        let (max, packed) = sizes.iter().fold((0u64, 0u64), |(max, packed), &s| {
            (max.max(s), packed.wrapping_add(round16(s)))
        });
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
        if max == 0 {
            return Ok(None);
        }
        let geometry = if max <= config.small_max {
            let chunk_bytes = packed;
            Self {
                class: SizeClass::Small,
                tile_log2: 0,
                lane_span: round16(max),
                chunk_bytes,
                units: chunk_bytes.div_ceil(SMALL_UNIT_BYTES),
            }
        } else if max <= config.portion_max {
            let tile_log2 = max.next_power_of_two().trailing_zeros().max(MIN_TILE_LOG2);
            let chunk_bytes = (WARP_LANES as u64) << tile_log2;
            Self {
                class: SizeClass::Portion,
                tile_log2,
                lane_span: 1 << tile_log2,
                chunk_bytes,
                units: chunk_bytes / LEAF_BYTES,
            }
        } else {
            let lane_span = max.next_multiple_of(LEAF_BYTES);
            let units = lane_span / LEAF_BYTES;
            Self {
                class: SizeClass::Large,
                tile_log2: MAX_TILE_LOG2,
                lane_span,
                chunk_bytes: units * VABLOCK_BYTES,
                units,
            }
        };
        Ok(Some(geometry))
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
