//! `[stalls]`: the slow-request and stall-episode thresholds, and the kernel `SETTINGS` value
//! they become.

use std::time::Duration;

use serde::Deserialize;

/// Thresholds of one op; a stage without a threshold is not checked.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StageThresholds {
    /// Entered → dispatched.
    #[serde(with = "humantime_serde")]
    pub queue: Option<Duration>,
    /// Dispatched → completed.
    #[serde(with = "humantime_serde")]
    pub device: Option<Duration>,
    /// Entered → completed.
    #[serde(with = "humantime_serde")]
    pub total: Option<Duration>,
}

/// `[stalls]`: what counts as slow or stalled. Durations are strings like "100ms" or "2s".
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Stalls {
    /// A device with requests outstanding (queued) and no completion (dispatch) for longer
    /// than this is in a stall episode.
    #[serde(with = "humantime_serde")]
    pub episode: Duration,
    /// Slow thresholds for every op unless overridden in `[stalls.slow.<op>]`.
    pub slow_default: StageThresholds,
    /// Per-op overrides, keyed by the `op` label (`read`, `write`, `flush`, `zone_append`, ...).
    pub slow: std::collections::BTreeMap<String, StageThresholds>,
    /// Slow requests kept in memory (oldest dropped first, counted in /metrics).
    pub history_requests: usize,
    /// Stall episodes kept in memory.
    pub history_episodes: usize,
}

impl Default for Stalls {
    /// Total over 100 ms is slow for any op but discard (1 s); an episode is 250 ms without
    /// progress. Disks and SSDs alike stay well below these when healthy.
    fn default() -> Self {
        let mut slow = std::collections::BTreeMap::new();
        slow.insert(
            "discard".to_string(),
            StageThresholds {
                total: Some(Duration::from_secs(1)),
                ..Default::default()
            },
        );
        Self {
            episode: Duration::from_millis(250),
            slow_default: StageThresholds {
                total: Some(Duration::from_millis(100)),
                ..Default::default()
            },
            slow,
            history_requests: 10_000,
            history_episodes: 1_000,
        }
    }
}

impl Stalls {
    /// The kernel-side settings (ns), per op code.
    pub fn settings(&self) -> observer_common::maps::Settings {
        use observer_common::class::Op;
        let ns = |d: Option<Duration>| {
            d.map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
                .unwrap_or(0)
        };
        let mut s = observer_common::maps::Settings {
            stall_ns: ns(Some(self.episode)),
            ..Default::default()
        };
        for op in Op::ALL {
            let t = self
                .slow
                .get(op.name())
                .copied()
                .unwrap_or(self.slow_default);
            s.slow_ns[op as usize] = [ns(t.queue), ns(t.device), ns(t.total)];
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn stall_settings() {
        let c = Config::from_toml(
            "[stalls]\nepisode = \"700ms\"\nslow.flush = { device = \"50ms\" }",
            "t",
        )
        .unwrap();
        let s = c.stalls.settings();
        assert_eq!(s.stall_ns, 700_000_000);
        assert_eq!(s.slow_ns[2], [0, 50_000_000, 0]);
        assert_eq!(s.slow_ns[0], [0, 0, 100_000_000]);
        let e = Config::from_toml("[stalls]\nslow.bogus = { total = \"1s\" }", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stalls.slow"), "{e}");
        let e = Config::from_toml("[stalls]\nepisode = \"soon\"", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("episode"), "{e}");
    }

    /// packaging/observer.toml shows `[stalls]` commented: uncommented, its keys parse and are
    /// the defaults (but for the `slow.flush` line, which it marks as an example).
    #[test]
    fn packaged_stalls_block_is_the_defaults() {
        let packaged = include_str!("../../../packaging/observer.toml");
        let start = packaged
            .find("# [stalls]\n")
            .expect("a commented [stalls] section");
        let block: String = packaged[start..]
            .lines()
            .take_while(|l| !l.starts_with('['))
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.starts_with("[stalls]") || l.split(' ').nth(1) == Some("="))
            .filter(|l| !l.starts_with("slow.flush"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(block.contains("history_episodes"), "{block}");
        let c = Config::from_toml(&block, "packaged").unwrap();
        assert_eq!(c.stalls, super::Stalls::default(), "{block}");
    }
}
