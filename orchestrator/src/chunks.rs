//! The live-chunk table: chunk records in a slab, found from any address they cover in O(1).
//!
//! Every chunk lies wholly in the small space (256 B units) or wholly in the rest of the arena
//! (64 KiB leaves: portion chunks start on leaves, large ones on VABlocks). An owner array per
//! region holds, for each unit, the slot of the chunk covering it (0 = none), so finding the
//! chunk behind a handle is one array read. Inserting or removing a chunk writes one entry per
//! unit it covers (at most 256 for a small chunk); records never move once stored.

/// A chunk's extent, as the table needs it.
pub trait Extent {
    /// First byte.
    fn base(&self) -> u64;
    /// Bytes covered.
    fn bytes(&self) -> u64;
}

const SMALL_UNIT: u64 = 256;
const LEAF: u64 = 64 << 10;

/// Live chunks of one arena.
#[derive(Clone, Debug)]
pub struct ChunkTable<T> {
    base: u64,
    small_end: u64,
    end: u64,
    /// Slot + 1 of the chunk covering each small unit / each leaf of the rest; 0 for none.
    small_owner: Vec<u32>,
    rest_owner: Vec<u32>,
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T: Extent> ChunkTable<T> {
    /// A table for an arena at `base` of `bytes` bytes whose first `small_bytes` are the small
    /// space.
    pub fn new(base: u64, small_bytes: u64, bytes: u64) -> Self {
        Self {
            base,
            small_end: base + small_bytes,
            end: base + bytes,
            small_owner: vec![0; (small_bytes / SMALL_UNIT) as usize],
            rest_owner: vec![0; ((bytes - small_bytes) / LEAF) as usize],
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Records in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The owner entries of `bytes` bytes from `base`.
    fn owners(&mut self, base: u64, bytes: u64) -> &mut [u32] {
        if base < self.small_end {
            let first = ((base - self.base) / SMALL_UNIT) as usize;
            let count = bytes.div_ceil(SMALL_UNIT) as usize;
            &mut self.small_owner[first..first + count]
        } else {
            let first = ((base - self.small_end) / LEAF) as usize;
            let count = bytes.div_ceil(LEAF) as usize;
            &mut self.rest_owner[first..first + count]
        }
    }

    /// Store `record`, whose range must be free in the table.
    pub fn insert(&mut self, record: T) {
        let (base, bytes) = (record.base(), record.bytes());
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(record);
                slot
            }
            None => {
                self.slots.push(Some(record));
                (self.slots.len() - 1) as u32
            }
        };
        let owners = self.owners(base, bytes);
        debug_assert!(owners.iter().all(|&o| o == 0), "two chunks at {base:#x}");
        owners.fill(slot + 1);
        self.len += 1;
    }

    /// The record covering `address`, if any.
    pub fn find_mut(&mut self, address: u64) -> Option<&mut T> {
        if address < self.base || address >= self.end {
            return None;
        }
        let owner = if address < self.small_end {
            self.small_owner[((address - self.base) / SMALL_UNIT) as usize]
        } else {
            self.rest_owner[((address - self.small_end) / LEAF) as usize]
        };
        let record = self
            .slots
            .get_mut(owner.checked_sub(1)? as usize)?
            .as_mut()?;
        // A unit is owned by the chunk covering any of its bytes; check the byte itself.
        (address < record.base() + record.bytes()).then_some(record)
    }

    /// Take the record starting at `base` out.
    pub fn remove(&mut self, base: u64) -> Option<T> {
        let found = self.find_mut(base).filter(|r| r.base() == base)?;
        let bytes = found.bytes();
        let owners = self.owners(base, bytes);
        let slot = owners[0] - 1;
        owners.fill(0);
        self.free.push(slot);
        self.len -= 1;
        self.slots[slot as usize].take()
    }

    /// Every record, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
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
        let mut t = ChunkTable::new(base, 4096, 4096 + (4 << 20));
        t.insert(Range(base + 256, 300)); // small units 1 and 2
        t.insert(Range(base + 4096 + (2 << 20), 2 << 20)); // the second VABlock of the rest
        assert_eq!(t.find_mut(base + 256).map(|r| r.0), Some(base + 256));
        assert_eq!(t.find_mut(base + 555).map(|r| r.0), Some(base + 256));
        assert!(
            t.find_mut(base + 556).is_none(),
            "past the chunk, inside its last unit"
        );
        assert!(t.find_mut(base).is_none());
        assert!(t.find_mut(base + 4096).is_none());
        assert!(t.find_mut(base + 4096 + (3 << 20)).is_some());
        assert!(t.find_mut(base - 1).is_none() && t.find_mut(base + 4096 + (4 << 20)).is_none());
        assert!(
            t.remove(base + 300).is_none(),
            "only a chunk's base removes it"
        );
        assert_eq!(t.remove(base + 256), Some(Range(base + 256, 300)));
        assert!(t.find_mut(base + 300).is_none());
        t.insert(Range(base, 512));
        assert_eq!(t.slots.len(), 2, "the freed slot is reused");
        assert_eq!(t.len(), 2);
    }
}
