// alignmalloc: the plain data the host and the device share.
//
// Generated from the Rust definitions by the `headergen` crate; do not edit. Each item names
// the Rust item it comes from, whose documentation says what it is. `cargo test -p headergen`
// fails when this file is stale (ALIGNMALLOC_BLESS=1 rewrites it). Plain integers only:
// compiles under nvcc, NVRTC and host C++.
#ifndef ALIGNMALLOC_ABI_H
#define ALIGNMALLOC_ABI_H

// The device settings' defaults (runtime::settings::DeviceSettings): each a macro named like its
// environment variable, so a build may set it (`nvcc -DALIGNMALLOC_POLL_PAUSE_MAX_NS=1024`).
#ifndef ALIGNMALLOC_POLL_PAUSE_MIN_NS
#define ALIGNMALLOC_POLL_PAUSE_MIN_NS 32
#endif
#ifndef ALIGNMALLOC_POLL_PAUSE_MAX_NS
#define ALIGNMALLOC_POLL_PAUSE_MAX_NS 4096
#endif
#ifndef ALIGNMALLOC_POLLS_PER_CLOSED_CHECK
#define ALIGNMALLOC_POLLS_PER_CLOSED_CHECK 1024
#endif
#ifndef ALIGNMALLOC_PORT_SWEEP_PAUSE_NS
#define ALIGNMALLOC_PORT_SWEEP_PAUSE_NS 256
#endif
#ifndef ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS
#define ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS 8
#endif
#ifndef ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS
#define ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS 64
#endif
#ifndef ALIGNMALLOC_REFILL_PAUSE_MIN_NS
#define ALIGNMALLOC_REFILL_PAUSE_MIN_NS 64
#endif
#ifndef ALIGNMALLOC_REFILL_PAUSE_MAX_NS
#define ALIGNMALLOC_REFILL_PAUSE_MAX_NS 4096
#endif

namespace am {

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;
static_assert(sizeof(u64) == 8 && sizeof(u32) == 4 && sizeof(u8) == 1,
              "alignmalloc needs 8-, 32- and 64-bit integers");

// ---- The unified-memory driver's sizes and the layout's

constexpr u32 kWarpLanes = 32u;  // translator::WARP_LANES
constexpr u64 kSmallAlign = 16ull;  // translator::SMALL_ALIGN
constexpr u64 kSmallUnitBytes = 256ull;  // translator::SMALL_UNIT_BYTES
constexpr u64 kLeafBytes = 65536ull;  // translator::LEAF_BYTES
constexpr u64 kVablockBytes = 2097152ull;  // uvm_geometry::VABLOCK_BYTES
constexpr u32 kMinTileLog2 = 12u;  // translator::MIN_TILE_LOG2
constexpr u32 kMaxTileLog2 = 16u;  // translator::MAX_TILE_LOG2
constexpr u32 kAddressBits = 48u;  // translator::ADDRESS_BITS
constexpr u64 kArrangedMaxExpansion = 2ull;  // translator::ARRANGED_MAX_EXPANSION
constexpr u32 kCacheGenerationsStart = 64u;  // translator::CACHE_GENERATIONS_START
constexpr u32 kCacheGenerations = 16384u;  // translator::CACHE_GENERATIONS
constexpr u32 kCacheStampFlag = 16384u;  // translator::CACHE_STAMP_FLAG

// ---- The mailbox's record sizes and port lock words

constexpr u32 kRequestWords = 34u;  // orchestrator::records::REQUEST_WORDS
constexpr u32 kReplyWords = 9u;  // orchestrator::records::REPLY_WORDS
constexpr u32 kLayoutContiguous = 255u;  // orchestrator::records::CONTIGUOUS_LAYOUT
constexpr u32 kPortHeld = 1u;  // orchestrator::cpu::PORT_HELD
constexpr u32 kPortOwed = 2u;  // orchestrator::cpu::PORT_OWED
constexpr u32 kOwedSeqMask = 1073741823u;  // orchestrator::cpu::OWED_SEQ_MASK

// ---- The device caches' classes, slabs and words

constexpr u32 kCacheClasses = 13u;  // orchestrator::caches::geometry::CACHE_CLASSES
constexpr u32 kCacheRunClass = 12u;  // orchestrator::caches::geometry::RUN_CLASS
constexpr u32 kCacheMinObjectLog2 = 4u;  // orchestrator::caches::geometry::MIN_OBJECT_LOG2
constexpr u64 kCachePowerClassesMaxBytes = 32768ull;  // orchestrator::caches::geometry::POWER_CLASSES_MAX_BYTES
constexpr u32 kCacheRunSlotLog2 = 14u;  // orchestrator::caches::geometry::RUN_SLOT_LOG2
constexpr u64 kCachedMaxBytes = 4194304ull;  // orchestrator::caches::geometry::CACHED_MAX_BYTES
constexpr u64 kCacheRunWarpMaxBytes = 4194304ull;  // orchestrator::caches::geometry::RUN_WARP_MAX_BYTES
constexpr u64 kCacheRunSlabBlocks = 16ull;  // orchestrator::caches::geometry::RUN_SLAB_BLOCKS
constexpr u32 kCacheRunSpansAt = 64u;  // orchestrator::caches::geometry::RUN_SPANS_AT
constexpr u64 kCacheSlabObjects = 4096ull;  // orchestrator::caches::geometry::SLAB_OBJECTS
constexpr u64 kCacheSlabWantedObjects = 8192ull;  // orchestrator::caches::geometry::SLAB_WANTED_OBJECTS
constexpr u64 kCacheSlabWantedMaxBytes = 16777216ull;  // orchestrator::caches::geometry::SLAB_WANTED_MAX_BYTES
constexpr u64 kCacheMaxSlabBlocks = 16ull;  // orchestrator::caches::geometry::MAX_SLAB_BLOCKS
constexpr u64 kCacheClaimAheadMaxBlocks = 2ull;  // orchestrator::caches::geometry::CLAIM_AHEAD_MAX_BLOCKS
constexpr u32 kCacheBitmapWords = 4096u;  // orchestrator::caches::geometry::BITMAP_WORDS
constexpr u32 kSlabNumberShift = 32u;  // orchestrator::caches::geometry::SLAB_NUMBER_SHIFT
constexpr u64 kCursorMask = 4294967295ull;  // orchestrator::caches::geometry::CURSOR_MASK
constexpr u32 kEntryIdBits = 15u;  // orchestrator::caches::channel::ENTRY_ID_BITS
constexpr u32 kEntryGenerationShift = 48u;  // orchestrator::caches::channel::ENTRY_GENERATION_SHIFT
constexpr u32 kBlockClassShift = 16u;  // orchestrator::caches::device::BLOCK_CLASS_SHIFT
constexpr u32 kCacheCounterStripes = 32u;  // orchestrator::caches::device::COUNTER_STRIPES
constexpr u32 kCacheFreeCounters = 4u;  // orchestrator::caches::device::FREE_COUNTERS
constexpr u32 kCacheAheadSlabs = 4u;  // orchestrator::caches::device::AHEAD_SLABS
constexpr u32 kCacheAheadWords = 5u;  // orchestrator::caches::device::AHEAD_WORDS

// ---- The device settings' bound

constexpr u32 kLongestPauseNs = 1000000u;  // runtime::settings::LONGEST_PAUSE_NS

// ---- The mailbox's codes

// orchestrator::records::Op
enum Op : u32 {
  kOpAlloc = 1,
  kOpAllocContiguous = 2,
  kOpFree = 3,
  kOpFreePointer = 4,
};

// orchestrator::records::Status
enum Status : u32 {
  kStatusOk = 0,
  kStatusOutOfMemory = 1,
  kStatusSizeOverLimit = 2,
  kStatusUnknownOp = 3,
  kStatusEmptyMask = 4,
  kStatusBadSequence = 5,
  kStatusShutdown = 6,
  kStatusPartial = 7,
  kStatusUnbound = 8,
};

// orchestrator::records::LaneStatus
enum LaneStatus : u32 {
  kLaneOk = 0,
  kLaneInvalidHandle = 1,
  kLaneDoubleFree = 2,
  kLaneInteriorPointer = 3,
  kLaneCachedObject = 4,
};

// ---- The mailbox's records

// orchestrator::records::RequestRecord
struct RequestRecord {
  u32 op;
  u32 lane_mask;
  u32 warp;
  u32 reserved;
  u64 words[32];
};
static_assert(sizeof(RequestRecord) == 272, "RequestRecord is laid out as in Rust");
#if !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(RequestRecord, op) == 0, "RequestRecord::op is laid out as in Rust");
static_assert(__builtin_offsetof(RequestRecord, lane_mask) == 4, "RequestRecord::lane_mask is laid out as in Rust");
static_assert(__builtin_offsetof(RequestRecord, warp) == 8, "RequestRecord::warp is laid out as in Rust");
static_assert(__builtin_offsetof(RequestRecord, reserved) == 12, "RequestRecord::reserved is laid out as in Rust");
static_assert(__builtin_offsetof(RequestRecord, words) == 16, "RequestRecord::words is laid out as in Rust");
#endif

// orchestrator::records::ReplyRecord
struct ReplyRecord {
  u32 status;
  u32 size_class;
  u32 tile_log2;
  u32 layout;
  u64 chunk_base;
  u64 lane_span;
  u32 reserved;
  u32 failed_lanes;
  u8 lane_status[32];
};
static_assert(sizeof(ReplyRecord) == 72, "ReplyRecord is laid out as in Rust");
#if !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(ReplyRecord, status) == 0, "ReplyRecord::status is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, size_class) == 4, "ReplyRecord::size_class is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, tile_log2) == 8, "ReplyRecord::tile_log2 is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, layout) == 12, "ReplyRecord::layout is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, chunk_base) == 16, "ReplyRecord::chunk_base is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, lane_span) == 24, "ReplyRecord::lane_span is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, reserved) == 32, "ReplyRecord::reserved is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, failed_lanes) == 36, "ReplyRecord::failed_lanes is laid out as in Rust");
static_assert(__builtin_offsetof(ReplyRecord, lane_status) == 40, "ReplyRecord::lane_status is laid out as in Rust");
#endif

// orchestrator::records::DeviceCaches
struct DeviceCaches {
  u32 classes;
  u32 max_slabs;
  u32 hash_len;
  u32 ring_len;
  u64* class_words;
  u32* class_locks;
  u32* class_slab;
  u64* slab_base;
  u32* slab_class;
  u32* slab_live;
  u32* slab_number;
  u32* slab_generation;
  u32* slab_life;
  u64* bits;
  u64* blocks;
  u64* returns_claimed;
  u64* counters;
  u64* class_ahead;
  const u32* filled;
  const u32* denied;
  const u64* ring;
  u32* taken;
  u32* demand;
  u64* returns;
  u32* claimed;
};
static_assert(sizeof(DeviceCaches) == 184, "DeviceCaches is laid out as in Rust");
#if !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(DeviceCaches, classes) == 0, "DeviceCaches::classes is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, max_slabs) == 4, "DeviceCaches::max_slabs is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, hash_len) == 8, "DeviceCaches::hash_len is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, ring_len) == 12, "DeviceCaches::ring_len is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, class_words) == 16, "DeviceCaches::class_words is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, class_locks) == 24, "DeviceCaches::class_locks is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, class_slab) == 32, "DeviceCaches::class_slab is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, slab_base) == 40, "DeviceCaches::slab_base is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, slab_class) == 48, "DeviceCaches::slab_class is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, slab_live) == 56, "DeviceCaches::slab_live is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, slab_number) == 64, "DeviceCaches::slab_number is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, slab_generation) == 72, "DeviceCaches::slab_generation is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, slab_life) == 80, "DeviceCaches::slab_life is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, bits) == 88, "DeviceCaches::bits is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, blocks) == 96, "DeviceCaches::blocks is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, returns_claimed) == 104, "DeviceCaches::returns_claimed is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, counters) == 112, "DeviceCaches::counters is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, class_ahead) == 120, "DeviceCaches::class_ahead is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, filled) == 128, "DeviceCaches::filled is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, denied) == 136, "DeviceCaches::denied is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, ring) == 144, "DeviceCaches::ring is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, taken) == 152, "DeviceCaches::taken is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, demand) == 160, "DeviceCaches::demand is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, returns) == 168, "DeviceCaches::returns is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceCaches, claimed) == 176, "DeviceCaches::claimed is laid out as in Rust");
#endif

// orchestrator::records::DeviceMailbox
struct DeviceMailbox {
  u32 ports;
  u32 reserved;
  u32* req_seq;
  RequestRecord* requests;
  const u32* ack_seq;
  const ReplyRecord* replies;
  const u32* closed;
  u32* locks;
  DeviceCaches caches;
};
static_assert(sizeof(DeviceMailbox) == 240, "DeviceMailbox is laid out as in Rust");
#if !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(DeviceMailbox, ports) == 0, "DeviceMailbox::ports is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, reserved) == 4, "DeviceMailbox::reserved is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, req_seq) == 8, "DeviceMailbox::req_seq is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, requests) == 16, "DeviceMailbox::requests is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, ack_seq) == 24, "DeviceMailbox::ack_seq is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, replies) == 32, "DeviceMailbox::replies is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, closed) == 40, "DeviceMailbox::closed is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, locks) == 48, "DeviceMailbox::locks is laid out as in Rust");
static_assert(__builtin_offsetof(DeviceMailbox, caches) == 56, "DeviceMailbox::caches is laid out as in Rust");
#endif

}  // namespace am

#endif  // ALIGNMALLOC_ABI_H
