//! Recommendations: the plan, its steps, what replay rejected, and applied steps' outcomes.

use super::*;
use model::step_outcome::Verdict;

#[derive(Debug, Clone, PartialEq)]
pub struct RecRow {
    pub id: String,
    pub kind: String,
    pub node: String,
    pub team: String,
    pub gpus_freed: f64,
    pub confidence: f64,
    pub summary: String,
    /// Whether the step has a page: it is in the scheduled plan (a plan made from a picked
    /// range may have steps the scheduled one does not).
    pub linked: bool,
    /// When its tenants' growing memory outgrows it, in words ("outgrown in 2.2 days").
    pub outgrown: Option<String>,
}

/// The fleet plan's totals and its pools, for the recommendations page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanView {
    /// The analysed window the plan was made from, in words.
    pub window: String,
    /// Made on request from a range the reader picked, not by the scheduled analysis.
    pub ranged: bool,
    pub gpus_in_use: usize,
    pub gpus_freed: usize,
    pub nodes_in_use: usize,
    pub nodes_freed: usize,
    pub bound: usize,
    pub efficiency: Option<f64>,
    pub money: f64,
    pub currency: String,
    pub steps: usize,
    pub pools: Vec<PlanPoolRow>,
    /// GPUs the steps empty that have unrecovered hardware errors: not counted as freed.
    pub held_for_repair: usize,
    /// What each per-GPU sharing mechanism would give.
    pub worth: Vec<WorthRow>,
    /// What each mechanism that frees more would ask of the cluster: (mechanism, how many
    /// objects or pods, YAML).
    pub emitted: Vec<(String, usize, String)>,
    /// How the plan made without the window's most recent part held on it, in words.
    pub held_out: Option<String>,
}

/// One per-GPU sharing mechanism's line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorthRow {
    pub mechanism: String,
    pub chooser: String,
    pub gpus_after: usize,
    pub bound: usize,
    pub beyond: i64,
    pub money: f64,
    pub needs: String,
    /// Pools that have it in place (configured).
    pub pools_with: usize,
    /// Pools whose plan uses it (its steps are above).
    pub uses: usize,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanPoolRow {
    pub pool: String,
    pub gpus_in_use: usize,
    pub bound: usize,
    pub gpus_after: usize,
    pub gpus_freed: usize,
    pub nodes: String,
    pub efficiency: Option<f64>,
    pub money: f64,
    /// The per-GPU sharing mechanisms the pool has in place, by name.
    pub has: Vec<String>,
}

fn plan_section(p: PlanView, here: &str) -> impl IntoView {
    let headline = format!(
        "Frees {} of {} in use and empties {} of {}: {} a month.",
        p.gpus_freed,
        model::figures::count(p.gpus_in_use as f64, "GPU", "GPUs"),
        p.nodes_freed,
        model::figures::count(p.nodes_in_use as f64, "node", "nodes"),
        money(p.money, &p.currency)
    );
    let held = (p.held_for_repair > 0).then(|| {
        format!(
            "{} the steps empty {} unrecovered hardware errors: not counted as freed, nor priced, until repaired (see the hardware findings).",
            model::figures::count(p.held_for_repair as f64, "GPU", "GPUs"),
            if p.held_for_repair == 1 { "has" } else { "have" }
        )
    });
    let bound = match p.efficiency {
        Some(e) => format!(
            "The recorded demand needs at least {} under the same headroom rules, so at most {} could be freed: this plan frees {} of that.",
            model::figures::count(p.bound as f64, "GPU", "GPUs"),
            p.gpus_in_use - p.bound.min(p.gpus_in_use),
            pct(Some(e))
        ),
        None => format!(
            "The recorded demand needs {} in use under the same headroom rules: nothing more can be freed.",
            if p.gpus_in_use == 1 {
                "the one GPU".to_owned()
            } else {
                format!("all {} GPUs", p.gpus_in_use)
            }
        ),
    };
    let worth = worth_section(&p, here);
    let currency = p.currency.clone();
    let rows = p
        .pools
        .into_iter()
        .map(|r| {
            view! {
                <tr>
                    <td>{r.pool}{(!r.has.is_empty()).then(|| view! { <br/><small>{format!("in place: {}", r.has.join(", "))}</small> })}</td>
                    <td class="n">{r.gpus_in_use}</td>
                    <td class="n">{r.bound}</td>
                    <td class="n">{r.gpus_after}</td>
                    <td class="n">{r.gpus_freed}</td>
                    <td class="n">{r.nodes}</td>
                    <td class="n">{pct(r.efficiency)}</td>
                    <td class="n">{money(r.money, &currency)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section aria-labelledby="h-plan">
            <h2 id="h-plan">"Fleet plan"</h2>
            <p><b>{headline}</b>" "{format!("{} below, in the order they can be carried out: a step comes after the steps it requires (approving it approves their label changes with it; a reclaim or a move is done by people first). Every freed GPU is counted by one step.", model::figures::count(p.steps as f64, "step", "steps"))}</p>
            <p class="note">{bound}</p>
            <p class="note">{if p.ranged {
                format!("Made on request from the recorded demand of {}, as the scheduled analysis makes its plan from its window. A step links to its page where the scheduled plan has it too; approving is done there.", p.window)
            } else {
                format!("Made by the scheduled analysis of {} from that window's recorded demand; pick a range to make it from other days.", p.window)
            }}</p>
            {held.map(|h| view! { <p class="note warn">{h}</p> })}
            {p.held_out.clone().map(|h| view! { <p class="note">{h}</p> })}
            <div class="scroll"><table>
                <caption>"By pool (one GPU model in one cluster)"</caption>
                <thead><tr>
                    <th scope="col">"Pool"</th><th scope="col" class="n">"GPUs in use"</th><th scope="col" class="n">"Bound"</th>
                    <th scope="col" class="n">"After"</th><th scope="col" class="n key">"Freed"</th><th scope="col" class="n">"Nodes freed"</th>
                    <th scope="col" class="n">"Of the possible"</th><th scope="col" class="n">"Per month"</th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table></div>
            {table_note(here, "pools")}
            {worth}
        </section>
    }
}

/// What enabling each per-GPU sharing mechanism would free beyond the plan, with the claims a
/// pinned plan asks for.
fn worth_section(p: &PlanView, here: &str) -> Option<impl IntoView + use<>> {
    if p.worth.is_empty() {
        return None;
    }
    let currency = p.currency.clone();
    let rows = p
        .worth
        .iter()
        .map(|w| {
            let beyond = match w.beyond {
                n if n > 0 => format!("+{n}"),
                0 => "0".to_owned(),
                n => format!("{n}"),
            };
            view! {
                <tr>
                    <th scope="row">{w.mechanism.clone()}<br/><small>{w.chooser.clone()}</small></th>
                    <td class="n">{w.gpus_after}</td>
                    <td class="n">{w.bound}</td>
                    <td class="n">{beyond}</td>
                    <td class="n">{money(w.money, &currency)}</td>
                    <td>{(w.pools_with > 0).then(|| view! { <b>{format!("In place on {}{}. ", model::figures::count(w.pools_with as f64, "pool", "pools"), if w.uses > 0 { format!("; the plan uses it on {}", w.uses) } else { String::new() })}</b> })}{w.needs.clone()}</td>
                </tr>
            }
        })
        .collect_view();
    let claims = p
        .emitted
        .iter()
        .map(|(what, n, yaml)| {
            view! {
                <details>
                    <summary>{format!("{what}: what it asks of the cluster ({})", model::figures::count(*n as f64, "object", "objects"))}</summary>
                    <pre>{yaml.clone()}</pre>
                </details>
            }
        })
        .collect_view();
    Some(view! {
        <h3 id="h-per-gpu">"Per-GPU sharing: what each frees beyond the plan"</h3>
        <p class="note">"Where a pool has no per-GPU mechanism, the plan above shares GPUs as the device plugin and MIG allow: any tenants of a node may meet on a GPU. A mechanism that chooses each GPU's tenants (pinned by a DRA claim) or lets a scheduler place them within requested memory can pair tenants node-wide sharing cannot. Memory is never shared by time; compute only where, hour by hour, the tenants of one GPU need at most one GPU. Summed over the pools where it frees more than the plan. Where a pool has such a mechanism (configured in [analytics.mechanisms] or seen on its nodes) and a plan under it frees more, the plan above uses it: its per-GPU sharing steps carry the ResourceClaims, or the requests its scheduler places within. Elsewhere the groups below are what enabling a mechanism would free."</p>
        <div class="scroll"><table>
            <caption>"Per mechanism, over the fleet"</caption>
            <thead><tr>
                <th scope="col">"Mechanism"</th><th scope="col" class="n">"GPUs after"</th><th scope="col" class="n">"None fewer than"</th>
                <th scope="col" class="n key">"Beyond the plan"</th><th scope="col" class="n">"Per month"</th><th scope="col">"Needs"</th>
            </tr></thead>
            <tbody>{rows}</tbody>
        </table></div>
        {table_note(here, "mechanisms")}
        {claims}
    })
}

/// A proposal the replay turned down, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedRow {
    pub kind: String,
    pub node: String,
    pub tenants: String,
    pub reason: String,
}

/// The recommendations page: the plan, applied steps' outcomes, the steps (filtered and
/// sorted as asked) and the proposals the replay turned down.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecsPage {
    pub plan: Option<PlanView>,
    pub outcomes: Vec<OutcomeView>,
    pub rows: Vec<RecRow>,
    pub rejected: Vec<RejectedRow>,
    /// Its order, and in `base` its kind and range, which every link keeps.
    pub sort: Sort,
    /// The range the plan is made from (`24h`, `7d`, `30d`; empty for the scheduled plan or a
    /// custom one), and a custom from/to as typed.
    pub range: String,
    pub ranges: Vec<String>,
    pub from: String,
    pub to: String,
    /// The kind of step shown (empty: all) and the kinds there are.
    pub kind: String,
    pub kinds: Vec<String>,
}

/// The recommendations page's path, which its tables' download links extend.
const LIST: &str = "/recommendations";

pub fn recommendations(frame: Frame, v: RecsPage) -> String {
    let here = if v.sort.base.is_empty() {
        LIST.to_owned()
    } else {
        format!("{LIST}?{}", v.sort.base)
    };
    let RecsPage {
        plan,
        outcomes,
        rows,
        rejected: rejected_rows,
        sort,
        range,
        ranges,
        from,
        to,
        kind,
        kinds,
    } = v;
    document(frame, Nav::Recommendations, move || {
        let count = rows.len();
        let freed: f64 = rows.iter().map(|r| r.gpus_freed).sum();
        let rejected = rejected_rows.len();
        // The plan counts every step that frees GPUs; separating interfering tenants frees none.
        let separate = rows.iter().filter(|r| r.kind == "separate").count();
        let what = match (count - separate, separate) {
            (0, 0) => "No recommendations".to_owned(),
            (1, 0) => "1 recommendation, the plan's step".to_owned(),
            (steps, 0) => format!("{steps} recommendations, the plan's steps"),
            (0, s) => format!(
                "{} to separate interfering tenants",
                model::figures::count(s as f64, "recommendation", "recommendations")
            ),
            (steps, s) => format!(
                "{count} recommendations: the plan's {}, and {s} to separate interfering tenants (they free no GPU)",
                model::figures::count(steps as f64, "step", "steps")
            ),
        };
        let turned_down = (!rejected_rows.is_empty()).then(|| {
            let body = rejected_rows
                .iter()
                .map(|r| {
                    view! {
                        <tr>
                            <td>{format::kind(&r.kind)}</td>
                            <td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                            <td>{r.tenants.clone()}</td>
                            <td>{r.reason.clone()}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h2>"Turned down by the replay"</h2>
                <div class="scroll"><table>
                    <caption>"Proposals that were considered and not made: replayed hour by hour against the recorded demand, they would have hurt a tenant."</caption>
                    <thead><tr><th scope="col" class="key">"Kind"</th><th scope="col">"Node"</th><th scope="col">"Tenants"</th><th scope="col">"Why not"</th></tr></thead>
                    <tbody>{body}</tbody>
                </table></div>
                {table_note(&here, "rejected")}
            }
        });
        let body = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr>
                        <td>{if r.linked {
                            view! { <a href=format!("{LIST}/{}", enc(&r.id))>{r.summary}</a> }.into_any()
                        } else {
                            view! { {r.summary}<br/><small>"not in the scheduled plan"</small> }.into_any()
                        }}{r.outgrown.map(|o| view! { <br/><small class="warn">{o}</small> })}</td>
                        <td class="n">{format!("{:.0}", r.gpus_freed)}</td>
                        <td>{format::kind(&r.kind)}</td>
                        <td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                        <td>{r.team}</td>
                        <td class="n">{format!("{:.0} %", r.confidence * 100.0)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Recommendations"</h1>
            <form class="filters" method="get" action=LIST>
                {select("kind", "Kind", &kind, &kinds, format::kind)}
                {range_or_window(&ranges, &range)}
                <label for="from">"From (UTC)"<input id="from" name="from" type="datetime-local" value=from.clone()/></label>
                <label for="to">"To (UTC, empty: now)"<input id="to" name="to" type="datetime-local" value=to.clone()/></label>
                <button type="submit">"Show"</button>
            </form>
            {plan.map(|p| plan_section(p, &here))}
            {(!outcomes.is_empty()).then(|| outcomes_section(outcomes))}
            <div class="scroll"><table>
                <caption>{format!("{what}, each replayed against the recorded demand; {} turned down by the replay.", model::figures::count(rejected as f64, "proposal", "proposals"))}</caption>
                <thead><tr>
                    <th scope="col">"What"</th>{th("GPUs freed", "freed", &sort, true)}
                    {th("Kind", "kind", &sort, false)}{th("Node", "node", &sort, false)}{th("Team", "team", &sort, false)}
                    {th("Confidence", "confidence", &sort, true)}
                </tr></thead>
                <tbody>{if count == 0 { none_row(6, "this plan has no step: nothing to reclaim, share or consolidate that its replay accepts") } else { body.into_any() }}</tbody>
                {(count > 0).then(|| view! {
                    <tfoot><tr><th scope="row">"Total of the steps shown"</th><td class="n">{format!("{freed:.0}")}</td><td></td><td></td><td></td><td></td></tr></tfoot>
                })}
            </table></div>
            {csv_link(LIST, &sort)}
            {turned_down}
        }
        .into_any()
    })
}

/// The recommendations page's tables as CSV, the steps first (the columns the page shows,
/// the step's id beside its summary), then the plan's pools and mechanisms, the proposals
/// turned down and the applied steps' outcomes.
pub fn recommendations_tables(v: &RecsPage) -> Vec<TableCsv> {
    use crate::csv::{field, number};
    let steps = TableCsv::new(
        "steps",
        &[
            "What",
            "Step",
            "GPUs freed",
            "Kind",
            "Node",
            "Team",
            "Confidence",
        ],
        v.rows.iter().map(|r| {
            vec![
                field(&r.summary),
                field(&r.id),
                number(Some(r.gpus_freed)),
                field(&format::kind(&r.kind)),
                field(&r.node),
                field(&r.team),
                number(Some(r.confidence)),
            ]
        }),
    );
    let [pools, mechanisms] = plan_csv(&v.plan.clone().unwrap_or_default());
    let rejected = TableCsv::new(
        "rejected",
        &["Kind", "Node", "Tenants", "Why not"],
        v.rejected.iter().map(|r| {
            vec![
                field(&format::kind(&r.kind)),
                field(&r.node),
                field(&r.tenants),
                field(&r.reason),
            ]
        }),
    );
    let outcomes = TableCsv::new(
        "outcomes",
        &[
            "Node",
            "Step",
            "Step id",
            "Applied",
            "Verdict",
            "GPUs freed measured",
            "GPUs freed predicted",
            "Contended tenant-h measured",
            "Contended tenant-h predicted",
            "Hours since",
        ],
        v.outcomes.iter().map(|o| {
            vec![
                field(&o.node),
                field(&format::kind(&o.kind)),
                field(&o.recommendation),
                field(&o.applied),
                field(o.verdict.words()),
                number(Some(o.gpus_freed.1)),
                number(Some(o.gpus_freed.0)),
                number(Some(o.contention_hours.1)),
                number(Some(o.contention_hours.0)),
                o.hours_after.to_string(),
            ]
        }),
    );
    vec![steps, pools, mechanisms, rejected, outcomes]
}

/// The plan's pools and mechanisms tables as CSV.
fn plan_csv(plan: &PlanView) -> [TableCsv; 2] {
    use crate::csv::{field, number};
    let per_month = format!("Per month ({})", plan.currency);
    let pools = TableCsv::new(
        "pools",
        &[
            "Pool",
            "GPUs in use",
            "Bound",
            "After",
            "Freed",
            "Nodes freed",
            "Of the possible",
            &per_month,
            "In place",
        ],
        plan.pools.iter().map(|r| {
            vec![
                field(&r.pool),
                r.gpus_in_use.to_string(),
                r.bound.to_string(),
                r.gpus_after.to_string(),
                r.gpus_freed.to_string(),
                field(&r.nodes),
                number(r.efficiency),
                number(Some(r.money)),
                field(&r.has.join("; ")),
            ]
        }),
    );
    let mechanisms = TableCsv::new(
        "mechanisms",
        &[
            "Mechanism",
            "Chooser",
            "GPUs after",
            "None fewer than",
            "Beyond the plan",
            &per_month,
            "Pools with it",
            "Pools the plan uses it on",
            "Needs",
        ],
        plan.worth.iter().map(|w| {
            vec![
                field(&w.mechanism),
                field(&w.chooser),
                w.gpus_after.to_string(),
                w.bound.to_string(),
                w.beyond.to_string(),
                number(Some(w.money)),
                w.pools_with.to_string(),
                w.uses.to_string(),
                field(&w.needs),
            ]
        }),
    );
    [pools, mechanisms]
}

/// A step's page's tables as CSV: what it interrupts, its replay, and once applied, its
/// outcome and each moved workload.
pub fn recommendation_tables(v: &RecView) -> Vec<TableCsv> {
    let mut out = vec![
        interrupts_csv(&v.carry),
        super::figures_csv("replay", &v.replay),
    ];
    if let Some((_, figures)) = &v.held_out {
        out.push(super::figures_csv("held-out", figures));
    }
    if let Some(o) = &v.outcome {
        out.extend(outcome_tables(o));
    }
    out
}

/// An applied step's outcome tables as CSV: the totals predicted and measured, and each
/// moved workload.
pub fn outcome_tables(o: &OutcomeView) -> Vec<TableCsv> {
    use crate::csv::{field, number};
    let totals = TableCsv::new(
        "outcome",
        &["Figure", "Predicted", "Measured"],
        [
            ("GPUs freed", o.gpus_freed.0, o.gpus_freed.1),
            (
                "Contended tenant-hours",
                o.contention_hours.0,
                o.contention_hours.1,
            ),
            ("Tenant-hours memory did not fit", 0.0, o.overflow_hours),
        ]
        .into_iter()
        .map(|(name, p, m)| vec![field(name), number(Some(p)), number(Some(m))]),
    );
    let workloads = TableCsv::new(
        "workloads",
        &[
            "Workload",
            "Effective before",
            "Effective after",
            "Peak memory before",
            "Peak memory after",
            "Contended hours after",
        ],
        o.tenants.iter().map(|t| {
            vec![
                field(&t.workload),
                field(&t.effective.0),
                field(&t.effective.1),
                field(&t.memory.0),
                field(&t.memory.1),
                field(&t.contended),
            ]
        }),
    );
    vec![totals, workloads]
}

/// An applied step's outcome check, for the recommendations pages and the step's own page.
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeView {
    pub action: i64,
    pub recommendation: String,
    pub kind: String,
    pub node: String,
    pub summary: String,
    pub applied: String,
    pub hours_after: usize,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    /// (predicted, measured)
    pub gpus_freed: (f64, f64),
    pub contention_hours: (f64, f64),
    pub overflow_hours: f64,
    pub tenants: Vec<OutcomeTenantRow>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutcomeTenantRow {
    pub workload: String,
    pub effective: (String, String),
    pub memory: (String, String),
    pub contended: String,
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Worse => "sev-critical",
        Verdict::Pending => "sev-info",
        Verdict::AsPredicted | Verdict::Better => "",
    }
}

/// The applied steps' verdicts, one row each.
fn outcomes_section(rows: Vec<OutcomeView>) -> impl IntoView {
    let count = rows.len();
    let worse = rows.iter().filter(|o| o.verdict == Verdict::Worse).count();
    let body = rows
        .into_iter()
        .map(|o| {
            view! {
                <tr>
                    <td><a href=format!("/nodes/{}", enc(&o.node))>{o.node.clone()}</a></td>
                    <td><a href=format!("/recommendations/{}", enc(&o.recommendation))>{format::kind(&o.kind)}</a></td>
                    <td>{o.applied.clone()}</td>
                    <td class=verdict_class(o.verdict)>{o.verdict.words()}</td>
                    <td class="n">{format!("{:.0} / {:.0}", o.gpus_freed.1, o.gpus_freed.0)}</td>
                    <td class="n">{format!("{:.0} / {:.0}", o.contention_hours.1, o.contention_hours.0)}</td>
                    <td class="n">{o.hours_after}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section aria-labelledby="h-outcomes">
            <h2 id="h-outcomes">"Applied steps: measured against the prediction"</h2>
            <p class="note">{format!("{} applied through label actions in the analysed window; {worse} turned out worse than replay predicted.", model::figures::count(count as f64, "step", "steps"))}</p>
            <div class="scroll"><table>
                <thead><tr>
                    <th scope="col">"Node"</th><th scope="col">"Step"</th><th scope="col">"Applied"</th><th scope="col" class="key">"Verdict"</th>
                    <th scope="col" class="n">"GPUs freed (measured / predicted)"</th><th scope="col" class="n">"Contended tenant-h (measured / predicted)"</th>
                    <th scope="col" class="n">"Hours since"</th>
                </tr></thead>
                <tbody>{body}</tbody>
            </table></div>
            {table_note(LIST, "outcomes")}
        </section>
    }
}

/// One applied step's check in full: verdict and why, totals, each moved workload.
fn outcome_detail(o: OutcomeView) -> impl IntoView {
    let here = format!("{LIST}/{}", enc(&o.recommendation));
    let reasons = o
        .reasons
        .iter()
        .map(|r| view! { <li>{r.clone()}</li> })
        .collect_view();
    let tenants = o
        .tenants
        .into_iter()
        .map(|t| {
            view! {
                <tr>
                    <td>{t.workload}</td>
                    <td class="n">{t.effective.0}</td><td class="n">{t.effective.1}</td>
                    <td class="n">{t.memory.0}</td><td class="n">{t.memory.1}</td>
                    <td class="n">{t.contended}</td>
                </tr>
            }
        })
        .collect_view();
    let rollback = (o.verdict == Verdict::Worse).then(|| {
        view! {
            <p>"The collector offers the way back as a planned label action (the label's previous value), for an operator to approve: "
                <a href=format!("/api/v1/label-actions?node={}&state=planned", enc(&o.node))>"planned actions on "{o.node.clone()}</a>"."</p>
        }
    });
    let pending = (o.verdict == Verdict::Pending).then(|| {
        view! { <p class="note">{format!("{} recorded since the change; a verdict needs 6.", model::figures::count(o.hours_after as f64, "hour", "hours"))}</p> }
    });
    view! {
        <section aria-labelledby="h-outcome">
            <h2 id="h-outcome">"Outcome since it was applied"</h2>
            <p class="meta">{format!("label action {} · applied {} · ", o.action, o.applied)}<b class=verdict_class(o.verdict)>{o.verdict.words()}</b></p>
            {pending}
            <ul>{reasons}</ul>
            {rollback}
            <div class="scroll"><table>
                <thead><tr><th scope="col"></th><th scope="col" class="n">"Predicted"</th><th scope="col" class="n key">"Measured"</th></tr></thead>
                <tbody>
                    <tr><th scope="row">"GPUs freed"</th><td class="n">{format!("{:.0}", o.gpus_freed.0)}</td><td class="n">{format!("{:.0}", o.gpus_freed.1)}</td></tr>
                    <tr><th scope="row">"Contended tenant-hours"</th><td class="n">{format!("{:.0}", o.contention_hours.0)}</td><td class="n">{format!("{:.0}", o.contention_hours.1)}</td></tr>
                    <tr><th scope="row">"Tenant-hours memory did not fit"</th><td class="n">"0"</td><td class="n">{format!("{:.0}", o.overflow_hours)}</td></tr>
                </tbody>
            </table></div>
            {table_note(&here, "outcome")}
            <div class="scroll"><table>
                <caption>"Each moved workload, followed across pod re-creation"</caption>
                <thead><tr>
                    <th scope="col">"Workload"</th><th scope="col" class="n">"Effective before"</th><th scope="col" class="n key">"after"</th>
                    <th scope="col" class="n">"Peak memory before"</th><th scope="col" class="n">"after"</th><th scope="col" class="n">"Contended hours after"</th>
                </tr></thead>
                <tbody>{tenants}</tbody>
            </table></div>
            {table_note(&here, "workloads")}
        </section>
    }
}

/// The page of a step that was applied and is no longer proposed: what it was and its outcome.
pub fn applied_step(frame: Frame, o: OutcomeView) -> String {
    document(frame, Nav::Recommendations, move || {
        view! {
            <h1>{format::kind_heading(&o.kind, "step (applied)")}</h1>
            <p class="meta">"node "<a href=format!("/nodes/{}", enc(&o.node))>{o.node.clone()}</a></p>
            <p>{o.summary.clone()}</p>
            {outcome_detail(o)}
        }
        .into_any()
    })
}

/// The label change a recommendation would make, and whether this user may approve it.
#[derive(Debug, Clone, PartialEq)]
pub struct Actuation {
    pub mode: String,
    pub label: Option<String>,
    pub value: Option<String>,
    /// The planned action waiting for approval, if any.
    pub action_id: Option<i64>,
    /// Its state, in words ("planned", "rolled back").
    pub action_state: Option<String>,
    /// Whether it is planned and waits for an operator's approval.
    pub awaiting: bool,
    /// Set when the signed-in operator may approve: the form's CSRF token.
    pub csrf: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RecView {
    pub id: String,
    pub kind: String,
    pub node: String,
    pub summary: String,
    pub confidence: f64,
    /// How the confidence is made, with this step's numbers.
    pub confidence_note: String,
    /// What the GPUs it frees cost a month, e.g. "≈ 1,095 USD a month".
    pub money_per_month: Option<String>,
    pub tenants: Vec<String>,
    pub replay: Vec<(String, String)>,
    /// Its twin's result on the hours the plan it came from did not see, in words and as
    /// figures (none without one).
    pub held_out: Option<(String, Vec<(String, String)>)>,
    /// The days ahead: whether its tenants' memory trends outgrow it, and why in words.
    pub ahead: Option<(bool, String)>,
    /// How to carry out a step that changes no node label and creates objects (claims or a
    /// scheduler's requests), where it does.
    pub apply_note: Option<String>,
    /// The configuration the step generates, (title, text): a mig-parted config or the device
    /// plugin's; none for a reclaim or a separation.
    pub config: Option<(String, String)>,
    /// A step without a configuration: its proposal as `/api/v1/recommendations` serves it.
    pub proposal: Option<String>,
    pub findings: Vec<(String, String)>,
    /// Steps to carry out first, in order: (id, summary).
    pub requires: Vec<(String, String)>,
    pub actuation: Actuation,
    /// What carrying it out interrupts, and how it is carried out.
    pub carry: CarryOut,
    /// Set once the step was applied and checked.
    pub outcome: Option<OutcomeView>,
}

pub fn recommendation(frame: Frame, v: RecView) -> String {
    document(frame, Nav::Recommendations, move || {
        let here = format!("{LIST}/{}", enc(&v.id));
        let replay = super::figures_table(&v.replay);
        let config = v.config.clone().map(|(name, text)| {
            view! { <h2>"Generated configuration"</h2><h3>{name}</h3><pre>{text}</pre> }
        });
        let proposal = v.proposal.clone().map(|text| {
            view! {
                <h2>"Proposal"</h2>
                <p class="note">"As " <a href="/api/v1/recommendations">"/api/v1/recommendations"</a> " gives it, for automation."</p>
                <pre>{text}</pre>
            }
        });
        let findings = v
            .findings
            .iter()
            .map(|(id, s)| view! { <li><a href=format!("/findings/{}", enc(id))>{s.clone()}</a></li> })
            .collect_view();
        let tenants = v
            .tenants
            .iter()
            .map(|t| view! { <li>{t.clone()}</li> })
            .collect_view();
        let requires = (!v.requires.is_empty()).then(|| {
            let steps = v
                .requires
                .iter()
                .map(|(id, s)| view! { <li><a href=format!("/recommendations/{}", enc(id))>{s.clone()}</a></li> })
                .collect_view();
            view! {
                <h2>"Carry out first"</h2>
                <p class="note">"This step moves tenants onto GPUs that these steps empty. Approving it approves their planned label changes with it, and they run first; a reclaim or a move has to be done by people before this step can be approved."</p>
                <ol>{steps}</ol>
            }
        });
        let a = v.actuation.clone();
        let act = match (&a.label, &a.value) {
            (Some(label), Some(value)) => {
                let what = format!("{label}={value} on {}", v.node);
                let control = match (a.action_id, a.csrf.clone()) {
                    (Some(id), Some(csrf)) if a.awaiting => view! {
                        <form method="post" action=format!("/recommendations/{}/approve", enc(&v.id))>
                            <input type="hidden" name="csrf" value=csrf/>
                            <input type="hidden" name="action" value=id.to_string()/>
                            <label><input type="checkbox" name="override_pods" value="true"/>" go ahead although GPU pods remain after the drain wait"</label>
                            <p><button type="submit">"Approve and apply"</button></p>
                        </form>
                    }
                    .into_any(),
                    (Some(id), _) => view! {
                        <p>{format!("Label action {id}: {}.", a.action_state.clone().unwrap_or_default())}
                            " "{(a.csrf.is_none() && a.awaiting).then(|| view! { <a href="/login">"Sign in as an operator to approve it."</a> })}
                            " "<a href=format!("/api/v1/label-actions?node={}", enc(&v.node))>"Audit trail"</a></p>
                    }
                    .into_any(),
                    (None, _) => view! { <p class="note">{format!("Label mode is {}: changes are planned only in apply-with-approval.", a.mode)}</p> }.into_any(),
                };
                view! { <p>"Applying it sets "<code>{what}</code>" through the guarded workflow (cordon, wait for GPU pods, label, watch, uncordon)."</p>{control} }.into_any()
            }
            _ if v.kind == "reclaim" => view! { <p class="note">"This recommendation changes no node label: ask the tenant's owners to release the GPU, or let the "<a href="/reclaim">"reclaim loop"</a>" take such holdings up under a [reclaim] policy (docs/reclaim.md)."</p> }.into_any(),
            _ if v.apply_note.is_some() => view! { <p class="note">{v.apply_note.clone()}</p> }.into_any(),
            _ => view! { <p class="note">"This recommendation changes no node label; act on it with the tenants."</p> }.into_any(),
        };
        view! {
            <h1>{format::kind_heading(&v.kind, "recommendation")}</h1>
            <p class="meta">"node "<a href=format!("/nodes/{}", enc(&v.node))>{v.node.clone()}</a>{format!(" · confidence {:.0} %", v.confidence * 100.0)}{v.money_per_month.clone().map(|m| format!(" · saves {m}"))}</p>
            <p>{v.summary.clone()}</p>
            <p class="note">{v.confidence_note.clone()}</p>
            <h2>"Tenants"</h2><ul>{tenants}</ul>
            {requires}
            {interrupts(&v.carry, &here)}
            <h2>"Replay against the recorded demand"</h2>
            {replay}
            {table_note(&here, "replay")}
            {v.held_out.clone().map(|(why, figures)| view! {
                <h2>"Held out: the hours it did not see"</h2>
                <p class="note">"The plan is also made without the window's most recent hours; this step's twin in that plan, replayed on those hours: "{why}"."</p>
                {super::figures_table(&figures)}
                {table_note(&here, "held-out")}
            })}
            {v.ahead.clone().map(|(outgrown, why)| view! {
                <h2>"The days ahead, at its tenants' memory trends"</h2>
                <p class=if outgrown { "warn" } else { "note" }>{format!("{why}.")}</p>
                {outgrown.then(|| view! { <p class="note">"The step stays in the plan, flagged: its confidence is halved. Carry it out with room for the growth (or after the growing tenant's restart), or wait for the next analysis."</p> })}
            })}
            <h2 id="apply">"Apply"</h2>
            {act}
            {by_hand(&v.carry)}
            {v.outcome.clone().map(outcome_detail)}
            {config}
            {proposal}
            <h2>"Findings it answers"</h2><ul>{findings}</ul>
        }
        .into_any()
    })
}
