//! The node labels gpulens may write, and the checks every writer applies before writing one.
//!
//! Two kinds of label exist. **Advisory** labels live in gpulens' own namespace
//! (`gpulens.io/…`) and only describe what the analysis found; writing them changes nothing on
//! the node. **Actuation** labels belong to NVIDIA's GPU Operator (`nvidia.com/mig.config`,
//! `nvidia.com/device-plugin.config`): changing one makes the operator reconfigure the node, so
//! only the approved workflow may write them. Nothing else may be written, ever — in particular
//! no key in the `kubernetes.io` or `k8s.io` namespaces. Syntax follows Kubernetes' label rules.

use std::collections::BTreeMap;

/// The namespace of advisory labels.
pub const ADVISORY_PREFIX: &str = "gpulens.io/";
/// How much of the node's GPU capacity its tenants use: idle | low | medium | high | unknown.
pub const UTILIZATION_CLASS: &str = "gpulens.io/utilization-class";
/// The sharing mode the analysis recommends for the node: mig | time-slicing | mps | keep, or
/// the per-GPU mechanism its plan pins groups with (dra-shared-claim | dra-consumable-capacity).
pub const RECOMMENDED_SHARING: &str = "gpulens.io/recommended-sharing";
/// The named mig-parted config the analysis recommends (only with a `mig_layout`
/// recommendation).
pub const RECOMMENDED_MIG_CONFIG: &str = "gpulens.io/recommended-mig-config";
/// The device-plugin config the analysis recommends (time-slicing or MPS).
pub const RECOMMENDED_DEVICE_PLUGIN_CONFIG: &str = "gpulens.io/recommended-device-plugin-config";
/// When the analysis behind the labels ran, as `YYYYMMDDTHHMMSSZ` (label values cannot hold
/// `:`).
pub const ANALYZED_AT: &str = "gpulens.io/analyzed-at";
/// Annotation listing the label keys gpulens manages on a node, comma-separated, so labels it
/// no longer recommends are removed and no one else's are touched.
pub const MANAGED_ANNOTATION: &str = "gpulens.io/managed-labels";

/// GPU Operator: the mig-parted named config the node's MIG manager applies.
pub const OPERATOR_MIG_CONFIG: &str = "nvidia.com/mig.config";
/// GPU Operator: the MIG manager's progress ([`MigManagerState`]); read only.
pub const OPERATOR_MIG_STATE: &str = "nvidia.com/mig.config.state";

crate::closed_set! {
    /// What the GPU Operator's MIG manager says of the change it was given, in
    /// [`OPERATOR_MIG_STATE`]: parsed where the label is read, any other value is none of them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub enum MigManagerState {
        Pending = "pending",
        Rebooting = "rebooting",
        Success = "success",
        Failed = "failed",
    }
}

impl MigManagerState {
    /// Still applying a change: the node takes no other now.
    pub fn busy(self) -> bool {
        matches!(self, MigManagerState::Pending | MigManagerState::Rebooting)
    }

    /// The manager took up the change written (and may already have failed it).
    pub fn started(self) -> bool {
        self != MigManagerState::Success
    }

    /// The manager is done with the change, either way.
    pub fn done(self) -> bool {
        matches!(self, MigManagerState::Success | MigManagerState::Failed)
    }
}
/// GPU Operator: the device plugin's named config (time-slicing, MPS).
pub const OPERATOR_DEVICE_PLUGIN_CONFIG: &str = "nvidia.com/device-plugin.config";

/// The GPU Operator labels the actuation workflow may write.
pub const ACTUATION_KEYS: [&str; 2] = [OPERATOR_MIG_CONFIG, OPERATOR_DEVICE_PLUGIN_CONFIG];

/// Namespaces no gpulens writer ever writes into (also their subdomains).
const RESERVED: [&str; 2] = ["kubernetes.io", "k8s.io"];

/// Who is writing a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// gpulens' own labels (API writer, NFD feature file).
    Advisory,
    /// The approved reconfiguration workflow.
    Actuation,
}

/// Why a label was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label key {0:?} is not a valid Kubernetes label key: {1}")]
    BadKey(String, &'static str),
    #[error("label value {0:?} for {1} is not a valid Kubernetes label value: {2}")]
    BadValue(String, String, &'static str),
    #[error(
        "refusing label {0:?}: the {1} namespace belongs to Kubernetes and gpulens never writes it"
    )]
    Reserved(String, &'static str),
    #[error("refusing label {0:?}: advisory labels must be in the gpulens.io/ namespace")]
    NotAdvisory(String),
    #[error(
        "refusing label {0:?}: the workflow may only write nvidia.com/mig.config and nvidia.com/device-plugin.config"
    )]
    NotActuation(String),
}

fn name_ok(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("the name part is empty");
    }
    if name.len() > 63 {
        return Err("the name part is longer than 63 characters");
    }
    segment_ok(name)
}

/// Alphanumerics at both ends, `-`, `_`, `.` and alphanumerics between.
fn segment_ok(s: &str) -> Result<(), &'static str> {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    if !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
        return Err("must begin and end with a letter or digit");
    }
    if !b
        .iter()
        .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err("only letters, digits, '-', '_' and '.' are allowed");
    }
    Ok(())
}

fn prefix_ok(prefix: &str) -> Result<(), &'static str> {
    if prefix.is_empty() || prefix.len() > 253 {
        return Err("the prefix must be a DNS subdomain of 1 to 253 characters");
    }
    for part in prefix.split('.') {
        let b = part.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
        if !ok {
            return Err("the prefix must be a lowercase DNS subdomain");
        }
    }
    Ok(())
}

/// Checks a key's syntax only (Kubernetes' rules for label and annotation keys).
pub fn check_syntax(key: &str) -> Result<(), LabelError> {
    let bad = |why| LabelError::BadKey(key.to_owned(), why);
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    name_ok(name).map_err(bad)?;
    if let Some(p) = prefix {
        prefix_ok(p).map_err(bad)?;
    }
    Ok(())
}

/// Checks a key's syntax and that `purpose` may write it.
pub fn check_key(key: &str, purpose: Purpose) -> Result<(), LabelError> {
    check_syntax(key)?;
    if let Some((p, _)) = key.split_once('/') {
        for r in RESERVED {
            if p == r || p.ends_with(&format!(".{r}")) {
                return Err(LabelError::Reserved(key.to_owned(), r));
            }
        }
    }
    match purpose {
        Purpose::Advisory if !key.starts_with(ADVISORY_PREFIX) => {
            Err(LabelError::NotAdvisory(key.to_owned()))
        }
        Purpose::Actuation if !ACTUATION_KEYS.contains(&key) => {
            Err(LabelError::NotActuation(key.to_owned()))
        }
        _ => Ok(()),
    }
}

/// Checks a value's syntax (empty is allowed).
pub fn check_value(key: &str, value: &str) -> Result<(), LabelError> {
    let bad = |why| LabelError::BadValue(value.to_owned(), key.to_owned(), why);
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err(bad("longer than 63 characters"));
    }
    segment_ok(value).map_err(bad)
}

/// Checks a whole set of labels for `purpose`.
pub fn check_all(labels: &BTreeMap<String, String>, purpose: Purpose) -> Result<(), LabelError> {
    for (k, v) in labels {
        check_key(k, purpose)?;
        check_value(k, v)?;
    }
    Ok(())
}

/// A label value made from free text: characters outside the label alphabet become `-`, ends
/// are trimmed to alphanumerics, at most 63 characters.
pub fn to_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_must_be_ours() {
        assert!(check_key(UTILIZATION_CLASS, Purpose::Advisory).is_ok());
        assert!(matches!(
            check_key(OPERATOR_MIG_CONFIG, Purpose::Advisory),
            Err(LabelError::NotAdvisory(_))
        ));
        assert!(matches!(
            check_key("team", Purpose::Advisory),
            Err(LabelError::NotAdvisory(_))
        ));
    }

    #[test]
    fn kubernetes_namespaces_are_refused_for_every_purpose() {
        for key in [
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/control-plane",
            "k8s.io/x",
            "node.k8s.io/x",
            "feature.node.kubernetes.io/gpulens",
        ] {
            for p in [Purpose::Advisory, Purpose::Actuation] {
                assert!(
                    matches!(check_key(key, p), Err(LabelError::Reserved(..))),
                    "{key} {p:?}"
                );
            }
        }
        // A look-alike outside the namespace is only refused by the allow-list.
        assert!(matches!(
            check_key("notkubernetes.io/x", Purpose::Advisory),
            Err(LabelError::NotAdvisory(_))
        ));
    }

    #[test]
    fn actuation_writes_only_the_operator_config_labels() {
        assert!(check_key(OPERATOR_MIG_CONFIG, Purpose::Actuation).is_ok());
        assert!(check_key(OPERATOR_DEVICE_PLUGIN_CONFIG, Purpose::Actuation).is_ok());
        for key in [
            OPERATOR_MIG_STATE,
            "nvidia.com/gpu.present",
            UTILIZATION_CLASS,
        ] {
            assert!(matches!(
                check_key(key, Purpose::Actuation),
                Err(LabelError::NotActuation(_))
            ));
        }
    }

    #[test]
    fn syntax_follows_kubernetes() {
        for bad in [
            "gpulens.io/",
            "gpulens.io/-x",
            "Gpulens.io/x",
            "gpulens.io/a b",
            "/x",
        ] {
            assert!(
                matches!(
                    check_key(bad, Purpose::Advisory),
                    Err(LabelError::BadKey(..))
                ),
                "{bad}"
            );
        }
        let long = format!("gpulens.io/{}", "a".repeat(64));
        assert!(matches!(
            check_key(&long, Purpose::Advisory),
            Err(LabelError::BadKey(..))
        ));
        assert!(check_value("k", "").is_ok());
        assert!(check_value("k", "all-1g.10gb").is_ok());
        assert!(check_value("k", "a:b").is_err());
        assert!(check_value("k", &"a".repeat(64)).is_err());
        assert!(check_value("k", "-a").is_err());
    }

    #[test]
    fn free_text_becomes_a_valid_value() {
        assert_eq!(to_value("gpulens: node/a100 x"), "gpulens--node-a100-x");
        assert_eq!(to_value("--x--"), "x");
        let v = to_value(&"é".repeat(100));
        assert!(check_value("k", &v).is_ok());
        assert!(to_value(&"ab".repeat(50)).len() <= 63);
    }
}
