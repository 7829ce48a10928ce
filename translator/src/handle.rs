//! The 64-bit handle a lane gets back, and address translation.
//!
//! ```text
//! 63     kind       0 = plain (identity), 1 = arranged
//! 62..60 tile       tile_log2 - 12 (0..=4: 4 KiB..=64 KiB)
//! 59..55 lane       owner lane
//! 54..48 generation of the object's address (0..=127), so a stale handle can be told from a live one
//! 47..0  address    first byte of the lane's tile 0 (plain: the object's first byte)
//! ```
//!
//! A device cache's object is plain and not a warp's lane's, so its handle's tile and lane fields
//! (62..55) carry the high 8 bits of its slab's cache generation, whose low 6 bits sit in the
//! generation field above 64: 14 bits, [`CACHE_GENERATIONS`] values (see [`Handle::cached`]).
//!
//! The generation has 7 bits (the kind needs 1 and the tile 3): with 3, a stale handle held for
//! seconds by a delayed warp aliased a new object after 8 reuses of a hot address (seen on the
//! GPU); 127 new chunks must now start objects in the same 256-byte unit (or page) before that
//! can happen (generations cycle through 1..=127; 0 marks a place where no object ever started).
//!
//! `translate(h, off)` is `addr + off` for plain handles and, for arranged ones with tile `2^t`,
//! `addr + ((off >> t) << (t + 5)) + (off & (2^t - 1))`: tile `k` of a lane lies `k` tile rows of
//! 32 tiles further on. The formula needs only the handle, so any thread can translate any handle.
//! `translate` is total: any 64-bit value gives an answer (arranged exactly when the kind field is
//! 1), computed with wrapping arithmetic, the same in Rust and in `layout.h`.

use bytemuck::{Pod, Zeroable};

use crate::error::LayoutError;
use crate::geometry::{Geometry, small_offsets};
use crate::slot::SlotOrder;
use crate::{ADDRESS_BITS, MAX_TILE_LOG2, MIN_TILE_LOG2, WARP_LANES};

const KIND_SHIFT: u32 = 63;
const TILE_SHIFT: u32 = 60;
const TILE_MASK: u64 = 0x7;
const LANE_SHIFT: u32 = 55;
const GENERATION_SHIFT: u32 = 48;
const GENERATION_MASK: u64 = 0x7F;
/// Generations count modulo this.
pub const GENERATIONS: u8 = 128;
/// The first generation of the device caches' slabs: the host's chunks stamp their objects
/// 1..64, the caches 64..128, so a handle tells which of the two made it, and a stale handle of
/// one is never taken for a live object of the other.
pub const CACHE_GENERATIONS_START: u8 = 64;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;
/// Cache generations a device cache's handle carries: a slab's objects carry its blocks' count
/// of cache slabs so far (the host retires a block before the count wraps, so a stale handle of
/// a cache object never matches a later slab on its blocks).
pub const CACHE_GENERATIONS: u32 = 1 << 14;
/// Set in a [`Handle::free_stamp`] that a device cache made (above any cache generation).
pub const CACHE_STAMP_FLAG: u32 = CACHE_GENERATIONS;

/// What a handle's address means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HandleKind {
    /// The object is contiguous at the address.
    Plain = 0,
    /// The object is tiled across the rows of a warp chunk.
    Arranged = 1,
}

/// A lane's handle to its allocation. `Handle::NULL` (0) is "nothing". `Debug` prints it in
/// hex, as every message does.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Pod, Zeroable)]
#[repr(transparent)]
pub struct Handle(pub u64);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({:#x})", self.0)
    }
}

// SAFETY: a `Handle` is `#[repr(transparent)]` over a `u64`, the layout of `am::u64` that kernels
// take handles as, so its bytes are a valid kernel argument.
#[cfg(feature = "cudarc")]
unsafe impl cudarc::driver::DeviceRepr for Handle {}

impl Handle {
    /// No allocation (what lanes that asked 0 bytes get).
    pub const NULL: Handle = Handle(0);

    /// A plain handle: the object is contiguous at `address`.
    pub fn plain(address: u64, lane: u32) -> Result<Self, LayoutError> {
        Self::encode(HandleKind::Plain, 0, lane, address)
    }

    /// An arranged handle: `address` is the lane's tile 0, tiles are `2^tile_log2` bytes.
    pub fn arranged(address: u64, tile_log2: u32, lane: u32) -> Result<Self, LayoutError> {
        if !(MIN_TILE_LOG2..=MAX_TILE_LOG2).contains(&tile_log2) {
            return Err(LayoutError::BadTile(tile_log2));
        }
        Self::encode(
            HandleKind::Arranged,
            tile_log2 - MIN_TILE_LOG2,
            lane,
            address,
        )
    }

    fn encode(
        kind: HandleKind,
        tile_field: u32,
        lane: u32,
        address: u64,
    ) -> Result<Self, LayoutError> {
        if lane as usize >= WARP_LANES {
            return Err(LayoutError::LaneOutOfRange(lane));
        }
        if address > ADDRESS_MASK {
            return Err(LayoutError::AddressTooWide(address));
        }
        Ok(Handle(
            (kind as u64) << KIND_SHIFT
                | u64::from(tile_field) << TILE_SHIFT
                | u64::from(lane) << LANE_SHIFT
                | address,
        ))
    }

    /// Whether this is the null handle.
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The kind bit (0 plain, 1 arranged).
    pub const fn kind_field(self) -> u32 {
        (self.0 >> KIND_SHIFT) as u32
    }

    /// The kind.
    pub const fn kind(self) -> HandleKind {
        if self.kind_field() == HandleKind::Arranged as u32 {
            HandleKind::Arranged
        } else {
            HandleKind::Plain
        }
    }

    /// `tile_log2` (field + 12); meaningful for arranged handles.
    pub const fn tile_log2(self) -> u32 {
        ((self.0 >> TILE_SHIFT) & TILE_MASK) as u32 + MIN_TILE_LOG2
    }

    /// The owner lane.
    pub const fn lane(self) -> u32 {
        ((self.0 >> LANE_SHIFT) & 0x1F) as u32
    }

    /// The generation field (0..=127).
    pub const fn generation(self) -> u8 {
        ((self.0 >> GENERATION_SHIFT) & GENERATION_MASK) as u8
    }

    /// The same handle with its generation field set to `generation % 128`.
    pub const fn with_generation(self, generation: u8) -> Self {
        let field = ((generation % GENERATIONS) as u64) << GENERATION_SHIFT;
        Handle(self.0 & !(GENERATION_MASK << GENERATION_SHIFT) | field)
    }

    /// A device cache's object at `address` in a slab of cache generation `generation` (taken
    /// modulo [`CACHE_GENERATIONS`], so the slab's free stamp serves as well; the address modulo
    /// 2^48): plain, its generation field
    /// `64 + generation % 64`, its tile and lane fields `generation / 64`.
    pub const fn cached(address: u64, generation: u32) -> Self {
        let generation = (generation % CACHE_GENERATIONS) as u64;
        Handle(
            (generation >> 6) << LANE_SHIFT
                | (CACHE_GENERATIONS_START as u64 | generation & 63) << GENERATION_SHIFT
                | address & ADDRESS_MASK,
        )
    }

    /// What a free of this handle is judged by against a cache slab's stamp: for a plain handle
    /// a device cache made (generation field 64..128), [`CACHE_STAMP_FLAG`] with its cache
    /// generation; for any other, its generation field (0: not known, a free by address).
    pub const fn free_stamp(self) -> u32 {
        let field = self.generation() as u32;
        if self.kind_field() != HandleKind::Plain as u32 || field < CACHE_GENERATIONS_START as u32 {
            return field;
        }
        CACHE_STAMP_FLAG | ((self.0 >> LANE_SHIFT) as u32 & 0xFF) << 6 | field & 63
    }

    /// The 48-bit address.
    pub const fn address(self) -> u64 {
        self.0 & ADDRESS_MASK
    }

    /// The address of byte `offset` of the object.
    #[inline]
    pub const fn translate(self, offset: u64) -> u64 {
        let address = self.address();
        if self.kind_field() != HandleKind::Arranged as u32 {
            return address.wrapping_add(offset);
        }
        // t is 12..=19 for any bit pattern, so t + 5 < 64.
        let t = self.tile_log2();
        let rows = (offset >> t) << (t + 5);
        address
            .wrapping_add(rows)
            .wrapping_add(offset & ((1 << t) - 1))
    }

    /// The chunk an arranged handle belongs to: `address - slot(lane) * tile`.
    pub fn chunk_base(self, order: SlotOrder) -> Result<u64, LayoutError> {
        if self.kind() != HandleKind::Arranged {
            return Err(LayoutError::NotArranged(self.0));
        }
        let t = self.tile_log2();
        if t > MAX_TILE_LOG2 {
            return Err(LayoutError::BadTile(t));
        }
        self.address()
            .checked_sub(u64::from(order.slot_of(self.lane())) << t)
            .ok_or(LayoutError::BadArrangedAddress(self.0))
    }
}

/// How the lanes' objects are laid out in a portion or large chunk (small chunks are always
/// packed in lane order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arrangement {
    /// Tiled: tile `k` of lane `l` at `chunk + (k * 32 + slot(l)) * tile`.
    Arranged(SlotOrder),
    /// Thread-contiguous: lane `l`'s object at `chunk + l * lane_span` (today's allocators).
    Contiguous,
}

/// Each lane's object offset in a chunk of `geometry` laid out as `arrangement` (lanes that asked
/// 0 get the offset they would have had; their handles are null). Reads only the geometry's class,
/// tile and lane span. Arranged: lane `l`'s tile 0 in slot `slot(l)` of tile row 0; contiguous:
/// `l * lane_span`; small chunks: packed in lane order by 16-byte rounded sizes.
pub fn lane_offsets(
    geometry: &Geometry,
    sizes: &[u64; WARP_LANES],
    arrangement: Arrangement,
) -> [u64; WARP_LANES] {
    let mut offsets = [0u64; WARP_LANES];
    // The three placements are separate loops so each stays simple.
    match arrangement {
        Arrangement::Arranged(order) if geometry.is_arranged() => {
            // A tile past the field's range is refused when handles are built; wrapping keeps
            // this total for any geometry.
            let tile_log2 = geometry.tile_log2 % 64;
            for (offset, &slot) in offsets.iter_mut().zip(order.slots()) {
                *offset = u64::from(slot) << tile_log2;
            }
        }
        _ if geometry.is_arranged() => {
            let mut next = 0u64;
            for offset in offsets.iter_mut() {
                *offset = next;
                next = next.wrapping_add(geometry.lane_span);
            }
        }
        _ => return small_offsets(sizes),
    }
    offsets
}

/// Every lane's handle for a chunk at `chunk_base`, laid out as `arrangement` says, lane `l`
/// carrying `generations[l]`. Lanes that asked 0 bytes get [`Handle::NULL`]. Reads only the
/// geometry's class, tile and lane span. The tile is checked once and each address with one
/// compare, so a whole warp's handles cost little more than the arithmetic.
pub fn lane_handles(
    geometry: &Geometry,
    chunk_base: u64,
    sizes: &[u64; WARP_LANES],
    arrangement: Arrangement,
    generations: &[u8; WARP_LANES],
) -> Result<[Handle; WARP_LANES], LayoutError> {
    let offsets = lane_offsets(geometry, sizes, arrangement);
    let mut handles = [Handle::NULL; WARP_LANES];
    handles_at(
        geometry,
        chunk_base,
        &offsets,
        sizes,
        arrangement,
        generations,
        &mut handles,
    )?;
    Ok(handles)
}

/// [`lane_handles`] into `handles`, with the lanes' offsets already computed by
/// [`lane_offsets`] for the same geometry, sizes and arrangement (the host computes them once
/// for the generations too, and writes the handles straight into its chunk record). On `Err`
/// what `handles` holds is unspecified.
pub fn handles_at(
    geometry: &Geometry,
    chunk_base: u64,
    offsets: &[u64; WARP_LANES],
    sizes: &[u64; WARP_LANES],
    arrangement: Arrangement,
    generations: &[u8; WARP_LANES],
    handles: &mut [Handle; WARP_LANES],
) -> Result<(), LayoutError> {
    let arranged = matches!(arrangement, Arrangement::Arranged(_)) && geometry.is_arranged();
    let tile_log2 = geometry.tile_log2;
    if arranged && !(MIN_TILE_LOG2..=MAX_TILE_LOG2).contains(&tile_log2) {
        return Err(LayoutError::BadTile(tile_log2));
    }
    let high_bits = if arranged {
        (HandleKind::Arranged as u64) << KIND_SHIFT
            | u64::from(tile_log2 - MIN_TILE_LOG2) << TILE_SHIFT
    } else {
        0
    };
    // Branch-free per lane (lanes asking 0 are common and unpredictable): a lane that asked 0
    // is masked to NULL. An address is too wide when it has a bit above the address field, so
    // one OR over the live lanes checks them all.
    let mut any_high = 0u64;
    for lane in 0..WARP_LANES {
        let live = 0u64.wrapping_sub(u64::from(sizes[lane] != 0));
        let address = chunk_base.wrapping_add(offsets[lane]);
        let generation = u64::from(generations[lane] % GENERATIONS);
        // The base too: an address that wrapped past 2^64 must not pass as narrow.
        any_high |= (address | chunk_base) & live;
        handles[lane] = Handle(
            (high_bits | (lane as u64) << LANE_SHIFT | generation << GENERATION_SHIFT | address)
                & live,
        );
    }
    if any_high > ADDRESS_MASK {
        let widest = (0..WARP_LANES)
            .filter(|&lane| sizes[lane] != 0)
            .map(|lane| chunk_base.wrapping_add(offsets[lane]))
            .max()
            .unwrap_or(0);
        return Err(LayoutError::AddressTooWide(widest));
    }
    Ok(())
}

/// Thread-contiguous handles: plain, lane `l` at `chunk_base + l * lane_span` (small chunks:
/// packed in lane order, as for [`warp_handles`]).
pub fn contiguous_handles(
    geometry: &Geometry,
    chunk_base: u64,
    sizes: &[u64; WARP_LANES],
) -> Result<[Handle; WARP_LANES], LayoutError> {
    lane_handles(
        geometry,
        chunk_base,
        sizes,
        Arrangement::Contiguous,
        &[0; WARP_LANES],
    )
}

/// Every lane's handle for a chunk at `chunk_base` with `geometry`, given the request's sizes.
/// Lanes that asked 0 bytes get [`Handle::NULL`].
pub fn warp_handles(
    geometry: &Geometry,
    chunk_base: u64,
    sizes: &[u64; WARP_LANES],
    order: SlotOrder,
) -> Result<[Handle; WARP_LANES], LayoutError> {
    lane_handles(
        geometry,
        chunk_base,
        sizes,
        Arrangement::Arranged(order),
        &[0; WARP_LANES],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_hex_as_the_messages_do() {
        assert_eq!(
            format!("{:?}", Handle(0x7fff_1234_5000)),
            "Handle(0x7fff12345000)"
        );
        assert_eq!(format!("{:?}", [Handle::NULL]), "[Handle(0x0)]");
    }

    #[test]
    fn fields_round_trip() {
        let h = Handle::arranged(0x7fff_1234_5000, 15, 31).unwrap();
        assert_eq!(h.kind(), HandleKind::Arranged);
        assert_eq!(
            (h.tile_log2(), h.lane(), h.address()),
            (15, 31, 0x7fff_1234_5000)
        );
        assert_eq!(h.generation(), 0);
        let g = h.with_generation(133);
        assert_eq!(
            (g.generation(), g.address(), g.lane(), g.tile_log2()),
            (5, h.address(), 31, 15)
        );
        assert_eq!(
            g.translate(70000),
            h.translate(70000),
            "the generation never moves an address"
        );
        let p = Handle::plain(0xdead_beef, 4).unwrap();
        assert_eq!(
            (p.kind(), p.lane(), p.address()),
            (HandleKind::Plain, 4, 0xdead_beef)
        );
    }

    #[test]
    fn encode_rejects_what_does_not_fit() {
        assert_eq!(
            Handle::plain(1 << 48, 0),
            Err(LayoutError::AddressTooWide(1 << 48))
        );
        assert_eq!(Handle::plain(0, 32), Err(LayoutError::LaneOutOfRange(32)));
        assert_eq!(Handle::arranged(0, 11, 0), Err(LayoutError::BadTile(11)));
        assert_eq!(Handle::arranged(0, 17, 0), Err(LayoutError::BadTile(17)));
        assert_eq!(Handle(1 << 63).kind(), HandleKind::Arranged);
        assert_eq!(Handle(u64::MAX >> 1).kind(), HandleKind::Plain);
        assert_eq!(
            Handle::plain(64, 1).unwrap().chunk_base(SlotOrder::Pattern),
            Err(LayoutError::NotArranged(Handle::plain(64, 1).unwrap().0))
        );
        let below = Handle::arranged(4096, 12, 3).unwrap(); // lane 3 sits in slot 17
        assert!(matches!(
            below.chunk_base(SlotOrder::Pattern),
            Err(LayoutError::BadArrangedAddress(_))
        ));
    }

    #[test]
    fn arranged_translation_walks_tile_rows() {
        // Lane 4 (slot 3) with 64 KiB tiles in a chunk at 0x4000_0000.
        let base = 0x4000_0000u64;
        let h = Handle::arranged(base + 3 * 65536, 16, 4).unwrap();
        assert_eq!(h.translate(0), base + 3 * 65536);
        assert_eq!(h.translate(65535), base + 3 * 65536 + 65535);
        assert_eq!(h.translate(65536), base + (2 << 20) + 3 * 65536);
        assert_eq!(
            h.translate(5 * 65536 + 7),
            base + 5 * (2 << 20) + 3 * 65536 + 7
        );
        assert_eq!(h.chunk_base(SlotOrder::Pattern), Ok(base));
    }

    #[test]
    fn lane_handles_refuse_live_addresses_past_the_field_and_only_those() {
        let sizes = [16u64 << 10; WARP_LANES];
        let geometry = crate::Geometry::of(&sizes, &crate::GeometryConfig::default())
            .unwrap()
            .unwrap();
        let generations = [5u8; WARP_LANES];
        let contiguous = Arrangement::Contiguous;
        // The last lane's object starts past the 48-bit field.
        let near_top = (1u64 << ADDRESS_BITS) - 31 * geometry.lane_span + 4096;
        let widest = near_top + 31 * geometry.lane_span;
        assert_eq!(
            lane_handles(&geometry, near_top, &sizes, contiguous, &generations),
            Err(LayoutError::AddressTooWide(widest))
        );
        // The same chunk with that lane asking nothing is fine: its handle is NULL.
        let mut last_idle = sizes;
        last_idle[31] = 0;
        let handles =
            lane_handles(&geometry, near_top, &last_idle, contiguous, &generations).unwrap();
        assert_eq!(handles[31], Handle::NULL);
        assert_eq!(handles[30].address(), near_top + 30 * geometry.lane_span);
        assert_eq!(handles[30].generation(), 5);
        // A base so high that the lanes' addresses wrap past 2^64 is refused, not wrapped.
        assert!(matches!(
            lane_handles(&geometry, u64::MAX - 4095, &sizes, contiguous, &generations),
            Err(LayoutError::AddressTooWide(_))
        ));
    }
}
