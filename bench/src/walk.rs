//! `alignmalloc walk`: uniform random walks (DeepWalk style) over a graph whose adjacency lists
//! are allocated from inside kernels, one thread per vertex, as dynamic-graph code does.
//!
//! Systems, on the same graph and the same walks:
//! - `alignmalloc`: lists from `am::malloc` (warp-arranged chunks);
//! - `alignmalloc-contiguous`: lists from `am::malloc_contiguous` (arrangement off: the
//!   thread-contiguous layout of today's allocators);
//! - `cuda-malloc`: lists from CUDA's in-kernel `malloc` (device heap; GPU only, lists filled on
//!   the GPU, since the host cannot reach the device heap);
//! - `managed-csr`: the graph as one CSR in `cudaMallocManaged` memory written by the host (what a
//!   user would write), `managed-csr-prefetch`: the same with a bulk `cudaMemPrefetchAsync`
//!   before the walk, and `managed-csr-host-mapped`: the same advised to stay in host memory and
//!   be mapped for the GPU (preferred location the host, accessed by the device: read over the
//!   link, never migrated; both GPU only: the simulator has no prefetch or advice);
//! - `alignmalloc-identity-order`: alignmalloc on a second runtime whose arranged chunks use the
//!   identity slot order instead of the pattern order (GPU only).
//!
//! Placements of the lists: `gpu` (filled by the kernel that allocated them, so they start on
//! the GPU) and `host` (filled by the host before each walk, so the walk migrates them).
//!
//! Every system's walks are checked against the CPU reference ([`reference_walks`]) for the same
//! seed: by digest always, step by step with `--verify`. The formulas ([`walk_random`],
//! [`digest_step`]) are the twins of `device/kernels/walk.cu`.
//!
//! On the GPU, times are kernel wall times (median of `--repeats` after a warm-up walk) and
//! migrations come from CUPTI (lower bounds under heavy load, see docs/usage.md). On the sim
//! backend, CPU warps allocate through the same mailbox and walk through the same layout, and
//! uvmsim replays the walk's accesses with the cost model fitted on the H200: its times are
//! modelled, and the report says so.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::translator;

mod checked;
mod devices;
mod dynamic;
mod gpu;
mod sim;

use std::path::PathBuf;
use std::time::Instant;

use alignmalloc::{BackendChoice, BackendKind, Runtime};
use anyhow::{Context, bail};
use serde::Serialize;

use crate::cli;
use crate::graph::{BuildNotes, Direction, Format, Graph, IdMap};
use crate::patterns::mix;
use crate::progress::note;

/// A step that did not happen: the walk ended at a vertex without neighbours.
pub const NO_VERTEX: u32 = u32::MAX;

/// Options of `walk`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("graph").required(true).args(["rmat", "snap", "mtx"])))]
pub struct Args {
    /// Generate an R-MAT graph with 2^SCALE vertices (Graph500's parameters, undirected), 1 to 26.
    #[arg(long, value_name = "SCALE", value_parser = clap::value_parser!(u32).range(1..=26))]
    rmat: Option<u32>,
    /// Edges per vertex generated for --rmat.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    edge_factor: u32,
    /// Load a SNAP edge list ("u v" per line, "#" comments).
    #[arg(long, value_name = "FILE")]
    snap: Option<PathBuf>,
    /// Load a Matrix Market coordinate file (symmetric files are undirected).
    #[arg(long, value_name = "FILE")]
    mtx: Option<PathBuf>,
    /// How to read the edges of --snap and of general --mtx files.
    #[arg(long, value_enum, default_value_t = Direction::Undirected)]
    direction: Direction,
    /// Which vertex's list each allocating thread asks for: `degree` gives a warp's 32 lanes
    /// lists of similar length (vertices by falling degree); `vertex` takes vertex ids in order.
    /// A warp whose lists differ too much for an arranged chunk (over twice their packed
    /// bytes) gets them packed instead, so `vertex` order keeps the memory near the lists'
    /// bytes and gives up the arrangement of those warps.
    #[arg(long, value_enum, default_value_t = Order::Degree)]
    order: Order,
    /// Steps per walk.
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u32).range(1..))]
    length: u32,
    /// Walks started from every vertex.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    walks_per_vertex: u32,
    /// Seed of the graph generator and of the walks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timed walks per system and placement (the median is reported), after one warm-up walk.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repeats: u32,
    /// Check every walk step by step against the CPU reference (always checked by digest).
    #[arg(long)]
    verify: bool,
    /// Write alignmalloc's walks to this file, one walk per line (vertex ids, space-separated).
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Backend: auto (the GPU when there is one, else the simulator), cuda or sim.
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A graph that changes: its edges arrive in N batches of insertions (R-MAT's order, or the
    /// file's); after each one every system applies it to its graph (alignmalloc and CUDA's
    /// malloc change per-vertex lists inside a kernel; a CSR is rebuilt on the GPU, and by the
    /// host in managed memory) and walks run on the graph so far, checked against the CPU
    /// reference.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=100_000),
        conflicts_with_all = ["verify", "output", "order", "rounds", "updates"]
    )]
    batches: Option<u32>,
    /// A graph that changes in Bingo's rounds: every edge but the last R x --round-edges is
    /// loaded, then each round inserts the next --round-edges edges and deletes as many drawn
    /// from the graph (seeded by --seed), and walks start from every vertex.
    #[arg(
        long,
        value_name = "R",
        value_parser = clap::value_parser!(u32).range(1..=10_000),
        conflicts_with_all = ["verify", "output", "order", "updates"]
    )]
    rounds: Option<u32>,
    /// Edges inserted, and edges deleted, per round of --rounds.
    #[arg(long, value_name = "B", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    round_edges: u64,
    /// A graph that changes by an update file: the graph is loaded, then each batch of the file
    /// ("+ U V" inserts, "- U V" deletes, "=" ends a batch; the graph file's ids) is applied and
    /// walks start from every vertex. A deletion of an edge the graph does not hold then is
    /// refused with its line.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["verify", "output", "order"]
    )]
    updates: Option<PathBuf>,
    /// How a changing graph's lists grow when they overflow: doubled, or by a half or a quarter
    /// of their capacity (less room left unused, more moves); every list system alike.
    #[arg(long, value_enum, default_value = "double")]
    list_growth: dynamic::ListGrowth,
    /// The pool every allocator of a changing graph starts with on the GPU, in GiB: alignmalloc's
    /// arena (moved to the GPU before the first batch), Gallatin's pool; CUDA's heap gets twice
    /// it. Default: four times the lists' most bytes, at least 1 GiB.
    #[arg(long, value_name = "GIB", value_parser = crate::balloon::gib)]
    pool_gib: Option<f64>,
    /// Walks after each batch of a changing graph (at most one per vertex times
    /// --walks-per-vertex): 65 536 with --batches, one from every vertex with --rounds and
    /// --updates.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    batch_walkers: Option<u64>,
    /// Walk on several GPUs (`all`, or ordinals like 0,1; an ordinal twice runs two runtimes on
    /// one GPU): each builds the whole graph's lists in its own arena, device 0 walks every
    /// walker alone, then every device walks its share at once (alignmalloc only; GPU only).
    #[arg(long, value_name = "LIST", conflicts_with_all = ["batches", "rounds", "updates", "output"])]
    devices: Option<alignmalloc::DeviceList>,
    /// Leave the walks only this much GPU memory (GiB; a device allocation holds the rest from
    /// the first system's walk on): lists larger than that are paged in and out by the driver.
    /// GPU only; `cuda-malloc` (a device heap, never paged) and the identity-order rows are
    /// left out.
    #[arg(
        long,
        value_name = "GIB",
        value_parser = crate::balloon::gib,
        conflicts_with_all = ["batches", "rounds", "updates", "devices"]
    )]
    gpu_memory_gib: Option<f64>,
    #[command(flatten)]
    placement: crate::arena_placement::PlacementArgs,
    /// Walk only these systems (comma-separated names as in the table; all by default; a
    /// changing graph has its own, see `dynamic::SYSTEMS`).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(SYSTEMS.iter().chain(&dynamic::SYSTEMS)))]
    systems: Option<Vec<String>>,
}

/// Every system `walk` knows, as `--systems` names them.
pub const SYSTEMS: [&str; 9] = [
    "alignmalloc",
    "alignmalloc-contiguous",
    "cuda-malloc",
    "managed-csr",
    "managed-csr-prefetch",
    "managed-csr-host-mapped",
    "managed-csr-read-mostly",
    "managed-csr-prefetch-fit",
    "alignmalloc-identity-order",
];

impl Args {
    /// Whether `--systems` (all when absent) names `system`.
    pub fn walks(&self, system: &str) -> bool {
        self.systems
            .as_ref()
            .is_none_or(|list| list.iter().any(|s| s == system))
    }
}

/// Which vertex each allocating thread takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Thread t takes vertex t.
    Vertex,
    /// Thread t takes the vertex of t-th largest degree (ties by id).
    Degree,
}

/// The vertex of each allocating thread.
pub fn allocation_order(graph: &Graph, order: Order) -> Vec<u32> {
    let mut vertices: Vec<u32> = (0..graph.vertices() as u32).collect();
    if order == Order::Degree {
        vertices.sort_by_key(|&v| std::cmp::Reverse(graph.degree(v)));
    }
    vertices
}

/// The random number of step `step` of walker `walker`.
pub fn walk_random(seed: u64, walker: u64, step: u32) -> u64 {
    mix(mix(seed ^ walker).wrapping_add(u64::from(step)))
}

/// A walk's digest after visiting `vertex`.
pub fn digest_step(digest: u64, vertex: u32) -> u64 {
    mix(digest ^ u64::from(vertex))
}

/// What every system must reproduce.
pub struct Reference {
    /// Walkers (`vertices x walks_per_vertex`).
    pub walkers: u64,
    /// Steps per walk.
    pub length: u32,
    /// Each walker's digest.
    pub digests: Vec<u64>,
    /// Each walker's path (`length + 1` vertices, [`NO_VERTEX`] after an early end), when asked.
    pub paths: Option<Vec<u32>>,
}

/// The walks on the CPU, straight from the CSR.
pub fn reference_walks(
    graph: &Graph,
    walkers: u64,
    length: u32,
    seed: u64,
    keep_paths: bool,
) -> Reference {
    let stride = length as usize + 1;
    let mut digests = vec![0u64; walkers as usize];
    let mut paths = keep_paths.then(|| vec![NO_VERTEX; walkers as usize * stride]);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let per = (walkers as usize).div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let path_chunks: Box<dyn Iterator<Item = Option<&mut [u32]>>> = match paths.as_mut() {
            Some(p) => Box::new(p.chunks_mut(per * stride).map(Some)),
            None => Box::new(std::iter::repeat_with(|| None)),
        };
        for ((chunk, digests), mut path_chunk) in
            digests.chunks_mut(per).enumerate().zip(path_chunks)
        {
            scope.spawn(move || {
                for (i, digest) in digests.iter_mut().enumerate() {
                    let w = (chunk * per + i) as u64;
                    let path = path_chunk
                        .as_deref_mut()
                        .map(|p| &mut p[i * stride..(i + 1) * stride]);
                    *digest = walk_one(
                        &|v| graph.neighbors_of(v),
                        graph.vertices() as u32,
                        w,
                        length,
                        seed,
                        path,
                    );
                }
            });
        }
    });
    Reference {
        walkers,
        length,
        digests,
        paths,
    }
}

/// One walker's walk over `vertices` vertices whose lists `neighbors` gives; its digest, and its
/// path in `path` when given.
pub fn walk_one<'g>(
    neighbors: &dyn Fn(u32) -> &'g [u32],
    vertices: u32,
    w: u64,
    length: u32,
    seed: u64,
    mut path: Option<&mut [u32]>,
) -> u64 {
    let mut v = (w % u64::from(vertices)) as u32;
    let mut digest = digest_step(0, v);
    if let Some(p) = path.as_deref_mut() {
        p[0] = v;
    }
    for s in 0..length {
        let list = neighbors(v);
        if list.is_empty() {
            break;
        }
        v = list[(walk_random(seed, w, s) % list.len() as u64) as usize];
        digest = digest_step(digest, v);
        if let Some(p) = path.as_deref_mut() {
            p[s as usize + 1] = v;
        }
    }
    digest
}

/// Where the lists start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Filled by the kernel that allocated them.
    Gpu,
    /// Filled by the host before each walk.
    Host,
}

/// One system in one placement.
#[derive(Clone, Debug, Serialize)]
pub struct SystemRun {
    /// Which system.
    pub system: &'static str,
    /// Where its lists started.
    pub placement: Placement,
    /// Building the lists: allocation kernel (with the fill for `gpu`), ms; `None` where
    /// nothing is built (the managed CSR is written by the host, which is its fill).
    pub build_ms: Option<f64>,
    /// The host's fill before a walk, ms, median; `None` where the host fills nothing (`gpu`
    /// placement) or the fill is not timed (the sim backend models migrations, not the fill).
    pub fill_ms: Option<f64>,
    /// A bulk prefetch before the walk (`managed-csr-prefetch` only), ms, median; included
    /// in `walk_ms`.
    pub prefetch_ms: Option<f64>,
    /// The walk, ms: median of the repeats (GPU) or modelled (sim); `None` on the simulator
    /// where no H200 run of the workload checks the model (the table shows `-` there too).
    pub walk_ms: Option<f64>,
    /// Every repeat's walk time (GPU).
    pub walk_ms_repeats: Vec<f64>,
    /// Walks per second from `walk_ms`.
    pub walks_per_s: Option<f64>,
    /// `walk_ms` over alignmalloc's in the same placement (above 1: alignmalloc is faster).
    pub ratio_to_alignmalloc: Option<f64>,
    /// Bytes migrated to the GPU during the walk (CUPTI on the GPU, lower bound under load;
    /// modelled on sim); `None` where the counters are off (another tool holds CUPTI).
    pub htod_bytes: Option<u64>,
    /// GPU fault groups during the walk (CUPTI) or coalesced faults (modelled); `None` as
    /// `htod_bytes`.
    pub gpu_faults: Option<u64>,
    /// Every walk matched the CPU reference (by digest; by path too with --verify); `None`
    /// where the run was traced from the reference itself and checks nothing.
    pub walks_agree: Option<bool>,
    /// Bytes the system held for the lists (chunk capacity or exact list bytes).
    pub list_bytes: u64,
    /// `list_bytes` in GiB: what the walk reads.
    pub working_set_gib: f64,
    /// GiB of GPU memory the walk had (`--gpu-memory-gib`, as measured once the rest was held
    /// back); `None`: the whole card.
    pub gpu_memory_gib: Option<f64>,
    /// Bytes migrated back to the host during the walk (evictions, under pressure; CUPTI);
    /// `None` as `htod_bytes` and on the simulator.
    pub dtoh_bytes: Option<u64>,
    /// alignmalloc's rows: the arena's placement setting (`walk --placement`); `None` for the
    /// other systems.
    pub arena_placement: Option<&'static str>,
    /// alignmalloc's rows under the tiered or host-mapped placement: bytes of the lists in the
    /// device tier (their capacity; the rest are in the host tier).
    pub device_tier_bytes: Option<u64>,
    /// On the simulator: the committed H200 run of the same workload, system and placement,
    /// which checks the modelled walk time (`None`: unchecked, so the time and ratio are not
    /// shown).
    pub h200: Option<checked::H200Run>,
}

impl SystemRun {
    /// A run with its build figures; the walk's are filled in later.
    pub fn new(
        system: &'static str,
        placement: Placement,
        build_ms: Option<f64>,
        list_bytes: u64,
    ) -> Self {
        Self {
            system,
            placement,
            build_ms,
            fill_ms: None,
            prefetch_ms: None,
            walk_ms: None,
            walk_ms_repeats: Vec::new(),
            walks_per_s: None,
            ratio_to_alignmalloc: None,
            htod_bytes: None,
            gpu_faults: None,
            walks_agree: None,
            list_bytes,
            working_set_gib: list_bytes as f64 / crate::balloon::GIB,
            gpu_memory_gib: None,
            dtoh_bytes: None,
            arena_placement: None,
            device_tier_bytes: None,
            h200: None,
        }
    }
}

/// The report.
#[derive(Serialize)]
struct Report {
    backend: String,
    backend_reason: String,
    device: String,
    graph: String,
    vertices: usize,
    edges: u64,
    max_degree: u64,
    notes: BuildNotes,
    walkers: u64,
    length: u32,
    seed: u64,
    repeats: u32,
    order: Order,
    times: &'static str,
    /// Where the HtoD and fault columns come from, or why they are empty.
    migrations: String,
    runs: Vec<SystemRun>,
}

/// Compare a system's digests (and paths) with the reference; the first difference, if any.
pub fn compare(
    reference: &Reference,
    digests: &[u64],
    paths: Option<&[u32]>,
) -> Result<(), String> {
    if let Some(w) = (0..reference.digests.len()).find(|&w| digests[w] != reference.digests[w]) {
        return Err(format!("walk {w} differs from the CPU reference (digest)"));
    }
    if let (Some(want), Some(got)) = (&reference.paths, paths) {
        let stride = reference.length as usize + 1;
        if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
            return Err(format!(
                "walk {} differs from the CPU reference at step {}: {} instead of {}",
                i / stride,
                i % stride,
                got[i],
                want[i]
            ));
        }
    }
    Ok(())
}

fn load_graph(args: &Args) -> anyhow::Result<(String, Graph, BuildNotes, Option<IdMap>)> {
    let started = Instant::now();
    let (name, graph, notes, ids) = match (&args.rmat, &args.snap, &args.mtx) {
        (Some(scale), _, _) => {
            let spinner = crate::progress::spinner("generating the graph");
            let (graph, notes) = Graph::rmat(*scale, args.edge_factor, args.seed)?;
            spinner.finish_and_clear();
            (
                format!("rmat-{scale}-ef{}", args.edge_factor),
                graph,
                notes,
                None,
            )
        }
        (_, snap, mtx) => {
            let (path, format) = match (snap, mtx) {
                (Some(p), _) => (p, Format::Snap),
                (_, Some(p)) => (p, Format::MatrixMarket),
                _ => bail!("name a graph: --rmat SCALE, --snap FILE or --mtx FILE"),
            };
            let bar = crate::progress::bytes(0, "reading the graph");
            let (graph, notes, ids) = Graph::load(path, format, args.direction, |read, size| {
                bar.set_length(size);
                bar.set_position(read);
            })?;
            bar.finish_and_clear();
            (path.display().to_string(), graph, notes, Some(ids))
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    note!(
        "graph {name}: {} vertices, {} directed edges (max degree {}; {} duplicates dropped, {} self-loops kept, {} vertices without out-edges), built in {seconds:.1} s",
        graph.vertices(),
        graph.edges(),
        graph.max_degree(),
        notes.duplicates,
        notes.self_loops,
        graph.sinks(),
    );
    if ids.is_some() {
        note!(
            "  read {:.1} MB of text ({:.0} MB/s over the whole load){}{}",
            notes.text_bytes as f64 / 1e6,
            notes.text_bytes as f64 / 1e6 / seconds.max(1e-9),
            if notes.ids_compacted {
                format!(
                    "; vertex ids renumbered 0..{} from ids up to {} (walks are written with the file's ids)",
                    graph.vertices(),
                    notes.largest_id
                )
            } else {
                String::new()
            },
            if notes.isolated > 0 {
                format!(
                    "; {} of the {} declared vertices are in no edge and left out",
                    notes.isolated, notes.declared_vertices
                )
            } else {
                String::new()
            }
        );
    }
    Ok((name, graph, notes, ids))
}

fn write_walks(path: &PathBuf, reference: &Reference, ids: Option<&IdMap>) -> anyhow::Result<()> {
    use std::io::Write;
    let paths = reference
        .paths
        .as_ref()
        .context("no paths were kept to write")?;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for walk in paths.chunks(reference.length as usize + 1) {
        let mut first = true;
        for &v in walk.iter().take_while(|&&v| v != NO_VERTEX) {
            if !first {
                out.write_all(b" ")?;
            }
            match ids {
                Some(ids) => write!(out, "{}", ids.original(v))?,
                None => write!(out, "{v}")?,
            }
            first = false;
        }
        out.write_all(b"\n")?;
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))
}

impl Args {
    /// Everything that can be refused before the graph is loaded.
    fn check(&self) -> anyhow::Result<bool> {
        cli::input_file(self.snap.as_deref(), "--snap")?;
        cli::input_file(self.mtx.as_deref(), "--mtx")?;
        cli::input_file(self.updates.as_deref(), "--updates")?;
        cli::output_file(self.json.as_deref(), "--json")?;
        cli::output_file(self.output.as_deref(), "--output")?;
        let gpu = cli::on_gpu(self.backend)?;
        if let (Some(gib), false) = (self.gpu_memory_gib, gpu) {
            bail!(
                "walk --gpu-memory-gib {gib} needs the GPU: the simulator does not model a walk \
                 under memory pressure (a warp's step reads up to 32 lists at once, which the \
                 model must hold resident together, and its thrashing walks run for many \
                 minutes: docs/uvmsim.md); `access --backend sim --gpu-memory-gib {gib}` models \
                 the access patterns under pressure"
            );
        }
        crate::balloon::check(self.gpu_memory_gib, gpu)?;
        self.placement.check(gpu)?;
        Ok(gpu)
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let changing = if let Some(batches) = args.batches {
        Some(dynamic::Mode::Stream(batches))
    } else if let Some(rounds) = args.rounds {
        Some(dynamic::Mode::Rounds {
            rounds,
            per_round: args.round_edges,
        })
    } else {
        args.updates.clone().map(dynamic::Mode::Updates)
    };
    if args.placement.placement()? != alignmalloc::Placement::Migrate
        && (changing.is_some() || args.devices.is_some())
    {
        bail!(
            "walk --placement applies to one runtime's static walks, not with --batches, \
             --rounds, --updates or --devices"
        );
    }
    if let Some(mode) = changing {
        return dynamic::run(args, &mode);
    }
    if let Some(only) = args
        .systems
        .iter()
        .flatten()
        .find(|s| !SYSTEMS.contains(&s.as_str()))
    {
        bail!(
            "--systems {only} walks a changing graph (--batches, --rounds or --updates); a \
             static walk runs {}",
            SYSTEMS.join(", ")
        );
    }
    let gpu = args.check()?;
    if args.devices.is_some() && !gpu {
        bail!(
            "walk --devices needs a GPU: the simulator models one device's page traffic \
             (`alloc --devices` runs on the sim backend)"
        );
    }
    let (name, graph, notes, ids) = load_graph(args)?;
    let walkers = graph.vertices() as u64 * u64::from(args.walks_per_vertex);
    let keep_paths = args.verify || args.output.is_some();
    let started = Instant::now();
    let spinner = crate::progress::spinner("CPU reference walks");
    let reference = reference_walks(&graph, walkers, args.length, args.seed, keep_paths);
    spinner.finish_and_clear();
    note!(
        "CPU reference: {walkers} walks of {} steps in {:.2} s",
        args.length,
        started.elapsed().as_secs_f64()
    );

    if let Some(list) = &args.devices {
        let report = devices::run(&graph, args, &reference, list)?;
        if let Some(path) = &args.json {
            let json = serde_json::json!({
                "graph": name,
                "vertices": graph.vertices(),
                "edges": graph.edges(),
                "walkers": walkers,
                "length": args.length,
                "seed": args.seed,
                "repeats": args.repeats,
                "times": "GPU kernel wall time (together: first launch to last kernel's end)",
                "devices": report,
            });
            std::fs::write(path, serde_json::to_string_pretty(&json)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    }
    let mut builder = args.placement.apply(
        Runtime::builder().backend(args.backend).fault_counters(gpu),
        args.gpu_memory_gib,
    )?;
    if !gpu {
        // Host memory standing in for the GPU's (pages are committed as they are used); on the
        // GPU the arena is the runtime's default share of free memory.
        builder = builder.arena_bytes((graph.edges() * 4 * 32).clamp(256 << 20, 8 << 30));
    }
    let rt = builder.build().context("starting the runtime")?;
    note!("backend: {:?} ({})", rt.backend(), rt.backend_reason());
    let arena_placement = args.placement.placement()?.name();
    if let Some(line) = args.placement.describe(&rt) {
        note!("{line}");
    }
    let backend = rt.backend();
    let backend_reason = rt.backend_reason().to_string();
    let device = rt
        .device_info()
        .map_or_else(|| "none (simulated)".to_string(), |i| i.name.clone());
    let migrations = match backend {
        BackendKind::Cuda => rt.fault_counting().to_string(),
        BackendKind::Sim => "modelled by uvmsim".to_string(),
    };
    let (runs, times) = match backend {
        BackendKind::Cuda => {
            let mut runs = gpu::run(&rt, &graph, args, &reference)?;
            if !args.walks("alignmalloc-identity-order") {
                (runs, "GPU kernel wall time")
            } else if args.gpu_memory_gib.is_some() {
                note!(
                    "identity-order rows left out under --gpu-memory-gib (their runtime is built \
                     after the first one is gone, with the GPU's memory held back)"
                );
                (runs, "GPU kernel wall time")
            } else {
                // The slot order is a runtime setting: a second runtime, one at a time (each has
                // its own fault counters).
                drop(rt);
                let identity = Runtime::builder()
                    .backend(BackendChoice::Cuda)
                    .fault_counters(true)
                    .slot_order(translator::SlotOrder::Identity)
                    .build()
                    .context("starting the identity-order runtime")?;
                runs.extend(gpu::identity_order(&identity, &graph, args, &reference)?);
                (runs, "GPU kernel wall time")
            }
        }
        BackendKind::Sim => {
            let mut runs = sim::run(&rt, &graph, args, &reference)?;
            runs.retain(|r| args.walks(r.system));
            for r in &mut runs {
                r.h200 = checked::h200_run(&name, graph.vertices(), args, r.system, r.placement);
                if r.h200.is_none() {
                    // Unchecked: neither the table nor the JSON gives the model's walk time.
                    r.walk_ms = None;
                    r.walks_per_s = None;
                }
            }
            (
                runs,
                "modelled by uvmsim with the constants fitted on the H200 (not measured); \
                 shown only where an H200 run of the same workload checks the model",
            )
        }
    };
    let mut runs = with_ratios(runs);
    for r in runs
        .iter_mut()
        .filter(|r| r.system.starts_with("alignmalloc"))
    {
        r.arena_placement = Some(arena_placement);
    }
    let modelled = backend == BackendKind::Sim;
    if modelled {
        // The model's walk times are several times the H200's, by a factor that differs between
        // systems: a ratio of two modelled times would rank systems the way the GPU does not.
        // The H200's own ratio is shown instead where a run checks the row.
        for r in &mut runs {
            r.ratio_to_alignmalloc = None;
        }
    }
    print_table(&runs, times, &migrations, modelled);
    if let Some(path) = &args.output {
        write_walks(path, &reference, ids.as_ref())?;
        note!(
            "walks written to {} (they match every system's)",
            path.display()
        );
    }
    let failed: Vec<String> = runs
        .iter()
        .filter(|r| r.walks_agree == Some(false))
        .map(|r| format!("{} ({:?})", r.system, r.placement))
        .collect();
    let report = Report {
        backend: format!("{backend:?}"),
        backend_reason,
        device,
        graph: name,
        vertices: graph.vertices(),
        edges: graph.edges(),
        max_degree: graph.max_degree(),
        notes,
        walkers,
        length: args.length,
        seed: args.seed,
        repeats: args.repeats,
        order: args.order,
        times,
        migrations,
        runs,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !failed.is_empty() {
        bail!(
            "walks differ from the CPU reference in: {}",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Each run's walk time over alignmalloc's in the same placement.
fn with_ratios(mut runs: Vec<SystemRun>) -> Vec<SystemRun> {
    let ours: Vec<(Placement, f64)> = runs
        .iter()
        .filter(|r| r.system == "alignmalloc")
        .filter_map(|r| Some((r.placement, r.walk_ms?)))
        .collect();
    for r in &mut runs {
        r.ratio_to_alignmalloc = ours
            .iter()
            .find(|(p, _)| *p == r.placement)
            .and_then(|(_, t)| Some(r.walk_ms? / t));
    }
    runs
}

fn print_table(runs: &[SystemRun], times: &str, migrations: &str, modelled: bool) {
    println!("walk times: {times}");
    if modelled && runs.iter().all(|r| r.h200.is_none()) {
        println!(
            "no H200 run of this workload checks the model, so no walk time or ratio is shown \
             (table and JSON); checked workloads: {}",
            checked::checked_workloads()
        );
    }
    println!("HtoD and faults: {migrations}");
    let mut header = format!(
        "{:<26} {:<9} {:>10} {:>9} {:>10} {:>12} {:>8} {:>10} {:>8} {:>10} {:>10} {:>10} {:>6}",
        "system",
        "placement",
        if modelled { "build ms*" } else { "build ms" },
        "fill ms",
        "walk ms",
        "walks/s",
        "x ours",
        "lists MiB",
        "x memory",
        "HtoD MiB",
        "DtoH MiB",
        "faults",
        "walks"
    );
    if modelled {
        header.push_str(&format!(
            " {:>10} {:>10} {:>11} {:>10}",
            "H200 ms", "model/H200", "H200 x ours", "H200 HtoD"
        ));
    }
    println!("{header}");
    for r in runs {
        println!("{}", table_row(r, modelled));
    }
    println!(
        "x ours: walk time over alignmalloc's in the same placement (above 1: alignmalloc is faster)"
    );
    for r in runs {
        if let (Some(placement), Some(device)) = (r.arena_placement, r.device_tier_bytes) {
            println!(
                "{} ({}): {:.1} of its {:.1} MiB of lists in the device tier ({placement} \
                 placement), the rest in host memory mapped for the GPU",
                r.system,
                format!("{:?}", r.placement).to_lowercase(),
                device as f64 / 1048576.0,
                r.list_bytes as f64 / 1048576.0
            );
        }
    }
    if let Some(gib) = runs.iter().find_map(|r| r.gpu_memory_gib) {
        println!(
            "x memory: the lists over the {gib:.2} GiB of GPU memory the walks had \
             (--gpu-memory-gib); DtoH: pages the driver evicted to make room"
        );
    }
    if modelled {
        println!(
            "modelled (not measured): walk ms, walks/s, HtoD MiB and faults; build ms* is the CPU \
             warps' time on this host, one warp at a time (so placements repeat run to run), not \
             a GPU's. The model's walk times are shown only next to \
             an H200 run of the same workload (H200 ms, from bench/results/; model/H200 says how \
             far off the model is), and systems are compared only by the H200's own ratio (H200 x \
             ours); modelled ratios are not shown."
        );
    }
    let unchecked: Vec<&str> = runs
        .iter()
        .filter(|r| r.walks_agree.is_none())
        .map(|r| r.system)
        .collect();
    if !unchecked.is_empty() {
        println!(
            "walks: ok where every walk matched the CPU reference; - for {}: traced from the \
             reference's own paths, so there is nothing to check",
            unchecked.join(", ")
        );
    }
}

/// One run's line; a figure that does not apply to the run is `-`. On the simulator
/// (`modelled`), the walk's time, rate and ratio are shown only where an H200 run checks them.
fn table_row(r: &SystemRun, modelled: bool) -> String {
    let or_dash =
        |x: Option<f64>, decimals: usize| x.map_or("-".to_string(), |x| format!("{x:.decimals$}"));
    let shown = !modelled || r.h200.is_some();
    let mut line = format!(
        "{:<26} {:<9} {:>10} {:>9} {:>10} {:>12} {:>8} {:>10.1} {:>8} {:>10} {:>10} {:>10} {:>6}",
        r.system,
        format!("{:?}", r.placement).to_lowercase(),
        or_dash(r.build_ms, 2),
        or_dash(r.fill_ms, 2),
        or_dash(r.walk_ms.filter(|_| shown), 3),
        r.walks_per_s
            .filter(|_| shown)
            .map_or("-".to_string(), |w| format!("{w:.3e}")),
        or_dash(r.ratio_to_alignmalloc, 2),
        r.list_bytes as f64 / 1048576.0,
        or_dash(r.gpu_memory_gib.map(|gib| r.working_set_gib / gib), 2),
        r.htod_bytes
            .map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0)),
        r.dtoh_bytes
            .map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0)),
        r.gpu_faults.map_or("-".to_string(), |f| f.to_string()),
        match r.walks_agree {
            Some(true) => "ok",
            Some(false) => "WRONG",
            None => "-",
        }
    );
    if modelled {
        let h = r.h200.as_ref();
        line.push_str(&format!(
            " {:>10} {:>10} {:>11} {:>10}",
            or_dash(h.map(|h| h.walk_ms), 3),
            or_dash(h.zip(r.walk_ms).map(|(h, ms)| ms / h.walk_ms), 2),
            or_dash(h.and_then(|h| h.ratio_to_alignmalloc), 2),
            h.and_then(|h| h.htod_bytes)
                .map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0)),
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_carries_its_working_set_and_the_gpu_memory_it_had() {
        let mut run = SystemRun::new("managed-csr", Placement::Host, None, 3 << 29);
        let json = serde_json::to_value(&run).unwrap();
        assert_eq!(json["working_set_gib"], 1.5);
        assert!(json["gpu_memory_gib"].is_null(), "the whole card: null");
        assert!(json["dtoh_bytes"].is_null());
        assert!(json["arena_placement"].is_null(), "not alignmalloc's");
        assert!(json["device_tier_bytes"].is_null());
        run.gpu_memory_gib = Some(0.75);
        let row = table_row(&run, false);
        assert!(
            row.contains(" 2.00 "),
            "x memory is the lists over what was left: {row}"
        );
    }

    #[test]
    fn systems_names_what_is_walked_and_refuses_unknown_names() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            walk: Args,
        }
        let all = Cli::try_parse_from(["walk", "--rmat", "4"]).unwrap().walk;
        assert!(SYSTEMS.iter().all(|s| all.walks(s)));
        let some = Cli::try_parse_from([
            "walk",
            "--rmat",
            "4",
            "--systems",
            "managed-csr,alignmalloc",
        ])
        .unwrap()
        .walk;
        assert!(some.walks("alignmalloc") && some.walks("managed-csr"));
        assert!(!some.walks("managed-csr-host-mapped") && !some.walks("cuda-malloc"));
        let unknown = Cli::try_parse_from(["walk", "--rmat", "4", "--systems", "gallatin"]);
        assert!(unknown.is_err());
    }

    fn ring(n: u32) -> Graph {
        let edges: Vec<(u32, u32)> = (0..n).map(|v| (v, (v + 1) % n)).collect();
        Graph::from_edges(n as usize, &edges, Direction::Directed).0
    }

    #[test]
    fn a_ring_walks_around_and_a_sink_ends_the_walk() {
        let r = reference_walks(&ring(5), 5, 7, 3, true);
        let paths = r.paths.unwrap();
        assert_eq!(&paths[8..16], &[1, 2, 3, 4, 0, 1, 2, 3]);
        // 0 -> 1 -> 2, and 2 has no edges.
        let (g, _) = Graph::from_edges(3, &[(0, 1), (1, 2)], Direction::Directed);
        let r = reference_walks(&g, 3, 4, 3, true);
        let paths = r.paths.unwrap();
        assert_eq!(&paths[0..5], &[0, 1, 2, NO_VERTEX, NO_VERTEX]);
        assert_eq!(
            &paths[10..15],
            &[2, NO_VERTEX, NO_VERTEX, NO_VERTEX, NO_VERTEX]
        );
    }

    #[test]
    fn walks_are_seeded_and_pick_every_neighbour() {
        let (g, _) = Graph::rmat(8, 8, 5).unwrap();
        let a = reference_walks(&g, 512, 20, 9, true);
        let b = reference_walks(&g, 512, 20, 9, false);
        let c = reference_walks(&g, 512, 20, 10, false);
        assert_eq!(a.digests, b.digests, "paths kept or not, the same walks");
        assert_ne!(a.digests, c.digests);
        // Every step goes along an edge.
        let paths = a.paths.as_ref().unwrap();
        for walk in paths.chunks(21) {
            for s in walk.windows(2).take_while(|s| s[1] != NO_VERTEX) {
                assert!(g.neighbors_of(s[0]).contains(&s[1]));
            }
        }
        // From a vertex of degree d, the walks leave by every edge (uniform choice).
        let hub = (0..g.vertices() as u32)
            .max_by_key(|&v| g.degree(v))
            .unwrap();
        let d = g.degree(hub);
        let mut seen = std::collections::HashSet::new();
        for w in 0..20 * d {
            seen.insert(walk_random(1, w, 0) % d);
        }
        assert_eq!(seen.len() as u64, d);
    }

    #[test]
    fn degree_order_is_a_permutation_by_falling_degree() {
        let (g, _) = Graph::rmat(9, 8, 2).unwrap();
        let order = allocation_order(&g, Order::Degree);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, allocation_order(&g, Order::Vertex));
        assert!(order.windows(2).all(|w| g.degree(w[0]) >= g.degree(w[1])));
    }

    use crate::testing::{parse, take_json, temp};

    #[test]
    fn the_sim_backend_walks_match_the_reference_and_leave_nothing_allocated() {
        let (json, walks) = (temp("walk.json"), temp("walks.txt"));
        let args: Args = parse(&[
            "--rmat",
            "9",
            "--length",
            "12",
            "--backend",
            "sim",
            "--verify",
            "--json",
            json.to_str().unwrap(),
            "--output",
            walks.to_str().unwrap(),
        ])
        .unwrap();
        // Fails if any walk differs, or if lists are left allocated or invariants break.
        run(&args).unwrap();
        let report = take_json(&json);
        assert_eq!(report["backend"], "Sim");
        assert!(report["times"].as_str().unwrap().contains("modelled"));
        let runs = report["runs"].as_array().unwrap();
        let systems: Vec<&str> = runs.iter().map(|r| r["system"].as_str().unwrap()).collect();
        assert_eq!(
            systems,
            ["alignmalloc", "alignmalloc-contiguous", "managed-csr"]
        );
        let edges = report["edges"].as_u64().unwrap();
        for r in runs {
            assert_ne!(r["walks_agree"], false, "{r}");
            assert!(r["list_bytes"].as_u64().unwrap() >= edges * 4, "{r}");
            assert!(
                r["htod_bytes"].as_u64().unwrap() > 0,
                "host lists must migrate: {r}"
            );
            // No H200 run checks rmat 9: the JSON, like the table, gives no walk time.
            assert!(r["walk_ms"].is_null() && r["walks_per_s"].is_null(), "{r}");
        }
        // Modelled ratios rank systems unlike the GPU: none is given on the simulator.
        assert!(runs.iter().all(|r| r["ratio_to_alignmalloc"].is_null()));
        assert!(
            runs.iter().all(|r| r["h200"].is_null()),
            "no H200 run of rmat 9"
        );
        // Figures that do not apply are absent, not zero: the sim backend times no fill, and
        // the managed CSR builds nothing.
        for r in runs {
            assert!(r["fill_ms"].is_null() && r["prefetch_ms"].is_null(), "{r}");
        }
        assert!(runs[0]["build_ms"].as_f64().unwrap() > 0.0);
        assert!(runs[2]["build_ms"].is_null());
        let text = std::fs::read_to_string(&walks).unwrap();
        let _ = std::fs::remove_file(&walks);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 512);
        assert!(lines[3].starts_with("3 ") || lines[3] == "3");
    }

    #[test]
    fn the_sim_backend_gives_the_same_figures_for_the_same_seed() {
        let figures = || {
            let json = temp("walk-repeat.json");
            let args: Args = parse(&[
                "--rmat",
                "12",
                "--length",
                "16",
                "--backend",
                "sim",
                "--json",
                json.to_str().unwrap(),
            ])
            .unwrap();
            run(&args).unwrap();
            let report = take_json(&json);
            report["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    // Everything but the CPU warps' build time on this host.
                    let mut r = r.clone();
                    r["build_ms"] = serde_json::Value::Null;
                    r
                })
                .collect::<Vec<_>>()
        };
        let first = figures();
        assert!(first[0]["gpu_faults"].as_u64().unwrap() > 0);
        for _ in 0..2 {
            assert_eq!(figures(), first);
        }
    }

    #[test]
    fn a_sparsely_numbered_file_walks_its_own_vertices_and_writes_its_own_ids() {
        // 48 vertices numbered a billion apart, in a ring: 48 walks, not 47 billion.
        let (graph, walks, json) = (
            temp("sparse.txt"),
            temp("sparse-walks.txt"),
            temp("sparse.json"),
        );
        let id = |k: u64| (k % 48 + 1) * 1_000_000_007;
        let text: String = (0..48)
            .map(|k| format!("{} {}\n", id(k), id(k + 1)))
            .collect();
        std::fs::write(&graph, text).unwrap();
        let args: Args = parse(&[
            "--snap",
            graph.to_str().unwrap(),
            "--length",
            "6",
            "--backend",
            "sim",
            "--verify",
            "--output",
            walks.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        run(&args).unwrap();
        let report = take_json(&json);
        assert_eq!(report["vertices"], 48);
        assert_eq!(report["notes"]["ids_compacted"], true);
        let written = std::fs::read_to_string(&walks).unwrap();
        let _ = std::fs::remove_file(&walks);
        let _ = std::fs::remove_file(&graph);
        let ids: std::collections::BTreeSet<u64> = (0..48).map(id).collect();
        let lines: Vec<&str> = written.lines().collect();
        assert_eq!(lines.len(), 48);
        for line in lines {
            let walk: Vec<u64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
            assert_eq!(walk.len(), 7, "{line}");
            assert!(walk.iter().all(|v| ids.contains(v)), "{line}");
        }
    }

    #[test]
    fn a_figure_that_does_not_apply_is_a_dash_in_every_column() {
        let csr = SystemRun::new("managed-csr", Placement::Host, None, 1 << 20);
        let cols: Vec<String> = table_row(&csr, false)
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(
            cols[..4],
            ["managed-csr", "host", "-", "-"],
            "build and fill"
        );
        assert_eq!(cols[10], "-", "walks unchecked");
        let built = SystemRun {
            fill_ms: Some(1.25),
            ..SystemRun::new("alignmalloc", Placement::Host, Some(0.004), 1 << 20)
        };
        let cols: Vec<String> = table_row(&built, false)
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(
            cols[2..4],
            ["0.00", "1.25"],
            "a measured zero stays a number"
        );
    }

    #[test]
    fn bad_options_and_files_are_refused_with_what_to_fix() {
        assert!(
            parse::<Args>(&["--length", "5"]).is_err(),
            "a graph is required"
        );
        assert!(
            parse::<Args>(&["--rmat", "9", "--snap", "g.txt"]).is_err(),
            "one graph"
        );
        // Numbers are refused while parsing, naming the option.
        for (option, value) in [
            ("--length", "0"),
            ("--walks-per-vertex", "0"),
            ("--repeats", "0"),
            ("--edge-factor", "0"),
            ("--rmat", "40"),
        ] {
            let rmat: &[&str] = if option == "--rmat" {
                &[]
            } else {
                &["--rmat", "9"]
            };
            let words: Vec<&str> = rmat.iter().copied().chain([option, value]).collect();
            let err = parse::<Args>(&words).err().expect(option).to_string();
            assert!(err.contains(option), "{err}");
        }
        // A system of the other kind of walk is refused, naming the ones this walk runs.
        let static_only: Args = parse(&[
            "--rmat",
            "9",
            "--systems",
            "csr-rebuild-gpu",
            "--backend",
            "sim",
        ])
        .unwrap();
        let err = format!("{:#}", run(&static_only).unwrap_err());
        assert!(
            err.contains("--systems csr-rebuild-gpu walks a changing graph"),
            "{err}"
        );
        let changing: Args = parse(&[
            "--rmat",
            "9",
            "--batches",
            "2",
            "--systems",
            "managed-csr",
            "--backend",
            "sim",
        ])
        .unwrap();
        let err = format!("{:#}", run(&changing).unwrap_err());
        assert!(err.contains("a changing graph runs alignmalloc,"), "{err}");
        // One way for a graph to change at a time; the update file must exist.
        assert!(parse::<Args>(&["--rmat", "9", "--batches", "2", "--rounds", "2"]).is_err());
        let no_file: Args = parse(&[
            "--rmat",
            "9",
            "--updates",
            "/nonexistent/u.txt",
            "--backend",
            "sim",
        ])
        .unwrap();
        assert!(
            format!("{:#}", run(&no_file).unwrap_err()).contains("--updates /nonexistent/u.txt")
        );
        let missing: Args = parse(&["--snap", "/nonexistent/g.txt", "--backend", "sim"]).unwrap();
        assert!(format!("{:#}", run(&missing).unwrap_err()).contains("--snap /nonexistent/g.txt"));
        // Files are checked before the graph is generated (scale 26 would take minutes).
        let late: Args = parse(&["--rmat", "26", "--json", "/nonexistent/w.json"]).unwrap();
        assert!(format!("{:#}", run(&late).unwrap_err()).contains("--json /nonexistent/w.json"));
        let walks: Args = parse(&["--rmat", "26", "--output", "/nonexistent/w.txt"]).unwrap();
        assert!(format!("{:#}", run(&walks).unwrap_err()).contains("--output"));
        // Several devices: GPU only (refused before the graph is generated), a valid list, and
        // not with a changing graph.
        let sim_devices: Args =
            parse(&["--rmat", "26", "--devices", "0,1", "--backend", "sim"]).unwrap();
        assert!(format!("{:#}", run(&sim_devices).unwrap_err()).contains("needs a GPU"));
        let err = parse::<Args>(&["--rmat", "9", "--devices", "0,x"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("--devices") && err.contains("ordinal"),
            "{err}"
        );
        assert!(parse::<Args>(&["--rmat", "9", "--devices", "all", "--batches", "2"]).is_err());
        if alignmalloc::internals::cuda::open(0).is_err() {
            let cuda: Args = parse(&["--rmat", "26", "--backend", "cuda"]).unwrap();
            assert!(format!("{:#}", run(&cuda).unwrap_err()).contains("--backend cuda"));
        }
    }

    #[test]
    fn compare_names_the_first_difference() {
        let g = ring(4);
        let r = reference_walks(&g, 4, 3, 1, true);
        let mut paths = r.paths.clone().unwrap();
        assert!(compare(&r, &r.digests, Some(&paths)).is_ok());
        paths[6] = 0;
        let err = compare(&r, &r.digests, Some(&paths)).unwrap_err();
        assert!(err.contains("walk 1") && err.contains("step 2"), "{err}");
        let mut digests = r.digests.clone();
        digests[3] ^= 1;
        assert!(compare(&r, &digests, None).unwrap_err().contains("walk 3"));
    }
}
