//! Native histograms over real I/O: the protobuf exposition (negotiated as Prometheus does)
//! against the text one from the same daemon, and a real Prometheus 2.42 with
//! `--enable-feature=native-histograms` against one without. Run as root:
//! `cargo test -p observer --test native -- --test-threads=1 --nocapture`.

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use observer::exposition::{
    native::LATENCY_EDGE_ERROR,
    proto::{self, model::MetricFamily},
};
use support::*;

/// What Prometheus 2.42 sends with `--enable-feature=native-histograms` (as received from
/// Debian's 2.42.0).
const PROMETHEUS_ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET /metrics` with `accept`: (Content-Type, body).
fn scrape_as(d: &Daemon, accept: &str) -> (String, Vec<u8>) {
    let resp = ureq::get(&format!("http://{}/metrics", d.addr))
        .set("Accept", accept)
        .timeout(Duration::from_secs(15))
        .call()
        .expect("GET /metrics");
    let ct = resp.header("Content-Type").unwrap_or_default().to_string();
    let mut body = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut body).unwrap();
    (ct, body)
}

/// The protobuf scrape of `d`, decoded.
fn scrape_protobuf(d: &Daemon) -> Vec<MetricFamily> {
    let (ct, body) = scrape_as(d, PROMETHEUS_ACCEPT);
    assert_eq!(ct, proto::CONTENT_TYPE);
    proto::decode(&body).expect("delimited MetricFamily messages")
}

/// The protobuf families as the text format's flat samples.
fn as_samples(families: &[MetricFamily]) -> Vec<Sample> {
    proto::text_samples(families)
        .into_iter()
        .map(|(name, labels, value)| Sample {
            name,
            labels: labels.into_iter().collect(),
            value,
        })
        .collect()
}

/// The samples of `device`, keyed by name and labels.
fn of_device(samples: &[Sample], device: &str) -> BTreeMap<(String, Vec<(String, String)>), f64> {
    samples
        .iter()
        .filter(|s| s.labels.get("device").map(String::as_str) == Some(device))
        .map(|s| {
            let labels = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            ((s.name.clone(), labels), s.value)
        })
        .collect()
}

/// Random reads and writes of 4 KiB … 256 KiB with fsyncs (flushes) on `dev`, direct.
fn load(dev: &LoopDev, seconds: u32) {
    fio(&[
        "--name=native",
        &format!("--filename={}", dev.path),
        "--direct=1",
        "--rw=randrw",
        "--bsrange=4k-256k",
        "--ioengine=libaio",
        "--iodepth=8",
        "--fsync=32",
        "--time_based=1",
        &format!("--runtime={seconds}"),
    ]);
}

/// One daemon scraped in the text format and in protobuf after real I/O on a loop device: every
/// series of that device has the same value in both (counters, gauges, classic buckets, sums,
/// counts), every family of the text is in the protobuf, and the native buckets of the latency
/// and request-size histograms hold exactly `_count` samples, as many up to each classic `le`
/// as its cumulative count (latency: native upper bounds up to 0.271 % above `le`).
#[test]
fn text_openmetrics_and_protobuf_scrapes_agree() {
    if !require_root_and(&["fio", "losetup"]) {
        return;
    }
    let dev = LoopDev::kernel_scheduler(256);
    let d = Daemon::start(&["--device", &dev.name]);
    load(&dev, 4);
    std::thread::sleep(Duration::from_millis(500));

    // Text, protobuf, text: the device is idle, so both texts agree and the protobuf between
    // them must too.
    let t1 = d.metrics_text();
    let families = scrape_protobuf(&d);
    let t2 = d.metrics_text();
    let (m1, m2) = (Metrics::parse(&t1), Metrics::parse(&t2));
    let (a, b) = (of_device(&m1.0, &dev.name), of_device(&m2.0, &dev.name));
    assert_eq!(a, b, "the device was not idle between the scrapes");
    let p = of_device(&as_samples(&families), &dev.name);
    assert_eq!(p.keys().collect::<Vec<_>>(), a.keys().collect::<Vec<_>>());
    let mut differ = Vec::new();
    for (k, v) in &a {
        if p[k].to_bits() != v.to_bits() {
            differ.push(format!("{k:?}: text {v}, protobuf {}", p[k]));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));

    // Every family of the text, in the same order.
    let text_families: Vec<&str> = t1
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let proto_families: Vec<&str> = families
        .iter()
        .map(|f| f.name.as_deref().unwrap())
        .collect();
    assert_eq!(proto_families, text_families);

    // Native buckets.
    let mut checked = BTreeMap::<&str, (usize, u64)>::new();
    for f in &families {
        let name = f.name.as_deref().unwrap();
        let slack = match name {
            "blkobs_request_latency_seconds" => LATENCY_EDGE_ERROR,
            "blkobs_request_size_bytes" => 0.0,
            _ => continue,
        };
        for m in &f.metric {
            let h = m.histogram.as_ref().unwrap();
            let nb = proto::native_buckets(h);
            let zero = h.zero_count.unwrap_or(0);
            let count = h.sample_count.unwrap();
            assert_eq!(zero + nb.iter().map(|b| b.2).sum::<u64>(), count, "{name}");
            for b in &h.bucket {
                let le = b.upper_bound.unwrap();
                let below: u64 = nb
                    .iter()
                    .filter(|n| n.1 <= le * (1.0 + slack))
                    .map(|n| n.2)
                    .sum::<u64>()
                    + zero;
                assert_eq!(below, b.cumulative_count.unwrap(), "{name} le={le}");
            }
            let e = checked.entry(name).or_default();
            e.0 += 1;
            e.1 += count;
        }
    }
    let requests = m1.sum("blkobs_requests_total", &[("device", &dev.name)]);
    eprintln!(
        "{} series of {} equal in text and protobuf ({} bytes text, {} families); native \
         histograms checked (series, samples): {checked:?}; {requests} requests",
        a.len(),
        dev.name,
        t1.len(),
        families.len()
    );
    assert!(checked
        .get("blkobs_request_latency_seconds")
        .is_some_and(|c| c.0 >= 3));
    assert!(checked
        .get("blkobs_request_size_bytes")
        .is_some_and(|c| c.0 >= 2));
    assert!(requests > 100.0, "{requests}");

    // OpenMetrics when preferred (with its exemplars: tests/dashboards.rs), with the same
    // samples as the text (exemplars, `# UNIT` and `# EOF` set aside for the text parser), and
    // the device still idle after it; any other Accept: text.
    let (ct, body) = scrape_as(&d, "application/openmetrics-text;version=1.0.0");
    assert!(
        ct.starts_with("application/openmetrics-text; version=1.0.0") && body.ends_with(b"# EOF\n"),
        "{ct}"
    );
    let om: String = String::from_utf8(body)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("# UNIT ") && *l != "# EOF")
        .map(|l| l.split(" # {").next().unwrap().to_string() + "\n")
        .collect();
    let t3 = d.metrics_text();
    assert_eq!(
        of_device(&Metrics::parse(&t3).0, &dev.name),
        a,
        "the device was not idle after the OpenMetrics scrape"
    );
    let o = of_device(&Metrics::parse(&om).0, &dev.name);
    assert_eq!(o.keys().collect::<Vec<_>>(), a.keys().collect::<Vec<_>>());
    let differ: Vec<String> = a
        .iter()
        .filter(|(k, v)| o[*k].to_bits() != v.to_bits())
        .map(|(k, v)| format!("{k:?}: text {v}, OpenMetrics {}", o[k]))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    eprintln!(
        "{} series of {} equal in text and OpenMetrics",
        o.len(),
        dev.name
    );
    for accept in ["*/*", "text/plain", "application/json"] {
        let (ct, _) = scrape_as(&d, accept);
        assert!(
            ct.starts_with("text/plain; version=0.0.4"),
            "{accept}: {ct}"
        );
    }
}

/// An instant query at `time` (Unix seconds): each result's labels and value.
fn query(base: &str, q: &str, time: f64) -> Vec<(BTreeMap<String, String>, f64)> {
    let data = prom_get(
        base,
        "/api/v1/query",
        &[("query", q), ("time", &format!("{time:.3}"))],
    )
    .unwrap_or_else(|e| panic!("{q}: {e}"));
    data["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels = r["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            (labels, r["value"][1].as_str().unwrap().parse().unwrap())
        })
        .collect()
}

/// The classic bucket `(le_prev, le]` (default `[histogram] buckets`: 1 µs · 2^k) that holds
/// `q` seconds.
fn classic_bucket(q: f64) -> (f64, f64) {
    let mut prev = 0.0;
    for k in 0..=26 {
        let le = (1u64 << k) as f64 * 1e-6;
        if q <= le {
            return (prev, le);
        }
        prev = le;
    }
    (prev, f64::INFINITY)
}

/// A real Prometheus 2.42 with `--enable-feature=native-histograms` (protobuf, native buckets)
/// and one without (text, classic buckets) scrape one daemon through the same load; for every
/// latency series that existed before the load, `histogram_quantile(0.99,
/// rate(blkobs_request_latency_seconds[1m]))` over the native series lies in the classic
/// bucket `(le_prev, le]` that the classic `histogram_quantile(0.99,
/// rate(blkobs_request_latency_seconds_bucket[1m]))` lies in, widened at the top by
/// [`LATENCY_EDGE_ERROR`] (0.271 %): both count the same samples below each `le`, and a native
/// bucket's upper bound is at most that far above the kernel edge it stands for. So
/// `|native − classic| < le − le_prev + 0.271 % · le`: one classic bucket (a factor of 2 with
/// the default buckets).
#[test]
fn prometheus_native_quantile_matches_classic() {
    if !require_root_and(&["prometheus", "fio", "losetup"]) {
        return;
    }
    let dir = TempDir::new("blkobs-native");
    let dev = LoopDev::kernel_scheduler(256);
    let port = free_port();
    let mut cmd = Command::new(observer_bin());
    cmd.args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--device",
        &dev.name,
    ]);
    let d = Daemon::spawn(cmd, format!("127.0.0.1:{port}"), &dir.join("observer.log"));

    // The same load before: every series (and every bucket around the p99) already counts when
    // both servers' windows start, so the per-bucket counter extrapolation of rate() cannot
    // tilt one format's buckets against the other's.
    load(&dev, 3);
    let (mut native, nbase, nlog) = prometheus(
        &dir,
        "native",
        port,
        None,
        &["--enable-feature=native-histograms"],
    );
    let (mut classic, cbase, clog) = prometheus(&dir, "classic", port, None, &[]);
    let before = d.scrape();
    let requests = before.sum("blkobs_requests_total", &[("device", &dev.name)]);
    let series: BTreeSet<BTreeMap<String, String>> = before
        .select(
            "blkobs_request_latency_seconds_count",
            &[("device", &dev.name)],
        )
        .map(|s| s.labels.clone())
        .collect();
    let probe = format!("sum(blkobs_requests_total{{device=\"{}\"}})", dev.name);
    let caught_up = |base: &str| {
        prom_get(base, "/api/v1/query", &[("query", &probe)])
            .ok()
            .and_then(|d| d["result"][0]["value"][1].as_str()?.parse::<f64>().ok())
            == Some(requests)
    };
    let up = wait_for(Duration::from_secs(30), || {
        for (p, log) in [(&mut native, &nlog), (&mut classic, &clog)] {
            assert!(
                p.running(),
                "prometheus exited:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        (caught_up(&nbase) && caught_up(&cbase)).then_some(())
    });
    assert!(
        up.is_some(),
        "the servers never scraped the counts of before the load"
    );
    // The native server holds native histograms (no classic _bucket series).
    let kinds = prom_get(
        &nbase,
        "/api/v1/query",
        &[(
            "query",
            &format!("blkobs_request_latency_seconds{{device=\"{}\"}}", dev.name),
        )],
    )
    .unwrap();
    assert!(
        kinds["result"][0].get("histogram").is_some(),
        "not a native histogram: {kinds}"
    );

    load(&dev, 10);
    // Both servers scrape the idle counts at least twice more.
    std::thread::sleep(Duration::from_secs(3));
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let sel = format!("device=\"{}\"", dev.name);
    let nq = query(
        &nbase,
        &format!("histogram_quantile(0.99, rate(blkobs_request_latency_seconds{{{sel}}}[1m]))"),
        t,
    );
    let cq = query(
        &cbase,
        &format!(
            "histogram_quantile(0.99, rate(blkobs_request_latency_seconds_bucket{{{sel}}}[1m]))"
        ),
        t,
    );
    let classic_by: BTreeMap<_, _> = cq.into_iter().collect();
    let mut compared = 0;
    for (labels, qn) in nq {
        let Some(&qc) = classic_by.get(&labels) else {
            continue;
        };
        let mut own = labels.clone();
        own.retain(|k, _| k != "instance" && k != "job");
        if !series.contains(&own) || !qn.is_finite() || !qc.is_finite() {
            continue;
        }
        let (lo, hi) = classic_bucket(qc);
        eprintln!(
            "p99 {} {} {}: native {:.6e} s, classic {:.6e} s (classic bucket ({lo:e}, {hi:e}]), \
             native/classic {:.4}",
            labels["op"],
            labels["stage"],
            labels
                .iter()
                .filter(|(k, v)| !["device", "op", "stage"].contains(&k.as_str()) && *v == "true")
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            qn,
            qc,
            qn / qc
        );
        assert!(
            qn > lo && qn <= hi * (1.0 + LATENCY_EDGE_ERROR),
            "{labels:?}: native p99 {qn} outside the classic bucket ({lo}, {hi}] of classic p99 {qc} (+0.271 %)"
        );
        compared += 1;
    }
    eprintln!("{compared} latency series compared");
    assert!(
        compared >= 3,
        "only {compared} series in both servers' results"
    );
}
