//! The Grafana dashboards in dashboards/: structure checks (no root needed), and every PromQL
//! expression evaluated by Debian's real Prometheus server scraping the real daemon while fio
//! drives real I/O on a loop device. An expression that errors or returns no data fails the
//! test, as does a template variable query with no values.
//!
//! The live test sets `kernel.bpf_stats_enabled=1` for its run (the eBPF cost panels need it)
//! and restores the old value.
//!
//! Run as root: `cargo test -p observer --test dashboards`. Without root or tools the live test
//! skips, except under CI (`CI` set to anything truthy), where it fails.

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::Command,
    time::Duration,
};

use serde_json::Value;
use support::*;

/// Grafana's built-in variables the dashboards may use, with the value the test substitutes
/// (scrape interval 1 s: Grafana's $__rate_interval would be ≥ 4 s; 10 s is safe).
const BUILTINS: &[(&str, &str)] = &[
    ("__rate_interval", "10s"),
    ("__interval", "2s"),
    ("__range", "1m"),
];

/// Series of one (device, class, stage) latency histogram with the default buckets: 27 `le`
/// buckets, +Inf, `_sum`, `_count` (docs/src/concepts/classes.md#series-count).
const HISTOGRAM_SERIES: usize = 30;

/// At most this many series name one busy disk in the live test's workload (docs/src/operations/fleet.md#series-budget-per-host:
/// the same number).
const SERIES_PER_BUSY_DISK: usize = 2000;

struct Dashboard {
    file: String,
    json: Value,
}

fn dashboards() -> Vec<Dashboard> {
    let dir = repo_root().join("dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", p.display()));
            Dashboard {
                file: p.file_name().unwrap().to_string_lossy().into_owned(),
                json,
            }
        })
        .collect()
}

/// All panels, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels array") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter());
        }
    }
    out
}

/// (panel title, refId, expr) of every query target.
fn exprs(d: &Value) -> Vec<(String, String, String)> {
    panels(d)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or("?").to_string();
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| {
                    (
                        title.clone(),
                        t["refId"].as_str().unwrap_or("?").to_string(),
                        t["expr"].as_str().unwrap_or("").to_string(),
                    )
                })
        })
        .collect()
}

/// Number of `expr` string fields anywhere in a JSON value.
fn expr_keys(v: &Value) -> usize {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| usize::from(k == "expr" && x.is_string()) + expr_keys(x))
            .sum(),
        Value::Array(a) => a.iter().map(expr_keys).sum(),
        _ => 0,
    }
}

/// Template variables: name → variable JSON.
fn variables(d: &Value) -> BTreeMap<String, Value> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| {
            (
                v["name"].as_str().expect("variable name").to_string(),
                v.clone(),
            )
        })
        .collect()
}

/// Template variable names in the dashboard's order.
fn variable_order(d: &Value) -> Vec<String> {
    d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect()
}

/// Names used as `$name` or `${name}` (also `${name:fmt}`) in a string.
fn used_vars(s: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let (start, braced) = if b.get(i + 1) == Some(&b'{') {
                (i + 2, true)
            } else {
                (i + 1, false)
            };
            let mut j = start;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if j > start {
                out.insert(s[start..j].to_string());
            }
            i = if braced {
                s[j..].find('}').map(|k| j + k + 1).unwrap_or(j)
            } else {
                j
            };
        } else {
            i += 1;
        }
    }
    out
}

/// Replaces `$name` / `${name}` by values (longest names first, so `$device` never eats `$devices`).
fn substitute(expr: &str, values: &BTreeMap<String, String>) -> String {
    let mut names: Vec<&String> = values.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut s = expr.to_string();
    for n in names {
        s = s
            .replace(&format!("${{{n}}}"), &values[n])
            .replace(&format!("${n}"), &values[n]);
    }
    s
}

fn is_ds_ref(v: &Value) -> bool {
    v["type"] == "prometheus" && v["uid"] == "${datasource}"
}

#[test]
fn dashboards_are_well_formed() {
    let all = dashboards();
    assert!(
        all.len() >= 3,
        "expected the overview, filesystem-log and stalls dashboards, found {}",
        all.len()
    );
    let mut uids = BTreeSet::new();
    let mut problems = Vec::new();
    for Dashboard { file, json: d } in &all {
        let mut bad = |m: String| problems.push(format!("{file}: {m}"));
        let uid = d["uid"].as_str().unwrap_or("");
        if uid.is_empty() || uid.len() > 40 || !uids.insert(uid.to_string()) {
            bad(format!("uid {uid:?} missing, longer than 40 or not unique"));
        }
        if d["title"].as_str().unwrap_or("").is_empty() {
            bad("no title".into());
        }
        if d["schemaVersion"].as_u64().unwrap_or(0) < 36 {
            bad("schemaVersion < 36".into());
        }
        let vars = variables(d);
        match vars.get("datasource") {
            Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
            _ => bad("no `datasource` variable of type datasource/prometheus".into()),
        }
        match vars.get("device") {
            Some(v) if v["type"] == "query" && is_ds_ref(&v["datasource"]) => {}
            _ => bad("no `device` query variable on ${datasource}".into()),
        }
        // A fleet: every dashboard selects instances, and its devices are those of the
        // selected instances (so `instance` comes first: Grafana resolves in list order).
        let order = variable_order(d);
        let pos = |n: &str| order.iter().position(|x| x == n);
        match (vars.get("instance"), pos("instance"), pos("device")) {
            (Some(v), Some(i), Some(j)) if v["type"] == "query" && v["multi"] == true && i < j => {}
            _ => bad("no multi-value `instance` query variable before `device`".into()),
        }
        if !vars
            .get("device")
            .and_then(|v| v["query"]["query"].as_str())
            .is_some_and(|q| q.contains("instance=~\"$instance\""))
        {
            bad("the `device` variable does not follow `$instance`".into());
        }
        if let Some(m) = vars.get("model") {
            if m["allValue"] != ".*" {
                bad(
                    "variable model: allValue must be .* (disks without a model have model=\"\")"
                        .into(),
                );
            }
        }
        for (name, v) in &vars {
            if v["type"] == "query" {
                let q = v["query"]["query"]
                    .as_str()
                    .or(v["query"].as_str())
                    .unwrap_or("");
                if !q.starts_with("label_values(") {
                    bad(format!(
                        "variable {name}: query {q:?} is not label_values(...)"
                    ));
                }
                if !is_ds_ref(&v["datasource"]) {
                    bad(format!(
                        "variable {name}: datasource is not ${{datasource}}"
                    ));
                }
            }
        }
        let ps = panels(d);
        let mut ids = BTreeSet::new();
        let mut rects = Vec::new();
        for p in &ps {
            let title = p["title"].as_str().unwrap_or("?");
            let id = p["id"].as_u64();
            if id.is_none() || !ids.insert(id.unwrap()) {
                bad(format!("panel {title:?}: id {id:?} missing or duplicated"));
            }
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_i64(),
                g["y"].as_i64(),
                g["w"].as_i64(),
                g["h"].as_i64(),
            );
            match (x, y, w, h) {
                (Some(x), Some(y), Some(w), Some(h))
                    if x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= 24 =>
                {
                    rects.push((title.to_string(), x, y, w, h))
                }
                _ => bad(format!("panel {title:?}: invalid gridPos {g}")),
            }
            if p["type"] == "row" {
                continue;
            }
            if !is_ds_ref(&p["datasource"]) {
                bad(format!(
                    "panel {title:?}: datasource {} is not {{prometheus, ${{datasource}}}}",
                    p["datasource"]
                ));
            }
            if let Some(r) = p["repeat"].as_str() {
                if vars.get(r).is_none_or(|v| v["multi"] != true) {
                    bad(format!(
                        "panel {title:?}: repeats over {r:?}, which is not a multi-value variable"
                    ));
                }
            }
            if p["description"].as_str().unwrap_or("").is_empty() {
                bad(format!("panel {title:?}: no description"));
            }
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            if targets.is_empty() {
                bad(format!("panel {title:?}: no queries"));
            }
            let mut refs = BTreeSet::new();
            for t in &targets {
                let r = t["refId"].as_str().unwrap_or("");
                if r.is_empty() || !refs.insert(r.to_string()) {
                    bad(format!(
                        "panel {title:?}: refId {r:?} missing or duplicated"
                    ));
                }
                if !t["datasource"].is_null() && !is_ds_ref(&t["datasource"]) {
                    bad(format!(
                        "panel {title:?} {r}: target datasource is not ${{datasource}}"
                    ));
                }
                let e = t["expr"].as_str().unwrap_or("");
                if e.trim().is_empty() {
                    bad(format!("panel {title:?} {r}: empty expr"));
                }
                if e.contains("$device") && !e.contains("instance=~\"$instance\"") {
                    bad(format!(
                        "panel {title:?} {r}: selects $device but not $instance"
                    ));
                }
                for v in used_vars(e) {
                    if !vars.contains_key(&v) && !BUILTINS.iter().any(|(b, _)| *b == v) {
                        bad(format!("panel {title:?} {r}: undefined variable ${v}"));
                    }
                }
                if p["type"] == "heatmap"
                    && (t["format"] != "heatmap"
                        || !e.contains("_bucket")
                        || !e.contains("by (le)"))
                {
                    bad(format!("panel {title:?} {r}: heatmap target must be format=heatmap over _bucket by (le)"));
                }
            }
        }
        for (i, a) in rects.iter().enumerate() {
            for b in &rects[i + 1..] {
                let overlap =
                    a.1 < b.1 + b.3 && b.1 < a.1 + a.3 && a.2 < b.2 + b.4 && b.2 < a.2 + a.4;
                if overlap {
                    bad(format!("panels {:?} and {:?} overlap", a.0, b.0));
                }
            }
        }
        if exprs(d).is_empty() {
            bad("no expressions".into());
        }
    }
    assert!(
        problems.is_empty(),
        "dashboard problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn structure_checks_catch_mistakes() {
    // The helpers above must see what they are meant to see.
    assert_eq!(
        used_vars("rate(x{d=~\"$device\"}[$__rate_interval]) ${op:regex}"),
        ["__rate_interval", "device", "op"].map(String::from).into()
    );
    let vals: BTreeMap<String, String> = [("device", "loop3"), ("devices", "X")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into();
    assert_eq!(
        substitute("{a=~\"$device\",b=\"${devices}\"}", &vals),
        "{a=~\"loop3\",b=\"X\"}"
    );
}

/// Instant query; Ok(number of series with a finite value).
fn instant(base: &str, q: &str) -> Result<usize, String> {
    let data = prom_get(base, "/api/v1/query", &[("query", q)])?;
    let finite = |v: &Value| {
        v[1].as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    };
    match data["resultType"].as_str() {
        Some("vector") => {
            let r = data["result"].as_array().cloned().unwrap_or_default();
            if r.is_empty() {
                return Err("no data (empty result)".into());
            }
            let n = r.iter().filter(|s| finite(&s["value"])).count();
            if n == 0 {
                return Err(format!("only non-finite values: {r:?}"));
            }
            Ok(n)
        }
        Some("scalar") if finite(&data["result"]) => Ok(1),
        other => Err(format!("unexpected result type {other:?}: {data}")),
    }
}

const FIO_JOB: &str = "\
[global]
# Threads, not processes: killing fio (the guard's SIGKILL) stops every job at once.
thread=1
directory=MNT
direct=1
time_based=1
runtime=60
size=48M
group_reporting=1
[reads]
rw=randread
bs=4k
ioengine=libaio
iodepth=4
rate_iops=1500
[writes]
rw=randwrite
bs=16k
ioengine=psync
rate_iops=300
[sync-writes]
# O_DSYNC direct writes become FUA writes; fsync every 4 writes adds PREFLUSH writes and flushes.
rw=write
bs=4k
ioengine=psync
sync=1
fsync=4
rate_iops=150
";

#[test]
fn every_dashboard_query_returns_data_from_real_prometheus() {
    if !require_root_and(&["prometheus", "fio", "losetup"]) {
        return;
    }
    // The eBPF cost panels need the kernel's per-program statistics (restored on drop).
    let _stats = Sysctl::set("kernel.bpf_stats_enabled", "1");
    let dir = TempDir::new("blkobs-dash");
    let dev = LoopDev::kernel_scheduler(512);
    // XFS on it, so the load produces filesystem log writes (log="true") as well.
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    assert!(
        Command::new("mkfs.xfs")
            .args(["-q", "-f"])
            .arg(&dev.path)
            .status()
            .unwrap()
            .success(),
        "mkfs.xfs"
    );
    assert!(
        Command::new("mount")
            .arg(&dev.path)
            .arg(&mnt)
            .status()
            .unwrap()
            .success(),
        "mount"
    );
    let _unmount = Unmount(mnt.clone());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            for _ in 0..20 {
                if Command::new("umount")
                    .arg(&self.0)
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false)
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }

    let port = free_port();
    let mut cmd = Command::new(observer_bin());
    cmd.args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--device",
        &dev.name,
    ]);
    let _daemon = Daemon::spawn(cmd, format!("127.0.0.1:{port}"), &dir.join("observer.log"));

    let job = dir.join("load.fio");
    std::fs::write(&job, FIO_JOB.replace("MNT", &mnt.to_string_lossy())).unwrap();
    let mut fio_cmd = Command::new("fio");
    fio_cmd.arg(&job);
    let mut fio = ChildGuard::spawn(fio_cmd, "fio", &dir.join("fio.log"));

    let (mut prom, base, plog) = prometheus(&dir, "prometheus", port, None, &[]);

    // Wait until Prometheus holds ≥ 15 s of scrapes of every class the workload makes
    // (flushes are the last to appear) and the target is healthy.
    let probe = format!("min(count_over_time(blkobs_requests_total{{device=\"{}\",op=~\"read|write|flush\"}}[30s]))", dev.name);
    let ready = wait_for(Duration::from_secs(60), || {
        assert!(
            prom.running(),
            "prometheus exited:\n{}",
            std::fs::read_to_string(&plog).unwrap_or_default()
        );
        assert!(
            fio.running(),
            "fio exited early:\n{}",
            std::fs::read_to_string(dir.join("fio.log")).unwrap_or_default()
        );
        let data = prom_get(&base, "/api/v1/query", &[("query", &probe)]).ok()?;
        let n: f64 = data["result"][0]["value"][1].as_str()?.parse().ok()?;
        (n >= 15.0).then_some(())
    });
    if ready.is_none() {
        let targets = prom_get(&base, "/api/v1/targets", &[])
            .map(|v| v.to_string())
            .unwrap_or_else(|e| e);
        panic!(
            "Prometheus never had 15 s of scrapes of {}; targets: {targets}",
            dev.name
        );
    }

    let mut failures = Vec::new();
    let mut evaluated = 0;
    // Expressions over the programs' own cost (blkobs_bpf_program_*), which evaluated.
    let mut bpf_cost = 0;
    for Dashboard { file, json } in dashboards() {
        let vars = variables(&json);
        // Template variables: every label_values() query must yield values (the device's own
        // name for `device`), then `device` is set to the test device and the others to All.
        let mut values: BTreeMap<String, String> = BUILTINS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        values.insert("device".into(), dev.name.clone());
        // In the dashboard's order, as Grafana resolves them: `device` uses `$instance`.
        for name in variable_order(&json) {
            let v = &vars[&name];
            let name = &name;
            if v["type"] != "query" {
                continue;
            }
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap_or("");
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or("");
            let (series, label) = inner
                .rsplit_once(',')
                .map(|(a, b)| (a.trim(), b.trim()))
                .unwrap_or(("", ""));
            let series = substitute(series, &values);
            match prom_get(
                &base,
                &format!("/api/v1/label/{label}/values"),
                &[("match[]", &series)],
            ) {
                Ok(d) => {
                    let got: Vec<&str> = d
                        .as_array()
                        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                        .unwrap_or_default();
                    // A variable whose "All" matches the empty value (`model`: loop disks have
                    // none) may list no value, if its series exist.
                    let empty_ok = v["allValue"] == ".*"
                        && instant(&base, &format!("count({series})")).is_ok();
                    if (got.is_empty() && !empty_ok)
                        || (name == "device" && !got.contains(&dev.name.as_str()))
                    {
                        failures.push(format!("{file}: variable {name} = {q}: values {got:?}"));
                    }
                }
                Err(e) => failures.push(format!("{file}: variable {name} = {q}: {e}")),
            }
            if name != "device" {
                values.insert(
                    name.clone(),
                    v["allValue"].as_str().unwrap_or(".+").to_string(),
                );
            }
        }
        for (title, refid, expr) in exprs(&json) {
            let q = substitute(&expr, &values);
            evaluated += 1;
            match instant(&base, &q) {
                Ok(n) => {
                    eprintln!("ok   {file} {title:?} {refid}: {n} series");
                    bpf_cost += usize::from(q.contains("blkobs_bpf_program_"));
                }
                Err(e) => failures.push(format!(
                    "{file} panel {title:?} {refid}: {e}\n    query: {q}"
                )),
            }
        }
    }
    // The series budget of one busy disk (docs/src/operations/fleet.md#series-budget-per-host), from what
    // Prometheus stored of this scrape target: every series naming the device, by family, and
    // the latency histogram's series per (class, stage).
    let series_of = |sel: &str| -> usize {
        prom_get(
            &base,
            "/api/v1/query",
            &[("query", &format!("count({sel})"))],
        )
        .ok()
        .and_then(|d| d["result"][0]["value"][1].as_str()?.parse::<f64>().ok())
        .unwrap_or(0.0) as usize
    };
    let on_disk = series_of(&format!("{{device=\"{}\"}}", dev.name));
    let latency = series_of(&format!(
        "{{__name__=~\"blkobs_request_latency_seconds_(bucket|sum|count)\",device=\"{}\"}}",
        dev.name
    ));
    let latency_series = series_of(&format!(
        "blkobs_request_latency_seconds_count{{device=\"{}\"}}",
        dev.name
    ));
    if let Ok(d) = prom_get(
        &base,
        "/api/v1/query",
        &[(
            "query",
            &format!(
                "sort_desc(count by (__name__) ({{device=\"{}\"}}))",
                dev.name
            ),
        )],
    ) {
        for r in d["result"].as_array().into_iter().flatten() {
            eprintln!("series {} {}", r["value"][1], r["metric"]["__name__"]);
        }
    }
    eprintln!(
        "series budget: {on_disk} series name {} (a busy XFS disk: fio reads, writes, O_DSYNC writes + fsync); \
         latency histogram {latency} series = {latency_series} (class, stage) x {}",
        dev.name,
        latency as f64 / latency_series.max(1) as f64
    );
    assert_eq!(
        latency,
        latency_series * HISTOGRAM_SERIES,
        "each (device, class, stage) latency histogram is 27 buckets + +Inf + _sum + _count"
    );
    assert!(
        on_disk > 0 && on_disk <= SERIES_PER_BUSY_DISK,
        "{on_disk} series on one busy disk: docs/src/operations/fleet.md says at most {SERIES_PER_BUSY_DISK}"
    );
    fio.signal(libc::SIGINT);
    let _ = fio.wait_timeout(Duration::from_secs(10));
    drop(fio);
    prom.signal(libc::SIGTERM);
    let _ = prom.wait_timeout(Duration::from_secs(10));
    // Every `expr` anywhere in the dashboard JSON (panels, nested rows, library panels) was
    // evaluated: counted by a plain walk of the JSON, independent of how `exprs` finds them.
    let in_json: usize = dashboards().iter().map(|d| expr_keys(&d.json)).sum();
    assert_eq!(
        evaluated, in_json,
        "{evaluated} expressions evaluated, {in_json} `expr` fields in the dashboards"
    );
    assert!(evaluated > 0, "no expressions found in the dashboards");
    assert!(
        failures.is_empty(),
        "{} of {evaluated} dashboard queries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        bpf_cost >= 2,
        "the eBPF cost panels' expressions ({bpf_cost}) did not evaluate"
    );
    eprintln!("{evaluated} dashboard expressions returned data");
}

/// The monitoring mixin (packaging/blkobs-rules.yml): `promtool check rules` and `promtool
/// test rules packaging/blkobs-rules.test.yml` (every alert firing and not firing, every
/// recording rule's value on synthetic series) pass, and the test file covers every alert
/// (one case that fires) and every recording rule of the rules file.
#[test]
fn rules_pass_promtool_tests() {
    if !require_tool("promtool", "Debian package prometheus") {
        return;
    }
    let dir = repo_root().join("packaging");
    for args in [
        ["check", "rules", "blkobs-rules.yml"],
        ["test", "rules", "blkobs-rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rules = std::fs::read_to_string(dir.join("blkobs-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("blkobs-rules.test.yml")).unwrap();
    let names = |key: &str| -> Vec<String> {
        rules
            .lines()
            .filter_map(|l| l.trim().strip_prefix(key))
            .map(|n| n.trim().to_string())
            .collect()
    };
    let (alerts, records) = (names("- alert:"), names("- record:"));
    assert!(
        alerts.len() >= 10 && records.len() >= 4,
        "{alerts:?} {records:?}"
    );
    for a in &alerts {
        // A case of this alert whose expected alerts are not empty.
        let fires = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(&format!("{a}\n")) && case.contains("exp_alerts:\n"));
        assert!(
            fires,
            "no promtool case where {a} fires in blkobs-rules.test.yml"
        );
    }
    for r in &records {
        assert!(
            tests.contains(&format!("- expr: {r}")),
            "recording rule {r} has no promql_expr_test in blkobs-rules.test.yml"
        );
    }
}

/// The shipped rules loaded by Debian's Prometheus scraping a real daemon: a direct write held
/// at a FUSE-backed disk fires `BlkobsRequestsStuck` (oldest in-flight age over 10 s) for that
/// device and stage `device`, and the alert ends once the write completes.
#[test]
fn stuck_request_alert_fires_for_real() {
    if !require_root_and(&["prometheus", "losetup"]) {
        return;
    }
    let dir = TempDir::new("blkobs-alert");
    let disk = SlowDisk::new(16, "none");
    let _daemon = Daemon::start(&["--device", &disk.name]);
    let port = _daemon.port();
    let rules = repo_root().join("packaging/blkobs-rules.yml");
    let (mut prom, base, plog) = prometheus(&dir, "prometheus", port, Some(&rules), &[]);
    let up = wait_for(Duration::from_secs(60), || {
        assert!(
            prom.running(),
            "prometheus exited:\n{}",
            std::fs::read_to_string(&plog).unwrap_or_default()
        );
        (instant(&base, "up{job=\"blkobs\"} == 1").ok()? == 1).then_some(())
    });
    assert!(up.is_some(), "the daemon never scraped up");
    let firing = |v: &Value| -> Option<Value> {
        v["alerts"]
            .as_array()?
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == "BlkobsRequestsStuck"
                    && a["labels"]["device"] == disk.name.as_str()
                    && a["state"] == "firing"
            })
            .cloned()
    };
    let dd = named_dd("blkobs-alertwr");
    let held_at = std::time::Instant::now();
    let mut child = disk.hold_write(|| {
        Command::new(&dd)
            .args([
                "if=/dev/zero",
                &format!("of={}", disk.path),
                "bs=4k",
                "count=1",
                "oflag=direct",
                "status=none",
            ])
            .spawn()
            .unwrap()
    });
    let alert = wait_for(Duration::from_secs(40), || {
        firing(&prom_get(&base, "/api/v1/alerts", &[]).ok()?)
    });
    let after = held_at.elapsed();
    disk.knobs().release();
    assert!(child.wait().unwrap().success(), "the held write failed");
    let alert = alert.unwrap_or_else(|| {
        panic!(
            "BlkobsRequestsStuck never fired for {} in 40 s; alerts: {:?}",
            disk.name,
            prom_get(&base, "/api/v1/alerts", &[])
        )
    });
    eprintln!(
        "firing {:.1} s after the write was held: {alert}",
        after.as_secs_f64()
    );
    assert_eq!(alert["labels"]["stage"], "device", "{alert}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");
    assert!(after >= Duration::from_secs(10), "fired after {after:?}");
    let ended = wait_for(Duration::from_secs(30), || {
        let v = prom_get(&base, "/api/v1/alerts", &[]).ok()?;
        firing(&v).is_none().then_some(())
    });
    assert!(
        ended.is_some(),
        "BlkobsRequestsStuck still firing 30 s after the release"
    );
}

/// Exemplars for real: Debian's Prometheus 2.42 with `--enable-feature=exemplar-storage`
/// scrapes the daemon (it asks for OpenMetrics first), a direct write is held 1.5 s at a
/// FUSE-backed disk (slow: over the default 100 ms total threshold), and Prometheus' exemplar
/// API (`/api/v1/query_exemplars`) returns exemplars of `blkobs_request_latency_seconds_bucket`
/// on that disk whose `request_id` the daemon's `/stalls?id=` resolves to that write: same
/// device and op, the exemplar's value equal to the request's latency in the series' stage,
/// within the bucket's `le`; the device stage's at least the time it was held.
#[test]
fn exemplar_names_the_slow_request() {
    if !require_root_and(&["prometheus", "losetup"]) {
        return;
    }
    let dir = TempDir::new("blkobs-exemplar");
    let disk = SlowDisk::new(16, "none");
    let daemon = Daemon::start(&["--device", &disk.name]);
    let port = daemon.port();
    let (mut prom, base, plog) = prometheus(
        &dir,
        "prometheus",
        port,
        None,
        &["--enable-feature=exemplar-storage"],
    );
    let up = wait_for(Duration::from_secs(60), || {
        assert!(
            prom.running(),
            "prometheus exited:\n{}",
            std::fs::read_to_string(&plog).unwrap_or_default()
        );
        (instant(&base, "up{job=\"blkobs\"} == 1").ok()? == 1).then_some(())
    });
    assert!(up.is_some(), "the daemon never scraped up");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 5.0;
    let held = Duration::from_millis(1500);
    let dd = named_dd("blkobs-exemplwr");
    let mut child = disk.hold_write(|| {
        Command::new(&dd)
            .args([
                "if=/dev/zero",
                &format!("of={}", disk.path),
                "bs=4k",
                "count=1",
                "oflag=direct",
                "status=none",
            ])
            .spawn()
            .unwrap()
    });
    std::thread::sleep(held);
    disk.knobs().release();
    assert!(child.wait().unwrap().success(), "the held write failed");
    let query = format!(
        "blkobs_request_latency_seconds_bucket{{device=\"{}\"}}",
        disk.name
    );
    let exemplars = |end: f64| -> Option<Vec<(Value, Value)>> {
        let data = prom_get(
            &base,
            "/api/v1/query_exemplars",
            &[
                ("query", &query),
                ("start", &format!("{start:.3}")),
                ("end", &format!("{end:.3}")),
            ],
        )
        .ok()?;
        let all: Vec<(Value, Value)> = data
            .as_array()?
            .iter()
            .flat_map(|s| {
                let labels = s["seriesLabels"].clone();
                s["exemplars"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |e| (labels.clone(), e))
            })
            .collect();
        // Until one request has exemplars in all three stages (the held write: queue, device,
        // total); other slow requests of the disk may have some too.
        let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
        for (_, e) in &all {
            *per_id
                .entry(e["labels"]["request_id"].to_string())
                .or_default() += 1;
        }
        per_id.values().any(|&n| n >= 3).then_some(all)
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let found = wait_for(Duration::from_secs(30), || exemplars(now() + 5.0));
    let found = found.unwrap_or_else(|| {
        panic!(
            "no exemplars of {query} in Prometheus within 30 s: {:?}; the daemon's OpenMetrics: {}",
            prom_get(
                &base,
                "/api/v1/query_exemplars",
                &[
                    ("query", &query),
                    ("start", &format!("{start:.3}")),
                    ("end", &format!("{:.3}", now() + 5.0))
                ]
            ),
            openmetrics(&daemon)
                .lines()
                .filter(|l| l.contains(" # {"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    let mut stages = BTreeSet::new();
    for (series, e) in &found {
        eprintln!("exemplar: {series} {e}");
        let id = e["labels"]["request_id"]
            .as_str()
            .unwrap_or_else(|| panic!("exemplar without request_id: {e}"));
        assert_eq!(
            e["labels"].as_object().map(|l| l.len()),
            Some(1),
            "only request_id, no pid/comm: {e}"
        );
        let (status, body) = daemon.get(&format!("/stalls?id={id}&format=json")).unwrap();
        assert_eq!(status, 200, "/stalls?id={id}: {body}");
        let report: Value = serde_json::from_str(&body).unwrap();
        let slow = report["slow"].as_array().unwrap();
        assert_eq!(slow.len(), 1, "{report}");
        let r = &slow[0];
        eprintln!("  /stalls?id={id}: {r}");
        assert_eq!(r["id"], id);
        assert_eq!(r["device"], disk.name.as_str(), "{r}");
        assert_eq!(r["op"], "write", "{r}");
        assert_eq!(series["op"], "write", "{series}");
        assert_eq!(series["device"], disk.name.as_str(), "{series}");
        assert_eq!(
            series["fua"],
            r["flags"]
                .as_array()
                .unwrap()
                .contains(&"fua".into())
                .to_string(),
            "{series} vs {r}"
        );
        let stage = series["stage"].as_str().unwrap();
        let value: f64 = e["value"].as_str().unwrap().parse().unwrap();
        let want = r[&format!("{stage}_seconds")].as_f64().unwrap();
        assert!(
            (value - want).abs() < 1e-6,
            "exemplar {value} s vs the request's {stage} {want} s"
        );
        let le: f64 = series["le"].as_str().unwrap().parse().unwrap();
        assert!(value <= le, "{value} s above its bucket's le {le}");
        let ts = e["timestamp"].as_f64().unwrap();
        assert!(ts >= start && ts <= now(), "exemplar timestamp {ts}");
        if r["submitter"]["comm"] != "blkobs-exemplwr" {
            continue; // another slow request of the disk (resolved and checked all the same)
        }
        if stage == "device" {
            assert!(
                value >= held.as_secs_f64(),
                "device {value} s, held {held:?}"
            );
        }
        assert!(
            stages.insert(stage.to_string()),
            "two exemplars of the write for {stage}"
        );
    }
    assert_eq!(
        stages,
        ["device", "queue", "total"].map(String::from).into(),
        "one exemplar per stage of the held write (submitted by blkobs-exemplwr)"
    );
    // An id this daemon does not keep: 404 naming the parameter.
    let (status, body) = daemon.get("/stalls?id=1-1").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"parameter\":\"id\""), "{body}");
}

/// `/metrics` as Prometheus 2.42 asks for it (OpenMetrics first).
fn openmetrics(d: &Daemon) -> String {
    ureq::get(&format!("http://{}/metrics", d.addr))
        .set("Accept", "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
        .call()
        .map(|r| r.into_string().unwrap_or_default())
        .unwrap_or_else(|e| format!("{e}"))
}
