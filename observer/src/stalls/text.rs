//! The `/stalls` report as a table for a terminal (`observer stalls`, `GET /stalls` without
//! JSON).

use std::fmt::Write;

use super::records::{InflightRequest, StallReport};

fn secs(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.3}s")
    } else {
        format!("{:.3}ms", v * 1e3)
    }
}

fn opt_secs(v: Option<f64>) -> String {
    v.map(secs).unwrap_or_else(|| "-".into())
}

fn hhmmss(rfc: &str) -> &str {
    rfc.get(11..23).unwrap_or(rfc)
}

/// The report as a table for a terminal: three sections (stuck, episodes, slow), each with a
/// header line only when it has rows.
pub fn render_text(r: &StallReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "blkobs stalls at {}\n", r.now);
    stuck_table(&mut o, r);
    episodes_table(&mut o, r);
    slow_table(&mut o, r);
    if !r.dm_names.is_empty() {
        let _ = writeln!(
            o,
            "\nDEVICE-MAPPER NAMES (stage total: bio-based, no queue/device split)"
        );
        for (dev, name) in &r.dm_names {
            let _ = writeln!(o, "{dev:<10} {name}");
        }
    }
    o
}

fn stuck_table(o: &mut String, r: &StallReport) {
    let _ = writeln!(
        o,
        "STUCK NOW: {} request(s) in flight over threshold (oldest first)",
        r.stuck.len()
    );
    if r.stuck.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "{:<10} {:<7} {:>10} {:>10} {:<6} {:>12} {:>8} {:>3} {:>7} {:<16} {:<24} OWNER",
        "DEVICE",
        "STAGE",
        "AGE",
        "IN STAGE",
        "RWBS",
        "SECTOR",
        "BYTES",
        "RQ",
        "PID",
        "COMM",
        "CGROUP"
    );
    for s in &r.stuck {
        stuck_row(o, s, 0);
    }
}

/// One stuck I/O, then the I/Os below that hold it, indented (`└` and the disk below).
fn stuck_row(o: &mut String, s: &InflightRequest, depth: usize) {
    let device = if depth == 0 {
        s.device.clone()
    } else {
        format!("{}└ {}", " ".repeat(2 * (depth - 1)), s.device)
    };
    let _ = writeln!(
        o,
        "{:<10} {:<7} {:>10} {:>10} {:<6} {:>12} {:>8} {:>3} {:>7} {:<16} {:<24} {}",
        device,
        s.stage,
        secs(s.age_seconds),
        secs(s.stage_seconds),
        s.class.rwbs,
        s.sector,
        s.bytes,
        s.requeues,
        s.submitter.pid,
        s.submitter.comm,
        s.submitter.cgroup.as_deref().unwrap_or("-"),
        s.owner_cgroup.as_deref().unwrap_or("-")
    );
    for h in &s.held_by {
        stuck_row(o, h, depth + 1);
    }
}

fn episodes_table(o: &mut String, r: &StallReport) {
    let _ = writeln!(
        o,
        "\nSTALL EPISODES: {} (device = no completion while requests at device; dispatch = none dispatched while queued)",
        r.episodes.len()
    );
    if r.episodes.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "{:<10} {:<9} {:<13} {:>10} {:>8} {:<8} CLASSES",
        "DEVICE", "KIND", "START", "DURATION", "WAITING", "STATE"
    );
    for e in &r.episodes {
        let classes: Vec<String> = e.classes.iter().map(|(k, v)| format!("{k}x{v}")).collect();
        let state = if e.ongoing { "ONGOING" } else { "ended" };
        let _ = writeln!(
            o,
            "{:<10} {:<9} {:<13} {:>10} {:>8} {:<8} {}",
            e.device,
            e.kind,
            hhmmss(&e.start),
            secs(e.duration_seconds),
            e.waiting,
            state,
            classes.join(" ")
        );
    }
}

fn slow_table(o: &mut String, r: &StallReport) {
    let _ = writeln!(o, "\nSLOW REQUESTS: {} (newest first)", r.slow.len());
    if r.slow.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "{:<13} {:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>8} {:>3} {:>3} {:>7} {:<16} {:<24} OWNER",
        "TIME",
        "DEVICE",
        "RWBS",
        "QUEUE",
        "DEVICE",
        "TOTAL",
        "SECTOR",
        "BYTES",
        "MRG",
        "RQ",
        "PID",
        "COMM",
        "CGROUP"
    );
    for s in &r.slow {
        let _ = writeln!(
            o,
            "{:<13} {:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>8} {:>3} {:>3} {:>7} {:<16} {:<24} {}",
            hhmmss(&s.time),
            s.device,
            s.class.rwbs,
            opt_secs(s.queue_seconds),
            opt_secs(s.device_seconds),
            secs(s.total_seconds),
            s.sector,
            s.bytes,
            s.merges,
            s.requeues,
            s.submitter.pid,
            s.submitter.comm,
            s.submitter.cgroup.as_deref().unwrap_or("-"),
            s.owner_cgroup.as_deref().unwrap_or("-")
        );
    }
}
