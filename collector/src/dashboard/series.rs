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

/// The fleet mean of `metric` over [from, to), for the trend: read per hour and averaged over
/// the hours with data (each weighs the same; hours without data count nothing), so a period
/// only partly covered is compared on what it has, and one with no data is `None` ("no
/// previous data") instead of a mean of epoch-aligned partial buckets.
pub(super) async fn mean_over(
    state: &DashboardState,
    metric: Metric,
    from: i64,
    to: i64,
) -> Option<f64> {
    let s = mean_series(
        state,
        metric,
        Entity::Fleet,
        from,
        to,
        model::rollup::HOUR_MS,
    )
    .await?;
    period_mean(&s.points)
}

/// The mean of the points that have a value; `None` when none has.
pub(super) fn period_mean(points: &[(i64, Option<f64>)]) -> Option<f64> {
    let vals: Vec<f64> = points.iter().filter_map(|(_, v)| *v).collect();
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

#[cfg(test)]
mod tests {
    use super::period_mean;

    #[test]
    fn a_period_without_data_has_no_mean_and_partial_ones_count_their_hours() {
        assert_eq!(period_mean(&[(0, None), (1, None)]), None);
        assert_eq!(period_mean(&[]), None);
        // Two hours with data of 168: their mean, not diluted by the empty hours.
        let mut pts: Vec<(i64, Option<f64>)> = (0..168).map(|h| (h, None)).collect();
        pts[166].1 = Some(0.2);
        pts[167].1 = Some(0.4);
        assert!((period_mean(&pts).unwrap() - 0.3).abs() < 1e-12);
    }
}
