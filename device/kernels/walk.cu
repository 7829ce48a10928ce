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
//   am_walk_insert:       one batch of edges of a graph that changes: thread t appends the new
//                         neighbours of vertex touched[t] to its list, first moving the list to a
//                         larger one (am::malloc, copy, am::free) when it is full.
//   am_walk_insert_heap:  the same with CUDA's in-kernel malloc and free.
//
// Walker w starts at vertex w % vertices; at step s it moves to neighbour
// walk_random(seed, w, s) % degree, and ends early at a vertex without neighbours (the rest of its
// path is kNoVertex). Each walker's path digest goes to `digests`; its whole path to `paths` when
// that is not null. The formulas are the twins of bench/src/walk.rs.
#include <alignmalloc/alignmalloc.cuh>

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

// The capacity (in neighbours) of a list that must hold `needed` and holds `capacity`: doubled,
// at least `needed`, at least 4 (the twin of `grown_capacity` in bench/src/walk/dynamic.rs).
__device__ __forceinline__ unsigned grown_capacity(unsigned capacity, unsigned needed) {
  unsigned grown = capacity * 2 > needed ? capacity * 2 : needed;
  return grown > 4 ? grown : 4;
}

// statuses[t]: 0 = done; else the allocation's status (am::kStatus*), or 0x100 + the lane status
// of freeing the old list.
extern "C" __global__ void am_walk_insert(am::DeviceMailbox mb, const unsigned* touched,
                                          const unsigned* starts, const unsigned* adds,
                                          unsigned count, unsigned contiguous, am::u64* handles,
                                          unsigned* degrees, unsigned* capacities,
                                          unsigned* statuses) {
  const am::u64 t = global_thread();
  if (t >= count) return;
  const unsigned v = touched[t];
  const unsigned first = starts[t], added = starts[t + 1] - first;
  const unsigned degree = degrees[v];
  am::u64 h = handles[v];
  unsigned result = 0;
  if (degree + added > capacities[v]) {
    const unsigned capacity = grown_capacity(capacities[v], degree + added);
    const am::u64 bytes = (am::u64)capacity * sizeof(unsigned);
    unsigned status = 0xFFFFFFFFu;
    am::u64 grown = 0;
    for (unsigned tries = 0;; ++tries) {
      grown = contiguous ? am::malloc_contiguous(mb, bytes, &status) : am::malloc(mb, bytes, &status);
      if (status != am::kStatusOutOfMemory || tries == kBuildRetries) break;
      __nanosleep(50000);
    }
    if (grown == 0) {
      statuses[t] = status == 0 ? 0xFFu : status;
      return;
    }
    if (h != 0) {
      am::ptr<unsigned> from{h}, to{grown};
      for (unsigned i = 0; i < degree; ++i) to[i] = from[i];
      const unsigned freed = am::free(mb, h).lane_status;
      if (freed != 0) result = 0x100 + freed;
    }
    h = grown;
    handles[v] = h;
    capacities[v] = capacity;
  }
  am::ptr<unsigned> list{h};
  for (unsigned i = 0; i < added; ++i) list[degree + i] = adds[first + i];
  degrees[v] = degree + added;
  statuses[t] = result;
}

extern "C" __global__ void am_walk_insert_heap(const unsigned* touched, const unsigned* starts,
                                               const unsigned* adds, unsigned count,
                                               am::u64* pointers, unsigned* degrees,
                                               unsigned* capacities, unsigned* statuses) {
  const am::u64 t = global_thread();
  if (t >= count) return;
  const unsigned v = touched[t];
  const unsigned first = starts[t], added = starts[t + 1] - first;
  const unsigned degree = degrees[v];
  unsigned* list = (unsigned*)pointers[v];
  if (degree + added > capacities[v]) {
    const unsigned capacity = grown_capacity(capacities[v], degree + added);
    unsigned* grown = (unsigned*)malloc((am::u64)capacity * sizeof(unsigned));
    if (!grown) {
      statuses[t] = 0xFFu;
      return;
    }
    for (unsigned i = 0; i < degree; ++i) grown[i] = list[i];
    free(list);
    list = grown;
    pointers[v] = (am::u64)list;
    capacities[v] = capacity;
  }
  for (unsigned i = 0; i < added; ++i) list[degree + i] = adds[first + i];
  degrees[v] = degree + added;
  statuses[t] = 0;
}
