//! The report of a wrapped run: per allocation, its size, origin, lifetime, where it was made
//! (when asked) and the unified-memory traffic attributed to it; totals; and how the run was
//! intercepted. Written as JSON by the preload library at exit, printed as a table by
//! `alignmalloc wrap`.

use crate::options::WrapOptions;
use crate::pool::{Origin, PoolCounters};
use crate::tiers::{Split, TierSummary};

/// Rows the JSON keeps (most traffic first); the rest are summed into one.
pub const MAX_ROWS: usize = 10_000;

/// Kinds of traffic the counters give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficKind {
    /// Bytes migrated host to device.
    HtoD,
    /// Bytes migrated device to host.
    DtoH,
    /// GPU page fault groups.
    GpuFaultGroups,
    /// One CPU page fault.
    CpuFault,
}

/// One counter record: what, how much, where and when (the counters' clock, which the pool's
/// allocation times use too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traffic {
    /// What it counts.
    pub kind: TrafficKind,
    /// Bytes or fault groups (ignored for a CPU fault, which counts one).
    pub value: u64,
    /// The address it concerns (a migration's first byte, a fault's address).
    pub address: u64,
    /// When it started.
    pub start_ns: u64,
}

/// Traffic added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// Bytes migrated host to device.
    pub htod_bytes: u64,
    /// Bytes migrated device to host.
    pub dtoh_bytes: u64,
    /// GPU page fault groups.
    pub gpu_fault_groups: u64,
    /// CPU page faults.
    pub cpu_faults: u64,
}

impl Counts {
    /// Add one record.
    pub fn add(&mut self, kind: TrafficKind, value: u64) {
        match kind {
            TrafficKind::HtoD => self.htod_bytes += value,
            TrafficKind::DtoH => self.dtoh_bytes += value,
            TrafficKind::GpuFaultGroups => self.gpu_fault_groups += value,
            TrafficKind::CpuFault => self.cpu_faults += 1,
        }
    }

    /// Add another sum.
    pub fn merge(&mut self, other: &Counts) {
        self.htod_bytes += other.htod_bytes;
        self.dtoh_bytes += other.dtoh_bytes;
        self.gpu_fault_groups += other.gpu_fault_groups;
        self.cpu_faults += other.cpu_faults;
    }

    /// Bytes migrated either way.
    pub fn bytes_moved(&self) -> u64 {
        self.htod_bytes + self.dtoh_bytes
    }

    /// Faults of both kinds.
    pub fn faults(&self) -> u64 {
        self.gpu_fault_groups + self.cpu_faults
    }
}

/// One allocation of the program.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocationRow {
    /// Its number, in the order the program made them (1 = the first).
    pub id: u64,
    /// Bytes asked for.
    pub bytes: u64,
    /// Where its memory came from.
    pub origin: Origin,
    /// Where it was made (with `--callers`).
    pub caller: Option<String>,
    /// Nanoseconds from allocation to free (`None`: still live at exit).
    pub lifetime_ns: Option<u64>,
    /// With tiered placement, its bytes on the GPU and in host memory (`None`: it migrated).
    #[serde(default)]
    pub split: Option<Split>,
    /// Traffic attributed to it.
    pub counts: Counts,
}

/// The allocations past [`MAX_ROWS`], summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestRow {
    /// How many.
    pub allocations: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their traffic.
    pub counts: Counts,
}

/// The pool's part of the report.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolSummary {
    /// Whether the pool served allocations (off with `--no-pool`).
    pub enabled: bool,
    /// Its cap (`None`: unlimited).
    pub cap_bytes: Option<u64>,
    /// Its counters.
    pub counters: PoolCounters,
    /// Allocations not freed at exit.
    pub live_allocations: u64,
    /// Their bytes.
    pub live_bytes: u64,
    /// With tiered placement, what the tiers did.
    #[serde(default)]
    pub tiers: Option<TierSummary>,
}

/// How the program reached the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interception {
    /// Lookups of driver entry points (names starting with `cu`) through `dlsym` or
    /// `cuGetProcAddress`, and calls of the exported entry points the library wraps.
    pub cuda_lookups: u64,
    /// Lookups answered with a wrapper.
    pub wrapped_lookups: u64,
    /// Lookups of a wrapped name whose answer matched no known version of it: left unwrapped.
    pub unidentified_lookups: u64,
    /// Managed allocations the wrapper saw (all origins).
    pub managed_allocations: u64,
    /// Nanoseconds spent inside the wrapped `cuMemAllocManaged`, over all of them (what the
    /// pool costs, or the driver's time for those it sent there), less the start.
    pub alloc_ns: u64,
    /// Nanoseconds the first managed allocation spent starting the wrapper: CUPTI's start when
    /// counting (most of it), the driver's free memory for the cap.
    #[serde(default)]
    pub start_ns: u64,
}

/// A wrapped run's report.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The program's command line as the process saw it.
    pub program: Vec<String>,
    /// The settings.
    pub options: WrapOptions,
    /// Whether the counts were taken (`"counted by CUPTI"`), else why not.
    pub counters: String,
    /// Whether the traffic figures exist (`false`: every count below is 0 because nothing was
    /// counted, not because nothing moved).
    pub counted: bool,
    /// Counter records CUPTI dropped.
    pub dropped_records: u64,
    /// How the program was intercepted.
    pub interception: Interception,
    /// The pool.
    pub pool: PoolSummary,
    /// All traffic.
    pub total: Counts,
    /// Traffic at addresses in no allocation of the program's (other memory, or times when
    /// none was live there).
    pub unattributed: Counts,
    /// Allocations, most traffic first (at most [`MAX_ROWS`]).
    pub allocations: Vec<AllocationRow>,
    /// The allocations past [`MAX_ROWS`].
    pub rest: RestRow,
}

impl Report {
    /// Cut `rows` to [`MAX_ROWS`], summing the rest.
    pub fn keep_rows(rows: &mut Vec<AllocationRow>) -> RestRow {
        let mut rest = RestRow::default();
        for row in rows.drain(MAX_ROWS.min(rows.len())..) {
            rest.allocations += 1;
            rest.bytes += row.bytes;
            rest.counts.merge(&row.counts);
        }
        rest
    }

    /// The report as a table of the `shown` allocations with most traffic, totals and notes.
    pub fn table(&self, shown: usize) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let p = &self.pool.counters;
        let _ = writeln!(
            out,
            "alignmalloc wrap: {} managed allocations ({} from the arena, {} from the driver, {} \
             past the cap; {:.2} us each in the allocator, {:.1} ms to start{}), {} frees refused",
            self.interception.managed_allocations,
            p.arena_allocations,
            p.driver_allocations,
            p.past_cap_allocations,
            self.interception.alloc_ns as f64
                / 1e3
                / self.interception.managed_allocations.max(1) as f64,
            self.interception.start_ns as f64 / 1e6,
            if self.counted { " with CUPTI" } else { "" },
            p.double_frees + p.bad_frees,
        );
        let _ = writeln!(
            out,
            "arena: {} reserved in {} segments{}; peak live {}",
            bytes(p.reserved_bytes),
            p.reservations,
            match self.pool.cap_bytes {
                Some(c) => format!(" (cap {})", bytes(c)),
                None => String::new(),
            },
            bytes(p.peak_live_bytes),
        );
        if let Some(t) = &self.pool.tiers {
            let _ = writeln!(
                out,
                "tiers: {} split ({} on the GPU, {} in host memory; device tier {}, peak {}), {} \
                 placing",
                t.tiered_allocations,
                bytes(t.device_bytes_placed),
                bytes(t.host_bytes_placed),
                bytes(t.budget_bytes),
                bytes(t.peak_device_bytes),
                duration(t.placing_ns),
            );
        }
        if !self.counted {
            let _ = writeln!(out, "traffic: {}", self.counters);
        }
        let _ = writeln!(
            out,
            "{:>7} {:>11} {:>10} {:>12} {:>19} {:>11} {:>11} {:>9} {:>9}  caller",
            "alloc",
            "bytes",
            "origin",
            "lifetime",
            "GPU + host",
            "HtoD",
            "DtoH",
            "GPU flt",
            "CPU flt"
        );
        let row = |out: &mut String,
                   id: String,
                   b: u64,
                   (origin, life, split): (&str, String, String),
                   c: &Counts,
                   caller: &str| {
            let (h, d, g, f) = if self.counted {
                (
                    bytes(c.htod_bytes),
                    bytes(c.dtoh_bytes),
                    c.gpu_fault_groups.to_string(),
                    c.cpu_faults.to_string(),
                )
            } else {
                ("-".into(), "-".into(), "-".into(), "-".into())
            };
            let _ = writeln!(
                out,
                "{id:>7} {:>11} {origin:>10} {life:>12} {split:>19} {h:>11} {d:>11} {g:>9} {f:>9}  \
                 {caller}",
                bytes(b)
            );
        };
        for a in self.allocations.iter().take(shown) {
            let origin = match a.origin {
                Origin::Arena => "arena",
                Origin::Driver => "driver",
                Origin::DriverPastCap => "past cap",
            };
            let life = a.lifetime_ns.map_or("live".to_string(), duration);
            let split = a.split.map_or("-".to_string(), |s| {
                format!("{} + {}", bytes(s.device_bytes), bytes(s.host_bytes))
            });
            row(
                &mut out,
                a.id.to_string(),
                a.bytes,
                (origin, life, split),
                &a.counts,
                a.caller.as_deref().unwrap_or("-"),
            );
        }
        let hidden = self.allocations.len().saturating_sub(shown) as u64 + self.rest.allocations;
        if hidden > 0 {
            let mut c = self.rest.counts;
            let mut b = self.rest.bytes;
            for a in self.allocations.iter().skip(shown) {
                c.merge(&a.counts);
                b += a.bytes;
            }
            row(
                &mut out,
                format!("+{hidden}"),
                b,
                ("", String::new(), String::new()),
                &c,
                "(the rest)",
            );
        }
        if self.counted {
            row(
                &mut out,
                "other".into(),
                0,
                ("", String::new(), String::new()),
                &self.unattributed,
                "(no allocation of the program)",
            );
            row(
                &mut out,
                "total".into(),
                0,
                ("", String::new(), String::new()),
                &self.total,
                "",
            );
            let _ = writeln!(out, "{COUNTING_NOTE}");
        }
        out
    }
}

/// Printed under a counted report: what counting does to the program's timing.
pub const COUNTING_NOTE: &str = "note: counting slows kernels that fault; if the program's \
    output differs from a run with --no-counters, it reads managed memory that its kernels are \
    still writing (a missing cudaDeviceSynchronize or stream synchronize)";

/// Bytes with a binary unit.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn duration(ns: u64) -> String {
    match ns {
        0..1_000_000 => format!("{:.1} us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(counted: bool) -> Report {
        Report {
            program: vec!["prog".into()],
            options: WrapOptions::default(),
            counters: if counted {
                "counted by CUPTI"
            } else {
                "off (--no-counters)"
            }
            .into(),
            counted,
            dropped_records: 0,
            interception: Interception {
                managed_allocations: 4,
                alloc_ns: 2_000,
                start_ns: 33_000_000,
                ..Interception::default()
            },
            pool: PoolSummary {
                enabled: true,
                cap_bytes: None,
                counters: PoolCounters::default(),
                live_allocations: 0,
                live_bytes: 0,
                tiers: None,
            },
            total: Counts::default(),
            unattributed: Counts::default(),
            allocations: Vec::new(),
            rest: RestRow::default(),
        }
    }

    /// The allocator's time leaves the start out and says it apart; a counted report says what
    /// counting does to the program's timing, an uncounted one does not.
    #[test]
    fn the_table_gives_the_start_apart_and_the_counting_note_when_counted() {
        let counted = report(true).table(20);
        assert!(
            counted.contains("0.50 us each in the allocator, 33.0 ms to start with CUPTI"),
            "{counted}"
        );
        assert!(counted.contains(COUNTING_NOTE));
        let plain = report(false).table(20);
        assert!(
            plain.contains("0.50 us each in the allocator, 33.0 ms to start)"),
            "{plain}"
        );
        assert!(!plain.contains(COUNTING_NOTE));
    }
}
