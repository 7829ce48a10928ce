//! The process-wide state of a wrapped program: its settings (read once at load), the start
//! (device, counters of unified-memory traffic, made once at the first managed allocation, when
//! the program's context exists), the pool, and the report written once at exit or on
//! SIGINT/SIGTERM.
//!
//! Invariants: the pool is touched only under its lock, and nothing under that lock calls the
//! driver or CUPTI (the caller reserves, then publishes; [`wrap::Pool::try_alloc`]), so threads
//! allocate side by side while one waits for the driver, and no call the driver makes back into
//! a wrapper can find the lock taken by its own thread. A wrapper called on the thread that is
//! making the start (the driver or CUPTI calling back) gets no pool ([`with_pool`] answers
//! `None`) and passes the call to the driver. The report is written at most once; the signal
//! handler only writes the signal's number to a pipe (async-signal-safe), and a thread of ours
//! writes the report and then ends the program with that signal.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

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
/// through it), less the start.
pub static ALLOC_TICKS: AtomicU64 = AtomicU64::new(0);
/// Ticks the start took (CUPTI's start among them), on the first managed allocation.
static START_TICKS: AtomicU64 = AtomicU64::new(0);

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

/// What the first managed allocation set up, outside the pool's lock; read-only afterwards.
pub struct Started {
    counting: Counting,
    device: i32,
    anchor: Anchor,
}

impl Started {
    /// The current context's device when the wrapper started.
    pub fn device(&self) -> i32 {
        self.device
    }
}

static STARTED: OnceLock<Started> = OnceLock::new();
/// Every counter record taken so far, on the ticks clock, and the records CUPTI dropped: a
/// report made while the program runs ([`report_json`]) takes the new records, and every later
/// report attributes them too.
static TRAFFIC: Mutex<(Vec<Traffic>, u64)> = Mutex::new((Vec::new(), 0));
/// The pool (made by [`started`]), under its lock.
static POOL: Mutex<Option<Pool<ManagedReserve>>> = Mutex::new(None);
static REPORTED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread is making the start now.
    static STARTING: Cell<bool> = const { Cell::new(false) };
}

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

/// Whether this thread is making the start (a wrapper it reaches is a call back from the
/// driver or CUPTI; a thread that cannot tell counts as starting, so it only passes calls on).
fn starting_here() -> bool {
    STARTING.try_with(Cell::get).unwrap_or(true)
}

/// The start, made on first use (waiting for another thread that is making it): the device,
/// the counters (CUPTI, on the current device), the pool, the report at exit. `None` on the
/// thread making it (see [`starting_here`]).
pub fn started() -> Option<&'static Started> {
    if let Some(started) = STARTED.get() {
        return Some(started);
    }
    if starting_here() {
        return None;
    }
    Some(STARTED.get_or_init(|| {
        // Cleared when the start ends, also by a panic (which leaves STARTED empty).
        struct Starting;
        impl Drop for Starting {
            fn drop(&mut self) {
                let _ = STARTING.try_with(|s| s.set(false));
            }
        }
        STARTING.with(|s| s.set(true));
        let _starting = Starting;
        let began = ticks();
        let options = options();
        let device = driver::current_device();
        let counting = match Counting::start(options.counters, device.max(0) as usize) {
            Ok(c) => c,
            Err(e) => Counting::Taken(format!("unavailable: {e}")),
        };
        // Asks the driver for the GPU's free memory (the default cap).
        let pool = Pool::new(options, ManagedReserve);
        tracing::info!(
            pool = options.pool,
            cap = pool.cap(),
            device,
            "alignmalloc wrap serves this program's managed allocations"
        );
        *POOL.lock() = Some(pool);
        // Registered after the CUDA runtime's own exit handler, so it runs before it, while
        // the context lives.
        // SAFETY: registers a function with no preconditions.
        unsafe { libc::atexit(report_at_exit) };
        START_TICKS.store(ticks().saturating_sub(began), Ordering::Relaxed);
        Started {
            anchor: Anchor::now(&counting),
            counting,
            device,
        }
    }))
}

/// Run `f` on the pool under its lock (which `f` must not hold across a driver call); `None`
/// where there is no pool to use: on the thread making the start, whose call the caller then
/// passes to the driver.
pub fn with_pool<T>(f: impl FnOnce(&mut Pool<ManagedReserve>) -> T) -> Option<T> {
    started()?;
    let mut guard = POOL.lock();
    guard.as_mut().map(f)
}

/// The report so far, as JSON (the pool's allocations and the traffic counted until now), for
/// a program that asks while it runs; the report at exit is still written.
pub fn report_json() -> String {
    let taken = STARTED.get().map(take_traffic);
    let mut guard = POOL.lock();
    let report = match taken {
        Some(taken) => build(guard.as_mut().map(|pool| (pool, taken))),
        None => build(None),
    };
    serde_json::to_string(&report).unwrap_or_default()
}

extern "C" fn report_at_exit() {
    write_report(false);
}

/// Write the report (once): JSON where the settings say, else a table on stderr. `from_signal`:
/// wait for the pool's lock a little only (a thread stopped by the signal's default action
/// could hold it).
pub fn write_report(from_signal: bool) {
    if REPORTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let taken = STARTED.get().map(take_traffic);
    let guard = if from_signal {
        POOL.try_lock_for(Duration::from_secs(2))
    } else {
        Some(POOL.lock())
    };
    let report = match (guard, taken) {
        (Some(mut g), Some(taken)) => build(g.as_mut().map(|pool| (pool, taken))),
        _ => build(None),
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

/// What the counters gave until now: CUPTI's new records, moved onto the ticks clock and added
/// to [`TRAFFIC`].
struct Taken {
    counters: String,
    counted: bool,
    ns_per_tick: f64,
}

/// Take CUPTI's new records into [`TRAFFIC`], without the pool's lock (taking them may call the
/// driver).
fn take_traffic(state: &Started) -> Taken {
    let (mut new, dropped, counters, counted) = match &state.counting {
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
    // Ticks to nanoseconds by the two anchors; records onto the ticks clock the same way.
    let (start, end) = (state.anchor, Anchor::now(&state.counting));
    let ns_per_tick = match end.ticks.saturating_sub(start.ticks) {
        0 => 1.0,
        dt => end.ns.saturating_sub(start.ns) as f64 / dt as f64,
    };
    for t in &mut new {
        let ns = t.start_ns as f64 - start.ns as f64;
        t.start_ns = (start.ticks as f64 + ns / ns_per_tick.max(f64::MIN_POSITIVE)).max(0.0) as u64;
    }
    let mut taken = TRAFFIC.lock();
    taken.0.append(&mut new);
    taken.1 += dropped;
    Taken {
        counters,
        counted,
        ns_per_tick,
    }
}

fn build(state: Option<(&mut Pool<ManagedReserve>, Taken)>) -> Report {
    let interception = Interception {
        cuda_lookups: CUDA_LOOKUPS.load(Ordering::Relaxed),
        wrapped_lookups: WRAPPED_LOOKUPS.load(Ordering::Relaxed),
        unidentified_lookups: UNIDENTIFIED_LOOKUPS.load(Ordering::Relaxed),
        managed_allocations: MANAGED_ALLOCATIONS.load(Ordering::Relaxed),
        alloc_ns: 0,
        start_ns: 0,
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
    let Some((pool, taken)) = state else {
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
    if let Err(e) = pool.check() {
        tracing::error!(error = %e, "the pool's invariants do not hold");
    }
    let Taken {
        counters,
        counted,
        ns_per_tick,
    } = taken;
    let (mut traffic, dropped) = {
        let all = TRAFFIC.lock();
        (all.0.clone(), all.1)
    };
    let mut interception = interception;
    interception.alloc_ns = (ALLOC_TICKS.load(Ordering::Relaxed) as f64 * ns_per_tick) as u64;
    interception.start_ns = (START_TICKS.load(Ordering::Relaxed) as f64 * ns_per_tick) as u64;
    let (mut rows, total, unattributed) = pool.attribute(&mut traffic, ns_per_tick);
    let rest = Report::keep_rows(&mut rows);
    Report {
        program,
        options,
        counters,
        counted,
        dropped_records: dropped,
        interception,
        pool: pool.summary(),
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

/// The write end of the pipe the signal handler writes a signal's number to (-1: none).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// The process that installed the handler (a forked child has no reporting thread).
static REPORTING_PROCESS: AtomicI32 = AtomicI32::new(0);

/// Install the report on SIGINT and SIGTERM where the program left them at their default: a
/// thread waits on a pipe for the handler's byte, writes the report and ends the program with
/// that signal's default action.
pub fn install_signal_report() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors of a live array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            tracing::warn!(
                "no pipe for the signal report: SIGINT and SIGTERM end the program unreported"
            );
            return;
        }
        // The handler's end never blocks: a full pipe means the report is on its way.
        // SAFETY: fcntl on a descriptor just made.
        unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
        let reader = fds[0];
        let spawned = std::thread::Builder::new()
            .name("alignmalloc-wrap-report".into())
            .spawn(move || report_on_signal(reader));
        if spawned.is_err() {
            tracing::warn!(
                "no thread for the signal report: SIGINT and SIGTERM end the program unreported"
            );
            return;
        }
        SIGNAL_PIPE.store(fds[1], Ordering::Release);
        // SAFETY: getpid has no preconditions.
        REPORTING_PROCESS.store(unsafe { libc::getpid() }, Ordering::Release);
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

/// The handler: async-signal-safe calls only (getpid, write; signal and raise in a forked
/// child, which has no reporting thread).
extern "C" fn on_signal(signal: libc::c_int) {
    let byte = signal as u8;
    // SAFETY: getpid, write of one live byte, signal and raise are async-signal-safe.
    unsafe {
        if libc::getpid() == REPORTING_PROCESS.load(Ordering::Acquire) {
            let fd = SIGNAL_PIPE.load(Ordering::Acquire);
            libc::write(fd, (&raw const byte).cast(), 1);
        } else {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
}

/// The reporting thread: wait for a signal's number, write the report, end the program as that
/// signal does by default.
fn report_on_signal(reader: libc::c_int) {
    // This thread takes no signal itself, so the handler runs on the program's threads and the
    // default action below ends the whole process.
    // SAFETY: sigset operations on a live set; pthread_sigmask for this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let mut byte = 0u8;
    loop {
        // SAFETY: read of one byte into a live buffer.
        let n = unsafe { libc::read(reader, (&raw mut byte).cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return; // the pipe is gone: nothing will be reported
    }
    let signal = libc::c_int::from(byte);
    write_report(true);
    // SAFETY: back to the default action, then the signal to the process: it ends as it would
    // have without the wrapper.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::kill(libc::getpid(), signal);
    }
}
