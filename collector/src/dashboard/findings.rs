//! `/findings` and `/findings/{id}`: what the analysis found, and the evidence for one finding.

use super::*;

#[derive(Debug, Deserialize)]
pub struct FindingQuery {
    pub kind: Option<String>,
    pub severity: Option<String>,
    pub team: Option<String>,
    pub node: Option<String>,
    pub tenant: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
}

pub async fn findings(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<FindingQuery>,
) -> Page {
    let a = analysis(&state).await?;
    let empty = Analysis::default();
    let a: &Analysis = a.as_deref().unwrap_or(&empty);
    let mut rows = matching(a, &q);
    let sq = SortQuery {
        sort: q.sort.clone(),
        dir: q.dir.clone(),
    };
    rows.sort_by(|(sa, a), (sb, b)| {
        let o = match sq.sort.as_deref().unwrap_or("severity") {
            "kind" => a.kind.cmp(&b.kind),
            "node" => a.node.cmp(&b.node),
            "team" => a.team.cmp(&b.team),
            _ => sa.cmp(sb),
        };
        if sq.dir.as_deref() == Some("asc") {
            o
        } else {
            o.reverse()
        }
    });
    let filters = filters(a, &q);
    let base = query_string(&[
        ("kind", &filters.kind),
        ("severity", &filters.severity),
        ("team", &filters.team),
        ("node", &filters.node),
        ("tenant", q.tenant.as_deref().unwrap_or("")),
    ]);
    Ok(Html(pages::findings(
        frame(&state, &headers, "Findings"),
        filters,
        rows.into_iter().map(|(_, r)| r).collect(),
        sort_state(base, &sq, "severity"),
    )))
}

/// The findings the query selects, each with its severity (the default sort).
fn matching(a: &Analysis, q: &FindingQuery) -> Vec<(Severity, pages::FindingRow)> {
    let min = q.severity.as_deref().and_then(Severity::parse);
    a.findings
        .iter()
        .filter(|f| {
            q.kind
                .as_deref()
                .is_none_or(|k| k.is_empty() || f.kind.as_str() == k)
        })
        .filter(|f| min.is_none_or(|m| f.severity >= m))
        .filter(|f| {
            q.team
                .as_deref()
                .is_none_or(|t| t.is_empty() || f.team.as_deref() == Some(t))
        })
        .filter(|f| {
            q.node
                .as_deref()
                .is_none_or(|n| n.is_empty() || f.node == n)
        })
        .filter(|f| {
            q.tenant
                .as_deref()
                .is_none_or(|t| t.is_empty() || f.tenants.iter().any(|x| x == t))
        })
        .map(|f| {
            (
                f.severity,
                pages::FindingRow {
                    id: f.id.clone(),
                    kind: f.kind.as_str().into(),
                    severity: f.severity.as_str().into(),
                    node: f.node.clone(),
                    tenant: f.tenants.first().map(|k| name_of(a, k)).unwrap_or_default(),
                    team: f.team.clone().unwrap_or_default(),
                    summary: f.summary.clone(),
                },
            )
        })
        .collect()
}

/// The filter form: what is selected, and the kinds, teams and nodes to choose from.
fn filters(a: &Analysis, q: &FindingQuery) -> pages::FindingFilters {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    pages::FindingFilters {
        kind: s(&q.kind),
        severity: s(&q.severity),
        team: s(&q.team),
        node: s(&q.node),
        kinds: FindingKind::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect(),
        teams: a
            .findings
            .iter()
            .filter_map(|f| f.team.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        nodes: a
            .findings
            .iter()
            .map(|f| f.node.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    }
}

/// An evidence series as a chart line.
/// The range an evidence chart covers: the finding's window, at least an hour.
fn evidence_range(e: &analytics::Evidence) -> (i64, i64) {
    (e.from_ms, e.from_ms + (e.to_ms - e.from_ms).max(3_600_000))
}

/// An evidence series as a chart line.
async fn evidence_line(
    state: &DashboardState,
    e: &analytics::Evidence,
    label: &str,
) -> Option<Line> {
    let (from, to) = evidence_range(e);
    let step = if to - from <= 2 * 86_400_000 {
        300_000
    } else {
        3_600_000
    };
    let s = mean_series(
        state,
        Metric::parse(&e.metric)?,
        Entity::parse(&e.entity)?,
        from,
        to,
        step,
    )
    .await?;
    Some(Line {
        name: label.to_owned(),
        points: shown(s),
    })
}

pub async fn finding(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Page {
    let a = analysis(&state).await?;
    let Some(a) = a else {
        return Err(not_found("no analysis yet".into()));
    };
    let Some(f) = a.findings.iter().find(|f| f.id == id) else {
        return Err(not_found(format!(
            "no finding {id:?} in the newest analysis (findings are recomputed every analysis; old ids go away when the condition does)"
        )));
    };
    let charts = evidence_charts(&state, &a, f).await;
    let v = finding_view(&a, f, charts);
    Ok(Html(pages::finding(
        frame(&state, &headers, format!("{} finding", f.kind.as_str())),
        v,
    )))
}

/// The charts of a finding's evidence (an interference finding overlays victim and aggressor).
async fn evidence_charts(state: &DashboardState, a: &Analysis, f: &Finding) -> Vec<Chart> {
    let mut charts = Vec::new();
    if f.kind == FindingKind::Interference {
        // Victim and aggressor overlaid on one chart.
        let mut lines = Vec::new();
        for (e, who) in f.evidence.iter().take(2).zip(["victim", "aggressor"]) {
            let label = format!(
                "{who} {}",
                f.tenants
                    .get(usize::from(who == "aggressor"))
                    .map(|k| name_of(a, k))
                    .unwrap_or_default()
            );
            if let Some(l) = evidence_line(state, e, &label).await {
                lines.push(l);
            }
        }
        if let Some(e) = f.evidence.first() {
            charts.push(Chart {
                title: "Victim and aggressor SM time".into(),
                unit: "%".into(),
                from_ms: evidence_range(e).0,
                to_ms: evidence_range(e).1,
                y_max: Some(100.0),
                lines,
                empty_note: "No SM time recorded for these tenants in the window.".into(),
            });
        }
        for e in f.evidence.iter().skip(2) {
            if let Some(l) = evidence_line(state, e, &e.label).await {
                charts.push(Chart {
                    title: e.label.clone(),
                    unit: "%".into(),
                    from_ms: evidence_range(e).0,
                    to_ms: evidence_range(e).1,
                    y_max: Some(100.0),
                    lines: vec![l],
                    empty_note: "No data.".into(),
                });
            }
        }
    } else {
        for e in &f.evidence {
            if let Some(l) = evidence_line(state, e, &e.label).await {
                let unit = Metric::parse(&e.metric).map_or("", |m| m.spec().unit);
                let pct = unit == "ratio";
                charts.push(Chart {
                    title: e.label.clone(),
                    unit: if pct { "%".into() } else { unit.into() },
                    from_ms: evidence_range(e).0,
                    to_ms: evidence_range(e).1,
                    y_max: pct.then_some(100.0),
                    lines: vec![l],
                    empty_note: "No data in the finding's window.".into(),
                });
            }
        }
    }
    charts
}

/// A finding's page: who, where, when, its numbers and the recommendations that answer it.
fn finding_view(a: &Analysis, f: &Finding, charts: Vec<Chart>) -> pages::FindingView {
    let tenants = f
        .tenants
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let role = match (f.kind, i) {
                (FindingKind::Interference, 0) => "victim",
                (FindingKind::Interference, _) => "aggressor",
                _ => "tenant",
            };
            (role.to_owned(), name_of(a, k))
        })
        .collect();
    pages::FindingView {
        id: f.id.clone(),
        kind: f.kind.as_str().into(),
        severity: f.severity.as_str().into(),
        node: f.node.clone(),
        gpu: f.gpu.clone(),
        tenants,
        window: format!("{} to {} UTC", time(f.from_ms), time(f.to_ms)),
        signal: f.signal.clone(),
        summary: f.summary.clone(),
        metrics: f
            .metrics
            .iter()
            .map(|(k, v)| (k.clone(), format::num(*v)))
            .collect(),
        charts,
        recommendations: a
            .recommendations
            .iter()
            .filter(|r| {
                r.findings.contains(&f.id)
                    || (r.node == f.node && r.tenants.iter().any(|t| f.tenants.contains(t)))
            })
            .map(|r| (r.id.clone(), r.summary.clone()))
            .collect(),
    }
}
