//! The remote-write journal (migration 0008): each accepted remote-write request's series,
//! kept until their scrapes are stored. One SQL text serves both backends.

/// The journal methods of a backend: `$write`/`$read` name its pools, `$sql` adapts the
/// placeholders.
macro_rules! journal_methods {
    ($write:ident, $read:ident, $sql:path) => {
        /// Journals one request's series (`body`), whose newest sample is at `newest_ts`.
        pub async fn journal_remote_write(
            &self,
            received_ms: i64,
            newest_ts: i64,
            body: &[u8],
        ) -> Result<()> {
            sqlx::query(&$sql(
                "INSERT INTO remote_write_journal (received_ms, newest_ts, body) VALUES (?, ?, ?)",
            ))
            .bind(received_ms)
            .bind(newest_ts)
            .bind(body)
            .execute(&self.$write)
            .await?;
            Ok(())
        }

        /// Each (cluster, node, highest stored sequence) of an agent id's streams.
        pub async fn stream_positions(&self, agent_id: &str) -> Result<Vec<(String, String, i64)>> {
            let rows = sqlx::query(&$sql(
                "SELECT cluster, node, last_seq FROM agent_streams WHERE agent_id = ?",
            ))
            .bind(agent_id)
            .fetch_all(&self.$read)
            .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                .collect()
        }

        /// Every journaled request, oldest first: (received, body).
        pub async fn remote_write_journal(&self) -> Result<Vec<(i64, Vec<u8>)>> {
            let rows =
                sqlx::query("SELECT received_ms, body FROM remote_write_journal ORDER BY id")
                    .fetch_all(&self.$read)
                    .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        }

        /// Deletes the journaled requests whose samples are all older than `waiting_from`
        /// (every one when None); returns how many.
        pub async fn prune_remote_write_journal(&self, waiting_from: Option<i64>) -> Result<u64> {
            let done = match waiting_from {
                Some(t) => {
                    sqlx::query(&$sql(
                        "DELETE FROM remote_write_journal WHERE newest_ts < ?",
                    ))
                    .bind(t)
                    .execute(&self.$write)
                    .await?
                }
                None => {
                    sqlx::query("DELETE FROM remote_write_journal")
                        .execute(&self.$write)
                        .await?
                }
            };
            Ok(done.rows_affected())
        }
    };
}
pub(crate) use journal_methods;
