//! `rq_state`: the reaper's question to the kernel, "is this request still in flight?". Never
//! attached: the daemon runs it on demand with BPF_PROG_TEST_RUN (raw_tp test runs exist since
//! Linux 5.10, commit 1b4d60ec162f), argument 0 being a `struct request *` it tracks, and reads
//! the program's return value: `request::state` (`enum mq_rq_state`: MQ_RQ_IDLE,
//! MQ_RQ_IN_FLIGHT, MQ_RQ_COMPLETE; block/blk-mq.c sets IN_FLIGHT in blk_mq_start_request and
//! IDLE again when the request is freed or requeued) in bits 0–7, plus [`IN_FLUSH_SEQ`] while
//! the request is inside a flush sequence (block/blk-flush.c: a write whose data part is done
//! stays COMPLETE while it waits for its post-flush), or `u32::MAX` if the struct cannot be read
//! (its device went away).
//!
//! `file_of`: the file an I/O in flight carries, asked the same way (see its docs).
//!
//! A separate object, so the daemon can own it apart from the attached programs.
#![no_std]
#![no_main]

use aya_ebpf::helpers::bpf_probe_read_kernel;
use observer_common::maps::{
    FileInfo, FileRef, FILE_DATA, FILE_METADATA, FILE_NAME_BYTES, FILE_PATH_DEPTH,
};
use observer_ebpf::{
    file::{file_layout, file_of_bio, peek},
    kernel::{in_flush_seq, is_flush},
    layout,
};

/// Set in the result while the request is inside a flush sequence.
const IN_FLUSH_SEQ: u32 = 1 << 8;

observer_ebpf::layout_global!();

/// Returns `request::state` of the request at argument 0 (see the module docs). Written without
/// aya's `raw_tracepoint` macro, which discards the return value.
#[no_mangle]
// SAFETY: the `raw_tp` section holds only this function, which aya loads as a raw tracepoint
// program by its section; nothing in Rust calls it, and its signature is the one BPF gives such a
// program (a context pointer in, a u32 returned).
#[unsafe(link_section = "raw_tp")]
pub fn rq_state(ctx: *mut core::ffi::c_void) -> u32 {
    // SAFETY: `ctx` is the raw_tp argument array the daemon hands BPF_PROG_TEST_RUN
    // (observer/src/bpf/reqstate.rs: `args[0]` = the request), one u64 at least; the verifier
    // refuses a read past the context's size.
    let rq = unsafe { *(ctx as *const u64) };
    let l = layout();
    let p = (rq + l.rq_state as u64) as *const u32;
    // SAFETY: bpf_probe_read_kernel of one u32 at `rq + state`: `rq` may be a freed struct (the
    // reaper asks about requests it lost track of), and a fault returns an error (u32::MAX below),
    // never UB.
    match unsafe { bpf_probe_read_kernel(p) } {
        // Not for the flush request itself: its end_io stays set (block/blk-flush.c), and its
        // own state says whether the device has it.
        Ok(state) if !is_flush(rq, &l) && in_flush_seq(rq, &l) => (state & 0xff) | IN_FLUSH_SEQ,
        Ok(state) => state & 0xff,
        Err(_) => u32::MAX,
    }
}

/// The one [`FileInfo`] that [`file_of`] fills (observer_common::maps::FILE_INFO). The daemon
/// runs the program under a lock and reads the element right after.
#[aya_ebpf::macros::map]
static FILE_INFO: aya_ebpf::maps::Array<FileInfo> = aya_ebpf::maps::Array::with_max_entries(1, 0);

/// What [`file_of`]'s argument 0 is (argument 1): a `struct request *`.
const OF_REQUEST: u64 = 0;
/// A `struct bio *` (an I/O of a bio-based disk).
const OF_BIO: u64 = 1;
const _: () = assert!(OF_BIO != OF_REQUEST);

/// `file_of`: the file of an I/O the daemon asks about, on demand with BPF_PROG_TEST_RUN like
/// [`rq_state`]: argument 0 a request (argument 1 [`OF_REQUEST`]) or bio ([`OF_BIO`]) in flight
/// (its first bio's first page: observer_ebpf::file), or 0 with argument 2 an inode address a
/// slow event named, checked to hold inode number argument 3. Fills `FILE_INFO`: the file and
/// its path, leaf first, up `d_parent` from its first alias (`inode::i_dentry`) to its
/// filesystem's root, at most [`FILE_PATH_DEPTH`] names of [`FILE_NAME_BYTES`]. Returns the
/// file's kind, or `u32::MAX` if the map is missing.
#[no_mangle]
// SAFETY: the `raw_tp` section holds this function and `rq_state`, which aya loads as raw
// tracepoint programs by their symbols; nothing in Rust calls it, and its signature is the one
// BPF gives such a program (a context pointer in, a u32 returned).
#[unsafe(link_section = "raw_tp")]
pub fn file_of(ctx: *mut core::ffi::c_void) -> u32 {
    // SAFETY: `ctx` is the raw_tp argument array the daemon hands BPF_PROG_TEST_RUN
    // (observer/src/bpf/reqstate.rs: four u64); the verifier refuses a read past its size.
    let arg = |i: usize| unsafe { *(ctx as *const u64).add(i) };
    let Some(out) = FILE_INFO.get_ptr_mut(0) else {
        return u32::MAX;
    };
    let l = layout();
    let f = file_layout();
    let (ptr, what) = (arg(0), arg(1));
    let file = if ptr != 0 {
        let bio = if what == OF_REQUEST {
            peek(ptr, l.rq_bio)
        } else {
            ptr
        };
        file_of_bio(bio, &l)
    } else {
        let inode = arg(2);
        let sb: u64 = peek(inode, f.inode_sb);
        if inode != 0 && peek::<u64>(inode, f.inode_ino) == arg(3) {
            FileRef {
                inode,
                ino: arg(3),
                fs_dev: peek(sb, f.sb_dev),
                kind: FILE_DATA,
            }
        } else {
            FileRef::default()
        }
    };
    // SAFETY: `out` is FILE_INFO element 0 (a non-null lookup), valid while the program runs;
    // only this program writes it, and the daemon runs it once at a time (under a lock).
    let out = unsafe { &mut *out };
    out.file = file;
    out.depth = 0;
    out.truncated = 0;
    let first: u64 = peek(file.inode, f.inode_dentry);
    if first == 0 || file.kind == FILE_METADATA {
        return file.kind;
    }
    let mut d = first - f.dentry_alias as u64;
    for i in 0..FILE_PATH_DEPTH {
        let parent: u64 = peek(d, f.dentry_parent);
        if parent == d || parent == 0 {
            return file.kind;
        }
        let name: u64 = peek(d, f.dentry_name);
        // SAFETY: bpf_probe_read_kernel_str writes at most FILE_NAME_BYTES bytes (NUL-terminated)
        // into `names[i]`, FILE_NAME_BYTES long, of the valid map value; a fault writes an empty
        // string and returns an error.
        unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel_str(
                out.names[i].as_mut_ptr() as *mut _,
                FILE_NAME_BYTES as u32,
                name as *const _,
            )
        };
        out.depth = i as u32 + 1;
        d = parent;
    }
    out.truncated = 1;
    file.kind
}
