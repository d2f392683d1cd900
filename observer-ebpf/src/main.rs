//! Kernel side of the block I/O observer: one short function per block tracepoint.
//!
//! A request's life, keyed by its `struct request *` in `INFLIGHT`:
//! `block_io_start` (enter, original flags) → `block_rq_issue` (dispatch) → `block_rq_complete`
//! (final completion: aggregate into per-CPU histograms, forget). The internal flush request
//! never enters; it is tracked from its dispatch. Nothing goes to userspace per event.
//!
//! Every handler exists twice, as `tp_btf` (preferred) and `raw_tp` (fallback) program, and for
//! two argument layouts: `(rq, ...)` since Linux 5.11 and `(q, rq, ...)` before. The daemon
//! loads the variant that matches the running kernel's BTF. Struct offsets and enum values come
//! from the read-only global [`LAYOUT`], filled by the daemon from kernel BTF.
#![no_std]
#![no_main]

use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, map, raw_tracepoint},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, RawTracePointContext},
    EbpfContext,
};
use observer_common::{
    class::{classify, Op, OP_MASK},
    hist::{bucket_index, NBUCKETS},
    layout::KernelLayout,
    maps::{
        mkdev, ClassKey, ClassStats, Counter, DevState, ErrorKey, Inflight, Settings, SlowEvent,
        StageHist, StallEvent, EVENTS_BYTES, EVENT_SLOW, EVENT_STALL, INFLIGHT_DEFAULT_ENTRIES,
        STALL_DEVICE, STALL_DISPATCH,
    },
    maps::{dev_slot, LogRanges, DEV_SLOTS},
    Stage,
};

/// Filled by the daemon before load (`.rodata`: the verifier treats it as constant).
#[no_mangle]
static LAYOUT: KernelLayout = KernelLayout::ZERO;

#[map]
static INFLIGHT: HashMap<u64, Inflight> = HashMap::with_max_entries(INFLIGHT_DEFAULT_ENTRIES, 0);
/// Capacity is set by the daemon before load (memory budget / CPUs).
#[map]
static CLASS_STATS: PerCpuHashMap<ClassKey, ClassStats> = PerCpuHashMap::with_max_entries(256, 0);
#[map]
static ERRORS: PerCpuHashMap<ErrorKey, u64> = PerCpuHashMap::with_max_entries(1024, 0);
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);
/// Slow thresholds and stall threshold, written by the daemon.
#[map]
static SETTINGS: Array<Settings> = Array::with_max_entries(1, 0);
#[map]
static DEVSTATE: Array<DevState> = Array::with_max_entries(DEV_SLOTS, 0);
/// Slow requests and stall episodes: the only per-event traffic to userspace, and only for
/// requests over a threshold.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);
/// One all-zero `Inflight`: what a new `INFLIGHT` key is inserted with, before being filled in
/// place (no large struct is built on the stack or copied).
#[map]
static ZERO_INFLIGHT: PerCpuArray<Inflight> = PerCpuArray::with_max_entries(1, 0);
/// One all-zero `ClassStats`: the template for new `CLASS_STATS` entries (too big for the stack).
#[map]
static ZERO: PerCpuArray<ClassStats> = PerCpuArray::with_max_entries(1, 0);

/// Filesystem log ranges per disk, written by the daemon (observer/src/fslog.rs).
#[map]
static LOG_RANGES: Array<LogRanges> = Array::with_max_entries(DEV_SLOTS, 0);

/// [`observer_common::class::LOG`] if the request starts inside a filesystem log range of its
/// disk, else 0. One array lookup (inlined by the verifier).
#[inline(always)]
fn log_class(dev: u32, sector: u64) -> u16 {
    match LOG_RANGES.get(dev_slot(dev)) {
        Some(r) if r.dev == dev && r.contains(sector) => observer_common::class::LOG,
        _ => 0,
    }
}

#[inline(always)]
fn layout() -> KernelLayout {
    // Volatile: the value is patched into the object after compilation.
    unsafe { core::ptr::read_volatile(&LAYOUT) }
}

/// Reads a kernel struct field at `base + off`. In tp_btf programs (`direct_loads`) a plain
/// load, which the verifier checks against BTF and turns into a fault-safe load; in raw_tp
/// programs `bpf_probe_read_kernel`. The flag is a read-only global, so the verifier only sees
/// the branch the program really takes. 0 (or the default) if the read fails.
#[inline(always)]
fn read<T: Default + Copy>(base: u64, off: u32) -> T {
    let direct = unsafe { core::ptr::read_volatile(&LAYOUT.direct_loads) };
    let p = (base + off as u64) as *const T;
    if direct != 0 {
        unsafe { core::ptr::read_volatile(p) }
    } else {
        unsafe { bpf_probe_read_kernel(p).unwrap_or_default() }
    }
}

#[inline(always)]
fn arg(ctx: &impl EbpfContext, n: usize) -> u64 {
    unsafe { *(ctx.as_ptr() as *const u64).add(n) }
}

#[inline(always)]
fn count(c: Counter) {
    if let Some(p) = COUNTERS.get_ptr_mut(c as u32) {
        unsafe { *p += 1 };
    }
}

/// The disk of a `struct gendisk *`, as `mkdev(major, first_minor)`.
#[inline(always)]
fn disk_dev(disk: u64, l: &KernelLayout) -> u32 {
    mkdev(read::<u32>(disk, l.disk_major), read::<u32>(disk, l.disk_first_minor))
}

/// The disk of a request: `rq->rq_disk` (≤ 5.15) or `rq->q->disk`. Partitions count for
/// their whole disk.
#[inline(always)]
fn rq_dev(rq: u64, l: &KernelLayout) -> u32 {
    let disk: u64 = if l.rq_disk != 0 {
        read(rq, l.rq_disk)
    } else {
        let q: u64 = read(rq, l.rq_q);
        read(q, l.q_disk)
    };
    disk_dev(disk, l)
}

/// The disk of a bio: `bio->bi_disk` (< 5.12) or `bio->bi_bdev->bd_disk`.
#[inline(always)]
fn bio_dev(bio: u64, l: &KernelLayout) -> u32 {
    let disk: u64 = if l.bio_disk != 0 {
        read(bio, l.bio_disk)
    } else {
        let bdev: u64 = read(bio, l.bio_bdev);
        read(bdev, l.bdev_disk)
    };
    disk_dev(disk, l)
}

/// Whether the request is inside a flush sequence (block/blk-flush.c): RQF_FLUSH_SEQ where BTF
/// names it, else `rq->end_io`, which blk-flush.c sets to mq_flush_data_end_io for exactly
/// that span (the flush request's own end_io, flush_end_io, is set too).
#[inline(always)]
fn in_flush_seq(rq: u64, l: &KernelLayout) -> bool {
    if l.rqf_flush_seq != 0 {
        read::<u32>(rq, l.rq_rq_flags) & l.rqf_flush_seq != 0
    } else {
        read::<u64>(rq, l.rq_end_io) != 0
    }
}

/// The request's original cmd_flags. At block_io_start that is `rq->cmd_flags`; kernels
/// without it see the request later, after blk-flush.c may have stripped PREFLUSH/FUA from
/// the request, but not from its first bio.
#[inline(always)]
fn original_flags(rq: u64, l: &KernelLayout) -> u32 {
    if l.enter_fallback != 0 {
        let bio: u64 = read(rq, l.rq_bio);
        if bio != 0 {
            return read(bio, l.bio_opf);
        }
    }
    read(rq, l.rq_cmd_flags)
}

/// Zeroes a u64 in a map value with a plain store: a struct-wide zeroing may be compiled to a
/// call to an out-of-line `memset`, which the verifier of 6.1 refuses for map values.
#[inline(always)]
fn zero(p: &mut u64) {
    unsafe { core::ptr::write_volatile(p, 0) };
}

/// Stats entry of (dev, class), created on first use.
#[inline(always)]
fn stats(dev: u32, class: u16) -> Option<*mut ClassStats> {
    let key = ClassKey { dev, class, _pad: 0 };
    if let Some(p) = CLASS_STATS.get_ptr_mut(&key) {
        return Some(p);
    }
    let zero = ZERO.get_ptr(0)?;
    let _ = CLASS_STATS.insert(&key, unsafe { &*zero }, BPF_NOEXIST as u64);
    let p = CLASS_STATS.get_ptr_mut(&key);
    if p.is_none() {
        count(Counter::StatsFull);
    }
    p
}

#[inline(always)]
fn observe(h: &mut StageHist, ns: u64) {
    let mut i = bucket_index(ns);
    if i >= NBUCKETS {
        i = NBUCKETS - 1;
    }
    h.buckets[i] += 1;
    h.sum_ns += ns;
}

/// Starts tracking a request that entered the block layer, with its original cmd_flags.
///
/// An existing entry for the same `struct request *` means the struct was freed and reused
/// since we saw it enter: its completion never reached `block_rq_complete` here. With
/// `replace`, that request is counted as completed with its latency lost, and replaced.
#[inline(always)]
fn enter(rq: u64, now: u64, dispatch_ns: u64, replace: bool, l: &KernelLayout) {
    let mut enter_ns = now;
    if l.enter_fallback != 0 {
        // Seen late (insert, issue or completion): the kernel's own allocation time is the entry.
        let start: u64 = read(rq, l.rq_start_time_ns);
        if start != 0 && start <= now {
            enter_ns = start;
        }
    }
    let Some(e) = slot(rq, replace) else { return };
    let dev = rq_dev(rq, l);
    let sector: u64 = read(rq, l.rq_sector);
    let class = classify(original_flags(rq, l), l) | log_class(dev, sector);
    unsafe {
        fill(e, enter_ns, dispatch_ns, dev, class, sector, read(rq, l.rq_data_len));
        // The submitting task: block_io_start runs in its context (never in an interrupt).
        put(addr_of_mut!((*e).pid), (bpf_get_current_pid_tgid() >> 32) as u32);
        put(addr_of_mut!((*e).cgroup), bpf_get_current_cgroup_id());
        // Writes all 16 bytes (zeros on failure).
        aya_ebpf::helpers::generated::bpf_get_current_comm(addr_of_mut!((*e).comm) as *mut _, 16);
    }
}

/// Writes a value with a plain store that the compiler may not merge with its neighbours into
/// an out-of-line `memset`/`memcpy` call (which the verifier of 6.1 refuses on map values).
#[inline(always)]
unsafe fn put<T>(p: *mut T, v: T) {
    core::ptr::write_volatile(p, v)
}

/// Fills an [`Inflight`] (a map value) field by field; submitter fields zero.
#[inline(always)]
unsafe fn fill(e: *mut Inflight, enter_ns: u64, dispatch_ns: u64, dev: u32, class: u16, sector: u64, size: u32) {
    put(addr_of_mut!((*e).enter_ns), enter_ns);
    put(addr_of_mut!((*e).dispatch_ns), dispatch_ns);
    put(addr_of_mut!((*e).bytes), 0);
    put(addr_of_mut!((*e).dev), dev);
    put(addr_of_mut!((*e).class), class);
    put(addr_of_mut!((*e).requeues), 0);
    put(addr_of_mut!((*e).requeued), 0);
    put(addr_of_mut!((*e).sector), sector);
    put(addr_of_mut!((*e).size), size);
    put(addr_of_mut!((*e).pid), 0);
    put(addr_of_mut!((*e).cgroup), 0);
    let comm = addr_of_mut!((*e).comm) as *mut u64;
    put(comm, 0);
    put(comm.add(1), 0);
}

/// The `INFLIGHT` entry of `rq` to fill: its existing entry (kept for reuse), or a new one
/// inserted for it. A live existing entry means the struct was freed and reused since we saw it
/// enter: its completion never reached block_rq_complete here. With `replace`, that request is
/// counted as completed with its latency lost and the entry is returned; without, `None`.
#[inline(always)]
fn slot(rq: u64, replace: bool) -> Option<*mut Inflight> {
    if let Some(p) = INFLIGHT.get_ptr_mut(&rq) {
        let old = unsafe { &*p };
        if old.is_live() {
            if !replace {
                return None;
            }
            lost(old.dev, old.class);
        }
        return Some(p);
    }
    // A new key: insert the (zeroed, unused) scratch entry, then fill the map's copy in place.
    let zero = ZERO_INFLIGHT.get_ptr(0)?;
    match INFLIGHT.insert(&rq, unsafe { &*zero }, BPF_NOEXIST as u64) {
        Ok(()) | Err(-17) => {}
        Err(_) => {
            count(Counter::InflightFull);
            return None;
        }
    }
    INFLIGHT.get_ptr_mut(&rq)
}

/// A request that completed without its completion reaching us: counted, no latency.
#[inline(always)]
fn lost(dev: u32, class: u16) {
    if let Some(s) = stats(dev, class) {
        unsafe {
            (*s).requests += 1;
            (*s).lost += 1;
        }
    }
}

/// The live entry of a request, if any (free entries are kept for reuse, see [`Inflight::is_live`]).
#[inline(always)]
fn live(rq: u64) -> Option<&'static mut Inflight> {
    let p = INFLIGHT.get_ptr_mut(&rq)?;
    let e = unsafe { &mut *p };
    if e.is_live() {
        Some(e)
    } else {
        None
    }
}

/// Marks an entry free (kept in the map for the next request on the same struct).
#[inline(always)]
fn free(e: &mut Inflight) {
    zero(&mut e.enter_ns);
    zero(&mut e.dispatch_ns);
}

/// block_io_start(rq): a bio became a request (block/blk-mq.c: blk_account_io_start).
#[inline(always)]
fn on_io_start(rq: u64) {
    let l = layout();
    enter(rq, unsafe { bpf_ktime_get_ns() }, 0, true, &l);
}

/// block_rq_insert(rq): used as "enter" only on kernels without block_io_start.
#[inline(always)]
fn on_insert(rq: u64) {
    let l = layout();
    if l.enter_fallback != 0 {
        enter(rq, unsafe { bpf_ktime_get_ns() }, 0, false, &l);
    }
}

/// block_rq_issue(rq): dispatch to the driver (blk_mq_start_request).
#[inline(always)]
fn on_issue(rq: u64) {
    let now = unsafe { bpf_ktime_get_ns() };
    let l = layout();
    if let Some(e) = live(rq) {
        if e.dispatch_ns == 0 {
            e.dispatch_ns = now;
            dispatched(e.dev, e.class, e.enter_ns, now);
            return;
        }
        if e.requeued != 0 {
            // Re-dispatch after a requeue: the first dispatch stays (device time includes the
            // requeue), the requeue was counted.
            e.requeued = 0;
            return;
        }
        // Dispatched twice without requeue or completion: the struct was reused after a
        // completion we missed (typically the shared flush request). Count that request as
        // completed with its latency lost; never let the stale timestamps produce a latency.
        count(Counter::StaleEntries);
        lost(e.dev, e.class);
        free(e);
    }
    let flags: u32 = read(rq, l.rq_cmd_flags);
    if flags & l.op_mask == l.op_flush {
        // The shared per-hctx flush request (block/blk-flush.c): never "enters"; device stage only.
        let Some(e) = slot(rq, true) else { return };
        let dev = rq_dev(rq, &l);
        unsafe { fill(e, 0, now, dev, Op::Flush as u16, 0, 0) };
        dispatched(dev, Op::Flush as u16, 0, now);
    } else if l.enter_fallback != 0 {
        // Directly issued without insert on a kernel without block_io_start: queue time is 0.
        enter(rq, now, now, false, &l);
    }
}

/// The device's shared state in its slot, claimed on first use; None if another disk owns
/// the slot (that disk then has no stall detection; the daemon reports the collision).
#[inline(always)]
fn devstate(dev: u32) -> Option<*mut DevState> {
    let p = DEVSTATE.get_ptr_mut(dev_slot(dev))?;
    let owner = unsafe { (*p).dev };
    if owner == dev {
        return Some(p);
    }
    if owner == 0 {
        unsafe { (*p).dev = dev };
        return Some(p);
    }
    None
}

#[inline(always)]
fn stall_ns() -> u64 {
    SETTINGS.get(0).map(|s| s.stall_ns).unwrap_or(0)
}

/// Emits a stall episode if the device went longer than the threshold without this event.
#[inline(always)]
fn maybe_stall(dev: u32, kind: u32, class: u16, start_ns: u64, now: u64) {
    let t = stall_ns();
    if t != 0 && start_ns != 0 && now > start_ns && now - start_ns > t {
        let ev = StallEvent { kind: EVENT_STALL, dev, stall: kind, class: class as u32, start_ns, end_ns: now };
        if EVENTS.output::<StallEvent>(&ev, 0).is_err() {
            count(Counter::EventsDropped);
        }
    }
}

/// A dispatch on `dev` of a request that entered at `enter_ns` (0: the flush request). Ends a
/// dispatch stall: requests were queued and none was dispatched since max(last dispatch, entry).
#[inline(always)]
fn dispatched(dev: u32, class: u16, enter_ns: u64, now: u64) {
    let Some(ds) = devstate(dev) else { return };
    let ds = unsafe { &mut *ds };
    if enter_ns != 0 {
        maybe_stall(dev, STALL_DISPATCH, class, ds.last_dispatch_ns.max(enter_ns), now);
    }
    ds.last_dispatch_ns = now;
}

/// Bios in a request minus one: bio merges into it (block/blk-merge.c), walked only for slow
/// requests, capped at 63.
#[inline(always)]
fn bio_merges(rq: u64, l: &KernelLayout) -> u32 {
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

/// block_rq_requeue(rq): sent back to be dispatched again.
#[inline(always)]
fn on_requeue(rq: u64) {
    if let Some(e) = live(rq) {
        e.requeued = 1;
        e.requeues = e.requeues.saturating_add(1);
    }
}

/// block_rq_merge(rq): `rq` is merged into another request and freed; it is not an I/O of its own.
#[inline(always)]
fn on_rq_merge(rq: u64) {
    let (dev, class) = match live(rq) {
        Some(e) => {
            let dc = (e.dev, e.class);
            free(e);
            dc
        }
        None => {
            let l = layout();
            (rq_dev(rq, &l), classify(read(rq, l.rq_cmd_flags), &l))
        }
    };
    if let Some(s) = stats(dev, class) {
        unsafe { (*s).merges += 1 };
    }
}

/// block_bio_backmerge / block_bio_frontmerge(bio): a bio merged into an existing request.
#[inline(always)]
fn on_bio_merge(bio: u64) {
    let l = layout();
    let dev = bio_dev(bio, &l);
    if let Some(s) = stats(dev, classify(read(bio, l.bio_opf), &l)) {
        unsafe { (*s).merges += 1 };
    }
}

/// block_rq_complete(rq, error, nr_bytes): a (partial) completion (blk_update_request).
#[inline(always)]
fn on_complete(rq: u64, error: u64, nr_bytes: u64) {
    let now = unsafe { bpf_ktime_get_ns() };
    let l = layout();
    let data_len: u32 = read(rq, l.rq_data_len);
    // The flush request completes once (it carries RQF_FLUSH_SEQ itself). A data request is
    // final unless more bytes remain, or it is inside a flush sequence (its data part completes
    // once with RQF_FLUSH_SEQ set, then again with 0 bytes when the post-flush is done).
    let data_final = !in_flush_seq(rq, &l) && nr_bytes >= data_len as u64;
    let e = match live(rq) {
        Some(e) => e,
        None => match never_dispatched(rq, now, data_final, &l) {
            Some(e) => e,
            None => {
                let flags: u32 = read(rq, l.rq_cmd_flags);
                if data_final || flags & l.op_mask == l.op_flush {
                    count(Counter::UntrackedCompletions);
                    if error != 0 {
                        error_seen(rq_dev(rq, &l), 0, error);
                    }
                }
                return;
            }
        },
    };
    e.bytes += nr_bytes;
    if !(data_final || e.enter_ns == 0) {
        return;
    }
    let copy = *e;
    free(e);
    let e = copy;
    if error != 0 {
        error_seen(e.dev, e.class, error);
    }
    let Some(s) = stats(e.dev, e.class) else { return };
    let s = unsafe { &mut *s };
    s.requests += 1;
    s.bytes += e.bytes;
    s.requeues += e.requeues as u64;
    if (e.dispatch_ns != 0 && (e.dispatch_ns < e.enter_ns || now < e.dispatch_ns)) || now < e.enter_ns {
        count(Counter::ClockAnomalies);
        return;
    }
    s.last_complete_ns = now;
    if e.dispatch_ns != 0 {
        if let Some(ds) = devstate(e.dev) {
            let ds = unsafe { &mut *ds };
            // Device stall: requests at the device and none completed since max(last completion, this dispatch).
            maybe_stall(e.dev, STALL_DEVICE, e.class, ds.last_complete_ns.max(e.dispatch_ns), now);
            ds.last_complete_ns = now;
        }
    }
    let total;
    if e.enter_ns == 0 {
        // Internal flush request: no entry point, total = device.
        total = now - e.dispatch_ns;
        observe(&mut s.stages[Stage::Device as usize], total);
    } else if e.dispatch_ns == 0 {
        // Never dispatched itself (a data-less PREFLUSH write, completed by the flush machinery):
        // all of it was waiting, so queue = total.
        total = now - e.enter_ns;
        observe(&mut s.stages[Stage::Queue as usize], total);
    } else {
        total = now - e.enter_ns;
        observe(&mut s.stages[Stage::Queue as usize], e.dispatch_ns - e.enter_ns);
        observe(&mut s.stages[Stage::Device as usize], now - e.dispatch_ns);
    }
    observe(&mut s.stages[Stage::Total as usize], total);
    // Slow? Compare each stage with its threshold for this op.
    let Some(set) = SETTINGS.get(0) else { return };
    let mut op = (e.class & OP_MASK) as usize;
    if op >= 6 {
        op = 5;
    }
    let t = &set.slow_ns[op];
    let queue = if e.enter_ns != 0 && e.dispatch_ns != 0 { e.dispatch_ns - e.enter_ns } else if e.dispatch_ns == 0 { total } else { 0 };
    let device = if e.dispatch_ns != 0 { now - e.dispatch_ns } else { 0 };
    let over = |v: u64, th: u64| th != 0 && v > th;
    if over(queue, t[Stage::Queue as usize]) || over(device, t[Stage::Device as usize]) || over(total, t[Stage::Total as usize]) {
        s.slow += 1;
        let ev = SlowEvent { kind: EVENT_SLOW, dev: e.dev, req: e, complete_ns: now, merges: bio_merges(rq, &l), status: error as u32 };
        if EVENTS.output::<SlowEvent>(&ev, 0).is_err() {
            count(Counter::EventsDropped);
        }
    }
}

/// On kernels without `block_io_start`, a request that is neither inserted nor dispatched (a
/// data-less PREFLUSH write, completed by the flush machinery) is first seen at its final
/// completion: tracked from its `start_time_ns` if that is after the programs were loaded.
#[inline(always)]
fn never_dispatched(rq: u64, now: u64, data_final: bool, l: &KernelLayout) -> Option<&'static mut Inflight> {
    if l.enter_fallback == 0 || !data_final {
        return None;
    }
    let start: u64 = read(rq, l.rq_start_time_ns);
    let flags: u32 = read(rq, l.rq_cmd_flags);
    if start == 0 || start < l.loaded_ns || flags & l.op_mask == l.op_flush {
        return None;
    }
    enter(rq, now, 0, true, l);
    live(rq)
}

#[inline(always)]
fn error_seen(dev: u32, class: u16, status: u64) {
    let key = ErrorKey { dev, class, status: status as u8, _pad: 0 };
    match ERRORS.get_ptr_mut(&key) {
        Some(p) => unsafe { *p += 1 },
        None => {
            let _ = ERRORS.insert(&key, &1, BPF_NOEXIST as u64);
        }
    }
}

/// Declares the four entry points of a handler: tp_btf and raw_tp, for argument layouts with
/// the request (or bio) at index A (current kernels) and B (older kernels).
macro_rules! programs {
    ($tp:literal, $handler:ident, [$btf_a:ident, $raw_a:ident, $btf_b:ident, $raw_b:ident], $a:literal, $b:literal, |$ctx:ident, $i:ident| $call:expr) => {
        #[btf_tracepoint(function = $tp)]
        pub fn $btf_a(c: BtfTracePointContext) -> i32 {
            let ($ctx, $i) = (&c, $a);
            $call;
            0
        }
        #[raw_tracepoint(tracepoint = $tp)]
        pub fn $raw_a(c: RawTracePointContext) -> i32 {
            let ($ctx, $i) = (&c, $a);
            $call;
            0
        }
        #[btf_tracepoint(function = $tp)]
        pub fn $btf_b(c: BtfTracePointContext) -> i32 {
            let ($ctx, $i) = (&c, $b);
            $call;
            0
        }
        #[raw_tracepoint(tracepoint = $tp)]
        pub fn $raw_b(c: RawTracePointContext) -> i32 {
            let ($ctx, $i) = (&c, $b);
            $call;
            0
        }
    };
}

programs!("block_io_start", on_io_start, [io_start, io_start_raw, io_start_q, io_start_q_raw], 0, 1,
    |c, i| on_io_start(arg(c, i)));
programs!("block_rq_insert", on_insert, [rq_insert, rq_insert_raw, rq_insert_q, rq_insert_q_raw], 0, 1,
    |c, i| on_insert(arg(c, i)));
programs!("block_rq_issue", on_issue, [rq_issue, rq_issue_raw, rq_issue_q, rq_issue_q_raw], 0, 1,
    |c, i| on_issue(arg(c, i)));
programs!("block_rq_requeue", on_requeue, [rq_requeue, rq_requeue_raw, rq_requeue_q, rq_requeue_q_raw], 0, 1,
    |c, i| on_requeue(arg(c, i)));
programs!("block_rq_merge", on_rq_merge, [rq_merge, rq_merge_raw, rq_merge_q, rq_merge_q_raw], 0, 1,
    |c, i| on_rq_merge(arg(c, i)));
programs!("block_rq_complete", on_complete, [rq_complete, rq_complete_raw, rq_complete_q, rq_complete_q_raw], 0, 1,
    |c, i| on_complete(arg(c, i), arg(c, i + 1) as u32 as u64, arg(c, i + 2) as u32 as u64));
programs!("block_bio_backmerge", on_bio_merge, [bio_backmerge, bio_backmerge_raw, bio_backmerge_q, bio_backmerge_q_raw], 0, 2,
    |c, i| on_bio_merge(arg(c, i)));
programs!("block_bio_frontmerge", on_bio_merge, [bio_frontmerge, bio_frontmerge_raw, bio_frontmerge_q, bio_frontmerge_q_raw], 0, 2,
    |c, i| on_bio_merge(arg(c, i)));

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
