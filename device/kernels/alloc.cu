// Allocation benchmarks (`alignmalloc alloc`; host side bench/src/alloc.rs). Thread t allocates
// sizes[t] bytes, or frees what it got, with one of three allocators:
//   mode 0: am::malloc (warp-arranged), 1: am::malloc_contiguous, 2: CUDA's in-kernel malloc.
// Every kernel takes the mailbox first (mode 2 leaves it unused) so all launch alike.
//   am_alloc:  allocate; statuses[t] is the request's status (mode 2: OutOfMemory for a null
//              pointer of a non-zero size).
//   am_free:   free with am::post_free, by handle, or by address where mode carries
//              kFreeByPointer (mode 1's plain handles); statuses[t] is the lane's status for
//              objects the device caches judge, 0 for frees posted to the host (mode 2: 0).
//   am_tag:    write t's tag over the first and last 8-byte word of its object, or with
//              every_byte over every word and each byte past the last whole word (untimed).
//   am_check:  count the objects whose tags no longer hold (overlaps, corruption).
// (The gallatin system runs the same rounds from bench/gallatin/harness.cu.)
#include <alignmalloc/alignmalloc.cuh>

namespace {

__device__ __forceinline__ am::u64 global_thread() {
  return (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ am::u64 tag(am::u64 t, am::u64 word) { return t << 32 | word; }

__device__ __forceinline__ unsigned char byte_tag(am::u64 t, am::u64 i) {
  return (unsigned char)(t * 131u + i);
}

// The address of byte `offset` of thread t's object.
__device__ __forceinline__ am::u64* word_at(am::u64 handle, unsigned mode, am::u64 offset) {
  if (mode == 2) return (am::u64*)(handle + offset);
  am::ptr<am::u64> p{handle};
  return &p[offset / 8];
}

// The address of byte `i` of thread t's object.
__device__ __forceinline__ unsigned char* byte_at(am::u64 handle, unsigned mode, am::u64 i) {
  if (mode == 2) return (unsigned char*)(handle + i);
  am::ptr<unsigned char> p{handle};
  return &p[i];
}

}  // namespace

extern "C" __global__ void am_alloc(am::DeviceMailbox mb, const am::u64* sizes, unsigned threads,
                                    unsigned mode, am::u64* handles, unsigned* statuses) {
  const am::u64 t = global_thread();
  if (t >= threads) return;
  const am::u64 size = sizes[t];
  unsigned status = am::kStatusOk;
  am::u64 h = 0;
  if (mode == 0) {
    h = am::malloc(mb, size, &status);
  } else if (mode == 1) {
    h = am::malloc_contiguous(mb, size, &status);
  } else {
    h = size ? (am::u64)malloc(size) : 0;
    if (size && !h) status = am::kStatusOutOfMemory;
  }
  handles[t] = h;
  statuses[t] = status;
}

// am_free's mode bit: free by the object's address (am::post_free(void*)), not by its handle.
constexpr unsigned kFreeByPointer = 4;

extern "C" __global__ void am_free(am::DeviceMailbox mb, const am::u64* handles,
                                   unsigned threads, unsigned mode, unsigned* statuses) {
  const am::u64 t = global_thread();
  if (t >= threads) return;
  if (mode == 2) {
    free((void*)handles[t]);
    statuses[t] = am::kLaneOk;
    return;
  }
  // Posted: frees the host judges do not wait for its answer (the host's counters tell whether
  // they all succeeded); the caches judge theirs here.
  if (mode & kFreeByPointer) {
    const void* pointer = reinterpret_cast<const void*>(am::handle_address(handles[t]));
    statuses[t] = am::post_free(mb, pointer).lane_status;
  } else {
    statuses[t] = am::post_free(mb, handles[t]).lane_status;
  }
}

extern "C" __global__ void am_tag(am::DeviceMailbox, const am::u64* handles, const am::u64* sizes,
                                  unsigned threads, unsigned mode, unsigned every_byte) {
  const am::u64 t = global_thread();
  if (t >= threads || handles[t] == 0) return;
  const am::u64 size = sizes[t];
  if (every_byte) {
    for (am::u64 k = 0; k < size / 8; ++k) *word_at(handles[t], mode, k * 8) = tag(t, k);
    for (am::u64 i = size / 8 * 8; i < size; ++i) *byte_at(handles[t], mode, i) = byte_tag(t, i);
  } else if (size >= 8) {
    *word_at(handles[t], mode, 0) = tag(t, 0);
    *word_at(handles[t], mode, (size / 8 - 1) * 8) = tag(t, 1);
  }
}

extern "C" __global__ void am_check(am::DeviceMailbox, const am::u64* handles,
                                    const am::u64* sizes, unsigned threads, unsigned mode,
                                    unsigned every_byte, unsigned long long* bad) {
  const am::u64 t = global_thread();
  if (t >= threads || handles[t] == 0) return;
  const am::u64 size = sizes[t];
  bool ok = true;
  if (every_byte) {
    for (am::u64 k = 0; k < size / 8 && ok; ++k) ok = *word_at(handles[t], mode, k * 8) == tag(t, k);
    for (am::u64 i = size / 8 * 8; i < size && ok; ++i) {
      ok = *byte_at(handles[t], mode, i) == byte_tag(t, i);
    }
  } else if (size >= 8) {
    ok = *word_at(handles[t], mode, 0) == tag(t, 0) &&
         *word_at(handles[t], mode, (size / 8 - 1) * 8) == tag(t, 1);
  }
  if (!ok) atomicAdd(bad, 1ull);
}
