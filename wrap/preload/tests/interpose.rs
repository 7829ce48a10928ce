//! The preload library in a process, without a GPU: a stand-in libcuda (tests/fixtures/
//! fake_cuda.c, which checks arguments as the driver does) and a test program that reaches it
//! the two ways programs do (the static CUDA runtime's dlopen + cuGetProcAddress, and libcuda's
//! exported symbols). A wrapped run must print exactly what a plain run prints; the report and
//! the stand-in's call log say what the wrapper did.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use wrap::report::Report;
use wrap::tiers::Split;
use wrap::{PastCap, Placement, WrapOptions};

struct Fixture {
    dir: PathBuf,
    via_proc_address: PathBuf,
    exported: PathBuf,
    /// A framework loading the library with dlopen and allocating through its hooks.
    pluggable: PathBuf,
}

fn cc(args: &[&str]) {
    let out = Command::new("cc")
        .args(args)
        .output()
        .expect("these tests need a C compiler (cc) on PATH");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn fixture() -> &'static Fixture {
    static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
    FIXTURE.get_or_init(|| {
        // Under the build's own scratch folder, so nothing is left in the system's temp.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("alignmalloc-wrap-test-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let lib = dir.join("libcuda.so.1");
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            &s(&src.join("fake_cuda.c")),
            "-Wl,-soname,libcuda.so.1",
            "-Wl,-Bsymbolic",
            "-ldl",
            "-lpthread",
            "-o",
            &s(&lib),
        ]);
        std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).ok();
        // Another library that defines the driver's names (for `program lookup-first`).
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            &s(&src.join("fake_cuda.c")),
            "-Wl,-soname,libcuda_copy.so",
            "-ldl",
            "-lpthread",
            "-o",
            &s(&dir.join("libcuda_copy.so")),
        ]);
        let via = dir.join("via_proc_address");
        cc(&[
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DVIA_PROC_ADDRESS",
            &s(&src.join("program.c")),
            "-ldl",
            "-lpthread",
            "-o",
            &s(&via),
        ]);
        let exported = dir.join("exported");
        cc(&[
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            &s(&src.join("program.c")),
            &format!("-L{}", s(&dir)),
            "-lcuda",
            "-ldl",
            "-lpthread",
            "-o",
            &s(&exported),
        ]);
        let pluggable = dir.join("pluggable");
        cc(&[
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            &s(&src.join("pluggable.c")),
            "-ldl",
            "-o",
            &s(&pluggable),
        ]);
        Fixture {
            dir,
            via_proc_address: via,
            exported,
            pluggable,
        }
    })
}

/// The preload library cargo built beside this test.
fn preload() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let lib = deps.join(wrap::launch::PRELOAD_FILE);
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
    report: Option<Report>,
    driver_log: Vec<String>,
}

/// Run `program args`, wrapped with `options` (or plain with `None`).
fn run(program: &Path, args: &[&str], options: Option<WrapOptions>) -> Run {
    run_with(program, args, options, &[])
}

/// How long a run may take: a program that has not ended by then hangs (it is killed and the
/// test fails).
const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// [`run`] with more environment variables (for the stand-in driver).
fn run_with(
    program: &Path,
    args: &[&str],
    options: Option<WrapOptions>,
    env: &[(&str, &str)],
) -> Run {
    let f = fixture();
    let tag = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let log = f.dir.join(format!("calls-{tag}.log"));
    let report_path = f.dir.join(format!("report-{tag}.json"));
    let (out_path, err_path) = (
        f.dir.join(format!("stdout-{tag}")),
        f.dir.join(format!("stderr-{tag}")),
    );
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let mut command = match &options {
        Some(o) => {
            let o = WrapOptions {
                report: Some(report_path.clone()),
                ..o.clone()
            };
            wrap::launch::command(&preload(), &o, &program.as_os_str().to_owned(), &args)
        }
        None => {
            let mut c = Command::new(program);
            c.args(&args);
            c
        }
    };
    let mut child = command
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("FAKE_CUDA_LOG", &log)
        .env("ALIGNMALLOC_LOG", "error")
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status = wait_at_most(&mut child, RUN_LIMIT).unwrap_or_else(|| {
        panic!(
            "{} {args:?} hangs: killed after {RUN_LIMIT:?}",
            program.display()
        )
    });
    let report = std::fs::read_to_string(&report_path)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap());
    Run {
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        code: status.code(),
        report,
        driver_log: std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect(),
    }
}

/// The child's exit status, or `None` (after killing it) when it runs past `limit`.
fn wait_at_most(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn count(log: &[String], what: &str) -> usize {
    log.iter()
        .filter(|l| l.split(' ').next() == Some(what))
        .count()
}

fn same_answers_as_the_driver(program: &Path, lookups_wrapped: bool) {
    let plain = run(program, &[], None);
    assert_eq!(plain.code, Some(0), "{}", plain.stderr);
    assert!(
        plain.stdout.contains("bytes damaged: 0, misaligned: 0"),
        "{}",
        plain.stdout
    );
    let wrapped = run(program, &[], Some(WrapOptions::default()));
    assert_eq!(wrapped.code, Some(0), "{}", wrapped.stderr);
    assert_eq!(
        wrapped.stdout, plain.stdout,
        "a wrapped run answers as the driver"
    );
    let report = wrapped.report.expect("the report");
    let p = report.pool.counters;
    // 300 in the loop, a 0-byte and a host-attached one that the driver judged.
    assert_eq!(report.interception.managed_allocations, 302);
    assert_eq!(p.arena_allocations, 300);
    assert_eq!(
        (p.double_frees, p.bad_frees),
        (1, 1),
        "one second free, one interior free"
    );
    assert_eq!(p.arena_frees, 300);
    assert_eq!(report.pool.live_allocations, 0);
    assert_eq!(report.allocations.len(), 300);
    assert!(
        !report.counted && report.counters.contains("unavailable"),
        "{}",
        report.counters
    );
    // The driver saw one arena reservation and the host-attached allocation, not 300.
    assert_eq!(
        count(&wrapped.driver_log, "alloc"),
        2,
        "{:?}",
        wrapped.driver_log
    );
    assert_eq!(count(&plain.driver_log, "alloc"), 301);
    // Each free of an arena allocation waited for the device, as cuMemFree does.
    assert_eq!(count(&wrapped.driver_log, "sync"), 300);
    if lookups_wrapped {
        assert!(
            report.interception.wrapped_lookups >= 9,
            "{:?}",
            report.interception
        );
    }
    assert_eq!(report.interception.unidentified_lookups, 0);
}

#[test]
fn a_program_that_reaches_the_driver_through_cu_get_proc_address_is_served_from_the_arena() {
    same_answers_as_the_driver(&fixture().via_proc_address, true);
}

#[test]
fn a_program_linked_to_libcuda_is_served_from_the_arena() {
    same_answers_as_the_driver(&fixture().exported, false);
}

#[test]
fn past_the_cap_allocations_go_to_the_driver_or_fail_as_asked() {
    let f = fixture();
    let capped = WrapOptions {
        arena_bytes: 4 << 20,
        max_arena_bytes: Some(8 << 20),
        ..WrapOptions::default()
    };
    let plain = run(&f.via_proc_address, &["big", "10"], None);
    assert_eq!(plain.stdout, "big alloc: 0\nbig free: 0\n");
    let fallback = run(&f.via_proc_address, &["big", "10"], Some(capped.clone()));
    assert_eq!(fallback.stdout, plain.stdout);
    let report = fallback.report.unwrap();
    assert_eq!(report.pool.counters.past_cap_allocations, 1);
    assert!(
        fallback.driver_log.contains(&format!("alloc {}", 10 << 20)),
        "{:?}",
        fallback.driver_log
    );
    assert_eq!(
        report.pool.live_allocations, 0,
        "the driver's free closed it"
    );
    let fail = run(
        &f.via_proc_address,
        &["big", "10"],
        Some(WrapOptions {
            past_cap: PastCap::Fail,
            ..capped
        }),
    );
    assert_eq!(fail.stdout, "big alloc: 2\n", "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(fail.report.unwrap().pool.counters.refused_past_cap, 1);
    // Within the cap: from the arena, which the GPU's free memory bounds by default.
    let within = run(
        &f.via_proc_address,
        &["big", "3"],
        Some(WrapOptions::default()),
    );
    assert_eq!(within.report.unwrap().pool.counters.arena_allocations, 1);
}

#[test]
fn tiered_placement_splits_a_large_allocation_and_takes_its_advice_off_at_free() {
    const MIB: u64 = 1 << 20;
    let f = fixture();
    let tiered = WrapOptions {
        oversubscribe: true,
        placement: Placement::Tiered,
        device_tier_bytes: Some(32 * MIB),
        ..WrapOptions::default()
    };
    let run = run(&f.via_proc_address, &["big", "96"], Some(tiered.clone()));
    assert_eq!(run.stdout, "big alloc: 0\nbig free: 0\n");
    let log = &run.driver_log;
    // The driver's codes: advice 3/4 (un)set preferred location, 5/6 (un)set accessed by;
    // location 1 the GPU, 2 the host.
    let placed = [
        format!("advise-3-2 {}", 64 * MIB),
        format!("advise-5-1 {}", 64 * MIB),
        format!("advise-3-1 {}", 32 * MIB),
        format!("prefetch-1 {}", 32 * MIB),
        format!("advise-4-1 {}", 96 * MIB),
        format!("advise-6-1 {}", 64 * MIB),
    ];
    let at: Vec<usize> = placed
        .iter()
        .map(|line| {
            log.iter()
                .position(|l| l == line)
                .unwrap_or_else(|| panic!("no `{line}` in {log:?}"))
        })
        .collect();
    assert!(at.is_sorted(), "placed, then unplaced: {log:?}");
    let report = run.report.unwrap();
    let row = report
        .allocations
        .iter()
        .find(|r| r.bytes == 96 * MIB)
        .unwrap();
    assert_eq!(
        row.split,
        Some(Split {
            device_bytes: 32 * MIB,
            host_bytes: 64 * MIB
        })
    );
    let tiers = report.pool.tiers.unwrap();
    assert_eq!(
        (tiers.tiered_allocations, tiers.budget_bytes),
        (1, 32 * MIB)
    );
    // By default the device tier is the GPU's free memory less the headroom: here 64 MiB.
    let by_default = run_with(
        &f.via_proc_address,
        &["big", "96"],
        Some(WrapOptions {
            device_tier_bytes: None,
            ..tiered
        }),
        &[("FAKE_CUDA_FREE_BYTES", &((2048 + 64) * MIB).to_string())],
    );
    let report = by_default.report.unwrap();
    let row = report
        .allocations
        .iter()
        .find(|r| r.bytes == 96 * MIB)
        .unwrap();
    assert_eq!(row.split.map(|s| s.device_bytes), Some(64 * MIB));
}

#[test]
fn without_the_pool_allocations_stay_with_the_driver_and_are_still_reported() {
    let plain = run(&fixture().exported, &[], None);
    let report_only = run(
        &fixture().exported,
        &[],
        Some(WrapOptions {
            pool: false,
            ..WrapOptions::default()
        }),
    );
    assert_eq!(report_only.stdout, plain.stdout);
    assert_eq!(count(&report_only.driver_log, "alloc"), 301);
    let report = report_only.report.unwrap();
    assert_eq!(report.pool.counters.driver_allocations, 300);
    assert_eq!(report.pool.counters.arena_allocations, 0);
    assert_eq!(report.pool.live_allocations, 0);
}

#[test]
fn a_malformed_setting_stops_the_program_and_names_the_variable() {
    let f = fixture();
    let out = wrap::launch::command(
        &preload(),
        &WrapOptions::default(),
        &f.via_proc_address.as_os_str().to_owned(),
        &[],
    )
    .env("LD_LIBRARY_PATH", &f.dir)
    .env("ALIGNMALLOC_WRAP_ARENA_BYTES", "lots")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ALIGNMALLOC_WRAP_ARENA_BYTES=\"lots\""),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "the program never ran");
}

#[test]
fn the_launcher_forwards_the_exit_and_reads_the_report_back() {
    let f = fixture();
    let program = f.via_proc_address.as_os_str().to_owned();
    let mut command = wrap::launch::command(&preload(), &WrapOptions::default(), &program, &[]);
    let status = command
        .env("LD_LIBRARY_PATH", &f.dir)
        .arg("big")
        .arg("1")
        .status()
        .unwrap();
    assert!(status.success());
    // A program that is not there: the launcher's error, not a report.
    let missing = wrap::launch::run(
        &preload(),
        &WrapOptions::default(),
        &OsString::from("/nonexistent/program"),
        &[],
    );
    assert!(missing.is_err());
}

/// `program MODE`, wrapped (its report to a file named after `tag`), once it printed its first
/// line: the child, the report's path and that line.
fn start_wrapped(mode: &str, tag: &str) -> (std::process::Child, PathBuf, String) {
    use std::io::BufRead;
    let f = fixture();
    let report = f
        .dir
        .join(format!("report-{tag}-{}.json", std::process::id()));
    let options = WrapOptions {
        report: Some(report.clone()),
        ..WrapOptions::default()
    };
    let program = f.via_proc_address.as_os_str().to_owned();
    let mut child = wrap::launch::command(&preload(), &options, &program, &[OsString::from(mode)])
        .env("LD_LIBRARY_PATH", &f.dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, report, line)
}

/// SIGTERM to `child`.
fn terminate(child: &std::process::Child) {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

#[test]
fn a_program_ended_by_sigterm_still_writes_its_report_and_dies_of_the_signal() {
    use std::os::unix::process::ExitStatusExt;
    let (mut child, report, line) = start_wrapped("wait", "term");
    assert_eq!(line, "alloc: 0\n");
    terminate(&child);
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(SIGTERM),
        "the program ends as SIGTERM ends it"
    );
    let report: Report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report.pool.counters.arena_allocations, 1);
    assert_eq!(report.pool.live_allocations, 1);
}

const SIGTERM: i32 = 15;

/// Eight threads allocate, fill, check and free at once: the same answers as the driver's, no
/// deadlock, and the report has every allocation and the time spent allocating.
#[test]
fn eight_threads_allocating_at_once_get_the_drivers_answers() {
    for program in [&fixture().via_proc_address, &fixture().exported] {
        let plain = run(program, &["threads"], None);
        assert_eq!(plain.code, Some(0), "{}", plain.stderr);
        assert!(
            plain.stdout.contains("failed 0, bytes damaged 0"),
            "{}",
            plain.stdout
        );
        let wrapped = run(program, &["threads"], Some(WrapOptions::default()));
        assert_eq!(wrapped.code, Some(0), "{}", wrapped.stderr);
        assert_eq!(wrapped.stdout, plain.stdout);
        let report = wrapped.report.expect("the report");
        let allocations = report.interception.managed_allocations;
        assert_eq!(allocations, 8 * 500);
        assert_eq!(report.pool.live_allocations, 0);
        assert!(report.interception.alloc_ns > 0);
        eprintln!(
            "{}: {:.2} us per allocation in the wrapper",
            program.display(),
            report.interception.alloc_ns as f64 / allocations as f64 / 1e3
        );
    }
}

/// The driver calls back into the wrapper while it starts (its first cuCtxGetDevice allocates
/// through the global cuMemAllocManaged): the call goes to the driver, nothing waits for itself.
#[test]
fn a_call_back_from_the_driver_while_the_wrapper_starts_goes_to_the_driver() {
    let program = &fixture().via_proc_address;
    let plain = run(program, &[], None);
    let wrapped = run_with(
        program,
        &[],
        Some(WrapOptions::default()),
        &[("FAKE_CUDA_REENTER", "1")],
    );
    assert_eq!(wrapped.code, Some(0), "{}", wrapped.stderr);
    assert_eq!(wrapped.stdout, plain.stdout);
    assert_eq!(count(&wrapped.driver_log, "reentered"), 1);
    assert!(
        wrapped.driver_log.iter().any(|l| l == "reentered 0"),
        "{:?}",
        wrapped.driver_log
    );
}

/// Before libcuda is loaded, a program looks a wrapped name up in another library that defines
/// it; finding the driver's definitions to compare loads libcuda, whose constructor looks a
/// wrapped name up through its own handle (inside our dlsym): both get an answer, nothing
/// aborts or waits for itself.
#[test]
fn a_lookup_from_libcuda_while_it_loads_gets_an_answer() {
    let wrapped = run_with(
        &fixture().via_proc_address,
        &["lookup-first"],
        Some(WrapOptions::default()),
        &[("FAKE_CUDA_LOOKUP_AT_LOAD", "1")],
    );
    assert_eq!(wrapped.code, Some(0), "{}", wrapped.stderr);
    assert_eq!(wrapped.stdout, "alloc: 0\nfree: 0\n");
    assert!(
        wrapped.driver_log.iter().any(|l| l == "load-lookup 1"),
        "{:?}",
        wrapped.driver_log
    );
    let report = wrapped.report.expect("the report");
    assert_eq!(report.pool.counters.arena_allocations, 1);
}

/// SIGTERM at a random moment of a loop of allocations and frees, 20 times: every run ends by
/// the signal, none hangs, and each writes its report.
#[test]
fn a_signal_while_the_program_allocates_ends_it_with_the_signal_and_a_report() {
    use std::os::unix::process::ExitStatusExt;
    for round in 0..20u64 {
        let (mut child, report, line) = start_wrapped("churn", &format!("churn-{round}"));
        assert_eq!(line, "churning\n");
        std::thread::sleep(std::time::Duration::from_millis(round % 7));
        terminate(&child);
        let status = wait_at_most(&mut child, RUN_LIMIT)
            .unwrap_or_else(|| panic!("round {round}: the signalled program hangs"));
        assert_eq!(status.signal(), Some(SIGTERM), "round {round}");
        let report: Report =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert!(report.pool.counters.arena_allocations >= 1, "round {round}");
    }
}

/// The allocator hooks a framework loads by name (PyTorch's pluggable allocator): a free waits
/// for its stream's work, not for the host, and its memory is handed out again only once that
/// work is done (waiting for it only when there is no room); a second free, a pointer no one
/// allocated and a negative size are refused and counted, and the report says so.
#[test]
fn the_frameworks_hooks_free_in_stream_order_and_refuse_what_is_not_theirs() {
    let f = fixture();
    let report_path = f
        .dir
        .join(format!("pluggable-report-{}.json", std::process::id()));
    // Three 2 MiB blocks for objects, and one the pool keeps for aligning its reservation.
    let three_blocks = (8u64 << 20).to_string();
    let lib = preload();
    let r = run_with(
        &f.pluggable,
        &[lib.to_str().unwrap()],
        None,
        &[
            ("ALIGNMALLOC_WRAP_COUNTERS", "0"),
            ("ALIGNMALLOC_WRAP_ARENA_BYTES", &three_blocks),
            ("ALIGNMALLOC_WRAP_MAX_ARENA_BYTES", &three_blocks),
            ("ALIGNMALLOC_WRAP_PAST_CAP", "fail"),
            ("ALIGNMALLOC_WRAP_REPORT", report_path.to_str().unwrap()),
        ],
    );
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let value = |name: &str| -> u64 {
        r.stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {}", r.stdout))
    };
    assert_eq!(value("allocated"), 1);
    assert_eq!(
        value("pending_kept"),
        1,
        "memory handed out before its stream's work ended"
    );
    assert_eq!(
        value("waited_reuse"),
        1,
        "with no room, the pending free is waited for"
    );
    assert_eq!(value("completed_reuse"), 1);
    assert_eq!(value("negative_null"), 1);
    assert_eq!(value("empty_null"), 1);
    assert_eq!(value("failed_allocations"), 1, "the negative size");
    assert_eq!(
        value("failed_frees"),
        2,
        "the second free and the stray pointer"
    );
    assert_eq!(value("report_bytes_positive"), 1);
    // Only the allocation that found no room waited, for one event; no free waited for its
    // stream or the context.
    assert_eq!(count(&r.driver_log, "event-sync"), 1, "{:?}", r.driver_log);
    assert_eq!(count(&r.driver_log, "stream-sync"), 0, "{:?}", r.driver_log);
    assert_eq!(count(&r.driver_log, "sync"), 0, "{:?}", r.driver_log);
    let report: Report =
        serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    let counters = &report.pool.counters;
    assert_eq!(counters.arena_allocations, 5);
    assert_eq!(counters.arena_frees, 5);
    assert_eq!(counters.double_frees, 1);
    assert_eq!(report.pool.live_allocations, 0);
}
