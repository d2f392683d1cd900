//! Userspace handles on the programs' maps, taken out of the loaded [`Ebpf`] object.

use std::sync::Mutex;

use aya::{
    maps::{
        Array, HashMap, IterableMap, Map, MapData, MapError, PerCpuArray, PerCpuHashMap, RingBuf,
    },
    Ebpf, Pod,
};
use observer_common::maps::{
    self as m, BioQueued, CgroupLatency, ClassKey, ClassStats, DevState, ErrorKey, Inflight,
    LogRanges, MissedMerge, OwnerKey, OwnerStats, Settings, Slot, Upper,
};

use super::{
    batch::{InflightMaps, SlotView},
    devslots::DevSlots,
    loader::{load_err, ProbeError},
};

/// Every map the daemon reads or writes, owned (so the [`Ebpf`] object only keeps the
/// programs attached).
pub struct KernelMaps {
    /// `INFLIGHT_SLOTS` and `INFLIGHT`: request pointer → state (read side, for scrapes).
    pub inflight: InflightMaps,
    /// Second handles on both for the [`crate::collect::reaper`], the only userspace writer.
    pub inflight_rw: Mutex<InflightMaps>,
    /// `CLASS_STATS`: (dev, class) → per-CPU stats.
    pub class_stats: PerCpuHashMap<MapData, ClassKey, ClassStats>,
    /// `ERRORS`: (dev, class, status) → per-CPU count.
    pub errors: PerCpuHashMap<MapData, ErrorKey, u64>,
    /// `COUNTERS`: [`observer_common::maps::Counter`] → per-CPU count.
    pub counters: PerCpuArray<MapData, u64>,
    /// `SETTINGS`: thresholds, writable at runtime.
    pub settings: Mutex<Array<MapData, Settings>>,
    /// `DEV_INDEX`, `DEVSTATE` (per-device last completion / dispatch) and `LOG_RANGES` (disk →
    /// filesystem log ranges): the per-device slots, written only through [`DevSlots`].
    pub dev_slots: Mutex<DevSlots>,
    /// `EVENTS` ring buffer, taken by the event reader at startup.
    pub events: Mutex<Option<RingBuf<MapData>>>,
    /// `BIO_QUEUED`: bio address → a bio that entered and has no request yet, for bios whose
    /// `BIO_SLOTS` slot another bio held (read only; the programs delete entries).
    pub bio_queued: HashMap<MapData, u64, BioQueued>,
    /// `BIO_SLOTS`: bio address → the same, direct-mapped, leased (read only, mapped).
    pub bio_slots: SlotView<BioQueued>,
    /// `UPPER`: an entry's `INFLIGHT` key → the upper disk's I/O it serves (read only).
    pub upper: HashMap<MapData, u64, Upper>,
    /// Second handles on `CLASS_STATS`, `ERRORS` and `OWNER_STATS` that delete a disk's
    /// entries (collect/gone.rs: disks gone for `[devices] forget_after`).
    pub stats_rw: Mutex<StatsWriter>,
    /// `MERGE_PAIRS`: each CPU's ring of its latest missed adjacent merges (read only).
    pub merge_pairs: PerCpuArray<MapData, MissedMerge>,
    /// `MERGE_CURSOR`: pairs each CPU has written to its ring, ever (read only).
    pub merge_cursor: PerCpuArray<MapData, u64>,
    /// `OWNER_STATS`: (dev, class, owner cgroup id) → per-CPU requests and bytes (read only;
    /// written by the programs while `[cgroups] label` is on).
    pub owner_stats: PerCpuHashMap<MapData, OwnerKey, OwnerStats>,
    /// `CGROUP_LATENCY`: (dev, op, owner cgroup id) → per-CPU stage histograms (read only;
    /// written by the programs while `[cgroups] latency` is on).
    pub cgroup_latency: PerCpuHashMap<MapData, OwnerKey, CgroupLatency>,
    /// Capacity of `INFLIGHT` (entries).
    pub inflight_capacity: u32,
    /// Capacity of `CLASS_STATS` (entries).
    pub class_stats_capacity: u32,
    /// Capacity of `OWNER_STATS` (entries, as loaded: the kernel's `max_entries`; 0 if the
    /// kernel did not say).
    pub owner_stats_capacity: u32,
    /// Capacity of `CGROUP_LATENCY` (entries, as loaded: 1 while `[cgroups] latency` was off
    /// at load; 0 if the kernel did not say).
    pub cgroup_latency_capacity: u32,
}

/// Writable second handles (dup'ed fds) on the per-device stats maps: `CLASS_STATS`, `ERRORS`,
/// `OWNER_STATS` and `CGROUP_LATENCY`, all keyed by device number (`MKDEV`) first.
pub struct StatsWriter {
    class_stats: PerCpuHashMap<MapData, ClassKey, ClassStats>,
    errors: PerCpuHashMap<MapData, ErrorKey, u64>,
    owner_stats: PerCpuHashMap<MapData, OwnerKey, OwnerStats>,
    cgroup_latency: PerCpuHashMap<MapData, OwnerKey, CgroupLatency>,
}

impl StatsWriter {
    /// The device numbers with entries in `CLASS_STATS` or `ERRORS`, sorted, each once.
    pub fn devices(&self) -> Vec<u32> {
        let mut devs: Vec<u32> = self.class_stats.keys().flatten().map(|k| k.dev).collect();
        devs.extend(self.errors.keys().flatten().map(|k| k.dev));
        devs.sort_unstable();
        devs.dedup();
        devs
    }

    /// Deletes every entry of disk `dev` from the four maps; returns how many (dev, class)
    /// entries `CLASS_STATS` had. An entry the programs recreate meanwhile stays.
    pub fn forget(&mut self, dev: u32) -> usize {
        let stats = forget_dev(&mut self.class_stats, dev, |k| k.dev);
        forget_dev(&mut self.errors, dev, |k| k.dev);
        forget_dev(&mut self.owner_stats, dev, |k| k.dev);
        forget_dev(&mut self.cgroup_latency, dev, |k| k.dev);
        stats
    }
}

impl StatsWriter {
    /// Deletes the `CGROUP_LATENCY` entries `keys` (of cgroups that no longer exist); a failed
    /// delete is ignored.
    pub fn forget_cgroup_latency(&mut self, keys: &[OwnerKey]) {
        for k in keys {
            let _ = self.cgroup_latency.remove(k);
        }
    }
}

/// Deletes the entries of `map` whose key's device (`dev_of`, as `MKDEV`) is `dev`: the keys
/// are listed first (those that fail to read are passed over), then each is deleted (a failed
/// delete is ignored). Returns how many keys were listed.
fn forget_dev<K: Pod, V: Pod>(
    map: &mut PerCpuHashMap<MapData, K, V>,
    dev: u32,
    dev_of: impl Fn(&K) -> u32,
) -> usize {
    let keys: Vec<K> = map.keys().flatten().filter(|k| dev_of(k) == dev).collect();
    for k in &keys {
        let _ = map.remove(k);
    }
    keys.len()
}

impl KernelMaps {
    /// Takes every map out of a loaded object. The capacities are the ones the object was
    /// loaded with. Errors name the map that is missing or of the wrong type.
    pub fn take(
        ebpf: &mut Ebpf,
        inflight_capacity: u32,
        class_stats_capacity: u32,
    ) -> Result<KernelMaps, ProbeError> {
        let mut take = |name: &str| {
            ebpf.take_map(name).ok_or_else(|| {
                load_err(format!("map {name}"))(anyhow::anyhow!("missing from object"))
            })
        };
        let conv =
            |name: &'static str| move |e: MapError| load_err(format!("map {name}"))(e.into());
        let inflight: HashMap<MapData, u64, Inflight> =
            HashMap::try_from(take(m::INFLIGHT)?).map_err(conv(m::INFLIGHT))?;
        // dup(2) a map fd for a second writer: BPF_MAP_GET_FD_BY_ID would need CAP_SYS_ADMIN.
        let dup = |map: &MapData, name: &'static str| {
            let fd = std::os::fd::AsFd::as_fd(map.fd())
                .try_clone_to_owned()
                .map_err(|e| load_err(format!("map {name} (dup)"))(e.into()))?;
            MapData::from_fd(fd).map_err(conv(name))
        };
        let inflight_rw = dup(IterableMap::map(&inflight), m::INFLIGHT)?;
        let inflight_slots: Array<MapData, Slot<Inflight>> =
            Array::try_from(take(m::INFLIGHT_SLOTS)?).map_err(conv(m::INFLIGHT_SLOTS))?;
        let inflight_slots_rw = dup(IterableMap::map(&inflight_slots), m::INFLIGHT_SLOTS)?;
        let view_err = |name: &'static str| {
            move |e: std::io::Error| load_err(format!("map {name} (view)"))(e.into())
        };
        let inflight_view = std::sync::Arc::new(
            SlotView::new(IterableMap::map(&inflight_slots))
                .map_err(view_err(m::INFLIGHT_SLOTS))?,
        );
        let bio_slots: Array<MapData, Slot<BioQueued>> =
            Array::try_from(take(m::BIO_SLOTS)?).map_err(conv(m::BIO_SLOTS))?;
        let bio_view =
            SlotView::new(IterableMap::map(&bio_slots)).map_err(view_err(m::BIO_SLOTS))?;
        let class_stats: PerCpuHashMap<MapData, ClassKey, ClassStats> =
            PerCpuHashMap::try_from(take(m::CLASS_STATS)?).map_err(conv(m::CLASS_STATS))?;
        let errors: PerCpuHashMap<MapData, ErrorKey, u64> =
            PerCpuHashMap::try_from(take(m::ERRORS)?).map_err(conv(m::ERRORS))?;
        let owner_stats: PerCpuHashMap<MapData, OwnerKey, OwnerStats> =
            PerCpuHashMap::try_from(take(m::OWNER_STATS)?).map_err(conv(m::OWNER_STATS))?;
        let cgroup_latency: PerCpuHashMap<MapData, OwnerKey, CgroupLatency> =
            PerCpuHashMap::try_from(take(m::CGROUP_LATENCY)?).map_err(conv(m::CGROUP_LATENCY))?;
        // BPF_OBJ_GET_INFO_BY_FD's max_entries: what the object was loaded with.
        let capacity = |map: &MapData| map.info().map_or(0, |i| i.max_entries());
        let owner_stats_capacity = capacity(IterableMap::map(&owner_stats));
        let cgroup_latency_capacity = capacity(IterableMap::map(&cgroup_latency));
        let stats_rw = StatsWriter {
            class_stats: PerCpuHashMap::try_from(Map::PerCpuHashMap(dup(
                IterableMap::map(&class_stats),
                m::CLASS_STATS,
            )?))
            .map_err(conv(m::CLASS_STATS))?,
            errors: PerCpuHashMap::try_from(Map::PerCpuHashMap(dup(
                IterableMap::map(&errors),
                m::ERRORS,
            )?))
            .map_err(conv(m::ERRORS))?,
            owner_stats: PerCpuHashMap::try_from(Map::PerCpuHashMap(dup(
                IterableMap::map(&owner_stats),
                m::OWNER_STATS,
            )?))
            .map_err(conv(m::OWNER_STATS))?,
            cgroup_latency: PerCpuHashMap::try_from(Map::PerCpuHashMap(dup(
                IterableMap::map(&cgroup_latency),
                m::CGROUP_LATENCY,
            )?))
            .map_err(conv(m::CGROUP_LATENCY))?,
        };
        Ok(KernelMaps {
            inflight: InflightMaps {
                hash: inflight,
                slots: inflight_slots,
                view: inflight_view.clone(),
            },
            inflight_rw: Mutex::new(InflightMaps {
                hash: HashMap::try_from(Map::HashMap(inflight_rw)).map_err(conv(m::INFLIGHT))?,
                slots: Array::try_from(Map::Array(inflight_slots_rw))
                    .map_err(conv(m::INFLIGHT_SLOTS))?,
                view: inflight_view,
            }),
            class_stats,
            errors,
            stats_rw: Mutex::new(stats_rw),
            counters: PerCpuArray::try_from(take(m::COUNTERS)?).map_err(conv(m::COUNTERS))?,
            settings: Mutex::new(Array::try_from(take(m::SETTINGS)?).map_err(conv(m::SETTINGS))?),
            dev_slots: Mutex::new(DevSlots::new(
                HashMap::try_from(take(m::DEV_INDEX)?).map_err(conv(m::DEV_INDEX))?,
                Array::<MapData, DevState>::try_from(take(m::DEVSTATE)?)
                    .map_err(conv(m::DEVSTATE))?,
                Array::<MapData, LogRanges>::try_from(take(m::LOG_RANGES)?)
                    .map_err(conv(m::LOG_RANGES))?,
            )),
            events: Mutex::new(Some(
                RingBuf::try_from(take(m::EVENTS)?).map_err(conv(m::EVENTS))?,
            )),
            bio_queued: HashMap::try_from(take(m::BIO_QUEUED)?).map_err(conv(m::BIO_QUEUED))?,
            bio_slots: bio_view,
            upper: HashMap::try_from(take(m::UPPER)?).map_err(conv(m::UPPER))?,
            merge_pairs: PerCpuArray::try_from(take(m::MERGE_PAIRS)?)
                .map_err(conv(m::MERGE_PAIRS))?,
            merge_cursor: PerCpuArray::try_from(take(m::MERGE_CURSOR)?)
                .map_err(conv(m::MERGE_CURSOR))?,
            owner_stats,
            cgroup_latency,
            inflight_capacity,
            class_stats_capacity,
            owner_stats_capacity,
            cgroup_latency_capacity,
        })
    }

    /// The device's `DEVSTATE` entry, if it has a per-device slot.
    pub fn devstate_of(&self, dev: u32) -> Option<DevState> {
        self.dev_slots
            .lock()
            .expect("dev slots lock")
            .devstate_of(dev)
    }

    /// Whether the programs count requests per owner cgroup now (`SETTINGS`' `owner_stats`).
    pub fn owner_stats_on(&self) -> bool {
        self.setting(|s| s.owner_stats)
    }

    /// Whether the programs add latencies per owner cgroup now (`SETTINGS`' `cgroup_latency`).
    pub fn cgroup_latency_on(&self) -> bool {
        self.setting(|s| s.cgroup_latency)
    }

    /// Whether the `SETTINGS` field `get` is non-zero (false if unreadable).
    fn setting(&self, get: fn(&Settings) -> u64) -> bool {
        self.settings
            .lock()
            .expect("settings lock")
            .get(&0, 0)
            .is_ok_and(|s| get(&s) != 0)
    }

    /// Writes new thresholds for the programs (takes effect at the next event).
    pub fn set_settings(&self, s: Settings) -> Result<(), MapError> {
        self.settings.lock().expect("settings lock").set(0, s, 0)
    }
}
