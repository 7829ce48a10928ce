//! Builds the C shims over the CUDA C++ headers with the host C++ compiler: the layout's
//! functions, and the device caches, the mailbox client and a changing graph's update
//! (`device/kernels/graph_update.cuh`) run on a host warp (`shim/simt.h`,
//! `shim/include/cuda/atomic` standing in for what CUDA provides).

fn main() {
    let include = std::path::Path::new("../include");
    println!("cargo:rerun-if-changed=shim");
    println!("cargo:rerun-if-changed=../include");
    println!("cargo:rerun-if-changed=../kernels/graph_update.cuh");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(include)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file("shim/layout_shim.cpp")
        .compile("alignmalloc_layout_shim");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include("shim/include")
        .include(include)
        .include("../kernels")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file("shim/simt.cpp")
        .file("shim/cache_shim.cpp")
        .file("shim/client_shim.cpp")
        .file("shim/graph_update_shim.cpp")
        .compile("alignmalloc_cache_shim");
    println!("cargo:rustc-link-lib=pthread");
}
