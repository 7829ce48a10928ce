//! The process-wide state of a wrapped program: its settings (read once at load), the pool
//! (made at the first managed allocation, when the program's context exists), the counters of
//! unified-memory traffic, and the report written once at exit or on SIGINT/SIGTERM.
//!
//! Invariants: the pool is touched only under its lock; the report is written at most once; a
//! signal handler never waits for the lock (it writes what it can without it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;
use runtime::faults::{Counting, Record};
use wrap::report::{Interception, Report, Traffic, TrafficKind};
use wrap::{Pool, WrapOptions};

use crate::driver::{self, ManagedReserve};

/// Lookups and calls the interposer saw ([`Interception`]).
pub static CUDA_LOOKUPS: AtomicU64 = AtomicU64::new(0);
pub static WRAPPED_LOOKUPS: AtomicU64 = AtomicU64::new(0);
pub static UNIDENTIFIED_LOOKUPS: AtomicU64 = AtomicU64::new(0);
pub static MANAGED_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Ticks ([`ticks`]) spent inside the wrapped `cuMemAllocManaged` (the pool, or the driver
/// through it).
pub static ALLOC_TICKS: AtomicU64 = AtomicU64::new(0);

/// Adds the ticks from its start to a counter when dropped.
pub struct TimeIn(pub &'static AtomicU64, pub u64);

impl Drop for TimeIn {
    fn drop(&mut self) {
        self.0
            .fetch_add(ticks().saturating_sub(self.1), Ordering::Relaxed);
    }
}

/// The clock of every allocation and free: the CPU's time-stamp counter where there is one (a
/// clock read, or CUPTI's timestamp, costs up to a microsecond in a virtual machine, more than
/// the pool's whole allocation), else nanoseconds since load. Turned into nanoseconds, and into
/// CUPTI's clock, by two [`Anchor`]s: at the pool's start and at the report.
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        start().elapsed().as_nanos() as u64
    }
}

/// A moment on both clocks: ticks, and nanoseconds (CUPTI's while counting, else since load).
#[derive(Clone, Copy)]
struct Anchor {
    ticks: u64,
    ns: u64,
}

impl Anchor {
    fn now(counting: &Counting) -> Self {
        let ns = match counting {
            Counting::On(_) => runtime::faults::timestamp().unwrap_or(0),
            _ => start().elapsed().as_nanos() as u64,
        };
        Self { ticks: ticks(), ns }
    }
}

/// The pool and the counters, once the first managed allocation made them.
pub struct Wrapped {
    pub pool: Pool<ManagedReserve>,
    counting: Counting,
    device: i32,
    anchor: Anchor,
}

pub static STATE: Mutex<Option<Wrapped>> = Mutex::new(None);
static REPORTED: AtomicBool = AtomicBool::new(false);

/// The settings, read when the library loads.
pub fn options() -> &'static WrapOptions {
    static OPTIONS: OnceLock<WrapOptions> = OnceLock::new();
    OPTIONS.get_or_init(|| match WrapOptions::from_env() {
        Ok(o) => o,
        Err(e) => {
            // A program must not run with settings other than those asked for.
            eprintln!("alignmalloc wrap: {e}");
            std::process::exit(2);
        }
    })
}

fn start() -> &'static Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now)
}

impl Wrapped {
    /// Now, in [`ticks`].
    pub fn now(&self) -> u64 {
        ticks()
    }

    /// The current context's device when the pool started.
    pub fn device(&self) -> i32 {
        self.device
    }
}

/// The state, made on first use: the pool, the counters (CUPTI, on the current device), and
/// the report at exit.
pub fn with_state<T>(f: impl FnOnce(&mut Wrapped) -> T) -> T {
    let mut guard = STATE.lock();
    let state = guard.get_or_insert_with(|| {
        let options = options();
        let device = driver::current_device();
        let counting = match Counting::start(options.counters, device.max(0) as usize) {
            Ok(c) => c,
            Err(e) => Counting::Taken(format!("unavailable: {e}")),
        };
        let pool = Pool::new(options, ManagedReserve);
        tracing::info!(
            pool = options.pool,
            cap = pool.cap(),
            device,
            "alignmalloc wrap serves this program's managed allocations"
        );
        // Registered after the CUDA runtime's own exit handler, so it runs before it, while
        // the context lives.
        // SAFETY: registers a function with no preconditions.
        unsafe { libc::atexit(report_at_exit) };
        Wrapped {
            pool,
            anchor: Anchor::now(&counting),
            counting,
            device,
        }
    });
    f(state)
}

extern "C" fn report_at_exit() {
    write_report(false);
}

/// Write the report (once): JSON where the settings say, else a table on stderr.
/// `from_signal`: do not wait for the lock.
pub fn write_report(from_signal: bool) {
    if REPORTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let guard = if from_signal {
        STATE.try_lock()
    } else {
        Some(STATE.lock())
    };
    let report = match guard {
        Some(mut g) => build(g.as_mut()),
        None => build(None),
    };
    let options = options();
    match &options.report {
        Some(path) => {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            if let Err(e) = std::fs::write(path, text) {
                eprintln!(
                    "alignmalloc wrap: cannot write the report to {}: {e}",
                    path.display()
                );
            }
        }
        None => eprint!("{}", report.table(20)),
    }
}

fn build(state: Option<&mut Wrapped>) -> Report {
    let interception = Interception {
        cuda_lookups: CUDA_LOOKUPS.load(Ordering::Relaxed),
        wrapped_lookups: WRAPPED_LOOKUPS.load(Ordering::Relaxed),
        unidentified_lookups: UNIDENTIFIED_LOOKUPS.load(Ordering::Relaxed),
        managed_allocations: MANAGED_ALLOCATIONS.load(Ordering::Relaxed),
        alloc_ns: 0,
    };
    let program = std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let options = options().clone();
    let Some(state) = state else {
        let empty = Pool::new(&options, NoReserve);
        return Report {
            program,
            counters: "unavailable: no managed allocation was made".into(),
            counted: false,
            dropped_records: 0,
            interception,
            pool: empty.summary(),
            total: Default::default(),
            unattributed: Default::default(),
            allocations: Vec::new(),
            rest: Default::default(),
            options,
        };
    };
    let (mut traffic, dropped, counters, counted) = match &state.counting {
        Counting::On(counter) => match counter.take() {
            Ok((records, dropped)) => (
                records.iter().filter_map(traffic_of).collect::<Vec<_>>(),
                dropped,
                "counted by CUPTI".to_string(),
                true,
            ),
            Err(e) => (Vec::new(), 0, format!("unavailable: {e}"), false),
        },
        Counting::Off => (Vec::new(), 0, "off (--no-counters)".into(), false),
        Counting::Taken(reason) => (Vec::new(), 0, reason.clone(), false),
    };
    if let Err(e) = state.pool.check() {
        tracing::error!(error = %e, "the pool's invariants do not hold at exit");
    }
    // Ticks to nanoseconds by the two anchors; records onto the ticks clock the same way.
    let (start, end) = (state.anchor, Anchor::now(&state.counting));
    let ns_per_tick = match end.ticks.saturating_sub(start.ticks) {
        0 => 1.0,
        dt => end.ns.saturating_sub(start.ns) as f64 / dt as f64,
    };
    for t in &mut traffic {
        let ns = t.start_ns as f64 - start.ns as f64;
        t.start_ns = (start.ticks as f64 + ns / ns_per_tick.max(f64::MIN_POSITIVE)).max(0.0) as u64;
    }
    let mut interception = interception;
    interception.alloc_ns = (ALLOC_TICKS.load(Ordering::Relaxed) as f64 * ns_per_tick) as u64;
    let (mut rows, total, unattributed) = state.pool.attribute(&mut traffic, ns_per_tick);
    let rest = Report::keep_rows(&mut rows);
    Report {
        program,
        options,
        counters,
        counted,
        dropped_records: dropped,
        interception,
        pool: state.pool.summary(),
        total,
        unattributed,
        allocations: rows,
        rest,
    }
}

/// A counter record as the report counts it.
fn traffic_of(r: &Record) -> Option<Traffic> {
    use runtime::cudarc::cupti::sys::CUpti_ActivityUnifiedMemoryCounterKind as K;
    let kind = match r.kind {
        K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD => TrafficKind::HtoD,
        K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH => TrafficKind::DtoH,
        K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT => TrafficKind::GpuFaultGroups,
        K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT => TrafficKind::CpuFault,
        _ => return None,
    };
    Some(Traffic {
        kind,
        value: r.value,
        address: r.address,
        start_ns: r.start,
    })
}

/// A pool that never reserves (the report of a run with no managed allocation).
struct NoReserve;

impl wrap::Reserve for NoReserve {
    fn reserve(&mut self, _: u64) -> Result<u64, i32> {
        Err(driver::CUDA_ERROR_OUT_OF_MEMORY)
    }
    fn gpu_free_bytes(&mut self) -> Option<u64> {
        None
    }
}

/// Where the allocation being made was asked for: the first frame outside the CUDA runtime,
/// the driver's entry points and this library (a stack walk: only with `--callers`).
pub fn caller() -> Option<String> {
    if !options().callers {
        return None;
    }
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    // Frames: "  N: symbol", optionally followed by "at file:line:column".
    let mut frames: Vec<(String, Option<String>)> = Vec::new();
    for line in trace.lines().map(str::trim_start) {
        if let Some(at) = line.strip_prefix("at ") {
            if let Some(last) = frames.last_mut() {
                let file = at.rsplit('/').next().unwrap_or(at);
                last.1 = Some(file.to_string());
            }
        } else if let Some((_, symbol)) = line.split_once(": ") {
            frames.push((symbol.to_string(), None));
        }
    }
    let internal = |s: &str| {
        [
            "backtrace",
            "alignmalloc_preload",
            "cuMem",
            "cudaMalloc",
            "cudart",
            "__cuda",
            "libcuda",
        ]
        .iter()
        .any(|p| s.contains(p))
    };
    let last_internal = frames.iter().rposition(|(s, _)| internal(s))?;
    frames.get(last_internal + 1).map(|(symbol, at)| match at {
        Some(at) => format!("{symbol} ({at})"),
        None => symbol.clone(),
    })
}

/// Install the report on SIGINT and SIGTERM where the program left them at their default.
pub fn install_signal_report() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction(2) queries and sets with live structs; the handler is below.
            unsafe {
                let mut current: libc::sigaction = std::mem::zeroed();
                libc::sigaction(signal, std::ptr::null(), &mut current);
                if current.sa_sigaction != libc::SIG_DFL {
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    });
}

extern "C" fn on_signal(signal: libc::c_int) {
    // Not async-signal-safe in general (it formats and writes a file); it never waits for the
    // pool's lock, and the process ends right after.
    write_report(true);
    // SAFETY: back to the default action, then the signal again: the program ends as it would.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}
