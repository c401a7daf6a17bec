//! `gpulens-agent bench`: what one sampling cycle costs. Runs the full cycle the agent runs
//! every interval — sample, attribute, build the batch, compress it, append it to a spool — many
//! times back to back, and reports CPU time per cycle (from /proc/self/stat, `model::own_usage`), the share of one
//! core that means at the given interval, and the peak resident memory (VmHWM).

pub mod recovery;
pub mod standin;

use std::time::{Duration, Instant};

use crate::CallTime;
use crate::backend::GpuBackend;
use crate::shipper::{AgentState, build_batch, now_ms};
use crate::spool::Spool;

/// One kind of driver call over the measured cycles.
#[derive(Debug, Clone, PartialEq)]
pub struct CallCost {
    /// The reading it serves (`power`, `compute_processes`, …).
    pub reading: &'static str,
    /// The NVML function it calls, where the table knows it (`driver_calls::NVML_FUNCTIONS`).
    pub function: Option<&'static str>,
    pub calls_per_cycle: f64,
    /// Wall time per call.
    pub us_per_call: f64,
    /// The calling thread's CPU time per call: less than the wall time where the driver waits.
    pub cpu_us_per_call: f64,
    /// Its time per cycle as a share of the cycle's wall time.
    pub share_of_cycle: f64,
}

pub struct Report {
    pub cycles: u32,
    pub gpus: usize,
    pub processes: usize,
    pub rows_per_cycle: usize,
    pub batch_bytes: usize,
    pub cpu_ms_per_cycle: f64,
    pub wall_ms_per_cycle: f64,
    pub core_share_at_interval: f64,
    pub peak_rss_mib: f64,
    /// The driver's calls, the costliest first (empty for a backend without a driver).
    pub calls: Vec<CallCost>,
    /// The fake NVML's costs that replay these calls ([`latency_profile`]), from the warm-up
    /// (where every reading is read at least once: the first cycle reads the ones on slower
    /// clocks too) and the table's cycles.
    pub profile: Option<String>,
}

pub fn run(
    backend: &mut dyn GpuBackend,
    cycles: u32,
    interval: Duration,
) -> anyhow::Result<Report> {
    let dir = crate::scratch::fresh_dir("agent-bench")?;
    let mut spool = Spool::open(&dir.join("spool"), 64 * 1024 * 1024)?;
    let mut state = AgentState::load(None)?;
    let (cluster, node) = {
        let (c, n) = backend.identity();
        (c.to_owned(), n.to_owned())
    };
    // Warm up (first NVML calls, allocations), then measure.
    let mut last = (0, 0, 0, 0);
    // Each cycle is stamped an interval after the one before, as a running agent's are, so
    // readings on a slower clock (the rare ones) are read as often per cycle as they would be.
    let start = now_ms();
    let step = interval.as_millis().max(1) as i64;
    let mut out_of_domain = crate::out_of_domain::OutOfDomain::default();
    let mut run_cycle = |i: u32, backend: &mut dyn GpuBackend| -> anyhow::Result<()> {
        let ts = start + i64::from(i) * step;
        let (mut snap, mut tenants) = backend.sample(ts)?;
        out_of_domain.take_out(&mut snap, &mut tenants);
        let (g, p) = (snap.gpus.len(), snap.processes.len());
        let rows = snap.row_count();
        let batch = build_batch(
            &cluster,
            &node,
            &mut state,
            1000,
            backend.inventory(),
            vec![(snap, tenants)],
        )?;
        let body = ingest_client::Client::encode(&batch)?;
        spool.append(batch.seq, &body)?;
        if let Some(r) = spool.peek()? {
            spool.commit(r.next)?;
        }
        last = (g, p, rows, body.len());
        Ok(())
    };
    backend.time_calls_on_cpu(true);
    for i in 0..20 {
        run_cycle(i, backend)?;
    }
    let warm_up = backend.call_costs();
    backend.time_calls_on_cpu(false);
    // The cycle's cost as a running agent pays it; then the per-call table, in a pass of its
    // own, because timing each call on the thread's CPU clock adds two system calls a call.
    let cpu0 = model::own_usage::cpu_seconds().unwrap_or(0.0);
    let wall0 = Instant::now();
    for i in 0..cycles {
        run_cycle(20 + i, backend)?;
    }
    let cpu_ms =
        (model::own_usage::cpu_seconds().unwrap_or(0.0) - cpu0) * 1000.0 / f64::from(cycles);
    let wall_ms = wall0.elapsed().as_secs_f64() * 1000.0 / f64::from(cycles);
    backend.time_calls_on_cpu(true);
    let before = backend.call_costs();
    let wall0 = Instant::now();
    for i in 0..cycles {
        run_cycle(20 + cycles + i, backend)?;
    }
    let table_wall_ms = wall0.elapsed().as_secs_f64() * 1000.0 / f64::from(cycles);
    let after = backend.call_costs();
    let calls = call_costs(&before, &after, cycles, table_wall_ms);
    let profile = latency_profile(&merged(&warm_up, &difference(&before, &after)));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Report {
        cycles,
        gpus: last.0,
        processes: last.1,
        rows_per_cycle: last.2,
        batch_bytes: last.3,
        cpu_ms_per_cycle: cpu_ms,
        wall_ms_per_cycle: wall_ms,
        core_share_at_interval: cpu_ms / interval.as_secs_f64() / 1000.0,
        peak_rss_mib: model::own_usage::peak_rss_mib().unwrap_or(0.0),
        calls,
        profile,
    })
}

/// What the calls between `before` and `after` cost, by reading.
fn difference(
    before: &[(&'static str, CallTime)],
    after: &[(&'static str, CallTime)],
) -> Vec<(&'static str, CallTime)> {
    after
        .iter()
        .map(|&(reading, now)| {
            let then = before
                .iter()
                .find(|b| b.0 == reading)
                .map_or(CallTime::default(), |b| b.1);
            let d = CallTime {
                calls: now.calls.saturating_sub(then.calls),
                wall: now.wall.saturating_sub(then.wall),
                cpu: now.cpu.saturating_sub(then.cpu),
            };
            (reading, d)
        })
        .collect()
}

/// Two sets of calls, summed by reading.
fn merged(
    a: &[(&'static str, CallTime)],
    b: &[(&'static str, CallTime)],
) -> Vec<(&'static str, CallTime)> {
    let mut sum: std::collections::BTreeMap<&'static str, CallTime> = Default::default();
    for &(reading, t) in a.iter().chain(b) {
        let s = sum.entry(reading).or_default();
        s.calls += t.calls;
        s.wall += t.wall;
        s.cpu += t.cpu;
    }
    sum.into_iter().collect()
}

/// The fake NVML's injected costs (`GPULENS_FAKE_NVML_LATENCY`) that charge what the calls
/// `by_reading` cost: each NVML function at the mean CPU time of one call of the readings it
/// serves, and `+` the rest of its wall time as a wait where that is at least [`MIN_WAIT_US`],
/// in whole microseconds, functions in name order. None without calls the table knows.
pub fn latency_profile(by_reading: &[(&'static str, CallTime)]) -> Option<String> {
    let mut by_function: std::collections::BTreeMap<&str, CallTime> = Default::default();
    for &(reading, t) in by_reading {
        if let Some(f) = crate::driver_calls::nvml_function(reading) {
            let e = by_function.entry(f).or_default();
            e.calls += t.calls;
            e.wall += t.wall;
            e.cpu += t.cpu.min(t.wall);
        }
    }
    let items: Vec<String> = by_function
        .into_iter()
        .filter(|(_, t)| t.calls > 0)
        .map(|(f, t)| {
            let us = |d: Duration| d.as_secs_f64() * 1e6 / t.calls as f64;
            let (wall, cpu) = (us(t.wall), us(t.cpu));
            let wait = wall - cpu;
            if wait >= MIN_WAIT_US {
                format!("{f}={}+{}", cpu.round() as u64, wait.round() as u64)
            } else {
                format!("{f}={}", wall.round() as u64)
            }
        })
        .collect();
    (!items.is_empty()).then(|| items.join(","))
}

/// The least wall time beyond the CPU time that the replay charges as a wait: below it, the
/// difference is the clocks' own noise and the call is charged its wall time as CPU.
pub const MIN_WAIT_US: f64 = 50.0;

/// The calls made between two readings of the backend's counters, per cycle, the costliest
/// first.
fn call_costs(
    before: &[(&'static str, CallTime)],
    after: &[(&'static str, CallTime)],
    cycles: u32,
    wall_ms: f64,
) -> Vec<CallCost> {
    let mut out: Vec<CallCost> = difference(before, after)
        .into_iter()
        .filter_map(|(reading, made)| {
            let (calls, time, cpu) = (made.calls, made.wall, made.cpu);
            (calls > 0).then(|| {
                let per_cycle_us = time.as_secs_f64() * 1e6 / f64::from(cycles);
                CallCost {
                    reading,
                    function: crate::driver_calls::nvml_function(reading),
                    calls_per_cycle: calls as f64 / f64::from(cycles),
                    us_per_call: time.as_secs_f64() * 1e6 / calls as f64,
                    cpu_us_per_call: cpu.as_secs_f64() * 1e6 / calls as f64,
                    share_of_cycle: if wall_ms > 0.0 {
                        per_cycle_us / (wall_ms * 1000.0)
                    } else {
                        0.0
                    },
                }
            })
        })
        .collect();
    out.sort_by(|a, b| {
        (b.us_per_call * b.calls_per_cycle).total_cmp(&(a.us_per_call * a.calls_per_cycle))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_costs_are_the_difference_per_cycle_costliest_first() {
        let ms = Duration::from_millis;
        let t = |calls, wall, cpu| CallTime {
            calls,
            wall: ms(wall),
            cpu: ms(cpu),
        };
        let before = [("power", t(10, 10, 10)), ("memory", t(10, 1, 1))];
        let after = [
            ("power", t(30, 30, 30)),
            ("memory", t(30, 61, 21)),
            ("nvlink", t(4, 8, 8)),
        ];
        let c = call_costs(&before, &after, 20, 10.0);
        let names: Vec<&str> = c.iter().map(|c| c.reading).collect();
        assert_eq!(names, ["memory", "power", "nvlink"]);
        assert_eq!(c[0].calls_per_cycle, 1.0);
        assert!((c[0].us_per_call - 3000.0).abs() < 1e-6, "{:?}", c[0]);
        assert!((c[0].cpu_us_per_call - 1000.0).abs() < 1e-6, "{:?}", c[0]);
        // 3 ms of a 10 ms cycle.
        assert!((c[0].share_of_cycle - 0.3).abs() < 1e-9, "{:?}", c[0]);
        assert_eq!(c[2].calls_per_cycle, 0.2);
        assert!(call_costs(&after, &after, 20, 10.0).is_empty());
    }

    #[test]
    fn the_profile_charges_each_function_its_readings_mean_cost() {
        // `calls` calls of `reading`, each `us` of wall time and `cpu_us` of CPU.
        let cost = |reading, calls: u64, us: f64, cpu_us: f64| {
            let total = |us: f64| Duration::from_nanos((us * 1000.0 * calls as f64) as u64);
            let t = CallTime {
                calls,
                wall: total(us),
                cpu: total(cpu_us),
            };
            (reading, t)
        };
        let calls = [
            cost("sm_clock", 8, 100.0, 99.0),
            cost("mem_clock", 8, 300.0, 298.0),
            cost("power", 8, 41.6, 41.0),
            cost("ecc", 1, 900.0, 900.0),
            // PCIe throughput watches a counter for 20 ms: 1 ms of CPU, the rest a wait.
            cost("pcie_rx", 1, 21_000.0, 1_000.0),
            cost("name", 1, 5.0, 5.0),
        ];
        assert_eq!(
            latency_profile(&calls).as_deref(),
            Some(
                "nvmlDeviceGetClockInfo=200,nvmlDeviceGetPcieThroughput=1000+20000,\
                 nvmlDeviceGetPowerUsage=42,nvmlDeviceGetTotalEccErrors=900"
            )
        );
        assert_eq!(latency_profile(&[cost("name", 1, 5.0, 5.0)]), None);
    }
}
