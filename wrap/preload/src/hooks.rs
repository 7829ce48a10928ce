//! The wrapped entry points. Each is exported under the driver's name (programs linked to
//! libcuda call it directly) and handed out in place of the driver's by `dlsym` and
//! `cuGetProcAddress` (programs with a static CUDA runtime, and `libcudart.so`, reach the
//! driver that way). Each calls the driver's own definition of the same name for what is not
//! the pool's.
//!
//! Invariants: a pointer outside the arena reaches the driver untouched; every arena answer is
//! the one the driver gives for a real managed allocation of the same size (its range, its own
//! buffer id, invalid-value for ranges past its end and for frees that are not its start); no
//! panic leaves a wrapper (each body runs under `catch_unwind`, a panic answers an error).

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use wrap::Reserve;
use wrap::pool::{Owner, PoolAlloc, PoolFree};
use wrap::{Advice, Placement};

use crate::driver::{self, CuResult, DevicePtr, ManagedReserve, MemLocation, Stream};
use crate::driver::{
    CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_MEM_ADVISE_SET_READ_MOSTLY, CU_MEM_ATTACH_GLOBAL,
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};
use crate::state::{self, with_pool};
use crate::tiers;

/// Buffer ids of arena allocations: this bit, then the allocation's number (the driver numbers
/// its own buffers from 1, far below).
const BUFFER_ID_BIT: u64 = 1 << 63;

/// Run a wrapper's body; a panic answers `CUDA_ERROR_INVALID_VALUE` (logged) instead of
/// unwinding into the program.
fn guarded(name: &str, body: impl FnOnce() -> CuResult) -> CuResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|_| {
        tracing::error!(
            entry = name,
            "a panic inside the wrapper; answered an invalid value"
        );
        CUDA_ERROR_INVALID_VALUE
    })
}

/// One wrapped name: its family (the name `cuGetProcAddress` is asked for) and our function.
pub struct Hook {
    pub name: &'static CStr,
    pub family: &'static str,
    pub ours: usize,
    real: AtomicUsize,
}

impl Hook {
    /// The driver's definition of this exact name (0 if it has none).
    pub fn real(&self) -> usize {
        let r = self.real.load(Ordering::Acquire);
        if r != 0 {
            return r;
        }
        let found = driver::lookup(self.name) as usize;
        self.real.store(found, Ordering::Release);
        found
    }
}

macro_rules! hooks {
    ($($name:ident / $family:literal),* $(,)?) => {
        /// Every wrapped name.
        pub fn hooks() -> &'static [Hook] {
            static HOOKS: OnceLock<Vec<Hook>> = OnceLock::new();
            HOOKS.get_or_init(|| vec![$(Hook {
                name: {
                    const NAME: &CStr = match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                        Ok(n) => n,
                        Err(_) => panic!("a C name"),
                    };
                    NAME
                },
                family: $family,
                ours: $name as *const () as usize,
                real: AtomicUsize::new(0),
            }),*])
        }
    };
}

hooks! {
    cuGetProcAddress / "cuGetProcAddress",
    cuGetProcAddress_v2 / "cuGetProcAddress",
    cuMemAllocManaged / "cuMemAllocManaged",
    cuMemFree_v2 / "cuMemFree",
    cuMemFreeAsync / "cuMemFreeAsync",
    cuMemFreeAsync_ptsz / "cuMemFreeAsync",
    cuMemGetAddressRange_v2 / "cuMemGetAddressRange",
    cuPointerGetAttribute / "cuPointerGetAttribute",
    cuPointerGetAttributes / "cuPointerGetAttributes",
    cuMemPrefetchAsync / "cuMemPrefetchAsync",
    cuMemPrefetchAsync_ptsz / "cuMemPrefetchAsync",
    cuMemPrefetchAsync_v2 / "cuMemPrefetchAsync",
    cuMemPrefetchAsync_v2_ptsz / "cuMemPrefetchAsync",
    cuMemAdvise / "cuMemAdvise",
    cuMemAdvise_v2 / "cuMemAdvise",
    cuMemRangeGetAttribute / "cuMemRangeGetAttribute",
    cuMemRangeGetAttributes / "cuMemRangeGetAttributes",
}

/// The hook of a wrapper's name.
fn hook(name: &str) -> &'static Hook {
    hooks()
        .iter()
        .find(|h| h.name.to_bytes() == name.as_bytes())
        .expect("every wrapper has a hook")
}

/// The driver's definition of a wrapper's name, as a function of type `F`.
macro_rules! real {
    ($name:expr, $ty:ty) => {{
        // Looked up once per wrapper, not on every call.
        static REAL: AtomicUsize = AtomicUsize::new(0);
        let mut p = REAL.load(Ordering::Relaxed);
        if p == 0 {
            p = hook($name).real();
            REAL.store(p, Ordering::Relaxed);
        }
        // SAFETY: the driver's definition of this name, which has this signature (cuda.h);
        // checked non-null.
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
    }};
}

/// What `dlsym` or `cuGetProcAddress` answered for `name` (exact, from `dlsym`) or `family`
/// (from `cuGetProcAddress`): our wrapper where the answer is the driver's definition of a
/// wrapped name, else the answer itself.
pub fn substitute(exact: Option<&CStr>, family: &[u8], found: *mut c_void) -> *mut c_void {
    if !family.starts_with(b"cu") || family.starts_with(b"cupti") {
        return found;
    }
    state::CUDA_LOOKUPS.fetch_add(1, Ordering::Relaxed);
    let mut of_family = hooks()
        .iter()
        .filter(|h| h.family.as_bytes() == family || exact.is_some_and(|e| e == h.name))
        .peekable();
    if of_family.peek().is_none() {
        return found;
    }
    for h in of_family {
        if found as usize == h.ours {
            return found;
        }
        if found as usize == h.real() {
            state::WRAPPED_LOOKUPS.fetch_add(1, Ordering::Relaxed);
            return h.ours as *mut c_void;
        }
    }
    state::UNIDENTIFIED_LOOKUPS.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        name = %String::from_utf8_lossy(family),
        "the driver answered a wrapped name with an entry point of no known version: left unwrapped"
    );
    found
}

/// The name part of `cuGetProcAddress`'s symbol (its family).
fn family_of(symbol: *const c_char) -> Option<&'static [u8]> {
    // SAFETY: the caller passes a NUL-terminated name (cuGetProcAddress's contract), which
    // outlives the call; it is only read here.
    (!symbol.is_null()).then(|| unsafe { CStr::from_ptr(symbol) }.to_bytes())
}

// --- cuGetProcAddress ---------------------------------------------------------------------

/// `cuGetProcAddress` (CUDA 11.3-11.x signature).
///
/// # Safety
/// The driver's contract for `cuGetProcAddress`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CuResult {
    guarded("cuGetProcAddress", || {
        type F = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
        let Some(real) = real!("cuGetProcAddress", F) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        // SAFETY: the caller's arguments, passed on.
        let result = unsafe { real(symbol, pfn, cuda_version, flags) };
        // SAFETY: on success the driver wrote `*pfn`; `pfn` is the caller's live pointer.
        unsafe { answer(result, symbol, pfn) }
    })
}

/// `cuGetProcAddress_v2` (CUDA 12 and later).
///
/// # Safety
/// The driver's contract for `cuGetProcAddress_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    guarded("cuGetProcAddress_v2", || {
        type F = unsafe extern "C" fn(
            *const c_char,
            *mut *mut c_void,
            c_int,
            u64,
            *mut c_int,
        ) -> CuResult;
        let Some(real) = real!("cuGetProcAddress_v2", F) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        // SAFETY: the caller's arguments, passed on.
        let result = unsafe { real(symbol, pfn, cuda_version, flags, status) };
        // SAFETY: as in cuGetProcAddress.
        unsafe { answer(result, symbol, pfn) }
    })
}

/// Put our wrapper in `*pfn` where the driver answered one of the wrapped entry points.
///
/// # Safety
/// `pfn` is null or a live pointer the driver wrote on success.
unsafe fn answer(result: CuResult, symbol: *const c_char, pfn: *mut *mut c_void) -> CuResult {
    if result == CUDA_SUCCESS
        && !pfn.is_null()
        && let Some(family) = family_of(symbol)
    {
        // SAFETY: the caller's live pointer, written by the driver.
        unsafe { *pfn = substitute(None, family, *pfn) };
    }
    result
}

// --- allocation and free ------------------------------------------------------------------

/// `cuMemAllocManaged`: from the arena where the pool takes it.
///
/// # Safety
/// The driver's contract for `cuMemAllocManaged`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut DevicePtr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    guarded("cuMemAllocManaged", || {
        type F = unsafe extern "C" fn(*mut DevicePtr, usize, c_uint) -> CuResult;
        let Some(real) = real!("cuMemAllocManaged", F) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        state::MANAGED_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // What the pool does not take, the driver judges (a null out-pointer, 0 bytes, host
        // attachment).
        if dptr.is_null() || bytes == 0 || flags != CU_MEM_ATTACH_GLOBAL {
            let _timed = state::TimeIn(&state::ALLOC_TICKS, state::ticks());
            // SAFETY: the caller's arguments, passed on.
            return unsafe { real(dptr, bytes, flags) };
        }
        // The start (and a wait for another thread's) is timed apart: it is not the allocator's.
        let started = state::started();
        let _timed = state::TimeIn(&state::ALLOC_TICKS, state::ticks());
        let Some(started) = started else {
            // A call back from the driver or CUPTI while this thread starts the wrapper.
            // SAFETY: the caller's arguments, passed on.
            return unsafe { real(dptr, bytes, flags) };
        };
        let caller = state::caller();
        let mut may_grow = true;
        let address = loop {
            let now = state::ticks();
            let placed =
                with_pool(|pool| pool.try_alloc(bytes as u64, now, caller.clone(), may_grow))
                    .unwrap_or(PoolAlloc::Driver(wrap::pool::Origin::Driver));
            match placed {
                PoolAlloc::Arena(address) => break address,
                PoolAlloc::OutOfMemory => return CUDA_ERROR_OUT_OF_MEMORY,
                PoolAlloc::Grow(growth) => {
                    // Reserved without the pool's lock: other threads allocate meanwhile.
                    let reserved = ManagedReserve.reserve(growth.bytes);
                    with_pool(|pool| pool.finish_growth(growth, reserved));
                    may_grow = false;
                }
                PoolAlloc::Driver(origin) => {
                    let mut address = 0;
                    // SAFETY: the caller's arguments, with a local out-pointer.
                    let result = unsafe { real(&mut address, bytes, flags) };
                    if result != CUDA_SUCCESS {
                        return result;
                    }
                    with_pool(|pool| {
                        pool.record_driver(address, bytes as u64, origin, now, caller.clone())
                    });
                    break address;
                }
            }
        };
        settle(started.device(), address, bytes);
        // SAFETY: checked non-null; the caller's out-pointer.
        unsafe { *dptr = address };
        CUDA_SUCCESS
    })
}

/// Place a new allocation as the settings ask: split between the GPU and host memory where the
/// pool split it (tiered placement), else prefetched and advised as set.
fn settle(device: c_int, address: DevicePtr, bytes: usize) {
    let options = state::options();
    if options.placement == Placement::Tiered
        && let Some(split) = with_pool(|pool| pool.split_of(address)).flatten()
    {
        let ns = tiers::place(device, address, split);
        with_pool(|pool| pool.add_placing_ns(ns));
        return;
    }
    let gpu = MemLocation::gpu(device);
    if let Some(advice) = options.advise {
        let code = match advice {
            Advice::ReadMostly => CU_MEM_ADVISE_SET_READ_MOSTLY,
            Advice::PreferredGpu => CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
        };
        driver::advise(address, bytes as u64, code, gpu, "a new allocation");
    }
    if options.prefetch {
        driver::prefetch(address, bytes as u64, gpu, "a new allocation");
    }
}

/// Free `address`: the pool's after the device's work is done (as `cuMemFree` waits), the
/// driver's through `free`.
fn free_with(
    address: DevicePtr,
    wait: impl FnOnce() -> CuResult,
    free: impl FnOnce() -> CuResult,
) -> CuResult {
    let owner = if address == 0 {
        Owner::Driver
    } else {
        owner_of(address)
    };
    if owner == Owner::Driver {
        let result = free();
        if result == CUDA_SUCCESS && address != 0 {
            let now = state::ticks();
            with_pool(|pool| pool.record_driver_free(address, now));
        }
        return result;
    }
    // The memory may be handed out again at once: no kernel may still use it.
    if matches!(owner, Owner::Allocation { base, .. } if base == address) {
        let waited = wait();
        if waited != CUDA_SUCCESS {
            return waited;
        }
    }
    match release(address, state::ticks()) {
        Some(PoolFree::Freed) => CUDA_SUCCESS,
        Some(PoolFree::Refused(_)) => CUDA_ERROR_INVALID_VALUE,
        // The arena's address; its pool gone from under this call only on the starting
        // thread, which never got an arena address.
        Some(PoolFree::Driver) | None => free(),
    }
}

/// Give the arena allocation at `address`, whose work is done, back to the pool at `now` (the
/// pool's answer; `None` where no pool can be used). A split allocation's advice comes off
/// first, while no other allocation can hold its range.
pub fn release(address: DevicePtr, now: u64) -> Option<PoolFree> {
    if state::options().placement != Placement::Tiered {
        return with_pool(|pool| pool.free(address, now));
    }
    // A second free of the same allocation racing this one on another thread (a program's
    // bug) may take advice off a new allocation's range: its speed suffers, not its bytes.
    if let Some(split) = with_pool(|pool| pool.split_of(address)).flatten() {
        tiers::unplace(driver::current_device(), address, split);
    }
    with_pool(|pool| pool.free(address, now))
}

/// Free `address` once `stream`'s work is done: the arena's to the pool, the driver's through
/// the driver's `cuMemFree_v2` (a framework's allocator hook frees what it allocated through
/// [`cuMemAllocManaged`] this way).
pub fn free_after_stream(address: DevicePtr, stream: Stream) -> CuResult {
    type F = unsafe extern "C" fn(DevicePtr) -> CuResult;
    let Some(real) = real!("cuMemFree_v2", F) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: an address the pool does not own, for the driver to judge.
    free_when_stream_done(address, stream, || unsafe { real(address) })
}

/// [`free_with`], waiting for `stream` (not the whole context) before the pool reuses memory.
fn free_when_stream_done(
    address: DevicePtr,
    stream: Stream,
    driver_free: impl FnOnce() -> CuResult,
) -> CuResult {
    let sync = driver::driver().stream_synchronize;
    // SAFETY: the caller's stream, of the current context.
    free_with(
        address,
        || sync.map_or(CUDA_SUCCESS, |f| unsafe { f(stream) }),
        driver_free,
    )
}

/// Whether `address` is the start of a live arena allocation (a free the pool would take).
pub fn arena_allocation_starts_at(address: DevicePtr) -> bool {
    matches!(owner_of(address), Owner::Allocation { base, .. } if base == address)
}

/// Who answers for `address`: the driver where no pool can be used (see [`with_pool`]).
fn owner_of(address: DevicePtr) -> Owner {
    with_pool(|pool| pool.owner(address)).unwrap_or(Owner::Driver)
}

/// `cuMemFree_v2`.
///
/// # Safety
/// The driver's contract for `cuMemFree_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(address: DevicePtr) -> CuResult {
    guarded("cuMemFree_v2", || {
        type F = unsafe extern "C" fn(DevicePtr) -> CuResult;
        let Some(real) = real!("cuMemFree_v2", F) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        let sync = driver::driver().ctx_synchronize;
        free_with(
            address,
            // SAFETY: no arguments; the program's context is current (it frees).
            || sync.map_or(CUDA_SUCCESS, |f| unsafe { f() }),
            // SAFETY: the caller's argument, passed on.
            || unsafe { real(address) },
        )
    })
}

macro_rules! free_async {
    ($name:ident) => {
        /// `cuMemFreeAsync` (and its per-thread-stream twin): an arena allocation is freed once
        /// the stream's work is done.
        ///
        /// # Safety
        /// The driver's contract for this entry point.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(address: DevicePtr, stream: Stream) -> CuResult {
            guarded(stringify!($name), || {
                type F = unsafe extern "C" fn(DevicePtr, Stream) -> CuResult;
                let Some(real) = real!(stringify!($name), F) else {
                    return CUDA_ERROR_NOT_FOUND;
                };
                // SAFETY: the caller's arguments, passed on.
                free_when_stream_done(address, stream, || unsafe { real(address, stream) })
            })
        }
    };
}

free_async!(cuMemFreeAsync);
free_async!(cuMemFreeAsync_ptsz);

// --- ranges and attributes ----------------------------------------------------------------

/// `cuMemGetAddressRange_v2`: an arena allocation's own range.
///
/// # Safety
/// The driver's contract for `cuMemGetAddressRange_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut DevicePtr,
    size: *mut usize,
    address: DevicePtr,
) -> CuResult {
    guarded("cuMemGetAddressRange_v2", || {
        type F = unsafe extern "C" fn(*mut DevicePtr, *mut usize, DevicePtr) -> CuResult;
        match owner_of(address) {
            Owner::Driver => match real!("cuMemGetAddressRange_v2", F) {
                // SAFETY: the caller's arguments, passed on.
                Some(real) => unsafe { real(base, size, address) },
                None => CUDA_ERROR_NOT_FOUND,
            },
            Owner::Nothing => CUDA_ERROR_NOT_FOUND,
            Owner::Allocation { base: b, bytes, .. } => {
                // SAFETY: the driver's contract: each out-pointer is null or live.
                unsafe {
                    if !base.is_null() {
                        *base = b;
                    }
                    if !size.is_null() {
                        *size = bytes as usize;
                    }
                }
                CUDA_SUCCESS
            }
        }
    })
}

/// Write an attribute the pool answers for an arena allocation; `false` for the others.
///
/// # Safety
/// `data` is live for the attribute's type (u64 or size_t, both 8 bytes here).
unsafe fn pool_attribute(attribute: c_int, data: *mut c_void, owner: Owner) -> bool {
    let Owner::Allocation { base, bytes, id } = owner else {
        return false;
    };
    let value = match attribute {
        driver::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => base,
        driver::CU_POINTER_ATTRIBUTE_RANGE_SIZE => bytes,
        driver::CU_POINTER_ATTRIBUTE_BUFFER_ID | driver::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => {
            BUFFER_ID_BIT | id
        }
        _ => return false,
    };
    if !data.is_null() {
        // SAFETY: the caller's contract.
        unsafe { data.cast::<u64>().write_unaligned(value) };
    }
    true
}

/// `cuPointerGetAttribute`.
///
/// # Safety
/// The driver's contract for `cuPointerGetAttribute`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    address: DevicePtr,
) -> CuResult {
    guarded("cuPointerGetAttribute", || {
        type F = unsafe extern "C" fn(*mut c_void, c_int, DevicePtr) -> CuResult;
        let owner = owner_of(address);
        if owner == Owner::Nothing {
            return CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the driver's contract on `data` for this attribute.
        if unsafe { pool_attribute(attribute, data, owner) } {
            return CUDA_SUCCESS;
        }
        match real!("cuPointerGetAttribute", F) {
            // SAFETY: the caller's arguments, passed on.
            Some(real) => unsafe { real(data, attribute, address) },
            None => CUDA_ERROR_NOT_FOUND,
        }
    })
}

/// `cuPointerGetAttributes`.
///
/// # Safety
/// The driver's contract for `cuPointerGetAttributes`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attributes: *mut c_int,
    data: *mut *mut c_void,
    address: DevicePtr,
) -> CuResult {
    guarded("cuPointerGetAttributes", || {
        type F = unsafe extern "C" fn(c_uint, *mut c_int, *mut *mut c_void, DevicePtr) -> CuResult;
        let Some(real) = real!("cuPointerGetAttributes", F) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        // SAFETY: the caller's arguments, passed on.
        let result = unsafe { real(count, attributes, data, address) };
        let owner = owner_of(address);
        if result == CUDA_SUCCESS && !attributes.is_null() && !data.is_null() {
            for i in 0..count as usize {
                // SAFETY: the driver's contract: `count` attributes and data pointers, each
                // live for its attribute's type.
                unsafe { pool_attribute(*attributes.add(i), *data.add(i), owner) };
            }
        }
        result
    })
}

/// The driver's answer for a range call on `address..address + count`, or the pool's refusal:
/// a range that is not wholly inside one live arena allocation is an invalid value, as for a
/// real allocation of that size.
fn in_range(address: DevicePtr, count: usize, call: impl FnOnce() -> CuResult) -> CuResult {
    match with_pool(|pool| pool.range(address, count as u64)) {
        Some(Ok(_) | Err(Owner::Driver)) | None => call(),
        Some(Err(_)) => CUDA_ERROR_INVALID_VALUE,
    }
}

macro_rules! ranged {
    ($name:ident ( $($arg:ident : $ty:ty),* ) range($p:ident, $n:ident)) => {
        /// The driver's entry point of this name, refused for ranges that leave an arena
        /// allocation.
        ///
        /// # Safety
        /// The driver's contract for this entry point.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            guarded(stringify!($name), || {
                type F = unsafe extern "C" fn($($ty),*) -> CuResult;
                let Some(real) = real!(stringify!($name), F) else {
                    return CUDA_ERROR_NOT_FOUND;
                };
                // SAFETY: the caller's arguments, passed on.
                in_range($p, $n, || unsafe { real($($arg),*) })
            })
        }
    };
}

ranged!(cuMemPrefetchAsync(address: DevicePtr, count: usize, device: c_int, stream: Stream) range(address, count));
ranged!(cuMemPrefetchAsync_ptsz(address: DevicePtr, count: usize, device: c_int, stream: Stream) range(address, count));
ranged!(cuMemPrefetchAsync_v2(address: DevicePtr, count: usize, location: MemLocation, flags: c_uint, stream: Stream) range(address, count));
ranged!(cuMemPrefetchAsync_v2_ptsz(address: DevicePtr, count: usize, location: MemLocation, flags: c_uint, stream: Stream) range(address, count));
ranged!(cuMemAdvise(address: DevicePtr, count: usize, advice: c_int, device: c_int) range(address, count));
ranged!(cuMemAdvise_v2(address: DevicePtr, count: usize, advice: c_int, location: MemLocation) range(address, count));
ranged!(cuMemRangeGetAttribute(data: *mut c_void, data_size: usize, attribute: c_int, address: DevicePtr, count: usize) range(address, count));
ranged!(cuMemRangeGetAttributes(data: *mut *mut c_void, data_sizes: *mut usize, attributes: *mut c_int, attribute_count: usize, address: DevicePtr, count: usize) range(address, count));
