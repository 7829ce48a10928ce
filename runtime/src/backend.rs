//! The two backends and the memory behind each.
//!
//! - `cuda`: the arena is managed memory (`cuMemAllocManaged`), the mailbox is pinned host memory
//!   mapped for the device, kernels are CUDA C++ compiled by NVRTC.
//! - `sim`: the arena is host memory ([`HostArena`]) and warps are CPU threads ([`CpuDevice`])
//!   posting to the same mailbox through the same records, so everything above the memory runs
//!   the same code as on a GPU.
//!
//! Invariant: every byte the host copies in or out lies inside the arena; callers check object
//! bounds first and [`Backend::copy_in`] / [`Backend::copy_out`] check the arena again.

use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaStream};
use orchestrator::cpu::{CpuDevice, HostArena};

use crate::cuda::DeviceInfo;
use crate::gpu::{ManagedArena, PinnedMailbox};
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

/// What the CUDA backend holds.
pub(crate) struct CudaBackend {
    pub context: Arc<CudaContext>,
    pub info: DeviceInfo,
    pub stream: Arc<CudaStream>,
    pub pinned: PinnedMailbox,
    pub arena: ManagedArena,
    pub arch: &'static str,
    pub compiler: OnceLock<Compiler>,
}

/// What the sim backend holds.
pub(crate) struct SimBackend {
    pub arena: HostArena,
    pub device: CpuDevice,
}

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

    /// The arena's first byte and its length.
    pub fn arena(&self) -> (u64, u64) {
        match self {
            Backend::Cuda(c) => (
                c.arena.base(),
                c.arena.blocks() as u64 * ortree::VABLOCK_BYTES,
            ),
            Backend::Sim(s) => (
                s.arena.base(),
                s.arena.blocks() as u64 * ortree::VABLOCK_BYTES,
            ),
        }
    }

    fn assert_in_arena(&self, address: u64, len: usize) {
        let (base, bytes) = self.arena();
        assert!(
            address >= base && (address - base).checked_add(len as u64) <= Some(bytes),
            "{len} bytes at {address:#x} are outside the arena"
        );
    }

    /// Copy `bytes` to arena address `address`.
    pub fn copy_in(&self, address: u64, bytes: &[u8]) {
        self.assert_in_arena(address, bytes.len());
        match self {
            // SAFETY: the range lies in the managed arena (asserted above), which the host may
            // access (the builder refused devices without concurrent managed access) and which
            // outlives `self`; `bytes` is a distinct host buffer.
            Backend::Cuda(_) => unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), address as *mut u8, bytes.len());
            },
            Backend::Sim(s) => s.arena.write_bytes(address, bytes),
        }
    }

    /// Copy `out.len()` bytes from arena address `address`.
    pub fn copy_out(&self, address: u64, out: &mut [u8]) {
        self.assert_in_arena(address, out.len());
        match self {
            // SAFETY: as in `copy_in`, reading instead of writing.
            Backend::Cuda(_) => unsafe {
                std::ptr::copy_nonoverlapping(address as *const u8, out.as_mut_ptr(), out.len());
            },
            Backend::Sim(s) => s.arena.read_bytes(address, out),
        }
    }
}
