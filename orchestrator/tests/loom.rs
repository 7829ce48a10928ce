//! Model-checked protocols: every interleaving (up to loom's preemption bound) of device warps and
//! the host, on the real code: over one mailbox port, the mailbox, the CPU client's port lock and
//! [`CpuDevice::call`], and the service's [`Server::serve_once`] over a real resolver; for the
//! device caches, the CPU warps' [`CpuCaches`] against the service's [`CacheKeeper`] over a real
//! resolver (the protocols' words are loom's atomics under `--cfg loom`; see `orchestrator::sync`). Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p orchestrator --test loom --release`.
#![cfg(loom)]

use std::sync::Arc;

use loom::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Zeroable;
use loom::thread;
use orchestrator::caches::{
    CacheChannel, CacheKeeper, CachedAlloc, CachedFree, CpuCaches, RUN_CLASS, channel::entry_parts,
    claims_ahead, slab_blocks,
};
use orchestrator::cpu::CpuDevice;
use orchestrator::stats::ServiceStats;
use orchestrator::{
    LaneStatus, Mailbox, ReplyRecord, RequestRecord, Resolver, ResolverConfig, Server, Status,
};
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

/// The real server over `resolver`, on its own thread, until it answered `count` requests.
fn serve_real(
    mailbox: &Arc<Mailbox>,
    resolver: &Arc<Mutex<Resolver>>,
    count: usize,
) -> thread::JoinHandle<()> {
    let (mailbox, resolver) = (mailbox.clone(), resolver.clone());
    thread::spawn(move || {
        let stats = Arc::new(ServiceStats::default());
        let mut server = Server::new(mailbox, resolver, stats, 1);
        let mut served = 0;
        while served < count {
            match server.serve_once() {
                0 => thread::yield_now(),
                n => served += n,
            }
        }
    })
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
        let host = serve_real(&mailbox, &resolver, 2);
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

// ---- the device caches: real CPU warps (`CpuCaches`) against the real keeper -----------------

/// The class of the tests below: 32 KiB objects, 1024 to a slab of 16 blocks (the fewest
/// objects, so a drain's steps stay few).
const CLASS: usize = 11;
const OBJECT: u64 = 32 << 10;
/// VABlocks of the modelled arena: room for four slabs of [`CLASS`].
const ARENA_BLOCKS: usize = 64;

/// Interleavings each cache model explores before it stops (each execution also creates the
/// caches' bitmaps, thousands of atomics, so executions are slow).
const CACHE_INTERLEAVINGS: usize = 20_000;

fn model_caches(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    // A host sweeping while the warps spin makes long executions (hundreds of turns).
    builder.max_branches = 200_000;
    builder.max_permutations = Some(CACHE_INTERLEAVINGS);
    builder.check(f);
}

/// The caches of an arena of [`ARENA_BLOCKS`] at 1 TiB holding at most `bound_blocks` blocks;
/// the resolver hands out addresses and touches no memory.
fn caches(bound_blocks: u64) -> (Arc<CacheChannel>, Arc<CpuCaches>, CacheKeeper, Resolver) {
    caches_of(bound_blocks, 2)
}

/// [`caches`] with `ids` slab ids.
fn caches_of(
    bound_blocks: u64,
    ids: usize,
) -> (Arc<CacheChannel>, Arc<CpuCaches>, CacheKeeper, Resolver) {
    let channel = Arc::new(CacheChannel::new(ids));
    let caches = Arc::new(CpuCaches::new(channel.clone(), ARENA_BLOCKS as u64));
    let keeper = CacheKeeper::new(channel.clone(), bound_blocks << 21);
    let resolver = Resolver::new(ResolverConfig::new(1 << 40, ARENA_BLOCKS)).unwrap();
    (channel, caches, keeper, resolver)
}

/// The service thread's part: tend the caches until `done` says the warps need it no more
/// (a host that sweeps forever would let the model checker run it forever); hands keeper and
/// resolver back.
fn tend_until(
    mut keeper: CacheKeeper,
    mut resolver: Resolver,
    done: impl Fn(&CacheKeeper) -> bool + Send + 'static,
) -> thread::JoinHandle<(CacheKeeper, Resolver)> {
    thread::spawn(move || {
        while !done(&keeper) {
            if keeper.tend(&mut resolver) == 0 {
                thread::yield_now();
            }
        }
        (keeper, resolver)
    })
}

/// A warp's allocation of `lanes` objects of [`CLASS`].
fn cached_alloc(caches: &CpuCaches, lanes: u32) -> CachedAlloc {
    let mut sizes = [0u64; 32];
    sizes[..lanes as usize].fill(OBJECT);
    caches.alloc((1u64 << lanes) as u32 - 1, &sizes, false, &|| false)
}

/// A warp's free of `handles` (the non-null ones).
fn cached_free(caches: &CpuCaches, handles: &[Handle]) -> CachedFree {
    let mut words = [0u64; 32];
    for (w, h) in words.iter_mut().zip(handles) {
        *w = h.0;
    }
    let mask = (1u64 << handles.len()) as u32 - 1;
    caches.free(mask, &words, false)
}

/// Give everything back: drain the caches (no warp runs), reclaim, and check that the keeper
/// and the resolver are whole and empty.
fn drain_to_empty(caches: &CpuCaches, keeper: &mut CacheKeeper, resolver: &mut Resolver) {
    caches.drain();
    keeper.reclaim(resolver);
    keeper.check().unwrap();
    assert_eq!(keeper.held_bytes(), 0);
    resolver.drain_quarantine();
    resolver.check_invariants().unwrap();
    assert!(resolver.is_empty());
}

/// Two warps find the class empty at once: one takes the class lock and asks, the other waits
/// for the slab instead of asking again; the host answers; both are served objects of their own,
/// side by side in one slab. The host, tending meanwhile, never holds more than its bound and
/// never publishes a slab twice.
#[test]
fn warps_racing_for_an_empty_class_make_one_ask_and_share_its_slab() {
    model_caches(|| {
        let (channel, caches, keeper, resolver) = caches(ARENA_BLOCKS as u64);
        // Once a slab is taken, four objects come from it without the host.
        let host = {
            let channel = channel.clone();
            tend_until(keeper, resolver, move |_| channel.taken(CLASS) > 0)
        };
        let other = {
            let caches = caches.clone();
            thread::spawn(move || cached_alloc(&caches, 2))
        };
        let mine = cached_alloc(&caches, 2);
        let theirs = other.join().unwrap();
        let (mut keeper, mut resolver) = host.join().unwrap();

        assert_eq!((mine.served, mine.fallback), (0b11, 0));
        assert_eq!((theirs.served, theirs.fallback), (0b11, 0));
        let mut addresses: Vec<u64> = [mine, theirs]
            .iter()
            .flat_map(|a| a.handles[..2].iter().map(|h| h.address()))
            .collect();
        addresses.sort_unstable();
        let first = addresses[0];
        assert_eq!(
            addresses,
            (0..4).map(|i| first + i * OBJECT).collect::<Vec<_>>(),
            "four objects side by side"
        );
        keeper.check().unwrap();
        // One warp asked; the other waited for that slab.
        assert_eq!(channel.demand(CLASS), 1);
        for (alloc, lanes) in [(mine, 0b11u32), (theirs, 0b11)] {
            let freed = cached_free(&caches, &alloc.handles[..2]);
            assert_eq!(freed.handled, lanes);
            assert!(freed.lanes[..2].iter().all(|s| *s == LaneStatus::Ok));
        }
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// A warp's allocation of one run-class object of `size` bytes in lane 0.
fn run_alloc(caches: &CpuCaches, size: u64) -> Handle {
    let mut sizes = [0u64; 32];
    sizes[0] = size;
    let got = caches.alloc(1, &sizes, false, &|| false);
    assert_eq!(got.served, 1);
    got.handles[0]
}

/// Two warps take run objects that cannot both fit in what is left of the slab: the first to
/// reach the cursor crosses the slab's end and counts the slots left there as freed, the other
/// starts past it; both go on to the next slab and get objects that do not overlap. Once every object is freed, the first slab has gone back by itself and the caches
/// drain to nothing.
#[test]
fn run_lanes_racing_past_a_slabs_end_leave_it_whole_and_do_not_overlap() {
    const MIB: u64 = 1 << 20;
    model_caches(|| {
        let (channel, caches, keeper, resolver) = caches(ARENA_BLOCKS as u64);
        let host = {
            let channel = channel.clone();
            tend_until(keeper, resolver, move |_| channel.taken(RUN_CLASS) > 1)
        };
        // Fill the first slab to within 3 MiB of its end: 1 MiB, then 4 MiB objects.
        let mut first = vec![run_alloc(&caches, MIB)];
        while first.len() < 8 {
            first.push(run_alloc(&caches, 4 * MIB));
        }
        let other = {
            let caches = caches.clone();
            thread::spawn(move || run_alloc(&caches, 4 * MIB))
        };
        let mine = run_alloc(&caches, 4 * MIB);
        let theirs = other.join().unwrap();
        let (mut keeper, mut resolver) = host.join().unwrap();
        let (low, high) = (
            mine.address().min(theirs.address()),
            mine.address().max(theirs.address()),
        );
        assert!(high - low >= 4 * MIB, "the two objects overlap");
        assert!(
            low >= first[0].address() + slab_blocks(RUN_CLASS) * (2 << 20),
            "both past the first slab"
        );
        for handle in first {
            assert_eq!(cached_free(&caches, &[handle]).lanes[0], LaneStatus::Ok);
        }
        keeper.tend(&mut resolver);
        assert_eq!(
            keeper.stats().snapshot().returns,
            1,
            "the crossed slab went back with its last object"
        );
        for handle in [mine, theirs] {
            assert_eq!(cached_free(&caches, &[handle]).lanes[0], LaneStatus::Ok);
        }
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// The host takes back the slab it published (the arena needs the room) while the warp that
/// asked for it is taking it: either the warp's claim holds and the host keeps the slab, or the
/// host gets it back and the warp is denied (it goes to the mailbox) or, having asked again, is
/// given another. A warp's object is always the first of a slab the host holds, never in
/// blocks it gave back, and the warp never waits forever.
#[test]
fn a_slab_taken_back_while_a_warp_takes_it_is_the_warps_or_the_hosts_never_both() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    model_caches(|| {
        let (channel, caches, mut keeper, mut resolver) = caches(ARENA_BLOCKS as u64);
        let warp_done = Arc::new(AtomicBool::new(false));
        let host = {
            let (channel, warp_done) = (channel.clone(), warp_done.clone());
            thread::spawn(move || {
                while channel.filled(CLASS) == 0 {
                    if keeper.tend(&mut resolver) == 0 {
                        thread::yield_now();
                    }
                }
                let recalled = keeper.recall(&mut resolver);
                while !warp_done.load(Ordering::Acquire) {
                    if keeper.tend(&mut resolver) == 0 {
                        thread::yield_now();
                    }
                }
                (keeper, resolver, recalled)
            })
        };
        let mine = cached_alloc(&caches, 1);
        warp_done.store(true, Ordering::Release);
        let (mut keeper, mut resolver, recalled) = host.join().unwrap();
        let stats = keeper.stats().snapshot();
        assert_eq!(stats.recalls, recalled as u64);
        assert!(recalled <= 1);
        match (mine.served, mine.fallback) {
            (1, 0) => assert!(
                keeper.slab_at(mine.handles[0].address()).is_some(),
                "the object lies in a slab the host holds"
            ),
            (0, 1) => assert_eq!(recalled, 1, "denied only once its slab was taken back"),
            other => panic!("served/fallback {other:?}"),
        }
        keeper.check().unwrap();
        if mine.served == 1 {
            assert_eq!(
                cached_free(&caches, &mine.handles[..1]).lanes[0],
                LaneStatus::Ok
            );
        }
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// The host cannot place a slab (its bound is below one): the warp that asked is denied and
/// sends its lanes through the mailbox, and the warp that waited on the same class reads the
/// standing denial and does the same without asking again; neither waits forever, and nothing
/// is held.
#[test]
fn a_denied_ask_sends_the_waiting_warps_to_the_mailbox() {
    model_caches(|| {
        let (channel, caches, keeper, resolver) = caches(8);
        // One warp asks and is denied; the other, finding the class unmoved after it, asks no
        // more.
        let host = tend_until(keeper, resolver, |k| k.stats().snapshot().denials == 1);
        let other = {
            let caches = caches.clone();
            thread::spawn(move || cached_alloc(&caches, 1))
        };
        let mine = cached_alloc(&caches, 1);
        let theirs = other.join().unwrap();
        let (mut keeper, mut resolver) = host.join().unwrap();
        for a in [mine, theirs] {
            assert_eq!((a.served, a.fallback), (0, 1));
        }
        assert_eq!(channel.demand(CLASS), 1, "one ask");
        assert_eq!(keeper.stats().snapshot().peak_held_bytes, 0);
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// A warp takes the one slab the bound allows, the class is used up (a drain retires the slab
/// with one object live) and the warp asks again: the host must deny that ask, whenever its
/// sweep reads the ask and the count of slabs taken. (Reading `taken` before the ask, a sweep
/// paused between the two reads saw the new ask against the old count and never answered it.)
#[test]
fn a_second_ask_is_denied_however_the_hosts_reads_fall() {
    model_caches(|| {
        let (_, caches, keeper, resolver) = caches(16);
        let host = tend_until(keeper, resolver, |k| k.stats().snapshot().denials == 1);
        let first = cached_alloc(&caches, 1);
        assert_eq!(first.served, 1);
        caches.drain();
        let second = cached_alloc(&caches, 1);
        let (mut keeper, mut resolver) = host.join().unwrap();
        assert_eq!((second.served, second.fallback), (0, 1));
        assert_eq!(keeper.stats().snapshot().denials_at_bound, 1);
        let freed = cached_free(&caches, &first.handles[..1]);
        assert_eq!(freed.lanes[0], LaneStatus::Ok);
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// Two objects taken from a slab (the host serving the ask), then a drain that retires the slab
/// with both still live.
fn retired_slab_with_two_objects() -> (Arc<CpuCaches>, CacheKeeper, Resolver, CachedAlloc) {
    let (channel, caches, keeper, resolver) = caches(ARENA_BLOCKS as u64);
    let host = tend_until(keeper, resolver, move |_| channel.taken(CLASS) > 0);
    let alloc = cached_alloc(&caches, 2);
    let (mut keeper, mut resolver) = host.join().unwrap();
    assert_eq!(alloc.served, 0b11);
    caches.drain();
    keeper.reclaim(&mut resolver);
    (caches, keeper, resolver, alloc)
}

/// A slab retired by a drain with objects still live goes back to the host when its last object
/// is freed, while the host tends: the host gives its blocks back exactly once, and a later free
/// of one of its handles is a second free.
#[test]
fn a_slab_freed_empty_while_the_host_tends_goes_back_once() {
    model_caches(|| {
        let (caches, keeper, resolver, alloc) = retired_slab_with_two_objects();
        assert_eq!(keeper.held_bytes(), 16 << 21, "the retired slab is held");

        let host = tend_until(keeper, resolver, |k| k.stats().snapshot().returns == 1);
        let freed = cached_free(&caches, &alloc.handles[..2]);
        let (mut keeper, mut resolver) = host.join().unwrap();
        assert_eq!(freed.handled, 0b11);
        assert!(freed.lanes[..2].iter().all(|s| *s == LaneStatus::Ok));
        assert_eq!(keeper.stats().snapshot().returns, 1);
        assert_eq!(keeper.held_bytes(), 0);
        // The slab is gone, yet its handle is still known for a cache's: a second free, judged
        // on the device.
        let again = cached_free(&caches, &alloc.handles[..1]);
        assert_eq!(again.handled, 1);
        assert_eq!(again.lanes[0], LaneStatus::DoubleFree);
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// What two warps did with their objects before freeing them comes before the slab's return, as
/// the host sees it: each writes its object (a relaxed word standing for its bytes), then frees it
/// while the other does; the warp whose count-down reaches zero gives the slab back, and the host,
/// once it took the return, reads both writes. Each count-down is a release and the last one
/// fences (acquire) before the return: with relaxed count-downs, the host may read a word as it
/// was before the other warp wrote it.
#[test]
fn what_warps_wrote_to_their_objects_comes_before_the_slab_s_return() {
    model_caches(|| {
        let (caches, keeper, resolver, alloc) = retired_slab_with_two_objects();
        let objects = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);

        let host = {
            let objects = objects.clone();
            thread::spawn(move || {
                let mut keeper = keeper;
                let mut resolver = resolver;
                while keeper.stats().snapshot().returns == 0 {
                    if keeper.tend(&mut resolver) == 0 {
                        thread::yield_now();
                    }
                }
                // The slab is the host's again: a next owner of its bytes sees the last writes.
                let seen = [0, 1].map(|i| objects[i].load(Ordering::Relaxed));
                (keeper, resolver, seen)
            })
        };
        let other = {
            let caches = caches.clone();
            let objects = objects.clone();
            thread::spawn(move || {
                objects[1].store(2, Ordering::Relaxed);
                cached_free(&caches, &alloc.handles[1..2]).lanes[0]
            })
        };
        objects[0].store(1, Ordering::Relaxed);
        let mine = cached_free(&caches, &alloc.handles[..1]).lanes[0];
        assert_eq!(
            (mine, other.join().unwrap()),
            (LaneStatus::Ok, LaneStatus::Ok)
        );
        let (mut keeper, mut resolver, seen) = host.join().unwrap();
        assert_eq!(
            seen,
            [1, 2],
            "the host took the slab back before a warp's writes"
        );
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}

/// A second free racing the slab's return: one warp frees the last live object of a retired slab
/// (its return unmaps the blocks) while another frees an object of it again. The second free is
/// a double free whichever way they interleave (its bit still set, or the slab gone), and the
/// slab goes back once. (A second free that outlives the slab's next start is in the unit tests
/// of `caches::device`, step by step.)
#[test]
fn a_second_free_racing_the_slab_s_return_is_a_double_free() {
    model_caches(|| {
        let (caches, mut keeper, mut resolver, alloc) = retired_slab_with_two_objects();
        assert_eq!(
            cached_free(&caches, &alloc.handles[..1]).lanes[0],
            LaneStatus::Ok
        );

        let last = {
            let caches = caches.clone();
            thread::spawn(move || cached_free(&caches, &alloc.handles[1..2]))
        };
        let again = cached_free(&caches, &alloc.handles[..1]);
        let last = last.join().unwrap();
        assert_eq!(last.lanes[0], LaneStatus::Ok);
        assert_eq!(again.handled, 1);
        assert_eq!(again.lanes[0], LaneStatus::DoubleFree);
        returned_once_then_empty(&caches, &mut keeper, &mut resolver, 1);
    });
}

/// After a retired slab's two objects were freed, `second_frees` of them refused: the host
/// takes the slab back once, the frees are counted by outcome, and everything drains.
fn returned_once_then_empty(
    caches: &CpuCaches,
    keeper: &mut CacheKeeper,
    resolver: &mut Resolver,
    second_frees: u64,
) {
    keeper.tend(resolver);
    assert_eq!(keeper.stats().snapshot().returns, 1);
    let frees = caches.frees_by_outcome();
    assert_eq!(frees[LaneStatus::Ok as usize], 2);
    assert_eq!(frees[LaneStatus::DoubleFree as usize], second_frees);
    drain_to_empty(caches, keeper, resolver);
}

/// Lanes that share a bitmap word set their bits with one atomic OR (as on the GPU), racing a
/// second free: one warp frees both objects of a retired slab (in one word), its third lane the
/// first object again, while another warp frees the second object again. Of each object exactly
/// one free is `Ok`: the lowest of one warp's lanes, and whichever warp's OR lands first; the
/// slab goes back once.
#[test]
fn lanes_of_one_word_and_a_racing_second_free_free_each_object_once() {
    model_caches(|| {
        let (caches, mut keeper, mut resolver, alloc) = retired_slab_with_two_objects();
        let [first, second] = [alloc.handles[0], alloc.handles[1]];
        let other = {
            let caches = caches.clone();
            thread::spawn(move || cached_free(&caches, &[second]).lanes[0])
        };
        let mine = cached_free(&caches, &[first, second, first]);
        let other = other.join().unwrap();
        assert_eq!(mine.handled, 0b111);
        assert_eq!(
            (mine.lanes[0], mine.lanes[2]),
            (LaneStatus::Ok, LaneStatus::DoubleFree)
        );
        let mut seconds = [mine.lanes[1], other];
        seconds.sort_by_key(|s| *s as u32);
        assert_eq!(seconds, [LaneStatus::Ok, LaneStatus::DoubleFree]);
        returned_once_then_empty(&caches, &mut keeper, &mut resolver, 2);
    });
}

/// A free posted without waiting leaves its port owed: the warp that takes the port next waits
/// for the host's answer to it before writing its own request, so the host reads both whole and
/// in order, and the second warp gets its own reply. The free is posted before the host starts
/// (so it is still unanswered when the next warp comes); the real client and server run on the
/// only port. After the host served both, the posted free is done: the object is freed and
/// counted, the allocation is live, and nothing else is.
#[test]
fn a_posted_free_holds_its_port_until_answered() {
    model_whole_requests(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let resolver = Arc::new(Mutex::new(
            Resolver::new(ResolverConfig::new(1 << 40, 4)).unwrap(),
        ));
        let mut sizes = [0u64; 32];
        sizes[0] = 256;
        let old = resolver
            .lock()
            .alloc(&sizes, translator::Arrangement::Contiguous)
            .unwrap()
            .handles[0];
        let device = CpuDevice::new(mailbox.clone());
        let mut handles = [Handle::NULL; 32];
        handles[0] = old;
        let posted = device.post_free(1, 1, &handles);
        assert_eq!(posted.status, Status::Ok, "a posted free does not wait");
        let host = serve_real(&mailbox, &resolver, 2);
        sizes[0] = 64;
        let new = device
            .malloc(2, 1, &sizes, false)
            .unwrap_or_else(|s| panic!("the allocating warp was answered {s:?}"))[0];
        host.join().unwrap();
        let mut resolver = resolver.lock();
        assert_eq!(resolver.counters().lanes_freed, 1);
        assert_eq!(resolver.object_capacity(old), Err(LaneStatus::DoubleFree));
        assert_eq!(resolver.object_capacity(new), Ok(64));
        assert_eq!(resolver.free(new), LaneStatus::Ok);
        resolver.drain_quarantine();
        resolver.check_invariants().unwrap();
        assert!(resolver.is_empty());
    });
}

/// A class that claims ahead (512 B objects, 8 192 in a slab of two blocks).
const SMALL: usize = 5;

/// A warp's allocation of one object of [`SMALL`] in lane 0.
fn small_alloc(caches: &CpuCaches) -> CachedAlloc {
    let mut sizes = [0u64; 32];
    sizes[0] = 512;
    caches.alloc(1, &sizes, false, &|| false)
}

/// The bases of the slabs [`SMALL`]'s lock holder claimed ahead.
fn claimed_ahead(caches: &CpuCaches) -> Vec<u64> {
    let (_, entries) = caches.claimed_ahead(SMALL);
    entries.into_iter().map(|e| entry_parts(e).0).collect()
}

/// The host takes its published slabs back (the arena needs the room) while the warp that moves
/// a small class claims its slab and the next ones ahead: each is the warp's (claimed, posted
/// taken, kept by the host) or the host's (the claim withdrawn), never both; a warp whose slab
/// was taken back is denied and goes to the mailbox. A drain gives the slabs claimed ahead back,
/// and everything comes home.
#[test]
fn a_slab_claimed_ahead_while_the_host_takes_slabs_back_is_the_warps_or_the_hosts() {
    assert!(claims_ahead(SMALL));
    model_caches(|| {
        let (channel, caches, keeper, resolver) = caches_of(ARENA_BLOCKS as u64, 4);
        // The class in use: a slab taken, retired by a drain with its object live, and slabs
        // published ahead of the next move.
        let host = {
            let channel = channel.clone();
            tend_until(keeper, resolver, move |_| channel.taken(SMALL) > 0)
        };
        let first = small_alloc(&caches);
        assert_eq!(first.served, 1);
        let (mut keeper, mut resolver) = host.join().unwrap();
        caches.drain();
        keeper.tend(&mut resolver);
        let taken = channel.taken(SMALL);
        assert!(channel.filled(SMALL) >= taken + 2, "two published ahead");

        let host = thread::spawn(move || {
            let recalled = keeper.recall(&mut resolver);
            (keeper, resolver, recalled)
        });
        let second = small_alloc(&caches);
        let (mut keeper, mut resolver, recalled) = host.join().unwrap();
        match (second.served, second.fallback) {
            (1, 0) => assert!(
                keeper.slab_at(second.handles[0].address()).is_some(),
                "the object lies in a slab the host holds"
            ),
            (0, 1) => assert!(recalled > 0, "denied only once its slab was taken back"),
            other => panic!("served/fallback {other:?}"),
        }
        let ahead = claimed_ahead(&caches);
        for &base in &ahead {
            assert!(keeper.slab_at(base).is_some(), "a slab ahead is held");
        }
        assert_eq!(
            channel.taken(SMALL),
            taken + second.served + ahead.len() as u32,
            "and counted taken"
        );
        keeper.check().unwrap();
        for alloc in [first, second].iter().filter(|a| a.served == 1) {
            assert_eq!(
                cached_free(&caches, &alloc.handles[..1]).lanes[0],
                LaneStatus::Ok
            );
        }
        drain_to_empty(&caches, &mut keeper, &mut resolver);
    });
}
