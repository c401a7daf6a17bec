//! The collector's configuration: one TOML file (see `gpulens.example.toml`), overridable by
//! environment variables and command-line flags. Unknown keys are errors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use crate::ingest::IngestConfig;
pub use crate::upkeep::RetentionConfig;
pub use collector_shared::agent_auth::AgentAuth;
pub use collector_shared::settings::{Secret, duration};
pub use collector_shared::teams::TeamsConfig;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server listens on.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// `postgres://…` or `sqlite://PATH`. Unset: SQLite in `data_dir`.
    #[serde(default)]
    pub database_url: Option<Secret>,
    /// Where the embedded SQLite database lives when no database URL is set.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Agent tokens and the nodes each may speak for.
    #[serde(default)]
    pub agents: Vec<AgentAuth>,
    /// Agents identified by their projected ServiceAccount token, each bound to its own node
    /// through the API server's TokenReview; see docs/security.md.
    #[serde(default)]
    pub token_review: Option<collector_shared::token_review::Settings>,
    #[serde(default)]
    pub retention: RetentionConfig,
    #[serde(default)]
    pub ingest: IngestConfig,
    #[serde(default)]
    pub teams: TeamsConfig,
    /// How often the background pass runs: remote-write settling, rollups, retention.
    #[serde(default = "default_rollup_every", deserialize_with = "duration")]
    pub rollup_every: Duration,
    /// Scheduled analysis: how often, over how much history, thresholds and prices.
    #[serde(default)]
    pub analytics: crate::analysis::Settings,
    /// Node labels: off (default), advise, or apply-with-approval; see docs/labels.md.
    #[serde(default)]
    pub labels: crate::labels::Settings,
    /// Waiting demand: pending pods read from the Kubernetes API (off by default); see
    /// docs/demand.md.
    #[serde(default)]
    pub demand: crate::demand::Settings,
    /// The reclaim loop: policies under which idle holdings are noticed, given grace and
    /// reclaimed (none by default; dry run by default); see docs/reclaim.md.
    #[serde(default)]
    pub reclaim: crate::reclaim::Settings,
    /// Alert rules, grouping and receivers; see docs/alerts.md.
    #[serde(default)]
    pub alerts: crate::alerts::Settings,
    /// Opt-in per-tenant series on /metrics; see docs/metrics.md.
    #[serde(default)]
    pub metrics: crate::fleet::MetricsSettings,
    /// Weekly reports: time zone, schedule, webhook; see docs/reports.md.
    #[serde(default)]
    pub reports: crate::reports::Settings,
    /// Who may see what: sign-in, roles, team scopes, tokens; see docs/security.md.
    #[serde(default)]
    pub access: collector_shared::access::Settings,
    /// Timeouts and limits of the HTTP listener; see docs/security.md.
    #[serde(default)]
    pub server: collector_shared::listener::ServerLimits,
}

fn default_listen() -> SocketAddr {
    "127.0.0.1:8080".parse().expect("valid")
}
fn default_data_dir() -> PathBuf {
    PathBuf::from(".gpulens")
}
fn default_rollup_every() -> Duration {
    Duration::from_secs(10)
}
impl Default for Config {
    fn default() -> Self {
        toml::from_str("").expect("the empty config is valid")
    }
}

impl Config {
    /// Reads a config file; errors name the file and the problem.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let mut config: Config = toml::from_str(text)?;
        config.check()?;
        let carbon = &mut config.analytics.thresholds.carbon;
        if let Some(path) = carbon.hourly_file.clone() {
            let hourly = std::fs::read_to_string(&path).map_err(|e| {
                anyhow::anyhow!("analytics.carbon.hourly_file {}: {e}", path.display())
            })?;
            carbon.read_hourly(&hourly).map_err(|e| {
                anyhow::anyhow!("analytics.carbon.hourly_file {}: {e}", path.display())
            })?;
        }
        Ok(config)
    }

    fn check(&self) -> anyhow::Result<()> {
        for (i, a) in self.agents.iter().enumerate() {
            if a.token.is_none() == a.token_file.is_none() {
                anyhow::bail!("agents[{i}] needs exactly one of token or token_file");
            }
            if a.nodes.is_empty() {
                anyhow::bail!(
                    "agents[{i}].nodes is empty; name the nodes this token may send for (\"*\" for any)"
                );
            }
        }
        for (i, o) in self.labels.operators.iter().enumerate() {
            collector_shared::settings::check_token(
                &format!("labels.operators[{i}].token"),
                &o.token.0,
            )
            .map_err(anyhow::Error::msg)?;
        }
        if let Some(r) = &self.token_review {
            r.check()?;
        }
        self.access.check()?;
        let analytics = &self.analytics.thresholds;
        analytics.check_prices().map_err(anyhow::Error::msg)?;
        analytics.carbon.check().map_err(anyhow::Error::msg)?;
        self.alerts.check()?;
        self.metrics.check()?;
        self.reports.check()?;
        self.demand.check()?;
        self.reclaim.check()?;
        if self.labels.mode == crate::labels::Mode::ApplyWithApproval && !self.labels.api {
            anyhow::bail!(
                "[labels] mode = \"apply-with-approval\" changes GPU Operator labels through the Kubernetes API; it needs api = true"
            );
        }
        if self.retention.raw > self.retention.minute || self.retention.minute > self.retention.hour
        {
            anyhow::bail!(
                "retention must not shrink with coarser resolution (raw <= minute <= hour)"
            );
        }
        Ok(())
    }

    /// The database URL to use: the configured one, or SQLite in the data directory.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.0.clone(),
            None => format!("sqlite://{}", self.data_dir.join("gpulens.db").display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_placeholder_tokens_are_refused_naming_the_setting() {
        let err = |toml: &str| Config::parse(toml).unwrap_err().to_string();
        let e = err("[[labels.operators]]\nname = \"a\"\ntoken = \"short\"");
        assert!(
            e.contains("labels.operators[0].token") && e.contains("16"),
            "{e}"
        );
        let e =
            err("[access]\n[[access.tokens]]\nname = \"g\"\ntoken = \"CHANGE-ME-viewer-token\"");
        assert!(
            e.contains("access.tokens[0].token") && e.contains("placeholder"),
            "{e}"
        );
        let e = err("[access.scrape]\ntoken = \"aaaaaaaaaaaaaaaaaaaaaaa\"");
        assert!(
            e.contains("access.scrape.token") && e.contains("different"),
            "{e}"
        );
        assert!(!e.contains("aaaa"), "the error never shows the value: {e}");
        for ok in ["9f86d081884c7d659a2feaa0c55ad015", "a1b2c3d4e5f6a7b8c9d0"] {
            collector_shared::settings::check_token("t", ok).unwrap();
        }
        for bad in [
            "<agent token for node a>",
            "replace_me_with_a_token",
            "my-example-token-1",
        ] {
            assert!(
                collector_shared::settings::check_token("t", bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpulens.example.toml");
        // The example reads the agents' token from the environment; the test gives it inline.
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"${GPULENS_AGENT_TOKEN}\"", "\"a1b2c3d4e5f6a7b8c9d0\"");
        let c = Config::parse(&text).unwrap();
        assert_eq!(c.retention.raw, Duration::from_secs(7 * 86_400));
        assert!(!c.agents.is_empty());
    }

    #[test]
    fn mistakes_are_named() {
        let err = Config::parse("listn = \"x\"").unwrap_err().to_string();
        assert!(err.contains("unknown field `listn`"), "{err}");
        let err = Config::parse("[retention]\nraw = \"seven days\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a duration"), "{err}");
        let err = Config::parse("[[agents]]\nnodes = [\"a\"]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("exactly one of token or token_file"), "{err}");
        for (text, says) in [
            ("[analytics]\ncurrency = \"usd\"", "analytics.currency"),
            ("[[analytics.price_rules]]\nprice = 2.0", "names no cluster"),
            (
                "[[analytics.price_rules]]\nsharing = \"fractional\"\nprice = 2.0",
                "fractional",
            ),
            (
                "[analytics.carbon]\ng_per_kwh = 400000",
                "analytics.carbon.g_per_kwh",
            ),
            (
                "[analytics.carbon]\nhourly_file = \"/nonexistent/grid.csv\"",
                "hourly_file /nonexistent/grid.csv",
            ),
        ] {
            let err = format!("{:#}", Config::parse(text).unwrap_err());
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn an_hourly_carbon_file_is_read_with_the_configuration() {
        let dir = std::env::temp_dir().join(format!("gpulens-carbon-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("grid.csv");
        std::fs::write(
            &file,
            "cluster,hour,g_per_kwh\nprod,2026-12-01T10:00:00Z,120\n",
        )
        .unwrap();
        let c = Config::parse(&format!(
            "[analytics.carbon]\ng_per_kwh = 400\nhourly_file = {:?}",
            file.display().to_string()
        ))
        .unwrap();
        let carbon = &c.analytics.thresholds.carbon;
        assert_eq!(carbon.intensity("prod", 1_796_120_000_000), Some(120.0));
        assert_eq!(carbon.intensity("lab", 1_796_120_000_000), Some(400.0));
        std::fs::write(&file, "cluster,hour,g_per_kwh\nprod,noon,120\n").unwrap();
        let err = Config::parse(&format!(
            "[analytics.carbon]\nhourly_file = {:?}",
            file.display().to_string()
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 2"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn label_settings_parse_and_contradictions_are_refused() {
        let c = Config::parse(
            "[labels]\nmode = \"apply-with-approval\"\n[labels.custom_layouts]\nmig_config_map = \"my-mig\"\nsync_wait = \"90s\"",
        )
        .unwrap();
        let l = c.labels.custom_layouts.unwrap();
        assert_eq!(
            (l.namespace.as_str(), l.mig_config_map.as_str()),
            ("gpu-operator", "my-mig")
        );
        assert_eq!(l.device_plugin_config_map, "time-slicing-config");
        assert_eq!(l.sync_wait, Duration::from_secs(90));
        let err = Config::parse("[labels]\nmode = \"apply-with-approval\"\napi = false")
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs api = true"), "{err}");
        assert!(Config::parse("[labels]\nmode = \"advise\"\napi = false").is_ok());
    }

    #[test]
    fn secrets_do_not_leak_through_debug() {
        let c = Config::parse("database_url = \"postgres://u:pw@h/db\"").unwrap();
        assert!(!format!("{c:?}").contains("pw@"));
    }

    #[test]
    fn teams_come_from_mapping_or_namespace() {
        let c = Config::parse("[teams.namespaces]\nml-train = \"research\"").unwrap();
        let mut t = model::Tenant {
            key: "k".into(),
            kind: model::TenantKind::Pod,
            namespace: Some("ml-train".into()),
            pod: None,
            container: None,
            pod_uid: None,
            job_id: None,
            user: None,
            account: None,
            uid: None,
        };
        assert_eq!(c.teams.team_of(&t).as_deref(), Some("research"));
        t.namespace = Some("web".into());
        assert_eq!(c.teams.team_of(&t).as_deref(), Some("web"));
    }
}
