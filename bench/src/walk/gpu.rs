//! `walk` on the GPU: the kernels of `device/kernels/walk.cu` for every system and placement.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, orchestrator, ortree, translator};

use std::time::Instant;

use alignmalloc::internals::gpu::{ManagedArena, Residence};
use alignmalloc::{Handle, Runtime};
use anyhow::{Context, bail, ensure};
use cudarc::driver::sys::CUlimit;
use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};
use orchestrator::{LaneStatus, Status};

use crate::launch::grid;

use super::{Args, Placement, Reference, SystemRun, compare};
use crate::graph::Graph;
use crate::stats::{median, median_present};

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// What every system's walk shares: the graph on the device, the outputs, the kernels.
pub(super) struct Walker<'a> {
    rt: &'a Runtime,
    graph: &'a Graph,
    args: &'a Args,
    reference: &'a Reference,
    offsets: CudaSlice<u64>,
    neighbors: CudaSlice<u32>,
    degrees: CudaSlice<u32>,
    /// The vertex of each allocating thread.
    order: CudaSlice<u32>,
    digests: CudaSlice<u64>,
    paths: Option<CudaSlice<u32>>,
    build: CudaFunction,
    build_heap: CudaFunction,
    walk_lists: CudaFunction,
    walk_csr: CudaFunction,
    free: CudaFunction,
    free_heap: CudaFunction,
    /// GiB of GPU memory the walks have under `--gpu-memory-gib` (`None`: the whole card).
    gpu_memory_gib: Option<f64>,
}

/// How a walk reads the graph.
pub(super) enum Lists<'s> {
    /// Handles (`am::ptr`) or raw device-heap pointers, one per vertex.
    PerVertex {
        lists: &'s CudaSlice<u64>,
        raw: bool,
    },
    /// One CSR in managed memory.
    Csr { offsets: u64, neighbors: u64 },
}

impl<'a> Walker<'a> {
    /// The graph on the device and the kernels; CUDA's device heap sized when `size_heap` (only
    /// before any kernel that calls malloc has run in the process).
    pub(super) fn new(
        rt: &'a Runtime,
        graph: &'a Graph,
        args: &'a Args,
        reference: &'a Reference,
        size_heap: bool,
    ) -> anyhow::Result<Self> {
        let stream = rt.stream()?;
        // Four times the lists plus 256 bytes a vertex, at least 256 MiB (with twice the lists
        // plus 64 bytes a vertex, repeated builds and frees of a 262 144-vertex R-MAT graph's
        // lists failed on the H200).
        let heap = (graph.edges() * 4 * 4 + graph.vertices() as u64 * 256).max(256 << 20);
        if size_heap {
            rt.context()?
                .set_limit(CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, heap as usize)
                .context("sizing CUDA's device heap")?;
        }
        let module = rt.compile(device::WALK.path, device::WALK.text)?;
        let load = |name: &str| {
            module
                .load_function(name)
                .with_context(|| format!("loading {name}"))
        };
        let degrees: Vec<u32> = (0..graph.vertices() as u32)
            .map(|v| graph.degree(v) as u32)
            .collect();
        let walkers = reference.walkers as usize;
        let paths = match reference.paths {
            Some(_) => Some(stream.alloc_zeros::<u32>(walkers * (args.length as usize + 1))?),
            None => None,
        };
        Ok(Self {
            offsets: stream.clone_htod(&graph.offsets)?,
            neighbors: stream.clone_htod(&graph.neighbors)?,
            degrees: stream.clone_htod(&degrees)?,
            order: stream.clone_htod(&super::allocation_order(graph, args.order))?,
            digests: stream.alloc_zeros::<u64>(walkers)?,
            paths,
            build: load("am_walk_build")?,
            build_heap: load("am_walk_build_heap")?,
            walk_lists: load("am_walk_lists")?,
            walk_csr: load("am_walk_csr")?,
            free: load("am_walk_free")?,
            free_heap: load("am_walk_free_heap")?,
            gpu_memory_gib: None,
            rt,
            graph,
            args,
            reference,
        })
    }

    fn vertices(&self) -> u32 {
        self.graph.vertices() as u32
    }

    /// One walk of every walker; its wall time in ms.
    fn walk(&mut self, lists: &Lists<'_>) -> anyhow::Result<f64> {
        self.walk_range(lists, 0, self.reference.walkers)
            .map(|(_, ms)| ms)
    }

    /// The walkers of `[first, end)`: when the kernel was launched and its wall time in ms.
    pub(super) fn walk_range(
        &mut self,
        lists: &Lists<'_>,
        first: u64,
        end: u64,
    ) -> anyhow::Result<(Instant, f64)> {
        if first == end {
            return Ok((Instant::now(), 0.0));
        }
        let stream = self.rt.stream()?.clone();
        let vertices = self.vertices();
        let (length, seed) = (self.args.length, self.args.seed);
        let null_paths: u64 = 0;
        let started = Instant::now();
        let raw = u32::from(matches!(lists, Lists::PerVertex { raw: true, .. }));
        let mut b = match lists {
            Lists::PerVertex { lists, .. } => {
                let mut b = stream.launch_builder(&self.walk_lists);
                b.arg(*lists).arg(&self.degrees).arg(&raw);
                b
            }
            Lists::Csr { offsets, neighbors } => {
                let mut b = stream.launch_builder(&self.walk_csr);
                b.arg(offsets).arg(neighbors);
                b
            }
        };
        b.arg(&vertices)
            .arg(&first)
            .arg(&end)
            .arg(&length)
            .arg(&seed);
        match self.paths.as_mut() {
            Some(p) => b.arg(p),
            None => b.arg(&null_paths),
        };
        b.arg(&mut self.digests);
        anyhow::ensure!(
            first <= end && end <= self.reference.walkers,
            "walkers {first}..{end} of {}",
            self.reference.walkers
        );
        // SAFETY: am_walk_lists(const u64* lists, const unsigned* degrees, unsigned raw, ...) and
        // am_walk_csr(const u64* offsets, const unsigned* neighbors, ...) both go on with
        // (unsigned vertices, u64 first, u64 end, unsigned length, u64 seed, unsigned* paths,
        // u64* digests): one list and degree per vertex or a CSR in a managed region that
        // outlives the walk, a digest per walker of the reference (end <= walkers), paths of
        // `walkers x (length + 1)` or null; all live past the synchronise below.
        unsafe { b.launch(grid(end - first)) }?;
        stream.synchronize()?;
        let walk_ms = ms(started);
        tracing::info!(walk_ms, "walk: walked");
        Ok((started, walk_ms))
    }

    /// The walkers of `[first, end)` whose digest differs from the reference after the last
    /// walk.
    pub(super) fn digests_differing(&self, first: u64, end: u64) -> anyhow::Result<u64> {
        let digests = self.rt.stream()?.clone_dtoh(&self.digests)?;
        Ok((first..end)
            .filter(|&w| digests[w as usize] != self.reference.digests[w as usize])
            .count() as u64)
    }

    /// Whether the last walk matches the reference; logs the first difference.
    fn check(&self, system: &str) -> anyhow::Result<bool> {
        let stream = self.rt.stream()?;
        let digests = stream.clone_dtoh(&self.digests)?;
        let paths = match &self.paths {
            Some(p) => Some(stream.clone_dtoh(p)?),
            None => None,
        };
        Ok(match compare(self.reference, &digests, paths.as_deref()) {
            Ok(()) => true,
            Err(problem) => {
                tracing::error!(system, problem, "walks differ");
                false
            }
        })
    }

    /// A warm-up walk, then the timed repeats, each after `before` (the host's fill, a
    /// prefetch); the faults of each walk are counted. Returns the run with its walk figures.
    fn timed_walks(
        &mut self,
        run: &mut SystemRun,
        lists: &Lists<'_>,
        mut before: impl FnMut(&mut Self) -> anyhow::Result<(Option<f64>, Option<f64>)>,
    ) -> anyhow::Result<()> {
        before(self)?;
        self.walk(lists)?;
        let mut agree = self.check(run.system)?;
        let (mut walks, mut fills, mut prefetches, mut htod, mut dtoh, mut faults) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for _ in 0..self.args.repeats {
            let (fill_ms, prefetch_ms) = before(self)?;
            self.rt.take_faults_if_counting()?;
            let walk_ms = self.walk(lists)?;
            let f = self.rt.take_faults_if_counting()?;
            agree &= self.check(run.system)?;
            walks.push(walk_ms + prefetch_ms.unwrap_or(0.0));
            fills.push(fill_ms);
            prefetches.push(prefetch_ms);
            htod.push(f.as_ref().map(|f| f.total.htod_bytes as f64));
            dtoh.push(f.as_ref().map(|f| f.total.dtoh_bytes as f64));
            faults.push(f.as_ref().map(|f| f.total.gpu_page_faults as f64));
        }
        run.walk_ms_repeats = walks.clone();
        let walk_ms = median(&mut walks);
        run.walk_ms = Some(walk_ms);
        run.fill_ms = median_present(fills);
        run.prefetch_ms = median_present(prefetches);
        // Counted on every walk or on none (the runtime's counters are on or off for its life).
        run.htod_bytes = median_present(htod).map(|b| b as u64);
        run.dtoh_bytes = median_present(dtoh).map(|b| b as u64);
        run.gpu_memory_gib = self.gpu_memory_gib;
        run.gpu_faults = median_present(faults).map(|f| f as u64);
        run.walks_per_s = Some(self.reference.walkers as f64 / (walk_ms / 1e3));
        run.walks_agree = Some(agree);
        Ok(())
    }

    /// Allocate every list from a kernel (filled there when `fill`); the handles and the
    /// kernel's wall time.
    pub(super) fn build_lists(
        &self,
        system: &str,
        contiguous: bool,
        fill: bool,
    ) -> anyhow::Result<(CudaSlice<u64>, f64)> {
        let rt = self.rt;
        let stream = rt.stream()?.clone();
        let vertices = self.vertices();
        let mut handles = stream.alloc_zeros::<u64>(vertices as usize)?;
        let mut statuses = stream.alloc_zeros::<u32>(vertices as usize)?;
        let (contiguous, fill) = (u32::from(contiguous), u32::from(fill));
        let started = Instant::now();
        // SAFETY: am_walk_build(mailbox, const u64* offsets, const unsigned* neighbors, const
        // unsigned* order, unsigned vertices, unsigned contiguous, unsigned fill, u64* handles,
        // unsigned* statuses): the CSR of `vertices` vertices, a permutation of them, and one
        // handle and status per vertex, waited for below.
        let launch = unsafe {
            rt.launch(&self.build, grid(u64::from(vertices)), |a| {
                a.arg(&self.offsets)
                    .arg(&self.neighbors)
                    .arg(&self.order)
                    .arg(&vertices)
                    .arg(&contiguous)
                    .arg(&fill)
                    .arg(&mut handles)
                    .arg(&mut statuses);
            })
        }?;
        launch.wait()?;
        let build_ms = ms(started);
        tracing::info!(system, build_ms, "walk: lists built");
        let codes = stream.clone_dtoh(&statuses)?;
        if let Some(v) = codes.iter().position(|&s| s != Status::Ok as u32) {
            bail!(
                "{system}: allocating vertex {v}'s list of {} bytes answered status {}",
                self.graph.degree(v as u32) * 4,
                codes[v]
            );
        }
        Ok((handles, build_ms))
    }

    /// Free every list from a kernel and check that the allocator is whole and empty.
    pub(super) fn free_lists(&self, system: &str, handles: &CudaSlice<u64>) -> anyhow::Result<()> {
        let rt = self.rt;
        let vertices = self.vertices();
        let mut lane_statuses = rt.stream()?.alloc_zeros::<u32>(vertices as usize)?;
        // SAFETY: am_walk_free(mailbox, const u64* handles, const unsigned* order, unsigned
        // vertices, unsigned* lane_statuses): the handles from the build, the permutation, one
        // status per vertex.
        let launch = unsafe {
            rt.launch(&self.free, grid(u64::from(vertices)), |a| {
                a.arg(handles)
                    .arg(&self.order)
                    .arg(&vertices)
                    .arg(&mut lane_statuses);
            })
        }?;
        launch.wait()?;
        tracing::info!(system, "walk: lists freed");
        let freed = rt.stream()?.clone_dtoh(&lane_statuses)?;
        let failed: Vec<usize> = (0..freed.len())
            .filter(|&v| freed[v] != LaneStatus::Ok as u32)
            .collect();
        if !failed.is_empty() {
            let words = rt.stream()?.clone_dtoh(handles)?;
            for &v in failed.iter().take(8) {
                let status = u8::try_from(freed[v]).ok().and_then(LaneStatus::from_code);
                tracing::error!(
                    system,
                    vertex = v,
                    degree = self.graph.degree(v as u32),
                    handle = format_args!("{:#x}", words[v]),
                    status = ?status,
                    "list not freed cleanly"
                );
            }
            bail!(
                "{system}: {} of {} lists did not free cleanly",
                failed.len(),
                freed.len()
            );
        }
        rt.drain_caches()?;
        rt.check_invariants()
            .map_err(|e| anyhow::anyhow!("{system}: allocator invariants after freeing: {e}"))?;
        ensure!(
            rt.is_empty(),
            "{system}: lists left allocated after freeing them all"
        );
        Ok(())
    }

    /// alignmalloc's lists (arranged or contiguous) in one placement: the build timed over
    /// `--repeats` build-and-free cycles (median), then the walks over the last build's lists.
    fn alignmalloc(
        &mut self,
        system: &'static str,
        contiguous: bool,
        placement: Placement,
    ) -> anyhow::Result<SystemRun> {
        let rt = self.rt;
        let fill = placement == Placement::Gpu;
        let mut builds = Vec::new();
        let handles = loop {
            let (handles, build_ms) = self.build_lists(system, contiguous, fill)?;
            builds.push(build_ms);
            if builds.len() == self.args.repeats as usize {
                break handles;
            }
            self.free_lists(system, &handles)?;
        };
        let lists: Vec<Handle> = rt
            .stream()?
            .clone_dtoh(&handles)?
            .into_iter()
            .map(Handle)
            .collect();
        let list_bytes = lists
            .iter()
            .filter(|h| !h.is_null())
            .map(|&h| rt.capacity(h))
            .sum::<Result<u64, _>>()?;
        let mut run = SystemRun::new(system, placement, Some(median(&mut builds)), list_bytes);
        let tiered = rt
            .arena_segments()
            .iter()
            .any(|s| rt.tier_of(s.0) != Some(alignmalloc::Tier::Any));
        if tiered {
            let mut device_tier = 0;
            for &h in lists.iter().filter(|h| !h.is_null()) {
                if rt.tier_of(h.address()) == Some(alignmalloc::Tier::Device) {
                    device_tier += rt.capacity(h)?;
                }
            }
            run.device_tier_bytes = Some(device_tier);
        }
        let graph = self.graph;
        let lists_arg = Lists::PerVertex {
            lists: &handles,
            raw: false,
        };
        self.timed_walks(&mut run, &lists_arg, |_| {
            if placement == Placement::Gpu {
                return Ok((None, None));
            }
            let started = Instant::now();
            for (v, &h) in lists.iter().enumerate() {
                if !h.is_null() {
                    rt.write(h, 0, bytemuck::cast_slice(graph.neighbors_of(v as u32)))?;
                }
            }
            Ok((Some(ms(started)), None))
        })?;
        if run.walks_agree == Some(false) {
            self.diagnose_lists(system, &lists);
        }
        self.free_lists(system, &handles)?;
        Ok(run)
    }

    /// After walks that differ: which lists do not hold their vertex's neighbours, and which
    /// plain lists overlap another (logged, at most 8 of each).
    fn diagnose_lists(&self, system: &str, lists: &[Handle]) {
        let rt = self.rt;
        let mut wrong = 0usize;
        let mut spans = Vec::new();
        for (v, &h) in lists.iter().enumerate() {
            if h.is_null() {
                continue;
            }
            let expected = self.graph.neighbors_of(v as u32);
            let mut held = vec![0u32; expected.len()];
            let read = rt.read(h, 0, bytemuck::cast_slice_mut(&mut held));
            let capacity = rt.capacity(h).unwrap_or(0);
            if h.kind() == translator::HandleKind::Plain {
                spans.push((h.address(), capacity, v));
            }
            if read.is_err() || held != expected {
                wrong += 1;
                if wrong <= 8 {
                    let first = held.iter().zip(expected).position(|(a, b)| a != b);
                    tracing::error!(
                        system,
                        vertex = v,
                        degree = expected.len(),
                        handle = format_args!("{:#x}", h.0),
                        capacity,
                        first_wrong_index = ?first,
                        read_error = ?read.err(),
                        "list does not hold its neighbours"
                    );
                }
            }
        }
        spans.sort_unstable();
        let overlaps: Vec<_> = spans
            .windows(2)
            .filter(|w| w[0].0 + w[0].1 > w[1].0)
            .collect();
        for w in overlaps.iter().take(8) {
            tracing::error!(
                system,
                first = w[0].2,
                first_handle = format_args!("{:#x}", lists[w[0].2].0),
                first_bytes = w[0].1,
                second = w[1].2,
                second_handle = format_args!("{:#x}", lists[w[1].2].0),
                second_bytes = w[1].1,
                "two lists overlap"
            );
        }
        tracing::error!(
            system,
            wrong_lists = wrong,
            overlapping_plain_lists = overlaps.len(),
            caches = ?rt.cache_stats(),
            "lists checked against the graph"
        );
    }

    /// Lists from CUDA's in-kernel malloc, filled on the GPU; the pointers and the kernel's wall
    /// time.
    fn build_heap(&self) -> anyhow::Result<(CudaSlice<u64>, f64)> {
        let stream = self.rt.stream()?.clone();
        let vertices = self.vertices();
        let mut pointers = stream.alloc_zeros::<u64>(vertices as usize)?;
        let started = Instant::now();
        let mut b = stream.launch_builder(&self.build_heap);
        b.arg(&self.offsets)
            .arg(&self.neighbors)
            .arg(&self.order)
            .arg(&vertices)
            .arg(&mut pointers);
        // SAFETY: am_walk_build_heap(const u64* offsets, const unsigned* neighbors, const
        // unsigned* order, unsigned vertices, u64* pointers): the CSR, a permutation of its
        // vertices and one pointer per vertex.
        unsafe { b.launch(grid(u64::from(vertices))) }?;
        stream.synchronize()?;
        let build_ms = ms(started);
        let got = stream.clone_dtoh(&pointers)?;
        if let Some(v) = (0..vertices).find(|&v| got[v as usize] == 0 && self.graph.degree(v) > 0) {
            bail!("cuda-malloc: the device heap gave no memory for vertex {v}'s list");
        }
        Ok((pointers, build_ms))
    }

    fn free_heap(&self, pointers: &CudaSlice<u64>) -> anyhow::Result<()> {
        let stream = self.rt.stream()?;
        let vertices = self.vertices();
        let mut b = stream.launch_builder(&self.free_heap);
        b.arg(pointers).arg(&vertices);
        // SAFETY: am_walk_free_heap(const u64* pointers, unsigned vertices): the pointers
        // from the build, each freed once.
        unsafe { b.launch(grid(u64::from(vertices))) }?;
        stream.synchronize()?;
        Ok(())
    }

    /// CUDA's device malloc: builds timed as for alignmalloc, then the walks.
    fn cuda_malloc(&mut self) -> anyhow::Result<SystemRun> {
        let mut builds = Vec::new();
        let pointers = loop {
            let (pointers, build_ms) = self.build_heap()?;
            builds.push(build_ms);
            if builds.len() == self.args.repeats as usize {
                break pointers;
            }
            self.free_heap(&pointers)?;
        };
        let mut run = SystemRun::new(
            "cuda-malloc",
            Placement::Gpu,
            Some(median(&mut builds)),
            self.graph.edges() * 4,
        );
        let lists = Lists::PerVertex {
            lists: &pointers,
            raw: true,
        };
        self.timed_walks(&mut run, &lists, |_| Ok((None, None)))?;
        self.free_heap(&pointers).map(|()| run)
    }

    /// The graph as one CSR in managed memory written by the host before each walk, advised as
    /// `advice` says.
    fn managed_csr(&mut self, advice: CsrAdvice) -> anyhow::Result<SystemRun> {
        let rt = self.rt;
        let offsets_bytes = self.graph.offsets.len() as u64 * 8;
        let neighbors_at = offsets_bytes.next_multiple_of(64 << 10);
        let bytes = neighbors_at + self.graph.edges() * 4;
        let blocks = bytes.div_ceil(ortree::VABLOCK_BYTES) as usize;
        // Under --gpu-memory-gib the CSR is meant not to fit what is left.
        let region = ManagedArena::new(rt.context()?, blocks, self.gpu_memory_gib.is_some())?;
        let ordinal = rt.device_info().map_or(0, |i| i.ordinal);
        let stream = rt.stream()?.clone();
        let graph = self.graph;
        // What fits: three quarters of what --gpu-memory-gib left (as alignmalloc's device
        // tier), the offsets first and then the lists of the lowest ids; all of it on the whole
        // card.
        let fits = self.gpu_memory_gib.map_or(region.bytes(), |gib| {
            crate::arena_placement::device_budget_bytes(gib).min(region.bytes())
        });
        match advice {
            CsrAdvice::None | CsrAdvice::Prefetch => {}
            CsrAdvice::HostMapped => {
                region.advise(0, region.bytes(), Residence::HostMappedFor(ordinal as i32))?
            }
            CsrAdvice::ReadMostly => region.advise(0, region.bytes(), Residence::ReadMostly)?,
            CsrAdvice::PrefetchWhatFits => {
                region.advise(0, region.bytes(), Residence::HostMappedFor(ordinal as i32))?;
                region.advise(0, fits, Residence::Device(ordinal as i32))?;
            }
        }
        let mut run = SystemRun::new(advice.system(), Placement::Host, None, bytes);
        let lists = Lists::Csr {
            offsets: region.base(),
            neighbors: region.base() + neighbors_at,
        };
        self.timed_walks(&mut run, &lists, |_| {
            let started = Instant::now();
            // SAFETY: no kernel runs on the region now: each walk on it is launched after this
            // fill and waited for (`walk` synchronizes) before the next one.
            unsafe {
                region.write_from_host(0, bytemuck::cast_slice(&graph.offsets))?;
                region.write_from_host(neighbors_at, bytemuck::cast_slice(&graph.neighbors))?;
            }
            let fill_ms = ms(started);
            let prefetched = match advice {
                CsrAdvice::Prefetch => region.bytes(),
                CsrAdvice::PrefetchWhatFits => fits,
                _ => return Ok((Some(fill_ms), None)),
            };
            let started = Instant::now();
            region.prefetch_to_device(0, prefetched, ordinal, &stream)?;
            stream.synchronize()?;
            Ok((Some(fill_ms), Some(ms(started))))
        })?;
        Ok(run)
    }
}

/// How a managed CSR baseline is advised: what a careful user would try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsrAdvice {
    /// No advice: pages migrate on first touch (`managed-csr`).
    None,
    /// The whole CSR prefetched to the GPU before each walk (`managed-csr-prefetch`).
    Prefetch,
    /// Preferred in host memory, mapped for the GPU (`managed-csr-host-mapped`).
    HostMapped,
    /// Read mostly: the GPU reads its own copies (`managed-csr-read-mostly`).
    ReadMostly,
    /// Host-mapped, with what fits the GPU's memory preferred there and prefetched before
    /// each walk (`managed-csr-prefetch-fit`).
    PrefetchWhatFits,
}

impl CsrAdvice {
    /// Every baseline, in the table's order.
    pub const ALL: [CsrAdvice; 5] = [
        CsrAdvice::None,
        CsrAdvice::Prefetch,
        CsrAdvice::HostMapped,
        CsrAdvice::ReadMostly,
        CsrAdvice::PrefetchWhatFits,
    ];

    /// Its system name.
    pub fn system(self) -> &'static str {
        match self {
            CsrAdvice::None => "managed-csr",
            CsrAdvice::Prefetch => "managed-csr-prefetch",
            CsrAdvice::HostMapped => "managed-csr-host-mapped",
            CsrAdvice::ReadMostly => "managed-csr-read-mostly",
            CsrAdvice::PrefetchWhatFits => "managed-csr-prefetch-fit",
        }
    }
}

pub fn run(
    rt: &Runtime,
    graph: &Graph,
    args: &Args,
    reference: &Reference,
) -> anyhow::Result<Vec<SystemRun>> {
    let bar = crate::progress::steps(11, "systems");
    bar.set_message("warm-up");
    // No device heap under --gpu-memory-gib (cuda-malloc is left out there).
    let mut w = Walker::new(rt, graph, args, reference, args.gpu_memory_gib.is_none())?;
    // Held back from here on, before any managed page reaches the GPU (pages already resident
    // would stay there beside what is left): the graph's device copy (the build's input), the
    // walkers' outputs and the runtime's buffers are already placed.
    let balloon = match args.gpu_memory_gib {
        Some(gib) => Some(crate::balloon::Balloon::inflate(rt, gib)?),
        None => None,
    };
    w.gpu_memory_gib = balloon.as_ref().map(|b| b.left_gib());
    // Warm-up: the first launches of each kind pay for loading and first-touch costs that the
    // figures should not carry.
    let (handles, _) = w.build_lists("warm-up", false, true)?;
    w.free_lists("warm-up", &handles)?;
    if balloon.is_none() {
        let (pointers, _) = w.build_heap()?;
        w.free_heap(&pointers)?;
    }
    bar.inc(1);
    let mut runs = Vec::new();
    for placement in [Placement::Gpu, Placement::Host] {
        for (system, contiguous) in [("alignmalloc", false), ("alignmalloc-contiguous", true)] {
            if !args.walks(system) {
                bar.inc(1);
                continue;
            }
            bar.set_message(format!("{system}, lists filled on the {placement:?}"));
            tracing::info!(system, ?placement, "walk: next system");
            pressure_progress(&balloon, &format!("{system} ({placement:?})"));
            runs.push(w.alignmalloc(system, contiguous, placement)?);
            bar.inc(1);
        }
    }
    bar.set_message("cuda-malloc");
    match (args.walks("cuda-malloc"), balloon.is_none()) {
        (true, true) => runs.push(w.cuda_malloc()?),
        (true, false) => crate::progress::note!(
            "cuda-malloc left out: its lists would live in a device heap, never paged"
        ),
        (false, _) => {}
    }
    bar.inc(1);
    for advice in CsrAdvice::ALL {
        let system = advice.system();
        if !args.walks(system) {
            bar.inc(1);
            continue;
        }
        bar.set_message(system);
        tracing::info!(system, "walk: next system");
        pressure_progress(&balloon, system);
        runs.push(w.managed_csr(advice)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(balloon);
    Ok(runs)
}

/// Under `--gpu-memory-gib` a row can take minutes: say which one runs, also off a terminal.
fn pressure_progress(balloon: &Option<crate::balloon::Balloon>, row: &str) {
    if let Some(b) = balloon {
        crate::progress::note!(
            "walking {row} with {:.2} GiB of GPU memory (under pressure a row can take minutes)",
            b.left_gib()
        );
    }
}

/// alignmalloc's rows again on a runtime whose arranged chunks use the identity slot order (a
/// runtime setting, so a runtime of its own, built after the first one is gone).
pub fn identity_order(
    rt: &Runtime,
    graph: &Graph,
    args: &Args,
    reference: &Reference,
) -> anyhow::Result<Vec<SystemRun>> {
    let mut w = Walker::new(rt, graph, args, reference, false)?;
    let (handles, _) = w.build_lists("warm-up", false, true)?;
    w.free_lists("warm-up", &handles)?;
    let mut runs = Vec::new();
    let bar = crate::progress::steps(2, "identity slot order");
    for placement in [Placement::Gpu, Placement::Host] {
        bar.set_message(format!("lists filled on the {placement:?}"));
        runs.push(w.alignmalloc("alignmalloc-identity-order", false, placement)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(runs)
}
