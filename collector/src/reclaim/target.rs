//! What a reclaim acts on: the pod's controller, found through its owner references — a
//! Deployment (through its ReplicaSet), a StatefulSet, a Job, or the Kueue Workload of a Job
//! Kueue manages — and the merge patch that releases its GPUs, with how to undo it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use super::settings::Action;

/// The annotation recording the replicas a scale-to-zero replaced.
pub const REPLICAS_ANNOTATION: &str = "gpulens.io/reclaimed-replicas";
/// The annotation naming the case that changed the object.
pub const CASE_ANNOTATION: &str = "gpulens.io/reclaim-case";
/// The label Kueue puts on the Jobs it manages.
const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The controllers a reclaim can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    StatefulSet,
    Job,
    Workload,
}

impl Kind {
    fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            Kind::Deployment => ("apps", "v1", "Deployment", "deployments"),
            Kind::StatefulSet => ("apps", "v1", "StatefulSet", "statefulsets"),
            Kind::Job => ("batch", "v1", "Job", "jobs"),
            Kind::Workload => ("kueue.x-k8s.io", "v1beta1", "Workload", "workloads"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::Job => "Job",
            Kind::Workload => "Workload",
        }
    }

    /// The action that releases this controller's GPUs.
    pub fn action(self) -> Action {
        match self {
            Kind::Deployment | Kind::StatefulSet => Action::ScaleToZero,
            Kind::Job | Kind::Workload => Action::Suspend,
        }
    }
}

/// A controller to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    /// Its labels and annotations (exemptions are read from them).
    pub marks: Vec<(String, String)>,
    /// Replicas now (Deployments and StatefulSets).
    pub replicas: Option<i64>,
    pub resource_version: Option<String>,
}

impl Target {
    /// `Deployment ml/trainer`.
    pub fn describe(&self) -> String {
        format!("{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }

    /// The merge patch that releases the GPUs, marked with the case; the resource version
    /// read makes a concurrent change a conflict rather than an overwrite.
    pub fn patch(&self, case: i64) -> Value {
        let mut annotations = BTreeMap::from([(CASE_ANNOTATION.to_owned(), case.to_string())]);
        let spec = match self.kind {
            Kind::Deployment | Kind::StatefulSet => {
                annotations.insert(
                    REPLICAS_ANNOTATION.into(),
                    self.replicas.unwrap_or(1).to_string(),
                );
                json!({"replicas": 0})
            }
            Kind::Job => json!({"suspend": true}),
            Kind::Workload => json!({"active": false}),
        };
        let mut metadata = json!({ "annotations": annotations });
        if let Some(rv) = &self.resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        json!({"metadata": metadata, "spec": spec})
    }

    /// How a person undoes the action.
    pub fn undo(&self) -> String {
        let (ns, name) = (&self.namespace, &self.name);
        match self.kind {
            Kind::Deployment | Kind::StatefulSet => format!(
                "kubectl -n {ns} scale {}/{name} --replicas={}",
                self.kind.as_str().to_lowercase(),
                self.replicas.unwrap_or(1)
            ),
            Kind::Job => format!(
                "kubectl -n {ns} patch job/{name} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}'"
            ),
            Kind::Workload => format!(
                "kubectl -n {ns} patch workloads.kueue.x-k8s.io/{name} --type=merge -p '{{\"spec\":{{\"active\":true}}}}'"
            ),
        }
    }
}

/// What the cluster says of a case's pod now.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// The pod is gone, or another pod took its name.
    Gone,
    /// The pod, its labels and annotations, and its controller (or why there is none to act
    /// on).
    Pod {
        marks: Vec<(String, String)>,
        target: Result<Target, String>,
    },
}

/// Labels and annotations of an object, as (key, value) pairs.
fn marks_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<(String, String)> {
    meta.labels
        .iter()
        .chain(meta.annotations.iter())
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The controller owner reference of an object: (kind, name, uid). A name that is not a
/// Kubernetes object name (it goes into a request path) reads as no controller.
fn controller_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<(String, String, String)> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .filter(|o| model::names::check_subdomain(&o.name).is_ok())
        .map(|o| (o.kind.clone(), o.name.clone(), o.uid.clone()))
}

/// The cluster, as a reclaim reads and changes it.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
}

impl Cluster {
    fn api(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &kind.resource())
    }

    async fn object(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Target>, kube::Error> {
        let Some(o) = self.api(kind, namespace).get_opt(name).await? else {
            return Ok(None);
        };
        Ok(Some(Target {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            marks: marks_of(&o.metadata),
            replicas: o.data["spec"]["replicas"].as_i64(),
            resource_version: o.metadata.resource_version.clone(),
        }))
    }

    /// The pod `namespace/name` if it is still the one with `uid`, and what controls it.
    pub async fn find(&self, namespace: &str, name: &str, uid: &str) -> Result<Found, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let Some(pod) = pods.get_opt(name).await? else {
            return Ok(Found::Gone);
        };
        if pod.metadata.uid.as_deref() != Some(uid) {
            return Ok(Found::Gone);
        }
        let target = self.controller(namespace, &pod.metadata).await?;
        Ok(Found::Pod {
            marks: marks_of(&pod.metadata),
            target,
        })
    }

    /// The controller a reclaim acts on for a pod with this metadata, or why there is none.
    async fn controller(
        &self,
        namespace: &str,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Result<Result<Target, String>, kube::Error> {
        let Some((kind, name, _)) = controller_of(meta) else {
            return Ok(Err(
                "a bare pod: no controller to scale or suspend (delete it by hand if it must go)"
                    .into(),
            ));
        };
        let missing = |k: &str, n: &str| Err(format!("its {k} {namespace}/{n} was not found"));
        match kind.as_str() {
            "ReplicaSet" => {
                let rs: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
                    Api::namespaced(self.client.clone(), namespace);
                let Some(rs) = rs.get_opt(&name).await? else {
                    return Ok(missing("ReplicaSet", &name));
                };
                match controller_of(&rs.metadata) {
                    Some((k, d, _)) if k == "Deployment" => Ok(self
                        .object(Kind::Deployment, namespace, &d)
                        .await?
                        .ok_or_else(|| format!("its Deployment {namespace}/{d} was not found"))),
                    _ => Ok(Err(format!(
                        "controlled by ReplicaSet {namespace}/{name}, which no Deployment owns: scale it by hand"
                    ))),
                }
            }
            "StatefulSet" => Ok(self
                .object(Kind::StatefulSet, namespace, &name)
                .await?
                .ok_or_else(|| format!("its StatefulSet {namespace}/{name} was not found"))),
            "Job" => {
                let Some(job) = self.object(Kind::Job, namespace, &name).await? else {
                    return Ok(missing("Job", &name));
                };
                if !job.marks.iter().any(|(k, _)| k == KUEUE_QUEUE_LABEL) {
                    return Ok(Ok(job));
                }
                self.workload_of(namespace, &name).await
            }
            other => Ok(Err(format!(
                "controlled by a {other} ({namespace}/{name}), which gpulens does not act on"
            ))),
        }
    }

    /// The Kueue Workload that owns Job `name` (Kueue suspends and resumes the Job itself, so
    /// the Workload is what is deactivated).
    async fn workload_of(
        &self,
        namespace: &str,
        job: &str,
    ) -> Result<Result<Target, String>, kube::Error> {
        let list = match self
            .api(Kind::Workload, namespace)
            .list(&Default::default())
            .await
        {
            Ok(l) => l,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Ok(Err(format!(
                    "Job {namespace}/{job} carries Kueue's queue label but Kueue is not installed"
                )));
            }
            Err(e) => return Err(e),
        };
        let owned = list.items.into_iter().find(|w| {
            let named = w
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| model::names::check_subdomain(n).is_ok());
            named
                && w.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "Job" && o.name == job)
        });
        Ok(match owned {
            Some(w) => Ok(Target {
                kind: Kind::Workload,
                namespace: namespace.to_owned(),
                name: w.metadata.name.clone().unwrap_or_default(),
                marks: marks_of(&w.metadata),
                replicas: None,
                resource_version: w.metadata.resource_version.clone(),
            }),
            None => Err(format!(
                "Kueue manages Job {namespace}/{job} but no Workload owns it"
            )),
        })
    }

    /// Releases the target's GPUs; returns how to undo it.
    pub async fn act(&self, target: &Target, case: i64) -> Result<String, kube::Error> {
        self.api(target.kind, &target.namespace)
            .patch(
                &target.name,
                &PatchParams::default(),
                &Patch::Merge(target.patch(case)),
            )
            .await?;
        Ok(target.undo())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: Kind, replicas: Option<i64>) -> Target {
        Target {
            kind,
            namespace: "ml".into(),
            name: "nb".into(),
            marks: Vec::new(),
            replicas,
            resource_version: Some("41".into()),
        }
    }

    #[test]
    fn each_controller_gets_its_patch_and_its_undo() {
        let d = target(Kind::Deployment, Some(3));
        assert_eq!(
            d.patch(7),
            json!({"metadata": {"resourceVersion": "41", "annotations": {
                "gpulens.io/reclaim-case": "7", "gpulens.io/reclaimed-replicas": "3"}},
                "spec": {"replicas": 0}})
        );
        assert_eq!(d.undo(), "kubectl -n ml scale deployment/nb --replicas=3");
        assert_eq!(d.describe(), "Deployment ml/nb");
        let j = target(Kind::Job, None);
        assert_eq!(j.patch(7)["spec"], json!({"suspend": true}));
        assert!(j.undo().contains("\"suspend\":false"), "{}", j.undo());
        let w = target(Kind::Workload, None);
        assert_eq!(w.patch(7)["spec"], json!({"active": false}));
        assert_eq!(
            target(Kind::StatefulSet, Some(1)).kind.action(),
            Action::ScaleToZero
        );
        assert_eq!(Kind::Workload.action(), Action::Suspend);
    }
}
