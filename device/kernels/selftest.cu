// alignmalloc selftest kernels (the host side is bench/src/selftest.rs; the sim backend runs the
// same checks with CPU warps).
//
//   am_selftest_fill:   (a), (e) every thread allocates its drawn size (retrying while the answer
//                       is OutOfMemory, as a growing arena gives) and writes its owner tag over
//                       every word through am::ptr; the host verifies every byte afterwards.
//   am_selftest_free:   (a) every thread frees its object; its lane status is recorded.
//   am_selftest_rounds: (b) rounds of malloc / tag / check / free of 1 KiB..256 KiB.
//   am_selftest_bad:    (c) bad input from device code; each status is recorded for the host.
//                       The pointer checks go through the default mailbox (am::malloc_plain,
//                       am::free(void*)), which the runtime binds when it loads this module.
#include <alignmalloc/alignmalloc.cuh>

namespace {

// The tag of word `w` of thread `t`'s object: owner in the high half, word index in the low.
__device__ __forceinline__ am::u64 tag(am::u64 t, am::u64 w) { return t << 32 | (w & 0xFFFFFFFFull); }

__device__ __forceinline__ am::u64 global_thread() {
  return (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ am::u64 next_random(am::u64& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Retries of an allocation answered OutOfMemory in am_selftest_fill, 50 us apart.
constexpr unsigned kFillRetries = 20000;

}  // namespace

extern "C" __global__ void am_selftest_fill(am::DeviceMailbox mb, const am::u64* sizes,
                                            unsigned threads, am::u64* handles,
                                            unsigned* statuses) {
  const am::u64 t = global_thread();
  if (t >= threads) return;  // threads past the end leave; the rest of the warp still allocates
  unsigned status = 0xFFFFFFFFu;
  const am::u64 bytes = sizes[t];
  am::u64 h = am::malloc(mb, bytes, &status);
  // No room is a defined answer while a growable arena grows: retry for up to about a second.
  for (unsigned tries = 0; status == am::kStatusOutOfMemory && tries < kFillRetries; ++tries) {
    __nanosleep(50000);
    h = am::malloc(mb, bytes, &status);
  }
  handles[t] = h;
  statuses[t] = status;
  if (h == 0) return;
  am::ptr<am::u64> p{h};
  for (am::u64 w = 0; w < bytes / 8; ++w) p[w] = tag(t, w);
}

extern "C" __global__ void am_selftest_free(am::DeviceMailbox mb, const am::u64* handles,
                                            unsigned threads, unsigned* lane_statuses) {
  const am::u64 t = global_thread();
  if (t >= threads) return;
  const am::FreeResult r = am::free(mb, handles[t]);
  lane_statuses[t] = r.lane_status;
}

// Counters of am_selftest_rounds.
enum RoundCounter : unsigned {
  kObjects,       // objects allocated
  kWordsChecked,  // words written and read back
  kMismatches,    // words that did not hold their tag
  kAllocFailures, // allocations that returned no handle
  kFreeFailures,  // frees that did not answer Ok
  kRoundCounters,
};

extern "C" __global__ void am_selftest_rounds(am::DeviceMailbox mb, unsigned rounds,
                                              am::u64 seed, unsigned long long* counters) {
  const am::u64 t = global_thread();
  am::u64 s = seed ^ (t + 1) * 0x9E3779B97F4A7C15ull;
  for (unsigned round = 0; round < rounds; ++round) {
    const am::u64 bytes = (1024 + next_random(s) % (255 * 1024)) & ~7ull;
    // A third of the objects are thread-contiguous, the rest warp-arranged.
    unsigned status = 0;
    const am::u64 h = (next_random(s) % 3 == 0) ? am::malloc_contiguous(mb, bytes, &status)
                                                : am::malloc(mb, bytes, &status);
    if (h == 0) {
      atomicAdd(&counters[kAllocFailures], 1ull);
      continue;
    }
    atomicAdd(&counters[kObjects], 1ull);
    am::ptr<am::u64> p{h};
    const am::u64 owner = t * rounds + round;
    for (am::u64 w = 0; w < bytes / 8; ++w) p[w] = tag(owner, w);
    unsigned long long bad = 0;
    for (am::u64 w = 0; w < bytes / 8; ++w) bad += p[w] != tag(owner, w);
    atomicAdd(&counters[kWordsChecked], (unsigned long long)(bytes / 8));
    if (bad) atomicAdd(&counters[kMismatches], bad);
    const am::FreeResult r = am::free(mb, h);
    if (r.status != am::kStatusOk || r.lane_status != am::kLaneOk) {
      atomicAdd(&counters[kFreeFailures], 1ull);
    }
  }
}

// Checks of am_selftest_bad, each written as (expected, got) by lane 0 of every warp into
// results[warp * kBadChecks * 2 + 2 * check].
enum BadCheck : unsigned {
  kZeroSizeHandle,     // malloc(0): the handle (expected 0)
  kZeroSizeStatus,     // malloc(0): the status (Ok)
  kOverLimitStatus,    // one lane asks more than the per-lane limit: SizeOverLimit
  kOverArenaStatus,    // every lane asks a 32nd of the arena and more: OutOfMemory (see below)
  kDoubleFreeFirst,    // first free of a fresh object: Ok
  kDoubleFreeSecond,   // second free: DoubleFree
  kForeignHandle,      // a handle never handed out: InvalidHandle
  kInteriorPointer,    // a handle 16 bytes into an object: InteriorPointer
  kAfterInteriorFree,  // the object itself afterwards: Ok
  kPointerFree,        // the same through plain pointers and the default mailbox: Ok,
  kPointerDoubleFree,  // DoubleFree,
  kPointerInterior,    // InteriorPointer,
  kPointerAfterInterior,  // Ok
  kObjectNullLanes,    // lanes of the warp whose 4 KiB object (interior check) is null: 0
  kObjectWorstStatus,  // the highest status any lane got for it: Ok
  kPlainNullLanes,     // the same for the plain 4 KiB objects: 0
  kPlainWorstStatus,   // Ok
  kBadChecks,
};

// The over-the-arena check's got value when every lane was served, a served object's free
// failed, or a lane's handle and status disagree (Ok with a null handle, OutOfMemory with one):
// none of them a status.
constexpr unsigned kOverArenaAllServed = 0xFFFFFFFEu;
constexpr unsigned kOverArenaFreeFailed = 0xFFFFFFFDu;
constexpr unsigned kOverArenaHandleDisagrees = 0xFFFFFFFCu;

extern "C" __global__ void am_selftest_bad(am::DeviceMailbox mb, am::u64 arena_bytes,
                                           am::u64 over_limit, am::u64* results) {
  const unsigned lane = threadIdx.x % 32;
  const am::u64 warp = global_thread() / 32;
  am::u64* out = results + warp * kBadChecks * 2;
  unsigned status = 0xFFFFFFFFu;

  // Size 0 from every lane: null handles, an Ok request.
  const am::u64 zero = am::malloc(mb, 0, &status);
  if (lane == 0) {
    out[2 * kZeroSizeHandle] = 0;
    out[2 * kZeroSizeHandle + 1] = zero;
    out[2 * kZeroSizeStatus] = am::kStatusOk;
    out[2 * kZeroSizeStatus + 1] = status;
  }
  // Lane 0 over the per-lane limit, the others asking a little.
  status = 0xFFFFFFFFu;
  const am::u64 over = am::malloc(mb, lane == 0 ? over_limit : 64, &status);
  if (lane == 0) {
    out[2 * kOverLimitStatus] = am::kStatusSizeOverLimit;
    out[2 * kOverLimitStatus + 1] = over == 0 ? status : 0xFFFFFFFFull;
  }
  // With device caches the other lanes were served: give their objects back.
  am::free(mb, over);
  // Over the arena together: every lane asks a 32nd of the arena and 2 MiB more. A call is
  // collective over the lanes that reach it together, and nothing keeps a warp's lanes together
  // up to it (the compiler's reconvergence decides), so a group of a few lanes fits and is
  // served. What holds whatever the groups: each lane is served (Ok) or refused (OutOfMemory,
  // null), the 32 asks are never all served, and what was served frees Ok. The got value is
  // OutOfMemory when all of that held; else, for the first lane neither served nor refused, its
  // status (kOverArenaHandleDisagrees when that status is Ok or OutOfMemory: the handle says
  // otherwise), or kOverArenaAllServed, or kOverArenaFreeFailed.
  __syncwarp();
  status = 0xFFFFFFFFu;
  const am::u64 huge = am::malloc(mb, arena_bytes / 32 + (2ull << 20), &status);
  const bool served = huge != 0 && status == am::kStatusOk;
  const bool refused = huge == 0 && status == am::kStatusOutOfMemory;
  const unsigned odd_lanes = __ballot_sync(0xFFFFFFFFu, !served && !refused);
  const unsigned refused_lanes = __ballot_sync(0xFFFFFFFFu, refused);
  const am::FreeResult served_back = am::free(mb, served ? huge : 0);
  const unsigned failed_frees =
      __ballot_sync(0xFFFFFFFFu, served && served_back.lane_status != am::kLaneOk);
  const unsigned own_odd_status =
      status == am::kStatusOk || status == am::kStatusOutOfMemory ? kOverArenaHandleDisagrees
                                                                   : status;
  const unsigned odd_status =
      __shfl_sync(0xFFFFFFFFu, own_odd_status, odd_lanes ? __ffs(odd_lanes) - 1 : 0);
  if (lane == 0) {
    out[2 * kOverArenaStatus] = am::kStatusOutOfMemory;
    out[2 * kOverArenaStatus + 1] = odd_lanes        ? odd_status
                                    : !refused_lanes ? kOverArenaAllServed
                                    : failed_frees   ? kOverArenaFreeFailed
                                                     : am::kStatusOutOfMemory;
  }
  // Double free, by lane 0 only (divergent).
  if (lane == 0) {
    const am::u64 h = am::malloc(mb, 256, &status);
    const am::FreeResult first = am::free(mb, h);
    const am::FreeResult second = am::free(mb, h);
    out[2 * kDoubleFreeFirst] = am::kLaneOk;
    out[2 * kDoubleFreeFirst + 1] = h == 0 ? 0xFFFFFFFFull : first.lane_status;
    out[2 * kDoubleFreeSecond] = am::kLaneDoubleFree;
    out[2 * kDoubleFreeSecond + 1] = second.lane_status;
    // An address no object ever started at, outside the arena.
    const am::FreeResult foreign = am::free(mb, 0x00000DEADBEE000ull + warp * 4096);
    out[2 * kForeignHandle] = am::kLaneInvalidHandle;
    out[2 * kForeignHandle + 1] = foreign.lane_status;
  }
  if (lane == 0) {
    out[2 * kObjectNullLanes] = 0;
    out[2 * kObjectWorstStatus] = am::kStatusOk;
    out[2 * kPlainNullLanes] = 0;
    out[2 * kPlainWorstStatus] = am::kStatusOk;
  }
  // An interior pointer, from the whole warp: every lane frees 16 bytes into its object.
  status = 0xFFFFFFFFu;
  const am::u64 obj = am::malloc(mb, 4096, &status);
  // Every lane, not only lane 0: a warp may reach the call in several groups.
  if (obj == 0) atomicAdd((unsigned long long*)&out[2 * kObjectNullLanes + 1], 1ull);
  atomicMax((unsigned long long*)&out[2 * kObjectWorstStatus + 1], (unsigned long long)status);
  const am::FreeResult interior = am::free(mb, obj == 0 ? 0 : obj + 16);
  const am::FreeResult whole = am::free(mb, obj);
  if (lane == 0) {
    out[2 * kInteriorPointer] = am::kLaneInteriorPointer;
    out[2 * kInteriorPointer + 1] = obj == 0 ? 0xFFFFFFFFull : interior.lane_status;
    out[2 * kAfterInteriorFree] = am::kLaneOk;
    out[2 * kAfterInteriorFree + 1] = whole.lane_status;
  }
  // By address, through the default mailbox: lane 0 frees its pointer twice (divergent), then
  // every lane frees 16 bytes into its object, then the object.
  if (lane == 0) {
    void* p = am::malloc_plain(256, &status);
    const am::FreeResult first = am::free(p);
    const am::FreeResult second = am::free(p);
    out[2 * kPointerFree] = am::kLaneOk;
    out[2 * kPointerFree + 1] = p == nullptr ? 0xFFFFFFFFull : first.lane_status;
    out[2 * kPointerDoubleFree] = am::kLaneDoubleFree;
    out[2 * kPointerDoubleFree + 1] = second.lane_status;
  }
  status = 0xFFFFFFFFu;
  char* q = static_cast<char*>(am::malloc_plain(4096, &status));
  if (q == nullptr) atomicAdd((unsigned long long*)&out[2 * kPlainNullLanes + 1], 1ull);
  atomicMax((unsigned long long*)&out[2 * kPlainWorstStatus + 1], (unsigned long long)status);
  const am::FreeResult inside = am::free(q == nullptr ? nullptr : q + 16);
  const am::FreeResult plain_whole = am::free(q);
  if (lane == 0) {
    out[2 * kPointerInterior] = am::kLaneInteriorPointer;
    out[2 * kPointerInterior + 1] = q == nullptr ? 0xFFFFFFFFull : inside.lane_status;
    out[2 * kPointerAfterInterior] = am::kLaneOk;
    out[2 * kPointerAfterInterior + 1] = plain_whole.lane_status;
  }
}

// (d) Thread t reads the first word of every 4 KiB page of its object (the host wrote them), so
// the kernel touches a known set of pages; the sum of what it read comes back for checking.
extern "C" __global__ void am_selftest_touch(am::DeviceMailbox, const am::u64* handles,
                                             unsigned threads, am::u64 bytes_each,
                                             unsigned long long* sum) {
  const am::u64 t = global_thread();
  if (t >= threads) return;
  am::ptr<am::u64> p{handles[t]};
  unsigned long long s = 0;
  for (am::u64 offset = 0; offset < bytes_each; offset += 4096) s += p[offset / 8];
  atomicAdd(sum, s);
}
