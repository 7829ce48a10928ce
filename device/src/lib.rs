//! alignmalloc's CUDA C++ sources, embedded in the binary so the runtime can compile them with
//! NVRTC wherever it runs, and so user kernels can `#include` the same headers.
//!
//! - [`HEADERS`]: what user kernels include (`#include <alignmalloc/alignmalloc.cuh>`, which
//!   includes the rest); the runtime puts them on NVRTC's include path under these relative
//!   paths, and the C library installs the same files for nvcc.
//! - [`KERNELS`]: the project's own kernels (self-tests, benchmarks), each a complete translation
//!   unit with `extern "C"` entry points.
//!
//! `detail/abi.h` is generated from the Rust definitions (the `headergen` crate); the functions
//! of the other headers have Rust twins in `translator` and `orchestrator`, which
//! `device/hostcheck` holds equal.

/// One embedded source file.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// Path relative to `device/include` (headers) or `device/kernels` (kernels).
    pub path: &'static str,
    /// The file's text.
    pub text: &'static str,
}

/// The headers, by include path: the public one, and the internals it includes.
pub const HEADERS: &[Source] = &[
    Source {
        path: "alignmalloc/alignmalloc.cuh",
        text: include_str!("../include/alignmalloc/alignmalloc.cuh"),
    },
    Source {
        path: "alignmalloc/detail/layout.h",
        text: include_str!("../include/alignmalloc/detail/layout.h"),
    },
    Source {
        path: "alignmalloc/detail/abi.h",
        text: include_str!("../include/alignmalloc/detail/abi.h"),
    },
    Source {
        path: "alignmalloc/detail/client.cuh",
        text: include_str!("../include/alignmalloc/detail/client.cuh"),
    },
    Source {
        path: "alignmalloc/detail/cache.cuh",
        text: include_str!("../include/alignmalloc/detail/cache.cuh"),
    },
    Source {
        path: "alignmalloc/detail/warp.cuh",
        text: include_str!("../include/alignmalloc/detail/warp.cuh"),
    },
    Source {
        path: "alignmalloc/detail/cache_geometry.h",
        text: include_str!("../include/alignmalloc/detail/cache_geometry.h"),
    },
    Source {
        path: "alignmalloc/detail/settings.h",
        text: include_str!("../include/alignmalloc/detail/settings.h"),
    },
];

/// Headers of the project's own kernels, by include path (relative to `device/kernels`): the
/// runtime puts them on NVRTC's include path beside [`HEADERS`]; they are not installed for
/// users.
pub const KERNEL_HEADERS: &[Source] = &[Source {
    path: "graph_update.cuh",
    text: include_str!("../kernels/graph_update.cuh"),
}];

/// The name of the default mailbox in a module NVRTC compiled from a source that includes
/// `alignmalloc.cuh`: the runtime writes it when it loads the module.
pub const DEFAULT_MAILBOX_SYMBOL: &str = "alignmalloc_default_mailbox";

/// The layout parity kernel: applies `layout.h` to inputs the host drew, so the host can compare
/// every result with the `translator` crate.
pub const LAYOUT_PARITY: Source = Source {
    path: "layout_parity.cu",
    text: include_str!("../kernels/layout_parity.cu"),
};

/// The device client stress: many warps allocate, tag, check and free against the service thread,
/// and send bad inputs whose statuses they check.
pub const MAILBOX_STRESS: Source = Source {
    path: "mailbox_stress.cu",
    text: include_str!("../kernels/mailbox_stress.cu"),
};

/// The `alignmalloc selftest` kernels: fill and verify, rounds of malloc/free, bad input.
pub const SELFTEST: Source = Source {
    path: "selftest.cu",
    text: include_str!("../kernels/selftest.cu"),
};

/// The access patterns that calibrate uvmsim against the GPU (`alignmalloc uvm-calibrate`).
pub const UVM_PATTERNS: Source = Source {
    path: "uvm_patterns.cu",
    text: include_str!("../kernels/uvm_patterns.cu"),
};

/// Random walks over lists allocated from inside kernels, and their baselines (`alignmalloc
/// walk`).
pub const WALK: Source = Source {
    path: "walk.cu",
    text: include_str!("../kernels/walk.cu"),
};

/// Allocation speed from kernels: am::malloc, am::malloc_contiguous and CUDA's malloc, with a
/// tag check of every object (`alignmalloc alloc`).
pub const ALLOC: Source = Source {
    path: "alloc.cu",
    text: include_str!("../kernels/alloc.cu"),
};

/// The soak of small objects: threads keep live objects across launches, check every byte
/// before freeing, and send bad frees whose statuses they check (`alignmalloc soak`).
pub const SOAK: Source = Source {
    path: "soak.cu",
    text: include_str!("../kernels/soak.cu"),
};

/// Every kernel translation unit (CI compiles each with NVRTC).
pub const KERNELS: &[Source] = &[
    LAYOUT_PARITY,
    MAILBOX_STRESS,
    SELFTEST,
    UVM_PATTERNS,
    WALK,
    ALLOC,
    SOAK,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_file_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let kernels: Vec<Source> = KERNELS.iter().chain(KERNEL_HEADERS).copied().collect();
        for (dir, list) in [("include", HEADERS), ("kernels", &kernels[..])] {
            let mut on_disk: Vec<String> = Vec::new();
            let base = root.join(dir);
            let mut stack = vec![base.clone()];
            while let Some(d) = stack.pop() {
                for entry in std::fs::read_dir(&d).unwrap() {
                    let p = entry.unwrap().path();
                    if p.is_dir() {
                        stack.push(p);
                    } else {
                        let rel = p
                            .strip_prefix(&base)
                            .unwrap()
                            .to_string_lossy()
                            .into_owned();
                        on_disk.push(rel);
                    }
                }
            }
            on_disk.sort();
            let mut embedded: Vec<String> = list.iter().map(|s| s.path.to_string()).collect();
            embedded.sort();
            assert_eq!(
                on_disk, embedded,
                "device/{dir} and the embedded list differ"
            );
        }
    }
}
