//! alignmalloc: a dynamic memory allocator for CUDA Unified Memory.
//!
//! Kernels allocate and free with `am::malloc` / `am::free` (the device header
//! `<alignmalloc/alignmalloc.cuh>`); the warp's lanes fold their requests into one, which a host
//! service thread resolves in a managed arena; objects up to 32 KiB come from caches on the
//! device. Host code allocates from the same arena through [`Runtime`]. On a machine without a
//! GPU the same calls run on the sim backend, where CPU threads play warps through the same
//! mailbox ([`Runtime::run_warps`]).
//!
//! This crate is what Rust programs use: every type a program needs is here, so it never names
//! the crates behind it.
//!
//! Several GPUs: [`Devices`] opens one runtime per device (its own arena, mailbox and service
//! thread); a kernel allocates from the runtime of the GPU it runs on.
//!
//! ```no_run
//! use alignmalloc::{Buffer, Runtime};
//!
//! # fn main() -> alignmalloc::Result<()> {
//! let rt = Runtime::builder().build()?; // the GPU if there is one, else the sim backend
//! let squares = Buffer::<u32>::new(&rt, 1024)?; // freed when dropped
//! squares.write(0, &(0..1024u32).map(|i| i * i).collect::<Vec<_>>())?;
//! assert_eq!(squares.to_vec()?[7], 49);
//! # Ok(())
//! # }
//! ```
//!
//! # Launching kernels
//!
//! [`Runtime::compile`] compiles CUDA C++ with NVRTC (the alignmalloc headers on its include
//! path) and binds the module's default mailbox, so kernels call `am::malloc(size)` without
//! naming one. [`Runtime::launch`] runs a kernel on the runtime's stream with the mailbox
//! (`am::DeviceMailbox mb`) as its first parameter; the closure pushes the others:
//!
//! ```no_run
//! # fn main() -> alignmalloc::Result<()> {
//! # let rt = alignmalloc::Runtime::builder().build()?;
//! # let source = "";
//! use alignmalloc::cudarc::driver::{LaunchConfig, PushKernelArg};
//!
//! let module = rt.compile("k.cu", source)?;
//! let kernel = module.load_function("k")?;
//! let n = 4096u32;
//! // SAFETY: k(am::DeviceMailbox mb, unsigned n): one argument after the mailbox.
//! let launch = unsafe { rt.launch(&kernel, LaunchConfig::for_num_elems(n), |a| { a.arg(&n); }) }?;
//! launch.wait()?;
//! # Ok(())
//! # }
//! ```
//!
//! The contract of `launch`, which is `unsafe` for it: the arguments pushed must match the
//! kernel's parameters after the mailbox in number, order and type, and live until the launch
//! has finished ([`Launch::wait`] or [`Launch::finished`]). A [`Handle`] is a kernel argument as
//! it is (an `am::u64` parameter, or `am::ptr<T>` built from one in the kernel). Kernels that
//! wait on the host must run on the runtime's stream (never on the legacy default stream), which
//! `launch` does.
//!
//! # Errors
//!
//! Every refusal is an [`Error`]: a typed value naming what to fix. A refused allocation or free
//! changes nothing in the allocator. Device code gets a [`Status`] per request and a
//! [`LaneStatus`] per lane.

pub use orchestrator::caches::CacheStatsSnapshot;
pub use orchestrator::stats::StatsSnapshot;
pub use orchestrator::{BadFree, LaneStatus, ResolverCounters, ServiceConfig, Status};
#[cfg(feature = "cupti")]
pub use runtime::DeviceFaults;
/// Unified-memory fault counts from CUPTI (feature `cupti`).
#[cfg(feature = "cupti")]
pub use runtime::faults::{FaultCounting, FaultCounts, FaultReport};
/// Every setting, its builder call, `ALIGNMALLOC_*` variable and default (docs/settings.md).
pub use runtime::settings;
pub use runtime::{
    ArrangedAlloc, BackendChoice, BackendKind, CpuWarp, DEFAULT_ARENA_FRACTION, DEFAULT_PORTS,
    DEFAULT_SIM_ARENA_BYTES, DeviceInfo, DeviceList, DeviceSettings, Devices, Error, Launch,
    MailboxArg, Placement, Result, Runtime, RuntimeBuilder, SETTLE_TIMEOUT, Settings, Tier, cudarc,
};
pub use translator::{Handle, HandleKind, SlotOrder};

mod buffer;
pub use buffer::Buffer;

/// The runtime's building blocks and the crates beneath it (feature `internals`), for the
/// project's own CLI and benchmarks where they measure a piece alone: the resolver and the
/// mailbox (`orchestrator`), the OrTree (`ortree`), the layout (`translator`), the embedded CUDA
/// sources (`device`), probing a GPU (`cuda`), the CUDA backend's arena and mailbox (`gpu`),
/// NVRTC (`nvrtc`) and CPU warps (`sim`). No stability promise: programs need none of it.
#[cfg(feature = "internals")]
pub mod internals {
    pub use device;
    pub use orchestrator;
    pub use ortree;
    pub use runtime::{cuda, gpu, nvrtc, sim};
    pub use translator;
}
