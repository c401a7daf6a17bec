//! What both backends do the same way to count, chart, roll up and seal a node's samples,
//! written once; what differs (the partitions a range needs, how rollup rows are written) the
//! [`Backend`] answers.

use model::rollup::NodeRollup;

use crate::backend::{Backend, NodeRange};
use crate::db::{StmtExt, Tables, stmt};
use crate::error::Result;
use crate::raw;
use crate::records::TableCounts;
use crate::series::{self, Plan, Series, SeriesQuery};
use crate::span::{self, Span};

impl<DB: Backend> Tables<DB> {
    /// Makes sure the time partitions that rows in [from, to] go to exist.
    pub(crate) async fn ensure_span(&self, from: i64, to: i64) -> Result<()> {
        DB::ensure_days(self, &crate::sql::days_between(from, to)).await
    }

    /// Rows of one of [`crate::raw::NAMES`].
    pub(crate) async fn table_rows(&self, table: &str) -> Result<i64> {
        debug_assert!(crate::raw::NAMES.contains(&table));
        Ok(stmt::<DB>(&format!("SELECT count(*) FROM {table}"))
            .scalar(&self.read)
            .await?)
    }

    pub(crate) async fn counts(&self) -> Result<TableCounts> {
        // One statement, so one snapshot: a seal committing between a count of the hot
        // rows and a count of the sealed blocks would count its rows twice.
        let row = stmt::<DB>(&TableCounts::query(DB::DIALECT))
            .one(&self.read)
            .await?;
        TableCounts::from_row::<DB>(&row)
    }

    pub(crate) async fn series(&self, q: &SeriesQuery, plan: &Plan) -> Result<Series> {
        let (sql, shape) = series::sql(q, plan, DB::DIALECT)?;
        let mut query = stmt::<DB>(&sql);
        for (_, v) in q.entity.filters() {
            query = query.arg(v.to_owned());
        }
        let rows = query.arg(q.from_ms).arg(q.to_ms).all(&self.read).await?;
        let values = crate::sql::series_values::<DB>(&rows, shape)?;
        Ok(series::assemble(q, plan, &values))
    }

    /// Benchmark fixture: replaces the rollups of width `res` of a node over [from, to) with
    /// rows computed elsewhere.
    pub(crate) async fn write_rollups(
        &self,
        res: crate::Rollups,
        cluster: &str,
        node: &str,
        from: i64,
        to: i64,
        r: &NodeRollup,
    ) -> Result<()> {
        self.ensure_span(from, to).await?;
        let mut tx = self.write.begin().await?;
        let range = NodeRange {
            cluster,
            node,
            from,
            to,
        };
        DB::replace_rollups(&mut tx, res, range, r).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn rollup_span(
        &self,
        cluster: &str,
        node: &str,
        from: i64,
        to: i64,
    ) -> Result<span::SpanStats> {
        self.ensure_span(from, to).await?;
        let mut tx = self.write.begin().await?;
        let span = Span {
            cluster,
            node,
            from,
            to,
        };
        let stats = span::roll_up(&mut tx, span).await?;
        tx.commit().await?;
        Ok(stats)
    }

    /// The node's oldest hot sample older than `cutoff`, over the tables that seal.
    pub(crate) async fn oldest_hot(
        &self,
        cluster: &str,
        node: &str,
        gpus: &[String],
        cutoff: i64,
    ) -> Result<Option<i64>> {
        let gpus = DB::list(gpus);
        let mut oldest: Option<i64> = None;
        for t in raw::TABLES {
            let v: Option<i64> = stmt::<DB>(&raw::oldest_sql(t, DB::DIALECT))
                .arg(cluster)
                .arg(node)
                .arg(&gpus)
                .arg(cutoff)
                .scalar(&self.read)
                .await?;
            oldest = match (oldest, v) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(oldest)
    }

    /// Seals one node's hot rows older than `cutoff` (a block start) in one transaction.
    pub(crate) async fn seal_node(
        &self,
        cluster: &str,
        node: &str,
        gpus: &[String],
        cutoff: i64,
    ) -> Result<u64> {
        let gpus = DB::list(gpus);
        let mut tx = self.write.begin().await?;
        let mut sealed = 0;
        for t in raw::TABLES {
            let rows = stmt::<DB>(&raw::take_sql(t, DB::DIALECT))
                .arg(cluster)
                .arg(node)
                .arg(&gpus)
                .arg(cutoff)
                .all(&mut tx)
                .await?;
            let taken = raw::taken::<DB>(t, &rows)?;
            sealed += taken.len() as u64;
            let blocks = raw::seal(t, taken);
            let starts = blocks.iter().map(|b| b.start);
            if let (Some(first), Some(last)) = (starts.clone().min(), starts.max()) {
                self.ensure_span(first, last).await?;
            }
            for chunk in blocks.chunks(DB::blocks_per_insert(t)) {
                let sql = raw::insert_sql(t, DB::DIALECT, chunk.len());
                raw::bind_blocks(stmt::<DB>(&sql), chunk)
                    .run(&mut tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(sealed)
    }
}
