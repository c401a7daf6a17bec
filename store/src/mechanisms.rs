//! Per-GPU sharing mechanisms seen in place on each node (migration 0016), written by the
//! collector's demand poll and read by the analysis. One SQL text serves both backends.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

/// Most rows one read returns.
pub const MAX_MECHANISM_ROWS: i64 = 100_000;

/// A mechanism seen on a node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeMechanism {
    pub cluster: String,
    pub node: String,
    /// The mechanism's snake_case name (`dra_consumable_capacity`, `hami`, …).
    pub mechanism: String,
    /// The poll that saw it.
    pub seen_ms: i64,
}

impl<DB: Db> Tables<DB> {
    /// Replaces what `cluster`'s nodes were seen to have with `seen` (node, mechanism),
    /// seen at `seen_ms`. One transaction.
    pub(crate) async fn record_mechanisms(
        &self,
        cluster: &str,
        seen: &[(String, String)],
        seen_ms: i64,
    ) -> Result<()> {
        let mut tx = self.write.begin().await?;
        stmt::<DB>(&DB::DIALECT.numbered("DELETE FROM node_mechanisms WHERE cluster = ?"))
            .arg(cluster)
            .run(&mut tx)
            .await?;
        let insert = DB::DIALECT.numbered(
            "INSERT INTO node_mechanisms (cluster, node, mechanism, seen_ms) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        );
        for (node, mechanism) in seen {
            stmt::<DB>(&insert)
                .arg(cluster)
                .arg(node)
                .arg(mechanism)
                .arg(seen_ms)
                .run(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every mechanism seen on a node, by cluster and node, at most
    /// [`super::mechanisms::MAX_MECHANISM_ROWS`].
    pub(crate) async fn node_mechanisms(&self) -> Result<Vec<super::mechanisms::NodeMechanism>> {
        let rows = stmt::<DB>(&DB::DIALECT.numbered(
            "SELECT cluster, node, mechanism, seen_ms FROM node_mechanisms ORDER BY cluster, node, mechanism LIMIT ?",
        ))
        .arg(super::mechanisms::MAX_MECHANISM_ROWS)
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(super::mechanisms::NodeMechanism {
                    cluster: r.at(0)?,
                    node: r.at(1)?,
                    mechanism: r.at(2)?,
                    seen_ms: r.at(3)?,
                })
            })
            .collect()
    }
}
