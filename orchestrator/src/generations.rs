//! Generations of lane-object addresses: a counter per place an object can start at (16 B
//! granules of the small space, 4 KiB pages elsewhere, since portion and large objects start on
//! tiles of 4 KiB or more). Each new object at an address gets the next generation of that
//! address, cycling through 1..=127, so a stale handle can pass for a live one only after 127 new
//! objects started at its exact address; 0 means no object ever started there, which tells a
//! double free of a gone chunk from a foreign pointer.
//!
//! Counting per object address matters: a counter shared by a wider place (per chunk start, or
//! per 256-byte unit) advances with allocations that never start an object at the stale handle's
//! address, so it can come back to the stale generation much sooner; the GPU once caught a
//! stale free that way (docs/mailbox.md). The cost is a table byte per 16 bytes of small space,
//! and about a cache line per lane of a small chunk.

use translator::{GENERATIONS, WARP_LANES};

use crate::regions::{ArenaRegions, Region};
use crate::resolver::set_lanes;

/// Object starts in the small space are 16-byte aligned.
const SMALL_GRANULE: u64 = 16;
/// Portion and large objects start on tiles of at least 4 KiB.
const TILE_GRANULE: u64 = 4096;

/// Generation counters over the arena.
#[derive(Clone, Debug)]
pub struct Generations {
    regions: ArenaRegions,
    /// Per 16-byte granule of the small space.
    small: Vec<u8>,
    /// Per 4 KiB page of the rest.
    rest: Vec<u8>,
}

/// The next generation after `counter`: 1..=127, cycling (written to compile without a branch).
fn bumped(counter: u8) -> u8 {
    let next = counter.wrapping_add(1);
    if next >= GENERATIONS { 1 } else { next }
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

    /// Whether an object ever started at `address`.
    pub fn seen(&self, address: u64) -> bool {
        let Some((region, offset)) = self.regions.locate(address) else {
            return false;
        };
        let (counters, granule) = match region {
            Region::Small => (&self.small, SMALL_GRANULE),
            Region::Rest => (&self.rest, TILE_GRANULE),
        };
        offset.is_multiple_of(granule) && counters[(offset / granule) as usize] != 0
    }

    /// Give the object of each lane in `live`, at `base + offsets[lane]` (one new chunk: every
    /// object in one region), the next generation of its address; each lane's generation, 0 for
    /// lanes not in `live`. One region lookup serves every lane.
    pub fn stamp(&mut self, base: u64, offsets: &[u64; WARP_LANES], live: u32) -> [u8; WARP_LANES] {
        let mut generations = [0u8; WARP_LANES];
        if live == 0 {
            return generations;
        }
        let (region, base_offset) = self
            .regions
            .locate(base)
            .expect("chunks start inside the arena");
        let (counters, granule) = match region {
            Region::Small => (&mut self.small, SMALL_GRANULE),
            Region::Rest => (&mut self.rest, TILE_GRANULE),
        };
        let shift = granule.trailing_zeros();
        for lane in set_lanes(live) {
            let counter = &mut counters[((base_offset + offsets[lane]) >> shift) as usize];
            *counter = bumped(*counter);
            generations[lane] = *counter;
        }
        generations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 1 << 30;

    fn generations() -> Generations {
        Generations::new(ArenaRegions::new(BASE, 4096, 1 << 20))
    }

    /// Stamp one chunk with an object per `(lane, address)`; the generations, in that order.
    fn stamp(g: &mut Generations, objects: &[(u32, u64)]) -> Vec<u8> {
        let base = objects.iter().map(|o| o.1).min().unwrap();
        let mut offsets = [0; WARP_LANES];
        let mut live = 0u32;
        for &(lane, address) in objects {
            offsets[lane as usize] = address - base;
            live |= 1 << lane;
        }
        let generations = g.stamp(base, &offsets, live);
        for (lane, &generation) in generations.iter().enumerate() {
            assert_eq!(
                generation == 0,
                live >> lane & 1 == 0,
                "only given lanes get generations"
            );
        }
        objects
            .iter()
            .map(|&(lane, _)| generations[lane as usize])
            .collect()
    }

    #[test]
    fn each_small_address_counts_on_its_own() {
        let mut g = generations();
        let (a, b) = (BASE + 32, BASE + 48);
        assert!(!g.seen(a));
        assert_eq!(stamp(&mut g, &[(0, a), (1, b)]), [1, 1]);
        assert_eq!(stamp(&mut g, &[(0, a)]), [2]);
        assert_eq!(stamp(&mut g, &[(3, b), (5, BASE + 256)]), [2, 1]);
        assert!(g.seen(a) && g.seen(b) && g.seen(BASE + 256));
        assert!(!g.seen(BASE + 16 * 5), "no object started there");
        assert!(!g.seen(a + 8), "not a granule start");
        // Counters cycle through 1..=127.
        for expect in (3..128).chain([1, 2]) {
            assert_eq!(stamp(&mut g, &[(0, a)]), [expect]);
        }
        assert_eq!(stamp(&mut g, &[(0, b)]), [3], "neighbours are independent");
    }

    #[test]
    fn each_tile_counts_on_its_own() {
        let mut g = generations();
        let rest = BASE + 4096;
        let lanes = [(0, rest), (1, rest + 4096), (2, rest + 8192)];
        assert_eq!(stamp(&mut g, &lanes), [1, 1, 1]);
        assert_eq!(stamp(&mut g, &lanes[..1]), [2]);
        assert_eq!(stamp(&mut g, &lanes), [3, 2, 2]);
        assert!(g.seen(rest + 8192) && !g.seen(rest + 12288) && !g.seen(rest + 64));
    }
}
