//! `SummaryBits`: a bit vector with 64-ary OR summaries above it, the building block of
//! [`crate::OrTree`].
//!
//! `levels[0]` holds the bits; bit `j` of word `w` on `levels[l + 1]` is set exactly when word
//! `w * 64 + j` of `levels[l]` is non-zero. The top level is one word. So the first set bit at or
//! after any position is found with one `trailing_zeros` per level on the way up and down.

pub(crate) const WORD_BITS: usize = 64;

/// The words covering bits `start..start + count` (`count > 0`), each with the mask of those
/// bits in it.
pub(crate) fn word_masks(start: usize, count: usize) -> impl Iterator<Item = (usize, u64)> {
    let end = start + count;
    (start / WORD_BITS..end.div_ceil(WORD_BITS)).map(move |w| {
        let lo = (w * WORD_BITS).max(start) - w * WORD_BITS;
        let hi = ((w + 1) * WORD_BITS).min(end) - w * WORD_BITS;
        let mask = if hi - lo == WORD_BITS {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        (w, mask)
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SummaryBits {
    levels: Vec<Vec<u64>>,
}

impl SummaryBits {
    /// Summaries over `bits` (at least one word).
    pub(crate) fn new(bits: Vec<u64>) -> Self {
        assert!(!bits.is_empty(), "summary over no words");
        let mut levels = vec![bits];
        while levels.last().expect("non-empty").len() > 1 {
            let below = levels.last().expect("non-empty");
            let mut above = vec![0u64; below.len().div_ceil(WORD_BITS)];
            for (w, &word) in below.iter().enumerate() {
                if word != 0 {
                    above[w / WORD_BITS] |= 1 << (w % WORD_BITS);
                }
            }
            levels.push(above);
        }
        Self { levels }
    }

    /// Levels, the bits included.
    pub(crate) fn depth(&self) -> usize {
        self.levels.len()
    }

    /// The bit words.
    pub(crate) fn words(&self) -> &[u64] {
        &self.levels[0]
    }

    /// Whether bit `index` is set (`false` past the end).
    #[inline]
    pub(crate) fn is_set(&self, index: usize) -> bool {
        self.levels[0]
            .get(index / WORD_BITS)
            .is_some_and(|w| w >> (index % WORD_BITS) & 1 == 1)
    }

    /// First set bit, by straight descent.
    #[inline]
    pub(crate) fn first_set(&self) -> Option<usize> {
        let mut index = 0;
        for words in self.levels.iter().rev() {
            let word = words[index];
            if word == 0 {
                return None;
            }
            index = index * WORD_BITS + word.trailing_zeros() as usize;
        }
        Some(index)
    }

    /// First set bit at index >= `from`.
    pub(crate) fn next_set(&self, from: usize) -> Option<usize> {
        self.next_set_on(0, from)
    }

    fn next_set_on(&self, level: usize, from: usize) -> Option<usize> {
        let words = &self.levels[level];
        let w = from / WORD_BITS;
        if w >= words.len() {
            return None;
        }
        let bits = words[w] & (u64::MAX << (from % WORD_BITS));
        if bits != 0 {
            return Some(w * WORD_BITS + bits.trailing_zeros() as usize);
        }
        if level + 1 == self.levels.len() {
            return None; // the top level is one word
        }
        let next_word = self.next_set_on(level + 1, w + 1)?;
        let bits = words[next_word];
        debug_assert!(bits != 0, "summary bit set over an empty word");
        Some(next_word * WORD_BITS + bits.trailing_zeros() as usize)
    }

    /// Replace bit word `w`, keeping the summaries exact.
    #[inline]
    pub(crate) fn set_word(&mut self, w: usize, new: u64) {
        let old = std::mem::replace(&mut self.levels[0][w], new);
        if (old == 0) != (new == 0) {
            self.propagate(w, new != 0);
        }
    }

    /// Set or clear bit `index`.
    #[inline]
    pub(crate) fn assign(&mut self, index: usize, value: bool) {
        let w = index / WORD_BITS;
        let bit = 1u64 << (index % WORD_BITS);
        let old = self.levels[0][w];
        self.set_word(w, if value { old | bit } else { old & !bit });
    }

    /// Set or clear bits `start..end`.
    pub(crate) fn assign_range(&mut self, start: usize, end: usize, value: bool) {
        if start >= end {
            return;
        }
        for (w, mask) in word_masks(start, end - start) {
            let old = self.levels[0][w];
            self.set_word(w, if value { old | mask } else { old & !mask });
        }
    }

    /// Word `w` of level 0 became non-empty (`nonempty`) or empty: fix the summaries above it.
    fn propagate(&mut self, w: usize, nonempty: bool) {
        let mut index = w;
        for words in &mut self.levels[1..] {
            let word = &mut words[index / WORD_BITS];
            let was_empty = *word == 0;
            let bit = 1u64 << (index % WORD_BITS);
            if nonempty {
                *word |= bit;
                if !was_empty {
                    return;
                }
            } else {
                *word &= !bit;
                if *word != 0 {
                    return;
                }
            }
            index /= WORD_BITS;
        }
    }

    /// Check every summary bit against the level below; `Err` names the first disagreement.
    pub(crate) fn check(&self) -> Result<(), String> {
        for l in 0..self.levels.len() - 1 {
            let (below, above) = (&self.levels[l], &self.levels[l + 1]);
            if above.len() != below.len().div_ceil(WORD_BITS) {
                return Err(format!("level {} has {} words", l + 1, above.len()));
            }
            for (w, &word) in below.iter().enumerate() {
                let summary = above[w / WORD_BITS] >> (w % WORD_BITS) & 1 == 1;
                if summary != (word != 0) {
                    return Err(format!("level {} bit {w} disagrees with its word", l + 1));
                }
            }
            let tail = below.len() % WORD_BITS;
            if tail != 0 && above[above.len() - 1] >> tail != 0 {
                return Err(format!(
                    "level {} summarises words that do not exist",
                    l + 1
                ));
            }
        }
        if self.levels.last().map(Vec::len) != Some(1) {
            return Err("the top level is not one word".into());
        }
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn corrupt_summary(&mut self) {
        if self.levels.len() > 1 {
            self.levels[1][0] ^= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_set_climbs_and_descends() {
        let mut bits = vec![0u64; 5000];
        bits[4999] = 1 << 7;
        bits[70] = 1 << 63;
        let s = SummaryBits::new(bits);
        assert_eq!(s.depth(), 4);
        assert_eq!(s.first_set(), Some(70 * 64 + 63));
        assert_eq!(s.next_set(70 * 64 + 64), Some(4999 * 64 + 7));
        assert_eq!(s.next_set(4999 * 64 + 8), None);
        s.check().unwrap();
    }

    #[test]
    fn updates_keep_summaries_exact() {
        let mut s = SummaryBits::new(vec![0u64; 4097]);
        s.assign(4096 * 64 + 3, true);
        assert_eq!(s.first_set(), Some(4096 * 64 + 3));
        s.set_word(12, 5);
        s.check().unwrap();
        s.assign(4096 * 64 + 3, false);
        s.set_word(12, 0);
        assert_eq!(s.first_set(), None);
        s.check().unwrap();
        s.corrupt_summary();
        assert!(s.check().is_err());
    }
}
