//! Gallatin's device allocator as a baseline: the `gallatin` system of `alloc` (the same rounds)
//! and the `gallatin-arrays` system of `walk` on a changing graph (per-vertex lists changed by
//! the kernel every list system shares), loaded from the shared library
//! `bench/gallatin/build.sh` builds against a checkout of Gallatin (which this repository does
//! not contain). The library's kernels run in this process, on the runtime's
//! device and its primary context; its entry points launch a kernel and wait for it, so the time
//! taken around a call is measured like the alignmalloc rows' (launch to completion, on the host).

use std::path::{Path, PathBuf};
use std::time::Instant;

use alignmalloc::Runtime;
use anyhow::{Context, bail};
use libloading::{Library, Symbol};

use crate::alloc::Round;
use crate::progress::note;

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

/// The Gallatin harness beside `rt` (on its device and context) with a pool of `pool_bytes`, when
/// the library is there; else why not.
pub fn load_beside(rt: &Runtime, pool_bytes: u64, seed: u64) -> (Option<Gallatin>, Option<String>) {
    let Some(path) = default_path() else {
        return (None, Some("no place to look for the harness".into()));
    };
    if !path.exists() {
        return (
            None,
            Some(format!(
                "not built: {} is missing (GALLATIN_DIR=... bash bench/gallatin/build.sh, docs/benchmarks.md)",
                path.display()
            )),
        );
    }
    let loaded = rt
        .context()
        .and_then(|ctx| ctx.bind_to_thread().map_err(Into::into))
        .map_err(anyhow::Error::from)
        .and_then(|()| Gallatin::load(&path, pool_bytes, seed));
    match loaded {
        Ok(g) => {
            note!(
                "gallatin: {} with a pool of {:.1} GiB",
                path.display(),
                pool_bytes as f64 / (1u64 << 30) as f64
            );
            (Some(g), None)
        }
        Err(e) => (None, Some(format!("{e:#}"))),
    }
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

type ListsInit = unsafe extern "C" fn(u32, u32) -> i32;
type ListsPrepare =
    unsafe extern "C" fn(*const u32, *const u32, *const u32, *const u32, *const u32, u32) -> i32;
type ListsOut = unsafe extern "C" fn(*mut u32) -> i32;
type ListsArrays = unsafe extern "C" fn(*mut u64, *mut u64);
type ListsRead = unsafe extern "C" fn(*mut u32, *mut u32) -> i32;

/// One batch of a changing graph as the harness takes it (device/kernels/graph_update.cuh's
/// `Batch`): `count` touched vertices, `count + 1` starts into `adds` and into `drops`.
pub struct ListBatch<'a> {
    pub touched: &'a [u32],
    pub starts: &'a [u32],
    pub adds: &'a [u32],
    pub drop_starts: &'a [u32],
    pub drops: &'a [u32],
}

/// The `gallatin-arrays` lists: per-vertex neighbour lists on Gallatin's allocator, kept by the
/// harness (`amg_lists_*`). Freed with every list when dropped.
pub struct GallatinLists<'g> {
    harness: &'g Gallatin,
    vertices: u32,
}

impl Gallatin {
    /// Zeroed lists, degrees and capacities for `vertices` vertices, growing by capacity >>
    /// `growth_shift` (graph_update.cuh's `resized_capacity`).
    pub fn lists(&self, vertices: u32, growth_shift: u32) -> anyhow::Result<GallatinLists<'_>> {
        // SAFETY: amg_lists_init(u32 vertices, unsigned growth_shift) -> int allocates the
        // harness's arrays.
        let status =
            unsafe { self.symbol::<ListsInit>(b"amg_lists_init\0")?(vertices, growth_shift) };
        self.ok(status, "amg_lists_init")?;
        Ok(GallatinLists {
            harness: self,
            vertices,
        })
    }
}

impl GallatinLists<'_> {
    /// Apply `batch`: copy it (untimed), then the update kernel; its time on the host in ms,
    /// and each touched vertex's status.
    pub fn update(&self, batch: &ListBatch<'_>) -> anyhow::Result<(f64, Vec<u32>)> {
        let count = u32::try_from(batch.touched.len()).context("too many touched vertices")?;
        anyhow::ensure!(
            batch.starts.len() == batch.touched.len() + 1
                && batch.drop_starts.len() == batch.touched.len() + 1
                && batch.starts.last() == Some(&(batch.adds.len() as u32))
                && batch.drop_starts.last() == Some(&(batch.drops.len() as u32)),
            "a batch's starts must end at its adds and drops"
        );
        let h = self.harness;
        // SAFETY: amg_lists_prepare reads count, count + 1, starts[count], count + 1 and
        // drop_starts[count] entries of the five arrays, whose lengths were checked above.
        let status = unsafe {
            h.symbol::<ListsPrepare>(b"amg_lists_prepare\0")?(
                batch.touched.as_ptr(),
                batch.starts.as_ptr(),
                batch.adds.as_ptr(),
                batch.drop_starts.as_ptr(),
                batch.drops.as_ptr(),
                count,
            )
        };
        h.ok(status, "amg_lists_prepare")?;
        // SAFETY: amg_lists_update() runs the update kernel over the prepared batch and the
        // harness's own lists.
        let ms = unsafe { h.timed(b"amg_lists_update\0") }?;
        let mut statuses = vec![0u32; batch.touched.len()];
        // SAFETY: amg_lists_statuses(u32* out) writes one status per touched vertex.
        let status =
            unsafe { h.symbol::<ListsOut>(b"amg_lists_statuses\0")?(statuses.as_mut_ptr()) };
        h.ok(status, "amg_lists_statuses")?;
        Ok((ms, statuses))
    }

    /// Device addresses of the per-vertex lists (raw pointers) and degrees, for a walk kernel.
    pub fn arrays(&self) -> anyhow::Result<(u64, u64)> {
        let (mut lists, mut degrees) = (0u64, 0u64);
        // SAFETY: amg_lists_arrays(u64*, u64*) writes two addresses.
        unsafe {
            self.harness.symbol::<ListsArrays>(b"amg_lists_arrays\0")?(&mut lists, &mut degrees)
        };
        Ok((lists, degrees))
    }

    /// Every vertex's degree and capacity.
    pub fn read(&self) -> anyhow::Result<(Vec<u32>, Vec<u32>)> {
        let mut degrees = vec![0u32; self.vertices as usize];
        let mut capacities = vec![0u32; self.vertices as usize];
        // SAFETY: amg_lists_read(u32*, u32*) writes `vertices` entries to each.
        let status = unsafe {
            self.harness.symbol::<ListsRead>(b"amg_lists_read\0")?(
                degrees.as_mut_ptr(),
                capacities.as_mut_ptr(),
            )
        };
        self.harness.ok(status, "amg_lists_read")?;
        Ok((degrees, capacities))
    }
}

impl Drop for GallatinLists<'_> {
    fn drop(&mut self) {
        if let Ok(free) = self.harness.symbol::<Step>(b"amg_lists_free\0") {
            // SAFETY: amg_lists_free() frees every list and the arrays; no walk reads them any
            // more (the borrow of this value has ended).
            unsafe { free() };
        }
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
