//! The two regions of an arena: the small space (256 B units) and the rest (VABlocks for portion
//! and large chunks). The small space is a set of whole VABlocks that changes as the arena is
//! used: a block joins it when small chunks need room and leaves it when it is empty and other
//! chunks need room. Structures that index the arena by address, the chunk owners and the
//! generations, locate an address here and pick their own granule per region.
//!
//! Invariants: a block is in the small space or in the rest, never both. Offsets are from the
//! arena's start in both regions, so a structure keeps one table per granule over the whole
//! arena: the entries of a block that leaves the small space keep their values (its history)
//! until it joins again, and a small chunk may cross from one small block into the next. The
//! small granule's tables are zeroed allocations the operating system commits page by page as
//! they are written, so blocks never in the small space cost address space, not memory.

use ortree::VABLOCK_BYTES;

/// Which region an address lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The small space.
    Small,
    /// Everything else.
    Rest,
}

/// An arena's extent and which of its blocks are in the small space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaRegions {
    base: u64,
    end: u64,
    /// Per VABlock: whether it is in the small space.
    small: Vec<bool>,
}

impl ArenaRegions {
    /// An arena at `base` (2 MiB aligned) of `bytes` bytes, every block in the rest.
    pub fn new(base: u64, bytes: u64) -> Self {
        Self {
            base,
            end: base + bytes,
            small: vec![false; bytes.div_ceil(VABLOCK_BYTES) as usize],
        }
    }

    /// Put `block` in the small space, or back in the rest.
    pub fn set_small(&mut self, block: usize, small: bool) {
        self.small[block] = small;
    }

    /// Whether `block` is in the small space.
    pub fn is_small(&self, block: usize) -> bool {
        self.small[block]
    }

    /// Bytes of the arena: the extent every table covers.
    pub fn bytes(&self) -> u64 {
        self.end - self.base
    }

    /// The region of `address` and its offset from the arena's start; `None` outside the arena.
    #[inline]
    pub fn locate(&self, address: u64) -> Option<(Region, u64)> {
        if address < self.base || address >= self.end {
            return None;
        }
        let offset = address - self.base;
        let region = if self.small[(offset / VABLOCK_BYTES) as usize] {
            Region::Small
        } else {
            Region::Rest
        };
        Some((region, offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 1 << 30;
    const B: u64 = VABLOCK_BYTES;

    #[test]
    fn addresses_fall_in_their_region_as_blocks_join_and_leave() {
        let mut r = ArenaRegions::new(BASE, 4 * B);
        assert_eq!(r.locate(BASE - 1), None);
        assert_eq!(r.locate(BASE + 4 * B), None);
        assert_eq!(r.locate(BASE + B + 5), Some((Region::Rest, B + 5)));
        r.set_small(2, true);
        assert!(r.is_small(2) && !r.is_small(1));
        assert_eq!(r.locate(BASE + 2 * B + 7), Some((Region::Small, 2 * B + 7)));
        assert_eq!(r.locate(BASE + 3 * B), Some((Region::Rest, 3 * B)));
        r.set_small(2, false);
        assert_eq!(r.locate(BASE + 2 * B + 7), Some((Region::Rest, 2 * B + 7)));
        assert_eq!(r.bytes(), 4 * B);
    }
}
