//! Citus: the same schema spread over a coordinator and workers. When the database has the
//! citus extension, migrating also distributes the tables (idempotently, so tables a later
//! migration adds are distributed by the next `gpulens migrate`):
//!
//! - every table keyed by (cluster, node) is hash-distributed by `node`, all colocated, so a
//!   node's inventory, samples, rollups and stream positions live in the same shard group and
//!   every join and aggregate that carries `node` runs on one worker;
//! - the small fleet-wide tables (analysis runs, alerts, label actions, reports, the remote
//!   write journal, the fleet's hourly totals, waiting work, reclaim cases) become reference tables, copied to every node.
//!
//! Partitions created later (`CREATE TABLE … PARTITION OF`) inherit their parent's
//! distribution, and retention's `DROP TABLE` of a partition drops its shards.

use sqlx::PgConnection;

use crate::error::{Result, StoreError};

/// Tables distributed by `node`, colocated with the first: the inventory, every raw table, the
/// rollup queue and the per-node rollups.
pub fn by_node() -> impl Iterator<Item = &'static str> {
    ["nodes", "agent_streams", "gpus", "mig_instances", "tenants"]
        .into_iter()
        .chain(crate::raw::NAMES)
        .chain([
            "rollup_pending",
            "gpu_rollup_1m",
            "gpu_rollup_1h",
            "tenant_rollup_1m",
            "tenant_rollup_1h",
            "pair_hour_marks",
            "pair_hours",
        ])
}

/// Fleet-wide tables copied to every node.
pub const REFERENCE: [&str; 15] = [
    "cluster_rollup_1h",
    "use_rollup_1h",
    "analysis_runs",
    "label_actions",
    "label_action_steps",
    "alerts",
    "alert_notifications",
    "alert_attempts",
    "reports",
    "remote_write_journal",
    "secrets",
    "waiting_work",
    "reclaim_cases",
    "reclaim_steps",
    "node_mechanisms",
];

/// How many active workers the coordinator's cluster has, or `None` when the database does
/// not have the citus extension.
pub async fn workers(conn: &mut PgConnection) -> Result<Option<usize>> {
    if !installed(&mut *conn).await? {
        return Ok(None);
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM citus_get_active_worker_nodes()")
        .fetch_one(conn)
        .await?;
    Ok(Some(usize::try_from(n).unwrap_or(0)))
}

/// Whether the connected database has the citus extension.
pub async fn installed(conn: &mut PgConnection) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
    )
    .fetch_one(conn)
    .await?)
}

/// Distributes whatever is not distributed yet; returns what it did, one line per table.
pub async fn distribute(conn: &mut PgConnection) -> Result<Vec<String>> {
    let done: Vec<String> =
        sqlx::query_scalar("SELECT logicalrelid::regclass::text FROM pg_dist_partition")
            .fetch_all(&mut *conn)
            .await?;
    let mut out = Vec::new();
    let first = by_node().next().expect("a table distributed by node");
    for table in by_node() {
        if done.iter().any(|d| d == table) {
            continue;
        }
        let colocate = if table == first { "none" } else { first };
        sqlx::query("SELECT create_distributed_table($1, 'node', colocate_with => $2)")
            .bind(table)
            .bind(colocate)
            .execute(&mut *conn)
            .await?;
        out.push(format!("citus: {table} distributed by node"));
    }
    for table in REFERENCE {
        if done.iter().any(|d| d == table) {
            continue;
        }
        sqlx::query("SELECT create_reference_table($1)")
            .bind(table)
            .execute(&mut *conn)
            .await?;
        out.push(format!(
            "citus: {table} copied to every node (reference table)"
        ));
    }
    Ok(out)
}

/// Creates the extension when it is missing; a server without Citus is told in words.
pub async fn require(conn: &mut PgConnection) -> Result<()> {
    if installed(conn).await? {
        return Ok(());
    }
    let loaded: String = sqlx::query_scalar("SELECT current_setting('shared_preload_libraries')")
        .fetch_one(&mut *conn)
        .await?;
    if !loaded.split(',').any(|l| l.trim() == "citus") {
        return Err(StoreError::BadRequest(format!(
            "this PostgreSQL server does not load Citus (shared_preload_libraries = '{loaded}'): \
             install Citus, add citus to shared_preload_libraries, restart, and add the workers \
             (docs/deploy.md, \"Past one server\")"
        )));
    }
    sqlx::raw_sql("CREATE EXTENSION citus")
        .execute(&mut *conn)
        .await?;
    Ok(())
}
