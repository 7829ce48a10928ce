// The Gallatin system of `alignmalloc alloc`: the same rounds as device/kernels/alloc.cu (allocate,
// tag, check, free; one object per thread), run by Gallatin's device allocator, as a shared library
// the CLI loads at run time (bench/src/alloc/gallatin.rs). Gallatin is not part of this repository:
// bench/gallatin/build.sh compiles this file against a checkout named by GALLATIN_DIR.
//
// Entry points (0 = success, else a cudaError_t; amg_error() says what failed):
//   amg_init(pool_bytes, seed)        the global Gallatin allocator over pool_bytes of device memory
//   amg_prepare(sizes, threads)       copy one round's sizes (untimed)
//   amg_alloc()                       launch the allocation kernel and wait (the CLI times it)
//   amg_check(every_byte, &failed, &bad)  count null results of non-zero sizes; tag and check
//                                     the first and last word of each object, or every byte
//   amg_free()                        launch the free kernel and wait (timed)
//   amg_destroy()                     release the pool and the round's buffers
#include <cstdint>
#include <cstdio>
#include <gallatin/allocators/global_allocator.cuh>

namespace {

using gallatin::allocators::global_free;
using gallatin::allocators::global_malloc;

uint64_t* d_sizes = nullptr;
uint64_t* d_ptrs = nullptr;
unsigned long long* d_counts = nullptr;
uint32_t capacity = 0;
uint32_t round_threads = 0;
bool initialised = false;
char last_error[256] = "";

int fail(cudaError_t e, const char* what) {
  snprintf(last_error, sizeof last_error, "%s: %s", what, cudaGetErrorString(e));
  return (int)e;
}

#define AMG_CHECK(call)                          \
  do {                                           \
    cudaError_t e_ = (call);                     \
    if (e_ != cudaSuccess) return fail(e_, #call); \
  } while (0)

__device__ __forceinline__ uint64_t thread_id() {
  return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ uint64_t tag(uint64_t t, uint64_t word) { return t << 32 | word; }

__device__ __forceinline__ unsigned char byte_tag(uint64_t t, uint64_t i) {
  return (unsigned char)(t * 131u + i);
}

__global__ void alloc_kernel(const uint64_t* sizes, uint32_t threads, uint64_t* ptrs) {
  const uint64_t t = thread_id();
  if (t >= threads) return;
  ptrs[t] = sizes[t] ? (uint64_t)global_malloc(sizes[t]) : 0;
}

__global__ void free_kernel(const uint64_t* ptrs, uint32_t threads) {
  const uint64_t t = thread_id();
  if (t >= threads || ptrs[t] == 0) return;
  global_free((void*)ptrs[t]);
}

// The same tags as am_tag: the first and last 8-byte word; or, with every_byte, every word
// and the bytes past the last whole word.
__global__ void tag_kernel(const uint64_t* sizes, const uint64_t* ptrs, uint32_t threads,
                           uint32_t every_byte) {
  const uint64_t t = thread_id();
  if (t >= threads || ptrs[t] == 0) return;
  const uint64_t size = sizes[t];
  unsigned char* p = (unsigned char*)ptrs[t];
  if (every_byte) {
    for (uint64_t k = 0; k < size / 8; ++k) ((uint64_t*)p)[k] = tag(t, k);
    for (uint64_t i = size / 8 * 8; i < size; ++i) p[i] = byte_tag(t, i);
  } else if (size >= 8) {
    ((uint64_t*)p)[0] = tag(t, 0);
    ((uint64_t*)p)[size / 8 - 1] = tag(t, 1);
  }
}

__global__ void check_kernel(const uint64_t* sizes, const uint64_t* ptrs, uint32_t threads,
                             uint32_t every_byte, unsigned long long* counts) {
  const uint64_t t = thread_id();
  if (t >= threads) return;
  const uint64_t size = sizes[t];
  if (ptrs[t] == 0) {
    if (size != 0) atomicAdd(&counts[0], 1ull);
    return;
  }
  const unsigned char* p = (const unsigned char*)ptrs[t];
  bool ok = true;
  if (every_byte) {
    for (uint64_t k = 0; k < size / 8 && ok; ++k) ok = ((const uint64_t*)p)[k] == tag(t, k);
    for (uint64_t i = size / 8 * 8; i < size && ok; ++i) ok = p[i] == byte_tag(t, i);
  } else if (size >= 8) {
    ok = ((const uint64_t*)p)[0] == tag(t, 0) && ((const uint64_t*)p)[size / 8 - 1] == tag(t, 1);
  }
  if (!ok) atomicAdd(&counts[1], 1ull);
}

dim3 grid_for(uint32_t threads) { return dim3((threads + 255) / 256); }

}  // namespace

extern "C" {

const char* amg_error() { return last_error; }

int amg_init(uint64_t pool_bytes, uint64_t seed) {
  if (initialised) return 0;
  gallatin::allocators::init_global_allocator(pool_bytes, seed, false);
  AMG_CHECK(cudaGetLastError());
  AMG_CHECK(cudaDeviceSynchronize());
  AMG_CHECK(cudaMalloc(&d_counts, 2 * sizeof(unsigned long long)));
  initialised = true;
  return 0;
}

int amg_prepare(const uint64_t* sizes, uint32_t threads) {
  if (threads > capacity) {
    cudaFree(d_sizes);
    cudaFree(d_ptrs);
    d_sizes = d_ptrs = nullptr;
    AMG_CHECK(cudaMalloc(&d_sizes, threads * sizeof(uint64_t)));
    AMG_CHECK(cudaMalloc(&d_ptrs, threads * sizeof(uint64_t)));
    capacity = threads;
  }
  round_threads = threads;
  AMG_CHECK(cudaMemcpy(d_sizes, sizes, threads * sizeof(uint64_t), cudaMemcpyHostToDevice));
  AMG_CHECK(cudaMemset(d_ptrs, 0, threads * sizeof(uint64_t)));
  AMG_CHECK(cudaDeviceSynchronize());
  return 0;
}

int amg_alloc() {
  alloc_kernel<<<grid_for(round_threads), 256>>>(d_sizes, round_threads, d_ptrs);
  AMG_CHECK(cudaGetLastError());
  AMG_CHECK(cudaDeviceSynchronize());
  return 0;
}

int amg_check(uint32_t every_byte, uint64_t* failed, uint64_t* bad) {
  AMG_CHECK(cudaMemset(d_counts, 0, 2 * sizeof(unsigned long long)));
  tag_kernel<<<grid_for(round_threads), 256>>>(d_sizes, d_ptrs, round_threads, every_byte);
  AMG_CHECK(cudaGetLastError());
  check_kernel<<<grid_for(round_threads), 256>>>(d_sizes, d_ptrs, round_threads, every_byte,
                                                 d_counts);
  AMG_CHECK(cudaGetLastError());
  unsigned long long counts[2];
  AMG_CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  *failed = counts[0];
  *bad = counts[1];
  return 0;
}

int amg_free() {
  free_kernel<<<grid_for(round_threads), 256>>>(d_ptrs, round_threads);
  AMG_CHECK(cudaGetLastError());
  AMG_CHECK(cudaDeviceSynchronize());
  return 0;
}

void amg_destroy() {
  if (initialised) gallatin::allocators::free_global_allocator();
  cudaFree(d_sizes);
  cudaFree(d_ptrs);
  cudaFree(d_counts);
  d_sizes = d_ptrs = nullptr;
  d_counts = nullptr;
  capacity = round_threads = 0;
  initialised = false;
}

}  // extern "C"
