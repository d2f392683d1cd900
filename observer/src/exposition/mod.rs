//! Prometheus exposition of a [`Snapshot`]: `/metrics`. Each metric's name, help and labels are
//! declared once, as a [`MetricDesc`] `const` in the file of its feature (`requests`,
//! `inflight`, `stalls`, `selfmon`, and `crate::fslog` for the filesystem-log gauges); the
//! functions beside them only fill values, into a [`MetricWriter`]: the text format
//! ([`TextWriter`]) or the delimited protobuf format ([`ProtoWriter`], `proto.rs`), whose
//! latency and request-size histograms also carry native buckets (`native.rs`).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `blkobs_request_latency_seconds` | histogram | device, op, preflush, fua, sync, meta, readahead, log, stage |
//! | `blkobs_cgroup_request_latency_seconds` | histogram, `[cgroups] latency` only (`collect::cgroup_latency`) | device, op, stage, cgroup (owner's path or `other`) |
//! | `blkobs_cgroup_latency_other_cgroups` | gauge, `[cgroups] latency` only | device |
//! | `blkobs_requests_total` | counter | device, op, flags |
//! | `blkobs_bytes_total` | counter | device, op, flags |
//! | `blkobs_merges_total` | counter | device, op, flags |
//! | `blkobs_requeues_total` | counter | device, op, flags |
//! | `blkobs_request_size_bytes` | histogram (`dispatch.rs`), bytes at first dispatch | device, op, flags |
//! | `blkobs_request_merged_bios` | histogram (`dispatch.rs`), bios merged per request | device, op, flags |
//! | `blkobs_missed_merges_total` | counter (`dispatch.rs`) | device, op, flags |
//! | `blkobs_lost_completions_total` | counter | device, op, flags |
//! | `blkobs_untracked_completions_total` | counter | device, op, flags |
//! | `blkobs_slow_requests_total` | counter | device, op, flags |
//! | `blkobs_oldest_inflight_age_seconds` | gauge | device, stage |
//! | `blkobs_stall_episodes_total`, `blkobs_stall_seconds_total` | counter | device, kind (device, dispatch) |
//! | `blkobs_events_received_total` | counter | kind |
//! | `blkobs_events_dropped_total` | counter | reason |
//! | `blkobs_request_errors_total` | counter | device, op, status |
//! | `blkobs_inflight_requests` | gauge | device, stage (queue, device; total on bio-based disks) |
//! | `blkobs_device_mapper_info` | gauge (`inflight.rs`), 1 per dm disk | device, name, uuid |
//! | `blkobs_disk_info` | gauge (`disk.rs`), 1 per disk with media | device, model, serial, wwid, revision, rotational, logical_block_size, physical_block_size, scheduler, write_cache, fua, zoned, zone_size_bytes, max_open_zones, max_active_zones |
//! | `blkobs_fs_log_sectors` | gauge (`fslog.rs`) | device, fs_device, fstype, mountpoint, kind, start |
//! | `blkobs_fs_log_status` | gauge (`fslog.rs`), 1 per filesystem | device, fs_device, fstype, mountpoint, status (found, no_journal, unreadable, no_device_node, invalid, external_log_missing, io_error) |
//! | `blkobs_fs_log_warnings` | gauge (`fslog.rs`) | |
//! | `blkobs_bpf_program_runs_total`, `blkobs_bpf_program_run_seconds_total` | counter (`bpfcost.rs`), only while `kernel.bpf_stats_enabled=1` | program |
//! | `blkobs_bpf_program_recursion_misses_total` | counter (`bpfcost.rs`), always | program |
//! | `process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`, `process_virtual_memory_bytes`, `process_resident_memory_bytes`, `process_start_time_seconds`, `process_threads` | the standard process metrics (`process.rs`, the prometheus crate's `ProcessCollector`) | |
//! | `blkobs_dropped_requests_total{reason}`, `blkobs_stale_requests_total`, `blkobs_clock_anomalies_total`, `blkobs_unindexed_requests_total`, `blkobs_nested_completions_total`, `blkobs_devices_degraded`, `blkobs_map_entries{map}`, `blkobs_map_capacity{map}`, `blkobs_build_info`, `blkobs_reaper_passes_total`, `blkobs_http_rejected_total{reason}` | self-monitoring | |
//!
//! Label `log` is `true` for requests that start inside a filesystem log (journal) range
//! (`observer_common::class::LOG`, see `crate::fslog`): `{op="write",log="true"}` selects log writes.
//! "flags" above means the same flag labels as the histogram (preflush ... log).

pub mod bpfcost;
mod buckets;
mod buffer;
mod desc;
mod disk;
pub mod dispatch;
pub mod fslog;
mod inflight;
pub mod native;
mod process;
pub mod proto;
mod requests;
pub mod selfmon;
mod stalls;
pub mod text;
mod writer;

pub use buckets::BucketMap;
pub use buffer::ScrapeBuffer;
pub use desc::{encode, MetricDesc};
pub use process::ProcessMetrics;
pub use proto::ProtoWriter;
pub use text::{Exemplar, Format, TextWriter};
pub use writer::{Family, HistogramSeries, MetricWriter, NativeSource};

use crate::{
    bpf::loader::AttachInfo, collect::events::History, collect::snapshot::Snapshot,
    config::DeviceFilter, disks::DiskView,
};

/// The daemon's metric families (all but the filesystem-log ones), in a fixed order: latency
/// histograms, per-class counters, merge analysis, errors, in-flight, stalls, self-monitoring.
/// `buckets` are the exported bounds; `filter` limits the stall totals (the snapshot is already
/// filtered), `disks` names their devices (and the exemplars' ones). Written into `w`: the text
/// format ([`TextWriter`], version 0.0.4, or OpenMetrics 1.0 with the latency histograms'
/// exemplars from `history`) or the protobuf format with native histograms and the same
/// exemplars on the classic buckets ([`ProtoWriter`]).
pub fn render(
    w: &mut dyn MetricWriter,
    s: &Snapshot,
    history: &History,
    buckets: &BucketMap,
    info: &AttachInfo,
    filter: &DeviceFilter,
    disks: &DiskView,
) {
    requests::latency(w, s, buckets, history, disks);
    requests::cgroup_latency(w, s, buckets);
    requests::counters(w, s);
    dispatch::families(w, s);
    requests::errors(w, s);
    inflight::families(w, s);
    disk::families(w, filter, disks);
    stalls::families(w, s, history, filter, disks);
    selfmon::families(w, s, info);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::snapshot::{ClassTotals, InflightCounts};
    use crate::exposition::ProcessMetrics;
    use observer_common::{
        class::{Class, FLAGS},
        hist::bucket_index,
        maps::mkdev,
    };

    /// A snapshot with every family non-empty: three devices (one with characters that need
    /// escaping), several classes with samples in every stage, errors, in-flight requests,
    /// self-monitoring counters, stall totals.
    fn sample() -> (Snapshot, History) {
        let mut s = Snapshot::default();
        let mut n = 1u64;
        let devices = ["loop0", "nvme0n1", "we\"ird\\dev\nname"];
        for (d, dev) in devices.iter().enumerate() {
            for class in [0u16, 1, 1 | FLAGS[2].0, 2 | FLAGS[0].0 | FLAGS[1].0] {
                let mut t = ClassTotals::new();
                for (i, st) in t.stages.iter_mut().enumerate() {
                    for ns in [
                        900u64,
                        1_500,
                        40_000 * (i as u64 + 1),
                        3_000_000,
                        90_000_000_000,
                    ] {
                        n = (n * 7_919 + 13) % 1_000_003;
                        st.buckets[bucket_index(ns)] += n % 97;
                        st.sum_ns += ns * (n % 97);
                    }
                }
                t.requests = n % 1000 + d as u64;
                t.bytes = t.requests * 4096;
                t.merges = n % 3;
                t.lost = n % 2;
                t.slow = n % 5;
                if class != 2 | FLAGS[0].0 | FLAGS[1].0 {
                    for k in 0..(n % 7) {
                        t.dispatch.record(
                            (4096 << (k % 3)) as u32,
                            (1 + k * 3) as u16,
                            (k % 2) as u8,
                        );
                    }
                }
                s.classes.insert((dev.to_string(), Class(class)), t);
            }
            s.inflight.insert(
                dev.to_string(),
                InflightCounts {
                    queue: d as u64,
                    device: 3,
                    oldest_queue_ns: 1_234_567 * d as u64,
                    oldest_device_ns: 987_654_321,
                    bio_based: false,
                },
            );
            s.errors
                .insert((dev.to_string(), Class(1), 10), 7 + d as u64);
        }
        // [cgroups] latency: two named cgroups and `other` on one device.
        let mut cg = crate::collect::snapshot::CgroupLatencyTotals::default();
        for (i, label) in ["/a.slice", "/b.slice", "other"].iter().enumerate() {
            let mut stages = ClassTotals::new().stages;
            for (j, st) in stages.iter_mut().enumerate() {
                let ns = 50_000 * (i as u64 + 1) * (j as u64 + 1);
                st.buckets[bucket_index(ns)] += 3 + i as u64;
                st.sum_ns += ns * (3 + i as u64);
            }
            cg.series.insert(
                (
                    "nvme0n1".to_string(),
                    observer_common::class::Op::Write,
                    label.to_string(),
                ),
                stages,
            );
        }
        cg.folded_cgroups.insert("nvme0n1".to_string(), 4);
        s.cgroup_latency = Some(cg);
        s.counters.inflight_full = 2;
        s.counters.events_dropped = 5;
        s.counters.stale_entries = 11;
        s.inflight_entries = (1234, 65536);
        s.class_stats_entries = (12, 256);
        s.cgroup_latency_entries = Some((3, 256));
        s.dev_slots.used = 3;
        s.dev_slots.capacity = 64;
        let mut h = History::new(10, 10);
        h.slow_received = 42;
        h.episodes_received = 3;
        h.episode_totals.insert((mkdev(4000, 1), 1), (2, 0.125));
        (s, h)
    }

    /// The whole exposition of [`sample`], byte for byte, against `testdata/render.txt`
    /// (written by the `prometheus` crate's object model and `TextEncoder` before the direct
    /// writer replaced them; the crate version replaced by `VERSION`). `BLKOBS_BLESS=1`
    /// rewrites the file.
    /// [`render`] of `s` and `h` with the default buckets, filter and disks, as text.
    fn render_sample(s: &Snapshot, h: &History) -> String {
        let mut w = TextWriter::new();
        render_into(&mut w, s, h);
        w.finish()
    }

    /// [`render`] of `s` and `h` with the default buckets, filter and disks, into `w`.
    fn render_into(w: &mut dyn MetricWriter, s: &Snapshot, h: &History) {
        let info = AttachInfo {
            mode: "tp_btf",
            enter_tracepoint: "block_io_start",
            reaper: "request_state",
        };
        let buckets = BucketMap::new(&crate::config::Histogram::default().buckets);
        render(
            w,
            s,
            h,
            &buckets,
            &info,
            &DeviceFilter::default(),
            &DiskView::default(),
        );
    }

    /// The samples of a text exposition (`# ` lines skipped), labels unescaped, in order.
    fn parse_text(text: &str) -> Vec<proto::TextSample> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let name_end = l.find(['{', ' ']).unwrap();
                let name = l[..name_end].to_string();
                let mut labels = Vec::new();
                let mut rest = &l[name_end..];
                if let Some(r) = rest.strip_prefix('{') {
                    let mut chars = r.char_indices();
                    let (mut key, mut val, mut in_val, mut esc) =
                        (String::new(), String::new(), false, false);
                    let mut end = 0;
                    while let Some((i, c)) = chars.next() {
                        match (in_val, esc, c) {
                            (true, true, 'n') => (val.push('\n'), esc = false).1,
                            (true, true, c) => (val.push(c), esc = false).1,
                            (true, false, '\\') => esc = true,
                            (true, false, '"') => {
                                labels.push((std::mem::take(&mut key), std::mem::take(&mut val)));
                                in_val = false;
                            }
                            (true, false, c) => val.push(c),
                            (false, _, '=') => {
                                chars.next(); // the opening quote
                                in_val = true;
                            }
                            (false, _, ',') => {}
                            (false, _, '}') => {
                                end = i + 1;
                                break;
                            }
                            (false, _, c) => key.push(c),
                        }
                    }
                    rest = &r[end..];
                }
                let v: f64 = rest.trim().parse().unwrap_or_else(|_| panic!("{l}"));
                (name, labels, v)
            })
            .collect()
    }

    /// The protobuf exposition of [`sample`] has every family, series and value of the text one
    /// (classic buckets included), in the same order, with the same types; the latency and
    /// request-size histograms also have native buckets that hold the same counts: their total
    /// (with the zero bucket) is `_count`, and those up to each classic `le` (latency: within
    /// [`native::LATENCY_EDGE_ERROR`] above it) are that bucket's cumulative count.
    #[test]
    fn protobuf_has_the_text_series_and_native_buckets() {
        let (s, h) = sample();
        let text = render_sample(&s, &h);
        let mut w = ProtoWriter::new(true);
        render_into(&mut w, &s, &h);
        let families = proto::decode(&w.finish()).expect("decode our own protobuf");
        let types: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (n, t) = l.split_once(' ').unwrap();
                (n.to_string(), t.to_uppercase())
            })
            .collect();
        let got_types: Vec<(String, String)> = families
            .iter()
            .map(|f| {
                let t = proto::model::MetricType::try_from(f.r#type.unwrap()).unwrap();
                (f.name.clone().unwrap(), format!("{t:?}").to_uppercase())
            })
            .collect();
        assert_eq!(got_types, types);
        let want = parse_text(&text);
        assert!(want.len() > 500, "{} series", want.len());
        let got = proto::text_samples(&families);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.0, &g.1), (&w.0, &w.1));
            assert_eq!(g.2.to_bits(), w.2.to_bits(), "{w:?}");
        }

        let mut checked = [0usize; 2];
        for f in &families {
            let name = f.name.as_deref().unwrap();
            let (schema, slack) = match name {
                "blkobs_request_latency_seconds" | "blkobs_cgroup_request_latency_seconds" => {
                    (8, native::LATENCY_EDGE_ERROR)
                }
                "blkobs_request_size_bytes" => (0, 0.0),
                _ => {
                    assert!(f
                        .metric
                        .iter()
                        .all(|m| m.histogram.as_ref().is_none_or(|h| h.schema.is_none())));
                    continue;
                }
            };
            for m in &f.metric {
                let hist = m.histogram.as_ref().unwrap();
                assert_eq!(hist.schema, Some(schema), "{name}");
                let nb = proto::native_buckets(hist);
                let zero = hist.zero_count.unwrap();
                assert_eq!(
                    zero + nb.iter().map(|b| b.2).sum::<u64>(),
                    hist.sample_count.unwrap()
                );
                for b in &hist.bucket {
                    let le = b.upper_bound.unwrap();
                    let below: u64 = nb
                        .iter()
                        .filter(|n| n.1 <= le * (1.0 + slack))
                        .map(|n| n.2)
                        .sum();
                    assert_eq!(zero + below, b.cumulative_count.unwrap(), "{name} le={le}");
                }
                checked[usize::from(schema == 0)] += 1;
            }
        }
        assert!(checked[0] > 10 && checked[1] > 5, "{checked:?}");

        // classic_in_protobuf = false: no classic buckets where there are native ones, the
        // rest unchanged.
        let mut w = ProtoWriter::new(false);
        render_into(&mut w, &s, &h);
        let lean = proto::decode(&w.finish()).unwrap();
        assert_eq!(lean.len(), families.len());
        for (a, b) in lean.iter().zip(&families) {
            for (ma, mb) in a.metric.iter().zip(&b.metric) {
                match (&ma.histogram, &mb.histogram) {
                    (Some(ha), Some(hb)) if hb.schema.is_some() => {
                        assert!(ha.bucket.is_empty());
                        let mut hb = hb.clone();
                        hb.bucket.clear();
                        assert_eq!(ha, &hb);
                    }
                    _ => assert_eq!(ma, mb),
                }
            }
        }
    }

    /// The `prometheus` crate's families (the process metrics) are the same series in both
    /// formats.
    #[test]
    fn process_families_in_both_formats() {
        let families = ProcessMetrics::new().families();
        let mut t = TextWriter::new();
        t.foreign(families.clone());
        let mut p = ProtoWriter::new(true);
        p.foreign(families);
        let want = parse_text(&t.finish());
        assert!(want.len() >= 6, "{want:?}");
        let got = proto::text_samples(&proto::decode(&p.finish()).unwrap());
        assert_eq!(got, want);
    }

    #[test]
    fn render_is_unchanged() {
        let (s, h) = sample();
        let got = render_sample(&s, &h).replace(
            &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
            "version=\"VERSION\"",
        );
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/exposition/testdata/render.txt"
        );
        if std::env::var_os("BLKOBS_BLESS").is_some() {
            std::fs::write(path, &got).unwrap();
        }
        let want = std::fs::read_to_string(path).unwrap();
        assert!(got == want, "render differs from {path}");
    }

    /// The same snapshot in OpenMetrics, with exemplars kept from two slow records: the
    /// structure the spec asks for (checked line by line here; Prometheus' own parser reads it in
    /// `tests/exemplars.rs`), and the samples equal to the text format's.
    #[test]
    fn openmetrics_render() {
        use observer_common::maps::{SlowEvent, EVENT_SLOW};
        let (mut s, mut h) = sample();
        let buckets = BucketMap::new(&crate::config::Histogram::default().buckets);
        h.exemplars.set_targets(buckets.targets());
        // A write on 7:0 (loop0 if this host has it, else "7:0"): its class must be in the
        // snapshot under the name the exemplars get.
        let dev = mkdev(7, 0);
        let disks = DiskView::default();
        let name = disks.name(dev);
        s.classes.insert(
            (name.clone(), Class(1)),
            s.classes[&("loop0".to_string(), Class(1))].clone(),
        );
        let record = |complete_ns: u64| {
            // SAFETY: SlowEvent is repr(C) plain data; all-zero is a valid value.
            let mut ev: SlowEvent = unsafe { std::mem::zeroed() };
            ev.kind = EVENT_SLOW;
            ev.dev = dev;
            ev.req.class = 1;
            ev.req.enter_ns = 1_000;
            ev.req.dispatch_ns = 2_000;
            ev.complete_ns = complete_ns;
            // SAFETY: the bytes of a plain-data value.
            unsafe {
                std::slice::from_raw_parts(
                    (&ev as *const SlowEvent).cast::<u8>(),
                    std::mem::size_of::<SlowEvent>(),
                )
            }
            .to_vec()
        };
        h.ingest(&record(150_002_000)); // queue 1 µs, device 150 ms
        h.ingest(&record(160_002_000)); // the same buckets: this one is their exemplar
        let info = AttachInfo {
            mode: "tp_btf",
            enter_tracepoint: "block_io_start",
            reaper: "request_state",
        };
        let write = |format| {
            let mut w = TextWriter::with_format(format);
            render(
                &mut w,
                &s,
                &h,
                &buckets,
                &info,
                &DeviceFilter::default(),
                &disks,
            );
            w.foreign(ProcessMetrics::new().families());
            w.finish()
        };
        let om = write(Format::OpenMetrics);
        let text = write(Format::Text);
        assert!(om.ends_with("# EOF\n") && om.matches("# EOF").count() == 1);
        // Every family: TYPE (counters without _total), UNIT where the name ends in its unit,
        // samples named after the family with the suffixes its type allows.
        let mut family: Option<(String, String)> = None;
        let mut counters = 0;
        for l in om.lines().filter(|l| *l != "# EOF") {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(!name.ends_with("_total"), "{l}");
                counters += (kind == "counter") as usize;
                family = Some((name.to_string(), kind.to_string()));
            } else if let Some(rest) = l.strip_prefix("# UNIT ") {
                let (name, unit) = rest.split_once(' ').unwrap();
                assert_eq!(Some(name), family.as_ref().map(|f| f.0.as_str()));
                assert!(name.ends_with(&format!("_{unit}")), "{l}");
            } else if let Some(rest) = l.strip_prefix("# HELP ") {
                // OpenMetrics escapes `"` in help text too.
                let help = rest.split_once(' ').unwrap().1;
                let b = help.as_bytes();
                assert!(
                    (0..b.len()).all(|i| b[i] != b'"' || (i > 0 && b[i - 1] == b'\\')),
                    "{l}"
                );
            } else {
                let (fam, kind) = family.clone().expect("a sample before any TYPE");
                let metric = l.split(['{', ' ']).next().unwrap();
                let suffixes: &[&str] = match kind.as_str() {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    _ => &[""],
                };
                assert!(
                    suffixes.iter().any(|x| metric == format!("{fam}{x}")),
                    "{l} in {fam}"
                );
                assert!(!l.ends_with(" inf") && !l.ends_with(" -inf"), "{l}");
            }
        }
        assert!(counters > 10);
        for unit in [
            "# UNIT blkobs_request_latency_seconds seconds",
            "# UNIT blkobs_bytes bytes",
            "# UNIT process_cpu_seconds seconds",
            "# TYPE blkobs_requests counter",
        ] {
            assert!(om.contains(unit), "{unit}");
        }
        // The exemplars: on the buckets of the stages the record has, naming the second record.
        let with: Vec<&str> = om.lines().filter(|l| l.contains(" # {")).collect();
        assert_eq!(with.len(), 3, "{with:#?}");
        let id = RequestIdOf(&h, h.slow_received);
        // The bucket each stage's latency is counted in, as the histogram folds it.
        let le = |ns: u64| {
            let i = buckets.targets()[observer_common::hist::bucket_index(ns)];
            buckets.bounds[i].to_string()
        };
        for (l, stage, le, value) in [
            (with[0], "queue", le(1_000), "0.000001"),
            (with[1], "device", le(160_000_000), "0.16"),
            (with[2], "total", le(160_001_000), "0.160001"),
        ] {
            assert!(
                l.starts_with(&format!(
                    "blkobs_request_latency_seconds_bucket{{device=\"{name}\",op=\"write\""
                )),
                "{l}"
            );
            assert!(
                l.contains(&format!("stage=\"{stage}\",le=\"{le}\"}} ")),
                "{l}"
            );
            let ex = l.split_once(" # ").unwrap().1;
            let parts: Vec<&str> = ex.split(' ').collect();
            assert_eq!(parts[0], format!("{{request_id=\"{id}\"}}"), "{l}");
            assert_eq!(parts[1], value, "{l}");
            let ts: f64 = parts[2].parse().unwrap();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            assert!(ts > 1.7e9 && ts <= now + 1.0, "{l}");
        }
        // Without exemplars, headers and EOF, the samples are the text format's (counters and
        // histograms alike; the crate's process metrics may differ between the two reads).
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("process_"))
                .map(|l| l.split(" # {").next().unwrap().to_string())
                .collect()
        };
        let (a, b) = (samples(&om), samples(&text));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x, y);
        }
        assert_eq!(a.len(), b.len());
        assert!(!text.contains("# {") && !text.contains("# EOF") && !text.contains("# UNIT"));
    }

    /// The id of the `seq`-th slow record of `h`.
    #[allow(non_snake_case)]
    fn RequestIdOf(h: &History, seq: u64) -> crate::collect::events::RequestId {
        crate::collect::events::RequestId { run: h.run, seq }
    }

    /// With `[cgroups] label` on (`owners`), `blkobs_requests_total` and `blkobs_bytes_total`
    /// have one series per owner cgroup, with the `cgroup` label last (`""` = unknown), and no
    /// series without it; the other per-class counters keep their labels.
    #[test]
    fn owner_label_splits_requests_and_bytes() {
        let (mut s, h) = sample();
        let mut owners = std::collections::BTreeMap::new();
        owners.insert(
            ("loop0".to_string(), Class(1), "/a".to_string()),
            (3u64, 12288u64),
        );
        owners.insert(("loop0".to_string(), Class(1), String::new()), (2, 0));
        s.owners = Some(owners);
        let text = render_sample(&s, &h);
        let lines = |name: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .map(str::to_string)
                .collect()
        };
        let flags = r#"preflush="false",fua="false",sync="false",meta="false",readahead="false",log="false",ioprio_class="none""#;
        assert_eq!(
            lines("blkobs_requests_total"),
            [
                format!(
                    r#"blkobs_requests_total{{device="loop0",op="write",{flags},cgroup=""}} 2"#
                ),
                format!(
                    r#"blkobs_requests_total{{device="loop0",op="write",{flags},cgroup="/a"}} 3"#
                ),
            ]
        );
        assert_eq!(
            lines("blkobs_bytes_total"),
            [format!(
                r#"blkobs_bytes_total{{device="loop0",op="write",{flags},cgroup="/a"}} 12288"#
            )]
        );
        assert!(lines("blkobs_merges_total")
            .iter()
            .all(|l| !l.contains("cgroup=")));
    }
}
