//! Work waiting for GPUs (migration 0013): one row per waiting episode of a pod or job and
//! resource, kept current by the collector's demand poll. One SQL text serves both backends.

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

/// The waiting-work methods of a backend.
macro_rules! waiting_methods {
    ($write:ident, $read:ident, $sql:path) => {
        /// Records one poll's waiting work: new episodes are added, known ones (same cluster,
        /// source, uid and resource) get the poll's reason, message, count and `last_seen_ms`;
        /// their `since_ms` and `first_seen_ms` stay. One transaction.
        pub async fn record_waiting(&self, rows: &[super::waiting::WaitingRecord]) -> Result<()> {
            let sql = $sql(&format!(
                "INSERT INTO waiting_work ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (cluster, source, uid, resource) DO UPDATE SET scope = excluded.scope, team = excluded.team, name = excluded.name, count = excluded.count, product = excluded.product, reason = excluded.reason, message = excluded.message, last_seen_ms = excluded.last_seen_ms",
                super::waiting::COLUMNS
            ));
            let mut tx = self.$write.begin().await?;
            for r in rows {
                sqlx::query(&sql)
                    .bind(&r.cluster)
                    .bind(&r.source)
                    .bind(&r.uid)
                    .bind(&r.scope)
                    .bind(&r.team)
                    .bind(&r.name)
                    .bind(&r.resource)
                    .bind(r.count)
                    .bind(&r.product)
                    .bind(&r.reason)
                    .bind(&r.message)
                    .bind(r.since_ms)
                    .bind(r.first_seen_ms)
                    .bind(r.last_seen_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// The waiting episodes that overlap `[from_ms, to_ms)`, oldest first, at most
        /// [`super::waiting::MAX_WAITING_ROWS`].
        pub async fn waiting(
            &self,
            from_ms: i64,
            to_ms: i64,
        ) -> Result<Vec<super::waiting::WaitingRecord>> {
            let rows = sqlx::query(&$sql(&format!(
                "SELECT {} FROM waiting_work WHERE since_ms < ? AND last_seen_ms >= ? ORDER BY since_ms, cluster, source, uid, resource LIMIT ?",
                super::waiting::COLUMNS
            )))
            .bind(to_ms)
            .bind(from_ms)
            .bind(super::waiting::MAX_WAITING_ROWS)
            .fetch_all(&self.$read)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(super::waiting::WaitingRecord {
                        cluster: r.try_get(0)?,
                        source: r.try_get(1)?,
                        uid: r.try_get(2)?,
                        scope: r.try_get(3)?,
                        team: r.try_get(4)?,
                        name: r.try_get(5)?,
                        resource: r.try_get(6)?,
                        count: r.try_get(7)?,
                        product: r.try_get(8)?,
                        reason: r.try_get(9)?,
                        message: r.try_get(10)?,
                        since_ms: r.try_get(11)?,
                        first_seen_ms: r.try_get(12)?,
                        last_seen_ms: r.try_get(13)?,
                    })
                })
                .collect()
        }

        /// Drops episodes last seen before `before_ms`; returns how many.
        pub async fn prune_waiting(&self, before_ms: i64) -> Result<u64> {
            Ok(
                sqlx::query(&$sql("DELETE FROM waiting_work WHERE last_seen_ms < ?"))
                    .bind(before_ms)
                    .execute(&self.$write)
                    .await?
                    .rows_affected(),
            )
        }
    };
}
pub(crate) use waiting_methods;
