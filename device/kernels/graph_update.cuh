// One batch of a changing graph applied to per-vertex neighbour lists, the same way by every
// system of `alignmalloc walk` that keeps lists (alignmalloc, CUDA's device malloc, Gallatin
// through bench/gallatin/harness.cu) and by the CSR rebuilt on the GPU: they differ only in where
// a list lives. The twin of `HostLists::apply` in bench/src/walk/dynamic/plan.rs, which the walks
// are checked against:
//
// - a touched vertex first loses its deleted neighbours (a neighbour deleted c times: its last
//   c occurrences; what stays keeps its order); then its new neighbours are appended;
// - a list's capacity (neighbours) follows resized_capacity: grown when it overflows (doubled,
//   or by a half or a quarter: the growth shift), cut to twice its length when it falls to a
//   quarter, freed when it empties.
//
// A warp works on its lanes' vertices one at a time, all 32 lanes searching, copying and
// appending together (one thread per list left a hub's whole list to one lane), while
// allocations and frees stay per lane, so a warp's lanes that resize ask together. Launch with
// whole warps (block sizes a multiple of 32): every lane of a warp takes part, those past the
// batch's end with no vertex. No alignmalloc header: the Gallatin harness compiles it with nvcc.
#ifndef ALIGNMALLOC_GRAPH_UPDATE_CUH
#define ALIGNMALLOC_GRAPH_UPDATE_CUH

namespace graph_update {

typedef unsigned long long u64;

constexpr unsigned kFullWarp = 0xFFFFFFFFu;

// Statuses of a touched vertex: 0 done; an allocation's status (kAllocFailed when the allocator
// gives none); kFreeFailed + the free's status; kMissingEdge when a deleted neighbour was not in
// the list (the host only sends deletions of edges the graph holds).
constexpr unsigned kAllocFailed = 0xFFu;
constexpr unsigned kFreeFailed = 0x100u;
constexpr unsigned kMissingEdge = 0x200u;

// The capacity (in neighbours) of a list of `capacity` that must hold `needed`, growing by
// capacity >> growth_shift (0 doubles) when it overflows (the twin of `resized_capacity` in
// bench/src/walk/dynamic/plan.rs).
__device__ __forceinline__ unsigned resized_capacity(unsigned capacity, unsigned needed,
                                                     unsigned growth_shift) {
  if (needed == 0) return 0;
  if (needed > capacity) {
    const unsigned by = capacity >> growth_shift;
    const unsigned grown = capacity > 0xFFFFFFFFu - by ? 0xFFFFFFFFu : capacity + by;
    const unsigned enough = grown > needed ? grown : needed;
    return enough > 4u ? enough : 4u;
  }
  if (capacity > 4u && needed <= capacity / 4u) return needed * 2u > 4u ? needed * 2u : 4u;
  return capacity;
}

// One batch, grouped by source: touched[t] (ascending) gains adds[starts[t] .. starts[t + 1])
// and loses drops[drop_starts[t] .. drop_starts[t + 1]] (ascending within a source); seen: one
// zeroed word per drop, drop_neighbors' count of occurrences met.
struct Batch {
  const unsigned* touched;
  const unsigned* starts;
  const unsigned* adds;
  const unsigned* drop_starts;
  const unsigned* drops;
  unsigned* seen;
  unsigned count;
};

__device__ __forceinline__ unsigned lane_index() { return threadIdx.x & 31u; }

// A neighbour that is no vertex: marks a removed place while a list is being compacted.
constexpr unsigned kNoNeighbor = 0xFFFFFFFFu;

// The whole warp: remove `n` neighbours from `list` of `degree`: for each value x that
// `drops` (ascending) holds c times, the last c occurrences of x; what stays keeps its order.
// `seen` (n words, zero) counts, at the first drop of each value, the occurrences of it met so
// far. Two passes over the list whatever n is: from the end, marking what goes (a lane looks
// its neighbour up among the drops; lanes of one value rank themselves with a match); then from
// the start, compacting. The new degree; *missing when some drop found no occurrence.
template <class List>
__device__ unsigned drop_neighbors(List list, unsigned degree, const unsigned* drops, unsigned n,
                                   unsigned* seen, bool* missing) {
  const unsigned lane = lane_index();
  const unsigned below = (1u << lane) - 1u;
  unsigned removed = 0;
  for (long long top = (long long)degree - 1; top >= 0; top -= 32) {
    const long long i = top - lane;  // lane 0 holds the highest index
    const unsigned x = i >= 0 ? (unsigned)list[i] : kNoNeighbor;
    unsigned low = 0, high = n;
    while (low < high) {
      const unsigned mid = (low + high) / 2;
      if (drops[mid] < x) low = mid + 1; else high = mid;
    }
    unsigned copies = 0;
    while (low + copies < n && drops[low + copies] == x) ++copies;
    const bool dropped = i >= 0 && copies > 0;
    const unsigned same = __match_any_sync(kFullWarp, dropped ? x : kNoNeighbor);
    const unsigned met = dropped ? seen[low] : 0;
    __syncwarp();
    const bool goes = dropped && met + __popc(same & below) < copies;
    if (dropped && (same & below) == 0) seen[low] = met + __popc(same);
    if (goes) list[i] = kNoNeighbor;
    removed += __popc(__ballot_sync(kFullWarp, goes));
    __syncwarp();
  }
  if (removed < n) *missing = true;
  if (removed == 0) return degree;
  unsigned kept = 0;
  for (unsigned base = 0; base < degree; base += 32) {
    const unsigned i = base + lane;
    const unsigned x = i < degree ? (unsigned)list[i] : kNoNeighbor;
    const unsigned keeps = __ballot_sync(kFullWarp, x != kNoNeighbor);
    __syncwarp();
    if (x != kNoNeighbor) list[kept + __popc(keeps & below)] = x;
    kept += __popc(keeps);
    __syncwarp();
  }
  return kept;
}

// The whole warp: `to[i] = from[i]` for i < n.
template <class From, class To>
__device__ void copy_neighbors(From from, To to, unsigned n) {
  for (unsigned i = lane_index(); i < n; i += 32) to[i] = from[i];
  __syncwarp();
}

// The whole warp: `list[at + i] = adds[i]` for i < n.
template <class List>
__device__ void append_neighbors(List list, unsigned at, const unsigned* adds, unsigned n) {
  for (unsigned i = lane_index(); i < n; i += 32) list[at + i] = adds[i];
  __syncwarp();
}

// Apply the batch to lists kept by `Allocator`, which gives
//   u64 allocate(u64 bytes, unsigned* status)   a list of `bytes`, 0 when it cannot (*status why)
//   unsigned release(u64 list)                  free it: 0, or the allocator's status
//   View view(u64 list)                         something indexable as list[i]
// Lane l of the grid's warp w (of W) takes touched[l * W + w]: the touched vertices are
// ascending, and a graph's hubs often have neighbouring ids (R-MAT's lowest), so a warp whose
// lanes took 32 consecutive ones would work through 32 hubs one after the other. Lists,
// degrees and capacities are per vertex, statuses per touched vertex; growth_shift as
// resized_capacity's.
template <class Allocator>
__device__ void update_lists(Allocator& allocator, const Batch& b, unsigned growth_shift,
                             u64* lists, unsigned* degrees, unsigned* capacities,
                             unsigned* statuses) {
  const unsigned lane = lane_index();
  const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const u64 warps = ((u64)gridDim.x * blockDim.x) / 32;
  // The touched index of this warp's lane `j`.
  const auto index = [&](unsigned j) { return (u64)j * warps + warp; };
  const u64 t = index(lane);
  const bool mine = t < b.count;
  const unsigned v = mine ? b.touched[t] : 0;
  u64 list = mine ? lists[v] : 0;
  unsigned degree = mine ? degrees[v] : 0;
  const unsigned capacity = mine ? capacities[v] : 0;
  unsigned status = 0;
  bool missing = false;
  const unsigned have = __ballot_sync(kFullWarp, mine);

  for (unsigned m = have; m != 0; m &= m - 1) {
    const unsigned j = __ffs(m) - 1;
    const unsigned first = b.drop_starts[index(j)];
    const unsigned n = b.drop_starts[index(j) + 1] - first;
    const u64 their_list = __shfl_sync(kFullWarp, list, j);
    const unsigned their_degree = __shfl_sync(kFullWarp, degree, j);
    if (n == 0) continue;
    bool lost = false;
    const unsigned left =
        drop_neighbors(allocator.view(their_list), their_degree, b.drops + first, n,
                       b.seen + first, &lost);
    if (lane == j) {
      degree = left;
      missing = lost;
    }
  }

  const unsigned added = mine ? b.starts[t + 1] - b.starts[t] : 0;
  const unsigned needed = degree + added;
  const unsigned wanted = mine ? resized_capacity(capacity, needed, growth_shift) : 0;
  const bool moving = mine && wanted != capacity;
  u64 moved = 0;
  bool alloc_failed = false;
  if (moving && wanted > 0) {
    unsigned why = 0;
    moved = allocator.allocate((u64)wanted * sizeof(unsigned), &why);
    alloc_failed = moved == 0;
    if (alloc_failed) status = why != 0 ? why : kAllocFailed;
  }
  __syncwarp();
  // A list that failed to move keeps its place and capacity (its drops applied) and gains
  // nothing; the host stops at its status.
  const bool resized = moving && !alloc_failed;

  const unsigned copying = __ballot_sync(kFullWarp, resized && moved != 0 && degree > 0);
  for (unsigned m = copying; m != 0; m &= m - 1) {
    const unsigned j = __ffs(m) - 1;
    const u64 from = __shfl_sync(kFullWarp, list, j);
    const u64 to = __shfl_sync(kFullWarp, moved, j);
    const unsigned n = __shfl_sync(kFullWarp, degree, j);
    copy_neighbors(allocator.view(from), allocator.view(to), n);
  }

  if (resized && list != 0) {
    const unsigned freed = allocator.release(list);
    if (freed != 0) status = kFreeFailed + freed;
  }
  __syncwarp();
  if (resized) list = moved;

  const unsigned appending = __ballot_sync(kFullWarp, mine && !alloc_failed && added > 0);
  for (unsigned m = appending; m != 0; m &= m - 1) {
    const unsigned j = __ffs(m) - 1;
    const u64 to = __shfl_sync(kFullWarp, list, j);
    const unsigned at = __shfl_sync(kFullWarp, degree, j);
    const unsigned first = b.starts[index(j)];
    const unsigned n = b.starts[index(j) + 1] - first;
    append_neighbors(allocator.view(to), at, b.adds + first, n);
  }

  if (!mine) return;
  lists[v] = list;
  degrees[v] = alloc_failed ? degree : needed;
  capacities[v] = resized ? wanted : capacity;
  statuses[t] = status != 0 ? status : (missing ? kMissingEdge : 0u);
}

// The CSR after the batch, one warp per vertex (warp w of the grid takes vertex w): vertex v's
// neighbours move from old_offsets[v] to old_offsets[v] + shift[k], k the touched vertices
// below v (shift: count + 1 prefix sums of each touched vertex's adds minus drops). A touched
// vertex's deletions are made in the old CSR first (each warp reads only its own vertex's part
// of it, and the old CSR is the next rebuild's target), as update_lists makes them in a list;
// then what is left moves and the adds follow it: a list changed in its new place would spill
// past its end, where the next vertex's warp writes, whenever it loses more than it gains.
// statuses[k] of a touched vertex as update_lists'.
__device__ inline void rebuild_csr_vertex(const Batch& b, const long long* shift,
                                          const u64* old_offsets, unsigned* old_neighbors,
                                          unsigned vertices, u64* offsets, unsigned* neighbors,
                                          unsigned* statuses) {
  const u64 v = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (v >= vertices) return;  // whole warps leave together
  const unsigned lane = lane_index();
  // k = the touched vertices below v (binary search by one lane).
  unsigned k = 0;
  if (lane == 0) {
    unsigned low = 0, high = b.count;
    while (low < high) {
      const unsigned mid = (low + high) / 2;
      if (b.touched[mid] < v) low = mid + 1; else high = mid;
    }
    k = low;
  }
  k = __shfl_sync(kFullWarp, k, 0);
  const u64 from = old_offsets[v];
  unsigned degree = (unsigned)(old_offsets[v + 1] - from);
  const u64 at = (u64)((long long)from + shift[k]);
  if (lane == 0) {
    offsets[v] = at;
    if (v + 1 == vertices) offsets[vertices] = (u64)((long long)old_offsets[vertices] + shift[b.count]);
  }
  const bool touched = k < b.count && b.touched[k] == v;
  bool missing = false;
  if (touched) {
    const unsigned first = b.drop_starts[k], n = b.drop_starts[k + 1] - first;
    degree = drop_neighbors(old_neighbors + from, degree, b.drops + first, n, b.seen + first,
                            &missing);
  }
  copy_neighbors(old_neighbors + from, neighbors + at, degree);
  if (!touched) return;
  const unsigned added_from = b.starts[k], added = b.starts[k + 1] - added_from;
  append_neighbors(neighbors + at, degree, b.adds + added_from, added);
  if (lane == 0) statuses[k] = missing ? kMissingEdge : 0u;
}

}  // namespace graph_update

#endif  // ALIGNMALLOC_GRAPH_UPDATE_CUH
