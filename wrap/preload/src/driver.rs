//! The real driver: the real `dlsym` (glibc's, found with `dlvsym`, which this library does not
//! interpose), libcuda's handle, and the driver entry points this library calls itself.
//!
//! Invariants: nothing here calls `dlsym` by name (this library's own `dlsym` is the
//! interposer); every driver pointer comes from libcuda's handle, never from the global scope,
//! where this library's exported wrappers would shadow the driver's; finding glibc's `dlsym` and
//! libcuda's handle takes no lock and cannot panic, so a lookup made while libcuda loads (from
//! its own constructor, inside our `dlsym`) gets an answer instead of waiting for itself.

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `CUresult`.
pub type CuResult = c_int;
/// `CUdeviceptr`.
pub type DevicePtr = u64;
/// `CUstream`.
pub type Stream = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
/// Host memory (the id is ignored).
pub const CU_MEM_LOCATION_TYPE_HOST: c_int = 2;
pub const CU_MEM_ADVISE_SET_READ_MOSTLY: c_int = 1;
pub const CU_MEM_ADVISE_SET_PREFERRED_LOCATION: c_int = 3;
pub const CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: c_int = 4;
pub const CU_MEM_ADVISE_SET_ACCESSED_BY: c_int = 5;
pub const CU_MEM_ADVISE_UNSET_ACCESSED_BY: c_int = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: c_int = 7;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_int = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: c_int = 12;
pub const CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: c_int = 20;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemLocation {
    pub kind: c_int,
    pub id: c_int,
}

impl MemLocation {
    /// GPU `device`.
    pub fn gpu(device: c_int) -> Self {
        Self {
            kind: CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        }
    }

    /// Host memory.
    pub const HOST: Self = Self {
        kind: CU_MEM_LOCATION_TYPE_HOST,
        id: 0,
    };
}

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym` (`None` if this glibc has no versioned definition: then no lookup can be
/// answered). No lock and no panic: `dlsym` is called from anywhere, a loader's constructor
/// included.
pub fn real_dlsym() -> Option<DlsymFn> {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let mut found = REAL.load(Ordering::Acquire);
    if found == 0 {
        // glibc 2.34 moved dlsym into libc (GLIBC_2.34); older ones have GLIBC_2.2.5.
        found = [c"GLIBC_2.34", c"GLIBC_2.2.5"]
            .iter()
            // SAFETY: dlvsym with RTLD_NEXT and valid C strings only looks a symbol up.
            .map(|version| unsafe {
                libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr())
            })
            .find(|p| !p.is_null())
            .map_or(0, |p| p as usize);
        REAL.store(found, Ordering::Release);
    }
    // SAFETY: the address of glibc's dlsym, which has this signature.
    (found != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(found) })
}

thread_local! {
    /// Whether this thread is loading libcuda for [`libcuda`] now.
    static LOADING_LIBCUDA: Cell<bool> = const { Cell::new(false) };
}

/// libcuda's handle (loaded by the program by the time any wrapper runs; loaded here if not).
/// Null while this thread loads it (a lookup from libcuda's own constructor): the caller then
/// treats the name as unwrapped, and no lock is waited for.
pub fn libcuda() -> *mut c_void {
    static HANDLE: AtomicUsize = AtomicUsize::new(0);
    let handle = HANDLE.load(Ordering::Acquire);
    if handle != 0 {
        return handle as *mut c_void;
    }
    if LOADING_LIBCUDA
        .try_with(|l| l.replace(true))
        .unwrap_or(true)
    {
        return std::ptr::null_mut();
    }
    let name = c"libcuda.so.1";
    // SAFETY: dlopen with a valid C string; RTLD_NOLOAD only returns an existing handle.
    let mut handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        // SAFETY: as above, loading it.
        handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY) };
    }
    LOADING_LIBCUDA.with(|l| l.set(false));
    // Two threads may both have opened it: the same handle (dlopen counts references).
    HANDLE.store(handle as usize, Ordering::Release);
    handle
}

/// libcuda's own definition of `name` (null if it has none).
pub fn lookup(name: &CStr) -> *mut c_void {
    let handle = libcuda();
    if handle.is_null() {
        return std::ptr::null_mut();
    }
    match real_dlsym() {
        // SAFETY: glibc's dlsym with a handle from dlopen and a valid C string.
        Some(dlsym) => unsafe { dlsym(handle, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

type AllocManagedFn = unsafe extern "C" fn(*mut DevicePtr, usize, c_uint) -> CuResult;
type MemGetInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult;
type CtxGetDeviceFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
type CtxSynchronizeFn = unsafe extern "C" fn() -> CuResult;
type StreamSynchronizeFn = unsafe extern "C" fn(Stream) -> CuResult;
type PrefetchV2Fn = unsafe extern "C" fn(DevicePtr, usize, MemLocation, c_uint, Stream) -> CuResult;
type AdviseV2Fn = unsafe extern "C" fn(DevicePtr, usize, c_int, MemLocation) -> CuResult;
type EventCreateFn = unsafe extern "C" fn(*mut Event, c_uint) -> CuResult;
type EventRecordFn = unsafe extern "C" fn(Event, Stream) -> CuResult;
type EventFn = unsafe extern "C" fn(Event) -> CuResult;

/// `CUevent`.
pub type Event = *mut c_void;
/// `CU_EVENT_DISABLE_TIMING`: an event that only marks a point of a stream.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CUDA_ERROR_NOT_READY`: the event's work is not done yet.
pub const CUDA_ERROR_NOT_READY: CuResult = 600;

/// The entry points this library calls itself.
pub struct Driver {
    pub alloc_managed: Option<AllocManagedFn>,
    pub mem_get_info: Option<MemGetInfoFn>,
    pub ctx_get_device: Option<CtxGetDeviceFn>,
    pub ctx_synchronize: Option<CtxSynchronizeFn>,
    pub stream_synchronize: Option<StreamSynchronizeFn>,
    pub prefetch: Option<PrefetchV2Fn>,
    pub advise: Option<AdviseV2Fn>,
    pub event_create: Option<EventCreateFn>,
    pub event_record: Option<EventRecordFn>,
    pub event_query: Option<EventFn>,
    pub event_synchronize: Option<EventFn>,
}

macro_rules! entry {
    ($name:literal, $ty:ty) => {{
        let p = lookup($name);
        // SAFETY: libcuda's definition of this name, which has this signature (cuda.h).
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
    }};
}

/// The driver's entry points, looked up once.
pub fn driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| Driver {
        alloc_managed: entry!(c"cuMemAllocManaged", AllocManagedFn),
        mem_get_info: entry!(c"cuMemGetInfo_v2", MemGetInfoFn),
        ctx_get_device: entry!(c"cuCtxGetDevice", CtxGetDeviceFn),
        ctx_synchronize: entry!(c"cuCtxSynchronize", CtxSynchronizeFn),
        stream_synchronize: entry!(c"cuStreamSynchronize", StreamSynchronizeFn),
        prefetch: entry!(c"cuMemPrefetchAsync_v2", PrefetchV2Fn),
        advise: entry!(c"cuMemAdvise_v2", AdviseV2Fn),
        event_create: entry!(c"cuEventCreate", EventCreateFn),
        event_record: entry!(c"cuEventRecord", EventRecordFn),
        event_query: entry!(c"cuEventQuery", EventFn),
        event_synchronize: entry!(c"cuEventSynchronize", EventFn),
    })
}

/// `cuMemAdvise` of `bytes` at `address`; a refusal is logged, naming `what` was advised (advice
/// is a matter of speed: the memory stays correct either way).
pub fn advise(address: DevicePtr, bytes: u64, advice: c_int, location: MemLocation, what: &str) {
    let Some(f) = driver().advise else {
        return;
    };
    // SAFETY: plain values; the driver refuses a range that is not managed memory with an error.
    let r = unsafe { f(address, bytes as usize, advice, location) };
    if r != CUDA_SUCCESS {
        tracing::warn!(result = r, advice, bytes, "cuMemAdvise of {what} failed");
    }
}

/// `cuMemPrefetchAsync` of `bytes` at `address` to `location` on the null stream (which the
/// program's later work on blocking streams waits for); a refusal is logged, naming `what`.
pub fn prefetch(address: DevicePtr, bytes: u64, location: MemLocation, what: &str) {
    let Some(f) = driver().prefetch else {
        return;
    };
    // SAFETY: plain values and the null stream; the driver refuses a range that is not managed
    // memory with an error.
    let r = unsafe { f(address, bytes as usize, location, 0, std::ptr::null_mut()) };
    if r != CUDA_SUCCESS {
        tracing::warn!(result = r, bytes, "cuMemPrefetchAsync of {what} failed");
    }
}

/// The current context's device (0 if the driver cannot say).
pub fn current_device() -> c_int {
    let mut device = 0;
    if let Some(f) = driver().ctx_get_device {
        // SAFETY: a live out-pointer.
        unsafe { f(&mut device) };
    }
    device
}

/// The arena's reservations, from the real `cuMemAllocManaged`.
pub struct ManagedReserve;

impl wrap::Reserve for ManagedReserve {
    fn reserve(&mut self, bytes: u64) -> Result<u64, i32> {
        let f = driver().alloc_managed.ok_or(CUDA_ERROR_NOT_FOUND)?;
        let mut base: DevicePtr = 0;
        // SAFETY: a live out-pointer; the program's context is current (it is allocating).
        match unsafe { f(&mut base, bytes as usize, CU_MEM_ATTACH_GLOBAL) } {
            CUDA_SUCCESS => Ok(base),
            code => Err(code),
        }
    }

    fn gpu_free_bytes(&mut self) -> Option<u64> {
        let f = driver().mem_get_info?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: live out-pointers.
        (unsafe { f(&mut free, &mut total) } == CUDA_SUCCESS).then_some(free as u64)
    }
}
