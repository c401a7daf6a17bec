//! Runs the analytics crate over the store: reads inventory and rollups into an
//! [`analytics::Input`], analyses it off the async runtime, and keeps the newest results in
//! `analysis_runs` so every collector serves the same findings. Scheduled runs take a
//! PostgreSQL advisory lock so exactly one collector computes them.

pub mod api;
pub mod cost;
pub mod forecast;
pub mod metrics;
mod pairs;
pub mod ranged;
mod requested;
pub mod view;

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use analytics::input::{GpuHealth, GpuRef, MigRef, NodeRef, OrphanProcess, TenantRef};
use analytics::{Analysis, Input};
use model::rollup::{HOUR_MS, bucket_of};

use store::{LOCK_ANALYTICS, Scope, Store};

pub use api::routes;
use collector_shared::newest::{Newest, stored};
use collector_shared::shared::Shared;
pub use metrics::AnalysisMetrics;
use metrics::PassOutcome;
pub use ranged::{RangeUse, Ranged};

/// What the analysis handlers need.
#[derive(Debug, Clone)]
pub struct AnalysisState {
    pub shared: Shared,
    /// The `[analytics]` settings.
    pub analytics: Arc<Settings>,
    pub newest: Arc<Newest>,
    pub metrics: AnalysisMetrics,
}

/// How much history a scheduled analysis covers, how often it runs, and its thresholds.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub every: Duration,
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub window: Duration,
    /// Stored runs to keep.
    pub keep: i64,
    #[serde(flatten)]
    pub thresholds: analytics::Config,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            every: Duration::from_secs(600),
            window: Duration::from_secs(7 * 86_400),
            keep: 48,
            thresholds: analytics::Config::default(),
        }
    }
}

/// What loading read, for progress output and benchmarks: of every cluster, when the fleet is
/// analysed one cluster at a time.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadStats {
    /// The parts read and analysed one at a time (a cluster, or a part of one whose pools
    /// share nothing: [`analytics::parts`]).
    pub parts: usize,
    pub gpu_hours: usize,
    pub tenant_hours: usize,
    pub minute_rows: usize,
    pub pair_hours: usize,
    /// Node-hours of pair-hours measured from minutes, and read as kept.
    pub pair_hours_measured: usize,
    pub pair_hours_kept: usize,
    pub load: Duration,
    /// Parts of `load`: inventory, hour rollups, minute rollups, health and orphans.
    pub load_inventory: Duration,
    pub load_hours: Duration,
    pub load_pair_hours: Duration,
    pub load_health: Duration,
    pub analyze: Duration,
    /// The demand forecast: reading its history (`forecast_hours` pool-team-hours) and fitting.
    pub forecast: Duration,
    pub forecast_hours: usize,
    /// The process' peak resident memory (VmHWM) once the (last cluster's) load was done, in
    /// MiB.
    pub peak_after_load_mib: Option<f64>,
}

/// What an analysis covers: the hours in [from, to) (ms), judged at `now` (an analysis of a
/// past range has `now == to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: i64,
    pub to: i64,
    pub now: i64,
}

impl Span {
    /// [from, to), judged as it stood at its end.
    pub fn closed(from: i64, to: i64) -> Span {
        Span { from, to, now: to }
    }
}

/// Reads what the analysis of `span` needs, the whole fleet at once.
pub async fn load(store: &Store, cfg: &analytics::Config, span: Span) -> anyhow::Result<Input> {
    load_timed(store, cfg, span, &mut LoadStats::default()).await
}

/// [`load`], recording how long each part took in `stats`.
pub async fn load_timed(
    store: &Store,
    cfg: &analytics::Config,
    span: Span,
    stats: &mut LoadStats,
) -> anyhow::Result<Input> {
    let mut input = load_frame(store, span, stats).await?;
    load_series(store, cfg, Scope::Fleet, &mut input, stats).await?;
    Ok(input)
}

/// Loads and analyses [from, to) one cluster at a time, and merges the clusters' analyses
/// into the fleet's ([`analytics::merge()`]: the same analysis as one of the whole fleet). The
/// inventory, health and the other small parts are read once; each cluster's hour series and
/// pair-hours are read, analysed and dropped before the next cluster's, so the process holds
/// one cluster's series at a time, not the fleet's. `stats` adds up every cluster's load
/// and analysis.
pub async fn analyze_by_cluster(
    store: &Store,
    cfg: &analytics::Config,
    span: Span,
    stats: &mut LoadStats,
) -> anyhow::Result<Analysis> {
    let started = Instant::now();
    let frame = load_frame(store, span, stats).await?;
    stats.load += started.elapsed();
    let mut parts = Vec::new();
    for piece in pieces(&frame, cfg.part_gpus) {
        stats.parts += 1;
        parts.push(analyze_part(store, cfg, piece, stats).await?);
    }
    let gpus = frame.gpus.clone();
    let mut analysis = match analytics::merge(parts) {
        Some(a) => a,
        // No cluster yet: the analysis of nothing, over the range.
        None => {
            tokio::task::spawn_blocking({
                let cfg = cfg.clone();
                move || analytics::analyze_owned(frame, &cfg)
            })
            .await??
        }
    };
    let (took, rows) = forecast::add(store, cfg, gpus, span.to, &mut analysis).await?;
    stats.forecast += took;
    stats.forecast_hours = rows;
    Ok(analysis)
}

/// A part of the fleet the analysis reads and analyses at once: a cluster, or a part of one
/// whose pools share nothing ([`analytics::parts`]), with its part of the frame.
#[derive(Debug)]
pub struct Piece {
    pub cluster: String,
    /// The part's nodes; None for the whole cluster.
    pub nodes: Option<Vec<String>>,
    pub input: Input,
}

impl Piece {
    /// What the store reads for it.
    pub fn scope(&self) -> Scope<'_> {
        match &self.nodes {
            Some(nodes) => Scope::Nodes(&self.cluster, nodes),
            None => Scope::Cluster(&self.cluster),
        }
    }
}

/// The pieces of `frame` ([`load_frame`]) in the order the analysis takes them: each cluster
/// in name order; one of more than `part_gpus` GPUs cut into its parts, packed into reads of
/// at most that many GPUs ([`analytics::parts`]).
pub fn pieces(frame: &Input, part_gpus: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    for cluster in frame.clusters() {
        let of_cluster = frame.of_cluster(&cluster);
        let parts = if of_cluster.gpus.len() > part_gpus {
            let parts = analytics::parts::parts(&of_cluster);
            analytics::parts::packed(&of_cluster, parts, part_gpus)
        } else {
            Vec::new()
        };
        if parts.len() <= 1 {
            out.push(Piece {
                cluster,
                nodes: None,
                input: of_cluster,
            });
            continue;
        }
        for part in &parts {
            out.push(Piece {
                cluster: cluster.clone(),
                nodes: Some(part.nodes.iter().cloned().collect()),
                input: part.input(&of_cluster),
            });
        }
    }
    out
}

/// Loads the piece's series into its frame and analyses it on a blocking thread.
async fn analyze_part(
    store: &Store,
    cfg: &analytics::Config,
    mut piece: Piece,
    stats: &mut LoadStats,
) -> anyhow::Result<Analysis> {
    let t = Instant::now();
    let mut input = std::mem::take(&mut piece.input);
    load_series(store, cfg, piece.scope(), &mut input, stats).await?;
    stats.load += t.elapsed();
    stats.peak_after_load_mib = model::own_usage::peak_rss_mib();
    let t = Instant::now();
    let cfg = cfg.clone();
    let analysis =
        tokio::task::spawn_blocking(move || analytics::analyze_owned(input, &cfg)).await??;
    stats.analyze += t.elapsed();
    Ok(analysis)
}

/// Everything but the hour series and pair-hours: inventory, health, orphans, applied steps
/// and waiting work (small beside the series), with the range aligned to whole hours. A
/// cluster's part of it ([`Input::of_cluster`]) with [`load_series`] is what that cluster's
/// analysis reads.
pub async fn load_frame(store: &Store, span: Span, stats: &mut LoadStats) -> anyhow::Result<Input> {
    let mut lap = Instant::now();
    let mut input = load_inventory(store, span).await?;
    let (from, to) = (input.from_ms, input.to_ms);
    stats.load_inventory += lap.elapsed();
    lap = Instant::now();
    input.health = health(store, from, to).await?;
    input.orphans = store
        .orphans(from, to)
        .await?
        .into_iter()
        .map(|o| OrphanProcess {
            cluster: o.cluster,
            node: o.node,
            gpu: o.gpu_uuid,
            pid: o.pid,
            start_time_ms: o.start_time_ms,
            first_seen_ms: o.first_ms,
            last_seen_ms: o.last_ms,
            mem_max_bytes: o.mem_max_bytes.unwrap_or(0),
        })
        .collect();
    input.applied = applied_steps(store, from, to).await?;
    input.waiting = store
        .waiting(from, to)
        .await?
        .into_iter()
        .map(forecast::waiting_of)
        .collect();
    stats.load_health += lap.elapsed();
    Ok(input)
}

/// The inventory alone — nodes, GPUs, tenants with their teams, the mechanisms seen — over
/// the span aligned to whole hours: what a read of the hour series needs beside it (the cost
/// export reads no more).
pub async fn load_inventory(store: &Store, span: Span) -> anyhow::Result<Input> {
    let Span { from, to, now } = span;
    let mut input = Input {
        from_ms: bucket_of(from, HOUR_MS),
        to_ms: to,
        now_ms: now,
        ..Input::default()
    };
    inventory(
        &mut input,
        &store.nodes().await?,
        &store.gpus(None).await?,
        &store.tenants().await?,
    );
    seen_mechanisms(&mut input, &store.node_mechanisms().await?);
    Ok(input)
}

/// Adds the hour series and pair-hours of the scope's nodes over the input's range.
pub async fn load_series(
    store: &Store,
    cfg: &analytics::Config,
    scope: Scope<'_>,
    input: &mut Input,
    stats: &mut LoadStats,
) -> anyhow::Result<()> {
    let lap = Instant::now();
    (input.gpu_hours, input.tenant_hours) =
        store.hour_series(scope, input.from_ms, input.to_ms).await?;
    stats.load_hours += lap.elapsed();
    stats.gpu_hours += input.gpu_hour_rows();
    stats.tenant_hours += input.tenant_hour_rows();
    let lap = Instant::now();
    let pairs = pairs::load(store, cfg, scope, input).await?;
    stats.minute_rows += pairs.minute_rows;
    stats.pair_hours_measured += pairs.hours_measured;
    stats.pair_hours_kept += pairs.hours_kept;
    stats.pair_hours += input.pair_hours.len();
    stats.load_pair_hours += lap.elapsed();
    Ok(())
}

/// The per-GPU sharing mechanisms the demand poll saw on each node, on the input's nodes; a
/// name this version does not know is left out.
fn seen_mechanisms(input: &mut Input, rows: &[store::mechanisms::NodeMechanism]) {
    for r in rows {
        let Some(m) = analytics::mechanism::Mechanism::parse(&r.mechanism) else {
            continue;
        };
        if let Some(n) = input
            .nodes
            .iter_mut()
            .find(|n| n.cluster == r.cluster && n.node == r.node)
            && !n.mechanisms.contains(&m)
        {
            n.mechanisms.push(m);
        }
    }
}

/// The inventory as the analytics names it: nodes, GPUs (with MIG instances) and tenants.
fn inventory(
    input: &mut Input,
    nodes: &[store::NodeRecord],
    gpus: &[store::GpuRecord],
    tenants: &[store::TenantRecord],
) {
    input.nodes = nodes
        .iter()
        .map(|n| NodeRef {
            cluster: n.cluster.clone(),
            node: n.node.clone(),
            last_seen_ms: n.last_seen_ms,
            interval_ms: n.interval_ms,
            mechanisms: Vec::new(),
        })
        .collect();
    input.gpus = gpus
        .iter()
        .map(|g| GpuRef {
            cluster: g.cluster.clone(),
            node: g.node.clone(),
            uuid: g.uuid.clone(),
            index: g.index,
            model: g.model.clone(),
            memory_total_bytes: g.memory_total_bytes,
            sharing: g.sharing,
            replicas: g.replicas,
            mig: g
                .mig_instances
                .iter()
                .map(|m| MigRef {
                    gi_id: m.gi_id,
                    profile: m.profile.clone(),
                    placement_start: m.placement_start,
                    memory_total_bytes: m.memory_total_bytes,
                    compute_slices: m.compute_slices,
                })
                .collect(),
        })
        .collect();
    input.tenants = tenants
        .iter()
        .map(|t| TenantRef {
            cluster: t.cluster.clone(),
            key: t.tenant.key.clone(),
            kind: t.tenant.kind.as_str().to_string(),
            name: t.display_name(),
            team: t.team.clone(),
            nodes: t.nodes.clone(),
        })
        .collect();
}

/// Each GPU's XID events over the range and its latest ECC and row-remapping counters.
async fn health(store: &Store, from: i64, to: i64) -> anyhow::Result<Vec<GpuHealth>> {
    let mut health: BTreeMap<String, GpuHealth> = BTreeMap::new();
    for e in store.events(from, to).await? {
        if e.kind != "xid" {
            continue;
        }
        health
            .entry(e.gpu_uuid.clone())
            .or_insert_with(|| GpuHealth {
                cluster: e.cluster.clone(),
                node: e.node.clone(),
                gpu: e.gpu_uuid.clone(),
                ..GpuHealth::default()
            })
            .xids
            .push((e.ts_ms, e.code));
    }
    for h in store.latest_health().await? {
        let e = health
            .entry(h.gpu_uuid.clone())
            .or_insert_with(|| GpuHealth {
                cluster: h.cluster.clone(),
                node: h.node.clone(),
                gpu: h.gpu_uuid.clone(),
                ..GpuHealth::default()
            });
        e.ecc_uncorrected = h.ecc_uncorrected;
        e.retired_pages = h.retired_pages;
        e.remapped_rows = h.remapped_rows;
    }
    Ok(health.into_values().collect())
}

/// The steps label actions applied in [from, to) that carry the recommendation they were
/// planned from: what the outcome check measures. Actions planned before the snapshot was
/// kept (or by hand) have none and are not checked.
async fn applied_steps(
    store: &Store,
    from: i64,
    to: i64,
) -> anyhow::Result<Vec<analytics::outcome::Applied>> {
    #[derive(serde::Deserialize)]
    struct Planned {
        #[serde(default)]
        recommendation: Option<analytics::Recommendation>,
    }
    let actions = store
        .label_actions(&store::label_actions::ActionFilter {
            states: &[store::label_actions::ActionState::Applied],
            ..store::label_actions::ActionFilter::newest(1000)
        })
        .await?;
    let mut out = Vec::new();
    for a in actions {
        let Some(applied_ms) = a.finished_ms.filter(|t| (from..to).contains(t)) else {
            continue;
        };
        let planned: Planned = match serde_json::from_str(&a.plan) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(action = a.id, error = %e, "label action plan unreadable; its outcome is not checked");
                continue;
            }
        };
        let Some(recommendation) = planned.recommendation else {
            continue;
        };
        let started_ms = a
            .steps
            .first()
            .map(|s| s.ts_ms)
            .or(a.approved_ms)
            .unwrap_or(applied_ms);
        out.push(analytics::outcome::Applied {
            action: a.id,
            started_ms,
            applied_ms,
            recommendation,
        });
    }
    out.reverse();
    Ok(out)
}

/// Loads and analyses [now − window, now), one cluster at a time
/// ([`analyze_by_cluster`]).
pub async fn run(
    store: &Store,
    cfg: &analytics::Config,
    window: Duration,
    now: i64,
) -> anyhow::Result<(Analysis, LoadStats)> {
    let from = now - window.as_millis() as i64;
    let mut stats = LoadStats::default();
    let analysis = analyze_by_cluster(store, cfg, Span { from, to: now, now }, &mut stats).await?;
    Ok((analysis, stats))
}

/// One scheduled pass: analyse and store, unless another collector holds the lock.
pub async fn scheduled(
    store: &Store,
    settings: &Settings,
    metrics: &AnalysisMetrics,
) -> anyhow::Result<Option<Analysis>> {
    let Some(lock) = store.try_job_lock(LOCK_ANALYTICS).await? else {
        tracing::debug!("another collector is running the analysis");
        metrics.count(PassOutcome::Skipped);
        return Ok(None);
    };
    let result = async {
        let now = model::time::now_ms();
        let (analysis, stats) = run(store, &settings.thresholds, settings.window, now).await?;
        metrics.load.observe(stats.load.as_secs_f64());
        metrics.analyze.observe(stats.analyze.as_secs_f64());
        metrics
            .input_rows
            .set((stats.gpu_hours + stats.tenant_hours + stats.minute_rows) as f64);
        save(store, &analysis, now, settings.keep).await?;
        tracing::info!(
            findings = analysis.findings.len(),
            recommendations = analysis.recommendations.len(),
            load_ms = stats.load.as_millis() as u64,
            analyze_ms = stats.analyze.as_millis() as u64,
            "analysis stored"
        );
        anyhow::Ok(analysis)
    }
    .await;
    lock.release().await?;
    metrics.count(if result.is_ok() {
        PassOutcome::Stored
    } else {
        PassOutcome::Failed
    });
    result.map(Some)
}

/// Stores `analysis` as the newest (in its versioned form), keeping the `keep` newest runs.
pub async fn save(
    store: &Store,
    analysis: &Analysis,
    generated_ms: i64,
    keep: i64,
) -> Result<(), store::StoreError> {
    let body = stored::encode(analysis);
    store
        .save_analysis(generated_ms, analysis.from_ms, analysis.to_ms, &body, keep)
        .await
}

/// What runs after each analysis this collector computed (label convergence, when labels are
/// on); `schedule.rs` supplies it, so the analysis knows no other feature.
pub type AfterAnalysis = Arc<
    dyn Fn(
            Arc<Analysis>,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>
        + Send
        + Sync,
>;

/// The scheduled analysis as a background task: every `settings.every` (the first pass
/// `first_after` from the start), each stored analysis then handed to `after`.
pub fn task(
    store: Store,
    settings: Settings,
    metrics: AnalysisMetrics,
    first_after: std::time::Duration,
    after: Option<AfterAnalysis>,
) -> Arc<dyn collector_shared::tasks::Task> {
    let every = settings.every;
    let shared = Arc::new((store, settings, metrics, after));
    collector_shared::tasks::Periodic::delayed("analysis", every, first_after, move || {
        let shared = shared.clone();
        Box::pin(async move {
            let (store, settings, metrics, after) = &*shared;
            if let Some(analysis) = scheduled(store, settings, metrics).await?
                && let Some(after) = after
            {
                after(Arc::new(analysis)).await?;
            }
            Ok(())
        })
    })
}

/// The analysis as tables for a terminal.
pub fn table(a: &Analysis) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let f = &a.funnel;
    let _ = writeln!(
        s,
        "Funnel {} → {} (GPU-hours)",
        model::time::rfc3339(a.from_ms),
        model::time::rfc3339(a.to_ms)
    );
    let _ = writeln!(
        s,
        "  {:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6}  signal",
        "",
        "capacity",
        "allocated",
        "active",
        "effective",
        "waste",
        format!("cost {}", f.currency),
        "eff%"
    );
    let row = |s: &mut String, r: &analytics::FunnelRow| {
        let _ = writeln!(
            s,
            "  {:<28} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>6}  {}",
            truncate(&r.key, 28),
            r.capacity_gpu_hours
                .map_or("-".into(), |c| format!("{c:.1}")),
            r.allocated_gpu_hours,
            r.active_gpu_hours,
            r.effective_gpu_hours,
            r.waste_gpu_hours,
            r.cost,
            r.effective_ratio
                .map_or("-".into(), |e| format!("{:.0}", e * 100.0)),
            r.effective_signal
        );
    };
    row(&mut s, &f.total);
    if let Some(e) = f.total.energy {
        let _ = writeln!(
            s,
            "  energy: {:.1} kWh drawn, {:.1} kWh on idle allocations, {:.1} kWh on GPUs nobody held{}",
            e.kwh,
            e.idle_kwh,
            e.unallocated_kwh.unwrap_or(0.0),
            e.co2e_kg
                .map(|kg| format!("; {kg:.1} kg CO2e"))
                .unwrap_or_default()
        );
    }
    for (title, rows) in [
        ("by model", &f.by_model),
        ("by node", &f.by_node),
        ("by team", &f.by_team),
    ] {
        let _ = writeln!(s, " {title}");
        for r in rows {
            row(&mut s, r);
        }
    }
    let _ = writeln!(s, "\nFindings ({})", a.findings.len());
    for x in &a.findings {
        let _ = writeln!(
            s,
            "  [{:<8}] {:<16} {}",
            x.severity.as_str(),
            x.kind.as_str(),
            x.summary
        );
    }
    let p = &a.plan;
    let _ = writeln!(
        s,
        "\nPlan: frees {} of {} in use (empties {} of {}; the fewest GPUs it could use is {}), {} a month, in {} (each step's share below; they add up)",
        p.gpus_freed,
        model::figures::count(p.gpus_in_use as f64, "GPU", "GPUs"),
        p.nodes_freed,
        model::figures::count(p.nodes_in_use as f64, "node", "nodes"),
        p.bound_gpus,
        model::figures::money(p.money_per_month, &p.currency),
        model::figures::count(p.steps.len() as f64, "step", "steps")
    );
    if p.held_for_repair > 0 {
        let _ = writeln!(
            s,
            "  {} the steps empty with unrecovered hardware errors, not counted as freed until repaired",
            model::figures::count(p.held_for_repair as f64, "GPU", "GPUs")
        );
    }
    if !p.worth.is_empty() {
        let _ = writeln!(
            s,
            "Per-GPU sharing: what each frees beyond the plan, in place or enabled (docs/analytics.md, \"What enabling each is worth\"):"
        );
        for w in &p.worth {
            let _ = writeln!(s, "  {}", w.sentence(&p.currency));
        }
    }
    if let Some(h) = &p.held_out {
        let _ = writeln!(s, "{}", h.sentence());
    }
    let _ = writeln!(s, "\nRecommendations ({})", a.recommendations.len());
    for r in &a.recommendations {
        let _ = writeln!(s, "  {}", recommendation_line(r));
    }
    if !a.rejected.is_empty() {
        let _ = writeln!(s, "\nNot recommended after replay ({})", a.rejected.len());
        for r in &a.rejected {
            let _ = writeln!(s, "  {:<13} {}", r.kind.as_str(), r.reason);
        }
    }
    s.push_str(&forecast::table(a));
    for l in &a.limitations {
        let _ = writeln!(s, "\nnote: {l}");
    }
    s
}

/// A step as `gpulens analyze` lists it: kind, summary, confidence, replay, held-out and the
/// days ahead.
fn recommendation_line(r: &analytics::Recommendation) -> String {
    format!(
        "{:<13} {}  [confidence {:.0} %; replay: contention {:.0}→{:.0} tenant-h, overflow {:.0} h, frees {}{}{}]",
        r.kind.as_str(),
        r.summary,
        r.confidence * 100.0,
        r.replay.contention_hours_before,
        r.replay.contention_hours_after,
        r.replay.memory_overflow_hours,
        model::figures::count(r.replay.gpus_freed, "GPU", "GPUs"),
        r.held_out
            .as_ref()
            .map(|h| format!("; held out: {}", h.verdict.as_str()))
            .unwrap_or_default(),
        r.ahead
            .as_ref()
            .and_then(|x| x.outgrown_in_days)
            .map(|d| format!("; outgrown in {d:.1} days at its tenants' memory growth"))
            .unwrap_or_default()
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
