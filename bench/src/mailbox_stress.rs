//! `alignmalloc mailbox-stress`: the device client against the host service thread on the GPU.
//!
//! Every warp of the kernel (`device/kernels/mailbox_stress.cu`) allocates in all size classes
//! and both layouts from divergent branches, writes its owner tag over every byte through
//! `am::ptr`, checks it, frees, and sends bad inputs whose statuses it checks. The host checks
//! the counters, that the allocator's invariants hold and that nothing is left allocated.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, orchestrator, ortree};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use orchestrator::{Mailbox, Resolver, ResolverConfig, Service, ServiceConfig, Status};
use parking_lot::Mutex;
use serde::Serialize;

use crate::cli;
use crate::launch;
use crate::progress::note;

/// Options of `mailbox-stress`.
#[derive(clap::Args)]
pub struct Args {
    /// Threads in the kernel (a multiple of 32).
    #[arg(long, default_value_t = 16384, value_parser = cli::warp_multiple)]
    threads: u32,
    /// Allocate/tag/check/free rounds per thread.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Mailbox ports.
    #[arg(long, default_value_t = 8192, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    ports: usize,
    /// Managed arena size in MiB (kept under a quarter of free device memory; at least one 2 MiB
    /// block).
    #[arg(long, default_value_t = 24576, value_parser = clap::value_parser!(u64).range(2..))]
    arena_mib: u64,
    /// Seed of the kernel's size draws.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

const COUNTERS: [&str; 11] = [
    "lane_objects",
    "words_checked",
    "mismatches",
    "alloc_failures",
    "last_failure_status",
    "out_of_memory_lanes",
    "free_failures",
    "bad_inputs_sent",
    "bad_inputs_wrong_status",
    "double_frees_exact",
    "failure_events",
];

/// Failure events the kernel keeps, and their words: kind, warp, lane, round, handle, size,
/// request status, lane status.
const MAX_EVENTS: usize = 64;
/// Threads of the kernel launched after the service stopped (64 warps).
const AFTER_CLOSE_THREADS: u32 = 2048;
const EVENT_WORDS: usize = 8;
const EVENT_KINDS: [&str; 5] = [
    "?",
    "free failed",
    "double free returned Ok",
    "free after interior check failed",
    "wrong status",
];

#[derive(Serialize)]
struct Report {
    device: String,
    threads: u32,
    rounds: u32,
    ports: usize,
    arena_mib: u64,
    kernel_seconds: f64,
    counters: Vec<(String, u64)>,
    requests_served: u64,
    batches: u64,
    batch_size_p50_p99: (u64, u64),
    batch_nanos_p50_p99_max: (u64, u64, u64),
    by_status: Vec<(String, u64)>,
    /// Threads launched after the service stopped, how many got Shutdown and a null handle,
    /// and how long that kernel took.
    after_close_threads: u32,
    after_close_shutdown: u64,
    after_close_seconds: f64,
    chunks_by_class: [u64; 3],
    live_chunks_after: usize,
    quarantined_before_drain: usize,
    failure_events: Vec<String>,
    invariants: String,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    let (context, info) =
        alignmalloc::internals::cuda::open(0).context("mailbox-stress needs a CUDA GPU")?;
    let arena_bytes = (args.arena_mib << 20).min(info.free_bytes as u64 / 4);
    let blocks = (arena_bytes / ortree::VABLOCK_BYTES) as usize;
    let ptx = alignmalloc::internals::nvrtc::Compiler::for_device(info.compute_capability)?
        .compile(device::MAILBOX_STRESS.path, device::MAILBOX_STRESS.text)?;
    let module = context.load_module(ptx)?;
    let kernel = module.load_function("am_mailbox_stress")?;
    let after_close = module.load_function("am_after_close")?;

    let arena = alignmalloc::internals::gpu::ManagedArena::new(&context, blocks, false)?;
    let mailbox = Arc::new(Mailbox::new(args.ports)?);
    let pinned = alignmalloc::internals::gpu::PinnedMailbox::new(&context, mailbox.clone())?;
    let resolver = Arc::new(Mutex::new(Resolver::new(ResolverConfig::new(
        arena.base(),
        arena.blocks(),
    ))?));
    let service = Service::start(mailbox.clone(), resolver.clone(), ServiceConfig::default())?;
    note!(
        "device: {} | {} threads x {} rounds | arena {} MiB | {} ports",
        info.name,
        args.threads,
        args.rounds,
        blocks * 2,
        args.ports
    );

    let stream = context.new_stream()?;
    let mut counters = stream.alloc_zeros::<u64>(COUNTERS.len())?;
    let mut events = stream.alloc_zeros::<u64>(MAX_EVENTS * EVENT_WORDS)?;
    let arg = pinned.kernel_arg();
    let mut launch = stream.launch_builder(&kernel);
    launch
        .arg(&arg)
        .arg(&args.rounds)
        .arg(&args.seed)
        .arg(&mut counters)
        .arg(&mut events);
    let config = LaunchConfig {
        grid_dim: (args.threads.div_ceil(256), 1, 1),
        block_dim: (args.threads.min(256), 1, 1),
        shared_mem_bytes: 0,
    };
    let spinner = crate::progress::spinner("stress kernel");
    let started = Instant::now();
    // SAFETY: the arguments match the kernel's signature (mailbox by value, rounds, seed, a
    // counter array of COUNTERS.len() words and an event array of MAX_EVENTS * EVENT_WORDS); the
    // mailbox and arena outlive the kernel, which is waited for below before anything is released.
    unsafe { launch.launch(config) }?;
    stream.synchronize()?;
    let kernel_seconds = started.elapsed().as_secs_f64();
    spinner.finish_and_clear();
    let counts = stream.clone_dtoh(&counters)?;
    let event_words = stream.clone_dtoh(&events)?;
    context.check_err()?;

    let stats = service.stats().snapshot();
    service.stop();

    // The closed path on the GPU: warps that call after the service stopped end with Shutdown.
    let mut closed_counts = stream.alloc_zeros::<u64>(1)?;
    let mut launch = stream.launch_builder(&after_close);
    launch.arg(&arg).arg(&mut closed_counts);
    let close_started = Instant::now();
    // SAFETY: am_after_close(mailbox by value, one counter word); the mailbox outlives the
    // kernel, which is waited for before anything is released.
    unsafe { launch.launch(launch::grid(u64::from(AFTER_CLOSE_THREADS))) }?;
    stream.synchronize()?;
    let after_close_seconds = close_started.elapsed().as_secs_f64();
    let after_close_shutdown = stream.clone_dtoh(&closed_counts)?[0];
    context.check_err()?;
    let mut r = resolver.lock();
    let quarantined = r.quarantined_chunks();
    r.drain_quarantine();
    let invariants = match r.check_invariants() {
        Ok(()) => "hold".to_string(),
        Err(e) => e,
    };
    let counters: Vec<(String, u64)> = COUNTERS
        .iter()
        .map(|n| n.to_string())
        .zip(counts.iter().copied())
        .collect();
    let report = Report {
        device: info.name.clone(),
        threads: args.threads,
        rounds: args.rounds,
        ports: args.ports,
        arena_mib: blocks as u64 * 2,
        kernel_seconds,
        counters: counters.clone(),
        requests_served: stats.requests,
        batches: stats.batches,
        batch_size_p50_p99: stats.batch_size_p50_p99,
        batch_nanos_p50_p99_max: stats.batch_nanos_p50_p99_max,
        by_status: Status::ALL
            .iter()
            .map(|s| (format!("{s:?}"), r.counters().by_status[*s as usize]))
            .collect(),
        chunks_by_class: r.counters().chunks_by_class,
        live_chunks_after: r.live_chunks(),
        after_close_threads: AFTER_CLOSE_THREADS,
        after_close_shutdown,
        after_close_seconds,
        quarantined_before_drain: quarantined,
        failure_events: Vec::new(),
        invariants,
    };
    println!(
        "mailbox stress on {} in {:.2} s:",
        report.device, kernel_seconds
    );
    for (name, value) in &report.counters {
        println!("  {name:<24} {value}");
    }
    println!(
        "  requests served          {} in {} batches (size p50 {} p99 {}), batch time p50 {} ns p99 {} ns",
        stats.requests,
        stats.batches,
        stats.batch_size_p50_p99.0,
        stats.batch_size_p50_p99.1,
        stats.batch_nanos_p50_p99_max.0,
        stats.batch_nanos_p50_p99_max.1
    );
    println!(
        "  chunks by class          {:?} (small, portion, large)",
        report.chunks_by_class
    );
    println!(
        "  live chunks after        {}; invariants {}",
        report.live_chunks_after, report.invariants
    );
    println!(
        "  after the service stop   {} of {} lanes got Shutdown in {:.1} ms",
        after_close_shutdown,
        AFTER_CLOSE_THREADS,
        after_close_seconds * 1e3
    );
    let recorded = (counts[COUNTERS.len() - 1] as usize).min(MAX_EVENTS);
    let events: Vec<String> = event_words
        .chunks(EVENT_WORDS)
        .take(recorded)
        .map(|e| {
            format!(
                "{}: warp {} lane {} round {} handle {:#x} size {} status {} lane status {}",
                EVENT_KINDS.get(e[0] as usize).unwrap_or(&"?"),
                e[1],
                e[2],
                e[3],
                e[4],
                e[5],
                e[6],
                e[7]
            )
        })
        .collect();
    for event in &events {
        println!("  event: {event}");
    }
    let report = Report {
        failure_events: events,
        ..report
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let value = |name: &str| {
        counts[COUNTERS
            .iter()
            .position(|n| *n == name)
            .expect("known counter")]
    };
    let mut failures = Vec::new();
    for name in [
        "mismatches",
        "alloc_failures",
        "free_failures",
        "bad_inputs_wrong_status",
    ] {
        if value(name) != 0 {
            failures.push(format!("{name} = {}", value(name)));
        }
    }
    if report.live_chunks_after != 0 || !r.is_empty() {
        failures.push(format!(
            "{} chunks left allocated",
            report.live_chunks_after
        ));
    }
    if report.invariants != "hold" {
        failures.push(format!("invariants: {}", report.invariants));
    }
    if after_close_shutdown != u64::from(AFTER_CLOSE_THREADS) {
        failures.push(format!(
            "after the service stopped only {after_close_shutdown} of {AFTER_CLOSE_THREADS} lanes got Shutdown"
        ));
    }
    if value("lane_objects") == 0 {
        failures.push("no allocation happened".into());
    }
    drop(r);
    drop(pinned);
    drop(arena);
    if !failures.is_empty() {
        bail!("mailbox stress failed: {}", failures.join("; "));
    }
    Ok(())
}
