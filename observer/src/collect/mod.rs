//! Userspace collection from the kernel maps: point-in-time reads summed over CPUs
//! ([`snapshot`]), the reaper of requests whose completion was lost ([`reaper`]), the ring-buffer
//! records of slow requests and stall episodes ([`events`]) and histogram snapshots kept for
//! windowed queries ([`windows`]).

pub mod events;
pub mod reaper;
pub mod snapshot;
pub mod windows;
