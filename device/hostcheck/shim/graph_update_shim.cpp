// C entry points over device/kernels/graph_update.cuh (the update of a changing graph's lists
// and the CSR rebuild that every system of `alignmalloc walk` runs), compiled as host C++ and run
// on host warps (simt.h), one warp after another, so Rust can compare what they leave with the
// host's model of the same batches without a GPU. Each warp is a block of 32 threads: block w
// of a grid of W is warp w of W, as the kernels compute it.
#include "simt.h"

#include <cstdlib>

namespace {

struct Dim {
  unsigned x;
};
// Per thread: tests run warps on several threads at once.
thread_local Dim grid_dim{1};
thread_local Dim block_idx{0};
constexpr Dim kBlockDim{32};
Dim thread_idx() { return Dim{simt::current_lane()}; }

}  // namespace

#define threadIdx (thread_idx())
#define blockIdx block_idx
#define blockDim kBlockDim
#define gridDim grid_dim

#include <graph_update.cuh>

namespace {

using graph_update::u64;

// Lists in the host's heap. The first `allocations` allocations succeed, the later ones fail
// (status 0: the kernel reports kAllocFailed); lanes run one at a time, so no lock.
struct HeapLists {
  unsigned long long allocations;
  long long live;
  u64 allocate(u64 bytes, unsigned* status) {
    *status = 0;
    if (allocations == 0) return 0;
    --allocations;
    void* list = std::malloc(bytes);
    if (list == nullptr) return 0;
    ++live;
    return (u64)list;
  }
  unsigned release(u64 list) {
    std::free((void*)list);
    --live;
    return 0;
  }
  unsigned* view(u64 list) const { return (unsigned*)list; }
};

struct UpdateCall {
  graph_update::Batch batch;
  unsigned growth_shift;
  HeapLists* lists_heap;
  u64* lists;
  unsigned* degrees;
  unsigned* capacities;
  unsigned* statuses;
};

void update_lane(unsigned, void* context) {
  UpdateCall& call = *static_cast<UpdateCall*>(context);
  graph_update::update_lists(*call.lists_heap, call.batch, call.growth_shift, call.lists,
                             call.degrees, call.capacities, call.statuses);
}

struct RebuildCall {
  graph_update::Batch batch;
  const long long* shift;
  const u64* old_offsets;
  unsigned* old_neighbors;
  unsigned vertices;
  u64* offsets;
  unsigned* neighbors;
  unsigned* statuses;
};

void rebuild_lane(unsigned, void* context) {
  RebuildCall& call = *static_cast<RebuildCall*>(context);
  graph_update::rebuild_csr_vertex(call.batch, call.shift, call.old_offsets, call.old_neighbors,
                                   call.vertices, call.offsets, call.neighbors, call.statuses);
}

// Run `body` as warps 0 .. warps - 1 of a grid of `warps`, one after another.
void run_grid(unsigned warps, void (*body)(unsigned, void*), void* context) {
  grid_dim.x = warps;
  for (unsigned w = 0; w < warps; ++w) {
    block_idx.x = w;
    simt::run_warp(0xFFFFFFFFu, body, context);
  }
}

}  // namespace

extern "C" {

// graph_update::update_lists over `warps` warps; lists are host heap blocks (0: none). Returns
// how many lists the batch allocated less how many it freed.
long long am_hostcheck_graph_update(graph_update::Batch batch, unsigned growth_shift,
                                    unsigned warps, unsigned long long allocations, u64* lists,
                                    unsigned* degrees, unsigned* capacities,
                                    unsigned* statuses) {
  HeapLists heap{allocations, 0};
  UpdateCall call{batch, growth_shift, &heap, lists, degrees, capacities, statuses};
  run_grid(warps, update_lane, &call);
  return heap.live;
}

// Free a list the update allocated.
void am_hostcheck_graph_list_free(u64 list) { std::free((void*)list); }

// graph_update::rebuild_csr_vertex, one warp per vertex.
void am_hostcheck_csr_rebuild(graph_update::Batch batch, const long long* shift,
                              const u64* old_offsets, unsigned* old_neighbors, unsigned vertices,
                              u64* offsets, unsigned* neighbors, unsigned* statuses) {
  RebuildCall call{batch, shift, old_offsets, old_neighbors, vertices, offsets, neighbors,
                   statuses};
  run_grid(vertices, rebuild_lane, &call);
}

// The statuses the header gives a touched vertex: kAllocFailed, kFreeFailed, kMissingEdge.
void am_hostcheck_graph_update_codes(unsigned out[3]) {
  out[0] = graph_update::kAllocFailed;
  out[1] = graph_update::kFreeFailed;
  out[2] = graph_update::kMissingEdge;
}

}  // extern "C"
