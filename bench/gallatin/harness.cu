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
//
// The gallatin-arrays system of `alignmalloc walk` on a changing graph: per-vertex neighbour
// lists on Gallatin, changed by the kernel every list system shares (graph_update.cuh):
//   amg_lists_init(vertices, growth_shift)  zeroed per-vertex lists, degrees and capacities;
//                                     lists grow as graph_update.cuh's resized_capacity says
//   amg_lists_prepare(touched, starts, adds, drop_starts, drops, count)  copy one batch (host
//                                     arrays of count, count + 1, starts[count], count + 1 and
//                                     drop_starts[count] entries; untimed)
//   amg_lists_update()                launch the update kernel and wait (the CLI times it)
//   amg_lists_statuses(out)           each touched vertex's status (graph_update.cuh's)
//   amg_lists_arrays(&lists, &degrees)  device addresses of the lists and degrees (the walk
//                                     kernel reads them as raw pointers)
//   amg_lists_read(degrees, capacities)  copy every vertex's degree and capacity to the host
//   amg_lists_free()                  free every list and the arrays
#include <cstdint>
#include <cstdio>
#include <gallatin/allocators/global_allocator.cuh>
#include <graph_update.cuh>

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

struct GallatinLists {
  __device__ uint64_t allocate(uint64_t bytes, unsigned* status) {
    *status = 0;
    return (uint64_t)global_malloc(bytes);
  }
  __device__ unsigned release(uint64_t list) {
    global_free((void*)list);
    return 0;
  }
  __device__ unsigned* view(uint64_t list) const { return (unsigned*)list; }
};

__global__ void lists_update_kernel(graph_update::Batch batch, unsigned growth_shift,
                                    uint64_t* lists, unsigned* degrees, unsigned* capacities,
                                    unsigned* statuses) {
  GallatinLists allocator;
  graph_update::update_lists(allocator, batch, growth_shift,
                             reinterpret_cast<graph_update::u64*>(lists), degrees, capacities,
                             statuses);
}

__global__ void lists_free_kernel(const uint64_t* lists, uint32_t vertices) {
  const uint64_t v = thread_id();
  if (v >= vertices || lists[v] == 0) return;
  global_free((void*)lists[v]);
}

// The lists' state and the prepared batch.
uint64_t* d_lists = nullptr;
unsigned* d_degrees = nullptr;
unsigned* d_capacities = nullptr;
uint32_t list_vertices = 0;
unsigned list_growth_shift = 0;
unsigned* d_batch[6] = {};  // touched, starts, adds, drop_starts, drops, seen
uint64_t batch_capacity[6] = {};
unsigned* d_statuses = nullptr;
uint64_t status_capacity = 0;
graph_update::Batch prepared{};

int upload(int which, const uint32_t* host, uint64_t n) {
  if (n > batch_capacity[which]) {
    cudaFree(d_batch[which]);
    d_batch[which] = nullptr;
    AMG_CHECK(cudaMalloc(&d_batch[which], n * sizeof(unsigned)));
    batch_capacity[which] = n;
  }
  if (n > 0) {
    AMG_CHECK(cudaMemcpy(d_batch[which], host, n * sizeof(unsigned), cudaMemcpyHostToDevice));
  }
  return 0;
}

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

int amg_lists_init(uint32_t vertices, unsigned growth_shift) {
  if (!initialised) return fail(cudaErrorNotReady, "amg_lists_init before amg_init");
  AMG_CHECK(cudaMalloc(&d_lists, vertices * sizeof(uint64_t)));
  AMG_CHECK(cudaMalloc(&d_degrees, vertices * sizeof(unsigned)));
  AMG_CHECK(cudaMalloc(&d_capacities, vertices * sizeof(unsigned)));
  AMG_CHECK(cudaMemset(d_lists, 0, vertices * sizeof(uint64_t)));
  AMG_CHECK(cudaMemset(d_degrees, 0, vertices * sizeof(unsigned)));
  AMG_CHECK(cudaMemset(d_capacities, 0, vertices * sizeof(unsigned)));
  list_vertices = vertices;
  list_growth_shift = growth_shift;
  return 0;
}

int amg_lists_prepare(const uint32_t* touched, const uint32_t* starts, const uint32_t* adds,
                      const uint32_t* drop_starts, const uint32_t* drops, uint32_t count) {
  const uint64_t sizes[5] = {count, (uint64_t)count + 1, starts[count], (uint64_t)count + 1,
                             drop_starts[count]};
  const uint32_t* hosts[5] = {touched, starts, adds, drop_starts, drops};
  for (int i = 0; i < 5; ++i) {
    const int status = upload(i, hosts[i], sizes[i]);
    if (status != 0) return status;
  }
  // drop_neighbors' counts: one zeroed word per drop.
  if (drop_starts[count] > batch_capacity[5]) {
    cudaFree(d_batch[5]);
    d_batch[5] = nullptr;
    AMG_CHECK(cudaMalloc(&d_batch[5], drop_starts[count] * sizeof(unsigned)));
    batch_capacity[5] = drop_starts[count];
  }
  if (drop_starts[count] > 0) {
    AMG_CHECK(cudaMemset(d_batch[5], 0, drop_starts[count] * sizeof(unsigned)));
  }
  // One status per touched vertex (at least one element, so the pointer is valid).
  const uint64_t statuses = count > 0 ? count : 1;
  if (statuses > status_capacity) {
    cudaFree(d_statuses);
    d_statuses = nullptr;
    AMG_CHECK(cudaMalloc(&d_statuses, statuses * sizeof(unsigned)));
    status_capacity = statuses;
  }
  AMG_CHECK(cudaMemset(d_statuses, 0, statuses * sizeof(unsigned)));
  prepared = graph_update::Batch{d_batch[0], d_batch[1], d_batch[2], d_batch[3],
                                 d_batch[4], d_batch[5], count};
  AMG_CHECK(cudaDeviceSynchronize());
  return 0;
}

int amg_lists_update() {
  if (prepared.count == 0) return 0;
  // Whole warps: blocks of 256 threads.
  lists_update_kernel<<<grid_for(prepared.count), 256>>>(prepared, list_growth_shift, d_lists,
                                                         d_degrees, d_capacities, d_statuses);
  AMG_CHECK(cudaGetLastError());
  AMG_CHECK(cudaDeviceSynchronize());
  return 0;
}

int amg_lists_statuses(uint32_t* out) {
  if (prepared.count == 0) return 0;
  AMG_CHECK(cudaMemcpy(out, d_statuses, prepared.count * sizeof(unsigned), cudaMemcpyDeviceToHost));
  return 0;
}

void amg_lists_arrays(uint64_t* lists, uint64_t* degrees) {
  *lists = (uint64_t)d_lists;
  *degrees = (uint64_t)d_degrees;
}

int amg_lists_read(uint32_t* degrees, uint32_t* capacities) {
  AMG_CHECK(cudaMemcpy(degrees, d_degrees, list_vertices * sizeof(unsigned), cudaMemcpyDeviceToHost));
  AMG_CHECK(cudaMemcpy(capacities, d_capacities, list_vertices * sizeof(unsigned),
                       cudaMemcpyDeviceToHost));
  return 0;
}

int amg_lists_free() {
  if (d_lists != nullptr) {
    lists_free_kernel<<<grid_for(list_vertices), 256>>>(d_lists, list_vertices);
    AMG_CHECK(cudaGetLastError());
    AMG_CHECK(cudaDeviceSynchronize());
  }
  cudaFree(d_lists);
  cudaFree(d_degrees);
  cudaFree(d_capacities);
  cudaFree(d_statuses);
  for (int i = 0; i < 6; ++i) {
    cudaFree(d_batch[i]);
    d_batch[i] = nullptr;
    batch_capacity[i] = 0;
  }
  d_lists = nullptr;
  d_degrees = d_capacities = d_statuses = nullptr;
  list_vertices = 0;
  status_capacity = 0;
  prepared = graph_update::Batch{};
  return 0;
}

void amg_destroy() {
  amg_lists_free();
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
