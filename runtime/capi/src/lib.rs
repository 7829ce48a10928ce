//! libalignmalloc: the C ABI of the alignmalloc runtime, for C and CUDA C++ programs.
//!
//! `include/alignmalloc.h` declares everything here (cbindgen generates it; a test holds it
//! equal). A program creates a runtime (`am_runtime_create`), binds it as the default mailbox
//! of its kernels (`am_bind`, called through `am::bind` in `<alignmalloc/alignmalloc.cuh>`),
//! allocates from kernels and from the host, reads statistics, and destroys the runtime.
//!
//! Invariants at the boundary: every function returns an `am_status` and never unwinds (each
//! body runs in `status::guard`); a runtime argument is looked up in the `registry` module before use,
//! so a null, destroyed or forged one is an error code; every pointer argument is checked for
//! null before it is read or written. What the library cannot check (a dangling non-null
//! buffer, a length longer than the buffer) is the caller's to uphold, which is why those
//! functions are `unsafe` on the Rust side.
//!
//! Logging: set `ALIGNMALLOC_LOG` (a `tracing` filter such as `warn` or `alignmalloc=debug`)
//! before the first runtime is created to see the library's events on stderr; every failed
//! call logs a warning naming the call.

#![allow(non_camel_case_types)]

mod binding;
mod registry;
mod status;
mod types;

use std::ffi::{c_char, c_void};

use runtime::{BackendChoice, BackendKind, Handle};
use translator::SlotOrder;

pub use crate::status::*;
use crate::status::{Failure, guard};
pub use crate::types::*;

/// Fail naming the parameter when the pointer argument `p` is null (checked before any work).
fn require<T>(p: *const T, name: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    Ok(())
}

fn install_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("ALIGNMALLOC_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                // Colour only on a terminal: logs piped to a file stay plain text.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .try_init();
        }
    });
}

fn builder_from(options: &am_options) -> Result<runtime::RuntimeBuilder, Failure> {
    let invalid = |m: String| Failure::new(AM_ERR_INVALID_ARGUMENT, m);
    if options.size as usize != std::mem::size_of::<am_options>() {
        return Err(invalid(format!(
            "options.size is {} but this library's am_options has {} bytes: fill the options \
             with am_options_default (and build against the installed alignmalloc.h)",
            options.size,
            std::mem::size_of::<am_options>()
        )));
    }
    let backend = match options.backend {
        AM_BACKEND_AUTO => BackendChoice::Auto,
        AM_BACKEND_CUDA => BackendChoice::Cuda,
        AM_BACKEND_SIM => BackendChoice::Sim,
        other => {
            return Err(invalid(format!(
                "options.backend is {other}: expected AM_BACKEND_AUTO (0), AM_BACKEND_CUDA (1) \
                 or AM_BACKEND_SIM (2)"
            )));
        }
    };
    let order = match options.slot_order {
        AM_SLOT_ORDER_PATTERN => SlotOrder::Pattern,
        AM_SLOT_ORDER_IDENTITY => SlotOrder::Identity,
        other => {
            return Err(invalid(format!(
                "options.slot_order is {other}: expected AM_SLOT_ORDER_PATTERN (0) or \
                 AM_SLOT_ORDER_IDENTITY (1)"
            )));
        }
    };
    let placement = match options.placement {
        AM_PLACEMENT_MIGRATE => runtime::Placement::Migrate,
        AM_PLACEMENT_HOST_MAPPED => runtime::Placement::HostMapped,
        AM_PLACEMENT_TIERED => runtime::Placement::Tiered,
        other => {
            return Err(invalid(format!(
                "options.placement is {other}: expected AM_PLACEMENT_MIGRATE (0), \
                 AM_PLACEMENT_HOST_MAPPED (1) or AM_PLACEMENT_TIERED (2)"
            )));
        }
    };
    if placement != runtime::Placement::Tiered
        && (options.device_tier_bytes != 0 || options.hot_object_bytes != 0)
    {
        return Err(invalid(
            "options.device_tier_bytes and options.hot_object_bytes apply only to \
             AM_PLACEMENT_TIERED"
                .into(),
        ));
    }
    if options.arena_fraction != 0.0
        && !(options.arena_fraction > 0.0 && options.arena_fraction <= 1.0)
    {
        return Err(invalid(format!(
            "options.arena_fraction is {}: expected 0 (the default, 0.25) or a share in (0, 1]",
            options.arena_fraction
        )));
    }
    let mut b = runtime::Runtime::builder()
        .backend(backend)
        .device(options.device as usize)
        .slot_order(order)
        .allow_oversubscription(options.allow_oversubscription)
        .fault_counters(options.fault_counters)
        .placement(placement);
    if options.device_tier_bytes != 0 {
        b = b.device_tier_bytes(options.device_tier_bytes);
    }
    if options.hot_object_bytes != 0 {
        b = b.hot_object_bytes(options.hot_object_bytes);
    }
    if options.ports != 0 {
        b = b.ports(options.ports as usize);
    }
    if options.arena_bytes != 0 {
        b = b.arena_bytes(options.arena_bytes);
    }
    if options.arena_fraction != 0.0 {
        b = b.arena_fraction(options.arena_fraction);
    }
    if options.max_arena_bytes != 0 {
        b = b.max_arena_bytes(options.max_arena_bytes);
    }
    if options.no_device_caches {
        b = b.device_cache_bytes(0);
    } else if options.device_cache_bytes != 0 {
        b = b.device_cache_bytes(options.device_cache_bytes);
    }
    Ok(b)
}

/// Fill `options` with the defaults (and its `size` field).
///
/// # Safety
/// `options` is null or points to writable memory for one `am_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_options_default(options: *mut am_options) -> am_status {
    guard("am_options_default", || {
        require(options, "options")?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { options.write(am_options::default()) };
        Ok(())
    })
}

/// Create a runtime: pick the backend, reserve the arena, register the mailbox, start the
/// service thread. `options` may be null for the defaults. On success `*runtime` is the new
/// runtime; on failure it is left as it was.
///
/// # Safety
/// `options` is null or points to a readable `am_options`; `runtime` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_runtime_create(
    options: *const am_options,
    runtime: *mut *mut am_runtime,
) -> am_status {
    install_logging();
    guard("am_runtime_create", || {
        require(runtime, "runtime")?;
        let options = if options.is_null() {
            am_options::default()
        } else {
            // SAFETY: non-null and readable by the caller's contract.
            unsafe { options.read() }
        };
        let built = builder_from(&options)?.build()?;
        tracing::info!(backend = ?built.backend(), reason = built.backend_reason(), "runtime created");
        let token = registry::insert(built);
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { runtime.write(token) };
        Ok(())
    })
}

/// Wait for the runtime's kernels (a context synchronize) and until the host has answered every
/// request posted so far (frees posted with `am::post_free` are done then), then give back what
/// the device caches hold and no object uses (`Runtime::drain_caches`): at the end of a phase,
/// before `am_check` asks whether everything was freed or `am_last_bad_frees` lists the bad
/// ones. A kernel launched on another thread while it runs races with it. `*slabs` (if not
/// null) gets the number of slabs given back.
///
/// # Safety
/// `slabs` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_drain_caches(runtime: *mut am_runtime, slabs: *mut u64) -> am_status {
    guard("am_drain_caches", || {
        let entry = registry::get(runtime)?;
        let given = entry.runtime.drain_caches()?;
        if !slabs.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { slabs.write(given as u64) };
        }
        Ok(())
    })
}

/// Destroy a runtime: wait for the kernels of its context (they may be waiting on its mailbox),
/// stop its service thread, release its arena and mailbox, and unbind it if it was bound. Every
/// handle it gave becomes invalid; a later call with it is `AM_ERR_INVALID_RUNTIME`.
#[unsafe(no_mangle)]
pub extern "C" fn am_runtime_destroy(runtime: *mut am_runtime) -> am_status {
    guard("am_runtime_destroy", || registry::remove(runtime))
}

/// The backend running: `AM_BACKEND_CUDA` or `AM_BACKEND_SIM`.
///
/// # Safety
/// `backend` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_runtime_backend(
    runtime: *const am_runtime,
    backend: *mut u32,
) -> am_status {
    guard("am_runtime_backend", || {
        require(backend, "backend")?;
        let kind = match registry::get(runtime)?.runtime.backend() {
            BackendKind::Cuda => AM_BACKEND_CUDA,
            BackendKind::Sim => AM_BACKEND_SIM,
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { backend.write(kind) };
        Ok(())
    })
}

/// Why this backend was chosen, as a NUL-terminated string: up to `capacity - 1` bytes are
/// copied into `buffer` (which may be null when `capacity` is 0) and `*length` (if not null) is
/// set to the whole message's length, as `snprintf` does.
///
/// # Safety
/// `buffer` is null or writable for `capacity` bytes; `length` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_runtime_backend_reason(
    runtime: *const am_runtime,
    buffer: *mut c_char,
    capacity: usize,
    length: *mut usize,
) -> am_status {
    guard("am_runtime_backend_reason", || {
        let entry = registry::get(runtime)?;
        let reason = entry.runtime.backend_reason().as_bytes();
        if capacity > 0 {
            if buffer.is_null() {
                return Err(Failure::null("buffer"));
            }
            let n = reason.len().min(capacity - 1);
            // SAFETY: `buffer` is writable for `capacity` > n bytes by the caller's contract.
            unsafe {
                std::ptr::copy_nonoverlapping(reason.as_ptr(), buffer.cast::<u8>(), n);
                buffer.add(n).write(0);
            }
        }
        if !length.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { length.write(reason.len()) };
        }
        Ok(())
    })
}

/// The device mailbox, to pass to kernels that take an `am::DeviceMailbox` argument (CUDA
/// backend; `AM_ERR_WRONG_BACKEND` on the simulation).
///
/// # Safety
/// `mailbox` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_runtime_device_mailbox(
    runtime: *const am_runtime,
    mailbox: *mut DeviceMailbox,
) -> am_status {
    guard("am_runtime_device_mailbox", || {
        require(mailbox, "mailbox")?;
        let m = registry::get(runtime)?.runtime.mailbox_arg()?.0;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { mailbox.write(m) };
        Ok(())
    })
}

/// Make `runtime` the default mailbox of every kernel of the program on the runtime's device:
/// every translation unit that includes `<alignmalloc/alignmalloc.cuh>` (compiled by nvcc)
/// registered itself before `main`, and each one's copy on that device is written (whatever
/// device is current; the caller's current device is left as it was). With several GPUs, bind
/// one runtime per device: each device's kernels allocate from the runtime bound there. Binding
/// another runtime of the same device replaces it. CUDA backend only. Destroying the runtime
/// unbinds it.
#[unsafe(no_mangle)]
pub extern "C" fn am_bind(runtime: *const am_runtime) -> am_status {
    guard("am_bind", || registry::bind(runtime))
}

/// Register one translation unit's default-mailbox writer (called by `alignmalloc.cuh` before
/// `main`; programs do not call it). The unit is written at once on every device that has a
/// bound runtime.
#[unsafe(no_mangle)]
pub extern "C" fn am_register_unit(binder: am_unit_binder) -> am_status {
    guard("am_register_unit", || registry::register_unit(binder))
}

/// One object of `bytes` bytes in plain (thread-contiguous) memory; `*handle` is its handle, and
/// `am_handle_pointer(*handle, 0)` its address.
///
/// # Safety
/// `handle` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_alloc(
    runtime: *const am_runtime,
    bytes: u64,
    handle: *mut am_handle,
) -> am_status {
    guard("am_alloc", || {
        require(handle, "handle")?;
        let h = registry::get(runtime)?.runtime.alloc(bytes)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { handle.write(h.0) };
        Ok(())
    })
}

/// An object of `bytes_each` bytes for each of `threads` threads, warp-arranged as a kernel's
/// warps would get them from `am::malloc` (a last warp of a few threads is packed, with plain
/// handles that `am::ptr` reads alike): `handles[t]` is thread `t`'s. All or nothing.
///
/// # Safety
/// `handles` is null or writable for `threads` handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_alloc_arranged(
    runtime: *const am_runtime,
    threads: u32,
    bytes_each: u64,
    handles: *mut am_handle,
) -> am_status {
    guard("am_alloc_arranged", || {
        require(handles, "handles")?;
        let got = registry::get(runtime)?
            .runtime
            .alloc_arranged(threads, bytes_each)?;
        for (t, h) in got.handles().iter().enumerate() {
            // SAFETY: `handles` has room for `threads` entries by the caller's contract, and
            // there is one handle per thread.
            unsafe { handles.add(t).write(h.0) };
        }
        Ok(())
    })
}

/// Free one object (a null handle is a no-op). Double, foreign and interior handles get
/// `AM_ERR_DOUBLE_FREE`, `AM_ERR_INVALID_HANDLE` and `AM_ERR_INTERIOR_POINTER`, and change
/// nothing.
#[unsafe(no_mangle)]
pub extern "C" fn am_free(runtime: *const am_runtime, handle: am_handle) -> am_status {
    guard("am_free", || {
        Ok(registry::get(runtime)?.runtime.free(Handle(handle))?)
    })
}

/// Free `count` objects (null handles are skipped), 32 at a time as a warp would; every one is
/// tried, and the first failure is returned.
///
/// # Safety
/// `handles` is null (only with `count` 0) or readable for `count` handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_free_many(
    runtime: *const am_runtime,
    handles: *const am_handle,
    count: usize,
) -> am_status {
    guard("am_free_many", || {
        let entry = registry::get(runtime)?;
        if count == 0 {
            return Ok(());
        }
        require(handles, "handles")?;
        // SAFETY: readable for `count` handles by the caller's contract; Handle is a
        // transparent u64.
        let handles = unsafe { std::slice::from_raw_parts(handles.cast::<Handle>(), count) };
        Ok(entry.runtime.free_many(handles)?)
    })
}

/// Free the object whose first byte `pointer` is (from device-side `am::malloc_plain`, or the
/// address of a plain handle); null is a no-op. Judged like `am_free`.
#[unsafe(no_mangle)]
pub extern "C" fn am_free_pointer(runtime: *const am_runtime, pointer: *const c_void) -> am_status {
    guard("am_free_pointer", || {
        Ok(registry::get(runtime)?
            .runtime
            .free_pointer(pointer as usize as u64)?)
    })
}

/// Copy `length` bytes from `source` into the object of `handle` from byte `offset`, through its
/// layout. Past the object's capacity: `AM_ERR_OUT_OF_BOUNDS`, nothing written.
///
/// # Safety
/// `source` is null (only with `length` 0) or readable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_write(
    runtime: *const am_runtime,
    handle: am_handle,
    offset: u64,
    source: *const c_void,
    length: usize,
) -> am_status {
    guard("am_write", || {
        let entry = registry::get(runtime)?;
        let bytes = if length == 0 {
            &[][..]
        } else if source.is_null() {
            return Err(Failure::null("source"));
        } else {
            // SAFETY: readable for `length` bytes by the caller's contract.
            unsafe { std::slice::from_raw_parts(source.cast::<u8>(), length) }
        };
        Ok(entry.runtime.write(Handle(handle), offset, bytes)?)
    })
}

/// Copy `length` bytes of the object of `handle` from byte `offset` into `destination`.
///
/// # Safety
/// `destination` is null (only with `length` 0) or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_read(
    runtime: *const am_runtime,
    handle: am_handle,
    offset: u64,
    destination: *mut c_void,
    length: usize,
) -> am_status {
    guard("am_read", || {
        let entry = registry::get(runtime)?;
        let out = if length == 0 {
            &mut [][..]
        } else if destination.is_null() {
            return Err(Failure::null("destination"));
        } else {
            // SAFETY: writable for `length` bytes by the caller's contract.
            unsafe { std::slice::from_raw_parts_mut(destination.cast::<u8>(), length) }
        };
        Ok(entry.runtime.read(Handle(handle), offset, out)?)
    })
}

/// Bytes the object of `handle` may use from its start.
///
/// # Safety
/// `bytes` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_capacity(
    runtime: *const am_runtime,
    handle: am_handle,
    bytes: *mut u64,
) -> am_status {
    guard("am_capacity", || {
        require(bytes, "bytes")?;
        let capacity = registry::get(runtime)?.runtime.capacity(Handle(handle))?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { bytes.write(capacity) };
        Ok(())
    })
}

/// The tier the object of `handle` lies in (`AM_TIER_ANY`, `AM_TIER_DEVICE` or `AM_TIER_HOST`);
/// an address outside the arena is `AM_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `tier` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_tier_of(
    runtime: *const am_runtime,
    handle: am_handle,
    tier: *mut u32,
) -> am_status {
    guard("am_tier_of", || {
        require(tier, "tier")?;
        let address = Handle(handle).address();
        let found = registry::get(runtime)?
            .runtime
            .tier_of(address)
            .ok_or_else(|| {
                Failure::new(
                    AM_ERR_INVALID_ARGUMENT,
                    format!("{address:#x} is not in the runtime's arena"),
                )
            })?;
        let code = match found {
            runtime::Tier::Any => AM_TIER_ANY,
            runtime::Tier::Device => AM_TIER_DEVICE,
            runtime::Tier::Host => AM_TIER_HOST,
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { tier.write(code) };
        Ok(())
    })
}

/// The address of byte `offset` of the object behind `handle` (any handle: pure arithmetic, the
/// formula `am::ptr` applies on the device). An arranged object is contiguous only within a
/// tile; plain objects are contiguous.
#[unsafe(no_mangle)]
pub extern "C" fn am_handle_pointer(handle: am_handle, offset: u64) -> *mut c_void {
    Handle(handle).translate(offset) as usize as *mut c_void
}

/// The allocator's counters so far (device and host requests alike).
///
/// # Safety
/// `counters` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_counters_get(
    runtime: *const am_runtime,
    counters: *mut am_counters,
) -> am_status {
    guard("am_counters_get", || {
        require(counters, "counters")?;
        let c = am_counters::from(&registry::get(runtime)?.runtime.counters()?);
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { counters.write(c) };
        Ok(())
    })
}

/// The service thread's statistics so far.
///
/// # Safety
/// `stats` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_service_stats_get(
    runtime: *const am_runtime,
    stats: *mut am_service_stats,
) -> am_status {
    guard("am_service_stats_get", || {
        require(stats, "stats")?;
        let s = am_service_stats::from(&registry::get(runtime)?.runtime.service_stats());
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { stats.write(s) };
        Ok(())
    })
}

/// The device caches' counters: slabs handed out, given back and denied, bytes held now and at
/// most (`enabled` is false, and the rest 0, when the runtime has no caches).
///
/// # Safety
/// `stats` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_cache_stats_get(
    runtime: *const am_runtime,
    stats: *mut am_cache_stats,
) -> am_status {
    guard("am_cache_stats_get", || {
        require(stats, "stats")?;
        let s = am_cache_stats::from(registry::get(runtime)?.runtime.cache_stats());
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { stats.write(s) };
        Ok(())
    })
}

/// The last frees the host refused, oldest first: up to `capacity` of them written to
/// `bad_frees`, and how many the runtime keeps now (at most 64) to `*count`. Frees posted with
/// `am::post_free` are judged when the host answers them: call `am_drain_caches` (which waits for
/// those answers) first. Frees the device caches judge return their outcome to the freeing lane
/// and are only counted (`am_counters_get`).
///
/// # Safety
/// `bad_frees` is null (with `capacity` 0) or writable for `capacity` elements; `count` is null
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_last_bad_frees(
    runtime: *const am_runtime,
    bad_frees: *mut am_bad_free,
    capacity: usize,
    count: *mut usize,
) -> am_status {
    guard("am_last_bad_frees", || {
        require(count, "count")?;
        if capacity > 0 {
            require(bad_frees, "bad_frees")?;
        }
        let kept = registry::get(runtime)?.runtime.last_bad_frees();
        for (i, b) in kept.iter().take(capacity).enumerate() {
            // SAFETY: i < capacity, and `bad_frees` is writable for `capacity` elements by the
            // caller's contract.
            unsafe { bad_frees.add(i).write(am_bad_free::from(b)) };
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { count.write(kept.len()) };
        Ok(())
    })
}

/// Give quarantined chunks back and check the allocator's invariants: `AM_OK`, or
/// `AM_ERR_INTERNAL` saying which broke. `*empty` (if not null) says whether nothing is
/// allocated; the device caches' slabs count until `am_drain_caches` gives them back.
///
/// # Safety
/// `empty` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_check(runtime: *const am_runtime, empty: *mut bool) -> am_status {
    guard("am_check", || {
        let entry = registry::get(runtime)?;
        entry.runtime.check_invariants().map_err(|broken| {
            Failure::new(AM_ERR_INTERNAL, format!("invariant broken: {broken}"))
        })?;
        if !empty.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { empty.write(entry.runtime.is_empty()) };
        }
        Ok(())
    })
}

/// The unified-memory counters since the last call, in all; the live chunks they fall in are
/// read with `am_fault_chunk` until the next call. Needs `options.fault_counters`.
///
/// # Safety
/// `report` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_take_faults(
    runtime: *const am_runtime,
    report: *mut am_fault_report,
) -> am_status {
    guard("am_take_faults", || {
        require(report, "report")?;
        let entry = registry::get(runtime)?;
        let taken = entry.runtime.take_faults()?;
        let summary = am_fault_report {
            total: taken.total.into(),
            unattributed: taken.unattributed.into(),
            dropped_records: taken.dropped_records,
            chunks: taken.by_chunk.len(),
        };
        *entry.faults.lock().unwrap_or_else(|p| p.into_inner()) = taken;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { report.write(summary) };
        Ok(())
    })
}

/// Chunk `index` (0 .. `report.chunks`, by base address) of the last `am_take_faults`: its base
/// address and counts.
///
/// # Safety
/// `chunk_base` and `counts` are null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn am_fault_chunk(
    runtime: *const am_runtime,
    index: usize,
    chunk_base: *mut u64,
    counts: *mut am_fault_counts,
) -> am_status {
    guard("am_fault_chunk", || {
        require(chunk_base, "chunk_base")?;
        require(counts, "counts")?;
        let entry = registry::get(runtime)?;
        let faults = entry.faults.lock().unwrap_or_else(|p| p.into_inner());
        let (base, c) = faults.by_chunk.iter().nth(index).ok_or_else(|| {
            Failure::new(
                AM_ERR_INVALID_ARGUMENT,
                format!(
                    "index {index} is past the {} chunks of the last am_take_faults",
                    faults.by_chunk.len()
                ),
            )
        })?;
        // SAFETY: both non-null and writable by the caller's contract.
        unsafe {
            chunk_base.write(*base);
            counts.write(am_fault_counts::from(*c));
        }
        Ok(())
    })
}

/// This thread's last failure message ("" if none), valid until this thread's next failure.
#[unsafe(no_mangle)]
pub extern "C" fn am_last_error() -> *const c_char {
    status::last_error()
}

/// The name of a status code ("AM_ERR_DOUBLE_FREE"), or "unknown status" for other values.
#[unsafe(no_mangle)]
pub extern "C" fn am_status_name(status: am_status) -> *const c_char {
    status::name_of(status).map_or(c"unknown status".as_ptr(), |name| name.as_ptr())
}

#[cfg(test)]
mod tests;
