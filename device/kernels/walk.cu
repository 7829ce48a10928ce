// Random walks over adjacency lists allocated from inside kernels (`alignmalloc walk`; the host
// side and the CPU reference are bench/src/walk.rs and its submodules).
//
//   am_walk_build:        thread t allocates the list (degree x 4 bytes) of vertex order[t] with
//                         am::malloc or am::malloc_contiguous, and copies its neighbours in when
//                         `fill`; an OutOfMemory answer (the arena growing) is retried.
//   am_walk_build_heap:   the same with CUDA's in-kernel malloc (device heap), always filled.
//   (Lists, handles and statuses are indexed by vertex; `order` only says which thread, and so
//   which warp, allocates and frees which list.)
//   am_walk_lists:        one thread per walker of [first, end), reading lists through handles
//                         (am::ptr) or raw device-heap pointers (several devices each walk a
//                         range; digests and paths stay indexed by walker).
//   am_walk_csr:          the same walks over one CSR (offsets + neighbours).
//   am_walk_free, am_walk_free_heap: give the lists back.
//   am_walk_update:       one batch of a graph that changes (graph_update.cuh): the lists of the
//                         touched vertices lose their deleted neighbours and gain the new ones,
//                         moving to a larger or smaller list (am::malloc, copy, am::free) or
//                         freed as they fill or empty.
//   am_walk_update_heap:  the same with CUDA's in-kernel malloc and free.
//   am_csr_rebuild:       the same batch applied to a CSR, rebuilt into a second one on the GPU
//                         (the deletions are made in the first, which the next rebuild
//                         overwrites).
//
// Walker w starts at vertex w % vertices; at step s it moves to neighbour
// walk_random(seed, w, s) % degree, and ends early at a vertex without neighbours (the rest of its
// path is kNoVertex). Each walker's path digest goes to `digests`; its whole path to `paths` when
// that is not null. The formulas are the twins of bench/src/walk.rs.
#include <alignmalloc/alignmalloc.cuh>
#include <graph_update.cuh>

namespace {

constexpr unsigned kNoVertex = 0xFFFFFFFFu;

__device__ __forceinline__ am::u64 mix(am::u64 x) {
  // splitmix64's finaliser (bench/src/patterns.rs).
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ am::u64 walk_random(am::u64 seed, am::u64 walker, unsigned step) {
  return mix(mix(seed ^ walker) + step);
}

__device__ __forceinline__ am::u64 digest_step(am::u64 digest, unsigned vertex) {
  return mix(digest ^ vertex);
}

__device__ __forceinline__ am::u64 global_thread() {
  return (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
}

// The walk of one walker; `degree(v)` and `neighbor(v, i)` read the graph.
template <typename Degree, typename Neighbor>
__device__ inline void walk(am::u64 w, unsigned vertices, unsigned length, am::u64 seed,
                            Degree degree, Neighbor neighbor, unsigned* paths,
                            am::u64* digests) {
  unsigned v = (unsigned)(w % vertices);
  am::u64 digest = digest_step(0, v);
  unsigned* path = paths ? paths + w * (am::u64)(length + 1) : nullptr;
  if (path) path[0] = v;
  unsigned s = 0;
  for (; s < length; ++s) {
    const am::u64 d = degree(v);
    if (d == 0) break;
    v = neighbor(v, walk_random(seed, w, s) % d);
    digest = digest_step(digest, v);
    if (path) path[s + 1] = v;
  }
  if (path) {
    for (unsigned rest = s; rest < length; ++rest) path[rest + 1] = kNoVertex;
  }
  digests[w] = digest;
}

}  // namespace

// Retries of an allocation answered OutOfMemory, 50 us apart (about a second while the arena
// grows).
constexpr unsigned kBuildRetries = 20000;

extern "C" __global__ void am_walk_build(am::DeviceMailbox mb, const am::u64* offsets,
                                         const unsigned* neighbors, const unsigned* order,
                                         unsigned vertices, unsigned contiguous, unsigned fill,
                                         am::u64* handles, unsigned* statuses) {
  const am::u64 t = global_thread();
  if (t >= vertices) return;
  const am::u64 v = order[t];
  const am::u64 first = offsets[v];
  const am::u64 degree = offsets[v + 1] - first;
  unsigned status = 0xFFFFFFFFu;
  const am::u64 bytes = degree * sizeof(unsigned);
  am::u64 h = 0;
  for (unsigned tries = 0;; ++tries) {
    h = contiguous ? am::malloc_contiguous(mb, bytes, &status) : am::malloc(mb, bytes, &status);
    if (status != am::kStatusOutOfMemory || tries == kBuildRetries) break;
    __nanosleep(50000);
  }
  handles[v] = h;
  statuses[v] = status;
  if (h == 0 || !fill) return;
  am::ptr<unsigned> list{h};
  for (am::u64 i = 0; i < degree; ++i) list[i] = neighbors[first + i];
}

extern "C" __global__ void am_walk_build_heap(const am::u64* offsets, const unsigned* neighbors,
                                              const unsigned* order, unsigned vertices,
                                              am::u64* pointers) {
  const am::u64 t = global_thread();
  if (t >= vertices) return;
  const am::u64 v = order[t];
  const am::u64 first = offsets[v];
  const am::u64 degree = offsets[v + 1] - first;
  unsigned* list = degree ? (unsigned*)malloc(degree * sizeof(unsigned)) : nullptr;
  pointers[v] = (am::u64)list;
  if (!list) return;  // the host counts null lists of non-empty vertices as failures
  for (am::u64 i = 0; i < degree; ++i) list[i] = neighbors[first + i];
}

extern "C" __global__ void am_walk_lists(const am::u64* lists, const unsigned* degrees,
                                         unsigned raw, unsigned vertices, am::u64 first,
                                         am::u64 end, unsigned length, am::u64 seed,
                                         unsigned* paths, am::u64* digests) {
  const am::u64 w = first + global_thread();
  if (w >= end) return;
  walk(
      w, vertices, length, seed, [&](unsigned v) { return (am::u64)degrees[v]; },
      [&](unsigned v, am::u64 i) {
        if (raw) return ((const unsigned*)lists[v])[i];
        am::ptr<unsigned> list{lists[v]};
        return (unsigned)list[i];
      },
      paths, digests);
}

extern "C" __global__ void am_walk_csr(const am::u64* offsets, const unsigned* neighbors,
                                       unsigned vertices, am::u64 first, am::u64 end,
                                       unsigned length, am::u64 seed, unsigned* paths,
                                       am::u64* digests) {
  const am::u64 w = first + global_thread();
  if (w >= end) return;
  walk(
      w, vertices, length, seed, [&](unsigned v) { return offsets[v + 1] - offsets[v]; },
      [&](unsigned v, am::u64 i) { return neighbors[offsets[v] + i]; }, paths, digests);
}

extern "C" __global__ void am_walk_free(am::DeviceMailbox mb, const am::u64* handles,
                                        const unsigned* order, unsigned vertices,
                                        unsigned* lane_statuses) {
  const am::u64 t = global_thread();
  if (t >= vertices) return;
  const am::u64 v = order[t];
  lane_statuses[v] = am::free(mb, handles[v]).lane_status;
}

extern "C" __global__ void am_walk_free_heap(const am::u64* pointers, unsigned vertices) {
  const am::u64 v = global_thread();
  if (v >= vertices) return;
  free((void*)pointers[v]);
}

// One batch of a changing graph (graph_update.cuh) on alignmalloc's lists: am::malloc_contiguous
// lists read and written through their plain pointers (any thread reads any list: a walker), or
// am::malloc lists through am::ptr (arranged for the warp that allocated them).
template <bool kContiguous>
struct AmLists {
  am::DeviceMailbox mb;
  // An OutOfMemory answer (the arena growing) is retried, as the build's.
  __device__ am::u64 allocate(am::u64 bytes, unsigned* status) {
    am::u64 list = 0;
    for (unsigned tries = 0;; ++tries) {
      *status = 0xFFFFFFFFu;
      list = kContiguous ? am::malloc_contiguous(mb, bytes, status) : am::malloc(mb, bytes, status);
      if (*status != am::kStatusOutOfMemory || tries == kBuildRetries) break;
      __nanosleep(50000);
    }
    return list;
  }
  __device__ unsigned release(am::u64 list) { return am::free(mb, list).lane_status; }
};

struct AmPlainLists : AmLists<true> {
  __device__ unsigned* view(am::u64 list) const { return am::ptr<unsigned>{list}.plain(); }
};

struct AmArrangedLists : AmLists<false> {
  __device__ am::ptr<unsigned> view(am::u64 list) const { return am::ptr<unsigned>{list}; }
};

struct HeapLists {
  __device__ am::u64 allocate(am::u64 bytes, unsigned* status) {
    *status = 0;
    return (am::u64)malloc(bytes);
  }
  __device__ unsigned release(am::u64 list) {
    free((void*)list);
    return 0;
  }
  __device__ unsigned* view(am::u64 list) const { return (unsigned*)list; }
};

// A batch as kernel arguments: touched, starts, adds, drop_starts, drops, seen, count.
#define AM_BATCH_PARAMS                                                                   \
  const unsigned *touched, const unsigned *starts, const unsigned *adds,                 \
      const unsigned *drop_starts, const unsigned *drops, unsigned *seen, unsigned count
#define AM_BATCH graph_update::Batch{touched, starts, adds, drop_starts, drops, seen, count}

extern "C" __global__ void am_walk_update(am::DeviceMailbox mb, AM_BATCH_PARAMS,
                                          unsigned growth_shift, unsigned contiguous,
                                          am::u64* handles, unsigned* degrees,
                                          unsigned* capacities, unsigned* statuses) {
  const graph_update::Batch batch = AM_BATCH;
  if (contiguous) {
    AmPlainLists lists{{mb}};
    graph_update::update_lists(lists, batch, growth_shift, handles, degrees, capacities,
                               statuses);
  } else {
    AmArrangedLists lists{{mb}};
    graph_update::update_lists(lists, batch, growth_shift, handles, degrees, capacities,
                               statuses);
  }
}

extern "C" __global__ void am_walk_update_heap(AM_BATCH_PARAMS, unsigned growth_shift,
                                               am::u64* pointers, unsigned* degrees,
                                               unsigned* capacities, unsigned* statuses) {
  HeapLists lists;
  const graph_update::Batch batch = AM_BATCH;
  graph_update::update_lists(lists, batch, growth_shift, pointers, degrees, capacities,
                             statuses);
}

// The CSR after one batch, rebuilt from the one before it: one warp per vertex.
extern "C" __global__ void am_csr_rebuild(AM_BATCH_PARAMS, const long long* shift,
                                          const am::u64* old_offsets,
                                          unsigned* old_neighbors, unsigned vertices,
                                          am::u64* offsets, unsigned* neighbors,
                                          unsigned* statuses) {
  graph_update::rebuild_csr_vertex(AM_BATCH, shift, old_offsets, old_neighbors, vertices, offsets,
                                   neighbors, statuses);
}
