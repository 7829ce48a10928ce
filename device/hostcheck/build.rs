//! Builds the C shim over the CUDA C++ headers with the host C++ compiler.

fn main() {
    let include = std::path::Path::new("../include");
    println!("cargo:rerun-if-changed=shim/layout_shim.cpp");
    println!("cargo:rerun-if-changed=../include");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(include)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file("shim/layout_shim.cpp")
        .compile("alignmalloc_layout_shim");
}
