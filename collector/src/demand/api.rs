//! `GET /api/v1/waiting`: the recorded waiting work as series — units of each GPU resource
//! waiting, per cluster, team, resource and source, the mean over each step — with the
//! unit-hours each waited over the range.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use model::time::rfc3339;
use serde::{Deserialize, Serialize};
use serde_json::json;
use store::waiting::WaitingRecord;

use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::error::ApiError;
use collector_shared::http::{bad_query, parse_step, parse_time};
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;

/// Most steps one answer has; a finer step over a longer range is refused.
pub const MAX_STEPS: i64 = 2_000;
/// Most series one answer has (the most unit-hours first); `truncated` says when more waited.
pub const MAX_SERIES: usize = 500;

/// The waiting-work route (merged in `router.rs`).
pub fn routes() -> Routes<Shared> {
    Routes::new().get("/api/v1/waiting", Read(Filtered), waiting_op(), waiting)
}

fn waiting_op() -> Op {
    Op::new("Work that waited for GPUs (pending pods, unadmitted Kueue workloads; docs/demand.md) as series: per cluster, team, resource and source, the units of the resource waiting, the mean over each step (steps with nothing waiting are left out), and the unit-hours waited over the range. The most unit-hours first; at most 500 series.")
        .param(json!({"name": "from", "in": "query", "description": "RFC 3339, Unix ms, now, now-7d (default: to minus 7 days)", "schema": {"type": "string", "minLength": 1}}))
        .param(json!({"name": "to", "in": "query", "description": "as from (default: now)", "schema": {"type": "string", "minLength": 1}}))
        .param(json!({"name": "step", "in": "query", "description": "60s, 1h, or seconds (default: 1h); at most 2,000 steps over the range", "schema": {"type": "string"}}))
        .param(json!({"name": "team", "in": "query", "description": "Only this team's waiting work.", "schema": {"type": "string"}}))
        .json(200, "The waiting work", json!({"type": "object", "required": ["from", "to", "step_s", "count", "truncated", "series"], "properties": {
            "from": {"type": "string"}, "to": {"type": "string"}, "step_s": {"type": "integer"},
            "count": {"type": "integer"}, "truncated": {"type": "boolean"},
            "series": {"type": "array", "items": {"type": "object", "required": ["cluster", "team", "resource", "source", "unit_hours", "items", "points"], "properties": {
                "cluster": {"type": "string"}, "team": {"type": "string"}, "resource": {"type": "string"},
                "source": {"type": "string", "enum": ["pod", "kueue_workload"]},
                "unit_hours": {"type": "number"}, "items": {"type": "integer"},
                "points": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}}}}}}}))
        .refusals(&[400, 503])
}

#[derive(Debug, Deserialize)]
pub struct WaitingParams {
    from: Option<String>,
    to: Option<String>,
    step: Option<String>,
    team: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct WaitingSeries {
    pub cluster: String,
    pub team: String,
    pub resource: String,
    pub source: String,
    /// Units of the resource × hours waited inside the range.
    pub unit_hours: f64,
    /// Pods or Workloads that waited.
    pub items: usize,
    /// `[step start (ms), mean units waiting in the step]`, steps with none left out.
    pub points: Vec<(i64, f64)>,
}

#[derive(Debug, Serialize)]
pub struct WaitingResponse {
    pub from: String,
    pub to: String,
    pub step_s: i64,
    pub count: usize,
    pub truncated: bool,
    pub series: Vec<WaitingSeries>,
}

/// A series' identity: cluster, team, resource, source.
type Key<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The part of `[a, b)` inside `[from, to)`, in ms.
fn overlap(a: i64, b: i64, from: i64, to: i64) -> i64 {
    (b.min(to) - a.max(from)).max(0)
}

/// One series' episodes as mean units per step: each episode adds its count × the part of each
/// step it covers.
fn points(episodes: &[&WaitingRecord], from: i64, to: i64, step: i64) -> Vec<(i64, f64)> {
    let steps = ((to - from + step - 1) / step) as usize;
    let mut sums = vec![0.0_f64; steps];
    for e in episodes {
        let (a, b) = (e.since_ms.max(from), e.last_seen_ms.min(to));
        if b <= a {
            continue;
        }
        let (first, last) = (
            ((a - from) / step) as usize,
            ((b - 1 - from) / step) as usize,
        );
        for (i, sum) in sums.iter_mut().enumerate().take(last + 1).skip(first) {
            let start = from + i as i64 * step;
            *sum += e.count as f64 * overlap(a, b, start, start + step) as f64;
        }
    }
    sums.into_iter()
        .enumerate()
        .filter(|(_, s)| *s > 0.0)
        .map(|(i, s)| {
            let start = from + i as i64 * step;
            (start, s / (to.min(start + step) - start) as f64)
        })
        .collect()
}

pub async fn waiting(
    State(state): State<Shared>,
    caller: collector_shared::access::Caller,
    p: Result<Query<WaitingParams>, QueryRejection>,
) -> Result<Json<WaitingResponse>, ApiError> {
    let Query(p) = p.map_err(bad_query)?;
    let now = model::time::now_ms();
    let to = p.to.as_deref().map_or(Ok(now), |t| parse_time(t, now))?;
    let from = match p.from.as_deref() {
        Some(f) => parse_time(f, now)?,
        None => to - 7 * 86_400_000,
    };
    let step = p.step.as_deref().map_or(Ok(3_600_000), parse_step)?;
    if from >= to {
        return Err(ApiError::BadRequest("`from` must be before `to`".into()));
    }
    let steps = (to - from + step - 1) / step;
    if steps > MAX_STEPS {
        return Err(ApiError::BadRequest(format!(
            "{steps} steps of {} s over the range: at most {MAX_STEPS}; choose a longer step or a shorter range",
            step / 1000
        )));
    }
    let episodes = state.store.waiting(from, to).await?;
    let mut groups: BTreeMap<Key, Vec<&WaitingRecord>> = BTreeMap::new();
    for e in episodes
        .iter()
        .filter(|e| caller.sees_team(Some(&e.team)))
        .filter(|e| p.team.as_deref().is_none_or(|t| t == e.team))
    {
        groups
            .entry((&e.cluster, &e.team, &e.resource, &e.source))
            .or_default()
            .push(e);
    }
    let hours = |es: &[&WaitingRecord]| {
        es.iter()
            .map(|e| e.count as f64 * overlap(e.since_ms, e.last_seen_ms, from, to) as f64)
            .sum::<f64>()
            / 3_600_000.0
    };
    let mut ranked: Vec<(Key, Vec<&WaitingRecord>, f64)> = groups
        .into_iter()
        .map(|(k, es)| {
            let h = hours(&es);
            (k, es, h)
        })
        .collect();
    ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let truncated = ranked.len() > MAX_SERIES;
    ranked.truncate(MAX_SERIES);
    let series: Vec<WaitingSeries> = ranked
        .into_iter()
        .map(
            |((cluster, team, resource, source), es, unit_hours)| WaitingSeries {
                cluster: cluster.to_owned(),
                team: team.to_owned(),
                resource: resource.to_owned(),
                source: source.to_owned(),
                unit_hours,
                items: es
                    .iter()
                    .map(|e| e.uid.as_str())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
                points: points(&es, from, to, step),
            },
        )
        .collect();
    Ok(Json(WaitingResponse {
        from: rfc3339(from),
        to: rfc3339(to),
        step_s: step / 1000,
        count: series.len(),
        truncated,
        series,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(since: i64, last: i64, count: i64) -> WaitingRecord {
        WaitingRecord {
            cluster: "c".into(),
            source: "pod".into(),
            uid: format!("u{since}"),
            scope: "ml".into(),
            team: "ml".into(),
            name: "p".into(),
            resource: "nvidia.com/gpu".into(),
            count,
            product: None,
            reason: String::new(),
            message: String::new(),
            since_ms: since,
            first_seen_ms: since,
            last_seen_ms: last,
        }
    }

    #[test]
    fn steps_hold_the_mean_units_waiting_and_empty_steps_are_left_out() {
        let h = 3_600_000;
        // 2 GPUs from 0:30 to 2:00, 1 GPU from 1:00 to 1:15; nothing in hour 3.
        let a = episode(h / 2, 2 * h, 2);
        let b = episode(h, h + h / 4, 1);
        let p = points(&[&a, &b], 0, 4 * h, h);
        assert_eq!(p, [(0, 1.0), (h, 2.25)]);
        // A range that ends inside a step: the last step's mean is over its part in range.
        assert_eq!(points(&[&a], 0, h + h / 2, h), [(0, 1.0), (h, 2.0)]);
    }
}
