//! `alignmalloc compare`: two builds' `alloc` reports, row by row. A decision between two
//! builds rests on runs that alternate in one call on one card (a card's speed moves between
//! calls by more than most changes move a row), several runs of each: this reads them, takes
//! each row's median over a build's runs, and gives the baseline's time over the variant's per
//! row and the median of those ratios over the rows (above 1: the variant is faster).
//!
//! Refused with an error naming what to fix: a file that is not an `alloc` report, reports of
//! different cards or backends, a row that one build has and the other has not, and kernel
//! times asked for where a report has none (`alloc --kernel-times`; `--wall` compares the host's
//! wall times instead). Host times of the sim backend are compared as such and said to be.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use serde_json::Value;

use crate::{cli, stats};

#[derive(clap::Args)]
pub struct Args {
    /// `alloc` reports (written with --json) of the baseline build, one per run.
    #[arg(long, num_args = 1.., required = true)]
    baseline: Vec<PathBuf>,
    /// `alloc` reports of the variant build, one per run, from the same call as the baseline's.
    #[arg(long, num_args = 1.., required = true)]
    variant: Vec<PathBuf>,
    /// Compare the host's wall time around each kernel instead of the kernels' own times.
    #[arg(long)]
    wall: bool,
    /// Also write the comparison as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Which time of a row a comparison reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Times {
    Kernel,
    Wall,
}

impl Times {
    fn field(self, op: &str) -> String {
        match self {
            Times::Kernel => format!("{op}_kernel_ms"),
            Times::Wall => format!("{op}_ms"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Times::Kernel => "the kernels' own times on the GPU's clock",
            Times::Wall => "the host's wall time around each kernel",
        }
    }
}

/// A row's identity across reports: test, parameter, threads, system.
type RowKey = (String, String, u64, String);

/// One build's runs: per row, the (alloc, free) times of each run; `order` the rows as its
/// first report lists them.
struct Build {
    rows: BTreeMap<RowKey, Vec<(f64, f64)>>,
    order: Vec<RowKey>,
}

impl Build {
    fn new() -> Self {
        Build {
            rows: BTreeMap::new(),
            order: Vec::new(),
        }
    }

    fn add(&mut self, key: RowKey, runs: impl IntoIterator<Item = (f64, f64)>) {
        if !self.rows.contains_key(&key) {
            self.order.push(key.clone());
        }
        self.rows.entry(key).or_default().extend(runs);
    }
}

/// What every report of a comparison must share.
#[derive(PartialEq, Eq, Debug)]
struct Setting {
    backend: String,
    device: String,
}

#[derive(Serialize, Debug)]
struct RowRatio {
    test: String,
    parameter: String,
    threads: u64,
    system: String,
    baseline_alloc_ms: f64,
    variant_alloc_ms: f64,
    baseline_free_ms: f64,
    variant_free_ms: f64,
    /// Baseline time over the variant's (above 1: the variant is faster).
    alloc_ratio: f64,
    free_ratio: f64,
}

#[derive(Serialize, Debug)]
struct Comparison {
    backend: String,
    device: String,
    times: &'static str,
    baseline_runs: Vec<String>,
    variant_runs: Vec<String>,
    /// Medians over the rows of the rows' ratios.
    median_alloc_ratio: f64,
    median_free_ratio: f64,
    rows: Vec<RowRatio>,
}

fn read(path: &Path, times: Times) -> anyhow::Result<(Setting, Build)> {
    let report = cli::read_report(path).map_err(|why| anyhow!("{}: {why}", path.display()))?;
    let rows = match report["rows"].as_array() {
        Some(rows) if rows.first().is_some_and(|r| r.get("alloc_ms").is_some()) => rows,
        _ => bail!(
            "{}: not a report of `alignmalloc alloc` (written with --json)",
            path.display()
        ),
    };
    let text_of = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let setting = Setting {
        backend: text_of(&report["backend"]),
        device: text_of(&report["device"]),
    };
    let mut build = Build::new();
    for row in rows {
        let key = (
            text_of(&row["test"]),
            text_of(&row["parameter"]),
            row["threads"].as_u64().unwrap_or_default(),
            text_of(&row["system"]),
        );
        let time = |op: &str| {
            row[times.field(op)].as_f64().with_context(|| match times {
                Times::Kernel => format!(
                    "{}: row {} {} x {} ({}) has no kernel times: run `alignmalloc alloc` with \
                     --kernel-times, or compare wall times with --wall",
                    path.display(),
                    key.0,
                    key.1,
                    key.2,
                    key.3
                ),
                Times::Wall => format!(
                    "{}: row {} {} x {} ({}) has no {}",
                    path.display(),
                    key.0,
                    key.1,
                    key.2,
                    key.3,
                    times.field(op)
                ),
            })
        };
        let (alloc, free) = (time("alloc")?, time("free")?);
        build.add(key, [(alloc, free)]);
    }
    Ok((setting, build))
}

/// The runs of one build, each a report, joined; every report's setting must be `setting`'s.
fn read_build(
    paths: &[PathBuf],
    times: Times,
    setting: &mut Option<(Setting, PathBuf)>,
) -> anyhow::Result<Build> {
    let mut joined = Build::new();
    for path in paths {
        let (this, mut build) = read(path, times)?;
        match setting {
            Some((first, first_path)) if *first != this => bail!(
                "{} ran on {} ({}) and {} on {} ({}): compare runs of one card and backend, \
                 alternated in one call",
                first_path.display(),
                first.device,
                first.backend,
                path.display(),
                this.device,
                this.backend
            ),
            Some(_) => {}
            None => *setting = Some((this, path.clone())),
        }
        for key in build.order {
            let runs = build.rows.remove(&key).unwrap_or_default();
            joined.add(key, runs);
        }
    }
    Ok(joined)
}

fn compare(args: &Args) -> anyhow::Result<Comparison> {
    let times = if args.wall {
        Times::Wall
    } else {
        Times::Kernel
    };
    let mut setting = None;
    let baseline = read_build(&args.baseline, times, &mut setting)?;
    let variant = read_build(&args.variant, times, &mut setting)?;
    let (setting, _) = setting.expect("clap requires a file on each side");
    let name = |k: &RowKey| format!("{} {} x {} ({})", k.0, k.1, k.2, k.3);
    let only = |a: &Build, b: &Build| -> Vec<String> {
        a.rows
            .keys()
            .filter(|k| !b.rows.contains_key(*k))
            .map(name)
            .collect()
    };
    for (side, missing) in [
        ("baseline", only(&variant, &baseline)),
        ("variant", only(&baseline, &variant)),
    ] {
        if !missing.is_empty() {
            bail!(
                "the {side} runs lack {} row(s) the other build has ({}): run both builds with \
                 the same `alignmalloc alloc` options",
                missing.len(),
                missing.join(", ")
            );
        }
    }
    let median_of = |runs: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
        stats::median_of_middles(&mut runs.iter().map(pick).collect::<Vec<_>>())
    };
    let rows: Vec<RowRatio> = baseline
        .order
        .iter()
        .map(|key| {
            let (base, var) = (&baseline.rows[key], &variant.rows[key]);
            let (ba, va) = (median_of(base, |r| r.0), median_of(var, |r| r.0));
            let (bf, vf) = (median_of(base, |r| r.1), median_of(var, |r| r.1));
            RowRatio {
                test: key.0.clone(),
                parameter: key.1.clone(),
                threads: key.2,
                system: key.3.clone(),
                baseline_alloc_ms: ba,
                variant_alloc_ms: va,
                baseline_free_ms: bf,
                variant_free_ms: vf,
                alloc_ratio: ba / va,
                free_ratio: bf / vf,
            }
        })
        .collect();
    let median_ratio = |pick: fn(&RowRatio) -> f64| {
        stats::median_of_middles(&mut rows.iter().map(pick).collect::<Vec<_>>())
    };
    let files = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect();
    Ok(Comparison {
        median_alloc_ratio: median_ratio(|r| r.alloc_ratio),
        median_free_ratio: median_ratio(|r| r.free_ratio),
        backend: setting.backend,
        device: setting.device,
        times: times.name(),
        baseline_runs: files(&args.baseline),
        variant_runs: files(&args.variant),
        rows,
    })
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    cli::output_file(args.json.as_deref(), "--json")?;
    let c = compare(args)?;
    println!(
        "{} runs of the baseline, {} of the variant, on {} ({} backend); times: {}{}",
        args.baseline.len(),
        args.variant.len(),
        c.device,
        c.backend,
        c.times,
        if c.backend == "Sim" {
            " (CPU warps on the host: host times, not the GPU's)"
        } else {
            ""
        }
    );
    println!(
        "ratio: the baseline's median time over the variant's (above 1: the variant is faster)"
    );
    println!(
        "{:<10} {:>10} {:>8} {:<24} {:>11} {:>11} {:>7} {:>11} {:>11} {:>7}",
        "test",
        "parameter",
        "threads",
        "system",
        "alloc base",
        "variant",
        "ratio",
        "free base",
        "variant",
        "ratio"
    );
    for r in &c.rows {
        println!(
            "{:<10} {:>10} {:>8} {:<24} {:>11.4} {:>11.4} {:>7.2} {:>11.4} {:>11.4} {:>7.2}",
            r.test,
            r.parameter,
            r.threads,
            r.system,
            r.baseline_alloc_ms,
            r.variant_alloc_ms,
            r.alloc_ratio,
            r.baseline_free_ms,
            r.variant_free_ms,
            r.free_ratio
        );
    }
    println!(
        "median over {} rows: alloc {:.3}x, free {:.3}x",
        c.rows.len(),
        c.median_alloc_ratio,
        c.median_free_ratio
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&c)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Args, compare, run};
    use crate::testing::{parse, take_json, temp};

    /// An `alloc` report of `device` whose rows are (parameter, alloc kernel ms, free kernel
    /// ms); wall times are ten times the kernel times.
    fn report(device: &str, rows: &[(&str, f64, f64)]) -> serde_json::Value {
        let rows: Vec<_> = rows
            .iter()
            .map(|&(p, a, f)| {
                json!({"test": "singular", "parameter": p, "threads": 16384,
                       "system": "alignmalloc", "alloc_ms": a * 10.0, "free_ms": f * 10.0,
                       "alloc_kernel_ms": a, "free_kernel_ms": f})
            })
            .collect();
        json!({"backend": "Cuda", "device": device, "times": "GPU kernel wall time",
               "rows": rows})
    }

    fn write(name: &str, value: &serde_json::Value) -> String {
        let path = temp(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.display().to_string()
    }

    fn args(words: &[&str]) -> Args {
        parse::<Args>(words).unwrap()
    }

    #[test]
    fn each_row_is_the_ratio_of_the_builds_medians_and_the_summary_their_median() {
        let h200 = "NVIDIA H200";
        let base = [
            write("cmp-b1", &report(h200, &[("4", 2.0, 4.0), ("5", 1.0, 1.0)])),
            write("cmp-b2", &report(h200, &[("4", 3.0, 4.0), ("5", 1.0, 1.0)])),
            write("cmp-b3", &report(h200, &[("4", 9.0, 4.0), ("5", 1.0, 1.0)])),
        ];
        let var = [
            write("cmp-v1", &report(h200, &[("4", 1.5, 2.0), ("5", 2.0, 1.0)])),
            write("cmp-v2", &report(h200, &[("4", 1.5, 2.0), ("5", 2.0, 1.0)])),
        ];
        let out = temp("cmp-out.json");
        let words = [
            "--baseline",
            &base[0],
            &base[1],
            &base[2],
            "--variant",
            &var[0],
            &var[1],
            "--json",
            out.to_str().unwrap(),
        ];
        run(&args(&words)).unwrap();
        let c = take_json(&out);
        // Row 4: the baseline's median of 2, 3, 9 is 3 against 1.5; frees 4 against 2.
        assert_eq!(c["rows"][0]["parameter"], "4");
        assert_eq!(c["rows"][0]["alloc_ratio"], 2.0);
        assert_eq!(c["rows"][0]["free_ratio"], 2.0);
        assert_eq!(c["rows"][1]["alloc_ratio"], 0.5);
        // Two rows (0.5 and 2.0): their mean.
        assert_eq!(c["median_alloc_ratio"], 1.25);
        assert_eq!(c["times"], "the kernels' own times on the GPU's clock");
        // Wall times when asked: ten times each, the same ratios.
        let mut wall = words[..7].to_vec();
        wall.push("--wall");
        let c = compare(&args(&wall)).unwrap();
        assert_eq!(c.rows[0].baseline_alloc_ms, 30.0);
        assert_eq!(c.rows[0].alloc_ratio, 2.0);
        for f in base.iter().chain(&var) {
            let _ = std::fs::remove_file(f);
        }
    }

    #[test]
    fn runs_of_different_cards_missing_rows_and_other_reports_are_refused_with_what_to_fix() {
        let a = write("cmp-r-a", &report("NVIDIA H200", &[("4", 1.0, 1.0)]));
        let other_card = write(
            "cmp-r-c",
            &report("NVIDIA H100 80GB HBM3", &[("4", 1.0, 1.0)]),
        );
        let fewer = write("cmp-r-f", &report("NVIDIA H200", &[("5", 1.0, 1.0)]));
        let walk = write("cmp-r-w", &json!({"runs": [], "graph": "rmat"}));
        let mut no_kernel = report("NVIDIA H200", &[("4", 1.0, 1.0)]);
        no_kernel["rows"][0]
            .as_object_mut()
            .unwrap()
            .remove("alloc_kernel_ms");
        let no_kernel = write("cmp-r-k", &no_kernel);
        let error = |words: &[&str]| format!("{:#}", compare(&args(words)).unwrap_err());
        let e = error(&["--baseline", &a, "--variant", &other_card]);
        assert!(e.contains("NVIDIA H100") && e.contains("one card"), "{e}");
        let e = error(&["--baseline", &a, "--variant", &fewer]);
        assert!(
            e.contains("singular 5 x 16384") && e.contains("same"),
            "{e}"
        );
        let e = error(&["--baseline", &walk, "--variant", &a]);
        assert!(e.contains("not a report of `alignmalloc alloc`"), "{e}");
        let e = error(&["--baseline", &a, "--variant", &no_kernel]);
        assert!(e.contains("--kernel-times") && e.contains("--wall"), "{e}");
        // The same report with --wall compares.
        compare(&args(&[
            "--baseline",
            &a,
            "--variant",
            &no_kernel,
            "--wall",
        ]))
        .unwrap();
        for f in [a, other_card, fewer, walk, no_kernel] {
            let _ = std::fs::remove_file(f);
        }
    }
}
