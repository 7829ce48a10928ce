//! uvmsim: replays GPU memory-access traces through a model of the UVM driver, so layouts can be
//! compared without a GPU, in CI, and under oversubscription.
//!
//! - [`trace`]: what a program allocates, touches on the host and accesses from kernels.
//! - [`prefetch`]: the driver's prefetch hint for one VA block and batch (bitmap tree, 64 KiB
//!   big pages, the `> threshold%` rule, largest qualifying node).
//! - [`sim`]: fault batching, per-block servicing, 2 MiB root chunks, FIFO eviction, zero-fill;
//!   counts and the execution model's assumptions.
//! - [`cost`]: modelled time from the counts, and its fit to measured times.
//! - [`mask`]: page sets of one VA block.
//! - [`profile`]: named machines (the H200): driver settings and the cost model fitted there.

pub mod cost;
pub mod mask;
pub mod prefetch;
pub mod profile;
pub mod sim;
pub mod trace;

pub use cost::{CostModel, Term};
pub use prefetch::PrefetchParams;
pub use sim::{Counts, KernelReport, READY_ENTRIES, Report, SimConfig, SimError, Simulator};
pub use trace::{Allocation, Event, Kernel, Trace, WarpTrace};
