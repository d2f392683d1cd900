//! A FUSE filesystem with one file, `disk.img`, kept in memory, whose writes and fsyncs sleep
//! a configured time, and which can hold one write until released: a block device with a
//! known, injected delay once a loop device is put on top of it. The file is opened in
//! direct-I/O mode so every loop request reaches this code synchronously.

use std::{
    ffi::OsStr,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Condvar, Mutex,
    },
    time::{Duration, UNIX_EPOCH},
};

use super::{unique, wait_every, LoopDev};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, WriteFlags,
};

/// Controls shared with the test.
#[derive(Default)]
pub struct Knobs {
    /// Sleep per write (ns).
    pub write_delay_ns: AtomicU64,
    /// Sleep per fsync (ns).
    pub fsync_delay_ns: AtomicU64,
    /// When set, the next write blocks until [`Knobs::release`].
    pub hold_next: AtomicBool,
    held: Mutex<bool>,
    cv: Condvar,
    /// Writes seen.
    pub writes: AtomicU64,
    /// (byte offset, time spent in the write handler) of every write: the server-side witness.
    pub served: Mutex<Vec<(u64, Duration)>>,
}

impl Knobs {
    /// Holds the next write that reaches the file, until [`Knobs::release`].
    pub fn hold_next_write(&self) {
        self.hold_next.store(true, Ordering::SeqCst);
    }

    /// Lets a held write go.
    pub fn release(&self) {
        *self.held.lock().unwrap() = false;
        self.cv.notify_all();
    }

    /// Whether a write is being held now.
    pub fn holding(&self) -> bool {
        *self.held.lock().unwrap()
    }
}

struct SlowFs {
    data: Mutex<Vec<u8>>,
    knobs: Arc<Knobs>,
}

const TTL: Duration = Duration::from_secs(1);

fn attr(ino: u64, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size / 512,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if ino == 1 {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if ino == 1 { 0o755 } else { 0o644 },
        nlink: if ino == 1 { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for SlowFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) == 1 && name == "disk.img" {
            reply.entry(
                &TTL,
                &attr(2, self.data.lock().unwrap().len() as u64),
                fuser::Generation(0),
            );
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match u64::from(ino) {
            1 => reply.attr(&TTL, &attr(1, 0)),
            2 => reply.attr(&TTL, &attr(2, self.data.lock().unwrap().len() as u64)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let data = self.data.lock().unwrap();
        let start = (offset as usize).min(data.len());
        let end = (start + size as usize).min(data.len());
        reply.data(&data[start..end]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        buf: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let k = &self.knobs;
        let started = std::time::Instant::now();
        if k.hold_next.swap(false, Ordering::SeqCst) {
            let mut held = k.held.lock().unwrap();
            *held = true;
            while *held {
                held = k.cv.wait(held).unwrap();
            }
        }
        std::thread::sleep(Duration::from_nanos(
            k.write_delay_ns.load(Ordering::SeqCst),
        ));
        {
            let mut data = self.data.lock().unwrap();
            let start = (offset as usize).min(data.len());
            let end = (start + buf.len()).min(data.len());
            data[start..end].copy_from_slice(&buf[..end - start]);
        }
        k.writes.fetch_add(1, Ordering::SeqCst);
        k.served.lock().unwrap().push((offset, started.elapsed()));
        reply.written(buf.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        std::thread::sleep(Duration::from_nanos(
            self.knobs.fsync_delay_ns.load(Ordering::SeqCst),
        ));
        reply.ok();
    }
}

/// The mounted filesystem; unmounted (and its directory removed) on drop.
pub struct SlowMount {
    pub dir: PathBuf,
    pub knobs: Arc<Knobs>,
    session: Option<fuser::BackgroundSession>,
}

impl SlowMount {
    /// Mounts a filesystem with a `size_mib` disk.img under a new directory in /tmp.
    pub fn new(size_mib: usize) -> SlowMount {
        let dir = std::env::temp_dir().join(unique("blkobs-slowfs"));
        std::fs::create_dir_all(&dir).unwrap();
        let knobs = Arc::new(Knobs::default());
        let fs = SlowFs {
            data: Mutex::new(vec![0u8; size_mib << 20]),
            knobs: knobs.clone(),
        };
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("blkobs-slowfs".into()),
            fuser::MountOption::RW,
        ];
        cfg.acl = fuser::SessionACL::All;
        let session = fuser::spawn_mount(fs, &dir, &cfg)
            .expect("mounting the FUSE test filesystem (needs /dev/fuse and root)");
        SlowMount {
            dir,
            knobs,
            session: Some(session),
        }
    }

    /// Path of the backing file.
    pub fn image(&self) -> PathBuf {
        self.dir.join("disk.img")
    }

    /// Sets the write delay.
    pub fn set_write_delay(&self, d: Duration) {
        self.knobs
            .write_delay_ns
            .store(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Drop for SlowMount {
    fn drop(&mut self) {
        self.knobs.release();
        self.knobs.write_delay_ns.store(0, Ordering::SeqCst);
        drop(self.session.take());
        if std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .contains(self.dir.to_str().unwrap_or("?"))
        {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A loop device on a [`SlowMount`]'s image; derefs to the [`LoopDev`]. Drop releases any
/// held write and removes the delay, then detaches the loop device, then unmounts.
pub struct SlowDisk {
    dev: LoopDev,
    pub mount: SlowMount,
}

impl SlowDisk {
    pub fn new(size_mib: usize, scheduler: &str) -> SlowDisk {
        let mount = SlowMount::new(size_mib);
        SlowDisk {
            dev: LoopDev::over(mount.image(), scheduler),
            mount,
        }
    }

    /// A slow disk at loop index `index`, created for it (see [`LoopDev::at_index`]); `None`
    /// if that index exists already or was taken.
    pub fn at_index(index: u32, size_mib: usize, scheduler: &str) -> Option<SlowDisk> {
        let mount = SlowMount::new(size_mib);
        let dev = LoopDev::at_index(index, mount.image(), scheduler)?;
        Some(SlowDisk { dev, mount })
    }

    pub fn knobs(&self) -> &Knobs {
        &self.mount.knobs
    }

    /// Holds the next write that reaches the FUSE file, runs `submit` (which starts the writer
    /// of that write) and waits until the file holds it, polling every 10 ms; panics if it does
    /// not within 10 s. Returns what `submit` returned (the writer, to wait for after
    /// [`Knobs::release`]).
    pub fn hold_write<T>(&self, submit: impl FnOnce() -> T) -> T {
        self.hold_write_until(
            submit,
            Duration::from_millis(10),
            Duration::from_secs(10),
            |_| Ok(()),
        )
    }

    /// Holds the next write that reaches the FUSE file, runs `submit` (which starts the
    /// writers) and waits until the file holds that write and `ready` (called every `every`
    /// with what `submit` returned) says the writers are where the test wants them; panics
    /// after `timeout` with `ready`'s last complaint. Returns what `submit` returned.
    pub fn hold_write_until<T>(
        &self,
        submit: impl FnOnce() -> T,
        every: Duration,
        timeout: Duration,
        mut ready: impl FnMut(&T) -> Result<(), String>,
    ) -> T {
        self.knobs().hold_next_write();
        let writers = submit();
        let mut why = String::new();
        let done = wait_every(every, timeout, || match ready(&writers) {
            Ok(()) if self.knobs().holding() => true,
            Ok(()) => {
                why = "the FUSE file never held the write".into();
                false
            }
            Err(e) => {
                why = e;
                false
            }
        });
        assert!(done, "{why}");
        writers
    }
}

impl std::ops::Deref for SlowDisk {
    type Target = LoopDev;
    fn deref(&self) -> &LoopDev {
        &self.dev
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        // Before the fields drop: `dev` (detach) first, then `mount`.
        self.mount.knobs.write_delay_ns.store(0, Ordering::SeqCst);
        self.mount.knobs.hold_next.store(false, Ordering::SeqCst);
        self.mount.knobs.release();
    }
}
