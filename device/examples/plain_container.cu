// alignmalloc behind code that expects plain pointers: a class whose operator new and delete
// use am::malloc_plain and am::free, and a small growable device vector. Also: 12-byte elements
// (float3) in warp-arranged memory through am::ptr load/store, where elements straddle tile
// edges, and the statuses that frees of bad pointers get.
//
//   nvcc -arch=sm_90 plain_container.cu $(pkg-config --cflags --libs alignmalloc) -o plain_container
#include <alignmalloc/alignmalloc.cuh>

#include "check.h"

// A list node allocated with `new` from device code, in alignmalloc's memory.
struct Node {
  Node* next;
  unsigned value;
  // noexcept: a null result makes `new` return null instead of being undefined.
  __device__ static void* operator new(size_t bytes) noexcept { return am::malloc_plain(bytes); }
  __device__ static void operator delete(void* p) { am::free(p); }
};

// A growable array on plain pointers, as device code that knows nothing of handles writes it.
template <class T>
struct DeviceVector {
  T* data = nullptr;
  unsigned size = 0, capacity = 0;

  __device__ bool push_back(const T& value) {
    if (size == capacity) {
      const unsigned grown = capacity ? 2 * capacity : 8;
      T* bigger = static_cast<T*>(am::malloc_plain(grown * (unsigned long long)sizeof(T)));
      if (bigger == nullptr) return false;
      for (unsigned i = 0; i < size; ++i) bigger[i] = data[i];
      if (data != nullptr && am::free(data).lane_status != am::kLaneOk) return false;
      data = bigger;
      capacity = grown;
    }
    data[size++] = value;
    return true;
  }

  __device__ bool release() { return am::free(data).lane_status == am::kLaneOk; }
};

struct Tally {
  unsigned long long wrong;           // values read back wrong, or allocations that failed
  unsigned long long lane_status[4];  // outcomes of the deliberate bad frees, by LaneStatus
};

__device__ inline float3 point_of(unsigned t, unsigned i) {
  return make_float3((float)t, (float)i, (float)(t ^ i));
}

__global__ void containers(unsigned threads, unsigned nodes, unsigned points, Tally* tally,
                           const int* foreign) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  unsigned long long wrong = 0;

  // A linked list built with new, summed, and deleted.
  Node* head = nullptr;
  for (unsigned i = 0; i < nodes; ++i) {
    Node* n = new Node{head, t + i};
    if (n == nullptr) {
      ++wrong;
      break;
    }
    head = n;
  }
  unsigned long long sum = 0, expected = 0;
  for (unsigned i = 0; i < nodes; ++i) expected += t + i;
  while (head != nullptr) {
    Node* next = head->next;
    sum += head->value;
    delete head;
    head = next;
  }
  wrong += sum != expected;

  // A vector of float3 that grows by copying.
  DeviceVector<float3> v;
  for (unsigned i = 0; i < points; ++i) wrong += !v.push_back(point_of(t, i));
  for (unsigned i = 0; i < v.size; ++i) {
    const float3 p = point_of(t, i);
    wrong += v.data[i].x != p.x || v.data[i].y != p.y || v.data[i].z != p.z;
  }
  wrong += !v.release();

  // The same float3 values in a warp-arranged object of 96 KB: two 64 KiB tiles, so element
  // 5461 straddles a tile edge; load/store copy it piecewise.
  const unsigned count = 8000;
  am::ptr<float3> arranged{am::malloc(count * (unsigned long long)sizeof(float3))};
  if (arranged.is_null()) {
    ++wrong;
  } else {
    for (unsigned i = 0; i < count; ++i) arranged.store(i, point_of(t, i));
    const am::ptr<const float3> view = arranged;
    for (unsigned i = 0; i < count; ++i) {
      const float3 p = view.load(i), q = point_of(t, i);
      wrong += p.x != q.x || p.y != q.y || p.z != q.z;
    }
    wrong += am::free(arranged.handle).lane_status != am::kLaneOk;
  }

  // Bad frees, one kind per thread in the first warps: each gets its status, none harms.
  if (t < 96) {
    void* p = am::malloc_plain(64);
    am::FreeResult r;
    switch (t / 32) {
      case 0:  // a second free of the same pointer
        am::free(p);
        r = am::free(p);
        break;
      case 1:  // a pointer into the middle of an object
        r = am::free(static_cast<char*>(p) + 16);
        am::free(p);
        break;
      default:  // memory alignmalloc never handed out
        r = am::free(foreign);
        am::free(p);
        break;
    }
    atomicAdd(&tally->lane_status[r.lane_status & 3], 1ull);
  }
  if (wrong) atomicAdd(&tally->wrong, wrong);
}

int main() {
  const unsigned threads = 2048, block = 128, nodes = 50, points = 300;
  Tally* tally;
  int* foreign;
  CHECK_CUDA(cudaMallocManaged(&tally, sizeof(Tally)));
  CHECK_CUDA(cudaMalloc(&foreign, 4096));
  *tally = Tally{};

  am_runtime* rt = create_gpu_runtime(1ull << 30);
  CHECK_AM(am::bind(rt));
  containers<<<threads / block, block>>>(threads, nodes, points, tally, foreign);
  CHECK_LAUNCH();
  EXPECT(tally->wrong == 0, "%llu values or allocations were wrong", tally->wrong);
  std::printf("%u threads: %u nodes by new/delete, %u float3 in a growing vector, 8000 float3 "
              "through am::ptr load/store; all values right\n",
              threads, nodes, points);
  std::printf("bad frees: double %llu, interior %llu, invalid %llu, ok %llu\n",
              tally->lane_status[am::kLaneDoubleFree],
              tally->lane_status[am::kLaneInteriorPointer],
              tally->lane_status[am::kLaneInvalidHandle], tally->lane_status[am::kLaneOk]);
  EXPECT(tally->lane_status[am::kLaneDoubleFree] == 32, "32 double frees");
  EXPECT(tally->lane_status[am::kLaneInteriorPointer] == 32, "32 interior pointers");
  EXPECT(tally->lane_status[am::kLaneInvalidHandle] == 32, "32 invalid pointers");
  expect_clean(rt);

  am_counters counters;
  CHECK_AM(am_counters_get(rt, &counters));
  std::printf("counters: %llu objects freed, %llu refused frees\n",
              (unsigned long long)counters.lanes_freed,
              (unsigned long long)(counters.by_lane_status[1] + counters.by_lane_status[2] +
                                   counters.by_lane_status[3]));
  EXPECT(counters.by_lane_status[2] == 32 && counters.by_lane_status[3] == 32 &&
             counters.by_lane_status[1] == 32,
         "the host counted the same refusals");
  CHECK_AM(am_runtime_destroy(rt));
  CHECK_CUDA(cudaFree(tally));
  CHECK_CUDA(cudaFree(foreign));
  std::printf("plain_container: OK\n");
  return 0;
}
