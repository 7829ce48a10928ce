//! Slot orders: which slot of a tile row each lane's tile takes.
//!
//! The pattern order (the paper's section V-A) puts lanes `0, 1, 2` first, then the even lanes
//! `4, 6, .., 30`, then the odd lanes `3, 5, .., 31`: slots 0..=31 hold lanes
//! `0,1,2,4,6,..,30,3,5,..,31`. The identity order puts lane `l` in slot `l`. Both are bijections
//! on 0..32; the order is a runtime-wide setting, so the host can map a handle back to its chunk.

/// How lanes map to slots in a tile row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum SlotOrder {
    /// Lanes `0,1,2,4,6,..,30,3,5,..,31` in slots 0..=31 (the default).
    #[default]
    Pattern = 0,
    /// Lane `l` in slot `l`.
    Identity = 1,
}

impl SlotOrder {
    /// The slot of `lane` (taken modulo 32).
    pub const fn slot_of(self, lane: u32) -> u32 {
        let lane = lane % 32;
        match self {
            SlotOrder::Identity => lane,
            SlotOrder::Pattern if lane < 3 => lane,
            SlotOrder::Pattern if lane.is_multiple_of(2) => lane / 2 + 1,
            SlotOrder::Pattern => lane / 2 + 16,
        }
    }

    /// The lane in `slot` (taken modulo 32): the inverse of [`SlotOrder::slot_of`].
    pub const fn lane_at(self, slot: u32) -> u32 {
        let slot = slot % 32;
        match self {
            SlotOrder::Identity => slot,
            SlotOrder::Pattern if slot < 3 => slot,
            SlotOrder::Pattern if slot < 17 => (slot - 1) * 2,
            SlotOrder::Pattern => (slot - 16) * 2 + 1,
        }
    }

    /// `slot_of` for every lane, as a table (the resolver builds 32 handles per request).
    pub const fn slots(self) -> &'static [u32; 32] {
        const fn table(order: SlotOrder) -> [u32; 32] {
            let mut slots = [0; 32];
            let mut lane = 0;
            while lane < 32 {
                slots[lane] = order.slot_of(lane as u32);
                lane += 1;
            }
            slots
        }
        const PATTERN: [u32; 32] = table(SlotOrder::Pattern);
        const IDENTITY: [u32; 32] = table(SlotOrder::Identity);
        match self {
            SlotOrder::Pattern => &PATTERN,
            SlotOrder::Identity => &IDENTITY,
        }
    }

    /// The order's number in the C++ header (`am::kSlotPattern`, `am::kSlotIdentity`).
    pub const fn code(self) -> u32 {
        self as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_order_matches_the_paper() {
        let lanes: Vec<u32> = (0..32).map(|s| SlotOrder::Pattern.lane_at(s)).collect();
        let mut want = vec![0, 1, 2];
        want.extend((4..=30).step_by(2));
        want.extend((3..=31).step_by(2));
        assert_eq!(lanes, want);
    }

    #[test]
    fn both_orders_are_bijections() {
        for order in [SlotOrder::Pattern, SlotOrder::Identity] {
            let mut seen = [false; 32];
            for lane in 0..32 {
                let slot = order.slot_of(lane);
                assert!(!seen[slot as usize]);
                seen[slot as usize] = true;
                assert_eq!(order.lane_at(slot), lane);
                assert_eq!(order.slots()[lane as usize], slot);
            }
        }
    }
}
