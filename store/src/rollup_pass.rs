//! The rollup pass: every node's pending minutes rolled up a few nodes at a time, a span
//! (one transaction) at a time, each touched cluster-hour merged once, and the pair-hours of
//! every node-hour two tenants shared a GPU in measured and kept as the hour is merged.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use model::rollup::{self, MINUTE_MS};

use crate::{Result, RollupStats, Store, StoreError};

/// Nodes whose pending minutes one rollup pass works on at once.
const ROLLUP_NODES_IN_FLIGHT: usize = 4;

impl Store {
    /// Recomputes the rollups of every minute that received data, up to `until_ms` (minutes
    /// that end after it are left for later, as more data may still arrive for them).
    pub async fn rollup(&self, until_ms: i64) -> Result<RollupStats> {
        let pending = dispatch!(self, s => s.pending_minutes(until_ms).await)?;
        let mut by_node: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
        for (cluster, node, bucket) in pending {
            by_node.entry((cluster, node)).or_default().push(bucket);
        }
        // A few nodes at once: each node's spans in order, nodes apart (on Citus a node's rows
        // are one shard, so their spans run on the workers side by side).
        let mut stats = RollupStats::default();
        let mut cluster_hours: BTreeSet<(String, i64)> = BTreeSet::new();
        let mut nodes = by_node.into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < ROLLUP_NODES_IN_FLIGHT {
                let Some(((cluster, node), buckets)) = nodes.next() else {
                    break;
                };
                let store = self.clone();
                running.spawn(async move { store.rollup_node(cluster, node, buckets).await });
            }
            let Some(done) = running.join_next().await else {
                break;
            };
            let (node_stats, hours) = done.map_err(|e| StoreError::Internal(e.to_string()))??;
            stats.minutes += node_stats.minutes;
            stats.gpu_rows += node_stats.gpu_rows;
            stats.tenant_rows += node_stats.tenant_rows;
            stats.undecodable_rows += node_stats.undecodable_rows;
            cluster_hours.extend(hours);
        }
        // Each touched cluster-hour is merged once per pass, after all its nodes.
        for (cluster, hour) in cluster_hours {
            dispatch!(self, s => s.tables.refresh_cluster_hour(&cluster, hour).await)?;
        }
        Ok(stats)
    }

    /// One node's pending minutes, in contiguous spans inside one hour, so memory stays bounded
    /// and each span is one transaction: pending marks, raw reads and rollup writes together.
    /// After a span whose hour had a GPU two tenants shared, that node-hour's pair-hours are
    /// measured and kept ([`Store::keep_hour_pairs`]). Returns the cluster-hours it touched.
    async fn rollup_node(
        &self,
        cluster: String,
        node: String,
        mut buckets: Vec<i64>,
    ) -> Result<(RollupStats, Vec<(String, i64)>)> {
        buckets.sort_unstable();
        let mut stats = RollupStats::default();
        let mut hours = Vec::new();
        let mut mig_mark: Option<(HashSet<String>, String)> = None;
        for chunk in buckets
            .chunk_by(|a, b| b - a <= MINUTE_MS && b / rollup::HOUR_MS == a / rollup::HOUR_MS)
        {
            let from = chunk[0];
            let to = chunk[chunk.len() - 1] + MINUTE_MS;
            let span = self.rollup_span(&cluster, &node, from, to).await?;
            stats.undecodable_rows += span.undecodable;
            hours.push((cluster.clone(), rollup::bucket_of(from, rollup::HOUR_MS)));
            stats.minutes += chunk.len();
            stats.gpu_rows += span.gpu_rows;
            stats.tenant_rows += span.tenant_rows;
            if let Some((minutes, hour)) = span.shared_hour {
                if mig_mark.is_none() {
                    mig_mark = Some(self.pair_mark(&cluster, &node).await?);
                }
                let (mig, mark) = mig_mark.as_ref().expect("read above");
                let (rows, marks) = model::pair_hours::node_pair_hours(
                    &cluster,
                    &node,
                    &minutes,
                    &hour,
                    &|gpu| mig.contains(gpu),
                    &self.pair_thresholds,
                    mark,
                );
                // Not kept, the analysis measures the hour from its minutes: logged, not failed.
                let kept = dispatch!(self, s => s.tables.keep_pair_hours(&cluster, &node, &marks, &rows).await);
                if let Err(e) = kept {
                    tracing::warn!(%node, error = %e, "could not keep an hour's pair-hours; the analysis will measure them");
                }
            }
        }
        Ok((stats, hours))
    }

    /// One span's transaction, tried again when it lost to a concurrent one
    /// ([`crate::error::try_again`]): on Citus two nodes' spans can meet in a
    /// distributed deadlock, whose detector cancels one of them. A span recomputes its minutes
    /// from raw rows, so trying it again is safe.
    async fn rollup_span(
        &self,
        cluster: &str,
        node: &str,
        from: i64,
        to: i64,
    ) -> Result<crate::span::SpanStats> {
        let mut tries = 1;
        loop {
            let outcome = dispatch!(self, s => s.tables.rollup_span(cluster, node, from, to).await);
            if !crate::error::try_again(&outcome, &mut tries, "a rollup span") {
                return outcome;
            }
        }
    }

    /// The node's GPUs in MIG mode, and the mark its pair-hours are kept under.
    async fn pair_mark(&self, cluster: &str, node: &str) -> Result<(HashSet<String>, String)> {
        let mig: HashSet<String> = self
            .gpus(Some(node))
            .await?
            .into_iter()
            .filter(|g| g.cluster == cluster && g.sharing == model::inventory::Sharing::Mig)
            .map(|g| g.uuid)
            .collect();
        let mark = self.pair_thresholds.mark(mig.iter().map(String::as_str));
        Ok((mig, mark))
    }

    /// The thresholds the rollup measures pair-hours with (the analysis' `saturation` and
    /// `mig_bandwidth_saturation`; their defaults until set). An analysis under others finds
    /// the kept ones' mark different and measures from minutes.
    pub fn with_pair_thresholds(mut self, t: model::pair_hours::PairThresholds) -> Store {
        self.pair_thresholds = t;
        self
    }
}
