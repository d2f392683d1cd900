//! fio runs: the measured workloads, the fill, and the scrape phase's background load.
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use super::{
    guards::check_stop,
    setup::{Env, Workload},
};

pub struct FioResult {
    pub iops: f64,
}

pub fn fio(env: &Env, target: &str, w: Workload, runtime: u32, tag: &str) -> Result<FioResult> {
    check_stop()?;
    let mut cmd = Command::new("fio");
    cmd.args([
        "--name=bench",
        &format!("--filename={target}"),
        "--direct=1",
        "--ioengine=io_uring",
        "--iodepth=32",
        &format!("--rw={}", w.fio()),
        "--bs=4k",
        "--numjobs=1",
        "--time_based",
        &format!("--runtime={runtime}"),
        &format!("--ramp_time={}", env.ramp),
        "--randrepeat=0",
        "--norandommap",
        "--output-format=json",
    ]);
    let out = cmd.output().context("running fio")?;
    check_stop()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            stdout
        );
    }
    std::fs::write(env.logs.join(format!("fio-{tag}.json")), stdout.as_bytes())?;
    let json = &stdout[stdout.find('{').context("no JSON in fio's output")?..];
    let v: Value = serde_json::from_str(json).context("parsing fio's JSON")?;
    let job = &v["jobs"][0];
    let side = match w {
        Workload::RandRead => &job["read"],
        Workload::RandWrite => &job["write"],
    };
    let iops = side["iops"].as_f64().context("fio JSON without iops")?;
    ensure!(iops > 0.0, "fio reported 0 IOPS on {target}");
    Ok(FioResult { iops })
}

/// Writes the whole device once (tmpfs allocates on first write).
pub fn fill(dev: &str) -> Result<()> {
    crate::run(Command::new("fio").args([
        "--name=fill",
        &format!("--filename={dev}"),
        "--rw=write",
        "--bs=1M",
        "--direct=1",
        "--ioengine=io_uring",
        "--iodepth=8",
        "--output=/dev/null",
    ]))
}

/// The scrape phase's load: one fio job per device for `secs`, mixed read/write with some sync
/// writes, so every device has several (op, flags) classes; low depth: 32 jobs share 2 cores.
pub fn scrape_load(devs: &[&str], secs: u32) -> Command {
    let mut cmd = Command::new("fio");
    cmd.args([
        "--ioengine=io_uring",
        "--direct=1",
        "--bs=4k",
        "--iodepth=4",
        "--rw=randrw",
        "--time_based",
    ])
    .arg(format!("--runtime={secs}"))
    .arg("--output=/dev/null")
    .stdout(Stdio::null());
    for (i, dev) in devs.iter().enumerate() {
        cmd.arg(format!("--name=d{i}"))
            .arg(format!("--filename={dev}"));
        if i % 2 == 1 {
            cmd.arg("--fsync=8");
        }
    }
    cmd
}
