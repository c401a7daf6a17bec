//! The dashboard in a real browser: `gpulens demo` (seven days of history, live samples)
//! walked by headless Chromium through tests/browser/walk.mjs (playwright-core), once with
//! JavaScript and once without, then every page at phone width. Fails on console errors, failed
//! requests, broken links, pages without their content, form fields without labels, and pages
//! wider than a 390 px phone; saves a screenshot of every page to
//! target/browser-screenshots/ (GPULENS_WRITE_SCREENSHOT=path also copies the overview there,
//! and an interference finding and a MIG layout step beside it, for the README). tests/run.sh installs Chromium and the npm package when missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn page<'a>(pages: &'a [Value], url: &str) -> &'a Value {
    pages
        .iter()
        .find(|p| p["url"] == url)
        .unwrap_or_else(|| panic!("{url} was not walked"))
}

fn pages_starting<'a>(pages: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    pages
        .iter()
        .filter(|p| p["url"].as_str().unwrap().starts_with(prefix))
        .collect()
}

fn text(p: &Value) -> &str {
    p["text"].as_str().unwrap()
}

#[test]
fn heavy_every_dashboard_page_works_in_chromium_with_and_without_javascript() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let script = root().join("tests/browser/walk.mjs");
    let ready = Path::new(&chromium).exists()
        && root()
            .join("tests/browser/node_modules/playwright-core")
            .exists()
        && Command::new("node").arg("--version").output().is_ok();
    if !ready {
        assert!(
            std::env::var("GPULENS_REQUIRE_BROWSER").is_err(),
            "Chromium, node or tests/browser/node_modules is missing"
        );
        eprintln!("skipping: no Chromium or playwright-core (run the suite with tests/run.sh)");
        return;
    }
    let dir = crate::support::TempDir::new("browser");
    let port = crate::support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let _demo = crate::support::Killed(
        Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["demo", "--history", "7d", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path())
            .env("GPULENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Ready once the analysis of the backfilled history is stored.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let out = Command::new("node")
            .arg("-e")
            .arg(format!(
                "fetch('{base}/api/v1/recommendations').then(r=>r.json()).then(j=>process.exit(j.source==='stored'&&j.recommendations.length>0?0:1)).catch(()=>process.exit(1))"
            ))
            .status()
            .unwrap();
        if out.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the demo did not get ready");
        std::thread::sleep(Duration::from_secs(1));
    }
    let shots = root().join("target/browser-screenshots");
    let out = Command::new("node")
        .arg(&script)
        .arg(&base)
        .arg(&shots)
        .env("CHROMIUM", &chromium)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "walk.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();

    // At phone width no page is wider than the screen (wide tables scroll in their own box).
    let phone = report["phone"].as_array().unwrap();
    assert!(phone.len() >= 10, "{phone:?}");
    let wide: Vec<&Value> = phone
        .iter()
        .filter(|p| p["width"].as_u64().unwrap() > 390)
        .collect();
    assert!(wide.is_empty(), "pages wider than a 390 px phone: {wide:?}");
    let clipped: Vec<&Value> = phone
        .iter()
        .filter(|p| !p["clipped"].as_array().unwrap().is_empty())
        .collect();
    assert!(
        clipped.is_empty(),
        "chart text outside its SVG box at 390 px: {clipped:?}"
    );
    // Chart text is at least 11 px as drawn, on the phone and (below) on the desktop.
    let small: Vec<&Value> = phone
        .iter()
        .filter(|p| !p["smallText"].as_array().unwrap().is_empty())
        .collect();
    assert!(
        small.is_empty(),
        "chart text under 11 px at 390 px: {small:?}"
    );
    // Phone-first tables: every table of every walked page leads with its link and its first
    // number on screen (the first column stays put while the rest scrolls), captions too.
    let offscreen: Vec<&Value> = phone
        .iter()
        .filter(|p| !p["offscreen"].as_array().unwrap().is_empty())
        .collect();
    assert!(
        offscreen.is_empty(),
        "at 390 px a table's link, first number or caption is off-screen: {offscreen:?}"
    );

    // The heatmap as drawn (pixels of the SVG rendered by Chromium): every allocated share's
    // colour is on the sequential scale, and every unallocated stretch shows the grey hatch and
    // no colour of the scale.
    let heat = &report["heatmap"];
    assert_eq!(heat["found"], true, "the overview has a heatmap: {heat}");
    assert!(
        heat["allocated"].as_u64().unwrap() > 20 && heat["hatch"].as_u64().unwrap() > 5,
        "cells of both kinds were sampled: {heat}"
    );
    assert_eq!(
        heat["offScale"],
        serde_json::json!([]),
        "allocated cells drawn off the scale (or grey like the hatch): {heat}"
    );
    assert!(
        heat["idle"].as_u64().unwrap() > 0,
        "the demo's idle allocations were sampled: {heat}"
    );
    assert_eq!(
        heat["idleNotAlarming"],
        serde_json::json!([]),
        "an idle allocation is drawn in the scale's alarming dark red: {heat}"
    );
    assert_eq!(heat["hatchOnScale"], 0, "{heat}");
    assert_eq!(heat["hatchWithoutGrey"], 0, "{heat}");

    // A range change moves what follows it: tenants, teams, the overview's charts, the plan.
    assert_eq!(report["ranges"].as_array().unwrap().len(), 4);
    for r in report["ranges"].as_array().unwrap() {
        assert_eq!(
            r["moved"], true,
            "the range did not move {}: {r}",
            r["path"]
        );
    }

    for (mode, w) in [
        ("with JS", &report["withJs"]),
        ("without JS", &report["withoutJs"]),
    ] {
        assert_eq!(
            w["problems"],
            serde_json::json!([]),
            "{mode}: console errors or failed requests"
        );
        let pages = w["pages"].as_array().unwrap();
        for p in pages {
            let url = p["url"].as_str().unwrap();
            assert_eq!(p["status"], 200, "{mode}: {url}");
            assert_eq!(p["lang"], "en", "{url}");
            assert!(
                p["mainLandmark"].as_bool().unwrap() && p["skipLink"].as_bool().unwrap(),
                "{url}"
            );
            assert_eq!(
                p["unlabeled"],
                serde_json::json!([]),
                "{url}: form fields without labels"
            );
            assert!(!p["h1"].as_str().unwrap().is_empty(), "{url}: no heading");
            assert_eq!(
                p["smallText"],
                serde_json::json!([]),
                "{mode} at 1280 px, {url}: chart text under 11 px"
            );
            assert!(p["title"].as_str().unwrap().ends_with("gpulens"), "{url}");
        }
        // Every table's CSV download parses and holds the rows the table shows; every table
        // on every page has one.
        for p in pages {
            assert_eq!(
                p["tablesWithoutCsv"],
                serde_json::json!([]),
                "{mode}, {}: a table without a CSV download",
                p["url"]
            );
            assert_eq!(
                p["csvProblems"],
                serde_json::json!([]),
                "{mode}, {}: a CSV download does not match its table",
                p["url"]
            );
        }
        if mode == "with JS" {
            for url in [
                "/findings",
                "/tenants",
                "/teams",
                "/nodes",
                "/alerts",
                "/recommendations",
                "/",
            ] {
                assert!(
                    page(pages, url)["csvTablesChecked"].as_u64().unwrap() >= 1,
                    "{url}: its table's CSV was checked"
                );
            }
        }
        // The data shows either way.
        let o = page(pages, "/");
        assert_eq!(o["h1"], "Fleet overview");
        for s in [
            "Effective use",
            "GPUs freeable",
            "Top idle allocations",
            "Top wasters by money",
            "Every GPU, last",
            "Where the GPU-hours go",
            "Trend against the previous period",
            "What to do first",
            // The label workflow is off here: people act on every step.
            "Review: people act on it",
            "a month at this rate",
            "share of the allocation used",
        ] {
            assert!(text(o).contains(s), "{mode}: overview lacks {s:?}");
        }
        assert!(o["charts"].as_u64().unwrap() >= 2);
        assert!(!text(o).contains("No analysis yet"));
        assert!(
            page(pages, "/findings")["rows"].as_u64().unwrap() >= 1,
            "{mode}"
        );
        assert!(
            page(pages, "/nodes")["rows"].as_u64().unwrap() >= 6,
            "{mode}: the scenario's six nodes"
        );
        // The demo runs the reclaim loop in dry run against its stand-in cluster: the idle
        // holdings are cases, and nothing is changed.
        let r = page(pages, "/reclaim");
        assert!(
            r["rows"].as_u64().unwrap() >= 1 && text(r).contains("Dry run"),
            "{mode}: /reclaim shows the dry run's cases: {}",
            text(r)
        );
    }

    let w = &report["withJs"];
    for p in w["pages"].as_array().unwrap() {
        assert_eq!(
            p["clipped"],
            serde_json::json!([]),
            "{}: chart text outside its SVG box",
            p["url"]
        );
        assert_eq!(
            p["emptySections"],
            serde_json::json!([]),
            "{}: a heading with nothing under it",
            p["url"]
        );
        assert_ne!(
            p["evidenceEmpty"],
            serde_json::json!(true),
            "{}: the finding's primary evidence shows no data",
            p["url"]
        );
    }
    assert_eq!(
        w["broken"],
        serde_json::json!([]),
        "links that do not answer"
    );
    assert_eq!(w["unvisited"], 0, "every page was walked");
    let pages = w["pages"].as_array().unwrap();
    // Every section and the detail pages it links to.
    for url in [
        "/nodes",
        "/tenants",
        "/teams",
        "/findings",
        "/recommendations",
        "/reports",
        "/alerts",
        "/login",
    ] {
        page(pages, url);
    }
    let overview = page(pages, "/");
    assert!(
        overview["hoverTitles"].as_u64().unwrap() > 10,
        "hover values on the timeline"
    );
    assert!(overview["legends"].as_u64().unwrap() >= 1);
    let nodes = pages_starting(pages, "/nodes/");
    assert_eq!(nodes.len(), 6, "the scenario's six nodes");
    for n in &nodes {
        assert!(
            n["charts"].as_u64().unwrap() >= 4,
            "{}: timelines",
            n["url"]
        );
        assert!(text(n).contains("On the device now"), "{}", n["url"]);
        assert!(text(n).contains("Advisory labels"));
    }
    // Every tenant and team of the lists has its page.
    for (prefix, least) in [("/tenants/", 10), ("/teams/", 5)] {
        let held = pages_starting(pages, prefix);
        assert!(held.len() >= least, "{prefix}: {}", held.len());
        for h in &held {
            assert!(
                text(h).contains("allocated GPU-hours")
                    && text(h).contains("Steps of the plan that touch it"),
                "{}",
                h["url"]
            );
        }
    }
    let gpus = pages_starting(pages, "/gpus/");
    assert_eq!(gpus.len(), 20, "every GPU of the scenario");
    assert!(
        gpus.iter()
            .any(|g| text(g).contains("MIG instances") && text(g).contains("1g.10gb")),
        "the MIG node's instances"
    );
    let findings = pages_starting(pages, "/findings/");
    assert!(findings.len() >= 5);
    for f in &findings {
        assert!(text(f).contains("Evidence"), "{}", f["url"]);
    }
    let interference = pages_starting(pages, "/findings/interference-");
    assert!(!interference.is_empty(), "the scenario's interference");
    assert!(text(interference[0]).contains("running periods shaded"));
    assert!(text(interference[0]).contains("victim"));
    assert!(
        text(interference[0]).contains("alone"),
        "alone against contended"
    );
    for f in pages_starting(pages, "/findings/hardware-") {
        assert!(text(f).contains("XID 79"), "{}: the events", f["url"]);
        assert!(text(f).contains("What to do"), "{}", f["url"]);
    }
    let recs = pages_starting(pages, "/recommendations/");
    assert!(!recs.is_empty());
    for r in &recs {
        assert!(
            text(r).contains("Replay against the recorded demand")
                && text(r).contains("What it interrupts"),
            "{}",
            r["url"]
        );
        // A step that configures its node shows the configuration; a reclaim or a
        // separation configures nothing and shows its proposal as the API serves it.
        let url = r["url"].as_str().unwrap();
        let labels = ["mig_layout-", "time_slicing-", "mps-"]
            .iter()
            .any(|k| url.starts_with(&format!("/recommendations/{k}")));
        // A per-GPU step generates the objects its mechanism takes, and changes no label.
        let configures = labels || url.starts_with("/recommendations/per_gpu_sharing-");
        assert_eq!(
            text(r).contains("Generated configuration"),
            configures,
            "{url}"
        );
        // With the label workflow off, a label step says how to do it by hand.
        assert_eq!(text(r).contains("kubectl label node"), labels, "{url}");
        // Every step says how its twin did on the hours it did not see.
        assert!(
            text(r).contains("Held out: the hours it did not see"),
            "{url}"
        );
        assert_eq!(
            text(r).contains("/api/v1/recommendations"),
            !configures,
            "{url}"
        );
    }
    // As drawn, the overview's first steps and the recommendations list never show
    // a step before one it requires, and the overview lists what its steps require.
    let requires = report["requires"].as_object().unwrap();
    for url in ["/", "/recommendations"] {
        let listed: Vec<&str> = page(pages, url)["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(listed.len() >= 2, "{url}: {listed:?}");
        let at = |id: &str| listed.iter().position(|x| *x == id);
        for (id, needs) in requires {
            let Some(i) = at(id) else { continue };
            for q in needs.as_array().unwrap().iter().filter_map(Value::as_str) {
                match at(q) {
                    Some(j) => assert!(j < i, "{url}: {id} drawn before {q}, which it requires"),
                    None => assert!(url != "/", "{url}: {id} drawn without {q}"),
                }
            }
        }
    }
    assert!(page(pages, "/tenants")["rows"].as_u64().unwrap() >= 10);
    assert!(page(pages, "/teams")["rows"].as_u64().unwrap() >= 5);

    // The overview's screenshot for the README.
    let shot = PathBuf::from(overview["screenshot"].as_str().unwrap());
    assert!(shot.exists());
    if let Ok(to) = std::env::var("GPULENS_WRITE_SCREENSHOT") {
        std::fs::copy(&shot, &to).unwrap();
        // Beside it, the evidence of the interference finding and the MIG layout step.
        let dir = Path::new(&to).parent().unwrap();
        for (prefix, name) in [
            ("/findings/interference-", "finding-interference.png"),
            (
                "/recommendations/mig_layout-",
                "recommendation-mig-layout.png",
            ),
        ] {
            let p = pages_starting(pages, prefix)[0];
            std::fs::copy(p["screenshot"].as_str().unwrap(), dir.join(name)).unwrap();
        }
        // Two pages as a phone shows them (390 px).
        for name in ["phone-findings.png", "phone-tenants.png"] {
            std::fs::copy(shots.join(name), dir.join(name)).unwrap();
        }
    }
}
