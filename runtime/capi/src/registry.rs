//! The live runtimes behind `am_runtime*` values, and the real devices whose default mailbox
//! `am_bind` writes (the binding table itself is [`crate::binding`]).
//!
//! An `am_runtime*` is never a real address: it is a token, `id << TOKEN_SHIFT`, for an id that
//! is never reused. Every call looks the token up, so a destroyed, forged or null runtime is
//! [`AM_ERR_INVALID_RUNTIME`], never a dereference of freed memory.
//!
//! Invariants: a token maps to at most one runtime, and only while it is live. A unit has one
//! copy of its default mailbox per device (a `__device__` variable), and its binder writes the
//! copy of the device whose context is current, so every write runs with the bound runtime's
//! context current. Lock order: the binding table's lock, then the registry's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use runtime::Runtime;
use runtime::cudarc::driver::CudaContext;
use runtime::faults::FaultReport;

use crate::binding::{Binder, Bindings, DeviceCopies};
use crate::status::{
    AM_ERR_CUDA, AM_ERR_INVALID_RUNTIME, AM_ERR_NOTHING_TO_BIND, AM_ERR_NULL_ARGUMENT, Failure,
};
use crate::types::{DeviceMailbox, am_runtime, am_unit_binder};

/// Low bits of a token that are always zero.
const TOKEN_SHIFT: u32 = 8;

/// A live runtime and what the C side reads from it.
pub(crate) struct Entry {
    pub runtime: Runtime,
    /// The last report `am_take_faults` took, whose chunks `am_fault_chunk` reads.
    pub faults: Mutex<FaultReport>,
}

struct Registry {
    runtimes: BTreeMap<u64, Arc<Entry>>,
}

/// A device's copies, written with its runtime's context current.
struct CudaDevice(Arc<CudaContext>);

impl DeviceCopies for CudaDevice {
    fn write(&self, units: &[Binder], mailbox: &DeviceMailbox) -> Result<(), Failure> {
        runtime::cuda::with_current(&self.0, || write_units(units, mailbox)).map_err(|e| {
            Failure::new(
                AM_ERR_CUDA,
                format!("making the runtime's context current to bind: {e}"),
            )
        })?
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    runtimes: BTreeMap::new(),
});
static BINDINGS: Bindings<CudaDevice> = Bindings::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The registry, whatever a panicking holder left (its maps are consistent between statements).
fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

fn id_of(token: *const am_runtime) -> Option<u64> {
    let bits = token as usize as u64;
    (bits != 0 && bits.trailing_zeros() >= TOKEN_SHIFT).then_some(bits >> TOKEN_SHIFT)
}

/// Register a new runtime; its token.
pub(crate) fn insert(runtime: Runtime) -> *mut am_runtime {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let entry = Arc::new(Entry {
        runtime,
        faults: Mutex::new(FaultReport::default()),
    });
    registry().runtimes.insert(id, entry);
    (id << TOKEN_SHIFT) as usize as *mut am_runtime
}

fn invalid(token: *const am_runtime) -> Failure {
    if token.is_null() {
        return Failure::new(
            AM_ERR_NULL_ARGUMENT,
            "`runtime` is null; create one with am_runtime_create",
        );
    }
    Failure::new(
        AM_ERR_INVALID_RUNTIME,
        format!("{token:p} is not a live runtime: it was destroyed, or never created"),
    )
}

/// The live runtime behind `token`.
pub(crate) fn get(token: *const am_runtime) -> Result<Arc<Entry>, Failure> {
    id_of(token)
        .and_then(|id| registry().runtimes.get(&id).cloned())
        .ok_or_else(|| invalid(token))
}

/// Unregister the runtime behind `token`, unbind it wherever it is bound, and drop it (after
/// calls in flight on other threads finish).
pub(crate) fn remove(token: *const am_runtime) -> Result<(), Failure> {
    let id = id_of(token).ok_or_else(|| invalid(token))?;
    let entry = registry()
        .runtimes
        .remove(&id)
        .ok_or_else(|| invalid(token))?;
    // Unbound before the mailbox goes: a kernel launched from here on sees no default mailbox.
    let unbound = BINDINGS.unbind(id);
    // Dropping waits for the context's kernels and stops the service thread.
    drop(entry);
    unbound
}

/// Write `mailbox` into every unit; the first failure names the unit and its CUDA error.
fn write_units(units: &[Binder], mailbox: &DeviceMailbox) -> Result<(), Failure> {
    let mut first_failure = None;
    for (index, binder) in units.iter().enumerate() {
        // SAFETY: the binder was registered by alignmalloc.cuh (bind_this_unit), which reads
        // one DeviceMailbox through the pointer, valid for the call.
        let error = unsafe { binder(mailbox) };
        if error != 0 && first_failure.is_none() {
            first_failure = Some(Failure::new(
                AM_ERR_CUDA,
                format!(
                    "cudaMemcpyToSymbol of the default mailbox failed with cudaError_t {error} \
                     in translation unit {index} of {}",
                    units.len()
                ),
            ));
        }
    }
    first_failure.map_or(Ok(()), Err)
}

/// Register a translation unit's binder; write the mailbox of every device's bound runtime at
/// once.
pub(crate) fn register_unit(binder: am_unit_binder) -> Result<(), Failure> {
    BINDINGS.register_unit(binder.ok_or_else(|| Failure::null("binder"))?)
}

/// Make `token`'s runtime the default mailbox of every registered unit's kernels on its device
/// (another runtime bound on that device is replaced; other devices keep theirs).
pub(crate) fn bind(token: *const am_runtime) -> Result<(), Failure> {
    let entry = get(token)?;
    let mailbox = entry.runtime.mailbox_arg()?.0;
    let context = entry.runtime.context()?.clone();
    let ordinal = entry.runtime.device_info().map_or(0, |d| d.ordinal);
    if !BINDINGS.has_units() {
        return Err(Failure::new(
            AM_ERR_NOTHING_TO_BIND,
            "no translation unit of this program includes <alignmalloc/alignmalloc.cuh> \
             compiled by nvcc, so there is no default mailbox to bind; pass the mailbox of \
             am_runtime_device_mailbox to your kernels instead",
        ));
    }
    let id = id_of(token).ok_or_else(|| invalid(token))?;
    BINDINGS.bind(
        id,
        ordinal,
        mailbox,
        CudaDevice(context),
        || registry().runtimes.contains_key(&id),
        || invalid(token),
    )
}
