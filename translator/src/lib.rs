//! The warp-aware layout of alignmalloc, written once in Rust; `device/include/alignmalloc/detail/layout.h`
//! is its CUDA C++ twin and a parity test holds the two equal.
//!
//! - [`geometry`]: from the 32 lane sizes of one warp request, the size class, tile, per-lane span,
//!   chunk size and the units the chunk needs.
//! - [`slot`]: where each lane's tiles sit in a tile row (the paper's pattern order, or identity).
//! - [`handle`]: the 64-bit handle a lane gets back, and `translate(handle, offset)`, which any
//!   thread can apply to any handle.
//!
//! Everything here is pure arithmetic on integers: no allocation, no I/O, no `unsafe`.

mod error;
pub mod geometry;
pub mod handle;
pub mod slot;

pub use error::LayoutError;
pub use geometry::{ARRANGED_MAX_EXPANSION, Geometry, GeometryConfig, SizeClass, small_offsets};
pub use handle::{
    Arrangement, CACHE_GENERATIONS, CACHE_GENERATIONS_START, CACHE_STAMP_FLAG, GENERATIONS, Handle,
    HandleKind, contiguous_handles, handles_at, lane_handles, lane_offsets, warp_handles,
};
pub use slot::SlotOrder;

/// Lanes in a warp.
pub const WARP_LANES: usize = 32;
/// Small allocations are rounded to this many bytes.
pub const SMALL_ALIGN: u64 = 16;
/// The small space hands out runs of units of this many bytes.
pub const SMALL_UNIT_BYTES: u64 = 256;
/// A leaf of a portion VABlock: the driver's 64 KiB big page.
pub const LEAF_BYTES: u64 = uvm_geometry::BIG_PAGE_BYTES;
/// The driver's VA block.
pub const VABLOCK_BYTES: u64 = uvm_geometry::VABLOCK_BYTES;
/// Smallest tile (4 KiB); handles store `tile_log2 - MIN_TILE_LOG2`.
pub const MIN_TILE_LOG2: u32 = 12;
/// Largest tile (64 KiB, the large class).
pub const MAX_TILE_LOG2: u32 = 16;
/// Addresses in handles have 48 bits.
pub const ADDRESS_BITS: u32 = 48;
