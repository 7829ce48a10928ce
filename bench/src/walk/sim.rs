//! `walk` on the sim backend: CPU warps allocate every list through the runtime's mailbox and
//! walk through the same layout, and uvmsim replays what the walk touches, with the cost model
//! fitted on the H200. Walk times here are modelled, never measured.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{orchestrator, translator};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use alignmalloc::CpuWarp;
use alignmalloc::{Handle, Runtime};
use anyhow::{Context, bail};
use orchestrator::LaneStatus;
use parking_lot::Mutex;
use translator::WARP_LANES;
use uvmsim::{Allocation, CostModel, Event, Kernel, SimConfig, Simulator, Trace, WarpTrace};

use super::{Args, NO_VERTEX, Placement, Reference, SystemRun, compare, digest_step, walk_random};
use crate::graph::Graph;
use crate::progress::note;

/// Read the 4-byte neighbour `i` of a list through the layout, as `am::ptr<unsigned>` does.
fn load_neighbor(warp: &CpuWarp<'_>, list: Handle, i: u64) -> u32 {
    let offset = i * 4;
    let word = warp.load(list, offset & !7);
    (word >> ((offset & 4) * 8)) as u32
}

/// Lists allocated by CPU warps (lane t of the warps takes vertex `order[t]`, as the build kernel
/// does), one warp after another, and filled through the host API.
fn build(
    rt: &Runtime,
    graph: &Graph,
    order: &[u32],
    contiguous: bool,
) -> anyhow::Result<(Vec<Handle>, f64)> {
    let vertices = graph.vertices() as u64;
    let handles: Vec<AtomicU64> = (0..vertices).map(|_| AtomicU64::new(0)).collect();
    let failure = Mutex::new(None);
    let started = Instant::now();
    // One warp at a time: the same seed gives the same placement, so the same figures.
    rt.run_warps_in_order(vertices.div_ceil(32) as u32, |warp| {
        let (first, mask) = warp.lanes_of(vertices);
        let mut sizes = [0u64; WARP_LANES];
        for (l, size) in sizes.iter_mut().enumerate() {
            if mask >> l & 1 == 1 {
                *size = graph.degree(order[(first + l as u64) as usize]) * 4;
            }
        }
        let result = if contiguous {
            warp.malloc_contiguous(mask, &sizes)
        } else {
            warp.malloc(mask, &sizes)
        };
        match result {
            Ok(got) => {
                for l in 0..WARP_LANES {
                    if mask >> l & 1 == 1 {
                        let v = order[(first + l as u64) as usize];
                        handles[v as usize].store(got[l].0, Ordering::Relaxed);
                    }
                }
            }
            Err(status) => *failure.lock() = Some((order[first as usize], status)),
        }
    })?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    if let Some((first, status)) = failure.into_inner() {
        bail!("allocating the list of vertex {first} and its warp's answered {status:?}");
    }
    let handles: Vec<Handle> = handles
        .into_iter()
        .map(|h| Handle(h.into_inner()))
        .collect();
    for (v, &h) in handles.iter().enumerate() {
        if !h.is_null() {
            rt.write(h, 0, bytemuck::cast_slice(graph.neighbors_of(v as u32)))?;
        }
    }
    Ok((handles, build_ms))
}

/// One warp's walks: its instructions (the list reads of its live lanes), digests and paths.
struct WarpWalk {
    warp: u64,
    trace: WarpTrace,
    digests: Vec<u64>,
    paths: Vec<u32>,
}

/// The walks by CPU warps through the lists, recording each step's addresses.
fn walk_lists(
    rt: &Runtime,
    graph: &Graph,
    lists: &[Handle],
    args: &Args,
    reference: &Reference,
) -> anyhow::Result<Vec<WarpWalk>> {
    let walkers = reference.walkers;
    let keep_paths = reference.paths.is_some();
    let stride = args.length as usize + 1;
    let out = Mutex::new(Vec::new());
    rt.run_warps(walkers.div_ceil(32) as u32, |warp| {
        let (first, mask) = warp.lanes_of(walkers);
        let n = mask.count_ones() as usize;
        let mut at: Vec<u32> = (0..n)
            .map(|l| ((first + l as u64) % graph.vertices() as u64) as u32)
            .collect();
        let mut digests: Vec<u64> = at.iter().map(|&v| digest_step(0, v)).collect();
        let mut paths = vec![NO_VERTEX; if keep_paths { n * stride } else { 0 }];
        if keep_paths {
            for (l, &v) in at.iter().enumerate() {
                paths[l * stride] = v;
            }
        }
        let mut alive = vec![true; n];
        let mut trace = WarpTrace::default();
        let mut addresses = Vec::with_capacity(WARP_LANES);
        for s in 0..args.length {
            addresses.clear();
            for l in 0..n {
                if !alive[l] {
                    continue;
                }
                let v = at[l];
                let d = graph.degree(v);
                if d == 0 {
                    alive[l] = false;
                    continue;
                }
                let i = walk_random(args.seed, first + l as u64, s) % d;
                let list = lists[v as usize];
                addresses.push(list.translate(i * 4));
                at[l] = load_neighbor(&warp, list, i);
                digests[l] = digest_step(digests[l], at[l]);
                if keep_paths {
                    paths[l * stride + s as usize + 1] = at[l];
                }
            }
            if addresses.is_empty() {
                break;
            }
            trace.push(&addresses);
        }
        out.lock().push(WarpWalk {
            warp: u64::from(warp.id()),
            trace,
            digests,
            paths,
        });
    })?;
    let mut walks = out.into_inner();
    walks.sort_by_key(|w| w.warp);
    Ok(walks)
}

/// Whether the warps' walks match the reference.
fn agree(walks: &[WarpWalk], reference: &Reference, system: &str) -> bool {
    let digests: Vec<u64> = walks
        .iter()
        .flat_map(|w| w.digests.iter().copied())
        .collect();
    let paths: Option<Vec<u32>> = reference
        .paths
        .as_ref()
        .map(|_| walks.iter().flat_map(|w| w.paths.iter().copied()).collect());
    match compare(reference, &digests, paths.as_deref()) {
        Ok(()) => true,
        Err(problem) => {
            tracing::error!(system, problem, "walks differ");
            false
        }
    }
}

/// Pages (4 KiB) holding any of `addresses`, merged into runs: what a host fill touches.
fn host_touches(mut addresses: Vec<u64>) -> Vec<Event> {
    addresses.iter_mut().for_each(|a| *a &= !4095);
    addresses.sort_unstable();
    addresses.dedup();
    let mut events: Vec<Event> = Vec::new();
    for page in addresses {
        match events.last_mut() {
            Some(Event::HostTouch { base, bytes }) if *base + *bytes == page => *bytes += 4096,
            _ => events.push(Event::HostTouch {
                base: page,
                bytes: 4096,
            }),
        }
    }
    events
}

/// Every list element's address.
fn list_elements(graph: &Graph, lists: &[Handle]) -> Vec<u64> {
    lists
        .iter()
        .enumerate()
        .flat_map(|(v, h)| (0..graph.degree(v as u32)).map(move |i| h.translate(i * 4)))
        .collect()
}

/// Replay `events` then the walk over `allocations`; the walk kernel's counts and modelled time.
fn model(
    allocations: Vec<Allocation>,
    mut events: Vec<Event>,
    walk: Vec<WarpTrace>,
    cost: CostModel,
) -> anyhow::Result<(uvmsim::Counts, f64)> {
    events.push(Event::Kernel(Kernel {
        name: "walk".into(),
        warps: walk,
    }));
    let trace = Trace {
        allocations,
        events,
    };
    let report = Simulator::run(
        SimConfig {
            cost,
            ..SimConfig::default()
        },
        &trace,
    )?;
    let k = report.kernels.last().context("the walk kernel ran")?;
    Ok((k.counts, k.modelled_ns))
}

fn alignmalloc(
    rt: &Runtime,
    graph: &Graph,
    args: &Args,
    reference: &Reference,
    system: &'static str,
    contiguous: bool,
    cost: CostModel,
) -> anyhow::Result<Vec<SystemRun>> {
    let order = super::allocation_order(graph, args.order);
    let (lists, build_ms) = build(rt, graph, &order, contiguous)?;
    let list_bytes = lists
        .iter()
        .filter(|h| !h.is_null())
        .map(|&h| rt.capacity(h))
        .sum::<Result<u64, _>>()?;
    let walks = walk_lists(rt, graph, &lists, args, reference)?;
    let walks_agree = agree(&walks, reference, system);
    let allocations: Vec<Allocation> = rt
        .arena_segments()
        .into_iter()
        .map(|(base, bytes)| Allocation { base, bytes })
        .collect();
    // Lists filled on the GPU migrate nothing, and the model prices migrations only (its
    // per-instruction cost fitted to 0): only the host placement is modelled.
    let events = host_touches(list_elements(graph, &lists));
    let traces = walks.into_iter().map(|w| w.trace).collect();
    let (counts, ns) = model(allocations, events, traces, cost)?;
    let runs = vec![modelled_run(
        system,
        Placement::Host,
        Some(build_ms),
        list_bytes,
        counts,
        ns,
        Some(walks_agree),
        reference,
    )];
    // Freed by warps, as a kernel would: lists from the device caches are the device's to free.
    let failed = AtomicU64::new(0);
    // In order too: the next system's lists are placed in what these frees leave.
    rt.run_warps_in_order(lists.len().div_ceil(WARP_LANES) as u32, |warp| {
        let (first, mask) = warp.lanes_of(lists.len() as u64);
        let handles = std::array::from_fn(|l| {
            lists
                .get(first as usize + l)
                .copied()
                .filter(|_| mask >> l & 1 == 1)
                .unwrap_or(Handle::NULL)
        });
        let outcome = warp.free(mask, &handles);
        let bad = outcome
            .lanes
            .iter()
            .filter(|&&s| s != LaneStatus::Ok)
            .count();
        failed.fetch_add(bad as u64, Ordering::Relaxed);
    })?;
    anyhow::ensure!(
        failed.into_inner() == 0,
        "{system}: a list did not free cleanly"
    );
    rt.drain_caches()?;
    rt.check_invariants()
        .map_err(|e| anyhow::anyhow!("{system}: allocator invariants after the walk: {e}"))?;
    anyhow::ensure!(
        rt.is_empty(),
        "{system}: lists left allocated after freeing them all"
    );
    Ok(runs)
}

#[allow(clippy::too_many_arguments)]
fn modelled_run(
    system: &'static str,
    placement: Placement,
    build_ms: Option<f64>,
    list_bytes: u64,
    counts: uvmsim::Counts,
    ns: f64,
    walks_agree: Option<bool>,
    reference: &Reference,
) -> SystemRun {
    let walk_ms = ns / 1e6;
    SystemRun {
        walk_ms: Some(walk_ms),
        walks_per_s: Some(reference.walkers as f64 / (walk_ms / 1e3)),
        htod_bytes: Some(counts.htod_bytes()),
        gpu_faults: Some(counts.faults_coalesced),
        walks_agree,
        ..SystemRun::new(system, placement, build_ms, list_bytes)
    }
}

/// The managed CSR baseline, traced from the same walks (the reference's paths).
fn managed_csr(
    graph: &Graph,
    args: &Args,
    reference: &Reference,
    cost: CostModel,
) -> anyhow::Result<SystemRun> {
    // Any 2 MiB-aligned base gives the same blocks.
    let base: u64 = 1 << 40;
    let offsets_bytes = graph.offsets.len() as u64 * 8;
    let neighbors_at = base + offsets_bytes.next_multiple_of(64 << 10);
    let bytes = neighbors_at - base + graph.edges() * 4;
    let full = super::reference_walks(graph, reference.walkers, args.length, args.seed, true);
    let paths = full.paths.as_ref().context("paths kept")?;
    let stride = args.length as usize + 1;
    let walks: Vec<WarpTrace> = paths
        .chunks(stride * WARP_LANES)
        .enumerate()
        .map(|(w, warp_paths)| {
            let mut trace = WarpTrace::default();
            for s in 0..args.length as usize {
                let mut degree_reads = Vec::new();
                let mut list_reads = Vec::new();
                for (l, path) in warp_paths.chunks(stride).enumerate() {
                    let (v, next) = (path[s], path[s + 1]);
                    if v == NO_VERTEX {
                        continue;
                    }
                    degree_reads.push(base + u64::from(v) * 8);
                    degree_reads.push(base + (u64::from(v) + 1) * 8);
                    if next != NO_VERTEX {
                        let walker = (w * WARP_LANES + l) as u64;
                        let i = walk_random(args.seed, walker, s as u32) % graph.degree(v);
                        list_reads.push(neighbors_at + (graph.offsets[v as usize] + i) * 4);
                    }
                }
                trace.push(&degree_reads);
                trace.push(&list_reads);
            }
            trace
        })
        .collect();
    let (counts, ns) = model(
        vec![Allocation { base, bytes }],
        vec![Event::HostTouch { base, bytes }],
        walks,
        cost,
    )?;
    // Traced from the reference itself: it checks no walk.
    Ok(modelled_run(
        "managed-csr",
        Placement::Host,
        None,
        bytes,
        counts,
        ns,
        None,
        reference,
    ))
}

pub fn run(
    rt: &Runtime,
    graph: &Graph,
    args: &Args,
    reference: &Reference,
) -> anyhow::Result<Vec<SystemRun>> {
    let cost = uvmsim::profile::H200_COST;
    note!(
        "simulator: walks by CPU warps through the runtime, times modelled by uvmsim's H200 profile; \
         lists filled by the host only (lists filled on the GPU migrate nothing, which the model does not price); \
         cuda-malloc, managed-csr-prefetch, managed-csr-host-mapped and the identity slot order need a GPU"
    );
    let mut runs = Vec::new();
    let bar = crate::progress::steps(3, "systems");
    for (system, contiguous) in [("alignmalloc", false), ("alignmalloc-contiguous", true)] {
        bar.set_message(system);
        runs.extend(alignmalloc(
            rt, graph, args, reference, system, contiguous, cost,
        )?);
        bar.inc(1);
    }
    bar.set_message("managed-csr");
    runs.push(managed_csr(graph, args, reference, cost)?);
    bar.finish_and_clear();
    Ok(runs)
}
