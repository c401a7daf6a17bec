//! The gpulens web dashboard, rendered on the server with leptos. Every page works without
//! JavaScript (there is none): state lives in the URL (range, filters, sort), charts are inline
//! SVG with native hover titles, live pages refresh with `<meta http-equiv="refresh">`. This
//! crate knows view models only; the collector fills them from its store (collector/src/ui/).

pub mod chart;
pub mod csv;
pub mod format;
pub mod pages;

use leptos::prelude::*;

/// The sections of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Nodes,
    Tenants,
    Teams,
    Findings,
    Recommendations,
    Reports,
    Alerts,
    Reclaim,
    None,
}

const NAV: [(Nav, &str, &str); 9] = [
    (Nav::Overview, "/", "Overview"),
    (Nav::Nodes, "/nodes", "Nodes"),
    (Nav::Tenants, "/tenants", "Tenants"),
    (Nav::Teams, "/teams", "Teams"),
    (Nav::Findings, "/findings", "Findings"),
    (Nav::Recommendations, "/recommendations", "Recommendations"),
    (Nav::Reports, "/reports", "Reports"),
    (Nav::Alerts, "/alerts", "Alerts"),
    (Nav::Reclaim, "/reclaim", "Reclaim"),
];

/// What every page carries besides its content.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frame {
    pub title: String,
    /// Reload the page every this many seconds (live pages).
    pub refresh_s: Option<u32>,
    /// Who is signed in, if anyone.
    pub operator: Option<String>,
    /// Their role (and teams, when limited to some), as shown beside the name.
    pub role: Option<String>,
    /// Reading needs no sign-in here (`[access] mode = "open"`): the pages say so.
    pub open: bool,
    /// Shown at the top (after an action).
    pub notice: Option<String>,
    pub version: String,
}

const STYLE: &str = r#"
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#16191d;background:#f6f7f9}
a{color:#0b4f9c}a:focus-visible,button:focus-visible,input:focus-visible,select:focus-visible{outline:3px solid #f59e0b;outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:.5rem;background:#fff;padding:.3rem .6rem;z-index:9}
header.top{background:#13253b;color:#fff;padding:.5rem 1.5rem;display:flex;flex-wrap:wrap;align-items:center;gap:1rem}
header.top .brand{font-weight:700;font-size:1.15rem;color:#fff;text-decoration:none}
nav ul{list-style:none;display:flex;flex-wrap:wrap;gap:.2rem;margin:0;padding:0}
nav a{color:#dbe7f5;text-decoration:none;padding:.3rem .55rem;border-radius:4px;display:inline-block}
nav a[aria-current=page]{background:#fff;color:#13253b;font-weight:600}nav a:hover{background:#2a4465;color:#fff}
.who{margin-left:auto;color:#dbe7f5;font-size:.9em}.who a{color:#fff}
main{padding:1rem 1.5rem;max-width:78rem;margin:0 auto}
h1{font-size:1.45rem;margin:.4rem 0 .6rem}h2{font-size:1.15rem;margin:1.4rem 0 .5rem}
.note,.meta{color:#4b5563}.note{font-size:.92em}
.notice{background:#e8f3ea;border:1px solid #86b893;padding:.5rem .8rem;border-radius:6px}
.error{background:#fdecea;border:1px solid #e0a39b;padding:.5rem .8rem;border-radius:6px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(11rem,1fr));gap:.8rem;margin:.6rem 0}
.card{background:#fff;border:1px solid #d4d9e0;border-radius:8px;padding:.6rem .9rem}
.card b{display:block;font-size:1.45rem}.card span{color:#4b5563;font-size:.88em}
table{border-collapse:collapse;width:100%;background:#fff;font-variant-numeric:tabular-nums;margin:.4rem 0}
th,td{border-bottom:1px solid #e1e5ea;padding:.32rem .55rem;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}th a{color:inherit}td.n,th.n{text-align:right}td.n{white-space:nowrap}@media (min-width:641px){td.t,td>a[href^="/nodes/"],td>a[href^="/gpus/"]{white-space:nowrap}}
tfoot th,tfoot td{font-weight:600;border-top:2px solid #c5ccd6;background:#f6f7f9}
caption{text-align:left;color:#4b5563;font-size:.9em;padding:.2rem 0}
.sev-critical{color:#a4161a;font-weight:600}.sev-warning{color:#8a4b00;font-weight:600}.sev-info{color:#334155}
.ok{color:#1b6e2e}.warn{color:#8a4b00;font-weight:600}
form.inline{display:inline;margin:0}
form.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:end;background:#fff;border:1px solid #d4d9e0;border-radius:8px;padding:.6rem .8rem}
form.filters label{display:flex;flex-direction:column;font-size:.88em;color:#374151}
select,input,button{font:inherit;padding:.25rem .45rem;border:1px solid #9aa4b2;border-radius:4px;background:#fff}
button{background:#13253b;color:#fff;border-color:#13253b;cursor:pointer}
figure.chart{background:#fff;border:1px solid #d4d9e0;border-radius:8px;margin:.6rem 0;padding:.5rem .7rem}
figure.chart figcaption{font-weight:600}.unit{color:#4b5563;font-weight:400}
svg text{font:11px system-ui,sans-serif;fill:#16191d}svg .tick{fill:#4b5563}
svg .marklabel{fill:#a4161a;font-weight:600}
figure.chart{container-type:inline-size}figure.chart svg.narrow,figure.chart .only-narrow{display:none}
@container (max-width:559.9px){figure.chart svg.wide{display:none}figure.chart svg.narrow,figure.chart .only-narrow{display:block}}
.swatch.dashed{background-image:linear-gradient(90deg,transparent 50%,#fff 50%)!important;background-size:6px 100%}
.swatch.ref{background:none;border-top:2px dashed #374151;height:0;vertical-align:3px}.swatch.mark{background:#a4161a;width:2px}
svg .grid{stroke:#e5e7eb}svg .axis{stroke:#9aa4b2}svg .hover{fill:transparent}svg .hover:hover{fill:rgba(31,95,168,.08)}
.legend{list-style:none;display:flex;flex-wrap:wrap;gap:.3rem 1rem;padding:0;margin:.2rem 0 0;font-size:.88em}
.swatch{display:inline-block;width:.9rem;height:.9rem;border-radius:2px;margin-right:.35rem;vertical-align:-2px}
.legend li.scale{display:grid;width:18rem;max-width:100%;row-gap:.1rem}.scale-bar{display:block;height:.8rem;border:1px solid #9aa4b2;border-radius:2px}
.scale-ticks{position:relative;display:block;height:1rem;font-size:.85em;color:#4b5563}.scale-ticks .tick{position:absolute;transform:translateX(-50%);white-space:nowrap}
.scale-ticks .tick:first-child{transform:none}.scale-ticks .tick:last-child{transform:translateX(-100%)}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(30rem,100%),1fr));gap:.8rem}
.scroll{overflow-x:auto}.phone{display:none}
@media (max-width:640px){
.phone{display:inline}
.scroll{background:linear-gradient(to left,#fff 30%,rgba(255,255,255,0)) right/1.5rem 100% no-repeat local,radial-gradient(farthest-side at 100% 50%,rgba(15,23,42,.28),rgba(15,23,42,0)) right/.7rem 100% no-repeat scroll,#fff}
/* Phone tables: the first column (the link) stays put, the key column (th.key: the one sorted by) comes next, the rest scrolls. */
.scroll table{background:transparent;display:block}.scroll thead,.scroll tbody,.scroll tfoot{display:block}
.scroll tr{display:flex;width:max-content;min-width:100%}
.scroll th,.scroll td{flex:0 0 7.5rem;min-width:0;order:2;overflow-wrap:break-word}.scroll td.n{white-space:normal}.scroll td[colspan]{flex:1 1 auto}.scroll .long{flex-basis:26rem}
.scroll th:first-child,.scroll td:first-child{order:0;flex:0 0 44vw;position:sticky;left:0;z-index:1;box-shadow:1px 0 0 #e1e5ea}
.scroll table:has(th.key:nth-child(2)) tr>:nth-child(2),.scroll table:has(th.key:nth-child(3)) tr>:nth-child(3),.scroll table:has(th.key:nth-child(4)) tr>:nth-child(4),.scroll table:has(th.key:nth-child(5)) tr>:nth-child(5),.scroll table:has(th.key:nth-child(6)) tr>:nth-child(6),.scroll table:has(th.key:nth-child(7)) tr>:nth-child(7),.scroll table:has(th.key:nth-child(8)) tr>:nth-child(8),.scroll table:has(th.key:nth-child(9)) tr>:nth-child(9),.scroll table:has(th.key:nth-child(10)) tr>:nth-child(10),.scroll table:has(th.key:nth-child(11)) tr>:nth-child(11),.scroll table:has(th.key:nth-child(12)) tr>:nth-child(12){order:1}
.scroll td:first-child{background:#fff}.scroll th:first-child{background:#eef1f5}
.scroll caption{display:block;position:sticky;left:0;max-width:calc(100vw - 2.5rem)}
main{padding:.8rem .7rem}
}
ol.actions{padding-left:1.4rem;margin:.3rem 0}ol.actions li{margin:.35rem 0}
a.button{display:inline-block;background:#0b4f9c;color:#fff;padding:.45rem .9rem;border-radius:4px;text-decoration:none;font-weight:600}
pre{background:#0f172a;color:#e2e8f0;padding:.7rem;border-radius:6px;overflow:auto;font-size:.85em}
footer{color:#4b5563;font-size:.85em;padding:1rem 1.5rem;text-align:center}
"#;

#[component]
fn Shell(frame: Frame, active: Nav, children: Children) -> impl IntoView {
    let links = NAV
        .iter()
        .map(|(nav, href, label)| {
            let current = (*nav == active).then_some("page");
            view! { <li><a href=*href aria-current=current>{*label}</a></li> }
        })
        .collect_view();
    let who = match frame.operator {
        Some(name) => view! {
            <span class="who">"Signed in as " <b>{name}</b> {frame.role.map(|r| format!(" ({r})"))} " · "
                <form method="post" action="/logout" style="display:inline"><button type="submit">"Sign out"</button></form>
            </span>
        }
        .into_any(),
        None => view! { <span class="who"><a href="/login">"Sign in"</a></span> }.into_any(),
    };
    let notice = frame
        .notice
        .map(|n| view! { <p class="notice" role="status">{n}</p> });
    view! {
        <a class="skip" href="#main">"Skip to content"</a>
        <header class="top">
            <a class="brand" href="/">"gpulens"</a>
            <nav aria-label="Main"><ul>{links}</ul></nav>
            {who}
        </header>
        <main id="main">
            {notice}
            {children()}
        </main>
        <footer>{frame.open.then_some("Open to read: anyone who reaches this address sees every team's usage (docs/security.md) · ")}"gpulens " {frame.version} " · "<a href="/api/v1/openapi.json">"API"</a>" · "<a href="/metrics">"metrics"</a></footer>
    }
}

/// A complete HTML document around `body`.
pub fn document(
    frame: Frame,
    active: Nav,
    body: impl FnOnce() -> AnyView + Send + 'static,
) -> String {
    let title = frame.title.clone();
    let refresh = frame.refresh_s;
    let owner = Owner::new();
    let html = owner.with(|| view! { <Shell frame=frame active=active>{body()}</Shell> }.to_html());
    let meta = refresh.map_or(String::new(), |s| {
        format!("<meta http-equiv=\"refresh\" content=\"{s}\">")
    });
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{meta}<title>{} · gpulens</title><link rel=\"icon\" href=\"data:,\"><style>{STYLE}</style></head><body>{html}</body></html>",
        chart::esc(&title)
    )
}
