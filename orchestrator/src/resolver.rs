//! The resolver: turns warp requests into chunks and back, against the arena's segments.
//!
//! The arena is one or more segments (contiguous reservations, the `segment` module): the first is
//! made with the resolver, later ones are added as the arena grows ([`Resolver::add_segment`]). Each
//! segment has a tier (the `placement` module); an allocation is placed in the first segment with
//! room in the order its tier asks them (reservation order where no segment has a tier); a free
//! goes to the segment its address lies in, and an address in no segment is an invalid handle. Every request gets a defined
//! status; counters are kept here, over all segments.
//!
//! Invariants ([`Resolver::check_invariants`]): each segment's own (see the `segment` module), and
//! no two segments overlap; every segment has exactly one tier.

use ortree::VABLOCK_BYTES;
use thiserror::Error;
use translator::{
    Arrangement, CACHE_GENERATIONS_START, Geometry, GeometryConfig, Handle, HandleKind,
    LayoutError, SizeClass, SlotOrder, WARP_LANES, lane_handles,
};

use crate::placement::{PlacementRule, Tier};
use crate::records::{CONTIGUOUS_LAYOUT, LaneStatus, Op, ReplyRecord, RequestRecord, Status};
use crate::segment::{PLAIN_SMALL_MAX, Segment};

/// The default first small space is at most this many VABlocks (1 GiB); it grows beyond as small
/// chunks need room.
const MAX_DEFAULT_SMALL_BLOCKS: usize = 512;

/// Default share of the arena's blocks past which it should grow ahead of need.
pub const GROWTH_MARK: f64 = 0.75;

/// Called from the resolving thread when the arena should grow: an allocation found no room, or
/// one took the arena past [`GROWTH_MARK`] of its blocks. It must be cheap and never block (the
/// service thread calls it).
pub type GrowthSignal = std::sync::Arc<dyn Fn() + Send + Sync>;

/// How the resolver is set up.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    /// Address of the arena's first byte (2 MiB aligned, not 0).
    pub arena_base: u64,
    /// VABlocks in the arena.
    pub arena_blocks: usize,
    /// VABlocks at the arena's start given to the small space at first. It takes further free
    /// blocks as small chunks need them and gives empty ones back when any allocation finds no
    /// room, so this sets where small chunks start, not how many there can be.
    pub small_blocks: usize,
    /// Class thresholds and per-lane limit.
    pub geometry: GeometryConfig,
    /// Slot order of arranged chunks.
    pub order: SlotOrder,
    /// Most freed chunks held back from reuse (0: reuse at once).
    pub quarantine_chunks: usize,
    /// Most bytes held back from reuse.
    pub quarantine_bytes: u64,
    /// Keep small runs out of the quarantine for chunks of the same length (up to an eighth of
    /// the small space), which then skip the tree search; off: every run goes back to the tree
    /// and placement is strictly leftmost-first.
    pub recycle_small: bool,
    /// The share of the arena's blocks past which it should grow ahead of need (default
    /// [`GROWTH_MARK`]).
    pub growth_mark: f64,
    /// The tier of the segment this configuration makes (the first one for [`Resolver::new`]).
    pub tier: Tier,
    /// Which tier each allocation asks first (matters only where segments have tiers).
    pub placement: PlacementRule,
}

impl ResolverConfig {
    /// An arena at `arena_base` of `arena_blocks` VABlocks, a sixteenth of them for the first
    /// small space (at least one VABlock, at most 1 GiB), default thresholds, the pattern slot
    /// order.
    pub fn new(arena_base: u64, arena_blocks: usize) -> Self {
        Self {
            arena_base,
            arena_blocks,
            small_blocks: (arena_blocks / 16).clamp(1, MAX_DEFAULT_SMALL_BLOCKS),
            geometry: GeometryConfig::default(),
            order: SlotOrder::Pattern,
            quarantine_chunks: 1024,
            quarantine_bytes: (arena_blocks as u64 * VABLOCK_BYTES / 64).max(8 << 20),
            recycle_small: true,
            growth_mark: GROWTH_MARK,
            tier: Tier::Any,
            placement: PlacementRule::default(),
        }
    }
}

/// Why a resolver could not be made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ResolverError {
    /// The configuration is inconsistent.
    #[error("bad resolver configuration: {0}")]
    BadConfig(&'static str),
}

/// Counters kept by the resolver (host-side and device requests alike).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolverCounters {
    /// Requests by [`Status`] code.
    pub by_status: [u64; Status::COUNT],
    /// Per-lane free outcomes by [`LaneStatus`] code.
    pub by_lane_status: [u64; LaneStatus::ALL.len()],
    /// Chunks allocated, by class (small, portion, large).
    pub chunks_by_class: [u64; 3],
    /// Bytes asked for by lanes, by class.
    pub bytes_by_class: [u64; 3],
    /// Lane objects freed.
    pub lanes_freed: u64,
}

/// A free the resolver refused, as `Resolver::last_bad_frees` (and `Runtime::last_bad_frees`) keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadFree {
    /// Its rank among all the bad frees the resolver judged (1 = the first).
    pub number: u64,
    /// The handle given (for a free by address, the handle of the object starting there, or
    /// a plain handle of the address when none does).
    pub handle: Handle,
    /// Why it was refused.
    pub outcome: LaneStatus,
}

/// Bad frees `Resolver::last_bad_frees` keeps.
pub const KEPT_BAD_FREES: usize = 64;

/// A successful allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The chunk's geometry (`None` when every lane asked 0: no chunk).
    pub geometry: Option<Geometry>,
    /// The chunk's first byte (0 without a chunk).
    pub chunk_base: u64,
    /// How the lanes' objects are laid out: as asked, or contiguous for a packed chunk (also
    /// when an arranged request's lanes diverged too far to be arranged).
    pub arrangement: Arrangement,
    /// Each lane's handle (null for lanes that asked 0).
    pub handles: [Handle; WARP_LANES],
}

/// A chunk as a reply describes it.
struct Placed {
    /// `None` when every lane asked 0.
    geometry: Option<Geometry>,
    chunk_base: u64,
    /// How the lanes' objects are laid out (an arranged request whose lanes diverge is packed).
    arrangement: Arrangement,
    /// Each lane's generation (0 for lanes that asked 0).
    generations: [u8; WARP_LANES],
}

/// The allocator state behind the service thread.
pub struct Resolver {
    config: ResolverConfig,
    /// The arena's segments, in the order they were reserved (and, within a tier, are asked for
    /// room).
    segments: Vec<Segment>,
    /// Each segment's tier, by index.
    tiers: Vec<Tier>,
    counters: ResolverCounters,
    /// An allocation found no room since [`Resolver::take_out_of_memory`] last looked.
    out_of_memory_seen: bool,
    /// The last [`KEPT_BAD_FREES`] bad frees, oldest first.
    bad_frees: std::collections::VecDeque<BadFree>,
    bad_free_count: u64,
    /// Who wants to know that the arena should grow ([`Resolver::on_growth_wanted`]).
    growth_signal: Option<GrowthSignal>,
}

impl Resolver {
    /// A resolver over one segment with every byte free.
    pub fn new(config: ResolverConfig) -> Result<Self, ResolverError> {
        Ok(Self {
            segments: vec![Segment::new(&config)?],
            tiers: vec![config.tier],
            config,
            counters: ResolverCounters::default(),
            out_of_memory_seen: false,
            bad_frees: std::collections::VecDeque::with_capacity(KEPT_BAD_FREES),
            bad_free_count: 0,
            growth_signal: None,
        })
    }

    /// Add a segment of `blocks` VABlocks at `base` (2 MiB aligned, overlapping no segment), set
    /// up like the first in everything but its place and size: a sixteenth of it for small
    /// chunks (at most 1 GiB), and every other setting the first segment's, its tier included.
    pub fn add_segment(&mut self, base: u64, blocks: usize) -> Result<(), ResolverError> {
        self.add_segment_in(base, blocks, self.config.tier)
    }

    /// [`Resolver::add_segment`] in tier `tier` (the memory the caller advised it to live in).
    pub fn add_segment_in(
        &mut self,
        base: u64,
        blocks: usize,
        tier: Tier,
    ) -> Result<(), ResolverError> {
        let end = base.saturating_add(blocks as u64 * VABLOCK_BYTES);
        if self.segments.iter().any(|s| {
            let (start, bytes) = s.range();
            base < start + bytes && start < end
        }) {
            return Err(ResolverError::BadConfig(
                "a new segment overlaps an existing one",
            ));
        }
        // Struct update: a setting added to the configuration is carried over without a line here.
        let config = ResolverConfig {
            arena_base: base,
            arena_blocks: blocks,
            small_blocks: ResolverConfig::new(base, blocks).small_blocks,
            tier,
            ..self.config.clone()
        };
        self.segments.push(Segment::new(&config)?);
        self.tiers.push(tier);
        tracing::info!(
            base = format_args!("{base:#x}"),
            blocks,
            ?tier,
            segments = self.segments.len(),
            "arena segment added"
        );
        Ok(())
    }

    /// The first segment's configuration (thresholds, slot order, quarantine bounds).
    pub fn config(&self) -> &ResolverConfig {
        &self.config
    }

    /// The counters so far.
    pub fn counters(&self) -> &ResolverCounters {
        &self.counters
    }

    /// The last bad frees (at most [`KEPT_BAD_FREES`], oldest first): what a program that posted
    /// its frees without waiting reads to learn which failed. Each is also counted in
    /// [`ResolverCounters::by_lane_status`].
    pub fn last_bad_frees(&self) -> Vec<BadFree> {
        self.bad_frees.iter().copied().collect()
    }

    /// Segments: (first byte, bytes) of each.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        self.segments.iter().map(Segment::range).collect()
    }

    /// VABlocks taken (small spaces count whole) and in all, over every segment.
    pub fn blocks_used(&self) -> (usize, usize) {
        self.segments.iter().fold((0, 0), |(u, t), s| {
            let (used, total) = s.blocks_used();
            (u + used, t + total)
        })
    }

    /// Call `signal` whenever the arena should grow (see [`GrowthSignal`]).
    pub fn on_growth_wanted(&mut self, signal: GrowthSignal) {
        self.growth_signal = Some(signal);
    }

    /// Whether more than the growth mark ([`ResolverConfig::growth_mark`]) of the arena's
    /// blocks are taken.
    pub fn over_growth_mark(&self) -> bool {
        let (used, total) = self.blocks_used();
        used as f64 > self.config.growth_mark * total as f64
    }

    /// Whether an allocation found no room since the last call; clears the flag.
    pub fn take_out_of_memory(&mut self) -> bool {
        std::mem::take(&mut self.out_of_memory_seen)
    }

    /// Bytes of the live chunks holding lane objects, over every segment: the host's share of
    /// the footprint (rounding and packing included; the device caches' slabs not).
    pub fn object_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::object_bytes).sum()
    }

    /// Live chunks.
    pub fn live_chunks(&self) -> usize {
        self.segments.iter().map(Segment::live_chunks).sum()
    }

    /// The live chunks, one line each (base, size, cache class, lanes, live lanes and their
    /// handles): for diagnosing what a program left allocated.
    pub fn describe_live_chunks(&self) -> Vec<String> {
        self.segments
            .iter()
            .flat_map(Segment::describe_live_chunks)
            .collect()
    }

    /// Freed chunks waiting in the quarantine.
    pub fn quarantined_chunks(&self) -> usize {
        self.segments.iter().map(Segment::quarantined_chunks).sum()
    }

    /// Give every quarantined chunk back to its structure now.
    pub fn drain_quarantine(&mut self) {
        self.segments.iter_mut().for_each(Segment::drain_quarantine);
    }

    /// Whether nothing is allocated or quarantined.
    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(Segment::is_empty)
    }

    /// Whether `address` lies in one of the arena's segments.
    pub fn in_arena(&self, address: u64) -> bool {
        self.segment_of(address).is_some()
    }

    fn segment_of(&self, address: u64) -> Option<&Segment> {
        self.segments.iter().find(|s| s.contains(address))
    }

    /// Answer one request. Never panics on any request content.
    pub fn resolve(&mut self, request: &RequestRecord) -> ReplyRecord {
        let reply = self.resolve_inner(request);
        self.counters.by_status[reply.status as usize] += 1;
        if reply.status != Status::Ok as u32 {
            // Per request at debug level: a kernel with a bug can send millions; the service
            // thread warns with a summary instead.
            tracing::debug!(
                warp = request.warp,
                op = request.op,
                status = ?Status::from_code(reply.status),
                failed_lanes = format_args!("{:#010x}", reply.failed_lanes),
                "request not (fully) served"
            );
        }
        reply
    }

    /// Resolve `request` again after its first answer, `previous`, was not taken by the warp
    /// (nothing was allocated or freed for it: `OutOfMemory`); the counters count the request
    /// once, by its new answer.
    pub fn resolve_again(
        &mut self,
        request: &RequestRecord,
        previous: &ReplyRecord,
    ) -> ReplyRecord {
        debug_assert_eq!(previous.status, Status::OutOfMemory as u32);
        self.counters.by_status[previous.status as usize] -= 1;
        self.resolve(request)
    }

    fn resolve_inner(&mut self, request: &RequestRecord) -> ReplyRecord {
        let Some(op) = Op::from_code(request.op) else {
            return ReplyRecord::status(Status::UnknownOp);
        };
        if request.lane_mask == 0 {
            return ReplyRecord::status(Status::EmptyMask);
        }
        // Inactive lanes read as 0 (a copy, made without a branch per lane, only when some
        // lane is inactive).
        let masked: [u64; WARP_LANES];
        let words = if request.lane_mask == u32::MAX {
            &request.words
        } else {
            masked = std::array::from_fn(|lane| {
                request.words[lane] & 0u64.wrapping_sub(u64::from(request.lane_mask >> lane & 1))
            });
            &masked
        };
        match op {
            Op::Alloc | Op::AllocContiguous => {
                let arrangement = if op == Op::Alloc {
                    Arrangement::Arranged(self.config.order)
                } else {
                    Arrangement::Contiguous
                };
                match self.place_chunk(words, arrangement) {
                    Ok(a) => {
                        let mut reply = ReplyRecord::status(Status::Ok);
                        if let Some(g) = a.geometry {
                            reply.size_class = g.class as u32;
                            reply.tile_log2 = g.tile_log2;
                            reply.lane_span = g.lane_span;
                        }
                        reply.layout = match a.arrangement {
                            Arrangement::Arranged(order) => order.code(),
                            Arrangement::Contiguous => CONTIGUOUS_LAYOUT,
                        };
                        reply.chunk_base = a.chunk_base;
                        reply.lane_status = a.generations;
                        reply
                    }
                    Err(status) => ReplyRecord::status(status),
                }
            }
            Op::Free | Op::FreePointer => {
                let (mut outcomes, failed) = if op == Op::Free {
                    self.judge_frees(bytemuck::cast_ref(words))
                } else {
                    self.judge_pointer_frees(words)
                };
                // A warp's free reaches the host for an object of a cache slab only when its
                // caches found no slab holding the block, and a live cache object's block is
                // always held: the object was not live. A second free at an object's start (the
                // host, unlike the device, cannot free a cache object; that answer is for host
                // calls).
                for lane in set_lanes(failed) {
                    if outcomes[lane] == LaneStatus::CachedObject {
                        outcomes[lane] = self.declined_cache_free(words[lane], op);
                    }
                }
                let mut reply = ReplyRecord::status(match failed {
                    0 => Status::Ok,
                    _ => Status::Partial,
                });
                reply.lane_status = outcomes.map(|outcome| outcome as u8);
                reply.failed_lanes = failed;
                reply
            }
        }
    }

    /// What a warp's free of `word` (a handle, or an address for `FreePointer`) into a cache
    /// slab that its caches declined is: a second free at an object's start of the slab's
    /// class, an interior pointer elsewhere, an invalid handle when arranged (no cache object
    /// is).
    fn declined_cache_free(&self, word: u64, op: Op) -> LaneStatus {
        let handle = Handle(word);
        if op == Op::Free && handle.kind() != HandleKind::Plain {
            return LaneStatus::InvalidHandle;
        }
        let at = Handle(handle.address());
        match self.object_capacity(at) {
            Ok(_) => LaneStatus::DoubleFree,
            Err(status) => status,
        }
    }

    /// Allocate a chunk for these lane sizes (0 = no object), asked to be laid out as
    /// `arrangement`: the size-class table's chunk in that layout, or a packed one when the
    /// lanes diverge too far ([`Geometry::for_request`]; [`Allocation::arrangement`] says which).
    /// `Err` is `SizeOverLimit` or `OutOfMemory`, and then nothing was allocated.
    pub fn alloc(
        &mut self,
        sizes: &[u64; WARP_LANES],
        arrangement: Arrangement,
    ) -> Result<Allocation, Status> {
        let placed = self.place_chunk(sizes, arrangement)?;
        let handles = match placed.geometry {
            Some(g) => lane_handles(
                &g,
                placed.chunk_base,
                sizes,
                placed.arrangement,
                &placed.generations,
            )
            .expect("arena addresses fit handles"),
            None => [Handle::NULL; WARP_LANES],
        };
        Ok(Allocation {
            geometry: placed.geometry,
            chunk_base: placed.chunk_base,
            arrangement: placed.arrangement,
            handles,
        })
    }

    /// [`Resolver::alloc`] as far as a reply needs: the lanes' generations, not their handles
    /// (the device builds those).
    fn place_chunk(
        &mut self,
        sizes: &[u64; WARP_LANES],
        arrangement: Arrangement,
    ) -> Result<Placed, Status> {
        let (geometry, arrangement) =
            match Geometry::for_request(sizes, &self.config.geometry, arrangement) {
                Ok(Some(placement)) => placement,
                Ok(None) => {
                    return Ok(Placed {
                        geometry: None,
                        chunk_base: 0,
                        arrangement,
                        generations: [0; WARP_LANES],
                    });
                }
                Err(LayoutError::SizeOverLimit { .. }) => return Err(Status::SizeOverLimit),
                Err(e) => unreachable!("geometry fails only over the limit: {e}"),
            };
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let placed = self.first_with_room(largest, |s| s.alloc(geometry, sizes, arrangement))?;
        let Some((chunk_base, generations)) = placed else {
            self.out_of_memory_seen = true;
            if let Some(signal) = &self.growth_signal {
                signal();
            }
            return Err(Status::OutOfMemory);
        };
        let class = geometry.class as usize;
        self.counters.chunks_by_class[class] += 1;
        // Each size is at most the lane limit (1 TiB at most): no overflow.
        self.counters.bytes_by_class[class] += sizes.iter().sum::<u64>();
        // Every class takes blocks: small chunks grow the small space by whole blocks.
        if let Some(signal) = &self.growth_signal
            && self.over_growth_mark()
        {
            signal();
        }
        Ok(Placed {
            geometry: Some(geometry),
            chunk_base,
            arrangement,
            generations,
        })
    }

    /// One plain object of `bytes` for host code with `malloc`'s contract (what wrapped
    /// `cudaMallocManaged` calls get): up to [`PLAIN_SMALL_MAX`] packed in the small space,
    /// 256 B aligned; above, starting on a VABlock with no other object in its blocks. Its
    /// address, freed with [`Resolver::free_pointers`]. `Err` is `SizeOverLimit` (0 bytes, or
    /// over 1 TiB) or `OutOfMemory` (the arena is asked to grow).
    pub fn alloc_plain(&mut self, bytes: u64) -> Result<u64, Status> {
        if bytes == 0 || bytes > translator::geometry::MAX_LANE_BYTES_LIMIT {
            return Err(Status::SizeOverLimit);
        }
        let placed = self
            .first_with_room(bytes, |s| {
                s.alloc_plain(bytes).map_err(|_| Status::OutOfMemory)
            })
            .expect("only room is looked for");
        let Some(base) = placed else {
            self.out_of_memory_seen = true;
            if let Some(signal) = &self.growth_signal {
                signal();
            }
            return Err(Status::OutOfMemory);
        };
        let class = usize::from(bytes > PLAIN_SMALL_MAX) * (SizeClass::Large as usize);
        self.counters.chunks_by_class[class] += 1;
        self.counters.bytes_by_class[class] += bytes;
        if let Some(signal) = &self.growth_signal
            && self.over_growth_mark()
        {
            signal();
        }
        Ok(base)
    }

    /// A slab of `blocks` VABlocks for the device cache of `class`, in the first segment with
    /// room (the arena is asked to grow when none has); its base. The slab is a live chunk until
    /// [`Resolver::give_slab`]: host frees of its objects answer [`LaneStatus::CachedObject`].
    pub fn take_slab(&mut self, blocks: u64, class: usize) -> Option<u64> {
        let object = crate::caches::geometry::class_bytes(class);
        let base = self
            .first_with_room(object, |s| {
                s.alloc_slab(blocks, class).map_err(|_| Status::OutOfMemory)
            })
            .expect("only room is looked for");
        let wanted_growth = base.is_none() || self.over_growth_mark();
        if wanted_growth && let Some(signal) = &self.growth_signal {
            signal();
        }
        base
    }

    /// Ask the segments in the order the placement rule gives an allocation whose largest object
    /// has `largest` bytes, until `place` finds room in one: `Ok(None)` when none had room
    /// (`place` answered `OutOfMemory` in every segment); any other error is returned at once.
    fn first_with_room<T>(
        &mut self,
        largest: u64,
        mut place: impl FnMut(&mut Segment) -> Result<T, Status>,
    ) -> Result<Option<T>, Status> {
        let wanted = self.config.placement.tier_for(largest);
        for tier in PlacementRule::asking_order(wanted) {
            for (segment, _) in self
                .segments
                .iter_mut()
                .zip(&self.tiers)
                .filter(|(_, t)| **t == tier)
            {
                match place(segment) {
                    Ok(placed) => return Ok(Some(placed)),
                    Err(Status::OutOfMemory) => continue,
                    Err(other) => return Err(other),
                }
            }
        }
        Ok(None)
    }

    /// The tier of the segment `address` lies in (`None` outside the arena).
    pub fn tier_of(&self, address: u64) -> Option<Tier> {
        self.segments
            .iter()
            .zip(&self.tiers)
            .find(|(s, _)| s.contains(address))
            .map(|(_, t)| *t)
    }

    /// Bytes of live lane objects in each tier: (device, host, untiered).
    pub fn object_bytes_by_tier(&self) -> (u64, u64, u64) {
        self.segments
            .iter()
            .zip(&self.tiers)
            .fold((0, 0, 0), |(d, h, a), (s, t)| match t {
                Tier::Device => (d + s.object_bytes(), h, a),
                Tier::Host => (d, h + s.object_bytes(), a),
                Tier::Any => (d, h, a + s.object_bytes()),
            })
    }

    /// Give back the cache slab at `base`; `false` if no segment holds one there (a bug of the
    /// caller, logged).
    pub fn give_slab(&mut self, base: u64) -> bool {
        let given = self
            .segments
            .iter_mut()
            .any(|s| s.contains(base) && s.free_slab(base));
        if !given {
            tracing::error!(
                base = format_args!("{base:#x}"),
                "no cache slab to give back there"
            );
        }
        given
    }

    /// The base address of the live chunk holding `address`, if any.
    pub fn chunk_containing(&self, address: u64) -> Option<u64> {
        self.segment_of(address)?.chunk_containing(address)
    }

    /// The base of the device caches' run-class slab holding `handle`'s address and the slot it
    /// starts, when it starts one (the object's span is in the caches' device memory).
    pub fn run_slot(&self, handle: Handle) -> Option<(u64, u64)> {
        self.segment_of(handle.address())?
            .run_slot(handle.address())
    }

    /// How many bytes from its start the live object of `handle` may use: the lane's span in a
    /// portion or large chunk, else up to the next object's start (or the chunk's end); for a
    /// run-class object at most the class's largest (the device knows its span: [`Resolver::run_slot`]).
    /// `Err` tells why the handle is not a live object, as a free of it would.
    pub fn object_capacity(&self, handle: Handle) -> Result<u64, LaneStatus> {
        match self.segment_of(handle.address()) {
            Some(segment) if !handle.is_null() => segment.object_capacity(handle),
            _ => Err(LaneStatus::InvalidHandle),
        }
    }

    /// Free one lane's object. A null handle is a no-op (`Ok`).
    pub fn free(&mut self, handle: Handle) -> LaneStatus {
        let mut handles = [Handle::NULL; WARP_LANES];
        handles[0] = handle;
        self.free_lanes(&handles)[0]
    }

    /// Free each lane's object: each segment judges the lanes whose address it holds; a lane
    /// whose address lies in no segment is an invalid handle.
    pub fn free_lanes(&mut self, handles: &[Handle; WARP_LANES]) -> [LaneStatus; WARP_LANES] {
        self.judge_frees(handles).0
    }

    /// Free each lane's object by the address of its first byte (0 = none), as `free(void*)`
    /// does: an address where a lane object starts is a free of that object's handle, judged as
    /// any free (so a second free of it is a double free, until a newer object starts there:
    /// an address, unlike a handle, carries no generation); an address inside an object is an
    /// interior pointer, and one outside the arena an invalid handle.
    pub fn free_pointers(&mut self, addresses: &[u64; WARP_LANES]) -> [LaneStatus; WARP_LANES] {
        self.judge_pointer_frees(addresses).0
    }

    /// [`Resolver::free_pointers`], with the lanes that failed as a mask.
    fn judge_pointer_frees(
        &mut self,
        addresses: &[u64; WARP_LANES],
    ) -> ([LaneStatus; WARP_LANES], u32) {
        let mut handles = [Handle::NULL; WARP_LANES];
        let mut foreign = 0u32;
        for lane in set_lanes(lane_mask(|l| addresses[l] != 0)) {
            match self.segment_of(addresses[lane]) {
                Some(segment) => handles[lane] = segment.handle_at(addresses[lane]),
                None => foreign |= 1 << lane,
            }
        }
        let (mut outcomes, failed) = self.judge_frees(&handles);
        for lane in set_lanes(foreign) {
            outcomes[lane] = LaneStatus::InvalidHandle;
        }
        self.count_frees(bytemuck::cast_ref(addresses), 0, &outcomes, foreign);
        (outcomes, failed | foreign)
    }

    /// [`Resolver::free_lanes`], with the lanes that failed as a mask.
    fn judge_frees(&mut self, handles: &[Handle; WARP_LANES]) -> ([LaneStatus; WARP_LANES], u32) {
        let mut outcomes = [LaneStatus::Ok; WARP_LANES];
        // The common case first: a warp frees every lane of one chunk, each with its handle.
        let Some(&first) = handles.iter().find(|h| !h.is_null()) else {
            return (outcomes, 0);
        };
        let whole = self
            .segments
            .iter_mut()
            .find(|s| s.contains(first.address()))
            .and_then(|s| s.free_whole_chunk(first, handles));
        if let Some(freed) = whole {
            self.count_frees(handles, freed, &outcomes, 0);
            return (outcomes, 0);
        }
        let given = lane_mask(|l| !handles[l].is_null());
        let mut pending = given;
        let mut failed = 0u32;
        for segment in &mut self.segments {
            if pending == 0 {
                break;
            }
            let mine = pending & lane_mask(|l| segment.contains(handles[l].address()));
            if mine != 0 {
                failed |= segment.free_lanes(handles, mine, &mut outcomes);
                pending &= !mine;
            }
        }
        for lane in set_lanes(pending) {
            outcomes[lane] = LaneStatus::InvalidHandle;
        }
        failed |= pending;
        // A handle with a device cache's generation where no cache slab is now: its slab went
        // back with every object freed, so this is a second free, not an unknown handle.
        for lane in set_lanes(failed) {
            let h = handles[lane];
            if outcomes[lane] == LaneStatus::InvalidHandle
                && h.generation() >= CACHE_GENERATIONS_START
                && self.segment_of(h.address()).is_some()
            {
                outcomes[lane] = LaneStatus::DoubleFree;
            }
        }
        self.count_frees(handles, given & !failed, &outcomes, failed);
        (outcomes, failed)
    }

    /// Keep a bad free in the list of the last ones, and log it (the 1st, 2nd, 4th, 8th, ...:
    /// a program that frees badly in a loop does not flood the log).
    fn keep_bad_free(&mut self, handle: Handle, outcome: LaneStatus) {
        self.bad_free_count += 1;
        let number = self.bad_free_count;
        if self.bad_frees.len() == KEPT_BAD_FREES {
            self.bad_frees.pop_front();
        }
        self.bad_frees.push_back(BadFree {
            number,
            handle,
            outcome,
        });
        if number.is_power_of_two() {
            tracing::warn!(
                number,
                handle = format_args!("{:#x}", handle.0),
                ?outcome,
                "bad free (every one is counted; the last {KEPT_BAD_FREES} are kept, see last_bad_frees)"
            );
        }
    }

    /// Count the lanes `freed` and those that `failed` (with their outcomes), and trace each.
    fn count_frees(
        &mut self,
        handles: &[Handle; WARP_LANES],
        freed: u32,
        outcomes: &[LaneStatus; WARP_LANES],
        failed: u32,
    ) {
        // Counted in a register: a memory increment per lane would chain through the store.
        let freed_count = u64::from(freed.count_ones());
        self.counters.by_lane_status[LaneStatus::Ok as usize] += freed_count;
        self.counters.lanes_freed += freed_count;
        for lane in set_lanes(failed) {
            self.counters.by_lane_status[outcomes[lane] as usize] += 1;
            self.keep_bad_free(handles[lane], outcomes[lane]);
        }
        if tracing::enabled!(tracing::Level::TRACE) {
            for lane in set_lanes(freed | failed) {
                tracing::trace!(
                    handle = format_args!("{:#x}", handles[lane].0),
                    outcome = ?outcomes[lane],
                    "lane free"
                );
            }
        }
    }

    /// Verify the invariants listed in the module docs.
    pub fn check_invariants(&self) -> Result<(), String> {
        for segment in &self.segments {
            segment.check_invariants()?;
        }
        let mut ranges = self.segments();
        ranges.sort_unstable();
        if ranges.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
            return Err("two segments overlap".into());
        }
        if self.tiers.len() != self.segments.len() {
            return Err(format!(
                "{} tiers for {} segments",
                self.tiers.len(),
                self.segments.len()
            ));
        }
        Ok(())
    }
}

/// The lanes for which `keep` holds, as a bit mask.
pub(crate) fn lane_mask(keep: impl Fn(usize) -> bool) -> u32 {
    (0..WARP_LANES).fold(0, |m, l| m | u32::from(keep(l)) << l)
}

/// The set lanes of `mask`, lowest first.
pub(crate) fn set_lanes(mask: u32) -> SetLanes {
    SetLanes(mask)
}

/// Iterator over the set lanes of a mask, lowest first.
pub(crate) struct SetLanes(u32);

impl Iterator for SetLanes {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let lane = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(lane)
    }
}

impl crate::caches::SlabSource for Resolver {
    fn take_slab(&mut self, blocks: u64, class: usize) -> Option<u64> {
        Resolver::take_slab(self, blocks, class)
    }

    fn give_slab(&mut self, base: u64) {
        Resolver::give_slab(self, base);
    }
}
