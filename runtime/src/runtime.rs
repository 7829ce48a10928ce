//! [`Runtime`]: the arena, the mailbox and the service thread for the runtime's lifetime, host-side
//! allocation through the same resolver the warps use, host access to objects through their
//! handles, and (per backend) kernel launch or CPU warps.
//!
//! Invariants: the service thread runs from `build` until drop; drop first waits for every kernel
//! of the context (they may be waiting on the mailbox), then stops the service thread (pending
//! requests get `Shutdown`), then releases the mailbox and the arena. Host copies touch only bytes
//! of a live object, within its capacity.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg,
};
use orchestrator::caches::{CacheKeeper, CacheStatsSnapshot, RUN_SLOT_LOG2};
use orchestrator::stats::StatsSnapshot;
use orchestrator::{BadFree, LaneStatus, Resolver, ResolverCounters, Service, Status};
use parking_lot::Mutex;
use translator::{Arrangement, CACHE_STAMP_FLAG, Handle, HandleKind, WARP_LANES};

use crate::arena::ArenaMemory;
use crate::backend::{Backend, BackendKind, CudaBackend};
use crate::builder::RuntimeBuilder;
use crate::cuda::DeviceInfo;
use crate::error::{Error, HandleUse, Result};
use crate::gpu::MailboxArg;
use crate::launch::Launch;
use crate::nvrtc::Compiler;

/// The alignmalloc runtime. Build one with [`Runtime::builder`].
///
/// Calls and running kernels: allocations, frees, [`Runtime::settle`] and the counters may be
/// called while kernels (or CPU warps) run. [`Runtime::write`] and [`Runtime::read`] may too,
/// but copy bytes a running kernel may be writing (as any access to managed memory would).
/// [`Runtime::drain_caches`] and dropping the runtime wait for the context's kernels first (on
/// the sim backend, for the CPU warps under way, which then wait for the drain); never call them
/// from a CPU warp of the same runtime, which would wait for itself.
///
/// The mailbox itself is not handed out: its device-side calls would let safe code write words
/// that only the device may write.
pub struct Runtime {
    backend: Backend,
    memory: Arc<ArenaMemory>,
    grower: Option<Grower>,
    reason: String,
    resolver: Arc<Mutex<Resolver>>,
    service: Option<Service>,
    mailbox_arg: Option<MailboxArg>,
    caches: Option<Arc<Mutex<CacheKeeper>>>,
    /// How long [`Runtime::settle`] waits.
    settle_timeout: std::time::Duration,
}

/// Holds the check that the mailbox is not handed out (a doc test on a private item, so the
/// user's page of [`Runtime`] shows no example that fails on purpose).
///
/// ```compile_fail,E0599
/// fn post(rt: &runtime::Runtime) {
///     let _ = rt.mailbox();
/// }
/// ```
#[allow(dead_code)]
struct MailboxIsNotHandedOut;

/// The thread that grows the arena ahead of need (the service thread never calls CUDA). It
/// sleeps until the resolver signals that the arena should grow (an allocation found no room,
/// or the arena passed its growth mark), looks, grows if it must, and sleeps again.
struct Grower {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Grower {
    fn start(memory: Arc<ArenaMemory>, resolver: Arc<Mutex<Resolver>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        // Set by a signal, cleared before each look: a signal during a look is not lost.
        let wanted = Arc::new(AtomicBool::new(true));
        let (flag, wanted_here, resolver_here) = (stop.clone(), wanted.clone(), resolver.clone());
        let thread = std::thread::Builder::new()
            .name("alignmalloc-grower".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) && memory.can_grow() {
                    if !wanted_here.swap(false, Ordering::AcqRel) {
                        std::thread::park();
                        continue;
                    }
                    match memory.grow_if_needed(&resolver_here) {
                        // Grown: look again at once (one step may not be enough).
                        Ok(true) => wanted_here.store(true, Ordering::Release),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "the arena could not grow; it stays as it is");
                            break;
                        }
                    }
                }
            })
            .expect("spawning a thread");
        let grower = thread.thread().clone();
        resolver.lock().on_growth_wanted(Arc::new(move || {
            // One wake-up per look, however many allocations pass the mark meanwhile.
            if !wanted.swap(true, Ordering::AcqRel) {
                grower.unpark();
            }
        }));
        Self { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        if self.thread.join().is_err() {
            tracing::error!("the grower thread panicked");
        }
    }
}

/// Objects allocated from the host for `threads` threads, in the arranged layout: thread `t`'s
/// object is `handles()[t]`, laid out as lane `t % 32` of warp `t / 32` would get it.
#[derive(Debug)]
pub struct ArrangedAlloc {
    handles: Vec<Handle>,
    bytes_each: u64,
}

impl ArrangedAlloc {
    /// Thread `t`'s handle is element `t`.
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// The handles as raw words, to copy to the device.
    pub fn words(&self) -> Vec<u64> {
        self.handles.iter().map(|h| h.0).collect()
    }

    /// Bytes of each thread's object.
    pub fn bytes_each(&self) -> u64 {
        self.bytes_each
    }
}

/// Up to 32 threads' handles as one warp's lanes (null past the group's end).
fn warp_of(group: &[Handle]) -> [Handle; WARP_LANES] {
    let mut lanes = [Handle::NULL; WARP_LANES];
    lanes[..group.len()].copy_from_slice(group);
    lanes
}

/// Pieces of `len` bytes from `offset` of the object behind `handle`, each contiguous in memory:
/// `(address, range of the caller's buffer)`. Arranged objects are contiguous within a tile.
fn pieces(
    handle: Handle,
    offset: u64,
    len: usize,
) -> impl Iterator<Item = (u64, std::ops::Range<usize>)> {
    let piece = match handle.kind() {
        HandleKind::Arranged => 1u64 << handle.tile_log2(),
        HandleKind::Plain => u64::MAX,
    };
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let at = offset + done as u64;
        let n = ((piece - at % piece).min((len - done) as u64)) as usize;
        let item = (handle.translate(at), done..done + n);
        done += n;
        Some(item)
    })
}

/// How long [`Runtime::settle`] waits for posted requests to be answered.
pub const SETTLE_TIMEOUT: std::time::Duration = crate::settings::DEFAULT_SETTLE_TIMEOUT;

impl Runtime {
    /// Start configuring a runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    pub(crate) fn new(
        backend: Backend,
        memory: Arc<ArenaMemory>,
        reason: String,
        resolver: Arc<Mutex<Resolver>>,
        service: Service,
        caches: Option<Arc<Mutex<CacheKeeper>>>,
        settle_timeout: std::time::Duration,
    ) -> Self {
        let mailbox_arg = match &backend {
            Backend::Cuda(c) => Some(c.pinned.kernel_arg()),
            Backend::Sim(_) => None,
        };
        let grower = memory
            .can_grow()
            .then(|| Grower::start(memory.clone(), resolver.clone()));
        Self {
            backend,
            memory,
            grower,
            reason,
            resolver,
            service: Some(service),
            mailbox_arg,
            caches,
            settle_timeout,
        }
    }

    /// Wait until the service thread has answered every request posted so far: after kernels
    /// that freed with `am::post_free` ended, their frees are done (and counted) once this
    /// returns. [`Runtime::drain_caches`] does it first. Fails with [`Error::Unanswered`] when
    /// requests stay pending for the settle timeout (default [`SETTLE_TIMEOUT`]; a kernel still
    /// running and posting, or a stuck service thread).
    pub fn settle(&self) -> Result<()> {
        let service = self.service.as_ref().expect("the service runs until drop");
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(10);
        loop {
            let pending = service.unanswered();
            if pending == 0 {
                return Ok(());
            }
            if started.elapsed() >= self.settle_timeout {
                tracing::error!(pending, "mailbox requests unanswered");
                return Err(Error::Unanswered {
                    pending,
                    seconds: self.settle_timeout.as_secs_f64(),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(10));
        }
    }

    /// The last frees the host refused (at most `orchestrator::KEPT_BAD_FREES`, oldest
    /// first), each with its rank among all of them: how a program that frees with
    /// `am::post_free` learns which failed (call [`Runtime::settle`] first). Frees the device
    /// caches judge are returned to the freeing lane at once and only counted
    /// ([`Runtime::counters`]).
    pub fn last_bad_frees(&self) -> Vec<BadFree> {
        self.resolver.lock().last_bad_frees()
    }

    /// The device caches' counters (`None` when they are off).
    pub fn cache_stats(&self) -> Option<CacheStatsSnapshot> {
        self.caches.as_ref().map(|k| k.lock().stats().snapshot())
    }

    /// The most bytes the device caches may hold (`None` when they are off): what
    /// `device_cache_bytes` or `device_cache_fraction` asked for, in whole 2 MiB blocks.
    pub fn cache_bound_bytes(&self) -> Option<u64> {
        self.caches.as_ref().map(|k| k.lock().bound_bytes())
    }

    /// Give back what the device caches hold and no object uses: each class's current slab
    /// (its objects not handed out yet), and the slabs published ahead of need: at the end of
    /// a phase, before checking that everything was freed ([`Runtime::is_empty`]), or to hand
    /// the memory to other sizes. Slabs with live objects stay until those are freed. Returns
    /// the slabs given back.
    ///
    /// It first waits for the kernels of the runtime's context (a synchronize, as dropping the
    /// runtime does) or, on the sim backend, for the CPU warps under way (and launches of CPU
    /// warps wait for it): the caches' state is rewritten whole, and a warp allocating meanwhile
    /// would be handed objects the drain takes back, or wait for a slab that never comes. A
    /// kernel launched on another thread while it runs is the caller's race.
    pub fn drain_caches(&self) -> Result<usize> {
        match &self.backend {
            Backend::Cuda(c) => {
                c.context.synchronize()?;
                self.drain_caches_now()
            }
            Backend::Sim(s) => s.launches.exclusive(|| self.drain_caches_now()),
        }
    }

    /// [`Runtime::drain_caches`] once no kernel or CPU warp runs.
    fn drain_caches_now(&self) -> Result<usize> {
        self.settle()?;
        let Some(keeper) = &self.caches else {
            return Ok(0);
        };
        let drained = match &self.backend {
            Backend::Cuda(c) => match &c.caches {
                Some(caches) => caches.drain(&c.stream)?,
                None => 0,
            },
            Backend::Sim(s) => s.device.caches().map_or(0, |c| c.drain()),
        };
        let given = keeper
            .lock()
            .reclaim(&mut orchestrator::service::LockedResolver(&self.resolver));
        tracing::debug!(drained, given, "device caches drained");
        Ok(given)
    }

    /// The backend running.
    pub fn backend(&self) -> BackendKind {
        self.backend.kind()
    }

    /// Why this backend was chosen.
    pub fn backend_reason(&self) -> &str {
        &self.reason
    }

    /// The GPU, on the cuda backend.
    pub fn device_info(&self) -> Option<&DeviceInfo> {
        match &self.backend {
            Backend::Cuda(c) => Some(&c.info),
            Backend::Sim(_) => None,
        }
    }

    /// The arena's reservations, (first byte, bytes) each: one, more once it grew.
    pub fn arena_segments(&self) -> Vec<(u64, u64)> {
        self.memory.segments()
    }

    /// Bytes of the arena, over all its reservations.
    pub fn arena_bytes(&self) -> u64 {
        self.memory.segments().iter().map(|s| s.1).sum()
    }

    /// Run `attempt`; if it found no room, take back the slabs the device caches published and
    /// no warp took (and try again if that gave any back), then, if the arena is growable, grow
    /// it and try once more. `grow` runs under the growth lock even at the cap, so a growth the
    /// grower thread had under way (its memory reserved, the resolver not yet told) is finished
    /// before the retry.
    fn with_room<T>(&self, attempt: impl Fn() -> Result<T>) -> Result<T> {
        let out_of_room = |r: &Result<T>| matches!(r, Err(Error::OutOfMemory { .. }));
        let mut result = attempt();
        if out_of_room(&result)
            && let Some(keeper) = &self.caches
            && keeper
                .lock()
                .recall(&mut orchestrator::service::LockedResolver(&self.resolver))
                > 0
        {
            result = attempt();
        }
        if out_of_room(&result) && self.grower.is_some() {
            self.memory.grow(&self.resolver)?;
            result = attempt();
        }
        result
    }

    /// What the allocator has done so far: the resolver's counters (device and host requests
    /// alike) with the frees the device caches judged added (their counters are copied from the
    /// GPU on a stream of the runtime's own).
    pub fn counters(&self) -> Result<ResolverCounters> {
        let mut counters = self.resolver.lock().counters().clone();
        // Frees judged by the device caches never reach the resolver: add them.
        let device = match &self.backend {
            Backend::Cuda(c) => match &c.caches {
                Some(caches) => Some(caches.free_counts(&c.stream)?),
                None => None,
            },
            Backend::Sim(s) => s.device.caches().map(|c| c.frees_by_outcome()),
        };
        if let Some(by_outcome) = device {
            for (total, n) in counters.by_lane_status.iter_mut().zip(by_outcome) {
                *total += n;
            }
            counters.lanes_freed += by_outcome[LaneStatus::Ok as usize];
        }
        Ok(counters)
    }

    /// The service thread's statistics so far.
    pub fn service_stats(&self) -> StatsSnapshot {
        self.service
            .as_ref()
            .expect("the service runs until drop")
            .stats()
            .snapshot()
    }

    /// Bytes the host holds for live objects: the chunks of warp and host allocations, their
    /// rounding and packing included. What the device caches hold is in
    /// [`Runtime::cache_stats`] (`held_bytes`).
    pub fn object_bytes(&self) -> u64 {
        self.resolver.lock().object_bytes()
    }

    /// The tier `address` lies in under the placement setting (`None`: outside the arena;
    /// docs/placement.md).
    pub fn tier_of(&self, address: u64) -> Option<orchestrator::Tier> {
        self.resolver.lock().tier_of(address)
    }

    /// [`Runtime::object_bytes`] by tier: (device tier, host tier, untiered).
    pub fn object_bytes_by_tier(&self) -> (u64, u64, u64) {
        self.resolver.lock().object_bytes_by_tier()
    }

    /// Live chunks (warp allocations with at least one object not freed).
    pub fn live_chunks(&self) -> usize {
        self.resolver.lock().live_chunks()
    }

    /// The live chunks, one line each: what a program left allocated (for diagnosis).
    pub fn describe_live_chunks(&self) -> Vec<String> {
        self.resolver.lock().describe_live_chunks()
    }

    /// Give quarantined chunks back now and check the allocator's invariants.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut r = self.resolver.lock();
        r.drain_quarantine();
        r.check_invariants()
    }

    /// Whether nothing is allocated (after giving quarantined chunks back). The device caches'
    /// slabs count until [`Runtime::drain_caches`] gives them back.
    pub fn is_empty(&self) -> bool {
        let mut r = self.resolver.lock();
        r.drain_quarantine();
        r.is_empty()
    }

    fn alloc_error(&self, status: Status, sizes: &[u64; WARP_LANES]) -> Error {
        let bytes = sizes.iter().sum();
        let objects = sizes.iter().filter(|&&s| s > 0).count() as u64;
        match status {
            Status::SizeOverLimit => Error::SizeOverLimit {
                bytes: sizes.iter().copied().max().unwrap_or(0),
                limit: self.resolver.lock().config().geometry.max_lane_bytes(),
            },
            _ => Error::OutOfMemory { bytes, objects },
        }
    }

    /// One object of `bytes` bytes in plain (thread-contiguous) memory.
    pub fn alloc(&self, bytes: u64) -> Result<Handle> {
        self.with_room(|| self.alloc_once(bytes))
    }

    fn alloc_once(&self, bytes: u64) -> Result<Handle> {
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        let mut sizes = [0; WARP_LANES];
        sizes[0] = bytes;
        let result = self.resolver.lock().alloc(&sizes, Arrangement::Contiguous);
        match result {
            Ok(a) => Ok(a.handles[0]),
            Err(status) => Err(self.alloc_error(status, &sizes)),
        }
    }

    /// An object of `bytes_each` bytes for each of `threads` threads, warp-arranged: what a
    /// kernel's warps would get from `am::malloc`, for host code that fills buffers before a
    /// launch (so a last warp of a few threads, whose arranged chunk would be over twice their
    /// bytes, is packed, with plain handles that [`Runtime::read`] and `am::ptr` read alike).
    /// All or nothing: on failure, nothing stays allocated.
    pub fn alloc_arranged(&self, threads: u32, bytes_each: u64) -> Result<ArrangedAlloc> {
        self.with_room(|| self.alloc_arranged_once(threads, bytes_each))
    }

    fn alloc_arranged_once(&self, threads: u32, bytes_each: u64) -> Result<ArrangedAlloc> {
        if threads == 0 || bytes_each == 0 {
            return Err(Error::ZeroSize);
        }
        let mut handles = Vec::with_capacity(threads as usize);
        let mut r = self.resolver.lock();
        let arrangement = Arrangement::Arranged(r.config().order);
        for first in (0..threads as usize).step_by(WARP_LANES) {
            let lanes = (threads as usize - first).min(WARP_LANES);
            let sizes = std::array::from_fn(|l| if l < lanes { bytes_each } else { 0 });
            match r.alloc(&sizes, arrangement) {
                Ok(a) => handles.extend_from_slice(&a.handles[..lanes]),
                Err(status) => {
                    for group in handles.chunks(WARP_LANES) {
                        r.free_lanes(&warp_of(group));
                    }
                    drop(r);
                    let mut err = self.alloc_error(status, &sizes);
                    if let Error::OutOfMemory { bytes, objects } = &mut err {
                        *bytes = u64::from(threads) * bytes_each;
                        *objects = u64::from(threads);
                    }
                    return Err(err);
                }
            }
        }
        Ok(ArrangedAlloc {
            handles,
            bytes_each,
        })
    }

    /// Free one object (a null handle is a no-op).
    pub fn free(&self, handle: Handle) -> Result<()> {
        match self.resolver.lock().free(handle) {
            LaneStatus::Ok => Ok(()),
            status => Err(Error::BadHandle {
                handle: handle.0,
                status,
                during: HandleUse::Free,
            }),
        }
    }

    /// Free the object whose first byte is at `address` (a plain pointer, as `am::malloc_plain`
    /// gives it; 0 is a no-op), judged as a free of that object's handle. An address carries no
    /// generation: once a new object starts at a freed address, a free of it frees the new one.
    pub fn free_pointer(&self, address: u64) -> Result<()> {
        let mut addresses = [0; WARP_LANES];
        addresses[0] = address;
        match self.resolver.lock().free_pointers(&addresses)[0] {
            LaneStatus::Ok => Ok(()),
            status => Err(Error::BadHandle {
                handle: address,
                status,
                during: HandleUse::Free,
            }),
        }
    }

    /// Free every object of an [`ArrangedAlloc`]; the first failure is returned after all were
    /// tried.
    pub fn free_arranged(&self, objects: ArrangedAlloc) -> Result<()> {
        self.free_many(&objects.handles)
    }

    /// Free every handle of `handles` (null ones are skipped), 32 at a time as a warp frees
    /// them; the first failure is returned after all were tried.
    pub fn free_many(&self, handles: &[Handle]) -> Result<()> {
        let mut first_error = None;
        let mut r = self.resolver.lock();
        for group in handles.chunks(WARP_LANES) {
            let lanes = warp_of(group);
            let outcomes = r.free_lanes(&lanes);
            if let Some(lane) = outcomes.iter().position(|&o| o != LaneStatus::Ok) {
                first_error.get_or_insert(Error::BadHandle {
                    handle: lanes[lane].0,
                    status: outcomes[lane],
                    during: HandleUse::Free,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Bytes the object of `handle` may use from its start.
    pub fn capacity(&self, handle: Handle) -> Result<u64> {
        let bad = |status| Error::BadHandle {
            handle: handle.0,
            status,
            during: HandleUse::Access,
        };
        let (most, run_slot) = {
            let resolver = self.resolver.lock();
            (
                resolver.object_capacity(handle).map_err(bad)?,
                resolver.run_slot(handle),
            )
        };
        match run_slot {
            Some((base, slot)) => {
                let slots = self.run_object_slots(handle, base, slot)?.ok_or_else(|| {
                    // No object of this slab's life starts there: the slot lies inside
                    // another, or was never handed out (a pointer there is an interior one).
                    bad(if handle.free_stamp() == 0 {
                        LaneStatus::InteriorPointer
                    } else {
                        LaneStatus::InvalidHandle
                    })
                })?;
                Ok((slots << RUN_SLOT_LOG2).min(most))
            }
            None => Ok(most),
        }
    }

    /// The slots of the run-class object of `handle`, at slot `slot` of the slab at `base`, as
    /// the device caches recorded them in the slab's current life (`None`: none starts there).
    /// A handle of an earlier slab on these blocks is a second use, answered `DoubleFree` as a
    /// free of it would be; a pointer's handle (no stamp) is not checked.
    fn run_object_slots(&self, handle: Handle, base: u64, slot: u64) -> Result<Option<u64>> {
        let bad = |status| Error::BadHandle {
            handle: handle.0,
            status,
            during: HandleUse::Access,
        };
        let held = self.caches.as_ref().and_then(|k| k.lock().slab_at(base));
        let (id, generation) = held.ok_or_else(|| bad(LaneStatus::InvalidHandle))?;
        let stamp = handle.free_stamp();
        if stamp != 0 && stamp != CACHE_STAMP_FLAG | generation {
            return Err(bad(LaneStatus::DoubleFree));
        }
        Ok(match &self.backend {
            Backend::Cuda(c) => match &c.caches {
                Some(caches) => caches.run_object_slots(&c.stream, id, slot)?,
                None => None,
            },
            Backend::Sim(s) => s.device.caches().and_then(|c| c.run_object_slots(id, slot)),
        })
    }

    fn check_bounds(&self, handle: Handle, offset: u64, len: usize) -> Result<()> {
        let capacity = self.capacity(handle)?;
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > capacity)
        {
            return Err(Error::OutOfBounds {
                handle: handle.0,
                offset,
                len: len as u64,
                capacity,
            });
        }
        Ok(())
    }

    /// Copy `bytes` into the object of `handle` from byte `offset`, through its layout. Meant for
    /// host code before a launch or after it finished; while a kernel writes the same object the
    /// bytes are simply racy, as with any managed memory.
    pub fn write(&self, handle: Handle, offset: u64, bytes: &[u8]) -> Result<()> {
        self.check_bounds(handle, offset, bytes.len())?;
        for (address, range) in pieces(handle, offset, bytes.len()) {
            self.memory.copy_in(address, &bytes[range])?;
        }
        Ok(())
    }

    /// Copy `out.len()` bytes from the object of `handle` from byte `offset`.
    pub fn read(&self, handle: Handle, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_bounds(handle, offset, out.len())?;
        for (address, range) in pieces(handle, offset, out.len()) {
            self.memory.copy_out(address, &mut out[range])?;
        }
        Ok(())
    }

    fn cuda(&self, what: &'static str) -> Result<&CudaBackend> {
        match &self.backend {
            Backend::Cuda(c) => Ok(c),
            Backend::Sim(_) => Err(Error::WrongBackend {
                what,
                needs: BackendKind::Cuda,
                running: BackendKind::Sim,
            }),
        }
    }

    /// Move the whole arena to the GPU now and wait (`cuMemPrefetchAsync` of every
    /// reservation): its pages are then resident before the first kernel touches them, instead
    /// of faulting in on first touch. What a program does that knows it will fill the arena
    /// (a benchmark setting every allocator's pool up alike); pages still migrate as usual
    /// afterwards. Nothing to move on the sim backend.
    pub fn prefetch_arena(&self) -> Result<()> {
        let Backend::Cuda(c) = &self.backend else {
            return Ok(());
        };
        self.memory.prefetch_to_device(c.info.ordinal, &c.stream)?;
        c.stream.synchronize()?;
        Ok(())
    }

    /// The CUDA context (cuda backend).
    pub fn context(&self) -> Result<&Arc<CudaContext>> {
        Ok(&self.cuda("a CUDA context")?.context)
    }

    /// The runtime's non-blocking stream (cuda backend). Kernels that call `am::malloc` wait on
    /// the host, so they must never run on the legacy default stream.
    pub fn stream(&self) -> Result<&Arc<CudaStream>> {
        Ok(&self.cuda("a CUDA stream")?.stream)
    }

    /// The mailbox as a kernel argument (`am::DeviceMailbox` by value; cuda backend).
    pub fn mailbox_arg(&self) -> Result<&MailboxArg> {
        self.cuda("a device mailbox")?;
        Ok(self.mailbox_arg.as_ref().expect("set for the cuda backend"))
    }

    /// The NVRTC compiler, set up on first use, targeting this GPU (its own architecture, or the
    /// newest NVRTC knows below it), with the alignmalloc headers on the include path (cuda
    /// backend). A runtime that never compiles never needs NVRTC.
    pub fn compiler(&self) -> Result<&Compiler> {
        let c = self.cuda("compiling CUDA C++")?;
        if let Some(compiler) = c.compiler.get() {
            return Ok(compiler);
        }
        let defines = c.device_settings.defines();
        tracing::info!(?defines, "device settings compiled in");
        let compiler = Compiler::for_device(c.info.compute_capability)?.with_defines(defines);
        Ok(c.compiler.get_or_init(|| compiler))
    }

    /// Compile CUDA C++ `source` (which may `#include <alignmalloc/alignmalloc.cuh>`) and load it.
    /// `name` names the source in compiler messages.
    /// Its kernels' default mailbox (`am::malloc(bytes)` without a mailbox argument) is this
    /// runtime's.
    pub fn compile(&self, name: &str, source: &str) -> Result<Arc<CudaModule>> {
        let ptx = self.compiler()?.compile(name, source)?;
        let c = self.cuda("loading a module")?;
        let module = c.context.load_module(ptx)?;
        self.bind_default_mailbox(c, &module)?;
        Ok(module)
    }

    /// Write the module's default mailbox, if its source included `alignmalloc.cuh`.
    fn bind_default_mailbox(&self, c: &CudaBackend, module: &Arc<CudaModule>) -> Result<()> {
        c.context.bind_to_thread()?;
        let mut symbol = match module.get_global(device::DEFAULT_MAILBOX_SYMBOL, &c.stream) {
            Ok(symbol) => symbol,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let mailbox = self.mailbox_arg()?.0;
        let bytes: &[u8] = bytemuck::bytes_of(&mailbox);
        if symbol.len() != bytes.len() {
            return Err(Error::Config(format!(
                "the module's {} has {} bytes, the runtime's mailbox {}: the headers and the \
                 runtime are of different versions",
                device::DEFAULT_MAILBOX_SYMBOL,
                symbol.len(),
                bytes.len()
            )));
        }
        c.stream.memcpy_htod(bytes, &mut symbol)?;
        c.stream.synchronize()?;
        Ok(())
    }

    /// Launch `kernel` on the runtime's stream. Its first parameter must be the
    /// `am::DeviceMailbox`, which this pushes; `push` adds the others in order.
    ///
    /// # Safety
    /// The arguments `push` adds must match the kernel's remaining parameters in number, order and
    /// type, as for any CUDA launch, and live until the launch completes.
    pub unsafe fn launch<'a>(
        &'a self,
        kernel: &'a CudaFunction,
        config: LaunchConfig,
        push: impl FnOnce(&mut LaunchArgs<'a>),
    ) -> Result<Launch> {
        let c = self.cuda("launching a kernel")?;
        let mut args = c.stream.launch_builder(kernel);
        args.arg(self.mailbox_arg()?);
        push(&mut args);
        // SAFETY: the mailbox is the kernel's first parameter (documented contract); the caller
        // vouches for the rest.
        unsafe { args.launch(config) }?;
        let event = c.stream.record_event(None)?;
        Ok(Launch::new(c.context.clone(), event))
    }

    /// The unified-memory counters since the last call (or since the runtime started), in all and
    /// per live chunk. Call it after a launch finished to read that launch's migrations and
    /// faults. Needs [`crate::RuntimeBuilder::fault_counters`].
    /// Where another tool holds CUPTI the counters are off and this answers
    /// [`Error::FaultCountersTaken`]; [`Runtime::take_faults_if_counting`] answers `None` then.
    #[cfg(feature = "cupti")]
    pub fn take_faults(&self) -> Result<crate::faults::FaultReport> {
        let (records, dropped) = self.take_fault_records()?;
        Ok(self.fault_report(&records, dropped))
    }

    /// `records` added up in all and per live chunk of this runtime.
    #[cfg(feature = "cupti")]
    pub(crate) fn fault_report<'r>(
        &self,
        records: impl IntoIterator<Item = &'r crate::faults::Record>,
        dropped: u64,
    ) -> crate::faults::FaultReport {
        let r = self.resolver.lock();
        let mut report = crate::faults::FaultReport {
            dropped_records: dropped,
            ..Default::default()
        };
        for record in records {
            report.add(record, r.chunk_containing(record.address));
        }
        report
    }

    /// Every record the counters delivered since the last take, and how many CUPTI dropped.
    #[cfg(feature = "cupti")]
    pub(crate) fn take_fault_records(&self) -> Result<(Vec<crate::faults::Record>, u64)> {
        let c = self.cuda("fault counters")?;
        match &c.faults {
            crate::faults::Counting::On(counter) => Ok(counter.take()?),
            crate::faults::Counting::Off => Err(Error::FaultCountersOff),
            crate::faults::Counting::Taken(reason) => Err(Error::FaultCountersTaken {
                reason: reason.clone(),
            }),
        }
    }

    /// The counters since the last call as `Runtime::take_faults` (feature `cupti`), or `None` where they were
    /// asked for but another tool holds CUPTI (see [`Runtime::fault_counting`] for why).
    #[cfg(feature = "cupti")]
    pub fn take_faults_if_counting(&self) -> Result<Option<crate::faults::FaultReport>> {
        match self.take_faults() {
            Err(Error::FaultCountersTaken { .. }) => Ok(None),
            other => other.map(Some),
        }
    }

    /// Whether this runtime counts unified-memory faults, and if it was asked to and cannot, why.
    #[cfg(feature = "cupti")]
    pub fn fault_counting(&self) -> crate::faults::FaultCounting {
        match &self.backend {
            Backend::Cuda(c) => c.faults.state(),
            Backend::Sim(_) => crate::faults::FaultCounting::Off,
        }
    }

    /// Run `f` once per warp id in `0..warps` on CPU threads that post to the mailbox like GPU
    /// warps (sim backend). Returns after every warp returned.
    pub fn run_warps(&self, warps: u32, f: impl Fn(crate::sim::CpuWarp<'_>) + Sync) -> Result<()> {
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(2, 64);
        self.run_warps_on(workers, warps, f)
    }

    /// [`Runtime::run_warps`] one warp at a time, in id order, each request answered before the
    /// next warp starts: the resolver sees the same requests in the same order on every run, so
    /// placements (and whatever is measured from them) repeat exactly.
    pub fn run_warps_in_order(
        &self,
        warps: u32,
        f: impl Fn(crate::sim::CpuWarp<'_>) + Sync,
    ) -> Result<()> {
        self.run_warps_on(1, warps, f)
    }

    fn run_warps_on(
        &self,
        workers: usize,
        warps: u32,
        f: impl Fn(crate::sim::CpuWarp<'_>) + Sync,
    ) -> Result<()> {
        let Backend::Sim(sim) = &self.backend else {
            return Err(Error::WrongBackend {
                what: "CPU warps",
                needs: BackendKind::Sim,
                running: self.backend.kind(),
            });
        };
        let workers = workers.min(warps as usize);
        let _launch = sim.launches.begin();
        let next = AtomicU32::new(0);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    loop {
                        let warp = next.fetch_add(1, Ordering::Relaxed);
                        if warp >= warps {
                            break;
                        }
                        f(crate::sim::CpuWarp::new(warp, sim, &self.memory));
                    }
                });
            }
        });
        Ok(())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Backend::Cuda(c) = &self.backend {
            // Kernels may be waiting on the mailbox: let them finish while the service answers.
            if let Err(e) = c.context.synchronize() {
                tracing::error!(error = %e, "a kernel failed before the runtime was dropped");
            }
        }
        if let Some(grower) = self.grower.take() {
            grower.stop();
        }
        if let Some(service) = self.service.take() {
            service.stop();
        }
        tracing::info!("runtime stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_warps_read_the_closed_flag_as_the_device_setting_says() {
        let settings = crate::settings::DeviceSettings {
            polls_per_closed_check: 7,
            ..Default::default()
        };
        let rt = Runtime::builder()
            .backend(crate::BackendChoice::Sim)
            .arena_bytes(64 << 20)
            .device_settings(settings)
            .build()
            .unwrap();
        let Backend::Sim(sim) = &rt.backend else {
            panic!("a sim runtime")
        };
        assert_eq!(sim.device.closed_check().polls(), 7);
    }

    #[test]
    fn the_grower_sleeps_until_the_arena_should_grow() {
        let rt = Runtime::builder()
            .backend(crate::BackendChoice::Sim)
            .arena_bytes(16 << 20)
            .max_arena_bytes(64 << 20)
            .build()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let idle = rt.memory.growth_checks();
        assert!(
            idle <= 1,
            "the grower looked {idle} times with nothing allocated"
        );
        // 6 of the 8 blocks for one object of 12 MiB, plus the small space: past the mark.
        let big = rt.alloc(6 * (2 << 20)).unwrap();
        let started = std::time::Instant::now();
        while rt.arena_segments().len() < 2 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "the arena did not grow"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        rt.free(big).unwrap();
        assert!(rt.check_invariants().is_ok());
    }

    #[test]
    fn pieces_of_an_arranged_object_stop_at_tile_ends() {
        let h = Handle::arranged(1 << 30, 12, 3).unwrap();
        let got: Vec<_> = pieces(h, 4000, 5000).collect();
        assert_eq!(
            got,
            vec![
                (h.translate(4000), 0..96),
                (h.translate(4096), 96..4192),
                (h.translate(8192), 4192..5000),
            ]
        );
        assert_eq!(got[1].0, (1 << 30) + (32 << 12));
        let p = Handle::plain(1 << 30, 0).unwrap();
        assert_eq!(pieces(p, 10, 100_000).count(), 1);
        assert_eq!(pieces(p, 10, 0).count(), 0);
    }
}
