//! The `gallatin` system of `alloc`: Gallatin's device allocator on the same rounds, loaded from
//! the shared library `bench/gallatin/build.sh` builds against a checkout of Gallatin (which this
//! repository does not contain). The library's kernels run in this process, on the runtime's
//! device and its primary context; its entry points launch a kernel and wait for it, so the time
//! taken around a call is measured like the alignmalloc rows' (launch to completion, on the host).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use libloading::{Library, Symbol};

use super::Round;

/// Where the library is looked for when `ALIGNMALLOC_GALLATIN_LIB` is not set: `gallatin/` in
/// the target folder this program was built into (`target/release/alignmalloc` ->
/// `target/gallatin/libalignmalloc_gallatin.so`).
pub fn default_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ALIGNMALLOC_GALLATIN_LIB") {
        return Some(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok()?;
    Some(
        exe.parent()?
            .parent()?
            .join("gallatin")
            .join("libalignmalloc_gallatin.so"),
    )
}

/// The loaded harness with a pool set up.
pub struct Gallatin {
    library: Library,
}

type Init = unsafe extern "C" fn(u64, u64) -> i32;
type Prepare = unsafe extern "C" fn(*const u64, u32) -> i32;
type Step = unsafe extern "C" fn() -> i32;
type Check = unsafe extern "C" fn(u32, *mut u64, *mut u64) -> i32;
type Destroy = unsafe extern "C" fn();
type LastError = unsafe extern "C" fn() -> *const std::ffi::c_char;

impl Gallatin {
    /// Load the harness at `path` and give Gallatin a pool of `pool_bytes` of device memory.
    /// Call with the runtime's context current on this thread (the library uses the device's
    /// primary context, as the runtime does).
    pub fn load(path: &Path, pool_bytes: u64, seed: u64) -> anyhow::Result<Self> {
        // SAFETY: loading runs the library's initialisers; the harness is this project's own
        // code (bench/gallatin/harness.cu), whose only initialisers are the CUDA runtime's.
        let library = unsafe { Library::new(path) }
            .with_context(|| format!("loading the Gallatin harness {}", path.display()))?;
        let harness = Self { library };
        // SAFETY: amg_init(u64 pool_bytes, u64 seed) -> int, as harness.cu declares it.
        let status = unsafe { harness.symbol::<Init>(b"amg_init\0")?(pool_bytes, seed) };
        harness.ok(status, "amg_init")?;
        Ok(harness)
    }

    fn symbol<T>(&self, name: &[u8]) -> anyhow::Result<Symbol<'_, T>> {
        // SAFETY: every name asked for is declared in harness.cu with the type `T` given here.
        unsafe { self.library.get(name) }.with_context(|| {
            format!(
                "the Gallatin harness has no {}",
                String::from_utf8_lossy(name)
            )
        })
    }

    fn ok(&self, status: i32, what: &str) -> anyhow::Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: amg_error() returns a NUL-terminated static buffer of the library.
        let message = unsafe {
            let text = self.symbol::<LastError>(b"amg_error\0")?();
            std::ffi::CStr::from_ptr(text)
                .to_string_lossy()
                .into_owned()
        };
        bail!("Gallatin harness: {what} failed (CUDA error {status}): {message}")
    }

    /// Call the step `name` (an entry point that launches a kernel and waits for it); its time
    /// on the host in ms.
    ///
    /// # Safety
    /// `name` is one of the harness's `int name(void)` steps, and what it does to the round's
    /// buffers is allowed now.
    unsafe fn timed(&self, name: &[u8]) -> anyhow::Result<f64> {
        let step = self.symbol::<Step>(name)?;
        let started = Instant::now();
        // SAFETY: the caller vouches for the step.
        let status = unsafe { step() };
        let ms = started.elapsed().as_secs_f64() * 1e3;
        self.ok(status, &String::from_utf8_lossy(&name[..name.len() - 1]))?;
        Ok(ms)
    }

    /// One round over `sizes`: allocate (timed), count the null results and check the tags (or
    /// every byte), free (timed).
    pub fn round(&self, sizes: &[u64], every_byte: bool) -> anyhow::Result<Round> {
        let threads = u32::try_from(sizes.len()).context("too many threads")?;
        // SAFETY: amg_prepare(const u64* sizes, u32 threads) reads `threads` sizes.
        let status = unsafe { self.symbol::<Prepare>(b"amg_prepare\0")?(sizes.as_ptr(), threads) };
        self.ok(status, "amg_prepare")?;
        // SAFETY: amg_alloc() launches the allocation kernel over the prepared round.
        let alloc_ms = unsafe { self.timed(b"amg_alloc\0") }?;
        let (mut failures, mut bad) = (0u64, 0u64);
        // SAFETY: amg_check(u32, u64* failed, u64* bad) writes the two counters.
        let status = unsafe {
            self.symbol::<Check>(b"amg_check\0")?(u32::from(every_byte), &mut failures, &mut bad)
        };
        self.ok(status, "amg_check")?;
        // SAFETY: amg_free() frees the round's objects, each once.
        let free_ms = unsafe { self.timed(b"amg_free\0") }?;
        Ok(Round {
            alloc_started: None,
            alloc_ms,
            free_ms,
            failures,
            bad,
            bad_frees: 0,
            footprint_bytes: None,
            kernel_ms: None,
        })
    }
}

impl Drop for Gallatin {
    fn drop(&mut self) {
        if let Ok(destroy) = self.symbol::<Destroy>(b"amg_destroy\0") {
            // SAFETY: amg_destroy() releases the pool; no kernel of the harness runs any more.
            unsafe { destroy() };
        }
    }
}
