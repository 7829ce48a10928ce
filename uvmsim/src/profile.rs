//! Named profiles: a GPU's driver settings with the cost model fitted on it, so a program can
//! replay its traces as that machine would run them.
//!
//! The H200 profile's constants are the ones `alignmalloc uvm-calibrate` fitted on an NVIDIA
//! H200 (`bench/results/2026-11-22-h200/uvm-calibrate-lanes.json`, docs/uvmsim.md; a test of the
//! CLI holds them equal to that file, read as the CLI reads it). What the model predicts well (migrated bytes, faults,
//! footprint) and badly (kernel time when the kernel is not bound by migration) is in
//! docs/uvmsim.md; times from it are modelled, not measured.

use crate::cost::CostModel;
use crate::sim::SimConfig;

/// The cost model fitted on the H200, in nanoseconds.
pub const H200_COST: CostModel = CostModel {
    per_batch_ns: 0.0,
    per_block_ns: 2688.4298733722935,
    per_htod_byte_ns: 0.03943300031825516,
    per_dtoh_byte_ns: 0.017985611510791366,
    per_zero_page_ns: 500.0,
    per_instruction_ns: 99.71963463362404,
    per_fault_ns: 9195.970366340747,
    per_copy_ns: 5145.3827728884635,
};

/// The NVIDIA H200 (driver 580, 132 SMs): its driver's settings ([`SimConfig::default`]) with
/// the fitted [`H200_COST`].
pub fn h200() -> SimConfig {
    SimConfig {
        cost: H200_COST,
        ..SimConfig::default()
    }
}

/// The profiles by name.
pub const NAMES: [&str; 1] = ["h200"];

/// The profile called `name` (case-insensitive), or `None` (see [`NAMES`]).
pub fn by_name(name: &str) -> Option<SimConfig> {
    match name.to_ascii_lowercase().as_str() {
        "h200" => Some(h200()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_found_by_their_names_only() {
        for name in NAMES {
            assert!(by_name(name).is_some());
        }
        assert_eq!(by_name("H200"), Some(h200()));
        assert_eq!(h200().cost, H200_COST);
        assert_ne!(
            H200_COST,
            CostModel::default(),
            "fitted, not the round figures"
        );
        assert!(by_name("a100").is_none());
    }
}
