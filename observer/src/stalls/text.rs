//! The `/stalls` report as a table for a terminal (`observer stalls`, `GET /stalls` without
//! JSON).

use std::fmt::Write;

use super::{
    file::FileRecord,
    records::{InflightRequest, StallReport, Submitter},
};

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
        "{:<10} {:<7} {:>10} {:>10} {:<6} {:>12} {:>8} {:>3} {:>7} {:<16} {:<24} {:<24} FILE",
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
        "CGROUP",
        "OWNER"
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
    let _ = write!(
        o,
        "{:<10} {:<7} {:>10} {:>10} {:<6} {:>12} {:>8} ",
        device,
        s.stage,
        secs(s.age_seconds),
        secs(s.stage_seconds),
        s.class.rwbs,
        s.sector,
        s.bytes,
    );
    who_cols(
        o,
        s.requeues,
        &s.submitter,
        s.owner_cgroup.as_deref(),
        s.file.as_ref(),
    );
    for h in &s.held_by {
        stuck_row(o, h, depth + 1);
    }
}

/// The columns a stuck and a slow row end with (`RQ PID COMM CGROUP OWNER FILE`): requeues,
/// who submitted the request, the cgroup that owns it and the file it carries (`-` where
/// unknown); ends the line.
fn who_cols(
    o: &mut String,
    requeues: u8,
    s: &Submitter,
    owner_cgroup: Option<&str>,
    file: Option<&FileRecord>,
) {
    let _ = writeln!(
        o,
        "{:>3} {:>7} {:<16} {:<24} {:<24} {}",
        requeues,
        s.pid,
        s.comm,
        s.cgroup.as_deref().unwrap_or("-"),
        owner_cgroup.unwrap_or("-"),
        file_col(file)
    );
}

/// The FILE column: `<path> (ino N)` for a file's data (`direct: ` in front for direct I/O;
/// `ino N on M:m` when the path is unknown), else the kind (`metadata`, `anonymous`,
/// `kernel`), `-` for no data page.
fn file_col(file: Option<&FileRecord>) -> String {
    let Some(f) = file else {
        return "-".into();
    };
    let Some(ino) = f.inode else {
        return f.kind.into();
    };
    let prefix = if f.kind == "direct" { "direct: " } else { "" };
    match &f.path {
        Some(p) => format!("{prefix}{p} (ino {ino})"),
        None => format!(
            "{prefix}ino {ino} on {}",
            f.fs_device.as_deref().unwrap_or("?")
        ),
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
        "{:<13} {:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>8} {:>3} {:>3} {:>7} {:<16} {:<24} {:<24} FILE",
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
        "CGROUP",
        "OWNER"
    );
    for s in &r.slow {
        let _ = write!(
            o,
            "{:<13} {:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>8} {:>3} ",
            hhmmss(&s.time),
            s.device,
            s.class.rwbs,
            opt_secs(s.queue_seconds),
            opt_secs(s.device_seconds),
            secs(s.total_seconds),
            s.sector,
            s.bytes,
            s.merges,
        );
        who_cols(
            o,
            s.requeues,
            &s.submitter,
            s.owner_cgroup.as_deref(),
            s.file.as_ref(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        labels::ClassInfo,
        stalls::records::{Episode, SlowRequest},
    };

    fn submitter(pid: u32, comm: &str, cgroup: Option<&str>) -> Submitter {
        Submitter {
            pid,
            comm: comm.into(),
            cgroup_id: 0,
            cgroup: cgroup.map(Into::into),
        }
    }

    fn inflight(device: &str, stage: &'static str, owner: Option<&str>) -> InflightRequest {
        InflightRequest {
            device: device.into(),
            class: ClassInfo {
                op: "write",
                flags: vec![],
                rwbs: "WS".into(),
                ioprio_class: "be",
            },
            stage,
            age_seconds: 2.5,
            stage_seconds: 0.0125,
            since: "2026-12-02T11:00:00.000000Z".into(),
            sector: 34816,
            bytes: 4096,
            requeues: 1,
            submitter: submitter(42, "fio", Some("/system.slice/fio.service")),
            owner_cgroup_id: 0,
            owner_cgroup: owner.map(Into::into),
            file: None,
            upper: None,
            held_by: vec![],
        }
    }

    /// Every section with its rows, byte for byte.
    #[test]
    fn table() {
        let mut stuck = inflight("md0", "total", Some("/user.slice"));
        stuck.file = Some(FileRecord {
            kind: "data",
            inode: Some(12),
            fs_device: Some("9:0".into()),
            path: Some("/mnt/slow/slow.dat".into()),
        });
        let mut leg = inflight("loop0", "device", None);
        leg.held_by = vec![inflight("loop9", "queue", None)];
        stuck.held_by = vec![leg];
        let r = StallReport {
            now: "2026-12-02T11:00:02.500000Z".into(),
            stuck: vec![stuck],
            episodes: vec![Episode {
                device: "loop0".into(),
                kind: "device",
                start: "2026-12-02T11:00:00.250000Z".into(),
                end: None,
                duration_seconds: 2.25,
                ongoing: true,
                waiting: 3,
                classes: [("WS".to_string(), 3)].into(),
            }],
            slow: vec![SlowRequest {
                id: "1764865123-1".into(),
                time: "2026-12-02T10:59:59.125000Z".into(),
                device: "loop1".into(),
                class: ClassInfo {
                    op: "read",
                    flags: vec![],
                    rwbs: "R".into(),
                    ioprio_class: "be",
                },
                sector: 8,
                bytes: 65536,
                queue_seconds: None,
                device_seconds: Some(0.75),
                total_seconds: 1.5,
                merges: 15,
                requeues: 0,
                status: "ok".into(),
                submitter: submitter(0, "kworker/0:1", None),
                owner_cgroup_id: 7,
                owner_cgroup: Some("/app".into()),
                file: Some(FileRecord {
                    kind: "metadata",
                    inode: None,
                    fs_device: None,
                    path: None,
                }),
            }],
            dm_names: [("dm-0".to_string(), "vg0-data".to_string())].into(),
        };
        let want = concat!(
            "blkobs stalls at 2026-12-02T11:00:02.500000Z\n",
            "\n",
            "STUCK NOW: 1 request(s) in flight over threshold (oldest first)\n",
            "DEVICE     STAGE          AGE   IN STAGE RWBS         SECTOR    BYTES  RQ     PID COMM             CGROUP                   OWNER                    FILE\n",
            "md0        total       2.500s   12.500ms WS            34816     4096   1      42 fio              /system.slice/fio.service /user.slice              /mnt/slow/slow.dat (ino 12)\n",
            "└ loop0    device      2.500s   12.500ms WS            34816     4096   1      42 fio              /system.slice/fio.service -                        -\n",
            "  └ loop9  queue       2.500s   12.500ms WS            34816     4096   1      42 fio              /system.slice/fio.service -                        -\n",
            "\n",
            "STALL EPISODES: 1 (device = no completion while requests at device; dispatch = none dispatched while queued)\n",
            "DEVICE     KIND      START           DURATION  WAITING STATE    CLASSES\n",
            "loop0      device    11:00:00.250      2.250s        3 ONGOING  WSx3\n",
            "\n",
            "SLOW REQUESTS: 1 (newest first)\n",
            "TIME          DEVICE     RWBS        QUEUE     DEVICE      TOTAL       SECTOR    BYTES MRG  RQ     PID COMM             CGROUP                   OWNER                    FILE\n",
            "10:59:59.125  loop1      R               -  750.000ms     1.500s            8    65536  15   0       0 kworker/0:1      -                        /app                     metadata\n",
            "\n",
            "DEVICE-MAPPER NAMES (stage total: bio-based, no queue/device split)\n",
            "dm-0       vg0-data\n",
        );
        assert_eq!(render_text(&r), want);
    }
}
