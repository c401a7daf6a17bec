//! Alert rules over a real analysis: which findings become alerts, with what labels, and where
//! each leads (its finding, the step that answers it, a silence).

use collector::alerts::settings::Settings;

/// The default rules over a real analysis of a simulated fleet: idle allocations and
/// underutilized tenants that go on at the end of the window become alerts naming the tenant,
/// node and GPU, with the finding's summary.
#[tokio::test]
async fn default_rules_turn_ongoing_findings_into_alerts() {
    use collector::alerts::rules;
    use collector::alerts::state::{self, State as AlertState};
    let fleet = crate::analytics::default_fleet();
    let t = crate::support::sqlite().await;
    let to = 1_795_219_200_000; // 2026-11-21T00:00:00Z
    let from = to - 12 * 3_600_000;
    crate::analytics::load(&t.store, &fleet, "truth", from, to).await;
    let a = crate::support::analyse(&t.store, from, to).await;
    let rules = Settings::default().effective_rules();
    let facts = rules::Facts {
        analysis: Some(&a),
        now_ms: to,
        keep_ms: 86_400_000,
        reclaim_cases: &[],
        ..Default::default()
    };
    let conditions = rules::evaluate(&rules, &facts);
    let idle: Vec<&rules::Condition> = conditions
        .iter()
        .filter(|c| c.labels["alertname"] == "GpuIdleAllocation")
        .collect();
    let ongoing_idle = a
        .findings
        .iter()
        .filter(|f| {
            f.kind == analytics::FindingKind::IdleAllocation
                && f.to_ms + 2 * 3_600_000 >= a.to_ms
                && f.to_ms - f.from_ms >= 4 * 3_600_000
        })
        .count();
    assert!(ongoing_idle > 0, "the scenario has tenants idle for hours");
    assert_eq!(idle.len(), ongoing_idle);
    for c in &idle {
        for k in ["cluster", "node", "gpu_uuid", "tenant", "severity"] {
            assert!(c.labels.contains_key(k), "{k} missing: {c:?}");
        }
        assert!(c.value >= 4.0, "idle hours: {c:?}");
        assert!(!c.annotations["summary"].is_empty());
        assert!(
            c.annotations["description"].contains(&c.labels["node"]),
            "{c:?}"
        );
    }
    // Each leads somewhere: its finding's page, when it began, the step that answers it where
    // one does, and — with an Alertmanager UI configured — a silence matching its labels.
    for c in &idle {
        let f = a
            .findings
            .iter()
            .find(|f| c.annotations["finding"] == format!("/findings/{}", f.id))
            .unwrap_or_else(|| panic!("no finding behind {c:?}"));
        assert_eq!(c.annotations["began"], model::time::rfc3339(f.from_ms));
        match a
            .recommendations
            .iter()
            .find(|r| r.findings.contains(&f.id))
        {
            Some(r) => assert_eq!(c.annotations["step"], format!("/recommendations/{}", r.id)),
            None => assert!(!c.annotations.contains_key("step"), "{c:?}"),
        }
        assert!(!c.annotations.contains_key("silence"));
    }
    assert!(
        idle.iter().any(|c| c.annotations.contains_key("step")),
        "a reclaim answers an idle allocation"
    );
    let silenced = rules::evaluate(
        &rules,
        &rules::Facts {
            silence_url: Some("http://am.example:9093/"),
            ..facts
        },
    );
    let c = silenced
        .iter()
        .find(|c| c.labels["alertname"] == "GpuIdleAllocation")
        .unwrap();
    let link = &c.annotations["silence"];
    assert!(
        link.starts_with("http://am.example:9093/#/silences/new?filter=%7B"),
        "{link}"
    );
    let filter = percent_decode(link.split_once("filter=").unwrap().1);
    assert!(
        filter.contains(&format!("node=\"{}\"", c.labels["node"]))
            && filter.contains("alertname=\"GpuIdleAllocation\""),
        "{filter}"
    );
    // Firing at once (for = 0), each once.
    let alerts = state::advance(vec![], conditions.clone(), &rules, to, 86_400_000);
    assert_eq!(alerts.len(), conditions.len());
    assert!(alerts.iter().all(|x| x.state == AlertState::Firing));
    // An analysis where nothing goes on any more resolves them all.
    let mut quiet = a.clone();
    quiet.findings.clear();
    let facts = rules::Facts {
        analysis: Some(&quiet),
        now_ms: to + 60_000,
        keep_ms: 86_400_000,
        reclaim_cases: &[],
        ..Default::default()
    };
    let after = state::advance(
        alerts,
        rules::evaluate(&rules, &facts),
        &rules,
        to + 60_000,
        86_400_000,
    );
    assert!(after.iter().all(|x| x.state == AlertState::Resolved));
}

/// `%XX` escapes decoded (the test's own reader of a query value).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}
