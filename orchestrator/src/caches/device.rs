//! The device side of the caches for CPU warps: the twin of `detail/cache.cuh`, over the same
//! channel, with "device memory" held here. The sim backend's warps allocate and free through it,
//! so CI runs the protocol the GPU runs; `device/hostcheck` runs `cache.cuh` itself beside it with
//! the same steps and compares every answer and word (`tests/cache_protocol.rs`).
//!
//! Device memory, per class: the class word (slab number << 32 | cursor; slab number 0 = none
//! yet), the class lock (held by the warp moving the class to its next slab) and the slab id of
//! each slab number modulo `RING_LEN` (an entry may already hold a later slab's id when a
//! delayed warp reads it: the id's own number tells, see [`CpuCaches::slab_of_number`]). Per slab id: its base, class, live objects (all of them
//! when it becomes current, counted down by frees), slab number and free stamp (`CACHE_STAMP_FLAG`
//! with the cache generation of the host's ring entry, which is above that of every earlier slab
//! on the same blocks; every handle of the slab carries it, [`Handle::cached`]), its life (how many times the id became current) and its bitmap of freed
//! objects, each `u64` word the life it belongs to (high half) and 32 bits. A hash table maps each
//! VABlock that was ever part of a slab to the slab holding it now and that slab's class (or
//! none; [`block_value`]): keys are never
//! removed, so lookups stop at the first empty entry and the table never fills with tombstones;
//! it has room for twice the arena's largest size in blocks.
//!
//! Invariants: a slab's bitmap words carry its current life from the moment it becomes current
//! (the warp that makes it current clears them with the new life); at its return every bit is
//! set, and they stay so while the host holds the id. A free's atomic OR returns the word's life
//! with its bit, so a late second free of an object whose slab went back, or came back in a new
//! life meanwhile, finds a set bit or another life and is a double free (a bit it set in a later
//! life is taken back at once). Hence a slab's live count is its objects minus
//! its freed bits, and objects are never handed out twice in one life (the cursor only grows),
//! so a bit already set is a double free.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use translator::{CACHE_STAMP_FLAG, Handle, WARP_LANES};

use super::channel::{CacheChannel, entry_parts};
use super::geometry::{
    BITMAP_WORDS, CACHE_CLASSES, CURSOR_MASK, RING_LEN, RUN_CLASS, RUN_SLOT_LOG2, RUN_SPANS_AT,
    SLAB_NUMBER_SHIFT, cache_class, claims_ahead, object_slots, run_class_serves, slab_blocks,
    slab_objects, slot_log2,
};
use crate::records::LaneStatus;
use crate::resolver::{lane_mask, set_lanes};
use crate::sync::{AtomicU32, AtomicU64, fence, spin_wait, yield_now};

/// A free judged in a slab: the object's first slot, the slab's life it was judged in, and
/// the slots it covers.
#[derive(Clone, Copy)]
struct Judged {
    slot: u64,
    life: u32,
    slots: u32,
}

/// What a warp's allocation got from the caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedAlloc {
    /// Each served lane's handle (null elsewhere).
    pub handles: [Handle; WARP_LANES],
    /// Lanes served from a cache.
    pub served: u32,
    /// Lanes of a cache class the host denied a slab: they ask through the mailbox.
    pub fallback: u32,
}

/// What a warp's free did in the caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedFree {
    /// Lanes whose address lies in a cache slab: judged here, never sent to the host.
    pub handled: u32,
    /// Their outcomes (`Ok` elsewhere).
    pub lanes: [LaneStatus; WARP_LANES],
}

/// Hash table size for an arena of at most `max_arena_blocks` VABlocks.
pub fn hash_len(max_arena_blocks: u64) -> usize {
    (2 * max_arena_blocks).next_power_of_two().max(64) as usize
}

/// The hash table's first probe for block number `block`.
pub fn hash_home(block: u64, len: usize) -> usize {
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - len.trailing_zeros())) as usize
}

/// Where a block table value keeps its slab's class: above the slab id + 1, which is below
/// `1 << ENTRY_ID_BITS` + 1. A free learns the class from its probe, so it reads the class
/// word beside the slab's life instead of after its fields.
pub const BLOCK_CLASS_SHIFT: u32 = 16;
const _: () = assert!(super::channel::ENTRY_ID_BITS < BLOCK_CLASS_SHIFT);

/// The block table's value for a block of slab `id`, of class `class`.
pub fn block_value(id: u32, class: usize) -> u32 {
    (id + 1) | (class as u32) << BLOCK_CLASS_SHIFT
}

/// The slab id and class a block table value names; `None` for 0 (no slab holds the block).
pub fn block_slab(value: u32) -> Option<(usize, usize)> {
    let id = (value & ((1 << BLOCK_CLASS_SHIFT) - 1)).checked_sub(1)?;
    Some((id as usize, (value >> BLOCK_CLASS_SHIFT) as usize))
}

/// Number of device arrays ([`CpuCaches::arrays`]).
pub const DEVICE_ARRAYS: usize = 14;
/// The slab lives' array, in [`CpuCaches::arrays`] order.
pub const LIFE_ARRAY: usize = 8;
/// The bitmaps' array, in [`CpuCaches::arrays`] order.
pub const BITS_ARRAY: usize = 9;
/// The free counters' array, in [`CpuCaches::arrays`] order.
pub const COUNTERS_ARRAY: usize = 12;
/// The most slabs a class's lock holder claims ahead, in one claim.
pub const AHEAD_SLABS: usize = 4;
/// Words per class of the slabs claimed ahead: the slab numbers they become, `first << 32 |
/// end` (numbers `first..end` are held; 0: none ever), then slab number `n`'s ring entry at
/// `1 + n % AHEAD_SLABS`.
pub const AHEAD_WORDS: usize = 1 + AHEAD_SLABS;

/// The word of the bitmaps array holding the span of a run object at slot `slot` of slab `id`.
pub fn run_span_index(id: u32, slot: u64) -> usize {
    id as usize * BITMAP_WORDS + RUN_SPANS_AT + slot as usize
}

/// The slots of the run object that starts at a slot whose span word is `span`, in a slab whose
/// life is `life` now; `None` when no object starts there in this life.
pub fn run_slots(life: u32, span: u64) -> Option<u64> {
    ((span >> 32) as u32 == life && span as u32 != 0).then_some(u64::from(span as u32))
}

/// Stripes of the free counters (warps add to the stripe of their SM, so no one word is hot).
pub const COUNTER_STRIPES: usize = 32;
/// Free counters per stripe: one per [`LaneStatus`] a device free can answer (Ok counts freed
/// objects).
pub const FREE_COUNTERS: usize = 4;

/// One array of the device state.
pub enum DeviceArray<'a> {
    /// `u32` words.
    U32(&'a [AtomicU32]),
    /// `u64` words.
    U64(&'a [AtomicU64]),
}

enum Advance {
    /// The class has a newer slab: try again.
    Moved,
    /// The host denied the next slab (or the mailbox closed): ask through the mailbox.
    Denied,
}

/// The device side of the caches.
pub struct CpuCaches {
    channel: Arc<CacheChannel>,
    class_words: Box<[AtomicU64]>,
    class_locks: Box<[AtomicU32]>,
    class_slab: Box<[AtomicU32]>,
    slab_base: Box<[AtomicU64]>,
    slab_class: Box<[AtomicU32]>,
    slab_live: Box<[AtomicU32]>,
    slab_number: Box<[AtomicU32]>,
    slab_generation: Box<[AtomicU32]>,
    slab_life: Box<[AtomicU32]>,
    bits: Box<[AtomicU64]>,
    hash: Box<[AtomicU64]>,
    returns_claimed: AtomicU64,
    /// Per stripe, frees by outcome (`LaneStatus` code 0..4).
    counters: Box<[AtomicU64]>,
    /// Per class ([`AHEAD_WORDS`]): the slabs its lock holder claimed ahead (`claims_ahead`).
    class_ahead: Box<[AtomicU64]>,
}

fn words<T>(n: usize, new: impl Fn() -> T) -> Box<[T]> {
    (0..n).map(|_| new()).collect()
}

/// Element widths (bytes) and lengths of the device arrays, in [`CpuCaches::arrays`] order,
/// for `max_slabs` slab ids and an arena of at most `max_arena_blocks` VABlocks.
pub fn device_array_lens(
    max_slabs: usize,
    max_arena_blocks: u64,
) -> [(usize, usize); DEVICE_ARRAYS] {
    [
        (8, CACHE_CLASSES),
        (4, CACHE_CLASSES),
        (4, CACHE_CLASSES * RING_LEN),
        (8, max_slabs),
        (4, max_slabs),
        (4, max_slabs),
        (4, max_slabs),
        (4, max_slabs),
        (4, max_slabs),
        (8, max_slabs * BITMAP_WORDS),
        (8, hash_len(max_arena_blocks)),
        (8, 1),
        (8, COUNTER_STRIPES * FREE_COUNTERS),
        (8, CACHE_CLASSES * AHEAD_WORDS),
    ]
}

impl CpuCaches {
    /// Device state for `channel`'s caches over an arena of at most `max_arena_blocks` blocks.
    pub fn new(channel: Arc<CacheChannel>, max_arena_blocks: u64) -> Self {
        let lens = device_array_lens(channel.max_slabs(), max_arena_blocks).map(|(_, n)| n);
        let u32s = |n: usize| words(n, || AtomicU32::new(0));
        let u64s = |n: usize| words(n, || AtomicU64::new(0));
        Self {
            class_words: u64s(lens[0]),
            class_locks: u32s(lens[1]),
            class_slab: u32s(lens[2]),
            slab_base: u64s(lens[3]),
            slab_class: u32s(lens[4]),
            slab_live: u32s(lens[5]),
            slab_number: u32s(lens[6]),
            slab_generation: u32s(lens[7]),
            slab_life: u32s(lens[8]),
            bits: u64s(lens[9]),
            hash: u64s(lens[10]),
            returns_claimed: AtomicU64::new(0),
            counters: u64s(lens[12]),
            class_ahead: u64s(lens[13]),
            channel,
        }
    }

    /// Overwrite device array `index` with `bytes` (its words, little endian), as copied from
    /// GPU memory.
    pub fn load(&self, index: usize, bytes: &[u8]) {
        match &self.arrays()[index] {
            DeviceArray::U32(words) => {
                for (w, b) in words.iter().zip(bytes.chunks_exact(4)) {
                    w.store(
                        u32::from_le_bytes(b.try_into().expect("4 bytes")),
                        Ordering::Relaxed,
                    );
                }
            }
            DeviceArray::U64(words) => {
                for (w, b) in words.iter().zip(bytes.chunks_exact(8)) {
                    w.store(
                        u64::from_le_bytes(b.try_into().expect("8 bytes")),
                        Ordering::Relaxed,
                    );
                }
            }
        }
    }

    /// Device array `index` as bytes (its words, little endian), to copy to GPU memory.
    pub fn save(&self, index: usize) -> Vec<u8> {
        match &self.arrays()[index] {
            DeviceArray::U32(words) => words
                .iter()
                .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
                .collect(),
            DeviceArray::U64(words) => words
                .iter()
                .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
                .collect(),
        }
    }

    /// Serve the lanes of `mask` whose size a cache class holds; the others are left alone.
    /// Lanes of the run class join only where [`run_class_serves`] says so for `arranged`.
    /// `closed` is asked on every poll while a warp waits for a slab, and says whether the
    /// mailbox closed (the caller decides how often it really reads the flag).
    pub fn alloc(
        &self,
        mask: u32,
        sizes: &[u64; WARP_LANES],
        arranged: bool,
        closed: &dyn Fn() -> bool,
    ) -> CachedAlloc {
        let mut out = CachedAlloc {
            handles: [Handle::NULL; WARP_LANES],
            served: 0,
            fallback: 0,
        };
        let class_of = |lane: usize| cache_class(sizes[lane]);
        let mut eligible = mask & lane_mask(|l| class_of(l).is_some());
        let runs = eligible & lane_mask(|l| class_of(l) == Some(RUN_CLASS));
        if runs != 0 {
            let max = set_lanes(runs).map(|l| sizes[l]).max().unwrap_or(0);
            let packed = set_lanes(runs).map(|l| sizes[l].next_multiple_of(16)).sum();
            if !run_class_serves(arranged, max, packed) {
                eligible &= !runs;
            }
        }
        while eligible != 0 {
            let class = class_of(eligible.trailing_zeros() as usize).expect("eligible lane");
            let group = eligible & lane_mask(|l| class_of(l) == Some(class));
            eligible &= !group;
            if class == RUN_CLASS {
                self.alloc_run_group(group, sizes, closed, &mut out);
                continue;
            }
            let objects = slab_objects(class);
            let mut pending = group;
            loop {
                let n = u64::from(pending.count_ones());
                // Acquire, as on the GPU: the slab's state the move released (a fetch_add after
                // the move's store carries its release on); nothing before it is for a reader.
                let word = self.class_words[class].fetch_add(n, Ordering::Acquire);
                let number = (word >> SLAB_NUMBER_SHIFT) as u32;
                let cursor = word & CURSOR_MASK;
                if number > 0 && cursor < objects {
                    let Some(id) = self.slab_of_number(class, number) else {
                        tracing::error!(class, number, "no slab id holds the current slab");
                        out.fallback |= pending;
                        break;
                    };
                    let base = self.slab_base[id].load(Ordering::Relaxed);
                    let stamp = self.slab_generation[id].load(Ordering::Relaxed);
                    for (rank, lane) in set_lanes(pending).enumerate() {
                        let slot = cursor + rank as u64;
                        if slot < objects {
                            out.handles[lane] =
                                Handle::cached(base + (slot << slot_log2(class)), stamp);
                            pending &= !(1 << lane);
                            out.served |= 1 << lane;
                        }
                    }
                }
                if pending == 0 {
                    break;
                }
                if let Advance::Denied = self.advance(class, number, closed) {
                    out.fallback |= pending;
                    break;
                }
            }
        }
        out
    }

    /// The run-class lanes of `group`, as `cache_alloc` on the GPU: one fetch_add for all their
    /// slots, each lane's object after the ones of the lanes below it; the lane whose slots
    /// would cross the slab's end counts the slots left there as freed, and it and the lanes
    /// after it go on alone ([`CpuCaches::alloc_run`]).
    fn alloc_run_group(
        &self,
        group: u32,
        sizes: &[u64; WARP_LANES],
        closed: &dyn Fn() -> bool,
        out: &mut CachedAlloc,
    ) {
        let objects = slab_objects(RUN_CLASS);
        let total: u64 = set_lanes(group)
            .map(|l| object_slots(RUN_CLASS, sizes[l]))
            .sum();
        let word = self.class_words[RUN_CLASS].fetch_add(total, Ordering::Acquire);
        let number = (word >> SLAB_NUMBER_SHIFT) as u32;
        let cursor = word & CURSOR_MASK;
        let id = if number > 0 && cursor < objects {
            let Some(id) = self.slab_of_number(RUN_CLASS, number) else {
                tracing::error!(number, "no slab id holds the run class's current slab");
                out.fallback |= group;
                return;
            };
            Some(id)
        } else {
            None
        };
        let mut slot = cursor;
        for lane in set_lanes(group) {
            let slots = object_slots(RUN_CLASS, sizes[lane]);
            let first = slot;
            slot += slots;
            let handle = match id {
                Some(id) if first + slots <= objects => Some(self.run_object(id, first, slots)),
                _ => {
                    if let Some(id) = id.filter(|_| first < objects) {
                        // Its slots cross the slab's end (one lane per slab life): no object
                        // will take the slots left there, so they count as freed now.
                        self.count_down(id, (objects - first) as u32);
                    }
                    self.alloc_run(slots, closed)
                }
            };
            match handle {
                Some(handle) => {
                    out.handles[lane] = handle;
                    out.served |= 1 << lane;
                }
                None => out.fallback |= 1 << lane,
            }
        }
    }

    /// The run object of `slots` slots at slot `slot` of slab `id`, its span recorded in the
    /// slab's current life.
    fn run_object(&self, id: usize, slot: u64, slots: u64) -> Handle {
        let base = self.slab_base[id].load(Ordering::Relaxed);
        let stamp = self.slab_generation[id].load(Ordering::Relaxed);
        let life = self.slab_life[id].load(Ordering::Relaxed);
        self.bits[id * BITMAP_WORDS + RUN_SPANS_AT + slot as usize]
            .store(u64::from(life) << 32 | slots, Ordering::Release);
        Handle::cached(base + (slot << RUN_SLOT_LOG2), stamp)
    }

    /// One lane's run object of `slots` slots, taken with a fetch_add of its own (the twin of
    /// `cache_alloc_run`); `None` when the host denied the class a slab.
    fn alloc_run(&self, slots: u64, closed: &dyn Fn() -> bool) -> Option<Handle> {
        let objects = slab_objects(RUN_CLASS);
        loop {
            let word = self.class_words[RUN_CLASS].fetch_add(slots, Ordering::Acquire);
            let number = (word >> SLAB_NUMBER_SHIFT) as u32;
            let slot = word & CURSOR_MASK;
            if number > 0 && slot < objects {
                let Some(id) = self.slab_of_number(RUN_CLASS, number) else {
                    tracing::error!(number, "no slab id holds the run class's current slab");
                    return None;
                };
                if slot + slots <= objects {
                    return Some(self.run_object(id, slot, slots));
                }
                // Its slots cross the slab's end (one lane per slab life): no object will take
                // the slots left there, so they count as freed now.
                self.count_down(id, (objects - slot) as u32);
            }
            if let Advance::Denied = self.advance(RUN_CLASS, number, closed) {
                return None;
            }
        }
    }

    /// Count `slots` of slab `id` freed: each count-down is a release (of what the warp did
    /// with the slots, and a free's bits), and the one that reaches zero acquires them all
    /// (the count's release sequence) and gives the slab back.
    fn count_down(&self, id: usize, slots: u32) {
        // Slots are counted down only after they were handed out (or left over) in the slab's
        // current life, so the count cannot be below them.
        let before = self.slab_live[id].fetch_sub(slots, Ordering::Release);
        debug_assert!(before >= slots, "slab {id}: {before} live, {slots} freed");
        if before == slots {
            fence(Ordering::Acquire);
            self.return_slab(id);
        }
    }

    /// Whether slab id `id` is `class`'s slab number `number` now. The number is read first
    /// (acquire; it is written last): if it is `number`, the class read after it is that
    /// placement's.
    fn is_slab(&self, id: usize, class: usize, number: u32) -> bool {
        self.slab_number[id].load(Ordering::Acquire) == number
            && self.slab_class[id].load(Ordering::Relaxed) == class as u32
    }

    /// The id of `class`'s slab number `number`, of which the caller holds objects not handed
    /// out yet (so the slab cannot go back and its fields stay). The class's ring of ids has
    /// `RING_LEN` entries: a warp held up between taking its objects and reading the ring can
    /// find a later slab's id there (the class moved `RING_LEN` slabs on meanwhile, seen on the
    /// H200 with millions of threads allocating one class), so the entry is checked and, when
    /// it was overwritten, the slab is looked up among all ids. `None` only if no id holds it
    /// (a bug).
    pub fn slab_of_number(&self, class: usize, number: u32) -> Option<usize> {
        let id = self.class_slab[class * RING_LEN + number as usize % RING_LEN]
            .load(Ordering::Acquire) as usize;
        if self.is_slab(id, class, number) {
            return Some(id);
        }
        (0..self.slab_number.len()).find(|&other| self.is_slab(other, class, number))
    }

    /// After a denial (class lock held): put a cursor that warps pushed past the end of slab
    /// number `seen` back to the end, so warps that keep finding the class used up while the
    /// host denies it slabs never carry the cursor into the slab number.
    fn settle_cursor(&self, class: usize, seen: u32) {
        let objects = slab_objects(class);
        let settled = u64::from(seen) << SLAB_NUMBER_SHIFT | objects;
        let mut current = self.class_words[class].load(Ordering::Relaxed);
        while (current >> SLAB_NUMBER_SHIFT) as u32 == seen && current & CURSOR_MASK > objects {
            match self.class_words[class].compare_exchange_weak(
                current,
                settled,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => current = now,
            }
        }
    }

    fn number(&self, class: usize) -> u32 {
        (self.class_words[class].load(Ordering::Acquire) >> SLAB_NUMBER_SHIFT) as u32
    }

    /// Move `class` past slab number `seen`, or learn that another warp did. The class lock
    /// word is `asks << 1 | held`: its holder numbers the asks it posts.
    fn advance(&self, class: usize, seen: u32, closed: &dyn Fn() -> bool) -> Advance {
        loop {
            if self.number(class) != seen {
                return Advance::Moved;
            }
            let lock = self.class_locks[class].load(Ordering::Relaxed);
            if lock & 1 == 0
                && self.class_locks[class]
                    .compare_exchange(lock, lock | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                let mut asks = lock >> 1;
                let outcome = self.advance_locked(class, seen, &mut asks, closed);
                self.class_locks[class].store(asks << 1, Ordering::Release);
                return outcome;
            }
            yield_now();
        }
    }

    fn advance_locked(
        &self,
        class: usize,
        seen: u32,
        asks: &mut u32,
        closed: &dyn Fn() -> bool,
    ) -> Advance {
        if self.number(class) != seen {
            return Advance::Moved;
        }
        let number = seen + 1;
        if let Some(entry) = self.take_ahead(class, number) {
            // Claimed, posted as taken and started by the move before: no word of the host's
            // to read and nothing to write but the class word.
            self.make_current(class, number, entry);
            self.claim_ahead(class, number);
            self.ready_next_ahead(class);
            return Advance::Moved;
        }
        // Slab number `seen + 1` is the host's entry `seen`.
        let index = seen;
        let mut ask = None;
        let mut polls = 0u32;
        loop {
            if self.channel.filled(class) > index {
                if self.channel.claim(class, index, index) {
                    break;
                }
                // The host took the entry back (it needed the room): ask afresh.
                ask = None;
            }
            if ask.is_none() && *asks != 0 && self.channel.denied(class) == *asks {
                // The host denied the class's last ask and has not withdrawn it: no round trip
                // per warp while the caches are at their bound (the host publishes the slab
                // when one fits).
                self.settle_cursor(class, seen);
                return Advance::Denied;
            }
            let ask = *ask.get_or_insert_with(|| {
                *asks = (*asks + 1) & (u32::MAX >> 1);
                self.channel.post_demand(class, *asks);
                *asks
            });
            if self.channel.denied(class) == ask {
                self.settle_cursor(class, seen);
                return Advance::Denied;
            }
            polls += 1;
            if closed() {
                return Advance::Denied;
            }
            if polls < 64 {
                spin_wait();
            } else {
                yield_now();
            }
        }
        let entry = self.channel.entry(class, index);
        self.start_slab(class, number, entry);
        self.make_current(class, number, entry);
        self.channel.post_taken(class, number);
        self.claim_ahead(class, number);
        self.ready_next_ahead(class);
        Advance::Moved
    }

    /// `class`'s words of the slabs claimed ahead ([`AHEAD_WORDS`]).
    fn ahead(&self, class: usize) -> &[AtomicU64] {
        &self.class_ahead[class * AHEAD_WORDS..][..AHEAD_WORDS]
    }

    /// The slabs `class`'s lock holder holds claimed ahead: the slab numbers they become, and
    /// their ring entries in that order ([`entry_parts`] reads them).
    pub fn claimed_ahead(&self, class: usize) -> (std::ops::Range<u32>, Vec<u64>) {
        let ahead = self.ahead(class);
        let held = ahead[0].load(Ordering::Relaxed);
        let numbers = (held >> 32) as u32..held as u32;
        let entries = numbers
            .clone()
            .map(|n| ahead[1 + n as usize % AHEAD_SLABS].load(Ordering::Relaxed))
            .collect();
        (numbers, entries)
    }

    /// The class lock's holder, having moved `class` to slab number `number` with none held
    /// ahead: claim the host's next published slabs (entries `number..`, at most
    /// [`AHEAD_SLABS`]) in one claim for the next moves, if the class claims ahead, and post
    /// them taken (the host counts them held from here). No ask and no wait: when none is
    /// published the next move asks as before.
    fn claim_ahead(&self, class: usize, number: u32) {
        let ahead = self.ahead(class);
        let held = ahead[0].load(Ordering::Relaxed);
        if !claims_ahead(class) || (held >> 32) < (held & 0xFFFF_FFFF) {
            return;
        }
        let count = self
            .channel
            .filled(class)
            .saturating_sub(number)
            .min(AHEAD_SLABS as u32);
        if count == 0 || !self.channel.claim(class, number, number + count - 1) {
            return; // none published, or the host took them back (it needed the room)
        }
        for index in number..number + count {
            // Entry `index` becomes slab number `index + 1`.
            ahead[1 + (index as usize + 1) % AHEAD_SLABS]
                .store(self.channel.entry(class, index), Ordering::Relaxed);
        }
        ahead[0].store(
            u64::from(number + 1) << 32 | u64::from(number + 1 + count),
            Ordering::Relaxed,
        );
        self.channel.post_taken(class, number + count);
    }

    /// The class lock's holder, after `class` moved: start the slab held ahead that its next
    /// move makes current, if any (its fields, life, bitmap words and blocks), so that move only
    /// moves the class word and the class's warps wait for no start (`cache_next_ahead`). A
    /// free that finds its blocks meanwhile reads a slab number one past the class word's and is
    /// judged as by a current slab with nothing handed out.
    fn ready_next_ahead(&self, class: usize) {
        let (numbers, entries) = self.claimed_ahead(class);
        if let Some(&entry) = entries.first() {
            self.start_slab(class, numbers.start, entry);
        }
    }

    /// Slab `slab`'s bitmap words as `class`'s in life `life`: no slot freed.
    fn write_words(&self, class: usize, slab: usize, life: u32) {
        let used = (slab_objects(class) as usize).div_ceil(32);
        for w in &self.bits[slab * BITMAP_WORDS..slab * BITMAP_WORDS + used] {
            w.store(u64::from(life) << 32, Ordering::Relaxed);
        }
    }

    /// The class lock's holder: the ring entry of the slab claimed ahead to become `class`'s
    /// slab number `number`, taken out of the class's words; `None` when none was.
    fn take_ahead(&self, class: usize, number: u32) -> Option<u64> {
        let ahead = self.ahead(class);
        let held = ahead[0].load(Ordering::Relaxed);
        let (first, end) = ((held >> 32) as u32, held as u32);
        if first != number || first >= end {
            return None;
        }
        ahead[0].store(
            u64::from(first + 1) << 32 | u64::from(end),
            Ordering::Relaxed,
        );
        Some(ahead[1 + number as usize % AHEAD_SLABS].load(Ordering::Relaxed))
    }

    /// The class lock's holder: start the slab of ring entry `entry` as `class`'s slab number
    /// `number` (its fields, its new life, its bitmap words, its blocks); it becomes current
    /// with [`CpuCaches::make_current`].
    fn start_slab(&self, class: usize, number: u32, entry: u64) {
        let (base, id, generation) = entry_parts(entry);
        let slab = id as usize;
        // Only the lock holder writes the life: read before the stores, as on the GPU.
        let life = self.slab_life[slab].load(Ordering::Relaxed).wrapping_add(1);
        self.slab_base[slab].store(base, Ordering::Relaxed);
        self.slab_class[slab].store(class as u32, Ordering::Relaxed);
        self.slab_live[slab].store(slab_objects(class) as u32, Ordering::Relaxed);
        self.slab_generation[slab].store(CACHE_STAMP_FLAG | generation, Ordering::Relaxed);
        // The number last (release): a reader that sees it sees the class above (`is_slab`).
        self.slab_number[slab].store(number, Ordering::Release);
        // The new life after the fields above (a free that reads it sees them), then its
        // bitmap: a late free of an earlier life finds the words of this one and is refused.
        self.slab_life[slab].store(life, Ordering::Release);
        self.write_words(class, slab, life);
        for b in 0..slab_blocks(class) {
            self.map_block((base >> 21) + b, block_value(id, class));
        }
    }

    /// The class lock's holder: the started slab of ring entry `entry` becomes `class`'s
    /// current slab, number `number`. One release, the word's: it publishes the ring's entry too
    /// (a reader of the ring checks the slab's number anyway, `is_slab`), and the start (this
    /// holder's, or the holder's before, whose unlock this one's lock acquired). The GPU stores
    /// the word; the twin swaps it, the same under the memory model (the old word is not used),
    /// because loom lets a plain store fall between the read and the write of another thread's
    /// fetch_add (tokio-rs/loom#254), so two warps would take the same objects in its model only.
    fn make_current(&self, class: usize, number: u32, entry: u64) {
        let id = entry_parts(entry).1;
        self.class_slab[class * RING_LEN + number as usize % RING_LEN].store(id, Ordering::Relaxed);
        self.class_words[class].swap(u64::from(number) << SLAB_NUMBER_SHIFT, Ordering::Release);
    }

    /// Point block `block` at `value` ([`block_value`], or 0 for none), adding its key if new.
    fn map_block(&self, block: u64, value: u32) {
        let key = block + 1;
        let entry = key << 32 | u64::from(value);
        let len = self.hash.len();
        let mut at = hash_home(block, len);
        for _ in 0..len {
            let slot = &self.hash[at];
            let current = slot.load(Ordering::Acquire);
            if current >> 32 == key {
                slot.store(entry, Ordering::Release);
                return;
            }
            if current == 0 {
                match slot.compare_exchange(0, entry, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return,
                    // Another block took it; keys are unique, so look at it again.
                    Err(_) => continue,
                }
            }
            at = (at + 1) & (len - 1);
        }
        unreachable!("the block table has room for every block of the arena");
    }

    /// The slab holding block `block`, if any (for the unit tests, which loom's build leaves out).
    #[cfg(all(test, not(loom)))]
    fn slab_of_block(&self, block: u64) -> Option<usize> {
        self.slab_and_class_of_block(block).map(|(id, _)| id)
    }

    /// The slab holding block `block` and its class when it was mapped, if any.
    fn slab_and_class_of_block(&self, block: u64) -> Option<(usize, usize)> {
        let key = block + 1;
        let len = self.hash.len();
        let mut at = hash_home(block, len);
        for _ in 0..len {
            let current = self.hash[at].load(Ordering::Acquire);
            if current == 0 {
                return None;
            }
            if current >> 32 == key {
                return block_slab(current as u32);
            }
            at = (at + 1) & (len - 1);
        }
        None
    }

    /// Free the lanes of `mask` whose address lies in a cache slab; `words` are handles, or
    /// object addresses when `by_address`.
    pub fn free(&self, mask: u32, words: &[u64; WARP_LANES], by_address: bool) -> CachedFree {
        let mut out = CachedFree {
            handled: 0,
            lanes: [LaneStatus::Ok; WARP_LANES],
        };
        let mut judged: [Option<(usize, Judged)>; WARP_LANES] = [None; WARP_LANES];
        for lane in set_lanes(mask) {
            let (address, stamp) = if by_address {
                (words[lane], 0)
            } else {
                // Only handles a cache made, as `client.cuh`'s free: a host's handle goes to
                // the host, which answers one into a cache slab's blocks as a second free.
                let h = Handle(words[lane]);
                let stamp = h.free_stamp();
                if stamp < CACHE_STAMP_FLAG {
                    continue;
                }
                (h.address(), stamp)
            };
            if address == 0 {
                continue;
            }
            let found = self.slab_and_class_of_block(address >> 21);
            // A handle a cache slab made whose blocks no slab holds now: its slab went back
            // after its last object was freed, so this is a second free.
            let stale = stamp >= CACHE_STAMP_FLAG;
            if found.is_none() && !stale {
                continue; // the host's object, or no one's: the host judges it
            }
            out.handled |= 1 << lane;
            out.lanes[lane] = match found {
                Some((slab, class)) => match self.judge_free(class, slab, address, stamp) {
                    Ok(j) => {
                        judged[lane] = Some((slab, j));
                        LaneStatus::Ok // until its bit says otherwise
                    }
                    Err(status) => status,
                },
                None => LaneStatus::DoubleFree,
            };
        }
        self.set_bits(&judged, &mut out.lanes);
        // The slab of each lane whose bit was set (usize::MAX: none), taken off as counted.
        let mut slabs = std::array::from_fn::<_, WARP_LANES, _>(|l| match judged[l] {
            Some((slab, _)) if out.lanes[l] == LaneStatus::Ok => slab,
            _ => usize::MAX,
        });
        // Every lane's bit, and what it did with its object, comes before the count-downs'
        // releases: one thread plays the warp here, as the GPU's lanes meet at a __syncwarp.
        // One count-down per slab, as the warp-aggregated atomic on the GPU; a run object
        // counts down alone. These lanes set their bits in the slab's current life, so it is
        // live until they count down.
        for lane in 0..WARP_LANES {
            let slab = slabs[lane];
            if slab == usize::MAX {
                continue;
            }
            let slots = judged[lane].map_or(1, |(_, j)| j.slots);
            if slots != 1 {
                slabs[lane] = usize::MAX;
                self.count_down(slab, slots);
                continue;
            }
            let same = lane_mask(|l| slabs[l] == slab);
            for l in set_lanes(same) {
                slabs[l] = usize::MAX;
            }
            self.count_down(slab, same.count_ones());
        }
        // Stripe 0: CPU warps have no SM; the sums are what the host reads.
        for lane in set_lanes(out.handled) {
            self.counters[out.lanes[lane] as usize].fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    /// One lane's object in `slab`, whose class the block table gave as `mapped_class`, before
    /// its bit: where it is and the slab's life it was judged in when it may be freed, else its
    /// outcome.
    fn judge_free(
        &self,
        mapped_class: usize,
        slab: usize,
        address: u64,
        stamp: u32,
    ) -> Result<Judged, LaneStatus> {
        // The class word beside the life, not after the fields (one round trip fewer on the
        // GPU). Relaxed: an object handed out before this free was, reads a word at or past its
        // own fetch_add, and the word is compared only with the slab's number read below.
        let mut word = self.class_words[mapped_class].load(Ordering::Relaxed);
        // The life first among the slab's fields: the fields read below are this life's or a
        // later one's, and the bit is set only in a word of this life.
        let life = self.slab_life[slab].load(Ordering::Acquire);
        let number = self.slab_number[slab].load(Ordering::Relaxed);
        // Then the stamp: a handle of an earlier slab on these blocks (of any class: a block's
        // cache generations only grow) or of a host chunk there before is a second free,
        // wherever in the new slab it points. Stamp 0 (a free by address, or a handle made by
        // hand) is not checked.
        let current = self.slab_generation[slab].load(Ordering::Relaxed);
        // The class and base before the check: on the GPU their round trips overlap the
        // stamp's.
        let class = self.slab_class[slab].load(Ordering::Relaxed) as usize;
        let base = self.slab_base[slab].load(Ordering::Relaxed);
        if stamp != 0 && stamp != current {
            return Err(LaneStatus::DoubleFree);
        }
        let log2 = slot_log2(class);
        let offset = address.wrapping_sub(base);
        if offset >> log2 >= slab_objects(class) {
            return Err(LaneStatus::InvalidHandle);
        }
        if offset & ((1 << log2) - 1) != 0 {
            return Err(LaneStatus::InteriorPointer);
        }
        let slot = offset >> log2;
        if class != mapped_class {
            // The slab went back and started again in another class since the probe.
            word = self.class_words[class].load(Ordering::Relaxed);
        }
        let current_number = (word >> SLAB_NUMBER_SHIFT) as u32;
        if number == current_number.wrapping_add(1)
            || (number == current_number && slot >= word & CURSOR_MASK)
        {
            // Not handed out in this life (the slab started ahead of the class's current one,
            // or past the cursor): a pointer (no stamp) can only be of an earlier life of the
            // blocks, a second free; a handle of this life was made up.
            return Err(if stamp == 0 {
                LaneStatus::DoubleFree
            } else {
                LaneStatus::InvalidHandle
            });
        }
        let mut slots = 1;
        if class == RUN_CLASS {
            // A run object starts where its span was written in this life; any other slot
            // handed out lies inside an object (or past the slab's last one).
            let span = self.bits[slab * BITMAP_WORDS + RUN_SPANS_AT + slot as usize]
                .load(Ordering::Acquire);
            if (span >> 32) as u32 != life || span as u32 == 0 {
                return Err(if stamp == 0 {
                    LaneStatus::InteriorPointer
                } else {
                    LaneStatus::InvalidHandle
                });
            }
            slots = span as u32;
        }
        Ok(Judged { slot, life, slots })
    }

    /// Set the bits of the `judged` lanes (slab, where and in which life), each lane's outcome
    /// into `lanes`: `Ok`, or `DoubleFree` when its bit was set already or the word is of
    /// another life (the slab went back, or came back, since). As on the GPU
    /// (`detail/cache.cuh`, `cache_set_bits`): one atomic OR per bitmap word and life for the
    /// lanes that share it; of lanes freeing one object the lowest sets its bit and the others
    /// are second frees. The word's life comes back with the bits from the one atomic; bits
    /// that landed in a later life are taken back at once.
    fn set_bits(
        &self,
        judged: &[Option<(usize, Judged)>; WARP_LANES],
        lanes: &mut [LaneStatus; WARP_LANES],
    ) {
        let word_of = |l: usize| {
            judged[l].map(|(slab, j)| (j.life, slab * BITMAP_WORDS + j.slot as usize / 32))
        };
        let bit_of = |l: usize| judged[l].map_or(0, |(_, j)| 1u64 << (j.slot % 32));
        let mut done = 0u32;
        for lane in 0..WARP_LANES {
            let Some((life, index)) = word_of(lane) else {
                continue;
            };
            if done >> lane & 1 == 1 {
                continue;
            }
            let same_word = lane_mask(|l| word_of(l) == Some((life, index)));
            done |= same_word;
            let (mut bits, mut first) = (0u64, 0u32);
            for l in set_lanes(same_word) {
                if bits & bit_of(l) == 0 {
                    bits |= bit_of(l);
                    first |= 1 << l;
                }
            }
            let word = &self.bits[index];
            // Relaxed: the word's atomicity is the judgement; what the lanes did with their
            // objects is ordered by the count-down's release.
            let before = word.fetch_or(bits, Ordering::Relaxed);
            let landed = bits & !before;
            // The bits this free set in the judged life: what the setter hands its word's lanes.
            let landed_here = if (before >> 32) as u32 == life {
                landed
            } else {
                if landed != 0 {
                    word.fetch_and(!landed, Ordering::Relaxed);
                }
                0
            };
            for l in set_lanes(same_word) {
                lanes[l] = if first >> l & 1 == 1 && landed_here & bit_of(l) != 0 {
                    LaneStatus::Ok
                } else {
                    LaneStatus::DoubleFree
                };
            }
        }
    }

    /// Retire every class's current slab (no warp may run): its objects not handed out yet are
    /// marked freed (a later free of one is a double free), so the slab goes back to the host at
    /// once if nothing of it is live, else when its last object is freed. Slabs claimed ahead
    /// go back at once, the class word moved to the last one's number (as if they had been
    /// current and retired empty), so the class's next move asks for the host's entry after
    /// them. Returns the slabs given back now.
    pub fn drain(&self) -> usize {
        (0..CACHE_CLASSES)
            .map(|class| self.retire_current(class) + self.give_back_ahead(class))
            .sum()
    }

    /// [`CpuCaches::drain`]'s part for the slabs claimed ahead of `class`: how many it held.
    fn give_back_ahead(&self, class: usize) -> usize {
        let (numbers, entries) = self.claimed_ahead(class);
        self.ahead(class)[0].store(0, Ordering::Relaxed);
        if numbers.is_empty() {
            return 0;
        }
        self.class_words[class].store(
            u64::from(numbers.end - 1) << SLAB_NUMBER_SHIFT | slab_objects(class),
            Ordering::Release,
        );
        for (number, entry) in numbers.zip(&entries) {
            let slab = entry_parts(*entry).1 as usize;
            if self.is_slab(slab, class, number) {
                // Started for its move (the first held): its blocks are unmapped first.
                self.return_slab(slab);
            } else {
                // Never started, so none of its blocks is mapped: it goes straight to the host.
                self.post_return(slab);
            }
        }
        entries.len()
    }

    /// [`CpuCaches::drain`]'s part for the current slab of `class`: 1 when it went back now.
    fn retire_current(&self, class: usize) -> usize {
        let word = self.class_words[class].load(Ordering::Acquire);
        let number = (word >> SLAB_NUMBER_SHIFT) as u32;
        let objects = slab_objects(class);
        let cursor = (word & CURSOR_MASK).min(objects);
        if number == 0 || cursor == objects {
            return 0;
        }
        let Some(slab) = self.slab_of_number(class, number) else {
            tracing::error!(class, number, "no slab id holds the current slab");
            return 0;
        };
        self.class_words[class].store(
            u64::from(number) << SLAB_NUMBER_SHIFT | objects,
            Ordering::Release,
        );
        for slot in cursor..objects {
            self.bits[slab * BITMAP_WORDS + slot as usize / 32]
                .fetch_or(1 << (slot % 32), Ordering::Relaxed);
        }
        let unclaimed = (objects - cursor) as u32;
        if self.slab_live[slab].fetch_sub(unclaimed, Ordering::AcqRel) != unclaimed {
            return 0;
        }
        self.return_slab(slab);
        1
    }

    /// The device state as arrays of words, in the order of `am::DeviceCaches`'s device
    /// pointers: class words, class locks, class slabs, slab base, class, live, number,
    /// generation, life, bitmaps, block table, returns claimed, free counters, slabs claimed
    /// ahead. The cuda backend copies its device memory through these to drain on the host.
    pub fn arrays(&self) -> [DeviceArray<'_>; DEVICE_ARRAYS] {
        use DeviceArray::{U32, U64};
        [
            U64(&self.class_words),
            U32(&self.class_locks),
            U32(&self.class_slab),
            U64(&self.slab_base),
            U32(&self.slab_class),
            U32(&self.slab_live),
            U32(&self.slab_number),
            U32(&self.slab_generation),
            U32(&self.slab_life),
            U64(&self.bits),
            U64(&self.hash),
            U64(std::slice::from_ref(&self.returns_claimed)),
            U64(&self.counters),
            U64(&self.class_ahead),
        ]
    }

    /// [`run_slots`] of the object at slot `slot` of slab `id`.
    pub fn run_object_slots(&self, id: u32, slot: u64) -> Option<u64> {
        run_slots(
            self.slab_life[id as usize].load(Ordering::Acquire),
            self.bits[run_span_index(id, slot)].load(Ordering::Acquire),
        )
    }

    /// Device frees so far by outcome (`LaneStatus` code), summed over the stripes of
    /// `counters` (the words of the last device array, as [`CpuCaches::arrays`] has them).
    pub fn free_counts(counters: &[u64]) -> [u64; FREE_COUNTERS] {
        let mut sums = [0; FREE_COUNTERS];
        for stripe in counters.chunks_exact(FREE_COUNTERS) {
            for (sum, n) in sums.iter_mut().zip(stripe) {
                *sum += n;
            }
        }
        sums
    }

    /// [`CpuCaches::free_counts`] of this state.
    pub fn frees_by_outcome(&self) -> [u64; FREE_COUNTERS] {
        let words: Vec<u64> = self
            .counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        Self::free_counts(&words)
    }

    /// Every object of `slab` was freed: unmap it and post it to the host. Its bitmap stays
    /// all set, so a late second free is refused until the next life clears it.
    fn return_slab(&self, slab: usize) {
        let class = self.slab_class[slab].load(Ordering::Relaxed) as usize;
        let base = self.slab_base[slab].load(Ordering::Relaxed);
        for b in 0..slab_blocks(class) {
            self.map_block((base >> 21) + b, 0);
        }
        self.post_return(slab);
    }

    /// Post slab `slab` to the host's returns ring: the entry's index only has to be unique
    /// (relaxed), and the entry's release store publishes what came before.
    fn post_return(&self, slab: usize) {
        let i = self.returns_claimed.fetch_add(1, Ordering::Relaxed);
        self.channel.post_return(i, slab as u32);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::AtomicBool;

    use parking_lot::Mutex;

    use super::*;
    use crate::caches::channel::DENIAL_WITHDRAWN;
    use crate::caches::geometry::{CACHED_MAX_BYTES, POWER_CLASSES_MAX_BYTES};
    use crate::caches::{CacheKeeper, SlabSource};
    use ortree::VABLOCK_BYTES;

    /// Room for one slab, always on the same blocks.
    struct OneSlab {
        held: bool,
    }

    const BASE: u64 = 1 << 40;

    impl SlabSource for OneSlab {
        fn take_slab(&mut self, _blocks: u64, _class: usize) -> Option<u64> {
            (!std::mem::replace(&mut self.held, true)).then_some(BASE)
        }
        fn give_slab(&mut self, base: u64) {
            assert!(self.held && base == BASE);
            self.held = false;
        }
    }

    /// Caches of `ids` slab ids over an arena of `blocks` blocks, and their host holding at most
    /// `bound` bytes from `source`.
    fn caches_and_host<S: SlabSource>(
        ids: usize,
        blocks: u64,
        bound: u64,
        source: S,
    ) -> (CpuCaches, Mutex<(CacheKeeper, S)>) {
        let channel = Arc::new(CacheChannel::new(ids));
        let caches = CpuCaches::new(channel.clone(), blocks);
        (
            caches,
            Mutex::new((CacheKeeper::new(channel, bound), source)),
        )
    }

    /// `lanes` objects of 32 KiB, the host tending on another thread meanwhile.
    fn alloc_with_host(
        caches: &CpuCaches,
        host: &Mutex<(CacheKeeper, OneSlab)>,
        lanes: usize,
    ) -> CachedAlloc {
        let mut sizes = [0; WARP_LANES];
        sizes[..lanes].fill(32 << 10);
        with_host(host, || {
            caches.alloc((1 << lanes) - 1, &sizes, false, &|| false)
        })
    }

    fn free(caches: &CpuCaches, handle: Handle) -> LaneStatus {
        let mut words = [0; WARP_LANES];
        words[0] = handle.0;
        let out = caches.free(1, &words, false);
        assert_eq!(out.handled, 1);
        out.lanes[0]
    }

    /// One lane's bit step: slot `slot` of `slab`, judged in life `life`.
    fn set_bit(caches: &CpuCaches, slab: usize, slot: u64, life: u32) -> LaneStatus {
        let mut judged = [None; WARP_LANES];
        judged[0] = Some((
            slab,
            Judged {
                slot,
                life,
                slots: 1,
            },
        ));
        let mut lanes = [LaneStatus::Ok; WARP_LANES];
        caches.set_bits(&judged, &mut lanes);
        lanes[0]
    }

    /// The bit step of a warp whose lanes share words: each word's bits land together (a bit
    /// set before is a second free for its lane), of lanes freeing one object the lowest frees
    /// it, and a word of another life takes none of its lanes' bits.
    #[test]
    fn lanes_of_one_word_set_their_bits_together_and_the_lowest_of_one_object_frees_it() {
        let (caches, host) = caches_and_host(1, 64, 16 * VABLOCK_BYTES, OneSlab { held: false });
        let got = alloc_with_host(&caches, &host, 2);
        assert_eq!(got.served, 0b11);
        let (slab, _) = caches
            .slab_and_class_of_block(got.handles[0].address() >> 21)
            .unwrap();
        let life = caches.slab_life[slab].load(Ordering::Relaxed);
        let word = |index: usize| caches.bits[slab * BITMAP_WORDS + index].load(Ordering::Relaxed);
        let before = [word(0), word(1)];
        // Slot 40 was set before (word 1, bit 8).
        caches.bits[slab * BITMAP_WORDS + 1].fetch_or(1 << 8, Ordering::Relaxed);
        let mut judged = [None; WARP_LANES];
        for (lane, slot) in [(2, 33), (3, 40), (5, 33), (6, 34), (9, 40)] {
            judged[lane] = Some((
                slab,
                Judged {
                    slot,
                    life,
                    slots: 1,
                },
            ));
        }
        // A lane judged in the life before: its word's life differs.
        judged[7] = Some((
            slab,
            Judged {
                slot: 35,
                life: life.wrapping_sub(1),
                slots: 1,
            },
        ));
        let mut lanes = [LaneStatus::Ok; WARP_LANES];
        caches.set_bits(&judged, &mut lanes);
        use LaneStatus::{DoubleFree, Ok};
        assert_eq!(
            [lanes[2], lanes[3], lanes[5], lanes[6], lanes[7], lanes[9]],
            [Ok, DoubleFree, DoubleFree, Ok, DoubleFree, DoubleFree]
        );
        assert_eq!(word(0), before[0], "no lane's word");
        assert_eq!(
            word(1),
            before[1] | 1 << 1 | 1 << 2 | 1 << 8,
            "bits 1 and 2 landed, 8 was there, 3 (the other life's) did not"
        );
    }

    /// A second free judged while its slab was alive and acting after the slab went back and
    /// came back on the same blocks (the step a warp can stall across on the GPU): its word is of
    /// the next life, so it is a double free and the object now at its address is untouched.
    #[test]
    fn a_second_free_judged_in_one_life_never_sets_a_bit_of_the_next() {
        let (caches, host) = caches_and_host(1, 64, 16 * VABLOCK_BYTES, OneSlab { held: false });
        let first = alloc_with_host(&caches, &host, 2);
        assert_eq!(first.served, 0b11);
        caches.drain();
        {
            let (keeper, source) = &mut *host.lock();
            keeper.reclaim(source);
        }
        let [old, last] = [first.handles[0], first.handles[1]];
        assert_eq!(free(&caches, old), LaneStatus::Ok);
        let (slab, class) = caches.slab_and_class_of_block(old.address() >> 21).unwrap();
        let late = caches.judge_free(class, slab, old.address(), old.free_stamp());
        let judged = late.expect("its slab is alive: the bit decides");

        assert_eq!(free(&caches, last), LaneStatus::Ok, "the slab goes back");
        let next = alloc_with_host(&caches, &host, 2);
        assert_eq!(next.served, 0b11);
        assert_eq!(
            next.handles[0].address(),
            old.address(),
            "the next life, same blocks"
        );
        assert_eq!(caches.slab_of_block(old.address() >> 21), Some(slab));

        assert_eq!(
            set_bit(&caches, slab, judged.slot, judged.life),
            LaneStatus::DoubleFree
        );
        assert_eq!(free(&caches, next.handles[0]), LaneStatus::Ok);
        assert_eq!(free(&caches, next.handles[1]), LaneStatus::Ok);
        caches.drain();
        let (keeper, source) = &mut *host.lock();
        keeper.reclaim(source);
        assert_eq!(keeper.held_bytes(), 0);
        assert!(!source.held);
    }

    /// A free into the current slab at an object not handed out yet in its life: by address
    /// (which carries no life) it can only be a second free of an earlier life's object; a
    /// handle of this life there was made up.
    #[test]
    fn a_free_of_an_object_not_handed_out_yet_is_a_second_free_by_address_and_invalid_by_handle() {
        let (caches, host) = caches_and_host(1, 64, 16 * VABLOCK_BYTES, OneSlab { held: false });
        let got = alloc_with_host(&caches, &host, 2);
        let [first, _] = [got.handles[0], got.handles[1]];
        let unhanded = first.address() + 5 * (32 << 10);
        let mut words = [0; WARP_LANES];
        words[0] = unhanded;
        let by_address = caches.free(1, &words, true);
        assert_eq!(
            (by_address.handled, by_address.lanes[0]),
            (1, LaneStatus::DoubleFree)
        );
        let made_up = Handle::cached(unhanded, first.free_stamp());
        assert_eq!(free(&caches, made_up), LaneStatus::InvalidHandle);
        // A free whose probe saw the blocks in another class (the slab went back and started
        // again meanwhile) reads the slab's own class word, not the probed class's: judged with
        // every other class as the probe's, the same outcomes.
        let (slab, class) = caches
            .slab_and_class_of_block(first.address() >> 21)
            .unwrap();
        assert_eq!(class, RUN_CLASS - 1, "32 KiB objects");
        for probed in (0..CACHE_CLASSES).filter(|&c| c != class) {
            let judged = |address, stamp| caches.judge_free(probed, slab, address, stamp).err();
            assert_eq!(
                judged(unhanded, 0),
                Some(LaneStatus::DoubleFree),
                "{probed}"
            );
            assert_eq!(
                judged(unhanded, first.free_stamp()),
                Some(LaneStatus::InvalidHandle),
                "{probed}"
            );
            assert_eq!(
                judged(first.address(), first.free_stamp()),
                None,
                "{probed}"
            );
        }
        for h in &got.handles[..2] {
            assert_eq!(free(&caches, *h), LaneStatus::Ok);
        }
    }

    /// A handle the host made (generation 1..63) that points into a cache slab, at an object of
    /// it or not, is left to the host, which answers it as a second free: only handles a cache
    /// made, and addresses, take part in the caches' free. A handle the host never gave
    /// (generation 0) is the host's to judge too, and so cannot free a cache object.
    #[test]
    fn a_handle_the_host_made_is_left_to_the_host_even_inside_a_cache_slab() {
        let (caches, host) = caches_and_host(1, 64, 16 * VABLOCK_BYTES, OneSlab { held: false });
        let got = alloc_with_host(&caches, &host, 2);
        let object = got.handles[0];
        let mut words = [0; WARP_LANES];
        for generation in [0, 1, 63] {
            let host_made = Handle::plain(object.address(), 3)
                .unwrap()
                .with_generation(generation);
            words[0] = host_made.0;
            let out = caches.free(1, &words, false);
            assert_eq!(out.handled, 0, "generation {generation}");
        }
        words[0] = object.0;
        assert_eq!(
            caches.free(1, &words, false).handled,
            1,
            "the cache's own handle"
        );
        assert_eq!(free(&caches, got.handles[1]), LaneStatus::Ok);
    }

    /// Slabs anywhere: each taken slab gets new blocks.
    struct Bump {
        next: u64,
    }

    impl SlabSource for Bump {
        fn take_slab(&mut self, blocks: u64, _class: usize) -> Option<u64> {
            let base = self.next;
            self.next += blocks * VABLOCK_BYTES;
            Some(base)
        }
        fn give_slab(&mut self, _base: u64) {}
    }

    const LARGEST: usize = RUN_CLASS - 1;

    /// Run `work` with the host tending `keeper` on another thread meanwhile.
    fn with_host<S: SlabSource + Send, T>(
        keeper: &Mutex<(CacheKeeper, S)>,
        work: impl FnOnce() -> T,
    ) -> T {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    let (keeper, source) = &mut *keeper.lock();
                    keeper.tend(source);
                }
            });
            let out = work();
            done.store(true, Ordering::Release);
            out
        })
    }

    /// One warp of 32 lanes asking objects of the largest power-of-two class.
    fn full_warp(caches: &CpuCaches) -> CachedAlloc {
        caches.alloc(
            u32::MAX,
            &[POWER_CLASSES_MAX_BYTES; WARP_LANES],
            false,
            &|| false,
        )
    }

    /// The slab held ahead that a class's next move makes current is started before the lock
    /// goes back (its fields, its life, its bitmap words, its blocks), so that move only moves
    /// the class word. Before it does, a free into the slab (by address, or by a handle with its
    /// stamp) is judged as by a current slab with nothing handed out, and a free judged in the
    /// slab's life before, landing on its words late, is refused; both leave the words clean.
    /// The move leaves the slab's life as it was, starts the next one held ahead, and every
    /// object of the slab frees.
    #[test]
    fn the_next_slab_ahead_is_started_before_its_move_and_frees_into_it_are_refused_until_then() {
        const SMALL: usize = 5; // 512 B objects, 8 192 a slab: 256 warps
        let per_slab = slab_objects(SMALL) as usize / WARP_LANES;
        let warp = |caches: &CpuCaches| {
            let got = caches.alloc(u32::MAX, &[512; WARP_LANES], false, &|| false);
            assert_eq!(got.served, u32::MAX);
            got
        };
        let used = (slab_objects(SMALL) as usize).div_ceil(32);
        let words = |caches: &CpuCaches, slab: usize| -> Vec<u64> {
            caches.bits[slab * BITMAP_WORDS..][..used]
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .collect()
        };
        let (caches, host) = caches_and_host(64, 4096, 4096 * VABLOCK_BYTES, Bump { next: BASE });
        with_host(&host, || {
            (0..=per_slab).for_each(|_| {
                warp(&caches);
            })
        });
        let (numbers, entries) = caches.claimed_ahead(SMALL);
        assert!(!entries.is_empty(), "claimed ahead: {numbers:?}");
        let (base, id, generation) = entry_parts(entries[0]);
        let next = id as usize;
        assert_eq!(caches.number(SMALL), numbers.start - 1);
        assert_eq!(
            caches.slab_number[next].load(Ordering::Relaxed),
            numbers.start
        );
        assert_eq!(caches.slab_base[next].load(Ordering::Relaxed), base);
        assert_eq!(
            caches.slab_of_block(base >> 21),
            Some(next),
            "its blocks mapped"
        );
        let life = caches.slab_life[next].load(Ordering::Relaxed);
        let ready = u64::from(life) << 32;
        assert!(
            words(&caches, next).iter().all(|&w| w == ready),
            "its words in its life {life}"
        );

        // Slot 101 (word 3, bit 5): by address, by a handle of the slab's stamp, and judged in
        // the slab's life before.
        let address = base + 101 * 512;
        let mut by_address = [0u64; WARP_LANES];
        by_address[0] = address;
        let freed = free_words(&caches, &by_address, true);
        assert_eq!(
            freed.lanes[0],
            LaneStatus::DoubleFree,
            "a pointer of an earlier life"
        );
        let mut by_handle = [0u64; WARP_LANES];
        let stamp = caches.slab_generation[next].load(Ordering::Relaxed);
        assert_eq!(stamp, CACHE_STAMP_FLAG | generation);
        by_handle[0] = Handle::cached(address, stamp).0;
        let freed = free_words(&caches, &by_handle, false);
        assert_eq!(
            freed.lanes[0],
            LaneStatus::InvalidHandle,
            "a handle made up"
        );
        assert_eq!(
            set_bit(&caches, next, 101, life - 1),
            LaneStatus::DoubleFree
        );
        assert!(
            words(&caches, next).iter().all(|&w| w == ready),
            "no bit left set"
        );

        let first = with_host(&host, || {
            (0..per_slab - 1).for_each(|_| {
                warp(&caches);
            });
            assert_eq!(
                caches.number(SMALL),
                numbers.start - 1,
                "slab 2 used up, not left"
            );
            // The host, tending on its own thread, publishes past the slabs held ahead before
            // the move below claims again (on a busy machine it may not have yet).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while caches.channel.filled(SMALL) < numbers.end {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the host published no more"
                );
                std::thread::yield_now();
            }
            warp(&caches)
        });
        assert_eq!(caches.number(SMALL), numbers.start);
        assert_eq!(
            caches.slab_of_block(first.handles[0].address() >> 21),
            Some(next)
        );
        assert_eq!(caches.slab_life[next].load(Ordering::Relaxed), life);
        // The move into it claimed the host's next slabs ahead and started the first of them.
        let (_, entries) = caches.claimed_ahead(SMALL);
        let (after_base, after, _) = entry_parts(*entries.first().expect("claimed ahead again"));
        let after = after as usize;
        let its_life = u64::from(caches.slab_life[after].load(Ordering::Relaxed)) << 32;
        assert!(words(&caches, after).iter().all(|&w| w == its_life));
        assert_eq!(caches.slab_of_block(after_base >> 21), Some(after));
        for &other in &entries[1..] {
            let (other_base, slab, _) = entry_parts(other);
            assert!(
                words(&caches, slab as usize).iter().all(|&w| w == 0),
                "only the next one's"
            );
            assert_eq!(caches.slab_of_block(other_base >> 21), None);
        }
        let freed = free_words(&caches, &first.handles.map(|h| h.0), false);
        assert_eq!(freed.handled, u32::MAX);
        assert!(
            freed.lanes.iter().all(|&s| s == LaneStatus::Ok),
            "{:?}",
            freed.lanes
        );
    }

    /// A class of 1-2 block slabs moves into the slabs its lock holder claimed ahead without the
    /// host: the host takes its published slabs back meanwhile (not those, which it counts
    /// taken) and tends no more, and no ask is posted. A drain gives the slabs claimed ahead
    /// back at once (the one started for the next move with its blocks unmapped), the class
    /// word at the last one's number, and the class's next move takes
    /// the host's entry after them.
    #[test]
    fn a_small_class_moves_into_the_slabs_it_claimed_ahead_and_a_drain_gives_them_back() {
        const SMALL: usize = 5; // 512 B objects, 8 192 a slab of 2 blocks: 256 warps
        assert!(claims_ahead(SMALL) && !claims_ahead(SMALL + 1));
        let per_slab = slab_objects(SMALL) as usize / WARP_LANES;
        let warps = |caches: &CpuCaches, n: usize| {
            for _ in 0..n {
                let got = caches.alloc(u32::MAX, &[512; WARP_LANES], false, &|| false);
                assert_eq!(got.served, u32::MAX);
            }
        };
        // The slab numbers held ahead, and the slabs they are (base, id).
        let ahead = |caches: &CpuCaches| {
            let (numbers, entries) = caches.claimed_ahead(SMALL);
            let slabs: Vec<(u64, u32)> = entries
                .into_iter()
                .map(|e| {
                    let (base, id, _) = entry_parts(e);
                    (base, id)
                })
                .collect();
            (numbers, slabs)
        };
        let (caches, host) = caches_and_host(64, 4096, 4096 * VABLOCK_BYTES, Bump { next: BASE });
        let channel = caches.channel.clone();
        // Slab 1 used up; the move to slab 2 claims the slabs the host has published past it
        // (the host, tending, has by then) in one claim and posts them taken.
        with_host(&host, || warps(&caches, per_slab + 1));
        let (numbers, slabs) = ahead(&caches);
        assert!(
            numbers.start == 3 && numbers.end > 3,
            "claimed ahead: {numbers:?}"
        );
        assert!(numbers.len() <= AHEAD_SLABS);
        assert_eq!(caches.number(SMALL), 2);
        assert_eq!(channel.taken(SMALL), numbers.end - 1);
        {
            let (keeper, source) = &mut *host.lock();
            keeper.recall(source);
            assert_eq!(
                channel.filled(SMALL),
                numbers.end - 1,
                "published slabs taken back"
            );
            for &(base, id) in &slabs {
                let held = keeper.slab_at(base).map(|(i, _)| i);
                assert_eq!(held, Some(id), "but not those claimed ahead");
            }
            keeper.check().unwrap();
        }
        let asks = channel.demand(SMALL);
        warps(&caches, per_slab * numbers.len());
        assert_eq!(
            caches.number(SMALL),
            numbers.end - 1,
            "moved through the slabs claimed ahead with no host"
        );
        assert_eq!(channel.demand(SMALL), asks, "without asking");
        assert!(
            ahead(&caches).0.is_empty(),
            "nothing published to claim ahead"
        );

        // After a drain and the host's reclaim, the class is used again: slabs claimed ahead
        // again, then drained.
        caches.drain();
        {
            let (keeper, source) = &mut *host.lock();
            keeper.reclaim(source);
        }
        with_host(&host, || warps(&caches, per_slab + 1));
        let (numbers, slabs) = ahead(&caches);
        assert!(!numbers.is_empty(), "claimed ahead again");
        let returns = caches.returns_claimed.load(Ordering::Relaxed);
        assert_eq!(
            caches.drain(),
            numbers.len(),
            "the slabs ahead (the current one's objects are live)"
        );
        assert!(ahead(&caches).0.is_empty());
        let returned: Vec<u32> = (returns..returns + slabs.len() as u64)
            .map(|i| channel.returned(i).expect("posted"))
            .collect();
        assert_eq!(returned, slabs.iter().map(|s| s.1).collect::<Vec<_>>());
        for &(base, _) in &slabs {
            // The first had been started for its move, its blocks mapped.
            assert_eq!(caches.slab_of_block(base >> 21), None, "unmapped");
        }
        assert_eq!(
            caches.number(SMALL),
            numbers.end - 1,
            "the class word at the last slab given back"
        );
        assert_eq!(channel.taken(SMALL), numbers.end - 1);
        {
            let (keeper, source) = &mut *host.lock();
            keeper.reclaim(source);
            keeper.check().unwrap();
        }
        with_host(&host, || warps(&caches, 1));
        assert_eq!(
            caches.number(SMALL),
            numbers.end,
            "the host's entry after them"
        );
    }

    /// A warp that took objects of slab number `n` and reads the class's ring only after the
    /// class moved `RING_LEN` slabs on (a leader held up between its two steps, as on the GPU)
    /// finds the entry overwritten by a later slab's id, and still gets slab `n`.
    #[test]
    fn a_warp_held_up_past_a_ring_lap_still_finds_its_slab() {
        let (caches, host) = caches_and_host(64, 4096, 4096 * VABLOCK_BYTES, Bump { next: BASE });
        with_host(&host, || assert_eq!(full_warp(&caches).served, u32::MAX));
        // The held-up leader's step one: its objects of the current slab.
        let word = caches.class_words[LARGEST].fetch_add(1, Ordering::Acquire);
        let number = (word >> SLAB_NUMBER_SHIFT) as u32;
        let id = caches
            .slab_of_number(LARGEST, number)
            .expect("current slab");
        let base = caches.slab_base[id].load(Ordering::Relaxed);
        // Other warps move the class RING_LEN slabs on.
        let per_slab = slab_objects(LARGEST) / WARP_LANES as u64;
        with_host(&host, || {
            for _ in 0..per_slab * RING_LEN as u64 {
                assert_eq!(full_warp(&caches).served, u32::MAX);
            }
        });
        assert_eq!(caches.number(LARGEST), number + RING_LEN as u32);
        let entry = caches.class_slab[LARGEST * RING_LEN + number as usize % RING_LEN]
            .load(Ordering::Relaxed) as usize;
        assert_ne!(entry, id, "the ring entry now names a later slab");
        // Step two: the slab it took objects of.
        let found = caches.slab_of_number(LARGEST, number).expect("still held");
        assert_eq!(found, id);
        assert_eq!(caches.slab_base[found].load(Ordering::Relaxed), base);
    }

    /// Warps that keep finding the class used up while the host denies it slabs leave the
    /// cursor at the slab's end, not growing towards the slab number.
    #[test]
    fn denied_warps_leave_the_cursor_at_the_slabs_end() {
        let one_slab = slab_blocks(LARGEST) * VABLOCK_BYTES;
        let (caches, host) = caches_and_host(4, 256, one_slab, Bump { next: BASE });
        let objects = slab_objects(LARGEST);
        with_host(&host, || {
            for _ in 0..objects / WARP_LANES as u64 {
                assert_eq!(full_warp(&caches).served, u32::MAX);
            }
            for _ in 0..8 {
                let out = full_warp(&caches);
                assert_eq!((out.served, out.fallback), (0, u32::MAX), "denied");
            }
        });
        let word = caches.class_words[LARGEST].load(Ordering::Relaxed);
        assert_eq!(
            (word >> SLAB_NUMBER_SHIFT, word & CURSOR_MASK),
            (1, objects)
        );
    }

    /// After the host denied a class a slab (at the bound), the class's next warps that find it
    /// used up go to the mailbox without asking again; once a slab goes back, the host's next
    /// turn publishes the one the class lacks unasked and withdraws the denial, and warps are
    /// served again.
    #[test]
    fn a_denied_class_stops_asking_until_the_host_publishes_again() {
        let one_slab = slab_blocks(LARGEST) * VABLOCK_BYTES;
        let (caches, host) = caches_and_host(4, 256, one_slab, Bump { next: BASE });
        let objects = slab_objects(LARGEST);
        let mut held = Vec::new();
        with_host(&host, || {
            for _ in 0..objects / WARP_LANES as u64 {
                let out = full_warp(&caches);
                assert_eq!(out.served, u32::MAX);
                held.push(out.handles.map(|h| h.0));
            }
            let out = full_warp(&caches);
            assert_eq!(
                (out.served, out.fallback),
                (0, u32::MAX),
                "denied at the bound"
            );
        });
        let asked = caches.channel.demand(LARGEST);
        assert_eq!(caches.channel.denied(LARGEST), asked);
        for _ in 0..8 {
            // No host turn here: an ask would wait for ever.
            let out = full_warp(&caches);
            assert_eq!((out.served, out.fallback), (0, u32::MAX));
        }
        assert_eq!(caches.channel.demand(LARGEST), asked, "no new ask");
        for words in &held {
            let out = caches.free(u32::MAX, words, false);
            assert!(out.lanes.iter().all(|&s| s == LaneStatus::Ok));
        }
        {
            let (keeper, source) = &mut *host.lock();
            keeper.tend(source);
        }
        assert_eq!(caches.channel.filled(LARGEST), 2, "published unasked");
        assert_eq!(caches.channel.denied(LARGEST), DENIAL_WITHDRAWN);
        assert_eq!(full_warp(&caches).served, u32::MAX);
    }

    /// A drain withdraws a standing denial: the class asks afresh when used again.
    #[test]
    fn a_drain_withdraws_a_standing_denial() {
        let one_slab = slab_blocks(LARGEST) * VABLOCK_BYTES;
        let (caches, host) = caches_and_host(4, 256, one_slab, Bump { next: BASE });
        with_host(&host, || while full_warp(&caches).served != 0 {});
        let asked = caches.channel.demand(LARGEST);
        assert_eq!(caches.channel.denied(LARGEST), asked);
        caches.drain();
        {
            let (keeper, source) = &mut *host.lock();
            keeper.reclaim(source);
        }
        assert_eq!(caches.channel.denied(LARGEST), DENIAL_WITHDRAWN);
        with_host(&host, || {
            let out = full_warp(&caches);
            assert_eq!(
                out.fallback,
                u32::MAX,
                "still at the bound: asked and denied"
            );
        });
        assert_eq!(caches.channel.demand(LARGEST), asked + 1);
    }

    fn free_words(caches: &CpuCaches, words: &[u64; WARP_LANES], by_address: bool) -> CachedFree {
        let mask = lane_mask(|l| words[l] != 0);
        caches.free(mask, words, by_address)
    }

    /// Run-class objects of a warp whose lanes ask different sizes: each takes its size rounded
    /// up to whole slots, side by side in lane order, none overlapping; a free at a slot inside
    /// an object is an interior pointer, a second one a double free; once every object is freed
    /// (the slots past the last one count as freed when the slab is drained) the slab goes back.
    #[test]
    fn run_objects_take_their_sizes_in_whole_slots_and_free_by_handle_and_by_address() {
        let one_slab = slab_blocks(RUN_CLASS) * VABLOCK_BYTES;
        let (caches, host) = caches_and_host(1, 64, one_slab, OneSlab { held: false });
        let slot = 1u64 << RUN_SLOT_LOG2;
        let mut sizes = [0; WARP_LANES];
        for (lane, size) in sizes.iter_mut().enumerate() {
            // 3 MiB in lane 1, and the warp within the run class's 4 MiB a warp.
            *size = match lane % 4 {
                0 => POWER_CLASSES_MAX_BYTES + 1,
                1 if lane == 1 => 3 << 20,
                1 => 40_000,
                2 => 0,
                _ => 50_000 + lane as u64,
            };
        }
        let got = with_host(&host, || caches.alloc(u32::MAX, &sizes, false, &|| false));
        let asked = lane_mask(|l| sizes[l] != 0);
        assert_eq!(got.served, asked);
        let mut at = BASE;
        for lane in set_lanes(asked) {
            let h = got.handles[lane];
            assert_eq!(h.address(), at, "lane {lane} right after the one before");
            at += sizes[lane].next_multiple_of(slot);
        }
        assert!(at <= BASE + one_slab);
        // Inside lane 1's 3 MiB object, on a slot: interior, by address and by handle.
        let inside = got.handles[1].address() + 7 * slot;
        let mut words = [0; WARP_LANES];
        words[0] = inside;
        assert_eq!(
            free_words(&caches, &words, true).lanes[0],
            LaneStatus::InteriorPointer
        );
        words[0] = Handle::cached(inside, got.handles[1].free_stamp()).0;
        assert_eq!(
            free_words(&caches, &words, false).lanes[0],
            LaneStatus::InvalidHandle
        );
        // Half by handle, half by address, then each again.
        let mut by_handle = [0; WARP_LANES];
        let mut by_address = [0; WARP_LANES];
        for lane in set_lanes(asked) {
            if lane % 2 == 0 {
                by_handle[lane] = got.handles[lane].0;
            } else {
                by_address[lane] = got.handles[lane].address();
            }
        }
        for (words, address) in [(&by_handle, false), (&by_address, true)] {
            let out = free_words(&caches, words, address);
            for lane in set_lanes(out.handled) {
                assert_eq!(out.lanes[lane], LaneStatus::Ok, "lane {lane}");
            }
        }
        assert!(
            caches.slab_of_block(BASE >> 21).is_some(),
            "slots never handed out"
        );
        for (words, address) in [(&by_handle, false), (&by_address, true)] {
            let out = free_words(&caches, words, address);
            for lane in set_lanes(out.handled) {
                assert_eq!(out.lanes[lane], LaneStatus::DoubleFree, "lane {lane}");
            }
        }
        caches.drain();
        assert!(caches.slab_of_block(BASE >> 21).is_none(), "given back");
        let (keeper, source) = &mut *host.lock();
        keeper.reclaim(source);
        assert_eq!(keeper.held_bytes(), 0);
        assert!(!source.held);
    }

    /// The lane whose slots would cross a slab's end takes its object from the next slab, and
    /// the slots it left count as freed: the first slab goes back when its objects are freed,
    /// without a drain.
    #[test]
    fn the_slots_a_lane_leaves_at_a_slabs_end_count_as_freed() {
        let (caches, host) = caches_and_host(8, 4096, 1 << 40, Bump { next: BASE });
        let slots = slab_objects(RUN_CLASS);
        let largest = object_slots(RUN_CLASS, CACHED_MAX_BYTES);
        let one = |size: u64| {
            let mut sizes = [0; WARP_LANES];
            sizes[0] = size;
            let got = with_host(&host, || caches.alloc(1, &sizes, false, &|| false));
            assert_eq!(got.served, 1);
            got.handles[0]
        };
        // One warp of 1 MiB, then warps of 4 MiB: those that fit, then one that crosses.
        let first = one(1 << 20);
        assert_eq!(first.address(), BASE);
        let mut used = object_slots(RUN_CLASS, 1 << 20);
        let mut handles = vec![first];
        while used + largest <= slots {
            handles.push(one(CACHED_MAX_BYTES));
            used += largest;
        }
        assert!(used < slots, "the crossing lane leaves slots");
        let crossing = one(CACHED_MAX_BYTES);
        let second = BASE + slab_blocks(RUN_CLASS) * VABLOCK_BYTES;
        assert_eq!(
            crossing.address(),
            second,
            "the crossing lane, in the next slab"
        );
        // Free the first slab's objects: with the slots left at its end counted freed, it goes
        // back without a drain.
        for handle in handles {
            let mut words = [0; WARP_LANES];
            words[0] = handle.0;
            assert_eq!(free_words(&caches, &words, false).lanes[0], LaneStatus::Ok);
        }
        assert!(
            caches.slab_of_block(BASE >> 21).is_none(),
            "the crossed slab went back"
        );
        assert!(caches.slab_of_block(second >> 21).is_some());
    }

    /// Arranged warps keep the host's arranged layout where their lanes over 32 KiB ask alike
    /// (the run class leaves them to the host), and take run objects where the host would pack
    /// them; contiguous warps always take run objects.
    #[test]
    fn the_run_class_leaves_alike_arranged_warps_to_the_host() {
        let (caches, host) = caches_and_host(8, 4096, 1 << 40, Bump { next: BASE });
        let alike = [64 << 10; WARP_LANES];
        let out = with_host(&host, || caches.alloc(u32::MAX, &alike, true, &|| false));
        assert_eq!((out.served, out.fallback), (0, 0));
        let out = with_host(&host, || caches.alloc(u32::MAX, &alike, false, &|| false));
        assert_eq!(out.served, u32::MAX);
        let mut apart = [0; WARP_LANES];
        apart[3] = 3 << 20;
        apart[9] = 40 << 10;
        apart[10] = 100;
        let out = with_host(&host, || caches.alloc(u32::MAX, &apart, true, &|| false));
        assert_eq!(out.served, 1 << 3 | 1 << 9 | 1 << 10);
    }
}
