// alignmalloc device caches: objects of up to 4 MiB allocated and freed on the device.
//
// The CUDA twin of `orchestrator::caches::device` (the CPU warps' side, which CI runs);
// device/hostcheck runs this file on a host warp beside it with the same steps and compares every
// answer and word (tests/cache_protocol.rs). The protocol is in `orchestrator/src/caches/mod.rs`
// and docs/caches.md. In short: per class, the
// lanes asking it take their objects from the current slab with one fetch_add on the class word
// (slab number << 32 | cursor), side by side in lane order; in the run class each lane takes the
// slots its size needs with a fetch_add of its own, and the one lane whose slots would cross the
// slab's end counts the slots left there as freed. The warp that finds the slab used up
// takes the class lock and moves the class to the next slab the host published, its lanes of the
// class sharing the new slab's bitmap words and blocks (it asks once
// with `demand` and waits when none is there yet; it claims a published slab before it reads
// it, because the host may take slabs it published back when it needs their room; in classes of
// 1-2 block slabs, once the class word moved, it claims the host's next published slabs ahead
// too, several in one claim, so the next moves need none of the host's words, and before it
// gives the lock back its lanes start the one the next move makes current (its fields, life,
// bitmap words and blocks), so that move only moves the class word);
// when the host denies it one, the lanes ask through the mailbox instead, and so do the class's
// next lanes, without asking, until the host publishes a slab or withdraws the denial. A free
// finds the slab of its address and the slab's class in the block table, sets the object's bit
// in the slab's bitmap (a bit already set is a double free) and counts the slab's live slots
// down by the object's, one atomic per slab and warp; the free that reaches zero unmaps the slab
// and posts it to the host's returns ring, its bitmap left all set. Each bitmap
// word carries the slab's life (cleared with the new life when the slab becomes current again),
// and a free's atomic OR returns it with the bit: a late second free is refused in any later
// life. No host round trip on either path while the host keeps up. Device words are updated with
// device-scope atomics; the channel's words are single-writer, read and written at system scope.
#ifndef ALIGNMALLOC_CACHE_CUH
#define ALIGNMALLOC_CACHE_CUH

#include <cuda/atomic>
#include <alignmalloc/detail/cache_geometry.h>
#include <alignmalloc/detail/layout.h>
#include <alignmalloc/detail/abi.h>
#include <alignmalloc/detail/settings.h>
#include <alignmalloc/detail/warp.cuh>

namespace am {
namespace detail {

// A loop the CUDA compilers keep rolled (a cold path whose size counts); host C++
// (device/hostcheck) knows no such pragma.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define AM_CACHE_ROLLED _Pragma("unroll 1")
#else
#define AM_CACHE_ROLLED
#endif

template <typename T>
using device_atomic = cuda::atomic_ref<T, cuda::thread_scope_device>;
template <typename T>
using system_atomic = cuda::atomic_ref<T, cuda::thread_scope_system>;

__device__ __forceinline__ u32 cache_ballot(u32 mask, bool value) {
  if (is_lone_lane(mask)) return value ? mask : 0u;
  return __ballot_sync(mask, value);
}

__device__ __forceinline__ u32 cache_match(u32 mask, u32 value) {
  if (is_lone_lane(mask)) return mask;
  return __match_any_sync(mask, value);
}

__device__ __forceinline__ u32 cache_match64(u32 mask, u64 value) {
  if (is_lone_lane(mask)) return mask;
  return __match_any_sync(mask, value);
}

// The OR of `value` over the lanes of `mask` (each reaches it): one instruction from sm_80 on,
// shuffles from each lane before.
__device__ __forceinline__ u32 cache_reduce_or(u32 mask, u32 value) {
  if (is_lone_lane(mask)) return value;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  return __reduce_or_sync(mask, value);
#else
  u32 all = 0;
  for (u32 m = mask; m != 0; m &= m - 1) all |= __shfl_sync(mask, value, __ffs(m) - 1);
  return all;
#endif
}

// Every lane of `mask` (each reaches it) past its memory accesses before any goes on: each
// lane's fence completes its own at device scope before it joins the shuffle, which no lane
// leaves before every lane of `mask` joined it. A __syncwarp here left the warp's lanes apart
// afterwards on the GPU (a later request's __activemask() named lane 0 alone: selftest (c)).
__device__ __forceinline__ void cache_lanes_meet(u32 mask) {
  __threadfence();
  if (!is_lone_lane(mask)) (void)__shfl_sync(mask, 0u, __ffs(mask) - 1);
}

__device__ __forceinline__ u32 cache_peek(const u32* word) {
  return *reinterpret_cast<const volatile u32*>(word);
}

// Point block `block` at `value` (cache_block_value, or 0 for none), adding its key if new. Keys are
// never removed, so a lookup stops at the first empty entry.
__device__ inline void cache_map_block(const DeviceCaches& c, u64 block, u32 value) {
  const u64 key = block + 1;
  const u64 entry = key << 32 | value;
  u64 at = cache_hash_home(block, c.hash_len);
  for (u32 probes = 0; probes < c.hash_len; ++probes) {
    device_atomic<u64> slot(c.blocks[at]);
    u64 current = slot.load(cuda::memory_order_acquire);
    if (current >> 32 == key) {
      slot.store(entry, cuda::memory_order_release);
      return;
    }
    if (current == 0) {
      if (slot.compare_exchange_strong(current, entry, cuda::memory_order_acq_rel,
                                       cuda::memory_order_acquire)) {
        return;
      }
      if (current >> 32 == key) {  // cannot happen: one writer per block; kept for safety
        slot.store(entry, cuda::memory_order_release);
        return;
      }
    }
    at = (at + 1) & (c.hash_len - 1);
  }
}

// Point the `count` blocks from `first` on at `value`, as cache_map_block one after the other
// does, with a relaxed look at each block's first probe (where a slab's blocks almost always
// are) and the full probe only where the key is elsewhere. The first probes are read
// kCacheMapGroup at a time (one round trip for each group), the full probes afterwards one
// block after the other, in loops kept rolled: reading the first probes of all 16 blocks a slab
// may have together, each with its full probe inlined, took 6 100-6 900 SM cycles on the GPU
// whether the slab had one block or eight (code run once per slab, its 16 unrolled copies
// cold), one block after the other about 500 a block. Relaxed, with no fence: the caller orders
// the stores (a slab's return, whose system-scope release of the returns entry orders its
// unmapping before the host takes the slab; a free that still finds the block mapped judges by
// the slab's life as before).
constexpr u32 kCacheMapGroup = 4;
__device__ inline void cache_map_blocks(const DeviceCaches& c, u64 first, u64 count, u32 value) {
  const u64 end = first + count;
  AM_CACHE_ROLLED
  for (u64 group = first; group < end; group += kCacheMapGroup) {
    u64 seen[kCacheMapGroup];
    for (u32 i = 0; i < kCacheMapGroup; ++i) {
      const u64 block = group + i;
      seen[i] = block < end ? device_atomic<u64>(c.blocks[cache_hash_home(block, c.hash_len)])
                                  .load(cuda::memory_order_relaxed)
                            : 0;
    }
    u32 elsewhere = 0;
    for (u32 i = 0; i < kCacheMapGroup; ++i) {
      const u64 block = group + i;
      if (block >= end) break;
      if (seen[i] >> 32 == block + 1) {
        device_atomic<u64>(c.blocks[cache_hash_home(block, c.hash_len)])
            .store((block + 1) << 32 | value, cuda::memory_order_relaxed);
      } else {
        elsewhere |= 1u << i;
      }
    }
    AM_CACHE_ROLLED
    for (; elsewhere != 0; elsewhere &= elsewhere - 1) {
      cache_map_block(c, group + (u32)(__ffs(elsewhere) - 1), value);
    }
  }
}

// The block table's value for block `block` (cache_block_value), or 0 when no slab holds it.
__device__ inline u32 cache_block_lookup(const DeviceCaches& c, u64 block) {
  const u64 key = block + 1;
  u64 at = cache_hash_home(block, c.hash_len);
  for (u32 probes = 0; probes < c.hash_len; ++probes) {
    const u64 current = device_atomic<u64>(c.blocks[at]).load(cuda::memory_order_acquire);
    if (current == 0) return 0;
    if (current >> 32 == key) return (u32)current;
    at = (at + 1) & (c.hash_len - 1);
  }
  return 0;
}

// The slab holding block `block`, or -1.
__device__ inline int cache_slab_of_block(const DeviceCaches& c, u64 block) {
  return cache_block_slab(cache_block_lookup(c, block));
}

// Whether slab id `id` is class `cls`'s slab number `number` now. The number is read first
// (acquire; it is written last): if it is `number`, the class read after it is that placement's.
__device__ inline bool cache_is_slab(const DeviceCaches& c, u32 id, u32 cls, u32 number) {
  return device_atomic<u32>(c.slab_number[id]).load(cuda::memory_order_acquire) == number &&
         device_atomic<u32>(c.slab_class[id]).load(cuda::memory_order_relaxed) == cls;
}

// The id of class `cls`'s slab number `number`, of which the caller holds objects not handed
// out yet (so the slab cannot go back and its fields stay). The class's ring of ids has
// ring_len entries: a warp held up between taking its objects and reading the ring can find a
// later slab's id there (the class moved ring_len slabs on meanwhile, seen on the H200 with
// millions of threads allocating one class), so the entry is checked and, when it was
// overwritten, the slab is looked up among all ids. -1 only if no id holds it (a bug).
__device__ inline int cache_slab_of_number(const DeviceCaches& c, u32 cls, u32 number) {
  const u32 id = device_atomic<u32>(c.class_slab[cls * c.ring_len + (number & (c.ring_len - 1))])
                     .load(cuda::memory_order_acquire);
  if (cache_is_slab(c, id, cls, number)) return (int)id;
  for (u32 other = 0; other < c.max_slabs; ++other) {
    if (cache_is_slab(c, other, cls, number)) return (int)other;
  }
  return -1;
}

// The class lock's holder: claim entries `first..=last` of class `cls`, which `filled` showed,
// `first` the count the device has taken. true: the host has not taken them back, take them;
// false: it has (it needed the room), the claim is withdrawn and the entries count as not
// published. Store, fence, load against the host's recall (lower `filled`, fence, read
// `claimed`): one of the two sees the other's store (orchestrator/src/caches/channel.rs).
__device__ inline bool cache_claim(const DeviceCaches& c, u32 cls, u32 first, u32 last) {
  system_atomic<u32> claimed(c.claimed[cls]);
  claimed.store(last + 1, cuda::memory_order_relaxed);
  cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
  if (system_atomic<u32>(*const_cast<u32*>(&c.filled[cls])).load(cuda::memory_order_relaxed) >
      last) {
    return true;
  }
  claimed.store(first, cuda::memory_order_relaxed);
  return false;
}

// After a denial (class lock held): put a cursor that warps pushed past the end of slab number
// `seen` back to the end, so warps that keep finding the class used up while the host denies it
// slabs never carry the cursor into the slab number.
__device__ inline void cache_settle_cursor(device_atomic<u64>& word, u32 seen, u64 objects) {
  u64 current = word.load(cuda::memory_order_relaxed);
  while ((u32)(current >> kSlabNumberShift) == seen && (current & kCursorMask) > objects) {
    if (word.compare_exchange_weak(current, (u64)seen << kSlabNumberShift | objects,
                                   cuda::memory_order_relaxed, cuda::memory_order_relaxed)) {
      return;
    }
  }
}

// What cache_advance_locked found: the class moved on (by another warp), or the host denied the
// next slab (or the service stopped), or this lock holder claimed the slab and starts it (from
// the host's ring, or the one the move before claimed ahead, which the host counts taken).
constexpr u32 kAdvanceDenied = 0;
constexpr u32 kAdvanceMoved = 1;
constexpr u32 kAdvanceClaimed = 2;
constexpr u32 kAdvanceClaimedAhead = 3;

// The class lock's holder: the ring entry of the slab claimed ahead to become class `cls`'s slab
// number `number` in *entry, taken out of the class's words (`first << 32 | end`: the numbers
// held, then number n's entry at 1 + n % kCacheAheadSlabs); false when none was.
__device__ inline bool cache_take_ahead(const DeviceCaches& c, u32 cls, u32 number, u64* entry) {
  u64* ahead = c.class_ahead + (u64)cls * kCacheAheadWords;
  const u64 held = device_atomic<u64>(ahead[0]).load(cuda::memory_order_relaxed);
  const u32 first = (u32)(held >> 32), end = (u32)held;
  if (first != number || first >= end) return false;
  device_atomic<u64>(ahead[0]).store((u64)(first + 1) << 32 | end, cuda::memory_order_relaxed);
  device_atomic<u64> held_entry(ahead[1 + number % kCacheAheadSlabs]);
  *entry = held_entry.load(cuda::memory_order_relaxed);
  return true;
}

// The class lock's holder, having moved class `cls` to slab number `number`, with none held
// ahead: claim the host's next published slabs (entries `number..`, at most kCacheAheadSlabs) in
// one claim for the next moves, where the class claims ahead, and post them taken (the host
// counts them held from here). No ask and no wait: when none is published the next move asks as
// before. One claim's reads of the host's words (the count, the claim's fenced store and read,
// the entries) serve several moves.
__device__ inline void cache_claim_ahead(const DeviceCaches& c, u32 cls, u32 number) {
  u64* ahead = c.class_ahead + (u64)cls * kCacheAheadWords;
  const u64 held = device_atomic<u64>(ahead[0]).load(cuda::memory_order_relaxed);
  if (!cache_claims_ahead(cls) || (held >> 32) < (held & 0xFFFFFFFFull)) return;
  const u32 filled = cache_peek(&c.filled[cls]);
  if (filled <= number) return;
  const u32 count = filled - number < kCacheAheadSlabs ? filled - number : kCacheAheadSlabs;
  if (!cache_claim(c, cls, number, number + count - 1)) return;  // the host took them back
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  for (u32 index = number; index < number + count; ++index) {
    // Entry `index` becomes slab number index + 1.
    const u64* at = &c.ring[cls * c.ring_len + (index & (c.ring_len - 1))];
    const u64 entry = *reinterpret_cast<const volatile u64*>(at);
    device_atomic<u64>(ahead[1 + (index + 1) % kCacheAheadSlabs])
        .store(entry, cuda::memory_order_relaxed);
  }
  device_atomic<u64>(ahead[0]).store((u64)(number + 1) << 32 | (number + 1 + count),
                                     cuda::memory_order_relaxed);
  system_atomic<u32>(c.taken[cls]).store(number + count, cuda::memory_order_release);
}

// The class lock's holder: claim the slab after slab number `seen` of class `cls`, the host's
// ring entry in *entry; `*asks` numbers the asks it posts.
__device__ inline u32 cache_advance_locked(const DeviceCaches& c, const u32* closed, u32 cls,
                                           u32 seen, u32* asks, u64* entry) {
  device_atomic<u64> word(c.class_words[cls]);
  if ((u32)(word.load(cuda::memory_order_acquire) >> kSlabNumberShift) != seen) return kAdvanceMoved;
  if (cache_take_ahead(c, cls, seen + 1, entry)) return kAdvanceClaimedAhead;
  const u32 index = seen;  // slab number seen + 1 is the host's entry `seen`
  u32 ask = 0;
  u32 pause = kRefillPauseMinNs;
  for (u32 polls = 1;; ++polls) {
    if (cache_peek(&c.filled[cls]) > index) {
      if (cache_claim(c, cls, index, index)) {
        cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
        break;
      }
      ask = 0;  // the host took the entry back (it needed the room): ask afresh
    }
    if (ask == 0 && *asks != 0 && cache_peek(&c.denied[cls]) == *asks) {
      // The host denied the class's last ask and has not withdrawn it: no round trip per warp
      // while the caches are at their bound (the host publishes the slab when one fits).
      cache_settle_cursor(word, seen, cache_slab_objects(cls));
      return kAdvanceDenied;
    }
    if (ask == 0) {
      *asks = (*asks + 1) & 0x7FFFFFFFu;
      ask = *asks;
      system_atomic<u32>(c.demand[cls]).store(ask, cuda::memory_order_release);
    }
    if (cache_peek(&c.denied[cls]) == ask) {
      cache_settle_cursor(word, seen, cache_slab_objects(cls));
      return kAdvanceDenied;
    }
    if (polls % kPollsPerClosedCheck == 0 && system_atomic<u32>(*const_cast<u32*>(closed))
                                      .load(cuda::memory_order_acquire)) {
      return kAdvanceDenied;
    }
    __nanosleep(pause);
    pause = next_pause(pause, kRefillPauseMaxNs);
  }
  *entry =
      *reinterpret_cast<const volatile u64*>(&c.ring[cls * c.ring_len + (index & (c.ring_len - 1))]);
  return kAdvanceClaimed;
}

// Starting the claimed slab `entry` as class `cls`'s slab number `number` (class lock held), in
// three steps so that the lanes of a warp can share the middle one. First its fields, then its
// new life (release: a free that reads the life sees the fields); returns the life. The life is
// read before the stores (only the lock holder writes it), so its round trip overlaps theirs.
__device__ inline u32 cache_begin_slab(const DeviceCaches& c, u32 cls, u32 number, u64 entry) {
  const u32 id = cache_entry_id(entry);
  device_atomic<u32> life_word(c.slab_life[id]);
  const u32 life = life_word.load(cuda::memory_order_relaxed) + 1;
  device_atomic<u64>(c.slab_base[id]).store(cache_entry_base(entry), cuda::memory_order_relaxed);
  device_atomic<u32>(c.slab_class[id]).store(cls, cuda::memory_order_relaxed);
  device_atomic<u32>(c.slab_live[id]).store((u32)cache_slab_objects(cls), cuda::memory_order_relaxed);
  device_atomic<u32>(c.slab_generation[id]).store(cache_entry_stamp(entry), cuda::memory_order_relaxed);
  // The number last (release): a reader that sees it sees the class above (cache_is_slab).
  device_atomic<u32>(c.slab_number[id]).store(number, cuda::memory_order_release);
  life_word.store(life, cuda::memory_order_release);
  return life;
}

// Share `part` of `parts` of slab `id`'s bitmap words as class `cls`'s in life `life` (a late
// free of an earlier life finds them and is refused): words part, part + parts, ... (side by side
// across the lanes).
__device__ inline void cache_slab_words_part(const DeviceCaches& c, u32 cls, u32 id, u32 life,
                                             u32 part, u32 parts) {
  const u32 words = (u32)((cache_slab_objects(cls) + 31) / 32);
  u64* bits = c.bits + (u64)id * kCacheBitmapWords;
  for (u32 i = part; i < words; i += parts) {
    device_atomic<u64>(bits[i]).store((u64)life << 32, cuda::memory_order_relaxed);
  }
}

// Share `part` of `parts` of the slab of `entry`'s blocks in the block table, after its life: a
// run of consecutive ones per part (lanes that take their parts in lane order map the blocks in
// order, as one lane does, so the table's probes come out the same).
__device__ inline void cache_slab_blocks_part(const DeviceCaches& c, u32 cls, u64 entry, u32 part,
                                              u32 parts) {
  const u32 id = cache_entry_id(entry);
  const u64 blocks = cache_slab_blocks(cls);
  const u64 per_part = (blocks + parts - 1) / parts;
  const u64 first = (cache_entry_base(entry) >> 21) + part * per_part;
  const u64 last = (cache_entry_base(entry) >> 21) + blocks;
  for (u64 b = first; b < first + per_part && b < last; ++b) {
    cache_map_block(c, b, cache_block_value(id, cls));
  }
}

// Share `part` of `parts` of the middle step, after the life: the slab's bitmap words in its new
// life, then its blocks.
__device__ inline void cache_prepare_slab_part(const DeviceCaches& c, u32 cls, u64 entry, u32 life,
                                               u32 part, u32 parts) {
  cache_slab_words_part(c, cls, cache_entry_id(entry), life, part, parts);
  cache_slab_blocks_part(c, cls, entry, part, parts);
}

// The class lock's holder, after class `cls` moved: the slab held ahead that its next move
// makes current, if any (its ring entry and number). The holder starts it before it gives the
// lock back (its fields, life, bitmap words and blocks), so that move only moves the class word:
// the class's warps wait for no start. A free that finds its blocks meanwhile reads a slab
// number one past the class word's, and is judged as by a current slab with nothing handed out.
__device__ inline bool cache_next_ahead(const DeviceCaches& c, u32 cls, u64* entry, u32* number) {
  u64* ahead = c.class_ahead + (u64)cls * kCacheAheadWords;
  const u64 held = device_atomic<u64>(ahead[0]).load(cuda::memory_order_relaxed);
  const u32 first = (u32)(held >> 32);
  if (first >= (u32)held) return false;
  *entry =
      device_atomic<u64>(ahead[1 + first % kCacheAheadSlabs]).load(cuda::memory_order_relaxed);
  *number = first;
  return true;
}

// The last step: the class's ring of ids and its word move to the slab, the host learns it was
// taken (`found` kAdvanceClaimed; a slab claimed ahead was posted taken then), and the class
// claims the next one ahead. One release, the word's: a warp that takes objects from the slab
// sees the steps before and the ring's entry (which a reader checks against the slab's number
// anyway, cache_is_slab); the word is stored, not exchanged, as no one needs the old one.
__device__ inline void cache_finish_slab(const DeviceCaches& c, u32 cls, u32 number, u64 entry,
                                         u32 found) {
  device_atomic<u32>(c.class_slab[cls * c.ring_len + (number & (c.ring_len - 1))])
      .store(cache_entry_id(entry), cuda::memory_order_relaxed);
  device_atomic<u64>(c.class_words[cls]).store((u64)number << kSlabNumberShift,
                                                cuda::memory_order_release);
  if (found == kAdvanceClaimed) {
    system_atomic<u32>(c.taken[cls]).store(number, cuda::memory_order_release);
  }
  cache_claim_ahead(c, cls, number);
}

// One lane: take class `cls`'s lock, unless the class moved past slab number `seen` meanwhile
// (kAdvanceMoved), and find its next slab (cache_advance_locked). On kAdvanceClaimed and
// kAdvanceClaimedAhead the lock is still held, *asks to be written back with it; else it was
// given back. The class lock word is asks << 1 | held.
__device__ inline u32 cache_lock_and_advance(const DeviceCaches& c, const u32* closed, u32 cls,
                                             u32 seen, u32* asks, u64* entry) {
  device_atomic<u64> word(c.class_words[cls]);
  device_atomic<u32> lock(c.class_locks[cls]);
  u32 pause = kCacheLockPauseMinNs;
  for (;;) {
    if ((u32)(word.load(cuda::memory_order_acquire) >> kSlabNumberShift) != seen) {
      return kAdvanceMoved;
    }
    u32 current = lock.load(cuda::memory_order_relaxed);
    if ((current & 1u) == 0 &&
        lock.compare_exchange_strong(current, current | 1u, cuda::memory_order_acquire,
                                     cuda::memory_order_relaxed)) {
      *asks = current >> 1;
      const u32 found = cache_advance_locked(c, closed, cls, seen, asks, entry);
      if (found < kAdvanceClaimed) lock.store(*asks << 1, cuda::memory_order_release);
      return found;
    }
    __nanosleep(pause);
    pause = next_pause(pause, kCacheLockPauseMaxNs);
  }
}

__device__ inline void cache_unlock_class(const DeviceCaches& c, u32 cls, u32 asks) {
  device_atomic<u32>(c.class_locks[cls]).store(asks << 1, cuda::memory_order_release);
}

// One lane: move class `cls` past slab number `seen`, or learn that another warp did. 1: moved;
// 0: the host denied the next slab, or the service stopped.
__device__ inline u32 cache_advance(const DeviceCaches& c, const u32* closed, u32 cls, u32 seen) {
  u32 asks = 0;
  u64 entry = 0;
  const u32 found = cache_lock_and_advance(c, closed, cls, seen, &asks, &entry);
  if (found < kAdvanceClaimed) return found;
  if (found == kAdvanceClaimed) {  // a slab claimed ahead was started by the move before
    cache_prepare_slab_part(c, cls, entry, cache_begin_slab(c, cls, seen + 1, entry), 0, 1);
  }
  cache_finish_slab(c, cls, seen + 1, entry, found);
  u64 next = 0;
  u32 next_number = 0;
  if (cache_next_ahead(c, cls, &next, &next_number)) {
    cache_prepare_slab_part(c, cls, next, cache_begin_slab(c, cls, next_number, next), 0, 1);
  }
  cache_unlock_class(c, cls, asks);
  return kAdvanceMoved;
}

// The lanes of `mask` (a warp's lanes of class `cls`, `leader` among them): cache_advance with
// the lanes sharing the slab's bitmap words and blocks, so the class's other warps wait for a
// lane's share of them rather than for all (up to 4 096 words and 16 blocks); a slab claimed
// ahead was started by the move before, so the leader only moves the class word. The same
// return in every lane of `mask`.
__device__ inline u32 cache_advance_warp(const DeviceCaches& c, const u32* closed, u32 mask,
                                         u32 leader, u32 cls, u32 seen) {
  const u32 lane = lane_id();
  u32 asks = 0, found = 0, life = 0;
  u64 entry = 0;
  if (lane == leader) {
    found = cache_lock_and_advance(c, closed, cls, seen, &asks, &entry);
    if (found == kAdvanceClaimed) life = cache_begin_slab(c, cls, seen + 1, entry);
  }
  found = shfl32(mask, found, leader);
  if (found < kAdvanceClaimed) return found;
  const u32 part = (u32)__popc(mask & ((1u << lane) - 1u)), parts = (u32)__popc(mask);
  // A slab claimed ahead was started by the move before (cache_next_ahead): the class word
  // moves at once. Else the leader's fields and life before every lane's words; every lane's
  // words and blocks before the leader moves the class word.
  if (found == kAdvanceClaimed) {
    entry = shfl64(mask, entry, leader);
    life = shfl32(mask, life, leader);
    cache_lanes_meet(mask);
    cache_prepare_slab_part(c, cls, entry, life, part, parts);
    cache_lanes_meet(mask);
  }
  u32 ready = 0, next_life = 0;
  u64 next = 0;
  if (lane == leader) {
    cache_finish_slab(c, cls, seen + 1, entry, found);
    u32 next_number = 0;
    if (cache_next_ahead(c, cls, &next, &next_number)) {
      ready = 1;
      next_life = cache_begin_slab(c, cls, next_number, next);
    }
  }
  // The start of the slab the next move makes current, the same steps as above, while the
  // class's warps take objects from this one; every lane's before the leader gives the lock
  // back.
  if (shfl32(mask, ready, leader) != 0) {
    next = shfl64(mask, next, leader);
    next_life = shfl32(mask, next_life, leader);
    cache_lanes_meet(mask);
    cache_prepare_slab_part(c, cls, next, next_life, part, parts);
    cache_lanes_meet(mask);
  }
  if (lane == leader) cache_unlock_class(c, cls, asks);
  return kAdvanceMoved;
}

__device__ inline void cache_return_slab(const DeviceCaches& c, u32 id);

// Count `slots` of slab `id` freed: each count-down is a release (of what the counting lane did,
// and what it saw its warp's lanes do), and the one that reaches zero acquires them all (the
// release sequence of the count) and gives the slab back.
__device__ inline void cache_count_down(const DeviceCaches& c, u32 id, u32 slots) {
  if (device_atomic<u32>(c.slab_live[id]).fetch_sub(slots, cuda::memory_order_release) == slots) {
    cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device);
    cache_return_slab(c, id);
  }
}

// One lane of the run class: its `slots` slots with a fetch_add of its own. Run lanes take no
// part in their warp's shuffles: a warp-wide prefix sum among them while other lanes of the warp
// shuffle among their own class made the shuffles pair with the wrong instructions on the GPU
// (the soak lost frees), and objects this large gain little from one atomic per warp. true:
// *handle is its object; false: the host denied the class a slab, ask the host.
__device__ inline bool cache_alloc_run(const DeviceCaches& c, const u32* closed, u32 slots,
                                       u64* handle) {
  const u32 cls = kCacheRunClass;
  const u64 objects = cache_slab_objects(cls);
  for (;;) {
    const u64 word =
        device_atomic<u64>(c.class_words[cls]).fetch_add(slots, cuda::memory_order_acquire);
    const u32 number = (u32)(word >> kSlabNumberShift);
    const u64 slot = word & kCursorMask;
    if (number != 0 && slot < objects) {
      const int found = cache_slab_of_number(c, cls, number);
      if (found < 0) return false;  // cannot happen (see cache_slab_of_number): ask the host
      const u32 id = (u32)found;
      if (slot + slots <= objects) {
        const u64 base = device_atomic<u64>(c.slab_base[id]).load(cuda::memory_order_relaxed);
        const u32 stamp = device_atomic<u32>(c.slab_generation[id]).load(cuda::memory_order_relaxed);
        const u32 life = device_atomic<u32>(c.slab_life[id]).load(cuda::memory_order_relaxed);
        device_atomic<u64>(c.bits[(u64)id * kCacheBitmapWords + kCacheRunSpansAt + slot])
            .store((u64)life << 32 | slots, cuda::memory_order_release);
        *handle = handle_cached(base + (slot << kCacheRunSlotLog2), stamp);
        return true;
      }
      // Its slots cross the slab's end (one lane per slab life): no object will take the slots
      // left there, so they count as freed now.
      cache_count_down(c, id, (u32)(objects - slot));
    }
    if (!cache_advance(c, closed, cls, number)) return false;
  }
}

// The lanes of `mask` (all asking a cache class; `cls` is this lane's, `slots` the slots its
// object takes) allocate together: each class's lanes with one atomic, side by side. When some
// lane asks the run class, every lane of `mask` first takes part in one round of shuffles that
// sums each class's slots below it (the same instructions in every lane: shuffles among one
// class's lanes alone, while other lanes shuffle among theirs, paired with the wrong
// instructions on the GPU and the soak lost frees). Run lanes left over when their slab runs out
// go on alone (cache_alloc_run). true: *handle is this lane's object; false: the host denied its
// class a slab, ask the host.
__device__ inline bool cache_alloc(const DeviceCaches& c, const u32* closed, u32 mask, u32 cls,
                                   u32 slots, u64* handle) {
  const u32 lane = lane_id();
  u32 pending = cache_match(mask, cls);
  u64 below = __popc(pending & ((1u << lane) - 1u));
  u64 total = __popc(pending);
  if (cache_ballot(mask, cls == kCacheRunClass) != 0) {
    below = 0;
    total = 0;
    for (u32 m = mask; m != 0; m &= m - 1) {
      const u32 source = __ffs(m) - 1;
      const u32 their_class = shfl32(mask, cls, source);
      const u64 theirs = shfl64(mask, slots, source);
      if (their_class == cls) {
        total += theirs;
        if (source < lane) below += theirs;
      }
    }
  }
  const bool run = cls == kCacheRunClass;
  const u64 objects = cache_slab_objects(cls);
  const u32 log2 = cache_slot_log2(cls);
  for (;;) {
    const u32 leader = __ffs(pending) - 1;
    u64 word = 0, base = 0, stamp = 0, place = 0;
    u32 lost = 0;
    if (lane == leader) {
      // Acquire (the slab's state, which the class word's move released; a fetch_add after it
      // carries that release on): nothing a lane wrote before is for a reader of the cursor,
      // and a release here would fence every allocating warp.
      word = device_atomic<u64>(c.class_words[cls]).fetch_add(total, cuda::memory_order_acquire);
      const u32 number = (u32)(word >> kSlabNumberShift);
      if (number != 0 && (word & kCursorMask) < objects) {
        const int id = cache_slab_of_number(c, cls, number);
        if (id >= 0) {
          base = device_atomic<u64>(c.slab_base[id]).load(cuda::memory_order_relaxed);
          stamp = device_atomic<u32>(c.slab_generation[id]).load(cuda::memory_order_relaxed);
          const u32 life = device_atomic<u32>(c.slab_life[id]).load(cuda::memory_order_relaxed);
          place = (u64)life << 32 | (u32)id;
        } else {
          lost = 1;  // cannot happen (see cache_slab_of_number): the lanes ask the host
        }
      }
    }
    if (shfl64(pending, lost, leader) != 0) return false;
    word = shfl64(pending, word, leader);
    base = shfl64(pending, base, leader);
    stamp = shfl64(pending, stamp, leader);
    place = shfl64(pending, place, leader);
    const u32 number = (u32)(word >> kSlabNumberShift);
    const u64 slot = (word & kCursorMask) + below;
    const bool got = number != 0 && slot + slots <= objects;
    const u32 id = (u32)place;
    const u32 served = cache_ballot(pending, got);
    // After the ballot (no warp-wide instruction follows a lane's own way through the atomics,
    // see cache_free): this lane's slots cross the slab's end (one lane per slab life), and no
    // object will take the slots left there, so they count as freed now.
    if (run && number != 0 && slot < objects && !got) cache_count_down(c, id, (u32)(objects - slot));
    if (got) {
      if (run) {
        device_atomic<u64>(c.bits[(u64)id * kCacheBitmapWords + kCacheRunSpansAt + slot])
            .store((place >> 32) << 32 | slots, cuda::memory_order_release);
      }
      *handle = handle_cached(base + (slot << log2), (u32)stamp);
      return true;
    }
    if (run) return cache_alloc_run(c, closed, slots, handle);
    pending &= ~served;
    below = __popc(pending & ((1u << lane) - 1u));
    total = __popc(pending);
    const u32 next = __ffs(pending) - 1;
    if (!cache_advance_warp(c, closed, pending, next, cls, number)) return false;
  }
}

// Every object of slab `id` was freed: unmap it and post it to the host. Its bitmap stays all
// set, so a late second free is refused until the next life clears it.
__device__ inline void cache_return_slab(const DeviceCaches& c, u32 id) {
  const u32 cls = device_atomic<u32>(c.slab_class[id]).load(cuda::memory_order_relaxed);
  const u64 base = device_atomic<u64>(c.slab_base[id]).load(cuda::memory_order_relaxed);
  // The returns entry first (relaxed: it only has to be unique), so its round trip overlaps the
  // block table's probes; nothing is published until the entry's store below.
  const u64 i = device_atomic<u64>(*c.returns_claimed).fetch_add(1, cuda::memory_order_relaxed);
  cache_map_blocks(c, base >> 21, cache_slab_blocks(cls), 0);
  const u64 lap = i / c.max_slabs + 1;
  // Release at system scope: the host, and through it the warp that starts the slab again, sees
  // the blocks unmapped and every free of this life (the count-down's acquire) before it.
  system_atomic<u64>(c.returns[i % c.max_slabs]).store(lap << 32 | id, cuda::memory_order_release);
}

// One lane's object in slab `id`, whose class the block table gave as `mapped_class`, before its
// bit: kLaneOk when it may be freed, with its slot, the slab's life it was judged in and the
// slots it covers; any other LaneStatus is the lane's outcome.
__device__ inline u32 cache_judge_free(const DeviceCaches& c, u32 mapped_class, u32 id,
                                       u64 address, u32 stamp, u64* slot, u32* life, u32* slots) {
  // The class word beside the life, not after the fields: one round trip fewer. Relaxed: an
  // object handed out before this free was reads a word at or past its own fetch_add, and the
  // word is compared only with the slab's number read below.
  u64 word = device_atomic<u64>(c.class_words[mapped_class]).load(cuda::memory_order_relaxed);
  // The life first among the slab's fields: the fields read below are this life's or a later
  // one's, and the bit is set only in a word of this life.
  *life = device_atomic<u32>(c.slab_life[id]).load(cuda::memory_order_acquire);
  const u32 number = device_atomic<u32>(c.slab_number[id]).load(cuda::memory_order_relaxed);
  // Then the stamp: a handle of an earlier slab on these blocks (of any class; the cache
  // generations of a block only grow) or of a host chunk there before is a second free wherever
  // in the new slab it points. 0 (a free by address) is not checked. The class and base are read
  // before the check, so their round trips overlap the stamp's.
  const u32 current = device_atomic<u32>(c.slab_generation[id]).load(cuda::memory_order_relaxed);
  const u32 cls = device_atomic<u32>(c.slab_class[id]).load(cuda::memory_order_relaxed);
  const u64 base = device_atomic<u64>(c.slab_base[id]).load(cuda::memory_order_relaxed);
  if (stamp != 0 && stamp != current) return kLaneDoubleFree;
  const u32 log2 = cache_slot_log2(cls);
  const u64 offset = address - base;
  if ((offset >> log2) >= cache_slab_objects(cls)) return kLaneInvalidHandle;
  if (offset & ((1ull << log2) - 1)) return kLaneInteriorPointer;
  *slot = offset >> log2;
  if (cls != mapped_class) {
    // The slab went back and started again in another class since the probe.
    word = device_atomic<u64>(c.class_words[cls]).load(cuda::memory_order_relaxed);
  }
  const u32 current_number = (u32)(word >> kSlabNumberShift);
  if (number == current_number + 1 || (number == current_number && *slot >= (word & kCursorMask))) {
    // Not handed out in this life (the slab started ahead of the class's current one, or past
    // the cursor): a pointer (no stamp) can only be of an earlier life of the blocks, a second
    // free; a handle of this life was made up.
    return stamp == 0 ? (u32)kLaneDoubleFree : (u32)kLaneInvalidHandle;
  }
  *slots = 1;
  if (cls == kCacheRunClass) {
    // A run object starts where its span was written in this life; any other slot handed out
    // lies inside an object (or past the slab's last one).
    const u64 span =
        device_atomic<u64>(c.bits[(u64)id * kCacheBitmapWords + kCacheRunSpansAt + *slot])
            .load(cuda::memory_order_acquire);
    if ((u32)(span >> 32) != *life || (u32)span == 0) {
      return stamp == 0 ? (u32)kLaneInteriorPointer : (u32)kLaneInvalidHandle;
    }
    *slots = (u32)span;
  }
  return kLaneOk;
}

// The lanes of `mask` (each reaches it) set their objects' bits, those with `judged_ok` (slot
// `slot` of slab `id`, judged in life `life`) each getting kLaneOk, or kLaneDoubleFree when its
// bit was set already or the word is of another life (the slab went back, or came back, since);
// any other lane gets `status` back. One atomic OR per bitmap word and life for the lanes that
// share it, by the lowest of them, instead of one per lane: the lanes of a warp mostly free
// neighbours, and same-word atomics wait on each other. Where lanes free one object, the lowest
// sets its bit and the others are second frees, as when their atomics landed in lane order.
// The word's life comes back with the bits, from the one atomic, so the outcome is judged in
// the life the bits landed in. Bits that landed in a later life are taken back at once: only a
// free that stalled across the slab's return and its next start gets there, and only a free of
// those slots' new objects between these two atomics could then be refused. Relaxed: the word's
// atomicity is the judgement; what the lanes did before the free is ordered by the warp's
// barrier and its count-down's release (cache_free), which nothing can pass before the bits are
// set.
//
// Every warp-wide instruction here is taken by every lane of `mask`, with `mask`, the same
// number of times: the OR of a word's bits is one reduction of the whole mask per word. Where the
// lanes of a word met among themselves (their own mask, none for a word of one lane), a lane
// that had no such meeting went on to the free's next instruction while the others still met;
// on the GPU that pairs the lanes' instructions wrongly (docs/caches.md, the bit step's
// meetings): a shuffle of the whole mask after them answered live objects' frees as second
// frees, and a build with the free's loads ahead of the stamp check stopped at the word's own
// shuffle with an illegal instruction.
__device__ inline u32 cache_set_bits(const DeviceCaches& c, u32 mask, bool judged_ok, u32 id,
                                     u64 slot, u32 life, u32 status) {
  const u64 word_index = (u64)id * kCacheBitmapWords + slot / 32;
  const u32 bit = 1u << (slot % 32);
  // Lanes not freeing here share the one key no word has (a word index is below 2^27).
  const u32 same_word = cache_match64(mask, judged_ok ? (u64)life << 32 | word_index : ~0ull);
  const u32 same_object = same_word & cache_match(mask, judged_ok ? bit : 0u);
  const u32 lane = lane_id();
  const bool first = lane == (u32)(__ffs(same_object) - 1);
  const u32 setter = (u32)(__ffs(same_word) - 1);
  const u32 mine = judged_ok && first ? bit : 0u;
  // Each word's bits, into its setter: one reduction of the whole mask per word (mostly one or
  // two: a warp's lanes mostly free neighbours).
  u32 bits = 0;
  const u32 setters = cache_ballot(mask, judged_ok && lane == setter);
  for (u32 left = setters; left != 0; left &= left - 1) {
    const u32 word_setter = (u32)(__ffs(left) - 1);
    const u32 theirs = cache_reduce_or(mask, (same_word >> word_setter & 1u) ? mine : 0u);
    if (lane == word_setter) bits = theirs;
  }
  // The word's bits that this free set in the judged life: none when the word is of another.
  u32 landed_here = 0;
  if (judged_ok && lane == setter) {
    device_atomic<u64> word(c.bits[word_index]);
    const u64 before = word.fetch_or(bits, cuda::memory_order_relaxed);
    const u32 landed = bits & ~(u32)before;
    if ((u32)(before >> 32) == life) {
      landed_here = landed;
    } else if (landed != 0) {
      word.fetch_and(~(u64)landed, cuda::memory_order_relaxed);
    }
  }
  // Each lane from its word's setter, in one shuffle of the whole mask.
  landed_here = shfl32(mask, landed_here, setter);
  if (!judged_ok) return status;
  return first && (landed_here & bit) != 0 ? (u32)kLaneOk : (u32)kLaneDoubleFree;
}

// The lanes of `mask` free together; `stamp` is the handle's handle_free_stamp (0 for a free by
// address), `mapped` the block table's value for the address's block (0 for a null address).
// true when this lane's address lies in a cache slab: *lane_status is its outcome and
// *any_failed whether some lane of `mask` failed in the caches. false: ask the host.
__device__ inline bool cache_free(const DeviceCaches& c, u32 mask, u64 address, u32 stamp,
                                  u32 mapped, u32* lane_status, bool* any_failed) {
  const int slab = cache_block_slab(mapped);
  // A handle a cache slab made whose blocks no slab holds now: its slab went back after its
  // last object was freed, so this is a second free, judged here.
  const bool stale = slab < 0 && address != 0 && stamp >= kCacheStampFlag;
  const bool mine = slab >= 0 || stale;
  u64 slot = 0;
  u32 life = 0, slots = 0;
  u32 status = slab >= 0 ? cache_judge_free(c, cache_block_class(mapped), (u32)slab, address,
                                            stamp, &slot, &life, &slots)
                         : (stale ? (u32)kLaneDoubleFree : (u32)kLaneOk);
  status = cache_set_bits(c, mask, slab >= 0 && status == kLaneOk, slab >= 0 ? (u32)slab : 0u,
                          slot, life, status);
  const bool ok = mine && status == kLaneOk;
  // Every lane's accesses to its object before any count-down of the warp: the warp's barrier
  // orders them before what the lanes do after it (CUDA guarantees memory ordering among the
  // lanes of a __syncwarp), and the counting lanes' releases carry them on (docs/caches.md, Free).
  if (!is_lone_lane(mask)) __syncwarp(mask);
  // Every warp-wide instruction first, each taken by every lane of `mask` and its result used
  // on every path; only then the atomics, where lanes go their own ways (a run object's
  // count-down may give its slab back). With the match taken by the ok lanes alone and the
  // ballots after the count-downs, lanes of one free waited at different warp-wide
  // instructions on the GPU: the soak hung, or counted some frees of a warp nowhere.
  const u32 same = cache_match(mask, ok ? (u32)slab : ~0u);
  const u32 freed_mask = cache_ballot(mask, ok);
  *any_failed = cache_ballot(mask, mine && !ok) != 0;
  // These lanes set their bits in the slab's current life, so it stays live until they count
  // down; the one that reaches zero gives it back. A power-of-two class counts down once for
  // its lanes of the slab (the lowest of them), a run object (which may span many slots) alone.
  const u32 lane = lane_id();
  const u32 count = slots != 1 ? slots : (u32)__popc(same);
  if (ok && (slots != 1 || lane == (u32)(__ffs(same) - 1))) cache_count_down(c, (u32)slab, count);
  u64* counters = c.counters + (u64)(sm_id() % kCacheCounterStripes) * kCacheFreeCounters;
  if (mine && !ok) atomicAdd(&counters[status], 1ull);  // bad frees: rare, one atomic each
  if (ok && lane == (u32)(__ffs(freed_mask) - 1)) {
    atomicAdd(&counters[kLaneOk], (u64)__popc(freed_mask));
  }
  *lane_status = status;
  return mine;
}

// ---- what the mailbox client calls (`orchestrator::caches::CpuCaches::alloc` and `free` on the
// CPU warps; device/hostcheck runs both on the same steps and compares them) ----------------------

// One lane asking `size` bytes (not 0), with the other lanes of its warp that got here: served
// from a cache when a class holds the size (run-class sizes where cache_run_class_serves says so
// for the warp's run lanes; `arranged`: an am::malloc, else am::malloc_contiguous). true:
// *handle is its object; false: ask the host (no class holds the size, or the host denied the
// class a slab).
__device__ inline bool cache_try_alloc(const DeviceCaches& c, const u32* closed, u64 size,
                                       bool arranged, u64* handle) {
  u32 cls = cache_class(size);
  const u32 active = __activemask();
  if (cache_ballot(active, cls == kCacheRunClass) != 0) {
    // The run class takes its lanes unless they would keep an arranged layout at the host.
    // Every active lane takes part in these shuffles (the run lanes' sizes, 0 from the
    // others), so no shuffle pairs with another group's (see cache_alloc_run).
    const u64 mine = cls == kCacheRunClass ? size : 0;
    u64 packed = 0, max = 0;
    for (u32 m = active; m != 0; m &= m - 1) {
      const u64 theirs = shfl64(active, mine, __ffs(m) - 1);
      packed += round16(theirs);
      if (theirs > max) max = theirs;
    }
    if (cls == kCacheRunClass && !cache_run_class_serves(arranged, max, packed)) {
      cls = kCacheClasses;
    }
  }
  if (cls >= kCacheClasses) return false;
  return cache_alloc(c, closed, __activemask(), cls, (u32)cache_object_slots(cls, size), handle);
}

// One lane freeing `word` (not 0: a handle, or an object's address unless `by_handle`), with
// the other lanes of its warp that got here. Only a lane whose object can be a cache object
// joins the caches' warp-wide free: a handle a cache made (its free stamp carries
// kCacheStampFlag), or an address in a block a slab holds now. Any other goes to the host, which
// answers a host handle into a slab's blocks as a second free. With host objects' lanes in that
// free, their frees waited for seconds in long kernels and the caches' slabs went unreturned
// (docs/caches.md, the soak). true: judged here, *lane_status its outcome and *any_failed
// whether some lane of the caches' free failed; false: ask the host.
__device__ inline bool cache_try_free(const DeviceCaches& c, u64 word, bool by_handle,
                                      u32* lane_status, bool* any_failed) {
  const u64 address = by_handle ? handle_address(word) : word;
  const u32 stamp = by_handle ? handle_free_stamp(word) : 0u;
  if (by_handle && stamp < kCacheStampFlag) return false;
  // One probe of the block table per free: a free by address finds here whether a slab holds
  // its block, and cache_free judges it with the same value.
  const u32 mapped = address != 0 ? cache_block_lookup(c, address >> 21) : 0u;
  if (!by_handle && cache_block_slab(mapped) < 0) return false;
  return cache_free(c, __activemask(), address, stamp, mapped, lane_status, any_failed);
}

}  // namespace detail
}  // namespace am

#endif  // ALIGNMALLOC_CACHE_CUH
