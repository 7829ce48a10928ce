//! `OrTree`: a 64-ary summary bit tree over `n` units, with leftmost-first searches.
//!
//! Units are bits (1 = free) under 64-ary OR summaries ([`SummaryBits`]): the leftmost free unit is
//! one `trailing_zeros` per level, 3 levels at 32 Ki units, 4 at 16 Mi.
//!
//! Runs: a leftmost-first search for `k` free units would otherwise visit every hole of a
//! fragmented region. Each unit word `w` therefore carries a *reach class*: `floor(log2(reach))`
//! capped at 6, where `reach` is the longest free run that starts in `w` (continuing into word
//! `w + 1`), capped at 64. Any run of `k <= 64` units starting in `w` has `reach(w) >= k`, and any
//! longer run has `reach(w) >= 64`; so the search for `k` visits only words whose class is at least
//! `min(floor(log2 k), 6)`, found through one summary tree per class.
//!
//! Reach classes are maintained lazily: a mutation marks the words whose class may have changed
//! (the words it touched and the word before them) dirty, and a run search refreshes the dirty
//! words first. Single-unit traffic thus pays one bit test per word, and repeated changes to one
//! word between run searches are refreshed once.
//!
//! Invariants (checked by [`OrTree::check_invariants`]):
//! - unit bits at and past `len` are 0 (they are never free);
//! - every summary bit equals "the word below is non-zero";
//! - `free` is the number of set unit bits;
//! - for every word `w` that is not dirty, `reach_class[w]` is the class computed from the unit
//!   words `w` and `w + 1`, and bit `w` of `reach[c - 1]` is set exactly when that class is at
//!   least `c`; the dirty list holds each dirty word once.
//!
//! Every operation validates its arguments before it mutates anything, so an error leaves the tree
//! exactly as it was.

use crate::error::{OrTreeError, check_run_request};
use crate::summary::{SummaryBits, WORD_BITS, word_masks};

/// Reach classes above 0 (runs of at least 2, 4, .., 64 units) that get a summary tree.
const REACH_CLASSES: usize = 6;
/// The reach class of a word where no run starts.
const NO_RUN: u8 = u8::MAX;

/// A 64-ary OR summary tree: which of `len` units are free, with leftmost-first searches.
#[derive(Clone, Debug)]
pub struct OrTree {
    len: usize,
    free: usize,
    units: SummaryBits,
    /// Per unit word: `floor(log2(reach))` capped at 6, or `NO_RUN`.
    reach_class: Vec<u8>,
    /// `reach[c - 1]`: bit `w` set when `reach_class[w] >= c` (and is not `NO_RUN`).
    reach: Vec<SummaryBits>,
    /// Words whose reach class may be stale: a bit per word, and the same words as a list.
    dirty: Vec<u64>,
    dirty_list: Vec<usize>,
}

/// `floor(log2(longest run of set bits))` capped at 6, for a non-zero word. Branch-free: after
/// `i` folds a bit survives where a run of `2^i` starts, and each fold's survivors are a subset of
/// the previous fold's, so the class is the number of non-empty folds.
fn inner_class(word: u64) -> u8 {
    let r2 = word & (word >> 1);
    let r4 = r2 & (r2 >> 2);
    let r8 = r4 & (r4 >> 4);
    let r16 = r8 & (r8 >> 8);
    let r32 = r16 & (r16 >> 16);
    let r64 = r32 & (r32 >> 32);
    [r2, r4, r8, r16, r32, r64]
        .iter()
        .map(|&r| u8::from(r != 0))
        .sum()
}

fn floor_log2_capped(value: usize) -> u8 {
    (value.min(WORD_BITS).ilog2()) as u8
}

impl OrTree {
    /// A tree of `len` units, all free.
    pub fn new(len: usize) -> Result<Self, OrTreeError> {
        if len == 0 {
            return Err(OrTreeError::EmptyTree);
        }
        let words = len.div_ceil(WORD_BITS);
        let mut bits = vec![u64::MAX; words];
        let tail = len % WORD_BITS;
        if tail != 0 {
            bits[words - 1] = (1u64 << tail) - 1;
        }
        let units = SummaryBits::new(bits);
        let reach_class: Vec<u8> = (0..words)
            .map(|w| Self::class_of(units.words(), w))
            .collect();
        let reach = (1..=REACH_CLASSES as u8)
            .map(|c| {
                let mut bits = vec![0u64; words.div_ceil(WORD_BITS)];
                for (w, &class) in reach_class.iter().enumerate() {
                    if class != NO_RUN && class >= c {
                        bits[w / WORD_BITS] |= 1 << (w % WORD_BITS);
                    }
                }
                SummaryBits::new(bits)
            })
            .collect();
        Ok(Self {
            len,
            free: len,
            units,
            reach_class,
            reach,
            dirty: vec![0; words.div_ceil(WORD_BITS)],
            dirty_list: Vec::new(),
        })
    }

    /// Number of units the tree manages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a tree has at least one unit (kept for the `len`/`is_empty` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Free units.
    pub fn free_count(&self) -> usize {
        self.free
    }

    /// Allocated units.
    pub fn allocated_count(&self) -> usize {
        self.len - self.free
    }

    /// Levels of the unit tree (the unit bits included): 3 for 32 Ki units, 4 for 16 Mi.
    pub fn depth(&self) -> usize {
        self.units.depth()
    }

    /// Whether unit `unit` is free.
    pub fn is_free(&self, unit: usize) -> Result<bool, OrTreeError> {
        self.check_range(unit, 1)?;
        Ok(self.bit(unit))
    }

    /// The leftmost free unit, if any.
    pub fn first_free(&self) -> Option<usize> {
        self.units.first_set()
    }

    /// The leftmost free unit at or after `from`, if any.
    pub fn next_free(&self, from: usize) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        self.units.next_set(from)
    }

    /// The leftmost start `s` with `s % align == 0` such that units `s..s + count` are all free.
    ///
    /// `Ok(None)` when no such run exists; an error for `count == 0`, `count > len` or an `align`
    /// that is not a power of two. Visits only words whose reach class admits `count` (it takes
    /// `&mut self` to bring the reach classes up to date first).
    pub fn find_run(&mut self, count: usize, align: usize) -> Result<Option<usize>, OrTreeError> {
        check_run_request(count, align, self.len)?;
        self.refresh_reach();
        Ok(self.find_run_between(count, align, 0, self.len))
    }

    /// Allocate the first run of `count` free units starting at a multiple of `align` at or
    /// after unit `hint`, else the leftmost one before it (next fit: a caller that places runs
    /// one after another starts where the last one ended instead of searching every hole from
    /// the left again).
    pub fn alloc_run_from(
        &mut self,
        count: usize,
        align: usize,
        hint: usize,
    ) -> Result<usize, OrTreeError> {
        check_run_request(count, align, self.len)?;
        self.refresh_reach();
        let hint = hint.min(self.len);
        let start = self
            .find_run_between(count, align, hint, self.len)
            .or_else(|| self.find_run_between(count, align, 0, (hint + count).min(self.len)))
            .ok_or(OrTreeError::NoSpace { count, align })?;
        self.mark_allocated(start, count);
        Ok(start)
    }

    /// The first aligned run of `count` free units starting at or after `from` and ending at
    /// or before `end` (reach classes fresh).
    fn find_run_between(
        &self,
        count: usize,
        align: usize,
        from: usize,
        end: usize,
    ) -> Option<usize> {
        let class = floor_log2_capped(count) as usize;
        let mut from = from;
        while from + count <= end {
            let candidate = if class == 0 {
                self.units.next_set(from).map(|unit| unit / WORD_BITS)
            } else {
                self.reach[class - 1].next_set(from / WORD_BITS)
            };
            let word = candidate?;
            match self.fit_in_word(word, from.max(word * WORD_BITS), count, align) {
                Ok(start) if start + count <= end => return Some(start),
                Ok(_) => return None,
                Err(next) => from = next,
            }
        }
        None
    }

    /// The leftmost aligned start in `word` at or after `from` with `count` free units.
    /// `Err(next)`: none; the search continues at unit `next`.
    fn fit_in_word(
        &self,
        word: usize,
        from: usize,
        count: usize,
        align: usize,
    ) -> Result<usize, usize> {
        let word_end = (word + 1) * WORD_BITS;
        let bits = self.units.words()[word];
        let mut from = from;
        loop {
            let free_here = bits
                & (u64::MAX
                    .checked_shl((from - word * WORD_BITS) as u32)
                    .unwrap_or(0));
            if free_here == 0 {
                return Err(word_end);
            }
            let start =
                (word * WORD_BITS + free_here.trailing_zeros() as usize).next_multiple_of(align);
            if start >= word_end {
                return Err(start);
            }
            if start + count > self.len {
                return Err(self.len);
            }
            let run = self.free_run_len(start, count);
            if run == count {
                return Ok(start);
            }
            // Unit `start + run` is allocated: no run can start at or before it.
            from = start + run + 1;
            if from >= word_end {
                return Err(from);
            }
        }
    }

    /// Allocate the leftmost free unit.
    pub fn alloc_one(&mut self) -> Result<usize, OrTreeError> {
        let unit = self
            .units
            .first_set()
            .ok_or(OrTreeError::NoSpace { count: 1, align: 1 })?;
        self.mark_allocated(unit, 1);
        Ok(unit)
    }

    /// Allocate the leftmost run of `count` free units starting at a multiple of `align`.
    pub fn alloc_run(&mut self, count: usize, align: usize) -> Result<usize, OrTreeError> {
        let start = self
            .find_run(count, align)?
            .ok_or(OrTreeError::NoSpace { count, align })?;
        self.mark_allocated(start, count);
        Ok(start)
    }

    /// Allocate exactly units `start..start + count`, which must all be free.
    pub fn alloc_at(&mut self, start: usize, count: usize) -> Result<(), OrTreeError> {
        self.check_range(start, count)?;
        let run = self.free_run_len(start, count);
        if run < count {
            return Err(OrTreeError::NotFree { unit: start + run });
        }
        self.mark_allocated(start, count);
        Ok(())
    }

    /// Free units `start..start + count`, which must all be allocated.
    pub fn free_run(&mut self, start: usize, count: usize) -> Result<(), OrTreeError> {
        self.check_range(start, count)?;
        if let Some(unit) = self.first_free_in(start, count) {
            return Err(OrTreeError::NotAllocated { unit });
        }
        self.mark_free(start, count);
        Ok(())
    }

    /// Free one allocated unit.
    pub fn free_one(&mut self, unit: usize) -> Result<(), OrTreeError> {
        self.free_run(unit, 1)
    }

    /// Verify the invariants listed in the module docs.
    pub fn check_invariants(&self) -> Result<(), OrTreeError> {
        let fail = |what: String| Err(OrTreeError::Invariant(what));
        let words = self.units.words();
        if words.len() != self.len.div_ceil(WORD_BITS) {
            return fail(format!("{} unit words for {} units", words.len(), self.len));
        }
        let tail = self.len % WORD_BITS;
        if tail != 0 && words[words.len() - 1] >> tail != 0 {
            return fail("a unit past the end is marked free".into());
        }
        self.units.check().map_err(OrTreeError::Invariant)?;
        let counted: usize = words.iter().map(|w| w.count_ones() as usize).sum();
        if counted != self.free {
            return fail(format!(
                "free count {} but {} free bits",
                self.free, counted
            ));
        }
        let listed: usize = self.dirty.iter().map(|d| d.count_ones() as usize).sum();
        if listed != self.dirty_list.len() || self.dirty_list.iter().any(|&w| !self.is_dirty(w)) {
            return fail("dirty list and dirty bits disagree".into());
        }
        for (w, &class) in self.reach_class.iter().enumerate() {
            if self.is_dirty(w) {
                continue;
            }
            let want = Self::class_of(words, w);
            if class != want {
                return fail(format!(
                    "word {w} has reach class {class}, should be {want}"
                ));
            }
            for (c, tree) in self.reach.iter().enumerate() {
                let set = tree.words()[w / WORD_BITS] >> (w % WORD_BITS) & 1 == 1;
                if set != (class != NO_RUN && class > c as u8) {
                    return fail(format!("reach tree {} disagrees at word {w}", c + 1));
                }
            }
        }
        for tree in &self.reach {
            tree.check().map_err(OrTreeError::Invariant)?;
        }
        Ok(())
    }

    fn check_range(&self, start: usize, count: usize) -> Result<(), OrTreeError> {
        if count == 0 {
            return Err(OrTreeError::ZeroLength);
        }
        match start.checked_add(count) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OrTreeError::OutOfRange {
                start,
                count,
                capacity: self.len,
            }),
        }
    }

    fn bit(&self, unit: usize) -> bool {
        self.units.is_set(unit)
    }

    /// The reach class of unit word `w` (see the module docs).
    fn class_of(words: &[u64], w: usize) -> u8 {
        let word = words[w];
        if word == 0 {
            return NO_RUN;
        }
        let next = words.get(w + 1).copied().unwrap_or(0);
        let across = word.leading_ones() as usize + next.trailing_ones() as usize;
        let across = if word.leading_ones() > 0 {
            floor_log2_capped(across)
        } else {
            0
        };
        inner_class(word).max(across)
    }

    fn is_dirty(&self, w: usize) -> bool {
        self.dirty[w / WORD_BITS] >> (w % WORD_BITS) & 1 == 1
    }

    /// Words `first..=last` changed: their reach classes, and that of word `first - 1` (which
    /// reads word `first`'s trailing free run), may be stale.
    fn mark_dirty(&mut self, first: usize, last: usize) {
        for w in first.saturating_sub(1)..=last {
            self.mark_word_dirty(w);
        }
    }

    fn mark_word_dirty(&mut self, w: usize) {
        let bit = 1u64 << (w % WORD_BITS);
        let word = &mut self.dirty[w / WORD_BITS];
        if *word & bit == 0 {
            *word |= bit;
            self.dirty_list.push(w);
        }
    }

    /// Recompute the reach class of every dirty word and fix the class trees.
    fn refresh_reach(&mut self) {
        // Taken and given back so that its capacity is kept (no allocation per search).
        let mut dirty_list = std::mem::take(&mut self.dirty_list);
        for &w in &dirty_list {
            self.dirty[w / WORD_BITS] &= !(1u64 << (w % WORD_BITS));
            let new = Self::class_of(self.units.words(), w);
            let old = std::mem::replace(&mut self.reach_class[w], new);
            if old == new {
                continue;
            }
            for (c, tree) in self.reach.iter_mut().enumerate() {
                let had = old != NO_RUN && old > c as u8;
                let has = new != NO_RUN && new > c as u8;
                if had != has {
                    tree.assign(w, has);
                }
            }
        }
        dirty_list.clear();
        self.dirty_list = dirty_list;
    }

    /// Consecutive free units starting at `start`, counting at most `limit` (and never past `len`).
    fn free_run_len(&self, start: usize, limit: usize) -> usize {
        let words = self.units.words();
        let end = (start + limit).min(self.len);
        let mut pos = start;
        while pos < end {
            let shift = pos % WORD_BITS;
            let free_here = (!(words[pos / WORD_BITS] >> shift)).trailing_zeros() as usize;
            let room = WORD_BITS - shift;
            pos += free_here.min(room);
            if free_here < room {
                break;
            }
        }
        pos.min(end) - start
    }

    /// The first free unit in `start..start + count`, if any (a scan of the covered words).
    fn first_free_in(&self, start: usize, count: usize) -> Option<usize> {
        word_masks(start, count).find_map(|(w, mask)| {
            let free = self.units.words()[w] & mask;
            (free != 0).then(|| w * WORD_BITS + free.trailing_zeros() as usize)
        })
    }

    fn mark_allocated(&mut self, start: usize, count: usize) {
        self.mark(start, count, false);
    }

    fn mark_free(&mut self, start: usize, count: usize) {
        self.mark(start, count, true);
    }

    /// Set units `start..start + count` free or allocated, counting them, and bring the reach
    /// classes of the words they cover along ([`OrTree::settle_changed`]).
    fn mark(&mut self, start: usize, count: usize, free: bool) {
        for (w, mask) in word_masks(start, count) {
            let old = self.units.words()[w];
            self.units
                .set_word(w, if free { old | mask } else { old & !mask });
        }
        if free {
            self.free += count;
        } else {
            self.free -= count;
        }
        self.settle_changed(start, count, free);
    }

    /// Units `start..start + count` were all allocated (`free` false) or all freed. A word they
    /// cover whole is now all allocated or all free, so its reach class follows from it alone
    /// (none, or 6): those are set at once, a range per class tree, so a run of MiB costs a
    /// few words per tree instead of a refresh per unit word. The words they cover in part, and
    /// the word before (which reads the first one's free run), are marked dirty.
    fn settle_changed(&mut self, start: usize, count: usize, free: bool) {
        let (first, last) = (start / WORD_BITS, (start + count - 1) / WORD_BITS);
        let whole_from = start.div_ceil(WORD_BITS);
        let whole_to = (start + count) / WORD_BITS;
        if whole_from >= whole_to {
            self.mark_dirty(first, last);
            return;
        }
        let class = if free { REACH_CLASSES as u8 } else { NO_RUN };
        self.reach_class[whole_from..whole_to].fill(class);
        for tree in &mut self.reach {
            tree.assign_range(whole_from, whole_to, free);
        }
        if first < whole_from {
            self.mark_dirty(first, first); // covered in part, and the word before it
        } else if first > 0 {
            self.mark_word_dirty(first - 1);
        }
        if whole_to <= last {
            self.mark_word_dirty(whole_to); // covered in part; the whole word before is settled
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_units_is_an_error() {
        assert_eq!(OrTree::new(0).unwrap_err(), OrTreeError::EmptyTree);
    }

    #[test]
    fn levels_for_typical_sizes() {
        for (len, levels) in [(1, 1), (64, 1), (65, 2), (4096, 2), (4097, 3), (32768, 3)] {
            let t = OrTree::new(len).unwrap();
            assert_eq!(t.depth(), levels, "len {len}");
            t.check_invariants().unwrap();
        }
        assert_eq!(OrTree::new(1 << 24).unwrap().depth(), 4);
    }

    #[test]
    fn fills_leftmost_then_reports_no_space() {
        let mut t = OrTree::new(65).unwrap();
        for expect in 0..65 {
            assert_eq!(t.alloc_one().unwrap(), expect);
        }
        assert_eq!(
            t.alloc_one().unwrap_err(),
            OrTreeError::NoSpace { count: 1, align: 1 }
        );
        assert_eq!(t.free_count(), 0);
        t.check_invariants().unwrap();
        t.free_one(64).unwrap();
        assert_eq!(t.first_free(), Some(64));
        t.free_one(3).unwrap();
        assert_eq!(t.alloc_one().unwrap(), 3);
        t.check_invariants().unwrap();
    }

    #[test]
    fn runs_cross_word_and_level_boundaries() {
        let mut t = OrTree::new(5000).unwrap();
        t.alloc_at(0, 60).unwrap();
        t.alloc_at(70, 1).unwrap();
        // 60..70 is a 10-unit hole; a run of 11 must go past unit 70.
        assert_eq!(t.find_run(10, 1).unwrap(), Some(60));
        assert_eq!(t.find_run(11, 1).unwrap(), Some(71));
        assert_eq!(t.find_run(11, 64).unwrap(), Some(128));
        assert_eq!(t.alloc_run(4096, 1).unwrap(), 71);
        assert_eq!(t.find_run(900, 1).unwrap(), None);
        assert_eq!(t.find_run(833, 1).unwrap(), Some(4167));
        t.check_invariants().unwrap();
        t.free_run(71, 4096).unwrap();
        assert_eq!(t.free_count(), 5000 - 61);
        t.check_invariants().unwrap();
    }

    #[test]
    fn aligned_run_that_would_pass_the_end_is_none() {
        let mut t = OrTree::new(100).unwrap();
        t.alloc_one().unwrap();
        assert_eq!(t.find_run(40, 64).unwrap(), None);
        assert_eq!(t.find_run(36, 64).unwrap(), Some(64));
    }

    #[test]
    fn bad_requests_are_typed_errors_and_change_nothing() {
        let mut t = OrTree::new(63).unwrap();
        t.alloc_at(10, 5).unwrap();
        let before = t.clone();
        assert_eq!(t.alloc_run(0, 1).unwrap_err(), OrTreeError::ZeroLength);
        assert_eq!(
            t.alloc_run(64, 1).unwrap_err(),
            OrTreeError::RunTooLong {
                count: 64,
                capacity: 63
            }
        );
        assert_eq!(
            t.alloc_run(2, 3).unwrap_err(),
            OrTreeError::BadAlignment { align: 3 }
        );
        assert_eq!(
            t.alloc_run(2, 0).unwrap_err(),
            OrTreeError::BadAlignment { align: 0 }
        );
        assert_eq!(
            t.free_run(60, 4).unwrap_err(),
            OrTreeError::OutOfRange {
                start: 60,
                count: 4,
                capacity: 63
            }
        );
        assert!(matches!(
            t.free_run(usize::MAX, 2),
            Err(OrTreeError::OutOfRange { .. })
        ));
        assert_eq!(
            t.free_run(12, 5).unwrap_err(),
            OrTreeError::NotAllocated { unit: 15 }
        );
        assert_eq!(
            t.free_one(0).unwrap_err(),
            OrTreeError::NotAllocated { unit: 0 }
        );
        assert_eq!(
            t.alloc_at(8, 3).unwrap_err(),
            OrTreeError::NotFree { unit: 10 }
        );
        assert_eq!(
            t.is_free(63).unwrap_err(),
            OrTreeError::OutOfRange {
                start: 63,
                count: 1,
                capacity: 63
            }
        );
        assert_eq!(t.units, before.units);
        assert_eq!(t.reach_class, before.reach_class);
        assert_eq!(t.free_count(), 58);
        t.check_invariants().unwrap();
    }

    #[test]
    fn invariant_check_catches_a_corrupted_summary() {
        let mut t = OrTree::new(4096).unwrap();
        t.units.corrupt_summary();
        assert!(matches!(
            t.check_invariants(),
            Err(OrTreeError::Invariant(_))
        ));
        let mut t = OrTree::new(70).unwrap();
        t.free -= 1;
        assert!(t.check_invariants().is_err());
        let mut t = OrTree::new(70).unwrap();
        t.units.set_word(1, 1 << 10); // unit 74 does not exist
        assert!(t.check_invariants().is_err());
        let mut t = OrTree::new(700).unwrap();
        t.reach_class[3] = 2;
        assert!(t.check_invariants().is_err());
        let mut t = OrTree::new(700).unwrap();
        t.alloc_at(200, 3).unwrap(); // words 2 and 3 dirty
        t.check_invariants().unwrap();
        t.dirty_list.pop();
        assert!(t.check_invariants().is_err());
    }
}
