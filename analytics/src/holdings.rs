//! A *holding* is one tenant on one GPU over the analysed range: the unit that findings and
//! recommendations reason about. Built from the tenant hour rollups.

use std::collections::BTreeMap;

use model::hour_series::TenantHour;
use model::rollup::{HOUR_MS, Hist, TenantAgg};

use crate::input::{Input, TenantSeries};

/// One hour of a holding, as replay reads it.
#[derive(Debug, Clone)]
pub struct HourUse {
    pub hour: i64,
    /// The tenant's effective use (GPU-equivalents): p95 within the hour.
    pub eff_p95: Option<f64>,
    pub mem_max_bytes: Option<i64>,
    pub allocated: bool,
}

impl HourUse {
    /// Whether the hour asks anything of the device (replay skips the others).
    pub fn in_demand(&self) -> bool {
        self.allocated || self.eff_p95.unwrap_or(0.0) > 0.0
    }
}

/// One tenant on one GPU over the range.
#[derive(Debug, Clone)]
pub struct Holding {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub tenant: String,
    /// The hours in time order, merged (what an hour does not keep — SM and process counts —
    /// is zero here too), with the range's effective-use histogram.
    pub total: TenantAgg,
    /// Hour rows in time order.
    pub rows: Vec<(i64, TenantHour)>,
}

/// The funnel's quantities of one rollup row, in GPU-hours.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowHours {
    /// Allocation share × time.
    pub allocated: f64,
    /// Time a kernel ran × mean allocated share (at most the allocation).
    pub active: f64,
    /// Effective use × time, at most the allocation (`TenantAgg::effective_gpu_hours`).
    pub effective: f64,
    /// Effective use × time as measured, borrowed time included (`TenantAgg::used_gpu_hours`):
    /// what a before/after comparison of the work done reads.
    pub used: f64,
}

impl RowHours {
    pub fn of(a: &TenantHour) -> RowHours {
        let dt = if a.samples > 0 {
            a.covered_s / f64::from(a.samples) / 3600.0
        } else {
            0.0
        };
        let share = if a.alloc_n > 0 {
            a.alloc_share_sum / f64::from(a.alloc_n)
        } else {
            0.0
        };
        let allocated = a.allocated_gpu_hours();
        RowHours {
            allocated,
            active: (f64::from(a.active_n) * dt * share).min(allocated),
            effective: a.effective_gpu_hours(),
            used: a.used_gpu_hours(),
        }
    }
}

impl Holding {
    fn sum(&self, f: impl Fn(RowHours) -> f64) -> f64 {
        self.rows.iter().map(|(_, a)| f(RowHours::of(a))).sum()
    }

    pub fn allocated_hours(&self) -> f64 {
        self.sum(|r| r.allocated)
    }

    pub fn effective_hours(&self) -> f64 {
        self.sum(|r| r.effective)
    }

    /// Hours in which a kernel ran, weighted by the allocated share.
    pub fn active_hours(&self) -> f64 {
        self.sum(|r| r.active)
    }

    /// The hours of the holding, in time order.
    pub fn hours(&self) -> impl Iterator<Item = HourUse> + '_ {
        self.rows.iter().map(|(hour, a)| HourUse {
            hour: *hour,
            eff_p95: a.eff_p95.map(f64::from),
            mem_max_bytes: a.mem_used_max,
            allocated: a.alloc_n > 0,
        })
    }

    /// Mean allocated share of the GPU while allocated (1 whole, slices/7, 1/replicas).
    pub fn share(&self) -> f64 {
        if self.total.alloc_n > 0 {
            self.total.alloc_share_sum / f64::from(self.total.alloc_n)
        } else {
            0.0
        }
    }

    /// Whether it held the whole GPU (not a MIG instance or a time-sliced share), allowing for
    /// the rounding of a mean of shares.
    pub fn whole_gpu(&self) -> bool {
        self.share() >= 0.99
    }

    /// Share of allocated samples that were idle.
    pub fn idle_ratio(&self) -> f64 {
        if self.total.alloc_n > 0 {
            f64::from(self.total.idle_n) / f64::from(self.total.alloc_n)
        } else {
            0.0
        }
    }

    /// Effective over allocated GPU-hours, or None when effective use is unknown.
    pub fn effective_ratio(&self) -> Option<f64> {
        let alloc = self.allocated_hours();
        (self.total.eff_n > 0 && alloc > 0.0).then(|| self.effective_hours() / alloc)
    }

    /// Which signal effective use rests on.
    pub fn signal(&self) -> &'static str {
        signal(
            i64::from(self.total.eff_n),
            i64::from(self.total.eff_dcgm_n),
        )
    }

    /// p95 of the per-sample effective use over the range (GPU-equivalents).
    pub fn eff_p95(&self) -> Option<f64> {
        self.total.eff_hist.quantile(0.95, None).map(f64::from)
    }

    /// p99 of the hourly memory peaks (bytes).
    pub fn mem_p99(&self) -> Option<i64> {
        let mut v: Vec<i64> = self
            .rows
            .iter()
            .filter_map(|(_, a)| a.mem_used_max)
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = ((0.99 * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }
}

/// "sm_active", "gpu_util", "mixed" or "none": what effective use measured over `eff_n`
/// samples rests on when `dcgm_n` of them had DCGM.
pub fn signal(eff_n: i64, dcgm_n: i64) -> &'static str {
    match (eff_n, dcgm_n) {
        (0, _) => "none",
        (n, d) if d == n => "sm_active",
        (_, 0) => "gpu_util",
        _ => "mixed",
    }
}

/// Holdings of every (tenant, GPU) in the input's hour rollups, in a stable order.
pub fn holdings(input: &Input) -> Vec<Holding> {
    from_series(input.tenant_hours.iter().cloned())
}

/// [`holdings`], taking the input's tenant series instead of copying them: the analysis of a
/// large fleet holds each tenant-hour once.
pub fn take_holdings(input: &mut Input) -> Vec<Holding> {
    from_series(std::mem::take(&mut input.tenant_hours).into_iter())
}

fn from_series(series: impl Iterator<Item = TenantSeries>) -> Vec<Holding> {
    // (cluster, node, GPU, tenant) → hours and the sum of their histograms
    type Key = (String, String, String, String);
    let mut by: BTreeMap<Key, (Vec<(i64, TenantHour)>, Hist)> = BTreeMap::new();
    for s in series {
        let (rows, hist) = by.entry((s.cluster, s.node, s.gpu, s.tenant)).or_default();
        if rows.is_empty() {
            *rows = s.hours;
        } else {
            rows.extend(s.hours);
        }
        hist.merge(&s.eff_hist);
    }
    by.into_iter()
        .filter(|(_, (rows, _))| !rows.is_empty())
        .map(|((cluster, node, gpu, tenant), (mut rows, hist))| {
            if !rows.is_sorted_by_key(|r| r.0) {
                rows.sort_by_key(|r| r.0);
            }
            let mut total = TenantAgg::from(&rows[0].1);
            for w in rows.windows(2) {
                total.merge_next(&TenantAgg::from(&w[1].1), w[0].0 + HOUR_MS == w[1].0);
            }
            total.eff_hist = hist;
            Holding {
                cluster,
                node,
                gpu,
                tenant,
                total,
                rows,
            }
        })
        .collect()
}

/// An idle run: allocated, no kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleRun {
    pub from_ms: i64,
    pub to_ms: i64,
}

impl IdleRun {
    pub fn seconds(&self) -> f64 {
        (self.to_ms - self.from_ms) as f64 / 1000.0
    }
}

/// The idle runs of at least `min_s` seconds, from hour rows in time order. Runs that cross
/// hour boundaries are joined exactly; a long run inside one hour is placed at the hour (the
/// rollup keeps its length, not its position).
pub fn idle_runs(rows: &[(i64, TenantHour)], width_ms: i64, min_s: f64) -> Vec<IdleRun> {
    let mut out = Vec::new();
    let mut open: Option<(i64, f64)> = None; // (start ms, seconds so far)
    let mut last_bucket: Option<i64> = None;
    let push = |from: i64, secs: f64, out: &mut Vec<IdleRun>| {
        if secs >= min_s {
            out.push(IdleRun {
                from_ms: from,
                to_ms: from + (secs * 1000.0) as i64,
            });
        }
    };
    for (bucket, a) in rows {
        let adjacent = last_bucket.is_some_and(|b| b + width_ms == *bucket);
        // Whether this bucket's leading idle seconds continue a run open before it.
        let mut lead_taken = false;
        if let Some((start, secs)) = open.take() {
            if adjacent && a.all_idle() {
                open = Some((start, secs + a.covered_s));
                last_bucket = Some(*bucket);
                continue;
            }
            let joined = if adjacent { secs + a.idle_lead_s } else { secs };
            lead_taken = adjacent;
            push(start, joined, &mut out);
        } else if a.all_idle() {
            open = Some((*bucket, a.covered_s));
            last_bucket = Some(*bucket);
            continue;
        }
        // A run that starts with the bucket (the start of a holding or of the window, after a
        // gap or after an active hour) and ends inside it. An all-idle bucket after a gap goes
        // on as a trailing run below.
        if !lead_taken && !a.all_idle() && a.idle_lead_s > 0.0 {
            push(*bucket, a.idle_lead_s, &mut out);
        }
        // A run strictly inside this bucket.
        let edge = a.idle_lead_s.max(a.idle_trail_s);
        if a.idle_max_s > edge && a.idle_max_s >= min_s {
            push(*bucket, a.idle_max_s, &mut out);
        }
        if a.idle_trail_s > 0.0 {
            let end = bucket + width_ms;
            open = Some((end - (a.idle_trail_s * 1000.0) as i64, a.idle_trail_s));
        }
        last_bucket = Some(*bucket);
    }
    if let Some((start, secs)) = open {
        push(start, secs, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(lead: f64, trail: f64, max: f64) -> TenantHour {
        TenantHour {
            samples: 60,
            covered_s: 3600.0,
            idle_lead_s: lead,
            idle_trail_s: trail,
            idle_max_s: max,
            ..TenantHour::default()
        }
    }

    #[test]
    fn runs_join_across_hours_and_stop_at_gaps() {
        let h = HOUR_MS;
        let rows = vec![
            (0, hour(0.0, 1200.0, 1200.0)),
            (h, hour(3600.0, 3600.0, 3600.0)),
            (2 * h, hour(600.0, 0.0, 2400.0)),
            // A gap at 3h.
            (4 * h, hour(0.0, 0.0, 1800.0)),
        ];
        let runs = idle_runs(&rows, h, 1800.0);
        assert_eq!(runs.len(), 3, "{runs:?}");
        assert_eq!(runs[0].from_ms, h - 1_200_000);
        assert_eq!(runs[0].seconds(), 1200.0 + 3600.0 + 600.0);
        assert_eq!(
            runs[1],
            IdleRun {
                from_ms: 2 * h,
                to_ms: 2 * h + 2_400_000
            }
        );
        assert_eq!(runs[2].seconds(), 1800.0);
        assert_eq!(idle_runs(&rows, h, 5000.0).len(), 1);
        assert!(idle_runs(&rows, h, 7200.0).is_empty());
    }

    /// A run that starts with a bucket and ends inside it was never emitted unless
    /// a run was open right before it — at the start of a holding or of the window, after a
    /// gap, after an active hour.
    #[test]
    fn a_run_that_starts_with_a_bucket_and_ends_inside_it_is_kept() {
        let h = HOUR_MS;
        // The first bucket of a holding (or of the window): idle for 40 minutes, then busy.
        let runs = idle_runs(&[(0, hour(2400.0, 0.0, 2400.0))], h, 1800.0);
        assert_eq!(
            runs,
            [IdleRun {
                from_ms: 0,
                to_ms: 2_400_000
            }]
        );
        // After an active hour.
        let rows = vec![(0, hour(0.0, 0.0, 0.0)), (h, hour(1900.0, 0.0, 1900.0))];
        assert_eq!(idle_runs(&rows, h, 1800.0)[0].from_ms, h);
        // After a gap, with a run still open before it: both are kept, apart.
        let rows = vec![
            (0, hour(0.0, 2000.0, 2000.0)),
            (2 * h, hour(1900.0, 0.0, 1900.0)),
        ];
        let runs = idle_runs(&rows, h, 1800.0);
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[0].seconds(), 2000.0);
        assert_eq!((runs[1].from_ms, runs[1].seconds()), (2 * h, 1900.0));
        // Adjacent to an open run, the lead joins it and is not counted twice.
        let rows = vec![
            (0, hour(0.0, 1000.0, 1000.0)),
            (h, hour(1000.0, 0.0, 1000.0)),
        ];
        let runs = idle_runs(&rows, h, 1800.0);
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].seconds(), 2000.0);
        // A lead and a trail in one bucket, busy between: two runs (the trail one ends the
        // rows, still open).
        let runs = idle_runs(&[(0, hour(1000.0, 1000.0, 1000.0))], h, 900.0);
        assert_eq!(runs.len(), 2, "{runs:?}");
        // Shorter than the minimum: nothing.
        assert!(idle_runs(&[(0, hour(600.0, 0.0, 600.0))], h, 1800.0).is_empty());
        // An all-idle bucket after a gap is one run, not a lead and a trail.
        let rows = vec![
            (0, hour(0.0, 0.0, 0.0)),
            (2 * h, hour(3600.0, 3600.0, 3600.0)),
        ];
        assert_eq!(idle_runs(&rows, h, 1800.0).len(), 1);
    }
}
