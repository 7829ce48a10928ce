//! `alignmalloc`: the project's command line. Each subcommand is one job; results go to the
//! terminal and, with `--json`, to a file.

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod access;
mod alloc;
mod arena_placement;
mod balloon;
mod cli;
mod compare;
mod gallatin;
mod graph;
mod launch;
mod mailbox_stress;
mod multi_device;
mod parity;
mod patterns;
mod plot;
mod progress;
mod selftest;
mod soak;
mod stats;
mod uvm;
mod walk;
mod wrap;

/// alignmalloc: a warp-aware allocator for CUDA Unified Memory.
#[derive(Parser)]
#[command(name = "alignmalloc", version, about, long_about = None)]
struct Cli {
    /// More log lines on stderr: -v for info, -vv for debug, -vvv for trace (default: warnings
    /// and errors only; RUST_LOG, when set, decides instead).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// The log filter for `-v` repeated `verbose` times, unless `rust_log` (RUST_LOG) says.
fn log_filter(verbose: u8, rust_log: Option<&str>) -> (String, bool) {
    if let Some(filter) = rust_log.filter(|s| EnvFilter::try_new(s).is_ok()) {
        return (filter.to_string(), true);
    }
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    (level.to_string(), verbose > 0)
}

#[derive(Subcommand)]
enum Command {
    /// The main job: uniform random walks (DeepWalk style) from every vertex of a graph whose
    /// adjacency lists are allocated from inside kernels (one thread per vertex), against
    /// arrangement off, CUDA's device malloc and a managed CSR, each walk checked against a CPU
    /// reference. On the GPU when there is one; otherwise CPU warps through the same runtime and
    /// the UVM simulator (modelled times, said so). Example: `alignmalloc walk --rmat 16`.
    Walk(walk::Args),
    /// Allocation speed from inside kernels: one object per thread of sizes 2^4..2^23 bytes
    /// (singular), rounds of random 1-256 KiB objects (random), and 128 to 262 144 threads at 1
    /// and 8 KiB (scaling), for alignmalloc, arrangement off and CUDA's device malloc; every
    /// object tag-checked. On the GPU when there is one, else CPU warps (host times, said so).
    Alloc(alloc::Args),
    /// Two builds' `alloc` reports row by row: each row's median over a build's runs, the
    /// baseline's time over the variant's, and the median ratio over the rows; kernel times
    /// (`alloc --kernel-times`) unless --wall. Refuses reports of different cards. Example:
    /// `alignmalloc compare --baseline a1.json a2.json --variant b1.json b2.json`.
    Compare(compare::Args),
    /// How fast kernels read what they allocated, data first on the host: 1 024 threads x 100
    /// reads over 1 KiB to 8 MiB per thread (random) and 128 threads over 1 to 16 MiB (large),
    /// lanes reading together (lockstep), independently, or sweeping; alignmalloc against
    /// arrangement off and CUDA's device heap. On the GPU when there is one, else modelled by the
    /// UVM simulator (said so).
    Access(access::Args),
    /// Draw the figures (SVG and PNG, one line per system) of walk, alloc and access JSON
    /// reports: e.g. `alignmalloc plot alloc.json access.json walk-rmat*.json --out-dir figures`
    /// (other JSON files are skipped, and said so).
    Plot(plot::Args),
    /// Run the CUDA layout header (layout.h) on the GPU over random inputs and check every result
    /// against the Rust translator. Needs a CUDA GPU and NVRTC; exits non-zero on any mismatch.
    LayoutParity(parity::Args),
    /// Run many warps of a kernel allocating, tagging, checking and freeing through the device
    /// client against the host service thread (all classes, both layouts, divergent calls, bad
    /// inputs). Needs a CUDA GPU and NVRTC; exits non-zero on any failure.
    MailboxStress(mailbox_stress::Args),
    /// Check the whole allocation path end to end: (a) many threads allocate across all size
    /// classes, write their owner tag through am::ptr, and the host verifies every byte and that
    /// nothing overlaps; (b) rounds of random malloc/free verified on the device; (c) bad input
    /// from device code; (d) fault counters. Runs on the GPU when there is one, else on the sim
    /// backend with CPU warps. Prints a table, writes JSON with --json, exits non-zero on any
    /// failure.
    Selftest(selftest::Args),
    /// Soak the device caches on the GPU: by default 1e9 objects of 1 B to 32 KiB (one in 64
    /// larger, through the host) kept live across launches, every byte tagged and checked before
    /// its free, frees waiting and posted, bad frees whose statuses are checked, the caches
    /// drained between launches; exits non-zero on a damaged byte, a failed allocation or free,
    /// a misjudged bad free, an object not freed, or a broken invariant. Needs a CUDA GPU.
    Soak(soak::Args),
    /// Calibrate the UVM simulator on the GPU: run access patterns (lockstep random, independent
    /// random, per-lane sweeps) over thread-contiguous and warp-arranged objects first written by
    /// the host, record CUPTI's migrated bytes and faults and the kernel times, replay the same
    /// runs in uvmsim, fit its cost model on some ranges and report the errors on the others.
    /// Needs a CUDA GPU, NVRTC and CUPTI.
    UvmCalibrate(uvm::CalibrateArgs),
    /// Oversubscription study in the simulator only: per-thread ranges whose total exceeds the
    /// GPU's memory, random reads, both layouts; faults, migrations, evictions, modelled time.
    UvmOversub(uvm::OversubArgs),
    /// Run an unmodified CUDA program with its managed allocations (cudaMallocManaged,
    /// cuMemAllocManaged) served from an alignmalloc arena, and report its unified-memory
    /// traffic per allocation: `alignmalloc wrap --report r.json -- ./program args`. Exits as
    /// the program exits. Needs libalignmalloc_preload.so (`cargo build --release -p
    /// alignmalloc-preload`).
    Wrap(wrap::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, chosen) = log_filter(cli.verbose, rust_log.as_deref());
    progress::init_logging(filter, chosen);
    match run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_report(&e, cli.verbose));
            std::process::ExitCode::FAILURE
        }
    }
}

/// What a failed command prints on stderr: the error and its causes on one line, whatever
/// RUST_BACKTRACE says (a refused option is the user's to fix, not a bug to trace); with `-vv`,
/// also the backtrace when one was captured.
fn error_report(error: &anyhow::Error, verbose: u8) -> String {
    if verbose >= 2 {
        format!("Error: {error:?}")
    } else {
        format!("Error: {error:#}")
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::LayoutParity(args) => parity::run(&args),
        Command::MailboxStress(args) => mailbox_stress::run(&args),
        Command::Selftest(args) => selftest::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::UvmCalibrate(args) => uvm::calibrate(&args),
        Command::UvmOversub(args) => uvm::oversub(&args),
        Command::Walk(args) => walk::run(&args),
        Command::Wrap(args) => wrap::run(&args),
        Command::Alloc(args) => alloc::run(&args),
        Command::Compare(args) => compare::run(&args),
        Command::Access(args) => access::run(&args),
        Command::Plot(args) => plot::run(&args),
    }
}

/// What the subcommands' tests share: parsing their options as the command line would, and
/// temporary report files.
#[cfg(test)]
mod testing {
    use std::path::PathBuf;

    #[derive(clap::Parser)]
    struct Cli<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }

    /// A subcommand's options from these words (after the subcommand's name).
    pub fn parse<A: clap::Args>(words: &[&str]) -> Result<A, clap::Error> {
        use clap::Parser;
        Cli::<A>::try_parse_from(std::iter::once("test").chain(words.iter().copied()))
            .map(|c| c.args)
    }

    /// A path for a temporary file of this test process.
    pub fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("alignmalloc-{}-{name}", std::process::id()))
    }

    /// Read a JSON report and remove its file.
    pub fn take_json(path: &PathBuf) -> serde_json::Value {
        let text = std::fs::read_to_string(path).expect("the report was written");
        let _ = std::fs::remove_file(path);
        serde_json::from_str(&text).expect("the report is JSON")
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, log_filter, run};

    #[test]
    fn the_log_shows_warnings_unless_asked_for_more() {
        assert_eq!(log_filter(0, None), ("warn".into(), false));
        assert_eq!(log_filter(2, None), ("debug".into(), true));
        assert_eq!(
            log_filter(0, Some("runtime=trace")),
            ("runtime=trace".into(), true)
        );
        let cli = Cli::try_parse_from(["alignmalloc", "selftest", "-vv"]).unwrap();
        assert_eq!(cli.verbose, 2, "-v goes after the subcommand too");
    }

    /// Each subcommand refuses a report into a missing folder before any work (a walk over a
    /// scale-26 graph, a GPU run on a machine without one), naming the option.
    #[test]
    fn every_report_path_is_checked_before_any_work() {
        for words in [
            &["walk", "--rmat", "26"][..],
            &["alloc"],
            &["access"],
            &["selftest"],
            &["layout-parity"],
            &["mailbox-stress"],
            &["uvm-calibrate"],
            &["uvm-oversub"],
        ] {
            let all: Vec<&str> = ["alignmalloc"]
                .iter()
                .chain(words)
                .chain(&["--json", "/nonexistent/report.json"])
                .copied()
                .collect();
            let err = run(Cli::try_parse_from(&all).unwrap().command).unwrap_err();
            assert!(
                format!("{err:#}").starts_with("--json /nonexistent/report.json"),
                "{words:?}: {err:#}"
            );
        }
    }

    /// Thread counts are whole warps (a count kernels would round is refused), arenas hold a block.
    #[test]
    fn counts_kernels_cannot_run_are_refused_naming_the_option() {
        for words in [
            &["alloc", "--threads", "7"][..],
            &["alloc", "--scaling-max-threads", "64"],
            &["selftest", "--threads", "100"],
            &["selftest", "--round-threads", "0"],
            &["selftest", "--arena-mib", "1"],
            &["mailbox-stress", "--threads", "48"],
            &["soak", "--threads", "100"],
            &["soak", "--objects", "0"],
            &["uvm-oversub", "--threads", "33"],
        ] {
            let all: Vec<&str> = ["alignmalloc"].iter().chain(words).copied().collect();
            let err = Cli::try_parse_from(&all)
                .err()
                .expect("refused")
                .to_string();
            assert!(err.contains(words[1]), "{err}");
        }
    }

    /// List options accept what their help shows (commas), and the values as separate words.
    #[test]
    fn list_options_take_what_help_shows() {
        let help = Cli::command()
            .find_subcommand_mut("alloc")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(
            help.contains("[default: floor,singular,random,scaling]"),
            "{help}"
        );
        for args in [
            &["alignmalloc", "alloc", "--tests", "singular,scaling"][..],
            &["alignmalloc", "alloc", "--tests", "singular", "scaling"],
            &[
                "alignmalloc",
                "access",
                "--random-kib",
                "1,4",
                "--large-kib",
                "1024",
            ],
            &["alignmalloc", "access", "--random-kib", "1", "4"],
            &[
                "alignmalloc",
                "uvm-calibrate",
                "--runs",
                "32:16",
                "64:16",
                "--fit-runs",
                "32:16",
            ],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
        assert!(Cli::try_parse_from(["alignmalloc", "alloc", "--tests", "sideways"]).is_err());
    }
}
