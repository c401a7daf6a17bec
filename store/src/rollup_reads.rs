//! Reading rollups and raw samples, written once for both backends: a node's rollups (also
//! inside a rollup's transaction), the fleet's hour series, the use hours, a node's raw samples
//! and the minutes interference is measured from.

use model::hour_series::GpuHour;
use model::pair_hours::{DeviceMinutes, TenantMinutes};
use model::rollup::NodeRollup;

use crate::db::{Db, On, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;
use crate::raw;
use crate::rollup_columns::{GPU_AGG, GPU_HOUR, TENANT_AGG, read_at, read_named};

impl<DB: Db> Tables<DB> {
    /// A node's rollups of one width in [from, to).
    pub(crate) async fn read_node_rollups(
        &self,
        width: crate::Rollups,
        cluster: &str,
        node: &str,
        from: i64,
        to: i64,
    ) -> Result<NodeRollup> {
        let mut conn = self.read.acquire().await?;
        read_rollups::<DB>(&mut conn, width, cluster, node, from, to).await
    }

    /// Every GPU's and tenant's hour rollups in [from, to) (of `cluster`, or the whole
    /// fleet), as series (what the analysis reads): one query per table, streamed and
    /// decoded row by row, so neither the rows nor a node's maps are ever held. On Citus
    /// each query runs on every worker's shards at once.
    pub(crate) async fn read_hour_series(
        &self,
        scope: crate::Scope<'_>,
        from: i64,
        to: i64,
    ) -> Result<(
        Vec<model::hour_series::GpuSeries>,
        Vec<model::hour_series::TenantSeries>,
    )> {
        let mut conn = self.read.acquire().await?;
        read_hour_series::<DB>(&mut conn, scope, from, to).await
    }

    /// What each team held and used of each pool, hour by hour in [from, to) (from
    /// `use_rollup_1h`), newest first, at most [`crate::rollup_reads::MAX_USE_HOURS`]
    /// rows (the oldest dropped).
    pub(crate) async fn read_use_hours(
        &self,
        from: i64,
        to: i64,
    ) -> Result<Vec<model::hour_series::UseHour>> {
        let rows = stmt::<DB>(&crate::rollup_reads::use_hours_select(DB::DIALECT))
            .arg(from)
            .arg(to)
            .arg(crate::rollup_reads::MAX_USE_HOURS)
            .all(&self.read)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(model::hour_series::UseHour {
                    cluster: r.at(0)?,
                    model: r.at(1)?,
                    team: r.at(2)?,
                    hour_ms: r.at(3)?,
                    allocated: r.at(4)?,
                    used: r.at(5)?,
                })
            })
            .collect()
    }

    /// The samples of `t` in [from, to) that `f` selects (undecodable blocks skipped,
    /// logged).
    pub(crate) async fn raw_records(
        &self,
        t: &raw::RawTable,
        f: &raw::Filter<'_>,
        from: i64,
        to: i64,
    ) -> Result<Vec<raw::Record>> {
        raw::records(On::Pool(&self.read), t, f, (from, to), &mut 0).await
    }

    /// The minute rollups interference is measured from: the wanted GPUs' minutes and
    /// their active tenants'.
    pub(crate) async fn read_interference_minutes(
        &self,
        cluster: &str,
        node: &str,
        from: i64,
        to: i64,
        wanted: &crate::records::WantedMinutes,
    ) -> Result<(Vec<DeviceMinutes>, Vec<TenantMinutes>)> {
        let d = DB::DIALECT;
        let mut conn = self.read.acquire().await?;
        let gpus = stmt::<DB>(&crate::rollup_reads::node_range_select(
            d,
            crate::sql::INTERFERENCE_GPU_COLUMNS.as_str(),
            "gpu_rollup_1m",
        ))
        .arg(cluster)
        .arg(node)
        .arg(from)
        .arg(to)
        .all(On::Conn(&mut *conn))
        .await?;
        let select = crate::rollup_reads::node_range_select(
            d,
            crate::sql::INTERFERENCE_TENANT_COLUMNS.as_str(),
            "tenant_rollup_1m",
        );
        let tenants = stmt::<DB>(&format!("{select} AND active_n > 0"))
            .arg(cluster)
            .arg(node)
            .arg(from)
            .arg(to)
            .all(On::Conn(&mut *conn))
            .await?;
        Ok(crate::sql::interference_rows::<DB>(
            (cluster, node),
            wanted,
            &gpus,
            &tenants,
        )?)
    }
}

pub(crate) async fn read_rollups<DB: Db>(
    conn: &mut DB::Connection,
    res: crate::Rollups,
    cluster: &str,
    node: &str,
    from: i64,
    to: i64,
) -> Result<NodeRollup> {
    let d = DB::DIALECT;
    let select = |columns: &str, table: &str| {
        crate::rollup_reads::node_range_select(d, columns, &format!("{table}_rollup_{res}"))
    };
    // The four values `node_range_select` binds.
    let query = |sql| stmt::<DB>(sql).arg(cluster).arg(node).arg(from).arg(to);
    let mut out = NodeRollup::default();
    let sql = select(crate::sql::GPU_ROLLUP_COLUMNS.as_str(), "gpu");
    let rows = query(&sql).all(On::Conn(&mut *conn)).await?;
    for r in &rows {
        let key = (r.col("gpu_uuid")?, r.col("bucket")?);
        out.gpus.insert(key, read_named::<DB, _>(r, &GPU_AGG)?);
    }
    let sql = select(crate::sql::TENANT_ROLLUP_COLUMNS.as_str(), "tenant");
    let rows = query(&sql).all(On::Conn(&mut *conn)).await?;
    for r in &rows {
        let key = (r.col("gpu_uuid")?, r.col("tenant_key")?, r.col("bucket")?);
        out.tenants.insert(key, read_named::<DB, _>(r, TENANT_AGG)?);
    }
    Ok(out)
}

async fn read_hour_series<DB: Db>(
    conn: &mut DB::Connection,
    scope: crate::Scope<'_>,
    from: i64,
    to: i64,
) -> Result<(
    Vec<model::hour_series::GpuSeries>,
    Vec<model::hour_series::TenantSeries>,
)> {
    use futures_util::TryStreamExt;
    let d = DB::DIALECT;
    let select =
        |columns: &str, table: &str| crate::rollup_reads::range_select(d, columns, table, scope);
    let (cluster, nodes) = scope.binds(d);
    let nodes = nodes.as_deref();
    // The four values `range_select` binds.
    let query = |sql| stmt::<DB>(sql).arg(from).arg(to).arg(cluster).arg(nodes);
    let mut gpus =
        model::hour_series::SeriesBuilder::<model::hour_series::GpuSeries>::for_range(from, to);
    let sql = select(crate::sql::GPU_HOUR_COLUMNS.as_str(), "gpu_rollup_1h");
    let mut rows = query(&sql).stream(On::Conn(&mut *conn));
    while let Some(r) = rows.try_next().await? {
        let (cluster, node, gpu) = (r.text_at(0)?, r.text_at(1)?, r.text_at(2)?);
        gpus.push(
            cluster,
            node,
            gpu,
            r.at(3)?,
            read_at::<DB, GpuHour>(&r, 4, GPU_HOUR)?,
        );
    }
    drop(rows);
    let mut tenants =
        model::hour_series::SeriesBuilder::<model::hour_series::TenantSeries>::for_range(from, to);
    let sql = select(
        crate::sql::TENANT_ROLLUP_COLUMNS.as_str(),
        "tenant_rollup_1h",
    );
    let mut rows = query(&sql).stream(On::Conn(&mut *conn));
    while let Some(r) = rows.try_next().await? {
        let names = [r.text_at(0)?, r.text_at(1)?, r.text_at(2)?, r.text_at(3)?];
        tenants.push(names, r.at(4)?, read_named::<DB, _>(&r, TENANT_AGG)?);
    }
    Ok((gpus.finish(), tenants.finish()))
}

/// `SELECT columns FROM table` for the scope's nodes' buckets in [from, to), in `d`'s SQL:
/// binds from, to (ms) and the scope's two values ([`crate::Scope::binds`]); `bucket` comes
/// back as ms since the epoch.
pub(crate) fn range_select(
    d: crate::dialect::Dialect,
    columns: &str,
    table: &str,
    scope: crate::Scope<'_>,
) -> String {
    let columns = bucket_in_ms(d, columns);
    format!(
        "SELECT {columns} FROM {table} WHERE bucket >= {} AND bucket < {} AND {}",
        d.time_param(1),
        d.time_param(2),
        scope.condition(d, 3)
    )
}

/// `SELECT columns FROM table` for one node's buckets in [from, to), in `d`'s SQL: binds
/// cluster, node, from, to (ms); `bucket` comes back as ms since the epoch.
pub(crate) fn node_range_select(d: crate::dialect::Dialect, columns: &str, table: &str) -> String {
    let columns = bucket_in_ms(d, columns);
    format!(
        "SELECT {columns} FROM {table} WHERE cluster = {} AND node = {} AND bucket >= {} AND bucket < {}",
        d.param(1),
        d.param(2),
        d.time_param(3),
        d.time_param(4)
    )
}

/// Most rows `Store::use_hours` returns: four weeks of 1,500
/// (cluster, model, team) series.
pub const MAX_USE_HOURS: i64 = 1_000_000;

/// `use_rollup_1h` in [from, to), newest first: binds from, to (ms) and the row limit.
pub(crate) fn use_hours_select(d: crate::dialect::Dialect) -> String {
    format!(
        "SELECT cluster, model, team, {hour} AS hour, allocated, used FROM use_rollup_1h \
         WHERE bucket >= {from} AND bucket < {to} ORDER BY bucket DESC, cluster, model, team LIMIT {limit}",
        hour = d.epoch_ms("bucket"),
        from = d.time_param(1),
        to = d.time_param(2),
        limit = d.param(3),
    )
}

/// One cluster-hour of the tenants' hour rollups summed by GPU model and team, as GPU-hours
/// allocated and used ([`model::rollup::gpu_hours`] in SQL): what `use_rollup_1h` keeps.
/// Binds cluster and the hour (ms); selects model, team, allocated, used.
pub(crate) fn use_sums_of_hour(d: crate::dialect::Dialect) -> String {
    let gpu_hours = |sum: &str| {
        format!(
            "CAST(sum(r.{sum} / (CASE WHEN r.samples > 0 THEN r.samples ELSE 1 END) * r.covered_s) / 3600.0 AS double precision)"
        )
    };
    format!(
        "SELECT g.model, t.team, {alloc}, {used} \
         FROM tenant_rollup_1h r \
         JOIN gpus g ON g.cluster = r.cluster AND g.node = r.node AND g.gpu_uuid = r.gpu_uuid \
         LEFT JOIN tenants t ON t.cluster = r.cluster AND t.node = r.node AND t.tenant_key = r.tenant_key \
         WHERE r.cluster = {cluster} AND r.bucket = {hour} \
         GROUP BY g.model, t.team",
        alloc = gpu_hours("alloc_share_sum"),
        used = gpu_hours("eff_sum"),
        cluster = d.param(1),
        hour = d.time_param(2),
    )
}

/// `columns` with `bucket` selected as ms since the epoch, in `d`'s SQL.
fn bucket_in_ms(d: crate::dialect::Dialect, columns: &str) -> String {
    columns.replace("bucket,", &format!("{} AS bucket,", d.epoch_ms("bucket")))
}
