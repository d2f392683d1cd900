//! `observer top` against a running daemon: the plain-text frame's IOPS against
//! /proc/diskstats over the same run, and the live view driven in tmux (rows, the sort key,
//! the slow-requests key on a held write, `q` restoring the terminal).

mod support;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use support::*;

/// How far the busier disk's reads in `observer top`'s interval (IOPS × interval) may be
/// from its /proc/diskstats reads: the rounding of the IOPS column to a whole number,
/// 0.5 requests/s × the interval (docs/src/reference/cli.md#observer-top-the-live-view).
const IOPS_ROUNDING: f64 = 0.5;

/// How far `observer top`'s D2C p50 of one request may be from that request's own device
/// time: the width of a kernel bucket, at most 12.5 % of its lower edge (docs/src/concepts/classes.md#buckets).
const D2C_BUCKET: f64 = 0.125;

/// A background process killed (by its pid) and reaped on drop.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// fio reading `dev` at `iops` (4 KiB direct random reads): for up to 2 minutes, or `size`
/// (each 4 KiB block of it once) when given.
fn fio_reads_cmd(dev: &str, iops: u32, size: Option<&str>) -> Command {
    let mut c = Command::new("fio");
    c.args([
        "--name=blkobs-top",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=psync",
        // One process (jobs as threads): killing it by its pid ends the job too.
        "--thread",
        &format!("--rate_iops={iops}"),
        "--output=/dev/null",
    ]);
    match size {
        Some(size) => c.arg(format!("--size={size}")),
        None => c.args(["--time_based", "--runtime=120"]),
    };
    c.stdout(Stdio::null());
    c
}

fn fio_reads(dev: &str, iops: u32) -> Bg {
    Bg(fio_reads_cmd(dev, iops, None)
        .spawn()
        .expect("starting fio"))
}

/// A tmux server of its own (socket `-L`), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("running tmux");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "top"];
        a.extend_from_slice(keys);
        self.cmd(&a);
    }

    /// Polls the screen every 100 ms until `ok` holds; panics with the last screen after `t`.
    fn wait(&self, t: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + t;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < until, "{what}: not within {t:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The cells of `device`'s row of `op` in a frame (the selection mark `>` dropped), if shown.
fn row<'a>(screen: &'a str, device: &str, op: &str) -> Option<(usize, Vec<&'a str>)> {
    screen.lines().enumerate().find_map(|(i, l)| {
        let mut f: Vec<&str> = l.split_whitespace().collect();
        if let Some(first) = f.first_mut() {
            *first = first.trim_start_matches('>');
        }
        f.retain(|c| !c.is_empty());
        (f.len() == 11 && f[0] == device && f[1] == op).then_some((i, f))
    })
}

/// The device of the selected row (marked `>`).
fn selected(screen: &str) -> Option<String> {
    screen
        .lines()
        .find(|l| l.trim_start().starts_with('>'))
        .and_then(|l| {
            l.trim_start()
                .trim_start_matches('>')
                .split_whitespace()
                .next()
        })
        .map(String::from)
}

#[test]
fn top_rows_sort_slow_requests_and_quit() {
    if !require_root("top_rows_sort_slow_requests_and_quit")
        || !require_tool("tmux", "apt-get install tmux")
    {
        return;
    }
    let daemon = Daemon::start(&[]);
    let url = format!("http://{}", daemon.addr);
    let plain = LoopDev::new(64, "none");
    let slow = SlowDisk::new(64, "none");
    // The busier disk gets the name that sorts later, so sorting by DEVICE reorders the rows.
    let (busy, calm) = if plain.name > slow.name {
        (plain.name.clone(), slow.name.clone())
    } else {
        (slow.name.clone(), plain.name.clone())
    };
    let path = |n: &str| format!("/dev/{n}");
    let mut fio_calm = Some(fio_reads(&path(&calm), 40));
    std::thread::sleep(Duration::from_secs(2));

    // One plain-text frame over 8 s, the busier disk read 800 times (4 KiB each, 400/s) from
    // 2 s after top started: all inside top's interval, so its reads there (IOPS × interval)
    // are the disk's /proc/diskstats reads over the whole run.
    let bin = observer_bin();
    let before = diskstats(&busy).reads;
    let top = Command::new(&bin)
        .args(["top", "--once", "--interval", "8", "--url", &url])
        .args(["--device", &busy, "--device", &calm])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let fio = fio_reads_cmd(&path(&busy), 400, Some("3200k"))
        .status()
        .unwrap();
    assert!(fio.success());
    let out = top.wait_with_output().unwrap();
    let witness = diskstats(&busy).reads - before;
    let frame = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    eprintln!("{frame}");
    let (_, cells) = row(&frame, &busy, "read").unwrap_or_else(|| panic!("no {busy} read row"));
    let top_iops: f64 = cells[2].parse().unwrap();
    let dt: f64 = frame
        .split_whitespace()
        .skip_while(|w| *w != "interval")
        .nth(1)
        .and_then(|v| v.trim_end_matches('s').parse().ok())
        .unwrap_or_else(|| panic!("no interval in {frame}"));
    let seen = top_iops * dt;
    eprintln!(
        "{busy} reads: top {top_iops} IOPS × {dt} s = {seen:.1}, /proc/diskstats {witness} \
         (fio: 800); allowed {:.1}",
        IOPS_ROUNDING * dt
    );
    assert!(
        (seen - witness as f64).abs() <= IOPS_ROUNDING * dt,
        "top {top_iops} IOPS × {dt} s vs diskstats {witness}"
    );
    assert!(row(&frame, &calm, "read").is_some(), "{frame}");
    let mut fio_busy = Some(fio_reads(&path(&busy), 400));
    // Without a terminal and without --once: an error naming what to use instead.
    let out = Command::new(&bin)
        .args(["top", "--url", &url])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.contains("--once") && err.contains("observer report"),
        "{err}"
    );

    // The live view in tmux.
    let tmux = Tmux {
        socket: unique("blkobs-top"),
    };
    let shell = format!(
        "{} top --interval 1 --url {url} --device {busy} --device {calm}; echo EXIT=$?; \
         stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo; sleep 600",
        bin.display()
    );
    tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "50",
        "sh",
        "-c",
        &shell,
    ]);
    let s = tmux.wait(Duration::from_secs(15), "both disks' read rows", |s| {
        row(s, &busy, "read").is_some() && row(s, &calm, "read").is_some()
    });
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"])
            .trim(),
        "1"
    );
    assert!(s.contains("sort IOPS"), "{s}");
    let (busy_at, calm_at) = (
        row(&s, &busy, "read").unwrap().0,
        row(&s, &calm, "read").unwrap().0,
    );
    assert!(
        busy_at < calm_at,
        "IOPS: {busy} (400/s) above {calm} (40/s):\n{s}"
    );
    // `s` cycles the sort column to DEVICE: the calm disk (the smaller name) comes first.
    for _ in 0..6 {
        tmux.keys(&["s"]);
    }
    let s = tmux.wait(Duration::from_secs(5), "sort DEVICE", |s| {
        s.contains("sort DEVICE")
    });
    let (busy_at, calm_at) = (
        row(&s, &busy, "read").unwrap().0,
        row(&s, &calm, "read").unwrap().0,
    );
    assert!(calm_at < busy_at, "DEVICE: {calm} above {busy}:\n{s}");

    // A write held on the FUSE-backed disk: stuck on its row, then in its slow-requests panel.
    // Its reader stops first (the held write would hold its reads up too).
    if slow.name == busy {
        fio_busy.take();
    } else {
        fio_calm.take();
    }
    quiesce(&slow.name);
    let dd = named_dd("blkobs-topheld");
    let mut writer = slow.hold_write(|| {
        Command::new(&dd)
            .args([
                "if=/dev/zero",
                &format!("of={}", slow.path),
                "bs=4k",
                "count=1",
                "seek=9",
                "oflag=direct",
                "status=none",
            ])
            .spawn()
            .unwrap()
    });
    let s = tmux.wait(Duration::from_secs(10), "the held write stuck", |s| {
        row(s, &slow.name, "write").is_some_and(|(_, c)| c[10] == "1")
    });
    eprintln!("{s}");
    for _ in 0..4 {
        if selected(&tmux.screen()).as_deref() == Some(slow.name.as_str()) {
            break;
        }
        tmux.keys(&["Down"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        selected(&tmux.screen()).as_deref(),
        Some(slow.name.as_str())
    );
    tmux.keys(&["Enter"]);
    let s = tmux.wait(
        Duration::from_secs(5),
        "the panel with the held write",
        |s| {
            s.contains(&format!("STUCK NOW on {}: 1", slow.name))
                && s.lines()
                    .any(|l| l.contains("blkobs-topheld") && l.contains("device"))
        },
    );
    eprintln!("{s}");
    std::thread::sleep(Duration::from_millis(500));
    slow.knobs().release();
    assert!(writer.wait().unwrap().success());
    // The refresh after its completion has a write row with its device time (D2C) for one
    // interval: caught while waiting for the panel to list the write among the slow ones.
    let d2c_seen = std::cell::Cell::new(None::<f64>);
    let s = tmux.wait(
        Duration::from_secs(10),
        "the released write's D2C and the write among the slow",
        |s| {
            if let Some((_, c)) = row(s, &slow.name, "write") {
                if let Some(v) = c[6].strip_suffix("ms").and_then(|v| v.parse::<f64>().ok()) {
                    d2c_seen.set(Some(v / 1e3));
                }
            }
            d2c_seen.get().is_some()
                && s.contains(&format!("STUCK NOW on {}: 0", slow.name))
                && s.lines()
                    .any(|l| l.contains("blkobs-topheld") && l.contains("WS"))
        },
    );
    eprintln!("{s}");
    // Against the daemon's own record of that request: the interval's p50 of one sample lies
    // in the sample's kernel bucket, at most D2C_BUCKET wide.
    let v = json(
        &daemon,
        &format!("/stalls?device={}&format=json", slow.name),
    );
    let exact = slow_where(&v, |r| r["submitter"]["comm"] == "blkobs-topheld")[0]["device_seconds"]
        .as_f64()
        .unwrap();
    let shown = d2c_seen.get().unwrap();
    eprintln!("held write: top D2C-p50 {shown:.6} s, its slow record {exact:.6} s");
    assert!(
        (shown - exact).abs() <= D2C_BUCKET * exact,
        "D2C-p50 {shown} vs {exact}"
    );
    tmux.keys(&["Escape"]);

    // `q`: exits 0, off the alternate screen, the terminal's line discipline back on.
    tmux.keys(&["q"]);
    let s = tmux.wait(Duration::from_secs(5), "top exited", |s| {
        s.contains("EXIT=") && s.contains("icanon")
    });
    assert!(s.contains("EXIT=0"), "{s}");
    let modes: Vec<&str> = s
        .lines()
        .map(str::trim)
        .filter(|l| ["icanon", "-icanon", "echo", "-echo"].contains(l))
        .collect();
    assert_eq!(modes, ["icanon", "echo"], "{s}");
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"])
            .trim(),
        "0"
    );
    assert!(
        !s.contains("Q2D-p99"),
        "the view's table left on screen:\n{s}"
    );
}
