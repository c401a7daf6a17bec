//! `gpulens demo`: a collector on an embedded SQLite database, a simulated fleet from a
//! scenario, a week of history backfilled in bulk over the real ingest API, then live samples
//! and the dashboard.

use std::io::Write;

use crate::commands::cli::DemoArgs;
use crate::config::Config;
use crate::simulate::{Driver, load_scenario};
use crate::state::AppState;
use collector_shared::agent_auth::Auth;
use model::figures::count;
use store::Store;

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let scenario = load_scenario(args.scenario.as_deref())?;
    let interval = std::time::Duration::from_millis(u64::from(scenario.interval_ms()));
    let config = demo_config();
    let retention: store::Retention = (&config.retention).into();
    if args.history > retention.raw {
        anyhow::bail!(
            "--history may be at most the raw retention ({})",
            model::time::format_duration(retention.raw)
        );
    }
    let (listener, db, store) = open(&args).await?;
    let addr = listener.local_addr()?;

    // The demo's simulated agents get their own token, valid for this run only, for any node
    // of any cluster, so `gpulens simulate` can add another scenario beside it.
    let token = format!("demo-{:x}{:x}", model::time::now_ms(), std::process::id());
    let mut auth = Auth::default();
    auth.add(&token, vec!["*".into()], None);
    // The cluster the reclaim loop acts on: the Kubernetes API stand-in (demo_cluster.rs).
    let kube = kube_standin::StandIn::start().await;
    let state = AppState::with_analytics(
        store.clone(),
        auth,
        config.ingest.clone(),
        retention,
        config.teams.clone(),
        config.analytics.clone(),
    )
    .with_reclaim(super::demo_cluster::settings(&scenario, kube.url()));
    // One stop for every phase: the first Ctrl-C or SIGTERM ends the backfill, the analysis
    // or the live stream where it is, and shuts the server down (a second is never needed).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::server::shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stop = Stop(stop_rx);
    let server = tokio::spawn(crate::server::serve(
        listener,
        state.clone(),
        stop.clone().signalled(),
    ));
    let url = format!("http://{addr}/");
    let fleet = simulator::Fleet::new(scenario.clone());
    println!(
        "gpulens demo: scenario {:?} ({}, {}), database {}",
        scenario.name,
        model::figures::count(scenario.nodes.len() as f64, "node", "nodes"),
        model::figures::count(fleet.gpu_count() as f64, "GPU", "GPUs"),
        db
    );
    println!("dashboard: {url} (API at {url}api/v1/nodes; history is loading)");
    let env_file = write_env_file(&args.data_dir, &addr, &token)?;
    println!(
        "for a second terminal: source {} (GPULENS_URL={}, GPULENS_TOKEN for `gpulens simulate`, GPULENS_DATA_DIR={} for `gpulens analyze`, `gpulens report` and `gpulens labels`)",
        env_file.display(),
        url.trim_end_matches('/'),
        args.data_dir.display()
    );

    let client = ingest_client::Client::new(&format!("http://{addr}"), &token)?;
    let driver = Driver::new(fleet, client);
    let now = model::time::now_ms();
    let step = args.history_step.as_millis().max(1000) as i64;
    let starts = history_starts(&store, &driver, &scenario.cluster, now, &args).await?;
    let started = std::time::Instant::now();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let loading = state.shared.loading.clone();
    // Until the history is loaded and analysed the overview says so instead of showing
    // numbers of a partial week.
    loading.set(0, 1);
    let backfill = driver.backfill(
        |node| starts[node],
        now,
        step,
        60,
        progress(loading.clone(), tty),
    );
    let Some(stats) = stop.unless(backfill).await else {
        return stopped("loading the history", server).await;
    };
    let stats = stats?;
    if tty {
        eprintln!();
    }
    let Some(minutes) = stop.unless(state.upkeep_once()).await else {
        return stopped("rolling up the history", server).await;
    };
    let minutes = minutes?;
    println!(
        "history loaded: {} batches, {} rows, {} node-minutes rolled up in {:.1}s",
        stats.batches,
        stats.rows,
        minutes,
        started.elapsed().as_secs_f64()
    );
    record_waiting(&store, &scenario, &state.shared.teams, now).await?;
    let t = std::time::Instant::now();
    let analysis = crate::analysis::scheduled(&store, &state.analytics, &state.metrics.analysis);
    let Some(analysis) = stop.unless(analysis).await else {
        return stopped("analysing the history", server).await;
    };
    if let Some(a) = analysis? {
        println!("{}", analysed(&a, t.elapsed(), &url));
    }
    loading.finish();
    if args.no_live {
        return Ok(());
    }
    if stop.is_signalled() {
        return stopped("analysing the history", server).await;
    }
    // The reclaim loop, in dry run, against the stand-in cluster of the scenario's pods.
    let reclaim = super::demo_cluster::dry_run_reclaim(&state, &kube).await?;
    live(&state, driver, server, interval, &url, reclaim).await
}

/// The line that says the history is analysed, and where to read the result.
/// The defaults, and emissions at the world's average grid intensity, about 480 gCO2e/kWh in
/// 2023 (Ember, Global Electricity Review 2024); a deployment sets its own
/// ([analytics.carbon], docs/cost.md).
fn demo_config() -> Config {
    let mut config = Config::default();
    config.analytics.thresholds.carbon.g_per_kwh = Some(480.0);
    config
}

fn analysed(a: &analytics::Analysis, took: std::time::Duration, url: &str) -> String {
    format!(
        "analysis: {}, {} in {:.1}s ({url}api/v1/findings, {url}api/v1/recommendations, or `gpulens analyze`)",
        count(a.findings.len() as f64, "finding", "findings"),
        count(
            a.recommendations.len() as f64,
            "recommendation",
            "recommendations"
        ),
        took.as_secs_f64()
    )
}

/// Where each node's backfill starts: after its newest stored sample (a reused data directory
/// continues its history), never before the history asked for, kept clear of the
/// raw-retention edge so no sample ages out while it is in flight.
async fn history_starts(
    store: &Store,
    driver: &Driver,
    cluster: &str,
    now: i64,
    args: &DemoArgs,
) -> anyhow::Result<Vec<i64>> {
    let oldest = now - args.history.as_millis() as i64 + 600_000;
    let step = args.history_step.as_millis().max(1000) as i64;
    let mut starts = Vec::new();
    for n in &driver.fleet().nodes {
        let last = store.last_sample_ms(cluster, &n.spec.name).await?;
        starts.push(last.map_or(oldest, |l| (l + step).max(oldest)));
    }
    Ok(starts)
}

/// The data directory, the listener (before anything slow, so a taken port fails at once) and
/// the migrated database.
async fn open(args: &DemoArgs) -> anyhow::Result<(tokio::net::TcpListener, String, Store)> {
    std::fs::create_dir_all(&args.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create data directory {}: {e}",
            args.data_dir.display()
        )
    })?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {}: {e} (pick another with --listen)",
                args.listen
            )
        })?;
    let db = format!("sqlite://{}", args.data_dir.join("gpulens.db").display());
    let store = Store::connect(&db).await?;
    store.migrate().await?;

    Ok((listener, db, store))
}

/// Backfill progress: the overview's loading notice, and a line at a terminal (rewritten in
/// place) or in a log (one per tenth).
fn progress(
    loading: std::sync::Arc<collector_shared::shared::Loading>,
    tty: bool,
) -> impl Fn(usize, usize) + Send + Sync + 'static {
    move |done, total| {
        loading.set(done as u64, total as u64);
        if done == total || done % (total / 10).max(1) == 0 {
            let line = format!(
                "backfilling history: {done}/{total} batches ({} %)",
                done * 100 / total.max(1)
            );
            if tty {
                eprint!("\r{line}");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
        }
    }
}

/// Streams live samples and runs the collector's background tasks until the server stops.
async fn live(
    state: &AppState,
    driver: Driver,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    interval: std::time::Duration,
    url: &str,
    reclaim: Option<crate::reclaim::Reclaim>,
) -> anyhow::Result<()> {
    println!(
        "streaming live samples every {} ms; dashboard: {url} (Ctrl-C to stop)",
        interval.as_millis()
    );
    if reclaim.is_some() {
        println!(
            "reclaim loop: dry run against a Kubernetes API stand-in holding the scenario's pods; its cases: {url}reclaim"
        );
    }
    // The collector's background tasks, the same set `serve` runs. The history was just
    // analysed, so the schedule's first analysis comes one period later; alerts are visible at
    // /api/v1/alerts (no receivers configured); reports use the default settings.
    let plan = crate::schedule::Plan {
        storage_every: std::time::Duration::from_secs(10),
        analysis: (*state.analytics).clone(),
        analysis_first_after: state.analytics.every,
        alerts: Some(crate::alerts::settings::Settings::default()),
        reports: Some(((*state.reports).clone(), state.analytics.thresholds.clone())),
        labels: None,
        demand: None,
        reclaim,
    };
    let runner = collector_shared::tasks::Runner::start(
        &state.shared.tasks,
        crate::schedule::standard(state, plan),
    );
    let live = tokio::spawn(async move { driver.stream(interval, None).await });
    let result = server.await?;
    runner.stop().await;
    live.abort();
    result?;
    Ok(())
}

/// The scenario's waiting pods as the demand poll records pending pods, for a scenario ending
/// at `now`; `team_of` maps a namespace to its team.
pub fn waiting_records(
    scenario: &simulator::Scenario,
    team_of: &dyn Fn(&str) -> String,
    now: i64,
) -> Vec<store::waiting::WaitingRecord> {
    scenario
        .waiting
        .iter()
        .map(|w| {
            let (since, last) = w.span_ms(now);
            store::waiting::WaitingRecord {
                cluster: scenario.cluster.clone(),
                source: "pod".into(),
                uid: format!("demo-{}-{}", w.namespace, w.name),
                scope: w.namespace.clone(),
                team: team_of(&w.namespace),
                name: w.name.clone(),
                resource: w.resource.clone(),
                count: i64::from(w.count),
                product: w.product(),
                reason: "Unschedulable".into(),
                message: format!(
                    "simulated by gpulens demo: 0/{} nodes are available: Insufficient {}",
                    scenario.nodes.len(),
                    w.resource
                ),
                since_ms: since,
                first_seen_ms: since,
                last_seen_ms: last,
            }
        })
        .collect()
}

/// The demo's stop: set once by the first Ctrl-C or SIGTERM.
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    fn is_signalled(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the stop is signalled.
    async fn signalled(mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Runs `work` unless the stop comes first (None: `work` is dropped where it was, and
    /// whatever it spawned into a `JoinSet` is aborted with it).
    async fn unless<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            out = work => Some(out),
            () = self.clone().signalled() => None,
        }
    }
}

/// Ends the demo after a stop in `phase`: the server shuts down with the same signal; what was
/// stored stays (the next run continues the history from each node's last sample).
async fn stopped(
    phase: &str,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
) -> anyhow::Result<()> {
    eprintln!(
        "\nstopped while {phase}; the database keeps what was stored (the next run continues from there)"
    );
    server.await??;
    Ok(())
}

/// Writes `DATA_DIR/env`: what a second terminal needs to use the running demo, as shell
/// variables (`source` it). The token is valid while this demo runs.
fn write_env_file(
    data_dir: &std::path::Path,
    addr: &std::net::SocketAddr,
    token: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let path = data_dir.join("env");
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_owned());
    let text = format!(
        "# Written by `gpulens demo` for a second terminal: source this file.\n\
         # GPULENS_TOKEN is an agent token valid while that demo runs.\n\
         export GPULENS_URL='http://{addr}'\n\
         export GPULENS_TOKEN='{token}'\n\
         export GPULENS_DATA_DIR='{}'\n",
        dir.display().to_string().replace('\'', "'\\''")
    );
    std::fs::write(&path, text)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The per-GPU sharing mechanisms the scenario's nodes have, as (node, mechanism) — what the
/// demand poll records from a cluster's ResourceSlices; an unknown name is an error that lists
/// the known ones.
pub fn mechanism_records(scenario: &simulator::Scenario) -> anyhow::Result<Vec<(String, String)>> {
    use analytics::mechanism::Mechanism;
    let mut out = Vec::new();
    for n in &scenario.nodes {
        for m in &n.mechanisms {
            let m =
                Mechanism::from_name(m).map_err(|e| anyhow::anyhow!("node {:?}: {e}", n.name))?;
            out.push((n.name.clone(), m.as_str().to_owned()));
        }
    }
    Ok(out)
}

/// The scenario's pods waiting for GPUs, recorded as the demand poll would record pending pods
/// (the demo has no Kubernetes API to read them from; their message says they are simulated),
/// and the mechanisms its nodes have, as the poll would record them from ResourceSlices.
async fn record_waiting(
    store: &store::Store,
    scenario: &simulator::Scenario,
    teams: &collector_shared::teams::TeamsConfig,
    now: i64,
) -> anyhow::Result<()> {
    let seen = mechanism_records(scenario)?;
    if !seen.is_empty() {
        store
            .record_mechanisms(&scenario.cluster, &seen, now)
            .await?;
        println!(
            "per-GPU sharing: {} recorded as seen on the scenario's nodes",
            model::figures::count(seen.len() as f64, "mechanism", "mechanisms")
        );
    }
    let rows = waiting_records(scenario, &|ns| teams.team_of_namespace(ns), now);
    if !rows.is_empty() {
        store.record_waiting(&rows).await?;
        println!(
            "waiting demand: {} recorded",
            model::figures::count(
                rows.len() as f64,
                "simulated pending pod",
                "simulated pending pods"
            )
        );
    }
    Ok(())
}
