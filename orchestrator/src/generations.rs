//! Generations of lane objects: a counter per 256-byte unit of the small space's blocks and per
//! 4 KiB page elsewhere (portion and large objects start on tiles of 4 KiB or more, so there a page holds
//! at most one object start). Each new chunk advances, once, the counter of every unit or page
//! where one of its objects starts, cycling through 1..=63, and its objects there take that
//! generation. So a stale handle can pass for a live one only after 63 chunks started objects in
//! its unit (or page) and the last one put an object for the same lane at its exact address; 0
//! means no object ever started there, which tells a double free of a gone chunk from a foreign
//! pointer.
//!
//! One sequence per address across both regions: a block moves between the small space and the
//! rest as the arena is used, and a page start is also the start of a unit. Each stamp at a page
//! start writes the new generation into both tables (`rest[page] == small[16 * page]` always), so
//! the next object there, in either region, takes the generation after it: a stale handle of the
//! block's small-space life never matches a live object placed at the same address in its later
//! life as a large or portion block, or the other way round, within 63 stamps.
//!
//! Why this granule: a counter per 16-byte object address counts only the objects started at
//! that exact address, but a small chunk's lanes then hit a cache line each (objects of a few
//! hundred bytes put their counters a line apart), and those lines were the allocation's main
//! cost. A counter per unit puts a whole small chunk's counters in a line or two. A counter
//! advanced by every chunk that merely covered the place, or counted per chunk start, can come
//! back to a stale generation much sooner; the GPU once caught a stale free that way with 3-bit
//! generations and no quarantine (docs/mailbox.md).

use translator::{CACHE_GENERATIONS_START, WARP_LANES};

use crate::regions::{ArenaRegions, Region};
use crate::resolver::set_lanes;

/// Object starts in the small space are 16-byte aligned.
const SMALL_GRANULE: u64 = 16;
/// The small space counts per unit of its tree.
const SMALL_COUNTED: u64 = translator::SMALL_UNIT_BYTES;
/// Portion and large objects start on tiles of at least 4 KiB.
const TILE_GRANULE: u64 = 4096;

/// Generation counters over the arena, per unit and per page of the whole arena. A block that
/// leaves the small space keeps its unit counters (and its page counters while it is small), so
/// both go on from where they were when it comes back.
#[derive(Clone, Debug)]
pub struct Generations {
    regions: ArenaRegions,
    /// Per 256-byte unit (written only in blocks that were in the small space).
    small: Vec<u8>,
    /// Per 4 KiB page of the arena.
    rest: Vec<u8>,
    /// A bit per 16-byte granule of the small space where an object once started exactly (unit
    /// counters cannot tell a start from the place beside it; pages need no such bit, as a
    /// tile object starts on its page).
    small_starts: Vec<u64>,
}

/// Units of the small space per page.
const UNITS_PER_PAGE: usize = (TILE_GRANULE / SMALL_COUNTED) as usize;

/// The next generation after `counter`: 1..=63, cycling (64.. are the device caches').
fn bumped(counter: u8) -> u8 {
    let next = counter.wrapping_add(1);
    if next >= CACHE_GENERATIONS_START {
        1
    } else {
        next
    }
}

impl Generations {
    /// Counters for every place an object can start at in `regions`.
    pub fn new(regions: ArenaRegions) -> Self {
        Self {
            small: vec![0; (regions.bytes() / SMALL_COUNTED) as usize],
            rest: vec![0; (regions.bytes() / TILE_GRANULE) as usize],
            small_starts: vec![0; (regions.bytes() / SMALL_GRANULE).div_ceil(64) as usize],
            regions,
        }
    }

    /// Put `block` in the small space or back in the rest.
    pub fn set_small(&mut self, block: usize, small: bool) {
        self.regions.set_small(block, small);
    }

    /// Where the counters' regions stand.
    pub fn regions(&self) -> &ArenaRegions {
        &self.regions
    }

    /// Whether `address` is a place an object can start at (16-byte aligned in the small space,
    /// a page elsewhere) in a unit or page where some object once started.
    /// A block that was in the small space before counts its unit counters too, so a double
    /// free of a small object whose block has left the small space is still told apart.
    pub fn seen(&self, address: u64) -> bool {
        let Some((region, offset)) = self.regions.locate(address) else {
            return false;
        };
        let (counters, aligned, counted) = match region {
            Region::Small => (&self.small, SMALL_GRANULE, SMALL_COUNTED),
            Region::Rest => (&self.rest, TILE_GRANULE, TILE_GRANULE),
        };
        let here = offset.is_multiple_of(aligned) && counters[(offset / counted) as usize] != 0;
        here || region == Region::Rest
            && offset.is_multiple_of(SMALL_GRANULE)
            && self.small[(offset / SMALL_COUNTED) as usize] != 0
    }

    /// Whether an object once started exactly at `address`: a granule whose start bit is set
    /// (an object of a small-space life of its block, whichever region the block is in now), or
    /// outside the small space a page whose counter moved (tile objects start on pages).
    pub fn start_seen(&self, address: u64) -> bool {
        let Some((region, offset)) = self.regions.locate(address) else {
            return false;
        };
        let granule = (offset / SMALL_GRANULE) as usize;
        let small_start = offset.is_multiple_of(SMALL_GRANULE)
            && self.small_starts[granule / 64] >> (granule % 64) & 1 == 1;
        small_start
            || region == Region::Rest
                && offset.is_multiple_of(TILE_GRANULE)
                && self.rest[(offset / TILE_GRANULE) as usize] != 0
    }

    /// Stamp one new chunk at `base` (every object in one region) whose lanes in `live` have
    /// objects at `base + offsets[lane]`: advance the counter of each unit or page where an
    /// object starts, once, and return each lane's generation (0 for lanes not in `live`).
    /// One region lookup serves every lane.
    pub fn stamp(&mut self, base: u64, offsets: &[u64; WARP_LANES], live: u32) -> [u8; WARP_LANES] {
        let mut generations = [0u8; WARP_LANES];
        if live == 0 {
            return generations;
        }
        let (region, base_offset) = self
            .regions
            .locate(base)
            .expect("chunks start inside the arena");
        let counted = match region {
            Region::Small => SMALL_COUNTED,
            Region::Rest => TILE_GRANULE,
        };
        let shift = counted.trailing_zeros();
        // A small chunk packs its lanes in lane order, so lanes sharing a unit come one after
        // another; elsewhere every lane has its own page. Advancing a counter only when the
        // place differs from the previous lane's therefore advances each place once.
        let mut previous = usize::MAX;
        let mut generation = 0u8;
        for lane in set_lanes(live) {
            let offset = base_offset + offsets[lane];
            let place = (offset >> shift) as usize;
            if place != previous {
                generation = self.advance(region, place);
                previous = place;
            }
            if region == Region::Small {
                let granule = (offset / SMALL_GRANULE) as usize;
                self.small_starts[granule / 64] |= 1 << (granule % 64);
            }
            generations[lane] = generation;
        }
        generations
    }

    /// Advance the counter of `place` (a unit or a page, by `region`) and return it; at a page
    /// start both tables take the new value, so the address keeps one sequence.
    fn advance(&mut self, region: Region, place: usize) -> u8 {
        match region {
            Region::Small => {
                let next = bumped(self.small[place]);
                self.small[place] = next;
                if place.is_multiple_of(UNITS_PER_PAGE) {
                    self.rest[place / UNITS_PER_PAGE] = next;
                }
                next
            }
            Region::Rest => {
                let next = bumped(self.rest[place]);
                self.rest[place] = next;
                self.small[place * UNITS_PER_PAGE] = next;
                next
            }
        }
    }

    /// Whether the two tables agree at every page start (see the module docs).
    pub fn check(&self) -> Result<(), String> {
        match (0..self.rest.len()).find(|&p| self.rest[p] != self.small[p * UNITS_PER_PAGE]) {
            None => Ok(()),
            Some(page) => Err(format!(
                "page {page}: generation {} as a page, {} as a unit",
                self.rest[page],
                self.small[page * UNITS_PER_PAGE]
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 1 << 30;

    /// Two blocks: the first in the small space, the second in the rest.
    fn generations() -> Generations {
        let mut g = Generations::new(ArenaRegions::new(BASE, 4 << 20));
        g.set_small(0, true);
        g
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
    fn a_chunk_advances_each_small_unit_it_starts_objects_in_once() {
        let mut g = generations();
        let (a, b) = (BASE + 32, BASE + 48);
        assert!(!g.seen(a));
        // Two objects in one unit share its next generation.
        assert_eq!(stamp(&mut g, &[(0, a), (1, b)]), [1, 1]);
        assert_eq!(stamp(&mut g, &[(0, a)]), [2]);
        // A chunk with objects in two units: each unit advances once.
        assert_eq!(
            stamp(&mut g, &[(3, b), (4, BASE + 240), (5, BASE + 256)]),
            [3, 3, 1]
        );
        assert!(g.seen(a) && g.seen(b) && g.seen(BASE + 256));
        assert!(
            g.seen(BASE + 16 * 5),
            "a granule of a unit where objects started"
        );
        assert!(!g.seen(a + 8), "not a granule start");
        assert!(!g.seen(BASE + 512), "no object started in that unit");
        // Counters cycle through 1..=63 (64.. are the device caches').
        for expect in (4..64).chain([1, 2]) {
            assert_eq!(stamp(&mut g, &[(0, a)]), [expect]);
        }
        assert_eq!(
            stamp(&mut g, &[(0, BASE + 256)]),
            [2],
            "units are independent"
        );
    }

    #[test]
    fn a_unit_covered_without_an_object_start_keeps_its_generation() {
        let mut g = generations();
        // One lane's object spans units 0..2 from the start of unit 0; unit 1 holds no start.
        assert_eq!(stamp(&mut g, &[(0, BASE), (1, BASE + 512)]), [1, 1]);
        assert!(!g.seen(BASE + 256));
        assert_eq!(stamp(&mut g, &[(0, BASE + 256)]), [1]);
    }

    #[test]
    fn exact_small_starts_are_remembered() {
        let mut g = generations();
        stamp(&mut g, &[(0, BASE + 32), (1, BASE + 304)]);
        assert!(g.start_seen(BASE + 32) && g.start_seen(BASE + 304));
        assert!(!g.start_seen(BASE + 48), "beside a start, in the same unit");
        assert!(!g.start_seen(BASE + 40), "not a granule");
        g.set_small(0, false);
        assert!(
            g.start_seen(BASE + 32),
            "the block's small-space life is remembered after it leaves"
        );
        assert!(!g.start_seen(BASE + 48) && !g.start_seen(BASE + 4096));
        stamp(&mut g, &[(0, BASE + 4096)]);
        assert!(
            g.start_seen(BASE + 4096),
            "outside the small space, pages count too"
        );
    }

    #[test]
    fn each_tile_counts_on_its_own() {
        let mut g = generations();
        let rest = BASE + (2 << 20);
        let lanes = [(0, rest), (1, rest + 4096), (2, rest + 8192)];
        assert_eq!(stamp(&mut g, &lanes), [1, 1, 1]);
        assert_eq!(stamp(&mut g, &lanes[..1]), [2]);
        assert_eq!(stamp(&mut g, &lanes), [3, 2, 2]);
        assert!(g.seen(rest + 8192) && !g.seen(rest + 12288) && !g.seen(rest + 256 + 64));
        // The page start's unit is where the tile's object started: as in the small space, a
        // granule of that unit counts as a place where an object once started.
        assert!(g.seen(rest + 64));
    }

    #[test]
    fn a_block_that_leaves_the_small_space_keeps_its_history() {
        let mut g = generations();
        let a = BASE + 64;
        assert_eq!(stamp(&mut g, &[(0, a)]), [1]);
        g.set_small(0, false);
        assert!(
            g.seen(a),
            "a double free of a small object there is still one"
        );
        assert!(!g.seen(BASE + 4096), "no page object started there");
        assert_eq!(stamp(&mut g, &[(0, BASE + 4096)]), [1], "a page of its own");
        g.set_small(0, true);
        assert_eq!(stamp(&mut g, &[(0, a)]), [2], "the unit counter goes on");
        g.check().unwrap();
    }

    /// A stale handle of a block's small-space life never matches the next object at its address
    /// in the block's life as a portion or large block, nor the other way round.
    #[test]
    fn an_address_keeps_one_sequence_across_regions() {
        let mut g = generations();
        assert_eq!(
            stamp(&mut g, &[(0, BASE)]),
            [1],
            "a small object at a page start"
        );
        g.set_small(0, false);
        assert_eq!(
            stamp(&mut g, &[(0, BASE)]),
            [2],
            "a large object there next"
        );
        assert!(g.start_seen(BASE));
        g.set_small(0, true);
        assert_eq!(stamp(&mut g, &[(0, BASE), (1, BASE + 16)]), [3, 3]);
        g.set_small(0, false);
        // 60 more lives as a large block, then back: still no repeat within 63 stamps.
        for expect in 4..64 {
            assert_eq!(stamp(&mut g, &[(0, BASE)]), [expect]);
        }
        g.set_small(0, true);
        assert_eq!(
            stamp(&mut g, &[(0, BASE)]),
            [1],
            "the 63-stamp cycle, as within a region"
        );
        g.check().unwrap();
    }
}
