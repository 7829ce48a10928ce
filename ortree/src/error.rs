//! Typed errors of the allocation structures. No operation panics on bad input; each returns one
//! of these and leaves the structure unchanged.

use thiserror::Error;

/// Errors of [`crate::OrTree`] (and of the [`crate::baseline::BinaryOrTree`] baseline).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OrTreeError {
    /// A tree needs at least one unit.
    #[error("a tree needs at least one unit")]
    EmptyTree,
    /// A run of zero units was asked for.
    #[error("a run of zero units was asked for")]
    ZeroLength,
    /// A run longer than the whole tree was asked for.
    #[error("a run of {count} units cannot fit in {capacity} units")]
    RunTooLong {
        /// Units asked for.
        count: usize,
        /// Units in the tree.
        capacity: usize,
    },
    /// The alignment is not a power of two.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment given.
        align: usize,
    },
    /// The range lies (partly) outside the tree.
    #[error("units {start}..{start}+{count} lie outside 0..{capacity}")]
    OutOfRange {
        /// First unit.
        start: usize,
        /// Units in the range.
        count: usize,
        /// Units in the tree.
        capacity: usize,
    },
    /// A unit to allocate at a fixed place is already allocated.
    #[error("unit {unit} is already allocated")]
    NotFree {
        /// The first allocated unit in the range.
        unit: usize,
    },
    /// A unit to free is not allocated (double free, or never allocated).
    #[error("unit {unit} is not allocated")]
    NotAllocated {
        /// The first free unit in the range.
        unit: usize,
    },
    /// No free run of the requested shape exists.
    #[error("no free run of {count} units aligned to {align}")]
    NoSpace {
        /// Units asked for.
        count: usize,
        /// Alignment asked for.
        align: usize,
    },
    /// `check_invariants` found a broken invariant (a bug, never an input error).
    #[error("invariant broken: {0}")]
    Invariant(String),
}

/// Validate a run request against a tree of `capacity` units (shared by both tree kinds).
pub(crate) fn check_run_request(
    count: usize,
    align: usize,
    capacity: usize,
) -> Result<(), OrTreeError> {
    if count == 0 {
        return Err(OrTreeError::ZeroLength);
    }
    if count > capacity {
        return Err(OrTreeError::RunTooLong { count, capacity });
    }
    if !align.is_power_of_two() {
        return Err(OrTreeError::BadAlignment { align });
    }
    Ok(())
}

/// Errors of [`crate::PortionTree`] and [`crate::PortionPool`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PortionError {
    /// Warptrees have 2^0..=2^4 leaves.
    #[error("a warptree of 2^{log2_leaves} leaves does not exist (0..=4)")]
    BadWarptreeSize {
        /// The log2 of the leaf count asked for.
        log2_leaves: u32,
    },
    /// The VABlock has no free aligned region for the warptree and its padding.
    #[error("no free region of {region_leaves} leaves in this VABlock")]
    BlockFull {
        /// Leaves of the region (the warptree and its empty half).
        region_leaves: u32,
    },
    /// No warptree starts at that leaf (double free, interior or foreign leaf).
    #[error("no warptree starts at leaf {leaf}")]
    NotAWarptree {
        /// The leaf given.
        leaf: u32,
    },
    /// The leaf index is not in 0..32.
    #[error("leaf {leaf} is outside a VABlock's 32 leaves")]
    LeafOutOfRange {
        /// The leaf given.
        leaf: u32,
    },
    /// The VABlock is not a portion block of this pool.
    #[error("VABlock {block} is not a portion block of this pool")]
    UnknownBlock {
        /// The block given.
        block: usize,
    },
    /// The arena has no free VABlock for a new portion block.
    #[error("the arena has no free VABlock for a new portion block")]
    ArenaFull,
    /// The arena refused an operation the pool needed (the pool and arena disagree).
    #[error("the arena refused a pool operation: {0}")]
    Arena(#[from] OrTreeError),
    /// `check_invariants` found a broken invariant (a bug, never an input error).
    #[error("invariant broken: {0}")]
    Invariant(String),
}
