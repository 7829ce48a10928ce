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

#[test]
fn every_kernel_compiles() {
    let Some(compiler) = compiler() else { return };
    // The project's kernels and the one of the runtime's example.
    let example = device::Source {
        path: "quickstart.cu",
        text: include_str!("../examples/quickstart.cu"),
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
    let bad = "#include <alignmalloc/layout.h>\n\
               extern \"C\" __global__ void k() { am::ptr<char[3]> p{0}; (void)p; }\n";
    match compiler.compile("bad.cu", bad) {
        Err(CompileError::Compile { name, log }) => {
            assert_eq!(name, "bad.cu");
            assert!(log.contains("power of two"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}
