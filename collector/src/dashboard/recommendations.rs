//! `/recommendations`, one recommendation, and its approval by a signed-in operator.

use super::page::*;

/// The recommendations list's query: its sort, and the kind of step to show.
#[derive(Debug, Default, Deserialize)]
pub struct RecQuery {
    pub sort: Option<String>,
    pub dir: Option<String>,
    pub kind: Option<String>,
    /// The range the plan is made from: `24h`, `7d`, `30d` back from now, or a custom from/to
    /// (as on the tenants' page); absent: the scheduled analysis' plan.
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    /// `csv`: a table as a download, with the same rows and columns; `table` which (the
    /// steps when none is named).
    pub format: Option<String>,
    pub table: Option<String>,
}

pub async fn recommendations(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(rq): Query<RecQuery>,
) -> PageOrCsv {
    let asked = (rq.format.as_deref(), rq.table.as_deref());
    let q = SortQuery {
        // "order" is the plan's own order, as unsorted (the download link names it).
        sort: rq.sort.clone().filter(|s| s != "order"),
        dir: rq.dir.clone(),
    };
    let kinds: Vec<&str> = analytics::RecKind::ALL.iter().map(|k| k.as_str()).collect();
    let (kind, notice) = match checked_filter("kind", rq.kind.as_deref(), &kinds) {
        Ok(k) => (k, None),
        Err(n) => (None, Some(n)),
    };
    let newest = analysis(&state).await?;
    let mut notices: Vec<String> = notice.into_iter().collect();
    let (a, carry) = plan_of(&state, &rq, &newest, &mut notices).await?;
    // A step has a page where the scheduled plan has it.
    let scheduled: std::collections::HashSet<&str> = newest
        .iter()
        .flat_map(|n| n.recommendations.iter().map(|r| r.id.as_str()))
        .collect();
    let has_page = |id: &str| scheduled.contains(id);
    let (mut rows, rejected) =
        match &a {
            Some(a) => (
                a.recommendations
                    .iter()
                    .map(|r| pages::RecRow {
                        id: r.id.clone(),
                        kind: r.kind.as_str().into(),
                        node: r.node.clone(),
                        team: r.team.clone().unwrap_or_default(),
                        gpus_freed: r.replay.gpus_freed,
                        confidence: r.confidence,
                        summary: r.summary.clone(),
                        linked: has_page(&r.id),
                        outgrown: r.ahead.as_ref().and_then(|x| x.outgrown_in_days).map(|d| {
                            format!("outgrown in {d:.1} days at its tenants' memory growth")
                        }),
                    })
                    .collect::<Vec<_>>(),
                a.rejected
                    .iter()
                    .map(|r| pages::RejectedRow {
                        kind: r.kind.as_str().into(),
                        node: r.node.clone(),
                        tenants: r
                            .tenants
                            .iter()
                            .map(|k| name_of(a, k))
                            .collect::<Vec<_>>()
                            .join(", "),
                        reason: names_in(a, &r.reason),
                    })
                    .collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
    rows.retain(|r| kind.is_none_or(|k| r.kind == k));
    // Unsorted, the rows keep the analysis' order: the plan's steps in the order they can be
    // carried out, then the advice beside it (sorted by GPUs freed, a MIG layout
    // came before the reclaims it needs).
    if q.sort.is_some() {
        sorted(&mut rows, &q, "order", |r, k| match k {
            "kind" => text(&r.kind),
            "node" => text(&r.node),
            "team" => text(&r.team),
            "confidence" => num(r.confidence),
            _ => num(r.gpus_freed),
        });
    }
    let mut plan = a.as_ref().map(|a| plan_view(a));
    if let Some(p) = plan.as_mut() {
        p.ranged = carry.is_some();
    }
    // Applied steps are the scheduled analysis' own, whatever the plan's range.
    let outcomes = newest
        .as_ref()
        .map(|a| a.outcomes.iter().map(outcome_view).collect())
        .unwrap_or_default();
    let mut page = frame(&state, &caller, "Recommendations");
    page.notice = (!notices.is_empty()).then(|| notices.join(" "));
    let (range, from, to) = carry.unwrap_or_default();
    let base = query_string(&[
        ("kind", kind.unwrap_or("")),
        ("range", &range),
        ("from", &from),
        ("to", &to),
    ]);
    let v = pages::RecsPage {
        plan,
        outcomes,
        rows,
        rejected,
        sort: sort_state(base, &q, "order"),
        range,
        ranges: ranges(),
        from,
        to,
        kind: kind.unwrap_or_default().to_owned(),
        kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
    };
    page_or_table(
        asked,
        "recommendations",
        v,
        pages::recommendations_tables,
        |v| pages::recommendations(page, v),
    )
}

/// The analysis whose plan the page shows: the one made from the picked range (and what its
/// links carry), else the scheduled one; a range that cannot be read adds its notice.
async fn plan_of(
    state: &DashboardState,
    rq: &RecQuery,
    newest: &Option<Arc<Analysis>>,
    notices: &mut Vec<String>,
) -> Result<(Option<Arc<Analysis>>, Option<(String, String, String)>), PageError> {
    Ok(match picked_range(state, &rq.range, &rq.from, &rq.to) {
        Ok(Some((from, to, carry))) => {
            let made = state
                .ranged
                .analysis(&state.shared.store, &state.analytics.thresholds, from, to)
                .await
                .map_err(|e| {
                    PageError(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("The plan over the range could not be made: {e}"),
                    )
                })?;
            (Some(made), Some(carry))
        }
        Ok(None) => (newest.clone(), None),
        Err(n) => {
            notices.push(n.replace("the analysed window", "the scheduled plan"));
            (newest.clone(), None)
        }
    })
}

/// The fleet plan as the page shows it.
fn plan_view(a: &analytics::Analysis) -> pages::PlanView {
    let p = &a.plan;
    pages::PlanView {
        window: window(a),
        ranged: false,
        worth: p.worth.iter().map(worth_row).collect(),
        emitted: emitted(a),
        held_out: p
            .held_out
            .as_ref()
            .map(analytics::held_out::Score::sentence),
        gpus_in_use: p.gpus_in_use,
        gpus_freed: p.gpus_freed,
        nodes_in_use: p.nodes_in_use,
        nodes_freed: p.nodes_freed,
        bound: p.bound_gpus,
        efficiency: p.efficiency,
        money: p.money_per_month,
        currency: p.currency.clone(),
        steps: p.steps.len(),
        held_for_repair: p.held_for_repair,
        pools: p
            .pools
            .iter()
            .map(|x| pages::PlanPoolRow {
                pool: format!("{} · {}", x.cluster, x.model),
                gpus_in_use: x.gpus_in_use,
                bound: x.bound_gpus,
                gpus_after: x.gpus_after,
                gpus_freed: x.gpus_freed,
                nodes: format!("{} of {}", x.nodes_freed, x.nodes_in_use),
                efficiency: x.efficiency,
                money: x.money_per_month,
                has: x
                    .has
                    .iter()
                    .map(|m| {
                        let name = if x.uses == Some(*m) {
                            format!("{} — the plan uses it", m.declared().name)
                        } else {
                            m.declared().name.to_owned()
                        };
                        match x.seen.iter().find(|(s, _)| s == m) {
                            Some((_, n)) => format!(
                                "{name} (seen on {})",
                                model::figures::count(*n as f64, "node", "nodes")
                            ),
                            None => format!("{name} (configured)"),
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// One per-GPU mechanism's line, from its declaration.
fn worth_row(w: &analytics::plan::pergpu::Worth) -> pages::WorthRow {
    use analytics::mechanism::Chooser;
    let d = w.mechanism.declared();
    pages::WorthRow {
        mechanism: d.name.to_owned(),
        chooser: match d.chooser {
            Chooser::PlanPerGpu if d.one_namespace => {
                "the plan pins a group of one namespace per GPU"
            }
            Chooser::PlanPerGpu => "the plan pins each GPU's group",
            Chooser::SchedulerWithinLimits => "a scheduler places within the memory requests",
            Chooser::NodeWide => "any tenants of a node may meet",
            Chooser::Partitions => "fixed partitions",
        }
        .to_owned(),
        gpus_after: w.gpus_after,
        bound: w.bound_gpus,
        beyond: w.beyond_plan,
        money: w.money_per_month,
        needs: d.needs.to_owned(),
        pools_with: w.pools_with,
        uses: w.uses,
    }
}

/// What each per-GPU mechanism that frees more than the plan would ask of the cluster, over
/// every pool where it does: (what, how many objects or pods, YAML).
fn emitted(a: &analytics::Analysis) -> Vec<(String, usize, String)> {
    use analytics::mechanism::Mechanism;
    use analytics::plan::claims;
    let name = |k: &str| {
        a.tenant_names
            .get(k)
            .cloned()
            .unwrap_or_else(|| k.to_owned())
    };
    let mut out = Vec::new();
    for m in Mechanism::PER_GPU {
        let worth = || {
            a.plan
                .pools
                .iter()
                .flat_map(|p| &p.worth)
                .filter(move |w| w.mechanism == m && w.beyond_plan > 0)
        };
        let pinned: Vec<claims::Claim> = worth()
            .flat_map(|w| &w.groups)
            .flat_map(|g| claims::resource_claims(m, g, &name))
            .collect();
        let (mut n, mut yaml) = (pinned.len(), claims::yaml(&pinned));
        for w in worth() {
            let (k, text) = claims::scheduled_requests(m, &w.requests, &name);
            n += k;
            yaml.push_str(&text);
        }
        if n > 0 {
            out.push((m.declared().name.to_owned(), n, yaml));
        }
    }
    out
}

#[derive(Debug, Default, Deserialize)]
pub struct NoticeQuery {
    pub approved: Option<i64>,
    pub error: Option<String>,
    /// `csv` with `table`: one of the page's tables as a download.
    pub format: Option<String>,
    pub table: Option<String>,
}

pub async fn recommendation(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(nq): Query<NoticeQuery>,
) -> PageOrCsv {
    let asked = (nq.format.as_deref(), nq.table.as_deref());
    let Some(a) = analysis(&state).await? else {
        return Err(not_found("no analysis yet".into()));
    };
    let outcome = a.outcomes.iter().find(|o| o.recommendation == id);
    let Some(r) = a.recommendations.iter().find(|r| r.id == id) else {
        // A step applied since: its page is its outcome.
        if let Some(o) = outcome {
            let f = frame(
                &state,
                &caller,
                web::format::kind_heading(&o.kind, "step (applied)"),
            );
            return page_or_table(asked, "step", outcome_view(o), pages::outcome_tables, |o| {
                pages::applied_step(f, o)
            });
        }
        return Err(not_found(format!(
            "no recommendation {id:?} in the newest analysis"
        )));
    };
    let (plan, action) = step_action(&state, &a, r).await?;
    let (action_id, action_state) = action.map_or((None, None), |(id, st)| (Some(id), Some(st)));
    let awaiting = action_state == Some(store::label_actions::ActionState::Planned);
    // Only operators see the form; the middleware checks the role again on POST.
    let csrf = caller
        .is_operator()
        .then(|| state.access.csrf(&caller))
        .flatten();
    let actuation = pages::Actuation {
        mode: state.labels.mode.as_str().into(),
        label: plan.as_ref().map(|p| p.label.clone()),
        value: plan.as_ref().map(|p| p.value.clone()),
        action_id,
        action_state: action_state.map(|s| s.as_str().replace('_', " ")),
        awaiting,
        csrf,
    };
    let mut v = rec_view(&a, r, actuation);
    let tenants = state.shared.store.tenants().await?;
    v.carry = super::carry_out::carry_out(&state, &a, r, plan.as_ref(), &team_map(&tenants));
    v.outcome = outcome.map(outcome_view);
    let mut f = frame(
        &state,
        &caller,
        web::format::kind_heading(r.kind.as_str(), "recommendation"),
    );
    f.notice = match (nq.approved, nq.error) {
        (Some(id), _) => Some(format!(
            "Label action {id} approved: the collector runs it within {}.",
            model::time::format_duration(state.labels.every)
        )),
        (_, Some(e)) => Some(e),
        _ => None,
    };
    page_or_table(asked, "step", v, pages::recommendation_tables, |v| {
        pages::recommendation(f, v)
    })
}

/// A recommendation's page: what it proposes, the replay of recorded demand, and how to
/// apply it.
fn rec_view(
    a: &Analysis,
    r: &analytics::Recommendation,
    actuation: pages::Actuation,
) -> pages::RecView {
    let rp = &r.replay;
    let config = config(&r.proposal);
    // A step without a configuration shows its proposal as the API serves it.
    let proposal = config
        .is_none()
        .then(|| serde_json::to_string_pretty(&r.proposal).unwrap_or_default());
    pages::RecView {
        id: r.id.clone(),
        kind: r.kind.as_str().into(),
        node: r.node.clone(),
        summary: r.summary.clone(),
        confidence: r.confidence,
        confidence_note: format!(
            "Confidence {:.0} % = how much history the moved tenants have (their recorded hours against what the analysis wants) × how exact the signal is (1.0 with DCGM SM activity, 0.9 mixed, 0.8 with NVML utilization alone, which overstates use), weighted by the GPU-hours each holds, × how its twin did on the hours it did not see (1 held, 0.5 failed, 0.8 without a twin) × 0.5 where its tenants' memory trends outgrow it within a week.",
            r.confidence * 100.0
        ),
        money_per_month: step_money(a, r),
        tenants: if r.moves().is_empty() {
            r.tenants.iter().map(|k| name_of(a, k)).collect()
        } else {
            r.moves()
                .iter()
                .map(|m| {
                    format!(
                        "{} → {} on GPU {} of {} (now on {})",
                        name_of(a, &m.tenant),
                        m.target.describe(),
                        m.to_gpu_index,
                        if m.to_node.is_empty() {
                            &r.node
                        } else {
                            &m.to_node
                        },
                        if m.from_node.is_empty() {
                            m.from_gpu.clone()
                        } else {
                            format!("GPU {} of {}", m.from_gpu_index, m.from_node)
                        }
                    )
                })
                .collect()
        },
        replay: vec![
            ("hours of demand replayed".into(), rp.hours.to_string()),
            (
                "contended tenant-hours today".into(),
                format::num(rp.contention_hours_before),
            ),
            (
                "contended tenant-hours after".into(),
                format::num(rp.contention_hours_after),
            ),
            (
                "memory overflow tenant-hours".into(),
                format::num(rp.memory_overflow_hours),
            ),
            (
                "memory overflow risk".into(),
                format!("{:.1} %", rp.memory_overflow_risk * 100.0),
            ),
            ("GPUs freed".into(), format!("{:.0}", rp.gpus_freed)),
            (
                "verdict".into(),
                if rp.harmful {
                    "harmful".into()
                } else {
                    "no predicted harm".into()
                },
            ),
        ],
        held_out: r.held_out.as_ref().map(|h| (h.why.clone(), h.figures())),
        ahead: r
            .ahead
            .as_ref()
            .map(|x| (x.outgrown_in_days.is_some(), names_in(a, &x.why))),
        apply_note: apply_note(&r.proposal),
        config,
        proposal,
        findings: r
            .findings
            .iter()
            .filter_map(|fid| a.findings.iter().find(|f| &f.id == fid))
            .map(|f| (f.id.clone(), f.summary.clone()))
            .collect(),
        requires: r
            .requires
            .iter()
            .map(|id| {
                let summary = a
                    .recommendations
                    .iter()
                    .find(|x| &x.id == id)
                    .map_or_else(|| id.clone(), |x| names_in(a, &x.summary));
                (id.clone(), summary)
            })
            .collect(),
        actuation,
        carry: pages::CarryOut::default(),
        outcome: None,
    }
}

/// An applied step's outcome check as the pages show it.
pub(crate) fn outcome_view(o: &analytics::Outcome) -> pages::OutcomeView {
    let gib = |b: Option<i64>| {
        b.map_or("–".into(), |b| {
            format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
        })
    };
    let gpu = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.2} GPU"));
    pages::OutcomeView {
        action: o.action,
        recommendation: o.recommendation.clone(),
        kind: o.kind.clone(),
        node: o.node.clone(),
        summary: o.summary.clone(),
        applied: format::time(o.applied_ms),
        hours_after: o.hours_after,
        verdict: o.verdict,
        reasons: o.reasons.clone(),
        gpus_freed: (o.predicted.gpus_freed, o.measured.gpus_freed),
        contention_hours: (o.predicted.contention_hours, o.measured.contention_hours),
        overflow_hours: o.measured.memory_overflow_hours,
        tenants: o
            .tenants
            .iter()
            .map(|t| pages::OutcomeTenantRow {
                workload: t.workload.clone(),
                effective: (gpu(t.effective_before), gpu(t.effective_after)),
                memory: (gib(t.memory_before_bytes), gib(t.memory_after_bytes)),
                contended: format!("{} of {}", t.contended_hours_after, t.hours_after),
            })
            .collect(),
    }
}

/// How to carry out a step that creates objects instead of changing a node label.
fn apply_note(proposal: &Proposal) -> Option<String> {
    use analytics::mechanism::{Chooser, Mechanism};
    let Proposal::PerGpu { mechanism, .. } = proposal else {
        return None;
    };
    Some(match (mechanism, mechanism.declared().chooser) {
        (Mechanism::DraDynamicMig, _) => "This recommendation changes no node label and drains no node. Create the ResourceClaims below, then recreate each moved pod with the change its comment gives (each restarts once): the DRA driver carves each MIG instance on the GPU its selector names when the claim is allocated.".into(),
        (m, Chooser::SchedulerWithinLimits) => format!(
            "This recommendation changes no node label. Merge each pod's requests below into its pod template and let {} place the pods (each restarts once): any placement the requests allow holds, and packed as shown they free what the step says.",
            m.declared().name
        ),
        _ => "This recommendation changes no node label. Create the ResourceClaims below, then recreate each tenant's pod with the change its comment gives (each pod restarts once); the DRA driver allocates each claim on the GPU its selector names, which no pod may still hold through the device plugin.".into(),
    })
}

/// The configuration a recommendation would apply, as an operator would paste it.
fn config(proposal: &Proposal) -> Option<(String, String)> {
    match proposal {
        Proposal::MigLayout {
            config_name,
            mig_parted_yaml,
            ..
        } => Some((
            format!("mig-parted config {config_name}"),
            mig_parted_yaml.clone(),
        )),
        Proposal::Sharing {
            device_plugin_yaml, ..
        } => Some((
            "NVIDIA device plugin config".into(),
            device_plugin_yaml.clone(),
        )),
        Proposal::PerGpu {
            mechanism,
            objects_yaml,
            ..
        } => Some((
            format!(
                "{}: {} (each with the pod-spec change its pods need)",
                mechanism.declared().name,
                mechanism.declared().emits
            ),
            objects_yaml.clone(),
        )),
        _ => None,
    }
}

/// The label change a step plans on its node, and the label action (id, state) recorded for
/// it, if any: what the step's page offers to approve, and the only action its form may.
async fn step_action(
    state: &DashboardState,
    a: &Analysis,
    r: &analytics::Recommendation,
) -> Result<
    (
        Option<crate::labels::Plan>,
        Option<(i64, store::label_actions::ActionState)>,
    ),
    PageError,
> {
    let plan = crate::labels::plans(a, &r.cluster, state.labels.custom_layouts.as_ref())
        .remove(&r.node)
        .filter(|p| match &r.proposal {
            Proposal::MigLayout { config_name, .. } => p.value == *config_name,
            Proposal::Sharing { .. } => p.label == model::labels::OPERATOR_DEVICE_PLUGIN_CONFIG,
            _ => false,
        });
    let action = match &plan {
        Some(p) => state
            .shared
            .store
            .label_actions(&store::label_actions::ActionFilter {
                node: Some(&r.node),
                ..store::label_actions::ActionFilter::newest(20)
            })
            .await?
            .into_iter()
            .find(|x| x.label == p.label && x.value == p.value)
            .map(|x| (x.id, x.state)),
        None => None,
    };
    Ok((plan, action))
}

#[derive(Debug, Deserialize)]
pub struct ApproveForm {
    pub csrf: String,
    pub action: i64,
    #[serde(default)]
    pub override_pods: Option<String>,
}

pub async fn approve(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(id): Path<String>,
    Form(form): Form<ApproveForm>,
) -> Response {
    let back = format!("/recommendations/{}", enc(&id));
    // The access table lets only operators this far; the form must carry their CSRF token.
    let who = match operator_of_form(&state, &caller, &form.csrf, "approve changes") {
        Ok(who) => who,
        Err(page) => return *page,
    };
    let who = who.as_str();
    // The form approves the action of the step in its URL, and no other (a step's
    // form with another step's action approved that one; a made-up id was audited approved).
    let belongs = match analysis(&state).await {
        Ok(Some(a)) => match a.recommendations.iter().find(|r| r.id == id) {
            Some(r) => step_action(&state, &a, r)
                .await
                .ok()
                .and_then(|(_, action)| action)
                .is_some_and(|(action, _)| action == form.action),
            None => false,
        },
        _ => false,
    };
    if !belongs {
        collector_shared::access::audit::refused(
            "the approve form's action is not this step's",
            Some(who),
            &caller,
        );
        return (
            StatusCode::BAD_REQUEST,
            Html(pages::problem(
                frame(&state, &caller, "Refused"),
                format!(
                    "Label action {} is not the change step {id:?} plans (or the step is no \
                     longer in the newest analysis); reload the step's page and approve from there.",
                    form.action
                ),
            )),
        )
            .into_response();
    }
    match crate::labels::approve(
        &state.shared.store,
        &state.labels,
        &state.newest,
        form.action,
        who,
        form.override_pods.is_some(),
        model::time::now_ms(),
    )
    .await
    {
        Ok(()) => {
            collector_shared::access::audit::approved(
                form.action,
                &caller,
                form.override_pods.is_some(),
            );
            Redirect::to(&format!("{back}?approved={}", form.action)).into_response()
        }
        Err(e) => {
            // Audited as what happened (a refused approval was audited "approved").
            collector_shared::access::audit::refused(&e.to_string(), Some(who), &caller);
            Redirect::to(&format!("{back}?error={}", enc(&e.to_string()))).into_response()
        }
    }
}

/// What the GPUs a step frees cost a month at the configured price of its node's GPUs (the
/// funnel's cost over allocated GPU-hours of that node).
pub(super) fn step_money(a: &Analysis, r: &analytics::Recommendation) -> Option<String> {
    let row = a
        .funnel
        .by_node
        .iter()
        .find(|n| n.key == r.node && n.cluster.as_deref().is_none_or(|c| c == r.cluster))?;
    if row.allocated_gpu_hours <= 0.0 || r.replay.gpus_freed <= 0.0 {
        return None;
    }
    let price = row.cost / row.allocated_gpu_hours;
    Some(format!(
        "≈ {} a month",
        format::money(
            r.replay.gpus_freed * price * analytics::plan::HOURS_PER_MONTH,
            &a.funnel.currency
        )
    ))
}

/// Tenant keys in a sentence replaced by the names people know.
pub(super) fn names_in(a: &Analysis, text: &str) -> String {
    let mut out = text.to_owned();
    for (k, n) in &a.tenant_names {
        if out.contains(k.as_str()) {
            out = out.replace(k.as_str(), n);
        }
    }
    out
}
