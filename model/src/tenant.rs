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

/// The longest tenant key a batch may hold (the ingest's limit on every name).
pub const MAX_KEY_LEN: usize = 256;

/// `key` as it is when it fits [`MAX_KEY_LEN`]; otherwise its first 239 bytes, `~` and 16 hex
/// digits of its SHA-256: still one key per tenant, however long the names it is made of
/// (a pod's name may be 253 characters long, and so may its namespace's and container's as
/// a remote-written series labels them).
fn bounded(key: String) -> String {
    if key.len() <= MAX_KEY_LEN {
        return key;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(MAX_KEY_LEN);
    out.push_str(crate::names::head(&key, MAX_KEY_LEN - 17));
    out.push('~');
    for b in &digest[..8] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

impl Tenant {
    /// The canonical key for a pod's container.
    pub fn pod_key(pod_uid: &str, container: &str) -> String {
        bounded(format!("pod/{pod_uid}/{container}"))
    }

    /// The key for a pod's container known by name only (its UID unknown):
    /// `pod/<namespace>/<pod>/<container>`.
    pub fn pod_name_key(namespace: &str, pod: &str, container: &str) -> String {
        bounded(format!("pod/{namespace}/{pod}/{container}"))
    }

    /// The canonical key for a Slurm job.
    pub fn slurm_key(job_id: &str) -> String {
        bounded(format!("slurm/{job_id}"))
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

/// One of a tenant's free-text fields: its name on the wire, how to read it and to clear it.
pub(crate) struct TextField {
    pub name: &'static str,
    pub read: fn(&Tenant) -> Option<&str>,
    pub clear: fn(&mut Tenant),
}

/// A tenant's free-text fields: what a batch's validation checks as text, and what a producer
/// clears when one is not (`wire::v1::drop_impossible_tenants`).
pub(crate) const TEXT_FIELDS: [TextField; 7] = [
    TextField {
        name: "namespace",
        read: |t| t.namespace.as_deref(),
        clear: |t| t.namespace = None,
    },
    TextField {
        name: "pod",
        read: |t| t.pod.as_deref(),
        clear: |t| t.pod = None,
    },
    TextField {
        name: "container",
        read: |t| t.container.as_deref(),
        clear: |t| t.container = None,
    },
    TextField {
        name: "pod_uid",
        read: |t| t.pod_uid.as_deref(),
        clear: |t| t.pod_uid = None,
    },
    TextField {
        name: "job_id",
        read: |t| t.job_id.as_deref(),
        clear: |t| t.job_id = None,
    },
    TextField {
        name: "user",
        read: |t| t.user.as_deref(),
        clear: |t| t.user = None,
    },
    TextField {
        name: "account",
        read: |t| t.account.as_deref(),
        clear: |t| t.account = None,
    },
];
