// Allocations that together exceed the arena it is run with (--max-arena-bytes 512M).
#include "common.h"

__global__ void fill(unsigned char *a, size_t n, unsigned char v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) a[i] = v + (unsigned char)(i % 13);
}

int main() {
  const size_t bytes = (size_t)256 << 20;
  unsigned char *a[4];
  float k = 0;
  for (int i = 0; i < 4; i++) {
    CHECK(cudaMallocManaged(&a[i], bytes));
    k += kernel_ms([&] { fill<<<1024, 256>>>(a[i], bytes, (unsigned char)i); });
  }
  unsigned long long s = 0;
  for (int i = 0; i < 4; i++)
    for (size_t j = 0; j < bytes; j += 4093) s += a[i][j];
  std::printf("sample sum %llu\n", s);
  for (int i = 0; i < 4; i++) CHECK(cudaFree(a[i]));
  std::printf("time kernel_ms %.3f\n", k);
  return 0;
}
