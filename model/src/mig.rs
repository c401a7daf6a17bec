//! The MIG catalogue: GPU instance profiles per GPU model, their sizes and legal placements,
//! defined once for every crate (the analytics' layouts, the simulator's fake GPUs, the agent's
//! and the remote-write receiver's reading of profile names).
//!
//! Profiles, their sizes and the PCI device ids come from NVIDIA's mig-parted default
//! configuration (shared/reference/kubernetes/mig-parted__deployments_systemd_config-default.yaml);
//! usable memory per profile from nvidia-smi; legal placements (start memory slice of each GPU
//! instance) from `nvidia-smi mig -lgipp` on A100/H100/H200, which share one geometry: eight
//! memory slices and seven compute slices.

use serde::Serialize;

/// One GPU instance profile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Profile {
    pub name: &'static str,
    /// Compute slices, of 7.
    pub compute_slices: u32,
    /// Memory slices, of 8: the placement size.
    pub memory_slices: u32,
    pub memory_gib: f64,
    /// Legal start slices.
    #[serde(skip)]
    pub starts: &'static [u32],
}

impl Profile {
    /// The share of the GPU's compute this profile stands for.
    pub fn compute_share(&self) -> f64 {
        f64::from(self.compute_slices) / 7.0
    }
}

/// A family of GPU models with one MIG geometry.
#[derive(Debug, PartialEq)]
pub struct MigFamily {
    pub name: &'static str,
    /// Substrings of NVML product names that belong to the family.
    pub products: &'static [&'static str],
    /// PCI device ids as mig-parted's `device-filter` spells them.
    pub device_ids: &'static [&'static str],
    /// Smallest first.
    pub profiles: &'static [Profile],
}

const fn p(
    name: &'static str,
    compute_slices: u32,
    memory_slices: u32,
    memory_gib: f64,
    starts: &'static [u32],
) -> Profile {
    Profile {
        name,
        compute_slices,
        memory_slices,
        memory_gib,
        starts,
    }
}

const ONE: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const TWO_1G: &[u32] = &[0, 2, 4, 6];
const TWO_2G: &[u32] = &[0, 2, 4];
const FOUR_3G: &[u32] = &[0, 4];
const FOUR_4G: &[u32] = &[0];
const EIGHT: &[u32] = &[0];

/// A100 80GB, H100 80GB (SXM and PCIe), H800: seven 10 GB slices.
pub const A100_H100_80GB: MigFamily = MigFamily {
    name: "A100/H100 80GB",
    products: &[
        "H100 80GB",
        "H100-SXM5-80GB",
        "H100 PCIe",
        "A100-SXM4-80GB",
        "A100 80GB",
        "A100-PCIE-80GB",
        "H800",
    ],
    device_ids: &[
        "0x233010DE",
        "0x233110DE",
        "0x232210DE",
        "0x20B210DE",
        "0x20B510DE",
        "0x20F310DE",
        "0x20F510DE",
        "0x232410DE",
    ],
    profiles: &[
        p("1g.10gb", 1, 1, 9.75, ONE),
        p("1g.20gb", 1, 2, 19.62, TWO_1G),
        p("2g.20gb", 2, 2, 19.62, TWO_2G),
        p("3g.40gb", 3, 4, 39.38, FOUR_3G),
        p("4g.40gb", 4, 4, 39.38, FOUR_4G),
        p("7g.80gb", 7, 8, 79.25, EIGHT),
    ],
};

/// A100 40GB: seven 5 GB slices.
pub const A100_40GB: MigFamily = MigFamily {
    name: "A100 40GB",
    products: &["A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB"],
    device_ids: &["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"],
    profiles: &[
        p("1g.5gb", 1, 1, 4.75, ONE),
        p("1g.10gb", 1, 2, 9.62, TWO_1G),
        p("2g.10gb", 2, 2, 9.62, TWO_2G),
        p("3g.20gb", 3, 4, 19.62, FOUR_3G),
        p("4g.20gb", 4, 4, 19.62, FOUR_4G),
        p("7g.40gb", 7, 8, 39.38, EIGHT),
    ],
};

/// H200 141GB: seven 18 GB slices.
pub const H200_141GB: MigFamily = MigFamily {
    name: "H200 141GB",
    products: &["H200"],
    device_ids: &["0x233510DE", "0x233B10DE"],
    profiles: &[
        p("1g.18gb", 1, 1, 16.75, ONE),
        p("1g.35gb", 1, 2, 32.5, TWO_1G),
        p("2g.35gb", 2, 2, 32.5, TWO_2G),
        p("3g.71gb", 3, 4, 65.0, FOUR_3G),
        p("4g.71gb", 4, 4, 65.0, FOUR_4G),
        p("7g.141gb", 7, 8, 130.5, EIGHT),
    ],
};

/// Every family gpulens knows.
pub const FAMILIES: &[MigFamily] = &[A100_H100_80GB, A100_40GB, H200_141GB];

/// The MIG family of a product name, or None when the model has no MIG.
pub fn family(product: &str) -> Option<&'static MigFamily> {
    FAMILIES
        .iter()
        .find(|f| f.products.iter().any(|p| product.contains(p)))
}

impl MigFamily {
    pub fn profile(&self, name: &str) -> Option<&'static Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The profiles with at least `memory_gib` of memory and `compute_share` of the compute,
    /// smallest first (fewest compute slices, then least memory).
    pub fn fitting(
        &self,
        memory_gib: f64,
        compute_share: f64,
    ) -> impl Iterator<Item = &'static Profile> + use<> {
        let mut fits: Vec<&'static Profile> = self
            .profiles
            .iter()
            .filter(|p| p.memory_gib >= memory_gib && p.compute_share() >= compute_share - 1e-9)
            .collect();
        fits.sort_by_key(|p| (p.compute_slices, p.memory_slices));
        fits.into_iter()
    }

    /// The smallest profile with at least `memory_gib` of memory and `compute_share` of the
    /// compute (fewest compute slices, then least memory).
    pub fn smallest_fitting(
        &self,
        memory_gib: f64,
        compute_share: f64,
    ) -> Option<&'static Profile> {
        self.fitting(memory_gib, compute_share).next()
    }

    /// Start slices for `profiles` on one GPU, in the given order, or None when no legal
    /// placement exists (memory slices overlap or more than seven compute slices).
    pub fn place(&self, profiles: &[&Profile]) -> Option<Vec<u32>> {
        if profiles.iter().map(|p| p.compute_slices).sum::<u32>() > 7 {
            return None;
        }
        // Largest first makes the search short; map back to the caller's order at the end.
        let mut order: Vec<usize> = (0..profiles.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(profiles[i].memory_slices));
        let mut starts = vec![0u32; profiles.len()];
        fn go(
            k: usize,
            order: &[usize],
            profiles: &[&Profile],
            used: u8,
            starts: &mut [u32],
        ) -> bool {
            let Some(&i) = order.get(k) else { return true };
            let p = profiles[i];
            for &s in p.starts {
                let mask = (((1u16 << p.memory_slices) - 1) << s) as u8;
                if s + p.memory_slices <= 8 && used & mask == 0 {
                    starts[i] = s;
                    if go(k + 1, order, profiles, used | mask, starts) {
                        return true;
                    }
                }
            }
            false
        }
        go(0, &order, profiles, 0, &mut starts).then_some(starts)
    }
}

/// Compute slices (of seven) a profile name stands for: `3g.40gb` → 3, and the same for NVML's
/// MIG device names ("NVIDIA H100 80GB HBM3 MIG 3g.40gb"); None when the name says nothing.
pub fn compute_slices(profile: &str) -> Option<u32> {
    let name = profile.rsplit(' ').next()?;
    let (count, _) = name.split_once("g.")?;
    count.parse().ok().filter(|n| (1..=7).contains(n))
}

/// The share of its GPU's compute a MIG instance with `slices` compute slices holds (one slice
/// when that is not known).
pub fn slice_share(slices: Option<u32>) -> f32 {
    slices.map_or(1.0 / 7.0, |n| (n as f32 / 7.0).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(f: &MigFamily, list: &[&str]) -> Vec<&'static Profile> {
        list.iter().map(|n| f.profile(n).unwrap()).collect()
    }

    #[test]
    fn placements_follow_the_hardware_rules() {
        let f = family("NVIDIA H100 80GB HBM3").unwrap();
        // mig-parted's all-balanced for this family.
        let balanced = names(f, &["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]);
        assert!(f.place(&balanced).is_some());
        assert!(f.place(&names(f, &["1g.10gb"; 7])).is_some());
        assert!(f.place(&names(f, &["3g.40gb", "3g.40gb"])).is_some());
        // Two 3g instances take every memory slice: no room for a 1g.
        assert!(
            f.place(&names(f, &["3g.40gb", "3g.40gb", "1g.10gb"]))
                .is_none()
        );
        assert!(f.place(&names(f, &["4g.40gb", "4g.40gb"])).is_none());
        assert!(f.place(&names(f, &["4g.40gb", "3g.40gb"])).is_some());
        assert!(f.place(&names(f, &["1g.10gb"; 8])).is_none());
        assert!(family("NVIDIA L40S").is_none());
    }

    #[test]
    fn profile_names_give_their_compute_slices() {
        assert_eq!(compute_slices("3g.40gb"), Some(3));
        assert_eq!(compute_slices("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), Some(1));
        assert_eq!(compute_slices("7g.141gb"), Some(7));
        assert_eq!(compute_slices("unknown"), None);
        assert_eq!(compute_slices("9g.90gb"), None);
        assert!((slice_share(compute_slices("2g.20gb")) - 2.0 / 7.0).abs() < 1e-6);
        assert!((slice_share(compute_slices("")) - 1.0 / 7.0).abs() < 1e-6);
        for f in FAMILIES {
            for p in f.profiles {
                assert_eq!(compute_slices(p.name), Some(p.compute_slices), "{}", p.name);
            }
        }
    }
}
