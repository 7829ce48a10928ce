//! `BinaryOrTree`: the paper's binary OR tree, kept as the baseline the benchmarks compare
//! [`crate::OrTree`] against. Same operations and answers (leftmost-first), one bit per node.
//!
//! Layout: an implicit heap over `leaves = len.next_power_of_two()` leaves; node 1 is the root,
//! node `i` has children `2i` and `2i + 1`, leaf `u` is node `leaves + u`. A node's bit is the OR of
//! its children's bits; leaves past `len` are 0.

use crate::error::{OrTreeError, check_run_request};

/// A binary OR tree over `len` units (1 = free).
#[derive(Clone, Debug)]
pub struct BinaryOrTree {
    len: usize,
    leaves: usize,
    free: usize,
    bits: Vec<u64>,
}

impl BinaryOrTree {
    /// A tree of `len` units, all free.
    pub fn new(len: usize) -> Result<Self, OrTreeError> {
        if len == 0 {
            return Err(OrTreeError::EmptyTree);
        }
        let leaves = len.next_power_of_two();
        let mut tree = Self {
            len,
            leaves,
            free: len,
            bits: vec![0; (2 * leaves).div_ceil(64)],
        };
        for unit in 0..len {
            tree.set(leaves + unit, true);
        }
        for node in (1..leaves).rev() {
            let or = tree.get(2 * node) || tree.get(2 * node + 1);
            tree.set(node, or);
        }
        Ok(tree)
    }

    /// Free units.
    pub fn free_count(&self) -> usize {
        self.free
    }

    fn get(&self, node: usize) -> bool {
        self.bits[node / 64] >> (node % 64) & 1 == 1
    }

    fn set(&mut self, node: usize, value: bool) {
        let word = &mut self.bits[node / 64];
        if value {
            *word |= 1 << (node % 64);
        } else {
            *word &= !(1 << (node % 64));
        }
    }

    /// Recompute the ancestors of `node` until one does not change.
    fn update_up(&mut self, mut node: usize) {
        while node > 1 {
            let parent = node / 2;
            let or = self.get(2 * parent) || self.get(2 * parent + 1);
            if self.get(parent) == or {
                return;
            }
            self.set(parent, or);
            node = parent;
        }
    }

    /// The leftmost free unit at or after `from`: climb until a right sibling has a free leaf, descend.
    pub fn next_free(&self, from: usize) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        let mut node = self.leaves + from;
        if !self.get(node) {
            loop {
                if node == 1 {
                    return None;
                }
                if node.is_multiple_of(2) && self.get(node + 1) {
                    node += 1;
                    break;
                }
                node /= 2;
            }
        }
        while node < self.leaves {
            node = if self.get(2 * node) {
                2 * node
            } else {
                2 * node + 1
            };
        }
        Some(node - self.leaves)
    }

    /// Allocate the leftmost free unit.
    pub fn alloc_one(&mut self) -> Result<usize, OrTreeError> {
        let unit = self
            .next_free(0)
            .ok_or(OrTreeError::NoSpace { count: 1, align: 1 })?;
        self.mark(unit, 1, false);
        Ok(unit)
    }

    /// Allocate the leftmost run of `count` free units aligned to `align`.
    pub fn alloc_run(&mut self, count: usize, align: usize) -> Result<usize, OrTreeError> {
        check_run_request(count, align, self.len)?;
        let mut from = 0;
        loop {
            let free = self
                .next_free(from)
                .ok_or(OrTreeError::NoSpace { count, align })?;
            let start = free.next_multiple_of(align);
            if start + count > self.len {
                return Err(OrTreeError::NoSpace { count, align });
            }
            match (start..start + count).find(|&u| !self.get(self.leaves + u)) {
                None => {
                    self.mark(start, count, false);
                    return Ok(start);
                }
                Some(taken) => from = taken + 1,
            }
        }
    }

    /// Free units `start..start + count`, which must all be allocated.
    pub fn free_run(&mut self, start: usize, count: usize) -> Result<(), OrTreeError> {
        if count == 0 {
            return Err(OrTreeError::ZeroLength);
        }
        if start.checked_add(count).is_none_or(|end| end > self.len) {
            return Err(OrTreeError::OutOfRange {
                start,
                count,
                capacity: self.len,
            });
        }
        if let Some(unit) = (start..start + count).find(|&u| self.get(self.leaves + u)) {
            return Err(OrTreeError::NotAllocated { unit });
        }
        self.mark(start, count, true);
        Ok(())
    }

    fn mark(&mut self, start: usize, count: usize, free: bool) {
        for unit in start..start + count {
            self.set(self.leaves + unit, free);
            self.update_up(self.leaves + unit);
        }
        if free {
            self.free += count;
        } else {
            self.free -= count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftmost_first_with_holes() {
        let mut t = BinaryOrTree::new(100).unwrap();
        for expect in 0..10 {
            assert_eq!(t.alloc_one().unwrap(), expect);
        }
        t.free_run(3, 2).unwrap();
        assert_eq!(t.alloc_run(3, 1).unwrap(), 10);
        assert_eq!(t.alloc_run(2, 1).unwrap(), 3);
        assert_eq!(t.alloc_run(8, 32).unwrap(), 32);
        assert_eq!(t.next_free(32), Some(40));
        assert_eq!(t.free_run(3, 1), Ok(()));
        assert_eq!(t.free_run(3, 1), Err(OrTreeError::NotAllocated { unit: 3 }));
        assert_eq!(t.free_count(), 80);
    }
}
