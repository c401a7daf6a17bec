//! The analytics against ground truth: every scenario in scenarios/ and tests/scenarios/ is
//! simulated for two days at one sample a minute, stored and rolled up through the real store,
//! analysed, and the findings compared with the tenants' `truth`. Precision and recall for
//! idle_allocation, underutilized and interference, over all scenarios, must be at least 0.9;
//! no recommendation may be one its replay calls harmful; every mig-parted config must be
//! valid for its GPU model.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use analytics::Measure;
use simulator::{Fleet, Scenario};
use store::Store;

use crate::plan_totals::{applied_frees, runs_now};
use crate::support;

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

/// Stores `fleet`'s samples of [from, to), one a minute, as agent `agent` (a second load of the
/// same nodes needs another agent id: sequence numbers restart), and rolls them up.
/// The demo's default fleet (`scenarios/k8s-mixed.toml`).
pub(crate) fn default_fleet() -> Fleet {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/k8s-mixed.toml");
    Fleet::new(Scenario::from_toml(&std::fs::read_to_string(path).unwrap()).unwrap())
}

pub(crate) async fn load(store: &Store, fleet: &Fleet, agent: &str, from: i64, to: i64) {
    load_with_teams(store, fleet, agent, from, to, &|_| None).await;
}

/// `load`, with each tenant's team resolved as the collector would.
pub(crate) async fn load_with_teams(
    store: &Store,
    fleet: &Fleet,
    agent: &str,
    from: i64,
    to: i64,
    team_of: store::TeamOf<'_>,
) {
    load_every(store, fleet, agent, from, to, 60_000, team_of).await;
}

/// `load_with_teams`, one sample every `step` ms.
pub(crate) async fn load_every(
    store: &Store,
    fleet: &Fleet,
    agent: &str,
    from: i64,
    to: i64,
    step: i64,
    team_of: store::TeamOf<'_>,
) {
    let instants: Vec<i64> = (0..)
        .map(|i| from + i * step)
        .take_while(|&t| t < to)
        .collect();
    // Every node's agent at once, each sending its batches in order, as a fleet does: the
    // store commits concurrent batches together.
    let nodes = (0..fleet.nodes.len()).map(|node| {
        let batches: Vec<_> = instants
            .chunks(120)
            .enumerate()
            .map(|(seq, chunk)| {
                let mut b = fleet.batch(node, agent, seq as u64 + 1, chunk, step as u32);
                b.interval_ms = step as u32;
                b
            })
            .collect();
        async move {
            for b in &batches {
                store.ingest(b, to, team_of).await.unwrap();
            }
        }
    });
    futures_util::future::join_all(nodes).await;
    store.rollup(to).await.unwrap();
}

/// Scenario tenant name for every tenant key it had over the range.
pub(crate) fn names(fleet: &Fleet, from: i64, to: i64) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for (i, t) in fleet.scenario.tenants.iter().enumerate() {
        let mut at = from;
        while at < to {
            m.insert(fleet.tenant_record(i, at).key, t.name.clone());
            at += 600_000;
        }
    }
    m
}

const KINDS: [&str; 3] = ["idle_allocation", "underutilized", "interference"];

#[derive(Default, Debug)]
pub(crate) struct Score {
    tp: usize,
    fp: Vec<String>,
    fn_: Vec<String>,
}

/// Simulates, stores and analyses the scenario at `path` in `store` (empty), checks what must
/// hold of every analysis, and adds its findings to `scores`.
pub(crate) async fn check(store: &Store, path: &Path, scores: &mut BTreeMap<&'static str, Score>) {
    let scenario = Scenario::from_toml(&std::fs::read_to_string(path).unwrap()).unwrap();
    let fleet = Fleet::new(scenario.clone());
    // Two whole days ending at a fixed midnight, so results do not depend on the wall clock.
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - 2 * DAY_MS;
    load(store, &fleet, "truth", from, to).await;
    let waiting = collector::commands::demo::waiting_records(&scenario, &|ns| ns.to_owned(), to);
    if !waiting.is_empty() {
        store.record_waiting(&waiting).await.unwrap();
    }
    let seen = collector::commands::demo::mechanism_records(&scenario).unwrap();
    store
        .record_mechanisms(&scenario.cluster, &seen, to)
        .await
        .unwrap();
    let cfg = analytics::Config::default();
    // The rollup kept every hour's pair-hours: the first analysis reads no minutes.
    let mut stats = collector::analysis::LoadStats::default();
    let input = collector::analysis::load_timed(
        store,
        &cfg,
        collector::analysis::Span::closed(from, to),
        &mut stats,
    )
    .await
    .unwrap();
    assert_eq!(
        (stats.pair_hours_measured, stats.minute_rows),
        (0, 0),
        "{}: pair-hours kept by the rollup",
        path.display()
    );
    // Measured from the minutes instead, they are the same.
    store.drop_pair_hours(i64::MIN, i64::MAX).await.unwrap();
    let measured =
        collector::analysis::load(store, &cfg, collector::analysis::Span::closed(from, to))
            .await
            .unwrap();
    assert_eq!(
        by_pair(&measured.pair_hours),
        by_pair(&input.pair_hours),
        "{}: pair-hours kept by the rollup are those measured from minutes",
        path.display()
    );
    // Polars blocks on its own runtime: off the async threads, as the collector runs it.
    let a = {
        let (input, cfg) = (input.clone(), cfg.clone());
        tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
            .await
            .unwrap()
            .unwrap()
    };
    let key_name = names(&fleet, from, to);
    let label = format!("{}", path.display());
    identities_hold(&a, &input, &label);
    energy_is_conserved(&a, &fleet, from, to, &label);
    // A finding's figure reads the same in its summary as the API's value rounds to (the
    // dashboard's Numbers table and chart legend use the same function, tested there).
    for f in &a.findings {
        if let Some(p95) = f.metrics.get(&Measure::EffectiveP95Gpu) {
            let figure = format!("p95 {}", model::figures::gpu(*p95));
            assert!(
                f.summary.contains(&figure),
                "{label}: {figure:?} not in {:?}",
                f.summary
            );
        }
        // The wasted GPU-hours and their cost as the Numbers table (web::format) and the
        // alert's value (the headline's tenths) give them.
        if let (Some(w), Some(cost)) = (
            f.metrics.get(&Measure::WastedGpuHours),
            f.metrics.get(&Measure::WastedCost),
        ) {
            let hours = format!(
                "wasting {} GPU-hours",
                web::format::num(analytics::findings::tenths(*w))
            );
            let money = web::format::money(*cost, &cfg.currency);
            assert!(
                f.summary.contains(&hours) && f.summary.contains(&money),
                "{label}: {hours:?} and {money:?} not in {:?}",
                f.summary
            );
            assert_eq!(f.headline().0, analytics::findings::tenths(*w));
        }
    }
    // The stored form reads back whole (reports and the agents' labels read it).
    let json = serde_json::to_value(&a).unwrap();
    let back: analytics::Analysis = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), json, "{label}");

    for kind in KINDS {
        let found: BTreeSet<String> = a
            .findings
            .iter()
            .filter(|f| f.kind.as_str() == kind)
            .filter_map(|f| key_name.get(&f.tenants[0]).cloned())
            .collect();
        let truth: BTreeSet<String> = scenario
            .tenants
            .iter()
            .filter(|t| t.truth.findings.iter().any(|k| k == kind))
            .map(|t| t.name.clone())
            .collect();
        let s = scores.entry(kind).or_default();
        s.tp += found.intersection(&truth).count();
        s.fp.extend(found.difference(&truth).map(|n| format!("{label}: {n}")));
        s.fn_
            .extend(truth.difference(&found).map(|n| format!("{label}: {n}")));
    }
    // Interference names the right aggressor.
    for f in a
        .findings
        .iter()
        .filter(|f| f.kind.as_str() == "interference")
    {
        let victim = &key_name[&f.tenants[0]];
        let aggressor = &key_name[&f.tenants[1]];
        if let Some(t) = scenario.tenants.iter().find(|t| &t.name == victim)
            && let Some(expected) = &t.truth.victim_of
        {
            assert_eq!(aggressor, expected, "{label}: wrong aggressor for {victim}");
        }
        assert!(f.metrics[&Measure::RateDrop] >= cfg.interference_min_drop);
    }
    for r in &a.recommendations {
        assert!(
            !r.replay.harmful,
            "{label}: harmful recommendation made: {}",
            r.summary
        );
        assert_eq!(
            r.replay.memory_overflow_hours, 0.0,
            "{label}: {}",
            r.summary
        );
        if let analytics::Proposal::MigLayout {
            mig_parted_yaml, ..
        } = &r.proposal
        {
            let gpu = input.gpu(&r.gpus[0]).unwrap();
            let family = analytics::mig::family(&gpu.model).unwrap();
            let config = parse_mig_parted(mig_parted_yaml);
            config
                .validate(family)
                .unwrap_or_else(|e| panic!("{label}: {e}\n{mig_parted_yaml}"));
        }
    }
    // The fleet plan: steps add up to its total, and it frees what the bound allows.
    let plan = &a.plan;
    println!(
        "{label}: plan frees {} of {} GPUs (bound {}, efficiency {:?}), {} of {} nodes, {:.0} {}/month, {} steps",
        plan.gpus_freed,
        plan.gpus_in_use,
        plan.bound_gpus,
        plan.efficiency,
        plan.nodes_freed,
        plan.nodes_in_use,
        plan.money_per_month,
        plan.currency,
        plan.steps.len()
    );
    for p in &plan.pools {
        println!("  pool {p:?}");
    }
    for n in &plan.nodes {
        println!("  node {n:?}");
    }
    for r in &a.recommendations {
        println!(
            "  {} {:?} freed {}: {}",
            r.id, r.kind, r.replay.gpus_freed, r.summary
        );
    }
    for r in &a.rejected {
        println!("  rejected {:?}: {}", r.kind, r.reason);
    }
    for f in a
        .findings
        .iter()
        .filter(|f| f.kind.as_str() == "underutilized")
    {
        println!(
            "  waster {} {:?}: {}",
            key_name.get(&f.tenants[0]).map_or("?", |s| s.as_str()),
            f.severity,
            f.summary
        );
    }
    let by_steps = crate::plan_totals::freed_by_plan_steps(&a);
    assert_eq!(
        by_steps, plan.gpus_freed as f64,
        "{label}: steps do not add up to the plan"
    );
    assert!(
        plan.gpus_after + plan.gpus_freed == plan.gpus_in_use,
        "{label}"
    );
    assert_eq!(
        applied_frees(&a, &input),
        plan.gpus_freed as i64,
        "{label}: applying every step does not free what the plan says"
    );
    assert!(
        plan.bound_gpus <= plan.gpus_after,
        "{label}: the plan beats its own bound"
    );
    // The bound is per-GPU sharing's; node-wide sharing cannot reach it where only per-GPU
    // pinning pairs the tenants.
    if let Some(e) = plan
        .efficiency
        .filter(|_| !label.ends_with("pinned-per-gpu.toml"))
        // The bound is the tenants' demand: it leaves out the MIG instance kept for the
        // pending pod, which costs this plan a GPU.
        .filter(|_| !label.ends_with("waiting-slice.toml"))
    {
        assert!(
            e >= 0.85,
            "{label}: the plan frees {e:.2} of what the bound allows"
        );
    }
    crate::plan_scenarios::plan_steps_as_worked_out(&label, &a, &key_name);
    crate::one_number::one_number_per_fact(&label, &a);
    crate::one_number::per_gpu_worth_as_worked_out(&label, &a);
    crate::one_number::no_tenant_lands_on_a_faulty_gpu(&label, &a, &input);
    crate::per_gpu_plan::in_place_as_worked_out(&label, &a);
    crate::per_gpu_plan::granted_as_allocated(&label, &a, &key_name);
    crate::held_out::every_step_is_tested_on_the_day_it_did_not_see(&label, &a);
    {
        let (label, input, a) = (label.clone(), input.clone(), a.clone());
        tokio::task::spawn_blocking(move || {
            crate::per_gpu_plan::mig_layouts_under_dynamic_mig(&label, &input, &a)
        })
        .await
        .unwrap();
    }
    crate::interrupts::every_step_names_what_it_interrupts(&label, &a, &input);
    if label.ends_with("pinned-per-gpu.toml") {
        let (label, input) = (label.clone(), input.clone());
        tokio::task::spawn_blocking(move || {
            crate::per_gpu_plan::plans_under_what_the_pool_has(&label, &input)
        })
        .await
        .unwrap();
    }
    time_sliced_nodes_are_safe_as_the_device_plugin_runs_them(&label, &a, &input, &cfg);
    // Every finding carries evidence a UI can chart, and a window inside the range.
    for f in &a.findings {
        assert!(!f.evidence.is_empty(), "{label}: {} has no evidence", f.id);
        assert!(f.from_ms <= f.to_ms);
        for e in &f.evidence {
            assert!(
                store::series::Metric::parse(&e.metric).is_some(),
                "{label}: {} charts an unknown metric {}",
                f.id,
                e.metric
            );
            let tenant = e.entity.starts_with("tenant:");
            assert!(
                tenant || e.entity.starts_with("gpu:") || e.entity.starts_with("node:"),
                "{label}: {} charts an unknown entity {}",
                f.id,
                e.entity
            );
            assert_eq!(
                tenant,
                e.cluster.is_some(),
                "{label}: {} {}",
                f.id,
                e.entity
            );
        }
    }
}

/// Every number adds up at every scope (the funnel's groupings and the fleet, and per GPU —
/// a MIG instance is one tenant's holding on its GPU — from the same rows the node page sums):
/// effective ≤ allocated, waste = allocated − effective, a share of at most 100 %.
/// The energy the GPUs drew, summed from the scenario's own samples (the simulator reports
/// power, not a counter: power × the minute each sample stands for), is the funnel's; and what
/// the tenants were charged plus what stayed with the pool is that energy again.
fn energy_is_conserved(a: &analytics::Analysis, fleet: &Fleet, from: i64, to: i64, label: &str) {
    let mut drawn_j = 0.0;
    for node in 0..fleet.nodes.len() {
        for ts in (from..to).step_by(60_000) {
            let (snap, _) = fleet.snapshot(node, ts);
            drawn_j += snap
                .gpus
                .iter()
                .filter_map(|g| g.power_w)
                .map(|w| f64::from(w) * 60.0)
                .sum::<f64>();
        }
    }
    let total = a
        .funnel
        .total
        .energy
        .expect("the scenario's GPUs report power");
    let kwh = drawn_j / 3.6e6;
    assert!(
        (total.kwh - kwh).abs() <= 1e-9 * kwh,
        "{label}: the funnel's {} kWh against the samples' {kwh}",
        total.kwh
    );
    let charged: f64 = a
        .funnel
        .by_tenant
        .iter()
        .filter_map(|r| r.energy)
        .map(|e| e.kwh)
        .sum();
    let pool = total.unallocated_kwh.unwrap();
    assert!(
        (charged + pool - kwh).abs() <= 1e-9 * kwh,
        "{label}: tenants {charged} kWh + the pool {pool} kWh against the {kwh} kWh drawn"
    );
    let teams: f64 = a
        .funnel
        .by_team
        .iter()
        .filter_map(|r| r.energy)
        .map(|e| e.kwh)
        .sum();
    assert!(
        (teams - charged).abs() <= 1e-9 * kwh,
        "{label}: teams {teams} against tenants {charged}"
    );
    assert!(
        total.idle_kwh <= charged + 1e-9,
        "{label}: idle energy {} beyond the charged {charged}",
        total.idle_kwh
    );
}

fn identities_hold(a: &analytics::Analysis, input: &analytics::Input, label: &str) {
    // No finding ends after the window that found it (the newest hour is partial).
    for x in &a.findings {
        assert!(
            x.from_ms <= x.to_ms && x.to_ms <= input.to_ms,
            "{label}: {} ends at {} after the window's end {}",
            x.id,
            x.to_ms,
            input.to_ms
        );
    }
    let f = &a.funnel;
    let scopes = [
        &f.by_cluster,
        &f.by_model,
        &f.by_node,
        &f.by_team,
        &f.by_tenant,
    ];
    for row in scopes.iter().flat_map(|s| s.iter()).chain([&f.total]) {
        assert_eq!(row.identity_error(), None, "{label}");
    }
    let mut per_gpu: BTreeMap<String, analytics::FunnelRow> = BTreeMap::new();
    for h in analytics::holdings::holdings(input) {
        let g = per_gpu.entry(h.gpu.clone()).or_default();
        g.key = h.gpu.clone();
        for (_, t) in &h.rows {
            g.allocated_gpu_hours += t.allocated_gpu_hours();
            g.effective_gpu_hours += t.effective_gpu_hours();
            g.waste_gpu_hours += t.allocated_gpu_hours() - t.effective_gpu_hours();
            g.borrowed_gpu_hours += t.borrowed_gpu_hours();
        }
    }
    for g in per_gpu.values() {
        assert_eq!(g.identity_error(), None, "{label}");
    }
    for scope in scopes {
        let waste: f64 = scope.iter().map(|r| r.waste_gpu_hours).sum();
        assert!(
            (waste - f.total.waste_gpu_hours).abs() < 1e-6 * f.total.allocated_gpu_hours.max(1.0),
            "{label}: a grouping's waste {waste} against the fleet's {}",
            f.total.waste_gpu_hours
        );
    }
}

/// Every time-slicing or MPS step, checked independently of the packer against the
/// worst assignment the device plugin may make. The node's tenants after the plan (those it
/// keeps, minus reclaimed and moved-away ones, plus the ones moved in) number at most
/// replicas × GPUs; any `replicas` of them fit one GPU: their largest memory needs (p99 plus
/// headroom) and, hour by hour, their largest memory peaks fit its memory, and their largest
/// demands pass one GPU in no more hours than the replay tolerates.
fn time_sliced_nodes_are_safe_as_the_device_plugin_runs_them(
    label: &str,
    a: &analytics::Analysis,
    input: &analytics::Input,
    cfg: &analytics::Config,
) {
    use analytics::{Proposal, RecKind};
    let holdings = analytics::holdings::holdings(input);

    let reclaimed: BTreeSet<&str> = a
        .recommendations
        .iter()
        .filter(|r| r.kind == RecKind::Reclaim)
        .flat_map(|r| r.tenants.iter().map(String::as_str))
        .collect();
    let moved_away: BTreeSet<&str> = a
        .recommendations
        .iter()
        .flat_map(|r| r.moves())
        .map(|m| m.tenant.as_str())
        .collect();
    for r in &a.recommendations {
        let Proposal::Sharing { replicas, .. } = &r.proposal else {
            continue;
        };
        let r_n = *replicas as usize;
        let gpus: Vec<&analytics::input::GpuRef> = input
            .gpus
            .iter()
            .filter(|g| g.cluster == r.cluster && g.node == r.node)
            .collect();
        let memory = gpus[0].memory_total_bytes as f64;
        let arriving: BTreeSet<&str> = a
            .recommendations
            .iter()
            .flat_map(|x| x.moves())
            .filter(|m| m.to_node == r.node)
            .map(|m| m.tenant.as_str())
            .collect();
        let tenants: Vec<&analytics::holdings::Holding> = holdings
            .iter()
            .filter(|h| runs_now(h, input.to_ms))
            .filter(|h| h.cluster == r.cluster)
            .filter(|h| {
                let t = h.tenant.as_str();
                (h.node == r.node && !moved_away.contains(t) && !reclaimed.contains(t))
                    || arriving.contains(t)
            })
            .collect();
        assert!(
            tenants.len() <= r_n * gpus.len(),
            "{label}: {} runs {} tenants on {} GPUs × {r_n} replicas",
            r.node,
            tenants.len(),
            gpus.len()
        );
        let top = |mut v: Vec<f64>| -> f64 {
            v.sort_by(|x, y| y.total_cmp(x));
            v.into_iter().take(r_n).sum()
        };
        let needs = top(tenants
            .iter()
            .map(|h| h.mem_p99().unwrap_or(0) as f64 * (1.0 + cfg.memory_headroom))
            .collect());
        assert!(
            needs <= memory * (1.0 + 1e-9),
            "{label}: on {} the {r_n} largest memory needs add up to {:.1} GiB",
            r.node,
            needs / 1073741824.0
        );
        let mut by_hour: BTreeMap<i64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        for h in &tenants {
            for u in h.hours().filter(|u| u.in_demand()) {
                let e = by_hour.entry(u.hour).or_default();
                e.0.push(u.eff_p95.unwrap_or(0.0));
                e.1.push(u.mem_max_bytes.unwrap_or(0) as f64);
            }
        }
        let hours = by_hour.len();
        let mut contended = 0;
        for (hour, (eff, mem)) in by_hour {
            assert!(
                top(mem) <= memory,
                "{label}: on {} the worst {r_n} overflow memory at hour {hour}",
                r.node
            );
            if top(eff) > 1.0 + 1e-9 {
                contended += 1;
            }
        }
        assert!(
            contended as f64 <= analytics::replay::allowed(cfg.replay_tolerance, hours),
            "{label}: on {} the worst {r_n} tenants contend in {contended} of {hours} hours",
            r.node
        );
    }
}

/// Reads a generated mig-parted config back (a small YAML subset: what `to_yaml` writes).
fn parse_mig_parted(y: &str) -> analytics::mig::MigPartedConfig {
    let mut lines = y.lines();
    assert_eq!(lines.next(), Some("version: v1"));
    assert_eq!(lines.next(), Some("mig-configs:"));
    let name = lines
        .next()
        .unwrap()
        .trim()
        .trim_end_matches(':')
        .to_owned();
    let mut entries: Vec<analytics::mig::MigPartedEntry> = Vec::new();
    for l in lines {
        let l = l.trim();
        if let Some(d) = l.strip_prefix("- devices: [") {
            let devices = d
                .trim_end_matches(']')
                .split(", ")
                .map(|x| x.parse().unwrap())
                .collect();
            entries.push(analytics::mig::MigPartedEntry {
                devices,
                mig_enabled: false,
                mig_devices: vec![],
            });
        } else if let Some(v) = l.strip_prefix("mig-enabled: ") {
            entries.last_mut().unwrap().mig_enabled = v == "true";
        } else if let Some((p, c)) = l.split_once("\": ") {
            let p = p.trim_start_matches('"').to_owned();
            entries
                .last_mut()
                .unwrap()
                .mig_devices
                .push((p, c.parse().unwrap()));
        }
    }
    analytics::mig::MigPartedConfig { name, entries }
}

/// Pair-hours in a fixed order, whichever way they were read.
fn by_pair(rows: &[model::pair_hours::PairHour]) -> Vec<model::pair_hours::PairHour> {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| {
        (&a.node, &a.gpu, &a.victim, &a.aggressor, a.hour).cmp(&(
            &b.node,
            &b.gpu,
            &b.victim,
            &b.aggressor,
            b.hour,
        ))
    });
    rows
}

/// The rollup keeps every hour's pair-hours; where they are missing the analysis measures and
/// keeps them; an hour whose rollups change after its pair-hours were kept (late samples
/// written around the rollup) is measured again, and only that hour; other thresholds measure
/// every hour again.
#[tokio::test]
async fn kept_pair_hours_are_measured_again_when_their_hour_changes() {
    let t = support::sqlite().await;
    let fleet = default_fleet();
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - DAY_MS / 4;
    load(&t.store, &fleet, "late", from, to).await;
    let cfg = analytics::Config::default();
    let load_stats = |cfg: analytics::Config| {
        let store = t.store.clone();
        async move {
            let mut stats = collector::analysis::LoadStats::default();
            let input = collector::analysis::load_timed(
                &store,
                &cfg,
                collector::analysis::Span::closed(from, to),
                &mut stats,
            )
            .await
            .unwrap();
            (input, stats)
        }
    };
    let (kept, s0) = load_stats(cfg.clone()).await;
    assert!(!kept.pair_hours.is_empty(), "the default fleet shares GPUs");
    assert_eq!(
        (s0.pair_hours_measured, s0.minute_rows),
        (0, 0),
        "kept by the rollup"
    );
    // Without what the rollup kept, the analysis measures from minutes, and keeps that.
    t.store.drop_pair_hours(i64::MIN, i64::MAX).await.unwrap();
    let (first, s1) = load_stats(cfg.clone()).await;
    assert_eq!(by_pair(&first.pair_hours), by_pair(&kept.pair_hours));
    assert!(s1.pair_hours_measured > 0 && s1.minute_rows > 0);
    let (_, s2) = load_stats(cfg.clone()).await;
    assert_eq!((s2.pair_hours_measured, s2.minute_rows), (0, 0));
    assert_eq!(s2.pair_hours_kept, s1.pair_hours_measured);
    // A late sample lands in one hour of the node whose pair-hours were kept.
    let p = &first.pair_hours[0];
    let mut hours = t
        .store
        .rollups(
            store::Rollups::Hour,
            &p.cluster,
            &p.node,
            p.hour,
            p.hour + HOUR_MS,
        )
        .await
        .unwrap();
    hours.gpus.values_mut().next().unwrap().samples += 1;
    t.store
        .write_rollups(
            store::Rollups::Hour,
            &p.cluster,
            &p.node,
            p.hour,
            p.hour + HOUR_MS,
            &hours,
        )
        .await
        .unwrap();
    let (third, s3) = load_stats(cfg.clone()).await;
    assert_eq!(s3.pair_hours_measured, 1, "only the changed node-hour");
    assert_eq!(s3.pair_hours_kept, s1.pair_hours_measured - 1);
    assert_eq!(by_pair(&third.pair_hours), by_pair(&first.pair_hours));
    // Other thresholds: nothing kept holds.
    let other = analytics::Config {
        saturation: cfg.saturation - 0.05,
        ..cfg.clone()
    };
    let (_, s4) = load_stats(other).await;
    assert_eq!(s4.pair_hours_kept, 0);
    assert!(s4.pair_hours_measured > 0);
}

#[tokio::test]
async fn heavy_findings_match_ground_truth() {
    let files = scenario_files();
    let mut scores = BTreeMap::new();
    for f in &files {
        let t = support::sqlite().await;
        check(&t.store, f, &mut scores).await;
    }
    let (ok, report) = verdict(&scores);
    println!("{report}");
    assert!(ok, "below 0.9:\n{report}");
}

/// The scenario files: every one, or those GPULENS_SCENARIO=name narrows a local run to (CI
/// runs them all).
pub(crate) fn scenario_files() -> Vec<std::path::PathBuf> {
    scenario_files_in(&["scenarios", "tests/scenarios"])
}

/// The scenario files of `dirs` (relative to the repository's root), as [`scenario_files`].
pub(crate) fn scenario_files_in(dirs: &[&str]) -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<_> = dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3 * dirs.len(), "{files:?}");
    if let Ok(only) = std::env::var("GPULENS_SCENARIO") {
        files.retain(|f| f.to_string_lossy().contains(&only));
    }
    files
}

/// Whether precision and recall of every kind are at least 0.9 (with a true positive each),
/// and the scores in words.
pub(crate) fn verdict(scores: &BTreeMap<&'static str, Score>) -> (bool, String) {
    let mut report = String::new();
    let mut ok = true;
    for (kind, s) in scores {
        let precision = s.tp as f64 / (s.tp + s.fp.len()).max(1) as f64;
        let recall = s.tp as f64 / (s.tp + s.fn_.len()).max(1) as f64;
        report += &format!(
            "{kind}: tp {} precision {precision:.2} recall {recall:.2}\n  false positives {:?}\n  missed {:?}\n",
            s.tp, s.fp, s.fn_
        );
        ok &= precision >= 0.9 && recall >= 0.9 && s.tp > 0;
    }
    (ok, report)
}

/// A fleet of several clusters analysed one cluster at a time — as the scheduled analysis and
/// the on-demand range run it, holding one cluster's series at once — reads as the analysis of
/// the whole fleet at once: the same findings, steps, plan, outcomes and limitations, and a
/// funnel whose lines are the same sums. The three scenarios of scenarios/ are three clusters
/// of one store, on SQLite and (where the suite has one) PostgreSQL.
#[tokio::test]
async fn heavy_a_fleet_analysed_cluster_by_cluster_reads_as_one_analysis() {
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - 2 * DAY_MS;
    let mut stores = vec![support::sqlite().await];
    stores.extend(support::postgres().await);
    for t in &stores {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        for name in ["k8s-mixed", "slurm-hpc", "small-lab"] {
            let text = std::fs::read_to_string(root.join(format!("{name}.toml"))).unwrap();
            let fleet = Fleet::new(Scenario::from_toml(&text).unwrap());
            load(&t.store, &fleet, "clusters", from, to).await;
        }
        let cfg = analytics::Config::default();
        let input =
            collector::analysis::load(&t.store, &cfg, collector::analysis::Span::closed(from, to))
                .await
                .unwrap();
        assert_eq!(input.clusters().len(), 3, "{:?}", input.clusters());
        let whole = {
            let cfg = cfg.clone();
            tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
                .await
                .unwrap()
                .unwrap()
        };
        // Read every cluster in its parts, packed into reads of at most 8 GPUs.
        let in_parts = analytics::Config {
            part_gpus: 8,
            ..cfg.clone()
        };
        let (parts, stats) = collector::analysis::run(
            &t.store,
            &in_parts,
            std::time::Duration::from_millis((2 * DAY_MS) as u64),
            to,
        )
        .await
        .unwrap();
        let backend = t.store.backend();
        assert!(
            stats.gpu_hours > 0 && stats.tenant_hours > 0,
            "{backend}: {stats:?}"
        );
        // At least one cluster's pools share nothing, so it is read and analysed in parts.
        assert!(stats.parts > 3, "{backend}: {stats:?}");
        assert!(
            !whole.findings.is_empty() && !whole.plan.steps.is_empty(),
            "{backend}"
        );
        assert_eq!(parts.mig_unmeasured, whole.mig_unmeasured, "{backend}");
        // The scheduled pass also forecasts (over the fleet, after the parts merge).
        assert!(parts.forecast.is_some(), "{backend}");
        let without_funnel = |a: &analytics::Analysis| {
            let mut v = serde_json::to_value(a).unwrap();
            v.as_object_mut().unwrap().remove("funnel");
            v.as_object_mut().unwrap().remove("forecast");
            v
        };
        assert_eq!(without_funnel(&parts), without_funnel(&whole), "{backend}");
        assert_eq!(whole.funnel.by_cluster.len(), 3, "{backend}");
        assert_eq!(
            whole.funnel.lines().count(),
            parts.funnel.lines().count(),
            "{backend}"
        );
        for (w, p) in whole.funnel.lines().zip(parts.funnel.lines()) {
            assert_eq!(w.differs_from(p), None, "{backend}");
        }
    }
}
