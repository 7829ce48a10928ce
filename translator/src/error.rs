//! Typed errors of the layout rules.

use thiserror::Error;

/// Why a request, configuration or handle does not fit the layout rules.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// A lane asked for more than the per-lane limit.
    #[error("lane {lane} asked for {size} bytes, over the per-lane limit of {limit}")]
    SizeOverLimit {
        /// The lane.
        lane: u32,
        /// Bytes it asked for.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The thresholds do not describe a valid layout.
    #[error("bad geometry configuration: {0}")]
    BadConfig(&'static str),
    /// A lane index outside 0..32.
    #[error("lane {0} is not in 0..32")]
    LaneOutOfRange(u32),
    /// An address that does not fit the handle's 48 bits.
    #[error("address {0:#x} does not fit in 48 bits")]
    AddressTooWide(u64),
    /// A tile outside 4 KiB..=64 KiB or not a power of two.
    #[error("tile 2^{0} is outside 2^12..=2^16")]
    BadTile(u32),
    /// An arranged address below its own lane's slot (cannot be a real handle).
    #[error("handle {0:#018x} points below its chunk")]
    BadArrangedAddress(u64),
    /// The operation needs an arranged handle and got a plain one.
    #[error("handle {0:#018x} is not arranged")]
    NotArranged(u64),
}
