//! Access patterns over per-thread objects in two layouts, as GPU kernel arguments and as
//! uvmsim traces from the same handles and the same offsets (the twin of
//! `device/kernels/uvm_patterns.cu`).

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::translator;

use serde::{Deserialize, Serialize};
use translator::{Geometry, GeometryConfig, Handle, SlotOrder, WARP_LANES, warp_handles};
use uvmsim::{Allocation, Event, Kernel, Trace, WarpTrace};

/// How the lanes of a warp pick their offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Pattern {
    /// The lanes of a warp read the same random offsets.
    Lockstep,
    /// Each lane reads its own random offsets.
    Independent,
    /// Each lane walks its range in equal strides.
    Sweep,
}

/// Where each thread's object lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Layout {
    /// Thread `t` at `base + t * range` (today's allocators).
    Contiguous,
    /// Warp-arranged chunks (alignmalloc), the pattern slot order.
    Arranged,
}

/// One run: who reads what, where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The offsets.
    pub pattern: Pattern,
    /// The layout.
    pub layout: Layout,
    /// Threads (a multiple of 32).
    pub threads: u32,
    /// Bytes per thread (a power of two, at least 4 KiB).
    pub range: u64,
    /// Reads per thread.
    pub reads: u32,
    /// Seed of the random offsets.
    pub seed: u64,
}

/// splitmix64's finaliser (as `mix` in the kernel).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Spec {
    /// Bytes of all objects.
    pub fn bytes(&self) -> u64 {
        u64::from(self.threads) * self.range
    }

    /// Each thread's handle, for objects laid out from `base`.
    pub fn handles(&self, base: u64) -> Vec<Handle> {
        match self.layout {
            Layout::Contiguous => (0..self.threads)
                .map(|t| {
                    Handle::plain(base + u64::from(t) * self.range, t % 32)
                        .expect("arena addresses fit handles")
                })
                .collect(),
            Layout::Arranged => {
                let sizes = [self.range; WARP_LANES];
                let geometry = Geometry::of(&sizes, &GeometryConfig::default())
                    .expect("ranges are under the per-lane limit")
                    .expect("ranges are not zero");
                (0..self.threads / 32)
                    .flat_map(|w| {
                        let chunk = base + u64::from(w) * geometry.chunk_bytes;
                        warp_handles(&geometry, chunk, &sizes, SlotOrder::Pattern)
                            .expect("arena addresses fit handles")
                    })
                    .collect()
            }
        }
    }

    /// Byte offset of read `i` of thread `t`.
    pub fn offset(&self, t: u32, i: u32) -> u64 {
        let words = self.range / 8;
        let word = match self.pattern {
            Pattern::Sweep => u64::from(i) * words / u64::from(self.reads),
            Pattern::Lockstep | Pattern::Independent => {
                let stream = u64::from(if self.pattern == Pattern::Lockstep {
                    t / 32
                } else {
                    t
                });
                mix(self.seed ^ (stream << 20) ^ u64::from(i)) % words
            }
        };
        word * 8
    }

    /// The trace of one run from `base`: the host writes every object, then the kernel reads.
    pub fn trace(&self, base: u64) -> Trace {
        let handles = self.handles(base);
        let warps = (0..self.threads / 32)
            .map(|w| {
                let mut warp = WarpTrace::default();
                for i in 0..self.reads {
                    let lanes: Vec<u64> = (0..32)
                        .map(|l| {
                            let t = w * 32 + l;
                            handles[t as usize].translate(self.offset(t, i))
                        })
                        .collect();
                    warp.push(&lanes);
                }
                warp
            })
            .collect();
        Trace {
            allocations: vec![Allocation {
                base,
                bytes: self.bytes(),
            }],
            events: vec![
                Event::HostTouch {
                    base,
                    bytes: self.bytes(),
                },
                Event::Kernel(Kernel {
                    name: format!("{:?}/{:?}", self.pattern, self.layout),
                    warps,
                }),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: Pattern, layout: Layout, range: u64) -> Spec {
        Spec {
            pattern,
            layout,
            threads: 64,
            range,
            reads: 100,
            seed: 3,
        }
    }

    #[test]
    fn both_layouts_cover_the_same_bytes_once() {
        for range in [16 << 10, 2 << 20] {
            for layout in [Layout::Contiguous, Layout::Arranged] {
                let s = spec(Pattern::Sweep, layout, range);
                let base = 1 << 30;
                let mut words: Vec<u64> = s
                    .handles(base)
                    .iter()
                    .flat_map(|h| (0..range / 4096).map(move |p| h.translate(p * 4096)))
                    .collect();
                words.sort_unstable();
                words.dedup();
                assert_eq!(words.len() as u64, s.bytes() / 4096, "{layout:?} {range}");
                assert!(words.iter().all(|&a| a >= base && a < base + s.bytes()));
            }
        }
    }

    #[test]
    fn lockstep_lanes_share_offsets_and_independent_ones_do_not() {
        let l = spec(Pattern::Lockstep, Layout::Arranged, 1 << 20);
        assert_eq!(l.offset(0, 5), l.offset(31, 5));
        assert_ne!(l.offset(0, 5), l.offset(32, 5));
        let i = spec(Pattern::Independent, Layout::Arranged, 1 << 20);
        assert_ne!(i.offset(0, 5), i.offset(1, 5));
        let s = spec(Pattern::Sweep, Layout::Contiguous, 1 << 20);
        assert_eq!((s.offset(7, 0), s.offset(7, 50)), (0, 512 << 10));
    }

    #[test]
    fn arranged_lockstep_touches_fewer_blocks_than_contiguous_in_the_simulator() {
        let run = |layout| {
            let s = Spec {
                threads: 32,
                ..spec(Pattern::Lockstep, layout, 2 << 20)
            };
            uvmsim::Simulator::run(uvmsim::SimConfig::default(), &s.trace(1 << 30)).unwrap()
        };
        let (c, a) = (run(Layout::Contiguous), run(Layout::Arranged));
        assert!(
            a.total.htod_bytes() < c.total.htod_bytes(),
            "arranged {} vs contiguous {}",
            a.total.htod_bytes(),
            c.total.htod_bytes()
        );
    }
}
