//! Model-checked protocol: every interleaving (up to loom's preemption bound) of device warps and
//! the host over one port, on the real code: the mailbox, the CPU client's port lock and
//! [`CpuDevice::call`], and the service's [`Server::serve_once`] over a real resolver (the
//! protocol's words are loom's atomics under `--cfg loom`; see `orchestrator::sync`). Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p orchestrator --test loom --release`.
#![cfg(loom)]

use std::sync::Arc;

use bytemuck::Zeroable;
use loom::thread;
use orchestrator::cpu::CpuDevice;
use orchestrator::stats::ServiceStats;
use orchestrator::{Mailbox, ReplyRecord, RequestRecord, Resolver, ResolverConfig, Server, Status};
use parking_lot::Mutex;
use translator::Handle;

/// What the modelled host answers: the request's first word, doubled, as the chunk base.
fn answer(request: &RequestRecord) -> ReplyRecord {
    let mut reply = ReplyRecord::status(Status::Ok);
    reply.chunk_base = request.words[0] * 2;
    reply.lane_span = u64::from(request.lane_mask);
    reply
}

fn request(word: u64) -> RequestRecord {
    let mut r = RequestRecord::zeroed();
    r.op = 1;
    r.lane_mask = 0x8000_0001;
    r.words[0] = word;
    r.words[31] = word + 1;
    r
}

/// The modelled device: wait for the reply to `seq` on port 0.
fn wait_reply(mailbox: &Mailbox, seq: u32) -> ReplyRecord {
    loop {
        match mailbox.take_reply(0, seq) {
            Some(r) => break r,
            None => thread::yield_now(),
        }
    }
}

/// The modelled host: serve `count` requests on port 0, in order with `answer`, a skipped
/// sequence number with `BadSequence`; every request it reads must be whole.
fn serve(mailbox: &Mailbox, count: usize) {
    let mut served = 0;
    while served < count {
        match mailbox.pending(0) {
            Some(p) if !p.in_order => {
                mailbox.publish_reply(0, p.seq, &ReplyRecord::status(Status::BadSequence));
                served += 1;
            }
            Some(p) => {
                let req = mailbox.read_request(0);
                assert_eq!(req.words[31], req.words[0] + 1, "torn request");
                mailbox.publish_reply(0, p.seq, &answer(&req));
                served += 1;
            }
            None => thread::yield_now(),
        }
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Interleavings [`model_whole_requests`] explores before it stops.
const WHOLE_REQUEST_INTERLEAVINGS: usize = 200_000;

/// The model of whole requests through the client and the server: every request and reply word
/// is an atomic step (34 and 9 words), so one execution takes thousands of branches and even the
/// interleavings with one preemption number more than a million: the search stops after
/// [`WHOLE_REQUEST_INTERLEAVINGS`] of them, in loom's order (under a minute). Stale values of
/// relaxed loads, which the hand-over argument is about, are explored in each: with the lock's
/// release or acquire weakened to relaxed, the test fails in its first interleavings (a warp
/// reads a stale acknowledgement and never sees its reply).
fn model_whole_requests(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.max_branches = 100_000;
    builder.max_permutations = Some(WHOLE_REQUEST_INTERLEAVINGS);
    builder.check(f);
}

/// Two requests in a row: the host sees each request's words whole and the device sees each
/// reply whole and only after it was published.
#[test]
fn post_serve_reply() {
    model(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let host = {
            let mailbox = mailbox.clone();
            thread::spawn(move || serve(&mailbox, 2))
        };
        for (seq, word) in [(1u32, 10u64), (2, 20)] {
            mailbox.post_request(0, seq, &request(word));
            assert_eq!(wait_reply(&mailbox, seq), answer(&request(word)));
        }
        host.join().unwrap();
    });
}

/// A device that skips a sequence number gets `BadSequence` on that number, and the port works
/// again with the next one.
#[test]
fn skipped_sequence_resynchronises() {
    model(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let host = {
            let mailbox = mailbox.clone();
            thread::spawn(move || serve(&mailbox, 2))
        };
        mailbox.post_request(0, 7, &request(1));
        assert_eq!(
            wait_reply(&mailbox, 7),
            ReplyRecord::status(Status::BadSequence)
        );
        mailbox.post_request(0, 8, &request(3));
        assert_eq!(wait_reply(&mailbox, 8), answer(&request(3)));
        host.join().unwrap();
    });
}

/// Shutdown: the host closes, then answers what is pending with `Shutdown`. A waiting device
/// ends with either the real reply or `Shutdown`, never hangs, and never reads a torn reply.
#[test]
fn close_never_strands_a_waiting_warp() {
    model(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let host = {
            let mailbox = mailbox.clone();
            thread::spawn(move || {
                if let Some(p) = mailbox.pending(0) {
                    let req = mailbox.read_request(0);
                    mailbox.publish_reply(0, p.seq, &answer(&req));
                }
                mailbox.close();
                if let Some(p) = mailbox.pending(0) {
                    mailbox.publish_reply(0, p.seq, &ReplyRecord::status(Status::Shutdown));
                }
            })
        };
        mailbox.post_request(0, 1, &request(5));
        let reply = loop {
            if let Some(r) = mailbox.take_reply(0, 1) {
                break r;
            }
            if mailbox.is_closed() {
                break mailbox
                    .take_reply(0, 1)
                    .unwrap_or(ReplyRecord::status(Status::Shutdown));
            }
            thread::yield_now();
        };
        assert!(
            reply == answer(&request(5)) || reply == ReplyRecord::status(Status::Shutdown),
            "{reply:?}"
        );
        host.join().unwrap();
    });
}

/// Two warps share the mailbox's only port through the real client, and the real server answers.
/// The port lock hands the port over: the second warp reads the acknowledged sequence number
/// relaxed right after taking the lock, which is sound only because the first warp saw that
/// acknowledgement (acquire fence) before releasing the lock and the lock's acquire follows it.
/// Were that broken, a warp would post a stale number and get `BadSequence`, or take the other
/// warp's reply. Each warp allocates; both must be answered `Ok` with objects of their own, which
/// the host then frees, leaving the allocator empty and whole.
#[test]
fn two_warps_hand_one_port_over_through_the_real_client_and_server() {
    model_whole_requests(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        // Any 2 MiB-aligned base: the resolver hands out addresses and touches no memory.
        let resolver = Arc::new(Mutex::new(
            Resolver::new(ResolverConfig::new(1 << 40, 4)).unwrap(),
        ));
        let device = Arc::new(CpuDevice::new(mailbox.clone()));
        let host = {
            let (mailbox, resolver) = (mailbox.clone(), resolver.clone());
            thread::spawn(move || {
                let stats = Arc::new(ServiceStats::default());
                let mut server = Server::new(mailbox, resolver, stats, 1);
                let mut served = 0;
                while served < 2 {
                    match server.serve_once() {
                        0 => thread::yield_now(),
                        n => served += n,
                    }
                }
            })
        };
        // Lane sizes differ per warp, so each warp can tell its own reply from the other's.
        let warp = |id: u32, device: Arc<CpuDevice>| {
            move || {
                let mut sizes = [0u64; 32];
                sizes[0] = 64 * u64::from(id);
                let handles = device
                    .malloc(id, 1, &sizes, false)
                    .unwrap_or_else(|s| panic!("warp {id} was answered {s:?}"));
                handles[0]
            }
        };
        let other = thread::spawn(warp(2, device.clone()));
        let mine = warp(1, device.clone())();
        let theirs = other.join().unwrap();
        host.join().unwrap();
        let mut resolver = resolver.lock();
        assert_eq!(resolver.object_capacity(mine), Ok(64));
        assert_eq!(resolver.object_capacity(theirs), Ok(128));
        assert_ne!(mine.address(), theirs.address());
        for h in [mine, theirs] {
            let mut handles = [Handle::NULL; 32];
            handles[0] = h;
            let reply = resolver.resolve(&RequestRecord {
                op: orchestrator::Op::Free as u32,
                lane_mask: 1,
                warp: 0,
                reserved: 0,
                words: handles.map(|h| h.0),
            });
            assert_eq!(reply.status, Status::Ok as u32);
        }
        resolver.drain_quarantine();
        resolver.check_invariants().unwrap();
        assert!(resolver.is_empty());
    });
}
