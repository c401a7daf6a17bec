//! The SQL both backends share: column lists in insert order, the readers of records from
//! rows, and the grouping of interference minute rows.

use std::collections::HashMap;
use std::sync::LazyLock;

use model::pair_hours::{DeviceMinute, DeviceMinutes, TenantMinute, TenantMinutes};

use crate::db::{Db, RowExt};
use crate::error::Result;
use crate::records::{
    EventRecord, GpuRecord, MigRecord, NodeRecord, TableCounts, TenantRecord, WantedMinutes,
};
use crate::rollup_columns::{
    DEVICE_MINUTE, GPU_AGG, GPU_HOUR, TENANT_AGG, TENANT_MINUTE, names, read_at,
};

/// Columns of the GPU rollup tables, in insert order.
pub(crate) static GPU_ROLLUP_COLUMNS: LazyLock<String> =
    LazyLock::new(|| names("cluster, node, gpu_uuid, bucket, ", &GPU_AGG));

/// Columns of the cluster rollup table, in insert order.
pub(crate) static CLUSTER_ROLLUP_COLUMNS: LazyLock<String> =
    LazyLock::new(|| names("cluster, bucket, gpus, ", &GPU_AGG));

/// Columns of the tenant rollup tables, in insert order.
pub(crate) static TENANT_ROLLUP_COLUMNS: LazyLock<String> =
    LazyLock::new(|| names("cluster, node, gpu_uuid, tenant_key, bucket, ", TENANT_AGG));

/// The GPU minute-rollup columns interference reads.
pub(crate) static INTERFERENCE_GPU_COLUMNS: LazyLock<String> =
    LazyLock::new(|| names("gpu_uuid, ", DEVICE_MINUTE));
/// The tenant minute-rollup columns interference reads.
pub(crate) static INTERFERENCE_TENANT_COLUMNS: LazyLock<String> =
    LazyLock::new(|| names("gpu_uuid, tenant_key, ", TENANT_MINUTE));

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
/// position; `bucket` in ms) into one node's series.
pub(crate) fn interference_rows<DB: Db>(
    (cluster, node): (&str, &str),
    wanted: &WantedMinutes,
    gpu_rows: &[DB::Row],
    tenant_rows: &[DB::Row],
) -> sqlx::Result<(Vec<DeviceMinutes>, Vec<TenantMinutes>)> {
    let mut series = InterferenceSeries::new(wanted);
    for r in gpu_rows {
        let minute = read_at::<DB, DeviceMinute>(r, 1, DEVICE_MINUTE)?;
        series.device(r.text_at(0)?, minute);
    }
    for r in tenant_rows {
        let minute = read_at::<DB, TenantMinute>(r, 2, TENANT_MINUTE)?;
        series.tenant(r.text_at(0)?, r.text_at(1)?, minute);
    }
    Ok(series.finish(cluster, node))
}

/// The columns of a GPU hour rollup the analysis reads: the identity, the bucket, then
/// [`GPU_HOUR`]'s, read by position from 4.
pub(crate) static GPU_HOUR_COLUMNS: LazyLock<String> =
    LazyLock::new(|| names("cluster, node, gpu_uuid, bucket, ", GPU_HOUR));

// Row → record readers shared by both backends: their queries alias columns to these names.

pub(crate) fn node_record<DB: Db>(r: &DB::Row) -> sqlx::Result<NodeRecord> {
    Ok(NodeRecord {
        cluster: r.col("cluster")?,
        node: r.col("node")?,
        agent_version: r.col("agent_version")?,
        interval_ms: r.col("interval_ms")?,
        first_seen_ms: r.col("first_seen")?,
        last_seen_ms: r.col("last_seen")?,
        last_sample_ms: r.col("last_sample")?,
        gpu_count: r.col("gpu_count")?,
    })
}

fn mig_record<DB: Db>(m: &DB::Row) -> sqlx::Result<MigRecord> {
    Ok(MigRecord {
        gi_id: m.col("gi_id")?,
        ci_id: m.col("ci_id")?,
        profile: m.col("profile")?,
        placement_start: m.col("placement_start")?,
        placement_size: m.col("placement_size")?,
        memory_total_bytes: m.col("memory_total_bytes")?,
        compute_slices: m.col("compute_slices")?,
        uuid: m.col("mig_uuid")?,
    })
}

fn gpu_record<DB: Db>(
    r: &DB::Row,
    uuid: String,
    mig_instances: Vec<MigRecord>,
) -> sqlx::Result<GpuRecord> {
    let sharing: String = r.col("sharing")?;
    let sharing = model::inventory::Sharing::parse(&sharing).ok_or_else(|| {
        sqlx::Error::Decode(format!("gpus.sharing holds {sharing:?}, not a sharing mode").into())
    })?;
    Ok(GpuRecord {
        cluster: r.col("cluster")?,
        node: r.col("node")?,
        uuid,
        index: r.col("gpu_index")?,
        model: r.col("model")?,
        memory_total_bytes: r.col("memory_total_bytes")?,
        pci_bus_id: r.col("pci_bus_id")?,
        mig_enabled: r.col("mig_enabled")?,
        sharing,
        replicas: r.col("replicas")?,
        first_seen_ms: r.col("first_seen")?,
        last_seen_ms: r.col("last_seen")?,
        mig_instances,
    })
}

/// GPU rows with their MIG instances attached: the instances grouped by GPU once (a lookup
/// per GPU, not a scan of every instance). Both backends read the same columns.
pub(crate) fn gpus_with_migs<DB: Db>(
    rows: &[DB::Row],
    migs: &[DB::Row],
) -> sqlx::Result<Vec<GpuRecord>> {
    let mut by_gpu: HashMap<String, Vec<MigRecord>> = HashMap::new();
    for m in migs {
        by_gpu
            .entry(m.col("gpu_uuid")?)
            .or_default()
            .push(mig_record::<DB>(m)?);
    }
    rows.iter()
        .map(|r| {
            let uuid: String = r.col("gpu_uuid")?;
            let mig_instances = by_gpu.remove(&uuid).unwrap_or_default();
            gpu_record::<DB>(r, uuid, mig_instances)
        })
        .collect()
}

/// A uid as the `tenants.uid` column holds it: PostgreSQL's 32-bit `integer` keeps a uid of
/// 2^31 or more as its two's complement (negative), SQLite as itself; both read back as the
/// uid. Anything else is outside the wire's domain.
pub(crate) fn uid_from_column(v: i64) -> std::result::Result<u32, std::num::TryFromIntError> {
    u32::try_from(v).or_else(|e| i32::try_from(v).map(|v| v as u32).map_err(|_| e))
}

/// Reads a [`crate::TenantRecord`] from a row of `tenants`; `None` (and a warning) for a row
/// whose kind or uid is outside the wire's domain, which only something other than gpulens could
/// have written: one such row must not fail every reader of the tenant list.
pub(crate) fn tenant_record<DB: Db>(r: &DB::Row) -> sqlx::Result<Option<TenantRecord>> {
    let key: String = r.col("tenant_key")?;
    let kind: String = r.col("kind")?;
    let uid: Option<i64> = r.col("uid")?;
    let (kind_ok, uid_ok) = (
        model::TenantKind::parse(&kind),
        uid.map(uid_from_column).transpose(),
    );
    let (Some(kind), Ok(uid)) = (kind_ok, uid_ok) else {
        tracing::warn!(tenant = ?key, kind = ?kind, ?uid, "a stored tenant outside the wire's domain (kind or uid) is left out");
        return Ok(None);
    };
    Ok(Some(TenantRecord {
        cluster: r.col("cluster")?,
        tenant: model::Tenant {
            key,
            kind,
            namespace: r.col("namespace")?,
            pod: r.col("pod")?,
            container: r.col("container")?,
            pod_uid: r.col("pod_uid")?,
            job_id: r.col("job_id")?,
            user: r.col("username")?,
            account: r.col("account")?,
            uid,
        },
        team: r.col("team")?,
        nodes: Vec::new(),
        first_seen_ms: r.col("first_seen")?,
        last_seen_ms: r.col("last_seen")?,
    }))
}

pub(crate) fn event_record<DB: Db>(r: &DB::Row) -> sqlx::Result<EventRecord> {
    Ok(EventRecord {
        cluster: r.col("cluster")?,
        node: r.col("node")?,
        gpu_uuid: r.col("gpu_uuid")?,
        ts_ms: r.col("ts")?,
        kind: r.col("kind")?,
        code: r.col("code")?,
    })
}

/// Runs a series query's rows through the post-processing its shape needs (either backend).
pub(crate) fn series_values<DB: Db>(
    rows: &[DB::Row],
    shape: crate::series::Shape,
) -> sqlx::Result<Vec<(i64, Option<f64>)>> {
    match shape {
        crate::series::Shape::Values => rows.iter().map(|r| Ok((r.at(0)?, r.at(1)?))).collect(),
        crate::series::Shape::Histograms => {
            let rows = rows
                .iter()
                .map(|r| Ok((r.at(0)?, r.at(1)?, r.at(2)?)))
                .collect::<sqlx::Result<Vec<(i64, Option<Vec<u8>>, Option<f64>)>>>()?;
            Ok(crate::series::hist_p95(rows.into_iter()))
        }
    }
}

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

    pub(crate) fn from_row<DB: Db>(row: &DB::Row) -> Result<TableCounts> {
        let v = |i: usize| -> Result<i64> { Ok(row.at(i)?) };
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
