//! The PostgreSQL backend: raw samples and rollups in time-partitioned tables (daily; hourly
//! rollups monthly), loaded with binary COPY, with retention by dropping whole partitions.

use std::time::Duration;

use model::wire::v1::Batch;
use sqlx::PgPool;
use sqlx::postgres::{PgPoolOptions, Postgres};

use super::migrate;
use super::raw;
use std::future::Future;

use crate::backend::{Backend, NodeRange};
use crate::db::Tables;
use crate::dialect::Dialect;
use crate::error::{Result, StoreError};
use crate::records::{IngestOutcome, Retention, RetentionStats, TeamOf, Writes};
use crate::sql::days_between;
use copy_rows::sample_rows;
use group_commit::{COPIES, Claim, GroupCommit, Staged};
use partitions::{MONTHLY, civil, create_partition, daily, partition_end_ms};
use pgcopy::copy;
use rollups::replace_rollups;

mod citus;
mod copy_rows;
mod group_commit;
mod partitions;
mod pgcopy;
mod rollups;
use model::rollup::{self, NodeRollup};

/// Epoch milliseconds of a timestamptz column.
fn ms(col: &str) -> String {
    Dialect::Postgres.epoch_ms(col)
}

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// The tables written the same way on both backends, on `pool`.
    pub(crate) tables: Tables<Postgres>,
    /// Ingest's transactions, shared by concurrent batches.
    group: GroupCommit,
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<PgStore> {
        // Ingest's four committers keep a connection each while batches flow; eight more serve
        // reads, the upkeep's passes and migrations.
        let pool = PgPoolOptions::new()
            .max_connections(12)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await?;
        Ok(PgStore {
            group: GroupCommit::start(pool.clone()),
            tables: Tables::new(pool.clone(), pool.clone()),
            pool,
        })
    }

    pub async fn migrate(&self) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await?;
        // One collector migrates at a time.
        sqlx::query("SELECT pg_advisory_lock(7210001)")
            .execute(&mut *conn)
            .await?;
        let result = async {
            sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .execute(&mut *conn)
            .await?;
            let applied: Vec<(i64, String)> = sqlx::query_as("SELECT version, checksum FROM schema_migrations ORDER BY version")
                .fetch_all(&mut *conn)
                .await?;
            let mut done = Vec::new();
            for m in migrate::to_apply(migrate::POSTGRES, &applied)? {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                sqlx::raw_sql(m.sql).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)")
                    .bind(m.version)
                    .bind(m.name)
                    .bind(migrate::checksum(m.sql))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                done.push(m.name.to_owned());
            }
            if citus::installed(&mut conn).await? {
                done.extend(citus::distribute(&mut conn).await?);
            }
            Ok::<_, StoreError>(done)
        }
        .await;
        sqlx::query("SELECT pg_advisory_unlock(7210001)")
            .execute(&mut *conn)
            .await?;
        result
    }

    pub async fn require_citus(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        citus::require(&mut conn).await
    }

    pub async fn citus_workers(&self) -> Result<Option<usize>> {
        let mut conn = self.pool.acquire().await?;
        citus::workers(&mut conn).await
    }

    /// The pool's connections: open, and lent out (to committers, queries, upkeep) right now.
    pub fn connections(&self) -> (u32, u32) {
        let open = self.pool.size();
        (open, open.saturating_sub(self.pool.num_idle() as u32))
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn prepare_partitions(&self, now_ms: i64) -> Result<()> {
        self.ensure_days(&days_between(now_ms - 86_400_000, now_ms + 2 * 86_400_000))
            .await
    }

    /// Creates the daily and monthly partitions covering the given days.
    /// The day partitions [from, to] needs.
    async fn ensure_days(&self, days: &[i64]) -> Result<()> {
        ensure_days(&self.tables, days).await
    }

    pub async fn ingest(
        &self,
        b: &Batch,
        received_ms: i64,
        team_of: TeamOf<'_>,
        writes: &Writes<'_>,
    ) -> Result<IngestOutcome> {
        if let Some((from, to)) = b.time_range() {
            let mut days = days_between(from, to);
            for s in &b.snapshots {
                days.extend(s.events.iter().flat_map(|e| days_between(e.ts, e.ts)));
            }
            days.sort_unstable();
            days.dedup();
            self.ensure_days(&days).await?;
        }
        let mut minutes: Vec<i64> = b
            .snapshots
            .iter()
            .map(|s| rollup::bucket_of(s.ts, rollup::MINUTE_MS))
            .collect();
        minutes.sort_unstable();
        minutes.dedup();
        // Owned and encoded here, on the caller's task; a committer only sends it.
        let staged = Staged {
            claim: Claim {
                cluster: b.cluster.clone(),
                node: b.node.clone(),
                agent_id: b.agent_id.clone(),
                seq: b.seq as i64,
                received_ms,
                agent_version: b.agent_version.clone(),
                interval_ms: b.interval_ms as i32,
                last_sample: b.time_range().map(|r| r.1),
                minutes,
            },
            inventory: if writes.inventory {
                b.inventory.clone()
            } else {
                None
            },
            tenants: writes
                .tenants
                .iter()
                .map(|t| ((*t).clone(), team_of(t), b.first_seen(&t.key)))
                .collect(),
            rows: sample_rows(b),
        };
        self.group.store(staged).await
    }

    /// `CHECKPOINT`, for the benchmarks (`Store::checkpoint`).
    pub async fn checkpoint(&self) -> Result<()> {
        sqlx::query("CHECKPOINT").execute(&self.pool).await?;
        Ok(())
    }

    /// The raw-COPY baseline of the ingest benchmark: the batch's sample rows, COPYed into the
    /// same tables in one transaction, with none of ingest's other work.
    pub async fn copy_only(&self, b: &Batch) -> Result<u64> {
        if let Some((from, to)) = b.time_range() {
            self.ensure_days(&days_between(from, to)).await?;
        }
        let mut tx = self.pool.begin().await?;
        let mut rows = 0;
        for (statement, writer) in COPIES.iter().zip(sample_rows(b)) {
            rows += copy(&mut tx, statement, writer).await?;
        }
        tx.commit().await?;
        Ok(rows)
    }

    /// Synthetic hour rollups for the query benchmark: `gpus` GPUs (8 per node) with `hours`
    /// hours of history ending at `to_ms`.
    pub async fn fill_hour_rollups(
        &self,
        cluster: &str,
        gpus: i64,
        hours: i64,
        to_ms: i64,
    ) -> Result<u64> {
        let from_ms = rollup::bucket_of(to_ms, rollup::HOUR_MS) - hours * rollup::HOUR_MS;
        self.ensure_days(&days_between(from_ms, to_ms)).await?;
        let mut h = rollup::Hist::default();
        (0..3600).for_each(|i| h.add((i % 100) as f32 / 100.0));
        let columns = crate::sql::GPU_ROLLUP_COLUMNS.as_str();
        let values = columns
            .split(", ")
            .map(|c| {
                fixture_value(c).ok_or_else(|| {
                    StoreError::Internal(format!("the series fixture has no value for {c}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let done = sqlx::query(&format!(
            "INSERT INTO gpu_rollup_1h ({columns})
             SELECT {}
             FROM generate_series(0, $4 - 1) AS g, generate_series(0, $5 - 1) AS hh",
            values.join(", ")
        ))
        .bind(cluster)
        .bind(from_ms)
        .bind(h.to_bytes())
        .bind(gpus)
        .bind(hours)
        .execute(&self.pool)
        .await?;
        sqlx::query("ANALYZE gpu_rollup_1h")
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Whether a row of `table` has every (column, value) of `filters`; the names are the
    /// store's own constants (`'static`), never input.
    pub async fn exists(
        &self,
        table: &'static str,
        filters: &[(&'static str, &str)],
    ) -> Result<bool> {
        let cond: Vec<String> = filters
            .iter()
            .enumerate()
            .map(|(i, (c, _))| format!("{c} = ${}", i + 1))
            .collect();
        let sql = format!("SELECT 1 FROM {table} WHERE {} LIMIT 1", cond.join(" AND "));
        let mut q = sqlx::query_scalar::<_, i32>(&sql);
        for (_, v) in filters {
            q = q.bind(*v);
        }
        Ok(q.fetch_optional(&self.pool).await?.is_some())
    }

    /// `VACUUM`s `tables` (names from [`crate::raw::NAMES`]).
    pub async fn vacuum(&self, tables: &[&str]) -> Result<()> {
        sqlx::query(&format!("VACUUM {}", tables.join(", ")))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn table_bytes(&self, table: &str) -> Result<i64> {
        let mut conn = self.pool.acquire().await?;
        // On Citus a distributed table's data is in its shards on the workers.
        let size = if citus::installed(&mut conn).await? {
            "citus_total_relation_size(relid)"
        } else {
            "pg_total_relation_size(relid)"
        };
        Ok(sqlx::query_scalar(&format!(
            "SELECT coalesce(sum({size}), 0)::bigint FROM pg_partition_tree($1::regclass) WHERE isleaf"
        ))
        .bind(table)
        .fetch_one(&mut *conn)
        .await?)
    }

    pub async fn pending_minutes(&self, until_ms: i64) -> Result<Vec<(String, String, i64)>> {
        Ok(sqlx::query_as(&format!(
            "SELECT cluster, node, {} FROM rollup_pending WHERE bucket + interval '1 minute' <= to_timestamp($1 / 1000.0) ORDER BY 1, 2, 3",
            ms("bucket")
        ))
        .bind(until_ms)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn latest_health(&self) -> Result<Vec<crate::records::HealthRecord>> {
        // Each GPU's newest hot row and newest block; the joins carry (cluster, node): on
        // Citus all three tables are distributed by node, and only a join on it runs on the
        // workers.
        let rows = sqlx::query(&format!(
            "SELECT g.cluster, g.node, g.gpu_uuid, s.ts, s.ecc_uncorrected, s.retired_pages, s.remapped_rows, b.data
             FROM gpus g
             LEFT JOIN LATERAL (
                SELECT {} AS ts, ecc_uncorrected, retired_pages::bigint AS retired_pages, remapped_rows::bigint AS remapped_rows FROM gpu_samples x
                WHERE x.cluster = g.cluster AND x.node = g.node AND x.gpu_uuid = g.gpu_uuid
                ORDER BY x.ts DESC LIMIT 1) s ON true
             LEFT JOIN LATERAL (
                SELECT data FROM gpu_blocks y
                WHERE y.cluster = g.cluster AND y.node = g.node AND y.gpu_uuid = g.gpu_uuid
                ORDER BY y.block_start DESC LIMIT 1) b ON true
             WHERE s.ts IS NOT NULL OR b.data IS NOT NULL",
            ms("x.ts")
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(raw::health::<Postgres>)
            .collect::<sqlx::Result<_>>()?)
    }

    pub async fn try_job_lock(&self, key: i64) -> Result<Option<crate::records::JobLock>> {
        let mut conn = self.pool.acquire().await?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
        Ok(got.then(|| crate::records::JobLock::postgres(conn, key)))
    }

    pub async fn apply_retention(&self, now_ms: i64, r: &Retention) -> Result<RetentionStats> {
        let mut stats = RetentionStats::default();
        let cut = |d: Duration| now_ms - d.as_millis() as i64;
        let plan: Vec<(&str, i64)> = daily()
            .map(|t| {
                (
                    t,
                    if t.ends_with("_1m") {
                        cut(r.minute)
                    } else {
                        cut(r.raw)
                    },
                )
            })
            .chain(MONTHLY.iter().map(|t| (*t, cut(r.hour))))
            .collect();
        for (table, cutoff) in plan {
            let parts: Vec<String> = sqlx::query_scalar(
                "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = $1",
            )
            .bind(table)
            .fetch_all(&self.pool)
            .await?;
            for part in parts {
                let Some(end) = partition_end_ms(table, &part) else {
                    continue;
                };
                if end <= cutoff {
                    sqlx::query(&format!("DROP TABLE IF EXISTS {part}"))
                        .execute(&self.pool)
                        .await?;
                    stats.dropped.push(part);
                }
            }
        }
        let done =
            sqlx::query("DELETE FROM rollup_pending WHERE bucket < to_timestamp($1 / 1000.0)")
                .bind(cut(r.raw))
                .execute(&self.pool)
                .await?;
        stats.rows_deleted += done.rows_affected();
        let done =
            sqlx::query("DELETE FROM cluster_rollup_1h WHERE bucket < to_timestamp($1 / 1000.0)")
                .bind(cut(r.hour))
                .execute(&self.pool)
                .await?;
        stats.rows_deleted += done.rows_affected();
        let done =
            sqlx::query("DELETE FROM use_rollup_1h WHERE bucket < to_timestamp($1 / 1000.0)")
                .bind(cut(r.hour))
                .execute(&self.pool)
                .await?;
        stats.rows_deleted += done.rows_affected();
        if !stats.dropped.is_empty() {
            self.tables
                .known_days
                .lock()
                .expect("partition cache")
                .clear();
        }
        Ok(stats)
    }
}

/// Creates the daily and monthly partitions of `days` that are not known to exist.
async fn ensure_days(tables: &Tables<Postgres>, days: &[i64]) -> Result<()> {
    let missing: Vec<i64> = {
        let known = tables.known_days.lock().expect("partition cache");
        days.iter()
            .copied()
            .filter(|d| !known.contains(d))
            .collect()
    };
    for day in missing {
        let (y, m, d) = civil(day);
        let (ny, nm, nd) = civil(day + 86_400_000);
        for table in daily() {
            create_partition(
                &tables.write,
                &format!("{table}_p{y:04}{m:02}{d:02}"),
                table,
                &format!("{y:04}-{m:02}-{d:02}"),
                &format!("{ny:04}-{nm:02}-{nd:02}"),
            )
            .await?;
        }
        let (ey, em) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        for table in MONTHLY {
            create_partition(
                &tables.write,
                &format!("{table}_p{y:04}{m:02}"),
                table,
                &format!("{y:04}-{m:02}-01"),
                &format!("{ey:04}-{em:02}-01"),
            )
            .await?;
        }
        tables
            .known_days
            .lock()
            .expect("partition cache")
            .insert(day);
    }
    Ok(())
}

impl Backend for Postgres {
    fn ensure_days<'a>(
        tables: &'a Tables<Self>,
        days: &'a [i64],
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        ensure_days(tables, days)
    }

    fn replace_rollups<'a>(
        tx: &'a mut sqlx::Transaction<'_, Self>,
        res: crate::Rollups,
        range: NodeRange<'a>,
        r: &'a NodeRollup,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        replace_rollups(tx, res, range.cluster, range.node, range.from, range.to, r)
    }

    fn blocks_per_insert(_table: &raw::RawTable) -> usize {
        1000
    }
}

/// The series fixture's value of a GPU hour rollup column (`fill_hour_rollups`; `g` the
/// GPU's number, `hh` the hour's, `$1` the cluster, `$2` the first hour, `$3` a histogram);
/// None for a column it does not know, which fails the fixture.
fn fixture_value(column: &str) -> Option<&'static str> {
    Some(match column {
        "cluster" => "$1",
        "node" => "'node-' || (g / 8)",
        "gpu_uuid" => "'GPU-bench-' || g",
        "bucket" => "to_timestamp($2 / 1000.0) + make_interval(hours => hh::int)",
        "samples" | "covered_s" | "gpu_util_n" | "mem_used_n" | "power_n" | "temp_n"
        | "alloc_share_sum" | "energy_n" => "3600",
        "gpu_util_sum" => "1782 + (g % 100)",
        "gpu_util_max" => "0.99",
        "gpu_util_hist" => "$3",
        "busy_n" => "3500",
        "mem_used_sum" => "3600.0 * 4e10",
        "mem_used_max" => "5e10::bigint",
        "mem_total_max" => "8e10::bigint",
        "power_sum" | "energy_j" => "3600.0 * 400",
        "power_max" => "650",
        "temp_sum" => "3600 * 55",
        "temp_max" => "70",
        "throttled_n" => "0",
        "sm_active_n" => "3600",
        "sm_active_sum" => "1500 + (g % 50)",
        "sm_occupancy_sum" => "900",
        "tensor_active_sum" => "700",
        "dram_active_sum" => "600",
        // Any other profiling ratio: seen in most seconds, a quarter active.
        c => match model::profiling::RATIOS
            .iter()
            .find_map(|r| c.strip_prefix(r.name)?.strip_prefix('_'))?
        {
            "n" => "3500",
            "sum" => "875",
            "max" => "0.9",
            "hist" => "$3",
            _ => return None,
        },
    })
}
