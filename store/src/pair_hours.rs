//! Interference's pair-hours as the rollup (or, where those do not hold, the analysis) keeps
//! them (migration 0015): each node-hour's victim–aggressor sums, and a mark saying under which
//! thresholds and MIG GPUs and from which hour rollups they were measured. One SQL text serves
//! both backends.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

pub use model::pair_hours::{PairHour, PairHourMark};

/// `SELECT cluster, node, columns FROM table` of the hours in [from, to) of the scope's nodes,
/// in `d`'s SQL: binds from, to (ms) and the scope's two values ([`crate::Scope::binds`]).
pub(crate) fn range_select(
    d: crate::dialect::Dialect,
    columns: &str,
    table: &str,
    scope: crate::Scope<'_>,
) -> String {
    format!(
        "SELECT cluster, node, {columns} FROM {table} WHERE bucket_ms >= {} AND bucket_ms < {} AND {}",
        d.param(1),
        d.param(2),
        scope.condition(d, 3)
    )
}

/// Rows per multi-row INSERT (12 parameters each: SQLite's limit is 32,766 parameters).
pub(crate) const INSERT_ROWS: usize = 500;

pub(crate) const COLUMNS: &str = "gpu_uuid, victim, aggressor, bucket_ms, alone_n, alone_sum, contended_n, contended_sum, contended_first, contended_last";

/// `INSERT INTO pair_hours` of `rows` rows, `?` placeholders.
pub(crate) fn insert_sql(rows: usize) -> String {
    let one = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    format!(
        "INSERT INTO pair_hours (cluster, node, {COLUMNS}) VALUES {}",
        vec![one; rows].join(", ")
    )
}

impl<DB: Db> Tables<DB> {
    /// Hands `visit` the mark of every node's hours in `[from_ms, to_ms)` with its node
    /// (cluster, node, mark), as each row is decoded: a week of a large fleet's marks is
    /// never held at once.
    pub(crate) async fn pair_hour_marks(
        &self,
        scope: crate::Scope<'_>,
        from_ms: i64,
        to_ms: i64,
        visit: &mut (dyn FnMut(&str, &str, &PairHourMark) + Send),
    ) -> Result<()> {
        let columns = "bucket_ms, thresholds, gpu_samples, tenant_samples";
        self.each_in_range(
            columns,
            "pair_hour_marks",
            scope,
            from_ms,
            to_ms,
            &mut |r| {
                let mark = PairHourMark {
                    hour_ms: r.at(2)?,
                    thresholds: r.at(3)?,
                    gpu_samples: r.at(4)?,
                    tenant_samples: r.at(5)?,
                };
                visit(r.text_at(0)?, r.text_at(1)?, &mark);
                Ok(())
            },
        )
        .await
    }

    /// The kept pair-hours of every node in `[from_ms, to_ms)` that `keep` takes (it sees
    /// each row as it is decoded, so what it refuses is never held), in no set order.
    pub(crate) async fn pair_hours(
        &self,
        scope: crate::Scope<'_>,
        from_ms: i64,
        to_ms: i64,
        keep: &mut (dyn FnMut(&PairHour) -> bool + Send),
    ) -> Result<Vec<PairHour>> {
        let count = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        let mut out = Vec::new();
        self.each_in_range(COLUMNS, "pair_hours", scope, from_ms, to_ms, &mut |r| {
            let row = PairHour {
                cluster: r.at(0)?,
                node: r.at(1)?,
                gpu: r.at(2)?,
                victim: r.at(3)?,
                aggressor: r.at(4)?,
                hour: r.at(5)?,
                alone_n: count(r.at(6)?),
                alone_sum: r.at(7)?,
                contended_n: count(r.at(8)?),
                contended_sum: r.at(9)?,
                contended_first: r.at(10)?,
                contended_last: r.at(11)?,
            };
            if keep(&row) {
                out.push(row);
            }
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Hands `visit` each row of `table`'s hours in `[from_ms, to_ms)` of the scope's nodes
    /// (cluster, node, then `columns`) as it is decoded.
    async fn each_in_range(
        &self,
        columns: &str,
        table: &str,
        scope: crate::Scope<'_>,
        from_ms: i64,
        to_ms: i64,
        visit: &mut (dyn FnMut(&DB::Row) -> Result<()> + Send),
    ) -> Result<()> {
        use futures_util::TryStreamExt;
        let sql = range_select(DB::DIALECT, columns, table, scope);
        let (cluster, nodes) = scope.binds(DB::DIALECT);
        let mut rows = stmt::<DB>(&sql)
            .arg(from_ms)
            .arg(to_ms)
            .arg(cluster)
            .arg(nodes)
            .stream(&self.read);
        while let Some(r) = rows.try_next().await? {
            visit(&r)?;
        }
        Ok(())
    }

    /// Keeps a node's pair-hours of the hours `marks` name: each hour's earlier rows and
    /// mark are replaced by `rows` of that hour (rows of other hours are ignored) and its
    /// mark. One transaction.
    pub(crate) async fn keep_pair_hours(
        &self,
        cluster: &str,
        node: &str,
        marks: &[super::pair_hours::PairHourMark],
        rows: &[super::pair_hours::PairHour],
    ) -> Result<()> {
        if marks.is_empty() {
            return Ok(());
        }
        // A node's hours: at most two years' 17,520, within either backend's parameters.
        let hours: std::collections::BTreeSet<i64> = marks.iter().map(|m| m.hour_ms).collect();
        let kept: Vec<&super::pair_hours::PairHour> =
            rows.iter().filter(|r| hours.contains(&r.hour)).collect();
        let mut tx = self.write.begin().await?;
        // What was kept of these hours goes: the marks name a node's hours, one list.
        let list = vec!["?"; hours.len()].join(", ");
        for table in ["pair_hours", "pair_hour_marks"] {
            let sql = DB::DIALECT.numbered(&format!(
                "DELETE FROM {table} WHERE cluster = ? AND node = ? AND bucket_ms IN ({list})"
            ));
            let mut q = stmt::<DB>(&sql).arg(cluster).arg(node);
            for h in &hours {
                q = q.arg(*h);
            }
            q.run(&mut tx).await?;
        }
        for m in marks {
            stmt::<DB>(&DB::DIALECT.numbered(
                "INSERT INTO pair_hour_marks (cluster, node, bucket_ms, thresholds, gpu_samples, tenant_samples) VALUES (?, ?, ?, ?, ?, ?)",
            ))
            .arg(cluster)
            .arg(node)
            .arg(m.hour_ms)
            .arg(&m.thresholds)
            .arg(m.gpu_samples)
            .arg(m.tenant_samples)
            .run(&mut tx)
            .await?;
        }
        for chunk in kept.chunks(super::pair_hours::INSERT_ROWS) {
            let sql = DB::DIALECT.numbered(&super::pair_hours::insert_sql(chunk.len()));
            let mut q = stmt::<DB>(&sql);
            for r in chunk {
                q = q
                    .arg(cluster)
                    .arg(node)
                    .arg(&r.gpu)
                    .arg(&r.victim)
                    .arg(&r.aggressor)
                    .arg(r.hour)
                    .arg(i64::from(r.alone_n))
                    .arg(r.alone_sum)
                    .arg(i64::from(r.contended_n))
                    .arg(r.contended_sum)
                    .arg(r.contended_first)
                    .arg(r.contended_last);
            }
            q.run(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Drops pair-hours and marks of the hours in `[from_ms, to_ms)`; returns the rows
    /// dropped.
    pub(crate) async fn drop_pair_hours(&self, from_ms: i64, to_ms: i64) -> Result<u64> {
        let mut n = 0;
        for table in ["pair_hours", "pair_hour_marks"] {
            n += stmt::<DB>(&DB::DIALECT.numbered(&format!(
                "DELETE FROM {table} WHERE bucket_ms >= ? AND bucket_ms < ?"
            )))
            .arg(from_ms)
            .arg(to_ms)
            .run(&self.write)
            .await?;
        }
        Ok(n)
    }
}
