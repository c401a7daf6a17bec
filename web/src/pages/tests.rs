use super::*;

#[test]
fn empty_tables_say_none_and_why() {
    let html = alerts(Frame::default(), Vec::new(), Vec::new());
    assert!(html.contains("None: no rule fired"), "{html}");
    assert!(html.contains("None: nothing was sent"), "{html}");
    assert!(html.contains("colspan=\"7\""), "{html}");
    let sort = Sort {
        base: String::new(),
        key: "severity".into(),
        desc: false,
    };
    let filters = FindingFilters {
        kind: "interference".into(),
        severity: String::new(),
        team: String::new(),
        node: String::new(),
        query: String::new(),
        kinds: Vec::new(),
        range: String::new(),
        ranges: Vec::new(),
        from: String::new(),
        to: String::new(),
        teams: Vec::new(),
        nodes: Vec::new(),
        currency: "USD".into(),
    };
    let html = findings(Frame::default(), filters, Vec::new(), sort);
    assert!(
        html.contains("None: no finding of the newest analysis matches"),
        "{html}"
    );
    let html = reports(Frame::default(), Vec::new());
    assert!(!html.contains("<table"), "no bare headers: {html}");
}

#[test]
fn use_beyond_the_allocation_is_a_column_where_some_line_has_it() {
    // Effective never exceeds allocated; what a replica used beyond it is borrowed.
    let row = |name: &str, used: f64| UseRow {
        key: name.into(),
        name: name.into(),
        team: "ml".into(),
        kind: "pod".into(),
        allocated: 10.0,
        effective: used.min(10.0),
        ratio: Some(used.min(10.0) / 10.0),
        waste: 10.0 - used.min(10.0),
        borrowed: (used - 10.0).max(0.0),
        cost: 0.0,
        waste_cost: 0.0,
        findings: 0,
    };
    let page = |rows| {
        usage(
            Frame::default(),
            UseView {
                teams: false,
                window: "7 days".into(),
                currency: "USD".into(),
                query: String::new(),
                rows,
                ..Default::default()
            },
            Sort {
                base: String::new(),
                key: "name".into(),
                desc: false,
            },
        )
    };
    let html = page(vec![row("bursty", 22.7), row("steady", 5.0)]);
    assert!(html.contains("Borrowed GPU-h"), "{html}");
    assert!(html.contains("On a time-sliced or MPS GPU"), "{html}");
    assert!(html.contains("<td class=\"n\">12.7</td>"), "{html}");
    assert!(html.contains("<td class=\"n\">100 %</td>"), "{html}");
    assert!(!html.contains("227"), "{html}");
    let html = page(vec![row("steady", 5.0)]);
    assert!(!html.contains("Borrowed") && !html.contains("time-sliced"));
}

#[test]
fn named_figures_are_a_row_each_their_names_escaped() {
    let rows = [
        ("peak_gib".to_owned(), "3.0".to_owned()),
        ("<b>".to_owned(), "1".to_owned()),
    ];
    let html = figures_table(&rows).to_html();
    assert_eq!(
        html,
        "<table><tbody><tr><th scope=\"row\">peak_gib</th><td class=\"n\">3.0</td></tr>\
         <tr><th scope=\"row\">&lt;b&gt;</th><td class=\"n\">1</td></tr><!></tbody></table>",
        "(`<!>` is where leptos marks the end of a list)"
    );
}

#[test]
fn the_plan_of_a_one_gpu_fleet_reads_in_english() {
    let page = |gpus: usize, bound: usize| {
        let plan = PlanView {
            gpus_in_use: gpus,
            nodes_in_use: 1,
            bound,
            efficiency: (bound < gpus).then_some(0.0),
            currency: "USD".into(),
            ..PlanView::default()
        };
        let sort = Sort {
            base: String::new(),
            key: "gpus".into(),
            desc: true,
        };
        recommendations(
            Frame::default(),
            RecsPage {
                plan: Some(plan),
                sort,
                ..RecsPage::default()
            },
        )
    };
    let (one, two) = (page(1, 1), page(2, 1));
    for (html, says) in [
        (&one, "Frees 0 of 1 GPU in use and empties 0 of 1 node:"),
        (&one, "The recorded demand needs the one GPU in use"),
        (&two, "Frees 0 of 2 GPUs in use and empties 0 of 1 node:"),
        (&two, "The recorded demand needs at least 1 GPU under"),
    ] {
        assert!(html.contains(says), "{says:?} in {html}");
    }
}

#[test]
fn an_evidence_tables_figures_align_right() {
    let t = EvidenceTable {
        caption: "c".into(),
        headers: vec![
            "Victim's SM time".into(),
            "Points".into(),
            "p10".into(),
            "Note".into(),
        ],
        rows: vec![
            vec!["alone".into(), "536".into(), "67 %".into(), "quiet".into()],
            vec![
                "while b ran".into(),
                "326".into(),
                "41 %".into(),
                "2 tenants".into(),
            ],
        ],
    };
    let numeric: Vec<bool> = (0..4).map(|j| t.numeric(j)).collect();
    assert_eq!(numeric, [false, true, true, false]);
    let empty = EvidenceTable {
        rows: Vec::new(),
        ..t
    };
    assert!(!empty.numeric(1));
}

#[test]
fn a_node_page_says_which_per_gpu_sharing_it_has_in_place() {
    let v = NodeView {
        cluster: "prod".into(),
        node: "gpu-h100-01".into(),
        status: "reporting".into(),
        range: "24h".into(),
        ranges: vec!["24h".into()],
        gpu: None,
        gpus: Vec::new(),
        labels: Vec::new(),
        findings: Vec::new(),
        mechanisms: vec![
            "HAMi (seen)".into(),
            "DRA consumable capacity pinned to a GPU (configured)".into(),
        ],
    };
    let html = node(Frame::default(), v.clone());
    assert!(
        html.contains(
            "Per-GPU sharing in place: HAMi (seen), DRA consumable capacity pinned to a GPU (configured)"
        ),
        "{html}"
    );
    let html = node(
        Frame::default(),
        NodeView {
            mechanisms: Vec::new(),
            ..v
        },
    );
    assert!(!html.contains("Per-GPU sharing in place"), "{html}");
}

#[test]
fn an_alert_row_links_its_finding_and_step() {
    let row = AlertRow {
        name: "GpuIdleAllocation".into(),
        state: "firing".into(),
        severity: "warning".into(),
        node: "gpu-1".into(),
        gpu: String::new(),
        description: "cv/idle holds GPU 0, idle".into(),
        since: "2026-12-02 04:00".into(),
        finding: Some("/findings/idle_allocation-1a".into()),
        step: Some("/recommendations/reclaim-2b".into()),
        began: Some("2026-11-30 08:00:00".into()),
    };
    let html = alerts(Frame::default(), vec![row.clone()], Vec::new());
    assert!(
        html.contains("<a href=\"/findings/idle_allocation-1a\">cv/idle holds GPU 0, idle</a>"),
        "{html}"
    );
    assert!(
        html.contains("<a href=\"/recommendations/reclaim-2b\">"),
        "{html}"
    );
    assert!(html.contains("began 2026-11-30 08:00:00"), "{html}");
    // Only the collector's own paths become links.
    let odd = AlertRow {
        finding: Some("javascript:alert(1)".into()),
        step: Some("https://evil.example/".into()),
        ..row
    };
    let html = alerts(Frame::default(), vec![odd], Vec::new());
    assert!(
        !html.contains("javascript:") && !html.contains("evil.example"),
        "{html}"
    );
}

#[test]
fn the_overview_shows_waste_by_team_most_costly_first() {
    let line = |team: &str, cost: f64| TeamWasteLine {
        team: team.into(),
        allocated_gpu_hours: 100.0,
        effective: Some(0.4),
        waste_gpu_hours: 60.0,
        waste_cost: cost,
    };
    let mut v = OverviewView {
        analysed: true,
        team_waste: vec![line("ml research", 150.0), line("web", 20.0)],
        ..Default::default()
    };
    v.funnel.currency = "USD".into();
    let html = overview(Frame::default(), v);
    let at = |s: &str| {
        html.find(s)
            .unwrap_or_else(|| panic!("{s} missing: {html}"))
    };
    assert!(at("Waste by team") < at("/teams/ml%20research"));
    assert!(at("150 USD") < at("20 USD"), "most costly first");
    assert!(at("20 USD") < at("170 USD"), "the total row: {html}");
}
