//! The device caches of `detail/cache.cuh` (`cache_try_alloc`, `cache_try_free`, what the mailbox
//! client calls) compiled as host C++ and run on a host warp (`shim/simt.h`: a context per lane
//! on the calling thread, the lanes one at a time in lane order between warp-wide instructions),
//! over the words of a [`CpuCaches`] and its [`CacheChannel`]. A test can then drive the GPU's
//! code and the CPU warps' twin with the same steps and compare what each answered and left in
//! memory.
//!
//! Invariant: the record handed to the C++ names only the words of the `CpuCaches` and channel
//! it was made from, which it borrows, so they outlive every call.

use std::sync::atomic::AtomicU32;

use orchestrator::caches::{CacheChannel, CpuCaches, DeviceArray};
use orchestrator::records::DeviceCaches;

unsafe extern "C" {
    fn am_hostcheck_cache_alloc(
        caches: *const DeviceCaches,
        closed: *const u32,
        mask: u32,
        sizes: *const u64,
        arranged: i32,
        handles: *mut u64,
        served: *mut u32,
    );
    fn am_hostcheck_cache_map_blocks(
        caches: *const DeviceCaches,
        first: u64,
        count: u64,
        value: u32,
        as_return: i32,
    );
    fn am_hostcheck_cache_free(
        caches: *const DeviceCaches,
        mask: u32,
        words: *const u64,
        by_handle: i32,
        handled: *mut u32,
        lane_status: *mut u32,
        any_failed: *mut u32,
    );
}

/// What a warp's allocation got from the C++ caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAlloc {
    /// Lanes served from a cache.
    pub served: u32,
    /// Their handles (0 elsewhere).
    pub handles: [u64; 32],
}

/// What a warp's free did in the C++ caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFree {
    /// Lanes judged in the caches (the others ask the host).
    pub handled: u32,
    /// Their `LaneStatus` codes (0 elsewhere).
    pub lanes: [u32; 32],
    /// Lanes told that some lane of their caches' free failed.
    pub any_failed: u32,
}

/// `detail/cache.cuh` over the words of one [`CpuCaches`] and its channel.
pub struct HostCaches<'a> {
    record: DeviceCaches,
    /// The mailbox's closed flag (never set here: the service runs).
    closed: AtomicU32,
    _words: (&'a CpuCaches, &'a CacheChannel),
}

fn address(array: &DeviceArray<'_>) -> u64 {
    match array {
        DeviceArray::U32(words) => words.as_ptr() as u64,
        DeviceArray::U64(words) => words.as_ptr() as u64,
    }
}

fn lanes(mask: u32, per_lane: [u32; 32]) -> u32 {
    (0..32)
        .filter(|&l| mask >> l & 1 == 1 && per_lane[l] != 0)
        .fold(0, |m, l| m | 1 << l)
}

impl<'a> HostCaches<'a> {
    /// The C++ caches over `caches`' words and `channel`'s, which must be the channel `caches`
    /// was made with.
    pub fn new(caches: &'a CpuCaches, channel: &'a CacheChannel) -> Self {
        let arrays = caches.arrays();
        let hash_len = match &arrays[10] {
            DeviceArray::U64(words) => words.len() as u32,
            DeviceArray::U32(_) => unreachable!("the block table is of u64 words"),
        };
        let (region, _) = channel.region();
        let record = DeviceCaches::over(
            channel,
            region as u64,
            hash_len as usize,
            arrays.each_ref().map(address),
        );
        Self {
            record,
            closed: AtomicU32::new(0),
            _words: (caches, channel),
        }
    }

    /// The lanes of `mask` allocate `sizes[lane]` bytes as one warp, through
    /// `cache_try_alloc` (`arranged`: `am::malloc`, else `am::malloc_contiguous`).
    pub fn alloc(&self, mask: u32, sizes: &[u64; 32], arranged: bool) -> HostAlloc {
        let mut handles = [0u64; 32];
        let mut served = [0u32; 32];
        // SAFETY: the record names the words of the CpuCaches and channel `self` borrows, live
        // for the call; the outputs are 32 words each, as the C++ writes them (one per lane).
        unsafe {
            am_hostcheck_cache_alloc(
                &self.record,
                self.closed.as_ptr(),
                mask,
                sizes.as_ptr(),
                i32::from(arranged),
                handles.as_mut_ptr(),
                served.as_mut_ptr(),
            );
        }
        HostAlloc {
            served: lanes(mask, served),
            handles,
        }
    }

    /// Point the `count` blocks from `first` on at `value` in the block table, from one lane:
    /// with `cache_map_blocks` (a slab's return: a relaxed look at each first probe) when
    /// `as_return`, else with `cache_map_block` one block after the other (a slab's start).
    pub fn map_blocks(&self, first: u64, count: u64, value: u32, as_return: bool) {
        // SAFETY: as in `alloc`; the C++ writes only the block table of the borrowed words.
        unsafe {
            am_hostcheck_cache_map_blocks(&self.record, first, count, value, i32::from(as_return));
        }
    }

    /// The lanes of `mask` free `words[lane]` as one warp, through `cache_try_free` (handles,
    /// or object addresses when `by_address`).
    pub fn free(&self, mask: u32, words: &[u64; 32], by_address: bool) -> HostFree {
        let mut handled = [0u32; 32];
        let mut status = [0u32; 32];
        let mut failed = [0u32; 32];
        // SAFETY: as in `alloc`.
        unsafe {
            am_hostcheck_cache_free(
                &self.record,
                mask,
                words.as_ptr(),
                i32::from(!by_address),
                handled.as_mut_ptr(),
                status.as_mut_ptr(),
                failed.as_mut_ptr(),
            );
        }
        HostFree {
            handled: lanes(mask, handled),
            lanes: status,
            any_failed: lanes(mask, failed),
        }
    }
}
