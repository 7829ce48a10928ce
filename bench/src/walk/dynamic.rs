//! `walk --batches N`: a graph that changes. Its edges arrive in N batches (the file's order, or
//! R-MAT's generation order); after each batch every system adds the batch to its graph and the
//! walks run on the graph so far, checked against the CPU reference of the same lists.
//!
//! - `alignmalloc`: one list per vertex, grown inside a kernel (`am_walk_insert`): a full list is
//!   moved to one of twice the capacity (`am::malloc`, copy, `am::free`), then the batch's
//!   neighbours are appended.
//! - `cuda-malloc` (GPU): the same kernel with CUDA's device `malloc` and `free`.
//! - `managed-csr-rebuild`: the host rebuilds the whole CSR in managed memory after each batch;
//!   the walk reads it there.
//!
//! Lists keep neighbours in arrival order, duplicates included (a multigraph of the stream), and
//! the CPU reference walks the same lists, so every walk is checked exactly. Walker `w` starts at
//! vertex `w mod V`; `--batch-walkers` walkers run after each batch.
//!
//! On the simulator the lists are grown by CPU warps through the runtime (its mailbox, service
//! thread and layout), and the walks read them back through the runtime: the allocator's memory
//! is checked after every batch; no time there is a GPU's.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, orchestrator, ortree, translator};

use std::time::Instant;

use alignmalloc::internals::gpu::ManagedArena;
use alignmalloc::{BackendKind, Handle, Runtime};
use anyhow::{Context, bail, ensure};
use cudarc::driver::sys::CUlimit;
use cudarc::driver::{CudaSlice, PushKernelArg};
use orchestrator::LaneStatus;
use serde::Serialize;
use translator::WARP_LANES;

use super::{Args, walk_one};
use crate::graph::{Direction, EdgeStream, Format};
use crate::launch::grid;
use crate::progress::note;

/// The capacity (in neighbours) of a list that must hold `needed` and holds `capacity`: doubled,
/// at least `needed`, at least 4 (the twin of `grown_capacity` in device/kernels/walk.cu).
pub fn grown_capacity(capacity: u32, needed: u32) -> u32 {
    capacity.saturating_mul(2).max(needed).max(4)
}

/// One batch's edges grouped by source, in arrival order within a source.
pub struct Batch {
    /// Sources with new neighbours, ascending.
    pub touched: Vec<u32>,
    /// `touched.len() + 1` offsets into `adds`.
    pub starts: Vec<u32>,
    /// The new neighbours.
    pub adds: Vec<u32>,
}

/// Split `edges` into `count` batches of consecutive edges (both directions of an undirected
/// edge in the same batch).
pub fn batches(edges: &[(u32, u32)], direction: Direction, count: u32) -> Vec<Batch> {
    let count = count as usize;
    (0..count)
        .map(|b| {
            let part = &edges[b * edges.len() / count..(b + 1) * edges.len() / count];
            let mut directed: Vec<(u32, u32)> = Vec::with_capacity(part.len() * 2);
            for &(u, v) in part {
                directed.push((u, v));
                if direction == Direction::Undirected && u != v {
                    directed.push((v, u));
                }
            }
            // Stable: arrival order within a source.
            directed.sort_by_key(|&(u, _)| u);
            let mut batch = Batch {
                touched: Vec::new(),
                starts: Vec::new(),
                adds: Vec::with_capacity(directed.len()),
            };
            for (i, &(u, v)) in directed.iter().enumerate() {
                if batch.touched.last() != Some(&u) {
                    batch.touched.push(u);
                    batch.starts.push(i as u32);
                }
                batch.adds.push(v);
            }
            batch.starts.push(directed.len() as u32);
            batch
        })
        .collect()
}

/// The graph so far as the host keeps it: the CPU reference of every system's lists.
pub struct HostLists {
    pub lists: Vec<Vec<u32>>,
    pub capacities: Vec<u32>,
}

impl HostLists {
    fn new(vertices: usize) -> Self {
        Self {
            lists: vec![Vec::new(); vertices],
            capacities: vec![0; vertices],
        }
    }

    fn apply(&mut self, batch: &Batch) {
        for (i, &v) in batch.touched.iter().enumerate() {
            let new = &batch.adds[batch.starts[i] as usize..batch.starts[i + 1] as usize];
            let list = &mut self.lists[v as usize];
            let needed = (list.len() + new.len()) as u32;
            if needed > self.capacities[v as usize] {
                self.capacities[v as usize] = grown_capacity(self.capacities[v as usize], needed);
            }
            list.extend_from_slice(new);
        }
    }

    fn edges(&self) -> u64 {
        self.lists.iter().map(|l| l.len() as u64).sum()
    }

    /// Bytes the grown lists ask for.
    fn list_bytes(&self) -> u64 {
        self.capacities.iter().map(|&c| u64::from(c) * 4).sum()
    }

    /// The reference digests of `walkers` walks.
    fn digests(&self, walkers: u64, length: u32, seed: u64) -> Vec<u64> {
        let vertices = self.lists.len() as u32;
        let mut digests = vec![0u64; walkers as usize];
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let per = (walkers as usize).div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for (chunk, part) in digests.chunks_mut(per).enumerate() {
                let lists = &self.lists;
                scope.spawn(move || {
                    for (i, d) in part.iter_mut().enumerate() {
                        let w = (chunk * per + i) as u64;
                        *d = walk_one(&|v| &lists[v as usize], vertices, w, length, seed, None);
                    }
                });
            }
        });
        digests
    }
}

/// One system after one batch.
#[derive(Clone, Debug, Serialize)]
pub struct BatchRow {
    pub system: &'static str,
    pub batch: u32,
    /// Directed edges in the graph after the batch.
    pub edges: u64,
    /// Adding the batch: the insert kernel (GPU), the host's CSR rebuild, or CPU warps (sim).
    pub insert_ms: f64,
    /// The walks after the batch (GPU only).
    pub walk_ms: Option<f64>,
    /// Bytes the system holds for the graph: the lists' capacities asked for, or the CSR.
    pub memory_bytes: u64,
    /// Bytes migrated to the GPU during the walk (CUPTI; GPU only).
    pub htod_bytes: Option<u64>,
    /// Every walk matched the CPU reference (`None`: the walks were the reference's own).
    pub walks_agree: Option<bool>,
}

/// One system over all batches.
#[derive(Clone, Debug, Serialize)]
pub struct Total {
    pub system: &'static str,
    pub insert_ms: f64,
    pub walk_ms: Option<f64>,
    /// Inserts and walks, end to end.
    pub total_ms: f64,
    /// `total_ms` over alignmalloc's (above 1: alignmalloc is faster); GPU runs only.
    pub ratio_to_alignmalloc: Option<f64>,
    pub walks_agree: Option<bool>,
}

#[derive(Serialize)]
struct Report {
    backend: String,
    device: String,
    graph: String,
    vertices: usize,
    edges_streamed: u64,
    batches: u32,
    walkers_per_batch: u64,
    length: u32,
    seed: u64,
    times: &'static str,
    totals: Vec<Total>,
    rows: Vec<BatchRow>,
}

/// The graph's name and edges in arrival order: R-MAT's generation order or the file's.
fn stream(args: &Args) -> anyhow::Result<(String, EdgeStream)> {
    if let Some(scale) = args.rmat {
        let edges = crate::graph::rmat_edges(scale, args.edge_factor, args.seed)?;
        let name = format!("rmat-{scale}-ef{}", args.edge_factor);
        let stream = EdgeStream {
            vertices: 1usize << scale,
            edges,
            direction: Direction::Undirected,
        };
        return Ok((name, stream));
    }
    let (path, format) = match (&args.snap, &args.mtx) {
        (Some(p), _) => (p, Format::Snap),
        (_, Some(p)) => (p, Format::MatrixMarket),
        _ => bail!("name a graph: --rmat SCALE, --snap FILE or --mtx FILE"),
    };
    let bar = crate::progress::bytes(0, "reading the graph");
    let stream = crate::graph::file_edges(path, format, args.direction, |read, size| {
        bar.set_length(size);
        bar.set_position(read);
    })?;
    bar.finish_and_clear();
    Ok((path.display().to_string(), stream))
}

/// `walk --batches N`.
pub fn run(args: &Args, count: u32) -> anyhow::Result<()> {
    let gpu = args.check()?;
    let (
        name,
        EdgeStream {
            vertices,
            edges,
            direction,
            ..
        },
    ) = stream(args)?;
    ensure!(
        vertices < u32::MAX as usize,
        "{name}: more vertices than 32-bit ids"
    );
    ensure!(
        edges.len() as u64 >= u64::from(count),
        "--batches {count}: the graph has only {} edges",
        edges.len()
    );
    let batches = batches(&edges, direction, count);
    let walkers = args
        .batch_walkers
        .min(vertices as u64 * u64::from(args.walks_per_vertex));
    note!(
        "graph {name}: {vertices} vertices, {} edges streamed in {count} batches; {walkers} walks of {} steps after each batch",
        edges.len(),
        args.length
    );
    // The reference after each batch, and the lists' final size (to size CUDA's heap).
    let started = Instant::now();
    let mut host = HostLists::new(vertices);
    let mut reference = Vec::with_capacity(batches.len());
    let bar = crate::progress::steps(u64::from(count), "CPU reference");
    for b in &batches {
        host.apply(b);
        reference.push(host.digests(walkers, args.length, args.seed));
        bar.inc(1);
    }
    bar.finish_and_clear();
    note!(
        "CPU reference: {} directed edges in the end, {:.1} MiB of grown lists, in {:.1} s",
        host.edges(),
        host.list_bytes() as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );
    let final_list_bytes = host.list_bytes();
    drop(host);

    let mut builder = Runtime::builder().backend(args.backend).fault_counters(gpu);
    if !gpu {
        builder = builder.arena_bytes((final_list_bytes * 8).clamp(256 << 20, 8 << 30));
    }
    let rt = builder.build().context("starting the runtime")?;
    note!("backend: {:?} ({})", rt.backend(), rt.backend_reason());
    let shared = Shared {
        args,
        vertices,
        walkers,
        batches: &batches,
        reference: &reference,
    };
    let (rows, times) = match rt.backend() {
        BackendKind::Cuda => (
            gpu::run(&rt, &shared, final_list_bytes)?,
            "GPU kernel wall time (inserts and walks); the CSR rebuild is the host's time",
        ),
        BackendKind::Sim => (
            sim::run(&rt, &shared)?,
            "host time of CPU warps (not a GPU's); walks are checked, not timed",
        ),
    };
    // Host times of CPU warps are not compared with the host's CSR rebuild.
    let totals = totals(&rows, rt.backend() == BackendKind::Cuda);
    print(&rows, &totals, times);
    let report = Report {
        backend: format!("{:?}", rt.backend()),
        device: rt
            .device_info()
            .map_or_else(|| "none (simulated)".into(), |i| i.name.clone()),
        graph: name,
        vertices,
        edges_streamed: edges.len() as u64,
        batches: count,
        walkers_per_batch: walkers,
        length: args.length,
        seed: args.seed,
        times,
        totals: totals.clone(),
        rows,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let wrong: Vec<&str> = totals
        .iter()
        .filter(|t| t.walks_agree == Some(false))
        .map(|t| t.system)
        .collect();
    ensure!(
        wrong.is_empty(),
        "walks differ from the CPU reference: {}",
        wrong.join(", ")
    );
    Ok(())
}

/// What every system's run shares.
struct Shared<'a> {
    args: &'a Args,
    vertices: usize,
    walkers: u64,
    batches: &'a [Batch],
    reference: &'a [Vec<u64>],
}

fn totals(rows: &[BatchRow], timed: bool) -> Vec<Total> {
    let mut systems: Vec<&'static str> = Vec::new();
    for r in rows {
        if !systems.contains(&r.system) {
            systems.push(r.system);
        }
    }
    let mut totals: Vec<Total> = systems
        .iter()
        .map(|&system| {
            let mine: Vec<&BatchRow> = rows.iter().filter(|r| r.system == system).collect();
            let insert_ms: f64 = mine.iter().map(|r| r.insert_ms).sum();
            let walk_ms: Option<f64> = mine.iter().map(|r| r.walk_ms).sum();
            Total {
                system,
                insert_ms,
                walk_ms,
                total_ms: insert_ms + walk_ms.unwrap_or(0.0),
                ratio_to_alignmalloc: None,
                walks_agree: mine
                    .iter()
                    .map(|r| r.walks_agree)
                    .collect::<Option<Vec<bool>>>()
                    .map(|all| all.iter().all(|&a| a)),
            }
        })
        .collect();
    let ours = totals
        .iter()
        .find(|t| t.system == "alignmalloc")
        .map(|t| t.total_ms);
    if let Some(ours) = ours.filter(|_| timed) {
        for t in &mut totals {
            t.ratio_to_alignmalloc = (ours > 0.0).then(|| t.total_ms / ours);
        }
    }
    totals
}

fn print(rows: &[BatchRow], totals: &[Total], times: &str) {
    println!("times: {times}");
    println!(
        "{:<22} {:>6} {:>12} {:>10} {:>10} {:>10} {:>10} {:>6}",
        "system", "batch", "edges", "insert ms", "walk ms", "MiB held", "HtoD MiB", "walks"
    );
    let last = rows.iter().map(|r| r.batch).max().unwrap_or(0);
    // The first, a few in between and the last batch; the JSON has them all.
    let shown = |b: u32| b == 0 || b == last || (last >= 4 && b.is_multiple_of((last / 4).max(1)));
    let dash = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |x| format!("{x:.d$}"));
    for r in rows.iter().filter(|r| shown(r.batch)) {
        println!(
            "{:<22} {:>6} {:>12} {:>10.3} {:>10} {:>10.1} {:>10} {:>6}",
            r.system,
            r.batch + 1,
            r.edges,
            r.insert_ms,
            dash(r.walk_ms, 3),
            r.memory_bytes as f64 / 1048576.0,
            dash(r.htod_bytes.map(|b| b as f64 / 1048576.0), 1),
            agree(r.walks_agree)
        );
    }
    println!(
        "{:<22} {:>12} {:>10} {:>12} {:>8} {:>6}",
        "total", "insert ms", "walk ms", "end to end", "x ours", "walks"
    );
    for t in totals {
        println!(
            "{:<22} {:>12.1} {:>10} {:>12.1} {:>8} {:>6}",
            t.system,
            t.insert_ms,
            dash(t.walk_ms, 1),
            t.total_ms,
            dash(t.ratio_to_alignmalloc, 2),
            agree(t.walks_agree)
        );
    }
    println!("x ours: end-to-end time over alignmalloc's (above 1: alignmalloc is faster)");
}

fn agree(walks: Option<bool>) -> &'static str {
    match walks {
        Some(true) => "ok",
        Some(false) => "WRONG",
        None => "-",
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The CSR of `lists`.
fn csr(lists: &[Vec<u32>]) -> (Vec<u64>, Vec<u32>) {
    let mut offsets = Vec::with_capacity(lists.len() + 1);
    let mut neighbors = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    offsets.push(0u64);
    for l in lists {
        neighbors.extend_from_slice(l);
        offsets.push(neighbors.len() as u64);
    }
    (offsets, neighbors)
}

mod sim {
    use super::*;

    /// alignmalloc's lists grown by CPU warps; after each batch the lists are read back through
    /// the runtime and walked on the host, against the reference. Then the CSR rebuilt by the
    /// host, for its memory.
    pub fn run(rt: &Runtime, s: &Shared<'_>) -> anyhow::Result<Vec<BatchRow>> {
        let mut rows = Vec::new();
        let mut handles = vec![Handle::NULL; s.vertices];
        let mut host = HostLists::new(s.vertices);
        for (b, batch) in s.batches.iter().enumerate() {
            let started = Instant::now();
            grow(rt, batch, &mut handles, &host)?;
            host.apply(batch);
            for (i, &v) in batch.touched.iter().enumerate() {
                let new = &batch.adds[batch.starts[i] as usize..batch.starts[i + 1] as usize];
                let at = (host.lists[v as usize].len() - new.len()) as u64 * 4;
                rt.write(handles[v as usize], at, bytemuck::cast_slice(new))?;
            }
            let insert_ms = ms(started);
            // Read every list back through the runtime and walk what came back.
            let mut read: Vec<Vec<u32>> = Vec::with_capacity(s.vertices);
            for (v, &h) in handles.iter().enumerate() {
                let mut list = vec![0u32; host.lists[v].len()];
                if !h.is_null() {
                    rt.read(h, 0, bytemuck::cast_slice_mut(&mut list))?;
                }
                read.push(list);
            }
            let back = HostLists {
                lists: read,
                capacities: Vec::new(),
            };
            let digests = back.digests(s.walkers, s.args.length, s.args.seed);
            rows.push(BatchRow {
                system: "alignmalloc",
                batch: b as u32,
                edges: host.edges(),
                insert_ms,
                walk_ms: None,
                memory_bytes: host.list_bytes(),
                htod_bytes: None,
                walks_agree: Some(digests == s.reference[b]),
            });
            let started = Instant::now();
            let (offsets, neighbors) = csr(&host.lists);
            rows.push(BatchRow {
                system: "managed-csr-rebuild",
                batch: b as u32,
                edges: host.edges(),
                insert_ms: ms(started),
                walk_ms: None,
                memory_bytes: offsets.len() as u64 * 8 + neighbors.len() as u64 * 4,
                htod_bytes: None,
                // The host's own lists: the reference itself, which checks nothing.
                walks_agree: None,
            });
        }
        // Free every list from CPU warps: the allocator must be whole and empty.
        let live: Vec<Handle> = handles.into_iter().filter(|h| !h.is_null()).collect();
        ensure!(free_by_warps(rt, &live)? == 0, "freeing a list was refused");
        rt.drain_caches()?;
        rt.check_invariants()
            .map_err(|e| anyhow::anyhow!("allocator invariants after freeing: {e}"))?;
        ensure!(rt.is_empty(), "lists left allocated after freeing them all");
        Ok(rows)
    }

    /// Free `objects` from CPU warps, 32 to a warp; how many frees were refused.
    fn free_by_warps(rt: &Runtime, objects: &[Handle]) -> anyhow::Result<usize> {
        let refused = parking_lot::Mutex::new(0usize);
        rt.run_warps(objects.len().div_ceil(WARP_LANES) as u32, |warp| {
            let (first, mask) = warp.lanes_of(objects.len() as u64);
            let lanes: [Handle; WARP_LANES] = std::array::from_fn(|l| {
                if mask >> l & 1 == 1 {
                    objects[first as usize + l]
                } else {
                    Handle::NULL
                }
            });
            let outcome = warp.free(mask, &lanes);
            *refused.lock() += (0..WARP_LANES)
                .filter(|&l| mask >> l & 1 == 1 && outcome.lanes[l] != LaneStatus::Ok)
                .count();
        })?;
        Ok(refused.into_inner())
    }

    /// Move every full list of `batch` to one of the grown capacity, by CPU warps: allocate,
    /// copy through the runtime, free the old one.
    fn grow(
        rt: &Runtime,
        batch: &Batch,
        handles: &mut [Handle],
        host: &HostLists,
    ) -> anyhow::Result<()> {
        let growing: Vec<(u32, u32)> = batch
            .touched
            .iter()
            .enumerate()
            .filter_map(|(i, &v)| {
                let needed =
                    (host.lists[v as usize].len() as u32) + batch.starts[i + 1] - batch.starts[i];
                let capacity = host.capacities[v as usize];
                (needed > capacity).then(|| (v, grown_capacity(capacity, needed)))
            })
            .collect();
        let grown = parking_lot::Mutex::new(vec![Handle::NULL; growing.len()]);
        let failure = parking_lot::Mutex::new(None);
        rt.run_warps(growing.len().div_ceil(WARP_LANES) as u32, |warp| {
            let (first, mask) = warp.lanes_of(growing.len() as u64);
            let sizes: [u64; WARP_LANES] = std::array::from_fn(|l| {
                if mask >> l & 1 == 1 {
                    u64::from(growing[first as usize + l].1) * 4
                } else {
                    0
                }
            });
            match warp.malloc(mask, &sizes) {
                Ok(got) => {
                    let mut g = grown.lock();
                    for l in 0..WARP_LANES {
                        if mask >> l & 1 == 1 {
                            g[first as usize + l] = got[l];
                        }
                    }
                }
                Err(status) => *failure.lock() = Some(status),
            }
        })?;
        if let Some(status) = failure.into_inner() {
            bail!("growing a list answered {status:?}");
        }
        let grown = grown.into_inner();
        let mut old = Vec::new();
        for (&(v, _), &h) in growing.iter().zip(&grown) {
            let previous = handles[v as usize];
            let kept = host.lists[v as usize].len();
            if !previous.is_null() {
                let mut bytes = vec![0u8; kept * 4];
                rt.read(previous, 0, &mut bytes)?;
                rt.write(h, 0, &bytes)?;
                old.push(previous);
            }
            handles[v as usize] = h;
        }
        ensure!(
            free_by_warps(rt, &old)? == 0,
            "freeing a grown list's old place was refused"
        );
        Ok(())
    }
}

mod gpu {
    use super::*;

    type Module = std::sync::Arc<cudarc::driver::CudaModule>;

    /// Every system on the GPU, batch after batch.
    pub fn run(
        rt: &Runtime,
        s: &Shared<'_>,
        final_list_bytes: u64,
    ) -> anyhow::Result<Vec<BatchRow>> {
        // CUDA's heap: the final lists twice over (old places are freed as lists grow) plus
        // 256 bytes a vertex, at least 256 MiB; set before any kernel calls malloc.
        let heap = (final_list_bytes * 4 + s.vertices as u64 * 256).max(256 << 20);
        rt.context()?
            .set_limit(CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, heap as usize)
            .context("sizing CUDA's device heap")?;
        let module = rt.compile(device::WALK.path, device::WALK.text)?;
        let mut rows = lists(rt, s, &module, false)?;
        rows.extend(lists(rt, s, &module, true)?);
        rows.extend(csr_rebuild(rt, s, &module)?);
        Ok(rows)
    }

    /// A walk over per-vertex lists (`raw`: device-heap pointers) or a CSR; its time, HtoD bytes
    /// and whether it matched.
    fn walk(
        rt: &Runtime,
        s: &Shared<'_>,
        module: &Module,
        b: usize,
        per_vertex: Option<(&CudaSlice<u64>, &CudaSlice<u32>, bool)>,
        csr: Option<(u64, u64)>,
    ) -> anyhow::Result<(f64, Option<u64>, bool)> {
        let stream = rt.stream()?.clone();
        let mut digests = stream.alloc_zeros::<u64>(s.walkers as usize)?;
        let vertices = s.vertices as u32;
        let (walkers, length, seed) = (s.walkers, s.args.length, s.args.seed);
        let null_paths: u64 = 0;
        rt.take_faults_if_counting()?;
        let started = Instant::now();
        let (lists_fn, csr_fn) = (
            module.load_function("am_walk_lists")?,
            module.load_function("am_walk_csr")?,
        );
        let raw = u32::from(per_vertex.is_some_and(|(_, _, raw)| raw));
        let mut l = match (per_vertex, &csr) {
            (Some((lists, degrees, _)), _) => {
                let mut l = stream.launch_builder(&lists_fn);
                l.arg(lists).arg(degrees).arg(&raw);
                l
            }
            (None, Some((offsets, neighbors))) => {
                let mut l = stream.launch_builder(&csr_fn);
                l.arg(offsets).arg(neighbors);
                l
            }
            _ => bail!("a walk needs lists or a CSR"),
        };
        let first = 0u64;
        l.arg(&vertices)
            .arg(&first)
            .arg(&walkers)
            .arg(&length)
            .arg(&seed)
            .arg(&null_paths)
            .arg(&mut digests);
        // SAFETY: am_walk_lists(const u64* lists, const unsigned* degrees, unsigned raw, ...) and
        // am_walk_csr(const u64* offsets, const unsigned* neighbors, ...) both go on with
        // (unsigned vertices, u64 first, u64 end, unsigned length, u64 seed, unsigned* paths,
        // u64* digests): every walker (0..walkers); one list and degree per vertex, or a CSR in a
        // managed region that outlives the walk; no paths; one digest per walker; all live past
        // the synchronise below.
        unsafe { l.launch(grid(walkers)) }?;
        stream.synchronize()?;
        let walk_ms = ms(started);
        let faults = rt.take_faults_if_counting()?;
        let got = stream.clone_dtoh(&digests)?;
        Ok((
            walk_ms,
            faults.map(|f| f.total.htod_bytes),
            got == s.reference[b],
        ))
    }

    /// alignmalloc's lists (`heap`: CUDA's malloc) grown by the insert kernel, batch after batch.
    fn lists(
        rt: &Runtime,
        s: &Shared<'_>,
        module: &Module,
        heap: bool,
    ) -> anyhow::Result<Vec<BatchRow>> {
        let system = if heap { "cuda-malloc" } else { "alignmalloc" };
        let insert = module.load_function(if heap {
            "am_walk_insert_heap"
        } else {
            "am_walk_insert"
        })?;
        let stream = rt.stream()?.clone();
        let v = s.vertices;
        let mut handles = stream.alloc_zeros::<u64>(v)?;
        let mut degrees = stream.alloc_zeros::<u32>(v)?;
        let mut capacities = stream.alloc_zeros::<u32>(v)?;
        let mut host = HostLists::new(v);
        let mut rows = Vec::new();
        let bar = crate::progress::steps(s.batches.len() as u64, system);
        for (b, batch) in s.batches.iter().enumerate() {
            let touched = stream.clone_htod(&batch.touched)?;
            let starts = stream.clone_htod(&batch.starts)?;
            let adds = stream.clone_htod(&batch.adds)?;
            let count = batch.touched.len() as u32;
            let mut statuses = stream.alloc_zeros::<u32>(batch.touched.len().max(1))?;
            let started = Instant::now();
            if heap {
                let mut l = stream.launch_builder(&insert);
                l.arg(&touched)
                    .arg(&starts)
                    .arg(&adds)
                    .arg(&count)
                    .arg(&mut handles)
                    .arg(&mut degrees)
                    .arg(&mut capacities)
                    .arg(&mut statuses);
                // SAFETY: am_walk_insert_heap(const unsigned* touched, const unsigned* starts,
                // const unsigned* adds, unsigned count, u64* pointers, unsigned* degrees,
                // unsigned* capacities, unsigned* statuses): `count` touched vertices with
                // count + 1 starts into `adds`, per-vertex arrays of `vertices`, one status
                // each; all live past the synchronise below.
                unsafe { l.launch(grid(u64::from(count))) }?;
                stream.synchronize()?;
            } else {
                let contiguous = 0u32;
                // SAFETY: am_walk_insert(mailbox, touched, starts, adds, count, contiguous,
                // handles, degrees, capacities, statuses): as above, with one handle per
                // vertex; waited for below.
                let launch = unsafe {
                    rt.launch(&insert, grid(u64::from(count)), |a| {
                        a.arg(&touched)
                            .arg(&starts)
                            .arg(&adds)
                            .arg(&count)
                            .arg(&contiguous)
                            .arg(&mut handles)
                            .arg(&mut degrees)
                            .arg(&mut capacities)
                            .arg(&mut statuses);
                    })
                }?;
                launch.wait()?;
            }
            let insert_ms = ms(started);
            let codes = stream.clone_dtoh(&statuses)?;
            if let Some(i) = codes.iter().take(count as usize).position(|&c| c != 0) {
                bail!(
                    "{system}: batch {}: growing vertex {}'s list answered {:#x}",
                    b + 1,
                    batch.touched[i],
                    codes[i]
                );
            }
            host.apply(batch);
            let (walk_ms, htod, agree) =
                walk(rt, s, module, b, Some((&handles, &degrees, heap)), None)?;
            if !agree {
                tracing::error!(system, batch = b + 1, "walks differ from the CPU reference");
            }
            rows.push(BatchRow {
                system,
                batch: b as u32,
                edges: host.edges(),
                insert_ms,
                walk_ms: Some(walk_ms),
                memory_bytes: host.list_bytes(),
                htod_bytes: htod,
                walks_agree: Some(agree),
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        free(rt, s, module, &handles, heap)?;
        Ok(rows)
    }

    /// Free every list; for alignmalloc, the allocator must then be whole and empty.
    fn free(
        rt: &Runtime,
        s: &Shared<'_>,
        module: &Module,
        handles: &CudaSlice<u64>,
        heap: bool,
    ) -> anyhow::Result<()> {
        let stream = rt.stream()?.clone();
        let vertices = s.vertices as u32;
        if heap {
            let f = module.load_function("am_walk_free_heap")?;
            let mut l = stream.launch_builder(&f);
            l.arg(handles).arg(&vertices);
            // SAFETY: am_walk_free_heap(const u64* pointers, unsigned vertices).
            unsafe { l.launch(grid(u64::from(vertices))) }?;
            stream.synchronize()?;
            return Ok(());
        }
        let f = module.load_function("am_walk_free")?;
        let order: Vec<u32> = (0..vertices).collect();
        let order = stream.clone_htod(&order)?;
        let mut lane_statuses = stream.alloc_zeros::<u32>(s.vertices)?;
        // SAFETY: am_walk_free(mailbox, const u64* handles, const unsigned* order, unsigned
        // vertices, unsigned* lane_statuses).
        let launch = unsafe {
            rt.launch(&f, grid(u64::from(vertices)), |a| {
                a.arg(handles)
                    .arg(&order)
                    .arg(&vertices)
                    .arg(&mut lane_statuses);
            })
        }?;
        launch.wait()?;
        let freed = stream.clone_dtoh(&lane_statuses)?;
        ensure!(
            freed.iter().all(|&c| c == LaneStatus::Ok as u32),
            "alignmalloc: a list did not free cleanly"
        );
        rt.drain_caches()?;
        rt.check_invariants()
            .map_err(|e| anyhow::anyhow!("alignmalloc: allocator invariants after freeing: {e}"))?;
        ensure!(
            rt.is_empty(),
            "alignmalloc: lists left allocated after freeing them all"
        );
        Ok(())
    }

    /// The CSR rebuilt by the host in fresh managed memory after each batch.
    fn csr_rebuild(rt: &Runtime, s: &Shared<'_>, module: &Module) -> anyhow::Result<Vec<BatchRow>> {
        let system = "managed-csr-rebuild";
        let mut host = HostLists::new(s.vertices);
        let mut rows = Vec::new();
        let bar = crate::progress::steps(s.batches.len() as u64, system);
        for (b, batch) in s.batches.iter().enumerate() {
            host.apply(batch);
            let started = Instant::now();
            let (offsets, neighbors) = csr(&host.lists);
            let offsets_bytes = offsets.len() as u64 * 8;
            let neighbors_at = offsets_bytes.next_multiple_of(64 << 10);
            let bytes = neighbors_at + neighbors.len() as u64 * 4;
            let region = ManagedArena::new(
                rt.context()?,
                bytes.div_ceil(ortree::VABLOCK_BYTES) as usize,
                false,
            )?;
            // SAFETY: no kernel uses the fresh region yet.
            unsafe {
                region.write_from_host(0, bytemuck::cast_slice(&offsets))?;
                region.write_from_host(neighbors_at, bytemuck::cast_slice(&neighbors))?;
            }
            let insert_ms = ms(started);
            let (walk_ms, htod, agree) = walk(
                rt,
                s,
                module,
                b,
                None,
                Some((region.base(), region.base() + neighbors_at)),
            )?;
            rows.push(BatchRow {
                system,
                batch: b as u32,
                edges: host.edges(),
                insert_ms,
                walk_ms: Some(walk_ms),
                memory_bytes: bytes,
                htod_bytes: htod,
                walks_agree: Some(agree),
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{parse, temp};

    #[test]
    fn batches_group_by_source_in_arrival_order_and_keep_every_edge() {
        let edges = [(3, 1), (0, 2), (3, 0), (1, 1), (0, 5)];
        let b = batches(&edges, Direction::Undirected, 2);
        assert_eq!(b.len(), 2);
        // First batch: (3,1), (0,2) both ways.
        assert_eq!(b[0].touched, vec![0, 1, 2, 3]);
        assert_eq!(b[0].starts, vec![0, 1, 2, 3, 4]);
        assert_eq!(b[0].adds, vec![2, 3, 0, 1]);
        // Second: (3,0), (1,1) once (a self-loop), (0,5); vertex 0 gets 3 then 5.
        assert_eq!(b[1].touched, vec![0, 1, 3, 5]);
        assert_eq!(b[1].adds, vec![3, 5, 1, 0, 0]);
        let directed = batches(&edges, Direction::Directed, 5);
        let total: usize = directed.iter().map(|b| b.adds.len()).sum();
        assert_eq!(total, edges.len());
    }

    #[test]
    fn host_lists_grow_by_doubling_and_walk_what_they_hold() {
        assert_eq!(grown_capacity(0, 1), 4);
        assert_eq!(grown_capacity(4, 5), 8);
        assert_eq!(grown_capacity(4, 20), 20);
        let mut host = HostLists::new(3);
        for b in batches(
            &[(0, 1), (1, 2), (0, 2), (0, 1), (0, 0)],
            Direction::Directed,
            3,
        ) {
            host.apply(&b);
        }
        assert_eq!(host.lists[0], vec![1, 2, 1, 0]);
        assert_eq!(host.capacities, vec![4, 4, 0]);
        assert_eq!(host.edges(), 5);
        assert_eq!(host.list_bytes(), 32);
        // Vertex 2 has no list: a walk from it ends at once.
        let digests = host.digests(3, 5, 1);
        assert_eq!(digests[2], super::super::digest_step(0, 2));
    }

    #[test]
    fn the_simulator_grows_lists_through_the_runtime_and_every_walk_matches() {
        let json = temp("dynamic.json");
        let args: super::super::Args = parse(&[
            "--rmat",
            "10",
            "--batches",
            "8",
            "--length",
            "12",
            "--backend",
            "sim",
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        // Fails if a walk differs, or the lists are not all freed with the allocator whole.
        super::super::run(&args).unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(report["batches"], 8);
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 16, "two systems, eight batches");
        let ours: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["system"] == "alignmalloc")
            .collect();
        assert!(ours.iter().all(|r| r["walks_agree"] == true));
        let edges: Vec<u64> = ours.iter().map(|r| r["edges"].as_u64().unwrap()).collect();
        assert!(
            edges.windows(2).all(|w| w[0] < w[1]),
            "the graph grows: {edges:?}"
        );
        // No ratio of CPU warps' time against the host's CSR rebuild.
        assert!(
            report["totals"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["ratio_to_alignmalloc"].is_null())
        );
    }
}
