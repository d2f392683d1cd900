//! The daemon: attaches the programs, builds the shared [`AppState`], starts the background
//! tasks (reaper, histogram snapshots, ring-buffer reader, filesystem log discovery), serves
//! HTTP until SIGTERM/SIGINT, and reloads on SIGHUP ([`service`]).

pub mod service;

use std::sync::{Arc, Mutex, RwLock};

use anyhow::Context;
use tracing::{info, warn};

use crate::{
    bpf::{devslots, kernel_log, loader},
    collect::{
        events::History,
        reaper::{Reaped, Reaper},
        snapshot::Snapshot,
        windows::{self, HistogramWindows},
    },
    config::{web, Config, ConfigError, DeviceFilter, LiveWebConfig, WebConfig},
    disks::DiskView,
    exposition::{BucketMap, ProcessMetrics},
    fslog, http,
    state::{AppState, ReloadableSettings},
    time::monotonic_ns,
};

/// Sets glibc's allocator up for a long-running daemon whose threads allocate and free megabytes
/// per scrape and snapshot (call before any thread starts):
/// - one arena (`M_ARENA_MAX`), not 8 per core: each tokio worker and blocking thread otherwise
///   keeps an arena of its own at its own high-water mark (the daemon's allocations are not
///   contended: a scrape, a snapshot, a batch of ring-buffer records);
/// - blocks of 128 KiB and more from mmap, at a fixed threshold (`M_MMAP_THRESHOLD`; the default
///   rises up to 32 MiB after the first such block is freed, after which scrape buffers stay in
///   the arenas), and the top of the heap given back from 256 KiB free (`M_TRIM_THRESHOLD`).
///
/// Measured with the soak (tests/soak.rs, debug build, BENCHMARKS.md): anonymous memory 18.5 MiB
/// after 7 min with glibc's defaults (2.9 MiB of it in use), ~9 MiB with 2 arenas; 10 minutes:
/// RSS after warm-up → end 30.3 → 31.8 MiB (+5.0 %) with 2 arenas, 29.5 → 30.6 MiB (+3.5 %,
/// scrape p99 270 ms instead of 408 ms) with one.
pub fn tune_allocator() {
    // SAFETY: mallopt only changes allocator parameters; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 * 1024);
    }
}

/// Runs the daemon with `cfg` and the web configuration loaded from its `web_config_file`
/// (`web`) until SIGTERM or SIGINT. `reload` produces the configuration again (file + flags, as
/// at startup) on SIGHUP. Errors: attaching the programs, binding the listener, starting the
/// background tasks.
#[tokio::main]
pub async fn run<L>(cfg: Config, web: Option<WebConfig>, reload: L) -> anyhow::Result<()>
where
    L: Fn() -> Result<Config, ConfigError> + Send + Sync + 'static,
{
    crate::labels::set_cgroup_root(cfg.host_root.as_deref());
    crate::collect::cgroup_latency::set_max_per_device(cfg.cgroups.max_per_device);
    if let Some(r) = &cfg.host_root {
        info!(host_root = %r.display(), "host view: mount table, device nodes and cgroups read under this directory");
    }
    // Every disk gets its per-device slot before the programs attach: requests entering a
    // disk without one lack log classification and stall detection (bpf/devslots.rs).
    let disks = DiskView::default();
    let (mut probes, maps) = loader::attach(
        cfg.maps.inflight_entries,
        cfg.maps.stats_memory_mib,
        cfg.kernel_settings(),
        &disks,
    )?;
    if probes.info.mode == "raw_tp" {
        // observer-ebpf maps.rs `cgroup_latency`, `emit_slow`: left out of the raw_tp programs
        // (6.1's verifier limit).
        warn!(
            cgroups_latency = cfg.cgroups.latency,
            "programs attached as raw_tp (tp_btf refused or OBSERVER_ATTACH=raw_tp): slow requests name no file and [cgroups] latency records nothing; unset OBSERVER_ATTACH, or see the tp_btf error above"
        );
    }
    let request_probe = probes.request_probe.take().map(Arc::new);
    if let Some(log) = probes.kernel_log.take() {
        kernel_log::spawn_reader(log).context("polling the AYA_LOGS ring buffer")?;
    }
    let buckets = BucketMap::new(&cfg.histogram.buckets);
    let mut history = History::new(cfg.stalls.history_requests, cfg.stalls.history_episodes);
    history.exemplars.set_targets(buckets.targets());
    let state = Arc::new(AppState {
        maps,
        runtime: RwLock::new(ReloadableSettings {
            filter: DeviceFilter::new(&cfg.devices),
            buckets,
            classic_in_protobuf: cfg.histogram.classic_in_protobuf,
            settings: cfg.kernel_settings(),
            forget_after: cfg.devices.forget_after,
        }),
        info: probes.info.clone(),
        reaped: Reaped::default(),
        reaper: Mutex::new(Reaper::new(request_probe.clone())),
        reaper_passes: Default::default(),
        gone: Mutex::default(),
        request_probe,
        history: Mutex::new(history),
        windows: Mutex::new(HistogramWindows::default()),
        fslog: Arc::default(),
        http_rejected: Arc::default(),
        web: Arc::new(LiveWebConfig::new(web)),
        disks,
        process: ProcessMetrics::new(),
        scrape_buffer: Arc::default(),
        // Last: the fields above read from `probes` first.
        programs: Mutex::new(Some(probes)),
    });
    spawn_reaper_and_windows(state.clone());
    spawn_event_reader(state.clone())?;
    let fslog_state = state.clone();
    fslog::spawn(
        move |want| {
            // A mount changed the ranges: a disk made for it (a loop device over a file on
            // the new mount) gets its slot now, not at the next tick.
            let inv = fslog_state.disks.rescan();
            fslog_state
                .maps
                .dev_slots
                .lock()
                .expect("dev slots lock")
                .set_log_ranges(want, &inv)
        },
        state.fslog.clone(),
        fslog::Sources::for_host_root(cfg.host_root.as_deref()),
    )
    .context("starting the filesystem log discovery thread")?;
    let listener = tokio::net::TcpListener::bind(cfg.listen).await.with_context(|| {
        format!("cannot listen on {}: choose another address with --listen or `listen` in the config", cfg.listen)
    })?;
    info!(
        address = %listener.local_addr()?,
        header_read_timeout = ?cfg.http.header_read_timeout,
        max_connections = cfg.http.max_connections,
        max_requests = cfg.http.max_requests,
        max_uri_bytes = cfg.http.max_uri_bytes,
        "serving /metrics, /healthz and the API"
    );
    let local = listener.local_addr()?;
    let web_now = state.web.get();
    if let Some(w) = &web_now {
        info!(
            web_config_file = %w.path.display(),
            tls = w.tls.is_some(),
            client_auth = %w.client_auth,
            basic_auth_users = w.users.len(),
            "web config file in effect: its TLS and basic auth apply to every path, /healthz included"
        );
    }
    if let Some(warning) = web::exposure_warning(local, web_now.as_deref()) {
        warn!("{warning}");
    }
    service::spawn_reload_on_sighup(service::Reloader::new(reload, state.clone(), cfg.clone()))?;
    service::notify_ready(&format!("serving on {}", listener.local_addr()?));
    http::server::serve(
        listener,
        http::router(state.clone(), &cfg.http),
        &cfg.http,
        state.http_rejected.clone(),
        state.web.clone(),
        shutdown(),
    )
    .await;
    drop(state.programs.lock().expect("programs lock").take());
    info!("stopped; eBPF programs detached");
    Ok(())
}

/// Every second ([`devslots::RESCAN_INTERVAL`]): the disks rescanned for per-device slots and
/// for the API's known disks, the reaper pass, disks gone for `[devices] forget_after`
/// forgotten, then a histogram snapshot when one is due (every [`windows::INTERVAL_NS`], and
/// at once at startup).
fn spawn_reaper_and_windows(st: Arc<AppState>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(devslots::RESCAN_INTERVAL);
        loop {
            tick.tick().await;
            let st = st.clone();
            let _ = tokio::task::spawn_blocking(move || {
                // One scan of the disks for everything this tick does.
                let inv = st.disks.tick();
                st.maps
                    .dev_slots
                    .lock()
                    .expect("dev slots lock")
                    .rescan(&inv);
                {
                    let mut map = st.maps.inflight_rw.lock().expect("reaper lock");
                    st.reaper.lock().expect("reaper lock").reap(
                        &mut map,
                        st.maps.inflight_capacity,
                        &st.reaped,
                    );
                }
                let (filter, forget_after) = {
                    let rt = st.runtime.read().expect("runtime lock");
                    (rt.filter.clone(), rt.forget_after)
                };
                let now = monotonic_ns();
                st.gone.lock().expect("gone devices lock").sweep(
                    &st.disks,
                    &inv,
                    &mut st.maps.stats_rw.lock().expect("stats maps lock"),
                    now,
                    forget_after,
                    &st.reaped,
                );
                st.reaper_passes
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                let due = st.windows.lock().expect("windows lock").oldest().is_none()
                    || now % windows::INTERVAL_NS < 1_100_000_000;
                if due {
                    let snap = Snapshot::read(&st.maps, &st.reaped, &filter, &st.disks);
                    st.windows.lock().expect("windows lock").record(now, &snap);
                    drop(snap);
                    // Scrapes and snapshots allocate and free megabytes on several threads;
                    // give glibc's freed arena memory back every 10 s so RSS tracks what is
                    // kept, not the high-water mark of each thread's arena.
                    // SAFETY: malloc_trim only releases free heap memory.
                    unsafe { libc::malloc_trim(0) };
                }
            })
            .await;
        }
    });
}

/// Reads the `EVENTS` ring buffer whenever it is readable, into the history. Fails if the ring
/// buffer was already taken or cannot be polled.
fn spawn_event_reader(state: Arc<AppState>) -> anyhow::Result<()> {
    let ring = state
        .maps
        .events
        .lock()
        .expect("events lock")
        .take()
        .context("EVENTS ring buffer already taken")?;
    // SAFETY: the ring buffer owns its fd for as long as the AsyncFd lives.
    let mut fd = unsafe { tokio::io::unix::AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the EVENTS ring buffer: {e}"))?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else {
                return;
            };
            // Readiness is cleared before draining, never after: the kernel wakes the reader
            // only for a record committed when the reader had consumed everything before it
            // (kernel/bpf/ringbuf.c, adaptive wakeup), so a wakeup that arrived while we drained
            // and was then cleared would leave every later record unread (measured: 204 of
            // 1.9 M slow-request records stuck after a flood).
            guard.clear_ready();
            // In batches, releasing the history lock in between: under a flood the ring
            // refills as fast as it is read, and one drain holding the lock kept scrapes (which
            // read the history) waiting for seconds (measured 3.9 s).
            loop {
                let n = {
                    let ring = guard.get_inner_mut();
                    let mut history = state.history.lock().expect("history lock");
                    let mut n = 0;
                    while n < EVENT_BATCH {
                        let Some(item) = ring.next() else { break };
                        history.ingest(&item);
                        n += 1;
                    }
                    n
                };
                if n < EVENT_BATCH {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    });
    Ok(())
}

/// Ring-buffer records ingested per hold of the history lock.
const EVENT_BATCH: usize = 1024;

/// Resolves on SIGTERM or SIGINT, after telling the service manager (`STOPPING=1`).
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
