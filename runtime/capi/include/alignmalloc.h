// libalignmalloc: the C ABI of the alignmalloc runtime (C11, also valid C++).
//
// Generated from runtime/capi/src by cbindgen; do not edit (docs/usage.md explains the API).
// Every function returns an am_status: AM_OK, or an error code whose message am_last_error()
// gives. No call crashes on a null or destroyed runtime, a null pointer argument, or a handle
// the runtime did not hand out: each gets its own code. CUDA C++ programs include
// <alignmalloc/alignmalloc.cuh>, which includes this header.

#ifndef ALIGNMALLOC_H
#define ALIGNMALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

// `am_options.backend`: the GPU when the driver loads and the device exists, else the simulation.
#define AM_BACKEND_AUTO 0

// `am_options.backend` and `am_runtime_backend`: a CUDA GPU.
#define AM_BACKEND_CUDA 1

// `am_options.backend` and `am_runtime_backend`: the CPU simulation (no GPU needed).
#define AM_BACKEND_SIM 2

// `am_options.slot_order`: lanes 0,1,2,4,...,30,3,5,...,31 side by side (the default).
#define AM_SLOT_ORDER_PATTERN 0

// `am_options.slot_order`: lanes in order.
#define AM_SLOT_ORDER_IDENTITY 1

// `am_options.placement`: no advice, pages migrate to whoever touches them (the default).
#define AM_PLACEMENT_MIGRATE 0

// `am_options.placement`: the arena in host memory, mapped for the GPU (read over the link).
#define AM_PLACEMENT_HOST_MAPPED 1

// `am_options.placement`: a device tier and a host tier (docs/placement.md).
#define AM_PLACEMENT_TIERED 2

// `am_tier_of`: an untiered reservation (the migrate placement).
#define AM_TIER_ANY 0

// `am_tier_of`: the device tier (preferred on the GPU).
#define AM_TIER_DEVICE 1

// `am_tier_of`: the host tier (host memory mapped for the GPU).
#define AM_TIER_HOST 2

// Request statuses counted by `am_counters.by_status` (codes of `am::Status`).
#define AM_REQUEST_STATUSES 9

// Per-object free outcomes counted by `am_counters.by_lane_status` (codes of `am::LaneStatus`).
#define AM_LANE_STATUSES 5

// A runtime: the arena, the mailbox and the service thread. Opaque; made by
// `am_runtime_create`, ended by `am_runtime_destroy`.
typedef struct am_runtime am_runtime;

// The outcome of a call: `AM_OK` or one of the `AM_ERR_*` codes.
typedef int32_t am_status;

// How to build a runtime. Fill it with `am_options_default`, then change what you need; a
// field left 0 keeps its default.
typedef struct am_options {
  // `sizeof(am_options)`, set by `am_options_default` (the library checks it).
  uint32_t size;
  // `AM_BACKEND_AUTO` (default), `AM_BACKEND_CUDA` or `AM_BACKEND_SIM`.
  uint32_t backend;
  // CUDA device ordinal (default 0).
  uint32_t device;
  // Mailbox ports (0: 8192).
  uint32_t ports;
  // Arena bytes, rounded down to 2 MiB (0: a quarter of free device memory on the GPU,
  // 4 GiB of lazily committed host memory in the simulation).
  uint64_t arena_bytes;
  // Share of free device memory the default arena takes, in (0, 1] (0: 0.25).
  double arena_fraction;
  // Let the arena grow up to this many bytes in all (0: no growth).
  uint64_t max_arena_bytes;
  // Allow an arena larger than free device memory (default false).
  bool allow_oversubscription;
  // Count unified-memory migrations and faults with CUPTI (GPU only; default false).
  bool fault_counters;
  // `AM_SLOT_ORDER_PATTERN` (default) or `AM_SLOT_ORDER_IDENTITY`.
  uint32_t slot_order;
  // Most bytes the device caches may hold (0: an eighth of the arena).
  uint64_t device_cache_bytes;
  // Turn the device caches off: every allocation asks the service thread (default false).
  bool no_device_caches;
  // `AM_PLACEMENT_MIGRATE` (default), `AM_PLACEMENT_HOST_MAPPED` or `AM_PLACEMENT_TIERED`:
  // where the arena's pages live (docs/placement.md).
  uint32_t placement;
  // `AM_PLACEMENT_TIERED`: bytes of the device tier (0: half the arena).
  uint64_t device_tier_bytes;
  // `AM_PLACEMENT_TIERED`: objects of at least this many bytes ask the device tier first,
  // smaller ones the host tier (0: all ask the device tier first).
  uint64_t hot_object_bytes;
} am_options;

// What the device needs of the caches (`am::DeviceCaches`): sizes, then the device-memory
// arrays in the order of `CpuCaches::arrays` (`set_device_arrays` takes them so), then the
// channel's arrays (pinned host memory) in the order of `CacheChannel::offsets`. Each array is
// the device address of its first word.
typedef struct am_device_caches {
  // Cache classes (0: no caches).
  uint32_t classes;
  // Slab ids (the returns ring's length).
  uint32_t max_slabs;
  // Entries of the block table (a power of two).
  uint32_t hash_len;
  // Ring entries per class.
  uint32_t ring_len;
  // Device memory, `u64` per class: slab number << 32 | cursor.
  uint64_t class_words;
  // Device memory, `u32` per class: the class lock.
  uint64_t class_locks;
  // Device memory, `u32` per class and ring entry: slab id of slab number `n` at `n % ring_len`.
  uint64_t class_slab;
  // Device memory, `u64` per slab id: its base.
  uint64_t slab_base;
  // Device memory, `u32` per slab id: its class.
  uint64_t slab_class;
  // Device memory, `u32` per slab id: live objects.
  uint64_t slab_live;
  // Device memory, `u32` per slab id: its slab number.
  uint64_t slab_number;
  // Device memory, `u32` per slab id: its objects' free stamp (cache stamp flag | cache
  // generation).
  uint64_t slab_generation;
  // Device memory, `u32` per slab id: times the id became current.
  uint64_t slab_life;
  // Device memory, `BITMAP_WORDS` `u64` per slab id: life << 32 | freed objects.
  uint64_t bits;
  // Device memory, `u64` per block-table entry: (block + 1) << 32 | (slab id + 1).
  uint64_t blocks;
  // Device memory, one `u64`: returns claimed.
  uint64_t returns_claimed;
  // Device memory, `u64` per stripe and free outcome: device frees by `LaneStatus` code.
  uint64_t counters;
  // Device memory, `AHEAD_WORDS` `u64` per class: the slab numbers its lock holder holds
  // claimed ahead (`first << 32 | end`), then their ring entries (`caches::device`).
  uint64_t class_ahead;
  // Host-written: `u32` per class, slabs filled.
  uint64_t filled;
  // Host-written: `u32` per class, asks denied.
  uint64_t denied;
  // Host-written: `u64` per class and ring entry: slab base | slab id.
  uint64_t ring;
  // Device-written (the class lock's holder): `u32` per class, slabs taken.
  uint64_t taken;
  // Device-written (the class lock's holder): `u32` per class, slabs wanted.
  uint64_t demand;
  // Device-written: `u64` per slab id, lap << 32 | slab id.
  uint64_t returns;
  // Device-written: `u32` per class, the entry the class lock's holder is taking + 1
  // (`CacheChannel::claim`).
  uint64_t claimed;
} am_device_caches;

// What a kernel gets to reach the service thread (`am::DeviceMailbox`): addresses as the device
// sees them of the mailbox arrays (pinned host memory) and of the per-port locks (device memory).
// The runtime passes it by value (or binds it as a module's default mailbox). All zero (`ports`
// 0) is unbound: every device call through it answers `Unbound` (`am::kStatusUnbound`) without
// touching memory. A port's next sequence number is its acknowledged one plus 1: the lock
// holder is the port's only device writer and every earlier request on it was acknowledged
// before the lock was released, so no device-side copy (which a stale cache line could make
// lie) is kept.
typedef struct am_device_mailbox {
  // Ports.
  uint32_t ports;
  // Zero.
  uint32_t reserved;
  // `u32` per port, device-written.
  uint64_t req_seq;
  // `RequestRecord` per port, device-written.
  uint64_t requests;
  // `u32` per port, host-written.
  uint64_t ack_seq;
  // `ReplyRecord` per port, host-written.
  uint64_t replies;
  // One `u32`, host-written.
  uint64_t closed;
  // `u32` per port, device memory.
  uint64_t locks;
  // The device caches (all zero: none, every allocation asks the host).
  struct am_device_caches caches;
} am_device_mailbox;

// Writes one translation unit's default mailbox (registered by `alignmalloc.cuh`); returns a
// `cudaError_t` (0: done).
typedef int (*am_unit_binder)(const struct am_device_mailbox *mailbox);

// An object's handle: what `am_alloc` and device-side `am::malloc` give (64 bits; 0 is null).
typedef uint64_t am_handle;

// What the allocator has done, for device and host requests alike.
typedef struct am_counters {
  // Requests by status code: 0 ok, 1 out of memory, 2 size over limit, 3 unknown op, 4 empty
  // mask, 5 bad sequence, 6 shutdown, 7 partial (some lanes of a free failed), 8 unbound.
  uint64_t by_status[AM_REQUEST_STATUSES];
  // Freed objects by outcome: 0 freed, 1 invalid handle, 2 double free, 3 interior pointer,
  // 4 an object of a device cache (host frees only).
  uint64_t by_lane_status[AM_LANE_STATUSES];
  // Chunks allocated by class: small, portion, large.
  uint64_t chunks_by_class[3];
  // Bytes asked for by class.
  uint64_t bytes_by_class[3];
  // Objects freed.
  uint64_t lanes_freed;
} am_counters;

// What the service thread has done.
typedef struct am_service_stats {
  // Batches served (sweeps that found a request).
  uint64_t batches;
  // Requests served.
  uint64_t requests;
  // Median requests per batch.
  uint64_t batch_size_p50;
  // 99th percentile of requests per batch.
  uint64_t batch_size_p99;
  // Median batch service time, ns.
  uint64_t batch_nanos_p50;
  // 99th percentile of the batch service time, ns.
  uint64_t batch_nanos_p99;
  // Longest batch service time, ns.
  uint64_t batch_nanos_max;
  // Time spent serving, ns.
  uint64_t busy_nanos;
  // Of it, reading the ports, ns.
  uint64_t collect_nanos;
  // Of it, resolving, ns (the rest answered).
  uint64_t resolve_nanos;
} am_service_stats;

// What the device caches hold and did (`am_cache_stats_get`).
typedef struct am_cache_stats {
  // Whether the runtime has device caches (all else is 0 when not).
  bool enabled;
  // Slabs the host handed to the caches.
  uint64_t refills;
  // Slabs the device gave back with every object freed.
  uint64_t returns;
  // Asks the host could not serve (those lanes went through the mailbox).
  uint64_t denials;
  // Bytes the caches hold now.
  uint64_t held_bytes;
  // The most bytes they held at once.
  uint64_t peak_held_bytes;
} am_cache_stats;

// A free the host refused (`am_last_bad_frees`).
typedef struct am_bad_free {
  // Its rank among all the bad frees of the runtime (1 = the first).
  uint64_t number;
  // The handle given (for a free by address, the handle of the object starting there, or a
  // plain handle of the address).
  uint64_t handle;
  // Why it was refused: 1 invalid handle, 2 double free, 3 interior pointer, 4 an object of a
  // device cache.
  uint32_t lane_status;
} am_bad_free;

// Unified-memory counts of one kind of record.
typedef struct am_fault_counts {
  // Bytes migrated host to device.
  uint64_t htod_bytes;
  // Bytes migrated device to host.
  uint64_t dtoh_bytes;
  // GPU page fault groups.
  uint64_t gpu_page_faults;
  // CPU page faults.
  uint64_t cpu_page_faults;
} am_fault_counts;

// The unified-memory counters since the last `am_take_faults`.
typedef struct am_fault_report {
  // Everything.
  struct am_fault_counts total;
  // Records whose address lies in no live chunk.
  struct am_fault_counts unattributed;
  // Records CUPTI dropped for lack of buffer space.
  uint64_t dropped_records;
  // Live chunks with records: read each with `am_fault_chunk(rt, 0..chunks)`.
  size_t chunks;
} am_fault_report;

// Done.
#define AM_OK 0

// A pointer argument that must not be null was null.
#define AM_ERR_NULL_ARGUMENT 1

// The runtime argument is not a live runtime: it was destroyed, or never created.
#define AM_ERR_INVALID_RUNTIME 2

// An argument or option is out of its range; the message names it.
#define AM_ERR_INVALID_ARGUMENT 3

// The CUDA backend was asked for and no GPU could be opened.
#define AM_ERR_NO_GPU 4

// A CUDA driver, runtime or NVRTC call failed; the message has its error.
#define AM_ERR_CUDA 5

// The call needs the other backend (the device mailbox and binding need CUDA).
#define AM_ERR_WRONG_BACKEND 6

// An allocation of 0 bytes, or for 0 threads.
#define AM_ERR_ZERO_SIZE 7

// An allocation over the per-object limit.
#define AM_ERR_SIZE_OVER_LIMIT 8

// The arena has no room; nothing was allocated.
#define AM_ERR_OUT_OF_MEMORY 9

// The handle or pointer is no object this runtime handed out.
#define AM_ERR_INVALID_HANDLE 10

// The object was freed (or the handle is stale): a second free, or a read, write or capacity
// query of a freed object.
#define AM_ERR_DOUBLE_FREE 11

// The handle or pointer points inside an object, not at its start.
#define AM_ERR_INTERIOR_POINTER 12

// An access runs past the end of its object.
#define AM_ERR_OUT_OF_BOUNDS 13

// Fault counters were read but are off for this runtime: not asked for, or another tool (a
// profiler) holds CUPTI (`am_last_error` says which).
#define AM_ERR_FAULT_COUNTERS_OFF 14

// Fault counters could not start (CUPTI missing, or taken by a profiler).
#define AM_ERR_FAULT_COUNTERS 15

// The runtime's configuration was refused (arena too small, GPU lacking a feature, ...).
#define AM_ERR_CONFIG 16

// `am_bind` found no translation unit to bind: nothing in the program includes
// `<alignmalloc/alignmalloc.cuh>` compiled by nvcc.
#define AM_ERR_NOTHING_TO_BIND 17

// A bug in alignmalloc (a caught panic, a broken invariant); the message says what.
#define AM_ERR_INTERNAL 18

// The object came from a device cache: only device code frees it (`am::free` in a kernel).
#define AM_ERR_CACHED_OBJECT 19





#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Fill `options` with the defaults (and its `size` field).
//
// # Safety
// `options` is null or points to writable memory for one `am_options`.
am_status am_options_default(struct am_options *options);

// Create a runtime: pick the backend, reserve the arena, register the mailbox, start the
// service thread. `options` may be null for the defaults. On success `*runtime` is the new
// runtime; on failure it is left as it was.
//
// # Safety
// `options` is null or points to a readable `am_options`; `runtime` is null or writable.
am_status am_runtime_create(const struct am_options *options, struct am_runtime **runtime);

// Wait for the runtime's kernels (a context synchronize) and until the host has answered every
// request posted so far (frees posted with `am::post_free` are done then), then give back what
// the device caches hold and no object uses (`Runtime::drain_caches`): at the end of a phase,
// before `am_check` asks whether everything was freed or `am_last_bad_frees` lists the bad
// ones. A kernel launched on another thread while it runs races with it. `*slabs` (if not
// null) gets the number of slabs given back.
//
// # Safety
// `slabs` is null or writable.
am_status am_drain_caches(struct am_runtime *runtime, uint64_t *slabs);

// Destroy a runtime: wait for the kernels of its context (they may be waiting on its mailbox),
// stop its service thread, release its arena and mailbox, and unbind it if it was bound. Every
// handle it gave becomes invalid; a later call with it is `AM_ERR_INVALID_RUNTIME`.
am_status am_runtime_destroy(struct am_runtime *runtime);

// The backend running: `AM_BACKEND_CUDA` or `AM_BACKEND_SIM`.
//
// # Safety
// `backend` is null or writable.
am_status am_runtime_backend(const struct am_runtime *runtime, uint32_t *backend);

// Why this backend was chosen, as a NUL-terminated string: up to `capacity - 1` bytes are
// copied into `buffer` (which may be null when `capacity` is 0) and `*length` (if not null) is
// set to the whole message's length, as `snprintf` does.
//
// # Safety
// `buffer` is null or writable for `capacity` bytes; `length` is null or writable.
am_status am_runtime_backend_reason(const struct am_runtime *runtime,
                                    char *buffer,
                                    size_t capacity,
                                    size_t *length);

// The device mailbox, to pass to kernels that take an `am::DeviceMailbox` argument (CUDA
// backend; `AM_ERR_WRONG_BACKEND` on the simulation).
//
// # Safety
// `mailbox` is null or writable.
am_status am_runtime_device_mailbox(const struct am_runtime *runtime,
                                    struct am_device_mailbox *mailbox);

// Make `runtime` the default mailbox of every kernel of the program on the runtime's device:
// every translation unit that includes `<alignmalloc/alignmalloc.cuh>` (compiled by nvcc)
// registered itself before `main`, and each one's copy on that device is written (whatever
// device is current; the caller's current device is left as it was). With several GPUs, bind
// one runtime per device: each device's kernels allocate from the runtime bound there. Binding
// another runtime of the same device replaces it. CUDA backend only. Destroying the runtime
// unbinds it.
am_status am_bind(const struct am_runtime *runtime);

// Register one translation unit's default-mailbox writer (called by `alignmalloc.cuh` before
// `main`; programs do not call it). The unit is written at once on every device that has a
// bound runtime.
am_status am_register_unit(am_unit_binder binder);

// One object of `bytes` bytes in plain (thread-contiguous) memory; `*handle` is its handle, and
// `am_handle_pointer(*handle, 0)` its address.
//
// # Safety
// `handle` is null or writable.
am_status am_alloc(const struct am_runtime *runtime, uint64_t bytes, am_handle *handle);

// An object of `bytes_each` bytes for each of `threads` threads, warp-arranged as a kernel's
// warps would get them from `am::malloc` (a last warp of a few threads is packed, with plain
// handles that `am::ptr` reads alike): `handles[t]` is thread `t`'s. All or nothing.
//
// # Safety
// `handles` is null or writable for `threads` handles.
am_status am_alloc_arranged(const struct am_runtime *runtime,
                            uint32_t threads,
                            uint64_t bytes_each,
                            am_handle *handles);

// Free one object (a null handle is a no-op). Double, foreign and interior handles get
// `AM_ERR_DOUBLE_FREE`, `AM_ERR_INVALID_HANDLE` and `AM_ERR_INTERIOR_POINTER`, and change
// nothing.
am_status am_free(const struct am_runtime *runtime, am_handle handle);

// Free `count` objects (null handles are skipped), 32 at a time as a warp would; every one is
// tried, and the first failure is returned.
//
// # Safety
// `handles` is null (only with `count` 0) or readable for `count` handles.
am_status am_free_many(const struct am_runtime *runtime, const am_handle *handles, size_t count);

// Free the object whose first byte `pointer` is (from device-side `am::malloc_plain`, or the
// address of a plain handle); null is a no-op. Judged like `am_free`.
am_status am_free_pointer(const struct am_runtime *runtime, const void *pointer);

// Copy `length` bytes from `source` into the object of `handle` from byte `offset`, through its
// layout. Past the object's capacity: `AM_ERR_OUT_OF_BOUNDS`, nothing written.
//
// # Safety
// `source` is null (only with `length` 0) or readable for `length` bytes.
am_status am_write(const struct am_runtime *runtime,
                   am_handle handle,
                   uint64_t offset,
                   const void *source,
                   size_t length);

// Copy `length` bytes of the object of `handle` from byte `offset` into `destination`.
//
// # Safety
// `destination` is null (only with `length` 0) or writable for `length` bytes.
am_status am_read(const struct am_runtime *runtime,
                  am_handle handle,
                  uint64_t offset,
                  void *destination,
                  size_t length);

// Bytes the object of `handle` may use from its start.
//
// # Safety
// `bytes` is null or writable.
am_status am_capacity(const struct am_runtime *runtime, am_handle handle, uint64_t *bytes);

// The tier the object of `handle` lies in (`AM_TIER_ANY`, `AM_TIER_DEVICE` or `AM_TIER_HOST`);
// an address outside the arena is `AM_ERR_INVALID_ARGUMENT`.
//
// # Safety
// `tier` is null or writable.
am_status am_tier_of(const struct am_runtime *runtime, am_handle handle, uint32_t *tier);

// The address of byte `offset` of the object behind `handle` (any handle: pure arithmetic, the
// formula `am::ptr` applies on the device). An arranged object is contiguous only within a
// tile; plain objects are contiguous.
void *am_handle_pointer(am_handle handle, uint64_t offset);

// The allocator's counters so far (device and host requests alike).
//
// # Safety
// `counters` is null or writable.
am_status am_counters_get(const struct am_runtime *runtime, struct am_counters *counters);

// The service thread's statistics so far.
//
// # Safety
// `stats` is null or writable.
am_status am_service_stats_get(const struct am_runtime *runtime, struct am_service_stats *stats);

// The device caches' counters: slabs handed out, given back and denied, bytes held now and at
// most (`enabled` is false, and the rest 0, when the runtime has no caches).
//
// # Safety
// `stats` is null or writable.
am_status am_cache_stats_get(const struct am_runtime *runtime, struct am_cache_stats *stats);

// The last frees the host refused, oldest first: up to `capacity` of them written to
// `bad_frees`, and how many the runtime keeps now (at most 64) to `*count`. Frees posted with
// `am::post_free` are judged when the host answers them: call `am_drain_caches` (which waits for
// those answers) first. Frees the device caches judge return their outcome to the freeing lane
// and are only counted (`am_counters_get`).
//
// # Safety
// `bad_frees` is null (with `capacity` 0) or writable for `capacity` elements; `count` is null
// or writable.
am_status am_last_bad_frees(const struct am_runtime *runtime,
                            struct am_bad_free *bad_frees,
                            size_t capacity,
                            size_t *count);

// Give quarantined chunks back and check the allocator's invariants: `AM_OK`, or
// `AM_ERR_INTERNAL` saying which broke. `*empty` (if not null) says whether nothing is
// allocated; the device caches' slabs count until `am_drain_caches` gives them back.
//
// # Safety
// `empty` is null or writable.
am_status am_check(const struct am_runtime *runtime, bool *empty);

// The unified-memory counters since the last call, in all; the live chunks they fall in are
// read with `am_fault_chunk` until the next call. Needs `options.fault_counters`.
//
// # Safety
// `report` is null or writable.
am_status am_take_faults(const struct am_runtime *runtime, struct am_fault_report *report);

// Chunk `index` (0 .. `report.chunks`, by base address) of the last `am_take_faults`: its base
// address and counts.
//
// # Safety
// `chunk_base` and `counts` are null or writable.
am_status am_fault_chunk(const struct am_runtime *runtime,
                         size_t index,
                         uint64_t *chunk_base,
                         struct am_fault_counts *counts);

// This thread's last failure message ("" if none), valid until this thread's next failure.
const char *am_last_error(void);

// The name of a status code ("AM_ERR_DOUBLE_FREE"), or "unknown status" for other values.
const char *am_status_name(am_status status);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* ALIGNMALLOC_H */
