//! Several devices of one host: one [`Runtime`] per device, each with its own arena, mailbox and
//! service thread, so a kernel allocates from the arena of the GPU it runs on and one GPU's
//! traffic never waits behind another's.
//!
//! Invariants:
//! - Arenas are disjoint (each is its own managed allocation, or host reservation on the sim
//!   backend), so an address belongs to at most one device: [`Devices::owner_of`].
//! - A host free goes to the runtime that owns the object ([`Devices::free`]); a free asked of
//!   another device ([`Devices::free_on`]) is refused with [`Error::WrongDevice`] and changes
//!   nothing. A kernel that frees another device's object through its own mailbox changes
//!   nothing either: the lane gets `InvalidHandle` for an object the host placed (not in this
//!   device's arena) and `DoubleFree` for one of another device's caches (a cache generation on
//!   blocks where none of this device's slabs is, which is what a second free after its slab
//!   went back looks like).
//! - A device taken out of the set ([`Devices::close`]) stops only its own service thread; calls
//!   naming it answer [`Error::DeviceClosed`], the others run on.
//! - On the cuda backend every arena is advised to live on its device and stay mapped for it
//!   ([`RuntimeBuilder::device_advice`]). Fault counters (CUPTI, one subscriber per process):
//!   the first runtime counts every device of the set, and [`Devices::take_faults`] gives each
//!   device the records whose address is in its arena.

use std::str::FromStr;

use translator::Handle;

use crate::backend::{BackendChoice, BackendKind};
use crate::builder::RuntimeBuilder;
use crate::error::{Error, Result};
use crate::runtime::Runtime;

/// Which devices to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceList {
    /// Every GPU the driver reports (on the sim backend: one simulated device).
    All,
    /// These ordinals, in this order. An ordinal may repeat: two runtimes on one GPU (each its own
    /// arena and service thread), which stands in for two GPUs where a host has one.
    Ordinals(Vec<usize>),
}

impl FromStr for DeviceList {
    type Err = String;

    /// `all`, or ordinals separated by commas (`0,1`).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        if s.trim() == "all" {
            return Ok(Self::All);
        }
        let ordinals = s
            .split(',')
            .map(|part| {
                part.trim().parse::<usize>().map_err(|_| {
                    format!("{part:?} is not a device ordinal: expected `all` or a list like 0,1")
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if ordinals.is_empty() {
            return Err("no device listed".into());
        }
        Ok(Self::Ordinals(ordinals))
    }
}

/// One runtime per device.
pub struct Devices {
    /// (ordinal, runtime); `None` once closed.
    runtimes: Vec<(usize, Option<Runtime>)>,
}

impl Devices {
    /// Build one runtime per device of `list` from `builder` (its settings apply to every
    /// device; its device ordinal is replaced). The first runtime that fails to build stops the
    /// whole set, naming its device; the ones built before it are stopped.
    pub fn open(builder: RuntimeBuilder, list: &DeviceList) -> Result<Self> {
        let ordinals = match list {
            DeviceList::Ordinals(o) if o.is_empty() => {
                return Err(Error::Config("no device listed".into()));
            }
            DeviceList::Ordinals(o) => o.clone(),
            DeviceList::All => (0..visible_devices(builder.backend_choice())?).collect(),
        };
        let counters = builder.wants_fault_counters();
        let mut runtimes = Vec::with_capacity(ordinals.len());
        for (i, &ordinal) in ordinals.iter().enumerate() {
            // One CUPTI subscriber per process: the first runtime counts every device.
            let counted = if i == 0 { ordinals.clone() } else { Vec::new() };
            let rt = builder
                .clone()
                .device(ordinal)
                .device_advice(true)
                .fault_counters(counters && i == 0)
                .counted_devices(counted)
                .build()
                .map_err(|e| Error::DeviceOpen {
                    ordinal,
                    cause: Box::new(e),
                })?;
            tracing::info!(
                ordinal,
                backend = ?rt.backend(),
                arena_bytes = rt.arena_bytes(),
                "device runtime ready"
            );
            runtimes.push((ordinal, Some(rt)));
        }
        Ok(Self { runtimes })
    }

    /// How many devices the set was opened with (closed ones included).
    pub fn len(&self) -> usize {
        self.runtimes.len()
    }

    /// Whether the set has no device (never true of an opened set).
    pub fn is_empty(&self) -> bool {
        self.runtimes.is_empty()
    }

    /// Whether an ordinal is listed more than once (runtimes sharing one GPU).
    pub fn shares_a_gpu(&self) -> bool {
        let mut ordinals: Vec<usize> = self.runtimes.iter().map(|(o, _)| *o).collect();
        ordinals.sort_unstable();
        ordinals.dedup();
        ordinals.len() < self.runtimes.len()
    }

    /// The ordinal of the set's `index`th device.
    pub fn ordinal(&self, index: usize) -> Result<usize> {
        self.runtimes
            .get(index)
            .map(|(ordinal, _)| *ordinal)
            .ok_or(Error::NoSuchDevice {
                index,
                devices: self.runtimes.len(),
            })
    }

    /// The runtime of the set's `index`th device.
    pub fn get(&self, index: usize) -> Result<&Runtime> {
        match self.runtimes.get(index) {
            Some((_, Some(rt))) => Ok(rt),
            Some((ordinal, None)) => Err(Error::DeviceClosed {
                index,
                ordinal: *ordinal,
            }),
            None => Err(Error::NoSuchDevice {
                index,
                devices: self.runtimes.len(),
            }),
        }
    }

    /// The devices still open, as (index, runtime).
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Runtime)> {
        self.runtimes
            .iter()
            .enumerate()
            .filter_map(|(i, (_, rt))| rt.as_ref().map(|rt| (i, rt)))
    }

    /// The index of the open device whose arena holds `address`.
    pub fn owner_of(&self, address: u64) -> Option<usize> {
        owner_in(&self.arenas(), address)
    }

    /// Each open device's index and arena segments (first byte, bytes).
    fn arenas(&self) -> Vec<(usize, Vec<(u64, u64)>)> {
        self.iter()
            .map(|(i, rt)| (i, rt.arena_segments()))
            .collect()
    }

    /// Free `handle` on the device that owns it.
    pub fn free(&self, handle: Handle) -> Result<()> {
        if handle.is_null() {
            return Ok(());
        }
        match self.owner_of(handle.address()) {
            Some(i) => self.get(i)?.free(handle),
            None => Err(Error::NotInAnyArena { handle: handle.0 }),
        }
    }

    /// Free `handle` on device `index`, which must own it: a handle of another device's arena
    /// is refused with [`Error::WrongDevice`] and nothing changes.
    pub fn free_on(&self, index: usize, handle: Handle) -> Result<()> {
        let rt = self.get(index)?;
        if let Some(owner) = (!handle.is_null())
            .then(|| self.owner_of(handle.address()))
            .flatten()
            .filter(|&o| o != index)
        {
            tracing::warn!(
                handle = format_args!("{:#x}", handle.0),
                asked = index,
                owner,
                "free refused: the object belongs to another device's arena"
            );
            return Err(Error::WrongDevice {
                handle: handle.0,
                asked: index,
                owner,
            });
        }
        rt.free(handle)
    }

    /// The unified-memory counters of every device since the last call, each device's records
    /// (those whose address is in its arena) added up in all and per live chunk; records of no
    /// device's arena in `elsewhere`. Needs the builder's `fault_counters` (the first device's
    /// runtime counts for the whole set; read the counters here, not through one runtime).
    #[cfg(feature = "cupti")]
    pub fn take_faults(&self) -> Result<DeviceFaults> {
        let (records, dropped) = self.get(0)?.take_fault_records()?;
        let arenas = self.arenas();
        let mut mine: Vec<Vec<&crate::faults::Record>> = vec![Vec::new(); self.len()];
        let mut elsewhere = crate::faults::FaultCounts::default();
        for record in &records {
            match owner_in(&arenas, record.address) {
                Some(i) => mine[i].push(record),
                None => elsewhere.add(record.kind, record.value),
            }
        }
        let per_device = self
            .runtimes
            .iter()
            .zip(mine)
            .map(|((_, rt), records)| rt.as_ref().map(|rt| rt.fault_report(records, 0)))
            .collect();
        Ok(DeviceFaults {
            per_device,
            elsewhere,
            dropped_records: dropped,
        })
    }

    /// Stop device `index`'s runtime (its service thread and arena; its kernels must have
    /// ended). The other devices run on; calls naming this one answer [`Error::DeviceClosed`].
    pub fn close(&mut self, index: usize) -> Result<()> {
        let devices = self.runtimes.len();
        let (ordinal, slot) = self
            .runtimes
            .get_mut(index)
            .ok_or(Error::NoSuchDevice { index, devices })?;
        match slot.take() {
            Some(rt) => {
                drop(rt);
                tracing::info!(index, ordinal = *ordinal, "device runtime closed");
                Ok(())
            }
            None => Err(Error::DeviceClosed {
                index,
                ordinal: *ordinal,
            }),
        }
    }
}

/// The fault counters of a set of devices ([`Devices::take_faults`]).
#[cfg(feature = "cupti")]
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DeviceFaults {
    /// Per device of the set (`None`: closed), the records of its arena.
    pub per_device: Vec<Option<crate::faults::FaultReport>>,
    /// Records whose address is in no device's arena.
    pub elsewhere: crate::faults::FaultCounts,
    /// Records CUPTI dropped for lack of buffer space.
    pub dropped_records: u64,
}

/// The index of the arena of `arenas` ([`Devices::arenas`]) that holds `address`.
fn owner_in(arenas: &[(usize, Vec<(u64, u64)>)], address: u64) -> Option<usize> {
    arenas.iter().find_map(|(i, segments)| {
        segments
            .iter()
            .any(|&(base, bytes)| address >= base && address - base < bytes)
            .then_some(*i)
    })
}

/// How many devices `all` means for this backend choice.
fn visible_devices(choice: BackendChoice) -> Result<usize> {
    if choice == BackendChoice::Sim {
        return Ok(1);
    }
    match crate::cuda::device_count() {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) | Err(_) if choice == BackendChoice::Auto => {
            tracing::info!(
                backend = ?BackendKind::Sim,
                "no GPU: `all` is one simulated device"
            );
            Ok(1)
        }
        Ok(_) => Err(Error::Config("the CUDA driver reports no device".into())),
        Err(e) => Err(Error::NoGpu(e)),
    }
}
