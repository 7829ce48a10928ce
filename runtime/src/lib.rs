//! runtime: the runtime behind the `alignmalloc` crate, which is the Rust API programs use (it
//! re-exports what they need from here).
//!
//! [`Runtime::builder`] picks the backend at run time (`cuda` when the driver loads and the device
//! exists, `sim` otherwise or on request, and logs why), reserves the arena, registers the
//! mailbox and runs the service thread for the runtime's lifetime. The arena grows by further
//! reservations up to [`RuntimeBuilder::max_arena_bytes`] (a grower thread does it, so the service
//! thread never calls CUDA). Then:
//! - host code allocates through the same resolver the warps use ([`Runtime::alloc`],
//!   [`Runtime::alloc_arranged`], [`Runtime::free`]) and fills or reads objects through their
//!   layout ([`Runtime::write`], [`Runtime::read`]);
//! - on `cuda`, kernels are compiled with NVRTC with the alignmalloc headers available
//!   ([`Runtime::compile`]) and launched on a non-blocking stream ([`Runtime::launch`]), waited for
//!   by blocking or by `.await` ([`Launch`]);
//! - on `sim`, CPU threads play warps through the same mailbox ([`Runtime::run_warps`]).
//!
//! With the `cupti` feature, [`RuntimeBuilder::fault_counters`] counts unified-memory migrations
//! and page faults, read with `Runtime::take_faults` and attributed to chunks.
//!
//! Lower layers, public only with the `internals` feature (the project's CLI, C ABI and tests reach
//! them through it): `cuda` (probing a GPU without panicking), `nvrtc` (the compile path), `gpu`
//! (the pinned mailbox and the managed arena), `sim` (CPU warps).

mod arena;
mod backend;
mod builder;
mod devices;
mod error;
#[cfg(feature = "cupti")]
pub mod faults;
mod launch;
mod runtime;
pub mod settings;

// The building blocks (each documented in its file): public only with the `internals` feature;
// without it private, and what the public API needs of them is re-exported below.
#[cfg(feature = "internals")]
pub mod cuda;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
mod cuda;
#[cfg(feature = "internals")]
pub mod gpu;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
mod gpu;
#[cfg(feature = "internals")]
pub mod nvrtc;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
mod nvrtc;
#[cfg(feature = "internals")]
pub mod sim;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
mod sim;

pub use backend::{BackendChoice, BackendKind};
pub use builder::RuntimeBuilder;
pub use cuda::DeviceInfo;
/// The CUDA driver bindings the launch API speaks (kernel arguments, launch configurations).
pub use cudarc;
#[cfg(feature = "cupti")]
pub use devices::DeviceFaults;
pub use devices::{DeviceList, Devices};
pub use error::{Error, HandleUse, Result};
pub use gpu::MailboxArg;
pub use launch::Launch;
pub use orchestrator::BadFree;
pub use orchestrator::Tier;
pub use runtime::{ArrangedAlloc, Runtime, SETTLE_TIMEOUT};
pub use settings::{
    DEFAULT_ARENA_FRACTION, DEFAULT_PORTS, DEFAULT_SIM_ARENA_BYTES, DeviceSettings, Placement,
    Settings,
};
pub use sim::CpuWarp;
pub use translator::Handle;
