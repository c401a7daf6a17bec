//! Minute and hour rollups on PostgreSQL: a span's rollups replaced with COPY (read back by
//! `rollup_reads::read_rollups`).

use crate::rollup_rows;
use sqlx::postgres::Postgres;

use super::copy_rows::prepare;
use super::pgcopy::copy;
use crate::error::Result;
use model::rollup::NodeRollup;

pub(super) async fn replace_rollups(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    res: crate::Rollups,
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
        crate::sql::GPU_ROLLUP_COLUMNS.as_str()
    );
    let rows_out = prepare(&statement, &r.gpus, |w, ((gpu, bucket), a)| {
        rollup_rows::gpu(w, [cluster, node, gpu], *bucket, a)
    });
    copy(tx, &statement, rows_out).await?;
    let statement = format!(
        "COPY tenant_rollup_{res} ({}) FROM STDIN (FORMAT binary)",
        crate::sql::TENANT_ROLLUP_COLUMNS.as_str()
    );
    let rows_out = prepare(&statement, &r.tenants, |w, ((gpu, tenant, bucket), a)| {
        rollup_rows::tenant(w, [cluster, node, gpu, tenant], *bucket, a)
    });
    copy(tx, &statement, rows_out).await?;
    Ok(())
}
