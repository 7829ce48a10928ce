//! libalignmalloc_preload.so: loaded into an unmodified CUDA program (`LD_PRELOAD`, which
//! `alignmalloc wrap` sets), it serves the program's managed allocations from an alignmalloc
//! arena and reports the unified-memory traffic of each allocation at exit.
//!
//! How it reaches the program's driver calls: programs built with nvcc's default static CUDA
//! runtime, and `libcudart.so`, `dlopen` libcuda and ask `dlsym` for `cuGetProcAddress`, then
//! ask that for every entry point. This library defines `dlsym` (first in the program's lookup
//! order), answers the driver's `cuGetProcAddress`/`_v2` with its own, and those answer the
//! wrapped entry points with wrappers (the `hooks` module); a program linked to libcuda itself calls the
//! exported wrappers directly. Which version of an entry point the driver answered is told by
//! comparing the pointer with libcuda's definitions of each versioned name (`_v2`, `_ptsz`), so
//! each wrapper calls the driver's function of its own signature.
//!
//! Invariants: `dlsym` answers exactly what glibc's does, except that the driver's definition
//! of a wrapped name becomes its wrapper (not for a lookup nested in our own, which gets glibc's
//! answer); nothing unwinds out of an exported function, and none waits for a lock it may hold
//! itself; a malformed `ALIGNMALLOC_WRAP_*` setting stops the program at load with a message
//! naming it.

mod driver;
mod hooks;
mod pluggable;
mod state;
mod stream_frees;
mod tiers;

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};

thread_local! {
    /// Whether this thread is inside our `dlsym` now.
    static IN_DLSYM: Cell<bool> = const { Cell::new(false) };
}

/// `dlsym`, as glibc's, with the driver's wrapped entry points answered by their wrappers. A
/// lookup made while this thread is inside it (libcuda's constructor, run by the `dlopen` that
/// finding the driver's definitions may need) gets glibc's answer unchanged.
///
/// # Safety
/// glibc's contract for `dlsym`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = driver::real_dlsym() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's arguments, passed on to glibc's dlsym.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    // SAFETY: dlsym's contract: a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) };
    let bytes = name.to_bytes();
    if !bytes.starts_with(b"cu") {
        return found;
    }
    // A thread that cannot tell (it is ending) counts as inside: glibc's answer.
    if IN_DLSYM
        .try_with(|inside| inside.replace(true))
        .unwrap_or(true)
    {
        return found;
    }
    let answer =
        std::panic::catch_unwind(|| hooks::substitute(Some(name), bytes, found)).unwrap_or(found);
    IN_DLSYM.with(|inside| inside.set(false));
    answer
}

/// At load: read the settings (a malformed one ends the program here), log warnings to stderr
/// (`ALIGNMALLOC_LOG` filters), report on SIGINT and SIGTERM.
extern "C" fn at_load() {
    let _ = std::panic::catch_unwind(|| {
        let filter = std::env::var("ALIGNMALLOC_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            // Colour only on a terminal: logs piped to a file stay plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .try_init();
        state::options();
        state::install_signal_report();
    });
}

/// At unload: the report, if no exit handler wrote it (a program that made no managed
/// allocation registered none).
extern "C" fn at_unload() {
    let _ = std::panic::catch_unwind(|| state::write_report(false));
}

#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

#[used]
#[unsafe(link_section = ".fini_array")]
static AT_UNLOAD: extern "C" fn() = at_unload;
