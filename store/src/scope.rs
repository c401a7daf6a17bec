//! Which nodes a read of the analysis' series covers: the fleet, one cluster, or some nodes of
//! one cluster (the analysis reads a large cluster in parts that share nothing).

use crate::dialect::Dialect;

/// Which nodes a read of hour series or pair-hours covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    Fleet,
    Cluster(&'a str),
    /// These nodes of this cluster.
    Nodes(&'a str, &'a [String]),
}

impl<'a> Scope<'a> {
    /// The cluster it reads, if one.
    pub fn cluster(self) -> Option<&'a str> {
        match self {
            Scope::Fleet => None,
            Scope::Cluster(c) | Scope::Nodes(c, _) => Some(c),
        }
    }

    /// The condition on bind parameters `n` (the cluster) and `n + 1` (the node list) that
    /// selects the scope's rows, in `d`'s SQL; [`Scope::binds`] gives both values. A parameter
    /// the scope does not name is bound NULL and tested, so every scope binds the same two.
    pub(crate) fn condition(self, d: Dialect, n: usize) -> String {
        let nodes = matches!(self, Scope::Nodes(..));
        format!(
            "{} AND {}",
            d.of_cluster(n, self.cluster().is_some()),
            d.of_nodes(n + 1, nodes)
        )
    }

    /// The two values [`Scope::condition`] binds: the cluster and the node list as `d` reads
    /// it.
    pub(crate) fn binds(self, d: Dialect) -> (Option<&'a str>, Option<String>) {
        match self {
            Scope::Nodes(_, nodes) => (self.cluster(), Some(d.node_list(nodes))),
            _ => (self.cluster(), None),
        }
    }
}
