// A warp on the host, for running the CUDA headers' device code as host C++: each lane a context
// of its own on the calling thread (simt.cpp), and the warp-wide intrinsics (__ballot_sync,
// __match_any_sync, __reduce_or_sync, __shfl_sync, __syncwarp, __activemask) as meetings of the
// lanes that take part.
//
// The lanes run one at a time, in lane order: a lane runs until it waits at a warp-wide
// instruction or returns, then the lowest lane that can run goes on. So a warp's steps happen
// in one order every time (what a differential test needs), the order the CPU warps' Rust code
// takes them in: lane by lane between warp-wide instructions.
//
// Rules the device code must keep, checked here (a breach stops the program with the lanes and
// the instruction): every lane named in a warp-wide instruction's mask reaches the same
// instruction (a lane that returned instead, or waits elsewhere, would hang the GPU).
// `__activemask()` is every lane that has not returned and waits at an `__activemask()` too:
// the lanes that went on together.
#ifndef ALIGNMALLOC_HOSTCHECK_SIMT_H
#define ALIGNMALLOC_HOSTCHECK_SIMT_H

#define __device__
#define __host__
#define __forceinline__ inline

namespace simt {

// The values of `value` of every lane of `mask`, indexed by lane; the calling lane's among them.
void exchange(unsigned mask, unsigned long long value, unsigned long long out[32]);
// The lanes that reach an __activemask() together (see above).
unsigned active_lanes();
// Run `lane_body(lane, context)` for each lane of `lanes` as one warp, on the calling thread;
// returns when every lane has returned. Not from inside a lane.
void run_warp(unsigned lanes, void (*lane_body)(unsigned lane, void* context), void* context);
// The running lane.
unsigned current_lane();
// Stop the program: the device code broke a rule above.
[[noreturn]] void fail(const char* what, unsigned mask);

}  // namespace simt

inline unsigned __ballot_sync(unsigned mask, bool predicate) {
  unsigned long long values[32];
  simt::exchange(mask, predicate ? 1 : 0, values);
  unsigned out = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if ((mask >> lane & 1u) && values[lane]) out |= 1u << lane;
  }
  return out;
}

namespace simt {
// The lanes of `mask` whose `value` equals the calling lane's (both widths of __match_any_sync).
inline unsigned match_any(unsigned mask, unsigned long long value) {
  unsigned long long values[32];
  exchange(mask, value, values);
  unsigned out = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if ((mask >> lane & 1u) && values[lane] == value) out |= 1u << lane;
  }
  return out;
}
}  // namespace simt

inline unsigned __match_any_sync(unsigned mask, unsigned value) {
  return simt::match_any(mask, value);
}

inline unsigned __match_any_sync(unsigned mask, unsigned long long value) {
  return simt::match_any(mask, value);
}

inline unsigned __reduce_or_sync(unsigned mask, unsigned value) {
  unsigned long long values[32];
  simt::exchange(mask, value, values);
  unsigned out = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (mask >> lane & 1u) out |= (unsigned)values[lane];
  }
  return out;
}

inline unsigned __shfl_sync(unsigned mask, unsigned value, unsigned source) {
  if ((mask >> (source & 31u) & 1u) == 0) simt::fail("a shuffle from a lane outside its mask", mask);
  unsigned long long values[32];
  simt::exchange(mask, value, values);
  return (unsigned)values[source & 31u];
}

inline unsigned long long __shfl_sync(unsigned mask, unsigned long long value, unsigned source) {
  if ((mask >> (source & 31u) & 1u) == 0) simt::fail("a shuffle from a lane outside its mask", mask);
  unsigned long long values[32];
  simt::exchange(mask, value, values);
  return values[source & 31u];
}

// A meeting of the lanes of `mask` that carries nothing.
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
  unsigned long long values[32];
  simt::exchange(mask, 0, values);
}

inline unsigned __activemask() { return simt::active_lanes(); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
void __nanosleep(unsigned ns);
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicAdd(T* word, T value) {
  return __atomic_fetch_add(word, value, __ATOMIC_RELAXED);
}

#endif  // ALIGNMALLOC_HOSTCHECK_SIMT_H
