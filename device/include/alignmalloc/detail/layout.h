// alignmalloc layout: size classes, handles and address translation.
//
// The CUDA C++ twin of the Rust crate `translator`; a parity test (host C++ and GPU) holds the two
// equal on random inputs. Every function is __host__ __device__ and pure integer arithmetic: no
// includes, no CUDA runtime calls, so this header compiles under nvcc, NVRTC and plain host C++.
//
// Handle (64 bits):
//   63     kind      0 = plain, 1 = arranged
//   62..60 tile      tile_log2 - 12 (0..4: 4 KiB..64 KiB)
//   59..55 lane      owner lane
//   54..48 gen       generation of the object's address (tells a stale handle from a live one)
//   47..0  address   first byte of the lane's tile 0 (plain: of the object)
// A device cache's object (plain, generation field 64..127) holds the high 8 bits of its slab's
// 14-bit cache generation in bits 62..55 instead of a tile and a lane (handle_cached).
//
// translate(h, off): plain: addr + off; arranged with tile 2^t:
//   addr + ((off >> t) << (t + 5)) + (off & (2^t - 1))
// Any thread may translate any handle: the formula needs nothing but the handle.
#ifndef ALIGNMALLOC_LAYOUT_H
#define ALIGNMALLOC_LAYOUT_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define AM_HD __host__ __device__ __forceinline__
#else
#define AM_HD inline
#endif

// The sizes, codes and records shared with the host (generated from the Rust definitions).
#include <alignmalloc/detail/abi.h>

namespace am {

constexpr u64 kAddressMask = (1ull << kAddressBits) - 1;

enum SlotOrder : u32 { kSlotPattern = 0, kSlotIdentity = 1 };
enum SizeClass : u32 { kClassSmall = 0, kClassPortion = 1, kClassLarge = 2 };
enum HandleKind : u32 { kHandlePlain = 0, kHandleArranged = 1 };

// ---- slot orders -------------------------------------------------------------------------------

// Slot of `lane` in a tile row. Pattern: slots 0.. hold lanes 0,1,2,4,6,..,30,3,5,..,31.
AM_HD u32 slot_of(u32 order, u32 lane) {
  lane &= 31u;
  if (order == kSlotIdentity || lane < 3u) return lane;
  return (lane & 1u) == 0u ? lane / 2u + 1u : lane / 2u + 16u;
}

// Lane in `slot`: the inverse of slot_of.
AM_HD u32 lane_at(u32 order, u32 slot) {
  slot &= 31u;
  if (order == kSlotIdentity || slot < 3u) return slot;
  return slot < 17u ? (slot - 1u) * 2u : (slot - 16u) * 2u + 1u;
}

// ---- geometry ----------------------------------------------------------------------------------

struct GeometryConfig {
  u64 small_max;       // largest lane size of the small class (16..2048, multiple of 16)
  u64 portion_max;     // largest lane size of the portion class (power of two, 4 KiB..32 KiB)
  u64 max_lane_bytes;  // largest size one lane may ask for
};

AM_HD GeometryConfig default_geometry_config() {
  GeometryConfig c;
  c.small_max = 2ull << 10;
  c.portion_max = 32ull << 10;
  c.max_lane_bytes = 4ull << 30;
  return c;
}

struct Geometry {
  u32 size_class;   // SizeClass
  u32 tile_log2;    // 12..16; 0 for the small class
  u64 lane_span;    // per-lane span L (small: the largest rounded span)
  u64 chunk_bytes;  // bytes of the chunk
  u64 units;        // chunk in 256 B units (small), 64 KiB leaves (portion), 2 MiB VABlocks (large)
};

enum GeometryStatus : int { kGeometryOk = 0, kGeometryEmpty = 1, kGeometryOverLimit = 2 };

AM_HD u64 round16(u64 size) { return (size + (kSmallAlign - 1)) & ~(kSmallAlign - 1); }

// The largest lane size, or kGeometryOverLimit (the first such lane in `*bad_lane`).
AM_HD int largest_lane(const u64* sizes, const GeometryConfig& config, u64* max, u32* bad_lane) {
  *max = 0;
  for (u32 lane = 0; lane < kWarpLanes; ++lane) {
    if (sizes[lane] > config.max_lane_bytes) {
      *bad_lane = lane;
      return kGeometryOverLimit;
    }
    if (sizes[lane] > *max) *max = sizes[lane];
  }
  return *max == 0 ? kGeometryEmpty : kGeometryOk;
}

// The packed (small-class) geometry: each lane at the prefix sum of the rounded sizes before it.
AM_HD void packed_geometry(const u64* sizes, u64 max, Geometry* out) {
  u64 chunk = 0;
  for (u32 lane = 0; lane < kWarpLanes; ++lane) chunk += round16(sizes[lane]);
  out->size_class = kClassSmall;
  out->tile_log2 = 0;
  out->lane_span = round16(max);
  out->chunk_bytes = chunk;
  out->units = (chunk + kSmallUnitBytes - 1) / kSmallUnitBytes;
}

// The arranged geometry (portion or large) of a request whose largest lane, over small_max, is `max`.
AM_HD void arranged_geometry(u64 max, const GeometryConfig& config, Geometry* out) {
  if (max <= config.portion_max) {
    u32 t = kMinTileLog2;
    while ((1ull << t) < max) ++t;
    out->size_class = kClassPortion;
    out->tile_log2 = t;
    out->lane_span = 1ull << t;
    out->chunk_bytes = (u64)kWarpLanes << t;
    out->units = out->chunk_bytes / kLeafBytes;
  } else {
    u64 span = (max + (kLeafBytes - 1)) & ~(kLeafBytes - 1);
    out->size_class = kClassLarge;
    out->tile_log2 = kMaxTileLog2;
    out->lane_span = span;
    out->units = span / kLeafBytes;
    out->chunk_bytes = out->units * kVablockBytes;
  }
}

// Geometry of one warp request by the size-class table (`sizes` has 32 entries, 0 for inactive
// lanes). Returns kGeometryEmpty when every lane asks 0, kGeometryOverLimit (and the first such
// lane in `*bad_lane`) when a lane asks more than max_lane_bytes.
AM_HD int geometry_of(const u64* sizes, const GeometryConfig& config, Geometry* out, u32* bad_lane) {
  u64 max = 0;
  const int status = largest_lane(sizes, config, &max, bad_lane);
  if (status != kGeometryOk) return status;
  if (max <= config.small_max) {
    packed_geometry(sizes, max, out);
  } else {
    arranged_geometry(max, config, out);
  }
  return kGeometryOk;
}

// What a request laid out as `layout` (a SlotOrder, or kLayoutContiguous) is given, as the host
// decides it (translator's Geometry::for_request): geometry_of in the layout asked for, unless
// that chunk is over kArrangedMaxExpansion times the packed one; then packed, with `*layout_out`
// kLayoutContiguous. Statuses as geometry_of.
AM_HD int request_geometry_of(const u64* sizes, const GeometryConfig& config, u32 layout,
                              Geometry* out, u32* layout_out, u32* bad_lane) {
  u64 max = 0;
  const int status = largest_lane(sizes, config, &max, bad_lane);
  if (status != kGeometryOk) return status;
  packed_geometry(sizes, max, out);
  *layout_out = kLayoutContiguous;
  if (max <= config.small_max) return kGeometryOk;
  Geometry arranged;
  arranged_geometry(max, config, &arranged);
  if (arranged.chunk_bytes <= kArrangedMaxExpansion * out->chunk_bytes) {
    *out = arranged;
    *layout_out = layout;
  }
  return kGeometryOk;
}

// Small class: a lane's offset in its chunk (exclusive prefix sum of the rounded sizes).
AM_HD u64 small_offset(const u64* sizes, u32 lane) {
  u64 at = 0;
  for (u32 l = 0; l < lane && l < kWarpLanes; ++l) at += round16(sizes[l]);
  return at;
}

// ---- handles -----------------------------------------------------------------------------------

AM_HD u32 handle_kind(u64 h) { return (u32)(h >> 63); }
AM_HD u32 handle_tile_log2(u64 h) { return (u32)((h >> 60) & 0x7ull) + kMinTileLog2; }
AM_HD u32 handle_lane(u64 h) { return (u32)((h >> 55) & 0x1Full); }
AM_HD u64 handle_address(u64 h) { return h & kAddressMask; }
AM_HD u32 handle_generation(u64 h) { return (u32)((h >> 48) & 0x7Full); }
AM_HD u64 handle_with_generation(u64 h, u32 generation) {
  return (h & ~(0x7Full << 48)) | ((u64)(generation & 0x7Fu) << 48);
}

// Device caches' handles carry generation fields kCacheGenerationsStart..127 (the host's chunks
// use 1..63), and a free stamp of a cache is kCacheStampFlag | its cache generation (modulo
// kCacheGenerations).

// A device cache's object at `address` in a slab of cache generation `generation` (modulo
// kCacheGenerations): plain, generation field 64 + generation % 64, bits 62..55 generation / 64.
AM_HD u64 handle_cached(u64 address, u32 generation) {
  generation %= kCacheGenerations;
  return ((u64)(generation >> 6) << 55) | ((u64)(kCacheGenerationsStart | (generation & 63u)) << 48) |
         (address & kAddressMask);
}

// What a free of `h` is judged by against a cache slab's stamp: a cache's plain handle gives
// kCacheStampFlag | its cache generation; any other handle its generation field (0: not known).
AM_HD u32 handle_free_stamp(u64 h) {
  const u32 field = handle_generation(h);
  if (handle_kind(h) != kHandlePlain || field < kCacheGenerationsStart) return field;
  return kCacheStampFlag | ((u32)((h >> 55) & 0xFFull) << 6) | (field & 63u);
}

// Encoders mask their fields; the host validates (address < 2^48, lane < 32, tile 12..16).
AM_HD u64 handle_plain(u64 address, u32 lane) {
  return ((u64)(lane & 31u) << 55) | (address & kAddressMask);
}

AM_HD u64 handle_arranged(u64 address, u32 tile_log2, u32 lane) {
  return ((u64)kHandleArranged << 63) | ((u64)((tile_log2 - kMinTileLog2) & 0x7u) << 60) |
         ((u64)(lane & 31u) << 55) | (address & kAddressMask);
}

// Address of byte `offset` of the object behind `h`. Total: defined for every 64-bit value.
AM_HD u64 translate(u64 h, u64 offset) {
  const u64 address = handle_address(h);
  if (handle_kind(h) != kHandleArranged) return address + offset;
  const u32 t = handle_tile_log2(h);
  return address + ((offset >> t) << (t + 5u)) + (offset & ((1ull << t) - 1ull));
}

// Chunk of an arranged handle: address - slot(lane) * tile (the host checks kind and range).
AM_HD u64 chunk_base_of(u64 h, u32 order) {
  return handle_address(h) - ((u64)slot_of(order, handle_lane(h)) << handle_tile_log2(h));
}


// A lane's handle, given its small-class offset (ignored for other classes) and the chunk's
// layout (a SlotOrder, or kLayoutContiguous). The one formula every lane-handle function uses.
AM_HD u64 lane_handle_from(const Geometry& g, u64 chunk_base, u32 lane, u64 small_off, u32 layout) {
  if (g.size_class == kClassSmall) return handle_plain(chunk_base + small_off, lane);
  if (layout == kLayoutContiguous) return handle_plain(chunk_base + (u64)lane * g.lane_span, lane);
  return handle_arranged(chunk_base + ((u64)slot_of(layout, lane) << g.tile_log2), g.tile_log2, lane);
}

// A lane's handle for a chunk at `chunk_base`; 0 (null) for a lane that asked 0 bytes.
AM_HD u64 lane_handle(const Geometry& g, u64 chunk_base, const u64* sizes, u32 lane, u32 order) {
  if (lane >= kWarpLanes || sizes[lane] == 0) return 0;
  return lane_handle_from(g, chunk_base, lane, small_offset(sizes, lane), order);
}

// A lane's handle in the thread-contiguous layout: lane l at chunk_base + l * lane_span (small
// chunks: packed in lane order, as above); 0 for a lane that asked 0 bytes.
AM_HD u64 lane_handle_contiguous(const Geometry& g, u64 chunk_base, const u64* sizes, u32 lane) {
  if (lane >= kWarpLanes || sizes[lane] == 0) return 0;
  return lane_handle_from(g, chunk_base, lane, small_offset(sizes, lane), kLayoutContiguous);
}

template <class A, class B>
struct same_type {
  static constexpr bool value = false;
};
template <class A>
struct same_type<A, A> {
  static constexpr bool value = true;
};

// T without a top-level const (the value type of ptr<const T>::load), and whether it had one.
template <class T>
struct remove_const_of {
  typedef T type;
  static constexpr bool had_const = false;
};
template <class T>
struct remove_const_of<const T> {
  typedef T type;
  static constexpr bool had_const = true;
};

// ---- typed access ------------------------------------------------------------------------------

// A typed view of an allocation: every element access translates through the handle, so it works
// for both layouts. `first` is the element the view starts at, which index arithmetic moves (the
// handle itself never changes, so any view can still be freed through `handle`).
//
// T may be any trivially copyable type. `p[i]`, `*p` and `p->` give a reference and need
// sizeof(T) a power of two of at most 4 KiB: such an element never straddles a tile (tiles are
// 4 KiB..64 KiB), so it lies at one address. Other sizes (12- or 24-byte structs, float3) may
// straddle a tile edge in arranged memory: read and write them with load(i) and store(i, v),
// which copy the element piecewise where it crosses an edge. Use ptr<const T> for read-only
// access; a ptr<T> converts to it.
template <class T>
struct ptr {
  static_assert(__is_trivially_copyable(T),
                "am::ptr<T> needs a trivially copyable T: elements are copied as bytes");
  u64 handle;
  u64 first = 0;

  // Whether T can be accessed by reference: a power of two of at most 4 KiB bytes.
  static constexpr bool kByReference = sizeof(T) <= 4096 && (sizeof(T) & (sizeof(T) - 1)) == 0;

  // Address of element `index` of the view (its first byte).
  AM_HD u64 address_of(u64 index) const {
    return translate(handle, (first + index) * (u64)sizeof(T));
  }

  AM_HD T& operator[](u64 index) const {
    static_assert(kByReference,
                  "am::ptr<T>::operator[] needs sizeof(T) a power of two of at most 4096 bytes "
                  "(such an element never straddles a tile); use load(i) and store(i, v) for "
                  "other sizes");
    return *reinterpret_cast<T*>(address_of(index));
  }
  AM_HD T& operator*() const { return (*this)[0]; }
  AM_HD T* operator->() const { return &(*this)[0]; }

  // Element `index` by value; any trivially copyable T.
  AM_HD typename remove_const_of<T>::type load(u64 index) const {
    typename remove_const_of<T>::type value;
    copy_element(index, reinterpret_cast<unsigned char*>(&value), true);
    return value;
  }

  // Write element `index`; any trivially copyable T.
  AM_HD void store(u64 index, const T& value) const {
    static_assert(!remove_const_of<T>::had_const, "am::ptr<const T> is read-only");
    copy_element(index, const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(&value)),
                 false);
  }

  // Index arithmetic: a view `n` elements further (or back).
  AM_HD ptr operator+(long long n) const { return ptr{handle, first + (u64)n}; }
  AM_HD ptr operator-(long long n) const { return ptr{handle, first - (u64)n}; }
  AM_HD ptr& operator+=(long long n) { first += (u64)n; return *this; }
  AM_HD ptr& operator-=(long long n) { first -= (u64)n; return *this; }
  AM_HD ptr& operator++() { ++first; return *this; }
  AM_HD ptr& operator--() { --first; return *this; }
  AM_HD ptr operator++(int) { ptr before = *this; ++first; return before; }
  AM_HD ptr operator--(int) { ptr before = *this; --first; return before; }
  // Elements between two views of the same allocation.
  AM_HD long long operator-(const ptr& other) const { return (long long)(first - other.first); }
  AM_HD bool operator==(const ptr& other) const {
    return handle == other.handle && first == other.first;
  }
  AM_HD bool operator!=(const ptr& other) const { return !(*this == other); }
  AM_HD bool operator<(const ptr& other) const { return first < other.first; }

  // Read-only view of the same elements (a template, so ptr<const T> has no conversion to
  // itself).
  template <class U>
  AM_HD operator ptr<U>() const {
    static_assert(remove_const_of<U>::had_const &&
                      same_type<typename remove_const_of<U>::type,
                                typename remove_const_of<T>::type>::value,
                  "an am::ptr<T> converts only to am::ptr<const T>");
    return ptr<U>{handle, first};
  }

  AM_HD bool is_null() const { return handle == 0; }
  AM_HD bool is_plain() const { return handle_kind(handle) == kHandlePlain; }
  // The raw pointer to the view's first element in a plain allocation (contiguous memory).
  // Meaningless for arranged handles.
  AM_HD T* plain() const { return reinterpret_cast<T*>(handle_address(handle)) + first; }

 private:
  // Copy element `index` to (`out`) or from `bytes`, in one piece when it lies in one tile and
  // piece by piece across a tile edge otherwise.
  AM_HD void copy_element(u64 index, unsigned char* bytes, bool out) const {
    const u64 offset = (first + index) * (u64)sizeof(T);
    const u64 piece = handle_kind(handle) == kHandleArranged ? (1ull << handle_tile_log2(handle))
                                                             : ~0ull;
    u64 done = 0;
    while (done < sizeof(T)) {
      const u64 at = offset + done;
      u64 n = piece - at % piece;
      if (n > sizeof(T) - done) n = sizeof(T) - done;
      unsigned char* memory = reinterpret_cast<unsigned char*>(translate(handle, at));
      for (u64 i = 0; i < n; ++i) {
        if (out) {
          bytes[done + i] = memory[i];
        } else {
          memory[i] = bytes[done + i];
        }
      }
      done += n;
    }
  }
};

}  // namespace am

#endif  // ALIGNMALLOC_LAYOUT_H
