//! When to sample. Time is cut into slots of one interval on the wall clock (slot `k` starts
//! at `k × interval` ms since the epoch, so every node's samples line up), and the agent takes
//! exactly one sample per slot:
//! - a wake-up before its slot has started (the sleep ran on another clock than the one the
//!   slots are cut from) waits for the slot instead of being dropped;
//! - a late wake-up samples the slot it is in, and says it was late;
//! - a slot that passed with no wake-up at all (a cycle that took longer than an interval, a
//!   suspended process, a wall clock that jumped forward) is counted as missed, never silent;
//! - a slot is never sampled twice, across restarts too (the last sampled slot is kept in the
//!   state directory, see `shipper::AgentState`).
//!
//! Both the slot boundaries and the sleeps are computed from one [`Clock`], which tests replace
//! to pin the wake-up phase anywhere (e.g. 3 ms before each boundary).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The wall clock the slots are cut from, and a way to sleep.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Sleeps for about `d`; may end a little early or late relative to [`Clock::now_ms`].
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// The system's wall clock and tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::shipper::now_ms()
    }

    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// What to do on waking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Sample the slot starting at `ts`.
    Sample(Slot),
    /// The next slot has not started: sleep this long and look again.
    Wait(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The slot's start, the sample's timestamp.
    pub ts: i64,
    /// How far into its slot the sample is taken (ms).
    pub late_ms: i64,
    /// Slots between the previous sample of this run and this one that got no sample.
    pub missed: u64,
}

impl Slot {
    /// Late: taken more than a quarter of an interval after the slot began.
    pub fn is_late(&self, interval_ms: i64) -> bool {
        self.late_ms * 4 > interval_ms
    }
}

/// How long after a slot's start the agent aims to wake, so that a wake-up a little early
/// on the wall clock still lands inside the slot most of the time.
const AIM_AFTER_START: Duration = Duration::from_millis(2);

/// The sampling schedule of one run.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval_ms: i64,
    /// The newest slot sampled, by this run or (at start) by an earlier one.
    last: Option<i64>,
    /// Whether `last` was sampled by this run (slots before a restart are not "missed").
    sampled_this_run: bool,
}

impl Schedule {
    /// `already_sampled`: the newest slot an earlier run sampled, never to be sampled again.
    pub fn new(interval_ms: u64, already_sampled: Option<i64>) -> Schedule {
        Schedule {
            interval_ms: interval_ms.max(1) as i64,
            last: already_sampled,
            sampled_this_run: false,
        }
    }

    pub fn interval_ms(&self) -> i64 {
        self.interval_ms
    }

    /// The start of the slot `now_ms` falls in.
    pub fn slot_of(&self, now_ms: i64) -> i64 {
        now_ms - now_ms.rem_euclid(self.interval_ms)
    }

    /// Decides what a wake-up at `now_ms` does.
    pub fn wake(&mut self, now_ms: i64) -> Wake {
        let slot = self.slot_of(now_ms);
        if let Some(last) = self.last
            && slot <= last
        {
            // Early, or the wall clock went back: wait for the slot after the last sampled,
            // looking again at least once an interval.
            let wait = (last + self.interval_ms - now_ms).clamp(0, self.interval_ms);
            return Wake::Wait(Duration::from_millis(wait as u64) + AIM_AFTER_START);
        }
        let missed = match self.last {
            Some(last) if self.sampled_this_run => ((slot - last) / self.interval_ms - 1) as u64,
            _ => 0,
        };
        self.last = Some(slot);
        self.sampled_this_run = true;
        Wake::Sample(Slot {
            ts: slot,
            late_ms: now_ms - slot,
            missed,
        })
    }

    /// How long to sleep, at `now_ms`, to wake just after the next slot starts.
    pub fn until_next(&self, now_ms: i64) -> Duration {
        let next = self.slot_of(now_ms) + self.interval_ms;
        Duration::from_millis((next - now_ms).max(0) as u64) + AIM_AFTER_START
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wakes `early_ms` before each slot boundary plus jitter in `0..=jitter_ms`, the phase the
    /// issue measured (.997 s), for `slots` slots; returns the timestamps sampled.
    fn run_pinned(early_ms: i64, jitter_ms: u64, slots: i64) -> (Vec<i64>, u64) {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut jitter = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % (jitter_ms + 1)) as i64
        };
        let start = 1_700_000_000_000i64;
        let mut now = start + 500;
        let mut s = Schedule::new(1000, None);
        let mut sampled = Vec::new();
        let mut missed = 0;
        while now < start + slots * 1000 {
            match s.wake(now) {
                Wake::Sample(slot) => {
                    sampled.push(slot.ts);
                    missed += slot.missed;
                    let d = s.until_next(now).as_millis() as i64;
                    now += d - early_ms + jitter();
                }
                // A short sleep to the boundary: no phase error at that scale, only jitter.
                Wake::Wait(d) => now += d.as_millis() as i64 + jitter(),
            }
        }
        (sampled, missed)
    }

    #[test]
    fn a_wake_phase_pinned_just_before_the_boundary_misses_no_slot() {
        // Ten minutes at 1 Hz, every wake-up between 3 ms early and 2 ms late.
        let (sampled, missed) = run_pinned(3, 5, 600);
        assert_eq!(missed, 0);
        assert_eq!(sampled.len(), 600);
        assert!(sampled.windows(2).all(|w| w[1] - w[0] == 1000));
    }

    /// The rule this schedule replaced: a monotonic 1-s tick, the timestamp read from the wall
    /// clock, and a tick in an already sampled second dropped. With the tick phase at .997 s and
    /// the same jitter it loses seconds — so the test above does exercise the failure.
    #[test]
    fn the_replaced_rule_loses_seconds_at_the_same_phase() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let start = 1_700_000_000_000i64;
        let (mut last, mut lost) = (0i64, 0);
        for k in 1..=600i64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let now = start + k * 1000 - 3 + (rng % 6) as i64;
            let ts = now - now.rem_euclid(1000);
            if ts <= last {
                lost += 1;
                continue;
            }
            if last > 0 {
                lost += (ts - last) / 1000 - 1;
            }
            last = ts;
        }
        assert!(lost > 0, "the old rule lost {lost} seconds");
    }

    #[test]
    fn late_cycles_sample_their_own_slot_and_count_the_missed_ones() {
        let mut s = Schedule::new(1000, None);
        assert_eq!(
            s.wake(10_000),
            Wake::Sample(Slot {
                ts: 10_000,
                late_ms: 0,
                missed: 0
            })
        );
        // The cycle took 2.4 s: slot 11 got no sample; slot 12 is sampled late.
        let Wake::Sample(slot) = s.wake(12_400) else {
            panic!("a late wake samples")
        };
        assert_eq!((slot.ts, slot.missed), (12_000, 1));
        assert!(slot.is_late(1000));
        // A wake-up a millisecond early waits for its slot.
        assert_eq!(s.wake(12_999), Wake::Wait(Duration::from_millis(3)));
    }

    #[test]
    fn a_restart_samples_the_slot_it_starts_in_unless_it_was_sampled() {
        let mut s = Schedule::new(1000, Some(41_000));
        assert!(
            matches!(s.wake(41_700), Wake::Wait(_)),
            "sampled before the restart"
        );
        assert_eq!(
            s.wake(42_100),
            Wake::Sample(Slot {
                ts: 42_000,
                late_ms: 100,
                missed: 0
            })
        );
        // Slots while the agent was stopped are not "missed" by this run.
        let mut s = Schedule::new(1000, Some(10_000));
        let Wake::Sample(slot) = s.wake(42_100) else {
            panic!()
        };
        assert_eq!((slot.ts, slot.missed), (42_000, 0));
    }

    #[test]
    fn a_wall_clock_step_back_never_resamples_and_keeps_looking() {
        let mut s = Schedule::new(1000, None);
        assert!(matches!(s.wake(100_000), Wake::Sample(_)));
        // The clock went back an hour: wait at most an interval at a time.
        let Wake::Wait(d) = s.wake(100_000 - 3_600_000) else {
            panic!()
        };
        assert!(d <= Duration::from_millis(1002));
    }
}
