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

    /// This warp's lanes among `threads` threads, numbered warp by warp: its first thread and the
    /// mask of lanes that exist (the last warp may be partial).
    pub fn lanes_of(&self, threads: u64) -> (u64, u32) {
        warp_lanes(self.id, threads)
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

    /// `am::post_free` from the lanes in `mask`: frees the host judges are posted without
    /// waiting (their lanes show `Ok`; [`crate::Runtime::settle`] waits for them).
    pub fn post_free(&self, mask: u32, handles: &[Handle; WARP_LANES]) -> FreeOutcome {
        self.sim.device.post_free(self.id, mask, handles)
    }

    /// `am::free(void*)` from the lanes in `mask`: lane `l` gives back the object whose first
    /// byte is at `addresses[l]`.
    pub fn free_pointers(&self, mask: u32, addresses: &[u64; WARP_LANES]) -> FreeOutcome {
        self.sim.device.free_pointers(self.id, mask, addresses)
    }

    /// `am::post_free(void*)` from the lanes in `mask`: [`CpuWarp::free_pointers`] without
    /// waiting for the host, as [`CpuWarp::post_free`] is to [`CpuWarp::free`].
    pub fn post_free_pointers(&self, mask: u32, addresses: &[u64; WARP_LANES]) -> FreeOutcome {
        self.sim.device.post_free_pointers(self.id, mask, addresses)
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

/// Warp `warp`'s first thread among `threads` threads, and the mask of its lanes that exist.
fn warp_lanes(warp: u32, threads: u64) -> (u64, u32) {
    let first = u64::from(warp) * WARP_LANES as u64;
    let n = threads.saturating_sub(first).min(WARP_LANES as u64);
    let mask = if n == WARP_LANES as u64 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    };
    (first, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_warp_has_only_the_lanes_that_exist() {
        assert_eq!(warp_lanes(0, 100), (0, u32::MAX));
        assert_eq!(warp_lanes(3, 100), (96, 0b1111));
        assert_eq!(warp_lanes(1, 64), (32, u32::MAX));
        assert_eq!(warp_lanes(4, 100), (128, 0), "past the end: no lanes");
    }
}
