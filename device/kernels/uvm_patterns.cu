// Access patterns for calibrating uvmsim (host side and the trace twin: bench/src/patterns.rs).
// Thread t reads `reads` 8-byte words of its object (handle t) at offsets from one of three
// patterns; the sum goes to `sink` so the reads are not optimised away.
//   0 lockstep:     the lanes of a warp read the same random offsets (seeded by the warp)
//   1 independent:  each lane reads its own random offsets (seeded by the thread)
//   2 sweep:        each lane walks its range in `reads` equal strides
#include <alignmalloc/alignmalloc.cuh>

namespace {

__device__ __forceinline__ am::u64 mix(am::u64 x) {
  // splitmix64's finaliser: the same in bench/src/patterns.rs.
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

extern "C" __global__ void am_uvm_pattern(const am::u64* handles, unsigned threads,
                                          unsigned pattern, am::u64 range, unsigned reads,
                                          am::u64 seed, unsigned long long* sink) {
  const am::u64 t = (am::u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  am::ptr<am::u64> p{handles[t]};
  const am::u64 words = range / 8;
  const am::u64 stream = pattern == 0 ? t / 32 : t;
  unsigned long long sum = 0;
  for (unsigned i = 0; i < reads; ++i) {
    const am::u64 word = pattern == 2 ? (am::u64)i * words / reads
                                      : mix(seed ^ (stream << 20) ^ i) % words;
    sum += p[word];
  }
  if (sum == 0x5EED) sink[0] = sum;  // practically never: keeps the loads alive
}
