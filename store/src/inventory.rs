//! Reading the fleet's inventory — nodes, GPUs with their MIG instances, tenants, GPU events —
//! written once for both backends, the SQL built for the backend's [`crate::dialect::Dialect`]
//! (the few places they differ are `Dialect` methods).

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;
use crate::records::{GpuRecord, NodeRecord, TenantRecord};

impl<DB: Db> Tables<DB> {
    pub(crate) async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let d = DB::DIALECT;
        let rows = stmt::<DB>(&format!(
            "SELECT n.cluster, n.node, n.agent_version, {} AS interval_ms, {} AS first_seen,
                    {} AS last_seen, {} AS last_sample,
                    (SELECT count(*) FROM gpus g WHERE g.cluster = n.cluster AND g.node = n.node) AS gpu_count
             FROM nodes n ORDER BY n.cluster, n.node",
            d.int64("n.interval_ms"),
            d.epoch_ms("n.first_seen"),
            d.epoch_ms("n.last_seen"),
            d.epoch_ms("n.last_sample"),
        ))
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok(crate::sql::node_record::<DB>(r)?))
            .collect()
    }

    /// The hour of the oldest GPU hour rollup kept, None without any: where the stored
    /// history starts (a node's `first_seen` is when the collector first heard from it,
    /// which is later for backfilled or restored history).
    pub(crate) async fn first_hour(&self) -> Result<Option<i64>> {
        let d = DB::DIALECT;
        let row = stmt::<DB>(&format!(
            "SELECT {} AS first FROM gpu_rollup_1h",
            d.epoch_ms("min(bucket)"),
        ))
        .one(&self.read)
        .await?;
        Ok(row.col("first")?)
    }

    /// Every GPU (of one node when `node` is given), with its MIG instances.
    pub(crate) async fn gpus(&self, node: Option<&str>) -> Result<Vec<GpuRecord>> {
        let d = DB::DIALECT;
        let of_node = format!(
            "({} IS NULL OR node = {})",
            d.typed_param(1, "text"),
            d.param(1)
        );
        let rows = stmt::<DB>(&format!(
            "SELECT cluster, node, gpu_uuid, {} AS gpu_index, model, memory_total_bytes, pci_bus_id,
                    mig_enabled, sharing, {} AS replicas, {} AS first_seen, {} AS last_seen
             FROM gpus WHERE {of_node} ORDER BY cluster, node, gpu_index",
            d.int64("gpu_index"),
            d.int64("replicas"),
            d.epoch_ms("first_seen"),
            d.epoch_ms("last_seen"),
        ))
        .arg(node)
        .all(&self.read)
        .await?;
        let migs = stmt::<DB>(&format!(
            "SELECT gpu_uuid, {} AS gi_id, {} AS ci_id, profile, {} AS placement_start,
                    {} AS placement_size, memory_total_bytes, {} AS compute_slices, mig_uuid
             FROM mig_instances WHERE {of_node}
             ORDER BY gpu_uuid, placement_start, gi_id, ci_id",
            d.int64("gi_id"),
            d.int64("ci_id"),
            d.int64("placement_start"),
            d.int64("placement_size"),
            d.int64("compute_slices"),
        ))
        .arg(node)
        .all(&self.read)
        .await?;
        Ok(crate::sql::gpus_with_migs::<DB>(&rows, &migs)?)
    }

    /// Every (tenant, node) row, with the node.
    pub(crate) async fn tenant_rows(&self) -> Result<Vec<(TenantRecord, String)>> {
        let d = DB::DIALECT;
        let rows = stmt::<DB>(&format!(
            "SELECT cluster, node, tenant_key, kind, namespace, pod, container, pod_uid, job_id,
                    username, account, {} AS uid, team, {} AS first_seen, {} AS last_seen
             FROM tenants ORDER BY cluster, tenant_key, node",
            d.int64("uid"),
            d.epoch_ms("first_seen"),
            d.epoch_ms("last_seen"),
        ))
        .all(&self.read)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            if let Some(t) = crate::sql::tenant_record::<DB>(r)? {
                out.push((t, r.col("node")?));
            }
        }
        Ok(out)
    }

    /// The newest sample's time of a node, if it sent any.
    pub(crate) async fn last_sample_ms(&self, cluster: &str, node: &str) -> Result<Option<i64>> {
        let d = DB::DIALECT;
        let v: Option<Option<i64>> = stmt::<DB>(&format!(
            "SELECT {} FROM nodes WHERE cluster = {} AND node = {}",
            d.epoch_ms("last_sample"),
            d.param(1),
            d.param(2)
        ))
        .arg(cluster)
        .arg(node)
        .scalar_opt(&self.read)
        .await?;
        Ok(v.flatten())
    }

    /// GPU events in [from, to), oldest first.
    pub(crate) async fn events(
        &self,
        from: i64,
        to: i64,
    ) -> Result<Vec<crate::records::EventRecord>> {
        let d = DB::DIALECT;
        let rows = stmt::<DB>(&format!(
            "SELECT cluster, node, gpu_uuid, {} AS ts, kind, code FROM gpu_events
             WHERE ts >= {} AND ts < {} ORDER BY ts",
            d.epoch_ms("ts"),
            d.time_param(1),
            d.time_param(2)
        ))
        .arg(from)
        .arg(to)
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok(crate::sql::event_record::<DB>(r)?))
            .collect()
    }
}
