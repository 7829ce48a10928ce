//! The cache protocol's shared words (pinned host memory on the GPU): what the host publishes
//! (`filled`, `denied`, `ring`) and what the device posts (`taken`, `demand`, `returns`,
//! `claimed`), each array on pages of its own. Every word has one writer: the host writes the
//! first three, the device the rest, and on the device only the holder of a class's lock writes
//! that class's `taken`, `demand` and `claimed`, and only the warp that claimed a returns entry
//! writes it.
//!
//! Taking published slabs back while warps run (the host needs their room): the host lowers
//! `filled`, then (a sequentially consistent fence between) reads `claimed`; the device's lock
//! holder writes `claimed` before it reads a ring entry, then (a fence between) reads `filled`
//! again. Each side stores, fences and loads, so at least one sees the other's store: either the
//! host sees the claim and puts `filled` back, or the warp sees the lowered `filled`, withdraws
//! its claim and does not take the entry ([`CacheChannel::recall`], [`CacheChannel::claim`]).

use std::sync::atomic::Ordering;

use super::geometry::{CACHE_CLASSES, RING_LEN};
use crate::shared::{SharedArrays, Width};
use crate::sync::{AtomicU32, fence};
use ortree::VABLOCK_BYTES;
use translator::{ADDRESS_BITS, CACHE_GENERATIONS};

/// `denied[c]` when no denial stands: above every ask number (asks count modulo 2^31).
pub const DENIAL_WITHDRAWN: u32 = 1 << 31;

/// A ring entry: the slab's cache generation above bit [`ENTRY_GENERATION_SHIFT`], its first
/// byte (2 MiB aligned, below 2^48) and its slab id in the low `ENTRY_ID_BITS` bits.
pub const ENTRY_ID_BITS: u32 = 15;
/// Where a ring entry's cache generation starts: above the 48-bit address.
pub const ENTRY_GENERATION_SHIFT: u32 = ADDRESS_BITS;

/// The ring entry of slab `id` at `base` whose objects carry cache generation `generation`.
pub fn entry_word(base: u64, id: u32, generation: u32) -> u64 {
    debug_assert_eq!(base % VABLOCK_BYTES, 0);
    debug_assert!(base >> ENTRY_GENERATION_SHIFT == 0);
    debug_assert!(id < 1 << ENTRY_ID_BITS && generation < CACHE_GENERATIONS);
    u64::from(generation) << ENTRY_GENERATION_SHIFT | base | u64::from(id)
}

/// A ring entry as `(base, slab id, cache generation)`.
pub fn entry_parts(entry: u64) -> (u64, u32, u32) {
    let id = (entry & ((1 << ENTRY_ID_BITS) - 1)) as u32;
    let generation = (entry >> ENTRY_GENERATION_SHIFT) as u32 & (CACHE_GENERATIONS - 1);
    let base = entry & ((1 << ENTRY_GENERATION_SHIFT) - 1) & !(VABLOCK_BYTES - 1);
    (base, id, generation)
}

/// The shared words of the caches of one runtime.
pub struct CacheChannel {
    max_slabs: usize,
    arrays: SharedArrays,
}

const FILLED: usize = 0;
const DENIED: usize = 1;
const RING: usize = 2;
const TAKEN: usize = 3;
const DEMAND: usize = 4;
const RETURNS: usize = 5;
const CLAIMED: usize = 6;

impl CacheChannel {
    /// Words for caches that hold at most `max_slabs` slabs at once (`1..2^15`).
    pub fn new(max_slabs: usize) -> Self {
        assert!(
            (1..1 << ENTRY_ID_BITS).contains(&max_slabs),
            "slab ids must fit a ring entry"
        );
        Self {
            max_slabs,
            arrays: SharedArrays::new(&[
                (Width::U32, CACHE_CLASSES),
                (Width::U32, CACHE_CLASSES),
                (Width::U64, CACHE_CLASSES * RING_LEN),
                (Width::U32, CACHE_CLASSES),
                (Width::U32, CACHE_CLASSES),
                (Width::U64, max_slabs),
                (Width::U32, CACHE_CLASSES),
            ]),
        }
    }

    /// Most slabs held at once (the returns ring's length).
    pub fn max_slabs(&self) -> usize {
        self.max_slabs
    }

    fn u32s(&self, which: usize) -> &[AtomicU32] {
        self.arrays.u32s(which)
    }

    // ---- host side ------------------------------------------------------------------------

    /// Slabs of `class` the device has taken.
    pub fn taken(&self, class: usize) -> u32 {
        self.u32s(TAKEN)[class].load(Ordering::Acquire)
    }

    /// The device's last ask for `class`: a count, bumped each time a warp finds no slab
    /// published and waits for the host (0: none yet).
    pub fn demand(&self, class: usize) -> u32 {
        self.u32s(DEMAND)[class].load(Ordering::Acquire)
    }

    /// Publish slab number `index` of `class` (`filled` must be `index` and `index - taken`
    /// below `RING_LEN`): its entry ([`entry_word`]), then `filled = index + 1`.
    pub fn publish(&self, class: usize, index: u32, entry: u64) {
        self.arrays.u64s(RING)[class * RING_LEN + index as usize % RING_LEN]
            .store(entry, Ordering::Relaxed);
        self.u32s(FILLED)[class].store(index + 1, Ordering::Release);
    }

    /// Take back the published slabs from `filled` on: `filled = filled` (no warp may run).
    pub fn rewind(&self, class: usize, filled: u32) {
        self.u32s(FILLED)[class].store(filled, Ordering::Release);
    }

    /// Take back the slabs of `class` published from `taken` to `filled` (the host's count)
    /// while warps may run: `true` when no warp can take them any more; `false` when a warp has
    /// claimed entry `taken` (it is taking it now, or took it since `taken` was read), and then
    /// `filled` stands as it was.
    pub fn recall(&self, class: usize, taken: u32, filled: u32) -> bool {
        self.u32s(FILLED)[class].store(taken, Ordering::Relaxed);
        // Store, fence, load against the warp's store of `claimed`, fence, load of `filled`.
        fence(Ordering::SeqCst);
        if self.u32s(CLAIMED)[class].load(Ordering::Relaxed) > taken {
            self.u32s(FILLED)[class].store(filled, Ordering::Release);
            return false;
        }
        true
    }

    /// Tell the warp that made ask `ask` of `class` that no slab comes for it. Until the host
    /// withdraws the denial ([`CacheChannel::withdraw_denial`]) or publishes a slab, the class's
    /// warps that find it used up go to the mailbox without asking again.
    pub fn deny(&self, class: usize, ask: u32) {
        self.u32s(DENIED)[class].store(ask, Ordering::Release);
    }

    /// Let `class`'s warps ask again: `denied` takes a value no ask has (asks count below
    /// 2^31).
    pub fn withdraw_denial(&self, class: usize) {
        self.u32s(DENIED)[class].store(DENIAL_WITHDRAWN, Ordering::Release);
    }

    /// The slab id in returns entry `i`, once the device has written it (for this lap).
    pub fn returned(&self, i: u64) -> Option<u32> {
        let entry =
            self.arrays.u64s(RETURNS)[(i % self.max_slabs as u64) as usize].load(Ordering::Acquire);
        (entry >> 32 == i / self.max_slabs as u64 + 1).then_some(entry as u32)
    }

    // ---- device side (what detail/cache.cuh does; CPU warps call these) --------------------

    /// Slabs of `class` the host has published (relaxed; [`CacheChannel::entry`] follows with
    /// an acquire fence, as the CUDA client does after its poll).
    pub fn filled(&self, class: usize) -> u32 {
        self.u32s(FILLED)[class].load(Ordering::Relaxed)
    }

    /// The last ask of `class` the host denied.
    pub fn denied(&self, class: usize) -> u32 {
        self.u32s(DENIED)[class].load(Ordering::Relaxed)
    }

    /// The ring entry of slab number `index` of `class` ([`entry_parts`] reads it); call after
    /// `filled` showed it.
    pub fn entry(&self, class: usize, index: u32) -> u64 {
        fence(Ordering::Acquire);
        self.arrays.u64s(RING)[class * RING_LEN + index as usize % RING_LEN].load(Ordering::Relaxed)
    }

    /// Claim entries `first..=last` of `class`, which `filled` showed, `first` the count the
    /// device has taken (the class lock's holder only): `true` when the host has not taken them
    /// back and the warp may take them; `false` when it has (the claim is withdrawn; the warp
    /// goes on as if none were published).
    pub fn claim(&self, class: usize, first: u32, last: u32) -> bool {
        let claimed = &self.u32s(CLAIMED)[class];
        claimed.store(last + 1, Ordering::Relaxed);
        // Store, fence, load against the host's in `recall`.
        fence(Ordering::SeqCst);
        if self.u32s(FILLED)[class].load(Ordering::Relaxed) > last {
            return true;
        }
        claimed.store(first, Ordering::Relaxed);
        false
    }

    /// Post ask number `ask` of `class` (the class lock's holder only).
    pub fn post_demand(&self, class: usize, ask: u32) {
        self.u32s(DEMAND)[class].store(ask, Ordering::Release);
    }

    /// Post `taken[class] = taken` (the class lock's holder only).
    pub fn post_taken(&self, class: usize, taken: u32) {
        self.u32s(TAKEN)[class].store(taken, Ordering::Release);
    }

    /// Post slab `slab` as returns entry `i` (the warp that claimed `i` only).
    pub fn post_return(&self, i: u64, slab: u32) {
        let lap = i / self.max_slabs as u64 + 1;
        self.arrays.u64s(RETURNS)[(i % self.max_slabs as u64) as usize]
            .store(lap << 32 | u64::from(slab), Ordering::Release);
    }
}

#[cfg(not(loom))]
impl CacheChannel {
    /// The host allocation holding every array, `(address, bytes)`, for registering with the
    /// GPU.
    pub fn region(&self) -> (usize, usize) {
        self.arrays.region()
    }

    /// Byte offsets in [`CacheChannel::region`] of `filled`, `denied`, `ring`, `taken`,
    /// `demand`, `returns`, `claimed`.
    pub fn offsets(&self) -> [usize; 7] {
        self.arrays
            .offsets()
            .try_into()
            .expect("the channel has seven arrays")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_returns_tell_laps_apart() {
        let ch = CacheChannel::new(3);
        assert_eq!(ch.filled(2), 0);
        ch.publish(2, 0, entry_word(5 << 21, 17, 100));
        assert_eq!(ch.filled(2), 1);
        assert_eq!(entry_parts(ch.entry(2, 0)), (5 << 21, 17, 100));
        let last = entry_word((1 << 47) - (2 << 20), (1 << ENTRY_ID_BITS) - 1, 127);
        assert_eq!(
            entry_parts(last),
            ((1 << 47) - (2 << 20), (1 << ENTRY_ID_BITS) - 1, 127)
        );
        ch.post_demand(4, 1);
        assert_eq!(ch.demand(4), 1);
        ch.deny(4, 1);
        assert_eq!(ch.denied(4), 1);
        assert_eq!(ch.returned(0), None);
        ch.post_return(0, 9);
        assert_eq!(ch.returned(0), Some(9));
        // Entry 3 shares entry 0's word: lap 1's value is not lap 2's.
        assert_eq!(ch.returned(3), None);
        ch.post_return(3, 1);
        assert_eq!(ch.returned(3), Some(1));
        assert_eq!(ch.returned(0), None);
    }
}
