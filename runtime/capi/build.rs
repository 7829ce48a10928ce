//! Gives libalignmalloc.so its soname, so programs that link it by path (CMake does) record
//! `libalignmalloc.so` and find it through the loader's path, not at the build's location.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libalignmalloc.so");
    }
}
