//! mig-parted configurations over the MIG catalogue (`model::mig`, re-exported here).

use serde::{Deserialize, Serialize};

pub use model::mig::{FAMILIES, MigFamily, Profile, family};

/// One entry of a mig-parted named configuration: a set of device indexes and their layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigPartedEntry {
    pub devices: Vec<i64>,
    pub mig_enabled: bool,
    /// Profile name → count, in profile order.
    pub mig_devices: Vec<(String, u32)>,
}

/// A mig-parted `version: v1` configuration with one named config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigPartedConfig {
    pub name: String,
    pub entries: Vec<MigPartedEntry>,
}

impl MigPartedConfig {
    /// Checks every entry against the family: known profiles, a legal placement.
    pub fn validate(&self, family: &MigFamily) -> Result<(), String> {
        model::labels::check_value(model::labels::OPERATOR_MIG_CONFIG, &self.name)
            .map_err(|e| format!("config name: {e}"))?;
        for e in &self.entries {
            if !e.mig_enabled {
                if !e.mig_devices.is_empty() {
                    return Err("MIG-disabled devices cannot have MIG devices".into());
                }
                continue;
            }
            let mut list = Vec::new();
            for (name, count) in &e.mig_devices {
                let p = family
                    .profile(name)
                    .ok_or_else(|| format!("profile {name} does not exist on {}", family.name))?;
                list.extend(std::iter::repeat_n(p, *count as usize));
            }
            if family.place(&list).is_none() {
                return Err(format!(
                    "layout {:?} has no legal placement on {}",
                    e.mig_devices, family.name
                ));
            }
        }
        Ok(())
    }

    /// The configuration as mig-parted reads it (`version: v1`, `mig-configs`).
    pub fn to_yaml(&self) -> String {
        let mut y = format!("version: v1\nmig-configs:\n  {}:\n", self.name);
        for e in &self.entries {
            let devices: Vec<String> = e.devices.iter().map(|d| d.to_string()).collect();
            y.push_str(&format!("    - devices: [{}]\n", devices.join(", ")));
            y.push_str(&format!("      mig-enabled: {}\n", e.mig_enabled));
            if e.mig_enabled {
                if e.mig_devices.is_empty() {
                    y.push_str("      mig-devices: {}\n");
                } else {
                    y.push_str("      mig-devices:\n");
                    for (name, count) in &e.mig_devices {
                        y.push_str(&format!("        \"{name}\": {count}\n"));
                    }
                }
            }
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_render_as_mig_parted_yaml() {
        let f = family("NVIDIA A100-SXM4-80GB").unwrap();
        let c = MigPartedConfig {
            name: "gpulens-gpu-a-01".into(),
            entries: vec![
                MigPartedEntry {
                    devices: vec![0],
                    mig_enabled: false,
                    mig_devices: vec![],
                },
                MigPartedEntry {
                    devices: vec![1],
                    mig_enabled: true,
                    mig_devices: vec![("3g.40gb".into(), 2)],
                },
            ],
        };
        c.validate(f).unwrap();
        let y: serde_yaml::Value = serde_yaml::from_str(&c.to_yaml()).unwrap();
        assert_eq!(y["version"], "v1");
        let entries = &y["mig-configs"]["gpulens-gpu-a-01"];
        assert_eq!(entries[1]["mig-devices"]["3g.40gb"], 2);
        assert_eq!(entries[0]["mig-enabled"], false);
        let bad = MigPartedConfig {
            name: "x".into(),
            entries: vec![MigPartedEntry {
                devices: vec![0],
                mig_enabled: true,
                mig_devices: vec![("3g.40gb".into(), 3)],
            }],
        };
        assert!(bad.validate(f).is_err());
    }
}
