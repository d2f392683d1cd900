//! Configuration: a TOML file (all keys optional) overridden by command-line flags.
//!
//! ```toml
//! listen = "127.0.0.1:9617"          # HTTP address for /metrics and the API
//!
//! [devices]
//! include = ["nvme*", "vd*"]         # glob patterns on kernel device names; empty = all
//! exclude = ["loop*"]                # applied after include
//!
//! [histogram]
//! # Exported Prometheus bucket upper bounds (seconds, ascending). The in-kernel buckets are
//! # finer (8 per power of two); each is counted in the first exported bucket that contains it.
//! buckets = [0.000001, 0.000002, 0.000004]
//!
//! [maps]
//! inflight_entries = 16384           # requests tracked at once, all devices
//! stats_memory_mib = 16              # kernel memory for per-CPU histograms
//! ```

use std::{net::SocketAddr, path::Path};

use serde::Deserialize;

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9617";

/// A configuration problem, naming the key. The daemon exits with status 2 on these.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// TOML syntax, unknown key, or wrong type (the message names the key and line).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// toml's message, with the key and location.
        message: String,
    },
    /// A value that parsed but makes no sense.
    #[error("config key `{key}`: {problem}")]
    Invalid {
        /// Dotted key, e.g. `histogram.buckets`.
        key: &'static str,
        /// What is wrong and what is expected.
        problem: String,
    },
}

/// The whole configuration, after defaults.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Which devices are exported.
    pub devices: Devices,
    /// Exported histogram buckets.
    pub histogram: Histogram,
    /// BPF map sizes.
    pub maps: Maps,
}

/// `[devices]`: glob patterns on kernel device names (`vda`, `nvme0n1`, `loop0`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Devices {
    /// Only these (empty: all).
    pub include: Vec<String>,
    /// Never these.
    pub exclude: Vec<String>,
}

/// `[histogram]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Histogram {
    /// Upper bounds in seconds, ascending, finite, > 0. `+Inf` is always added.
    pub buckets: Vec<f64>,
}

/// `[maps]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Maps {
    /// Capacity of the in-flight request map (requests, all devices).
    pub inflight_entries: u32,
    /// Kernel memory budget (MiB) for the per-CPU (device, class) statistics; the number of
    /// (device, class) pairs is this divided by (per-CPU value size × CPUs).
    pub stats_memory_mib: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid default"),
            devices: Devices::default(),
            histogram: Histogram::default(),
            maps: Maps::default(),
        }
    }
}

impl Default for Histogram {
    /// 1 µs · 2^k for k = 0..=26 (1 µs … 67 s): exp2 buckets in µs, as ebpf_exporter's.
    fn default() -> Self {
        Self { buckets: (0..=26).map(|k| (1u64 << k) as f64 * 1e-6).collect() }
    }
}

impl Default for Maps {
    fn default() -> Self {
        Self { inflight_entries: observer_common::maps::INFLIGHT_DEFAULT_ENTRIES, stats_memory_mib: 16 }
    }
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_string(), message: e.to_string() })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks values that parse but are unusable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let b = &self.histogram.buckets;
        if b.is_empty() || b.len() > 200 {
            return Err(ConfigError::Invalid {
                key: "histogram.buckets",
                problem: format!("needs 1 to 200 bounds, got {}", b.len()),
            });
        }
        if let Some(bad) = b.iter().find(|v| !v.is_finite() || **v <= 0.0) {
            return Err(ConfigError::Invalid {
                key: "histogram.buckets",
                problem: format!("{bad} is not a positive number of seconds"),
            });
        }
        if b.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ConfigError::Invalid {
                key: "histogram.buckets",
                problem: "bounds must be strictly ascending".into(),
            });
        }
        for (key, pats) in [("devices.include", &self.devices.include), ("devices.exclude", &self.devices.exclude)] {
            for p in pats {
                if let Err(e) = glob::Pattern::new(p) {
                    return Err(ConfigError::Invalid { key, problem: format!("bad glob pattern {p:?}: {e}") });
                }
            }
        }
        if !(64..=1 << 22).contains(&self.maps.inflight_entries) {
            return Err(ConfigError::Invalid {
                key: "maps.inflight_entries",
                problem: format!("{} is outside 64..=4194304", self.maps.inflight_entries),
            });
        }
        if !(1..=4096).contains(&self.maps.stats_memory_mib) {
            return Err(ConfigError::Invalid {
                key: "maps.stats_memory_mib",
                problem: format!("{} is outside 1..=4096", self.maps.stats_memory_mib),
            });
        }
        Ok(())
    }
}

/// Device include/exclude filter, compiled from [`Devices`].
#[derive(Clone, Debug, Default)]
pub struct DeviceFilter {
    include: Vec<glob::Pattern>,
    exclude: Vec<glob::Pattern>,
}

impl DeviceFilter {
    /// Compiles the patterns (already validated).
    pub fn new(d: &Devices) -> Self {
        let compile = |v: &Vec<String>| v.iter().filter_map(|p| glob::Pattern::new(p).ok()).collect();
        Self { include: compile(&d.include), exclude: compile(&d.exclude) }
    }

    /// Whether a device (kernel name) is exported.
    pub fn allows(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| p.matches(name)))
            && !self.exclude.iter().any(|p| p.matches(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_loopback() {
        let c = Config::from_toml("", "t").unwrap();
        assert!(c.listen.ip().is_loopback());
        assert_eq!(c.histogram.buckets.len(), 27);
        assert!((c.histogram.buckets[26] - 67.108864).abs() < 1e-9);
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::from_toml("lisen = \"1.2.3.4:1\"", "t").unwrap_err().to_string();
        assert!(e.contains("lisen"), "{e}");
        let e = Config::from_toml("listen = \"nonsense\"", "t").unwrap_err().to_string();
        assert!(e.contains("listen"), "{e}");
        let e = Config::from_toml("[histogram]\nbuckets = [0.1, 0.01]", "t").unwrap_err().to_string();
        assert!(e.contains("histogram.buckets") && e.contains("ascending"), "{e}");
        let e = Config::from_toml("[histogram]\nbuckets = [-1.0]", "t").unwrap_err().to_string();
        assert!(e.contains("histogram.buckets"), "{e}");
        let e = Config::from_toml("[devices]\ninclude = [\"[\"]", "t").unwrap_err().to_string();
        assert!(e.contains("devices.include"), "{e}");
        let e = Config::from_toml("[maps]\ninflight_entries = 1", "t").unwrap_err().to_string();
        assert!(e.contains("maps.inflight_entries"), "{e}");
    }

    #[test]
    fn filter() {
        let f = DeviceFilter::new(&Devices { include: vec!["loop*".into(), "vda".into()], exclude: vec!["loop7".into()] });
        assert!(f.allows("loop0") && f.allows("vda"));
        assert!(!f.allows("loop7") && !f.allows("nvme0n1"));
        assert!(DeviceFilter::default().allows("anything"));
    }
}
