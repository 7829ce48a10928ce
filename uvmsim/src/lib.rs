//! uvmsim: replays GPU memory-access traces through a model of the UVM driver (fault batching,
//! the 51% prefetch tree, 2 MiB root chunks and eviction).
//!
//! Not built yet: this crate is a placeholder in the workspace layout and has no functionality.
