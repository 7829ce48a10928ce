//! The mailbox client of `detail/client.cuh` (`am::malloc`, `am::malloc_contiguous`, `am::free`,
//! `am::post_free`, `am::free(void*)`) compiled as host C++ and run on a host warp (see
//! [`crate::caches`]), against a [`Mailbox`] in host memory that a service thread answers. A
//! test can then drive the GPU's client and the CPU warps' twin (`orchestrator::cpu::CpuDevice`)
//! with the same steps and compare what each lane got.
//!
//! Invariant: the record handed to the C++ names only the mailbox `self` borrows and the port
//! locks `self` owns, so they outlive every call. The record has no caches (their protocol is
//! [`crate::caches`]'s).

use std::sync::atomic::AtomicU32;

use orchestrator::Mailbox;
use orchestrator::records::{DeviceCaches, DeviceMailbox};

unsafe extern "C" {
    fn am_hostcheck_malloc(
        mailbox: *const DeviceMailbox,
        mask: u32,
        sizes: *const u64,
        contiguous: i32,
        handles: *mut u64,
        statuses: *mut u32,
    );
    fn am_hostcheck_free(
        mailbox: *const DeviceMailbox,
        mask: u32,
        words: *const u64,
        how: i32,
        statuses: *mut u32,
        lane_statuses: *mut u32,
    );
}

/// How a warp frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeCall {
    /// `am::free` of a handle, waiting for the host.
    Free,
    /// `am::post_free` of a handle.
    PostFree,
    /// `am::free` of a pointer (the object's first byte).
    FreePointer,
}

/// Each lane's answer: its handle (0 for a free) or `Status`, and for a free its `LaneStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneAnswers {
    /// Handles from an allocation (0 elsewhere).
    pub handles: [u64; 32],
    /// Each lane's `Status` code.
    pub statuses: [u32; 32],
    /// Each lane's `LaneStatus` code (frees only).
    pub lane_statuses: [u32; 32],
}

/// `detail/client.cuh` over one mailbox, with the port locks it keeps in "device memory".
pub struct HostClient<'a> {
    record: DeviceMailbox,
    _locks: Box<[AtomicU32]>,
    _mailbox: &'a Mailbox,
}

impl<'a> HostClient<'a> {
    /// The C++ client of `mailbox`.
    pub fn new(mailbox: &'a Mailbox) -> Self {
        let locks: Box<[AtomicU32]> = (0..mailbox.ports()).map(|_| AtomicU32::new(0)).collect();
        let (region, _) = mailbox.region();
        let record = DeviceMailbox::over(
            mailbox,
            region as u64,
            locks.as_ptr() as u64,
            DeviceCaches::default(),
        );
        Self {
            record,
            _locks: locks,
            _mailbox: mailbox,
        }
    }

    /// The lanes of `mask` allocate `sizes[lane]` bytes as one warp.
    pub fn malloc(&self, mask: u32, sizes: &[u64; 32], contiguous: bool) -> LaneAnswers {
        let mut out = LaneAnswers {
            handles: [0; 32],
            statuses: [0; 32],
            lane_statuses: [0; 32],
        };
        // SAFETY: the record names the mailbox `self` borrows and the locks it owns, live for
        // the call; the outputs are 32 words each, written one per lane.
        unsafe {
            am_hostcheck_malloc(
                &self.record,
                mask,
                sizes.as_ptr(),
                i32::from(contiguous),
                out.handles.as_mut_ptr(),
                out.statuses.as_mut_ptr(),
            );
        }
        out
    }

    /// The lanes of `mask` free `words[lane]` as one warp, as `how` says.
    pub fn free(&self, mask: u32, words: &[u64; 32], how: FreeCall) -> LaneAnswers {
        let mut out = LaneAnswers {
            handles: [0; 32],
            statuses: [0; 32],
            lane_statuses: [0; 32],
        };
        let how = match how {
            FreeCall::Free => 0,
            FreeCall::PostFree => 1,
            FreeCall::FreePointer => 2,
        };
        // SAFETY: as in `malloc`.
        unsafe {
            am_hostcheck_free(
                &self.record,
                mask,
                words.as_ptr(),
                how,
                out.statuses.as_mut_ptr(),
                out.lane_statuses.as_mut_ptr(),
            );
        }
        out
    }
}
