//! Frees that wait for their stream, not for the host. A framework frees a tensor's memory as
//! soon as it has queued the last kernel that reads it; waiting for the stream at each free (as
//! `cuMemFree` does) stops the host once per tensor and empties the GPU's queue. Instead a free
//! records an event on its stream, and the pool takes the memory back once the event has passed:
//! checked at each later allocation and free, and all at once (waiting) when an allocation
//! finds no room.
//!
//! Invariants: the pool frees an address only after the event recorded at its free call has
//! completed, so no kernel queued before that call still uses the memory when it is handed out
//! again; nothing waits for an event while holding the pool's lock; events are reused, never
//! destroyed while pending.

use parking_lot::Mutex;
use wrap::pool::PoolFree;

use crate::driver::{self, CU_EVENT_DISABLE_TIMING, CUDA_ERROR_NOT_READY, CUDA_SUCCESS};
use crate::driver::{CuResult, DevicePtr, Event, Stream};
use crate::{hooks, pluggable, state};

/// An event of this library's (a driver handle, usable from any thread).
struct Owned(Event);

// SAFETY: a CUDA event handle may be recorded, queried and waited for from any thread.
unsafe impl Send for Owned {}

/// A free waiting for its event.
struct Pending {
    address: DevicePtr,
    event: Owned,
    /// When it was asked for (the pool's clock), for the report's lifetimes.
    freed_at: u64,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static SPARE_EVENTS: Mutex<Vec<Owned>> = Mutex::new(Vec::new());

/// Free `address` once the work queued on `stream` so far is done. An address that is not an
/// arena allocation's start goes to the driver's free after the stream (refused there if it is
/// no allocation); so does every free where the driver has no events to give.
pub fn free(address: DevicePtr, stream: Stream) -> CuResult {
    if !hooks::arena_allocation_starts_at(address) {
        return hooks::free_after_stream(address, stream);
    }
    let Some(event) = event_on(stream) else {
        return hooks::free_after_stream(address, stream);
    };
    PENDING.lock().push(Pending {
        address,
        event,
        freed_at: state::ticks(),
    });
    reap(false);
    CUDA_SUCCESS
}

/// An event recorded on `stream` (a spare one, else a new one); `None` where the driver gives
/// none (logged).
fn event_on(stream: Stream) -> Option<Owned> {
    let d = driver::driver();
    let (create, record) = (d.event_create?, d.event_record?);
    let event = match SPARE_EVENTS.lock().pop() {
        Some(e) => e,
        None => {
            let mut e: Event = std::ptr::null_mut();
            // SAFETY: a live out-pointer; the caller's context is current (it frees).
            let r = unsafe { create(&mut e, CU_EVENT_DISABLE_TIMING) };
            if r != CUDA_SUCCESS {
                tracing::warn!(
                    result = r,
                    "cuEventCreate failed: this free waits for its stream"
                );
                return None;
            }
            Owned(e)
        }
    };
    // SAFETY: our event and the caller's stream, of the current context.
    let r = unsafe { record(event.0, stream) };
    if r != CUDA_SUCCESS {
        tracing::warn!(
            result = r,
            "cuEventRecord failed: this free waits for its stream"
        );
        SPARE_EVENTS.lock().push(event);
        return None;
    }
    Some(event)
}

/// Give the pool the pending frees whose events have passed (`wait`: all of them, waiting for
/// each); how many it took back.
pub fn reap(wait: bool) -> usize {
    let d = driver::driver();
    let (Some(query), Some(synchronize)) = (d.event_query, d.event_synchronize) else {
        return 0;
    };
    let done: Vec<Pending> = {
        let mut pending = PENDING.lock();
        if pending.is_empty() {
            return 0;
        }
        let (done, left): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut *pending).into_iter().partition(|p| {
                // SAFETY: our recorded event. Any answer but "not ready" means the stream's
                // work up to it is over (done, or failed for good).
                unsafe {
                    if wait {
                        synchronize(p.event.0) != CUDA_ERROR_NOT_READY
                    } else {
                        query(p.event.0) != CUDA_ERROR_NOT_READY
                    }
                }
            });
        *pending = left;
        done
    };
    let count = done.len();
    for p in done {
        match hooks::release(p.address, p.freed_at) {
            Some(PoolFree::Freed) => {}
            outcome => {
                // A second free of the same allocation, made while the first waited.
                tracing::warn!(address = p.address, ?outcome, "free refused by the pool");
                pluggable::failed(&pluggable::FAILED_FREES, driver::CUDA_ERROR_INVALID_VALUE);
            }
        }
        SPARE_EVENTS.lock().push(p.event);
    }
    count
}
