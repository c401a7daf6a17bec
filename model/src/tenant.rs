//! Tenants: who owns work on a GPU. A Kubernetes pod, a Slurm job, or a plain host user.

use serde::{Deserialize, Serialize};

/// The three kinds of tenant gpulens attributes work to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantKind {
    Pod,
    SlurmJob,
    HostUser,
}

impl TenantKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantKind::Pod => "pod",
            TenantKind::SlurmJob => "slurm_job",
            TenantKind::HostUser => "host_user",
        }
    }

    pub fn parse(s: &str) -> Option<TenantKind> {
        match s {
            "pod" => Some(TenantKind::Pod),
            "slurm_job" => Some(TenantKind::SlurmJob),
            "host_user" => Some(TenantKind::HostUser),
            _ => None,
        }
    }
}

/// A tenant as the agent describes it. `key` is the identity that samples refer to; it is
/// stable for the tenant's lifetime: `pod/<pod uid>/<container>`, `slurm/<job id>` or
/// `host/<uid>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub key: String,
    pub kind: TenantKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

impl Tenant {
    /// The canonical key for a pod's container.
    pub fn pod_key(pod_uid: &str, container: &str) -> String {
        format!("pod/{pod_uid}/{container}")
    }

    /// The canonical key for a Slurm job.
    pub fn slurm_key(job_id: &str) -> String {
        format!("slurm/{job_id}")
    }

    /// The canonical key for a host user.
    pub fn host_key(uid: u32) -> String {
        format!("host/{uid}")
    }

    /// A host user by uid, with the user's name when known.
    pub fn host_user(uid: u32, user: Option<String>) -> Tenant {
        Tenant {
            key: Tenant::host_key(uid),
            kind: TenantKind::HostUser,
            namespace: None,
            pod: None,
            container: None,
            pod_uid: None,
            job_id: None,
            user,
            account: None,
            uid: Some(uid),
        }
    }

    /// The grouping that a team is derived from: the namespace of a pod, the account of a
    /// Slurm job, the user of a host process.
    pub fn team_source(&self) -> Option<&str> {
        match self.kind {
            TenantKind::Pod => self.namespace.as_deref(),
            TenantKind::SlurmJob => self.account.as_deref().or(self.user.as_deref()),
            TenantKind::HostUser => self.user.as_deref(),
        }
    }

    /// A short human name: `namespace/pod/container`, `job 1234 (alice)`, `alice (uid 1000)`.
    pub fn display_name(&self) -> String {
        match self.kind {
            TenantKind::Pod => match (&self.namespace, &self.pod) {
                (Some(ns), Some(pod)) => {
                    format!("{ns}/{pod}/{}", self.container.as_deref().unwrap_or("?"))
                }
                // Names come from the kubelet; without them the pod is known by its UID.
                _ => format!(
                    "pod {} container {}",
                    self.pod_uid.as_deref().unwrap_or("?"),
                    self.container.as_deref().unwrap_or("?")
                ),
            },
            TenantKind::SlurmJob => format!(
                "job {} ({})",
                self.job_id.as_deref().unwrap_or("?"),
                self.user.as_deref().unwrap_or("?")
            ),
            TenantKind::HostUser => match (&self.user, self.uid) {
                (Some(user), Some(uid)) => format!("{user} (uid {uid})"),
                (Some(user), None) => user.clone(),
                (None, Some(uid)) => format!("uid {uid}"),
                (None, None) => self.key.clone(),
            },
        }
    }
}
