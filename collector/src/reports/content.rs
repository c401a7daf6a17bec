//! What a weekly report says, taken from the week's analysis and the previous week's funnel.

use analytics::Measure;
use analytics::{Analysis, FindingKind, FunnelRow, Proposal};
use model::figures::count;
use serde::{Deserialize, Serialize};

/// Rows of a table at most (the HTML says how many more there were).
pub const TOP: usize = 15;

/// One idle allocation of the week.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdleRow {
    pub tenant: String,
    pub team: Option<String>,
    pub node: String,
    pub gpu: Option<String>,
    pub hours: f64,
    pub summary: String,
}

/// One team's work that waited for a GPU pool (a waiting_demand finding).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitingRow {
    pub team: String,
    pub pool: String,
    pub waited_gpu_hours: f64,
    pub idle_held_gpu_hours: f64,
    pub reclaimable_gpu_hours: f64,
    pub reclaimable_cost: f64,
    pub fragmented_gpu_hours: f64,
    /// The idle holders whose reclaim would have let it run, by name.
    pub holders: Vec<String>,
    pub summary: String,
}

/// One interference incident.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IncidentRow {
    pub victim: String,
    pub aggressor: String,
    pub node: String,
    pub gpu: Option<String>,
    pub hours: f64,
    /// How much the victim's rate dropped (0–1).
    pub rate_drop: Option<f64>,
    pub summary: String,
}

/// One open recommendation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecRow {
    pub kind: String,
    pub node: String,
    pub team: Option<String>,
    pub gpus_freed: f64,
    pub confidence: f64,
    pub summary: String,
    /// The config name to select, for MIG layouts.
    pub config: Option<String>,
}

/// One step applied through a label action, and its outcome check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutcomeRow {
    pub action: i64,
    pub kind: String,
    pub node: String,
    pub applied_ms: i64,
    pub verdict: model::step_outcome::Verdict,
    pub gpus_freed_predicted: f64,
    pub gpus_freed_measured: f64,
    pub contention_hours_predicted: f64,
    pub contention_hours_measured: f64,
    pub reasons: Vec<String>,
}

/// Everything a report shows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportData {
    pub week: String,
    pub timezone: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub generated_ms: i64,
    pub currency: String,
    pub fleet: FunnelRow,
    /// The previous week's fleet line, for the trend.
    pub previous: Option<FunnelRow>,
    pub teams: Vec<FunnelRow>,
    pub models: Vec<FunnelRow>,
    pub nodes: Vec<FunnelRow>,
    pub idle: Vec<IdleRow>,
    /// Work that waited for GPUs beside idle holdings, most reclaimable first.
    #[serde(default)]
    pub waiting: Vec<WaitingRow>,
    pub interference: Vec<IncidentRow>,
    pub recommendations: Vec<RecRow>,
    /// Steps applied in the week or before it, as the week's analysis measured them.
    #[serde(default)]
    pub outcomes: Vec<OutcomeRow>,
    pub limitations: Vec<String>,
    /// What enabling a per-GPU sharing mechanism would free beyond the plan, one sentence
    /// each, where it frees more.
    #[serde(default)]
    pub per_gpu: Vec<String>,
    /// How the week's plan, made without its last day, held on that day: one sentence.
    #[serde(default)]
    pub held_out: Option<String>,
    /// The pools that run out of GPUs at the demand forecast, a sentence each (docs/analytics.md,
    /// "Demand forecast").
    #[serde(default)]
    pub capacity: Vec<String>,
}

fn hours(from: i64, to: i64) -> f64 {
    (to - from) as f64 / 3_600_000.0
}

fn by_waste(rows: &[FunnelRow]) -> Vec<FunnelRow> {
    let mut v = rows.to_vec();
    v.sort_by(|a, b| {
        b.waste_gpu_hours
            .total_cmp(&a.waste_gpu_hours)
            .then_with(|| a.key.cmp(&b.key))
    });
    v
}

/// The week's waiting_demand findings as report rows, most reclaimable first.
fn waiting_rows(a: &Analysis, name: &dyn Fn(Option<&String>) -> String) -> Vec<WaitingRow> {
    let mut waiting: Vec<WaitingRow> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::WaitingDemand)
        .map(|f| {
            let m = |k: Measure| f.metrics.get(&k).copied().unwrap_or(0.0);
            WaitingRow {
                team: f.team.clone().unwrap_or_default(),
                pool: f.pool.clone().unwrap_or_else(|| "any GPU".into()),
                waited_gpu_hours: m(Measure::WaitingGpuHours),
                idle_held_gpu_hours: m(Measure::IdleHeldGpuHours),
                reclaimable_gpu_hours: m(Measure::ReclaimableGpuHours),
                reclaimable_cost: m(Measure::ReclaimableCost),
                fragmented_gpu_hours: m(Measure::FragmentedGpuHours),
                holders: f.tenants.iter().map(|k| name(Some(k))).collect(),
                summary: f.summary.clone(),
            }
        })
        .collect();
    waiting.sort_by(|x, y| {
        y.reclaimable_gpu_hours
            .total_cmp(&x.reclaimable_gpu_hours)
            .then(y.waited_gpu_hours.total_cmp(&x.waited_gpu_hours))
    });
    waiting
}

/// The pools that run out of GPUs at the analysis' demand forecast, a sentence each.
fn capacity(a: &Analysis) -> Vec<String> {
    a.forecast
        .iter()
        .flat_map(|f| &f.series)
        .filter_map(|s| {
            let r = s.run_out.as_ref()?;
            Some(format!("{} {}", s.scope.label(), r.sentence()))
        })
        .collect()
}

impl ReportData {
    /// The report of `week` from its analysis and, when there was data, the previous week's.
    pub fn build(
        week: String,
        timezone: String,
        a: &Analysis,
        previous: Option<&Analysis>,
        generated_ms: i64,
    ) -> ReportData {
        let name = |key: Option<&String>| {
            key.map(|k| a.tenant_names.get(k).unwrap_or(k).clone())
                .unwrap_or_default()
        };
        let mut idle: Vec<IdleRow> = a
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::IdleAllocation)
            .map(|f| IdleRow {
                tenant: name(f.tenants.first()),
                team: f.team.clone(),
                node: f.node.clone(),
                gpu: f.gpu.clone(),
                hours: f
                    .metrics
                    .get(&Measure::IdleHoursInRuns)
                    .copied()
                    .unwrap_or_else(|| hours(f.from_ms, f.to_ms)),
                summary: f.summary.clone(),
            })
            .collect();
        idle.sort_by(|x, y| y.hours.total_cmp(&x.hours));
        let waiting = waiting_rows(a, &name);
        let interference = a
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::Interference)
            .map(|f| IncidentRow {
                victim: name(f.tenants.first()),
                aggressor: name(f.tenants.get(1)),
                node: f.node.clone(),
                gpu: f.gpu.clone(),
                hours: f
                    .metrics
                    .get(&Measure::ContendedHours)
                    .copied()
                    .unwrap_or_else(|| hours(f.from_ms, f.to_ms)),
                rate_drop: f.metrics.get(&Measure::RateDrop).copied(),
                summary: f.summary.clone(),
            })
            .collect();
        let mut recommendations: Vec<RecRow> = a
            .recommendations
            .iter()
            .map(|r| RecRow {
                kind: r.kind.as_str().into(),
                node: r.node.clone(),
                team: r.team.clone(),
                gpus_freed: r.replay.gpus_freed,
                confidence: r.confidence,
                summary: r.summary.clone(),
                config: match &r.proposal {
                    Proposal::MigLayout { config_name, .. } => Some(config_name.clone()),
                    _ => None,
                },
            })
            .collect();
        recommendations.sort_by(|x, y| y.gpus_freed.total_cmp(&x.gpus_freed));
        let mut nodes = a.funnel.by_node.clone();
        nodes.sort_by(|x, y| x.key.cmp(&y.key));
        ReportData {
            week,
            timezone,
            from_ms: a.from_ms,
            to_ms: a.to_ms,
            generated_ms,
            currency: a.funnel.currency.clone(),
            fleet: a.funnel.total.clone(),
            previous: previous.map(|p| p.funnel.total.clone()),
            teams: by_waste(&a.funnel.by_team),
            models: by_waste(&a.funnel.by_model),
            nodes,
            idle,
            waiting,
            interference,
            recommendations,
            outcomes: a
                .outcomes
                .iter()
                .map(|o| OutcomeRow {
                    action: o.action,
                    kind: o.kind.clone(),
                    node: o.node.clone(),
                    applied_ms: o.applied_ms,
                    verdict: o.verdict,
                    gpus_freed_predicted: o.predicted.gpus_freed,
                    gpus_freed_measured: o.measured.gpus_freed,
                    contention_hours_predicted: o.predicted.contention_hours,
                    contention_hours_measured: o.measured.contention_hours,
                    reasons: o.reasons.clone(),
                })
                .collect(),
            limitations: a.limitations.clone(),
            per_gpu: a
                .plan
                .worth
                .iter()
                .filter(|w| w.beyond_plan > 0)
                .map(|w| w.sentence(&a.plan.currency))
                .collect(),
            held_out: a
                .plan
                .held_out
                .as_ref()
                .map(analytics::held_out::Score::sentence),
            capacity: capacity(a),
        }
    }

    /// Whether the week had no data at all (gpulens was not running yet).
    pub fn is_empty(&self) -> bool {
        self.fleet.is_empty()
    }

    /// GPUs the plan's steps free, together (a separation, beside the plan, is not counted).
    pub fn gpus_freed(&self) -> f64 {
        self.recommendations
            .iter()
            .filter(|r| r.kind != analytics::recommend::RecKind::Separate.as_str())
            .map(|r| r.gpus_freed)
            .sum()
    }

    /// A one-paragraph summary (webhook messages, the report list).
    pub fn summary(&self) -> String {
        let f = &self.fleet;
        // The figures as the report's tables and the dashboard print them (model::figures).
        let pct = |x: Option<f64>| x.map_or("n/a".to_owned(), model::figures::percent);
        let num = web::format::num;
        let mut s = format!(
            "gpulens weekly report {}: {} GPU-hours allocated, {} effective ({}), {} wasted ({}).",
            self.week,
            num(f.allocated_gpu_hours),
            num(f.effective_gpu_hours),
            pct(f.effective_ratio),
            num(f.waste_gpu_hours),
            web::format::money(f.waste_cost, &self.currency),
        );
        s.push_str(&energy_sentence(f));
        if let Some(p) = &self.previous
            && p.allocated_gpu_hours > 0.0
        {
            s.push_str(&format!(
                " Allocation {} against the week before.",
                web::format::change(f.allocated_gpu_hours, p.allocated_gpu_hours)
            ));
        }
        s.push_str(&format!(
            " {}, {}, {} freeing {}.",
            count(
                self.idle.len() as f64,
                "idle allocation",
                "idle allocations"
            ),
            count(
                self.interference.len() as f64,
                "interference incident",
                "interference incidents"
            ),
            count(
                self.recommendations.len() as f64,
                "open recommendation",
                "open recommendations"
            ),
            count(self.gpus_freed(), "GPU", "GPUs")
        ));
        // A partial week says so first, wherever the summary is read (the report list,
        // webhook messages).
        if let Some(partial) = self
            .limitations
            .iter()
            .find(|l| l.starts_with("Partial week"))
        {
            s = format!("{partial} {s}");
        }
        s
    }
}

/// The fleet's energy in a sentence (docs/cost.md, "Energy"); empty where it is unknown.
pub fn energy_sentence(f: &analytics::FunnelRow) -> String {
    let Some(e) = f.energy else {
        return String::new();
    };
    let emissions = e
        .co2e_kg
        .map(|kg| format!(", emitting {} kg CO₂e", web::format::num(kg)))
        .unwrap_or_default();
    format!(
        " The GPUs drew {} kWh{emissions}; {} kWh of it on allocations that ran no kernel and {} kWh on GPUs nobody held.",
        web::format::num(e.kwh),
        web::format::num(e.idle_kwh),
        web::format::num(e.unallocated_kwh.unwrap_or(0.0))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use analytics::forecast::{Forecast, Forecasts, RunOut, Scope};

    #[test]
    fn the_report_names_the_pools_that_run_out_at_the_forecast() {
        let pool = |model: &str, run_out| Forecast {
            scope: Scope::Pool {
                cluster: "prod".into(),
                model: model.into(),
            },
            capacity: Some(8.0),
            projections: Vec::new(),
            run_out,
        };
        let from_ms = 1_000 * 3_600_000;
        let a = Analysis {
            forecast: Some(Forecasts {
                from_ms: 0,
                to_ms: from_ms,
                horizon_h: 672,
                series: vec![
                    pool(
                        "H100",
                        Some(RunOut {
                            capacity: 8.0,
                            at_ms: Some(from_ms + 72 * 3_600_000),
                            earliest_ms: Some(from_ms + 48 * 3_600_000),
                            latest_ms: Some(from_ms + 120 * 3_600_000),
                            measured: true,
                            from_ms,
                            horizon_h: 672,
                        }),
                    ),
                    pool("L40S", None),
                ],
            }),
            ..Analysis::default()
        };
        let d = ReportData::build("2026-W49".into(), "UTC".into(), &a, None, from_ms);
        assert_eq!(
            d.capacity,
            vec![
                "prod / H100 runs out of its 8 GPUs in 3 days at the forecast (at the measured error: as early as in 2 days, as late as in 5 days)"
                    .to_owned()
            ]
        );
    }
}
