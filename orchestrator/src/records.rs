//! The request and reply records of the mailbox, and their codes: the one definition of both
//! sides. Each has a C++ description ([`crate::cpp_decl`]) from which `detail/abi.h`, the device
//! headers' declarations, is rendered; a test fails when the committed header is stale.
//!
//! A record travels as whole 64-bit words (see [`crate::mailbox`]), so both are a multiple of 8
//! bytes and `Pod`.

use bytemuck::{Pod, Zeroable};

use crate::cpp_decl::{cpp_enum, cpp_struct};

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
/// The runtime passes it by value (or binds it as a module's default mailbox). All zero (`ports`
/// 0) is unbound: every device call through it answers `Unbound` (`am::kStatusUnbound`) without
/// touching memory. A port's next sequence number is its acknowledged one plus 1: the lock
/// holder is the port's only device writer and every earlier request on it was acknowledged
/// before the lock was released, so no device-side copy (which a stale cache line could make
/// lie) is kept.
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
/// arrays in the order of `CpuCaches::arrays` (`set_device_arrays` takes them so), then the
/// channel's arrays (pinned host memory) in the order of `CacheChannel::offsets`. Each array is
/// the device address of its first word.
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
    /// Device memory, `u64` per class: slab number << 32 | cursor.
    pub class_words: u64,
    /// Device memory, `u32` per class: the class lock.
    pub class_locks: u64,
    /// Device memory, `u32` per class and ring entry: slab id of slab number `n` at `n % ring_len`.
    pub class_slab: u64,
    /// Device memory, `u64` per slab id: its base.
    pub slab_base: u64,
    /// Device memory, `u32` per slab id: its class.
    pub slab_class: u64,
    /// Device memory, `u32` per slab id: live objects.
    pub slab_live: u64,
    /// Device memory, `u32` per slab id: its slab number.
    pub slab_number: u64,
    /// Device memory, `u32` per slab id: its objects' free stamp (cache stamp flag | cache
    /// generation).
    pub slab_generation: u64,
    /// Device memory, `u32` per slab id: times the id became current.
    pub slab_life: u64,
    /// Device memory, `BITMAP_WORDS` `u64` per slab id: life << 32 | freed objects.
    pub bits: u64,
    /// Device memory, `u64` per block-table entry: (block + 1) << 32 | (slab id + 1).
    pub blocks: u64,
    /// Device memory, one `u64`: returns claimed.
    pub returns_claimed: u64,
    /// Device memory, `u64` per stripe and free outcome: device frees by `LaneStatus` code.
    pub counters: u64,
    /// Device memory, `AHEAD_WORDS` `u64` per class: the slab numbers its lock holder holds
    /// claimed ahead (`first << 32 | end`), then their ring entries (`caches::device`).
    pub class_ahead: u64,
    /// Host-written: `u32` per class, slabs filled.
    pub filled: u64,
    /// Host-written: `u32` per class, asks denied.
    pub denied: u64,
    /// Host-written: `u64` per class and ring entry: slab base | slab id.
    pub ring: u64,
    /// Device-written (the class lock's holder): `u32` per class, slabs taken.
    pub taken: u64,
    /// Device-written (the class lock's holder): `u32` per class, slabs wanted.
    pub demand: u64,
    /// Device-written: `u64` per slab id, lap << 32 | slab id.
    pub returns: u64,
    /// Device-written: `u32` per class, the entry the class lock's holder is taking + 1
    /// (`CacheChannel::claim`).
    pub claimed: u64,
}

#[cfg(not(loom))]
impl DeviceMailbox {
    /// The record of `mailbox` as the device sees it: its arrays at `mapped` (where the device
    /// sees [`crate::Mailbox::region`]) plus their offsets, the ports' locks at `locks`, and
    /// `caches`.
    pub fn over(mailbox: &crate::Mailbox, mapped: u64, locks: u64, caches: DeviceCaches) -> Self {
        let [req_seq, requests, ack_seq, replies, closed] =
            mailbox.offsets().map(|o| mapped + o as u64);
        Self {
            ports: mailbox.ports() as u32,
            reserved: 0,
            req_seq,
            requests,
            ack_seq,
            replies,
            closed,
            locks,
            caches,
        }
    }
}

impl DeviceCaches {
    /// The record of caches whose channel is `channel`, seen by the device at `mapped` (where
    /// it sees [`crate::caches::CacheChannel::region`]), with a block table of `hash_len`
    /// entries and its device arrays at `arrays` ([`crate::caches::CpuCaches::arrays`] order).
    #[cfg(not(loom))]
    pub fn over(
        channel: &crate::caches::CacheChannel,
        mapped: u64,
        hash_len: usize,
        arrays: [u64; crate::caches::DEVICE_ARRAYS],
    ) -> Self {
        let [filled, denied, ring, taken, demand, returns, claimed] =
            channel.offsets().map(|o| mapped + o as u64);
        let mut record = Self {
            classes: crate::caches::CACHE_CLASSES as u32,
            max_slabs: channel.max_slabs() as u32,
            hash_len: hash_len as u32,
            ring_len: crate::caches::RING_LEN as u32,
            filled,
            denied,
            ring,
            taken,
            demand,
            returns,
            claimed,
            ..Self::default()
        };
        record.set_device_arrays(arrays);
        record
    }

    /// Sets the device-memory arrays' addresses, given in [`crate::caches::CpuCaches::arrays`]
    /// order.
    pub fn set_device_arrays(&mut self, addresses: [u64; crate::caches::DEVICE_ARRAYS]) {
        [
            self.class_words,
            self.class_locks,
            self.class_slab,
            self.slab_base,
            self.slab_class,
            self.slab_live,
            self.slab_number,
            self.slab_generation,
            self.slab_life,
            self.bits,
            self.blocks,
            self.returns_claimed,
            self.counters,
            self.class_ahead,
        ] = addresses;
    }
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

cpp_struct!(RequestRecord at "orchestrator::records::RequestRecord" {
    op: u32,
    lane_mask: u32,
    warp: u32,
    reserved: u32,
    words: [u64; 32],
});

cpp_struct!(ReplyRecord at "orchestrator::records::ReplyRecord" {
    status: u32,
    size_class: u32,
    tile_log2: u32,
    layout: u32,
    chunk_base: u64,
    lane_span: u64,
    reserved: u32,
    failed_lanes: u32,
    lane_status: [u8; 32],
});

cpp_struct!(DeviceCaches at "orchestrator::records::DeviceCaches" {
    classes: u32,
    max_slabs: u32,
    hash_len: u32,
    ring_len: u32,
    class_words: u64 as "u64*",
    class_locks: u64 as "u32*",
    class_slab: u64 as "u32*",
    slab_base: u64 as "u64*",
    slab_class: u64 as "u32*",
    slab_live: u64 as "u32*",
    slab_number: u64 as "u32*",
    slab_generation: u64 as "u32*",
    slab_life: u64 as "u32*",
    bits: u64 as "u64*",
    blocks: u64 as "u64*",
    returns_claimed: u64 as "u64*",
    counters: u64 as "u64*",
    class_ahead: u64 as "u64*",
    filled: u64 as "const u32*",
    denied: u64 as "const u32*",
    ring: u64 as "const u64*",
    taken: u64 as "u32*",
    demand: u64 as "u32*",
    returns: u64 as "u64*",
    claimed: u64 as "u32*",
});

cpp_struct!(DeviceMailbox at "orchestrator::records::DeviceMailbox" {
    ports: u32,
    reserved: u32,
    req_seq: u64 as "u32*",
    requests: u64 as "RequestRecord*",
    ack_seq: u64 as "const u32*",
    replies: u64 as "const ReplyRecord*",
    closed: u64 as "const u32*",
    locks: u64 as "u32*",
    caches: DeviceCaches,
});

cpp_enum!(Op at "orchestrator::records::Op", prefix "kOp" {
    Alloc,
    AllocContiguous,
    Free,
    FreePointer,
});

cpp_enum!(Status at "orchestrator::records::Status", prefix "kStatus" {
    Ok,
    OutOfMemory,
    SizeOverLimit,
    UnknownOp,
    EmptyMask,
    BadSequence,
    Shutdown,
    Partial,
    Unbound,
});

cpp_enum!(LaneStatus at "orchestrator::records::LaneStatus", prefix "kLane" {
    Ok,
    InvalidHandle,
    DoubleFree,
    InteriorPointer,
    CachedObject,
});

/// Every shared record, in the order the header declares them (a record after those it holds).
pub const CPP_STRUCTS: [crate::cpp_decl::CppStruct; 4] = [
    RequestRecord::CPP,
    ReplyRecord::CPP,
    DeviceCaches::CPP,
    DeviceMailbox::CPP,
];

/// Every shared enumeration of codes.
pub const CPP_ENUMS: [crate::cpp_decl::CppEnum; 3] = [Op::CPP, Status::CPP, LaneStatus::CPP];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_description_covers_its_record() {
        for record in CPP_STRUCTS {
            assert_eq!(record.check(), Ok(()));
        }
    }

    #[test]
    fn device_arrays_land_in_their_fields_in_order() {
        let mut caches = DeviceCaches::default();
        let addresses: [u64; crate::caches::DEVICE_ARRAYS] = std::array::from_fn(|i| i as u64 + 1);
        caches.set_device_arrays(addresses);
        // Two words of sizes, then the device arrays in `CpuCaches::arrays` order.
        let words: [u64; 23] = bytemuck::cast(caches);
        assert_eq!(words[2..2 + addresses.len()], addresses);
        assert!(words[2 + addresses.len()..].iter().all(|&w| w == 0));
    }

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
