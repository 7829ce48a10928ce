//! The mailbox: `P` ports shared by device warps and the host service thread.
//!
//! Every word has one writer. The device writes `req_seq[p]` and port `p`'s request words; the
//! host writes `ack_seq[p]`, port `p`'s reply words, and `closed`. Device-written and
//! host-written words live in separate arrays, so neither side's writes share a cache line with
//! the other's. No read-modify-write crosses the bus (the H200 has no host-native atomics).
//!
//! Protocol for one request on port `p` (the port's lock, held in device memory, makes the warp
//! that holds it the only device writer of `p`):
//!
//! 1. device: write the request words (relaxed), then `req_seq[p] = ack_seq[p] + 1` (release);
//! 2. host: sees `req_seq[p] != ack_seq[p]` (acquire), reads the request words (relaxed);
//! 3. host: writes the reply words (relaxed), then `ack_seq[p] = req_seq[p]` (release);
//! 4. device: sees `ack_seq[p] == its seq` (a relaxed poll, then an acquire fence), reads the
//!    reply words (relaxed).
//!
//! A `req_seq` that is not `ack_seq + 1` (a skipped or corrupted sequence number) is answered with
//! `BadSequence` and the port is resynchronised to it. On the GPU the arrays are this memory,
//! registered as pinned and mapped for the device; the CUDA client (`client.cuh`) follows the same
//! steps with system-scope release and acquire.

use std::sync::atomic::Ordering;

use thiserror::Error;

use crate::records::{REPLY_WORDS, REQUEST_WORDS, ReplyRecord, RequestRecord};
use crate::shared::{SharedArrays, Width};
use crate::sync::{AtomicU32, AtomicU64, fence};

/// Most ports a mailbox may have.
pub const MAX_PORTS: usize = 1 << 16;

/// Why a mailbox could not be made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MailboxError {
    /// Ports must be in 1..=65536.
    #[error("a mailbox needs 1..={MAX_PORTS} ports, not {0}")]
    BadPortCount(usize),
}

/// A request waiting on a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The sequence number the device published.
    pub seq: u32,
    /// Whether it is the one expected (`ack + 1`); if not, the sequence was skipped or corrupted.
    pub in_order: bool,
}

impl Pending {
    /// What a port whose device published `seq` and whose host acknowledged `ack` holds.
    fn of(seq: u32, ack: u32) -> Option<Self> {
        (seq != ack).then(|| Pending {
            seq,
            in_order: seq == ack.wrapping_add(1),
        })
    }
}

/// The shared ports.
pub struct Mailbox {
    ports: usize,
    storage: Storage,
}

/// The mailbox's arrays, in this order: `req_seq`, `requests`, `ack_seq`, `replies`, `closed`.
struct Storage(SharedArrays);

impl Storage {
    fn new(ports: usize) -> Self {
        Self(SharedArrays::new(&[
            (Width::U32, ports),
            (Width::U64, ports * REQUEST_WORDS),
            (Width::U32, ports),
            (Width::U64, ports * REPLY_WORDS),
            (Width::U32, 1),
        ]))
    }
    fn req_seq(&self) -> &[AtomicU32] {
        self.0.u32s(0)
    }
    fn requests(&self) -> &[AtomicU64] {
        self.0.u64s(1)
    }
    fn ack_seq(&self) -> &[AtomicU32] {
        self.0.u32s(2)
    }
    fn replies(&self) -> &[AtomicU64] {
        self.0.u64s(3)
    }
    fn closed(&self) -> &AtomicU32 {
        &self.0.u32s(4)[0]
    }
}

impl Mailbox {
    /// A mailbox of `ports` idle ports.
    pub fn new(ports: usize) -> Result<Self, MailboxError> {
        if ports == 0 || ports > MAX_PORTS {
            return Err(MailboxError::BadPortCount(ports));
        }
        Ok(Self {
            ports,
            storage: Storage::new(ports),
        })
    }

    /// Number of ports.
    pub fn ports(&self) -> usize {
        self.ports
    }

    // ---- host side ------------------------------------------------------------------------

    /// Whether port `port` holds a request not yet answered.
    #[inline]
    pub fn pending(&self, port: usize) -> Option<Pending> {
        let seq = self.storage.req_seq()[port].load(Ordering::Acquire);
        let ack = self.storage.ack_seq()[port].load(Ordering::Relaxed);
        Pending::of(seq, ack)
    }

    /// [`Mailbox::pending`] for each port of `ports` in order: `take` gets every port holding a
    /// request not yet answered, until it returns `false`. Returns whether the whole range was
    /// read. The sequence arrays are looked up once for the range, so a sweep of thousands of
    /// ports costs a few instructions a port.
    pub fn scan_pending(
        &self,
        ports: std::ops::Range<usize>,
        mut take: impl FnMut(usize, Pending) -> bool,
    ) -> bool {
        let first = ports.start;
        let requested = &self.storage.req_seq()[ports.clone()];
        let acknowledged = &self.storage.ack_seq()[ports];
        for (i, (req, ack)) in requested.iter().zip(acknowledged).enumerate() {
            let seq = req.load(Ordering::Acquire);
            if let Some(p) = Pending::of(seq, ack.load(Ordering::Relaxed))
                && !take(first + i, p)
            {
                return false;
            }
        }
        true
    }

    /// The request on `port` (call after [`Mailbox::pending`] saw it).
    pub fn read_request(&self, port: usize) -> RequestRecord {
        let words = &self.storage.requests()[port * REQUEST_WORDS..(port + 1) * REQUEST_WORDS];
        RequestRecord::from_words(std::array::from_fn(|i| words[i].load(Ordering::Relaxed)))
    }

    /// Answer request `seq` on `port`: the reply words, then the acknowledgement.
    pub fn publish_reply(&self, port: usize, seq: u32, reply: &ReplyRecord) {
        let words = &self.storage.replies()[port * REPLY_WORDS..(port + 1) * REPLY_WORDS];
        for (slot, word) in words.iter().zip(reply.to_words()) {
            slot.store(word, Ordering::Relaxed);
        }
        self.storage.ack_seq()[port].store(seq, Ordering::Release);
    }

    /// Tell the device that no request will be served any more.
    pub fn close(&self) {
        self.storage.closed().store(1, Ordering::Release);
    }

    // ---- device side (what the CUDA client does; CPU warps call these) --------------------

    /// Whether the host has closed the mailbox.
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.storage.closed().load(Ordering::Acquire) != 0
    }

    /// The last acknowledged sequence number of `port`. Relaxed, as in the CUDA client: the
    /// port lock's acquire follows the previous holder's acquire of this value.
    pub fn acknowledged(&self, port: usize) -> u32 {
        self.storage.ack_seq()[port].load(Ordering::Relaxed)
    }

    /// Post `request` as number `seq` on `port` (the caller holds the port's lock).
    pub fn post_request(&self, port: usize, seq: u32, request: &RequestRecord) {
        let words = &self.storage.requests()[port * REQUEST_WORDS..(port + 1) * REQUEST_WORDS];
        for (slot, word) in words.iter().zip(request.to_words()) {
            slot.store(word, Ordering::Relaxed);
        }
        self.storage.req_seq()[port].store(seq, Ordering::Release);
    }

    /// The reply to request `seq` on `port`, once the host has published it.
    #[inline]
    pub fn take_reply(&self, port: usize, seq: u32) -> Option<ReplyRecord> {
        // Polled relaxed, as the CUDA client does (an acquire per poll is a system-scope read
        // with ordering across PCIe); the fence after the poll that matches makes it an acquire.
        if self.storage.ack_seq()[port].load(Ordering::Relaxed) != seq {
            return None;
        }
        fence(Ordering::Acquire);
        let words = &self.storage.replies()[port * REPLY_WORDS..(port + 1) * REPLY_WORDS];
        Some(ReplyRecord::from_words(std::array::from_fn(|i| {
            words[i].load(Ordering::Relaxed)
        })))
    }
}

#[cfg(not(loom))]
impl Mailbox {
    /// The one host allocation holding every array: `(address, bytes)`, page aligned, for
    /// registering with the GPU.
    pub fn region(&self) -> (usize, usize) {
        self.storage.0.region()
    }

    /// Byte offsets in [`Mailbox::region`] of `req_seq`, `requests`, `ack_seq`, `replies` and
    /// `closed`: the device sees each array at its registered base plus this offset.
    pub fn offsets(&self) -> [usize; 5] {
        self.storage
            .0
            .offsets()
            .try_into()
            .expect("the mailbox has five arrays")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::records::Status;
    use crate::shared::PAGE;
    use bytemuck::Zeroable;

    #[test]
    fn port_counts_are_checked() {
        assert_eq!(Mailbox::new(0).err(), Some(MailboxError::BadPortCount(0)));
        assert!(Mailbox::new(MAX_PORTS + 1).is_err());
        assert_eq!(Mailbox::new(3).unwrap().ports(), 3);
    }

    #[test]
    fn one_round_trip() {
        let m = Mailbox::new(4).unwrap();
        assert_eq!(m.pending(2), None);
        let mut req = RequestRecord::zeroed();
        req.op = 1;
        req.words[5] = 77;
        m.post_request(2, 1, &req);
        assert_eq!(
            m.pending(2),
            Some(Pending {
                seq: 1,
                in_order: true
            })
        );
        assert_eq!(m.read_request(2), req);
        assert_eq!(m.take_reply(2, 1), None);
        let reply = ReplyRecord::status(Status::Ok);
        m.publish_reply(2, 1, &reply);
        assert_eq!(m.take_reply(2, 1), Some(reply));
        assert_eq!(m.pending(2), None);
        m.post_request(2, 9, &req); // a device that skipped numbers
        assert_eq!(
            m.pending(2),
            Some(Pending {
                seq: 9,
                in_order: false
            })
        );
    }

    #[test]
    fn arrays_sit_on_pages_of_their_own() {
        let m = Mailbox::new(8).unwrap();
        let (base, bytes) = m.region();
        assert_eq!(base % PAGE, 0);
        let offsets = m.offsets();
        assert_eq!(offsets, [0, PAGE, 2 * PAGE, 3 * PAGE, 4 * PAGE]);
        assert_eq!(bytes, 5 * PAGE);
        let m = Mailbox::new(8192).unwrap();
        let o = m.offsets();
        assert!(o.windows(2).all(|w| w[0] < w[1] && w[1] % PAGE == 0));
        assert!(o[1] - o[0] >= 8192 * 4 && o[2] - o[1] >= 8192 * REQUEST_WORDS * 8);
        assert!(m.region().1 - o[4] >= 4);
    }

    #[test]
    fn each_array_is_read_at_its_width() {
        let storage = Storage::new(4);
        assert_eq!(storage.req_seq().len(), 4);
        assert_eq!(storage.requests().len(), 4 * REQUEST_WORDS);
        assert_eq!(
            storage.closed().load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }
}
