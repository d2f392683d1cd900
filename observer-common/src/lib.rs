//! Types and pure functions shared by the eBPF programs (`observer-ebpf`, `no_std`) and the daemon
//! (`observer`, with the `user` feature).
//!
//! Everything that both sides must agree on lives here exactly once: the map layouts
//! ([`maps`]), the kernel struct layout handed to the programs ([`layout`]), the I/O class
//! encoding ([`class`]), the histogram bucket math ([`hist`]) and what a request looked like at
//! its first dispatch ([`dispatch`]: size and merged-bios buckets, the missed-merge rule) and
//! the decisions about a request's stages ([`stage`]: latency arithmetic, which stages are
//! recorded, clock anomalies, final completions, slow requests, stalls, dispatch after requeue).
#![cfg_attr(not(test), no_std)]

pub mod biodisk;
pub mod blktrace;
pub mod class;
pub mod dispatch;
pub mod hist;
pub mod layout;
pub mod maps;
pub mod stage;

/// Stages of a request's life, named after btt's.
///
/// Index into [`maps::ClassStats::stages`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Entered the block layer → dispatched to the driver (btt Q2D = Q2G + G2I + I2D).
    Queue = 0,
    /// Dispatched to the driver → completed (btt D2C).
    Device = 1,
    /// Entered → completed (btt Q2C).
    Total = 2,
}

impl Stage {
    /// All stages, in index order.
    pub const ALL: [Stage; 3] = [Stage::Queue, Stage::Device, Stage::Total];
    /// Number of stages.
    pub const COUNT: usize = 3;

    /// The label value used in metrics and the API.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Queue => "queue",
            Stage::Device => "device",
            Stage::Total => "total",
        }
    }
}
