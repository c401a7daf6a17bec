//! `underutilized`: every holding whose effective use stays below `underutilized_ratio` of
//! what it holds gets a finding — whether or not a smaller slice fits — naming why it cannot
//! simply shrink (`fits_smaller`, `memory_bound`, `compute_bound`, `no_data`), the best way to
//! share it, and the waste in GPU-hours and money, so the biggest waster ranks first.

use crate::measure::{Measure, Measures};
use std::collections::BTreeMap;

use model::figures;

use crate::config::Config;
use crate::findings::{
    Ctx, Evidence, Finding, FindingKind, GIB, Severity, activity_evidence, finding_id, gib,
};
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::need::{current, need, smaller_sizes, smaller_target};
use crate::recommendation::Move;

/// Wasted GPU-hours from which an underutilized holding is a warning: a GPU-day.
pub const WARNING_WASTE_GPU_HOURS: f64 = 24.0;

/// Whether a holding's effective use is known and below the threshold.
pub fn is_waster(h: &Holding, cfg: &Config) -> bool {
    h.effective_ratio()
        .is_some_and(|r| r < cfg.underutilized_ratio)
}

pub fn finding_id_of(h: &Holding, ctx: &Ctx) -> String {
    finding_id(
        FindingKind::Underutilized,
        &format!("{}/{}", h.gpu, h.tenant),
        ctx.input.from_ms,
    )
}

/// Why a waster cannot simply shrink.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Why {
    /// A smaller MIG profile or time-slice share fits its need.
    FitsSmaller,
    /// A smaller size would hold its compute but not its memory.
    MemoryBound,
    /// Its p95 compute needs its whole size, although its mean is low (bursts).
    ComputeBound,
    /// Memory or compute is not measured well enough to size it.
    NoData,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::FitsSmaller => "fits_smaller",
            Why::MemoryBound => "memory_bound",
            Why::ComputeBound => "compute_bound",
            Why::NoData => "no_data",
        }
    }
}

/// Why `h` (on `gpu`) cannot simply shrink; `fits` when a smaller size holds its need.
pub fn why(h: &Holding, gpu: Option<&GpuRef>, cfg: &Config, fits: bool) -> Why {
    if fits {
        return Why::FitsSmaller;
    }
    let Some((_, compute)) = need(h, cfg) else {
        return Why::NoData;
    };
    let compute_fits_smaller = gpu.is_some_and(|g| {
        smaller_sizes(h, g, cfg)
            .iter()
            .any(|(_, c, _)| *c >= compute - 1e-9)
    });
    if compute_fits_smaller {
        Why::MemoryBound
    } else {
        Why::ComputeBound
    }
}

/// The finding for a waster; `planned` is the plan's move of it, if any (the step as the
/// plan's text names it, the move).
/// The numbers an underutilized finding keeps: [effective ratio, allocated, effective and
/// wasted GPU-hours, wasted cost], the p95 effective use and the p99 memory where measured.
fn metrics_of(
    [ratio, alloc, eff, wasted, cost]: [f64; 5],
    p95: Option<f64>,
    mem_p99: Option<f64>,
) -> Measures {
    let mut metrics = BTreeMap::from([
        (Measure::EffectiveRatio, ratio),
        (Measure::AllocatedGpuHours, alloc),
        (Measure::EffectiveGpuHours, eff),
        (Measure::WastedGpuHours, wasted),
        (Measure::WastedCost, (cost * 100.0).round() / 100.0),
    ]);
    if let Some(c) = p95 {
        metrics.insert(Measure::EffectiveP95Gpu, c);
    }
    if let Some(m) = mem_p99 {
        metrics.insert(Measure::MemoryP99Gib, gib(m));
    }
    metrics
}

pub fn finding(ctx: &Ctx, h: &Holding, planned: Option<(&str, &Move)>) -> Finding {
    let cfg = ctx.cfg;
    let gpu = ctx.gpu(&h.gpu);
    let model = gpu.map_or("", |g| g.model.as_str());
    let memory_total = gpu.map_or(0.0, |g| g.memory_total_bytes as f64);
    let ratio = h.effective_ratio().unwrap_or(0.0);
    let smaller = gpu.and_then(|g| smaller_target(h, g, cfg));
    let why = why(h, gpu, cfg, smaller.is_some());
    let (alloc, eff) = (h.allocated_hours(), h.effective_hours());
    let wasted = (alloc - eff).max(0.0);
    let cost = wasted * cfg.price_of(model);
    let name = ctx.name(&h.cluster, &h.tenant);
    let now = current(h, gpu);
    let mem_p99 = h.mem_p99().map(|m| m as f64);
    let p95 = h.eff_p95();
    let need_text = match (p95, mem_p99) {
        (Some(c), Some(m)) => format!(
            "p95 {}, p99 memory {}",
            figures::gpu(c),
            figures::gib(gib(m))
        ),
        (Some(c), None) => format!("p95 {}, memory not measured", figures::gpu(c)),
        (None, Some(m)) => format!("p99 memory {}", figures::gib(gib(m))),
        (None, None) => "no per-tenant measurements".into(),
    };
    let because = match why {
        Why::FitsSmaller => format!(
            "it would fit {}",
            smaller.as_ref().map_or(String::new(), |s| s.0.describe())
        ),
        Why::MemoryBound => {
            "no smaller slice holds its memory, though one would hold its compute (memory-bound)"
                .to_owned()
        }
        Why::ComputeBound => {
            "its compute peaks need all of it, though its mean is low (compute-bound)".to_owned()
        }
        Why::NoData => "its memory or compute is not measured well enough to size it".to_owned(),
    };
    let option = match planned {
        Some((step, m)) => format!(
            "the fleet plan moves it to {} on GPU {} of {} ({step})",
            m.target.describe(),
            m.to_gpu_index,
            m.to_node
        ),
        None => match why {
            Why::MemoryBound => {
                let free = memory_total - need(h, cfg).map_or(0.0, |n| n.0);
                format!(
                    "best option: time-slice its GPU with tenants whose memory totals at most {:.1} GiB",
                    (free / GIB).max(0.0)
                )
            }
            Why::ComputeBound => "best option: time-slice it with a tenant that is busy at other hours, or batch its bursts".to_owned(),
            Why::NoData => "best option: measure it first (per-process memory; DCGM for MIG instances)".to_owned(),
            Why::FitsSmaller => "no plan step moves it: the pool frees nothing by it alone".to_owned(),
        },
    };
    let severity = if wasted >= WARNING_WASTE_GPU_HOURS || (ratio < 0.1 && h.whole_gpu()) {
        Severity::Warning
    } else {
        Severity::Info
    };
    let metrics = metrics_of([ratio, alloc, eff, wasted, cost], p95, mem_p99);
    Finding {
        id: finding_id_of(h, ctx),
        kind: FindingKind::Underutilized,
        severity,
        cluster: h.cluster.clone(),
        node: h.node.clone(),
        gpu: Some(h.gpu.clone()),
        tenants: vec![h.tenant.clone()],
        team: ctx.team(&h.cluster, &h.tenant),
        pool: None,
        from_ms: h.rows.first().map_or(ctx.input.from_ms, |r| r.0),
        // Never past the window: its newest hour is partial.
        to_ms: h
            .rows
            .last()
            .map_or(ctx.input.to_ms, |r| r.0 + model::rollup::HOUR_MS)
            .min(ctx.input.to_ms),
        signal: h.signal().into(),
        reason: Some(why.as_str().into()),
        summary: format!(
            "{name} used {} of {now} on {} ({}: {need_text}), wasting {} GPU-hours ({}); {because}; {option}",
            figures::percent(ratio),
            ctx.gpu_label(&h.gpu),
            h.signal(),
            // The alert's value and the Numbers table carry the same tenths.
            figures::quantity(crate::findings::tenths(wasted)),
            // The cost the metrics keep (to the cent), so both round alike.
            figures::money((cost * 100.0).round() / 100.0, &cfg.currency),
        ),
        metrics,
        evidence: vec![
            activity_evidence(h, ctx.input.from_ms, ctx.input.to_ms),
            Evidence::tenant(
                "tenant memory",
                "mem_used_bytes",
                &h.cluster,
                &h.tenant,
                ctx.input.from_ms,
                ctx.input.to_ms,
            ),
        ],
        demand_hours: Vec::new(),
    }
}
