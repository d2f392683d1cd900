//! Running as a service: systemd readiness notifications (`sd_notify`) and configuration
//! reload on SIGHUP.
//!
//! Protocol (see `packaging/observer.service`, `Type=notify`):
//! - `READY=1` once the eBPF programs are attached **and** the HTTP listener is bound;
//! - `RELOADING=1` when a SIGHUP arrives, then `READY=1` again when the reload is done (applied
//!   or rejected: the daemon keeps serving either way);
//! - `STOPPING=1` when SIGTERM/SIGINT starts the shutdown.
//!
//! Without `NOTIFY_SOCKET` in the environment (not started by systemd) notifications are no-ops.
//!
//! What SIGHUP reloads: the config file given with `--config` is read again and the command-line
//! flags are applied over it, exactly as at startup. The device filter (`[devices]`), the
//! exported histogram buckets (`[histogram]`), the `[stalls]` thresholds, the `[merges]` window and the web
//! configuration file (`web_config_file`: certificates, client CA, users; new connections and
//! requests) take effect at once.
//! `listen`, `[maps]`, `[http]` and the `[stalls]` history sizes cannot change without a restart: a change to them is logged and otherwise ignored.
//! An invalid new configuration is rejected as a whole: the daemon keeps the old one and logs why.

use std::sync::{Arc, Mutex};

use sd_notify::NotifyState;
use tracing::{error, info, warn};

use crate::{
    config::{web, Config, ConfigError, DeviceFilter},
    exposition::BucketMap,
    state::AppState,
};

/// Sends notifications to the service manager; a failure is logged, never fatal (the daemon
/// works without a service manager).
fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET); check that the socket exists and is writable");
    }
}

/// `READY=1` with a status line. Call after the programs are attached and the listener is bound.
pub fn notify_ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STOPPING=1`. Call when shutdown begins.
pub fn notify_stopping() {
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: detaching eBPF programs"),
    ]);
}

/// `RELOADING=1` with `MONOTONIC_USEC` (required by `Type=notify-reload`, harmless otherwise).
fn notify_reloading() {
    let mut states = vec![NotifyState::Reloading];
    if let Ok(m) = NotifyState::monotonic_usec_now() {
        states.push(m);
    }
    notify(&states);
}

/// Configuration keys that only take effect at startup and differ between `old` and `new`.
///
/// Everything but `[devices]`, `[histogram]`, the `[stalls]` thresholds, `[merges]`, `[cgroups]` and `web_config_file` is
/// startup-only. Known keys are named; a change
/// anywhere else (a section added later) is reported as "other startup-only keys" rather than
/// silently ignored.
pub fn restart_required_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if old.listen != new.listen {
        keys.push("listen");
    }
    if old.host_root != new.host_root {
        keys.push("host_root");
    }
    if old.maps.inflight_entries != new.maps.inflight_entries {
        keys.push("maps.inflight_entries");
    }
    if old.maps.stats_memory_mib != new.maps.stats_memory_mib {
        keys.push("maps.stats_memory_mib");
    }
    if old.stalls.history_requests != new.stalls.history_requests
        || old.stalls.history_episodes != new.stalls.history_episodes
    {
        keys.push("stalls.history_*");
    }
    if old.http != new.http {
        keys.push("http");
    }
    if !old.cgroups.latency && new.cgroups.latency {
        // CGROUP_LATENCY is sized at load (1 entry while off): it stays off until a restart
        // (`Reloader::reload` keeps the kernel setting off).
        keys.push("cgroups.latency");
    }
    let mut rest = new.clone();
    rest.devices = old.devices.clone();
    rest.histogram = old.histogram.clone();
    rest.stalls = old.stalls.clone();
    rest.merges = old.merges.clone();
    rest.cgroups = old.cgroups.clone();
    rest.listen = old.listen;
    rest.host_root = old.host_root.clone();
    rest.maps = old.maps.clone();
    rest.http = old.http.clone();
    rest.web_config_file = old.web_config_file.clone();
    if rest != *old {
        keys.push("other startup-only keys");
    }
    keys
}

/// What a reload did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The new configuration is in effect. `restart_required` lists changed keys that were not
    /// applied (they need a restart).
    Applied {
        /// Changed keys that only a restart applies.
        restart_required: Vec<&'static str>,
    },
    /// The new configuration is invalid; the old one stays in effect.
    Rejected(ConfigError),
}

/// Re-reads the configuration and swaps the reloadable parts into the shared state.
pub struct Reloader<L> {
    load: L,
    state: Arc<AppState>,
    /// The configuration in effect (reloadable keys) as last applied; startup-only keys keep the
    /// values the daemon started with so that every reload reports them until a restart.
    current: Mutex<Config>,
}

impl<L> Reloader<L>
where
    L: Fn() -> Result<Config, ConfigError>,
{
    /// `load` produces the configuration as at startup (file + flags); `started_with` is the
    /// configuration the daemon runs with now.
    pub fn new(load: L, state: Arc<AppState>, started_with: Config) -> Self {
        Self {
            load,
            state,
            current: Mutex::new(started_with),
        }
    }

    /// Reloads once: load, validate (the web config file too), swap, log.
    pub fn reload(&self) -> ReloadOutcome {
        let loaded = (self.load)().and_then(|c| Ok((c.load_web_config()?, c)));
        let (web, new) = match loaded {
            Ok(l) => l,
            Err(e) => {
                error!(error = %e, "configuration reload rejected; still running with the previous configuration. Fix the file and send SIGHUP again (`systemctl reload observer`)");
                return ReloadOutcome::Rejected(e);
            }
        };
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let restart_required = restart_required_keys(&current, &new);
        if !restart_required.is_empty() {
            warn!(keys = ?restart_required, "configuration keys changed that only take effect at startup: restart the daemon (`systemctl restart observer`) to apply them; the rest of the configuration was applied");
        }
        let mut settings = new.kernel_settings();
        if !current.cgroups.latency {
            // Started without it: CGROUP_LATENCY has 1 entry, so turning it on now would count
            // every request as cgroup_latency_map_full. `current.cgroups` is the startup value.
            settings.cgroup_latency = 0;
        }
        crate::collect::cgroup_latency::set_max_per_device(new.cgroups.max_per_device);
        if let Err(e) = self.state.maps.set_settings(settings) {
            error!(error = %e, "cannot write the new [stalls] thresholds and [merges] window to the kernel; the old ones stay in effect");
        } else {
            let mut rt = self
                .state
                .runtime
                .write()
                .unwrap_or_else(|p| p.into_inner());
            rt.filter = DeviceFilter::new(&new.devices);
            rt.buckets = BucketMap::new(&new.histogram.buckets);
            rt.classic_in_protobuf = new.histogram.classic_in_protobuf;
            rt.forget_after = new.devices.forget_after;
            rt.settings = settings;
            let targets = rt.buckets.targets().to_vec();
            drop(rt);
            // Exemplars of buckets that no longer exist are forgotten. Not under the runtime
            // lock: `/stalls` takes the history lock, then the runtime lock.
            self.state
                .history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .exemplars
                .set_targets(&targets);
        }
        if let Some(warning) = web::exposure_warning(current.listen, web.as_ref()) {
            warn!("{warning}");
        }
        if web.is_some() || self.state.web.get().is_some() {
            info!(
                web_config_file = ?new.web_config_file,
                tls = web.as_ref().is_some_and(|w| w.tls.is_some()),
                basic_auth_users = web.as_ref().map_or(0, |w| w.users.len()),
                "web configuration reloaded: new connections and requests use it"
            );
        }
        self.state.web.set(web);
        info!(
            include = ?new.devices.include,
            exclude = ?new.devices.exclude,
            buckets = new.histogram.buckets.len(),
            "configuration reloaded"
        );
        current.devices = new.devices;
        current.histogram = new.histogram;
        current.stalls.episode = new.stalls.episode;
        current.stalls.slow_default = new.stalls.slow_default;
        current.stalls.slow = new.stalls.slow;
        current.merges = new.merges;
        current.web_config_file = new.web_config_file;
        ReloadOutcome::Applied { restart_required }
    }
}

/// Installs the SIGHUP handler (at once, so an early SIGHUP cannot kill the daemon) and spawns
/// a task that reloads on each SIGHUP. Call inside the tokio runtime, before [`notify_ready`].
pub fn spawn_reload_on_sighup<L>(
    reloader: Reloader<L>,
) -> anyhow::Result<tokio::task::JoinHandle<()>>
where
    L: Fn() -> Result<Config, ConfigError> + Send + Sync + 'static,
{
    use anyhow::Context;
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
    let reloader = Arc::new(reloader);
    Ok(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            info!("SIGHUP: reloading the configuration");
            notify_reloading();
            let r = reloader.clone();
            let outcome = tokio::task::spawn_blocking(move || r.reload()).await;
            let status = match outcome {
                Ok(ReloadOutcome::Applied { restart_required }) if restart_required.is_empty() => {
                    "serving; configuration reloaded".to_string()
                }
                Ok(ReloadOutcome::Applied { restart_required }) => {
                    format!(
                        "serving; reloaded, restart needed for {}",
                        restart_required.join(", ")
                    )
                }
                Ok(ReloadOutcome::Rejected(e)) => {
                    format!("serving with the previous configuration; reload rejected: {e}")
                }
                Err(e) => format!("serving with the previous configuration; reload failed: {e}"),
            };
            notify_ready(&status);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_keys_are_only_startup_keys() {
        let a = Config::default();
        let mut b = a.clone();
        b.devices.include = vec!["vd*".into()];
        b.histogram.buckets = vec![0.001, 0.1];
        assert!(restart_required_keys(&a, &b).is_empty());
        b.web_config_file = Some("/etc/observer/web.yml".into());
        b.cgroups.label = true;
        assert!(restart_required_keys(&a, &b).is_empty(), "reloadable");
        b.listen = "127.0.0.1:1".parse().unwrap();
        b.maps.inflight_entries = 128;
        assert_eq!(
            restart_required_keys(&a, &b),
            vec!["listen", "maps.inflight_entries"]
        );
        b.http.max_requests = 2;
        assert_eq!(
            restart_required_keys(&a, &b),
            vec!["listen", "maps.inflight_entries", "http"]
        );
    }
}
