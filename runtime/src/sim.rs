//! CPU warps of the sim backend: each [`CpuWarp`] posts to the runtime's mailbox through the same
//! records and port protocol as `am::malloc` / `am::free` on a GPU, and reads and writes the host
//! arena through handles as `am::ptr` does.

use std::cell::RefCell;
use std::sync::Arc;

use orchestrator::Status;
use orchestrator::cpu::{FreeOutcome, HostArena};
use translator::{Handle, WARP_LANES};

use crate::arena::ArenaMemory;
use crate::backend::SimBackend;

/// One warp, played by a CPU thread for the duration of a [`crate::Runtime::run_warps`] call.
pub struct CpuWarp<'a> {
    id: u32,
    sim: &'a SimBackend,
    memory: &'a ArenaMemory,
    /// The arena's segments as last seen; looked up again when the arena has grown since.
    segments: RefCell<Vec<Arc<HostArena>>>,
}

impl<'a> CpuWarp<'a> {
    pub(crate) fn new(id: u32, sim: &'a SimBackend, memory: &'a ArenaMemory) -> Self {
        Self {
            id,
            sim,
            memory,
            segments: RefCell::new(memory.host_segments()),
        }
    }

    /// The warp id (`0..warps`).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// `am::malloc` from the lanes in `mask`: lane `l` asks `sizes[l]` bytes (0: a null handle).
    pub fn malloc(
        &self,
        mask: u32,
        sizes: &[u64; WARP_LANES],
    ) -> Result<[Handle; WARP_LANES], Status> {
        self.sim.device.malloc(self.id, mask, sizes, false)
    }

    /// `am::malloc_contiguous`: the same in thread-contiguous memory.
    pub fn malloc_contiguous(
        &self,
        mask: u32,
        sizes: &[u64; WARP_LANES],
    ) -> Result<[Handle; WARP_LANES], Status> {
        self.sim.device.malloc(self.id, mask, sizes, true)
    }

    /// `am::free` from the lanes in `mask`.
    pub fn free(&self, mask: u32, handles: &[Handle; WARP_LANES]) -> FreeOutcome {
        self.sim.device.free(self.id, mask, handles)
    }

    /// Run `f` on the segment holding the word at `address`.
    fn with_segment<R>(&self, address: u64, f: impl Fn(&HostArena) -> R) -> R {
        if let Some(arena) = self
            .segments
            .borrow()
            .iter()
            .find(|a| a.contains(address, 8))
        {
            return f(arena);
        }
        *self.segments.borrow_mut() = self.memory.host_segments();
        let segments = self.segments.borrow();
        let arena = segments
            .iter()
            .find(|a| a.contains(address, 8))
            .unwrap_or_else(|| panic!("address {address:#x} is outside the arena"));
        f(arena)
    }

    /// Write the 8-byte word at byte `offset` (a multiple of 8) of `handle`'s object.
    pub fn store(&self, handle: Handle, offset: u64, value: u64) {
        let address = handle.translate(offset);
        self.with_segment(address, |a| a.store(address, value));
    }

    /// Read the 8-byte word at byte `offset` of `handle`'s object.
    pub fn load(&self, handle: Handle, offset: u64) -> u64 {
        let address = handle.translate(offset);
        self.with_segment(address, |a| a.load(address))
    }
}
