// alignmalloc warp helpers shared by the mailbox client and the device caches.
#ifndef ALIGNMALLOC_WARP_CUH
#define ALIGNMALLOC_WARP_CUH

#include <alignmalloc/detail/layout.h>

namespace am {
namespace detail {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
__device__ __forceinline__ u32 lane_id() {
  u32 id;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));
  return id;
}

// The SM this warp runs on (the device caches stripe their counters by it).
__device__ __forceinline__ u32 sm_id() {
  u32 id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ u32 global_warp_id() {
  const u64 block = (u64)blockIdx.x + (u64)gridDim.x * ((u64)blockIdx.y + (u64)gridDim.y * blockIdx.z);
  const u32 threads = blockDim.x * blockDim.y * blockDim.z;
  const u32 thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return (u32)(block * ((threads + 31u) / 32u) + thread / 32u);
}
#else
// Host C++ (device/hostcheck runs these headers' protocol on a host warp, a context per lane): the
// program that includes this header defines them, with the warp-wide intrinsics.
u32 lane_id();
u32 sm_id();
u32 global_warp_id();
#endif

// Shuffles among the lanes of `mask`. A lone lane issues no warp-synchronous instruction at all:
// on the H200, a lane shuffling with a mask of only itself while other lanes of its warp shuffle
// among themselves (a divergent branch where one lane allocates alone) made the others' shuffles
// pair with the wrong instructions, so requests carried other lanes' values and frees were lost.
// device/examples/divergent.cu runs that pattern and checks every free.
__device__ __forceinline__ bool is_lone_lane(u32 mask) { return (mask & (mask - 1)) == 0; }

__device__ __forceinline__ u64 shfl64(u32 mask, u64 value, u32 source) {
  if (is_lone_lane(mask)) return value;
  const u32 hi = __shfl_sync(mask, (u32)(value >> 32), source);
  const u32 lo = __shfl_sync(mask, (u32)value, source);
  return ((u64)hi << 32) | lo;
}

__device__ __forceinline__ u32 shfl32(u32 mask, u32 value, u32 source) {
  if (is_lone_lane(mask)) return value;
  return __shfl_sync(mask, value, source);
}

}  // namespace detail
}  // namespace am

#endif  // ALIGNMALLOC_WARP_CUH
