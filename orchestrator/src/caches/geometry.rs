//! Cache classes and slab geometry. The constants are the one definition (the device headers'
//! `detail/abi.h` is generated from them); the functions have C++ twins in
//! `device/include/alignmalloc/detail/cache_geometry.h`, which `device/hostcheck` holds equal.
//!
//! Classes 0..=11 are power-of-two classes: class `c` holds objects of `16 << c` bytes, 16 B to
//! 32 KiB, and a lane asking `s` bytes takes the smallest class that fits. A slab is a run of
//! VABlocks of one class: 8192 objects where they take at most 16 MiB, else at least 4096, and at
//! most 16 blocks (32 MiB). So classes up to 256 B fill one block, 512 B-4 KiB take 2-8 blocks
//! (8192 objects up to 2 KiB, 4096 at 4 KiB) and the largest ones 1024-4096 objects. A class
//! moves to its next slab under a lock while its warps wait (docs/caches.md), so more objects a
//! slab means fewer such waits; the 16 MiB keeps what the classes hold idle (each one's current
//! slab's rest and the slabs published ahead) within the mixed test's footprint bound
//! (docs/benchmarks.md, `slab_geometry`).
//!
//! Class 12, the run class, serves lanes asking 32 KiB + 1 B to 4 MiB: its slab (16 blocks,
//! 32 MiB) is cut into 2048 slots of 16 KiB and a lane takes `ceil(s / 16 KiB)` consecutive
//! ones, so an object costs its size rounded up to 16 KiB instead of the next power of two (an
//! object of 48 KiB + 1 B takes 64 KiB, not 128 KiB), and a slab holds at least eight of the
//! largest; the lane whose slots would cross the slab's end takes the next slab, and the slots
//! it left count as freed. The
//! cursor, the live count and the bitmap count slots; an object's first slot carries its bit,
//! and its span (slots, tagged with the slab's life) is kept in the slab's bitmap words from
//! [`RUN_SPANS_AT`] on. A slab's bitmap has one bit per slot, at most 2 MiB / 16 B of them.

use ortree::VABLOCK_BYTES;
use translator::{LEAF_BYTES, WARP_LANES};

/// Number of cache classes: the power-of-two classes (16 B .. 32 KiB) and the run class.
pub const CACHE_CLASSES: usize = 13;
/// The run class: objects of whole 16 KiB slots (see the module docs).
pub const RUN_CLASS: usize = CACHE_CLASSES - 1;
/// log2 of the smallest class's object size.
pub const MIN_OBJECT_LOG2: u32 = 4;
/// The largest size the power-of-two classes hold.
pub const POWER_CLASSES_MAX_BYTES: u64 = 16 << (RUN_CLASS - 1);
/// log2 of a run-class slot (16 KiB: half the largest power-of-two class, so the run class's
/// smallest objects, 32 KiB + 1 B to 48 KiB, cost 48 KiB).
pub const RUN_SLOT_LOG2: u32 = 14;
/// The largest size served from the caches (the run class's largest object).
pub const CACHED_MAX_BYTES: u64 = 4 << 20;
/// The most a warp's run-class lanes may ask in all (rounded to 16 B each) and still be served
/// by the run class: a warp asking more gets one chunk from the host in one round trip, where
/// the run class would wait for the host to publish a slab per 32 MiB (on an H200, warps of 32
/// lanes of 1-2 MiB allocated 10x slower in the run class than from the host).
pub const RUN_WARP_MAX_BYTES: u64 = 4 << 20;
/// A run-class slab's length in VABlocks (2048 slots).
pub const RUN_SLAB_BLOCKS: u64 = MAX_SLAB_BLOCKS;
/// The bitmap word where a run-class slab's spans start (one word per slot after the slots'
/// bits: slab life << 32 | slots of the object starting there, 0 where none starts).
pub const RUN_SPANS_AT: usize = 64;
/// Ring entries per class (slabs published and not yet taken can never exceed it).
pub const RING_LEN: usize = 16;
/// Objects a slab holds at least.
pub const SLAB_OBJECTS: u64 = 4096;
/// Objects a slab holds where they take at most [`SLAB_WANTED_MAX_BYTES`].
pub const SLAB_WANTED_OBJECTS: u64 = 8192;
/// The most bytes a slab takes to hold [`SLAB_WANTED_OBJECTS`] rather than [`SLAB_OBJECTS`].
pub const SLAB_WANTED_MAX_BYTES: u64 = 16 << 20;
/// Longest slab, in VABlocks.
pub const MAX_SLAB_BLOCKS: u64 = 16;
/// `u32` words of one slab's bitmap (enough for the most objects any slab holds).
pub const BITMAP_WORDS: usize = (VABLOCK_BYTES >> MIN_OBJECT_LOG2) as usize / 32;
/// Classes whose slab is at most this many VABlocks claim their next slabs ahead: the lock
/// holder that moved the class to a slab with none held ahead claims the host's next published
/// ones (`device::AHEAD_SLABS` at most) in one claim before it lets the lock go, so the moves
/// after it start them without reading the host's words across the bus. The claim is 40% of a
/// move of a 1-2 block slab (docs/benchmarks.md); larger slabs move less often, and each slab
/// held ahead is room the host cannot take back while kernels run.
pub const CLAIM_AHEAD_MAX_BLOCKS: u64 = 2;
/// The class word: slab number (1-based; 0 = none yet) above this bit, cursor below. Each warp
/// that finds its slab used up adds at most 32 to the cursor before it waits for the next slab,
/// and the lock holder puts an overshot cursor back when the host denies one, so 32 bits hold
/// every cursor.
pub const SLAB_NUMBER_SHIFT: u32 = 32;
/// The cursor bits of the class word.
pub const CURSOR_MASK: u64 = (1 << SLAB_NUMBER_SHIFT) - 1;

/// The class serving a lane that asks `size` bytes; `None` for 0 and for sizes over 4 MiB.
pub fn cache_class(size: u64) -> Option<usize> {
    if size == 0 || size > CACHED_MAX_BYTES {
        return None;
    }
    if size > POWER_CLASSES_MAX_BYTES {
        return Some(RUN_CLASS);
    }
    let log2 = size
        .next_power_of_two()
        .trailing_zeros()
        .max(MIN_OBJECT_LOG2);
    Some((log2 - MIN_OBJECT_LOG2) as usize)
}

/// log2 of one slot of class `class`: its object size, or the run class's slot.
pub fn slot_log2(class: usize) -> u32 {
    if class == RUN_CLASS {
        RUN_SLOT_LOG2
    } else {
        class as u32 + MIN_OBJECT_LOG2
    }
}

/// Bytes of one slot of class `class` (an object, except in the run class).
pub fn class_bytes(class: usize) -> u64 {
    1 << slot_log2(class)
}

/// Slots an object of `size` bytes takes in class `class` (1 outside the run class).
pub fn object_slots(class: usize, size: u64) -> u64 {
    if class == RUN_CLASS {
        size.div_ceil(1 << RUN_SLOT_LOG2)
    } else {
        1
    }
}

/// VABlocks of one slab of class `class`.
pub fn slab_blocks(class: usize) -> u64 {
    if class == RUN_CLASS {
        return RUN_SLAB_BLOCKS;
    }
    let bytes = class_bytes(class);
    let wanted = (SLAB_WANTED_OBJECTS * bytes).min(SLAB_WANTED_MAX_BYTES);
    (wanted.max(SLAB_OBJECTS * bytes) / VABLOCK_BYTES).clamp(1, MAX_SLAB_BLOCKS)
}

/// Whether `class` claims its next slab ahead ([`CLAIM_AHEAD_MAX_BLOCKS`]): 16 B to 512 B.
pub fn claims_ahead(class: usize) -> bool {
    slab_blocks(class) <= CLAIM_AHEAD_MAX_BLOCKS
}

/// Slots in one slab of class `class` (its objects, except in the run class).
pub fn slab_objects(class: usize) -> u64 {
    slab_blocks(class) * VABLOCK_BYTES / class_bytes(class)
}

/// Whether the run class serves the lanes of a warp over 32 KiB whose largest asks `max` and
/// whose sizes, rounded to 16 B, sum to `packed`: only while `packed` is at most
/// [`RUN_WARP_MAX_BYTES`]; then always when the warp asked for contiguous
/// objects, and when it asked for arranged ones only where the host would pack them (the
/// size-class table's chunk, 32 lanes of `max` rounded to 64 KiB, over
/// `ARRANGED_MAX_EXPANSION` times `packed`), so warps whose lanes ask alike keep their
/// arranged layout.
pub fn run_class_serves(arranged: bool, max: u64, packed: u64) -> bool {
    packed <= RUN_WARP_MAX_BYTES
        && (!arranged
            || WARP_LANES as u64 * max.next_multiple_of(LEAF_BYTES)
                > translator::ARRANGED_MAX_EXPANSION * packed)
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
        assert_eq!(cache_class((32 << 10) + 1), Some(RUN_CLASS));
        assert_eq!(cache_class(4 << 20), Some(RUN_CLASS));
        assert_eq!(cache_class((4 << 20) + 1), None);
        for size in 1..=POWER_CLASSES_MAX_BYTES {
            let c = cache_class(size).unwrap();
            assert!(class_bytes(c) >= size && (c == 0 || class_bytes(c - 1) < size));
            assert_eq!(object_slots(c, size), 1);
        }
        for size in POWER_CLASSES_MAX_BYTES + 1..=CACHED_MAX_BYTES {
            let slots = object_slots(RUN_CLASS, size);
            assert!(slots << RUN_SLOT_LOG2 >= size && (slots - 1) << RUN_SLOT_LOG2 < size);
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
        let blocks: Vec<u64> = (0..CACHE_CLASSES).map(slab_blocks).collect();
        assert_eq!(blocks, [1, 1, 1, 1, 1, 2, 4, 8, 8, 16, 16, 16, 16]);
        assert_eq!(slab_objects(0), 131_072);
        assert_eq!(slab_objects(4), 8192, "256 B");
        assert_eq!(slab_objects(7), 8192, "2 KiB");
        assert_eq!(slab_objects(8), 4096, "4 KiB");
        let ahead: Vec<usize> = (0..CACHE_CLASSES).filter(|&c| claims_ahead(c)).collect();
        assert_eq!(ahead, (0..=5).collect::<Vec<_>>(), "16 B to 512 B");
        // The run class: the slots' bits, then a span word per slot, in one slab's words; its
        // largest object fits a slab many times over.
        let slots = slab_objects(RUN_CLASS) as usize;
        assert!(RUN_SPANS_AT >= slots.div_ceil(32) && RUN_SPANS_AT + slots <= BITMAP_WORDS);
        assert!(object_slots(RUN_CLASS, CACHED_MAX_BYTES) * 8 <= slots as u64);
    }

    #[test]
    fn the_run_class_takes_arranged_warps_only_where_the_host_would_pack_them() {
        let k = 1u64 << 10;
        // Contiguous: while the warp's run lanes ask at most 4 MiB in all.
        assert!(run_class_serves(false, 64 * k, 32 * 64 * k));
        assert!(run_class_serves(false, 4 << 20, RUN_WARP_MAX_BYTES));
        assert!(!run_class_serves(false, 64 * k, RUN_WARP_MAX_BYTES + 16));
        assert!(!run_class_serves(true, 3 << 20, RUN_WARP_MAX_BYTES + 16));
        // 32 lanes of 64 KiB: the table's chunk is the packed size; arranged stays.
        assert!(!run_class_serves(true, 64 * k, 32 * 64 * k));
        // One lane of 3 MiB alone: 96 MiB against 3 MiB; packed.
        assert!(run_class_serves(true, 3 << 20, 3 << 20));
        // At the bound (exactly twice) the table's chunk stays.
        assert!(!run_class_serves(true, 64 * k, 16 * 64 * k));
        assert!(run_class_serves(true, 64 * k, 16 * 64 * k - 16));
    }
}
