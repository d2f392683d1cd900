//! Userspace collection from the kernel maps: point-in-time reads summed over CPUs
//! ([`snapshot`]), the reaper of requests whose completion was lost ([`reaper`]), the ring-buffer
//! records of slow requests and stall episodes ([`events`]), the latency histograms' exemplars
//! taken from them ([`exemplars`]) and histogram snapshots kept for
//! windowed queries ([`windows`]), the forgetting of disks that went away ([`gone`]), and the per-cgroup latency series
//! of `[cgroups] latency`, bounded per disk ([`cgroup_latency`]).

pub mod cgroup_latency;
pub mod events;
pub mod exemplars;
pub mod gone;
pub mod reaper;
pub mod snapshot;
pub mod windows;
