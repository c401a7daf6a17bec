//! `gpulens-agent bench`: what one sampling cycle costs. Runs the full cycle the agent runs
//! every interval — sample, attribute, build the batch, compress it, append it to a spool — many
//! times back to back, and reports CPU time per cycle (from /proc/self/stat, `model::process`), the share of one
//! core that means at the given interval, and the peak resident memory (VmHWM).

use std::time::{Duration, Instant};

use crate::backend::GpuBackend;
use crate::shipper::{AgentState, build_batch, now_ms};
use crate::spool::Spool;

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
    let mut run_cycle = |i: u32, backend: &mut dyn GpuBackend| -> anyhow::Result<()> {
        let ts = now_ms() + i64::from(i);
        let (snap, tenants) = backend.sample(ts)?;
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
    for i in 0..20 {
        run_cycle(i, backend)?;
    }
    let cpu0 = model::own_usage::cpu_seconds().unwrap_or(0.0);
    let wall0 = Instant::now();
    for i in 0..cycles {
        run_cycle(20 + i, backend)?;
    }
    let cpu_ms =
        (model::own_usage::cpu_seconds().unwrap_or(0.0) - cpu0) * 1000.0 / f64::from(cycles);
    let wall_ms = wall0.elapsed().as_secs_f64() * 1000.0 / f64::from(cycles);
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
    })
}
