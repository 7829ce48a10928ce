//! The C-visible types: options, statistics, fault counts and the device mailbox, each `repr(C)`
//! plain integers (enumerations travel as `uint32_t` with `AM_*` constants, so no value a C
//! caller passes is undefined behaviour here).

use orchestrator::ResolverCounters;
use orchestrator::caches::CacheStatsSnapshot;
use orchestrator::stats::StatsSnapshot;

/// What a kernel needs to reach the service thread (`am::DeviceMailbox`), to pass as a kernel
/// argument (the default mailbox of `am::bind` needs none). The runtime's own definition: the
/// header declares it as `am_device_mailbox` (cbindgen reads it from `orchestrator::records`).
pub use orchestrator::records::{DeviceCaches, DeviceMailbox};

/// An object's handle: what `am_alloc` and device-side `am::malloc` give (64 bits; 0 is null).
pub type am_handle = u64;

/// A runtime: the arena, the mailbox and the service thread. Opaque; made by
/// `am_runtime_create`, ended by `am_runtime_destroy`.
pub struct am_runtime {
    _opaque: [u8; 0],
}

/// `am_options.backend`: the GPU when the driver loads and the device exists, else the simulation.
pub const AM_BACKEND_AUTO: u32 = 0;
/// `am_options.backend` and `am_runtime_backend`: a CUDA GPU.
pub const AM_BACKEND_CUDA: u32 = 1;
/// `am_options.backend` and `am_runtime_backend`: the CPU simulation (no GPU needed).
pub const AM_BACKEND_SIM: u32 = 2;

/// `am_options.slot_order`: lanes 0,1,2,4,...,30,3,5,...,31 side by side (the default).
pub const AM_SLOT_ORDER_PATTERN: u32 = 0;
/// `am_options.slot_order`: lanes in order.
pub const AM_SLOT_ORDER_IDENTITY: u32 = 1;

/// `am_options.placement`: no advice, pages migrate to whoever touches them (the default).
pub const AM_PLACEMENT_MIGRATE: u32 = 0;
/// `am_options.placement`: the arena in host memory, mapped for the GPU (read over the link).
pub const AM_PLACEMENT_HOST_MAPPED: u32 = 1;
/// `am_options.placement`: a device tier and a host tier (docs/placement.md).
pub const AM_PLACEMENT_TIERED: u32 = 2;

/// `am_tier_of`: an untiered reservation (the migrate placement).
pub const AM_TIER_ANY: u32 = 0;
/// `am_tier_of`: the device tier (preferred on the GPU).
pub const AM_TIER_DEVICE: u32 = 1;
/// `am_tier_of`: the host tier (host memory mapped for the GPU).
pub const AM_TIER_HOST: u32 = 2;

/// How to build a runtime. Fill it with `am_options_default`, then change what you need; a
/// field left 0 keeps its default.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct am_options {
    /// `sizeof(am_options)`, set by `am_options_default` (the library checks it).
    pub size: u32,
    /// `AM_BACKEND_AUTO` (default), `AM_BACKEND_CUDA` or `AM_BACKEND_SIM`.
    pub backend: u32,
    /// CUDA device ordinal (default 0).
    pub device: u32,
    /// Mailbox ports (0: 8192).
    pub ports: u32,
    /// Arena bytes, rounded down to 2 MiB (0: a quarter of free device memory on the GPU,
    /// 4 GiB of lazily committed host memory in the simulation).
    pub arena_bytes: u64,
    /// Share of free device memory the default arena takes, in (0, 1] (0: 0.25).
    pub arena_fraction: f64,
    /// Let the arena grow up to this many bytes in all (0: no growth).
    pub max_arena_bytes: u64,
    /// Allow an arena larger than free device memory (default false).
    pub allow_oversubscription: bool,
    /// Count unified-memory migrations and faults with CUPTI (GPU only; default false).
    pub fault_counters: bool,
    /// `AM_SLOT_ORDER_PATTERN` (default) or `AM_SLOT_ORDER_IDENTITY`.
    pub slot_order: u32,
    /// Most bytes the device caches may hold (0: an eighth of the arena).
    pub device_cache_bytes: u64,
    /// Turn the device caches off: every allocation asks the service thread (default false).
    pub no_device_caches: bool,
    /// `AM_PLACEMENT_MIGRATE` (default), `AM_PLACEMENT_HOST_MAPPED` or `AM_PLACEMENT_TIERED`:
    /// where the arena's pages live (docs/placement.md).
    pub placement: u32,
    /// `AM_PLACEMENT_TIERED`: bytes of the device tier (0: half the arena).
    pub device_tier_bytes: u64,
    /// `AM_PLACEMENT_TIERED`: objects of at least this many bytes ask the device tier first,
    /// smaller ones the host tier (0: all ask the device tier first).
    pub hot_object_bytes: u64,
}

impl Default for am_options {
    fn default() -> Self {
        Self {
            size: std::mem::size_of::<Self>() as u32,
            backend: AM_BACKEND_AUTO,
            device: 0,
            ports: 0,
            arena_bytes: 0,
            arena_fraction: 0.0,
            max_arena_bytes: 0,
            allow_oversubscription: false,
            fault_counters: false,
            slot_order: AM_SLOT_ORDER_PATTERN,
            device_cache_bytes: 0,
            no_device_caches: false,
            placement: AM_PLACEMENT_MIGRATE,
            device_tier_bytes: 0,
            hot_object_bytes: 0,
        }
    }
}

/// Writes one translation unit's default mailbox (registered by `alignmalloc.cuh`); returns a
/// `cudaError_t` (0: done).
pub type am_unit_binder =
    Option<unsafe extern "C" fn(mailbox: *const DeviceMailbox) -> std::ffi::c_int>;

/// Request statuses counted by `am_counters.by_status` (codes of `am::Status`).
pub const AM_REQUEST_STATUSES: usize = 9;
/// Per-object free outcomes counted by `am_counters.by_lane_status` (codes of `am::LaneStatus`).
pub const AM_LANE_STATUSES: usize = 5;

/// What the allocator has done, for device and host requests alike.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct am_counters {
    /// Requests by status code: 0 ok, 1 out of memory, 2 size over limit, 3 unknown op, 4 empty
    /// mask, 5 bad sequence, 6 shutdown, 7 partial (some lanes of a free failed), 8 unbound.
    pub by_status: [u64; AM_REQUEST_STATUSES],
    /// Freed objects by outcome: 0 freed, 1 invalid handle, 2 double free, 3 interior pointer,
    /// 4 an object of a device cache (host frees only).
    pub by_lane_status: [u64; AM_LANE_STATUSES],
    /// Chunks allocated by class: small, portion, large.
    pub chunks_by_class: [u64; 3],
    /// Bytes asked for by class.
    pub bytes_by_class: [u64; 3],
    /// Objects freed.
    pub lanes_freed: u64,
}

impl From<&ResolverCounters> for am_counters {
    fn from(c: &ResolverCounters) -> Self {
        Self {
            by_status: c.by_status,
            by_lane_status: c.by_lane_status,
            chunks_by_class: c.chunks_by_class,
            bytes_by_class: c.bytes_by_class,
            lanes_freed: c.lanes_freed,
        }
    }
}

/// A free the host refused (`am_last_bad_frees`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct am_bad_free {
    /// Its rank among all the bad frees of the runtime (1 = the first).
    pub number: u64,
    /// The handle given (for a free by address, the handle of the object starting there, or a
    /// plain handle of the address).
    pub handle: u64,
    /// Why it was refused: 1 invalid handle, 2 double free, 3 interior pointer, 4 an object of a
    /// device cache.
    pub lane_status: u32,
}

impl From<&runtime::BadFree> for am_bad_free {
    fn from(b: &runtime::BadFree) -> Self {
        Self {
            number: b.number,
            handle: b.handle.0,
            lane_status: b.outcome as u32,
        }
    }
}

/// What the device caches hold and did (`am_cache_stats_get`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct am_cache_stats {
    /// Whether the runtime has device caches (all else is 0 when not).
    pub enabled: bool,
    /// Slabs the host handed to the caches.
    pub refills: u64,
    /// Slabs the device gave back with every object freed.
    pub returns: u64,
    /// Asks the host could not serve (those lanes went through the mailbox).
    pub denials: u64,
    /// Bytes the caches hold now.
    pub held_bytes: u64,
    /// The most bytes they held at once.
    pub peak_held_bytes: u64,
}

impl From<Option<CacheStatsSnapshot>> for am_cache_stats {
    fn from(s: Option<CacheStatsSnapshot>) -> Self {
        match s {
            None => Self::default(),
            Some(s) => Self {
                enabled: true,
                refills: s.refills,
                returns: s.returns,
                denials: s.denials,
                held_bytes: s.held_bytes,
                peak_held_bytes: s.peak_held_bytes,
            },
        }
    }
}

/// What the service thread has done.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct am_service_stats {
    /// Batches served (sweeps that found a request).
    pub batches: u64,
    /// Requests served.
    pub requests: u64,
    /// Median requests per batch.
    pub batch_size_p50: u64,
    /// 99th percentile of requests per batch.
    pub batch_size_p99: u64,
    /// Median batch service time, ns.
    pub batch_nanos_p50: u64,
    /// 99th percentile of the batch service time, ns.
    pub batch_nanos_p99: u64,
    /// Longest batch service time, ns.
    pub batch_nanos_max: u64,
    /// Time spent serving, ns.
    pub busy_nanos: u64,
    /// Of it, reading the ports, ns.
    pub collect_nanos: u64,
    /// Of it, resolving, ns (the rest answered).
    pub resolve_nanos: u64,
}

impl From<&StatsSnapshot> for am_service_stats {
    fn from(s: &StatsSnapshot) -> Self {
        Self {
            batches: s.batches,
            requests: s.requests,
            batch_size_p50: s.batch_size_p50_p99.0,
            batch_size_p99: s.batch_size_p50_p99.1,
            batch_nanos_p50: s.batch_nanos_p50_p99_max.0,
            batch_nanos_p99: s.batch_nanos_p50_p99_max.1,
            batch_nanos_max: s.batch_nanos_p50_p99_max.2,
            busy_nanos: s.busy_nanos,
            collect_nanos: s.collect_nanos,
            resolve_nanos: s.resolve_nanos,
        }
    }
}

/// Unified-memory counts of one kind of record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct am_fault_counts {
    /// Bytes migrated host to device.
    pub htod_bytes: u64,
    /// Bytes migrated device to host.
    pub dtoh_bytes: u64,
    /// GPU page fault groups.
    pub gpu_page_faults: u64,
    /// CPU page faults.
    pub cpu_page_faults: u64,
}

impl From<runtime::faults::FaultCounts> for am_fault_counts {
    fn from(c: runtime::faults::FaultCounts) -> Self {
        Self {
            htod_bytes: c.htod_bytes,
            dtoh_bytes: c.dtoh_bytes,
            gpu_page_faults: c.gpu_page_faults,
            cpu_page_faults: c.cpu_page_faults,
        }
    }
}

/// The unified-memory counters since the last `am_take_faults`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct am_fault_report {
    /// Everything.
    pub total: am_fault_counts,
    /// Records whose address lies in no live chunk.
    pub unattributed: am_fault_counts,
    /// Records CUPTI dropped for lack of buffer space.
    pub dropped_records: u64,
    /// Live chunks with records: read each with `am_fault_chunk(rt, 0..chunks)`.
    pub chunks: usize,
}
