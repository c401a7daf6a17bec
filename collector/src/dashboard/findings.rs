//! `/findings` and `/findings/{id}`: what the analysis found, and the evidence for one finding.

use super::page::*;
use analytics::Measure;

#[derive(Debug, Deserialize)]
pub struct FindingQuery {
    pub kind: Option<String>,
    pub severity: Option<String>,
    pub team: Option<String>,
    pub node: Option<String>,
    pub tenant: Option<String>,
    /// Part of a finding's summary, node, tenant or team (case-insensitive).
    pub q: Option<String>,
    /// Only findings whose window meets this range: `24h`, `7d`, `30d` back from now, or a
    /// custom from/to (as on the tenants' page).
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
    /// `csv`: the table as a download, with the same rows and columns.
    pub format: Option<String>,
}

pub async fn findings(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<FindingQuery>,
) -> PageOrCsv {
    let csv = wants_csv(q.format.as_deref())?;
    let a = analysis(&state).await?;
    let empty = Analysis::default();
    let a: &Analysis = a.as_deref().unwrap_or(&empty);
    let tenants = state.shared.store.tenants().await?;
    let team_of = team_map(&tenants);
    // Unknown filter values are said, and not applied.
    let mut q = q;
    let kinds = analytics::FindingKind::ALL.map(|k| k.as_str());
    let severities = analytics::Severity::ALL.map(|s| s.as_str());
    let mut notices = Vec::new();
    if let Err(n) = checked_filter("kind", q.kind.as_deref(), &kinds) {
        notices.push(n);
        q.kind = None;
    }
    if let Err(n) = checked_filter("severity", q.severity.as_deref(), &severities) {
        notices.push(n);
        q.severity = None;
    }
    let chosen = match picked_range(&state, &q.range, &q.from, &q.to) {
        Ok(c) => c,
        Err(n) => {
            notices.push(n.replace("the analysed window", "every finding"));
            None
        }
    };
    let met = chosen.as_ref().map(|(from, to, _)| (*from, *to));
    let mut rows = matching(a, &q, met, &team_of, &caller);
    let sq = SortQuery {
        sort: q.sort.clone(),
        dir: q.dir.clone(),
    };
    rows.sort_by(|(sa, a), (sb, b)| {
        let o = match sq.sort.as_deref().unwrap_or("severity") {
            "kind" => a.kind.cmp(&b.kind),
            "node" => a.node.cmp(&b.node),
            "team" => a.team.cmp(&b.team),
            "cost" => a
                .waste_cost
                .unwrap_or(-1.0)
                .total_cmp(&b.waste_cost.unwrap_or(-1.0)),
            _ => sa.cmp(sb),
        };
        if sq.dir.as_deref() == Some("asc") {
            o
        } else {
            o.reverse()
        }
    });
    let mut filters = filters(a, &q, &team_of);
    (filters.range, filters.from, filters.to) = match &chosen {
        Some((_, _, shown)) => shown.clone(),
        None => Default::default(),
    };
    filters.ranges = ranges();
    filters.teams.retain(|t| caller.sees_team(Some(t)));
    if caller.scope().is_some() {
        let seen: BTreeSet<&str> = rows.iter().map(|(_, r)| r.node.as_str()).collect();
        filters.nodes.retain(|n| seen.contains(n.as_str()));
    }
    let base = query_string(&[
        ("kind", &filters.kind),
        ("severity", &filters.severity),
        ("team", &filters.team),
        ("node", &filters.node),
        ("tenant", q.tenant.as_deref().unwrap_or("")),
        ("q", &filters.query),
        ("range", &filters.range),
        ("from", &filters.from),
        ("to", &filters.to),
    ]);
    if csv {
        let rows: Vec<pages::FindingRow> = rows.into_iter().map(|(_, r)| r).collect();
        return Ok(csv_download(
            "findings",
            pages::findings_csv(&rows, &a.funnel.currency),
        ));
    }
    let mut page = frame(&state, &caller, "Findings");
    page.notice = (!notices.is_empty()).then(|| notices.join(" "));
    Ok(Html(pages::findings(
        page,
        filters,
        rows.into_iter().map(|(_, r)| r).collect(),
        sort_state(base, &sq, "severity"),
    ))
    .into_response())
}

/// A list row, with its severity and (tenant, GPU) when it has both.
type Grouped = (Severity, pages::FindingRow, Option<(String, String)>);

/// The findings the query selects, each with its severity (the default sort).
fn matching(
    a: &Analysis,
    q: &FindingQuery,
    met: Option<(i64, i64)>,
    team_of: &HashMap<&str, &str>,
    caller: &Caller,
) -> Vec<(Severity, pages::FindingRow)> {
    let min = q.severity.as_deref().and_then(Severity::parse);
    let needle = q.q.as_deref().unwrap_or("").trim().to_lowercase();
    a.findings
        .iter()
        .filter(|f| finding_visible(caller, f, team_of))
        .filter(|f| {
            q.kind
                .as_deref()
                .is_none_or(|k| k.is_empty() || f.kind.as_str() == k)
        })
        .filter(|f| min.is_none_or(|m| f.severity >= m))
        // A picked range keeps the findings whose window meets it.
        .filter(|f| met.is_none_or(|(from, to)| f.from_ms < to && f.to_ms > from))
        .filter(|f| {
            q.team
                .as_deref()
                .is_none_or(|t| t.is_empty() || finding_teams(f, team_of).contains(t))
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
        .filter(|f| {
            needle.is_empty()
                || [f.summary.as_str(), f.node.as_str(), &tenant_cell(a, f)]
                    .into_iter()
                    .chain(f.team.as_deref())
                    .any(|s| s.to_lowercase().contains(&needle))
        })
        .map(|f| {
            (
                f.severity,
                pages::FindingRow {
                    id: f.id.clone(),
                    kind: f.kind.as_str().into(),
                    severity: f.severity.as_str().into(),
                    node: f.node.clone(),
                    tenant: tenant_cell(a, f),
                    team: f.team.clone().unwrap_or_default(),
                    summary: f.summary.clone(),
                    also: Vec::new(),
                    waste_cost: f.metrics.get(&Measure::WastedCost).copied(),
                },
                f.tenants.first().cloned().zip(f.gpu.clone()),
            )
        })
        .fold(Vec::new(), |mut rows: Vec<Grouped>, (sev, r, key)| {
            // One row per tenant, kind and severity on a node: a Slurm job's or a pod's
            // eight GPUs with the same finding read as one row linking all eight. Findings
            // without a tenant or a GPU stay rows of their own.
            let same = key.as_ref().and_then(|(tenant, _)| {
                rows.iter_mut().find(|(s, x, k)| {
                    *s == sev
                        && x.kind == r.kind
                        && x.node == r.node
                        && k.as_ref().is_some_and(|(t, _)| t == tenant)
                })
            });
            match (same, &key) {
                (Some((_, first, _)), Some((_, gpu))) => {
                    if let Some(c) = r.waste_cost {
                        first.waste_cost = Some(first.waste_cost.unwrap_or(0.0) + c);
                    }
                    first.also.push((r.id, gpu.chars().take(12).collect()))
                }
                _ => rows.push((sev, r, key)),
            }
            rows
        })
        .into_iter()
        .map(|(sev, r, _)| (sev, r))
        .collect()
}

/// The filter form: what is selected, and the kinds, teams and nodes to choose from.
fn filters(a: &Analysis, q: &FindingQuery, team_of: &HashMap<&str, &str>) -> pages::FindingFilters {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    pages::FindingFilters {
        kind: s(&q.kind),
        severity: s(&q.severity),
        team: s(&q.team),
        node: s(&q.node),
        query: s(&q.q),
        kinds: FindingKind::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect(),
        teams: a
            .findings
            .iter()
            .flat_map(|f| finding_teams(f, team_of))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        nodes: a
            .findings
            .iter()
            .map(|f| f.node.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        currency: a.funnel.currency.clone(),
        ..Default::default()
    }
}

pub async fn finding(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<FormatQuery>,
) -> PageOrCsv {
    let a = analysis(&state).await?;
    let Some(a) = a else {
        return Err(not_found("no analysis yet".into()));
    };
    let tenants = match caller.scope() {
        Some(_) => state.shared.store.tenants().await?,
        None => Vec::new(),
    };
    let team_of = team_map(&tenants);
    // Another team's finding reads as one that does not exist.
    let Some(f) = a
        .findings
        .iter()
        .find(|f| f.id == id && finding_visible(&caller, f, &team_of))
    else {
        return Err(not_found(format!(
            "no finding {id:?} in the newest analysis (findings are recomputed every analysis; old ids go away when the condition does)"
        )));
    };
    let evidence = super::evidence::view(&state, &a, f).await;
    let v = finding_view(&a, f, evidence);
    let page = frame(
        &state,
        &caller,
        web::format::kind_heading(f.kind.as_str(), "finding"),
    );
    page_or_table(q.asked(), "finding", v, pages::finding_tables, |v| {
        pages::finding(page, v)
    })
}

/// The list's Tenant cell: the tenant a finding is about, or, for waiting demand (about a
/// team's waiting work), the idle holders it names, said as such.
fn tenant_cell(a: &Analysis, f: &Finding) -> String {
    if let Some(k) = f.subject_tenant() {
        return name_of(a, k);
    }
    match f.tenants.as_slice() {
        [] => String::new(),
        [one] => format!("idle holder {}", name_of(a, one)),
        [first, rest @ ..] => format!(
            "idle holders {} and {}",
            name_of(a, first),
            model::figures::count(rest.len() as f64, "other", "others")
        ),
    }
}

/// A finding's page: who, where, when, its numbers and the recommendations that answer it.
fn finding_view(
    a: &Analysis,
    f: &Finding,
    evidence: super::evidence::EvidenceView,
) -> pages::FindingView {
    let tenants = f
        .tenants
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let role = match (f.kind, i) {
                (FindingKind::Interference, 0) => "victim",
                (FindingKind::Interference, _) => "aggressor",
                (FindingKind::WaitingDemand, _) => "idle holder",
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
            .map(|(k, v)| {
                (
                    format::metric_name(k.as_str()),
                    metric_value(k.as_str(), *v, &a.funnel.currency),
                )
            })
            .collect(),
        charts: evidence.charts,
        tables: evidence.tables,
        action: evidence.action,
        recommendations: a
            .recommendations
            .iter()
            .filter(|r| {
                // A waiting-demand finding names idle holders anywhere in its pool: the
                // steps that reclaim or move them are its answer, on whatever node.
                r.findings.contains(&f.id)
                    || ((r.node == f.node || f.kind == FindingKind::WaitingDemand)
                        && r.tenants.iter().any(|t| f.tenants.contains(t)))
            })
            .map(|r| (r.id.clone(), r.summary.clone()))
            .collect(),
    }
}

/// A finding's number in its unit: shares and rates as percent, hours, GiB, money; counts
/// as whole numbers.
pub(super) fn metric_value(key: &str, v: f64, currency: &str) -> String {
    // Tenths first, as an alert's value is rounded (`Finding::headline`), so both read alike.
    let tenths = analytics::findings::tenths(v);
    if key.contains("share") || key.contains("rate") || key.ends_with("ratio") {
        // Percent in tenths first, as `Finding::headline` gives an interference alert.
        format!("{:.0} %", analytics::findings::tenths(v * 100.0))
    } else if key.contains("gpu_hours") {
        format!("{} GPU-h", format::num(tenths))
    } else if key.contains("hours") {
        format!("{} h", format::num(tenths))
    } else if key.contains("gib") {
        format!("{} GiB", format::num(tenths))
    } else if key.contains("cost") || key.contains("money") {
        format::money(v, currency)
    } else if key.ends_with("_gpu") {
        // As the finding's summary and its chart's legend give it.
        model::figures::gpu(v)
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format::num(v)
    }
}

#[cfg(test)]
mod tests {
    use super::metric_value;

    #[test]
    fn numbers_carry_their_units() {
        assert_eq!(
            metric_value("idle_share_of_allocation", 0.97, "USD"),
            "97 %"
        );
        assert_eq!(metric_value("idle_hours_in_runs", 138.2, "USD"), "138 h");
        assert_eq!(
            metric_value("allocated_gpu_hours", 24.0, "USD"),
            "24.0 GPU-h"
        );
        assert_eq!(metric_value("wasted_cost", 169.4, "USD"), "169 USD");
        assert_eq!(metric_value("idle_runs", 37.0, "USD"), "37");
        assert_eq!(metric_value("xid_errors", 5.0, "USD"), "5");
        assert_eq!(metric_value("memory_held_gib_p99", 6.0, "USD"), "6.0 GiB");
        // A share of a GPU reads as the summary and the chart give it (0.125 → 0.13, never
        // 0.10 from tenths first).
        for v in [0.125, 0.075, 0.425] {
            assert_eq!(
                metric_value("effective_p95_gpu", v, "USD"),
                model::figures::gpu(v)
            );
        }
        assert_eq!(metric_value("effective_p95_gpu", 0.125, "USD"), "0.13 GPU");
        // Rounded to tenths first, like an alert's value: 19.95 h reads 20.0 h on both.
        assert_eq!(metric_value("idle_hours_in_runs", 19.95, "USD"), "20.0 h");
        // 0.38453 is 38.5 % in tenths, shown "38 %" exactly as an alert value of 38.5 is.
        assert_eq!(
            metric_value("rate_drop", 0.38453, "USD"),
            format!("{:.0} %", 38.5_f64)
        );
    }
}
