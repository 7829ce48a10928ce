//! `alignmalloc selftest`: the whole allocation path, end to end, on the GPU (or, without one, on
//! the sim backend with CPU warps through the same mailbox):
//!
//! - (a) fill: `--threads` threads allocate sizes drawn across all classes (the class per warp,
//!   as threads of one code path ask alike; the total under a quarter of free device memory),
//!   write their owner tag over every word through `am::ptr`; the host then reads every byte back
//!   through the handles, checks that no two objects share a byte, and the threads free;
//! - (b) rounds: `--round-threads` threads x `--rounds` rounds of malloc / tag / check / free of
//!   1 KiB..256 KiB, verified on the device;
//! - (c) bad input from device code: size 0, over the per-lane limit, over the arena, double free,
//!   a foreign handle, an interior pointer; each answer is compared with its defined status (over
//!   the arena: every lane refused or served, never all served, and what was served freed, as a
//!   warp's lanes may reach the call in groups whose asks fit);
//! - (d) fault counters (GPU, CUPTI): the host writes a 64 MiB chunk, a kernel touches each of
//!   its 4 KiB pages, the host reads it back; migrations must be exactly the chunk each way and
//!   every record must fall in it. The sim backend has no faults to count and says so;
//! - (e) arena growth: a second runtime starts with a 64 MiB arena that may grow to 256 MiB, and
//!   3072 threads hold 64 KiB each at once (an allocation that finds no room is retried while the
//!   arena grows); every byte is verified as in (a).
//! - (f) a full arena takes back cache slabs: a third runtime (128 MiB, the caches at three
//!   quarters) holds a warp's 32 objects of 8 KiB in one 32 MiB slab and a second slab the host
//!   published ahead of need; a thread then asks 66 MiB, more than the 64 MiB left, which the host
//!   serves by taking the slab published ahead back; every byte is verified as in (a).
//!
//! After each check the allocator's invariants must hold and nothing may stay allocated. Any
//! failure makes the command exit non-zero.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{orchestrator, translator};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use alignmalloc::FaultCounting;
use alignmalloc::{BackendChoice, BackendKind, Handle, Runtime};
use anyhow::{Context, bail};
use hostcheck::cases::Rng;
use orchestrator::{LaneStatus, Status};
use serde::Serialize;

use crate::cli;
use crate::progress::{RefusalWarningsHeld, note};

mod gpu;
mod sim;

/// Options of `selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// Backend: auto (the GPU when there is one), cuda or sim.
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// Threads of the fill check (a), a multiple of 32.
    #[arg(long, default_value_t = 262_144, value_parser = cli::warp_multiple)]
    threads: u32,
    /// Threads of the rounds check (b), a multiple of 32.
    #[arg(long, default_value_t = 16_384, value_parser = cli::warp_multiple)]
    round_threads: u32,
    /// Rounds of the rounds check (b).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Seed of every draw.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Arena size in MiB (default: a quarter of free device memory; 6 GiB of lazily committed
    /// host memory on the sim backend); at least one 2 MiB block.
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..))]
    arena_mib: Option<u64>,
    /// Skip the fault counter check (d), for GPU machines without CUPTI.
    #[arg(long)]
    no_fault_counters: bool,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One check's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    name: &'static str,
    /// "pass", "FAIL" or "not run".
    outcome: &'static str,
    seconds: f64,
    figures: Vec<(String, u64)>,
    problems: Vec<String>,
}

impl Check {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            outcome: "pass",
            seconds: 0.0,
            figures: Vec::new(),
            problems: Vec::new(),
        }
    }

    fn figure(&mut self, name: &str, value: u64) {
        self.figures.push((name.to_string(), value));
    }

    /// Record a problem when `count` is not zero.
    fn expect_zero(&mut self, what: &str, count: u64) {
        self.figure(what, count);
        if count != 0 {
            self.problems.push(format!("{what}: {count}"));
        }
    }

    fn fail(&mut self, problem: String) {
        self.problems.push(problem);
    }

    fn finish(mut self, started: Instant) -> Self {
        self.seconds = started.elapsed().as_secs_f64();
        if !self.problems.is_empty() {
            self.outcome = "FAIL";
        }
        self
    }
}

#[derive(Serialize)]
struct Report {
    backend: String,
    backend_reason: String,
    device: Option<String>,
    arena_bytes: u64,
    threads: u32,
    round_threads: u32,
    rounds: u32,
    seed: u64,
    checks: Vec<Check>,
    requests_by_status: Vec<(String, u64)>,
    lane_frees_by_status: Vec<(String, u64)>,
    chunks_by_class: [u64; 3],
}

/// What each backend runs for the checks: kernels on the GPU, CPU warps on sim.
pub trait Device {
    /// (a) Every thread allocates `sizes[t]` and tags its object; its handle and status come back.
    fn fill(&self, sizes: &[u64]) -> anyhow::Result<(Vec<Handle>, Vec<u32>)>;
    /// (a) Every thread frees its handle; its lane status comes back.
    fn free_all(&self, handles: &[Handle]) -> anyhow::Result<Vec<u32>>;
    /// (b) The rounds; counters: objects, words checked, mismatches, allocation failures, free
    /// failures.
    fn rounds(&self, threads: u32, rounds: u32, seed: u64) -> anyhow::Result<[u64; 5]>;
    /// (c) Each of `warps` warps sends the bad inputs; `(expected, got)` per check per warp.
    fn bad_input(
        &self,
        warps: u32,
        arena_bytes: u64,
        over_limit: u64,
    ) -> anyhow::Result<Vec<(u64, u64)>>;
}

/// Names of the bad-input checks, in the order of `am_selftest_bad`.
pub const BAD_CHECKS: [&str; 17] = [
    "size 0: null handle",
    "size 0: status Ok",
    "over the per-lane limit: SizeOverLimit",
    "over the arena: OutOfMemory (lanes served apart freed Ok)",
    "first free: Ok",
    "double free: DoubleFree",
    "foreign handle: InvalidHandle",
    "interior pointer: InteriorPointer",
    "free after the interior try: Ok",
    "pointer free: Ok",
    "pointer double free: DoubleFree",
    "pointer into an object: InteriorPointer",
    "pointer free after the interior try: Ok",
    "4 KiB objects of every lane: null handles 0",
    "4 KiB objects of every lane: highest status Ok",
    "4 KiB plain objects of every lane: null pointers 0",
    "4 KiB plain objects of every lane: highest status Ok",
];

/// The tag of word `w` of owner `t`'s object (as `tag` in selftest.cu).
pub fn tag(owner: u64, word: u64) -> u64 {
    owner << 32 | (word & 0xFFFF_FFFF)
}

/// Sizes for the fill check: a class per warp (75% small 8 B..2 KiB, 22% portion with a tile
/// of 4..32 KiB and lanes in its upper half, 3% large 32..128 KiB), multiples of 8.
fn draw_sizes(threads: u32, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed | 1);
    let mut sizes = Vec::with_capacity(threads as usize);
    for first in (0..threads).step_by(32) {
        let lanes = (threads - first).min(32);
        let class = rng.below(100);
        let tile = 4096u64 << rng.below(4);
        for _ in 0..lanes {
            let size = match class {
                0..75 => 8 + rng.below(2041),
                75..97 => tile / 2 + 8 + rng.below(tile / 2 - 7),
                _ => (32 << 10) + 8 + rng.below(96 << 10),
            };
            sizes.push(size & !7);
        }
    }
    sizes
}

fn check_allocator(rt: &Runtime, check: &mut Check) {
    if let Err(e) = rt.drain_caches() {
        check.fail(format!("draining the device caches: {e}"));
    }
    if let Err(e) = rt.check_invariants() {
        check.fail(format!("invariants broken: {e}"));
    }
    if !rt.is_empty() {
        check.fail(format!(
            "{} chunks left allocated after every object was freed",
            rt.live_chunks()
        ));
    }
}

/// (a): fill, verify every byte and the absence of overlaps from the host, free.
fn fill_check(
    rt: &Runtime,
    device: &dyn Device,
    args: &Args,
    budget: u64,
) -> anyhow::Result<Check> {
    let started = Instant::now();
    let mut check = Check::new("(a) fill, verify every byte, free");
    let sizes = draw_sizes(args.threads, args.seed);
    let total: u64 = sizes.iter().sum();
    if total > budget {
        bail!(
            "the fill check would allocate {total} bytes, over its budget of {budget} (a quarter \
             of free memory); pass fewer --threads"
        );
    }
    check.figure("threads", u64::from(args.threads));
    check.figure("bytes", total);
    let by_class = fill_verify_free(rt, device, &sizes, &mut check)?;
    check_allocator(rt, &mut check);
    for (class, n) in ["small objects", "portion objects", "large objects"]
        .iter()
        .zip(by_class)
    {
        if n == 0 {
            check.fail(format!("no {class} were drawn: use more --threads"));
        }
    }
    Ok(check.finish(started))
}

/// Every thread allocates `sizes[t]` and tags its object; the host checks that no two objects
/// share a byte and reads every word back; the threads free. Returns the objects by class.
fn fill_verify_free(
    rt: &Runtime,
    device: &dyn Device,
    sizes: &[u64],
    check: &mut Check,
) -> anyhow::Result<[u64; 3]> {
    let (handles, statuses) = device.fill(sizes)?;
    let failed = statuses.iter().filter(|&&s| s != Status::Ok as u32).count() as u64;
    check.expect_zero("allocation failures", failed);
    let null = handles
        .iter()
        .zip(sizes)
        .filter(|(h, s)| h.is_null() && **s > 0)
        .count() as u64;
    check.expect_zero("null handles", null);

    // Every object's pieces in memory: no byte may belong to two objects.
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut by_class = [0u64; 3];
    for (h, &size) in handles.iter().zip(sizes) {
        if h.is_null() {
            continue;
        }
        by_class[if size <= 2048 {
            0
        } else if size <= 32 << 10 {
            1
        } else {
            2
        }] += 1;
        let piece = match h.kind() {
            translator::HandleKind::Arranged => 1u64 << h.tile_log2(),
            translator::HandleKind::Plain => size,
        };
        let mut offset = 0;
        while offset < size {
            let n = (piece - offset % piece).min(size - offset);
            spans.push((h.translate(offset), n));
            offset += n;
        }
    }
    spans.sort_unstable();
    let overlaps = spans
        .windows(2)
        .filter(|w| w[0].0 + w[0].1 > w[1].0)
        .count() as u64;
    check.figure("pieces compared for overlap", spans.len() as u64);
    check.expect_zero("overlapping pieces", overlaps);
    for (class, n) in ["small objects", "portion objects", "large objects"]
        .iter()
        .zip(by_class)
    {
        check.figure(class, n);
    }

    // Every word read back on the host, through the handle.
    let mut mismatches = 0u64;
    let mut words = 0u64;
    let mut buffer = Vec::new();
    for (t, (h, &size)) in handles.iter().zip(sizes).enumerate() {
        if h.is_null() {
            continue;
        }
        buffer.resize(size as usize, 0u8);
        rt.read(*h, 0, &mut buffer)
            .with_context(|| format!("reading thread {t}'s object"))?;
        for (w, bytes) in buffer.chunks_exact(8).enumerate() {
            let got = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            mismatches += u64::from(got != tag(t as u64, w as u64));
        }
        words += size / 8;
    }
    check.figure("words verified on the host", words);
    check.expect_zero("words not holding their owner's tag", mismatches);

    let lane_statuses = device.free_all(&handles)?;
    let free_failures = lane_statuses
        .iter()
        .zip(&handles)
        .filter(|(s, h)| !h.is_null() && **s != LaneStatus::Ok as u32)
        .count() as u64;
    check.expect_zero("frees not answered Ok", free_failures);
    Ok(by_class)
}

/// (e): a runtime whose arena starts at 64 MiB and may grow to 256 MiB; 3072 threads hold
/// 64 KiB each at once (192 MiB), retrying an allocation that finds no room while the arena
/// grows; every byte is verified as in (a).
fn growth_check(backend: BackendChoice) -> anyhow::Result<Check> {
    const THREADS: usize = 3072;
    let started = Instant::now();
    let mut check = Check::new("(e) arena growth under load");
    let rt = Runtime::builder()
        .backend(backend)
        .arena_bytes(64 << 20)
        .max_arena_bytes(256 << 20)
        .ports(1024)
        .build()
        .context("building the growable runtime")?;
    let sizes = vec![64 << 10; THREADS];
    check.figure("threads", THREADS as u64);
    check.figure("bytes", sizes.iter().sum());
    match rt.backend() {
        BackendKind::Cuda => fill_verify_free(&rt, &gpu::GpuDevice::new(&rt)?, &sizes, &mut check)?,
        BackendKind::Sim => fill_verify_free(&rt, &sim::SimDevice::new(&rt), &sizes, &mut check)?,
    };
    check_allocator(&rt, &mut check);
    let segments = rt.arena_segments().len() as u64;
    check.figure("reservations", segments);
    if segments < 2 {
        check.fail("the arena did not grow".into());
    }
    let oom = rt.counters()?.by_status[Status::OutOfMemory as usize];
    check.figure("requests answered OutOfMemory while growing (retried)", oom);
    Ok(check.finish(started))
}

/// (f): a runtime of 128 MiB whose caches hold two 32 MiB slabs of 8 KiB objects, one with a
/// warp's 32 objects and one published ahead of need: a thread asks 66 MiB, which fits only
/// once the host takes the slab published ahead back; every byte is verified as in (a), the
/// warp's objects too.
fn recall_check(backend: BackendChoice) -> anyhow::Result<Check> {
    let started = Instant::now();
    let mut check = Check::new("(f) a full arena takes back cache slabs");
    let rt = Runtime::builder()
        .backend(backend)
        .arena_bytes(128 << 20)
        .device_cache_fraction(0.75)
        .ports(64)
        .build()
        .context("building the 128 MiB runtime")?;
    match rt.backend() {
        BackendKind::Cuda => recall_steps(&rt, &gpu::GpuDevice::new(&rt)?, &mut check)?,
        BackendKind::Sim => recall_steps(&rt, &sim::SimDevice::new(&rt), &mut check)?,
    }
    check_allocator(&rt, &mut check);
    Ok(check.finish(started))
}

fn recall_steps(rt: &Runtime, device: &dyn Device, check: &mut Check) -> anyhow::Result<()> {
    const SLABS_AHEAD: u64 = 64 << 20;
    let small = [8u64 << 10; 32];
    let (handles, statuses) = device.fill(&small)?;
    let failed = statuses.iter().filter(|&&s| s != Status::Ok as u32).count() as u64;
    check.expect_zero("8 KiB allocation failures", failed);
    // The service publishes the next slab once it sees the first taken.
    let waiting = Instant::now();
    let held = loop {
        let held = rt.cache_stats().map_or(0, |s| s.held_bytes);
        if held >= SLABS_AHEAD || waiting.elapsed() > Duration::from_secs(5) {
            break held;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    check.figure("MiB the caches held", held >> 20);
    if held != SLABS_AHEAD {
        check.fail(format!(
            "the caches held {} MiB, not a slab taken and one published ahead (64 MiB): the \
             check would test nothing",
            held >> 20
        ));
    }
    fill_verify_free(rt, device, &[66 << 20], check)?;
    let recalls = rt.cache_stats().map_or(0, |s| s.recalls);
    check.figure("slabs taken back", recalls);
    if recalls == 0 {
        check.fail("66 MiB was served without a slab taken back".into());
    }
    let words = handles
        .iter()
        .enumerate()
        .map(|(t, &h)| {
            let mut word = [0u8; 8];
            rt.read(h, small[t] - 8, &mut word)?;
            Ok(u64::from_le_bytes(word) != tag(t as u64, small[t] / 8 - 1))
        })
        .collect::<alignmalloc::Result<Vec<bool>>>()?;
    check.expect_zero(
        "8 KiB objects whose last word lost its tag",
        words.iter().filter(|&&bad| bad).count() as u64,
    );
    let freed = device.free_all(&handles)?;
    check.expect_zero(
        "8 KiB frees not answered Ok",
        freed
            .iter()
            .filter(|&&s| s != LaneStatus::Ok as u32)
            .count() as u64,
    );
    Ok(())
}

fn rounds_check(rt: &Runtime, device: &dyn Device, args: &Args) -> anyhow::Result<Check> {
    let started = Instant::now();
    let mut check = Check::new("(b) rounds of malloc/free, 1-256 KiB");
    let [objects, words, mismatches, alloc_failures, free_failures] =
        device.rounds(args.round_threads, args.rounds, args.seed)?;
    check.figure("threads", u64::from(args.round_threads));
    check.figure("rounds", u64::from(args.rounds));
    check.figure("objects", objects);
    check.figure("words checked", words);
    check.expect_zero("mismatched words", mismatches);
    check.expect_zero("allocation failures", alloc_failures);
    check.expect_zero("free failures", free_failures);
    let expected = u64::from(args.round_threads) * u64::from(args.rounds);
    if objects != expected {
        check.fail(format!("{objects} objects allocated, {expected} expected"));
    }
    check_allocator(rt, &mut check);
    Ok(check.finish(started))
}

fn bad_input_check(rt: &Runtime, device: &dyn Device) -> anyhow::Result<Check> {
    const WARPS: u32 = 4;
    let started = Instant::now();
    let mut check = Check::new("(c) bad input from device code");
    let arena_bytes = rt.arena_bytes();
    let limit = translator::GeometryConfig::default().max_lane_bytes();
    let results = device.bad_input(WARPS, arena_bytes, limit + 1)?;
    for (i, (expected, got)) in results.iter().enumerate() {
        let name = BAD_CHECKS[i % BAD_CHECKS.len()];
        if expected != got {
            check.fail(format!(
                "warp {}: {name}: got {got:#x}, expected {expected:#x}",
                i / BAD_CHECKS.len()
            ));
        }
    }
    check.figure("statuses checked", results.len() as u64);
    check_allocator(rt, &mut check);
    Ok(check.finish(started))
}

fn fault_counters_not_run(why: &str) -> Check {
    let mut check = Check::new("(d) fault counters");
    check.outcome = "not run";
    check.problems.push(why.to_string());
    check
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    // Whether the runtime will run on the GPU: fault counters are asked for only there.
    let gpu = cli::on_gpu(args.backend)?;
    let counting = gpu && !args.no_fault_counters;
    let mut builder = Runtime::builder()
        .backend(args.backend)
        .fault_counters(counting);
    if let Some(mib) = args.arena_mib {
        builder = builder.arena_bytes(mib << 20);
    } else if !gpu {
        builder = builder.arena_bytes(6 << 30);
    }
    let rt = builder
        .build()
        .context("building the runtime (--no-fault-counters skips CUPTI)")?;
    let arena_bytes = rt.arena_bytes();
    let budget = match rt.device_info() {
        Some(info) => info.free_bytes as u64 / 4,
        None => arena_bytes / 4,
    };
    note!(
        "selftest on the {:?} backend ({}); arena {} MiB",
        rt.backend(),
        rt.backend_reason(),
        arena_bytes >> 20
    );
    let mut checks = Vec::new();
    let bar = crate::progress::steps(6, "checks");
    // From (c) on, requests are refused on purpose ((c) bad input, (e) growth's retried
    // out-of-memory answers); each check judges every refusal itself, so their warnings are held
    // back until this runtime is gone.
    let mut refusals_expected: Option<RefusalWarningsHeld> = None;
    let next = |name: &str| {
        if !bar.message().is_empty() {
            bar.inc(1);
        }
        bar.set_message(name.to_string());
    };
    match rt.backend() {
        BackendKind::Cuda => {
            next("(a) fill");
            let device = gpu::GpuDevice::new(&rt)?;
            checks.push(fill_check(&rt, &device, args, budget)?);
            next("(b) rounds");
            checks.push(rounds_check(&rt, &device, args)?);
            next("(c) bad input");
            refusals_expected.get_or_insert_with(RefusalWarningsHeld::new);
            checks.push(bad_input_check(&rt, &device)?);
            next("(d) fault counters");
            checks.push(match rt.fault_counting() {
                FaultCounting::On => device.fault_check()?,
                FaultCounting::Taken { reason } => fault_counters_not_run(&reason),
                FaultCounting::Off => fault_counters_not_run("skipped with --no-fault-counters"),
            });
            drop(device);
            next("(e) growth");
            checks.push(growth_check(BackendChoice::Cuda)?);
            next("(f) recall");
            checks.push(recall_check(BackendChoice::Cuda)?);
        }
        BackendKind::Sim => {
            next("(a) fill");
            let device = sim::SimDevice::new(&rt);
            checks.push(fill_check(&rt, &device, args, budget)?);
            next("(b) rounds");
            checks.push(rounds_check(&rt, &device, args)?);
            next("(c) bad input");
            refusals_expected.get_or_insert_with(RefusalWarningsHeld::new);
            checks.push(bad_input_check(&rt, &device)?);
            next("(d) fault counters");
            checks.push(fault_counters_not_run(
                "the sim backend has no unified-memory faults to count",
            ));
            next("(e) growth");
            checks.push(growth_check(BackendChoice::Sim)?);
            next("(f) recall");
            checks.push(recall_check(BackendChoice::Sim)?);
        }
    }
    bar.finish_and_clear();

    println!("{:<40} {:>8} {:>9}  figures", "check", "outcome", "seconds");
    for c in &checks {
        let figures: Vec<String> = c.figures.iter().map(|(n, v)| format!("{n} {v}")).collect();
        println!(
            "{:<40} {:>8} {:>9.2}  {}",
            c.name,
            c.outcome,
            c.seconds,
            figures.join(", ")
        );
        for p in &c.problems {
            println!("{:<40} {:>8}  {p}", "", "");
        }
    }
    let counters = rt.counters()?;
    let report = Report {
        backend: format!("{:?}", rt.backend()),
        backend_reason: rt.backend_reason().to_string(),
        device: rt.device_info().map(|i| i.name.clone()),
        arena_bytes,
        threads: args.threads,
        round_threads: args.round_threads,
        rounds: args.rounds,
        seed: args.seed,
        requests_by_status: Status::ALL
            .iter()
            .map(|s| (format!("{s:?}"), counters.by_status[*s as usize]))
            .collect(),
        lane_frees_by_status: LaneStatus::ALL
            .iter()
            .map(|s| (format!("{s:?}"), counters.by_lane_status[*s as usize]))
            .collect(),
        chunks_by_class: counters.chunks_by_class,
        checks: checks.clone(),
    };
    println!(
        "requests by status: {}",
        report
            .requests_by_status
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // Its service sums up the refusals as it stops: still held back.
    drop(rt);
    drop(refusals_expected);
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.outcome == "FAIL")
        .map(|c| c.name)
        .collect();
    if !failed.is_empty() {
        bail!("selftest failed: {}", failed.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_sizes_cover_every_class_in_words() {
        let sizes = draw_sizes(262_144, 1);
        assert_eq!(sizes.len(), 262_144);
        assert!(
            sizes
                .iter()
                .all(|&s| s >= 8 && s % 8 == 0 && s <= 128 << 10)
        );
        let small = sizes.iter().filter(|&&s| s <= 2048).count();
        let large = sizes.iter().filter(|&&s| s > 32 << 10).count();
        assert!(
            small > 150_000 && large > 3_000,
            "{small} small, {large} large"
        );
        // Each warp draws from one class.
        for warp in sizes.chunks(32) {
            let classes = warp
                .iter()
                .map(|&s| (s > 2048) as u8 + (s > 32 << 10) as u8);
            assert_eq!(classes.clone().min(), classes.max());
        }
    }
}
