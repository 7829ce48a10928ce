// Soak of small objects (`alignmalloc soak`; host side bench/src/soak.rs). Every thread keeps
// `slots` live objects across launches. Each step it picks a slot; if the slot holds an object it
// checks every byte of it (an overlap with another live object, or a wrong handle, shows as a
// damaged byte), sometimes sends a bad free first (an interior pointer, whose status must be
// kLaneInteriorPointer), frees it (waiting, or posted without waiting one time in four) and
// sometimes frees it again (kLaneDoubleFree); then it allocates a new object of 1 B to 32 KiB
// (log-uniform; one in 64 is 32-128 KiB and goes through the host) and writes its tag over every
// byte. Launched with `final_pass` set, each thread checks and frees what it holds and
// allocates nothing. The host drains the device caches between launches while objects are live.
#include <alignmalloc/alignmalloc.cuh>

namespace {

enum Counter : unsigned {
  kObjects,        // objects allocated
  kBytesTagged,    // bytes written with their owner's tag (and checked later)
  kBytesDamaged,   // bytes that did not hold their owner's tag when checked
  kAllocFailures,  // allocations that did not answer kStatusOk
  kLastAllocStatus,
  kFreeFailures,   // waited frees of live objects that did not answer kLaneOk
  kLastFreeStatus,
  kFreesPosted,    // frees posted without waiting (the host counts their outcome)
  kBadFreesSent,   // interior pointers and double frees sent
  kBadFreesWrong,  // bad frees whose lane status was not the defined one
  kLastWrongStatus,
  kInteriorAnswers,                // 5 counters: interior frees by the lane status answered
  kDoubleAnswers = kInteriorAnswers + 5,  // 5 counters: double frees by the lane status answered
  kHandlesOutside = kDoubleAnswers + 5,   // allocations whose bytes would lie outside the arena
  kEvents,                                // failure events recorded (the first 64 are kept)
  kCounters,
};

__device__ am::u64 mix(am::u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The tag of word `i` of the object behind `handle`: differs between objects and between words.
__device__ __forceinline__ am::u64 tag_word(am::u64 handle, am::u64 i) { return mix(handle) + i; }

__device__ void add(unsigned long long* counters, unsigned which, unsigned long long n) {
  if (n) atomicAdd(&counters[which], n);
}

// Write the tag over every byte of the object: whole words, then the tail bytes.
__device__ void tag_object(am::u64 handle, am::u64 size) {
  am::ptr<am::u64> words{handle};
  const am::u64 n = size / 8;
  for (am::u64 i = 0; i < n; ++i) words[i] = tag_word(handle, i);
  am::ptr<unsigned char> bytes{handle};
  const am::u64 last = tag_word(handle, n);
  for (am::u64 b = n * 8; b < size; ++b) bytes[b] = (unsigned char)(last >> (8 * (b % 8)));
}

// The bytes of the object that no longer hold its tag.
__device__ am::u64 damaged_bytes(am::u64 handle, am::u64 size) {
  am::ptr<const am::u64> words{handle};
  const am::u64 n = size / 8;
  am::u64 bad = 0;
  for (am::u64 i = 0; i < n; ++i) {
    const am::u64 diff = words[i] ^ tag_word(handle, i);
    if (diff) {
      for (unsigned b = 0; b < 8; ++b) bad += ((diff >> (8 * b)) & 0xFF) != 0;
    }
  }
  am::ptr<const unsigned char> bytes{handle};
  const am::u64 last = tag_word(handle, n);
  for (am::u64 b = n * 8; b < size; ++b) bad += bytes[b] != (unsigned char)(last >> (8 * (b % 8)));
  return bad;
}

// The device cache slab on the block of `handle` now, for failure events: slab number << 32 |
// class << 24 | generation << 16 | slab id; all ones when no slab holds the block.
__device__ am::u64 slab_view(const am::DeviceMailbox& mb, am::u64 handle) {
  const am::DeviceCaches& c = mb.caches;
  if (c.classes == 0) return ~0ull;
  const int id = am::detail::cache_slab_of_block(c, am::handle_address(handle) >> 21);
  if (id < 0) return ~0ull;
  const auto word = [](const unsigned* w) {
    return (am::u64)am::detail::device_atomic<unsigned>(*const_cast<unsigned*>(w))
        .load(cuda::memory_order_relaxed);
  };
  return word(&c.slab_number[id]) << 32 | word(&c.slab_class[id]) << 24 |
         word(&c.slab_generation[id]) << 16 | (am::u64)id;
}

// A failure, for diagnosis: kind (1 a bad free answered other than its defined status, 2 a free
// of a live object refused, 3 a bad free answered Ok, 4 an allocation whose bytes would lie
// outside the arena, left untouched), the handle, its size, the lane status
// answered, and the slab on the handle's block before its (first) free and after ([slab_view]).
constexpr unsigned kMaxEvents = 64;
constexpr unsigned kEventWords = 6;

__device__ void record(unsigned long long* counters, unsigned long long* events, unsigned kind,
                       am::u64 handle, am::u64 size, unsigned status, am::u64 slab_before,
                       am::u64 slab_after) {
  const unsigned long long i = atomicAdd(&counters[kEvents], 1ull);
  if (i >= kMaxEvents) return;
  unsigned long long* e = events + i * kEventWords;
  e[0] = kind;
  e[1] = handle;
  e[2] = size;
  e[3] = status;
  e[4] = slab_before;
  e[5] = slab_after;
}

__device__ void expect(const am::DeviceMailbox& mb, unsigned long long* counters,
                       unsigned long long* events, am::u64 handle, am::u64 size,
                       unsigned lane_status, unsigned wanted, am::u64 slab_before) {
  add(counters, kBadFreesSent, 1);
  // Answers other than the defined one; an Ok (the bad free freed something) first of all.
  if (lane_status != wanted) {
    record(counters, events, lane_status == am::kLaneOk ? 3 : 1, handle, size, lane_status,
           slab_before, slab_view(mb, handle));
  }
  const unsigned answers = wanted == am::kLaneInteriorPointer ? kInteriorAnswers : kDoubleAnswers;
  add(counters, answers + (lane_status < 5 ? lane_status : 4), 1);
  if (lane_status != wanted) {
    add(counters, kBadFreesWrong, 1);
    counters[kLastWrongStatus] = lane_status;
  }
}

}  // namespace

// Whether some byte of the object of `size` bytes behind `handle` would lie outside the arena
// [arena_start, arena_end): a wrong handle is recorded instead of faulting the whole run.
__device__ bool outside_arena(am::u64 handle, am::u64 size, am::u64 arena_start,
                              am::u64 arena_end) {
  const am::u64 first = am::translate(handle, 0);
  const am::u64 last = am::translate(handle, size - 1);
  return first < arena_start || last >= arena_end || last < first;
}

extern "C" __global__ void am_soak(am::DeviceMailbox mb, unsigned long long seed, unsigned launch,
                                   unsigned steps, unsigned slots, unsigned final_pass,
                                   am::u64 arena_start, am::u64 arena_end, am::u64* live,
                                   am::u64* live_sizes, unsigned long long* counters,
                                   unsigned long long* events) {
  const am::u64 thread = (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
  am::u64 rng = mix(seed ^ mix(thread) ^ ((am::u64)launch << 40));
  am::u64* my_live = live + thread * slots;
  am::u64* my_sizes = live_sizes + thread * slots;
  const unsigned rounds = final_pass ? slots : steps;
  for (unsigned step = 0; step < rounds; ++step) {
    // After a handle outside the arena the run stops (the final pass still frees), so the
    // report with its event comes back instead of a fault of the whole run.
    if (!final_pass && *(volatile unsigned long long*)&counters[kHandlesOutside] != 0) break;
    rng = mix(rng);
    const unsigned slot = final_pass ? step : (unsigned)(rng % slots);
    const am::u64 held = my_live[slot];
    if (held != 0) {
      const am::u64 size = my_sizes[slot];
      add(counters, kBytesDamaged, damaged_bytes(held, size));
      const unsigned roll = (unsigned)(rng >> 32) % 16u;
      if (roll == 0) {
        // Not at the object's start: every object is at least 16-byte aligned.
        const am::u64 slab = slab_view(mb, held);
        const am::FreeResult inner = am::free(mb, held + 8);
        expect(mb, counters, events, held + 8, size, inner.lane_status, am::kLaneInteriorPointer,
               slab);
      }
      if (roll % 4 == 1) {
        am::post_free(mb, held);
        add(counters, kFreesPosted, 1);
      } else {
        const am::u64 slab = slab_view(mb, held);
        const am::FreeResult freed = am::free(mb, held);
        if (freed.lane_status != am::kLaneOk) {
          add(counters, kFreeFailures, 1);
          counters[kLastFreeStatus] = freed.lane_status;
          record(counters, events, 2, held, size, freed.lane_status, slab, slab_view(mb, held));
        } else if (roll == 2) {
          // Right after its free, before its memory can come back in a later life.
          expect(mb, counters, events, held, size, am::free(mb, held).lane_status,
                 am::kLaneDoubleFree, slab);
        }
      }
      my_live[slot] = 0;
    }
    if (final_pass) continue;
    rng = mix(rng);
    am::u64 size;
    if (rng % 64 == 0) {
      size = (32ull << 10) + 1 + (rng >> 8) % (96ull << 10);
    } else {
      const unsigned log2 = (unsigned)((rng >> 8) % 16u);  // 1 B .. 32 KiB
      size = 1 + (rng >> 16) % (1ull << log2);
    }
    unsigned status = am::kStatusOk;
    const am::u64 h = am::malloc(mb, size, &status);
    if (status != am::kStatusOk || h == 0) {
      add(counters, kAllocFailures, 1);
      counters[kLastAllocStatus] = status;
      continue;
    }
    if (outside_arena(h, size, arena_start, arena_end)) {
      add(counters, kHandlesOutside, 1);
      record(counters, events, 4, h, size, status, slab_view(mb, h), ~0ull);
      continue;
    }
    add(counters, kObjects, 1);
    add(counters, kBytesTagged, size);
    tag_object(h, size);
    my_live[slot] = h;
    my_sizes[slot] = size;
  }
}
