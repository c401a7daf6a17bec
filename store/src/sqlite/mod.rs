//! The embedded SQLite backend, the default when no database URL is given. One writer
//! connection (SQLite has a single writer anyway, and this avoids lock upgrades failing with
//! BUSY) and a small pool of readers over WAL. Timestamps are integer milliseconds.

use std::str::FromStr;
use std::time::Duration;

use model::wire::v1::Batch;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};

use super::migrate;
use super::raw;
use std::future::Future;

use crate::backend::{Backend, NodeRange};
use crate::db::Tables;
use crate::error::{Result, StoreError};
use crate::records::{IngestOutcome, Retention, RetentionStats, TeamOf, Writes};
use model::rollup::{self, NodeRollup};

#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    /// The tables written the same way on both backends, on `writer` and `reader`.
    pub(crate) tables: Tables<Sqlite>,
}

mod samples;

use samples::{Binds, MAX_BINDS, insert_rows, insert_samples};

impl SqliteStore {
    pub async fn open(url: &str) -> Result<SqliteStore> {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::BadRequest(format!("bad sqlite url {url:?}: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(opts.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts.read_only(true))
            .await?;
        Ok(SqliteStore {
            tables: Tables::new(writer.clone(), reader.clone()),
            writer,
            reader,
        })
    }

    pub async fn migrate(&self) -> Result<Vec<String>> {
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at INTEGER NOT NULL)",
        )
        .execute(&self.writer)
        .await?;
        let applied: Vec<(i64, String)> =
            sqlx::query_as("SELECT version, checksum FROM schema_migrations ORDER BY version")
                .fetch_all(&self.writer)
                .await?;
        let mut done = Vec::new();
        for m in migrate::to_apply(migrate::SQLITE, &applied)? {
            let mut tx = self.writer.begin().await?;
            sqlx::raw_sql(m.sql).execute(&mut *tx).await?;
            // The database's clock, as PostgreSQL's now() is there.
            sqlx::query("INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))")
                .bind(m.version)
                .bind(m.name)
                .bind(migrate::checksum(m.sql))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            done.push(m.name.to_owned());
        }
        Ok(done)
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    /// SQLite has no partitions to make for a range.
    pub async fn prepare_partitions(&self, _now_ms: i64) -> Result<()> {
        Ok(())
    }

    pub async fn ingest(
        &self,
        b: &Batch,
        received_ms: i64,
        team_of: TeamOf<'_>,
        writes: &Writes<'_>,
    ) -> Result<IngestOutcome> {
        let mut tx = self.writer.begin().await?;
        // Claim the sequence number (see the PostgreSQL backend); SQLite has one writer.
        let claimed: Option<i64> = sqlx::query_scalar(
            "INSERT INTO agent_streams (cluster, node, agent_id, last_seq, last_seen) VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (cluster, node, agent_id) DO UPDATE SET last_seq = excluded.last_seq, last_seen = excluded.last_seen
             WHERE agent_streams.last_seq < excluded.last_seq RETURNING last_seq",
        )
        .bind(&b.cluster)
        .bind(&b.node)
        .bind(&b.agent_id)
        .bind(b.seq as i64)
        .bind(received_ms)
        .fetch_optional(&mut *tx)
        .await?;
        if claimed.is_none() {
            let last: i64 = sqlx::query_scalar("SELECT last_seq FROM agent_streams WHERE cluster = ? AND node = ? AND agent_id = ?")
                .bind(&b.cluster)
                .bind(&b.node)
                .bind(&b.agent_id)
                .fetch_one(&mut *tx)
                .await?;
            tx.rollback().await?;
            return Ok(IngestOutcome::Duplicate {
                last_seq: last as u64,
            });
        }
        let last_sample = b.time_range().map(|r| r.1);
        sqlx::query(
            "INSERT INTO nodes (cluster, node, agent_version, interval_ms, first_seen, last_seen, last_sample) VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (cluster, node) DO UPDATE SET agent_version = excluded.agent_version, interval_ms = excluded.interval_ms,
               last_seen = excluded.last_seen, last_sample = max(coalesce(nodes.last_sample, 0), coalesce(excluded.last_sample, 0))",
        )
        .bind(&b.cluster)
        .bind(&b.node)
        .bind(&b.agent_version)
        .bind(i64::from(b.interval_ms))
        .bind(received_ms)
        .bind(received_ms)
        .bind(last_sample)
        .execute(&mut *tx)
        .await?;
        if let (true, Some(inventory)) = (writes.inventory, &b.inventory) {
            for g in inventory {
                sqlx::query(
                    "INSERT INTO gpus (cluster, node, gpu_uuid, gpu_index, model, memory_total_bytes, pci_bus_id, mig_enabled, sharing, replicas, first_seen, last_seen)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                     ON CONFLICT (cluster, node, gpu_uuid) DO UPDATE SET gpu_index = excluded.gpu_index, model = excluded.model,
                       memory_total_bytes = excluded.memory_total_bytes, pci_bus_id = excluded.pci_bus_id, mig_enabled = excluded.mig_enabled,
                       sharing = excluded.sharing, replicas = excluded.replicas, last_seen = excluded.last_seen",
                )
                .bind(&b.cluster).bind(&b.node).bind(&g.uuid).bind(i64::from(g.index)).bind(&g.model)
                .bind(g.memory_total_bytes).bind(&g.pci_bus_id).bind(g.mig_enabled).bind(g.sharing.as_str())
                .bind(i64::from(g.replicas)).bind(received_ms).bind(received_ms)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "DELETE FROM mig_instances WHERE cluster = ? AND node = ? AND gpu_uuid = ?",
                )
                .bind(&b.cluster)
                .bind(&b.node)
                .bind(&g.uuid)
                .execute(&mut *tx)
                .await?;
                for m in &g.mig_instances {
                    sqlx::query(
                        "INSERT INTO mig_instances (cluster, node, gpu_uuid, gi_id, ci_id, profile, placement_start, placement_size, memory_total_bytes, compute_slices, mig_uuid, last_seen)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    )
                    .bind(&b.cluster).bind(&b.node).bind(&g.uuid).bind(i64::from(m.gi_id)).bind(i64::from(m.ci_id))
                    .bind(&m.profile).bind(m.placement_start.map(i64::from)).bind(m.placement_size.map(i64::from))
                    .bind(m.memory_total_bytes).bind(m.compute_slices.map(i64::from)).bind(&m.uuid).bind(received_ms)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        for t in &writes.tenants {
            sqlx::query(
                "INSERT INTO tenants (cluster, node, tenant_key, kind, namespace, pod, container, pod_uid, job_id, username, account, uid, team, first_seen, last_seen)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT (cluster, node, tenant_key) DO UPDATE SET kind = excluded.kind, namespace = excluded.namespace, pod = excluded.pod,
                   container = excluded.container, pod_uid = excluded.pod_uid, job_id = excluded.job_id, username = excluded.username,
                   account = excluded.account, uid = excluded.uid, team = excluded.team, last_seen = max(tenants.last_seen, excluded.last_seen), first_seen = min(tenants.first_seen, excluded.first_seen)",
            )
            .bind(&b.cluster).bind(&b.node).bind(&t.key).bind(t.kind.as_str()).bind(&t.namespace).bind(&t.pod)
            .bind(&t.container).bind(&t.pod_uid).bind(&t.job_id).bind(&t.user).bind(&t.account)
            .bind(t.uid.map(i64::from)).bind(team_of(t)).bind(b.first_seen(&t.key).unwrap_or(received_ms)).bind(last_sample.unwrap_or(received_ms))
            .execute(&mut *tx)
            .await?;
        }
        let rows = insert_samples(&mut tx, b).await?;
        let mut minutes: Vec<i64> = b
            .snapshots
            .iter()
            .map(|s| rollup::bucket_of(s.ts, rollup::MINUTE_MS))
            .collect();
        minutes.sort_unstable();
        minutes.dedup();
        insert_rows(
            &mut tx,
            "INSERT INTO rollup_pending (cluster, node, bucket) ",
            " ON CONFLICT DO NOTHING",
            &minutes,
            |mut r, m| {
                r.push_bind(b.cluster.clone())
                    .push_bind(b.node.clone())
                    .push_bind(*m);
            },
        )
        .await?;
        tx.commit().await?;
        Ok(IngestOutcome::Stored { rows })
    }

    /// Whether a row of `table` has every (column, value) of `filters`; the names are the
    /// store's own constants (`'static`), never input.
    pub async fn exists(
        &self,
        table: &'static str,
        filters: &[(&'static str, &str)],
    ) -> Result<bool> {
        let cond: Vec<String> = filters.iter().map(|(c, _)| format!("{c} = ?")).collect();
        let sql = format!("SELECT 1 FROM {table} WHERE {} LIMIT 1", cond.join(" AND "));
        let mut q = sqlx::query_scalar::<_, i32>(&sql);
        for (_, v) in filters {
            q = q.bind(*v);
        }
        Ok(q.fetch_optional(&self.reader).await?.is_some())
    }

    pub async fn table_bytes(&self, table: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_master m ON m.name = d.name WHERE m.tbl_name = ?",
        )
        .bind(table)
        .fetch_one(&self.reader)
        .await?)
    }

    pub async fn pending_minutes(&self, until_ms: i64) -> Result<Vec<(String, String, i64)>> {
        Ok(sqlx::query_as("SELECT cluster, node, bucket FROM rollup_pending WHERE bucket + 60000 <= ? ORDER BY cluster, node, bucket")
            .bind(until_ms)
            .fetch_all(&self.writer)
            .await?)
    }

    pub async fn latest_health(&self) -> Result<Vec<crate::records::HealthRecord>> {
        // Each GPU's newest hot row and newest block.
        let rows = sqlx::query(
            "SELECT g.cluster, g.node, g.gpu_uuid, s.ts, s.ecc_uncorrected, s.retired_pages, s.remapped_rows, b.data
             FROM gpus g
             LEFT JOIN gpu_samples s ON s.rowid = (
                SELECT rowid FROM gpu_samples x WHERE x.gpu_uuid = g.gpu_uuid ORDER BY ts DESC LIMIT 1)
             LEFT JOIN gpu_blocks b ON b.rowid = (
                SELECT rowid FROM gpu_blocks y WHERE y.gpu_uuid = g.gpu_uuid ORDER BY block_start DESC LIMIT 1)
             WHERE s.ts IS NOT NULL OR b.data IS NOT NULL",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(rows
            .iter()
            .map(raw::health::<Sqlite>)
            .collect::<sqlx::Result<_>>()?)
    }

    pub async fn apply_retention(&self, now_ms: i64, r: &Retention) -> Result<RetentionStats> {
        let mut stats = RetentionStats::default();
        let cut = |d: Duration| now_ms - d.as_millis() as i64;
        for (table, col, cutoff) in [
            ("gpu_samples", "ts", cut(r.raw)),
            ("mig_samples", "ts", cut(r.raw)),
            ("process_samples", "ts", cut(r.raw)),
            ("allocation_samples", "ts", cut(r.raw)),
            ("gpu_events", "ts", cut(r.raw)),
            // A block goes once all of its span is past the cutoff.
            ("gpu_blocks", "block_start", cut(r.raw) - raw::BLOCK_MS),
            ("mig_blocks", "block_start", cut(r.raw) - raw::BLOCK_MS),
            ("process_blocks", "block_start", cut(r.raw) - raw::BLOCK_MS),
            (
                "allocation_blocks",
                "block_start",
                cut(r.raw) - raw::BLOCK_MS,
            ),
            ("rollup_pending", "bucket", cut(r.raw)),
            ("gpu_rollup_1m", "bucket", cut(r.minute)),
            ("tenant_rollup_1m", "bucket", cut(r.minute)),
            ("gpu_rollup_1h", "bucket", cut(r.hour)),
            ("tenant_rollup_1h", "bucket", cut(r.hour)),
            ("cluster_rollup_1h", "bucket", cut(r.hour)),
            ("use_rollup_1h", "bucket", cut(r.hour)),
        ] {
            let done = sqlx::query(&format!("DELETE FROM {table} WHERE {col} < ?"))
                .bind(cutoff)
                .execute(&self.writer)
                .await?;
            if done.rows_affected() > 0 {
                stats.dropped.push(table.to_owned());
                stats.rows_deleted += done.rows_affected();
            }
        }
        Ok(stats)
    }
}

/// Replaces the rollup rows of one node in [from, to) of width `res`.
async fn replace_rollups(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    res: crate::Rollups,
    range: NodeRange<'_>,
    r: &NodeRollup,
) -> Result<()> {
    let NodeRange {
        cluster,
        node,
        from,
        to,
    } = range;
    for t in ["gpu", "tenant"] {
        sqlx::query(&format!("DELETE FROM {t}_rollup_{res} WHERE cluster = ? AND node = ? AND bucket >= ? AND bucket < ?"))
            .bind(cluster).bind(node).bind(from).bind(to)
            .execute(&mut **tx).await?;
    }
    let gpus: Vec<_> = r.gpus.iter().collect();
    let head = format!(
        "INSERT INTO gpu_rollup_{res} ({}) ",
        crate::sql::GPU_ROLLUP_COLUMNS.as_str()
    );
    insert_rows(&mut *tx, head, "", &gpus, |values, ((gpu, bucket), a)| {
        crate::rollup_rows::gpu(&mut Binds(values), [cluster, node, gpu], *bucket, a)
    })
    .await?;
    let tenants: Vec<_> = r.tenants.iter().collect();
    let head = format!(
        "INSERT INTO tenant_rollup_{res} ({}) ",
        crate::sql::TENANT_ROLLUP_COLUMNS.as_str()
    );
    insert_rows(
        &mut *tx,
        head,
        "",
        &tenants,
        |values, ((gpu, tenant, bucket), a)| {
            crate::rollup_rows::tenant(&mut Binds(values), [cluster, node, gpu, tenant], *bucket, a)
        },
    )
    .await?;
    Ok(())
}

impl Backend for Sqlite {
    /// SQLite keeps no time partitions: every day's rows go to the one table.
    fn ensure_days<'a>(
        _tables: &'a Tables<Self>,
        _days: &'a [i64],
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        std::future::ready(Ok(()))
    }

    fn replace_rollups<'a>(
        tx: &'a mut sqlx::Transaction<'_, Self>,
        res: crate::Rollups,
        range: NodeRange<'a>,
        r: &'a NodeRollup,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        replace_rollups(tx, res, range, r)
    }

    /// As many as SQLite's bind limit allows.
    fn blocks_per_insert(table: &raw::RawTable) -> usize {
        MAX_BINDS / raw::binds_per_block(table)
    }
}
