//! The kernel's `EVENTS` ring-buffer records, kept in a bounded in-memory history: what `/stalls`
//! reports as slow requests and ended episodes, what the stall counters of `/metrics` sum, and
//! the latency histograms' exemplars ([`super::exemplars`]).
//!
//! **Request ids**: each slow request gets an id when its record arrives,
//! `<run>-<seq>` ([`RequestId`]): `run` is the Unix time (seconds) the history was made (the
//! daemon's start), `seq` counts the slow records received by this daemon, from 1. So an id
//! names one request across restarts of the daemon (an id of another run is not resolved), and
//! `/stalls?id=` finds it while the history keeps it (the latest `history_requests`, 10,000 by
//! default).

use std::collections::{BTreeMap, VecDeque};

use observer_common::maps::{SlowEvent, StallEvent};

use super::exemplars::Exemplars;

/// A slow request's id: `<run>-<seq>` (see the module documentation), e.g. `1764865123-42`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestId {
    /// The daemon run: Unix time (s) its history was made.
    pub run: u64,
    /// The slow record's number in that run, from 1.
    pub seq: u64,
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.run, self.seq)
    }
}

impl std::str::FromStr for RequestId {
    type Err = ();

    /// `<digits>-<digits>` (each 1..=19 digits: any such number fits a u64; the pattern of
    /// docs/openapi.yaml); anything else is `Err`.
    fn from_str(s: &str) -> Result<RequestId, ()> {
        let (run, seq) = s.split_once('-').ok_or(())?;
        let num = |v: &str| -> Result<u64, ()> {
            if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            v.parse().map_err(|_| ())
        };
        Ok(RequestId {
            run: num(run)?,
            seq: num(seq)?,
        })
    }
}

/// Bounded history of the records the programs send through the `EVENTS` ring buffer: slow
/// requests ([`SlowEvent`]) and ended stall episodes ([`StallEvent`]), oldest first.
pub struct History {
    slow: VecDeque<SlowEvent>,
    episodes: VecDeque<StallEvent>,
    cap_slow: usize,
    cap_episodes: usize,
    /// Slow requests dropped from the history because it was full.
    pub slow_overflow: u64,
    /// Episodes dropped from the history because it was full.
    pub episode_overflow: u64,
    /// Slow-request records received from the ring buffer, ever.
    pub slow_received: u64,
    /// Stall-episode records received (each episode once), ever.
    pub episodes_received: u64,
    /// (device number, kind) → (episodes, seconds), all ever seen (not bounded by the history).
    pub episode_totals: BTreeMap<(u32, u32), (u64, f64)>,
    /// This daemon run's part of the request ids (Unix time in s when the history was made).
    pub run: u64,
    /// The latest slow request per (device, class, stage, exported bucket).
    pub exemplars: Exemplars,
}

impl History {
    /// An empty history keeping at most `cap_slow` requests and `cap_episodes` episodes.
    pub fn new(cap_slow: usize, cap_episodes: usize) -> History {
        History {
            slow: VecDeque::new(),
            episodes: VecDeque::new(),
            cap_slow,
            cap_episodes,
            slow_overflow: 0,
            episode_overflow: 0,
            slow_received: 0,
            episodes_received: 0,
            episode_totals: BTreeMap::new(),
            run: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            exemplars: Exemplars::default(),
        }
    }

    /// The id of the slow request at `index` of [`History::slow`] (ids are consecutive: the
    /// kept records are the latest `slow().len()` received).
    pub fn slow_id(&self, index: usize) -> RequestId {
        RequestId {
            run: self.run,
            seq: self.slow_received - self.slow.len() as u64 + 1 + index as u64,
        }
    }

    /// The index in [`History::slow`] of the request `id`, if this run's history still keeps it.
    pub fn slow_index(&self, id: RequestId) -> Option<usize> {
        let first = self.slow_received + 1 - self.slow.len() as u64;
        (id.run == self.run && id.seq >= first && id.seq <= self.slow_received)
            .then(|| (id.seq - first) as usize)
    }

    /// Adds one ring-buffer record; unknown or short records are ignored.
    pub fn ingest(&mut self, bytes: &[u8]) {
        let Some(kind) = bytes
            .get(..4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
        else {
            return;
        };
        match kind {
            observer_common::maps::EVENT_SLOW
                if bytes.len() >= std::mem::size_of::<SlowEvent>() =>
            {
                // SAFETY: length checked; SlowEvent is repr(C) plain data.
                let ev: SlowEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
                self.slow_received += 1;
                if self.slow.len() == self.cap_slow {
                    self.slow.pop_front();
                    self.slow_overflow += 1;
                }
                self.slow.push_back(ev);
                if !self.exemplars.wants_records() {
                    return;
                }
                // Its wall-clock time, fixed now: the exemplar's timestamp must be the same in
                // every scrape.
                let clock = crate::time::Clock::now();
                let unix_ms = clock
                    .wall(ev.complete_ns)
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                self.exemplars.record(self.slow_received, &ev, unix_ms);
            }
            observer_common::maps::EVENT_STALL
                if bytes.len() >= std::mem::size_of::<StallEvent>() =>
            {
                // SAFETY: as above.
                let ev: StallEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
                // Two CPUs may report the same episode: same device, kind and start.
                if self
                    .episodes
                    .iter()
                    .rev()
                    .take(16)
                    .any(|e| e.dev == ev.dev && e.stall == ev.stall && e.start_ns == ev.start_ns)
                {
                    return;
                }
                self.episodes_received += 1;
                let t = self.episode_totals.entry((ev.dev, ev.stall)).or_default();
                t.0 += 1;
                t.1 += (ev.end_ns - ev.start_ns) as f64 * 1e-9;
                if self.episodes.len() == self.cap_episodes {
                    self.episodes.pop_front();
                    self.episode_overflow += 1;
                }
                self.episodes.push_back(ev);
            }
            _ => {}
        }
    }

    /// Slow requests kept, oldest first.
    pub fn slow(&self) -> &VecDeque<SlowEvent> {
        &self.slow
    }

    /// Ended stall episodes kept, oldest first (each reported once, also when two CPUs saw it).
    pub fn episodes(&self) -> &VecDeque<StallEvent> {
        &self.episodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::maps::EVENT_SLOW;

    fn record(dev: u32) -> Vec<u8> {
        // SAFETY: SlowEvent is repr(C) plain data; all-zero is a valid value.
        let mut ev: SlowEvent = unsafe { std::mem::zeroed() };
        ev.kind = EVENT_SLOW;
        ev.dev = dev;
        ev.req.enter_ns = 1_000;
        ev.req.dispatch_ns = 2_000;
        ev.complete_ns = 300_000_000;
        // SAFETY: reading the bytes of a plain-data value.
        unsafe {
            std::slice::from_raw_parts(
                (&ev as *const SlowEvent).cast::<u8>(),
                std::mem::size_of::<SlowEvent>(),
            )
        }
        .to_vec()
    }

    #[test]
    fn ids_follow_the_kept_records() {
        let mut h = History::new(3, 3);
        for dev in 1..=5 {
            h.ingest(&record(dev));
        }
        // Kept: the records of devices 3, 4, 5 = seq 3, 4, 5.
        assert_eq!(h.slow().len(), 3);
        for (i, ev) in h.slow().iter().enumerate() {
            let id = h.slow_id(i);
            assert_eq!(id.seq, ev.dev as u64);
            assert_eq!(h.slow_index(id), Some(i));
            assert_eq!(id.to_string().parse::<RequestId>(), Ok(id));
        }
        let gone = RequestId { run: h.run, seq: 2 };
        assert_eq!(h.slow_index(gone), None);
        assert_eq!(h.slow_index(RequestId { run: h.run, seq: 6 }), None);
        assert_eq!(
            h.slow_index(RequestId {
                run: h.run + 1,
                seq: 4
            }),
            None
        );
        for bad in [
            "",
            "1",
            "1-",
            "-1",
            "a-1",
            "1-2-3",
            "1-99999999999999999999999",
            "1-18446744073709551615",
            " 1-2",
        ] {
            assert!(bad.parse::<RequestId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exemplars_name_the_request_ids() {
        let mut h = History::new(10, 10);
        h.exemplars
            .set_targets(&(0..observer_common::hist::NBUCKETS).collect::<Vec<_>>());
        h.ingest(&record(9));
        h.ingest(&record(9));
        // Both records land in the same three buckets: the second one is their exemplar.
        assert_eq!(h.exemplars.len(), 3);
        assert!(h.exemplars.iter().all(|(k, e)| k.0 == 9 && e.seq == 2));
        assert_eq!(h.slow_index(RequestId { run: h.run, seq: 2 }), Some(1));
    }
}
