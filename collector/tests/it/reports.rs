//! Weekly reports from a simulated fleet's history (the demo's scenario): the report's totals
//! match the funnel API for the same week, the HTML is one self-contained file, the CSV has
//! the documented columns, and the API lists and serves what was stored.

use axum::http::StatusCode;
use collector::reports::{self, week::IsoWeek};
use collector::state::AppState;

use crate::support::get;

const DAY_MS: i64 = 86_400_000;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_a_weeks_report_matches_the_funnel_api() {
    let fleet = crate::analytics::default_fleet();
    let t = crate::support::sqlite().await;
    let week: IsoWeek = "2026-W46".parse().unwrap();
    let tz = reports::week::zone("UTC").unwrap();
    let (from, to) = week.bounds(&tz);
    // The week and the last day of the one before (for the trend), every minute as the demo;
    // the README's sample (GPULENS_WRITE_SAMPLE) gets the whole week before.
    let sample = std::env::var("GPULENS_WRITE_SAMPLE").ok();
    let start = from - if sample.is_some() { 7 } else { 1 } * DAY_MS;
    // Teams from namespaces and Slurm accounts, as a collector without a team map does.
    let teams = collector::config::TeamsConfig::default();
    let step = 60_000;
    let t0 = std::time::Instant::now();
    for node in 0..fleet.nodes.len() {
        let instants: Vec<i64> = (0..)
            .map(|i| start + i * step)
            .take_while(|&x| x < to)
            .collect();
        for (seq, chunk) in instants.chunks(240).enumerate() {
            let b = fleet.batch(node, "report", seq as u64 + 1, chunk, step as u32);
            t.store.ingest(&b, to, &|x| teams.team_of(x)).await.unwrap();
        }
    }
    t.store.rollup(to).await.unwrap();
    eprintln!("history stored in {:.1}s", t0.elapsed().as_secs_f64());

    let cfg = analytics::Config::default();
    let now = to + DAY_MS;
    // Not before the week is over.
    let early = reports::generate(&t.store, &cfg, week, "UTC", to - 1, &mut ()).await;
    assert!(
        matches!(early, Err(reports::ReportError::NotOver { .. })),
        "{early:?}"
    );
    // The schedule makes it an hour after the week ends, and announces it.
    let hook = crate::alerts::Hook::start().await;
    let settings = reports::Settings {
        external_url: Some("https://gpulens.example.com".into()),
        webhook: Some(reports::Webhook {
            url: collector::config::Secret(hook.url("/reports")),
            kind: "json".into(),
            secret: None,
        }),
        ..reports::Settings::default()
    };
    // Within the hour's delay the last complete week is still the one before.
    let before = reports::scheduled(
        &t.store,
        &settings,
        &cfg,
        to + 1_800_000,
        &Default::default(),
    )
    .await
    .unwrap()
    .expect("the week before had a day of data");
    assert_eq!(before.week, "2026-W45");
    // (With GPULENS_WRITE_SAMPLE it has the whole week: not partial.)
    assert_eq!(
        before.summary.starts_with("Partial week:"),
        sample.is_none(),
        "a week with a day of data says so first in the list and the message: {}",
        before.summary
    );
    let stored = reports::scheduled(&t.store, &settings, &cfg, now, &Default::default())
        .await
        .unwrap()
        .expect("the week's report");
    assert_eq!(stored.week, "2026-W46");
    assert!(
        !stored.summary.contains("Partial week"),
        "{}",
        stored.summary
    );
    let posted = hook.bodies("/reports");
    assert_eq!(posted.len(), 2);
    assert_eq!(posted[1]["week"], "2026-W46");
    assert_eq!(posted[1]["summary"], stored.summary);
    assert_eq!(
        posted[1]["html"],
        "https://gpulens.example.com/api/v1/reports/2026-W46?format=html&timezone=UTC"
    );
    eprintln!("report made in {:.1}s", t0.elapsed().as_secs_f64());
    let data: reports::content::ReportData = serde_json::from_str(&stored.data).unwrap();
    assert_eq!((data.from_ms, data.to_ms), (from, to));
    assert!(data.fleet.allocated_gpu_hours > 0.0);
    let prev = data.previous.as_ref().expect("the week before had data");
    assert!(prev.allocated_gpu_hours > 0.0);
    assert!(!data.idle.is_empty(), "the scenario has idle notebooks");

    // The funnel API for the same week says the same.
    let state = AppState::new(
        t.store.clone(),
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let (code, _, body) = get(
        &state,
        &format!(
            "/api/v1/funnel?from={}&to={}",
            model::time::rfc3339(from),
            model::time::rfc3339(to)
        ),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let api: serde_json::Value = serde_json::from_str(&body).unwrap();
    let total = &api["funnel"]["total"];
    for (field, ours) in [
        ("allocated_gpu_hours", data.fleet.allocated_gpu_hours),
        ("active_gpu_hours", data.fleet.active_gpu_hours),
        ("effective_gpu_hours", data.fleet.effective_gpu_hours),
        ("waste_gpu_hours", data.fleet.waste_gpu_hours),
        ("cost", data.fleet.cost),
        ("capacity_gpu_hours", data.fleet.capacity_gpu_hours.unwrap()),
    ] {
        assert!(
            close(total[field].as_f64().unwrap(), ours),
            "{field}: API {} vs report {ours}",
            total[field]
        );
    }
    // Teams add up to the fleet.
    let teams: f64 = data.teams.iter().map(|r| r.allocated_gpu_hours).sum();
    assert!(close(teams, data.fleet.allocated_gpu_hours));

    // The CSV: documented header, 16 columns, the fleet row equal to the report.
    let lines: Vec<&str> = stored.csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], reports::csv::COLUMNS.join(","));
    let fleet_row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(fleet_row.len(), 16);
    // The fleet's energy, drawn by the simulated GPUs' power; no grid intensity, no emissions.
    let energy = data.fleet.energy.expect("the simulated GPUs report power");
    assert!(close(fleet_row[13].parse::<f64>().unwrap(), energy.kwh));
    assert_eq!(fleet_row[15], "");
    assert_eq!(&fleet_row[..3], ["2026-W46", "fleet", "all"].as_slice());
    assert!(close(
        fleet_row[4].parse::<f64>().unwrap(),
        data.fleet.allocated_gpu_hours
    ));
    assert_eq!(lines[2].split(',').nth(1), Some("fleet_previous_week"));
    let sections: std::collections::BTreeSet<&str> = lines[1..]
        .iter()
        .filter_map(|l| l.split(',').nth(1))
        .collect();
    for s in ["fleet", "fleet_previous_week", "team", "model", "node"] {
        assert!(sections.contains(s), "{s} missing");
    }

    // The HTML: one file, nothing fetched from elsewhere, charts inline, every section.
    let html = &stored.html;
    assert!(html.starts_with("<!doctype html>"));
    for banned in ["<script", "src=", "<link", "@import", "url("] {
        assert!(
            !html.contains(banned),
            "{banned} in a self-contained report"
        );
    }
    assert!(html.matches("<svg").count() >= 2);
    for heading in [
        "The fleet funnel",
        "Teams, namespaces and accounts",
        "Top idle allocations",
        "Interference incidents",
        "Open recommendations",
        "Per GPU model",
        "Per node",
    ] {
        assert!(html.contains(heading), "{heading} missing");
    }
    assert!(html.contains("@media print"));
    // Read as the dashboard reads it: "2,085 GPU-h".
    let allocated = model::figures::quantity(data.fleet.allocated_gpu_hours);
    assert!(
        html.contains(&format!("<b>{allocated} GPU-h</b>")),
        "{allocated}"
    );

    // The README's sample is this report: GPULENS_WRITE_SAMPLE=path writes it.
    if let Some(path) = &sample {
        std::fs::write(path, html).unwrap();
        std::fs::write(
            std::path::Path::new(path).with_extension("csv"),
            &stored.csv,
        )
        .unwrap();
    }

    // Listed and served by the API.
    let state = state.with_reports(reports::Settings::default());
    let (code, _, body) = get(&state, "/api/v1/reports").await;
    assert_eq!(code, StatusCode::OK);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["reports"][0]["week"], "2026-W46");
    assert_eq!(list["reports"][1]["week"], "2026-W45");
    assert_eq!(list["reports"][0]["summary"], stored.summary);
    let (code, ct, body) = get(&state, list["reports"][0]["csv"].as_str().unwrap()).await;
    assert_eq!(code, StatusCode::OK);
    assert!(ct.starts_with("text/csv"));
    assert_eq!(body, stored.csv);
    let (code, ct, body) = get(&state, "/api/v1/reports/2026-W46").await;
    assert_eq!((code, ct.starts_with("text/html")), (StatusCode::OK, true));
    assert_eq!(&body, html);
    let (code, ..) = get(&state, "/api/v1/reports/2026-W40").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, ..) = get(&state, "/api/v1/reports/last-week").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    // The schedule makes the week once, and not again.
    let made = reports::scheduled(
        &t.store,
        &settings,
        &cfg,
        now + 3 * DAY_MS,
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(made.is_none(), "2026-W46 is stored already");
    assert_eq!(hook.bodies("/reports").len(), 2);
}
