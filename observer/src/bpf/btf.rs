//! Resolves [`KernelLayout`] and the tracepoint argument layouts from the running kernel's BTF
//! (`/sys/kernel/btf/vmlinux`), so nothing kernel-version-specific is compiled into the programs.

use std::path::Path;

use btf_rs::{Backend, Btf, BtfType, Type};
use fallible_iterator::FallibleIterator;
use observer_common::layout::{FileLayout, KernelLayout, OwnerLayout};

/// Default location of the kernel's own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Why the kernel layout could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The BTF file is missing or unreadable.
    #[error("cannot read kernel BTF from {path}: {source}. The kernel must be built with CONFIG_DEBUG_INFO_BTF=y")]
    Read {
        /// The file tried.
        path: String,
        /// What failed.
        source: anyhow::Error,
    },
    /// A struct, member, enum or enum value the programs need is not in BTF.
    #[error(
        "kernel BTF has no {0}; this kernel is not supported (please report it with `uname -r`)"
    )]
    Missing(String),
}

/// Argument layout of a tracepoint, from its `btf_trace_<name>` prototype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgLayout {
    /// The request (or bio) is the first argument: Linux ≥ 5.11 (and 5.10.137+).
    Current,
    /// `(struct request_queue *q, ...)` first: older kernels.
    QueueFirst,
}

/// The kernel's BTF with lookups by name.
pub struct KernelBtf {
    btf: Btf,
}

impl KernelBtf {
    /// Opens a BTF file (usually [`VMLINUX_BTF`], 5.5 MB on 6.18). Memory-mapped where the
    /// kernel allows it (a recent addition to `kernel/bpf/sysfs_btf.c`; 6.18 here): only an
    /// index of type offsets is built (~1 MiB), and lookups scan the mapping. Elsewhere (the
    /// matrix's 5.10, 6.1, 6.12) the file is copied into an anonymous memory file and that is
    /// mapped ([`Self::from_memfd_copy`]). If that fails too, the file is read whole and parsed
    /// into btf_rs's cache (RSS ~44 MiB right after, for a 6.18 vmlinux): not through
    /// `btf_rs::Btf::from_file`, which seeks a `BufReader` per type, ~126,000 `lseek` calls,
    /// 27 s under strace. Errors: the file cannot be read or is not BTF.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LayoutError> {
        let path = path.as_ref();
        let err = |source: anyhow::Error| LayoutError::Read {
            path: path.display().to_string(),
            source,
        };
        if let Ok(btf) = Btf::from_file_with_backend(path, Backend::Mmap) {
            return Ok(Self { btf });
        }
        match Self::from_memfd_copy(path) {
            Ok(btf) => return Ok(btf),
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "mapping a copy of kernel BTF failed; parsing it whole")
            }
        }
        let bytes = std::fs::read(path).map_err(|e| err(e.into()))?;
        Btf::from_bytes(&bytes)
            .map(|btf| Self { btf })
            .map_err(|e| err(e.into()))
    }

    /// Copies a BTF file into an anonymous memory file (`memfd_create(2)`, in systemd's
    /// `@system-service` syscall set) and maps that read-only, through `/proc/self/fd`: the
    /// same index-only lookups as a mapping of the file itself, for kernels whose sysfs BTF
    /// cannot be mapped. Memory: the file's size (shared memory, resident while mapped),
    /// given back when this is dropped. Errors: memfd_create, the copy, `/proc` unavailable,
    /// or the file is not BTF.
    pub fn from_memfd_copy(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let mut src = std::fs::File::open(path.as_ref())?;
        // SAFETY: the name is NUL-terminated; on success the fd is ours alone.
        let fd = unsafe { libc::memfd_create(c"blkobs-kernel-btf".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let mut copy = unsafe { std::fs::File::from_raw_fd(fd) };
        std::io::copy(&mut src, &mut copy)?;
        // The mapping keeps the memory file alive after `copy` closes it.
        let btf = Btf::from_file_with_backend(
            format!("/proc/self/fd/{}", copy.as_raw_fd()),
            Backend::Mmap,
        )?;
        Ok(Self { btf })
    }

    fn named_types(&self, name: &str) -> Vec<Type> {
        self.btf.resolve_types_by_name(name).unwrap_or_default()
    }

    /// Byte offset of `member` in `struct name`, looking through anonymous structs and unions.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, LayoutError> {
        for ty in self.named_types(name) {
            if let Type::Struct(s) = ty {
                if let Some(bits) = self.find_member(&s, member, 0) {
                    return Ok(bits / 8);
                }
            }
        }
        Err(LayoutError::Missing(format!("struct {name}::{member}")))
    }

    fn find_member(&self, s: &btf_rs::Struct, member: &str, base_bits: u32) -> Option<u32> {
        for m in &s.members {
            let name = self.btf.resolve_name(m).unwrap_or_default();
            let off = base_bits + m.bit_offset();
            if name == member {
                return Some(off);
            }
            if name.is_empty() {
                if let Ok(Type::Struct(inner) | Type::Union(inner)) =
                    self.btf.resolve_chained_type(m)
                {
                    if let Some(found) = self.find_member(&inner, member, off) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// Values of enumerators, looked up by name in every enum of the kernel, named or
    /// anonymous (C enumerators share one namespace, so the name alone identifies one), in the
    /// order asked, in one pass over the types. Debian's 6.12 has `__RQF_FLUSH_SEQ` in an
    /// anonymous enum, 6.18 in `enum rqf_flags`; `REQ_OP_*` are in `enum req_opf` (< 6.0) or
    /// `enum req_op`.
    pub fn enum_values(&self, variants: &[&str]) -> Vec<Option<u32>> {
        let mut found = vec![None; variants.len()];
        let mut types = self.btf.type_iter();
        while let Ok(Some(ty)) = types.next() {
            let Type::Enum(e) = ty else { continue };
            for m in &e.members {
                let Ok(name) = self.btf.resolve_name(m) else {
                    continue;
                };
                if let Some(i) = variants.iter().position(|v| *v == name) {
                    found[i].get_or_insert(m.val());
                }
            }
            if found.iter().all(Option::is_some) {
                break;
            }
        }
        found
    }

    /// Every enumerator (name, value) of the enum that holds `member`, e.g. all of `enum
    /// req_op` from `REQ_OP_READ`; empty when no enum has it.
    pub fn enum_of(&self, member: &str) -> Vec<(String, u32)> {
        let mut types = self.btf.type_iter();
        while let Ok(Some(ty)) = types.next() {
            let Type::Enum(e) = ty else { continue };
            let names: Vec<(String, u32)> = e
                .members
                .iter()
                .filter_map(|m| Some((self.btf.resolve_name(m).ok()?, m.val())))
                .collect();
            if names.iter().any(|(n, _)| n == member) {
                return names;
            }
        }
        Vec::new()
    }

    /// Names of the pointee types of a tracepoint's arguments (without the leading `void *`),
    /// e.g. `["request"]` for block_rq_issue on 6.x. `None` if the kernel lacks the tracepoint.
    pub fn tracepoint_args(&self, tp: &str) -> Option<Vec<String>> {
        let typedef = self
            .named_types(&format!("btf_trace_{tp}"))
            .into_iter()
            .find_map(|t| {
                if let Type::Typedef(td) = t {
                    Some(td)
                } else {
                    None
                }
            })?;
        let Ok(Type::Ptr(ptr)) = self.btf.resolve_chained_type(&typedef) else {
            return None;
        };
        let Ok(Type::FuncProto(proto)) = self.btf.resolve_chained_type(&ptr) else {
            return None;
        };
        let mut names = Vec::new();
        for p in proto.parameters.iter().skip(1) {
            names.push(self.pointee_name(p).unwrap_or_default());
        }
        Some(names)
    }

    fn pointee_name(&self, p: &dyn BtfType) -> Option<String> {
        let mut ty = self.btf.resolve_chained_type(p).ok()?;
        // Strip pointers, typedefs and qualifiers down to a named type.
        for _ in 0..8 {
            let next = match &ty {
                Type::Struct(s) | Type::Union(s) => return self.btf.resolve_name(s).ok(),
                Type::Int(i) => return self.btf.resolve_name(i).ok(),
                Type::Typedef(t) => return self.btf.resolve_name(t).ok(),
                Type::Ptr(x) => self.btf.resolve_chained_type(x).ok()?,
                Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => {
                    self.btf.resolve_chained_type(x).ok()?
                }
                _ => return None,
            };
            ty = next;
        }
        None
    }

    /// Type id of the `btf_trace_<tp>` typedef: what a tp_btf program names as its attach
    /// point (`attach_btf_id`, checked by the kernel in `bpf_check_attach_target`,
    /// kernel/bpf/verifier.c). `None` if the kernel lacks the tracepoint.
    pub fn tracepoint_typedef_id(&self, tp: &str) -> Option<u32> {
        let ids = self
            .btf
            .resolve_ids_by_name(&format!("btf_trace_{tp}"))
            .unwrap_or_default();
        ids.into_iter()
            .filter(|&id| matches!(self.btf.resolve_type_by_id(id), Ok(Type::Typedef(_))))
            .min()
    }

    /// Argument layout of a `block_rq_*` or `block_bio_*merge` tracepoint, or `None` if absent.
    pub fn arg_layout(&self, tp: &str) -> Option<ArgLayout> {
        let args = self.tracepoint_args(tp)?;
        Some(
            if args.first().map(String::as_str) == Some("request_queue") {
                ArgLayout::QueueFirst
            } else {
                ArgLayout::Current
            },
        )
    }

    /// Resolves everything the programs need. `enter_fallback` is set when the kernel has no
    /// `block_io_start` tracepoint.
    ///
    /// Differences between kernels resolved here, each by looking for the member by name:
    /// - the disk of a request: `request::rq_disk` (≤ 5.15, removed by commit f3fa33acca9f
    ///   "block: remove the ->rq_disk field in struct request"), else `request::q` →
    ///   `request_queue::disk` (5.15+);
    /// - the disk of a bio: `bio::bi_disk` (< 5.12), else `bio::bi_bdev` → `block_device::bd_disk`
    ///   (commit 309dca309fc3 "block: store a block_device pointer in struct bio", 5.12);
    /// - RQF_FLUSH_SEQ: the enumerator `__RQF_FLUSH_SEQ` (an enum since 6.9, anonymous in some
    ///   builds). Before, it is a `#define` that BTF does not carry: then the programs recognise
    ///   a request inside a flush sequence by `request::end_io` being set, which
    ///   block/blk-flush.c does (`rq->end_io = mq_flush_data_end_io`) for exactly as long as the
    ///   flag is set (blk_flush_restore_request puts the saved, normally NULL, end_io back).
    pub fn kernel_layout(&self) -> Result<KernelLayout, LayoutError> {
        const WANTED: [&str; 12] = [
            "__REQ_FAILFAST_DEV",
            "__REQ_PREFLUSH",
            "__REQ_FUA",
            "__REQ_SYNC",
            "__REQ_META",
            "__REQ_RAHEAD",
            "REQ_OP_READ",
            "REQ_OP_WRITE",
            "REQ_OP_FLUSH",
            "REQ_OP_DISCARD",
            "REQ_OP_WRITE_ZEROES",
            "__RQF_FLUSH_SEQ",
        ];
        let vals = self.enum_values(&WANTED);
        let val = |i: usize| {
            vals[i].ok_or_else(|| LayoutError::Missing(format!("enumerator {}", WANTED[i])))
        };
        // REQ_OP_BITS is a #define; the first flag bit (__REQ_FAILFAST_DEV) sits right above it.
        let op_bits = val(0)?;
        let rqf_flush_seq = match vals[11] {
            Some(b) => 1 << b,
            None => {
                tracing::info!(
                    "kernel BTF has no __RQF_FLUSH_SEQ (a #define before Linux 6.9): flush sequences \
                     are recognised by request::end_io"
                );
                0
            }
        };
        let (rq_disk, q_disk) = match self.member_offset("request", "rq_disk") {
            Ok(off) => (off, 0),
            Err(_) => (0, self.member_offset("request_queue", "disk")?),
        };
        // Before 5.11 `gendisk::part0` was an embedded `struct hd_struct` (since, a
        // `struct block_device *`): its device's devt is the disk's number as diskstats shows it.
        let disk_devt = match (
            self.member_offset("gendisk", "part0"),
            self.member_offset("hd_struct", "__dev"),
            self.member_offset("device", "devt"),
        ) {
            (Ok(p0), Ok(dev), Ok(devt)) => p0 + dev + devt,
            _ => 0,
        };
        let (bio_disk, bio_bdev, bdev_disk) = match self.member_offset("bio", "bi_disk") {
            Ok(off) => (off, 0, 0),
            Err(_) => (
                0,
                self.member_offset("bio", "bi_bdev")?,
                self.member_offset("block_device", "bd_disk")?,
            ),
        };
        let ops = self.enum_of("REQ_OP_READ");
        let (op_codes, unlisted) =
            observer_common::class::op_table(ops.iter().map(|(name, val)| (name.as_str(), *val)));
        for (name, val) in unlisted.into_iter().flatten() {
            tracing::warn!(
                op = name,
                number = val,
                "the kernel has a request op this observer does not know: counted as op=\"unknown\""
            );
        }
        Ok(KernelLayout {
            op_codes,
            rq_q: self.member_offset("request", "q")?,
            rq_cmd_flags: self.member_offset("request", "cmd_flags")?,
            rq_rq_flags: self.member_offset("request", "rq_flags")?,
            rq_data_len: self.member_offset("request", "__data_len")?,
            rq_sector: self.member_offset("request", "__sector")?,
            rq_disk,
            q_disk,
            disk_major: self.member_offset("gendisk", "major")?,
            disk_first_minor: self.member_offset("gendisk", "first_minor")?,
            rq_bio: self.member_offset("request", "bio")?,
            rq_end_io: self.member_offset("request", "end_io")?,
            rq_start_time_ns: self.member_offset("request", "start_time_ns")?,
            rq_state: self.member_offset("request", "state")?,
            bio_next: self.member_offset("bio", "bi_next")?,
            bio_opf: self.member_offset("bio", "bi_opf")?,
            bio_sector: self.member_offset("bio", "bi_iter")?
                + self.member_offset("bvec_iter", "bi_sector")?,
            bio_size: self.member_offset("bio", "bi_iter")?
                + self.member_offset("bvec_iter", "bi_size")?,
            disk_queue: self.member_offset("gendisk", "queue")?,
            q_mq_ops: self.member_offset("request_queue", "mq_ops")?,
            bio_disk,
            bio_bdev,
            bdev_disk,
            rqf_flush_seq,
            op_mask: (1u32 << op_bits) - 1,
            op_read: val(6)?,
            op_write: val(7)?,
            op_flush: val(8)?,
            op_discard: val(9)?,
            op_write_zeroes: val(10)?,
            flag_preflush: 1 << val(1)?,
            flag_fua: 1 << val(2)?,
            flag_sync: 1 << val(3)?,
            flag_meta: 1 << val(4)?,
            flag_rahead: 1 << val(5)?,
            enter_fallback: u32::from(self.tracepoint_args("block_io_start").is_none()),
            bio_status: self.member_offset("bio", "bi_status")?,
            bio_private: self.member_offset("bio", "bi_private")?,
            disk_name: self.member_offset("gendisk", "disk_name")?,
            disk_devt,
            // unsigned short where present; read as a u16 by the programs.
            rq_ioprio: self.u16_member("request", "ioprio"),
            bio_ioprio: self.u16_member("bio", "bi_ioprio"),
            direct_loads: 0,
            loaded_ns: 0,
        })
    }

    /// The owner-cgroup chain ([`OwnerLayout`]: `bio::bi_blkg` → `blkcg_gq::blkcg` →
    /// `blkcg::css.cgroup` → `cgroup::kn` → `kernfs_node::id`, and `cgroup::root` →
    /// `cgroup_root::hierarchy_id`), every member looked up by name; `blk_cgroup` 1 only if all
    /// are there and `kernfs_node::id` is 8 bytes (u64 since 5.5, "kernfs: convert
    /// kernfs_node->id from a union kernfs_node_id to u64"). `bio::bi_blkg` exists only with
    /// CONFIG_BLK_CGROUP (include/linux/blk_types.h); without it every owner is unknown
    /// (logged).
    pub fn owner_layout(&self) -> OwnerLayout {
        let chain = || -> Option<OwnerLayout> {
            let m = |s: &str, f: &str| self.member_offset(s, f).ok();
            if self.member_size("kernfs_node", "id") != Some(8) {
                return None;
            }
            Some(OwnerLayout {
                blk_cgroup: 1,
                bio_blkg: m("bio", "bi_blkg")?,
                blkg_blkcg: m("blkcg_gq", "blkcg")?,
                blkcg_cgroup: m("blkcg", "css")? + m("cgroup_subsys_state", "cgroup")?,
                cgroup_kn: m("cgroup", "kn")?,
                kn_id: m("kernfs_node", "id")?,
                cgroup_root: m("cgroup", "root")?,
                root_hierarchy_id: m("cgroup_root", "hierarchy_id")?,
            })
        };
        chain().unwrap_or_else(|| {
            tracing::info!(
                "kernel BTF has no bio::bi_blkg (CONFIG_BLK_CGROUP off) or not the whole chain to \
                 the cgroup id: the owner cgroup of every request is unknown (0)"
            );
            OwnerLayout::ZERO
        })
    }

    /// The chain from a bio's first page to its file and the file's path ([`FileLayout`]),
    /// every member looked up by name (`dentry::d_u` is a named union of an unnamed type: its
    /// `d_alias` is found through the member's type). `resolved` 0 (logged) if any is missing;
    /// `dio` 0 if BTF has no `struct iomap_dio` (direct I/O's file then unknown).
    pub fn file_layout(&self) -> FileLayout {
        let m = |s: &str, f: &str| self.member_offset(s, f).ok();
        let chain = || -> Option<FileLayout> {
            Some(FileLayout {
                resolved: 1,
                bio_io_vec: m("bio", "bi_io_vec")?,
                bvec_page: m("bio_vec", "bv_page")?,
                page_mapping: m("page", "mapping")?,
                mapping_host: m("address_space", "host")?,
                inode_mapping: m("inode", "i_mapping")?,
                inode_mode: m("inode", "i_mode")?,
                inode_ino: m("inode", "i_ino")?,
                inode_sb: m("inode", "i_sb")?,
                sb_dev: m("super_block", "s_dev")?,
                inode_dentry: m("inode", "i_dentry")?,
                dentry_alias: self.nested_offset("dentry", &["d_u", "d_alias"])?,
                dentry_parent: m("dentry", "d_parent")?,
                dentry_name: m("dentry", "d_name")? + m("qstr", "name")?,
                dio_iocb: m("iomap_dio", "iocb").unwrap_or(0),
                iocb_filp: m("kiocb", "ki_filp")?,
                file_inode: m("file", "f_inode")?,
                dio: u32::from(m("iomap_dio", "iocb").is_some()),
            })
        };
        chain().unwrap_or_else(|| {
            tracing::info!(
                "kernel BTF lacks part of the chain bio → page → mapping → inode → dentry: the \
                 file of slow and stuck requests is unknown"
            );
            FileLayout::ZERO
        })
    }

    /// Byte offset of the member at `path` in `struct name`, each step a member of the previous
    /// one's type (named or anonymous struct or union), e.g. `["d_u", "d_alias"]`.
    pub fn nested_offset(&self, name: &str, path: &[&str]) -> Option<u32> {
        let mut st = self.named_types(name).into_iter().find_map(|t| match t {
            Type::Struct(s) => Some(s),
            _ => None,
        })?;
        let mut bits = 0;
        for (i, step) in path.iter().enumerate() {
            let member = st
                .members
                .iter()
                .find(|m| self.btf.resolve_name(*m).unwrap_or_default() == *step)?;
            bits += member.bit_offset();
            if i + 1 == path.len() {
                return Some(bits / 8);
            }
            st = match self.btf.resolve_chained_type(member).ok()? {
                Type::Struct(s) | Type::Union(s) => s,
                _ => return None,
            };
        }
        None
    }

    /// Offset (bytes) of `member` of `struct name` if BTF has it as a 2-byte integer, else 0.
    fn u16_member(&self, name: &str, member: &str) -> u32 {
        match self.member_size(name, member) {
            Some(2) => self.member_offset(name, member).unwrap_or(0),
            _ => 0,
        }
    }

    /// Size (bytes) of `member` of `struct name` (through typedefs), if BTF has it.
    pub fn member_size(&self, name: &str, member: &str) -> Option<u32> {
        for ty in self.named_types(name) {
            if let Type::Struct(s) = ty {
                for m in &s.members {
                    if self.btf.resolve_name(m).ok().as_deref() != Some(member) {
                        continue;
                    }
                    let mut t = self.btf.resolve_chained_type(m).ok()?;
                    for _ in 0..8 {
                        match t {
                            Type::Int(i) => return Some(i.size() as u32),
                            Type::Typedef(_) | Type::Const(_) | Type::Volatile(_) => {
                                t = self.btf.resolve_chained_type(t.as_btf_type()?).ok()?;
                            }
                            _ => return None,
                        }
                    }
                    return None;
                }
            }
        }
        None
    }
}

/// An [`aya::Btf`] that answers what `BtfTracePoint::load` asks of kernel BTF, the type id of
/// each `btf_trace_<tp>` typedef (aya 0.14 `Btf::id_by_type_name_kind`, a scan by position),
/// without the rest of vmlinux BTF. `typedefs` are `(tracepoint, id)` pairs, the ids from
/// [`KernelBtf::tracepoint_typedef_id`]. Every other id up to the largest is an anonymous
/// `void *`, so it is 12 bytes of BTF per id (~29,000 ids on 6.18: 0.35 MB, RSS +2 MiB parsed),
/// where aya's `Btf::from_sys_fs` of all of vmlinux BTF (5.5 MB on 6.18) holds ~13 MiB and
/// peaks ~19 MiB above the daemon's RSS. The kernel still checks each id against its own BTF
/// when the program is loaded (a wrong id is refused, and the daemon falls back to raw_tp).
/// Errors: only if aya rejects the built BTF (a bug here).
pub fn attach_id_index(typedefs: &[(&str, u32)]) -> Result<aya::Btf, aya::BtfError> {
    const KIND_PTR: u32 = 2;
    const KIND_TYPEDEF: u32 = 8;
    let last = typedefs.iter().map(|&(_, id)| id).max().unwrap_or(0);
    let mut strings = vec![0u8];
    let mut types = vec![[0, KIND_PTR << 24, 0]; last as usize];
    for &(tp, id) in typedefs {
        let Some(entry) = (id as usize).checked_sub(1).and_then(|i| types.get_mut(i)) else {
            continue;
        };
        *entry = [strings.len() as u32, KIND_TYPEDEF << 24, 0];
        strings.extend_from_slice(format!("btf_trace_{tp}").as_bytes());
        strings.push(0);
    }
    let type_len = (types.len() * 12) as u32;
    // struct btf_header (include/uapi/linux/btf.h): magic, version, flags, hdr_len, then the
    // type and string sections' offsets and lengths after the header.
    let mut raw = Vec::with_capacity(24 + type_len as usize + strings.len());
    raw.extend_from_slice(&0xeb9f_u16.to_ne_bytes());
    raw.extend_from_slice(&[1, 0]);
    for v in [24, 0, type_len, type_len, strings.len() as u32] {
        raw.extend_from_slice(&v.to_ne_bytes());
    }
    for t in &types {
        for v in t {
            raw.extend_from_slice(&v.to_ne_bytes());
        }
    }
    raw.extend_from_slice(&strings);
    aya::Btf::parse(&raw, aya::Endianness::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// observer/tests/support/skip_rule.rs: true if the test can run (`ok`), else a panic
    /// under CI and a listed skip elsewhere.
    fn runnable(ok: bool, why: &str) -> bool {
        ok || crate::bpf::skip_rule::skip(why)
    }

    /// Resolves against the running kernel; the expected values are the independent witness of
    /// `bpftool btf dump file /sys/kernel/btf/vmlinux format c`, parsed here as text.
    #[test]
    fn layout_matches_bpftool_dump() {
        if !runnable(
            Path::new(VMLINUX_BTF).exists(),
            &format!("no {VMLINUX_BTF}"),
        ) {
            return;
        }
        let btf = KernelBtf::from_file(VMLINUX_BTF).unwrap();
        let l = btf.kernel_layout().unwrap();
        let dump = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file", VMLINUX_BTF, "format", "c"])
            .output();
        let Ok(dump) = dump else {
            runnable(false, "bpftool missing (scripts/provision.sh installs it)");
            return;
        };
        let text = String::from_utf8_lossy(&dump.stdout);
        let enum_val = |name: &str| -> u32 {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{name} = ")))
                .unwrap();
            line.split('=')
                .nth(1)
                .unwrap()
                .trim()
                .trim_end_matches(',')
                .parse()
                .unwrap()
        };
        assert_eq!(l.op_write, enum_val("REQ_OP_WRITE"));
        assert_eq!(l.op_flush, enum_val("REQ_OP_FLUSH"));
        assert_eq!(l.op_write_zeroes, enum_val("REQ_OP_WRITE_ZEROES"));
        assert_eq!(l.flag_fua, 1 << enum_val("__REQ_FUA"));
        assert_eq!(l.flag_preflush, 1 << enum_val("__REQ_PREFLUSH"));
        assert_eq!(l.op_read, enum_val("REQ_OP_READ"));
        assert_eq!(l.op_discard, enum_val("REQ_OP_DISCARD"));
        assert_eq!(l.flag_sync, 1 << enum_val("__REQ_SYNC"));
        assert_eq!(l.flag_meta, 1 << enum_val("__REQ_META"));
        assert_eq!(l.flag_rahead, 1 << enum_val("__REQ_RAHEAD"));
        // RQF_FLUSH_SEQ: from the enumerator where the dump has one (named or anonymous enum),
        // else 0 (the programs then use request::end_io).
        let has_rqf = text
            .lines()
            .any(|l| l.trim_start().starts_with("__RQF_FLUSH_SEQ = "));
        let want_rqf = if has_rqf {
            1 << enum_val("__RQF_FLUSH_SEQ")
        } else {
            0
        };
        assert_eq!(l.rqf_flush_seq, want_rqf);
        assert_eq!(l.op_mask, (1 << enum_val("__REQ_FAILFAST_DEV")) - 1);
        // Offsets: the witness is bpftool's raw dump ("'member' type_id=N bits_offset=M").
        let raw = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file", VMLINUX_BTF])
            .output()
            .unwrap();
        let raw = String::from_utf8_lossy(&raw.stdout);
        let offset = |st: &str, member: &str| -> u32 {
            let mut lines = raw
                .lines()
                .skip_while(|l| !l.contains(&format!("STRUCT '{st}' size=")))
                .skip(1);
            let line = lines
                .find(|l| {
                    !l.starts_with('\t') || l.trim_start().starts_with(&format!("'{member}' "))
                })
                .unwrap_or_else(|| panic!("{st}.{member} not in bpftool dump"));
            assert!(
                line.starts_with('\t'),
                "{st}.{member} not a direct member in bpftool dump"
            );
            line.rsplit("bits_offset=")
                .next()
                .unwrap()
                .parse::<u32>()
                .unwrap()
                / 8
        };
        assert_eq!(l.rq_q, offset("request", "q"));
        assert_eq!(l.rq_cmd_flags, offset("request", "cmd_flags"));
        assert_eq!(l.rq_rq_flags, offset("request", "rq_flags"));
        assert_eq!(l.rq_data_len, offset("request", "__data_len"));
        assert_eq!(l.rq_sector, offset("request", "__sector"));
        assert_eq!(l.q_disk, offset("request_queue", "disk"));
        assert_eq!(l.disk_major, offset("gendisk", "major"));
        assert_eq!(l.disk_first_minor, offset("gendisk", "first_minor"));
        assert_eq!(l.disk_name, offset("gendisk", "disk_name"));
        assert_eq!(l.bio_opf, offset("bio", "bi_opf"));
        assert_eq!(
            l.bio_sector,
            offset("bio", "bi_iter") + offset("bvec_iter", "bi_sector")
        );
        assert_eq!(
            l.bio_size,
            offset("bio", "bi_iter") + offset("bvec_iter", "bi_size")
        );
        assert_eq!(l.disk_queue, offset("gendisk", "queue"));
        assert_eq!(l.q_mq_ops, offset("request_queue", "mq_ops"));
        assert_eq!(l.bio_bdev, offset("bio", "bi_bdev"));
        assert_eq!(l.bdev_disk, offset("block_device", "bd_disk"));
        assert_eq!(l.rq_bio, offset("request", "bio"));
        assert_eq!(l.bio_next, offset("bio", "bi_next"));
        assert_eq!(l.rq_end_io, offset("request", "end_io"));
        assert_eq!(l.rq_start_time_ns, offset("request", "start_time_ns"));
        assert_eq!(l.rq_state, offset("request", "state"));
        // request::ioprio until 6.15, then only the bio's (host 6.18: the bio's).
        let has_rq_ioprio = raw
            .lines()
            .skip_while(|l| !l.contains("STRUCT 'request' size="))
            .skip(1)
            .take_while(|l| l.starts_with('\t'))
            .any(|l| l.trim_start().starts_with("'ioprio' "));
        let want = if has_rq_ioprio {
            offset("request", "ioprio")
        } else {
            0
        };
        assert_eq!(l.rq_ioprio, want);
        assert_eq!(l.bio_ioprio, offset("bio", "bi_ioprio"));
        assert_eq!(l.bio_status, offset("bio", "bi_status"));
        assert_eq!(l.bio_private, offset("bio", "bi_private"));
        // The owner chain (this kernel has CONFIG_BLK_CGROUP).
        let l = btf.owner_layout();
        assert_eq!(l.blk_cgroup, 1);
        assert_eq!(l.bio_blkg, offset("bio", "bi_blkg"));
        assert_eq!(l.blkg_blkcg, offset("blkcg_gq", "blkcg"));
        assert_eq!(
            l.blkcg_cgroup,
            offset("blkcg", "css") + offset("cgroup_subsys_state", "cgroup")
        );
        assert_eq!(l.cgroup_kn, offset("cgroup", "kn"));
        assert_eq!(l.kn_id, offset("kernfs_node", "id"));
        assert_eq!(l.cgroup_root, offset("cgroup", "root"));
        assert_eq!(l.root_hierarchy_id, offset("cgroup_root", "hierarchy_id"));
        assert_eq!(btf.member_size("kernfs_node", "id"), Some(8));
        // The bio-to-file chain; `d_alias` is the first member of the union `d_u`.
        let f = btf.file_layout();
        assert_eq!((f.resolved, f.dio), (1, 1));
        assert_eq!(f.bio_io_vec, offset("bio", "bi_io_vec"));
        assert_eq!(f.bvec_page, offset("bio_vec", "bv_page"));
        assert_eq!(f.mapping_host, offset("address_space", "host"));
        assert_eq!(f.inode_mapping, offset("inode", "i_mapping"));
        assert_eq!(f.inode_mode, offset("inode", "i_mode"));
        assert_eq!(f.inode_ino, offset("inode", "i_ino"));
        assert_eq!(f.inode_sb, offset("inode", "i_sb"));
        assert_eq!(f.sb_dev, offset("super_block", "s_dev"));
        assert_eq!(f.dentry_parent, offset("dentry", "d_parent"));
        assert_eq!(f.dentry_alias, offset("dentry", "d_u"));
        assert_eq!(f.dio_iocb, offset("iomap_dio", "iocb"));
        assert_eq!(f.iocb_filp, offset("kiocb", "ki_filp"));
        assert_eq!(f.file_inode, offset("file", "f_inode"));
        assert_eq!(
            btf.nested_offset("dentry", &["d_u", "no_such_member"]),
            None
        );
        assert_eq!(btf.arg_layout("block_rq_issue"), Some(ArgLayout::Current));
        assert_eq!(btf.tracepoint_args("block_rq_complete").unwrap().len(), 3);
        assert!(btf.tracepoint_args("no_such_tracepoint").is_none());
        assert!(btf.member_offset("request", "no_such_member").is_err());
    }

    /// The index built from our lookups gives aya's loader the same attach ids as aya's own
    /// parse of all of vmlinux BTF; and the mapped memfd copy (the path for kernels whose
    /// sysfs BTF cannot be mapped) resolves the same as the file itself.
    #[test]
    fn attach_id_index_matches_aya_parse() {
        use aya_obj::btf::BtfKind;
        if !runnable(
            Path::new(VMLINUX_BTF).exists(),
            &format!("no {VMLINUX_BTF}"),
        ) {
            return;
        }
        let kbtf = KernelBtf::from_file(VMLINUX_BTF).unwrap();
        let copy = KernelBtf::from_memfd_copy(VMLINUX_BTF).unwrap();
        assert_eq!(kbtf.kernel_layout().unwrap(), copy.kernel_layout().unwrap());
        let tps = ["block_rq_issue", "block_rq_complete", "block_bio_queue"];
        let typedefs: Vec<(&str, u32)> = tps
            .iter()
            .map(|&tp| (tp, kbtf.tracepoint_typedef_id(tp).unwrap()))
            .collect();
        for &(tp, id) in &typedefs {
            assert_eq!(copy.tracepoint_typedef_id(tp), Some(id));
        }
        assert_eq!(kbtf.tracepoint_typedef_id("no_such_tracepoint"), None);
        let index = attach_id_index(&typedefs).unwrap();
        let full = aya::Btf::from_sys_fs().unwrap();
        for tp in tps {
            let name = format!("btf_trace_{tp}");
            assert_eq!(
                index.id_by_type_name_kind(&name, BtfKind::Typedef).unwrap(),
                full.id_by_type_name_kind(&name, BtfKind::Typedef).unwrap(),
                "{name}"
            );
        }
        assert!(index
            .id_by_type_name_kind("btf_trace_block_rq_insert", BtfKind::Typedef)
            .is_err());
    }

    /// Without a kernel: each typedef at its id, nothing else named.
    #[test]
    fn attach_id_index_places_typedefs_by_id() {
        use aya_obj::btf::BtfKind;
        let index = attach_id_index(&[("a", 3), ("b", 7)]).unwrap();
        let id = |n: &str| index.id_by_type_name_kind(n, BtfKind::Typedef).ok();
        assert_eq!(id("btf_trace_a"), Some(3));
        assert_eq!(id("btf_trace_b"), Some(7));
        assert_eq!(id("btf_trace_c"), None);
        assert!(attach_id_index(&[]).is_ok());
    }
}
