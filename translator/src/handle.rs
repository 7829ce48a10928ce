//! The 64-bit handle a lane gets back, and address translation.
//!
//! ```text
//! 63..60 kind       0 = plain (identity), 1 = arranged
//! 59..56 tile       tile_log2 - 12 (0..=4: 4 KiB..=64 KiB)
//! 55..51 lane       owner lane
//! 50..48 reserved   0
//! 47..0  address    first byte of the lane's tile 0 (plain: the object's first byte)
//! ```
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

const KIND_SHIFT: u32 = 60;
const TILE_SHIFT: u32 = 56;
const LANE_SHIFT: u32 = 51;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;

/// What a handle's address means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HandleKind {
    /// The object is contiguous at the address.
    Plain = 0,
    /// The object is tiled across the rows of a warp chunk.
    Arranged = 1,
}

/// A lane's handle to its allocation. `Handle::NULL` (0) is "nothing".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Pod, Zeroable)]
#[repr(transparent)]
pub struct Handle(pub u64);

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

    /// The kind field, raw (0..=15).
    pub const fn kind_field(self) -> u32 {
        (self.0 >> KIND_SHIFT) as u32
    }

    /// The kind, if the field holds a known one.
    pub fn kind(self) -> Result<HandleKind, LayoutError> {
        match self.kind_field() {
            0 => Ok(HandleKind::Plain),
            1 => Ok(HandleKind::Arranged),
            _ => Err(LayoutError::UnknownKind(self.0)),
        }
    }

    /// `tile_log2` (field + 12); meaningful for arranged handles.
    pub const fn tile_log2(self) -> u32 {
        ((self.0 >> TILE_SHIFT) & 0xF) as u32 + MIN_TILE_LOG2
    }

    /// The owner lane.
    pub const fn lane(self) -> u32 {
        ((self.0 >> LANE_SHIFT) & 0x1F) as u32
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
        let t = self.tile_log2();
        let rows = (offset >> t) << (t + 5);
        address
            .wrapping_add(rows)
            .wrapping_add(offset & ((1 << t) - 1))
    }

    /// The chunk an arranged handle belongs to: `address - slot(lane) * tile`.
    pub fn chunk_base(self, order: SlotOrder) -> Result<u64, LayoutError> {
        if self.kind()? != HandleKind::Arranged {
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

/// Every lane's handle for a chunk at `chunk_base` with `geometry`, given the request's sizes.
/// Lanes that asked 0 bytes get [`Handle::NULL`].
pub fn warp_handles(
    geometry: &Geometry,
    chunk_base: u64,
    sizes: &[u64; WARP_LANES],
    order: SlotOrder,
) -> Result<[Handle; WARP_LANES], LayoutError> {
    let mut handles = [Handle::NULL; WARP_LANES];
    let offsets = small_offsets(sizes);
    for lane in 0..WARP_LANES as u32 {
        if sizes[lane as usize] == 0 {
            continue;
        }
        handles[lane as usize] = if geometry.is_arranged() {
            let slot = u64::from(order.slot_of(lane));
            Handle::arranged(
                chunk_base + (slot << geometry.tile_log2),
                geometry.tile_log2,
                lane,
            )?
        } else {
            Handle::plain(chunk_base + offsets[lane as usize], lane)?
        };
    }
    Ok(handles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let h = Handle::arranged(0x7fff_1234_5000, 15, 31).unwrap();
        assert_eq!(h.kind(), Ok(HandleKind::Arranged));
        assert_eq!(
            (h.tile_log2(), h.lane(), h.address()),
            (15, 31, 0x7fff_1234_5000)
        );
        assert_eq!(h.0 >> 48 & 0x7, 0, "reserved bits stay 0");
        let p = Handle::plain(0xdead_beef, 4).unwrap();
        assert_eq!(
            (p.kind(), p.lane(), p.address()),
            (Ok(HandleKind::Plain), 4, 0xdead_beef)
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
        assert_eq!(
            Handle(5 << 60).kind(),
            Err(LayoutError::UnknownKind(5 << 60))
        );
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
}
