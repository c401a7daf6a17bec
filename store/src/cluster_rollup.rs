//! The cluster's hourly summaries, re-made after every rollup pass for each cluster-hour it
//! touched, written once for both backends ([`cluster_rollup_methods!`]): the cluster's GPUs'
//! hour rollups merged (`cluster_rollup_1h`), and its tenants' summed by GPU model and team
//! (`use_rollup_1h`, the demand forecast's history).

/// A backend's cluster-rollup method: `$write` names its writing pool, `$d` its dialect.
macro_rules! cluster_rollup_methods {
    ($write:ident, $d:expr) => {
        /// Re-merges one cluster-hour from its GPUs' hour rollups, and re-sums its tenants'.
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
            let sums = sqlx::query(&crate::rollup_reads::use_sums_of_hour(d))
                .bind(cluster)
                .bind(hour)
                .fetch_all(&mut *tx)
                .await?;
            sqlx::query(&format!("DELETE FROM use_rollup_1h WHERE {at}"))
                .bind(cluster)
                .bind(hour)
                .execute(&mut *tx)
                .await?;
            let insert = format!(
                "INSERT INTO use_rollup_1h (cluster, model, team, bucket, allocated, used) VALUES ({}, {}, {}, {}, {}, {})",
                d.param(1),
                d.param(2),
                d.param(3),
                d.time_param(4),
                d.param(5),
                d.param(6)
            );
            for r in &sums {
                sqlx::query(&insert)
                    .bind(cluster)
                    .bind(r.try_get::<String, _>(0)?)
                    .bind(r.try_get::<Option<String>, _>(1)?)
                    .bind(hour)
                    .bind(r.try_get::<f64, _>(2)?)
                    .bind(r.try_get::<f64, _>(3)?)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }
    };
}

pub(crate) use cluster_rollup_methods;
