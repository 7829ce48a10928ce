//! `alignmalloc`: the project's command line. Each subcommand is one job; results go to the
//! terminal and, with `--json`, to a file.

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod graph;
mod mailbox_stress;
mod parity;
mod patterns;
mod selftest;
mod uvm;
mod walk;

/// alignmalloc: a warp-aware allocator for CUDA Unified Memory.
#[derive(Parser)]
#[command(name = "alignmalloc", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: uniform random walks (DeepWalk style) from every vertex of a graph whose
    /// adjacency lists are allocated from inside kernels (one thread per vertex), against
    /// arrangement off, CUDA's device malloc and a managed CSR, each walk checked against a CPU
    /// reference. On the GPU when there is one; otherwise CPU warps through the same runtime and
    /// the UVM simulator (modelled times, said so). Example: `alignmalloc walk --rmat 16`.
    Walk(walk::Args),
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
    /// Calibrate the UVM simulator on the GPU: run access patterns (lockstep random, independent
    /// random, per-lane sweeps) over thread-contiguous and warp-arranged objects first written by
    /// the host, record CUPTI's migrated bytes and faults and the kernel times, replay the same
    /// runs in uvmsim, fit its cost model on some ranges and report the errors on the others.
    /// Needs a CUDA GPU, NVRTC and CUPTI.
    UvmCalibrate(uvm::CalibrateArgs),
    /// Oversubscription study in the simulator only: per-thread ranges whose total exceeds the
    /// GPU's memory, random reads, both layouts; faults, migrations, evictions, modelled time.
    UvmOversub(uvm::OversubArgs),
}

/// Whether a runtime built with `choice` will run on the GPU (fault counters are asked for only
/// there).
fn runs_on_gpu(choice: runtime::BackendChoice) -> bool {
    match choice {
        runtime::BackendChoice::Sim => false,
        runtime::BackendChoice::Cuda => true,
        runtime::BackendChoice::Auto => runtime::cuda::open(0).is_ok(),
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("warn,runtime=info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::LayoutParity(args) => parity::run(&args),
        Command::MailboxStress(args) => mailbox_stress::run(&args),
        Command::Selftest(args) => selftest::run(&args),
        Command::UvmCalibrate(args) => uvm::calibrate(&args),
        Command::UvmOversub(args) => uvm::oversub(&args),
        Command::Walk(args) => walk::run(&args),
    }
}
