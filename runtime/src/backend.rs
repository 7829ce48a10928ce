//! The two backends and the memory behind each.
//!
//! - `cuda`: the arena is managed memory (`cuMemAllocManaged`), the mailbox is pinned host memory
//!   mapped for the device, kernels are CUDA C++ compiled by NVRTC.
//! - `sim`: the arena is host memory and warps are CPU threads ([`CpuDevice`]) posting to the
//!   same mailbox through the same records, so everything above the memory runs the same code as
//!   on a GPU.
//!
//! The arena's memory itself, for both, is [`crate::arena::ArenaMemory`].

use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaStream};
use orchestrator::cpu::CpuDevice;

use crate::cuda::DeviceInfo;
use crate::gpu::PinnedMailbox;
use crate::nvrtc::Compiler;

/// Which backend a runtime runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// A CUDA GPU.
    Cuda,
    /// The CPU simulation.
    Sim,
}

/// Which backend the builder should pick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// `cuda` when the driver loads and the device exists, else `sim`.
    #[default]
    Auto,
    /// `cuda`, or an error saying why not.
    Cuda,
    /// `sim`, even with a GPU present.
    Sim,
}

impl FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "cuda" => Ok(Self::Cuda),
            "sim" => Ok(Self::Sim),
            other => Err(format!(
                "unknown backend {other:?}: expected auto, cuda or sim"
            )),
        }
    }
}

/// What the CUDA backend holds (the arena's memory is in [`crate::arena::ArenaMemory`]).
pub(crate) struct CudaBackend {
    pub context: Arc<CudaContext>,
    pub info: DeviceInfo,
    pub stream: Arc<CudaStream>,
    pub pinned: PinnedMailbox,
    /// The device caches' memory (after `pinned`: dropped once kernels ended).
    pub caches: Option<crate::gpu::PinnedCaches>,
    pub compiler: OnceLock<Compiler>,
    /// Compiled into every kernel the runtime compiles.
    pub device_settings: crate::settings::DeviceSettings,
    #[cfg(feature = "cupti")]
    pub faults: crate::faults::Counting,
}

/// What the sim backend holds: the warps' side of the mailbox, and the launches of CPU warps
/// under way.
pub(crate) struct SimBackend {
    pub device: CpuDevice,
    pub launches: Launches,
}

/// Launches of CPU warps under way ([`crate::Runtime::run_warps`]), so that what must not
/// overlap them (draining the caches) runs alone, as a synchronize waits for kernels: it waits
/// for the launches under way, and launches wait for it.
#[derive(Default)]
pub(crate) struct Launches {
    state: parking_lot::Mutex<LaunchState>,
    changed: parking_lot::Condvar,
}

#[derive(Default)]
struct LaunchState {
    running: usize,
    exclusive: bool,
}

/// One launch under way; it ends when this is dropped.
pub(crate) struct Launch<'a>(&'a Launches);

impl Launches {
    /// A launch begins (after any exclusive work under way).
    pub fn begin(&self) -> Launch<'_> {
        let mut state = self.state.lock();
        while state.exclusive {
            self.changed.wait(&mut state);
        }
        state.running += 1;
        Launch(self)
    }

    /// Run `f` with no launch under way and none beginning.
    pub fn exclusive<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut state = self.state.lock();
        while state.exclusive || state.running > 0 {
            self.changed.wait(&mut state);
        }
        state.exclusive = true;
        drop(state);
        let result = f();
        self.state.lock().exclusive = false;
        self.changed.notify_all();
        result
    }
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.running -= 1;
        if state.running == 0 {
            self.0.changed.notify_all();
        }
    }
}

// One per runtime: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Cuda(CudaBackend),
    Sim(SimBackend),
}

impl Backend {
    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Cuda(_) => BackendKind::Cuda,
            Backend::Sim(_) => BackendKind::Sim,
        }
    }
}
