//! Work waiting for GPUs (migration 0013): one row per waiting episode of a pod or job and
//! resource, kept current by the collector's demand poll. One SQL text serves both backends.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

/// Most rows one read returns: a window's waiting episodes, bounded whatever was recorded.
pub const MAX_WAITING_ROWS: i64 = 100_000;

/// One piece of work waiting for GPUs, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingRecord {
    pub cluster: String,
    /// `pod` (Kubernetes), later `slurm_job` and `kueue_workload`.
    pub source: String,
    /// The object's identity across polls (a pod's UID).
    pub uid: String,
    /// The namespace (pods) or account (Slurm) the team is derived from.
    pub scope: String,
    /// Its team (the `[teams]` mapping of `scope`, else `scope`), as of the last poll.
    pub team: String,
    pub name: String,
    /// The extended resource asked for: `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, …
    pub resource: String,
    /// Units of `resource` asked for.
    pub count: i64,
    /// The GPU product the work asks for (a `nvidia.com/gpu.product` node selector), if any.
    pub product: Option<String>,
    /// Why it waits, in the scheduler's words (`Unschedulable`, …) and its message.
    pub reason: String,
    pub message: String,
    /// When it began to wait (a pod's creation time).
    pub since_ms: i64,
    pub first_seen_ms: i64,
    /// The last poll that saw it waiting.
    pub last_seen_ms: i64,
}

pub(crate) const COLUMNS: &str = "cluster, source, uid, scope, team, name, resource, count, product, reason, message, since_ms, first_seen_ms, last_seen_ms";

impl<DB: Db> Tables<DB> {
    /// Records one poll's waiting work: new episodes are added, known ones (same cluster,
    /// source, uid and resource) get the poll's reason, message, count and `last_seen_ms`;
    /// their `since_ms` and `first_seen_ms` stay. One transaction.
    pub(crate) async fn record_waiting(
        &self,
        rows: &[super::waiting::WaitingRecord],
    ) -> Result<()> {
        let sql = DB::DIALECT.numbered(&format!(
            "INSERT INTO waiting_work ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (cluster, source, uid, resource) DO UPDATE SET scope = excluded.scope, team = excluded.team, name = excluded.name, count = excluded.count, product = excluded.product, reason = excluded.reason, message = excluded.message, last_seen_ms = excluded.last_seen_ms",
            super::waiting::COLUMNS
        ));
        let mut tx = self.write.begin().await?;
        for r in rows {
            stmt::<DB>(&sql)
                .arg(&r.cluster)
                .arg(&r.source)
                .arg(&r.uid)
                .arg(&r.scope)
                .arg(&r.team)
                .arg(&r.name)
                .arg(&r.resource)
                .arg(r.count)
                .arg(r.product.as_deref())
                .arg(&r.reason)
                .arg(&r.message)
                .arg(r.since_ms)
                .arg(r.first_seen_ms)
                .arg(r.last_seen_ms)
                .run(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The waiting episodes that overlap `[from_ms, to_ms)`, oldest first, at most
    /// [`super::waiting::MAX_WAITING_ROWS`].
    pub(crate) async fn waiting(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<super::waiting::WaitingRecord>> {
        let rows = stmt::<DB>(&DB::DIALECT.numbered(&format!(
            "SELECT {} FROM waiting_work WHERE since_ms < ? AND last_seen_ms >= ? ORDER BY since_ms, cluster, source, uid, resource LIMIT ?",
            super::waiting::COLUMNS
        )))
        .arg(to_ms)
        .arg(from_ms)
        .arg(super::waiting::MAX_WAITING_ROWS)
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(super::waiting::WaitingRecord {
                    cluster: r.at(0)?,
                    source: r.at(1)?,
                    uid: r.at(2)?,
                    scope: r.at(3)?,
                    team: r.at(4)?,
                    name: r.at(5)?,
                    resource: r.at(6)?,
                    count: r.at(7)?,
                    product: r.at(8)?,
                    reason: r.at(9)?,
                    message: r.at(10)?,
                    since_ms: r.at(11)?,
                    first_seen_ms: r.at(12)?,
                    last_seen_ms: r.at(13)?,
                })
            })
            .collect()
    }

    /// Drops episodes last seen before `before_ms`; returns how many.
    pub(crate) async fn prune_waiting(&self, before_ms: i64) -> Result<u64> {
        Ok(
            stmt::<DB>(&DB::DIALECT.numbered("DELETE FROM waiting_work WHERE last_seen_ms < ?"))
                .arg(before_ms)
                .run(&self.write)
                .await?,
        )
    }
}
