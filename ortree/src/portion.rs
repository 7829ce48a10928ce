//! The warptree arranger: `PortionTree` for one 2 MiB portion VABlock, and `PortionPool`, which takes
//! portion VABlocks from the arena's [`OrTree`] on demand and gives empty ones back.
//!
//! A portion VABlock has 32 leaves of 64 KiB (the driver's big pages). A warptree of `2^i` leaves
//! (`i` in 0..=4) is placed at the start of a free region of `2^(i+1)` leaves aligned to its size;
//! the region's other half stays empty (padding). The regions are the nodes of the driver's
//! prefetch tree over the block, so:
//!
//! - no two regions overlap (each leaf belongs to at most one region);
//! - every tree node that contains leaves of two warptrees is a union of whole regions, each at
//!   most half populated, so it is at most 50% populated and never passes the driver's 51% rule:
//!   prefetching triggered by one warp's faults never pulls in another warp's memory.
//!
//! Invariants (checked by [`PortionTree::check_invariants`]): `reserved` is exactly the union of the
//! regions of the warptrees recorded in `starts`; each warptree starts at a multiple of its region
//! size; regions are disjoint. The pool keeps every block it owns in exactly one room bucket (by its
//! largest free aligned region) unless it is full, owns only blocks the arena has allocated, and
//! returns a block to the arena the moment it becomes empty.

use crate::error::PortionError;
use crate::ortree::OrTree;
use crate::summary::{SummaryBits, WORD_BITS};

/// Leaves (64 KiB big pages) in one 2 MiB VABlock.
pub const LEAVES_PER_BLOCK: u32 = 32;
/// The largest warptree has `2^MAX_WARPTREE_LOG2` leaves (half a VABlock).
pub const MAX_WARPTREE_LOG2: u32 = 4;
/// Bytes in one leaf: the driver's big page.
pub const LEAF_BYTES: u64 = uvm_geometry::BIG_PAGE_BYTES;
/// Bytes in one VABlock.
pub const VABLOCK_BYTES: u64 = uvm_geometry::VABLOCK_BYTES;

/// For a region of `2^k` leaves: the bits of the leaves where such a region may start.
const ALIGNED_STARTS: [u32; 6] = [
    0xFFFF_FFFF,
    0x5555_5555,
    0x1111_1111,
    0x0101_0101,
    0x0001_0001,
    0x0000_0001,
];

fn region_mask(start: u32, log2_len: u32) -> u32 {
    if log2_len == 5 {
        u32::MAX
    } else {
        ((1u32 << (1 << log2_len)) - 1) << start
    }
}

/// Starts (as bits) of the free aligned regions of `2^log2_len` leaves in `reserved`.
fn free_regions(reserved: u32, log2_len: u32) -> u32 {
    let mut run = !reserved;
    for step in 0..log2_len {
        run &= run >> (1 << step);
    }
    run & ALIGNED_STARTS[log2_len as usize]
}

/// Occupancy of one portion VABlock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortionTree {
    /// Leaves covered by a region (a warptree or its padding).
    reserved: u32,
    /// `starts[i]`: first leaves of the live warptrees of `2^i` leaves.
    starts: [u32; (MAX_WARPTREE_LOG2 + 1) as usize],
}

impl PortionTree {
    /// An empty block.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no warptree lives in the block.
    pub fn is_empty(&self) -> bool {
        self.reserved == 0
    }

    /// Leaves covered by regions (warptrees and their padding), as a bit mask.
    pub fn reserved_leaves(&self) -> u32 {
        self.reserved
    }

    /// The live warptrees as `(first_leaf, log2_leaves)`, in leaf order.
    pub fn warptrees(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for (log2, &starts) in self.starts.iter().enumerate() {
            let mut bits = starts;
            while bits != 0 {
                out.push((bits.trailing_zeros(), log2 as u32));
                bits &= bits - 1;
            }
        }
        out.sort_unstable();
        out
    }

    /// log2 of the largest free aligned region (0..=5 for 1..=32 leaves), `None` when full.
    pub fn largest_free_region_log2(&self) -> Option<u32> {
        (0..=5).rev().find(|&k| free_regions(self.reserved, k) != 0)
    }

    /// Place a warptree of `2^log2_leaves` leaves in the leftmost free aligned region of twice that
    /// size; returns its first leaf.
    pub fn alloc(&mut self, log2_leaves: u32) -> Result<u32, PortionError> {
        if log2_leaves > MAX_WARPTREE_LOG2 {
            return Err(PortionError::BadWarptreeSize { log2_leaves });
        }
        let region_log2 = log2_leaves + 1;
        let candidates = free_regions(self.reserved, region_log2);
        if candidates == 0 {
            return Err(PortionError::BlockFull {
                region_leaves: 1 << region_log2,
            });
        }
        let leaf = candidates.trailing_zeros();
        self.reserved |= region_mask(leaf, region_log2);
        self.starts[log2_leaves as usize] |= 1 << leaf;
        Ok(leaf)
    }

    /// Free the warptree that starts at `leaf`; returns its `log2_leaves`.
    pub fn free(&mut self, leaf: u32) -> Result<u32, PortionError> {
        if leaf >= LEAVES_PER_BLOCK {
            return Err(PortionError::LeafOutOfRange { leaf });
        }
        let log2 = self
            .starts
            .iter()
            .position(|&s| s >> leaf & 1 == 1)
            .ok_or(PortionError::NotAWarptree { leaf })? as u32;
        self.starts[log2 as usize] &= !(1 << leaf);
        self.reserved &= !region_mask(leaf, log2 + 1);
        Ok(log2)
    }

    /// Verify the invariants listed in the module docs.
    pub fn check_invariants(&self) -> Result<(), PortionError> {
        let mut covered = 0u32;
        for (first_leaf, log2) in self.warptrees() {
            let region = region_mask(first_leaf, log2 + 1);
            if first_leaf % (2 << log2) != 0 {
                return Err(PortionError::Invariant(format!(
                    "warptree at leaf {first_leaf} is not aligned to its region of {} leaves",
                    2 << log2
                )));
            }
            if covered & region != 0 {
                return Err(PortionError::Invariant(format!(
                    "region of the warptree at leaf {first_leaf} overlaps another"
                )));
            }
            covered |= region;
        }
        if covered != self.reserved {
            return Err(PortionError::Invariant(format!(
                "reserved leaves {:#010x} but regions cover {covered:#010x}",
                self.reserved
            )));
        }
        Ok(())
    }
}

/// Where a warptree lives: a VABlock of the arena and a leaf range in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Warptree {
    /// VABlock index in the arena.
    pub block: usize,
    /// First leaf in the block (0..32).
    pub first_leaf: u32,
    /// The warptree has `2^log2_leaves` leaves.
    pub log2_leaves: u32,
}

impl Warptree {
    /// Byte offset of the warptree's first byte from the arena's start.
    pub fn arena_offset(&self) -> u64 {
        self.block as u64 * VABLOCK_BYTES + u64::from(self.first_leaf) * LEAF_BYTES
    }

    /// Bytes of the warptree (its padding not counted).
    pub fn bytes(&self) -> u64 {
        LEAF_BYTES << self.log2_leaves
    }
}

/// Portion VABlocks in use, taken from and given back to the arena's `OrTree`.
///
/// Blocks are found by index: occupancy in a vector over the arena's blocks (a block is held
/// exactly when its tree is not empty, since an emptied block goes back at once) and one bit
/// set per room size, whose lowest set bit is the lowest block with that room. Both grow to the
/// arena's size on first use, so the pool costs nothing until it holds a block.
#[derive(Clone, Debug, Default)]
pub struct PortionPool {
    /// Occupancy of each block up to the highest one held so far.
    blocks: Vec<PortionTree>,
    /// `by_room[k]`: the blocks whose largest free aligned region has `2^k` leaves (full blocks
    /// are in none); empty until the first allocation sizes them to the arena.
    by_room: Vec<SummaryBits>,
}

/// Room sizes: largest free aligned regions of 1..=32 leaves.
const ROOMS: usize = 6;

impl PortionPool {
    /// A pool with no blocks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Portion VABlocks the pool holds.
    pub fn block_count(&self) -> usize {
        self.blocks.iter().filter(|t| !t.is_empty()).count()
    }

    /// The block's occupancy, if the pool holds it.
    pub fn block(&self, block: usize) -> Option<&PortionTree> {
        self.blocks.get(block).filter(|t| !t.is_empty())
    }

    /// Room bit sets that cover `arena_blocks` blocks (kept bits stay).
    fn cover(&mut self, arena_blocks: usize) {
        let words = arena_blocks.div_ceil(WORD_BITS).max(1);
        if self
            .by_room
            .first()
            .is_some_and(|r| r.words().len() >= words)
        {
            return;
        }
        self.by_room = (0..ROOMS)
            .map(|k| {
                let mut bits = self
                    .by_room
                    .get(k)
                    .map_or_else(Vec::new, |r| r.words().to_vec());
                bits.resize(words, 0);
                SummaryBits::new(bits)
            })
            .collect();
    }

    /// Place a warptree of `2^log2_leaves` leaves. It goes into the held block with the least room
    /// that still fits it (lowest block first), so large regions stay whole; a new VABlock is taken
    /// from `arena` only when no held block fits.
    pub fn alloc(
        &mut self,
        arena: &mut OrTree,
        log2_leaves: u32,
    ) -> Result<Warptree, PortionError> {
        if log2_leaves > MAX_WARPTREE_LOG2 {
            return Err(PortionError::BadWarptreeSize { log2_leaves });
        }
        self.cover(arena.len());
        let held = (log2_leaves as usize + 1..ROOMS).find_map(|k| self.by_room[k].first_set());
        let block = match held {
            Some(block) => block,
            None => {
                let block = arena.alloc_one().map_err(|e| match e {
                    crate::OrTreeError::NoSpace { .. } => PortionError::ArenaFull,
                    other => PortionError::Arena(other),
                })?;
                if block >= self.blocks.len() {
                    self.blocks.resize(block + 1, PortionTree::new());
                }
                block
            }
        };
        let tree = &mut self.blocks[block];
        let before = tree.largest_free_region_log2();
        let first_leaf = tree.alloc(log2_leaves)?;
        let after = tree.largest_free_region_log2();
        Self::rebucket(&mut self.by_room, block, before, after);
        Ok(Warptree {
            block,
            first_leaf,
            log2_leaves,
        })
    }

    /// Free the warptree at (`block`, `first_leaf`); an emptied block goes back to `arena`.
    pub fn free(
        &mut self,
        arena: &mut OrTree,
        block: usize,
        first_leaf: u32,
    ) -> Result<Warptree, PortionError> {
        let tree = match self.blocks.get_mut(block) {
            Some(tree) if !tree.is_empty() => tree,
            _ => return Err(PortionError::UnknownBlock { block }),
        };
        if arena.is_free(block)? {
            return Err(PortionError::Invariant(format!(
                "held block {block} is free in the arena"
            )));
        }
        let before = tree.largest_free_region_log2();
        let log2_leaves = tree.free(first_leaf)?;
        if tree.is_empty() {
            Self::rebucket(&mut self.by_room, block, before, None);
            arena.free_one(block)?;
        } else {
            let after = tree.largest_free_region_log2();
            Self::rebucket(&mut self.by_room, block, before, after);
        }
        Ok(Warptree {
            block,
            first_leaf,
            log2_leaves,
        })
    }

    fn rebucket(
        by_room: &mut [SummaryBits],
        block: usize,
        before: Option<u32>,
        after: Option<u32>,
    ) {
        if before == after {
            return;
        }
        if let Some(k) = before {
            by_room[k as usize].assign(block, false);
        }
        if let Some(k) = after {
            by_room[k as usize].assign(block, true);
        }
    }

    /// Whether `block` is in room bucket `k`.
    fn in_room(&self, k: usize, block: usize) -> bool {
        self.by_room.get(k).is_some_and(|r| r.is_set(block))
    }

    /// Verify the pool's invariants against the arena it draws from.
    pub fn check_invariants(&self, arena: &OrTree) -> Result<(), PortionError> {
        let fail = |what: String| Err(PortionError::Invariant(what));
        for room in &self.by_room {
            room.check().map_err(PortionError::Invariant)?;
        }
        let bucketed: usize = self
            .by_room
            .iter()
            .flat_map(|r| r.words())
            .map(|w| w.count_ones() as usize)
            .sum();
        let mut held = 0;
        let mut full = 0;
        for (block, tree) in self.blocks.iter().enumerate() {
            tree.check_invariants()?;
            if tree.is_empty() {
                if (0..ROOMS).any(|k| self.in_room(k, block)) {
                    return fail(format!("block {block} is not held but is in a room bucket"));
                }
                continue;
            }
            held += 1;
            if arena.is_free(block)? {
                return fail(format!("held block {block} is free in the arena"));
            }
            match tree.largest_free_region_log2() {
                Some(k) if !self.in_room(k as usize, block) => {
                    return fail(format!("block {block} is not in room bucket {k}"));
                }
                Some(_) => {}
                None => full += 1,
            }
        }
        if bucketed + full != held {
            return fail(format!(
                "{bucketed} bucketed + {full} full blocks, but {held} held"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_regions_finds_aligned_holes() {
        // Leaves 0..4 and 8 taken.
        let reserved = 0b1_0000_1111;
        assert_eq!(free_regions(reserved, 0), !reserved);
        assert_eq!(free_regions(reserved, 2).trailing_zeros(), 4);
        assert_eq!(free_regions(reserved, 3).trailing_zeros(), 16);
        assert_eq!(free_regions(reserved, 5), 0);
        assert_eq!(free_regions(0, 5), 1);
    }

    #[test]
    fn warptree_sits_in_the_left_half_of_its_region() {
        let mut t = PortionTree::new();
        assert_eq!(t.alloc(0).unwrap(), 0); // region 0..2
        assert_eq!(t.alloc(1).unwrap(), 4); // region 4..8 (2..4 is too small)
        assert_eq!(t.alloc(0).unwrap(), 2); // region 2..4
        assert_eq!(t.alloc(3).unwrap(), 16); // region 16..32
        assert_eq!(t.reserved_leaves(), 0xFFFF_00FF);
        assert_eq!(
            t.alloc(3).unwrap_err(),
            PortionError::BlockFull { region_leaves: 16 }
        );
        assert_eq!(t.alloc(2).unwrap(), 8);
        assert_eq!(t.largest_free_region_log2(), None);
        t.check_invariants().unwrap();
        assert_eq!(t.free(16).unwrap(), 3);
        assert_eq!(t.largest_free_region_log2(), Some(4));
    }

    #[test]
    fn a_whole_block_holds_one_half_block_warptree() {
        let mut t = PortionTree::new();
        assert_eq!(t.alloc(4).unwrap(), 0);
        assert_eq!(t.reserved_leaves(), u32::MAX);
        assert!(t.alloc(0).is_err());
        assert_eq!(t.free(0).unwrap(), 4);
        assert!(t.is_empty());
    }

    #[test]
    fn bad_frees_are_typed_errors_and_change_nothing() {
        let mut t = PortionTree::new();
        t.alloc(2).unwrap();
        let before = t.clone();
        assert_eq!(
            t.free(1).unwrap_err(),
            PortionError::NotAWarptree { leaf: 1 }
        );
        assert_eq!(
            t.free(8).unwrap_err(),
            PortionError::NotAWarptree { leaf: 8 }
        );
        assert_eq!(
            t.free(32).unwrap_err(),
            PortionError::LeafOutOfRange { leaf: 32 }
        );
        assert_eq!(
            t.alloc(5).unwrap_err(),
            PortionError::BadWarptreeSize { log2_leaves: 5 }
        );
        assert_eq!(t, before);
        t.free(0).unwrap();
        assert_eq!(
            t.free(0).unwrap_err(),
            PortionError::NotAWarptree { leaf: 0 }
        );
    }

    #[test]
    fn pool_takes_and_returns_arena_blocks() {
        let mut arena = OrTree::new(4).unwrap();
        arena.alloc_one().unwrap(); // block 0 belongs to someone else
        let mut pool = PortionPool::new();
        let a = pool.alloc(&mut arena, 4).unwrap();
        assert_eq!((a.block, a.first_leaf), (1, 0));
        let b = pool.alloc(&mut arena, 1).unwrap();
        assert_eq!((b.block, b.first_leaf), (2, 0));
        let c = pool.alloc(&mut arena, 1).unwrap();
        assert_eq!(
            (c.block, c.first_leaf),
            (2, 4),
            "fills the emptiest fitting block first"
        );
        assert_eq!(c.arena_offset(), 2 * VABLOCK_BYTES + 4 * LEAF_BYTES);
        assert_eq!(c.bytes(), 128 << 10);
        pool.check_invariants(&arena).unwrap();
        assert_eq!(pool.alloc(&mut arena, 4).unwrap().block, 3);
        assert_eq!(
            pool.alloc(&mut arena, 4).unwrap_err(),
            PortionError::ArenaFull
        );
        pool.free(&mut arena, 1, 0).unwrap();
        assert!(arena.is_free(1).unwrap(), "an emptied block goes back");
        assert_eq!(
            pool.free(&mut arena, 1, 0).unwrap_err(),
            PortionError::UnknownBlock { block: 1 }
        );
        assert_eq!(
            pool.free(&mut arena, 2, 2).unwrap_err(),
            PortionError::NotAWarptree { leaf: 2 }
        );
        pool.free(&mut arena, 2, 0).unwrap();
        pool.free(&mut arena, 2, 4).unwrap();
        pool.free(&mut arena, 3, 0).unwrap();
        assert_eq!(pool.block_count(), 0);
        assert_eq!(arena.allocated_count(), 1);
        pool.check_invariants(&arena).unwrap();
        arena.check_invariants().unwrap();
    }
}
