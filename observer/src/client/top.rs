//! `observer top`: a live terminal view of a running daemon, as biotop and iotop, with the
//! observer's latencies: one row per device and op with IOPS, throughput, queue (btt Q2D) and
//! device (D2C) p50/p99 over the last interval, requests in flight and the oldest one's time in
//! its stage, stuck requests highlighted; a key changes the sort column, another opens the
//! selected device's stuck and slow requests.
//!
//! Everything comes from the daemon's JSON API, two answers apart (`--interval`): `/counters`
//! (completed requests and bytes per class, in flight per device), `/histograms` without
//! `since` (cumulative bucket counts per class and stage: the interval's percentiles are those
//! of the difference, [`interval_percentile`]) and `/stalls?format=json` (stuck requests; the
//! slow-requests panel).

use std::{
    collections::BTreeMap,
    io::IsTerminal,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use observer_common::hist::{bucket_lower_seconds, NBUCKETS};
use ratatui::{
    layout::{Constraint, Layout},
    style::{Color, Modifier, Style},
    text::Line,
    widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table, TableState},
    DefaultTerminal, Frame,
};
use serde_json::Value;

use super::get_within;
use crate::collect::windows::percentile;

/// How long one request to the daemon may take before the view shows an error and tries
/// again (the keys stay unanswered meanwhile): 5 s.
const TIMEOUT: Duration = Duration::from_secs(5);

/// `GET url` as JSON within [`TIMEOUT`].
fn get(url: &str, accept: &str) -> Result<String> {
    get_within(url, accept, TIMEOUT)
}

/// What `observer top` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The daemon's base URL (`http://127.0.0.1:9617`).
    pub url: String,
    /// Time between two reads of the daemon; rates and percentiles cover it.
    pub interval: Duration,
    /// Print one plain-text frame (two reads `interval` apart) and exit, for scripts and tests.
    pub once: bool,
    /// Only these devices (kernel names); all when empty.
    pub devices: Vec<String>,
}

/// The index of the kernel bucket ([`observer_common::hist`]) whose lower edge is
/// `lower_seconds`, as `/histograms` gives it in each bucket's first number; `None` if no bucket
/// starts there (another daemon version's buckets).
pub fn bucket_of_lower_edge(lower_seconds: f64) -> Option<usize> {
    // Edges increase with the index: the first edge not below `lower_seconds`, if it is that one.
    let (mut lo, mut hi) = (0, NBUCKETS);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if bucket_lower_seconds(mid) < lower_seconds * (1.0 - 1e-9) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let edge = bucket_lower_seconds(lo.min(NBUCKETS - 1));
    (lo < NBUCKETS && (edge - lower_seconds).abs() <= lower_seconds.abs() * 1e-9).then_some(lo)
}

/// Percentile `q` (0..1, seconds) of the samples counted between two reads of one cumulative
/// histogram (`prev`, `cur`: counts per kernel bucket), interpolated inside the bucket by
/// [`crate::collect::windows::percentile`] (the `/histograms` one); `None` when nothing was
/// counted in between. A bucket that went down (the daemon restarted) counts 0.
pub fn interval_percentile(prev: &[u64], cur: &[u64], q: f64) -> Option<f64> {
    let diff: Vec<u64> = cur
        .iter()
        .enumerate()
        .map(|(i, c)| c.saturating_sub(prev.get(i).copied().unwrap_or(0)))
        .collect();
    (diff.iter().sum::<u64>() > 0).then(|| percentile(&diff, q))
}

/// (device, op).
type Key = (String, String);

/// One read of the daemon.
#[derive(Clone, Debug, Default)]
struct Read {
    /// CLOCK_MONOTONIC of the counters' read (seconds).
    mono: f64,
    /// (device, op) → (completed requests, completed bytes), summed over the op's classes.
    ops: BTreeMap<Key, (u64, u64)>,
    /// device → (requests in flight, oldest one's time in its stage, seconds).
    inflight: BTreeMap<String, (u64, f64)>,
    /// (device, op, stage) → cumulative counts per kernel bucket, summed over the op's classes.
    hist: BTreeMap<(String, String, String), Vec<u64>>,
    /// (device, op) → requests stuck now (in flight over their op's slow threshold).
    stuck: BTreeMap<Key, usize>,
}

impl Read {
    /// Reads `/counters`, `/histograms` and `/stalls` once.
    fn fetch(o: &Options) -> Result<Read> {
        let base = o.url.trim_end_matches('/');
        let json = |path: &str| -> Result<Value> {
            let body = get(&format!("{base}{path}"), "application/json")?;
            serde_json::from_str(&body).with_context(|| {
                format!("{base}{path}: not JSON: is {base} an observer daemon? (--url)")
            })
        };
        let counters = json("/counters")?;
        let hists = json("/histograms")?;
        // `since` trims the slow list (not needed here), never the stuck one.
        let stalls = json("/stalls?format=json&since=1s&limit=1000")?;
        let wanted = |d: &str| o.devices.is_empty() || o.devices.iter().any(|w| w == d);
        let mut r = Read {
            mono: counters["monotonic_seconds"]
                .as_f64()
                .context("/counters has no monotonic_seconds: the daemon is older than this client; upgrade it")?,
            ..Read::default()
        };
        for d in counters["devices"].as_array().into_iter().flatten() {
            let dev = d["device"].as_str().unwrap_or("?");
            if !wanted(dev) {
                continue;
            }
            let f = &d["inflight"];
            let n = f["queue"].as_u64().unwrap_or(0) + f["device"].as_u64().unwrap_or(0);
            let oldest = f["oldest_queue_seconds"]
                .as_f64()
                .unwrap_or(0.0)
                .max(f["oldest_device_seconds"].as_f64().unwrap_or(0.0));
            r.inflight.insert(dev.to_string(), (n, oldest));
            for c in d["classes"].as_array().into_iter().flatten() {
                let e = r
                    .ops
                    .entry((dev.to_string(), c["op"].as_str().unwrap_or("?").to_string()))
                    .or_default();
                e.0 += c["requests"].as_u64().unwrap_or(0);
                e.1 += c["bytes"].as_u64().unwrap_or(0);
            }
        }
        for h in hists["histograms"].as_array().into_iter().flatten() {
            let dev = h["device"].as_str().unwrap_or("?");
            if !wanted(dev) {
                continue;
            }
            let key = (
                dev.to_string(),
                h["op"].as_str().unwrap_or("?").to_string(),
                h["stage"].as_str().unwrap_or("?").to_string(),
            );
            let counts = r.hist.entry(key).or_insert_with(|| vec![0; NBUCKETS]);
            for b in h["buckets"].as_array().into_iter().flatten() {
                if let (Some(i), Some(n)) =
                    (b[0].as_f64().and_then(bucket_of_lower_edge), b[2].as_u64())
                {
                    counts[i] += n;
                }
            }
        }
        for s in stalls["stuck"].as_array().into_iter().flatten() {
            let dev = s["device"].as_str().unwrap_or("?");
            if wanted(dev) {
                *r.stuck
                    .entry((dev.to_string(), s["op"].as_str().unwrap_or("?").to_string()))
                    .or_default() += 1;
            }
        }
        Ok(r)
    }
}

/// One row of the view: a device and op over the interval between two reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Kernel device name.
    pub device: String,
    /// `read`, `write`, `flush`, ... (`-`: only requests in flight on the device).
    pub op: String,
    /// Completed requests per second.
    pub iops: f64,
    /// Completed bytes per second.
    pub bytes_per_second: f64,
    /// Queue stage (btt Q2D) p50 and p99 (seconds) of the requests completed in the interval.
    pub q2d: Option<(f64, f64)>,
    /// Device stage (btt D2C) p50 and p99 (seconds); for a bio-based disk (dm, md), which has
    /// no stages, its total (Q2C).
    pub d2c: Option<(f64, f64)>,
    /// Requests in flight on the device at the second read.
    pub inflight: u64,
    /// The oldest in-flight request's time in its stage (seconds; queue: since it entered,
    /// device: since its dispatch), as `blkobs_oldest_inflight_age_seconds`.
    pub oldest: f64,
    /// Requests of this device and op stuck now (over their op's slow threshold).
    pub stuck: usize,
}

/// The rows between reads `prev` and `cur`: every (device, op) that completed requests in
/// between, has requests stuck, or (op `-`) a device with requests in flight and no such row.
fn rows(prev: &Read, cur: &Read) -> Vec<Row> {
    let dt = (cur.mono - prev.mono).max(1e-9);
    let pct = |dev: &str, op: &str, stage: &str| {
        let k = (dev.to_string(), op.to_string(), stage.to_string());
        let c = cur.hist.get(&k)?;
        let empty = Vec::new();
        let p = prev.hist.get(&k).unwrap_or(&empty);
        Some((
            interval_percentile(p, c, 0.5)?,
            interval_percentile(p, c, 0.99)?,
        ))
    };
    let mut out = Vec::new();
    let mut keys: Vec<&Key> = cur.ops.keys().chain(cur.stuck.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (n1, b1) = cur.ops.get(k).copied().unwrap_or_default();
        let (n0, b0) = prev.ops.get(k).copied().unwrap_or_default();
        let stuck = cur.stuck.get(k).copied().unwrap_or(0);
        if n1 <= n0 && stuck == 0 {
            continue;
        }
        let (inflight, oldest) = cur.inflight.get(&k.0).copied().unwrap_or_default();
        out.push(Row {
            device: k.0.clone(),
            op: k.1.clone(),
            iops: n1.saturating_sub(n0) as f64 / dt,
            bytes_per_second: b1.saturating_sub(b0) as f64 / dt,
            q2d: pct(&k.0, &k.1, "queue"),
            d2c: pct(&k.0, &k.1, "device").or_else(|| {
                let total_only =
                    !cur.hist
                        .contains_key(&(k.0.clone(), k.1.clone(), "device".into()));
                total_only.then(|| pct(&k.0, &k.1, "total")).flatten()
            }),
            inflight,
            oldest,
            stuck,
        });
    }
    for (dev, (n, oldest)) in &cur.inflight {
        if *n > 0 && !out.iter().any(|r| &r.device == dev) {
            out.push(Row {
                device: dev.clone(),
                op: "-".into(),
                iops: 0.0,
                bytes_per_second: 0.0,
                q2d: None,
                d2c: None,
                inflight: *n,
                oldest: *oldest,
                stuck: 0,
            });
        }
    }
    out
}

/// The columns the view can be sorted by, in the order the sort key cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Completed requests per second, highest first.
    Iops,
    /// Bytes per second, highest first.
    Throughput,
    /// Q2D p99, slowest first.
    QueueP99,
    /// D2C p99, slowest first.
    DeviceP99,
    /// Requests in flight, most first.
    Inflight,
    /// Oldest in-flight time, oldest first.
    Oldest,
    /// Device name, then op, A to Z.
    Device,
}

impl SortBy {
    const ALL: [SortBy; 7] = [
        SortBy::Iops,
        SortBy::Throughput,
        SortBy::QueueP99,
        SortBy::DeviceP99,
        SortBy::Inflight,
        SortBy::Oldest,
        SortBy::Device,
    ];

    /// The column's header (what the title line names as the sort).
    pub fn name(self) -> &'static str {
        match self {
            SortBy::Iops => "IOPS",
            SortBy::Throughput => "MB/s",
            SortBy::QueueP99 => "Q2D-p99",
            SortBy::DeviceP99 => "D2C-p99",
            SortBy::Inflight => "INFL",
            SortBy::Oldest => "OLDEST",
            SortBy::Device => "DEVICE",
        }
    }

    fn next(self) -> SortBy {
        let i = SortBy::ALL.iter().position(|s| *s == self).unwrap_or(0);
        SortBy::ALL[(i + 1) % SortBy::ALL.len()]
    }
}

/// Sorts `rows` by `by` (ties by device and op), reversed when `reverse`.
pub fn sort_rows(rows: &mut [Row], by: SortBy, reverse: bool) {
    let p99 = |x: Option<(f64, f64)>| x.map_or(-1.0, |v| v.1);
    rows.sort_by(|a, b| {
        let name = (&a.device, &a.op).cmp(&(&b.device, &b.op));
        let desc = |x: f64, y: f64| y.total_cmp(&x).then(name);
        let o = match by {
            SortBy::Iops => desc(a.iops, b.iops),
            SortBy::Throughput => desc(a.bytes_per_second, b.bytes_per_second),
            SortBy::QueueP99 => desc(p99(a.q2d), p99(b.q2d)),
            SortBy::DeviceP99 => desc(p99(a.d2c), p99(b.d2c)),
            SortBy::Inflight => desc(a.inflight as f64, b.inflight as f64),
            SortBy::Oldest => desc(a.oldest, b.oldest),
            SortBy::Device => name,
        };
        if reverse {
            o.reverse()
        } else {
            o
        }
    });
}

/// Column headers (no spaces inside one: the plain-text frame splits on whitespace).
pub const HEADERS: [&str; 11] = [
    "DEVICE", "OP", "IOPS", "MB/s", "Q2D-p50", "Q2D-p99", "D2C-p50", "D2C-p99", "INFL", "OLDEST",
    "STUCK",
];

/// A latency as milliseconds with 3 decimals, `-` when there were no samples.
fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{:.3}ms", s * 1e3))
}

/// The cells of a row, in [`HEADERS`] order.
fn cells(r: &Row) -> [String; 11] {
    [
        r.device.clone(),
        r.op.clone(),
        format!("{:.0}", r.iops),
        format!("{:.2}", r.bytes_per_second / 1e6),
        ms(r.q2d.map(|v| v.0)),
        ms(r.q2d.map(|v| v.1)),
        ms(r.d2c.map(|v| v.0)),
        ms(r.d2c.map(|v| v.1)),
        r.inflight.to_string(),
        if r.inflight > 0 {
            format!("{:.3}s", r.oldest)
        } else {
            "-".into()
        },
        r.stuck.to_string(),
    ]
}

const WIDTHS: [usize; 11] = [12, 8, 9, 9, 10, 10, 10, 10, 6, 9, 6];

/// The title line of a frame.
fn title(o: &Options, dt: f64, by: SortBy, reverse: bool) -> String {
    format!(
        "observer top  {}  interval {:.3}s  sort {}{}",
        o.url,
        dt,
        by.name(),
        if reverse { " (reversed)" } else { "" }
    )
}

/// One frame as plain text: the title line, the header and one line per row.
pub fn frame_text(title: &str, rows: &[Row]) -> String {
    let line = |c: &[String]| {
        c.iter()
            .zip(WIDTHS)
            .enumerate()
            .map(|(i, (s, w))| {
                if i < 2 {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end()
            .to_string()
    };
    let mut out = format!("{title}\n");
    out += &line(&HEADERS.map(String::from));
    out.push('\n');
    for r in rows {
        out += &line(&cells(r));
        out.push('\n');
    }
    out
}

/// Runs `observer top`: the live view, or one plain-text frame with [`Options::once`].
/// Errors: the daemon cannot be reached or answers something else than its API; stdout is not
/// a terminal without `--once`; the terminal cannot be set up.
pub fn run(o: Options) -> Result<()> {
    if o.interval < Duration::from_millis(100) {
        bail!("--interval must be at least 0.1 (seconds)");
    }
    if !o.once && !std::io::stdout().is_terminal() {
        bail!(
            "stdout is not a terminal: `observer top` draws a live screen; for scripts use \
             `observer top --once` (one plain-text frame), `observer report` (histograms) or \
             `observer stalls`"
        );
    }
    let first = Read::fetch(&o)?;
    if o.once {
        std::thread::sleep(o.interval);
        let cur = Read::fetch(&o)?;
        let mut r = rows(&first, &cur);
        sort_rows(&mut r, SortBy::Iops, false);
        print!(
            "{}",
            frame_text(&title(&o, cur.mono - first.mono, SortBy::Iops, false), &r)
        );
        return Ok(());
    }
    let terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let _restore = Restore;
    Live::new(o, first).run(terminal)
}

/// Restores the terminal (raw mode off, main screen) when dropped: also on an error.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// The live view's state.
struct Live {
    o: Options,
    prev: Read,
    rows: Vec<Row>,
    dt: f64,
    sort: SortBy,
    reverse: bool,
    /// The selected row's (device, op), kept across re-sorts.
    selected: Option<Key>,
    /// The device whose stuck and slow requests are shown (the panel is open), and its text.
    panel: Option<(String, Vec<String>)>,
    /// The last error reading the daemon (shown in the footer until a read succeeds).
    error: Option<String>,
}

impl Live {
    fn new(o: Options, first: Read) -> Live {
        Live {
            o,
            prev: first,
            rows: Vec::new(),
            dt: 0.0,
            sort: SortBy::Iops,
            reverse: false,
            selected: None,
            panel: None,
            error: None,
        }
    }

    fn run(mut self, mut terminal: DefaultTerminal) -> Result<()> {
        let mut next = Instant::now() + self.o.interval;
        loop {
            terminal.draw(|f| self.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    match k.code {
                        KeyCode::Char('q') => return Ok(()),
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(())
                        }
                        KeyCode::Char('s') => {
                            self.sort = self.sort.next();
                            self.resort();
                        }
                        KeyCode::Char('r') => {
                            self.reverse = !self.reverse;
                            self.resort();
                        }
                        KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
                        KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
                        KeyCode::Enter => {
                            if self.panel.is_some() {
                                self.panel = None;
                            } else if let Some((dev, _)) = self.selected.clone() {
                                self.panel = Some((dev.clone(), Vec::new()));
                                self.refresh_panel();
                            }
                        }
                        KeyCode::Esc => self.panel = None,
                        _ => {}
                    }
                }
                continue;
            }
            next = Instant::now() + self.o.interval;
            match Read::fetch(&self.o) {
                Ok(cur) => {
                    self.dt = cur.mono - self.prev.mono;
                    self.rows = rows(&self.prev, &cur);
                    self.prev = cur;
                    self.error = None;
                    self.resort();
                    self.refresh_panel();
                }
                Err(e) => self.error = Some(format!("{e:#}")),
            }
        }
    }

    fn resort(&mut self) {
        sort_rows(&mut self.rows, self.sort, self.reverse);
        let still = self
            .selected
            .as_ref()
            .is_some_and(|s| self.rows.iter().any(|r| (&r.device, &r.op) == (&s.0, &s.1)));
        if !still {
            self.selected = self.rows.first().map(|r| (r.device.clone(), r.op.clone()));
        }
    }

    fn selected_index(&self) -> Option<usize> {
        let s = self.selected.as_ref()?;
        self.rows
            .iter()
            .position(|r| (&r.device, &r.op) == (&s.0, &s.1))
    }

    fn move_selection(&mut self, by: isize) {
        if self.rows.is_empty() {
            return;
        }
        let i = self.selected_index().unwrap_or(0) as isize + by;
        let i = i.clamp(0, self.rows.len() as isize - 1) as usize;
        self.selected = Some((self.rows[i].device.clone(), self.rows[i].op.clone()));
    }

    /// Reads the open panel's device's stuck and slow requests (`/stalls?device=`).
    fn refresh_panel(&mut self) {
        let Some((dev, _)) = &self.panel else {
            return;
        };
        let dev = dev.clone();
        let base = self.o.url.trim_end_matches('/');
        let text = get(
            &format!("{base}/stalls?device={dev}&format=json&limit=50"),
            "application/json",
        )
        .and_then(|b| Ok(serde_json::from_str::<Value>(&b)?))
        .map(|v| panel_lines(&dev, &v))
        .unwrap_or_else(|e| vec![format!("error: {e:#}")]);
        self.panel = Some((dev, text));
    }

    fn draw(&self, f: &mut Frame) {
        let area = f.area();
        let [top, main, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .areas(area);
        f.render_widget(
            Paragraph::new(title(&self.o, self.dt, self.sort, self.reverse)),
            top,
        );
        let (table_area, panel_area) = if self.panel.is_some() {
            let [a, b] = Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)])
                .areas(main);
            (a, Some(b))
        } else {
            (main, None)
        };
        let header = TableRow::new(HEADERS.iter().map(|h| {
            let s = if *h == self.sort.name() {
                Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
            } else {
                Style::default().add_modifier(Modifier::BOLD)
            };
            Cell::from(*h).style(s)
        }));
        let body = self.rows.iter().map(|r| {
            let row = TableRow::new(cells(r).into_iter().map(Cell::from));
            if r.stuck > 0 {
                row.style(Style::default().fg(Color::Red).add_modifier(Modifier::BOLD))
            } else {
                row
            }
        });
        let table = Table::new(body, WIDTHS.map(|w| Constraint::Length(w as u16)))
            .header(header)
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
            .highlight_symbol(">");
        let mut state = TableState::default().with_selected(self.selected_index());
        f.render_stateful_widget(table, table_area, &mut state);
        if let (Some(a), Some((dev, lines))) = (panel_area, &self.panel) {
            let p = Paragraph::new(
                lines
                    .iter()
                    .map(|l| Line::from(l.as_str()))
                    .collect::<Vec<_>>(),
            )
            .block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(format!(" {dev}: stuck and slow requests (Esc closes) ")),
            );
            f.render_widget(p, a);
        }
        let help = match &self.error {
            Some(e) => format!("error: {e}"),
            None => "q quit  s sort column  r reverse  ↑/↓ select  Enter slow requests of the selected device"
                .into(),
        };
        f.render_widget(Paragraph::new(help), foot);
    }
}

/// The slow-requests panel's lines from a `/stalls` JSON answer for `device`.
fn panel_lines(device: &str, v: &Value) -> Vec<String> {
    let secs = |x: &Value| {
        x.as_f64()
            .map_or("-".into(), |s| format!("{:.3}ms", s * 1e3))
    };
    let mut out = Vec::new();
    let stuck = v["stuck"].as_array().cloned().unwrap_or_default();
    out.push(format!("STUCK NOW on {device}: {}", stuck.len()));
    out.push(format!(
        "{:<7} {:>10} {:>10} {:<6} {:>12} {:>8} {:>7} {:<16}",
        "STAGE", "AGE", "IN-STAGE", "RWBS", "SECTOR", "BYTES", "PID", "COMM"
    ));
    for s in &stuck {
        out.push(format!(
            "{:<7} {:>9.3}s {:>9.3}s {:<6} {:>12} {:>8} {:>7} {:<16}",
            s["stage"].as_str().unwrap_or("?"),
            s["age_seconds"].as_f64().unwrap_or(0.0),
            s["stage_seconds"].as_f64().unwrap_or(0.0),
            s["rwbs"].as_str().unwrap_or(""),
            s["sector"].as_u64().unwrap_or(0),
            s["bytes"].as_u64().unwrap_or(0),
            s["submitter"]["pid"].as_u64().unwrap_or(0),
            s["submitter"]["comm"].as_str().unwrap_or(""),
        ));
    }
    let slow = v["slow"].as_array().cloned().unwrap_or_default();
    out.push(String::new());
    out.push(format!(
        "SLOW REQUESTS on {device}: {} (newest first)",
        slow.len()
    ));
    out.push(format!(
        "{:<24} {:<6} {:>11} {:>11} {:>11} {:>12} {:>8} {:>7} {:<16}",
        "TIME", "RWBS", "QUEUE", "DEVICE", "TOTAL", "SECTOR", "BYTES", "PID", "COMM"
    ));
    for s in &slow {
        out.push(format!(
            "{:<24} {:<6} {:>11} {:>11} {:>11} {:>12} {:>8} {:>7} {:<16}",
            s["time"].as_str().unwrap_or(""),
            s["rwbs"].as_str().unwrap_or(""),
            secs(&s["queue_seconds"]),
            secs(&s["device_seconds"]),
            secs(&s["total_seconds"]),
            s["sector"].as_u64().unwrap_or(0),
            s["bytes"].as_u64().unwrap_or(0),
            s["submitter"]["pid"].as_u64().unwrap_or(0),
            s["submitter"]["comm"].as_str().unwrap_or(""),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use observer_common::hist::{bucket_index, bucket_lower_seconds, bucket_upper_seconds};

    use super::*;

    #[test]
    fn lower_edges_map_back_to_their_bucket() {
        for i in 0..NBUCKETS {
            assert_eq!(
                bucket_of_lower_edge(bucket_lower_seconds(i)),
                Some(i),
                "{i}"
            );
        }
        assert_eq!(bucket_of_lower_edge(bucket_lower_seconds(40) * 1.01), None);
    }

    #[test]
    fn percentiles_of_the_interval_only() {
        // Before: 1000 samples at 10 µs. In the interval: 99 at 1 ms and 1 at 50 ms.
        let mut prev = vec![0u64; NBUCKETS];
        prev[bucket_index(10_000)] = 1000;
        let mut cur = prev.clone();
        cur[bucket_index(1_000_000)] += 99;
        cur[bucket_index(50_000_000)] += 1;
        let p50 = interval_percentile(&prev, &cur, 0.5).unwrap();
        let b = bucket_index(1_000_000);
        assert!(
            (bucket_lower_seconds(b)..=bucket_upper_seconds(b)).contains(&p50),
            "{p50}"
        );
        // The 99th sample of 100 is the last one of the 1 ms bucket.
        let p99 = interval_percentile(&prev, &cur, 0.99).unwrap();
        assert!((p99 - bucket_upper_seconds(b)).abs() < 1e-12, "{p99}");
        let p999 = interval_percentile(&prev, &cur, 0.999).unwrap();
        let top = bucket_index(50_000_000);
        assert!(p999 > bucket_lower_seconds(top) && p999 <= bucket_upper_seconds(top));
        // Nothing new: no percentile; a histogram that went down (restart) counts nothing.
        assert_eq!(interval_percentile(&cur, &cur, 0.5), None);
        assert_eq!(interval_percentile(&cur, &prev, 0.5), None);
        assert!(interval_percentile(&[], &cur, 0.5).unwrap() < 20e-6);
    }

    fn read(mono: f64, n: u64, stuck: usize) -> Read {
        let mut r = Read {
            mono,
            ..Read::default()
        };
        r.ops
            .insert(("loop1".into(), "write".into()), (n, n * 4096));
        r.ops
            .insert(("loop0".into(), "read".into()), (n * 3, n * 3 * 512));
        r.inflight.insert("loop1".into(), (2, 1.5));
        r.inflight.insert("vda".into(), (1, 0.25));
        if stuck > 0 {
            r.stuck.insert(("loop1".into(), "write".into()), stuck);
        }
        r
    }

    #[test]
    fn rates_rows_and_sorting() {
        let mut rs = rows(&read(10.0, 100, 0), &read(12.0, 300, 1));
        sort_rows(&mut rs, SortBy::Iops, false);
        let names: Vec<_> = rs
            .iter()
            .map(|r| (r.device.as_str(), r.op.as_str()))
            .collect();
        assert_eq!(names, [("loop0", "read"), ("loop1", "write"), ("vda", "-")]);
        assert_eq!(rs[0].iops, 300.0); // 600 reads in 2 s
        assert_eq!(rs[0].bytes_per_second, 300.0 * 512.0);
        assert_eq!(rs[1].iops, 100.0);
        assert_eq!((rs[1].inflight, rs[1].oldest, rs[1].stuck), (2, 1.5, 1));
        assert_eq!(rs[1].q2d, None);
        sort_rows(&mut rs, SortBy::Throughput, false);
        assert_eq!(rs[0].device, "loop1");
        sort_rows(&mut rs, SortBy::Device, true);
        assert_eq!(rs[0].device, "vda");
        let text = frame_text("t", &rs);
        let line = text.lines().find(|l| l.starts_with("loop1")).unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), HEADERS.len(), "{line}");
        assert_eq!(f[2], "100");
        assert_eq!(f[3], "0.41");
        // An idle interval: no rows but the device with requests in flight and the stuck one.
        let rs = rows(&read(12.0, 300, 1), &read(14.0, 300, 1));
        assert_eq!(rs.len(), 2, "{rs:?}");
    }

    #[test]
    fn sort_key_cycles_through_every_column() {
        let mut s = SortBy::Iops;
        for _ in 0..SortBy::ALL.len() {
            assert!(HEADERS.contains(&s.name()));
            s = s.next();
        }
        assert_eq!(s, SortBy::Iops);
    }
}
