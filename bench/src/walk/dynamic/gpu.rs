//! Every system on the GPU, batch after batch. Each batch is copied to the device before its
//! update is timed, the same for every system; the update's time is the kernel's (with the CSR
//! rebuild, also the host's prefix sum of the degree changes and its copy), launch to
//! completion.

use alignmalloc::Runtime;
use alignmalloc::internals::gpu::ManagedArena;
use alignmalloc::internals::{device, orchestrator, ortree};
use anyhow::{Context, bail, ensure};
use cudarc::driver::sys::CUlimit;
use cudarc::driver::{CudaSlice, CudaStream, PushKernelArg};
use orchestrator::LaneStatus;
use std::sync::Arc;
use std::time::Instant;

use super::plan::{Batch, HostLists};
use super::{BatchRow, CacheRow, Shared, csr, ms};
use crate::gallatin::{Gallatin, ListBatch};
use crate::launch::grid;
use crate::progress::note;

type Module = Arc<cudarc::driver::CudaModule>;

/// The statuses device/kernels/graph_update.cuh gives a touched vertex.
pub(super) const ALLOC_FAILED: u32 = 0xFF;
pub(super) const FREE_FAILED: u32 = 0x100;
pub(super) const MISSING_EDGE: u32 = 0x200;

/// Every system's rows, and the systems left out with why.
pub fn run(rt: &Runtime, s: &Shared<'_>) -> anyhow::Result<(Vec<BatchRow>, Vec<String>)> {
    let mut skipped = Vec::new();
    if s.args.walks("cuda-malloc") {
        // CUDA's heap: the others' pool twice over (at four times the lists' bytes it ran out
        // at R-MAT 22 with 100 batches) plus 256 bytes a vertex; set before any kernel calls
        // malloc.
        let heap = s.pool_bytes * 2 + s.vertices as u64 * 256;
        rt.context()?
            .set_limit(CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, heap as usize)
            .context("sizing CUDA's device heap")?;
    }
    let module = rt.compile(device::WALK.path, device::WALK.text)?;
    // alignmalloc's failures end the run; a baseline's is reported and the others go on.
    let mut rows = Vec::new();
    if s.args.walks("alignmalloc") {
        rows.extend(lists(rt, s, &module, ListSystem::Alignmalloc)?);
    }
    if s.args.walks("alignmalloc-arranged") {
        rows.extend(lists(rt, s, &module, ListSystem::AlignmallocArranged)?);
    }
    let mut baseline = |system: &str, result: anyhow::Result<Vec<BatchRow>>| match result {
        Ok(r) => rows.extend(r),
        Err(e) => {
            note!("{system}: not run or failed: {e:#}");
            skipped.push(format!("{system}: {e:#}"));
        }
    };
    if s.args.walks("csr-rebuild-gpu") {
        baseline("csr-rebuild-gpu", csr_on_gpu(rt, s, &module));
    }
    if s.args.walks("gallatin-arrays") {
        match crate::gallatin::load_beside(rt, s.pool_bytes, s.args.seed) {
            (Some(harness), _) => {
                baseline("gallatin-arrays", gallatin_lists(rt, s, &module, &harness));
            }
            (None, why) => {
                let why = why.unwrap_or_default();
                let named = s
                    .args
                    .systems
                    .iter()
                    .flatten()
                    .any(|x| x == "gallatin-arrays");
                ensure!(
                    !named,
                    "--systems gallatin-arrays: the Gallatin harness: {why}"
                );
                baseline("gallatin-arrays", Err(anyhow::anyhow!("not run: {why}")));
            }
        }
    }
    if s.args.walks("cuda-malloc") {
        baseline("cuda-malloc", lists(rt, s, &module, ListSystem::CudaMalloc));
    }
    if s.args.walks("csr-rebuild-host") {
        baseline("csr-rebuild-host", csr_on_host(rt, s, &module));
    }
    Ok((rows, skipped))
}

/// The load (phase `load`, number 0) and the batches (`update`, from 1).
fn steps<'a>(s: &'a Shared<'_>) -> impl Iterator<Item = (&'static str, usize, &'a Batch)> {
    let load = s.load.into_iter().map(|l| ("load", 0, l));
    load.chain(
        s.batches
            .iter()
            .enumerate()
            .map(|(b, batch)| ("update", b + 1, batch)),
    )
}

/// A progress bar over a system's steps (the load and the batches).
fn progress(s: &Shared<'_>, system: &str) -> indicatif::ProgressBar {
    crate::progress::steps(
        (s.batches.len() + usize::from(s.load.is_some())) as u64,
        system,
    )
}

/// A batch on the device.
struct DeviceBatch {
    touched: CudaSlice<u32>,
    starts: CudaSlice<u32>,
    adds: CudaSlice<u32>,
    drop_starts: CudaSlice<u32>,
    drops: CudaSlice<u32>,
    /// One zeroed word per drop (graph_update.cuh's `seen`).
    seen: CudaSlice<u32>,
    count: u32,
}

fn upload(stream: &Arc<CudaStream>, batch: &Batch) -> anyhow::Result<DeviceBatch> {
    // An empty array still gets one element: a kernel argument needs an allocation.
    let copy = |v: &[u32]| {
        if v.is_empty() {
            stream.alloc_zeros::<u32>(1)
        } else {
            stream.clone_htod(v)
        }
    };
    Ok(DeviceBatch {
        touched: copy(&batch.touched)?,
        starts: copy(&batch.starts)?,
        adds: copy(&batch.adds)?,
        drop_starts: copy(&batch.drop_starts)?,
        drops: copy(&batch.drops)?,
        seen: stream.alloc_zeros::<u32>(batch.drops.len().max(1))?,
        count: batch.touched.len() as u32,
    })
}

/// Stop at the first touched vertex whose update failed, saying why.
fn check_statuses(system: &str, number: usize, batch: &Batch, codes: &[u32]) -> anyhow::Result<()> {
    let Some(i) = codes.iter().take(batch.touched.len()).position(|&c| c != 0) else {
        return Ok(());
    };
    let code = codes[i];
    let why = match code {
        MISSING_EDGE => "a deleted neighbour was not in its list".to_string(),
        ALLOC_FAILED => "the allocator gave it no memory".to_string(),
        c if (FREE_FAILED..MISSING_EDGE).contains(&c) => format!(
            "freeing its old list answered {:?}",
            LaneStatus::from_code((c - FREE_FAILED) as u8)
        ),
        c => format!("allocating its new list answered status {c:#x}"),
    };
    bail!(
        "{system}: batch {number}: vertex {}: {why}",
        batch.touched[i]
    )
}

/// What a walk reads.
enum Graph<'a> {
    /// Per-vertex lists (`raw`: device-heap pointers, else alignmalloc handles).
    Lists(&'a CudaSlice<u64>, &'a CudaSlice<u32>, bool),
    /// A CSR in device memory.
    Csr(&'a CudaSlice<u64>, &'a CudaSlice<u32>),
    /// A CSR in managed memory (offsets, neighbours).
    Managed(u64, u64),
    /// Per-vertex lists of raw pointers and their degrees, by device address (the Gallatin
    /// harness's).
    RawLists(u64, u64),
}

/// The walks after batch `number` (from 1); their time, HtoD bytes and whether they matched.
fn walk(
    rt: &Runtime,
    s: &Shared<'_>,
    module: &Module,
    number: usize,
    graph: Graph<'_>,
) -> anyhow::Result<(f64, Option<u64>, bool)> {
    let stream = rt.stream()?.clone();
    let mut digests = stream.alloc_zeros::<u64>(s.walkers as usize)?;
    let vertices = s.vertices as u32;
    let (walkers, length, seed) = (s.walkers, s.args.length, s.args.seed);
    let null_paths: u64 = 0;
    let (lists_fn, csr_fn) = (
        module.load_function("am_walk_lists")?,
        module.load_function("am_walk_csr")?,
    );
    rt.take_faults_if_counting()?;
    let started = Instant::now();
    let mut l = match graph {
        Graph::Lists(lists, degrees, raw) => {
            let mut l = stream.launch_builder(&lists_fn);
            l.arg(lists)
                .arg(degrees)
                .arg(if raw { &1u32 } else { &0u32 });
            l
        }
        Graph::Csr(offsets, neighbors) => {
            let mut l = stream.launch_builder(&csr_fn);
            l.arg(offsets).arg(neighbors);
            l
        }
        Graph::Managed(ref offsets, ref neighbors) => {
            let mut l = stream.launch_builder(&csr_fn);
            l.arg(offsets).arg(neighbors);
            l
        }
        Graph::RawLists(ref lists, ref degrees) => {
            let mut l = stream.launch_builder(&lists_fn);
            l.arg(lists).arg(degrees).arg(&1u32);
            l
        }
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
    // u64* digests): every walker (0..walkers); one list and degree per vertex, or a CSR in
    // device or managed memory that outlives the walk; no paths; one digest per walker; all
    // live past the synchronise below.
    unsafe { l.launch(grid(walkers)) }?;
    stream.synchronize()?;
    let walk_ms = ms(started);
    let faults = rt.take_faults_if_counting()?;
    let got = stream.clone_dtoh(&digests)?;
    Ok((
        walk_ms,
        faults.map(|f| f.total.htod_bytes),
        got == s.reference[number - 1],
    ))
}

/// The walks after step `number` when it was an update (none after the load), a mismatch
/// logged.
fn walk_after(
    rt: &Runtime,
    s: &Shared<'_>,
    module: &Module,
    (system, phase, number): (&str, &str, usize),
    graph: Graph<'_>,
) -> anyhow::Result<Option<(f64, Option<u64>, bool)>> {
    if phase != "update" {
        return Ok(None);
    }
    let walked = walk(rt, s, module, number, graph)?;
    if !walked.2 {
        tracing::error!(
            system,
            batch = number,
            "walks differ from the CPU reference"
        );
    }
    Ok(Some(walked))
}

/// One system's row after a step (`at`: its phase, number and the lists it resized); the
/// walk's figures when it walked.
fn row(
    system: &'static str,
    at: (&'static str, usize, u64),
    host: &HostLists,
    update_ms: f64,
    memory_bytes: u64,
    walked: Option<(f64, Option<u64>, bool)>,
) -> BatchRow {
    let (phase, number, lists_resized) = at;
    BatchRow {
        system,
        phase,
        batch: number as u32,
        edges: host.edges(),
        lists_resized,
        update_ms,
        walk_ms: walked.map(|w| w.0),
        end_to_end_ms: Some(update_ms + walked.map_or(0.0, |w| w.0)),
        memory_bytes,
        htod_bytes: walked.and_then(|w| w.1),
        walks_agree: walked.map(|w| w.2),
        caches: None,
    }
}

/// Who keeps the lists of `lists`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ListSystem {
    /// `am::malloc_contiguous`: each list in one piece, read and written through its plain
    /// pointer.
    Alignmalloc,
    /// `am::malloc`: lists arranged for the warp that allocated them, through `am::ptr`.
    AlignmallocArranged,
    /// CUDA's device malloc.
    CudaMalloc,
}

/// Per-vertex lists changed by the update kernel, batch after batch.
fn lists(
    rt: &Runtime,
    s: &Shared<'_>,
    module: &Module,
    kind: ListSystem,
) -> anyhow::Result<Vec<BatchRow>> {
    let heap = kind == ListSystem::CudaMalloc;
    let system = match kind {
        ListSystem::Alignmalloc => "alignmalloc",
        ListSystem::AlignmallocArranged => "alignmalloc-arranged",
        ListSystem::CudaMalloc => "cuda-malloc",
    };
    let update = module.load_function(if heap {
        "am_walk_update_heap"
    } else {
        "am_walk_update"
    })?;
    let stream = rt.stream()?.clone();
    let v = s.vertices;
    let mut handles = stream.alloc_zeros::<u64>(v)?;
    let mut degrees = stream.alloc_zeros::<u32>(v)?;
    let mut capacities = stream.alloc_zeros::<u32>(v)?;
    let mut host = HostLists::new(v, s.args.list_growth);
    let growth_shift = s.args.list_growth.shift();
    let mut rows = Vec::new();
    let bar = progress(s, system);
    for (phase, number, batch) in steps(s) {
        let mut d = upload(&stream, batch)?;
        let mut statuses = stream.alloc_zeros::<u32>(batch.touched.len().max(1))?;
        let caches_before = rt.cache_stats().filter(|_| !heap);
        let started = Instant::now();
        if heap {
            let mut l = stream.launch_builder(&update);
            l.arg(&d.touched)
                .arg(&d.starts)
                .arg(&d.adds)
                .arg(&d.drop_starts)
                .arg(&d.drops)
                .arg(&mut d.seen)
                .arg(&d.count)
                .arg(&growth_shift)
                .arg(&mut handles)
                .arg(&mut degrees)
                .arg(&mut capacities)
                .arg(&mut statuses);
            // SAFETY: am_walk_update_heap(touched, starts, adds, drop_starts, drops, unsigned*
            // seen, unsigned count, unsigned growth_shift, u64* pointers, unsigned* degrees,
            // unsigned* capacities,
            // unsigned* statuses): `count` touched vertices with count + 1 starts into adds and
            // drops, one zeroed seen word per drop, per-vertex arrays of `vertices`, one status
            // each; whole warps (grid's blocks are multiples of 32); all live past the
            // synchronise below.
            unsafe { l.launch(grid(u64::from(d.count))) }?;
            stream.synchronize()?;
        } else {
            let contiguous = u32::from(kind == ListSystem::Alignmalloc);
            // SAFETY: am_walk_update(mailbox, the batch as above, unsigned growth_shift, unsigned
            // contiguous, handles, degrees, capacities, statuses): as above, with one handle per
            // vertex; waited for below.
            let launch = unsafe {
                rt.launch(&update, grid(u64::from(d.count)), |a| {
                    a.arg(&d.touched)
                        .arg(&d.starts)
                        .arg(&d.adds)
                        .arg(&d.drop_starts)
                        .arg(&d.drops)
                        .arg(&mut d.seen)
                        .arg(&d.count)
                        .arg(&growth_shift)
                        .arg(&contiguous)
                        .arg(&mut handles)
                        .arg(&mut degrees)
                        .arg(&mut capacities)
                        .arg(&mut statuses);
                })
            }?;
            launch.wait()?;
        }
        let update_ms = ms(started);
        let caches = CacheRow::between(caches_before, rt.cache_stats());
        check_statuses(system, number, batch, &stream.clone_dtoh(&statuses)?)?;
        let resized = host.follow(batch)?;
        let graph = Graph::Lists(&handles, &degrees, heap);
        let walked = walk_after(rt, s, module, (system, phase, number), graph)?;
        rows.push(BatchRow {
            caches,
            ..row(
                system,
                (phase, number, resized),
                &host,
                update_ms,
                host.list_bytes(),
                walked,
            )
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (degrees, capacities) = (
        stream.clone_dtoh(&degrees)?,
        stream.clone_dtoh(&capacities)?,
    );
    matches_host(system, &host, &degrees, &capacities)?;
    free(rt, s, module, &handles, heap)?;
    Ok(rows)
}

/// The kernel's degrees and capacities against the host's twin (graph_update.cuh's
/// resized_capacity against plan::resized_capacity).
fn matches_host(
    system: &str,
    host: &HostLists,
    degrees: &[u32],
    capacities: &[u32],
) -> anyhow::Result<()> {
    for (vertex, list) in host.lists.iter().enumerate() {
        let want = (list.len() as u32, host.capacities[vertex]);
        let got = (degrees[vertex], capacities[vertex]);
        ensure!(
            got == want,
            "{system}: vertex {vertex} ends with degree {} and capacity {}, the host's model \
             with {} and {}",
            got.0,
            got.1,
            want.0,
            want.1
        );
    }
    Ok(())
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

/// Per-vertex lists on Gallatin (the harness keeps them), changed by the same kernel as
/// alignmalloc's lists.
fn gallatin_lists(
    rt: &Runtime,
    s: &Shared<'_>,
    module: &Module,
    harness: &Gallatin,
) -> anyhow::Result<Vec<BatchRow>> {
    let system = "gallatin-arrays";
    let lists = harness.lists(s.vertices as u32, s.args.list_growth.shift())?;
    let (lists_at, degrees_at) = lists.arrays()?;
    let mut host = HostLists::new(s.vertices, s.args.list_growth);
    let mut rows = Vec::new();
    let bar = progress(s, system);
    for (phase, number, batch) in steps(s) {
        let (update_ms, codes) = lists.update(&ListBatch {
            touched: &batch.touched,
            starts: &batch.starts,
            adds: &batch.adds,
            drop_starts: &batch.drop_starts,
            drops: &batch.drops,
        })?;
        check_statuses(system, number, batch, &codes)?;
        let resized = host.follow(batch)?;
        let graph = Graph::RawLists(lists_at, degrees_at);
        let walked = walk_after(rt, s, module, (system, phase, number), graph)?;
        rows.push(row(
            system,
            (phase, number, resized),
            &host,
            update_ms,
            host.list_bytes(),
            walked,
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (degrees, capacities) = lists.read()?;
    matches_host(system, &host, &degrees, &capacities)?;
    Ok(rows)
}

/// A CSR in device memory, rebuilt into the other of two after each step by `am_csr_rebuild`;
/// both hold the most edges the graph ever has, allocated before the first step.
fn csr_on_gpu(rt: &Runtime, s: &Shared<'_>, module: &Module) -> anyhow::Result<Vec<BatchRow>> {
    let system = "csr-rebuild-gpu";
    let rebuild = module.load_function("am_csr_rebuild")?;
    let stream = rt.stream()?.clone();
    let v = s.vertices;
    let mut offsets = [
        stream.alloc_zeros::<u64>(v + 1)?,
        stream.alloc_zeros::<u64>(v + 1)?,
    ];
    let capacity = (s.peak_edges as usize).max(1);
    let mut neighbors = [
        stream.alloc_zeros::<u32>(capacity)?,
        stream.alloc_zeros::<u32>(capacity)?,
    ];
    let mut current = 0usize;
    let mut host = HostLists::new(v, s.args.list_growth);
    let mut rows = Vec::new();
    let vertices = v as u32;
    let bar = progress(s, system);
    for (phase, number, batch) in steps(s) {
        let mut d = upload(&stream, batch)?;
        let mut statuses = stream.alloc_zeros::<u32>(batch.touched.len().max(1))?;
        let started = Instant::now();
        // Where each vertex's list moves: the prefix sums of the touched vertices' changes.
        let mut shift = Vec::with_capacity(batch.touched.len() + 1);
        let mut sum = 0i64;
        shift.push(0i64);
        for i in 0..batch.touched.len() {
            sum += batch.adds_of(i).len() as i64 - batch.drops_of(i).len() as i64;
            shift.push(sum);
        }
        let shift = stream.clone_htod(&shift)?;
        {
            let [first, second] = &mut offsets;
            let [first_neighbors, second_neighbors] = &mut neighbors;
            let (old, old_neighbors, new, new_neighbors) = if current == 0 {
                (&*first, first_neighbors, second, second_neighbors)
            } else {
                (&*second, second_neighbors, first, first_neighbors)
            };
            let mut l = stream.launch_builder(&rebuild);
            l.arg(&d.touched)
                .arg(&d.starts)
                .arg(&d.adds)
                .arg(&d.drop_starts)
                .arg(&d.drops)
                .arg(&mut d.seen)
                .arg(&d.count)
                .arg(&shift)
                .arg(old)
                .arg(old_neighbors)
                .arg(&vertices)
                .arg(new)
                .arg(new_neighbors)
                .arg(&mut statuses);
            // SAFETY: am_csr_rebuild(the batch as am_walk_update's, const long long* shift
            // (count + 1), const u64* old_offsets, unsigned* old_neighbors (the deletions are
            // made there), unsigned vertices, u64* offsets, unsigned* neighbors, unsigned*
            // statuses): offsets of
            // vertices + 1, each neighbours array holds the most edges the graph has; one warp
            // per vertex; all live past the synchronise below.
            unsafe { l.launch(grid(s.vertices as u64 * 32)) }?;
        }
        stream.synchronize()?;
        let update_ms = ms(started);
        current = 1 - current;
        check_statuses(system, number, batch, &stream.clone_dtoh(&statuses)?)?;
        let resized = host.follow(batch)?;
        let graph = Graph::Csr(&offsets[current], &neighbors[current]);
        let walked = walk_after(rt, s, module, (system, phase, number), graph)?;
        let bytes = (v as u64 + 1) * 8 + host.edges() * 4;
        rows.push(row(
            system,
            (phase, number, resized),
            &host,
            update_ms,
            bytes,
            walked,
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// The CSR rebuilt by the host in fresh managed memory after each step.
fn csr_on_host(rt: &Runtime, s: &Shared<'_>, module: &Module) -> anyhow::Result<Vec<BatchRow>> {
    let system = "csr-rebuild-host";
    let mut host = HostLists::new(s.vertices, s.args.list_growth);
    let mut rows = Vec::new();
    let bar = progress(s, system);
    for (phase, number, batch) in steps(s) {
        let resized = host.follow(batch)?;
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
        let update_ms = ms(started);
        let graph = Graph::Managed(region.base(), region.base() + neighbors_at);
        let walked = walk_after(rt, s, module, (system, phase, number), graph)?;
        let memory = offsets_bytes + neighbors.len() as u64 * 4;
        rows.push(row(
            system,
            (phase, number, resized),
            &host,
            update_ms,
            memory,
            walked,
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(rows)
}
