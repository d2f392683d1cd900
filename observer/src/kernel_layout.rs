//! Resolves [`KernelLayout`] and the tracepoint argument layouts from the running kernel's BTF
//! (`/sys/kernel/btf/vmlinux`), so nothing kernel-version-specific is compiled into the programs.

use std::path::Path;

use btf_rs::{Btf, BtfType, Type};
use observer_common::layout::KernelLayout;

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
    #[error("kernel BTF has no {0}; this kernel is not supported (please report it with `uname -r`)")]
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
    /// Parses a BTF file (usually [`VMLINUX_BTF`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LayoutError> {
        let path = path.as_ref();
        Btf::from_file(path).map(|btf| Self { btf }).map_err(|e| LayoutError::Read {
            path: path.display().to_string(),
            source: e.into(),
        })
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
                if let Ok(Type::Struct(inner) | Type::Union(inner)) = self.btf.resolve_chained_type(m) {
                    if let Some(found) = self.find_member(&inner, member, off) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// Value of `variant` in the first of `enum_names` that has it.
    pub fn enum_value(&self, enum_names: &[&str], variant: &str) -> Result<u32, LayoutError> {
        for name in enum_names {
            for ty in self.named_types(name) {
                if let Type::Enum(e) = ty {
                    for m in &e.members {
                        if self.btf.resolve_name(m).ok().as_deref() == Some(variant) {
                            return Ok(m.val());
                        }
                    }
                }
            }
        }
        Err(LayoutError::Missing(format!("enum {}::{variant}", enum_names.join("|"))))
    }

    /// Names of the pointee types of a tracepoint's arguments (without the leading `void *`),
    /// e.g. `["request"]` for block_rq_issue on 6.x. `None` if the kernel lacks the tracepoint.
    pub fn tracepoint_args(&self, tp: &str) -> Option<Vec<String>> {
        let typedef = self
            .named_types(&format!("btf_trace_{tp}"))
            .into_iter()
            .find_map(|t| if let Type::Typedef(td) = t { Some(td) } else { None })?;
        let Ok(Type::Ptr(ptr)) = self.btf.resolve_chained_type(&typedef) else { return None };
        let Ok(Type::FuncProto(proto)) = self.btf.resolve_chained_type(&ptr) else { return None };
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
                Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => self.btf.resolve_chained_type(x).ok()?,
                _ => return None,
            };
            ty = next;
        }
        None
    }

    /// Argument layout of a `block_rq_*` or `block_bio_*merge` tracepoint, or `None` if absent.
    pub fn arg_layout(&self, tp: &str) -> Option<ArgLayout> {
        let args = self.tracepoint_args(tp)?;
        Some(if args.first().map(String::as_str) == Some("request_queue") {
            ArgLayout::QueueFirst
        } else {
            ArgLayout::Current
        })
    }

    /// Resolves everything the programs need. `enter_fallback` is set when the kernel has no
    /// `block_io_start` tracepoint.
    pub fn kernel_layout(&self) -> Result<KernelLayout, LayoutError> {
        let ops = ["req_op", "req_opf"];
        let bits = ["req_flag_bits"];
        let bit = |v: &str| self.enum_value(&bits, v).map(|b| 1u32 << b);
        // REQ_OP_BITS is a #define; the first flag bit (__REQ_FAILFAST_DEV) sits right above it.
        let op_bits = self.enum_value(&bits, "__REQ_FAILFAST_DEV")?;
        // RQF_FLUSH_SEQ became `enum rqf_flags` in 6.x; before, a #define of 1 << 4.
        let rqf_flush_seq = match self.enum_value(&["rqf_flags"], "__RQF_FLUSH_SEQ") {
            Ok(b) => 1 << b,
            Err(_) => {
                tracing::warn!("kernel BTF has no enum rqf_flags: assuming RQF_FLUSH_SEQ = 1 << 4 (Linux < 6.5)");
                1 << 4
            }
        };
        Ok(KernelLayout {
            rq_q: self.member_offset("request", "q")?,
            rq_cmd_flags: self.member_offset("request", "cmd_flags")?,
            rq_rq_flags: self.member_offset("request", "rq_flags")?,
            rq_data_len: self.member_offset("request", "__data_len")?,
            rq_sector: self.member_offset("request", "__sector")?,
            q_disk: self.member_offset("request_queue", "disk")?,
            disk_major: self.member_offset("gendisk", "major")?,
            disk_first_minor: self.member_offset("gendisk", "first_minor")?,
            rq_bio: self.member_offset("request", "bio")?,
            bio_next: self.member_offset("bio", "bi_next")?,
            bio_opf: self.member_offset("bio", "bi_opf")?,
            bio_bdev: self.member_offset("bio", "bi_bdev")?,
            bdev_disk: self.member_offset("block_device", "bd_disk")?,
            rqf_flush_seq,
            op_mask: (1u32 << op_bits) - 1,
            op_read: self.enum_value(&ops, "REQ_OP_READ")?,
            op_write: self.enum_value(&ops, "REQ_OP_WRITE")?,
            op_flush: self.enum_value(&ops, "REQ_OP_FLUSH")?,
            op_discard: self.enum_value(&ops, "REQ_OP_DISCARD")?,
            op_write_zeroes: self.enum_value(&ops, "REQ_OP_WRITE_ZEROES")?,
            flag_preflush: bit("__REQ_PREFLUSH")?,
            flag_fua: bit("__REQ_FUA")?,
            flag_sync: bit("__REQ_SYNC")?,
            flag_meta: bit("__REQ_META")?,
            flag_rahead: bit("__REQ_RAHEAD")?,
            enter_fallback: u32::from(self.tracepoint_args("block_io_start").is_none()),
            direct_loads: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolves against the running kernel; the expected values are the independent witness of
    /// `bpftool btf dump file /sys/kernel/btf/vmlinux format c`, parsed here as text.
    #[test]
    fn layout_matches_bpftool_dump() {
        if !Path::new(VMLINUX_BTF).exists() {
            assert!(std::env::var("CI").is_err(), "CI: {VMLINUX_BTF} missing");
            eprintln!("skipping: no {VMLINUX_BTF}");
            return;
        }
        let btf = KernelBtf::from_file(VMLINUX_BTF).unwrap();
        let l = btf.kernel_layout().unwrap();
        let dump = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file", VMLINUX_BTF, "format", "c"])
            .output();
        let Ok(dump) = dump else {
            assert!(std::env::var("CI").is_err(), "CI: bpftool missing");
            return;
        };
        let text = String::from_utf8_lossy(&dump.stdout);
        let enum_val = |name: &str| -> u32 {
            let line = text.lines().find(|l| l.trim_start().starts_with(&format!("{name} = "))).unwrap();
            line.split('=').nth(1).unwrap().trim().trim_end_matches(',').parse().unwrap()
        };
        assert_eq!(l.op_write, enum_val("REQ_OP_WRITE"));
        assert_eq!(l.op_flush, enum_val("REQ_OP_FLUSH"));
        assert_eq!(l.op_write_zeroes, enum_val("REQ_OP_WRITE_ZEROES"));
        assert_eq!(l.flag_fua, 1 << enum_val("__REQ_FUA"));
        assert_eq!(l.flag_preflush, 1 << enum_val("__REQ_PREFLUSH"));
        assert_eq!(l.op_mask, (1 << enum_val("__REQ_FAILFAST_DEV")) - 1);
        // Offsets: the witness is bpftool's raw dump ("'member' type_id=N bits_offset=M").
        let raw = std::process::Command::new("bpftool").args(["btf", "dump", "file", VMLINUX_BTF]).output().unwrap();
        let raw = String::from_utf8_lossy(&raw.stdout);
        let offset = |st: &str, member: &str| -> u32 {
            let mut lines = raw.lines().skip_while(|l| !l.contains(&format!("STRUCT '{st}' size="))).skip(1);
            let line = lines
                .find(|l| !l.starts_with('\t') || l.trim_start().starts_with(&format!("'{member}' ")))
                .unwrap_or_else(|| panic!("{st}.{member} not in bpftool dump"));
            assert!(line.starts_with('\t'), "{st}.{member} not a direct member in bpftool dump");
            line.rsplit("bits_offset=").next().unwrap().parse::<u32>().unwrap() / 8
        };
        assert_eq!(l.rq_q, offset("request", "q"));
        assert_eq!(l.rq_cmd_flags, offset("request", "cmd_flags"));
        assert_eq!(l.rq_rq_flags, offset("request", "rq_flags"));
        assert_eq!(l.rq_data_len, offset("request", "__data_len"));
        assert_eq!(l.rq_sector, offset("request", "__sector"));
        assert_eq!(l.q_disk, offset("request_queue", "disk"));
        assert_eq!(l.disk_major, offset("gendisk", "major"));
        assert_eq!(l.disk_first_minor, offset("gendisk", "first_minor"));
        assert_eq!(l.bio_opf, offset("bio", "bi_opf"));
        assert_eq!(l.bio_bdev, offset("bio", "bi_bdev"));
        assert_eq!(l.bdev_disk, offset("block_device", "bd_disk"));
        assert_eq!(btf.arg_layout("block_rq_issue"), Some(ArgLayout::Current));
        assert_eq!(btf.tracepoint_args("block_rq_complete").unwrap().len(), 3);
        assert!(btf.tracepoint_args("no_such_tracepoint").is_none());
        assert!(btf.member_offset("request", "no_such_member").is_err());
    }
}
