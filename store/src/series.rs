//! Time-series queries: which metric of which entity over which range at which step, and
//! which stored resolution (raw, 1-minute or 1-hour rollups) answers it.

use std::sync::LazyLock;

use model::profiling::{self, Ratio, RatioSpec};

use crate::dialect::Dialect;
use crate::error::StoreError;
use crate::records::Retention;

/// The metrics `/api/v1/series` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    GpuUtil,
    /// Share of samples in which a kernel ran.
    Active,
    /// A DCGM profiling ratio ([`model::profiling`]).
    Ratio(Ratio),
    MemUsedBytes,
    PowerW,
    TempC,
    /// Share of the GPU held by allocations.
    AllocShare,
    /// Tenant: its processes' share of SM time.
    SmUtil,
    /// Tenant: its effective use of the physical GPU (GPU-equivalents), as the funnel counts
    /// it: the kernel activity of its allocation.
    Effective,
}

/// Where a metric lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Gpu,
    Tenant,
}

/// How a metric reads one raw sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawValue {
    /// The value of a column.
    Column(&'static str),
    /// 1 when a column is above zero, 0 when it is not, unknown when it is unknown.
    Busy(&'static str),
}

/// How one metric is read at each resolution.
#[derive(Debug, Clone, Copy)]
pub struct MetricSpec {
    pub metric: Metric,
    pub name: &'static str,
    pub unit: &'static str,
    pub family: Family,
    /// How a raw sample gives the metric, or None when only rollups carry it.
    pub raw_expr: Option<RawValue>,
    /// Rollup columns: count, sum, max, histogram.
    pub n_col: &'static str,
    pub sum_col: &'static str,
    pub max_col: Option<&'static str>,
    pub hist_col: Option<&'static str>,
}

const fn spec(
    metric: Metric,
    name: &'static str,
    unit: &'static str,
    family: Family,
    raw_expr: Option<RawValue>,
    cols: (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
    ),
) -> MetricSpec {
    MetricSpec {
        metric,
        name,
        unit,
        family,
        raw_expr,
        n_col: cols.0,
        sum_col: cols.1,
        max_col: cols.2,
        hist_col: cols.3,
    }
}

use Family::{Gpu, Tenant};

/// Every metric: GPU utilization and activity, each profiling ratio, then the rest
/// ([`OTHER_METRICS`]).
pub static METRICS: LazyLock<Vec<MetricSpec>> = LazyLock::new(|| {
    let (first, rest) = OTHER_METRICS.split_at(2);
    first
        .iter()
        .copied()
        .chain(profiling::RATIOS.iter().map(ratio_metric))
        .chain(rest.iter().copied())
        .collect()
});

/// A profiling ratio's series: its raw column, its rollup columns.
fn ratio_metric(r: &RatioSpec) -> MetricSpec {
    let cols = r.ratio.rollup_columns();
    spec(
        Metric::Ratio(r.ratio),
        r.name,
        "ratio",
        Gpu,
        Some(RawValue::Column(r.name)),
        (cols.n, cols.sum, cols.max, cols.hist),
    )
}

/// The metrics other than the profiling ratios.
const OTHER_METRICS: &[MetricSpec] = &[
    spec(
        Metric::GpuUtil,
        "gpu_util",
        "ratio",
        Gpu,
        Some(RawValue::Column("gpu_util")),
        (
            "gpu_util_n",
            "gpu_util_sum",
            Some("gpu_util_max"),
            Some("gpu_util_hist"),
        ),
    ),
    spec(
        Metric::Active,
        "active",
        "ratio",
        Gpu,
        Some(RawValue::Busy("gpu_util")),
        ("gpu_util_n", "busy_n", None, None),
    ),
    spec(
        Metric::MemUsedBytes,
        "mem_used_bytes",
        "bytes",
        Gpu,
        Some(RawValue::Column("mem_used_bytes")),
        ("mem_used_n", "mem_used_sum", Some("mem_used_max"), None),
    ),
    spec(
        Metric::PowerW,
        "power_w",
        "watts",
        Gpu,
        Some(RawValue::Column("power_w")),
        ("power_n", "power_sum", Some("power_max"), None),
    ),
    spec(
        Metric::TempC,
        "temp_c",
        "celsius",
        Gpu,
        Some(RawValue::Column("temp_c")),
        ("temp_n", "temp_sum", Some("temp_max"), None),
    ),
    spec(
        Metric::AllocShare,
        "alloc_share",
        "ratio",
        Gpu,
        None,
        ("samples", "alloc_share_sum", None, None),
    ),
    spec(
        Metric::SmUtil,
        "sm_util",
        "ratio",
        Tenant,
        Some(RawValue::Column("sm_util")),
        ("sm_util_n", "sm_util_sum", Some("sm_util_max"), None),
    ),
    spec(
        Metric::Effective,
        "effective",
        "ratio",
        Tenant,
        None,
        ("eff_n", "eff_sum", None, None),
    ),
];

impl Metric {
    pub fn parse(s: &str) -> Option<Metric> {
        METRICS.iter().find(|m| m.name == s).map(|m| m.metric)
    }

    /// The metric's name in queries and answers (`gpu_util`, `mem_used_bytes`, …).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn spec(self) -> &'static MetricSpec {
        METRICS
            .iter()
            .find(|m| m.metric == self)
            .expect("every metric has a spec")
    }
}

/// What a series is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entity {
    Gpu(String),
    Node(String),
    Cluster(String),
    Tenant(String),
    /// A tenant in one cluster: the same key (`host/1001`) names different people in
    /// different clusters.
    TenantIn(String, String),
    Fleet,
}

impl Entity {
    /// Parses `gpu:UUID`, `node:NAME`, `cluster:NAME`, `tenant:KEY` or `fleet`.
    pub fn parse(s: &str) -> Option<Entity> {
        if s == "fleet" {
            return Some(Entity::Fleet);
        }
        let (kind, id) = s.split_once(':')?;
        if id.is_empty() {
            return None;
        }
        let id = id.to_owned();
        Some(match kind {
            "gpu" => Entity::Gpu(id),
            "node" => Entity::Node(id),
            "cluster" => Entity::Cluster(id),
            "tenant" => Entity::Tenant(id),
            _ => return None,
        })
    }

    /// This entity in `cluster` (a tenant key is qualified; other entities are unchanged).
    pub fn in_cluster(self, cluster: &str) -> Entity {
        match self {
            Entity::Tenant(k) | Entity::TenantIn(_, k) => Entity::TenantIn(cluster.to_owned(), k),
            other => other,
        }
    }

    /// Whether this is a tenant (qualified by its cluster or not).
    pub fn is_tenant(&self) -> bool {
        matches!(self, Entity::Tenant(_) | Entity::TenantIn(..))
    }

    /// The columns and values that select this entity's rows (none for the whole fleet).
    pub fn filters(&self) -> Vec<(&'static str, &str)> {
        match self {
            Entity::Gpu(v) => vec![("gpu_uuid", v)],
            Entity::Node(v) => vec![("node", v)],
            Entity::Cluster(v) => vec![("cluster", v)],
            Entity::Tenant(v) => vec![("tenant_key", v)],
            Entity::TenantIn(c, v) => vec![("cluster", c), ("tenant_key", v)],
            Entity::Fleet => vec![],
        }
    }
}

/// How values inside one step are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    Mean,
    Max,
    P95,
}

impl Agg {
    pub fn parse(s: &str) -> Option<Agg> {
        match s {
            "mean" | "avg" => Some(Agg::Mean),
            "max" => Some(Agg::Max),
            "p95" => Some(Agg::P95),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Agg::Mean => "mean",
            Agg::Max => "max",
            Agg::P95 => "p95",
        }
    }
}

/// The width of a rollup table's buckets: its tables are `gpu_rollup_<width>` and
/// `tenant_rollup_<width>` (`1m`, `1h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollups {
    Minute,
    Hour,
}

impl std::fmt::Display for Rollups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Rollups::Minute => "1m",
            Rollups::Hour => "1h",
        })
    }
}

/// The stored resolution a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Raw,
    Minute,
    Hour,
}

impl Resolution {
    /// `raw`, `1m` or `1h`.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Raw => "raw",
            Resolution::Minute => "1m",
            Resolution::Hour => "1h",
        }
    }
}

#[derive(Debug, Clone)]
pub struct SeriesQuery {
    pub metric: Metric,
    pub entity: Entity,
    pub from_ms: i64,
    pub to_ms: i64,
    pub step_ms: i64,
    pub agg: Agg,
}

/// A series: one value per step (None where nothing was measured).
#[derive(Debug, Clone)]
pub struct Series {
    pub metric: Metric,
    pub unit: &'static str,
    pub resolution: Resolution,
    pub step_ms: i64,
    pub points: Vec<(i64, Option<f64>)>,
}

/// The resolution chosen and the effective step.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub resolution: Resolution,
    pub step_ms: i64,
}

/// The most points one query may return.
pub const MAX_POINTS: i64 = 11_000;

/// The time domain of a query (`model::time`); every bound is checked against it before
/// any arithmetic.
pub use model::time::{MAX_STEP_MS, MAX_TIME_MS};

impl SeriesQuery {
    /// Which tables answer the query: tenant tables for tenant entities, GPU tables otherwise.
    pub fn family(&self) -> Family {
        match self.entity {
            Entity::Tenant(_) | Entity::TenantIn(..) => Family::Tenant,
            _ => Family::Gpu,
        }
    }

    /// Picks the finest resolution that still holds the whole range and is not finer than the
    /// step; rounds the step up to a multiple of it.
    pub fn plan(&self, now_ms: i64, retention: &Retention) -> Result<Plan, StoreError> {
        let spec = self.metric.spec();
        if self.to_ms <= self.from_ms {
            return Err(StoreError::BadRequest("`to` must be after `from`".into()));
        }
        if self.step_ms <= 0 || self.step_ms > MAX_STEP_MS {
            return Err(StoreError::BadRequest(format!(
                "`step` must be positive and at most {} days",
                MAX_STEP_MS / 86_400_000
            )));
        }
        for (name, t) in [("from", self.from_ms), ("to", self.to_ms)] {
            if !(0..=MAX_TIME_MS).contains(&t) {
                return Err(StoreError::BadRequest(format!(
                    "`{name}` {t} is outside 1970-01-01 to 9999-12-31 (Unix ms 0 to {MAX_TIME_MS})"
                )));
            }
        }
        let tenant_metrics = [
            Metric::SmUtil,
            Metric::MemUsedBytes,
            Metric::AllocShare,
            Metric::Effective,
        ];
        match &self.entity {
            e if e.is_tenant() && !tenant_metrics.contains(&self.metric) => {
                return Err(StoreError::BadRequest(format!(
                    "metric {} is a GPU metric; tenants have sm_util, mem_used_bytes, alloc_share and effective",
                    spec.name
                )));
            }
            e if e.is_tenant() => {}
            _ if spec.family == Family::Tenant => {
                return Err(StoreError::BadRequest(format!(
                    "metric {} needs a tenant:KEY entity",
                    spec.name
                )));
            }
            _ => {}
        }
        if self.agg == Agg::P95 && spec.hist_col.is_none() && spec.raw_expr.is_none() {
            return Err(StoreError::BadRequest(format!(
                "metric {} has no p95; use mean or max",
                spec.name
            )));
        }
        let age = |d: std::time::Duration| now_ms.saturating_sub(model::time::millis(d));
        let raw_ok = spec.raw_expr.is_some() && self.from_ms >= age(retention.raw);
        let resolution = if self.step_ms < 60_000 && raw_ok {
            Resolution::Raw
        } else if self.step_ms < 3_600_000 && self.from_ms >= age(retention.minute) {
            Resolution::Minute
        } else {
            Resolution::Hour
        };
        let unit = match resolution {
            Resolution::Raw => 1,
            Resolution::Minute => 60_000,
            Resolution::Hour => 3_600_000,
        };
        let step_ms = (self.step_ms + unit - 1) / unit * unit;
        // A point per step from the bucket holding `from` to `to`, as `fill` makes them.
        let first = self.from_ms - self.from_ms.rem_euclid(step_ms);
        let points = (self.to_ms - first + step_ms - 1) / step_ms;
        if points > MAX_POINTS {
            return Err(StoreError::BadRequest(format!(
                "range and step give {points} points; at most {MAX_POINTS} are served, so raise `step`"
            )));
        }
        Ok(Plan {
            resolution,
            step_ms,
        })
    }
}

impl Dialect {
    /// The bucket start (ms) of a time column, aliased `b`.
    fn bucket(self, col: &str, step: i64) -> String {
        match self {
            Dialect::Postgres => {
                format!("(floor(extract(epoch from {col}) * 1000 / {step}) * {step})::bigint AS b")
            }
            Dialect::Sqlite => format!("({col} / {step}) * {step} AS b"),
        }
    }

    /// `col >= from AND col < to`, with `from` and `to` bound as Unix ms at placeholders
    /// `first` and `first + 1`.
    fn range(self, col: &str, first: usize) -> String {
        match self {
            Dialect::Postgres => format!(
                "{col} >= to_timestamp(${first}::bigint / 1000.0) AND {col} < to_timestamp(${}::bigint / 1000.0)",
                first + 1
            ),
            Dialect::Sqlite => format!("{col} >= ? AND {col} < ?"),
        }
    }

    fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}"),
            Dialect::Sqlite => "?".to_owned(),
        }
    }

    fn real(self, expr: &str) -> String {
        match self {
            Dialect::Postgres => format!("({expr})::float8"),
            Dialect::Sqlite => format!("CAST({expr} AS REAL)"),
        }
    }
}

/// What the rows of a series query hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// (bucket, value) already aggregated.
    Values,
    /// (bucket, histogram, max) per rollup row, for a p95 from merged histograms.
    Histograms,
}

/// The query answering `q` under `plan`, in `dialect`. Binds: the entity (if any), then
/// `from_ms`, `to_ms`.
pub fn sql(q: &SeriesQuery, plan: &Plan, dialect: Dialect) -> Result<(String, Shape), StoreError> {
    if plan.resolution == Resolution::Raw {
        return Err(StoreError::BadRequest(
            "raw series are read from samples (series::raw_points), not by one query".into(),
        ));
    }
    let spec = q.metric.spec();
    let cluster_wide = matches!(q.entity, Entity::Cluster(_) | Entity::Fleet);
    let (table, col) = match (plan.resolution, q.family()) {
        (Resolution::Hour, Family::Gpu) if cluster_wide => ("cluster_rollup_1h", "bucket"),
        (Resolution::Raw, _) => unreachable!("raw plans were refused above"),
        (Resolution::Minute, Family::Gpu) => ("gpu_rollup_1m", "bucket"),
        (Resolution::Minute, Family::Tenant) => ("tenant_rollup_1m", "bucket"),
        (Resolution::Hour, Family::Gpu) => ("gpu_rollup_1h", "bucket"),
        (Resolution::Hour, Family::Tenant) => ("tenant_rollup_1h", "bucket"),
    };
    let filters = q.entity.filters();
    let filter = if filters.is_empty() {
        "1 = 1".to_owned()
    } else {
        filters
            .iter()
            .enumerate()
            .map(|(i, (c, _))| format!("{c} = {}", dialect.placeholder(i + 1)))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    let first = filters.len() + 1;
    let from = format!(
        "FROM {table} WHERE {filter} AND {}",
        dialect.range(col, first)
    );
    let b = dialect.bucket(col, plan.step_ms);
    let real = |e: &str| dialect.real(e);
    Ok({
        match q.agg {
            Agg::P95 => {
                let Some(hist) = spec.hist_col else {
                    return Err(StoreError::BadRequest(format!(
                        "metric {} has no p95 in rollups; use mean or max",
                        spec.name
                    )));
                };
                let max = spec.max_col.map_or_else(|| real("NULL"), real);
                (
                    format!("SELECT {b}, {hist}, {max} {from} ORDER BY b"),
                    Shape::Histograms,
                )
            }
            Agg::Max => {
                let Some(c) = spec.max_col else {
                    return Err(StoreError::BadRequest(format!(
                        "metric {} has no max in rollups; use mean",
                        spec.name
                    )));
                };
                (
                    format!(
                        "SELECT {b}, {} {from} GROUP BY b ORDER BY b",
                        real(&format!("max({c})"))
                    ),
                    Shape::Values,
                )
            }
            Agg::Mean => (
                format!(
                    "SELECT {b}, {} / nullif(sum({}), 0) {from} GROUP BY b ORDER BY b",
                    real(&format!("sum({})", spec.sum_col)),
                    spec.n_col
                ),
                Shape::Values,
            ),
        }
    })
}

/// The raw table a raw-resolution series reads, and what it selects there.
pub(crate) fn raw_source(
    q: &SeriesQuery,
) -> (&'static crate::raw::RawTable, crate::raw::Filter<'_>) {
    let table = match q.family() {
        Family::Gpu => &crate::raw::GPU,
        Family::Tenant => &crate::raw::PROCESS,
    };
    let filter = crate::raw::Filter {
        eq: q.entity.filters(),
        null: None,
    };
    (table, filter)
}

/// A raw-resolution series' values per step from the samples of its entity and range: the
/// mean or max of the metric's known values in each step (unknown where a step's samples
/// know none), or for p95 the exact nearest-rank quantile of them.
pub(crate) fn raw_points(
    q: &SeriesQuery,
    plan: &Plan,
    table: &crate::raw::RawTable,
    samples: &[crate::raw::Record],
) -> Vec<(i64, Option<f64>)> {
    let Some(how) = q.metric.spec().raw_expr else {
        return Vec::new();
    };
    let (column, busy) = match how {
        RawValue::Column(c) => (c, false),
        RawValue::Busy(c) => (c, true),
    };
    let at = table.value(column);
    let mut steps: std::collections::BTreeMap<i64, Vec<f64>> = std::collections::BTreeMap::new();
    for r in samples {
        let bucket = r.ts - r.ts.rem_euclid(plan.step_ms);
        let values = steps.entry(bucket).or_default();
        if let Some(v) = r.number(table, at) {
            values.push(if busy {
                if v > 0.0 { 1.0 } else { 0.0 }
            } else {
                v
            });
        }
    }
    steps
        .into_iter()
        .filter_map(|(b, mut vals)| match q.agg {
            Agg::Mean => Some((
                b,
                (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64),
            )),
            Agg::Max => Some((b, vals.iter().copied().reduce(f64::max))),
            Agg::P95 => (!vals.is_empty()).then(|| (b, quantile(&mut vals, 0.95))),
        })
        .collect()
}

/// p95 per bucket from merged histograms.
pub fn hist_p95(
    rows: impl Iterator<Item = (i64, Option<Vec<u8>>, Option<f64>)>,
) -> Vec<(i64, Option<f64>)> {
    let mut merged: std::collections::BTreeMap<i64, (model::rollup::Hist, Option<f32>)> =
        std::collections::BTreeMap::new();
    for (b, hist, max) in rows {
        let e = merged.entry(b).or_default();
        if let Some(h) = hist {
            e.0.merge(&model::rollup::Hist::from_bytes(&h));
        }
        if let Some(m) = max {
            e.1 = Some(e.1.map_or(m as f32, |x: f32| x.max(m as f32)));
        }
    }
    merged
        .into_iter()
        .map(|(b, (h, max))| (b, h.quantile(0.95, max).map(f64::from)))
        .collect()
}

/// The finished series: every step of the range, None where nothing was measured.
pub fn assemble(q: &SeriesQuery, plan: &Plan, values: &[(i64, Option<f64>)]) -> Series {
    let spec = q.metric.spec();
    Series {
        metric: q.metric,
        unit: spec.unit,
        resolution: plan.resolution,
        step_ms: plan.step_ms,
        points: fill(q.from_ms, q.to_ms, plan.step_ms, values),
    }
}

/// Fills `points` so every step in the range appears, with None where no value exists.
pub fn fill(
    from_ms: i64,
    to_ms: i64,
    step_ms: i64,
    values: &[(i64, Option<f64>)],
) -> Vec<(i64, Option<f64>)> {
    let first = from_ms - from_ms.rem_euclid(step_ms);
    let map: std::collections::HashMap<i64, Option<f64>> = values.iter().copied().collect();
    // Bounded by construction: never more than MAX_POINTS, never past i64's end, whatever the
    // caller checked.
    (0..MAX_POINTS)
        .map_while(|k| {
            let t = first.checked_add(k.checked_mul(step_ms)?)?;
            (t < to_ms).then(|| (t, map.get(&t).copied().flatten()))
        })
        .collect()
}

/// The q-quantile of raw values (nearest rank).
pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn q(from_ago_h: i64, step_ms: i64) -> SeriesQuery {
        SeriesQuery {
            metric: Metric::GpuUtil,
            entity: Entity::Gpu("G".into()),
            from_ms: NOW - from_ago_h * 3_600_000,
            to_ms: NOW,
            step_ms,
            agg: Agg::Mean,
        }
    }

    #[test]
    fn the_plan_picks_raw_then_minutes_then_hours() {
        let r = Retention::default();
        assert_eq!(
            q(1, 1000).plan(NOW, &r).unwrap().resolution,
            Resolution::Raw
        );
        assert_eq!(
            q(1, 60_000).plan(NOW, &r).unwrap().resolution,
            Resolution::Minute
        );
        // Older than raw retention: minutes even for a fine step, rounded up to a minute.
        let p = q(24 * 8, 10_000 * 60).plan(NOW, &r).unwrap();
        assert_eq!(p.resolution, Resolution::Minute);
        let p = q(24 * 30, 3_600_000).plan(NOW, &r).unwrap();
        assert_eq!((p.resolution, p.step_ms), (Resolution::Hour, 3_600_000));
        let p = q(24 * 100, 90_000).plan(NOW, &r).unwrap();
        assert_eq!((p.resolution, p.step_ms), (Resolution::Hour, 3_600_000));
    }

    #[test]
    fn too_many_points_is_refused() {
        let err = q(24, 1000).plan(NOW, &Retention::default()).unwrap_err();
        assert!(err.to_string().contains("raise `step`"), "{err}");
    }

    #[test]
    fn entities_parse() {
        assert_eq!(
            Entity::parse("gpu:GPU-1"),
            Some(Entity::Gpu("GPU-1".into()))
        );
        assert_eq!(
            Entity::parse("tenant:pod/u/c"),
            Some(Entity::Tenant("pod/u/c".into()))
        );
        assert_eq!(Entity::parse("fleet"), Some(Entity::Fleet));
        assert_eq!(Entity::parse("rack:1"), None);
        assert_eq!(Entity::parse("gpu:"), None);
    }

    #[test]
    fn fill_marks_gaps() {
        let pts = fill(0, 4000, 1000, &[(1000, Some(1.0)), (3000, None)]);
        assert_eq!(
            pts,
            vec![(0, None), (1000, Some(1.0)), (2000, None), (3000, None)]
        );
        assert_eq!(quantile(&mut [3.0, 1.0, 2.0, 4.0], 0.5), Some(2.0));
    }
}
