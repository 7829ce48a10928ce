// alignmalloc device caches: classes and slab geometry.
//
// The C++ twin of the functions of `orchestrator::caches::geometry` and of the block-table hash
// of `orchestrator::caches::device`; `device/hostcheck` holds them equal. Classes 0..11 hold
// objects of 16 << c bytes (16 B .. 32 KiB); a slab is a run of VABlocks of one class, 8192
// objects where they take at most 16 MiB, else at least 4096, at most 16 blocks. Class 12, the
// run class, serves 32 KiB + 1 B .. 4 MiB: its slab (16 blocks) is 2048 slots of 16 KiB, a lane
// takes ceil(size / 16 KiB) consecutive ones, and each object's span (slots, tagged with the
// slab's life) is kept in the slab's bitmap words from kCacheRunSpansAt on. Pure integer
// arithmetic: compiles under nvcc, NVRTC and host C++.
#ifndef ALIGNMALLOC_CACHE_GEOMETRY_H
#define ALIGNMALLOC_CACHE_GEOMETRY_H

#include <alignmalloc/detail/layout.h>

namespace am {

// The constants (kCache*, kSlabNumberShift, kCursorMask, kEntry*) are generated into abi.h. The
// class word: slab number (1-based; 0 = none yet) above kSlabNumberShift, cursor below. A ring
// entry: cache generation << kEntryGenerationShift | the slab's base (2 MiB aligned, below 2^48) |
// slab id (the low kEntryIdBits bits). Free counters: kCacheFreeCounters per stripe, one per
// LaneStatus of a device free; warps add to their SM's stripe.

// Leading zero bits of `x` (x != 0): one instruction on the device (both users below run on
// every allocation and free).
AM_HD u32 cache_clz64(u64 x) {
#if defined(__CUDA_ARCH__)
  return (u32)__clzll((long long)x);
#else
  return (u32)__builtin_clzll(x);
#endif
}

// The class serving a lane that asks `size` bytes; kCacheClasses for 0 and sizes over 4 MiB.
AM_HD u32 cache_class(u64 size) {
  if (size == 0 || size > kCachedMaxBytes) return kCacheClasses;
  if (size > kCachePowerClassesMaxBytes) return kCacheRunClass;
  if (size <= (1ull << kCacheMinObjectLog2)) return 0;
  return 64u - cache_clz64(size - 1) - kCacheMinObjectLog2;  // ceil(log2(size)) - 4
}

// log2 of one slot of class `cls`: its object size, or the run class's slot.
AM_HD u32 cache_slot_log2(u32 cls) {
  return cls == kCacheRunClass ? kCacheRunSlotLog2 : cls + kCacheMinObjectLog2;
}

AM_HD u64 cache_class_bytes(u32 cls) { return 1ull << cache_slot_log2(cls); }

// Slots an object of `size` bytes takes in class `cls` (1 outside the run class).
AM_HD u64 cache_object_slots(u32 cls, u64 size) {
  if (cls != kCacheRunClass) return 1;
  return (size + (1ull << kCacheRunSlotLog2) - 1) >> kCacheRunSlotLog2;
}

// Whether the run class serves the lanes of a warp over 32 KiB whose largest asks `max` and
// whose sizes, rounded to 16 B, sum to `packed`: only while `packed` is at most
// kCacheRunWarpMaxBytes (a warp asking more gets one chunk from the host in one round trip, where
// the run class would wait for a slab per 32 MiB); then always for contiguous objects, and for
// arranged ones only where the host would pack them (32 lanes of `max` rounded to 64 KiB over
// kArrangedMaxExpansion times `packed`), so warps whose lanes ask alike stay arranged.
AM_HD bool cache_run_class_serves(bool arranged, u64 max, u64 packed) {
  if (packed > kCacheRunWarpMaxBytes) return false;
  const u64 span = (max + (kLeafBytes - 1)) & ~(kLeafBytes - 1);
  return !arranged || (u64)kWarpLanes * span > kArrangedMaxExpansion * packed;
}

AM_HD u64 cache_slab_blocks(u32 cls) {
  if (cls == kCacheRunClass) return kCacheRunSlabBlocks;
  const u64 bytes = cache_class_bytes(cls);
  u64 wanted = kCacheSlabWantedObjects * bytes;
  if (wanted > kCacheSlabWantedMaxBytes) wanted = kCacheSlabWantedMaxBytes;
  if (wanted < kCacheSlabObjects * bytes) wanted = kCacheSlabObjects * bytes;
  const u64 blocks = wanted / kVablockBytes;
  return blocks < 1 ? 1 : (blocks > kCacheMaxSlabBlocks ? kCacheMaxSlabBlocks : blocks);
}

// Whether class `cls` claims its next slab ahead (slabs of at most kCacheClaimAheadMaxBlocks).
AM_HD bool cache_claims_ahead(u32 cls) {
  return cache_slab_blocks(cls) <= kCacheClaimAheadMaxBlocks;
}

AM_HD u64 cache_slab_objects(u32 cls) {
  return cache_slab_blocks(cls) * kVablockBytes / cache_class_bytes(cls);
}

AM_HD u32 cache_entry_id(u64 entry) { return (u32)(entry & ((1u << kEntryIdBits) - 1)); }
// The free stamp of the slab's objects (handle_free_stamp of each of its handles).
AM_HD u32 cache_entry_stamp(u64 entry) {
  return kCacheStampFlag | (u32)((entry >> kEntryGenerationShift) & (kCacheGenerations - 1));
}
AM_HD u64 cache_entry_base(u64 entry) { return entry & kAddressMask & ~(kVablockBytes - 1); }

// The block table's first probe for block number `block` in a table of `len` (a power of two)
// entries.
AM_HD u64 cache_hash_home(u64 block, u64 len) {
  return (block * 0x9E3779B97F4A7C15ull) >> (cache_clz64(len) + 1);  // >> (64 - log2(len))
}

// The block table's value for a block of slab `id` of class `cls`: id + 1, the class above
// kBlockClassShift (0: no slab holds the block). A free learns the class from its probe.
AM_HD u32 cache_block_value(u32 id, u32 cls) { return (id + 1) | cls << kBlockClassShift; }
// The slab id a block table value names, or -1 for none.
AM_HD int cache_block_slab(u32 value) { return (int)(value & ((1u << kBlockClassShift) - 1)) - 1; }
// The class a block table value names (of a value that names a slab).
AM_HD u32 cache_block_class(u32 value) { return value >> kBlockClassShift; }

}  // namespace am

#endif  // ALIGNMALLOC_CACHE_GEOMETRY_H
