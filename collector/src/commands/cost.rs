//! `gpulens cost`: the cost of a range from the stored rollups — a summary per team, or the
//! FOCUS 1.2 rows `GET /api/v1/cost/focus` serves (docs/cost.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use analytics::focus::Charge;

use super::setup::DbArgs;
use super::setup::{load_config_or_demo, open_history};
use crate::analysis::cost::{self, Only, Refused};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CostFormat {
    /// Per team: allocated GPU-hours, cost, usage-based and idle cost, energy, emissions.
    Table,
    /// FOCUS 1.2 CSV, one row per tenant, GPU and UTC day.
    Focus,
}

#[derive(Debug, clap::Args)]
pub struct CostArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Without --database-url or --config: the demo's data directory.
    #[arg(long, env = "GPULENS_DATA_DIR", default_value = ".gpulens/demo")]
    pub data_dir: PathBuf,
    /// Start: RFC 3339, Unix ms, or now-7d (default: 7 days before --to).
    #[arg(long)]
    pub from: Option<String>,
    /// End, exclusive (default: the start of the current UTC day). At most 31 days after
    /// --from.
    #[arg(long)]
    pub to: Option<String>,
    /// Only this cluster's GPUs.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Only this team's rows.
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long, value_enum, default_value_t = CostFormat::Table)]
    pub format: CostFormat,
    /// Write to this file instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub async fn run(args: CostArgs) -> anyhow::Result<()> {
    let config = load_config_or_demo(&args.db, &args.data_dir)?;
    let (from, to) = cost::range(
        args.from.as_deref(),
        args.to.as_deref(),
        model::time::now_ms(),
    )
    .map_err(|(which, why)| anyhow::anyhow!("--{which}: {why}"))?;
    let store = open_history(&args.db, &config).await?;
    store.migrate().await?;
    let cfg = &config.analytics.thresholds;
    let only = Only {
        cluster: args.cluster.clone(),
        team: args.team.clone(),
        teams: None,
    };
    eprintln!(
        "reading the cost of {} to {} from {} ...",
        model::time::rfc3339(from),
        model::time::rfc3339(to),
        store::redact_url(&config.database_url())
    );
    let rows = cost::charges(&store, cfg, from, to, &only)
        .await
        .map_err(|e| match e {
            Refused::Bounds(why) => anyhow::anyhow!(why),
            Refused::Failed(e) => e,
        })?;
    if rows.is_empty() {
        eprintln!(
            "no GPU time was held or used in that range (is it within the rollups' retention?)"
        );
    }
    let text = match args.format {
        CostFormat::Focus => cost::csv(&rows, &cfg.currency),
        CostFormat::Table => table(&rows, &cfg.currency),
    };
    match &args.out {
        Some(path) => {
            std::fs::write(path, text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!("wrote {} rows to {}", rows.len(), path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// Per team: the sums of its rows, the fleet's last.
fn table(rows: &[Charge], currency: &str) -> String {
    #[derive(Default)]
    struct Sums {
        held: f64,
        cost: f64,
        usage: f64,
        kwh: Option<f64>,
        idle_kwh: Option<f64>,
        co2e: Option<f64>,
    }
    let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    };
    let mut by: BTreeMap<&str, Sums> = BTreeMap::new();
    let mut all = Sums::default();
    for r in rows {
        for s in [by.entry(r.team.as_str()).or_default(), &mut all] {
            s.held += r.allocated_gpu_hours;
            s.cost += r.cost();
            s.usage += r.usage_cost();
            s.kwh = add(s.kwh, r.energy_kwh);
            s.idle_kwh = add(s.idle_kwh, r.idle_energy_kwh);
            s.co2e = add(s.co2e, r.co2e_kg);
        }
    }
    let opt = |v: Option<f64>, d: usize| v.map_or("-".to_owned(), |v| format!("{v:.d$}"));
    let mut out = format!(
        "{:<24} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}\n",
        "team",
        "GPU-hours",
        format!("cost {currency}"),
        "usage-based",
        "idle",
        "kWh",
        "idle kWh",
        "kg CO2e"
    );
    let line = |name: &str, s: &Sums| {
        format!(
            "{name:<24} {:>12.2} {:>12.2} {:>12.2} {:>12.2} {:>10} {:>10} {:>10}\n",
            s.held,
            s.cost,
            s.usage,
            s.cost - s.usage,
            opt(s.kwh, 1),
            opt(s.idle_kwh, 1),
            opt(s.co2e, 1)
        )
    };
    for (team, s) in &by {
        out.push_str(&line(team, s));
    }
    out.push_str(&line("all", &all));
    out
}
