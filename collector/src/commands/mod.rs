//! The `gpulens` command line: argument definitions (`cli.rs`) and one function per command
//! (`serve`, `migrate`, `analyze`, `report`, `simulate` here; `demo`, `bench`, `labels` in
//! their own files).

pub mod bench;
pub mod bench_ui;
pub mod cli;
pub mod demo;
pub mod labels;

use crate::config::{Config, Secret};
use cli::{BenchCommand, Command, DbArgs, ServeArgs, SimulateArgs};

/// Runs one `gpulens` command.
pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => demo::run(args).await,
        Command::Serve(args) => serve(args).await,
        Command::Simulate(args) => simulate(args).await,
        Command::Migrate(args) => migrate(args).await,
        Command::Analyze(args) => analyze(args).await,
        Command::Labels(args) => labels::run(args).await,
        Command::Report(args) => report(args).await,
        Command::Bench(BenchCommand::Ingest(args)) => bench::ingest(args).await,
        Command::Bench(BenchCommand::Series(args)) => bench::series(args).await,
        Command::Bench(BenchCommand::Analyze(args)) => bench::analyze(args).await,
        Command::Bench(BenchCommand::Ui(args)) => bench_ui::run(args).await,
    }
}

pub(crate) fn load_config(db: &DbArgs) -> anyhow::Result<Config> {
    let mut config = match &db.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(url) = &db.database_url {
        config.database_url = Some(Secret(url.clone()));
    }
    Ok(config)
}

pub(crate) async fn open_store(config: &Config) -> anyhow::Result<store::Store> {
    let url = config.database_url();
    if url.starts_with("sqlite://") {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create data directory {}: {e}",
                config.data_dir.display()
            )
        })?;
    }
    let store = store::Store::connect(&url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", store::redact_url(&url)))?;
    Ok(store)
}

async fn migrate(args: DbArgs) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    let store = open_store(&config).await?;
    let applied = store.migrate().await?;
    if applied.is_empty() {
        println!("database is up to date ({})", store.backend());
    } else {
        println!(
            "applied {} migration(s) to {}: {}",
            applied.len(),
            store.backend(),
            applied.join(", ")
        );
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = load_config(&args.db)?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    let auth = crate::auth::Auth::from_config(&config.agents)?;
    if config.agents.is_empty() {
        tracing::warn!("no [[agents]] configured: every ingest request will be refused with 401");
    }
    let store = open_store(&config).await?;
    let applied = store.migrate().await?;
    if !applied.is_empty() {
        tracing::info!(?applied, "migrations applied");
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    let state = crate::state::AppState::with_analytics(
        store,
        auth,
        config.ingest.clone(),
        (&config.retention).into(),
        config.teams.clone(),
        config.analytics.clone(),
    )
    .with_labels(config.labels.clone())
    .with_reports(config.reports.clone());
    tracing::info!(listen = %listener.local_addr()?, backend = state.store.backend(), "gpulens collector serving");
    let cluster = crate::labels::connect_if_enabled(&config.labels).await;
    let plan = crate::schedule::Plan {
        storage_every: config.rollup_every,
        analysis: config.analytics.clone(),
        analysis_first_after: std::time::Duration::ZERO,
        alerts: config.alerts.enabled.then(|| config.alerts.clone()),
        reports: config
            .reports
            .enabled
            .then(|| (config.reports.clone(), config.analytics.thresholds.clone())),
        labels: cluster.map(|c| (c, config.labels.clone())),
    };
    let runner = crate::tasks::Runner::start(&state.tasks, crate::schedule::standard(&state, plan));
    let result = crate::server::serve_with(
        listener,
        state,
        config.server.clone(),
        crate::server::shutdown_signal(),
    )
    .await;
    runner.stop().await;
    Ok(result?)
}

/// The configuration, or, with neither --database-url nor --config, the demo's database in
/// `demo_dir`, so commands run right after `gpulens demo` just work.
pub(crate) fn load_config_or_demo(
    db: &DbArgs,
    demo_dir: &std::path::Path,
) -> anyhow::Result<Config> {
    let mut config = load_config(db)?;
    if db.database_url.is_none() && db.config.is_none() {
        config.data_dir = demo_dir.to_owned();
    }
    Ok(config)
}

/// Progress of `gpulens report` on standard error: a bar on a terminal once the work takes
/// more than a moment, plain lines otherwise.
struct ReportProgress {
    started: std::time::Instant,
    tty: bool,
}

impl crate::reports::Progress for ReportProgress {
    fn stage(&mut self, done: usize, of: usize, what: &str) {
        use std::io::Write;
        let slow = self.started.elapsed() > std::time::Duration::from_millis(300);
        if !self.tty {
            if done < of - 1 {
                eprintln!("{what} ...");
            }
            return;
        }
        if !slow && done == 0 {
            return;
        }
        let width = 24;
        let filled = width * (done + 1) / of;
        eprint!(
            "\r[{}{}] {}/{} {what:<40} {:>5.1}s",
            "#".repeat(filled),
            " ".repeat(width - filled),
            done + 1,
            of,
            self.started.elapsed().as_secs_f64()
        );
        if done + 1 == of {
            eprintln!();
        }
        let _ = std::io::stderr().flush();
    }
}

async fn report(args: cli::ReportArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let config = load_config_or_demo(&args.db, &args.data_dir)?;
    let timezone = args
        .timezone
        .clone()
        .unwrap_or_else(|| config.reports.timezone.clone());
    let tz = crate::reports::week::zone(&timezone).map_err(|e| anyhow::anyhow!(e))?;
    let now = model::time::now_ms();
    let week = match &args.week {
        Some(w) => w.parse().map_err(|e: String| anyhow::anyhow!(e))?,
        None => crate::reports::week::IsoWeek::last_complete(now, &tz),
    };
    let store = open_store(&config).await?;
    store.migrate().await?;
    let mut progress = ReportProgress {
        started: std::time::Instant::now(),
        tty: std::io::stderr().is_terminal(),
    };
    let thresholds = &config.analytics.thresholds;
    let (data, html, csv) =
        crate::reports::generate(&store, thresholds, week, &timezone, now, &mut progress).await?;
    if data.is_empty() {
        // Name the weeks that do have data, so the next command is obvious.
        let nodes = store.nodes().await?;
        let first = nodes.iter().map(|n| n.first_seen_ms).min();
        let last = nodes.iter().filter_map(|n| n.last_sample_ms).max();
        let hint = match (first, last) {
            (Some(f), Some(l)) => {
                let (a, b) = (
                    crate::reports::week::IsoWeek::containing(f, &tz),
                    crate::reports::week::IsoWeek::containing(l, &tz),
                );
                if b.bounds(&tz).1 > now && a == b {
                    format!(
                        "the data starts in {b}, which is not over until {}: try again then",
                        model::time::rfc3339(b.bounds(&tz).1)
                    )
                } else {
                    format!("the data covers {a} to {b}: pick one of those with --week")
                }
            }
            _ => "the database has no samples: run `gpulens demo`, or point --database-url at a collector's database".to_owned(),
        };
        anyhow::bail!(
            "no data for {week} ({} to {}) in {}: {hint}",
            model::time::rfc3339(data.from_ms),
            model::time::rfc3339(data.to_ms),
            store::redact_url(&config.database_url())
        );
    }
    let body = match args.format {
        cli::ReportFormat::Html => html.clone(),
        cli::ReportFormat::Csv => csv.clone(),
    };
    if !args.no_store {
        crate::reports::make_stored(&store, &data, html, csv).await?;
    }
    match &args.out {
        Some(path) => {
            std::fs::write(path, body)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!("{}\nwritten to {}", data.summary(), path.display());
        }
        None => print!("{body}"),
    }
    for note in &data.limitations {
        eprintln!("note: {note}");
    }
    Ok(())
}

async fn analyze(args: cli::AnalyzeArgs) -> anyhow::Result<()> {
    let config = load_config_or_demo(&args.db, &args.data_dir)?;
    let store = open_store(&config).await?;
    store.migrate().await?;
    eprintln!(
        "analysing the last {} of history in {} ...",
        span_in_words(args.since),
        store::redact_url(&config.database_url())
    );
    let (analysis, stats) = crate::analysis::run(
        &store,
        &config.analytics.thresholds,
        args.since,
        model::time::now_ms(),
    )
    .await?;
    eprintln!(
        "read {} GPU-hours, {} tenant-hours and {} minute rows in {:.1}s; analysed in {:.1}s",
        stats.gpu_hours,
        stats.tenant_hours,
        stats.minute_rows,
        stats.load.as_secs_f64(),
        stats.analyze.as_secs_f64()
    );
    if stats.gpu_hours == 0 {
        anyhow::bail!(
            "no rolled-up history in {}: run `gpulens demo` or point --database-url at a collector's database",
            store::redact_url(&config.database_url())
        );
    }
    if !args.no_store {
        crate::analysis::save(
            &store,
            &analysis,
            model::time::now_ms(),
            config.analytics.keep,
        )
        .await?;
        eprintln!(
            "stored as the newest analysis: the dashboard, /api/v1/findings and alerting serve it until the next scheduled run (--no-store to only print)"
        );
    }
    let out = match args.format {
        cli::OutputFormat::Json => serde_json::to_string_pretty(&analysis)?,
        cli::OutputFormat::Table => crate::analysis::table(&analysis),
    };
    println!("{out}");
    Ok(())
}

/// A span for people: "7 days", "1 day 12 hours", "90 minutes" (not humantime's "7days").
pub fn span_in_words(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    let (days, hours, minutes) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (days, hours, minutes) {
        (0, 0, 0) => plural(s, "second"),
        (0, 0, m) => plural(m, "minute"),
        (0, h, 0) => plural(h, "hour"),
        (0, h, m) => format!("{} {}", plural(h, "hour"), plural(m, "minute")),
        (d, 0, _) => plural(d, "day"),
        (d, h, _) => format!("{} {}", plural(d, "day"), plural(h, "hour")),
    }
}

async fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    if args.token.trim().is_empty() {
        anyhow::bail!(
            "no agent token: pass --token or set GPULENS_TOKEN (a running `gpulens demo` writes one to .gpulens/demo/env: source it)"
        );
    }
    let scenario = crate::simulate::load_scenario(Some(&args.scenario))?;
    let interval = std::time::Duration::from_millis(u64::from(scenario.interval_ms()));
    let client = ingest_client::Client::new(&args.collector, &args.token)?;
    let fleet = simulator::Fleet::new(scenario);
    let driver = crate::simulate::Driver::new(fleet, client);
    let now = model::time::now_ms();
    if !args.history.is_zero() {
        let from = now - args.history.as_millis() as i64;
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let stats = driver
            .backfill(
                |_| from,
                now,
                args.history_step.as_millis().max(1000) as i64,
                60,
                move |done, total| {
                    // In place at a terminal; every tenth in a file, a line each.
                    if tty {
                        eprint!("\rbackfilling: {done}/{total} batches");
                    } else if done == total || done % (total / 10).max(1) == 0 {
                        eprintln!("backfilling: {done}/{total} batches");
                    }
                },
            )
            .await?;
        if tty {
            eprintln!();
        }
        println!("backfilled {} batches, {} rows", stats.batches, stats.rows);
    }
    match args.duration {
        Some(d) if d.is_zero() => Ok(()),
        d => {
            println!("streaming every {} ms", interval.as_millis());
            tokio::select! {
                r = driver.stream(interval, d) => r,
                () = crate::server::shutdown_signal() => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::span_in_words;
    use std::time::Duration;

    #[test]
    fn spans_read_as_words() {
        assert_eq!(span_in_words(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(
            span_in_words(Duration::from_secs(86_400 + 12 * 3600)),
            "1 day 12 hours"
        );
        assert_eq!(
            span_in_words(Duration::from_secs(90 * 60)),
            "1 hour 30 minutes"
        );
        assert_eq!(span_in_words(Duration::from_secs(45)), "45 seconds");
    }
}
