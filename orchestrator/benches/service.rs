//! How many warp requests the host side resolves per second on one core.
//!
//! The stream is the mix of the GPU stress: 85% of allocations small (1 B..2 KiB per lane), 12%
//! portion (2..32 KiB), 3% large (32..96 KiB); 7 of 8 lanes active; a third thread-contiguous.
//! Every allocation is later freed whole, oldest first, from a window of 1024 live chunks, so
//! the resolver stays in a steady state with fragmentation.
//!
//! - `resolve/mixed`: `Resolver::resolve` on one allocation and one free request per iteration,
//!   timed in batches of 256 iterations; drawing the requests and building the lanes' handles
//!   from the reply (the device's part) are not timed. `resolve/mixed_without_recycling`: the same with `recycle_small` off (every
//!   small chunk searches the small space's tree), to compare in one run.
//! - `resolve/uniform_1kib` and `resolve/uniform_8kib`: the same with every lane of every warp
//!   asking 1 KiB (32 KiB small chunks) or 8 KiB (8-leaf warptrees), the requests of the GPU
//!   scaling test (`alignmalloc alloc --tests scaling`).
//! - `resolve/general_over_32kib`: what reaches the host in `alignmalloc alloc --tests mixed`
//!   (the device caches serve lanes up to 32 KiB): per warp, the lanes of its draw from the
//!   mixed test's bands that ask over 32 KiB (32-64 KiB, and 1-3 MiB at 0.4% of lanes), thread-
//!   contiguous; warps with none are skipped.
//! - `serve/batch_1024`: the service thread's sweep (`Server::serve_once`): 1024 pending requests
//!   in a 1024-port mailbox (half allocations, half frees) are collected, resolved and answered;
//!   posting them (the device's part) is not timed. `serve/sparse_8192_32`: the same with 32
//!   requests spread over an 8192-port mailbox (the GPU runtime's size), where reading every
//!   port's sequence number is a large part of a sweep.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use orchestrator::cpu::handles_from_reply;
use orchestrator::stats::ServiceStats;
use orchestrator::{Mailbox, Op, RequestRecord, Resolver, ResolverConfig, Server};
use parking_lot::Mutex;

const WINDOW: usize = 1024;
/// Allocation and free pairs resolved between two clock reads (at most the window).
const BATCH: usize = 256;

/// What a [`Stream`] draws.
#[derive(Clone, Copy)]
enum Shape {
    /// The GPU stress's mix.
    Mixed,
    /// Every lane asking this many bytes.
    Uniform(u64),
    /// The host's share of the mixed test's sizes (lanes over 32 KiB).
    OverCached,
}

/// Allocation requests of one [`Shape`].
struct Stream {
    state: u64,
    shape: Shape,
}

impl Stream {
    fn new(seed: u64, shape: Shape) -> Self {
        Self { state: seed, shape }
    }

    /// A warp of the mixed test's bands (per mille: 126 of 4-64 KiB, 4 of 1-3 MiB), keeping
    /// the lanes over 32 KiB; drawn again until one lane is left.
    fn over_cached_alloc(&mut self) -> RequestRecord {
        loop {
            let words: [u64; 32] = std::array::from_fn(|_| {
                let x = self.next();
                let size = match x % 1000 {
                    0..126 => (4 << 10) + 1 + (x >> 10) % (60 << 10),
                    126..130 => (1 << 20) + (x >> 10) % (2 << 20),
                    _ => 0,
                };
                if size > 32 << 10 { size } else { 0 }
            });
            let lane_mask = (0..32).fold(0u32, |m, l| if words[l] > 0 { m | 1 << l } else { m });
            if lane_mask != 0 {
                return RequestRecord {
                    op: Op::AllocContiguous as u32,
                    lane_mask,
                    warp: 1,
                    reserved: 0,
                    words,
                };
            }
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn alloc(&mut self) -> RequestRecord {
        match self.shape {
            Shape::OverCached => return self.over_cached_alloc(),
            Shape::Uniform(bytes) => {
                return RequestRecord {
                    op: Op::Alloc as u32,
                    lane_mask: u32::MAX,
                    warp: 1,
                    reserved: 0,
                    words: [bytes; 32],
                };
            }
            Shape::Mixed => {}
        }
        let class = self.next() % 100;
        let words = std::array::from_fn(|_| {
            if self.next().is_multiple_of(8) {
                return 0;
            }
            match class {
                0..=84 => 1 + self.next() % 2048,
                85..=96 => 2049 + self.next() % (30 << 10),
                _ => (32 << 10) + 1 + self.next() % (64 << 10),
            }
        });
        let op = if self.next().is_multiple_of(3) {
            Op::AllocContiguous
        } else {
            Op::Alloc
        };
        RequestRecord {
            op: op as u32,
            lane_mask: u32::MAX,
            warp: 1,
            reserved: 0,
            words,
        }
    }
}

fn free_request(handles: &[u64; 32]) -> RequestRecord {
    RequestRecord {
        op: Op::Free as u32,
        lane_mask: u32::MAX,
        warp: 1,
        reserved: 0,
        words: *handles,
    }
}

fn resolver() -> Resolver {
    resolver_recycling(true)
}

/// The benchmark's arena; `recycle_small` off sends small runs straight back to the tree.
fn resolver_recycling(recycle_small: bool) -> Resolver {
    let mut config = ResolverConfig::new(1 << 40, 16 << 10);
    config.recycle_small = recycle_small;
    Resolver::new(config).unwrap()
}

/// Resolve `request` and, for an allocation, the handles the lanes got.
fn handles_of(r: &mut Resolver, request: &RequestRecord) -> [u64; 32] {
    let reply = r.resolve(request);
    handles_from_reply(&reply, &request.words).map(|h| h.0)
}

fn bench_resolve(c: &mut Criterion) {
    let mut g = c.benchmark_group("resolve");
    g.throughput(Throughput::Elements(2));
    const SEED: u64 = 0x1234_5678_9ABC_DEF1;
    for (name, recycle_small, shape) in [
        ("mixed", true, Shape::Mixed),
        ("mixed_without_recycling", false, Shape::Mixed),
        ("uniform_1kib", true, Shape::Uniform(1 << 10)),
        ("uniform_8kib", true, Shape::Uniform(8 << 10)),
        ("general_over_32kib", true, Shape::OverCached),
    ] {
        let mut stream = Stream::new(SEED, shape);
        let mut r = resolver_recycling(recycle_small);
        let mut live: VecDeque<[u64; 32]> = (0..WINDOW)
            .map(|_| handles_of(&mut r, &stream.alloc()))
            .collect();
        g.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let mut timed = Duration::ZERO;
                let mut left = iterations as usize;
                while left > 0 {
                    // Timed in batches: a clock read per request would cost a tenth of it.
                    let n = left.min(BATCH);
                    let allocs: Vec<RequestRecord> = (0..n).map(|_| stream.alloc()).collect();
                    let frees: Vec<RequestRecord> = (0..n)
                        .map(|_| free_request(&live.pop_front().expect("the window is full")))
                        .collect();
                    let mut replies = Vec::with_capacity(n);
                    let started = Instant::now();
                    for (alloc, free) in allocs.iter().zip(&frees) {
                        replies.push(r.resolve(alloc));
                        std::hint::black_box(r.resolve(free));
                    }
                    timed += started.elapsed();
                    for (reply, alloc) in replies.iter().zip(&allocs) {
                        live.push_back(handles_from_reply(reply, &alloc.words).map(|h| h.0));
                    }
                    left -= n;
                }
                timed
            })
        });
    }
    g.finish();
}

fn bench_serve(c: &mut Criterion) {
    let mut g = c.benchmark_group("serve");
    // (name, ports, requests pending per sweep): a full mailbox, and a large one with few
    // requests waiting, as when most warps are busy elsewhere (the sweep reads every port).
    for (name, ports, pending) in [("batch_1024", 1024, 1024), ("sparse_8192_32", 8192, 32)] {
        g.throughput(Throughput::Elements(pending as u64));
        let resolver = Arc::new(Mutex::new(resolver()));
        let mailbox = Arc::new(Mailbox::new(ports).unwrap());
        let mut server = Server::new(
            mailbox.clone(),
            resolver.clone(),
            Arc::new(ServiceStats::default()),
            1024,
        );
        let mut stream = Stream::new(0xDEAD_BEEF_1234_5679, Shape::Mixed);
        let mut live: VecDeque<[u64; 32]> = {
            let mut r = resolver.lock();
            (0..WINDOW)
                .map(|_| handles_of(&mut r, &stream.alloc()))
                .collect()
        };
        let mut seq = vec![0u32; ports];
        let stride = ports / pending;
        let mut round = 0usize;
        // Allocations posted in the last round, collected after it was served.
        let mut posted: Vec<(usize, RequestRecord)> = Vec::new();
        g.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let mut timed = Duration::ZERO;
                for _ in 0..iterations {
                    // Evenly spread ports, shifted every round.
                    round += 1;
                    for k in 0..pending {
                        let port = k * stride + round % stride;
                        let request = if k % 2 == 0 {
                            let r = stream.alloc();
                            posted.push((port, r));
                            r
                        } else {
                            free_request(&live.pop_front().expect("the window is full"))
                        };
                        seq[port] += 1;
                        mailbox.post_request(port, seq[port], &request);
                    }
                    let started = Instant::now();
                    let served = server.serve_once();
                    timed += started.elapsed();
                    assert_eq!(served, pending);
                    for (port, request) in posted.drain(..) {
                        let reply = mailbox.take_reply(port, seq[port]).expect("answered");
                        live.push_back(handles_from_reply(&reply, &request.words).map(|h| h.0));
                    }
                }
                timed
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_resolve, bench_serve);
criterion_main!(benches);
