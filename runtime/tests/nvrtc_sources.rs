//! Every CUDA source of the project compiles with NVRTC, through the path the runtime uses.
//!
//! Needs NVRTC (no GPU). Where NVRTC is missing the tests say so and pass, unless
//! `ALIGNMALLOC_REQUIRE_NVRTC=1` (as in CI), where a missing NVRTC fails them.

use runtime::nvrtc::{CompileError, Compiler};

fn compiler() -> Option<Compiler> {
    match Compiler::new() {
        Ok(c) => Some(c),
        Err(e) if std::env::var_os("ALIGNMALLOC_REQUIRE_NVRTC").is_some_and(|v| v == "1") => {
            panic!("ALIGNMALLOC_REQUIRE_NVRTC=1 but: {e}")
        }
        Err(e) => {
            eprintln!("NVRTC unavailable, device sources not compiled: {e}");
            None
        }
    }
}

/// NVRTC lists the architectures it targets, and a device newer than all of them gets PTX for
/// the newest, which compiles.
#[test]
fn the_target_comes_from_what_nvrtc_supports() {
    let Some(_) = compiler() else { return };
    let archs = runtime::nvrtc::supported_archs().unwrap();
    assert!(archs.contains(&90), "{archs:?}");
    let newest = *archs.last().unwrap();
    let beyond = (i32::try_from(newest / 10).unwrap() + 1, 0);
    let compiler = Compiler::for_device(beyond).unwrap();
    assert_eq!(compiler.arch(), newest);
    let ptx = compiler
        .compile(device::MAILBOX_STRESS.path, device::MAILBOX_STRESS.text)
        .unwrap();
    assert!(ptx.to_src().contains(&format!(".target sm_{newest}")));
    assert!(matches!(
        Compiler::for_device((5, 0)),
        Err(CompileError::NoTarget { .. })
    ));
}

#[test]
fn every_kernel_compiles() {
    let Some(compiler) = compiler() else { return };
    // The project's kernels and the ones of the `alignmalloc` crate's example.
    let example = device::Source {
        path: "quickstart.cu",
        text: include_str!("../../alignmalloc/examples/quickstart.cu"),
    };
    for kernel in device::KERNELS.iter().chain([&example]) {
        let ptx = compiler
            .compile(kernel.path, kernel.text)
            .unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        assert!(
            text.contains(".entry"),
            "{} has no kernel entry",
            kernel.path
        );
    }
}

#[test]
fn every_header_compiles_alone_and_with_libcudacxx() {
    let Some(compiler) = compiler() else { return };
    for header in device::HEADERS {
        let unit = format!(
            "#include <cuda/atomic>\n#include <{0}>\n#include <{0}>\n\
             extern \"C\" __global__ void am_header_check() {{}}\n",
            header.path
        );
        compiler
            .compile(&format!("check_{}", header.path.replace('/', "_")), &unit)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn a_device_type_error_is_reported_with_the_log() {
    let Some(compiler) = compiler() else { return };
    let bad = "#include <alignmalloc/alignmalloc.cuh>\n\
               extern \"C\" __global__ void k(char* out) { am::ptr<char[3]> p{0}; *out = p[0][0]; }\n";
    match compiler.compile("bad.cu", bad) {
        Err(CompileError::Compile { name, log }) => {
            assert_eq!(name, "bad.cu");
            assert!(log.contains("power of two"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn the_public_api_compiles_and_exports_the_default_mailbox() {
    let Some(compiler) = compiler() else { return };
    // Every device entry point of alignmalloc.cuh, the default and the explicit mailbox, the
    // plain-pointer path, frees waiting and posted, and am::ptr's index arithmetic, const views and piecewise elements.
    let unit = r#"
        #include <alignmalloc/alignmalloc.cuh>
        struct Triple { float x, y, z; };
        extern "C" __global__ void k(am::DeviceMailbox mb, unsigned long long* out) {
          unsigned status;
          am::ptr<unsigned> a{am::malloc(4096, &status)};
          am::ptr<const unsigned> view = a + 3;
          out[0] = view[1] + (unsigned)(view - a);
          am::ptr<Triple> t{am::malloc_contiguous(12 * 100)};
          t.store(5, Triple{1, 2, 3});
          out[1] = (unsigned long long)t.load(5).y;
          void* p = am::malloc_plain(64);
          out[2] = am::free(p).lane_status + am::free(a.handle).status + am::free(t.handle).status;
          out[3] = am::free(mb, am::malloc(mb, 8)).status + (am::free(mb, am::malloc_plain(mb, 8)).status);
          out[4] = am::post_free(am::malloc(1 << 20)).status + am::post_free(am::malloc_plain(64)).status +
                   am::post_free(mb, am::malloc(mb, 8)).status + am::post_free(mb, am::malloc_plain(mb, 8)).status;
        }
    "#;
    let ptx = compiler
        .compile("public_api.cu", unit)
        .unwrap_or_else(|e| panic!("{e}"))
        .to_src();
    // Unmangled and of the mailbox's size, so the runtime finds it by name after loading.
    let declaration = format!(
        ".global .align 8 .b8 {}[{}];",
        device::DEFAULT_MAILBOX_SYMBOL,
        std::mem::size_of::<orchestrator::DeviceMailbox>()
    );
    assert!(
        ptx.contains(&declaration),
        "no `{declaration}` among the module's globals: {}",
        ptx.lines()
            .filter(|l| l.contains(".global"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn element_access_by_reference_is_refused_for_sizes_that_straddle_tiles() {
    let Some(compiler) = compiler() else { return };
    let unit = "#include <alignmalloc/alignmalloc.cuh>\n\
                struct Triple { float x, y, z; };\n\
                extern \"C\" __global__ void k(float* out) { am::ptr<Triple> p{0}; *out = p[0].x; }\n";
    match compiler.compile("triple.cu", unit) {
        Err(CompileError::Compile { log, .. }) => {
            assert!(log.contains("use load(i) and store(i, v)"), "log: {log}")
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// The runtime's device settings reach the kernels it compiles as `-D` options, and a value the
/// header's range checks refuse stops the compilation with a message naming the macro.
#[test]
fn device_settings_are_compiled_in_and_checked() {
    let Some(compiler) = compiler() else { return };
    let unit = "#include <alignmalloc/alignmalloc.cuh>\n\
                extern \"C\" __global__ void k(unsigned* out) { out[0] = am::kPollPauseMaxNs; \
                out[1] = am::kPollsPerClosedCheck; }\n";
    let settings = runtime::DeviceSettings {
        poll_pause_max_ns: 777_777,
        polls_per_closed_check: 654_321,
        ..Default::default()
    };
    let ptx = compiler
        .clone()
        .with_defines(settings.defines())
        .compile("settings.cu", unit)
        .unwrap_or_else(|e| panic!("{e}"))
        .to_src();
    assert!(ptx.contains("777777") && ptx.contains("654321"), "{ptx}");
    let defaults = compiler.compile("settings.cu", unit).unwrap().to_src();
    assert!(defaults.contains("4096") && !defaults.contains("777777"));
    let inverted = vec![
        "-DALIGNMALLOC_POLL_PAUSE_MIN_NS=5000".to_string(),
        "-DALIGNMALLOC_POLL_PAUSE_MAX_NS=4000".to_string(),
    ];
    match compiler
        .with_defines(inverted)
        .compile("bad_settings.cu", unit)
    {
        Err(CompileError::Compile { log, .. }) => {
            assert!(log.contains("ALIGNMALLOC_POLL_PAUSE_MIN_NS"), "log: {log}")
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}
