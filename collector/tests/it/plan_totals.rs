//! Issue 71: the plan keeps its word on any fleet, not only on the hand-made scenarios. Random
//! H100 fleets — whole GPUs, MIG nodes with instances of several sizes, time-sliced nodes,
//! idle GPUs beside held ones, tenants of every workload pattern — are simulated for half a day,
//! stored and rolled up through the real store, analysed, and for every seed: the plan's total
//! equals the sum of its steps' frees, and both equal what applying every step (its moves and
//! reclaims) to today's placement frees. `GPULENS_PLAN_SEEDS=N` runs N seeds (default 40), from `GPULENS_PLAN_SEED_FIRST` (default 1).

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
    out
}

#[tokio::test]
async fn heavy_random_fleets_free_what_their_steps_add_up_to() {
    let seeds: u64 = std::env::var("GPULENS_PLAN_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - WINDOW_MS;
    let cfg = analytics::Config::default();
    let mut checked_moves = 0;
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
        load_every(&t.store, &fleet, "random", from, to, STEP_MS, &|_| None).await;
        let input =
            collector::analysis::load(&t.store, &cfg, collector::analysis::Span::closed(from, to))
                .await
                .unwrap();
        let a = {
            let (input, cfg) = (input.clone(), cfg.clone());
            tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
                .await
                .unwrap()
                .unwrap()
        };
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
        checked_moves += a
            .recommendations
            .iter()
            .map(|r| r.moves().len())
            .sum::<usize>();
    }
    // The fleets do move tenants: the property is not checked on plans that change nothing.
    eprintln!("{seeds} random fleets: {checked_moves} moves checked");
    assert!(checked_moves > 0, "no seed moved a tenant");
}

/// Issue 43: the GPUs applying every step frees, counted from the placement: each current
/// allocation stays on its GPU, goes with its tenant's move, or goes away with a reclaim.
pub(crate) fn applied_frees(a: &analytics::Analysis, input: &analytics::Input) -> i64 {
    use analytics::RecKind;
    let holdings = analytics::holdings::holdings(input);
    let uuid: HashMap<(&str, &str, i64), &str> = input
        .gpus
        .iter()
        .map(|g| {
            (
                (g.cluster.as_str(), g.node.as_str(), g.index),
                g.uuid.as_str(),
            )
        })
        .collect();
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
    before.len() as i64 - after.len() as i64
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
