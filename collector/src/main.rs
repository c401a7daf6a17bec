//! `gpulens`: the collector and everything around it. See `gpulens --help`.

use clap::Parser;

use collector::commands::cli::{Cli, LogFormat};

/// mimalloc rather than the system allocator: see the dependency's note in Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let json = cli.log_format == LogFormat::Json;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPULENS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn")),
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
    match collector::run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if json => {
            tracing::error!(error = %format!("{e:#}"), "gpulens stopped");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
