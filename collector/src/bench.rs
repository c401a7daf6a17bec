//! `gpulens bench`: the performance bars of docs/PERFORMANCE.md, measured against a real
//! PostgreSQL. `ingest` compares end-to-end ingest (HTTP → decode → validate → store) with a
//! raw COPY of the same rows into the same tables, side by side, in alternating rounds;
//! `series` times the read API's store queries on one GPU's raw hour and on a fleet's month of
//! hour rollups.

use std::time::{Duration, Instant};

use model::wire::v1::Batch;

use crate::auth::Auth;
use crate::config::{IngestConfig, TeamsConfig};
use crate::server::AppState;
use crate::store::{Agg, Entity, Metric, Retention, SeriesQuery, Store};

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
    /// Batches in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Alternating rounds of each; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
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

/// A fleet of `gpus` GPUs, 8 per node, each time-sliced 8 ways with a busy tenant per replica.
fn bench_scenario(gpus: usize) -> simulator::Scenario {
    let nodes = gpus.div_ceil(8);
    let mut text = String::from("name = \"bench\"\ncluster = \"bench\"\nseed = 5\n");
    for n in 0..nodes {
        text.push_str(&format!(
            "[[nodes]]\nname = \"node-{n:04}\"\nmodel = \"H100-80GB\"\ngpus = 8\nsharing = \"time_slicing\"\nreplicas = 8\ndcgm = true\n"
        ));
        for g in 0..8 {
            for r in 0..8 {
                text.push_str(&format!(
                    "[[tenants]]\nname = \"t-{n}-{g}-{r}\"\nkind = \"pod\"\nnamespace = \"ns-{}\"\nnode = \"node-{n:04}\"\ndevices = [\"{g}::{r}\"]\npattern = \"steady_training\"\nintensity = 0.12\nmem_gib = 4\n",
                    r % 4
                ));
            }
        }
    }
    simulator::Scenario::from_toml(&text).expect("the benchmark scenario is valid")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub async fn ingest(args: IngestBench) -> anyhow::Result<()> {
    let store = Store::connect(&args.database_url).await?;
    store.migrate().await?;
    let fleet = simulator::Fleet::new(bench_scenario(args.gpus));
    let start = crate::now_ms() - (args.seconds as i64 + 120) * 1000;
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
    let mut auth = Auth::default();
    let token = format!("bench-{}", crate::now_ms());
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
    tokio::spawn(crate::server::serve(
        listener,
        state,
        std::future::pending(),
    ));
    let client = ingest_client::Client::new(&format!("http://{addr}"), &token)?;

    let (mut copy_rates, mut e2e_rates) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let tag = format!("r{round}-{}", crate::now_ms());
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
        let t = Instant::now();
        run_workers(
            args.concurrency,
            by_worker(batches, args.concurrency, |b| b.node.clone()),
            {
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
            },
        )
        .await?;
        let copy_rate = rows_per_round as f64 / t.elapsed().as_secs_f64();
        // End to end: bodies are encoded first, as an agent would have them ready.
        let bodies: Vec<(String, Vec<u8>)> = fresh("e2e")
            .iter()
            .map(|b| Ok((b.node.clone(), ingest_client::Client::encode(b)?)))
            .collect::<Result<_, ingest_client::SendError>>()?;
        let t = Instant::now();
        run_workers(
            args.concurrency,
            by_worker(bodies, args.concurrency, |b| b.0.clone()),
            {
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
            },
        )
        .await?;
        let e2e_rate = rows_per_round as f64 / t.elapsed().as_secs_f64();
        eprintln!(
            "round {}: raw COPY {:.0} rows/s, end-to-end {:.0} rows/s",
            round + 1,
            copy_rate,
            e2e_rate
        );
        copy_rates.push(copy_rate);
        e2e_rates.push(e2e_rate);
    }
    let (copy, e2e) = (median(copy_rates), median(e2e_rates));
    let rows_per_gpu_second = rows_per_round as f64 / (args.seconds * fleet.gpu_count()) as f64;
    println!(
        "ingest benchmark: {} GPUs x {} s, {} snapshot(s) per batch, {} rows per round ({:.1} rows per GPU-second), concurrency {}, {} rounds",
        fleet.gpu_count(),
        args.seconds,
        args.snapshots_per_batch,
        rows_per_round,
        rows_per_gpu_second,
        args.concurrency,
        args.rounds
    );
    println!("  raw COPY (same rows, same batches): {copy:>10.0} rows/s (median)");
    println!("  end-to-end HTTP ingest:             {e2e:>10.0} rows/s (median)");
    println!("  ratio end-to-end / raw COPY:        {:>10.2}", e2e / copy);
    println!(
        "  fleet sustained at 1 Hz:            {:>10.0} GPUs",
        e2e / rows_per_gpu_second
    );
    Ok(())
}

/// Splits items into `n` worker lists so that each node belongs to one worker and keeps its
/// order: an agent delivers its batches one after another, in sequence.
fn by_worker<T>(items: Vec<T>, n: usize, node: impl Fn(&T) -> String) -> Vec<Vec<T>> {
    let mut nodes: Vec<String> = Vec::new();
    let mut out: Vec<Vec<T>> = (0..n.max(1)).map(|_| Vec::new()).collect();
    for item in items {
        let name = node(&item);
        let i = nodes.iter().position(|x| *x == name).unwrap_or_else(|| {
            nodes.push(name);
            nodes.len() - 1
        });
        out[i % n.max(1)].push(item);
    }
    out
}

/// Runs `work` on every item, one worker per list, in list order; the first error stops it.
async fn run_workers<T, F, Fut>(_n: usize, lists: Vec<Vec<T>>, work: F) -> anyhow::Result<()>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for list in lists {
        let work = work.clone();
        tasks.spawn(async move {
            for item in list {
                work(item).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

pub async fn series(args: SeriesBench) -> anyhow::Result<()> {
    let store = Store::connect(&args.database_url).await?;
    store.migrate().await?;
    let now = crate::now_ms();
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
    let gpu = b.snapshots[0].gpus[0].gpu_uuid.clone();
    let retention = Retention::default();
    let mut report = Vec::new();
    for (name, q) in [
        (
            "one GPU, last hour of raw samples, 1 s step",
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
