//! The mount table (`/proc/<pid>/mountinfo`, proc(5)): which XFS and ext2/3/4 filesystems are
//! mounted, on which device numbers, with which options.

/// One mountinfo line (proc(5)), the fields discovery uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Mount ID.
    pub id: u32,
    /// `st_dev` of the filesystem: (major, minor).
    pub dev: (u32, u32),
    /// Mount point (unescaped).
    pub mountpoint: String,
    /// Filesystem type.
    pub fstype: String,
    /// Mount source (unescaped), e.g. `/dev/loop3`.
    pub source: String,
    /// Per-superblock options, e.g. `rw,attr2,logdev=/dev/loop4,...`.
    pub super_options: String,
}

pub(super) fn unescape(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo` text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            if sep < 6 || f.len() < sep + 4 {
                return None;
            }
            let (maj, min) = f[2].split_once(':')?;
            Some(MountEntry {
                id: f[0].parse().ok()?,
                dev: (maj.parse().ok()?, min.parse().ok()?),
                mountpoint: unescape(f[4]),
                fstype: f[sep + 1].to_string(),
                source: unescape(f[sep + 2]),
                super_options: f[sep + 3].to_string(),
            })
        })
        .collect()
}

/// The value of `key=value` in a comma-separated mount option string, e.g. `logdev`.
pub fn option_value<'a>(opts: &'a str, key: &str) -> Option<&'a str> {
    opts.split(',')
        .find_map(|o| o.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let t = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - xfs /dev/loop3 rw,attr2,logdev=/dev/loop4\n\
                 37 35 98:1 / /x rw - ext4 /dev/loop5p1 rw\nbad line\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, "/mnt/a b");
        assert_eq!(m[0].dev, (98, 0));
        assert_eq!(
            option_value(&m[0].super_options, "logdev"),
            Some("/dev/loop4")
        );
        assert_eq!(m[1].fstype, "ext4");
    }
}
