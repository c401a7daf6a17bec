//! `gpulens-agent`: samples a node's GPUs and ships batches to a gpulens collector.

use std::path::PathBuf;

use agent::attribution::ProcFs;
use agent::backend::{GpuBackend, SimulatedBackend};
use agent::nvml::NvmlBackend;
use agent::shipper::now_ms;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "gpulens-agent",
    version,
    about = "gpulens node agent: samples GPUs per device, MIG instance and process, attributes them to tenants, and ships batches to a collector"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text for people, or as one JSON object per line for log pipelines
    /// (timestamp, level, target, message and the event's fields).
    #[arg(long, global = true, value_enum, env = "GPULENS_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// Parsed once at start; the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Sample every interval and ship batches to a collector, through a disk spool.
    Run {
        #[command(flatten)]
        source: Source,
        /// Base URL of the collector, e.g. http://gpulens:8080.
        #[arg(long, env = "GPULENS_COLLECTOR")]
        collector: String,
        /// Agent token (the collector binds it to this node). Prefer --token-file: a token on
        /// the command line shows in the process list.
        #[arg(
            long,
            env = "GPULENS_TOKEN",
            hide_env_values = true,
            required_unless_present = "token_file",
            conflicts_with = "token_file"
        )]
        token: Option<String>,
        /// File holding the agent token (one line; a mounted Kubernetes Secret, or a projected
        /// ServiceAccount token, which the kubelet rotates: the file is read again every 30 s).
        #[arg(long, env = "GPULENS_TOKEN_FILE")]
        token_file: Option<PathBuf>,
        /// CA certificate(s), PEM, that signed an https:// collector's certificate; trusted
        /// instead of the default roots.
        #[arg(long, env = "GPULENS_CA_FILE")]
        ca_file: Option<PathBuf>,
        /// Client certificate chain, PEM, for a collector that takes batches over mutual TLS;
        /// its DNS names must include this node's name.
        #[arg(long, env = "GPULENS_CLIENT_CERT", requires = "client_key")]
        client_cert: Option<PathBuf>,
        /// The client certificate's private key, PEM.
        #[arg(long, env = "GPULENS_CLIENT_KEY", requires = "client_cert")]
        client_key: Option<PathBuf>,
        /// Where the agent keeps its id, sequence number and spool across restarts.
        #[arg(long, default_value = "/var/lib/gpulens-agent")]
        state_dir: PathBuf,
        /// Sampling interval.
        #[arg(long, default_value = "1s", value_parser = interval_ms)]
        interval: u64,
        /// Most bytes the disk spool may hold; past it the oldest batches are dropped (and
        /// counted in gpulens_agent_batches_dropped_total{reason="spool_full"}).
        #[arg(long, default_value_t = 256 * 1024 * 1024)]
        spool_max_bytes: u64,
        /// Share of the state directory's filesystem (percent) the spool always leaves free:
        /// the spool caps itself below --spool-max-bytes when the disk is short of room. The
        /// default stays above the kubelet's 10 % eviction threshold. A write that still meets
        /// a full disk drops the oldest batches (reason="disk_full"); the agent keeps sampling.
        #[arg(long, default_value_t = agent::spool::Limits::DEFAULT_MIN_FREE_PERCENT, value_parser = clap::value_parser!(u8).range(0..=90))]
        spool_min_free_percent: u8,
        /// Address for /metrics and /healthz ("off" to disable).
        #[arg(long, default_value = "127.0.0.1:9402")]
        listen: String,
        /// A local dcgm-exporter's /metrics URL, for SM activity and other profiling fields.
        #[arg(long, env = "GPULENS_DCGM_URL")]
        dcgm_url: Option<String>,
        /// The account that runs dcgm-exporter, when it is no system account (uid 1000 or
        /// above, as rootless Podman's port forwarder): its listener on a loopback --dcgm-url
        /// is read too. Without it only root's and system accounts' are (docs/security.md,
        /// "What a squatted DCGM port can do").
        #[arg(long, env = "GPULENS_DCGM_EXPORTER_UID")]
        dcgm_exporter_uid: Option<u32>,
        /// Node Feature Discovery's features.d directory: the agent writes the collector's
        /// advisory gpulens.io/ labels for this node there, for NFD to publish (typically
        /// /etc/kubernetes/node-feature-discovery/features.d). Unset: no file.
        #[arg(long, env = "GPULENS_NFD_DIR")]
        nfd_dir: Option<PathBuf>,
        /// How often the NFD labels are fetched from the collector.
        #[arg(long, default_value = "5m", value_parser = interval_ms)]
        nfd_every: u64,
        /// Sequence numbers reserved per write of the state file (a restart skips the rest
        /// of the block; gaps are allowed, reuse never is).
        #[arg(long, default_value_t = agent::shipper::SEQ_BLOCK, hide = true)]
        seq_block: u64,
    },
    /// Measure what one sampling cycle costs: CPU time, the share of a core at the interval,
    /// peak memory, and what each driver call costs (wall and CPU time, by NVML function).
    Bench {
        #[command(flatten)]
        source: Source,
        /// Cycles to measure (after 20 warm-up cycles), twice: once for the cycle's cost as a
        /// running agent pays it, once for the per-call table (timed on the CPU clock too).
        #[arg(long, default_value_t = 2000)]
        cycles: u32,
        /// The sampling interval the share of a core is computed for.
        #[arg(long, default_value = "1s", value_parser = interval_ms)]
        interval: u64,
    },
    /// Measure how fast the backlog drains after a collector outage: the real runner ships to a
    /// stand-in collector on 127.0.0.1 that goes down for --outage and comes back; prints each
    /// round's drain time and how many times faster than real time the outage was caught up.
    BenchRecovery {
        #[command(flatten)]
        source: Source,
        /// How long the collector stays down in each round.
        #[arg(long, default_value = "30s", value_parser = interval_ms)]
        outage: u64,
        /// Rounds to run (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// The sampling interval.
        #[arg(long, default_value = "1s", value_parser = interval_ms)]
        interval: u64,
        /// The longest wait between delivery attempts (the agent's is 2s; 30s was the policy
        /// before, for a baseline in the same run).
        #[arg(long, default_value = "2s", value_parser = interval_ms)]
        retry_max: u64,
    },
    /// Take one sampling cycle and print what the agent sees.
    Sample {
        #[command(flatten)]
        source: Source,
        /// Take one cycle and exit (the only mode for now).
        #[arg(long, required = true)]
        once: bool,
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
    },
}

#[derive(Debug, clap::Args)]
struct Source {
    /// Where samples come from: `nvml` reads this node's GPUs through the NVIDIA driver;
    /// `simulated` plays one node of a scenario file.
    #[arg(long, value_enum, default_value = "nvml")]
    backend: BackendKind,
    /// The NVML library to load (a path, or a name the dynamic loader finds).
    #[arg(long, env = "GPULENS_NVML_LIB", default_value = agent::nvml::DEFAULT_LIBRARY)]
    nvml_lib: PathBuf,
    /// The host's proc tree; the agent needs the host PID namespace to attribute processes.
    #[arg(long, default_value = "/proc")]
    proc_root: PathBuf,
    /// User names for host processes.
    #[arg(long, default_value = "/etc/passwd")]
    passwd: PathBuf,
    /// The host's cgroup tree, where Slurm's job cgroups say which job holds which GPU (so a
    /// job holding a GPU it does not use is seen; docs/agent.md, "Slurm"). Nothing there on
    /// a node without Slurm.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    cgroup_root: PathBuf,
    /// Do not read Slurm's GPU holdings.
    #[arg(long)]
    no_slurm: bool,
    /// The `squeue` (Slurm 21.08 or later) that says each Slurm job's account, user and GPUs on
    /// this node as slurmctld records them (a path, or a name looked up in PATH). Without one,
    /// a job's account (and on cgroup v2 its GPUs) is read from its tasks' environment, which
    /// the job's user can rewrite (docs/agent.md, "Slurm").
    #[arg(long, default_value = "squeue", value_name = "PATH")]
    slurm_squeue: PathBuf,
    /// Cluster name sent with every batch (nvml backend).
    #[arg(long, env = "GPULENS_CLUSTER", default_value = "default")]
    cluster: String,
    /// This node's name (nvml backend: default the host name; simulated: a scenario node).
    #[arg(long, env = "GPULENS_NODE")]
    node: Option<String>,
    /// Scenario file for the simulated backend.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// The kubelet's PodResources socket: which pod holds which GPU, replica or MIG device.
    /// Skipped when absent (hosts without Kubernetes).
    #[arg(long, default_value = agent::kubelet::DEFAULT_SOCKET)]
    pod_resources_socket: PathBuf,
    /// The kubelet's pod directories (/var/lib/kubelet/pods), read for the kubelet-written
    /// pod name of each pod UID. Optional, and not recommended in Kubernetes: those
    /// directories also hold every pod's secrets. Unset, processes are joined to pods by the
    /// devices they run on and their HOSTNAME (docs/agent.md, "Attribution").
    #[arg(long)]
    kubelet_pods_dir: Option<PathBuf>,
    /// Read what per-GPU sharing mechanisms granted from the Kubernetes API server: `in-cluster`
    /// (the pod's ServiceAccount) or a URL. Each container's share is then what its DRA claim
    /// consumed of the device, HAMi's memory and cores grant, or KAI's GPU fraction, instead
    /// of an equal split (docs/agent.md, "Granted shares"); HAMi's only on GPUs the Node says
    /// HAMi serves, KAI's only on GPUs a KAI reservation pod holds. Needs read access to the
    /// Node, the node's pods, ResourceSlices and ResourceClaims. Unset: shares are split equally.
    #[arg(long, env = "GPULENS_KUBE_API")]
    kube_api: Option<String>,
    /// Bearer token file for --kube-api (read again every 30 s as the kubelet rotates it;
    /// default in-cluster: the ServiceAccount's).
    #[arg(long)]
    kube_token_file: Option<PathBuf>,
    /// CA certificates (PEM) for --kube-api (default in-cluster: the ServiceAccount's).
    #[arg(long)]
    kube_ca_file: Option<PathBuf>,
    /// Replicas per time-sliced GPU as the device plugin advertises them, 1 to 1024 (default:
    /// inferred from the replica ids in use, which can undercount).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    time_slicing_replicas: Option<u32>,
    /// How often the readings that change rarely or cost most — ECC counters, retired pages,
    /// remapped rows, NVLink and PCIe traffic — are read from the driver; repeated in the
    /// samples in between (NVLink traffic as the mean rate since the last read; PCIe traffic
    /// only in the sample that read it). 0s reads them every sample. (The energy counter is
    /// read every sample where a read costs at most 100 µs, else every 10 minutes.)
    #[arg(long, default_value = "30s", value_parser = rare_every)]
    rare_every: std::time::Duration,
    /// How often the processes sharing a GPU have their utilization read (NVML's mean since
    /// the last read; 2.4 ms of CPU per GPU on an H200), and at once when a process appears.
    /// In between, the GPU's own utilization is split in the proportions last read; a GPU with
    /// one process gives it the GPU's utilization and makes no call. 0s to 30s; 0s reads it
    /// every sample.
    #[arg(long, default_value = "10s", value_parser = process_utilization_every)]
    process_utilization_every: std::time::Duration,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BackendKind {
    Nvml,
    Simulated,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Table,
}

fn rare_every(s: &str) -> Result<std::time::Duration, String> {
    let d = model::time::parse_duration(s)?;
    if d > std::time::Duration::from_secs(3600) {
        return Err("at most 1h: ECC errors must not wait longer to be seen".into());
    }
    Ok(d)
}

fn process_utilization_every(s: &str) -> Result<std::time::Duration, String> {
    let d = model::time::parse_duration(s)?;
    if d > std::time::Duration::from_secs(30) {
        return Err("at most 30s: the driver keeps a bounded history of process samples".into());
    }
    Ok(d)
}

fn interval_ms(s: &str) -> Result<u64, String> {
    let ms = simulator::scenario::parse_duration_ms(s)
        .ok_or_else(|| format!("{s:?} is not a duration like 1s or 500ms"))?;
    if ms < 100 {
        return Err("the interval must be at least 100ms".into());
    }
    Ok(u64::from(ms))
}

/// This node's name: `--node`, else the host name.
fn node_name(source: &Source) -> anyhow::Result<String> {
    match &source.node {
        Some(n) => Ok(n.clone()),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .map_err(|e| anyhow::anyhow!("cannot read the host name ({e}); pass --node")),
    }
}

/// The reader of the node's granted shares, when `--kube-api` is given.
fn node_grants(source: &Source) -> anyhow::Result<Option<agent::kube_read::NodeGrants>> {
    let Some(url) = &source.kube_api else {
        return Ok(None);
    };
    let read = agent::kube_read::KubeRead::new(
        url,
        source.kube_token_file.clone(),
        source.kube_ca_file.clone(),
    )?;
    Ok(Some(agent::kube_read::NodeGrants::new(
        read,
        node_name(source)?,
    )))
}

/// slurmctld's records of Slurm jobs through `--slurm-squeue`, for the nvml backend when
/// Slurm is read; None, said where Slurm runs jobs on this node, when there is no such program
/// (or no node name).
fn job_records(source: &Source) -> Option<agent::slurm_jobs::JobRecords> {
    if source.no_slurm || !matches!(source.backend, BackendKind::Nvml) {
        return None;
    }
    let node = node_name(source).ok()?;
    let records = agent::slurm_jobs::JobRecords::start(&source.slurm_squeue, &node);
    if records.is_none() && agent::slurm::runs_jobs(&source.cgroup_root) {
        tracing::warn!(
            squeue = %source.slurm_squeue.display(),
            "no squeue to ask: Slurm jobs' accounts (and on cgroup v2 their GPUs) are read from their tasks' environment, which a job's user can rewrite (pass --slurm-squeue)"
        );
    }
    records
}

/// The one sample of `sample --once` carries its Slurm jobs' accounts: each job holding a GPU
/// here is asked of `squeue` first, and answered or given up on within
/// [`agent::slurm_jobs::TIMEOUT`].
async fn answered_jobs(source: &Source, jobs: &agent::slurm_jobs::JobRecords) {
    let mut procfs = ProcFs::new(&source.proc_root, Some(&source.passwd));
    procfs.set_job_records(Some(jobs.clone()));
    let held = agent::slurm::holdings(&source.cgroup_root, &procfs);
    let until = std::time::Instant::now() + agent::slurm_jobs::TIMEOUT;
    while held.iter().any(|h| jobs.asking(&h.job_id)) && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn backend(source: &Source) -> anyhow::Result<Box<dyn GpuBackend>> {
    backend_with(source, job_records(source))
}

/// [`backend`], with Slurm jobs' records from `jobs`.
fn backend_with(
    source: &Source,
    jobs: Option<agent::slurm_jobs::JobRecords>,
) -> anyhow::Result<Box<dyn GpuBackend>> {
    match source.backend {
        BackendKind::Nvml => {
            let node = node_name(source)?;
            let mut procfs = ProcFs::new(&source.proc_root, Some(&source.passwd));
            procfs.set_job_records(jobs);
            let mut b = NvmlBackend::open(&source.nvml_lib, &source.cluster, &node, procfs)?;
            b.set_replicas(source.time_slicing_replicas);
            b.set_rare_every(source.rare_every);
            b.set_process_utilization_every(source.process_utilization_every);
            b.set_cgroup_root((!source.no_slurm).then(|| source.cgroup_root.clone()));
            Ok(Box::new(b))
        }
        BackendKind::Simulated => {
            let (Some(path), Some(node)) = (&source.scenario, &source.node) else {
                anyhow::bail!("the simulated backend needs --scenario FILE and --node NAME");
            };
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read scenario {}: {e}", path.display()))?;
            let scenario = simulator::Scenario::from_toml(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Ok(Box::new(SimulatedBackend::new(scenario, node)?))
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let json = cli.log_format == LogFormat::Json;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPULENS_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    if json {
        logs.json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        // Colour only for a person at a terminal; files and log pipelines get plain text.
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if json => {
            tracing::error!(error = %format!("{e:#}"), "gpulens-agent stopped");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Sample { source, format, .. } => sample(&source, format).await,
        Command::Bench {
            source,
            cycles,
            interval,
        } => bench(&source, cycles, interval),
        Command::BenchRecovery {
            source,
            outage,
            rounds,
            interval,
            retry_max,
        } => bench_recovery(&source, outage, rounds, interval, retry_max).await,
        Command::Run {
            source,
            collector,
            token,
            token_file,
            ca_file,
            client_cert,
            client_key,
            state_dir,
            interval,
            spool_max_bytes,
            spool_min_free_percent,
            listen,
            dcgm_url,
            dcgm_exporter_uid,
            seq_block,
            nfd_dir,
            nfd_every,
        } => {
            let listen = match listen.as_str() {
                "off" | "" => None,
                addr => Some(
                    addr.parse()
                        .map_err(|e| anyhow::anyhow!("--listen {addr:?}: {e}"))?,
                ),
            };
            let token = match (token, token_file) {
                (Some(t), _) => ingest_client::Token::fixed(&t),
                (None, Some(path)) => ingest_client::Token::file(&path)
                    .map_err(|e| anyhow::anyhow!("--token-file {e}"))?,
                (None, None) => anyhow::bail!("give --token-file or --token"),
            };
            let cfg = agent::runner::RunConfig {
                collector,
                token,
                state_dir,
                interval_ms: interval,
                spool_max_bytes,
                spool_min_free_percent,
                listen,
                dcgm_url,
                dcgm_exporter_uid,
                seq_block,
                pod_resources_socket: source.pod_resources_socket.clone(),
                kubelet_pods_dir: source.kubelet_pods_dir.clone(),
                grants: node_grants(&source)?.map(std::sync::Arc::new),
                nfd_dir,
                nfd_every: std::time::Duration::from_millis(nfd_every),
                retry: agent::runner::Retry::default(),
                tls: ingest_client::Tls::from_files(
                    ca_file.as_deref(),
                    client_cert.as_deref(),
                    client_key.as_deref(),
                )
                .map_err(|e| anyhow::anyhow!(e))?,
            };
            agent::runner::run(backend(&source)?, cfg).await
        }
    }
}

/// `gpulens-agent sample`: one cycle, printed.
async fn sample(source: &Source, format: Format) -> anyhow::Result<()> {
    let jobs = job_records(source);
    if let Some(jobs) = &jobs {
        answered_jobs(source, jobs).await;
    }
    let mut b = backend_with(source, jobs)?;
    let grants = node_grants(source)?;
    if let Some(a) = agent::runner::kubelet_assignments(
        &source.pod_resources_socket,
        source.kubelet_pods_dir.as_deref(),
        grants.as_ref(),
    )
    .await
    {
        b.set_assignments(a);
    }
    let ts = now_ms();
    let (mut snapshot, mut tenants) = b.sample(ts)?;
    // What a running agent would batch: what no batch may hold taken out (and logged).
    agent::out_of_domain::OutOfDomain::default().take_out(&mut snapshot, &mut tenants);
    let (cluster, node) = b.identity();
    match format {
        Format::Json => {
            // Serialized straight from the model types (not through serde_json::Value,
            // which would widen every f32).
            #[derive(serde::Serialize)]
            struct Cycle<'a> {
                cluster: &'a str,
                node: &'a str,
                inventory: Vec<model::GpuInfo>,
                tenants: &'a [model::Tenant],
                snapshot: &'a model::wire::v1::Snapshot,
            }
            let out = Cycle {
                cluster,
                node,
                inventory: b.inventory(),
                tenants: &tenants,
                snapshot: &snapshot,
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Format::Table => print!(
            "{}",
            agent::report::table(cluster, node, &b.inventory(), &snapshot, &tenants)
        ),
    }
    Ok(())
}

/// `gpulens-agent bench`: the cost of one sampling cycle.
fn bench(source: &Source, cycles: u32, interval: u64) -> anyhow::Result<()> {
    let mut b = backend(source)?;
    let r = agent::bench::run(
        b.as_mut(),
        cycles,
        std::time::Duration::from_millis(interval),
    )?;
    println!(
        "agent benchmark: {} cycles of sample + attribute + domain check + batch + encode (MessagePack, snappy) + spool",
        r.cycles
    );
    println!(
        "  per cycle: {} GPUs, {} processes, {} rows, {} bytes compressed",
        r.gpus, r.processes, r.rows_per_cycle, r.batch_bytes
    );
    println!(
        "  CPU time per cycle:   {:>8.3} ms (wall {:.3} ms)",
        r.cpu_ms_per_cycle, r.wall_ms_per_cycle
    );
    println!(
        "  share of one core at {} ms: {:.3} %",
        interval,
        r.core_share_at_interval * 100.0
    );
    println!("  peak RSS (VmHWM):     {:>8.1} MiB", r.peak_rss_mib);
    if !r.calls.is_empty() {
        println!("  driver calls per cycle, the costliest first:");
        println!(
            "    {:<22} {:>10} {:>12} {:>12} {:>10}  NVML function",
            "reading", "calls", "µs per call", "CPU µs", "of cycle"
        );
        for c in &r.calls {
            println!(
                "    {:<22} {:>10.2} {:>12.1} {:>12.1} {:>9.1} %  {}",
                c.reading,
                c.calls_per_cycle,
                c.us_per_call,
                c.cpu_us_per_call,
                c.share_of_cycle * 100.0,
                c.function.unwrap_or("-")
            );
        }
    }
    if let Some(p) = &r.profile {
        println!("  these costs on the fake NVML: GPULENS_FAKE_NVML_LATENCY={p}");
    }
    Ok(())
}

/// `gpulens-agent bench-recovery`: how fast the backlog drains after an outage.
async fn bench_recovery(
    source: &Source,
    outage: u64,
    rounds: u32,
    interval: u64,
    retry_max: u64,
) -> anyhow::Result<()> {
    let outage = std::time::Duration::from_millis(outage);
    let retry = agent::runner::Retry {
        max: std::time::Duration::from_millis(retry_max),
        ..agent::runner::Retry::default()
    };
    println!(
        "backlog drain after a {} s outage, sampling every {interval} ms, retries at most {} s apart ({rounds} rounds)",
        outage.as_secs_f64(),
        retry.max.as_secs_f64()
    );
    let mut ratios = Vec::new();
    for n in 1..=rounds.max(1) {
        let r = agent::bench::recovery::round(backend(source)?, outage, interval, retry).await?;
        println!(
            "  round {n}: drained {} batches in {:.2} s after the return: {:.1}x real time ({} lost)",
            r.backlog_batches,
            r.drain.as_secs_f64(),
            r.ratio(),
            r.missing
        );
        ratios.push(r.ratio());
    }
    ratios.sort_by(f64::total_cmp);
    println!("  median: {:.1}x real time", ratios[ratios.len() / 2]);
    Ok(())
}
