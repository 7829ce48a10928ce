//! The C ABI from Rust, on the sim backend: the committed header equals what cbindgen makes of
//! the source, and every error a host program can provoke gets its code, a message, and leaves
//! the allocator's invariants intact.

use std::ffi::CStr;
use std::ptr::{null, null_mut};

use super::*;

fn last_error() -> String {
    // SAFETY: am_last_error returns a valid NUL-terminated string owned by this thread.
    unsafe { CStr::from_ptr(am_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A sim runtime with a small arena.
fn sim_runtime(arena_bytes: u64) -> *mut am_runtime {
    let options = am_options {
        backend: AM_BACKEND_SIM,
        arena_bytes,
        ..Default::default()
    };
    let mut rt = null_mut();
    // SAFETY: both pointers are valid locals.
    assert_eq!(unsafe { am_runtime_create(&options, &mut rt) }, AM_OK);
    rt
}

fn check_clean(rt: *mut am_runtime) {
    let mut empty = false;
    assert_eq!(
        // SAFETY: `empty` is a valid local.
        unsafe { am_check(rt, &mut empty) },
        AM_OK,
        "{}",
        last_error()
    );
}

#[test]
fn the_c_example_in_the_docs_is_the_file_ci_compiles() {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let file = std::fs::read_to_string(format!("{crate_dir}/examples/first_steps.c")).unwrap();
    let usage = std::fs::read_to_string(format!("{crate_dir}/../../docs/usage.md")).unwrap();
    let after = usage
        .split_once("`runtime/capi/examples/first_steps.c`")
        .expect("docs/usage.md names the example")
        .1;
    let block = after
        .split_once("```c\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a C block follows")
        .0;
    assert_eq!(
        block, file,
        "copy runtime/capi/examples/first_steps.c into docs/usage.md"
    );
}

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen understands the source")
        .write(&mut generated);
    let path = format!("{crate_dir}/include/alignmalloc.h");
    if std::env::var_os("ALIGNMALLOC_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{path} differs from the source: run \
         `ALIGNMALLOC_BLESS=1 cargo test -p alignmalloc-capi` and commit the header"
    );
}

#[test]
fn every_code_has_its_name() {
    let codes = [
        (AM_OK, "AM_OK"),
        (AM_ERR_NULL_ARGUMENT, "AM_ERR_NULL_ARGUMENT"),
        (AM_ERR_INVALID_RUNTIME, "AM_ERR_INVALID_RUNTIME"),
        (AM_ERR_INVALID_ARGUMENT, "AM_ERR_INVALID_ARGUMENT"),
        (AM_ERR_NO_GPU, "AM_ERR_NO_GPU"),
        (AM_ERR_CUDA, "AM_ERR_CUDA"),
        (AM_ERR_WRONG_BACKEND, "AM_ERR_WRONG_BACKEND"),
        (AM_ERR_ZERO_SIZE, "AM_ERR_ZERO_SIZE"),
        (AM_ERR_SIZE_OVER_LIMIT, "AM_ERR_SIZE_OVER_LIMIT"),
        (AM_ERR_OUT_OF_MEMORY, "AM_ERR_OUT_OF_MEMORY"),
        (AM_ERR_INVALID_HANDLE, "AM_ERR_INVALID_HANDLE"),
        (AM_ERR_DOUBLE_FREE, "AM_ERR_DOUBLE_FREE"),
        (AM_ERR_INTERIOR_POINTER, "AM_ERR_INTERIOR_POINTER"),
        (AM_ERR_OUT_OF_BOUNDS, "AM_ERR_OUT_OF_BOUNDS"),
        (AM_ERR_FAULT_COUNTERS_OFF, "AM_ERR_FAULT_COUNTERS_OFF"),
        (AM_ERR_FAULT_COUNTERS, "AM_ERR_FAULT_COUNTERS"),
        (AM_ERR_CONFIG, "AM_ERR_CONFIG"),
        (AM_ERR_NOTHING_TO_BIND, "AM_ERR_NOTHING_TO_BIND"),
        (AM_ERR_INTERNAL, "AM_ERR_INTERNAL"),
        (AM_ERR_CACHED_OBJECT, "AM_ERR_CACHED_OBJECT"),
    ];
    assert_eq!(codes.len(), status::NAMES.len());
    for (code, name) in codes {
        // SAFETY: am_status_name returns a static NUL-terminated string.
        let got = unsafe { CStr::from_ptr(am_status_name(code)) };
        assert_eq!(got.to_str().unwrap(), name);
    }
    // SAFETY: as above.
    let other = unsafe { CStr::from_ptr(am_status_name(-1)) };
    assert_eq!(other.to_str().unwrap(), "unknown status");
}

#[test]
fn counter_arrays_hold_every_code() {
    assert_eq!(AM_REQUEST_STATUSES, orchestrator::Status::COUNT);
    assert_eq!(AM_LANE_STATUSES, orchestrator::LaneStatus::ALL.len());
}

#[test]
fn host_objects_round_trip_and_bad_input_gets_its_code() {
    let rt = sim_runtime(64 << 20);
    let mut backend = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_runtime_backend(rt, &mut backend) }, AM_OK);
    assert_eq!(backend, AM_BACKEND_SIM);
    let mut len = 0usize;
    let mut reason = [0 as c_char; 8];
    assert_eq!(
        // SAFETY: the buffer has 8 bytes.
        unsafe { am_runtime_backend_reason(rt, reason.as_mut_ptr(), reason.len(), &mut len) },
        AM_OK
    );
    // SAFETY: NUL-terminated by the call.
    let short = unsafe { CStr::from_ptr(reason.as_ptr()) };
    assert_eq!(short.to_bytes(), &b"asked for"[..7]);
    assert_eq!(len, "asked for".len());

    // A plain object: write, read back, capacity, free.
    let mut h: am_handle = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_alloc(rt, 1000, &mut h) }, AM_OK);
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(
        // SAFETY: `data` has 1000 bytes.
        unsafe { am_write(rt, h, 0, data.as_ptr().cast(), data.len()) },
        AM_OK
    );
    let mut back = vec![0u8; 1000];
    assert_eq!(
        // SAFETY: `back` has 1000 bytes.
        unsafe { am_read(rt, h, 0, back.as_mut_ptr().cast(), back.len()) },
        AM_OK
    );
    assert_eq!(back, data);
    let mut capacity = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_capacity(rt, h, &mut capacity) }, AM_OK);
    assert!(capacity >= 1000);
    assert_eq!(
        // SAFETY: `back` has 1000 bytes; the access runs past the capacity.
        unsafe { am_read(rt, h, capacity - 10, back.as_mut_ptr().cast(), 11) },
        AM_ERR_OUT_OF_BOUNDS
    );
    assert!(last_error().contains("run past"), "{}", last_error());
    assert_eq!(am_free(rt, h + 16), AM_ERR_INTERIOR_POINTER);
    assert_eq!(am_free(rt, h), AM_OK);
    assert_eq!(am_free(rt, h), AM_ERR_DOUBLE_FREE);
    assert!(last_error().contains("already freed"), "{}", last_error());
    assert_eq!(
        // SAFETY: `back` has 1000 bytes; the object is freed.
        unsafe { am_read(rt, h, 0, back.as_mut_ptr().cast(), 8) },
        AM_ERR_DOUBLE_FREE
    );
    // A read is not a free: the message says the object was freed.
    let message = last_error();
    assert!(
        message.contains("accessing")
            && message.contains("was freed")
            && !message.contains("already"),
        "{message}"
    );
    assert_eq!(am_free(rt, 0x1234_5000), AM_ERR_INVALID_HANDLE);
    assert_eq!(am_free(rt, 0), AM_OK);
    // The three bad frees above are the last ones kept, oldest first, with their ranks.
    let mut bad = [am_bad_free::default(); 8];
    let mut count = 0;
    assert_eq!(
        // SAFETY: room for 8 entries; valid out-pointer.
        unsafe { am_last_bad_frees(rt, bad.as_mut_ptr(), bad.len(), &mut count) },
        AM_OK
    );
    assert_eq!(count, 3);
    let statuses: Vec<u32> = bad[..3].iter().map(|b| b.lane_status).collect();
    assert_eq!(statuses, [3, 2, 1], "interior, double, invalid");
    assert_eq!(bad[1].handle, h);
    assert_eq!(bad[2].number, bad[0].number + 2);
    assert_eq!(
        // SAFETY: capacity 0 with a null array; valid out-pointer.
        unsafe { am_last_bad_frees(rt, std::ptr::null_mut(), 0, &mut count) },
        AM_OK
    );
    assert_eq!(count, 3, "the count without copying");
    assert_eq!(
        // SAFETY: a null array with a capacity is refused before any write.
        unsafe { am_last_bad_frees(rt, std::ptr::null_mut(), 4, &mut count) },
        AM_ERR_NULL_ARGUMENT
    );
    check_clean(rt);

    // By pointer.
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_alloc(rt, 64, &mut h) }, AM_OK);
    let p = am_handle_pointer(h, 0);
    assert_eq!(p as u64, Handle(h).address());
    assert_eq!(
        am_free_pointer(rt, p.cast::<u8>().wrapping_add(8).cast()),
        AM_ERR_INTERIOR_POINTER
    );
    assert_eq!(am_free_pointer(rt, p), AM_OK);
    assert_eq!(am_free_pointer(rt, p), AM_ERR_DOUBLE_FREE);
    assert_eq!(am_free_pointer(rt, null()), AM_OK);

    // Arranged objects for 100 threads, freed together.
    let mut handles = vec![0u64; 100];
    assert_eq!(
        // SAFETY: room for 100 handles.
        unsafe { am_alloc_arranged(rt, 100, 8192, handles.as_mut_ptr()) },
        AM_OK
    );
    // Three whole warps arranged; the last 4 threads' arranged chunk would be 8x their bytes,
    // so they are packed, as a kernel's warp of 4 active lanes would be.
    assert!(
        handles[..96]
            .iter()
            .all(|&h| Handle(h).kind() == translator::HandleKind::Arranged)
    );
    assert!(
        handles[96..]
            .iter()
            .all(|&h| Handle(h).kind() == translator::HandleKind::Plain)
    );
    // SAFETY: 100 readable handles.
    assert_eq!(unsafe { am_free_many(rt, handles.as_ptr(), 100) }, AM_OK);
    assert_eq!(
        // SAFETY: as above; every one is freed already.
        unsafe { am_free_many(rt, handles.as_ptr(), 100) },
        AM_ERR_DOUBLE_FREE
    );

    // Sizes and room.
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_alloc(rt, 0, &mut h) }, AM_ERR_ZERO_SIZE);
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { am_alloc(rt, 1 << 40, &mut h) },
        AM_ERR_SIZE_OVER_LIMIT
    );
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { am_alloc(rt, 1 << 30, &mut h) },
        AM_ERR_OUT_OF_MEMORY
    );
    assert!(last_error().contains("no room"), "{}", last_error());

    // Null arguments.
    // SAFETY: null is what is being tested.
    assert_eq!(unsafe { am_alloc(rt, 8, null_mut()) }, AM_ERR_NULL_ARGUMENT);
    assert!(
        last_error().contains("`handle` is null"),
        "{}",
        last_error()
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { am_write(rt, h, 0, null(), 8) },
        AM_ERR_NULL_ARGUMENT
    );
    // SAFETY: as above.
    assert_eq!(unsafe { am_free_many(rt, null(), 3) }, AM_ERR_NULL_ARGUMENT);
    assert_eq!(
        // SAFETY: as above.
        unsafe { am_counters_get(rt, null_mut()) },
        AM_ERR_NULL_ARGUMENT
    );

    // The GPU-only calls say so on the simulation.
    let mut mailbox = DeviceMailbox::default();
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { am_runtime_device_mailbox(rt, &mut mailbox) },
        AM_ERR_WRONG_BACKEND
    );
    assert_eq!(am_bind(rt), AM_ERR_WRONG_BACKEND);
    let mut report = am_fault_report::default();
    assert_eq!(
        // SAFETY: valid out-pointer.
        unsafe { am_take_faults(rt, &mut report) },
        AM_ERR_WRONG_BACKEND
    );

    // The counters saw all of it.
    let mut counters = am_counters::default();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_counters_get(rt, &mut counters) }, AM_OK);
    assert_eq!(counters.lanes_freed, 102);
    assert_eq!(
        counters.by_lane_status[orchestrator::LaneStatus::DoubleFree as usize],
        100 + 2
    );
    check_clean(rt);
    let mut empty = false;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_check(rt, &mut empty) }, AM_OK);
    assert!(empty);

    // Use after destroy, a second destroy, a forged and a null runtime.
    assert_eq!(am_runtime_destroy(rt), AM_OK);
    // SAFETY: valid out-pointer; the runtime is gone.
    assert_eq!(unsafe { am_alloc(rt, 8, &mut h) }, AM_ERR_INVALID_RUNTIME);
    assert!(
        last_error().contains("not a live runtime"),
        "{}",
        last_error()
    );
    assert_eq!(am_runtime_destroy(rt), AM_ERR_INVALID_RUNTIME);
    assert_eq!(
        am_free(0xdead_beef as *const am_runtime, 8),
        AM_ERR_INVALID_RUNTIME
    );
    assert_eq!(am_free(null(), 8), AM_ERR_NULL_ARGUMENT);
}

#[test]
fn a_tiered_runtime_says_which_tier_each_object_is_in() {
    let options = am_options {
        backend: AM_BACKEND_SIM,
        arena_bytes: 32 << 20,
        placement: AM_PLACEMENT_TIERED,
        device_tier_bytes: 8 << 20,
        hot_object_bytes: 64 << 10,
        ..Default::default()
    };
    let mut rt = null_mut();
    assert_eq!(
        // SAFETY: valid locals.
        unsafe { am_runtime_create(&options, &mut rt) },
        AM_OK,
        "{}",
        last_error()
    );
    let (mut hot, mut cold, mut tier) = (0, 0, 7);
    // SAFETY: valid locals.
    unsafe {
        assert_eq!(am_alloc(rt, 1 << 20, &mut hot), AM_OK);
        assert_eq!(am_alloc(rt, 4 << 10, &mut cold), AM_OK);
        assert_eq!(am_tier_of(rt, hot, &mut tier), AM_OK);
        assert_eq!(tier, AM_TIER_DEVICE);
        assert_eq!(am_tier_of(rt, cold, &mut tier), AM_OK);
        assert_eq!(tier, AM_TIER_HOST);
        assert_eq!(am_tier_of(rt, 4096, &mut tier), AM_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("not in the runtime's arena"));
        assert_eq!(am_tier_of(rt, hot, null_mut()), AM_ERR_NULL_ARGUMENT);
        assert_eq!(am_free(rt, hot), AM_OK);
        assert_eq!(am_free(rt, cold), AM_OK);
    }
    check_clean(rt);
    assert_eq!(am_runtime_destroy(rt), AM_OK);
}

#[test]
fn bad_options_name_the_field() {
    let mut rt = null_mut();
    let options = am_options {
        backend: 7,
        ..Default::default()
    };
    assert_eq!(
        // SAFETY: valid locals.
        unsafe { am_runtime_create(&options, &mut rt) },
        AM_ERR_INVALID_ARGUMENT
    );
    assert!(
        last_error().contains("options.backend is 7"),
        "{}",
        last_error()
    );
    assert!(rt.is_null(), "nothing is written on failure");

    let options = am_options {
        size: 12,
        ..Default::default()
    };
    assert_eq!(
        // SAFETY: valid locals.
        unsafe { am_runtime_create(&options, &mut rt) },
        AM_ERR_INVALID_ARGUMENT
    );
    assert!(
        last_error().contains("am_options_default"),
        "{}",
        last_error()
    );

    let options = am_options {
        slot_order: 2,
        ..Default::default()
    };
    assert_eq!(
        // SAFETY: valid locals.
        unsafe { am_runtime_create(&options, &mut rt) },
        AM_ERR_INVALID_ARGUMENT
    );
    for (options, named) in [
        (
            am_options {
                placement: 3,
                ..Default::default()
            },
            "options.placement is 3",
        ),
        (
            am_options {
                hot_object_bytes: 4096,
                ..Default::default()
            },
            "AM_PLACEMENT_TIERED",
        ),
    ] {
        assert_eq!(
            // SAFETY: valid locals.
            unsafe { am_runtime_create(&options, &mut rt) },
            AM_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains(named), "{}", last_error());
    }
    let options = am_options {
        arena_fraction: 1.5,
        ..Default::default()
    };
    assert_eq!(
        // SAFETY: valid locals.
        unsafe { am_runtime_create(&options, &mut rt) },
        AM_ERR_INVALID_ARGUMENT
    );
    let options = am_options {
        backend: AM_BACKEND_SIM,
        arena_bytes: 1 << 20,
        ..Default::default()
    };
    assert_eq!(
        // SAFETY: valid locals.
        unsafe { am_runtime_create(&options, &mut rt) },
        AM_ERR_CONFIG
    );
    assert!(last_error().contains("minimum"), "{}", last_error());
    assert_eq!(
        // SAFETY: null is what is being tested.
        unsafe { am_runtime_create(null(), null_mut()) },
        AM_ERR_NULL_ARGUMENT
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { am_options_default(null_mut()) },
        AM_ERR_NULL_ARGUMENT
    );
}

#[test]
fn binding_with_no_unit_or_a_null_binder_is_refused() {
    assert_eq!(am_register_unit(None), AM_ERR_NULL_ARGUMENT);
    // On the simulation binding is refused before the units are looked at; the unit registry
    // itself is exercised by the CUDA examples.
    let rt = sim_runtime(8 << 20);
    assert_eq!(am_bind(rt), AM_ERR_WRONG_BACKEND);
    assert_eq!(am_runtime_destroy(rt), AM_OK);
}

#[test]
fn a_panic_inside_a_call_becomes_an_internal_error() {
    let got = guard("test_call", || panic!("boom"));
    assert_eq!(got, AM_ERR_INTERNAL);
    assert!(last_error().contains("boom"), "{}", last_error());
    assert!(last_error().starts_with("test_call"), "{}", last_error());
}

#[test]
fn cache_stats_say_whether_the_runtime_has_caches() {
    let rt = sim_runtime(64 << 20);
    let mut stats = am_cache_stats::default();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_cache_stats_get(rt, &mut stats) }, AM_OK);
    assert!(stats.enabled, "on by default");
    assert_eq!((stats.refills, stats.held_bytes), (0, 0), "no kernel ran");
    assert_eq!(
        // SAFETY: a null out-pointer is refused before any write.
        unsafe { am_cache_stats_get(rt, null_mut()) },
        AM_ERR_NULL_ARGUMENT
    );
    assert_eq!(am_runtime_destroy(rt), AM_OK);

    let options = am_options {
        backend: AM_BACKEND_SIM,
        arena_bytes: 64 << 20,
        no_device_caches: true,
        ..Default::default()
    };
    let mut rt = null_mut();
    // SAFETY: both pointers are valid locals.
    assert_eq!(unsafe { am_runtime_create(&options, &mut rt) }, AM_OK);
    let mut stats = am_cache_stats {
        enabled: true,
        refills: 7,
        ..Default::default()
    };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { am_cache_stats_get(rt, &mut stats) }, AM_OK);
    assert_eq!(stats, am_cache_stats::default(), "off: all zero");
    assert_eq!(am_runtime_destroy(rt), AM_OK);
}
