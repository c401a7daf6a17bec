//! One rollup span, written once for both backends: inside one transaction, clear the span's
//! pending marks, read its raw rows, aggregate them into minute rollups, replace the span's
//! minutes, and re-merge the hour that holds it from all of that hour's minutes. A backend
//! supplies only the primitives ([`SpanTx`]), which differ in SQL and nothing else.

use model::rollup::{self, NodeRollup, RawAllocation, RawGpu, RawMig, RawProcess};

use super::Result;

/// A node's minutes [from, to), inside one hour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<'a> {
    pub cluster: &'a str,
    pub node: &'a str,
    pub from: i64,
    pub to: i64,
}

/// The raw tables a span reads, with the columns after `gpu_uuid, ts` that the
/// `raw_*!` decoders read by position.
pub(crate) const RAW_GPUS: (&str, &str) = ("gpu_samples", super::RAW_GPU_COLUMNS);
pub(crate) const RAW_ALLOCATIONS: (&str, &str) = ("allocation_samples", "tenant_key, gi_id, share");
pub(crate) const RAW_PROCESSES: (&str, &str) = (
    "process_samples",
    "tenant_key, gi_id, sm_util, mem_used_bytes",
);
pub(crate) const RAW_MIG: (&str, &str) = ("mig_samples", "gi_id, sm_active");

/// What a backend's open transaction offers a rollup span. Raw readers skip rows that do not
/// decode and count them in `undecodable` (see [`super::decodable`]).
pub(crate) trait SpanTx {
    async fn clear_pending(&mut self, s: Span<'_>) -> Result<()>;
    async fn raw_gpus(&mut self, s: Span<'_>, undecodable: &mut usize) -> Result<Vec<RawGpu>>;
    async fn raw_allocations(
        &mut self,
        s: Span<'_>,
        undecodable: &mut usize,
    ) -> Result<Vec<RawAllocation>>;
    async fn raw_processes(
        &mut self,
        s: Span<'_>,
        undecodable: &mut usize,
    ) -> Result<Vec<RawProcess>>;
    async fn raw_mig(&mut self, s: Span<'_>, undecodable: &mut usize) -> Result<Vec<RawMig>>;
    /// Replaces the node's rollups at `res` (`1m` or `1h`) in [from, to) with `r`.
    async fn replace_rollups(&mut self, res: &str, s: Span<'_>, r: &NodeRollup) -> Result<()>;
    /// The node's rollups at `res` in [from, to).
    async fn read_rollups(&mut self, res: &str, s: Span<'_>) -> Result<NodeRollup>;
}

/// What one span wrote: GPU minute rows, tenant minute rows, and raw rows skipped.
pub(crate) type SpanStats = (usize, usize, usize);

/// Rolls one span up inside `tx` (the caller commits).
pub(crate) async fn roll_up(tx: &mut impl SpanTx, s: Span<'_>) -> Result<SpanStats> {
    tx.clear_pending(s).await?;
    let mut undecodable = 0;
    let gpus = tx.raw_gpus(s, &mut undecodable).await?;
    let allocs = tx.raw_allocations(s, &mut undecodable).await?;
    let procs = tx.raw_processes(s, &mut undecodable).await?;
    let mig = tx.raw_mig(s, &mut undecodable).await?;
    let minutes = rollup::aggregate(rollup::MINUTE_MS, &gpus, &allocs, &procs, &mig);
    tx.replace_rollups("1m", s, &minutes).await?;
    let from = rollup::bucket_of(s.from, rollup::HOUR_MS);
    let hour = Span {
        from,
        to: from + rollup::HOUR_MS,
        ..s
    };
    let all_minutes = tx.read_rollups("1m", hour).await?;
    tx.replace_rollups("1h", hour, &rollup::to_hours(&all_minutes))
        .await?;
    Ok((minutes.gpus.len(), minutes.tenants.len(), undecodable))
}

/// Implements [`SpanTx`] for a backend's transactions: `$db` is its sqlx database, and
/// `$clear_pending` its SQL deleting a span's pending marks (cluster, node, from, to). The
/// backend module supplies `raw_rows`, `replace_rollups` and `read_rollups`, its SQL.
macro_rules! span_tx {
    ($db:ty, $clear_pending:expr) => {
        impl $crate::span::SpanTx for sqlx::Transaction<'_, $db> {
            async fn clear_pending(&mut self, s: $crate::span::Span<'_>) -> Result<()> {
                sqlx::query($clear_pending)
                    .bind(s.cluster)
                    .bind(s.node)
                    .bind(s.from)
                    .bind(s.to)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }

            async fn raw_gpus(
                &mut self,
                s: $crate::span::Span<'_>,
                undecodable: &mut usize,
            ) -> Result<Vec<$crate::rollup::RawGpu>> {
                raw_rows(
                    self,
                    $crate::span::RAW_GPUS,
                    s,
                    |r| $crate::raw_gpu!(r),
                    undecodable,
                )
                .await
            }

            async fn raw_allocations(
                &mut self,
                s: $crate::span::Span<'_>,
                undecodable: &mut usize,
            ) -> Result<Vec<$crate::rollup::RawAllocation>> {
                raw_rows(
                    self,
                    $crate::span::RAW_ALLOCATIONS,
                    s,
                    |r| $crate::raw_allocation!(r),
                    undecodable,
                )
                .await
            }

            async fn raw_processes(
                &mut self,
                s: $crate::span::Span<'_>,
                undecodable: &mut usize,
            ) -> Result<Vec<$crate::rollup::RawProcess>> {
                raw_rows(
                    self,
                    $crate::span::RAW_PROCESSES,
                    s,
                    |r| $crate::raw_process!(r),
                    undecodable,
                )
                .await
            }

            async fn raw_mig(
                &mut self,
                s: $crate::span::Span<'_>,
                undecodable: &mut usize,
            ) -> Result<Vec<$crate::rollup::RawMig>> {
                raw_rows(
                    self,
                    $crate::span::RAW_MIG,
                    s,
                    |r| $crate::raw_mig!(r),
                    undecodable,
                )
                .await
            }

            async fn replace_rollups(
                &mut self,
                res: &str,
                s: $crate::span::Span<'_>,
                r: &$crate::rollup::NodeRollup,
            ) -> Result<()> {
                replace_rollups(self, res, s.cluster, s.node, s.from, s.to, r).await
            }

            async fn read_rollups(
                &mut self,
                res: &str,
                s: $crate::span::Span<'_>,
            ) -> Result<$crate::rollup::NodeRollup> {
                read_rollups(self, res, s.cluster, s.node, s.from, s.to).await
            }
        }
    };
}
pub(crate) use span_tx;
