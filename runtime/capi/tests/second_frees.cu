// Second frees on the GPU, by handle and by pointer, with the device caches on. Each round one
// kernel allocates an object per thread (16 B to 64 KiB: the caches' classes, and host objects
// past 32 KiB), then another frees every object and frees it again right away, by handle or by
// pointer as the thread's number says. No object is allocated while the second frees run, so no
// freed address can hold a new object yet: every first free must answer kLaneOk and every second
// free kLaneDoubleFree, whether the object's slab is still current, just went back, or its blocks
// already returned to the host. Counts by answer are printed; nothing is left at the end.
//
//   nvcc -arch=sm_90 -std=c++17 second_frees.cu $(pkg-config --cflags --libs alignmalloc) -o second_frees
//   second_frees [THREADS] [ROUNDS]
#include <alignmalloc/alignmalloc.cuh>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../../device/examples/check.h"

__device__ am::u64 mix(am::u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Thread t's object this round: 1 B .. 64 KiB, log-uniform.
__device__ am::u64 size_of(unsigned t, unsigned round) {
  const am::u64 r = mix((am::u64)t << 20 ^ round);
  const unsigned log2 = (unsigned)(r % 17u);
  return 1 + (r >> 8) % (1ull << log2);
}

__global__ void alloc(am::u64* handles, unsigned threads, unsigned round,
                      unsigned long long* failures) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  unsigned status = 0;
  handles[t] = am::malloc(size_of(t, round), &status);
  if (status != am::kStatusOk || handles[t] == 0) atomicAdd(failures, 1ull);
}

// answers[0..5): first frees by lane status; [5..10): second frees by handle; [10..15): by
// pointer (statuses past 4 count as 4).
__global__ void free_twice(const am::u64* handles, unsigned threads, unsigned round,
                           unsigned long long* answers) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads || handles[t] == 0) return;
  const am::u64 h = handles[t];
  const bool by_pointer = (t + round) % 2 == 1;
  const void* pointer = reinterpret_cast<const void*>(am::handle_address(h));
  // A pointer free needs the object's first byte: plain handles only (arranged ones are tiled).
  const bool plain = am::handle_kind(h) == am::kHandlePlain;
  const unsigned first = (by_pointer && plain ? am::free(pointer) : am::free(h)).lane_status;
  atomicAdd(&answers[first < 5 ? first : 4], 1ull);
  const unsigned second = (by_pointer && plain ? am::free(pointer) : am::free(h)).lane_status;
  atomicAdd(&answers[(by_pointer && plain ? 10 : 5) + (second < 5 ? second : 4)], 1ull);
}

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? std::atoi(argv[1]) : 65536;
  const unsigned rounds = argc > 2 ? std::atoi(argv[2]) : 16;
  const unsigned block = 256, blocks = (threads + block - 1) / block;
  am::u64* handles;
  unsigned long long *answers, *failures;
  CHECK_CUDA(cudaMalloc(&handles, threads * sizeof(*handles)));
  CHECK_CUDA(cudaMallocManaged(&answers, 15 * sizeof(*answers)));
  CHECK_CUDA(cudaMallocManaged(&failures, sizeof(*failures)));
  std::memset(answers, 0, 15 * sizeof(*answers));
  *failures = 0;
  am_runtime* rt = create_gpu_runtime(8ull << 30);
  CHECK_AM(am::bind(rt));
  for (unsigned round = 0; round < rounds; ++round) {
    alloc<<<blocks, block>>>(handles, threads, round, failures);
    CHECK_LAUNCH();
    free_twice<<<blocks, block>>>(handles, threads, round, answers);
    CHECK_LAUNCH();
  }
  const char* names[5] = {"Ok", "InvalidHandle", "DoubleFree", "InteriorPointer", "other"};
  const char* rows[3] = {"first frees", "second frees by handle", "second frees by pointer"};
  for (unsigned row = 0; row < 3; ++row) {
    std::printf("%-24s", rows[row]);
    for (unsigned s = 0; s < 5; ++s) std::printf(" %s %llu", names[s], answers[row * 5 + s]);
    std::printf("\n");
  }
  EXPECT(*failures == 0, "%llu allocations failed", *failures);
  const unsigned long long objects = (unsigned long long)threads * rounds;
  EXPECT(answers[0] == objects, "every first free answered Ok");
  EXPECT(answers[7] + answers[12] == objects, "every second free answered DoubleFree");
  EXPECT(answers[12] > 0 && answers[7] > 0, "second frees by pointer and by handle both ran");
  expect_clean(rt);
  std::printf("second_frees: OK\n");
  CHECK_AM(am_runtime_destroy(rt));
  CHECK_CUDA(cudaFree(handles));
  CHECK_CUDA(cudaFree(answers));
  CHECK_CUDA(cudaFree(failures));
  return 0;
}
