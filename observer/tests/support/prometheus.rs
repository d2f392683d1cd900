//! Debian's Prometheus (2.42) as a witness: a server scraping one daemon every second, and its
//! HTTP API.

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::Value;

use super::{free_port, ChildGuard, TempDir};

/// Prometheus HTTP API GET (`base` + `path` with `params`): the `data` of a success; the
/// error type and message of a failure (read from the JSON body of a 4xx/5xx too), or the
/// transport error.
pub fn prom_get(base: &str, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
    let mut req = ureq::get(&format!("{base}{path}")).timeout(Duration::from_secs(15));
    for (k, v) in params {
        req = req.query(k, v);
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("transport: {e}")),
    };
    let mut s = String::new();
    resp.into_reader()
        .read_to_string(&mut s)
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&s).map_err(|e| format!("not JSON ({e}): {s}"))?;
    if v["status"] != "success" {
        return Err(format!("{}: {}", v["errorType"], v["error"]));
    }
    Ok(v["data"].clone())
}

/// Debian's Prometheus scraping the daemon on 127.0.0.1:`port` every second (rules evaluated
/// every second), with `rules` loaded if given and its own command-line `flags` (e.g.
/// `--enable-feature=native-histograms`); its config, TSDB and log under `dir`, named after
/// `name` (so one test can run several). Returns the process, its base URL and its log file.
pub fn prometheus(
    dir: &TempDir,
    name: &str,
    port: u16,
    rules: Option<&Path>,
    flags: &[&str],
) -> (ChildGuard, String, PathBuf) {
    let pport = free_port();
    let cfg = dir.join(&format!("{name}.yml"));
    let rule_files = rules.map_or(String::new(), |r| {
        format!("rule_files: ['{}']\n", r.display())
    });
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rule_files}scrape_configs:\n  - job_name: blkobs\n    \
             scrape_interval: 1s\n    scrape_timeout: 1s\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join(&format!("{name}-data")).display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{pport}"))
        .arg("--storage.tsdb.retention.time=1h")
        .args(flags);
    let log = dir.join(&format!("{name}.log"));
    let prom = ChildGuard::spawn(cmd, "prometheus", &log);
    (prom, format!("http://127.0.0.1:{pport}"), log)
}
