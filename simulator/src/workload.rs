//! Workload patterns: what a tenant asks of its device at any instant. Shapes follow the real
//! fleet curves in shared/reference/utilization-cdfs: training saturates NVML utilization while
//! keeping only half of the SMs busy; inference follows the day and rarely passes 50 %;
//! notebooks and idle allocations hold memory with no kernels (a third of Philly's GPU-minutes
//! were at 0 %).

use serde::Deserialize;

use crate::noise::uniform;

/// The workload patterns a scenario can give a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Long-running training: kernels nearly always, half of the SMs busy, a checkpoint dip
    /// every couple of hours.
    SteadyTraining,
    /// Online inference that follows the day (peak 14:00 UTC), mostly well under 50 %.
    DiurnalInference,
    /// Batch jobs that come and go in 20-minute slots; no process between jobs.
    BurstyBatch,
    /// Holds its allocation and memory, runs no kernels.
    IdleHoldingMemory,
    /// Interactive sessions during working hours with short bursts of work.
    Notebook,
    /// A quiet service (a few percent) that runs one heavy hour every day at 02:00 UTC, e.g. a
    /// nightly index rebuild: low p95, but two of them collide at the same hour.
    DailyPeak,
    /// Holds its GPU and memory all week and runs a heavy batch on Fridays (UTC) only, e.g. a
    /// weekly report build: idle on any other day, busy on its day.
    WeeklyBatch,
    /// A light service whose memory grows all week — a cache filled until its Monday redeploy
    /// (00:00 UTC): `mem_gib` at the redeploy, half of it more every day, a tenth of the GPU's
    /// time busy.
    GrowingCache,
}

/// What a tenant wants from its device at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    /// Whether the tenant's process exists right now.
    pub running: bool,
    /// Whether the tenant holds its allocation right now (a finished batch job does not).
    pub allocated: bool,
    /// Share of device time the tenant's kernels would occupy if alone (0–1).
    pub compute: f64,
    /// Share of SMs its kernels keep busy while running (sm_active / gpu_util).
    pub sm_efficiency: f64,
    /// Share of active SM time the tensor cores are busy.
    pub tensor_share: f64,
    pub mem_bytes: i64,
    /// Identifies the process instance; a new session means a new pid and start time.
    pub session: i64,
    /// When the current session started (seconds since the epoch).
    pub session_start: i64,
}

const DAY: i64 = 86_400;

impl Pattern {
    /// The demand at second `t` for the tenant with random stream `stream`.
    pub fn demand(self, seed: u64, stream: u64, t: i64, intensity: f64, mem_bytes: i64) -> Demand {
        let jitter = |k: i64| uniform(seed, stream ^ 0x5151, t.wrapping_mul(7).wrapping_add(k));
        // A per-tenant constant: how well this tenant's kernels fill the GPU.
        let personality = uniform(seed, stream, -1);
        let always = |compute: f64, eff: f64, tensor: f64| Demand {
            running: true,
            allocated: true,
            compute: (compute * intensity).clamp(0.0, 1.0),
            sm_efficiency: eff,
            tensor_share: tensor,
            mem_bytes,
            session: 0,
            session_start: 0,
        };
        match self {
            Pattern::SteadyTraining => {
                // A 3-minute checkpoint dip every two hours, at a tenant-specific phase.
                let phase = (personality * 7200.0) as i64;
                let in_dip = (t + phase).rem_euclid(7200) < 180;
                let compute = if in_dip {
                    0.05
                } else {
                    0.94 + 0.06 * jitter(1)
                };
                let eff = 0.42 + 0.3 * personality + 0.06 * (jitter(2) - 0.5);
                // A caching allocator holds what the steps need: memory moves a little once a
                // minute, not every second.
                let minute = uniform(seed, stream ^ 0x4d45, t.div_euclid(60));
                let mem = mem_bytes as f64 * (0.98 + 0.02 * minute);
                Demand {
                    mem_bytes: whole_mib(mem),
                    ..always(compute, eff.clamp(0.05, 0.95), 0.55)
                }
            }
            Pattern::DiurnalInference => {
                let hour = t.rem_euclid(DAY) as f64 / 3600.0;
                let wave = ((hour - 14.0) / 24.0 * std::f64::consts::TAU)
                    .cos()
                    .max(0.0);
                let compute = 0.06 + 0.38 * wave + 0.08 * (jitter(1) - 0.5);
                let eff = 0.18 + 0.15 * personality;
                always(compute.max(0.0), eff, 0.35)
            }
            Pattern::BurstyBatch => {
                let slot = t.div_euclid(1200);
                let on = uniform(seed, stream, slot) < 0.35;
                if on {
                    let compute = 0.88 + 0.12 * jitter(1);
                    Demand {
                        session: slot,
                        session_start: slot * 1200,
                        ..always(compute, 0.55 + 0.2 * personality, 0.4)
                    }
                } else {
                    Demand {
                        running: false,
                        allocated: false,
                        compute: 0.0,
                        mem_bytes: 0,
                        session: slot,
                        session_start: slot * 1200,
                        ..always(0.0, 0.0, 0.0)
                    }
                }
            }
            Pattern::IdleHoldingMemory => always(0.0, 0.0, 0.0),
            Pattern::WeeklyBatch => {
                // 1970-01-01 was a Thursday: day index 1 of the week is a Friday.
                let friday = t.div_euclid(DAY).rem_euclid(7) == 1;
                if friday {
                    always(0.8 + 0.15 * jitter(1), 0.5 + 0.2 * personality, 0.4)
                } else {
                    always(0.0, 0.0, 0.0)
                }
            }
            Pattern::GrowingCache => {
                // 1970-01-01 was a Thursday: Monday is day 4 of the epoch's week.
                let into_week = (t - 4 * DAY).rem_euclid(7 * DAY) as f64 / DAY as f64;
                Demand {
                    mem_bytes: whole_mib(mem_bytes as f64 * (1.0 + 0.5 * into_week)),
                    ..always(0.08 + 0.04 * jitter(1), 0.4 + 0.2 * personality, 0.2)
                }
            }
            Pattern::DailyPeak => {
                let in_peak = t.rem_euclid(DAY) / 3600 == 2;
                let compute = if in_peak {
                    0.85 + 0.1 * jitter(1)
                } else {
                    0.03 + 0.02 * jitter(1)
                };
                always(compute, 0.5 + 0.2 * personality, 0.3)
            }
            Pattern::Notebook => {
                let slot = t.div_euclid(1800);
                let hour = t.rem_euclid(DAY) / 3600;
                let weekday = (t.div_euclid(DAY) + 3).rem_euclid(7) < 5; // 1970-01-01 was a Thursday
                let p_session = if weekday && (8..19).contains(&hour) {
                    0.6
                } else {
                    0.04
                };
                let in_session = uniform(seed, stream, slot) < p_session;
                let minute = t.div_euclid(60);
                let burst = in_session && uniform(seed, stream ^ 0xb0, minute) < 0.15;
                Demand {
                    running: in_session,
                    compute: if burst { 0.7 + 0.3 * jitter(1) } else { 0.0 },
                    mem_bytes: if in_session { mem_bytes } else { 0 },
                    session: slot,
                    session_start: slot * 1800,
                    ..always(0.0, 0.35 + 0.2 * personality, 0.2)
                }
            }
        }
    }
}

/// Memory as NVML reports a process's: whole MiB (what the real H100 check saw).
fn whole_mib(bytes: f64) -> i64 {
    (bytes / 1_048_576.0) as i64 * 1_048_576
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share_busy(p: Pattern) -> f64 {
        let n = 20_000;
        let busy = (0..n)
            .filter(|i| p.demand(1, 42, i * 37, 1.0, 1).compute > 0.01)
            .count();
        busy as f64 / n as f64
    }

    #[test]
    fn patterns_have_their_shapes() {
        assert!(share_busy(Pattern::SteadyTraining) > 0.95);
        assert_eq!(share_busy(Pattern::IdleHoldingMemory), 0.0);
        let bursty = share_busy(Pattern::BurstyBatch);
        assert!((0.25..0.45).contains(&bursty), "bursty busy share {bursty}");
        let notebook = share_busy(Pattern::Notebook);
        assert!(notebook < 0.15, "notebook busy share {notebook}");
        // Inference peaks in the afternoon and is low at night.
        let at = |h: i64| {
            Pattern::DiurnalInference
                .demand(1, 3, h * 3600, 1.0, 1)
                .compute
        };
        assert!(at(14) > at(2) + 0.2, "{} vs {}", at(14), at(2));
        // A daily peak: one busy hour a day, quiet otherwise.
        let busy = |h: i64| {
            Pattern::DailyPeak
                .demand(1, 3, h * 3600 + 600, 1.0, 1)
                .compute
        };
        assert!(busy(2) > 0.8 && busy(26) > 0.8);
        assert!((0..24).filter(|&h| h != 2).all(|h| busy(h) < 0.06));
        // A weekly batch: busy on Fridays (2026-11-20), idle on Thursdays (2026-11-19).
        let weekly = |t: i64| Pattern::WeeklyBatch.demand(1, 3, t, 1.0, 1).compute;
        assert!(weekly(1_795_132_800 + 3600) > 0.7);
        assert_eq!(weekly(1_795_046_400 + 3600), 0.0);
    }

    #[test]
    fn training_keeps_fewer_sms_busy_than_its_utilization_says() {
        let d = Pattern::SteadyTraining.demand(1, 5, 1000, 1.0, 1);
        assert!(d.compute > 0.9);
        assert!(d.sm_efficiency < 0.8);
    }
}
