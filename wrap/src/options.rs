//! The wrapper's settings. `alignmalloc wrap` turns its flags into `ALIGNMALLOC_WRAP_*`
//! environment variables ([`WrapOptions::to_env`]); the preload library reads them back
//! ([`WrapOptions::from_env`]) when the program starts. A variable that is set but malformed is
//! an error naming it and what it accepts; nothing falls back silently.

use std::path::PathBuf;

use thiserror::Error;

/// Turns the pool on (1, default) or off (0: allocations stay with the driver, report only).
pub const ENV_POOL: &str = "ALIGNMALLOC_WRAP_POOL";
/// Prefetch each new allocation to the GPU (1) or not (0, default).
pub const ENV_PREFETCH: &str = "ALIGNMALLOC_WRAP_PREFETCH";
/// `read-mostly` or `preferred-gpu`: advice applied to each new allocation.
pub const ENV_ADVISE: &str = "ALIGNMALLOC_WRAP_ADVISE";
/// Bytes of the arena's first reservation.
pub const ENV_ARENA_BYTES: &str = "ALIGNMALLOC_WRAP_ARENA_BYTES";
/// Most bytes the arena reserves in all (default: the GPU's free memory when the pool starts).
pub const ENV_MAX_ARENA_BYTES: &str = "ALIGNMALLOC_WRAP_MAX_ARENA_BYTES";
/// Let the arena reserve more than the GPU has free (1) or not (0, default).
pub const ENV_OVERSUBSCRIBE: &str = "ALIGNMALLOC_WRAP_OVERSUBSCRIBE";
/// `driver` (default: allocate from the driver, warned once) or `fail` (out of memory) past the
/// arena's cap.
pub const ENV_PAST_CAP: &str = "ALIGNMALLOC_WRAP_PAST_CAP";
/// Count unified-memory traffic with CUPTI (1, default) or not (0: no per-allocation traffic,
/// no counting overhead in the program's kernels).
pub const ENV_COUNTERS: &str = "ALIGNMALLOC_WRAP_COUNTERS";
/// Record where each allocation was made (1; costs a stack walk per allocation) or not (0).
pub const ENV_CALLERS: &str = "ALIGNMALLOC_WRAP_CALLERS";
/// Where the preload library writes the report as JSON at exit (unset: a table on stderr).
pub const ENV_REPORT: &str = "ALIGNMALLOC_WRAP_REPORT";
/// `migrate` (the driver's migration for every allocation) or `tiered` (large allocations split
/// between the GPU and host memory, [`crate::tiers`]); unset: `tiered` with
/// [`ENV_OVERSUBSCRIBE`], else `migrate`.
pub const ENV_PLACEMENT: &str = "ALIGNMALLOC_WRAP_PLACEMENT";
/// Bytes the device tier may hold with `tiered` placement (default: the GPU's free memory when the
/// pool starts, less a sixteenth and at least 2 GiB).
pub const ENV_DEVICE_TIER_BYTES: &str = "ALIGNMALLOC_WRAP_DEVICE_TIER_BYTES";

/// Every variable, for clearing them before setting the ones asked for.
pub const ALL_ENV: [&str; 12] = [
    ENV_POOL,
    ENV_COUNTERS,
    ENV_PREFETCH,
    ENV_ADVISE,
    ENV_ARENA_BYTES,
    ENV_MAX_ARENA_BYTES,
    ENV_OVERSUBSCRIBE,
    ENV_PAST_CAP,
    ENV_CALLERS,
    ENV_REPORT,
    ENV_PLACEMENT,
    ENV_DEVICE_TIER_BYTES,
];

/// Default first reservation of the arena: 256 MiB (managed memory takes pages only when
/// touched; the arena then grows by doubling).
pub const DEFAULT_ARENA_BYTES: u64 = 256 << 20;

/// Advice given to every new allocation (`cuMemAdvise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Advice {
    /// `CU_MEM_ADVISE_SET_READ_MOSTLY`.
    ReadMostly,
    /// `CU_MEM_ADVISE_SET_PREFERRED_LOCATION` on the allocating context's GPU.
    PreferredGpu,
}

impl Advice {
    /// The name on the command line and in the environment.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadMostly => "read-mostly",
            Self::PreferredGpu => "preferred-gpu",
        }
    }
}

impl std::str::FromStr for Advice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read-mostly" => Ok(Self::ReadMostly),
            "preferred-gpu" => Ok(Self::PreferredGpu),
            _ => Err(format!(
                "`{s}` is not advice: use read-mostly or preferred-gpu"
            )),
        }
    }
}

/// Where allocations' pages live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Wherever the driver migrates them (with the `advise` and `prefetch` settings).
    #[default]
    Migrate,
    /// Large allocations split between a device tier and host memory ([`crate::tiers`]).
    Tiered,
}

impl Placement {
    /// Where pages live unless told: in tiers when the data may be larger than the GPU.
    pub fn default_for(oversubscribe: bool) -> Self {
        if oversubscribe {
            Self::Tiered
        } else {
            Self::Migrate
        }
    }

    /// The name on the command line and in the environment.
    pub fn name(self) -> &'static str {
        match self {
            Self::Migrate => "migrate",
            Self::Tiered => "tiered",
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "migrate" => Ok(Self::Migrate),
            "tiered" => Ok(Self::Tiered),
            _ => Err(format!("`{s}` is no placement: use migrate or tiered")),
        }
    }
}

/// What an allocation gets when the arena is at its cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PastCap {
    /// Memory from the driver, as without the wrapper (warned once, counted in the report).
    #[default]
    Driver,
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    Fail,
}

/// A malformed setting.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{variable}={value:?}: {expected}")]
pub struct OptionsError {
    /// The variable.
    pub variable: &'static str,
    /// What it was set to.
    pub value: String,
    /// What it accepts.
    pub expected: String,
}

/// The wrapper's settings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WrapOptions {
    /// Serve managed allocations from the arena (off: they stay with the driver, the report
    /// still counts them).
    pub pool: bool,
    /// Count unified-memory traffic with CUPTI.
    pub counters: bool,
    /// Prefetch each new allocation to the GPU.
    pub prefetch: bool,
    /// Advice for each new allocation.
    pub advise: Option<Advice>,
    /// Bytes of the arena's first reservation.
    pub arena_bytes: u64,
    /// Most bytes the arena reserves in all (`None`: the GPU's free memory when the pool starts,
    /// unlimited with `oversubscribe`).
    pub max_arena_bytes: Option<u64>,
    /// Let the arena reserve more than the GPU has free.
    pub oversubscribe: bool,
    /// What an allocation gets past the cap.
    pub past_cap: PastCap,
    /// Record where each allocation was made.
    pub callers: bool,
    /// Where the report goes as JSON (`None`: a table on stderr).
    pub report: Option<PathBuf>,
    /// Where allocations' pages live.
    #[serde(default)]
    pub placement: Placement,
    /// Bytes the device tier may hold (`None`: from the GPU's free memory when the pool starts).
    #[serde(default)]
    pub device_tier_bytes: Option<u64>,
}

impl Default for WrapOptions {
    fn default() -> Self {
        Self {
            pool: true,
            counters: true,
            prefetch: false,
            advise: None,
            arena_bytes: DEFAULT_ARENA_BYTES,
            max_arena_bytes: None,
            oversubscribe: false,
            past_cap: PastCap::Driver,
            callers: false,
            report: None,
            placement: Placement::Migrate,
            device_tier_bytes: None,
        }
    }
}

impl WrapOptions {
    /// The settings from `lookup` (the environment, or a map in tests); unset variables keep
    /// their defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, OptionsError> {
        let mut o = Self::default();
        let flag = |variable: &'static str, default: bool| match lookup(variable).as_deref() {
            None => Ok(default),
            Some("1") => Ok(true),
            Some("0") => Ok(false),
            Some(other) => Err(bad(variable, other, "1 or 0")),
        };
        o.pool = flag(ENV_POOL, o.pool)?;
        o.counters = flag(ENV_COUNTERS, o.counters)?;
        o.prefetch = flag(ENV_PREFETCH, o.prefetch)?;
        o.oversubscribe = flag(ENV_OVERSUBSCRIBE, o.oversubscribe)?;
        o.callers = flag(ENV_CALLERS, o.callers)?;
        if let Some(v) = lookup(ENV_ADVISE) {
            o.advise = Some(v.parse().map_err(|e: String| bad(ENV_ADVISE, &v, &e))?);
        }
        if let Some(v) = lookup(ENV_ARENA_BYTES) {
            o.arena_bytes = parse_bytes(&v).ok_or_else(|| bad(ENV_ARENA_BYTES, &v, BYTES))?;
            if o.arena_bytes == 0 {
                return Err(bad(ENV_ARENA_BYTES, &v, "more than 0 bytes"));
            }
        }
        if let Some(v) = lookup(ENV_MAX_ARENA_BYTES) {
            let max = parse_bytes(&v).ok_or_else(|| bad(ENV_MAX_ARENA_BYTES, &v, BYTES))?;
            o.max_arena_bytes = Some(max);
        }
        if let Some(v) = lookup(ENV_PAST_CAP) {
            o.past_cap = match v.as_str() {
                "driver" => PastCap::Driver,
                "fail" => PastCap::Fail,
                _ => return Err(bad(ENV_PAST_CAP, &v, "driver or fail")),
            };
        }
        o.placement = match lookup(ENV_PLACEMENT) {
            Some(v) => v.parse().map_err(|e: String| bad(ENV_PLACEMENT, &v, &e))?,
            None => Placement::default_for(o.oversubscribe),
        };
        if let Some(v) = lookup(ENV_DEVICE_TIER_BYTES) {
            o.device_tier_bytes =
                Some(parse_bytes(&v).ok_or_else(|| bad(ENV_DEVICE_TIER_BYTES, &v, BYTES))?);
        }
        o.report = lookup(ENV_REPORT)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Ok(o)
    }

    /// The settings of this process's environment.
    pub fn from_env() -> Result<Self, OptionsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The variables that carry these settings (every one, so a child sees exactly these).
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        let mut env = vec![
            (ENV_POOL, flag(self.pool)),
            (ENV_COUNTERS, flag(self.counters)),
            (ENV_PREFETCH, flag(self.prefetch)),
            (ENV_OVERSUBSCRIBE, flag(self.oversubscribe)),
            (ENV_CALLERS, flag(self.callers)),
            (ENV_ARENA_BYTES, self.arena_bytes.to_string()),
            (
                ENV_PAST_CAP,
                match self.past_cap {
                    PastCap::Driver => "driver",
                    PastCap::Fail => "fail",
                }
                .to_string(),
            ),
            (ENV_PLACEMENT, self.placement.name().to_string()),
        ];
        if let Some(a) = self.advise {
            env.push((ENV_ADVISE, a.name().to_string()));
        }
        if let Some(m) = self.max_arena_bytes {
            env.push((ENV_MAX_ARENA_BYTES, m.to_string()));
        }
        if let Some(g) = self.device_tier_bytes {
            env.push((ENV_DEVICE_TIER_BYTES, g.to_string()));
        }
        if let Some(r) = &self.report {
            env.push((ENV_REPORT, r.display().to_string()));
        }
        env
    }
}

const BYTES: &str = "a byte count such as 268435456, 256M, 256MiB or 4G";

fn bad(variable: &'static str, value: &str, expected: &str) -> OptionsError {
    OptionsError {
        variable,
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

/// A byte count: digits with an optional K, M, G or T (powers of 1024, `iB` or `B` allowed).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let number: u64 = t[..digits].parse().ok()?;
    let shift = match t[digits..].trim_start() {
        "" | "B" => 0,
        "K" | "KB" | "KiB" => 10,
        "M" | "MB" | "MiB" => 20,
        "G" | "GB" | "GiB" => 30,
        "T" | "TB" | "TiB" => 40,
        _ => return None,
    };
    number.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<WrapOptions, OptionsError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        WrapOptions::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn settings_round_trip_through_the_environment() {
        let o = WrapOptions {
            pool: false,
            counters: false,
            prefetch: true,
            advise: Some(Advice::PreferredGpu),
            arena_bytes: 64 << 20,
            max_arena_bytes: Some(1 << 30),
            oversubscribe: true,
            past_cap: PastCap::Fail,
            callers: true,
            report: Some("/tmp/r.json".into()),
            placement: Placement::Migrate,
            device_tier_bytes: Some(8 << 30),
        };
        let env: Vec<(&str, String)> = o.to_env();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(from(&pairs), Ok(o));
        assert_eq!(from(&[]), Ok(WrapOptions::default()));
    }

    #[test]
    fn oversubscription_places_in_tiers_unless_told_otherwise() {
        let over = from(&[(ENV_OVERSUBSCRIBE, "1")]).unwrap();
        assert_eq!(over.placement, Placement::Tiered);
        let told = from(&[(ENV_OVERSUBSCRIBE, "1"), (ENV_PLACEMENT, "migrate")]).unwrap();
        assert_eq!(told.placement, Placement::Migrate);
        assert_eq!(
            from(&[(ENV_PLACEMENT, "tiered")]).unwrap().placement,
            Placement::Tiered
        );
        assert_eq!(
            from(&[(ENV_PLACEMENT, "gpu")]).unwrap_err().variable,
            ENV_PLACEMENT
        );
        assert_eq!(
            from(&[(ENV_DEVICE_TIER_BYTES, "most")])
                .unwrap_err()
                .variable,
            ENV_DEVICE_TIER_BYTES
        );
    }

    #[test]
    fn a_malformed_setting_names_its_variable_and_what_it_accepts() {
        let e = from(&[(ENV_ARENA_BYTES, "lots")]).unwrap_err();
        assert_eq!(e.variable, ENV_ARENA_BYTES);
        assert!(e.to_string().contains("256MiB"), "{e}");
        assert_eq!(
            from(&[(ENV_ARENA_BYTES, "0")]).unwrap_err().variable,
            ENV_ARENA_BYTES
        );
        assert_eq!(from(&[(ENV_POOL, "yes")]).unwrap_err().variable, ENV_POOL);
        assert_eq!(
            from(&[(ENV_ADVISE, "fast")]).unwrap_err().variable,
            ENV_ADVISE
        );
        assert_eq!(
            from(&[(ENV_PAST_CAP, "x")]).unwrap_err().variable,
            ENV_PAST_CAP
        );
        assert_eq!(
            from(&[(ENV_MAX_ARENA_BYTES, "99999999999T")])
                .unwrap_err()
                .variable,
            ENV_MAX_ARENA_BYTES
        );
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("256M"), Some(256 << 20));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("1 T"), Some(1 << 40));
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("1.5G"), None);
        assert_eq!(parse_bytes(""), None);
    }
}
