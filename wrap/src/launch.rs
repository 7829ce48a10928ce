//! Running a program under the preload library: `LD_PRELOAD` and the settings in the
//! environment, SIGINT and SIGTERM sent to the launcher passed on to the program (a terminal's
//! Ctrl-C already reaches both, so it is not passed twice), the report read back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::options::{ALL_ENV, WrapOptions};
use crate::report::Report;

/// The preload library's file name.
pub const PRELOAD_FILE: &str = "libalignmalloc_preload.so";

/// How a wrapped run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The program's exit status.
    pub status: ExitStatus,
    /// The report the preload library wrote, or why there is none.
    pub report: Result<Report, String>,
}

/// A signal to pass on to the child (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // si_code <= 0: sent by a process (kill, sigqueue), so only the launcher got it. A positive
    // code (the terminal's) went to the whole process group, the program included.
    if code <= 0 {
        PENDING.store(signal, Ordering::Release);
    }
}

/// Where the preload library is: `explicit`, else `ALIGNMALLOC_PRELOAD`, else next to the
/// running executable or in `../lib` from it. The error says how to get one.
pub fn find_preload(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => match std::env::var_os("ALIGNMALLOC_PRELOAD") {
            Some(p) => vec![PathBuf::from(p)],
            None => {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let dir = exe.parent().unwrap_or(Path::new("."));
                vec![
                    dir.join(PRELOAD_FILE),
                    dir.join("../lib").join(PRELOAD_FILE),
                ]
            }
        },
    };
    candidates
        .iter()
        .find(|p| p.is_file())
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| {
            format!(
                "no {PRELOAD_FILE} at {}: build it with `cargo build --release -p \
                 alignmalloc-preload` (it lands next to the alignmalloc command), or name it \
                 with --preload or ALIGNMALLOC_PRELOAD",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        })
}

/// The command that runs `program args` with `preload` and exactly `options` in its
/// environment (other preloads kept after it).
pub fn command(
    preload: &Path,
    options: &WrapOptions,
    program: &OsString,
    args: &[OsString],
) -> Command {
    let mut preloads = OsString::from(preload);
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preloads.push(":");
        preloads.push(existing);
    }
    let mut command = Command::new(program);
    command.args(args).env("LD_PRELOAD", preloads);
    for name in ALL_ENV {
        command.env_remove(name);
    }
    command.envs(options.to_env());
    command
}

/// Run `program args` with `preload` and `options` (its `report` is replaced by a file of the
/// launcher's, read back into [`Outcome::report`]).
pub fn run(
    preload: &Path,
    options: &WrapOptions,
    program: &OsString,
    args: &[OsString],
) -> std::io::Result<Outcome> {
    let report_path = std::env::temp_dir().join(format!(
        "alignmalloc-wrap-{}-{}.json",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let options = WrapOptions {
        report: Some(report_path.clone()),
        ..options.clone()
    };
    let mut command = command(preload, &options, program, args);
    let previous = install_forwarding();
    let spawned = command.spawn();
    let status = spawned.and_then(|mut child| {
        loop {
            if let Some(status) = child.try_wait()? {
                break Ok(status);
            }
            let signal = PENDING.swap(0, Ordering::AcqRel);
            if signal != 0 {
                // SAFETY: kill(2) on the child's pid with a valid signal number.
                unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    restore(previous);
    let status = status?;
    let report = std::fs::read_to_string(&report_path)
        .map_err(|_| {
            "the preload library wrote no report: the program may be fully static (no dynamic \
             loader, so no preload), or it ended without running exit handlers (_exit, a crash, \
             SIGKILL)"
                .to_string()
        })
        .and_then(|text| {
            serde_json::from_str::<Report>(&text).map_err(|e| format!("unreadable report: {e}"))
        });
    let _ = std::fs::remove_file(&report_path);
    Ok(Outcome { status, report })
}

type Previous = [(libc::c_int, libc::sigaction); 2];

fn install_forwarding() -> Previous {
    // SAFETY: zeroed sigaction structs are valid values; sigaction(2) with a handler that only
    // stores to an atomic (async-signal-safe), and out-pointers to live structs.
    unsafe {
        let mut previous: Previous = std::mem::zeroed();
        for (slot, signal) in previous.iter_mut().zip([libc::SIGINT, libc::SIGTERM]) {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            slot.0 = signal;
            libc::sigaction(signal, &action, &mut slot.1);
        }
        previous
    }
}

fn restore(previous: Previous) {
    for (signal, action) in previous {
        // SAFETY: puts back the action sigaction(2) returned for this signal.
        unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
    }
}

/// End this process as the program ended: the same exit code, or the same signal.
pub fn exit_like(status: ExitStatus) -> ! {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        // SAFETY: restore the default action, then raise the signal that ended the program,
        // so the launcher's own parent sees the same end.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        std::process::exit(128 + signal);
    }
    std::process::exit(status.code().unwrap_or(1))
}
