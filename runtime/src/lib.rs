//! runtime: the public Rust API of alignmalloc.
//!
//! Built so far: [`cuda`], which finds and opens a GPU without panicking; [`nvrtc`], which
//! compiles CUDA C++ (the project's kernels and user kernels that include `<alignmalloc/...>`) to
//! PTX through NVRTC; and [`gpu`], the pinned mailbox and the managed arena. The runtime proper
//! (builder, backends, launch API, fault counters, C ABI) is not built yet.

pub mod cuda;
pub mod gpu;
pub mod nvrtc;
