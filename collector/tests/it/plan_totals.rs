//! The plan keeps its word on any fleet, not only on the hand-made scenarios. Random
//! H100 fleets — whole GPUs, MIG nodes with instances of several sizes, time-sliced nodes,
//! idle GPUs beside held ones, tenants of every workload pattern — are simulated for half a day,
//! stored and rolled up through the real store, analysed, and for every seed: the plan's total
//! equals the sum of its steps' frees, and both equal what applying every step (its moves and
//! reclaims) to today's placement frees. `GPULENS_PLAN_SEEDS=N` runs N seeds (default 40), from `GPULENS_PLAN_SEED_FIRST` (default 1).

use analytics::mechanism::Mechanism;
use simulator::{Fleet, Scenario};

use std::collections::{BTreeSet, HashMap};

use super::analytics::load_every;

/// Half a day, sampled every ten minutes: the plan reads hours, a holding counts from four
/// of them, and a seed costs about a second.
const WINDOW_MS: i64 = 12 * 3_600_000;
const STEP_MS: i64 = 600_000;

/// A small deterministic generator (SplitMix64), so a failing seed can be run again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<'a, T>(&mut self, of: &'a [T]) -> &'a T {
        &of[self.below(of.len() as u64) as usize]
    }
}

const PATTERNS: [&str; 6] = [
    "steady_training",
    "diurnal_inference",
    "bursty_batch",
    "idle_holding_memory",
    "daily_peak",
    "notebook",
];

/// MIG layouts of an H100 and each instance's memory in GB.
const MIG_LAYOUTS: [&[(&str, f64)]; 3] = [
    &[
        ("3g.40gb", 40.0),
        ("2g.20gb", 20.0),
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
    ],
    &[("4g.40gb", 40.0), ("3g.40gb", 40.0)],
    &[
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
        ("1g.10gb", 10.0),
    ],
];

/// A random fleet of 3 to 6 H100 nodes as a scenario file.
fn random_scenario(seed: u64) -> String {
    let mut rng = Rng(seed);
    let mut out = format!(
        "name = \"random-{seed}\"\ndescription = \"random fleet {seed}\"\ncluster = \"random\"\nseed = {seed}\ninterval = \"60s\"\n"
    );
    let mut tenants = String::new();
    let mut t = 0;
    let mut tenant = |node: &str, device: String, mem_gib: f64, rng: &mut Rng| {
        t += 1;
        tenants.push_str(&format!(
            "\n[[tenants]]\nname = \"t{t}\"\nkind = \"pod\"\nnamespace = \"{}\"\nnode = \"{node}\"\ndevices = [\"{device}\"]\npattern = \"{}\"\nmem_gib = {mem_gib:.1}\nintensity = {:.2}\n",
            rng.pick(&["ml", "search", "vision"]),
            rng.pick(&PATTERNS),
            0.1 + rng.below(90) as f64 / 100.0,
        ));
    };
    for n in 0..3 + rng.below(4) {
        let node = format!("h100-{n:02}");
        let gpus = 2 + rng.below(3);
        let kind = rng.below(4);
        out.push_str(&format!(
            "\n[[nodes]]\nname = \"{node}\"\nmodel = \"H100-80GB\"\ngpus = {gpus}\ndcgm = {}\n",
            rng.chance(0.5)
        ));
        match kind {
            // MIG: each instance held or not.
            0 => {
                let layout = *rng.pick(&MIG_LAYOUTS);
                let names: Vec<String> = layout.iter().map(|(p, _)| format!("\"{p}\"")).collect();
                out.push_str(&format!(
                    "sharing = \"mig\"\nmig_layout = [{}]\n",
                    names.join(", ")
                ));
                for g in 0..gpus {
                    for (i, (_, mem)) in layout.iter().enumerate() {
                        if rng.chance(0.6) {
                            let m = 1.0 + rng.below((*mem as u64 - 2).max(1)) as f64;
                            tenant(&node, format!("{g}/mig/{i}"), m, &mut rng);
                        }
                    }
                }
            }
            // Time-sliced: each replica held or not.
            1 => {
                let replicas = 2 + rng.below(3);
                out.push_str(&format!(
                    "sharing = \"time_slicing\"\nreplicas = {replicas}\n"
                ));
                for g in 0..gpus {
                    for r in 0..replicas {
                        if rng.chance(0.5) {
                            let room = (80 / replicas).saturating_sub(2).max(1);
                            let m = 1.0 + rng.below(room) as f64;
                            tenant(&node, format!("{g}::{r}"), m, &mut rng);
                        }
                    }
                }
            }
            // Whole GPUs, some idle.
            _ => {
                for g in 0..gpus {
                    if rng.chance(0.7) {
                        let m = 1.0 + rng.below(70) as f64;
                        tenant(&node, g.to_string(), m, &mut rng);
                    }
                }
            }
        }
    }
    out.push_str(&tenants);
    // Pods still waiting (or that stopped waiting hours ago) for whole GPUs or MIG instances:
    // the plan serves those still waiting before it counts a GPU as freed.
    for w in 0..rng.below(3) {
        let resource = rng.pick(&[
            "nvidia.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-3g.40gb",
        ]);
        let until = if rng.chance(0.7) {
            String::new()
        } else {
            "for_hours = 2\n".into()
        };
        out.push_str(&format!(
            "\n[[waiting]]\nname = \"w{w}\"\nnamespace = \"queue\"\nresource = \"{resource}\"\ncount = {}\nmodel = \"H100-80GB\"\nsince_hours = 6\n{until}",
            1 + rng.below(2)
        ));
    }
    out
}

/// `fleet` simulated over [from, to) a sample every `step` ms, stored and rolled up in `store`,
/// loaded as a scheduled pass loads it and analysed with the default thresholds.
async fn analysed(
    store: &store::Store,
    fleet: &Fleet,
    from: i64,
    to: i64,
    step: i64,
    cfg: analytics::Config,
) -> (analytics::Analysis, analytics::Input) {
    load_every(store, fleet, "plan", from, to, step, &|_| None).await;
    let waiting = collector::commands::demo::waiting_records(&fleet.scenario, &|ns| ns.into(), to);
    if !waiting.is_empty() {
        store.record_waiting(&waiting).await.unwrap();
    }
    let input = collector::analysis::load(store, &cfg, collector::analysis::Span::closed(from, to))
        .await
        .unwrap();
    // Polars blocks on its own runtime: off the async threads, as the collector runs it.
    let a = {
        let input = input.clone();
        tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
            .await
            .unwrap()
            .unwrap()
    };
    (a, input)
}

/// Each GPU's uuid by (cluster, node, index), as moves name their targets.
fn uuid_of(input: &analytics::Input) -> HashMap<(&str, &str, i64), &str> {
    input
        .gpus
        .iter()
        .map(|g| {
            (
                (g.cluster.as_str(), g.node.as_str(), g.index),
                g.uuid.as_str(),
            )
        })
        .collect()
}

#[tokio::test]
async fn heavy_random_fleets_free_what_their_steps_add_up_to() {
    let seeds: u64 = std::env::var("GPULENS_PLAN_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - WINDOW_MS;
    let mut checked_moves = 0;
    let mut waits_served = 0;
    let mut per_gpu_pools: std::collections::BTreeMap<Mechanism, usize> = Default::default();
    let first: u64 = std::env::var("GPULENS_PLAN_SEED_FIRST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in first..first + seeds {
        let text = random_scenario(seed);
        let scenario =
            Scenario::from_toml(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let fleet = Fleet::new(scenario);
        let t = crate::support::sqlite().await;
        // Five fleets in seven have a per-GPU mechanism — pinning groups, a scheduler placing
        // within requests, or DynamicMIG carving MIG instances at allocation: where it frees
        // more, the plan's steps use it, and all that holds of a plan holds of it.
        let mut cfg = analytics::Config::default();
        let pinned = [
            None,
            Some(Mechanism::DraConsumableCapacity),
            Some(Mechanism::DraSharedClaim),
            None,
            Some(Mechanism::Hami),
            Some(Mechanism::DraDynamicMig),
            Some(Mechanism::KaiFractions),
        ][(seed % 7) as usize];
        if let Some(m) = pinned {
            cfg.mechanisms.insert("random".into(), vec![m]);
        }
        let (a, input) = analysed(&t.store, &fleet, from, to, STEP_MS, cfg).await;
        for m in a.plan.pools.iter().filter_map(|p| p.uses) {
            *per_gpu_pools.entry(m).or_default() += 1;
        }
        let steps: f64 = a.recommendations.iter().map(|r| r.replay.gpus_freed).sum();
        let plan = a.plan.gpus_freed as f64;
        let applied = applied_frees(&a, &input) as f64;
        let listing: Vec<String> = a
            .recommendations
            .iter()
            .map(|r| {
                let moves: Vec<String> = r
                    .moves()
                    .iter()
                    .map(|m| {
                        format!(
                            "{} {} → {}/{}",
                            m.tenant, m.from_gpu, m.to_node, m.to_gpu_index
                        )
                    })
                    .collect();
                format!(
                    "{} {} frees {} (gpus {:?}, tenants {:?}, moves {moves:?})",
                    r.kind.as_str(),
                    r.node,
                    r.replay.gpus_freed,
                    r.gpus,
                    r.tenants
                )
            })
            .collect();
        assert_eq!(
            steps, plan,
            "seed {seed}: the steps add up to {steps}, the plan frees {plan}: {listing:#?}\n{text}"
        );
        assert_eq!(
            applied, plan,
            "seed {seed}: applying every step frees {applied}, the plan says {plan}: {listing:#?}\n{text}"
        );
        // Work still waiting is served wherever the plan changes its pool (one pool here).
        let changes = a
            .recommendations
            .iter()
            .any(|r| r.in_plan() && !r.moves().is_empty());
        let served: BTreeSet<&str> = a
            .recommendations
            .iter()
            .flat_map(|r| r.serves.iter().map(|s| s.pod.as_str()))
            .collect();
        for w in input
            .waiting
            .iter()
            .filter(|w| w.to_ms + 2 * 3_600_000 > input.to_ms)
        {
            assert!(
                !changes || served.contains(w.name.as_str()),
                "seed {seed}: the plan moves tenants but leaves {} waiting: {listing:#?}\n{text}",
                w.name
            );
        }
        waits_served += served.len();
        if let Err(e) = carried_out_in_order(&a, &input) {
            panic!("seed {seed}: {e}: {listing:#?}\n{text}");
        }
        checked_moves += a
            .recommendations
            .iter()
            .map(|r| r.moves().len())
            .sum::<usize>();
    }
    // The fleets do move tenants: the property is not checked on plans that change nothing.
    eprintln!(
        "{seeds} random fleets: {checked_moves} moves checked, {waits_served} waiting pods served, pools planned under a per-GPU mechanism: {per_gpu_pools:?}"
    );
    assert!(checked_moves > 0, "no seed moved a tenant");
    assert!(
        per_gpu_pools.len() >= 2,
        "too few seeds planned under a per-GPU mechanism: {per_gpu_pools:?}"
    );
    assert!(waits_served > 0, "no seed served a waiting pod");
}

/// The GPUs applying every step frees, counted from the placement: each current
/// allocation stays on its GPU, goes with its tenant's move, or goes away with a reclaim.
pub(crate) fn applied_frees(a: &analytics::Analysis, input: &analytics::Input) -> i64 {
    use analytics::RecKind;
    let holdings = analytics::holdings::holdings(input);
    let uuid = uuid_of(input);
    let reclaimed: BTreeSet<(&str, &str)> = a
        .recommendations
        .iter()
        .filter(|r| r.kind == RecKind::Reclaim)
        .flat_map(|r| {
            r.gpus
                .iter()
                .map(move |g| (g.as_str(), r.tenants[0].as_str()))
        })
        .collect();
    let mut moves: HashMap<(&str, &str), &str> = HashMap::new();
    for r in &a.recommendations {
        for m in r.moves() {
            let to = uuid[&(r.cluster.as_str(), m.to_node.as_str(), m.to_gpu_index)];
            moves.insert((m.from_gpu.as_str(), m.tenant.as_str()), to);
        }
    }
    let (mut before, mut after) = (BTreeSet::new(), BTreeSet::new());
    for h in holdings.iter().filter(|h| runs_now(h, input.to_ms)) {
        let key = (h.gpu.as_str(), h.tenant.as_str());
        before.insert(h.gpu.as_str());
        if reclaimed.contains(&key) {
            continue;
        }
        after.insert(moves.get(&key).copied().unwrap_or(h.gpu.as_str()));
    }
    // A GPU kept for a pending pod (whole, or a MIG instance on it) is in use after: the plan
    // serves waiting work first.
    for r in &a.recommendations {
        for s in &r.serves {
            after.insert(s.gpu.as_str());
        }
    }
    // An emptied GPU with unrecovered hardware errors is not freed: the hardware finding's
    // until repaired.
    let held = input
        .health
        .iter()
        .filter(|h| before.contains(h.gpu.as_str()) && !after.contains(h.gpu.as_str()))
        .filter(|h| analytics::findings::unrecovered(h).is_some())
        .count();
    before.len() as i64 - after.len() as i64 - held as i64
}

/// What the plan's steps free, summed as each step says.
pub(crate) fn freed_by_plan_steps(a: &analytics::Analysis) -> f64 {
    a.recommendations
        .iter()
        .filter(|r| a.plan.steps.contains(&r.id))
        .map(|r| r.replay.gpus_freed)
        .sum()
}

/// Whether a holding still runs at the end of the window (an allocation in its last two hours),
/// as the plan's docs define it.
pub(crate) fn runs_now(h: &analytics::holdings::Holding, to_ms: i64) -> bool {
    h.total.alloc_n > 0
        && h.rows
            .iter()
            .rev()
            .take_while(|(hour, _)| hour + 2 * 3_600_000 > to_ms)
            .any(|(_, x)| x.alloc_n > 0)
}

/// Carries out the plan's steps in `plan.steps` order on today's placement and checks that no
/// step fills a GPU — a GPU its moves target, or any GPU of its node for a MIG layout or a
/// sharing config, which reconfigure the node — while a tenant is still on it that a later
/// step takes away; and that the step names every such step in `requires`.
pub(crate) fn carried_out_in_order(
    a: &analytics::Analysis,
    input: &analytics::Input,
) -> Result<(), String> {
    use analytics::{Proposal, RecKind};
    let uuid = uuid_of(input);
    // Who takes (gpu, tenant) away: a reclaim or another step's move.
    let mut taken_by: HashMap<(String, String), &str> = HashMap::new();
    for r in a
        .recommendations
        .iter()
        .filter(|r| r.kind != RecKind::Separate)
    {
        if r.kind == RecKind::Reclaim {
            for g in &r.gpus {
                taken_by.insert((g.clone(), r.tenants[0].clone()), &r.id);
            }
        }
        for m in r.moves() {
            taken_by.insert((m.from_gpu.clone(), m.tenant.clone()), &r.id);
        }
    }
    let mut on: HashMap<String, BTreeSet<String>> = HashMap::new();
    for h in analytics::holdings::holdings(input)
        .iter()
        .filter(|h| runs_now(h, input.to_ms))
    {
        on.entry(h.gpu.clone())
            .or_default()
            .insert(h.tenant.clone());
    }
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for id in &a.plan.steps {
        let Some(r) = a.recommendations.iter().find(|r| &r.id == id) else {
            return Err(format!("plan step {id} is no recommendation"));
        };
        let mut fills: BTreeSet<&str> = r
            .moves()
            .iter()
            .filter_map(|m| {
                uuid.get(&(r.cluster.as_str(), m.to_node.as_str(), m.to_gpu_index))
                    .copied()
            })
            .collect();
        if matches!(
            r.proposal,
            Proposal::MigLayout { .. } | Proposal::Sharing { .. }
        ) {
            fills.extend(
                input
                    .gpus
                    .iter()
                    .filter(|g| g.cluster == r.cluster && g.node == r.node)
                    .map(|g| g.uuid.as_str()),
            );
        }
        for g in &fills {
            for t in on.get(*g).into_iter().flatten() {
                let Some(by) = taken_by.get(&((*g).to_owned(), t.clone())) else {
                    continue;
                };
                if *by == r.id.as_str() || done.contains(by) {
                    continue;
                }
                // Steps that require each other (a swap of tenants between two nodes that
                // both reconfigure) are carried out together: approving one approves both.
                if r.requires.iter().any(|q| q == by) && requires_transitively(a, by, &r.id) {
                    continue;
                }
                if !r.requires.iter().any(|q| q == by) {
                    return Err(format!(
                        "{} {} fills {g} while {t} is on it, which {by} takes away, and does not require it",
                        r.kind.as_str(),
                        r.node
                    ));
                }
                return Err(format!(
                    "{} {} comes before {by}, which it requires",
                    r.kind.as_str(),
                    r.node
                ));
            }
        }
        // Carry it out: what it takes away leaves, what it moves arrives.
        for (k, by) in &taken_by {
            if *by == r.id.as_str()
                && let Some(ts) = on.get_mut(&k.0)
            {
                ts.remove(&k.1);
            }
        }
        for m in r.moves() {
            if let Some(g) = uuid.get(&(r.cluster.as_str(), m.to_node.as_str(), m.to_gpu_index)) {
                on.entry((*g).to_owned())
                    .or_default()
                    .insert(m.tenant.clone());
            }
        }
        done.insert(r.id.as_str());
    }
    Ok(())
}

/// Whether step `from` requires step `to`, directly or through others.
fn requires_transitively(a: &analytics::Analysis, from: &str, to: &str) -> bool {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut todo = vec![from];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(r) = a.recommendations.iter().find(|r| r.id == id) else {
            continue;
        };
        if r.requires.iter().any(|q| q == to) {
            return true;
        }
        todo.extend(r.requires.iter().map(String::as_str));
    }
    false
}

/// The demo's fleet (scenarios/k8s-mixed.toml): every step comes after the steps it requires,
/// the MIG layout names the reclaims of the tenants on the node it reconfigures, and the
/// overview's "What to do first" and the recommendations page list steps in that order.
#[tokio::test]
async fn the_demos_steps_are_listed_in_the_order_they_can_be_carried_out() {
    let to = 1_795_219_200_000;
    let from = to - 2 * 86_400_000;
    let fleet = super::analytics::default_fleet();
    let t = crate::support::sqlite().await;
    let (a, input) = analysed(
        &t.store,
        &fleet,
        from,
        to,
        300_000,
        analytics::Config::default(),
    )
    .await;
    carried_out_in_order(&a, &input).unwrap();
    let mig = a
        .recommendations
        .iter()
        .filter(|r| r.kind == analytics::RecKind::MigLayout)
        .find(|r| !r.requires.is_empty())
        .expect("the demo has a MIG layout that requires other steps");
    let reclaims = mig
        .requires
        .iter()
        .filter(|q| {
            a.recommendations
                .iter()
                .any(|r| &r.id == *q && r.kind == analytics::RecKind::Reclaim)
        })
        .count();
    assert!(reclaims >= 1, "{:?}", mig.requires);
    // The pages: each listed step after the steps it requires that are listed.
    collector::analysis::save(&t.store, &a, to, 5)
        .await
        .unwrap();
    let state = crate::support::default_state(t.store.clone());
    for (uri, marker) in [("/", "#apply\""), ("/recommendations", "\"")] {
        let html = crate::support::page(&state, uri).await;
        let listed: Vec<&str> = html
            .match_indices("href=\"/recommendations/")
            .filter_map(|(i, m)| {
                let rest = &html[i + m.len()..];
                let end = rest.find(marker)?;
                let id = &rest[..end];
                (!id.contains('"') && !id.contains('?')).then_some(id)
            })
            .collect();
        assert!(!listed.is_empty(), "{uri}: no step listed");
        let at = |id: &str| listed.iter().position(|x| *x == id);
        for r in &a.recommendations {
            let Some(i) = at(&r.id) else { continue };
            for q in &r.requires {
                if let Some(j) = at(q) {
                    assert!(
                        j < i,
                        "{uri}: {} listed before {q}, which it requires",
                        r.id
                    );
                } else if uri == "/" {
                    panic!("{uri}: {} is listed without {q}, which it requires", r.id);
                }
            }
        }
    }
    // The reclaim the MIG layout needs says so.
    let needed = a
        .recommendations
        .iter()
        .find(|r| mig.requires.contains(&r.id) && r.kind == analytics::RecKind::Reclaim)
        .unwrap();
    assert!(
        needed.summary.contains("needs it carried out first"),
        "{}",
        needed.summary
    );
}
