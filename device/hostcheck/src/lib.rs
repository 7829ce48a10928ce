//! The CUDA C++ headers of `device/include` compiled as host C++ (`shim/layout_shim.cpp`; the
//! device caches and the mailbox client on a host warp in [`caches`] and [`client`], a changing
//! graph's update of device/kernels in [`graph_update`]), with safe
//! Rust wrappers, so tests can hold the headers equal to their Rust twins without a GPU.
//!
//! The functions here are the header's, not the `translator` crate's: a test that compares the two
//! compares two independent implementations of the same formulas. [`cases`] draws the random
//! inputs, for the host test and for the GPU parity run alike.

pub mod caches;
pub mod cases;
pub mod client;
pub mod graph_update;

/// `am::Geometry` as laid out by the C++ compiler.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CGeometry {
    /// `am::SizeClass`.
    pub size_class: u32,
    /// log2 of the tile; 0 for small.
    pub tile_log2: u32,
    /// Per-lane span.
    pub lane_span: u64,
    /// Chunk bytes.
    pub chunk_bytes: u64,
    /// Chunk units.
    pub units: u64,
}

/// `am::GeometryConfig` as laid out by the C++ compiler.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CGeometryConfig {
    /// Largest small lane size.
    pub small_max: u64,
    /// Largest portion lane size.
    pub portion_max: u64,
    /// Per-lane limit.
    pub max_lane_bytes: u64,
}

/// Why `am::geometry_of` gave no geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeometryStatus {
    /// Every lane asked 0.
    Empty,
    /// This lane asked more than the per-lane limit.
    OverLimit(u32),
}

// The shim's integer-only entry points cannot violate memory safety and are declared `safe`;
// the ones that take pointers stay unsafe and are wrapped below.
unsafe extern "C" {
    safe fn am_shim_slot_of(order: u32, lane: u32) -> u32;
    safe fn am_shim_lane_at(order: u32, slot: u32) -> u32;
    fn am_shim_geometry(
        sizes: *const u64,
        small_max: u64,
        portion_max: u64,
        max_lane_bytes: u64,
        out: *mut CGeometry,
        bad_lane: *mut u32,
    ) -> i32;
    fn am_shim_request_geometry(
        sizes: *const u64,
        small_max: u64,
        portion_max: u64,
        max_lane_bytes: u64,
        layout: u32,
        out: *mut CGeometry,
        layout_out: *mut u32,
        bad_lane: *mut u32,
    ) -> i32;
    fn am_shim_default_config(out: *mut CGeometryConfig);
    fn am_shim_small_offset(sizes: *const u64, lane: u32) -> u64;
    safe fn am_shim_handle_plain(address: u64, lane: u32) -> u64;
    safe fn am_shim_handle_arranged(address: u64, tile_log2: u32, lane: u32) -> u64;
    fn am_shim_handle_fields(h: u64, out: *mut u64);
    safe fn am_shim_handle_with_generation(h: u64, generation: u32) -> u64;
    safe fn am_shim_handle_cached(address: u64, generation: u32) -> u64;
    safe fn am_shim_handle_free_stamp(h: u64) -> u32;
    fn am_shim_lane_handle_contiguous(
        g: *const CGeometry,
        chunk_base: u64,
        sizes: *const u64,
        lane: u32,
    ) -> u64;
    safe fn am_shim_translate(h: u64, offset: u64) -> u64;
    safe fn am_shim_chunk_base(h: u64, order: u32) -> u64;
    fn am_shim_lane_handle(
        g: *const CGeometry,
        chunk_base: u64,
        sizes: *const u64,
        lane: u32,
        order: u32,
    ) -> u64;
    safe fn am_shim_sizeof_geometry() -> u64;
    safe fn am_shim_cache(what: u32, x: u64, y: u64) -> u64;
    safe fn am_shim_next_pause(pause: u32, longest: u32) -> u32;
    safe fn am_shim_offsetof_geometry(field: u32) -> u64;
    fn am_shim_ptr_store_triples(h: u64, first: u64, n: u64) -> u64;
    safe fn am_shim_ptr_address(h: u64, first: u64, index: u64, size_log2: u32) -> u64;
}

/// The address `am::ptr<T>` gives for element `first + index` (`sizeof(T)` = 1, 4 or 8 for
/// `size_log2` 0, 2, 3), reached by index arithmetic (`p += first`) and then `p[index]`.
pub fn ptr_address(h: u64, first: u64, index: u64, size_log2: u32) -> u64 {
    am_shim_ptr_address(h, first, index, size_log2)
}

/// Stores 12-byte elements `i = {3i, 3i+1, 3i+2}`, `i < n`, through `am::ptr<T>::store` from
/// element `first` of the object behind `h`, reads them back with `load` through a
/// `ptr<const T>`, and returns how many differ.
///
/// # Safety
/// Every byte of elements `first..first + n` of the object behind `h` (12 bytes each, through
/// the handle's layout) must be memory this process may write.
pub unsafe fn ptr_store_triples(h: u64, first: u64, n: u64) -> u64 {
    // SAFETY: the caller vouches for the bytes the header writes.
    unsafe { am_shim_ptr_store_triples(h, first, n) }
}

/// `am::slot_of`.
pub fn slot_of(order: u32, lane: u32) -> u32 {
    am_shim_slot_of(order, lane)
}

/// `am::lane_at`.
pub fn lane_at(order: u32, slot: u32) -> u32 {
    am_shim_lane_at(order, slot)
}

/// `am::default_geometry_config()`.
pub fn default_config() -> CGeometryConfig {
    let mut out = CGeometryConfig::default();
    // SAFETY: `out` is a live, writable CGeometryConfig with the C layout.
    unsafe { am_shim_default_config(&mut out) };
    out
}

/// `am::geometry_of`.
pub fn geometry(sizes: &[u64; 32], config: CGeometryConfig) -> Result<CGeometry, GeometryStatus> {
    let mut out = CGeometry::default();
    let mut bad_lane = u32::MAX;
    // SAFETY: `sizes` has the 32 entries the header reads; `out` and `bad_lane` are writable.
    let status = unsafe {
        am_shim_geometry(
            sizes.as_ptr(),
            config.small_max,
            config.portion_max,
            config.max_lane_bytes,
            &mut out,
            &mut bad_lane,
        )
    };
    match status {
        0 => Ok(out),
        1 => Err(GeometryStatus::Empty),
        _ => Err(GeometryStatus::OverLimit(bad_lane)),
    }
}

/// `am::request_geometry_of`: the geometry a request laid out as `layout` (a slot order code,
/// or `am::kLayoutContiguous`) is given, and the layout its handles follow.
pub fn request_geometry(
    sizes: &[u64; 32],
    config: CGeometryConfig,
    layout: u32,
) -> Result<(CGeometry, u32), GeometryStatus> {
    let mut out = CGeometry::default();
    let mut layout_out = u32::MAX;
    let mut bad_lane = u32::MAX;
    // SAFETY: `sizes` has the 32 entries the header reads; the outputs are writable.
    let status = unsafe {
        am_shim_request_geometry(
            sizes.as_ptr(),
            config.small_max,
            config.portion_max,
            config.max_lane_bytes,
            layout,
            &mut out,
            &mut layout_out,
            &mut bad_lane,
        )
    };
    match status {
        0 => Ok((out, layout_out)),
        1 => Err(GeometryStatus::Empty),
        _ => Err(GeometryStatus::OverLimit(bad_lane)),
    }
}

/// `am::small_offset`.
pub fn small_offset(sizes: &[u64; 32], lane: u32) -> u64 {
    // SAFETY: `sizes` has the 32 entries the header reads (it reads at most `min(lane, 32)`).
    unsafe { am_shim_small_offset(sizes.as_ptr(), lane) }
}

/// `am::handle_plain`.
pub fn handle_plain(address: u64, lane: u32) -> u64 {
    am_shim_handle_plain(address, lane)
}

/// `am::handle_arranged`.
pub fn handle_arranged(address: u64, tile_log2: u32, lane: u32) -> u64 {
    am_shim_handle_arranged(address, tile_log2, lane)
}

/// `[handle_kind, handle_tile_log2, handle_lane, handle_address, handle_generation]`.
pub fn handle_fields(h: u64) -> [u64; 5] {
    let mut out = [0u64; 5];
    // SAFETY: `out` has the 5 writable entries the shim fills.
    unsafe { am_shim_handle_fields(h, out.as_mut_ptr()) };
    out
}

/// `am::handle_with_generation`.
pub fn handle_with_generation(h: u64, generation: u32) -> u64 {
    am_shim_handle_with_generation(h, generation)
}

/// `am::handle_cached`.
pub fn handle_cached(address: u64, generation: u32) -> u64 {
    am_shim_handle_cached(address, generation)
}

/// `am::handle_free_stamp`.
pub fn handle_free_stamp(h: u64) -> u32 {
    am_shim_handle_free_stamp(h)
}

/// `am::lane_handle_contiguous`.
pub fn lane_handle_contiguous(g: &CGeometry, chunk_base: u64, sizes: &[u64; 32], lane: u32) -> u64 {
    // SAFETY: `g` is a live CGeometry with the C layout; `sizes` has the 32 entries read.
    unsafe { am_shim_lane_handle_contiguous(g, chunk_base, sizes.as_ptr(), lane) }
}

/// `am::translate`.
pub fn translate(h: u64, offset: u64) -> u64 {
    am_shim_translate(h, offset)
}

/// `am::chunk_base_of`.
pub fn chunk_base(h: u64, order: u32) -> u64 {
    am_shim_chunk_base(h, order)
}

/// `am::lane_handle`.
pub fn lane_handle(
    g: &CGeometry,
    chunk_base: u64,
    sizes: &[u64; 32],
    lane: u32,
    order: u32,
) -> u64 {
    // SAFETY: `g` is a live CGeometry with the C layout; `sizes` has the 32 entries read.
    unsafe { am_shim_lane_handle(g, chunk_base, sizes.as_ptr(), lane, order) }
}

/// The cache geometry's functions of `detail/cache_geometry.h`: `what` 0 class of `x` (12:
/// none), 1 slab blocks of class `x`, 2 slab objects of class `x`, 3 generation of ring entry
/// `x`, 4 block-table home of block `x` in `y` entries, 8 slab id of ring entry `x`, 9 base of
/// ring entry `x`, 14 slot log2 of class `x`, 15 slots of an object of `y` bytes in class `x`,
/// 16 whether the run class serves a warp whose largest lane over 32 KiB asks `x` and whose
/// rounded sizes sum to `y` (arranged: bit 63 of `x`), 17 whether class `x` claims its next slab
/// ahead; `u64::MAX` for any other `what`.
pub fn cache(what: u32, x: u64, y: u64) -> u64 {
    am_shim_cache(what, x, y)
}

/// `am::next_pause(pause, longest)`: the pause after `pause` in a wait whose longest is `longest`.
pub fn next_pause(pause: u32, longest: u32) -> u32 {
    am_shim_next_pause(pause, longest)
}

/// `sizeof(am::Geometry)`.
pub fn sizeof_geometry() -> u64 {
    am_shim_sizeof_geometry()
}

/// `offsetof(am::Geometry, field)` for fields 0..5 in declaration order.
pub fn offsetof_geometry(field: u32) -> u64 {
    am_shim_offsetof_geometry(field)
}
