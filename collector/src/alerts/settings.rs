//! `[alerts]` in the collector's configuration: rules, grouping and receivers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::rules::{Kind, Rule};
use collector_shared::settings::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Evaluate rules and deliver notifications (on the collector holding the alerting lock).
    pub enabled: bool,
    /// How often rules are evaluated and due notifications sent.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub every: Duration,
    /// Labels whose values make up a notification group.
    pub group_by: Vec<String>,
    /// How long a new group waits for more alerts before its first notification.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub group_wait: Duration,
    /// How long after a notification a changed group is notified again; also the longest
    /// wait between two delivery attempts.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub group_interval: Duration,
    /// How long after a notification an unchanged, still firing group is notified again.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub repeat_interval: Duration,
    /// Resolved alerts are kept (and served at /api/v1/alerts) this long.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub keep_resolved: Duration,
    /// Base URL of this gpulens, for links in notifications.
    pub external_url: Option<String>,
    /// Base URL of an Alertmanager's web UI: each alert then carries a `silence` annotation,
    /// a link that opens a new silence matching it there.
    pub silence_url: Option<String>,
    /// Start from the default rules (each replaced by a configured rule of the same name).
    pub default_rules: bool,
    pub rules: Vec<Rule>,
    pub receivers: Vec<Receiver>,
}

/// Where notifications go.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receiver {
    /// Shown in payloads and at /api/v1/alerts.
    pub name: String,
    pub kind: ReceiverKind,
    /// The webhook URL (Slack's carry their secret in the path, so it is never logged), or an
    /// Alertmanager's base URL.
    pub url: Secret,
    /// Signs every body: `X-Gpulens-Signature: sha256=<HMAC-SHA256 of "<timestamp>.<body>">`.
    #[serde(default)]
    pub secret: Option<Secret>,
    /// Per attempt.
    #[serde(
        default = "default_timeout",
        deserialize_with = "collector_shared::settings::duration"
    )]
    pub timeout: Duration,
    /// Also notify when a group's alerts resolve.
    #[serde(default = "yes")]
    pub send_resolved: bool,
    /// Only alerts whose labels have these values.
    #[serde(default)]
    pub matchers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiverKind {
    /// Alertmanager's webhook format, version 4 (what Alertmanager itself sends).
    Webhook,
    /// A Slack incoming webhook: one message per notification, at most one a second per URL.
    Slack,
    /// gpulens' own JSON (docs/alerts.md).
    Json,
    /// Push the alerts to an Alertmanager's `/api/v2/alerts`; it groups and routes them.
    Alertmanager,
}

impl ReceiverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverKind::Webhook => "webhook",
            ReceiverKind::Slack => "slack",
            ReceiverKind::Json => "json",
            ReceiverKind::Alertmanager => "alertmanager",
        }
    }
}

fn yes() -> bool {
    true
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            every: Duration::from_secs(10),
            group_by: vec!["alertname".into(), "cluster".into()],
            group_wait: Duration::from_secs(30),
            group_interval: Duration::from_secs(300),
            repeat_interval: Duration::from_secs(4 * 3600),
            keep_resolved: Duration::from_secs(86_400),
            external_url: None,
            silence_url: None,
            default_rules: true,
            rules: Vec::new(),
            receivers: Vec::new(),
        }
    }
}

impl Settings {
    /// The rules in force: the defaults (unless turned off) with configured rules replacing
    /// those of the same name, then the other configured rules.
    pub fn effective_rules(&self) -> Vec<Rule> {
        let mut out: Vec<Rule> = if self.default_rules {
            Kind::all().into_iter().map(Rule::default_for).collect()
        } else {
            Vec::new()
        };
        for r in &self.rules {
            match out.iter_mut().find(|d| d.name == r.name) {
                Some(d) => *d = r.clone(),
                None => out.push(r.clone()),
            }
        }
        out
    }

    /// Configuration mistakes, named.
    pub fn check(&self) -> anyhow::Result<()> {
        let mut names = std::collections::BTreeSet::new();
        for r in &self.receivers {
            if !names.insert(r.name.as_str()) {
                anyhow::bail!("alerts: two receivers are named {:?}", r.name);
            }
            let url: reqwest::Url = r.url.0.parse().map_err(|e| {
                anyhow::anyhow!("alerts: receiver {:?}: url is not a URL: {e}", r.name)
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                anyhow::bail!("alerts: receiver {:?}: url must be http or https", r.name);
            }
        }
        for r in &self.rules {
            if r.name.is_empty()
                || !r
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                anyhow::bail!(
                    "alerts: rule name {:?}: use letters, digits, _ and - only",
                    r.name
                );
            }
            for k in r.labels.keys() {
                if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    anyhow::bail!(
                        "alerts: rule {:?}: label name {k:?} is not a Prometheus label name",
                        r.name
                    );
                }
            }
        }
        if let Some(u) = &self.silence_url {
            let url: reqwest::Url = u
                .parse()
                .map_err(|e| anyhow::anyhow!("alerts: silence_url is not a URL: {e}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                anyhow::bail!("alerts: silence_url must be http or https");
            }
        }
        if self.group_interval.is_zero() || self.every.is_zero() {
            anyhow::bail!("alerts: every and group_interval must be longer than zero");
        }
        Ok(())
    }
}
