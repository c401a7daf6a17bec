//! Cost exports: the demo scenario's week as FOCUS 1.2 rows that parse with the specification's
//! column names and types, whose cost, idle cost, energy and emissions add up to the
//! analysis' funnel of the same range; `/api/v1/cost/focus` with its bounds and team scope;
//! text cells that cannot run as spreadsheet formulas.

use std::collections::BTreeMap;

use analytics::focus::{COLUMNS, check_cell};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use collector::analysis::cost::{self, Only};
use tower::ServiceExt;

const DAY_MS: i64 = 86_400_000;
const ML_READER: &str = "ml-reader-token-1";
const FLEET_READER: &str = "fleet-reader-token-1";

/// RFC 4180 records of `text` (quoted cells, doubled quotes, CRLF line ends).
fn records(text: &str) -> Vec<Vec<String>> {
    let (mut out, mut row, mut cell) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut cell)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut cell));
                out.push(std::mem::take(&mut row));
            }
            (false, c) => cell.push(c),
        }
    }
    assert!(
        !quoted && cell.is_empty() && row.is_empty(),
        "a record is cut short"
    );
    out
}

/// Checks every cell against its FOCUS type; the sums of the decimal columns by name.
fn parse_focus(text: &str) -> (usize, BTreeMap<String, f64>, Vec<Vec<String>>) {
    let rows = records(text);
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(rows[0], names, "the header is FOCUS' column names");
    let mut sums = BTreeMap::new();
    for (i, r) in rows[1..].iter().enumerate() {
        assert_eq!(r.len(), COLUMNS.len(), "row {i}");
        for (c, v) in COLUMNS.iter().zip(r) {
            check_cell(c, Some(v.as_str())).unwrap_or_else(|e| panic!("row {i}: {e}"));
            if c.kind == analytics::focus::Kind::Decimal && !v.is_empty() {
                *sums.entry(c.name.to_owned()).or_insert(0.0) += v.parse::<f64>().unwrap();
            }
        }
    }
    (rows.len() - 1, sums, rows[1..].to_vec())
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
        "{what}: {a} against {b}"
    );
}

#[tokio::test]
async fn a_scenarios_focus_rows_parse_and_add_up_to_the_funnel() {
    let t = crate::support::sqlite().await;
    let fleet = crate::analytics::default_fleet();
    // Two days of the fleet: enough for every pool, cluster and kind of charge to have rows.
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - 2 * DAY_MS;
    let team_of = |t: &model::Tenant| t.namespace.clone();
    crate::analytics::load_with_teams(&t.store, &fleet, "cost", from, to, &team_of).await;
    let mut cfg = analytics::Config::default();
    cfg.carbon.g_per_kwh = Some(400.0);
    cfg.carbon
        .clusters
        .insert(fleet.scenario.cluster.clone(), 250.0);
    cfg.price_rules.push(analytics::prices::PriceRule {
        cluster: None,
        model: Some("H100".into()),
        sharing: Some(model::inventory::Sharing::Mig),
        price: 3.1,
    });
    let (a, _) = collector::analysis::run(
        &t.store,
        &cfg,
        std::time::Duration::from_secs(2 * 86_400),
        to,
    )
    .await
    .unwrap();
    let rows = cost::charges(&t.store, &cfg, from, to, &Only::default())
        .await
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    let (n, sums, cells) = parse_focus(&cost::csv(&rows, &cfg.currency));
    assert_eq!(n, rows.len());
    assert!(n > 10, "{n} rows");
    let f = &a.funnel.total;
    close(sums["BilledCost"], f.cost, "billed cost");
    close(sums["EffectiveCost"], f.cost, "effective cost");
    close(sums["x_IdleCost"], f.waste_cost, "idle cost");
    close(
        sums["x_UsageBasedCost"],
        f.cost - f.waste_cost,
        "usage-based cost",
    );
    close(
        sums["ConsumedQuantity"],
        f.allocated_gpu_hours,
        "allocated GPU-hours",
    );
    close(
        sums["x_EffectiveGpuHours"],
        f.effective_gpu_hours,
        "effective GPU-hours",
    );
    let tenants_kwh: f64 = a
        .funnel
        .by_tenant
        .iter()
        .filter_map(|r| r.energy)
        .map(|e| e.kwh)
        .sum();
    close(sums["x_EnergyKWh"], tenants_kwh, "energy charged");
    let co2e: f64 = a
        .funnel
        .by_tenant
        .iter()
        .filter_map(|r| r.energy?.co2e_kg)
        .sum();
    close(sums["x_EmissionsKgCO2e"], co2e, "emissions");
    close(co2e, tenants_kwh * 0.25, "the cluster's 250 g/kWh");
    // Every team line's cost is its rows'.
    let team_at = COLUMNS
        .iter()
        .position(|c| c.name == "SubAccountName")
        .unwrap();
    let cost_at = COLUMNS.iter().position(|c| c.name == "BilledCost").unwrap();
    for line in &a.funnel.by_team {
        let mine: f64 = cells
            .iter()
            .filter(|r| r[team_at] == line.key)
            .map(|r| r[cost_at].parse::<f64>().unwrap())
            .sum();
        close(mine, line.cost, &line.key);
    }
    // A day a row covers is within the range, and the billing period holds it.
    let at = |name: &str| COLUMNS.iter().position(|c| c.name == name).unwrap();
    for r in &cells {
        assert!(r[at("ChargePeriodStart")].as_str() >= "2026-11-14T00:00:00Z");
        assert!(r[at("ChargePeriodEnd")].as_str() <= "2026-11-21T00:00:00Z");
        assert_eq!(r[at("BillingPeriodStart")], "2026-11-01T00:00:00Z");
        assert_eq!(r[at("BillingPeriodEnd")], "2026-12-01T00:00:00Z");
        assert_eq!(r[at("ChargeCategory")], "Usage");
    }
    // Each sharing mechanism is charged its share, as attributed: a MIG slice, a time-slicing or
    // MPS replica is a fraction of the GPU (not a whole one, as OpenCost charges replicas), and
    // a GPU's tenants together are charged at most the whole GPU's day.
    let mut per_gpu_day: BTreeMap<(String, i64), f64> = BTreeMap::new();
    let mut fractional: BTreeMap<model::inventory::Sharing, usize> = BTreeMap::new();
    for r in &rows {
        let hours = (r.to_ms - r.from_ms) as f64 / 3.6e6;
        *per_gpu_day.entry((r.gpu.clone(), r.from_ms)).or_default() += r.allocated_gpu_hours;
        if r.allocated_gpu_hours > 0.0 && r.allocated_gpu_hours < 0.99 * hours {
            *fractional.entry(r.sharing).or_default() += 1;
        }
    }
    for ((gpu, day), held) in &per_gpu_day {
        assert!(
            *held <= 24.0 + 1e-6,
            "{gpu} on {day}: {held} GPU-hours charged in a day"
        );
    }
    for sharing in [
        model::inventory::Sharing::Mig,
        model::inventory::Sharing::TimeSlicing,
    ] {
        assert!(
            fractional.get(&sharing).is_some_and(|n| *n > 0),
            "{sharing}: {fractional:?}"
        );
    }
    // The price rule: MIG instances of H100s at 3.1.
    let mig: Vec<_> = rows
        .iter()
        .filter(|r| r.sharing == model::inventory::Sharing::Mig)
        .collect();
    assert!(
        mig.iter()
            .all(|r| !r.model.contains("H100") || r.price == 3.1)
    );
    // Bounds.
    for (a_from, a_to) in [(to, to), (to - 32 * DAY_MS, to)] {
        assert!(matches!(
            cost::charges(&t.store, &cfg, a_from, a_to, &Only::default()).await,
            Err(cost::Refused::Bounds(_))
        ));
    }
    // Served: the same CSV, a team-scoped reader's rows only its team's.
    let access: collector_shared::access::Settings = toml::from_str(&format!(
        r#"
        mode = "sign-in"
        [[tokens]]
        name = "ml"
        role = "viewer"
        token = "{ML_READER}"
        teams = ["ml-research"]
        [[tokens]]
        name = "fleet"
        role = "viewer"
        token = "{FLEET_READER}"
        "#
    ))
    .unwrap();
    let state = crate::support::default_state(t.store.clone())
        .with_access(access)
        .unwrap();
    let router = collector::router::router(state);
    let get = |uri: String, token: &'static str| {
        let router = router.clone();
        async move {
            let req = Request::get(uri)
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .body(Body::empty())
                .unwrap();
            let resp = router.oneshot(req).await.unwrap();
            let status = resp.status();
            let ct = resp
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned());
            let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, ct, String::from_utf8(b.to_vec()).unwrap())
        }
    };
    let range = format!("from={from}&to={to}");
    let (status, ct, all) = get(format!("/api/v1/cost/focus?{range}"), FLEET_READER).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert!(ct.unwrap().starts_with("text/csv"));
    let (n_all, sums_all, _) = parse_focus(&all);
    assert_eq!(n_all, n);
    // Served with the default prices: the price rule's MIG rows cost less there.
    assert!(sums_all["BilledCost"] > 0.0 && sums_all["BilledCost"] <= f.cost + 1e-6);
    let (_, _, mine) = get(format!("/api/v1/cost/focus?{range}"), ML_READER).await;
    let (n_mine, _, mine_rows) = parse_focus(&mine);
    assert!(n_mine > 0 && n_mine < n, "{n_mine} of {n}");
    assert!(mine_rows.iter().all(|r| r[team_at] == "ml-research"));
    let (_, _, other) = get(format!("/api/v1/cost/focus?{range}&team=media"), ML_READER).await;
    assert_eq!(
        parse_focus(&other).0,
        0,
        "another team's rows stay out of scope"
    );
    for (q, want) in [
        (
            format!("from={}&to={to}", to - 40 * DAY_MS),
            StatusCode::BAD_REQUEST,
        ),
        (format!("from={to}&to={from}"), StatusCode::BAD_REQUEST),
        (format!("{range}&cluster="), StatusCode::BAD_REQUEST),
        (format!("{range}&tenant=x"), StatusCode::BAD_REQUEST),
        ("from=yesterday".to_owned(), StatusCode::BAD_REQUEST),
    ] {
        assert_eq!(
            get(format!("/api/v1/cost/focus?{q}"), FLEET_READER).await.0,
            want,
            "{q}"
        );
    }
}

#[test]
fn names_that_look_like_formulas_stay_text() {
    let charge = analytics::focus::Charge {
        from_ms: 0,
        to_ms: DAY_MS,
        cluster: "=HYPERLINK(\"http://x\")".into(),
        node: "+node".into(),
        gpu: "@gpu".into(),
        gpu_index: 0,
        model: "-H100".into(),
        sharing: model::inventory::Sharing::Exclusive,
        team: "=1+1".into(),
        tenant: "pod/\"quoted\",comma".into(),
        tenant_name: "\tname".into(),
        price: 2.5,
        allocated_gpu_hours: 1.0,
        effective_gpu_hours: 0.5,
        energy_kwh: None,
        idle_energy_kwh: None,
        co2e_kg: None,
    };
    let text = cost::csv(&[charge], "USD");
    let (n, sums, rows) = parse_focus(&text);
    assert_eq!(n, 1);
    close(sums["BilledCost"], 2.5, "cost");
    close(sums["x_IdleCost"], 1.25, "idle cost");
    for cell in &rows[0] {
        assert!(
            !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
            "{cell:?} in {text}"
        );
    }
    assert!(
        rows[0]
            .iter()
            .any(|c| c == "pod/\"quoted\",comma" || c.contains("quoted"))
    );
}
