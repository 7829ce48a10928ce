//! `alloc` on the sim backend: CPU warps through the runtime's mailbox, as the kernels do.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::translator;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use alignmalloc::CpuWarp;
use alignmalloc::{Handle, Runtime};
use translator::WARP_LANES;

use super::{Round, Rounds, System};
use crate::selftest::tag;

pub struct SimRounds<'a> {
    rt: &'a Runtime,
    /// alignmalloc-contiguous frees by address (`--free-by-pointer`).
    free_by_pointer: bool,
}

impl<'a> SimRounds<'a> {
    pub fn new(rt: &'a Runtime) -> Self {
        Self {
            rt,
            free_by_pointer: false,
        }
    }

    /// Let alignmalloc-contiguous free each object by its address instead of its handle.
    pub fn free_by_pointer(mut self, by_pointer: bool) -> Self {
        self.free_by_pointer = by_pointer;
        self
    }
}

/// Run `f` on every warp with its first thread and lane mask.
fn warps(
    rt: &Runtime,
    threads: usize,
    f: impl Fn(&CpuWarp<'_>, usize, u32) + Sync,
) -> anyhow::Result<()> {
    rt.run_warps(threads.div_ceil(WARP_LANES) as u32, |warp| {
        let (first, mask) = warp.lanes_of(threads as u64);
        f(&warp, first as usize, mask);
    })?;
    Ok(())
}

impl Rounds for SimRounds<'_> {
    fn runtime(&self) -> &Runtime {
        self.rt
    }

    fn systems(&self) -> Vec<System> {
        vec![System::Alignmalloc, System::AlignmallocContiguous]
    }

    fn round(&mut self, system: System, sizes: &[u64], every_byte: bool) -> anyhow::Result<Round> {
        let rt = self.rt;
        let handles: Vec<AtomicU64> = sizes.iter().map(|_| AtomicU64::new(0)).collect();
        let failures = AtomicU64::new(0);
        let threads = sizes.len() as u32;
        let before = rt.service_stats();
        let started = Instant::now();
        let alloc_started = started;
        warps(rt, sizes.len(), |warp, first, mask| {
            let n = mask.count_ones() as usize;
            let mut asked = [0u64; WARP_LANES];
            asked[..n].copy_from_slice(&sizes[first..first + n]);
            let got = match system {
                System::AlignmallocContiguous => warp.malloc_contiguous(mask, &asked),
                _ => warp.malloc(mask, &asked),
            };
            match got {
                Ok(h) => {
                    for l in 0..(mask.count_ones() as usize) {
                        handles[first + l].store(h[l].0, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    failures.fetch_add(u64::from(mask.count_ones()), Ordering::Relaxed);
                }
            }
        })?;
        let alloc_ms = started.elapsed().as_secs_f64() * 1e3;
        super::log_service(rt, system, threads, &before, "alloc");
        let footprint_bytes = Some(super::footprint(rt));
        let handle = |t: usize| Handle(handles[t].load(Ordering::Relaxed));
        let last = |t: usize| (sizes[t] / 8 - 1) * 8;
        // The warp's threads whose object gets tags.
        let tagged = |first: usize, mask: u32| {
            (first..first + mask.count_ones() as usize)
                .filter(|&t| !handle(t).is_null() && sizes[t] >= 8)
        };
        // Tag, then check: the same as am_tag and am_check. The CPU warps move aligned 8-byte
        // words, so `every_byte` checks every whole word of an object (the bytes past its last
        // whole word are checked byte by byte on the GPU only).
        let offsets = |t: usize| -> Vec<u64> {
            if every_byte {
                (0..sizes[t] / 8).map(|k| k * 8).collect()
            } else {
                vec![0, last(t)]
            }
        };
        let word_tag = |t: usize, offset: u64| tag(t as u64, offset / 8);
        warps(rt, sizes.len(), |warp, first, mask| {
            for t in tagged(first, mask) {
                for offset in offsets(t) {
                    warp.store(handle(t), offset, word_tag(t, offset));
                }
            }
        })?;
        let bad = AtomicU64::new(0);
        warps(rt, sizes.len(), |warp, first, mask| {
            for t in tagged(first, mask) {
                if offsets(t)
                    .into_iter()
                    .any(|offset| warp.load(handle(t), offset) != word_tag(t, offset))
                {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?;
        let counted = rt.counters()?;
        let by_pointer = system.frees_by_address(self.free_by_pointer);
        let before = rt.service_stats();
        let started = Instant::now();
        warps(rt, sizes.len(), |warp, first, mask| {
            let mut lanes = [Handle(0); WARP_LANES];
            for (l, h) in lanes
                .iter_mut()
                .enumerate()
                .take(mask.count_ones() as usize)
            {
                *h = handle(first + l);
            }
            // Refusals, the caches' included, are read from the counters below.
            if by_pointer {
                warp.post_free_pointers(mask, &lanes.map(|h| h.address()));
            } else {
                warp.post_free(mask, &lanes);
            }
        })?;
        let free_ms = started.elapsed().as_secs_f64() * 1e3;
        super::log_service(rt, system, threads, &before, "free");
        let objects = (0..sizes.len()).filter(|&t| !handle(t).is_null()).count();
        let unfreed = super::posted_frees_failed(rt, &counted, objects as u64)?;
        super::check_invariants(rt, system)?;
        Ok(Round {
            alloc_started: Some(alloc_started),
            alloc_ms,
            free_ms,
            failures: failures.into_inner(),
            bad: bad.into_inner(),
            bad_frees: unfreed,
            footprint_bytes,
            kernel_ms: None,
        })
    }
}
