//! Listening beyond loopback, protected the Prometheus way: the web configuration file
//! (`--web.config.file`, exporter-toolkit's format) with TLS, client certificates and basic
//! auth, checked with a real TLS client (`curl`, OpenSSL) against the real daemon on loopback;
//! and the warning for plain HTTP beyond loopback. Run as root (the daemon loads its programs):
//! `cargo test -p observer --test webconfig -- --test-threads=1 --nocapture`.

mod support;

use std::{path::Path, process::Command, time::Duration};

use support::*;

/// Root (the daemon loads eBPF programs), kernel BTF and curl.
fn can_run(test: &str) -> bool {
    require_root_and(&["curl"])
        && require(
            Path::new("/sys/kernel/btf/vmlinux").exists(),
            &format!("{test}: needs /sys/kernel/btf/vmlinux"),
        )
}

/// The daemon on a free loopback port with `--web.config.file web` and `extra` arguments, log
/// in `log`; up once `ready(addr)` holds.
fn start(web: &Path, extra: &[&str], log: &Path, ready: impl Fn(&str) -> bool) -> Daemon {
    let addr = free_addr();
    let mut cmd = Command::new(observer_bin());
    cmd.args(["--listen", &addr, "--web.config.file"])
        .arg(web)
        .args(extra)
        .env("OBSERVER_LOG", "info")
        .env("NO_COLOR", "1");
    Daemon::spawn_until(cmd, addr, log, ready)
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The value of a `blkobs_http_rejected_total{reason}` series in `metrics`.
fn rejected(metrics: &str, reason: &str) -> f64 {
    Metrics::parse(metrics).sum("blkobs_http_rejected_total", &[("reason", reason)])
}

/// TLS + basic auth: `curl --cacert` with the right password gets every path; a wrong
/// password, an unknown user or no credentials get 401 with `WWW-Authenticate: Basic` on every
/// path (`/healthz` included, as exporter-toolkit does); plain HTTP to the TLS port gets 400
/// saying to use https; a client that does not trust the CA fails the handshake. Refusals are
/// counted in `blkobs_http_rejected_total`.
#[test]
fn tls_and_basic_auth_protect_every_path() {
    if !can_run("tls_and_basic_auth_protect_every_path") {
        return;
    }
    let pki = Pki::new();
    let web = pki.web_config(&format!(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {}\n  grafana: {}\nhttp_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
        bcrypt_hash("right password"),
        bcrypt_hash("another one"),
    ));
    let log = pki.path("observer.log");
    let right = ["-u", "prometheus:right password"];
    let d = start(&web, &[], &log, |addr| {
        curl_https(&pki, addr, "/healthz", &right).status == 200
    });

    for path in observer::http::ENDPOINTS.iter().map(|e| e.path) {
        let r = curl_https(&pki, &d.addr, path, &right);
        assert_eq!((r.exit, r.status), (0, 200), "{path}: {r:?}");
        assert!(
            r.headers.contains("x-content-type-options: nosniff"),
            "{path}: {}",
            r.headers
        );
    }
    let m = curl_https(&pki, &d.addr, "/metrics", &right);
    assert!(m.body.contains("blkobs_build_info{"), "{}", m.body);
    let other = curl_https(&pki, &d.addr, "/healthz", &["-u", "grafana:another one"]);
    assert_eq!(other.status, 200, "{other:?}");

    let mut refused = 0;
    for (who, creds) in [
        ("wrong password", vec!["-u", "prometheus:wrong"]),
        (
            "other user's password",
            vec!["-u", "prometheus:another one"],
        ),
        ("unknown user", vec!["-u", "nobody:right password"]),
        ("no credentials", vec![]),
    ] {
        let paths = observer::http::ENDPOINTS.iter().map(|e| e.path);
        for path in paths.chain(["/no-such-path"]) {
            let r = curl_https(&pki, &d.addr, path, &creds);
            assert_eq!(r.status, 401, "{who} {path}: {r:?}");
            assert!(
                r.headers.contains("www-authenticate: basic"),
                "{who} {path}: {}",
                r.headers
            );
            assert!(!r.body.contains("blkobs_"), "{who} {path}: {}", r.body);
            refused += 1;
        }
    }

    // Plain HTTP to the TLS port: a 400 that says what to do, no data.
    let (status, body) = d.get("/metrics").expect("plain HTTP to the TLS port");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("https://"), "{body}");
    // A client that does not trust the server's CA refuses the handshake (curl: 60).
    let untrusting = curl(&[
        "-u",
        "prometheus:right password",
        &format!("https://{}/metrics", d.addr),
    ]);
    assert_eq!(untrusting.status, 0, "{untrusting:?}");
    assert_ne!(untrusting.exit, 0, "{untrusting:?}");

    let metrics = curl_https(&pki, &d.addr, "/metrics", &right).body;
    assert_eq!(
        rejected(&metrics, "unauthorized"),
        refused as f64,
        "{metrics}"
    );
    assert!(rejected(&metrics, "tls_handshake") >= 2.0, "{metrics}");
    let text = read(&log);
    assert!(
        text.contains("web config file in effect") && text.contains("tls=true"),
        "{text}"
    );
    assert!(
        !text.contains("without authentication"),
        "no exposure warning on loopback with TLS:\n{text}"
    );
    eprintln!("{refused} unauthenticated requests refused with 401, plain HTTP answered 400");
}

/// `client_auth_type: RequireAndVerifyClientCert`: a client without a certificate, or with one
/// from another CA, is refused in the handshake; with a certificate signed by
/// `client_ca_file` it is served, over TLS 1.3 and TLS 1.2.
#[test]
fn client_certificates_are_required_and_verified() {
    if !can_run("client_certificates_are_required_and_verified") {
        return;
    }
    let pki = Pki::new();
    let web = pki.web_config(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
    );
    let (cert, key) = (pki.path("client.pem"), pki.path("client.key"));
    let ours = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let (scert, skey) = (pki.path("stranger.pem"), pki.path("stranger.key"));
    let stranger = [
        "--cert",
        scert.to_str().unwrap(),
        "--key",
        skey.to_str().unwrap(),
    ];
    let log = pki.path("observer.log");
    let d = start(&web, &[], &log, |addr| {
        curl_https(&pki, addr, "/healthz", &ours).status == 200
    });

    for tls in [&["--tlsv1.3"][..], &["--tlsv1.2", "--tls-max", "1.2"]] {
        let with = |extra: &[&str]| {
            let mut args = tls.to_vec();
            args.extend_from_slice(extra);
            curl_https(&pki, &d.addr, "/metrics", &args)
        };
        let r = with(&ours);
        assert_eq!((r.exit, r.status), (0, 200), "{tls:?} client cert: {r:?}");
        assert!(r.body.contains("blkobs_build_info{"));
        let r = with(&[]);
        assert!(
            r.exit != 0 && r.status == 0,
            "{tls:?} without a client cert: {r:?}"
        );
        let r = with(&stranger);
        assert!(
            r.exit != 0 && r.status == 0,
            "{tls:?} with another CA's client cert: {r:?}"
        );
        eprintln!(
            "{tls:?}: another CA's client certificate refused: {}",
            r.stderr.trim()
        );
    }
    let metrics = curl_https(&pki, &d.addr, "/metrics", &ours).body;
    assert!(rejected(&metrics, "tls_handshake") >= 4.0, "{metrics}");
    let text = read(&log);
    assert!(
        text.contains("TLS handshake failed"),
        "the refused handshakes are logged:\n{text}"
    );
}

/// A bad web config file stops the daemon at start with exit status 2 and the problem named;
/// on SIGHUP a bad file is rejected (the old configuration keeps serving), a good one applies
/// (new password, old one refused).
#[test]
fn bad_web_config_exits_2_and_reload_keeps_the_old_one() {
    if !can_run("bad_web_config_exits_2_and_reload_keeps_the_old_one") {
        return;
    }
    let pki = Pki::new();
    for (yaml, want) in [
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth: x\n",
            "unknown field `client_auth`",
        ),
        (
            "tls_server_config:\n  cert_file: missing.pem\n  key_file: server.key\n",
            "tls_server_config.cert_file",
        ),
        (
            "basic_auth_users:\n  prometheus: plain-text\n",
            "basic_auth_users.prometheus: not a bcrypt hash",
        ),
    ] {
        let web = pki.web_config(yaml);
        let out = Command::new(observer_bin())
            .args(["--listen", &free_addr(), "--web.config.file"])
            .arg(&web)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {err}");
        assert!(
            err.contains("web config file") && err.contains(want),
            "{yaml}: {err}"
        );
    }
    let out = Command::new(observer_bin())
        .args(["--listen", &free_addr(), "--web.config.file"])
        .arg(pki.path("nonexistent.yml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonexistent.yml"));

    let config = |password: &str| {
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {}\n",
            bcrypt_hash(password)
        )
    };
    let web = pki.web_config(&config("first"));
    let log = pki.path("observer.log");
    let first = ["-u", "prometheus:first"];
    let mut d = start(&web, &[], &log, |addr| {
        curl_https(&pki, addr, "/healthz", &first).status == 200
    });
    let addr = d.addr.clone();
    let status = |creds: &[&str]| curl_https(&pki, &addr, "/healthz", creds).status;

    pki.web_config("tls_server_config:\n  cert_file: server.pem\n  key_fiel: server.key\n");
    d.signal(libc::SIGHUP);
    let rejected_logged = wait_for(Duration::from_secs(10), || {
        let t = read(&log);
        (t.contains("configuration reload rejected") && t.contains("key_fiel")).then_some(())
    });
    assert!(rejected_logged.is_some(), "{}", read(&log));
    assert_eq!(status(&first), 200, "the old web config keeps serving");

    pki.web_config(&config("second"));
    d.signal(libc::SIGHUP);
    let applied = wait_for(Duration::from_secs(10), || {
        (status(&["-u", "prometheus:second"]) == 200).then_some(())
    });
    assert!(
        applied.is_some(),
        "new password not applied:\n{}",
        read(&log)
    );
    assert_eq!(
        status(&first),
        401,
        "the old password is refused after reload"
    );
    assert!(read(&log).contains("web configuration reloaded"));
}

/// Plain HTTP on a non-loopback address without a web config file works, with a warning at
/// start that says what to do; on loopback there is none.
#[test]
fn plain_http_beyond_loopback_warns() {
    if !can_run("plain_http_beyond_loopback_warns") {
        return;
    }
    let dir = TempDir::new("blkobs-expose");
    let port = free_port();
    let log = dir.join("observer.log");
    let mut cmd = Command::new(observer_bin());
    // Bound on every address; only ever contacted on loopback.
    cmd.args(["--listen", &format!("0.0.0.0:{port}")])
        .env("OBSERVER_LOG", "info")
        .env("NO_COLOR", "1");
    let d = Daemon::spawn(cmd, format!("127.0.0.1:{port}"), &log);
    assert_eq!(d.get("/healthz").unwrap().0, 200);
    let text = read(&log);
    let line = text
        .lines()
        .find(|l| l.contains("WARN") && l.contains("plain HTTP without authentication"))
        .unwrap_or_else(|| panic!("no warning:\n{text}"));
    assert!(
        line.contains("0.0.0.0:") && line.contains("--web.config.file"),
        "{line}"
    );
    drop(d);

    let log = dir.join("loopback.log");
    let addr = free_addr();
    let mut cmd = Command::new(observer_bin());
    cmd.args(["--listen", &addr])
        .env("OBSERVER_LOG", "info")
        .env("NO_COLOR", "1");
    let d = Daemon::spawn(cmd, addr, &log);
    assert_eq!(d.get("/healthz").unwrap().0, 200);
    assert!(
        !read(&log).contains("without authentication"),
        "{}",
        read(&log)
    );
}
