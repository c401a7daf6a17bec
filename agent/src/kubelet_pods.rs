//! The kubelet's pod directories (`--kubelet-pods-dir`, usually `/var/lib/kubelet/pods/<uid>/`):
//! each UID's `etc-hosts` names its pod and its projected service-account volume holds the
//! namespace. Those directories also hold every pod's secrets, so the Helm chart does not mount
//! them. A container may rewrite its `/etc/hosts`, which is its directory's `etc-hosts`: what it
//! says is read bounded, and a name two UIDs claim is given to neither.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The (uid, (namespace, pod name)) the pod directories under `dir` name, none of them
/// contested. A directory without the namespace file takes `namespace_of` its pod's name (the
/// kubelet's namespace for a name unique on the node).
pub fn named_pods(
    dir: &Path,
    namespace_of: impl Fn(&str) -> Option<String>,
) -> Vec<(String, (String, String))> {
    let mut named: Vec<(String, (String, String))> = Vec::new();
    for (uid, name, namespace) in pod_directory(dir) {
        let namespace = namespace.or_else(|| namespace_of(&name));
        if let Some(ns) = namespace {
            named.push((uid, (ns, name)));
        }
    }
    let mut claims: HashMap<&(String, String), usize> = HashMap::new();
    for (_, pod) in &named {
        *claims.entry(pod).or_default() += 1;
    }
    let contested: Vec<(String, String)> = claims
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(pod, _)| pod.clone())
        .collect();
    named.retain(|(uid, pod)| {
        let taken = contested.contains(pod);
        if taken {
            // Debug-quoted: the name is what a container wrote, escape sequences and all.
            tracing::warn!(namespace = ?pod.0, pod = ?pod.1, uid = ?uid,
                "two pod directories' etc-hosts name this pod; neither is taken");
        }
        !taken
    });
    named
}

/// The most of a pod directory's file read: the kubelet writes a few hundred bytes, and
/// `etc-hosts` is the pod's container's to grow.
const MAX_POD_FILE: u64 = 64 * 1024;

/// A pod directory's file, None when it is unreadable or larger than [`MAX_POD_FILE`].
fn pod_file(path: &Path) -> Option<String> {
    crate::bounded_file::text(path, MAX_POD_FILE)
}

/// (uid, pod name, namespace) for every pod directory the kubelet keeps.
fn pod_directory(dir: &Path) -> Vec<(String, String, Option<String>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let uid = e.file_name().to_string_lossy().into_owned();
        let base: PathBuf = e.path();
        let Some(name) = pod_file(&base.join("etc-hosts")).and_then(|t| pod_name_from_hosts(&t))
        else {
            continue;
        };
        let namespace = std::fs::read_dir(base.join("volumes/kubernetes.io~projected"))
            .ok()
            .and_then(|vols| {
                vols.flatten()
                    .find_map(|v| pod_file(&v.path().join("namespace")))
            })
            .map(|ns| ns.trim().to_owned())
            .filter(|ns| !ns.is_empty());
        out.push((uid, name, namespace));
    }
    out
}

/// The pod's own entry is the last line of a kubelet-managed hosts file: `<ip> <hostname…>`.
fn pod_name_from_hosts(text: &str) -> Option<String> {
    if !text.starts_with("# Kubernetes-managed hosts file") {
        return None;
    }
    let line = text.lines().rev().find(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#') && !l.contains("localhost") && !l.contains("ip6-")
    })?;
    // With a subdomain the line reads "<ip> <fqdn> <hostname>"; the last word is the name,
    // which is a DNS name or none (the container may have written anything there).
    let name = line.split_whitespace().last()?;
    model::names::check_subdomain(name).ok()?;
    Some(name.to_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A container may rewrite its /etc/hosts, its pod directory's `etc-hosts`: a name two
    /// directories claim is given to neither, and a file grown past 64 KiB is not read.
    #[test]
    fn rewritten_hosts_files_name_no_other_pod() {
        let dir = crate::scratch::fresh_dir("pods-dir").unwrap();
        write_pod(&dir, "u-trainer", &hosts("trainer-0"), "ml");
        write_pod(&dir, "u-thief", &hosts("trainer-0"), "ml");
        write_pod(&dir, "u-api", &hosts("api-0"), "web");
        let grown = format!("{}{}", "#\n".repeat(40_000), hosts("notebook-0"));
        write_pod(&dir, "u-grown", &grown, "ml");
        let named = named_pods(&dir, |_| None);
        assert_eq!(
            named,
            [("u-api".to_owned(), ("web".to_owned(), "api-0".to_owned()))]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A kubelet-managed hosts file naming `name`.
    pub(crate) fn hosts(name: &str) -> String {
        format!("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.244.1.7\t{name}\n")
    }

    /// A pod directory `uid` under `dir` as the kubelet writes it.
    pub(crate) fn write_pod(dir: &Path, uid: &str, hosts: &str, namespace: &str) {
        let ns = dir
            .join(uid)
            .join("volumes/kubernetes.io~projected/kube-api-access-x");
        std::fs::create_dir_all(&ns).unwrap();
        std::fs::write(ns.join("namespace"), namespace).unwrap();
        std::fs::write(dir.join(uid).join("etc-hosts"), hosts).unwrap();
    }

    #[test]
    fn hosts_files_name_the_pod() {
        let hosts = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n10.244.1.7\ttrainer-0.trainers.ml.svc.cluster.local\ttrainer-0\n";
        assert_eq!(pod_name_from_hosts(hosts).as_deref(), Some("trainer-0"));
        assert_eq!(
            pod_name_from_hosts("127.0.0.1 localhost\n"),
            None,
            "host network pods use the node's file"
        );
        assert_eq!(pod_name_from_hosts(&self::hosts("trainer\u{1b}[2J")), None);
        assert_eq!(pod_name_from_hosts(&self::hosts("Trainer_0")), None);
    }
}
