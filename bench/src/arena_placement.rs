//! `--placement` and `--hot-object-bytes`: where alignmalloc's arena keeps its pages in a run
//! (docs/placement.md), shared by the commands that measure under memory pressure. The tiered
//! device tier is three quarters of what `--gpu-memory-gib` leaves (the rest for what the run
//! itself keeps on the GPU), or half the arena on the whole card.

// The pieces this command drives or measures directly (alignmalloc's `internals`).
use alignmalloc::internals::ortree;

use alignmalloc::{Placement, RuntimeBuilder};
use anyhow::bail;

/// The share of what `--gpu-memory-gib` leaves that a run gives to data it keeps on the GPU on
/// purpose (alignmalloc's device tier, a baseline's prefetched part); the rest is for what the
/// run itself keeps there.
const DEVICE_SHARE: f64 = 0.75;

/// Bytes a run keeps on the GPU on purpose when `gib` GiB are left: [`DEVICE_SHARE`] of them,
/// rounded down to whole 2 MiB blocks.
pub fn device_budget_bytes(gib: f64) -> u64 {
    (gib * DEVICE_SHARE * crate::balloon::GIB) as u64 / ortree::VABLOCK_BYTES
        * ortree::VABLOCK_BYTES
}

/// The options.
#[derive(clap::Args, Clone, Debug)]
pub struct PlacementArgs {
    /// Where alignmalloc's arena keeps its pages (docs/placement.md): `migrate` (no advice),
    /// `host-mapped` (host memory read over the link) or `tiered` (a device tier, three
    /// quarters of --gpu-memory-gib when given, and a host tier). GPU only: the simulator does
    /// not model the driver's advice.
    #[arg(long, value_name = "NAME", default_value = "migrate", value_parser = clap::builder::PossibleValuesParser::new(Placement::NAMED.map(|(name, _)| name)))]
    pub placement: String,
    /// With --placement tiered: objects of at least this many bytes ask the device tier first,
    /// smaller ones the host tier (default 0: the device tier fills in allocation order).
    #[arg(long, value_name = "BYTES")]
    pub hot_object_bytes: Option<u64>,
}

impl PlacementArgs {
    /// The placement asked for.
    pub fn placement(&self) -> anyhow::Result<Placement> {
        Ok(Placement::parse(&self.placement)?)
    }

    /// Refuse, before any work, what cannot apply: a placement other than `migrate` without a
    /// GPU, a hot-object threshold without the tiered placement.
    pub fn check(&self, gpu: bool) -> anyhow::Result<()> {
        let placement = self.placement()?;
        if placement != Placement::Migrate && !gpu {
            bail!(
                "--placement {} needs a GPU: the simulator does not model the driver's advice \
                 (docs/uvmsim.md)",
                self.placement
            );
        }
        if self.hot_object_bytes.is_some() && placement != Placement::Tiered {
            bail!("--hot-object-bytes applies only to --placement tiered");
        }
        Ok(())
    }

    /// `builder` with the placement's settings, the device tier sized from `gpu_memory_gib`.
    pub fn apply(
        &self,
        builder: RuntimeBuilder,
        gpu_memory_gib: Option<f64>,
    ) -> anyhow::Result<RuntimeBuilder> {
        let placement = self.placement()?;
        let mut builder = builder.placement(placement);
        if placement == Placement::Tiered {
            if let Some(gib) = gpu_memory_gib {
                builder = builder.device_tier_bytes(device_budget_bytes(gib).max(4 << 20));
            }
            if let Some(bytes) = self.hot_object_bytes {
                builder = builder.hot_object_bytes(bytes);
            }
        }
        Ok(builder)
    }

    /// One line naming the arena's reservations, for a run whose placement is not `migrate`.
    pub fn describe(&self, rt: &alignmalloc::Runtime) -> Option<String> {
        if self.placement().ok()? == Placement::Migrate {
            return None;
        }
        let sizes: Vec<String> = rt
            .arena_segments()
            .iter()
            .map(|s| (s.1 >> 20).to_string())
            .collect();
        Some(format!(
            "alignmalloc's arena: {} placement, reservations of {} MiB (docs/placement.md)",
            self.placement,
            sizes.join(" + ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::parse;

    #[test]
    fn the_tiered_device_tier_is_three_quarters_of_the_memory_left() {
        let args: PlacementArgs =
            parse(&["--placement", "tiered", "--hot-object-bytes", "256"]).unwrap();
        let settings = args
            .apply(alignmalloc::Runtime::builder(), Some(1.0))
            .unwrap()
            .configured()
            .clone();
        assert_eq!(settings.placement, Placement::Tiered);
        assert_eq!(settings.device_tier_bytes, Some(3 << 28));
        assert_eq!(settings.hot_object_bytes, 256);
        let whole_card = args
            .apply(alignmalloc::Runtime::builder(), None)
            .unwrap()
            .configured()
            .clone();
        assert_eq!(whole_card.device_tier_bytes, None, "the runtime's default");
        let default: PlacementArgs = parse(&[]).unwrap();
        let settings = default
            .apply(alignmalloc::Runtime::builder(), Some(1.0))
            .unwrap()
            .configured()
            .clone();
        assert_eq!(settings, alignmalloc::Settings::default());
    }

    #[test]
    fn what_cannot_apply_is_refused() {
        let tiered: PlacementArgs = parse(&["--placement", "tiered"]).unwrap();
        let err = tiered.check(false).unwrap_err().to_string();
        assert!(err.contains("needs a GPU"), "{err}");
        tiered.check(true).unwrap();
        let stray: PlacementArgs = parse(&["--hot-object-bytes", "4096"]).unwrap();
        assert!(stray.check(true).is_err());
        assert!(parse::<PlacementArgs>(&["--placement", "device"]).is_err());
    }
}
