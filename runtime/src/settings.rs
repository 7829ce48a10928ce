//! Every tunable of a runtime in one place: [`Settings`] holds them, [`RuntimeBuilder`] sets
//! them, and each has an `ALIGNMALLOC_*` environment variable that overrides it ([`TABLE`], which
//! is the table of docs/settings.md; a test holds the two equal).
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
/// The device caches hold at most this share (1/n) of the arena unless told otherwise.
pub const DEFAULT_CACHE_SHARE: u64 = 8;
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
    /// Mailbox ports.
    pub ports: usize,
    /// Most bytes the device caches hold (`None`: an eighth of the arena; 0 turns them off).
    pub device_cache_bytes: Option<u64>,
    /// Most freed chunks held back from reuse (`None`: the resolver's default, 1 024).
    pub quarantine_chunks: Option<usize>,
    /// The share of the arena's blocks past which it grows ahead of need, in (0, 1].
    pub growth_mark: f64,
    /// How the service thread polls and batches.
    pub service: ServiceConfig,
    /// How long [`crate::Runtime::settle`] waits before it answers `Unanswered`.
    pub settle_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            arena_bytes: None,
            arena_fraction: DEFAULT_ARENA_FRACTION,
            max_arena_bytes: None,
            allow_oversubscription: false,
            ports: DEFAULT_PORTS,
            device_cache_bytes: None,
            quarantine_chunks: None,
            growth_mark: orchestrator::GROWTH_MARK,
            service: ServiceConfig::default(),
            settle_timeout: DEFAULT_SETTLE_TIMEOUT,
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
pub const TABLE: [Setting; 11] = [
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
        var: "ALIGNMALLOC_PORTS",
        builder: "ports",
        default: "8192",
        meaning: "mailbox ports (1 to 65 536); more ports, fewer warps probing for one",
    },
    Setting {
        var: "ALIGNMALLOC_DEVICE_CACHE_BYTES",
        builder: "device_cache_bytes",
        default: "an eighth of the arena",
        meaning: "most bytes the device caches (sizes up to 32 KiB) hold; 0 turns them off",
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
        if let Some((var, v)) = get("ALIGNMALLOC_PORTS") {
            self.ports = number(&var, &v)? as usize;
        }
        if let Some((var, v)) = get("ALIGNMALLOC_DEVICE_CACHE_BYTES") {
            self.device_cache_bytes = Some(number(&var, &v)?);
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
        self.check()?;
        Ok(self)
    }

    /// The ranges every setting must be in, wherever it came from.
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str, why: String| Err(Error::Config(format!("{what}: {why}")));
        if !(self.arena_fraction > 0.0 && self.arena_fraction <= 1.0) {
            return bad(
                "arena fraction",
                format!("{} is not in (0, 1]", self.arena_fraction),
            );
        }
        if !(self.growth_mark > 0.0 && self.growth_mark <= 1.0) {
            return bad(
                "growth mark",
                format!("{} is not in (0, 1]", self.growth_mark),
            );
        }
        if self.ports == 0 || self.ports > orchestrator::mailbox::MAX_PORTS {
            return bad(
                "ports",
                format!(
                    "{} is not in 1..={}",
                    self.ports,
                    orchestrator::mailbox::MAX_PORTS
                ),
            );
        }
        if self.service.max_batch == 0 {
            return bad("service batch", "0 would serve nothing".into());
        }
        Ok(())
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
            ("ALIGNMALLOC_PORTS", "64"),
            ("ALIGNMALLOC_DEVICE_CACHE_BYTES", "0"),
            ("ALIGNMALLOC_QUARANTINE_CHUNKS", "16"),
            ("ALIGNMALLOC_GROWTH_MARK", "0.9"),
            ("ALIGNMALLOC_SERVICE_MAX_BATCH", "256"),
            ("ALIGNMALLOC_SERVICE_MAX_SLEEP_US", "5"),
            ("ALIGNMALLOC_SETTLE_TIMEOUT_MS", "250"),
        ])
        .unwrap();
        let default = Settings::default();
        assert_eq!(s.arena_bytes, Some(1 << 30));
        assert_eq!(s.arena_fraction, 0.5);
        assert_eq!(s.max_arena_bytes, Some(4 << 30));
        assert!(s.allow_oversubscription);
        assert_eq!(s.ports, 64);
        assert_eq!(s.device_cache_bytes, Some(0));
        assert_eq!(s.quarantine_chunks, Some(16));
        assert_eq!(s.growth_mark, 0.9);
        assert_eq!(s.service.max_batch, 256);
        assert_eq!(s.service.max_sleep, Duration::from_micros(5));
        assert_eq!(s.service.spin_sweeps, default.service.spin_sweeps);
        assert_eq!(s.settle_timeout, Duration::from_millis(250));
        // Every variable of the table was exercised above.
        assert_eq!(TABLE.len(), 11);
        assert_eq!(with(&[]).unwrap(), default);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("ALIGNMALLOC_ARENA_BYTES", "1G"),
            ("ALIGNMALLOC_ARENA_FRACTION", "0"),
            ("ALIGNMALLOC_ARENA_FRACTION", "1.5"),
            ("ALIGNMALLOC_OVERSUBSCRIBE", "maybe"),
            ("ALIGNMALLOC_PORTS", "-1"),
            ("ALIGNMALLOC_GROWTH_MARK", "NaN"),
            ("ALIGNMALLOC_SETTLE_TIMEOUT_MS", "1e3"),
        ] {
            let err = with(&[(var, value)]).unwrap_err().to_string();
            assert!(err.contains(var), "{var}={value}: {err}");
        }
        let err = with(&[("ALIGNMALLOC_PORTS", "0")]).unwrap_err().to_string();
        assert!(err.contains("ports"), "{err}");
        let err = with(&[("ALIGNMALLOC_SERVICE_MAX_BATCH", "0")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("batch"), "{err}");
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
