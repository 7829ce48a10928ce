// Error checks shared by the examples: every CUDA and alignmalloc call is checked, and the first
// failure ends the program with a message and a non-zero exit status.
#ifndef ALIGNMALLOC_EXAMPLES_CHECK_H
#define ALIGNMALLOC_EXAMPLES_CHECK_H

#include <alignmalloc/alignmalloc.cuh>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                   cudaGetErrorString(err_));                                            \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define CHECK_AM(call)                                                                   \
  do {                                                                                   \
    am_status st_ = (call);                                                              \
    if (st_ != AM_OK) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,      \
                   am_status_name(st_), am_last_error());                                \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// A launch's own error, then its completion.
#define CHECK_LAUNCH()                         \
  do {                                         \
    CHECK_CUDA(cudaGetLastError());            \
    CHECK_CUDA(cudaDeviceSynchronize());       \
  } while (0)

#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// A runtime on the GPU with an arena of `arena_bytes` (never more than the card has free).
inline am_runtime* create_gpu_runtime(unsigned long long arena_bytes) {
  am_options options;
  CHECK_AM(am_options_default(&options));
  options.backend = AM_BACKEND_CUDA;
  options.arena_bytes = arena_bytes;
  am_runtime* rt = nullptr;
  CHECK_AM(am_runtime_create(&options, &rt));
  char reason[256];
  CHECK_AM(am_runtime_backend_reason(rt, reason, sizeof reason, nullptr));
  std::printf("runtime: %s\n", reason);
  return rt;
}

// Nothing left allocated and the allocator's invariants hold. Call it when no kernel runs: the
// device caches first give back what no object uses (they keep slabs warm between kernels).
inline void expect_clean(am_runtime* rt) {
  CHECK_AM(am_drain_caches(rt, nullptr));
  bool empty = false;
  CHECK_AM(am_check(rt, &empty));
  EXPECT(empty, "everything was freed");
}

#endif  // ALIGNMALLOC_EXAMPLES_CHECK_H
