//! The host side of the caches, run by the service thread on every sweep: read the slabs the
//! device gave back and return their blocks, then keep each class that the device has used
//! [`depth`] slabs ahead of its consumption, within the bound on blocks held. A class that runs
//! dry while in use (its warps ask for a slab the host has not published yet: they wait a
//! service sweep for it) is kept twice as deep each time, up to [`MOST_DEPTH`], the slabs beyond
//! the first depth of all classes together within [`DEEP_BLOCKS`]; a drain, or an arena short of
//! room, puts every class back to its first depth. A slab ahead of
//! need leaves the bound's last longest slab (32 MiB) free, so a class that asks is not denied for
//! slabs other classes have not taken yet. A class whose ask was
//! denied stops asking (the device reads the standing denial) until the host publishes the slab
//! it lacks, which it does as soon as one fits, or drains the caches; either withdraws the
//! denial. When the arena has no room for a request, the host takes the slabs published and not
//! taken back while warps run ([`CacheKeeper::recall`]) and publishes none ahead of need until a
//! slab comes back.
//!
//! Invariants ([`CacheKeeper::check`]): every slab id is free or held, never both; the blocks of
//! the held slabs sum to `held_blocks`, which never exceeds `max_blocks`; per class, the published
//! and not yet taken slabs are fewer than `RING_LEN`. A slab's cache generation is above that of
//! every earlier slab on any of its blocks; a block whose generations are used up is retired:
//! the caches keep it and never place a slab on it again, so a stale handle of a cache object is
//! never taken for an object of a later slab (at the price of one block per
//! `CACHE_GENERATIONS` slab lives on it).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::channel::{CacheChannel, entry_parts, entry_word};
use super::geometry::{
    CACHE_CLASSES, MAX_SLAB_BLOCKS, RING_LEN, claims_ahead, class_bytes, slab_blocks,
};
use ortree::VABLOCK_BYTES;
use translator::CACHE_GENERATIONS;

/// Slabs published ahead of the device's consumption, per class in use that claims ahead
/// ([`claims_ahead`]; the others get one, [`depth`]).
pub const DEPTH: u32 = 2;

/// The most slabs a class is published ahead, however fast it takes them (below `RING_LEN`).
pub const MOST_DEPTH: u32 = 8;
const _: () = assert!(
    MOST_DEPTH < RING_LEN as u32,
    "the ring holds what is published ahead"
);

/// The most blocks all classes together hold published beyond their first [`depth`] (what
/// deepening costs in memory held idle, whatever the number of classes that run dry at once).
pub const DEEP_BLOCKS: u64 = 16;

/// Slabs published ahead for `class` at first: [`DEPTH`] for the classes that claim ahead (slabs
/// of 1-2 blocks, the ones that move most often), one for longer slabs (8-32 MiB), which the
/// device takes less often and whose second one would be held idle for a whole slab's worth of
/// objects. A class that runs dry while in use (its warps ask for a slab the host had not
/// published yet) gets twice as many ahead, up to [`MOST_DEPTH`], until the caches are drained
/// or the arena runs short.
pub fn depth(class: usize) -> u32 {
    if claims_ahead(class) { DEPTH } else { 1 }
}

/// Where slabs come from: the resolver (a slab is a live chunk of whole VABlocks for as long as
/// the caches hold it), or a model in tests.
pub trait SlabSource {
    /// A run of `blocks` VABlocks for a slab of `class`, or `None` when there is no room.
    fn take_slab(&mut self, blocks: u64, class: usize) -> Option<u64>;
    /// Give back the slab at `base` (taken with [`SlabSource::take_slab`]).
    fn give_slab(&mut self, base: u64);
}

/// Counters of the caches, readable while the service runs.
#[derive(Debug, Default)]
pub struct CacheStats {
    refills: AtomicU64,
    asks: AtomicU64,
    returns: AtomicU64,
    denials: AtomicU64,
    denials_at_bound: AtomicU64,
    recalls: AtomicU64,
    held_bytes: AtomicU64,
    peak_held_bytes: AtomicU64,
    retired_bytes: AtomicU64,
}

/// A copy of the keeper's counters (`CacheStats`) at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStatsSnapshot {
    /// Slabs the host handed to the caches.
    pub refills: u64,
    /// Asks the host read: times a class's warps found no slab published and waited for the
    /// service thread's next turn (each a round trip the published depth is there to spare).
    pub asks: u64,
    /// Slabs the device gave back (all their objects freed).
    pub returns: u64,
    /// Times the host could not hand out a slab the device asked for (the warps then asked
    /// through the mailbox).
    pub denials: u64,
    /// Of the denials, those where the caches held their bound (the others: the arena had no
    /// room for a slab, or every slab id was in use).
    pub denials_at_bound: u64,
    /// Slabs published ahead of need and taken back while warps ran, because the arena had no
    /// room for a request ([`CacheKeeper::recall`]).
    pub recalls: u64,
    /// Bytes the caches hold now (slabs handed out and not given back).
    pub held_bytes: u64,
    /// The most bytes they held at once.
    pub peak_held_bytes: u64,
    /// Bytes of blocks retired from the caches (their cache generations used up), held for
    /// good and outside the bound.
    pub retired_bytes: u64,
}

impl CacheStats {
    /// The counters now.
    pub fn snapshot(&self) -> CacheStatsSnapshot {
        CacheStatsSnapshot {
            refills: self.refills.load(Ordering::Relaxed),
            asks: self.asks.load(Ordering::Relaxed),
            returns: self.returns.load(Ordering::Relaxed),
            denials: self.denials.load(Ordering::Relaxed),
            denials_at_bound: self.denials_at_bound.load(Ordering::Relaxed),
            recalls: self.recalls.load(Ordering::Relaxed),
            held_bytes: self.held_bytes.load(Ordering::Relaxed),
            peak_held_bytes: self.peak_held_bytes.load(Ordering::Relaxed),
            retired_bytes: self.retired_bytes.load(Ordering::Relaxed),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct HeldSlab {
    base: u64,
    blocks: u64,
}

/// The host side of the caches.
pub struct CacheKeeper {
    channel: Arc<CacheChannel>,
    max_blocks: u64,
    held_blocks: u64,
    slabs: Vec<Option<HeldSlab>>,
    free_ids: Vec<u32>,
    /// Per class: slabs published (the host's copy of `filled`).
    filled: [u32; CACHE_CLASSES],
    /// Per class: the device's last ask the host answered.
    asks_seen: [u32; CACHE_CLASSES],
    returns_read: u64,
    /// Per class: `taken` when the caches were last drained; slabs are published ahead of need
    /// only once the device takes one past it (a drained class stays empty until used).
    quiet_at: [u32; CACHE_CLASSES],
    /// Per class: slabs published ahead of its consumption now ([`depth`], doubled each time
    /// the class ran dry in use, at most [`MOST_DEPTH`]).
    depth: [u32; CACHE_CLASSES],
    /// Per class: a denial stands, so the device asks no more; the slab it lacks is published
    /// as soon as one fits, and the denial withdrawn.
    denial_stands: [bool; CACHE_CLASSES],
    /// The arena had no room for a request and published slabs were taken back: none is
    /// published ahead of need until a slab comes back or the caches are drained.
    lean: bool,
    /// Per VABlock that was ever part of a slab: the cache generation of the last slab on it.
    block_generations: HashMap<u64, u32>,
    stats: Arc<CacheStats>,
}

impl CacheKeeper {
    /// The host side of `channel`'s caches, holding at most `max_bytes` (whole VABlocks; at
    /// least one slab of the largest class fits, or that class is always denied).
    pub fn new(channel: Arc<CacheChannel>, max_bytes: u64) -> Self {
        let ids = channel.max_slabs() as u32;
        Self {
            channel,
            max_blocks: max_bytes / VABLOCK_BYTES,
            held_blocks: 0,
            slabs: vec![None; ids as usize],
            free_ids: (0..ids).rev().collect(),
            filled: [0; CACHE_CLASSES],
            asks_seen: [0; CACHE_CLASSES],
            returns_read: 0,
            quiet_at: [0; CACHE_CLASSES],
            depth: std::array::from_fn(depth),
            denial_stands: [false; CACHE_CLASSES],
            lean: false,
            block_generations: HashMap::new(),
            stats: Arc::new(CacheStats::default()),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<CacheStats> {
        &self.stats
    }

    /// Bytes held now.
    pub fn held_bytes(&self) -> u64 {
        self.held_blocks * VABLOCK_BYTES
    }

    /// The id and cache generation of the held slab that starts at `base`.
    pub fn slab_at(&self, base: u64) -> Option<(u32, u32)> {
        let id = self
            .slabs
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.base == base))?;
        let generation = *self.block_generations.get(&(base / VABLOCK_BYTES))?;
        Some((id as u32, generation))
    }

    /// The most bytes the caches may hold.
    pub fn bound_bytes(&self) -> u64 {
        self.max_blocks * VABLOCK_BYTES
    }

    /// One turn: take back returned slabs, then refill. Returns how many slabs moved.
    pub fn tend(&mut self, source: &mut impl SlabSource) -> usize {
        let mut moved = self.take_returns(source);
        for class in 0..CACHE_CLASSES {
            moved += self.refill(class, source);
        }
        if moved > 0 {
            self.publish_held();
        }
        moved
    }

    fn refill(&mut self, class: usize, source: &mut impl SlabSource) -> usize {
        // The ask first, then `taken` (both acquire): the device posts `taken` before it asks
        // for the next slab, so a new ask is never read with an older `taken`. Read the other
        // way round, a host paused between the two reads while the device took a slab, used it
        // up and asked again saw the ask against the old `taken`, published nothing for it and
        // never denied it: the asking warp waited forever.
        let ask = self.channel.demand(class);
        let taken = self.channel.taken(class);
        let asked = ask != self.asks_seen[class];
        self.asks_seen[class] = ask;
        if asked {
            self.stats.asks.fetch_add(1, Ordering::Relaxed);
        }
        let in_use = taken > self.quiet_at[class];
        if asked && in_use && self.depth[class] < MOST_DEPTH {
            // The class ran dry in use: its warps waited for this turn. Keep more ahead.
            self.depth[class] = (self.depth[class] * 2).min(MOST_DEPTH);
            tracing::debug!(class, depth = self.depth[class], "cache class deepened");
        }
        let ahead = if in_use && !self.lean {
            taken + self.depth[class]
        } else {
            0 // not used since it was drained (or ever), or the arena is short: none ahead
        };
        // A standing denial keeps the device from asking: the slab it lacks is needed as if
        // asked for.
        let needed = if asked || self.denial_stands[class] {
            taken + 1
        } else {
            0
        };
        let target = ahead.max(needed).min(taken + RING_LEN as u32 - 1);
        let mut moved = 0;
        while self.filled[class] < target {
            let index = self.filled[class];
            // A slab ahead of need leaves the bound's last longest slab free, so a class that
            // asks finds room even while others hold slabs they have not taken yet.
            let ahead_of_need = !(needed > 0 && index == taken);
            if index >= taken + depth(class)
                && self.deep_blocks() + slab_blocks(class) > DEEP_BLOCKS
            {
                break; // deeper than the first depth only within the shared budget
            }
            let reserve = if ahead_of_need { MAX_SLAB_BLOCKS } else { 0 };
            match self.place(class, reserve, source) {
                Ok((base, id)) => {
                    let Some(generation) = self.stamp(base, slab_blocks(class)) else {
                        self.retire(id);
                        continue;
                    };
                    tracing::trace!(class, index, id, generation, "cache slab published");
                    self.channel
                        .publish(class, index, entry_word(base, id, generation));
                    self.filled[class] = index + 1;
                    // Published first: a warp that still reads the denial finds this slab on
                    // its next look.
                    self.withdraw_denial(class);
                    self.stats.refills.fetch_add(1, Ordering::Relaxed);
                    moved += 1;
                }
                Err(at_bound) => {
                    // A warp waits for this slab: tell it to ask through the mailbox. One
                    // ahead of need just is not published.
                    if asked && index == taken {
                        self.channel.deny(class, ask);
                        self.denial_stands[class] = true;
                        self.stats.denials.fetch_add(1, Ordering::Relaxed);
                        if at_bound
                            && self.stats.denials_at_bound.fetch_add(1, Ordering::Relaxed) == 0
                        {
                            // Once per runtime: from here on, lanes of a denied class allocate
                            // through the host until a slab comes back, which slabs kept by a
                            // few long-lived objects each may never do. Info, not a warning: a
                            // bound reached is the bound doing its work (the selftest reaches
                            // it on purpose); `Runtime::cache_stats` counts every denial.
                            tracing::info!(
                                class,
                                held_bytes = self.held_bytes(),
                                bound_bytes = self.bound_bytes(),
                                "the device caches reached their bound: lanes of a denied class \
                                 allocate through the host until one of its slabs is freed \
                                 whole; if the arena has room, raise \
                                 ALIGNMALLOC_DEVICE_CACHE_FRACTION (at most 0.75) or \
                                 ALIGNMALLOC_DEVICE_CACHE_BYTES"
                            );
                        }
                        tracing::debug!(class, index, at_bound, "cache slab denied");
                    }
                    break;
                }
            }
        }
        moved
    }

    /// The cache generation of a new slab on `blocks` blocks from `base`: one above the
    /// highest any of them had (0 for blocks never in a slab), which the blocks remember; `None`
    /// when that would wrap (the slab must be retired).
    fn stamp(&mut self, base: u64, blocks: u64) -> Option<u32> {
        let first = base / VABLOCK_BYTES;
        let generation = (first..first + blocks)
            .map(|b| self.block_generations.get(&b).map_or(0, |g| g + 1))
            .max()?;
        if generation >= CACHE_GENERATIONS {
            return None;
        }
        for b in first..first + blocks {
            self.block_generations.insert(b, generation);
        }
        Some(generation)
    }

    /// Keep held slab `id`'s blocks for good, outside the bound: their cache generations are
    /// used up, so no slab may be placed on them again.
    fn retire(&mut self, id: u32) {
        let Some(slab) = self.slabs.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        self.held_blocks -= slab.blocks;
        self.free_ids.push(id);
        let bytes = slab.blocks * VABLOCK_BYTES;
        let retired = self.stats.retired_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        tracing::warn!(
            base = format_args!("{:#x}", slab.base),
            bytes,
            retired,
            "cache blocks retired: {CACHE_GENERATIONS} slabs were placed on them"
        );
    }

    /// A slab of `class` within the bound, `reserve` blocks of it left free: its base and id;
    /// else whether the bound refused it (`false`: no room in the arena, or no slab id free).
    fn place(
        &mut self,
        class: usize,
        reserve: u64,
        source: &mut impl SlabSource,
    ) -> Result<(u64, u32), bool> {
        let blocks = slab_blocks(class);
        if self.held_blocks + blocks + reserve > self.max_blocks {
            return Err(true);
        }
        let id = self.free_ids.pop().ok_or(false)?;
        match source.take_slab(blocks, class) {
            Some(base) => {
                self.slabs[id as usize] = Some(HeldSlab { base, blocks });
                self.held_blocks += blocks;
                tracing::trace!(
                    class,
                    id,
                    base = format_args!("{base:#x}"),
                    bytes = class_bytes(class),
                    "cache slab"
                );
                Ok((base, id))
            }
            None => {
                self.free_ids.push(id);
                Err(false)
            }
        }
    }

    /// Blocks of the slabs published beyond each class's first [`depth`] and not taken yet.
    fn deep_blocks(&self) -> u64 {
        (0..CACHE_CLASSES)
            .map(|c| {
                let ahead = self.filled[c].saturating_sub(self.channel.taken(c));
                u64::from(ahead.saturating_sub(depth(c))) * slab_blocks(c)
            })
            .sum()
    }

    /// Withdraw `class`'s denial if one stands, so its warps ask again.
    fn withdraw_denial(&mut self, class: usize) {
        if std::mem::take(&mut self.denial_stands[class]) {
            self.channel.withdraw_denial(class);
        }
    }

    /// After [`super::CpuCaches::drain`] (no warp runs): take back the returned slabs and the
    /// ones published and not taken, so only slabs with live objects stay held. Returns the
    /// slabs given back.
    pub fn reclaim(&mut self, source: &mut impl SlabSource) -> usize {
        let mut given = self.take_returns(source);
        for class in 0..CACHE_CLASSES {
            let taken = self.channel.taken(class);
            given += self.give_back_published(class, taken, source);
            if self.filled[class] != taken {
                self.filled[class] = taken;
                self.channel.rewind(class, taken);
            }
            self.quiet_at[class] = taken;
            self.depth[class] = depth(class);
            // Drained: the class asks afresh when used again.
            self.withdraw_denial(class);
        }
        self.lean = false;
        self.publish_held();
        given
    }

    /// While warps may run, when the arena has no room for a request: take back the returned
    /// slabs and those published and not taken, so their blocks can serve it; a class whose
    /// lock holder is taking its next slab at this moment keeps its own
    /// ([`CacheChannel::recall`]). A class that lost slabs is denied as if it had asked: a warp
    /// waiting for one of them goes to the mailbox, and the host publishes the slab the class
    /// lacks as soon as one fits. From then on no slab is published ahead of need until one
    /// comes back or the caches are drained. Returns the slabs given back.
    pub fn recall(&mut self, source: &mut impl SlabSource) -> usize {
        let mut given = self.take_returns(source);
        // Short of room: no class keeps more than its first depth ahead from here on.
        self.depth = std::array::from_fn(depth);
        for class in 0..CACHE_CLASSES {
            let taken = self.channel.taken(class);
            let filled = self.filled[class];
            if taken == filled || !self.channel.recall(class, taken, filled) {
                continue;
            }
            let recalled = self.give_back_published(class, taken, source);
            self.filled[class] = taken;
            // A warp may be waiting for the slab taken back (its ask answered by it): it goes
            // to the mailbox, and the class's warps after it, until the slab it lacks fits.
            if self.asks_seen[class] != 0 {
                self.channel.deny(class, self.asks_seen[class]);
                self.denial_stands[class] = true;
            }
            self.stats
                .recalls
                .fetch_add(recalled as u64, Ordering::Relaxed);
            tracing::debug!(class, recalled, "published cache slabs taken back for room");
            given += recalled;
        }
        self.lean = true;
        self.publish_held();
        given
    }

    /// Give back the slabs of `class` published from `taken` to `filled` (no warp can take
    /// them any more); `filled` is the caller's to lower. Returns how many.
    fn give_back_published(
        &mut self,
        class: usize,
        taken: u32,
        source: &mut impl SlabSource,
    ) -> usize {
        let mut given = 0;
        for index in taken..self.filled[class] {
            let (_, id, _) = entry_parts(self.channel.entry(class, index));
            if let Some(base) = self.give_back(id, source) {
                tracing::trace!(
                    class,
                    index,
                    id,
                    base = format_args!("{base:#x}"),
                    "cache slab taken back"
                );
                given += 1;
            }
        }
        given
    }

    /// Give held slab `id`'s blocks back to `source` and free its id; its base, or `None` when
    /// the id holds no slab.
    fn give_back(&mut self, id: u32, source: &mut impl SlabSource) -> Option<u64> {
        let slab = self.slabs.get_mut(id as usize).and_then(Option::take)?;
        source.give_slab(slab.base);
        self.held_blocks -= slab.blocks;
        self.free_ids.push(id);
        Some(slab.base)
    }

    /// Show the bytes held now in the counters.
    fn publish_held(&self) {
        let held = self.held_bytes();
        self.stats.held_bytes.store(held, Ordering::Relaxed);
        self.stats
            .peak_held_bytes
            .fetch_max(held, Ordering::Relaxed);
    }

    fn take_returns(&mut self, source: &mut impl SlabSource) -> usize {
        let mut moved = 0;
        while let Some(id) = self.channel.returned(self.returns_read) {
            self.returns_read += 1;
            moved += 1;
            match self.give_back(id, source) {
                Some(base) => {
                    tracing::trace!(id, base = format_args!("{base:#x}"), "cache slab returned");
                    self.stats.returns.fetch_add(1, Ordering::Relaxed);
                    // Room came back: publish ahead of need again.
                    self.lean = false;
                }
                // Only a device bug gets here; the slab's blocks stay held rather than be reused.
                None => tracing::error!(id, "the device returned a slab the host does not hold"),
            }
        }
        moved
    }

    /// Verify the invariants listed in the module docs.
    pub fn check(&self) -> Result<(), String> {
        let held: u64 = self.slabs.iter().flatten().map(|s| s.blocks).sum();
        if held != self.held_blocks {
            return Err(format!(
                "held blocks {} but slabs sum to {held}",
                self.held_blocks
            ));
        }
        if held > self.max_blocks {
            return Err(format!(
                "{held} blocks held over the bound {}",
                self.max_blocks
            ));
        }
        let mut seen = vec![false; self.slabs.len()];
        for &id in &self.free_ids {
            if std::mem::replace(&mut seen[id as usize], true) || self.slabs[id as usize].is_some()
            {
                return Err(format!("slab id {id} free twice or free and held"));
            }
        }
        if seen.iter().filter(|s| !**s).count() != self.slabs.iter().flatten().count() {
            return Err("a slab id is neither free nor held".into());
        }
        for class in 0..CACHE_CLASSES {
            let ahead = self.filled[class].wrapping_sub(self.channel.taken(class));
            if ahead >= RING_LEN as u32 {
                return Err(format!(
                    "class {class}: {ahead} slabs published and not taken"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::caches::geometry::slab_blocks;
    use crate::records::LaneStatus;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A model of the resolver: `blocks` VABlocks handed out first fit; it fails the test if a
    /// slab comes back that it did not hand out, or comes back twice.
    struct Blocks {
        used: Vec<bool>,
        out: BTreeMap<u64, u64>,
    }

    impl Blocks {
        fn new(blocks: usize) -> Self {
            Self {
                used: vec![false; blocks],
                out: BTreeMap::new(),
            }
        }
    }

    impl SlabSource for Blocks {
        fn take_slab(&mut self, blocks: u64, _class: usize) -> Option<u64> {
            let n = blocks as usize;
            let first = (0..=self.used.len().checked_sub(n)?)
                .find(|&b| self.used[b..b + n].iter().all(|u| !u))?;
            self.used[first..first + n].fill(true);
            // Block 1 onward, so no slab starts at address 0.
            let base = (first as u64 + 1) * VABLOCK_BYTES;
            self.out.insert(base, blocks);
            Some(base)
        }

        fn give_slab(&mut self, base: u64) {
            let blocks = self
                .out
                .remove(&base)
                .unwrap_or_else(|| panic!("slab {base:#x} given back but not out"));
            let first = (base / VABLOCK_BYTES - 1) as usize;
            self.used[first..first + blocks as usize].fill(false);
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        /// The device moves `class` to its next published slab, if there is one.
        Take(usize),
        /// The device finds `class` empty and asks.
        Ask(usize),
        /// The device gives back the `n`-th slab it holds (modulo how many).
        Return(usize),
        /// The host's turn.
        Tend,
        /// The device gives back the slabs it holds with nothing live (every `n`-th one) and
        /// the host reclaims.
        DrainAndReclaim(usize),
        /// The arena has no room for a request: the host takes back what it published.
        Recall,
    }

    fn step() -> impl Strategy<Value = Step> {
        let class = 0..CACHE_CLASSES;
        prop_oneof![
            4 => class.clone().prop_map(Step::Take),
            3 => class.prop_map(Step::Ask),
            3 => (0usize..64).prop_map(Step::Return),
            6 => Just(Step::Tend),
            1 => (1usize..4).prop_map(Step::DrainAndReclaim),
            1 => Just(Step::Recall),
        ]
    }

    /// The device, as the channel sees it.
    #[derive(Default)]
    struct Device {
        taken: [u32; CACHE_CLASSES],
        asks: [u32; CACHE_CLASSES],
        /// Asks made since the last turn of the host: (class, ask).
        unanswered: Vec<(usize, u32)>,
        /// Slabs the device holds: (id, base, class).
        held: Vec<(u32, u64, usize)>,
        returns: u64,
    }

    impl Device {
        fn give_back(&mut self, channel: &CacheChannel, n: usize) {
            let (id, ..) = self.held.remove(n);
            channel.post_return(self.returns, id);
            self.returns += 1;
        }
    }

    /// Blocks of the slabs published and not taken.
    fn published_blocks(channel: &CacheChannel, keeper: &CacheKeeper) -> u64 {
        (0..CACHE_CLASSES)
            .map(|c| u64::from(keeper.filled[c] - channel.taken(c)) * slab_blocks(c))
            .sum()
    }

    /// Caches and their host on one thread: the host takes its turn where a waiting warp
    /// polls the closed flag.
    struct OneThread {
        caches: crate::caches::CpuCaches,
        keeper: std::cell::RefCell<CacheKeeper>,
        source: std::cell::RefCell<Blocks>,
    }

    impl OneThread {
        fn new() -> Self {
            let channel = Arc::new(CacheChannel::new(8));
            Self {
                caches: crate::caches::CpuCaches::new(channel.clone(), 64),
                keeper: CacheKeeper::new(channel, 64 * VABLOCK_BYTES).into(),
                source: Blocks::new(64).into(),
            }
        }

        /// A full warp's objects of `size` bytes.
        fn alloc(&self, size: u64) -> [translator::Handle; 32] {
            let host_turn = || {
                self.keeper
                    .borrow_mut()
                    .tend(&mut *self.source.borrow_mut());
                false
            };
            let got = self.caches.alloc(u32::MAX, &[size; 32], false, &host_turn);
            assert_eq!(got.served, u32::MAX);
            got.handles
        }

        /// Free every handle; each lane's outcome (every lane handled on the device).
        fn free(&self, handles: &[translator::Handle; 32]) -> [LaneStatus; 32] {
            let out = self.caches.free(u32::MAX, &handles.map(|h| h.0), false);
            assert_eq!(out.handled, u32::MAX);
            out.lanes
        }

        /// Drain the device side and take back every slab with nothing live.
        fn drain(&self) {
            self.caches.drain();
            self.keeper
                .borrow_mut()
                .reclaim(&mut *self.source.borrow_mut());
        }
    }

    fn all(lanes: &[LaneStatus; 32], status: LaneStatus) -> bool {
        lanes.iter().all(|&s| s == status)
    }

    /// A slab goes back, a slab of another class is placed on the same block, and the handles
    /// of the first one are freed again: each is a second free (the generations of the two
    /// slabs differ), not an interior pointer or a free of the new slab's objects.
    #[test]
    fn a_stale_handle_into_a_new_slab_on_the_same_block_is_a_double_free() {
        let t = OneThread::new();
        let old = t.alloc(64);
        assert!(all(&t.free(&old), LaneStatus::Ok));
        t.drain();
        assert_eq!(t.keeper.borrow().held_bytes(), 0);
        let new = t.alloc(100);
        assert_eq!(
            new[0].address(),
            old[0].address(),
            "first fit: the same block"
        );
        let again = t.free(&old);
        assert!(all(&again, LaneStatus::DoubleFree), "{again:?}");
        assert!(all(&t.free(&new), LaneStatus::Ok));
        t.drain();
        // No slab holds the block now: still a second free, judged on the device.
        assert!(all(&t.free(&old), LaneStatus::DoubleFree));
        t.keeper.borrow().check().unwrap();
        assert!(t.source.borrow().out.is_empty());
    }

    /// A handle kept from a slab's first life is freed again in each of 300 later lives of its
    /// block, of three classes: always a second free, and the object now at its address stays
    /// live. (Generations that cycle, as 64 of them did, let the 64th later life take the stale
    /// handle for its own object and free it.)
    #[test]
    fn a_stale_handle_stays_a_second_free_in_every_later_life_of_its_block() {
        let t = OneThread::new();
        let old = t.alloc(64);
        assert!(all(&t.free(&old), LaneStatus::Ok));
        t.drain();
        for life in 1..=300 {
            let new = t.alloc([64, 100, 300][life % 3]);
            assert_eq!(
                new[0].address(),
                old[0].address(),
                "life {life}: the same block"
            );
            let again = t.free(&old);
            assert!(
                all(&again, LaneStatus::DoubleFree),
                "life {life}: {again:?}"
            );
            let mine = t.free(&new);
            assert!(
                all(&mine, LaneStatus::Ok),
                "life {life}: the new objects were freed by the stale handle: {mine:?}"
            );
            t.drain();
            assert_eq!(t.keeper.borrow().held_bytes(), 0);
        }
        t.keeper.borrow().check().unwrap();
    }

    /// A denial says whether the bound refused the slab or the arena had no room.
    #[test]
    fn denials_tell_the_bound_from_a_full_arena() {
        for (bound_blocks, arena_blocks, at_bound) in [(1, 4, 1), (8, 1, 0)] {
            let channel = Arc::new(CacheChannel::new(8));
            let mut keeper = CacheKeeper::new(channel.clone(), bound_blocks * VABLOCK_BYTES);
            let mut source = Blocks::new(arena_blocks);
            channel.post_demand(0, 1);
            keeper.tend(&mut source);
            assert_eq!(channel.filled(0), 1);
            // The device takes it and asks for the next one: no second slab fits.
            channel.post_taken(0, 1);
            channel.post_demand(0, 2);
            keeper.tend(&mut source);
            let stats = keeper.stats().snapshot();
            assert_eq!((stats.denials, stats.denials_at_bound), (1, at_bound));
            keeper.check().unwrap();
        }
    }

    /// Slabs ahead of need leave the bound's last longest slab free: a class that asks for its
    /// first slab of 32 MiB gets it while a busy small class holds what it has not taken yet.
    #[test]
    fn slabs_ahead_of_need_leave_room_for_a_slab_asked_for() {
        let largest = slab_blocks(11);
        assert_eq!(largest, MAX_SLAB_BLOCKS);
        let channel = Arc::new(CacheChannel::new(8));
        let mut keeper = CacheKeeper::new(channel.clone(), (largest + 2) * VABLOCK_BYTES);
        let mut source = Blocks::new(64);
        // Class 0 (one block a slab) asks, takes its slab and asks again: one slab is needed,
        // and of the `depth(0)` ahead of it only those that leave `largest` blocks free.
        channel.post_demand(0, 1);
        keeper.tend(&mut source);
        channel.post_taken(0, 1);
        keeper.tend(&mut source);
        assert_eq!(
            channel.filled(0),
            2,
            "one ahead: a second would eat into the reserve"
        );
        assert!(depth(0) > 1);
        // Class 11 asks for its first slab: it fits in the blocks left.
        channel.post_demand(11, 1);
        keeper.tend(&mut source);
        assert_eq!(channel.filled(11), 1);
        assert_eq!(keeper.stats().snapshot().denials, 0);
        assert_eq!(keeper.held_bytes(), (largest + 2) * VABLOCK_BYTES);
        keeper.check().unwrap();
    }

    /// At first use the classes that claim ahead (slabs of 1-2 blocks) are published two slabs
    /// ahead of what the device took, the classes of longer slabs one.
    #[test]
    fn classes_that_claim_ahead_are_published_two_ahead_and_longer_slabs_one() {
        let channel = Arc::new(CacheChannel::new(64));
        // Room for every class's slabs and the bound's reserve.
        let mut keeper = CacheKeeper::new(channel.clone(), 512 * VABLOCK_BYTES);
        let mut source = Blocks::new(1024);
        for class in 0..CACHE_CLASSES {
            channel.post_demand(class, 1);
            keeper.tend(&mut source);
            channel.post_taken(class, 1);
            keeper.tend(&mut source);
            let ahead = channel.filled(class) - 1;
            let expected = if slab_blocks(class) <= 2 { 2 } else { 1 };
            assert_eq!(
                ahead,
                expected,
                "class {class}, {} blocks",
                slab_blocks(class)
            );
            keeper.check().unwrap();
        }
        assert_eq!(keeper.stats().snapshot().denials, 0);
    }

    /// A class that runs dry while in use gets twice as many slabs ahead, up to `MOST_DEPTH`;
    /// a drain puts it back to its first depth.
    #[test]
    fn a_class_that_runs_dry_in_use_is_published_deeper_until_drained() {
        let channel = Arc::new(CacheChannel::new(64));
        let mut keeper = CacheKeeper::new(channel.clone(), 64 * VABLOCK_BYTES);
        let mut source = Blocks::new(128);
        // First use: the ask is answered with one slab, then `depth(0)` go ahead of it.
        channel.post_demand(0, 1);
        keeper.tend(&mut source);
        channel.post_taken(0, 1);
        keeper.tend(&mut source);
        assert_eq!(channel.filled(0), 1 + depth(0));
        // The device takes them all and asks again: it ran dry, so the host goes deeper.
        let mut taken = 1;
        let mut expected = depth(0);
        for ask in 2..7 {
            taken = channel.filled(0);
            channel.post_taken(0, taken);
            channel.post_demand(0, ask);
            keeper.tend(&mut source);
            expected = (expected * 2).min(MOST_DEPTH);
            assert_eq!(channel.filled(0), taken + expected, "ask {ask}");
            keeper.check().unwrap();
        }
        assert_eq!(expected, MOST_DEPTH);
        // Each ask read once: the first and the five that ran dry; tends with no new ask
        // count none.
        assert_eq!(keeper.stats().snapshot().asks, 6);
        keeper.tend(&mut source);
        assert_eq!(keeper.stats().snapshot().asks, 6);
        // Drained: back to the first depth once the class is used again.
        keeper.reclaim(&mut source);
        assert_eq!(channel.filled(0), taken);
        channel.post_demand(0, 7);
        keeper.tend(&mut source);
        keeper.check().unwrap();
        assert_eq!(channel.filled(0), taken + 1);
        channel.post_taken(0, taken + 1);
        keeper.tend(&mut source);
        assert_eq!(channel.filled(0), taken + 1 + depth(0));
    }

    /// What deepening publishes is held to `DEEP_BLOCKS` for all classes: a class of 32 MiB
    /// slabs that keeps running dry gets one slab beyond its first depth, not the depth it
    /// asked for.
    #[test]
    fn deepening_stays_within_the_shared_budget() {
        let class = 11;
        assert_eq!(
            slab_blocks(class),
            DEEP_BLOCKS,
            "one slab beyond is the whole budget"
        );
        let channel = Arc::new(CacheChannel::new(64));
        let mut keeper = CacheKeeper::new(channel.clone(), 512 * VABLOCK_BYTES);
        let mut source = Blocks::new(1024);
        channel.post_demand(class, 1);
        keeper.tend(&mut source);
        channel.post_taken(class, 1);
        keeper.tend(&mut source);
        assert_eq!(channel.filled(class), 1 + depth(class));
        for ask in 2..6 {
            let taken = channel.filled(class);
            channel.post_taken(class, taken);
            channel.post_demand(class, ask);
            keeper.tend(&mut source);
            assert!(
                keeper.depth[class] >= 2 * depth(class),
                "ask {ask}: deepened"
            );
            assert_eq!(
                channel.filled(class),
                taken + depth(class) + 1,
                "ask {ask}: the first depth and one slab of budget"
            );
            assert_eq!(keeper.deep_blocks(), DEEP_BLOCKS);
            keeper.check().unwrap();
        }
    }

    /// A block whose cache generations are used up is retired: the slab placed on it is kept
    /// outside the bound and the class gets a slab elsewhere; the block is never offered again.
    #[test]
    fn a_block_whose_generations_are_used_up_is_retired_and_never_placed_again() {
        let channel = Arc::new(CacheChannel::new(8));
        let mut keeper = CacheKeeper::new(channel.clone(), 2 * VABLOCK_BYTES);
        let mut source = Blocks::new(4);
        // Block 1 (the first Blocks hands out) has had its last cache generation.
        keeper.block_generations.insert(1, CACHE_GENERATIONS - 1);
        channel.post_demand(0, 1);
        keeper.tend(&mut source);
        assert_eq!(channel.filled(0), 1, "the ask is answered with a slab");
        let (base, ..) = entry_parts(channel.entry(0, 0));
        assert_eq!(
            base,
            2 * VABLOCK_BYTES,
            "the slab lies past the retired block"
        );
        assert_eq!(keeper.stats().snapshot().retired_bytes, VABLOCK_BYTES);
        assert_eq!(
            keeper.held_bytes(),
            VABLOCK_BYTES,
            "retired blocks are outside the bound"
        );
        assert!(
            source.out.contains_key(&VABLOCK_BYTES),
            "the retired block stays taken"
        );
        keeper.check().unwrap();
    }

    /// The host's turn, then what it must have done: answered every ask, published at most
    /// [`depth`] ahead, and nothing ahead for a class unused since the last drain.
    fn tend_and_check(
        keeper: &mut CacheKeeper,
        source: &mut Blocks,
        device: &mut Device,
        used_since_drain: &[bool; CACHE_CLASSES],
    ) -> Result<(), TestCaseError> {
        let channel = keeper.channel.clone();
        let denials = keeper.stats().snapshot().denials;
        keeper.tend(source);
        let mut denied = 0;
        for (class, ask) in device.unanswered.drain(..) {
            let served = channel.filled(class) > device.taken[class];
            prop_assert!(
                served || channel.denied(class) == ask,
                "class {} ask {} neither served nor denied",
                class,
                ask
            );
            denied += u64::from(!served);
        }
        prop_assert_eq!(keeper.stats().snapshot().denials, denials + denied);
        for (class, &used) in used_since_drain.iter().enumerate() {
            let ahead = channel.filled(class) - device.taken[class];
            prop_assert!(
                keeper.deep_blocks() <= DEEP_BLOCKS,
                "deep {}",
                keeper.deep_blocks()
            );
            prop_assert!(
                ahead <= keeper.depth[class] && keeper.depth[class] <= MOST_DEPTH,
                "class {} {} ahead (depth {})",
                class,
                ahead,
                keeper.depth[class]
            );
            if !used {
                prop_assert!(ahead <= 1, "class {} filled unused", class);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// The keeper against a model of the device and of the resolver: it never holds more
        /// than its bound, never publishes more than [`depth`] ahead, answers every ask with a
        /// slab or a denial on its next turn, publishes nothing for a class the device has not
        /// used since the last drain, gives each returned or reclaimed slab back once, and
        /// holds exactly the blocks of the slabs published or on the device.
        #[test]
        fn keeps_its_bound_and_answers_every_ask(
            steps in prop::collection::vec(step(), 1..120),
            arena_blocks in 1usize..80,
            bound_blocks in 0u64..64,
            max_slabs in 1usize..12,
        ) {
            let channel = Arc::new(CacheChannel::new(max_slabs));
            let mut keeper = CacheKeeper::new(channel.clone(), bound_blocks * VABLOCK_BYTES);
            let mut source = Blocks::new(arena_blocks);
            let mut device = Device::default();
            let mut used_since_drain = [false; CACHE_CLASSES];
            let mut last_generation = BTreeMap::<u64, u32>::new();
            for s in steps {
                match s {
                    Step::Take(class) => {
                        let index = device.taken[class];
                        if channel.filled(class) > index {
                            prop_assert!(channel.claim(class, index, index), "no recall under way");
                            let (base, id, generation) = entry_parts(channel.entry(class, index));
                            // A slab's cache generation is above that of every earlier slab
                            // on any of its blocks.
                            let first = base / VABLOCK_BYTES;
                            for b in first..first + slab_blocks(class) {
                                if let Some(&before) = last_generation.get(&b) {
                                    prop_assert!(generation > before, "block {}: {} after {}", b, generation, before);
                                }
                            }
                            for b in first..first + slab_blocks(class) {
                                last_generation.insert(b, generation);
                            }
                            prop_assert_eq!(source.out.get(&base), Some(&slab_blocks(class)));
                            prop_assert!(device.held.iter().all(|h| h.0 != id), "id {} twice", id);
                            device.held.push((id, base, class));
                            device.taken[class] = index + 1;
                            channel.post_taken(class, index + 1);
                            used_since_drain[class] = true;
                        }
                    }
                    Step::Ask(class) => {
                        if channel.filled(class) <= device.taken[class] {
                            device.asks[class] += 1;
                            channel.post_demand(class, device.asks[class]);
                            device.unanswered.retain(|u| u.0 != class);
                            device.unanswered.push((class, device.asks[class]));
                        }
                    }
                    Step::Return(n) => {
                        if !device.held.is_empty() {
                            let n = n % device.held.len();
                            device.give_back(&channel, n);
                        }
                    }
                    Step::Tend => tend_and_check(&mut keeper, &mut source, &mut device, &used_since_drain)?,
                    Step::Recall => {
                        let recalls = keeper.stats().snapshot().recalls;
                        let published = published_blocks(&channel, &keeper);
                        keeper.recall(&mut source);
                        for class in 0..CACHE_CLASSES {
                            prop_assert_eq!(channel.filled(class), device.taken[class]);
                        }
                        let device_blocks: u64 = device.held.iter().map(|h| slab_blocks(h.2)).sum();
                        prop_assert_eq!(keeper.held_bytes(), device_blocks * VABLOCK_BYTES);
                        prop_assert_eq!(
                            keeper.stats().snapshot().recalls > recalls,
                            published > 0
                        );
                    }
                    Step::DrainAndReclaim(every) => {
                        // A kernel ends only once its waiting warps have their answers.
                        if !device.unanswered.is_empty() {
                            tend_and_check(&mut keeper, &mut source, &mut device, &used_since_drain)?;
                        }
                        let mut n = 0;
                        while n < device.held.len() {
                            if n % every == 0 {
                                device.give_back(&channel, n);
                            }
                            n += 1;
                        }
                        keeper.reclaim(&mut source);
                        used_since_drain = [false; CACHE_CLASSES];
                        for class in 0..CACHE_CLASSES {
                            prop_assert_eq!(channel.filled(class), device.taken[class]);
                        }
                        let device_blocks: u64 = device.held.iter().map(|h| slab_blocks(h.2)).sum();
                        prop_assert_eq!(keeper.held_bytes(), device_blocks * VABLOCK_BYTES);
                    }
                }
                prop_assert!(keeper.check().is_ok(), "{:?}", keeper.check());
                prop_assert!(keeper.held_blocks <= bound_blocks);
                // Returned slabs not read yet are still held by the keeper.
                let device_blocks: u64 = device.held.iter().map(|h| slab_blocks(h.2)).sum();
                let source_blocks: u64 = source.out.values().sum();
                prop_assert_eq!(source_blocks, keeper.held_blocks);
                prop_assert!(keeper.held_blocks >= device_blocks + published_blocks(&channel, &keeper));
            }
            // Everything back: the device gives back all it holds, the host reclaims.
            while !device.held.is_empty() {
                device.give_back(&channel, 0);
            }
            keeper.reclaim(&mut source);
            prop_assert_eq!(keeper.held_bytes(), 0);
            prop_assert!(source.out.is_empty());
            let stats = keeper.stats().snapshot();
            prop_assert_eq!(stats.held_bytes, 0);
            prop_assert!(stats.peak_held_bytes <= bound_blocks * VABLOCK_BYTES);
        }
    }
}
