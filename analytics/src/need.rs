//! What a holding needs and how sure the analysis is of it: its memory and compute at the
//! configured percentile, the smaller sizes that would hold it, and its slot as it runs now.

use crate::config::Config;
use crate::findings::GIB;
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::mig;
use crate::recommendation::{Target, mig_target};
use crate::replay::Slot;
use model::inventory::Sharing;

/// How sure the analysis is of one holding's need: how much of the minimum history it has,
/// and how direct its signal is.
pub(crate) fn confidence(h: &Holding, cfg: &Config) -> f64 {
    let coverage = (h.rows.len() as f64 / (cfg.min_alloc_hours * 6.0)).min(1.0);
    let signal = match h.signal() {
        "sm_active" => 1.0,
        "mixed" => 0.9,
        _ => 0.8,
    };
    (coverage * signal * 100.0).round() / 100.0
}

/// How sure a plan is: the confidence of the tenants it moves, weighted by the GPU-hours each
/// holds (a short-lived neighbour the plan does not touch, or barely weighs, cannot sink it).
pub(crate) fn plan_confidence(live: &[&Holding], moved: &[String], cfg: &Config) -> f64 {
    let touched: Vec<&&Holding> = live.iter().filter(|h| moved.contains(&h.tenant)).collect();
    let weight: f64 = touched.iter().map(|h| h.allocated_hours()).sum();
    if touched.is_empty() || weight <= 0.0 {
        return live.iter().map(|h| confidence(h, cfg)).fold(1.0, f64::min);
    }
    let c = touched
        .iter()
        .map(|h| confidence(h, cfg) * h.allocated_hours())
        .sum::<f64>()
        / weight;
    (c * 100.0).round() / 100.0
}

/// The tenant's current size on its GPU, in words.
pub(crate) fn current(h: &Holding, gpu: Option<&GpuRef>) -> String {
    let share = h.share();
    match gpu {
        Some(g) if g.sharing == Sharing::Mig => {
            format!("a MIG slice of {}/7", (share * 7.0).round())
        }
        Some(g) if g.sharing.by_time() => {
            format!(
                "a 1/{} {} share",
                g.replicas,
                g.sharing.as_str().replace('_', "-")
            )
        }
        _ if share >= 0.999 => "a whole GPU".into(),
        _ => format!("{share:.2} of a GPU"),
    }
}

/// What a tenant needs: memory p99 and compute p95 with headroom (bytes, GPU-equivalents).
pub(crate) fn need(h: &Holding, cfg: &Config) -> Option<(f64, f64)> {
    Some((
        h.mem_p99()? as f64 * (1.0 + cfg.memory_headroom),
        h.eff_p95()? * (1.0 + cfg.compute_headroom),
    ))
}

/// The sizes strictly below the tenant's current share of its GPU, smallest first, as
/// (target, compute share, memory bytes): the model's MIG profiles, or 1/k time-slice shares
/// (k up to `max_replicas`, memory split k ways) on models without MIG.
pub(crate) fn smaller_sizes(h: &Holding, gpu: &GpuRef, cfg: &Config) -> Vec<(Target, f64, f64)> {
    let share = h.share();
    match mig::family(&gpu.model) {
        Some(f) => f
            .fitting(0.0, 0.0)
            .filter(|p| p.compute_share() < share - 1e-6)
            .map(|p| (mig_target(p), p.compute_share(), p.memory_gib * GIB))
            .collect(),
        None => (2..=cfg.max_replicas)
            .rev()
            .map(|k| (k, 1.0 / f64::from(k)))
            .filter(|&(_, s)| s < share - 1e-6)
            .map(|(k, s)| {
                (
                    Target::Share { replicas: k },
                    s,
                    gpu.memory_total_bytes as f64 / f64::from(k),
                )
            })
            .collect(),
    }
}

/// The smallest size strictly below the current share that fits the need, if any.
pub(crate) fn smaller_target(
    h: &Holding,
    gpu: &GpuRef,
    cfg: &Config,
) -> Option<(Target, f64, f64)> {
    let (mem, compute) = need(h, cfg)?;
    smaller_sizes(h, gpu, cfg)
        .into_iter()
        .find(|(_, c, m)| *c >= compute - 1e-9 && *m >= mem)
}

pub(crate) fn slot_now<'a>(h: &'a Holding, gpu: Option<&GpuRef>) -> Slot<'a> {
    let mem = gpu.map_or(f64::MAX, |g| g.memory_total_bytes as f64);
    let share = h.share().max(1e-6);
    Slot {
        compute: if gpu.is_some_and(|g| g.sharing.by_time()) {
            1.0
        } else {
            share
        },
        memory_bytes: if gpu.is_some_and(|g| g.sharing == Sharing::Mig) {
            mem * share
        } else {
            mem
        },
        holdings: vec![h],
    }
}
