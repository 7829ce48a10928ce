//! Compiling CUDA C++ to PTX with NVRTC, with alignmalloc's headers and libcu++ on the include path.
//!
//! NVRTC is loaded at run time (nothing about CUDA is needed to build). The compiler finds the
//! CUDA include folders itself, from the first of these that has them: `CUDA_HOME`, `CUDA_PATH`,
//! the folder above each `libnvrtc` on the loader path (`LD_LIBRARY_PATH`; this is also how the
//! NVRTC Python wheels are found), `/usr/local/cuda`. libcu++ (`<cuda/atomic>`) needs both
//! `<root>/include/cccl` and `<root>/include`.
//!
//! alignmalloc's own headers ([`device::HEADERS`]) are written once into a folder named after a
//! hash of their contents under the cache directory (`ALIGNMALLOC_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/alignmalloc`, else `~/.cache/alignmalloc`), and put first on the include path:
//! a stale copy can never be picked up, and user kernels include them as `<alignmalloc/...>`.

use std::path::{Path, PathBuf};

use cudarc::nvrtc::{CompileOptions, Ptx};
use thiserror::Error;

/// Why a compilation could not happen or failed.
#[derive(Debug, Error)]
pub enum CompileError {
    /// The NVRTC library could not be loaded.
    #[error(
        "NVRTC (libnvrtc.so) could not be loaded: install the CUDA toolkit, or the NVRTC wheel \
         (pip install nvidia-cuda-nvrtc==13.0.*) and put its lib folder on LD_LIBRARY_PATH"
    )]
    NvrtcMissing,
    /// No folder with the CUDA headers libcu++ needs was found.
    #[error(
        "no CUDA include folder with libcu++ (cuda/atomic) was found; searched {searched:?}; \
         set CUDA_HOME to the CUDA root"
    )]
    NoCudaHeaders {
        /// The roots that were tried.
        searched: Vec<PathBuf>,
    },
    /// The embedded headers could not be written to the cache directory.
    #[error("cannot write the alignmalloc headers to {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// NVRTC rejected the source.
    #[error("NVRTC could not compile {name}:\n{log}")]
    Compile {
        /// The translation unit's name.
        name: String,
        /// NVRTC's log, or the error it returned.
        log: String,
    },
}

/// An NVRTC compiler set up for alignmalloc sources.
#[derive(Clone, Debug)]
pub struct Compiler {
    include_dirs: Vec<PathBuf>,
    arch: &'static str,
}

impl Compiler {
    /// Load NVRTC, find the CUDA headers and materialise alignmalloc's headers. Targets
    /// `compute_90` (Hopper) until [`Compiler::with_arch`] says otherwise.
    pub fn new() -> Result<Self, CompileError> {
        // SAFETY: only tries to open the library through the loader; no symbol is called.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CompileError::NvrtcMissing);
        }
        let cuda = find_cuda_include_dirs()?;
        let ours = materialize_headers(&cache_dir())?;
        let mut include_dirs = vec![ours];
        include_dirs.extend(cuda);
        tracing::debug!(?include_dirs, "NVRTC include path");
        Ok(Self {
            include_dirs,
            arch: "compute_90",
        })
    }

    /// Target another virtual architecture (`compute_XY`), for example the device's.
    pub fn with_arch(mut self, arch: &'static str) -> Self {
        self.arch = arch;
        self
    }

    /// The include path, alignmalloc's headers first.
    pub fn include_dirs(&self) -> &[PathBuf] {
        &self.include_dirs
    }

    /// Compile one translation unit to PTX.
    pub fn compile(&self, name: &str, source: &str) -> Result<Ptx, CompileError> {
        let options = CompileOptions {
            include_paths: self
                .include_dirs
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            arch: Some(self.arch),
            name: Some(name.to_string()),
            options: vec!["--std=c++17".into(), "--generate-line-info".into()],
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(|e| {
            let log = match &e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => format!("{other:?}"),
            };
            CompileError::Compile {
                name: name.to_string(),
                log,
            }
        })?;
        tracing::info!(
            name,
            arch = self.arch,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compiled"
        );
        Ok(ptx)
    }
}

/// Where alignmalloc keeps generated files.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ALIGNMALLOC_CACHE_DIR") {
        return dir.into();
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Path::new(&dir).join("alignmalloc");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return Path::new(&home).join(".cache").join("alignmalloc");
    }
    std::env::temp_dir().join("alignmalloc")
}

/// Roots that may hold the CUDA headers, in the order they are tried.
fn candidate_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        for dir in std::env::split_paths(&paths) {
            let has_nvrtc = std::fs::read_dir(&dir).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("libnvrtc.so"))
            });
            if has_nvrtc && let Some(parent) = dir.parent() {
                roots.push(parent.to_path_buf());
            }
        }
    }
    roots.push("/usr/local/cuda".into());
    roots.push("/usr/local/cuda/targets/x86_64-linux".into());
    roots
}

/// The first root with libcu++: its `include/cccl` (when present) and `include`.
fn find_cuda_include_dirs() -> Result<Vec<PathBuf>, CompileError> {
    let roots = candidate_roots();
    for root in &roots {
        let include = root.join("include");
        let cccl = include.join("cccl");
        if cccl.join("cuda").join("atomic").is_file() {
            return Ok(vec![cccl, include]);
        }
        if include.join("cuda").join("atomic").is_file() {
            return Ok(vec![include]);
        }
    }
    Err(CompileError::NoCudaHeaders { searched: roots })
}

/// FNV-1a over every header's path and text: names the folder the headers are written to.
fn headers_digest() -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for source in device::HEADERS {
        for byte in source
            .path
            .bytes()
            .chain([0])
            .chain(source.text.bytes())
            .chain([0])
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// Write the embedded headers under `cache` (once per content) and return the include folder.
fn materialize_headers(cache: &Path) -> Result<PathBuf, CompileError> {
    let root = cache.join(format!("include-{:016x}", headers_digest()));
    for source in device::HEADERS {
        let path = root.join(source.path);
        if std::fs::read_to_string(&path).is_ok_and(|text| text == source.text) {
            continue;
        }
        let io = |source| CompileError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(path.parent().expect("headers live in folders")).map_err(io)?;
        // Write beside, then rename: a concurrent process never sees half a header.
        let partial = path.with_extension(format!("partial-{}", std::process::id()));
        std::fs::write(&partial, source.text).map_err(io)?;
        std::fs::rename(&partial, &path).map_err(io)?;
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_written_once_per_content() {
        let dir = std::env::temp_dir().join(format!("am-nvrtc-test-{}", std::process::id()));
        let root = materialize_headers(&dir).unwrap();
        for source in device::HEADERS {
            assert_eq!(
                std::fs::read_to_string(root.join(source.path)).unwrap(),
                source.text
            );
        }
        assert_eq!(materialize_headers(&dir).unwrap(), root);
        assert!(root.ends_with(format!("include-{:016x}", headers_digest())));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
