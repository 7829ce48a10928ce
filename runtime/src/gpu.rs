//! GPU resources of the runtime: the mailbox registered as pinned memory mapped for the device
//! (with its per-port locks in device memory), and the managed arena.
//!
//! The service thread never calls CUDA: everything here is set up before kernels launch and torn
//! down after they finish, on the thread that owns the context.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{CudaContext, DriverError};
use orchestrator::caches::{
    BITS_ARRAY, COUNTERS_ARRAY, CacheChannel, CpuCaches, DEVICE_ARRAYS, FREE_COUNTERS, LIFE_ARRAY,
    device_array_lens, hash_len, run_slots, run_span_index,
};
use orchestrator::{DeviceCaches, DeviceMailbox, Mailbox};
use thiserror::Error;

/// Why a GPU resource could not be set up.
#[derive(Debug, Error)]
pub enum GpuError {
    /// A driver call failed.
    #[error("CUDA driver error in {call}: {error}")]
    Driver {
        /// The call.
        call: &'static str,
        /// The error.
        error: DriverError,
    },
    /// The arena asked for would not fit in free device memory.
    #[error(
        "an arena of {asked} bytes does not fit in the {free} bytes of free device memory; \
         oversubscription must be asked for explicitly"
    )]
    ArenaTooLarge {
        /// Bytes asked for.
        asked: u64,
        /// Free device memory.
        free: u64,
    },
    /// A host copy would run past the end of a managed region.
    #[error("{len} bytes at offset {offset} run past the {bytes}-byte managed region")]
    OutOfBounds {
        /// Offset asked.
        offset: u64,
        /// Length asked.
        len: u64,
        /// The region's length.
        bytes: u64,
    },
}

fn check(call: &'static str, result: sys::CUresult) -> Result<(), GpuError> {
    result
        .result()
        .map_err(|error| GpuError::Driver { call, error })
}

/// Make `context` the calling thread's current context.
fn bind(context: &CudaContext) -> Result<(), GpuError> {
    context.bind_to_thread().map_err(|error| GpuError::Driver {
        call: "cuCtxSetCurrent",
        error,
    })
}

/// Device memory of `bytes` bytes, zeroed before this returns.
fn device_zeroed(bytes: usize) -> Result<CUdeviceptr, GpuError> {
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; the context is bound by the caller.
    check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
    // A memset of device memory may still run when the call returns, and the runtime's kernels
    // go to a non-blocking stream that does not wait for it: wait here.
    // SAFETY: `ptr` is a fresh allocation of `bytes` bytes; the null stream is the context's
    // legacy stream.
    let zeroed = check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, 0, bytes, std::ptr::null_mut())
    })
    .and_then(|()| {
        // SAFETY: as above.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(std::ptr::null_mut())
        })
    });
    if let Err(e) = zeroed {
        // Not handed out, so freed here; its own failure would say less than the first one.
        // SAFETY: `ptr` came from cuMemAlloc above and nothing else holds it.
        let _ = unsafe { sys::cuMemFree_v2(ptr) };
        return Err(e);
    }
    Ok(ptr)
}

/// Register `host..host + bytes` as pinned memory mapped for the device (portable across
/// contexts); its address as the device sees it.
///
/// # Safety
/// The range must be a live, page-aligned host allocation that stays allocated until
/// `cuMemHostUnregister` is called on it.
unsafe fn register_mapped(host: usize, bytes: usize) -> Result<CUdeviceptr, GpuError> {
    let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
    // SAFETY: the caller guarantees the range is a live allocation.
    check("cuMemHostRegister", unsafe {
        sys::cuMemHostRegister_v2(host as *mut c_void, bytes, flags)
    })?;
    let mut mapped: CUdeviceptr = 0;
    // SAFETY: the range was registered with DEVICEMAP just above.
    let result = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut mapped, host as *mut c_void, 0) };
    if let Err(e) = check("cuMemHostGetDevicePointer", result) {
        // SAFETY: registered above and not yet handed out.
        unsafe { sys::cuMemHostUnregister(host as *mut c_void) };
        return Err(e);
    }
    Ok(mapped)
}

/// The device caches' memory: the channel registered as pinned memory mapped for the device,
/// and the device-side arrays in one device allocation.
pub struct PinnedCaches {
    context: Arc<CudaContext>,
    channel: Arc<CacheChannel>,
    max_arena_blocks: u64,
    memory: CUdeviceptr,
    /// Byte offset and length of each device array in `memory`.
    arrays: [(usize, usize); DEVICE_ARRAYS],
    device: DeviceCaches,
}

impl PinnedCaches {
    /// Register `channel` and allocate the device arrays (zeroed) for an arena of at most
    /// `max_arena_blocks` VABlocks.
    pub fn new(
        context: &Arc<CudaContext>,
        channel: Arc<CacheChannel>,
        max_arena_blocks: u64,
    ) -> Result<Self, GpuError> {
        bind(context)?;
        let mut arrays = [(0usize, 0usize); DEVICE_ARRAYS];
        let mut at = 0usize;
        for (slot, (width, len)) in arrays
            .iter_mut()
            .zip(device_array_lens(channel.max_slabs(), max_arena_blocks))
        {
            *slot = (at, width * len);
            at = (at + width * len).next_multiple_of(256);
        }
        let (host, bytes) = channel.region();
        // SAFETY: the channel's own page-aligned allocation, kept alive by the Arc held here
        // and unregistered in Drop before it is released.
        let mapped = unsafe { register_mapped(host, bytes) }?;
        let memory = match device_zeroed(at) {
            Ok(memory) => memory,
            Err(e) => {
                // SAFETY: registered above and not yet handed out.
                unsafe { sys::cuMemHostUnregister(host as *mut c_void) };
                return Err(e);
            }
        };
        let device = DeviceCaches::over(
            &channel,
            mapped,
            hash_len(max_arena_blocks),
            arrays.map(|(offset, _)| memory + offset as u64),
        );
        tracing::info!(device_bytes = at, "device caches ready");
        Ok(Self {
            context: context.clone(),
            channel,
            max_arena_blocks,
            memory,
            arrays,
            device,
        })
    }

    /// What kernels get (`am::DeviceCaches`).
    pub fn device(&self) -> DeviceCaches {
        self.device
    }

    /// Device frees so far by outcome (`LaneStatus` code), copied on `stream` (a non-blocking
    /// stream, so kernels that run meanwhile on others are not waited for).
    pub fn free_counts(
        &self,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<[u64; FREE_COUNTERS], GpuError> {
        let bytes = self.arrays_to_host(stream, [COUNTERS_ARRAY])?.remove(0);
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        Ok(CpuCaches::free_counts(&words))
    }

    /// [`CpuCaches::run_object_slots`] on the device's state: the slab's life and the object's
    /// span word, copied on `stream` (a non-blocking stream, as for [`PinnedCaches::free_counts`]).
    pub fn run_object_slots(
        &self,
        stream: &cudarc::driver::CudaStream,
        id: u32,
        slot: u64,
    ) -> Result<Option<u64>, GpuError> {
        bind(&self.context)?;
        let mut life = [0u8; 4];
        let mut span = [0u8; 8];
        let words = [
            (
                life.as_mut_slice(),
                self.arrays[LIFE_ARRAY].0 + id as usize * 4,
            ),
            (
                span.as_mut_slice(),
                self.arrays[BITS_ARRAY].0 + run_span_index(id, slot) * 8,
            ),
        ];
        let mut copied = Ok(());
        for (host, offset) in words {
            // SAFETY: `host` lives until the stream is synchronized below; the source is one
            // word inside `memory` (an id below max_slabs and a slot within a slab's bitmap
            // words, as the keeper and the segment hand them out).
            copied = copied.and(check("cuMemcpyDtoHAsync", unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    host.as_mut_ptr().cast(),
                    self.memory + offset as u64,
                    host.len(),
                    stream.cu_stream(),
                )
            }));
        }
        let synced = synchronize(stream);
        copied.and(synced)?;
        Ok(run_slots(
            u32::from_le_bytes(life),
            u64::from_le_bytes(span),
        ))
    }

    /// The device arrays `which` (indices into [`CpuCaches::arrays`]' order) copied to the host
    /// on `stream`, as bytes. Every copy is waited for, even after one failed to start: the
    /// buffers must outlive them.
    fn arrays_to_host(
        &self,
        stream: &cudarc::driver::CudaStream,
        which: impl IntoIterator<Item = usize>,
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let ranges: Vec<(usize, usize)> = which.into_iter().map(|i| self.arrays[i]).collect();
        let mut hosts: Vec<Vec<u8>> = ranges.iter().map(|&(_, bytes)| vec![0u8; bytes]).collect();
        let copied = hosts
            .iter_mut()
            .zip(&ranges)
            .try_for_each(|(host, &(offset, bytes))| {
                // SAFETY: `host` has `bytes` bytes and lives until the stream is synchronized
                // below; the source is this array inside `memory`.
                check("cuMemcpyDtoHAsync", unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        host.as_mut_ptr().cast(),
                        self.memory + offset as u64,
                        bytes,
                        stream.cu_stream(),
                    )
                })
            });
        let synced = synchronize(stream);
        copied.and(synced)?;
        Ok(hosts)
    }

    /// [`CpuCaches::drain`] on the device's state, copied to the host and back on `stream`
    /// (the runtime's). No kernel may run. Returns the slabs given back once the state is back
    /// on the device: a copy from pageable memory can still be under way when the call that
    /// made it returns, so the stream is synchronized before the kernels that follow may start.
    pub fn drain(&self, stream: &cudarc::driver::CudaStream) -> Result<usize, GpuError> {
        bind(&self.context)?;
        let hosts = self.arrays_to_host(stream, 0..DEVICE_ARRAYS)?;
        let state = CpuCaches::new(self.channel.clone(), self.max_arena_blocks);
        for (index, host) in hosts.iter().enumerate() {
            state.load(index, host);
        }
        let returned = state.drain();
        let hosts: Vec<Vec<u8>> = (0..DEVICE_ARRAYS).map(|i| state.save(i)).collect();
        let copied = hosts
            .iter()
            .zip(&self.arrays)
            .try_for_each(|(host, &(offset, bytes))| {
                debug_assert_eq!(host.len(), bytes);
                // SAFETY: `host` has `bytes` bytes and outlives the synchronize below; the
                // destination is this array inside `memory`.
                check("cuMemcpyHtoDAsync", unsafe {
                    sys::cuMemcpyHtoDAsync_v2(
                        self.memory + offset as u64,
                        host.as_ptr().cast(),
                        bytes,
                        stream.cu_stream(),
                    )
                })
            });
        let synced = synchronize(stream);
        copied.and(synced)?;
        Ok(returned)
    }
}

/// Wait for everything queued on `stream`.
fn synchronize(stream: &cudarc::driver::CudaStream) -> Result<(), GpuError> {
    // SAFETY: a live stream (the borrow keeps it alive).
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream.cu_stream())
    })
}

impl Drop for PinnedCaches {
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_err() {
            tracing::error!("cannot bind the context to release the device caches");
            return;
        }
        let (host, _) = self.channel.region();
        // SAFETY: allocated and registered in `new`, released once, after every kernel ended.
        unsafe {
            let _ = sys::cuMemFree_v2(self.memory);
            let _ = sys::cuMemHostUnregister(host as *mut c_void);
        }
    }
}

/// `am::DeviceMailbox` as a kernel argument, passed by value.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct MailboxArg(pub DeviceMailbox);

// SAFETY: DeviceMailbox is `#[repr(C)]` plain integers with the layout of `am::DeviceMailbox`
// (checked by device/hostcheck), so its bytes are a valid kernel parameter.
unsafe impl cudarc::driver::DeviceRepr for MailboxArg {}

/// An orchestrator [`Mailbox`] registered with the GPU, and its device-side locks.
pub struct PinnedMailbox {
    context: Arc<CudaContext>,
    mailbox: Arc<Mailbox>,
    device: DeviceMailbox,
}

impl PinnedMailbox {
    /// Register `mailbox` (pinned, mapped for the device, portable across contexts) and allocate
    /// one lock per port in device memory.
    pub fn new(context: &Arc<CudaContext>, mailbox: Arc<Mailbox>) -> Result<Self, GpuError> {
        bind(context)?;
        let (host, bytes) = mailbox.region();
        // SAFETY: `host..host + bytes` is the mailbox's own page-aligned allocation, which lives
        // as long as `self` holds the Arc; it is unregistered in Drop before the Arc is released.
        let mapped = unsafe { register_mapped(host, bytes) }?;
        let ports = mailbox.ports();
        let locks = match device_zeroed(ports * 4) {
            Ok(arrays) => arrays,
            Err(e) => {
                // SAFETY: registered above and not yet handed out.
                unsafe { sys::cuMemHostUnregister(host as *mut c_void) };
                return Err(e);
            }
        };
        let device = DeviceMailbox::over(&mailbox, mapped, locks, DeviceCaches::default());
        tracing::info!(ports, bytes, "mailbox registered as pinned memory");
        Ok(Self {
            context: context.clone(),
            mailbox,
            device,
        })
    }

    /// What kernels get (`am::DeviceMailbox`).
    pub fn device(&self) -> DeviceMailbox {
        self.device
    }

    /// Give kernels these device caches too.
    pub fn set_caches(&mut self, caches: DeviceCaches) {
        self.device.caches = caches;
    }

    /// The same, ready to pass as a kernel argument.
    pub fn kernel_arg(&self) -> MailboxArg {
        MailboxArg(self.device)
    }
}

impl Drop for PinnedMailbox {
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_err() {
            tracing::error!("cannot bind the context to release the mailbox");
            return;
        }
        let (host, _) = self.mailbox.region();
        // SAFETY: allocated and registered in `new`, released once; no kernel runs any more
        // (the owner drops the mailbox after its kernels finished).
        unsafe {
            let _ = sys::cuMemFree_v2(self.device.locks);
            let _ = sys::cuMemHostUnregister(host as *mut c_void);
        }
    }
}

/// Managed memory for the arena: `blocks` VABlocks starting at a 2 MiB boundary.
///
/// The host accessors touch the memory as plain memory, so they are `unsafe fn`s: the caller
/// vouches that no kernel uses the arena meanwhile.
///
/// ```compile_fail,E0133
/// fn fill(arena: &runtime::gpu::ManagedArena) {
///     arena.fill_from_host(0);
/// }
/// ```
pub struct ManagedArena {
    context: Arc<CudaContext>,
    allocation: CUdeviceptr,
    base: u64,
    blocks: usize,
}

/// Where the driver is advised to keep a managed range's pages (`cuMemAdvise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residence {
    /// No advice: pages migrate to whichever processor touches them.
    Unadvised,
    /// Preferred in device `0`'s memory and mapped for it (accessed by), so another GPU's
    /// accesses, or memory pressure, do not leave it faulting on its own pages.
    Device(i32),
    /// Preferred in host memory and mapped for device `0`, which reads and writes the pages over
    /// the link instead of migrating them: what a user does for data that does not fit the GPU.
    HostMappedFor(i32),
    /// Read mostly: a processor that reads a page gets its own copy (a write drops the others),
    /// so reads never move a page away from another processor.
    ReadMostly,
}

impl Residence {
    /// The advice calls that set it: (call's name, advice, location).
    fn advice(self) -> Vec<(&'static str, sys::CUmem_advise, sys::CUmemLocation)> {
        let device = |id| sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id,
        };
        let host = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        };
        let accessed_by = |id| {
            (
                "cuMemAdvise(SET_ACCESSED_BY)",
                sys::CUmem_advise::CU_MEM_ADVISE_SET_ACCESSED_BY,
                device(id),
            )
        };
        match self {
            Residence::Unadvised => Vec::new(),
            Residence::Device(id) => vec![
                (
                    "cuMemAdvise(SET_PREFERRED_LOCATION, device)",
                    sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    device(id),
                ),
                accessed_by(id),
            ],
            Residence::HostMappedFor(id) => vec![
                (
                    "cuMemAdvise(SET_PREFERRED_LOCATION, host)",
                    sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    host,
                ),
                accessed_by(id),
            ],
            Residence::ReadMostly => vec![(
                "cuMemAdvise(SET_READ_MOSTLY)",
                sys::CUmem_advise::CU_MEM_ADVISE_SET_READ_MOSTLY,
                // Read mostly takes no location.
                device(0),
            )],
        }
    }

    /// Whether its pages count against free device memory (host-resident ones do not; read-mostly
    /// copies do).
    fn in_device_memory(self) -> bool {
        !matches!(self, Residence::HostMappedFor(_))
    }
}

/// Advise the driver to keep `base..base + bytes` as `residence` says.
///
/// # Safety
/// The range must lie in a managed allocation of the bound context.
unsafe fn advise(base: CUdeviceptr, bytes: usize, residence: Residence) -> Result<(), GpuError> {
    for (call, advice, location) in residence.advice() {
        // SAFETY: the caller vouches for the range; advice changes no contents.
        check(call, unsafe {
            sys::cuMemAdvise_v2(base, bytes, advice, location)
        })?;
    }
    Ok(())
}

impl ManagedArena {
    /// Reserve `blocks` VABlocks of managed memory. Refused when they would not fit in free device
    /// memory, unless `allow_oversubscription` (then a warning is logged). No advice: pages go
    /// to whichever processor touches them.
    pub fn new(
        context: &Arc<CudaContext>,
        blocks: usize,
        allow_oversubscription: bool,
    ) -> Result<Self, GpuError> {
        Self::advised(
            context,
            blocks,
            allow_oversubscription,
            Residence::Unadvised,
        )
    }

    /// [`ManagedArena::new`], with the whole range advised as `residence` says. A range advised
    /// to live in host memory is not measured against free device memory.
    pub fn advised(
        context: &Arc<CudaContext>,
        blocks: usize,
        allow_oversubscription: bool,
        residence: Residence,
    ) -> Result<Self, GpuError> {
        bind(context)?;
        let block = ortree::VABLOCK_BYTES;
        let asked = blocks as u64 * block;
        let (free, _) = context.mem_get_info().map_err(|error| GpuError::Driver {
            call: "cuMemGetInfo",
            error,
        })?;
        if residence.in_device_memory() && asked > free as u64 {
            if !allow_oversubscription {
                return Err(GpuError::ArenaTooLarge {
                    asked,
                    free: free as u64,
                });
            }
            tracing::warn!(asked, free, "arena oversubscribes device memory, as asked");
        }
        let mut allocation: CUdeviceptr = 0;
        // One extra block so the arena can start on a 2 MiB boundary.
        let bytes = (asked + block) as usize;
        // SAFETY: out-pointer to a local; the context is bound.
        check("cuMemAllocManaged", unsafe {
            sys::cuMemAllocManaged(
                &mut allocation,
                bytes,
                sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
            )
        })?;
        let base = allocation.next_multiple_of(block);
        // SAFETY: the range is the allocation just made, in the bound context.
        if let Err(e) = unsafe { advise(allocation, bytes, residence) } {
            // SAFETY: the allocation above, not yet handed out.
            unsafe { sys::cuMemFree_v2(allocation) };
            return Err(e);
        }
        tracing::info!(
            blocks,
            ?residence,
            base = format_args!("{base:#x}"),
            "managed arena reserved"
        );
        Ok(Self {
            context: context.clone(),
            allocation,
            base,
            blocks,
        })
    }

    /// First byte of the arena (2 MiB aligned).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// VABlocks in the arena.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Bytes of the arena.
    pub fn bytes(&self) -> u64 {
        self.blocks as u64 * ortree::VABLOCK_BYTES
    }

    /// Write `value` over every byte from the host, so every page is populated and resident
    /// on the host.
    ///
    /// # Safety
    /// No kernel may read or write the arena while this runs (the host writes it as plain
    /// memory; a kernel's accesses would race with them).
    pub unsafe fn fill_from_host(&self, value: u8) {
        // SAFETY: `base..base + bytes` lies in this managed allocation, which lives as long as
        // `self`; the host may access managed memory (the runtime requires concurrent managed
        // access), and the caller runs no kernel on it meanwhile.
        unsafe { std::ptr::write_bytes(self.base as *mut u8, value, self.bytes() as usize) };
    }

    /// Copy `bytes` to `offset` from the host (the pages become resident on the host).
    ///
    /// # Safety
    /// No kernel may read or write the arena while this runs.
    pub unsafe fn write_from_host(&self, offset: u64, bytes: &[u8]) -> Result<(), GpuError> {
        self.check_range(offset, bytes.len() as u64)?;
        // SAFETY: `offset..offset + len` was checked to lie in this managed allocation, which
        // lives as long as `self`; the caller runs no kernel on it meanwhile (as in
        // `fill_from_host`); the source is a distinct host slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (self.base + offset) as *mut u8,
                bytes.len(),
            )
        };
        Ok(())
    }

    /// Advise the driver to keep `bytes` from `offset` as `residence` says (the arena's later
    /// advice for a range replaces what it was given before).
    pub fn advise(&self, offset: u64, bytes: u64, residence: Residence) -> Result<(), GpuError> {
        self.check_range(offset, bytes)?;
        bind(&self.context)?;
        // SAFETY: the range was checked to lie in this managed allocation, of the context just
        // bound.
        unsafe { advise(self.base + offset, bytes as usize, residence) }
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(), GpuError> {
        if offset.checked_add(len).is_none_or(|end| end > self.bytes()) {
            return Err(GpuError::OutOfBounds {
                offset,
                len,
                bytes: self.bytes(),
            });
        }
        Ok(())
    }

    /// Ask the driver to migrate `bytes` from `offset` to the GPU on `stream`
    /// (cuMemPrefetchAsync): what a user does before a kernel with what fits.
    pub fn prefetch_to_device(
        &self,
        offset: u64,
        bytes: u64,
        ordinal: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<(), GpuError> {
        self.check_range(offset, bytes)?;
        let location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        };
        // SAFETY: the range was checked to lie in this managed allocation; the stream belongs
        // to its context; the allocation outlives the prefetch (the caller synchronises before
        // dropping it).
        check("cuMemPrefetchAsync", unsafe {
            sys::cuMemPrefetchAsync_v2(
                self.base + offset,
                bytes as usize,
                location,
                0,
                stream.cu_stream(),
            )
        })
    }

    /// Read one byte of every 4 KiB page from the host, so every page is resident on the host
    /// again; returns their sum.
    ///
    /// # Safety
    /// No kernel may write the arena while this runs.
    pub unsafe fn read_every_page_from_host(&self) -> u64 {
        (0..self.bytes() / 4096)
            .map(|page| {
                // SAFETY: the byte lies in this managed allocation (as in `fill_from_host`);
                // a volatile read so the access really happens.
                u64::from(unsafe {
                    std::ptr::read_volatile((self.base + page * 4096) as *const u8)
                })
            })
            .sum()
    }
}

impl Drop for ManagedArena {
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_ok() {
            // SAFETY: allocated in `new`, freed once, after the kernels using it finished.
            let _ = unsafe { sys::cuMemFree_v2(self.allocation) };
        }
    }
}
