//! Host-side allocation structures of alignmalloc.
//!
//! - [`OrTree`]: a 64-ary summary bit tree over `n` units with leftmost-first searches for one
//!   unit, a run of `k` units, or an aligned run. The arena uses it with 2 MiB VABlocks as units,
//!   the small space with 256 B units.
//! - [`PortionTree`] / [`PortionPool`]: the warptree arranger. Warptrees of 1..16 leaves of 64 KiB
//!   are placed in portion VABlocks so that no driver prefetch triggered by one warp can reach
//!   another warp's memory.
//! - [`baseline::BinaryOrTree`]: the paper's binary tree, kept for benchmarks.
//!
//! Nothing here panics on bad input: every operation validates first and returns a typed error,
//! leaving the structure as it was.

pub mod baseline;
mod error;
mod ortree;
mod portion;
mod summary;

pub use error::{OrTreeError, PortionError};
pub use ortree::OrTree;
pub use portion::{
    LEAF_BYTES, LEAVES_PER_BLOCK, MAX_WARPTREE_LOG2, PortionPool, PortionTree, VABLOCK_BYTES,
    Warptree,
};
