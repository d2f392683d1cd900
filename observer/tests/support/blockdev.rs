//! Block devices made for a test: loop devices (plain, partitioned, or at a chosen index made
//! with LOOP_CTL_ADD) and null_blk. Each is detached / removed, with its backing file (and a
//! loop device the test added), on drop.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use super::{sh, unique, wait_every};

/// A loop device over a file (in /dev/shm unless made by [`LoopDev::over`]); detached on drop,
/// and the file removed when the device made it. Queue attributes changed with
/// [`LoopDev::set_queue`] are put back first: a loop device keeps them across detach and
/// re-attach, so the next test to get the same device would inherit them.
pub struct LoopDev {
    /// `/dev/loopN`.
    pub path: String,
    /// `loopN`.
    pub name: String,
    file: PathBuf,
    owns_file: bool,
    /// (attribute, original value) to restore on drop, in change order.
    restore: std::cell::RefCell<Vec<(String, String)>>,
    /// The loop index this test added with LOOP_CTL_ADD (removed after the detach on drop).
    added: Option<AddedLoop>,
}

impl LoopDev {
    /// A `size_mib` loop device with I/O scheduler `scheduler`.
    pub fn new(size_mib: u64, scheduler: &str) -> LoopDev {
        let dev = Self::kernel_scheduler(size_mib);
        dev.set_scheduler(scheduler);
        dev
    }

    /// A `size_mib` loop device, the scheduler left as the kernel chose.
    pub fn kernel_scheduler(size_mib: u64) -> LoopDev {
        Self::attach(shm_file(size_mib), &[], true)
    }

    /// A loop device over an existing `file` (not removed on drop), with `scheduler`.
    pub fn over(file: PathBuf, scheduler: &str) -> LoopDev {
        let dev = Self::attach(file, &[], false);
        dev.set_scheduler(scheduler);
        dev
    }

    /// A loop device whose backing file first gets a partition table from `sfdisk_script`
    /// (sfdisk works on the plain file), attached with `losetup -P` so the kernel creates
    /// the partition devices (`<path>p1`, ...).
    pub fn partitioned(size_mib: u64, scheduler: &str, sfdisk_script: &str) -> LoopDev {
        let file = shm_file(size_mib);
        if !sfdisk(&file, sfdisk_script) {
            let _ = std::fs::remove_file(&file);
            panic!("sfdisk failed on {}", file.display());
        }
        let dev = Self::attach(file, &["-P"], true);
        dev.set_scheduler(scheduler);
        // The kernel's own scan (losetup -P) finds nothing on kernels built without the
        // partition table parsers; then add the partitions from userspace (BLKPG).
        let p1 = dev.part(1);
        if !wait_every(Duration::from_millis(50), Duration::from_secs(1), || {
            Path::new(&p1).exists()
        }) {
            sh("partx", &["-a", &dev.path]);
        }
        assert!(
            wait_every(Duration::from_millis(50), Duration::from_secs(10), || {
                Path::new(&p1).exists()
            }),
            "{p1} did not appear"
        );
        dev
    }

    fn attach(file: PathBuf, extra: &[&str], owns_file: bool) -> LoopDev {
        let path = match Command::new("losetup")
            .args(["-f", "--show"])
            .args(extra)
            .arg(&file)
            .output()
        {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            other => {
                if owns_file {
                    let _ = std::fs::remove_file(&file);
                }
                panic!("losetup {extra:?} failed: {other:?}");
            }
        };
        let name = path.trim_start_matches("/dev/").to_string();
        LoopDev {
            path,
            name,
            file,
            owns_file,
            restore: Default::default(),
            added: None,
        }
    }

    /// Writes `/sys/block/<name>/queue/<attr>` (e.g. `iostats`, `nomerges`, `nr_requests`),
    /// asserts it reads back as written, and restores the old value on drop.
    pub fn set_queue(&self, attr: &str, value: &str) {
        let path = format!("/sys/block/{}/queue/{attr}", self.name);
        let old = std::fs::read_to_string(&path).unwrap().trim().to_string();
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("writing {path}: {e}"));
        self.restore.borrow_mut().push((attr.to_string(), old));
        assert_eq!(self.sysfs(&format!("queue/{attr}")), value, "{path}");
    }

    /// A loop device at index `index` (`/dev/loop<index>`) over `file` (not removed on drop),
    /// with `scheduler`: the device is created with LOOP_CTL_ADD, so it never is one that
    /// existed before, and removed again (LOOP_CTL_REMOVE) on drop, after the detach. `None`
    /// if the index exists already or someone else attached it first (choose another).
    pub fn at_index(index: u32, file: PathBuf, scheduler: &str) -> Option<LoopDev> {
        let added = AddedLoop::add(index)?;
        let out = Command::new("losetup")
            .arg(&added.path)
            .arg(&file)
            .output()
            .expect("run losetup");
        if !out.status.success() {
            eprintln!(
                "losetup {} failed (taken by someone else?): {}",
                added.path,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None; // `added` removes the device (if it is not in use by someone else)
        }
        let dev = LoopDev {
            path: added.path.clone(),
            name: format!("loop{index}"),
            file,
            owns_file: false,
            restore: Default::default(),
            added: Some(added),
        };
        dev.set_scheduler(scheduler);
        Some(dev)
    }

    fn set_scheduler(&self, scheduler: &str) {
        set_scheduler(&self.name, scheduler);
    }

    /// `/sys/block/<name>/<attr>`, trimmed.
    pub fn sysfs(&self, attr: &str) -> String {
        sysfs(&self.name, attr)
    }

    /// Path of partition `n` (`/dev/loopXpN`).
    pub fn part(&self, n: u32) -> String {
        format!("{}p{n}", self.path)
    }

    /// The backing file (to corrupt on-disk structures behind the kernel's back in tests).
    pub fn backing_file(&self) -> &Path {
        &self.file
    }

    /// The kernel's `MKDEV(major, minor)` of this (whole) device, as tracepoints report it.
    pub fn kdev(&self) -> u32 {
        super::kdev_of(&self.sysfs("dev"))
    }

    /// Writes `count` 4 KiB blocks with O_DIRECT at `seek_blocks` (real requests on the device).
    pub fn write_direct(&self, seek_blocks: u64, count: u64) {
        let st = Command::new("dd")
            .args(["if=/dev/zero", "bs=4k", "oflag=direct,dsync", "status=none"])
            .arg(format!("of={}", self.path))
            .arg(format!("seek={seek_blocks}"))
            .arg(format!("count={count}"))
            .status()
            .expect("run dd");
        assert!(st.success(), "dd on {} failed", self.path);
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        for (attr, old) in self.restore.borrow().iter().rev() {
            let _ = std::fs::write(format!("/sys/block/{}/queue/{attr}", self.name), old);
        }
        // Retried: a device just unmounted or closed can be busy for a moment.
        wait_every(Duration::from_millis(250), Duration::from_secs(5), || {
            Command::new("losetup")
                .arg("-d")
                .arg(&self.path)
                .status()
                .is_ok_and(|s| s.success())
        });
        if self.owns_file {
            let _ = std::fs::remove_file(&self.file);
        }
        // Then `added` (if any) drops: the loop device itself goes.
    }
}

const LOOP_CTL_ADD: libc::c_ulong = 0x4C80;
const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;

/// A loop device created by the test with LOOP_CTL_ADD (include/uapi/linux/loop.h), and its
/// node if the test had to make it; removed on drop (LOOP_CTL_REMOVE fails, harmlessly, while
/// the device is attached: detach first).
pub struct AddedLoop {
    pub index: u32,
    pub path: String,
    made_node: bool,
}

impl AddedLoop {
    /// Adds loop device `index`; `None` if it exists already (LOOP_CTL_ADD: EEXIST).
    pub fn add(index: u32) -> Option<AddedLoop> {
        let r = loop_ctl(LOOP_CTL_ADD, index);
        if r < 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(
                e.raw_os_error(),
                Some(libc::EEXIST),
                "LOOP_CTL_ADD {index}: {e}"
            );
            return None;
        }
        let mut added = AddedLoop {
            index,
            path: format!("/dev/loop{index}"),
            made_node: false,
        };
        // devtmpfs makes the node; without it (a static /dev), make it from sysfs' numbers.
        if !wait_every(Duration::from_millis(20), Duration::from_secs(3), || {
            Path::new(&added.path).exists()
        }) {
            let dev = sysfs(&format!("loop{index}"), "dev");
            let (maj, min) = dev.split_once(':').unwrap();
            sh("mknod", &[&added.path, "b", maj, min]);
            added.made_node = true;
        }
        Some(added)
    }
}

impl Drop for AddedLoop {
    fn drop(&mut self) {
        // Retried: the device may be busy for a moment after its detach.
        wait_every(Duration::from_millis(100), Duration::from_secs(5), || {
            loop_ctl(LOOP_CTL_REMOVE, self.index) >= 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENODEV)
        });
        if self.made_node {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// An ioctl on /dev/loop-control; its result (< 0: errno is set).
fn loop_ctl(request: libc::c_ulong, index: u32) -> i32 {
    use std::os::fd::AsRawFd;
    let ctl = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .expect("open /dev/loop-control");
    // SAFETY: a valid fd; the argument is the index, passed by value.
    unsafe { libc::ioctl(ctl.as_raw_fd(), request as _, index as libc::c_ulong) }
}

/// A new sparse file of `size_mib` in /dev/shm.
fn shm_file(size_mib: u64) -> PathBuf {
    let file = PathBuf::from("/dev/shm").join(format!("{}.img", unique("blkobs-test")));
    let f = std::fs::File::create(&file).expect("create backing file in /dev/shm");
    f.set_len(size_mib << 20).unwrap();
    file
}

fn set_scheduler(name: &str, scheduler: &str) {
    std::fs::write(format!("/sys/block/{name}/queue/scheduler"), scheduler).expect("set scheduler");
}

fn sysfs(name: &str, attr: &str) -> String {
    std::fs::read_to_string(format!("/sys/block/{name}/{attr}"))
        .unwrap()
        .trim()
        .to_string()
}

/// A memory-backed null_blk device with a volatile write cache, made through configfs
/// (mounted and the module loaded if needed); powered off and removed on drop.
pub struct NullBlk {
    /// `nullbN`.
    pub name: String,
    dir: PathBuf,
}

impl NullBlk {
    pub fn new(size_mib: u64, scheduler: &str) -> NullBlk {
        NullBlk::with(size_mib, scheduler, &[])
    }

    /// Two null_blk devices of `size_mib` MiB each, scheduler `none`: the first completes in the
    /// submitting task (`irqmode=0`), the second in an hrtimer interrupt 20 µs after dispatch
    /// (`irqmode=2`). Read from one CPU, the second's completions land inside the completion
    /// programs' runs for the first's (which the kernel then skips since 5.12).
    pub fn task_and_timer(size_mib: u64) -> (NullBlk, NullBlk) {
        (
            NullBlk::with(size_mib, "none", &[("irqmode", "0")]),
            NullBlk::with(
                size_mib,
                "none",
                &[("irqmode", "2"), ("completion_nsec", "20000")],
            ),
        )
    }

    /// A null_blk device with configfs attributes `attrs` set too (e.g. `irqmode`, `completion_nsec`:
    /// Documentation/block/null_blk.rst), before it is powered on.
    pub fn with(size_mib: u64, scheduler: &str, attrs: &[(&str, &str)]) -> NullBlk {
        let config = Path::new("/sys/kernel/config");
        if !config.join("nullb").is_dir() {
            // In the kernel matrix the modules live in the unpacked package (BLKOBS_VM_MODROOT).
            // null_blk pulls in configfs, which can then be mounted.
            let mut modprobe = Command::new("modprobe");
            if let Some(root) = std::env::var_os("BLKOBS_VM_MODROOT") {
                modprobe.arg("-d").arg(root);
            }
            let st = modprobe.args(["null_blk", "nr_devices=0"]).status();
            let mounted = Command::new("mountpoint")
                .args(["-q", "/sys/kernel/config"])
                .status();
            if !mounted.is_ok_and(|s| s.success()) {
                sh(
                    "mount",
                    &["-t", "configfs", "configfs", "/sys/kernel/config"],
                );
            }
            assert!(
                config.join("nullb").is_dir(),
                "null_blk is not available (modprobe: {st:?})"
            );
        }
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let item = format!(
            "blkobs{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let dir = config.join("nullb").join(&item);
        std::fs::create_dir(&dir).expect("configfs nullb device");
        let set = |attr: &str, v: &str| {
            std::fs::write(dir.join(attr), v).unwrap_or_else(|e| panic!("null_blk {attr}={v}: {e}"))
        };
        set("size", &size_mib.to_string());
        set("memory_backed", "1");
        set("cache_size", "16");
        // fstrim in the workload: memory-backed null_blk discards only when asked to.
        set("discard", "1");
        for (a, v) in attrs {
            set(a, v);
        }
        set("power", "1");
        let index = std::fs::read_to_string(dir.join("index"))
            .unwrap()
            .trim()
            .to_string();
        // The disk is named after its configfs item where the kernel does so (6.x:
        // drivers/block/null_blk/main.c, null_add_dev), else `nullb<index>` (5.10).
        let name = if Path::new("/sys/block").join(&item).exists() {
            item
        } else {
            format!("nullb{index}")
        };
        let d = NullBlk { name, dir };
        set_scheduler(&d.name, scheduler);
        d
    }

    /// `/sys/block/<name>/<attr>`, trimmed.
    pub fn sysfs(&self, attr: &str) -> String {
        sysfs(&self.name, attr)
    }
}

impl Drop for NullBlk {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("power"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The kernel name (`md127`, `dm-3`) of the block device node or link `path` (without udev,
/// lvm and cryptsetup make nodes of their own in /dev/mapper: the device number says which
/// disk).
pub fn kernel_name(path: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .rdev();
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    let link = std::fs::read_link(format!("/sys/dev/block/{maj}:{min}"))
        .unwrap_or_else(|e| panic!("/sys/dev/block/{maj}:{min}: {e}"));
    link.file_name().unwrap().to_string_lossy().into_owned()
}

/// An md RAID 1 array made with mdadm (`/dev/md/blkobs-*`, metadata 1.2, assumed clean: no
/// resync I/O), stopped and its legs' superblocks zeroed on drop.
pub struct MdArray {
    /// The kernel name (`md127`).
    pub name: String,
    path: String,
    legs: Vec<String>,
}

impl MdArray {
    /// RAID 1 over the block devices `legs` (paths).
    pub fn raid1(legs: &[&str]) -> MdArray {
        let path = format!("/dev/md/{}", unique("blkobs"));
        let n = format!("--raid-devices={}", legs.len());
        let mut args = vec![
            "--create",
            &path,
            "--run",
            "--quiet",
            "--level=1",
            &n,
            "--assume-clean",
            "--metadata=1.2",
        ];
        args.extend_from_slice(legs);
        sh("mdadm", &args);
        MdArray {
            name: kernel_name(&path),
            path,
            legs: legs.iter().map(|l| l.to_string()).collect(),
        }
    }

    /// `/sys/block/<name>/<attr>`, trimmed.
    pub fn sysfs(&self, attr: &str) -> String {
        sysfs(&self.name, attr)
    }
}

impl Drop for MdArray {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("mdadm")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet(&["--stop", &self.path]);
        for leg in &self.legs {
            quiet(&["--zero-superblock", leg]);
        }
    }
}

/// Writes the partition table `script` to `target` (a file or device) with sfdisk; whether it
/// succeeded.
pub fn sfdisk(target: &Path, script: &str) -> bool {
    let mut sfdisk = Command::new("sfdisk")
        .arg("-q")
        .arg(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    sfdisk
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    sfdisk.wait().unwrap().success()
}

/// The gid of group `disk` (from /etc/group), which owns block device nodes on a host with udev.
pub fn disk_gid() -> u32 {
    let g = std::fs::read_to_string("/etc/group").unwrap();
    g.lines()
        .find_map(|l| l.strip_prefix("disk:x:"))
        .and_then(|r| r.split(':').next())
        .and_then(|v| v.parse().ok())
        .expect("group disk in /etc/group")
}

/// Gives the device node `path` the owner and mode udev gives block devices on a host
/// (root:disk 0660; devtmpfs alone makes them root:root 0600), so that a daemon running as the
/// systemd unit does (uid 65534 + group disk) can open it for reading.
pub fn udev_perms(path: &str) {
    use std::os::unix::fs::PermissionsExt;
    let c = std::ffi::CString::new(path).unwrap();
    // SAFETY: valid C string.
    assert_eq!(
        unsafe { libc::chown(c.as_ptr(), 0, disk_gid()) },
        0,
        "chown {path}"
    );
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).unwrap();
}
