//! What both backends do the same way to count, chart, roll up and seal a node's samples,
//! written once ([`node_upkeep_methods!`]): each expands in a backend's `impl` beside that
//! backend's own `ensure_span` (PostgreSQL makes the day partitions a range needs; SQLite has
//! none), `replace_rollups` and the `span` primitives.

/// A backend's counting, series, rollup and sealing methods: `$write`/`$read` name its pools,
/// `$d` its dialect, `$gpus` turns a node's GPU list into the bind value its SQL takes (an array
/// on PostgreSQL, a JSON text on SQLite), `$per_insert` how many sealed blocks of a table one
/// INSERT takes.
macro_rules! node_upkeep_methods {
    ($write:ident, $read:ident, $d:expr, gpus: $gpus:expr, per_insert: $per_insert:expr) => {
        /// Rows of one of [`crate::raw::NAMES`].
        pub async fn table_rows(&self, table: &str) -> Result<i64> {
            debug_assert!(crate::raw::NAMES.contains(&table));
            Ok(sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&self.$read)
                .await?)
        }

        pub async fn counts(&self) -> Result<TableCounts> {
            // One statement, so one snapshot: a seal committing between a count of the hot
            // rows and a count of the sealed blocks would count its rows twice.
            let row = sqlx::query(&TableCounts::query($d))
                .fetch_one(&self.$read)
                .await?;
            TableCounts::from_row(&row)
        }

        pub async fn series(&self, q: &SeriesQuery, plan: &Plan) -> Result<Series> {
            let (sql, shape) = series::sql(q, plan, $d)?;
            let mut query = sqlx::query(&sql);
            for (_, v) in q.entity.filters() {
                query = query.bind(v.to_owned());
            }
            let rows = query
                .bind(q.from_ms)
                .bind(q.to_ms)
                .fetch_all(&self.$read)
                .await?;
            let values = crate::sql::series_values!(&rows, shape);
            Ok(series::assemble(q, plan, &values))
        }

        /// Benchmark fixture: replaces the rollups of width `res` of a node over [from, to) with
        /// rows computed elsewhere.
        pub async fn write_rollups(
            &self,
            res: crate::Rollups,
            cluster: &str,
            node: &str,
            from: i64,
            to: i64,
            r: &NodeRollup,
        ) -> Result<()> {
            self.ensure_span(from, to).await?;
            let mut tx = self.$write.begin().await?;
            replace_rollups(&mut tx, res, cluster, node, from, to, r).await?;
            tx.commit().await?;
            Ok(())
        }

        pub async fn rollup_span(
            &self,
            cluster: &str,
            node: &str,
            from: i64,
            to: i64,
        ) -> Result<span::SpanStats> {
            self.ensure_span(from, to).await?;
            let mut tx = self.$write.begin().await?;
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
        pub async fn oldest_hot(
            &self,
            cluster: &str,
            node: &str,
            gpus: &[String],
            cutoff: i64,
        ) -> Result<Option<i64>> {
            let gpus = $gpus(gpus);
            let mut oldest: Option<i64> = None;
            for t in raw::TABLES {
                let v: Option<i64> = sqlx::query_scalar(&raw::oldest_sql(t, $d))
                    .bind(cluster)
                    .bind(node)
                    .bind(&gpus)
                    .bind(cutoff)
                    .fetch_one(&self.$read)
                    .await?;
                oldest = match (oldest, v) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            Ok(oldest)
        }

        /// Seals one node's hot rows older than `cutoff` (a block start) in one transaction.
        pub async fn seal_node(
            &self,
            cluster: &str,
            node: &str,
            gpus: &[String],
            cutoff: i64,
        ) -> Result<u64> {
            let gpus = $gpus(gpus);
            let mut tx = self.$write.begin().await?;
            let mut sealed = 0;
            for t in raw::TABLES {
                let rows = sqlx::query(&raw::take_sql(t, $d))
                    .bind(cluster)
                    .bind(node)
                    .bind(&gpus)
                    .bind(cutoff)
                    .fetch_all(&mut *tx)
                    .await?;
                let taken = raw::taken!(t, rows);
                sealed += taken.len() as u64;
                let blocks = raw::seal(t, taken);
                let starts = blocks.iter().map(|b| b.start);
                if let (Some(first), Some(last)) = (starts.clone().min(), starts.max()) {
                    self.ensure_span(first, last).await?;
                }
                for chunk in blocks.chunks($per_insert(t)) {
                    let sql = raw::insert_sql(t, $d, chunk.len());
                    raw::bind_blocks(sqlx::query(&sql), chunk)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
            Ok(sealed)
        }
    };
}

pub(crate) use node_upkeep_methods;
