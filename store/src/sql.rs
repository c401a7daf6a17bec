//! The SQL both backends share: column lists in insert order, the macros that bind and read
//! rollup aggregates and records, and the grouping of interference minute rows.

use std::collections::HashMap;

use model::pair_hours::{DeviceMinute, DeviceMinutes, TenantMinute, TenantMinutes};

use crate::error::Result;
use crate::records::{TableCounts, WantedMinutes};

use crate::rollup_columns::{gpu_agg_columns, tenant_agg_columns};

/// Columns of the GPU rollup tables, in insert order.
pub(crate) const GPU_ROLLUP_COLUMNS: &str = gpu_agg_columns!(crate::rollup_columns::names(
    "cluster, node, gpu_uuid, bucket, "
));

/// Columns of the cluster rollup table, in insert order.
pub(crate) const CLUSTER_ROLLUP_COLUMNS: &str =
    gpu_agg_columns!(crate::rollup_columns::names("cluster, bucket, gpus, "));

/// Binds a [`model::rollup::GpuAgg`]'s fields in [`gpu_agg_columns!`] order (either backend), with
/// `bind` (a query) or `push_bind` (a multi-row insert).
macro_rules! bind_gpu_agg {
    ($q:expr, $a:expr, $bind:ident) => {
        crate::rollup_columns::gpu_agg_columns!(crate::rollup_columns::bind_values($q, $a, $bind))
    };
}
pub(crate) use bind_gpu_agg;

/// Columns of the tenant rollup tables, in insert order.
pub(crate) const TENANT_ROLLUP_COLUMNS: &str = tenant_agg_columns!(crate::rollup_columns::names(
    "cluster, node, gpu_uuid, tenant_key, bucket, "
));

/// Reads a [`model::rollup::GpuAgg`] from a row of a GPU rollup table (either backend), by column
/// name; `$hist` is the backend's type of a histogram's bytes.
macro_rules! read_gpu_agg {
    ($r:expr, $hist:ty) => {
        crate::rollup_columns::gpu_agg_columns!(crate::rollup_columns::read_agg(
            $r,
            rollup::GpuAgg,
            $hist
        ))
    };
}
pub(crate) use read_gpu_agg;

/// The GPU minute-rollup columns interference reads.
pub(crate) const INTERFERENCE_GPU_COLUMNS: &str =
    crate::rollup_columns::device_minute_columns!(crate::rollup_columns::names("gpu_uuid, "));
/// The tenant minute-rollup columns interference reads.
pub(crate) const INTERFERENCE_TENANT_COLUMNS: &str = crate::rollup_columns::tenant_minute_columns!(
    crate::rollup_columns::names("gpu_uuid, tenant_key, ")
);

/// Groups one node's interference minute rows into a series per GPU and per (tenant, GPU),
/// keeping only the wanted minutes, each series in time order.
pub(crate) struct InterferenceSeries<'w> {
    wanted: &'w WantedMinutes,
    devices: HashMap<String, Vec<DeviceMinute>>,
    tenants: HashMap<String, HashMap<String, Vec<TenantMinute>>>,
}

impl<'w> InterferenceSeries<'w> {
    pub(crate) fn new(wanted: &'w WantedMinutes) -> Self {
        InterferenceSeries {
            wanted,
            devices: HashMap::new(),
            tenants: HashMap::new(),
        }
    }

    fn wanted(&self, gpu: &str, bucket: i64) -> bool {
        self.wanted
            .get(gpu)
            .is_some_and(|spans| spans.iter().any(|&(a, b)| bucket >= a && bucket < b))
    }

    pub(crate) fn device(&mut self, gpu: &str, m: DeviceMinute) {
        if !self.wanted(gpu, m.bucket) {
            return;
        }
        match self.devices.get_mut(gpu) {
            Some(v) => v.push(m),
            None => {
                self.devices.insert(gpu.to_owned(), vec![m]);
            }
        }
    }

    pub(crate) fn tenant(&mut self, gpu: &str, tenant: &str, m: TenantMinute) {
        if !self.wanted(gpu, m.bucket) {
            return;
        }
        // Look up by borrowed keys: allocate only for a new series.
        if !self.tenants.contains_key(gpu) {
            self.tenants.insert(gpu.to_owned(), HashMap::new());
        }
        let per = self.tenants.get_mut(gpu).expect("inserted above");
        match per.get_mut(tenant) {
            Some(v) => v.push(m),
            None => {
                per.insert(tenant.to_owned(), vec![m]);
            }
        }
    }

    pub(crate) fn finish(
        self,
        cluster: &str,
        node: &str,
    ) -> (Vec<DeviceMinutes>, Vec<TenantMinutes>) {
        let devices = self
            .devices
            .into_iter()
            .map(|(gpu, mut minutes)| {
                minutes.sort_unstable_by_key(|m| m.bucket);
                DeviceMinutes {
                    cluster: cluster.to_owned(),
                    node: node.to_owned(),
                    gpu,
                    minutes,
                }
            })
            .collect();
        let tenants = self
            .tenants
            .into_iter()
            .flat_map(|(gpu, per)| {
                per.into_iter().map(move |(tenant, mut minutes)| {
                    minutes.sort_unstable_by_key(|m| m.bucket);
                    TenantMinutes {
                        cluster: cluster.to_owned(),
                        gpu: gpu.clone(),
                        tenant,
                        minutes,
                    }
                })
            })
            .collect();
        (devices, tenants)
    }
}

/// Decodes rows of [`INTERFERENCE_GPU_COLUMNS`] and [`INTERFERENCE_TENANT_COLUMNS`] (by
/// position; `bucket` in ms) into one node's [`InterferenceSeries`].
macro_rules! interference_rows {
    ($cluster:expr, $node:expr, $wanted:expr, $gpu_rows:expr, $tenant_rows:expr) => {{
        use crate::rollup_columns::{device_minute_columns, read_at, tenant_minute_columns};
        use model::pair_hours::{DeviceMinute, TenantMinute};
        let mut series = $crate::sql::InterferenceSeries::new($wanted);
        for r in $gpu_rows {
            let minute = device_minute_columns!(read_at(r, DeviceMinute, 1));
            series.device(r.try_get(0)?, minute);
        }
        for r in $tenant_rows {
            let minute = tenant_minute_columns!(read_at(r, TenantMinute, 2));
            series.tenant(r.try_get(0)?, r.try_get(1)?, minute);
        }
        series.finish($cluster, $node)
    }};
}
pub(crate) use interference_rows;

/// The columns of a GPU hour rollup the analysis reads, in the order [`read_gpu_hour!`]
/// decodes them.
pub(crate) const GPU_HOUR_COLUMNS: &str = crate::rollup_columns::gpu_hour_columns!(
    crate::rollup_columns::names("cluster, node, gpu_uuid, bucket, ")
);

/// Reads a [`model::hour_series::GpuHour`] from a row of [`GPU_HOUR_COLUMNS`] (either backend).
macro_rules! read_gpu_hour {
    ($r:expr) => {
        crate::rollup_columns::gpu_hour_columns!(crate::rollup_columns::read_at(
            $r,
            model::hour_series::GpuHour,
            4
        ))
    };
}
pub(crate) use read_gpu_hour;

/// Reads a [`model::rollup::TenantAgg`] from a row of a tenant rollup table (either backend).
macro_rules! read_tenant_agg {
    ($r:expr) => {
        crate::rollup_columns::tenant_agg_columns!(
            crate::rollup_columns::read_agg($r, rollup::TenantAgg, Vec<u8>)
        )
    };
}
pub(crate) use read_tenant_agg;

// Row → record mappings shared by both backends: their queries alias columns to these names.

macro_rules! node_record {
    ($r:expr) => {{
        let r = $r;
        NodeRecord {
            cluster: r.try_get("cluster")?,
            node: r.try_get("node")?,
            agent_version: r.try_get("agent_version")?,
            interval_ms: r.try_get("interval_ms")?,
            first_seen_ms: r.try_get("first_seen")?,
            last_seen_ms: r.try_get("last_seen")?,
            last_sample_ms: r.try_get("last_sample")?,
            gpu_count: r.try_get("gpu_count")?,
        }
    }};
}
pub(crate) use node_record;

macro_rules! mig_record {
    ($m:expr) => {{
        let m = $m;
        MigRecord {
            gi_id: m.try_get("gi_id")?,
            ci_id: m.try_get("ci_id")?,
            profile: m.try_get("profile")?,
            placement_start: m.try_get("placement_start")?,
            placement_size: m.try_get("placement_size")?,
            memory_total_bytes: m.try_get("memory_total_bytes")?,
            compute_slices: m.try_get("compute_slices")?,
            uuid: m.try_get("mig_uuid")?,
        }
    }};
}
pub(crate) use mig_record;

macro_rules! gpu_record {
    ($r:expr, $uuid:expr, $migs:expr) => {{
        let r = $r;
        GpuRecord {
            cluster: r.try_get("cluster")?,
            node: r.try_get("node")?,
            uuid: $uuid,
            index: r.try_get("gpu_index")?,
            model: r.try_get("model")?,
            memory_total_bytes: r.try_get("memory_total_bytes")?,
            pci_bus_id: r.try_get("pci_bus_id")?,
            mig_enabled: r.try_get("mig_enabled")?,
            sharing: {
                let s: String = r.try_get("sharing")?;
                model::inventory::Sharing::parse(&s).ok_or_else(|| {
                    sqlx::Error::Decode(
                        format!("gpus.sharing holds {s:?}, not a sharing mode").into(),
                    )
                })?
            },
            replicas: r.try_get("replicas")?,
            first_seen_ms: r.try_get("first_seen")?,
            last_seen_ms: r.try_get("last_seen")?,
            mig_instances: $migs,
        }
    }};
}
pub(crate) use gpu_record;

/// GPU rows with their MIG instances attached: the instances grouped by GPU once (a lookup
/// per GPU, not a scan of every instance). Both backends read the same columns.
macro_rules! gpus_with_migs {
    ($rows:expr, $migs:expr) => {{
        let mut by_gpu: std::collections::HashMap<String, Vec<MigRecord>> =
            std::collections::HashMap::new();
        for m in $migs {
            by_gpu
                .entry(m.try_get::<String, _>("gpu_uuid")?)
                .or_default()
                .push($crate::sql::mig_record!(m));
        }
        let mut out = Vec::new();
        for r in $rows {
            let uuid: String = r.try_get("gpu_uuid")?;
            let mig_instances = by_gpu.remove(&uuid).unwrap_or_default();
            out.push($crate::sql::gpu_record!(r, uuid, mig_instances));
        }
        Ok(out)
    }};
}
pub(crate) use gpus_with_migs;

/// A uid as the `tenants.uid` column holds it: PostgreSQL's 32-bit `integer` keeps a uid of
/// 2^31 or more as its two's complement (negative), SQLite as itself; both read back as the
/// uid. Anything else is outside the wire's domain.
pub(crate) fn uid_from_column(v: i64) -> std::result::Result<u32, std::num::TryFromIntError> {
    u32::try_from(v).or_else(|e| i32::try_from(v).map(|v| v as u32).map_err(|_| e))
}

/// Reads a [`crate::TenantRecord`] from a row of `tenants`; `None` (and a warning) for a row whose kind
/// or uid is outside the wire's domain, which only something other than gpulens could have
/// written: one such row must not fail every reader of the tenant list.
macro_rules! tenant_record {
    ($r:expr) => {{
        let r = $r;
        let key: String = r.try_get("tenant_key")?;
        let kind: String = r.try_get("kind")?;
        let uid: Option<i64> = r.try_get("uid")?;
        let (kind_ok, uid_ok) = (
            model::TenantKind::parse(&kind),
            uid.map($crate::sql::uid_from_column).transpose(),
        );
        match (kind_ok, uid_ok) {
            (Some(kind), Ok(uid)) => Some(TenantRecord {
                cluster: r.try_get("cluster")?,
                tenant: model::Tenant {
                    key,
                    kind,
                    namespace: r.try_get("namespace")?,
                    pod: r.try_get("pod")?,
                    container: r.try_get("container")?,
                    pod_uid: r.try_get("pod_uid")?,
                    job_id: r.try_get("job_id")?,
                    user: r.try_get("username")?,
                    account: r.try_get("account")?,
                    uid,
                },
                team: r.try_get("team")?,
                nodes: Vec::new(),
                first_seen_ms: r.try_get("first_seen")?,
                last_seen_ms: r.try_get("last_seen")?,
            }),
            _ => {
                tracing::warn!(tenant = %key, %kind, ?uid, "a stored tenant outside the wire's domain (kind or uid) is left out");
                None
            }
        }
    }};
}
pub(crate) use tenant_record;

macro_rules! event_record {
    ($r:expr) => {{
        let r = $r;
        $crate::EventRecord {
            cluster: r.try_get("cluster")?,
            node: r.try_get("node")?,
            gpu_uuid: r.try_get("gpu_uuid")?,
            ts_ms: r.try_get("ts")?,
            kind: r.try_get("kind")?,
            code: r.try_get("code")?,
        }
    }};
}
pub(crate) use event_record;

/// Runs a series query's rows through the post-processing its shape needs (either backend).
macro_rules! series_values {
    ($rows:expr, $shape:expr) => {{
        let rows = $rows;
        let pairs = || -> std::result::Result<Vec<(i64, Option<f64>)>, sqlx::Error> {
            rows.iter()
                .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<Option<f64>, _>(1)?)))
                .collect()
        };
        match $shape {
            series::Shape::Values => pairs()?,
            series::Shape::Histograms => series::hist_p95(
                rows.iter()
                    .map(|r| {
                        Ok((
                            r.try_get::<i64, _>(0)?,
                            r.try_get::<Option<Vec<u8>>, _>(1)?,
                            r.try_get::<Option<f64>, _>(2)?,
                        ))
                    })
                    .collect::<std::result::Result<Vec<_>, sqlx::Error>>()?
                    .into_iter(),
            ),
        }
    }};
}
pub(crate) use series_values;

/// The starts (ms, UTC midnight) of the days from `from_ms` to `to_ms`, both included.
pub(crate) fn days_between(from_ms: i64, to_ms: i64) -> Vec<i64> {
    let day = 86_400_000;
    let mut d = from_ms - from_ms.rem_euclid(day);
    let mut out = Vec::new();
    while d <= to_ms {
        out.push(d);
        d += day;
    }
    out
}

impl TableCounts {
    /// The tables counted after the four raw ones, in field order.
    const OTHERS: [&'static str; 6] = [
        "gpu_events",
        "gpu_rollup_1m",
        "gpu_rollup_1h",
        "tenant_rollup_1m",
        "tenant_rollup_1h",
        "cluster_rollup_1h",
    ];

    /// One SELECT of every count, in field order (sealed samples count as the rows they
    /// were), in `d`'s SQL.
    pub(crate) fn query(d: crate::dialect::Dialect) -> String {
        let sealed = d.int64("coalesce(sum(n), 0)");
        let columns: Vec<String> = crate::raw::TABLES
            .iter()
            .map(|t| {
                format!(
                    "((SELECT count(*) FROM {}) + (SELECT {sealed} FROM {}))",
                    t.hot, t.sealed
                )
            })
            .chain(
                Self::OTHERS
                    .iter()
                    .map(|t| format!("(SELECT count(*) FROM {t})")),
            )
            .collect();
        format!("SELECT {}", columns.join(", "))
    }

    pub(crate) fn from_row<R: sqlx::Row>(row: &R) -> Result<TableCounts>
    where
        usize: sqlx::ColumnIndex<R>,
        i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        let v = |i: usize| -> Result<i64> { Ok(row.try_get::<i64, _>(i)?) };
        Ok(TableCounts {
            gpu_samples: v(0)?,
            mig_samples: v(1)?,
            process_samples: v(2)?,
            allocation_samples: v(3)?,
            gpu_events: v(4)?,
            gpu_rollup_1m: v(5)?,
            gpu_rollup_1h: v(6)?,
            tenant_rollup_1m: v(7)?,
            tenant_rollup_1h: v(8)?,
            cluster_rollup_1h: v(9)?,
        })
    }
}
