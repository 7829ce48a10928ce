// Per-vertex lists that grow inside kernels, as dynamic-graph code keeps adjacency lists: every
// round, each vertex that gets new edges appends them; a full list is moved to one twice as
// large (allocate, copy, free the old one). Lists are warp-arranged (am::malloc), appends are
// divergent (only some vertices grow each round), and the host checks every list at the end.
//
//   nvcc -arch=sm_90 growing_lists.cu $(pkg-config --cflags --libs alignmalloc) -o growing_lists
#include <alignmalloc/alignmalloc.cuh>

#include <vector>

#include "check.h"

// Edges vertex v gets in round r: none in some rounds (divergent growth), and a few hubs get
// many, so lists pass through every size class (small, portion, large).
__host__ __device__ inline unsigned new_edges(unsigned v, unsigned r) {
  if ((v + r) % 3 == 0) return 0;
  const unsigned hub = v % 4096 == 0 ? 1500 : v % 256 == 0 ? 150 : 0;
  return hub + 1 + (v * 7 + r * 13) % 9;
}

// The k-th edge vertex v ever got.
__host__ __device__ inline unsigned edge_value(unsigned v, unsigned k) { return v * 2654435761u + k; }

struct Lists {
  unsigned long long* handles;  // am::ptr<unsigned> of each vertex
  unsigned* lengths;
  unsigned* capacities;
  unsigned long long* failures;  // allocations that failed, frees that were refused
};

__global__ void start(Lists lists, unsigned vertices) {
  const unsigned v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= vertices) return;
  lists.handles[v] = am::malloc(4 * sizeof(unsigned));
  lists.lengths[v] = 0;
  lists.capacities[v] = 4;
  if (lists.handles[v] == 0) atomicAdd(lists.failures, 1ull);
}

__global__ void append_round(Lists lists, unsigned vertices, unsigned round) {
  const unsigned v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= vertices) return;
  const unsigned add = new_edges(v, round);
  if (add == 0) return;  // divergence: the lanes below allocate without this one
  unsigned length = lists.lengths[v], capacity = lists.capacities[v];
  am::ptr<unsigned> list{lists.handles[v]};
  if (length + add > capacity) {
    unsigned grown = capacity;
    while (grown < length + add) grown *= 2;
    am::ptr<unsigned> bigger{am::malloc(grown * (unsigned long long)sizeof(unsigned))};
    if (bigger.is_null()) {
      atomicAdd(lists.failures, 1ull);
      return;
    }
    for (unsigned i = 0; i < length; ++i) bigger[i] = list[i];
    if (am::free(list.handle).lane_status != am::kLaneOk) atomicAdd(lists.failures, 1ull);
    list = bigger;
    lists.handles[v] = list.handle;
    lists.capacities[v] = capacity = grown;
  }
  for (unsigned k = 0; k < add; ++k) list[length + k] = edge_value(v, length + k);
  lists.lengths[v] = length + add;
}

__global__ void free_all(Lists lists, unsigned vertices) {
  const unsigned v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= vertices) return;
  if (am::free(lists.handles[v]).lane_status != am::kLaneOk) atomicAdd(lists.failures, 1ull);
}

int main() {
  const unsigned vertices = 50000, rounds = 40, block = 128;
  const unsigned blocks = (vertices + block - 1) / block;
  Lists lists;
  CHECK_CUDA(cudaMalloc(&lists.handles, vertices * sizeof(unsigned long long)));
  CHECK_CUDA(cudaMalloc(&lists.lengths, vertices * sizeof(unsigned)));
  CHECK_CUDA(cudaMalloc(&lists.capacities, vertices * sizeof(unsigned)));
  CHECK_CUDA(cudaMallocManaged(&lists.failures, sizeof(unsigned long long)));
  *lists.failures = 0;

  am_runtime* rt = create_gpu_runtime(2ull << 30);
  CHECK_AM(am::bind(rt));
  start<<<blocks, block>>>(lists, vertices);
  CHECK_LAUNCH();
  for (unsigned r = 0; r < rounds; ++r) {
    append_round<<<blocks, block>>>(lists, vertices, r);
    CHECK_LAUNCH();
  }
  EXPECT(*lists.failures == 0, "%llu allocations or frees failed", *lists.failures);

  std::vector<unsigned long long> handles(vertices);
  std::vector<unsigned> lengths(vertices), capacities(vertices);
  CHECK_CUDA(cudaMemcpy(handles.data(), lists.handles, vertices * 8, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lengths.data(), lists.lengths, vertices * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(
      cudaMemcpy(capacities.data(), lists.capacities, vertices * 4, cudaMemcpyDeviceToHost));
  unsigned long long edges = 0;
  unsigned longest = 0;
  std::vector<unsigned> list;
  for (unsigned v = 0; v < vertices; ++v) {
    unsigned expected = 0;
    for (unsigned r = 0; r < rounds; ++r) expected += new_edges(v, r);
    EXPECT(lengths[v] == expected, "vertex %u has %u edges, not %u", v, lengths[v], expected);
    uint64_t capacity = 0;
    CHECK_AM(am_capacity(rt, handles[v], &capacity));
    EXPECT(capacity >= capacities[v] * 4ull, "vertex %u: capacity %llu", v,
           (unsigned long long)capacity);
    list.resize(lengths[v]);
    CHECK_AM(am_read(rt, handles[v], 0, list.data(), lengths[v] * 4ull));
    for (unsigned k = 0; k < lengths[v]; ++k) {
      EXPECT(list[k] == edge_value(v, k), "vertex %u edge %u: %u", v, k, list[k]);
    }
    edges += lengths[v];
    if (lengths[v] > longest) longest = lengths[v];
  }
  am_counters counters;
  CHECK_AM(am_counters_get(rt, &counters));
  std::printf("%u vertices, %u rounds: %llu edges checked (longest list %u); %llu objects "
              "freed while growing\n",
              vertices, rounds, edges, longest, (unsigned long long)counters.lanes_freed);
  free_all<<<blocks, block>>>(lists, vertices);
  CHECK_LAUNCH();
  EXPECT(*lists.failures == 0, "%llu frees failed", *lists.failures);
  expect_clean(rt);
  CHECK_AM(am_runtime_destroy(rt));
  CHECK_CUDA(cudaFree(lists.handles));
  CHECK_CUDA(cudaFree(lists.lengths));
  CHECK_CUDA(cudaFree(lists.capacities));
  CHECK_CUDA(cudaFree(lists.failures));
  std::printf("growing_lists: OK\n");
  return 0;
}
