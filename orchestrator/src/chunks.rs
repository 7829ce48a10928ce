//! The live-chunk table: chunk records in a slab, found from any address they cover in O(1).
//!
//! Every chunk lies wholly in the small space's blocks (256 B units) or wholly in the rest of the
//! arena (64 KiB leaves: portion chunks start on leaves, large ones on VABlocks). An owner array
//! per granule over the whole arena holds, for each unit, the slot of the chunk covering it (0 =
//! none), so finding the chunk behind a handle is one array read (two in the small space, below);
//! which array an address reads depends on whether its block is in the small space now
//! ([`ChunkTable::set_small`]). In the small space a leaf that one chunk covers whole is owned
//! through the leaf's entry (which the rest's array has for every leaf, and which no rest chunk
//! uses while the block is small), so a packed chunk of MiB writes one entry per leaf plus the
//! units of its two partial leaves: a lookup there reads the leaf's entry first and the unit's
//! when it is 0. Records never move once stored: they live in pages of [`PAGE_RECORDS`], so the
//! table grows without copying what it holds (a record is a few hundred bytes; hosts that make
//! millions of chunks would otherwise copy them at every doubling).

/// A chunk's extent, as the table needs it.
pub trait Extent {
    /// First byte.
    fn base(&self) -> u64;
    /// Bytes covered.
    fn bytes(&self) -> u64;
}

use crate::regions::{ArenaRegions, Region};

/// Records per page of the slab.
pub const PAGE_RECORDS: usize = 1024;

const SMALL_UNIT: u64 = 256;
const LEAF: u64 = translator::LEAF_BYTES;

/// Live chunks of one arena.
#[derive(Clone, Debug)]
pub struct ChunkTable<T> {
    regions: ArenaRegions,
    /// Slot + 1 of the chunk covering each small unit / each leaf of the rest; 0 for none.
    small_owner: Vec<u32>,
    rest_owner: Vec<u32>,
    /// Records by slot. A freed slot keeps its last record until it is reused, so a removed
    /// record can be read without moving it (records are a few hundred bytes).
    slots: Slab<T>,
    /// Whether each slot holds a live record.
    used: Vec<bool>,
    free: Vec<u32>,
    len: usize,
}

impl<T: Extent + Default> ChunkTable<T> {
    /// A table for the chunks of the arena `regions` describes.
    pub fn new(regions: ArenaRegions) -> Self {
        Self {
            small_owner: vec![0; (regions.bytes() / SMALL_UNIT) as usize],
            rest_owner: vec![0; (regions.bytes() / LEAF) as usize],
            regions,
            slots: Slab {
                pages: Vec::new(),
                len: 0,
            },
            used: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Put `block` in the small space or back in the rest; no chunk may lie in it.
    pub fn set_small(&mut self, block: usize, small: bool) {
        self.regions.set_small(block, small);
    }

    /// Where the table's regions stand.
    pub fn regions(&self) -> &ArenaRegions {
        &self.regions
    }

    /// Records in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The owner entries of `bytes` bytes from `base` (inside the arena), each run of them
    /// given to `each`: the leaves of the rest; in the small space the units of partly covered
    /// leaves and the leaf entries of whole ones.
    fn owner_runs(&mut self, base: u64, bytes: u64, mut each: impl FnMut(&mut [u32])) {
        let (region, offset) = self
            .regions
            .locate(base)
            .expect("chunks lie inside the arena");
        let end = offset + bytes;
        let units =
            |from: u64, to: u64| (from / SMALL_UNIT) as usize..to.div_ceil(SMALL_UNIT) as usize;
        match region {
            Region::Rest => {
                each(&mut self.rest_owner[(offset / LEAF) as usize..end.div_ceil(LEAF) as usize])
            }
            Region::Small => {
                let (whole_from, whole_to) = (offset.div_ceil(LEAF), end / LEAF);
                if whole_from >= whole_to {
                    each(&mut self.small_owner[units(offset, end)]);
                    return;
                }
                let head = units(offset, whole_from * LEAF);
                let tail = units(whole_to * LEAF, end);
                if !head.is_empty() {
                    each(&mut self.small_owner[head]);
                }
                each(&mut self.rest_owner[whole_from as usize..whole_to as usize]);
                if !tail.is_empty() {
                    each(&mut self.small_owner[tail]);
                }
            }
        }
    }

    /// Store a record written in place by `fill` (into a slot holding a default or an old
    /// record: `fill` sets every field), whose range must be free in the table; the record.
    pub fn insert(&mut self, fill: impl FnOnce(&mut T)) -> &mut T {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.used.push(false);
                self.slots.push()
            }
        };
        let record = self.slots.at_mut(slot as usize);
        fill(record);
        let (base, bytes) = (record.base(), record.bytes());
        self.used[slot as usize] = true;
        self.owner_runs(base, bytes, |owners| {
            debug_assert!(owners.iter().all(|&o| o == 0), "two chunks at {base:#x}");
            owners.fill(slot + 1);
        });
        self.len += 1;
        self.slots.at_mut(slot as usize)
    }

    /// The slot of the record owning the unit of `address`, if any.
    fn slot_of(&self, address: u64) -> Option<usize> {
        let (region, offset) = self.regions.locate(address)?;
        let leaf_owner = self.rest_owner[(offset / LEAF) as usize];
        let owner = match region {
            Region::Small if leaf_owner == 0 => self.small_owner[(offset / SMALL_UNIT) as usize],
            _ => leaf_owner,
        };
        owner.checked_sub(1).map(|slot| slot as usize)
    }

    /// The record covering `address`, if any.
    pub fn find(&self, address: u64) -> Option<&T> {
        let record = self.slots.get(self.slot_of(address)?)?;
        // A unit is owned by the chunk covering any of its bytes; check the byte itself.
        (address < record.base() + record.bytes()).then_some(record)
    }

    /// The record covering `address`, if any, to change.
    pub fn find_mut(&mut self, address: u64) -> Option<&mut T> {
        let slot = self.slot_of(address)?;
        let record = self.slots.get_mut(slot)?;
        (address < record.base() + record.bytes()).then_some(record)
    }

    /// Take the record starting at `base` out of the table; it stays readable (the reference)
    /// until the next insert.
    pub fn remove(&mut self, base: u64) -> Option<&T> {
        let slot = self.slot_of(base)?;
        let bytes = self.slots.get(slot).filter(|r| r.base() == base)?.bytes();
        self.owner_runs(base, bytes, |owners| owners.fill(0));
        let slot = slot as u32;
        self.free.push(slot);
        self.used[slot as usize] = false;
        self.len -= 1;
        self.slots.get(slot as usize)
    }

    /// Every record, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots
            .iter()
            .zip(&self.used)
            .filter_map(|(record, &used)| used.then_some(record))
    }
}

/// Records in pages that never move.
#[derive(Clone, Debug)]
struct Slab<T> {
    pages: Vec<Box<[T]>>,
    len: usize,
}

impl<T: Default> Slab<T> {
    /// Add a default record; its slot.
    fn push(&mut self) -> u32 {
        if self.len == self.pages.len() * PAGE_RECORDS {
            self.pages
                .push((0..PAGE_RECORDS).map(|_| T::default()).collect());
        }
        self.len += 1;
        (self.len - 1) as u32
    }

    fn get(&self, slot: usize) -> Option<&T> {
        (slot < self.len).then(|| &self.pages[slot / PAGE_RECORDS][slot % PAGE_RECORDS])
    }

    fn get_mut(&mut self, slot: usize) -> Option<&mut T> {
        (slot < self.len).then(|| &mut self.pages[slot / PAGE_RECORDS][slot % PAGE_RECORDS])
    }

    fn at_mut(&mut self, slot: usize) -> &mut T {
        self.get_mut(slot).expect("a stored slot")
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.pages.iter().flat_map(|p| p.iter()).take(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Range(u64, u64);

    impl Extent for Range {
        fn base(&self) -> u64 {
            self.0
        }
        fn bytes(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn finds_by_any_covered_address_and_reuses_slots() {
        let base = 1 << 30;
        let mut t = ChunkTable::new(ArenaRegions::new(base, 3 << 20 << 1));
        t.set_small(0, true);
        t.insert(|r| *r = Range(base + 256, 300)); // small units 1 and 2
        t.insert(|r| *r = Range(base + (4 << 20), 2 << 20)); // the third VABlock, in the rest
        assert_eq!(t.find_mut(base + 256).map(|r| r.0), Some(base + 256));
        assert_eq!(t.find_mut(base + 555).map(|r| r.0), Some(base + 256));
        assert!(
            t.find_mut(base + 556).is_none(),
            "past the chunk, inside its last unit"
        );
        assert!(t.find_mut(base).is_none());
        assert!(t.find_mut(base + (2 << 20)).is_none());
        assert!(t.find_mut(base + (5 << 20)).is_some());
        assert!(t.find_mut(base - 1).is_none() && t.find_mut(base + (6 << 20)).is_none());
        // A block joining the small space later gets small units of its own.
        t.set_small(1, true);
        t.insert(|r| *r = Range(base + (2 << 20) + 512, 256));
        assert_eq!(
            t.find(base + (2 << 20) + 700).map(|r| r.0),
            Some(base + (2 << 20) + 512)
        );
        assert!(
            t.find(base + 1024 + 700 - 512).is_none(),
            "the same offset in the first small block is apart"
        );
        assert_eq!(
            t.remove(base + (2 << 20) + 512).map(|r| r.0),
            Some(base + (2 << 20) + 512)
        );
        t.set_small(1, false);
        assert!(
            t.remove(base + 300).is_none(),
            "only a chunk's base removes it"
        );
        assert_eq!(t.remove(base + 256), Some(&Range(base + 256, 300)));
        assert!(t.find_mut(base + 300).is_none());
        assert_eq!(t.iter().count(), 1, "a removed record is not iterated");
        t.insert(|r| *r = Range(base, 512));
        assert_eq!(t.slots.len, 3, "a freed slot is reused");
        assert_eq!(t.len(), 2);
        assert_eq!(t.iter().count(), 2);
    }

    #[test]
    fn a_small_chunk_over_whole_leaves_is_found_from_every_byte_and_leaves_its_neighbours() {
        let base = 1 << 30;
        let mut t = ChunkTable::new(ArenaRegions::new(base, 4 << 20));
        t.set_small(0, true);
        t.set_small(1, true);
        // Before it, in its first leaf; then a chunk from inside leaf 0 over leaves 1..=33 (into
        // the second block) and part of leaf 34; then one after it in leaf 34.
        let (before, big, after) = (base + 4096, base + 8192, base + 34 * LEAF + 1024);
        t.insert(|r| *r = Range(before, 4096));
        t.insert(|r| *r = Range(big, 34 * LEAF + 1024 - 8192));
        t.insert(|r| *r = Range(after, 512));
        for offset in (0..4 << 20).step_by(128) {
            let want = match base + offset {
                a if (before..before + 4096).contains(&a) => Some(before),
                a if (big..after).contains(&a) => Some(big),
                a if (after..after + 512).contains(&a) => Some(after),
                _ => None,
            };
            assert_eq!(
                t.find(base + offset).map(|r| r.0),
                want,
                "offset {offset:#x}"
            );
        }
        assert_eq!(t.remove(big).map(|r| r.0), Some(big));
        assert!(
            t.rest_owner.iter().all(|&o| o == 0),
            "its leaf entries are cleared"
        );
        for offset in (8192..34 * LEAF + 1024).step_by(256) {
            assert!(t.find(base + offset).is_none(), "offset {offset:#x}");
        }
        assert_eq!(t.find(before + 100).map(|r| r.0), Some(before));
        assert_eq!(t.find(after + 100).map(|r| r.0), Some(after));
        // The blocks can leave the small space once empty, and a rest chunk there is found.
        t.remove(before);
        t.remove(after);
        t.set_small(0, false);
        t.insert(|r| *r = Range(base, 2 << 20));
        assert_eq!(t.find(base + (1 << 20)).map(|r| r.0), Some(base));
    }
}
