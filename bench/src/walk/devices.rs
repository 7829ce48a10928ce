//! `walk --devices LIST`: the walks split between several devices, each over its own copy of the
//! graph's lists, allocated by its own kernels from its own arena.
//!
//! Why walkers per device on a graph each device holds whole, not the graph partitioned by vertex
//! ranges: a random walk goes anywhere, so with partitioned lists most steps of an R-MAT walk
//! would cross to another device's range and hand the walker over (a transfer and a launch per
//! crossing, where a local step is one memory read). A copy per device costs each device the
//! lists' memory and its build, and then every step stays on the device.
//!
//! Per device: the lists are built (one thread per vertex, `am::malloc`, filled there) and
//! timed. Then device 0 walks every walker alone; then each device walks its share of the
//! walkers (contiguous ranges) at once, started at one barrier, timed from the first launch to
//! the last kernel's end. Every walker of every walk is checked against the CPU reference; the
//! lists are freed by kernels and every arena must be whole and empty.

use alignmalloc::{BackendChoice, DeviceList, Devices, Runtime};
use anyhow::{Context, bail};
use serde::Serialize;

use super::gpu::{Lists, Walker};
use super::{Args, Reference};
use crate::graph::Graph;
use crate::multi_device::{at_once, describe};
use crate::progress::note;
use crate::stats::{median, span_ms};

/// What `walk --devices` measured.
#[derive(Serialize)]
pub struct DevicesReport {
    /// (ordinal, name) of each runtime, in list order.
    pub devices: Vec<(usize, String)>,
    /// Whether an ordinal is listed more than once (runtimes sharing a GPU).
    pub shared_gpu: bool,
    /// Each device's build of the whole graph's lists, ms.
    pub build_ms: Vec<f64>,
    /// Device 0 walking every walker: median ms and the rounds.
    pub alone_ms: f64,
    pub alone_ms_rounds: Vec<f64>,
    /// Every device walking its share at once: median span ms and the rounds.
    pub together_ms: f64,
    pub together_ms_rounds: Vec<f64>,
    /// Walkers per device.
    pub walkers_per_device: Vec<u64>,
    /// alone over together (above 1: the devices together are faster).
    pub speedup: f64,
    /// Walkers whose digest differed from the reference, over every walk.
    pub walkers_differing: u64,
}

pub fn run(
    graph: &Graph,
    args: &Args,
    reference: &Reference,
    list: &DeviceList,
) -> anyhow::Result<DevicesReport> {
    let builder = Runtime::builder().backend(BackendChoice::Cuda);
    let devices = Devices::open(builder, list).context("opening the devices")?;
    let n = devices.len();
    let listed = describe(&devices)?;
    let shared_gpu = devices.shares_a_gpu();

    // Each device: its walker (the graph and kernels on it) and its lists, built there.
    let mut walkers = Vec::with_capacity(n);
    let mut build_ms = Vec::with_capacity(n);
    for (i, rt) in devices.iter() {
        let w = Walker::new(rt, graph, args, reference, false)?;
        let (warm, _) = w.build_lists("warm-up", false, true)?;
        w.free_lists("warm-up", &warm)?;
        let (lists, ms) = w.build_lists(&format!("alignmalloc on device {i}"), false, true)?;
        note!("device {i}: lists built in {ms:.2} ms");
        build_ms.push(ms);
        walkers.push((w, lists));
    }

    let total = reference.walkers;
    let shares: Vec<(u64, u64)> = (0..n as u64)
        .map(|i| (total * i / n as u64, total * (i + 1) / n as u64))
        .collect();
    let mut differing = 0;

    let mut alone = Vec::new();
    for round in 0..=args.repeats {
        let (w, lists) = &mut walkers[0];
        let lists = Lists::PerVertex {
            lists: &*lists,
            raw: false,
        };
        let (_, ms) = w.walk_range(&lists, 0, total)?;
        differing += w.digests_differing(0, total)?;
        if round > 0 {
            alone.push(ms);
        }
    }

    let mut together = Vec::new();
    for round in 0..=args.repeats {
        let spans = at_once(
            walkers.iter_mut().zip(&shares).collect(),
            |((w, lists), &(first, end))| {
                let lists = Lists::PerVertex {
                    lists: &*lists,
                    raw: false,
                };
                let (start, ms) = w.walk_range(&lists, first, end)?;
                Ok((start, ms, w.digests_differing(first, end)?))
            },
        )?;
        let mut runs = Vec::with_capacity(n);
        for (start, ms, bad) in spans {
            differing += bad;
            runs.push((start, ms));
        }
        if let (true, Some(span)) = (round > 0, span_ms(runs)) {
            together.push(span);
        }
    }

    for (i, (w, lists)) in walkers.iter().enumerate() {
        w.free_lists(&format!("alignmalloc on device {i}"), lists)?;
    }
    let alone_ms = median(&mut alone.clone());
    let together_ms = median(&mut together.clone());
    let report = DevicesReport {
        devices: listed,
        shared_gpu,
        build_ms,
        alone_ms,
        alone_ms_rounds: alone,
        together_ms,
        together_ms_rounds: together,
        walkers_per_device: shares.iter().map(|(f, e)| e - f).collect(),
        speedup: alone_ms / together_ms,
        walkers_differing: differing,
    };
    print_report(&report);
    if differing > 0 {
        bail!("{differing} walks differ from the CPU reference (see the log)");
    }
    Ok(report)
}

fn print_report(r: &DevicesReport) {
    println!("walk time: GPU kernel wall time (together: first launch to last kernel's end)");
    for (i, ((ordinal, name), ms)) in r.devices.iter().zip(&r.build_ms).enumerate() {
        println!(
            "device {i} (ordinal {ordinal}, {name}): lists built in {ms:.2} ms, {} walkers together",
            r.walkers_per_device[i]
        );
    }
    println!(
        "device 0 alone, every walker: {:.3} ms; all devices together: {:.3} ms; speed-up {:.2}x; walks differing from the CPU reference: {}",
        r.alone_ms, r.together_ms, r.speedup, r.walkers_differing
    );
}
