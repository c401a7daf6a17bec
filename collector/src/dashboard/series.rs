//! Series the pages chart: fleet means over a range, one tenant's or device's line.

use super::*;

#[derive(Debug, Deserialize)]
pub struct RangeQuery {
    pub range: Option<String>,
}

/// The mean of `metric` for `entity` per `step`; `None` when the store cannot answer.
pub(super) async fn mean_series(
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
pub(super) fn shown(s: store::Series) -> Vec<(i64, Option<f64>)> {
    let scale = if s.unit == "ratio" { 100.0 } else { 1.0 };
    s.points
        .into_iter()
        .map(|(t, v)| (t, v.map(|x| x * scale)))
        .collect()
}

pub(super) async fn mean_over(
    state: &DashboardState,
    metric: Metric,
    from: i64,
    to: i64,
) -> Option<f64> {
    let s = mean_series(state, metric, Entity::Fleet, from, to, to - from).await?;
    let vals: Vec<f64> = s.points.iter().filter_map(|(_, v)| *v).collect();
    (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
}

pub(super) async fn fleet_series(
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
