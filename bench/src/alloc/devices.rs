//! `alloc --devices LIST`: allocation rate per device alone and of all devices at once.
//!
//! One runtime per listed device ([`alignmalloc::Devices`]). For two sizes, one per path (1 KiB: the
//! device caches; 64 KiB: the host service), each device runs its rounds alone, then all devices
//! run theirs together, started at one barrier. Alone, a device's rate is its threads over its
//! allocation kernel's median time; together, the aggregate rate is every device's threads over
//! the span from the first launch to the last kernel's end (median over rounds), compared with
//! the sum of the alone rates (1.0: the devices do not slow each other). An ordinal listed twice
//! runs two runtimes on one GPU: their own arenas, mailboxes and service threads, one GPU's SMs.

use alignmalloc::FaultCounts;
use alignmalloc::{BackendKind, DeviceFaults, DeviceList, Devices, Runtime};
use anyhow::{Context, bail};
use serde::Serialize;

use super::{Args, Round, Rounds, System, check_empty, gpu, sim, threads_within};
use crate::multi_device::{at_once, describe};
use crate::stats::{median, span_ms};

/// The object sizes measured: one served by the device caches, one by the host.
const SIZES: [u64; 2] = [1 << 10, 64 << 10];

/// One row: a device alone, or all together.
#[derive(Clone, Debug, Serialize)]
struct DeviceRow {
    bytes: u64,
    threads_per_device: u32,
    /// "device N" (index in the list) or "together".
    run: String,
    /// Alone: the allocation kernel's median; together: the median span.
    alloc_ms: f64,
    alloc_ms_rounds: Vec<f64>,
    objects_per_s: f64,
    /// Together only: the aggregate rate over the sum of the alone rates.
    ratio_to_sum_alone: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    backend: String,
    /// (ordinal, name) of each runtime, in list order.
    devices: Vec<(usize, String)>,
    /// Whether an ordinal is listed more than once (runtimes sharing a GPU).
    shared_gpu: bool,
    times: &'static str,
    repeats: u32,
    rows: Vec<DeviceRow>,
    /// Per size, the unified-memory traffic of each device's arena over all its rounds (empty
    /// where faults are not counted: the sim backend, or CUPTI held by another tool).
    faults: Vec<SizeFaults>,
}

/// The counters of one size's rows, by arena.
#[derive(Serialize)]
struct SizeFaults {
    bytes: u64,
    per_device: Vec<Option<FaultCounts>>,
    elsewhere: FaultCounts,
    dropped_records: u64,
}

/// The set's fault counters since the last call, or `None` where they are not counted.
fn counted_faults(devices: &Devices) -> anyhow::Result<Option<DeviceFaults>> {
    match devices.take_faults() {
        Ok(f) => Ok(Some(f)),
        Err(
            alignmalloc::Error::FaultCountersOff
            | alignmalloc::Error::FaultCountersTaken { .. }
            | alignmalloc::Error::WrongBackend { .. },
        ) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub fn run(args: &Args, list: &DeviceList) -> anyhow::Result<()> {
    let gpu = crate::cli::on_gpu(args.backend)?;
    // On the GPU every device's unified-memory traffic is counted, by arena.
    let mut builder = Runtime::builder().backend(args.backend).fault_counters(gpu);
    // The budget is shared by the devices' rounds; the sim backend holds it to 1 GiB.
    let shared_budget = if gpu { args.budget_gib << 30 } else { 1 << 30 };
    if !gpu {
        builder = builder.arena_bytes(shared_budget * 2);
    }
    let devices = Devices::open(builder, list).context("opening the devices")?;
    let n = devices.len();
    let budget = shared_budget / n as u64;
    let listed = describe(&devices)?;
    let shared_gpu = devices.shares_a_gpu();
    let backend = devices.get(0)?.backend();
    let mut rounds: Vec<Box<dyn Rounds + Send + '_>> = Vec::with_capacity(n);
    for (_, rt) in devices.iter() {
        rounds.push(match rt.backend() {
            BackendKind::Cuda => Box::new(gpu::GpuRounds::new(rt, budget, None, true, false)?),
            BackendKind::Sim => Box::new(sim::SimRounds::new(rt)),
        });
    }
    let mut rows = Vec::new();
    let mut faults = Vec::new();
    for bytes in SIZES {
        counted_faults(&devices)?;
        let threads = threads_within(args.scaling_max_threads, bytes, budget);
        let sizes = vec![bytes; threads as usize];
        let mut alone_rates = Vec::with_capacity(n);
        for (i, r) in rounds.iter_mut().enumerate() {
            let mut times = Vec::new();
            for round in 0..=args.repeats {
                let got = r.round(System::Alignmalloc, &sizes, false)?;
                checked(&got, &format!("device {i}, {bytes} B"))?;
                if round > 0 {
                    times.push(got.alloc_ms);
                }
            }
            check_empty(r.runtime(), System::Alignmalloc)?;
            let alloc_ms = median(&mut times.clone());
            let rate = f64::from(threads) / (alloc_ms / 1e3);
            alone_rates.push(rate);
            rows.push(DeviceRow {
                bytes,
                threads_per_device: threads,
                run: format!("device {i}"),
                alloc_ms,
                alloc_ms_rounds: times,
                objects_per_s: rate,
                ratio_to_sum_alone: None,
            });
        }
        let mut spans = Vec::new();
        for round in 0..=args.repeats {
            let got = together(&mut rounds, &sizes)?;
            let mut runs = Vec::with_capacity(got.len());
            for (i, g) in got.iter().enumerate() {
                checked(g, &format!("device {i} (together), {bytes} B"))?;
                runs.push((
                    g.alloc_started.context("a round without its start")?,
                    g.alloc_ms,
                ));
            }
            if let (true, Some(span)) = (round > 0, span_ms(runs)) {
                spans.push(span);
            }
        }
        for r in &rounds {
            check_empty(r.runtime(), System::Alignmalloc)?;
        }
        if let Some(f) = counted_faults(&devices)? {
            faults.push(SizeFaults {
                bytes,
                per_device: f
                    .per_device
                    .iter()
                    .map(|d| d.as_ref().map(|d| d.total))
                    .collect(),
                elsewhere: f.elsewhere,
                dropped_records: f.dropped_records,
            });
        }
        let span = median(&mut spans.clone());
        let rate = f64::from(threads) * n as f64 / (span / 1e3);
        let sum_alone: f64 = alone_rates.iter().sum();
        rows.push(DeviceRow {
            bytes,
            threads_per_device: threads,
            run: "together".into(),
            alloc_ms: span,
            alloc_ms_rounds: spans,
            objects_per_s: rate,
            ratio_to_sum_alone: Some(rate / sum_alone),
        });
    }
    let times = match backend {
        BackendKind::Cuda => "GPU kernel wall time (together: first launch to last kernel's end)",
        BackendKind::Sim => {
            "CPU warps on the sim backend: this host's time through the mailboxes, not a GPU's"
        }
    };
    print_table(&rows, times);
    for f in &faults {
        let each: Vec<String> = f
            .per_device
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Some(c) => format!(
                    "device {i}: {} GPU fault groups, {:.1} MiB HtoD",
                    c.gpu_page_faults,
                    c.htod_bytes as f64 / 1048576.0
                ),
                None => format!("device {i}: closed"),
            })
            .collect();
        println!(
            "unified-memory traffic of each arena during the {} KiB rows (CUPTI): {}; in no arena: {} GPU fault groups, {:.1} MiB HtoD",
            f.bytes >> 10,
            each.join("; "),
            f.elsewhere.gpu_page_faults,
            f.elsewhere.htod_bytes as f64 / 1048576.0
        );
    }
    if let Some(path) = &args.json {
        let report = Report {
            backend: format!("{backend:?}"),
            devices: listed,
            shared_gpu,
            times,
            repeats: args.repeats,
            rows,
            faults,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// One round on every device at once, started together.
fn together(
    rounds: &mut [Box<dyn Rounds + Send + '_>],
    sizes: &[u64],
) -> anyhow::Result<Vec<Round>> {
    at_once(rounds.iter_mut().collect(), |r| {
        r.round(System::Alignmalloc, sizes, false)
    })
}

/// alignmalloc must allocate every object, keep every tag and free every object.
fn checked(round: &Round, what: &str) -> anyhow::Result<()> {
    if round.failures + round.bad + round.bad_frees != 0 {
        bail!(
            "{what}: {} failed allocations, {} damaged objects, {} failed frees",
            round.failures,
            round.bad,
            round.bad_frees
        );
    }
    Ok(())
}

fn print_table(rows: &[DeviceRow], times: &str) {
    println!("times: {times}");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "size", "threads", "run", "alloc ms", "objects/s", "x sum alone"
    );
    for r in rows {
        println!(
            "{:>8} {:>10} {:>10} {:>10.3} {:>12.4e} {:>12}",
            format!("{} KiB", r.bytes >> 10),
            r.threads_per_device,
            r.run,
            r.alloc_ms,
            r.objects_per_s,
            r.ratio_to_sum_alone
                .map_or_else(|| "-".to_string(), |x| format!("{x:.2}"))
        );
    }
    println!(
        "threads: per device; x sum alone: the devices' rate together over the sum of their rates alone (1.00: no device slowed another)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{parse, take_json, temp};

    #[test]
    fn two_simulated_devices_run_alone_and_together_without_a_wrong_object() {
        let json = temp("alloc-devices.json");
        let args: Args = parse(&[
            "--backend",
            "sim",
            "--devices",
            "0,1",
            "--repeats",
            "1",
            "--scaling-max-threads",
            "512",
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        let list = args.devices.clone().unwrap();
        // Fails on any failed allocation, damaged object, failed free or unclean allocator.
        run(&args, &list).unwrap();
        let report = take_json(&json);
        let rows = report["rows"].as_array().unwrap();
        // Per size: device 0, device 1, together.
        assert_eq!(rows.len(), 2 * 3);
        assert_eq!(report["devices"].as_array().unwrap().len(), 2);
        // No fault counters on the sim backend: none reported, rather than zeros.
        assert_eq!(report["faults"].as_array().unwrap().len(), 0);
        for r in rows {
            assert_eq!(r["threads_per_device"], 512);
            assert!(r["objects_per_s"].as_f64().unwrap() > 0.0);
            assert_eq!(r["run"] == "together", r["ratio_to_sum_alone"].is_number());
        }
    }
}
