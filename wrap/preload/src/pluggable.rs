//! Allocator hooks that frameworks load by name: PyTorch's `CUDAPluggableAllocator` is given
//! `alignmalloc_torch_alloc` and `alignmalloc_torch_free`, and the Python package calls the same
//! two (through ctypes) for CuPy and Numba, and `alignmalloc_report_json` for the report. They
//! serve the pool of the wrapped `cuMemAllocManaged`, so a Python program gets the arena, the
//! settings (`ALIGNMALLOC_WRAP_*`) and the report of `alignmalloc wrap` without being wrapped.
//!
//! Invariants: nothing unwinds out of an exported function; a failure answers null (or nothing,
//! for a free), leaves its CUDA result for [`alignmalloc_last_result`] on the calling thread, is
//! counted, and logs a tracing event; a free the pool refuses changes nothing.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::driver::{
    CU_MEM_ATTACH_GLOBAL, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
    CuResult, Stream,
};
use crate::{hooks, state, stream_frees};

/// Allocations the hooks could not serve, and frees they refused or the driver failed.
pub static FAILED_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
pub static FAILED_FREES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The CUDA result of this thread's last failed hook call (0: none since it was read).
    static LAST_RESULT: Cell<CuResult> = const { Cell::new(CUDA_SUCCESS) };
}

pub fn failed(counter: &AtomicU64, result: CuResult) {
    counter.fetch_add(1, Ordering::Relaxed);
    let _ = LAST_RESULT.try_with(|last| last.set(result));
}

/// PyTorch's allocator hook: `size` bytes of managed memory from the arena (the driver's past
/// its cap, as the settings say), or null with the reason in [`alignmalloc_last_result`]. Zero
/// bytes answer null with no failure (a framework asks for empty tensors).
///
/// # Safety
/// `stream` is a stream of the current context or null (it is not used to allocate).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn alignmalloc_torch_alloc(
    size: isize,
    device: c_int,
    _stream: Stream,
) -> *mut c_void {
    let body = || {
        if size == 0 {
            return std::ptr::null_mut();
        }
        if size < 0 {
            tracing::error!(size, device, "allocation of a negative size refused");
            failed(&FAILED_ALLOCATIONS, CUDA_ERROR_INVALID_VALUE);
            return std::ptr::null_mut();
        }
        stream_frees::reap(false);
        let mut address = 0;
        // SAFETY: a live out-pointer, a positive size and global attachment: the wrapped entry
        // point's contract.
        let alloc = |address: &mut u64| unsafe {
            hooks::cuMemAllocManaged(address, size as usize, CU_MEM_ATTACH_GLOBAL)
        };
        let mut result = alloc(&mut address);
        // No room: wait for the frees still pending on their streams, then once more.
        if result == CUDA_ERROR_OUT_OF_MEMORY && stream_frees::reap(true) > 0 {
            result = alloc(&mut address);
        }
        if result != CUDA_SUCCESS {
            // PyTorch's pluggable allocator does not check: it makes a tensor at address 0.
            tracing::error!(
                size,
                device,
                result,
                "managed allocation failed: null answered (a caller that does not check, as \
                 PyTorch's pluggable allocator, gets a tensor at address 0)"
            );
            failed(&FAILED_ALLOCATIONS, result);
            return std::ptr::null_mut();
        }
        address as *mut c_void
    };
    std::panic::catch_unwind(body).unwrap_or_else(|_| {
        failed(&FAILED_ALLOCATIONS, CUDA_ERROR_INVALID_VALUE);
        std::ptr::null_mut()
    })
}

/// PyTorch's free hook: `pointer` (from [`alignmalloc_torch_alloc`]) goes back to the pool once
/// the work queued on `stream` so far is done, without the host waiting for it (the
/// `stream_frees` module). A pointer the driver does not know is refused and counted (a second
/// free of an arena allocation, when the pool refuses it); null is ignored.
///
/// # Safety
/// `stream` is a stream of the current context or null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn alignmalloc_torch_free(
    pointer: *mut c_void,
    size: isize,
    device: c_int,
    stream: Stream,
) {
    if pointer.is_null() {
        return;
    }
    let body = || {
        let result = stream_frees::free(pointer as u64, stream);
        if result != CUDA_SUCCESS {
            tracing::warn!(?pointer, size, device, result, "free refused");
            failed(&FAILED_FREES, result);
        }
    };
    if std::panic::catch_unwind(body).is_err() {
        failed(&FAILED_FREES, CUDA_ERROR_INVALID_VALUE);
    }
}

/// The CUDA result of the calling thread's last failed hook call, 0 if none failed since the
/// last read (reading clears it).
#[unsafe(no_mangle)]
pub extern "C" fn alignmalloc_last_result() -> c_int {
    LAST_RESULT
        .try_with(|last| last.replace(CUDA_SUCCESS))
        .unwrap_or(CUDA_SUCCESS)
}

/// Hook calls that failed: allocations into `allocations`, frees into `frees` (either may be
/// null).
///
/// # Safety
/// Each non-null pointer is valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn alignmalloc_failures(allocations: *mut u64, frees: *mut u64) {
    // SAFETY: the caller's pointers, checked non-null.
    unsafe {
        if !allocations.is_null() {
            *allocations = FAILED_ALLOCATIONS.load(Ordering::Relaxed);
        }
        if !frees.is_null() {
            *frees = FAILED_FREES.load(Ordering::Relaxed);
        }
    }
}

/// The report so far as JSON (the `alignmalloc wrap` report: every allocation with its size,
/// lifetime and traffic). Writes at most `capacity - 1` bytes and a NUL into `buffer` (none if
/// it is null or `capacity` is 0) and answers the JSON's length: a caller whose buffer was too
/// small asks again with that length plus one.
///
/// # Safety
/// `buffer` is null or valid for `capacity` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn alignmalloc_report_json(buffer: *mut c_char, capacity: usize) -> usize {
    let Ok(json) = std::panic::catch_unwind(|| {
        stream_frees::reap(false);
        state::report_json()
    }) else {
        return 0;
    };
    if !buffer.is_null() && capacity > 0 {
        let n = json.len().min(capacity - 1);
        // SAFETY: the caller's buffer holds `capacity` bytes; `n + 1` of them are written.
        unsafe {
            std::ptr::copy_nonoverlapping(json.as_ptr(), buffer.cast::<u8>(), n);
            *buffer.add(n) = 0;
        }
    }
    json.len()
}
