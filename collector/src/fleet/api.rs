//! The read API under `/api/v1/`: nodes, GPUs, tenants and time series. View types here are
//! the JSON shapes clients see; times are RFC 3339 strings in UTC.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use collector_shared::error::ApiError;
use store::{
    Agg, Entity, GpuRecord, Metric, MigRecord, NodeRecord, Series, SeriesQuery, TenantRecord,
};

use model::time::rfc3339;

use super::node_status;
use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::http::{bad_query, parse_step, parse_time};
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;
use serde_json::json;

/// The inventory and series routes (merged in `router.rs`).
pub fn routes() -> Routes<Shared> {
    Routes::new()
        .get("/api/v1/nodes", Read(NoTenants), nodes_op(), nodes)
        .get("/api/v1/gpus", Read(NoTenants), gpus_op(), gpus)
        .get("/api/v1/tenants", Read(Filtered), tenants_op(), tenants)
        .get("/api/v1/series", Read(Filtered), series_op(), series)
}

/// `{"<key>": [<schema>…]}`.
fn list_of(key: &str, schema: &str) -> serde_json::Value {
    json!({"type": "object", "properties": {key: {"type": "array", "items": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn nodes_op() -> Op {
    Op::new("Nodes with their status (reporting or silent)")
        .json(200, "Nodes", list_of("nodes", "Node"))
        .refusals(&[503])
}

fn gpus_op() -> Op {
    Op::new("GPUs with their MIG instances")
        .param(json!({"name": "node", "in": "query", "schema": {"type": "string"}}))
        .json(200, "GPUs", list_of("gpus", "Gpu"))
        .refusals(&[400])
}

fn tenants_op() -> Op {
    Op::new("Tenants (pods, Slurm jobs, host users) merged over the nodes they were seen on").json(
        200,
        "Tenants",
        list_of("tenants", "Tenant"),
    )
}

fn series_op() -> Op {
    let metrics: Vec<&str> = store::series::METRICS.iter().map(|m| m.name).collect();
    Op::new("One metric of one entity over a range; the stored resolution (raw, 1m, 1h) is chosen from range and step")
        .param(json!({"name": "metric", "in": "query", "required": true, "schema": {"type": "string", "enum": metrics}}))
        .param(json!({"name": "entity", "in": "query", "required": true, "description": "gpu:UUID, node:NAME, cluster:NAME, tenant:KEY or fleet", "schema": {"type": "string", "pattern": "^(fleet|(gpu|node|cluster|tenant):.+)$"}}))
        .param(json!({"name": "from", "in": "query", "description": "RFC 3339, Unix ms, now, now-7d (default: to minus 1 h)", "schema": {"type": "string", "minLength": 1}}))
        .param(json!({"name": "to", "in": "query", "description": "as from (default: now)", "schema": {"type": "string", "minLength": 1}}))
        .param(json!({"name": "step", "in": "query", "description": "60s, 1h, or seconds (default: range/500)", "schema": {"type": "string"}}))
        .param(json!({"name": "agg", "in": "query", "schema": {"type": "string", "enum": ["mean", "max", "p95"], "default": "mean"}}))
        .param(json!({"name": "cluster", "in": "query", "description": "The cluster of a tenant:KEY entity (the same key, e.g. host/1001, names different tenants in different clusters); unset: every cluster's tenant of that key. A DNS-1123 subdomain; refused for other entities.", "schema": {"type": "string", "minLength": 1, "maxLength": 253}}))
        .json(200, "The series", json!({"$ref": "#/components/schemas/Series"}))
        .refusals(&[400, 404, 503])
}

#[derive(Debug, Serialize)]
pub struct NodeView {
    pub cluster: String,
    pub node: String,
    /// "reporting" or "silent".
    pub status: &'static str,
    pub gpu_count: i64,
    pub agent_version: Option<String>,
    pub interval_ms: i64,
    pub first_seen: String,
    pub last_seen: String,
    pub last_sample: Option<String>,
}

impl NodeView {
    fn new(n: NodeRecord, now: i64) -> NodeView {
        NodeView {
            status: node_status(&n, now),
            cluster: n.cluster,
            node: n.node,
            gpu_count: n.gpu_count,
            agent_version: n.agent_version,
            interval_ms: n.interval_ms,
            first_seen: rfc3339(n.first_seen_ms),
            last_seen: rfc3339(n.last_seen_ms),
            last_sample: n.last_sample_ms.map(rfc3339),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct NodesResponse {
    pub nodes: Vec<NodeView>,
}

pub async fn nodes(State(state): State<Shared>) -> Result<Json<NodesResponse>, ApiError> {
    let now = model::time::now_ms();
    let nodes = state
        .store
        .nodes()
        .await?
        .into_iter()
        .map(|n| NodeView::new(n, now))
        .collect();
    Ok(Json(NodesResponse { nodes }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpusParams {
    pub node: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct GpusResponse {
    pub gpus: Vec<GpuView>,
}

#[derive(Debug, Serialize)]
pub struct GpuView {
    pub cluster: String,
    pub node: String,
    pub uuid: String,
    pub index: i64,
    pub model: String,
    pub memory_total_bytes: i64,
    pub pci_bus_id: Option<String>,
    pub mig_enabled: bool,
    pub sharing: model::inventory::Sharing,
    pub replicas: i64,
    pub mig_instances: Vec<MigView>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub first_seen: String,
    pub last_seen: String,
    /// NVML reports no utilization for MIG instances; only DCGM profiling can.
    pub utilization_note: Option<&'static str>,
}

pub async fn gpus(
    State(state): State<Shared>,
    p: Result<Query<GpusParams>, QueryRejection>,
) -> Result<Json<GpusResponse>, ApiError> {
    let Query(p) = p.map_err(bad_query)?;
    let gpus = state
        .store
        .gpus(p.node.as_deref())
        .await?
        .into_iter()
        .map(GpuView::from)
        .collect();
    Ok(Json(GpusResponse { gpus }))
}

impl From<GpuRecord> for GpuView {
    fn from(g: GpuRecord) -> Self {
        GpuView {
            first_seen: rfc3339(g.first_seen_ms),
            last_seen: rfc3339(g.last_seen_ms),
            utilization_note: g
                .mig_enabled
                .then_some("MIG instance utilization is not measurable without DCGM"),
            cluster: g.cluster,
            node: g.node,
            uuid: g.uuid,
            index: g.index,
            model: g.model,
            memory_total_bytes: g.memory_total_bytes,
            pci_bus_id: g.pci_bus_id,
            mig_enabled: g.mig_enabled,
            sharing: g.sharing,
            replicas: g.replicas,
            mig_instances: g.mig_instances.into_iter().map(MigView::from).collect(),
            first_seen_ms: g.first_seen_ms,
            last_seen_ms: g.last_seen_ms,
        }
    }
}

/// A MIG instance: GPU instance, compute instance, profile and where it sits.
#[derive(Debug, Serialize)]
pub struct MigView {
    pub gi_id: i64,
    pub ci_id: i64,
    pub profile: String,
    pub placement_start: Option<i64>,
    pub placement_size: Option<i64>,
    pub memory_total_bytes: i64,
    pub compute_slices: Option<i64>,
    pub uuid: Option<String>,
}

impl From<MigRecord> for MigView {
    fn from(m: MigRecord) -> Self {
        MigView {
            gi_id: m.gi_id,
            ci_id: m.ci_id,
            profile: m.profile,
            placement_start: m.placement_start,
            placement_size: m.placement_size,
            memory_total_bytes: m.memory_total_bytes,
            compute_slices: m.compute_slices,
            uuid: m.uuid,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TenantsResponse {
    pub tenants: Vec<TenantView>,
}

#[derive(Debug, Serialize)]
pub struct TenantView {
    pub cluster: String,
    pub key: String,
    pub kind: String,
    pub team: Option<String>,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub pod_uid: Option<String>,
    pub job_id: Option<String>,
    pub user: Option<String>,
    pub account: Option<String>,
    pub uid: Option<i64>,
    pub nodes: Vec<String>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub name: String,
    pub first_seen: String,
    pub last_seen: String,
}

pub async fn tenants(
    State(state): State<Shared>,
    caller: collector_shared::access::Caller,
) -> Result<Json<TenantsResponse>, ApiError> {
    let tenants = state
        .store
        .tenants()
        .await?
        .into_iter()
        .filter(|t| caller.sees_team(t.team.as_deref()))
        .map(TenantView::from)
        .collect();
    Ok(Json(TenantsResponse { tenants }))
}

impl From<TenantRecord> for TenantView {
    fn from(t: TenantRecord) -> Self {
        let name = t.display_name();
        let who = t.tenant;
        TenantView {
            name,
            first_seen: rfc3339(t.first_seen_ms),
            last_seen: rfc3339(t.last_seen_ms),
            cluster: t.cluster,
            key: who.key,
            kind: who.kind.as_str().to_string(),
            team: t.team,
            namespace: who.namespace,
            pod: who.pod,
            container: who.container,
            pod_uid: who.pod_uid,
            job_id: who.job_id,
            user: who.user,
            account: who.account,
            uid: who.uid.map(i64::from),
            nodes: t.nodes,
            first_seen_ms: t.first_seen_ms,
            last_seen_ms: t.last_seen_ms,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesParams {
    pub metric: Option<String>,
    pub entity: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub step: Option<String>,
    pub agg: Option<String>,
    /// The cluster of a `tenant:KEY` entity (a key such as `host/1001` names different
    /// people in different clusters). Unset: every cluster's tenant of that key.
    pub cluster: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SeriesResponse {
    pub metric: &'static str,
    pub entity: String,
    pub unit: &'static str,
    /// mean | max | p95
    pub agg: &'static str,
    /// raw | 1m | 1h
    pub resolution: &'static str,
    pub from: String,
    pub to: String,
    pub step_seconds: f64,
    /// `[time, value]` pairs; value is null where nothing was measured.
    pub points: Vec<(String, Option<f64>)>,
}

pub async fn series(
    State(state): State<Shared>,
    caller: collector_shared::access::Caller,
    p: Result<Query<SeriesParams>, QueryRejection>,
) -> Result<Json<SeriesResponse>, ApiError> {
    let Query(p) = p.map_err(bad_query)?;
    let now = model::time::now_ms();
    let metric_name = p
        .metric
        .as_deref()
        .ok_or_else(|| ApiError::BadRequest("`metric` is required".into()))?;
    let metric = Metric::parse(metric_name).ok_or_else(|| {
        let known: Vec<_> = store::series::METRICS.iter().map(|m| m.name).collect();
        ApiError::BadRequest(format!(
            "unknown metric {metric_name:?}; known: {}",
            known.join(", ")
        ))
    })?;
    let entity_text = p.entity.as_deref().ok_or_else(|| {
        ApiError::BadRequest(
            "`entity` is required (gpu:UUID, node:NAME, cluster:NAME, tenant:KEY or fleet)".into(),
        )
    })?;
    let entity = Entity::parse(entity_text).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "entity {entity_text:?} is not gpu:UUID, node:NAME, cluster:NAME, tenant:KEY or fleet"
        ))
    })?;
    let entity = match p.cluster.as_deref() {
        Some(c) if entity.is_tenant() => {
            model::names::check_subdomain(c)
                .map_err(|e| ApiError::BadRequest(format!("cluster {e}")))?;
            entity.in_cluster(c)
        }
        Some(_) => {
            return Err(ApiError::BadRequest(
                "`cluster` qualifies tenant:KEY entities only".into(),
            ));
        }
        None => entity,
    };
    ensure_known(&state, &entity, entity_text).await?;
    if let (Entity::Tenant(key) | Entity::TenantIn(_, key), Some(_)) = (&entity, caller.scope()) {
        let cluster = match &entity {
            Entity::TenantIn(c, _) => Some(c.as_str()),
            _ => None,
        };
        // The key may name a tenant in more than one cluster (`host/1001` is uid 1001 on
        // every host), and the series combines them all: the caller must see every one
        // (the first match alone was checked).
        let tenants = state.store.tenants().await?;
        let teams: Vec<Option<&str>> = tenants
            .iter()
            .filter(|t| t.key() == key && cluster.is_none_or(|c| t.cluster == c))
            .map(|t| t.team.as_deref())
            .collect();
        if teams.is_empty() || !teams.iter().all(|team| caller.sees_team(*team)) {
            // The same answer as for a tenant that does not exist: another team's tenants are
            // not even confirmed.
            return Err(ApiError::NotFound(format!(
                "no {entity_text}: gpulens has no data for it (see /api/v1/nodes, /api/v1/gpus, /api/v1/tenants)"
            )));
        }
    }
    let to_ms = match p.to.as_deref() {
        Some(t) => parse_time(t, now)?,
        None => now,
    };
    let from_ms = match p.from.as_deref() {
        Some(t) => parse_time(t, now)?,
        None => to_ms - 3_600_000,
    };
    let step_ms = match p.step.as_deref() {
        Some(s) => parse_step(s)?,
        None => ((to_ms - from_ms) / 500).max(1000),
    };
    let agg = match p.agg.as_deref() {
        None => Agg::Mean,
        Some(a) => Agg::parse(a).ok_or_else(|| {
            ApiError::BadRequest(format!("agg must be mean, max or p95, got {a:?}"))
        })?,
    };
    let q = SeriesQuery {
        metric,
        entity,
        from_ms,
        to_ms,
        step_ms,
        agg,
    };
    let Series {
        metric,
        unit,
        resolution,
        step_ms,
        points,
    } = state.store.series(&q, now, &state.retention).await?;
    Ok(Json(SeriesResponse {
        metric: metric.name(),
        entity: entity_text.to_owned(),
        unit,
        agg: agg.as_str(),
        resolution: resolution.as_str(),
        from: rfc3339(from_ms),
        to: rfc3339(to_ms),
        step_seconds: step_ms as f64 / 1000.0,
        points: points.into_iter().map(|(t, v)| (rfc3339(t), v)).collect(),
    }))
}

/// A series of something gpulens has never seen is a 404 naming it, not a run of nulls.
async fn ensure_known(state: &Shared, entity: &Entity, text: &str) -> Result<(), ApiError> {
    if state.store.is_known(entity).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "no {text}: gpulens has no data for it (see /api/v1/nodes, /api/v1/gpus, /api/v1/tenants)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time("now", now).unwrap(), now);
        assert_eq!(parse_time("now-1h", now).unwrap(), now - 3_600_000);
        assert_eq!(parse_time("-7d", now).unwrap(), now - 7 * 86_400_000);
        assert_eq!(parse_time("1700000000000", now).unwrap(), 1_700_000_000_000);
        assert_eq!(
            parse_time("2026-11-21T00:00:00Z", now).unwrap(),
            1_795_219_200_000
        );
        assert!(parse_time("yesterday", now).is_err());
        // The query domain: nothing before 1970 or after 9999, and no overflow on the way.
        for bad in [
            "9223372036854775807",
            "-1",
            "now-300000000000d",
            "now-18446744073709551615s",
        ] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
        for bad in [
            "inf",
            "NaN",
            "1e300",
            "18446744073709551616",
            "-5",
            "0",
            "4000d",
        ] {
            assert!(parse_step(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_step("60").unwrap(), 60_000);
        assert_eq!(parse_step("5m").unwrap(), 300_000);
        assert!(parse_step("0").is_err());
        assert_eq!(rfc3339(1_795_219_200_000), "2026-11-21T00:00:00.000Z");
    }
}
