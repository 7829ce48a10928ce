//! `alignmalloc soak`: a long run of small objects through the device caches on the GPU
//! (`device/kernels/soak.cu`). Threads keep objects live across launches, tag every byte,
//! check every byte before freeing, free waiting or posted, and send bad frees whose statuses
//! they check; between launches the host drains the caches while objects are live, so refills,
//! returns and drains race with the kernels' allocations and frees. At the end every object is
//! freed and the run checks, from the kernel's counters and the runtime's: no damaged byte (an
//! overlap or a wrong handle would show), every allocation and every valid free answered Ok,
//! every bad free answered its defined status and counted so by the host, every object freed,
//! the allocator empty with its invariants intact.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, orchestrator};

use std::path::PathBuf;
use std::time::Instant;

use alignmalloc::settings::MAX_DEVICE_CACHE_FRACTION;
use alignmalloc::{BackendChoice, Runtime};
use anyhow::{Context, bail};
use cudarc::driver::PushKernelArg;
use orchestrator::LaneStatus;
use serde::Serialize;

use crate::cli;
use crate::launch::grid;
use crate::progress::note;

/// Options of `soak`.
#[derive(clap::Args)]
pub struct Args {
    /// Objects to allocate in all (launches are added until this many are).
    #[arg(long, default_value_t = 1_000_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    objects: u64,
    /// Threads per launch (a multiple of 32).
    #[arg(long, default_value_t = 16_384, value_parser = cli::warp_multiple)]
    threads: u32,
    /// Steps per thread per launch (each frees the object in a slot and allocates a new one).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Objects each thread keeps live.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    slots: u32,
    /// Drain the device caches after every this many launches (0: only at the end).
    #[arg(long, default_value_t = 4)]
    drain_every: u32,
    /// Seed of the sizes and choices.
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// Count unified-memory faults and migrations per launch (CUPTI; slows kernels that fault).
    #[arg(long)]
    fault_counters: bool,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// One launch as the host saw it.
#[derive(Serialize)]
struct LaunchReport {
    seconds: f64,
    objects: u64,
    /// Bytes the device caches held when the launch ended (before any drain).
    cache_bytes: u64,
    cache_denials: u64,
    /// With `--fault-counters`: GPU page fault groups and bytes migrated during the launch.
    gpu_page_faults: Option<u64>,
    htod_bytes: Option<u64>,
    dtoh_bytes: Option<u64>,
}

/// The kernel's counters, in `soak.cu`'s order.
const COUNTERS: [&str; 23] = [
    "objects",
    "bytes_tagged",
    "bytes_damaged",
    "alloc_failures",
    "last_alloc_status",
    "free_failures",
    "last_free_status",
    "frees_posted",
    "bad_frees_sent",
    "bad_frees_wrong",
    "last_wrong_status",
    "interior_answered_ok",
    "interior_answered_invalid_handle",
    "interior_answered_double_free",
    "interior_answered_interior_pointer",
    "interior_answered_cached_object",
    "double_answered_ok",
    "double_answered_invalid_handle",
    "double_answered_double_free",
    "double_answered_interior_pointer",
    "double_answered_cached_object",
    "handles_outside_arena",
    "failure_events",
];

/// Kernel counter `name` of `counts` (words in [`COUNTERS`] order).
fn counter(counts: &[u64], name: &str) -> u64 {
    counts[COUNTERS
        .iter()
        .position(|n| *n == name)
        .expect("a known counter")]
}

/// Failure events the kernel keeps, of [`EVENT_WORDS`] words: kind, handle, size, lane status,
/// and the device cache slab on the handle's block before its free and after.
const MAX_EVENTS: usize = 64;
const EVENT_WORDS: usize = 6;

/// A slab as `soak.cu`'s `slab_view` packs it.
fn slab_view(word: u64) -> String {
    if word == u64::MAX {
        return "no slab".into();
    }
    format!(
        "slab {} (number {}, class {}, generation {})",
        word & 0xFFFF,
        word >> 32,
        (word >> 24) & 0xFF,
        (word >> 16) & 0xFF
    )
}

#[derive(Serialize)]
struct Report {
    device: String,
    arena_bytes: u64,
    cache_bound_bytes: u64,
    objects_asked: u64,
    threads: u32,
    steps: u32,
    slots: u32,
    launches: u32,
    drains: u32,
    seconds: f64,
    /// Per launch, in order (the last is the final pass that frees every object).
    per_launch: Vec<LaunchReport>,
    kernel: Vec<(String, u64)>,
    /// Frees by outcome as the runtime counted them (device caches and host together).
    frees_by_outcome: Vec<(String, u64)>,
    cache_refills: u64,
    cache_returns: u64,
    cache_denials: u64,
    /// Of the denials, those at the caches' bound (the rest: no room in the arena).
    cache_denials_at_bound: u64,
    /// Slabs published ahead and taken back for an allocation the arena had no room for.
    cache_recalls: u64,
    peak_cache_bytes: u64,
    /// Blocks the caches retired for good (16 384 slabs placed on them).
    retired_cache_bytes: u64,
    requests_served: u64,
    /// The share of the run the service thread spent serving batches, and the median batch
    /// (requests) and batch time (us): whether the host kept up.
    service_busy_share: f64,
    service_batch_p50: u64,
    service_batch_us_p50: f64,
    /// The 99th percentile and the longest batch time (us): a long batch holds every warp
    /// waiting for the host.
    service_batch_us_p99: f64,
    service_batch_us_max: f64,
    empty_at_end: bool,
    invariants: String,
    failure_events: Vec<String>,
    /// The chunks left allocated at the end (none when the run passes).
    chunks_left: Vec<String>,
    failures: Vec<String>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    // The caches may hold three quarters of the arena, the most the runtime allows: with less
    // this workload's scattered lifetimes keep the caches at their bound and lanes go through
    // the host. Sized from the arena, so one command fits an 80 GB and a 141 GB card;
    // ALIGNMALLOC_DEVICE_CACHE_BYTES or _FRACTION still decide when set.
    let rt = Runtime::builder()
        .backend(BackendChoice::Cuda)
        .device_cache_fraction(MAX_DEVICE_CACHE_FRACTION)
        .fault_counters(args.fault_counters)
        .build()
        .context("soak runs on the GPU (the sim backend's CPU warps run the same caches in `cargo test`)")?;
    let info = rt.device_info().expect("cuda backend").clone();
    let stream = rt.stream()?.clone();
    let module = rt.compile(device::SOAK.path, device::SOAK.text)?;
    let kernel = module.load_function("am_soak")?;
    // The arena's extent: the kernel checks every object it is given lies inside.
    let segments = rt.arena_segments();
    let arena_start = segments.iter().map(|s| s.0).min().unwrap_or(0);
    let arena_end = segments.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
    let per_launch = u64::from(args.threads) * u64::from(args.steps);
    let launches = args.objects.div_ceil(per_launch) as u32;
    let slots = u64::from(args.threads) * u64::from(args.slots);
    let mut live = stream.alloc_zeros::<u64>(slots as usize)?;
    let mut sizes = stream.alloc_zeros::<u64>(slots as usize)?;
    let mut counters = stream.alloc_zeros::<u64>(COUNTERS.len())?;
    let mut events = stream.alloc_zeros::<u64>(MAX_EVENTS * EVENT_WORDS)?;
    note!(
        "device: {} | arena {:.1} GiB, device caches at most {:.1} GiB | {} launches x {} threads x {} steps, {} live objects per thread",
        info.name,
        rt.arena_bytes() as f64 / (1u64 << 30) as f64,
        rt.cache_bound_bytes().unwrap_or(0) as f64 / (1u64 << 30) as f64,
        launches,
        args.threads,
        args.steps,
        args.slots
    );
    let before = rt.counters()?;
    let bar = crate::progress::steps(u64::from(launches) + 1, "soak launches");
    let started = Instant::now();
    let mut drains = 0;
    let mut per_launch = Vec::new();
    let mut objects_before = 0;
    for launch in 0..=launches {
        let launch_started = Instant::now();
        let final_pass = u32::from(launch == launches);
        // SAFETY: am_soak(mailbox, u64 seed, unsigned launch, unsigned steps, unsigned slots,
        // unsigned final_pass, u64 arena_start, u64 arena_end, u64* live, u64* live_sizes,
        // u64* counters, u64* events):
        // `threads x slots` words each for live and live_sizes, COUNTERS.len() counters,
        // MAX_EVENTS x EVENT_WORDS event words; waited for below.
        unsafe {
            rt.launch(&kernel, grid(u64::from(args.threads)), |a| {
                a.arg(&args.seed)
                    .arg(&launch)
                    .arg(&args.steps)
                    .arg(&args.slots)
                    .arg(&final_pass)
                    .arg(&arena_start)
                    .arg(&arena_end)
                    .arg(&mut live)
                    .arg(&mut sizes)
                    .arg(&mut counters)
                    .arg(&mut events);
            })
        }?
        .wait()?;
        let caches = rt.cache_stats().unwrap_or_default();
        let faults = if args.fault_counters {
            rt.take_faults_if_counting()?.map(|f| f.total)
        } else {
            None
        };
        if final_pass == 1 || (args.drain_every > 0 && (launch + 1) % args.drain_every == 0) {
            rt.drain_caches()?;
            drains += 1;
        }
        bar.inc(1);
        let c = stream.clone_dtoh(&counters)?;
        let (objects, damaged) = (counter(&c, "objects"), counter(&c, "bytes_damaged"));
        let failed = ["alloc_failures", "free_failures", "bad_frees_wrong"]
            .iter()
            .map(|name| counter(&c, name))
            .sum::<u64>();
        let this = LaunchReport {
            seconds: launch_started.elapsed().as_secs_f64(),
            objects: objects - objects_before,
            cache_bytes: caches.held_bytes,
            cache_denials: caches.denials,
            gpu_page_faults: faults.map(|f| f.gpu_page_faults),
            htod_bytes: faults.map(|f| f.htod_bytes),
            dtoh_bytes: faults.map(|f| f.dtoh_bytes),
        };
        tracing::info!(
            launch,
            objects,
            damaged_bytes = damaged,
            seconds = started.elapsed().as_secs_f64(),
            launch_seconds = this.seconds,
            cache_mib = this.cache_bytes >> 20,
            cache_denials = this.cache_denials,
            gpu_page_faults = ?this.gpu_page_faults,
            htod_mib = ?this.htod_bytes.map(|b| b >> 20),
            "soak launch done"
        );
        per_launch.push(this);
        objects_before = objects;
        bar.set_message(format!(
            "{:.3e} objects, {damaged} damaged bytes, {failed} failures",
            objects as f64
        ));
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let kernel_counts = stream.clone_dtoh(&counters)?;
    let event_words = stream.clone_dtoh(&events)?;
    let recorded = (kernel_counts[COUNTERS.len() - 1] as usize).min(MAX_EVENTS);
    let events: Vec<String> = event_words
        .chunks(EVENT_WORDS)
        .take(recorded)
        .map(|e| {
            let what = match e[0] {
                1 | 3 => "bad free answered",
                4 => "allocation outside the arena, status",
                _ => "free of a live object answered",
            };
            let status = LaneStatus::from_code(e[3] as u8)
                .map_or_else(|| format!("code {}", e[3]), |s| format!("{s:?}"));
            let h = alignmalloc::Handle(e[1]);
            format!(
                "{what} {status}: handle {:#x} ({:?}, generation {}), {} bytes; before the free: {}; after: {}",
                e[1],
                h.kind(),
                h.generation(),
                e[2],
                slab_view(e[4]),
                slab_view(e[5])
            )
        })
        .collect();
    let value = |name: &str| counter(&kernel_counts, name);
    let after = rt.counters()?;
    let by_outcome: Vec<u64> = after
        .by_lane_status
        .iter()
        .zip(&before.by_lane_status)
        .map(|(a, b)| a - b)
        .collect();
    let left = rt.describe_live_chunks();
    let invariants = match rt.check_invariants() {
        Ok(()) => "hold".to_string(),
        Err(e) => e,
    };
    let empty = rt.is_empty();
    let caches = rt.cache_stats().unwrap_or_default();

    let mut failures = Vec::new();
    for name in [
        "bytes_damaged",
        "alloc_failures",
        "free_failures",
        "bad_frees_wrong",
        "handles_outside_arena",
    ] {
        if value(name) != 0 {
            failures.push(format!("{name} = {}", value(name)));
        }
    }
    let freed = by_outcome[LaneStatus::Ok as usize];
    if freed != value("objects") {
        failures.push(format!(
            "{} objects allocated but {freed} freed",
            value("objects")
        ));
    }
    let classified = by_outcome[LaneStatus::InteriorPointer as usize]
        + by_outcome[LaneStatus::DoubleFree as usize];
    let unexpected = by_outcome[LaneStatus::InvalidHandle as usize]
        + by_outcome[LaneStatus::CachedObject as usize];
    if classified != value("bad_frees_sent") || unexpected != 0 {
        failures.push(format!(
            "{} bad frees sent, the runtime counted {classified} interior or double and {unexpected} others",
            value("bad_frees_sent")
        ));
    }
    if value("objects") < args.objects {
        failures.push(format!(
            "only {} of {} objects allocated",
            value("objects"),
            args.objects
        ));
    }
    if !empty {
        failures.push(format!("{} chunks left allocated", rt.live_chunks()));
    }
    if invariants != "hold" {
        failures.push(format!("invariants: {invariants}"));
    }
    let service = rt.service_stats();
    let report = Report {
        device: info.name.clone(),
        arena_bytes: rt.arena_bytes(),
        cache_bound_bytes: rt.cache_bound_bytes().unwrap_or(0),
        objects_asked: args.objects,
        threads: args.threads,
        steps: args.steps,
        slots: args.slots,
        launches: launches + 1,
        drains,
        seconds,
        per_launch,
        kernel: COUNTERS
            .iter()
            .map(|n| n.to_string())
            .zip(kernel_counts.iter().copied())
            .collect(),
        frees_by_outcome: LaneStatus::ALL
            .iter()
            .map(|s| format!("{s:?}"))
            .zip(by_outcome.iter().copied())
            .collect(),
        cache_refills: caches.refills,
        cache_returns: caches.returns,
        cache_denials: caches.denials,
        cache_denials_at_bound: caches.denials_at_bound,
        cache_recalls: caches.recalls,
        peak_cache_bytes: caches.peak_held_bytes,
        retired_cache_bytes: caches.retired_bytes,
        requests_served: service.requests,
        service_busy_share: service.busy_nanos as f64 / 1e9 / seconds,
        service_batch_p50: service.batch_size_p50_p99.0,
        service_batch_us_p50: service.batch_nanos_p50_p99_max.0 as f64 / 1e3,
        service_batch_us_p99: service.batch_nanos_p50_p99_max.1 as f64 / 1e3,
        service_batch_us_max: service.batch_nanos_p50_p99_max.2 as f64 / 1e3,
        empty_at_end: empty,
        invariants,
        failure_events: events.clone(),
        chunks_left: left.clone(),
        failures: failures.clone(),
    };
    println!(
        "soak on {} in {:.1} s: {} launches, {} drains",
        report.device, seconds, report.launches, drains
    );
    for (name, v) in &report.kernel {
        println!("  {name:<22} {v}");
    }
    for (name, v) in &report.frees_by_outcome {
        println!("  frees {name:<16} {v}");
    }
    println!(
        "  device caches          {} slabs handed out, {} given back, {} denied ({} at the bound), \
         {} taken back for room, peak {} MiB, {} MiB retired",
        caches.refills,
        caches.returns,
        caches.denials,
        caches.denials_at_bound,
        caches.recalls,
        caches.peak_held_bytes >> 20,
        caches.retired_bytes >> 20
    );
    println!(
        "  service thread         busy {:.0}% of the run, median batch {} requests in {:.1} us (99th percentile {:.1} us, longest {:.1} us)",
        report.service_busy_share * 100.0,
        report.service_batch_p50,
        report.service_batch_us_p50,
        report.service_batch_us_p99,
        report.service_batch_us_max
    );
    println!(
        "  host requests          {}; empty at the end: {}; invariants {}",
        report.requests_served, empty, report.invariants
    );
    for event in &events {
        println!("  event: {event}");
    }
    for chunk in left.iter().take(16) {
        println!("  left: {chunk}");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !failures.is_empty() {
        bail!("soak failed: {}", failures.join("; "));
    }
    Ok(())
}
