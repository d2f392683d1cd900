//! `cargo xtask bench --exposition`: the size of one `/metrics` scrape with 1 and N busy disks,
//! in the text format and in the protobuf format with native histograms, with and without the
//! classic buckets (`[histogram] classic_in_protobuf`). Series and bytes, no timing.
use std::{
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    fio::scrape_load,
    guards::{sleep, LoopDev, Proc},
    tracer::{free_port, http_get},
};

/// What Prometheus 2.42 sends with `--enable-feature=native-histograms`.
const PROTOBUF_ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// The histogram families that have native buckets in protobuf.
const NATIVE_FAMILIES: [&str; 2] = [
    "blkobs_request_latency_seconds",
    "blkobs_request_size_bytes",
];

/// One scrape's sizes.
#[derive(Debug, Default, Clone)]
pub struct Sizes {
    /// Disks busy before the scrape.
    pub busy: u32,
    /// Text format: bytes, and series (sample lines).
    pub text_bytes: usize,
    pub text_series: usize,
    /// Histogram series with native buckets (latency and request size).
    pub native_histograms: usize,
    /// Protobuf bytes with classic buckets (`classic_in_protobuf = true`) and without.
    pub proto_both_bytes: usize,
    pub proto_native_bytes: usize,
}

impl Sizes {
    /// Series Prometheus stores from the protobuf scrape with native buckets only (or with both,
    /// on 2.x, which then ingests the native ones only; on 3.x unless
    /// `always_scrape_classic_histograms`): each native histogram one series instead of its
    /// `_bucket`, `_sum` and `_count` series.
    pub fn native_series(&self, classic_lines: usize) -> usize {
        self.text_series - classic_lines + self.native_histograms
    }
}

/// `GET path` with `Accept: accept` over HTTP/1.0: the body, as bytes.
fn get(port: u16, path: &str, accept: &str) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("malformed HTTP response")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    ensure!(
        head.split(' ').nth(1) == Some("200"),
        "GET {path}: {}",
        head.lines().next().unwrap_or("")
    );
    Ok(buf[end + 4..].to_vec())
}

/// Text sample lines, and those of the native-capable histograms (`_bucket`, `_sum`,
/// `_count`), and how many such histogram series (`_count` lines).
fn count_text(text: &str) -> (usize, usize, usize) {
    let (mut all, mut classic, mut hists) = (0, 0, 0);
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        all += 1;
        let name = l.split(['{', ' ']).next().unwrap_or("");
        for f in NATIVE_FAMILIES {
            if let Some(suffix) = name.strip_prefix(f) {
                if ["_bucket", "_sum", "_count"].contains(&suffix) {
                    classic += 1;
                    hists += usize::from(suffix == "_count");
                }
            }
        }
    }
    (all, classic, hists)
}

/// Runs the phase: `n` loop devices under `dir`, the release daemon (exporting those only)
/// started twice (classic buckets in protobuf on, then off), each scraped after 1 and then all `n` devices were busy
/// for 5 s (fio random reads and writes, fsyncs on every other device). Returns the markdown
/// table.
pub fn run(root: &Path, dir: &Path, n: u32, scheduler: &str) -> Result<String> {
    let mut loops = Vec::new();
    for i in 0..n {
        loops.push(LoopDev::create(
            &dir.join(format!("expo{i}.img")),
            64,
            scheduler,
        )?);
    }
    let devs: Vec<&str> = loops.iter().map(|l| l.dev.as_str()).collect();
    let steps = [1, n];
    let mut sizes: Vec<Sizes> = Vec::new();
    let mut classic_lines = Vec::new();
    for (pass, classic) in [true, false].into_iter().enumerate() {
        let cfg = dir.join(format!("expo-{classic}.toml"));
        // Only the bench's devices: the host's other disks would make the passes differ.
        let include: Vec<String> = loops.iter().map(|l| format!("{:?}", l.name())).collect();
        std::fs::write(
            &cfg,
            format!(
                "[devices]\ninclude = [{}]\n[histogram]\nclassic_in_protobuf = {classic}\n",
                include.join(", ")
            ),
        )?;
        let port = free_port()?;
        let mut daemon = Proc::spawn(
            "observer (exposition)",
            Command::new(root.join("target/release/observer"))
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .arg("--config")
                .arg(&cfg)
                .env_remove("OBSERVER_CONFIG")
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            libc::SIGTERM,
        )?;
        let end = Instant::now() + Duration::from_secs(30);
        while http_get(port, "/healthz").is_err() {
            daemon.ensure_running()?;
            ensure!(
                Instant::now() < end,
                "observer did not answer /healthz in 30 s"
            );
            sleep(Duration::from_millis(50))?;
        }
        for (step, &busy) in steps.iter().enumerate() {
            let status = scrape_load(&devs[..busy as usize], 5).status()?;
            ensure!(status.success(), "fio: {status}");
            sleep(Duration::from_secs(1))?;
            let text = String::from_utf8(get(port, "/metrics", "text/plain")?)?;
            let proto = get(port, "/metrics", PROTOBUF_ACCEPT)?;
            let (lines, classic_of_native, hists) = count_text(&text);
            if pass == 0 {
                sizes.push(Sizes {
                    busy,
                    text_bytes: text.len(),
                    text_series: lines,
                    native_histograms: hists,
                    proto_both_bytes: proto.len(),
                    ..Sizes::default()
                });
                classic_lines.push(classic_of_native);
            } else {
                sizes[step].proto_native_bytes = proto.len();
            }
            eprintln!(
                "[bench] exposition: {busy} busy, classic_in_protobuf={classic}: text {} B, protobuf {} B",
                text.len(),
                proto.len()
            );
        }
        daemon.stop();
    }
    let mut t = String::from(
        "| busy disks | text: series | text: bytes | protobuf native + classic: bytes | protobuf native only: bytes | series stored, native (2.x; 3.x default) | series stored, native + classic (3.x `always_scrape_classic_histograms`) | native histogram series |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (s, c) in sizes.iter().zip(&classic_lines) {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            s.busy,
            s.text_series,
            s.text_bytes,
            s.proto_both_bytes,
            s.proto_native_bytes,
            s.native_series(*c),
            s.text_series + s.native_histograms,
            s.native_histograms
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_classic_lines_of_native_families() {
        let text = "# TYPE blkobs_request_latency_seconds histogram\n\
            blkobs_request_latency_seconds_bucket{le=\"1\"} 1\n\
            blkobs_request_latency_seconds_bucket{le=\"+Inf\"} 1\n\
            blkobs_request_latency_seconds_sum 0.5\n\
            blkobs_request_latency_seconds_count 1\n\
            blkobs_request_merged_bios_count 1\n\
            blkobs_requests_total{device=\"a\"} 3\n";
        let (all, classic, hists) = count_text(text);
        assert_eq!((all, classic, hists), (6, 4, 1));
        let s = Sizes {
            text_series: all,
            native_histograms: hists,
            ..Sizes::default()
        };
        assert_eq!(s.native_series(classic), 3);
    }
}
