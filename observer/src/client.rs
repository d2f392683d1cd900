//! `observer stalls`, `observer report` and `observer top` ([`top`]): terminal clients of a
//! running daemon's API.

pub mod top;

use anyhow::{bail, Context, Result};

/// Query string from optional parameters.
fn query(params: &[(&str, &Option<String>)]) -> String {
    let parts: Vec<String> = params
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", urlencode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn get(url: &str, accept: &str) -> Result<String> {
    get_within(url, accept, std::time::Duration::from_secs(30))
}

/// `GET url` with header `Accept: accept`, giving up after `timeout`; the body, or an error
/// saying what the daemon answered or that it cannot be reached (and to check `--url`).
fn get_within(url: &str, accept: &str, timeout: std::time::Duration) -> Result<String> {
    match ureq::get(url).set("Accept", accept).timeout(timeout).call() {
        Ok(r) => Ok(r.into_string()?),
        Err(ureq::Error::Status(code, r)) => {
            let body = r.into_string().unwrap_or_default();
            bail!("{url}: HTTP {code}: {}", body.trim())
        }
        Err(e) => Err(e).with_context(|| format!("cannot reach the daemon at {url}: is `observer` running? (--url to point elsewhere)")),
    }
}

/// The filters of `observer stalls`, each a `/stalls` query parameter of the same name (its
/// syntax is the API's: docs/openapi.yaml).
#[derive(Debug, Default)]
pub struct StallsQuery {
    /// Only this device (kernel name).
    pub device: Option<String>,
    /// Only since this long ago (`30s`) or this Unix time (seconds).
    pub since: Option<String>,
    /// Only requests at least this slow / episodes at least this long (`200ms`).
    pub min: Option<String>,
    /// At most this many per list.
    pub limit: Option<String>,
    /// Only the slow request with this id (`<run>-<seq>`: an exemplar's `request_id`, the
    /// slow-request JSON's `id`).
    pub id: Option<String>,
}

/// Prints `/stalls` (text, or JSON with `json`). Errors: the daemon unreachable, or its answer
/// (HTTP 400 for a bad filter, 404 for an id it does not keep) with the daemon's reason.
pub fn stalls(url: &str, filters: &StallsQuery, json: bool) -> Result<()> {
    let q = query(&[
        ("device", &filters.device),
        ("since", &filters.since),
        ("min", &filters.min),
        ("limit", &filters.limit),
        ("id", &filters.id),
    ]);
    let body = get(
        &format!("{}/stalls{q}", url.trim_end_matches('/')),
        if json {
            "application/json"
        } else {
            "text/plain"
        },
    )?;
    print!("{body}");
    Ok(())
}

/// Prints biolatency-style histograms (power-of-two µs rows) per device, class and stage.
pub fn report(url: &str, device: Option<String>, since: Option<String>) -> Result<()> {
    let q = query(&[("device", &device), ("since", &since)]);
    let body = get(
        &format!("{}/histograms{q}", url.trim_end_matches('/')),
        "application/json",
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&body).context("daemon returned invalid JSON")?;
    let hists = v["histograms"].as_array().cloned().unwrap_or_default();
    println!(
        "window: {} .. {}  ({} histograms)",
        v["window_start"].as_str().unwrap_or("start"),
        v["now"].as_str().unwrap_or("?"),
        hists.len()
    );
    for h in hists {
        let mut rows = [0u64; 40];
        for b in h["buckets"].as_array().into_iter().flatten() {
            let lo_us = b[0].as_f64().unwrap_or(0.0) * 1e6;
            let row = if lo_us < 1.0 {
                0
            } else {
                (lo_us.log2().floor() as usize + 1).min(39)
            };
            rows[row] += b[2].as_u64().unwrap_or(0);
        }
        let max = *rows.iter().max().unwrap_or(&1).max(&1);
        println!(
            "\n{} {} [{}] stage={}  count={} p50={:.1}us p99={:.1}us p99.9={:.1}us",
            h["device"].as_str().unwrap_or("?"),
            h["op"].as_str().unwrap_or("?"),
            h["rwbs"].as_str().unwrap_or(""),
            h["stage"].as_str().unwrap_or("?"),
            h["count"],
            h["p50"].as_f64().unwrap_or(0.0) * 1e6,
            h["p99"].as_f64().unwrap_or(0.0) * 1e6,
            h["p999"].as_f64().unwrap_or(0.0) * 1e6,
        );
        println!("{:>24} : {:<10} distribution", "usecs", "count");
        let first = rows.iter().position(|c| *c > 0).unwrap_or(0);
        let last = rows.iter().rposition(|c| *c > 0).unwrap_or(0);
        for (i, c) in rows.iter().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = if i == 0 {
                (0u64, 1u64)
            } else {
                (1u64 << (i - 1), (1u64 << i) - 1)
            };
            let bar = "*".repeat(((*c as f64 / max as f64) * 40.0).round() as usize);
            println!("{:>10} -> {:<10} : {:<10} |{:<40}|", lo, hi, c, bar);
        }
    }
    Ok(())
}
