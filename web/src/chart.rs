//! Time-series and bar charts as inline SVG: axes with units, a legend, and hover values
//! (native SVG `<title>` tooltips per time column, so they work without JavaScript).

use crate::format::{num, short_time};

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    /// (Unix ms, value); `None` where nothing was measured (the line breaks).
    pub points: Vec<(i64, Option<f64>)>,
}

/// A time-series chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub unit: String,
    pub from_ms: i64,
    pub to_ms: i64,
    /// Fixed top of the y axis (e.g. 100 for percentages); else from the data.
    pub y_max: Option<f64>,
    pub lines: Vec<Line>,
    /// Shown instead of the chart when no line has a value (e.g. "not measurable without
    /// DCGM").
    pub empty_note: String,
}

/// Colours with at least 4.5:1 contrast on white, told apart by more than hue.
pub const PALETTE: [&str; 8] = [
    "#1f5fa8", "#b5471b", "#2e7d32", "#7b3fa0", "#8a6d00", "#00796b", "#c2185b", "#455a64",
];
const DASH: [&str; 4] = ["", "6 3", "2 2", "8 3 2 3"];

pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Round top for an axis: 1, 2, 2.5 or 5 times a power of ten.
fn nice_max(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if x <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

/// The chart as an SVG element (or the empty note).
pub fn svg(c: &Chart) -> String {
    let has_data = c
        .lines
        .iter()
        .any(|l| l.points.iter().any(|(_, v)| v.is_some()));
    let id = format!(
        "c{:x}",
        c.title
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
    );
    if !has_data {
        return format!(
            "<figure class=\"chart empty\"><figcaption>{}</figcaption><p class=\"note\">{}</p></figure>",
            esc(&c.title),
            esc(if c.empty_note.is_empty() {
                "no data in this range"
            } else {
                &c.empty_note
            })
        );
    }
    let (w, h, left, right, top, bottom) = (720.0, 200.0, 56.0, 12.0, 10.0, 28.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let span = (c.to_ms - c.from_ms).max(1) as f64;
    let data_max = c
        .lines
        .iter()
        .flat_map(|l| l.points.iter().filter_map(|(_, v)| *v))
        .fold(0.0_f64, f64::max);
    let ymax = c.y_max.unwrap_or_else(|| nice_max(data_max));
    let x = |t: i64| left + (t - c.from_ms) as f64 / span * pw;
    let y = |v: f64| top + ph - (v / ymax).clamp(0.0, 1.05) * ph;
    let mut s = format!(
        "<figure class=\"chart\"><figcaption id=\"{id}\">{} <span class=\"unit\">({})</span></figcaption><svg viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-labelledby=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\">",
        esc(&c.title),
        esc(&c.unit)
    );
    // Axes and grid.
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        let yy = y(v);
        s.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" class=\"grid\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{}</text>",
            w - right,
            left - 6.0,
            yy + 4.0,
            num(v)
        ));
    }
    for i in 0..=5 {
        let t = c.from_ms + (span * f64::from(i) / 5.0) as i64;
        let xx = x(t);
        let anchor = match i {
            0 => "start",
            5 => "end",
            _ => "middle",
        };
        s.push_str(&format!(
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{}\" y2=\"{}\" class=\"axis\"/><text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"{anchor}\" class=\"tick\">{}</text>",
            top + ph,
            top + ph + 4.0,
            h - 8.0,
            short_time(t)
        ));
    }
    // Lines, broken where values are missing.
    for (i, l) in c.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let dash = DASH[(i / PALETTE.len()) % DASH.len()];
        let mut d = String::new();
        let mut pen = false;
        for (t, v) in &l.points {
            match v {
                Some(v) => {
                    d.push_str(&format!(
                        "{}{:.1},{:.1}",
                        if pen { " L" } else { " M" },
                        x(*t),
                        y(*v)
                    ));
                    pen = true;
                }
                None => pen = false,
            }
        }
        s.push_str(&format!(
            "<path d=\"{d}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.6\"{}><title>{}</title></path>",
            if dash.is_empty() {
                String::new()
            } else {
                format!(" stroke-dasharray=\"{dash}\"")
            },
            esc(&l.name)
        ));
    }
    // Hover columns: every line's value at that time.
    let times: Vec<i64> = c
        .lines
        .iter()
        .max_by_key(|l| l.points.len())
        .map(|l| l.points.iter().map(|(t, _)| *t).collect())
        .unwrap_or_default();
    let stride = times.len().div_ceil(120).max(1);
    let col_w = pw / (times.len() as f64 / stride as f64).max(1.0);
    for chunk in times.chunks(stride) {
        let t = chunk[0];
        let mut tip = short_time(t);
        for l in &c.lines {
            let v = l
                .points
                .iter()
                .find(|(pt, _)| *pt == t)
                .and_then(|(_, v)| *v);
            tip.push_str(&format!(
                "\n{}: {}",
                l.name,
                v.map_or("–".into(), |v| format!("{} {}", num(v), c.unit))
            ));
        }
        s.push_str(&format!(
            "<rect x=\"{:.1}\" y=\"{top}\" width=\"{col_w:.1}\" height=\"{ph}\" class=\"hover\"><title>{}</title></rect>",
            x(t),
            esc(&tip)
        ));
    }
    s.push_str("</svg>");
    // Legend.
    s.push_str("<ul class=\"legend\">");
    for (i, l) in c.lines.iter().enumerate() {
        s.push_str(&format!(
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{}</li>",
            PALETTE[i % PALETTE.len()],
            esc(&l.name)
        ));
    }
    s.push_str("</ul></figure>");
    s
}

/// Horizontal bars with values, e.g. the funnel.
pub fn bars(title: &str, unit: &str, rows: &[(String, f64, &str)]) -> String {
    let max = rows.iter().map(|r| r.1).fold(1.0_f64, f64::max);
    let (left, width, row) = (110.0, 460.0, 30.0);
    let h = row * rows.len() as f64 + 8.0;
    let mut s = format!(
        "<figure class=\"chart\"><figcaption>{} <span class=\"unit\">({})</span></figcaption><svg viewBox=\"0 0 720 {h}\" width=\"100%\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
        esc(title),
        esc(unit),
        esc(title)
    );
    for (i, (name, v, color)) in rows.iter().enumerate() {
        let y = 4.0 + i as f64 * row;
        let bw = v / max * width;
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><rect x=\"{left}\" y=\"{y}\" width=\"{bw:.1}\" height=\"20\" fill=\"{color}\"><title>{}: {} {}</title></rect><text x=\"{:.1}\" y=\"{}\">{} {}</text>",
            left - 8.0,
            y + 15.0,
            esc(name),
            esc(name),
            num(*v),
            esc(unit),
            left + bw + 6.0,
            y + 15.0,
            num(*v),
            esc(unit)
        ));
    }
    s.push_str("</svg></figure>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<b>\"a\" & 'b'</b>"),
            "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/b&gt;"
        );
    }

    #[test]
    fn charts_have_axes_legend_hover_and_gaps() {
        let c = Chart {
            title: "GPU utilization <all>".into(),
            unit: "%".into(),
            from_ms: 0,
            to_ms: 3_600_000,
            y_max: Some(100.0),
            lines: vec![Line {
                name: "GPU 0".into(),
                points: vec![(0, Some(10.0)), (1_800_000, None), (3_000_000, Some(50.0))],
            }],
            empty_note: String::new(),
        };
        let s = svg(&c);
        assert!(s.contains("&lt;all&gt;"));
        assert!(s.contains("(%)"));
        assert_eq!(s.matches(" M").count(), 2, "the gap breaks the line: {s}");
        assert!(s.contains("GPU 0: 50.0 %"), "hover value");
        assert!(s.contains("class=\"legend\""));
        assert!(s.contains(">100<"), "y axis top");
        let empty = svg(&Chart {
            lines: vec![Line {
                name: "x".into(),
                points: vec![(0, None)],
            }],
            empty_note: "not measurable without DCGM".into(),
            ..c
        });
        assert!(empty.contains("not measurable without DCGM"));
        assert!(!empty.contains("<svg"));
        assert_eq!(nice_max(73.0), 100.0);
        assert_eq!(nice_max(0.3), 0.5);
    }
}
