//! Batches in flight per node. The agents share half of the collector's request slots
//! (`collector_shared::admission`), and each batch may decode to `[ingest] max_decoded_bytes`:
//! without a bound per node, one node's credential — a compromised node holding its own
//! token — could hold every agent slot with slow or large batches, turning every other
//! node's batches away and taking gigabytes of memory. The gpulens agent sends one batch at a
//! time (and a retry may overlap a batch still being stored), so a node gets
//! `[ingest] max_in_flight_per_node` (2) requests in the handler at once; one more is
//! answered 429 with `Retry-After`, which the agent honours, its batch kept in its spool.
//!
//! A node is known before the body is read when its credential names one node (a reviewed
//! ServiceAccount token, an `[[agents]]` token listing one node) or its client certificate
//! does. A token for `"*"` or several nodes is not bounded per node: it speaks for all of
//! them anyway (docs/security.md, "Known limits").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The requests each node has in the ingest handler.
#[derive(Debug)]
pub struct PerNode {
    limit: usize,
    in_flight: Mutex<HashMap<String, usize>>,
}

/// A node's place in the handler, given back when dropped.
#[derive(Debug)]
pub struct NodeSlot {
    per_node: Arc<PerNode>,
    node: String,
}

impl PerNode {
    /// At most `limit` requests per node at once (0: no bound).
    pub fn new(limit: usize) -> Arc<PerNode> {
        Arc::new(PerNode {
            limit,
            in_flight: Mutex::default(),
        })
    }

    /// A place for one more of `node`'s requests, or None when it has `limit` already. The
    /// map holds only nodes with requests in flight, so it is bounded by the agents' slots.
    pub fn enter(self: &Arc<Self>, node: &str) -> Option<NodeSlot> {
        let mut in_flight = self.in_flight.lock().expect("per-node counts");
        let n = in_flight.entry(node.to_owned()).or_default();
        if self.limit > 0 && *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(NodeSlot {
            per_node: self.clone(),
            node: node.to_owned(),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Nodes with a request in flight (for tests).
    pub fn nodes_in_flight(&self) -> usize {
        self.in_flight.lock().expect("per-node counts").len()
    }
}

impl Drop for NodeSlot {
    fn drop(&mut self) {
        let mut in_flight = self.per_node.in_flight.lock().expect("per-node counts");
        if let Some(n) = in_flight.get_mut(&self.node) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&self.node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_gets_its_limit_and_its_places_back() {
        let p = PerNode::new(2);
        let a1 = p.enter("a").unwrap();
        let a2 = p.enter("a").unwrap();
        assert!(p.enter("a").is_none(), "a third for the same node");
        let b = p.enter("b").expect("another node is not held back");
        drop(a1);
        let a3 = p.enter("a").expect("a place given back");
        drop((a2, a3, b));
        assert_eq!(p.nodes_in_flight(), 0, "nothing kept for nodes gone quiet");
    }

    #[test]
    fn zero_bounds_nothing() {
        let p = PerNode::new(0);
        let held: Vec<_> = (0..100).map(|_| p.enter("a").unwrap()).collect();
        drop(held);
        assert_eq!(p.nodes_in_flight(), 0);
    }
}
