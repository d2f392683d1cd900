//! The kernel side, seen from userspace: the kernel's BTF ([`btf`]), the one tracepoint table
//! ([`tracepoints`]), loading and attaching the embedded programs ([`loader`]), the map handles
//! ([`maps`]), the per-device slots ([`devslots`]), batched reads of the largest map
//! ([`batch`]), the reaper's request-state probe ([`reqstate`]), what the programs cost
//! ([`progstats`]) and what they log on their rare paths ([`kernel_log`]).
//!
//! Two kinds of slot, named apart in this crate: a **slot** is an entry of a direct-mapped
//! slot array (`INFLIGHT_SLOTS`, `BIO_SLOTS`: observer_common::maps::Slot, read through
//! [`batch::SlotView`]); a disk's **per-device slot** (dev slot) is its index into the
//! per-device arrays (`DEV_INDEX` → `DEVSTATE`, `LOG_RANGES`), given by [`devslots`] (the
//! shared layout keeps it in `Inflight::dev_slot`).

pub mod batch;
pub mod btf;
pub mod devslots;
pub mod kernel_log;
pub mod loader;
pub mod maps;
pub mod progstats;
pub mod reqstate;
pub mod trace;
pub mod tracepoints;

/// The tests' one CI/skip rule (fails under CI, else a listed skip), compiled here from the
/// integration tests' file for this module's unit tests.
#[cfg(test)]
#[path = "../../tests/support/skip_rule.rs"]
mod skip_rule;
