//! Which team a tenant belongs to: from its namespace (pods), account (Slurm jobs) or user
//! (host processes), through the `[teams]` mapping when one is given.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Teams are derived from a tenant's namespace (pods), account (Slurm) or user (hosts).
/// Without a mapping, the namespace, account or user itself is the team.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamsConfig {
    #[serde(default)]
    pub namespaces: BTreeMap<String, String>,
    #[serde(default)]
    pub accounts: BTreeMap<String, String>,
    #[serde(default)]
    pub users: BTreeMap<String, String>,
}

impl TeamsConfig {
    /// The team of a namespace: its mapping, else the namespace itself (waiting work, which
    /// has no tenant yet, is attributed this way).
    pub fn team_of_namespace(&self, namespace: &str) -> String {
        self.namespaces
            .get(namespace)
            .cloned()
            .unwrap_or_else(|| namespace.to_owned())
    }

    /// The team of a Slurm account: its mapping, else the account itself.
    pub fn team_of_account(&self, account: &str) -> String {
        self.accounts
            .get(account)
            .cloned()
            .unwrap_or_else(|| account.to_owned())
    }

    pub fn team_of(&self, t: &model::Tenant) -> Option<String> {
        use model::TenantKind;
        let mapped = match t.kind {
            TenantKind::Pod => t.namespace.as_ref().and_then(|n| self.namespaces.get(n)),
            TenantKind::SlurmJob => t
                .account
                .as_ref()
                .and_then(|a| self.accounts.get(a))
                .or_else(|| t.user.as_ref().and_then(|u| self.users.get(u))),
            TenantKind::HostUser => t.user.as_ref().and_then(|u| self.users.get(u)),
        };
        mapped
            .cloned()
            .or_else(|| t.team_source().map(str::to_owned))
    }
}
