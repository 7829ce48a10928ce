// One runtime per GPU: each device's kernels allocate from their own device's arena through the
// default mailbox, because am::bind binds a runtime on its own device. Every thread of a kernel
// on device d allocates a 64 KiB object and writes d and its index into it; the host reads each
// object back through its device's runtime and checks that no other device's runtime knows it;
// a kernel on device 0 freeing device 1's objects is refused and changes nothing; kernels free
// everything and every runtime ends empty. Runs on every GPU there is (one GPU: the same checks
// on one device, without the cross-device free).
//
//   nvcc -arch=sm_90 several_devices.cu $(pkg-config --cflags --libs alignmalloc) -o several_devices
#include <alignmalloc/alignmalloc.cuh>

#include <vector>

#include "check.h"

constexpr unsigned kThreads = 4096;
constexpr unsigned long long kBytes = 64 << 10;

__host__ __device__ inline unsigned long long tag_of(int device, unsigned t) {
  return (unsigned long long)device << 32 | t;
}

__global__ void allocate(int device, unsigned long long* handles, unsigned* statuses) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= kThreads) return;
  unsigned status;
  am::ptr<unsigned long long> p{am::malloc(kBytes, &status)};
  handles[t] = p.handle;
  statuses[t] = status;
  if (!p.is_null()) p[0] = tag_of(device, t);
}

__global__ void release(const unsigned long long* handles, unsigned* statuses) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= kThreads) return;
  statuses[t] = am::free(handles[t]).lane_status;
}

int main() {
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  EXPECT(devices > 0, "a GPU");
  if (devices > 8) devices = 8;
  std::vector<am_runtime*> runtimes(devices);
  std::vector<unsigned long long*> handles(devices);
  std::vector<unsigned*> statuses(devices);
  for (int d = 0; d < devices; ++d) {
    am_options options;
    CHECK_AM(am_options_default(&options));
    options.backend = AM_BACKEND_CUDA;
    options.device = (unsigned)d;
    options.arena_bytes = 1ull << 30;
    CHECK_AM(am_runtime_create(&options, &runtimes[d]));
    CHECK_AM(am::bind(runtimes[d]));  // binds device d's copy, whatever device is current
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaMalloc(&handles[d], kThreads * sizeof(unsigned long long)));
    CHECK_CUDA(cudaMalloc(&statuses[d], kThreads * sizeof(unsigned)));
  }
  // Every device's kernel at once.
  for (int d = 0; d < devices; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    allocate<<<kThreads / 256, 256>>>(d, handles[d], statuses[d]);
    CHECK_CUDA(cudaGetLastError());
  }
  std::vector<unsigned long long> h(kThreads);
  std::vector<unsigned> s(kThreads);
  for (int d = 0; d < devices; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(h.data(), handles[d], kThreads * 8, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(s.data(), statuses[d], kThreads * 4, cudaMemcpyDeviceToHost));
    for (unsigned t = 0; t < kThreads; ++t) {
      EXPECT(s[t] == am::kStatusOk && h[t] != 0, "device %d thread %u: status %u", d, t, s[t]);
      unsigned long long word = 0;
      CHECK_AM(am_read(runtimes[d], h[t], 0, &word, sizeof word));
      EXPECT(word == tag_of(d, t), "device %d thread %u: %llx", d, t, word);
      for (int e = 0; e < devices; ++e) {
        if (e == d) continue;
        uint64_t bytes = 0;
        const am_status other = am_capacity(runtimes[e], h[t], &bytes);
        EXPECT(other != AM_OK, "device %d's object %u is known to device %d's runtime", d, t, e);
      }
    }
    std::printf("device %d: %u objects of %llu bytes from its own arena, each as written\n", d,
                kThreads, kBytes);
  }
  if (devices > 1) {
    // Device 0's kernel frees device 1's objects through its own default mailbox: refused as
    // handles its arena does not hold, and nothing of device 1's changes.
    CHECK_CUDA(cudaSetDevice(1));
    CHECK_CUDA(cudaMemcpy(h.data(), handles[1], kThreads * 8, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaSetDevice(0));
    unsigned long long* foreign;
    CHECK_CUDA(cudaMalloc(&foreign, kThreads * sizeof(unsigned long long)));
    CHECK_CUDA(cudaMemcpy(foreign, h.data(), kThreads * 8, cudaMemcpyHostToDevice));
    release<<<kThreads / 256, 256>>>(foreign, statuses[0]);
    CHECK_LAUNCH();
    CHECK_CUDA(cudaMemcpy(s.data(), statuses[0], kThreads * 4, cudaMemcpyDeviceToHost));
    for (unsigned t = 0; t < kThreads; ++t) {
      EXPECT(s[t] == am::kLaneInvalidHandle, "device 1's object %u freed on device 0: %u", t, s[t]);
    }
    CHECK_CUDA(cudaFree(foreign));
    for (unsigned t = 0; t < kThreads; ++t) {
      uint64_t bytes = 0;
      CHECK_AM(am_capacity(runtimes[1], h[t], &bytes));
    }
    std::printf("device 0 freeing device 1's objects: %u refused (invalid handle), all still live\n",
                kThreads);
  }
  for (int d = 0; d < devices; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    release<<<kThreads / 256, 256>>>(handles[d], statuses[d]);
    CHECK_LAUNCH();
    CHECK_CUDA(cudaMemcpy(s.data(), statuses[d], kThreads * 4, cudaMemcpyDeviceToHost));
    for (unsigned t = 0; t < kThreads; ++t) {
      EXPECT(s[t] == am::kLaneOk, "device %d thread %u: free %u", d, t, s[t]);
    }
    expect_clean(runtimes[d]);
    CHECK_CUDA(cudaFree(handles[d]));
    CHECK_CUDA(cudaFree(statuses[d]));
  }
  for (int d = 0; d < devices; ++d) CHECK_AM(am_runtime_destroy(runtimes[d]));
  std::printf("several_devices: OK on %d device(s)\n", devices);
  return 0;
}
