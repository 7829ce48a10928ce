//! The device caches' protocol, written twice: `detail/cache.cuh` (what the GPU runs) and
//! `orchestrator::caches::CpuCaches` (what the CPU warps run, and what loom checks). Both are
//! driven here with the same steps: warps that allocate mixed sizes (every cache class, the run
//! class, sizes no class holds, lanes asking 0), warps that free live objects by handle and by
//! address, second frees, interior pointers and made-up handles, and drains, against a host that
//! publishes slabs ahead, answers asks, denies them at a bound and takes returned slabs back.
//! After every step each side's answers and every word of its state must be equal.
//!
//! The C++ runs on a host warp (`shim/simt.h`): its lanes take turns in lane order between
//! warp-wide instructions, as the CPU warps take a warp's lanes one by one, and the host answers
//! each class's asks from that class's own slab ids, so both sides meet the same host whatever
//! order their classes ask in.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use hostcheck::caches::HostCaches;
use hostcheck::cases::Rng;
use orchestrator::caches::channel::entry_word;
use orchestrator::caches::{
    CACHE_CLASSES, CacheChannel, CachedAlloc, CachedFree, CpuCaches, DEVICE_ARRAYS, RING_LEN,
    RUN_CLASS, cache_class, run_class_serves,
};
use orchestrator::records::LaneStatus;
use translator::Handle;

/// Slab ids per class; each class's slabs come from its own ids.
const IDS_PER_CLASS: u32 = 6;
/// Slabs a class may hold at once (published, current or used up): asks past it are denied.
const CLASS_BOUND: usize = 4;
/// Slabs the host keeps published ahead of what a class took.
const AHEAD: u32 = 2;
/// Blocks between two slab ids' bases: room for the largest slab.
const ID_STRIDE_BLOCKS: u64 = 16;

fn max_slabs() -> usize {
    CACHE_CLASSES * IDS_PER_CLASS as usize
}

fn arena_blocks() -> u64 {
    1 + max_slabs() as u64 * ID_STRIDE_BLOCKS
}

/// The host's side for one runtime, as the service's keeper does it but decided per class.
struct TestHost {
    channel: Arc<CacheChannel>,
    free_ids: Vec<BTreeSet<u32>>,
    generation: Vec<u32>,
    published: [u32; CACHE_CLASSES],
    answered: [u32; CACHE_CLASSES],
    denial_stands: [bool; CACHE_CLASSES],
    next_return: u64,
    returned: u64,
    denials: u64,
}

impl TestHost {
    fn new(channel: Arc<CacheChannel>) -> Self {
        let free_ids = (0..CACHE_CLASSES as u32)
            .map(|c| (c * IDS_PER_CLASS..(c + 1) * IDS_PER_CLASS).collect())
            .collect();
        Self {
            channel,
            free_ids,
            generation: vec![0; max_slabs()],
            published: [0; CACHE_CLASSES],
            answered: [0; CACHE_CLASSES],
            denial_stands: [false; CACHE_CLASSES],
            next_return: 0,
            returned: 0,
            denials: 0,
        }
    }

    fn take_returns(&mut self) {
        while let Some(id) = self.channel.returned(self.next_return) {
            let class = (id / IDS_PER_CLASS) as usize;
            assert!(self.free_ids[class].insert(id), "slab {id} returned twice");
            self.next_return += 1;
            self.returned += 1;
        }
    }

    fn held(&self, class: usize) -> usize {
        IDS_PER_CLASS as usize - self.free_ids[class].len()
    }

    /// Publish `class`'s next slab if its bound and the ring allow.
    fn publish(&mut self, class: usize) -> bool {
        let unconsumed = self.published[class] - self.channel.taken(class);
        if self.held(class) >= CLASS_BOUND || unconsumed as usize >= RING_LEN {
            return false;
        }
        let id = self.free_ids[class]
            .pop_first()
            .expect("a free id below the bound");
        self.generation[id as usize] += 1;
        let base = (1 + u64::from(id) * ID_STRIDE_BLOCKS) << 21;
        let entry = entry_word(base, id, self.generation[id as usize]);
        self.channel.publish(class, self.published[class], entry);
        self.published[class] += 1;
        true
    }

    /// Between warps: take returns, publish where a denial stands, keep `AHEAD` published.
    fn settle(&mut self) {
        self.take_returns();
        for class in 0..CACHE_CLASSES {
            if self.denial_stands[class] && self.publish(class) {
                self.channel.withdraw_denial(class);
                self.denial_stands[class] = false;
            }
            while self.published[class] - self.channel.taken(class) < AHEAD && self.publish(class) {
            }
        }
    }

    /// While a warp runs: answer each new ask with a slab, or deny it at the bound.
    fn answer_asks(&mut self) {
        for class in 0..CACHE_CLASSES {
            let ask = self.channel.demand(class);
            if ask == self.answered[class] {
                continue;
            }
            self.answered[class] = ask;
            self.take_returns();
            if self.published[class] > self.channel.taken(class) || self.publish(class) {
                continue;
            }
            self.channel.deny(class, ask);
            self.denial_stands[class] = true;
            self.denials += 1;
        }
    }

    /// Run `warp` while this host answers asks on another thread.
    fn serve_while<T>(host: &Mutex<TestHost>, warp: impl FnOnce() -> T) -> T {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    host.lock().unwrap().answer_asks();
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            });
            let out = warp();
            done.store(true, Ordering::Release);
            out
        })
    }
}

/// One runtime's caches: the words, the channel and the host.
struct Side {
    channel: Arc<CacheChannel>,
    caches: CpuCaches,
    host: Mutex<TestHost>,
}

impl Side {
    fn new() -> Self {
        let channel = Arc::new(CacheChannel::new(max_slabs()));
        let caches = CpuCaches::new(channel.clone(), arena_blocks());
        let host = Mutex::new(TestHost::new(channel.clone()));
        host.lock().unwrap().settle();
        for c in 0..CACHE_CLASSES {
            channel.withdraw_denial(c);
        }
        Self {
            channel,
            caches,
            host,
        }
    }

    /// Every word of the device state, the block table as the mapping it holds (where a key
    /// sits depends on which class mapped its blocks first), and the channel's words.
    fn state(&self) -> (Vec<Vec<u8>>, BTreeMap<u64, u64>, Vec<u64>) {
        let mut arrays: Vec<Vec<u8>> = (0..DEVICE_ARRAYS).map(|i| self.caches.save(i)).collect();
        let table = std::mem::take(&mut arrays[10])
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .filter(|&e| e != 0)
            .map(|e| (e >> 32, e & 0xFFFF_FFFF))
            .collect();
        let host = self.host.lock().unwrap();
        let mut channel = Vec::new();
        for c in 0..CACHE_CLASSES {
            channel.extend([
                u64::from(self.channel.filled(c)),
                u64::from(self.channel.denied(c)),
                u64::from(self.channel.taken(c)),
                u64::from(self.channel.demand(c)),
            ]);
        }
        // The returns ring's entries the host has read, as far back as the ring still holds them.
        let window = host.next_return.saturating_sub(max_slabs() as u64)..host.next_return;
        channel.extend(window.map(|i| u64::from(self.channel.returned(i).expect("read once"))));
        (arrays, table, channel)
    }
}

/// What one warp asks: a size per lane (0: the lane takes no part).
fn draw_sizes(rng: &mut Rng, mask: u32) -> [u64; 32] {
    let mut sizes = [0u64; 32];
    // A warp's run-class lanes: few large objects, or many mid-sized ones.
    let run_max = if rng.chance(50) { 4 << 20 } else { 256 << 10 };
    for (lane, size) in sizes.iter_mut().enumerate() {
        if mask >> lane & 1 == 0 {
            continue;
        }
        *size = match rng.below(100) {
            0..5 => 0,
            5..10 => rng.range((4 << 20) + 1, 8 << 20),
            10..25 => rng.range(1, 4096),
            25..55 => rng.range(4097, 32 << 10),
            _ => rng.range((32 << 10) + 1, run_max),
        };
    }
    sizes
}

/// The lanes `CpuCaches::alloc` serves or sends to the host as denied: those a cache class
/// holds, the run class's only where `run_class_serves` says so.
fn eligible(mask: u32, sizes: &[u64; 32], arranged: bool) -> u32 {
    let lanes = |f: &dyn Fn(usize) -> bool| {
        (0..32)
            .filter(|&l| mask >> l & 1 == 1 && f(l))
            .fold(0u32, |m, l| m | 1 << l)
    };
    let runs = lanes(&|l| cache_class(sizes[l]) == Some(RUN_CLASS));
    let max = (0..32)
        .filter(|&l| runs >> l & 1 == 1)
        .map(|l| sizes[l])
        .max()
        .unwrap_or(0);
    let packed = (0..32)
        .filter(|&l| runs >> l & 1 == 1)
        .map(|l| sizes[l].next_multiple_of(16))
        .sum();
    let cached = lanes(&|l| cache_class(sizes[l]).is_some());
    if runs != 0 && !run_class_serves(arranged, max, packed) {
        cached & !runs
    } else {
        cached
    }
}

/// A warp whose lanes all ask one size (most lanes of a power-of-two class).
fn draw_one_size(rng: &mut Rng, mask: u32) -> [u64; 32] {
    let size = rng.range(1, 32 << 10);
    let mut sizes = [0u64; 32];
    for (lane, s) in sizes.iter_mut().enumerate() {
        if mask >> lane & 1 == 1 {
            *s = size;
        }
    }
    sizes
}

/// The largest group of `batch`'s power-of-two-class objects that share one bitmap word (32
/// slots of a slab; slabs start on 2 MiB), freed by their own lanes; at times one more lane
/// frees one of them too.
fn one_word_free(rng: &mut Rng, batch: &[(usize, u64, u64)], by_address: bool) -> (u32, [u64; 32]) {
    let word_of = |&(_, handle, size): &(usize, u64, u64)| {
        let class = cache_class(size).filter(|&c| c != RUN_CLASS)?;
        Some((class, Handle(handle).address() / (32 * (16u64 << class))))
    };
    let mut groups: BTreeMap<(usize, u64), Vec<(usize, u64)>> = BTreeMap::new();
    for b in batch {
        if let Some(key) = word_of(b) {
            groups.entry(key).or_default().push((b.0, b.1));
        }
    }
    let mut mask = 0u32;
    let mut words = [0u64; 32];
    let word = |h: u64| if by_address { Handle(h).address() } else { h };
    if let Some(group) = groups.values().max_by_key(|g| g.len()) {
        for &(lane, handle) in group {
            mask |= 1 << lane;
            words[lane] = word(handle);
        }
        if rng.chance(30) && mask != u32::MAX {
            let twin = (0..32).find(|l| mask >> l & 1 == 0).expect("a lane left");
            words[twin] = word(group[rng.below(group.len() as u64) as usize].1);
            mask |= 1 << twin;
        }
    }
    (mask, words)
}

/// Both sides free `words` with the lanes of `mask`; their answers must be equal.
#[allow(clippy::too_many_arguments)]
fn free_step(
    rust: &Side,
    cpp: &Side,
    host_cpp: &HostCaches,
    mask: u32,
    words: &[u64; 32],
    by_address: bool,
    at: &str,
    seen: &mut Seen,
) -> CachedFree {
    let a = TestHost::serve_while(&rust.host, || rust.caches.free(mask, words, by_address));
    let b = TestHost::serve_while(&cpp.host, || host_cpp.free(mask, words, by_address));
    assert_eq!(
        a.handled, b.handled,
        "{at}: lanes judged in the caches, words {words:x?}"
    );
    let failed = (0..32).any(|l| a.handled >> l & 1 == 1 && a.lanes[l] != LaneStatus::Ok);
    for lane in (0..32).filter(|l| a.handled >> l & 1 == 1) {
        assert_eq!(
            a.lanes[lane] as u32, b.lanes[lane],
            "{at}: lane {lane}'s outcome"
        );
        assert_eq!(
            b.any_failed >> lane & 1 == 1,
            failed,
            "{at}: lane {lane} told of a failure"
        );
        *seen.frees.entry(b.lanes[lane]).or_default() += 1;
    }
    if a.handled.count_ones() > 1 && (0..32).all(|l| mask >> l & 1 == 0 || a.handled >> l & 1 == 1)
    {
        seen.one_word_frees += 1;
    }
    a
}

#[derive(Default)]
struct Seen {
    /// Free steps whose lanes (more than one) were all judged in the caches.
    one_word_frees: u64,
    /// Such steps where two lanes freed one object.
    one_object_twice: u64,
    served: u64,
    fallback: u64,
    frees: BTreeMap<u32, u64>,
    drains: u64,
    /// Steps after which a class held a slab claimed ahead.
    held_ahead: u64,
    /// Steps after which a class held more than one.
    held_several: u64,
    /// Steps in which a class moved into the slab it had claimed ahead.
    started_ahead: u64,
    /// Drains that gave a slab claimed ahead back.
    drained_ahead: u64,
}

/// Per class, the slab number the next slab claimed ahead becomes (0: none held), the number
/// after the last one held, and the current slab number.
fn ahead_and_current(caches: &CpuCaches) -> Vec<(u64, u64, u64)> {
    let words = |i: usize| -> Vec<u64> {
        caches
            .save(i)
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let class_words = words(0);
    (0..CACHE_CLASSES)
        .map(|c| {
            let (numbers, _) = caches.claimed_ahead(c);
            let first = if numbers.is_empty() { 0 } else { numbers.start };
            (
                u64::from(first),
                u64::from(numbers.end),
                class_words[c] >> 32,
            )
        })
        .collect()
}

/// What the allocating warps ask.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Draw {
    /// Every class, the run class, sizes no class holds and lanes asking 0.
    Mixed,
    /// Warps of 32 lanes of 257 B to 512 B each (a class that claims ahead, 8 192 objects a
    /// slab) or freeing the 32 oldest objects, and few drains: slabs run out every 256 warps
    /// and go back in order.
    OneSmallClass,
}

/// A step of [`Draw::OneSmallClass`]: free the 32 oldest live objects.
const FREE_OLDEST: u64 = 100;

fn run_case(seed: u64, steps: usize, draw: Draw, seen: &mut Seen) {
    let mut rng = Rng(seed);
    let rust = Side::new();
    let cpp = Side::new();
    let host_cpp = HostCaches::new(&cpp.caches, &cpp.channel);
    let mut live: Vec<u64> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    // The served lanes of the last allocation: (lane, handle, size).
    let mut last_batch: Vec<(usize, u64, u64)> = Vec::new();
    for step in 0..steps {
        let at = format!("seed {seed}, step {step}");
        let before = ahead_and_current(&rust.caches);
        let mut drained = false;
        let mask = (rng.next_u64() as u32) | 1;
        // One small class: few drains, so slabs get used up between them.
        let roll = match draw {
            Draw::Mixed => rng.below(100),
            Draw::OneSmallClass if rng.below(500) == 0 => 0,
            Draw::OneSmallClass if rng.chance(50) => 2,
            Draw::OneSmallClass => FREE_OLDEST,
        };
        match roll {
            0..2 => {
                let a = rust.caches.drain();
                let b = cpp.caches.drain();
                assert_eq!(a, b, "{at}: drain");
                seen.drains += 1;
                drained = true;
                if before.iter().any(|&(ahead, ..)| ahead != 0) {
                    seen.drained_ahead += 1;
                    assert!(
                        ahead_and_current(&rust.caches)
                            .iter()
                            .zip(&before)
                            .all(|(now, was)| now.0 == 0 && (was.0 == 0 || now.2 == was.1 - 1)),
                        "{at}: a drain leaves no slab claimed ahead, the class at the last one's number"
                    );
                }
            }
            2..55 => {
                let sizes = if draw == Draw::OneSmallClass {
                    [rng.range(257, 512); 32]
                } else if rng.chance(20) {
                    draw_one_size(&mut rng, mask)
                } else {
                    draw_sizes(&mut rng, mask)
                };
                let arranged = rng.chance(50);
                let mask = if draw == Draw::OneSmallClass {
                    u32::MAX
                } else {
                    mask
                };
                let a: CachedAlloc = TestHost::serve_while(&rust.host, || {
                    rust.caches.alloc(mask, &sizes, arranged, &|| false)
                });
                let b = TestHost::serve_while(&cpp.host, || host_cpp.alloc(mask, &sizes, arranged));
                assert_eq!(a.served, b.served, "{at}: lanes served, sizes {sizes:?}");
                assert_eq!(
                    a.fallback,
                    eligible(mask, &sizes, arranged) & !b.served,
                    "{at}: lanes denied"
                );
                for lane in 0..32 {
                    assert_eq!(
                        a.handles[lane].0, b.handles[lane],
                        "{at}: lane {lane}'s handle"
                    );
                }
                live.extend(
                    (0..32)
                        .filter(|l| a.served >> l & 1 == 1)
                        .map(|l| a.handles[l].0),
                );
                last_batch = (0..32)
                    .filter(|l| a.served >> l & 1 == 1)
                    .map(|l| (l, a.handles[l].0, sizes[l]))
                    .collect();
                seen.served += u64::from(a.served.count_ones());
                seen.fallback += u64::from(a.fallback.count_ones());
            }
            FREE_OLDEST if !live.is_empty() => {
                // The oldest objects, so slabs empty in the order they were used and go back.
                let n = live.len().min(32);
                let mut words = [0u64; 32];
                for (word, handle) in words.iter_mut().zip(live.drain(..n)) {
                    *word = handle;
                    freed.push(handle);
                }
                let mask = ((1u64 << n) - 1) as u32;
                // Live objects, each freed once: every one is the caches' and frees (a slab
                // started from the ones claimed ahead has its words in its life, as any).
                let out = free_step(&rust, &cpp, &host_cpp, mask, &words, false, &at, seen);
                assert_eq!(
                    out.handled, mask,
                    "{at}: live objects the caches did not judge"
                );
                for lane in 0..n {
                    assert_eq!(
                        out.lanes[lane],
                        LaneStatus::Ok,
                        "{at}: lane {lane} freeing a live object"
                    );
                }
            }
            _ if rng.chance(25) && !last_batch.is_empty() => {
                // A warp frees objects its lanes took together, all in one bitmap word (one
                // atomic OR for the lanes that share it on the GPU, one per lane here), at times
                // with a second lane freeing one of them again; a batch freed before is a second
                // free of each.
                let by_address = rng.chance(30);
                let (mask, words) = one_word_free(&mut rng, &last_batch, by_address);
                let lanes: Vec<u64> = (0..32)
                    .filter(|l| mask >> l & 1 == 1)
                    .map(|l| words[l])
                    .collect();
                if (1..lanes.len()).any(|i| lanes[..i].contains(&lanes[i])) {
                    seen.one_object_twice += 1;
                }
                for lane in (0..32).filter(|l| mask >> l & 1 == 1) {
                    let handle = last_batch.iter().find(|b| b.0 == lane).map(|b| b.1);
                    if let Some(at) = handle.and_then(|h| live.iter().position(|&x| x == h)) {
                        freed.push(live.swap_remove(at));
                    }
                }
                free_step(&rust, &cpp, &host_cpp, mask, &words, by_address, &at, seen);
            }
            _ => {
                let by_address = rng.chance(30);
                let mut words = [0u64; 32];
                for (lane, word) in words.iter_mut().enumerate() {
                    if mask >> lane & 1 == 0 {
                        continue;
                    }
                    let handle = match rng.below(100) {
                        0..6 if !freed.is_empty() => freed[rng.below(freed.len() as u64) as usize],
                        6..9 if !live.is_empty() => {
                            live[rng.below(live.len() as u64) as usize] + 16
                        }
                        9..11 => Handle::cached((1 + rng.below(arena_blocks())) << 21, 3).0,
                        // A live object's stamp, further on: past what was handed out.
                        11..13 if !live.is_empty() => {
                            live[rng.below(live.len() as u64) as usize] + (1 << 20)
                        }
                        13..16 => 0,
                        _ if !live.is_empty() => {
                            let h = live.swap_remove(rng.below(live.len() as u64) as usize);
                            freed.push(h);
                            h
                        }
                        _ => 0,
                    };
                    *word = if by_address {
                        Handle(handle).address()
                    } else {
                        handle
                    };
                }
                free_step(&rust, &cpp, &host_cpp, mask, &words, by_address, &at, seen);
            }
        }
        rust.host.lock().unwrap().settle();
        cpp.host.lock().unwrap().settle();
        let (a, b) = (rust.state(), cpp.state());
        for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
            assert!(x == y, "{at}: device array {i} differs");
        }
        assert_eq!(a.1, b.1, "{at}: the block table maps differently");
        assert_eq!(a.2, b.2, "{at}: the channel's words differ");
        let after = ahead_and_current(&rust.caches);
        seen.held_ahead += u64::from(after.iter().any(|&(ahead, ..)| ahead != 0));
        seen.held_several += u64::from(
            after
                .iter()
                .any(|&(ahead, end, _)| ahead != 0 && end > ahead + 1),
        );
        seen.started_ahead += u64::from(
            !drained
                && before
                    .iter()
                    .zip(&after)
                    .any(|(was, now)| was.0 != 0 && now.2 >= was.0 && now.0 != was.0),
        );
    }
    let host = rust.host.lock().unwrap();
    assert!(host.returned > 0, "seed {seed}: no slab came back");
}

#[test]
fn the_gpus_caches_and_the_cpu_warps_twin_answer_alike_and_leave_the_same_words() {
    let mut seen = Seen::default();
    for seed in 1..=6 {
        run_case(seed * 0x9E37_79B9, 300, Draw::Mixed, &mut seen);
    }
    // The steps reached every path they are there for.
    assert!(
        seen.served > 10_000 && seen.fallback > 0,
        "served {} denied {}",
        seen.served,
        seen.fallback
    );
    for status in [
        LaneStatus::Ok,
        LaneStatus::DoubleFree,
        LaneStatus::InteriorPointer,
        LaneStatus::InvalidHandle,
    ] {
        assert!(
            seen.frees.get(&(status as u32)).copied().unwrap_or(0) > 0,
            "no free answered {status:?}: {:?}",
            seen.frees
        );
    }
    assert!(seen.drains > 0);
    assert!(
        seen.one_word_frees > 20,
        "warps freeing into one word: {}",
        seen.one_word_frees
    );
    assert!(
        seen.one_object_twice > 5,
        "warps freeing one object from two lanes: {}",
        seen.one_object_twice
    );
}

/// Warps that use slabs of a class that claims ahead up: the lock holder that moves the class
/// claims the host's next published slabs in one claim and posts them taken, the next moves
/// start them without the host's words, and a drain gives them back; both sides alike at every
/// step.
#[test]
fn slabs_claimed_ahead_start_without_the_host_and_drain_back_alike() {
    let mut seen = Seen::default();
    for seed in 1..=3 {
        run_case(seed * 0x51_7CC1_B727, 4000, Draw::OneSmallClass, &mut seen);
    }
    assert!(
        seen.held_ahead > 3000
            && seen.held_several > 100
            && seen.started_ahead > 5
            && seen.drained_ahead > 5,
        "slabs claimed ahead: held after {} steps (several after {}), started in {}, drained in {}",
        seen.held_ahead,
        seen.held_several,
        seen.started_ahead,
        seen.drained_ahead
    );
}
