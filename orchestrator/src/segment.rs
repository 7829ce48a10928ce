//! One arena segment: a contiguous run of VABlocks with its own allocation structures, chunk
//! table, generations and quarantine. The [`crate::Resolver`] holds one segment per reservation
//! of the arena and asks them in order.
//!
//! The segment is `arena_blocks` VABlocks of 2 MiB from `arena_base`, tracked by the arena
//! `OrTree`, and every block is taken by one of three users: large chunks (runs of blocks),
//! portion blocks (taken by the `PortionPool` on demand, given back when empty) and the small
//! space. The small space is a set of whole blocks over one `OrTree` of 256 B units spanning the
//! segment, in which the units of blocks outside the small space are held allocated. It starts
//! with the first `small_blocks` blocks, takes as many consecutive free blocks as a small or
//! packed chunk needs whenever it finds no run (a packed chunk of a block or more takes fresh
//! blocks first; see [`Segment::place_small`]), and gives its empty blocks back when an
//! allocation of any class finds no room, so a block
//! serves whichever class needs it and no allocation fails while any placement exists. A small
//! chunk may cross from one small block into the next; each block counts the small units in use
//! in it, and only a block whose count is zero leaves the small space.
//!
//! Every live chunk is recorded by its base address with the handles its lanes were given, so a
//! free is checked against exactly what was handed out: a handle equal to a live lane's handle is
//! freed; one whose object was freed, or whose address now holds a newer object (its 7-bit
//! generation differs), is a double free, and so is one that points inside a newer portion or
//! large chunk's object exactly where an older object started (a tile start); one that points inside a chunk elsewhere than at a
//! lane's start is an interior pointer; anything else is invalid. Generations count per 256-byte
//! unit of the small space and per page elsewhere, advanced once by each chunk with an object
//! starting there ([`Generations`]), cycling through 1..=63 (64..=127 are the device caches'), so
//! a stale handle passes for a live one only after 63 chunks started objects in its unit
//! (documented limit). An object-start address in no live chunk, in a unit
//! where an object once started, is a double free; any other is invalid.
//!
//! Freed chunks wait in a quarantine (bounded by chunks and bytes, FIFO) before their places go
//! back to the structures, so a just-freed address is not handed out again at once:
//! leftmost-first reuse would otherwise put new objects at a hot address again and again while a
//! delayed warp's stale free is still on its way (on the GPU such frees arrived seconds late). A
//! small chunk's run leaving the quarantine goes to the [`RecycledRuns`], where the next small
//! chunk of the same length takes it without a tree search. An allocation that finds no room
//! drains the quarantine and tries again, and a small one gives the recycled runs back to the
//! tree before it gives up, so neither ever causes an out-of-memory.
//!
//! Invariants ([`Segment::check_invariants`]): the structures' own invariants; no two live or
//! quarantined chunks overlap, and each one's units are allocated in its structure; the owner
//! arrays lead from a chunk's first and last byte to it; the structures hold exactly the live and
//! quarantined chunks and the recycled runs (plus, in the arena tree, the small space's blocks,
//! and in the small tree, the units of other blocks), none of which overlap; each small chunk
//! lies in small blocks, and each block's count of small units in use is right; the chunk table and the generations agree on which blocks are small; every live
//! chunk has a live lane.

use std::collections::{HashMap, VecDeque};

use ortree::{OrTree, OrTreeError, PortionError, PortionPool, VABLOCK_BYTES};
use translator::{
    Arrangement, CACHE_GENERATIONS_START, Geometry, Handle, LEAF_BYTES, SMALL_UNIT_BYTES,
    SizeClass, WARP_LANES, handles_at, lane_offsets,
};

use crate::caches::{CACHED_MAX_BYTES, RUN_CLASS, RUN_SLOT_LOG2, class_bytes};
use crate::chunks::{ChunkTable, Extent};
use crate::generations::Generations;
use crate::records::{LaneStatus, Status};
use crate::recycle::RecycledRuns;
use crate::regions::ArenaRegions;
use crate::resolver::{ResolverConfig, ResolverError, lane_mask, set_lanes};

/// The recycled runs may hold up to this fraction (1/n) of the first small space.
const RECYCLED_SHARE: usize = 8;

/// Packed chunks of at least this many small units (16 KiB) are placed by next fit.
const NEXT_FIT_UNITS: usize = 64;

/// Units of the small tree per VABlock.
const UNITS_PER_BLOCK: usize = (VABLOCK_BYTES / SMALL_UNIT_BYTES) as usize;

/// Where a chunk's memory came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Small { unit: usize, units: usize },
    Portion { block: usize, leaf: u32 },
    Large { block: usize, blocks: usize },
}

#[derive(Clone, Debug)]
struct LiveChunk {
    base: u64,
    bytes: u64,
    place: Place,
    /// Lanes given an object.
    lanes: u32,
    /// Lanes still holding their object.
    live: u32,
    /// Bytes of each lane's object in a portion or large chunk, either layout; 0 in a small
    /// chunk, whose objects are packed.
    lane_span: u64,
    /// What each lane was given (null for lanes that asked 0).
    handles: [Handle; WARP_LANES],
    /// A slab of a device cache (its class): its objects are the device's to free.
    cache_class: Option<u8>,
}

impl Default for LiveChunk {
    fn default() -> Self {
        Self {
            base: 0,
            bytes: 0,
            place: Place::Small { unit: 0, units: 0 },
            lanes: 0,
            live: 0,
            lane_span: 0,
            handles: [Handle::NULL; WARP_LANES],
            cache_class: None,
        }
    }
}

impl Extent for LiveChunk {
    fn base(&self) -> u64 {
        self.base
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Count `units` units from `unit` as taken or given back in `used`, per block they lie in.
fn count_units(used: &mut [u32], unit: usize, units: usize, taken: bool) {
    let mut at = unit;
    let end = unit + units;
    while at < end {
        let block = at / UNITS_PER_BLOCK;
        let here = ((block + 1) * UNITS_PER_BLOCK).min(end) - at;
        if taken {
            used[block] += here as u32;
        } else {
            used[block] -= here as u32;
        }
        at += here;
    }
}

/// Whether `handle`, inside `chunk` at no lane object's start, is the handle of an older object
/// that started exactly there (a second free), rather than an interior pointer. In a portion
/// or large chunk an older object started there when its page started a tile. In a packed
/// chunk, objects start on any 16-byte granule, so an interior pointer made from a live object
/// can land on an older start too: it carries that object's lane and generation, which a stale
/// handle matches only by chance (a pointer free carries neither and stays an interior pointer).
fn is_stale_start(generations: &Generations, chunk: &LiveChunk, handle: Handle) -> bool {
    let address = handle.address();
    if !generations.start_seen(address) {
        return false;
    }
    if chunk.lane_span != 0 {
        return true;
    }
    let covering = chunk
        .handles
        .iter()
        .filter(|h| !h.is_null() && h.address() <= address)
        .max_by_key(|h| h.address());
    handle.generation() != 0
        && !covering
            .is_some_and(|h| h.lane() == handle.lane() && h.generation() == handle.generation())
}

/// A run allocation's result: no room (or a run longer than the tree) is out of memory; any
/// other error means the resolver built a bad request, a bug.
fn run_or_oom(result: Result<usize, OrTreeError>) -> Result<usize, Status> {
    match result {
        Ok(start) => Ok(start),
        Err(OrTreeError::NoSpace { .. } | OrTreeError::RunTooLong { .. }) => {
            Err(Status::OutOfMemory)
        }
        Err(e) => unreachable!("run requests are valid: {e}"),
    }
}

/// The allocator state of one contiguous reservation.
pub(crate) struct Segment {
    config: ResolverConfig,
    arena: OrTree,
    small: OrTree,
    /// Small runs out of the quarantine, kept for chunks of the same length.
    recycled: RecycledRuns,
    pool: PortionPool,
    chunks: ChunkTable<LiveChunk>,
    /// Freed chunks not yet given back: (base, bytes, place), oldest first.
    quarantine: VecDeque<(u64, u64, Place)>,
    quarantined_bytes: u64,
    /// Bytes of the live chunks that hold lane objects (cache slabs are the caches' to count).
    object_bytes: u64,
    generations: Generations,
    /// Per VABlock (address >> 21) that a device cache slab gave back: that slab's base and
    /// class, so a late free of one of its objects' starts is told from a made-up address.
    former_slabs: HashMap<u64, (u64, u8)>,
    /// Per block: units of the small tree held by chunks, the quarantine and recycled runs.
    small_used: Vec<u32>,
    /// Blocks in the small space now.
    small_blocks: usize,
    /// Where the search for the next packed chunk of [`NEXT_FIT_UNITS`] or more starts: just
    /// past the last one placed.
    next_fit: usize,
}

impl Segment {
    /// A segment with every byte free.
    pub(crate) fn new(config: &ResolverConfig) -> Result<Self, ResolverError> {
        let bad = |why| Err(ResolverError::BadConfig(why));
        if config.arena_base == 0 || !config.arena_base.is_multiple_of(VABLOCK_BYTES) {
            return bad("the arena base must be a non-zero multiple of 2 MiB");
        }
        if config.arena_blocks < 2 || config.small_blocks == 0 {
            return bad("the arena needs at least 2 VABlocks and the small space at least 1");
        }
        if config.small_blocks >= config.arena_blocks {
            return bad("the small space must leave VABlocks for portion and large chunks");
        }
        let end = config.arena_blocks as u64 * VABLOCK_BYTES + config.arena_base;
        if end > 1 << translator::ADDRESS_BITS {
            return bad("the arena must end below 2^48");
        }
        let mut arena = OrTree::new(config.arena_blocks).expect("at least 2 blocks");
        arena
            .alloc_at(0, config.small_blocks)
            .expect("a fresh arena is free");
        let small_units = config.small_blocks * UNITS_PER_BLOCK;
        let units = config.arena_blocks * UNITS_PER_BLOCK;
        let mut small = OrTree::new(units).expect("at least one block");
        small.alloc_at(0, units).expect("a fresh tree is free");
        let regions = ArenaRegions::new(
            config.arena_base,
            config.arena_blocks as u64 * VABLOCK_BYTES,
        );
        let mut segment = Self {
            small,
            recycled: RecycledRuns::new(
                // The longest small chunk: every lane at the small class's limit.
                (WARP_LANES as u64 * config.geometry.small_max()).div_ceil(SMALL_UNIT_BYTES)
                    as usize,
                if config.recycle_small {
                    small_units / RECYCLED_SHARE
                } else {
                    0
                },
            ),
            generations: Generations::new(regions.clone()),
            former_slabs: HashMap::new(),
            chunks: ChunkTable::new(regions),
            arena,
            pool: PortionPool::new(),
            quarantine: VecDeque::new(),
            quarantined_bytes: 0,
            object_bytes: 0,
            small_used: vec![0; config.arena_blocks],
            small_blocks: 0,
            next_fit: 0,
            config: config.clone(),
        };
        for block in 0..config.small_blocks {
            segment.join_small(block);
        }
        Ok(segment)
    }

    /// Put `block`, taken in the arena tree, in the small space.
    fn join_small(&mut self, block: usize) {
        self.small
            .free_run(block * UNITS_PER_BLOCK, UNITS_PER_BLOCK)
            .expect("a block outside the small space has its units held");
        self.chunks.set_small(block, true);
        self.generations.set_small(block, true);
        self.small_blocks += 1;
    }

    /// Take `blocks` consecutive free blocks of the arena for the small space (a packed chunk of
    /// several MiB needs them side by side); the first of them, `None` when there were none.
    fn grow_small(&mut self, blocks: usize) -> Option<usize> {
        let first = self.arena.alloc_run(blocks, 1).ok()?;
        for block in first..first + blocks {
            self.join_small(block);
        }
        tracing::debug!(
            first,
            blocks,
            small_blocks = self.small_blocks,
            "small space grew"
        );
        Some(first)
    }

    /// A run of `units` small units at a multiple of `align`: leftmost for short runs, which keep
    /// the small space compact; by next fit from the last long one for runs of
    /// [`NEXT_FIT_UNITS`] or more, whose leftmost search would visit every hole of a small space
    /// fragmented by shorter chunks on each request.
    fn small_run(&mut self, units: usize, align: usize) -> Result<usize, OrTreeError> {
        if units >= NEXT_FIT_UNITS {
            self.small.alloc_run_from(units, align, self.next_fit)
        } else {
            self.small.alloc_run(units, align)
        }
    }

    /// Give every empty block of the small space back to the arena; how many.
    fn shrink_small(&mut self) -> usize {
        let mut given = 0;
        for block in 0..self.config.arena_blocks {
            if !self.chunks.regions().is_small(block) || self.small_used[block] != 0 {
                continue;
            }
            self.small
                .alloc_at(block * UNITS_PER_BLOCK, UNITS_PER_BLOCK)
                .expect("an empty small block has every unit free");
            self.chunks.set_small(block, false);
            self.generations.set_small(block, false);
            self.arena
                .free_run(block, 1)
                .expect("a small block is taken in the arena");
            self.small_blocks -= 1;
            given += 1;
        }
        if given > 0 {
            tracing::debug!(
                given,
                small_blocks = self.small_blocks,
                "small space shrank"
            );
        }
        given
    }

    /// Units of the small tree no chunk can have: the units of blocks outside the small space.
    fn small_reserved_units(&self) -> usize {
        (self.config.arena_blocks - self.small_blocks) * UNITS_PER_BLOCK
    }

    /// Count `units` small units from `unit` as taken (`taken`) or given back, in each block
    /// they lie in.
    fn count_small(&mut self, unit: usize, units: usize, taken: bool) {
        count_units(&mut self.small_used, unit, units, taken);
    }

    /// Whether `address` lies in this segment.
    pub(crate) fn contains(&self, address: u64) -> bool {
        let (start, bytes) = self.range();
        address.wrapping_sub(start) < bytes
    }

    /// The segment's first byte and length.
    pub(crate) fn range(&self) -> (u64, u64) {
        (
            self.config.arena_base,
            self.config.arena_blocks as u64 * VABLOCK_BYTES,
        )
    }

    /// VABlocks taken (the small space counts whole) and in all.
    pub(crate) fn blocks_used(&self) -> (usize, usize) {
        (self.arena.allocated_count(), self.config.arena_blocks)
    }

    /// Bytes of the live chunks that hold lane objects: what the objects take, rounding and
    /// packing included (the footprint), without the device caches' slabs.
    pub(crate) fn object_bytes(&self) -> u64 {
        self.object_bytes
    }

    /// Live chunks.
    pub(crate) fn live_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The live chunks, for diagnosis: what each holds and what of it is still live.
    pub(crate) fn describe_live_chunks(&self) -> Vec<String> {
        self.chunks
            .iter()
            .map(|c| {
                let live: Vec<String> = set_lanes(c.live)
                    .map(|l| format!("{:#x}", c.handles[l].0))
                    .collect();
                format!(
                    "chunk {:#x} of {} bytes, cache class {:?}, lanes {:#010x}, live {:#010x}: {}",
                    c.base,
                    c.bytes,
                    c.cache_class,
                    c.lanes,
                    c.live,
                    live.join(" ")
                )
            })
            .collect()
    }

    /// Freed chunks waiting in the quarantine.
    pub(crate) fn quarantined_chunks(&self) -> usize {
        self.quarantine.len()
    }

    /// Give every quarantined chunk back to its structure now.
    pub(crate) fn drain_quarantine(&mut self) {
        while let Some((base, bytes, place)) = self.quarantine.pop_front() {
            self.quarantined_bytes -= bytes;
            self.return_place(base, place);
        }
    }

    /// Give every recycled run back to the small space's tree.
    fn release_recycled(&mut self) {
        for (unit, units) in self.recycled.take_all() {
            match self.small.free_run(unit, units) {
                Ok(()) => self.count_small(unit, units, false),
                Err(e) => {
                    // Only a bug gets here: a recycled run must be allocated in the tree.
                    tracing::error!(unit, units, error = %e, "the small space refused a recycled run");
                    debug_assert!(false, "the small space refused a recycled run: {e}");
                }
            }
        }
    }

    /// Whether nothing is allocated or quarantined (only the small space's blocks, empty, in the
    /// arena).
    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
            && self.quarantine.is_empty()
            && self.small.allocated_count()
                == self.small_reserved_units() + self.recycled.kept_units()
            && self.pool.block_count() == 0
            && self.arena.allocated_count() == self.small_blocks
    }

    /// Place a chunk of `geometry` for these lane sizes and lay it out as `arrangement`: its base
    /// and each lane's generation (0 for lanes that asked 0), which with the request's sizes
    /// gives each lane's handle ([`translator::lane_handles`]). `Err(OutOfMemory)` leaves
    /// nothing allocated.
    pub(crate) fn alloc(
        &mut self,
        geometry: Geometry,
        sizes: &[u64; WARP_LANES],
        arrangement: Arrangement,
    ) -> Result<(u64, [u8; WARP_LANES]), Status> {
        let (place, base) = match self.place(&geometry) {
            Err(Status::OutOfMemory) => {
                // Before giving up, everything held back goes back: the quarantine, the recycled
                // runs, and the small space's empty blocks, which any class can then take.
                self.drain_quarantine();
                self.release_recycled();
                self.shrink_small();
                self.place(&geometry)?
            }
            other => other?,
        };
        let offsets = lane_offsets(&geometry, sizes, arrangement);
        let lanes = lane_mask(|l| sizes[l] > 0);
        let generations = self.generations.stamp(base, &offsets, lanes);
        // Written in place: a chunk record is a few hundred bytes.
        let chunk = self.chunks.insert(|c| {
            c.base = base;
            c.bytes = geometry.chunk_bytes;
            c.place = place;
            c.lanes = lanes;
            c.live = lanes;
            // Slots are reused in place: a slab's record must not pass its mark on.
            c.cache_class = None;
            c.lane_span = if geometry.is_arranged() {
                geometry.lane_span
            } else {
                0
            };
            handles_at(
                &geometry,
                base,
                &offsets,
                sizes,
                arrangement,
                &generations,
                &mut c.handles,
            )
            .expect("arena addresses fit handles");
        });
        self.object_bytes += geometry.chunk_bytes;
        tracing::trace!(
            base = format_args!("{base:#x}"),
            bytes = geometry.chunk_bytes,
            handles = ?chunk.handles.iter().map(|h| format!("{:#x}", h.0)).collect::<Vec<_>>(),
            "chunk"
        );
        Ok((base, generations))
    }

    /// A run of `units` small units for a small or packed chunk: a recycled run of that length,
    /// else a search of the small space (which grows by as many blocks as the chunk needs when
    /// the search finds no room). A chunk of a VA block or more starts on one, so its first block
    /// holds no other chunk's objects; it takes fresh blocks when the arena has them side by side,
    /// without a search through the small space's holes (the tail of its last block stays free
    /// for small chunks).
    fn place_small(&mut self, units: usize) -> Result<usize, Status> {
        let align = if units >= UNITS_PER_BLOCK {
            UNITS_PER_BLOCK
        } else {
            1
        };
        if align == UNITS_PER_BLOCK {
            if let Some(block) = self.grow_small(units.div_ceil(UNITS_PER_BLOCK)) {
                let unit = block * UNITS_PER_BLOCK;
                self.small
                    .alloc_at(unit, units)
                    .expect("blocks just joined are free");
                self.count_small(unit, units, true);
                return Ok(unit);
            }
        } else if let Some(unit) = self.recycled.take(units) {
            return Ok(unit);
        }
        let mut run = self.small_run(units, align);
        if matches!(run, Err(OrTreeError::NoSpace { .. })) && !self.recycled.is_empty() {
            self.release_recycled();
            run = self.small_run(units, align);
        }
        if matches!(run, Err(OrTreeError::NoSpace { .. }))
            && self.grow_small(units.div_ceil(UNITS_PER_BLOCK)).is_some()
        {
            run = self.small_run(units, align);
        }
        let unit = run_or_oom(run)?;
        self.count_small(unit, units, true);
        if units >= NEXT_FIT_UNITS {
            self.next_fit = unit + units;
        }
        Ok(unit)
    }

    /// Find memory for a chunk of `geometry` in the structure of its class.
    fn place(&mut self, geometry: &Geometry) -> Result<(Place, u64), Status> {
        let base = self.config.arena_base;
        match geometry.class {
            SizeClass::Small => {
                // A chunk longer than the arena answers RunTooLong: out of memory too.
                let units = usize::try_from(geometry.units).unwrap_or(usize::MAX);
                let unit = self.place_small(units)?;
                Ok((
                    Place::Small { unit, units },
                    base + unit as u64 * SMALL_UNIT_BYTES,
                ))
            }
            SizeClass::Portion => {
                match self.pool.alloc(&mut self.arena, geometry.warptree_log2()) {
                    Ok(w) => Ok((
                        Place::Portion {
                            block: w.block,
                            leaf: w.first_leaf,
                        },
                        base + w.arena_offset(),
                    )),
                    Err(PortionError::ArenaFull) => Err(Status::OutOfMemory),
                    Err(e) => unreachable!("warptree request is valid: {e}"),
                }
            }
            SizeClass::Large => {
                // A run longer than the arena answers RunTooLong: out of memory too.
                let blocks = usize::try_from(geometry.units).unwrap_or(usize::MAX);
                let block = run_or_oom(self.arena.alloc_run(blocks, 1))?;
                Ok((
                    Place::Large { block, blocks },
                    base + block as u64 * VABLOCK_BYTES,
                ))
            }
        }
    }

    /// One plain object of `bytes` (`1..`) with `malloc`'s contract: up to [`PLAIN_SMALL_MAX`]
    /// a run of 256 B units of the small space (packed with other small chunks); above, a run of
    /// whole VABlocks of its own. Its base; freed by address like any lane object.
    pub(crate) fn alloc_plain(&mut self, bytes: u64) -> Result<u64, Status> {
        let geometry = plain_geometry(bytes);
        let mut sizes = [0; WARP_LANES];
        sizes[0] = bytes;
        let (base, _) = self.alloc(geometry, &sizes, Arrangement::Contiguous)?;
        Ok(base)
    }

    /// A slab of `blocks` VABlocks for the device cache of `class`: a live chunk of one lane
    /// (a large chunk's place), its base.
    pub(crate) fn alloc_slab(&mut self, blocks: u64, class: usize) -> Result<u64, Status> {
        let geometry = block_run_geometry(blocks);
        let mut sizes = [0; WARP_LANES];
        sizes[0] = geometry.lane_span;
        let (base, _) = self.alloc(geometry, &sizes, Arrangement::Contiguous)?;
        self.chunks.find_mut(base).expect("just placed").cache_class = Some(class as u8);
        self.object_bytes -= geometry.chunk_bytes;
        Ok(base)
    }

    /// Give back the cache slab at `base`; `false` (nothing changed) if there is none.
    pub(crate) fn free_slab(&mut self, base: u64) -> bool {
        match self.chunks.find_mut(base) {
            Some(chunk) if chunk.base == base && chunk.cache_class.is_some() => {
                chunk.live = 0;
                let class = chunk.cache_class.unwrap_or_default();
                let blocks = chunk.bytes.div_ceil(VABLOCK_BYTES);
                for block in base / VABLOCK_BYTES..base / VABLOCK_BYTES + blocks {
                    self.former_slabs.insert(block, (base, class));
                }
                self.release(base);
                true
            }
            _ => false,
        }
    }

    /// The base address of the live chunk holding `address`, if any.
    pub(crate) fn chunk_containing(&self, address: u64) -> Option<u64> {
        self.chunks.find(address).map(|c| c.base)
    }

    /// The handle that a free of the object starting at `address` (inside this segment) stands
    /// for: the handle its lane was given when a chunk holding `address` has a lane object
    /// starting there (live or freed), else the plain handle of `address`, which a free then
    /// judges as an interior pointer, a double free or an invalid handle.
    pub(crate) fn handle_at(&self, address: u64) -> Handle {
        let given = self.chunks.find(address).and_then(|chunk| {
            chunk
                .handles
                .iter()
                .copied()
                .find(|h| !h.is_null() && h.address() == address)
        });
        given.unwrap_or_else(|| {
            Handle::plain(address, 0).expect("a segment's addresses fit a handle's 48 bits")
        })
    }

    /// The base of the run-class slab holding `address` and the slot it starts, when it starts
    /// one: where the device keeps the span of the object there.
    pub(crate) fn run_slot(&self, address: u64) -> Option<(u64, u64)> {
        let chunk = self.chunks.find(address)?;
        let offset = address - chunk.base;
        (chunk.cache_class == Some(RUN_CLASS as u8) && offset.is_multiple_of(1 << RUN_SLOT_LOG2))
            .then_some((chunk.base, offset >> RUN_SLOT_LOG2))
    }

    /// How many bytes from its start the live object of `handle` may use: the lane's span in a
    /// portion or large chunk, else up to the next object's start (or the chunk's end). `Err` tells why
    /// the handle is not a live object, as a free of it would.
    pub(crate) fn object_capacity(&self, handle: Handle) -> Result<u64, LaneStatus> {
        if handle.is_null() {
            return Err(LaneStatus::InvalidHandle);
        }
        let address = handle.address();
        let Some(chunk) = self.chunks.find(address) else {
            return Err(self.classify_dead(address));
        };
        if let Some(class) = chunk.cache_class {
            // Whether the object is live only the device knows; its extent is its class's. A
            // run object's span is in device memory (`Segment::run_slot` finds where): here it
            // is at most the class's largest object, within the slab.
            let bytes = class_bytes(class as usize);
            return match (address - chunk.base) % bytes {
                0 if class as usize == RUN_CLASS => {
                    Ok(CACHED_MAX_BYTES.min(chunk.base + chunk.bytes - address))
                }
                0 => Ok(bytes),
                _ => Err(LaneStatus::InteriorPointer),
            };
        }
        let lane = handle.lane() as usize;
        if chunk.handles[lane] != handle {
            return Err(Self::mismatch(chunk, handle));
        }
        if chunk.live >> lane & 1 == 0 {
            return Err(LaneStatus::DoubleFree);
        }
        if chunk.lane_span > 0 {
            return Ok(chunk.lane_span);
        }
        let end = chunk
            .handles
            .iter()
            .map(|h| h.address())
            .filter(|&a| a > address)
            .fold(chunk.base + chunk.bytes, u64::min);
        Ok(end - address)
    }

    /// Free a whole chunk at once when `handles` are exactly the handles of the live chunk
    /// holding `first` (one of them) and all its lanes are still live: the lanes freed. `None`
    /// (nothing changed) otherwise; [`Segment::free_lanes`] then judges lane by lane.
    pub(crate) fn free_whole_chunk(
        &mut self,
        first: Handle,
        handles: &[Handle; WARP_LANES],
    ) -> Option<u32> {
        let chunk = self.chunks.find_mut(first.address())?;
        if chunk.cache_class.is_some() {
            return None;
        }
        // One array compare: lanes without an object hold null on both sides.
        if chunk.live != chunk.lanes || chunk.handles != *handles {
            return None;
        }
        let (freed, base) = (chunk.live, chunk.base);
        chunk.live = 0;
        self.release(base);
        Some(freed)
    }

    /// Free the objects of the lanes in `lanes` (addresses inside this segment), writing the
    /// outcome of each lane that fails (the others are left as they are: `Ok`); the failed lanes,
    /// as a mask. The lanes of a warp nearly always free objects of one or two chunks, so one
    /// lookup serves every lane whose address falls in the chunk found; a chunk whose last lane is
    /// freed is released after all its lanes were judged.
    pub(crate) fn free_lanes(
        &mut self,
        handles: &[Handle; WARP_LANES],
        lanes: u32,
        outcomes: &mut [LaneStatus; WARP_LANES],
    ) -> u32 {
        let mut pending = lanes;
        let mut failed = 0u32;
        while pending != 0 {
            let first = pending.trailing_zeros() as usize;
            let address = handles[first].address();
            let Some(chunk) = self.chunks.find_mut(address) else {
                outcomes[first] = self.classify_dead(address);
                failed |= 1 << first;
                pending &= !(1 << first);
                continue;
            };
            let (base, end) = (chunk.base, chunk.base + chunk.bytes);
            if chunk.cache_class.is_some() {
                let in_slab = pending & lane_mask(|l| (base..end).contains(&handles[l].address()));
                for lane in set_lanes(in_slab) {
                    // A handle the host made (generation 1..64) into blocks the caches hold now:
                    // its chunk was freed before the blocks became a slab.
                    let generation = handles[lane].generation();
                    outcomes[lane] = if generation != 0 && generation < CACHE_GENERATIONS_START {
                        LaneStatus::DoubleFree
                    } else {
                        LaneStatus::CachedObject
                    };
                }
                failed |= in_slab;
                pending &= !in_slab;
                continue;
            }
            // The common case in one pass: every lane gives exactly its handle into this chunk
            // (an exact handle lies in the chunk, so the range pass is needed only for the rest).
            let exact = pending & lane_mask(|l| handles[l] == chunk.handles[l]);
            let in_chunk = match pending & !exact {
                0 => pending,
                others => {
                    exact | others & lane_mask(|l| (base..end).contains(&handles[l].address()))
                }
            };
            let freed = exact & chunk.live;
            chunk.live &= !freed;
            for lane in set_lanes(in_chunk & !freed) {
                let mut outcome = Self::judge(chunk, handles[lane]);
                // Inside a live object, exactly where an older object started: the handle of
                // that freed object, under a newer chunk (a double free).
                if outcome == LaneStatus::InteriorPointer
                    && is_stale_start(&self.generations, chunk, handles[lane])
                {
                    outcome = LaneStatus::DoubleFree;
                }
                outcomes[lane] = outcome;
                failed |= u32::from(outcome != LaneStatus::Ok) << lane;
            }
            pending &= !in_chunk;
            if chunk.live == 0 {
                self.release(base);
            }
        }
        failed
    }

    fn judge(chunk: &mut LiveChunk, handle: Handle) -> LaneStatus {
        let lane = handle.lane() as usize;
        let expected = chunk.handles[lane];
        if handle == expected {
            if chunk.live >> lane & 1 == 0 {
                return LaneStatus::DoubleFree;
            }
            chunk.live &= !(1 << lane);
            return LaneStatus::Ok;
        }
        Self::mismatch(chunk, handle)
    }

    /// What a handle whose address lies in `chunk` but which is not its lane's handle is.
    fn mismatch(chunk: &LiveChunk, handle: Handle) -> LaneStatus {
        let address = handle.address();
        let expected = chunk.handles[handle.lane() as usize];
        // At the start of this lane's object, or of another lane's: a handle of another
        // generation is an older object's that started there (a second free, whatever its other
        // bits say); of the same generation, a handle made up (a forged lane or tile field).
        let here = if !expected.is_null() && address == expected.address() {
            Some(expected)
        } else {
            chunk
                .handles
                .iter()
                .copied()
                .find(|h| !h.is_null() && h.address() == address)
        };
        match here {
            Some(object) if object.generation() != handle.generation() => LaneStatus::DoubleFree,
            Some(_) => LaneStatus::InvalidHandle,
            None => LaneStatus::InteriorPointer,
        }
    }

    /// An address in no live chunk: a double free if an object once started there.
    fn classify_dead(&self, address: u64) -> LaneStatus {
        let slab_object_start = self
            .former_slabs
            .get(&(address / VABLOCK_BYTES))
            .is_some_and(|&(base, class)| {
                (address - base).is_multiple_of(class_bytes(class as usize))
            });
        if self.generations.seen(address) || slab_object_start {
            LaneStatus::DoubleFree
        } else {
            LaneStatus::InvalidHandle
        }
    }

    /// A chunk has no live lane: quarantine its place; the oldest quarantined places beyond the
    /// bounds go back to their structures.
    fn release(&mut self, base: u64) {
        let chunk = self.chunks.remove(base).expect("released chunks are live");
        if chunk.cache_class.is_none() {
            self.object_bytes -= chunk.bytes;
        }
        let (bytes, place) = (chunk.bytes, chunk.place);
        self.quarantine.push_back((base, bytes, place));
        self.quarantined_bytes += bytes;
        while self.quarantine.len() > self.config.quarantine_chunks
            || self.quarantined_bytes > self.config.quarantine_bytes
        {
            let Some((base, bytes, place)) = self.quarantine.pop_front() else {
                break;
            };
            self.quarantined_bytes -= bytes;
            self.return_place(base, place);
        }
    }

    /// Give a chunk's place back to its structure.
    fn return_place(&mut self, base: u64, place: Place) {
        let result = match place {
            Place::Small { unit, units } if self.recycled.keep(unit, units) => Ok(()),
            Place::Small { unit, units } => {
                let freed = self.small.free_run(unit, units);
                if freed.is_ok() {
                    self.count_small(unit, units, false);
                }
                freed.map_err(PortionError::from)
            }
            Place::Portion { block, leaf } => {
                self.pool.free(&mut self.arena, block, leaf).map(|_| ())
            }
            Place::Large { block, blocks } => self
                .arena
                .free_run(block, blocks)
                .map_err(PortionError::from),
        };
        if let Err(e) = result {
            // Only a bug gets here: the structures disagree with the chunk table.
            tracing::error!(base, ?place, error = %e, "structures refused a release");
            debug_assert!(false, "structures refused a release: {e}");
        }
    }

    /// Verify the invariants listed in the module docs.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        self.arena.check_invariants().map_err(|e| e.to_string())?;
        self.small.check_invariants().map_err(|e| e.to_string())?;
        self.recycled.check()?;
        self.generations.check()?;
        let objects: u64 = self
            .chunks
            .iter()
            .filter(|c| c.cache_class.is_none())
            .map(|c| c.bytes)
            .sum();
        if objects != self.object_bytes {
            return Err(format!(
                "object chunks hold {objects} bytes but {} are counted",
                self.object_bytes
            ));
        }
        self.pool
            .check_invariants(&self.arena)
            .map_err(|e| e.to_string())?;
        if let Some(c) = self.chunks.iter().find(|c| c.live == 0) {
            return Err(format!(
                "chunk at {:#x} has no live lane but was kept",
                c.base
            ));
        }
        if let Some(c) = self
            .chunks
            .iter()
            .find(|c| c.live & !c.lanes != 0 || c.lanes != lane_mask(|l| !c.handles[l].is_null()))
        {
            return Err(format!(
                "chunk at {:#x}: live lanes {:#x}, lanes {:#x} and handles disagree",
                c.base, c.live, c.lanes
            ));
        }
        for c in self.chunks.iter() {
            for address in [c.base, c.base + c.bytes - 1] {
                if self.chunks.find(address).map(|f| f.base) != Some(c.base) {
                    return Err(format!(
                        "address {address:#x} does not lead to its chunk at {:#x}",
                        c.base
                    ));
                }
            }
        }
        let quarantined: u64 = self.quarantine.iter().map(|q| q.1).sum();
        if quarantined != self.quarantined_bytes {
            return Err(format!(
                "quarantine holds {quarantined} bytes, counted {}",
                self.quarantined_bytes
            ));
        }
        let mut held: Vec<(u64, u64, Place)> = self
            .chunks
            .iter()
            .map(|c| (c.base, c.bytes, c.place))
            .chain(self.quarantine.iter().copied())
            .chain(self.recycled.runs().map(|(unit, units)| {
                let base = self.config.arena_base + unit as u64 * SMALL_UNIT_BYTES;
                (
                    base,
                    units as u64 * SMALL_UNIT_BYTES,
                    Place::Small { unit, units },
                )
            }))
            .collect();
        held.sort_unstable_by_key(|h| h.0);
        let mut end = 0u64;
        let (mut small_units, mut large_blocks, mut portions) = (0usize, 0usize, 0usize);
        let mut small_used = vec![0u32; self.config.arena_blocks];
        for (base, bytes, place) in held {
            if base < end {
                return Err(format!("chunk at {base:#x} overlaps the one before"));
            }
            end = base + bytes;
            let allocated = match place {
                Place::Small { unit, units } => {
                    small_units += units;
                    let blocks = unit / UNITS_PER_BLOCK..=(unit + units - 1) / UNITS_PER_BLOCK;
                    if !blocks
                        .into_iter()
                        .all(|b| self.chunks.regions().is_small(b))
                    {
                        return Err(format!("small chunk at {base:#x} is not in small blocks"));
                    }
                    count_units(&mut small_used, unit, units, true);
                    (unit..unit + units).all(|u| self.small.is_free(u) == Ok(false))
                }
                Place::Large { block, blocks } => {
                    large_blocks += blocks;
                    (block..block + blocks).all(|b| self.arena.is_free(b) == Ok(false))
                }
                Place::Portion { block, leaf } => {
                    portions += 1;
                    self.pool
                        .block(block)
                        .is_some_and(|t| t.warptrees().iter().any(|&(l, _)| l == leaf))
                }
            };
            if !allocated {
                return Err(format!(
                    "chunk at {base:#x} ({place:?}) is not allocated in its structure"
                ));
            }
        }
        if small_units + self.small_reserved_units() != self.small.allocated_count() {
            return Err(format!(
                "small space: {} units allocated, chunks and recycled runs hold {small_units} \
                 besides the {} held for other blocks",
                self.small.allocated_count(),
                self.small_reserved_units()
            ));
        }
        if small_used != self.small_used {
            return Err("small space: a block's count of units in use is wrong".into());
        }
        if self.chunks.regions() != self.generations.regions() {
            return Err("the chunk table and the generations disagree on the small blocks".into());
        }
        let small_blocks: Vec<usize> = (0..self.config.arena_blocks)
            .filter(|&b| self.chunks.regions().is_small(b))
            .collect();
        if small_blocks.len() != self.small_blocks
            || small_blocks
                .iter()
                .any(|&b| self.arena.is_free(b) != Ok(false))
        {
            return Err(format!(
                "small blocks {small_blocks:?} (counted {}) are not all taken and counted",
                self.small_blocks
            ));
        }
        let pool_warptrees: usize = (0..self.config.arena_blocks)
            .filter_map(|b| self.pool.block(b))
            .map(|t| t.warptrees().len())
            .sum();
        if pool_warptrees != portions {
            return Err(format!(
                "pool holds {pool_warptrees} warptrees, chunks {portions}"
            ));
        }
        let arena_used = self.small_blocks + large_blocks + self.pool.block_count();
        if arena_used != self.arena.allocated_count() {
            return Err(format!(
                "arena: {} blocks allocated, accounted {arena_used}",
                self.arena.allocated_count()
            ));
        }
        Ok(())
    }
}

/// Plain objects up to this many bytes (the driver's 64 KiB big page) are packed in the small
/// space; larger ones start on a VABlock of their own.
pub const PLAIN_SMALL_MAX: u64 = LEAF_BYTES;

/// The chunk of one plain object of `bytes` (`1..`): a small run of 256 B units up to
/// [`PLAIN_SMALL_MAX`], else whole VABlocks.
fn plain_geometry(bytes: u64) -> Geometry {
    if bytes <= PLAIN_SMALL_MAX {
        let span = bytes.next_multiple_of(SMALL_UNIT_BYTES);
        Geometry {
            class: SizeClass::Small,
            tile_log2: 0,
            lane_span: span,
            chunk_bytes: span,
            units: span / SMALL_UNIT_BYTES,
        }
    } else {
        block_run_geometry(bytes.div_ceil(VABLOCK_BYTES))
    }
}

/// A large chunk's place of `blocks` VABlocks holding one lane (a cache slab, a large plain
/// object).
fn block_run_geometry(blocks: u64) -> Geometry {
    Geometry {
        class: SizeClass::Large,
        tile_log2: translator::MAX_TILE_LOG2,
        lane_span: blocks * LEAF_BYTES,
        chunk_bytes: blocks * VABLOCK_BYTES,
        units: blocks,
    }
}
