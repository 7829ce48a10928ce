//! Unified-memory fault counters from CUPTI (feature `cupti`, enabled per runtime with
//! [`crate::RuntimeBuilder::fault_counters`]).
//!
//! CUPTI delivers unified-memory counter records (HtoD and DtoH transfers, GPU page fault groups,
//! CPU page faults, each with an address) in buffers through two process-wide callbacks; this
//! module collects them into one queue, and [`crate::Runtime::take_faults`] drains it after a
//! flush into a [`FaultReport`], attributing each record to the live chunk its address falls in.
//!
//! Invariants: at most one runtime per process counts faults (CUPTI's activity API is
//! process-wide); counting starts after the CUDA context exists (CUPTI answers NOT_READY before);
//! every buffer handed to CUPTI is freed exactly once, in the completion callback.
//!
//! CUPTI serves one tool at a time. When another one holds it (a profiler such as Nsight Systems
//! injected into the process), starting answers [`FaultCounterError::Taken`]; the runtime then
//! runs with its counters off ([`FaultCounting::Taken`]), warns once per process, and every report
//! that would have shown counters says why it does not.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cudarc::cupti::result::activity;
use cudarc::cupti::sys::{
    CUpti_Activity, CUpti_ActivityKind, CUpti_ActivityUnifiedMemoryCounter2,
    CUpti_ActivityUnifiedMemoryCounterConfig, CUpti_ActivityUnifiedMemoryCounterKind,
    CUpti_ActivityUnifiedMemoryCounterScope, CUptiResult,
};
use parking_lot::Mutex;
use thiserror::Error;

/// Why fault counting could not start.
#[derive(Debug, Error)]
pub enum FaultCounterError {
    /// libcupti could not be loaded.
    #[error(
        "CUPTI (libcupti.so) could not be loaded; put CUDA's CUPTI library folder (e.g. \
         /usr/local/cuda/targets/x86_64-linux/lib) on LD_LIBRARY_PATH"
    )]
    NoLibrary,
    /// Another runtime of this process already counts faults.
    #[error("another runtime of this process already counts faults (CUPTI is process-wide)")]
    AlreadyCounting,
    /// Another tool (a profiler) holds CUPTI, which serves one subscriber at a time.
    #[error(
        "CUPTI is in use by another tool (a profiler such as Nsight Systems): {call} answered \
         {result:?}"
    )]
    Taken {
        /// The call.
        call: &'static str,
        /// Its result.
        result: CUptiResult,
    },
    /// A CUPTI call failed.
    #[error("CUPTI call {call} failed: {result:?}")]
    Cupti {
        /// The call.
        call: &'static str,
        /// Its result.
        result: CUptiResult,
    },
}

/// Whether a runtime counts unified-memory faults.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultCounting {
    /// Counting: [`crate::Runtime::take_faults`] reports.
    On,
    /// Not asked for ([`crate::RuntimeBuilder::fault_counters`]), or not on this backend.
    Off,
    /// Asked for, but another tool holds CUPTI: the runtime runs without counters.
    Taken {
        /// What CUPTI answered.
        reason: String,
    },
}

impl std::fmt::Display for FaultCounting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::On => f.write_str("counted by CUPTI"),
            Self::Off => f.write_str("not counted (fault counters off)"),
            Self::Taken { reason } => write!(f, "not counted: {reason}"),
        }
    }
}

/// Warn, once per process, that counters asked for are off because CUPTI is taken.
pub(crate) fn warn_taken_once(reason: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            reason,
            "unified-memory fault counters are off for this process; reports say so where \
             they would show them"
        );
    });
}

/// What one kind of record adds up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultCounts {
    /// Bytes migrated host to device.
    pub htod_bytes: u64,
    /// Bytes migrated device to host.
    pub dtoh_bytes: u64,
    /// GPU page fault groups (CUPTI counts the faults of one page in one batch as a group).
    pub gpu_page_faults: u64,
    /// CPU page faults.
    pub cpu_page_faults: u64,
}

impl FaultCounts {
    pub(crate) fn add(&mut self, kind: CUpti_ActivityUnifiedMemoryCounterKind, value: u64) {
        // Transfers carry their bytes, GPU fault records their fault groups.
        use CUpti_ActivityUnifiedMemoryCounterKind as K;
        match kind {
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD => {
                self.htod_bytes += value
            }
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH => {
                self.dtoh_bytes += value
            }
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT => {
                self.gpu_page_faults += value
            }
            // One record per CPU fault; its value is the faulting instruction's address.
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT => {
                self.cpu_page_faults += 1
            }
            _ => {}
        }
    }
}

/// The counters since the last report, in all and per chunk.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FaultReport {
    /// Everything.
    pub total: FaultCounts,
    /// Per live chunk, by its base address.
    pub by_chunk: BTreeMap<u64, FaultCounts>,
    /// Records whose address lies in no live chunk (freed since, or outside the arena).
    pub unattributed: FaultCounts,
    /// Records CUPTI dropped for lack of buffer space.
    pub dropped_records: u64,
}

/// One unified-memory counter record, as collected.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    /// What it counts.
    pub kind: CUpti_ActivityUnifiedMemoryCounterKind,
    /// Bytes (transfers), fault groups (GPU faults), or the faulting instruction (CPU faults).
    pub value: u64,
    /// The address it concerns.
    pub address: u64,
    /// When it started, on CUPTI's clock ([`timestamp`]).
    pub start: u64,
}

/// CUPTI's clock now (ns), the clock of [`Record::start`]; `None` if CUPTI cannot say.
pub fn timestamp() -> Option<u64> {
    let mut now = 0u64;
    // SAFETY: `now` is a live out-pointer.
    let result = unsafe { cudarc::cupti::sys::cuptiGetTimestamp(&mut now) };
    (result == CUptiResult::CUPTI_SUCCESS).then_some(now)
}

impl FaultReport {
    pub(crate) fn add(&mut self, record: &Record, chunk: Option<u64>) {
        self.total.add(record.kind, record.value);
        match chunk {
            Some(base) => self
                .by_chunk
                .entry(base)
                .or_default()
                .add(record.kind, record.value),
            None => self.unattributed.add(record.kind, record.value),
        }
    }
}

static COUNTING: AtomicBool = AtomicBool::new(false);
/// Buffers CUPTI handed back, and records in them of other kinds (for diagnosis).
static BUFFERS: AtomicU64 = AtomicU64::new(0);
static OTHER_RECORDS: AtomicU64 = AtomicU64::new(0);
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

const BUFFER_BYTES: usize = 8 << 20;
const BUFFER_ALIGN: usize = 8;

fn buffer_layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN).expect("a valid layout")
}

/// CUPTI asks for a buffer to fill.
///
/// # Safety
/// Called by CUPTI only (registered with `cuptiActivityRegisterCallbacks`): `buffer`, `size` and
/// `max` are valid, writable out-pointers.
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
    // SAFETY: the layout has a non-zero size; the buffer is freed in `buffer_completed`.
    let memory = unsafe { std::alloc::alloc(buffer_layout()) };
    // SAFETY: CUPTI passes valid out-pointers. A null buffer tells CUPTI to drop records.
    unsafe {
        *buffer = memory;
        *size = if memory.is_null() { 0 } else { BUFFER_BYTES };
        *max = 0;
    }
}

/// CUPTI hands a filled buffer back: keep its unified-memory records, free it.
///
/// # Safety
/// Called by CUPTI only, with a buffer `buffer_requested` allocated and `valid` bytes of
/// records in it; the buffer is not used again after this call.
unsafe extern "C" fn buffer_completed(
    _context: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    BUFFERS.fetch_add(1, Ordering::Relaxed);
    let mut records = RECORDS.lock();
    let mut record: *mut CUpti_Activity = std::ptr::null_mut();
    // SAFETY: `buffer` holds `valid` bytes of records written by CUPTI; get_next_record walks
    // them and ends with MAX_LIMIT_REACHED.
    while unsafe { activity::get_next_record(buffer, valid, &mut record) }.is_ok() {
        // SAFETY: the record pointer points into the buffer; its kind field comes first.
        let kind = unsafe { (*record).kind };
        if kind == CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER {
            // SAFETY: records of this kind start with the fields of ...Counter2 (the newer
            // ...Counter3 only appends); read unaligned, the struct being packed.
            let um = unsafe {
                std::ptr::read_unaligned(record.cast::<CUpti_ActivityUnifiedMemoryCounter2>())
            };
            records.push(Record {
                kind: um.counterKind,
                value: um.value,
                address: um.address,
                start: um.start,
            });
        } else {
            OTHER_RECORDS.fetch_add(1, Ordering::Relaxed);
        }
    }
    drop(records);
    // SAFETY: allocated in `buffer_requested` with this layout; CUPTI hands it back once.
    unsafe { std::alloc::dealloc(buffer, buffer_layout()) };
}

fn cupti(
    call: &'static str,
    result: Result<(), cudarc::cupti::result::CuptiError>,
) -> Result<(), FaultCounterError> {
    result.map_err(|e| classify(call, e.0))
}

/// A failed CUPTI call's error: [`FaultCounterError::Taken`] where another tool holds CUPTI.
fn classify(call: &'static str, result: CUptiResult) -> FaultCounterError {
    match result {
        CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => {
            FaultCounterError::Taken { call, result }
        }
        _ => FaultCounterError::Cupti { call, result },
    }
}

/// A runtime's fault counting: the counter, or why there is none.
pub enum Counting {
    /// Counting.
    On(FaultCounter),
    /// Not asked for.
    Off,
    /// Asked for, but another tool holds CUPTI: why.
    Taken(String),
}

impl Counting {
    /// Start counting on device `ordinal` if `wanted`; a CUPTI held by another tool turns the
    /// counters off (warned once) instead of failing the runtime.
    pub fn start(wanted: bool, ordinal: usize) -> Result<Self, FaultCounterError> {
        Self::start_on(wanted, &[ordinal])
    }

    /// [`Counting::start`] on every device of `ordinals` at once (one CUPTI subscriber counts
    /// them all; a set of devices reads them with `Devices::take_faults`).
    pub fn start_on(wanted: bool, ordinals: &[usize]) -> Result<Self, FaultCounterError> {
        if !wanted {
            return Ok(Self::Off);
        }
        match FaultCounter::start(ordinals) {
            Ok(counter) => Ok(Self::On(counter)),
            Err(e @ FaultCounterError::Taken { .. }) => {
                let reason = e.to_string();
                warn_taken_once(&reason);
                Ok(Self::Taken(reason))
            }
            Err(e) => Err(e),
        }
    }

    /// The public view.
    pub fn state(&self) -> FaultCounting {
        match self {
            Self::On(_) => FaultCounting::On,
            Self::Off => FaultCounting::Off,
            Self::Taken(reason) => FaultCounting::Taken {
                reason: reason.clone(),
            },
        }
    }
}

/// Fault counting for one runtime (or one wrapped program); stops when dropped.
pub struct FaultCounter {
    _private: (),
}

impl FaultCounter {
    /// Start counting on every device of `ordinals` (their contexts must exist).
    pub fn start(ordinals: &[usize]) -> Result<Self, FaultCounterError> {
        // SAFETY: only tries to open the library.
        if !unsafe { cudarc::cupti::sys::is_culib_present() } {
            return Err(FaultCounterError::NoLibrary);
        }
        if COUNTING.swap(true, Ordering::AcqRel) {
            return Err(FaultCounterError::AlreadyCounting);
        }
        let started = Self { _private: () };
        use CUpti_ActivityUnifiedMemoryCounterKind as K;
        let mut devices = ordinals.to_vec();
        devices.sort_unstable();
        devices.dedup();
        let mut configs: Vec<CUpti_ActivityUnifiedMemoryCounterConfig> = devices
            .iter()
            .flat_map(|&ordinal| {
                [
                    K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
                    K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                    K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
                    K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
                ]
                .map(|kind| CUpti_ActivityUnifiedMemoryCounterConfig {
                    scope: CUpti_ActivityUnifiedMemoryCounterScope::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
                    kind,
                    deviceId: ordinal as u32,
                    enable: 1,
                })
            })
            .collect();
        // SAFETY: `configs` is a live array of `configs.len()` configurations.
        cupti("cuptiActivityConfigureUnifiedMemoryCounter", unsafe {
            activity::configure_unified_memory_counter(configs.as_mut_ptr(), configs.len() as u32)
        })?;
        cupti(
            "cuptiActivityRegisterCallbacks",
            activity::register_callbacks(Some(buffer_requested), Some(buffer_completed)),
        )?;
        cupti(
            "cuptiActivityEnable",
            activity::enable(CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER),
        )?;
        RECORDS.lock().clear();
        tracing::info!(?devices, "counting unified-memory faults with CUPTI");
        Ok(started)
    }

    /// Deliver every record so far and take them, with the number CUPTI dropped.
    pub fn take(&self) -> Result<(Vec<Record>, u64), FaultCounterError> {
        // 1 = CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: also flush buffers that are not full.
        cupti("cuptiActivityFlushAll", activity::flush_all(1))?;
        let mut dropped = 0usize;
        // SAFETY: a null context and stream 0 ask for the process-wide count; `dropped` is a
        // live out-pointer.
        let _ = unsafe { activity::get_num_dropped_records(std::ptr::null_mut(), 0, &mut dropped) };
        let records = std::mem::take(&mut *RECORDS.lock());
        tracing::debug!(
            records = records.len(),
            buffers = BUFFERS.load(Ordering::Relaxed),
            other_records = OTHER_RECORDS.load(Ordering::Relaxed),
            dropped,
            "fault records taken"
        );
        Ok((records, dropped as u64))
    }
}

impl Drop for FaultCounter {
    fn drop(&mut self) {
        let _ = activity::disable(CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
        let _ = activity::flush_all(1);
        RECORDS.lock().clear();
        COUNTING.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CUpti_ActivityUnifiedMemoryCounterKind as K;

    fn record(kind: K, value: u64) -> Record {
        Record {
            kind,
            value,
            address: 0,
            start: 0,
        }
    }

    #[test]
    fn a_cupti_held_by_another_tool_is_told_apart_from_other_failures() {
        let taken = classify(
            "cuptiActivityConfigureUnifiedMemoryCounter",
            CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
        );
        assert!(matches!(taken, FaultCounterError::Taken { .. }));
        assert!(taken.to_string().contains("another tool"));
        let other = classify("cuptiActivityEnable", CUptiResult::CUPTI_ERROR_NOT_READY);
        assert!(matches!(other, FaultCounterError::Cupti { .. }));
        let shown = FaultCounting::Taken {
            reason: taken.to_string(),
        }
        .to_string();
        assert!(shown.starts_with("not counted: CUPTI is in use"), "{shown}");
    }

    #[test]
    fn records_add_up_per_kind_and_per_chunk() {
        let mut report = FaultReport::default();
        let htod = record(
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
            65536,
        );
        let dtoh = record(
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
            4096,
        );
        let gpu = record(
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
            3,
        );
        // A CPU fault record's value is the faulting instruction's address, not a count.
        let cpu = record(
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
            0x5555_1234,
        );
        let other = record(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, 99);
        report.add(&htod, Some(1 << 30));
        report.add(&htod, Some(1 << 30));
        report.add(&gpu, Some(2 << 30));
        report.add(&dtoh, None);
        report.add(&cpu, None);
        report.add(&cpu, Some(1 << 30));
        report.add(&other, Some(1 << 30));
        assert_eq!(
            report.total,
            FaultCounts {
                htod_bytes: 131_072,
                dtoh_bytes: 4096,
                gpu_page_faults: 3,
                cpu_page_faults: 2,
            }
        );
        assert_eq!(report.by_chunk[&(1 << 30)].htod_bytes, 131_072);
        assert_eq!(report.by_chunk[&(1 << 30)].cpu_page_faults, 1);
        assert_eq!(report.by_chunk[&(2 << 30)].gpu_page_faults, 3);
        assert_eq!(report.unattributed.dtoh_bytes, 4096);
        assert_eq!(report.unattributed.cpu_page_faults, 1);
    }
}
