//! Which runtime each device's default mailbox names, and the translation units that hold it.
//!
//! `am_bind`, `am_runtime_destroy` and `am_register_unit` change the same two things: the
//! units' copies of the default mailbox (on the GPU) and the record of which runtime is bound
//! on each device (here). One mutex is held across both, so each of those calls is atomic with
//! respect to the others: a bind that races a destroy either fails (the runtime is gone) or
//! finishes first and is then undone by the destroy; of two binds on one device the later one
//! is both written and recorded.
//!
//! Invariants, whenever the lock is free: `bound` holds at most one runtime per device, and it
//! was live when it was recorded and has not been unbound since; every registered unit's copy
//! on a device was last written that device's bound mailbox, or the all-zero unbound one, as far
//! as the writes reported success. A destroy unbinds before the runtime's mailbox is released,
//! so no kernel launched after the unbind is handed a released mailbox.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::status::Failure;
use crate::types::DeviceMailbox;

/// A registered unit's binder (`am_unit_binder` without its null).
pub(crate) type Binder = unsafe extern "C" fn(*const DeviceMailbox) -> std::ffi::c_int;

/// Where a device's copies of the default mailbox are written: the real device makes its
/// context current and calls each unit's binder; a test records the writes.
pub(crate) trait DeviceCopies {
    /// Write `mailbox` into this device's copy of every unit in `units`.
    fn write(&self, units: &[Binder], mailbox: &DeviceMailbox) -> Result<(), Failure>;
}

/// A runtime bound as its device's default mailbox.
struct Bound<D> {
    /// The runtime's registry id.
    id: u64,
    mailbox: DeviceMailbox,
    device: D,
}

struct State<D> {
    /// Units registered by `alignmalloc.cuh`, in registration order.
    units: Vec<Binder>,
    /// Per device ordinal: the runtime bound there.
    bound: BTreeMap<usize, Bound<D>>,
}

/// The binding table (one per process for the real devices).
pub(crate) struct Bindings<D> {
    state: Mutex<State<D>>,
}

impl<D: DeviceCopies> Bindings<D> {
    pub(crate) const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                units: Vec::new(),
                bound: BTreeMap::new(),
            }),
        }
    }

    /// The table, whatever a panicking holder left (its maps are consistent between statements).
    fn lock(&self) -> MutexGuard<'_, State<D>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any unit has registered.
    pub(crate) fn has_units(&self) -> bool {
        !self.lock().units.is_empty()
    }

    /// Register a unit's binder and write every device's bound mailbox into it.
    pub(crate) fn register_unit(&self, binder: Binder) -> Result<(), Failure> {
        let mut state = self.lock();
        if !state.units.contains(&binder) {
            state.units.push(binder);
        }
        let mut first_failure = Ok(());
        for bound in state.bound.values() {
            let written = bound.device.write(&[binder], &bound.mailbox);
            if first_failure.is_ok() {
                first_failure = written;
            }
        }
        first_failure
    }

    /// Bind runtime `id` (its `mailbox`, on device `ordinal`) if `still_live()` says, under the
    /// lock, that it has not been destroyed meanwhile; `gone()` is the error when it has.
    pub(crate) fn bind(
        &self,
        id: u64,
        ordinal: usize,
        mailbox: DeviceMailbox,
        device: D,
        still_live: impl FnOnce() -> bool,
        gone: impl FnOnce() -> Failure,
    ) -> Result<(), Failure> {
        let mut state = self.lock();
        if !still_live() {
            return Err(gone());
        }
        device.write(&state.units, &mailbox)?;
        state.bound.insert(
            ordinal,
            Bound {
                id,
                mailbox,
                device,
            },
        );
        Ok(())
    }

    /// Unbind runtime `id` wherever it is bound: its device's units get the unbound mailbox.
    /// Call it after the runtime left the registry and before its mailbox is released.
    pub(crate) fn unbind(&self, id: u64) -> Result<(), Failure> {
        let mut state = self.lock();
        let ordinals: Vec<usize> = state
            .bound
            .iter()
            .filter_map(|(&ordinal, b)| (b.id == id).then_some(ordinal))
            .collect();
        let mut first_failure = Ok(());
        for ordinal in ordinals {
            if let Some(bound) = state.bound.remove(&ordinal) {
                let written = bound.device.write(&state.units, &DeviceMailbox::default());
                if first_failure.is_ok() {
                    first_failure = written;
                }
            }
        }
        first_failure
    }

    /// The runtime bound on `ordinal`, if any.
    #[cfg(test)]
    pub(crate) fn bound_id(&self, ordinal: usize) -> Option<u64> {
        self.lock().bound.get(&ordinal).map(|b| b.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    /// Each device's copy of the default mailbox, as the units would hold it.
    type Copies = Arc<Mutex<BTreeMap<usize, DeviceMailbox>>>;

    #[derive(Clone)]
    struct FakeDevice {
        ordinal: usize,
        copies: Copies,
    }

    impl DeviceCopies for FakeDevice {
        fn write(&self, units: &[Binder], mailbox: &DeviceMailbox) -> Result<(), Failure> {
            // With no unit there is no copy to write.
            if !units.is_empty() {
                self.copies.lock().unwrap().insert(self.ordinal, *mailbox);
            }
            Ok(())
        }
    }

    unsafe extern "C" fn unit(_: *const DeviceMailbox) -> std::ffi::c_int {
        0
    }

    /// A runtime's mailbox, told apart by its id.
    fn mailbox_of(id: u64) -> DeviceMailbox {
        DeviceMailbox {
            ports: 1,
            req_seq: id,
            ..Default::default()
        }
    }

    #[test]
    fn binds_destroys_and_creates_racing_never_leave_a_destroyed_mailbox_bound() {
        const DEVICES: usize = 2;
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 50_000;
        let bindings = Arc::new(Bindings::<FakeDevice>::new());
        let copies = Copies::default();
        let live = Arc::new(Mutex::new(BTreeSet::<u64>::new()));
        bindings.register_unit(unit).unwrap();
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (bindings, copies, live) = (bindings.clone(), copies.clone(), live.clone());
                std::thread::spawn(move || {
                    for round in 0..ROUNDS {
                        // Create, bind (it may lose to nothing here: only its own thread
                        // destroys it), and destroy as `registry::remove` does.
                        let id = 1 + t * ROUNDS + round;
                        let ordinal = (id as usize) % DEVICES;
                        let device = FakeDevice {
                            ordinal,
                            copies: copies.clone(),
                        };
                        live.lock().unwrap().insert(id);
                        bindings
                            .bind(
                                id,
                                ordinal,
                                mailbox_of(id),
                                device,
                                || live.lock().unwrap().contains(&id),
                                || Failure::new(0, "gone"),
                            )
                            .unwrap();
                        live.lock().unwrap().remove(&id);
                        bindings.unbind(id).unwrap();
                        // The runtime's mailbox is released now: no copy may name it.
                        let held = copies.lock().unwrap().get(&ordinal).copied();
                        assert_ne!(held.map(|m| m.req_seq), Some(id), "round {round}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for ordinal in 0..DEVICES {
            assert_eq!(bindings.bound_id(ordinal), None);
            let held = copies.lock().unwrap().get(&ordinal).copied().unwrap();
            assert_eq!(held, DeviceMailbox::default());
        }
    }

    #[test]
    fn a_bind_after_its_runtime_left_the_registry_is_refused_and_writes_nothing() {
        let bindings = Bindings::<FakeDevice>::new();
        let copies = Copies::default();
        bindings.register_unit(unit).unwrap();
        let device = FakeDevice {
            ordinal: 0,
            copies: copies.clone(),
        };
        let refused = bindings.bind(
            7,
            0,
            mailbox_of(7),
            device,
            || false,
            || Failure::new(crate::status::AM_ERR_INVALID_RUNTIME, "destroyed"),
        );
        assert_eq!(
            refused.unwrap_err().status,
            crate::status::AM_ERR_INVALID_RUNTIME
        );
        assert!(copies.lock().unwrap().is_empty());
        assert_eq!(bindings.bound_id(0), None);
    }

    #[test]
    fn of_two_runtimes_on_one_device_the_later_bind_is_written_and_recorded() {
        let bindings = Bindings::<FakeDevice>::new();
        let copies = Copies::default();
        let device = FakeDevice {
            ordinal: 0,
            copies: copies.clone(),
        };
        for id in [1, 2] {
            let refused = || Failure::new(0, "gone");
            bindings
                .bind(id, 0, mailbox_of(id), device.clone(), || true, refused)
                .unwrap();
        }
        assert!(copies.lock().unwrap().is_empty());
        // A unit registered later gets the bound mailbox at once.
        bindings.register_unit(unit).unwrap();
        assert_eq!(bindings.bound_id(0), Some(2));
        assert_eq!(copies.lock().unwrap()[&0], mailbox_of(2));
        // Unbinding the replaced runtime changes nothing.
        bindings.unbind(1).unwrap();
        assert_eq!(bindings.bound_id(0), Some(2));
        bindings.unbind(2).unwrap();
        assert_eq!(copies.lock().unwrap()[&0], DeviceMailbox::default());
    }
}
