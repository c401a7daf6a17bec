//! `[labels]` in the collector's configuration: whether and how gpulens writes node labels.

use std::time::Duration;

use serde::Deserialize;

/// How far gpulens may go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Write nothing (the default).
    #[default]
    Off,
    /// Write advisory `gpulens.io/` labels only.
    Advise,
    /// Advisory labels, and GPU Operator labels through the workflow after a person approves.
    ApplyWithApproval,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Advise => "advise",
            Mode::ApplyWithApproval => "apply-with-approval",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub mode: Mode,
    /// Write advisory labels through the Kubernetes API. `false`: only the agents' Node
    /// Feature Discovery files carry them (the collector then needs no RBAC at all).
    pub api: bool,
    /// The API server; unset: the in-cluster service account, else the local kubeconfig.
    pub kube_url: Option<String>,
    /// The gpulens cluster name (the agents' `--cluster`) of the Kubernetes cluster this
    /// collector writes labels to: only that cluster's nodes are labelled or reconfigured.
    /// Unset: allowed while the data holds one cluster only; with several, nothing is written
    /// until this is set.
    pub cluster: Option<String>,
    /// Mark the dashboard's session cookie `Secure` (sent over HTTPS only). Set it whenever
    /// the dashboard is reached over TLS (a TLS-terminating ingress or proxy).
    pub secure_cookies: bool,
    /// How long the workflow waits for GPU pods to leave a cordoned node.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub drain_timeout: Duration,
    /// How long the MIG manager may take to report success.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub config_timeout: Duration,
    /// At most one GPU Operator change per node in this long.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub min_interval: Duration,
    /// How often approved changes are looked for.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub every: Duration,
    /// People who may approve changes through the API (`Authorization: Bearer <token>`).
    pub operators: Vec<Operator>,
    /// Write generated MIG and device-plugin configs into the GPU Operator's ConfigMaps
    /// (`[labels.custom_layouts]`); absent: plans select configs that must already be there.
    pub custom_layouts: Option<super::layouts::Settings>,
}

/// Someone allowed to approve GPU Operator changes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operator {
    /// Recorded as the approver.
    pub name: String,
    pub token: collector_shared::settings::Secret,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Off,
            api: true,
            kube_url: None,
            cluster: None,
            secure_cookies: false,
            drain_timeout: Duration::from_secs(3600),
            config_timeout: Duration::from_secs(1800),
            min_interval: Duration::from_secs(86_400),
            every: Duration::from_secs(30),
            operators: Vec::new(),
            custom_layouts: None,
        }
    }
}
