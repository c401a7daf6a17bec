//! The remote-write journal (migration 0008): each accepted remote-write request's series,
//! kept until their scrapes are stored. One SQL text serves both backends.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

impl<DB: Db> Tables<DB> {
    /// Journals one request's series (`body`), whose newest sample is at `newest_ts`.
    pub(crate) async fn journal_remote_write(
        &self,
        received_ms: i64,
        newest_ts: i64,
        body: &[u8],
    ) -> Result<()> {
        stmt::<DB>(&DB::DIALECT.numbered(
            "INSERT INTO remote_write_journal (received_ms, newest_ts, body) VALUES (?, ?, ?)",
        ))
        .arg(received_ms)
        .arg(newest_ts)
        .arg(body)
        .run(&self.write)
        .await?;
        Ok(())
    }

    /// Each (cluster, node, highest stored sequence) of an agent id's streams.
    pub(crate) async fn stream_positions(
        &self,
        agent_id: &str,
    ) -> Result<Vec<(String, String, i64)>> {
        let rows = stmt::<DB>(
            &DB::DIALECT
                .numbered("SELECT cluster, node, last_seq FROM agent_streams WHERE agent_id = ?"),
        )
        .arg(agent_id)
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok((r.at(0)?, r.at(1)?, r.at(2)?)))
            .collect()
    }

    /// Every journaled request, oldest first: (received, body).
    pub(crate) async fn remote_write_journal(&self) -> Result<Vec<(i64, Vec<u8>)>> {
        let rows = stmt::<DB>("SELECT received_ms, body FROM remote_write_journal ORDER BY id")
            .all(&self.read)
            .await?;
        rows.iter().map(|r| Ok((r.at(0)?, r.at(1)?))).collect()
    }

    /// Deletes the journaled requests whose samples are all older than `waiting_from`
    /// (every one when None); returns how many.
    pub(crate) async fn prune_remote_write_journal(
        &self,
        waiting_from: Option<i64>,
    ) -> Result<u64> {
        let done = match waiting_from {
            Some(t) => {
                stmt::<DB>(
                    &DB::DIALECT.numbered("DELETE FROM remote_write_journal WHERE newest_ts < ?"),
                )
                .arg(t)
                .run(&self.write)
                .await?
            }
            None => {
                stmt::<DB>("DELETE FROM remote_write_journal")
                    .run(&self.write)
                    .await?
            }
        };
        Ok(done)
    }
}
