//! Every feature under each shipped deployment, on the real kernel with real (loop) devices:
//!
//! - `unit_identity_*`: the daemon started the way packaging/observer.service starts it: uid and
//!   gid 65534, supplementary group disk, only CAP_BPF + CAP_PERFMON (ambient, bounding set,
//!   no_new_privs), and the unit's sandbox reproduced without systemd (PID 1 here is not
//!   systemd): a private mount namespace with propagation from the host (PrivateMounts=),
//!   `/proc` remounted `hidepid=invisible,subset=pid` (ProtectProc=invisible, ProcSubset=pid),
//!   `/`, `/sys` and the cgroup mounts read-only (ProtectSystem=strict, ProtectKernelTunables=,
//!   ProtectControlGroups=), and the device policy of `DevicePolicy=closed` +
//!   `DeviceAllow=block-* r` as a cgroup v1 device controller list (what systemd's cgroup BPF
//!   device program enforces on cgroup v2).
//! - `daemonset_view_*`: the DaemonSet's view: a private mount and PID namespace whose `/dev`
//!   has no disks, whose mount table does not have the host's filesystems and whose
//!   `/sys/fs/cgroup` is not the host's; the host's `/proc`, `/dev` and `/sys/fs/cgroup` at
//!   `/host/...` as the manifest mounts them; uid 0 with only CAP_BPF + CAP_PERFMON; the
//!   container runtime's default device cgroup (runc's list), with and without a rule allowing
//!   block devices to be read.
//!
//! In each, XFS and ext4 log writes are `log="true"` against the ftrace witness (as in
//! tests/fslog.rs), `/stalls` names the submitter's cgroup, device names label the series,
//! the reaper's sysfs input is readable, SIGHUP reloads; and without the read access the
//! filesystems are reported `unreadable` in `/devices` and `blkobs_fs_log_status`.
//!
//! Device nodes: devtmpfs creates them root:root 0600; on a host with udev (every systemd
//! distribution) they are root:disk 0660 (udev's 50-udev-default.rules). The tests set that on
//! the loop devices they create, as udev would.
//!
//! Needs root, cgroup v1 devices controller (for the device policy) and the fslog tools. With
//! `CI` set to anything truthy a test that cannot run fails.

mod support;

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use support::*;

/// DevicePolicy=closed (systemd: null, zero, full, random, urandom, tty, ptmx, pts) plus
/// ProtectClock's char-rtc r and the unit's DeviceAllow=block-* r.
const UNIT_DEVICES: &[&str] = &[
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:2 rwm",
    "c 136:* rw",
    "c 252:* r",
    "c 253:* r",
    "c 254:* r",
    "b *:* r",
];
/// runc's default allow list for a non-privileged container (libcontainer/specconv
/// AllowedDevices): null, zero, full, tty, random, urandom, console, ptmx, pts, tun.
const RUNC_DEVICES: &[&str] = &[
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 5:0 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:1 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
    "c 10:200 rwm",
];

fn require(test: &str) -> bool {
    if !require_fslog(test) {
        return false;
    }
    let ok = Path::new("/sys/fs/cgroup/devices/devices.allow").exists()
        && ["unshare", "setpriv", "mountpoint"]
            .iter()
            .all(|t| which(t).is_some());
    if ok {
        return true;
    }
    let why = format!("{test}: needs the cgroup v1 devices controller at /sys/fs/cgroup/devices (device policy) and unshare/setpriv/mountpoint");
    skip(&why)
}

/// A cgroup v1 device controller group with an allow list (everything else denied); removed on
/// drop (after its processes are gone).
struct DevCgroup(PathBuf);

impl DevCgroup {
    fn new(allow: &[&str]) -> DevCgroup {
        let dir = PathBuf::from(format!("/sys/fs/cgroup/devices/{}", unique("blkobs-devcg")));
        std::fs::create_dir(&dir).unwrap();
        let g = DevCgroup(dir);
        std::fs::write(g.0.join("devices.deny"), "a").unwrap();
        for a in allow {
            std::fs::write(g.0.join("devices.allow"), a)
                .unwrap_or_else(|e| panic!("devices.allow {a}: {e}"));
        }
        g
    }
}

impl Drop for DevCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A directory (0755) removed on drop, holding a copy of the daemon any user can run.
struct Dir(TempDir);

impl Dir {
    fn new() -> Dir {
        let d = TempDir::new("blkobs-deploy");
        observer_copy_for_any_user(&d);
        Dir(d)
    }
    fn bin(&self) -> PathBuf {
        self.0.join("observer")
    }
    fn config(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }
}

/// `/host` as the manifest's mount point (only ever mounted over inside the test's namespaces);
/// created if missing and then removed on drop.
struct HostDir(bool);

impl HostDir {
    fn new() -> HostDir {
        let created = !Path::new("/host").exists();
        if created {
            std::fs::create_dir("/host").unwrap();
        }
        HostDir(created)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::remove_dir("/host");
        }
    }
}

const CAPS: &str = "-all,+bpf,+perfmon";

/// setpriv arguments: identity and capabilities.
fn setpriv(uid: u32, groups: Option<u32>) -> Vec<String> {
    let mut v = vec![
        "setpriv".to_string(),
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
    ];
    v.push(match groups {
        Some(g) => format!("--groups={g}"),
        None => "--clear-groups".into(),
    });
    v.extend([
        "--no-new-privs".into(),
        format!("--inh-caps={CAPS}"),
        format!("--ambient-caps={CAPS}"),
        format!("--bounding-set={CAPS}"),
    ]);
    v
}

/// The unit's sandbox (see the top of this file), then `exec "$@"`.
const UNIT_SANDBOX: &str = r#"set -e
echo 0 > "$DEVCG/cgroup.procs"
if [ "$PRIVATE_DEVICES" = 1 ]; then
  mount -t tmpfs -o mode=755 tmpfs /dev
  mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/urandom c 1 9
fi
mount -t proc -o hidepid=invisible,subset=pid proc /proc
mount -o remount,bind,ro /
mount -o remount,bind,ro /sys
for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  if mountpoint -q "$d"; then mount -o remount,bind,ro "$d"; fi
done
exec "$@"
"#;

/// The DaemonSet's view (see the top of this file), then `exec "$@"`. `$UNMOUNT`: the host's
/// filesystems the container's own mount table must not have.
const DAEMONSET_VIEW: &str = r#"set -e
echo 0 > "$DEVCG/cgroup.procs"
mount -t tmpfs -o mode=755 tmpfs /host
mkdir -p /host/proc /host/dev /host/sys/fs/cgroup
mount --rbind /proc /host/proc; mount -o remount,bind,ro /host/proc
mount --rbind /dev /host/dev; mount -o remount,bind,ro /host/dev
mount --rbind /sys/fs/cgroup /host/sys/fs/cgroup; mount -o remount,bind,ro /host/sys/fs/cgroup
for m in $UNMOUNT; do umount -l "$m"; done
mount -t tmpfs -o mode=755 tmpfs /dev
mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/urandom c 1 9
mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
mount -t proc proc /proc
exec "$@"
"#;

/// Runs `argv` in the unit's sandbox as the unit's identity (`groups`: the disk gid or none).
fn in_unit(
    devcg: &DevCgroup,
    private_devices: bool,
    groups: Option<u32>,
    argv: &[String],
) -> Command {
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "slave",
        "--",
        "sh",
        "-c",
        UNIT_SANDBOX,
        "sh",
    ])
    .args(setpriv(65534, groups))
    .args(argv)
    .env("DEVCG", &devcg.0)
    .env("PRIVATE_DEVICES", if private_devices { "1" } else { "0" })
    .env("OBSERVER_LOG", "info");
    c
}

/// Runs `argv` in the DaemonSet's view as uid 0 with CAP_BPF + CAP_PERFMON only.
fn in_daemonset(devcg: &DevCgroup, unmount: &[&Path], argv: &[String]) -> Command {
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "slave",
        "--pid",
        "--fork",
        "--kill-child=SIGTERM",
        "--",
        "sh",
        "-c",
        DAEMONSET_VIEW,
        "sh",
    ])
    .args(setpriv(0, None))
    .args(argv)
    .env("DEVCG", &devcg.0)
    .env(
        "UNMOUNT",
        unmount
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
    )
    .env("OBSERVER_LOG", "info");
    c
}

/// SIGTERM to the observer itself (not to a wrapper that may not forward it), then drop.
fn stop(d: Daemon) {
    // SAFETY: plain kill(2).
    unsafe { libc::kill(observer_pid(d.pid()) as i32, libc::SIGTERM) };
    drop(d);
}

fn observer_argv(dir: &Dir, addr: &str, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        dir.bin().display().to_string(),
        "--listen".into(),
        addr.to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The observer process (the daemon's pid may be a wrapper's: unshare --fork).
fn observer_pid(top: u32) -> u32 {
    let mut pid = top;
    for _ in 0..5 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim() == "observer")
            .unwrap_or(false)
        {
            return pid;
        }
        let ch =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        match ch.split_whitespace().next().and_then(|p| p.parse().ok()) {
            Some(c) => pid = c,
            None => break,
        }
    }
    panic!("no observer process under {top}");
}

/// The filesystem entry of `/devices` whose data device is `name`.
fn fs_entry(d: &Daemon, name: &str) -> Option<Value> {
    devices(d)["filesystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["device"]["name"] == name)
        .cloned()
}

fn wait_status(d: &Daemon, name: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(f) = fs_entry(d, name) {
            if f["log_status"] == want {
                return f;
            }
        }
        if Instant::now() > deadline {
            panic!("{name}: log_status is not {want}:\n{:#}", devices(d));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn status_metric(d: &Daemon, name: &str, status: &str) -> f64 {
    d.scrape().sum(
        "blkobs_fs_log_status",
        &[("fs_device", name), ("status", status)],
    )
}

/// An XFS and an ext4 filesystem on loop devices with udev-like permissions, and their
/// witnessed log ranges.
struct Fixture {
    xfs: LoopDev,
    ext4: LoopDev,
    mx: Mount,
    me: Mount,
    wx: Vec<(u64, u64)>,
    we: Vec<(u64, u64)>,
    /// Not mounted: for the write-refusal check.
    spare: LoopDev,
}

impl Fixture {
    fn new() -> Fixture {
        let xfs = LoopDev::new(320, "none");
        let ext4 = LoopDev::new(256, "none");
        let spare = LoopDev::new(16, "none");
        for d in [&xfs, &ext4, &spare] {
            udev_perms(&d.path);
        }
        let mx = Mount::new(&xfs, &["mkfs.xfs", "-q", "-f", "-d", "agcount=4"]);
        let me = Mount::new(&ext4, &mkfs_ext4(&["-b", "4096"]));
        let (_, daddr, sectors) = xfs_witness(&xfs.path);
        let wx = vec![(daddr, daddr + sectors)];
        let we = ext4_witness(&ext4.path);
        Fixture {
            xfs,
            ext4,
            mx,
            me,
            wx,
            we,
            spare,
        }
    }

    /// Log writes of both filesystems under fsync load against the ftrace witness; and the
    /// reaper's request-state probe loaded in this deployment.
    fn check_log_writes(&self, d: &Daemon, what: &str) {
        assert_eq!(
            d.scrape()
                .sum("blkobs_build_info", &[("reaper", "request_state")]),
            1.0,
            "{what}: the reaper's request-state probe is not loaded"
        );
        wait_ranges(d, &self.xfs.name, &self.wx);
        wait_ranges(d, &self.ext4.name, &self.we);
        let n = 200;
        let seen = witness(d, &[(&self.xfs, &self.wx), (&self.ext4, &self.we)], || {
            fsync_files(&self.mx.dir, n);
            fsync_files(&self.me.dir, n);
        });
        for (s, fs) in seen.iter().zip(["xfs", "ext4"]) {
            eprintln!(
                "{what} {fs}: log writes {} / {} log=\"true\" (witness / daemon)",
                s.traced_in, s.log_true
            );
            assert_classified(s, &format!("{what}: {fs}"));
            assert!(
                s.traced_in >= n,
                "{what} {fs}: {} log writes for {n} fsyncs",
                s.traced_in
            );
        }
    }
}

/// Writes with O_DIRECT from a copy of dd named `blkobs-cgwriter` inside a fresh cgroup v2
/// group; `/stalls` (every request slow with `slow_default.total = 1us`) must name that group.
fn check_submitter_cgroup(d: &Daemon, dir: &Path, what: &str) {
    check_submitter_cgroup_is(d, dir, what, true)
}

/// As [`check_submitter_cgroup`]; `named`: whether the path must be resolved (else `null`).
fn check_submitter_cgroup_is(d: &Daemon, dir: &Path, what: &str, named: bool) {
    let cg = Group::new("blkobs-submitter");
    let dd = std::env::temp_dir()
        .join(unique("dd"))
        .join("blkobs-cgwriter");
    std::fs::create_dir_all(dd.parent().unwrap()).unwrap();
    std::fs::copy("/usr/bin/dd", &dd).unwrap();
    cg.run(
        &dd,
        &[
            "if=/dev/zero",
            &format!("of={}", dir.join("cgwriter").display()),
            "bs=4k",
            "count=8",
            "oflag=direct",
            "conv=fsync",
            "status=none",
        ],
    );
    let _ = std::fs::remove_dir_all(dd.parent().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = d.get("/stalls?format=json&limit=10000").unwrap();
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let mine = slow_where(&v, |s| s["submitter"]["comm"] == "blkobs-cgwriter");
        if !mine.is_empty() {
            for s in &mine {
                if named {
                    assert_eq!(
                        s["submitter"]["cgroup"],
                        cg.rel.as_str(),
                        "{what}: submitter cgroup of {s}"
                    );
                } else {
                    assert!(
                        s["submitter"]["cgroup"].is_null(),
                        "{what}: submitter cgroup of {s}"
                    );
                }
            }
            eprintln!(
                "{what}: {} slow requests of blkobs-cgwriter, cgroup {}",
                mine.len(),
                mine[0]["submitter"]["cgroup"]
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no slow request of blkobs-cgwriter in /stalls: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGHUP: a new bucket set is applied.
fn check_reload(d: &Daemon, cfg: &Path, base: &str, dev: &str, what: &str) {
    std::fs::write(
        cfg,
        format!("{base}\n[histogram]\nbuckets = [0.0005, 0.25]\n"),
    )
    .unwrap();
    // SAFETY: plain kill(2).
    unsafe { libc::kill(observer_pid(d.pid()) as i32, libc::SIGHUP) };
    let needle = "le=\"0.0005\"";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = d.metrics_text();
        if text.lines().any(|l| {
            l.starts_with("blkobs_request_latency_seconds_bucket")
                && l.contains(&format!("device=\"{dev}\""))
                && l.contains(needle)
        }) {
            eprintln!("{what}: SIGHUP applied the new buckets");
            return;
        }
        assert!(Instant::now() < deadline, "{what}: reload not applied");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Output of `argv` run in a sandbox command builder.
fn run(mut c: Command) -> (bool, String) {
    let o = c.output().unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

const SLOW_ALL: &str = "[stalls]\nslow_default = { total = \"1us\" }\n";

/// The unit's identity and sandbox: with the old unit's device access (PrivateDevices=yes, no
/// group disk) no log is found (before); with the shipped unit (group disk, block devices
/// readable by the device policy) XFS and ext4 log writes are all `log="true"`; without group
/// disk the filesystems are reported unreadable. Also: writes to block devices are refused by
/// the device policy, /stalls names cgroups, SIGHUP reloads.
#[test]
fn unit_identity_finds_logs() {
    if !require("unit_identity_finds_logs") {
        return;
    }
    let fx = Fixture::new();
    let dir = Dir::new();
    let cg = DevCgroup::new(UNIT_DEVICES);
    let disk = disk_gid();

    // Before: the old unit (PrivateDevices=yes, no group disk).
    let d = spawn_in(&dir, &[], "before.log", |argv| {
        in_unit(&cg, true, None, argv)
    });
    for name in [&fx.xfs.name, &fx.ext4.name] {
        let f = wait_status(&d, name, "no_device_node");
        eprintln!("old unit: {name}: {} / {}", f["log_status"], f["warning"]);
        assert_eq!(status_metric(&d, name, "no_device_node"), 1.0);
    }
    stop(d);

    // Without group disk: unreadable, with the reason and what to grant.
    let d = spawn_in(&dir, &[], "nodisk.log", |argv| {
        in_unit(&cg, false, None, argv)
    });
    for name in [&fx.xfs.name, &fx.ext4.name] {
        let f = wait_status(&d, name, "unreadable");
        let w = f["warning"].as_str().unwrap();
        assert!(
            w.contains("Permission denied") && w.contains("SupplementaryGroups=disk"),
            "{w}"
        );
        assert_eq!(
            status_metric(&d, name, "unreadable"),
            1.0,
            "blkobs_fs_log_status"
        );
        let disk_entry = devices(&d)["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["device"] == name.as_str())
            .cloned()
            .unwrap();
        assert_eq!(
            disk_entry["filesystems"][0]["log_status"], "unreadable",
            "{disk_entry}"
        );
    }
    assert!(d.scrape().sum("blkobs_fs_log_warnings", &[]) >= 2.0);
    stop(d);

    // The shipped unit.
    let base = SLOW_ALL.to_string();
    let cfg = dir.config("observer.toml", &base);
    let config = ["--config", cfg.to_str().unwrap()];
    let d = spawn_in(&dir, &config, "unit.log", |argv| {
        in_unit(&cg, false, Some(disk), argv)
    });
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", observer_pid(d.pid()))).unwrap();
    let field = |k: &str| status_fields(&status, k).join(" ");
    assert!(field("Uid:").starts_with("65534"), "{status}");
    assert_eq!(field("Groups:"), disk.to_string());
    assert_eq!(
        field("CapEff:"),
        format!("{:016x}", (1u64 << 38) | (1u64 << 39))
    );
    for name in [&fx.xfs.name, &fx.ext4.name] {
        wait_status(&d, name, "found");
        assert_eq!(status_metric(&d, name, "found"), 1.0);
    }
    fx.check_log_writes(&d, "unit");
    check_submitter_cgroup(&d, &fx.mx.dir, "unit");
    check_reload(&d, &cfg, &base, &fx.xfs.name, "unit");
    stop(d);

    // The device policy: group disk could write, the device cgroup refuses; reading works; the
    // reaper's input is readable.
    let sh_argv = |script: String| vec!["sh".to_string(), "-c".to_string(), script];
    let (ok, out) = run(in_unit(
        &cg,
        false,
        Some(disk),
        &sh_argv(format!("exec 3<>{}", fx.spare.path)),
    ));
    assert!(
        !ok && out.contains("Operation not permitted"),
        "write open under the unit's device policy: ok={ok} {out}"
    );
    let mut plain = Command::new("setpriv");
    plain.args(&setpriv(65534, Some(disk))[1..]).args([
        "sh",
        "-c",
        &format!("exec 3<>{}", fx.spare.path),
    ]);
    let (ok, out) = run(plain);
    assert!(ok, "without the device policy group disk may open for writing (the policy is what refuses): {out}");
    let (ok, out) = run(in_unit(&cg, false, Some(disk), &sh_argv(format!(
        "dd if={} of=/dev/null bs=4096 count=1 iflag=direct status=none && cat /sys/dev/block/{}/inflight", fx.spare.path, fx.spare.sysfs("dev")))));
    assert!(ok, "read under the unit's device policy: {out}");
    eprintln!(
        "unit: write open refused (EPERM), O_DIRECT read allowed, inflight readable: {}",
        out.trim()
    );
}

/// The DaemonSet's view: without --host-root nothing of the host's filesystems is seen; with
/// it and the runtime's default device cgroup the filesystems are reported unreadable; with a
/// rule allowing block devices to be read (a device plugin's `r` grant) XFS and ext4 log writes
/// are all `log="true"`, and /stalls names host cgroups.
#[test]
fn daemonset_view_finds_logs() {
    if !require("daemonset_view_finds_logs") {
        return;
    }
    let fx = Fixture::new();
    let dir = Dir::new();
    let _host = HostDir::new();
    let unmount = [fx.mx.dir.as_path(), fx.me.dir.as_path()];

    let runc = DevCgroup::new(RUNC_DEVICES);
    // Before: no host view: neither the filesystems nor the submitters' cgroups.
    let slow = dir.config("slow.toml", SLOW_ALL);
    let slow = ["--config", slow.to_str().unwrap()];
    let d = spawn_in(&dir, &slow, "nohost.log", |argv| {
        in_daemonset(&runc, &unmount, argv)
    });
    std::thread::sleep(Duration::from_secs(1));
    for name in [&fx.xfs.name, &fx.ext4.name] {
        assert!(
            fs_entry(&d, name).is_none(),
            "the container's own mount table has {name}:\n{:#}",
            devices(&d)
        );
    }
    eprintln!("daemonset without host_root: the host's filesystems are not seen");
    check_submitter_cgroup_is(&d, &fx.mx.dir, "daemonset without host_root", false);
    stop(d);

    // The manifest as shipped, runc's default device cgroup: unreadable, said so.
    let d = spawn_in(&dir, &["--host-root", "/host"], "runc.log", |argv| {
        in_daemonset(&runc, &unmount, argv)
    });
    for name in [&fx.xfs.name, &fx.ext4.name] {
        let f = host_fs_status(&d, name, "unreadable");
        eprintln!(
            "daemonset, runc default device cgroup: {name}: {}",
            f["warning"]
        );
    }
    stop(d);
    drop(runc);

    // With read access to block devices in the device cgroup.
    let cg = DevCgroup::new(&[RUNC_DEVICES, &["b *:* r"]].concat());
    let base = format!("host_root = \"/host\"\n{SLOW_ALL}");
    let cfg = dir.config("observer.toml", &base);
    let config = ["--config", cfg.to_str().unwrap()];
    let d = spawn_in(&dir, &config, "daemonset.log", |argv| {
        in_daemonset(&cg, &unmount, argv)
    });
    for name in [&fx.xfs.name, &fx.ext4.name] {
        host_fs_status(&d, name, "found");
    }
    fx.check_log_writes(&d, "daemonset");
    check_submitter_cgroup(&d, &fx.mx.dir, "daemonset");
    check_reload(&d, &cfg, &base, &fx.xfs.name, "daemonset");
    stop(d);
    drop(cg);
}

/// The daemon (`dir`'s copy, `extra` arguments, output to `log` in `dir`) started through
/// `wrap` (the unit's or the DaemonSet's sandbox).
fn spawn_in(
    dir: &Dir,
    extra: &[&str],
    log: &str,
    wrap: impl FnOnce(&[String]) -> Command,
) -> Daemon {
    let addr = free_addr();
    let cmd = wrap(&observer_argv(dir, &addr, extra));
    Daemon::spawn(cmd, addr, &dir.0.join(log))
}

/// Waits until the daemon reports `status` for `name`'s filesystem, whose device it reaches
/// through the host's /dev, and checks `blkobs_fs_log_status` says the same.
fn host_fs_status(d: &Daemon, name: &str, status: &str) -> Value {
    let f = wait_status(d, name, status);
    assert!(
        f["device"]["node"]
            .as_str()
            .unwrap()
            .starts_with("/host/dev/"),
        "{f}"
    );
    assert_eq!(status_metric(d, name, status), 1.0);
    f
}

/// As root (docs/src/getting-started.md's way): the same features as in the other two deployments, for the
/// table in docs/operations.md (log writes: tests/fslog.rs covers more layouts).
#[test]
fn root_features() {
    if !require("root_features") {
        return;
    }
    let fx = Fixture::new();
    let dir = Dir::new();
    let cfg = dir.config("observer.toml", SLOW_ALL);
    let d = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    for name in [&fx.xfs.name, &fx.ext4.name] {
        wait_status(&d, name, "found");
        assert_eq!(status_metric(&d, name, "found"), 1.0);
    }
    fx.check_log_writes(&d, "root");
    check_submitter_cgroup(&d, &fx.mx.dir, "root");
    check_reload(&d, &cfg, SLOW_ALL, &fx.xfs.name, "root");
}
