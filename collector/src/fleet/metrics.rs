//! The fleet on `/metrics`, for Prometheus and the Grafana dashboards (docs/metrics.md):
//! each GPU's newest readings as this collector received them, and the newest analysis (funnel
//! by fleet, team and node; findings; recommendations) and alert counts. Built at scrape time
//! into its own registry, appended to the collector's own metrics.
//!
//! Cardinality is bounded by the fleet: one series per GPU and reading, one per team and node
//! and funnel stage, a fixed set per finding kind, severity and alert state. Tenants are not
//! labels here (they come and go with every pod); they are in the analysis API and the
//! dashboard, and, opted in, on their own series (`tenant_series.rs`).

use std::collections::HashMap;
use std::sync::Mutex;

use analytics::Analysis;
use model::wire::v1::Batch;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::by_node::{ByNode, STALE_MS, slot};

type FGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Clone, Default)]
struct Reading {
    ts_ms: i64,
    model: String,
    util: Option<f64>,
    sm_active: Option<f64>,
    mem_used: Option<f64>,
    mem_total: Option<f64>,
    power: Option<f64>,
    temp: Option<f64>,
    allocated: f64,
}

/// Each GPU's newest readings, updated as batches are stored; with `[metrics]
/// tenant_series`, each GPU-holding tenant's too.
#[derive(Debug, Default)]
pub struct LatestGpus {
    /// Each node's GPUs by uuid, with their newest readings.
    gpus: Mutex<ByNode<HashMap<String, Reading>>>,
    tenants: Option<super::tenant_series::TenantGauges>,
}

impl LatestGpus {
    /// Readings for `/metrics` as `[metrics]` asks.
    pub fn new(settings: &super::MetricsSettings) -> LatestGpus {
        LatestGpus {
            gpus: Mutex::default(),
            tenants: settings.tenant_series.then(Default::default),
        }
    }

    /// Takes the batch's newest snapshot of each GPU. Called for every stored batch: looked up
    /// by the batch's own strings (nothing is allocated for a GPU seen before), allocations
    /// summed in one pass over the snapshot.
    pub fn record(&self, b: &Batch) {
        let Some(snap) = b.snapshots.iter().max_by_key(|s| s.ts) else {
            return;
        };
        if let Some(t) = &self.tenants {
            t.record(b);
        }
        type Fast<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
        let mut allocated: Fast<&str, f64> = Fast::default();
        for a in &snap.allocations {
            *allocated.entry(a.gpu_uuid.as_str()).or_default() += f64::from(a.share);
        }
        let models: Fast<&str, &str> = b
            .inventory
            .iter()
            .flatten()
            .map(|g| (g.uuid.as_str(), g.model.as_str()))
            .collect();
        let mut nodes = self.gpus.lock().expect("latest gpus");
        let node = nodes.node_mut(&b.cluster, &b.node);
        for g in &snap.gpus {
            let r = slot(node, &g.gpu_uuid);
            if r.ts_ms > snap.ts {
                continue;
            }
            if let Some(model) = models.get(g.gpu_uuid.as_str())
                && r.model != *model
            {
                r.model = (*model).to_owned();
            }
            r.ts_ms = snap.ts;
            r.util = g.gpu_util.map(f64::from);
            r.sm_active = g.sm_active.map(f64::from);
            r.mem_used = g.mem_used_bytes.map(|x| x as f64);
            r.mem_total = g.mem_total_bytes.map(|x| x as f64);
            r.power = g.power_w.map(f64::from);
            r.temp = g.temp_c.map(f64::from);
            r.allocated = allocated
                .get(g.gpu_uuid.as_str())
                .copied()
                .unwrap_or(0.0)
                .min(1.0);
        }
    }

    /// The readings not stale at `now_ms` (stale ones are dropped), keyed (cluster, node, GPU).
    fn fresh(&self, now_ms: i64) -> Vec<((String, String, String), Reading)> {
        let mut out = Vec::new();
        self.gpus
            .lock()
            .expect("latest gpus")
            .retain(|cluster, node, gpus| {
                gpus.retain(|_, r| now_ms - r.ts_ms <= STALE_MS);
                out.extend(gpus.iter().map(|(gpu, r)| {
                    (
                        (cluster.to_owned(), node.to_owned(), gpu.clone()),
                        r.clone(),
                    )
                }));
                !gpus.is_empty()
            });
        out
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    cluster: String,
    node: String,
    gpu_uuid: String,
    gpu_model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OfLabels {
    of: &'static str,
}

/// A pool's run-out time at the forecast or an edge of its band.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolRunOutLabels {
    cluster: String,
    gpu_model: String,
    at: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TeamStageLabels {
    team: String,
    stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeStageLabels {
    cluster: String,
    node: String,
    stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FindingLabels {
    kind: &'static str,
    severity: &'static str,
}

/// An ongoing finding's subject: one series per GPU (or node) and finding kind, so bounded by
/// the inventory; the tenant is left out on purpose (see the module comment).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FindingSubjectLabels {
    cluster: String,
    node: String,
    gpu_uuid: String,
    kind: &'static str,
    severity: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabels {
    state: &'static str,
    severity: String,
}

/// Funnel stages in GPU-seconds (Prometheus' base unit; dashboards show hours).
fn stages(r: &analytics::FunnelRow) -> [(&'static str, f64); 5] {
    [
        ("capacity", r.capacity_gpu_hours.unwrap_or(0.0) * 3600.0),
        ("allocated", r.allocated_gpu_hours * 3600.0),
        ("active", r.active_gpu_hours * 3600.0),
        ("effective", r.effective_gpu_hours * 3600.0),
        ("waste", r.waste_gpu_hours * 3600.0),
    ]
}

/// The fleet's metrics as OpenMetrics text (without the final `# EOF`). `scope`: the teams
/// a team-scoped caller sees; such a caller gets no per-tenant series and only its own teams'
/// `team_gpu` rows (they read every team's namespaces and pods here).
pub fn encode(
    latest: &LatestGpus,
    analysis: Option<&Analysis>,
    alerts: &[crate::alerts::Alert],
    now_ms: i64,
    scope: Option<&std::collections::BTreeSet<String>>,
) -> String {
    let mut reg = Registry::with_prefix("gpulens");
    gpu_families(&mut reg, latest, now_ms);
    if let Some(t) = &latest.tenants
        && scope.is_none()
    {
        t.encode(&mut reg, now_ms);
    }
    if let Some(a) = analysis {
        funnel_families(&mut reg, a, scope);
        energy_families(&mut reg, a, scope);
        finding_families(&mut reg, a);
        recommendation_families(&mut reg, a);
    }
    alert_families(&mut reg, alerts);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).expect("encoding to a String");
    out.trim_end_matches("# EOF\n").to_owned()
}

/// A gauge family registered on `reg`, with its unit when it has one.
fn family<L>(reg: &mut Registry, name: &str, help: &str, unit: Option<Unit>) -> Family<L, FGauge>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, FGauge>::default();
    match unit {
        Some(u) => reg.register_with_unit(name, help, u, f.clone()),
        None => reg.register(name, help, f.clone()),
    }
    f
}

/// Each fresh GPU's newest readings.
fn gpu_families(reg: &mut Registry, latest: &LatestGpus, now_ms: i64) {
    let util = family::<GpuLabels>(
        reg,
        "fleet_gpu_utilization_ratio",
        "Newest NVML utilization of each GPU (0-1)",
        None,
    );
    let sm = family::<GpuLabels>(
        reg,
        "fleet_gpu_sm_active_ratio",
        "Newest DCGM SM activity of each GPU (0-1); absent without DCGM",
        None,
    );
    let mem = family::<GpuLabels>(
        reg,
        "fleet_gpu_memory_used",
        "Newest framebuffer memory in use of each GPU",
        Some(Unit::Bytes),
    );
    let mem_total = family::<GpuLabels>(
        reg,
        "fleet_gpu_memory_total",
        "Framebuffer memory of each GPU",
        Some(Unit::Bytes),
    );
    let power = family::<GpuLabels>(
        reg,
        "fleet_gpu_power",
        "Newest power draw of each GPU",
        Some(Unit::Other("watts".into())),
    );
    let temp = family::<GpuLabels>(
        reg,
        "fleet_gpu_temperature",
        "Newest temperature of each GPU",
        Some(Unit::Celsius),
    );
    let alloc = family::<GpuLabels>(
        reg,
        "fleet_gpu_allocated_ratio",
        "Share of each GPU held by allocations in its newest sample (0-1)",
        None,
    );
    for ((cluster, node, gpu_uuid), r) in latest.fresh(now_ms) {
        let l = GpuLabels {
            cluster,
            node,
            gpu_uuid,
            gpu_model: r.model.clone(),
        };
        for (f, v) in [
            (&util, r.util),
            (&sm, r.sm_active),
            (&mem, r.mem_used),
            (&mem_total, r.mem_total),
            (&power, r.power),
            (&temp, r.temp),
            (&alloc, Some(r.allocated)),
        ] {
            if let Some(v) = v {
                f.get_or_create(&l).set(v);
            }
        }
    }
}

/// GPU time per funnel stage: the fleet's, each team's the caller sees, each node's; and the
/// waste's cost.
fn funnel_families(
    reg: &mut Registry,
    a: &Analysis,
    scope: Option<&std::collections::BTreeSet<String>>,
) {
    let fleet = family::<StageLabels>(
        reg,
        "funnel_gpu",
        "GPU time of the fleet per funnel stage in the newest analysis window",
        Some(Unit::Seconds),
    );
    for (stage, v) in stages(&a.funnel.total) {
        fleet.get_or_create(&StageLabels { stage }).set(v);
    }
    let team = family::<TeamStageLabels>(
        reg,
        "team_gpu",
        "GPU time per team and funnel stage in the newest analysis window",
        Some(Unit::Seconds),
    );
    for r in a
        .funnel
        .by_team
        .iter()
        .filter(|r| scope.is_none_or(|s| s.contains(&r.key)))
    {
        for (stage, v) in stages(r).into_iter().skip(1) {
            team.get_or_create(&TeamStageLabels {
                team: r.key.clone(),
                stage,
            })
            .set(v);
        }
    }
    let node = family::<NodeStageLabels>(
        reg,
        "node_gpu",
        "GPU time per node and funnel stage in the newest analysis window",
        Some(Unit::Seconds),
    );
    for r in &a.funnel.by_node {
        for (stage, v) in stages(r) {
            node.get_or_create(&NodeStageLabels {
                cluster: r.cluster.clone().unwrap_or_else(|| "default".into()),
                node: r.key.clone(),
                stage,
            })
            .set(v);
        }
    }
    let waste = family::<StageLabels>(
        reg,
        "funnel_waste_cost",
        "Cost of allocated but unused GPU-hours in the newest analysis window, in the configured currency",
        None,
    );
    waste
        .get_or_create(&StageLabels { stage: "waste" })
        .set(a.funnel.total.waste_cost);
}

/// Energy and emissions of the newest analysis window (docs/cost.md, "Energy"): the fleet's
/// GPUs drew, charged to idle allocations, charged to nobody; each team's the caller sees.
fn energy_families(
    reg: &mut Registry,
    a: &Analysis,
    scope: Option<&std::collections::BTreeSet<String>>,
) {
    const J: f64 = analytics::energy::J_PER_KWH;
    let Some(total) = a.funnel.total.energy else {
        return;
    };
    let fleet = family::<StageLabels>(
        reg,
        "funnel_energy",
        "Energy the fleet's GPUs drew in the newest analysis window: all of it (drawn), charged to allocations that ran no kernel (idle_allocated), charged to no tenant (unallocated)",
        Some(Unit::Joules),
    );
    for (stage, kwh) in [
        ("drawn", total.kwh),
        ("idle_allocated", total.idle_kwh),
        ("unallocated", total.unallocated_kwh.unwrap_or(0.0)),
    ] {
        fleet.get_or_create(&StageLabels { stage }).set(kwh * J);
    }
    let team = family::<TeamStageLabels>(
        reg,
        "team_energy",
        "Energy charged to each team in the newest analysis window (charged), and of it while its allocations ran no kernel (idle_allocated)",
        Some(Unit::Joules),
    );
    let co2e = family::<TeamStageLabels>(
        reg,
        "team_co2e",
        "Emissions of the energy charged to each team in the newest analysis window at the configured grid intensity",
        Some(Unit::Other("grams".into())),
    );
    for r in a
        .funnel
        .by_team
        .iter()
        .filter(|r| scope.is_none_or(|s| s.contains(&r.key)))
    {
        let Some(e) = r.energy else { continue };
        for (stage, kwh) in [("charged", e.kwh), ("idle_allocated", e.idle_kwh)] {
            team.get_or_create(&TeamStageLabels {
                team: r.key.clone(),
                stage,
            })
            .set(kwh * J);
        }
        if let Some(kg) = e.co2e_kg {
            co2e.get_or_create(&TeamStageLabels {
                team: r.key.clone(),
                stage: "charged",
            })
            .set(kg * 1000.0);
        }
    }
}

/// Findings by kind and severity, and each ongoing finding's headline number.
fn finding_families(reg: &mut Registry, a: &Analysis) {
    let findings =
        family::<FindingLabels>(reg, "findings", "Findings of the newest analysis", None);
    for k in analytics::FindingKind::ALL {
        for s in [
            analytics::Severity::Info,
            analytics::Severity::Warning,
            analytics::Severity::Critical,
        ] {
            let n = a
                .findings
                .iter()
                .filter(|f| f.kind == k && f.severity == s)
                .count();
            findings
                .get_or_create(&FindingLabels {
                    kind: k.as_str(),
                    severity: s.as_str(),
                })
                .set(n as f64);
        }
    }
    let headline = family::<FindingSubjectLabels>(
        reg,
        "finding_headline",
        "Headline number of each ongoing finding, largest per GPU or node and kind: idle hours (idle_allocation), wasted GPU-hours (underutilized), slowdown percent (interference), error count (hardware), hours (other kinds); the generated Prometheus alert rules read it",
        None,
    );
    for f in a.findings.iter().filter(|f| crate::alerts::ongoing(a, f)) {
        let g = headline.get_or_create(&FindingSubjectLabels {
            cluster: f.cluster.clone(),
            node: f.node.clone(),
            gpu_uuid: f.gpu.clone().unwrap_or_default(),
            kind: f.kind.as_str(),
            severity: f.severity.as_str(),
        });
        let v = f.headline().0;
        if v > g.get() {
            g.set(v);
        }
    }
}

/// Recommendations and the GPUs they free, by kind; when the analysis ran.
fn recommendation_families(reg: &mut Registry, a: &Analysis) {
    let recs = family::<KindLabels>(
        reg,
        "recommendations",
        "Recommendations of the newest analysis",
        None,
    );
    let freed = family::<KindLabels>(
        reg,
        "recommendations_gpus_freed",
        "GPUs the newest analysis' recommendations would free",
        None,
    );
    for k in analytics::recommend::RecKind::ALL {
        let mine: Vec<_> = a.recommendations.iter().filter(|r| r.kind == k).collect();
        recs.get_or_create(&KindLabels { kind: k.as_str() })
            .set(mine.len() as f64);
        freed
            .get_or_create(&KindLabels { kind: k.as_str() })
            .set(mine.iter().map(|r| r.replay.gpus_freed).sum());
    }
    // How the plan made without the window's most recent day held on it: the share of its
    // steps and of the GPUs they free (absent while history is too short).
    if let Some(score) = &a.plan.held_out {
        let held = family::<OfLabels>(
            reg,
            "plan_held_out_ratio",
            "Share of the steps (of=steps) and of the GPUs they free (of=gpus) of the plan made without the window's most recent part that held when replayed on it",
            None,
        );
        for (of, ratio) in [("steps", score.steps_ratio()), ("gpus", score.gpus_ratio())] {
            if let Some(r) = ratio {
                held.get_or_create(&OfLabels { of }).set(r);
            }
        }
    }
    run_out_family(reg, a);
    let when = family::<StageLabels>(
        reg,
        "analysis_timestamp",
        "When the newest analysis ran (Unix time)",
        Some(Unit::Seconds),
    );
    when.get_or_create(&StageLabels { stage: "generated" })
        .set(a.generated_ms as f64 / 1000.0);
}

/// When each pool runs out of GPUs at the demand forecast (only pools that do within its
/// horizon): seconds from the forecast's start, at the forecast (`at=forecast`) and at the
/// early and late edges of its measured error band.
fn run_out_family(reg: &mut Registry, a: &Analysis) {
    let Some(f) = &a.forecast else {
        return;
    };
    let g = family::<PoolRunOutLabels>(
        reg,
        "pool_run_out",
        "Time from the demand forecast's start until the pool has less than half a GPU free (allocated + waiting at the forecast, at=forecast; at the error band's edges, at=earliest|latest); only pools that run out within the forecast's horizon",
        Some(Unit::Seconds),
    );
    for s in &f.series {
        let (Some(r), analytics::forecast::Scope::Pool { cluster, model }) = (&s.run_out, &s.scope)
        else {
            continue;
        };
        for (at, ms) in [
            ("forecast", r.at_ms),
            ("earliest", r.earliest_ms),
            ("latest", r.latest_ms),
        ] {
            if let Some(ms) = ms {
                g.get_or_create(&PoolRunOutLabels {
                    cluster: cluster.clone(),
                    gpu_model: model.clone(),
                    at,
                })
                .set((ms - r.from_ms) as f64 / 1000.0);
            }
        }
    }
}

/// Alerts by state and severity.
fn alert_families(reg: &mut Registry, alerts: &[crate::alerts::Alert]) {
    let al = family::<AlertLabels>(reg, "alerts", "Alerts by state and severity", None);
    for state in ["pending", "firing"] {
        for severity in ["info", "warning", "critical"] {
            let n = alerts
                .iter()
                .filter(|x| {
                    x.state.as_str() == state
                        && x.labels.get("severity").map(String::as_str) == Some(severity)
                })
                .count();
            al.get_or_create(&AlertLabels {
                state,
                severity: severity.into(),
            })
            .set(n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_held_out_score_is_a_ratio_of_steps_and_of_gpus() {
        let latest = LatestGpus::new(&super::super::MetricsSettings::default());
        let mut a = Analysis::default();
        a.plan.held_out = Some(analytics::held_out::Score {
            steps: 4,
            steps_held: 3,
            gpus_freed: 2.0,
            gpus_held: 1.0,
            ..Default::default()
        });
        let text = encode(&latest, Some(&a), &[], 0, None);
        assert!(
            text.contains("gpulens_plan_held_out_ratio{of=\"steps\"} 0.75")
                && text.contains("gpulens_plan_held_out_ratio{of=\"gpus\"} 0.5"),
            "{text}"
        );
        // Too little history: no series, not a zero.
        a.plan.held_out = Some(analytics::held_out::Score {
            note: Some("too little history".into()),
            ..Default::default()
        });
        let text = encode(&latest, Some(&a), &[], 0, None);
        assert!(!text.contains("gpulens_plan_held_out_ratio{"), "{text}");
    }

    #[test]
    fn a_pool_that_runs_out_has_its_time_at_the_forecast_and_its_edges() {
        use analytics::forecast::{Forecast, Forecasts, RunOut, Scope};
        let latest = LatestGpus::new(&super::super::MetricsSettings::default());
        let mut a = Analysis::default();
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
        a.forecast = Some(Forecasts {
            from_ms: 0,
            to_ms: from_ms,
            horizon_h: 672,
            series: vec![
                pool(
                    "H100",
                    Some(RunOut {
                        capacity: 8.0,
                        at_ms: Some(from_ms + 48 * 3_600_000),
                        earliest_ms: Some(from_ms + 24 * 3_600_000),
                        latest_ms: None,
                        measured: true,
                        from_ms,
                        horizon_h: 672,
                    }),
                ),
                pool("L40S", None),
            ],
        });
        let text = encode(&latest, Some(&a), &[], 0, None);
        let line = |at: &str, v: &str| {
            format!(
                "gpulens_pool_run_out_seconds{{cluster=\"prod\",gpu_model=\"H100\",at=\"{at}\"}} {v}"
            )
        };
        assert!(text.contains(&line("forecast", "172800")), "{text}");
        assert!(text.contains(&line("earliest", "86400")), "{text}");
        assert!(!text.contains("at=\"latest\""), "{text}");
        assert!(
            !text.contains("L40S"),
            "a pool that keeps GPUs free has no series: {text}"
        );
    }
}
