// Layout parity on the GPU: applies alignmalloc/detail/layout.h to inputs drawn by the host, which
// compares every output with the Rust `translator` crate.
#include <alignmalloc/alignmalloc.cuh>

// One thread per (handle, offset) pair: translate, the address am::ptr computes, the chunk base
// under both slot orders, and the decoded fields.
extern "C" __global__ void am_parity_translate(const am::u64* handles, const am::u64* offsets,
                                               am::u64 n, am::u64* out) {
  const am::u64 i = (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const am::u64 h = handles[i];
  const am::u64 off = offsets[i];
  am::ptr<unsigned char> bytes{h};
  am::ptr<unsigned long long> words{h};
  am::u64* o = out + i * 9;
  o[0] = am::translate(h, off);
  o[1] = (am::u64)&bytes[off];
  o[2] = (am::u64)&words[off >> 3];
  o[3] = am::chunk_base_of(h, am::kSlotPattern);
  o[4] = am::chunk_base_of(h, am::kSlotIdentity);
  o[5] = am::handle_kind(h);
  o[6] = ((am::u64)am::handle_generation(h) << 16) | ((am::u64)am::handle_tile_log2(h) << 8) |
         am::handle_lane(h);
  o[7] = am::handle_address(h);
  o[8] = am::handle_with_generation(h, (unsigned)(off % 11u));
}

// One warp per request: every lane computes the geometry and its own handles (arranged and
// thread-contiguous), as the device client does when a reply arrives. `configs` holds 3 words per
// request, `sizes` 32; `handles` gets 64 per request.
extern "C" __global__ void am_parity_geometry(const am::u64* sizes, const am::u64* configs,
                                              const am::u64* bases, const unsigned* orders,
                                              am::u64 requests, am::u64* geometry,
                                              am::u64* handles) {
  const am::u64 warp = ((am::u64)blockIdx.x * blockDim.x + threadIdx.x) / 32u;
  const unsigned lane = threadIdx.x % 32u;
  if (warp >= requests) return;
  const am::u64* s = sizes + warp * 32u;
  am::GeometryConfig config;
  config.small_max = configs[warp * 3u];
  config.portion_max = configs[warp * 3u + 1u];
  config.max_lane_bytes = configs[warp * 3u + 2u];
  am::Geometry g;
  unsigned bad_lane = 0;
  const int status = am::geometry_of(s, config, &g, &bad_lane);
  if (lane == 0) {
    am::u64* o = geometry + warp * 6u;
    o[0] = (am::u64)status;
    o[1] = status == am::kGeometryOk ? g.size_class : bad_lane;
    o[2] = status == am::kGeometryOk ? g.tile_log2 : 0;
    o[3] = status == am::kGeometryOk ? g.lane_span : 0;
    o[4] = status == am::kGeometryOk ? g.chunk_bytes : 0;
    o[5] = status == am::kGeometryOk ? g.units : 0;
  }
  const bool ok = status == am::kGeometryOk;
  handles[warp * 64u + lane] = ok ? am::lane_handle(g, bases[warp], s, lane, orders[warp]) : 0;
  handles[warp * 64u + 32u + lane] = ok ? am::lane_handle_contiguous(g, bases[warp], s, lane) : 0;
}
