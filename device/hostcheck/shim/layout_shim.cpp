// C entry points over alignmalloc/layout.h, compiled as host C++, so Rust can compare the header
// with the `translator` crate.
#include <alignmalloc/detail/layout.h>
#include <alignmalloc/detail/abi.h>
#include <alignmalloc/detail/cache_geometry.h>
#include <alignmalloc/detail/settings.h>

extern "C" {

unsigned am_shim_slot_of(unsigned order, unsigned lane) { return am::slot_of(order, lane); }
unsigned am_shim_lane_at(unsigned order, unsigned slot) { return am::lane_at(order, slot); }

int am_shim_geometry(const am::u64* sizes, am::u64 small_max, am::u64 portion_max,
                     am::u64 max_lane_bytes, am::Geometry* out, unsigned* bad_lane) {
  am::GeometryConfig config;
  config.small_max = small_max;
  config.portion_max = portion_max;
  config.max_lane_bytes = max_lane_bytes;
  return am::geometry_of(sizes, config, out, bad_lane);
}

int am_shim_request_geometry(const am::u64* sizes, am::u64 small_max, am::u64 portion_max,
                             am::u64 max_lane_bytes, unsigned layout, am::Geometry* out,
                             unsigned* layout_out, unsigned* bad_lane) {
  am::GeometryConfig config;
  config.small_max = small_max;
  config.portion_max = portion_max;
  config.max_lane_bytes = max_lane_bytes;
  return am::request_geometry_of(sizes, config, layout, out, layout_out, bad_lane);
}

void am_shim_default_config(am::GeometryConfig* out) { *out = am::default_geometry_config(); }

am::u64 am_shim_small_offset(const am::u64* sizes, unsigned lane) {
  return am::small_offset(sizes, lane);
}
am::u64 am_shim_handle_plain(am::u64 address, unsigned lane) {
  return am::handle_plain(address, lane);
}
am::u64 am_shim_handle_arranged(am::u64 address, unsigned tile_log2, unsigned lane) {
  return am::handle_arranged(address, tile_log2, lane);
}
void am_shim_handle_fields(am::u64 h, am::u64* out) {
  out[0] = am::handle_kind(h);
  out[1] = am::handle_tile_log2(h);
  out[2] = am::handle_lane(h);
  out[3] = am::handle_address(h);
  out[4] = am::handle_generation(h);
}
am::u64 am_shim_handle_with_generation(am::u64 h, unsigned generation) {
  return am::handle_with_generation(h, generation);
}
am::u64 am_shim_handle_cached(am::u64 address, unsigned generation) {
  return am::handle_cached(address, generation);
}
unsigned am_shim_handle_free_stamp(am::u64 h) { return am::handle_free_stamp(h); }
am::u64 am_shim_lane_handle_contiguous(const am::Geometry* g, am::u64 chunk_base,
                                       const am::u64* sizes, unsigned lane) {
  return am::lane_handle_contiguous(*g, chunk_base, sizes, lane);
}
am::u64 am_shim_translate(am::u64 h, am::u64 offset) { return am::translate(h, offset); }
am::u64 am_shim_chunk_base(am::u64 h, unsigned order) { return am::chunk_base_of(h, order); }
am::u64 am_shim_lane_handle(const am::Geometry* g, am::u64 chunk_base, const am::u64* sizes,
                            unsigned lane, unsigned order) {
  return am::lane_handle(*g, chunk_base, sizes, lane, order);
}

// Layout of the shared structs, so Rust can check its #[repr(C)] twins.
am::u64 am_shim_sizeof_geometry() { return sizeof(am::Geometry); }
am::u64 am_shim_offsetof_geometry(unsigned field) {
  switch (field) {
    case 0: return __builtin_offsetof(am::Geometry, size_class);
    case 1: return __builtin_offsetof(am::Geometry, tile_log2);
    case 2: return __builtin_offsetof(am::Geometry, lane_span);
    case 3: return __builtin_offsetof(am::Geometry, chunk_bytes);
    default: return __builtin_offsetof(am::Geometry, units);
  }
}

// Cache geometry's functions (detail/cache_geometry.h; its constants are generated): `what` 0
// class of `x`, 1 slab blocks of class `x`, 2 slab objects of class `x`, 3 free stamp of ring
// entry `x`, 4 hash home of block `x` in a table of `y` entries, 8 slab id of ring entry `x`,
// 9 base of ring entry `x`, 14 slot log2 of class `x`, 15 slots of an object of `y` bytes in
// class `x`, 16 whether the run class serves a warp whose largest lane over 32 KiB asks `x` and
// whose rounded sizes sum to `y` (arranged: bit 63 of `x`), 17 whether class `x` claims its next
// slab ahead, 18 the block table value of slab `x` of class `y`, 19 the slab of block table
// value `x` (~0 for none), 20 the class of block table value `x`; ~0 for any other.
am::u64 am_shim_cache(unsigned what, am::u64 x, am::u64 y) {
  switch (what) {
    case 0: return am::cache_class(x);
    case 1: return am::cache_slab_blocks((unsigned)x);
    case 2: return am::cache_slab_objects((unsigned)x);
    case 3: return am::cache_entry_stamp(x);
    case 4: return am::cache_hash_home(x, y);
    case 8: return am::cache_entry_id(x);
    case 9: return am::cache_entry_base(x);
    case 14: return am::cache_slot_log2((unsigned)x);
    case 15: return am::cache_object_slots((unsigned)x, y);
    case 16: return am::cache_run_class_serves((x >> 63) != 0, x & ~(1ull << 63), y);
    case 17: return am::cache_claims_ahead((unsigned)x);
    case 18: return am::cache_block_value((unsigned)x, (unsigned)y);
    case 19: return (am::u64)(long long)am::cache_block_slab((unsigned)x);
    case 20: return am::cache_block_class((unsigned)x);
    default: return ~0ull;
  }
}

// A 12-byte element, which straddles tile edges in arranged memory.
struct Triple {
  unsigned a, b, c;
};

// am::ptr<Triple>: store element i = {3i, 3i+1, 3i+2} for i < n through `h` (views start at
// `first`), then read every element back through a ptr<const Triple>; the count that differ.
am::u64 am_shim_ptr_store_triples(am::u64 h, am::u64 first, am::u64 n) {
  am::ptr<Triple> p{h};
  p += (long long)first;
  for (unsigned i = 0; i < n; ++i) p.store(i, Triple{3 * i, 3 * i + 1, 3 * i + 2});
  const am::ptr<const Triple> view = p;
  am::u64 wrong = 0;
  for (unsigned i = 0; i < n; ++i) {
    const Triple t = view.load(i);
    wrong += t.a != 3 * i || t.b != 3 * i + 1 || t.c != 3 * i + 2;
  }
  return wrong;
}

// The address am::ptr<T> of element size 2^size_log2 gives for (first + index), as p[index]
// after p += first.
am::u64 am_shim_ptr_address(am::u64 h, am::u64 first, am::u64 index, unsigned size_log2) {
  switch (size_log2) {
    case 0: return (am::u64)&(am::ptr<unsigned char>{h} + (long long)first)[index];
    case 2: return (am::u64)&(am::ptr<unsigned>{h} + (long long)first)[index];
    default: return (am::u64)&(am::ptr<am::u64>{h} + (long long)first)[index];
  }
}

unsigned am_shim_next_pause(unsigned pause, unsigned longest) {
  return am::next_pause(pause, longest);
}

}  // extern "C"

