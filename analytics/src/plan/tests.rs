use super::bins::*;
use super::bound::*;
use super::group::*;
use super::pack::*;
use super::*;
use crate::config::Config;
use crate::findings::GIB;
use model::rollup::HOUR_MS;

/// Whether any `r` of `items` fit one GPU, as a time-sliced node's group judges it.
fn worst_group_fits(cfg: &Config, items: &[&Item], r: usize, memory_total: f64) -> bool {
    let mut g = Group::new(r, memory_total);
    items.iter().all(|it| g.try_add(cfg, it))
}

/// A placeholder holding: the packer reads the items' own numbers.
fn holding() -> Holding {
    Holding {
        cluster: "c".into(),
        node: "n".into(),
        gpu: "g".into(),
        tenant: "t".into(),
        total: Default::default(),
        rows: vec![],
    }
}

/// The demo's H100 pool: two trainers near a whole GPU's memory and three small pods whose
/// memory adds up to just over one GPU. Summed needs say 3 GPUs; none of the small pods fits
/// beside a trainer, and together they need two: 4.
#[test]
fn the_bound_sees_what_fits_beside_the_large_tenants() {
    let items = [
        (0.72, 0.98),
        (0.72, 0.98),
        (0.16, 0.30),
        (0.09, 0.25),
        (0.28, 0.47),
    ];
    assert_eq!(needs_bound(&items), 4);
    // Small ones that fit the room the large ones leave need nothing more.
    assert_eq!(
        needs_bound(&[(0.7, 0.5), (0.7, 0.5), (0.2, 0.4), (0.2, 0.4)]),
        2
    );
    // Compute-large and memory-large tenants may share: no dimension alone decides.
    assert_eq!(needs_bound(&[(0.8, 0.1), (0.1, 0.8)]), 1);
    assert_eq!(needs_bound(&[]), 0);
}

/// Time-slicing is node-wide, so a node whose GPUs each pair a heavy tenant with
/// a light one is unsafe: the device plugin may put both heavy ones on one GPU.
#[test]
fn a_time_sliced_node_is_judged_by_its_worst_group_not_its_pairs() {
    let cfg = Config::default();
    let h = holding();
    let item = |compute: f64, memory_gib: f64| Item {
        h: &h,
        compute,
        memory: memory_gib * GIB,
        pin: None,
        hours: (0..48)
            .map(|i| (i * HOUR_MS, compute * 0.9, memory_gib * GIB * 0.9))
            .collect(),
        fit: Fit::Share,
    };
    let (heavy, light) = (item(0.6, 30.0), item(0.3, 10.0));
    let total = 80.0 * GIB;
    // Each GPU's own pair fits (0.54 + 0.27 a GPU)...
    assert!(worst_group_fits(&cfg, &[&heavy, &light], 2, total));
    // ...but two heavy ones on one GPU contend every hour (1.08).
    assert!(!worst_group_fits(
        &cfg,
        &[&heavy, &light, &heavy, &light],
        2,
        total
    ));
    // Memory decides alone: three 30-GiB tenants per GPU cannot be guaranteed 80 GiB.
    let big = item(0.1, 30.0);
    assert!(worst_group_fits(&cfg, &[&big, &big], 2, total));
    assert!(!worst_group_fits(&cfg, &[&big, &big, &big], 3, total));
    // Light ones only: any two fit.
    assert!(worst_group_fits(
        &cfg,
        &[&light, &light, &light, &light],
        2,
        total
    ));
}

/// A tiny deterministic generator (xorshift64*), so the property tests need no crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Whether `items` may share one time-sliced GPU by the packer's rules.
fn bin_ok(cfg: &Config, items: &[&Item], total: f64) -> bool {
    if items.len() as u32 > cfg.max_replicas || items.iter().map(|i| i.memory).sum::<f64>() > total
    {
        return false;
    }
    let mut hours: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
    for it in items {
        for &(h, e, m) in &it.hours {
            let x = hours.entry(h).or_default();
            x.0 += e;
            x.1 += m;
        }
    }
    let contended = hours.values().filter(|v| v.0 > 1.0 + 1e-9).count();
    hours.values().all(|v| v.1 <= total) && contended as f64 <= allowed(cfg, hours.len())
}

/// The fewest time-sliced GPUs `items` need, by trying every assignment.
fn exact(cfg: &Config, items: &[&Item], total: f64) -> usize {
    fn go<'a>(
        cfg: &Config,
        items: &[&'a Item<'a>],
        total: f64,
        i: usize,
        bins: &mut Vec<Vec<&'a Item<'a>>>,
        best: &mut usize,
    ) {
        if bins.len() >= *best {
            return;
        }
        if i == items.len() {
            *best = bins.len();
            return;
        }
        for b in 0..bins.len() {
            bins[b].push(items[i]);
            if bin_ok(cfg, &bins[b], total) {
                go(cfg, items, total, i + 1, bins, best);
            }
            bins[b].pop();
        }
        bins.push(vec![items[i]]);
        go(cfg, items, total, i + 1, bins, best);
        bins.pop();
    }
    let mut best = items.len();
    go(cfg, items, total, 0, &mut Vec::new(), &mut best);
    best
}

/// On random small pools an exhaustive search never needs fewer GPUs than the
/// bound, and neither does the packer (time-slicing only, or MIG where a profile fits).
#[test]
fn no_packing_beats_the_bound() {
    let total = 80.0 * GIB;
    let h = holding();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let family = mig::family("NVIDIA H100 80GB HBM3");
    assert!(family.is_some());
    for case in 0..300 {
        let cfg = Config {
            max_replicas: 2 + (case % 3) as u32,
            ..Config::default()
        };
        let n = 1 + (rng.next() * 7.0) as usize;
        let hours = 4 + (rng.next() * 20.0) as i64;
        let items: Vec<Item> = (0..n)
            .map(|_| {
                // Diurnal, flat or spiky demand; memory from tiny to most of a GPU.
                let base = rng.next() * 0.7;
                let phase = (rng.next() * hours as f64) as i64;
                let shape = rng.next();
                let memory = (2.0 + rng.next() * 60.0) * GIB;
                let hrs: Vec<(i64, f64, f64)> = (0..hours)
                    .map(|t| {
                        let eff = if shape < 0.33 {
                            base
                        } else if shape < 0.66 {
                            if (t + phase) % hours < hours / 2 {
                                base + 0.3
                            } else {
                                0.05
                            }
                        } else if (t + phase) % 7 == 0 {
                            0.9
                        } else {
                            base * rng.next()
                        };
                        (t * HOUR_MS, eff.min(1.0), memory * (0.6 + 0.3 * rng.next()))
                    })
                    .collect();
                let mut effs: Vec<f64> = hrs.iter().map(|x| x.1).collect();
                effs.sort_by(f64::total_cmp);
                Item {
                    h: &h,
                    compute: (effs[effs.len() * 95 / 100] * 1.25).min(1.0),
                    memory,
                    pin: None,
                    hours: hrs,
                    fit: Fit::Share,
                }
            })
            .collect();
        let refs: Vec<&Item> = items.iter().collect();
        let lower = bound(&cfg, &refs, total, None);
        let best = exact(&cfg, &refs, total);
        assert!(lower <= best, "case {case}: bound {lower} > exact {best}");
        assert!(lower >= 1 && best <= n);
        let packed = pack(&cfg, &items, total, None).bins.len();
        assert!(
            packed >= best,
            "case {case}: packed {packed} < exact {best}"
        );
        // With MIG allowed the bound still holds for either way of packing.
        let lower_mig = bound(&cfg, &refs, total, family);
        assert!(lower_mig <= lower);
        for s in [Strategy::MigFirst, Strategy::ShareFirst] {
            let mut fitted = items.clone();
            for it in &mut fitted {
                it.fit = fit(&cfg, family, total, it, s);
            }
            let packed = pack(&cfg, &fitted, total, family).bins.len();
            assert!(
                packed >= lower_mig,
                "case {case}: packed {packed} < bound {lower_mig}"
            );
        }
    }
}

/// Complementary diurnal tenants share a GPU though each one's p95 needs most of it.
#[test]
fn tenants_busy_at_different_hours_share() {
    let cfg = Config::default();
    let h = holding();
    let diurnal = |day: bool| Item {
        h: &h,
        compute: 1.0,
        memory: 20.0 * GIB,
        pin: None,
        hours: (0..48)
            .map(|t| {
                let busy = (t % 24 < 12) == day;
                (t * HOUR_MS, if busy { 0.85 } else { 0.05 }, 15.0 * GIB)
            })
            .collect(),
        fit: Fit::Share,
    };
    let items = [diurnal(true), diurnal(false), diurnal(true), diurnal(false)];
    let packing = pack(&cfg, &items, 80.0 * GIB, None);
    assert_eq!(packing.bins.len(), 2);
    for b in &packing.bins {
        assert_eq!(b.items.len(), 2);
        // One of each: the two day tenants would contend every day.
        assert_ne!(b.items[0] % 2, b.items[1] % 2);
    }
    let refs: Vec<&Item> = items.iter().collect();
    assert_eq!(bound(&cfg, &refs, 80.0 * GIB, None), 2);
}

#[test]
fn efficiency_is_freed_over_what_the_bound_leaves() {
    assert_eq!(efficiency(10, 6, 3), Some(0.75));
    assert_eq!(efficiency(10, 6, 4), Some(1.0));
    // Nothing to free: no ratio (not 0 %, not 100 %).
    assert_eq!(efficiency(5, 5, 0), None);
}
