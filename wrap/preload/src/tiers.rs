//! Tiered placement applied: the driver calls that put a split allocation
//! ([`wrap::tiers::Split`]) where the pool decided, when it is made, and take the advice off
//! again before the pool may hand its memory out anew.
//!
//! The GPU part is preferred on the GPU and prefetched there (the driver populates it on the
//! GPU at copy-engine speed instead of fault by fault). The host part is preferred in host
//! memory and mapped for the GPU (accessed-by), then populated in host memory by touching one
//! byte per page from several threads: the GPU then reads and writes it over the link with no
//! faults and no migration. Left to the GPU's faults, populating host pages runs at a fraction
//! of the link's speed (the first write to a 16 GiB host tier took 7.3 s on an H100, against
//! 1.2 s touched from 16 threads and 0.33 s for every write after;
//! `bench/results/2026-11-26-python/h100-probes/`).
//!
//! Invariants: only a new allocation's own range is touched, before its address is returned;
//! advice is taken off only while the allocation is still live in the pool (no other allocation
//! can hold its range yet).

use std::ffi::c_int;
use std::time::Instant;

use wrap::tiers::Split;

use crate::driver::{
    self, CU_MEM_ADVISE_SET_ACCESSED_BY, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
    CU_MEM_ADVISE_UNSET_ACCESSED_BY, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, DevicePtr,
    MemLocation, advise,
};

/// Host pages are touched this far apart (the smallest page the host maps).
const PAGE_BYTES: usize = 4096;
/// Each populating thread takes at least this much (fewer threads for a small host part).
const BYTES_PER_THREAD: usize = 32 << 20;
/// At most this many populating threads (more did not populate faster on a 16-core host).
const MAX_THREADS: usize = 16;

/// Put the new allocation at `address` where `split` says, for the GPU `device`; the time it
/// took.
pub fn place(device: c_int, address: DevicePtr, split: Split) -> u64 {
    let started = Instant::now();
    let gpu = MemLocation::gpu(device);
    // The host part first: populating it while the GPU part's prefetch runs made both slower
    // (a 99 GiB tensor's first write took 4.3 s against 3.6 s this way round, on an H100:
    // `bench/results/2026-11-26-python/h100-probes/probes.log`).
    let host_start = address + split.device_bytes;
    if split.host_bytes > 0 {
        let (bytes, what) = (split.host_bytes, "a host tier");
        advise(
            host_start,
            bytes,
            CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            MemLocation::HOST,
            what,
        );
        advise(host_start, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu, what);
        // SAFETY: the host part of the new allocation: managed memory mapped on the host, which
        // nothing else uses until the allocation is returned.
        unsafe { populate_on_host(host_start, bytes as usize) };
    }
    let host_placed = started.elapsed();
    if split.device_bytes > 0 {
        let (bytes, what) = (split.device_bytes, "a device tier");
        advise(
            address,
            bytes,
            CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            gpu,
            what,
        );
        driver::prefetch(address, bytes, gpu, what);
    }
    tracing::debug!(
        device_bytes = split.device_bytes,
        host_bytes = split.host_bytes,
        host_us = host_placed.as_micros() as u64,
        gpu_us = (started.elapsed() - host_placed).as_micros() as u64,
        "placed in tiers"
    );
    started.elapsed().as_nanos() as u64
}

/// Take `split`'s advice off the allocation at `address`, about to be freed.
pub fn unplace(device: c_int, address: DevicePtr, split: Split) {
    let (gpu, what) = (MemLocation::gpu(device), "a freed tier");
    let bytes = split.device_bytes + split.host_bytes;
    advise(
        address,
        bytes,
        CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
        gpu,
        what,
    );
    if split.host_bytes > 0 {
        let host_start = address + split.device_bytes;
        advise(
            host_start,
            split.host_bytes,
            CU_MEM_ADVISE_UNSET_ACCESSED_BY,
            gpu,
            what,
        );
    }
}

/// Make the host populate `bytes` at `address` (one write per page), from several threads.
///
/// # Safety
/// The range is host-mapped memory that nothing else reads or writes meanwhile.
unsafe fn populate_on_host(address: DevicePtr, bytes: usize) {
    let threads = (bytes / BYTES_PER_THREAD)
        .clamp(1, MAX_THREADS)
        .min(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let share = bytes.div_ceil(threads).next_multiple_of(PAGE_BYTES);
    let touch = move |start: usize| {
        let end = (start + share).min(bytes);
        for offset in (start..end).step_by(PAGE_BYTES) {
            // SAFETY: inside the range the caller gave; a volatile write so it is not elided.
            unsafe { std::ptr::write_volatile((address as usize + offset) as *mut u8, 0) };
        }
    };
    std::thread::scope(|scope| {
        for t in 1..threads {
            if std::thread::Builder::new()
                .spawn_scoped(scope, move || touch(t * share))
                .is_err()
            {
                // No thread to be had: this one does that share too.
                touch(t * share);
            }
        }
        touch(0);
    });
}
