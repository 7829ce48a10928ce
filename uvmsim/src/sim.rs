//! The simulator: replays a [`Trace`] through the driver's fault batching, prefetching, root
//! chunk allocation and eviction, and reports what moved and what it cost.
//!
//! Execution model (assumptions, documented in docs/uvmsim.md):
//! - At most `resident_warps` warps run at once; a finished warp's slot goes to the next warp in
//!   launch order.
//! - A running warp executes its instructions in order. An instruction whose pages are all
//!   resident on the GPU completes; otherwise the warp stalls on it and puts one fault entry per
//!   distinct non-resident page into the fault buffer, in lane order. Warps run until every one
//!   has stalled or finished, so the buffer holds the faults of all running warps.
//! - A batch takes up to `batch_count` entries from the buffer (oldest first), and no more than
//!   `ready_entries`: the driver's fetch stops at the first entry the GPU is still writing, so
//!   while warps flood the buffer a batch sees about a warp's worth of faults, not a full buffer.
//!   It coalesces them per page and services each VA block once, in the order of its first
//!   entry: prefetch hint ([`crate::prefetch`]), root chunk, migration. Entries whose page
//!   became resident are then dropped; a warp whose stalled instruction is all resident runs
//!   again, and one still missing a page whose entry is gone faults on it again (the replay).
//!   Blocks serviced in a batch keep their chunks until it ends (the driver's thrashing
//!   mitigation, in its simplest form): a batch needing more chunks than the GPU holds services
//!   what fits and leaves the rest for the next batch. An
//!   instruction spanning more VA blocks than the GPU holds is refused, as it could never
//!   complete.
//! - VA blocks are 2 MiB aligned and clipped to their allocation. A block gets a 2 MiB root chunk
//!   when it first holds GPU pages; with a capacity set, the chunk populated longest ago (FIFO by
//!   population, not by use) and not needed by the batch is evicted: its GPU pages are copied to
//!   the host. Pages resident nowhere are zero-filled on the GPU without a transfer.
//! - Host touches move pages to the host exactly (no host-side prefetch).
//!
//! Invariants ([`Simulator::check_invariants`]): a page is resident on at most one side; chunks
//! in use are the blocks with GPU pages and never exceed the capacity; pages prefetched and not
//! yet touched are GPU pages.

use std::collections::{HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cost::CostModel;
use crate::mask::{PAGE_BYTES, PAGES_PER_BLOCK, PageMask};
use crate::prefetch::{PrefetchParams, hint};
use crate::trace::{Event, Kernel, Trace};

/// Bytes of a VA block and of a root chunk.
pub const BLOCK_BYTES: u64 = uvm_geometry::VABLOCK_BYTES;

/// Fault batches in a row without a completed instruction before the replay gives up.
const MAX_IDLE_BATCHES: u64 = 100_000;

/// How the simulated driver and GPU are set up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The prefetcher's tunables.
    pub prefetch: PrefetchParams,
    /// `uvm_perf_fault_batch_count`.
    pub batch_count: usize,
    /// Fault entries the driver's fetch finds ready: it reads the buffer until the first entry
    /// the GPU has not finished writing (`FAULT_FETCH_MODE_BATCH_READY`), so under a flood of
    /// faults a batch holds fewer than `batch_count` entries. A batch takes at most this many.
    #[serde(default = "default_ready_entries")]
    pub ready_entries: usize,
    /// GPU memory for managed data, in bytes (`None`: unlimited, no eviction).
    pub gpu_capacity: Option<u64>,
    /// Warps running at once.
    pub resident_warps: usize,
    /// Constants of the modelled time.
    pub cost: CostModel,
    /// Keep each batch's HtoD bytes ([`Simulator::batch_htod_bytes`]), for tests and plots.
    pub record_batches: bool,
}

impl Default for SimConfig {
    /// The H200's driver settings, no capacity limit, 132 SMs x 16 warps running.
    fn default() -> Self {
        Self {
            prefetch: PrefetchParams::default(),
            batch_count: 256,
            ready_entries: default_ready_entries(),
            gpu_capacity: None,
            resident_warps: 132 * 16,
            cost: CostModel::default(),
            record_batches: false,
        }
    }
}

/// A quarter of a warp's entries: chosen on the H200 calibration (docs/uvmsim.md) by a rule
/// fixed before the runs that judge it (of 8 to 256, the value whose fitted runs have the fewest
/// layout pairs ranked unlike the GPU, then the smallest worst time error).
pub const READY_ENTRIES: usize = 8;

fn default_ready_entries() -> usize {
    READY_ENTRIES
}

/// Why a trace could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SimError {
    /// An access or host touch outside every allocation.
    #[error("address {0:#x} lies in no allocation")]
    OutsideAllocations(u64),
    /// Allocations overlap or are not 64 KiB aligned.
    #[error("allocation at {0:#x} overlaps another or is not 64 KiB aligned")]
    BadAllocation(u64),
    /// One instruction touches more VA blocks than the GPU holds root chunks: it could never
    /// complete.
    #[error("an instruction needs {needed} root chunks at once; the GPU holds {capacity}")]
    CapacityTooSmall {
        /// Chunks needed at once.
        needed: usize,
        /// Chunks the capacity holds.
        capacity: usize,
    },
    /// Batches kept coming without any instruction completing (thrashing with no way out).
    #[error("{0} fault batches in a row completed no instruction")]
    NoProgress(u64),
}

/// What happened, in counts (a kernel's or the whole trace's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Warp instructions executed (each completed once).
    pub instructions: u64,
    /// Fault entries put into the buffer (one per warp, instruction and page, replays included).
    pub faults_raw: u64,
    /// Distinct pages faulted per batch, summed over batches.
    pub faults_coalesced: u64,
    /// Fault batches serviced.
    pub batches: u64,
    /// (VA block, batch) pairs serviced.
    pub blocks_serviced: u64,
    /// Bytes moved to the GPU for faulted pages.
    pub htod_fault_bytes: u64,
    /// Bytes moved to the GPU by prefetching.
    pub htod_prefetch_bytes: u64,
    /// Bytes copied back to the host by eviction.
    pub dtoh_eviction_bytes: u64,
    /// Bytes moved back to the host by host touches.
    pub dtoh_host_bytes: u64,
    /// Pages populated on the GPU without a transfer (resident nowhere before).
    pub zero_filled_pages: u64,
    /// Pages brought by prefetching and evicted or left without ever being touched.
    pub prefetch_waste_pages: u64,
    /// Root chunks evicted.
    pub evictions: u64,
    /// Copies from the host: maximal runs of adjacent pages arriving from the host, per block
    /// serviced (the driver copies each run as one transfer).
    #[serde(default)]
    pub htod_copies: u64,
}

impl Counts {
    /// Bytes moved host to device, by fault and prefetch.
    pub fn htod_bytes(&self) -> u64 {
        self.htod_fault_bytes + self.htod_prefetch_bytes
    }
}

/// One kernel's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelReport {
    /// The kernel's name.
    pub name: String,
    /// Its counts.
    pub counts: Counts,
    /// Its modelled time in nanoseconds.
    pub modelled_ns: f64,
}

/// The outcome of a whole trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Per kernel, in order.
    pub kernels: Vec<KernelReport>,
    /// Everything, host touches and the end's prefetch waste included.
    pub total: Counts,
    /// Most GPU memory held at once (root chunks x 2 MiB).
    pub peak_gpu_bytes: u64,
    /// GPU memory held at the end.
    pub final_gpu_bytes: u64,
}

#[derive(Clone, Debug)]
struct Block {
    pages: usize,
    gpu: PageMask,
    cpu: PageMask,
    /// Pages a kernel touched, and pages that left the GPU since (evicted, host touch).
    touched: PageMask,
    left_gpu: PageMask,
    prefetched_untouched: PageMask,
    faults_to_gpu: u64,
    /// Population number of its root chunk, when it has one.
    chunk: Option<u64>,
}

/// A running warp.
struct Running {
    warp: usize,
    pc: usize,
    /// Pages the stalled instruction waits for.
    stalled: Vec<u64>,
    /// When it first stalled on its current instruction (a counter): the warp stalled longest
    /// is protected. Stalling again on the same instruction keeps the age.
    stalled_at: u64,
    /// The instruction it stalled on last.
    stalled_pc: Option<usize>,
    /// The VA blocks (first pages) of the stalled instruction.
    blocks: Vec<u64>,
}

/// The simulated driver state.
pub struct Simulator {
    config: SimConfig,
    /// Allocations as page ranges, sorted.
    allocations: Vec<(u64, u64)>,
    blocks: HashMap<u64, Block>,
    /// Root chunks in population order: (block's first page, population number).
    fifo: VecDeque<(u64, u64)>,
    chunks_in_use: usize,
    populations: u64,
    peak_chunks: usize,
    counts: Counts,
    batch_htod: Vec<u64>,
}

/// A VA block: its first page and its page count.
type BlockRange = (u64, usize);

fn page_of(address: u64) -> u64 {
    address / PAGE_BYTES
}

/// The distinct VA blocks (first pages) of an instruction's pages, ascending.
fn blocks_of(pages: &[(u64, BlockRange)]) -> Vec<u64> {
    let mut blocks: Vec<u64> = pages.iter().map(|&(_, (start, _))| start).collect();
    blocks.sort_unstable();
    blocks.dedup();
    blocks
}

/// Maximal runs of adjacent pages in `mask`.
fn runs(mask: &PageMask) -> u64 {
    let mut count = 0;
    let mut last = None;
    for page in mask.pages() {
        if last.is_none_or(|l| l + 1 != page) {
            count += 1;
        }
        last = Some(page);
    }
    count
}

impl Simulator {
    /// A simulator for these allocations, every page resident nowhere.
    pub fn new(config: SimConfig, trace: &Trace) -> Result<Self, SimError> {
        let mut allocations: Vec<(u64, u64)> = Vec::new();
        let mut sorted = trace.allocations.clone();
        sorted.sort_by_key(|a| a.base);
        for a in &sorted {
            let first = page_of(a.base);
            if !a.base.is_multiple_of(64 << 10)
                || a.bytes == 0
                || allocations.last().is_some_and(|&(_, end)| end > first)
            {
                return Err(SimError::BadAllocation(a.base));
            }
            allocations.push((first, page_of(a.base + a.bytes - 1) + 1));
        }
        Ok(Self {
            config,
            allocations,
            blocks: HashMap::new(),
            fifo: VecDeque::new(),
            chunks_in_use: 0,
            populations: 0,
            peak_chunks: 0,
            counts: Counts::default(),
            batch_htod: Vec::new(),
        })
    }

    /// Replay a whole trace.
    pub fn run(config: SimConfig, trace: &Trace) -> Result<Report, SimError> {
        let mut sim = Self::new(config, trace)?;
        let mut report = Report::default();
        for event in &trace.events {
            match event {
                Event::HostTouch { base, bytes } => sim.host_touch(*base, *bytes)?,
                Event::Kernel(kernel) => {
                    let before = sim.counts;
                    sim.kernel(kernel)?;
                    let mut counts = sim.counts;
                    counts.sub(&before);
                    report.kernels.push(KernelReport {
                        name: kernel.name.clone(),
                        modelled_ns: sim.config.cost.time_ns(&counts),
                        counts,
                    });
                }
            }
        }
        let waste: usize = sim
            .blocks
            .values()
            .map(|b| b.prefetched_untouched.count())
            .sum();
        sim.counts.prefetch_waste_pages += waste as u64;
        report.total = sim.counts;
        report.peak_gpu_bytes = sim.peak_chunks as u64 * BLOCK_BYTES;
        report.final_gpu_bytes = sim.chunks_in_use as u64 * BLOCK_BYTES;
        Ok(report)
    }

    /// The VA block holding `page`: (its first page, its page count).
    fn block_of(&self, page: u64) -> Result<(u64, usize), SimError> {
        let i = self
            .allocations
            .partition_point(|&(first, _)| first <= page);
        let (first, end) = *i
            .checked_sub(1)
            .and_then(|i| self.allocations.get(i))
            .filter(|&&(_, end)| page < end)
            .ok_or(SimError::OutsideAllocations(page * PAGE_BYTES))?;
        let aligned = page / PAGES_PER_BLOCK as u64 * PAGES_PER_BLOCK as u64;
        let start = aligned.max(first);
        let outer = (aligned + PAGES_PER_BLOCK as u64).min(end);
        Ok((start, (outer - start) as usize))
    }

    fn block_mut(&mut self, start: u64, pages: usize) -> &mut Block {
        self.blocks.entry(start).or_insert_with(|| Block {
            pages,
            gpu: PageMask::EMPTY,
            cpu: PageMask::EMPTY,
            touched: PageMask::EMPTY,
            left_gpu: PageMask::EMPTY,
            prefetched_untouched: PageMask::EMPTY,
            faults_to_gpu: 0,
            chunk: None,
        })
    }

    fn capacity_chunks(&self) -> usize {
        self.config
            .gpu_capacity
            .map_or(usize::MAX, |c| (c / BLOCK_BYTES) as usize)
    }

    fn release_chunk(&mut self, start: u64) {
        let block = self
            .blocks
            .get_mut(&start)
            .expect("chunks belong to blocks");
        if block.chunk.take().is_some() {
            self.chunks_in_use -= 1;
        }
    }

    /// Move every GPU page of the block at `start` to the host.
    fn evict(&mut self, start: u64) {
        let block = self.blocks.get_mut(&start).expect("evicted blocks exist");
        let pages = block.gpu.count() as u64;
        block.cpu = block.cpu.or(&block.gpu);
        block.left_gpu = block.left_gpu.or(&block.gpu);
        self.counts.prefetch_waste_pages += block.prefetched_untouched.count() as u64;
        block.prefetched_untouched = PageMask::EMPTY;
        block.gpu = PageMask::EMPTY;
        self.counts.dtoh_eviction_bytes += pages * PAGE_BYTES;
        self.counts.evictions += 1;
        self.release_chunk(start);
    }

    /// Give the block at `start` a root chunk, evicting the one populated longest ago among
    /// those not `pinned` (the blocks this batch serviced). `false` when every chunk is pinned.
    fn populate(&mut self, start: u64, pinned: &[u64]) -> bool {
        if self.blocks[&start].chunk.is_some() {
            return true;
        }
        if self.chunks_in_use >= self.capacity_chunks() {
            let position = self.fifo.iter().position(|&(b, n)| {
                !pinned.contains(&b) && self.blocks.get(&b).and_then(|x| x.chunk) == Some(n)
            });
            let Some(position) = position else {
                return false;
            };
            let (victim, _) = self.fifo.remove(position).expect("found above");
            self.evict(victim);
        }
        let n = self.populations;
        self.populations += 1;
        self.blocks.get_mut(&start).expect("created").chunk = Some(n);
        self.fifo.push_back((start, n));
        // Entries of chunks released since are skipped lazily; keep the queue from growing.
        if self.fifo.len() > 2 * self.chunks_in_use + 64 {
            let blocks = &self.blocks;
            self.fifo
                .retain(|&(b, n)| blocks.get(&b).and_then(|x| x.chunk) == Some(n));
        }
        self.chunks_in_use += 1;
        self.peak_chunks = self.peak_chunks.max(self.chunks_in_use);
        true
    }

    /// The host touches `bytes` bytes from `base`.
    pub fn host_touch(&mut self, base: u64, bytes: u64) -> Result<(), SimError> {
        if bytes == 0 {
            return Ok(());
        }
        let mut page = page_of(base);
        let last = page_of(base + bytes - 1);
        while page <= last {
            let (start, pages) = self.block_of(page)?;
            let outer = (start + pages as u64).min(last + 1);
            let block = self.block_mut(start, pages);
            let moved = PageMask::range((page - start) as usize, (outer - start) as usize);
            let back = block.gpu.and(&moved);
            block.gpu = block.gpu.and_not(&moved);
            block.cpu = block.cpu.or(&moved);
            block.left_gpu = block.left_gpu.or(&back);
            let wasted = block.prefetched_untouched.and(&moved).count() as u64;
            block.prefetched_untouched = block.prefetched_untouched.and_not(&moved);
            let empty = block.gpu.is_empty();
            self.counts.dtoh_host_bytes += back.count() as u64 * PAGE_BYTES;
            self.counts.prefetch_waste_pages += wasted;
            if empty {
                self.release_chunk(start);
            }
            page = outer;
        }
        Ok(())
    }

    /// The distinct pages of an instruction in lane order (each page where its first lane
    /// put it), each with its block (first page, page count); refused when they span more VA
    /// blocks than fit. Lane order, because the GPU writes a warp's fault entries lane by lane
    /// and a fetch that stops early takes the first lanes' pages, not the lowest addresses.
    fn pages_of(&self, addresses: &[u64]) -> Result<Vec<(u64, BlockRange)>, SimError> {
        let mut pages: Vec<u64> = Vec::with_capacity(addresses.len());
        for page in addresses.iter().map(|&a| page_of(a)) {
            // A warp has at most 32 lanes: a scan is cheaper than a set.
            if !pages.contains(&page) {
                pages.push(page);
            }
        }
        let pages = pages
            .into_iter()
            .map(|p| Ok((p, self.block_of(p)?)))
            .collect::<Result<Vec<_>, SimError>>()?;
        let blocks = blocks_of(&pages);
        if blocks.len() > self.capacity_chunks() {
            return Err(SimError::CapacityTooSmall {
                needed: blocks.len(),
                capacity: self.capacity_chunks(),
            });
        }
        Ok(pages)
    }

    fn on_gpu(&self, page: u64) -> bool {
        self.block_of(page)
            .is_ok_and(|(start, _)| self.resident(page, start))
    }

    /// Whether `page` of the block starting at `start` is on the GPU.
    fn resident(&self, page: u64, start: u64) -> bool {
        self.blocks
            .get(&start)
            .is_some_and(|b| b.gpu.test((page - start) as usize))
    }

    fn touch(&mut self, page: u64, (start, pages): BlockRange) {
        let block = self.block_mut(start, pages);
        let p = (page - start) as usize;
        block.touched.set(p);
        block.prefetched_untouched.clear(p);
    }

    /// Run one kernel to completion.
    pub fn kernel(&mut self, kernel: &Kernel) -> Result<(), SimError> {
        let mut next = 0usize;
        let mut running: Vec<Running> = Vec::new();
        let mut buffer: VecDeque<u64> = VecDeque::new();
        let mut idle_batches = 0u64;
        let mut stalls = 0u64;
        loop {
            while running.len() < self.config.resident_warps.max(1) && next < kernel.warps.len() {
                running.push(Running {
                    warp: next,
                    pc: 0,
                    stalled: Vec::new(),
                    stalled_at: 0,
                    stalled_pc: None,
                    blocks: Vec::new(),
                });
                next += 1;
            }
            let mut finished_any = false;
            for r in running.iter_mut().filter(|r| r.stalled.is_empty()) {
                let warp = &kernel.warps[r.warp];
                while r.pc < warp.len() {
                    let pages = self.pages_of(warp.instruction(r.pc))?;
                    let missing: Vec<u64> = pages
                        .iter()
                        .filter(|&&(p, (start, _))| !self.resident(p, start))
                        .map(|&(p, _)| p)
                        .collect();
                    if missing.is_empty() {
                        pages.iter().for_each(|&(p, block)| self.touch(p, block));
                        self.counts.instructions += 1;
                        idle_batches = 0;
                        r.pc += 1;
                    } else {
                        self.counts.faults_raw += missing.len() as u64;
                        buffer.extend(&missing);
                        r.stalled = missing;
                        if r.stalled_pc != Some(r.pc) {
                            r.stalled_pc = Some(r.pc);
                            r.stalled_at = stalls;
                            stalls += 1;
                        }
                        r.blocks = blocks_of(&pages);
                        break;
                    }
                }
                finished_any |= r.pc == warp.len();
            }
            running.retain(|r| r.pc < kernel.warps[r.warp].len());
            if running.is_empty() && next >= kernel.warps.len() {
                return Ok(());
            }
            if finished_any && next < kernel.warps.len() {
                continue; // admit the next warps before servicing, as the GPU keeps running
            }
            idle_batches += 1;
            if idle_batches > MAX_IDLE_BATCHES {
                return Err(SimError::NoProgress(idle_batches));
            }
            // The warp stalled longest keeps the chunks of its instruction's blocks through the
            // batch, so it completes once its pages were serviced: thrashing cannot starve it.
            let protect: &[u64] = running
                .iter()
                .filter(|r| !r.stalled.is_empty())
                .min_by_key(|r| r.stalled_at)
                .map_or(&[], |oldest| &oldest.blocks);
            let take = buffer
                .len()
                .min(self.config.batch_count.max(1))
                .min(self.config.ready_entries.max(1));
            let batch: Vec<u64> = buffer.drain(..take).collect();
            // Entries left for later wait behind the others, so the buffer keeps moving.
            buffer.extend(self.service(&batch, protect)?);
            // The replay: entries whose page arrived leave the buffer; a warp still missing a page
            // (its entry taken but the page since evicted, or never taken) faults on it again
            // unless an entry for it is still waiting.
            buffer.retain(|&p| !self.on_gpu(p));
            let mut waiting: HashSet<u64> = buffer.iter().copied().collect();
            for r in &mut running {
                r.stalled.retain(|&p| !self.on_gpu(p));
                for &p in &r.stalled {
                    if waiting.insert(p) {
                        buffer.push_back(p);
                        self.counts.faults_raw += 1;
                    }
                }
            }
        }
    }

    /// Service one batch of fault entries (oldest first, duplicates allowed): each VA block
    /// once, the `protect`ed blocks first, then in the order of each block's first entry. Blocks
    /// serviced in the batch and protected ones keep their chunks until it ends; a block that
    /// would need a chunk when all are so held is left for the next batch, and its pages are
    /// returned.
    fn service(&mut self, entries: &[u64], protect: &[u64]) -> Result<Vec<u64>, SimError> {
        self.counts.batches += 1;
        let htod_before = self.counts.htod_bytes();
        let mut by_block: Vec<(u64, usize, PageMask)> = Vec::new();
        let mut index: HashMap<u64, usize> = HashMap::new();
        for &page in entries {
            let (start, count) = self.block_of(page)?;
            let i = *index.entry(start).or_insert_with(|| {
                by_block.push((start, count, PageMask::EMPTY));
                by_block.len() - 1
            });
            by_block[i].2.set((page - start) as usize);
        }
        by_block.sort_by_key(|b| !protect.contains(&b.0));
        let mut pinned: Vec<u64> = protect.to_vec();
        let mut deferred: Vec<u64> = Vec::new();
        for (start, count, faulted) in by_block {
            self.block_mut(start, count);
            if !self.populate(start, &pinned) {
                deferred.extend(faulted.pages().map(|p| start + p as u64));
                continue;
            }
            pinned.push(start);
            self.counts.faults_coalesced += faulted.count() as u64;
            let params = self.config.prefetch;
            let block = self.blocks.get_mut(&start).expect("created above");
            let faulted = faulted.and_not(&block.gpu);
            let prefetch = hint(
                &params,
                block.pages,
                &block.gpu,
                &faulted,
                block.faults_to_gpu,
            )
            .and_not(&block.gpu);
            let from_host_faulted = faulted.and(&block.cpu).count() as u64;
            let from_host_prefetched = prefetch.and(&block.cpu).count() as u64;
            let arriving = faulted.or(&prefetch);
            self.counts.htod_copies += runs(&arriving.and(&block.cpu));
            let zero = arriving.and_not(&block.cpu).count() as u64;
            block.cpu = block.cpu.and_not(&arriving);
            block.gpu = block.gpu.or(&arriving);
            block.prefetched_untouched = block.prefetched_untouched.or(&prefetch);
            block.faults_to_gpu += faulted.count() as u64;
            self.counts.blocks_serviced += 1;
            self.counts.htod_fault_bytes += from_host_faulted * PAGE_BYTES;
            self.counts.htod_prefetch_bytes += from_host_prefetched * PAGE_BYTES;
            self.counts.zero_filled_pages += zero;
        }
        if self.config.record_batches {
            self.batch_htod.push(self.counts.htod_bytes() - htod_before);
        }
        Ok(deferred)
    }

    /// Each batch's HtoD bytes so far (with `record_batches`).
    pub fn batch_htod_bytes(&self) -> &[u64] {
        &self.batch_htod
    }

    /// The counts so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Root chunks held now.
    pub fn chunks_in_use(&self) -> usize {
        self.chunks_in_use
    }

    /// Pages resident on the GPU now.
    pub fn gpu_pages(&self) -> usize {
        self.blocks.values().map(|b| b.gpu.count()).sum()
    }

    /// Pages a kernel touched that are neither on the GPU nor ever left it: must be none.
    pub fn lost_pages(&self) -> usize {
        self.blocks
            .values()
            .map(|b| b.touched.and_not(&b.gpu).and_not(&b.left_gpu).count())
            .sum()
    }

    /// Check the invariants in the module docs.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut chunks = 0;
        for (start, b) in &self.blocks {
            if !b.gpu.and(&b.cpu).is_empty() {
                return Err(format!("block {start:#x}: a page resident on both sides"));
            }
            if !b.prefetched_untouched.and_not(&b.gpu).is_empty() {
                return Err(format!("block {start:#x}: prefetched pages not on the GPU"));
            }
            if !b.gpu.is_empty() && b.chunk.is_none() {
                return Err(format!("block {start:#x}: GPU pages without a root chunk"));
            }
            if b.gpu.pages().any(|p| p >= b.pages) {
                return Err(format!("block {start:#x}: a page past the block's end"));
            }
            chunks += usize::from(b.chunk.is_some());
        }
        if chunks != self.chunks_in_use {
            return Err(format!(
                "{chunks} blocks hold chunks, counted {}",
                self.chunks_in_use
            ));
        }
        if self.chunks_in_use > self.capacity_chunks() {
            return Err(format!(
                "{} chunks over the capacity of {}",
                self.chunks_in_use,
                self.capacity_chunks()
            ));
        }
        Ok(())
    }
}

impl Counts {
    fn sub(&mut self, o: &Counts) {
        *self = Counts {
            instructions: self.instructions - o.instructions,
            faults_raw: self.faults_raw - o.faults_raw,
            faults_coalesced: self.faults_coalesced - o.faults_coalesced,
            batches: self.batches - o.batches,
            blocks_serviced: self.blocks_serviced - o.blocks_serviced,
            htod_fault_bytes: self.htod_fault_bytes - o.htod_fault_bytes,
            htod_prefetch_bytes: self.htod_prefetch_bytes - o.htod_prefetch_bytes,
            dtoh_eviction_bytes: self.dtoh_eviction_bytes - o.dtoh_eviction_bytes,
            dtoh_host_bytes: self.dtoh_host_bytes - o.dtoh_host_bytes,
            zero_filled_pages: self.zero_filled_pages - o.zero_filled_pages,
            prefetch_waste_pages: self.prefetch_waste_pages - o.prefetch_waste_pages,
            evictions: self.evictions - o.evictions,
            htod_copies: self.htod_copies - o.htod_copies,
        };
    }
}
