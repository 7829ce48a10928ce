//! `alignmalloc alloc`: allocation speed from inside kernels.
//!
//! - `singular`: every thread allocates one object of a size drawn from `[2^n, 2^(n+1))`, n = 4..22
//!   (`--singular-log2` picks a range of them), then frees it;
//! - `random`: rounds in which every thread allocates 1 KiB to 256 KiB (a fresh draw per round)
//!   and frees it;
//! - `scaling`: 128 to 262 144 threads at 1 KiB and at 8 KiB;
//! - `floor`: the singular test's threads asking 0 bytes: what launching and waiting for the
//!   kernels costs without any allocation (the least any row can take);
//! - `mixed`: `--mixed-threads` threads (262 144) each asking a size drawn from a mix of what
//!   general code asks ([`MIX`]: 0 B 6%, 1-256 B 52%, 257 B-4 KiB 29%, 4-64 KiB 12.6%, 1-3 MiB
//!   0.4%, uniform within each band, seeded), every byte of every object written and checked;
//!   its rows report the bytes asked and the footprint (bytes the allocator held for the objects
//!   after the allocation kernel: the host's chunks, rounding and packing included, plus the
//!   slabs the device caches held). Besides the checks every test makes, the run fails when
//!   alignmalloc's footprint is over [`FOOTPRINT_BOUND_CONTIGUOUS`] (`malloc_contiguous`) or
//!   [`FOOTPRINT_BOUND_ARRANGED`] (`malloc`) times the bytes asked.
//!
//! Systems, on the same sizes in the same run: `alignmalloc` (`am::malloc`),
//! `alignmalloc-contiguous` (`am::malloc_contiguous`, arrangement off), `cuda-malloc` (CUDA's
//! device heap, sized for the largest round; GPU only) and `gallatin` (Gallatin's device
//! allocator over a pool as large as the arena; GPU only, when its harness is built:
//! bench/gallatin/build.sh, [`gallatin`]); `--systems` picks some of them and their order, and
//! `--kernel-times` adds each kernel's time on the GPU's clock. The systems of a row take turns
//! round by round ([`turns`]). Each round is also checked:
//! every thread tags the first and last word of its object and a second kernel reads the tags
//! back (an overlap or a wrong handle shows as a bad object); every status must be Ok and, after
//! a row's rounds, the allocator must be empty with its invariants intact (on the sim backend
//! also after every round).
//!
//! Frees use `am::post_free` (by handle; by address for alignmalloc-contiguous under
//! `--free-by-pointer`), as a program that does not need each free's status would: the
//! device caches judge their objects in the kernel, other frees are posted to the host without
//! waiting. The free time is the kernel's; the host answers posted frees after it, and the
//! round then waits for those answers and checks from the counters that every object was freed
//! and none refused.
//!
//! Under pressure: `--gpu-memory-gib N` holds all but N GiB of the GPU from before the first
//! round (after Gallatin's pool is set aside, so only alignmalloc's managed arena is under
//! pressure; `cuda-malloc` is left out, its heap reserved at the first launch), and `--placement` sets the arena's placement (docs/placement.md).
//!
//! Memory: a round's objects are capped at `--budget-gib` (on the GPU the arena is a quarter of
//! free memory). Where `threads x 2^(n+1)` would exceed it, fewer threads run, and the row says
//! how many. On the sim backend CPU warps run the same rounds through the mailbox: their times are
//! the host's, not a GPU's, and the report says so.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::orchestrator;

mod devices;
mod gpu;
mod sim;

use std::path::PathBuf;

use alignmalloc::{BackendChoice, BackendKind, Runtime};
use anyhow::{Context, bail};
use orchestrator::caches::CacheStatsSnapshot;
use orchestrator::stats::StatsSnapshot;
use orchestrator::{LaneStatus, ResolverCounters};
use serde::Serialize;

use crate::cli;
use crate::patterns::mix;
use crate::progress::note;
use crate::stats::median;

/// Which allocator a round uses (the kernels' `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// `am::malloc`.
    Alignmalloc = 0,
    /// `am::malloc_contiguous`.
    AlignmallocContiguous = 1,
    /// CUDA's in-kernel `malloc`.
    CudaMalloc = 2,
    /// Gallatin's `malloc`, through its harness (bench/gallatin).
    Gallatin = 3,
}

impl System {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            System::Alignmalloc => "alignmalloc",
            System::AlignmallocContiguous => "alignmalloc-contiguous",
            System::CudaMalloc => "cuda-malloc",
            System::Gallatin => "gallatin",
        }
    }

    /// Whether this is one of alignmalloc's own rows (a failure there fails the run).
    fn is_ours(self) -> bool {
        matches!(self, System::Alignmalloc | System::AlignmallocContiguous)
    }

    /// Whether this system's rounds free by address under `--free-by-pointer` (`asked`): the
    /// contiguous objects only, as arranged handles have no plain address.
    fn frees_by_address(self, asked: bool) -> bool {
        asked && self == System::AlignmallocContiguous
    }
}

/// The `mixed` test's size bands, per thread: (per mille, smallest, largest), uniform within a
/// band.
pub const MIX: [(u64, u64, u64); 5] = [
    (60, 0, 0),
    (520, 1, 256),
    (290, 257, 4 << 10),
    (126, (4 << 10) + 1, 64 << 10),
    (4, 1 << 20, 3 << 20),
];

/// The most a `malloc_contiguous` row of the mixed test may hold per byte asked.
pub const FOOTPRINT_BOUND_CONTIGUOUS: f64 = 1.25;
/// The most a `malloc` (arranged) row of the mixed test may hold per byte asked.
pub const FOOTPRINT_BOUND_ARRANGED: f64 = 2.0;

/// The `mixed` test's sizes: `threads` draws from [`MIX`], seeded by `seed` and `round`.
pub fn mixed_sizes(threads: u32, seed: u64, round: u64) -> Vec<u64> {
    (0..u64::from(threads))
        .map(|t| {
            let x = mix(seed ^ (round << 40) ^ t ^ 0x6d69_7865_6400);
            let mut pick = x % 1000;
            for (share, lo, hi) in MIX {
                if pick < share {
                    return lo + (x / 1000) % (hi - lo + 1);
                }
                pick -= share;
            }
            unreachable!("the shares add up to 1000")
        })
        .collect()
}

/// The three tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Test {
    /// One object per thread from [2^n, 2^(n+1)), n = 4..22.
    Singular,
    /// Rounds of 1-256 KiB objects, a fresh draw per round.
    Random,
    /// 128 to 262 144 threads at 1 KiB and 8 KiB.
    Scaling,
    /// The harness alone: as many threads as the singular test, each asking 0 bytes (no
    /// allocator work), so the launch and the wait for the kernel are what is timed.
    Floor,
    /// --mixed-threads threads asking sizes from the mix of general code (`MIX`), every byte
    /// checked; reports failed allocations and the footprint.
    Mixed,
}

/// Options of `alloc`.
#[derive(clap::Args)]
pub struct Args {
    /// Tests to run.
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1.., default_value = "floor,singular,random,scaling")]
    tests: Vec<Test>,
    /// Threads of the mixed test (a multiple of 32).
    #[arg(long, default_value_t = 262_144, value_parser = cli::warp_multiple)]
    mixed_threads: u32,
    /// The arena's size in GiB (default: the runtime's, a quarter of free GPU memory; on the sim
    /// backend four times --budget-gib). Gallatin's pool is as large.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    arena_gib: Option<u64>,
    /// Threads of the singular and random tests (a multiple of 32).
    #[arg(long, default_value_t = 16_384, value_parser = cli::warp_multiple)]
    threads: u32,
    /// The singular test's n, as `LO-HI` or one n: sizes from [2^n, 2^(n+1)), n within 4..22.
    #[arg(long, default_value = "4-22", value_parser = singular_range)]
    singular_log2: (u32, u32),
    /// Systems to run, in this order (default: every one this backend has: alignmalloc,
    /// alignmalloc-contiguous, then on the GPU cuda-malloc and, with its harness, gallatin).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1..)]
    systems: Vec<System>,
    /// Also time each of alignmalloc's and CUDA malloc's kernels on the GPU with events
    /// (`alloc_kernel_ms` / `free_kernel_ms` in the JSON), to tell the kernel's own time from the
    /// launch and the wait. The events' records fall inside the wall-time window, so leave this
    /// off for figures compared with Gallatin's (its harness records none).
    #[arg(long)]
    kernel_times: bool,
    /// alignmalloc-contiguous frees each object by its address (`am::post_free(void*)`, as a
    /// program that keeps plain pointers does, and as Gallatin and CUDA free) instead of by its
    /// handle. alignmalloc's arranged objects are still freed by handle.
    #[arg(long, conflicts_with = "devices")]
    free_by_pointer: bool,
    /// Most threads of the scaling test (it doubles from 128 up to this; at least 128).
    #[arg(long, default_value_t = 262_144, value_parser = clap::value_parser!(u32).range(128..))]
    scaling_max_threads: u32,
    /// Timed rounds per row (the median is reported), after one warm-up round.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    repeats: u32,
    /// Most bytes one round may ask for, in GiB (fewer threads run where more would be asked).
    /// The sim backend holds it to 1 GiB of host memory.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    budget_gib: u64,
    /// Seed of the sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Backend: auto (the GPU when there is one, else CPU warps on the sim backend), cuda or sim.
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Instead of the tests: one runtime per device of this list (`all`, or ordinals like 0,1;
    /// an ordinal twice runs two runtimes on one GPU), each device's allocation rate alone and
    /// all devices' together, at 1 KiB (device caches) and 64 KiB (host), up to
    /// --scaling-max-threads threads per device within --budget-gib shared by the devices.
    #[arg(long, value_name = "LIST")]
    devices: Option<alignmalloc::DeviceList>,
    /// Leave the rounds only this much GPU memory (GiB; a device allocation holds the rest from
    /// before the first round, after Gallatin's pool is set aside): rounds whose objects are
    /// larger touch pages the driver evicts. GPU only; `cuda-malloc` is left out.
    #[arg(long, value_name = "GIB", value_parser = crate::balloon::gib, conflicts_with = "devices")]
    gpu_memory_gib: Option<f64>,
    #[command(flatten)]
    placement: crate::arena_placement::PlacementArgs,
}

/// One timed round.
#[derive(Clone, Copy, Debug, Default)]
pub struct Round {
    /// When the allocation kernel was launched (or the CPU warps started).
    pub alloc_started: Option<std::time::Instant>,
    /// The allocation kernel (or CPU warps), ms.
    pub alloc_ms: f64,
    /// The free kernel, ms.
    pub free_ms: f64,
    /// Threads whose allocation did not answer Ok.
    pub failures: u64,
    /// Objects whose tags did not survive (overlap or wrong handle).
    pub bad: u64,
    /// Frees that did not answer Ok.
    pub bad_frees: u64,
    /// Bytes the allocator held for the round's objects after the allocation (its chunks and
    /// the device caches' slabs); `None` for systems that do not say.
    pub footprint_bytes: Option<u64>,
    /// The allocation and the free kernel on the GPU's clock (events around each; `--kernel-times`).
    pub kernel_ms: Option<(f64, f64)>,
}

/// What alignmalloc holds for live objects now: the host's chunks (rounding and packing
/// included) and the slabs the device caches hold.
pub fn footprint(rt: &Runtime) -> u64 {
    rt.object_bytes() + rt.cache_stats().map_or(0, |c| c.held_bytes)
}

/// What each backend runs: one round of allocate, tag, check, free.
pub trait Rounds {
    /// Which systems this backend has.
    fn systems(&self) -> Vec<System>;
    /// One round over `sizes` (one per thread); `every_byte`: write and check every byte of
    /// each object instead of its first and last word.
    fn round(&mut self, system: System, sizes: &[u64], every_byte: bool) -> anyhow::Result<Round>;
    /// The runtime the rounds allocate from.
    fn runtime(&self) -> &Runtime;
}

/// After a round on the sim backend: the allocator's invariants hold (the caches stay warm for
/// the next round). The GPU's rounds leave this to the row's end ([`check_empty`]), outside the
/// timed launches (gpu.rs says why).
pub fn check_invariants(rt: &Runtime, system: System) -> anyhow::Result<()> {
    if !system.is_ours() {
        return Ok(());
    }
    rt.check_invariants()
        .map_err(|e| anyhow::anyhow!("{}: allocator invariants after a round: {e}", system.name()))
}

/// After a free kernel that posted its frees (`am::post_free`): wait for the host's answers,
/// then the objects of the round that were not freed (a refused or a lost free), from the
/// counters: `objects` frees should have been counted `Ok` since `before`, and none refused.
pub fn posted_frees_failed(
    rt: &Runtime,
    before: &ResolverCounters,
    objects: u64,
) -> anyhow::Result<u64> {
    rt.settle()?;
    let after = rt.counters()?;
    let ok = LaneStatus::Ok as usize;
    let freed = after.by_lane_status[ok] - before.by_lane_status[ok];
    let refused: u64 = (0..after.by_lane_status.len())
        .filter(|&s| s != ok)
        .map(|s| after.by_lane_status[s] - before.by_lane_status[s])
        .sum();
    Ok(refused + objects.saturating_sub(freed))
}

/// What the device caches did during one row (all its rounds, the warm-up included).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RowCaches {
    /// Slabs the host handed to the caches.
    refills: u64,
    /// Times a class's warps found no slab published and waited for the host's next turn.
    asks: u64,
    /// Slabs the device gave back as their last object was freed (the drain at the row's end
    /// included: it retires each class's current slab). The rest of the slabs handed out were
    /// published ahead of need and taken back unused by that drain.
    returns: u64,
    /// Asks the host could not serve (those lanes went through the mailbox).
    denials: u64,
    /// Bytes the caches held after the last round, before the drain.
    held_bytes: u64,
}

impl RowCaches {
    fn between(
        before: &CacheStatsSnapshot,
        held_bytes: u64,
        drained: &CacheStatsSnapshot,
    ) -> RowCaches {
        RowCaches {
            refills: drained.refills - before.refills,
            asks: drained.asks - before.asks,
            returns: drained.returns - before.returns,
            denials: drained.denials - before.denials,
            held_bytes,
        }
    }
}

/// After a row's rounds: the caches drained, nothing is left allocated.
pub fn check_empty(rt: &Runtime, system: System) -> anyhow::Result<()> {
    if !system.is_ours() {
        return Ok(());
    }
    // The caches give back what no object uses; only live objects keep anything.
    rt.drain_caches()?;
    rt.check_invariants().map_err(|e| {
        anyhow::anyhow!("{}: allocator invariants after a round: {e}", system.name())
    })?;
    anyhow::ensure!(
        rt.is_empty(),
        "{}: objects left allocated after freeing them all ({} chunks live; device caches: {:?})",
        system.name(),
        rt.live_chunks(),
        rt.cache_stats()
    );
    Ok(())
}

/// One row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    test: Test,
    /// n for singular, KiB per object for scaling, empty for random.
    parameter: String,
    threads: u32,
    system: System,
    alloc_ms: f64,
    free_ms: f64,
    alloc_ms_rounds: Vec<f64>,
    free_ms_rounds: Vec<f64>,
    /// Medians of the kernels' own times on the GPU's clock, with `--kernel-times`.
    #[serde(skip_serializing_if = "Option::is_none")]
    alloc_kernel_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    free_kernel_ms: Option<f64>,
    /// The device caches during the row (`None`: off, or a system that does not use them).
    caches: Option<RowCaches>,
    /// Allocation time over alignmalloc's on the same row (above 1: alignmalloc is faster).
    alloc_ratio_to_alignmalloc: Option<f64>,
    /// Objects allocated per second (median round).
    objects_per_s: f64,
    /// Allocations that failed (a lane asking 0 bytes never does), over all rounds.
    failed: u64,
    /// Allocations asked for in all rounds (lanes asking more than 0 bytes).
    allocations: u64,
    bad: u64,
    bad_frees: u64,
    /// Bytes the last round asked for.
    asked_bytes: u64,
    /// The most bytes the allocator held for a round's objects (see [`Round::footprint_bytes`]).
    footprint_bytes: Option<u64>,
    /// `footprint_bytes / asked_bytes`.
    footprint_ratio: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    backend: String,
    device: String,
    times: &'static str,
    budget_bytes: u64,
    /// The arena's first reservation (and Gallatin's pool).
    arena_bytes: u64,
    repeats: u32,
    seed: u64,
    /// Why the `gallatin` rows are absent, when they are.
    gallatin_absent: Option<String>,
    /// GiB of GPU memory the rounds had (`--gpu-memory-gib`, as measured once the rest was held
    /// back); `None`: the whole card.
    gpu_memory_gib: Option<f64>,
    /// alignmalloc's arena placement (`--placement`).
    arena_placement: &'static str,
    /// Whether alignmalloc-contiguous freed by address (`--free-by-pointer`).
    free_by_pointer: bool,
    rows: Vec<Row>,
}

/// Sizes of one round: `threads` draws from `[lo, hi)`, seeded by `seed` and `round`.
pub fn draw(threads: u32, lo: u64, hi: u64, seed: u64, round: u64) -> Vec<u64> {
    (0..u64::from(threads))
        .map(|t| lo + mix(seed ^ (round << 40) ^ t) % (hi - lo))
        .collect()
}

/// `--singular-log2`: `LO-HI` or one n, within 4..=22.
fn singular_range(text: &str) -> Result<(u32, u32), String> {
    let parse = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{t}` is not a whole number (expected LO-HI, e.g. 4-14)"))
    };
    let (lo, hi) = match text.split_once('-') {
        Some((lo, hi)) => (parse(lo)?, parse(hi)?),
        None => (parse(text)?, parse(text)?),
    };
    if !(4..=22).contains(&lo) || !(4..=22).contains(&hi) || lo > hi {
        return Err(format!(
            "{lo}-{hi}: the singular test's n runs from 4 to 22, the lower first"
        ));
    }
    Ok((lo, hi))
}

/// The systems `args` asks for, in its order, of those `rounds` has; all of them by default. A
/// system asked for and not there is an error that says why.
fn chosen_systems(rounds: &dyn Rounds, args: &Args) -> anyhow::Result<Vec<System>> {
    let there = rounds.systems();
    if args.systems.is_empty() {
        return Ok(there);
    }
    let mut chosen = Vec::new();
    for &system in &args.systems {
        if !there.contains(&system) {
            bail!(
                "--systems {}: not in this run ({})",
                system.name(),
                match system {
                    System::Gallatin =>
                        "its harness is not loaded: build it with \
                         bench/gallatin/build.sh and set ALIGNMALLOC_GALLATIN_LIB; the GPU only",
                    System::CudaMalloc => "the GPU only, and not under --gpu-memory-gib",
                    _ => "not on this backend",
                }
            );
        }
        if !chosen.contains(&system) {
            chosen.push(system);
        }
    }
    Ok(chosen)
}

/// Threads that fit `budget` at up to `largest` bytes each (a multiple of 32, at least 32).
fn threads_within(threads: u32, largest: u64, budget: u64) -> u32 {
    let fit = (budget / largest).min(u64::from(threads)) as u32;
    (fit / 32 * 32).max(32)
}

/// One system's rounds of a row, as they come.
#[derive(Default)]
struct RowRounds {
    totals: Round,
    allocs: Vec<f64>,
    frees: Vec<f64>,
    kernel_allocs: Vec<f64>,
    kernel_frees: Vec<f64>,
    threads: u32,
    asked_bytes: u64,
    allocations: u64,
    footprint_bytes: Option<u64>,
}

impl RowRounds {
    /// Round `r` over `sizes` (round 0 is the warm-up, not timed).
    fn add(&mut self, r: u64, sizes: &[u64], got: Round) {
        self.threads = sizes.len() as u32;
        self.asked_bytes = sizes.iter().sum();
        self.allocations += sizes.iter().filter(|&&s| s > 0).count() as u64;
        self.totals.failures += got.failures;
        self.totals.bad += got.bad;
        self.totals.bad_frees += got.bad_frees;
        self.footprint_bytes = self.footprint_bytes.max(got.footprint_bytes);
        if r > 0 {
            self.allocs.push(got.alloc_ms);
            self.frees.push(got.free_ms);
            if let Some((alloc, free)) = got.kernel_ms {
                self.kernel_allocs.push(alloc);
                self.kernel_frees.push(free);
            }
        }
    }
}

/// The systems of a row whose rounds take turns: all of them when at most one is alignmalloc's
/// (its caches' figures and footprint are the runtime's, so two of ours cannot share a
/// stretch), else each alone. Taking turns puts a stretch where the GPU runs slow (several
/// launches in a row) into every system's rounds alike, not into one system's row.
fn turns(systems: &[System]) -> Vec<Vec<System>> {
    if systems.iter().filter(|s| s.is_ours()).count() <= 1 {
        vec![systems.to_vec()]
    } else {
        systems.iter().map(|&s| vec![s]).collect()
    }
}

/// Which of a turn's `systems` systems runs when in round `r`: in order, and in the other order
/// every other round.
fn turn_order(r: u64, systems: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..systems).collect();
    if r % 2 == 1 {
        order.reverse();
    }
    order
}

/// The rounds of one row for every system: a warm-up, then `repeats` timed rounds, the
/// systems of a turn ([`turns`]) alternating round by round (in the other order every other
/// round, so neither always runs right after the other).
fn row(
    rounds: &mut dyn Rounds,
    args: &Args,
    systems: &[System],
    test: Test,
    parameter: String,
    size_of_round: &dyn Fn(u64) -> Vec<u64>,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for turn in turns(systems) {
        let cache_before = rounds.runtime().cache_stats();
        let mut per_system: Vec<RowRounds> = turn.iter().map(|_| RowRounds::default()).collect();
        for r in 0..=u64::from(args.repeats) {
            let sizes = size_of_round(r);
            for i in turn_order(r, turn.len()) {
                let round = rounds.round(turn[i], &sizes, test == Test::Mixed)?;
                per_system[i].add(r, &sizes, round);
            }
        }
        let held = rounds.runtime().cache_stats().map(|c| c.held_bytes);
        for (&system, mut got) in turn.iter().zip(per_system) {
            check_empty(rounds.runtime(), system)?;
            let caches = match (system, cache_before, held, rounds.runtime().cache_stats()) {
                (System::CudaMalloc | System::Gallatin, ..) => None,
                (_, Some(before), Some(held), Some(drained)) => {
                    Some(RowCaches::between(&before, held, &drained))
                }
                _ => None,
            };
            let alloc_ms = median(&mut got.allocs.clone());
            rows.push(Row {
                test,
                parameter: parameter.clone(),
                threads: got.threads,
                system,
                alloc_ms,
                free_ms: median(&mut got.frees.clone()),
                alloc_ms_rounds: got.allocs,
                free_ms_rounds: got.frees,
                alloc_kernel_ms: (!got.kernel_allocs.is_empty())
                    .then(|| median(&mut got.kernel_allocs)),
                free_kernel_ms: (!got.kernel_frees.is_empty())
                    .then(|| median(&mut got.kernel_frees)),
                caches,
                alloc_ratio_to_alignmalloc: None,
                objects_per_s: f64::from(got.threads) / (alloc_ms / 1e3),
                failed: got.totals.failures,
                allocations: got.allocations,
                bad: got.totals.bad,
                bad_frees: got.totals.bad_frees,
                asked_bytes: got.asked_bytes,
                footprint_bytes: got.footprint_bytes,
                footprint_ratio: got
                    .footprint_bytes
                    .map(|f| f as f64 / got.asked_bytes.max(1) as f64),
            });
        }
    }
    // The rows in the order the systems were asked.
    rows.sort_by_key(|r| systems.iter().position(|&s| s == r.system));
    let ours = rows
        .iter()
        .find(|r| r.system == System::Alignmalloc)
        .map(|r| r.alloc_ms);
    for r in &mut rows {
        r.alloc_ratio_to_alignmalloc = ours.map(|o| r.alloc_ms / o);
    }
    for r in &rows {
        tracing::info!(
            test = ?r.test,
            parameter = r.parameter,
            threads = r.threads,
            system = r.system.name(),
            alloc_ms = r.alloc_ms,
            free_ms = r.free_ms,
            "row measured"
        );
    }
    Ok(rows)
}

/// Rows each test measures per system (at most: the budget can end the scaling test early).
fn rows_per_system(args: &Args) -> u64 {
    let doublings = u64::from((args.scaling_max_threads / 128).ilog2()) + 1;
    args.tests
        .iter()
        .map(|test| match test {
            Test::Singular => u64::from(args.singular_log2.1 - args.singular_log2.0 + 1),
            Test::Random => 1,
            Test::Scaling => 2 * doublings,
            Test::Floor | Test::Mixed => 1,
        })
        .sum()
}

fn run_tests(rounds: &mut dyn Rounds, args: &Args, budget: u64) -> anyhow::Result<Vec<Row>> {
    // Before any round: a system asked for and not there stops the run at once.
    let systems = chosen_systems(rounds, args)?;
    let bar = crate::progress::steps(rows_per_system(args), "rows");
    let row = |rounds: &mut dyn Rounds,
               test: Test,
               parameter: String,
               sizes: &dyn Fn(u64) -> Vec<u64>| {
        bar.set_message(format!("{test:?} {parameter}").to_lowercase());
        let rows = row(rounds, args, &systems, test, parameter, sizes);
        bar.inc(1);
        rows
    };
    let mut rows = Vec::new();
    for &test in &args.tests {
        match test {
            Test::Mixed => {
                let threads = args.mixed_threads;
                rows.extend(row(rounds, test, "mix".into(), &|r| {
                    mixed_sizes(threads, args.seed, r)
                })?);
            }
            Test::Floor => {
                let threads = args.threads;
                rows.extend(row(rounds, test, "0 B".into(), &|_| {
                    vec![0; threads as usize]
                })?);
            }
            Test::Singular => {
                for n in args.singular_log2.0..=args.singular_log2.1 {
                    let (lo, hi) = (1u64 << n, 1u64 << (n + 1));
                    let threads = threads_within(args.threads, hi, budget);
                    rows.extend(row(rounds, test, n.to_string(), &|r| {
                        draw(threads, lo, hi, args.seed + u64::from(n), r)
                    })?);
                }
            }
            Test::Random => {
                let threads = threads_within(args.threads, 256 << 10, budget);
                rows.extend(row(rounds, test, "1-256 KiB".into(), &|r| {
                    draw(threads, 1 << 10, (256 << 10) + 1, args.seed, r)
                })?);
            }
            Test::Scaling => {
                for kib in [1u64, 8] {
                    let mut threads = 128u32;
                    while threads <= args.scaling_max_threads {
                        if u64::from(threads) * (kib << 10) > budget {
                            note!(
                                "scaling: {threads} threads x {kib} KiB exceed the budget; stopping there"
                            );
                            break;
                        }
                        let t = threads;
                        rows.extend(row(rounds, test, format!("{kib} KiB"), &|_| {
                            vec![kib << 10; t as usize]
                        })?);
                        threads *= 2;
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// The table's `sizes` cell: the JSON's `parameter`, with a singular row's n as 2^n.
fn sizes_label(r: &Row) -> String {
    match r.test {
        Test::Singular => format!("2^{}", r.parameter),
        _ => r.parameter.clone(),
    }
}

fn print_table(rows: &[Row], times: &str) {
    println!("times: {times}");
    println!(
        "{:<9} {:>10} {:>7} {:<23} {:>10} {:>10} {:>8} {:>12} {:>7} {:>6} {:>9} {:>18} {:>9}",
        "test",
        "sizes",
        "threads",
        "system",
        "alloc ms",
        "free ms",
        "x ours",
        "objects/s",
        "failed",
        "wrong",
        "footprint",
        "slabs in/back/x/ask",
        "held MiB"
    );
    for r in rows {
        println!(
            "{:<9} {:>10} {:>7} {:<23} {:>10.3} {:>10.3} {:>8} {:>12.3e} {:>7} {:>6} {:>9} {:>18} {:>9}",
            format!("{:?}", r.test).to_lowercase(),
            sizes_label(r),
            r.threads,
            r.system.name(),
            r.alloc_ms,
            r.free_ms,
            r.alloc_ratio_to_alignmalloc
                .map_or("-".into(), |x| format!("{x:.2}")),
            r.objects_per_s,
            r.failed,
            r.bad + r.bad_frees,
            r.footprint_ratio.map_or("-".into(), |x| format!("{x:.3}x")),
            r.caches.map_or("-".into(), |c| format!(
                "{}/{}/{}/{}",
                c.refills, c.returns, c.denials, c.asks
            )),
            r.caches.map_or("-".into(), |c| format!(
                "{:.0}",
                c.held_bytes as f64 / (1 << 20) as f64
            )),
        );
    }
    println!(
        "sizes: each thread's object; singular 2^n: from [2^n, 2^(n+1)) bytes (JSON parameter: n); mix: the mixed test's bands (docs/benchmarks.md)"
    );
    println!(
        "x ours: allocation time over alignmalloc's on the same row (above 1: alignmalloc is faster); failed: allocations that got no memory, over all rounds (0 for alignmalloc, or the run fails); wrong: damaged objects and failed frees (always 0, or the run fails)"
    );
    println!(
        "footprint: bytes the allocator held for a round's objects after allocating them (its chunks, rounding and packing included, and the device caches' slabs) over the bytes asked; the most of any round"
    );
    println!(
        "slabs: handed to the device caches during the row / given back with every object freed (the rest were published ahead of need and taken back unused by the drain at the row's end) / asks denied (lanes sent through the mailbox) / asks the host read (a class found no slab published and its warps waited for the host); held MiB: what the caches held before that drain"
    );
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    if let Some(list) = &args.devices {
        return devices::run(args, list);
    }
    let gpu = cli::on_gpu(args.backend)?;
    crate::balloon::check(args.gpu_memory_gib, gpu)?;
    args.placement.check(gpu)?;
    if args.devices.is_some() && args.placement.placement()? != alignmalloc::Placement::Migrate {
        bail!("alloc --placement applies to one runtime's tests, not with --devices");
    }
    let budget = if gpu {
        args.budget_gib << 30
    } else {
        (args.budget_gib << 30).min(1 << 30)
    };
    let mut builder = args.placement.apply(
        Runtime::builder().backend(args.backend),
        args.gpu_memory_gib,
    )?;
    if let Some(gib) = args.arena_gib {
        builder = builder.arena_bytes(gib << 30);
    } else if !gpu {
        // Host memory stands in for the GPU's: room for a round plus the chunks' rounding.
        builder = builder.arena_bytes(budget * 4);
    }
    let rt = builder.build().context("starting the runtime")?;
    note!("backend: {:?} ({})", rt.backend(), rt.backend_reason());
    if args.free_by_pointer {
        note!("alignmalloc-contiguous frees by address (am::post_free(void*)), not by handle");
    }
    if let Some(line) = args.placement.describe(&rt) {
        note!("{line}");
    }
    let arena_bytes = rt.arena_bytes();
    let mut left_gib = None;
    let (rows, times, gallatin_absent) = match rt.backend() {
        BackendKind::Cuda => {
            let (harness, absent) = crate::gallatin::load_beside(&rt, arena_bytes, args.seed);
            if let Some(why) = &absent {
                note!("gallatin: no rows ({why})");
            }
            let pressure = args.gpu_memory_gib.is_some();
            if pressure {
                note!(
                    "under --gpu-memory-gib: cuda-malloc is left out (its heap would come out of \
                     what is left)"
                );
            }
            let mut rounds =
                gpu::GpuRounds::new(&rt, budget, harness, !pressure, args.kernel_times)?
                    .free_by_pointer(args.free_by_pointer);
            // Held back from here on, before any round touches the arena.
            let balloon = match args.gpu_memory_gib {
                Some(gib) => Some(crate::balloon::Balloon::inflate(&rt, gib)?),
                None => None,
            };
            left_gib = balloon.as_ref().map(|b| b.left_gib());
            let rows = run_tests(&mut rounds, args, budget)?;
            drop(balloon);
            (rows, "GPU kernel wall time", absent)
        }
        BackendKind::Sim => {
            let mut rounds = sim::SimRounds::new(&rt).free_by_pointer(args.free_by_pointer);
            (
                run_tests(&mut rounds, args, budget)?,
                "CPU warps on the sim backend: this host's time through the mailbox, not a GPU's",
                Some("GPU only".to_string()),
            )
        }
    };
    print_table(&rows, times);
    if let Some(gib) = left_gib {
        println!(
            "with {gib:.2} GiB of GPU memory left (--gpu-memory-gib); Gallatin's pool was set \
             aside before, so only alignmalloc's managed arena is under pressure"
        );
    }
    if let Some(why) = &gallatin_absent {
        println!("gallatin: no rows: {why}");
    }
    // alignmalloc must never fail, damage an object or fail a free; the baselines may run out of
    // room (a finding about them, reported in their rows), but never damage an object.
    let wrong: u64 = rows
        .iter()
        .map(|r| r.bad + r.bad_frees + if r.system.is_ours() { r.failed } else { 0 })
        .sum();
    for system in [System::CudaMalloc, System::Gallatin] {
        let failed: u64 = rows
            .iter()
            .filter(|r| r.system == system)
            .map(|r| r.failed)
            .sum();
        if failed > 0 {
            note!(
                "{}: {failed} allocations got no memory (see its rows)",
                system.name()
            );
        }
    }
    let over_bound: Vec<String> = rows
        .iter()
        .filter(|r| r.test == Test::Mixed && r.system.is_ours())
        .filter_map(|r| {
            let bound = if r.system == System::Alignmalloc {
                FOOTPRINT_BOUND_ARRANGED
            } else {
                FOOTPRINT_BOUND_CONTIGUOUS
            };
            let ratio = r.footprint_ratio?;
            (ratio > bound)
                .then(|| format!("{} holds {ratio:.3}x (bound {bound}x)", r.system.name()))
        })
        .collect();
    let report = Report {
        backend: format!("{:?}", rt.backend()),
        device: rt
            .device_info()
            .map_or_else(|| "none (CPU warps)".to_string(), |i| i.name.clone()),
        times,
        budget_bytes: budget,
        arena_bytes,
        repeats: args.repeats,
        seed: args.seed,
        gallatin_absent,
        gpu_memory_gib: left_gib,
        arena_placement: args.placement.placement()?.name(),
        free_by_pointer: args.free_by_pointer,
        rows,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if wrong != 0 {
        bail!(
            "{wrong} alignmalloc allocations failed, objects were damaged or frees failed (see the table)"
        );
    }
    if !over_bound.is_empty() {
        bail!(
            "the mixed test's footprint is over its bound: {}",
            over_bound.join("; ")
        );
    }
    Ok(())
}

/// How the service thread saw one kernel (or one pass of CPU warps): the requests it answered
/// and the sweeps that found any (their mean size tells whether requests queued up on the host
/// or trickled in from the device). CUDA's malloc sends none.
fn log_service(rt: &Runtime, system: System, threads: u32, before: &StatsSnapshot, kernel: &str) {
    let after = rt.service_stats();
    let (requests, batches) = (
        after.requests - before.requests,
        after.batches - before.batches,
    );
    if requests > 0 {
        tracing::info!(
            ?system,
            threads,
            kernel,
            requests,
            batches,
            mean_batch = requests as f64 / batches.max(1) as f64,
            busy_ms = (after.busy_nanos - before.busy_nanos) as f64 / 1e6,
            collect_ms = (after.collect_nanos - before.collect_nanos) as f64 / 1e6,
            resolve_ms = (after.resolve_nanos - before.resolve_nanos) as f64 / 1e6,
            "service during the kernel"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_take_turns_round_by_round_unless_two_are_ours() {
        use System::{Alignmalloc, AlignmallocContiguous, CudaMalloc, Gallatin};
        assert_eq!(
            turns(&[Alignmalloc, Gallatin, CudaMalloc]),
            vec![vec![Alignmalloc, Gallatin, CudaMalloc]]
        );
        assert_eq!(
            turns(&[Alignmalloc, AlignmallocContiguous, Gallatin]),
            vec![
                vec![Alignmalloc],
                vec![AlignmallocContiguous],
                vec![Gallatin]
            ]
        );
        assert_eq!(turn_order(0, 2), [0, 1]);
        assert_eq!(turn_order(1, 2), [1, 0]);
        assert_eq!(turn_order(4, 3), [0, 1, 2]);
        assert_eq!(turn_order(5, 1), [0]);
    }

    #[test]
    fn draws_stay_in_range_and_change_per_round() {
        let a = draw(1000, 16, 32, 3, 0);
        assert!(a.iter().all(|&s| (16..32).contains(&s)));
        assert_eq!(a.iter().min(), Some(&16));
        assert_eq!(a.iter().max(), Some(&31));
        assert_ne!(a, draw(1000, 16, 32, 3, 1));
        assert_eq!(a, draw(1000, 16, 32, 3, 0));
    }

    #[test]
    fn pressure_and_placement_are_refused_before_any_work_on_the_sim_backend() {
        use crate::testing::parse;
        for (words, wanted) in [
            (
                &["--backend", "sim", "--gpu-memory-gib", "1"][..],
                "needs the GPU",
            ),
            (
                &["--backend", "sim", "--placement", "tiered"],
                "needs a GPU",
            ),
            (
                &["--backend", "sim", "--hot-object-bytes", "64"],
                "only to --placement tiered",
            ),
        ] {
            let args: Args = parse(words).unwrap();
            let err = format!("{:#}", run(&args).unwrap_err());
            assert!(err.contains(wanted), "{words:?}: {err}");
        }
        assert!(parse::<Args>(&["--devices", "0", "--gpu-memory-gib", "1"]).is_err());
    }

    #[test]
    fn singular_sizes_and_systems_are_chosen_or_refused_with_the_reason() {
        use crate::testing::{parse, take_json, temp};
        assert_eq!(singular_range("4-14"), Ok((4, 14)));
        assert_eq!(singular_range("9"), Ok((9, 9)));
        for bad in ["3-9", "9-4", "4-23", "x", "4-"] {
            let err = singular_range(bad).unwrap_err();
            assert!(
                err.contains("4 to 22") || err.contains("whole number"),
                "{bad}: {err}"
            );
        }
        // A system the sim backend lacks stops the run before any round, naming why.
        for (system, wanted) in [
            ("gallatin", "ALIGNMALLOC_GALLATIN_LIB"),
            ("cuda-malloc", "GPU"),
        ] {
            let args: Args = parse(&["--backend", "sim", "--systems", system]).unwrap();
            let err = format!("{:#}", run(&args).unwrap_err());
            assert!(
                err.contains(wanted) && err.contains(system),
                "{system}: {err}"
            );
        }
        // The systems asked for run in their order, the singular rows asked for only.
        let json = temp("alloc-chosen.json");
        let args: Args = parse(&[
            "--backend",
            "sim",
            "--tests",
            "singular",
            "--singular-log2",
            "5-6",
            "--threads",
            "64",
            "--repeats",
            "1",
            "--systems",
            "alignmalloc-contiguous,alignmalloc",
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        run(&args).unwrap();
        let report = take_json(&json);
        let rows: Vec<(String, String)> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["parameter"].as_str().unwrap().to_string(),
                    r["system"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = [
            ("5", "alignmalloc-contiguous"),
            ("5", "alignmalloc"),
            ("6", "alignmalloc-contiguous"),
            ("6", "alignmalloc"),
        ]
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
        assert_eq!(rows, expected);
    }

    #[test]
    fn threads_shrink_to_the_budget_in_whole_warps() {
        assert_eq!(threads_within(16_384, 1 << 10, 1 << 30), 16_384);
        assert_eq!(threads_within(16_384, 8 << 20, 16 << 30), 2048);
        assert_eq!(threads_within(16_384, 8 << 20, 1 << 20), 32);
        assert_eq!(threads_within(100, 1, 1 << 30), 96);
    }

    #[test]
    fn frees_by_pointer_give_back_every_object_and_are_refused_beside_devices() {
        use crate::testing::{parse, take_json, temp};
        let json = temp("alloc-by-pointer.json");
        let by_pointer = |words: &[&str]| {
            let mut all = vec![
                "--backend",
                "sim",
                "--tests",
                "singular",
                "--free-by-pointer",
            ];
            all.extend_from_slice(words);
            parse::<Args>(&all).unwrap()
        };
        // 16-31 B (a device cache's objects) and 64-127 KiB (the host's): both systems, the
        // contiguous one freeing by address; any free refused or object left fails the run.
        let systems = "alignmalloc-contiguous,alignmalloc";
        let path = json.to_str().unwrap();
        run(&by_pointer(&[
            "--singular-log2",
            "4",
            "--threads",
            "256",
            "--repeats",
            "2",
            "--systems",
            systems,
            "--json",
            path,
        ]))
        .unwrap();
        run(&by_pointer(&[
            "--singular-log2",
            "16",
            "--threads",
            "64",
            "--repeats",
            "1",
            "--systems",
            "alignmalloc-contiguous",
        ]))
        .unwrap();
        let report = take_json(&json);
        assert_eq!(report["free_by_pointer"], true);
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r["bad"] == 0 && r["failed"] == 0));
        let Err(err) = parse::<Args>(&["--devices", "all", "--free-by-pointer"]) else {
            panic!("--free-by-pointer beside --devices was taken");
        };
        assert!(err.to_string().contains("--devices"), "{err}");
    }

    #[test]
    fn the_sim_backend_runs_every_test_without_a_wrong_object() {
        use crate::testing::{parse, take_json, temp};
        let json = temp("alloc.json");
        let args: Args = parse(&[
            "--backend",
            "sim",
            "--threads",
            "256",
            "--repeats",
            "1",
            "--scaling-max-threads",
            "2048",
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        // Fails on any failed allocation, damaged object, failed free or unclean allocator.
        run(&args).unwrap();
        let report = take_json(&json);
        assert!(report["gpu_memory_gib"].is_null(), "the whole card");
        assert_eq!(report["arena_placement"], "migrate");
        let rows = report["rows"].as_array().unwrap();
        // 19 singular sizes, one random row and 2 x 5 scaling points, by 2 systems.
        let count = |test: &str| rows.iter().filter(|r| r["test"] == test).count();
        assert_eq!(count("floor"), 2);
        assert_eq!(count("singular"), 19 * 2);
        assert_eq!(count("random"), 2);
        assert_eq!(count("scaling"), 2 * 5 * 2);
        let n22 = rows.iter().find(|r| r["parameter"] == "22").unwrap();
        assert_eq!(n22["threads"], 128, "1 GiB / 8 MiB");
        assert!(rows.iter().all(|r| r["bad"] == 0 && r["failed"] == 0));
        // The device caches serve up to 32 KiB (n = 4..14), and every slab comes back.
        let ours = |n: u32| {
            rows.iter()
                .find(|r| {
                    r["parameter"].as_str() == Some(n.to_string().as_str())
                        && r["system"] == "alignmalloc"
                })
                .unwrap()["caches"]
                .clone()
        };
        for n in 4..=22 {
            let caches = ours(n);
            let refills = caches["refills"].as_u64().unwrap();
            assert_eq!(refills > 0, n <= 14, "n = {n}: {caches}");
            assert!(caches["returns"].as_u64().unwrap() <= refills);
            // Every slab handed out was asked for or published ahead; a class's first slab
            // after the drain of the row before is asked for.
            let asks = caches["asks"].as_u64().unwrap();
            assert!(
                asks <= refills && (asks > 0) == (refills > 0),
                "n = {n}: {caches}"
            );
            assert_eq!(caches["denials"], 0);
        }
        assert!(ours(4)["held_bytes"].as_u64().unwrap() >= 2 << 20);
        let cuda_rows = rows.iter().filter(|r| r["system"] == "cuda-malloc");
        assert!(cuda_rows.into_iter().all(|r| r["caches"].is_null()));
    }
}
