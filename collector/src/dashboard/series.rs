//! Series the pages chart: fleet means over a range, one tenant's or device's line.

use super::page::*;

#[derive(Debug, Deserialize)]
pub struct RangeQuery {
    pub range: Option<String>,
    /// The overview's custom range (as on the tenants' page); other pages take `range` only.
    pub from: Option<String>,
    pub to: Option<String>,
    /// `csv` with `table`: one of the page's tables as a download.
    pub format: Option<String>,
    pub table: Option<String>,
}

impl RangeQuery {
    pub(super) fn asked(&self) -> (Option<&str>, Option<&str>) {
        (self.format.as_deref(), self.table.as_deref())
    }
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
        .shared
        .store
        .series(&q, model::time::now_ms(), &state.shared.retention)
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

/// A trend: this period's mean, and the change against the previous period of equal length
/// compared hour for hour.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct TrendNumbers {
    /// Mean over this period's hours with data.
    pub now: Option<f64>,
    /// Mean over the previous period's hours with data.
    pub before: Option<f64>,
    /// Relative change of the means over the hour pairs (the same hour of each period) that
    /// both have data; `None` when they are fewer than a tenth of the period's hours.
    pub change: Option<f64>,
    /// Hours of the previous period with data, and hours in a period.
    pub before_hours: usize,
    pub hours: usize,
}

/// The fleet trend of `metric` over [from, to) against the period before it, read per hour.
pub(super) async fn trend(
    state: &DashboardState,
    metric: Metric,
    from: i64,
    to: i64,
) -> TrendNumbers {
    let (now, before) = periods(from, to);
    let hour = model::rollup::HOUR_MS;
    let (now, before) = tokio::join!(
        mean_series(state, metric, Entity::Fleet, now.0, now.1, hour),
        mean_series(state, metric, Entity::Fleet, before.0, before.1, hour)
    );
    let values = |s: Option<store::Series>| -> Vec<Option<f64>> {
        s.map(|s| s.points.into_iter().map(|p| p.1).collect())
            .unwrap_or_default()
    };
    compare(&values(now), &values(before))
}

/// The two periods a trend compares, in whole UTC hours and disjoint: this one ends with the
/// hour that holds `to` and is as many hours long as [from, to) (rounded up); the previous one
/// is as long and ends where this one starts, so no hour counts in both.
pub(super) fn periods(from: i64, to: i64) -> ((i64, i64), (i64, i64)) {
    let hour = model::rollup::HOUR_MS;
    let hours = ((to - from).max(1) + hour - 1) / hour;
    let end = model::rollup::bucket_of(to - 1, hour) + hour;
    let start = end - hours * hour;
    ((start, end), (start - hours * hour, start))
}

/// Compares two periods given hour by hour (the same index is the same hour of each period):
/// each side's mean over its hours with data, and the change over the hours both have.
pub(super) fn compare(now: &[Option<f64>], before: &[Option<f64>]) -> TrendNumbers {
    let mean = |v: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
        (n > 0).then(|| sum / n as f64)
    };
    let pairs: Vec<(f64, f64)> = now
        .iter()
        .zip(before)
        .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
        .collect();
    let change = match (
        mean(&mut pairs.iter().map(|p| p.0)),
        mean(&mut pairs.iter().map(|p| p.1)),
    ) {
        // Fewer than a tenth of the hours to compare says nothing about the period.
        (Some(a), Some(b)) if b != 0.0 && pairs.len() * 10 >= now.len().max(1) => Some((a - b) / b),
        _ => None,
    };
    TrendNumbers {
        now: mean(&mut now.iter().flatten().copied()),
        before: mean(&mut before.iter().flatten().copied()),
        change,
        before_hours: before.iter().flatten().count(),
        hours: now.len().max(before.len()),
    }
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
    use super::{compare, periods};

    /// A 7-day trend at 12:17 compares 168 hours with the 168 before them.
    #[test]
    fn the_two_periods_are_whole_hours_and_disjoint() {
        let h = model::rollup::HOUR_MS;
        let to = 20_000 * 24 * h + 12 * h + 17 * 60_000;
        let ((a, b), (c, d)) = periods(to - 7 * 24 * h, to);
        assert_eq!((b - a) / h, 168);
        assert_eq!((d - c) / h, 168);
        assert_eq!(d, a, "the previous period ends where this one starts");
        assert!(b >= to && b - to < h && a % h == 0);
    }

    #[test]
    fn no_previous_data_is_said_and_partial_periods_compare_hour_for_hour() {
        let none = vec![None; 168];
        let busy = vec![Some(0.4); 168];
        let t = compare(&busy, &none);
        assert_eq!((t.before, t.change, t.before_hours), (None, None, 0));
        assert!((t.now.unwrap() - 0.4).abs() < 1e-12);
        // The previous period has data only in its last day (the start of the history): its
        // mean is that day's, and the change compares that day with the same hours of this
        // period, not with all 168.
        let mut now = vec![Some(0.4); 168];
        let mut before = vec![None; 168];
        for h in 144..168 {
            now[h] = Some(0.2);
            before[h] = Some(0.1);
        }
        let t = compare(&now, &before);
        assert!((t.before.unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(t.before_hours, 24);
        assert!((t.change.unwrap() - 1.0).abs() < 1e-12, "{t:?}");
        // One hour of 168 to compare is too little to call a change.
        before = vec![None; 168];
        before[167] = Some(0.1);
        let t = compare(&now, &before);
        assert_eq!((t.before, t.change), (Some(0.1), None));
    }
}
