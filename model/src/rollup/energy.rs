//! The energy of one sample and its split between the GPU's tenants (docs/cost.md, "Energy"):
//! the energy counter's rise where NVML keeps one, else the power reading × the interval; the
//! joules go to the tenants by their share of the GPU's use at that instant, by their allocated
//! share when nobody used it, and what neither claims (an unallocated GPU, the part of its use
//! no tenant was found for) stays with the pool.

/// The most one GPU is taken to draw, in watts: a counter rising faster than this over a gap
/// was reset or wrapped, and the sample falls back on its power reading (a GB200 module, two
/// GPUs and a CPU, is rated 2.7 kW).
pub const MAX_GPU_WATTS: f64 = 5_000.0;

/// One sample of a GPU, as far as its energy is concerned.
#[derive(Debug, Clone, Copy)]
pub struct EnergyReading {
    pub ts: i64,
    pub interval_ms: i32,
    /// NVML's total energy since the driver loaded, in joules.
    pub counter_j: Option<f64>,
    pub power_w: Option<f32>,
}

/// Joules the GPU drew over the interval `now` stands for: the counter's rise since the same
/// GPU's `previous` sample when both have one, the gap is at most two intervals and the rise
/// is plausible (scaled from the gap to the interval, so a lost sample's time is not charged
/// to the next); else the power reading × the interval; None when neither is there.
pub fn sample_energy(previous: Option<EnergyReading>, now: EnergyReading) -> Option<f64> {
    let secs = f64::from(now.interval_ms.max(0)) / 1000.0;
    if let Some(p) = previous
        && let (Some(before), Some(after)) = (p.counter_j, now.counter_j)
    {
        let gap = (now.ts - p.ts) as f64 / 1000.0;
        let rise = after - before;
        if gap > 0.0 && gap <= 2.0 * secs + 0.5 && (0.0..=MAX_GPU_WATTS * gap).contains(&rise) {
            return Some(rise * secs.min(gap) / gap);
        }
    }
    now.power_w
        .filter(|w| w.is_finite() && *w >= 0.0)
        .map(|w| f64::from(w) * secs)
}

/// What one tenant had of the GPU at an instant: its effective use (GPU-equivalents) and its
/// allocated share, each where known.
#[derive(Debug, Clone, Copy, Default)]
pub struct Claim {
    pub used: Option<f64>,
    pub allocated: Option<f64>,
}

/// The joules of `energy` charged to each claim, in order. Used: by use, over the larger of
/// the tenants' use and the device's (`device_use`), so the use of processes no tenant was
/// found for leaves its part with the pool. Unused: by allocated share, over at least one
/// whole GPU, so the unallocated part stays with the pool. The charges never sum past
/// `energy`.
pub fn charges(energy: f64, device_use: Option<f64>, claims: &[Claim]) -> Vec<f64> {
    if !(energy.is_finite() && energy > 0.0) {
        return vec![0.0; claims.len()];
    }
    let used_of = |c: &Claim| c.used.unwrap_or(0.0).clamp(0.0, 1.0);
    let held_of = |c: &Claim| c.allocated.unwrap_or(0.0).clamp(0.0, 1.0);
    let used: f64 = claims.iter().map(used_of).sum();
    if used > 0.0 {
        let whole = used.max(device_use.unwrap_or(0.0).clamp(0.0, 1.0));
        claims.iter().map(|c| energy * used_of(c) / whole).collect()
    } else {
        let whole = claims.iter().map(held_of).sum::<f64>().max(1.0);
        claims.iter().map(|c| energy * held_of(c) / whole).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(ts: i64, counter_j: Option<f64>, power_w: Option<f32>) -> EnergyReading {
        EnergyReading {
            ts,
            interval_ms: 1000,
            counter_j,
            power_w,
        }
    }

    #[test]
    fn the_counter_rise_is_the_energy_and_power_stands_in_without_it() {
        let a = reading(0, Some(1_000.0), Some(300.0));
        // The counter says 250 J over the second, the power reading 300 W: the counter wins.
        assert_eq!(
            sample_energy(Some(a), reading(1000, Some(1_250.0), Some(300.0))),
            Some(250.0)
        );
        // No previous sample, no counter, a reset, a gap too long: power × the interval.
        assert_eq!(
            sample_energy(None, reading(1000, Some(1_250.0), Some(300.0))),
            Some(300.0)
        );
        assert_eq!(
            sample_energy(Some(a), reading(1000, None, Some(300.0))),
            Some(300.0)
        );
        assert_eq!(
            sample_energy(Some(a), reading(1000, Some(10.0), Some(300.0))),
            Some(300.0)
        );
        assert_eq!(
            sample_energy(Some(a), reading(9000, Some(2_000.0), Some(300.0))),
            Some(300.0)
        );
        // A lost sample: the rise over two seconds, one second of it charged here.
        assert_eq!(
            sample_energy(Some(a), reading(2000, Some(1_600.0), None)),
            Some(300.0)
        );
        // A rise no GPU can draw is not energy; nothing known is None.
        assert_eq!(
            sample_energy(Some(a), reading(1000, Some(9_000.0), None)),
            None
        );
        assert_eq!(sample_energy(None, reading(1000, None, None)), None);
        assert_eq!(
            sample_energy(None, reading(1000, None, Some(f32::NAN))),
            None
        );
    }

    #[test]
    fn use_splits_the_energy_and_allocation_splits_an_idle_gpus() {
        let c = |used, allocated| Claim { used, allocated };
        // Two tenants using 0.2 and 0.6 of a GPU whose device use is 0.8: 25 % and 75 %.
        assert_eq!(
            charges(
                100.0,
                Some(0.8),
                &[c(Some(0.2), Some(0.5)), c(Some(0.6), None)]
            ),
            vec![25.0, 75.0]
        );
        // Processes no tenant was found for used the rest of a device at 1.0: it stays out.
        assert_eq!(
            charges(100.0, Some(1.0), &[c(Some(0.5), Some(1.0))]),
            vec![50.0]
        );
        // Nobody used it: the holders by share, the unallocated half with the pool.
        assert_eq!(
            charges(
                100.0,
                Some(0.0),
                &[c(Some(0.0), Some(0.25)), c(None, Some(0.25))]
            ),
            vec![25.0, 25.0]
        );
        // Over-allocated (replicas promising more than the GPU): shares scaled to the whole.
        assert_eq!(
            charges(100.0, None, &[c(None, Some(1.0)), c(None, Some(1.0))]),
            vec![50.0, 50.0]
        );
        assert_eq!(charges(0.0, None, &[c(Some(1.0), None)]), vec![0.0]);
        assert_eq!(charges(f64::NAN, None, &[c(Some(1.0), None)]), vec![0.0]);
    }
}
