//! Reading the kernel's block-layer structs. Offsets and enum values come from the read-only
//! global [`LAYOUT`], which the loader fills from kernel BTF; each compatibility branch below
//! names the kernel change that made it necessary.
use aya_ebpf::{helpers::bpf_probe_read_kernel, EbpfContext};
pub use observer_common::layout::{FileLayout, KernelLayout, OwnerLayout};
use observer_common::{
    class::{op_of, Op},
    maps::{disk_name_hash, mkdev, nameless_dev},
};

extern "C" {
    /// Defined by each object that reads kernel structs, with [`crate::layout_global!`] (so the
    /// empty `floor` programs carry no `.rodata`).
    static LAYOUT: KernelLayout;
    /// Defined with `LAYOUT` by [`crate::layout_global!`]: the owner-cgroup chain's offsets.
    static OWNER_LAYOUT: OwnerLayout;
    /// Defined with `LAYOUT` by [`crate::layout_global!`]: the bio-to-file chain's offsets
    /// (crate::file).
    pub(crate) static FILE_LAYOUT: FileLayout;
}

/// Defines `LAYOUT`, the kernel's struct offsets and enum values: filled by the loader from
/// kernel BTF before load (`.rodata`: the verifier treats it as constant).
#[macro_export]
macro_rules! layout_global {
    () => {
        #[no_mangle]
        static LAYOUT: $crate::kernel::KernelLayout = $crate::kernel::KernelLayout::ZERO;
        #[no_mangle]
        static OWNER_LAYOUT: observer_common::layout::OwnerLayout =
            observer_common::layout::OwnerLayout::ZERO;
        #[no_mangle]
        static FILE_LAYOUT: observer_common::layout::FileLayout =
            observer_common::layout::FileLayout::ZERO;
    };
}

/// The kernel's layout, read in place: each field a load from `.rodata` where it is used (the
/// verifier sees the loader's constant), not a 168-byte copy on the program's stack (which
/// took `block_rq_complete` and `block_bio_complete` to the verifier's 512-byte limit:
/// observer/src/bpf/loader.rs, `programs_stack_within_margin`).
#[inline(always)]
pub fn layout() -> &'static KernelLayout {
    rodata(core::ptr::addr_of!(LAYOUT))
}

/// A layout global read in place ([`layout`], [`crate::file::file_layout`]).
#[inline(always)]
pub(crate) fn rodata<T>(mut p: *const T) -> &'static T {
    // The value is patched into the object after compilation: the compiler must not fold the
    // fields to the zeros it was built with, so it is not told which static `p` points at.
    // SAFETY: the asm only copies the register onto itself: no memory, no other register.
    unsafe { core::arch::asm!("{0} = {0}", inout(reg) p) };
    // SAFETY: every caller passes the address of a layout static (`LAYOUT`, `FILE_LAYOUT`) that
    // every object linking this defines ([`layout_global!`](crate::layout_global)); nothing
    // writes it at run time (`.rodata`, patched by the loader before load), and any bits are a
    // value (u32 and u64 fields only).
    unsafe { &*p }
}

/// Whether these are the tp_btf programs (`LAYOUT.direct_loads`): a read-only global, so the
/// verifier sees only the branch a program really takes.
#[inline(always)]
pub fn direct_loads() -> bool {
    // SAFETY: one u32 field of the static `LAYOUT` ([`layout_global!`](crate::layout_global)),
    // which nothing writes at run time (`.rodata`, patched by the loader before load); a volatile
    // load, so the verifier sees the patched constant.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(LAYOUT.direct_loads)) != 0 }
}

/// Reads a kernel struct field at `base + off`. In tp_btf programs (`direct_loads`) a plain
/// load, which the verifier checks against BTF and turns into a fault-safe load; in raw_tp
/// programs `bpf_probe_read_kernel`. The flag is a read-only global, so the verifier only sees
/// the branch the program really takes. 0 (or the default) if the read fails.
#[inline(always)]
pub fn read<T: Default + Copy>(base: u64, off: u32) -> T {
    // SAFETY: one u32 field of the static `LAYOUT` ([`layout_global!`](crate::layout_global)),
    // which nothing writes at run time (`.rodata`, patched by the loader before load); a volatile
    // load, so the verifier sees the patched constant.
    let direct = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(LAYOUT.direct_loads)) };
    let p = (base + off as u64) as *const T;
    if direct != 0 {
        // SAFETY: taken only when the loader set `direct_loads`, i.e. in the tp_btf programs:
        // `base` is then a BTF-typed kernel pointer (a tracepoint argument or a load through one),
        // and the verifier checks this load against its BTF type and makes it a PROBE_MEM load,
        // whose fault reads 0 (kernel/bpf/verifier.c, the exception table) instead of crashing. `T`
        // is an integer or pointer-sized number: any bits are a value.
        unsafe { core::ptr::read_volatile(p) }
    } else {
        // SAFETY: bpf_probe_read_kernel copies `size_of::<T>()` bytes from any kernel address into
        // a value of its own: a fault returns an error (then `T::default()`), never UB. `T` is
        // plain data.
        unsafe { bpf_probe_read_kernel(p).unwrap_or_default() }
    }
}

/// Tracepoint argument `n` (raw and BTF tracepoints both get an array of u64).
#[inline(always)]
pub fn arg(ctx: &impl EbpfContext, n: usize) -> u64 {
    // SAFETY: `ctx` points at the tracepoint's arguments, one u64 each in TP_PROTO order
    // (include/trace/events/block.h; kernel/trace/bpf_trace.c `__bpf_trace_run` passes `u64 args[]`
    // to raw_tp and tp_btf alike). Every caller's `n` is below the argument count of the prototype
    // its program was chosen for (probes/mod.rs), and the verifier refuses a context read past it.
    unsafe { *(ctx.as_ptr() as *const u64).add(n) }
}

/// The disk of a `struct gendisk *` as /proc/diskstats numbers it: `mkdev(major,
/// first_minor)`, or before 5.11 its part0's `devt` ([`KernelLayout::disk_devt`]: the same
/// number for every disk but a hidden one). For a disk without a number (a hidden disk, an
/// NVMe multipath path `nvmeXcYnZ`, on 5.10: diskstats shows `0 0`) the [`nameless_dev`] of
/// its `disk_name`, which the daemon computes from the `/sys/block` name. Hidden disks have no
/// `dev` in sysfs on any kernel; the daemon takes their numbers from /proc/diskstats.
#[inline(always)]
pub fn disk_dev(disk: u64, l: &KernelLayout) -> u32 {
    // Read from the `.rodata` global itself, not the caller's stack copy `l`: the verifier
    // then knows the value and drops the branch this kernel does not take (every kernel since
    // 5.11 keeps the plain `mkdev` path, with no extra branch to verify).
    // SAFETY: one u32 field of the static `LAYOUT` ([`layout_global!`](crate::layout_global)),
    // which nothing writes at run time (`.rodata`, patched by the loader before load); a volatile
    // load, so the verifier sees the patched constant.
    let devt = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(LAYOUT.disk_devt)) };
    if devt == 0 {
        return mkdev(
            read::<u32>(disk, l.disk_major),
            read::<u32>(disk, l.disk_first_minor),
        );
    }
    let dev: u32 = read(disk, devt);
    // raw_tp (no direct loads): the hash's four helper reads and this branch, at every call
    // site, made 5.10's verifier run past 120 s under TCG; there hidden paths stay `0:0`.
    // SAFETY: one u32 field of the static `LAYOUT` ([`layout_global!`](crate::layout_global)),
    // which nothing writes at run time (`.rodata`, patched by the loader before load); a volatile
    // load, so the verifier sees the patched constant.
    let direct = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(LAYOUT.direct_loads)) };
    if direct == 0 || dev != 0 {
        return dev;
    }
    // SAFETY: one u32 field of the static `LAYOUT` ([`layout_global!`](crate::layout_global)),
    // which nothing writes at run time (`.rodata`, patched by the loader before load); a volatile
    // load, so the verifier sees the patched constant.
    let name = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(LAYOUT.disk_name)) };
    nameless_disk_dev(disk, name)
}

/// [`nameless_dev`] of `gendisk::disk_name` at `disk + off` (`DISK_NAME_LEN` = 32 bytes):
/// four 8-byte loads, hashed up to the first NUL without a branch ([`disk_name_hash`]).
#[inline(always)]
fn nameless_disk_dev(disk: u64, off: u32) -> u32 {
    nameless_dev(disk_name_hash([
        read(disk, off),
        read(disk, off + 8),
        read(disk, off + 16),
        read(disk, off + 24),
    ]))
}

/// The disk of a request; partitions count for their whole disk. `rq->rq_disk` until
/// f3fa33acca9f ("block: remove the ->rq_disk field in struct request", 5.16), `rq->q->disk`
/// since.
#[inline(always)]
pub fn rq_dev(rq: u64, l: &KernelLayout) -> u32 {
    let disk: u64 = if l.rq_disk != 0 {
        read(rq, l.rq_disk)
    } else {
        let q: u64 = read(rq, l.rq_q);
        read(q, l.q_disk)
    };
    disk_dev(disk, l)
}

/// The `struct gendisk *` of a bio: `bio->bi_disk` until 309dca309fc3 ("block: store a
/// block_device pointer in struct bio", 5.12), `bio->bi_bdev->bd_disk` since.
#[inline(always)]
pub fn bio_disk(bio: u64, l: &KernelLayout) -> u64 {
    if l.bio_disk != 0 {
        read(bio, l.bio_disk)
    } else {
        let bdev: u64 = read(bio, l.bio_bdev);
        read(bdev, l.bdev_disk)
    }
}

/// The disk of a bio, as `mkdev(major, first_minor)`.
#[inline(always)]
pub fn bio_dev(bio: u64, l: &KernelLayout) -> u32 {
    disk_dev(bio_disk(bio, l), l)
}

/// Whether the request is inside a flush sequence (block/blk-flush.c): RQF_FLUSH_SEQ where BTF
/// names it (`__RQF_FLUSH_SEQ`, an enumerator since 6.9; a `#define` in
/// include/linux/blk-mq.h before, invisible to BTF), else `rq->end_io` of a write or of the
/// flush request: blk-flush.c sets it to mq_flush_data_end_io for exactly that span of a
/// write's life (the flush request's own end_io, flush_end_io, is set too). Other requests
/// with an `end_io` are never in a flush sequence: passthrough requests run by
/// `blk_execute_rq` (block/blk-exec.c on 5.10, block/blk-mq.c since 5.16: `blk_end_sync_rq`),
/// i.e. SG_IO, NVMe passthrough, and virtio-blk's 20-byte GET_ID request that every read of
/// `/sys/block/vdX/serial` sends (drivers/block/virtio_blk.c `virtblk_get_id`); taking their
/// end for a flush sequence's intermediate one left them in flight and counted them lost
/// when their struct was reused (5.10, tests/drivers.rs `passthrough_requests_complete`).
#[inline(always)]
pub fn in_flush_seq(rq: u64, l: &KernelLayout) -> bool {
    if l.rqf_flush_seq != 0 {
        read::<u32>(rq, l.rq_rq_flags) & l.rqf_flush_seq != 0
    } else {
        matches!(op_of(read(rq, l.rq_cmd_flags), l), Op::Write | Op::Flush)
            && read::<u64>(rq, l.rq_end_io) != 0
    }
}

/// Whether the request is the shared per-hctx flush request (block/blk-flush.c).
#[inline(always)]
pub fn is_flush(rq: u64, l: &KernelLayout) -> bool {
    op_of(read(rq, l.rq_cmd_flags), l) == Op::Flush
}

/// The request's original cmd_flags. At block_io_start that is `rq->cmd_flags`; kernels
/// before 5a80bd075f3b (6.5, which added block_io_start) see the request later, after
/// blk-flush.c may have stripped PREFLUSH/FUA from the request, but not from its first bio.
#[inline(always)]
pub fn original_flags(rq: u64, l: &KernelLayout) -> u32 {
    if l.enter_fallback != 0 {
        let bio: u64 = read(rq, l.rq_bio);
        if bio != 0 {
            return read(bio, l.bio_opf);
        }
    }
    read(rq, l.rq_cmd_flags)
}

/// The request's `ioprio` (IOPRIO_PRIO_VALUE(class, level), include/uapi/linux/ioprio.h),
/// read as the kernel's `req_get_ioprio` (include/linux/blk-mq.h) reads it for the
/// `block_rq_*` trace events (aa6ff4eb7c10d): one 2-byte load of `rq->ioprio` (set from its
/// bio's `bi_ioprio` when the request is built: blk_rq_bio_prep); since 6.15, which removed
/// that field, `bio->bi_ioprio` of its first bio `bio` (the caller's `rq->bio`; 0, `none`,
/// for a request without bios). 0 when BTF has neither.
#[inline(always)]
pub fn rq_ioprio(rq: u64, bio: u64, l: &KernelLayout) -> u16 {
    if l.rq_ioprio != 0 {
        read(rq, l.rq_ioprio)
    } else {
        bio_ioprio(bio, l)
    }
}

/// A bio's `bi_ioprio` (0 for no bio, or when BTF has no such member). For a bio merging into
/// a request it is the request's (block/blk-merge.c: bios of another priority do not merge;
/// blk_mq_submit_bio sets a bio's default priority before it tries to merge).
#[inline(always)]
pub fn bio_ioprio(bio: u64, l: &KernelLayout) -> u16 {
    if l.bio_ioprio != 0 && bio != 0 {
        read(bio, l.bio_ioprio)
    } else {
        0
    }
}

/// Bios in a request minus one: bio merges into it (block/blk-merge.c), capped at 63.
#[inline(always)]
pub fn bio_merges(rq: u64, l: &KernelLayout) -> u32 {
    let mut bio: u64 = read(rq, l.rq_bio);
    let mut n = 0u32;
    for _ in 0..64 {
        if bio == 0 {
            break;
        }
        n += 1;
        bio = read(bio, l.bio_next);
    }
    n.saturating_sub(1)
}

/// Bios in a request's list now (`request::bio` → `bio::bi_next`), walked up to
/// [`MAX_BIOS`](observer_common::dispatch::MAX_BIOS); `MAX_BIOS + 1` if the list is longer, 0 if
/// it has none (the flush request). At `block_rq_issue` the list is final (see
/// [`observer_common::dispatch`]). Costs one load per bio (tp_btf: a direct, BTF-checked load;
/// raw_tp: a `bpf_probe_read_kernel` each).
#[inline(always)]
pub fn bio_count(rq: u64, l: &KernelLayout) -> u16 {
    let mut bio: u64 = read(rq, l.rq_bio);
    let mut n = 0u16;
    for _ in 0..observer_common::dispatch::MAX_BIOS {
        if bio == 0 {
            return n;
        }
        n += 1;
        bio = read(bio, l.bio_next);
    }
    if bio != 0 {
        n += 1;
    }
    n
}

/// One field of `OWNER_LAYOUT` (a volatile load of a `.rodata` constant: the verifier sees the
/// value, and nothing is copied to the stack).
macro_rules! owner_off {
    ($f:ident) => {
        // SAFETY: one u32 field of the static `OWNER_LAYOUT`
        // ([`layout_global!`](crate::layout_global)), which nothing writes at run time (`.rodata`,
        // patched by the loader before load).
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!(OWNER_LAYOUT.$f)) }
    };
}

/// The cgroup v2 id that owns a bio: the cgroup its I/O is charged to, as that cgroup's
/// `io.stat` counts it (block/blk-cgroup.c, blk_cgroup_bio_start):
/// `bio->bi_blkg->blkcg->css.cgroup->kn->id` ([`OwnerLayout`]). 0 when unknown: no bio, a
/// kernel without CONFIG_BLK_CGROUP, a bio without a blkg, or a cgroup on a v1 hierarchy
/// (`cgroup->root->hierarchy_id` ≠ 0: the io controller mounted as v1 `blkio`, whose kernfs
/// ids are not cgroup v2 ids). Seven loads (`bi_blkg`, `blkcg`, `cgroup`, `root`,
/// `hierarchy_id`, `kn`, `id`), no helper call in tp_btf programs; in raw_tp programs each is a
/// `bpf_probe_read_kernel`.
#[inline(always)]
pub fn bio_owner(bio: u64) -> u64 {
    if owner_off!(blk_cgroup) == 0 || bio == 0 {
        return 0;
    }
    let blkg: u64 = read(bio, owner_off!(bio_blkg));
    if blkg == 0 {
        return 0;
    }
    let blkcg: u64 = read(blkg, owner_off!(blkg_blkcg));
    if blkcg == 0 {
        return 0;
    }
    let cgrp: u64 = read(blkcg, owner_off!(blkcg_cgroup));
    if cgrp == 0 {
        return 0;
    }
    let root: u64 = read(cgrp, owner_off!(cgroup_root));
    if root == 0 || read::<i32>(root, owner_off!(root_hierarchy_id)) != 0 {
        return 0;
    }
    let kn: u64 = read(cgrp, owner_off!(cgroup_kn));
    if kn == 0 {
        return 0;
    }
    read(kn, owner_off!(kn_id))
}
