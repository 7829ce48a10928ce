//! Every tunable of a runtime in one place: [`Settings`] holds them, [`RuntimeBuilder`] sets
//! them, and each has an `ALIGNMALLOC_*` environment variable that overrides it ([`TABLE`], which
//! is the table of docs/settings.md; a test holds the two equal).
//!
//! The device side's tunables ([`DeviceSettings`]: how waiting warps back off) are compiled into
//! the kernels: `detail/settings.h` defines each as a macro named like its variable, with the
//! defaults of [`DeviceSettings::default`] (`device/hostcheck` holds the two equal). The runtime
//! passes its values to NVRTC as `-D` options when it compiles ([`DeviceSettings::defines`]);
//! programs built with nvcc pass the same `-D` options themselves.
//!
//! Precedence: the environment, then the builder, then the default. The environment is read once,
//! when a runtime is built; a value that does not parse, or is out of range, is an error that
//! names the variable, and no runtime is built.
//!
//! [`RuntimeBuilder`]: crate::RuntimeBuilder

use std::time::Duration;

use orchestrator::ServiceConfig;

use crate::error::{Error, Result};

/// Default share of free device memory the arena takes.
pub const DEFAULT_ARENA_FRACTION: f64 = 0.25;
/// Default arena of the sim backend (host memory, committed only where touched).
pub const DEFAULT_SIM_ARENA_BYTES: u64 = 4 << 30;
/// Default mailbox ports.
pub const DEFAULT_PORTS: usize = 8192;
/// The share of the arena the device caches hold at most, unless told otherwise. They serve
/// every contiguous object up to 4 MiB, so a workload that outgrows a smaller share sends its
/// lanes through the host, one round trip each; a larger one leaves the host less room when
/// slabs are held by a few scattered live objects each (docs/caches.md).
pub const DEFAULT_DEVICE_CACHE_FRACTION: f64 = 0.5;
/// The most of the arena the device caches may hold: the rest stays the host's, so objects the
/// caches do not serve (over 4 MiB, arranged warps whose lanes ask alike, or lanes of a class
/// that was denied a slab) find room however many slabs the caches keep for scattered live
/// objects.
pub const MAX_DEVICE_CACHE_FRACTION: f64 = 0.75;
/// How long [`crate::Runtime::settle`] waits for the service thread by default.
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The tunables of one runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The arena's first reservation in bytes (`None`: [`Settings::arena_fraction`] of free
    /// device memory, or [`DEFAULT_SIM_ARENA_BYTES`] on the sim backend).
    pub arena_bytes: Option<u64>,
    /// The share of free device memory the default arena takes, in (0, 1].
    pub arena_fraction: f64,
    /// The arena grows by further reservations up to this many bytes in all (`None`: no growth).
    pub max_arena_bytes: Option<u64>,
    /// Whether an arena larger than free device memory is allowed.
    pub allow_oversubscription: bool,
    /// Where the arena's pages live when the data may not fit the GPU (docs/placement.md).
    pub placement: Placement,
    /// [`Placement::Tiered`]: bytes of the device tier, the arena's first reservation (`None`:
    /// half the arena); the rest of the arena is the host tier.
    pub device_tier_bytes: Option<u64>,
    /// [`Placement::Tiered`]: allocations whose largest object has at least this many bytes ask
    /// the device tier first, smaller ones the host tier (0: every allocation asks the device
    /// tier first, which then fills in allocation order).
    pub hot_object_bytes: u64,
    /// Mailbox ports.
    pub ports: usize,
    /// Most bytes the device caches hold (`None`: [`Settings::device_cache_fraction`] of the
    /// arena; 0 turns them off); at most [`MAX_DEVICE_CACHE_FRACTION`] of the arena.
    pub device_cache_bytes: Option<u64>,
    /// The share of the arena the device caches hold at most when `device_cache_bytes` is not
    /// set, in (0, [`MAX_DEVICE_CACHE_FRACTION`]].
    pub device_cache_fraction: f64,
    /// Most freed chunks held back from reuse (`None`: the resolver's default, 1 024).
    pub quarantine_chunks: Option<usize>,
    /// The share of the arena's blocks past which it grows ahead of need, in (0, 1].
    pub growth_mark: f64,
    /// How the service thread polls and batches.
    pub service: ServiceConfig,
    /// How long [`crate::Runtime::settle`] waits before it answers `Unanswered`.
    pub settle_timeout: Duration,
    /// How the kernels this runtime compiles back off while they wait.
    pub device: DeviceSettings,
}

/// Where the arena's pages live (docs/placement.md): the advice the runtime gives the driver for
/// each reservation, and so which allocations land where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// No advice: pages migrate to whichever processor touches them (the driver's default; the
    /// fastest while the data fits the GPU).
    #[default]
    Migrate,
    /// Every reservation preferred in host memory and mapped for the GPU, which reads and writes
    /// it over the link instead of migrating it: nothing is evicted, every access pays the link.
    HostMapped,
    /// A device tier (preferred on the GPU) and a host tier (host memory mapped for the GPU):
    /// each allocation asks one first by its largest object, and growth adds to the host tier.
    Tiered,
}

impl Placement {
    /// Every placement with its name in `ALIGNMALLOC_PLACEMENT`.
    pub const NAMED: [(&'static str, Placement); 3] = [
        ("migrate", Placement::Migrate),
        ("host-mapped", Placement::HostMapped),
        ("tiered", Placement::Tiered),
    ];

    /// Its name in `ALIGNMALLOC_PLACEMENT`.
    pub fn name(self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("migrate", |(name, _)| name)
    }

    /// The placement named `name`, or an error listing the names.
    pub fn parse(name: &str) -> Result<Self> {
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
            .ok_or_else(|| {
                let names: Vec<_> = Self::NAMED.iter().map(|(n, _)| *n).collect();
                Error::Config(format!(
                    "placement {name:?} is not one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// How waiting warps back off: compiled into kernels (`detail/settings.h`). Pauses are in
/// nanoseconds; each wait starts at its minimum pause and doubles it up to its maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSettings {
    /// A warp waiting for the host's answer in the mailbox: first pause.
    pub poll_pause_min_ns: u32,
    /// ... and longest pause.
    pub poll_pause_max_ns: u32,
    /// Polls between two reads of the mailbox's closed flag.
    pub polls_per_closed_check: u32,
    /// A leader that found every port held, before it probes them again.
    pub port_sweep_pause_ns: u32,
    /// A lane waiting for a device-cache class's lock: first pause.
    pub cache_lock_pause_min_ns: u32,
    /// ... and longest pause.
    pub cache_lock_pause_max_ns: u32,
    /// The class lock's holder waiting for the host's next slab: first pause.
    pub refill_pause_min_ns: u32,
    /// ... and longest pause.
    pub refill_pause_max_ns: u32,
}

/// The longest pause a device setting may ask for (about `__nanosleep`'s longest).
pub const LONGEST_PAUSE_NS: u32 = 1_000_000;

impl Default for DeviceSettings {
    fn default() -> Self {
        Self {
            poll_pause_min_ns: 32,
            poll_pause_max_ns: 4096,
            polls_per_closed_check: 1024,
            port_sweep_pause_ns: 256,
            cache_lock_pause_min_ns: 32,
            cache_lock_pause_max_ns: 1024,
            refill_pause_min_ns: 64,
            refill_pause_max_ns: 4096,
        }
    }
}

impl DeviceSettings {
    /// Each setting with its variable's name (which is also its macro in `detail/settings.h`).
    pub fn named(&self) -> [(&'static str, u32); 8] {
        let mut copy = *self;
        copy.named_mut().map(|(name, value)| (name, *value))
    }

    /// The one list of the settings and their names.
    fn named_mut(&mut self) -> [(&'static str, &mut u32); 8] {
        [
            ("ALIGNMALLOC_POLL_PAUSE_MIN_NS", &mut self.poll_pause_min_ns),
            ("ALIGNMALLOC_POLL_PAUSE_MAX_NS", &mut self.poll_pause_max_ns),
            (
                "ALIGNMALLOC_POLLS_PER_CLOSED_CHECK",
                &mut self.polls_per_closed_check,
            ),
            (
                "ALIGNMALLOC_PORT_SWEEP_PAUSE_NS",
                &mut self.port_sweep_pause_ns,
            ),
            (
                "ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS",
                &mut self.cache_lock_pause_min_ns,
            ),
            (
                "ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS",
                &mut self.cache_lock_pause_max_ns,
            ),
            (
                "ALIGNMALLOC_REFILL_PAUSE_MIN_NS",
                &mut self.refill_pause_min_ns,
            ),
            (
                "ALIGNMALLOC_REFILL_PAUSE_MAX_NS",
                &mut self.refill_pause_max_ns,
            ),
        ]
    }

    /// The NVRTC (or nvcc) options that compile these settings into a kernel.
    pub fn defines(&self) -> Vec<String> {
        self.named()
            .iter()
            .map(|(name, value)| format!("-D{name}={value}"))
            .collect()
    }

    /// The ranges `detail/settings.h` asserts: pauses in 1..=[`LONGEST_PAUSE_NS`], each minimum
    /// no greater than its maximum, at least one poll between flag reads.
    pub fn check(&self) -> Result<()> {
        let pairs = [
            (
                "ALIGNMALLOC_POLL_PAUSE_MIN_NS and ALIGNMALLOC_POLL_PAUSE_MAX_NS",
                self.poll_pause_min_ns,
                self.poll_pause_max_ns,
            ),
            (
                "ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS and ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS",
                self.cache_lock_pause_min_ns,
                self.cache_lock_pause_max_ns,
            ),
            (
                "ALIGNMALLOC_REFILL_PAUSE_MIN_NS and ALIGNMALLOC_REFILL_PAUSE_MAX_NS",
                self.refill_pause_min_ns,
                self.refill_pause_max_ns,
            ),
            (
                "ALIGNMALLOC_PORT_SWEEP_PAUSE_NS",
                self.port_sweep_pause_ns,
                self.port_sweep_pause_ns,
            ),
        ];
        for (what, min, max) in pairs {
            if min == 0 || min > max || max > LONGEST_PAUSE_NS {
                return Err(Error::Config(format!(
                    "{what}: {min}..{max} ns is not a range with 1 <= min <= max <= \
                     {LONGEST_PAUSE_NS}"
                )));
            }
        }
        if self.polls_per_closed_check == 0 {
            return Err(Error::Config(
                "ALIGNMALLOC_POLLS_PER_CLOSED_CHECK: 0 would never read the closed flag".into(),
            ));
        }
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            arena_bytes: None,
            arena_fraction: DEFAULT_ARENA_FRACTION,
            max_arena_bytes: None,
            allow_oversubscription: false,
            placement: Placement::Migrate,
            device_tier_bytes: None,
            hot_object_bytes: 0,
            ports: DEFAULT_PORTS,
            device_cache_bytes: None,
            device_cache_fraction: DEFAULT_DEVICE_CACHE_FRACTION,
            quarantine_chunks: None,
            growth_mark: orchestrator::GROWTH_MARK,
            service: ServiceConfig::default(),
            settle_timeout: DEFAULT_SETTLE_TIMEOUT,
            device: DeviceSettings::default(),
        }
    }
}

/// One line of the settings table.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// The environment variable.
    pub var: &'static str,
    /// The builder call that sets it.
    pub builder: &'static str,
    /// The default, as the docs say it.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Every setting, in the order of docs/settings.md.
pub const TABLE: [Setting; 23] = [
    Setting {
        var: "ALIGNMALLOC_ARENA_BYTES",
        builder: "arena_bytes",
        default: "a quarter of free device memory; 4 GiB on the sim backend",
        meaning: "the arena's first reservation, rounded down to 2 MiB blocks",
    },
    Setting {
        var: "ALIGNMALLOC_ARENA_FRACTION",
        builder: "arena_fraction",
        default: "0.25",
        meaning: "the share of free device memory the default arena takes, in (0, 1]",
    },
    Setting {
        var: "ALIGNMALLOC_MAX_ARENA_BYTES",
        builder: "max_arena_bytes",
        default: "no growth",
        meaning: "the arena grows by reservations of its first size up to this many bytes in all",
    },
    Setting {
        var: "ALIGNMALLOC_OVERSUBSCRIBE",
        builder: "allow_oversubscription",
        default: "0",
        meaning: "1 allows an arena larger than free device memory (a warning is logged)",
    },
    Setting {
        var: "ALIGNMALLOC_PLACEMENT",
        builder: "placement",
        default: "migrate",
        meaning: "where the arena's pages live: `migrate` (no advice), `host-mapped` (host memory read over the link), `tiered` (a device tier and a host tier; docs/placement.md)",
    },
    Setting {
        var: "ALIGNMALLOC_DEVICE_TIER_BYTES",
        builder: "device_tier_bytes",
        default: "half the arena",
        meaning: "`tiered`: bytes of the device tier, rounded down to 2 MiB blocks; the rest of the arena is the host tier",
    },
    Setting {
        var: "ALIGNMALLOC_HOT_OBJECT_BYTES",
        builder: "hot_object_bytes",
        default: "0",
        meaning: "`tiered`: allocations whose largest object has at least this many bytes ask the device tier first, smaller ones the host tier",
    },
    Setting {
        var: "ALIGNMALLOC_PORTS",
        builder: "ports",
        default: "8192",
        meaning: "mailbox ports (1 to 65 536); more ports, fewer warps probing for one",
    },
    Setting {
        var: "ALIGNMALLOC_DEVICE_CACHE_BYTES",
        builder: "device_cache_bytes",
        default: "ALIGNMALLOC_DEVICE_CACHE_FRACTION of the arena",
        meaning: "most bytes the device caches (sizes up to 4 MiB) hold, at most three quarters of the arena; 0 turns them off",
    },
    Setting {
        var: "ALIGNMALLOC_DEVICE_CACHE_FRACTION",
        builder: "device_cache_fraction",
        default: "0.5",
        meaning: "the share of the arena the device caches hold at most when ALIGNMALLOC_DEVICE_CACHE_BYTES is not set, in (0, 0.75]",
    },
    Setting {
        var: "ALIGNMALLOC_QUARANTINE_CHUNKS",
        builder: "quarantine_chunks",
        default: "1024",
        meaning: "most freed chunks held back from reuse, so a late second free is told apart; 0 reuses at once",
    },
    Setting {
        var: "ALIGNMALLOC_GROWTH_MARK",
        builder: "growth_mark",
        default: "0.75",
        meaning: "the share of the arena's blocks past which a growable arena grows ahead of need, in (0, 1]",
    },
    Setting {
        var: "ALIGNMALLOC_SERVICE_MAX_BATCH",
        builder: "service",
        default: "1024",
        meaning: "most requests the service thread serves in one batch",
    },
    Setting {
        var: "ALIGNMALLOC_SERVICE_MAX_SLEEP_US",
        builder: "service",
        default: "50",
        meaning: "longest sleep of the service thread between empty sweeps, in microseconds (after 64 sweeps spinning)",
    },
    Setting {
        var: "ALIGNMALLOC_SETTLE_TIMEOUT_MS",
        builder: "settle_timeout",
        default: "10000",
        meaning: "how long `settle` (and `drain_caches`) waits for the service thread before it answers `Unanswered`",
    },
    Setting {
        var: "ALIGNMALLOC_POLL_PAUSE_MIN_NS",
        builder: "device_settings",
        default: "32",
        meaning: "device: a warp waiting for the host's answer first pauses this many ns, doubling",
    },
    Setting {
        var: "ALIGNMALLOC_POLL_PAUSE_MAX_NS",
        builder: "device_settings",
        default: "4096",
        meaning: "device: the longest of those pauses, in ns",
    },
    Setting {
        var: "ALIGNMALLOC_POLLS_PER_CLOSED_CHECK",
        builder: "device_settings",
        default: "1024",
        meaning: "device: polls between two reads of the mailbox's closed flag (one word every waiting warp reads)",
    },
    Setting {
        var: "ALIGNMALLOC_PORT_SWEEP_PAUSE_NS",
        builder: "device_settings",
        default: "256",
        meaning: "device: a warp that found every port held pauses this many ns before it probes them again",
    },
    Setting {
        var: "ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS",
        builder: "device_settings",
        default: "32",
        meaning: "device: a lane waiting for a cache class's lock first pauses this many ns, doubling",
    },
    Setting {
        var: "ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS",
        builder: "device_settings",
        default: "1024",
        meaning: "device: the longest of those pauses, in ns",
    },
    Setting {
        var: "ALIGNMALLOC_REFILL_PAUSE_MIN_NS",
        builder: "device_settings",
        default: "64",
        meaning: "device: the class lock's holder waiting for the host's next slab first pauses this many ns, doubling",
    },
    Setting {
        var: "ALIGNMALLOC_REFILL_PAUSE_MAX_NS",
        builder: "device_settings",
        default: "4096",
        meaning: "device: the longest of those pauses, in ns",
    },
];

/// The settings table as Markdown (docs/settings.md shows it).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| variable | builder | default | what it does |\n| --- | --- | --- | --- |\n",
    );
    for s in TABLE {
        out.push_str(&format!(
            "| `{}` | `.{}(...)` | {} | {} |\n",
            s.var, s.builder, s.default, s.meaning
        ));
    }
    out
}

impl Settings {
    /// These settings with the process's `ALIGNMALLOC_*` variables applied.
    pub fn with_environment(self) -> Result<Self> {
        self.overridden_by(|var| std::env::var(var).ok())
    }

    /// These settings with the values `lookup` gives for the variables of [`TABLE`] applied.
    pub fn overridden_by(mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let get = |var: &str| lookup(var).map(|v| (var.to_string(), v.trim().to_string()));
        if let Some((var, v)) = get("ALIGNMALLOC_ARENA_BYTES") {
            self.arena_bytes = Some(number(&var, &v)?);
        }
        if let Some((var, v)) = get("ALIGNMALLOC_ARENA_FRACTION") {
            self.arena_fraction = share(&var, &v)?;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_MAX_ARENA_BYTES") {
            self.max_arena_bytes = Some(number(&var, &v)?);
        }
        if let Some((var, v)) = get("ALIGNMALLOC_OVERSUBSCRIBE") {
            self.allow_oversubscription = switch(&var, &v)?;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_PLACEMENT") {
            self.placement =
                Placement::parse(&v).map_err(|e| Error::Config(format!("{var}: {e}")))?;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_DEVICE_TIER_BYTES") {
            self.device_tier_bytes = Some(number(&var, &v)?);
        }
        if let Some((var, v)) = get("ALIGNMALLOC_HOT_OBJECT_BYTES") {
            self.hot_object_bytes = number(&var, &v)?;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_PORTS") {
            self.ports = number(&var, &v)? as usize;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_DEVICE_CACHE_BYTES") {
            self.device_cache_bytes = Some(number(&var, &v)?);
        }
        if let Some((var, v)) = get("ALIGNMALLOC_DEVICE_CACHE_FRACTION") {
            self.device_cache_fraction = share(&var, &v)?;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_QUARANTINE_CHUNKS") {
            self.quarantine_chunks = Some(number(&var, &v)? as usize);
        }
        if let Some((var, v)) = get("ALIGNMALLOC_GROWTH_MARK") {
            self.growth_mark = share(&var, &v)?;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_SERVICE_MAX_BATCH") {
            self.service.max_batch = number(&var, &v)? as usize;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_SERVICE_MAX_SLEEP_US") {
            self.service.max_sleep = Duration::from_micros(number(&var, &v)?);
        }
        if let Some((var, v)) = get("ALIGNMALLOC_SETTLE_TIMEOUT_MS") {
            self.settle_timeout = Duration::from_millis(number(&var, &v)?);
        }
        for (name, field) in self.device.named_mut() {
            if let Some((var, v)) = get(name) {
                *field = u32::try_from(number(&var, &v)?)
                    .map_err(|_| Error::Config(format!("{var}={v:?} is past {}", u32::MAX)))?;
            }
        }
        self.check()?;
        Ok(self)
    }

    /// The ranges every setting must be in, wherever it came from.
    pub fn check(&self) -> Result<()> {
        // Named as the environment variable and the builder call: a value may come from either.
        let bad = |var: &str, why: String| {
            let builder = TABLE
                .iter()
                .find(|s| s.var == var)
                .map_or("", |s| s.builder);
            Err(Error::Config(format!(
                "{var} (or the builder's `{builder}`): {why}"
            )))
        };
        if !(self.arena_fraction > 0.0 && self.arena_fraction <= 1.0) {
            return bad(
                "ALIGNMALLOC_ARENA_FRACTION",
                format!("{} is not in (0, 1]", self.arena_fraction),
            );
        }
        if !(self.device_cache_fraction > 0.0
            && self.device_cache_fraction <= MAX_DEVICE_CACHE_FRACTION)
        {
            return bad(
                "ALIGNMALLOC_DEVICE_CACHE_FRACTION",
                format!(
                    "{} is not in (0, {MAX_DEVICE_CACHE_FRACTION}]",
                    self.device_cache_fraction
                ),
            );
        }
        if !(self.growth_mark > 0.0 && self.growth_mark <= 1.0) {
            return bad(
                "ALIGNMALLOC_GROWTH_MARK",
                format!("{} is not in (0, 1]", self.growth_mark),
            );
        }
        if self.ports == 0 || self.ports > orchestrator::mailbox::MAX_PORTS {
            return bad(
                "ALIGNMALLOC_PORTS",
                format!(
                    "{} is not in 1..={}",
                    self.ports,
                    orchestrator::mailbox::MAX_PORTS
                ),
            );
        }
        if self.placement != Placement::Tiered
            && (self.device_tier_bytes.is_some() || self.hot_object_bytes != 0)
        {
            let var = if self.device_tier_bytes.is_some() {
                "ALIGNMALLOC_DEVICE_TIER_BYTES"
            } else {
                "ALIGNMALLOC_HOT_OBJECT_BYTES"
            };
            return bad(
                var,
                format!(
                    "applies only to the tiered placement (ALIGNMALLOC_PLACEMENT=tiered); the \
                     placement is {}",
                    self.placement.name()
                ),
            );
        }
        if self.service.max_batch == 0 {
            return bad(
                "ALIGNMALLOC_SERVICE_MAX_BATCH",
                "0 would serve nothing".into(),
            );
        }
        self.device.check()
    }
}

fn number(var: &str, value: &str) -> Result<u64> {
    value.parse::<u64>().map_err(|_| {
        Error::Config(format!(
            "{var}={value:?} is not a whole number (no units or separators)"
        ))
    })
}

fn share(var: &str, value: &str) -> Result<f64> {
    match value.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(Error::Config(format!(
            "{var}={value:?} is not a number in (0, 1]"
        ))),
    }
}

fn switch(var: &str, value: &str) -> Result<bool> {
    match value {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::Config(format!("{var}={value:?} is not 1 or 0"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Settings> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::default()
            .overridden_by(|var| pairs.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone()))
    }

    #[test]
    fn every_variable_of_the_table_overrides_its_setting() {
        let s = with(&[
            ("ALIGNMALLOC_ARENA_BYTES", "1073741824"),
            ("ALIGNMALLOC_ARENA_FRACTION", "0.5"),
            ("ALIGNMALLOC_MAX_ARENA_BYTES", " 4294967296 "),
            ("ALIGNMALLOC_OVERSUBSCRIBE", "1"),
            ("ALIGNMALLOC_PLACEMENT", "tiered"),
            ("ALIGNMALLOC_DEVICE_TIER_BYTES", "33554432"),
            ("ALIGNMALLOC_HOT_OBJECT_BYTES", "4096"),
            ("ALIGNMALLOC_PORTS", "64"),
            ("ALIGNMALLOC_DEVICE_CACHE_BYTES", "0"),
            ("ALIGNMALLOC_DEVICE_CACHE_FRACTION", "0.25"),
            ("ALIGNMALLOC_QUARANTINE_CHUNKS", "16"),
            ("ALIGNMALLOC_GROWTH_MARK", "0.9"),
            ("ALIGNMALLOC_SERVICE_MAX_BATCH", "256"),
            ("ALIGNMALLOC_SERVICE_MAX_SLEEP_US", "5"),
            ("ALIGNMALLOC_SETTLE_TIMEOUT_MS", "250"),
            ("ALIGNMALLOC_POLL_PAUSE_MIN_NS", "8"),
            ("ALIGNMALLOC_POLL_PAUSE_MAX_NS", "512"),
            ("ALIGNMALLOC_POLLS_PER_CLOSED_CHECK", "64"),
            ("ALIGNMALLOC_PORT_SWEEP_PAUSE_NS", "100"),
            ("ALIGNMALLOC_CACHE_LOCK_PAUSE_MIN_NS", "16"),
            ("ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS", "16"),
            ("ALIGNMALLOC_REFILL_PAUSE_MIN_NS", "1"),
            ("ALIGNMALLOC_REFILL_PAUSE_MAX_NS", "1000000"),
        ])
        .unwrap();
        let default = Settings::default();
        assert_eq!(s.arena_bytes, Some(1 << 30));
        assert_eq!(s.arena_fraction, 0.5);
        assert_eq!(s.max_arena_bytes, Some(4 << 30));
        assert!(s.allow_oversubscription);
        assert_eq!(s.placement, Placement::Tiered);
        assert_eq!(s.device_tier_bytes, Some(32 << 20));
        assert_eq!(s.hot_object_bytes, 4096);
        assert_eq!(s.ports, 64);
        assert_eq!(s.device_cache_bytes, Some(0));
        assert_eq!(s.device_cache_fraction, 0.25);
        assert_eq!(s.quarantine_chunks, Some(16));
        assert_eq!(s.growth_mark, 0.9);
        assert_eq!(s.service.max_batch, 256);
        assert_eq!(s.service.max_sleep, Duration::from_micros(5));
        assert_eq!(s.service.spin_sweeps, default.service.spin_sweeps);
        assert_eq!(s.settle_timeout, Duration::from_millis(250));
        assert_eq!(
            s.device,
            DeviceSettings {
                poll_pause_min_ns: 8,
                poll_pause_max_ns: 512,
                polls_per_closed_check: 64,
                port_sweep_pause_ns: 100,
                cache_lock_pause_min_ns: 16,
                cache_lock_pause_max_ns: 16,
                refill_pause_min_ns: 1,
                refill_pause_max_ns: 1_000_000,
            }
        );
        // Every variable of the table was exercised above.
        assert_eq!(TABLE.len(), 23);
        assert_eq!(with(&[]).unwrap(), default);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("ALIGNMALLOC_ARENA_BYTES", "1G"),
            ("ALIGNMALLOC_ARENA_FRACTION", "0"),
            ("ALIGNMALLOC_ARENA_FRACTION", "1.5"),
            ("ALIGNMALLOC_OVERSUBSCRIBE", "maybe"),
            ("ALIGNMALLOC_PLACEMENT", "device"),
            ("ALIGNMALLOC_DEVICE_TIER_BYTES", "2GiB"),
            ("ALIGNMALLOC_HOT_OBJECT_BYTES", "-1"),
            ("ALIGNMALLOC_PORTS", "-1"),
            ("ALIGNMALLOC_GROWTH_MARK", "NaN"),
            ("ALIGNMALLOC_SETTLE_TIMEOUT_MS", "1e3"),
            ("ALIGNMALLOC_POLL_PAUSE_MIN_NS", "0"),
            ("ALIGNMALLOC_POLL_PAUSE_MIN_NS", "8192"),
            ("ALIGNMALLOC_POLL_PAUSE_MAX_NS", "2000000"),
            ("ALIGNMALLOC_POLLS_PER_CLOSED_CHECK", "0"),
            ("ALIGNMALLOC_PORT_SWEEP_PAUSE_NS", "4294967296"),
            ("ALIGNMALLOC_CACHE_LOCK_PAUSE_MAX_NS", "16"),
            ("ALIGNMALLOC_REFILL_PAUSE_MIN_NS", "-4"),
        ] {
            let err = with(&[(var, value)]).unwrap_err().to_string();
            assert!(err.contains(var), "{var}={value}: {err}");
        }
        // Range checks past parsing name the variable (and the builder call) too.
        for (var, value) in [
            ("ALIGNMALLOC_PORTS", "0"),
            ("ALIGNMALLOC_PORTS", "65537"),
            ("ALIGNMALLOC_SERVICE_MAX_BATCH", "0"),
            ("ALIGNMALLOC_DEVICE_CACHE_FRACTION", "0.8"),
            // A tiered setting without the tiered placement would be ignored: refused instead.
            ("ALIGNMALLOC_DEVICE_TIER_BYTES", "33554432"),
            ("ALIGNMALLOC_HOT_OBJECT_BYTES", "4096"),
        ] {
            let err = with(&[(var, value)]).unwrap_err().to_string();
            assert!(err.contains(var), "{var}={value}: {err}");
        }
        let err = with(&[("ALIGNMALLOC_PORTS", "0")]).unwrap_err().to_string();
        assert!(err.contains("`ports`"), "{err}");
    }

    #[test]
    fn every_device_setting_is_in_the_table_and_becomes_a_define() {
        let defaults = DeviceSettings::default();
        let defines = defaults.defines();
        for (name, value) in defaults.named() {
            let row = TABLE.iter().find(|s| s.var == name).unwrap();
            assert_eq!(row.default, value.to_string(), "{name}");
            assert!(defines.contains(&format!("-D{name}={value}")), "{name}");
        }
        assert_eq!(defines.len(), 8);
    }

    #[test]
    fn the_settings_page_shows_the_table() {
        let page = include_str!("../../docs/settings.md");
        assert!(
            page.contains(&markdown_table()),
            "docs/settings.md does not show settings::markdown_table() as it is:\n{}",
            markdown_table()
        );
    }
}
