//! State kept per node, cluster → node, for what `/metrics` shows of the newest batches
//! (`metrics.rs`, `tenant_series.rs`). Looked up by a batch's own names: a node seen before
//! costs no allocation on the ingest path.

use std::collections::HashMap;

/// A value per (cluster, node).
#[derive(Debug)]
pub struct ByNode<V>(HashMap<String, HashMap<String, V>>);

impl<V> Default for ByNode<V> {
    fn default() -> ByNode<V> {
        ByNode(HashMap::new())
    }
}

impl<V: Default> ByNode<V> {
    /// The node's value, empty the first time the node is seen.
    pub fn node_mut(&mut self, cluster: &str, node: &str) -> &mut V {
        slot(slot(&mut self.0, cluster), node)
    }
}

impl<V> ByNode<V> {
    /// Keeps the nodes for which `keep` (which may change their values) says so, and the
    /// clusters that still have a node.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str, &mut V) -> bool) {
        self.0.retain(|cluster, nodes| {
            nodes.retain(|node, v| keep(cluster, node, v));
            !nodes.is_empty()
        });
    }

    /// Every node's value.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.values().flat_map(HashMap::values)
    }
}

/// `map[key]`, inserted empty the first time: the key is copied only then. (Looked up twice
/// when present: returning the first lookup's borrow is beyond today's borrow checker.)
pub fn slot<'a, V: Default>(map: &'a mut HashMap<String, V>, key: &str) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("present or just inserted")
}
/// GPUs not heard from in this long leave `/metrics`.
pub const STALE_MS: i64 = 10 * 60_000;
