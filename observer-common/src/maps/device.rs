//! Disks: device numbers (`MKDEV`, the hash of a hidden disk's name), the per-device slots
//! and their values (`DEVSTATE`, `LOG_RANGES`).

use super::*;

/// A device number as the kernel's `MKDEV(major, minor)`: `major << 20 | minor`. Requests are
/// keyed by their disk (`gendisk`), so a partition's I/O is attributed to the whole disk.
pub const fn mkdev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xfffff)
}

/// `DISK_NAME_LEN` (include/linux/blkdev.h): bytes of `struct gendisk::disk_name`, NUL-padded.
pub const DISK_NAME_LEN: usize = 32;

/// The start of [`disk_name_hash`]'s chain.
pub const NAME_HASH_START: u32 = 0x811c_9dc5;

/// murmur3's 32-bit finalizer: every input bit reaches every output bit.
const fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// One 8-byte word (little-endian) of a disk name's hash ([`disk_name_hash`]): both halves
/// mixed in.
pub const fn name_hash_word(h: u32, word: u64) -> u32 {
    fmix32(fmix32(h ^ word as u32) ^ (word >> 32) as u32)
}

/// The number a disk is counted under when its `gendisk` has none: a hidden disk
/// (GENHD_FL_HIDDEN: an NVMe multipath path disk `nvmeXcYnZ`) on kernels that give hidden
/// disks no dev_t (5.10: its /proc/diskstats line reads `0 0`; since 5.15 they get one, shown
/// in /proc/diskstats though not in sysfs). Major 0 (no block device has it; /sys/dev/block
/// never lists it), minor `0x80000 | (hash & 0x7ffff)` of the disk name's hash
/// ([`name_hash_word`]): never 0, and two such disks collide only if their names' hashes
/// agree in 19 bits.
pub const fn nameless_dev(name_hash: u32) -> u32 {
    mkdev(0, 0x80000 | (name_hash & 0x7ffff))
}

/// The hash of a `gendisk::disk_name` as the kernel holds it: its [`DISK_NAME_LEN`] bytes as
/// four little-endian words, of which only the bytes before the first NUL count (drivers may
/// leave garbage after it: nvme copies its whole name buffer, `memcpy(disk->disk_name,
/// disk_name, DISK_NAME_LEN)`). Branch-free (the programs run it; no branch for the verifier
/// to fork on): per word, the lowest byte flagged by `(w - 0x01…) & !w & 0x80…` is its first
/// NUL; the bytes below it are kept, and every word after it is masked off.
pub const fn disk_name_hash(words: [u64; 4]) -> u32 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut h = NAME_HASH_START;
    let mut alive = u64::MAX;
    let mut i = 0;
    while i < 4 {
        let w = words[i];
        let t = w.wrapping_sub(ONES) & !w & HIGHS;
        // The first NUL's 0x80 bit, then a mask of the bytes below it (all 8 without a NUL).
        let keep = ((t & t.wrapping_neg()) >> 7).wrapping_sub(1);
        h = name_hash_word(h, w & keep & alive);
        // All ones while no NUL was seen (`keep` has its top bit only then).
        alive &= 0u64.wrapping_sub(keep >> 63);
        i += 1;
    }
    h
}

/// [`nameless_dev`] of a disk name (`nvme1c1n1`, at most `DISK_NAME_LEN - 1` bytes, as the
/// kernel keeps it), as the daemon computes it from `/sys/block`.
pub fn nameless_dev_of(name: &[u8]) -> u32 {
    let mut buf = [0u8; DISK_NAME_LEN];
    let n = name.len().min(DISK_NAME_LEN - 1);
    buf[..n].copy_from_slice(&name[..n]);
    let mut words = [0u64; 4];
    for (w, b) in words.iter_mut().zip(buf.chunks_exact(8)) {
        *w = u64::from_le_bytes(b.try_into().unwrap());
    }
    nameless_dev(disk_name_hash(words))
}

/// Major number of a [`mkdev`] value.
pub const fn dev_major(dev: u32) -> u32 {
    dev >> 20
}

/// Minor number of a [`mkdev`] value.
pub const fn dev_minor(dev: u32) -> u32 {
    dev & 0xfffff
}

/// (major, minor) of a device number in the *userspace* `dev_t` encoding the kernel stores on
/// disk, e.g. ext4's `s_journal_dev`: `new_decode_dev()` in include/linux/kdev_t.h (the same as
/// glibc's `gnu_dev_major`/`gnu_dev_minor` for 32-bit values). Not the [`mkdev`] encoding of
/// [`dev_major`]/[`dev_minor`]: `0x0703` is 7:3 here and 0:1795 there.
pub const fn decode_user_dev(d: u32) -> (u32, u32) {
    ((d >> 8) & 0xfff, (d & 0xff) | ((d >> 12) & 0xfff00))
}

/// Entries of the per-device arrays (`DEVSTATE`, `LOG_RANGES`) and of `DEV_INDEX`. Slot 0 is
/// never given to a disk ([`NO_SLOT`]), so [`DEV_SLOT_LIMIT`] disks have one.
pub const DEV_SLOTS: u32 = 1024;

/// The slot of a disk that has none (not indexed yet, or more than [`DEV_SLOT_LIMIT`] disks):
/// its requests are neither classified as filesystem log writes nor stall-tracked, and are
/// counted in [`Counter::Unindexed`]. Entry 0 of the per-device arrays is never written.
pub const NO_SLOT: u32 = 0;

/// How many disks get a slot of their own, each a different one (slots 1 to
/// [`DEV_SLOTS`]` - 1`): any set of up to this many disks is fully classified and
/// stall-tracked; the daemon reports the others as degraded.
pub const DEV_SLOT_LIMIT: u32 = DEV_SLOTS - 1;

/// Per-device state in `DEVSTATE`, shared by all CPUs (updated with plain stores: the latest
/// writer wins, which is the latest event up to a few ns). The daemon writes a slot's `dev`
/// and `complete_dev` (and zero times) when it gives the slot to a disk ([`DevState::of`]),
/// and zeroes it when the disk goes; the programs only use a slot whose `dev` (dispatch side)
/// or `complete_dev` (completion side) is the request's disk.
///
/// Two sides 96 bytes apart, so that no 64-byte cache line holds fields of both at any 8-byte
/// alignment of the map's values: the dispatching CPU writes the first at every dispatch, the
/// completing CPU the second at every completion, and with both in one line each such write
/// took the line from the other CPU (30 ns of `rq_issue` and of `rq_complete` each in the
/// bench, where a loop disk dispatches on fio's CPU and completes on the other).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevState {
    /// The disk owning this slot ([`mkdev`]); 0 while unused. Dispatch side.
    pub dev: u32,
    /// Always 0.
    pub _pad: u32,
    /// Latest dispatch on the device (ns).
    pub last_dispatch_ns: u64,
    /// First sector (512 B) of the request dispatched at `last_dispatch_ns`.
    pub last_sector: u64,
    /// Its length in 512-byte sectors (`__data_len >> 9`; 0 for the flush request).
    pub last_sectors: u32,
    /// Its class (see [`crate::class`]).
    pub last_class: u16,
    /// Always 0.
    pub _pad2: u16,
    /// Always 0: the gap between the sides.
    pub _gap: [u64; 8],
    /// `dev` again, for the completion side.
    pub complete_dev: u32,
    /// Always 0.
    pub _pad3: u32,
    /// Latest final completion on the device (ns).
    pub last_complete_ns: u64,
    /// Always 0: the gap to the next slot's dispatch side.
    pub _tail: [u64; 10],
}

impl DevState {
    /// The state of a slot just given to disk `dev` ([`mkdev`]): its number on both sides,
    /// everything else 0.
    pub fn of(dev: u32) -> Self {
        DevState {
            dev,
            complete_dev: dev,
            ..DevState::default()
        }
    }
}

/// One filesystem log range on a whole disk: `[start, end)` in 512-byte sectors, as
/// `struct request::__sector` counts them (partition offset already added).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SectorRange {
    /// First sector (inclusive).
    pub start: u64,
    /// End sector (exclusive).
    pub end: u64,
}

/// Value of `LOG_RANGES`: the log (journal) ranges on one disk. A request whose first sector is
/// inside one of `ranges[..count]` gets [`crate::class::LOG`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogRanges {
    /// Valid entries in `ranges` (≤ [`LOG_RANGES_MAX`]).
    pub count: u32,
    /// The disk these ranges belong to ([`mkdev`]), at its slot (`DEV_INDEX`) of `LOG_RANGES`;
    /// the programs ignore the entry for any other disk.
    pub dev: u32,
    /// The ranges; entries past `count` are ignored.
    pub ranges: [SectorRange; LOG_RANGES_MAX],
}

impl LogRanges {
    /// Whether `sector` (512-byte units on the whole disk) is inside one of the ranges. The
    /// eBPF side runs the same bounded loop.
    #[inline(always)]
    pub fn contains(&self, sector: u64) -> bool {
        self.find(sector).is_some()
    }

    /// The range `sector` (512 B units on the whole disk) is inside, if any.
    #[inline(always)]
    pub fn find(&self, sector: u64) -> Option<SectorRange> {
        let mut i = 0;
        while i < LOG_RANGES_MAX {
            if i as u32 >= self.count {
                break;
            }
            let r = self.ranges[i];
            if r.contains(sector) {
                return Some(r);
            }
            i += 1;
        }
        None
    }
}

impl SectorRange {
    /// Whether `sector` is in `[start, end)`.
    #[inline(always)]
    pub fn contains(&self, sector: u64) -> bool {
        sector >= self.start && sector < self.end
    }

    /// The same range on the disk below a linear remap that sent sector `from` of this disk
    /// to sector `to` there (both 512 B units): moved by `to - from`; `None` if that would
    /// leave the sector space.
    #[inline(always)]
    pub fn moved(&self, from: u64, to: u64) -> Option<SectorRange> {
        let (start, end) = if to >= from {
            let d = to - from;
            (self.start.checked_add(d)?, self.end.checked_add(d)?)
        } else {
            let d = from - to;
            (self.start.checked_sub(d)?, self.end.checked_sub(d)?)
        };
        Some(SectorRange { start, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_moves_with_the_remap_and_is_found() {
        let r = SectorRange {
            start: 1000,
            end: 2000,
        };
        // LVM: the LV's sector 1500 is the PV's 1500 + 2048.
        assert_eq!(
            r.moved(1500, 3548),
            Some(SectorRange {
                start: 3048,
                end: 4048
            })
        );
        assert_eq!(
            r.moved(1500, 500),
            Some(SectorRange {
                start: 0,
                end: 1000
            })
        );
        assert_eq!(r.moved(1500, 499), None);
        let mut l = LogRanges {
            count: 1,
            dev: 1,
            ..Default::default()
        };
        l.ranges[0] = r;
        l.ranges[1] = SectorRange { start: 0, end: 10 };
        assert_eq!(l.find(1999), Some(r));
        assert_eq!(l.find(2000), None);
        // Past `count`: ignored.
        assert_eq!(l.find(5), None);
        assert!(!l.contains(5) && l.contains(1000));
    }
}
