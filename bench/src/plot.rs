//! `alignmalloc plot`: figures (SVG and PNG) from the JSON reports of `walk`, `alloc` and
//! `access`, one line per system, in the style of the paper's figures: time (and migrated bytes)
//! against size, threads or graph scale, on log axes.
//!
//! The kind of each report is told from its fields. `walk` reports (one per graph) are drawn
//! together, one point per graph. The figures' text needs a TrueType font: `--font`, or DejaVu
//! Sans where Debian and others install it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cli;
use crate::progress::note;
use anyhow::{Context, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

/// Options of `plot`.
#[derive(clap::Args)]
pub struct Args {
    /// JSON reports written with --json by walk, alloc or access (any other file, one that
    /// cannot be read or is not JSON is skipped, and said so; it fails only when none is a
    /// report).
    #[arg(required = true, value_name = "REPORT")]
    reports: Vec<PathBuf>,
    /// Folder for the figures (created if missing).
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
    /// TrueType font for the figures' text (default: DejaVu Sans from the system).
    #[arg(long, value_name = "FILE")]
    font: Option<PathBuf>,
}

/// Where systems install DejaVu Sans.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// One figure: named lines of (x, y) points.
struct Figure {
    /// File name without extension.
    name: String,
    title: String,
    x_desc: &'static str,
    y_desc: String,
    x_log: bool,
    /// Whether a series' points are joined (a sweep of one parameter); unrelated points, such
    /// as different real graphs, stand alone.
    joined: bool,
    lines: BTreeMap<String, Vec<(f64, f64)>>,
    /// Text written next to a point (the name of a real graph).
    labels: Vec<(f64, f64, String)>,
}

/// What a report's figures must say about their times: nothing for a GPU's, else how they were
/// obtained (on the axis and in the file name, so modelled and measured never share a figure).
struct Source {
    suffix: &'static str,
    axis_note: &'static str,
}

impl Source {
    fn of(report: &Value, kind: &str) -> Self {
        match (report["backend"].as_str(), kind) {
            (Some("Cuda"), _) => Self {
                suffix: "",
                axis_note: "",
            },
            (_, "alloc") => Self {
                suffix: "-sim",
                axis_note: " (host time of CPU warps, not a GPU)",
            },
            _ => Self {
                suffix: "-sim",
                axis_note: " (modelled by uvmsim, not measured)",
            },
        }
    }
}

impl Figure {
    fn new(
        name: String,
        title: String,
        x_desc: &'static str,
        y_desc: &str,
        source: &Source,
    ) -> Self {
        Self {
            name: format!("{name}{}", source.suffix),
            title,
            x_desc,
            y_desc: format!("{y_desc}{}", source.axis_note),
            x_log: true,
            joined: true,
            lines: BTreeMap::new(),
            labels: Vec::new(),
        }
    }

    fn point(&mut self, line: &str, x: f64, y: f64) {
        // Log axes cannot show zero: such points (nothing migrated) are left out of the line.
        if x > 0.0 && y > 0.0 {
            self.lines.entry(line.to_string()).or_default().push((x, y));
        }
    }
}

fn register_font(asked: Option<&Path>) -> anyhow::Result<()> {
    let path = match asked {
        Some(p) => p.to_path_buf(),
        None => FONTS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .context(
                "no font for the figures' text: install DejaVu Sans (Debian: apt-get install fonts-dejavu-core) or pass --font FILE.ttf",
            )?,
    };
    let bytes =
        std::fs::read(&path).with_context(|| format!("reading the font {}", path.display()))?;
    // plotters keeps the font for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{} is not a TrueType font", path.display()))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, figure: &Figure) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let fail =
        |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing {}: {e:?}", figure.name);
    root.fill(&WHITE).map_err(fail)?;
    let points = figure.lines.values().flatten();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        bail!("{}: no points to draw", figure.name);
    }
    // Room around the points on log axes.
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let (x0, x1) = if figure.x_log {
        (x0 / 1.2, x1 * 1.2)
    } else {
        (x0 - 0.5, x1 + 0.5)
    };
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&figure.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(figure.x_desc)
                .y_desc(figure.y_desc.as_str())
                .x_labels(8)
                .x_label_formatter(&|x| short(*x))
                .y_label_formatter(&|y| short(*y))
                .draw()
                .map_err(fail)?;
            for (i, (name, points)) in figure.lines.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                let mut sorted = points.clone();
                sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
                let joined = if figure.joined {
                    sorted.clone()
                } else {
                    Vec::new()
                };
                chart
                    .draw_series(LineSeries::new(joined, color.stroke_width(2)))
                    .map_err(fail)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(sorted.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(fail)?;
            }
            for (x, y, text) in &figure.labels {
                chart
                    .draw_series(std::iter::once(Text::new(
                        text.clone(),
                        (*x, *y),
                        ("sans-serif", 13),
                    )))
                    .map_err(fail)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(fail)?;
        }};
    }
    if figure.x_log {
        body!(
            builder
                .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
                .map_err(fail)?
        );
    } else {
        body!(
            builder
                .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                .map_err(fail)?
        );
    }
    root.present().map_err(fail)?;
    Ok(())
}

/// An axis label: 1.5, 40, 8K, 262K, 1M.
fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 1e6 => format!("{}M", (v / 1e6 * 10.0).round() / 10.0),
        a if a >= 1e4 => format!("{}K", (v / 1e3).round()),
        a if a >= 10.0 => format!("{}", v.round()),
        _ => format!("{}", (v * 100.0).round() / 100.0),
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or("?").to_string()
}

/// Figures of one `alloc` report.
fn alloc_figures(report: &Value, out: &mut Vec<Figure>) {
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let source = Source::of(report, "alloc");
    let mut singular = Figure::new(
        "alloc-singular".into(),
        "singular allocation: one object of [2^n, 2^(n+1)) bytes per thread".into(),
        "n",
        "allocation kernel, ms",
        &source,
    );
    singular.x_log = false;
    let mut scaling: BTreeMap<String, Figure> = BTreeMap::new();
    for r in &rows {
        match r["test"].as_str() {
            Some("singular") => {
                let n: f64 = s(&r["parameter"]).parse().unwrap_or(0.0);
                singular.point(&s(&r["system"]), n, f(&r["alloc_ms"]));
            }
            Some("scaling") => {
                let size = s(&r["parameter"]);
                let figure = scaling.entry(size.clone()).or_insert_with(|| {
                    Figure::new(
                        format!("alloc-scaling-{}", size.replace(' ', "").to_lowercase()),
                        format!("allocation scaling, {size} per thread"),
                        "threads",
                        "allocation kernel, ms",
                        &source,
                    )
                });
                figure.point(&s(&r["system"]), f(&r["threads"]), f(&r["alloc_ms"]));
            }
            _ => {}
        }
    }
    out.push(singular);
    out.extend(scaling.into_values());
}

/// Figures of one `access` report: time and migrated bytes against the range, per test and
/// pattern.
fn access_figures(report: &Value, out: &mut Vec<Figure>) {
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let source = Source::of(report, "access");
    let mut figures: BTreeMap<String, Figure> = BTreeMap::new();
    for r in &rows {
        let (test, pattern) = (s(&r["test"]), s(&r["pattern"]).to_lowercase());
        let threads = f(&r["threads"]);
        let kib = f(&r["range_bytes"]) / 1024.0;
        let system = s(&r["system"]);
        // Migrations are null where the run had no counters (another tool held CUPTI).
        for (what, y, y_desc) in [
            ("time", r["ms"].as_f64(), "read kernel, ms"),
            (
                "htod",
                r["htod_bytes"].as_f64().map(|b| b / 1048576.0),
                "migrated to the GPU, MiB",
            ),
        ] {
            let Some(y) = y else { continue };
            let name = format!("access-{test}-{pattern}-{what}");
            figures
                .entry(name.clone())
                .or_insert_with(|| {
                    Figure::new(
                        name,
                        format!("{test} access, {pattern}, {threads} threads"),
                        "per-thread range, KiB",
                        y_desc,
                        &source,
                    )
                })
                .point(&system, kib, y);
        }
    }
    out.extend(figures.into_values());
}

/// Figures of the `walk` reports together: one point per graph. R-MAT graphs (one family,
/// growing with the scale) are joined by lines; real graphs are named points. GPU and simulator
/// reports never share a figure; on the simulator only walk times an H200 run checked are
/// drawn (the table shows no others), and no build time (CPU warps, not a GPU).
fn walk_figures(reports: &[Value], out: &mut Vec<Figure>) {
    let mut figures: BTreeMap<String, Figure> = BTreeMap::new();
    for report in reports {
        let source = Source::of(report, "walk");
        let sim = !source.suffix.is_empty();
        let graph = s(&report["graph"]);
        let real = !graph.starts_with("rmat-");
        let vertices = f(&report["vertices"]);
        let mut labelled = false;
        for r in report["runs"].as_array().into_iter().flatten() {
            if sim && r["h200"].is_null() {
                continue;
            }
            let walk_ms = f(&r["walk_ms"]);
            let walk = figure(
                &mut figures,
                (&source, real),
                "walk-time",
                "random walks, 80 steps from every vertex",
                "walk kernel, ms",
            );
            walk.point(
                &format!("{} ({})", s(&r["system"]), s(&r["placement"])),
                vertices,
                walk_ms,
            );
            if real && !labelled && walk_ms > 0.0 {
                let name = graph.rsplit('/').next().unwrap_or(&graph);
                walk.labels.push((vertices, walk_ms, format!("  {name}")));
                labelled = true;
            }
            if r["placement"] == "gpu" && !sim {
                figure(
                    &mut figures,
                    (&source, real),
                    "walk-build",
                    "building the adjacency lists in a kernel",
                    "allocation kernel, ms",
                )
                .point(&s(&r["system"]), vertices, f(&r["build_ms"]));
            }
        }
    }
    out.extend(figures.into_values().filter(|f| !f.lines.is_empty()));
}

/// The walk figure of `what` for a report of `source` (real graph or R-MAT): one per source
/// and family, joined only for R-MAT's.
fn figure<'a>(
    figures: &'a mut BTreeMap<String, Figure>,
    (source, real): (&Source, bool),
    what: &str,
    title: &str,
    y_desc: &str,
) -> &'a mut Figure {
    let name = format!("{what}{}", if real { "-graphs" } else { "" });
    let key = format!("{name}{}", source.suffix);
    figures.entry(key).or_insert_with(|| {
        let mut fig = Figure::new(name, title.into(), "vertices", y_desc, source);
        fig.joined = !real;
        fig
    })
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    // What would fail after the reading is checked before it.
    register_font(args.font.as_deref())?;
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("--out-dir {}: cannot create it", args.out_dir.display()))?;
    let mut walks = Vec::new();
    let mut figures = Vec::new();
    // Which report made each figure, so two reports of one kind cannot overwrite each other.
    let mut sources: Vec<(String, PathBuf)> = Vec::new();
    for path in &args.reports {
        let report = match cli::read_report(path) {
            Ok(report) => report,
            Err(why) => {
                note!("skipping {}: {why}", path.display());
                continue;
            }
        };
        let first_row = &report["rows"][0];
        if report["runs"][0]["placement"].is_string() {
            // One line per system across graphs: the lines compare the default (degree) order.
            if report["order"] == "vertex" {
                note!("skipping {}: lists in vertex order", path.display());
            } else {
                walks.push(report);
            }
        } else if first_row["pattern"].is_string() || first_row["alloc_ms"].is_number() {
            let mut made = Vec::new();
            if first_row["pattern"].is_string() {
                access_figures(&report, &mut made);
            } else {
                alloc_figures(&report, &mut made);
            }
            for figure in made {
                if let Some((_, other)) = sources.iter().find(|(name, _)| *name == figure.name) {
                    bail!(
                        "{} and {} both make the figure {}: plot them in separate runs",
                        other.display(),
                        path.display(),
                        figure.name
                    );
                }
                sources.push((figure.name.clone(), path.clone()));
                figures.push(figure);
            }
        } else {
            note!(
                "skipping {}: not a report of walk, alloc or access",
                path.display()
            );
        }
    }
    if figures.is_empty() && walks.is_empty() {
        bail!("none of the files is a report of walk, alloc or access (written with --json)");
    }
    if !walks.is_empty() {
        walk_figures(&walks, &mut figures);
    }
    for figure in figures.iter().filter(|f| !f.lines.is_empty()) {
        let svg = args.out_dir.join(format!("{}.svg", figure.name));
        let png = args.out_dir.join(format!("{}.png", figure.name));
        draw(
            SVGBackend::new(&svg, (800, 560)).into_drawing_area(),
            figure,
        )?;
        draw(
            BitMapBackend::new(&png, (800, 560)).into_drawing_area(),
            figure,
        )?;
        note!("{} and .png", svg.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{parse, temp};

    const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/results/2026-11-22-h200");
    /// An `alloc` report with the singular and scaling tests.
    const ALLOC: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/results/2026-11-24-h200-soak/alloc-caches.json"
    );

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(short(262_144.0), "262K");
        assert_eq!(short(1_048_576.0), "1M");
        assert_eq!(short(0.125), "0.13");
        assert_eq!(short(40.0), "40");
    }

    #[test]
    fn the_committed_reports_make_every_figure() {
        let out = temp("figures");
        let mut reports: Vec<String> = ["access.json", "walk-rmat16.json", "walk-rmat18.json"]
            .iter()
            .map(|f| format!("{RESULTS}/{f}"))
            .collect();
        reports.push(ALLOC.to_string());
        let mut words: Vec<&str> = reports.iter().map(String::as_str).collect();
        words.extend(["--out-dir", out.to_str().unwrap()]);
        run(&parse::<Args>(&words).unwrap()).unwrap();
        let svg = std::fs::read_to_string(out.join("alloc-scaling-1kib.svg")).unwrap();
        for system in ["alignmalloc", "alignmalloc-contiguous", "cuda-malloc"] {
            assert!(
                svg.contains(&format!(">\n{system}\n</text>")),
                "legend names {system}"
            );
        }
        let walk = std::fs::read_to_string(out.join("walk-time.svg")).unwrap();
        assert!(walk.contains("managed-csr-prefetch (host)"));
        // 3 alloc, 12 access (2 tests x 3 patterns x time and bytes), 2 walk figures.
        let pngs = std::fs::read_dir(&out)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("png".as_ref()))
            .count();
        assert_eq!(pngs, 3 + 12 + 2);
        let png = std::fs::read(out.join("access-large-lockstep-time.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn modelled_reports_say_so_and_real_graphs_are_named_points() {
        use serde_json::json;
        let out = temp("figures-modelled");
        let run = |system: &str, walk_ms: f64, checked: bool| {
            json!({"system": system, "placement": "host", "walk_ms": walk_ms, "build_ms": 9.0,
                   "h200": if checked { json!({"walk_ms": 2.5}) } else { Value::Null }})
        };
        let sim = json!({"backend": "Sim", "graph": "rmat-16-ef16", "vertices": 65536,
            "runs": [run("alignmalloc", 18.0, true), run("managed-csr", 30.0, false)]});
        let real = |graph: &str, vertices: u64| {
            json!({"backend": "Cuda", "graph": graph,
            "vertices": vertices, "runs": [run("alignmalloc", 3.0, false)]})
        };
        let files: Vec<PathBuf> = [
            ("sim.json", sim),
            ("a.json", real("data/cit-HepPh.txt", 34546)),
            ("b.json", real("data/web-Google.txt.gz", 875713)),
        ]
        .iter()
        .map(|(name, report)| {
            let path = out.join(name);
            std::fs::create_dir_all(&out).unwrap();
            std::fs::write(&path, report.to_string()).unwrap();
            path
        })
        .collect();
        let mut words: Vec<&str> = files.iter().map(|p| p.to_str().unwrap()).collect();
        let dir = out.join("figures");
        words.extend(["--out-dir", dir.to_str().unwrap()]);
        super::run(&parse::<Args>(&words).unwrap()).unwrap();
        let modelled = std::fs::read_to_string(dir.join("walk-time-sim.svg")).unwrap();
        assert!(
            modelled.contains("modelled by uvmsim"),
            "the axis says modelled"
        );
        assert!(modelled.contains("alignmalloc (host)"));
        assert!(
            !modelled.contains("managed-csr"),
            "an unchecked modelled time is not drawn"
        );
        let graphs = std::fs::read_to_string(dir.join("walk-time-graphs.svg")).unwrap();
        assert!(graphs.contains("cit-HepPh.txt") && graphs.contains("web-Google.txt.gz"));
        assert!(!graphs.contains("modelled"));
        assert!(
            !dir.join("walk-time.svg").exists(),
            "no R-MAT report, no joined figure"
        );
        // The only coloured lines are the legend's marks: the two graphs' points are not joined
        // (the axes are thin black lines).
        let polylines = graphs.matches("stroke-width=\"2\"").count();
        let legend_entries = graphs.matches("alignmalloc (host)").count();
        assert_eq!(polylines, legend_entries, "{graphs}");
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn wrong_inputs_say_what_to_fix() {
        let out = temp("figures-bad");
        let not_report = format!("{RESULTS}/uvm-oversub-sim.json");
        let err = run(&parse::<Args>(&[&not_report, "--out-dir", out.to_str().unwrap()]).unwrap())
            .unwrap_err();
        assert!(format!("{err:#}").contains("none of the files is a report"));
        let alloc = ALLOC.to_string();
        let err = run(&parse::<Args>(&[
            &alloc,
            "--out-dir",
            out.to_str().unwrap(),
            "--font",
            "/nonexistent.ttf",
        ])
        .unwrap())
        .unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent.ttf"));
        let err =
            run(&parse::<Args>(&[&alloc, &alloc, "--out-dir", out.to_str().unwrap()]).unwrap())
                .unwrap_err();
        assert!(format!("{err:#}").contains("both make the figure alloc-singular"));
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn files_that_are_not_reports_are_skipped_and_the_reports_drawn() {
        let out = temp("figures-skip");
        let not_json = temp("not.json");
        std::fs::write(&not_json, "{ half").unwrap();
        let alloc = ALLOC.to_string();
        let words = [
            not_json.to_str().unwrap(),
            "/nonexistent/r.json",
            &alloc,
            "--out-dir",
            out.to_str().unwrap(),
        ];
        run(&parse::<Args>(&words).unwrap()).unwrap();
        assert!(out.join("alloc-singular.svg").is_file());
        std::fs::remove_dir_all(&out).unwrap();
        let _ = std::fs::remove_file(&not_json);
    }
}
