//! `alignmalloc access`: how fast kernels read what they allocated, with the data first on the
//! host.
//!
//! - `random`: 1 024 threads x 100 reads over per-thread ranges of 1 KiB to 8 MiB;
//! - `large`: 128 threads over 1 MiB to 16 MiB;
//!
//! each in three patterns (bench/src/patterns.rs): the lanes of a warp reading the same random
//! offsets (lockstep), independent random offsets, and each lane sweeping its range. Systems, on
//! the same offsets: `alignmalloc` (objects from `am::malloc` in a kernel), `alignmalloc-contiguous`
//! (`am::malloc_contiguous`: arrangement off), `cuda-malloc` (CUDA's device heap: device memory
//! that never migrates, so it is the floor, not a competitor on migration) and
//! `alignmalloc-identity-order` (a second runtime whose arranged chunks use the identity slot
//! order instead of the pattern order), and `managed` (one plain `cuMemAllocManaged` region, each
//! thread's range in turn, no advice: what a program that does not use an allocator has). Before
//! each read
//! kernel the host writes every alignmalloc object (so its pages start on the host); the read
//! kernel's wall time is the median of `--repeats` after a warm-up. Objects are allocated and freed
//! again for every repeat, so later repeats reuse memory that has moved both ways, as a program's
//! loop would.
//!
//! `--gpu-memory-gib N` holds all but N GiB of the GPU's memory from before the first row
//! (`balloon`), so rows whose objects are larger page in and out under the real driver;
//! `--placement` sets alignmalloc's arena placement (docs/placement.md). On the simulator the same
//! option models N GiB of GPU memory, and `--gpu-json` sets a GPU run's rows beside the model's
//! (model/GPU; ratios hidden where the model is off by more than 30%).
//!
//! Without a GPU the same patterns over the same two layouts go through uvmsim (modelled times,
//! with the H200's constants, said so in the report).

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, ortree, translator};

use std::path::PathBuf;
use std::time::Instant;

use alignmalloc::internals::gpu::ManagedArena;
use alignmalloc::{BackendChoice, Handle, Runtime};
use anyhow::{Context, bail};
use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use serde::Serialize;
use translator::SlotOrder;
use uvmsim::{SimConfig, Simulator};

use crate::alloc::System;
use crate::cli;
use crate::launch::grid;
use crate::patterns::{Layout, Pattern, Spec};
use crate::progress::note;
use crate::stats::{median, median_present};

/// Options of `access`.
#[derive(clap::Args)]
pub struct Args {
    /// Per-thread ranges (KiB, powers of two) of the random test, 1 024 threads.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "1,4,16,64,256,1024,2048,8192", value_parser = cli::power_of_two_kib)]
    random_kib: Vec<u64>,
    /// Per-thread ranges (KiB) of the large test, 128 threads.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "1024,4096,16384", value_parser = cli::power_of_two_kib)]
    large_kib: Vec<u64>,
    /// Reads per thread.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    reads: u32,
    /// Timed repeats per row (median reported), after one warm-up.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repeats: u32,
    /// Seed of the random offsets.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Backend: auto (the GPU when there is one, else the simulator), cuda or sim.
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Leave the reads only this much GPU memory (GiB; a device allocation holds the rest from
    /// before the first row): rows whose objects are larger are paged in and out by the
    /// driver. GPU only; `cuda-malloc` (a device heap, never paged) and the identity-order
    /// rows are left out.
    #[arg(long, value_name = "GIB", value_parser = crate::balloon::gib)]
    gpu_memory_gib: Option<f64>,
    #[command(flatten)]
    placement: crate::arena_placement::PlacementArgs,
    /// On the simulator: a GPU run's JSON of the same rows (`access --json` on a GPU, same
    /// options), set beside the model's (`model/GPU` per row). Where the model is off by more
    /// than 30% its ratios are not shown.
    #[arg(long, value_name = "FILE")]
    gpu_json: Option<PathBuf>,
}

/// How far the model may be from the GPU before its ratios are not shown.
const MODEL_TOLERANCE: f64 = 0.3;

const PATTERNS: [Pattern; 3] = [Pattern::Lockstep, Pattern::Independent, Pattern::Sweep];

/// One row of the report.
#[derive(Clone, Debug, Serialize)]
struct Row {
    test: &'static str,
    threads: u32,
    range_bytes: u64,
    pattern: Pattern,
    system: &'static str,
    /// The read kernel, ms: median on the GPU, modelled on sim.
    ms: f64,
    ms_repeats: Vec<f64>,
    /// Time over alignmalloc's on the same row (above 1: alignmalloc is faster).
    ratio_to_alignmalloc: Option<f64>,
    /// Migrated to the GPU during the read kernel (CUPTI on the GPU, a lower bound under load;
    /// modelled on sim); `None` where the counters are off (another tool holds CUPTI).
    htod_bytes: Option<u64>,
    /// Migrated back to the host during the read kernel (evictions under pressure; CUPTI on the
    /// GPU); `None` where the counters are off and on the simulator.
    dtoh_bytes: Option<u64>,
    /// GPU page fault groups during the read kernel (CUPTI); `None` where the counters are off
    /// and on the simulator, whose faults are pages, a unit the GPU's groups do not share
    /// (docs/uvmsim.md).
    gpu_fault_groups: Option<u64>,
    /// What the row's objects hold, GiB (threads x range).
    working_set_gib: f64,
    /// GiB of GPU memory the reads had (`--gpu-memory-gib`, as measured once the rest was
    /// held back); `None`: the whole card. On the simulator: the GPU memory modelled.
    gpu_memory_gib: Option<f64>,
    /// On the simulator with `--gpu-json`: the GPU's time for the same row, ms.
    gpu_ms: Option<f64>,
    /// `ms` over `gpu_ms`: how far the model is from the GPU.
    model_over_gpu: Option<f64>,
}

impl Row {
    fn new(
        (test, threads, range_bytes): (&'static str, u32, u64),
        pattern: Pattern,
        system: &'static str,
        ms: f64,
        ms_repeats: Vec<f64>,
        htod_bytes: Option<u64>,
    ) -> Self {
        Self {
            test,
            threads,
            range_bytes,
            pattern,
            system,
            ms,
            ms_repeats,
            ratio_to_alignmalloc: None,
            htod_bytes,
            working_set_gib: (u64::from(threads) * range_bytes) as f64 / crate::balloon::GIB,
            gpu_memory_gib: None,
            gpu_ms: None,
            model_over_gpu: None,
            dtoh_bytes: None,
            gpu_fault_groups: None,
        }
    }

    /// Whether the model is off the GPU by more than [`MODEL_TOLERANCE`] on this row.
    fn model_off(&self) -> bool {
        self.model_over_gpu
            .is_some_and(|x| (x - 1.0).abs() > MODEL_TOLERANCE)
    }

    /// Whether `other` is the same row of another run (test, size, pattern, system).
    fn same_row(&self, other: &serde_json::Value) -> bool {
        other["test"] == self.test
            && other["threads"] == self.threads
            && other["range_bytes"] == self.range_bytes
            && other["pattern"] == serde_json::to_value(self.pattern).unwrap_or_default()
            && other["system"] == self.system
    }
}

#[derive(Serialize)]
struct Report {
    backend: String,
    device: String,
    times: &'static str,
    /// Where the HtoD column comes from, or why it is empty.
    migrations: String,
    reads: u32,
    repeats: u32,
    seed: u64,
    rows: Vec<Row>,
}

/// One timed read: the kernel's wall time, ms, and what migrated and faulted meanwhile (CUPTI;
/// `None` where the counters are off).
struct Read {
    ms: f64,
    htod: Option<u64>,
    dtoh: Option<u64>,
    fault_groups: Option<u64>,
}

struct Gpu<'a> {
    rt: &'a Runtime,
    _modules: [std::sync::Arc<CudaModule>; 2],
    alloc: CudaFunction,
    free: CudaFunction,
    pattern: CudaFunction,
}

impl<'a> Gpu<'a> {
    /// Compile the kernels; size CUDA's device heap to `heap` bytes when given.
    fn new(rt: &'a Runtime, heap: Option<u64>) -> anyhow::Result<Self> {
        if let Some(heap) = heap {
            rt.context()?
                .set_limit(
                    cudarc::driver::sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE,
                    heap as usize,
                )
                .context("sizing CUDA's device heap")?;
        }
        let allocs = rt.compile(device::ALLOC.path, device::ALLOC.text)?;
        let patterns = rt.compile(device::UVM_PATTERNS.path, device::UVM_PATTERNS.text)?;
        Ok(Self {
            alloc: allocs.load_function("am_alloc")?,
            free: allocs.load_function("am_free")?,
            pattern: patterns.load_function("am_uvm_pattern")?,
            _modules: [allocs, patterns],
            rt,
        })
    }

    /// One repeat: allocate, fill from the host (alignmalloc), read (timed), free.
    fn repeat(&self, spec: &Spec, system: System, fill: &[u8]) -> anyhow::Result<Read> {
        let rt = self.rt;
        let stream = rt.stream()?.clone();
        let threads = spec.threads;
        let mode = system as u32;
        let sizes = stream.clone_htod(&vec![spec.range; threads as usize])?;
        let mut handles = stream.alloc_zeros::<u64>(threads as usize)?;
        let mut statuses = stream.alloc_zeros::<u32>(threads as usize)?;
        // SAFETY: am_alloc(mailbox, const u64* sizes, unsigned threads, unsigned mode, u64*
        // handles, unsigned* statuses): `threads` of each, waited for.
        unsafe {
            rt.launch(&self.alloc, grid(u64::from(threads)), |a| {
                a.arg(&sizes)
                    .arg(&threads)
                    .arg(&mode)
                    .arg(&mut handles)
                    .arg(&mut statuses);
            })
        }?
        .wait()?;
        if let Some(t) = stream.clone_dtoh(&statuses)?.iter().position(|&s| s != 0) {
            bail!(
                "{}: thread {t}'s {} B did not allocate",
                system.name(),
                spec.range
            );
        }
        if system != System::CudaMalloc {
            for &h in &stream.clone_dtoh(&handles)? {
                rt.write(Handle(h), 0, fill)?;
            }
        }
        let read = self.read(spec, &handles)?;
        // SAFETY: am_free(mailbox, const u64* handles, unsigned threads, unsigned mode, unsigned*
        // statuses): the handles just allocated, each freed once.
        unsafe {
            rt.launch(&self.free, grid(u64::from(threads)), |a| {
                a.arg(&handles).arg(&threads).arg(&mode).arg(&mut statuses);
            })
        }?
        .wait()?;
        crate::alloc::check_empty(rt, system)?;
        Ok(read)
    }

    /// One repeat of plain managed memory: one `cuMemAllocManaged` region, each thread's range
    /// in turn, written by the host, then read (timed) and released.
    fn repeat_managed(
        &self,
        spec: &Spec,
        fill: &[u8],
        under_pressure: bool,
    ) -> anyhow::Result<Read> {
        let rt = self.rt;
        let stream = rt.stream()?.clone();
        let bytes = u64::from(spec.threads) * spec.range;
        let blocks = bytes.div_ceil(ortree::VABLOCK_BYTES) as usize;
        let region = ManagedArena::new(rt.context()?, blocks, under_pressure)?;
        for t in 0..u64::from(spec.threads) {
            // SAFETY: no kernel runs on the region yet (it was just made; the read is launched
            // after this loop).
            unsafe { region.write_from_host(t * spec.range, fill)? };
        }
        let starts: Vec<u64> = (0..u64::from(spec.threads))
            .map(|t| region.base() + t * spec.range)
            .collect();
        let handles = stream.clone_htod(&starts)?;
        // The region lives until the read was waited for (`read` synchronizes).
        self.read(spec, &handles)
    }

    /// The timed read kernel over `handles` (plain addresses are plain handles): wall time in
    /// ms and the bytes migrated to the GPU meanwhile.
    fn read(&self, spec: &Spec, handles: &cudarc::driver::CudaSlice<u64>) -> anyhow::Result<Read> {
        let rt = self.rt;
        let stream = rt.stream()?.clone();
        let threads = spec.threads;
        let mut sink = stream.alloc_zeros::<u64>(1)?;
        rt.take_faults_if_counting()?;
        let pattern = spec.pattern as u32;
        let mut b = stream.launch_builder(&self.pattern);
        b.arg(handles)
            .arg(&threads)
            .arg(&pattern)
            .arg(&spec.range)
            .arg(&spec.reads)
            .arg(&spec.seed)
            .arg(&mut sink);
        let started = Instant::now();
        // SAFETY: am_uvm_pattern(const u64* handles, unsigned threads, unsigned pattern, u64
        // range, unsigned reads, u64 seed, u64* sink): `threads` live objects of `range` bytes
        // (raw pointers are plain handles), one sink word; synchronised below.
        unsafe { b.launch(grid(u64::from(threads))) }?;
        stream.synchronize()?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let faults = rt.take_faults_if_counting()?;
        Ok(Read {
            ms,
            htod: faults.as_ref().map(|f| f.total.htod_bytes),
            dtoh: faults.as_ref().map(|f| f.total.dtoh_bytes),
            fault_groups: faults.as_ref().map(|f| f.total.gpu_page_faults),
        })
    }
}

/// Every (test, threads, range) of the run.
fn configs(args: &Args) -> Vec<(&'static str, u32, u64)> {
    let random = args.random_kib.iter().map(|&k| ("random", 1024, k << 10));
    let large = args.large_kib.iter().map(|&k| ("large", 128, k << 10));
    random.chain(large).collect()
}

fn with_ratios(rows: &mut [Row]) {
    let ours: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.system == "alignmalloc")
        .map(|(i, r)| (i, r.ms))
        .collect();
    for (i, ms) in ours {
        let key = (rows[i].test, rows[i].range_bytes, rows[i].pattern);
        for r in rows
            .iter_mut()
            .filter(|r| (r.test, r.range_bytes, r.pattern) == key)
        {
            r.ratio_to_alignmalloc = Some(r.ms / ms);
        }
    }
}

/// Who holds a row's objects on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// Allocated in a kernel (alignmalloc's layouts, CUDA's heap).
    Kernel(System),
    /// One plain managed region written by the host (`managed`).
    Managed,
}

/// Every row on the GPU: the pattern slot order's runtime for alignmalloc, arrangement off,
/// CUDA's heap and plain managed memory, then a runtime in the identity slot order for
/// alignmalloc again (the slot order is a runtime setting; one runtime at a time, so each has its
/// own fault counters). Under --gpu-memory-gib only the first runtime's rows but CUDA's heap run,
/// with the memory held back from before the first row.
fn gpu_rows(args: &Args) -> anyhow::Result<(Vec<Row>, String, String)> {
    let largest = configs(args)
        .iter()
        .map(|&(_, t, r)| u64::from(t) * r)
        .max()
        .unwrap_or(0);
    let fill = vec![1u8; configs(args).iter().map(|c| c.2).max().unwrap_or(0) as usize];
    let pressure = args.gpu_memory_gib.is_some();
    // CUDA's heap is device memory, never paged: no row under pressure.
    let first: Vec<(Holder, &'static str)> = [
        (Holder::Kernel(System::Alignmalloc), "alignmalloc"),
        (
            Holder::Kernel(System::AlignmallocContiguous),
            "alignmalloc-contiguous",
        ),
        (Holder::Kernel(System::CudaMalloc), "cuda-malloc"),
        (Holder::Managed, "managed"),
    ]
    .into_iter()
    .filter(|&(holder, _)| !(pressure && holder == Holder::Kernel(System::CudaMalloc)))
    .collect();
    let first = first.as_slice();
    let identity: &[(Holder, &'static str)] = &[(
        Holder::Kernel(System::Alignmalloc),
        "alignmalloc-identity-order",
    )];
    let runs: Vec<(SlotOrder, &[(Holder, &'static str)])> = if pressure {
        note!(
            "under --gpu-memory-gib: cuda-malloc (a device heap, never paged) and the identity \
             order's rows (a second runtime) are left out"
        );
        vec![(SlotOrder::Pattern, first)]
    } else {
        vec![(SlotOrder::Pattern, first), (SlotOrder::Identity, identity)]
    };
    let total: usize = runs.iter().map(|(_, systems)| systems.len()).sum::<usize>()
        * configs(args).len()
        * PATTERNS.len()
        * (args.repeats as usize + 1);
    let progress = crate::progress::steps(total as u64, "repeats");
    let mut rows = Vec::new();
    let mut device_name = String::new();
    let mut migrations = String::new();
    for (order, systems) in runs {
        let builder = Runtime::builder()
            .backend(args.backend)
            .fault_counters(true)
            .slot_order(order);
        let rt = args
            .placement
            .apply(builder, args.gpu_memory_gib)?
            .build()
            .context("starting the runtime")?;
        if let Some(line) = args.placement.describe(&rt) {
            note!("{line}");
        }
        device_name = rt.device_info().map(|i| i.name.clone()).unwrap_or_default();
        migrations = rt.fault_counting().to_string();
        // CUDA fixes the heap's size before the first kernel that calls malloc.
        let heap = (order == SlotOrder::Pattern && !pressure)
            .then_some(largest + largest / 2 + (256 << 20));
        let device = Gpu::new(&rt, heap)?;
        // Held back from here on, before any object's page reaches the GPU.
        let balloon = match args.gpu_memory_gib {
            Some(gib) => Some(crate::balloon::Balloon::inflate(&rt, gib)?),
            None => None,
        };
        let left_gib = balloon.as_ref().map(|b| b.left_gib());
        for (test, threads, range) in configs(args) {
            for pattern in PATTERNS {
                let spec = Spec {
                    pattern,
                    layout: Layout::Arranged,
                    threads,
                    range,
                    reads: args.reads,
                    seed: args.seed,
                };
                for &(holder, name) in systems {
                    progress.set_message(format!(
                        "{test} {threads} x {} KiB {pattern:?} {name}",
                        range >> 10
                    ));
                    let mut times = Vec::new();
                    let mut htod = Vec::new();
                    let mut dtoh = Vec::new();
                    let mut fault_groups = Vec::new();
                    for r in 0..=args.repeats {
                        let fill = &fill[..range as usize];
                        let read = match holder {
                            Holder::Kernel(system) => device.repeat(&spec, system, fill)?,
                            Holder::Managed => device.repeat_managed(&spec, fill, pressure)?,
                        };
                        progress.inc(1);
                        if r > 0 {
                            times.push(read.ms);
                            htod.push(read.htod.map(|b| b as f64));
                            dtoh.push(read.dtoh.map(|b| b as f64));
                            fault_groups.push(read.fault_groups.map(|f| f as f64));
                        }
                    }
                    let ms = median(&mut times.clone());
                    tracing::info!(
                        test,
                        threads,
                        range_kib = range >> 10,
                        pattern = ?pattern,
                        system = name,
                        ms,
                        "row measured"
                    );
                    let mut row = Row::new(
                        (test, threads, range),
                        pattern,
                        name,
                        ms,
                        times,
                        median_present(htod).map(|b| b as u64),
                    );
                    row.dtoh_bytes = median_present(dtoh).map(|b| b as u64);
                    row.gpu_fault_groups = median_present(fault_groups).map(|f| f as u64);
                    row.gpu_memory_gib = left_gib;
                    rows.push(row);
                }
            }
        }
        drop(balloon);
    }
    progress.finish_and_clear();
    Ok((rows, device_name, migrations))
}

/// Every row in the simulator: both layouts, modelled; with `--gpu-memory-gib` the model's GPU
/// holds that much managed data and evicts beyond it.
fn sim_rows(args: &Args) -> anyhow::Result<Vec<Row>> {
    let capacity = args
        .gpu_memory_gib
        .map(|gib| (gib * crate::balloon::GIB) as u64);
    let cost = uvmsim::profile::H200_COST;
    let mut rows = Vec::new();
    let bar = crate::progress::steps((configs(args).len() * PATTERNS.len()) as u64, "rows");
    for (test, threads, range) in configs(args) {
        for pattern in PATTERNS {
            bar.set_message(format!(
                "{test} {threads} x {} KiB {pattern:?}",
                range >> 10
            ));
            bar.inc(1);
            for (layout, system) in [
                (Layout::Arranged, System::Alignmalloc),
                (Layout::Contiguous, System::AlignmallocContiguous),
            ] {
                let spec = Spec {
                    pattern,
                    layout,
                    threads,
                    range,
                    reads: args.reads,
                    seed: args.seed,
                };
                let config = SimConfig {
                    cost,
                    gpu_capacity: capacity,
                    ..crate::uvm::sim_config(threads)
                };
                let report = Simulator::run(config, &spec.trace(1 << 40))?;
                let k = &report.kernels[0];
                let mut row = Row::new(
                    (test, threads, range),
                    pattern,
                    system.name(),
                    k.modelled_ns / 1e6,
                    Vec::new(),
                    Some(k.counts.htod_bytes()),
                );
                row.gpu_memory_gib = args.gpu_memory_gib;
                rows.push(row);
            }
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// Set the GPU run of `path` beside the model's rows: each row's GPU time and model/GPU. The GPU
/// run must have had the GPU memory the model is given (within 5%, or both the whole card).
fn beside_gpu(
    rows: &mut [Row],
    path: &std::path::Path,
    gpu_memory_gib: Option<f64>,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--gpu-json {}: reading it", path.display()))?;
    let report: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--gpu-json {}: not JSON", path.display()))?;
    if report["backend"] != "Cuda" {
        bail!(
            "--gpu-json {}: its backend is {}, not a GPU run (`access --json` on a GPU)",
            path.display(),
            report["backend"]
        );
    }
    let gpu_rows = report["rows"].as_array().cloned().unwrap_or_default();
    for row in rows.iter_mut() {
        let Some(measured) = gpu_rows.iter().find(|g| row.same_row(g)) else {
            continue;
        };
        let left = measured["gpu_memory_gib"].as_f64();
        let alike = match (left, gpu_memory_gib) {
            (None, None) => true,
            (Some(a), Some(b)) => (a / b - 1.0).abs() <= 0.05,
            _ => false,
        };
        if !alike {
            bail!(
                "--gpu-json {}: the GPU run had {} of GPU memory, the model {}: give the model \
                 the same --gpu-memory-gib",
                path.display(),
                left.map_or("the whole card".into(), |g| format!("{g:.2} GiB")),
                gpu_memory_gib.map_or("the whole card".into(), |g| format!("{g:.2} GiB"))
            );
        }
        if let Some(ms) = measured["ms"].as_f64() {
            row.gpu_ms = Some(ms);
            row.model_over_gpu = Some(row.ms / ms);
        }
    }
    if rows.iter().all(|r| r.gpu_ms.is_none()) {
        bail!(
            "--gpu-json {}: none of its rows is one of the model's (same tests, sizes and \
             patterns)",
            path.display()
        );
    }
    Ok(())
}

/// Hide the modelled ratios of rows where the model, on the row or on alignmalloc's row beside
/// it, is off the GPU by more than [`MODEL_TOLERANCE`]; the number of rows off.
fn hide_ratios_where_the_model_is_off(rows: &mut [Row]) -> usize {
    let off: Vec<(&'static str, u64, Pattern)> = rows
        .iter()
        .filter(|r| r.model_off())
        .map(|r| (r.test, r.range_bytes, r.pattern))
        .collect();
    for r in rows.iter_mut() {
        if off.contains(&(r.test, r.range_bytes, r.pattern)) {
            r.ratio_to_alignmalloc = None;
        }
    }
    rows.iter().filter(|r| r.model_off()).count()
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    cli::input_file(args.gpu_json.as_deref(), "--gpu-json")?;
    let gpu = cli::on_gpu(args.backend)?;
    if gpu {
        crate::balloon::check(args.gpu_memory_gib, gpu)?;
        if args.gpu_json.is_some() {
            bail!(
                "access --gpu-json sets a GPU run beside the simulator's: use it with --backend sim"
            );
        }
    }
    args.placement.check(gpu)?;
    let (backend, device, times, migrations, mut rows) = if gpu {
        note!("backend: Cuda");
        let (rows, device, migrations) = gpu_rows(args)?;
        ("Cuda", device, "GPU kernel wall time", migrations, rows)
    } else {
        note!("backend: the UVM simulator (no GPU, or --backend sim)");
        (
            "Sim",
            "none (simulated)".to_string(),
            "modelled by uvmsim with the constants fitted on the H200 (not measured); cuda-malloc and the identity slot order need a GPU",
            "modelled by uvmsim".to_string(),
            sim_rows(args)?,
        )
    };
    with_ratios(&mut rows);
    let mut off = 0;
    if let Some(path) = &args.gpu_json {
        beside_gpu(&mut rows, path, args.gpu_memory_gib)?;
        off = hide_ratios_where_the_model_is_off(&mut rows);
    }
    println!("times: {times}");
    println!("HtoD, DtoH and faults (GPU page fault groups): {migrations}");
    let beside = args.gpu_json.is_some();
    println!(
        "{:<7} {:>7} {:>10} {:<12} {:<27} {:>10} {:>8} {:>8} {:>10} {:>10} {:>8}{}",
        "test",
        "threads",
        "range KiB",
        "pattern",
        "system",
        "ms",
        "x ours",
        "x memory",
        "HtoD MiB",
        "DtoH MiB",
        "faults",
        if beside {
            format!(" {:>10} {:>10}", "GPU ms", "model/GPU")
        } else {
            String::new()
        }
    );
    for r in &rows {
        println!(
            "{:<7} {:>7} {:>10} {:<12} {:<27} {:>10.3} {:>8} {:>8} {:>10} {:>10} {:>8}{}",
            r.test,
            r.threads,
            r.range_bytes >> 10,
            format!("{:?}", r.pattern).to_lowercase(),
            r.system,
            r.ms,
            r.ratio_to_alignmalloc
                .map_or("-".into(), |x| format!("{x:.2}")),
            r.gpu_memory_gib
                .map_or("-".into(), |gib| format!("{:.2}", r.working_set_gib / gib)),
            r.htod_bytes
                .map_or("-".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
            r.dtoh_bytes
                .map_or("-".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
            r.gpu_fault_groups.map_or("-".into(), |f| f.to_string()),
            if beside {
                format!(
                    " {:>10} {:>10}",
                    r.gpu_ms.map_or("-".into(), |ms| format!("{ms:.3}")),
                    r.model_over_gpu.map_or("-".into(), |x| format!(
                        "{x:.2}{}",
                        if r.model_off() { "*" } else { "" }
                    ))
                )
            } else {
                String::new()
            }
        );
    }
    println!("x ours: time over alignmalloc's on the same row (above 1: alignmalloc is faster)");
    if beside {
        println!(
            "model/GPU: the modelled time over the GPU's for the same row (--gpu-json); * marks \
             the {off} rows where the model is off by more than {:.0}%: the modelled ratios of \
             those rows' test are not shown (docs/uvmsim.md)",
            MODEL_TOLERANCE * 100.0
        );
    }
    if let Some(gib) = rows.iter().find_map(|r| r.gpu_memory_gib) {
        println!(
            "x memory: the row's objects over the {gib:.2} GiB of GPU memory the reads had \
             (--gpu-memory-gib)"
        );
    }
    if let Some(path) = &args.json {
        let report = Report {
            backend: backend.to_string(),
            device,
            times,
            migrations,
            reads: args.reads,
            repeats: args.repeats,
            seed: args.seed,
            rows,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::{parse, take_json, temp};

    #[test]
    fn the_simulator_compares_both_layouts_on_every_pattern() {
        let json = temp("access.json");
        let args: Args = parse(&[
            "--backend",
            "sim",
            "--random-kib",
            "4,256",
            "--large-kib",
            "1024",
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        run(&args).unwrap();
        let report = take_json(&json);
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 3 * 3 * 2);
        // Every object is read, so every row migrates at least the pages it reads.
        assert!(rows.iter().all(|r| r["htod_bytes"].as_u64().unwrap() > 0));
        // The model counts faulted pages, not the GPU's fault groups: no such column.
        assert!(rows.iter().all(|r| r["gpu_fault_groups"].is_null()));
        // The whole card (no --gpu-memory-gib): the objects' GiB and no memory held back.
        assert!(rows.iter().all(|r| r["gpu_memory_gib"].is_null()));
        let ws = rows[0]["working_set_gib"].as_f64().unwrap();
        assert_eq!(ws, 1024.0 * 4096.0 / (1u64 << 30) as f64);
        // Lockstep over 256 KiB: the arranged layout moves one block per warp read.
        let lockstep: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["pattern"] == "Lockstep" && r["range_bytes"] == 256 << 10)
            .collect();
        assert!(lockstep[1]["ratio_to_alignmalloc"].as_f64().unwrap() > 1.0);
    }

    /// A GPU run beside the model: model/GPU per row, the ratios of a test hidden where the
    /// model is off by more than 30% on one of its rows, and a GPU run with other memory refused.
    #[test]
    fn the_model_is_set_beside_a_gpu_run_and_its_ratios_hidden_where_it_is_off() {
        let words = |json: &str, gpu: Option<&str>| {
            let mut w = vec![
                "--backend",
                "sim",
                "--random-kib",
                "16",
                "--large-kib",
                "1024",
                "--reads",
                "10",
                "--gpu-memory-gib",
                "0.0625",
                "--json",
            ];
            w.push(json);
            if let Some(g) = gpu {
                w.extend(["--gpu-json", g]);
            }
            w.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let parse_owned = |w: Vec<String>| {
            let refs: Vec<&str> = w.iter().map(String::as_str).collect();
            parse::<Args>(&refs).unwrap()
        };
        let model = temp("model.json");
        run(&parse_owned(words(model.to_str().unwrap(), None))).unwrap();
        let mut gpu = take_json(&model);
        // A GPU run equal to the model but on one row, where the GPU took twice as long.
        gpu["backend"] = "Cuda".into();
        let slow = gpu["rows"]
            .as_array()
            .unwrap()
            .iter()
            .position(|r| r["test"] == "large" && r["pattern"] == "Sweep")
            .unwrap();
        let doubled = gpu["rows"][slow]["ms"].as_f64().unwrap() * 2.0;
        gpu["rows"][slow]["ms"] = doubled.into();
        let gpu_path = temp("gpu.json");
        std::fs::write(&gpu_path, gpu.to_string()).unwrap();
        let out = temp("beside.json");
        run(&parse_owned(words(
            out.to_str().unwrap(),
            gpu_path.to_str(),
        )))
        .unwrap();
        let report = take_json(&out);
        for r in report["rows"].as_array().unwrap() {
            let x = r["model_over_gpu"].as_f64().unwrap();
            let large_sweep = r["test"] == "large" && r["pattern"] == "Sweep";
            if large_sweep {
                assert!(r["ratio_to_alignmalloc"].is_null(), "hidden: {r}");
            } else {
                assert!((x - 1.0).abs() < 1e-9, "{r}");
                assert!(r["ratio_to_alignmalloc"].is_number(), "shown: {r}");
            }
        }
        // The GPU run had other memory than the model is given: refused, naming both.
        let mut other = gpu.clone();
        for r in other["rows"].as_array_mut().unwrap() {
            r["gpu_memory_gib"] = 0.5.into();
        }
        std::fs::write(&gpu_path, other.to_string()).unwrap();
        let err = format!(
            "{:#}",
            run(&parse_owned(words(
                out.to_str().unwrap(),
                gpu_path.to_str()
            )))
            .unwrap_err()
        );
        assert!(
            err.contains("0.50 GiB") && err.contains("0.06 GiB"),
            "{err}"
        );
        let _ = std::fs::remove_file(&gpu_path);
    }

    #[test]
    fn bad_options_are_refused_naming_the_option() {
        for words in [
            &["--random-kib", "3"][..],
            &["--large-kib", "1024,0"],
            &["--reads", "0"],
            &["--repeats", "0"],
        ] {
            let err = parse::<Args>(words).err().expect("refused").to_string();
            assert!(err.contains(words[0]), "{err}");
        }
        let args: Args = parse(&["--backend", "sim", "--placement", "tiered"]).unwrap();
        let err = format!("{:#}", run(&args).unwrap_err());
        assert!(err.contains("--placement") && err.contains("GPU"), "{err}");
        let args: Args = parse(&["--backend", "sim", "--gpu-json", "/nonexistent.json"]).unwrap();
        let err = format!("{:#}", run(&args).unwrap_err());
        assert!(err.contains("--gpu-json /nonexistent.json"), "{err}");
        let args: Args = parse(&["--json", "/nonexistent/a.json"]).unwrap();
        assert!(format!("{:#}", run(&args).unwrap_err()).contains("--json /nonexistent"));
    }
}
