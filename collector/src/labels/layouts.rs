//! Custom layouts: the mig-parted config or device-plugin config a plan selects, written into
//! the GPU Operator's ConfigMaps before the label that selects it.
//!
//! - MIG: mig-parted reads one `config.yaml` holding every named config (`version: v1`,
//!   `mig-configs: {name: [entries]}`); gpulens merges its one named config into that map.
//! - Device plugin: one ConfigMap key per named config, the key being the name.
//!
//! gpulens adds and replaces only configs whose names begin `gpulens-`; every other config is
//! someone else's and is never changed. The ConfigMap must already exist and be the one the
//! ClusterPolicy names (`migManager.config.name`, `devicePlugin.config.name`): a ConfigMap
//! nothing reads would make the label select a config the operator cannot find.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

/// `[labels.custom_layouts]`: where generated configs go. Absent: plans only select configs
/// by name, which must then already be in the operator's ConfigMaps.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The GPU Operator's namespace.
    pub namespace: String,
    /// The ConfigMap named in the ClusterPolicy's `migManager.config.name`; its `config.yaml`
    /// holds mig-parted's configs.
    pub mig_config_map: String,
    /// The ConfigMap named in the ClusterPolicy's `devicePlugin.config.name`.
    pub device_plugin_config_map: String,
    /// How long to wait after a ConfigMap changed before writing the label: the kubelet
    /// projects ConfigMap updates into the operator's mounted volume only after its sync
    /// period (about a minute), and a label written sooner selects a config not yet there.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub sync_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: "gpu-operator".into(),
            mig_config_map: "custom-mig-config".into(),
            device_plugin_config_map: "time-slicing-config".into(),
            sync_wait: Duration::from_secs(120),
        }
    }
}

/// mig-parted's key in its ConfigMap.
pub const MIG_PARTED_KEY: &str = "config.yaml";

/// A generated config and the ConfigMap it goes into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layout {
    /// A `version: v1` mig-parted document holding the one named config, merged into the
    /// ConfigMap's `config.yaml`.
    MigParted {
        namespace: String,
        config_map: String,
        yaml: String,
    },
    /// A device-plugin config stored under the key of its name.
    DevicePlugin {
        namespace: String,
        config_map: String,
        yaml: String,
    },
}

impl Layout {
    pub fn namespace(&self) -> &str {
        match self {
            Layout::MigParted { namespace, .. } | Layout::DevicePlugin { namespace, .. } => {
                namespace
            }
        }
    }

    pub fn config_map(&self) -> &str {
        match self {
            Layout::MigParted { config_map, .. } | Layout::DevicePlugin { config_map, .. } => {
                config_map
            }
        }
    }
}

/// The node label GPU Feature Discovery sets to the cluster's MIG strategy.
pub const MIG_STRATEGY_LABEL: &str = "nvidia.com/mig.strategy";

impl Layout {
    /// A device-plugin config with `flags.migStrategy` set to the node's strategy (`none`,
    /// `single` or `mixed`, as GPU Feature Discovery labels it), so the generated sharing
    /// config does not switch a MIG node's device advertisement to `none`. Anything else is
    /// returned as it is.
    pub fn with_mig_strategy(&self, strategy: Option<&str>) -> Result<Layout, LayoutError> {
        let (Layout::DevicePlugin { yaml, .. }, Some(strategy)) = (self, strategy) else {
            return Ok(self.clone());
        };
        if !["none", "single", "mixed"].contains(&strategy) {
            return Ok(self.clone());
        }
        let mut doc: Value = serde_yaml::from_str(yaml)
            .map_err(|e| invalid("the generated device-plugin config", e))?;
        let Some(root) = doc.as_mapping_mut() else {
            return Err(invalid(
                "the generated device-plugin config",
                "not a mapping",
            ));
        };
        let flags = root
            .entry(Value::from("flags"))
            .or_insert_with(|| Value::Mapping(Default::default()));
        let Some(flags) = flags.as_mapping_mut() else {
            return Err(invalid(
                "the generated device-plugin config",
                "flags is not a mapping",
            ));
        };
        flags.insert(Value::from("migStrategy"), Value::from(strategy));
        let mut out = self.clone();
        if let Layout::DevicePlugin { yaml, .. } = &mut out {
            *yaml = serde_yaml::to_string(&doc)
                .map_err(|e| invalid("the generated device-plugin config", e))?;
        }
        Ok(out)
    }
}

/// What writing a layout did to its ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Replaced,
    Unchanged,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Replaced => "replaced",
            Change::Unchanged => "unchanged",
        }
    }
}

/// Why a layout cannot be written.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LayoutError {
    #[error(
        "config {0:?} is not gpulens's to write: gpulens adds and replaces only configs named gpulens-…"
    )]
    NotOurs(String),
    #[error("{what} is not valid mig-parted YAML: {why}")]
    Invalid { what: String, why: String },
    #[error("the generated mig-parted document does not hold the config {0:?}")]
    Missing(String),
}

fn invalid(what: &str, why: impl std::fmt::Display) -> LayoutError {
    LayoutError::Invalid {
        what: what.into(),
        why: why.to_string(),
    }
}

/// What `layout` needs in a ConfigMap holding `data`: the key, its new value (`None` when it
/// already holds the config) and the kind of change.
pub fn entry(
    layout: &Layout,
    name: &str,
    data: &BTreeMap<String, String>,
) -> Result<(String, Option<String>, Change), LayoutError> {
    if !name.starts_with("gpulens-") {
        return Err(LayoutError::NotOurs(name.into()));
    }
    match layout {
        Layout::DevicePlugin { yaml, .. } => {
            let change = match data.get(name) {
                None => Change::Added,
                Some(c) if c == yaml => Change::Unchanged,
                Some(_) => Change::Replaced,
            };
            let value = (change != Change::Unchanged).then(|| yaml.clone());
            Ok((name.to_owned(), value, change))
        }
        Layout::MigParted { yaml, .. } => {
            let current = data.get(MIG_PARTED_KEY).map(String::as_str);
            let (text, change) = merge_mig_parted(current, name, yaml)?;
            Ok((MIG_PARTED_KEY.to_owned(), text, change))
        }
    }
}

/// Merges the config `name` of the generated document `generated` into mig-parted's
/// `config.yaml` text `current`, keeping every other config (and key) as it is. Returns the
/// new text, or `None` when `current` already holds the same config.
///
/// The text is re-serialized, so comments in the operator's `config.yaml` do not survive a
/// change (configs, their order and values do).
pub fn merge_mig_parted(
    current: Option<&str>,
    name: &str,
    generated: &str,
) -> Result<(Option<String>, Change), LayoutError> {
    let ours: Value =
        serde_yaml::from_str(generated).map_err(|e| invalid("the generated config", e))?;
    let config = ours
        .get("mig-configs")
        .and_then(|m| m.get(name))
        .cloned()
        .ok_or_else(|| LayoutError::Missing(name.into()))?;
    let Some(current) = current else {
        let mut configs = Mapping::new();
        configs.insert(name.into(), config);
        let mut doc = Mapping::new();
        doc.insert("version".into(), "v1".into());
        doc.insert("mig-configs".into(), Value::Mapping(configs));
        return Ok((Some(to_text(&Value::Mapping(doc))?), Change::Added));
    };
    let what = format!("the ConfigMap's {MIG_PARTED_KEY}");
    let mut doc: Value = serde_yaml::from_str(current).map_err(|e| invalid(&what, e))?;
    match doc.get("version").and_then(Value::as_str) {
        Some("v1") => {}
        other => return Err(invalid(&what, format!("version is {other:?}, not \"v1\""))),
    }
    let configs = doc
        .get_mut("mig-configs")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| invalid(&what, "it has no mig-configs map"))?;
    let change = match configs.get(name) {
        None => Change::Added,
        Some(c) if *c == config => return Ok((None, Change::Unchanged)),
        Some(_) => Change::Replaced,
    };
    configs.insert(name.into(), config);
    Ok((Some(to_text(&doc)?), change))
}

fn to_text(doc: &Value) -> Result<String, LayoutError> {
    serde_yaml::to_string(doc).map_err(|e| invalid("the merged config", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATORS: &str = r#"version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  five-1g-one-2g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 5
        "2g.20gb": 1
"#;

    const OURS: &str = r#"version: v1
mig-configs:
  gpulens-mig-0123456789ab:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - devices: [2]
      mig-enabled: false
"#;

    const NAME: &str = "gpulens-mig-0123456789ab";

    fn configs(text: &str) -> Mapping {
        let v: Value = serde_yaml::from_str(text).unwrap();
        v["mig-configs"].as_mapping().unwrap().clone()
    }

    #[test]
    fn merging_keeps_the_operators_configs_and_adds_ours() {
        let (text, change) = merge_mig_parted(Some(OPERATORS), NAME, OURS).unwrap();
        assert_eq!(change, Change::Added);
        let text = text.unwrap();
        let merged = configs(&text);
        let before = configs(OPERATORS);
        for (k, v) in &before {
            assert_eq!(merged.get(k), Some(v), "{k:?} kept as it was");
        }
        assert_eq!(merged.get(NAME), configs(OURS).get(NAME));
        // Order kept, ours last.
        let keys: Vec<&str> = merged.keys().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(keys, ["all-disabled", "five-1g-one-2g", NAME]);

        // Again: nothing to do.
        assert_eq!(
            merge_mig_parted(Some(&text), NAME, OURS).unwrap(),
            (None, Change::Unchanged)
        );
        // A different layout under the same name replaces ours only.
        let other = OURS.replace("\"1g.10gb\": 7", "\"1g.10gb\": 6");
        let (again, change) = merge_mig_parted(Some(&text), NAME, &other).unwrap();
        assert_eq!(change, Change::Replaced);
        let again = configs(&again.unwrap());
        assert_eq!(again.get("five-1g-one-2g"), before.get("five-1g-one-2g"));
        assert_eq!(again.get(NAME), configs(&other).get(NAME));
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        let layout = Layout::MigParted {
            namespace: "gpu-operator".into(),
            config_map: "custom-mig-config".into(),
            yaml: OURS.into(),
        };
        assert_eq!(
            entry(&layout, "all-disabled", &BTreeMap::new()).unwrap_err(),
            LayoutError::NotOurs("all-disabled".into())
        );
        let e = merge_mig_parted(Some("version: v2\nmig-configs: {}\n"), NAME, OURS).unwrap_err();
        assert!(e.to_string().contains("not \"v1\""), "{e}");
        let e = merge_mig_parted(Some("version: v1\n"), NAME, OURS).unwrap_err();
        assert!(e.to_string().contains("no mig-configs"), "{e}");
        let e = merge_mig_parted(Some("mig-configs: [unclosed"), NAME, OURS).unwrap_err();
        assert!(e.to_string().contains("not valid mig-parted YAML"), "{e}");
        assert_eq!(
            merge_mig_parted(Some(OPERATORS), "gpulens-mig-other", OURS).unwrap_err(),
            LayoutError::Missing("gpulens-mig-other".into())
        );
    }

    #[test]
    fn device_plugin_configs_take_the_nodes_mig_strategy() {
        let layout = Layout::DevicePlugin {
            namespace: "gpu-operator".into(),
            config_map: "time-slicing-config".into(),
            yaml: analytics::recommend::device_plugin_config(
                model::inventory::Sharing::TimeSlicing,
                4,
            ),
        };
        let yaml = |l: &Layout| match l {
            Layout::DevicePlugin { yaml, .. } => yaml.clone(),
            _ => unreachable!(),
        };
        let mixed = layout.with_mig_strategy(Some("mixed")).unwrap();
        let doc: Value = serde_yaml::from_str(&yaml(&mixed)).unwrap();
        assert_eq!(doc["flags"]["migStrategy"], Value::from("mixed"));
        assert_eq!(
            doc["sharing"]["timeSlicing"]["resources"][0]["replicas"],
            Value::from(4)
        );
        // No label, or a value that is not a strategy: the config as generated.
        assert_eq!(layout.with_mig_strategy(None).unwrap(), layout);
        assert_eq!(layout.with_mig_strategy(Some("bogus")).unwrap(), layout);
    }

    #[test]
    fn device_plugin_configs_go_under_their_name() {
        let layout = Layout::DevicePlugin {
            namespace: "gpu-operator".into(),
            config_map: "time-slicing-config".into(),
            yaml: "version: v1\n".into(),
        };
        let name = "gpulens-time-slicing-x4";
        let data = |v: &str| BTreeMap::from([(name.to_owned(), v.to_owned())]);
        assert_eq!(
            entry(&layout, name, &BTreeMap::new()).unwrap(),
            (name.into(), Some("version: v1\n".into()), Change::Added)
        );
        assert_eq!(
            entry(&layout, name, &data("version: v1\n")).unwrap().2,
            Change::Unchanged
        );
        assert_eq!(
            entry(&layout, name, &data("old")).unwrap().2,
            Change::Replaced
        );
    }
}
