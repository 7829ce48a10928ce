//! runtime: the public Rust API of alignmalloc.
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
//! Lower layers: [`cuda`] (probing a GPU without panicking), [`nvrtc`] (the compile path), [`gpu`]
//! (the pinned mailbox and the managed arena).

mod arena;
mod backend;
mod builder;
pub mod cuda;
mod devices;
mod error;
#[cfg(feature = "cupti")]
pub mod faults;
pub mod gpu;
mod launch;
pub mod nvrtc;
mod runtime;
pub mod settings;
pub mod sim;

pub use backend::{BackendChoice, BackendKind};
pub use builder::RuntimeBuilder;
/// The CUDA driver bindings the launch API speaks (kernel arguments, launch configurations).
pub use cudarc;
#[cfg(feature = "cupti")]
pub use devices::DeviceFaults;
pub use devices::{DeviceList, Devices};
pub use error::{Error, HandleUse, Result};
pub use launch::Launch;
pub use orchestrator::BadFree;
pub use orchestrator::Tier;
pub use runtime::{ArrangedAlloc, Runtime, SETTLE_TIMEOUT};
pub use settings::{
    DEFAULT_ARENA_FRACTION, DEFAULT_PORTS, DEFAULT_SIM_ARENA_BYTES, DeviceSettings, Placement,
    Settings,
};
pub use translator::Handle;
