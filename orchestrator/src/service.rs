//! The service thread: sweeps the mailbox, batches pending requests, resolves them and answers.
//!
//! One plain OS thread (never an async task) busy-polls with backoff. Each sweep collects at most
//! `max_batch` pending ports, starting where the last sweep stopped so no port starves. A batch is
//! served in this order: requests with a bad sequence number are answered `BadSequence` (and the
//! port resynchronised); frees, so their memory is reusable at once; allocations, by largest lane
//! size and so grouped by size class; then every reply is written and acknowledged. Stopping closes the mailbox first, then
//! answers whatever is still pending with `Shutdown`, so no waiting warp hangs; if the thread ever
//! unwinds from a panic (a bug), a guard does the same before the thread ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use translator::WARP_LANES;

use crate::caches::{CacheKeeper, SlabSource};
use crate::mailbox::Mailbox;
use crate::records::{Op, ReplyRecord, RequestRecord, Status};
use crate::resolver::Resolver;
use crate::stats::ServiceStats;

/// How the service thread polls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Most requests served in one batch.
    pub max_batch: usize,
    /// Empty sweeps spent spinning before the thread starts yielding and sleeping.
    pub spin_sweeps: u32,
    /// Longest sleep between empty sweeps.
    pub max_sleep: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            max_batch: 1024,
            spin_sweeps: 64,
            max_sleep: Duration::from_micros(50),
        }
    }
}

/// One pending request taken from a port.
#[derive(Clone, Copy, Debug)]
struct Taken {
    port: usize,
    seq: u32,
    in_order: bool,
    request: RequestRecord,
}

/// Sweeps and serves; owns the batch buffers so a sweep allocates nothing.
pub struct Server {
    mailbox: Arc<Mailbox>,
    resolver: Arc<Mutex<Resolver>>,
    stats: Arc<ServiceStats>,
    max_batch: usize,
    next_port: usize,
    batch: Vec<Taken>,
    order: Vec<(u64, usize)>,
    replies: Vec<ReplyRecord>,
    errors: ErrorDigest,
    caches: Option<Arc<Mutex<CacheKeeper>>>,
}

/// Requests that were not (fully) served since the last warning, by status.
struct ErrorDigest {
    since: Instant,
    by_status: [u64; Status::COUNT],
}

impl ErrorDigest {
    /// Seconds between two warnings.
    const PERIOD: Duration = Duration::from_secs(1);

    fn count(&mut self, reply: &ReplyRecord) {
        if reply.status != Status::Ok as u32 {
            self.by_status[(reply.status as usize).min(Status::COUNT - 1)] += 1;
        }
    }

    /// Warn once a period with what failed, so a storm of bad requests cannot flood the log.
    fn flush(&mut self, force: bool) {
        if self.by_status.iter().all(|&n| n == 0)
            || !(force || self.since.elapsed() >= Self::PERIOD)
        {
            return;
        }
        let summary: Vec<String> = Status::ALL
            .iter()
            .filter(|s| self.by_status[**s as usize] > 0)
            .map(|s| format!("{s:?}: {}", self.by_status[*s as usize]))
            .collect();
        tracing::warn!(
            seconds = self.since.elapsed().as_secs_f32(),
            "requests not (fully) served: {}",
            summary.join(", ")
        );
        self.by_status = [0; Status::COUNT];
        self.since = Instant::now();
    }
}

/// The order of a request within a batch: frees first, then allocations by their largest lane
/// size (size classes are ranges of that size, so this groups them by class without computing a
/// geometry twice), then unknown ops.
fn batch_rank(request: &RequestRecord) -> u64 {
    match Op::from_code(request.op) {
        Some(Op::Free | Op::FreePointer) => 0,
        Some(Op::Alloc | Op::AllocContiguous) => {
            let largest = (0..WARP_LANES)
                .filter(|lane| request.lane_mask >> lane & 1 == 1)
                .map(|lane| request.words[lane])
                .max()
                .unwrap_or(0);
            largest.saturating_add(1).min(u64::MAX - 1)
        }
        None => u64::MAX,
    }
}

impl Server {
    /// A server over `mailbox` resolving against `resolver`.
    pub fn new(
        mailbox: Arc<Mailbox>,
        resolver: Arc<Mutex<Resolver>>,
        stats: Arc<ServiceStats>,
        max_batch: usize,
    ) -> Self {
        let max_batch = max_batch.clamp(1, mailbox.ports());
        Self {
            mailbox,
            resolver,
            stats,
            max_batch,
            next_port: 0,
            batch: Vec::with_capacity(max_batch),
            order: Vec::with_capacity(max_batch),
            replies: Vec::with_capacity(max_batch),
            errors: ErrorDigest {
                since: Instant::now(),
                by_status: [0; Status::COUNT],
            },
            caches: None,
        }
    }

    /// Also keep these device caches: every sweep takes back returned slabs and refills.
    pub fn with_caches(mut self, keeper: Arc<Mutex<CacheKeeper>>) -> Self {
        self.caches = Some(keeper);
        self
    }

    /// The caches' turn of a sweep: slabs moved.
    fn tend_caches(&mut self) -> usize {
        let Some(keeper) = &self.caches else {
            return 0;
        };
        // The resolver is locked only when a slab moves.
        keeper.lock().tend(&mut LockedResolver(&self.resolver))
    }

    /// Allocations the arena had no room for: take back the slabs the caches published and
    /// no warp took yet, and if that gave any back, resolve those requests once more (in batch
    /// order). Nothing was allocated for a request answered `OutOfMemory`.
    fn retry_with_recalled_room(&mut self) {
        let Some(keeper) = &self.caches else {
            return;
        };
        let out_of_room = |reply: &ReplyRecord| reply.status == Status::OutOfMemory as u32;
        if !self.replies.iter().any(out_of_room) {
            return;
        }
        if keeper.lock().recall(&mut LockedResolver(&self.resolver)) == 0 {
            return;
        }
        let mut resolver = self.resolver.lock();
        for &(_, i) in &self.order {
            if out_of_room(&self.replies[i]) {
                self.replies[i] = resolver.resolve_again(&self.batch[i].request, &self.replies[i]);
            }
        }
    }

    /// Collect up to `max_batch` pending requests, starting after the last port served.
    fn collect(&mut self) {
        self.batch.clear();
        let ports = self.mailbox.ports();
        let (mailbox, batch, max_batch) = (&self.mailbox, &mut self.batch, self.max_batch);
        let mut full_at = None;
        // Two plain ranges, not `(start + i) % ports`: a division per port cost more than the
        // rest of an empty sweep.
        let start = self.next_port;
        for range in [start..ports, 0..start] {
            let whole = mailbox.scan_pending(range, |port, p| {
                batch.push(Taken {
                    port,
                    seq: p.seq,
                    in_order: p.in_order,
                    request: mailbox.read_request(port),
                });
                if batch.len() == max_batch {
                    full_at = Some(port);
                }
                full_at.is_none()
            });
            if !whole {
                break;
            }
        }
        if let Some(port) = full_at {
            self.next_port = (port + 1) % ports;
        }
    }

    /// One sweep: serve what is pending. Returns the number of requests answered.
    pub fn serve_once(&mut self) -> usize {
        let moved = self.tend_caches();
        let started = Instant::now();
        self.collect();
        if self.batch.is_empty() {
            return moved;
        }
        let collected = started.elapsed().as_nanos() as u64;
        let span = tracing::debug_span!("batch", size = self.batch.len()).entered();
        self.replies.clear();
        self.replies
            .resize(self.batch.len(), ReplyRecord::status(Status::Ok));
        {
            let mut resolver = self.resolver.lock();
            self.order.clear();
            for (i, taken) in self.batch.iter().enumerate() {
                if taken.in_order {
                    self.order.push((batch_rank(&taken.request), i));
                } else {
                    tracing::warn!(
                        port = taken.port,
                        seq = taken.seq,
                        "skipped sequence number: port resynchronised"
                    );
                    self.replies[i] = ReplyRecord::status(Status::BadSequence);
                }
            }
            self.order.sort_unstable();
            for &(_, i) in &self.order {
                self.replies[i] = resolver.resolve(&self.batch[i].request);
            }
        }
        self.retry_with_recalled_room();
        let resolved = started.elapsed().as_nanos() as u64;
        for (taken, reply) in self.batch.iter().zip(&self.replies) {
            self.mailbox.publish_reply(taken.port, taken.seq, reply);
            self.errors.count(reply);
        }
        self.errors.flush(false);
        let served = self.batch.len();
        drop(span);
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .requests
            .fetch_add(served as u64, Ordering::Relaxed);
        self.stats.batch_sizes.record(served as u64);
        let busy = started.elapsed().as_nanos() as u64;
        self.stats.batch_nanos.record(busy);
        self.stats.busy_nanos.fetch_add(busy, Ordering::Relaxed);
        self.stats
            .collect_nanos
            .fetch_add(collected, Ordering::Relaxed);
        self.stats
            .resolve_nanos
            .fetch_add(resolved - collected, Ordering::Relaxed);
        served + moved
    }

    /// Close the mailbox and answer everything still pending with `Shutdown`.
    pub fn shut_down(&mut self) -> usize {
        self.errors.flush(true);
        turn_away(&self.mailbox)
    }
}

/// The resolver as a source of cache slabs, locked for each slab only.
pub struct LockedResolver<'a>(pub &'a Mutex<Resolver>);

impl SlabSource for LockedResolver<'_> {
    fn take_slab(&mut self, blocks: u64, class: usize) -> Option<u64> {
        self.0.lock().take_slab(blocks, class)
    }

    fn give_slab(&mut self, base: u64) {
        self.0.lock().give_slab(base);
    }
}

/// Close `mailbox` and answer every pending request with `Shutdown`; returns how many.
fn turn_away(mailbox: &Mailbox) -> usize {
    mailbox.close();
    let mut answered = 0;
    for port in 0..mailbox.ports() {
        if let Some(p) = mailbox.pending(port) {
            mailbox.publish_reply(port, p.seq, &ReplyRecord::status(Status::Shutdown));
            answered += 1;
        }
    }
    if answered > 0 {
        tracing::info!(answered, "pending requests answered with Shutdown");
    }
    answered
}

/// Held by the service thread: if the thread unwinds from a panic, close the mailbox and answer
/// what is pending, so warps waiting on the GPU return with `Shutdown` instead of spinning forever.
struct CloseOnUnwind(Arc<Mailbox>);

impl Drop for CloseOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(
                "the service thread panicked: mailbox closed, pending requests turned away"
            );
            turn_away(&self.0);
        }
    }
}

/// A running service thread.
pub struct Service {
    stop: Arc<AtomicBool>,
    stats: Arc<ServiceStats>,
    mailbox: Arc<Mailbox>,
    thread: Option<JoinHandle<()>>,
}

impl Service {
    /// Start the service thread.
    pub fn start(
        mailbox: Arc<Mailbox>,
        resolver: Arc<Mutex<Resolver>>,
        config: ServiceConfig,
    ) -> std::io::Result<Self> {
        Self::start_with_caches(mailbox, resolver, config, None)
    }

    /// Start the service thread, keeping these device caches too.
    pub fn start_with_caches(
        mailbox: Arc<Mailbox>,
        resolver: Arc<Mutex<Resolver>>,
        config: ServiceConfig,
        caches: Option<Arc<Mutex<CacheKeeper>>>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServiceStats::default());
        let mut server = Server::new(mailbox.clone(), resolver, stats.clone(), config.max_batch);
        if let Some(keeper) = caches {
            server = server.with_caches(keeper);
        }
        let stop_flag = stop.clone();
        let guard = CloseOnUnwind(mailbox.clone());
        let thread = std::thread::Builder::new()
            .name("alignmalloc-service".into())
            .spawn(move || {
                let _guard = guard;
                let mut idle = 0u32;
                while !stop_flag.load(Ordering::Acquire) {
                    if server.serve_once() > 0 {
                        idle = 0;
                        continue;
                    }
                    idle = idle.saturating_add(1);
                    if idle <= config.spin_sweeps {
                        std::hint::spin_loop();
                    } else if idle <= 2 * config.spin_sweeps {
                        std::thread::yield_now();
                    } else {
                        let exp = (idle - 2 * config.spin_sweeps).min(16);
                        let sleep = Duration::from_micros(1 << exp.min(10)).min(config.max_sleep);
                        std::thread::sleep(sleep);
                    }
                }
                // Serve what arrived before the stop, then turn the rest away.
                while server.serve_once() > 0 {}
                server.shut_down();
            })?;
        Ok(Self {
            stop,
            stats,
            mailbox,
            thread: Some(thread),
        })
    }

    /// The live statistics.
    pub fn stats(&self) -> &Arc<ServiceStats> {
        &self.stats
    }

    /// Requests posted and not answered yet (frees posted without waiting stay so until the
    /// thread's next sweep).
    pub fn unanswered(&self) -> usize {
        let mut pending = 0;
        self.mailbox.scan_pending(0..self.mailbox.ports(), |_, _| {
            pending += 1;
            true
        });
        pending
    }

    /// Stop the thread: serve what is pending, close the mailbox, answer late requests with
    /// `Shutdown`, and wait for it.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the service thread panicked");
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytemuck::Zeroable;

    #[test]
    fn a_panicking_service_thread_turns_waiting_warps_away() {
        let mailbox = Arc::new(Mailbox::new(4).unwrap());
        mailbox.post_request(2, 1, &RequestRecord::zeroed());
        let guarded = mailbox.clone();
        let outcome = std::thread::spawn(move || {
            let _guard = CloseOnUnwind(guarded);
            panic!("a bug in the resolver");
        })
        .join();
        assert!(outcome.is_err());
        assert!(mailbox.is_closed());
        let reply = mailbox
            .take_reply(2, 1)
            .expect("the pending request was answered");
        assert_eq!(reply.status, Status::Shutdown as u32);
    }

    #[test]
    fn the_guard_does_nothing_without_a_panic() {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        drop(CloseOnUnwind(mailbox.clone()));
        assert!(!mailbox.is_closed());
    }
}
