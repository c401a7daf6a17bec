//! `gpulens labels plan | apply | status`.
// The doc comments here are the commands' --help text, where `[alerts]` names a section of
// the configuration file, not a link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use analytics::Analysis;
use model::labels::{OPERATOR_DEVICE_PLUGIN_CONFIG, OPERATOR_MIG_CONFIG, OPERATOR_MIG_STATE};

use super::setup::{DbArgs, load_config_or_demo, open_history};
use crate::labels::kube::Cluster;
use crate::labels::settings::Mode;
use crate::labels::workflow;

#[derive(Debug, clap::Args)]
pub struct LabelsArgs {
    #[command(subcommand)]
    pub command: LabelsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum LabelsCommand {
    /// Show the advisory labels and GPU Operator changes the latest analysis proposes. Writes
    /// nothing.
    Plan(Common),
    /// Converge advisory labels on every node (mode advise or apply-with-approval); with
    /// --approve NODE, run the reconfiguration workflow for that node (apply-with-approval).
    Apply(ApplyArgs),
    /// Show, per node, the gpulens labels, the GPU Operator labels and whether it is cordoned.
    Status(Common),
}

#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub db: DbArgs,
    /// Without --database-url or --config: the demo's data directory (its `env` file sets
    /// GPULENS_DATA_DIR).
    #[arg(long, env = "GPULENS_DATA_DIR", default_value = ".gpulens/demo")]
    pub data_dir: PathBuf,
    /// How much history the analysis covers: at least an hour.
    #[arg(long, default_value = "7d", value_parser = super::setup::analysis_window)]
    pub since: Duration,
    /// The Kubernetes API server (overrides [labels] kube_url; default: in-cluster or
    /// kubeconfig).
    #[arg(long)]
    pub kube_url: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub common: Common,
    /// Overrides [labels] mode for this run.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Approve and run the GPU Operator change planned for this node.
    #[arg(long, value_name = "NODE")]
    pub approve: Option<String>,
    /// Who approves (recorded with every step).
    #[arg(long, env = "USER", default_value = "unknown")]
    pub approver: String,
    /// Go ahead although GPU pods remain on the node after the drain timeout's wait.
    #[arg(long)]
    pub override_pods: bool,
}

async fn analyse(
    c: &Common,
) -> anyhow::Result<(crate::config::Config, store::Store, Analysis, i64)> {
    let config = load_config_or_demo(&c.db, &c.data_dir)?;
    let store = open_history(&c.db, &config).await?;
    store.migrate().await?;
    let now = model::time::now_ms();
    let (a, stats) =
        crate::analysis::run(&store, &config.analytics.thresholds, c.since, now).await?;
    anyhow::ensure!(
        stats.gpu_hours > 0,
        "no rolled-up history in {}: nothing to label",
        store::redact_url(&config.database_url())
    );
    Ok((config, store, a, now))
}

async fn cluster(c: &Common, config: &crate::config::Config) -> anyhow::Result<Cluster> {
    let url = c.kube_url.as_deref().or(config.labels.kube_url.as_deref());
    Cluster::connect(url).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot reach the Kubernetes API ({}): {e}",
            url.unwrap_or("in-cluster or kubeconfig")
        )
    })
}

pub async fn run(args: LabelsArgs) -> anyhow::Result<()> {
    match args.command {
        LabelsCommand::Plan(c) => plan(c).await,
        LabelsCommand::Apply(a) => apply(a).await,
        LabelsCommand::Status(c) => status(c).await,
    }
}

async fn plan(c: Common) -> anyhow::Result<()> {
    let (config, _, a, now) = analyse(&c).await?;
    println!(
        "mode: {} (set [labels] mode in the configuration)",
        config.labels.mode.as_str()
    );
    println!("\nAdvisory labels");
    for ((cluster, node), labels) in crate::labels::advisory::labels(&a, now) {
        println!("  {node} (cluster {cluster})");
        for (k, v) in labels {
            println!("    {k}={v}");
        }
    }
    println!("\nGPU Operator changes (need approval: gpulens labels apply --approve NODE)");
    let clusters: std::collections::BTreeSet<&str> = a
        .recommendations
        .iter()
        .map(|r| r.cluster.as_str())
        .collect();
    let p: Vec<_> = clusters
        .iter()
        .flat_map(|c| {
            workflow::plans(&a, c, config.labels.custom_layouts.as_ref())
                .into_values()
                .map(move |p| (*c, p))
        })
        .collect();
    if p.is_empty() {
        println!("  none");
    }
    for (cluster, plan) in &p {
        println!(
            "  {} (cluster {cluster}): {}={}",
            plan.node, plan.label, plan.value
        );
        if let Some(l) = &plan.layout {
            println!(
                "    and the config itself into ConfigMap {}/{}",
                l.namespace(),
                l.config_map()
            );
        }
    }
    Ok(())
}

async fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let (config, store, analysis, now) = analyse(&a.common).await?;
    let mode = a.mode.unwrap_or(config.labels.mode);
    if mode == Mode::Off {
        anyhow::bail!(
            "labels are off: set [labels] mode = \"advise\" (or pass --mode advise) to write advisory labels"
        );
    }
    let c = cluster(&a.common, &config).await?;
    let (name, nodes) = crate::labels::advisory::for_cluster(
        crate::labels::advisory::labels(&analysis, now),
        config.labels.cluster.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (node, labels) in nodes {
        match c.converge_if_known(&node, &labels).await? {
            Some(done) => println!(
                "{node}: {} added, {} changed, {} removed",
                done.added.len(),
                done.changed.len(),
                done.removed.len()
            ),
            None => println!("{node}: not a node of this cluster, skipped"),
        }
    }
    let Some(node) = a.approve else {
        return Ok(());
    };
    if mode != Mode::ApplyWithApproval {
        anyhow::bail!(
            "--approve needs mode apply-with-approval (now {}): GPU Operator labels are never written otherwise",
            mode.as_str()
        );
    }
    // Through the audit trail: record the plan, approve it, run it with every step stored.
    let mut settings = config.labels.clone();
    settings.mode = mode;
    let plans = workflow::plans(&analysis, &name, settings.custom_layouts.as_ref());
    let plan = plans.get(&node).ok_or_else(|| {
        anyhow::anyhow!("the analysis proposes no GPU Operator change for {node}")
    })?;
    crate::labels::actions::record_plans(
        &store,
        &BTreeMap::from([(node.clone(), plan.clone())]),
        &a.approver,
        now,
    )
    .await?;
    let open = store
        .label_actions(&store::label_actions::ActionFilter {
            node: Some(&node),
            states: &[store::label_actions::ActionState::Planned],
            ..store::label_actions::ActionFilter::newest(100)
        })
        .await?
        .into_iter()
        .find(|x| x.label == plan.label)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{node} already has an approved or running change; see gpulens labels status"
            )
        })?;
    crate::labels::actions::approve(
        &store,
        &settings,
        &collector_shared::newest::Newest::default(),
        open.id,
        &a.approver,
        a.override_pods,
        model::time::now_ms(),
    )
    .await?;
    println!(
        "running the approved change {}={} on {node} (label action {})",
        open.label, open.value, open.id
    );
    for (id, outcome) in crate::labels::actions::run_approved(&store, &c, &settings, true).await? {
        println!("label action {id}: {}", serde_json::to_string(&outcome)?);
    }
    Ok(())
}

async fn status(c: Common) -> anyhow::Result<()> {
    let config = load_config_or_demo(&c.db, &c.data_dir)?;
    let k = cluster(&c, &config).await?;
    let store = open_history(&c.db, &config).await?;
    for n in store.nodes().await? {
        let Ok(node) = k.node(&n.node).await else {
            println!("{}: not in the Kubernetes API", n.node);
            continue;
        };
        let labels = node.metadata.labels.unwrap_or_default();
        let cordoned = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        println!("{}{}", n.node, if cordoned { " (cordoned)" } else { "" });
        for (key, v) in &labels {
            if key.starts_with(model::labels::ADVISORY_PREFIX)
                || [
                    OPERATOR_MIG_CONFIG,
                    OPERATOR_MIG_STATE,
                    OPERATOR_DEVICE_PLUGIN_CONFIG,
                ]
                .contains(&key.as_str())
            {
                println!("    {key}={v}");
            }
        }
    }
    Ok(())
}
