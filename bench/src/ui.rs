//! `gpulens bench ui`: server-side render time of every dashboard page with a large fleet's
//! history (default 1,000 GPUs × 30 days), through the real router in-process (no network), so
//! what is measured is the page: store queries, the analysis cache, view models, leptos.

use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use crate::analyze::{analyze_fleet, fill_analyze};
use collector::{router::router, state::AppState};
use store::series::quantile;
use store::{Store, rollup};

#[derive(Debug, clap::Args)]
pub struct UiBench {
    /// A scratch database (postgres://… or sqlite://…) holding nothing but this benchmark's
    /// fleet; a database it filled before is reused.
    #[arg(long, env = "GPULENS_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// At least this many GPUs (the default scenario copied).
    #[arg(long, default_value_t = 1000)]
    pub gpus: usize,
    /// Days of hour rollups (the 30-day range the pages offer).
    #[arg(long, default_value_t = 30)]
    pub days: i64,
    /// Requests per page; p50 and p95 are reported.
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
}

async fn fill(store: &Store, args: &UiBench) -> anyhow::Result<()> {
    let fleet = std::sync::Arc::new(analyze_fleet(args.gpus)?);
    let cluster = fleet.scenario.cluster.clone();
    let nodes = store.nodes().await?;
    if let Some(other) = nodes.iter().find(|n| n.cluster != cluster) {
        anyhow::bail!(
            "{} holds data of cluster {:?}; use a scratch database",
            store::redact_url(&args.database_url),
            other.cluster
        );
    }
    let to = rollup::bucket_of(model::time::now_ms(), rollup::HOUR_MS);
    if nodes.len() != fleet.nodes.len() {
        anyhow::ensure!(
            nodes.is_empty(),
            "the database holds {} of the benchmark's {} nodes: use a new scratch database",
            nodes.len(),
            fleet.nodes.len()
        );
        eprintln!(
            "filling {} GPUs on {} nodes: {} days of hour rollups, the last 7 of minute rollups …",
            fleet.gpu_count(),
            fleet.nodes.len(),
            args.days
        );
        let t = Instant::now();
        let (h, m) = fill_analyze(store, &fleet, args.days, 7, 60_000, to).await?;
        eprintln!("  merging {} cluster-hours …", args.days * 24);
        for hour in 0..args.days * 24 {
            store
                .refresh_cluster_hour(&cluster, to - (hour + 1) * rollup::HOUR_MS)
                .await?;
        }
        eprintln!(
            "filled {h} hour rows and {m} minute rows in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    } else {
        eprintln!("reusing the fleet already in the database");
    }
    Ok(())
}

pub async fn run(args: UiBench) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds >= 2, "--rounds must be at least 2");
    let store = Store::connect(&args.database_url).await?;
    store.migrate().await?;
    fill(&store, &args).await?;
    let settings = collector::analysis::Settings::default();
    eprintln!("analysing the last 7 days, as the collector does on schedule …");
    collector::analysis::scheduled(&store, &settings, &Default::default())
        .await?
        .ok_or_else(|| anyhow::anyhow!("another process holds the analytics lock"))?;
    let state = AppState::with_analytics(
        store.clone(),
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
        settings,
    );
    let body = store
        .latest_analysis()
        .await?
        .ok_or_else(|| anyhow::anyhow!("no stored analysis"))?;
    let analysis = collector_shared::newest::stored::decode(&body).map_err(anyhow::Error::msg)?;
    let gpus = store.gpus(None).await?;
    let g = gpus
        .first()
        .ok_or_else(|| anyhow::anyhow!("no GPUs in the database"))?;
    let mut pages = vec![
        "/".to_owned(),
        "/?range=30d".into(),
        "/nodes".into(),
        format!("/nodes/{}?range=30d", g.node),
        format!("/gpus/{}?range=30d", g.uuid),
        "/tenants".into(),
        "/teams".into(),
        "/findings".into(),
        "/recommendations".into(),
        "/alerts".into(),
        "/reports".into(),
    ];
    if let Some(id) = analysis.findings.first().map(|f| &f.id) {
        pages.push(format!("/findings/{id}"));
    }
    if let Some(id) = analysis.recommendations.first().map(|r| &r.id) {
        pages.push(format!("/recommendations/{id}"));
    }
    println!(
        "ui benchmark: {} GPUs on {} nodes, {} days of history, backend {}, {} requests per page",
        gpus.len(),
        store.nodes().await?.len(),
        args.days,
        store.backend(),
        args.rounds
    );
    println!(
        "  {:<48} {:>9} {:>9} {:>9}",
        "page", "p50 ms", "p95 ms", "KiB"
    );
    let mut worst: f64 = 0.0;
    for p in &pages {
        let mut times = Vec::with_capacity(args.rounds);
        let mut size = 0;
        // One request first: the analysis cache fills once per analysis, not per page view.
        for round in 0..=args.rounds {
            let t = Instant::now();
            let resp = router(state.clone())
                .oneshot(Request::get(p.as_str()).body(Body::empty())?)
                .await?;
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
            let elapsed = t.elapsed();
            anyhow::ensure!(status == StatusCode::OK, "{p}: HTTP {status}");
            size = bytes.len();
            if round > 0 {
                times.push(elapsed.as_secs_f64() * 1000.0);
            }
        }
        let p95 = quantile(&mut times, 0.95).unwrap_or(0.0);
        worst = worst.max(p95);
        println!(
            "  {:<48} {:>9.1} {:>9.1} {:>9.0}",
            if p.len() > 48 { &p[..48] } else { p },
            quantile(&mut times, 0.5).unwrap_or(0.0),
            p95,
            size as f64 / 1024.0
        );
    }
    println!("  slowest page p95: {worst:.1} ms (bar: 300 ms)");
    Ok(())
}
