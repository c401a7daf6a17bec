//! Held-out replay: is the advice still right on days it did not see? The plan is also made
//! from the window without its most recent part (`[analytics] held_out`, a day by default), and
//! each step of that plan — today's step's twin, the one with the same id — is replayed on the
//! part it did not see: a tenant it reclaims working again, a GPU whose tenants' memory would
//! overflow, tenants contended beyond where they run now (a moved tenant whose demand outgrew
//! its slot). Today's steps carry their twin's result, and their confidence follows it; the
//! fleet's score is the share of those steps, and of the GPUs they free, that held.
//!
//! The fitted part's per-tenant effective-use histogram is rebuilt from its hours' p95s (an
//! hour keeps only that): its range p95, which sizes MIG slices, is the p95 of the hourly
//! p95s — at least as large as the per-sample one, so a twin sizes no smaller than the
//! recorded demand asks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::config::Config;
use crate::findings::GIB;
use crate::holdings::{self, Holding};
use crate::input::Input;
use crate::need::slot_now;
use crate::recommendation::{Proposal, Recommendation, Target};
use crate::replay::{Slot, replay};

pub mod verdict;
use crate::plan::FleetPlan;
pub use verdict::{HeldOut, Score, Verdict};

const HOUR_MS: i64 = 3_600_000;

/// A reclaimed tenant works again when it used more than this share of what it held.
pub const WORKING_AGAIN: f64 = 0.05;

/// The twin plan's results by step id, and the score.
#[derive(Debug, Default)]
pub struct Twin {
    results: BTreeMap<String, HeldOut>,
    pub score: Score,
}

/// The parts of `input` held-out replay reads: the fitted part (the window without its most
/// recent `held_out`), the held-out part, and the score to fill — or, where there is no
/// held-out replay (turned off, too little history), the twin that says why.
pub fn split(input: &Input, cfg: &Config) -> Result<(Input, Input, Score), Twin> {
    let len = cfg.held_out.as_millis() as i64;
    let split = (input.to_ms - len).div_euclid(HOUR_MS) * HOUR_MS;
    let mut score = Score {
        split_ms: split,
        to_ms: input.to_ms,
        ..Score::default()
    };
    if len <= 0 {
        score.note = Some("held-out replay is off ([analytics] held_out = 0)".into());
        return Err(Twin::without(score));
    }
    if split - input.from_ms < len {
        score.note = Some(format!(
            "too little history: a window of {} hours is shorter than twice the held-out part ({} hours)",
            (input.to_ms - input.from_ms) / HOUR_MS,
            len / HOUR_MS
        ));
        return Err(Twin::without(score));
    }
    Ok((
        part(input, input.from_ms, split),
        part(input, split, input.to_ms),
        score,
    ))
}

/// The configuration the twin plan is made under: the same, without a held-out replay of its
/// own.
pub fn twin_config(cfg: &Config) -> Config {
    Config {
        held_out: Duration::ZERO,
        ahead: Duration::ZERO,
        ..cfg.clone()
    }
}

/// Replays the twin plan's steps (`twin`, made from the fitted part) on the held-out part.
pub fn judge(twin: &[Recommendation], unseen: &Input, cfg: &Config, mut score: Score) -> Twin {
    let hs = holdings::holdings(unseen);
    let judge = Judge::new(unseen, &hs, twin, cfg);
    let mut results = BTreeMap::new();
    for r in twin {
        let h = judge.step(r);
        score.steps += 1;
        score.gpus_freed += r.replay.gpus_freed;
        if h.verdict == Verdict::Held {
            score.steps_held += 1;
            score.gpus_held += r.replay.gpus_freed;
        }
        results.insert(r.id.clone(), h);
    }
    Twin { results, score }
}

impl Twin {
    /// No results, and the score that says why.
    pub fn without(score: Score) -> Twin {
        Twin {
            results: BTreeMap::new(),
            score,
        }
    }
}

/// How much a step's confidence keeps after its held-out result: all where its twin held, half
/// where it failed, four fifths where the plan without the held-out part did not make it.
pub fn confidence_factor(v: Verdict) -> f64 {
    match v {
        Verdict::Held => 1.0,
        Verdict::Failed => 0.5,
        Verdict::NoTwin => 0.8,
    }
}

/// Gives each of today's steps its twin's result (and its confidence the result's factor), and
/// the plan the score.
pub fn apply(twin: Twin, recommendations: &mut [Recommendation], plan: &mut FleetPlan) {
    let judged = twin.score.note.is_none();
    for r in recommendations {
        let h = match twin.results.get(&r.id) {
            Some(h) => h.clone(),
            None if judged => HeldOut {
                verdict: Verdict::NoTwin,
                hours: 0,
                memory_overflow_hours: 0.0,
                contention_hours_added: 0.0,
                working_again: false,
                why: "the plan made without the held-out part has no such step: it rests on the most recent hours".into(),
            },
            None => continue,
        };
        r.confidence = (r.confidence * confidence_factor(h.verdict) * 100.0).round() / 100.0;
        r.held_out = Some(h);
    }
    plan.held_out = Some(twin.score);
}

/// What `input` holds of [from, to): its hour rows, pair hours and XIDs in that range, the
/// rest as it is. A tenant series' histogram is rebuilt from its hours' p95s.
pub fn part(input: &Input, from: i64, to: i64) -> Input {
    let within = |t: i64| t >= from && t < to;
    let mut out = Input {
        from_ms: from,
        to_ms: to,
        now_ms: input.now_ms.min(to),
        nodes: input.nodes.clone(),
        gpus: input.gpus.clone(),
        tenants: input.tenants.clone(),
        gpu_hours: Vec::new(),
        tenant_hours: Vec::new(),
        pair_hours: input
            .pair_hours
            .iter()
            .filter(|p| within(p.hour))
            .cloned()
            .collect(),
        health: input.health.clone(),
        orphans: input.orphans.clone(),
        applied: input.applied.clone(),
        waiting: input.waiting.clone(),
    };
    for s in &input.gpu_hours {
        let hours: Vec<_> = s.hours.iter().filter(|h| within(h.0)).cloned().collect();
        if !hours.is_empty() {
            out.gpu_hours.push(model::hour_series::GpuSeries {
                cluster: s.cluster.clone(),
                node: s.node.clone(),
                gpu: s.gpu.clone(),
                hours,
            });
        }
    }
    for s in &input.tenant_hours {
        let hours: Vec<_> = s.hours.iter().filter(|h| within(h.0)).cloned().collect();
        if hours.is_empty() {
            continue;
        }
        let mut eff_hist = model::rollup::Hist::default();
        for (_, h) in &hours {
            if let Some(p) = h.eff_p95 {
                eff_hist.add(p);
            }
        }
        out.tenant_hours.push(model::hour_series::TenantSeries {
            cluster: s.cluster.clone(),
            node: s.node.clone(),
            gpu: s.gpu.clone(),
            tenant: s.tenant.clone(),
            hours,
            eff_hist,
        });
    }
    for h in &mut out.health {
        h.xids.retain(|x| within(x.0));
    }
    out
}

/// Replays the twin plan's steps on the held-out part's holdings (and, with today's holdings,
/// lays out where a step puts its tenants for [`crate::ahead`]).
pub(crate) struct Judge<'a> {
    input: &'a Input,
    cfg: &'a Config,
    /// (tenant, GPU) → its holding in the held-out part.
    held: HashMap<(&'a str, &'a str), &'a Holding>,
    /// GPU → the holdings that stay on it under the twin plan (nobody moves or reclaims them).
    staying: HashMap<&'a str, Vec<&'a Holding>>,
}

impl<'a> Judge<'a> {
    pub(crate) fn new(
        input: &'a Input,
        hs: &'a [Holding],
        recs: &'a [Recommendation],
        cfg: &'a Config,
    ) -> Self {
        let mut leaving: BTreeSet<(&str, &str)> = BTreeSet::new();
        for r in recs {
            for m in r.moves() {
                leaving.insert((&m.tenant, &m.from_gpu));
            }
            if let Proposal::Reclaim { tenant, gpus, .. } = &r.proposal {
                leaving.extend(gpus.iter().map(|g| (tenant.as_str(), g.as_str())));
            }
        }
        let mut held = HashMap::new();
        let mut staying: HashMap<&str, Vec<&Holding>> = HashMap::new();
        for h in hs.iter().filter(|h| h.total.alloc_n > 0) {
            held.insert((h.tenant.as_str(), h.gpu.as_str()), h);
            if !leaving.contains(&(h.tenant.as_str(), h.gpu.as_str())) {
                staying.entry(h.gpu.as_str()).or_default().push(h);
            }
        }
        Judge {
            input,
            cfg,
            held,
            staying,
        }
    }

    fn step(&self, r: &Recommendation) -> HeldOut {
        if let Proposal::Reclaim { tenant, gpus, .. } = &r.proposal {
            return self.reclaim(tenant, gpus);
        }
        let (before, after) = self.placement(r);
        let rp = replay(&before, &after, 0.0, self.cfg.replay_tolerance);
        let added = (rp.contention_hours_after - rp.contention_hours_before).max(0.0);
        let (verdict, why) = if rp.harmful {
            (
                Verdict::Failed,
                rp.reason
                    .clone()
                    .unwrap_or_else(|| "harmful on the held-out hours".into()),
            )
        } else if rp.hours == 0 {
            (
                Verdict::Held,
                "none of its tenants ran in the held-out part".into(),
            )
        } else {
            (
                Verdict::Held,
                format!(
                    "held on {} it did not see: no memory overflow, {} contended tenant-hours more than where they ran",
                    model::figures::count(rp.hours as f64, "hour", "hours"),
                    added
                ),
            )
        };
        HeldOut {
            verdict,
            hours: rp.hours,
            memory_overflow_hours: rp.memory_overflow_hours,
            contention_hours_added: added,
            working_again: false,
            why,
        }
    }

    /// A reclaim fails where its tenant used more than [`WORKING_AGAIN`] of what it held.
    fn reclaim(&self, tenant: &str, gpus: &[String]) -> HeldOut {
        let (mut used, mut allocated, mut hours) = (0.0, 0.0, 0);
        for g in gpus {
            if let Some(h) = self.held.get(&(tenant, g.as_str())) {
                used += h.total.used_gpu_hours();
                allocated += h.total.allocated_gpu_hours();
                hours = hours.max(h.rows.len());
            }
        }
        let again = allocated > 0.0 && used > WORKING_AGAIN * allocated;
        HeldOut {
            verdict: if again {
                Verdict::Failed
            } else {
                Verdict::Held
            },
            hours,
            memory_overflow_hours: 0.0,
            contention_hours_added: 0.0,
            working_again: again,
            why: if again {
                format!(
                    "its tenant worked again in the held-out part: {:.1} of {:.1} GPU-hours used",
                    used, allocated
                )
            } else if hours == 0 {
                "its tenant held nothing in the held-out part".into()
            } else {
                format!(
                    "its tenant stayed idle in the held-out part ({:.2} of {:.1} GPU-hours used)",
                    used, allocated
                )
            },
        }
    }

    /// Where the step's tenants ran in the held-out part (before), and where the twin plan
    /// puts them (after): each MIG target a slot of its own, each other target GPU one slot
    /// with everyone the plan leaves on it.
    pub(crate) fn placement(&self, r: &'a Recommendation) -> (Vec<Slot<'a>>, Vec<Slot<'a>>) {
        let mut before = Vec::new();
        let mut after = Vec::new();
        let mut gpu_slots: BTreeMap<&str, Vec<&Holding>> = BTreeMap::new();
        let mut slot_of = |h: &'a Holding, to: &Target, gpu: &'a crate::input::GpuRef| match to {
            Target::Mig {
                memory_gib,
                compute_slices,
                ..
            } => after.push(Slot {
                compute: f64::from(*compute_slices) / 7.0,
                memory_bytes: memory_gib * GIB,
                holdings: vec![h],
            }),
            _ => gpu_slots.entry(gpu.uuid.as_str()).or_default().push(h),
        };
        let moves: Vec<(&str, &str, &str, i64, &Target)> = match &r.proposal {
            Proposal::RightSize {
                tenant,
                gpu,
                target,
                ..
            } => {
                let at = self.input.gpu(gpu);
                let (node, index) = at.map_or(("", -1), |g| (g.node.as_str(), g.index));
                vec![(tenant.as_str(), gpu.as_str(), node, index, target)]
            }
            _ => r
                .moves()
                .iter()
                .map(|m| {
                    (
                        m.tenant.as_str(),
                        m.from_gpu.as_str(),
                        m.to_node.as_str(),
                        m.to_gpu_index,
                        &m.target,
                    )
                })
                .collect(),
        };
        for (tenant, from, node, index, to) in moves {
            let Some(h) = self.held.get(&(tenant, from)).copied() else {
                continue;
            };
            let Some(g) = self
                .input
                .gpus
                .iter()
                .find(|g| g.cluster == r.cluster && g.node == node && g.index == index)
            else {
                continue;
            };
            before.push(slot_now(h, self.input.gpu(&h.gpu)));
            slot_of(h, to, g);
        }
        for (uuid, mut members) in gpu_slots {
            let stay = self
                .staying
                .get(uuid)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for h in stay {
                before.push(slot_now(h, self.input.gpu(&h.gpu)));
            }
            members.extend(stay.iter().copied());
            let memory = self
                .input
                .gpu(uuid)
                .map_or(f64::MAX, |g| g.memory_total_bytes as f64);
            after.push(Slot {
                compute: 1.0,
                memory_bytes: memory,
                holdings: members,
            });
        }
        (before, after)
    }
}
