//! The runtime's errors: one enum, each variant saying what went wrong and, where it can, what
//! to do about it.

use orchestrator::{LaneStatus, MailboxError, ResolverError};
use thiserror::Error;

use crate::backend::BackendKind;
use crate::cuda::ProbeError;
use crate::gpu::GpuError;
use crate::nvrtc::CompileError;

/// Why a runtime call failed.
#[derive(Debug, Error)]
pub enum Error {
    /// The CUDA backend was asked for and no GPU could be opened.
    // The message holds the cause, so it is no `source` too: a chain printed whole (`{:#}`)
    // would say it twice.
    #[error("the CUDA backend was asked for but no GPU could be opened: {0}")]
    NoGpu(ProbeError),
    /// Setting up the arena or the mailbox on the GPU failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// NVRTC could not be found or the source did not compile.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// A CUDA driver call failed (loading a module, launching, waiting).
    #[error("CUDA driver error: {0}")]
    Driver(cudarc::driver::DriverError),
    /// The resolver refused the configuration.
    #[error(transparent)]
    Resolver(#[from] ResolverError),
    /// The mailbox could not be made.
    #[error(transparent)]
    Mailbox(#[from] MailboxError),
    /// The builder's settings are inconsistent.
    #[error("bad runtime configuration: {0}")]
    Config(String),
    /// The call needs another backend than the one running.
    #[error("{what} needs the {needs:?} backend; this runtime runs the {running:?} backend")]
    WrongBackend {
        /// The call.
        what: &'static str,
        /// The backend it needs.
        needs: BackendKind,
        /// The backend running.
        running: BackendKind,
    },
    /// A host allocation asked for 0 bytes or 0 threads.
    #[error("an allocation of 0 bytes (or for 0 threads) was asked for")]
    ZeroSize,
    /// A host allocation asked for more than one object may hold.
    #[error("{bytes} bytes is over the per-object limit of {limit} bytes")]
    SizeOverLimit {
        /// Bytes asked for.
        bytes: u64,
        /// The per-object limit.
        limit: u64,
    },
    /// No room is left in the arena.
    #[error(
        "the arena has no room for {bytes} bytes ({objects} objects); free memory or build the runtime with a larger arena"
    )]
    OutOfMemory {
        /// Bytes asked for in all.
        bytes: u64,
        /// Objects asked for.
        objects: u64,
    },
    /// One device of a set ([`crate::Devices::open`]) could not be opened; `cause` is the typed
    /// error its runtime gave (no GPU, out of memory, a bad setting, ...).
    #[error("device {ordinal}: {cause}")]
    DeviceOpen {
        /// The device's ordinal.
        ordinal: usize,
        /// Why its runtime did not build (in the message, so not a `source` too).
        cause: Box<Error>,
    },
    /// A handle that is not a live object was freed or accessed.
    #[error("{during} handle {handle:#x}: {} ({status:?})", why_not_live(*status, *during))]
    BadHandle {
        /// The handle.
        handle: u64,
        /// What the resolver found (double free, invalid, interior pointer).
        status: LaneStatus,
        /// What was done with it.
        during: HandleUse,
    },
    /// An access went past the end of its object.
    #[error("{len} bytes at offset {offset} run past the {capacity} bytes of handle {handle:#x}")]
    OutOfBounds {
        /// The handle.
        handle: u64,
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Bytes the object may use.
        capacity: u64,
    },
    /// Fault counters were asked for and could not start.
    #[cfg(feature = "cupti")]
    #[error(transparent)]
    FaultCounters(#[from] crate::faults::FaultCounterError),
    /// Fault counters were read but are not on for this runtime.
    #[error(
        "fault counters are off: build the runtime with .fault_counters(true) (feature `cupti`)"
    )]
    FaultCountersOff,
    /// Fault counters were asked for, but another tool (a profiler) holds CUPTI: the runtime runs
    /// without them.
    #[error("fault counters are off: {reason}")]
    FaultCountersTaken {
        /// What CUPTI answered.
        reason: String,
    },
    /// Requests posted to the mailbox stayed unanswered while the runtime waited for them.
    #[error(
        "{pending} requests posted to the mailbox were still unanswered after {seconds} s (ALIGNMALLOC_SETTLE_TIMEOUT_MS): the service thread is stuck or stopped"
    )]
    Unanswered {
        /// Requests still pending.
        pending: usize,
        /// How long the runtime waited.
        seconds: f64,
    },
    /// A free asked of one device for an object of another device's arena (nothing changed).
    #[error(
        "handle {handle:#x} belongs to device {owner}'s arena, not device {asked}'s: free it there (Devices::free finds the owner)"
    )]
    WrongDevice {
        /// The handle.
        handle: u64,
        /// The device (index in the set) the free was asked of.
        asked: usize,
        /// The device whose arena holds the object.
        owner: usize,
    },
    /// A handle whose address is in no open device's arena.
    #[error("handle {handle:#x} is in no open device's arena")]
    NotInAnyArena {
        /// The handle.
        handle: u64,
    },
    /// A device of a set that was closed.
    #[error("device {index} of the set (ordinal {ordinal}) was closed")]
    DeviceClosed {
        /// Its index in the set.
        index: usize,
        /// Its CUDA ordinal.
        ordinal: usize,
    },
    /// An index past the set's devices.
    #[error("there is no device {index}: the set has {devices}")]
    NoSuchDevice {
        /// The index asked for.
        index: usize,
        /// Devices in the set.
        devices: usize,
    },
    /// The thread waiting for a launch ended before reporting (a bug).
    #[error("the completion of a launch was lost")]
    CompletionLost,
}

/// The runtime's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl From<ProbeError> for Error {
    fn from(e: ProbeError) -> Self {
        Error::NoGpu(e)
    }
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Driver(e)
    }
}

/// What a call did with a handle that turned out not to be a live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandleUse {
    /// A free.
    Free,
    /// A read, a write or a capacity query.
    Access,
}

impl std::fmt::Display for HandleUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HandleUse::Free => "freeing",
            HandleUse::Access => "accessing",
        })
    }
}

/// Why a handle is not a live object, in the words of what was done with it.
fn why_not_live(status: LaneStatus, during: HandleUse) -> &'static str {
    match (status, during) {
        (LaneStatus::DoubleFree, HandleUse::Free) => "its object was already freed",
        (LaneStatus::DoubleFree, HandleUse::Access) => {
            "its object was freed; a freed object may not be read or written"
        }
        (LaneStatus::InteriorPointer, _) => {
            "it points inside an object, not at its start; pass the handle the allocation gave"
        }
        (LaneStatus::CachedObject, _) => {
            "its object came from the device caches, which only device code frees"
        }
        (LaneStatus::InvalidHandle, _) => "no object of this runtime was ever placed there",
        (LaneStatus::Ok, _) => "it is live (a bug: report it)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed with its causes (`{:#}`, as the CLI does), every cause shows once.
    #[test]
    fn a_cause_in_the_message_is_not_repeated_by_the_chain() {
        // (A driver error's text needs the driver itself, so it is not formatted here.)
        let errors = [
            Error::NoGpu(ProbeError::NoDriver),
            Error::NoGpu(ProbeError::NoDevice {
                count: 1,
                ordinal: 3,
            }),
        ];
        for e in errors {
            let mut whole = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                whole.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            let cause = whole.rsplit(": ").next().unwrap().to_string();
            assert_eq!(whole.matches(&cause).count(), 1, "{whole}");
        }
    }
}
