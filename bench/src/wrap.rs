//! `alignmalloc wrap`: run an unmodified CUDA program with its managed allocations served from
//! an alignmalloc arena, and print where its unified-memory traffic went, allocation by
//! allocation. The work is in the `wrap` crate and the preload library; this is the command.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, bail};
use wrap::{Advice, PastCap, Placement, WrapOptions};

/// Arguments of `alignmalloc wrap`.
#[derive(clap::Args)]
pub struct Args {
    /// Write the report as JSON here too.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Allocations shown in the table (most traffic first; the JSON has up to 10 000).
    #[arg(long, default_value_t = 20)]
    rows: usize,
    /// Prefetch each new allocation to the GPU (as RMM's prefetch adaptor does).
    #[arg(long)]
    prefetch: bool,
    /// Advice for each new allocation: read-mostly or preferred-gpu.
    #[arg(long)]
    advise: Option<Advice>,
    /// Leave allocations with the driver; only report.
    #[arg(long)]
    no_pool: bool,
    /// Do not count unified-memory traffic (CUPTI's counting slows kernels that fault).
    #[arg(long)]
    no_counters: bool,
    /// Bytes of the arena's first reservation (e.g. 256M, 4G); it grows by doubling.
    #[arg(long, value_parser = bytes, default_value = "256M")]
    arena_bytes: u64,
    /// Most bytes the arena reserves (default: the GPU's free memory when the program first
    /// allocates).
    #[arg(long, value_parser = bytes)]
    max_arena_bytes: Option<u64>,
    /// Let the arena reserve more than the GPU has free.
    #[arg(long)]
    oversubscribe: bool,
    /// Where pages live: migrate (the driver moves them where they are used) or tiered (each
    /// allocation of 64 MiB or more split: as much as the device tier has left preferred on the GPU
    /// and prefetched, the rest kept in host memory and read over the link). Default: tiered
    /// with --oversubscribe, else migrate.
    #[arg(long)]
    placement: Option<Placement>,
    /// Bytes the device tier holds with tiered placement (default: the GPU's free memory when the
    /// program first allocates, less a sixteenth and at least 2 GiB).
    #[arg(long, value_parser = bytes)]
    device_tier_bytes: Option<u64>,
    /// Past the cap, answer out of memory instead of allocating from the driver.
    #[arg(long)]
    fail_past_cap: bool,
    /// Record where each allocation was made (a stack walk per allocation: slower).
    #[arg(long)]
    callers: bool,
    /// The preload library (default: ALIGNMALLOC_PRELOAD, else libalignmalloc_preload.so next
    /// to this command or in ../lib).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// The program and its arguments, after `--`.
    #[arg(required = true, last = true)]
    program: Vec<OsString>,
}

fn bytes(text: &str) -> Result<u64, String> {
    wrap::options::parse_bytes(text)
        .ok_or_else(|| format!("`{text}` is not a byte count (e.g. 256M, 4G)"))
}

/// Run the program wrapped; exit as it exited.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let preload =
        wrap::launch::find_preload(args.preload.as_deref()).map_err(anyhow::Error::msg)?;
    let options = WrapOptions {
        pool: !args.no_pool,
        counters: !args.no_counters,
        prefetch: args.prefetch,
        advise: args.advise,
        arena_bytes: args.arena_bytes,
        max_arena_bytes: args.max_arena_bytes,
        oversubscribe: args.oversubscribe,
        past_cap: if args.fail_past_cap {
            PastCap::Fail
        } else {
            PastCap::Driver
        },
        callers: args.callers,
        report: None,
        placement: args
            .placement
            .unwrap_or(Placement::default_for(args.oversubscribe)),
        device_tier_bytes: args.device_tier_bytes,
    };
    if args.arena_bytes == 0 {
        bail!("--arena-bytes must be more than 0");
    }
    let (program, rest) = args
        .program
        .split_first()
        .expect("clap requires the program");
    let outcome = wrap::launch::run(&preload, &options, program, rest)
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;
    match &outcome.report {
        Ok(report) => {
            eprint!("{}", report.table(args.rows));
            let i = &report.interception;
            if i.managed_allocations == 0 && i.cuda_lookups > 0 {
                tracing::warn!(
                    cuda_lookups = i.cuda_lookups,
                    "the program made CUDA calls but no managed allocation was intercepted: it \
                     allocates no managed memory, or it reaches the driver in a way the wrapper \
                     cannot see (a library loaded with RTLD_DEEPBIND, a fully static program)"
                );
            }
            if i.unidentified_lookups > 0 {
                tracing::warn!(
                    lookups = i.unidentified_lookups,
                    "some driver entry points were left unwrapped (a driver version the wrapper \
                     does not know); their calls went to the driver directly"
                );
            }
            if let Some(path) = &args.report {
                std::fs::write(path, serde_json::to_string_pretty(report)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        Err(why) => tracing::warn!("no report: {why}"),
    }
    wrap::launch::exit_like(outcome.status)
}
