//! One set of facts: a day of the demo's fleet, analysed, then every number shown for the
//! same thing in two places compared — an alert's value and its finding's page, a team's
//! finding count and the findings list it links to, a node with hardware findings and its
//! status, money on the overview and on a finding's page.

use analytics::Measure;
use collector::alerts::rules;
use collector::alerts::settings::Settings;
use web::format::{money, num};

use crate::support::page;

/// Rows of the page's first table body.
fn body_rows(html: &str) -> usize {
    let Some(start) = html.find("<tbody>") else {
        return 0;
    };
    let end = html[start..].find("</tbody>").unwrap() + start;
    // An empty table's one row says "None: …".
    if html[start..end].contains(">None: ") {
        return 0;
    }
    html[start..end].matches("<tr").count()
}

/// Findings a list page links in its first table: a row each, or a link in the row of the
/// same finding on another GPU of the node.
fn listed_findings(html: &str) -> usize {
    let Some(start) = html.find("<tbody>") else {
        return 0;
    };
    let end = html[start..].find("</tbody>").unwrap() + start;
    html[start..end].matches("href=\"/findings/").count()
}

/// How a finding's page shows its headline number (the alert's value).
fn shown(kind: analytics::FindingKind, v: f64) -> String {
    use analytics::FindingKind::*;
    match kind {
        IdleAllocation => format!("{} h", num(v)),
        Underutilized => format!("{} GPU-h", num(v)),
        Interference => format!("{v:.0} %"),
        _ => format!("{v:.0}"),
    }
}

#[tokio::test]
async fn alerts_pages_and_counts_agree() {
    let (state, _t, a, to) = day_of_the_fleet().await;
    use analytics::FindingKind;
    for kind in [FindingKind::IdleAllocation, FindingKind::Underutilized] {
        assert!(
            a.findings.iter().any(|f| f.kind == kind),
            "the day has {kind:?} findings to compare"
        );
    }

    // Every alert raised from a finding carries the number the finding's page shows.
    let rules = Settings::default().effective_rules();
    let facts = rules::Facts {
        analysis: Some(&a),
        now_ms: to,
        keep_ms: 86_400_000,
        reclaim_cases: &[],
        ..Default::default()
    };
    let conditions = rules::evaluate(&rules, &facts);
    let mut compared = 0;
    for c in &conditions {
        let label = |k: &str| c.labels.get(k).map(String::as_str);
        let Some(f) = a.findings.iter().find(|f| {
            label("node") == Some(f.node.as_str())
                && label("gpu_uuid") == f.gpu.as_deref()
                && label("tenant") == f.tenants.first().map(String::as_str)
                && c.annotations["summary"] == f.summary
        }) else {
            continue;
        };
        assert_eq!(c.value, f.headline().0, "{}: alert value", f.id);
        if matches!(
            f.kind,
            FindingKind::IdleAllocation | FindingKind::Underutilized | FindingKind::Interference
        ) {
            let html = page(&state, &format!("/findings/{}", f.id)).await;
            let want = shown(f.kind, c.value);
            assert!(
                html.contains(&format!(">{want}<")),
                "{}: the page does not show the alert's {want}",
                f.id
            );
        }
        compared += 1;
    }
    assert!(compared >= 3, "alerts compared: {compared}");

    // A team's finding count is the number of findings its link lists.
    let teams = page(&state, "/teams").await;
    let mut counted = 0;
    for part in teams.split("href=\"/findings?team=").skip(1) {
        let (team, rest) = part.split_once('"').unwrap();
        // The team's name links there too; the count is the link whose text is a number.
        let Ok(n) = rest[1..rest.find('<').unwrap()].parse::<usize>() else {
            continue;
        };
        let list = page(&state, &format!("/findings?team={team}")).await;
        assert_eq!(listed_findings(&list), n, "team {team}");
        assert!(body_rows(&list) <= n);
        counted += n;
    }
    assert!(counted > 0, "teams have findings");
    // Every finding is on the list, and a tenant's same finding on several GPUs of a node
    // shares a row.
    let all = page(&state, "/findings").await;
    assert_eq!(listed_findings(&all), a.findings.len());
    for f in &a.findings {
        assert!(
            all.contains(&format!("href=\"/findings/{}\"", f.id)),
            "{}",
            f.id
        );
    }
    let mut groups = std::collections::BTreeSet::new();
    for f in &a.findings {
        // Findings without a tenant or a GPU (a node's, a GPU's hardware) stay rows of their own.
        let tenant = match (f.tenants.first(), &f.gpu) {
            (Some(t), Some(_)) => t.clone(),
            _ => f.id.clone(),
        };
        groups.insert((f.kind, f.severity, f.node.clone(), tenant));
    }
    assert_eq!(
        body_rows(&all),
        groups.len(),
        "one row per tenant, kind, severity and node"
    );
    // The interference aggressor's team counts it too.
    if let Some(f) = a
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::Interference)
    {
        let list = page(&state, "/findings?team=ml-research").await;
        assert!(list.contains(&f.id), "the aggressor's team lists {}", f.id);
    }

    // A node with hardware findings is not shown as plainly reporting.
    let nodes = page(&state, "/nodes").await;
    for f in a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Hardware)
    {
        let row = &nodes[nodes.find(&format!(">{}</a>", f.node)).unwrap()..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(row.contains("hardware errors"), "{}: {row}", f.node);
    }
    // Sharing modes read as words, as the recommendations name them.
    assert!(
        nodes.contains("<td>time slicing</td>") && nodes.contains("<td>MIG</td>"),
        "{nodes}"
    );

    // Money: one format everywhere, the same amounts for the same thing.
    let cur = &a.funnel.currency;
    let overview = page(&state, "/").await;
    for amount in [a.funnel.total.waste_cost, a.funnel.total.cost] {
        assert!(
            overview.contains(&money(amount, cur)),
            "{}",
            money(amount, cur)
        );
    }
    // The overview's top lists: a tenant's GPUs of one node with the same finding are one
    // row saying how many (the default fleet's image-gen pod holds two L40S GPUs, both
    // underused), never two rows an operator cannot tell apart.
    let start = overview
        .find("id=\"h-under\"")
        .expect("the underutilized list");
    let under = &overview[start..start + overview[start..].find("</section>").unwrap()];
    let rows: Vec<&str> = under.split("<tr").skip(2).collect();
    let mut per_node: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for f in a
        .findings
        .iter()
        .filter(|f| f.kind == analytics::FindingKind::Underutilized)
    {
        *per_node.entry((&f.tenants[0], &f.node)).or_default() += 1;
    }
    let shared: Vec<_> = per_node.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        !shared.is_empty(),
        "the fleet has a tenant underused on two GPUs of a node"
    );
    for ((tenant, node), n) in shared {
        let name = a.tenant_names.get(*tenant).map_or(*tenant, String::as_str);
        let mine: Vec<&&str> = rows
            .iter()
            // Names may wrap at `<wbr>` marks.
            .filter(|r| r.replace("<wbr>", "").contains(name) && r.contains(node))
            .collect();
        assert_eq!(mine.len(), 1, "one row for {name} on {node}: {under}");
        let row = mine[0];
        assert!(
            row.contains(node) && row.contains(&format!("({n}\u{a0}GPUs)")),
            "{row}"
        );
    }
    let mut money_compared = 0;
    for r in &a.funnel.by_tenant {
        let mine: Vec<&analytics::Finding> = a
            .findings
            .iter()
            .filter(|f| f.tenants.first() == Some(&r.key))
            .collect();
        let [f] = mine.as_slice() else { continue };
        let Some(w) = f.metrics.get(&Measure::WastedCost) else {
            continue;
        };
        assert_eq!(money(*w, cur), money(r.waste_cost, cur), "{}", r.key);
        let html = page(&state, &format!("/findings/{}", f.id)).await;
        assert!(html.contains(&money(*w, cur)), "{}", f.id);
        money_compared += 1;
    }
    assert!(money_compared >= 1);
}

/// A day of the demo's fleet up to `to`, analysed, behind an open collector.
async fn day_of_the_fleet() -> (
    collector::state::AppState,
    crate::support::TestStore,
    analytics::Analysis,
    i64,
) {
    let fleet = crate::analytics::default_fleet();
    let t = crate::support::sqlite().await;
    let now = collector::now_ms();
    let to = now - now % 60_000;
    let teams = collector_shared::teams::TeamsConfig::default();
    crate::analytics::load_with_teams(&t.store, &fleet, "facts", to - 24 * 3_600_000, to, &|t| {
        teams.team_of(t)
    })
    .await;
    let a = collector::analysis::scheduled(&t.store, &Default::default(), &Default::default())
        .await
        .unwrap()
        .expect("an analysis");
    (crate::support::default_state(t.store.clone()), t, a, to)
}

fn get(uri: &str) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::get(uri)
        .body(axum::body::Body::empty())
        .unwrap()
}

async fn send(
    state: &collector::state::AppState,
    req: axum::http::Request<axum::body::Body>,
) -> (axum::http::StatusCode, axum::http::HeaderMap, String) {
    let resp = tower::ServiceExt::oneshot(collector::router::router(state.clone()), req)
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// Every table of every page downloads — the overview's, a node's, a step's, a
/// finding's, a team's, the plan's, the alerts' and the reports' — each link answers its table
/// as CSV, and a table the page does not have is a 400 that lists those it has.
#[tokio::test]
async fn every_table_of_a_page_downloads_by_name() {
    let (state, _t, a, _) = day_of_the_fleet().await;
    use web::format::enc;
    let finding = enc(&a.findings.first().expect("a finding").id);
    let node = enc(&a
        .findings
        .iter()
        .find(|f| !f.node.is_empty())
        .expect("a node")
        .node);
    let team = enc(&a.funnel.by_team.first().expect("a team").key);
    let step = Some(enc(&a.recommendations.first().expect("a step").id));
    let mut checked = 0;
    let mut pages = vec![
        ("/".to_owned(), 4),
        ("/recommendations".to_owned(), 1),
        (format!("/findings/{finding}"), 1),
        (format!("/nodes/{node}"), 2),
        (format!("/teams/{team}"), 2),
        ("/alerts".to_owned(), 2),
    ];
    pages.extend(step.map(|s| (format!("/recommendations/{s}"), 2)));
    for (page, at_least) in pages {
        let (code, _, html) = send(&state, get(&page)).await;
        assert_eq!(code, axum::http::StatusCode::OK, "{page}: {html}");
        let links: std::collections::BTreeSet<String> = html
            .split("href=\"")
            .skip(1)
            .map(|h| h.split('"').next().unwrap().replace("&amp;", "&"))
            .filter(|h| h.contains("format=csv"))
            .collect();
        assert!(links.len() >= at_least, "{page}: {links:?}");
        for link in &links {
            let (code, h, body) = send(&state, get(link)).await;
            assert_eq!(code, axum::http::StatusCode::OK, "{link}: {body}");
            assert_eq!(
                h[axum::http::header::CONTENT_TYPE],
                "text/csv; charset=utf-8",
                "{link}"
            );
            assert!(
                body.ends_with("\r\n") && !body.starts_with(','),
                "{link}: {body}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked} tables checked");
    // The overview's tables by name: the teams' waste has a row per team with a figure.
    let (_, h, body) = send(&state, get("/?format=csv&table=teams")).await;
    assert!(body.starts_with("Team,Waste (USD),Waste GPU-h,"), "{body}");
    assert!(
        h[axum::http::header::CONTENT_DISPOSITION]
            .to_str()
            .unwrap()
            .contains("gpulens-overview-teams.csv")
    );
    // A table the page does not have is named back with those it has.
    let (code, _, body) = send(&state, get("/?format=csv&table=%3Cscript%3E")).await;
    assert_eq!(code, axum::http::StatusCode::BAD_REQUEST);
    assert!(
        body.contains("waiting, capacity, teams, wasters, idle, underutilized, trend"),
        "{body}"
    );
    assert!(!body.contains("<script>"), "{body}");
}
