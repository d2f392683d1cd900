//! Which file a request's data belongs to: its first bio's first page → `page::mapping` →
//! `address_space::host` (the inode), read only for slow requests (probes/rq_complete.rs,
//! probes/bio_complete.rs, on the slow branch) and on demand (reqstate.rs), never for every
//! request. Every load is a `bpf_probe_read_kernel` (a page's `mapping` word is not always a
//! mapping: a fault or a wrong pointer reads as 0 or fails the checks below, never crashes).
//! Offsets come from [`FileLayout`] (`FILE_LAYOUT`, filled by the daemon from BTF).
use aya_ebpf::helpers::bpf_probe_read_kernel;
use observer_common::maps::{
    FileRef, FILE_ANON, FILE_DATA, FILE_DIRECT, FILE_KERNEL, FILE_METADATA, FILE_NONE,
};

use crate::kernel::{rodata, FileLayout, KernelLayout, FILE_LAYOUT};

/// `S_IFMT` and `S_IFBLK` (include/uapi/linux/stat.h): the file type bits of `i_mode`.
const S_IFMT: u16 = 0o170000;
/// See [`S_IFMT`].
const S_IFBLK: u16 = 0o060000;
/// PAGE_MAPPING_ANON (include/linux/page-flags.h): bit 0 of `page::mapping` marks anonymous
/// memory (its `anon_vma`, not an `address_space`).
const PAGE_MAPPING_ANON: u64 = 1;

/// Reads a `T` at `base + off` with `bpf_probe_read_kernel`; 0 (default) on a fault or a null
/// base.
#[inline(always)]
pub fn peek<T: Default + Copy>(base: u64, off: u32) -> T {
    if base == 0 {
        return T::default();
    }
    // SAFETY: bpf_probe_read_kernel copies `size_of::<T>()` bytes from any kernel address into a
    // value of its own: a fault returns an error (then `T::default()`), never UB. `T` is an
    // integer: any bits are a value.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T).unwrap_or_default() }
}

/// The file layout, read in place from `.rodata` (see [`crate::kernel::layout`]).
#[inline(always)]
pub fn file_layout() -> &'static FileLayout {
    rodata(core::ptr::addr_of!(FILE_LAYOUT))
}

/// The inode at `host`, of kind `kind`, if it is the host of `mapping` (`inode::i_mapping`
/// points back at it: a page cache page). Its number and its filesystem's device.
#[inline(always)]
fn inode_ref(host: u64, mapping: u64, kind: u32, f: &FileLayout) -> Option<FileRef> {
    if host == 0 || peek::<u64>(host, f.inode_mapping) != mapping {
        return None;
    }
    let sb: u64 = peek(host, f.inode_sb);
    Some(FileRef {
        inode: host,
        ino: peek(host, f.inode_ino),
        fs_dev: peek(sb, f.sb_dev),
        kind,
    })
}

/// The file of iomap direct I/O: `bio->bi_private` is its `struct iomap_dio`, whose `iocb`'s
/// `ki_filp->f_inode` is the file (fs/iomap/direct-io.c, iomap_dio_bio_iter). Accepted only if
/// that inode's mapping's host is the inode itself (a `bi_private` of another kind fails it).
#[inline(always)]
fn direct_io(bio: u64, l: &KernelLayout, f: &FileLayout) -> Option<FileRef> {
    if f.dio == 0 {
        return None;
    }
    let dio: u64 = peek(bio, l.bio_private);
    let iocb: u64 = peek(dio, f.dio_iocb);
    let filp: u64 = peek(iocb, f.iocb_filp);
    let inode: u64 = peek(filp, f.file_inode);
    let mapping: u64 = peek(inode, f.inode_mapping);
    if mapping == 0 || peek::<u64>(mapping, f.mapping_host) != inode {
        return None;
    }
    inode_ref(inode, mapping, FILE_DIRECT, f)
}

/// The file whose data `bio`'s first page holds ([`FileRef`]): page cache of a file
/// ([`FILE_DATA`]) or of a block device ([`FILE_METADATA`]: buffer heads, metadata and
/// journal), user memory of iomap direct I/O ([`FILE_DIRECT`]), other anonymous memory
/// ([`FILE_ANON`]), kernel memory ([`FILE_KERNEL`]), or no page ([`FILE_NONE`]). About ten
/// helper reads; the caller reads it only for a request already slow, or on demand.
#[inline(always)]
pub fn file_of_bio(bio: u64, l: &KernelLayout) -> FileRef {
    let f = file_layout();
    let none = FileRef {
        kind: FILE_NONE,
        ..FileRef::default()
    };
    if f.resolved == 0 || bio == 0 {
        return none;
    }
    let vec: u64 = peek(bio, f.bio_io_vec);
    let page: u64 = peek(vec, f.bvec_page);
    if page == 0 || peek::<u32>(bio, l.bio_size) == 0 {
        return none;
    }
    let mapping: u64 = peek(page, f.page_mapping);
    let kernel = FileRef {
        kind: FILE_KERNEL,
        ..FileRef::default()
    };
    if mapping & PAGE_MAPPING_ANON != 0 {
        return direct_io(bio, l, f).unwrap_or(FileRef {
            kind: FILE_ANON,
            ..FileRef::default()
        });
    }
    if mapping == 0 {
        return kernel;
    }
    let host: u64 = peek(mapping, f.mapping_host);
    let mode: u16 = peek(host, f.inode_mode);
    let kind = if mode & S_IFMT == S_IFBLK {
        FILE_METADATA
    } else {
        FILE_DATA
    };
    inode_ref(host, mapping, kind, f).unwrap_or(kernel)
}
