//! The whole request path on the CPU: warps played by threads post through the mailbox, the
//! service thread answers, and every lane writes its owner tag over its whole allocation and
//! checks it before freeing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytemuck::Zeroable;
use orchestrator::cpu::{CpuDevice, HostArena};
use orchestrator::{
    LaneStatus, Mailbox, Op, RequestRecord, Resolver, ResolverConfig, Server, Service,
    ServiceConfig, Status,
};
use parking_lot::Mutex;
use translator::Handle;

/// Small deterministic generator per warp.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Lane sizes: mostly small, some portion, a few large; some lanes inactive.
fn draw_sizes(rng: &mut Rng) -> (u32, [u64; 32]) {
    let mask = match rng.below(4) {
        0 => rng.next() as u32 | 1,
        _ => u32::MAX,
    };
    let class = rng.below(100);
    let sizes = std::array::from_fn(|lane| {
        if mask >> lane & 1 == 0 || rng.below(8) == 0 {
            return 0;
        }
        match class {
            0..=84 => 1 + rng.below(2048),
            85..=96 => 2049 + rng.below(30 << 10),
            _ => (32 << 10) + 1 + rng.below(64 << 10),
        }
    });
    (mask, sizes)
}

/// Every word a lane's object covers (its size rounded up to 8 bytes: the rest of its span).
fn words(h: Handle, size: u64) -> impl Iterator<Item = u64> {
    (0..size.div_ceil(8)).map(move |i| h.translate(i * 8))
}

struct Live {
    handles: [Handle; 32],
    sizes: [u64; 32],
    tag: u64,
}

#[derive(Default)]
struct Tally {
    allocs: AtomicU64,
    lanes: AtomicU64,
    bytes_checked: AtomicU64,
    mismatches: AtomicU64,
    oom: AtomicU64,
    bad_frees_checked: AtomicU64,
}

fn warp_loop(device: &CpuDevice, arena: &HostArena, warp: u32, ops: u32, tally: &Tally) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((u64::from(warp) + 1) * 0x1234_5677));
    let mut live: Vec<Live> = Vec::new();
    let mut serial = 0u64;
    let check_and_free = |entry: Live, rng: &mut Rng| {
        for lane in 0..32 {
            let (h, size) = (entry.handles[lane], entry.sizes[lane]);
            if h.is_null() {
                continue;
            }
            let tag = entry.tag | lane as u64;
            for address in words(h, size) {
                if arena.load(address) != tag {
                    tally.mismatches.fetch_add(1, Ordering::Relaxed);
                }
            }
            tally.bytes_checked.fetch_add(size, Ordering::Relaxed);
        }
        let mask = entry
            .handles
            .iter()
            .enumerate()
            .fold(0u32, |m, (l, h)| if h.is_null() { m } else { m | 1 << l });
        // Now and then free in two halves: the chunk must stay live until its last lane goes.
        let halves = if rng.below(4) == 0 {
            [mask & 0xFFFF, mask & 0xFFFF_0000]
        } else {
            [mask, 0]
        };
        for part in halves.into_iter().filter(|&m| m != 0) {
            let out = device.free(warp, part, &entry.handles);
            assert_eq!(
                out.status,
                Status::Ok,
                "warp {warp} free failed: {:?}",
                out.lanes
            );
        }
        // And now and then free one of them again: a defined double free, nothing else.
        if rng.below(50) == 0
            && let Some(lane) = (0..32).find(|&l| !entry.handles[l].is_null())
        {
            let out = device.free(warp, 1 << lane, &entry.handles);
            assert_eq!(out.status, Status::Partial);
            assert_ne!(out.lanes[lane], LaneStatus::Ok);
            tally.bad_frees_checked.fetch_add(1, Ordering::Relaxed);
        }
    };
    for _ in 0..ops {
        if live.len() >= 4 || (!live.is_empty() && rng.below(2) == 0) {
            let entry = live.swap_remove(rng.below(live.len() as u64) as usize);
            check_and_free(entry, &mut rng);
            continue;
        }
        let (mask, sizes) = draw_sizes(&mut rng);
        let contiguous = rng.below(3) == 0;
        match device.malloc(warp, mask, &sizes, contiguous) {
            Ok(handles) => {
                serial += 1;
                let tag = (u64::from(warp) << 48) | (serial << 8);
                for lane in 0..32 {
                    if !handles[lane].is_null() {
                        for address in words(handles[lane], sizes[lane]) {
                            arena.store(address, tag | lane as u64);
                        }
                        tally.lanes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tally.allocs.fetch_add(1, Ordering::Relaxed);
                let sizes = std::array::from_fn(|l| if mask >> l & 1 == 1 { sizes[l] } else { 0 });
                live.push(Live {
                    handles,
                    sizes,
                    tag,
                });
            }
            Err(Status::OutOfMemory) => {
                tally.oom.fetch_add(1, Ordering::Relaxed);
            }
            Err(other) => panic!("warp {warp}: unexpected {other:?}"),
        }
    }
    for entry in live.drain(..) {
        check_and_free(entry, &mut rng);
    }
}

fn ops_per_warp() -> u32 {
    std::env::var("ALIGNMALLOC_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
}

/// 64 CPU warps over 16 ports (warps outnumber ports), all classes and both layouts.
#[test]
fn cpu_warps_stress_no_overlap_no_loss() {
    const WARPS: u32 = 64;
    let ops = ops_per_warp();
    let arena = HostArena::new(1024);
    let config = ResolverConfig::new(arena.base(), arena.blocks());
    let resolver = Arc::new(Mutex::new(Resolver::new(config).unwrap()));
    let mailbox = Arc::new(Mailbox::new(16).unwrap());
    let service =
        Service::start(mailbox.clone(), resolver.clone(), ServiceConfig::default()).unwrap();
    let device = CpuDevice::new(mailbox.clone());
    let tally = Tally::default();
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for warp in 0..WARPS {
            let (device, arena, tally) = (&device, &arena, &tally);
            s.spawn(move || warp_loop(device, arena, warp, ops, tally));
        }
    });
    let elapsed = started.elapsed();
    let stats = service.stats().snapshot();
    service.stop();
    let mut r = resolver.lock();
    r.drain_quarantine();
    let lanes = tally.lanes.load(Ordering::Relaxed);
    eprintln!(
        "{WARPS} warps x {ops} ops in {elapsed:.2?}: {} allocations, {lanes} lane objects, {} MiB checked, \
         {} out-of-memory, {} double frees checked; service {stats:?}",
        tally.allocs.load(Ordering::Relaxed),
        tally.bytes_checked.load(Ordering::Relaxed) >> 20,
        tally.oom.load(Ordering::Relaxed),
        tally.bad_frees_checked.load(Ordering::Relaxed),
    );
    assert_eq!(
        tally.mismatches.load(Ordering::Relaxed),
        0,
        "a lane's memory was overwritten"
    );
    assert_eq!(
        r.counters().lanes_freed,
        lanes,
        "every lane object is freed exactly once"
    );
    assert!(tally.allocs.load(Ordering::Relaxed) > u64::from(WARPS * ops) / 3);
    assert!(
        stats.busy_nanos > 0 && stats.collect_nanos + stats.resolve_nanos <= stats.busy_nanos,
        "busy time covers its collecting and resolving parts: {stats:?}"
    );
    assert!(
        stats.busy_nanos <= elapsed.as_nanos() as u64,
        "busy no longer than the run"
    );
    assert_eq!(r.check_invariants(), Ok(()));
    assert!(r.is_empty(), "{} chunks leaked", r.live_chunks());
}

fn request(op: Op, mask: u32, word: u64) -> RequestRecord {
    RequestRecord {
        op: op as u32,
        lane_mask: mask,
        warp: 0,
        reserved: 0,
        words: [word; 32],
    }
}

/// A mailbox of `ports`, a resolver set up as `config`, and a server over them taking at most
/// `max_batch` requests a sweep (driven by the test, no thread).
fn server_over(
    ports: usize,
    config: ResolverConfig,
    max_batch: usize,
) -> (Arc<Mailbox>, Arc<Mutex<Resolver>>, Server) {
    let mailbox = Arc::new(Mailbox::new(ports).unwrap());
    let resolver = Arc::new(Mutex::new(Resolver::new(config).unwrap()));
    let stats = Arc::new(orchestrator::stats::ServiceStats::default());
    let server = Server::new(mailbox.clone(), resolver.clone(), stats, max_batch);
    (mailbox, resolver, server)
}

#[test]
fn a_skipped_sequence_number_is_answered_and_the_port_recovers() {
    let (mailbox, resolver, mut server) = server_over(2, ResolverConfig::new(1 << 40, 8), 8);
    mailbox.post_request(1, 5, &request(Op::Alloc, 1, 64));
    assert_eq!(server.serve_once(), 1);
    assert_eq!(
        mailbox.take_reply(1, 5).unwrap().status,
        Status::BadSequence as u32
    );
    assert_eq!(
        resolver.lock().live_chunks(),
        0,
        "the skipped request was not served"
    );
    mailbox.post_request(1, 6, &request(Op::Alloc, 1, 64));
    assert_eq!(server.serve_once(), 1);
    assert_eq!(mailbox.take_reply(1, 6).unwrap().status, Status::Ok as u32);
    assert_eq!(resolver.lock().live_chunks(), 1);
    resolver.lock().check_invariants().unwrap();
}

/// A sweep takes at most a batch; the next starts after the last port taken and wraps around,
/// so no port waits behind ports served before it.
#[test]
fn sweeps_take_full_batches_in_turn_and_wrap_around() {
    let (mailbox, resolver, mut server) = server_over(16, ResolverConfig::new(1 << 40, 8), 4);
    let mut seq = [0u32; 16];
    let mut post = |ports: &[usize]| {
        for &port in ports {
            seq[port] += 1;
            mailbox.post_request(port, seq[port], &request(Op::Alloc, 1, 64));
        }
        seq
    };
    let answered = |port: usize, seq: u32| mailbox.take_reply(port, seq).is_some();
    let seqs = post(&[1, 3, 5, 7, 9, 11]);
    assert_eq!(server.serve_once(), 4);
    assert!([1, 3, 5, 7].iter().all(|&p| answered(p, seqs[p])));
    assert!(!answered(9, seqs[9]) && !answered(11, seqs[11]));
    // The next sweep starts at port 8: 9 and 11, then, after the wrap, 0 and 2.
    let seqs = post(&[0, 2, 4]);
    assert_eq!(server.serve_once(), 4);
    assert!([9, 11, 0, 2].iter().all(|&p| answered(p, seqs[p])));
    assert!(!answered(4, seqs[4]));
    assert_eq!(server.serve_once(), 1);
    assert!(answered(4, seqs[4]));
    assert_eq!(server.serve_once(), 0, "nothing left");
    assert_eq!(resolver.lock().live_chunks(), 9);
}

#[test]
fn batches_serve_frees_before_allocations() {
    // One chunk fills the arena's only free block; freeing it and allocating again in one batch
    // succeeds only if the free is served first.
    let mut config = ResolverConfig::new(1 << 40, 2);
    config.small_blocks = 1;
    let (mailbox, _, mut server) = server_over(4, config, 8);
    mailbox.post_request(0, 1, &request(Op::Alloc, u32::MAX, 40 << 10));
    server.serve_once();
    let reply = mailbox.take_reply(0, 1).unwrap();
    assert_eq!(reply.status, Status::Ok as u32);
    let handles = orchestrator::cpu::handles_from_reply(&reply, &[40 << 10; 32]);
    mailbox.post_request(0, 2, &request(Op::Alloc, u32::MAX, 40 << 10));
    let mut free = request(Op::Free, u32::MAX, 0);
    free.words = handles.map(|h| h.0);
    mailbox.post_request(3, 1, &free);
    assert_eq!(server.serve_once(), 2);
    assert_eq!(mailbox.take_reply(3, 1).unwrap().status, Status::Ok as u32);
    assert_eq!(mailbox.take_reply(0, 2).unwrap().status, Status::Ok as u32);
}

#[test]
fn stopping_answers_everyone_and_nothing_hangs() {
    let arena = HostArena::new(64);
    let resolver = Arc::new(Mutex::new(
        Resolver::new(ResolverConfig::new(arena.base(), arena.blocks())).unwrap(),
    ));
    let mailbox = Arc::new(Mailbox::new(4).unwrap());
    let service =
        Service::start(mailbox.clone(), resolver.clone(), ServiceConfig::default()).unwrap();
    let device = Arc::new(CpuDevice::new(mailbox.clone()));
    let shutdowns = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..16u32)
        .map(|warp| {
            let (device, shutdowns, done_tx) = (device.clone(), shutdowns.clone(), done_tx.clone());
            std::thread::spawn(move || {
                loop {
                    match device.malloc(warp, u32::MAX, &[256; 32], false) {
                        Ok(h) => {
                            if device.free(warp, u32::MAX, &h).status == Status::Shutdown {
                                break;
                            }
                        }
                        Err(Status::Shutdown) => break,
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                }
                shutdowns.fetch_add(1, Ordering::Relaxed);
                done_tx.send(()).unwrap();
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    service.stop();
    for _ in 0..16 {
        done_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a warp hung after shutdown");
    }
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(shutdowns.load(Ordering::Relaxed), 16);
    assert!(mailbox.is_closed());
    // After the stop, a new call returns at once.
    assert_eq!(
        device.call(99, RequestRecord::zeroed()).status,
        Status::Shutdown as u32
    );
    resolver.lock().check_invariants().unwrap();
}
