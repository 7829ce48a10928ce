//! CPU stand-ins for the GPU side: warps played by threads, through the same mailbox and records
//! as the CUDA client (`device/include/alignmalloc/detail/client.cuh`), and a host arena standing in for
//! managed memory so tests can write into what they get. `device/hostcheck` runs the CUDA client
//! itself beside [`CpuDevice`] with the same steps and compares every lane's answer
//! (`tests/client_protocol.rs`).
//!
//! A warp call, as on the GPU: pick a port by hashing the warp id and probe linearly for one whose
//! lock is free (the locks live in "device memory", here [`CpuDevice`]); post the request as the
//! port's acknowledged sequence number plus 1; wait for the acknowledgement with backoff,
//! reading the closed flag every 1024 polls and giving up with `Shutdown` once the host has
//! closed the mailbox (never before posting, as the client); build the lanes' handles from
//! the reply; release the lock. Warps may outnumber ports: a warp without a port keeps probing,
//! and every port holder finishes because the host answers every in-order request.
//!
//! A request posted without waiting ([`CpuDevice::post_free`]) releases the port marked owed
//! (the lock word keeps the low 30 bits of its sequence number); the next holder waits for that
//! answer before it writes the port, so the request words have one writer at a time and the
//! host reads each request whole. Lock word: bit 0 held, bit 1 owed, the owed number above.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use translator::{Geometry, Handle, SizeClass, SlotOrder, WARP_LANES, lane_handles};

use crate::caches::CpuCaches;
use crate::mailbox::Mailbox;
use crate::records::{CONTIGUOUS_LAYOUT, LaneStatus, Op, ReplyRecord, RequestRecord, Status};
use crate::resolver::{lane_mask, set_lanes};
use crate::sync::{AtomicU32, fence, spin_wait, yield_now};

/// Polls between two reads of the closed flag, unless the runtime's setting
/// (`ALIGNMALLOC_POLLS_PER_CLOSED_CHECK`, the CUDA client's `kPollsPerClosedCheck`) says
/// otherwise ([`ClosedCheck`]).
pub const POLLS_PER_CLOSED_CHECK: u32 = 1024;

/// How often a waiting CPU warp (for an answer, or for a cache slab) reads the mailbox's closed
/// flag: every `n`th poll, `n` at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClosedCheck(u32);

impl ClosedCheck {
    /// Every `n`th poll (0 counts as 1).
    pub fn every(n: u32) -> Self {
        Self(n.max(1))
    }

    /// Polls between two reads.
    pub fn polls(self) -> u32 {
        self.0
    }

    /// Whether the `polls`th poll reads the flag.
    pub fn due(self, polls: u32) -> bool {
        polls.is_multiple_of(self.0)
    }
}

impl Default for ClosedCheck {
    fn default() -> Self {
        Self(POLLS_PER_CLOSED_CHECK)
    }
}

/// Lock word bit: the port is held (the device client's `kPortHeld`, generated from this).
pub const PORT_HELD: u32 = 1;
/// Lock word bit: the port's last request was posted without waiting and may be unanswered.
pub const PORT_OWED: u32 = 2;
/// The bits of the owed request's sequence number the lock word keeps (above the two flags).
pub const OWED_SEQ_MASK: u32 = u32::MAX >> 2;

fn owed_lock_word(seq: u32) -> u32 {
    (seq & OWED_SEQ_MASK) << 2 | PORT_OWED
}

/// What the GPU keeps in device memory for the mailbox: a lock per port.
pub struct CpuDevice {
    mailbox: Arc<Mailbox>,
    locks: Box<[AtomicU32]>,
    caches: Option<Arc<CpuCaches>>,
    closed_check: ClosedCheck,
}

/// The outcome of a warp's free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeOutcome {
    /// Whole-warp status (`Ok`, `Partial`, or a request-level error).
    pub status: Status,
    /// Each lane's outcome.
    pub lanes: [LaneStatus; WARP_LANES],
}

impl CpuDevice {
    /// The device side of `mailbox`.
    pub fn new(mailbox: Arc<Mailbox>) -> Self {
        let ports = mailbox.ports();
        Self {
            locks: (0..ports).map(|_| AtomicU32::new(0)).collect(),
            mailbox,
            caches: None,
            closed_check: ClosedCheck::default(),
        }
    }

    /// Read the closed flag as `check` says while waiting for an answer.
    pub fn with_closed_check(mut self, check: ClosedCheck) -> Self {
        self.closed_check = check;
        self
    }

    /// How often a waiting warp reads the closed flag.
    pub fn closed_check(&self) -> ClosedCheck {
        self.closed_check
    }

    /// Also allocate and free small objects through these device caches, as the CUDA client
    /// does when its mailbox has caches.
    pub fn with_caches(mut self, caches: Arc<CpuCaches>) -> Self {
        self.caches = Some(caches);
        self
    }

    /// The device caches, if any.
    pub fn caches(&self) -> Option<&Arc<CpuCaches>> {
        self.caches.as_ref()
    }

    /// The port warp `warp` tries first.
    fn home_port(&self, warp: u32) -> usize {
        (warp.wrapping_mul(0x9E37_79B1) as usize) % self.mailbox.ports()
    }

    /// Take a port's lock: the home port, else the next free one, probing with backoff. Returns
    /// the port and its lock word as it was.
    fn lock_port(&self, warp: u32) -> (usize, u32) {
        let ports = self.mailbox.ports();
        let mut port = self.home_port(warp);
        let mut tries = 0u32;
        loop {
            let was = self.locks[port].load(Ordering::Relaxed);
            if was & PORT_HELD == 0
                && self.locks[port]
                    .compare_exchange(was, PORT_HELD, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return (port, was);
            }
            port = (port + 1) % ports;
            tries += 1;
            if tries.is_multiple_of(ports as u32) {
                yield_now();
            }
        }
    }

    /// Wait until the host acknowledged `seq` (compared under `mask`) on `port`, then acquire
    /// what it wrote; `false` when the mailbox closed first.
    fn wait_ack(&self, port: usize, seq: u32, mask: u32) -> bool {
        // Polled relaxed, as the CUDA client does; the fence after the poll that matches makes
        // it an acquire.
        let answered = || {
            let done = (self.mailbox.acknowledged(port) ^ seq) & mask == 0;
            if done {
                fence(Ordering::Acquire);
            }
            done
        };
        let mut spins = 0u32;
        loop {
            if answered() {
                return true;
            }
            spins += 1;
            if self.closed_check.due(spins) && self.mailbox.is_closed() {
                // The host may still have answered between the two reads.
                return answered();
            }
            if spins < 64 {
                spin_wait();
            } else {
                yield_now();
            }
        }
    }

    /// Send one request from warp `warp` and wait for its reply (`Shutdown` when the host
    /// closed the mailbox without answering).
    pub fn call(&self, warp: u32, request: RequestRecord) -> ReplyRecord {
        self.send(warp, request, true)
    }

    /// Post `request`; if `wait`, wait for the reply and return it, else return `Ok`.
    fn send(&self, warp: u32, mut request: RequestRecord, wait: bool) -> ReplyRecord {
        request.warp = warp;
        let (port, was) = self.lock_port(warp);
        // A request posted without waiting came before this one: its answer first.
        if was & PORT_OWED != 0 && !self.wait_ack(port, was >> 2, OWED_SEQ_MASK) {
            self.locks[port].store(was, Ordering::Release);
            return ReplyRecord::status(Status::Shutdown);
        }
        // The last request on the port was acknowledged and acquired before this point (by the
        // wait above, or by the previous holder before it released the lock, which the lock's
        // acquire follows): the next number is the acknowledged one + 1.
        let seq = self.mailbox.acknowledged(port).wrapping_add(1);
        self.mailbox.post_request(port, seq, &request);
        if !wait {
            self.locks[port].store(owed_lock_word(seq), Ordering::Release);
            return ReplyRecord::status(Status::Ok);
        }
        let reply = if self.wait_ack(port, seq, u32::MAX) {
            self.mailbox.take_reply(port, seq)
        } else {
            None
        };
        let unlocked = if reply.is_some() {
            0
        } else {
            owed_lock_word(seq)
        };
        self.locks[port].store(unlocked, Ordering::Release);
        reply.unwrap_or(ReplyRecord::status(Status::Shutdown))
    }

    /// `malloc` from the lanes in `mask`, lane `l` asking `sizes[l]` bytes; arranged unless
    /// `contiguous`. Lanes outside `mask` and lanes that asked 0 get null handles. With caches,
    /// lanes asking at most 32 KiB are served from them, lanes up to 4 MiB too where the run
    /// class serves them ([`crate::caches::run_class_serves`]), and only the others (and lanes
    /// whose class the host denied a slab) make a request; a request that fails gives the cached
    /// objects back too, so `Err` leaves nothing allocated.
    pub fn malloc(
        &self,
        warp: u32,
        mask: u32,
        sizes: &[u64; WARP_LANES],
        contiguous: bool,
    ) -> Result<[Handle; WARP_LANES], Status> {
        let mut mask = mask;
        let mut handles = [Handle::NULL; WARP_LANES];
        let mut cached = 0;
        if let Some(caches) = &self.caches {
            // The flag is read every `closed_check` polls, as while waiting for an answer.
            let polls = std::cell::Cell::new(0u32);
            let closed = || {
                polls.set(polls.get().wrapping_add(1));
                self.closed_check.due(polls.get()) && self.mailbox.is_closed()
            };
            let got = caches.alloc(mask, sizes, !contiguous, &closed);
            handles = got.handles;
            cached = got.served;
            mask &= !got.served & !lane_mask(|l| sizes[l] == 0);
            if mask == 0 {
                return Ok(handles);
            }
        }
        let request = RequestRecord {
            op: if contiguous {
                Op::AllocContiguous
            } else {
                Op::Alloc
            } as u32,
            lane_mask: mask,
            warp,
            reserved: 0,
            words: *sizes,
        };
        let reply = self.call(warp, request);
        let status = Status::from_code(reply.status).unwrap_or(Status::UnknownOp);
        if status != Status::Ok {
            if cached != 0 {
                self.free(warp, cached, &handles);
            }
            return Err(status);
        }
        let masked: [u64; WARP_LANES] =
            std::array::from_fn(|l| if mask >> l & 1 == 1 { sizes[l] } else { 0 });
        let requested = handles_from_reply(&reply, &masked);
        for lane in set_lanes(mask) {
            handles[lane] = requested[lane];
        }
        Ok(handles)
    }

    /// `free` from the lanes in `mask`, lane `l` giving back `handles[l]`.
    pub fn free(&self, warp: u32, mask: u32, handles: &[Handle; WARP_LANES]) -> FreeOutcome {
        self.free_words(warp, mask, Op::Free, handles.map(|h| h.0), true)
    }

    /// [`CpuDevice::free`] without waiting for the host (`am::post_free`): cache objects are
    /// judged at once as by `free`; the other lanes are posted and show `Ok` here, their outcome
    /// counted and kept by the host when it answers.
    pub fn post_free(&self, warp: u32, mask: u32, handles: &[Handle; WARP_LANES]) -> FreeOutcome {
        self.free_words(warp, mask, Op::Free, handles.map(|h| h.0), false)
    }

    /// `free(void*)` from the lanes in `mask`, lane `l` giving back the object whose first byte
    /// is at `addresses[l]`.
    pub fn free_pointers(
        &self,
        warp: u32,
        mask: u32,
        addresses: &[u64; WARP_LANES],
    ) -> FreeOutcome {
        self.free_words(warp, mask, Op::FreePointer, *addresses, true)
    }

    /// [`CpuDevice::free_pointers`] without waiting for the host (`am::post_free(void*)`), as
    /// [`CpuDevice::post_free`] is to `free`.
    pub fn post_free_pointers(
        &self,
        warp: u32,
        mask: u32,
        addresses: &[u64; WARP_LANES],
    ) -> FreeOutcome {
        self.free_words(warp, mask, Op::FreePointer, *addresses, false)
    }

    fn free_words(
        &self,
        warp: u32,
        mask: u32,
        op: Op,
        words: [u64; WARP_LANES],
        wait: bool,
    ) -> FreeOutcome {
        let Some(caches) = &self.caches else {
            return self.free_requested(warp, mask, op, words, wait);
        };
        let local = caches.free(mask, &words, op == Op::FreePointer);
        let rest = mask & !local.handled & lane_mask(|l| words[l] != 0);
        let mut outcome = match rest {
            0 => FreeOutcome {
                status: Status::Ok,
                lanes: [LaneStatus::Ok; WARP_LANES],
            },
            _ => self.free_requested(warp, rest, op, words, wait),
        };
        for lane in set_lanes(local.handled) {
            outcome.lanes[lane] = local.lanes[lane];
        }
        if outcome.status == Status::Ok && local.lanes.iter().any(|&l| l != LaneStatus::Ok) {
            outcome.status = Status::Partial;
        }
        outcome
    }

    fn free_requested(
        &self,
        warp: u32,
        mask: u32,
        op: Op,
        words: [u64; WARP_LANES],
        wait: bool,
    ) -> FreeOutcome {
        let request = RequestRecord {
            op: op as u32,
            lane_mask: mask,
            warp,
            reserved: 0,
            words,
        };
        let reply = self.send(warp, request, wait);
        FreeOutcome {
            status: Status::from_code(reply.status).unwrap_or(Status::UnknownOp),
            lanes: reply
                .lane_status
                .map(|c| LaneStatus::from_code(c).unwrap_or(LaneStatus::InvalidHandle)),
        }
    }
}

/// Each lane's handle from an allocation reply, as the device client builds them.
pub fn handles_from_reply(reply: &ReplyRecord, sizes: &[u64; WARP_LANES]) -> [Handle; WARP_LANES] {
    if reply.chunk_base == 0 {
        return [Handle::NULL; WARP_LANES];
    }
    let class = match reply.size_class {
        0 => SizeClass::Small,
        1 => SizeClass::Portion,
        _ => SizeClass::Large,
    };
    // The fields the handle rules read; chunk size and units do not enter them.
    let geometry = Geometry {
        class,
        tile_log2: reply.tile_log2,
        lane_span: reply.lane_span,
        chunk_bytes: 0,
        units: 0,
    };
    let arrangement = match reply.layout {
        CONTIGUOUS_LAYOUT => translator::Arrangement::Contiguous,
        1 => translator::Arrangement::Arranged(SlotOrder::Identity),
        _ => translator::Arrangement::Arranged(SlotOrder::Pattern),
    };
    lane_handles(
        &geometry,
        reply.chunk_base,
        sizes,
        arrangement,
        &reply.lane_status,
    )
    .unwrap_or([Handle::NULL; WARP_LANES])
}

/// Host memory standing in for the managed arena: `blocks` VABlocks, 2 MiB aligned, zeroed, read
/// and written as 64-bit words (atomically, so even a buggy allocator handing one byte to two
/// threads yields a detectable mismatch rather than undefined behaviour).
pub struct HostArena {
    /// The allocation, a VABlock larger than the arena so that the arena can start 2 MiB aligned.
    allocation: *mut u8,
    base: *mut AtomicU64,
    bytes: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the arena is plain memory accessed only through atomics; the raw pointer is owned and
// freed once, in Drop.
unsafe impl Send for HostArena {}
// SAFETY: as above: every access is an atomic operation.
unsafe impl Sync for HostArena {}

impl HostArena {
    /// `blocks` zeroed VABlocks (pages are committed lazily by the OS).
    pub fn new(blocks: usize) -> Self {
        let block = ortree::VABLOCK_BYTES as usize;
        let bytes = blocks.max(1) * block;
        // Word alignment and one spare block, aligned by hand: a zeroed allocation of ordinary
        // alignment comes from fresh, already zero pages, while an over-aligned one would be
        // zeroed byte by byte (seconds for gigabytes).
        let layout = std::alloc::Layout::from_size_align(bytes + block, 8)
            .expect("arena size fits a layout");
        // SAFETY: the layout has a non-zero size.
        let allocation = unsafe { std::alloc::alloc_zeroed(layout) };
        if allocation.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let skip = (allocation as usize).next_multiple_of(block) - allocation as usize;
        // SAFETY: `skip < block`, so the arena's `bytes` lie inside the allocation.
        let base = unsafe { allocation.add(skip) }.cast::<AtomicU64>();
        Self {
            allocation,
            base,
            bytes,
            layout,
        }
    }

    /// Address of the first byte (2 MiB aligned).
    pub fn base(&self) -> u64 {
        self.base as u64
    }

    /// VABlocks in the arena.
    pub fn blocks(&self) -> usize {
        self.bytes / ortree::VABLOCK_BYTES as usize
    }

    fn word(&self, address: u64) -> &AtomicU64 {
        let offset = address
            .checked_sub(self.base())
            .expect("address below the arena");
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.bytes as u64,
            "address {address:#x} is not a word of the arena"
        );
        // SAFETY: the offset is in bounds and 8-byte aligned (checked above); the memory lives as
        // long as `self`, and AtomicU64 has the layout of u64.
        unsafe { &*self.base.add((offset / 8) as usize) }
    }

    /// Write the word at `address`.
    pub fn store(&self, address: u64, value: u64) {
        self.word(address).store(value, Ordering::Relaxed);
    }

    /// Read the word at `address`.
    pub fn load(&self, address: u64) -> u64 {
        self.word(address).load(Ordering::Relaxed)
    }

    /// Whether `len` bytes from `address` lie in the arena.
    pub fn contains(&self, address: u64, len: u64) -> bool {
        let bytes = self.bytes as u64;
        len <= bytes && address >= self.base() && address - self.base() <= bytes - len
    }

    /// Copy `bytes` to `address` (any alignment; words the range only partly covers keep their
    /// other bytes).
    pub fn write_bytes(&self, address: u64, bytes: &[u8]) {
        self.for_each_word(address, bytes.len(), |word, shift, range| {
            let mut mask = 0u64;
            let mut value = 0u64;
            for (i, &b) in bytes[range].iter().enumerate() {
                let bit = (shift + i) * 8;
                mask |= 0xFF << bit;
                value |= u64::from(b) << bit;
            }
            // Read-modify-write of the word alone: bytes of other objects sharing it stay.
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(old & !mask | value)
            });
        });
    }

    /// Copy `out.len()` bytes from `address` into `out`.
    pub fn read_bytes(&self, address: u64, out: &mut [u8]) {
        self.for_each_word(address, out.len(), |word, shift, range| {
            let value = word.load(Ordering::Relaxed).to_le_bytes();
            let n = range.len();
            out[range].copy_from_slice(&value[shift..shift + n]);
        });
    }

    /// Call `f(word, first byte in the word, range of the caller's bytes)` for each word that
    /// `len` bytes from `address` touch.
    fn for_each_word(
        &self,
        address: u64,
        len: usize,
        mut f: impl FnMut(&AtomicU64, usize, std::ops::Range<usize>),
    ) {
        assert!(
            self.contains(address, len as u64),
            "{len} bytes at {address:#x} are not in the arena"
        );
        let mut done = 0usize;
        while done < len {
            let at = address + done as u64;
            let shift = (at % 8) as usize;
            let n = (8 - shift).min(len - done);
            f(self.word(at - shift as u64), shift, done..done + n);
            done += n;
        }
    }
}

impl Drop for HostArena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.allocation, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_arena_bounds_and_byte_copies() {
        let arena = HostArena::new(1);
        let (base, bytes) = (arena.base(), 2u64 << 20);
        assert!(arena.contains(base, bytes) && arena.contains(base + bytes - 8, 8));
        assert!(!arena.contains(base, bytes + 1), "longer than the arena");
        assert!(!arena.contains(base + 8, bytes) && !arena.contains(base - 8, 8));
        arena.write_bytes(base + 5, &[1, 2, 3, 4, 5, 6, 7]);
        let mut out = [0u8; 9];
        arena.read_bytes(base + 4, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7, 0]);
    }
}
