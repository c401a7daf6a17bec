//! `gpulens-bench` (run as `gpulens bench …`): the benchmarks of docs/PERFORMANCE.md.

use clap::Parser;

/// Measure ingest, storage, query, analytics and dashboard speed against a scratch database.
#[derive(Debug, Parser)]
#[command(name = "gpulens bench", bin_name = "gpulens bench", version)]
struct Cli {
    #[command(subcommand)]
    command: bench::BenchCommand,
}

/// mimalloc, as the collector runs: what is measured is what is served.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPULENS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,sqlx=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match bench::run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
