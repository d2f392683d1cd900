//! Reads all of `INFLIGHT` in a few syscalls (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6+) instead of
//! two per entry (get-next-key + lookup): it keeps an entry per request struct ever used (tens
//! of thousands with many busy devices), and it is read on every scrape.

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{HashMap, IterableMap, MapData};
use observer_common::maps::Inflight;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BATCH: usize = 4096;

/// `union bpf_attr`'s `batch` member (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every (request pointer, entry) of `INFLIGHT`, live and free. Falls back to per-entry
/// iteration if the kernel refuses batch lookups.
pub fn read_inflight(map: &HashMap<MapData, u64, Inflight>) -> Vec<(u64, Inflight)> {
    match batch(map) {
        Some(v) => v,
        None => map.iter().flatten().collect(),
    }
}

fn batch(map: &HashMap<MapData, u64, Inflight>) -> Option<Vec<(u64, Inflight)>> {
    let fd = IterableMap::map(map).fd().as_fd().as_raw_fd();
    let mut out = Vec::new();
    let mut keys = vec![0u64; BATCH];
    let mut values = vec![Inflight::default(); BATCH];
    // Hash maps use a u32 bucket cursor for in_batch/out_batch.
    let mut cursor: u32 = 0;
    let mut next: u32 = 0;
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &mut cursor as *mut u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH as u32,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: attr points to valid buffers of BATCH keys and values, sized as the map's.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>(),
            )
        };
        let errno = std::io::Error::last_os_error().raw_os_error();
        let n = attr.count as usize;
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        if ret == 0 {
            cursor = next;
            first = false;
            continue;
        }
        return match errno {
            Some(libc::ENOENT) => Some(out), // done
            _ if first => None,              // not supported: caller iterates
            _ => Some(out),
        };
    }
}
