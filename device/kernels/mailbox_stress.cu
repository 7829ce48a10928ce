// Device client stress: every warp allocates, writes its owner tag over every byte it got through
// am::ptr, checks the tags, and frees, for many rounds, while the host service thread answers.
// Calls come from divergent branches, in all size classes and both layouts, and each warp also
// sends the bad inputs whose statuses must come back: size 0, a size over the limit, a double
// free, a foreign handle and an interior pointer.
#include <alignmalloc/alignmalloc.cuh>

namespace {

// Counters, in device memory, read back by the host.
enum Counter : unsigned {
  kAllocs,         // lane objects allocated
  kWordsChecked,   // 8-byte words written and checked
  kMismatches,     // words that did not hold their owner's tag
  kAllocFailures,  // allocations that failed for another reason than out-of-memory
  kLastFailure,    // the status of the last such failure
  kOutOfMemory,    // lanes whose allocation found no room (a defined answer under pressure)
  kFreeFailures,   // frees of valid handles that did not return Ok
  kBadInputChecks, // bad inputs sent
  kBadInputWrong,  // bad inputs whose status was not the defined one
  kDoubleFreeExact, // double frees classified exactly as kLaneDoubleFree (others: stale/interior)
  kEvents,         // failure events recorded (the first kMaxEvents are kept)
  kCounters,
};

// A failure, for diagnosis: what happened to which lane's handle.
enum EventKind : unsigned { kFreeFailed = 1, kDoubleFreeOk = 2, kFreeAfterInteriorFailed = 3, kWrongStatus = 4 };
constexpr unsigned kMaxEvents = 64;
constexpr unsigned kEventWords = 8;

__device__ void record(unsigned long long* counters, unsigned long long* events, unsigned kind,
                       am::u64 warp, unsigned lane, unsigned round, am::u64 handle, am::u64 size,
                       unsigned status, unsigned lane_status) {
  const unsigned long long i = atomicAdd(&counters[kEvents], 1ull);
  if (i >= kMaxEvents) return;
  unsigned long long* e = events + i * kEventWords;
  e[0] = kind;
  e[1] = warp;
  e[2] = lane;
  e[3] = round;
  e[4] = handle;
  e[5] = size;
  e[6] = status;
  e[7] = lane_status;
}

__device__ am::u64 mix(am::u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ void add(unsigned long long* counters, unsigned which, unsigned long long n) {
  if (n) atomicAdd(&counters[which], n);
}

// Write the tag over every word of the object, then check every word.
__device__ void tag_and_check(am::u64 handle, am::u64 size, am::u64 tag, unsigned long long* counters) {
  if (handle == 0) return;
  am::ptr<unsigned long long> words{handle};
  const am::u64 n = (size + 7) / 8;
  for (am::u64 i = 0; i < n; ++i) words[i] = tag;
  unsigned long long bad = 0;
  for (am::u64 i = 0; i < n; ++i) bad += words[i] != tag;
  add(counters, kWordsChecked, n);
  add(counters, kMismatches, bad);
}

}  // namespace

extern "C" __global__ void am_mailbox_stress(am::DeviceMailbox mb, unsigned rounds,
                                             unsigned long long seed,
                                             unsigned long long* counters,
                                             unsigned long long* events) {
  const unsigned lane = threadIdx.x % 32u;
  const am::u64 thread = (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
  const am::u64 warp = thread / 32u;
  am::u64 rng = mix(seed ^ (thread * 0x2545F4914F6CDD1Dull));
  for (unsigned round = 0; round < rounds; ++round) {
    // The class is drawn per warp and round (all lanes agree); sizes vary per lane.
    const am::u64 pick = mix(seed + warp * 7919u + round) % 100u;
    rng = mix(rng);
    am::u64 size;
    if (pick < 80) size = 1 + rng % 2048;                          // small
    else if (pick < 95) size = 2049 + rng % (30u << 10);           // portion
    else size = (32u << 10) + 1 + rng % (96u << 10);               // large
    if (rng % 9 == 0) size = 0;                                    // inactive lane: null handle
    const bool contiguous = (pick & 1) != 0;
    const am::u64 tag = (warp << 40) | ((am::u64)round << 8) | lane;
    // Divergent: lanes split in two groups that each make their own request.
    am::u64 handle;
    unsigned status;
    if (lane % 3 == 0) {
      handle = contiguous ? am::malloc_contiguous(mb, size, &status) : am::malloc(mb, size, &status);
    } else {
      handle = contiguous ? am::malloc_contiguous(mb, size, &status) : am::malloc(mb, size, &status);
    }
    if (status == am::kStatusOutOfMemory) {
      add(counters, kOutOfMemory, 1);
      continue;
    }
    if (status != am::kStatusOk) {
      add(counters, kAllocFailures, 1);
      counters[kLastFailure] = status;
      continue;
    }
    if ((size == 0) != (handle == 0)) {
      add(counters, kBadInputWrong, 1);
      record(counters, events, kWrongStatus, warp, lane, round, handle, size, status, 0);
    }
    if (handle) add(counters, kAllocs, 1);
    tag_and_check(handle, size, tag, counters);
    const am::FreeResult freed = am::free(mb, handle);
    if (freed.lane_status != am::kLaneOk) {
      add(counters, kFreeFailures, 1);
      record(counters, events, kFreeFailed, warp, lane, round, handle, size, freed.status, freed.lane_status);
    }

    if (round % 8 == 7) {
      // Bad inputs, one request each, every lane taking part.
      add(counters, kBadInputChecks, 4);
      // Double free (or null: a no-op). Never Ok; exactly DoubleFree unless another warp reused
      // the place meanwhile with a different size class.
      const am::FreeResult again = am::free(mb, handle);
      if (handle && again.lane_status == am::kLaneOk) {
        add(counters, kBadInputWrong, 1);
        record(counters, events, kDoubleFreeOk, warp, lane, round, handle, size, again.status, again.lane_status);
      }
      if (handle && again.lane_status == am::kLaneDoubleFree) add(counters, kDoubleFreeExact, 1);
      const am::FreeResult foreign = am::free(mb, am::handle_plain(0x1000 + 16 * lane, lane));
      if (foreign.lane_status != am::kLaneInvalidHandle) {
        add(counters, kBadInputWrong, 1);
        record(counters, events, kWrongStatus, warp, lane, round, 0x1000 + 16 * lane, 1, foreign.status, foreign.lane_status);
      }
      unsigned over;
      const am::u64 huge = am::malloc(mb, 1ull << 40, &over);
      if (huge != 0 || over != am::kStatusSizeOverLimit) {
        add(counters, kBadInputWrong, 1);
        record(counters, events, kWrongStatus, warp, lane, round, huge, 2, over, 0);
      }
      const am::u64 h = am::malloc(mb, 4096 + 64 * lane, &over);
      if (h) {
        const am::FreeResult inner = am::free(mb, h + 64);
        if (inner.lane_status != am::kLaneInteriorPointer) {
          add(counters, kBadInputWrong, 1);
          record(counters, events, kWrongStatus, warp, lane, round, h + 64, 3, inner.status, inner.lane_status);
        }
        const am::FreeResult last = am::free(mb, h);
        if (last.lane_status != am::kLaneOk) {
          add(counters, kFreeFailures, 1);
          record(counters, events, kFreeAfterInteriorFailed, warp, lane, round, h, 4096 + 64 * lane,
                 last.status, last.lane_status);
        }
      }
    }
  }
}

// Launched after the service stopped: every lane's call must end with kStatusShutdown and a
// null handle (the warps post, poll, find the mailbox closed); counts[0] counts the lanes that
// did.
extern "C" __global__ void am_after_close(am::DeviceMailbox mb, unsigned long long* counts) {
  unsigned status = am::kStatusOk;
  const am::u64 h = am::malloc(mb, 64, &status);
  if (status == am::kStatusShutdown && h == 0) atomicAdd(&counts[0], 1ull);
}
