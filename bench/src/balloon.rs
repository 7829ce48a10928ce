//! `--gpu-memory-gib`: leave a run only part of the GPU's memory. One device allocation (a
//! balloon) holds the rest for as long as it lives, so a working set larger than what is left
//! lives partly in host memory and unified memory pages in and out under the real driver, the
//! same on an 80 GB and a 141 GB card. Device allocations are never evicted for managed memory,
//! so what the balloon holds is out of reach of the run's managed pages.

use alignmalloc::Runtime;
use anyhow::{Context, bail};
use cudarc::driver::CudaSlice;

use crate::progress::note;

/// Bytes in a GiB.
pub const GIB: f64 = (1u64 << 30) as f64;

/// The step by which the balloon shrinks when the driver refuses the whole of the free memory it
/// reported (part of it is the driver's own).
const SHRINK_STEP: u64 = 64 << 20;

/// A parser for `--gpu-memory-gib`: a positive number of GiB.
pub fn gib(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(gib) if gib.is_finite() && gib > 0.0 => Ok(gib),
        _ => Err(format!(
            "{text:?} is not a positive number of GiB (for example 8 or 0.5)"
        )),
    }
}

/// Refuse `--gpu-memory-gib` before any work where it cannot be honoured: on the simulator, or
/// when the GPU has no more free memory than it asks to leave.
pub fn check(leave_gib: Option<f64>, gpu: bool) -> anyhow::Result<()> {
    let Some(gib) = leave_gib else {
        return Ok(());
    };
    if !gpu {
        bail!(
            "--gpu-memory-gib {gib} needs the GPU: it holds the rest of a real card's memory \
             (the simulator's oversubscription study is `alignmalloc uvm-oversub`)"
        );
    }
    let (_, info) =
        alignmalloc::internals::cuda::open(0).context("--gpu-memory-gib: opening the GPU")?;
    let free = info.free_bytes as f64 / GIB;
    if gib >= free {
        bail!(
            "--gpu-memory-gib {gib}: {} has only {free:.2} GiB free, so nothing would be held \
             back; ask for less than that",
            info.name
        );
    }
    Ok(())
}

/// All of the GPU's free memory but what was asked to be left, held until dropped.
pub struct Balloon {
    _held: CudaSlice<u8>,
    left_bytes: u64,
}

impl Balloon {
    /// Hold all free memory of `rt`'s GPU but `leave_gib` GiB (less by up to a few steps of
    /// 64 MiB where the driver keeps part of what it reports free).
    pub fn inflate(rt: &Runtime, leave_gib: f64) -> anyhow::Result<Self> {
        let context = rt.context()?;
        let stream = rt.stream()?;
        let leave = (leave_gib * GIB) as u64;
        let (free, _) = context
            .mem_get_info()
            .context("reading the GPU's free memory")?;
        let free = free as u64;
        if free <= leave {
            bail!(
                "--gpu-memory-gib {leave_gib}: only {:.2} GiB is free once the run's own device \
                 buffers are placed; ask for less",
                free as f64 / GIB
            );
        }
        let mut held_bytes = free - leave;
        let held = loop {
            match stream.alloc_zeros::<u8>(held_bytes as usize) {
                Ok(held) => break held,
                Err(e) if held_bytes > SHRINK_STEP * 16 => {
                    tracing::debug!(error = %e, held_bytes, "balloon refused; shrinking");
                    held_bytes -= SHRINK_STEP;
                }
                Err(e) => return Err(e).context("holding the GPU's memory for --gpu-memory-gib"),
            }
        };
        stream.synchronize()?;
        let (after, _) = context.mem_get_info()?;
        let balloon = Self {
            _held: held,
            left_bytes: after as u64,
        };
        note!(
            "GPU memory: {:.2} GiB held back, {:.2} GiB left to the run (asked: {leave_gib} GiB)",
            held_bytes as f64 / GIB,
            balloon.left_gib()
        );
        Ok(balloon)
    }

    /// GiB free on the GPU right after it was inflated: what the run has.
    pub fn left_gib(&self) -> f64 {
        self.left_bytes as f64 / GIB
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gib_must_be_a_positive_number_and_the_error_says_so() {
        assert_eq!(gib("8"), Ok(8.0));
        assert_eq!(gib("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "eight"] {
            let e = gib(bad).unwrap_err();
            assert!(e.contains("positive number of GiB"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_simulator_refuses_it_before_any_work_and_says_what_to_use() {
        check(None, false).unwrap();
        let e = format!("{:#}", check(Some(4.0), false).unwrap_err());
        assert!(
            e.contains("needs the GPU") && e.contains("uvm-oversub"),
            "{e}"
        );
    }
}
