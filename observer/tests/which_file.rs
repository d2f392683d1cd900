//! Which file a slow or stuck request carries (`file` in `/stalls` and `/inflight`): two ext4
//! filesystems, one on a slow disk (a loop device over the FUSE file of support/slowfs.rs,
//! every write held 150 ms: over the 100 ms slow threshold) and one on a fast loop disk, each
//! with a named file written through the page cache and fsync'ed. Witnesses: `stat -c %i` (the
//! inode number) and `stat -c %Hd:%Ld` (the filesystem's device) of each file, and the paths the
//! test made. The slow records of the slow disk name the slow file (inode, device, path) and
//! never the fast one; the journal's and metadata's writes (buffer heads: the block device's
//! page cache) say `metadata`; a direct write names its file through iomap (`direct`); and a
//! write held at the device is listed stuck with its file while it is held.

mod support;

use std::{
    io::Write,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;
use support::*;

/// Each write of the slow disk is held this long (over the default 100 ms slow threshold).
const WRITE_DELAY: Duration = Duration::from_millis(150);

/// (inode number, `major:minor` of its filesystem) of `path`, from stat(1).
fn stat(path: &Path) -> (u64, String) {
    let out = Command::new("stat")
        .args(["-c", "%i %Hd:%Ld"])
        .arg(path)
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    let (ino, dev) = s.trim().split_once(' ').unwrap();
    (ino.parse().unwrap(), dev.to_string())
}

/// Writes `bytes` to a new file through the page cache and fsyncs it.
fn write_fsync(path: &Path, bytes: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&vec![0x5au8; bytes]).unwrap();
    f.sync_all().unwrap();
}

/// Whether record `r`'s `file` is (`ino`, `dev`).
fn names(r: &Value, (ino, dev): &(u64, String)) -> bool {
    r["file"]["inode"].as_u64() == Some(*ino) && r["file"]["fs_device"] == dev.as_str()
}

/// The slow and fast files, buffered and direct: see the module docs.
#[test]
fn slow_records_name_the_slow_file() {
    if !require_root("slow_records_name_the_slow_file") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let slow = SlowDisk::new(64, "none");
    let fast = LoopDev::new(64, "none");
    let slow_fs = Mount::new(&slow, &mkfs_ext4(&[]));
    let fast_fs = Mount::new(&fast, &mkfs_ext4(&[]));
    wait_tracked(&daemon, &slow.name);
    slow.mount.set_write_delay(WRITE_DELAY);
    let slow_file = slow_fs.dir.join("slow.dat");
    let fast_file = fast_fs.dir.join("fast.dat");
    write_fsync(&slow_file, 256 << 10);
    write_fsync(&fast_file, 256 << 10);
    // Direct I/O from user memory: dd's buffer is anonymous; the file comes from iomap's dio.
    let direct_file = slow_fs.dir.join("direct.dat");
    let dd = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=64k",
            "count=2",
            "oflag=direct",
            "status=none",
        ])
        .arg(format!("of={}", direct_file.display()))
        .status()
        .unwrap();
    assert!(dd.success());
    let (s, f, d) = (stat(&slow_file), stat(&fast_file), stat(&direct_file));
    std::thread::sleep(Duration::from_millis(500));
    let all = json(&daemon, "/stalls?format=json&limit=5000");
    let recs = slow_where(&all, |r| r["device"] == slow.name.as_str());
    eprintln!(
        "slow {s:?} fast {f:?} direct {d:?}; files of {}'s slow records: {:?}",
        slow.name,
        recs.iter().map(|r| &r["file"]).collect::<Vec<_>>()
    );
    // The slow file's data: its inode, device and path.
    let data: Vec<&Value> = recs.iter().filter(|r| names(r, &s)).collect();
    assert!(!data.is_empty(), "no slow record names {slow_file:?}");
    for r in &data {
        assert_eq!(r["file"]["kind"], "data", "{r}");
        assert_eq!(r["file"]["path"], slow_file.to_str().unwrap(), "{r}");
        assert_eq!(r["op"], "write", "{r}");
    }
    // The journal (the fsyncs' commits) and metadata: the block device's page cache.
    assert!(
        recs.iter().any(|r| r["file"]["kind"] == "metadata"
            && r["file"]["inode"].is_null()
            && r["file"]["path"].is_null()),
        "no slow record labelled metadata"
    );
    // The direct write: its file through iomap.
    let direct: Vec<&Value> = recs.iter().filter(|r| names(r, &d)).collect();
    assert!(!direct.is_empty(), "no slow record names {direct_file:?}");
    for r in &direct {
        assert_eq!(r["file"]["kind"], "direct", "{r}");
        assert_eq!(r["file"]["path"], direct_file.to_str().unwrap(), "{r}");
    }
    // Never the fast file, on any disk's slow record.
    let wrong = slow_where(&all, |r| names(r, &f));
    assert!(
        wrong.is_empty(),
        "slow records name the fast file: {wrong:?}"
    );
    // The text view has the same file.
    let (_, text) = daemon
        .get(&format!("/stalls?device={}&limit=12", slow.name))
        .unwrap();
    eprintln!("{text}");
    let (_, text) = daemon.get("/stalls?limit=5000").unwrap();
    assert!(
        text.contains(&format!("{} (ino {})", slow_file.display(), s.0)),
        "{text}"
    );
}

/// A buffered write held at the slow disk (its FUSE file holds it) is listed stuck in `/stalls`
/// and in `/inflight` with its file while held.
#[test]
fn stuck_write_names_its_file() {
    if !require_root("stuck_write_names_its_file") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let slow = SlowDisk::new(64, "none");
    let slow_fs = Mount::new(&slow, &mkfs_ext4(&[]));
    wait_tracked(&daemon, &slow.name);
    let file = slow_fs.dir.join("stuck.dat");
    std::fs::write(&file, vec![0x11u8; 64 << 10]).unwrap();
    let want = stat(&file);
    // A data write of that file only (no journal commit: sync_file_range writes the pages).
    let mut child = slow.hold_write(|| {
        Command::new("dd")
            .args([
                "if=/dev/zero",
                "bs=64k",
                "count=1",
                "conv=notrunc,fdatasync",
            ])
            .arg(format!("of={}", file.display()))
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    let stalls = json(
        &daemon,
        &format!("/stalls?device={}&format=json", slow.name),
    );
    let inflight = json(&daemon, &format!("/inflight?device={}", slow.name));
    let (_, text) = daemon
        .get(&format!("/stalls?device={}", slow.name))
        .unwrap();
    eprintln!("{text}");
    slow.knobs().release();
    assert!(child.wait().unwrap().success());
    eprintln!(
        "{want:?}: stuck {}; inflight {}",
        stalls["stuck"], inflight["requests"]
    );
    for list in [&stalls["stuck"], &inflight["requests"]] {
        let held: Vec<&Value> = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| names(r, &want))
            .collect();
        assert!(
            !held.is_empty(),
            "the held write of {file:?} is not listed: {list}"
        );
        for r in held {
            assert_eq!(r["file"]["kind"], "data", "{r}");
            assert_eq!(r["file"]["path"], file.to_str().unwrap(), "{r}");
        }
    }
}
