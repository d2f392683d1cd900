//! `observer`: live block I/O latency observer (see README.md; the "Layout" section maps this
//! tree). The binary `observer` is a thin CLI over [`daemon::run`] and [`client`].
//!
//! Imports flow one way: [`daemon`] → [`http`] → [`stalls`], [`merges`], [`exposition`] → [`collect`] →
//! [`bpf`], with [`state`], [`disks`], [`fslog`], [`config`], [`labels`] and [`time`] below them.

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
pub mod merges;
pub mod stalls;
pub mod state;
pub mod time;
