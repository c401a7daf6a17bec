//! The `gpulens` command line: `demo`, `serve`, `simulate` and `migrate`.
// The doc comments here are the commands' --help text, where `[alerts]` names a section of
// the configuration file, not a link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use super::setup::DbArgs;

#[derive(Debug, Parser)]
#[command(name = "gpulens", version, about = "GPU cluster utilization analytics: who holds which GPU, how much of it they use, and what to change", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log lines as text for people, or as one JSON object per line for log pipelines
    /// (timestamp, level, target, message and the event's fields).
    #[arg(long, global = true, value_enum, env = "GPULENS_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a collector on an embedded database with a simulated fleet: a week of history is
    /// backfilled, live samples stream in, and the dashboard URL is printed.
    Demo(DemoArgs),
    /// Run the collector: ingest API, storage, rollups, read API, dashboard, /metrics.
    Serve(ServeArgs),
    /// Drive a collector with a simulated fleet over the real wire protocol.
    Simulate(SimulateArgs),
    /// Apply database migrations and exit. On PostgreSQL with the citus extension this also
    /// distributes the tables over the cluster's workers (docs/deploy.md, "Past one server").
    Migrate(MigrateArgs),
    /// Replace the deployment's stored session key with a new random one: every dashboard
    /// session ends once the collectors restart (they read the key at start). Used when
    /// `[access] session_key` is not set; a configured key is rotated by changing it.
    RotateSessionKey(DbArgs),
    /// Compute the utilization funnel, findings and recommendations from the stored rollups
    /// and print them (the collector also runs this on a schedule and serves it at
    /// /api/v1/findings and /api/v1/recommendations).
    Analyze(AnalyzeArgs),
    /// Node labels from the analysis: `plan` shows them, `apply` writes advisory labels and runs
    /// approved GPU Operator changes, `status` shows what is on the nodes (docs/labels.md).
    Labels(super::labels::LabelsArgs),
    /// Make the weekly utilization report of an ISO week (HTML or CSV) and store it, as the
    /// collector does on schedule; printed, or written to --out (docs/reports.md).
    Report(ReportArgs),
    /// The cost of a range from the stored rollups: per team (allocation- and usage-based cost,
    /// idle cost, energy, emissions), or FOCUS 1.2 CSV rows for FinOps tools (docs/cost.md).
    Cost(super::cost::CostArgs),
    /// Print the alert rules in force (defaults plus [alerts] rules of --config) as Prometheus
    /// alerting rules: a PrometheusRule object for the Prometheus Operator, or a plain rule file
    /// (docs/alerts.md, "Alerting from Prometheus").
    AlertRules(AlertRulesArgs),
    /// Measure ingest, storage, query, analytics and dashboard speed against a scratch
    /// database (`gpulens bench --help`). The benchmarks are their own program, gpulens-bench,
    /// built beside gpulens (`cargo build --release --bin gpulens-bench`); this runs it with the
    /// arguments given.
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
}

/// What `gpulens bench` passes on to gpulens-bench, untouched (`--help` included).
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Address for the dashboard and API.
    #[arg(long, default_value = "127.0.0.1:8080", env = "GPULENS_LISTEN")]
    pub listen: SocketAddr,
    /// Where the demo keeps its SQLite database (reusing it continues the history) and the
    /// `env` file a second terminal sources.
    #[arg(long, env = "GPULENS_DATA_DIR", default_value = ".gpulens/demo")]
    pub data_dir: PathBuf,
    /// Scenario file describing the simulated fleet (default: the built-in Kubernetes cluster,
    /// scenarios/k8s-mixed.toml).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// How much history to backfill (at most the raw retention, 7 days).
    #[arg(long, default_value = "7d", value_parser = model::time::parse_duration)]
    pub history: Duration,
    /// Sample spacing of the backfilled history.
    #[arg(long, default_value = "60s", value_parser = model::time::parse_duration)]
    pub history_step: Duration,
    /// Stop after backfilling instead of serving and streaming live data.
    #[arg(long)]
    pub no_live: bool,
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Require Citus: create the citus extension when the database lacks it (the server must
    /// load citus through shared_preload_libraries and have its workers added), then
    /// distribute the tables by node. Without it, tables are distributed whenever the database
    /// already has the extension.
    #[arg(long)]
    pub citus: bool,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Listen address; overrides the config file.
    #[arg(long, env = "GPULENS_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Serve on an address other than loopback although no sign-in is configured ([access]),
    /// so the dashboard and the read API answer anyone (per-tenant usage and cost). Say so only
    /// where only trusted people reach the port (docs/security.md).
    #[arg(long, env = "GPULENS_INSECURE_OPEN")]
    pub insecure_open: bool,
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (TOML; see docs/scenarios.md).
    #[arg(long)]
    pub scenario: PathBuf,
    /// Base URL of the collector, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub collector: String,
    /// Agent token; the collector must bind it to the scenario's nodes (or "*").
    #[arg(long, env = "GPULENS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the agent token (one line; a mounted secret), instead of --token.
    #[arg(long, env = "GPULENS_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// History to backfill before streaming (0s for none).
    #[arg(long, default_value = "0s", value_parser = model::time::parse_duration)]
    pub history: Duration,
    /// Sample spacing of the backfilled history.
    #[arg(long, default_value = "60s", value_parser = model::time::parse_duration)]
    pub history_step: Duration,
    /// How long to stream live samples (0s: do not stream; omit: until interrupted).
    #[arg(long, value_parser = model::time::parse_duration)]
    pub duration: Option<Duration>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OutputFormat {
    /// Tables for people.
    Table,
    /// The full analysis: funnel, findings with evidence, recommendations with replay.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Without --database-url or --config: the demo's data directory (its `env` file sets
    /// GPULENS_DATA_DIR).
    #[arg(long, env = "GPULENS_DATA_DIR", default_value = ".gpulens/demo")]
    pub data_dir: PathBuf,
    /// The ISO week, e.g. 2026-W46 (default: the last complete week; it says when that week
    /// is only partly covered by data).
    #[arg(long)]
    pub week: Option<String>,
    /// IANA time zone whose Monday midnights bound the week (default: [reports] timezone, UTC).
    #[arg(long)]
    pub timezone: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Html)]
    pub format: ReportFormat,
    /// Write the report here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not store the report in the database (it is stored by default, replacing one of the
    /// same week, and served at /api/v1/reports).
    #[arg(long)]
    pub no_store: bool,
}

#[derive(Debug, clap::Args)]
pub struct AlertRulesArgs {
    /// The collector's configuration file; without it, the default rules.
    #[arg(long, env = "GPULENS_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = AlertRulesFormat::PrometheusRule)]
    pub format: AlertRulesFormat,
    /// Namespace of the PrometheusRule object.
    #[arg(long, default_value = "gpulens")]
    pub namespace: String,
    /// Write the rules here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only these groups, comma-separated (the Helm chart keeps each in its own file).
    /// Default: the alert rules, the dcgm-labels recording rules unless `[metrics]
    /// dcgm_labels = false`, and the tenant recording rules with `[metrics] tenant_series`.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub groups: Vec<RuleGroup>,
}

/// A group of `gpulens alert-rules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuleGroup {
    /// The alerting rules (`gpulens`).
    Alerts,
    /// Per-tenant recording rules (`gpulens-tenants`).
    Tenants,
    /// The per-GPU series under dcgm-exporter's label names (`gpulens-dcgm-labels`).
    DcgmLabels,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AlertRulesFormat {
    /// A monitoring.coreos.com/v1 PrometheusRule (kubectl apply).
    PrometheusRule,
    /// A Prometheus rule file (rule_files: in prometheus.yml; promtool check rules).
    RuleFile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Html,
    Csv,
}

#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Without --database-url or --config: the demo's data directory (its `env` file sets
    /// GPULENS_DATA_DIR).
    #[arg(long, env = "GPULENS_DATA_DIR", default_value = ".gpulens/demo")]
    pub data_dir: PathBuf,
    /// How much history to analyse, up to now: at least an hour (the analysis reads hour
    /// rollups).
    #[arg(long, default_value = "7d", value_parser = super::setup::analysis_window)]
    pub since: Duration,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// Only print the analysis. By default it is also stored as the newest analysis, which
    /// the dashboard, the API and alerting serve until the collector's next scheduled run.
    /// Interference's pair-hours measured from minutes are kept either way (a summary of the
    /// minutes that later analyses read, not a result).
    #[arg(long)]
    pub no_store: bool,
}
