// C entry points over alignmalloc/layout.h, compiled as host C++, so Rust can compare the header
// with the `translator` crate.
#include <alignmalloc/layout.h>

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

}  // extern "C"
