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

/// Joules in a kWh.
pub const J_PER_KWH: f64 = 3.6e6;

/// The GPUs of the input with energy known in some hour of its range.
pub fn measured_gpus(input: &Input) -> HashSet<&str> {
    input
        .gpu_hours
        .iter()
        .filter(|s| s.hours.iter().any(|(_, h)| h.energy_n > 0))
        .map(|s| s.gpu.as_str())
        .collect()
}

/// Running sums for one line, or for one GPU's or holding's hours before they go to lines.
#[derive(Default, Clone, Copy)]
struct Sums {
    drawn: f64,
    charged: f64,
    idle: f64,
    co2e_g: f64,
    known: bool,
}

impl Sums {
    fn add(&mut self, o: &Sums) {
        self.drawn += o.drawn;
        self.charged += o.charged;
        self.idle += o.idle;
        self.co2e_g += o.co2e_g;
        self.known |= o.known;
    }
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

/// Sets every line's energy where any of its GPUs has energy known in the range. Each GPU's
/// and each holding's hours are summed first (an hour's emissions at its own intensity), then
/// added to their lines once.
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
    let mut add = |lines: &[Line], s: &Sums| {
        for l in lines {
            sums.entry(l.clone()).or_default().add(s);
        }
    };
    for s in &input.gpu_hours {
        let mut gpu = Sums::default();
        for (hour, h) in s.hours.iter().filter(|(_, h)| h.energy_n > 0) {
            gpu.drawn += h.energy_j;
            gpu.co2e_g += co2e(&s.cluster, *hour, h.energy_j);
            gpu.known = true;
        }
        if gpu.known {
            add(&device_lines(&s.cluster, &s.node, &s.gpu), &gpu);
        }
    }
    let known = measured_gpus(input);
    let team = crate::funnel::teams_of(input);
    for h in holdings {
        let mut own = Sums {
            known: known.contains(h.gpu.as_str()),
            ..Sums::default()
        };
        for (hour, r) in &h.rows {
            own.drawn += r.energy_j;
            own.charged += r.energy_j;
            own.idle += r.idle_energy_j;
            own.co2e_g += co2e(&h.cluster, *hour, r.energy_j);
        }
        let t = team
            .get(&(h.cluster.as_str(), h.tenant.as_str()))
            .copied()
            .unwrap_or(NO_TEAM);
        add(
            &[Line::Team(t.to_owned()), Line::Tenant(h.tenant.clone())],
            &own,
        );
        // On the device lines a holding's joules are charged, not drawn (the GPU drew them).
        let charged = Sums {
            charged: own.charged,
            idle: own.idle,
            ..Sums::default()
        };
        add(&device_lines(&h.cluster, &h.node, &h.gpu), &charged);
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
