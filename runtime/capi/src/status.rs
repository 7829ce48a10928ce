//! Status codes, the thread-local message of the last failure, and the guard every exported
//! function runs its body in.
//!
//! Invariants: every exported function returns one of the `AM_*` codes below; a failure sets
//! this thread's message and logs a `tracing` event; a panic inside a body is caught here and
//! becomes [`AM_ERR_INTERNAL`], so none crosses the C boundary.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use orchestrator::LaneStatus;

/// The outcome of a call: `AM_OK` or one of the `AM_ERR_*` codes.
pub type am_status = i32;

/// Done.
pub const AM_OK: am_status = 0;
/// A pointer argument that must not be null was null.
pub const AM_ERR_NULL_ARGUMENT: am_status = 1;
/// The runtime argument is not a live runtime: it was destroyed, or never created.
pub const AM_ERR_INVALID_RUNTIME: am_status = 2;
/// An argument or option is out of its range; the message names it.
pub const AM_ERR_INVALID_ARGUMENT: am_status = 3;
/// The CUDA backend was asked for and no GPU could be opened.
pub const AM_ERR_NO_GPU: am_status = 4;
/// A CUDA driver, runtime or NVRTC call failed; the message has its error.
pub const AM_ERR_CUDA: am_status = 5;
/// The call needs the other backend (the device mailbox and binding need CUDA).
pub const AM_ERR_WRONG_BACKEND: am_status = 6;
/// An allocation of 0 bytes, or for 0 threads.
pub const AM_ERR_ZERO_SIZE: am_status = 7;
/// An allocation over the per-object limit.
pub const AM_ERR_SIZE_OVER_LIMIT: am_status = 8;
/// The arena has no room; nothing was allocated.
pub const AM_ERR_OUT_OF_MEMORY: am_status = 9;
/// The handle or pointer is no object this runtime handed out.
pub const AM_ERR_INVALID_HANDLE: am_status = 10;
/// The object was freed (or the handle is stale): a second free, or a read, write or capacity
/// query of a freed object.
pub const AM_ERR_DOUBLE_FREE: am_status = 11;
/// The handle or pointer points inside an object, not at its start.
pub const AM_ERR_INTERIOR_POINTER: am_status = 12;
/// An access runs past the end of its object.
pub const AM_ERR_OUT_OF_BOUNDS: am_status = 13;
/// Fault counters were read but are off for this runtime: not asked for, or another tool (a
/// profiler) holds CUPTI (`am_last_error` says which).
pub const AM_ERR_FAULT_COUNTERS_OFF: am_status = 14;
/// Fault counters could not start (CUPTI missing, or taken by a profiler).
pub const AM_ERR_FAULT_COUNTERS: am_status = 15;
/// The runtime's configuration was refused (arena too small, GPU lacking a feature, ...).
pub const AM_ERR_CONFIG: am_status = 16;
/// `am_bind` found no translation unit to bind: nothing in the program includes
/// `<alignmalloc/alignmalloc.cuh>` compiled by nvcc.
pub const AM_ERR_NOTHING_TO_BIND: am_status = 17;
/// A bug in alignmalloc (a caught panic, a broken invariant); the message says what.
pub const AM_ERR_INTERNAL: am_status = 18;
/// The object came from a device cache: only device code frees it (`am::free` in a kernel).
pub const AM_ERR_CACHED_OBJECT: am_status = 19;

/// Every code's name, in code order.
pub(crate) const NAMES: [&CStr; 20] = [
    c"AM_OK",
    c"AM_ERR_NULL_ARGUMENT",
    c"AM_ERR_INVALID_RUNTIME",
    c"AM_ERR_INVALID_ARGUMENT",
    c"AM_ERR_NO_GPU",
    c"AM_ERR_CUDA",
    c"AM_ERR_WRONG_BACKEND",
    c"AM_ERR_ZERO_SIZE",
    c"AM_ERR_SIZE_OVER_LIMIT",
    c"AM_ERR_OUT_OF_MEMORY",
    c"AM_ERR_INVALID_HANDLE",
    c"AM_ERR_DOUBLE_FREE",
    c"AM_ERR_INTERIOR_POINTER",
    c"AM_ERR_OUT_OF_BOUNDS",
    c"AM_ERR_FAULT_COUNTERS_OFF",
    c"AM_ERR_FAULT_COUNTERS",
    c"AM_ERR_CONFIG",
    c"AM_ERR_NOTHING_TO_BIND",
    c"AM_ERR_INTERNAL",
    c"AM_ERR_CACHED_OBJECT",
];

/// The name of a status code, if it is one.
pub(crate) fn name_of(status: am_status) -> Option<&'static CStr> {
    usize::try_from(status)
        .ok()
        .and_then(|i| NAMES.get(i).copied())
}

/// A failed call: its code and what to tell the caller.
#[derive(Debug)]
pub(crate) struct Failure {
    pub status: am_status,
    pub message: String,
}

impl Failure {
    pub fn new(status: am_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// A null pointer argument, by its parameter name.
    pub fn null(parameter: &str) -> Self {
        Self::new(
            AM_ERR_NULL_ARGUMENT,
            format!("`{parameter}` is null; pass a valid pointer"),
        )
    }
}

/// The code of a free's or access's per-object outcome.
pub(crate) fn lane_status_code(status: LaneStatus) -> am_status {
    match status {
        LaneStatus::Ok => AM_OK,
        LaneStatus::InvalidHandle => AM_ERR_INVALID_HANDLE,
        LaneStatus::DoubleFree => AM_ERR_DOUBLE_FREE,
        LaneStatus::InteriorPointer => AM_ERR_INTERIOR_POINTER,
        LaneStatus::CachedObject => AM_ERR_CACHED_OBJECT,
    }
}

impl From<runtime::Error> for Failure {
    fn from(e: runtime::Error) -> Self {
        Self::new(status_of(&e), e.to_string())
    }
}

/// The code of a runtime error; a device of a set that did not open answers its cause's code.
fn status_of(e: &runtime::Error) -> am_status {
    use runtime::Error as E;
    match e {
        E::NoGpu(_) => AM_ERR_NO_GPU,
        E::Gpu(_) | E::Compile(_) | E::Driver(_) | E::CompletionLost => AM_ERR_CUDA,
        E::Unanswered { .. } => AM_ERR_INTERNAL,
        E::Resolver(_) | E::Mailbox(_) | E::Config(_) => AM_ERR_CONFIG,
        E::WrongBackend { .. } => AM_ERR_WRONG_BACKEND,
        E::ZeroSize => AM_ERR_ZERO_SIZE,
        E::SizeOverLimit { .. } => AM_ERR_SIZE_OVER_LIMIT,
        E::OutOfMemory { .. } => AM_ERR_OUT_OF_MEMORY,
        E::BadHandle { status, .. } => lane_status_code(*status),
        E::OutOfBounds { .. } => AM_ERR_OUT_OF_BOUNDS,
        E::FaultCounters(_) => AM_ERR_FAULT_COUNTERS,
        E::FaultCountersOff | E::FaultCountersTaken { .. } => AM_ERR_FAULT_COUNTERS_OFF,
        // A set of devices is a Rust type (C programs make a runtime per device); its
        // errors map to the nearest codes.
        E::WrongDevice { .. } | E::NotInAnyArena { .. } => AM_ERR_INVALID_HANDLE,
        E::DeviceClosed { .. } => AM_ERR_INVALID_RUNTIME,
        E::NoSuchDevice { .. } => AM_ERR_INVALID_ARGUMENT,
        E::DeviceOpen { cause, .. } => status_of(cause),
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// This thread's last failure message, as a C string valid until this thread's next failure.
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.with(|m| m.borrow().as_ptr())
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|m| *m.borrow_mut() = text);
}

/// Run an exported function's body: its failure becomes a code, this thread's message and a
/// warning event; a panic becomes [`AM_ERR_INTERNAL`].
pub(crate) fn guard(call: &'static str, body: impl FnOnce() -> Result<(), Failure>) -> am_status {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return AM_OK,
        Ok(Err(failure)) => failure,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Failure::new(
                AM_ERR_INTERNAL,
                format!("internal error in {call} (please report it): {what}"),
            )
        }
    };
    let message = format!("{call}: {}", failure.message);
    tracing::warn!(
        call,
        status = name_of(failure.status).map_or("?", |n| n.to_str().unwrap_or("?")),
        "{}",
        failure.message
    );
    set_last_error(&message);
    failure.status
}
