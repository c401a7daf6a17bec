//! `gpulens bench storage`: bytes on disk per GPU-second of raw data, per raw table and in
//! total, for a fleet of whole GPUs with one tenant each sampled at 1 Hz; and, side by side in
//! the same run, the same readings written by Prometheus's own TSDB as dcgm-exporter would
//! export them (`promtool tsdb create-blocks-from openmetrics`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use model::GpuSample;
use store::Store;

use collector::upkeep;

#[derive(Debug, clap::Args)]
pub struct StorageBench {
    /// The database to fill and measure: an empty scratch PostgreSQL database (postgres://…;
    /// a Citus coordinator too) or a new SQLite file (sqlite://…).
    #[arg(long, env = "GPULENS_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// GPUs: whole H100s with DCGM, 8 per node, one training pod each.
    #[arg(long, default_value_t = 8)]
    pub gpus: usize,
    /// How much 1 Hz history to store (Prometheus's blocks span 2 h: an hour or more keeps its
    /// index from dominating).
    #[arg(long, default_value = "1h", value_parser = model::time::parse_duration)]
    pub span: Duration,
    /// Sampling cycles per stored batch, as an agent sends them.
    #[arg(long, default_value_t = 10)]
    pub snapshots_per_batch: usize,
    /// Keep every sample a row (what gpulens stored before sealed blocks), for comparison.
    #[arg(long)]
    pub rows_only: bool,
    /// promtool, for the Prometheus side; "" leaves it out.
    #[arg(long, default_value = "promtool")]
    pub promtool: String,
}

/// `gpus` whole GPUs with DCGM, 8 per node, each held by one steadily training pod.
fn scenario(gpus: usize) -> simulator::Scenario {
    let mut text = String::from("name = \"storage\"\ncluster = \"storage\"\nseed = 7\n");
    for n in 0..gpus.div_ceil(8) {
        let here = (gpus - n * 8).min(8);
        text.push_str(&format!(
            "[[nodes]]\nname = \"node-{n:04}\"\nmodel = \"H100-80GB\"\ngpus = {here}\ndcgm = true\n"
        ));
        for g in 0..here {
            text.push_str(&format!(
                "[[tenants]]\nname = \"train-{n}-{g}\"\nkind = \"pod\"\nnamespace = \"ml-{}\"\nnode = \"node-{n:04}\"\ndevices = [\"{g}\"]\npattern = \"steady_training\"\nmem_gib = 40\n",
                g % 3
            ));
        }
    }
    simulator::Scenario::from_toml(&text).expect("the storage scenario is valid")
}

/// One GPU's readings over the run, with the labels dcgm-exporter would give it.
struct GpuHistory {
    labels: String,
    samples: Vec<(i64, GpuSample)>,
}

pub async fn storage(args: StorageBench) -> anyhow::Result<()> {
    anyhow::ensure!(args.gpus > 0, "--gpus must be at least 1");
    let seconds = args.span.as_secs() as i64;
    anyhow::ensure!(seconds >= 60, "--span must be at least a minute");
    let store = Store::connect(&args.database_url).await?;
    store.migrate().await?;
    let before: i64 = store.counts().await?.raw().iter().sum();
    anyhow::ensure!(
        before == 0,
        "the database already holds {before} raw rows: give the benchmark an empty one"
    );
    let fleet = simulator::Fleet::new(scenario(args.gpus));
    let end = model::time::now_ms() / 1000 * 1000 - 60_000;
    let start = end - seconds * 1000;
    store.prepare_partitions(start).await?;
    store.prepare_partitions(end).await?;
    // What the empty tables already take (their partitions' and, on Citus, shards' first
    // pages): a fixed cost, not a cost per GPU-second.
    let empty: BTreeMap<&str, i64> = store
        .table_bytes()
        .await?
        .into_iter()
        .map(|(t, _, b)| (t, b))
        .collect();
    let history = store_history(&store, &fleet, &args, start, end).await?;
    let sealed_until = if args.rows_only {
        start
    } else {
        store::block_of(end - upkeep::HOT_WINDOW_MS).max(start)
    };
    let tables = store.table_bytes().await?;
    let gpus = fleet.gpu_count() as i64;
    let gpu_seconds = (gpus * seconds) as f64;
    println!(
        "storage benchmark: {gpus} GPUs x {seconds} s at 1 Hz, one tenant per GPU, on {}{}",
        store.backend(),
        if args.rows_only {
            ", every sample a row"
        } else {
            ""
        }
    );
    println!(
        "  {:<22} {:>10} {:>14} {:>8} {:>10}",
        "raw table", "rows", "bytes", "B/row", "B/GPU-s"
    );
    let (mut total, mut hot, mut sealed, mut fixed) = (0i64, 0i64, 0i64, 0i64);
    for (table, rows, bytes) in tables {
        total += bytes;
        if table.ends_with("_blocks") {
            sealed += bytes;
            fixed += empty.get(table).copied().unwrap_or(0);
        } else {
            hot += bytes;
        }
        println!(
            "  {table:<22} {rows:>10} {bytes:>14} {:>8} {:>10.1}",
            if rows > 0 {
                format!("{:.0}", bytes as f64 / rows as f64)
            } else {
                "-".into()
            },
            bytes as f64 / gpu_seconds
        );
    }
    println!(
        "  {:<22} {:>10} {total:>14} {:>8} {:>10.1}",
        "total (indexes incl.)",
        "",
        "",
        total as f64 / gpu_seconds
    );
    // Steady state: sealed blocks grow with retention; the hot rows are a fixed window.
    let sealed_s = ((sealed_until - start) / 1000 * gpus) as f64;
    let ours = if args.rows_only || sealed_s <= 0.0 {
        total as f64 / gpu_seconds
    } else {
        let per_s = (sealed - fixed) as f64 / sealed_s;
        println!(
            "  sealed blocks: {per_s:.1} B/GPU-s over the {} s sealed ({:.1} with the {fixed} bytes the empty block tables took before: partitions' and shards' first pages, a fixed cost)",
            (sealed_until - start) / 1000,
            sealed as f64 / sealed_s
        );
        println!(
            "  hot rows (the last {} s and under): {hot} bytes, {:.0} per GPU whatever the retention",
            (end - sealed_until) / 1000,
            hot as f64 / gpus as f64
        );
        per_s
    };
    compare_with_prometheus(&args, &history, gpu_seconds, ours)
}

/// Stores the span as a collector would: every node's batch of each cycle, and once a minute
/// of data the upkeep's seal pass (rows past the hot window become blocks) followed by what
/// autovacuum would do with the sealed-off rows. Returns each GPU's samples for Prometheus.
async fn store_history(
    store: &Store,
    fleet: &simulator::Fleet,
    args: &StorageBench,
    start: i64,
    end: i64,
) -> anyhow::Result<BTreeMap<String, GpuHistory>> {
    let seconds = (end - start) / 1000;
    let instants: Vec<i64> = (0..seconds).map(|s| start + s * 1000).collect();
    let mut history: BTreeMap<String, GpuHistory> = BTreeMap::new();
    let chunks = instants.chunks(args.snapshots_per_batch.max(1)).count();
    let mut stored = 0usize;
    eprintln!(
        "storing {} s of 1 Hz samples of {} GPUs ({}) …",
        seconds,
        fleet.gpu_count(),
        store.backend()
    );
    let total = chunks * fleet.nodes.len();
    let mut next_seal = start + 60_000;
    for (i, chunk) in instants.chunks(args.snapshots_per_batch.max(1)).enumerate() {
        for node in 0..fleet.nodes.len() {
            let b = fleet.batch(node, "storage", i as u64 + 1, chunk, 1000);
            remember(&mut history, &b);
            store.ingest(&b, end, &|_| None).await?;
            stored += 1;
            if stored.is_multiple_of((total / 10).max(1)) {
                eprintln!("  {:>3}% stored", stored * 100 / total);
            }
        }
        let now = chunk[chunk.len() - 1] + 1000;
        if !args.rows_only && now >= next_seal {
            store.seal(now - upkeep::HOT_WINDOW_MS).await?;
            store.reclaim_hot().await?;
            next_seal += 60_000;
        }
    }
    Ok(history)
}

/// The same samples as dcgm-exporter series in a Prometheus TSDB (built by promtool), and
/// gpulens' bytes per GPU-second against it; nothing without `--promtool`.
fn compare_with_prometheus(
    args: &StorageBench,
    history: &BTreeMap<String, GpuHistory>,
    gpu_seconds: f64,
    ours: f64,
) -> anyhow::Result<()> {
    if args.promtool.is_empty() {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!(
        "gpulens-bench-storage-{}-{}",
        std::process::id(),
        model::time::now_ms()
    ));
    std::fs::create_dir_all(&dir)?;
    let result = prometheus(&args.promtool, &dir, history);
    let _ = std::fs::remove_dir_all(&dir);
    let (bytes, series, samples) = result?;
    let theirs = bytes as f64 / gpu_seconds;
    println!(
        "  Prometheus TSDB ({} dcgm-exporter series per GPU, {samples} samples, promtool blocks): {bytes} bytes, {:.2} B/sample, {theirs:.1} B/GPU-s",
        series / history.len().max(1),
        bytes as f64 / samples.max(1) as f64
    );
    println!(
        "  gpulens raw ({}) / Prometheus TSDB: {:.1}x",
        if args.rows_only { "rows" } else { "sealed" },
        ours / theirs
    );
    Ok(())
}

/// Keeps each GPU's samples and its dcgm-exporter labels (the pod holding it, as
/// dcgm-exporter's Kubernetes mapping adds).
fn remember(history: &mut BTreeMap<String, GpuHistory>, b: &model::wire::v1::Batch) {
    for s in &b.snapshots {
        for g in &s.gpus {
            let h = history
                .entry(g.gpu_uuid.clone())
                .or_insert_with(|| GpuHistory {
                    labels: String::new(),
                    samples: Vec::new(),
                });
            if h.labels.is_empty() {
                let index = b
                    .inventory
                    .iter()
                    .flatten()
                    .find(|i| i.uuid == g.gpu_uuid)
                    .map_or(0, |i| i.index);
                let tenant = s
                    .allocations
                    .iter()
                    .find(|a| a.gpu_uuid == g.gpu_uuid)
                    .and_then(|a| b.tenants.iter().find(|t| t.key == a.tenant));
                let (namespace, pod, container) = tenant.map_or(("", "", ""), |t| {
                    (
                        t.namespace.as_deref().unwrap_or(""),
                        t.pod.as_deref().unwrap_or(""),
                        t.container.as_deref().unwrap_or(""),
                    )
                });
                h.labels = format!(
                    "gpu=\"{index}\",UUID=\"{}\",device=\"nvidia{index}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{}\",DCGM_FI_DRIVER_VERSION=\"570.133.20\",container=\"{container}\",namespace=\"{namespace}\",pod=\"{pod}\"",
                    g.gpu_uuid, b.node
                );
            }
            h.samples.push((s.ts, g.clone()));
        }
    }
}

/// dcgm-exporter's default counters and the profiling fields gpulens reads, each as its value
/// in dcgm-exporter's unit from a gpulens sample (fields gpulens does not keep export what a
/// healthy GPU exports: zeros, and the memory temperature a few degrees above the GPU's; a
/// reading the sample lacks is NaN, and not written).
#[allow(clippy::type_complexity)]
const SERIES: &[(&str, &str, fn(&GpuSample) -> f64)] = &[
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", |g| {
        f64::from(g.sm_clock_mhz.unwrap_or(0))
    }),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", |g| {
        f64::from(g.mem_clock_mhz.unwrap_or(0))
    }),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", |g| {
        (f64::from(g.temp_c.unwrap_or(0.0)) + 6.0).round()
    }),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", |g| {
        f64::from(g.temp_c.unwrap_or(0.0)).round()
    }),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", |g| {
        (f64::from(g.power_w.unwrap_or(0.0)) * 1000.0).round() / 1000.0
    }),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", |g| {
        (g.energy_j.unwrap_or(0.0) * 1000.0).round()
    }),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", |_| 0.0),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", |g| {
        (f64::from(g.gpu_util.unwrap_or(0.0)) * 100.0).round()
    }),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", |g| {
        (f64::from(g.mem_util.unwrap_or(0.0)) * 100.0).round()
    }),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", |g| {
        (f64::from(g.enc_util.unwrap_or(0.0)) * 100.0).round()
    }),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", |g| {
        (f64::from(g.dec_util.unwrap_or(0.0)) * 100.0).round()
    }),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", |_| 0.0),
    ("DCGM_FI_DEV_FB_FREE", "gauge", |g| {
        ((g.mem_total_bytes.unwrap_or(0) - g.mem_used_bytes.unwrap_or(0)) >> 20) as f64
    }),
    ("DCGM_FI_DEV_FB_USED", "gauge", |g| {
        (g.mem_used_bytes.unwrap_or(0) >> 20) as f64
    }),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", |_| 545.0),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", |_| 0.0),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", |_| 0.0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", |_| {
        0.0
    }),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", |g| {
        f64::from(g.remapped_rows.unwrap_or(0))
    }),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", |_| 0.0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", |g| {
        g.ecc_corrected.unwrap_or(0) as f64
    }),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", |g| {
        g.ecc_uncorrected.unwrap_or(0) as f64
    }),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", |g| {
        f64::from(g.gr_engine_active.unwrap_or(0.0))
    }),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", |g| {
        f64::from(g.sm_active.unwrap_or(0.0))
    }),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", |g| {
        f64::from(g.sm_occupancy.unwrap_or(0.0))
    }),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", |g| {
        f64::from(g.tensor_active.unwrap_or(0.0))
    }),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", |g| {
        f64::from(g.dram_active.unwrap_or(0.0))
    }),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", |g| {
        g.pcie_tx_bytes_per_s.map_or(f64::NAN, |v| v as f64)
    }),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", |g| {
        g.pcie_rx_bytes_per_s.map_or(f64::NAN, |v| v as f64)
    }),
];

/// Writes the history as OpenMetrics, has promtool build TSDB blocks from it, and returns the
/// blocks' bytes, the series and the samples.
fn prometheus(
    promtool: &str,
    dir: &Path,
    history: &BTreeMap<String, GpuHistory>,
) -> anyhow::Result<(u64, usize, usize)> {
    let input = dir.join("dcgm.om");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&input)?);
    let mut samples = 0usize;
    for (name, kind, value) in SERIES {
        writeln!(w, "# TYPE {name} {kind}")?;
        for h in history.values() {
            for (ts, g) in &h.samples {
                // A reading the agent did not take (PCIe between its reads: NaN above) is not a
                // sample, as it is no row value in gpulens.
                let v = value(g);
                if v.is_nan() {
                    continue;
                }
                // OpenMetrics timestamps are seconds.
                writeln!(
                    w,
                    "{name}{{{}}} {} {}.{:03}",
                    h.labels,
                    v,
                    ts / 1000,
                    ts % 1000
                )?;
                samples += 1;
            }
        }
    }
    writeln!(w, "# EOF")?;
    w.into_inner()?.sync_all()?;
    let blocks = dir.join("blocks");
    eprintln!("writing the same readings with promtool (Prometheus TSDB blocks) …");
    let out = std::process::Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(&blocks)
        .output()
        .map_err(|e| {
            anyhow::anyhow!("cannot run {promtool}: {e} (--promtool \"\" leaves Prometheus out)")
        })?;
    anyhow::ensure!(
        out.status.success(),
        "promtool failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((dir_bytes(&blocks)?, SERIES.len() * history.len(), samples))
}

fn dir_bytes(p: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() {
            dir_bytes(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(total)
}
