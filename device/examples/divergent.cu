// Allocation from divergent code: some lanes of a warp allocate and free on their own branch
// while the rest of the warp allocates, frees an interior pointer and frees its objects. Every
// launch is checked through the allocator's counters (every object freed exactly once, every
// bad free refused with its status) and nothing may stay allocated.
//
//   nvcc -arch=sm_90 divergent.cu $(pkg-config --cflags --libs alignmalloc) -o divergent
#include <alignmalloc/alignmalloc.cuh>

#include "check.h"

// The lanes below `alone` take the branch (lane 0, or lanes 0 and 1), as pointers or handles.
template <bool kPointers>
__global__ void divergent_calls(unsigned alone, unsigned long long* null_objects) {
  const unsigned lane = threadIdx.x % 32;
  if (lane < alone) {
    if (kPointers) {
      void* p = am::malloc_plain(256);
      am::free(p);
      am::free(p);  // refused: a double free
    } else {
      const am::u64 p = am::malloc_contiguous(256);
      am::free(p);
      am::free(p);
    }
  }
  // Every lane, in as many groups as the warp happens to reach this in.
  if (kPointers) {
    char* q = static_cast<char*>(am::malloc_plain(4096));
    if (q == nullptr) atomicAdd(null_objects, 1ull);
    am::free(q == nullptr ? nullptr : q + 16);  // refused: an interior pointer
    am::free(q);
  } else {
    const am::u64 q = am::malloc_contiguous(4096);
    if (q == 0) atomicAdd(null_objects, 1ull);
    am::free(q == 0 ? 0 : q + 16);
    am::free(q);
  }
}

int main() {
  const unsigned warps = 4, launches = 300;
  unsigned long long* null_objects;
  CHECK_CUDA(cudaMallocManaged(&null_objects, sizeof(*null_objects)));
  am_runtime* rt = create_gpu_runtime(1ull << 30);
  CHECK_AM(am::bind(rt));
  struct Case {
    const char* name;
    bool pointers;
    unsigned alone;
  } cases[] = {{"lane 0 alone, pointers", true, 1},
               {"lane 0 alone, handles", false, 1},
               {"lanes 0-1 apart, pointers", true, 2}};
  for (const Case& c : cases) {
    unsigned long long wrong_launches = 0;
    am_counters before, after;
    CHECK_AM(am_counters_get(rt, &before));
    for (unsigned launch = 0; launch < launches; ++launch) {
      *null_objects = 0;
      if (c.pointers) {
        divergent_calls<true><<<1, warps * 32>>>(c.alone, null_objects);
      } else {
        divergent_calls<false><<<1, warps * 32>>>(c.alone, null_objects);
      }
      CHECK_LAUNCH();
      CHECK_AM(am_counters_get(rt, &after));
      // Per warp: `alone` small objects and 32 others freed; `alone` double frees; 32 interior.
      const unsigned long long freed = after.lanes_freed - before.lanes_freed;
      const unsigned long long doubles = after.by_lane_status[2] - before.by_lane_status[2];
      const unsigned long long interior = after.by_lane_status[3] - before.by_lane_status[3];
      const unsigned long long invalid = after.by_lane_status[1] - before.by_lane_status[1];
      const bool right = *null_objects == 0 && freed == warps * (c.alone + 32) &&
                         doubles == warps * c.alone && interior == warps * 32 && invalid == 0;
      if (!right && wrong_launches++ == 0) {
        std::fprintf(stderr,
                     "%s, launch %u: null %llu, freed %llu, double %llu, interior %llu, invalid "
                     "%llu\n",
                     c.name, launch, *null_objects, freed, doubles, interior, invalid);
      }
      before = after;
    }
    std::printf("%s: %u launches x %u warps, launches with a lost or wrong free: %llu\n", c.name,
                launches, warps, wrong_launches);
    EXPECT(wrong_launches == 0, "every free of every launch as expected");
    expect_clean(rt);
  }
  CHECK_AM(am_runtime_destroy(rt));
  CHECK_CUDA(cudaFree(null_objects));
  std::printf("divergent: OK\n");
  return 0;
}
