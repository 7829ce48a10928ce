//! A graph that changes: `walk --batches N` (edges streamed into an empty graph), `walk --rounds
//! R` (Bingo's rounds: the graph loaded but its last edges, then rounds of insertions and as
//! many deletions) and `walk --updates FILE` (an update file's batches after loading the graph).
//! After each batch every system applies it to its graph and the walks run on the graph so far,
//! checked against the CPU reference of the same lists ([`plan`] says how a batch changes a
//! list).
//!
//! Systems (GPU):
//! - `alignmalloc`: one list per vertex, changed inside a kernel (`am_walk_update`): a list
//!   that overflows or falls to a quarter moves to a list of its new capacity
//!   (`am::malloc_contiguous`, copy, `am::free`), one that empties is freed. A list is in one
//!   piece and the kernel reads and writes it through its plain pointer: any walker reads any
//!   list, so nothing gains from a warp's arrangement.
//! - `alignmalloc-arranged`: the same lists from `am::malloc` (arranged for the warp that
//!   allocated them), read and written through `am::ptr`.
//! - `csr-rebuild-gpu`: a CSR in device memory, rebuilt into a second one after each batch by a
//!   kernel (`am_csr_rebuild`, one warp per vertex: each list moves to its new place and the
//!   touched ones change there). Both CSRs are allocated once, for the most edges the graph has.
//! - `gallatin-arrays`: the lists of `alignmalloc` on Gallatin's device allocator (the harness
//!   bench/gallatin builds; left out, with a note, when it is not built).
//! - `cuda-malloc`: the lists of `alignmalloc` on CUDA's device `malloc` and `free`.
//! - `csr-rebuild-host`: the host rebuilds the whole CSR in fresh managed memory after each
//!   batch; the walk reads it there.
//!
//! Lists keep neighbours in arrival order, duplicates included (a multigraph of the stream), and
//! the CPU reference walks the same lists, so every walk is checked exactly. Walker `w` starts at
//! vertex `w mod V`; with --batches, `--batch-walkers` walkers (65 536 by default) run after each
//! batch, with --rounds and --updates a walk from every vertex (DeepWalk's) unless
//! `--batch-walkers` says fewer.
//!
//! On the simulator the lists are changed by CPU warps through the runtime (its mailbox, service
//! thread and layout), and the walks read them back through the runtime: the allocator's memory
//! is checked after every batch; no time there is a GPU's.

mod gpu;
#[cfg(test)]
mod kernel_twin;
pub mod plan;
mod sim;

use std::path::PathBuf;
use std::time::Instant;

use alignmalloc::internals::orchestrator;
use alignmalloc::settings::MAX_DEVICE_CACHE_FRACTION;
use alignmalloc::{BackendKind, Runtime};
use anyhow::{Context, ensure};
use serde::Serialize;

use super::Args;
use crate::graph::{Direction, EdgeStream, Format};
use crate::progress::note;
pub use plan::ListGrowth;
use plan::{Batch, HostLists};

/// The systems a changing graph runs, as `--systems` names them.
pub const SYSTEMS: [&str; 6] = [
    "alignmalloc",
    "alignmalloc-arranged",
    "csr-rebuild-gpu",
    "gallatin-arrays",
    "cuda-malloc",
    "csr-rebuild-host",
];

/// How the graph changes.
#[derive(Clone, Debug)]
pub enum Mode {
    /// `--batches N`: the edges in N batches of insertions, from an empty graph.
    Stream(u32),
    /// `--rounds R --round-edges B`.
    Rounds { rounds: u32, per_round: u64 },
    /// `--updates FILE`.
    Updates(PathBuf),
}

/// One system after one batch (or the load).
#[derive(Clone, Debug, Serialize)]
pub struct BatchRow {
    pub system: &'static str,
    /// `load` (the graph before the updates, --rounds and --updates) or `update`.
    pub phase: &'static str,
    /// 0 for the load, else the batch's number from 1.
    pub batch: u32,
    /// Directed edges in the graph after the batch.
    pub edges: u64,
    /// Lists the batch gave a new capacity (moved, or freed): each a free and, but for a freed
    /// one, an allocation for the list systems.
    pub lists_resized: u64,
    /// Applying the batch: the update kernel (GPU), the CSR rebuild, or CPU warps (sim).
    pub update_ms: f64,
    /// The walks after the batch (GPU only; none after the load).
    pub walk_ms: Option<f64>,
    /// Update and walks (GPU only).
    pub end_to_end_ms: Option<f64>,
    /// Bytes the system holds for the graph: the lists' capacities asked for, or one CSR.
    pub memory_bytes: u64,
    /// Bytes migrated to the GPU during the walk (CUPTI; GPU only).
    pub htod_bytes: Option<u64>,
    /// Every walk matched the CPU reference (`None`: no walk, or the walks were the
    /// reference's own).
    pub walks_agree: Option<bool>,
    /// alignmalloc's device caches during the update (`None` for the other systems).
    pub caches: Option<CacheRow>,
}

/// What alignmalloc's device caches did during one update.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CacheRow {
    /// Asks for a slab the host denied (the caches at their bound): those lanes went to the
    /// host through the mailbox.
    pub denials: u64,
    /// Slabs handed to the caches, and given back with every object freed.
    pub refills: u64,
    pub returns: u64,
    /// What the caches hold after the update.
    pub held_bytes: u64,
}

impl CacheRow {
    /// The change from `before` to `after`, with what `after` holds.
    fn between(
        before: Option<orchestrator::caches::CacheStatsSnapshot>,
        after: Option<orchestrator::caches::CacheStatsSnapshot>,
    ) -> Option<Self> {
        let (b, a) = (before?, after?);
        Some(Self {
            denials: a.denials - b.denials,
            refills: a.refills - b.refills,
            returns: a.returns - b.returns,
            held_bytes: a.held_bytes,
        })
    }
}

/// One system over all batches (the load apart).
#[derive(Clone, Debug, Serialize)]
pub struct Total {
    pub system: &'static str,
    /// Building the graph before the updates (--rounds, --updates).
    pub load_ms: Option<f64>,
    pub update_ms: f64,
    pub walk_ms: Option<f64>,
    /// Updates and walks, end to end (GPU only).
    pub end_to_end_ms: Option<f64>,
    /// Walker steps asked (walkers x length, every batch) per second of walk time.
    pub walk_steps_per_s: Option<f64>,
    /// `end_to_end_ms` over alignmalloc's (above 1: alignmalloc is faster); GPU runs only.
    pub ratio_to_alignmalloc: Option<f64>,
    pub walks_agree: Option<bool>,
}

#[derive(Serialize)]
struct Report {
    backend: String,
    device: String,
    graph: String,
    vertices: usize,
    /// `stream`, `rounds` or `updates`.
    mode: &'static str,
    /// Directed edges loaded before the first batch.
    edges_loaded: u64,
    batches: usize,
    /// Directed edges inserted and deleted by the batches.
    edges_inserted: u64,
    edges_deleted: u64,
    walkers_per_batch: u64,
    length: u32,
    seed: u64,
    /// How the list systems' lists grow when they overflow (`--list-growth`).
    list_growth: ListGrowth,
    /// The pool every allocator started with on the GPU (bytes; none on the sim backend).
    pool_bytes: Option<u64>,
    /// alignmalloc's arena (bytes).
    arena_bytes: u64,
    /// The most bytes alignmalloc's device caches could hold (`walk` lets them hold three
    /// quarters of the arena unless the settings say otherwise); none when they were off.
    cache_bound_bytes: Option<u64>,
    times: &'static str,
    /// Systems asked for that did not run or failed, with why.
    skipped: Vec<String>,
    totals: Vec<Total>,
    rows: Vec<BatchRow>,
}

/// What every system's run shares.
struct Shared<'a> {
    args: &'a Args,
    vertices: usize,
    walkers: u64,
    /// The graph before the first batch (--rounds, --updates).
    load: Option<&'a Batch>,
    batches: &'a [Batch],
    /// The reference digests after each batch.
    reference: &'a [Vec<u64>],
    /// The most edges the graph has after any batch.
    peak_edges: u64,
    /// The pool every GPU allocator starts with.
    pool_bytes: u64,
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
            ids: None,
        };
        return Ok((name, stream));
    }
    let (path, format) = match (&args.snap, &args.mtx) {
        (Some(p), _) => (p, Format::Snap),
        (_, Some(p)) => (p, Format::MatrixMarket),
        _ => anyhow::bail!("name a graph: --rmat SCALE, --snap FILE or --mtx FILE"),
    };
    let bar = crate::progress::bytes(0, "reading the graph");
    let stream = crate::graph::file_edges(path, format, args.direction, |read, size| {
        bar.set_length(size);
        bar.set_position(read);
    })?;
    bar.finish_and_clear();
    Ok((path.display().to_string(), stream))
}

/// The load (if any) and the batches `mode` asks of the graph.
fn plan_of(
    mode: &Mode,
    args: &Args,
    name: &str,
    stream: &EdgeStream,
) -> anyhow::Result<(Option<Batch>, Vec<Batch>)> {
    let edges = &stream.edges;
    match mode {
        Mode::Stream(count) => {
            ensure!(
                edges.len() as u64 >= u64::from(*count),
                "--batches {count}: the graph has only {} edges",
                edges.len()
            );
            Ok((None, plan::stream_batches(edges, stream.direction, *count)))
        }
        Mode::Rounds { rounds, per_round } => {
            let (load, batches) =
                plan::rounds(edges, stream.direction, *rounds, *per_round, args.seed)?;
            Ok((Some(load), batches))
        }
        Mode::Updates(path) => {
            let updates = graphio::read_updates_file(path)?;
            let load = plan::load_batch(edges, stream.direction);
            let batches = plan::file_batches(
                &updates,
                &path.display().to_string(),
                stream.ids.as_ref(),
                stream.vertices,
                stream.direction,
            )
            .with_context(|| format!("applying {} to {name}", path.display()))?;
            Ok((Some(load), batches))
        }
    }
}

/// `walk --batches`, `--rounds` or `--updates`.
pub fn run(args: &Args, mode: &Mode) -> anyhow::Result<()> {
    let gpu = args.check()?;
    if let Some(unknown) = args
        .systems
        .iter()
        .flatten()
        .find(|s| !SYSTEMS.contains(&s.as_str()))
    {
        anyhow::bail!(
            "--systems {unknown} walks a graph that does not change; a changing graph runs {}",
            SYSTEMS.join(", ")
        );
    }
    let (name, stream) = stream(args)?;
    let vertices = stream.vertices;
    ensure!(
        vertices < u32::MAX as usize,
        "{name}: more vertices than 32-bit ids"
    );
    let (load, batches) = plan_of(mode, args, &name, &stream)?;
    let mode_name = match mode {
        Mode::Stream(_) => "stream",
        Mode::Rounds { .. } => "rounds",
        Mode::Updates(_) => "updates",
    };
    drop(stream);
    let every_vertex = vertices as u64 * u64::from(args.walks_per_vertex);
    let walkers = match (mode, args.batch_walkers) {
        (_, Some(w)) => w.min(every_vertex),
        (Mode::Stream(_), None) => 65_536u64.min(every_vertex),
        (_, None) => every_vertex,
    };
    let inserted: u64 = batches.iter().map(|b| b.adds.len() as u64).sum();
    let deleted: u64 = batches.iter().map(|b| b.drops.len() as u64).sum();
    let loaded = load.as_ref().map_or(0, |l| l.adds.len() as u64);
    note!(
        "graph {name}: {vertices} vertices; {loaded} directed edges loaded, then {} batches \
         inserting {inserted} and deleting {deleted}; {walkers} walks of {} steps after each batch",
        batches.len(),
        args.length
    );
    // The reference after each batch; it also refuses a deletion of an edge the graph lacks.
    let started = Instant::now();
    let mut host = HostLists::new(vertices, args.list_growth);
    if let Some(load) = &load {
        host.apply(load)
            .map_err(|e| anyhow::anyhow!("the load deletes nothing, yet: {e:?}"))?;
    }
    let mut reference = Vec::with_capacity(batches.len());
    let (mut peak_edges, mut peak_list_bytes) = (host.edges(), host.list_bytes());
    let bar = crate::progress::steps(batches.len() as u64, "CPU reference");
    for (b, batch) in batches.iter().enumerate() {
        if let Err(missing) = host.apply(batch) {
            let at = match (&mode, missing.line) {
                (Mode::Updates(path), line) if line > 0 => format!("{}:{line}: ", path.display()),
                _ => String::new(),
            };
            anyhow::bail!(
                "{at}batch {} deletes the edge {} -> {} (dense ids), which the graph does not \
                 hold then",
                b + 1,
                missing.from,
                missing.to
            );
        }
        peak_edges = peak_edges.max(host.edges());
        peak_list_bytes = peak_list_bytes.max(host.list_bytes());
        reference.push(host.digests(walkers, args.length, args.seed));
        bar.inc(1);
    }
    bar.finish_and_clear();
    note!(
        "CPU reference: {} directed edges in the end (at most {peak_edges}), at most {:.1} MiB of \
         lists, in {:.1} s",
        host.edges(),
        peak_list_bytes as f64 / 1048576.0,
        started.elapsed().as_secs_f64()
    );
    drop(host);

    // On the GPU every allocator starts with the same pool, resident: four times the lists'
    // most bytes, at least 1 GiB (alignmalloc's arena, prefetched to the GPU; Gallatin's pool
    // and CUDA's heap are device memory).
    let pool_bytes = match args.pool_gib {
        Some(gib) => ((gib * (1u64 << 30) as f64) as u64).max(2 << 20),
        None => (peak_list_bytes * 4).max(1 << 30),
    };
    let arena_bytes = if gpu {
        pool_bytes
    } else {
        (peak_list_bytes * 8).clamp(256 << 20, 8 << 30)
    };
    // The caches may hold the most of the arena the runtime allows: every object here is a
    // list, and lists that move round after round leave slabs held by a few live lists each
    // (they go back only when all of theirs are freed), so at half the arena the rounds of
    // 1 000 000 edges were denied and went through the host; what the host serves here is only
    // lists over 4 MiB. ALIGNMALLOC_DEVICE_CACHE_BYTES or _FRACTION still decide when set.
    let rt = Runtime::builder()
        .backend(args.backend)
        .fault_counters(gpu)
        .arena_bytes(arena_bytes)
        .device_cache_fraction(MAX_DEVICE_CACHE_FRACTION)
        .build()
        .context("starting the runtime")?;
    note!("backend: {:?} ({})", rt.backend(), rt.backend_reason());
    if let Some(bound) = rt.cache_bound_bytes() {
        note!(
            "device caches: at most {:.1} GiB, {:.2} of the arena (walk's default {MAX_DEVICE_CACHE_FRACTION}, \
             the most allowed; ALIGNMALLOC_DEVICE_CACHE_FRACTION or _BYTES set another)",
            bound as f64 / (1u64 << 30) as f64,
            bound as f64 / rt.arena_bytes() as f64
        );
    }
    if rt.backend() == BackendKind::Cuda {
        let started = Instant::now();
        rt.prefetch_arena().context("moving the arena to the GPU")?;
        note!(
            "arena: {:.1} GiB, on the GPU before the first batch (prefetched in {:.0} ms, untimed)",
            rt.arena_bytes() as f64 / (1u64 << 30) as f64,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let shared = Shared {
        args,
        vertices,
        walkers,
        load: load.as_ref(),
        batches: &batches,
        reference: &reference,
        peak_edges,
        pool_bytes,
    };
    let mut skipped = Vec::new();
    let (rows, times) = match rt.backend() {
        BackendKind::Cuda => (
            {
                let (rows, left_out) = gpu::run(&rt, &shared)?;
                skipped = left_out;
                rows
            },
            "GPU kernel wall time (updates and walks); csr-rebuild-host's update is the host's time",
        ),
        BackendKind::Sim => (
            sim::run(&rt, &shared)?,
            "host time of CPU warps (not a GPU's); walks are checked, not timed",
        ),
    };
    // Host times of CPU warps are not compared with the host's CSR rebuild.
    let totals = totals(
        &rows,
        walkers * u64::from(args.length),
        rt.backend() == BackendKind::Cuda,
    );
    print(&rows, &totals, times);
    for line in cache_denials(&rows, rt.cache_bound_bytes()) {
        println!("{line}");
    }
    let report = Report {
        backend: format!("{:?}", rt.backend()),
        device: rt
            .device_info()
            .map_or_else(|| "none (simulated)".into(), |i| i.name.clone()),
        graph: name,
        vertices,
        mode: mode_name,
        list_growth: args.list_growth,
        pool_bytes: (rt.backend() == BackendKind::Cuda).then_some(pool_bytes),
        arena_bytes: rt.arena_bytes(),
        cache_bound_bytes: rt.cache_bound_bytes(),
        edges_loaded: loaded,
        batches: batches.len(),
        edges_inserted: inserted,
        edges_deleted: deleted,
        walkers_per_batch: walkers,
        length: args.length,
        seed: args.seed,
        times,
        skipped,
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

fn totals(rows: &[BatchRow], steps_per_batch: u64, timed: bool) -> Vec<Total> {
    let mut systems: Vec<&'static str> = Vec::new();
    for r in rows {
        if !systems.contains(&r.system) {
            systems.push(r.system);
        }
    }
    let mut totals: Vec<Total> = systems
        .iter()
        .map(|&system| {
            let mine: Vec<&BatchRow> = rows
                .iter()
                .filter(|r| r.system == system && r.phase == "update")
                .collect();
            let load_ms = rows
                .iter()
                .find(|r| r.system == system && r.phase == "load")
                .map(|r| r.update_ms);
            let update_ms: f64 = mine.iter().map(|r| r.update_ms).sum();
            let walk_ms: Option<f64> = mine.iter().map(|r| r.walk_ms).sum();
            Total {
                system,
                load_ms,
                update_ms,
                walk_ms,
                end_to_end_ms: timed.then(|| update_ms + walk_ms.unwrap_or(0.0)),
                walk_steps_per_s: walk_ms
                    .filter(|&w| w > 0.0)
                    .map(|w| (steps_per_batch * mine.len() as u64) as f64 / (w / 1e3)),
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
        .and_then(|t| t.end_to_end_ms);
    if let Some(ours) = ours.filter(|&o| o > 0.0) {
        for t in &mut totals {
            t.ratio_to_alignmalloc = t.end_to_end_ms.map(|e| e / ours);
        }
    }
    totals
}

fn print(rows: &[BatchRow], totals: &[Total], times: &str) {
    println!("times: {times}");
    println!(
        "{:<18} {:>6} {:>12} {:>10} {:>10} {:>10} {:>10} {:>6}",
        "system", "batch", "edges", "update ms", "walk ms", "MiB held", "HtoD MiB", "walks"
    );
    let last = rows.iter().map(|r| r.batch).max().unwrap_or(0);
    // The load, the first, a few in between and the last batch; the JSON has them all.
    let shown = |b: u32| b <= 1 || b == last || (last >= 4 && b.is_multiple_of((last / 4).max(1)));
    let dash = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |x| format!("{x:.d$}"));
    for r in rows.iter().filter(|r| shown(r.batch)) {
        let batch = if r.phase == "load" {
            "load".to_string()
        } else {
            r.batch.to_string()
        };
        println!(
            "{:<18} {:>6} {:>12} {:>10.3} {:>10} {:>10.1} {:>10} {:>6}",
            r.system,
            batch,
            r.edges,
            r.update_ms,
            dash(r.walk_ms, 3),
            r.memory_bytes as f64 / 1048576.0,
            dash(r.htod_bytes.map(|b| b as f64 / 1048576.0), 1),
            agree(r.walks_agree)
        );
    }
    println!(
        "{:<18} {:>10} {:>12} {:>10} {:>12} {:>10} {:>8} {:>6}",
        "total", "load ms", "update ms", "walk ms", "end to end", "Gsteps/s", "x ours", "walks"
    );
    for t in totals {
        println!(
            "{:<18} {:>10} {:>12.1} {:>10} {:>12} {:>10} {:>8} {:>6}",
            t.system,
            dash(t.load_ms, 1),
            t.update_ms,
            dash(t.walk_ms, 1),
            dash(t.end_to_end_ms, 1),
            dash(t.walk_steps_per_s.map(|s| s / 1e9), 2),
            dash(t.ratio_to_alignmalloc, 2),
            agree(t.walks_agree)
        );
    }
    println!(
        "totals over the batches (the load apart); x ours: end-to-end time over alignmalloc's \
         (above 1: alignmalloc is faster)"
    );
}

/// For each alignmalloc system whose device caches denied asks for a slab: how many, from which
/// batch, and what to do about it (those lanes allocated through the host from then on).
fn cache_denials(rows: &[BatchRow], bound_bytes: Option<u64>) -> Vec<String> {
    let mib = |b: u64| b as f64 / 1048576.0;
    let mut lines = Vec::new();
    for system in ["alignmalloc", "alignmalloc-arranged"] {
        let ours = || rows.iter().filter(|r| r.system == system);
        let denied = |r: &BatchRow| r.caches.is_some_and(|c| c.denials > 0);
        let Some(first) = ours().find(|r| denied(r)) else {
            continue;
        };
        let denials: u64 = ours().filter_map(|r| r.caches).map(|c| c.denials).sum();
        let held = first.caches.map_or(0, |c| c.held_bytes);
        let bound = bound_bytes.map_or(String::new(), |b| {
            format!(" of their {:.0} MiB bound", mib(b))
        });
        lines.push(format!(
            "{system}: the device caches denied {denials} asks for a slab, the first in batch {} \
             (holding {:.0} MiB{bound} for {:.0} MiB of lists): lanes of a denied class \
             allocated through the host from then on. A larger pool (--pool-gib), or a larger \
             bound where it is below 0.75 of the arena (ALIGNMALLOC_DEVICE_CACHE_FRACTION), keeps \
             them on the device (docs/caches.md)",
            first.batch,
            mib(held),
            mib(first.memory_bytes)
        ));
    }
    lines
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

#[cfg(test)]
mod tests {
    use crate::testing::{parse, temp};

    /// `walk` with `extra` on the simulator; its JSON report.
    fn simulate(extra: &[&str]) -> anyhow::Result<serde_json::Value> {
        let json = temp(&format!(
            "dynamic-{}.json",
            extra.join("-").replace('/', "_")
        ));
        let mut argv = vec!["--length", "12", "--backend", "sim", "--json"];
        argv.push(json.to_str().unwrap());
        argv.extend_from_slice(extra);
        let args: super::super::Args = parse(&argv).unwrap();
        super::super::run(&args)?;
        let report = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
        let _ = std::fs::remove_file(&json);
        Ok(report)
    }

    fn ours(report: &serde_json::Value) -> Vec<serde_json::Value> {
        report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["system"] == "alignmalloc")
            .cloned()
            .collect()
    }

    #[test]
    fn the_simulator_grows_lists_through_the_runtime_and_every_walk_matches() {
        // Fails if a walk differs, or the lists are not all freed with the allocator whole.
        let report = simulate(&["--rmat", "10", "--batches", "8"]).unwrap();
        assert_eq!(report["batches"], 8);
        assert_eq!(report["mode"], "stream");
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 16, "two systems, eight batches");
        let ours = ours(&report);
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
                .all(|t| t["ratio_to_alignmalloc"].is_null() && t["end_to_end_ms"].is_null())
        );
    }

    #[test]
    fn rounds_delete_as_they_insert_and_every_walk_after_every_round_matches() {
        // Three rounds of 1 000 insertions and 1 000 deletions (both directions) after a load:
        // lists shrink, move to smaller objects and are freed by CPU warps through the runtime.
        let report = simulate(&["--rmat", "9", "--rounds", "3", "--round-edges", "1000"]).unwrap();
        assert_eq!(report["mode"], "rounds");
        for key in ["edges_deleted", "edges_inserted"] {
            // 3 x 1 000 edges both ways, a self-loop one way.
            let n = report[key].as_u64().unwrap();
            assert!((5700..=6000).contains(&n), "{key}: {n}");
        }
        assert_eq!(report["walkers_per_batch"], 512, "a walk from every vertex");
        // walk's caches may hold three quarters of the arena, the most the runtime allows.
        let share =
            report["cache_bound_bytes"].as_f64().unwrap() / report["arena_bytes"].as_f64().unwrap();
        assert!((0.74..=0.75).contains(&share), "caches' share {share}");
        let ours = ours(&report);
        assert_eq!(ours[0]["phase"], "load");
        assert_eq!(ours.len(), 4);
        assert!(ours[1..].iter().all(|r| r["walks_agree"] == true));
    }

    #[test]
    fn lists_that_grow_by_half_hold_less_and_move_more_and_every_walk_matches() {
        let run = |growth: &str| {
            let report = simulate(&[
                "--rmat",
                "9",
                "--rounds",
                "3",
                "--round-edges",
                "1000",
                "--list-growth",
                growth,
            ])
            .unwrap();
            assert_eq!(report["list_growth"], growth);
            let ours = ours(&report);
            assert!(ours[1..].iter().all(|r| r["walks_agree"] == true));
            let last = ours.last().unwrap()["memory_bytes"].as_u64().unwrap();
            let moves: u64 = ours[1..]
                .iter()
                .map(|r| r["lists_resized"].as_u64().unwrap())
                .sum();
            (last, moves)
        };
        let (double, half) = (run("double"), run("half"));
        assert!(
            half.0 < double.0,
            "memory: half {half:?}, double {double:?}"
        );
        assert!(half.1 > double.1, "moves: half {half:?}, double {double:?}");
    }

    #[test]
    fn denials_of_the_caches_are_told_with_their_first_batch_and_what_to_do() {
        use super::{BatchRow, CacheRow, cache_denials};
        let row = |system, batch, denials| BatchRow {
            system,
            phase: "update",
            batch,
            edges: 0,
            lists_resized: 0,
            update_ms: 1.0,
            walk_ms: None,
            end_to_end_ms: None,
            memory_bytes: 100 << 20,
            htod_bytes: None,
            walks_agree: Some(true),
            caches: (system != "gallatin-arrays").then_some(CacheRow {
                denials,
                refills: 0,
                returns: 0,
                held_bytes: 300 << 20,
            }),
        };
        let rows = [
            row("alignmalloc", 1, 0),
            row("alignmalloc", 2, 0),
            row("gallatin-arrays", 2, 0),
            row("alignmalloc", 3, 2),
            row("alignmalloc", 4, 1),
            row("alignmalloc-arranged", 1, 0),
        ];
        let lines = cache_denials(&rows, Some(320 << 20));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with(
                "alignmalloc: the device caches denied 3 asks for a slab, the first in batch 3 \
                 (holding 300 MiB of their 320 MiB bound for 100 MiB of lists)"
            ) && lines[0].contains("ALIGNMALLOC_DEVICE_CACHE_FRACTION"),
            "{lines:?}"
        );
        assert!(cache_denials(&rows[..3], None).is_empty());
    }

    #[test]
    fn an_update_file_runs_and_a_bad_one_is_refused_with_its_line() {
        let graph = temp("dynamic-graph.txt");
        std::fs::write(&graph, "10 20\n20 30\n30 10\n30 40\n").unwrap();
        let updates = temp("dynamic-updates.txt");
        // Vertex 40 loses its only neighbour (its list is freed), gains one back, and 10 loses
        // both of its.
        std::fs::write(&updates, "- 30 40\n+ 40 10\n=\n- 10 20\n- 10 30\n- 40 10\n").unwrap();
        let (g, u) = (graph.to_str().unwrap(), updates.to_str().unwrap());
        let report = simulate(&["--snap", g, "--updates", u]).unwrap();
        let ours = ours(&report);
        assert_eq!(ours.len(), 3);
        assert!(ours[1..].iter().all(|r| r["walks_agree"] == true));
        assert_eq!(ours[2]["edges"], 2, "one undirected edge left: 20-30");
        std::fs::write(&updates, "+ 10 40\n=\n- 10 40\n- 10 40\n").unwrap();
        let e = simulate(&["--snap", g, "--updates", u])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("dynamic-updates.txt:4: batch 2 deletes the edge"),
            "{e}"
        );
        std::fs::write(&updates, "+ 10 50\n").unwrap();
        let e = simulate(&["--snap", g, "--updates", u]).unwrap_err();
        assert!(
            format!("{e:#}").contains(":1: vertex 50 is not in the graph"),
            "{e:#}"
        );
        let _ = std::fs::remove_file(&graph);
        let _ = std::fs::remove_file(&updates);
    }
}
