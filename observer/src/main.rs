//! `observer`: live block I/O latency observer. See README.md.

mod api;
mod client;
mod api_devices;
mod config;
mod devices;
mod fslog;
mod kernel_layout;
mod mapdump;
mod metrics;
mod probes;
mod reaper;
mod server;
mod service;
mod snapshot;
mod stalls;
mod windows;

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc};

use anyhow::Context;
use clap::Parser;
use tracing::info;

use crate::config::{Config, ConfigError, DeviceFilter};

/// Live block I/O latency observer: per-device, per-class, per-stage latency histograms from
/// eBPF, served as Prometheus metrics.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Without a command: run the daemon.
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML configuration file (see README "Configuration"). Flags override it.
    #[arg(short, long, env = "OBSERVER_CONFIG")]
    config: Option<PathBuf>,
    /// HTTP listen address [default: 127.0.0.1:9617].
    #[arg(short, long)]
    listen: Option<SocketAddr>,
    /// Export only devices matching this glob (repeatable), e.g. `--device 'nvme*'`.
    #[arg(long = "device", value_name = "GLOB")]
    include: Vec<String>,
    /// Never export devices matching this glob (repeatable).
    #[arg(long = "exclude-device", value_name = "GLOB")]
    exclude: Vec<String>,
    /// Exported histogram bucket bounds in seconds, comma separated, ascending.
    #[arg(long, value_delimiter = ',', value_name = "SECONDS")]
    buckets: Option<Vec<f64>>,
    /// In a container: where the host's /proc, /dev and /sys/fs/cgroup are mounted (e.g. /host):
    /// the host's mount table (<DIR>/proc/1/mountinfo), device nodes (<DIR>/dev) and cgroup
    /// tree (<DIR>/sys/fs/cgroup) are read there. Overrides `host_root` in the config.
    #[arg(long, value_name = "DIR")]
    host_root: Option<PathBuf>,
    /// Check the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

/// Clients of a running daemon.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Show slow requests, requests stuck right now and stall episodes (GET /stalls).
    Stalls {
        /// The daemon's address.
        #[arg(long, default_value = "http://127.0.0.1:9617")]
        url: String,
        /// Only this device (kernel name).
        #[arg(long)]
        device: Option<String>,
        /// Only since this long ago (30s, 1.5m) or this Unix time (seconds).
        #[arg(long)]
        since: Option<String>,
        /// Only requests at least this slow / episodes at least this long (e.g. 200ms).
        #[arg(long)]
        min: Option<String>,
        /// At most this many per list.
        #[arg(long)]
        limit: Option<String>,
        /// JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Print biolatency-style histograms per device, class and stage (GET /histograms).
    Report {
        /// The daemon's address.
        #[arg(long, default_value = "http://127.0.0.1:9617")]
        url: String,
        /// Only this device.
        #[arg(long)]
        device: Option<String>,
        /// Window: this long back (default 60s; up to 15m).
        #[arg(long, default_value = "60s")]
        since: String,
    },
}

fn load_config(cli: &Cli) -> Result<Config, ConfigError> {
    let mut cfg = match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(l) = cli.listen {
        cfg.listen = l;
    }
    if let Some(r) = &cli.host_root {
        cfg.host_root = Some(r.clone());
    }
    if !cli.include.is_empty() {
        cfg.devices.include = cli.include.clone();
    }
    if !cli.exclude.is_empty() {
        cfg.devices.exclude = cli.exclude.clone();
    }
    if let Some(b) = &cli.buckets {
        cfg.histogram.buckets = b.clone();
    }
    cfg.validate()?;
    Ok(cfg)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OBSERVER_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Some(cmd) = cli.command {
        // A client piped into `head` should end quietly, like other CLI tools.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let result = match cmd {
            Command::Stalls { url, device, since, min, limit, json } => client::stalls(&url, device, since, min, limit, json),
            Command::Report { url, device, since } => client::report(&url, device, Some(since)),
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let cfg = match load_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    match run(cfg, cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn run(cfg: Config, cli: Cli) -> anyhow::Result<()> {
    stalls::set_cgroup_root(cfg.host_root.as_deref());
    if let Some(r) = &cfg.host_root {
        info!(host_root = %r.display(), "host view: mount table, device nodes and cgroups read under this directory");
    }
    let (probes, maps) = probes::attach(cfg.maps.inflight_entries, cfg.maps.stats_memory_mib, cfg.stalls.settings())?;
    let state = Arc::new(server::AppState {
        maps,
        runtime: std::sync::RwLock::new(server::Runtime {
            filter: DeviceFilter::new(&cfg.devices),
            buckets: metrics::BucketMap::new(&cfg.histogram.buckets),
            settings: cfg.stalls.settings(),
        }),
        info: probes.info.clone(),
        reaped: reaper::Reaped::default(),
        history: std::sync::Mutex::new(stalls::History::new(cfg.stalls.history_requests, cfg.stalls.history_episodes)),
        windows: std::sync::Mutex::new(windows::Windows::default()),
        fslog: Arc::default(),
    });
    spawn_background(state.clone())?;
    let fslog_state = state.clone();
    fslog::spawn(
        move |want| fslog::sync_map(&mut fslog_state.maps.log_ranges.lock().expect("LOG_RANGES lock"), want),
        state.fslog.clone(),
        fslog::Sources::for_host_root(cfg.host_root.as_deref()),
    )
    .context("starting the filesystem log discovery thread")?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}: choose another address with --listen or `listen` in the config", cfg.listen))?;
    info!(address = %listener.local_addr()?, "serving /metrics and /healthz");
    service::spawn_reload_on_sighup(service::Reloader::new(move || load_config(&cli), state.clone(), cfg.clone()))?;
    service::notify_ready(&format!("serving on {}", listener.local_addr()?));
    axum::serve(listener, server::router(state))
        .with_graceful_shutdown(shutdown())
        .await
        .context("HTTP server")?;
    drop(probes);
    info!("stopped; eBPF programs detached");
    Ok(())
}

/// The reaper (1 s), histogram snapshots (10 s) and the kernel event reader.
fn spawn_background(state: Arc<server::AppState>) -> anyhow::Result<()> {
    let st = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            let st = st.clone();
            let _ = tokio::task::spawn_blocking(move || {
                {
                    let mut map = st.maps.inflight_rw.lock().expect("reaper lock");
                    reaper::reap(&mut map, st.maps.inflight_capacity, &st.reaped);
                }
                let filter = st.runtime.read().expect("runtime lock").filter.clone();
                let now = reaper::monotonic_ns();
                let due = st.windows.lock().expect("windows lock").oldest().is_none()
                    || now % windows::INTERVAL_NS < 1_100_000_000;
                if due {
                    let snap = snapshot::Snapshot::read(&st.maps, &st.reaped, &filter);
                    st.windows.lock().expect("windows lock").record(now, &snap);
                }
            })
            .await;
        }
    });
    let ring = state.maps.events.lock().expect("events lock").take().context("EVENTS ring buffer already taken")?;
    // SAFETY: the ring buffer owns its fd for as long as the AsyncFd lives.
    let mut fd = unsafe { tokio::io::unix::AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the EVENTS ring buffer: {e}"))?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else { return };
            let ring = guard.get_inner_mut();
            let mut history = state.history.lock().expect("history lock");
            while let Some(item) = ring.next() {
                history.ingest(&item);
            }
            drop(history);
            guard.clear_ready();
        }
    });
    Ok(())
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    info!("shutting down");
    service::notify_stopping();
}
