//! The preload library in a process, without a GPU: a stand-in libcuda (tests/fixtures/
//! fake_cuda.c, which checks arguments as the driver does) and a test program that reaches it
//! the two ways programs do (the static CUDA runtime's dlopen + cuGetProcAddress, and libcuda's
//! exported symbols). A wrapped run must print exactly what a plain run prints; the report and
//! the stand-in's call log say what the wrapper did.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use wrap::report::Report;
use wrap::{PastCap, WrapOptions};

struct Fixture {
    dir: PathBuf,
    via_proc_address: PathBuf,
    exported: PathBuf,
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
            "-o",
            &s(&lib),
        ]);
        std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).ok();
        let via = dir.join("via_proc_address");
        cc(&[
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DVIA_PROC_ADDRESS",
            &s(&src.join("program.c")),
            "-ldl",
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
            "-o",
            &s(&exported),
        ]);
        Fixture {
            dir,
            via_proc_address: via,
            exported,
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
    let out = command
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("FAKE_CUDA_LOG", &log)
        .env("ALIGNMALLOC_LOG", "error")
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&report_path)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap());
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
        report,
        driver_log: std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect(),
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

#[test]
fn a_program_ended_by_sigterm_still_writes_its_report_and_dies_of_the_signal() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let f = fixture();
    let report = f
        .dir
        .join(format!("report-term-{}.json", std::process::id()));
    let options = WrapOptions {
        report: Some(report.clone()),
        ..WrapOptions::default()
    };
    let program = f.via_proc_address.as_os_str().to_owned();
    let mut child =
        wrap::launch::command(&preload(), &options, &program, &[OsString::from("wait")])
            .env("LD_LIBRARY_PATH", &f.dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "alloc: 0\n");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
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
