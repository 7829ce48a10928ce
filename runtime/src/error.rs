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
    #[error("the CUDA backend was asked for but no GPU could be opened: {0}")]
    NoGpu(#[from] ProbeError),
    /// Setting up the arena or the mailbox on the GPU failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// NVRTC could not be found or the source did not compile.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// A CUDA driver call failed (loading a module, launching, waiting).
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
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
    /// A handle that is not a live object was freed or accessed.
    #[error("handle {handle:#x} is not a live object: {status:?}")]
    BadHandle {
        /// The handle.
        handle: u64,
        /// What the resolver found (double free, invalid, interior pointer).
        status: LaneStatus,
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
