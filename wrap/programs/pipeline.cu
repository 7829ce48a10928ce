// A multi-kernel pipeline: each stage allocates its output, runs, and frees its input.
#include "common.h"

__global__ void stage(const float *in, float *out, size_t n, int s) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = in[i] * 0.5f + (float)((i + s) % 7);
}

__global__ void total(const float *a, size_t n, double *out) {
  double s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += a[i];
  atomicAdd(out, s);
}

int main() {
  const size_t n = (size_t)16 << 20;  // 64 MiB per stage
  float *in;
  CHECK(cudaMallocManaged(&in, n * sizeof *in));
  for (size_t i = 0; i < n; i++) in[i] = (float)(i % 1000);
  float k = 0;
  for (int s = 0; s < 20; s++) {
    float *out;
    CHECK(cudaMallocManaged(&out, n * sizeof *out));
    k += kernel_ms([&] { stage<<<1024, 256>>>(in, out, n, s); });
    CHECK(cudaFree(in));
    in = out;
  }
  double *sum;
  CHECK(cudaMallocManaged(&sum, sizeof *sum));
  *sum = 0;
  k += kernel_ms([&] { total<<<1024, 256>>>(in, n, sum); });
  std::printf("pipeline total %.6e first %.3f last %.3f\n", *sum, in[0], in[n - 1]);
  CHECK(cudaFree(in));
  CHECK(cudaFree(sum));
  std::printf("time kernel_ms %.3f\n", k);
  return 0;
}
