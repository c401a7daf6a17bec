//! Interference's pair-hours for the analysis window: an hour's pair-hours are measured from its
//! minute rollups once and kept in the store (`pair_hours`, with a mark per node-hour); a later
//! analysis reads the kept sums wherever the mark still holds — same thresholds, and the node's
//! hour rollups of that hour with the same sample counts — and measures only the other hours.
//! Late samples change an hour's rollups and so its counts, which is what invalidates a mark.

use model::inventory::Sharing;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use analytics::Input;
use model::pair_hours::{PairHour, PairHourMark, PairThresholds};
use model::rollup::HOUR_MS;
use store::{Store, WantedMinutes};

/// Nodes read at once: the database and the decoding overlap.
const NODES_IN_FLIGHT: usize = 4;

/// What loading the pair-hours did.
#[derive(Debug, Clone, Copy, Default)]
pub struct PairStats {
    /// Minute rows read to measure hours not kept.
    pub minute_rows: usize,
    /// Node-hours measured from minutes, and node-hours whose kept pair-hours were read.
    pub hours_measured: usize,
    pub hours_kept: usize,
}

/// What the analysis' hour rollups say of one node, for the hours interference wants.
#[derive(Debug, Default)]
struct NodeHours {
    /// Each GPU's wanted ranges (what [`analytics::minute_ranges`] asks for).
    wanted: WantedMinutes,
    /// Per hour: the sample counts of the node's GPU-hour and tenant-hour rows (a mark holds
    /// while they are the same) and, for the hours to measure, the GPUs two or more tenants
    /// were on ([`shared_gpus`]).
    samples: BTreeMap<i64, (i64, i64)>,
    shared: BTreeMap<i64, BTreeSet<String>>,
    /// The hours any wanted range covers, and those of them whose kept sums hold.
    wanted_hours: BTreeSet<i64>,
    holds: BTreeSet<i64>,
    /// The mark kept sums must carry to hold ([`PairThresholds::mark`] of the node's MIG GPUs).
    mark: String,
}

impl NodeHours {
    /// The wanted hours neither kept sums hold nor are without a shared GPU (an hour in which
    /// no GPU had two tenants has no pair-hours to measure).
    fn to_measure(&self) -> Vec<i64> {
        self.wanted_hours
            .difference(&self.holds)
            .filter(|h| self.shared.contains_key(h))
            .copied()
            .collect()
    }

    /// Whether interference wants this pair-hour (its GPU's ranges cover its hour).
    fn wants(&self, r: &PairHour) -> bool {
        self.wanted
            .get(&r.gpu)
            .is_some_and(|ranges| ranges.iter().any(|&(a, b)| (a..b).contains(&r.hour)))
    }
}

/// Adds the window's pair-hours to `input.pair_hours`: kept ones where they hold (one read of
/// the marks of the scope's nodes, one of the kept sums), the rest measured
/// from minutes (a few nodes at a time) and kept for the next analysis when their hour has
/// ended. A failure to keep them is logged; the analysis goes on.
pub async fn load(
    store: &Store,
    cfg: &analytics::Config,
    scope: store::Scope<'_>,
    input: &mut Input,
) -> anyhow::Result<PairStats> {
    let mut per_node = node_hours(input, cfg);
    let mig: Arc<HashSet<String>> = Arc::new(
        input
            .gpus
            .iter()
            .filter(|g| g.sharing == Sharing::Mig)
            .map(|g| g.uuid.clone())
            .collect(),
    );
    let thresholds = analytics::pair_thresholds(cfg);
    let mut node_mig: HashMap<(&str, &str), Vec<&str>> = HashMap::new();
    for g in input.gpus.iter().filter(|g| g.sharing == Sharing::Mig) {
        node_mig
            .entry((&g.cluster, &g.node))
            .or_default()
            .push(&g.uuid);
    }
    let plain = thresholds.mark([]);
    for ((cluster, node), h) in per_node.iter_mut() {
        h.mark = match node_mig.get(&(cluster.as_str(), node.as_str())) {
            Some(uuids) => thresholds.mark(uuids.iter().copied()),
            None => plain.clone(),
        };
    }
    let (from, to, now) = (input.from_ms, input.to_ms, input.now_ms);
    let mut stats = PairStats::default();
    // Which wanted node-hours the kept sums still hold for (marks are looked at as they are
    // read; a node's arrive together, so its entry is found once for a run of them).
    let mut at: Option<((String, String), bool)> = None;
    store
        .pair_hour_marks(scope, from, to, &mut |cluster, node, m| {
            if at
                .as_ref()
                .is_none_or(|(k, _)| (k.0.as_str(), k.1.as_str()) != (cluster, node))
            {
                let key = (cluster.to_owned(), node.to_owned());
                let known = per_node.contains_key(&key);
                at = Some((key, known));
            }
            let Some((key, true)) = &at else { return };
            let h = per_node.get_mut(key).expect("known node");
            if m.thresholds == h.mark
                && h.samples.get(&m.hour_ms) == Some(&(m.gpu_samples, m.tenant_samples))
                && h.wanted_hours.contains(&m.hour_ms)
            {
                h.holds.insert(m.hour_ms);
            }
        })
        .await?;
    shared_gpus(input, &mut per_node);
    stats.hours_kept = per_node.values().map(|h| h.holds.len()).sum();
    if stats.hours_kept > 0 {
        let mut keep = |r: &PairHour| {
            per_node
                .get(&(r.cluster.clone(), r.node.clone()))
                .is_some_and(|h| h.holds.contains(&r.hour) && h.wants(r))
        };
        input.pair_hours = store.pair_hours(scope, from, to, &mut keep).await?;
    }
    let mut reads = tokio::task::JoinSet::new();
    let mut nodes = per_node
        .into_iter()
        .filter(|(_, h)| !h.to_measure().is_empty());
    loop {
        while reads.len() < NODES_IN_FLIGHT {
            let Some(((cluster, node), hours)) = nodes.next() else {
                break;
            };
            let job = NodeJob {
                store: store.clone(),
                mig: mig.clone(),
                thresholds,
                cluster,
                node,
                ended_by: now,
            };
            reads.spawn(job.run(hours));
        }
        let Some(done) = reads.join_next().await else {
            break;
        };
        let (rows, s) = done??;
        stats.minute_rows += s.minute_rows;
        stats.hours_measured += s.hours_measured;
        input.pair_hours.extend(rows);
    }
    // The order pair-hours are summed in, whichever way they came.
    input.pair_hours.sort_unstable_by(|a, b| {
        (&a.cluster, &a.node, &a.gpu, &a.victim, &a.aggressor, a.hour).cmp(&(
            &b.cluster,
            &b.node,
            &b.gpu,
            &b.victim,
            &b.aggressor,
            b.hour,
        ))
    });
    Ok(stats)
}

/// The nodes interference wants minutes of, with what their hour rollups say.
fn node_hours(input: &Input, cfg: &analytics::Config) -> BTreeMap<(String, String), NodeHours> {
    let mut per_node: BTreeMap<(String, String), NodeHours> = BTreeMap::new();
    for r in analytics::minute_ranges(input, cfg) {
        per_node
            .entry((r.cluster, r.node))
            .or_default()
            .wanted
            .entry(r.gpu)
            .or_default()
            .push((r.from_ms, r.to_ms));
    }
    // Per node-hour: GPU and tenant sample counts (the series are in node order, so a node's
    // are found once).
    for node in input
        .gpu_hours
        .chunk_by(|a, b| (&a.cluster, &a.node) == (&b.cluster, &b.node))
    {
        if let Some(h) = per_node.get_mut(&(node[0].cluster.clone(), node[0].node.clone())) {
            for (hour, agg) in node.iter().flat_map(|s| &s.hours) {
                h.samples.entry(*hour).or_default().0 += i64::from(agg.samples);
            }
        }
    }
    for node in input
        .tenant_hours
        .chunk_by(|a, b| (&a.cluster, &a.node) == (&b.cluster, &b.node))
    {
        if let Some(h) = per_node.get_mut(&(node[0].cluster.clone(), node[0].node.clone())) {
            for (hour, agg) in node.iter().flat_map(|s| &s.hours) {
                h.samples.entry(*hour).or_default().1 += i64::from(agg.samples);
            }
        }
    }
    for h in per_node.values_mut() {
        h.wanted_hours = h
            .wanted
            .values()
            .flatten()
            .flat_map(|&(a, b)| (a..b).step_by(HOUR_MS as usize))
            .collect();
    }
    per_node
}

/// Fills in each node's GPUs that two or more tenants were on, for the hours it must measure
/// (wanted, and not held by kept sums): after the first analysis that is the newest hour or
/// two, so a fleet's shared GPU-hours are not all listed.
fn shared_gpus(input: &Input, per_node: &mut BTreeMap<(String, String), NodeHours>) {
    // The tenant series are in (cluster, node, GPU) order, so one GPU's hours are counted at
    // a time.
    for gpu in input
        .tenant_hours
        .chunk_by(|a, b| (&a.cluster, &a.node, &a.gpu) == (&b.cluster, &b.node, &b.gpu))
    {
        if gpu.len() < 2 {
            continue;
        }
        let Some(h) = per_node.get_mut(&(gpu[0].cluster.clone(), gpu[0].node.clone())) else {
            continue;
        };
        if h.wanted_hours.len() == h.holds.len() {
            continue;
        }
        let mut present: HashMap<i64, u32> = HashMap::new();
        for s in gpu {
            for (hour, _) in &s.hours {
                if h.wanted_hours.contains(hour) && !h.holds.contains(hour) {
                    *present.entry(*hour).or_default() += 1;
                }
            }
        }
        for (hour, n) in present {
            if n >= 2 {
                h.shared.entry(hour).or_default().insert(gpu[0].gpu.clone());
            }
        }
    }
}

/// One node's part of [`load`].
struct NodeJob {
    store: Store,
    mig: Arc<HashSet<String>>,
    thresholds: PairThresholds,
    cluster: String,
    node: String,
    /// Hours that ended by then are kept once measured.
    ended_by: i64,
}

impl NodeJob {
    /// Measures the node's wanted hours whose kept sums do not hold.
    async fn run(self, hours: NodeHours) -> anyhow::Result<(Vec<PairHour>, PairStats)> {
        let stale = hours.to_measure();
        let (mut rows, minute_rows) = self.measure(&hours, &stale).await?;
        rows.retain(|r| hours.wants(r));
        let stats = PairStats {
            hours_measured: stale.len(),
            minute_rows,
            ..PairStats::default()
        };
        Ok((rows, stats))
    }

    /// Measures the `stale` hours from their minutes — every GPU two or more tenants were on,
    /// not only the wanted ones, so that what is kept is the whole node-hour — and keeps those
    /// that have ended. Returns the pair-hours and the minute rows read.
    async fn measure(
        &self,
        hours: &NodeHours,
        stale: &[i64],
    ) -> anyhow::Result<(Vec<PairHour>, usize)> {
        let mut minutes = WantedMinutes::new();
        for &h in stale {
            for gpu in hours.shared.get(&h).into_iter().flatten() {
                let ranges = minutes.entry(gpu.clone()).or_default();
                match ranges.last_mut() {
                    Some(last) if last.1 == h => last.1 = h + HOUR_MS,
                    _ => ranges.push((h, h + HOUR_MS)),
                }
            }
        }
        let (devices, tenants) = self
            .store
            .interference_minutes(&self.cluster, &self.node, &minutes)
            .await?;
        let minute_rows = devices.iter().map(|d| d.minutes.len()).sum::<usize>()
            + tenants.iter().map(|t| t.minutes.len()).sum::<usize>();
        let is_mig = |gpu: &str| self.mig.contains(gpu);
        let measured =
            model::pair_hours::measure_pair_hours(&devices, &tenants, &is_mig, &self.thresholds);
        let marks: Vec<PairHourMark> = stale
            .iter()
            .filter(|&&h| h + HOUR_MS <= self.ended_by)
            .map(|&h| {
                let (gpu_samples, tenant_samples) =
                    hours.samples.get(&h).copied().unwrap_or_default();
                PairHourMark {
                    hour_ms: h,
                    thresholds: hours.mark.clone(),
                    gpu_samples,
                    tenant_samples,
                }
            })
            .collect();
        if !marks.is_empty()
            && let Err(e) = self
                .store
                .keep_pair_hours(&self.cluster, &self.node, &marks, &measured)
                .await
        {
            tracing::warn!(node = %self.node, error = %e, "could not keep pair-hours; the next analysis measures them again");
        }
        Ok((measured, minute_rows))
    }
}
