//! Kernel side of the block I/O observer: one short function per block tracepoint.
//!
//! A bio's entry (`block_bio_queue`, btt Q) is kept in `BIO_SLOTS` (leased) or `BIO_QUEUED` until it becomes a request.
//! A request's life, keyed by its `struct request *` in `INFLIGHT_SLOTS` (or `INFLIGHT`):
//! `block_io_start` (enter, original flags) → `block_rq_issue` (dispatch) → `block_rq_complete`
//! (final completion: aggregate into per-CPU histograms, forget). The internal flush request
//! never enters; it is tracked from its dispatch. Nothing goes to userspace per event.
//!
//! Every handler (one file each in `probes/`) exists twice, as `tp_btf` (preferred) and `raw_tp`
//! (fallback) program, and for two argument layouts: `(rq, ...)` since Linux 5.11 and
//! `(q, rq, ...)` before. The daemon loads the variant that matches the running kernel's BTF.
//! Struct offsets and enum values come from the read-only global `LAYOUT`, filled by the daemon
//! from kernel BTF (`observer_ebpf::kernel`).
//!
//! Imports flow one way, down these layers: a module uses only modules of the layers below its
//! own, never one of its layer or above (observer/tests/layers.rs reads this list and fails on
//! any other `crate::` path):
//!
//! 1. [`probes`]
//! 2. [`inflight`]
//! 3. [`chain`], [`queued`], [`stall`]
//! 4. [`bio_end`], [`inherit`], [`missed_merge`], [`nested`]
//! 5. [`maps`]
//!
//! The probes (one file per tracepoint) are the only programs; the modules below them keep the
//! state of one thing each (a request's entry, chained bios, bios waiting for a request, a
//! disk's stalls, remapped bios, missed merges, nested ends, the count of a bio-based I/O's
//! end), and [`maps`] holds the maps the daemon reads by name. A probe file may use a sibling's
//! items (probes/bio_remap.rs ends bios with probes/bio_complete.rs' `bio_ended`, and
//! bio_complete.rs ends remapped ones with bio_remap.rs' `ended_unrequested`); no module outside `probes/` uses one. Under all of them is the library crate
//! `observer_ebpf` (lib.rs, with layers of its own: kernel structs, slot arrays, stores), which
//! uses none of them.
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod bio_end;
mod chain;
mod inflight;
mod inherit;
mod maps;
mod missed_merge;
mod nested;
mod probes;
mod queued;
mod stall;

observer_ebpf::layout_global!();
