//! The HTTP surface as an exporter: the landing page, strict query parameters, and what hostile
//! or careless clients cannot do to it. Run as root (the daemon loads its programs):
//! `cargo test -p observer --test api -- --test-threads=1 --nocapture`.

mod support;

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use support::*;

/// `href="..."` targets of an HTML page, in order.
fn hrefs(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split_once('"').map(|(h, _)| h.to_string()))
        .collect()
}

/// `GET /` is an HTML page whose links reach every endpoint (each answers 200).
#[test]
fn landing_page_links_every_endpoint() {
    if !require_root("landing_page_links_every_endpoint") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let r = ureq::get(&format!("http://{}/", daemon.addr))
        .timeout(Duration::from_secs(10))
        .call()
        .expect("GET /");
    assert_eq!(r.status(), 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = r.into_string().unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    let links = hrefs(&html);
    // Every endpoint of the one table (http/endpoints.rs) but `/` itself, in its order.
    let want: Vec<&str> = observer::http::ENDPOINTS[1..]
        .iter()
        .map(|e| &e.path[1..])
        .collect();
    assert!(want.len() >= 8 && want.contains(&"stalls"), "{want:?}");
    assert_eq!(links, want, "{html}");
    for l in &links {
        let (status, body) = daemon.get(&format!("/{l}")).unwrap();
        assert_eq!(status, 200, "/{l} linked from / answers {status}: {body}");
        assert!(!body.is_empty(), "/{l}");
    }
    // Still a 404 (JSON, naming the landing page) for what does not exist.
    let (status, body) = daemon.get("/index.html").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("try /,"), "{body}");
}

/// A loop index nobody uses (no `/sys/block/loopN`), from 7000 up.
fn free_loop_index() -> u32 {
    (7000..8000)
        .find(|i| !std::path::Path::new(&format!("/sys/block/loop{i}")).exists())
        .expect("a free loop index below 8000")
}

/// Every endpoint rejects, per parameter, bad values (400), parameters it does not take (400),
/// repeated ones (400) and devices that are not disks it has seen (404), each error naming the
/// parameter; a disk that existed while the daemon ran stays accepted after it is gone.
#[test]
fn api_rejects_bad_unknown_and_repeated_parameters() {
    if !require_root("api_rejects_bad_unknown_and_repeated_parameters") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let disk = LoopDev::partitioned(64, "none", "label: dos\nstart=2048, size=65536\n");
    let d = disk.name.clone();
    let part = disk.part(1).trim_start_matches("/dev/").to_string();
    let majmin = disk.sysfs("dev");
    // A disk that exists while the daemon sees it, then goes away (LOOP_CTL_REMOVE).
    let gone = {
        let file = std::path::PathBuf::from(format!("/dev/shm/{}.img", unique("blkobs-api")));
        std::fs::File::create(&file)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        let index = free_loop_index();
        let dev =
            LoopDev::at_index(index, file.clone(), "none").expect("loop device at a free index");
        let name = dev.name.clone();
        // The daemon rescans /sys/block every second.
        std::thread::sleep(Duration::from_millis(2500));
        drop(dev);
        let _ = std::fs::remove_file(&file);
        assert!(
            !std::path::Path::new(&format!("/sys/block/{name}")).exists(),
            "{name} still exists"
        );
        name
    };

    let mut cases: Vec<(String, u16, &str)> = [
        // /stalls: device, since, min, limit, format.
        ("/stalls?since=bogus", 400, "since"),
        ("/stalls?since=-5s", 400, "since"),
        ("/stalls?since=5", 400, "since"),
        ("/stalls?since=1s&since=2s", 400, "since"),
        ("/stalls?min=fast", 400, "min"),
        ("/stalls?min=-1ms", 400, "min"),
        ("/stalls?min=1ms&min=2ms", 400, "min"),
        ("/stalls?limit=0", 400, "limit"),
        ("/stalls?limit=abc", 400, "limit"),
        ("/stalls?limit=100001", 400, "limit"),
        ("/stalls?limit=", 400, "limit"),
        ("/stalls?limit=5&limit=6", 400, "limit"),
        ("/stalls?limit=5&limit=5", 400, "limit"),
        ("/stalls?format=xml", 400, "format"),
        ("/stalls?format=json&format=text", 400, "format"),
        ("/stalls?device=", 400, "device"),
        ("/stalls?device=a%2Fb", 400, "device"),
        ("/stalls?device=..", 400, "device"),
        ("/stalls?device=sdzz9", 404, "device"),
        ("/stalls?device=DISK&device=DISK", 400, "device"),
        // id: a slow request's `<run>-<seq>`; one not kept is 404.
        ("/stalls?id=", 400, "id"),
        ("/stalls?id=42", 400, "id"),
        ("/stalls?id=a-1", 400, "id"),
        ("/stalls?id=1-2-3", 400, "id"),
        ("/stalls?id=1-99999999999999999999999", 400, "id"),
        ("/stalls?id=1-1&id=1-1", 400, "id"),
        ("/stalls?id=1-1", 404, "id"),
        ("/stalls?id=1-1&format=json", 404, "id"),
        ("/stalls?device=PART", 404, "device"),
        ("/stalls?what=1", 400, "what"),
        ("/stalls?limit=5&bogus", 400, "bogus"),
        // /merges: device, since, limit, format.
        ("/merges?min=1ms", 400, "min"),
        ("/merges?limit=0", 400, "limit"),
        ("/merges?limit=3&limit=3", 400, "limit"),
        ("/merges?format=xml", 400, "format"),
        ("/merges?since=soon", 400, "since"),
        ("/merges?device=sdzz9", 404, "device"),
        ("/merges?device=PART", 404, "device"),
        ("/merges?bogus=1", 400, "bogus"),
        // /inflight: device, min, limit.
        ("/inflight?since=1s", 400, "since"),
        ("/inflight?format=json", 400, "format"),
        ("/inflight?min=1x", 400, "min"),
        ("/inflight?min=1ms&min=1ms", 400, "min"),
        ("/inflight?limit=0", 400, "limit"),
        ("/inflight?limit=abc", 400, "limit"),
        ("/inflight?limit=100001", 400, "limit"),
        ("/inflight?limit=5&limit=6", 400, "limit"),
        ("/inflight?device=", 400, "device"),
        ("/inflight?device=sdzz9", 404, "device"),
        ("/inflight?device=PART", 404, "device"),
        ("/inflight?device=DISK&device=sdzz9", 400, "device"),
        ("/inflight?bogus=1", 400, "bogus"),
        // /histograms: device, since.
        ("/histograms?limit=5", 400, "limit"),
        ("/histograms?min=1ms", 400, "min"),
        ("/histograms?format=json", 400, "format"),
        ("/histograms?since=2%20h", 400, "since"),
        ("/histograms?since=1m&since=1m", 400, "since"),
        ("/histograms?device=sdzz9", 404, "device"),
        ("/histograms?device=PART", 404, "device"),
        ("/histograms?device=DISK&device=DISK", 400, "device"),
        ("/histograms?bogus=1", 400, "bogus"),
        // /counters: device.
        ("/counters?since=1m", 400, "since"),
        ("/counters?device=sdzz9", 404, "device"),
        ("/counters?device=PART", 404, "device"),
        ("/counters?device=DISK&device=DISK", 400, "device"),
        // Endpoints without parameters.
        ("/devices?bogus=1", 400, "bogus"),
        ("/devices?device=DISK", 400, "device"),
        ("/metrics?collect%5B%5D=x", 400, "collect[]"),
        ("/healthz?x", 400, "x"),
        ("/openapi.yaml?x=1", 400, "x"),
        ("/?x=1", 400, "x"),
    ]
    .into_iter()
    .map(|(p, s, k)| (p.replace("DISK", &d).replace("PART", &part), s, k))
    .collect();
    // Every endpoint of the one table rejects an unknown parameter, and each parameter of the
    // API that it does not accept (its table entry lists the ones it does).
    let all_params = ["device", "since", "min", "limit", "format", "id"];
    for e in observer::http::ENDPOINTS {
        cases.push((format!("{}?bogus=1", e.path), 400, "bogus"));
        for p in all_params.iter().filter(|p| !e.params.contains(p)) {
            cases.push((format!("{}?{p}=1", e.path), 400, p));
        }
    }
    for (path, want, param) in &cases {
        let (status, body) = daemon.get(path).unwrap();
        assert_eq!(status, *want, "{path}: {body}");
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(v["parameter"], *param, "{path}: {body}");
        assert!(v["error"].as_str().unwrap().len() > 10, "{path}: {body}");
    }
    eprintln!("{} rejected requests checked", cases.len());
    // What the errors say.
    let (_, body) = daemon.get(&format!("/stalls?device={part}")).unwrap();
    assert!(
        body.contains(&format!("device={d}")),
        "partition error names its disk: {body}"
    );
    let (_, body) = daemon.get("/stalls?device=sdzz9").unwrap();
    assert!(body.contains("GET /devices"), "{body}");
    let (_, body) = daemon.get("/inflight?since=1s").unwrap();
    assert!(body.contains("accepted: device, min, limit"), "{body}");
    let (_, body) = daemon.get("/stalls?limit=5&limit=6").unwrap();
    assert!(body.contains("more than once"), "{body}");

    // Accepted: every parameter of every endpoint (its table entry), the disk by name, by
    // MAJ:MIN, and one gone.
    let value = |p: &str| match p {
        "device" => d.clone(),
        "since" => "30s".to_string(),
        "min" => "1ms".to_string(),
        "limit" => "5".to_string(),
        "format" => "json".to_string(),
        // No slow request here to name: the id cases are above (400, 404) and in
        // tests/dashboards.rs (an exemplar's id resolved).
        "id" => String::new(),
        other => panic!("no sample value for {other}"),
    };
    let mut accepted: Vec<String> = Vec::new();
    for e in observer::http::ENDPOINTS {
        accepted.push(e.path.to_string());
        if !e.params.is_empty() {
            let q: Vec<String> = e
                .params
                .iter()
                .filter(|p| **p != "id")
                .map(|p| format!("{p}={}", value(p)))
                .collect();
            accepted.push(format!("{}?{}", e.path, q.join("&")));
        }
    }
    for path in accepted.into_iter().chain([
        "/stalls".to_string(),
        "/stalls?".into(),
        format!("/stalls?device={d}&since=30s&min=1ms&limit=5&format=json"),
        "/stalls?since=1764450000&min=1ms&limit=3".into(),
        format!("/stalls?device={majmin}"),
        format!("/stalls?device={gone}&format=json"),
        format!("/merges?device={d}&since=30s&limit=5&format=json"),
        format!("/merges?device={gone}"),
        format!("/inflight?device={d}&min=1ms&limit=5"),
        format!("/inflight?device={gone}"),
        format!("/histograms?device={d}&since=1m"),
        format!("/histograms?device={gone}"),
        format!("/counters?device={majmin}"),
        format!("/counters?device={gone}"),
        "/devices".into(),
        "/metrics".into(),
        "/healthz".into(),
        "/openapi.yaml".into(),
        "/".into(),
    ]) {
        let (status, body) = daemon.get(&path).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, body) = daemon
        .get("/stalls?since=1764450000&min=1ms&limit=3")
        .unwrap();
    assert!(body.contains("STUCK NOW"));
    let r = ureq::get(&format!("http://{}/stalls", daemon.addr))
        .set("Accept", "application/json")
        .call()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.into_string().unwrap()).unwrap();
    assert!(v["slow"].is_array() && v["stuck"].is_array() && v["episodes"].is_array());
    let (status, spec) = daemon.get("/openapi.yaml").unwrap();
    assert_eq!(status, 200);
    assert!(spec.starts_with("openapi: 3"));
    let (status, _) = daemon.get("/no/such/path").unwrap();
    assert_eq!(status, 404);
}

/// Whether the server has closed `s`: EOF, a reset, or a response followed by EOF, within
/// `within`.
fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// GET `path` on a fresh connection; (status, elapsed).
fn timed_get(d: &Daemon, path: &str) -> (u16, Duration) {
    let t = Instant::now();
    let (status, _) = d.get(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (status, t.elapsed())
}

/// 500 idle connections and 8 slowloris clients (a request header sent one byte every 200 ms)
/// held open, with the default connection cap (512): `/metrics` still answers within 1 s, and
/// the server closes every one of them once the header read timeout (here 3 s) has passed
/// since it connected — the slowloris clients too, although they keep sending.
#[test]
fn idle_and_slowloris_clients_do_not_block_scrapes() {
    if !require_root("idle_and_slowloris_clients_do_not_block_scrapes") {
        return;
    }
    const IDLE: usize = 500;
    const SLOW: usize = 8;
    let timeout = Duration::from_secs(3);
    let daemon = Daemon::start(&["--header-read-timeout", "3s"]);
    let addr = daemon.addr.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let slow: Vec<_> = (0..SLOW)
        .map(|i| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                let t = Instant::now();
                let head = format!("GET /metrics HTTP/1.1\r\nHost: slowloris-{i}\r\nX-Slow: ");
                for b in head.bytes().chain(std::iter::repeat(b'a')) {
                    if stop.load(Ordering::Relaxed) || t.elapsed() > Duration::from_secs(20) {
                        return None;
                    }
                    if s.write_all(&[b]).is_err() {
                        return Some(t.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                unreachable!()
            })
        })
        .collect();
    let t_idle = Instant::now();
    let mut idle: Vec<(TcpStream, Instant)> = (0..IDLE)
        .map(|_| {
            let s = TcpStream::connect(&addr).expect("idle connection");
            (s, Instant::now())
        })
        .collect();
    let opened = t_idle.elapsed();
    std::thread::sleep(Duration::from_millis(300));

    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let (status, took) = timed_get(&daemon, "/metrics");
        assert_eq!(status, 200);
        worst = worst.max(took);
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, health) = timed_get(&daemon, "/healthz");
    assert_eq!(status, 200);
    eprintln!(
        "{IDLE} idle connections (opened in {opened:?}) + {SLOW} slowloris: /metrics answered in at most {worst:?}, /healthz in {health:?}"
    );
    assert!(worst < Duration::from_secs(1), "/metrics took {worst:?}");

    // Every idle connection closed by the server after the header read timeout (seen in
    // connect order, so a close is seen no earlier than it happened).
    let (mut first, mut last) = (None, Duration::ZERO);
    for (i, (s, at)) in idle.iter_mut().enumerate() {
        let left = (timeout + Duration::from_secs(3)).saturating_sub(at.elapsed());
        assert!(
            closed_by_server(s, left.max(Duration::from_millis(1))),
            "idle connection {i} still open {:?} after it connected",
            at.elapsed()
        );
        first.get_or_insert(at.elapsed());
        last = last.max(at.elapsed());
    }
    let first = first.unwrap();
    eprintln!(
        "{IDLE} idle connections closed by the server: the first {first:?} after it connected, each within {last:?} of its connect"
    );
    assert!(
        first >= timeout - Duration::from_millis(200),
        "closed too early: {first:?}"
    );
    let closed: Vec<Option<Duration>> = slow.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    eprintln!("slowloris clients closed after {closed:?}");
    for c in &closed {
        let c = c.expect("a slowloris client was never closed");
        // Its first write after the close may still succeed: up to 2 writes (400 ms) late.
        assert!(
            c >= timeout && c <= timeout + Duration::from_secs(2),
            "{c:?}"
        );
    }
    let m = daemon.scrape();
    assert_eq!(
        m.sum(
            "blkobs_http_rejected_total",
            &[("reason", "max_connections")]
        ),
        0.0
    );
}

/// The caps refuse what exceeds them, at once, and count it: a request target over
/// `--max-uri-bytes` gets 414; a connection over `--max-connections` is closed as soon as it
/// is accepted; requests over `--max-requests` get 503 (JSON) instead of waiting.
#[test]
fn http_limits_refuse_excess_clients() {
    if !require_root("http_limits_refuse_excess_clients") {
        return;
    }
    let daemon = Daemon::start(&[
        "--max-connections",
        "20",
        "--max-requests",
        "1",
        "--max-uri-bytes",
        "256",
    ]);
    let addr = daemon.addr.clone();
    let (status, body) = daemon
        .get(&format!("/stalls?device={}", "a".repeat(300)))
        .unwrap();
    assert_eq!(status, 414, "{body}");
    assert!(body.contains("max_uri_bytes"), "{body}");
    let (status, _) = daemon
        .get(&format!("/stalls?format=json&x={}", "a".repeat(200)))
        .unwrap();
    assert_eq!(status, 400, "under the cap: the parameter is checked");

    // The server ends those connections once it reads their close: let it, so that each of
    // the 20 below holds a slot.
    std::thread::sleep(Duration::from_millis(300));
    let idle: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = TcpStream::connect(&addr).unwrap();
    let t = Instant::now();
    assert!(
        closed_by_server(&mut extra, Duration::from_secs(3)),
        "21st connection kept open"
    );
    eprintln!(
        "connection over max_connections closed after {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    drop(idle);
    assert!(
        wait_every(Duration::from_millis(50), Duration::from_secs(5), || {
            daemon.get("/healthz").is_ok_and(|(s, _)| s == 200)
        }),
        "not served again after the idle connections closed"
    );

    // 8 clients scraping as fast as they can against max_requests = 1.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (url, stop) = (format!("http://{addr}/metrics"), stop.clone());
            std::thread::spawn(move || {
                // One keep-alive connection per client, as Prometheus scrapes: 8 connections
                // in all, well under max_connections.
                let agent = ureq::Agent::new();
                let (mut ok, mut refused) = (0u32, 0u32);
                let t = Instant::now();
                while !stop.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(10) {
                    match agent.get(&url).call() {
                        Ok(r) if r.status() == 200 => {
                            r.into_string().unwrap();
                            ok += 1;
                        }
                        Err(ureq::Error::Status(503, r)) => {
                            let body = r.into_string().unwrap();
                            assert!(body.contains("max_requests"), "{body}");
                            refused += 1;
                        }
                        Ok(r) => panic!("status {}", r.status()),
                        Err(e) => panic!("{e}"),
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let (ok, refused) = clients
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    eprintln!("8 clients for 3 s, max_requests 1: {ok} scrapes served, {refused} refused with 503");
    assert!(ok > 0 && refused > 0, "{ok} served, {refused} refused");
    let m = daemon.scrape();
    let count = |reason| m.sum("blkobs_http_rejected_total", &[("reason", reason)]);
    assert_eq!(count("max_requests"), refused as f64);
    assert_eq!(count("uri_too_long"), 1.0);
    assert!(count("max_connections") >= 1.0);
}
