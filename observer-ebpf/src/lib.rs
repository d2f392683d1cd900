//! Shared by the eBPF objects (`observer`, `reqstate`, `floor`, `costs`): reading kernel
//! structs through the BTF-derived `LAYOUT` ([`layout_global!`]), writing map values without
//! `memset`/`memcpy`, the `tp_btf`/`raw_tp` program pair macro, and the one panic handler and
//! license.
//!
//! Maps are not declared here: each object declares its own, so the empty `floor` programs
//! carry no map the daemon's programs use.
//!
//! The bottom of every object's layers (the observer's are in main.rs). Within it, imports flow
//! down these layers (observer/tests/layers.rs checks them as main.rs' own):
//!
//! 1. [`file`], [`slots`]
//! 2. [`kernel`], [`store`]
#![no_std]
#![feature(asm_experimental_arch)]

pub mod file;
pub mod kernel;
pub mod slots;
pub mod store;

pub use kernel::{arg, layout, read};

/// `programs!(handler => "tracepoint", btf_name, raw_name, i)` declares one handler's entry pair
/// for one argument layout: a `tp_btf` program (preferred) and a `raw_tp` fallback, both calling
/// `handler(&ctx, i)`, where `i` is the index of the request (or bio) among the tracepoint's
/// arguments. Each handler uses it twice: `i` = 0 (Linux ≥ 5.11) and the queue-first layout of
/// older kernels.
#[macro_export]
macro_rules! programs {
    ($handler:ident => $tp:literal, $btf:ident, $raw:ident, $i:literal) => {
        // `inline(always)`: aya's macro wraps this function in the program's entry point as an
        // inner function of the same name, taking the context struct by value. Left out of
        // line (LLVM did so once `block_rq_complete`'s handler grew), every event pays a
        // BPF-to-BPF call and a second stack frame (observer/src/bpf/loader.rs
        // `entry_points_inline_their_handler`).
        #[aya_ebpf::macros::btf_tracepoint(function = $tp)]
        #[inline(always)]
        pub fn $btf(c: aya_ebpf::programs::BtfTracePointContext) -> i32 {
            $handler(&c, $i);
            0
        }
        #[aya_ebpf::macros::raw_tracepoint(tracepoint = $tp)]
        #[inline(always)]
        pub fn $raw(c: aya_ebpf::programs::RawTracePointContext) -> i32 {
            $handler(&c, $i);
            0
        }
    };
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// SAFETY: the `license` section holds only this NUL-terminated string, which the loader passes to
// the kernel as the programs' license (aya-obj reads the section by name); no code refers to it,
// and no other symbol is placed there.
#[unsafe(link_section = "license")]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
