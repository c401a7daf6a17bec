//! One rollup span, written once for both backends: inside one transaction, clear the span's
//! pending marks, read its raw rows, aggregate them into minute rollups, replace the span's
//! minutes, and re-merge the hour that holds it from all of that hour's minutes (read back,
//! unless the span is the whole hour). The primitives ([`SpanTx`]) run on either backend's
//! transaction; how rollup rows are written is the backend's ([`Backend`]).

use model::rollup::{self, NodeRollup};

use super::raw::{self, RawTable, Record};

use crate::backend::Backend;
use crate::db::{On, StmtExt, stmt};
use crate::error::Result;

/// A node's minutes [from, to), inside one hour.
pub(crate) use crate::backend::NodeRange as Span;

/// What a backend's open transaction offers a rollup span. The raw reader skips blocks that do
/// not decode and counts them in `undecodable`.
pub(crate) trait SpanTx {
    async fn clear_pending(&mut self, s: Span<'_>) -> Result<()>;
    /// The node's samples of [from, to) in `t`, hot rows and sealed blocks.
    async fn raw(
        &mut self,
        t: &'static RawTable,
        s: Span<'_>,
        undecodable: &mut usize,
    ) -> Result<Vec<Record>>;
    /// Replaces the node's rollups at `res` (`1m` or `1h`) in [from, to) with `r`.
    async fn replace_rollups(
        &mut self,
        res: crate::Rollups,
        s: Span<'_>,
        r: &NodeRollup,
    ) -> Result<()>;
    /// The node's rollups at `res` in [from, to).
    async fn read_rollups(&mut self, res: crate::Rollups, s: Span<'_>) -> Result<NodeRollup>;
}

/// What a span wrote: GPU minute rows, tenant minute rows, and raw rows skipped; and, when two
/// or more tenants were on one of the node's GPUs in the span's hour, that hour's minute and
/// hour rollups (what its pair-hours are measured from, after the span commits).
pub(crate) struct SpanStats {
    pub gpu_rows: usize,
    pub tenant_rows: usize,
    pub undecodable: usize,
    pub shared_hour: Option<(NodeRollup, NodeRollup)>,
}

/// Rolls one span up inside `tx` (the caller commits).
pub(crate) async fn roll_up(tx: &mut impl SpanTx, s: Span<'_>) -> Result<SpanStats> {
    tx.clear_pending(s).await?;
    let mut undecodable = 0;
    let gpus = raw::gpus(&tx.raw(&raw::GPU, s, &mut undecodable).await?);
    let allocs = raw::allocations(&tx.raw(&raw::ALLOCATION, s, &mut undecodable).await?);
    let procs = raw::processes(&tx.raw(&raw::PROCESS, s, &mut undecodable).await?);
    let mig = raw::mig(&tx.raw(&raw::MIG, s, &mut undecodable).await?);
    let minutes = rollup::aggregate(rollup::MINUTE_MS, &gpus, &allocs, &procs, &mig);
    tx.replace_rollups(crate::Rollups::Minute, s, &minutes)
        .await?;
    let from = rollup::bucket_of(s.from, rollup::HOUR_MS);
    let hour = Span {
        from,
        to: from + rollup::HOUR_MS,
        ..s
    };
    // A span that is its whole hour (a backlog, a backfill) has just written every minute of
    // it: the hour merges from those, without reading them back.
    let (gpu_rows, tenant_rows) = (minutes.gpus.len(), minutes.tenants.len());
    let all_minutes = if (s.from, s.to) == (hour.from, hour.to) {
        minutes
    } else {
        tx.read_rollups(crate::Rollups::Minute, hour).await?
    };
    let hours = rollup::to_hours(&all_minutes);
    tx.replace_rollups(crate::Rollups::Hour, hour, &hours)
        .await?;
    let shared = model::pair_hours::shares_a_gpu(&hours);
    Ok(SpanStats {
        gpu_rows,
        tenant_rows,
        undecodable,
        shared_hour: shared.then_some((all_minutes, hours)),
    })
}

impl<DB: Backend> SpanTx for sqlx::Transaction<'_, DB> {
    async fn clear_pending(&mut self, s: Span<'_>) -> Result<()> {
        let d = DB::DIALECT;
        let sql = format!(
            "DELETE FROM rollup_pending WHERE cluster = {} AND node = {} AND bucket >= {} AND bucket < {}",
            d.param(1),
            d.param(2),
            d.time_param(3),
            d.time_param(4)
        );
        stmt::<DB>(&sql)
            .arg(s.cluster)
            .arg(s.node)
            .arg(s.from)
            .arg(s.to)
            .run(&mut *self)
            .await?;
        Ok(())
    }

    async fn raw(
        &mut self,
        t: &'static RawTable,
        s: Span<'_>,
        undecodable: &mut usize,
    ) -> Result<Vec<Record>> {
        let filter = raw::Filter::node(s.cluster, s.node);
        raw::records::<DB>(
            On::Conn(&mut **self),
            t,
            &filter,
            (s.from, s.to),
            undecodable,
        )
        .await
    }

    async fn replace_rollups(
        &mut self,
        res: crate::Rollups,
        s: Span<'_>,
        r: &NodeRollup,
    ) -> Result<()> {
        DB::replace_rollups(self, res, s, r).await
    }

    async fn read_rollups(&mut self, res: crate::Rollups, s: Span<'_>) -> Result<NodeRollup> {
        crate::rollup_reads::read_rollups::<DB>(&mut **self, res, s.cluster, s.node, s.from, s.to)
            .await
    }
}
