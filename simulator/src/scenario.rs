//! The scenario file format (TOML): a cluster's nodes, their GPUs and sharing layout, and the
//! tenants running on them with workload patterns and optional ground truth. Documented with
//! examples in docs/scenarios.md; every example there is parsed by a test.

use std::collections::HashSet;

use serde::Deserialize;

use model::inventory::Sharing;

use crate::catalogue::{self, GpuModel};
use crate::workload::Pattern;

/// A parsed and validated scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_cluster")]
    pub cluster: String,
    #[serde(default)]
    pub seed: u64,
    /// Live sampling interval, e.g. "1s" or "500ms".
    #[serde(default = "default_interval")]
    pub interval: String,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
    /// Pods waiting for GPUs (Pending, unscheduled), for the waiting-demand analysis.
    #[serde(default)]
    pub waiting: Vec<WaitingSpec>,
}

/// A pod that waits for GPUs: asked for `count` units of `resource` (of `model`'s product when
/// given) since `since_hours` before now, for `for_hours` (absent: still waiting).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitingSpec {
    pub name: String,
    pub namespace: String,
    #[serde(default = "default_gpu_resource")]
    pub resource: String,
    pub count: u32,
    /// A model key from the catalogue; the pod selects that product.
    #[serde(default)]
    pub model: Option<String>,
    pub since_hours: f64,
    #[serde(default)]
    pub for_hours: Option<f64>,
}

fn default_gpu_resource() -> String {
    "nvidia.com/gpu".into()
}

impl WaitingSpec {
    /// The `nvidia.com/gpu.product` value GPU Feature Discovery gives the model's nodes.
    pub fn product(&self) -> Option<String> {
        let m = catalogue::model(self.model.as_deref()?)?;
        Some(m.product.replace(' ', "-"))
    }

    /// When it began to wait and when it was last seen waiting, for a scenario ending at `now`.
    pub fn span_ms(&self, now_ms: i64) -> (i64, i64) {
        let from = now_ms - (self.since_hours * 3_600_000.0) as i64;
        let to = self
            .for_hours
            .map_or(now_ms, |h| (from + (h * 3_600_000.0) as i64).min(now_ms));
        (from, to)
    }
}
/// One node and its GPUs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    /// A model key from the catalogue: H100-80GB, H200, A100-80GB, A100-40GB, L40S, A10G.
    pub model: String,
    pub gpus: u32,
    /// exclusive | time_slicing | mps | mig
    #[serde(default)]
    pub sharing: Sharing,
    /// Replicas per GPU under time_slicing or mps.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Under mig: the profiles every GPU of the node is split into, in placement order.
    #[serde(default)]
    pub mig_layout: Vec<String>,
    /// Whether a dcgm-exporter provides profiling fields (sm_active, …) on this node.
    #[serde(default)]
    pub dcgm: bool,
    /// kubernetes | slurm | host
    #[serde(default = "default_orchestrator")]
    pub orchestrator: String,
    /// Expected XID errors per GPU per day (0 for none).
    #[serde(default)]
    pub xid_per_day: f64,
    /// Per-GPU sharing mechanisms the node has, as the demand poll would see them in its
    /// ResourceSlices (`dra_shared_claim`, `dra_consumable_capacity`, …; names as
    /// `analytics::mechanism` spells them, checked where they are recorded).
    #[serde(default)]
    pub mechanisms: Vec<String>,
}

/// One tenant and what it does.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Pod name, Slurm user or host user name, unique within the scenario.
    pub name: String,
    /// pod | slurm_job | host_user
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub container: Option<String>,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub uid: Option<u32>,
    pub node: String,
    /// "0" a whole GPU, "0/mig/2" the third MIG instance of GPU 0, "0::1" replica 1 of GPU 0.
    pub devices: Vec<String>,
    pub pattern: Pattern,
    /// Memory the tenant typically holds on each device, in GiB.
    #[serde(default = "default_mem")]
    pub mem_gib: f64,
    /// Scales the compute the pattern asks for (1.0 = as the pattern describes).
    #[serde(default = "one_f")]
    pub intensity: f64,
    /// Moves the pattern's clock by this many hours (-24 to 24): `shift_hours = 12` runs a
    /// diurnal tenant's day at night, so two of them are busy at complementary hours.
    #[serde(default)]
    pub shift_hours: f64,
    /// Slurm tenants: a new job id every this many hours.
    #[serde(default = "default_job_hours")]
    pub job_hours: f64,
    /// Pods: replaced by a new pod (a new uid, as a CronJob or a rollout does) every this many
    /// hours; by default a pod lives as long as the scenario.
    #[serde(default)]
    pub replaced_hours: Option<f64>,
    /// Pods on a whole GPU of an exclusive node: what a per-GPU mechanism granted them there
    /// (`{ mechanism = "dra_consumable_capacity", memory_gib = 20 }`, HAMi with `cores`, KAI
    /// with `fraction`); several granted pods may hold one GPU, each allocated its share.
    #[serde(default)]
    pub grant: Option<crate::grant::Grant>,
    /// What the analytics should find about this tenant (for tests).
    #[serde(default)]
    pub truth: Truth,
}

/// Ground truth for the analytics tests.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Truth {
    /// Finding kinds expected for this tenant, e.g. ["idle_allocation"].
    #[serde(default)]
    pub findings: Vec<String>,
    /// The tenant this one suffers interference from, if any.
    #[serde(default)]
    pub victim_of: Option<String>,
}

/// A device reference inside a node, parsed from a tenant's `devices` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRef {
    Gpu(u32),
    Mig { gpu: u32, instance: u32 },
    Replica { gpu: u32, replica: u32 },
}

/// What is wrong with a scenario file.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario is not valid TOML or has unknown fields: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("scenario {0}")]
    Invalid(String),
}

fn bad(msg: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid(msg.into())
}

fn default_cluster() -> String {
    "default".into()
}
fn default_interval() -> String {
    "1s".into()
}
fn default_orchestrator() -> String {
    "kubernetes".into()
}
fn default_mem() -> f64 {
    8.0
}
fn default_job_hours() -> f64 {
    12.0
}
fn one() -> u32 {
    1
}
fn one_f() -> f64 {
    1.0
}

impl Scenario {
    /// Parses and validates a scenario file's text.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// The live sampling interval in milliseconds.
    pub fn interval_ms(&self) -> u32 {
        parse_duration_ms(&self.interval).unwrap_or(1000)
    }

    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The scenario `copies` times over, for benchmarks at fleet scale: copy `c` renames every
    /// node and tenant with the suffix `-cNNN` (so GPU UUIDs, tenant keys and workload noise
    /// differ between copies) and points victims at their own copy's aggressors.
    pub fn replicated(&self, copies: usize) -> Scenario {
        let suffix = |name: &str, c: usize| format!("{name}-c{c:03}");
        let mut out = self.clone();
        out.nodes = (0..copies)
            .flat_map(|c| {
                self.nodes.iter().map(move |n| NodeSpec {
                    name: suffix(&n.name, c),
                    ..n.clone()
                })
            })
            .collect();
        out.tenants = (0..copies)
            .flat_map(|c| {
                self.tenants.iter().map(move |t| {
                    let mut t = t.clone();
                    t.name = suffix(&t.name, c);
                    t.node = suffix(&t.node, c);
                    t.truth.victim_of = t.truth.victim_of.as_deref().map(|v| suffix(v, c));
                    t
                })
            })
            .collect();
        out
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        if self.nodes.is_empty() {
            return Err(bad("has no nodes"));
        }
        for w in &self.waiting {
            if w.model
                .as_deref()
                .is_some_and(|m| catalogue::model(m).is_none())
            {
                return Err(bad(format!(
                    "waiting pod {:?}: unknown GPU model {:?}",
                    w.name, w.model
                )));
            }
            if !(w.since_hours > 0.0 && w.since_hours <= 24.0 * 90.0)
                || w.for_hours.is_some_and(|h| h.is_nan() || h <= 0.0)
                || w.count == 0
            {
                return Err(bad(format!(
                    "waiting pod {:?}: since_hours must be in (0, 2160], for_hours positive, count at least 1",
                    w.name
                )));
            }
        }
        match parse_duration_ms(&self.interval) {
            Some(ms) if (100..=3_600_000).contains(&ms) => {}
            _ => {
                return Err(bad(format!(
                    "interval {:?} is not a duration between 100ms and 1h (write \"1s\", \"500ms\", \"1m\")",
                    self.interval
                )));
            }
        }
        let mut names = HashSet::new();
        for node in &self.nodes {
            if !names.insert(node.name.as_str()) {
                return Err(bad(format!("node {:?} is defined twice", node.name)));
            }
            node.validate()?;
        }
        let mut tenant_names = HashSet::new();
        for t in &self.tenants {
            if !tenant_names.insert(t.name.as_str()) {
                return Err(bad(format!("tenant {:?} is defined twice", t.name)));
            }
            let node = self.node(&t.node).ok_or_else(|| {
                bad(format!(
                    "tenant {:?} runs on unknown node {:?}",
                    t.name, t.node
                ))
            })?;
            t.validate(node)?;
        }
        for t in &self.tenants {
            if let Some(other) = &t.truth.victim_of
                && !tenant_names.contains(other.as_str())
            {
                return Err(bad(format!(
                    "tenant {:?}: truth.victim_of names unknown tenant {other:?}",
                    t.name
                )));
            }
        }
        Ok(())
    }
}

impl NodeSpec {
    pub fn gpu_model(&self) -> &'static GpuModel {
        catalogue::model(&self.model).expect("validated")
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        let n = &self.name;
        let model = catalogue::model(&self.model).ok_or_else(|| {
            let known: Vec<_> = catalogue::MODELS.iter().map(|m| m.key).collect();
            bad(format!(
                "node {n:?}: unknown GPU model {:?}; known: {known:?}",
                self.model
            ))
        })?;
        if self.gpus == 0 || self.gpus > 16 {
            return Err(bad(format!(
                "node {n:?}: gpus must be 1 to 16, got {}",
                self.gpus
            )));
        }
        if !["kubernetes", "slurm", "host"].contains(&self.orchestrator.as_str()) {
            return Err(bad(format!(
                "node {n:?}: orchestrator must be kubernetes, slurm or host, got {:?}",
                self.orchestrator
            )));
        }
        match self.sharing {
            Sharing::Exclusive => {}
            Sharing::TimeSlicing | Sharing::Mps => {
                if !(2..=48).contains(&self.replicas) {
                    return Err(bad(format!(
                        "node {n:?}: {} needs replicas between 2 and 48, got {}",
                        self.sharing, self.replicas
                    )));
                }
            }
            Sharing::Mig => {
                if model.mig_profiles.is_empty() {
                    return Err(bad(format!(
                        "node {n:?}: {} does not support MIG",
                        model.key
                    )));
                }
                if self.mig_layout.is_empty() {
                    return Err(bad(format!(
                        "node {n:?}: sharing = \"mig\" needs a mig_layout"
                    )));
                }
                let (mut compute, mut memory) = (0, 0);
                for name in &self.mig_layout {
                    let p = model.profile(name).ok_or_else(|| {
                        let known: Vec<_> = model.mig_profiles.iter().map(|p| p.name).collect();
                        bad(format!(
                            "node {n:?}: {name:?} is not a MIG profile of {}; known: {known:?}",
                            model.key
                        ))
                    })?;
                    compute += p.compute_slices;
                    memory += p.memory_slices;
                }
                if compute > 7 || memory > 8 {
                    return Err(bad(format!(
                        "node {n:?}: mig_layout {:?} needs {compute} compute and {memory} memory slices; a {} has 7 and 8",
                        self.mig_layout, model.key
                    )));
                }
            }
        }
        if !(0.0..=100.0).contains(&self.xid_per_day) {
            return Err(bad(format!("node {n:?}: xid_per_day must be 0 to 100")));
        }
        Ok(())
    }
}

impl TenantSpec {
    /// The parsed device references (validated at load).
    pub fn device_refs(&self) -> Vec<DeviceRef> {
        self.devices
            .iter()
            .filter_map(|d| parse_device(d))
            .collect()
    }

    fn validate(&self, node: &NodeSpec) -> Result<(), ScenarioError> {
        let n = &self.name;
        if self.name.is_empty() || self.name.chars().any(char::is_whitespace) {
            return Err(bad(format!(
                "tenant {n:?}: name must be non-empty without whitespace"
            )));
        }
        match self.kind.as_str() {
            "pod" => {
                if self.namespace.is_none() {
                    return Err(bad(format!("tenant {n:?}: a pod needs a namespace")));
                }
                if self
                    .replaced_hours
                    .is_some_and(|h| !h.is_finite() || h <= 0.0)
                {
                    return Err(bad(format!(
                        "tenant {n:?}: replaced_hours must be positive"
                    )));
                }
            }
            "slurm_job" => {
                if !self.job_hours.is_finite() || self.job_hours <= 0.0 {
                    return Err(bad(format!("tenant {n:?}: job_hours must be positive")));
                }
            }
            "host_user" => {}
            other => {
                return Err(bad(format!(
                    "tenant {n:?}: kind must be pod, slurm_job or host_user, got {other:?}"
                )));
            }
        }
        if self.devices.is_empty() {
            return Err(bad(format!("tenant {n:?}: devices is empty")));
        }
        // `contains` is false for NaN, so NaN is refused too.
        if !(-24.0..=24.0).contains(&self.shift_hours) {
            return Err(bad(format!(
                "tenant {n:?}: shift_hours must be between -24 and 24"
            )));
        }
        if !self.mem_gib.is_finite() || self.mem_gib < 0.0 || !(0.0..=4.0).contains(&self.intensity)
        {
            return Err(bad(format!(
                "tenant {n:?}: mem_gib must be >= 0 and intensity between 0 and 4"
            )));
        }
        if let Some(g) = &self.grant {
            let whole = self
                .device_refs()
                .iter()
                .all(|d| matches!(d, DeviceRef::Gpu(_)));
            if self.kind != "pod" || node.sharing != Sharing::Exclusive || !whole {
                return Err(bad(format!(
                    "tenant {n:?}: a grant is a pod's, on whole GPUs of an exclusive node"
                )));
            }
            g.check(node.gpu_model().memory_gib)
                .map_err(|e| bad(format!("tenant {n:?}: {e}")))?;
        }
        for d in &self.devices {
            let r = parse_device(d).ok_or_else(|| {
                bad(format!(
                    "tenant {n:?}: device {d:?} is not \"GPU\", \"GPU/mig/INSTANCE\" or \"GPU::REPLICA\""
                ))
            })?;
            let gpu = match r {
                DeviceRef::Gpu(g)
                | DeviceRef::Mig { gpu: g, .. }
                | DeviceRef::Replica { gpu: g, .. } => g,
            };
            if gpu >= node.gpus {
                return Err(bad(format!(
                    "tenant {n:?}: device {d:?} names GPU {gpu} but node {:?} has {}",
                    node.name, node.gpus
                )));
            }
            let fits = match (r, node.sharing) {
                (DeviceRef::Gpu(_), Sharing::Exclusive) => true,
                (DeviceRef::Mig { instance, .. }, Sharing::Mig) => {
                    (instance as usize) < node.mig_layout.len()
                }
                (DeviceRef::Replica { replica, .. }, Sharing::TimeSlicing | Sharing::Mps) => {
                    replica < node.replicas
                }
                _ => false,
            };
            if !fits {
                return Err(bad(format!(
                    "tenant {n:?}: device {d:?} does not exist on node {:?} (sharing {}, {} replicas, {} MIG instances)",
                    node.name,
                    node.sharing,
                    node.replicas,
                    node.mig_layout.len()
                )));
            }
        }
        Ok(())
    }
}

fn parse_device(d: &str) -> Option<DeviceRef> {
    if let Some((gpu, replica)) = d.split_once("::") {
        return Some(DeviceRef::Replica {
            gpu: gpu.parse().ok()?,
            replica: replica.parse().ok()?,
        });
    }
    if let Some((gpu, instance)) = d.split_once("/mig/") {
        return Some(DeviceRef::Mig {
            gpu: gpu.parse().ok()?,
            instance: instance.parse().ok()?,
        });
    }
    d.parse().ok().map(DeviceRef::Gpu)
}

/// "250ms", "1s", "2m", "1h" (any duration [`model::time::parse_duration`] reads) in whole
/// milliseconds; `None` for no duration or one past `u32` milliseconds (49 days).
pub fn parse_duration_ms(s: &str) -> Option<u32> {
    let d = model::time::parse_duration(s).ok()?;
    u32::try_from(d.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "t"
[[nodes]]
name = "n1"
model = "H100-80GB"
gpus = 2
sharing = "mig"
mig_layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
"#;

    #[test]
    fn replicated_copies_are_distinct_and_valid() {
        let text = format!(
            "{BASE}\n[[tenants]]\nname = \"a\"\nkind = \"pod\"\nnamespace = \"x\"\nnode = \"n1\"\ndevices = [\"0/mig/0\"]\npattern = \"steady_training\"\n[[tenants]]\nname = \"b\"\nkind = \"pod\"\nnamespace = \"x\"\nnode = \"n1\"\ndevices = [\"0/mig/1\"]\npattern = \"steady_training\"\ntruth = {{ victim_of = \"a\" }}\n"
        );
        let s = Scenario::from_toml(&text).unwrap().replicated(3);
        s.validate().unwrap();
        assert_eq!(s.nodes.len(), 3);
        assert_eq!(s.tenants.len(), 6);
        assert_eq!(s.nodes[2].name, "n1-c002");
        let b2 = s.tenants.iter().find(|t| t.name == "b-c002").unwrap();
        assert_eq!(b2.node, "n1-c002");
        assert_eq!(b2.truth.victim_of.as_deref(), Some("a-c002"));
        let fleet = crate::Fleet::new(s);
        let uuids: HashSet<_> = fleet
            .nodes
            .iter()
            .flat_map(|n| n.gpus.iter().map(|g| g.uuid.clone()))
            .collect();
        assert_eq!(uuids.len(), 6, "every copy has its own GPU UUIDs");
    }

    #[test]
    fn parses_devices() {
        assert_eq!(parse_device("3"), Some(DeviceRef::Gpu(3)));
        assert_eq!(
            parse_device("1/mig/2"),
            Some(DeviceRef::Mig {
                gpu: 1,
                instance: 2
            })
        );
        assert_eq!(
            parse_device("0::3"),
            Some(DeviceRef::Replica { gpu: 0, replica: 3 })
        );
        assert_eq!(parse_device("x"), None);
    }

    #[test]
    fn rejects_impossible_layouts_and_devices() {
        let text = BASE.replace("\"1g.10gb\", \"1g.10gb\"", "\"3g.40gb\"");
        let err = Scenario::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("needs 8 compute"), "{err}");

        let text = format!(
            "{BASE}\n[[tenants]]\nname=\"a\"\nkind=\"pod\"\nnamespace=\"ns\"\nnode=\"n1\"\ndevices=[\"0/mig/9\"]\npattern=\"steady_training\"\n"
        );
        let err = Scenario::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("does not exist on node"), "{err}");

        let text = BASE.replace("H100-80GB", "L40S");
        let err = Scenario::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("does not support MIG"), "{err}");

        let err = Scenario::from_toml("name = 1").unwrap_err().to_string();
        assert!(err.contains("not valid TOML"), "{err}");

        let tenant = |shift: &str| {
            format!(
                "{BASE}\n[[tenants]]\nname=\"a\"\nkind=\"pod\"\nnamespace=\"ns\"\nnode=\"n1\"\ndevices=[\"0/mig/0\"]\npattern=\"daily_peak\"\nshift_hours={shift}\n"
            )
        };
        for shift in ["24.5", "-25", "nan", "inf"] {
            let err = Scenario::from_toml(&tenant(shift)).unwrap_err().to_string();
            assert!(
                err.contains("shift_hours must be between"),
                "{shift}: {err}"
            );
        }
        for shift in ["-24", "0.5", "24"] {
            Scenario::from_toml(&tenant(shift)).unwrap();
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("1s"), Some(1000));
        assert_eq!(parse_duration_ms("250ms"), Some(250));
        assert_eq!(parse_duration_ms("2m"), Some(120_000));
        assert_eq!(parse_duration_ms("1 s"), Some(1000));
        assert_eq!(parse_duration_ms("50d"), None);
        assert_eq!(parse_duration_ms("1 s later"), None);
    }
}
