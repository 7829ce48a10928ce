//! The selftest checks as kernels (`device/kernels/selftest.cu`) launched through the runtime.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{device, translator};

use std::sync::Arc;

use alignmalloc::{Handle, Runtime};
use anyhow::Context;
use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};

use super::{BAD_CHECKS, Check, Device, tag};
use crate::launch::grid;

pub struct GpuDevice<'a> {
    rt: &'a Runtime,
    _module: Arc<CudaModule>,
    fill: CudaFunction,
    free: CudaFunction,
    rounds: CudaFunction,
    bad: CudaFunction,
    touch: CudaFunction,
}

impl<'a> GpuDevice<'a> {
    pub fn new(rt: &'a Runtime) -> anyhow::Result<Self> {
        let module = rt.compile(device::SELFTEST.path, device::SELFTEST.text)?;
        let load = |name| {
            module
                .load_function(name)
                .with_context(|| format!("loading {name}"))
        };
        Ok(Self {
            fill: load("am_selftest_fill")?,
            free: load("am_selftest_free")?,
            rounds: load("am_selftest_rounds")?,
            bad: load("am_selftest_bad")?,
            touch: load("am_selftest_touch")?,
            _module: module,
            rt,
        })
    }
}

/// Threads and bytes per thread of the fault check: one warp, 32 x 2 MiB, a chunk of exactly 32
/// VABlocks, so the driver's prefetching cannot reach past it.
const TOUCH_THREADS: u32 = 32;
const TOUCH_BYTES: u64 = 2 << 20;

impl GpuDevice<'_> {
    /// (d): the host writes a 64 MiB arranged chunk (so every page is resident on the host), a
    /// kernel touches every 4 KiB page of it, then the host reads it all back. Migrations must
    /// be exactly the chunk each way, GPU faults between 1 and one per page, and every record
    /// must fall in the chunk.
    pub fn fault_check(&self) -> anyhow::Result<Check> {
        let started = std::time::Instant::now();
        let mut check = Check::new("(d) fault counters");
        let rt = self.rt;
        let objects = rt.alloc_arranged(TOUCH_THREADS, TOUCH_BYTES)?;
        let chunk = objects.handles()[0].chunk_base(translator::SlotOrder::Pattern)?;
        let bytes = u64::from(TOUCH_THREADS) * TOUCH_BYTES;
        let mut expected_sum = 0u64;
        for (t, h) in objects.handles().iter().enumerate() {
            let words: Vec<u8> = (0..TOUCH_BYTES / 8)
                .flat_map(|w| tag(t as u64, w).to_le_bytes())
                .collect();
            rt.write(*h, 0, &words)?;
            expected_sum = (0..TOUCH_BYTES / 4096)
                .map(|p| tag(t as u64, p * 512))
                .fold(expected_sum, u64::wrapping_add);
        }
        rt.take_faults()?; // what came before the kernel

        let stream = rt.stream()?;
        let handles = stream.clone_htod(&objects.words())?;
        let mut sum = stream.alloc_zeros::<u64>(1)?;
        // SAFETY: am_selftest_touch(mailbox, const u64* handles, unsigned threads, u64
        // bytes_each, unsigned long long* sum): TOUCH_THREADS handles of TOUCH_BYTES each, one
        // sum word; all outlive the wait below.
        let launch = unsafe {
            rt.launch(&self.touch, grid(u64::from(TOUCH_THREADS)), |a| {
                a.arg(&handles)
                    .arg(&TOUCH_THREADS)
                    .arg(&TOUCH_BYTES)
                    .arg(&mut sum);
            })
        }?;
        launch.wait()?;
        let kernel = rt.take_faults()?;
        let got_sum = stream.clone_dtoh(&sum)?[0];
        if got_sum != expected_sum {
            check.fail(format!(
                "the kernel read {got_sum:#x}, expected {expected_sum:#x}"
            ));
        }
        let mut back = vec![0u8; TOUCH_BYTES as usize];
        for h in objects.handles() {
            rt.read(*h, 0, &mut back)?;
        }
        let host = rt.take_faults()?;
        rt.free_arranged(objects)?;

        let pages = bytes / 4096;
        let in_chunk = kernel.by_chunk.get(&chunk).copied().unwrap_or_default();
        check.figure("pages touched", pages);
        check.figure("kernel: HtoD bytes", kernel.total.htod_bytes);
        check.figure("kernel: GPU page faults", kernel.total.gpu_page_faults);
        check.figure("kernel: HtoD bytes in the chunk", in_chunk.htod_bytes);
        check.figure("host read: DtoH bytes", host.total.dtoh_bytes);
        check.figure("host read: CPU page faults", host.total.cpu_page_faults);
        check.figure(
            "records dropped",
            kernel.dropped_records + host.dropped_records,
        );
        if kernel.total.htod_bytes != bytes || in_chunk.htod_bytes != bytes {
            check.fail(format!(
                "the kernel migrated {} bytes to the GPU ({} in the chunk), expected {bytes}",
                kernel.total.htod_bytes, in_chunk.htod_bytes
            ));
        }
        if !(1..=pages).contains(&kernel.total.gpu_page_faults) {
            check.fail(format!(
                "{} GPU page faults for {pages} pages",
                kernel.total.gpu_page_faults
            ));
        }
        if host.total.dtoh_bytes != bytes || host.total.cpu_page_faults == 0 {
            check.fail(format!(
                "reading it back migrated {} bytes to the host with {} CPU faults, expected {bytes}",
                host.total.dtoh_bytes, host.total.cpu_page_faults
            ));
        }
        Ok(check.finish(started))
    }
}

impl Device for GpuDevice<'_> {
    fn fill(&self, sizes: &[u64]) -> anyhow::Result<(Vec<Handle>, Vec<u32>)> {
        let stream = self.rt.stream()?;
        let threads = sizes.len() as u32;
        let sizes_dev = stream.clone_htod(sizes)?;
        let mut handles = stream.alloc_zeros::<u64>(sizes.len())?;
        let mut statuses = stream.alloc_zeros::<u32>(sizes.len())?;
        // SAFETY: am_selftest_fill(mailbox, const u64* sizes, unsigned threads, u64* handles,
        // unsigned* statuses): the arrays hold `threads` elements and outlive the wait below.
        let launch = unsafe {
            self.rt.launch(&self.fill, grid(u64::from(threads)), |a| {
                a.arg(&sizes_dev)
                    .arg(&threads)
                    .arg(&mut handles)
                    .arg(&mut statuses);
            })
        }?;
        launch.wait()?;
        let handles = stream
            .clone_dtoh(&handles)?
            .into_iter()
            .map(Handle)
            .collect();
        Ok((handles, stream.clone_dtoh(&statuses)?))
    }

    fn free_all(&self, handles: &[Handle]) -> anyhow::Result<Vec<u32>> {
        let stream = self.rt.stream()?;
        let threads = handles.len() as u32;
        let words: Vec<u64> = handles.iter().map(|h| h.0).collect();
        let handles_dev = stream.clone_htod(&words)?;
        let mut statuses = stream.alloc_zeros::<u32>(handles.len())?;
        // SAFETY: am_selftest_free(mailbox, const u64* handles, unsigned threads, unsigned*
        // lane_statuses): both arrays hold `threads` elements and outlive the wait below.
        let launch = unsafe {
            self.rt.launch(&self.free, grid(u64::from(threads)), |a| {
                a.arg(&handles_dev).arg(&threads).arg(&mut statuses);
            })
        }?;
        launch.wait()?;
        Ok(stream.clone_dtoh(&statuses)?)
    }

    fn rounds(&self, threads: u32, rounds: u32, seed: u64) -> anyhow::Result<[u64; 5]> {
        let stream = self.rt.stream()?;
        let mut counters = stream.alloc_zeros::<u64>(5)?;
        // SAFETY: am_selftest_rounds(mailbox, unsigned rounds, u64 seed, unsigned long long*
        // counters): five counters, outliving the wait below. Every launched thread takes part.
        let launch = unsafe {
            self.rt.launch(&self.rounds, grid(u64::from(threads)), |a| {
                a.arg(&rounds).arg(&seed).arg(&mut counters);
            })
        }?;
        // Awaited rather than waited for, so the async completion runs on the GPU too.
        tokio::runtime::Builder::new_current_thread()
            .build()?
            .block_on(launch.finished())?;
        let c = stream.clone_dtoh(&counters)?;
        Ok([c[0], c[1], c[2], c[3], c[4]])
    }

    fn bad_input(
        &self,
        warps: u32,
        arena_bytes: u64,
        over_limit: u64,
    ) -> anyhow::Result<Vec<(u64, u64)>> {
        let stream = self.rt.stream()?;
        let n = warps as usize * BAD_CHECKS.len() * 2;
        let mut results = stream.alloc_zeros::<u64>(n)?;
        // SAFETY: am_selftest_bad(mailbox, u64 arena_bytes, u64 over_limit, u64* results): two
        // words per check per warp, outliving the wait below.
        let launch = unsafe {
            self.rt.launch(&self.bad, grid(u64::from(warps * 32)), |a| {
                a.arg(&arena_bytes).arg(&over_limit).arg(&mut results);
            })
        }?;
        launch.wait()?;
        Ok(stream
            .clone_dtoh(&results)?
            .chunks(2)
            .map(|p| (p[0], p[1]))
            .collect())
    }
}
