//! Device caches: memory the host has already placed, handed to the GPU ahead of demand, from
//! which warps take objects of up to 4 MiB with one atomic and to which they free them,
//! without a round trip to the service thread. docs/caches.md has the design and the figures.
//!
//! - [`geometry`]: the cache classes and slab sizes (twin of `detail/cache.cuh`'s constants).
//! - [`channel`]: the host-device words of the protocol, in shared (pinned) memory.
//! - [`device`]: the device side for CPU warps, the twin of `detail/cache.cuh`.
//! - [`keeper`]: the host side, run by the service thread: refills and returned slabs.
//!
//! The protocol, per cache class `c` (one writer per word; the device side's own words live in
//! device memory and are the only ones it updates with atomics):
//!
//! 1. host: places slab `j` (a run of VABlocks) and writes ring entry `j % RING_LEN`, then
//!    `filled[c] = j + 1` (release). It keeps the class's depth of slabs ahead of `taken[c]`
//!    ([`keeper::depth`], doubled each time the class's warps ask while it is in use, at most
//!    [`keeper::MOST_DEPTH`], within [`keeper::DEEP_BLOCKS`] for all classes beyond their first
//!    depth), never more than `RING_LEN` unconsumed, and starts only once the device took a
//!    slab (or asked for one) since the caches were last drained.
//! 2. device: warps take objects from the current slab with one `fetch_add` on the class word
//!    (slab number in the high bits, cursor in the low ones), side by side in lane order; in the
//!    run class each lane takes as many slots as its size needs with a `fetch_add` of its own,
//!    and the one lane whose slots would cross the slab's end (at most one per slab) counts the
//!    slots left there as freed before it moves on. The warp that finds the slab used
//!    up takes the class lock and moves the class to the next slab: if `filled[c]` shows it, it
//!    claims it (`claimed[c]`, then `filled[c]` read again, see 5.), sets the slab's state, maps
//!    its blocks in the block table, publishes the class word and writes `taken[c]`; in the
//!    classes of 1-2 block slabs it then claims the next published slabs ahead (up to
//!    `AHEAD_SLABS` entries, one claim), keeps their entries in device memory and writes
//!    `taken[c]` past them, so the next moves need none of the host's words (and before it
//!    unlocks it starts the one the next move makes current: its state, life, bitmap words and
//!    blocks, its slab number one past the class word's, so that move only publishes the class
//!    word; a free into it before then is judged as by a current slab with nothing handed out);
//!    if none is
//!    published, it posts one ask (`demand[c]`, a count kept in the lock word)
//!    and waits; if the host answers `denied[c]` with that ask (no room, or the caches' bound
//!    reached), the lanes ask through the mailbox instead. While `denied[c]` holds the class's
//!    last ask, later warps that find the class used up go to the mailbox without asking; the
//!    host publishes the slab as soon as one fits and then withdraws the denial (a value no ask
//!    has), and withdraws it when it drains the caches.
//! 3. device: a free sets the object's bit in its slab's bitmap (a bit already set is a double
//!    free) and counts the slab's live slots down by the object's; the free that reaches 0 unmaps the slab,
//!    leaves its bitmap all set and posts it to the `returns` ring (entry `i % max_slabs`, tagged with its
//!    lap so the host tells new entries from old).
//! 4. host: reads returned slabs in order and gives their blocks back to the resolver.
//! 5. host, when the arena has no room for a request while warps run: lowers `filled[c]` to
//!    `taken[c]`, fences, and reads `claimed[c]`; unless a warp has claimed the entry at
//!    `taken[c]`, no warp can take the slabs published past it (the warp's claim, fence and
//!    second read of `filled[c]` see the lowered count), and their blocks go back to the
//!    resolver for the request; the class's last ask is denied (a warp may wait for what was
//!    taken back). Otherwise `filled[c]` is put back as it was.
//!
//! Invariants: a slab id is in at most one of: free at the host, in a ring, claimed ahead,
//! current or exhausted on the device, in the returns ring; its blocks are a live cache chunk of
//! the resolver from the moment it is placed until the host reads it back; the blocks the caches
//! hold never exceed the configured bound.

pub mod channel;
pub mod device;
pub mod geometry;
pub mod keeper;

pub use channel::CacheChannel;
pub use device::{
    BITS_ARRAY, COUNTER_STRIPES, COUNTERS_ARRAY, CachedAlloc, CachedFree, CpuCaches, DEVICE_ARRAYS,
    DeviceArray, FREE_COUNTERS, LIFE_ARRAY, device_array_lens, hash_len, run_slots, run_span_index,
};
pub use geometry::{
    BITMAP_WORDS, CACHE_CLASSES, CACHED_MAX_BYTES, MIN_OBJECT_LOG2, POWER_CLASSES_MAX_BYTES,
    RING_LEN, RUN_CLASS, RUN_SLOT_LOG2, RUN_SPANS_AT, cache_class, claims_ahead, class_bytes,
    object_slots, run_class_serves, slab_blocks, slab_objects, slot_log2,
};
pub use keeper::{CacheKeeper, CacheStats, CacheStatsSnapshot, SlabSource};
