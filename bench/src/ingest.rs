//! `gpulens bench ingest` compares end-to-end ingest (HTTP → decode → validate → store) with a
//! raw COPY of the same rows into the same tables, side by side, in alternating rounds;
//! `gpulens bench series` times the read API's store queries on one GPU's raw hour and on a
//! fleet's month of hour rollups.

use std::time::{Duration, Instant};

use model::figures::count;
use model::wire::v1::Batch;

use crate::fleet::{Wire, bench_scenario};
use crate::ingest_breakdown;
use crate::phase::{Measured, Phase, PhaseCpu, Profiled, by_worker, median, run_workers, timed};
use collector::config::{IngestConfig, TeamsConfig};
use collector::state::AppState;
use collector_shared::agent_auth::Auth;
use store::{Agg, Entity, Metric, Retention, SeriesQuery, Store};

#[derive(Debug, clap::Args)]
pub struct IngestBench {
    /// A PostgreSQL database the benchmark may fill (use a scratch one).
    #[arg(long, env = "GPULENS_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// GPUs in the simulated fleet (8 per node, 8 processes per GPU).
    #[arg(long, default_value_t = 256)]
    pub gpus: usize,
    /// Seconds of 1 Hz samples per round.
    #[arg(long, default_value_t = 30)]
    pub seconds: usize,
    /// Sampling cycles per batch (1 = what an agent sends at 1 Hz).
    #[arg(long, default_value_t = 1)]
    pub snapshots_per_batch: usize,
    /// Batches in flight at once, in both phases. Default: one per node, which is what the
    /// simulated fleet's agents do when the collector is their bottleneck (each agent sends
    /// its batches one at a time, in order, so a fleet of N nodes has up to N in flight).
    /// Fewer models a collector that only a part of the fleet reaches at once. At most the
    /// collector's default in-flight limit (256; the default is capped there).
    #[arg(long, visible_alias = "in-flight", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: Option<u16>,
    /// Alternating rounds of each; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Rounds run first and not counted: they open the pool's connections, create the day
    /// partitions and warm PostgreSQL's caches, which would otherwise slow only the first raw
    /// COPY phase and flatter the first round's ratio.
    #[arg(long, default_value_t = 1)]
    pub warmup_rounds: usize,
    /// How the batches travel end to end: `msgpack` (snappy-compressed MessagePack in the
    /// compact layout, what the agent sends), `msgpack-named` (the same with structs as maps
    /// keyed by field name, as most MessagePack libraries write) or `json` (gzip-compressed
    /// JSON, what scripts send).
    #[arg(long, value_enum, default_value_t = Wire::Msgpack)]
    pub wire: Wire,
    /// How the batches reach the collector end to end: `stream` (framed one after another on
    /// ingest streams, one per batch in flight, as the agent sends where the collector offers
    /// them) or `post` (one HTTP request each).
    #[arg(long, value_enum, default_value_t = Transport::Stream)]
    pub transport: Transport,
    /// Two more phases per round, in this process and without HTTP: the bodies decoded,
    /// validated and stored through the store's ingest, then the decoded batches stored alone.
    /// Each against raw COPY says what the storage path, decoding and HTTP each cost.
    #[arg(long)]
    pub breakdown: bool,
    /// The phase a profiler records when `GPULENS_BENCH_PERF_CTL` names the control FIFO of
    /// `perf record -D -1 --control fifo:PATH` (counted rounds only). The two in-process
    /// phases need `--breakdown`.
    #[arg(long, value_enum, default_value_t = Phase::EndToEnd)]
    pub profile_phase: Phase,
}

/// How the end-to-end phase's batches reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Stream,
    Post,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Stream => "on ingest streams",
            Transport::Post => "as HTTP requests",
        }
    }
}

impl From<Transport> for ingest_client::Transport {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Stream => ingest_client::Transport::Stream,
            Transport::Post => ingest_client::Transport::Post,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct SeriesBench {
    #[arg(long, env = "GPULENS_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// GPUs in the synthetic fleet.
    #[arg(long, default_value_t = 1000)]
    pub gpus: i64,
    /// Days of hour rollups.
    #[arg(long, default_value_t = 30)]
    pub days: i64,
    /// Repetitions of each query.
    #[arg(long, default_value_t = 50)]
    pub queries: usize,
}

pub async fn ingest(args: IngestBench) -> anyhow::Result<()> {
    for (flag, value) in [
        ("--gpus", args.gpus),
        ("--seconds", args.seconds),
        ("--snapshots-per-batch", args.snapshots_per_batch),
        ("--rounds", args.rounds),
    ] {
        anyhow::ensure!(value >= 1, "{flag} must be at least 1");
    }
    if !args.breakdown && args.profile_phase != Phase::EndToEnd {
        let name = clap::ValueEnum::to_possible_value(&args.profile_phase)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        anyhow::bail!("--profile-phase {name} is a phase of --breakdown; add --breakdown");
    }
    let store = Store::connect(&args.database_url).await?;
    store.migrate().await?;
    let fleet = simulator::Fleet::new(bench_scenario(args.gpus));
    // The served collector answers requests beyond its in-flight limit 503 (agents retry);
    // the benchmark stays within it.
    let in_flight = collector_shared::listener::ServerLimits::default().max_in_flight;
    let nodes = fleet.nodes.len();
    let (concurrency, why) = match args.concurrency.map(usize::from) {
        Some(c) if c > in_flight => anyhow::bail!(
            "--concurrency {c} exceeds the collector's default in-flight limit ({in_flight}); \
             the requests beyond it would be refused with 503"
        ),
        Some(c) => (c, "--concurrency"),
        None if nodes > in_flight => (
            in_flight,
            "one per node's agent, capped at the in-flight limit",
        ),
        None => (nodes.max(1), "one per node's agent"),
    };
    let start = model::time::now_ms() - (args.seconds as i64 + 120) * 1000;
    let instants: Vec<i64> = (0..args.seconds as i64).map(|s| start + s * 1000).collect();
    eprintln!(
        "generating {} s of samples for {} GPUs …",
        args.seconds,
        fleet.gpu_count()
    );
    let mut template = Vec::new();
    for node in 0..fleet.nodes.len() {
        for (i, chunk) in instants.chunks(args.snapshots_per_batch).enumerate() {
            template.push(fleet.batch(node, "bench", i as u64 + 1, chunk, 1000));
        }
    }
    let rows_per_round: usize = template.iter().map(Batch::row_count).sum();
    let client = bench_collector(&store)
        .await?
        .with_transport(args.transport.into());

    let (mut copy_rates, mut e2e_rates) = (Vec::new(), Vec::new());
    let mut cpu_costs = Vec::new();
    let mut breakdowns = Vec::new();
    let mut checkpoints = true;
    for round in 0..args.warmup_rounds + args.rounds {
        let counted = round >= args.warmup_rounds;
        let done = round_rates(
            &store,
            &client,
            &template,
            Round {
                n: round,
                counted: counted.then(|| round - args.warmup_rounds + 1),
                concurrency,
                rows: rows_per_round,
                wire: args.wire,
                breakdown: args.breakdown,
                profiled: args.profile_phase,
            },
            &mut checkpoints,
        )
        .await?;
        if !counted {
            continue;
        }
        copy_rates.push(done.copy.0);
        e2e_rates.push(done.e2e.0);
        if let (Some(c), Some(e)) = (done.copy.1, done.e2e.1) {
            cpu_costs.push((c, e));
        }
        breakdowns.extend(done.breakdown);
    }
    // Each round's end to end over its own raw COPY: how far this machine's noise moves one.
    let round_ratios: Vec<f64> = e2e_rates
        .iter()
        .zip(&copy_rates)
        .map(|(e, c)| e / c)
        .collect();
    let (copy, e2e) = (median(copy_rates), median(e2e_rates));
    let rows_per_gpu_second = rows_per_round as f64 / (args.seconds * fleet.gpu_count()) as f64;
    println!(
        "ingest benchmark: {} x {} s, {} per batch, {} rows per round ({:.1} rows per GPU-second), {} in flight ({}), {} end to end {}, {} rounds",
        count(fleet.gpu_count() as f64, "GPU", "GPUs"),
        args.seconds,
        count(args.snapshots_per_batch as f64, "snapshot", "snapshots"),
        rows_per_round,
        rows_per_gpu_second,
        count(concurrency as f64, "batch", "batches"),
        why,
        args.wire.label(),
        args.transport.label(),
        args.rounds
    );
    println!("  raw COPY (same rows, same batches): {copy:>10.0} rows/s (median)");
    println!("  end-to-end ingest:                  {e2e:>10.0} rows/s (median)");
    println!("  ratio end-to-end / raw COPY:        {:>10.2}", e2e / copy);
    let (low, high) = round_ratios
        .iter()
        .fold((f64::INFINITY, 0.0_f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!("  of single rounds (each its own raw COPY): {low:.2} to {high:.2}");
    print_cpu_costs(&cpu_costs);
    ingest_breakdown::print(&breakdowns, copy);
    println!(
        "  fleet sustained at 1 Hz:            {:>10.0} GPUs",
        e2e / rows_per_gpu_second
    );
    Ok(())
}

/// A collector serving on a loopback port with a token for any node, and a client of it.
async fn bench_collector(store: &Store) -> anyhow::Result<ingest_client::Client> {
    let mut auth = Auth::default();
    let token = format!("bench-{}", model::time::now_ms());
    auth.add(&token, vec!["*".into()], None);
    let state = AppState::new(
        store.clone(),
        auth,
        IngestConfig::default(),
        Retention::default(),
        TeamsConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(collector::server::serve(
        listener,
        state,
        std::future::pending(),
    ));
    Ok(ingest_client::Client::new(
        &format!("http://{addr}"),
        &token,
    )?)
}

/// One round of the ingest benchmark: which, how many workers, how many rows.
struct Round {
    n: usize,
    /// Its number among the counted rounds; `None` for a warm-up, which is neither counted
    /// nor profiled.
    counted: Option<usize>,
    concurrency: usize,
    rows: usize,
    wire: Wire,
    breakdown: bool,
    /// The phase a profiler records, in counted rounds.
    profiled: Phase,
}

impl Round {
    /// The phase a profiler records in this round: none in a warm-up.
    fn profiled(&self) -> Profiled {
        Profiled(self.counted.map(|_| self.profiled))
    }
}

/// What one round measured: each phase's rows/s and CPU.
struct RoundRates {
    copy: Measured,
    e2e: Measured,
    breakdown: Option<ingest_breakdown::Breakdown>,
}

/// One round: raw COPY of the template's rows, then the same rows end to end over HTTP, then
/// (`--breakdown`) in this process without HTTP, each with its rate (rows/s) and CPU cost.
async fn round_rates(
    store: &Store,
    client: &ingest_client::Client,
    template: &[Batch],
    r: Round,
    checkpoints: &mut bool,
) -> anyhow::Result<RoundRates> {
    let tag = format!("r{}-{}", r.n, model::time::now_ms());
    let fresh = |kind: &str| -> Vec<Batch> {
        template
            .iter()
            .cloned()
            .map(|mut b| {
                b.cluster = format!("bench-{kind}-{tag}");
                b
            })
            .collect()
    };
    // Raw COPY of the same rows, same batch sizes, same concurrency.
    let batches = fresh("copy");
    let (copy_rate, copy_cpu) = timed(
        store,
        checkpoints,
        r.rows,
        |_| {},
        run_workers(by_worker(batches, r.concurrency, |b| b.node.clone()), {
            let store = store.clone();
            move |b: Batch| {
                let store = store.clone();
                async move {
                    store
                        .raw_copy(&b)
                        .await
                        .map(|_| ())
                        .map_err(anyhow::Error::from)
                }
            }
        }),
    )
    .await?;
    // End to end: bodies are encoded first, as an agent would have them ready.
    let bodies = r.wire.bodies(&fresh("e2e"))?;
    let (e2e_rate, e2e_cpu) = timed(
        store,
        checkpoints,
        r.rows,
        |c| r.profiled().mark(Phase::EndToEnd, c),
        run_workers(by_worker(bodies, r.concurrency, |b| b.0.clone()), {
            let client = client.clone();
            move |(_, body): (String, Vec<u8>)| {
                let client = client.clone();
                async move {
                    match client.send_encoded(body).await? {
                        ingest_client::Delivered::Stored { .. } => Ok(()),
                        ingest_client::Delivered::Duplicate => {
                            anyhow::bail!("unexpected duplicate")
                        }
                    }
                }
            }
        }),
    )
    .await?;
    let breakdown = match r.breakdown {
        true => Some(
            ingest_breakdown::run(
                store,
                fresh,
                r.wire,
                r.concurrency,
                r.rows,
                r.profiled(),
                checkpoints,
            )
            .await?,
        ),
        false => None,
    };
    eprintln!(
        "{}: raw COPY {:.0} rows/s, end-to-end {:.0} rows/s (ratio {:.2}){}",
        match r.counted {
            Some(k) => format!("round {k}"),
            None => format!("warm-up {} (not counted)", r.n + 1),
        },
        copy_rate,
        e2e_rate,
        e2e_rate / copy_rate,
        match (copy_cpu, e2e_cpu) {
            (Some(c), Some(e)) => format!(
                "; CPU-ms per 1,000 rows: this process {:.2} / {:.2}, machine {:.2} / {:.2} (busy {:.0} % / {:.0} %)",
                c.process,
                e.process,
                c.machine,
                e.machine,
                c.busy * 100.0,
                e.busy * 100.0
            ),
            _ => String::new(),
        }
    );
    if let Some(b) = &breakdown {
        ingest_breakdown::print_round(b, copy_rate);
    }
    Ok(RoundRates {
        copy: (copy_rate, copy_cpu),
        e2e: (e2e_rate, e2e_cpu),
        breakdown,
    })
}

/// The CPU cost per 1,000 rows of both phases, medians over the rounds.
fn print_cpu_costs(cpu_costs: &[(PhaseCpu, PhaseCpu)]) {
    if !cpu_costs.is_empty() {
        let of = |f: fn(&PhaseCpu) -> f64| {
            (
                median(cpu_costs.iter().map(|c| f(&c.0)).collect()),
                median(cpu_costs.iter().map(|c| f(&c.1)).collect()),
            )
        };
        let (raw, e2e) = of(|c| c.process);
        println!(
            "  this process's CPU per 1,000 rows:  {raw:>10.2} ms raw COPY, {e2e:.2} ms end to end (client and collector; median)"
        );
        // The machine's includes the database's when it runs here, and anything else running.
        let (raw, e2e) = of(|c| c.machine);
        println!(
            "  the machine's CPU per 1,000 rows:   {raw:>10.2} ms raw COPY, {e2e:.2} ms end to end (median)"
        );
        let (raw, e2e) = of(|c| c.busy * 100.0);
        println!(
            "  the machine's cores busy:           {raw:>10.0} % raw COPY, {e2e:.0} % end to end (median)"
        );
    }
}

pub async fn series(args: SeriesBench) -> anyhow::Result<()> {
    let store = Store::connect(&args.database_url).await?;
    store.migrate().await?;
    let now = model::time::now_ms();
    let cluster = format!("bench-series-{now}");
    eprintln!(
        "filling {} GPUs x {} days of hour rollups …",
        args.gpus, args.days
    );
    let rows = store
        .fill_hour_rollups(&cluster, args.gpus, args.days * 24, now)
        .await?;
    // One GPU's last hour at 1 Hz, through the real ingest path of the store.
    let fleet = simulator::Fleet::new(bench_scenario(8));
    let hour_start = now - 3_600_000;
    let instants: Vec<i64> = (0..3600).map(|s| hour_start + s * 1000).collect();
    let mut b = fleet.batch(0, &format!("series-{now}"), 1, &instants, 1000);
    b.cluster = cluster.clone();
    let team = |_: &model::Tenant| None;
    store.ingest(&b, now, &team).await?;
    // As the upkeep leaves it: all but the hot window sealed into blocks.
    let sealed = store.seal(now - collector::upkeep::HOT_WINDOW_MS).await?;
    eprintln!("sealed {sealed} raw samples past the hot window into blocks");
    let gpu = b.snapshots[0].gpus[0].gpu_uuid.clone();
    let retention = Retention::default();
    let mut report = Vec::new();
    for (name, q) in [
        (
            "one GPU, last hour of raw samples (sealed), 1 s step",
            SeriesQuery {
                metric: Metric::GpuUtil,
                entity: Entity::Gpu(gpu.clone()),
                from_ms: hour_start,
                to_ms: now,
                step_ms: 1000,
                agg: Agg::Mean,
            },
        ),
        (
            "fleet, 30 days from hour rollups, 1 h step, mean",
            SeriesQuery {
                metric: Metric::GpuUtil,
                entity: Entity::Cluster(cluster.clone()),
                from_ms: now - args.days * 86_400_000,
                to_ms: now,
                step_ms: 3_600_000,
                agg: Agg::Mean,
            },
        ),
        (
            "fleet, 30 days from hour rollups, 1 d step, p95",
            SeriesQuery {
                metric: Metric::GpuUtil,
                entity: Entity::Cluster(cluster.clone()),
                from_ms: now - args.days * 86_400_000,
                to_ms: now,
                step_ms: 86_400_000,
                agg: Agg::P95,
            },
        ),
    ] {
        let mut times = Vec::new();
        for _ in 0..args.queries {
            let t = Instant::now();
            let s = store.series(&q, now, &retention).await?;
            times.push(t.elapsed());
            anyhow::ensure!(
                s.points.iter().any(|p| p.1.is_some()),
                "{name}: empty result"
            );
        }
        times.sort();
        let pct = |p: f64| times[((p * times.len() as f64) as usize).min(times.len() - 1)];
        report.push((name, pct(0.5), pct(0.95)));
    }
    println!(
        "series benchmark: {} hour-rollup rows ({} GPUs x {} days) + 3600 raw samples, {} runs each",
        rows, args.gpus, args.days, args.queries
    );
    for (name, p50, p95) in report {
        println!(
            "  {name:<50} p50 {:>8.1} ms   p95 {:>8.1} ms",
            ms(p50),
            ms(p95)
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
