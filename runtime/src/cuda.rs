//! Finding and opening a CUDA GPU. Probing never panics: a machine without the driver or without a
//! device gets a [`ProbeError`] that says which, so callers can fall back or explain.

use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError};
use thiserror::Error;

/// Why no GPU could be opened.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// `libcuda.so` could not be loaded.
    #[error("no CUDA driver (libcuda.so) could be loaded")]
    NoDriver,
    /// The driver loaded but reports no device with that ordinal.
    #[error("the CUDA driver reports {count} device(s); device {ordinal} does not exist")]
    NoDevice {
        /// Devices the driver reports.
        count: i32,
        /// The ordinal asked for.
        ordinal: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver error: {0}")]
    Driver(DriverError),
}

impl From<DriverError> for ProbeError {
    fn from(e: DriverError) -> Self {
        ProbeError::Driver(e)
    }
}

/// What the runtime needs to know about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// (major, minor) compute capability.
    pub compute_capability: (i32, i32),
    /// Device memory in bytes.
    pub total_bytes: usize,
    /// Free device memory when probed.
    pub free_bytes: usize,
}

/// Run `f` with `context` current on this thread, then make current again whatever was
/// (CUDA runtime API calls in `f`, such as `cudaMemcpyToSymbol`, act on `context`'s device; the
/// caller's own current device is left as it was).
pub fn with_current<T>(context: &CudaContext, f: impl FnOnce() -> T) -> Result<T, DriverError> {
    let mut previous: cudarc::driver::sys::CUcontext = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local.
    unsafe { cudarc::driver::sys::cuCtxGetCurrent(&mut previous) }.result()?;
    context.bind_to_thread()?;
    let out = f();
    // SAFETY: `previous` is null or the context that was current on this thread just before;
    // whoever made it current keeps it alive.
    unsafe { cudarc::driver::sys::cuCtxSetCurrent(previous) }.result()?;
    Ok(out)
}

/// How many devices the driver reports.
pub fn device_count() -> Result<usize, ProbeError> {
    // SAFETY: only tries to open the library through the loader; no symbol is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(ProbeError::NoDriver);
    }
    Ok(CudaContext::device_count()?.max(0) as usize)
}

/// Open device `ordinal`: its primary context and what it is.
pub fn open(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), ProbeError> {
    // SAFETY: only tries to open the library through the loader; no symbol is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(ProbeError::NoDriver);
    }
    let count = CudaContext::device_count()?;
    if ordinal >= count.max(0) as usize {
        return Err(ProbeError::NoDevice { count, ordinal });
    }
    let context = CudaContext::new(ordinal)?;
    let (free_bytes, total_bytes) = context.mem_get_info()?;
    let info = DeviceInfo {
        ordinal,
        name: context.name()?,
        compute_capability: context.compute_capability()?,
        total_bytes,
        free_bytes,
    };
    tracing::info!(?info, "opened CUDA device");
    Ok((context, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_never_panics() {
        // On a machine without a GPU this is an error; with one it opens. Either way, no panic.
        match open(0) {
            Ok((_, info)) => assert!(info.total_bytes > 0),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
        assert!(open(1 << 20).is_err());
    }
}
