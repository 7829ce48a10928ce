// C entry points over the device caches of alignmalloc/detail/cache.cuh, compiled as host C++ and
// run on a host warp (simt.h), so Rust can drive them and `orchestrator::caches::CpuCaches` with
// the same steps and compare.
#include "simt.h"

#include <alignmalloc/detail/cache.cuh>

namespace {

struct AllocCall {
  const am::DeviceCaches* caches;
  const am::u32* closed;
  const am::u64* sizes;
  bool arranged;
  am::u64* handles;
  am::u32* served;
};

void alloc_lane(unsigned lane, void* context) {
  AllocCall& call = *static_cast<AllocCall*>(context);
  am::u64 handle = 0;
  // As am::malloc: a lane asking 0 takes no part.
  if (call.sizes[lane] == 0) return;
  if (am::detail::cache_try_alloc(*call.caches, call.closed, call.sizes[lane], call.arranged,
                                  &handle)) {
    call.handles[lane] = handle;
    call.served[lane] = 1;
  }
}

struct FreeCall {
  const am::DeviceCaches* caches;
  const am::u64* words;
  bool by_handle;
  am::u32* handled;
  am::u32* lane_status;
  am::u32* any_failed;
};

void free_lane(unsigned lane, void* context) {
  FreeCall& call = *static_cast<FreeCall*>(context);
  // As am::free: a null takes no part.
  if (call.words[lane] == 0) return;
  bool any_failed = false;
  if (am::detail::cache_try_free(*call.caches, call.words[lane], call.by_handle,
                                 &call.lane_status[lane], &any_failed)) {
    call.handled[lane] = 1;
    call.any_failed[lane] = any_failed ? 1 : 0;
  }
}

struct MapCall {
  const am::DeviceCaches* caches;
  am::u64 first;
  am::u64 count;
  am::u32 value;
  bool as_return;
};

void map_lane(unsigned, void* context) {
  MapCall& call = *static_cast<MapCall*>(context);
  if (call.as_return) {
    am::detail::cache_map_blocks(*call.caches, call.first, call.count, call.value);
  } else {
    for (am::u64 b = 0; b < call.count; ++b) {
      am::detail::cache_map_block(*call.caches, call.first + b, call.value);
    }
  }
}

}  // namespace

extern "C" {

// One lane points the `count` blocks from `first` on at `value` in the block table: with
// cache_map_blocks (`as_return`, as a slab's return does), else with cache_map_block one block
// after the other (as a slab's start does).
void am_hostcheck_cache_map_blocks(const am::DeviceCaches* caches, am::u64 first, am::u64 count,
                                   am::u32 value, int as_return) {
  MapCall call{caches, first, count, value, as_return != 0};
  simt::run_warp(1u, map_lane, &call);
}

// The lanes of `mask` allocate `sizes[lane]` bytes through the device caches as one warp
// (`arranged`: am::malloc, else am::malloc_contiguous). Per lane: `served` 1 and `handles` its
// object, or `served` 0 (ask the host).
void am_hostcheck_cache_alloc(const am::DeviceCaches* caches, const am::u32* closed,
                              am::u32 mask, const am::u64* sizes, int arranged,
                              am::u64* handles, am::u32* served) {
  AllocCall call{caches, closed, sizes, arranged != 0, handles, served};
  simt::run_warp(mask, alloc_lane, &call);
}

// The lanes of `mask` free `words[lane]` (handles, or addresses unless `by_handle`) through the
// device caches as one warp. Per lane: `handled` 1 with `lane_status` and `any_failed`, or 0
// (ask the host).
void am_hostcheck_cache_free(const am::DeviceCaches* caches, am::u32 mask, const am::u64* words,
                             int by_handle, am::u32* handled, am::u32* lane_status,
                             am::u32* any_failed) {
  FreeCall call{caches, words, by_handle != 0, handled, lane_status, any_failed};
  simt::run_warp(mask, free_lane, &call);
}

}  // extern "C"
