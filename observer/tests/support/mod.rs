//! Shared fixtures for the integration tests, one file per concern. Every fixture cleans up in
//! `Drop` (loop and null_blk devices, mounts, FUSE, ftrace instances, processes, temp dirs), so
//! a failing assertion leaves nothing behind.
//!
//! - `skip`: the one rule for a test that cannot run here (fails under CI, else skips visibly).
//! - `process`: tools, commands, child guards, HTTP, polling, temp dirs, BPF ids.
//! - `daemon`: the observer daemon fixture, its `/devices` answers and its slow records
//!   (`slow_records`, `slow_where`).
//! - `e2e`: the kernel matrix's end-to-end checks on one disk against /proc/diskstats, and
//!   their setup (`e2e_setup`: daemon and build info, the disk under test `TestDev`; `kdev_of`).
//! - `guest`: the kernel-matrix guests' qemu disks, found by serial; queue attributes set
//!   and restored.
//! - `blockdev`: loop devices (plain, partitioned, over a file) and null_blk; udev's device
//!   node owner and mode (root:disk 0660).
//! - `cgroup`: cgroup v2 groups to run writers in, their `io.stat`, controllers enabled.
//! - `mounts`: filesystems made and mounted.
//! - `metrics`: the exposition parsed into samples.
//! - `prometheus`: Debian's Prometheus scraping a daemon (`prometheus`), its HTTP API (`prom_get`).
//! - `ftrace`: a private ftrace instance and its records (tracefs mounted, the `trace` file
//!   read, times as printed: `printed_window`), CLOCK_MONOTONIC (`mono_ns`).
//! - `witness`: /proc/diskstats and the ftrace witnesses (`block_io_start`, counts of one
//!   block event).
//! - `fslog_witness`: the filesystem log witnesses (xfs_db, dumpe2fs/debugfs) and classification.
//! - `slowfs`: a FUSE-backed disk with injected delays, and a write held on it until released
//!   (`SlowDisk::hold_write`; `hold_write_until` the writers are where the test wants them).
//! - `sysctl`: a kernel sysctl set for a test and restored.
//! - `tls`: a throw-away PKI (rcgen), web config files, `curl` as the TLS client.
//!
//! Each test file is its own crate and uses a part of this: the rest would warn there (every
//! item here is used by some test file).
#![allow(dead_code, unused_imports)]

mod blockdev;
mod cgroup;
mod daemon;
mod e2e;
mod fslog_witness;
mod ftrace;
mod guest;
mod metrics;
mod mounts;
mod process;
mod prometheus;
mod skip;
mod slowfs;
mod sysctl;
mod tls;
mod witness;

pub use blockdev::*;
pub use cgroup::*;
pub use daemon::*;
pub use e2e::*;
pub use fslog_witness::*;
pub use ftrace::*;
pub use guest::*;
pub use metrics::*;
pub use mounts::*;
pub use process::*;
pub use prometheus::*;
pub use skip::*;
pub use slowfs::*;
pub use sysctl::*;
pub use tls::*;
pub use witness::*;
