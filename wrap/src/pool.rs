//! The wrapped program's managed allocations.
//!
//! A [`Pool`] places each `cuMemAllocManaged` of the program in an alignmalloc arena: objects of
//! up to 4 KiB come from size-class slabs (the `slabs` module: one 2 MiB VABlock per slab, one
//! class per multiple of 256 B); larger ones from [`Resolver::alloc_plain`], which starts objects
//! over 64 KiB on a VABlock with no other object in their blocks (the driver prefetches and
//! evicts per VABlock, so it never mixes two of them) and packs the others in 256 B units. The arena is reserved from the driver through
//! [`Reserve`] on first use and grows by doubling (at least the request) up to its cap; past the
//! cap an allocation goes to the driver or fails ([`PastCap`]). Every allocation, the pool's
//! and the driver's, is recorded with its size and lifetime for the report and for the answers
//! the driver would give about it (its range, its id). With tiered placement an allocation not
//! from a slab is split between the GPU and host memory when it is recorded ([`crate::tiers`]);
//! its GPU part returns to the budget when it is freed.
//!
//! Invariants: every address the resolver hands out lies in a reservation, and reservations are
//! never given back while the pool lives; `live` holds exactly the allocations not yet freed
//! that are not slab objects, by base, and an arena allocation in `live` is a live object of the
//! resolver starting there; a slab object is live exactly when its slab's bit is set; a free the
//! pool refuses changes nothing; the device tier holds exactly the GPU parts of the live
//! allocations' splits.

use std::collections::BTreeMap;

use orchestrator::{LaneStatus, PLAIN_SMALL_MAX, Resolver, ResolverConfig, Status};
use ortree::VABLOCK_BYTES;
use translator::WARP_LANES;

use crate::options::{PastCap, Placement, WrapOptions};
use crate::report::{AllocationRow, Counts, PoolSummary, Traffic};
use crate::slabs::{self, SLAB_BYTES, SlabHit, Slabs};
use crate::tiers::{Split, Tiers};

/// The driver as the pool needs it: managed memory for the arena, and how much the GPU has free.
pub trait Reserve {
    /// `bytes` of managed memory, attached globally; its first byte, or the driver's error code.
    fn reserve(&mut self, bytes: u64) -> Result<u64, i32>;
    /// Bytes the GPU has free now (`None` if the driver cannot say).
    fn gpu_free_bytes(&mut self) -> Option<u64>;
}

/// Where an allocation's memory came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// The alignmalloc arena.
    Arena,
    /// The driver, the pool being off (`--no-pool`) or the flags not global.
    Driver,
    /// The driver, the arena being at its cap.
    DriverPastCap,
}

/// One allocation as the pool records it.
#[derive(Clone, Debug)]
struct Record {
    id: u64,
    base: u64,
    bytes: u64,
    origin: Origin,
    born_ns: u64,
    died_ns: Option<u64>,
    caller: Option<String>,
    /// With tiered placement, where its bytes live.
    split: Option<Split>,
}

/// Records in pages that never move (a program may make millions of allocations; a growing
/// vector would copy them all at every doubling).
#[derive(Default)]
struct Records {
    pages: Vec<Vec<Record>>,
}

impl Records {
    const PAGE: usize = 4096;

    /// Append `r`; its index.
    fn push(&mut self, r: Record) -> u32 {
        if self.pages.last().is_none_or(|p| p.len() == Self::PAGE) {
            self.pages.push(Vec::with_capacity(Self::PAGE));
        }
        let last = self.pages.len() - 1;
        self.pages[last].push(r);
        (last * Self::PAGE + self.pages[last].len() - 1) as u32
    }

    fn len(&self) -> u32 {
        let full = self.pages.len().saturating_sub(1) * Self::PAGE;
        (full + self.pages.last().map_or(0, Vec::len)) as u32
    }

    fn get(&self, i: u32) -> &Record {
        &self.pages[i as usize / Self::PAGE][i as usize % Self::PAGE]
    }

    fn get_mut(&mut self, i: u32) -> &mut Record {
        &mut self.pages[i as usize / Self::PAGE][i as usize % Self::PAGE]
    }

    fn iter(&self) -> impl Iterator<Item = &Record> {
        self.pages.iter().flatten()
    }
}

/// What [`Pool::alloc`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum PoolAlloc {
    /// Placed in the arena at this address (already recorded).
    Arena(u64),
    /// Ask the driver, then [`Pool::record_driver`] what it gave.
    Driver(Origin),
    /// Past the cap with [`PastCap::Fail`]: answer out of memory.
    OutOfMemory,
    /// ([`Pool::try_alloc`] only) The arena has no room: reserve [`Growth::bytes`] from the
    /// driver, give the outcome to [`Pool::finish_growth`], then try again without growing.
    Grow(Growth),
}

/// A segment the arena needs: the caller reserves it from the driver (outside any lock it
/// holds around the pool) and hands the outcome to [`Pool::finish_growth`]. Until then its bytes
/// count against the cap.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a growth is pending until finish_growth takes it"]
pub struct Growth {
    /// Bytes to reserve (one block more than the segment: the driver's address need not be
    /// block aligned).
    pub bytes: u64,
}

/// What [`Pool::free`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolFree {
    /// An arena allocation, freed.
    Freed,
    /// Not an arena address: pass it to the driver (then [`Pool::record_driver_free`] if the
    /// driver freed it).
    Driver,
    /// An arena address that is not a live allocation's start: refused (the driver answers an
    /// invalid value for such a free), nothing changed.
    Refused(LaneStatus),
}

/// A range question about an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Not in the arena: the driver answers.
    Driver,
    /// In this live arena allocation.
    Allocation {
        /// Its first byte.
        base: u64,
        /// Its size as asked.
        bytes: u64,
        /// Its number (1 = the first allocation the pool recorded).
        id: u64,
    },
    /// In the arena but in no live allocation.
    Nothing,
}

/// Counters of the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolCounters {
    /// Allocations placed in the arena.
    pub arena_allocations: u64,
    /// Allocations left with the driver (pool off, or not globally attached).
    pub driver_allocations: u64,
    /// Allocations sent to the driver because the arena was at its cap.
    pub past_cap_allocations: u64,
    /// Allocations refused past the cap ([`PastCap::Fail`]).
    pub refused_past_cap: u64,
    /// Frees of arena allocations.
    pub arena_frees: u64,
    /// Frees refused: a second free of the same pointer.
    pub double_frees: u64,
    /// Frees refused: a pointer inside an allocation, or in the arena where none is.
    pub bad_frees: u64,
    /// Reservations the arena made.
    pub reservations: u64,
    /// Bytes the arena reserved in all.
    pub reserved_bytes: u64,
    /// Most bytes live at once (as asked, all origins).
    pub peak_live_bytes: u64,
}

/// The wrapped program's managed allocations.
pub struct Pool<R: Reserve> {
    reserve: R,
    enabled: bool,
    first_bytes: u64,
    cap: u64,
    past_cap: PastCap,
    resolver: Option<Resolver>,
    /// Every allocation recorded, in order (index = id - 1).
    records: Records,
    /// The live ones: base -> index in `records` (small values: the tree moves them around).
    live: BTreeMap<u64, u32>,
    /// Small objects, by size class (not in `live`).
    slabs: Slabs,
    live_count: u64,
    next_id: u64,
    live_bytes: u64,
    counters: PoolCounters,
    /// Bytes of [`Growth`]s handed out and not yet finished.
    pending_bytes: u64,
    /// With tiered placement, the device tier's budget.
    tiers: Option<Tiers>,
}

/// Where [`Pool::place`] put a request.
enum Spot {
    Placed(u64),
    /// Not in the arena as it is.
    NoRoom,
    /// In no arena (over 1 TiB).
    Never,
}

impl<R: Reserve> Pool<R> {
    /// A pool with these settings; reserves nothing yet. The cap is the one set, else the GPU's
    /// free memory now (unlimited with oversubscription).
    pub fn new(options: &WrapOptions, mut reserve: R) -> Self {
        let cap = match (options.max_arena_bytes, options.oversubscribe) {
            (Some(max), _) => max,
            (None, true) => u64::MAX,
            (None, false) => reserve.gpu_free_bytes().unwrap_or(u64::MAX),
        };
        let tiers = match options.placement {
            Placement::Migrate => None,
            Placement::Tiered => {
                let budget = options
                    .device_tier_bytes
                    .or_else(|| reserve.gpu_free_bytes().map(Tiers::default_budget));
                if budget.is_none() {
                    tracing::warn!(
                        "tiered placement needs the device tier's size and the driver does not say \
                         how much the GPU has free: every allocation migrates (set \
                         --device-tier-bytes)"
                    );
                }
                budget.map(Tiers::new)
            }
        };
        Self {
            reserve,
            enabled: options.pool,
            first_bytes: options.arena_bytes.next_multiple_of(VABLOCK_BYTES),
            cap,
            past_cap: options.past_cap,
            resolver: None,
            records: Records::default(),
            live: BTreeMap::new(),
            slabs: Slabs::default(),
            live_count: 0,
            next_id: 1,
            live_bytes: 0,
            counters: PoolCounters::default(),
            pending_bytes: 0,
            tiers,
        }
    }

    /// The cap on the arena's reservations.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The counters.
    pub fn counters(&self) -> &PoolCounters {
        &self.counters
    }

    /// The driver access, for the caller's own driver calls.
    pub fn reserve_mut(&mut self) -> &mut R {
        &mut self.reserve
    }

    /// Place `bytes` (`1..`) for a program's managed allocation made at `now_ns`, reserving from
    /// the driver (through the pool's [`Reserve`]) when the arena needs to grow.
    pub fn alloc(&mut self, bytes: u64, now_ns: u64, caller: Option<String>) -> PoolAlloc {
        match self.try_alloc(bytes, now_ns, caller.clone(), true) {
            PoolAlloc::Grow(growth) => {
                let reserved = self.reserve.reserve(growth.bytes);
                self.finish_growth(growth, reserved);
                self.try_alloc(bytes, now_ns, caller, false)
            }
            placed => placed,
        }
    }

    /// [`Pool::alloc`] without calling the driver: where the arena has no room and
    /// `may_grow`, [`PoolAlloc::Grow`] says what to reserve (so a caller that serialises the
    /// pool can reserve without holding its lock, while other threads allocate).
    pub fn try_alloc(
        &mut self,
        bytes: u64,
        now_ns: u64,
        caller: Option<String>,
        may_grow: bool,
    ) -> PoolAlloc {
        if !self.enabled {
            return PoolAlloc::Driver(Origin::Driver);
        }
        let (placed, need) = match slabs::class_of(bytes) {
            Some(class) => (self.slab_object(class), SLAB_BYTES),
            None => (self.place(bytes), bytes),
        };
        match placed {
            Spot::Placed(base) => {
                self.counters.arena_allocations += 1;
                let mapped = slabs::class_of(bytes).is_none();
                self.insert(base, bytes, Origin::Arena, now_ns, caller, mapped);
                PoolAlloc::Arena(base)
            }
            Spot::NoRoom if may_grow => match self.plan_growth(need) {
                Some(growth) => PoolAlloc::Grow(growth),
                None => self.past_the_cap(bytes),
            },
            Spot::NoRoom | Spot::Never => self.past_the_cap(bytes),
        }
    }

    /// An object of slab class `class`, from a slab with room or a new one.
    fn slab_object(&mut self, class: usize) -> Spot {
        let record = self.records.len();
        if let Some(address) = self.slabs.take(class, record) {
            return Spot::Placed(address);
        }
        match self.place(SLAB_BYTES) {
            Spot::Placed(base) => {
                self.slabs.add(base, class);
                match self.slabs.take(class, record) {
                    Some(address) => Spot::Placed(address),
                    None => Spot::Never,
                }
            }
            other => other,
        }
    }

    /// Room for `bytes` from the arena as it is.
    fn place(&mut self, bytes: u64) -> Spot {
        let Some(r) = &mut self.resolver else {
            return Spot::NoRoom;
        };
        match r.alloc_plain(bytes) {
            Ok(base) => Spot::Placed(base),
            Err(Status::OutOfMemory) => Spot::NoRoom,
            Err(status) => {
                // Over 1 TiB: more than any arena holds.
                tracing::warn!(bytes, ?status, "an allocation the arena cannot place");
                Spot::Never
            }
        }
    }

    /// What an allocation gets when the arena is at its cap.
    fn past_the_cap(&mut self, bytes: u64) -> PoolAlloc {
        match self.past_cap {
            PastCap::Driver => {
                if self.counters.past_cap_allocations == 0 {
                    tracing::warn!(
                        bytes,
                        cap = self.cap,
                        reserved = self.counters.reserved_bytes,
                        "the arena is at its cap: this and later allocations that do not fit \
                         come from the driver (raise it with --max-arena-bytes)"
                    );
                }
                PoolAlloc::Driver(Origin::DriverPastCap)
            }
            PastCap::Fail => {
                self.counters.refused_past_cap += 1;
                tracing::warn!(
                    bytes,
                    cap = self.cap,
                    "out of memory: the arena is at its cap"
                );
                PoolAlloc::OutOfMemory
            }
        }
    }

    /// Record what the driver gave for an allocation [`Pool::alloc`] sent to it.
    pub fn record_driver(
        &mut self,
        base: u64,
        bytes: u64,
        origin: Origin,
        now_ns: u64,
        caller: Option<String>,
    ) {
        match origin {
            Origin::DriverPastCap => self.counters.past_cap_allocations += 1,
            _ => self.counters.driver_allocations += 1,
        }
        self.insert(base, bytes, origin, now_ns, caller, true);
    }

    /// Free the allocation at `address` at `now_ns`, or say who must.
    pub fn free(&mut self, address: u64, now_ns: u64) -> PoolFree {
        if !self.in_arena(address) {
            return PoolFree::Driver;
        }
        let outcome = match self.slabs.find(address) {
            SlabHit::NoSlab => {
                let resolver = self.resolver.as_mut().expect("the address is in the arena");
                let mut addresses = [0u64; WARP_LANES];
                addresses[0] = address;
                match resolver.free_pointers(&addresses)[0] {
                    LaneStatus::Ok => match self.live.remove(&address) {
                        Some(index) => Ok(index),
                        None => unreachable!("the resolver freed an object the pool never had"),
                    },
                    refused => Err(refused),
                }
            }
            _ => self.slabs.free(address),
        };
        match outcome {
            Ok(index) => {
                self.counters.arena_frees += 1;
                self.close_record(index, now_ns);
                PoolFree::Freed
            }
            Err(outcome) => {
                if outcome == LaneStatus::DoubleFree {
                    self.counters.double_frees += 1;
                } else {
                    self.counters.bad_frees += 1;
                }
                tracing::warn!(
                    address = format_args!("{address:#x}"),
                    ?outcome,
                    "a free of a pointer that is no live managed allocation: refused with \
                     CUDA_ERROR_INVALID_VALUE, as the driver would"
                );
                PoolFree::Refused(outcome)
            }
        }
    }

    /// The driver freed `address` (an allocation it made, if the pool recorded it).
    pub fn record_driver_free(&mut self, address: u64, now_ns: u64) {
        if self
            .live_at(address)
            .is_some_and(|r| r.origin != Origin::Arena)
        {
            self.close(address, now_ns);
        }
    }

    /// Whether `address` lies in one of the arena's reservations.
    fn in_arena(&self, address: u64) -> bool {
        self.resolver.as_ref().is_some_and(|r| r.in_arena(address))
    }

    /// Who answers for `address`.
    pub fn owner(&self, address: u64) -> Owner {
        if !self.in_arena(address) {
            return Owner::Driver;
        }
        match self.slabs.find(address) {
            SlabHit::Live { base, record } => {
                let r = self.records.get(record);
                return if address - base < r.bytes {
                    Owner::Allocation {
                        base,
                        bytes: r.bytes,
                        id: r.id,
                    }
                } else {
                    Owner::Nothing
                };
            }
            SlabHit::Dead => return Owner::Nothing,
            SlabHit::NoSlab => {}
        }
        let at = self.live.range(..=address).next_back();
        match at.map(|(_, &i)| self.records.get(i)) {
            Some(r) if r.origin == Origin::Arena && address - r.base < r.bytes => {
                Owner::Allocation {
                    base: r.base,
                    bytes: r.bytes,
                    id: r.id,
                }
            }
            _ => Owner::Nothing,
        }
    }

    /// Whether `address..address + count` is wholly inside one live arena allocation: `Ok` with
    /// it, `Err(Owner::Driver)` outside the arena, `Err(Owner::Nothing)` for a range the driver
    /// would refuse for a real allocation of that size.
    pub fn range(&self, address: u64, count: u64) -> Result<Owner, Owner> {
        match self.owner(address) {
            Owner::Driver => Err(Owner::Driver),
            Owner::Nothing => Err(Owner::Nothing),
            owner @ Owner::Allocation { base, bytes, .. } => {
                let end = address.checked_add(count).ok_or(Owner::Nothing)?;
                if count > 0 && end <= base + bytes {
                    Ok(owner)
                } else {
                    Err(Owner::Nothing)
                }
            }
        }
    }

    /// Check the resolver's invariants and that every arena allocation recorded live is a live
    /// object there (tests and the report call it).
    pub fn check(&self) -> Result<(), String> {
        self.slabs.check()?;
        if let Some(r) = &self.resolver {
            r.check_invariants()?;
            let live = self.live.values().map(|&i| self.records.get(i));
            for rec in live.filter(|r| r.origin == Origin::Arena) {
                if r.chunk_containing(rec.base) != Some(rec.base) {
                    return Err(format!(
                        "allocation {} at {:#x} is no live chunk",
                        rec.id, rec.base
                    ));
                }
            }
        }
        Ok(())
    }

    /// The report's rows and summary: each allocation with the traffic attributed to it (a
    /// record goes to the allocation that held its address at its time), sorted by traffic.
    /// The records' times are on the pool's clock (the times its callers gave); `ns_per_tick`
    /// turns that clock's lifetimes into nanoseconds.
    pub fn attribute(
        &self,
        traffic: &mut [Traffic],
        ns_per_tick: f64,
    ) -> (Vec<AllocationRow>, Counts, Counts) {
        let mut all: Vec<&Record> = self.records.iter().collect();
        all.sort_by_key(|r| r.born_ns);
        let mut counts = vec![Counts::default(); all.len()];
        let mut total = Counts::default();
        let mut unattributed = Counts::default();
        traffic.sort_by_key(|t| t.start_ns);
        // Sweep time: births and deaths up to a record's time, then find its address.
        let mut deaths: Vec<(u64, usize)> = all
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.died_ns.map(|d| (d, i)))
            .collect();
        deaths.sort_unstable();
        let (mut next_birth, mut next_death) = (0, 0);
        let mut at: BTreeMap<u64, usize> = BTreeMap::new();
        for t in traffic.iter() {
            while next_death < deaths.len() && deaths[next_death].0 <= t.start_ns {
                let i = deaths[next_death].1;
                if at.get(&all[i].base) == Some(&i) {
                    at.remove(&all[i].base);
                }
                next_death += 1;
            }
            while next_birth < all.len() && all[next_birth].born_ns <= t.start_ns {
                let r = all[next_birth];
                if r.died_ns.is_none_or(|d| d > t.start_ns) {
                    at.insert(r.base, next_birth);
                }
                next_birth += 1;
            }
            total.add(t.kind, t.value);
            match at.range(..=t.address).next_back() {
                Some((&base, &i)) if t.address - base < all[i].bytes.max(1) => {
                    counts[i].add(t.kind, t.value)
                }
                _ => unattributed.add(t.kind, t.value),
            }
        }
        let mut rows: Vec<AllocationRow> = all
            .iter()
            .zip(counts)
            .map(|(r, counts)| AllocationRow {
                id: r.id,
                bytes: r.bytes,
                origin: r.origin,
                caller: r.caller.clone(),
                lifetime_ns: r
                    .died_ns
                    .map(|d| (d.saturating_sub(r.born_ns) as f64 * ns_per_tick) as u64),
                split: r.split,
                counts,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.counts
                .bytes_moved()
                .cmp(&a.counts.bytes_moved())
                .then(b.counts.faults().cmp(&a.counts.faults()))
                .then(a.id.cmp(&b.id))
        });
        (rows, total, unattributed)
    }

    /// The pool's part of the report.
    pub fn summary(&self) -> PoolSummary {
        PoolSummary {
            enabled: self.enabled,
            cap_bytes: (self.cap != u64::MAX).then_some(self.cap),
            counters: self.counters,
            live_allocations: self.live_count,
            live_bytes: self.live_bytes,
            tiers: self.tiers.as_ref().map(Tiers::summary),
        }
    }

    fn insert(
        &mut self,
        base: u64,
        bytes: u64,
        origin: Origin,
        now_ns: u64,
        caller: Option<String>,
        mapped: bool,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        self.live_bytes += bytes;
        // Slab objects share their blocks: never split.
        let split = match &mut self.tiers {
            Some(tiers) if mapped => tiers.split(bytes),
            _ => None,
        };
        self.counters.peak_live_bytes = self.counters.peak_live_bytes.max(self.live_bytes);
        let index = self.records.push(Record {
            id,
            base,
            bytes,
            origin,
            born_ns: now_ns,
            died_ns: None,
            caller,
            split,
        });
        self.live_count += 1;
        if !mapped {
            return;
        }
        if let Some(stale) = self.live.insert(base, index) {
            // The driver reused an address the pool thought live: it was freed behind the
            // pool's back (a free it did not see); close the old record.
            self.close_record(stale, now_ns);
        }
    }

    /// The live allocation starting at `base`.
    fn live_at(&self, base: u64) -> Option<&Record> {
        self.live.get(&base).map(|&i| self.records.get(i))
    }

    fn close(&mut self, base: u64, now_ns: u64) {
        if let Some(i) = self.live.remove(&base) {
            self.close_record(i, now_ns);
        }
    }

    fn close_record(&mut self, index: u32, now_ns: u64) {
        let r = self.records.get_mut(index);
        self.live_bytes -= r.bytes;
        self.live_count -= 1;
        r.died_ns = Some(now_ns);
        if let (Some(split), Some(tiers)) = (r.split, &mut self.tiers) {
            tiers.release(split);
        }
    }

    /// With tiered placement, where the live allocation starting at `base` lives (`None`: it
    /// migrates, or no live allocation starts there).
    pub fn split_of(&self, base: u64) -> Option<Split> {
        self.live_at(base).and_then(|r| r.split)
    }

    /// Count `ns` spent applying an allocation's split.
    pub fn add_placing_ns(&mut self, ns: u64) {
        if let Some(tiers) = &mut self.tiers {
            tiers.add_placing_ns(ns);
        }
    }

    /// The segment to reserve for room for `bytes`: twice what is reserved or pending (at least
    /// the first size and the request), less at the cap; `None` when the cap leaves no room.
    fn plan_growth(&mut self, bytes: u64) -> Option<Growth> {
        let need = if bytes <= PLAIN_SMALL_MAX {
            VABLOCK_BYTES
        } else {
            bytes.next_multiple_of(VABLOCK_BYTES)
        };
        let reserved = self.counters.reserved_bytes + self.pending_bytes;
        // One block more than the segment: the driver's address need not be block aligned.
        let room = self
            .cap
            .saturating_sub(reserved)
            .saturating_sub(VABLOCK_BYTES);
        let room = room - room % VABLOCK_BYTES;
        if room < need {
            return None;
        }
        let want = self.first_bytes.max(reserved).max(need).min(room);
        let bytes = want + VABLOCK_BYTES;
        self.pending_bytes += bytes;
        Some(Growth { bytes })
    }

    /// Take the driver's answer to a [`Growth`]: the reservation's first byte, or its error.
    /// `true` when the arena grew.
    pub fn finish_growth(&mut self, growth: Growth, reserved: Result<u64, i32>) -> bool {
        self.pending_bytes -= growth.bytes;
        let raw = match reserved {
            Ok(raw) => raw,
            Err(code) => {
                tracing::warn!(
                    bytes = growth.bytes,
                    code,
                    "the driver refused to grow the arena"
                );
                return false;
            }
        };
        let want = growth.bytes - VABLOCK_BYTES;
        let base = raw.next_multiple_of(VABLOCK_BYTES);
        let blocks = (want / VABLOCK_BYTES) as usize;
        let added = match &mut self.resolver {
            None => Resolver::new(ResolverConfig::new(base, blocks)).map(|r| {
                self.resolver = Some(r);
            }),
            Some(r) => r.add_segment(base, blocks),
        };
        if let Err(e) = added {
            tracing::error!(error = %e, "a reservation the resolver cannot take");
            return false;
        }
        self.counters.reservations += 1;
        self.counters.reserved_bytes += growth.bytes;
        tracing::info!(
            base = format_args!("{base:#x}"),
            bytes = want,
            reserved = self.counters.reserved_bytes,
            "the arena reserved a segment"
        );
        true
    }
}
