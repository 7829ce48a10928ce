//! wrap: what `alignmalloc wrap` needs besides the interposition itself (which lives in the
//! preload library, `libalignmalloc_preload.so`).
//!
//! - [`options`]: the wrapper's settings, carried from the command to the preload library in
//!   `ALIGNMALLOC_WRAP_*` environment variables, each checked with an error naming the variable.
//! - [`pool`]: the managed allocations of the wrapped program, placed in an alignmalloc arena by
//!   the resolver (large ones on a VABlock of their own, small ones packed), with the arena's
//!   growth and cap, and the record of every allocation for ranges, attributes and the report.
//! - [`report`]: what the program's allocations cost in unified-memory traffic, per allocation,
//!   as JSON and as a table.
//! - [`tiers`]: with tiered placement, which part of each large allocation lives on the GPU
//!   and which in host memory.
//! - [`launch`]: running a program with the preload library and forwarding its exit.
//!
//! No CUDA here: the pool reaches the driver through the [`pool::Reserve`] trait, so everything
//! is tested without a GPU.

pub mod launch;
pub mod options;
pub mod pool;
pub mod report;
pub mod slabs;
pub mod tiers;

pub use options::{Advice, OptionsError, PastCap, Placement, WrapOptions};
pub use pool::{Origin, Pool, PoolAlloc, Reserve};
pub use report::{Counts, Report};
