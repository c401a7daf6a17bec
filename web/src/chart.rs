//! Time-series and bar charts as inline SVG: axes with units and "nice" ticks, a legend of
//! what is drawn, shaded periods, reference lines, event marks and hover values (native SVG
//! `<title>` tooltips per time column, so they work without JavaScript).
//!
//! Every chart is drawn twice, at desktop and at phone proportions; CSS shows one, so axis
//! text stays readable at 390 px instead of shrinking with a wide drawing.

use crate::format::{civil, num};

/// One line of a chart.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Line {
    pub name: String,
    /// (Unix ms, value); `None` where nothing was measured (the line breaks).
    pub points: Vec<(i64, Option<f64>)>,
}

/// Shaded periods, e.g. when an aggressor was running.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Band {
    pub name: String,
    /// [from, to) in Unix ms.
    pub spans: Vec<(i64, i64)>,
}

/// A horizontal reference line, e.g. the capacity of a proposed slice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RefLine {
    pub name: String,
    pub value: f64,
}

/// An event on the time axis, e.g. an XID error.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mark {
    pub t: i64,
    /// Short text drawn at the mark ("79"); the hover text says more.
    pub label: String,
    pub title: String,
}

/// Width a mark label's character takes, and the gap kept between two labels (px).
const MARK_CHAR_PX: f64 = 6.5;
const MARK_GAP_PX: f64 = 6.0;

/// One label per cluster of marks whose labels would overlap: at the cluster's first mark,
/// reading the distinct labels in time order, with how many marks there are (`79 ×3`,
/// `79, 48 ×4`), and every mark's hover text.
fn mark_labels(marks: &[Mark], x: &dyn Fn(i64) -> f64) -> Vec<(f64, String, String)> {
    let mut sorted: Vec<&Mark> = marks.iter().filter(|m| !m.label.is_empty()).collect();
    sorted.sort_by_key(|m| m.t);
    let label_of = |group: &[&Mark]| {
        let mut labels: Vec<&str> = Vec::new();
        for m in group {
            if !labels.contains(&m.label.as_str()) {
                labels.push(&m.label);
            }
        }
        let mut label = labels.join(", ");
        if group.len() > 1 {
            label.push_str(&format!(" ×{}", group.len()));
        }
        label
    };
    let mut groups: Vec<Vec<&Mark>> = Vec::new();
    for m in sorted {
        match groups.last_mut() {
            // Joins the cluster while it starts inside the cluster's label.
            Some(g)
                if x(m.t)
                    <= x(g[0].t)
                        + label_of(g).chars().count() as f64 * MARK_CHAR_PX
                        + MARK_GAP_PX =>
            {
                g.push(m)
            }
            _ => groups.push(vec![m]),
        }
    }
    groups
        .iter()
        .map(|g| {
            let title = g.iter().map(|m| m.title.as_str()).collect::<Vec<_>>();
            (x(g[0].t), label_of(g), title.join("\n"))
        })
        .collect()
}

/// A time-series chart.
#[derive(Debug, Clone, PartialEq, Default)]
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
    pub bands: Vec<Band>,
    pub refs: Vec<RefLine>,
    pub marks: Vec<Mark>,
}

/// Colours with at least 4.5:1 contrast on white, told apart by more than hue.
pub const PALETTE: [&str; 8] = [
    "#1f5fa8", "#b5471b", "#2e7d32", "#7b3fa0", "#8a6d00", "#00796b", "#c2185b", "#455a64",
];
const DASH: [&str; 4] = ["", "6 3", "2 2", "8 3 2 3"];
/// Fill of shaded periods and colour of reference lines and marks.
const BAND_FILL: &str = "rgba(181,71,27,.14)";
const REF_STYLE: [(&str, &str); 3] = [("#374151", "5 4"), ("#7b3fa0", "2 3"), ("#00796b", "9 3")];
const MARK_COLOR: &str = "#a4161a";

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

/// The drawing's proportions: desktop, or phone (fewer ticks, the same text size). The page
/// shows a drawing only in a figure at least as wide as its view box (a container query at
/// [`WIDE`]'s width), so 11 px text is never drawn smaller than 11 px.
#[derive(Debug, Clone, Copy)]
struct Size {
    class: &'static str,
    w: f64,
    h: f64,
    left: f64,
    time_ticks: i64,
    hover_columns: usize,
}

const WIDE: Size = Size {
    class: "wide",
    w: 560.0,
    h: 200.0,
    left: 56.0,
    time_ticks: 6,
    hover_columns: 120,
};
const NARROW: Size = Size {
    class: "narrow",
    w: 330.0,
    h: 180.0,
    left: 48.0,
    time_ticks: 3,
    hover_columns: 48,
};
const RIGHT: f64 = 12.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 28.0;
/// Width of one character of tick text (11 px system-ui digits), for keeping text inside.
const CHAR_W: f64 = 6.4;

/// Y-axis ticks: a step of 1, 2, 2.5 or 5 times a power of ten, at most four intervals up
/// to a top that holds `max`; with the decimals the step needs, the same for every tick.
pub fn y_ticks(max: f64) -> (f64, f64, usize) {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let raw = max / 4.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * p);
    let decimals = (0..=6)
        .find(|d| {
            let s = step * 10f64.powi(*d);
            (s - s.round()).abs() < 1e-6
        })
        .unwrap_or(6);
    let scale = 10f64.powi(decimals);
    let top = ((max / step - 1e-9).ceil().max(1.0) * step * scale).round() / scale;
    (step, top, decimals as usize)
}

/// A tick value with the axis' decimals; large values compact (12k, 3.4M).
fn tick_label(v: f64, decimals: usize) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e5 {
        format!("{}k", trim(v / 1e3))
    } else if a >= 1000.0 && decimals == 0 {
        num(v)
    } else {
        format!("{v:.decimals$}")
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
}

/// Time-axis steps: whole minutes, hours and days (UTC).
const TIME_STEPS: [i64; 14] = [
    60_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    10_800_000,
    21_600_000,
    43_200_000,
    86_400_000,
    172_800_000,
    345_600_000,
    604_800_000,
];

/// Ticks at whole UTC minutes, hours or days, at most `max` of them in [from, to].
pub fn time_ticks(from: i64, to: i64, max: i64) -> Vec<(i64, String)> {
    let span = (to - from).max(1);
    let step = TIME_STEPS
        .into_iter()
        .find(|s| span / s < max)
        .unwrap_or(span);
    let mut t = from.div_euclid(step) * step;
    if t < from {
        t += step;
    }
    let mut out = Vec::new();
    while t <= to {
        let (_, m, d, hh, mm) = civil(t);
        let label = if step >= 86_400_000 || (hh == 0 && mm == 0) {
            format!("{m:02}-{d:02}")
        } else {
            format!("{hh:02}:{mm:02}")
        };
        out.push((t, label));
        t += step;
    }
    out
}

/// Text anchored at `x` so that its estimated width stays inside [0, w].
fn anchor(x: f64, chars: usize, w: f64) -> (&'static str, f64) {
    let half = chars as f64 * CHAR_W / 2.0;
    if x - half < 1.0 {
        ("start", x.max(1.0))
    } else if x + half > w - 1.0 {
        ("end", x.min(w - 1.0))
    } else {
        ("middle", x)
    }
}

fn drawn(l: &Line) -> bool {
    l.points.iter().any(|(_, v)| v.is_some())
}

fn chart_id(title: &str) -> String {
    format!(
        "c{:x}",
        title
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
    )
}

/// The chart as a figure with both drawings and a legend (or the empty note).
pub fn svg(c: &Chart) -> String {
    if !c.lines.iter().any(drawn) {
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
    let id = chart_id(&c.title);
    let mut s = format!(
        "<figure class=\"chart\"><figcaption id=\"{id}\">{} <span class=\"unit\">({})</span></figcaption>",
        esc(&c.title),
        esc(&c.unit)
    );
    s.push_str(&plot(c, &id, WIDE));
    s.push_str(&plot(c, &id, NARROW));
    s.push_str(&legend(c));
    s.push_str("</figure>");
    s
}

/// What the legend lists: drawn lines, shaded periods, reference lines and marks; lines
/// without a value in the range are named under it, not given a swatch.
fn legend(c: &Chart) -> String {
    let mut s = String::from("<ul class=\"legend\">");
    for (i, l) in c.lines.iter().enumerate().filter(|(_, l)| drawn(l)) {
        let dash = DASH[(i / PALETTE.len()) % DASH.len()];
        s.push_str(&format!(
            "<li><span class=\"swatch{}\" style=\"background:{}\"></span>{}</li>",
            if dash.is_empty() { "" } else { " dashed" },
            PALETTE[i % PALETTE.len()],
            esc(&l.name)
        ));
    }
    for b in c.bands.iter().filter(|b| !b.spans.is_empty()) {
        s.push_str(&format!(
            "<li><span class=\"swatch\" style=\"background:{BAND_FILL};outline:1px solid #b5471b\"></span>{}</li>",
            esc(&b.name)
        ));
    }
    for (i, r) in c.refs.iter().enumerate() {
        let (color, _) = REF_STYLE[i % REF_STYLE.len()];
        s.push_str(&format!(
            "<li><span class=\"swatch ref\" style=\"border-color:{color}\"></span>{} ({} {})</li>",
            esc(&r.name),
            num(r.value),
            esc(&c.unit)
        ));
    }
    if !c.marks.is_empty() {
        s.push_str(&format!(
            "<li><span class=\"swatch mark\"></span>{}, marked on the time axis</li>",
            model::figures::count(c.marks.len() as f64, "event", "events")
        ));
    }
    s.push_str("</ul>");
    let missing: Vec<String> = c
        .lines
        .iter()
        .filter(|l| !drawn(l))
        .map(|l| esc(&l.name))
        .collect();
    if !missing.is_empty() {
        s.push_str(&format!(
            "<p class=\"note\">Not measured in this range: {}.</p>",
            missing.join(", ")
        ));
    }
    s
}

/// One drawing of the chart at the given proportions.
fn plot(c: &Chart, id: &str, z: Size) -> String {
    let f = Frame::of(c, z);
    let mut s = format!(
        "<svg class=\"{}\" viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-labelledby=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\">",
        z.class,
        w = f.w,
        h = f.h,
    );
    // Shaded periods under everything else.
    for b in &c.bands {
        for (from, to) in &b.spans {
            let (x0, x1) = (f.x(*from), f.x(*to));
            s.push_str(&format!(
                "<rect x=\"{x0:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{ph}\" fill=\"{BAND_FILL}\"><title>{}</title></rect>",
                (x1 - x0).max(0.8),
                esc(&b.name),
                ph = f.ph,
            ));
        }
    }
    axes(&mut s, c, &f, z);
    lines(&mut s, c, &f);
    marks(&mut s, c, &f);
    hover(&mut s, c, &f, z);
    s.push_str("</svg>");
    s
}

/// Where a chart's values land: the plot area inside the axes' margins, and the scale of both
/// axes.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    /// The plot area's width and height.
    pw: f64,
    ph: f64,
    from_ms: i64,
    span: f64,
    /// The y axis: its top, tick step and tick decimals.
    ymax: f64,
    step: f64,
    decimals: usize,
}

impl Frame {
    fn of(c: &Chart, z: Size) -> Frame {
        let data_max = c
            .lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|(_, v)| *v))
            .chain(c.refs.iter().map(|r| r.value))
            .fold(0.0_f64, f64::max);
        // Without a fixed top, leave a little room above the highest value.
        let top = c.y_max.map_or(data_max * 1.08, |m| m.max(data_max));
        let (step, ymax, decimals) = y_ticks(top);
        Frame {
            w: z.w,
            h: z.h,
            left: z.left,
            pw: z.w - z.left - RIGHT,
            ph: z.h - TOP - BOTTOM,
            from_ms: c.from_ms,
            span: (c.to_ms - c.from_ms).max(1) as f64,
            ymax,
            step,
            decimals,
        }
    }

    fn x(&self, t: i64) -> f64 {
        self.left + ((t - self.from_ms) as f64 / self.span).clamp(0.0, 1.0) * self.pw
    }

    fn y(&self, v: f64) -> f64 {
        TOP + self.ph - (v / self.ymax).clamp(0.0, 1.0) * self.ph
    }
}

/// The y axis with its grid, the time axis and the reference lines.
fn axes(s: &mut String, c: &Chart, f: &Frame, z: Size) {
    let (w, h, left, ph) = (f.w, f.h, f.left, f.ph);
    let (step, ymax, decimals) = (f.step, f.ymax, f.decimals);
    // Y axis and grid.
    let n = (ymax / step).round() as i64;
    for i in 0..=n {
        let v = step * i as f64;
        let yy = f.y(v);
        s.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" class=\"grid\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{}</text>",
            w - RIGHT,
            left - 6.0,
            yy + 4.0,
            tick_label(v, decimals)
        ));
    }
    // Time axis.
    for (t, label) in time_ticks(c.from_ms, c.to_ms, z.time_ticks) {
        let xx = f.x(t);
        let (a, tx) = anchor(xx, label.chars().count(), w);
        s.push_str(&format!(
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{}\" y2=\"{}\" class=\"axis\"/><text x=\"{tx:.1}\" y=\"{}\" text-anchor=\"{a}\" class=\"tick\">{label}</text>",
            TOP + ph,
            TOP + ph + 4.0,
            h - 8.0,
        ));
    }
    // Reference lines.
    for (i, r) in c.refs.iter().enumerate() {
        let yy = f.y(r.value);
        let (color, dash) = REF_STYLE[i % REF_STYLE.len()];
        s.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"{color}\" stroke-width=\"1.6\" stroke-dasharray=\"{dash}\"><title>{}: {} {}</title></line>",
            w - RIGHT,
            esc(&r.name),
            num(r.value),
            esc(&c.unit)
        ));
    }
}

/// The lines, broken where values are missing; a lone value is a dot.
fn lines(s: &mut String, c: &Chart, f: &Frame) {
    for (i, l) in c.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let dash = DASH[(i / PALETTE.len()) % DASH.len()];
        let mut d = String::new();
        let mut dots = String::new();
        let pts = &l.points;
        for (k, (t, v)) in pts.iter().enumerate() {
            let Some(v) = v else { continue };
            let pen = k > 0 && pts[k - 1].1.is_some();
            let next = pts.get(k + 1).is_some_and(|p| p.1.is_some());
            if !pen && !next {
                dots.push_str(&format!(
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.8\" fill=\"{color}\"/>",
                    f.x(*t),
                    f.y(*v)
                ));
            }
            d.push_str(&format!(
                "{}{:.1},{:.1}",
                if pen { " L" } else { " M" },
                f.x(*t),
                f.y(*v)
            ));
        }
        s.push_str(&format!(
            "<path d=\"{d}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.6\"{}><title>{}</title></path>{dots}",
            if dash.is_empty() {
                String::new()
            } else {
                format!(" stroke-dasharray=\"{dash}\"")
            },
            esc(&l.name)
        ));
    }
}

/// Event marks: a line over the plot each, and a label above the time axis per cluster of
/// marks too close for their labels to stand apart.
fn marks(s: &mut String, c: &Chart, f: &Frame) {
    let (w, ph) = (f.w, f.ph);
    for m in &c.marks {
        let xx = f.x(m.t);
        s.push_str(&format!(
            "<g class=\"mark\"><line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{TOP}\" y2=\"{}\" stroke=\"{MARK_COLOR}\" stroke-width=\"1.4\"/><title>{}</title></g>",
            TOP + ph,
            esc(&m.title)
        ));
    }
    for (xx, label, title) in mark_labels(&c.marks, &|t| f.x(t)) {
        let (a, tx) = anchor(xx, label.chars().count(), w);
        s.push_str(&format!(
            "<text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{a}\" class=\"marklabel\"><title>{}</title>{}</text>",
            TOP + 11.0,
            esc(&title),
            esc(&label)
        ));
    }
}

/// Hover columns: every line's value at that time.
fn hover(s: &mut String, c: &Chart, f: &Frame, z: Size) {
    let (pw, ph) = (f.pw, f.ph);
    let times: Vec<i64> = c
        .lines
        .iter()
        .max_by_key(|l| l.points.len())
        .map(|l| l.points.iter().map(|(t, _)| *t).collect())
        .unwrap_or_default();
    let stride = times.len().div_ceil(z.hover_columns).max(1);
    let col_w = pw / (times.len() as f64 / stride as f64).max(1.0);
    for chunk in times.chunks(stride) {
        let t = chunk[0];
        let mut tip = crate::format::short_time(t);
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
            "<rect x=\"{:.1}\" y=\"{TOP}\" width=\"{col_w:.1}\" height=\"{ph}\" class=\"hover\"><title>{}</title></rect>",
            f.x(t),
            esc(&tip)
        ));
    }
}

/// Horizontal bars with values, e.g. the funnel; drawn wide and narrow like the charts.
pub fn bars(title: &str, unit: &str, rows: &[(String, f64, &str)]) -> String {
    let mut s = format!(
        "<figure class=\"chart\"><figcaption>{} <span class=\"unit\">({})</span></figcaption>",
        esc(title),
        esc(unit),
    );
    for (class, w, left) in [("wide", WIDE.w, 110.0), ("narrow", NARROW.w, 72.0)] {
        s.push_str(&bar_plot(title, unit, rows, class, w, left));
    }
    s.push_str("</figure>");
    s
}

fn bar_plot(
    title: &str,
    unit: &str,
    rows: &[(String, f64, &str)],
    class: &str,
    w: f64,
    left: f64,
) -> String {
    let max = rows.iter().map(|r| r.1).fold(1.0_f64, f64::max);
    let row = 30.0;
    let h = row * rows.len() as f64 + 8.0;
    let label_w = rows
        .iter()
        .map(|r| (num(r.1).len() + unit.len() + 1) as f64 * CHAR_W)
        .fold(0.0, f64::max);
    let width = (w - left - label_w - 12.0).max(40.0);
    let mut s = format!(
        "<svg class=\"{class}\" viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
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
    s.push_str("</svg>");
    s
}

/// GPUs × time: each cell coloured by how much of its allocation was used, its height the
/// share of the GPU allocated (grey where nothing was allocated, empty where nothing reported).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Heatmap {
    pub title: String,
    pub from_ms: i64,
    pub to_ms: i64,
    /// Width of a column in ms; column `i` starts at `from_ms + i × column_ms`.
    pub column_ms: i64,
    pub rows: Vec<HeatRow>,
    /// Under the map, e.g. which GPUs of how many are shown.
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeatRow {
    pub label: String,
    pub href: String,
    pub cells: Vec<Option<HeatCell>>,
}

/// One GPU over one column: shares of the physical GPU (0–1).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HeatCell {
    pub allocated: f64,
    pub effective: f64,
}

/// The heatmap's one sequential scale, for the share of an allocation used: dark red where an
/// allocation is idle (the alarming end) to pale yellow where it is fully used. ColorBrewer's
/// YlOrRd (colorbrewer2.org, marked colour-blind safe), read from its dark end; its lightness
/// rises with use, so the order holds for the common colour-vision deficiencies and in
/// greyscale, and the idle end stands apart from "no data" (near white) and the grey hatch.
const HEAT_STOPS: [(f64, (u8, u8, u8)); 5] = [
    (0.0, (128, 0, 38)),
    (0.25, (227, 26, 28)),
    (0.5, (253, 141, 60)),
    (0.75, (254, 217, 118)),
    (1.0, (255, 237, 160)),
];

/// Where a GPU was not allocated: a hatch, not a colour of the scale.
const UNALLOCATED_HATCH: &str = "repeating-linear-gradient(135deg,#ffffff 0 2px,#9ca3af 2px 3px)";

/// Where nothing reported: the row's background.
const NO_DATA: &str = "#f8fafc";

/// Columns the phone drawing of a heatmap shows: the newest ones.
const NARROW_HEAT_COLUMNS: usize = 48;

/// Colour of a used share of an allocation on [`HEAT_STOPS`].
fn heat_colour(used: f64) -> String {
    let u = used.clamp(0.0, 1.0);
    let k = HEAT_STOPS
        .windows(2)
        .position(|w| u <= w[1].0)
        .unwrap_or(HEAT_STOPS.len() - 2);
    let (a, b) = (HEAT_STOPS[k], HEAT_STOPS[k + 1]);
    let t = (u - a.0) / (b.0 - a.0);
    let mix = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.1.0, b.1.0),
        mix(a.1.1, b.1.1),
        mix(a.1.2, b.1.2)
    )
}

/// The scale as a bar with ticks at 0, 25, 50, 75 and 100 % of the allocation used.
fn heat_scale() -> String {
    let stops: String = HEAT_STOPS
        .iter()
        .map(|(at, _)| format!("{} {:.0}%", heat_colour(*at), at * 100.0))
        .collect::<Vec<_>>()
        .join(",");
    let ticks: String = HEAT_STOPS
        .iter()
        .map(|(at, _)| {
            format!(
                "<span class=\"tick\" style=\"left:{:.0}%\">{:.0} %{}</span>",
                at * 100.0,
                at * 100.0,
                if *at == 0.0 { " idle" } else { "" }
            )
        })
        .collect();
    format!(
        "<li class=\"scale\"><span class=\"scale-name\">share of the allocation used (dark red: allocated and idle)</span><span class=\"scale-bar\" style=\"background:linear-gradient(90deg,{stops})\"></span><span class=\"scale-ticks\">{ticks}</span></li>"
    )
}

/// One drawing of a heatmap: `w` wide with `label_w` for the row names, the columns from
/// `first` on.
struct HeatDrawing {
    class: &'static str,
    w: f64,
    label_w: f64,
    label_chars: usize,
    time_ticks: i64,
    first: usize,
}

pub fn heatmap(h: &Heatmap) -> String {
    let id = chart_id(&h.title);
    let cols = h
        .rows
        .iter()
        .map(|r| r.cells.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut s = format!(
        "<figure class=\"chart heatmap\"><figcaption id=\"{id}\">{} <span class=\"unit\">(colour: share of the allocation used; height: share of the GPU allocated)</span></figcaption>",
        esc(&h.title)
    );
    let narrow_first = cols.saturating_sub(NARROW_HEAT_COLUMNS);
    for d in [
        HeatDrawing {
            class: "wide",
            w: WIDE.w,
            label_w: 150.0,
            label_chars: 24,
            time_ticks: WIDE.time_ticks,
            first: 0,
        },
        HeatDrawing {
            class: "narrow",
            w: NARROW.w,
            label_w: 112.0,
            label_chars: 14,
            time_ticks: NARROW.time_ticks,
            first: narrow_first,
        },
    ] {
        s.push_str(&heat_plot(h, &id, &d, cols));
    }
    if narrow_first > 0 {
        let hours = (NARROW_HEAT_COLUMNS as i64 * h.column_ms) / 3_600_000;
        s.push_str(&format!(
            "<p class=\"note only-narrow\">The newest {hours} hours; a wider screen shows the whole range.</p>"
        ));
    }
    s.push_str("<ul class=\"legend\">");
    s.push_str(&heat_scale());
    s.push_str(&format!(
        "<li><span class=\"swatch\" style=\"background:{UNALLOCATED_HATCH}\"></span>not allocated (the cell's height is the share allocated)</li>"
    ));
    s.push_str(&format!("<li><span class=\"swatch\" style=\"background:{NO_DATA};outline:1px solid #d1d5db\"></span>no data</li></ul>"));
    if !h.note.is_empty() {
        s.push_str(&format!("<p class=\"note\">{}</p>", esc(&h.note)));
    }
    s.push_str("</figure>");
    s
}

fn heat_plot(h: &Heatmap, id: &str, d: &HeatDrawing, cols: usize) -> String {
    let (w, label_w, row_h, top, axis) = (d.w, d.label_w, 16.0, 4.0, 24.0);
    let shown = (cols - d.first).max(1);
    let from_ms = h.from_ms + d.first as i64 * h.column_ms;
    let pw = w - label_w - RIGHT;
    let cw = pw / shown as f64;
    let height = top + row_h * h.rows.len() as f64 + axis;
    let pattern = format!("{id}-{}-unallocated", d.class);
    let mut s = format!(
        "<svg class=\"{}\" viewBox=\"0 0 {w} {height}\" width=\"100%\" role=\"img\" aria-labelledby=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\">",
        d.class
    );
    // The hatch of "not allocated": grey lines on white, unlike any colour of the scale.
    s.push_str(&format!(
        "<defs><pattern id=\"{pattern}\" patternUnits=\"userSpaceOnUse\" width=\"3\" height=\"3\" patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"3\" fill=\"#ffffff\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"3\" stroke=\"#9ca3af\" stroke-width=\"1.2\"/></pattern></defs>"
    ));
    let span = (h.to_ms - from_ms).max(1) as f64;
    for (ri, r) in h.rows.iter().enumerate() {
        let y = top + ri as f64 * row_h;
        // A long name keeps its end, where the GPU's index is.
        let n = r.label.chars().count();
        let label: String = if n > d.label_chars {
            "…".to_owned()
                + &r.label
                    .chars()
                    .skip(n + 1 - d.label_chars)
                    .collect::<String>()
        } else {
            r.label.clone()
        };
        s.push_str(&format!(
            "<a href=\"{}\"><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick rowlabel\">{}<title>{}</title></text></a>",
            esc(&r.href),
            label_w - 6.0,
            y + row_h - 4.0,
            esc(&label),
            esc(&r.label)
        ));
        s.push_str(&format!(
            "<rect x=\"{label_w}\" y=\"{y:.1}\" width=\"{pw:.1}\" height=\"{:.1}\" fill=\"{NO_DATA}\"/>",
            row_h - 1.0
        ));
        for (ci, c) in r.cells.iter().enumerate().skip(d.first) {
            let Some(c) = c else { continue };
            let x = label_w + (ci - d.first) as f64 * cw;
            let t = h.from_ms + ci as i64 * h.column_ms;
            s.push_str(&heat_cell(
                &r.label,
                t,
                c,
                (x, y, cw, row_h - 1.0),
                &pattern,
            ));
        }
    }
    let base = top + row_h * h.rows.len() as f64;
    for (t, label) in time_ticks(from_ms, h.to_ms, d.time_ticks) {
        let xx = label_w + (t - from_ms) as f64 / span * pw;
        let (a, tx) = anchor(xx, label.chars().count(), w);
        s.push_str(&format!(
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{base:.1}\" y2=\"{:.1}\" class=\"axis\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{a}\" class=\"tick\">{label}</text>",
            base + 4.0,
            base + 16.0
        ));
    }
    s.push_str("</svg>");
    s
}

/// One GPU over one column at (x, y, width, height): the hatch of what was not allocated, and
/// the allocated share coloured by how much of it was used.
fn heat_cell(
    gpu: &str,
    t: i64,
    c: &HeatCell,
    (x, y, cw, ch): (f64, f64, f64, f64),
    pattern: &str,
) -> String {
    let alloc = c.allocated.clamp(0.0, 1.0);
    let used = if c.allocated > 0.0 {
        (c.effective / c.allocated).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let tip = format!(
        "{gpu} · {} UTC · allocated {:.0} % of the GPU · effective {:.0} % of the GPU{}",
        crate::format::short_time(t),
        c.allocated * 100.0,
        c.effective * 100.0,
        if c.allocated > 0.0 {
            format!(" ({:.0} % of the allocation)", used * 100.0)
        } else {
            String::new()
        }
    );
    let mut s = format!(
        "<g><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{ch:.1}\" fill=\"url(#{pattern})\"/>",
        cw.max(0.6)
    );
    if alloc > 0.0 {
        let ah = (ch * alloc).max(1.5);
        s.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{ah:.1}\" fill=\"{}\"/>",
            y + ch - ah,
            cw.max(0.6),
            heat_colour(used)
        ));
    }
    s.push_str(&format!("<title>{}</title></g>", esc(&tip)));
    s
}

#[cfg(test)]
mod tests;
