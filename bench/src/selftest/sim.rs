//! The selftest checks on the sim backend: CPU warps play the kernels of
//! `device/kernels/selftest.cu` step for step, through the same mailbox and records.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::{orchestrator, translator};

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use alignmalloc::CpuWarp;
use alignmalloc::Runtime;
use orchestrator::{LaneStatus, Status};
use translator::{Handle, WARP_LANES};

use super::{BAD_CHECKS, Device, tag};

/// Retries of an allocation answered OutOfMemory in the fill, 50 us apart (as the kernel's).
const FILL_RETRIES: u32 = 20_000;

pub struct SimDevice<'a> {
    rt: &'a Runtime,
}

impl<'a> SimDevice<'a> {
    pub fn new(rt: &'a Runtime) -> Self {
        Self { rt }
    }
}

fn warps(threads: usize) -> u32 {
    threads.div_ceil(WARP_LANES) as u32
}

fn status_code(result: &Result<[Handle; WARP_LANES], Status>) -> u64 {
    match result {
        Ok(_) => Status::Ok as u64,
        Err(s) => *s as u64,
    }
}

/// What a lane sees of a request (a failed one gives no handle).
fn handle_or_fail(result: &Result<[Handle; WARP_LANES], Status>, lane: usize) -> u64 {
    match result {
        Ok(h) if h[lane].is_null() => status_code(result),
        Ok(_) => 0xFFFF_FFFF,
        Err(s) => *s as u64,
    }
}

impl Device for SimDevice<'_> {
    fn fill(&self, sizes: &[u64]) -> anyhow::Result<(Vec<Handle>, Vec<u32>)> {
        let handles: Vec<AtomicU64> = sizes.iter().map(|_| AtomicU64::new(0)).collect();
        let statuses: Vec<AtomicU32> = sizes.iter().map(|_| AtomicU32::new(u32::MAX)).collect();
        self.rt.run_warps(warps(sizes.len()), |warp: CpuWarp<'_>| {
            let (first, mask) = warp.lanes_of(sizes.len() as u64);
            let first = first as usize;
            let lane_sizes = std::array::from_fn(|l| {
                if mask >> l & 1 == 1 {
                    sizes[first + l]
                } else {
                    0
                }
            });
            let mut result = warp.malloc(mask, &lane_sizes);
            // As the kernel: retry while a growing arena answers OutOfMemory, about a second.
            for _ in 0..FILL_RETRIES {
                if result != Err(Status::OutOfMemory) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
                result = warp.malloc(mask, &lane_sizes);
            }
            for l in 0..mask.count_ones() as usize {
                let t = first + l;
                statuses[t].store(status_code(&result) as u32, Ordering::Relaxed);
                if let Ok(got) = &result {
                    handles[t].store(got[l].0, Ordering::Relaxed);
                    for w in 0..lane_sizes[l] / 8 {
                        warp.store(got[l], w * 8, tag(t as u64, w));
                    }
                }
            }
        })?;
        Ok((
            handles
                .into_iter()
                .map(|h| Handle(h.into_inner()))
                .collect(),
            statuses.into_iter().map(AtomicU32::into_inner).collect(),
        ))
    }

    fn free_all(&self, handles: &[Handle]) -> anyhow::Result<Vec<u32>> {
        let statuses: Vec<AtomicU32> = handles.iter().map(|_| AtomicU32::new(u32::MAX)).collect();
        self.rt.run_warps(warps(handles.len()), |warp| {
            let (first, mask) = warp.lanes_of(handles.len() as u64);
            let first = first as usize;
            let lane_handles = std::array::from_fn(|l| {
                if mask >> l & 1 == 1 {
                    handles[first + l]
                } else {
                    Handle::NULL
                }
            });
            let outcome = warp.free(mask, &lane_handles);
            for l in 0..mask.count_ones() as usize {
                statuses[first + l].store(outcome.lanes[l] as u32, Ordering::Relaxed);
            }
        })?;
        Ok(statuses.into_iter().map(AtomicU32::into_inner).collect())
    }

    fn rounds(&self, threads: u32, rounds: u32, seed: u64) -> anyhow::Result<[u64; 5]> {
        let counters: [AtomicU64; 5] = std::array::from_fn(|_| AtomicU64::new(0));
        // CPU warps take minutes here where the GPU takes a second: progress by warp rounds.
        let bar = crate::progress::steps(
            u64::from(warps(threads as usize)) * u64::from(rounds),
            "(b) warp rounds",
        );
        self.rt.run_warps(warps(threads as usize), |warp| {
            let (first, mask) = warp.lanes_of(u64::from(threads));
            let first = first as usize;
            let mut state: [u64; WARP_LANES] = std::array::from_fn(|l| {
                seed ^ ((first + l) as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            });
            let mut next = |l: usize| {
                let s = &mut state[l];
                *s ^= *s << 13;
                *s ^= *s >> 7;
                *s ^= *s << 17;
                *s
            };
            for round in 0..rounds {
                let mut sizes = [0u64; WARP_LANES];
                let mut contiguous = 0u32;
                let lanes = mask.count_ones() as usize;
                for (l, size) in sizes.iter_mut().enumerate().take(lanes) {
                    *size = (1024 + next(l) % (255 * 1024)) & !7;
                    if next(l) % 3 == 0 {
                        contiguous |= 1 << l;
                    }
                }
                // The two branches of the kernel: each group of lanes makes its own request.
                let mut handles = [Handle::NULL; WARP_LANES];
                for (group, plain) in [(contiguous, true), (mask & !contiguous, false)] {
                    if group == 0 {
                        continue;
                    }
                    let result = if plain {
                        warp.malloc_contiguous(group, &sizes)
                    } else {
                        warp.malloc(group, &sizes)
                    };
                    match result {
                        Ok(got) => {
                            for l in 0..WARP_LANES {
                                if group >> l & 1 == 1 {
                                    handles[l] = got[l];
                                }
                            }
                        }
                        Err(_) => {
                            counters[3].fetch_add(u64::from(group.count_ones()), Ordering::Relaxed);
                        }
                    }
                }
                let mut live = 0u32;
                for (l, h) in handles.iter().enumerate() {
                    if h.is_null() {
                        continue;
                    }
                    live |= 1 << l;
                    let owner = (first + l) as u64 * u64::from(rounds) + u64::from(round);
                    for w in 0..sizes[l] / 8 {
                        warp.store(*h, w * 8, tag(owner, w));
                    }
                    let bad = (0..sizes[l] / 8)
                        .filter(|&w| warp.load(*h, w * 8) != tag(owner, w))
                        .count() as u64;
                    counters[0].fetch_add(1, Ordering::Relaxed);
                    counters[1].fetch_add(sizes[l] / 8, Ordering::Relaxed);
                    counters[2].fetch_add(bad, Ordering::Relaxed);
                }
                if live != 0 {
                    let freed = warp.free(live, &handles);
                    let failures = (0..WARP_LANES)
                        .filter(|&l| live >> l & 1 == 1 && freed.lanes[l] != LaneStatus::Ok)
                        .count() as u64;
                    counters[4].fetch_add(failures, Ordering::Relaxed);
                }
                bar.inc(1);
            }
        })?;
        bar.finish_and_clear();
        Ok(counters.map(AtomicU64::into_inner))
    }

    fn bad_input(
        &self,
        warps: u32,
        arena_bytes: u64,
        over_limit: u64,
    ) -> anyhow::Result<Vec<(u64, u64)>> {
        let results: Vec<AtomicU64> = (0..warps as usize * BAD_CHECKS.len() * 2)
            .map(|_| AtomicU64::new(u64::MAX))
            .collect();
        self.rt.run_warps(warps, |warp| {
            let mut out = Vec::with_capacity(BAD_CHECKS.len());
            let all = u32::MAX;
            let zero = warp.malloc(all, &[0; WARP_LANES]);
            out.push((0, zero.map_or(u64::MAX, |h| h[0].0)));
            out.push((Status::Ok as u64, status_code(&zero)));
            let mut sizes = [64u64; WARP_LANES];
            sizes[0] = over_limit;
            let over = warp.malloc(all, &sizes);
            out.push((Status::SizeOverLimit as u64, handle_or_fail(&over, 0)));
            let huge = warp.malloc(all, &[arena_bytes / 32 + (2 << 20); WARP_LANES]);
            out.push((Status::OutOfMemory as u64, handle_or_fail(&huge, 0)));
            // Lane 0 alone: a double free and a foreign handle.
            let mut one = [0u64; WARP_LANES];
            one[0] = 256;
            let h = warp.malloc(1, &one).map_or(Handle::NULL, |h| h[0]);
            let mut lane0 = [Handle::NULL; WARP_LANES];
            lane0[0] = h;
            let first = warp.free(1, &lane0);
            let second = warp.free(1, &lane0);
            out.push((
                LaneStatus::Ok as u64,
                if h.is_null() {
                    0xFFFF_FFFF
                } else {
                    first.lanes[0] as u64
                },
            ));
            out.push((LaneStatus::DoubleFree as u64, second.lanes[0] as u64));
            lane0[0] = Handle(0x0000_0DEA_DBEE_E000 + u64::from(warp.id()) * 4096);
            let foreign = warp.free(1, &lane0);
            out.push((LaneStatus::InvalidHandle as u64, foreign.lanes[0] as u64));
            // The whole warp frees 16 bytes into its objects, then the objects.
            let objects = warp
                .malloc(all, &[4096; WARP_LANES])
                .unwrap_or([Handle::NULL; WARP_LANES]);
            let handles_null = objects.iter().filter(|h| h.is_null()).count();
            let interior = objects.map(|h| if h.is_null() { h } else { Handle(h.0 + 16) });
            let tried = warp.free(all, &interior);
            let whole = warp.free(all, &objects);
            out.push((
                LaneStatus::InteriorPointer as u64,
                if objects[0].is_null() {
                    0xFFFF_FFFF
                } else {
                    tried.lanes[0] as u64
                },
            ));
            out.push((LaneStatus::Ok as u64, whole.lanes[0] as u64));
            // The same by address (`am::malloc_plain`, `am::free(void*)`): lane 0 frees its
            // pointer twice, then the warp frees 16 bytes into its objects, then the objects.
            one[0] = 256;
            let p = warp
                .malloc_contiguous(1, &one)
                .map_or(0, |h| h[0].address());
            let mut lane0 = [0u64; WARP_LANES];
            lane0[0] = p;
            let first = warp.free_pointers(1, &lane0);
            let second = warp.free_pointers(1, &lane0);
            out.push((
                LaneStatus::Ok as u64,
                if p == 0 {
                    0xFFFF_FFFF
                } else {
                    first.lanes[0] as u64
                },
            ));
            out.push((LaneStatus::DoubleFree as u64, second.lanes[0] as u64));
            let objects = warp
                .malloc_contiguous(all, &[4096; WARP_LANES])
                .map_or([0; WARP_LANES], |h| h.map(|h| h.address()));
            let interior = objects.map(|a| if a == 0 { 0 } else { a + 16 });
            let tried = warp.free_pointers(all, &interior);
            let whole = warp.free_pointers(all, &objects);
            out.push((
                LaneStatus::InteriorPointer as u64,
                if objects[0] == 0 {
                    0xFFFF_FFFF
                } else {
                    tried.lanes[0] as u64
                },
            ));
            out.push((LaneStatus::Ok as u64, whole.lanes[0] as u64));
            // Every lane's 4 KiB objects of the interior checks: none null, every status Ok
            // (CPU warps never split, so these hold by construction here).
            let plain_null = objects.iter().filter(|&&a| a == 0).count();
            for got in [handles_null, plain_null] {
                out.push((0, got as u64));
                out.push((Status::Ok as u64, Status::Ok as u64));
            }
            let base = warp.id() as usize * BAD_CHECKS.len() * 2;
            for (i, (expected, got)) in out.into_iter().enumerate() {
                results[base + 2 * i].store(expected, Ordering::Relaxed);
                results[base + 2 * i + 1].store(got, Ordering::Relaxed);
            }
        })?;
        let words: Vec<u64> = results.into_iter().map(AtomicU64::into_inner).collect();
        Ok(words.chunks(2).map(|p| (p[0], p[1])).collect())
    }
}
