//! orchestrator: the pinned host-mapped mailbox and the host service thread that resolves warp
//! requests against `ortree` and `translator`.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and has no functionality.
