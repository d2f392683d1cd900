//! `observer`: live block I/O latency observer (see README.md; docs/src/design/layout.md maps this
//! tree). The binary `observer` is a thin CLI over [`daemon::run`] and [`client`].
//!
//! Imports flow one way, down these layers: a module uses only modules of the layers below
//! its own, never one of its layer or above (`tests/layers.rs` reads this list and fails on any
//! other edge):
//!
//! 1. [`daemon`], [`client`], [`trace`]
//! 2. [`http`]
//! 3. [`state`]
//! 4. [`stalls`], [`merge_report`], [`exposition`]
//! 5. [`collect`]
//! 6. [`bpf`]
//! 7. [`disks`], [`fslog`], [`config`], [`labels`], [`time`]
//!
//! So data lives with the layer that owns it: the HTTP rejection counters with the metrics
//! that export them (`exposition::selfmon`), the filesystem log metrics in `exposition::fslog`,
//! the cgroup label caches in `labels`, the kernel map handles in `bpf` and the policy over
//! them (disks gone for `forget_after`) in `collect`.

#![warn(missing_docs)]

pub mod bpf;
pub mod client;
pub mod collect;
pub mod config;
pub mod daemon;
pub mod disks;
pub mod exposition;
pub mod fslog;
pub mod http;
pub mod labels;
pub mod merge_report;
pub mod stalls;
pub mod state;
pub mod time;
pub mod trace;
