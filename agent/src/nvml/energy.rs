//! When to read a GPU's energy counter (`nvmlDeviceGetTotalEnergyConsumption`). The collector
//! charges each sample the counter's rise since the sample before, where both have it, and
//! power × interval where not (docs/cost.md, "Energy"). Where a read is cheap — a few µs on
//! older drivers and the fake NVML — every sample reads it. Where it is not — 3 to 4.6 ms of CPU
//! on an H200 with driver 580, 1,000 times a power reading (docs/gpu-checks) — a sparse counter
//! would buy the collector nothing, and power × interval is as good: NVML's power reading is a
//! one-second average from Ampere on (`nvmlDeviceGetPowerUsage`'s documentation). A counter
//! is costly after [`SLOW_READS`] slow reads in a row (one stalled read on a busy machine is
//! not a costly driver), and is then read once every [`COSTLY_EVERY_MS`], which also looks at
//! its cost again. A GPU without a power reading reads the counter every sample, whatever it
//! costs: it is the only source.

use std::time::Duration;

use model::UnixMillis;

/// The most one read may cost (wall time) for the counter to be read every sample.
pub(super) const CHEAP: Duration = Duration::from_micros(100);

/// How often a costly counter is read.
pub(super) const COSTLY_EVERY_MS: i64 = 600_000;

/// Slow reads in a row that make a counter costly.
pub(super) const SLOW_READS: u32 = 3;

/// One GPU's energy-counter reads: when it was last read, and how many reads in a row, up to
/// then, were slow.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct EnergyClock {
    last: Option<UnixMillis>,
    slow: u32,
}

impl EnergyClock {
    /// Whether the sample at `ts` reads the counter; `has_power`: the sample has a power
    /// reading to fall back on.
    pub(super) fn due(&self, ts: UnixMillis, has_power: bool) -> bool {
        match self.last {
            Some(at) if has_power && self.slow >= SLOW_READS => {
                ts < at || ts - at >= COSTLY_EVERY_MS
            }
            _ => true,
        }
    }

    /// Notes a read at `ts` that took `took`.
    pub(super) fn read(&mut self, ts: UnixMillis, took: Duration) {
        self.last = Some(ts);
        self.slow = if took > CHEAP { self.slow + 1 } else { 0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cheap_counter_is_read_every_sample_and_a_costly_one_every_ten_minutes() {
        let mut c = EnergyClock::default();
        assert!(c.due(0, true));
        c.read(0, Duration::from_micros(5));
        assert!(c.due(1_000, true));
        // A stalled read or two is not a costly driver.
        c.read(1_000, Duration::from_millis(4));
        c.read(1_000, Duration::from_millis(4));
        assert!(c.due(1_000, true));
        c.read(1_000, Duration::from_micros(5));
        for _ in 0..SLOW_READS {
            assert!(c.due(1_000, true));
            c.read(1_000, Duration::from_millis(4));
        }
        assert!(!c.due(2_000, true));
        assert!(!c.due(1_000 + COSTLY_EVERY_MS - 1, true));
        assert!(c.due(1_000 + COSTLY_EVERY_MS, true));
        // A clock gone back, or no power reading to fall back on: read.
        assert!(c.due(0, true));
        assert!(c.due(2_000, false));
        // Cheap again at the next look: every sample again.
        c.read(1_000 + COSTLY_EVERY_MS, Duration::from_micros(20));
        assert!(c.due(2_000 + COSTLY_EVERY_MS, true));
    }
}
