//! The dashboard's pages: handlers that read the store and the newest analysis into the web
//! crate's view models. Everything a page shows is in its URL (range, filters, sort), so links
//! can be shared; changes (sign-in, approval) are POSTed forms with a CSRF token.

pub mod session;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use analytics::{Analysis, Finding, FindingKind, Proposal, Severity};
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use web::chart::{Chart, Line};
use web::format::{enc, time};
use web::pages::{self, Sort};
use web::{Frame, format};

use crate::analysis::Newest;
use crate::fleet::node_status;
use crate::shared::Shared;
use session::Sessions;
use store::{Agg, Entity, Metric, SeriesQuery};

/// What the pages need.
#[derive(Debug, Clone)]
pub struct DashboardState {
    pub shared: Shared,
    /// The `[labels]` settings: the approval mode and the operators who may sign in.
    pub labels: Arc<crate::labels::Settings>,
    pub newest: Arc<Newest>,
    /// Revoked sessions and sign-in attempts per address.
    pub sessions: Arc<Sessions>,
}

impl std::ops::Deref for DashboardState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The dashboard routes (merged in `router.rs`).
pub fn routes() -> axum::Router<DashboardState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/", get(overview))
        .route("/nodes", get(nodes))
        .route("/nodes/{node}", get(node))
        .route("/gpus/{uuid}", get(gpu))
        .route("/tenants", get(tenants))
        .route("/teams", get(teams))
        .route("/findings", get(findings))
        .route("/findings/{id}", get(finding))
        .route("/recommendations", get(recommendations))
        .route("/recommendations/{id}", get(recommendation))
        .route("/recommendations/{id}/approve", post(approve))
        .route("/reports", get(reports))
        .route("/alerts", get(alerts))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
}

const RANGES: [(&str, i64); 3] = [
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

fn range_ms(r: Option<&str>) -> (&'static str, i64) {
    RANGES
        .iter()
        .find(|(n, _)| Some(*n) == r)
        .copied()
        .unwrap_or(RANGES[1])
}

fn ranges() -> Vec<String> {
    RANGES.iter().map(|(n, _)| (*n).to_owned()).collect()
}

/// A page's failure, shown as a page.
pub struct PageError(StatusCode, String);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let frame = Frame {
            title: "Problem".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Frame::default()
        };
        (self.0, Html(pages::problem(frame, self.1))).into_response()
    }
}

impl From<store::StoreError> for PageError {
    fn from(e: store::StoreError) -> Self {
        PageError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

fn not_found(what: String) -> PageError {
    PageError(StatusCode::NOT_FOUND, what)
}

pub type Page = Result<Html<String>, PageError>;

async fn analysis(state: &DashboardState) -> Result<Option<Arc<Analysis>>, PageError> {
    state.newest.get(&state.store).await.map_err(|e| match e {
        crate::analysis::NewestError::Store(e) => e.into(),
        e => PageError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    })
}

fn frame(state: &DashboardState, headers: &HeaderMap, title: impl Into<String>) -> Frame {
    Frame {
        title: title.into(),
        refresh_s: None,
        operator: operator(state, headers).map(|(name, _)| name),
        notice: None,
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// The signed-in operator and their session cookie.
fn operator(state: &DashboardState, headers: &HeaderMap) -> Option<(String, String)> {
    let cookie = session::from_header(headers.get(header::COOKIE).and_then(|v| v.to_str().ok()))?;
    if state.sessions.is_revoked(&cookie) {
        return None;
    }
    let name = session::verify(&state.labels, &cookie, model::time::now_ms())?;
    Some((name, cookie))
}

fn window(a: &Analysis) -> String {
    format!("{} to {} UTC", time(a.from_ms), time(a.to_ms))
}

fn name_of(a: &Analysis, key: &str) -> String {
    a.tenant_names
        .get(key)
        .cloned()
        .unwrap_or_else(|| key.to_owned())
}

/// Sorts rows by the URL's `sort`/`dir`, a default otherwise.
fn sorted<T>(rows: &mut [T], q: &SortQuery, default: &str, key: impl Fn(&T, &str) -> SortKey) {
    let k = q.sort.as_deref().unwrap_or(default);
    let desc = q.dir.as_deref() != Some("asc");
    rows.sort_by(|a, b| {
        let o = key(a, k).cmp(&key(b, k));
        if desc { o.reverse() } else { o }
    });
}

/// A comparable cell.
#[derive(Debug, PartialEq)]
enum SortKey {
    Num(f64),
    Text(String),
}

impl Eq for SortKey {}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (SortKey::Num(a), SortKey::Num(b)) => a.total_cmp(b),
            (SortKey::Text(a), SortKey::Text(b)) => a.cmp(b),
            (SortKey::Num(_), SortKey::Text(_)) => std::cmp::Ordering::Less,
            (SortKey::Text(_), SortKey::Num(_)) => std::cmp::Ordering::Greater,
        }
    }
}

fn num(x: f64) -> SortKey {
    SortKey::Num(x)
}
fn text(s: &str) -> SortKey {
    SortKey::Text(s.to_lowercase())
}

#[derive(Debug, Default, Deserialize)]
pub struct SortQuery {
    pub sort: Option<String>,
    pub dir: Option<String>,
}

fn sort_state(base: String, q: &SortQuery, default: &str) -> Sort {
    Sort {
        base,
        key: q.sort.clone().unwrap_or_else(|| default.into()),
        desc: q.dir.as_deref() != Some("asc"),
    }
}

fn query_string(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

// ---------------------------------------------------------------- overview

#[derive(Debug, Deserialize)]
pub struct RangeQuery {
    pub range: Option<String>,
}

/// The mean of `metric` for `entity` per `step`; `None` when the store cannot answer.
async fn mean_series(
    state: &DashboardState,
    metric: Metric,
    entity: Entity,
    from: i64,
    to: i64,
    step: i64,
) -> Option<store::Series> {
    let q = SeriesQuery {
        metric,
        entity,
        from_ms: from,
        to_ms: to,
        step_ms: step,
        agg: Agg::Mean,
    };
    state
        .store
        .series(&q, model::time::now_ms(), &state.retention)
        .await
        .ok()
}

/// A series' points, ratios shown as percent.
fn shown(s: store::Series) -> Vec<(i64, Option<f64>)> {
    let scale = if s.unit == "ratio" { 100.0 } else { 1.0 };
    s.points
        .into_iter()
        .map(|(t, v)| (t, v.map(|x| x * scale)))
        .collect()
}

async fn mean_over(state: &DashboardState, metric: Metric, from: i64, to: i64) -> Option<f64> {
    let s = mean_series(state, metric, Entity::Fleet, from, to, to - from).await?;
    let vals: Vec<f64> = s.points.iter().filter_map(|(_, v)| *v).collect();
    (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
}

async fn fleet_series(
    state: &DashboardState,
    metric: Metric,
    from: i64,
    to: i64,
    step: i64,
) -> Vec<(i64, Option<f64>)> {
    mean_series(state, metric, Entity::Fleet, from, to, step)
        .await
        .map(shown)
        .unwrap_or_default()
}

fn tenant_lines(
    a: &Analysis,
    kind: FindingKind,
    metric: &str,
    fmt: fn(f64) -> String,
) -> Vec<pages::TenantLine> {
    let mut f: Vec<&Finding> = a.findings.iter().filter(|f| f.kind == kind).collect();
    let value = |f: &Finding| f.metrics.get(metric).copied().unwrap_or(0.0);
    if kind == FindingKind::Underutilized {
        f.sort_by(|x, y| value(x).total_cmp(&value(y)));
    } else {
        f.sort_by(|x, y| value(y).total_cmp(&value(x)));
    }
    f.into_iter()
        .take(8)
        .map(|f| {
            let key = f.tenants.first().cloned().unwrap_or_default();
            pages::TenantLine {
                name: name_of(a, &key),
                key,
                team: f.team.clone().unwrap_or_default(),
                node: f.node.clone(),
                value: fmt(value(f)),
                finding_id: f.id.clone(),
            }
        })
        .collect()
}

pub async fn overview(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<RangeQuery>,
) -> Page {
    let now = model::time::now_ms();
    let (range, span) = range_ms(q.range.as_deref());
    let (from, to) = (now - span, now);
    let a = analysis(&state).await?;
    let nodes = state.store.nodes().await?;
    let alerts = crate::alerts::load(&state.store).await?;
    let step = match range {
        "24h" => 900_000,
        "7d" => 3_600_000,
        _ => 6 * 3_600_000,
    };
    let (util, alloc, sm) = tokio::join!(
        fleet_series(&state, Metric::GpuUtil, from, to, step),
        fleet_series(&state, Metric::AllocShare, from, to, step),
        fleet_series(&state, Metric::SmActive, from, to, step),
    );
    let mut trends = Vec::new();
    for (name, metric) in [
        ("GPU utilization", Metric::GpuUtil),
        ("Allocated share", Metric::AllocShare),
        ("SM activity (DCGM)", Metric::SmActive),
    ] {
        let (now_v, before) = tokio::join!(
            mean_over(&state, metric, from, to),
            mean_over(&state, metric, from - span, from)
        );
        trends.push(pages::Trend {
            name: name.into(),
            now: now_v.map(|x| x * 100.0),
            before: before.map(|x| x * 100.0),
            unit: "%".into(),
        });
    }
    let chart = Chart {
        title: format!("Fleet, last {range}"),
        unit: "%".into(),
        from_ms: from,
        to_ms: to,
        y_max: Some(100.0),
        lines: vec![
            Line {
                name: "GPU utilization".into(),
                points: util,
            },
            Line {
                name: "Allocated share".into(),
                points: alloc,
            },
            Line {
                name: "SM activity (DCGM)".into(),
                points: sm,
            },
        ],
        empty_note: "No samples in this range.".into(),
    };
    let mut v = pages::OverviewView {
        range: range.into(),
        ranges: ranges(),
        window: "no analysis yet".into(),
        analysed: a.is_some(),
        funnel: pages::FunnelView::default(),
        gpus: nodes.iter().map(|n| n.gpu_count).sum(),
        nodes: nodes.len(),
        gpus_freeable: 0.0,
        findings: Vec::new(),
        recommendations: 0,
        firing_alerts: alerts
            .iter()
            .filter(|x| x.state == crate::alerts::AlertState::Firing)
            .count(),
        top_idle: Vec::new(),
        top_underutilized: Vec::new(),
        trends,
        chart,
        limitations: Vec::new(),
    };
    if let Some(a) = &a {
        let t = &a.funnel.total;
        v.window = window(a);
        v.funnel = pages::FunnelView {
            capacity: t.capacity_gpu_hours.unwrap_or(0.0),
            allocated: t.allocated_gpu_hours,
            active: t.active_gpu_hours,
            effective: t.effective_gpu_hours,
            waste: t.waste_gpu_hours,
            cost: t.cost,
            waste_cost: t.waste_cost,
            currency: a.funnel.currency.clone(),
            effective_ratio: t.effective_ratio,
            signal: match t.effective_signal.as_str() {
                "sm_active" => "SM activity from DCGM".into(),
                "gpu_util" => "NVML GPU utilization (an upper bound without DCGM)".into(),
                "mixed" => "DCGM SM activity where reported, NVML utilization elsewhere".into(),
                _ => "nothing measurable".into(),
            },
        };
        v.gpus_freeable = a.recommendations.iter().map(|r| r.replay.gpus_freed).sum();
        v.recommendations = a.recommendations.len();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &a.findings {
            *counts.entry(f.kind.as_str()).or_default() += 1;
        }
        v.findings = counts.into_iter().map(|(k, n)| (k.into(), n)).collect();
        v.top_idle = tenant_lines(a, FindingKind::IdleAllocation, "idle_hours_in_runs", |h| {
            format!("{h:.0} h")
        });
        v.top_underutilized = tenant_lines(a, FindingKind::Underutilized, "effective_ratio", |r| {
            format!("{:.0} %", r * 100.0)
        });
        v.limitations = a.limitations.clone();
    }
    let mut f = frame(&state, &headers, "Overview");
    f.refresh_s = Some(60);
    Ok(Html(pages::overview(f, v)))
}

// ---------------------------------------------------------------- nodes

pub async fn nodes(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<SortQuery>,
) -> Page {
    let now = model::time::now_ms();
    let a = analysis(&state).await?;
    let list = state.store.nodes().await?;
    let gpus = state.store.gpus(None).await?;
    let by_node: HashMap<(&str, &str), &analytics::FunnelRow> = a
        .as_ref()
        .map(|a| {
            a.funnel
                .by_node
                .iter()
                .map(|r| {
                    (
                        (r.cluster.as_deref().unwrap_or("default"), r.key.as_str()),
                        r,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut rows: Vec<pages::NodeRow> = list
        .iter()
        .map(|n| {
            let mine: Vec<_> = gpus
                .iter()
                .filter(|g| g.node == n.node && g.cluster == n.cluster)
                .collect();
            let models: BTreeSet<&str> = mine.iter().map(|g| g.model.as_str()).collect();
            let sharing: BTreeSet<&str> = mine.iter().map(|g| g.sharing.as_str()).collect();
            let f = by_node.get(&(n.cluster.as_str(), n.node.as_str()));
            let util = f.and_then(|r| {
                r.capacity_gpu_hours
                    .filter(|c| *c > 0.0 && r.effective_signal != "none")
                    .map(|c| r.effective_gpu_hours / c * 100.0)
            });
            pages::NodeRow {
                cluster: n.cluster.clone(),
                node: n.node.clone(),
                status: node_status(n, now).into(),
                gpus: n.gpu_count,
                models: models.into_iter().collect::<Vec<_>>().join(", "),
                sharing: sharing.into_iter().collect::<Vec<_>>().join(", "),
                util,
                class: f
                    .map(|r| {
                        crate::labels::utilization_class(
                            r.effective_gpu_hours,
                            r.capacity_gpu_hours,
                            &r.effective_signal,
                        )
                        .to_owned()
                    })
                    .unwrap_or_else(|| "unknown".into()),
                last_sample: n.last_sample_ms.map(time).unwrap_or_else(|| "never".into()),
            }
        })
        .collect();
    sorted(&mut rows, &q, "node", |r, k| match k {
        "cluster" => text(&r.cluster),
        "status" => text(&r.status),
        "gpus" => num(r.gpus as f64),
        "util" => num(r.util.unwrap_or(-1.0)),
        "class" => text(&r.class),
        "last" => text(&r.last_sample),
        _ => text(&r.node),
    });
    if q.sort.is_none() {
        rows.reverse();
    }
    let mut f = frame(&state, &headers, "Nodes");
    f.refresh_s = Some(60);
    Ok(Html(pages::nodes(
        f,
        rows,
        sort_state(String::new(), &q, "node"),
    )))
}

/// One node, or one GPU of it (`only`).
async fn node_page(
    state: &DashboardState,
    headers: &HeaderMap,
    node: &str,
    only: Option<&str>,
    range: Option<&str>,
) -> Page {
    let now = model::time::now_ms();
    let (range, span) = range_ms(range);
    let (from, to) = (now - span, now);
    let Some(n) = state
        .store
        .nodes()
        .await?
        .into_iter()
        .find(|n| n.node == node)
    else {
        return Err(not_found(format!("no node named {node:?} has reported")));
    };
    let gpus: Vec<_> = state
        .store
        .gpus(Some(node))
        .await?
        .into_iter()
        .filter(|g| only.is_none_or(|u| g.uuid == u))
        .collect();
    let rollups = state.store.hour_rollups(&n.cluster, node, from, to).await?;
    let a = analysis(state).await?;
    let known: HashMap<String, String> = state
        .store
        .tenants()
        .await?
        .iter()
        .map(|t| (t.key.clone(), t.display_name()))
        .collect();
    let name = |k: &str| {
        known.get(k).cloned().unwrap_or_else(|| match &a {
            Some(a) => name_of(a, k),
            None => k.to_owned(),
        })
    };
    let newest = rollups.tenants.keys().map(|(_, _, b)| *b).max();
    let mut panels = Vec::new();
    for g in &gpus {
        let mut range_use: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        let mut now_use: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for ((gpu, tenant, bucket), t) in &rollups.tenants {
            if gpu != &g.uuid || t.alloc_n == 0 {
                continue;
            }
            let hours = t.covered_s / 3600.0;
            let share = t.alloc_share_sum / f64::from(t.samples.max(1));
            let eff = if t.eff_n > 0 {
                t.eff_sum / f64::from(t.eff_n) * hours
            } else {
                0.0
            };
            let e = range_use.entry(tenant).or_default();
            e.0 += share * hours;
            e.1 += eff;
            if Some(*bucket) == newest {
                let e = now_use.entry(tenant).or_default();
                e.0 += share * hours;
                e.1 += eff;
            }
        }
        let occupants = |m: BTreeMap<&str, (f64, f64)>| {
            let mut v: Vec<pages::Occupant> = m
                .into_iter()
                .map(|(k, (al, ef))| pages::Occupant {
                    key: k.to_owned(),
                    name: name(k),
                    allocated_hours: al,
                    effective_hours: ef,
                })
                .collect();
            v.sort_by(|x, y| y.allocated_hours.total_cmp(&x.allocated_hours));
            v
        };
        let series =
            |f: &dyn Fn(&model::rollup::GpuAgg) -> Option<f64>| -> Vec<(i64, Option<f64>)> {
                rollups
                    .gpus
                    .iter()
                    .filter(|((u, _), _)| u == &g.uuid)
                    .map(|((_, b), agg)| (*b, f(agg)))
                    .collect()
            };
        let mean = |n: i32, s: f64| (n > 0).then(|| s / f64::from(n));
        let gib = 1024.0 * 1024.0 * 1024.0;
        let charts = vec![
            Chart {
                title: format!("GPU {} utilization and SM activity", g.index),
                unit: "%".into(),
                from_ms: from,
                to_ms: to,
                y_max: Some(100.0),
                lines: vec![
                    Line {
                        name: "GPU utilization (NVML)".into(),
                        points: series(&|x| mean(x.gpu_util_n, x.gpu_util_sum).map(|v| v * 100.0)),
                    },
                    Line {
                        name: "SM activity (DCGM)".into(),
                        points: series(&|x| {
                            mean(x.sm_active_n, x.sm_active_sum).map(|v| v * 100.0)
                        }),
                    },
                ],
                empty_note: "No utilization samples in this range.".into(),
            },
            Chart {
                title: format!("GPU {} memory used", g.index),
                unit: "GiB".into(),
                from_ms: from,
                to_ms: to,
                y_max: Some(g.memory_total_bytes as f64 / gib),
                lines: vec![Line {
                    name: "memory used".into(),
                    points: series(&|x| mean(x.mem_used_n, x.mem_used_sum).map(|v| v / gib)),
                }],
                empty_note: "No memory samples in this range.".into(),
            },
            Chart {
                title: format!("GPU {} power", g.index),
                unit: "W".into(),
                from_ms: from,
                to_ms: to,
                y_max: None,
                lines: vec![Line {
                    name: "power".into(),
                    points: series(&|x| mean(x.power_n, x.power_sum)),
                }],
                empty_note: "Power is not reported for this device.".into(),
            },
            Chart {
                title: format!("GPU {} temperature", g.index),
                unit: "°C".into(),
                from_ms: from,
                to_ms: to,
                y_max: None,
                lines: vec![Line {
                    name: "temperature".into(),
                    points: series(&|x| mean(x.temp_n, x.temp_sum)),
                }],
                empty_note: "Temperature is not reported for this device.".into(),
            },
        ];
        let mut charts = charts;
        if g.sharing == "mig" && charts[0].lines[1].points.iter().all(|(_, v)| v.is_none()) {
            charts[0].title = format!(
                "GPU {} utilization (per-instance SM activity is not measurable without DCGM)",
                g.index
            );
        }
        panels.push(pages::GpuPanel {
            uuid: g.uuid.clone(),
            index: g.index,
            model: g.model.clone(),
            sharing: g.sharing.clone(),
            memory_gib: g.memory_total_bytes as f64 / gib,
            mig: g
                .mig_instances
                .iter()
                .map(|m| pages::MigRow {
                    profile: m.profile.clone(),
                    gi: m.gi_id,
                    ci: m.ci_id,
                    memory_gib: m.memory_total_bytes as f64 / gib,
                    placement: match (m.placement_start, m.placement_size) {
                        (Some(s), Some(z)) => format!("slices {s}–{}", s + z - 1),
                        _ => "–".into(),
                    },
                })
                .collect(),
            now: occupants(now_use),
            range: occupants(range_use),
            charts,
        });
    }
    let labels = a
        .as_ref()
        .and_then(|a| {
            crate::labels::advisory_labels(a, a.generated_ms)
                .remove(&(n.cluster.clone(), node.to_owned()))
        })
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    let title = match only {
        Some(_) if !gpus.is_empty() => format!("GPU {} of {node}", gpus[0].index),
        _ => format!("Node {node}"),
    };
    let mut f = frame(state, headers, title);
    f.refresh_s = Some(60);
    Ok(Html(pages::node(
        f,
        pages::NodeView {
            cluster: n.cluster.clone(),
            node: node.to_owned(),
            status: node_status(&n, now).into(),
            range: range.into(),
            ranges: ranges(),
            gpu: only.map(str::to_owned),
            gpus: panels,
            labels,
        },
    )))
}

pub async fn node(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Query(q): Query<RangeQuery>,
) -> Page {
    node_page(&state, &headers, &node, None, q.range.as_deref()).await
}

pub async fn gpu(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Path(uuid): Path<String>,
    Query(q): Query<RangeQuery>,
) -> Page {
    let Some(g) = state
        .store
        .gpus(None)
        .await?
        .into_iter()
        .find(|g| g.uuid == uuid)
    else {
        return Err(not_found(format!("no GPU {uuid:?} has reported")));
    };
    node_page(&state, &headers, &g.node, Some(&uuid), q.range.as_deref()).await
}

// ---------------------------------------------------------------- tenants and teams

#[derive(Debug, Deserialize)]
pub struct UseQuery {
    pub q: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
}

async fn usage(state: DashboardState, headers: HeaderMap, q: UseQuery, teams: bool) -> Page {
    let Some(a) = analysis(&state).await? else {
        return Err(PageError(
            StatusCode::SERVICE_UNAVAILABLE,
            "No analysis yet: the first one runs shortly after the collector starts.".into(),
        ));
    };
    let tenants = state.store.tenants().await?;
    let meta: HashMap<&str, &store::TenantRecord> =
        tenants.iter().map(|t| (t.key.as_str(), t)).collect();
    let mut findings: HashMap<&str, usize> = HashMap::new();
    for f in &a.findings {
        if teams {
            if let Some(t) = &f.team {
                *findings.entry(t.as_str()).or_default() += 1;
            }
        } else {
            for t in &f.tenants {
                *findings.entry(t.as_str()).or_default() += 1;
            }
        }
    }
    let source = if teams {
        &a.funnel.by_team
    } else {
        &a.funnel.by_tenant
    };
    let needle = q.q.clone().unwrap_or_default().to_lowercase();
    let mut rows: Vec<pages::UseRow> = source
        .iter()
        .map(|r| {
            let m = meta.get(r.key.as_str());
            let name = if teams {
                r.key.clone()
            } else {
                m.map_or_else(|| name_of(&a, &r.key), |t| t.display_name())
            };
            pages::UseRow {
                key: r.key.clone(),
                name,
                team: m.and_then(|t| t.team.clone()).unwrap_or_else(|| "–".into()),
                kind: m.map(|t| t.kind.clone()).unwrap_or_default(),
                allocated: r.allocated_gpu_hours,
                effective: r.effective_gpu_hours,
                ratio: r.effective_ratio,
                waste: r.waste_gpu_hours,
                cost: r.cost,
                findings: findings.get(r.key.as_str()).copied().unwrap_or(0),
            }
        })
        .filter(|r| {
            needle.is_empty()
                || r.name.to_lowercase().contains(&needle)
                || r.key.to_lowercase() == needle
                || r.team.to_lowercase().contains(&needle)
        })
        .collect();
    let sq = SortQuery {
        sort: q.sort.clone(),
        dir: q.dir.clone(),
    };
    sorted(&mut rows, &sq, "waste", |r, k| match k {
        "name" => text(&r.name),
        "team" => text(&r.team),
        "allocated" => num(r.allocated),
        "effective" => num(r.effective),
        "ratio" => num(r.ratio.unwrap_or(-1.0)),
        "cost" => num(r.cost),
        "findings" => num(r.findings as f64),
        _ => num(r.waste),
    });
    let title = if teams { "Teams" } else { "Tenants" };
    let base = query_string(&[("q", q.q.as_deref().unwrap_or(""))]);
    Ok(Html(pages::usage(
        frame(&state, &headers, title),
        pages::UseView {
            teams,
            window: window(&a),
            currency: a.funnel.currency.clone(),
            query: q.q.unwrap_or_default(),
            rows,
        },
        sort_state(base, &sq, "waste"),
    )))
}

pub async fn tenants(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<UseQuery>,
) -> Page {
    usage(state, headers, q, false).await
}

pub async fn teams(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<UseQuery>,
) -> Page {
    usage(state, headers, q, true).await
}

// ---------------------------------------------------------------- findings

#[derive(Debug, Deserialize)]
pub struct FindingQuery {
    pub kind: Option<String>,
    pub severity: Option<String>,
    pub team: Option<String>,
    pub node: Option<String>,
    pub tenant: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
}

pub async fn findings(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<FindingQuery>,
) -> Page {
    let a = analysis(&state).await?;
    let empty = Analysis::default();
    let a: &Analysis = a.as_deref().unwrap_or(&empty);
    let min = q.severity.as_deref().and_then(Severity::parse);
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    let mut rows: Vec<(Severity, pages::FindingRow)> = a
        .findings
        .iter()
        .filter(|f| {
            q.kind
                .as_deref()
                .is_none_or(|k| k.is_empty() || f.kind.as_str() == k)
        })
        .filter(|f| min.is_none_or(|m| f.severity >= m))
        .filter(|f| {
            q.team
                .as_deref()
                .is_none_or(|t| t.is_empty() || f.team.as_deref() == Some(t))
        })
        .filter(|f| {
            q.node
                .as_deref()
                .is_none_or(|n| n.is_empty() || f.node == n)
        })
        .filter(|f| {
            q.tenant
                .as_deref()
                .is_none_or(|t| t.is_empty() || f.tenants.iter().any(|x| x == t))
        })
        .map(|f| {
            (
                f.severity,
                pages::FindingRow {
                    id: f.id.clone(),
                    kind: f.kind.as_str().into(),
                    severity: f.severity.as_str().into(),
                    node: f.node.clone(),
                    tenant: f.tenants.first().map(|k| name_of(a, k)).unwrap_or_default(),
                    team: f.team.clone().unwrap_or_default(),
                    summary: f.summary.clone(),
                },
            )
        })
        .collect();
    let sq = SortQuery {
        sort: q.sort.clone(),
        dir: q.dir.clone(),
    };
    rows.sort_by(|(sa, a), (sb, b)| {
        let o = match sq.sort.as_deref().unwrap_or("severity") {
            "kind" => a.kind.cmp(&b.kind),
            "node" => a.node.cmp(&b.node),
            "team" => a.team.cmp(&b.team),
            _ => sa.cmp(sb),
        };
        if sq.dir.as_deref() == Some("asc") {
            o
        } else {
            o.reverse()
        }
    });
    let filters = pages::FindingFilters {
        kind: s(&q.kind),
        severity: s(&q.severity),
        team: s(&q.team),
        node: s(&q.node),
        kinds: FindingKind::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect(),
        teams: a
            .findings
            .iter()
            .filter_map(|f| f.team.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        nodes: a
            .findings
            .iter()
            .map(|f| f.node.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    };
    let base = query_string(&[
        ("kind", &filters.kind),
        ("severity", &filters.severity),
        ("team", &filters.team),
        ("node", &filters.node),
        ("tenant", q.tenant.as_deref().unwrap_or("")),
    ]);
    Ok(Html(pages::findings(
        frame(&state, &headers, "Findings"),
        filters,
        rows.into_iter().map(|(_, r)| r).collect(),
        sort_state(base, &sq, "severity"),
    )))
}

/// An evidence series as a chart line.
/// The range an evidence chart covers: the finding's window, at least an hour.
fn evidence_range(e: &analytics::Evidence) -> (i64, i64) {
    (e.from_ms, e.from_ms + (e.to_ms - e.from_ms).max(3_600_000))
}

/// An evidence series as a chart line.
async fn evidence_line(
    state: &DashboardState,
    e: &analytics::Evidence,
    label: &str,
) -> Option<Line> {
    let (from, to) = evidence_range(e);
    let step = if to - from <= 2 * 86_400_000 {
        300_000
    } else {
        3_600_000
    };
    let s = mean_series(
        state,
        Metric::parse(&e.metric)?,
        Entity::parse(&e.entity)?,
        from,
        to,
        step,
    )
    .await?;
    Some(Line {
        name: label.to_owned(),
        points: shown(s),
    })
}

pub async fn finding(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Page {
    let a = analysis(&state).await?;
    let Some(a) = a else {
        return Err(not_found("no analysis yet".into()));
    };
    let Some(f) = a.findings.iter().find(|f| f.id == id) else {
        return Err(not_found(format!(
            "no finding {id:?} in the newest analysis (findings are recomputed every analysis; old ids go away when the condition does)"
        )));
    };
    let mut charts = Vec::new();
    if f.kind == FindingKind::Interference {
        // Victim and aggressor overlaid on one chart.
        let mut lines = Vec::new();
        for (e, who) in f.evidence.iter().take(2).zip(["victim", "aggressor"]) {
            let label = format!(
                "{who} {}",
                f.tenants
                    .get(usize::from(who == "aggressor"))
                    .map(|k| name_of(&a, k))
                    .unwrap_or_default()
            );
            if let Some(l) = evidence_line(&state, e, &label).await {
                lines.push(l);
            }
        }
        if let Some(e) = f.evidence.first() {
            charts.push(Chart {
                title: "Victim and aggressor SM time".into(),
                unit: "%".into(),
                from_ms: evidence_range(e).0,
                to_ms: evidence_range(e).1,
                y_max: Some(100.0),
                lines,
                empty_note: "No SM time recorded for these tenants in the window.".into(),
            });
        }
        for e in f.evidence.iter().skip(2) {
            if let Some(l) = evidence_line(&state, e, &e.label).await {
                charts.push(Chart {
                    title: e.label.clone(),
                    unit: "%".into(),
                    from_ms: evidence_range(e).0,
                    to_ms: evidence_range(e).1,
                    y_max: Some(100.0),
                    lines: vec![l],
                    empty_note: "No data.".into(),
                });
            }
        }
    } else {
        for e in &f.evidence {
            if let Some(l) = evidence_line(&state, e, &e.label).await {
                let unit = Metric::parse(&e.metric).map_or("", |m| m.spec().unit);
                let pct = unit == "ratio";
                charts.push(Chart {
                    title: e.label.clone(),
                    unit: if pct { "%".into() } else { unit.into() },
                    from_ms: evidence_range(e).0,
                    to_ms: evidence_range(e).1,
                    y_max: pct.then_some(100.0),
                    lines: vec![l],
                    empty_note: "No data in the finding's window.".into(),
                });
            }
        }
    }
    let tenants = f
        .tenants
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let role = match (f.kind, i) {
                (FindingKind::Interference, 0) => "victim",
                (FindingKind::Interference, _) => "aggressor",
                _ => "tenant",
            };
            (role.to_owned(), name_of(&a, k))
        })
        .collect();
    let v = pages::FindingView {
        id: f.id.clone(),
        kind: f.kind.as_str().into(),
        severity: f.severity.as_str().into(),
        node: f.node.clone(),
        gpu: f.gpu.clone(),
        tenants,
        window: format!("{} to {} UTC", time(f.from_ms), time(f.to_ms)),
        signal: f.signal.clone(),
        summary: f.summary.clone(),
        metrics: f
            .metrics
            .iter()
            .map(|(k, v)| (k.clone(), format::num(*v)))
            .collect(),
        charts,
        recommendations: a
            .recommendations
            .iter()
            .filter(|r| {
                r.findings.contains(&f.id)
                    || (r.node == f.node && r.tenants.iter().any(|t| f.tenants.contains(t)))
            })
            .map(|r| (r.id.clone(), r.summary.clone()))
            .collect(),
    };
    Ok(Html(pages::finding(
        frame(&state, &headers, format!("{} finding", f.kind.as_str())),
        v,
    )))
}

// ---------------------------------------------------------------- recommendations

pub async fn recommendations(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<SortQuery>,
) -> Page {
    let a = analysis(&state).await?;
    let (mut rows, rejected) = match &a {
        Some(a) => (
            a.recommendations
                .iter()
                .map(|r| pages::RecRow {
                    id: r.id.clone(),
                    kind: r.kind.as_str().into(),
                    node: r.node.clone(),
                    team: r.team.clone().unwrap_or_default(),
                    gpus_freed: r.replay.gpus_freed,
                    confidence: r.confidence,
                    summary: r.summary.clone(),
                })
                .collect::<Vec<_>>(),
            a.rejected.len(),
        ),
        None => (Vec::new(), 0),
    };
    sorted(&mut rows, &q, "freed", |r, k| match k {
        "kind" => text(&r.kind),
        "node" => text(&r.node),
        "team" => text(&r.team),
        "confidence" => num(r.confidence),
        _ => num(r.gpus_freed),
    });
    Ok(Html(pages::recommendations(
        frame(&state, &headers, "Recommendations"),
        rows,
        rejected,
        sort_state(String::new(), &q, "freed"),
    )))
}

#[derive(Debug, Default, Deserialize)]
pub struct NoticeQuery {
    pub approved: Option<i64>,
    pub error: Option<String>,
}

pub async fn recommendation(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(nq): Query<NoticeQuery>,
) -> Page {
    let Some(a) = analysis(&state).await? else {
        return Err(not_found("no analysis yet".into()));
    };
    let Some(r) = a.recommendations.iter().find(|r| r.id == id) else {
        return Err(not_found(format!(
            "no recommendation {id:?} in the newest analysis"
        )));
    };
    let plan = crate::labels::plans(&a, &r.cluster, state.labels.custom_layouts.as_ref())
        .remove(&r.node)
        .filter(|p| match &r.proposal {
            Proposal::MigLayout { config_name, .. } => p.value == *config_name,
            Proposal::Sharing { .. } => p.label == model::labels::OPERATOR_DEVICE_PLUGIN_CONFIG,
            _ => false,
        });
    let (action_id, action_state) = match &plan {
        Some(p) => state
            .store
            .label_actions(&store::label_actions::ActionFilter {
                node: Some(&r.node),
                ..store::label_actions::ActionFilter::newest(20)
            })
            .await?
            .into_iter()
            .find(|x| x.label == p.label && x.value == p.value)
            .map_or((None, None), |x| (Some(x.id), Some(x.state))),
        None => (None, None),
    };
    let csrf =
        operator(&state, &headers).and_then(|(_, cookie)| session::csrf(&state.labels, &cookie));
    let mut configs = Vec::new();
    match &r.proposal {
        Proposal::MigLayout {
            config_name,
            mig_parted_yaml,
            ..
        } => configs.push((
            format!("mig-parted config {config_name}"),
            mig_parted_yaml.clone(),
        )),
        Proposal::Sharing {
            device_plugin_yaml, ..
        } => configs.push((
            "NVIDIA device plugin config".into(),
            device_plugin_yaml.clone(),
        )),
        other => configs.push((
            "Proposal".into(),
            serde_json::to_string_pretty(other).unwrap_or_default(),
        )),
    }
    let rp = &r.replay;
    let v = pages::RecView {
        id: r.id.clone(),
        kind: r.kind.as_str().into(),
        node: r.node.clone(),
        summary: r.summary.clone(),
        confidence: r.confidence,
        tenants: r.tenants.iter().map(|k| name_of(&a, k)).collect(),
        replay: vec![
            ("hours of demand replayed".into(), rp.hours.to_string()),
            (
                "contended tenant-hours today".into(),
                format::num(rp.contention_hours_before),
            ),
            (
                "contended tenant-hours after".into(),
                format::num(rp.contention_hours_after),
            ),
            (
                "memory overflow tenant-hours".into(),
                format::num(rp.memory_overflow_hours),
            ),
            (
                "memory overflow risk".into(),
                format!("{:.1} %", rp.memory_overflow_risk * 100.0),
            ),
            ("GPUs freed".into(), format!("{:.2}", rp.gpus_freed)),
            (
                "verdict".into(),
                if rp.harmful {
                    "harmful".into()
                } else {
                    "no predicted harm".into()
                },
            ),
        ],
        configs,
        findings: r
            .findings
            .iter()
            .filter_map(|fid| a.findings.iter().find(|f| &f.id == fid))
            .map(|f| (f.id.clone(), f.summary.clone()))
            .collect(),
        actuation: pages::Actuation {
            mode: state.labels.mode.as_str().into(),
            label: plan.as_ref().map(|p| p.label.clone()),
            value: plan.as_ref().map(|p| p.value.clone()),
            action_id,
            action_state,
            csrf,
        },
    };
    let mut f = frame(
        &state,
        &headers,
        format!("{} recommendation", r.kind.as_str()),
    );
    f.notice = match (nq.approved, nq.error) {
        (Some(id), _) => Some(format!(
            "Label action {id} approved: the collector runs it within {}.",
            humantime::format_duration(state.labels.every)
        )),
        (_, Some(e)) => Some(e),
        _ => None,
    };
    Ok(Html(pages::recommendation(f, v)))
}

#[derive(Debug, Deserialize)]
pub struct ApproveForm {
    pub csrf: String,
    pub action: i64,
    #[serde(default)]
    pub override_pods: Option<String>,
}

pub async fn approve(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ApproveForm>,
) -> Response {
    let back = format!("/recommendations/{}", enc(&id));
    let Some((who, cookie)) = operator(&state, &headers) else {
        return (
            StatusCode::UNAUTHORIZED,
            Html(pages::problem(
                frame(&state, &headers, "Sign in"),
                "Sign in as an operator to approve changes.".into(),
            )),
        )
            .into_response();
    };
    let want = session::csrf(&state.labels, &cookie).unwrap_or_default();
    if !crate::signing::constant_time_eq(want.as_bytes(), form.csrf.as_bytes()) {
        return (
            StatusCode::FORBIDDEN,
            Html(pages::problem(
                frame(&state, &headers, "Refused"),
                "The form's CSRF token does not match your session; reload the page and try again."
                    .into(),
            )),
        )
            .into_response();
    }
    match crate::labels::approve(
        &state.store,
        &state.labels,
        form.action,
        &who,
        form.override_pods.is_some(),
        model::time::now_ms(),
    )
    .await
    {
        Ok(()) => Redirect::to(&format!("{back}?approved={}", form.action)).into_response(),
        Err(e) => Redirect::to(&format!("{back}?error={}", enc(&e.to_string()))).into_response(),
    }
}

// ---------------------------------------------------------------- reports, alerts, sign-in

pub async fn reports(State(state): State<DashboardState>, headers: HeaderMap) -> Page {
    let rows = state
        .store
        .reports(104)
        .await?
        .into_iter()
        .map(|r| pages::ReportRow {
            html: crate::reports::link(None, &r.week, &r.timezone, "html"),
            csv: crate::reports::link(None, &r.week, &r.timezone, "csv"),
            week: r.week,
            timezone: r.timezone,
            summary: r.summary,
        })
        .collect();
    Ok(Html(pages::reports(
        frame(&state, &headers, "Reports"),
        rows,
    )))
}

pub async fn alerts(State(state): State<DashboardState>, headers: HeaderMap) -> Page {
    use crate::alerts::AlertState as S;
    let mut list = crate::alerts::load(&state.store).await?;
    list.sort_by_key(|a| {
        (
            match a.state {
                S::Firing => 0,
                S::Pending => 1,
                S::Resolved => 2,
            },
            -a.active_ms,
        )
    });
    let rows = list
        .into_iter()
        .map(|a| pages::AlertRow {
            name: a.rule.clone(),
            state: a.state.as_str().into(),
            severity: a.labels.get("severity").cloned().unwrap_or_default(),
            node: a.labels.get("node").cloned().unwrap_or_default(),
            description: a
                .annotations
                .get("description")
                .or_else(|| a.annotations.get("summary"))
                .cloned()
                .unwrap_or_default(),
            since: time(a.ends_ms.or(a.starts_ms).unwrap_or(a.active_ms)),
        })
        .collect();
    let notes = state
        .store
        .notifications(None, 50)
        .await?
        .into_iter()
        .map(|n| pages::NotificationRow {
            id: n.id,
            receiver: n.receiver,
            status: n.status,
            state: n.state,
            attempts: n.attempts,
            created: time(n.created_ms),
            error: n.last_error.unwrap_or_default(),
        })
        .collect();
    let mut f = frame(&state, &headers, "Alerts");
    f.refresh_s = Some(30);
    Ok(Html(pages::alerts(f, rows, notes)))
}

pub async fn login_page(State(state): State<DashboardState>, headers: HeaderMap) -> Html<String> {
    Html(pages::login(frame(&state, &headers, "Sign in"), None))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    pub token: String,
}

pub async fn login(
    State(state): State<DashboardState>,
    peer: Option<axum::extract::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let now = model::time::now_ms();
    // Without a socket (tests driving the router) every caller shares one record.
    let addr = peer.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.0.0.ip());
    if let Err(wait) = state.sessions.may_try(addr, now) {
        tracing::warn!(%addr, wait_s = wait, "sign-in refused: too many wrong tokens from this address");
        let mut resp = (
            StatusCode::TOO_MANY_REQUESTS,
            Html(pages::login(
                frame(&state, &headers, "Sign in"),
                Some(format!(
                    "Too many wrong tokens from your address; try again in {wait} s."
                )),
            )),
        )
            .into_response();
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(wait));
        return resp;
    }
    let Some(name) = state.labels.operator(form.token.trim()).map(str::to_owned) else {
        state.sessions.failed(addr, now);
        tracing::warn!(%addr, "sign-in with a wrong operator token");
        return (
            StatusCode::UNAUTHORIZED,
            Html(pages::login(
                frame(&state, &headers, "Sign in"),
                Some("That is not an operator token.".into()),
            )),
        )
            .into_response();
    };
    state.sessions.succeeded(addr);
    let Some(cookie) = session::issue(&state.labels, &name, now) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    tracing::info!(operator = %name, %addr, "operator signed in");
    (
        [(
            header::SET_COOKIE,
            format!(
                "{}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
                session::COOKIE,
                session::LIFETIME_MS / 1000,
                secure(&state)
            ),
        )],
        Redirect::to("/recommendations"),
    )
        .into_response()
}

/// `; Secure` when the configuration says the dashboard is reached over TLS.
fn secure(state: &DashboardState) -> &'static str {
    if state.labels.secure_cookies {
        "; Secure"
    } else {
        ""
    }
}

/// Signs out: the session's cookie is revoked on the server (a copy of it no longer works)
/// and cleared in the browser.
pub async fn logout(State(state): State<DashboardState>, headers: HeaderMap) -> Response {
    if let Some(cookie) =
        session::from_header(headers.get(header::COOKIE).and_then(|v| v.to_str().ok()))
        && session::verify(&state.labels, &cookie, model::time::now_ms()).is_some()
    {
        // Only a genuine session is recorded: the list cannot be filled with made-up values.
        state.sessions.revoke(&cookie, model::time::now_ms());
    }
    (
        [(
            header::SET_COOKIE,
            format!(
                "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
                session::COOKIE,
                secure(&state)
            ),
        )],
        Redirect::to("/"),
    )
        .into_response()
}
