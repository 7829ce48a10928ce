//! Checks of command-line input, made before a subcommand does any work.
//!
//! Every refusal names the option to fix. Numbers are checked while clap parses them (value
//! parsers below, or clap's ranges), so clap's error names the option; what needs the file
//! system or the machine (output folders, input files, the GPU behind `--backend cuda`) is
//! checked by [`output_file`], [`input_file`] and [`on_gpu`], which each subcommand calls first.

use std::path::Path;

use alignmalloc::BackendChoice;
use anyhow::{Context, bail};

/// Threads a kernel runs in: whole warps.
const WARP: u32 = 32;

/// A thread count: a positive multiple of 32 (every kernel runs whole warps, and a count that
/// is not one would be rounded behind the user's back).
pub fn warp_multiple(text: &str) -> Result<u32, String> {
    let n: u32 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a thread count"))?;
    if n == 0 || !n.is_multiple_of(WARP) {
        let below = n / WARP * WARP;
        let above = below + WARP;
        return Err(format!(
            "{n} is not a positive multiple of {WARP} (kernels run whole warps): try {}",
            if below == 0 {
                above.to_string()
            } else {
                format!("{below} or {above}")
            }
        ));
    }
    Ok(n)
}

/// A range in KiB: a power of two of at least 1 KiB.
pub fn power_of_two_kib(text: &str) -> Result<u64, String> {
    let k: u64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a size in KiB"))?;
    if k == 0 || !k.is_power_of_two() {
        return Err(format!(
            "{k} KiB: ranges are powers of two of at least 1 KiB"
        ));
    }
    Ok(k)
}

/// A file the run will write at its end: its folder must exist now, so a long run does not
/// fail at the last step.
pub fn output_file(path: Option<&Path>, option: &str) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    if path.is_dir() {
        bail!("{option} {}: is a folder; name a file", path.display());
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !folder.is_dir() {
        bail!(
            "{option} {}: the folder {} does not exist; create it first",
            path.display(),
            folder.display()
        );
    }
    let meta = std::fs::metadata(folder)
        .with_context(|| format!("{option} {}: reading its folder", path.display()))?;
    if meta.permissions().readonly() {
        bail!(
            "{option} {}: the folder {} is read-only",
            path.display(),
            folder.display()
        );
    }
    Ok(())
}

/// A file the run will read: it must exist and be a file.
pub fn input_file(path: Option<&Path>, option: &str) -> anyhow::Result<()> {
    match path {
        Some(p) if !p.is_file() => bail!("{option} {}: no such file", p.display()),
        _ => Ok(()),
    }
}

/// Whether a runtime built with `choice` will run on the GPU. `--backend cuda` on a machine
/// without a usable GPU is refused here, before any work.
pub fn on_gpu(choice: BackendChoice) -> anyhow::Result<bool> {
    match choice {
        BackendChoice::Sim => Ok(false),
        BackendChoice::Auto => Ok(alignmalloc::internals::cuda::open(0).is_ok()),
        BackendChoice::Cuda => alignmalloc::internals::cuda::open(0)
            .map(|_| true)
            .context("--backend cuda: no CUDA GPU can be opened (use --backend sim or auto)"),
    }
}

/// A JSON report written with --json, or why it cannot be read.
pub fn read_report(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot be read ({e})"))?;
    serde_json::from_str(&text).map_err(|e| format!("not JSON ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_whole_warps_and_the_error_says_which() {
        assert_eq!(warp_multiple("64"), Ok(64));
        let seven = warp_multiple("7").unwrap_err();
        assert!(
            seven.contains("multiple of 32") && seven.contains("try 32"),
            "{seven}"
        );
        assert!(warp_multiple("100").unwrap_err().contains("96 or 128"));
        assert!(warp_multiple("0").is_err());
        assert!(warp_multiple("-32").is_err());
        assert!(warp_multiple("lots").unwrap_err().contains("lots"));
    }

    #[test]
    fn ranges_are_powers_of_two() {
        assert_eq!(power_of_two_kib("1024"), Ok(1024));
        assert!(power_of_two_kib("3").unwrap_err().contains("powers of two"));
        assert!(power_of_two_kib("0").is_err());
    }

    #[test]
    fn an_output_into_a_missing_folder_is_refused_naming_the_option() {
        let err = output_file(Some(Path::new("/nonexistent/dir/x.json")), "--json")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--json") && err.contains("/nonexistent/dir"),
            "{err}"
        );
        let tmp = std::env::temp_dir();
        assert!(output_file(Some(&tmp), "--json").is_err(), "a folder");
        assert!(output_file(Some(&tmp.join("x.json")), "--json").is_ok());
        assert!(
            output_file(Some(Path::new("x.json")), "--json").is_ok(),
            "here"
        );
        assert!(output_file(None, "--json").is_ok());
    }

    #[test]
    fn a_missing_input_is_refused_naming_the_option() {
        let err = input_file(Some(Path::new("/nonexistent/g.txt")), "--snap").unwrap_err();
        assert!(err.to_string().starts_with("--snap /nonexistent/g.txt"));
        assert!(
            input_file(Some(&std::env::temp_dir()), "--snap").is_err(),
            "a folder"
        );
    }

    #[test]
    fn backend_cuda_without_a_gpu_is_refused_naming_the_option() {
        if alignmalloc::internals::cuda::open(0).is_ok() {
            assert!(on_gpu(BackendChoice::Cuda).unwrap());
            return;
        }
        let err = on_gpu(BackendChoice::Cuda).unwrap_err();
        assert!(format!("{err:#}").contains("--backend cuda"), "{err:#}");
        assert!(!on_gpu(BackendChoice::Auto).unwrap());
    }
}
