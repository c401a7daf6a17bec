//! `/tenants` and `/teams`: allocated and effective GPU-hours, waste and cost per tenant or team.

use super::page::*;

#[derive(Debug, Deserialize)]
pub struct UseQuery {
    pub q: Option<String>,
    /// `24h`, `7d` or `30d` back from now; absent: the scheduled analysis' window.
    pub range: Option<String>,
    /// A custom range: RFC 3339, a date (`2026-12-01`) or a date and time
    /// (`2026-12-01T06:00`, UTC); `to` absent is now.
    pub from: Option<String>,
    pub to: Option<String>,
    /// `csv`: the table as a download, with the same rows and columns.
    pub format: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
}

async fn usage(state: DashboardState, caller: Caller, q: UseQuery, teams: bool) -> PageOrCsv {
    let csv = wants_csv(q.format.as_deref())?;
    let a = analysis_or_wait(&state).await?;
    let tenants = state.shared.store.tenants().await?;
    let needle = q.q.clone().unwrap_or_default().to_lowercase();
    let (chosen, notice) = match picked_range(&state, &q.range, &q.from, &q.to) {
        Ok(c) => (c, None),
        Err(n) => (None, Some(n)),
    };
    // The picked range's funnel, else the analysis' own (borrowed, not copied).
    let ranged;
    let funnel: &analytics::Funnel = match chosen {
        Some((from, to, _)) => {
            ranged = range_use(&state, from, to).await?;
            &ranged.funnel
        }
        None => &a.funnel,
    };
    let mut rows: Vec<pages::UseRow> = use_rows(&a, funnel, &tenants, teams)
        .into_iter()
        .filter(|r| {
            caller.sees_team(if teams {
                Some(&r.key)
            } else {
                team_opt(&r.team)
            })
        })
        .filter(|r| {
            needle.is_empty()
                || r.name.to_lowercase().contains(&needle)
                || r.key.to_lowercase() == needle
                || r.team.to_lowercase().contains(&needle)
        })
        .collect();
    let sq = SortQuery {
        sort: q.sort.clone(),
        dir: q.dir.clone(),
    };
    sorted(&mut rows, &sq, "waste", |r, k| match k {
        "name" => text(&r.name),
        "team" => text(&r.team),
        "allocated" => num(r.allocated),
        "effective" => num(r.effective),
        "borrowed" => num(r.borrowed),
        "ratio" => num(r.ratio.unwrap_or(-1.0)),
        "cost" => num(r.cost),
        "waste_cost" => num(r.waste_cost),
        "findings" => num(r.findings as f64),
        _ => num(r.waste),
    });
    if csv {
        let body = pages::usage_csv(teams, &a.funnel.currency, &rows);
        return Ok(csv_download(if teams { "teams" } else { "tenants" }, body));
    }
    let title = if teams { "Teams" } else { "Tenants" };
    let (range_key, from_s, to_s) = match &chosen {
        Some((_, _, shown)) => shown.clone(),
        None => Default::default(),
    };
    let base = query_string(&[
        ("q", q.q.as_deref().unwrap_or("")),
        ("range", &range_key),
        ("from", &from_s),
        ("to", &to_s),
    ]);
    let mut page = frame(&state, &caller, title);
    page.notice = notice;
    Ok(Html(pages::usage(
        page,
        pages::UseView {
            teams,
            window: format!(
                "{} to {} UTC{}",
                time(funnel.from_ms),
                time(funnel.to_ms),
                if chosen.is_some() {
                    " (the selected range; findings: the scheduled analysis')"
                } else {
                    " (the scheduled analysis' window)"
                }
            ),
            range: range_key,
            ranges: ranges(),
            from: from_s,
            to: to_s,
            currency: a.funnel.currency.clone(),
            query: q.q.unwrap_or_default(),
            rows,
        },
        sort_state(base, &sq, "waste"),
    ))
    .into_response())
}

pub async fn tenants(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<UseQuery>,
) -> PageOrCsv {
    usage(state, caller, q, false).await
}

pub async fn teams(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<UseQuery>,
) -> PageOrCsv {
    usage(state, caller, q, true).await
}

/// One row per tenant (or team) of the analysis' funnel, with its findings counted.
fn use_rows(
    a: &Analysis,
    funnel: &analytics::Funnel,
    tenants: &[store::TenantRecord],
    teams: bool,
) -> Vec<pages::UseRow> {
    let meta: HashMap<&str, &store::TenantRecord> = tenants.iter().map(|t| (t.key(), t)).collect();
    let team_of = team_map(tenants);
    let mut findings: HashMap<&str, usize> = HashMap::new();
    for f in &a.findings {
        if teams {
            for t in finding_teams(f, &team_of) {
                *findings.entry(t).or_default() += 1;
            }
        } else {
            for t in &f.tenants {
                *findings.entry(t.as_str()).or_default() += 1;
            }
        }
    }
    let source = if teams {
        &funnel.by_team
    } else {
        &funnel.by_tenant
    };
    source
        .iter()
        .map(|r| {
            let m = meta.get(r.key.as_str());
            let name = if teams {
                r.key.clone()
            } else {
                m.map_or_else(|| name_of(a, &r.key), |t| t.display_name())
            };
            pages::UseRow {
                key: r.key.clone(),
                name,
                team: m.and_then(|t| t.team.clone()).unwrap_or_else(|| "–".into()),
                kind: m
                    .map(|t| t.tenant.kind.as_str().to_string())
                    .unwrap_or_default(),
                allocated: r.allocated_gpu_hours,
                effective: r.effective_gpu_hours,
                ratio: r.effective_ratio,
                waste: r.waste_gpu_hours,
                borrowed: r.borrowed_gpu_hours,
                cost: r.cost,
                waste_cost: r.waste_cost,
                findings: findings.get(r.key.as_str()).copied().unwrap_or(0),
            }
        })
        .collect()
}
