//! `[reclaim]` in the collector's configuration: the policies under which idle holdings are
//! reclaimed, and how far the loop may go. No policy, no case: nothing is ever touched.

use std::time::Duration;

use serde::Deserialize;

/// Longest grace period and shortest `every` accepted.
const MAX_GRACE: Duration = Duration::from_secs(30 * 86_400);
const MIN_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Record and notify, never change anything in the cluster (the default). `false` lets
    /// policies whose action is not `report` act.
    pub dry_run: bool,
    /// Time between passes.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub every: Duration,
    /// The API server; unset: the in-cluster service account, else the local kubeconfig.
    pub kube_url: Option<String>,
    /// The gpulens cluster name (the agents' `--cluster`) of that Kubernetes cluster: only its
    /// holdings are taken up. Unset: the one cluster the data holds; with several, nothing is
    /// taken up until this is set.
    pub cluster: Option<String>,
    /// Most actions carried out in any hour, over every policy; more wait for the next pass.
    pub max_actions_per_hour: u32,
    /// The policies, first match wins.
    #[serde(rename = "policy")]
    pub policies: Vec<Policy>,
}

/// Which holdings a policy takes up, and what it does to them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Recorded on each case; letters, digits and `-`.
    pub name: String,
    /// Pods in these namespaces…
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// …or of these teams (`[teams]`).
    #[serde(default)]
    pub teams: Vec<String>,
    /// The share of its allocated time a holding was idle over the analysed window, at least.
    #[serde(default = "default_idle_share")]
    pub idle_share: f64,
    /// How long the holding has been idle now, at least.
    #[serde(
        default = "default_min_idle",
        deserialize_with = "collector_shared::settings::duration"
    )]
    pub min_idle: Duration,
    /// Between the notice and the action: use in this time cancels the case.
    #[serde(
        default = "default_grace",
        deserialize_with = "collector_shared::settings::duration"
    )]
    pub grace: Duration,
    /// What is done once the grace is over.
    #[serde(default)]
    pub action: Action,
    /// A person approves each action (`POST /api/v1/reclaim/{id}/approve`). `false`: the
    /// policy's own approval, when the grace is over.
    #[serde(default = "yes")]
    pub approval: bool,
    /// Activity (the signal the idle finding used, a 0–1 ratio) above which the holding counts
    /// as used again.
    #[serde(default = "default_use_threshold")]
    pub use_threshold: f64,
    /// Labels or annotations (`key` or `key=value`) on the pod or its controller that exempt
    /// it. `gpulens.io/reclaim=exempt` always does.
    #[serde(default)]
    pub exempt: Vec<String>,
}

/// What a policy does with a holding once its grace is over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Only report: the case ends `reported`, nothing is changed.
    #[default]
    Report,
    /// Scale the pod's Deployment or StatefulSet to zero replicas.
    ScaleToZero,
    /// Suspend the pod's Job (`spec.suspend`), or deactivate its Kueue Workload
    /// (`spec.active`) when Kueue manages the Job.
    Suspend,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Report => "report",
            Action::ScaleToZero => "scale-to-zero",
            Action::Suspend => "suspend",
        }
    }
}

/// The annotation or label that always exempts a pod or its controller.
pub const EXEMPT_KEY: &str = "gpulens.io/reclaim";
pub const EXEMPT_VALUE: &str = "exempt";

fn yes() -> bool {
    true
}
fn default_idle_share() -> f64 {
    0.9
}
fn default_min_idle() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_grace() -> Duration {
    Duration::from_secs(4 * 3600)
}
fn default_use_threshold() -> f64 {
    0.05
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            dry_run: true,
            every: Duration::from_secs(300),
            kube_url: None,
            cluster: None,
            max_actions_per_hour: 3,
            policies: Vec::new(),
        }
    }
}

impl Policy {
    /// Whether the policy governs a pod of `namespace` whose team is `team`.
    pub fn covers(&self, namespace: &str, team: &str) -> bool {
        self.namespaces.iter().any(|n| n == namespace) || self.teams.iter().any(|t| t == team)
    }

    /// The exemption among `marks` (a pod's or controller's labels and annotations), if any.
    pub fn exemption<'a>(
        &self,
        marks: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Option<String> {
        let always = format!("{EXEMPT_KEY}={EXEMPT_VALUE}");
        std::iter::once(always.as_str())
            .chain(self.exempt.iter().map(String::as_str))
            .find_map(|rule| {
                let (key, value) = match rule.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (rule, None),
                };
                marks
                    .clone()
                    .into_iter()
                    .find(|(k, v)| *k == key && value.is_none_or(|want| want == *v))
                    .map(|(k, v)| format!("{k}={v}"))
            })
    }
}

impl Settings {
    /// The policy that governs a pod (the first that covers it).
    pub fn policy_for(&self, namespace: &str, team: &str) -> Option<&Policy> {
        self.policies.iter().find(|p| p.covers(namespace, team))
    }

    /// Configuration mistakes, named.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.every < MIN_EVERY {
            anyhow::bail!("reclaim: every must be at least 10s");
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let at = format!("reclaim.policy[{i}] ({:?})", p.name);
            if p.name.is_empty()
                || p.name.len() > 63
                || !p
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                anyhow::bail!("{at}: name: use 1–63 letters, digits and - only");
            }
            if !names.insert(p.name.as_str()) {
                anyhow::bail!("{at}: two policies have this name");
            }
            if p.namespaces.is_empty() && p.teams.is_empty() {
                anyhow::bail!(
                    "{at}: name the namespaces or teams it governs (a policy never covers every pod)"
                );
            }
            for n in &p.namespaces {
                crate::demand::check_namespace(n).map_err(|why| {
                    anyhow::anyhow!("{at}: {why}: not a Kubernetes namespace name")
                })?;
            }
            if !(p.idle_share > 0.0 && p.idle_share <= 1.0) {
                anyhow::bail!(
                    "{at}: idle_share must be above 0 and at most 1, got {}",
                    p.idle_share
                );
            }
            if !(0.0..1.0).contains(&p.use_threshold) {
                anyhow::bail!(
                    "{at}: use_threshold must be from 0 up to (not including) 1, got {}",
                    p.use_threshold
                );
            }
            if p.min_idle < Duration::from_secs(3600) {
                anyhow::bail!(
                    "{at}: min_idle must be at least 1h (the analysis measures idleness by the hour)"
                );
            }
            if p.grace > MAX_GRACE {
                anyhow::bail!("{at}: grace must be at most 30d");
            }
            for e in &p.exempt {
                let key = e.split_once('=').map_or(e.as_str(), |(k, _)| k);
                model::labels::check_syntax(key)
                    .map_err(|err| anyhow::anyhow!("{at}: exempt {e:?}: {err}"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> anyhow::Result<Settings> {
        let s: Settings = toml::from_str(toml)?;
        s.check()?;
        Ok(s)
    }

    #[test]
    fn no_policy_is_the_default_and_dry_run_is_on() {
        let s = parse("").unwrap();
        assert!(s.dry_run && s.policies.is_empty());
        let s = parse("[[policy]]\nname = \"nb\"\nnamespaces = [\"notebooks\"]").unwrap();
        let p = &s.policies[0];
        assert_eq!(p.action, Action::Report);
        assert!(p.approval);
        assert_eq!(p.min_idle, Duration::from_secs(86_400));
    }

    #[test]
    fn mistakes_are_named() {
        for (toml, says) in [
            ("[[policy]]\nname = \"nb\"", "name the namespaces or teams"),
            (
                "[[policy]]\nname = \"a b\"\nnamespaces = [\"x\"]",
                "letters, digits",
            ),
            (
                "[[policy]]\nname = \"a\"\nnamespaces = [\"Bad_NS\"]",
                "not a Kubernetes namespace",
            ),
            (
                "[[policy]]\nname = \"a\"\nteams = [\"t\"]\nidle_share = 1.5",
                "idle_share",
            ),
            (
                "[[policy]]\nname = \"a\"\nteams = [\"t\"]\nmin_idle = \"10m\"",
                "at least 1h",
            ),
            (
                "[[policy]]\nname = \"a\"\nteams = [\"t\"]\nexempt = [\"bad key!\"]",
                "exempt",
            ),
            (
                "[[policy]]\nname = \"a\"\nteams = [\"t\"]\naction = \"delete\"",
                "unknown variant",
            ),
            (
                "[[policy]]\nname = \"a\"\nteams = [\"t\"]\n[[policy]]\nname = \"a\"\nteams = [\"u\"]",
                "two policies",
            ),
        ] {
            let e = format!("{:#}", parse(toml).unwrap_err());
            assert!(e.contains(says), "{toml}: {e}");
        }
    }

    #[test]
    fn the_first_covering_policy_governs_and_exemptions_match_key_and_value() {
        let s = parse(
            "[[policy]]\nname = \"nb\"\nnamespaces = [\"notebooks\"]\nexempt = [\"owner=oncall\", \"keep\"]\n\
             [[policy]]\nname = \"vision\"\nteams = [\"vision\"]",
        )
        .unwrap();
        assert_eq!(s.policy_for("notebooks", "vision").unwrap().name, "nb");
        assert_eq!(s.policy_for("train", "vision").unwrap().name, "vision");
        assert!(s.policy_for("train", "nlp").is_none());
        let p = &s.policies[0];
        assert_eq!(p.exemption([("owner", "alice")]), None);
        assert_eq!(
            p.exemption([("owner", "oncall")]).as_deref(),
            Some("owner=oncall")
        );
        assert_eq!(p.exemption([("keep", "")]).as_deref(), Some("keep="));
        assert_eq!(
            s.policies[1]
                .exemption([("gpulens.io/reclaim", "exempt")])
                .as_deref(),
            Some("gpulens.io/reclaim=exempt"),
            "the built-in exemption holds under every policy"
        );
        assert_eq!(
            s.policies[1].exemption([("gpulens.io/reclaim", "later")]),
            None
        );
    }
}
