//! Configuration: a TOML file (all keys optional) overridden by command-line flags.
//!
//! ```toml
//! listen = "127.0.0.1:9617"          # HTTP address for /metrics and the API
//! web_config_file = "/etc/observer/web-config.yml"  # TLS and basic auth (exporter-toolkit format)
//! host_root = "/host"                # in a container: the host's /proc, /dev, /sys/fs/cgroup are under it
//!
//! [devices]
//! include = ["nvme*", "vd*"]         # glob patterns on kernel device names; empty = all
//! exclude = ["loop*"]                # applied after include
//!
//! [histogram]
//! # Exported Prometheus bucket upper bounds (seconds, ascending). The in-kernel buckets are
//! # finer (8 per power of two); each is counted in the first exported bucket that contains it.
//! buckets = [0.000001, 0.000002, 0.000004]
//! classic_in_protobuf = true         # protobuf /metrics: classic buckets beside the native ones
//!
//! [stalls]
//! episode = "250ms"                  # no completion (dispatch) for this long = stall episode
//! slow_default = { total = "100ms" } # slow-request thresholds: queue, device, total
//! slow.flush = { device = "50ms" }   # per-op overrides
//!
//! [merges]
//! window = "1ms"                     # missed adjacent merge: dispatched this soon after its neighbour
//!
//! [cgroups]
//! label = false                      # cgroup label (the owner cgroup) on requests/bytes counters
//! latency = false                    # blkobs_cgroup_request_latency_seconds (startup only)
//! max_per_device = 8                 # cgroups with their own latency histogram per device
//!
//! [maps]
//! inflight_entries = 16384           # requests tracked at once, all devices
//! stats_memory_mib = 16              # kernel memory for per-CPU histograms
//!
//! [http]                             # what hostile or careless clients may hold (startup only)
//! header_read_timeout = "10s"        # a connection without a complete request header is closed
//! max_connections = 512              # connections at once; more are closed at once
//! max_requests = 40                  # /metrics and API requests at once; more get 503
//! max_uri_bytes = 2048               # longer request targets get 414
//! ```

mod filter;
#[cfg(test)]
mod fuzz;
mod stalls;
pub mod web;

pub use filter::DeviceFilter;
pub use stalls::{StageThresholds, Stalls};
pub use web::{LiveWebConfig, WebConfig};

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
    /// The web configuration file (`web_config_file`): unreadable, unknown key, bad value, or a
    /// certificate, key or bcrypt hash that cannot be used.
    #[error("web config file {path}: {problem}")]
    Web {
        /// The web configuration file.
        path: String,
        /// What is wrong (naming the key) and what to do.
        problem: String,
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
    /// Where the host's `/proc`, `/dev` and `/sys/fs/cgroup` are mounted when the daemon runs in
    /// a container (`/host` in packaging/k8s/daemonset.yaml): the host's mount table is read
    /// from `<host_root>/proc/1/mountinfo`, device nodes are opened under `<host_root>/dev`,
    /// cgroup paths are resolved under `<host_root>/sys/fs/cgroup`. Unset: the daemon's own
    /// `/proc/self/mountinfo`, `/dev` and `/sys/fs/cgroup`.
    pub host_root: Option<std::path::PathBuf>,
    /// TLS and HTTP basic authentication for every endpoint: a YAML file in the format of
    /// Prometheus exporter-toolkit's web configuration file ([`web`]). Unset: plain HTTP, no
    /// authentication. Read at startup and again on every reload.
    pub web_config_file: Option<std::path::PathBuf>,
    /// Which devices are exported.
    pub devices: Devices,
    /// Exported histogram buckets.
    pub histogram: Histogram,
    /// BPF map sizes.
    pub maps: MapSizes,
    /// Slow requests and stall episodes.
    pub stalls: Stalls,
    /// Merge analysis (missed adjacent merges).
    pub merges: Merges,
    /// Per-cgroup request counters.
    pub cgroups: Cgroups,
    /// Limits on HTTP clients.
    pub http: HttpLimits,
}

/// `[http]`: what HTTP clients may hold, so that idle, slow or too many clients cannot keep
/// Prometheus from scraping. Startup only.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpLimits {
    /// A connection that has not sent a complete request header this long after it opened (or
    /// after its previous response: idle keep-alive connections too) is closed.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: std::time::Duration,
    /// Connections held at once; a connection beyond this is accepted and closed at once
    /// (counted in `blkobs_http_rejected_total{reason="max_connections"}`). Each is a file
    /// descriptor: keep it well below the daemon's `LimitNOFILE`.
    pub max_connections: usize,
    /// Requests to `/metrics` and the JSON API served at once (node_exporter's
    /// `--web.max-requests`); more get 503 (`reason="max_requests"`).
    pub max_requests: usize,
    /// Longest request target (path and query, bytes); longer ones get 414
    /// (`reason="uri_too_long"`).
    pub max_uri_bytes: usize,
}

impl Default for HttpLimits {
    /// 10 s to send a request header, 512 connections, 40 requests at once (as node_exporter),
    /// 2048-byte request targets.
    fn default() -> Self {
        Self {
            header_read_timeout: std::time::Duration::from_secs(10),
            max_connections: 512,
            max_requests: 40,
            max_uri_bytes: 2048,
        }
    }
}

/// `[devices]`: glob patterns on kernel device names (`vda`, `nvme0n1`, `loop0`), and how long
/// a disk that went away keeps its series.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Devices {
    /// Only these (empty: all).
    pub include: Vec<String>,
    /// Never these.
    pub exclude: Vec<String>,
    /// A disk gone from `/sys/dev/block` for this long (e.g. a detached loop device, an
    /// unplugged disk) has its counters and histograms deleted, so its series leave
    /// `/metrics`. Default 5 minutes: several scrapes see its final counts first. A disk that
    /// comes back with the same device number before then keeps counting where it was.
    #[serde(with = "humantime_serde")]
    pub forget_after: std::time::Duration,
}

impl Default for Devices {
    fn default() -> Self {
        Devices {
            include: Vec::new(),
            exclude: Vec::new(),
            forget_after: std::time::Duration::from_secs(300),
        }
    }
}

/// `[histogram]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Histogram {
    /// Upper bounds in seconds, ascending, finite, > 0. `+Inf` is always added.
    pub buckets: Vec<f64>,
    /// In the protobuf exposition (`GET /metrics` negotiated by a scraper with native
    /// histograms on, see `crate::exposition::proto`), also write each histogram's classic
    /// buckets (these `buckets`) beside its native buckets, so scrapers that ingest classic
    /// histograms only keep working. Default true; false halves a latency series' protobuf
    /// size with the default buckets (BENCHMARKS.md "Native histograms"). The text format
    /// always has the classic buckets. Reloadable (SIGHUP).
    pub classic_in_protobuf: bool,
}

/// `[merges]`: the missed-adjacent-merge rule (observer_common::dispatch::is_missed_merge).
/// Reloadable (SIGHUP): written to the kernel's `SETTINGS` map with the `[stalls]` thresholds.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Merges {
    /// A request dispatched on a device at most this long after the previous dispatch there,
    /// with the same op and starting at the sector where that one ended, is a missed adjacent
    /// merge (`blkobs_missed_merges_total`, `GET /merges`). Default 1 ms; at most 10 s;
    /// `"0s"` turns the check off.
    #[serde(with = "humantime_serde")]
    pub window: std::time::Duration,
}

impl Default for Merges {
    fn default() -> Self {
        Merges {
            window: std::time::Duration::from_millis(1),
        }
    }
}

/// `[cgroups]`: per-cgroup counters. Reloadable (SIGHUP): written to the kernel's `SETTINGS`
/// map.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Cgroups {
    /// When true, `blkobs_requests_total` and `blkobs_bytes_total` get a `cgroup` label: the
    /// path of the cgroup that owns each request's I/O (its first bio's, as the kernel charges
    /// it in `io.stat`), `""` when unknown. Costs a hash-map update per completed request in
    /// the kernel and multiplies those two counters' series by the cgroups doing I/O on each
    /// (device, class). Default false.
    pub label: bool,
    /// When true, `blkobs_cgroup_request_latency_seconds{device,op,stage,cgroup}`: each
    /// completed request's stage latencies by the cgroup that owns its I/O (as `label`), op
    /// flags folded. The kernel map is sized at startup (`CGROUP_LATENCY_ENTRIES` (disk, op,
    /// cgroup) triples, 6,768 bytes per CPU each; 1 entry while off), so turning this on needs
    /// a restart; a reload can turn it off (and on again, if it was on at start). Default false.
    pub latency: bool,
    /// With `latency`: the most cgroups per device that get their own histogram series (the
    /// busiest by requests, re-chosen every `collect::cgroup_latency::RECHOOSE`); the rest
    /// are folded into `cgroup="other"`. Default 8; 0 folds everything.
    pub max_per_device: usize,
}

impl Default for Cgroups {
    fn default() -> Self {
        Cgroups {
            label: false,
            latency: false,
            max_per_device: 8,
        }
    }
}

/// `[maps]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MapSizes {
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
            host_root: None,
            web_config_file: None,
            devices: Devices::default(),
            histogram: Histogram::default(),
            maps: MapSizes::default(),
            stalls: Stalls::default(),
            merges: Merges::default(),
            cgroups: Cgroups::default(),
            http: HttpLimits::default(),
        }
    }
}

impl Default for Histogram {
    /// 1 µs · 2^k for k = 0..=26 (1 µs … 67 s): exp2 buckets in µs, as ebpf_exporter's;
    /// classic buckets in the protobuf exposition too.
    fn default() -> Self {
        Self {
            buckets: (0..=26).map(|k| (1u64 << k) as f64 * 1e-6).collect(),
            classic_in_protobuf: true,
        }
    }
}

impl Default for MapSizes {
    fn default() -> Self {
        Self {
            inflight_entries: observer_common::maps::INFLIGHT_DEFAULT_ENTRIES,
            stats_memory_mib: 16,
        }
    }
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: describe(text, &e),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads the web configuration file named by `web_config_file`, if any, with everything it
    /// names (certificates, keys, bcrypt hashes).
    pub fn load_web_config(&self) -> Result<Option<WebConfig>, ConfigError> {
        self.web_config_file
            .as_deref()
            .map(WebConfig::load)
            .transpose()
    }

    /// What the programs read from the `SETTINGS` map: the `[stalls]` thresholds, the
    /// `[merges]` window (ns) and `[cgroups] label`.
    pub fn kernel_settings(&self) -> observer_common::maps::Settings {
        observer_common::maps::Settings {
            merge_window_ns: self.merges.window.as_nanos().min(u64::MAX as u128) as u64,
            owner_stats: u64::from(self.cgroups.label),
            cgroup_latency: u64::from(self.cgroups.latency),
            ..self.stalls.settings()
        }
    }

    /// Checks values that parse but are unusable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(r) = &self.host_root {
            if !r.is_absolute() {
                return Err(ConfigError::Invalid {
                    key: "host_root",
                    problem: format!("must be an absolute path, got {}", r.display()),
                });
            }
        }
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
        for (key, pats) in [
            ("devices.include", &self.devices.include),
            ("devices.exclude", &self.devices.exclude),
        ] {
            for p in pats {
                if let Err(e) = glob::Pattern::new(p) {
                    return Err(ConfigError::Invalid {
                        key,
                        problem: format!("bad glob pattern {p:?}: {e}"),
                    });
                }
            }
        }
        if !(64..=1 << 22).contains(&self.maps.inflight_entries) {
            return Err(ConfigError::Invalid {
                key: "maps.inflight_entries",
                problem: format!("{} is outside 64..=4194304", self.maps.inflight_entries),
            });
        }
        for op in self.stalls.slow.keys() {
            if !observer_common::class::Op::ALL
                .iter()
                .any(|o| o.name() == op)
            {
                return Err(ConfigError::Invalid {
                    key: "stalls.slow",
                    problem: format!(
                        "unknown op {op:?}: use one of {}",
                        observer_common::class::Op::ALL.map(|o| o.name()).join(", ")
                    ),
                });
            }
        }
        if self.stalls.episode.is_zero() {
            return Err(ConfigError::Invalid {
                key: "stalls.episode",
                problem: "must be > 0".into(),
            });
        }
        if !(1..=1_000_000).contains(&self.stalls.history_requests)
            || !(1..=100_000).contains(&self.stalls.history_episodes)
        {
            return Err(ConfigError::Invalid {
                key: "stalls.history_requests",
                problem: "history_requests must be 1..=1000000 and history_episodes 1..=100000"
                    .into(),
            });
        }
        if self.merges.window > std::time::Duration::from_secs(10) {
            return Err(ConfigError::Invalid {
                key: "merges.window",
                problem: format!("{:?} is over 10s", self.merges.window),
            });
        }
        let h = &self.http;
        if h.header_read_timeout < std::time::Duration::from_millis(100)
            || h.header_read_timeout > std::time::Duration::from_secs(3600)
        {
            return Err(ConfigError::Invalid {
                key: "http.header_read_timeout",
                problem: format!("{:?} is outside 100ms..=1h", h.header_read_timeout),
            });
        }
        if !(1..=65536).contains(&h.max_connections) {
            return Err(ConfigError::Invalid {
                key: "http.max_connections",
                problem: format!("{} is outside 1..=65536", h.max_connections),
            });
        }
        if !(1..=h.max_connections).contains(&h.max_requests) {
            return Err(ConfigError::Invalid {
                key: "http.max_requests",
                problem: format!(
                    "{} is outside 1..=max_connections ({})",
                    h.max_requests, h.max_connections
                ),
            });
        }
        if !(64..=65534).contains(&h.max_uri_bytes) {
            return Err(ConfigError::Invalid {
                key: "http.max_uri_bytes",
                problem: format!("{} is outside 64..=65534", h.max_uri_bytes),
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

/// One line for a TOML error: the dotted key and line it points at, and toml's message
/// (which names unknown keys itself, but not the key of a bad value).
fn describe(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    let Some(span) = e.span() else { return msg };
    let line_no = text[..span.start.min(text.len())].matches('\n').count();
    let lines: Vec<&str> = text.lines().collect();
    let key = lines
        .get(line_no)
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().to_string());
    let section = lines[..line_no.min(lines.len())]
        .iter()
        .rev()
        .find_map(|l| {
            l.trim()
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .map(|s| s.trim().to_string())
        });
    match (key, section) {
        (Some(k), Some(sec)) => format!("key `{sec}.{k}` (line {}): {msg}", line_no + 1),
        (Some(k), None) => format!("key `{k}` (line {}): {msg}", line_no + 1),
        _ => format!("line {}: {msg}", line_no + 1),
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
        assert!(c.histogram.classic_in_protobuf);
    }

    #[test]
    fn classic_in_protobuf_can_be_turned_off() {
        let c = Config::from_toml("[histogram]\nclassic_in_protobuf = false", "t").unwrap();
        assert!(!c.histogram.classic_in_protobuf);
        assert_eq!(c.histogram.buckets, Histogram::default().buckets);
        let e = Config::from_toml("[histogram]\nclassic_in_protobuf = 1", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("histogram.classic_in_protobuf"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::from_toml("lisen = \"1.2.3.4:1\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lisen"), "{e}");
        let e = Config::from_toml("listen = \"nonsense\"", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `listen` (line 1)") && !e.contains('\n'),
            "{e}"
        );
        let e = Config::from_toml(
            "listen = \"127.0.0.1:1\"\n[stalls]\nepisode = \"fast\"",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("key `stalls.episode` (line 3)") && !e.contains('\n'),
            "{e}"
        );
        let e = Config::from_toml("[histogram]\nbuckets = [0.1, 0.01]", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("histogram.buckets") && e.contains("ascending"),
            "{e}"
        );
        let e = Config::from_toml("[histogram]\nbuckets = [-1.0]", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("histogram.buckets"), "{e}");
        let e = Config::from_toml("[devices]\ninclude = [\"[\"]", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices.include"), "{e}");
        let e = Config::from_toml("[maps]\ninflight_entries = 1", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("maps.inflight_entries"), "{e}");
        let e = Config::from_toml("host_root = \"host\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("host_root") && e.contains("absolute"), "{e}");
        let e = Config::from_toml("[http]\nmax_requests = 0", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.max_requests"), "{e}");
        let e = Config::from_toml("[http]\nheader_read_timeout = \"1ms\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.header_read_timeout"), "{e}");
        let e = Config::from_toml("[http]\nmax_uri_bytes = 10", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.max_uri_bytes"), "{e}");
        let e = Config::from_toml("[http]\nmax_conections = 10", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_conections"), "{e}");
        let c = Config::from_toml(
            "[http]\nheader_read_timeout = \"3s\"\nmax_connections = 100\nmax_requests = 4",
            "t",
        )
        .unwrap();
        assert_eq!(
            c.http.header_read_timeout,
            std::time::Duration::from_secs(3)
        );
        assert_eq!((c.http.max_connections, c.http.max_requests), (100, 4));
        assert_eq!(c.http.max_uri_bytes, 2048);
        let c = Config::from_toml("web_config_file = \"/etc/observer/web.yml\"", "t").unwrap();
        assert_eq!(
            c.web_config_file.as_deref(),
            Some(std::path::Path::new("/etc/observer/web.yml"))
        );
        let e = Config::from_toml("web_config_file = 1", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `web_config_file` (line 1)"), "{e}");
        let e = c.load_web_config().unwrap_err();
        assert!(matches!(e, ConfigError::Web { .. }), "{e}");
        assert!(Config::default().load_web_config().unwrap().is_none());
        let c = Config::from_toml("[cgroups]\nlabel = true", "t").unwrap();
        assert_eq!(c.kernel_settings().owner_stats, 1);
        assert_eq!(Config::default().kernel_settings().owner_stats, 0);
        let c = Config::from_toml("[cgroups]\nlatency = true\nmax_per_device = 2", "t").unwrap();
        assert_eq!(c.kernel_settings().cgroup_latency, 1);
        assert_eq!(c.cgroups.max_per_device, 2);
        assert_eq!(Config::default().kernel_settings().cgroup_latency, 0);
        assert_eq!(Config::default().cgroups.max_per_device, 8);
        let e = Config::from_toml("[cgroups]\nlabel = 1", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cgroups.label"), "{e}");
        let c = Config::from_toml("[merges]\nwindow = \"250us\"", "t").unwrap();
        assert_eq!(c.kernel_settings().merge_window_ns, 250_000);
        assert_eq!(
            Config::default().kernel_settings().merge_window_ns,
            1_000_000
        );
        let e = Config::from_toml("[merges]\nwindow = \"1min\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("merges.window"), "{e}");
        let e = Config::from_toml("[merges]\nwindow = \"soon\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `merges.window` (line 2)"), "{e}");
        let c = Config::from_toml("host_root = \"/host\"", "t").unwrap();
        assert_eq!(c.host_root.as_deref(), Some(std::path::Path::new("/host")));
    }
}
