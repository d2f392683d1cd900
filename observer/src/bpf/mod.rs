//! The kernel side, seen from userspace: the kernel's BTF ([`btf`]), the one tracepoint table
//! ([`tracepoints`]), loading and attaching the embedded programs ([`loader`]), the map handles
//! ([`maps`]), the per-device slots ([`devslots`]), batched reads of the largest map
//! ([`batch`]), the reaper's request-state probe ([`reqstate`]), what the programs cost
//! ([`progstats`]) and what they log on their rare paths ([`kernel_log`]).

pub mod batch;
pub mod btf;
pub mod devslots;
pub mod kernel_log;
pub mod loader;
pub mod maps;
pub mod progstats;
pub mod reqstate;
pub mod tracepoints;
