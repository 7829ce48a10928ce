// One large array written by the host, then read by kernels.
#include "common.h"

__global__ void sum(const unsigned *a, size_t n, unsigned long long *out) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += a[i];
  atomicAdd(out, s);
}

int main() {
  const size_t n = (size_t)1 << 28;  // 1 GiB
  unsigned *a;
  unsigned long long *out;
  CHECK(cudaMallocManaged(&a, n * sizeof *a));
  CHECK(cudaMallocManaged(&out, sizeof *out));
  for (size_t i = 0; i < n; i++) a[i] = (unsigned)(i * 2654435761u);
  float total = 0;
  for (int r = 0; r < 3; r++) {
    *out = 0;
    total += kernel_ms([&] { sum<<<1024, 256>>>(a, n, out); });
    std::printf("round %d sum %llu\n", r, *out);
  }
  std::printf("time kernel_ms %.3f\n", total);
  CHECK(cudaFree(a));
  CHECK(cudaFree(out));
  return 0;
}
