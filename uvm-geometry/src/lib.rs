//! The sizes of NVIDIA's unified-memory driver (`uvm_va_block.c`, `uvm_perf_prefetch.c`) that
//! alignmalloc is built around, defined once: the CUDA headers' `detail/abi.h` is generated from
//! them (`device/headergen`).
//!
//! The driver migrates managed memory in VA blocks of 2 MiB, each a tree of 64 KiB big pages over
//! 4 KiB pages; its prefetcher grows a fault to the largest node of that tree that is more than
//! half populated.

#![no_std]

/// Bytes of a page.
pub const PAGE_BYTES: u64 = 4 << 10;
/// Bytes of a big page: the driver moves at least this around a fault.
pub const BIG_PAGE_BYTES: u64 = 64 << 10;
/// Bytes of a VA block: the unit the driver services faults, prefetches and evicts in.
pub const VABLOCK_BYTES: u64 = 2 << 20;
/// Pages in a VA block.
pub const PAGES_PER_VABLOCK: usize = (VABLOCK_BYTES / PAGE_BYTES) as usize;
/// Big pages in a VA block.
pub const BIG_PAGES_PER_VABLOCK: usize = (VABLOCK_BYTES / BIG_PAGE_BYTES) as usize;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_512_pages_and_32_big_pages() {
        assert_eq!(PAGES_PER_VABLOCK, 512);
        assert_eq!(BIG_PAGES_PER_VABLOCK, 32);
    }
}
