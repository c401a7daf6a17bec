//! Minute and hour rollups on PostgreSQL: a span's rollups replaced with COPY, and read back.

use crate::raw::rows::Cells;
use sqlx::Row;
use sqlx::postgres::Postgres;

use super::copy_rows::prepare;
use crate::dialect::Dialect;
use crate::error::Result;
use crate::pgcopy::copy;
use model::rollup::{self, NodeRollup};

pub(super) async fn replace_rollups(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    res: &str,
    cluster: &str,
    node: &str,
    from: i64,
    to: i64,
    r: &NodeRollup,
) -> Result<()> {
    for t in ["gpu", "tenant"] {
        sqlx::query(&format!(
            "DELETE FROM {t}_rollup_{res} WHERE cluster = $1 AND node = $2 AND bucket >= to_timestamp($3 / 1000.0) AND bucket < to_timestamp($4 / 1000.0)"
        ))
        .bind(cluster).bind(node).bind(from).bind(to)
        .execute(&mut **tx).await?;
    }
    let statement = format!(
        "COPY gpu_rollup_{res} ({}) FROM STDIN (FORMAT binary)",
        crate::sql::GPU_ROLLUP_COLUMNS
    );
    let rows_out = prepare(&statement, &r.gpus, |w, ((gpu, bucket), a)| {
        w.text(cluster)
            .text(node)
            .text(gpu)
            .ts_ms(*bucket)
            .i32(a.samples)
            .opt_f64(Some(a.covered_s))
            .i32(a.gpu_util_n)
            .opt_f64(Some(a.gpu_util_sum))
            .opt_f32(a.gpu_util_max)
            .raw_bytes(a.gpu_util_hist.to_stored().as_deref())
            .i32(a.busy_n)
            .i32(a.sm_active_n)
            .opt_f64(Some(a.sm_active_sum))
            .opt_f32(a.sm_active_max)
            .raw_bytes(a.sm_active_hist.to_stored().as_deref())
            .opt_f64(Some(a.sm_occupancy_sum))
            .opt_f64(Some(a.tensor_active_sum))
            .opt_f64(Some(a.dram_active_sum))
            .i32(a.mem_used_n)
            .opt_f64(Some(a.mem_used_sum))
            .opt_i64(a.mem_used_max)
            .opt_i64(a.mem_total_max)
            .i32(a.power_n)
            .opt_f64(Some(a.power_sum))
            .opt_f32(a.power_max)
            .i32(a.temp_n)
            .opt_f64(Some(a.temp_sum))
            .opt_f32(a.temp_max)
            .i32(a.throttled_n)
            .opt_f64(Some(a.alloc_share_sum))
            .i32(a.sm_occupancy_n)
            .i32(a.tensor_active_n)
            .i32(a.dram_active_n);
    });
    copy(tx, &statement, rows_out).await?;
    let statement = format!(
        "COPY tenant_rollup_{res} ({}) FROM STDIN (FORMAT binary)",
        crate::sql::TENANT_ROLLUP_COLUMNS
    );
    let rows_out = prepare(&statement, &r.tenants, |w, ((gpu, tenant, bucket), a)| {
        w.text(cluster)
            .text(node)
            .text(gpu)
            .text(tenant)
            .ts_ms(*bucket)
            .i32(a.samples)
            .opt_f64(Some(a.covered_s))
            .opt_f64(Some(a.alloc_share_sum))
            .i32(a.alloc_n)
            .i32(a.present_n)
            .i32(a.sm_util_n)
            .opt_f64(Some(a.sm_util_sum))
            .opt_f32(a.sm_util_max)
            .i32(a.busy_n)
            .i32(a.mem_used_n)
            .opt_f64(Some(a.mem_used_sum))
            .opt_i64(a.mem_used_max)
            .i32(a.processes_max)
            .i32(a.eff_n)
            .opt_f64(Some(a.eff_sum))
            .i32(a.eff_dcgm_n)
            .raw_bytes(a.eff_hist.to_stored().as_deref())
            .i32(a.active_n)
            .i32(a.idle_n)
            .opt_f64(Some(a.idle_lead_s))
            .opt_f64(Some(a.idle_trail_s))
            .opt_f64(Some(a.idle_max_s));
    });
    copy(tx, &statement, rows_out).await?;
    Ok(())
}

pub(super) async fn read_rollups(
    conn: &mut sqlx::PgConnection,
    res: &str,
    cluster: &str,
    node: &str,
    from: i64,
    to: i64,
) -> Result<NodeRollup> {
    let mut out = NodeRollup::default();
    let cols = |list: &str| {
        list.replace(
            "bucket,",
            &format!("{} AS bucket,", Dialect::Postgres.epoch_ms("bucket")),
        )
    };
    let range = "cluster = $1 AND node = $2 AND bucket >= to_timestamp($3 / 1000.0) AND bucket < to_timestamp($4 / 1000.0)";
    let rows = sqlx::query(&format!(
        "SELECT {} FROM gpu_rollup_{res} WHERE {range}",
        cols(crate::sql::GPU_ROLLUP_COLUMNS)
    ))
    .bind(cluster)
    .bind(node)
    .bind(from)
    .bind(to)
    .fetch_all(&mut *conn)
    .await?;
    for r in &rows {
        let key = (
            r.try_get::<String, _>("gpu_uuid")?,
            r.try_get::<i64, _>("bucket")?,
        );
        out.gpus.insert(key, crate::sql::read_gpu_agg!(r, Vec<u8>));
    }
    let rows = sqlx::query(&format!(
        "SELECT {} FROM tenant_rollup_{res} WHERE {range}",
        cols(crate::sql::TENANT_ROLLUP_COLUMNS)
    ))
    .bind(cluster)
    .bind(node)
    .bind(from)
    .bind(to)
    .fetch_all(&mut *conn)
    .await?;
    for r in &rows {
        let key = (
            r.try_get::<String, _>("gpu_uuid")?,
            r.try_get::<String, _>("tenant_key")?,
            r.try_get::<i64, _>("bucket")?,
        );
        out.tenants.insert(key, crate::sql::read_tenant_agg!(r));
    }
    Ok(out)
}
