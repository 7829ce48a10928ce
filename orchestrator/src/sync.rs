//! The atomics and waiting hints of the host-device protocol: loom's under `cfg(loom)`, so the
//! model checker explores the real mailbox, client and server code, and std's otherwise.
//!
//! Invariant: every word that two parties of the protocol share (the mailbox's arrays, the port
//! locks of [`crate::cpu::CpuDevice`]) is one of these types, and every loop that waits on such a
//! word calls [`spin_wait`] or [`yield_now`], which under loom hand the turn to another thread.
//! Words only one thread touches, and counters no decision reads, may stay std's.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU32, AtomicU64, fence};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicU32, AtomicU64, fence};

/// A short busy wait between two polls of a shared word.
#[inline]
pub fn spin_wait() {
    #[cfg(loom)]
    loom::hint::spin_loop();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Give the processor to another thread between two polls.
#[inline]
pub fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
