// Many small managed allocations in a loop, filled on the host, summed by a kernel.
#include "common.h"
#include <vector>

__global__ void sum(int **objects, const int *counts, int n, unsigned long long *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long s = 0;
  for (int k = 0; k < counts[i]; k++) s += objects[i][k];
  atomicAdd(out, s);
}

int main() {
  const int n = 50000;
  int **objects;
  int *counts;
  unsigned long long *out;
  CHECK(cudaMallocManaged(&objects, n * sizeof(int *)));
  CHECK(cudaMallocManaged(&counts, n * sizeof(int)));
  CHECK(cudaMallocManaged(&out, sizeof *out));
  *out = 0;
  double t0 = now_ms();
  for (int i = 0; i < n; i++) {
    counts[i] = 4 + (i * 7919) % 252;  // 16 B to 1 KiB
    CHECK(cudaMallocManaged(&objects[i], counts[i] * sizeof(int)));
  }
  double alloc_ms = now_ms() - t0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < counts[i]; k++) objects[i][k] = i ^ k;
  float k = kernel_ms([&] { sum<<<(n + 255) / 256, 256>>>(objects, counts, n, out); });
  CHECK(cudaDeviceSynchronize());
  std::printf("sum %llu\n", *out);
  t0 = now_ms();
  for (int i = 0; i < n; i++) CHECK(cudaFree(objects[i]));
  double free_ms = now_ms() - t0;
  std::printf("time alloc_ms %.3f free_ms %.3f kernel_ms %.3f\n", alloc_ms, free_ms, k);
  return 0;
}
