//! `alignmalloc layout-parity`: the CUDA layout header on the GPU against the Rust translator.
//!
//! The host draws random inputs (the same generator as the host parity test), the kernels in
//! `device/kernels/layout_parity.cu` apply `layout.h` to them on the GPU, and every output word is
//! compared with what `translator` computes on the CPU.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, translator};

use std::path::PathBuf;

use crate::progress::note;
use anyhow::{Context, bail};
use cudarc::driver::PushKernelArg;
use hostcheck::cases::Rng;
use serde::Serialize;
use translator::{Geometry, Handle, LayoutError, SlotOrder, contiguous_handles, warp_handles};

/// Options of `layout-parity`.
#[derive(clap::Args)]
pub struct Args {
    /// Random (handle, offset) pairs to translate.
    #[arg(long, default_value_t = 1 << 22, value_parser = clap::value_parser!(u64).range(1..))]
    pairs: u64,
    /// Random warp requests (geometry and 32 lane handles each).
    #[arg(long, default_value_t = 1 << 17, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 0xA11C)]
    seed: u64,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    device: String,
    compute_capability: (i32, i32),
    seed: u64,
    pairs: u64,
    requests: u64,
    words_compared: u64,
    mismatches: u64,
    first_mismatches: Vec<String>,
}

struct Checker {
    compared: u64,
    mismatches: u64,
    first: Vec<String>,
}

impl Checker {
    fn check(&mut self, what: impl FnOnce() -> String, gpu: u64, cpu: u64) {
        self.compared += 1;
        if gpu != cpu {
            self.mismatches += 1;
            if self.first.len() < 20 {
                self.first
                    .push(format!("{}: gpu {gpu:#x} cpu {cpu:#x}", what()));
            }
        }
    }
}

/// Geometry result words as the kernel writes them: status, class or bad lane, tile, span,
/// chunk, units.
fn expected_geometry(geometry: &Result<Option<Geometry>, LayoutError>) -> [u64; 6] {
    match geometry {
        Ok(Some(g)) => [
            0,
            g.class as u64,
            u64::from(g.tile_log2),
            g.lane_span,
            g.chunk_bytes,
            g.units,
        ],
        Ok(None) => [1, 0, 0, 0, 0, 0],
        Err(LayoutError::SizeOverLimit { lane, .. }) => [2, u64::from(*lane), 0, 0, 0, 0],
        Err(other) => unreachable!("geometry only fails over the limit, got {other}"),
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    crate::cli::output_file(args.json.as_deref(), "--json")?;
    let (context, info) = alignmalloc::internals::cuda::open(0).context(
        "layout-parity needs a CUDA GPU (the host-side parity runs with `cargo test -p hostcheck`)",
    )?;
    let spinner = crate::progress::spinner("layout parity");
    spinner.set_message("compiling");
    let compiler = alignmalloc::internals::nvrtc::Compiler::for_device(info.compute_capability)?;
    let source = device::LAYOUT_PARITY;
    let ptx = compiler.compile(source.path, source.text)?;
    let module = context.load_module(ptx)?;
    let stream = context.new_stream()?;
    note!(
        "device: {} (sm_{}{}), {} pairs, {} requests",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        args.pairs,
        args.requests
    );

    // Inputs.
    let mut rng = Rng(args.seed);
    let n = args.pairs as usize;
    let handles: Vec<u64> = (0..n).map(|_| rng.handle()).collect();
    let offsets: Vec<u64> = (0..n).map(|_| rng.offset()).collect();
    let m = args.requests as usize;
    let mut sizes = Vec::with_capacity(m * 32);
    let mut configs = Vec::with_capacity(m * 3);
    let mut bases = Vec::with_capacity(m);
    let mut orders = Vec::with_capacity(m);
    let mut cpu_configs = Vec::with_capacity(m);
    for _ in 0..m {
        let config = rng.config();
        sizes.extend_from_slice(&rng.sizes(&config));
        configs.extend_from_slice(&[
            config.small_max(),
            config.portion_max(),
            config.max_lane_bytes(),
        ]);
        bases.push((1u64 << 40) + rng.below(1 << 20) * (2 << 20));
        orders.push(rng.below(2) as u32);
        cpu_configs.push(config);
    }

    // GPU.
    let d_handles = stream.clone_htod(&handles)?;
    let d_offsets = stream.clone_htod(&offsets)?;
    let mut d_translated = stream.alloc_zeros::<u64>(n * 9)?;
    let f = module.load_function("am_parity_translate")?;
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&d_handles)
        .arg(&d_offsets)
        .arg(&args.pairs)
        .arg(&mut d_translated);
    // SAFETY: the kernel reads `pairs` entries of both inputs and writes 9 words per pair, which
    // is what was allocated; the argument types match its signature.
    unsafe { launch.launch(crate::launch::grid(args.pairs)) }?;

    let d_sizes = stream.clone_htod(&sizes)?;
    let d_configs = stream.clone_htod(&configs)?;
    let d_bases = stream.clone_htod(&bases)?;
    let d_orders = stream.clone_htod(&orders)?;
    let mut d_geometry = stream.alloc_zeros::<u64>(m * 6)?;
    let mut d_lane_handles = stream.alloc_zeros::<u64>(m * 64)?;
    let g = module.load_function("am_parity_geometry")?;
    let mut launch = stream.launch_builder(&g);
    launch
        .arg(&d_sizes)
        .arg(&d_configs)
        .arg(&d_bases)
        .arg(&d_orders)
        .arg(&args.requests)
        .arg(&mut d_geometry)
        .arg(&mut d_lane_handles);
    // SAFETY: one warp per request reads 32 sizes, 3 config words, a base and an order, and
    // writes 6 geometry words and 64 handles, all within the buffers allocated above.
    unsafe { launch.launch(crate::launch::grid(args.requests * 32)) }?;
    let translated = stream.clone_dtoh(&d_translated)?;
    let geometry = stream.clone_dtoh(&d_geometry)?;
    let lane_handles = stream.clone_dtoh(&d_lane_handles)?;
    stream.synchronize()?;
    context.check_err()?;
    spinner.set_message("comparing with the Rust translator");
    let mut c = Checker {
        compared: 0,
        mismatches: 0,
        first: Vec::new(),
    };
    for i in 0..n {
        let (h, off) = (Handle(handles[i]), offsets[i]);
        let o = &translated[i * 9..i * 9 + 9];
        let what = |field: &'static str| move || format!("pair {i} ({:#x}, {off:#x}) {field}", h.0);
        c.check(what("translate"), o[0], h.translate(off));
        c.check(what("ptr<u8>"), o[1], h.translate(off));
        c.check(what("ptr<u64>"), o[2], h.translate((off >> 3) * 8));
        for (slot, order) in [(3, SlotOrder::Pattern), (4, SlotOrder::Identity)] {
            if let Ok(base) = h.chunk_base(order) {
                c.check(what("chunk_base"), o[slot], base);
            }
        }
        c.check(what("kind"), o[5], u64::from(h.kind_field()));
        c.check(
            what("generation,tile,lane"),
            o[6],
            u64::from(h.generation()) << 16 | u64::from(h.tile_log2()) << 8 | u64::from(h.lane()),
        );
        c.check(what("address"), o[7], h.address());
        c.check(
            what("with_generation"),
            o[8],
            h.with_generation((off % 11) as u8).0,
        );
    }
    for r in 0..m {
        let s: &[u64; 32] = sizes[r * 32..r * 32 + 32].try_into().expect("32 sizes");
        let cpu = Geometry::of(s, &cpu_configs[r]);
        let want = expected_geometry(&cpu);
        for (k, &w) in want.iter().enumerate() {
            c.check(
                || format!("request {r} geometry word {k}"),
                geometry[r * 6 + k],
                w,
            );
        }
        let order = if orders[r] == 0 {
            SlotOrder::Pattern
        } else {
            SlotOrder::Identity
        };
        let (arranged, contiguous) = match cpu {
            Ok(Some(g)) => (
                warp_handles(&g, bases[r], s, order)?.map(|h| h.0),
                contiguous_handles(&g, bases[r], s)?.map(|h| h.0),
            ),
            _ => ([0; 32], [0; 32]),
        };
        for lane in 0..32 {
            c.check(
                || format!("request {r} lane {lane} handle"),
                lane_handles[r * 64 + lane],
                arranged[lane],
            );
            c.check(
                || format!("request {r} lane {lane} contiguous handle"),
                lane_handles[r * 64 + 32 + lane],
                contiguous[lane],
            );
        }
    }
    spinner.finish_and_clear();

    let report = Report {
        device: info.name.clone(),
        compute_capability: info.compute_capability,
        seed: args.seed,
        pairs: args.pairs,
        requests: args.requests,
        words_compared: c.compared,
        mismatches: c.mismatches,
        first_mismatches: c.first,
    };
    println!(
        "layout parity on {}: {} words compared, {} mismatches",
        report.device, report.words_compared, report.mismatches
    );
    for line in &report.first_mismatches {
        println!("  {line}");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.mismatches > 0 {
        bail!(
            "{} mismatches between layout.h on the GPU and the Rust translator",
            report.mismatches
        );
    }
    Ok(())
}
