//! A cluster cut into parts the analysis can take one at a time. Everything the analysis reads
//! across nodes stays inside a part: a pool (the nodes whose GPUs are of one model: the plan
//! packs within it, a waiting pod of that product reclaims from it), a tenant (its holdings
//! are reclaimed as one step and pin it to its GPUs), the GPUs a waiting pod could run on, and
//! the nodes an applied step touched. So each part's analysis says what the cluster's would
//! say of its nodes, and [`crate::merge()`] puts them together (docs/analytics.md, "One cluster,
//! and one pool, at a time"). A cluster whose pools are tied together by such links is one part.

use std::collections::{BTreeMap, BTreeSet};

use crate::input::Input;
use crate::recommendation::Recommendation;
use crate::waiting::product_matches;

/// One part of a cluster: its nodes, and which of the cluster's waiting work it judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    pub nodes: BTreeSet<String>,
    /// Indices into the cluster frame's `waiting`.
    pub waiting: Vec<usize>,
}

impl Part {
    /// The part of one cluster's input `of` that holds this part's nodes and waiting work;
    /// the tenants stay whole (a part's findings name only its own).
    pub fn input(&self, of: &Input) -> Input {
        Input {
            tenants: of.tenants.clone(),
            waiting: self
                .waiting
                .iter()
                .filter_map(|&i| of.waiting.get(i).cloned())
                .collect(),
            ..of.of_nodes(&|_, node| self.nodes.contains(node))
        }
    }
}

/// The parts of one cluster's `frame` (its inventory, tenants with their nodes, health,
/// orphans, applied steps and waiting work; no series needed), ordered by their first node.
/// Every node the frame names is in exactly one part, and every waiting item in one.
pub fn parts(frame: &Input) -> Vec<Part> {
    let mut sets = Sets::default();
    for n in &frame.nodes {
        sets.add(&n.node);
    }
    for h in &frame.health {
        sets.add(&h.node);
    }
    for o in &frame.orphans {
        sets.add(&o.node);
    }
    // A pool, and any node with a GPU of the model (a node of several models ties theirs).
    let mut by_model: BTreeMap<&str, &str> = BTreeMap::new();
    for g in &frame.gpus {
        sets.add(&g.node);
        let first = *by_model.entry(g.model.as_str()).or_insert(g.node.as_str());
        sets.join(first, &g.node);
    }
    // A tenant's nodes (only those the frame knows: elsewhere it holds nothing to read).
    for t in &frame.tenants {
        let known: Vec<&String> = t.nodes.iter().filter(|n| sets.has(n)).collect();
        for n in known.iter().skip(1) {
            sets.join(known[0], n);
        }
    }
    // The GPUs a waiting item could run on.
    let mut waits_on: Vec<Option<String>> = Vec::with_capacity(frame.waiting.len());
    for w in &frame.waiting {
        let mut on = frame
            .gpus
            .iter()
            .filter(|g| {
                w.product
                    .as_deref()
                    .is_none_or(|p| product_matches(&g.model, p))
            })
            .map(|g| g.node.as_str());
        let first = on.next();
        if let Some(first) = first {
            for n in on {
                sets.join(first, n);
            }
        }
        waits_on.push(first.map(str::to_owned));
    }
    // The nodes an applied step touched.
    let node_of: BTreeMap<&str, &str> = frame
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.node.as_str()))
        .collect();
    for a in &frame.applied {
        let nodes = touched(&a.recommendation, &node_of);
        for n in &nodes {
            sets.add(n);
        }
        for n in nodes.iter().skip(1) {
            sets.join(&nodes[0], n);
        }
    }
    let mut parts: BTreeMap<usize, Part> = BTreeMap::new();
    for i in 0..sets.names.len() {
        let root = sets.find(i);
        parts
            .entry(root)
            .or_default()
            .nodes
            .insert(sets.names[i].clone());
    }
    let mut parts: Vec<Part> = parts.into_values().collect();
    parts.sort_by(|a, b| a.nodes.first().cmp(&b.nodes.first()));
    for (i, on) in waits_on.iter().enumerate() {
        let at = on
            .as_ref()
            .and_then(|n| parts.iter().position(|p| p.nodes.contains(n)))
            .unwrap_or(0);
        if let Some(p) = parts.get_mut(at) {
            p.waiting.push(i);
        }
    }
    parts
}

/// `parts` packed, in their order, into groups of at most `gpus` GPUs of `frame` (a part that
/// has more is a group of its own): what one read of the cluster takes. A part's waiting work
/// goes with it.
pub fn packed(frame: &Input, parts: Vec<Part>, gpus: usize) -> Vec<Part> {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for g in &frame.gpus {
        *per_node.entry(g.node.as_str()).or_default() += 1;
    }
    let size = |p: &Part| -> usize {
        p.nodes
            .iter()
            .filter_map(|n| per_node.get(n.as_str()))
            .sum()
    };
    let mut out: Vec<(Part, usize)> = Vec::new();
    for part in parts {
        let n = size(&part);
        match out.last_mut() {
            Some((last, m)) if *m + n <= gpus => {
                last.nodes.extend(part.nodes);
                last.waiting.extend(part.waiting);
                *m += n;
            }
            _ => out.push((part, n)),
        }
    }
    out.into_iter()
        .map(|(mut p, _)| {
            p.waiting.sort_unstable();
            p
        })
        .collect()
}

/// The nodes a step names: its own, those of its GPUs and of its moves.
fn touched(r: &Recommendation, node_of: &BTreeMap<&str, &str>) -> Vec<String> {
    let moves = r.moves();
    let mut nodes = vec![r.node.clone()];
    nodes.extend(
        r.gpus
            .iter()
            .filter_map(|g| node_of.get(g.as_str()).map(|n| n.to_string())),
    );
    for m in moves {
        nodes.extend(
            [&m.from_node, &m.to_node]
                .into_iter()
                .filter(|n| !n.is_empty())
                .cloned(),
        );
        nodes.extend(node_of.get(m.from_gpu.as_str()).map(|n| n.to_string()));
    }
    nodes.retain(|n| !n.is_empty());
    nodes
}

/// Disjoint sets of node names (union by size, with path halving).
#[derive(Default)]
struct Sets {
    names: Vec<String>,
    index: BTreeMap<String, usize>,
    parent: Vec<usize>,
    size: Vec<usize>,
}

impl Sets {
    fn add(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len();
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), i);
        self.parent.push(i);
        self.size.push(1);
        i
    }

    fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn join(&mut self, a: &str, b: &str) {
        let (a, b) = (self.add(a), self.add(b));
        let (mut a, mut b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        if self.size[a] < self.size[b] {
            std::mem::swap(&mut a, &mut b);
        }
        self.parent[b] = a;
        self.size[a] += self.size[b];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{GpuRef, NodeRef, TenantRef, Waiting};

    fn node(input: &mut Input, name: &str, models: &[&str]) {
        input.nodes.push(NodeRef {
            cluster: "c1".into(),
            node: name.into(),
            last_seen_ms: 0,
            interval_ms: 1000,
            mechanisms: Vec::new(),
        });
        for (i, model) in models.iter().enumerate() {
            input.gpus.push(GpuRef {
                cluster: "c1".into(),
                node: name.into(),
                uuid: format!("GPU-{name}-{i}"),
                index: i as i64,
                model: (*model).into(),
                memory_total_bytes: 80 << 30,
                sharing: model::inventory::Sharing::Exclusive,
                replicas: 1,
                mig: Vec::new(),
            });
        }
    }

    fn tenant(input: &mut Input, key: &str, nodes: &[&str]) {
        input.tenants.push(TenantRef {
            cluster: "c1".into(),
            key: key.into(),
            kind: "slurm_job".into(),
            name: key.into(),
            team: None,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        });
    }

    fn waiting(input: &mut Input, product: Option<&str>) {
        input.waiting.push(Waiting {
            cluster: "c1".into(),
            source: "pod".into(),
            name: format!("ml/p{}", input.waiting.len()),
            team: "ml".into(),
            resource: "nvidia.com/gpu".into(),
            count: 1,
            product: product.map(str::to_owned),
            reason: "Unschedulable".into(),
            message: String::new(),
            from_ms: 0,
            to_ms: 1,
        });
    }

    const H100: &str = "NVIDIA H100 80GB HBM3";
    const A100: &str = "NVIDIA A100-SXM4-80GB";
    const L40S: &str = "NVIDIA L40S";

    fn names(parts: &[Part]) -> Vec<Vec<String>> {
        parts
            .iter()
            .map(|p| p.nodes.iter().cloned().collect())
            .collect()
    }

    /// Three pools: h1+h2 (H100), a1 (A100), l1 (L40S); a node without GPUs.
    fn fleet() -> Input {
        let mut input = Input::default();
        node(&mut input, "h1", &[H100, H100]);
        node(&mut input, "h2", &[H100]);
        node(&mut input, "a1", &[A100]);
        node(&mut input, "l1", &[L40S]);
        node(&mut input, "z0", &[]);
        tenant(&mut input, "pod/a", &["h1"]);
        tenant(&mut input, "pod/b", &["a1", "gone"]);
        input
    }

    #[test]
    fn pools_that_share_nothing_are_parts_and_every_node_is_in_one() {
        let input = fleet();
        assert_eq!(
            names(&parts(&input)),
            [vec!["a1"], vec!["h1", "h2"], vec!["l1"], vec!["z0"]]
        );
    }

    #[test]
    fn a_tenant_a_mixed_node_or_waiting_work_ties_pools_together() {
        // A Slurm job on an H100 node and the L40S node.
        let mut input = fleet();
        tenant(&mut input, "job/7", &["h2", "l1"]);
        assert_eq!(
            names(&parts(&input)),
            [vec!["a1"], vec!["h1", "h2", "l1"], vec!["z0"]]
        );
        // A node with GPUs of two models.
        let mut input = fleet();
        node(&mut input, "m1", &[A100, L40S]);
        assert_eq!(
            names(&parts(&input)),
            [vec!["a1", "l1", "m1"], vec!["h1", "h2"], vec!["z0"]]
        );
        // Waiting work of one product stays with its pool and is judged there; work of no
        // product could run anywhere, so the GPU nodes are one part.
        let mut input = fleet();
        waiting(&mut input, Some("NVIDIA-A100-SXM4-80GB"));
        waiting(&mut input, Some("NVIDIA-B200"));
        let p = parts(&input);
        assert_eq!(
            names(&p),
            [vec!["a1"], vec!["h1", "h2"], vec!["l1"], vec!["z0"]]
        );
        assert_eq!((p[0].waiting.clone(), p[1].waiting.len()), (vec![0, 1], 0));
        waiting(&mut input, None);
        let p = parts(&input);
        assert_eq!(names(&p), [vec!["a1", "h1", "h2", "l1"], vec!["z0"]]);
        assert_eq!(p[0].waiting, [0, 1, 2]);
    }

    #[test]
    fn parts_are_packed_into_reads_of_a_bounded_size() {
        let mut input = fleet();
        waiting(&mut input, Some("NVIDIA-L40S"));
        let p = parts(&input);
        // a1 (1 GPU), h1+h2 (3), l1 (1), z0 (0).
        let sizes = |gpus: usize| names(&packed(&input, p.clone(), gpus));
        assert_eq!(sizes(1), [vec!["a1"], vec!["h1", "h2"], vec!["l1", "z0"]]);
        assert_eq!(sizes(4), [vec!["a1", "h1", "h2"], vec!["l1", "z0"]]);
        assert_eq!(sizes(100), [vec!["a1", "h1", "h2", "l1", "z0"]]);
        assert_eq!(packed(&input, p.clone(), 4)[1].waiting, [0]);
    }

    #[test]
    fn a_part_of_the_input_holds_its_nodes_and_every_tenant() {
        let mut input = fleet();
        waiting(&mut input, Some("NVIDIA-L40S"));
        let p = parts(&input);
        let l1 = p[2].input(&input);
        assert_eq!(l1.gpus.len(), 1);
        assert_eq!(l1.nodes.len(), 1);
        assert_eq!(l1.tenants.len(), input.tenants.len());
        assert_eq!(l1.waiting.len(), 1);
        assert!(p[1].input(&input).waiting.is_empty());
    }
}
