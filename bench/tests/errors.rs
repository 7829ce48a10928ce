//! What the `alignmalloc` binary prints when a command fails: one line naming what to fix, with
//! no backtrace even when RUST_BACKTRACE asks for one; `-vv` keeps the trace for bugs.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_alignmalloc"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_user_error_prints_one_line_whatever_rust_backtrace_says() {
    let (ok, stderr) = run(&["walk", "--snap", "/nonexistent/graph.txt"]);
    assert!(!ok, "a missing file fails the command");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("Error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("/nonexistent/graph.txt"), "{stderr}");
    assert!(!stderr.contains("Stack backtrace"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
}

#[test]
fn very_verbose_keeps_the_trace() {
    let (ok, stderr) = run(&["-vv", "walk", "--snap", "/nonexistent/graph.txt"]);
    assert!(!ok);
    assert!(stderr.contains("Stack backtrace"), "{stderr}");
}

/// The selftest's refusals are provoked on purpose and judged by its checks: piped, its stderr
/// has no warning about them and no colour codes; with `-v` the warnings are there.
#[test]
fn a_passing_selftest_is_quiet_and_uncoloured_when_piped() {
    let args = [
        "selftest",
        "--backend",
        "sim",
        "--threads",
        "4096",
        "--round-threads",
        "1024",
        "--rounds",
        "1",
        "--arena-mib",
        "512",
    ];
    let (ok, stderr) = run(&args);
    assert!(ok, "{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes off a terminal: {stderr:?}"
    );
    let verbose: Vec<&str> = std::iter::once("-v").chain(args).collect();
    let (ok, stderr) = run(&verbose);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("requests not (fully) served"),
        "-v shows them: {stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// Run `words`; it must fail, soon (before a large graph would be generated), with every one of
/// `wanted` in its message.
fn refused_before_any_work(words: &[&str], wanted: &[&str]) {
    let started = std::time::Instant::now();
    let (ok, stderr) = run(words);
    assert!(!ok, "{words:?} ran");
    for w in wanted {
        assert!(stderr.contains(w), "{words:?}: wanted {w:?} in {stderr}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{words:?} was refused only after the work began"
    );
}

/// `--gpu-memory-gib` is refused before the graph is built where it cannot be honoured: on the
/// simulator (a big graph would take minutes to generate first), and with no positive size.
#[test]
fn gpu_memory_is_refused_before_any_work_where_it_cannot_be_left() {
    refused_before_any_work(
        &[
            "walk",
            "--rmat",
            "26",
            "--backend",
            "sim",
            "--gpu-memory-gib",
            "4",
        ],
        &["--gpu-memory-gib 4 needs the GPU", "access --backend sim"],
    );
    refused_before_any_work(
        &["walk", "--rmat", "10", "--gpu-memory-gib", "0"],
        &["positive number of GiB"],
    );
    refused_before_any_work(
        &[
            "walk",
            "--rmat",
            "10",
            "--batches",
            "4",
            "--gpu-memory-gib",
            "1",
        ],
        &["cannot be used with"],
    );
}

/// `--placement` and `--hot-object-bytes` likewise: the simulator does not model advice, a
/// threshold needs the tiered placement, and dynamic walks keep the default.
#[test]
fn an_arena_placement_is_refused_before_any_work_where_it_cannot_apply() {
    refused_before_any_work(
        &[
            "walk",
            "--rmat",
            "26",
            "--backend",
            "sim",
            "--placement",
            "tiered",
        ],
        &["--placement tiered needs a GPU", "advice"],
    );
    refused_before_any_work(
        &["walk", "--rmat", "10", "--hot-object-bytes", "4096"],
        &["only to --placement tiered"],
    );
    refused_before_any_work(
        &["walk", "--rmat", "10", "--placement", "device"],
        &["host-mapped", "tiered"],
    );
    refused_before_any_work(
        &[
            "walk",
            "--rmat",
            "10",
            "--batches",
            "4",
            "--placement",
            "host-mapped",
        ],
        &["not with --batches"],
    );
}
