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
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod bio_end;
mod chain;
mod inflight;
mod inherit;
mod maps;
mod merge;
mod nested;
mod probes;
mod queued;
mod stall;

observer_ebpf::layout_global!();
