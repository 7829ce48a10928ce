// Each thread reads the object the host filled for it, allocates an object of its own from inside
// the kernel, and writes twice each input word into it.
#include <alignmalloc/alignmalloc.cuh>

extern "C" __global__ void double_it(am::DeviceMailbox mb, const unsigned long long* inputs,
                                     unsigned long long* outputs, unsigned threads,
                                     unsigned words) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  am::ptr<unsigned long long> in{inputs[t]};
  unsigned status;
  am::ptr<unsigned long long> out{am::malloc(mb, words * 8ull, &status)};
  outputs[t] = out.handle;  // 0 when the allocation failed; `status` says why
  if (out.handle == 0) return;
  for (unsigned i = 0; i < words; ++i) out[i] = 2 * in[i];
}

// Each thread frees the object double_it allocated for it: objects up to 32 KiB come from the
// device caches, which only device code frees. `statuses[t]` is the free's lane status.
extern "C" __global__ void free_them(am::DeviceMailbox mb, const unsigned long long* outputs,
                                     unsigned threads, unsigned* statuses) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  statuses[t] = am::free(mb, outputs[t]).lane_status;
}
