//! `/tenants/{key}` and `/teams/{team}` (issue 74.4): one tenant's or team's page — its
//! numbers over the analysed window, its findings, the steps of the plan that move or
//! interrupt it, the demand it leaves waiting and, for a team, its tenants. A team-scoped
//! caller gets a 404 for what is not theirs, as for anything unknown.

use super::page::*;
use super::recommendations::names_in;
use super::series::{mean_series, shown};

/// A funnel line's numbers, as the page lists them; none where the window has no line.
fn numbers(r: Option<&analytics::FunnelRow>, currency: &str) -> Vec<(String, String)> {
    let Some(r) = r else {
        return vec![(
            "allocated GPU-hours".into(),
            "none in the analysed window".into(),
        )];
    };
    vec![
        (
            "allocated GPU-hours".into(),
            format::num(r.allocated_gpu_hours),
        ),
        (
            "effective GPU-hours".into(),
            format::num(r.effective_gpu_hours),
        ),
        (
            "share of the allocation used".into(),
            format::pct(r.effective_ratio),
        ),
        ("wasted GPU-hours".into(), format::num(r.waste_gpu_hours)),
        ("cost".into(), format::money(r.cost, currency)),
        (
            "cost of the waste".into(),
            format::money(r.waste_cost, currency),
        ),
    ]
}

/// The reclaim cases `pick` selects among the newest 200, in words, newest first.
async fn cases(
    state: &DashboardState,
    pick: impl Fn(&store::reclaim_cases::NewCase) -> bool,
) -> Result<Vec<String>, PageError> {
    let all = state
        .store
        .reclaim_cases(&store::reclaim_cases::CaseFilter::newest(200))
        .await?;
    Ok(all
        .iter()
        .filter(|c| pick(&c.case))
        .map(|c| {
            let k = &c.case;
            format!(
                "case {}: {}/{} on {}, {} — {} under policy {} ({} idle hours){}",
                c.id,
                k.namespace,
                k.pod,
                k.node,
                k.state.replace('_', " "),
                k.action,
                k.policy,
                format::num(k.idle_hours),
                if k.dry_run { ", dry run" } else { "" }
            )
        })
        .collect())
}

/// The plan's steps for which `touches` says how they touch the holder.
fn steps(
    a: &Analysis,
    touches: impl Fn(&analytics::Recommendation) -> Option<String>,
) -> Vec<(String, String, String)> {
    a.recommendations
        .iter()
        .filter_map(|r| {
            let how = touches(r)?;
            Some((r.id.clone(), how, names_in(a, &r.summary)))
        })
        .collect()
}

/// How step `r` touches tenant `key`: the words for its interruptions, else "named"; empty
/// where it does not.
fn touch(r: &analytics::Recommendation, key: &str) -> BTreeSet<&'static str> {
    let mut hows: BTreeSet<&'static str> = r
        .interrupts
        .iter()
        .filter(|i| i.tenant == key)
        .map(|i| i.how.as_str())
        .collect();
    if hows.is_empty() && r.tenants.iter().any(|t| t == key) {
        hows.insert("named");
    }
    hows
}

/// The words of a set, joined.
fn words(hows: &BTreeSet<&str>) -> String {
    hows.iter().copied().collect::<Vec<_>>().join(", ")
}

pub async fn tenant(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(key): Path<String>,
    Query(q): Query<FormatQuery>,
) -> PageOrCsv {
    let a = analysis_or_wait(&state).await?;
    let tenants = state.store.tenants().await?;
    let team_of = team_map(&tenants);
    let team = team_of.get(key.as_str()).copied();
    let row = a.funnel.by_tenant.iter().find(|r| r.key == key);
    let meta = tenants.iter().find(|t| t.key() == key);
    if !caller.sees_team(team) || (row.is_none() && meta.is_none()) {
        return Err(not_found(format!(
            "no tenant {key:?} in the newest analysis"
        )));
    }
    let name = meta.map_or_else(|| name_of(&a, &key), |t| t.display_name());
    let cluster = meta
        .map(|t| t.cluster.clone())
        .or_else(|| row.and_then(|r| r.cluster.clone()));
    let chart = Chart {
        title: format!("{name}: allocated against effective use"),
        unit: "% of a GPU, the mean over the GPUs it holds".into(),
        from_ms: a.from_ms,
        to_ms: a.to_ms,
        lines: tenant_lines(&state, cluster.as_deref(), &key, a.from_ms, a.to_ms).await,
        empty_note: "No allocation of this tenant is recorded in the analysed window.".into(),
        ..Chart::default()
    };
    let v = pages::HolderView {
        name: name.clone(),
        what: meta
            .map(|t| t.tenant.kind.as_str().replace('_', " "))
            .unwrap_or_else(|| "tenant".into()),
        team: team.map(str::to_owned),
        window: window(&a),
        numbers: numbers(row, &a.funnel.currency),
        chart: Some(chart),
        findings: a
            .findings
            .iter()
            .filter(|f| f.tenants.contains(&key))
            .filter(|f| finding_visible(&caller, f, &team_of))
            .map(|f| (f.id.clone(), names_in(&a, &f.summary)))
            .collect(),
        steps: steps(&a, |r| {
            let hows = touch(r, &key);
            (!hows.is_empty()).then(|| words(&hows))
        }),
        reclaim: cases(&state, |c| c.tenant == key).await?,
        path: format!("/tenants/{}", web::format::enc(&key)),
        ..pages::HolderView::default()
    };
    let f = frame(&state, &caller, name);
    page_or_table(q.asked(), "tenant", v, pages::holder_tables, |v| {
        pages::holder(f, v)
    })
}

/// The tenant's allocated share and effective use over the window, as % of a GPU (hourly).
async fn tenant_lines(
    state: &DashboardState,
    cluster: Option<&str>,
    key: &str,
    from: i64,
    to: i64,
) -> Vec<Line> {
    let entity = || match cluster {
        Some(c) => Entity::TenantIn(c.to_owned(), key.to_owned()),
        None => Entity::Tenant(key.to_owned()),
    };
    let mut out = Vec::new();
    for (name, metric) in [
        ("allocated", Metric::AllocShare),
        ("effective use", Metric::Effective),
    ] {
        let points = mean_series(state, metric, entity(), from, to, 3_600_000)
            .await
            .map(shown)
            .unwrap_or_default();
        out.push(Line {
            name: name.into(),
            points,
        });
    }
    out
}

pub async fn team(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(team): Path<String>,
    Query(q): Query<FormatQuery>,
) -> PageOrCsv {
    let a = analysis_or_wait(&state).await?;
    let tenants = state.store.tenants().await?;
    let team_of = team_map(&tenants);
    let row = a.funnel.by_team.iter().find(|r| r.key == team);
    let known = row.is_some() || tenants.iter().any(|t| t.team.as_deref() == Some(&team));
    if !caller.sees_team(Some(&team)) || !known {
        return Err(not_found(format!(
            "no team {team:?} in the newest analysis"
        )));
    }
    // Its tenants: those the store knows in the team, with their funnel lines where the
    // window has them.
    let members: Vec<&store::TenantRecord> = tenants
        .iter()
        .filter(|t| t.team.as_deref() == Some(&team))
        .collect();
    let line = |k: &str| a.funnel.by_tenant.iter().find(|r| r.key == k);
    let mut listed: Vec<(String, String, f64, String)> = members
        .iter()
        .map(|t| {
            let r = line(t.key());
            (
                t.key().to_owned(),
                t.display_name(),
                r.map_or(0.0, |r| r.waste_gpu_hours),
                format::money(r.map_or(0.0, |r| r.cost), &a.funnel.currency),
            )
        })
        .collect();
    listed.sort_by(|x, y| y.2.total_cmp(&x.2));
    let findings: Vec<(String, String)> = a
        .findings
        .iter()
        .filter(|f| finding_teams(f, &team_of).contains(team.as_str()))
        .filter(|f| finding_visible(&caller, f, &team_of))
        .map(|f| (f.id.clone(), names_in(&a, &f.summary)))
        .collect();
    let waiting = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::WaitingDemand && f.team.as_deref() == Some(&team))
        .map(|f| names_in(&a, &f.summary))
        .collect();
    let v = pages::HolderView {
        name: team.clone(),
        what: "team".into(),
        window: window(&a),
        numbers: numbers(row, &a.funnel.currency),
        findings,
        steps: steps(&a, |r| {
            let hit: Vec<BTreeSet<&str>> = members
                .iter()
                .map(|t| touch(r, t.key()))
                .filter(|h| !h.is_empty())
                .collect();
            let all: BTreeSet<&str> = hit.iter().flatten().copied().collect();
            (!hit.is_empty()).then(|| format!("{} of its tenants {}", hit.len(), words(&all)))
        }),
        waiting,
        members: listed,
        reclaim: cases(&state, |c| c.team == team).await?,
        path: format!("/teams/{}", web::format::enc(&team)),
        ..pages::HolderView::default()
    };
    let f = frame(&state, &caller, format!("Team {team}"));
    page_or_table(q.asked(), "team", v, pages::holder_tables, |v| {
        pages::holder(f, v)
    })
}
