//! Userspace collection from the kernel maps: point-in-time reads summed over CPUs
//! ([`snapshot`]), the reaper of requests whose completion was lost ([`reaper`]), the ring-buffer
//! records of slow requests and stall episodes ([`events`]), the latency histograms' exemplars
//! taken from them ([`exemplars`]) and histogram snapshots kept for
//! windowed queries ([`windows`]), and the forgetting of disks that went away ([`gone`]).

pub mod events;
pub mod exemplars;
pub mod gone;
pub mod reaper;
pub mod snapshot;
pub mod windows;
