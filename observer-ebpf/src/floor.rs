//! The benchmark "floor": empty `tp_btf` programs on exactly the tracepoints the observer uses
//! (see `observer/src/bpf/loader.rs`). Loaded by `observer-floor` for `cargo xtask bench`: what any
//! tp_btf observer pays (trampoline, program call) before doing any work. Not used by the daemon.
#![no_std]
#![no_main]

// The panic handler and license.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use observer_ebpf as _;

macro_rules! empty {
    ($($name:ident = $tp:literal),* $(,)?) => {$(
        #[btf_tracepoint(function = $tp)]
        pub fn $name(_c: BtfTracePointContext) -> i32 {
            0
        }
    )*};
}

empty!(
    // Names stay within the kernel's 15 characters.
    f_io_start = "block_io_start",
    f_rq_insert = "block_rq_insert",
    f_rq_issue = "block_rq_issue",
    f_rq_requeue = "block_rq_requeue",
    f_rq_merge = "block_rq_merge",
    f_rq_complete = "block_rq_complete",
    f_rq_compl_nst = "block_rq_complete",
    f_bio_remap = "block_bio_remap",
    f_bio_split = "block_split",
    f_bio_back = "block_bio_backmerge",
    f_bio_front = "block_bio_frontmerge",
    f_bio_queue = "block_bio_queue",
    f_bio_complete = "block_bio_complete",
    f_bio_compl_nst = "block_bio_complete",
);
