// alignmalloc device client: allocation and free from inside kernels through an explicit
// mailbox. Users include <alignmalloc/alignmalloc.cuh>, which adds the default mailbox; this file
// holds the protocol.
//
// A call is warp-collective over the lanes that reach it together (__activemask()): they form
// one request. The leader takes a port (hash of the global warp id, linear probing over a lock
// per port in device memory), gathers the lanes' words by shuffles and writes the whole request,
// publishes the sequence number (release, system scope) and polls the acknowledgement with plain
// (relaxed) loads and __nanosleep backoff; the poll that sees it is followed by a system-scope
// acquire fence before the reply is read, then the reply is broadcast. Only the leader writes
// the port, so its release covers everything the host will read. A closed mailbox (service
// stopped) ends the wait with kStatusShutdown; the flag is read every kPollsPerClosedCheck polls (detail/settings.h), never before
// posting. An unbound mailbox (all zero) answers kStatusUnbound at once. Single-writer words
// only: no atomic read-modify-write ever crosses PCIe. A request posted without waiting
// (am::post_free) leaves the port marked owed in its lock word; the next holder waits for that
// answer before it writes the port. See orchestrator/src/mailbox.rs for the host side.
//
// Why no acquire load per poll and no flag read before posting: every one of those is a
// system-scope read across PCIe, and the one flag word read by every warp was the client's
// bottleneck on the H200 (docs/mailbox.md has the figures).
//
// The CPU warps' twin is `orchestrator::cpu::CpuDevice`; device/hostcheck runs this file on a host
// warp beside it with the same steps and compares every lane's answer (tests/client_protocol.rs).
#ifndef ALIGNMALLOC_CLIENT_CUH
#define ALIGNMALLOC_CLIENT_CUH

#include <cuda/atomic>
#include <alignmalloc/detail/layout.h>
#include <alignmalloc/detail/abi.h>
#include <alignmalloc/detail/settings.h>
#include <alignmalloc/detail/cache.cuh>
#include <alignmalloc/detail/warp.cuh>

namespace am {

// A reply as every lane sees it. lane_status is the calling lane's own byte: its LaneStatus for a
// free, its handle's generation for an allocation. active is the set of lanes that made the
// request, which every later warp-collective step must use.
struct Reply {
  u32 active;
  u32 status;
  u32 size_class;
  u32 tile_log2;
  u32 layout;
  u64 chunk_base;
  u64 lane_span;
  u32 lane_status;
};

// The outcome of am::free for the calling lane.
struct FreeResult {
  u32 status;       // Status of the warp's request (kStatusPartial when some lane failed)
  u32 lane_status;  // LaneStatus of this lane
};

namespace detail {

__device__ __forceinline__ u32 load_host_word(const u32* word) {
  return cuda::atomic_ref<u32, cuda::thread_scope_system>(*const_cast<u32*>(word))
      .load(cuda::memory_order_acquire);
}

// A relaxed read of a host-written word (a volatile load is relaxed at system scope).
__device__ __forceinline__ u32 peek_host_word(const u32* word) {
  return *reinterpret_cast<const volatile u32*>(word);
}

// A port's lock word (device memory): bit 0 held; bit 1 set while the port's last request was
// posted without waiting (am::post_free) and may still be unanswered, its sequence number's low
// 30 bits above. The next holder waits for that answer before posting its own, so the request
// words keep one writer at a time and the host reads each request whole. (kPortHeld, kPortOwed
// and kOwedSeqMask are generated into abi.h from the CPU client's constants.)

__device__ __forceinline__ u32 owed_lock_word(u32 seq) { return (seq & kOwedSeqMask) << 2 | kPortOwed; }

// Leader only: take a free port, starting at the warp's home port; its lock word as it was.
__device__ inline u32 lock_port(const DeviceMailbox& mb, u32 warp, u32* was) {
  u32 port = (warp * 0x9E3779B1u) % mb.ports;
  for (u32 tries = 1;; ++tries) {
    cuda::atomic_ref<u32, cuda::thread_scope_device> lock(mb.locks[port]);
    u32 expected = lock.load(cuda::memory_order_relaxed);
    if ((expected & kPortHeld) == 0 &&
        lock.compare_exchange_strong(expected, kPortHeld, cuda::memory_order_acquire,
                                     cuda::memory_order_relaxed)) {
      *was = expected;
      return port;
    }
    port = port + 1 == mb.ports ? 0 : port + 1;
    if (tries % mb.ports == 0) __nanosleep(kPortSweepPauseNs);
  }
}

// Leader only: wait until the host acknowledged `seq` on `port` (then acquire what it wrote);
// false when the mailbox closed first.
__device__ inline bool wait_ack(const DeviceMailbox& mb, u32 port, u32 seq, u32 seq_mask) {
  u32 pause = kPollPauseMinNs;
  for (u32 polls = 1;; ++polls) {
    if (((peek_host_word(&mb.ack_seq[port]) ^ seq) & seq_mask) == 0) {
      // With the relaxed read above, an acquire of the host's release of the acknowledgement.
      cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
      return true;
    }
    if (polls % kPollsPerClosedCheck == 0 && load_host_word(mb.closed)) {
      return ((load_host_word(&mb.ack_seq[port]) ^ seq) & seq_mask) == 0;  // answered just before closing
    }
    __nanosleep(pause);
    pause = next_pause(pause, kPollPauseMaxNs);
  }
}

// The warp-collective request: the active lanes each contribute `word`. Unless `wait`, the
// leader posts it and releases the port at once, marked owed, and the reply is not read: every
// lane gets status kStatusOk and lane status kLaneOk (the host counts and keeps the outcome).
__device__ inline Reply call(const DeviceMailbox& mb, u32 op, u64 word, bool wait = true) {
  const u32 active = __activemask();
  const u32 lane = lane_id();
  if (mb.ports == 0) {
    // Never bound: answer at once (the same in every lane), touching no memory.
    Reply unbound = {};
    unbound.active = active;
    unbound.status = kStatusUnbound;
    return unbound;
  }
  const u32 leader = __ffs(active) - 1;
  const u32 warp = global_warp_id();
  u32 port = 0;
  u32 seq = 0;
  bool closed = false;
  u32 was = 0;
  if (lane == leader) {
    port = lock_port(mb, warp, &was);
    if (was & kPortOwed) {
      // The previous holder posted without waiting: its answer comes first. Reading the
      // acknowledgement after that wait is then an acquire of the newest one.
      closed = !wait_ack(mb, port, was >> 2, kOwedSeqMask);
    }
    // Relaxed is enough otherwise: the lock's acquire follows the previous holder's acquire of
    // this acknowledgement, so no older value can be read here.
    seq = peek_host_word(&mb.ack_seq[port]) + 1u;
    RequestRecord& r = mb.requests[port];
    if (!closed) {
      r.op = op;
      r.lane_mask = active;
      r.warp = warp;
      r.reserved = 0;
    }
  }
  Reply reply;
  reply.active = active;
  port = shfl32(active, port, leader);
  closed = shfl32(active, closed ? 1u : 0u, leader) != 0;
  u64 w[kReplyWords];
  for (u32 i = 0; i < kReplyWords; ++i) w[i] = 0;
  if (closed) {
    // The host stopped with a request of this port unanswered: nothing may be written to it.
    w[0] = kStatusShutdown;
    if (lane == leader) {
      cuda::atomic_ref<u32, cuda::thread_scope_device>(mb.locks[port])
          .store(was, cuda::memory_order_release);
    }
  } else {
    // The leader writes every word it publishes: a release orders the releasing thread's own
    // writes, so the lanes hand their words to the leader instead of storing them themselves.
    volatile u64* words = mb.requests[port].words;
    for (u32 m = active; m != 0; m &= m - 1) {
      const u32 source = __ffs(m) - 1;
      const u64 value = shfl64(active, word, source);
      if (lane == leader) words[source] = value;
    }
    if (lane == leader) {
      __threadfence_system();
      cuda::atomic_ref<u32, cuda::thread_scope_system>(mb.req_seq[port])
          .store(seq, cuda::memory_order_release);
      u32 unlocked = owed_lock_word(seq);
      if (wait) {
        if (wait_ack(mb, port, seq, ~0u)) {
          const volatile u64* src = reinterpret_cast<const volatile u64*>(&mb.replies[port]);
          for (u32 i = 0; i < kReplyWords; ++i) w[i] = src[i];
          unlocked = 0u;
        } else {
          w[0] = kStatusShutdown;
        }
      }
      cuda::atomic_ref<u32, cuda::thread_scope_device>(mb.locks[port])
          .store(unlocked, cuda::memory_order_release);
    }
    for (u32 i = 0; i < kReplyWords; ++i) w[i] = shfl64(active, w[i], leader);
  }
  reply.status = (u32)w[0];
  reply.size_class = (u32)(w[0] >> 32);
  reply.tile_log2 = (u32)w[1];
  reply.layout = (u32)(w[1] >> 32);
  reply.chunk_base = w[2];
  reply.lane_span = w[3];
  reply.lane_status = (u32)((w[5 + lane / 8u] >> (8u * (lane % 8u))) & 0xFFu);
  return reply;
}

__device__ inline u64 alloc(const DeviceMailbox& mb, u64 size, u32 op, u32* status) {
  if (mb.caches.classes != 0) {
    // With caches, a lane asking 0 takes no part, and sizes a cache class holds are served on
    // the device (run-class sizes where cache_run_class_serves says so); only the others, and
    // lanes whose class the host denied a slab, ask the host.
    if (size == 0) {
      if (status) *status = kStatusOk;
      return 0;
    }
    u64 h = 0;
    if (cache_try_alloc(mb.caches, mb.closed, size, op == kOpAlloc, &h)) {
      if (status) *status = kStatusOk;
      return h;
    }
  }
  const Reply r = call(mb, op, size);
  if (status) *status = r.status;
  const u32 lane = lane_id();
  // Small chunks: this lane's offset is the sum of the rounded sizes of the lower lanes that made
  // the request. Every requesting lane takes part in the scan (the condition is the same in all
  // of them), including lanes that asked 0, so no shuffle names a lane that already returned.
  u64 small_off = 0;
  if (r.status == kStatusOk && r.chunk_base != 0 && r.size_class == kClassSmall) {
    const u64 mine = round16(size);
    for (u32 m = r.active; m != 0; m &= m - 1) {
      const u32 source = __ffs(m) - 1;
      const u64 theirs = shfl64(r.active, mine, source);
      if (source < lane) small_off += theirs;
    }
  }
  if (r.status != kStatusOk || r.chunk_base == 0 || size == 0) return 0;
  Geometry g;
  g.size_class = r.size_class;
  g.tile_log2 = r.tile_log2;
  g.lane_span = r.lane_span;
  g.chunk_bytes = 0;
  g.units = 0;
  return handle_with_generation(lane_handle_from(g, r.chunk_base, lane, small_off, r.layout),
                                r.lane_status);
}

}  // namespace detail

// Allocate `size` bytes, warp-arranged for portion and large sizes. Returns 0 when the lane asked
// 0 bytes or the request failed (`*status` says why).
__device__ inline u64 malloc(const DeviceMailbox& mb, u64 size, u32* status = nullptr) {
  return detail::alloc(mb, size, kOpAlloc, status);
}

// Allocate `size` bytes, thread-contiguous (a plain handle: `ptr<T>::plain()` is a raw pointer).
__device__ inline u64 malloc_contiguous(const DeviceMailbox& mb, u64 size, u32* status = nullptr) {
  return detail::alloc(mb, size, kOpAllocContiguous, status);
}

// Allocate `size` bytes, thread-contiguous, as a plain pointer (nullptr when the lane asked 0
// bytes or the request failed). Give it back with am::free(mb, pointer).
__device__ inline void* malloc_plain(const DeviceMailbox& mb, u64 size, u32* status = nullptr) {
  return reinterpret_cast<void*>(handle_address(malloc_contiguous(mb, size, status)));
}

namespace detail {

// A free of `word` (a handle, or an address for kOpFreePointer): judged on the device for cache
// objects; else sent to the host, waiting for its answer unless `posted`.
__device__ inline FreeResult free_word(const DeviceMailbox& mb, u32 op, u64 word, bool posted) {
  if (mb.caches.classes != 0) {
    // With caches, a null takes no part, and objects of cache slabs are freed on the device
    // (cache_try_free says which).
    FreeResult result = {kStatusOk, kLaneOk};
    if (word == 0) return result;
    bool any_failed = false;
    if (cache_try_free(mb.caches, word, op == kOpFree, &result.lane_status, &any_failed)) {
      result.status = any_failed ? kStatusPartial : kStatusOk;
      return result;
    }
  }
  const Reply r = call(mb, op, word, !posted);
  FreeResult result;
  result.status = r.status;
  // An unbound mailbox freed nothing; the lane's own byte is meaningless then.
  result.lane_status = r.status == kStatusUnbound ? (u32)kLaneInvalidHandle : r.lane_status;
  return result;
}

}  // namespace detail

// Give back a handle from am::malloc or am::malloc_contiguous (0 is a no-op).
__device__ inline FreeResult free(const DeviceMailbox& mb, u64 handle) {
  return detail::free_word(mb, kOpFree, handle, false);
}

// Give back the object whose first byte `pointer` is (from am::malloc_plain, or the address of a
// plain handle; nullptr is a no-op). Judged like a free by handle: a second free of the same
// address is kLaneDoubleFree until a new object starts there (an address has no generation), a
// pointer inside an object is kLaneInteriorPointer, and one outside the arena kLaneInvalidHandle.
__device__ inline FreeResult free(const DeviceMailbox& mb, const void* pointer) {
  return detail::free_word(mb, kOpFreePointer, reinterpret_cast<u64>(pointer), false);
}

// am::free without waiting for the host: objects of the device caches are judged here and their
// outcome returned as by am::free; any other free is posted to the host and returns at once with
// kStatusOk / kLaneOk, its outcome counted by the host (am_counters_get) and, when it fails, kept
// in the host's list of the last bad frees (am_last_bad_frees) and logged. The host answers
// posted frees in order with everything else, so an object is free once the runtime has settled
// (am_drain_caches, or any later call on the same port).
__device__ inline FreeResult post_free(const DeviceMailbox& mb, u64 handle) {
  return detail::free_word(mb, kOpFree, handle, true);
}

// am::free(pointer) without waiting for the host, as am::post_free(handle).
__device__ inline FreeResult post_free(const DeviceMailbox& mb, const void* pointer) {
  return detail::free_word(mb, kOpFreePointer, reinterpret_cast<u64>(pointer), true);
}

}  // namespace am

#endif  // ALIGNMALLOC_CLIENT_CUH
