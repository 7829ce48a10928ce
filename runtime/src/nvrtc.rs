//! Compiling CUDA C++ to PTX with NVRTC, with alignmalloc's headers and libcu++ on the include path.
//!
//! NVRTC is loaded at run time (nothing about CUDA is needed to build). The compiler finds the
//! CUDA include folders itself, from the first of these that has them: `CUDA_HOME`, `CUDA_PATH`,
//! the folder above each `libnvrtc` on the loader path (`LD_LIBRARY_PATH`; this is also how the
//! NVRTC Python wheels are found), `/usr/local/cuda`. libcu++ (`<cuda/atomic>`) needs both
//! `<root>/include/cccl` and `<root>/include`.
//!
//! alignmalloc's own headers ([`device::HEADERS`], and [`device::KERNEL_HEADERS`] for its own
//! kernels) are written once into a folder named after a
//! hash of their contents under the cache directory (`ALIGNMALLOC_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/alignmalloc`, else `~/.cache/alignmalloc`), and put first on the include path:
//! a stale copy can never be picked up, and user kernels include them as `<alignmalloc/...>`.
//!
//! The target comes from the device and the NVRTC that is loaded, never from a table: NVRTC lists
//! the architectures it can compile for, and [`target_for`] takes the device's own, or, for a
//! device newer than that NVRTC, the newest one below it (PTX for an older virtual architecture
//! runs on newer GPUs: the driver compiles it forward, and says so in a warning).

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
    /// NVRTC cannot compile for the device, not even for an older architecture.
    #[error(
        "NVRTC cannot compile for this device (compute capability {}.{}): its targets are \
         compute_XY for XY in {supported:?}; install an NVRTC that supports the device",
        device.0,
        device.1
    )]
    NoTarget {
        /// The device's compute capability.
        device: (i32, i32),
        /// The architectures NVRTC supports (`major * 10 + minor`).
        supported: Vec<u32>,
    },
    /// NVRTC failed to list its architectures.
    #[error("NVRTC could not list its supported architectures: {0}")]
    Archs(String),
}

/// What to compile for a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The virtual architecture, `major * 10 + minor` (`compute_{arch}`).
    pub arch: u32,
    /// The device is newer than NVRTC's newest target: the driver compiles the PTX forward.
    pub forward: bool,
}

/// The target for a device of compute capability `device`, given NVRTC's `supported`
/// architectures: the device's own, else the newest supported one below it.
pub fn target_for(device: (i32, i32), supported: &[u32]) -> Result<Target, CompileError> {
    let no_target = || CompileError::NoTarget {
        device,
        supported: supported.to_vec(),
    };
    let (major, minor) = (
        u32::try_from(device.0).map_err(|_| no_target())?,
        u32::try_from(device.1).map_err(|_| no_target())?,
    );
    // Minor versions are one digit (9.0 is 90, 12.1 is 121).
    if minor > 9 {
        return Err(no_target());
    }
    let own = major * 10 + minor;
    if supported.contains(&own) {
        return Ok(Target {
            arch: own,
            forward: false,
        });
    }
    supported
        .iter()
        .copied()
        .filter(|&a| a < own)
        .max()
        .map(|arch| Target {
            arch,
            forward: true,
        })
        .ok_or_else(no_target)
}

/// The architectures the loaded NVRTC compiles for (`major * 10 + minor`), ascending.
pub fn supported_archs() -> Result<Vec<u32>, CompileError> {
    use cudarc::nvrtc::sys::{nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs, nvrtcResult};
    // SAFETY: only tries to open the library through the loader; no symbol is called.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CompileError::NvrtcMissing);
    }
    let mut count: std::ffi::c_int = 0;
    // SAFETY: NVRTC writes one int through the pointer, which points at `count`.
    let status = unsafe { nvrtcGetNumSupportedArchs(&mut count) };
    if status != nvrtcResult::NVRTC_SUCCESS {
        return Err(CompileError::Archs(format!("{status:?}")));
    }
    let mut archs = vec![0 as std::ffi::c_int; usize::try_from(count).unwrap_or(0)];
    // SAFETY: NVRTC writes `count` ints, the length of `archs`.
    let status = unsafe { nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    if status != nvrtcResult::NVRTC_SUCCESS {
        return Err(CompileError::Archs(format!("{status:?}")));
    }
    let mut archs: Vec<u32> = archs
        .into_iter()
        .filter_map(|a| u32::try_from(a).ok())
        .collect();
    archs.sort_unstable();
    Ok(archs)
}

/// An NVRTC compiler set up for alignmalloc sources.
#[derive(Clone, Debug)]
pub struct Compiler {
    include_dirs: Vec<PathBuf>,
    arch: u32,
    defines: Vec<String>,
}

impl Compiler {
    /// Load NVRTC, find the CUDA headers and materialise alignmalloc's headers. Targets
    /// `compute_90` (Hopper) until [`Compiler::with_arch`] says otherwise; [`Compiler::for_device`]
    /// targets a device.
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
            arch: 90,
            defines: Vec::new(),
        })
    }

    /// A compiler for a device of compute capability `device` (see [`target_for`]).
    pub fn for_device(device: (i32, i32)) -> Result<Self, CompileError> {
        let compiler = Self::new()?;
        let target = target_for(device, &supported_archs()?)?;
        if target.forward {
            tracing::warn!(
                device = format_args!("{}.{}", device.0, device.1),
                arch = target.arch,
                "the device is newer than NVRTC's newest target: compiling compute_{} PTX, which \
                 the driver compiles forward; a newer NVRTC targets the device itself",
                target.arch
            );
        }
        Ok(compiler.with_arch(target.arch))
    }

    /// Target another virtual architecture, `major * 10 + minor` (`compute_{arch}`).
    pub fn with_arch(mut self, arch: u32) -> Self {
        self.arch = arch;
        self
    }

    /// Add options of the form `-DNAME=VALUE` to every compilation (a runtime adds its
    /// [`crate::settings::DeviceSettings::defines`]).
    pub fn with_defines(mut self, defines: Vec<String>) -> Self {
        self.defines.extend(defines);
        self
    }

    /// The virtual architecture compiled for (`compute_{arch}`).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    /// The include path, alignmalloc's headers first.
    pub fn include_dirs(&self) -> &[PathBuf] {
        &self.include_dirs
    }

    /// Compile one translation unit to PTX.
    pub fn compile(&self, name: &str, source: &str) -> Result<Ptx, CompileError> {
        let mut flags = vec![
            format!("--gpu-architecture=compute_{}", self.arch),
            "--std=c++17".into(),
            "--generate-line-info".into(),
        ];
        flags.extend(self.defines.iter().cloned());
        let options = CompileOptions {
            include_paths: self
                .include_dirs
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            name: Some(name.to_string()),
            options: flags,
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
    for source in device::HEADERS.iter().chain(device::KERNEL_HEADERS) {
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
    for source in device::HEADERS.iter().chain(device::KERNEL_HEADERS) {
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

    /// What NVRTC 13.0 lists.
    const NVRTC_13: [u32; 12] = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];

    #[test]
    fn a_device_nvrtc_knows_is_compiled_for_itself() {
        for (device, arch) in [((9, 0), 90), ((10, 3), 103), ((7, 5), 75)] {
            let t = target_for(device, &NVRTC_13).unwrap();
            assert_eq!((t.arch, t.forward), (arch, false), "{device:?}");
        }
    }

    #[test]
    fn a_device_newer_than_nvrtc_gets_the_newest_target_below_it() {
        for (device, arch) in [
            ((12, 2), 121),
            ((13, 0), 121),
            ((10, 1), 100),
            ((11, 2), 110),
        ] {
            let t = target_for(device, &NVRTC_13).unwrap();
            assert_eq!((t.arch, t.forward), (arch, true), "{device:?}");
        }
    }

    #[test]
    fn a_device_older_than_every_target_is_refused_with_the_list() {
        let err = target_for((7, 0), &NVRTC_13).unwrap_err();
        assert!(matches!(err, CompileError::NoTarget { device: (7, 0), .. }));
        let text = err.to_string();
        assert!(text.contains("7.0") && text.contains("75"), "{text}");
        assert!(
            target_for((9, 10), &NVRTC_13).is_err(),
            "not a compute capability"
        );
        assert!(target_for((-1, 0), &NVRTC_13).is_err());
        assert!(target_for((9, 0), &[]).is_err());
    }

    #[test]
    fn headers_are_written_once_per_content() {
        let dir = std::env::temp_dir().join(format!("am-nvrtc-test-{}", std::process::id()));
        let root = materialize_headers(&dir).unwrap();
        for source in device::HEADERS.iter().chain(device::KERNEL_HEADERS) {
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
