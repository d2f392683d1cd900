//! `observer`: live block I/O latency observer. See README.md.

mod api_devices;
mod config;
mod devices;
mod fslog;
mod kernel_layout;
mod metrics;
mod probes;
mod reaper;
mod server;
mod snapshot;

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
    /// Check the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

fn load_config(cli: &Cli) -> Result<Config, ConfigError> {
    let mut cfg = match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(l) = cli.listen {
        cfg.listen = l;
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
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn run(cfg: Config) -> anyhow::Result<()> {
    let (probes, maps) = probes::attach(cfg.maps.inflight_entries, cfg.maps.stats_memory_mib)?;
    let state = Arc::new(server::AppState {
        maps,
        filter: DeviceFilter::new(&cfg.devices),
        buckets: metrics::BucketMap::new(&cfg.histogram.buckets),
        info: probes.info.clone(),
        reaped: reaper::Reaped::default(),
        fslog: Arc::default(),
    });
    let fslog_state = state.clone();
    fslog::spawn(
        move |want| fslog::sync_map(&mut fslog_state.maps.log_ranges.lock().expect("LOG_RANGES lock"), want),
        state.fslog.clone(),
        fslog::Sources::default(),
    )
    .context("starting the filesystem log discovery thread")?;
    let reaper_state = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            let st = reaper_state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let mut map = st.maps.inflight_rw.lock().expect("reaper lock");
                reaper::reap(&mut map, &st.reaped)
            })
            .await;
        }
    });
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}: choose another address with --listen or `listen` in the config", cfg.listen))?;
    info!(address = %listener.local_addr()?, "serving /metrics and /healthz");
    axum::serve(listener, server::router(state))
        .with_graceful_shutdown(shutdown())
        .await
        .context("HTTP server")?;
    drop(probes);
    info!("stopped; eBPF programs detached");
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
}
