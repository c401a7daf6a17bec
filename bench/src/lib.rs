//! `gpulens bench`: the performance bars of docs/PERFORMANCE.md, each measured against a real
//! database with the collector's own code (ingest over HTTP, the store, the analysis, the
//! dashboard's router). A crate of its own, beside the product: the `gpulens-bench` program,
//! which `gpulens bench …` runs.

pub mod analyze;
mod fleet;
pub mod ingest;
mod ingest_breakdown;
mod phase;
pub mod storage;
pub mod ui;
pub mod wire;

/// The benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// End-to-end ingest against raw COPY of the same rows, side by side.
    ///
    /// Each round stores the same simulated rows twice: raw COPY, then over HTTP through the
    /// whole ingest path (with `--breakdown`, twice more without HTTP: decoded and stored, and
    /// stored alone). Reports rows/s and their ratio, and CPU per 1,000 rows of this process
    /// and of the whole machine (which includes the database when it runs here). Takes a
    /// CHECKPOINT before each phase when the role may (superuser or pg_checkpoint).
    Ingest(crate::ingest::IngestBench),
    /// Bytes on disk per GPU-second of raw data, per table, beside Prometheus's TSDB holding
    /// the same readings as dcgm-exporter series (promtool).
    Storage(crate::storage::StorageBench),
    /// Series queries: one GPU's raw hour, a fleet's month of hour rollups.
    Series(crate::ingest::SeriesBench),
    /// Analytics: load a fleet's week of rollups and compute funnel, findings and
    /// recommendations (default 1,000 GPUs x 7 days); PostgreSQL or SQLite.
    Analyze(crate::analyze::AnalyzeBench),
    /// Dashboard: server-side render time of every page with a large fleet's history
    /// (default 1,000 GPUs x 30 days); p50 and p95 per page.
    Ui(crate::ui::UiBench),
    /// Batch encodings: what the agent's encoding, the bytes sent and the collector's decoding
    /// cost per row, JSON with gzip against MessagePack with snappy (no database).
    Wire(crate::wire::WireBench),
}

/// Runs one benchmark.
pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Ingest(args) => ingest::ingest(args).await,
        BenchCommand::Storage(args) => storage::storage(args).await,
        BenchCommand::Series(args) => ingest::series(args).await,
        BenchCommand::Analyze(args) => analyze::analyze(args).await,
        BenchCommand::Ui(args) => ui::run(args).await,
        BenchCommand::Wire(args) => wire::wire(args),
    }
}
