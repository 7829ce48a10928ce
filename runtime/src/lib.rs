//! runtime: the public Rust API of alignmalloc.
//!
//! Built so far: [`cuda`], which finds and opens a GPU without panicking, and [`nvrtc`], which
//! compiles CUDA C++ (the project's kernels and user kernels that include `<alignmalloc/...>`) to
//! PTX through NVRTC. The runtime proper (builder, arenas, the cuda and sim backends, fault
//! counters, C ABI) is not built yet.

pub mod cuda;
pub mod nvrtc;
