//! orchestrator: the mailbox between GPU warps and the host, and the host service thread that
//! answers it.
//!
//! - [`records`]: request and reply records (twins of `device/include/alignmalloc/detail/records.h`).
//! - [`mailbox`]: the ports, single-writer words, and the post/ack handshake.
//! - [`resolver`]: allocation and free against `ortree` and `translator`, with every bad input
//!   turned into a defined status, over the arena's segments (one per reservation);
//!   [`generations`] tells stale handles from live ones.
//! - [`service`]: the service thread (sweep, batch, resolve, reply) and its shutdown.
//! - [`stats`]: counters and histograms of the service.
//! - [`cpu`]: warps played by CPU threads, and a host arena, to run the whole path without a GPU.
//!
//! Built with `--cfg loom`, only the records and the mailbox are compiled, over loom's atomics,
//! for the model-checked handshake tests.

#[cfg(not(loom))]
pub mod chunks;
#[cfg(not(loom))]
pub mod cpu;
#[cfg(not(loom))]
pub mod generations;
pub mod mailbox;
pub mod records;
#[cfg(not(loom))]
mod recycle;
#[cfg(not(loom))]
pub mod regions;
#[cfg(not(loom))]
pub mod resolver;
#[cfg(not(loom))]
mod segment;
#[cfg(not(loom))]
pub mod service;
#[cfg(not(loom))]
pub mod stats;

pub use mailbox::{Mailbox, MailboxError, Pending};
pub use records::{DeviceMailbox, LaneStatus, Op, ReplyRecord, RequestRecord, Status};
#[cfg(not(loom))]
pub use resolver::{
    Allocation, GROWTH_MARK, GrowthSignal, Resolver, ResolverConfig, ResolverCounters,
    ResolverError,
};
#[cfg(not(loom))]
pub use service::{Server, Service, ServiceConfig};
