//! The cluster's hourly rollup: merged from its GPUs' hour rollups after every rollup pass,
//! written once for both backends ([`cluster_rollup_methods!`]).

/// A backend's cluster-rollup method: `$write` names its writing pool, `$d` its dialect.
macro_rules! cluster_rollup_methods {
    ($write:ident, $d:expr) => {
        /// Re-merges one cluster-hour from its GPUs' hour rollups.
        pub async fn refresh_cluster_hour(&self, cluster: &str, hour: i64) -> Result<()> {
            let d = $d;
            let at = format!("cluster = {} AND bucket = {}", d.param(1), d.time_param(2));
            let mut tx = self.$write.begin().await?;
            let cols = crate::sql::GPU_ROLLUP_COLUMNS
                .replace("bucket,", &format!("{} AS bucket,", d.epoch_ms("bucket")));
            let rows = sqlx::query(&format!("SELECT {cols} FROM gpu_rollup_1h WHERE {at}"))
                .bind(cluster)
                .bind(hour)
                .fetch_all(&mut *tx)
                .await?;
            let mut agg = rollup::GpuAgg::default();
            for r in &rows {
                agg.merge(&crate::sql::read_gpu_agg!(r, Vec<u8>));
            }
            sqlx::query(&format!("DELETE FROM cluster_rollup_1h WHERE {at}"))
                .bind(cluster)
                .bind(hour)
                .execute(&mut *tx)
                .await?;
            if !rows.is_empty() {
                // cluster, bucket, the GPU count, then the aggregate's columns.
                let columns = crate::sql::CLUSTER_ROLLUP_COLUMNS.split(',').count();
                let values: Vec<String> = [d.param(1), d.time_param(2)]
                    .into_iter()
                    .chain((3..=columns).map(|n| d.param(n)))
                    .collect();
                let sql = format!(
                    "INSERT INTO cluster_rollup_1h ({}) VALUES ({})",
                    crate::sql::CLUSTER_ROLLUP_COLUMNS,
                    values.join(", ")
                );
                let q = sqlx::query(&sql)
                    .bind(cluster)
                    .bind(hour)
                    .bind(rows.len() as i32);
                crate::sql::bind_gpu_agg!(q, &agg, bind)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }
    };
}

pub(crate) use cluster_rollup_methods;
