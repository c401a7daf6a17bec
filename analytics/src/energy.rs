//! Energy and emissions on the funnel's lines (docs/cost.md, "Energy"): a device line (total,
//! cluster, model, node) has what its GPUs drew, and of it what was charged while allocations
//! ran no kernel and what no tenant was charged (unallocated GPUs, use no tenant was found
//! for); a tenant or team line has what was charged to it. Emissions are each hour's kWh ×
//! the grid intensity of its cluster and hour.

use std::collections::{HashMap, HashSet};

use crate::config::Config;
pub use crate::funnel::LineEnergy;
use crate::funnel::{Funnel, FunnelRow, NO_TEAM};
use crate::holdings::Holding;
use crate::input::Input;

const J_PER_KWH: f64 = 3.6e6;

/// Running sums for one line.
#[derive(Default, Clone, Copy)]
struct Sums {
    drawn: f64,
    charged: f64,
    idle: f64,
    co2e_g: f64,
    known: bool,
}

/// Which lines an amount goes to: the total and the device lines of a GPU, or a tenant's.
#[derive(Hash, PartialEq, Eq, Clone)]
enum Line {
    Total,
    Cluster(String),
    Model(String),
    Node(String, String),
    Team(String),
    Tenant(String),
}

/// Sets every line's energy where any of its GPUs has energy known in the range.
pub fn fill(funnel: &mut Funnel, input: &Input, holdings: &[Holding], cfg: &Config) {
    let model: HashMap<&str, &str> = input
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.model.as_str()))
        .collect();
    let device_lines = |cluster: &str, node: &str, gpu: &str| {
        [
            Line::Total,
            Line::Cluster(cluster.to_owned()),
            Line::Model(model.get(gpu).copied().unwrap_or("unknown").to_owned()),
            Line::Node(cluster.to_owned(), node.to_owned()),
        ]
    };
    let co2e = |cluster: &str, hour: i64, j: f64| {
        cfg.carbon
            .intensity(cluster, hour)
            .map_or(0.0, |g| g * j / J_PER_KWH)
    };
    let mut sums: HashMap<Line, Sums> = HashMap::new();
    let mut known: HashSet<&str> = HashSet::new();
    for s in &input.gpu_hours {
        let lines = device_lines(&s.cluster, &s.node, &s.gpu);
        for (hour, h) in s.hours.iter().filter(|(_, h)| h.energy_n > 0) {
            known.insert(s.gpu.as_str());
            for l in &lines {
                let e = sums.entry(l.clone()).or_default();
                e.drawn += h.energy_j;
                e.co2e_g += co2e(&s.cluster, *hour, h.energy_j);
                e.known = true;
            }
        }
    }
    let team: HashMap<(&str, &str), &str> = input
        .tenants
        .iter()
        .map(|t| {
            (
                (t.cluster.as_str(), t.key.as_str()),
                t.team.as_deref().unwrap_or(NO_TEAM),
            )
        })
        .collect();
    for h in holdings {
        let on_known = known.contains(h.gpu.as_str());
        let t = team
            .get(&(h.cluster.as_str(), h.tenant.as_str()))
            .copied()
            .unwrap_or(NO_TEAM);
        let own = [Line::Team(t.to_owned()), Line::Tenant(h.tenant.clone())];
        let device = device_lines(&h.cluster, &h.node, &h.gpu);
        for (hour, r) in &h.rows {
            for l in &own {
                let e = sums.entry(l.clone()).or_default();
                e.drawn += r.energy_j;
                e.charged += r.energy_j;
                e.idle += r.idle_energy_j;
                e.co2e_g += co2e(&h.cluster, *hour, r.energy_j);
                e.known |= on_known;
            }
            for l in &device {
                let e = sums.entry(l.clone()).or_default();
                e.charged += r.energy_j;
                e.idle += r.idle_energy_j;
            }
        }
    }
    let carbon = cfg.carbon.is_set();
    let energy_of = |l: Line, device: bool| {
        let s = sums.get(&l).copied().unwrap_or_default();
        s.known.then(|| LineEnergy {
            kwh: s.drawn / J_PER_KWH,
            idle_kwh: s.idle / J_PER_KWH,
            unallocated_kwh: device.then(|| ((s.drawn - s.charged) / J_PER_KWH).max(0.0)),
            co2e_kg: carbon.then(|| s.co2e_g / 1000.0),
        })
    };
    funnel.total.energy = energy_of(Line::Total, true);
    let set = |rows: &mut [FunnelRow], line: &dyn Fn(&FunnelRow) -> Line, device: bool| {
        for r in rows {
            r.energy = energy_of(line(r), device);
        }
    };
    set(
        &mut funnel.by_cluster,
        &|r| Line::Cluster(r.key.clone()),
        true,
    );
    set(&mut funnel.by_model, &|r| Line::Model(r.key.clone()), true);
    set(
        &mut funnel.by_node,
        &|r| Line::Node(r.cluster.clone().unwrap_or_default(), r.key.clone()),
        true,
    );
    set(&mut funnel.by_team, &|r| Line::Team(r.key.clone()), false);
    set(
        &mut funnel.by_tenant,
        &|r| Line::Tenant(r.key.clone()),
        false,
    );
}
