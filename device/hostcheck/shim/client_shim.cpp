// C entry points over the mailbox client of alignmalloc/detail/client.cuh (am::malloc,
// am::malloc_contiguous, am::free, am::post_free, am::free(void*)), compiled as host C++ and run on
// a host warp (simt.h) against a mailbox in host memory, so Rust can drive them and
// `orchestrator::cpu::CpuDevice` with the same steps and compare.
#include "simt.h"

#include <alignmalloc/detail/client.cuh>

namespace {

struct MallocCall {
  const am::DeviceMailbox* mailbox;
  const am::u64* sizes;
  bool contiguous;
  am::u64* handles;
  am::u32* statuses;
};

void malloc_lane(unsigned lane, void* context) {
  MallocCall& call = *static_cast<MallocCall*>(context);
  const am::u64 size = call.sizes[lane];
  call.handles[lane] = call.contiguous ? am::malloc_contiguous(*call.mailbox, size, &call.statuses[lane])
                                       : am::malloc(*call.mailbox, size, &call.statuses[lane]);
}

struct FreeCall {
  const am::DeviceMailbox* mailbox;
  const am::u64* words;
  int how;
  am::u32* statuses;
  am::u32* lane_statuses;
};

void free_lane(unsigned lane, void* context) {
  FreeCall& call = *static_cast<FreeCall*>(context);
  const am::u64 word = call.words[lane];
  am::FreeResult result;
  if (call.how == 0) {
    result = am::free(*call.mailbox, word);
  } else if (call.how == 1) {
    result = am::post_free(*call.mailbox, word);
  } else {
    result = am::free(*call.mailbox, reinterpret_cast<const void*>(word));
  }
  call.statuses[lane] = result.status;
  call.lane_statuses[lane] = result.lane_status;
}

}  // namespace

extern "C" {

// The lanes of `mask` call am::malloc (am::malloc_contiguous when `contiguous`) for `sizes[lane]`
// bytes as one warp; per lane its handle and status.
void am_hostcheck_malloc(const am::DeviceMailbox* mailbox, am::u32 mask, const am::u64* sizes,
                         int contiguous, am::u64* handles, am::u32* statuses) {
  MallocCall call{mailbox, sizes, contiguous != 0, handles, statuses};
  simt::run_warp(mask, malloc_lane, &call);
}

// The lanes of `mask` free `words[lane]` as one warp: `how` 0 am::free of a handle, 1
// am::post_free of a handle, 2 am::free of a pointer; per lane the FreeResult.
void am_hostcheck_free(const am::DeviceMailbox* mailbox, am::u32 mask, const am::u64* words,
                       int how, am::u32* statuses, am::u32* lane_statuses) {
  FreeCall call{mailbox, words, how, statuses, lane_statuses};
  simt::run_warp(mask, free_lane, &call);
}

}  // extern "C"
