//! The two regions of an arena: the small space at its start (256 B units) and the rest (VABlocks
//! for portion and large chunks). Structures that index the arena by address, the chunk owners
//! and the generations, locate an address here and pick their own granule per region.

/// Which region an address lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The small space.
    Small,
    /// Everything after it.
    Rest,
}

/// An arena's extent and where its small space ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaRegions {
    base: u64,
    small_end: u64,
    end: u64,
}

impl ArenaRegions {
    /// An arena at `base` of `bytes` bytes whose first `small_bytes` are the small space.
    pub fn new(base: u64, small_bytes: u64, bytes: u64) -> Self {
        assert!(
            small_bytes <= bytes,
            "the small space lies inside the arena"
        );
        Self {
            base,
            small_end: base + small_bytes,
            end: base + bytes,
        }
    }

    /// Bytes of `region`.
    pub fn bytes(&self, region: Region) -> u64 {
        match region {
            Region::Small => self.small_end - self.base,
            Region::Rest => self.end - self.small_end,
        }
    }

    /// The region of `address` and the offset from that region's start; `None` outside the arena.
    #[inline]
    pub fn locate(&self, address: u64) -> Option<(Region, u64)> {
        if address < self.base || address >= self.end {
            None
        } else if address < self.small_end {
            Some((Region::Small, address - self.base))
        } else {
            Some((Region::Rest, address - self.small_end))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_fall_in_their_region() {
        let r = ArenaRegions::new(1000, 100, 300);
        assert_eq!(r.locate(999), None);
        assert_eq!(r.locate(1000), Some((Region::Small, 0)));
        assert_eq!(r.locate(1099), Some((Region::Small, 99)));
        assert_eq!(r.locate(1100), Some((Region::Rest, 0)));
        assert_eq!(r.locate(1299), Some((Region::Rest, 199)));
        assert_eq!(r.locate(1300), None);
        assert_eq!((r.bytes(Region::Small), r.bytes(Region::Rest)), (100, 200));
    }
}
