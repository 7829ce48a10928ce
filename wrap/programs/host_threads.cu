// Eight host threads allocate managed memory at once: each, 400 times, allocates (256 B to
// 4 MiB), fills on the host, lets a kernel on its own stream add its number to every word,
// checks every word on the host and frees. The result line (words checked, wrong) must be the
// same plain and wrapped; the time line says how long the threads took.
#include "common.h"
#include <thread>
#include <vector>

__global__ void add(unsigned *words, size_t n, unsigned value) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    words[i] += value;
}

int main() {
  const unsigned threads = 8, rounds = 400;
  std::vector<unsigned long long> checked(threads), wrong(threads);
  CHECK(cudaFree(nullptr));
  double t0 = now_ms();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      cudaStream_t stream;
      CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      for (unsigned r = 0; r < rounds; ++r) {
        const size_t bytes = (size_t)256 << ((t * 7 + r * 13) % 15);  // 256 B .. 4 MiB
        const size_t n = bytes / sizeof(unsigned);
        unsigned *words = nullptr;
        CHECK(cudaMallocManaged(&words, bytes));
        for (size_t i = 0; i < n; ++i) words[i] = (unsigned)(i * 2654435761u) ^ r;
        add<<<64, 256, 0, stream>>>(words, n, t + 1);
        CHECK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < n; ++i) wrong[t] += words[i] != (((unsigned)(i * 2654435761u) ^ r) + t + 1);
        checked[t] += n;
        CHECK(cudaFree(words));
      }
      CHECK(cudaStreamDestroy(stream));
    });
  }
  for (auto &w : workers) w.join();
  double ms = now_ms() - t0;
  unsigned long long all = 0, bad = 0;
  for (unsigned t = 0; t < threads; ++t) all += checked[t], bad += wrong[t];
  std::printf("threads %u x %u allocations: words checked %llu, wrong %llu\n", threads, rounds, all, bad);
  std::printf("time threads_ms %.3f\n", ms);
  return 0;
}
