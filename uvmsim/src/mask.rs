//! [`PageMask`]: one bit per 4 KiB page of a VA block (at most 512 pages).

/// Pages in a full VA block.
pub const PAGES_PER_BLOCK: usize = uvm_geometry::PAGES_PER_VABLOCK;
/// Bytes of a page.
pub const PAGE_BYTES: u64 = uvm_geometry::PAGE_BYTES;

const WORDS: usize = PAGES_PER_BLOCK / 64;

/// A set of pages of one VA block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageMask([u64; WORDS]);

impl PageMask {
    /// No page.
    pub const EMPTY: Self = Self([0; WORDS]);

    /// Pages `first..outer`.
    pub fn range(first: usize, outer: usize) -> Self {
        let mut m = Self::EMPTY;
        m.fill(first, outer);
        m
    }

    /// Add pages `first..outer`.
    pub fn fill(&mut self, first: usize, outer: usize) {
        for page in first..outer.min(PAGES_PER_BLOCK) {
            self.set(page);
        }
    }

    /// Add one page.
    pub fn set(&mut self, page: usize) {
        self.0[page / 64] |= 1 << (page % 64);
    }

    /// Remove one page.
    pub fn clear(&mut self, page: usize) {
        self.0[page / 64] &= !(1 << (page % 64));
    }

    /// Whether `page` is in the set.
    pub fn test(&self, page: usize) -> bool {
        self.0[page / 64] >> (page % 64) & 1 == 1
    }

    /// Pages in the set.
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Pages of `first..outer` in the set.
    pub fn count_in(&self, first: usize, outer: usize) -> usize {
        (first..outer).filter(|&p| self.test(p)).count()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Union.
    pub fn or(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    /// Intersection.
    pub fn and(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// Pages of `self` not in `other`.
    pub fn and_not(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// The pages in the set, ascending.
    pub fn pages(&self) -> impl Iterator<Item = usize> + '_ {
        (0..WORDS).flat_map(move |w| {
            let mut bits = self.0[w];
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(w * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations_agree_with_a_model() {
        let a = PageMask::range(10, 70);
        let mut b = PageMask::EMPTY;
        for p in [0, 64, 69, 70, 511] {
            b.set(p);
        }
        assert_eq!(a.count(), 60);
        assert_eq!(a.or(&b).count(), 63);
        assert_eq!(a.and(&b).pages().collect::<Vec<_>>(), vec![64, 69]);
        assert_eq!(a.and_not(&b).count(), 58);
        assert_eq!(b.pages().collect::<Vec<_>>(), vec![0, 64, 69, 70, 511]);
        assert_eq!(a.count_in(0, 64), 54);
        b.clear(511);
        assert!(!b.test(511) && b.test(0));
        assert!(PageMask::EMPTY.is_empty());
    }
}
