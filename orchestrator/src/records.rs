//! The request and reply records of the mailbox, and their codes. `device/include/alignmalloc/
//! records.h` is the C++ twin; `device/hostcheck` checks sizes, offsets and codes against it.
//!
//! A record travels as whole 64-bit words (see [`crate::mailbox`]), so both are a multiple of 8
//! bytes and `Pod`.

use bytemuck::{Pod, Zeroable};

/// Words of a request record.
pub const REQUEST_WORDS: usize = 34;
/// Words of a reply record.
pub const REPLY_WORDS: usize = 9;

/// One warp's request: an operation, which lanes take part, and one word per lane.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct RequestRecord {
    /// An [`Op`] code.
    pub op: u32,
    /// Lanes taking part (bit `l` = lane `l`); words of other lanes are ignored.
    pub lane_mask: u32,
    /// The global warp id of the sender (for tracing).
    pub warp: u32,
    /// Zero.
    pub reserved: u32,
    /// Allocations: each lane's size in bytes (0 = nothing). Frees: each lane's handle, or with
    /// [`Op::FreePointer`] each lane's object address (0 = none).
    pub words: [u64; 32],
}

/// The answer to one request.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct ReplyRecord {
    /// A [`Status`] code for the whole warp.
    pub status: u32,
    /// Allocations: `translator::SizeClass` of the chunk.
    pub size_class: u32,
    /// Allocations: log2 of the tile (0 for small chunks).
    pub tile_log2: u32,
    /// Allocations: `translator::SlotOrder` code, or [`CONTIGUOUS_LAYOUT`].
    pub layout: u32,
    /// Allocations: first byte of the chunk (0 when no lane asked for memory).
    pub chunk_base: u64,
    /// Allocations: per-lane span of the chunk.
    pub lane_span: u64,
    /// Zero.
    pub reserved: u32,
    /// Frees: lanes whose free failed (their code is in `lane_status`).
    pub failed_lanes: u32,
    /// Frees: a [`LaneStatus`] code per lane. Allocations: each lane's generation (1..=127), which
    /// its handle carries.
    pub lane_status: [u8; 32],
}

/// What a kernel gets to reach the service thread (`am::DeviceMailbox`): addresses as the device
/// sees them of the mailbox arrays (pinned host memory) and of the per-port locks (device memory).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DeviceMailbox {
    /// Ports.
    pub ports: u32,
    /// Zero.
    pub reserved: u32,
    /// `u32` per port, device-written.
    pub req_seq: u64,
    /// `RequestRecord` per port, device-written.
    pub requests: u64,
    /// `u32` per port, host-written.
    pub ack_seq: u64,
    /// `ReplyRecord` per port, host-written.
    pub replies: u64,
    /// One `u32`, host-written.
    pub closed: u64,
    /// `u32` per port, device memory.
    pub locks: u64,
    /// The device caches (all zero: none, every allocation asks the host).
    pub caches: DeviceCaches,
}

/// What the device needs of the caches (`am::DeviceCaches`): sizes, then the device-memory
/// arrays in the order of [`crate::caches::CpuCaches::arrays`], then the channel's arrays
/// (pinned host memory) in the order of [`crate::caches::CacheChannel::offsets`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DeviceCaches {
    /// Cache classes (0: no caches).
    pub classes: u32,
    /// Slab ids (the returns ring's length).
    pub max_slabs: u32,
    /// Entries of the block table (a power of two).
    pub hash_len: u32,
    /// Ring entries per class.
    pub ring_len: u32,
    /// Device memory: `u64` class word per class, `u32` lock per class, `u32` slab id per class
    /// and ring entry, per slab id `u64` base and `u32` class, live, number, generation and
    /// life, the bitmaps (`u64`: life << 32 | 32 bits), the block table (`u64`), one `u64` count of returns claimed, the free
    /// counters (`u64`, 4 per stripe).
    pub device: [u64; crate::caches::DEVICE_ARRAYS],
    /// Host-written: `u32` filled and denied per class, `u64` ring entries.
    pub filled: u64,
    /// See `filled`.
    pub denied: u64,
    /// See `filled`.
    pub ring: u64,
    /// Device-written: `u32` taken and demand per class, `u64` returns entries.
    pub taken: u64,
    /// See `taken`.
    pub demand: u64,
    /// See `taken`.
    pub returns: u64,
    /// Device-written: `u32` per class, the entry the class lock's holder is taking + 1
    /// (`CacheChannel::claim`).
    pub claimed: u64,
}

/// `ReplyRecord::layout` of a thread-contiguous chunk (slot orders are 0 and 1).
pub const CONTIGUOUS_LAYOUT: u32 = 0xFF;

/// Operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Op {
    /// Allocate, warp-arranged (portion and large classes).
    Alloc = 1,
    /// Allocate, thread-contiguous.
    AllocContiguous = 2,
    /// Free each lane's handle.
    Free = 3,
    /// Free each lane's object by its first byte's address (a plain pointer, as `free(void*)`
    /// gives it), judged like a free by handle.
    FreePointer = 4,
}

impl Op {
    /// The operation with this code, if any.
    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(Op::Alloc),
            2 => Some(Op::AllocContiguous),
            3 => Some(Op::Free),
            4 => Some(Op::FreePointer),
            _ => None,
        }
    }
}

/// Whole-warp outcome of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// The arena has no room for the chunk; nothing was allocated.
    OutOfMemory = 1,
    /// A lane asked for more than the per-lane limit; nothing was allocated.
    SizeOverLimit = 2,
    /// The op code is unknown.
    UnknownOp = 3,
    /// No lane takes part.
    EmptyMask = 4,
    /// The request's sequence number skipped: the port was resynchronised, the request dropped.
    BadSequence = 5,
    /// The service is shutting down; the request was not served.
    Shutdown = 6,
    /// Some lanes of a free failed; see `lane_status`. The others were freed.
    Partial = 7,
    /// The kernel called through a mailbox that was never bound (all zero): nothing was sent.
    /// Only the device client gives it; the host never answers it.
    Unbound = 8,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 9] = [
        Status::Ok,
        Status::OutOfMemory,
        Status::SizeOverLimit,
        Status::UnknownOp,
        Status::EmptyMask,
        Status::BadSequence,
        Status::Shutdown,
        Status::Partial,
        Status::Unbound,
    ];

    /// How many status codes there are.
    pub const COUNT: usize = Self::ALL.len();

    /// The status with this code, if any.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }
}

/// Per-lane outcome of a free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum LaneStatus {
    /// Freed (or a null handle: nothing to do).
    Ok = 0,
    /// The handle points into no chunk the allocator handed out (foreign or forged).
    InvalidHandle = 1,
    /// The handle's memory was already freed (or the handle is stale).
    DoubleFree = 2,
    /// The handle points inside a chunk but not at the start of a lane's object.
    InteriorPointer = 3,
    /// The handle is an object of a device cache, which only device code frees (`am::free` in a
    /// kernel); the host left it alone.
    CachedObject = 4,
}

impl LaneStatus {
    /// Every lane status, in code order.
    pub const ALL: [LaneStatus; 5] = [
        LaneStatus::Ok,
        LaneStatus::InvalidHandle,
        LaneStatus::DoubleFree,
        LaneStatus::InteriorPointer,
        LaneStatus::CachedObject,
    ];

    /// The lane status with this code, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }
}

impl RequestRecord {
    /// The record as the words that travel.
    pub fn to_words(&self) -> [u64; REQUEST_WORDS] {
        bytemuck::cast(*self)
    }

    /// The record from the words that travelled.
    pub fn from_words(words: [u64; REQUEST_WORDS]) -> Self {
        bytemuck::cast(words)
    }
}

impl ReplyRecord {
    /// A reply carrying only a whole-warp status.
    pub fn status(status: Status) -> Self {
        Self {
            status: status as u32,
            ..Self::zeroed()
        }
    }

    /// The record as the words that travel.
    pub fn to_words(&self) -> [u64; REPLY_WORDS] {
        bytemuck::cast(*self)
    }

    /// The record from the words that travelled.
    pub fn from_words(words: [u64; REPLY_WORDS]) -> Self {
        bytemuck::cast(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_whole_words() {
        assert_eq!(std::mem::size_of::<RequestRecord>(), REQUEST_WORDS * 8);
        assert_eq!(std::mem::size_of::<ReplyRecord>(), REPLY_WORDS * 8);
    }

    #[test]
    fn words_round_trip() {
        let mut r = RequestRecord::zeroed();
        r.op = 3;
        r.lane_mask = 0x8000_0001;
        r.words[31] = 0xdead_beef;
        assert_eq!(RequestRecord::from_words(r.to_words()), r);
        let mut a = ReplyRecord::status(Status::Partial);
        a.lane_status[7] = LaneStatus::DoubleFree as u8;
        assert_eq!(ReplyRecord::from_words(a.to_words()), a);
    }

    #[test]
    fn codes_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s as u32), Some(s));
        }
        for s in LaneStatus::ALL {
            assert_eq!(LaneStatus::from_code(s as u8), Some(s));
        }
        assert_eq!(Status::from_code(99), None);
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(3), Some(Op::Free));
        assert_eq!(Op::from_code(4), Some(Op::FreePointer));
        assert_eq!(Op::from_code(5), None);
    }
}
