//! The H200 walk runs the simulator's walk times are checked against.
//!
//! uvmsim predicts migrated bytes and faults well (within 0.2% in its calibration) but the walk's
//! kernel time is not bound by migrations, so a modelled walk time means something only where
//! an H200 run of the same workload says how close it came. These are the committed runs; a sim
//! row shows a modelled time only next to one of them with the same graph, walk length, walks
//! per vertex, seed, allocation order, system and placement, and the ratio between systems it
//! shows is the H200's.

use serde_json::Value;

use super::{Args, Placement};

/// The committed H200 walk reports (`alignmalloc walk --json` on the GPU).
const RUNS: [(&str, &str); 4] = [
    (
        "2026-11-22-h200/walk-rmat16.json",
        include_str!("../../results/2026-11-22-h200/walk-rmat16.json"),
    ),
    (
        "2026-11-22-h200/walk-rmat16-vertex-order.json",
        include_str!("../../results/2026-11-22-h200/walk-rmat16-vertex-order.json"),
    ),
    (
        "2026-11-22-h200/walk-rmat18.json",
        include_str!("../../results/2026-11-22-h200/walk-rmat18.json"),
    ),
    (
        "2026-11-22-h200/walk-rmat20.json",
        include_str!("../../results/2026-11-22-h200/walk-rmat20.json"),
    ),
];

/// What the H200 measured for one system and placement of the same workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct H200Run {
    /// The committed report it comes from (under `bench/results/`).
    pub source: &'static str,
    /// Its walk time, ms (median).
    pub walk_ms: f64,
    /// Its HtoD bytes during the walk.
    pub htod_bytes: Option<u64>,
    /// Its walk time over alignmalloc's in the same placement, as measured.
    pub ratio_to_alignmalloc: Option<f64>,
}

/// The workloads that have H200 runs, for the message when this one has none.
pub fn checked_workloads() -> String {
    let mut names: Vec<String> = RUNS
        .iter()
        .filter_map(|(_, text)| serde_json::from_str::<Value>(text).ok())
        .map(|r| {
            format!(
                "{} ({} steps, seed {}, {} order)",
                r["graph"].as_str().unwrap_or("?"),
                r["length"],
                r["seed"],
                r["order"].as_str().unwrap_or("?")
            )
        })
        .collect();
    names.dedup();
    names.join(", ")
}

/// The H200 run of `system` in `placement` for this workload, if one was committed.
pub fn h200_run(
    graph: &str,
    vertices: usize,
    args: &Args,
    system: &str,
    placement: Placement,
) -> Option<H200Run> {
    let order = serde_json::to_value(args.order).ok()?;
    let walkers = vertices as u64 * u64::from(args.walks_per_vertex);
    RUNS.iter().find_map(|(source, text)| {
        let report: Value = serde_json::from_str(text).ok()?;
        let same = report["graph"] == graph
            && report["walkers"] == walkers
            && report["length"] == args.length
            && report["seed"] == args.seed
            && report["order"] == order;
        if !same {
            return None;
        }
        let placement = serde_json::to_value(placement).ok()?;
        let run = report["runs"]
            .as_array()?
            .iter()
            .find(|r| r["system"] == system && r["placement"] == placement)?;
        Some(H200Run {
            source,
            walk_ms: run["walk_ms"].as_f64()?,
            htod_bytes: run["htod_bytes"].as_u64(),
            ratio_to_alignmalloc: run["ratio_to_alignmalloc"].as_f64(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(words: &[&str]) -> Args {
        let mut all = vec!["walk"];
        all.extend_from_slice(words);
        Cli::parse_from(all).args
    }

    #[test]
    fn the_committed_runs_are_found_for_their_workload_only() {
        let a = args(&["--rmat", "16"]);
        let run = h200_run("rmat-16-ef16", 65536, &a, "alignmalloc", Placement::Host).unwrap();
        assert_eq!(run.source, "2026-11-22-h200/walk-rmat16.json");
        assert!(run.walk_ms > 0.0 && run.htod_bytes.unwrap() > 0);
        assert!(h200_run("rmat-16-ef16", 65536, &a, "managed-csr", Placement::Host).is_some());
        // Another length, seed, order or graph: no check.
        for other in [
            args(&["--rmat", "16", "--length", "40"]),
            args(&["--rmat", "16", "--seed", "2"]),
            args(&["--rmat", "16", "--walks-per-vertex", "2"]),
        ] {
            assert!(
                h200_run(
                    "rmat-16-ef16",
                    65536,
                    &other,
                    "alignmalloc",
                    Placement::Host
                )
                .is_none()
            );
        }
        let vertex = args(&["--rmat", "16", "--order", "vertex"]);
        let run = h200_run(
            "rmat-16-ef16",
            65536,
            &vertex,
            "alignmalloc",
            Placement::Host,
        )
        .unwrap();
        assert_eq!(run.source, "2026-11-22-h200/walk-rmat16-vertex-order.json");
        assert!(h200_run("rmat-17-ef16", 131072, &a, "alignmalloc", Placement::Host).is_none());
        assert!(checked_workloads().contains("rmat-20-ef16"));
    }
}
