//! orchestrator: the mailbox between GPU warps and the host, and the host service thread that
//! answers it.
//!
//! - [`records`]: request and reply records and their codes, the one definition of both sides
//!   (`device/include/alignmalloc/detail/abi.h` is generated from them, see [`cpp_decl`]).
//! - [`mailbox`]: the ports, single-writer words, and the post/ack handshake.
//! - [`resolver`]: allocation and free against `ortree` and `translator`, with every bad input
//!   turned into a defined status, over the arena's segments (one per reservation);
//!   [`generations`] tells stale handles from live ones.
//! - [`placement`]: the tiers of the arena's segments (device or host memory) and which one each
//!   allocation asks first.
//! - [`service`]: the service thread (sweep, batch, resolve, reply) and its shutdown.
//! - [`stats`]: counters and histograms of the service.
//! - [`cpu`]: warps played by CPU threads, and a host arena, to run the whole path without a GPU.
//!
//! - [`sync`]: the protocol's atomics, loom's under `--cfg loom`: the model-checked tests
//!   (`tests/loom.rs`) run the real mailbox, CPU client and server.

pub mod caches;
pub mod chunks;
pub mod cpp_decl;
pub mod cpu;
pub mod generations;
pub mod mailbox;
pub mod placement;
pub mod records;
mod recycle;
pub mod regions;
pub mod resolver;
mod segment;
pub mod service;
mod shared;
pub mod stats;
pub mod sync;

pub use mailbox::{Mailbox, MailboxError, Pending};
pub use placement::{PlacementRule, Tier};
pub use records::{
    DeviceCaches, DeviceMailbox, LaneStatus, Op, ReplyRecord, RequestRecord, Status,
};
pub use resolver::{
    Allocation, BadFree, GROWTH_MARK, GrowthSignal, KEPT_BAD_FREES, Resolver, ResolverConfig,
    ResolverCounters, ResolverError,
};
pub use segment::PLAIN_SMALL_MAX;
pub use service::{Server, Service, ServiceConfig};
