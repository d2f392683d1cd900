//! A configuration running: the tracer process (observer-floor, biolatency, the observer
//! daemon) started and waited for, and its /metrics scraped.
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    bpftool::progs_of,
    guards::{sleep, Proc},
    setup::{Config, Env},
};

/// A running configuration: the tracer process (none when untraced) and its program ids.
pub struct Running {
    pub proc: Option<Proc>,
    pub port: u16,
    pub progs: Vec<u32>,
    pub scraper: Option<Scraper>,
}

impl Running {
    pub fn start(env: &Env, config: Config, tag: &str) -> Result<Self> {
        let log = |n: &str| -> Result<std::fs::File> {
            Ok(std::fs::File::create(
                env.logs.join(format!("{n}-{tag}.log")),
            )?)
        };
        let mut port = 0;
        let proc = match config {
            Config::Untraced => None,
            Config::Floor => Some(start_floor(
                env,
                "observer-floor",
                &[],
                &env.logs.join(format!("floor-{tag}.log")),
            )?),
            Config::Biolatency => Some(Proc::spawn(
                "biolatency",
                Command::new(&env.biolatency)
                    .args(["-Q", "-D", "-F"])
                    .stdout(Stdio::null())
                    .stderr(log("biolatency")?),
                libc::SIGINT,
            )?),
            Config::Observer | Config::Baseline => {
                port = free_port()?;
                // Both daemons alike: the default configuration (no config file from the
                // environment), listening on a free port.
                let mut p = Proc::spawn(
                    config.label(),
                    Command::new(env.daemon_bin(config)?)
                        .args(["--listen", &format!("127.0.0.1:{port}")])
                        .env_remove("OBSERVER_CONFIG")
                        .env_remove("OBSERVER_WEB_CONFIG_FILE")
                        .stdout(Stdio::null())
                        .stderr(log(config.name())?),
                    libc::SIGTERM,
                )?;
                // It attaches before it listens: /healthz answering means attached.
                let end = Instant::now() + Duration::from_secs(30);
                while http_get(port, "/healthz").is_err() {
                    p.ensure_running()?;
                    ensure!(
                        Instant::now() < end,
                        "{} did not answer /healthz in 30 s",
                        config.label()
                    );
                    sleep(Duration::from_millis(50))?;
                }
                Some(p)
            }
        };
        // Wait for the programs to show up (biolatency has no ready signal), then settle.
        let mut progs = Vec::new();
        if let Some(p) = &proc {
            let want = match config {
                Config::Biolatency => 3,
                _ => 7,
            };
            let end = Instant::now() + Duration::from_secs(30);
            loop {
                progs = progs_of(p.pid())?;
                if progs.len() >= want {
                    break;
                }
                ensure!(
                    Instant::now() < end,
                    "{}: only {} of {want} programs loaded after 30 s",
                    config.label(),
                    progs.len()
                );
                sleep(Duration::from_millis(100))?;
            }
        }
        sleep(Duration::from_millis(500))?;
        let mut r = Self {
            proc,
            port,
            progs,
            scraper: None,
        };
        if config.is_daemon() {
            r.scraper = Some(Scraper::start(port, Duration::from_secs(5)));
        }
        r.ensure_running()?;
        Ok(r)
    }

    pub fn ensure_running(&mut self) -> Result<()> {
        if let Some(p) = &mut self.proc {
            p.ensure_running()?;
        }
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.scraper.take() {
            s.stop();
        }
    }
}

/// Starts `observer-floor` with `args` and waits for the "ready" line it prints once its
/// programs are attached; its stderr goes to `log`.
pub fn start_floor(env: &Env, what: &'static str, args: &[&str], log: &Path) -> Result<Proc> {
    let mut p = Proc::spawn(
        what,
        Command::new(env.root.join("target/release/observer-floor"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?),
        libc::SIGTERM,
    )?;
    let mut line = String::new();
    BufReader::new(
        p.child
            .stdout
            .take()
            .with_context(|| format!("{what} stdout"))?,
    )
    .read_line(&mut line)?;
    ensure!(
        line.starts_with("ready"),
        "{what} failed (see {}): {line:?}",
        log.display()
    );
    Ok(p)
}

/// Scrapes /metrics periodically in a thread (a Prometheus stand-in), so daemon CPU includes it.
pub struct Scraper {
    pub stop: Arc<AtomicBool>,
    pub handle: thread::JoinHandle<()>,
}

impl Scraper {
    pub fn start(port: u16, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            let mut next = Instant::now() + every;
            while !s.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    let _ = http_get(port, "/metrics");
                    next += every;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        Self { stop, handle }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.handle.join();
    }
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// GET over HTTP/1.0 (no chunking; the server closes). Returns the body.
pub fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    ensure!(
        head.starts_with("HTTP/1.") && head.split(' ').nth(1) == Some("200"),
        "GET {path}: {}",
        head.lines().next().unwrap_or("")
    );
    Ok(body.to_string())
}
