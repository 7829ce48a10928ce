//! `alloc` on the GPU: the kernels of `device/kernels/alloc.cu`.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, orchestrator};

use std::time::Instant;

use alignmalloc::Runtime;
use anyhow::Context;
use cudarc::driver::sys::{CUevent_flags, CUlimit};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaModule, CudaStream, DevicePtr, DevicePtrMut, PushKernelArg,
};
use orchestrator::{LaneStatus, Status};

use super::{Round, Rounds, System};
use crate::launch::grid;

pub struct GpuRounds<'a> {
    rt: &'a Runtime,
    /// The `gallatin` system, when its harness is built.
    gallatin: Option<crate::gallatin::Gallatin>,
    _module: std::sync::Arc<CudaModule>,
    alloc: CudaFunction,
    free: CudaFunction,
    tag: CudaFunction,
    check: CudaFunction,
    /// Whether CUDA's heap was sized for the rounds (the `cuda-malloc` rows run).
    cuda_heap: bool,
    /// Events around each kernel (`--kernel-times`): start and end, made once.
    kernel_events: Option<(CudaEvent, CudaEvent)>,
    /// alignmalloc-contiguous frees by address (`--free-by-pointer`).
    free_by_pointer: bool,
}

/// am_free's mode bit (device/kernels/alloc.cu): free by the object's address.
const FREE_BY_POINTER: u32 = 4;

impl<'a> GpuRounds<'a> {
    /// Compile the kernels and, with `cuda_heap`, size CUDA's device heap for a round of
    /// `budget` bytes (before any kernel calls malloc, as CUDA requires). Without it the
    /// `cuda-malloc` rows are left out and the heap keeps CUDA's default (8 MiB): CUDA reserves
    /// the heap at the first launch of the module, which under `--gpu-memory-gib` would have to
    /// come out of what is left.
    pub fn new(
        rt: &'a Runtime,
        budget: u64,
        gallatin: Option<crate::gallatin::Gallatin>,
        cuda_heap: bool,
        kernel_times: bool,
    ) -> anyhow::Result<Self> {
        if cuda_heap {
            // Headroom for the heap's own rounding and bookkeeping.
            let heap = budget + budget / 2 + (256 << 20);
            rt.context()?
                .set_limit(CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, heap as usize)
                .context("sizing CUDA's device heap")?;
        }
        let module = rt.compile(device::ALLOC.path, device::ALLOC.text)?;
        let load = |name: &str| {
            let kernel = module
                .load_function(name)
                .with_context(|| format!("loading {name}"))?;
            log_occupancy(rt, name, &kernel)?;
            anyhow::Ok(kernel)
        };
        Ok(Self {
            alloc: load("am_alloc")?,
            free: load("am_free")?,
            tag: load("am_tag")?,
            check: load("am_check")?,
            _module: module,
            rt,
            gallatin,
            cuda_heap,
            kernel_events: if kernel_times {
                let context = rt.context()?;
                let timed = Some(CUevent_flags::CU_EVENT_DEFAULT);
                Some((context.new_event(timed)?, context.new_event(timed)?))
            } else {
                None
            },
            free_by_pointer: false,
        })
    }

    /// Let alignmalloc-contiguous free each object by its address instead of its handle.
    pub fn free_by_pointer(mut self, by_pointer: bool) -> Self {
        self.free_by_pointer = by_pointer;
        self
    }
}

/// How many warps of `kernel` the GPU holds at once in blocks of 256 threads: a warp that
/// waits for the host keeps its place, so this bounds the requests in flight.
fn log_occupancy(rt: &Runtime, name: &str, kernel: &CudaFunction) -> anyhow::Result<()> {
    let block = grid(u64::MAX).block_dim.0;
    let blocks_per_sm = kernel.occupancy_max_active_blocks_per_multiprocessor(block, 0, None)?;
    let sms = rt.context()?.attribute(
        cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )?;
    tracing::info!(
        kernel = name,
        registers = kernel.num_regs()?,
        local_bytes = kernel.local_size_bytes()?,
        blocks_per_sm,
        resident_warps = blocks_per_sm as u64 * sms as u64 * u64::from(block / 32),
        "kernel occupancy"
    );
    Ok(())
}

impl Rounds for GpuRounds<'_> {
    fn runtime(&self) -> &Runtime {
        self.rt
    }

    fn systems(&self) -> Vec<System> {
        let mut systems = vec![System::Alignmalloc, System::AlignmallocContiguous];
        if self.cuda_heap {
            systems.push(System::CudaMalloc);
        }
        if self.gallatin.is_some() {
            systems.push(System::Gallatin);
        }
        systems
    }

    fn round(&mut self, system: System, sizes: &[u64], every_byte: bool) -> anyhow::Result<Round> {
        if system == System::Gallatin {
            let harness = self
                .gallatin
                .as_ref()
                .context("the gallatin harness is not loaded")?;
            return harness.round(sizes, every_byte);
        }
        let rt = self.rt;
        let every_byte = u32::from(every_byte);
        let stream = rt.stream()?.clone();
        let threads = sizes.len() as u32;
        let mode = system as u32;
        let sizes_dev = stream.clone_htod(sizes)?;
        let mut handles = stream.alloc_zeros::<u64>(sizes.len())?;
        let mut statuses = stream.alloc_zeros::<u32>(sizes.len())?;
        let mut bad = stream.alloc_zeros::<u64>(1)?;
        let config = grid(sizes.len() as u64);
        // The timed kernels take raw device pointers, as Gallatin's harness passes its own: with a
        // slice for an argument, cudarc waits on and records the slice's events around every
        // launch (the runtime's context has streams of its own), several driver calls inside
        // the timed window. This round's work all goes to `stream`, in order.
        let sizes_at = sizes_dev.device_ptr(&stream).0;
        let handles_at = handles.device_ptr_mut(&stream).0;
        let statuses_at = statuses.device_ptr_mut(&stream).0;

        let before = rt.service_stats();
        self.mark_start(&stream)?;
        let started = Instant::now();
        let alloc_started = started;
        // SAFETY: am_alloc(mailbox, const u64* sizes, unsigned threads, unsigned mode, u64*
        // handles, unsigned* statuses): `threads` of each, in slices that outlive the wait below.
        let launch = unsafe {
            rt.launch(&self.alloc, config, |a| {
                a.arg(&sizes_at)
                    .arg(&threads)
                    .arg(&mode)
                    .arg(&handles_at)
                    .arg(&statuses_at);
            })
        }?;
        self.mark_end(&stream)?;
        launch.wait()?;
        let alloc_ms = started.elapsed().as_secs_f64() * 1e3;
        let alloc_kernel_ms = self.kernel_ms()?;
        super::log_service(rt, system, threads, &before, "alloc");
        let footprint_bytes = system.is_ours().then(|| super::footprint(rt));
        let failures = stream
            .clone_dtoh(&statuses)?
            .iter()
            .filter(|&&s| s != Status::Ok as u32)
            .count() as u64;

        // SAFETY: am_tag(mailbox, const u64* handles, const u64* sizes, unsigned threads,
        // unsigned mode, unsigned every_byte): the round's handles and sizes.
        unsafe {
            rt.launch(&self.tag, config, |a| {
                a.arg(&handles)
                    .arg(&sizes_dev)
                    .arg(&threads)
                    .arg(&mode)
                    .arg(&every_byte);
            })
        }?
        .wait()?;
        // SAFETY: am_check(mailbox, const u64* handles, const u64* sizes, unsigned threads,
        // unsigned mode, unsigned every_byte, unsigned long long* bad): as am_tag, plus one
        // counter.
        unsafe {
            rt.launch(&self.check, config, |a| {
                a.arg(&handles)
                    .arg(&sizes_dev)
                    .arg(&threads)
                    .arg(&mode)
                    .arg(&every_byte)
                    .arg(&mut bad);
            })
        }?
        .wait()?;
        let bad = stream.clone_dtoh(&bad)?[0];

        let free_mode = if system.frees_by_address(self.free_by_pointer) {
            mode | FREE_BY_POINTER
        } else {
            mode
        };
        let counted = rt.counters()?;
        let before = rt.service_stats();
        self.mark_start(&stream)?;
        let started = Instant::now();
        // SAFETY: am_free(mailbox, const u64* handles, unsigned threads, unsigned mode,
        // unsigned* statuses): the round's handles, each freed once, in slices that outlive the
        // wait below.
        let launch = unsafe {
            rt.launch(&self.free, config, |a| {
                a.arg(&handles_at)
                    .arg(&threads)
                    .arg(&free_mode)
                    .arg(&statuses_at);
            })
        }?;
        self.mark_end(&stream)?;
        launch.wait()?;
        let free_ms = started.elapsed().as_secs_f64() * 1e3;
        let free_kernel_ms = self.kernel_ms()?;
        super::log_service(rt, system, threads, &before, "free");
        let bad_frees = if system == System::CudaMalloc {
            // CUDA's free reports nothing: the kernel's statuses are all Ok.
            stream
                .clone_dtoh(&statuses)?
                .iter()
                .filter(|&&s| s != LaneStatus::Ok as u32)
                .count() as u64
        } else {
            // Every refusal, the caches' included, shows in the counters.
            let objects = stream
                .clone_dtoh(&handles)?
                .iter()
                .filter(|&&h| h != 0)
                .count();
            super::posted_frees_failed(rt, &counted, objects as u64)?
        };
        // The allocator's invariants are checked once the row's rounds are done (check_empty),
        // not here: walking the resolver's tables between rounds leaves the host's caches cold
        // for the next launch, which then takes about 0.01 ms more on the GPU's clock (CUDA
        // malloc's rounds too, with this check added), a cost of the harness, not of the
        // allocator it times.
        Ok(Round {
            alloc_started: Some(alloc_started),
            alloc_ms,
            free_ms,
            failures,
            bad,
            bad_frees,
            footprint_bytes,
            kernel_ms: alloc_kernel_ms.zip(free_kernel_ms),
        })
    }
}

impl GpuRounds<'_> {
    /// With `--kernel-times`: the start event, recorded before the timed window opens.
    fn mark_start(&self, stream: &CudaStream) -> anyhow::Result<()> {
        if let Some((start, _)) = &self.kernel_events {
            start.record(stream)?;
        }
        Ok(())
    }

    /// With `--kernel-times`: the end event, right after the launch (inside the window).
    fn mark_end(&self, stream: &CudaStream) -> anyhow::Result<()> {
        if let Some((_, end)) = &self.kernel_events {
            end.record(stream)?;
        }
        Ok(())
    }

    /// The GPU's time between the two events, once the kernel finished.
    fn kernel_ms(&self) -> anyhow::Result<Option<f64>> {
        match &self.kernel_events {
            Some((start, end)) => Ok(Some(f64::from(start.elapsed_ms(end)?))),
            None => Ok(None),
        }
    }
}
