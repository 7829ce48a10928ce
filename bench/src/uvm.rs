//! `alignmalloc uvm-calibrate` and `alignmalloc uvm-oversub`: uvmsim against the GPU, and the
//! oversubscription study that only the simulator runs.
//!
//! Calibration: for each per-thread range and pattern (bench/src/patterns.rs), the two layouts
//! take turns for `--repeats` rounds; each time a fresh managed region is written by the host,
//! the counters are cleared, the kernel runs, and CUPTI's HtoD bytes and GPU fault groups and the
//! kernel's time are recorded (the median of the repeats is kept). Turns, because whatever
//! drifts during a session would otherwise fall on whichever layout ran first. Fresh regions,
//! because moving one region back to the host between runs makes the driver's thrashing
//! detection treat its pages differently (seen on the H200: the arranged runs then moved a third
//! of what a first run moves). The same runs go
//! through uvmsim as traces. The cost model is fitted on the runs of `--fit-runs` and judged on
//! the others: migrated bytes and time errors, and whether the simulator ranks the two
//! layouts as the GPU does.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, ortree};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use alignmalloc::{BackendChoice, Runtime};
use anyhow::{Context, bail};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use serde::{Deserialize, Serialize};
use uvmsim::{CostModel, Counts, SimConfig, Simulator, Term};

use crate::cli;
use crate::patterns::{Layout, Pattern, Spec};
use crate::progress::note;

const PATTERNS: [Pattern; 3] = [Pattern::Lockstep, Pattern::Independent, Pattern::Sweep];
const LAYOUTS: [Layout; 2] = [Layout::Contiguous, Layout::Arranged];

/// Options of `uvm-calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Runs as threads:range-in-KiB pairs.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 1..,
        default_value = "1024:16,1024:64,1024:256,1024:1024,1024:2048,256:4096,128:8192,128:16384,64:16384",
        value_parser = run_pair
    )]
    runs: Vec<String>,
    /// Runs (threads:range-in-KiB) that fit the cost model; the others are held out.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "1024:16,1024:2048", value_parser = run_pair)]
    fit_runs: Vec<String>,
    /// Fault entries a fetch of the simulated driver finds ready (uvmsim's `ready_entries`).
    /// Given several, each is replayed and fitted, and the report keeps the one whose fitted
    /// runs fit best: the fewest layout pairs ranked unlike the GPU among the fitted runs, then
    /// the smallest worst time error on them. The held-out runs play no part in the choice.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_values_t = [uvmsim::READY_ENTRIES], value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    ready_entries: Vec<usize>,
    /// Reads per thread.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    reads: u32,
    /// Repeats per run (the median time is kept; their spread decides whether the GPU tells
    /// two layouts apart).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    repeats: u32,
    /// Seed of the random offsets.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Milliseconds to wait after a kernel before reading the counters: the driver's migration
    /// records reach CUPTI asynchronously, and a read right after the kernel can miss some.
    #[arg(long, default_value_t = 200)]
    settle_ms: u64,
    /// Write the measurements, the fitted constants and the errors as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No GPU: take the GPU measurements from these JSON reports (written by earlier runs; the
    /// runs of all of them together), replay the runs through the current simulator and fit
    /// again.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    refit: Vec<PathBuf>,
    /// Fit a cost per fault batch too. Off by default: the simulated batch count does not follow
    /// the GPU's fault groups (on the H200, 4 simulated batches where CUPTI saw 25 or more), so
    /// the per-batch cost is held at zero and the per-fault cost carries the batches' work.
    #[arg(long)]
    fit_batch_cost: bool,
    /// Fail when the simulator's migrated bytes are further than this fraction from the GPU's on
    /// any run (CI replays the committed measurements with it, so a simulator change that drifts
    /// from the GPU fails).
    #[arg(long)]
    max_bytes_error: Option<f64>,
}

/// One run on both sides.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Run {
    spec: Spec,
    fit: bool,
    gpu_htod_bytes: u64,
    gpu_fault_groups: u64,
    /// Bytes that came back when the host read every page after the kernel: what the GPU held.
    gpu_dtoh_readback_bytes: u64,
    gpu_ns: f64,
    /// Every repeat's kernel time, sorted (absent in reports written before they were kept).
    #[serde(default)]
    gpu_ns_repeats: Vec<f64>,
    sim: Counts,
    sim_ns: f64,
    bytes_error: f64,
    time_error: f64,
}

#[derive(Serialize, Deserialize)]
struct Calibration {
    device: String,
    reads: u32,
    repeats: u32,
    seed: u64,
    constants: CostModel,
    /// The simulator's `ready_entries` (reports written before it existed took whole batches).
    #[serde(default = "whole_batches")]
    ready_entries: usize,
    /// Terms held at zero instead of fitted.
    #[serde(default)]
    held_terms: Vec<String>,
    runs: Vec<Run>,
    held_out_max_bytes_error: f64,
    held_out_max_time_error: f64,
    /// The largest time error on the runs the constants were fitted on.
    #[serde(default)]
    fit_max_time_error: f64,
    /// Layout pairs the GPU tells apart (medians further apart than either layout's spread over
    /// its repeats) on which the simulator ranks the layouts the same way.
    rankings_agree: usize,
    /// Layout pairs the GPU tells apart.
    rankings: usize,
    /// Layout pairs within the GPU's run-to-run spread: the GPU ranks them neither way.
    #[serde(default)]
    rankings_within_noise: usize,
    /// Of `rankings`, the pairs of held-out runs.
    #[serde(default)]
    rankings_held_out: usize,
    /// Of those, the pairs the simulator ranks as the GPU does.
    #[serde(default)]
    rankings_held_out_agree: usize,
    /// The pairs the GPU tells apart that the simulator ranks the other way.
    #[serde(default)]
    misranked: Vec<String>,
    /// Every `--ready-entries` tried, with what decided between them.
    #[serde(default)]
    ready_entries_tried: Vec<ReadyTrial>,
}

/// One `--ready-entries` candidate, judged on the fitted runs only.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ReadyTrial {
    ready_entries: usize,
    /// Pairs of fitted runs the GPU tells apart that the simulator ranks the other way.
    fit_misranked: usize,
    fit_max_time_error: f64,
    /// The held-out runs' figures: shown, never used to choose.
    held_out_max_time_error: f64,
    held_out_misranked: usize,
}

impl ReadyTrial {
    /// What the choice between candidates minimises: fitted runs only.
    fn choice_key(&self) -> (usize, f64) {
        (self.fit_misranked, self.fit_max_time_error)
    }
}

impl Calibration {
    fn fit_misranked(&self) -> usize {
        (self.rankings - self.rankings_held_out)
            - (self.rankings_agree - self.rankings_held_out_agree)
    }

    fn trial(&self) -> ReadyTrial {
        ReadyTrial {
            ready_entries: self.ready_entries,
            fit_misranked: self.fit_misranked(),
            fit_max_time_error: self.fit_max_time_error,
            held_out_max_time_error: self.held_out_max_time_error,
            held_out_misranked: self.rankings_held_out - self.rankings_held_out_agree,
        }
    }
}

fn whole_batches() -> usize {
    SimConfig::default().batch_count
}

/// A `threads:KiB` pair as clap checks it while parsing (the error names the option).
fn run_pair(text: &str) -> Result<String, String> {
    parse_run(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("{e:#}"))
}

fn parse_run(text: &str) -> anyhow::Result<(u32, u64)> {
    let (t, r) = text
        .split_once(':')
        .with_context(|| format!("runs are threads:KiB pairs, got {text:?}"))?;
    let threads: u32 = t.parse().with_context(|| format!("threads in {text:?}"))?;
    let kib: u64 = r.parse().with_context(|| format!("range in {text:?}"))?;
    if threads == 0 || !threads.is_multiple_of(32) || kib < 4 || !kib.is_power_of_two() {
        bail!(
            "{text:?}: threads must be a positive multiple of 32, the range a power of two of at least 4 KiB"
        );
    }
    Ok((threads, kib << 10))
}

fn relative(model: f64, truth: f64) -> f64 {
    if truth == 0.0 {
        if model == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (model - truth).abs() / truth
    }
}

/// The simulator set up as the GPU runs `threads` threads: every warp resident.
pub fn sim_config(threads: u32) -> SimConfig {
    SimConfig {
        resident_warps: (threads / 32) as usize,
        ..SimConfig::default()
    }
}

/// Replay every run through the simulator with `ready_entries`, and mark the runs of
/// `--fit-runs`.
fn replay(args: &CalibrateArgs, runs: &mut [Run], ready_entries: usize) -> anyhow::Result<()> {
    let fit = fit_runs(args)?;
    for r in runs {
        let config = SimConfig {
            ready_entries,
            ..sim_config(r.spec.threads)
        };
        // Any 2 MiB-aligned base gives the same blocks and counts.
        let report = Simulator::run(config, &r.spec.trace(1 << 40))?;
        r.sim = report.kernels[0].counts;
        r.fit = fit.contains(&(r.spec.threads, r.spec.range));
        // What the GPU held, read back: CUPTI's HtoD records are lost under load (on the H200
        // they fell to a third of what came back), the read-back is exact.
        r.bytes_error = relative(r.sim.htod_bytes() as f64, r.gpu_dtoh_readback_bytes as f64);
    }
    Ok(())
}

/// The runs of `--fit-runs`, as (threads, range in bytes).
fn fit_runs(args: &CalibrateArgs) -> anyhow::Result<Vec<(u32, u64)>> {
    args.fit_runs.iter().map(|r| parse_run(r)).collect()
}

pub fn calibrate(args: &CalibrateArgs) -> anyhow::Result<()> {
    // Checked before any GPU time is spent.
    cli::output_file(args.json.as_deref(), "--json")?;
    for path in &args.refit {
        cli::input_file(Some(path), "--refit")?;
    }
    let (device, runs) = match args.refit.is_empty() {
        false => {
            let mut device = String::new();
            let mut runs = Vec::new();
            for path in &args.refit {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let old: Calibration = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not a uvm-calibrate report", path.display()))?;
                if !device.is_empty() && device != old.device {
                    bail!(
                        "{} was measured on {}, not {device}",
                        path.display(),
                        old.device
                    );
                }
                if old.reads != args.reads || old.seed != args.seed {
                    bail!(
                        "{} used --reads {} --seed {}: pass the same to replay it",
                        path.display(),
                        old.reads,
                        old.seed
                    );
                }
                if old.repeats != args.repeats {
                    bail!(
                        "{} kept the median of {} repeats: pass --repeats {} to replay it",
                        path.display(),
                        old.repeats,
                        old.repeats
                    );
                }
                device = old.device;
                runs.extend(old.runs);
            }
            (device, runs)
        }
        true => measure(args)?,
    };
    let mut best: Option<Calibration> = None;
    let mut tried = Vec::new();
    let bar = crate::progress::steps(args.ready_entries.len() as u64, "replays");
    for &ready_entries in &args.ready_entries {
        bar.set_message(format!("ready entries {ready_entries}"));
        let mut candidate = runs.clone();
        replay(args, &mut candidate, ready_entries)?;
        let judged = judge(args, device.clone(), ready_entries, candidate)?;
        let trial = judged.trial();
        if best
            .as_ref()
            .is_none_or(|b| trial.choice_key() < b.trial().choice_key())
        {
            best = Some(judged);
        }
        tried.push(trial);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut report = best.expect("at least one candidate");
    report.ready_entries_tried = tried;
    publish(args, &report)
}

/// Run every spec on the GPU (the simulator's columns are left to [`replay`]).
fn measure(args: &CalibrateArgs) -> anyhow::Result<(String, Vec<Run>)> {
    let sizes: Vec<(u32, u64)> = args
        .runs
        .iter()
        .map(|r| parse_run(r))
        .collect::<Result<_, _>>()?;
    // Checked before any GPU time is spent: the report needs runs to fit on.
    let fit = fit_runs(args)?;
    if !sizes.iter().any(|size| fit.contains(size)) {
        bail!(
            "no run in --runs is in --fit-runs {:?}: nothing to fit the cost model on",
            args.fit_runs
        );
    }
    let rt = Runtime::builder()
        .backend(BackendChoice::Cuda)
        .fault_counters(true)
        .arena_bytes(64 << 20)
        .build()
        .context("uvm-calibrate needs a GPU and CUPTI (LD_LIBRARY_PATH)")?;
    if let alignmalloc::FaultCounting::Taken { reason } = rt.fault_counting() {
        bail!("uvm-calibrate measures migrations with CUPTI, and {reason}");
    }
    let device = rt.device_info().map(|i| i.name.clone()).unwrap_or_default();
    let module = rt.compile(device::UVM_PATTERNS.path, device::UVM_PATTERNS.text)?;
    let kernel = module.load_function("am_uvm_pattern")?;
    let stream = rt.stream()?.clone();
    let mut sink = stream.alloc_zeros::<u64>(1)?;
    let mut runs = Vec::new();
    let bar = crate::progress::steps((sizes.len() * PATTERNS.len()) as u64, "runs");
    for &(threads, range) in &sizes {
        let bytes = u64::from(threads) * range;
        let blocks = (bytes.div_ceil(ortree::VABLOCK_BYTES) as usize).max(2);
        for pattern in PATTERNS {
            bar.set_message(format!("{pattern:?} {threads} x {} KiB", range >> 10));
            let specs = LAYOUTS.map(|layout| Spec {
                pattern,
                layout,
                threads,
                range,
                reads: args.reads,
                seed: args.seed,
            });
            // The layouts take turns, repeat by repeat: measured one after the other, whatever
            // drifts during a run (the host, the driver's state) would fall on one layout only.
            let mut measured: [Vec<Measured>; 2] = Default::default();
            for _ in 0..args.repeats.max(1) {
                for (spec, all) in specs.iter().zip(&mut measured) {
                    all.push(measure_once(
                        &rt, &stream, &kernel, &mut sink, spec, blocks, args,
                    )?);
                }
            }
            for (spec, all) in specs.into_iter().zip(measured) {
                let mut times: Vec<f64> = all.iter().map(|m| m.ns).collect();
                let median_ns = crate::stats::median(&mut times);
                let last = all.last().expect("at least one repeat");
                note!(
                    "{pattern:?}/{:?} {threads}x{} KiB: GPU {:.2} ms, {} MiB HtoD, {} MiB back to the host",
                    spec.layout,
                    range >> 10,
                    median_ns / 1e6,
                    last.htod_bytes >> 20,
                    last.readback_bytes >> 20,
                );
                runs.push(Run {
                    spec,
                    fit: false,
                    gpu_htod_bytes: last.htod_bytes,
                    gpu_fault_groups: last.fault_groups,
                    gpu_dtoh_readback_bytes: last.readback_bytes,
                    gpu_ns: median_ns,
                    gpu_ns_repeats: times,
                    sim: Counts::default(),
                    sim_ns: 0.0,
                    bytes_error: 0.0,
                    time_error: 0.0,
                });
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok((device, runs))
}

/// One timed kernel of one run, on a fresh region the host has written.
struct Measured {
    ns: f64,
    htod_bytes: u64,
    fault_groups: u64,
    /// Bytes that came back when the host read every page: what the GPU held.
    readback_bytes: u64,
}

fn measure_once(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    kernel: &CudaFunction,
    sink: &mut CudaSlice<u64>,
    spec: &Spec,
    blocks: usize,
    args: &CalibrateArgs,
) -> anyhow::Result<Measured> {
    let settle = std::time::Duration::from_millis(args.settle_ms);
    // A fresh region each time: moving one region back and forth would make the driver see its
    // pages as thrashing and change how it migrates them.
    let region = alignmalloc::internals::gpu::ManagedArena::new(rt.context()?, blocks, false)?;
    // SAFETY: the region is new; no kernel has its addresses yet.
    unsafe { region.fill_from_host(1) };
    std::thread::sleep(settle);
    let base = region.base();
    let words: Vec<u64> = spec.handles(base).iter().map(|h| h.0).collect();
    let handles = stream.clone_htod(&words)?;
    rt.take_faults()?;
    let mut launch = stream.launch_builder(kernel);
    let pattern_code = spec.pattern as u32;
    launch
        .arg(&handles)
        .arg(&spec.threads)
        .arg(&pattern_code)
        .arg(&spec.range)
        .arg(&spec.reads)
        .arg(&spec.seed)
        .arg(sink);
    let started = Instant::now();
    // SAFETY: am_uvm_pattern(const u64* handles, unsigned threads, unsigned pattern, u64 range,
    // unsigned reads, u64 seed, u64* sink): `threads` handles into the live region, one sink
    // word; waited for just below.
    unsafe { launch.launch(LaunchConfig::for_num_elems(spec.threads)) }?;
    stream.synchronize()?;
    let ns = started.elapsed().as_nanos() as f64;
    std::thread::sleep(settle);
    let faults = rt.take_faults()?;
    // SAFETY: the kernel finished (synchronized above); none other uses the region.
    let sum = unsafe { region.read_every_page_from_host() };
    std::thread::sleep(settle);
    let readback = rt.take_faults()?;
    anyhow::ensure!(
        sum == spec.bytes() / 4096,
        "the host read back {sum}, wrote 1 per page"
    );
    Ok(Measured {
        ns,
        htod_bytes: faults.total.htod_bytes,
        fault_groups: faults.total.gpu_page_faults,
        readback_bytes: readback.total.dtoh_bytes,
    })
}

/// Whether the GPU ranks two layouts at all: their medians lie further apart than either one's
/// spread over its repeats. Runs without kept repeats count as told apart.
fn gpu_tells_apart(c: &Run, a: &Run) -> bool {
    let spread = |r: &Run| match (r.gpu_ns_repeats.first(), r.gpu_ns_repeats.last()) {
        (Some(lo), Some(hi)) => hi - lo,
        _ => 0.0,
    };
    (a.gpu_ns - c.gpu_ns).abs() > spread(a).max(spread(c))
}

/// Fit on the runs marked `fit` (replayed with `ready_entries`) and judge the others.
fn judge(
    args: &CalibrateArgs,
    device: String,
    ready_entries: usize,
    mut runs: Vec<Run>,
) -> anyhow::Result<Calibration> {
    let samples: Vec<(Counts, f64)> = runs
        .iter()
        .filter(|r| r.fit)
        .map(|r| (r.sim, r.gpu_ns))
        .collect();
    if samples.is_empty() {
        bail!("no run is in --fit-runs {:?}", args.fit_runs);
    }
    let mut prior = CostModel::default();
    let mut held_terms = Vec::new();
    if !args.fit_batch_cost {
        prior.per_batch_ns = 0.0;
        held_terms.push(Term::Batch);
    }
    let constants = CostModel::fit(&samples, &prior, &held_terms);
    for r in &mut runs {
        r.sim_ns = constants.time_ns(&r.sim);
        r.time_error = relative(r.sim_ns, r.gpu_ns);
    }
    let held: Vec<&Run> = runs.iter().filter(|r| !r.fit).collect();
    let max = |f: fn(&Run) -> f64| held.iter().map(|r| f(r)).fold(0.0, f64::max);
    let fit_max_time_error = runs
        .iter()
        .filter(|r| r.fit)
        .map(|r| r.time_error)
        .fold(0.0, f64::max);
    let (mut agree, mut rankings, mut within_noise) = (0, 0, 0);
    let (mut held_agree, mut held_rankings) = (0, 0);
    let mut misranked = Vec::new();
    for pair in runs.chunks(2) {
        let [c, a] = pair else { continue };
        if !gpu_tells_apart(c, a) {
            within_noise += 1;
            continue;
        }
        let agrees = (a.gpu_ns < c.gpu_ns) == (a.sim_ns < c.sim_ns);
        rankings += 1;
        agree += usize::from(agrees);
        if !c.fit {
            held_rankings += 1;
            held_agree += usize::from(agrees);
        }
        if !agrees {
            misranked.push(format!(
                "{:?} {} x {} KiB{}",
                c.spec.pattern,
                c.spec.threads,
                c.spec.range >> 10,
                if c.fit { "" } else { " (held out)" }
            ));
        }
    }
    Ok(Calibration {
        device,
        reads: args.reads,
        repeats: args.repeats,
        seed: args.seed,
        constants,
        ready_entries,
        held_terms: held_terms.iter().map(|t| format!("{t:?}")).collect(),
        held_out_max_bytes_error: max(|r| r.bytes_error),
        held_out_max_time_error: max(|r| r.time_error),
        fit_max_time_error,
        rankings_agree: agree,
        rankings,
        rankings_within_noise: within_noise,
        rankings_held_out: held_rankings,
        rankings_held_out_agree: held_agree,
        misranked,
        ready_entries_tried: Vec::new(),
        runs,
    })
}

/// Print the report, write it as JSON, and hold it to `--max-bytes-error`.
fn publish(args: &CalibrateArgs, report: &Calibration) -> anyhow::Result<()> {
    if report.ready_entries_tried.len() > 1 {
        println!(
            "ready entries tried (chosen on the fitted runs: fewest misranked, then worst time error):"
        );
        let any_held = report.runs.iter().any(|r| !r.fit);
        for t in &report.ready_entries_tried {
            let held = match any_held {
                true => format!(
                    "; held out {} misranked, worst {:.1}%",
                    t.held_out_misranked,
                    t.held_out_max_time_error * 100.0
                ),
                false => String::new(),
            };
            let chosen = match t.ready_entries == report.ready_entries {
                true => "  <- chosen",
                false => "",
            };
            println!(
                "  {:>4}: fitted {} misranked, worst {:.1}%{held}{chosen}",
                t.ready_entries,
                t.fit_misranked,
                t.fit_max_time_error * 100.0,
            );
        }
    }
    println!(
        "{:<12} {:<11} {:>7} {:>9} {:>5} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7}",
        "pattern",
        "layout",
        "threads",
        "range KiB",
        "fit",
        "GPU MiB",
        "sim MiB",
        "err",
        "GPU ms",
        "model ms",
        "err"
    );
    for r in &report.runs {
        println!(
            "{:<12} {:<11} {:>7} {:>9} {:>5} {:>10.1} {:>10.1} {:>6.1}% {:>10.3} {:>10.3} {:>6.1}%",
            format!("{:?}", r.spec.pattern),
            format!("{:?}", r.spec.layout),
            r.spec.threads,
            r.spec.range >> 10,
            if r.fit { "fit" } else { "held" },
            r.gpu_dtoh_readback_bytes as f64 / 1048576.0,
            r.sim.htod_bytes() as f64 / 1048576.0,
            r.bytes_error * 100.0,
            r.gpu_ns / 1e6,
            r.sim_ns / 1e6,
            r.time_error * 100.0
        );
    }
    println!(
        "constants: {:?} (held at zero: {:?}; ready entries {})\nfitted runs: time error up to {:.1}%",
        report.constants,
        report.held_terms,
        report.ready_entries,
        report.fit_max_time_error * 100.0,
    );
    let held: Vec<&Run> = report.runs.iter().filter(|r| !r.fit).collect();
    let held_over_30 = held.iter().filter(|r| r.time_error > 0.3).count();
    match held.len() {
        0 => println!("held out: no runs"),
        n => println!(
            "held out ({n} runs): bytes error up to {:.1}%, time error up to {:.1}%, {held_over_30} over 30%",
            report.held_out_max_bytes_error * 100.0,
            report.held_out_max_time_error * 100.0,
        ),
    }
    println!(
        "layout ranking agrees on {}/{} pairs the GPU tells apart, {}/{} held out ({} more within its run-to-run spread)",
        report.rankings_agree,
        report.rankings,
        report.rankings_held_out_agree,
        report.rankings_held_out,
        report.rankings_within_noise
    );
    if !report.misranked.is_empty() {
        println!("ranked unlike the GPU: {}", report.misranked.join("; "));
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(limit) = args.max_bytes_error {
        let worst = report
            .runs
            .iter()
            .max_by(|a, b| a.bytes_error.total_cmp(&b.bytes_error))
            .context("no runs")?;
        if worst.bytes_error > limit {
            bail!(
                "migrated bytes {:.1}% off the GPU on {:?}/{:?} {} x {} KiB (limit {:.1}%)",
                worst.bytes_error * 100.0,
                worst.spec.pattern,
                worst.spec.layout,
                worst.spec.threads,
                worst.spec.range >> 10,
                limit * 100.0
            );
        }
    }
    Ok(())
}

/// Options of `uvm-oversub`.
#[derive(clap::Args)]
pub struct OversubArgs {
    /// Threads (a multiple of 32).
    #[arg(long, default_value_t = 512, value_parser = cli::warp_multiple)]
    threads: u32,
    /// Per-thread range in MiB.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    range_mib: u64,
    /// Random reads per thread.
    #[arg(long, default_value_t = 420, value_parser = clap::value_parser!(u32).range(1..))]
    reads: u32,
    /// GPU memory for managed data, in GiB (below the working set).
    #[arg(long, default_value_t = 24)]
    capacity_gib: u64,
    /// Fitted constants: the JSON written by `uvm-calibrate` (default: uncalibrated constants).
    #[arg(long)]
    constants: Option<PathBuf>,
    /// Seed of the random offsets.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct OversubRun {
    spec: Spec,
    counts: Counts,
    modelled_ms: f64,
    peak_gpu_bytes: u64,
}

pub fn oversub(args: &OversubArgs) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    cli::input_file(args.constants.as_deref(), "--constants")?;
    let constants = match &args.constants {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let value: serde_json::Value = serde_json::from_str(&text)?;
            serde_json::from_value(value["constants"].clone())
                .with_context(|| format!("{} has no fitted constants", path.display()))?
        }
        None => {
            note!("no --constants: modelled times use uncalibrated constants");
            CostModel::default()
        }
    };
    let working_set = u64::from(args.threads) * (args.range_mib << 20);
    let capacity = args.capacity_gib << 30;
    if capacity >= working_set {
        bail!("the capacity ({capacity} B) must be below the working set ({working_set} B)");
    }
    note!(
        "simulated: {} threads x {} MiB = {} GiB working set, {} GiB of GPU memory, {} random reads per thread",
        args.threads,
        args.range_mib,
        working_set >> 30,
        args.capacity_gib,
        args.reads
    );
    let mut runs = Vec::new();
    let bar = crate::progress::steps(4, "runs");
    for pattern in [Pattern::Lockstep, Pattern::Independent] {
        for layout in LAYOUTS {
            bar.set_message(format!("{pattern:?}/{layout:?}"));
            bar.inc(1);
            let spec = Spec {
                pattern,
                layout,
                threads: args.threads,
                range: args.range_mib << 20,
                reads: args.reads,
                seed: args.seed,
            };
            let config = SimConfig {
                gpu_capacity: Some(capacity),
                cost: constants,
                ..sim_config(args.threads)
            };
            let report = Simulator::run(config, &spec.trace(1 << 40))?;
            let k = &report.kernels[0];
            // A line of the results on stdout, with the bar off the terminal meanwhile.
            crate::progress::suspend(|| {
                println!(
                    "{pattern:?}/{layout:?}: {} fault batches, {} faults, {} MiB HtoD ({} MiB prefetched, {} MiB never touched), {} MiB evicted, modelled {:.1} ms",
                    k.counts.batches,
                    k.counts.faults_coalesced,
                    k.counts.htod_bytes() >> 20,
                    k.counts.htod_prefetch_bytes >> 20,
                    (report.total.prefetch_waste_pages * 4096) >> 20,
                    k.counts.dtoh_eviction_bytes >> 20,
                    k.modelled_ns / 1e6
                )
            });
            runs.push(OversubRun {
                spec,
                counts: k.counts,
                modelled_ms: k.modelled_ns / 1e6,
                peak_gpu_bytes: report.peak_gpu_bytes,
            });
        }
    }
    bar.finish_and_clear();
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&runs)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calibration of the H200 profile, as `uvm-calibrate` wrote it.
    const FITTED: &str = include_str!("../results/2026-11-22-h200/uvm-calibrate-lanes.json");

    #[test]
    fn the_h200_profile_is_the_committed_calibration_and_the_rules_choice() {
        let report: Calibration = serde_json::from_str(FITTED).unwrap();
        assert_eq!(report.ready_entries, uvmsim::READY_ENTRIES);
        assert_eq!(uvmsim::profile::h200().ready_entries, report.ready_entries);
        assert_eq!(uvmsim::profile::H200_COST, report.constants);
        let chosen = report
            .ready_entries_tried
            .iter()
            .min_by(|a, b| a.choice_key().partial_cmp(&b.choice_key()).unwrap())
            .expect("the embedded calibration tried its candidates");
        assert_eq!(chosen.ready_entries, report.ready_entries);
        assert!(report.ready_entries_tried.len() > 1);
    }

    const REVIEW_CHECK: &str = "results/2026-11-22-h200/uvm-calibrate-review-check.json";

    fn refit(words: &[&str]) -> anyhow::Result<()> {
        let path = format!("{}/{REVIEW_CHECK}", env!("CARGO_MANIFEST_DIR"));
        let mut all = vec!["--repeats", "3", "--refit", &path, "--fit-runs", "1024:256"];
        all.extend_from_slice(words);
        calibrate(&crate::testing::parse::<CalibrateArgs>(&all)?)
    }

    #[test]
    fn bad_options_are_refused_naming_the_option() {
        for words in [
            &["--ready-entries", "8,0"][..],
            &["--runs", "1024:3"],
            &["--fit-runs", "7:16"],
            &["--reads", "0"],
        ] {
            let err = refit(words).unwrap_err();
            assert!(err.to_string().contains(words[0]), "{err}");
        }
        let err = refit(&["--json", "/nonexistent/c.json"]).unwrap_err();
        assert!(err.to_string().starts_with("--json"), "{err}");
        let oversub: OversubArgs =
            crate::testing::parse(&["--constants", "/nonexistent.json"]).unwrap();
        assert!(oversub_refused(&oversub).contains("--constants"));
        let err = crate::testing::parse::<OversubArgs>(&["--threads", "33"])
            .err()
            .unwrap();
        assert!(err.to_string().contains("--threads"));
    }

    fn oversub_refused(args: &OversubArgs) -> String {
        format!("{:#}", oversub(args).unwrap_err())
    }

    #[test]
    fn the_fetch_size_is_chosen_on_the_fitted_runs_alone() {
        let json = crate::testing::temp("uvm-choice.json");
        refit(&["--ready-entries", "32,8", "--json", json.to_str().unwrap()]).unwrap();
        let report: Calibration = serde_json::from_value(crate::testing::take_json(&json)).unwrap();
        let tried = &report.ready_entries_tried;
        assert_eq!(
            tried.iter().map(|t| t.ready_entries).collect::<Vec<_>>(),
            [32, 8]
        );
        let best = tried
            .iter()
            .min_by(|a, b| a.choice_key().partial_cmp(&b.choice_key()).unwrap())
            .unwrap();
        assert_eq!(report.ready_entries, best.ready_entries);
        let chosen = tried
            .iter()
            .find(|t| t.ready_entries == report.ready_entries);
        assert_eq!(
            chosen.unwrap().fit_max_time_error,
            report.fit_max_time_error
        );
        // The held-out size (1 024 x 32 KiB) is judged, not fitted.
        assert!(report.runs.iter().any(|r| !r.fit));
        assert!(
            report
                .runs
                .iter()
                .all(|r| r.fit == (r.spec.range == 256 << 10))
        );
    }
}
