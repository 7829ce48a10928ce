//! Arrays of atomic words shared by the host and the GPU: one zeroed, page-aligned host
//! allocation, each array on pages of its own, registered with the GPU as a whole (pinned and
//! mapped) by the runtime. The mailbox and the cache channel are made of these.
//!
//! Invariants: every array is zero at first and only ever reached through atomics (so the GPU may
//! write it while the host reads it); arrays never share a page, so words written by the device
//! and words written by the host never share a cache line. Under loom the arrays are loom's
//! atomics in boxes, so the model checker sees every access.

use crate::sync::{AtomicU32, AtomicU64};

/// The width of one array's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    /// `u32` words.
    U32,
    /// `u64` words.
    U64,
}

impl Width {
    #[cfg(not(loom))]
    fn bytes(self) -> usize {
        match self {
            Width::U32 => 4,
            Width::U64 => 8,
        }
    }
}

/// Page size the arrays are aligned and padded to.
#[cfg(not(loom))]
pub(crate) const PAGE: usize = 4096;

/// The arrays.
#[cfg(not(loom))]
pub(crate) struct SharedArrays {
    base: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
    offsets: Vec<usize>,
    arrays: Vec<(Width, usize)>,
}

#[cfg(not(loom))]
// SAFETY: the storage is only reached through atomics (see the accessors).
unsafe impl Send for SharedArrays {}
#[cfg(not(loom))]
// SAFETY: as above.
unsafe impl Sync for SharedArrays {}

#[cfg(not(loom))]
impl SharedArrays {
    /// Zeroed arrays of these widths and lengths, in this order.
    pub(crate) fn new(arrays: &[(Width, usize)]) -> Self {
        let mut offsets = Vec::with_capacity(arrays.len());
        let mut at = 0;
        for &(width, len) in arrays {
            offsets.push(at);
            at += (len * width.bytes()).max(1).next_multiple_of(PAGE);
        }
        let layout =
            std::alloc::Layout::from_size_align(at.max(PAGE), PAGE).expect("arrays fit a layout");
        // SAFETY: the layout's size is non-zero (at least one page).
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        let base =
            std::ptr::NonNull::new(base).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self {
            base,
            layout,
            offsets,
            arrays: arrays.to_vec(),
        }
    }

    fn words<T>(&self, index: usize, width: Width) -> &[T] {
        let (w, len) = self.arrays[index];
        assert_eq!(w, width, "array {index} read at another width");
        // SAFETY: the offset and length lie inside the allocation (computed together in `new`),
        // offsets are page aligned, the memory is zero-initialised and `T` is the atomic integer
        // of the array's width (the callers below), for which zero bytes are a valid value and
        // every access is atomic; it lives as long as `self`.
        unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.offsets[index]).cast::<T>(), len)
        }
    }

    /// Array `index`, which must be of `u32` words.
    pub(crate) fn u32s(&self, index: usize) -> &[AtomicU32] {
        self.words(index, Width::U32)
    }

    /// Array `index`, which must be of `u64` words.
    pub(crate) fn u64s(&self, index: usize) -> &[AtomicU64] {
        self.words(index, Width::U64)
    }

    /// The one host allocation holding every array: `(address, bytes)`, page aligned.
    pub(crate) fn region(&self) -> (usize, usize) {
        (self.base.as_ptr() as usize, self.layout.size())
    }

    /// Byte offset of each array in [`SharedArrays::region`].
    pub(crate) fn offsets(&self) -> &[usize] {
        &self.offsets
    }
}

#[cfg(not(loom))]
impl Drop for SharedArrays {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// The arrays (loom: boxes of loom's atomics).
#[cfg(loom)]
pub(crate) struct SharedArrays {
    u32s: Vec<Box<[AtomicU32]>>,
    u64s: Vec<Box<[AtomicU64]>>,
}

#[cfg(loom)]
impl SharedArrays {
    pub(crate) fn new(arrays: &[(Width, usize)]) -> Self {
        let of = |width: Width, len: usize, w: Width| if width == w { len } else { 0 };
        Self {
            u32s: arrays
                .iter()
                .map(|&(w, len)| {
                    (0..of(w, len, Width::U32))
                        .map(|_| AtomicU32::new(0))
                        .collect()
                })
                .collect(),
            u64s: arrays
                .iter()
                .map(|&(w, len)| {
                    (0..of(w, len, Width::U64))
                        .map(|_| AtomicU64::new(0))
                        .collect()
                })
                .collect(),
        }
    }

    pub(crate) fn u32s(&self, index: usize) -> &[AtomicU32] {
        &self.u32s[index]
    }

    pub(crate) fn u64s(&self, index: usize) -> &[AtomicU64] {
        &self.u64s[index]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn arrays_sit_on_pages_of_their_own_and_start_zeroed() {
        let a = SharedArrays::new(&[(Width::U32, 3), (Width::U64, 1000), (Width::U32, 1)]);
        let (base, bytes) = a.region();
        assert_eq!(base % PAGE, 0);
        assert_eq!(a.offsets(), &[0, PAGE, 3 * PAGE]);
        assert_eq!(bytes, 4 * PAGE);
        assert_eq!(a.u64s(1).len(), 1000);
        assert!(a.u64s(1).iter().all(|w| w.load(Ordering::Relaxed) == 0));
        a.u32s(2)[0].store(7, Ordering::Relaxed);
        assert_eq!(a.u32s(2)[0].load(Ordering::Relaxed), 7);
    }

    #[test]
    #[should_panic(expected = "read at another width")]
    fn an_array_read_at_another_width_is_refused() {
        let a = SharedArrays::new(&[(Width::U32, 4)]);
        let _ = a.u64s(0);
    }
}
