//! Per-GPU sharing mechanisms seen in place on each node (migration 0016), written by the
//! collector's demand poll and read by the analysis. One SQL text serves both backends.

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

/// The node-mechanism methods of a backend.
macro_rules! mechanism_methods {
    ($write:ident, $read:ident, $sql:path) => {
        /// Replaces what `cluster`'s nodes were seen to have with `seen` (node, mechanism),
        /// seen at `seen_ms`. One transaction.
        pub async fn record_mechanisms(
            &self,
            cluster: &str,
            seen: &[(String, String)],
            seen_ms: i64,
        ) -> Result<()> {
            let mut tx = self.$write.begin().await?;
            sqlx::query(&$sql("DELETE FROM node_mechanisms WHERE cluster = ?"))
                .bind(cluster)
                .execute(&mut *tx)
                .await?;
            let insert = $sql(
                "INSERT INTO node_mechanisms (cluster, node, mechanism, seen_ms) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            );
            for (node, mechanism) in seen {
                sqlx::query(&insert)
                    .bind(cluster)
                    .bind(node)
                    .bind(mechanism)
                    .bind(seen_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// Every mechanism seen on a node, by cluster and node, at most
        /// [`super::mechanisms::MAX_MECHANISM_ROWS`].
        pub async fn node_mechanisms(&self) -> Result<Vec<super::mechanisms::NodeMechanism>> {
            let rows = sqlx::query(&$sql(
                "SELECT cluster, node, mechanism, seen_ms FROM node_mechanisms ORDER BY cluster, node, mechanism LIMIT ?",
            ))
            .bind(super::mechanisms::MAX_MECHANISM_ROWS)
            .fetch_all(&self.$read)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(super::mechanisms::NodeMechanism {
                        cluster: r.try_get(0)?,
                        node: r.try_get(1)?,
                        mechanism: r.try_get(2)?,
                        seen_ms: r.try_get(3)?,
                    })
                })
                .collect()
        }
    };
}
pub(crate) use mechanism_methods;
