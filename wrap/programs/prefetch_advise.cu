// Prefetch and advice calls on managed memory, and the attributes that report them.
#include "common.h"

__global__ void scale(float *a, const float *lut, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = a[i] * 0.5f + lut[i & 4095];
}

int main() {
  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaMemLocation gpu{cudaMemLocationTypeDevice, device}, cpu{cudaMemLocationTypeHost, 0};
  const size_t n = (size_t)64 << 20;  // 256 MiB
  float *a, *lut;
  CHECK(cudaMallocManaged(&a, n * sizeof *a));
  CHECK(cudaMallocManaged(&lut, 4096 * sizeof *lut));
  for (size_t i = 0; i < n; i++) a[i] = (float)(i & 1023);
  for (int i = 0; i < 4096; i++) lut[i] = (float)i;
  CHECK(cudaMemAdvise(lut, 4096 * sizeof *lut, cudaMemAdviseSetReadMostly, gpu));
  int read_mostly = 0;
  CHECK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly, cudaMemRangeAttributeReadMostly, lut, 4096 * sizeof *lut));
  std::printf("read mostly %d\n", read_mostly);
  CHECK(cudaMemAdvise(a, n * sizeof *a, cudaMemAdviseSetPreferredLocation, gpu));
  CHECK(cudaMemPrefetchAsync(a, n * sizeof *a, gpu, 0, 0));
  float k = kernel_ms([&] {
    for (int r = 0; r < 20; r++) scale<<<1024, 256>>>(a, lut, n);
  });
  CHECK(cudaMemPrefetchAsync(a, n * sizeof *a, cpu, 0, 0));
  CHECK(cudaDeviceSynchronize());
  double s = 0;
  for (size_t i = 0; i < n; i += 4097) s += a[i];
  std::printf("sample sum %.1f\n", s);
  cudaError_t past = cudaMemPrefetchAsync(a, n * sizeof *a + (4 << 20), gpu, 0, 0);
  std::printf("prefetch past the end: %s\n", cudaGetErrorName(past));
  cudaGetLastError();
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, a + 12345));
  std::printf("pointer type %d\n", (int)attr.type);
  CHECK(cudaFree(a));
  CHECK(cudaFree(lut));
  std::printf("time kernel_ms %.3f\n", k);
  return 0;
}
