//! Generations of lane-object addresses: a counter per place an object can start at (16 B
//! granules of the small space, 4 KiB pages elsewhere, since portion and large objects start on
//! tiles of 4 KiB or more). Each new object at an address gets the next generation of that
//! address, cycling through 1..=127, so a stale handle can pass for a live one only after 127 new
//! objects started at its exact address; 0 means no object ever started there, which tells a
//! double free of a gone chunk from a foreign pointer.

use translator::GENERATIONS;

use crate::regions::{ArenaRegions, Region};

/// Object starts in the small space are 16-byte aligned.
const SMALL_GRANULE: u64 = 16;
/// Portion and large objects start on tiles of at least 4 KiB.
const TILE_GRANULE: u64 = 4096;

/// Per-address generation counters over the arena.
#[derive(Clone, Debug)]
pub struct Generations {
    regions: ArenaRegions,
    small: Vec<u8>,
    rest: Vec<u8>,
}

fn bump(counters: &mut [u8], index: u64) -> u8 {
    let counter = &mut counters[index as usize];
    *counter = if *counter >= GENERATIONS - 1 {
        1
    } else {
        *counter + 1
    };
    *counter
}

impl Generations {
    /// Counters for every place an object can start at in `regions`.
    pub fn new(regions: ArenaRegions) -> Self {
        Self {
            regions,
            small: vec![0; (regions.bytes(Region::Small) / SMALL_GRANULE) as usize],
            rest: vec![0; (regions.bytes(Region::Rest) / TILE_GRANULE) as usize],
        }
    }

    /// The counters and granule of `region`.
    fn counters(&mut self, region: Region) -> (&mut [u8], u64) {
        match region {
            Region::Small => (&mut self.small, SMALL_GRANULE),
            Region::Rest => (&mut self.rest, TILE_GRANULE),
        }
    }

    /// Whether an object ever started at `address`.
    pub fn seen(&self, address: u64) -> bool {
        let Some((region, offset)) = self.regions.locate(address) else {
            return false;
        };
        let (counters, granule) = match region {
            Region::Small => (&self.small, SMALL_GRANULE),
            Region::Rest => (&self.rest, TILE_GRANULE),
        };
        offset % granule == 0 && counters[(offset / granule) as usize] != 0
    }

    /// The next generation of the object starting at `address` (inside the arena, aligned as its
    /// region requires).
    pub fn next(&mut self, address: u64) -> u8 {
        let (region, offset) = self
            .regions
            .locate(address)
            .expect("objects start inside the arena");
        let (counters, granule) = self.counters(region);
        bump(counters, offset / granule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_counts_on_its_own() {
        let mut g = Generations::new(ArenaRegions::new(1 << 30, 4096, 1 << 20));
        let a = (1 << 30) + 32;
        let b = (1 << 30) + 48;
        let c = (1 << 30) + 8192;
        assert!(!g.seen(a));
        assert_eq!((g.next(a), g.next(a), g.next(b), g.next(c)), (1, 2, 1, 1));
        for expect in (3..128).chain([1, 2]) {
            assert_eq!(g.next(a), expect);
        }
        assert!(g.seen(a) && g.seen(c) && !g.seen(a + 16 * 5) && !g.seen(a + 8) && !g.seen(c + 64));
        assert_eq!(g.next(b), 2, "neighbours are independent");
        assert_eq!(g.next(c + 4096), 1);
        assert_eq!(g.next(c), 2);
    }
}
