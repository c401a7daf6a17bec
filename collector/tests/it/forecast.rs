//! The demand forecast through the store and the API — a scenario's four days read as
//! pool-team-hours that sum to the funnel, forecast per pool and team with a backtest one day
//! ahead, and `/api/v1/forecast` with its filters, bounds and team scope.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use simulator::{Fleet, Scenario};
use tower::ServiceExt;

const DAY_MS: i64 = 86_400_000;
const WEB_READER: &str = "web-reader-token-1";
const OTHER_READER: &str = "other-reader-token-1";

async fn get(router: &axum::Router, uri: &str, token: &str) -> (StatusCode, Value) {
    let req = Request::get(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_scenario_is_forecast_per_pool_and_team_and_served() {
    let t = crate::support::sqlite().await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/scenarios/consolidate-pool.toml"
    );
    let scenario = Scenario::from_toml(&std::fs::read_to_string(path).unwrap()).unwrap();
    let fleet = Fleet::new(scenario);
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - 4 * DAY_MS;
    let team_of = |t: &model::Tenant| t.namespace.clone();
    crate::analytics::load_with_teams(&t.store, &fleet, "forecast", from, to, &team_of).await;
    let cfg = analytics::Config::default();
    let (a, stats) = collector::analysis::run(
        &t.store,
        &cfg,
        std::time::Duration::from_secs(2 * 86_400),
        to,
    )
    .await
    .unwrap();
    // The pool-team-hours of the window add up to the funnel's allocated GPU-hours.
    let hours = t.store.use_hours(to - 2 * DAY_MS, to).await.unwrap();
    let allocated: f64 = hours.iter().map(|u| u.allocated).sum();
    let funnel = a.funnel.total.allocated_gpu_hours;
    assert!(
        (allocated - funnel).abs() < 1e-6 * funnel,
        "{allocated} vs {funnel}"
    );
    assert!(hours.iter().all(|u| u.team.as_deref() == Some("web")));
    assert_eq!(stats.forecast_hours, 96, "4 days, one pool and team");

    let f = a
        .forecast
        .as_ref()
        .expect("the analysis carries a forecast");
    assert_eq!((f.to_ms, f.horizon_h), (to, 4 * 168));
    use analytics::forecast::{Quantity, Scope};
    let pool = f
        .find(&Scope::Pool {
            cluster: "pool".into(),
            model: "NVIDIA L40S".into(),
        })
        .expect("the L40S pool");
    assert_eq!(pool.capacity, Some(6.0));
    let held = pool.projection(Quantity::Allocated).unwrap();
    // Five pods hold a GPU each all the time: a flat 5, forecast exactly.
    assert!((held.recent - 5.0).abs() < 0.05, "{}", held.recent);
    assert_eq!(
        held.model.as_ref().unwrap().period(),
        24,
        "four days: a daily season"
    );
    let acc = held.accuracy.as_ref().expect("a backtest one day ahead");
    assert_eq!(acc.ahead_h, 24);
    assert!(acc.mae < 0.05, "{acc:?}");
    assert!(pool.run_out.is_none(), "one GPU stays free");
    let used = pool.projection(Quantity::Used).unwrap();
    let used_acc = used.accuracy.as_ref().unwrap();
    assert!(used_acc.wape.unwrap() < 0.3, "{used_acc:?}");
    let team = f.find(&Scope::Team { team: "web".into() }).unwrap();
    assert_eq!(team.projection(Quantity::Allocated), Some(held));
    let waiting = pool.projection(Quantity::Waiting).unwrap();
    assert_eq!(waiting.recent, 0.0);

    collector::analysis::save(&t.store, &a, to, 48)
        .await
        .unwrap();
    let access: collector_shared::access::Settings = toml::from_str(&format!(
        r#"
        mode = "sign-in"
        [[tokens]]
        name = "web-dashboards"
        role = "viewer"
        token = "{WEB_READER}"
        teams = ["web"]
        [[tokens]]
        name = "fleet"
        role = "viewer"
        token = "{OTHER_READER}"
        "#
    ))
    .unwrap();
    let state = crate::support::default_state(t.store.clone())
        .with_access(access)
        .unwrap();
    let router = collector::router::router(state);
    // Unfiltered: both series, summarised without points.
    let (status, all) = get(&router, "/api/v1/forecast", OTHER_READER).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(all["count"], 2, "{all}");
    assert_eq!(all["horizon_hours"], 672);
    for s in all["forecasts"].as_array().unwrap() {
        for q in s["quantities"].as_array().unwrap() {
            assert_eq!(q["points"].as_array().unwrap().len(), 0);
        }
    }
    // One pool, one week: hourly points with the band.
    let (status, one) = get(
        &router,
        "/api/v1/forecast?pool=pool/NVIDIA%20L40S&weeks=1",
        OTHER_READER,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["count"], 1);
    let q = &one["forecasts"][0]["quantities"][0];
    assert_eq!(q["quantity"], "allocated");
    assert_eq!(q["points"].as_array().unwrap().len(), 168);
    assert_eq!(q["points"][0]["hour"], "2026-11-21T00:00:00.000Z");
    assert!(
        q["accuracy"]["sentence"]
            .as_str()
            .unwrap()
            .contains("1 day ahead")
    );
    // Bounds and names.
    for (uri, want) in [
        ("/api/v1/forecast?weeks=0", StatusCode::BAD_REQUEST),
        ("/api/v1/forecast?weeks=5", StatusCode::BAD_REQUEST),
        ("/api/v1/forecast?weeks=many", StatusCode::BAD_REQUEST),
        ("/api/v1/forecast?pool=L40S", StatusCode::BAD_REQUEST),
        ("/api/v1/forecast?pool=/L40S", StatusCode::BAD_REQUEST),
        ("/api/v1/forecast?from=now-7d", StatusCode::BAD_REQUEST),
        ("/api/v1/forecast?pool=pool/H100", StatusCode::NOT_FOUND),
        ("/api/v1/forecast?team=nobody", StatusCode::NOT_FOUND),
    ] {
        assert_eq!(get(&router, uri, OTHER_READER).await.0, want, "{uri}");
    }
    // A team-scoped reader sees its team's series, not the pool's (every team's use).
    let (status, mine) = get(&router, "/api/v1/forecast", WEB_READER).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(mine["count"], 1, "{mine}");
    assert_eq!(mine["forecasts"][0]["scope"]["kind"], "team");
    let (status, _) = get(
        &router,
        "/api/v1/forecast?pool=pool/NVIDIA%20L40S",
        WEB_READER,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
