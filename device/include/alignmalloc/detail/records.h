// alignmalloc mailbox records: what a warp posts and what the host answers.
//
// The C++ twin of `orchestrator::records`; `device/hostcheck` checks sizes, field offsets and
// codes against the Rust definitions. Plain integers only: compiles under nvcc, NVRTC and host C++.
#ifndef ALIGNMALLOC_RECORDS_H
#define ALIGNMALLOC_RECORDS_H

#include <alignmalloc/detail/layout.h>

namespace am {

// kOpFreePointer: each lane's word is an object's first-byte address (free(void*)), not a handle.
enum Op : u32 { kOpAlloc = 1, kOpAllocContiguous = 2, kOpFree = 3, kOpFreePointer = 4 };

// Whole-warp outcome.
enum Status : u32 {
  kStatusOk = 0,
  kStatusOutOfMemory = 1,   // no room for the chunk; nothing allocated
  kStatusSizeOverLimit = 2, // a lane asked more than the per-lane limit; nothing allocated
  kStatusUnknownOp = 3,
  kStatusEmptyMask = 4,
  kStatusBadSequence = 5,   // the port's sequence number skipped; request dropped, port resynced
  kStatusShutdown = 6,      // the service stopped; request not served
  kStatusPartial = 7,       // some lanes of a free failed (see lane_status)
  kStatusUnbound = 8,       // the mailbox was never bound (all zero); nothing sent (device only)
};

// Per-lane outcome of a free.
enum LaneStatus : u32 {
  kLaneOk = 0,
  kLaneInvalidHandle = 1,   // points into nothing the allocator handed out
  kLaneDoubleFree = 2,      // already freed, or a stale handle
  kLaneInteriorPointer = 3, // inside a chunk, not at a lane object's start
  kLaneCachedObject = 4,    // an object of a device cache, given to a host free (host only)
};

struct RequestRecord {
  u32 op;         // Op
  u32 lane_mask;  // lanes taking part
  u32 warp;       // sender's global warp id (tracing)
  u32 reserved;   // 0
  u64 words[32];  // sizes (alloc) or handles (free), one per lane
};

struct ReplyRecord {
  u32 status;       // Status
  u32 size_class;   // SizeClass of the chunk
  u32 tile_log2;    // 0 for small chunks
  u32 layout;       // SlotOrder, or kLayoutContiguous
  u64 chunk_base;   // 0 when no lane asked for memory
  u64 lane_span;
  u32 reserved;     // 0
  u32 failed_lanes; // frees: lanes whose free failed
  unsigned char lane_status[32];  // frees: LaneStatus per lane; allocations: each lane's generation
};

// The device caches (detail/cache.cuh): sizes, the device-memory arrays, and the channel's words
// in pinned host memory. All zero: no caches, every allocation asks the host.
struct DeviceCaches {
  u32 classes;
  u32 max_slabs;
  u32 hash_len;              // power of two
  u32 ring_len;              // power of two
  // device memory
  u64* class_words;          // per class: slab number << 32 | cursor
  u32* class_locks;          // per class
  u32* class_slab;           // per class and ring entry: slab id of slab number n at n % ring_len
  u64* slab_base;            // per slab id
  u32* slab_class;
  u32* slab_live;
  u32* slab_number;
  u32* slab_generation;      // its objects' free stamp: kCacheStampFlag | cache generation
  u32* slab_life;            // times the id became current
  u64* bits;                 // per slab id, kCacheBitmapWords words: life << 32 | freed objects
  u64* blocks;               // block table: (block + 1) << 32 | (slab id + 1)
  u64* returns_claimed;      // one word
  u64* counters;             // kCacheCounterStripes x 4: device frees by LaneStatus code
  // pinned host memory, written by the host
  const u32* filled;         // per class
  const u32* denied;         // per class
  const u64* ring;           // per class and ring entry: slab base | slab id
  // pinned host memory, written by the device
  u32* taken;                // per class (the class lock's holder)
  u32* demand;               // per class (the class lock's holder)
  u64* returns;              // max_slabs entries: lap << 32 | slab id
  u32* claimed;              // per class (the class lock's holder): entry being taken + 1
};

// What a kernel needs to reach the service thread; the runtime fills it in and passes it by
// value (or binds it as the default mailbox, see alignmalloc.cuh). An all-zero mailbox (ports 0)
// is unbound: every call through it answers kStatusUnbound without touching memory. Ports live in pinned host memory mapped for the device; the port locks live in device
// memory. A port's next sequence number is its acknowledged one plus 1: the lock holder is the
// port's only device writer and every earlier request on it was acknowledged before the lock was
// released, so no device-side copy (which a stale cache line could make lie) is kept.
struct DeviceMailbox {
  u32 ports;
  u32 reserved;
  u32* req_seq;               // host memory, written by the device
  RequestRecord* requests;    // host memory, written by the device
  const u32* ack_seq;         // host memory, written by the host
  const ReplyRecord* replies; // host memory, written by the host
  const u32* closed;          // host memory, written by the host
  u32* locks;                 // device memory
  DeviceCaches caches;        // device caches (classes 0: none)
};

constexpr u32 kRequestWords = 34;
constexpr u32 kReplyWords = 9;
static_assert(sizeof(RequestRecord) == kRequestWords * 8, "RequestRecord is 34 words");
static_assert(sizeof(ReplyRecord) == kReplyWords * 8, "ReplyRecord is 9 words");

}  // namespace am

#endif  // ALIGNMALLOC_RECORDS_H
