//! `/tenants/{key}` and `/teams/{team}`: one tenant's or team's page — its
//! numbers over the analysed window, its findings, the steps of the plan that move or
//! interrupt it, the demand it leaves waiting and, for a team, its tenants. A team-scoped
//! caller gets a 404 for what is not theirs, as for anything unknown.

use super::page::*;
use super::recommendations::names_in;
use super::series::{mean_series, shown};
use crate::analysis::RangeUse;

/// A funnel line's numbers, as the page lists them; none where the window has no line.
fn numbers(r: Option<&analytics::FunnelRow>, currency: &str) -> Vec<(String, String)> {
    let Some(r) = r else {
        return vec![(
            "allocated GPU-hours".into(),
            "none in the analysed window".into(),
        )];
    };
    let mut out = vec![
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
    ];
    out.extend(energy_numbers(r.energy.as_ref()));
    out
}

/// A line's energy as the page lists it (docs/cost.md, "Energy"): none where it is unknown.
pub fn energy_numbers(e: Option<&analytics::energy::LineEnergy>) -> Vec<(String, String)> {
    let Some(e) = e else {
        return Vec::new();
    };
    let kwh = |v: f64| format!("{} kWh", format::num(v));
    let mut out = vec![
        ("energy charged".into(), kwh(e.kwh)),
        (
            "of it on allocations that ran no kernel".into(),
            kwh(e.idle_kwh),
        ),
    ];
    out.push((
        "emissions".into(),
        e.co2e_kg.map_or_else(
            || "no grid intensity set ([analytics.carbon])".to_owned(),
            |kg| format!("{} kg CO₂e", format::num(kg)),
        ),
    ));
    out
}

/// The reclaim cases `pick` selects among the newest 200, in words, newest first.
async fn cases(
    state: &DashboardState,
    pick: impl Fn(&store::reclaim_cases::NewCase) -> bool,
) -> Result<Vec<String>, PageError> {
    let all = state
        .shared
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
                k.state.words(),
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

/// A tenant's or team's page's query: the range it covers (as on the tenants' page: `24h`,
/// `7d`, `30d` or a custom from/to; absent: the scheduled analysis' window) and a download.
#[derive(Debug, Deserialize)]
pub struct HolderQuery {
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub format: Option<String>,
    pub table: Option<String>,
}

/// The span a tenant's or team's page covers: a picked range, its use read through the
/// ranged funnel, else the analysis' window (its use read only where `always`, for a team's
/// hours); what its links carry, and the notice of a range that cannot be read.
struct Over {
    from: i64,
    to: i64,
    picked: bool,
    usage: Option<Arc<RangeUse>>,
    query: String,
    notice: Option<String>,
}

impl Over {
    async fn read(
        state: &DashboardState,
        a: &Analysis,
        q: &HolderQuery,
        always: bool,
    ) -> Result<Over, PageError> {
        let (chosen, notice) = match picked_range(state, &q.range, &q.from, &q.to) {
            Ok(c) => (c, None),
            Err(n) => (None, Some(n)),
        };
        let picked = chosen.is_some();
        let (from, to, (range, f, t)) = chosen.unwrap_or((a.from_ms, a.to_ms, Default::default()));
        let usage = if picked || always {
            Some(range_use(state, from, to).await?)
        } else {
            None
        };
        let query = query_string(&[("range", &range), ("from", &f), ("to", &t)]);
        Ok(Over {
            from,
            to,
            picked,
            usage,
            query,
            notice,
        })
    }

    /// The funnel the page's numbers come from.
    fn funnel<'a>(&'a self, a: &'a Analysis) -> &'a analytics::Funnel {
        match (&self.usage, self.picked) {
            (Some(u), true) => &u.funnel,
            _ => &a.funnel,
        }
    }

    fn words(&self) -> String {
        format!("{} to {} UTC", time(self.from), time(self.to))
    }

    /// The page's path with the range it shows.
    fn path(&self, base: String) -> String {
        if self.query.is_empty() {
            base
        } else {
            format!("{base}?{}", self.query)
        }
    }
}

pub async fn tenant(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(key): Path<String>,
    Query(q): Query<HolderQuery>,
) -> PageOrCsv {
    let a = analysis_or_wait(&state).await?;
    let tenants = state.shared.store.tenants().await?;
    let team_of = team_map(&tenants);
    let team = team_of.get(key.as_str()).copied();
    let known = a.funnel.by_tenant.iter().any(|r| r.key == key);
    let meta = tenants.iter().find(|t| t.key() == key);
    if !caller.sees_team(team) || (!known && meta.is_none()) {
        return Err(not_found(format!(
            "no tenant {key:?} in the newest analysis"
        )));
    }
    let over = Over::read(&state, &a, &q, false).await?;
    let row = over.funnel(&a).by_tenant.iter().find(|r| r.key == key);
    let name = meta.map_or_else(|| name_of(&a, &key), |t| t.display_name());
    let cluster = meta
        .map(|t| t.cluster.clone())
        .or_else(|| row.and_then(|r| r.cluster.clone()));
    let chart = Chart {
        title: format!("{name}: allocated against effective use"),
        unit: "% of a GPU, the mean over the GPUs it holds".into(),
        from_ms: over.from,
        to_ms: over.to,
        lines: tenant_lines(&state, cluster.as_deref(), &key, over.from, over.to).await,
        empty_note: "No allocation of this tenant is recorded in the range.".into(),
        ..Chart::default()
    };
    let v = pages::HolderView {
        name: name.clone(),
        what: meta
            .map(|t| t.tenant.kind.as_str().replace('_', " "))
            .unwrap_or_else(|| "tenant".into()),
        team: team.map(str::to_owned),
        window: over.words(),
        picked: over.picked,
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
        path: over.path(format!("/tenants/{}", web::format::enc(&key))),
        range: q.range.clone().filter(|_| over.picked).unwrap_or_default(),
        ranges: ranges(),
        from: q.from.clone().filter(|_| over.picked).unwrap_or_default(),
        to: q.to.clone().filter(|_| over.picked).unwrap_or_default(),
        ..pages::HolderView::default()
    };
    let mut f = frame(&state, &caller, name);
    f.notice = over.notice;
    page_or_table(
        (q.format.as_deref(), q.table.as_deref()),
        "tenant",
        v,
        pages::holder_tables,
        |v| pages::holder(f, v),
    )
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

/// A team's demand forecast as figures: what it holds now and at the horizon, with the
/// forecast's measured error (docs/analytics.md, "Demand forecast").
fn team_forecast(a: &Analysis, team: &str) -> Vec<(String, String)> {
    use analytics::forecast::{Quantity, Scope};
    let Some(f) = &a.forecast else {
        return Vec::new();
    };
    let Some(s) = f.find(&Scope::Team {
        team: team.to_owned(),
    }) else {
        return Vec::new();
    };
    let Some(p) = s.projection(Quantity::Allocated) else {
        return Vec::new();
    };
    let gpus = |x: f64| format!("{x:.1} GPUs");
    let mut out = vec![("held now (last day's mean)".to_owned(), gpus(p.recent))];
    let weeks = f.horizon_h / 168;
    if let Some(mean) = f.at_horizon(p) {
        let band = p
            .accuracy
            .as_ref()
            .map(|a| format!(" ± {:.1}", a.band))
            .unwrap_or_default();
        out.push((
            format!("held in {weeks} weeks at the forecast"),
            format!("{}{band}", gpus(mean)),
        ));
    }
    // Figures stay short (a phone's width): the error's horizon goes in the label.
    out.push(match (&p.accuracy, &p.model) {
        (Some(a), _) => (
            format!(
                "forecast error (mean, {} ahead)",
                if a.ahead_h >= 168 { "7 days" } else { "1 day" }
            ),
            format!("{:.2} GPUs", a.mae),
        ),
        (None, Some(_)) => (
            "forecast error (unmeasured: under three days of history)".into(),
            "–".into(),
        ),
        (None, None) => (
            "forecast (none: under two days of history)".into(),
            "–".into(),
        ),
    });
    out
}

pub async fn team(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(team): Path<String>,
    Query(q): Query<HolderQuery>,
) -> PageOrCsv {
    let a = analysis_or_wait(&state).await?;
    let tenants = state.shared.store.tenants().await?;
    let team_of = team_map(&tenants);
    let known = a.funnel.by_team.iter().any(|r| r.key == team)
        || tenants.iter().any(|t| t.team.as_deref() == Some(&team));
    if !caller.sees_team(Some(&team)) || !known {
        return Err(not_found(format!(
            "no team {team:?} in the newest analysis"
        )));
    }
    let over = Over::read(&state, &a, &q, true).await?;
    let funnel = over.funnel(&a);
    let row = funnel.by_team.iter().find(|r| r.key == team);
    // Its tenants: those the store knows in the team, with their funnel lines where the
    // window has them.
    let members: Vec<&store::TenantRecord> = tenants
        .iter()
        .filter(|t| t.team.as_deref() == Some(&team))
        .collect();
    let line = |k: &str| funnel.by_tenant.iter().find(|r| r.key == k);
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
        window: over.words(),
        picked: over.picked,
        numbers: numbers(row, &a.funnel.currency)
            .into_iter()
            .chain(team_forecast(&a, &team))
            .collect(),
        chart: Some(team_chart(&team, &over)),
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
        path: over.path(format!("/teams/{}", web::format::enc(&team))),
        range: q.range.clone().filter(|_| over.picked).unwrap_or_default(),
        ranges: ranges(),
        from: q.from.clone().filter(|_| over.picked).unwrap_or_default(),
        to: q.to.clone().filter(|_| over.picked).unwrap_or_default(),
        ..pages::HolderView::default()
    };
    let mut f = frame(&state, &caller, format!("Team {team}"));
    f.notice = over.notice;
    page_or_table(
        (q.format.as_deref(), q.table.as_deref()),
        "team",
        v,
        pages::holder_tables,
        |v| pages::holder(f, v),
    )
}

/// A team's allocated and effective GPUs hour by hour over the page's span (its whole hours):
/// the funnel's team line spread over the hours it was spent.
fn team_chart(team: &str, over: &Over) -> Chart {
    let hours = over
        .usage
        .as_ref()
        .and_then(|u| u.team_hours.get(team))
        .map(Vec::as_slice)
        .unwrap_or_default();
    // The hour still running would read as a drop: only whole hours are drawn.
    let whole = |h: &&(i64, f64, f64)| h.0 + model::rollup::HOUR_MS <= over.to;
    let line = |name: &str, pick: fn(&(i64, f64, f64)) -> f64| Line {
        name: name.into(),
        points: hours
            .iter()
            .filter(whole)
            .map(|h| (h.0, Some(pick(h))))
            .collect(),
    };
    Chart {
        title: format!("{team}: allocated against effective use"),
        unit: "GPUs (GPU-hours in each hour)".into(),
        from_ms: over.from,
        to_ms: over.to,
        lines: vec![line("allocated", |h| h.1), line("effective use", |h| h.2)],
        empty_note: "No allocation of this team is recorded in the range.".into(),
        ..Chart::default()
    }
}
