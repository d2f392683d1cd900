//! The kernel's `EVENTS` ring-buffer records, kept in a bounded in-memory history: what `/stalls`
//! reports as slow requests and ended episodes, and what the stall counters of `/metrics` sum.

use std::collections::{BTreeMap, VecDeque};

use observer_common::maps::{SlowEvent, StallEvent};

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
        }
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
