//! The kernel layout the eBPF programs need, resolved by the daemon from
//! `/sys/kernel/btf/vmlinux` at startup and handed to them as a read-only global.
//!
//! Rust eBPF programs built with aya get no CO-RE relocations, so every struct offset and enum
//! value that differs between kernels is a field here instead of a constant in the programs.

/// Offsets (bytes) and values read from kernel BTF. Set once before load; the verifier sees the
/// values as constants (the global lives in `.rodata`). 42 `u32` fields, a 256-byte table, then one `u64`: no
/// implicit padding, since the struct is copied into the object byte for byte (add `u32`
/// fields in pairs; a compile-time check below).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    /// `struct request::q` (`struct request_queue *`).
    pub rq_q: u32,
    /// `struct request::cmd_flags` (`blk_opf_t`, u32: op in the low [`Self::op_mask`] bits, REQ_* flags above).
    pub rq_cmd_flags: u32,
    /// `struct request::rq_flags` (`req_flags_t`, u32 of RQF_* bits).
    pub rq_rq_flags: u32,
    /// `struct request::__data_len` (u32, bytes still to complete).
    pub rq_data_len: u32,
    /// `struct request::__sector` (sector_t, 512-byte sectors).
    pub rq_sector: u32,
    /// `struct request::rq_disk` (`struct gendisk *`, kernels ≤ 5.15); 0 when absent: the disk
    /// is then `request::q` → [`Self::q_disk`].
    pub rq_disk: u32,
    /// `struct request_queue::disk` (`struct gendisk *`, 5.15+); 0 when [`Self::rq_disk`] is used.
    pub q_disk: u32,
    /// `struct gendisk::major` (int).
    pub disk_major: u32,
    /// `struct gendisk::first_minor` (int).
    pub disk_first_minor: u32,
    /// `struct request::bio` (`struct bio *`, first bio).
    pub rq_bio: u32,
    /// `struct request::end_io` (`rq_end_io_fn *`): set by block/blk-flush.c while the request
    /// runs through a flush sequence; the flush-sequence test when [`Self::rqf_flush_seq`] is 0.
    pub rq_end_io: u32,
    /// `struct request::start_time_ns` (u64, CLOCK_MONOTONIC ns, set at allocation when the
    /// queue keeps I/O statistics or has a scheduler; 0 otherwise): the entry time on kernels
    /// without `block_io_start`.
    pub rq_start_time_ns: u32,
    /// `struct request::state` (`enum mq_rq_state`, 4 bytes): read by the reaper's probe
    /// (observer-ebpf/src/reqstate.rs).
    pub rq_state: u32,
    /// `struct bio::bi_next` (`struct bio *`).
    pub bio_next: u32,
    /// `struct bio::bi_opf` (`blk_opf_t`).
    pub bio_opf: u32,
    /// `struct bio::bi_iter.bi_sector` (sector_t, 512-byte sectors).
    pub bio_sector: u32,
    /// `struct bio::bi_iter.bi_size` (u32, bytes).
    pub bio_size: u32,
    /// `struct gendisk::queue` (`struct request_queue *`).
    pub disk_queue: u32,
    /// `struct request_queue::mq_ops` (non-NULL for request-based, blk-mq disks; NULL for
    /// bio-based ones such as dm and md, whose bios never become requests).
    pub q_mq_ops: u32,
    /// `struct bio::bi_disk` (`struct gendisk *`, kernels < 5.12); 0 when absent: the disk is
    /// then `bio::bi_bdev` → `block_device::bd_disk`.
    pub bio_disk: u32,
    /// `struct bio::bi_bdev` (`struct block_device *`, 5.12+); 0 when [`Self::bio_disk`] is used.
    pub bio_bdev: u32,
    /// `struct block_device::bd_disk` (`struct gendisk *`); 0 when [`Self::bio_disk`] is used.
    pub bdev_disk: u32,
    /// Mask of RQF_FLUSH_SEQ in `rq_flags` (block/blk-flush.c: set while a request runs through
    /// the pre-flush / data / post-flush sequence); 0 when the kernel's BTF does not have it
    /// (then [`Self::rq_end_io`] tells).
    pub rqf_flush_seq: u32,
    /// Mask of the op in `cmd_flags` ((1 << REQ_OP_BITS) - 1).
    pub op_mask: u32,
    /// `enum req_op` values.
    pub op_read: u32,
    /// REQ_OP_WRITE.
    pub op_write: u32,
    /// REQ_OP_FLUSH.
    pub op_flush: u32,
    /// REQ_OP_DISCARD.
    pub op_discard: u32,
    /// REQ_OP_WRITE_ZEROES.
    pub op_write_zeroes: u32,
    /// REQ_PREFLUSH mask (1 << __REQ_PREFLUSH).
    pub flag_preflush: u32,
    /// REQ_FUA mask.
    pub flag_fua: u32,
    /// REQ_SYNC mask.
    pub flag_sync: u32,
    /// REQ_META mask.
    pub flag_meta: u32,
    /// REQ_RAHEAD mask.
    pub flag_rahead: u32,
    /// 1 when the kernel has no `block_io_start` tracepoint (added in 6.5 by commit 5a80bd075f3b
    /// "block: make the bio tracepoints ... block_io_start"): requests then enter at
    /// `block_rq_insert`, at `block_rq_issue` when directly issued, or at their completion when
    /// never dispatched (a data-less PREFLUSH write). Their entry time is then
    /// `request::start_time_ns` and their original flags those of their first bio (`bi_opf`,
    /// which block/blk-flush.c leaves intact when it strips PREFLUSH/FUA from the request).
    pub enter_fallback: u32,
    /// `struct bio::bi_status` (`blk_status_t`, u8): the error of a bio at `block_bio_complete`
    /// (include/linux/blk_types.h), read for the bios of bio-based disks (dm, md).
    pub bio_status: u32,
    /// `struct bio::bi_private`: for a bio split from another, its parent (block/bio.c,
    /// bio_chain sets it before the split is submitted or traced), which is how a piece of a
    /// tracked bio of a bio-based disk is recognised.
    pub bio_private: u32,
    /// `struct gendisk::disk_name` (`char[DISK_NAME_LEN]`, NUL-padded): hashed into the
    /// disk's number when its `major:first_minor` is 0:0 (a hidden disk without a dev_t, 5.10:
    /// [`crate::maps::nameless_dev`]).
    pub disk_name: u32,
    /// `struct gendisk::part0` (`struct hd_struct`, embedded) + `hd_struct::__dev` +
    /// `device::devt` (`dev_t`) on kernels before 5.11, where part0 is a struct of the disk;
    /// 0 since (`part0` became a `struct block_device *`, whose `bd_dev` is always
    /// `MKDEV(major, first_minor)`). Read as the disk's number where set: it is the number
    /// /proc/diskstats shows, and 0 for a hidden disk, whose `major:first_minor` (allocated
    /// but published nowhere: 259:1 for an NVMe path on 5.10) nothing in userspace could match.
    pub disk_devt: u32,
    /// `struct request::ioprio` (`unsigned short`: IOPRIO_PRIO_VALUE(class, level),
    /// include/uapi/linux/ioprio.h), read once when the request enters into its
    /// class ([`crate::class::with_ioprio`]); 0 when BTF has no such member: removed in 6.15
    /// ("block: remove the ioprio field from struct request"), since when the kernel's
    /// `req_get_ioprio` (include/linux/blk-mq.h) is its first bio's [`Self::bio_ioprio`].
    pub rq_ioprio: u32,
    /// `struct bio::bi_ioprio` (`unsigned short`): a request's priority through `request::bio`
    /// where [`Self::rq_ioprio`] is 0 (0 for a request without bios, as `req_get_ioprio`
    /// says), and a merging bio's (`block_bio_backmerge`/`frontmerge`); 0 when BTF has no such
    /// member.
    pub bio_ioprio: u32,
    /// 1 when the programs run as `tp_btf`: struct fields are then read with direct loads,
    /// which the verifier checks against BTF; 0 (raw_tp) uses `bpf_probe_read_kernel`.
    pub direct_loads: u32,
    /// The running kernel's op numbers (`cmd_flags & op_mask`) mapped to [`crate::class::Op`]
    /// codes ([`crate::class::op_table`], from `enum req_op` by name); [`crate::class::op_of`]
    /// reads it.
    pub op_codes: [u8; 256],
    /// CLOCK_MONOTONIC (ns) just before the programs were loaded. On kernels without
    /// `block_io_start`, a request first seen at its completion is counted with its latency
    /// only if its `start_time_ns` is later than this (it cannot have been in flight before).
    pub loaded_ns: u64,
}

impl Default for KernelLayout {
    fn default() -> Self {
        Self::ZERO
    }
}

impl KernelLayout {
    /// All zero: the placeholder compiled into the programs before the daemon fills it in.
    pub const ZERO: KernelLayout = KernelLayout {
        rq_q: 0,
        rq_cmd_flags: 0,
        rq_rq_flags: 0,
        rq_data_len: 0,
        rq_sector: 0,
        rq_disk: 0,
        q_disk: 0,
        disk_major: 0,
        disk_first_minor: 0,
        rq_bio: 0,
        rq_end_io: 0,
        rq_start_time_ns: 0,
        rq_state: 0,
        bio_next: 0,
        bio_opf: 0,
        bio_sector: 0,
        bio_size: 0,
        disk_queue: 0,
        q_mq_ops: 0,
        bio_disk: 0,
        bio_bdev: 0,
        bdev_disk: 0,
        rqf_flush_seq: 0,
        op_mask: 0,
        op_read: 0,
        op_write: 0,
        op_flush: 0,
        op_discard: 0,
        op_write_zeroes: 0,
        flag_preflush: 0,
        flag_fua: 0,
        flag_sync: 0,
        flag_meta: 0,
        flag_rahead: 0,
        enter_fallback: 0,
        bio_status: 0,
        bio_private: 0,
        disk_name: 0,
        disk_devt: 0,
        rq_ioprio: 0,
        bio_ioprio: 0,
        direct_loads: 0,
        op_codes: [0; crate::class::OP_TABLE_LEN],
        loaded_ns: 0,
    };
}

// No implicit padding: 42 × 4 bytes, the op table, then the u64.
const _: () =
    assert!(core::mem::size_of::<KernelLayout>() == 42 * 4 + crate::class::OP_TABLE_LEN + 8);

/// Offsets (bytes) of the chain from a bio's first page to the file whose data it carries,
/// read from kernel BTF by the daemon (observer/src/bpf/btf.rs `file_layout`) and used only for
/// slow requests and on demand (observer-ebpf/src/file.rs): `bio::bi_io_vec` →
/// `bio_vec::bv_page` → `page::mapping` (`struct address_space *`) → `address_space::host`
/// (`struct inode *`) → `inode::i_ino`, `inode::i_sb` → `super_block::s_dev`, and the path from
/// `inode::i_dentry` (first alias) up `dentry::d_parent`. [`Self::resolved`] is 0 when BTF
/// lacks any of them: then every file is unknown.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileLayout {
    /// 1 when every offset below was found in BTF, else 0.
    pub resolved: u32,
    /// `struct bio::bi_io_vec` (`struct bio_vec *`).
    pub bio_io_vec: u32,
    /// `struct bio_vec::bv_page` (`struct page *`).
    pub bvec_page: u32,
    /// `struct page::mapping` (`struct address_space *`; bit 0 set (PAGE_MAPPING_ANON,
    /// include/linux/page-flags.h) for anonymous memory).
    pub page_mapping: u32,
    /// `struct address_space::host` (`struct inode *`).
    pub mapping_host: u32,
    /// `struct inode::i_mapping` (`struct address_space *`): must point back at the page's
    /// mapping, else the page is not page cache (e.g. a slab page, whose `mapping` word is
    /// something else).
    pub inode_mapping: u32,
    /// `struct inode::i_mode` (`umode_t`, u16; S_IFMT bits as in include/uapi/linux/stat.h).
    pub inode_mode: u32,
    /// `struct inode::i_ino` (unsigned long).
    pub inode_ino: u32,
    /// `struct inode::i_sb` (`struct super_block *`).
    pub inode_sb: u32,
    /// `struct super_block::s_dev` (`dev_t`, kernel encoding: major << 20 | minor).
    pub sb_dev: u32,
    /// `struct inode::i_dentry` (`struct hlist_head`: its first alias).
    pub inode_dentry: u32,
    /// `struct dentry::d_u.d_alias` (`struct hlist_node`, the link in `i_dentry`).
    pub dentry_alias: u32,
    /// `struct dentry::d_parent` (`struct dentry *`; the root is its own parent).
    pub dentry_parent: u32,
    /// `struct dentry::d_name` + `struct qstr::name` (`const unsigned char *`, NUL-terminated).
    pub dentry_name: u32,
    /// `struct iomap_dio::iocb` (`struct kiocb *`, fs/iomap/direct-io.c: the `bi_private` of
    /// iomap's direct-I/O bios); meaningful only with [`Self::dio`].
    pub dio_iocb: u32,
    /// `struct kiocb::ki_filp` (`struct file *`).
    pub iocb_filp: u32,
    /// `struct file::f_inode` (`struct inode *`).
    pub file_inode: u32,
    /// 1 when BTF has `struct iomap_dio` (and the three offsets above), else 0: direct I/O's
    /// file is then unknown.
    pub dio: u32,
}

impl FileLayout {
    /// All zero: the placeholder compiled into the programs (every file unknown).
    pub const ZERO: FileLayout = FileLayout {
        resolved: 0,
        bio_io_vec: 0,
        bvec_page: 0,
        page_mapping: 0,
        mapping_host: 0,
        inode_mapping: 0,
        inode_mode: 0,
        inode_ino: 0,
        inode_sb: 0,
        sb_dev: 0,
        inode_dentry: 0,
        dentry_alias: 0,
        dentry_parent: 0,
        dentry_name: 0,
        dio_iocb: 0,
        iocb_filp: 0,
        file_inode: 0,
        dio: 0,
    };
}

// No implicit padding: 18 × 4 bytes.
const _: () = assert!(core::mem::size_of::<FileLayout>() == 18 * 4);

/// Offsets (bytes) of the chain from a bio to the cgroup that owns it, read from kernel BTF by
/// member name, in a read-only global of their own (`OWNER_LAYOUT`): the programs read its
/// fields one by one where the owner is read (once per request, at entry) instead of copying
/// them with [`KernelLayout`] into every program's stack.
///
/// `bio->bi_blkg->blkcg->css.cgroup->kn->id`: the cgroup v2 id the bio is charged to (the
/// `io.stat` that counts it: block/blk-cgroup.c, blk_cgroup_bio_start), the same id
/// `bpf_get_current_cgroup_id` returns for a task in that cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerLayout {
    /// 1 when the kernel's BTF has every member below and `kernfs_node::id` is 8 bytes (u64
    /// since 5.5); 0 otherwise, e.g. without CONFIG_BLK_CGROUP (no `bio::bi_blkg`): every
    /// request's owner is then unknown (0).
    pub blk_cgroup: u32,
    /// `struct bio::bi_blkg` (`struct blkcg_gq *`): the (cgroup, queue) pair the bio is charged
    /// to, set when the bio is created (bio_associate_blkg*; for write-back the dirtied
    /// inode's owner: wbc_init_bio).
    pub bio_blkg: u32,
    /// `struct blkcg_gq::blkcg` (`struct blkcg *`).
    pub blkg_blkcg: u32,
    /// `struct blkcg::css` + `struct cgroup_subsys_state::cgroup` (`struct cgroup *`: the
    /// cgroup whose io controller state it is).
    pub blkcg_cgroup: u32,
    /// `struct cgroup::kn` (`struct kernfs_node *`: the cgroup's directory).
    pub cgroup_kn: u32,
    /// `struct kernfs_node::id` (u64: the cgroup id, the inode number of its directory).
    pub kn_id: u32,
    /// `struct cgroup::root` (`struct cgroup_root *`).
    pub cgroup_root: u32,
    /// `struct cgroup_root::hierarchy_id` (int): 0 is the cgroup v2 hierarchy (cgrp_dfl_root).
    /// An io controller on a v1 `blkio` hierarchy has another, and its cgroups' kernfs ids are
    /// not cgroup v2 ids: their owner is reported unknown.
    pub root_hierarchy_id: u32,
}

impl OwnerLayout {
    /// All zero: the placeholder compiled into the programs (owner unknown).
    pub const ZERO: OwnerLayout = OwnerLayout {
        blk_cgroup: 0,
        bio_blkg: 0,
        blkg_blkcg: 0,
        blkcg_cgroup: 0,
        cgroup_kn: 0,
        kn_id: 0,
        cgroup_root: 0,
        root_hierarchy_id: 0,
    };
}

// No implicit padding: 8 × 4 bytes.
const _: () = assert!(core::mem::size_of::<OwnerLayout>() == 8 * 4);

// SAFETY: aya::Pod (the loader writes it into `.rodata` byte for byte): repr(C), 42 u32 then
// one u64, no padding (the const size check above); integers only, any bits are a value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for KernelLayout {}
// SAFETY: aya::Pod: repr(C), 8 u32, no padding (the const size check above); integers only.
#[cfg(feature = "user")]
unsafe impl aya::Pod for OwnerLayout {}
// SAFETY: aya::Pod: repr(C), 18 u32, no padding (the const size check above); integers only.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FileLayout {}
