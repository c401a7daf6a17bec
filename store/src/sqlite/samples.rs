//! Writing a batch's samples on SQLite: multi-row INSERTs, one per raw table, sized to the
//! bind-parameter limit.

use model::wire::v1::Batch;
use sqlx::{QueryBuilder, Sqlite};

use crate::error::Result;
use crate::raw;

/// SQLite's default limit on bind parameters per statement is 32766.
pub(super) const MAX_BINDS: usize = 32_000;

/// Inserts `items` with multi-row INSERTs (`head` is `INSERT INTO t (columns) `), as many
/// rows per statement as SQLite's bind limit allows for that many columns. Returns the rows
/// inserted.
pub(super) async fn insert_rows<'a, T>(
    tx: &mut sqlx::SqliteConnection,
    head: impl Into<String>,
    tail: &str,
    items: &'a [T],
    mut bind: impl FnMut(sqlx::query_builder::Separated<'_, 'a, Sqlite, &'static str>, &'a T),
) -> Result<u64> {
    let head = head.into();
    let columns = head
        .split_once('(')
        .map_or(1, |(_, cols)| cols.matches(',').count() + 1);
    let mut rows = 0;
    for chunk in items.chunks((MAX_BINDS / columns).max(1)) {
        let mut q = QueryBuilder::<Sqlite>::new(head.as_str());
        q.push_values(chunk, &mut bind);
        q.push(tail);
        rows += q.build().execute(&mut *tx).await?.rows_affected();
    }
    Ok(rows)
}

/// `INSERT INTO t (columns) ` for a raw table, its columns in the order of `raw::columns`
/// (identity, `ts`, values), which every writer below binds in.
fn insert_into(t: &raw::RawTable) -> String {
    format!("INSERT INTO {} ({}) ", t.hot, raw::columns(t))
}

/// A batch's samples and events, one multi-row INSERT per raw table.
pub(super) async fn insert_samples(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    b: &Batch,
) -> Result<u64> {
    let mut rows = 0u64;
    rows += insert_gpu_samples(tx, b).await?;
    rows += insert_mig_samples(tx, b).await?;
    rows += insert_process_samples(tx, b).await?;
    rows += insert_allocation_samples(tx, b).await?;
    rows += insert_gpu_events(tx, b).await?;
    Ok(rows)
}

async fn insert_gpu_samples(tx: &mut sqlx::Transaction<'_, Sqlite>, b: &Batch) -> Result<u64> {
    let (c, n, iv) = (&b.cluster, &b.node, i64::from(b.interval_ms));
    let gpus: Vec<_> = b
        .snapshots
        .iter()
        .flat_map(|s| s.gpus.iter().map(move |g| (s.ts, g)))
        .collect();
    insert_rows(
        &mut *tx,
        insert_into(&raw::GPU),
        "",
        &gpus,
        |mut r, (ts, g)| {
            r.push_bind(c.clone())
                .push_bind(n.clone())
                .push_bind(g.gpu_uuid.clone())
                .push_bind(*ts)
                .push_bind(iv)
                .push_bind(g.gpu_util)
                .push_bind(g.mem_util)
                .push_bind(g.mem_used_bytes)
                .push_bind(g.mem_total_bytes)
                .push_bind(g.power_w)
                .push_bind(g.energy_j)
                .push_bind(g.temp_c)
                .push_bind(g.sm_clock_mhz)
                .push_bind(g.mem_clock_mhz)
                .push_bind(g.throttle_reasons)
                .push_bind(g.pcie_rx_bytes_per_s)
                .push_bind(g.pcie_tx_bytes_per_s)
                .push_bind(g.nvlink_rx_bytes_per_s)
                .push_bind(g.nvlink_tx_bytes_per_s)
                .push_bind(g.ecc_corrected)
                .push_bind(g.ecc_uncorrected)
                .push_bind(g.retired_pages)
                .push_bind(g.remapped_rows)
                .push_bind(g.enc_util)
                .push_bind(g.dec_util)
                .push_bind(g.sm_active)
                .push_bind(g.sm_occupancy)
                .push_bind(g.dram_active)
                .push_bind(g.tensor_active)
                .push_bind(g.gr_engine_active);
        },
    )
    .await
}

async fn insert_mig_samples(tx: &mut sqlx::Transaction<'_, Sqlite>, b: &Batch) -> Result<u64> {
    let (c, n) = (&b.cluster, &b.node);
    let migs: Vec<_> = b
        .snapshots
        .iter()
        .flat_map(|s| s.mig.iter().map(move |m| (s.ts, m)))
        .collect();
    insert_rows(
        &mut *tx,
        insert_into(&raw::MIG),
        "",
        &migs,
        |mut r, (ts, m)| {
            r.push_bind(c.clone())
                .push_bind(n.clone())
                .push_bind(m.gpu_uuid.clone())
                .push_bind(i64::from(m.gi_id))
                .push_bind(i64::from(m.ci_id))
                .push_bind(*ts)
                .push_bind(m.mem_used_bytes)
                .push_bind(m.mem_total_bytes)
                .push_bind(m.sm_active)
                .push_bind(m.sm_occupancy)
                .push_bind(m.dram_active)
                .push_bind(m.tensor_active)
                .push_bind(m.gr_engine_active);
        },
    )
    .await
}

async fn insert_process_samples(tx: &mut sqlx::Transaction<'_, Sqlite>, b: &Batch) -> Result<u64> {
    let (c, n) = (&b.cluster, &b.node);
    let procs: Vec<_> = b
        .snapshots
        .iter()
        .flat_map(|s| s.processes.iter().map(move |p| (s.ts, p)))
        .collect();
    insert_rows(
        &mut *tx,
        insert_into(&raw::PROCESS),
        "",
        &procs,
        |mut r, (ts, p)| {
            r.push_bind(c.clone())
                .push_bind(n.clone())
                .push_bind(p.gpu_uuid.clone())
                .push_bind(i64::from(p.pid))
                .push_bind(p.start_time)
                .push_bind(p.kind.as_str())
                .push_bind(p.gi_id.map(i64::from))
                .push_bind(p.ci_id.map(i64::from))
                .push_bind(p.tenant.clone())
                .push_bind(*ts)
                .push_bind(p.sm_util)
                .push_bind(p.mem_util)
                .push_bind(p.enc_util)
                .push_bind(p.dec_util)
                .push_bind(p.mem_used_bytes);
        },
    )
    .await
}

async fn insert_allocation_samples(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    b: &Batch,
) -> Result<u64> {
    let (c, n) = (&b.cluster, &b.node);
    let allocs: Vec<_> = b
        .snapshots
        .iter()
        .flat_map(|s| s.allocations.iter().map(move |a| (s.ts, a)))
        .collect();
    insert_rows(
        &mut *tx,
        insert_into(&raw::ALLOCATION),
        "",
        &allocs,
        |mut r, (ts, a)| {
            r.push_bind(c.clone())
                .push_bind(n.clone())
                .push_bind(a.gpu_uuid.clone())
                .push_bind(a.tenant.clone())
                .push_bind(a.gi_id.map(i64::from))
                .push_bind(a.ci_id.map(i64::from))
                .push_bind(a.replica.map(i64::from))
                .push_bind(*ts)
                .push_bind(a.share);
        },
    )
    .await
}

async fn insert_gpu_events(tx: &mut sqlx::Transaction<'_, Sqlite>, b: &Batch) -> Result<u64> {
    let (c, n) = (&b.cluster, &b.node);
    let events: Vec<_> = b.snapshots.iter().flat_map(|s| s.events.iter()).collect();
    insert_rows(
        &mut *tx,
        format!("INSERT INTO {} ({}) ", raw::EVENTS, raw::EVENT_COLUMNS),
        "",
        &events,
        |mut r, e| {
            r.push_bind(c.clone())
                .push_bind(n.clone())
                .push_bind(e.gpu_uuid.clone())
                .push_bind(e.ts)
                .push_bind(e.kind.clone())
                .push_bind(e.code)
                .push_bind(e.message.clone());
        },
    )
    .await
}
