//! The kernel matrix's end-to-end checks: what `cargo xtask vmtest` runs inside each Debian
//! kernel booted in qemu (5.10, 6.1, 6.12), and what the host suite runs on its own kernel.
//!
//! Each test: the daemon, a loop device with a write-back cache, a filesystem (XFS or ext4)
//! with an fsync-heavy load plus fio mixed direct I/O, a scheduler (`none` or `mq-deadline`),
//! then against the kernel's own /proc/diskstats: exact completed requests per op, 0
//! untracked and 0 lost completions (the device exists only after the daemon started), the
//! filesystem log found and its writes classified, queue + device = total per class, and the
//! attach mode and "enter" tracepoint the daemon reports equal to what tracefs shows.
//! Sizes are small: under TCG a guest runs about ten times slower than the host. The setup is
//! `support::e2e_setup` (shared with tests/kernel.rs), the checks themselves
//! `support::end_to_end_on` (tests/drivers.rs runs them on the guests' real
//! NVMe, virtio-blk and virtio-scsi disks).

mod support;

use std::path::Path;

use support::*;

/// The tracepoint this kernel has for "a bio became a request", witnessed by tracefs, not by
/// the daemon's own BTF reading.
fn expected_enter_tracepoint() -> &'static str {
    ensure_tracefs();
    let events = Path::new("/sys/kernel/tracing/events/block");
    assert!(
        events.is_dir(),
        "tracefs is not mounted at /sys/kernel/tracing (run through `cargo xtask test`)"
    );
    if events.join("block_io_start").is_dir() {
        "block_io_start"
    } else {
        "block_rq_insert"
    }
}

fn end_to_end(fs: &str, scheduler: &str, attach: &str) {
    if !require_root(&format!("matrix {fs} {scheduler} {attach}")) {
        return;
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let tag = format!("[{} {fs} {scheduler} {attach}]", kernel.trim());
    let enter = expected_enter_tracepoint();
    let (daemon, dev) = e2e_setup(
        &tag,
        attach,
        &[("enter_tracepoint", enter), ("reaper", "request_state")],
        if fs == "xfs" { 400 } else { 160 },
        scheduler,
    );
    end_to_end_on(&daemon, &tag, dev.name(), dev.kdev(), fs);
}

#[test]
fn xfs_none() {
    end_to_end("xfs", "none", "tp_btf");
}

#[test]
fn xfs_mq_deadline() {
    end_to_end("xfs", "mq-deadline", "tp_btf");
}

#[test]
fn ext4_none() {
    end_to_end("ext4", "none", "tp_btf");
}

#[test]
fn ext4_mq_deadline() {
    end_to_end("ext4", "mq-deadline", "tp_btf");
}

#[test]
fn raw_tp_xfs_mq_deadline() {
    end_to_end("xfs", "mq-deadline", "raw_tp");
}

#[test]
fn raw_tp_ext4_none() {
    end_to_end("ext4", "none", "raw_tp");
}
