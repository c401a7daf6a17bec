use super::*;

#[test]
fn marks_too_close_share_one_label_and_far_ones_keep_theirs() {
    let mark = |t: i64, label: &str| Mark {
        t,
        label: label.into(),
        title: format!("XID {label} at {t}"),
    };
    // 1 px per time unit: three marks within a label's width, one far away.
    let x = |t: i64| t as f64;
    let labels = mark_labels(
        &[
            mark(0, "79"),
            mark(5, "79"),
            mark(300, "48"),
            mark(10, "48"),
        ],
        &x,
    );
    let texts: Vec<&str> = labels.iter().map(|(_, l, _)| l.as_str()).collect();
    assert_eq!(texts, ["79, 48 ×3", "48"]);
    assert_eq!(
        labels[0].2.lines().count(),
        3,
        "every mark in the hover text"
    );
    // Labels drawn never overlap: each starts past the previous one's end.
    for w in labels.windows(2) {
        let end = w[0].0 + w[0].1.chars().count() as f64 * MARK_CHAR_PX;
        assert!(w[1].0 > end, "{labels:?}");
    }
}

#[test]
fn text_is_escaped() {
    assert_eq!(
        esc("<b>\"a\" & 'b'</b>"),
        "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/b&gt;"
    );
}

fn chart() -> Chart {
    Chart {
        title: "GPU utilization <all>".into(),
        unit: "%".into(),
        from_ms: 0,
        to_ms: 3_600_000,
        y_max: Some(100.0),
        lines: vec![Line {
            name: "GPU 0".into(),
            points: vec![(0, Some(10.0)), (1_800_000, None), (3_000_000, Some(50.0))],
        }],
        ..Chart::default()
    }
}

#[test]
fn charts_have_axes_legend_hover_and_gaps() {
    let s = svg(&chart());
    assert!(s.contains("&lt;all&gt;"));
    assert!(s.contains("(%)"));
    assert_eq!(s.matches("<svg").count(), 2, "a wide and a narrow drawing");
    assert_eq!(
        s.matches(" M").count(),
        4,
        "the gap breaks the line twice: {s}"
    );
    assert!(s.contains("GPU 0: 50.0 %"), "hover value");
    assert!(s.contains("class=\"legend\""));
    assert!(s.contains(">100<"), "y axis top");
    assert!(
        s.contains(">25<") && !s.contains(">25.0<"),
        "ticks share their decimals"
    );
    let empty = svg(&Chart {
        lines: vec![Line {
            name: "x".into(),
            points: vec![(0, None)],
        }],
        empty_note: "not measurable without DCGM".into(),
        ..chart()
    });
    assert!(empty.contains("not measurable without DCGM"));
    assert!(!empty.contains("<svg"));
}

#[test]
fn legend_names_only_what_is_drawn() {
    let mut c = chart();
    c.lines.push(Line {
        name: "SM activity".into(),
        points: vec![(0, None)],
    });
    c.bands.push(Band {
        name: "aggressor running".into(),
        spans: vec![(600_000, 1_200_000)],
    });
    c.refs.push(RefLine {
        name: "slice capacity".into(),
        value: 43.0,
    });
    c.marks.push(Mark {
        t: 900_000,
        label: "79".into(),
        title: "XID 79".into(),
    });
    let s = svg(&c);
    let legend = &s[s.find("class=\"legend\"").unwrap()..];
    assert!(legend.contains("GPU 0"));
    assert!(!legend[..legend.find("</ul>").unwrap()].contains("SM activity"));
    assert!(legend.contains("Not measured in this range: SM activity."));
    assert!(legend.contains("aggressor running"));
    assert!(legend.contains("slice capacity (43.0 %)"));
    assert!(legend.contains("1 event, marked"));
    assert!(s.contains("</title>79<"), "mark label drawn");
    assert!(
        s.contains("stroke-dasharray=\"5 4\""),
        "reference line drawn"
    );
}

#[test]
fn heatmap_shows_allocation_and_use() {
    let h = Heatmap {
        title: "GPUs".into(),
        from_ms: 0,
        to_ms: 2 * 3_600_000,
        column_ms: 3_600_000,
        rows: vec![HeatRow {
            label: "node-a GPU 0".into(),
            href: "/gpus/GPU-1".into(),
            cells: vec![
                Some(HeatCell {
                    allocated: 1.0,
                    effective: 0.0,
                }),
                None,
            ],
        }],
        note: "all 1 GPUs".into(),
    };
    let s = heatmap(&h);
    assert!(
        s.contains("allocated 100 % of the GPU · effective 0 % of the GPU (0 % of the allocation)")
    );
    assert!(
        s.contains(&heat_colour(0.0)),
        "an unused allocation is the scale's alarming (darkest) colour"
    );
    assert!(s.contains("href=\"/gpus/GPU-1\""));
    assert_eq!(
        s.matches("<g>").count(),
        2,
        "a cell in each drawing, none where nothing reported"
    );
    assert_eq!(heat_colour(0.0), "#800026");
    assert_eq!(heat_colour(1.0), "#ffeda0");
    // One order: every step of use is lighter than the one before (relative luminance).
    let luminance = |hex: String| {
        let c = |i: usize| f64::from(u8::from_str_radix(&hex[i..i + 2], 16).unwrap()) / 255.0;
        0.2126 * c(1) + 0.7152 * c(3) + 0.0722 * c(5)
    };
    let steps: Vec<f64> = (0..=20)
        .map(|k| luminance(heat_colour(f64::from(k) / 20.0)))
        .collect();
    assert!(steps.windows(2).all(|w| w[1] > w[0]), "{steps:?}");
    // Not allocated is a pattern, not a colour of the scale; the legend has ticks.
    assert!(s.contains("-unallocated)") && s.contains("<pattern"));
    assert!(s.contains("class=\"scale-ticks\"") && s.contains(">50 %</span>"));
}

#[test]
fn the_phone_heatmap_shows_the_newest_hours() {
    let cell = Some(HeatCell {
        allocated: 1.0,
        effective: 0.5,
    });
    let h = Heatmap {
        title: "GPUs".into(),
        from_ms: 0,
        to_ms: 100 * 3_600_000,
        column_ms: 3_600_000,
        rows: vec![HeatRow {
            label: "node-a GPU 0".into(),
            href: "/gpus/GPU-1".into(),
            cells: vec![cell; 100],
        }],
        note: String::new(),
    };
    let s = heatmap(&h);
    let narrow = &s[s.find("class=\"narrow\"").unwrap()..];
    assert_eq!(narrow.matches("<g>").count(), NARROW_HEAT_COLUMNS);
    assert!(
        narrow.contains(&crate::format::short_time(99 * 3_600_000)),
        "the newest column is on the phone"
    );
    assert!(!narrow.contains(&format!("{} UTC", crate::format::short_time(0))));
    assert!(s.contains("The newest 48 hours"));
}

#[test]
fn y_ticks_are_round_with_one_precision() {
    assert_eq!(y_ticks(100.0), (25.0, 100.0, 0));
    assert_eq!(y_ticks(73.0), (20.0, 80.0, 0));
    assert_eq!(y_ticks(0.3), (0.1, 0.3, 1));
    assert_eq!(y_ticks(188.0), (50.0, 200.0, 0));
    assert_eq!(y_ticks(9.0), (2.5, 10.0, 1));
    assert_eq!(y_ticks(0.0), (0.25, 1.0, 2));
    assert_eq!(tick_label(20_000_000_000.0, 0), "20G");
    assert_eq!(tick_label(12_000.0, 0), "12,000");
}

#[test]
fn time_ticks_fall_on_whole_hours_and_days() {
    let day = 86_400_000;
    let from = 20_000 * day + 8 * 3_600_000 + 26 * 60_000; // 08:26
    let t = time_ticks(from, from + 7 * day, 6);
    assert!(t.len() <= 6 && t.len() >= 3, "{t:?}");
    assert!(t.iter().all(|(ms, _)| ms % day == 0), "{t:?}");
    let t = time_ticks(from, from + day, 6);
    assert!(t.iter().all(|(ms, _)| ms % (6 * 3_600_000) == 0), "{t:?}");
    assert!(t.iter().any(|(_, l)| l == "12:00"), "{t:?}");
    assert!(
        t.iter().any(|(_, l)| l.contains('-')),
        "midnight shows the date: {t:?}"
    );
}
