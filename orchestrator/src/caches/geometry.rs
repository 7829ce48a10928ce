//! Cache classes and slab geometry (twin of the constants and functions in
//! `device/include/alignmalloc/detail/cache.cuh`; `device/hostcheck` holds them equal).
//!
//! Class `c` holds objects of `16 << c` bytes, 16 B to 32 KiB; a lane asking `s` bytes takes the
//! smallest class that fits. A slab is a run of VABlocks of one class: at least 4096 objects, at
//! most 16 blocks (32 MiB), so classes up to 512 B fill one block and the largest ones
//! 1024-2048 objects. A slab's bitmap has one bit per object, at most 2 MiB / 16 B of them.

use ortree::VABLOCK_BYTES;

/// Number of cache classes (16 B .. 32 KiB).
pub const CACHE_CLASSES: usize = 12;
/// log2 of the smallest class's object size.
pub const MIN_OBJECT_LOG2: u32 = 4;
/// The largest size served from the caches.
pub const CACHED_MAX_BYTES: u64 = 16 << (CACHE_CLASSES - 1);
/// Ring entries per class (slabs published and not yet taken can never exceed it).
pub const RING_LEN: usize = 16;
/// Objects a slab should hold at least.
const SLAB_OBJECTS: u64 = 4096;
/// Longest slab, in VABlocks.
const MAX_SLAB_BLOCKS: u64 = 16;
/// `u32` words of one slab's bitmap (enough for the most objects any slab holds).
pub const BITMAP_WORDS: usize = (VABLOCK_BYTES >> MIN_OBJECT_LOG2) as usize / 32;
/// The class word: slab number (1-based; 0 = none yet) above this bit, cursor below. Each warp
/// that finds its slab used up adds at most 32 to the cursor before it waits for the next slab,
/// and the lock holder puts an overshot cursor back when the host denies one, so 32 bits hold
/// every cursor.
pub const SLAB_NUMBER_SHIFT: u32 = 32;
/// The cursor bits of the class word.
pub const CURSOR_MASK: u64 = (1 << SLAB_NUMBER_SHIFT) - 1;

/// The class serving a lane that asks `size` bytes; `None` for 0 and for sizes over 32 KiB.
pub fn cache_class(size: u64) -> Option<usize> {
    if size == 0 || size > CACHED_MAX_BYTES {
        return None;
    }
    let log2 = size
        .next_power_of_two()
        .trailing_zeros()
        .max(MIN_OBJECT_LOG2);
    Some((log2 - MIN_OBJECT_LOG2) as usize)
}

/// Bytes of one object of class `class`.
pub fn class_bytes(class: usize) -> u64 {
    1 << (class as u32 + MIN_OBJECT_LOG2)
}

/// VABlocks of one slab of class `class`.
pub fn slab_blocks(class: usize) -> u64 {
    (SLAB_OBJECTS * class_bytes(class) / VABLOCK_BYTES).clamp(1, MAX_SLAB_BLOCKS)
}

/// Objects in one slab of class `class`.
pub fn slab_objects(class: usize) -> u64 {
    slab_blocks(class) * VABLOCK_BYTES / class_bytes(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_1_byte_to_32_kib_with_the_smallest_that_fits() {
        assert_eq!(cache_class(0), None);
        assert_eq!(cache_class(1), Some(0));
        assert_eq!(cache_class(16), Some(0));
        assert_eq!(cache_class(17), Some(1));
        assert_eq!(cache_class(2048), Some(7));
        assert_eq!(cache_class(32 << 10), Some(11));
        assert_eq!(cache_class((32 << 10) + 1), None);
        for size in 1..=CACHED_MAX_BYTES {
            let c = cache_class(size).unwrap();
            assert!(class_bytes(c) >= size && (c == 0 || class_bytes(c - 1) < size));
        }
    }

    #[test]
    fn slabs_fill_whole_blocks_and_their_bitmaps() {
        for c in 0..CACHE_CLASSES {
            let objects = slab_objects(c);
            assert_eq!(objects * class_bytes(c), slab_blocks(c) * VABLOCK_BYTES);
            assert!(objects as usize <= BITMAP_WORDS * 32);
            assert!(objects >= 1024);
        }
        assert_eq!(slab_blocks(0), 1);
        assert_eq!(slab_objects(0), 131_072);
        assert_eq!(slab_blocks(11), 16);
    }
}
