//! The prefetch hint of one VA block for one fault batch, computed as the UVM driver computes it.
//!
//! 1. The tree's leaves are the block's pages; a page is set when it is resident at the
//!    destination or faulted in this batch.
//! 2. Every big page (64 KiB) holding a faulted page is set whole ("grow fault granularity"); a
//!    block whose end is not big-page aligned has its tail treated as one more region.
//! 3. For each faulted page, ascending, the walk goes from the leaf to the root of a binary tree
//!    over the leaves (nodes aligned to their size, clipped to the block); a node qualifies when
//!    `set_pages * 100 > node_pages * threshold`, and the largest qualifying node's range joins
//!    the hint. The walk stops early once a range reaches the block's end.
//! 4. Faulted pages leave the hint (they migrate as faults); no hint at all until the block has
//!    seen `min_faults` faulted pages migrate to this destination.
//!
//! Assumed here: blocks start on a big-page boundary (the driver adds ghost leaves otherwise),
//! no page is thrashing (thrashing pages are excluded by the driver), and no preferred location
//! is set (a first touch at a preferred location populates the whole block).

use crate::mask::{PAGES_PER_BLOCK, PageMask};

/// The prefetcher's tunables (the driver's module parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefetchParams {
    /// `uvm_perf_prefetch_enable`.
    pub enabled: bool,
    /// `uvm_perf_prefetch_threshold`, percent (1..=100).
    pub threshold: u32,
    /// `uvm_perf_prefetch_min_faults` (1..=20).
    pub min_faults: u32,
    /// Pages of a big page (64 KiB: 16).
    pub big_page_pages: usize,
}

impl Default for PrefetchParams {
    /// The H200 machine's settings: on, 51%, 1 fault, 64 KiB big pages.
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 51,
            min_faults: 1,
            big_page_pages: (uvm_geometry::BIG_PAGE_BYTES / uvm_geometry::PAGE_BYTES) as usize,
        }
    }
}

/// Levels of the tree over `leaves` leaves: log2 of the next power of two, plus one.
fn levels(leaves: usize) -> u32 {
    leaves.next_power_of_two().trailing_zeros() + 1
}

/// The range of the largest node on the walk from `page` up that qualifies, if any.
fn qualifying_region(
    tree: &PageMask,
    leaves: usize,
    page: usize,
    threshold: u32,
) -> Option<(usize, usize)> {
    let mut best = None;
    for level in 0..levels(leaves) {
        let first = page >> level << level;
        let outer = (first + (1 << level)).min(leaves);
        let set = tree.count_in(first, outer);
        if set as u64 * 100 > (outer - first) as u64 * u64::from(threshold) {
            best = Some((first, outer));
        }
    }
    best
}

/// The pages to prefetch (not counting the faulted ones) for a block of `leaves` pages.
/// `faults_so_far` is how many faulted pages of this block migrated to this destination before
/// this batch (for `min_faults`).
pub fn hint(
    params: &PrefetchParams,
    leaves: usize,
    resident: &PageMask,
    faulted: &PageMask,
    faults_so_far: u64,
) -> PageMask {
    debug_assert!(leaves > 0 && leaves <= PAGES_PER_BLOCK);
    if !params.enabled
        || faulted.is_empty()
        || faults_so_far + (faulted.count() as u64) < u64::from(params.min_faults)
    {
        return PageMask::EMPTY;
    }
    let mut tree = resident.or(faulted);
    let big = params.big_page_pages.max(1);
    for first in (0..leaves).step_by(big) {
        let outer = (first + big).min(leaves);
        if faulted.count_in(first, outer) > 0 {
            tree.fill(first, outer);
        }
    }
    let mut prefetch = PageMask::EMPTY;
    for page in faulted.pages().filter(|&p| p < leaves) {
        if let Some((first, outer)) = qualifying_region(&tree, leaves, page, params.threshold) {
            prefetch.fill(first, outer);
            if outer == leaves {
                break;
            }
        }
    }
    prefetch.and_not(faulted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(page: usize) -> PageMask {
        PageMask::range(page, page + 1)
    }

    #[test]
    fn an_isolated_fault_fills_its_big_page() {
        let h = hint(
            &PrefetchParams::default(),
            512,
            &PageMask::EMPTY,
            &one(100),
            0,
        );
        assert_eq!(h, PageMask::range(96, 112).and_not(&one(100)));
    }

    #[test]
    fn the_largest_qualifying_node_wins() {
        // Pages 0..128 resident: a fault at 130 fills 128..144; the 256-page node holds 144 of 256
        // pages (56%) and qualifies; the root (144 of 512) does not.
        let resident = PageMask::range(0, 128);
        let h = hint(&PrefetchParams::default(), 512, &resident, &one(130), 0);
        assert_eq!(h, PageMask::range(0, 256).and_not(&one(130)));
    }

    #[test]
    fn a_node_whose_sibling_half_is_empty_never_qualifies() {
        // A warptree of 64 pages with every page but one resident, its padding half empty: the
        // 128-page node is exactly half set (50% is not over 51%), so nothing past page 64 comes.
        let resident = PageMask::range(0, 63);
        let h = hint(&PrefetchParams::default(), 512, &resident, &one(63), 0);
        assert_eq!(h, PageMask::range(0, 63));
    }

    #[test]
    fn disabled_or_below_min_faults_gives_nothing() {
        let off = PrefetchParams {
            enabled: false,
            ..PrefetchParams::default()
        };
        assert!(hint(&off, 512, &PageMask::EMPTY, &one(3), 0).is_empty());
        let picky = PrefetchParams {
            min_faults: 3,
            ..PrefetchParams::default()
        };
        assert!(hint(&picky, 512, &PageMask::EMPTY, &one(3), 1).is_empty());
        assert!(!hint(&picky, 512, &PageMask::EMPTY, &one(3), 2).is_empty());
    }

    #[test]
    fn a_clipped_block_clips_its_tree() {
        // A 40-page block (the end of an allocation): a fault in the tail fills the tail.
        let h = hint(
            &PrefetchParams::default(),
            40,
            &PageMask::EMPTY,
            &one(35),
            0,
        );
        assert_eq!(h, PageMask::range(32, 40).and_not(&one(35)));
        // With pages 0..32 resident, the root (40 pages: 32 + 8 set) qualifies: nothing is left.
        let h = hint(
            &PrefetchParams::default(),
            40,
            &PageMask::range(0, 32),
            &one(35),
            0,
        );
        assert_eq!(h, PageMask::range(0, 40).and_not(&one(35)));
    }
}
