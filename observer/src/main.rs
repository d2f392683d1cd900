//! `observer`: the command line. Parses it, merges the config file with the flags, and turns
//! the daemon's or a client's outcome into the exit code (0 ok, 1 failure, 2 bad configuration).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::{CommandFactory, Parser};
use observer::{
    client,
    config::{Config, ConfigError},
    daemon,
};

/// Live block I/O latency observer: per-device, per-class, per-stage latency histograms from
/// eBPF, served as Prometheus metrics.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Without a command: run the daemon.
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML configuration file (see docs/src/reference/config.md). Flags override it.
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
    /// Close connections that have not sent a complete request header after this long (e.g.
    /// 10s). Overrides `http.header_read_timeout`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    header_read_timeout: Option<std::time::Duration>,
    /// Most HTTP connections held at once; more are closed at once. Overrides
    /// `http.max_connections`.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Most /metrics and API requests served at once; more get 503. Overrides
    /// `http.max_requests`.
    #[arg(long, value_name = "N")]
    max_requests: Option<usize>,
    /// Longest request target (path and query, bytes); longer get 414. Overrides
    /// `http.max_uri_bytes`.
    #[arg(long, value_name = "BYTES")]
    max_uri_bytes: Option<usize>,
    /// TLS and basic auth for every endpoint: a YAML file in the format of Prometheus
    /// exporter-toolkit's web configuration file (tls_server_config, basic_auth_users; see
    /// docs/src/operations.md "Securing the endpoint"). Overrides `web_config_file`.
    #[arg(
        long = "web.config.file",
        value_name = "PATH",
        env = "OBSERVER_WEB_CONFIG_FILE"
    )]
    web_config_file: Option<PathBuf>,
    /// Label blkobs_requests_total and blkobs_bytes_total with the cgroup that owns the I/O.
    /// Sets `cgroups.label`.
    #[arg(long)]
    cgroup_label: bool,
    /// Check the configuration (and the web config file) and exit.
    #[arg(long)]
    check_config: bool,
}

/// Clients of a running daemon.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Record one disk's block events into blktrace's binary files (`<dev>.blktrace.<cpu>`)
    /// for blkparse, btt and iowatcher, from eBPF (no debugfs). Runs beside a daemon.
    Trace {
        /// The disk's kernel name, e.g. sda, nvme0n1, loop0 (a whole disk).
        #[arg(long)]
        device: String,
        /// How long to record (seconds).
        #[arg(long, value_name = "SECONDS")]
        duration: f64,
        /// Where to write the files.
        #[arg(long, value_name = "DIR", default_value = ".")]
        output_dir: PathBuf,
        /// Ring buffer size (MiB, a power of two); raise it if events are dropped.
        #[arg(long, value_name = "MIB", default_value_t = 8)]
        ring_mib: u32,
    },
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
        /// Only the slow request with this id (an exemplar's `request_id`, the JSON's `id`).
        #[arg(long)]
        id: Option<String>,
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
    /// Live view per device and op: IOPS, MB/s, queue (Q2D) and device (D2C) p50/p99, requests
    /// in flight, stuck requests (GET /counters, /histograms, /stalls). Keys: q quit, s sort
    /// column, r reverse, Up/Down select, Enter the selected device's slow requests.
    Top {
        /// The daemon's address.
        #[arg(long, default_value = "http://127.0.0.1:9617")]
        url: String,
        /// Seconds between two reads of the daemon: rates and percentiles cover this interval.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Print one plain-text frame (two reads --interval apart) and exit (scripts, tests;
        /// needs no terminal).
        #[arg(long)]
        once: bool,
        /// Only this device (kernel name; repeatable).
        #[arg(long)]
        device: Vec<String>,
    },
    /// Print the shell completion script for SHELL, e.g.
    /// `observer completions bash > /etc/bash_completion.d/observer` (the .deb installs them).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (observer.1, observer-stalls.1, ...) into DIR (the .deb installs
    /// them).
    Manpages {
        /// Where to write them (created if missing).
        dir: PathBuf,
    },
}

/// `observer completions`: the script clap_complete generates from this file's definition.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "observer",
        &mut std::io::stdout(),
    );
    Ok(())
}

/// `observer manpages`: one page per command, generated by clap_mangen from this definition.
fn manpages(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .and_then(|()| clap_mangen::generate_to(Cli::command(), dir))
        .map_err(|e| anyhow::anyhow!("writing the man pages into {}: {e}", dir.display()))
}

/// The configuration file (if any) with the flags applied over it, validated.
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
    if let Some(w) = &cli.web_config_file {
        cfg.web_config_file = Some(w.clone());
    }
    if let Some(b) = &cli.buckets {
        cfg.histogram.buckets = b.clone();
    }
    if let Some(t) = cli.header_read_timeout {
        cfg.http.header_read_timeout = t;
    }
    if cli.cgroup_label {
        cfg.cgroups.label = true;
    }
    if let Some(n) = cli.max_connections {
        cfg.http.max_connections = n;
    }
    if let Some(n) = cli.max_requests {
        cfg.http.max_requests = n;
    }
    if let Some(n) = cli.max_uri_bytes {
        cfg.http.max_uri_bytes = n;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// True when stderr is the journal's stream (systemd sets `JOURNAL_STREAM=<dev>:<ino>` of it,
/// systemd.exec(5)): the journal stamps every line itself.
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into the buffer it is given; read only on success.
    if unsafe { libc::fstat(libc::STDERR_FILENO, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    v.to_str() == Some(&format!("{}:{}", st.st_dev, st.st_ino))
}

/// `observer trace`: records, then prints the summary (drops also as a warning).
fn trace(device: String, duration: f64, output_dir: PathBuf, ring_mib: u32) -> anyhow::Result<()> {
    let duration = std::time::Duration::try_from_secs_f64(duration).map_err(|_| {
        anyhow::anyhow!("--duration {duration}: give a number of seconds, e.g. 10 or 2.5")
    })?;
    if !ring_mib.is_power_of_two() {
        anyhow::bail!("--ring-mib {ring_mib}: give a power of two, e.g. 8 or 64");
    }
    let opts = observer::trace::Options {
        device,
        duration,
        output_dir,
        ring_bytes: ring_mib << 20,
    };
    let summary = observer::trace::run(&opts, |p| {
        eprintln!(
            "tracing {} for {:?} ({})",
            opts.device, opts.duration, p.mode
        )
    })?;
    print!("{}", observer::trace::render(&summary, &opts.device));
    if summary.dropped > 0 {
        tracing::warn!(
            dropped = summary.dropped,
            "events were lost: the ring buffer was full; give a larger --ring-mib"
        );
    }
    if summary.skipped > 0 {
        tracing::warn!(
            skipped = summary.skipped,
            "events were lost: the kernel skipped the trace programs for them (an interrupt's \
             event inside the same program on that CPU); the files miss them"
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OBSERVER_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    if stderr_is_journal() {
        logs.without_time().init();
    } else {
        logs.init();
    }
    let cli = Cli::parse();
    if let Some(cmd) = cli.command {
        // A client piped into `head` should end quietly, like other CLI tools.
        // SAFETY: restores the default disposition of one signal; no handler is involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let result = match cmd {
            Command::Completions { shell } => completions(shell),
            Command::Manpages { dir } => manpages(&dir),
            Command::Stalls {
                url,
                device,
                since,
                min,
                limit,
                id,
                json,
            } => client::stalls(
                &url,
                &client::StallsQuery {
                    device,
                    since,
                    min,
                    limit,
                    id,
                },
                json,
            ),
            Command::Trace {
                device,
                duration,
                output_dir,
                ring_mib,
            } => trace(device, duration, output_dir, ring_mib),
            Command::Report { url, device, since } => client::report(&url, device, Some(since)),
            Command::Top {
                url,
                interval,
                once,
                device,
            } => match std::time::Duration::try_from_secs_f64(interval) {
                Ok(interval) => client::top::run(client::top::Options {
                    url,
                    interval,
                    once,
                    devices: device,
                }),
                Err(_) => Err(anyhow::anyhow!(
                    "--interval {interval}: give a number of seconds, e.g. 2 or 0.5"
                )),
            },
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let (cfg, web) = match load_config(&cli).and_then(|c| Ok((c.load_web_config()?, c))) {
        Ok((web, c)) => (c, web),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    // The daemon only (not the client commands): before any thread exists.
    daemon::tune_allocator();
    match daemon::run(cfg, web, move || load_config(&cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated part of docs/src/reference/cli.md: every command's `--help`, as printed.
    fn reference() -> String {
        let mut cli = Cli::command();
        cli.build();
        let mut s = format!("### `observer`\n\n```text\n{}```\n", cli.render_long_help());
        for sub in cli.get_subcommands_mut().filter(|c| c.get_name() != "help") {
            let name = sub.get_name().to_string();
            let help = sub.render_long_help();
            s += &format!("\n### `observer {name}`\n\n```text\n{help}```\n");
        }
        s
    }

    /// The CLI reference is the definition's own help text: a flag added, renamed or described
    /// anew fails here until the page is regenerated.
    #[test]
    fn cli_reference_is_the_help_text() {
        const MARK: &str = "<!-- Generated from observer/src/main.rs by `BLKOBS_WRITE_DOCS=1 cargo test -p observer --bin observer cli_reference`: do not edit below. -->\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/reference/cli.md");
        let page = std::fs::read_to_string(path).unwrap();
        let (head, generated) = page
            .split_once(MARK)
            .unwrap_or_else(|| panic!("{path} lacks the line {MARK:?}"));
        let want = reference();
        if std::env::var_os("BLKOBS_WRITE_DOCS").is_some() {
            std::fs::write(path, format!("{head}{MARK}\n{want}")).unwrap();
            return;
        }
        assert!(
            generated.trim_start() == want,
            "{path} is not the CLI's help text: regenerate it with \
             BLKOBS_WRITE_DOCS=1 cargo test -p observer --bin observer cli_reference"
        );
    }

    /// Every command has a man page and completions name every command.
    #[test]
    fn man_pages_and_completions_cover_every_command() {
        let dir = std::env::temp_dir().join(format!("blkobs-man-{}", std::process::id()));
        manpages(&dir).unwrap();
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "observer",
            &mut bash,
        );
        let bash = String::from_utf8(bash).unwrap();
        for sub in Cli::command().get_subcommands() {
            let page = dir.join(format!("observer-{}.1", sub.get_name()));
            let text = std::fs::read_to_string(&page).unwrap_or_default();
            assert!(
                text.contains(&format!(".TH observer-{} 1", sub.get_name())),
                "{}: no man page",
                page.display()
            );
            assert!(
                bash.contains(sub.get_name()),
                "bash completion lacks {}",
                sub.get_name()
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
