//! The host side of the caches, run by the service thread on every sweep: read the slabs the
//! device gave back and return their blocks, then keep each class that the device has used
//! `DEPTH` slabs ahead of its consumption, within the bound on blocks held.
//!
//! Invariants ([`CacheKeeper::check`]): every slab id is free or held, never both; the blocks of
//! the held slabs sum to `held_blocks`, which never exceeds `max_blocks`; per class, the published
//! and not yet taken slabs are fewer than `RING_LEN`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::channel::CacheChannel;
use super::geometry::{CACHE_CLASSES, RING_LEN, class_bytes, slab_blocks};
use ortree::VABLOCK_BYTES;

/// Slabs published ahead of the device's consumption, per class in use.
pub const DEPTH: u32 = 2;

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
    returns: AtomicU64,
    denials: AtomicU64,
    held_bytes: AtomicU64,
    peak_held_bytes: AtomicU64,
}

/// A copy of [`CacheStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStatsSnapshot {
    /// Slabs the host handed to the caches.
    pub refills: u64,
    /// Slabs the device gave back (all their objects freed).
    pub returns: u64,
    /// Times the host could not hand out a slab the device asked for (the warps then asked
    /// through the mailbox).
    pub denials: u64,
    /// Bytes the caches hold now (slabs handed out and not given back).
    pub held_bytes: u64,
    /// The most bytes they held at once.
    pub peak_held_bytes: u64,
}

impl CacheStats {
    /// The counters now.
    pub fn snapshot(&self) -> CacheStatsSnapshot {
        CacheStatsSnapshot {
            refills: self.refills.load(Ordering::Relaxed),
            returns: self.returns.load(Ordering::Relaxed),
            denials: self.denials.load(Ordering::Relaxed),
            held_bytes: self.held_bytes.load(Ordering::Relaxed),
            peak_held_bytes: self.peak_held_bytes.load(Ordering::Relaxed),
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
        let taken = self.channel.taken(class);
        let ask = self.channel.demand(class);
        let asked = ask != self.asks_seen[class];
        self.asks_seen[class] = ask;
        let ahead = if taken > self.quiet_at[class] {
            taken + DEPTH
        } else {
            0 // not used since it was drained (or ever): nothing ahead of need
        };
        let needed = if asked { taken + 1 } else { 0 };
        let target = ahead.max(needed).min(taken + RING_LEN as u32 - 1);
        let mut moved = 0;
        while self.filled[class] < target {
            let index = self.filled[class];
            match self.place(class, source) {
                Some((base, id)) => {
                    self.channel.publish(class, index, base, id);
                    self.filled[class] = index + 1;
                    self.stats.refills.fetch_add(1, Ordering::Relaxed);
                    moved += 1;
                }
                None => {
                    // A warp waits for this slab: tell it to ask through the mailbox. One
                    // ahead of need just is not published.
                    if asked && index == taken {
                        self.channel.deny(class, ask);
                        self.stats.denials.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(class, index, "cache slab denied");
                    }
                    break;
                }
            }
        }
        moved
    }

    /// A slab of `class` within the bound: its base and id.
    fn place(&mut self, class: usize, source: &mut impl SlabSource) -> Option<(u64, u32)> {
        let blocks = slab_blocks(class);
        if self.held_blocks + blocks > self.max_blocks {
            return None;
        }
        let id = self.free_ids.pop()?;
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
                Some((base, id))
            }
            None => {
                self.free_ids.push(id);
                None
            }
        }
    }

    /// After [`super::CpuCaches::drain`] (no warp runs): take back the returned slabs and the
    /// ones published and not taken, so only slabs with live objects stay held. Returns the
    /// slabs given back.
    pub fn reclaim(&mut self, source: &mut impl SlabSource) -> usize {
        let mut given = self.take_returns(source);
        for class in 0..CACHE_CLASSES {
            let taken = self.channel.taken(class);
            for index in taken..self.filled[class] {
                let (_, id) = self.channel.entry(class, index);
                if let Some(slab) = self.slabs.get_mut(id as usize).and_then(Option::take) {
                    source.give_slab(slab.base);
                    self.held_blocks -= slab.blocks;
                    self.free_ids.push(id);
                    given += 1;
                }
            }
            if self.filled[class] != taken {
                self.filled[class] = taken;
                self.channel.rewind(class, taken);
            }
            self.quiet_at[class] = taken;
        }
        self.publish_held();
        given
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
            match self.slabs.get_mut(id as usize).and_then(Option::take) {
                Some(slab) => {
                    source.give_slab(slab.base);
                    self.held_blocks -= slab.blocks;
                    self.free_ids.push(id);
                    self.stats.returns.fetch_add(1, Ordering::Relaxed);
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
