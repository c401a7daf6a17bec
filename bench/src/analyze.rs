//! `gpulens bench analyze`: the analysis of a filled fleet at one or more sizes — the default
//! scenario copied until it has the GPUs asked for, days of rollups made by the collector's own
//! rollup code — timed as the scheduled job runs it, load and analysis apart, with peak RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use model::figures::count;
use model::inventory::Sharing;
use model::rollup;
use store::{Rollups, Store};

use crate::phase::median;

#[derive(Debug, clap::Args)]
pub struct AnalyzeBench {
    /// The database to fill and analyse: a scratch PostgreSQL database (postgres://…) or a
    /// SQLite file (sqlite://…). It must hold nothing but this benchmark's fleet. With several
    /// `--gpus` sizes each size fills its own: `{gpus}` in the URL is replaced by the size
    /// (e.g. postgres://…/bench_{gpus}; create PostgreSQL databases first).
    #[arg(long, env = "GPULENS_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Fleet sizes, comma-separated, smallest first (e.g. 1000,4000,10000): each has at least
    /// this many GPUs — the default scenario (scenarios/k8s-mixed.toml, 20 GPUs) copied until
    /// the fleet has them. Several sizes end with a growth table.
    #[arg(long, default_value = "1000", value_delimiter = ',', num_args = 1..)]
    pub gpus: Vec<usize>,
    /// Days of history, which is also the analysed window.
    #[arg(long, default_value_t = 7)]
    pub days: i64,
    /// Sample spacing of the simulated history the rollups are computed from.
    #[arg(long, default_value = "60s", value_parser = model::time::parse_duration)]
    pub interval: Duration,
    /// Days (the most recent) whose minute rollups the fill writes (what a large fleet's disk
    /// allows: minutes are most of a fill's size; the analysis reads none where the pair-hours
    /// the rollup kept hold). At most --days, which is the default.
    #[arg(long)]
    pub minute_days: Option<i64>,
    /// Drops the pair-hours the rollup kept for the days with minutes before the first round,
    /// so that it measures them from minutes, as on a history rolled up by a gpulens before
    /// the rollup kept them or read under other thresholds (then they are kept again).
    #[arg(long)]
    pub measure_first: bool,
    /// Analyses to time; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Splits each fleet into clusters of at most this many GPUs (bench-analyze-01, -02, …,
    /// each the default scenario copied), as a large fleet runs: the analysis reads and
    /// analyses one cluster at a time, so its memory follows the largest cluster. Without it
    /// the fleet is one cluster. A database filled one way is not reused the other.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub cluster_gpus: Option<u64>,
    /// Per-GPU sharing mechanisms every cluster of the fleet has, comma-separated (e.g.
    /// dra_consumable_capacity), as `[analytics.mechanisms]` would configure them: the plan is
    /// then timed where it lays pools out under them. Without it, none.
    #[arg(long, value_delimiter = ',', value_parser = analytics::mechanism::Mechanism::from_name)]
    pub mechanisms: Vec<analytics::mechanism::Mechanism>,
    /// The held-out part (`[analytics] held_out`): the analysis also makes the plan without
    /// the window's most recent part and replays it there. `0s` times the analysis without
    /// it, the baseline held-out replay adds to.
    #[arg(long, default_value = "24h", value_parser = model::time::parse_duration)]
    pub held_out: std::time::Duration,
    /// How far ahead steps are checked against their tenants' memory trends (`[analytics]
    /// ahead`); `0s` times the analysis without the check.
    #[arg(long, default_value = "7d", value_parser = model::time::parse_duration)]
    pub ahead: std::time::Duration,
    /// The demand forecast's history (`[analytics] forecast_history`); `0s` times the analysis
    /// without a forecast. The fill holds `--days` of history, so a longer one reads those.
    #[arg(long, default_value = "28d", value_parser = model::time::parse_duration)]
    pub forecast_history: std::time::Duration,
}

/// The analysis configuration the bench times: the defaults, with `--mechanisms` in place in
/// every cluster of `fleets` and the held-out part, look ahead and forecast history given.
fn bench_config(
    fleets: &[std::sync::Arc<simulator::Fleet>],
    args: &AnalyzeBench,
) -> analytics::Config {
    let mechanisms = &args.mechanisms;
    let mut cfg = analytics::Config {
        held_out: args.held_out,
        ahead: args.ahead,
        forecast_history: args.forecast_history,
        ..analytics::Config::default()
    };
    for f in fleets.iter().filter(|_| !mechanisms.is_empty()) {
        cfg.mechanisms
            .insert(f.scenario.cluster.clone(), mechanisms.to_vec());
    }
    cfg
}

impl AnalyzeBench {
    /// Days of minute rollups the fill writes: `--minute-days`, at most `--days` (the default).
    fn minute_days(&self) -> i64 {
        self.minute_days.unwrap_or(self.days).clamp(0, self.days)
    }
}

/// The fleet `bench analyze` uses: the default scenario copied until it has `gpus` GPUs.
pub(crate) fn analyze_fleet(gpus: usize) -> anyhow::Result<simulator::Fleet> {
    let base = simulator::Scenario::from_toml(collector::simulate::DEFAULT_SCENARIO)?;
    let per_copy = simulator::Fleet::new(base.clone()).gpu_count().max(1);
    let mut scenario = base.replicated(gpus.div_ceil(per_copy).max(1));
    scenario.cluster = "bench-analyze".into();
    Ok(simulator::Fleet::new(scenario))
}

/// The fleet as clusters of at most `cluster_gpus` GPUs each (at least one copy of the
/// default scenario), `gpus` in all: `bench-analyze-01`, `-02`, … with their own seeds. One
/// cluster, [`analyze_fleet`], without a size.
fn analyze_clusters(
    gpus: usize,
    cluster_gpus: Option<u64>,
) -> anyhow::Result<Vec<std::sync::Arc<simulator::Fleet>>> {
    let Some(cluster_gpus) = cluster_gpus else {
        return Ok(vec![std::sync::Arc::new(analyze_fleet(gpus)?)]);
    };
    let base = simulator::Scenario::from_toml(collector::simulate::DEFAULT_SCENARIO)?;
    let per_copy = simulator::Fleet::new(base.clone()).gpu_count().max(1);
    let copies = gpus.div_ceil(per_copy).max(1);
    let per_cluster = (usize::try_from(cluster_gpus).unwrap_or(usize::MAX) / per_copy).max(1);
    let clusters = copies.div_ceil(per_cluster);
    anyhow::ensure!(
        clusters <= 999,
        "{clusters} clusters of {cluster_gpus} GPUs: at most 999 (raise --cluster-gpus)"
    );
    Ok((0..clusters)
        .map(|i| {
            let mut scenario = base.replicated(per_cluster.min(copies - i * per_cluster));
            scenario.cluster = format!("bench-analyze-{:02}", i + 1);
            scenario.seed = base.seed.wrapping_add(i as u64);
            std::sync::Arc::new(simulator::Fleet::new(scenario))
        })
        .collect())
}

/// One node's simulated samples as the raw rows a rollup reads, and the tenants seen.
/// One node's simulated samples at `instants` as raw rows, with the tenants they name.
fn raw_rows(
    fleet: &simulator::Fleet,
    node: usize,
    instants: &[i64],
    interval_ms: i32,
) -> (rollup::RawRows, Vec<model::Tenant>) {
    let mut raw = rollup::RawRows::default();
    let mut tenants = Vec::new();
    for &ts in instants {
        let (snap, seen) = fleet.snapshot(node, ts);
        tenants.extend(seen);
        raw.push(&snap, interval_ms);
    }
    (raw, tenants)
}

/// Fills the store with `days` of rollups ending at the current hour: the fleet's inventory
/// and tenants through the store's ingest (one snapshot per node), then per node and day the
/// simulated samples aggregated by the collector's own rollup code. Minute rows are written
/// for shared GPUs (time-slicing, MPS, MIG), the only ones whose minutes the analysis reads;
/// hour rows for all. Returns (hour rows, minute rows).
pub(crate) async fn fill_analyze(
    store: &Store,
    fleet: &std::sync::Arc<simulator::Fleet>,
    days: i64,
    minute_days: i64,
    interval_ms: i64,
    to: i64,
) -> anyhow::Result<(usize, usize)> {
    let cluster = fleet.scenario.cluster.clone();
    let from = to - days * 86_400_000;
    let started = Instant::now();
    let mut hour_rows = 0;
    let mut minute_rows = 0;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut pending = tokio::task::JoinSet::new();
    let mut jobs = (0..fleet.nodes.len()).flat_map(|n| (0..days).map(move |d| (n, d)));
    let mut done = 0;
    let total = fleet.nodes.len() as i64 * days;
    let mut tenants: Vec<BTreeMap<String, model::Tenant>> =
        vec![BTreeMap::new(); fleet.nodes.len()];
    loop {
        while pending.len() < workers {
            let Some((node, day)) = jobs.next() else {
                break;
            };
            let fleet = fleet.clone();
            pending.spawn_blocking(move || {
                let start = from + day * 86_400_000;
                let instants: Vec<i64> = (start..start + 86_400_000)
                    .step_by(interval_ms as usize)
                    .collect();
                let (raw, tenants) = raw_rows(&fleet, node, &instants, interval_ms as i32);
                let minutes = raw.aggregate(rollup::MINUTE_MS);
                let hours = rollup::to_hours(&minutes);
                (node, start, minutes, hours, tenants)
            });
        }
        let Some(next) = pending.join_next().await else {
            break;
        };
        let (node, start, minutes, hours, t) = next?;
        let spec = &fleet.nodes[node].spec;
        let end = start + 86_400_000;
        let write =
            |width, rollups| store.write_rollups(width, &cluster, &spec.name, start, end, rollups);
        write(Rollups::Hour, &hours).await?;
        hour_rows += hours.gpus.len() + hours.tenants.len();
        // What the rollup keeps as it merges each hour: the node's pair-hours.
        let mig = spec.sharing == Sharing::Mig;
        let pt = model::pair_hours::PairThresholds::default();
        let gpus = &fleet.nodes[node].gpus;
        let mark = pt.mark(gpus.iter().map(|g| g.uuid.as_str()).filter(|_| mig));
        let (rows, marks) = model::pair_hours::node_pair_hours(
            &cluster,
            &spec.name,
            &minutes,
            &hours,
            &|_| mig,
            &pt,
            &mark,
        );
        store
            .keep_pair_hours(&cluster, &spec.name, &marks, &rows)
            .await?;
        // Minutes of shared GPUs only (the analysis reads none of a GPU no two tenants share),
        // and of the last --minute-days.
        if spec.sharing != Sharing::Exclusive && end > to - minute_days * 86_400_000 {
            write(Rollups::Minute, &minutes).await?;
            minute_rows += minutes.gpus.len() + minutes.tenants.len();
        }
        tenants[node].extend(t.into_iter().map(|t| (t.key.clone(), t)));
        done += 1;
        if done % 50 == 0 || done == total {
            eprint!(
                "\r  {done}/{total} node-days, {hour_rows} hour rows, {minute_rows} minute rows, {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!();
    report_now(store, fleet, interval_ms, Some(tenants)).await?;
    Ok((hour_rows, minute_rows))
}

/// Every node's latest sample, taken now, through the store's ingest, as a live agent leaves
/// it: inventory, tenants (all those of the history, when given) and `last_seen`, so that no
/// node of the fleet reads as silent.
async fn report_now(
    store: &Store,
    fleet: &simulator::Fleet,
    interval_ms: i64,
    mut tenants: Option<Vec<BTreeMap<String, model::Tenant>>>,
) -> anyhow::Result<()> {
    let team = |_: &model::Tenant| None;
    let now = model::time::now_ms();
    for node in 0..fleet.nodes.len() {
        let mut b = fleet.batch(
            node,
            "bench-analyze",
            now as u64,
            &[now - interval_ms],
            interval_ms as u32,
        );
        if let Some(t) = tenants.as_mut() {
            b.tenants = std::mem::take(&mut t[node]).into_values().collect();
        }
        store.ingest(&b, now, &team).await?;
    }
    Ok(())
}

/// The run's first line: the fleet, its clusters, the window, the backend and the rounds.
async fn print_heading(
    store: &Store,
    fleets: &[std::sync::Arc<simulator::Fleet>],
    args: &AnalyzeBench,
) -> anyhow::Result<()> {
    let backend = backend_name(store).await?;
    let gpus: usize = fleets.iter().map(|f| f.gpu_count()).sum();
    let nodes: usize = fleets.iter().map(|f| f.nodes.len()).sum();
    let clusters = match fleets.len() {
        1 => String::new(),
        n => format!(
            " in {n} clusters of at most {} GPUs",
            fleets.iter().map(|f| f.gpu_count()).max().unwrap_or(0)
        ),
    };
    println!(
        "analyze benchmark: {gpus} GPUs on {nodes} nodes{clusters}, {} days, backend {backend}, {} rounds",
        args.days, args.rounds
    );
    Ok(())
}

/// The backend as the report names it: a Citus coordinator with its worker count.
async fn backend_name(store: &Store) -> anyhow::Result<String> {
    Ok(match store.citus_workers().await? {
        Some(1) => format!("{} (Citus, 1 worker)", store.backend()),
        Some(n) => format!("{} (Citus, {n} workers)", store.backend()),
        None => store.backend().to_owned(),
    })
}

/// Resets the kernel's peak-RSS counter (VmHWM) of this process, so a later reading covers
/// only what follows.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

pub async fn analyze(args: AnalyzeBench) -> anyhow::Result<()> {
    anyhow::ensure!(args.days >= 1, "--days must be at least 1");
    anyhow::ensure!(args.rounds >= 1, "--rounds must be at least 1");
    anyhow::ensure!(
        !args.gpus.is_empty() && args.gpus.iter().all(|&g| g >= 1),
        "--gpus takes sizes of at least 1 GPU"
    );
    anyhow::ensure!(
        args.gpus.len() == 1 || args.database_url.contains("{gpus}"),
        "several --gpus sizes need {{gpus}} in --database-url: each size fills its own scratch database"
    );
    let interval_ms = args.interval.as_millis() as i64;
    anyhow::ensure!(
        (1_000..=3_600_000).contains(&interval_ms) && 86_400_000 % interval_ms == 0,
        "--interval must divide a day and lie between 1s and 1h"
    );
    let mut sizes = Vec::new();
    for &gpus in &args.gpus {
        let url = args.database_url.replace("{gpus}", &gpus.to_string());
        sizes.push(one_size(&args, &url, gpus, interval_ms).await?);
    }
    if sizes.len() > 1 {
        print_growth(&sizes);
    }
    Ok(())
}

/// What one fleet size measured (medians of the rounds after the first where there are some).
struct SizeResult {
    gpus: usize,
    nodes: usize,
    fill_s: Option<f64>,
    first_s: f64,
    load_s: f64,
    analyze_s: f64,
    total_s: f64,
    peak_mib: Option<f64>,
}

/// Prints one round's times and peak memory (to stderr, beside the fill's progress).
fn report_round(round: usize, stats: &collector::analysis::LoadStats, round_peak: Option<f64>) {
    eprintln!(
        "  round {}: peak RSS {:.0} MiB after the load, {:.0} MiB in the round",
        round,
        stats.peak_after_load_mib.unwrap_or(0.0),
        round_peak.unwrap_or(0.0)
    );
    eprintln!(
        "  round {}: load {:.2} s (inventory {:.2}, hours {:.2}, pair-hours {:.2} [{} node-hours kept, {} measured from {} minute rows], health {:.2}), analysis {:.2} s, forecast {:.2} s",
        round,
        stats.load.as_secs_f64(),
        stats.load_inventory.as_secs_f64(),
        stats.load_hours.as_secs_f64(),
        stats.load_pair_hours.as_secs_f64(),
        stats.pair_hours_kept,
        stats.pair_hours_measured,
        stats.minute_rows,
        stats.load_health.as_secs_f64(),
        stats.analyze.as_secs_f64(),
        stats.forecast.as_secs_f64()
    );
}

/// Fills (or reuses) one size's database, times the rounds and prints them.
/// Each round's times (s), the last round's analysis and what it read, and the highest peak
/// RSS of a round.
struct Rounds {
    load: Vec<f64>,
    analyze: Vec<f64>,
    total: Vec<f64>,
    forecast: Vec<f64>,
    held_out: Vec<f64>,
    last: Option<(analytics::Analysis, collector::analysis::LoadStats)>,
    peak_mib: Option<f64>,
}

/// Times `n` scheduled analyses of the window ending at `to`.
async fn rounds(
    store: &Store,
    thresholds: &analytics::Config,
    window: Duration,
    to: i64,
    n: usize,
) -> anyhow::Result<Rounds> {
    let mut r = Rounds {
        load: Vec::new(),
        analyze: Vec::new(),
        total: Vec::new(),
        forecast: Vec::new(),
        held_out: Vec::new(),
        last: None,
        peak_mib: None,
    };
    for round in 0..n {
        // Each round's own peak: after its load, and over the whole round.
        reset_peak_rss();
        let (analysis, stats) = collector::analysis::run(store, thresholds, window, to).await?;
        let round_peak = model::own_usage::peak_rss_mib();
        r.peak_mib = match (r.peak_mib, round_peak) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        report_round(round + 1, &stats, round_peak);
        r.load.push(stats.load.as_secs_f64());
        r.analyze.push(stats.analyze.as_secs_f64());
        r.forecast.push(stats.forecast.as_secs_f64());
        r.held_out.push(analysis.held_out_secs);
        r.total
            .push((stats.load + stats.analyze + stats.forecast).as_secs_f64());
        r.last = Some((analysis, stats));
    }
    Ok(r)
}

/// The parts of the later rounds' time told apart: the plan, held-out replay, the forecast.
fn print_parts(
    args: &AnalyzeBench,
    plan: Vec<f64>,
    mut held_out: Vec<f64>,
    mut forecast: Vec<f64>,
    forecast_hours: usize,
) {
    println!(
        "  of which the plan   median {:>7.2} s (holdings, packing, steps, replays)",
        median(plan)
    );
    println!(
        "  of which held-out   median {:>7.2} s (the plan without the last {} and its replay on it)",
        median(if held_out.len() > 1 {
            held_out.split_off(1)
        } else {
            held_out
        }),
        model::figures::count(args.held_out.as_secs_f64() / 3600.0, "hour", "hours")
    );
    println!(
        "  demand forecast     median {:>7.2} s ({} pool-team-hours of history read and fitted; in load + analysis)",
        median(if forecast.len() > 1 {
            forecast.split_off(1)
        } else {
            forecast
        }),
        forecast_hours
    );
}

async fn one_size(
    args: &AnalyzeBench,
    url: &str,
    gpus: usize,
    interval_ms: i64,
) -> anyhow::Result<SizeResult> {
    let store = Store::connect(url).await?;
    store.migrate().await?;
    let fleets = analyze_clusters(gpus, args.cluster_gpus)?;
    let to = rollup::bucket_of(model::time::now_ms(), rollup::HOUR_MS);
    let fill_s = ensure_filled(&store, &fleets, args, url, interval_ms, to).await?;
    // The window ends where the filled history does, whenever the database was filled: a
    // reused fill analysed in a later hour would otherwise lose its last hours (and with them
    // every holding the plan counts as current).
    let to = data_end(&store, &fleets[0], to).await?;
    let gpu_count: usize = fleets.iter().map(|f| f.gpu_count()).sum();
    let node_count: usize = fleets.iter().map(|f| f.nodes.len()).sum();
    let peak_tracked = reset_peak_rss();
    let rss_before = model::own_usage::peak_rss_mib();
    let thresholds = bench_config(&fleets, args);
    let window = Duration::from_millis((args.days * 86_400_000) as u64);
    // A new process on a filled history: the first round reads the pair-hours the rollup kept,
    // unless told to measure those of the minute days (see --measure-first).
    let minute_days = args.minute_days();
    if args.measure_first {
        store
            .drop_pair_hours(to - minute_days * 86_400_000, i64::MAX)
            .await?;
    }
    let Rounds {
        mut load,
        mut analyze,
        mut total,
        forecast,
        held_out,
        last,
        peak_mib,
    } = rounds(&store, &thresholds, window, to, args.rounds).await?;
    let (analysis, stats) = last.expect("at least one round");
    let peak_mib = if peak_tracked {
        peak_mib
    } else {
        model::own_usage::peak_rss_mib()
    };
    let plan = time_plan(&store, &thresholds, window, to, args.rounds).await?;
    print_heading(&store, &fleets, args).await?;
    if !args.mechanisms.is_empty() {
        let names: Vec<&str> = args.mechanisms.iter().map(|m| m.as_str()).collect();
        println!("per-GPU sharing every cluster has: {}", names.join(", "));
    }
    println!(
        "  input: {} GPU-hour rows, {} tenant-hour rows, {} pair-hour rows; {} minute rows read in the last round, in {} parts read one at a time",
        stats.gpu_hours, stats.tenant_hours, stats.pair_hours, stats.minute_rows, stats.parts
    );
    println!(
        "  output: {} findings, {} recommendations, {} rejected by replay; the plan frees {} of {} GPUs",
        analysis.findings.len(),
        analysis.recommendations.len(),
        analysis.rejected.len(),
        analysis.plan.gpus_freed,
        analysis.plan.gpus_in_use
    );
    let first_s = total[0];
    println!(
        "  first round ({}): load {:.2} s, analysis {:.2} s, load + analysis {:.2} s",
        if !args.measure_first {
            "a new process: pair-hours the rollup kept".to_owned()
        } else if minute_days == args.days {
            "no kept pair-hours: every hour measured from minutes, then kept".to_owned()
        } else {
            format!(
                "hours of the last {minute_days} days measured from minutes, then kept; older ones kept by the rollup"
            )
        },
        load[0],
        analyze[0],
        total[0]
    );
    if args.rounds >= 2 {
        println!(
            "  later rounds ({}, reading kept pair-hours):",
            args.rounds - 1
        );
        (load, analyze, total) = (load.split_off(1), analyze.split_off(1), total.split_off(1));
    }
    let (load_s, analyze_s, total_s) = (median(load), median(analyze), median(total));
    println!("  load from store     median {load_s:>7.2} s");
    println!("  analysis            median {analyze_s:>7.2} s");
    println!("  load + analysis     median {total_s:>7.2} s");
    println!(
        "  first round / later {:>7.2}x",
        first_s / total_s.max(1e-9)
    );
    print_parts(args, plan, held_out, forecast, stats.forecast_hours);
    match (peak_tracked, peak_mib) {
        (true, Some(peak)) => println!(
            "  peak RSS during the rounds {:>7.0} MiB (before them {:.0} MiB)",
            peak,
            rss_before.unwrap_or(0.0)
        ),
        (_, Some(peak)) => println!(
            "  peak RSS of the process {:>7.0} MiB (includes the fill: the peak counter could not be reset)",
            peak
        ),
        _ => println!("  peak RSS: not available on this system"),
    }
    Ok(SizeResult {
        gpus: gpu_count,
        nodes: node_count,
        fill_s,
        first_s,
        load_s,
        analyze_s,
        total_s,
        peak_mib: peak_mib.filter(|_| peak_tracked),
    })
}

/// The sizes side by side, with time and memory as ratios to the smallest.
fn print_growth(sizes: &[SizeResult]) {
    println!("\ngrowth (medians of the later rounds; ratios against the first size):");
    println!(
        "  {:>7} {:>6} {:>8} {:>12} {:>8} {:>9} {:>15} {:>10} {:>11}",
        "GPUs",
        "nodes",
        "fill s",
        "first round",
        "load s",
        "analysis",
        "load+analysis",
        "peak MiB",
        "time, RSS"
    );
    let base = &sizes[0];
    for s in sizes {
        let peak = s.peak_mib.map_or("-".to_owned(), |p| format!("{p:.0}"));
        let rss_ratio = match (s.peak_mib, base.peak_mib) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".to_owned(),
        };
        println!(
            "  {:>7} {:>6} {:>8} {:>12.2} {:>8.2} {:>9.2} {:>15.2} {:>10} {:>5.2}, {}",
            s.gpus,
            s.nodes,
            s.fill_s.map_or("reused".to_owned(), |f| format!("{f:.0}")),
            s.first_s,
            s.load_s,
            s.analyze_s,
            s.total_s,
            peak,
            s.total_s / base.total_s.max(1e-9),
            rss_ratio
        );
    }
}

/// The benchmark's fleet in the database: reused when all its nodes are there, filled when
/// the database is empty, refused when it holds anything else.
async fn ensure_filled(
    store: &Store,
    fleets: &[std::sync::Arc<simulator::Fleet>],
    args: &AnalyzeBench,
    url: &str,
    interval_ms: i64,
    to: i64,
) -> anyhow::Result<Option<f64>> {
    let ours = |c: &str| fleets.iter().any(|f| f.scenario.cluster == c);
    let gpus: usize = fleets.iter().map(|f| f.gpu_count()).sum();
    let fleet_nodes: usize = fleets.iter().map(|f| f.nodes.len()).sum();
    let nodes = store.nodes().await?;
    if let Some(other) = nodes.iter().find(|n| !ours(&n.cluster)) {
        anyhow::bail!(
            "{} already holds data of cluster {:?} (node {}); the analysis would include it. Use a scratch database.",
            store::redact_url(url),
            other.cluster,
            other.node
        );
    }
    if nodes.len() == fleet_nodes {
        eprintln!(
            "reusing the {gpus} GPUs already in the database (rollups up to their last fill)"
        );
        for fleet in fleets {
            report_now(store, fleet, interval_ms, None).await?;
        }
        Ok(None)
    } else {
        anyhow::ensure!(
            nodes.is_empty(),
            "the database holds {} of the benchmark's nodes, not {fleet_nodes}: use a new scratch database",
            nodes.len(),
        );
        eprintln!(
            "filling {gpus} GPUs on {fleet_nodes} nodes in {} x {} of rollups (samples every {} s) …",
            count(fleets.len() as f64, "cluster", "clusters"),
            count(args.days as f64, "day", "days"),
            interval_ms / 1000
        );
        let t = Instant::now();
        let minute_days = args.minute_days();
        let (mut h, mut m) = (0, 0);
        for fleet in fleets {
            let (hours, minutes) =
                fill_analyze(store, fleet, args.days, minute_days, interval_ms, to).await?;
            (h, m) = (h + hours, m + minutes);
            // The cluster-hour summaries a rollup pass would have made (the fill writes
            // rollups directly).
            for hour in 0..args.days * 24 {
                store
                    .refresh_cluster_hour(
                        &fleet.scenario.cluster,
                        to - (hour + 1) * rollup::HOUR_MS,
                    )
                    .await?;
            }
        }
        let fill_s = t.elapsed().as_secs_f64();
        eprintln!("filled {h} hour rows and {m} minute rows in {fill_s:.0} s");
        Ok(Some(fill_s))
    }
}

/// The end of the filled history: the hour after the first node's newest hour rollup (the
/// fill writes every node up to the same hour), or `fallback` when there is none.
async fn data_end(store: &Store, fleet: &simulator::Fleet, fallback: i64) -> anyhow::Result<i64> {
    let Some(node) = fleet.nodes.first() else {
        return Ok(fallback);
    };
    let r = store
        .rollups(
            Rollups::Hour,
            &fleet.scenario.cluster,
            &node.spec.name,
            fallback - 90 * 86_400_000,
            fallback + rollup::HOUR_MS,
        )
        .await?;
    Ok(r.gpus
        .keys()
        .map(|(_, bucket)| bucket + rollup::HOUR_MS)
        .max()
        .unwrap_or(fallback))
}

/// The plan alone (packing, placing, steps and their replays), timed on the same input: per
/// round, the sum over the pieces the analysis takes (clusters, or their parts), each loaded
/// (its part of the frame, read once, and its series) and planned in turn.
async fn time_plan(
    store: &Store,
    thresholds: &analytics::Config,
    window: Duration,
    now: i64,
    rounds: usize,
) -> anyhow::Result<Vec<f64>> {
    let from = now - window.as_millis() as i64;
    let mut stats = collector::analysis::LoadStats::default();
    let span = collector::analysis::Span { from, to: now, now };
    let frame = collector::analysis::load_frame(store, span, &mut stats).await?;
    let mut plan = vec![0.0; rounds];
    for mut piece in collector::analysis::pieces(&frame, thresholds.part_gpus) {
        let mut input = std::mem::take(&mut piece.input);
        collector::analysis::load_series(store, thresholds, piece.scope(), &mut input, &mut stats)
            .await?;
        let input = std::sync::Arc::new(input);
        for spent in plan.iter_mut() {
            let (input, cfg) = (input.clone(), thresholds.clone());
            let t = Instant::now();
            tokio::task::spawn_blocking(move || analytics::plan_only(&input, &cfg)).await?;
            *spent += t.elapsed().as_secs_f64();
        }
    }
    Ok(plan)
}
