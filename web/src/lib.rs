//! The gpulens web dashboard, rendered on the server with leptos. Pages work without
//! JavaScript. This crate knows view models only; the collector fills them from its store.

use leptos::prelude::*;

/// What the home page shows about the running collector.
#[derive(Debug, Clone, PartialEq)]
pub struct HomeView {
    pub version: String,
    pub backend: String,
    pub clusters: usize,
    pub nodes: Vec<NodeRow>,
    pub gpu_count: i64,
    pub tenant_count: usize,
}

/// One row of the node table.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub cluster: String,
    pub node: String,
    pub status: String,
    pub gpus: i64,
    pub last_sample: String,
}

#[component]
fn Home(view: HomeView) -> impl IntoView {
    let HomeView {
        version,
        backend,
        clusters,
        nodes,
        gpu_count,
        tenant_count,
    } = view;
    let node_count = nodes.len();
    let rows = nodes
        .into_iter()
        .map(|n| {
            let class = if n.status == "reporting" {
                "ok"
            } else {
                "warn"
            };
            view! {
                <tr>
                    <td>{n.cluster}</td>
                    <td>{n.node}</td>
                    <td class=class>{n.status}</td>
                    <td class="num">{n.gpus}</td>
                    <td>{n.last_sample}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <header>
            <h1>"gpulens"</h1>
            <p class="sub">"GPU utilization analytics · " {version} " · storage: " {backend}</p>
        </header>
        <main>
            <section class="cards" aria-label="Fleet summary">
                <div class="card"><span class="big">{clusters}</span>" clusters"</div>
                <div class="card"><span class="big">{node_count}</span>" nodes"</div>
                <div class="card"><span class="big">{gpu_count}</span>" GPUs"</div>
                <div class="card"><span class="big">{tenant_count}</span>" tenants"</div>
            </section>
            <section>
                <h2>"Nodes"</h2>
                <table>
                    <thead><tr><th scope="col">"Cluster"</th><th scope="col">"Node"</th><th scope="col">"Status"</th><th scope="col">"GPUs"</th><th scope="col">"Last sample (UTC)"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </section>
            <section>
                <h2>"API"</h2>
                <ul>
                    <li><a href="/api/v1/nodes">"/api/v1/nodes"</a></li>
                    <li><a href="/api/v1/gpus">"/api/v1/gpus"</a></li>
                    <li><a href="/api/v1/tenants">"/api/v1/tenants"</a></li>
                    <li><a href="/metrics">"/metrics"</a></li>
                </ul>
            </section>
        </main>
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1a1a1a;background:#fafafa}\
header{background:#123;color:#fff;padding:1rem 2rem}header h1{margin:0}.sub{margin:.2rem 0 0;color:#cde}\
main{padding:1rem 2rem}.cards{display:flex;gap:1rem;flex-wrap:wrap}.card{background:#fff;border:1px solid #ccc;border-radius:6px;padding:1rem;min-width:8rem}\
.big{font-size:2rem;font-weight:600;display:block}table{border-collapse:collapse;background:#fff}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}\
.num{text-align:right}.ok{color:#0a6b2d}.warn{color:#9a3412;font-weight:600}a{color:#0645ad}";

/// The home page as a complete HTML document.
pub fn render_home(view: HomeView) -> String {
    let owner = Owner::new();
    let body = owner.with(|| view! { <Home view=view/> }.to_html());
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>gpulens</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_page_lists_nodes_and_escapes_text() {
        let html = render_home(HomeView {
            version: "0.1.0".into(),
            backend: "sqlite".into(),
            clusters: 1,
            nodes: vec![NodeRow {
                cluster: "lab".into(),
                node: "<gpu-1>".into(),
                status: "reporting".into(),
                gpus: 2,
                last_sample: "2026-11-21T00:00:00Z".into(),
            }],
            gpu_count: 2,
            tenant_count: 3,
        });
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("&lt;gpu-1&gt;"), "{html}");
        assert!(!html.contains("<gpu-1>"));
        assert!(html.contains("reporting"));
    }
}
