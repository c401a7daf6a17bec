//! The cluster's hourly summaries, re-made after every rollup pass for each cluster-hour it
//! touched, written once for both backends: the cluster's GPUs' hour rollups merged
//! (`cluster_rollup_1h`), and its tenants' summed by GPU model and team (`use_rollup_1h`, the
//! demand forecast's history).

use model::rollup::GpuAgg;

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;
use crate::rollup_columns::{GPU_AGG, bind_values, read_named};

impl<DB: Db> Tables<DB> {
    /// Re-merges one cluster-hour from its GPUs' hour rollups, and re-sums its tenants'.
    pub(crate) async fn refresh_cluster_hour(&self, cluster: &str, hour: i64) -> Result<()> {
        let d = DB::DIALECT;
        let at = format!("cluster = {} AND bucket = {}", d.param(1), d.time_param(2));
        let mut tx = self.write.begin().await?;
        let cols = crate::sql::GPU_ROLLUP_COLUMNS
            .as_str()
            .replace("bucket,", &format!("{} AS bucket,", d.epoch_ms("bucket")));
        let rows = stmt::<DB>(&format!("SELECT {cols} FROM gpu_rollup_1h WHERE {at}"))
            .arg(cluster)
            .arg(hour)
            .all(&mut tx)
            .await?;
        let mut agg = GpuAgg::default();
        for r in &rows {
            agg.merge(&read_named::<DB, GpuAgg>(r, &GPU_AGG)?);
        }
        stmt::<DB>(&format!("DELETE FROM cluster_rollup_1h WHERE {at}"))
            .arg(cluster)
            .arg(hour)
            .run(&mut tx)
            .await?;
        if !rows.is_empty() {
            // cluster, bucket, the GPU count, then the aggregate's columns.
            let columns = crate::sql::CLUSTER_ROLLUP_COLUMNS
                .as_str()
                .split(',')
                .count();
            let values: Vec<String> = [d.param(1), d.time_param(2)]
                .into_iter()
                .chain((3..=columns).map(|n| d.param(n)))
                .collect();
            let sql = format!(
                "INSERT INTO cluster_rollup_1h ({}) VALUES ({})",
                crate::sql::CLUSTER_ROLLUP_COLUMNS.as_str(),
                values.join(", ")
            );
            let q = stmt::<DB>(&sql)
                .arg(cluster)
                .arg(hour)
                .arg(rows.len() as i32);
            bind_values(q, &agg, &GPU_AGG).run(&mut tx).await?;
        }
        let sums = stmt::<DB>(&crate::rollup_reads::use_sums_of_hour(d))
            .arg(cluster)
            .arg(hour)
            .all(&mut tx)
            .await?;
        stmt::<DB>(&format!("DELETE FROM use_rollup_1h WHERE {at}"))
            .arg(cluster)
            .arg(hour)
            .run(&mut tx)
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
            stmt::<DB>(&insert)
                .arg(cluster)
                .arg(r.at::<String>(0)?)
                .arg(r.at::<Option<String>>(1)?)
                .arg(hour)
                .arg(r.at::<f64>(2)?)
                .arg(r.at::<f64>(3)?)
                .run(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
