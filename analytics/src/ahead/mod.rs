//! Whether a step still fits its tenants in the days ahead: each tenant's hourly memory peaks
//! over the window give it a growth trend (least squares, kept only where it is clearly above
//! zero), and each GPU or MIG instance the step fills is checked against the sum of its
//! tenants' peaks grown by their trends over the look-ahead (`[analytics] ahead`, a week).
//! A step they outgrow is flagged, not dropped: it says when, its confidence halves, and its
//! worth counts only the GPU-hours it frees until then. docs/analytics.md, "The days ahead".

use std::collections::BTreeMap;

use crate::findings::GIB;
use crate::held_out::Judge;
use crate::holdings::Holding;
use crate::input::Input;
use crate::recommendation::{Proposal, Recommendation};

pub mod outlook;
pub use outlook::Ahead;

/// Hours of memory peaks a trend needs.
const MIN_HOURS: usize = 24;
/// A trend is kept where the slope exceeds this many standard errors.
const T_MIN: f64 = 3.0;

/// A holding's memory now (its last day's peak) and its growth in bytes an hour.
fn trend(h: &Holding) -> (f64, f64) {
    let points: Vec<(f64, f64)> = h
        .rows
        .iter()
        .filter_map(|(t, r)| Some((*t as f64 / 3_600_000.0, r.mem_used_max? as f64)))
        .collect();
    let last_day = points
        .iter()
        .rev()
        .take(24)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let n = points.len() as f64;
    if points.len() < MIN_HOURS {
        return (last_day, 0.0);
    }
    let (tm, ym) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|p| (p.0 - tm).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - tm) * (p.1 - ym)).sum();
    if sxx <= 0.0 {
        return (last_day, 0.0);
    }
    let slope = sxy / sxx;
    let residual: f64 = points
        .iter()
        .map(|p| (p.1 - ym - slope * (p.0 - tm)).powi(2))
        .sum();
    let se = (residual / (n - 2.0) / sxx).sqrt();
    let at_end = ym + slope * (points.last().map_or(tm, |p| p.0) - tm);
    if slope > 0.0 && slope > T_MIN * se {
        (last_day.max(at_end), slope)
    } else {
        (last_day, 0.0)
    }
}

/// Checks every step of `recs` (the plan's, placed on `holdings`) against its tenants'
/// memory trends over `days` days ahead; sets `ahead` and halves the confidence of outgrown
/// steps.
pub fn check(
    input: &Input,
    holdings: &[Holding],
    recs: &mut [Recommendation],
    cfg: &crate::Config,
    days: f64,
) {
    let judged: Vec<(usize, Ahead)> = {
        let judge = Judge::new(input, holdings, recs, cfg);
        let mut trends: BTreeMap<(&str, &str), (f64, f64)> = BTreeMap::new();
        recs.iter()
            .enumerate()
            .filter(|(_, r)| !matches!(r.proposal, Proposal::Reclaim { .. }))
            .map(|(i, r)| {
                let (_, after) = judge.placement(r);
                let mut first: Option<f64> = None;
                let mut growing: BTreeMap<String, f64> = BTreeMap::new();
                for slot in &after {
                    let grown: Vec<(f64, f64)> = slot
                        .holdings
                        .iter()
                        .map(|h| {
                            let t = *trends
                                .entry((h.tenant.as_str(), h.gpu.as_str()))
                                .or_insert_with(|| trend(h));
                            if t.1 > 0.0 && r.tenants.contains(&h.tenant) {
                                growing.insert(h.tenant.clone(), t.1 * 24.0 / GIB);
                            }
                            t
                        })
                        .collect();
                    let now: f64 = grown.iter().map(|g| g.0).sum();
                    let per_hour: f64 = grown.iter().map(|g| g.1).sum();
                    if per_hour <= 0.0 {
                        continue;
                    }
                    let hours = ((slot.memory_bytes - now) / per_hour).max(0.0);
                    if hours < days * 24.0 {
                        let d = hours / 24.0;
                        first = Some(first.map_or(d, |f: f64| f.min(d)));
                    }
                }
                (i, ahead(r, first, growing, days))
            })
            .collect()
    };
    for (i, a) in judged {
        let r = &mut recs[i];
        if a.outgrown_in_days.is_some() {
            r.confidence = (r.confidence * 0.5 * 100.0).round() / 100.0;
        }
        r.ahead = Some(a);
    }
}

fn ahead(
    r: &Recommendation,
    first: Option<f64>,
    growing: BTreeMap<String, f64>,
    days: f64,
) -> Ahead {
    let growing: Vec<(String, f64)> = growing.into_iter().collect();
    let names = growing
        .iter()
        .map(|(t, g)| format!("{t} by {g:.1} GiB a day"))
        .collect::<Vec<_>>()
        .join(", ");
    let until = first.unwrap_or(days);
    // A step that frees no GPU (a separation) has nothing to lose to growth but its fit.
    let freed = r.replay.gpus_freed.max(0.0);
    let frees = |hours: f64| {
        if freed > 0.0 {
            format!("; it frees {:.0} GPU-hours over them", freed * hours)
        } else {
            String::new()
        }
    };
    let why = match first {
        Some(d) if freed > 0.0 => format!(
            "outgrown in {}: memory grows ({names}) past what the step gives; it frees {:.0} of the {:.0} GPU-hours it would over {days:.0} days",
            days_text(d),
            freed * until * 24.0,
            freed * days * 24.0
        ),
        Some(d) => format!(
            "outgrown in {}: memory grows ({names}) past what the step gives",
            days_text(d)
        ),
        None if growing.is_empty() => format!(
            "fits for the next {days:.0} days: none of its tenants' memory grows{}",
            frees(days * 24.0)
        ),
        None => format!(
            "fits for the next {days:.0} days although memory grows ({names}){}",
            frees(days * 24.0)
        ),
    };
    Ahead {
        days,
        outgrown_in_days: first,
        growing,
        worth_gpu_hours: freed * until * 24.0,
        why,
    }
}

fn days_text(d: f64) -> String {
    if d < 1.0 {
        format!("{:.0} hours", (d * 24.0).max(1.0))
    } else {
        format!("{d:.1} days")
    }
}
