//! The pages: one view model and render function per page, a file each; what they share
//! (sorting, range selection, empty rows, the problem page) is here.

use leptos::prelude::*;

use crate::chart::{self, Chart};
use crate::format::{self, enc, money, num, pct};
use crate::{Frame, Nav, document};

mod alerts;
mod carry_out;
mod findings;
mod holder;
mod login;
mod nodes;
mod overview;
mod reclaim;
mod recommendations;
mod reports;
mod usage;

pub use alerts::*;
pub use carry_out::*;
pub use findings::*;
pub use holder::*;
pub use login::*;
pub use nodes::*;
pub use overview::*;
pub use reclaim::*;
pub use recommendations::*;
pub use reports::*;
pub use usage::*;

/// A link to a node's page, or "cluster-wide" for what concerns no one node (a waiting-demand
/// finding is about a GPU pool).
fn node_link(node: &str) -> AnyView {
    if node.is_empty() {
        view! { <span class="note">"cluster-wide"</span> }.into_any()
    } else {
        view! { <a href=format!("/nodes/{}", enc(node))>{node.to_owned()}</a> }.into_any()
    }
}

/// Sorting of a table, carried in the URL (`sort`, `dir`) so links keep it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sort {
    /// The rest of the page's query string (filters, range), already encoded.
    pub base: String,
    pub key: String,
    pub desc: bool,
}

/// The link that downloads the table as shown (its filters and order) as CSV.
fn csv_link(path: &str, s: &Sort) -> impl IntoView + use<> {
    let mut q = vec!["format=csv".to_owned()];
    if !s.base.is_empty() {
        q.push(s.base.clone());
    }
    q.push(format!(
        "sort={}&dir={}",
        enc(&s.key),
        if s.desc { "desc" } else { "asc" }
    ));
    download_note(format!("{path}?{}", q.join("&")), "this table")
}

/// The note under a table that links its CSV download at `href`; `what` names the table.
fn download_note(href: String, what: &'static str) -> impl IntoView + use<> {
    view! { <p class="note"><a href=href download="">{format!("Download {what} as CSV")}</a>" (the same rows and columns, safe to open in a spreadsheet)"</p> }
}

/// One of a page's tables as CSV: `name` is the `table=` its download link carries. A page
/// with several tables lists them all (`*_tables`); the collector answers the one asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct TableCsv {
    pub name: String,
    pub csv: String,
}

impl TableCsv {
    fn new(
        name: impl Into<String>,
        header: &[&str],
        rows: impl IntoIterator<Item = Vec<String>>,
    ) -> Self {
        TableCsv {
            name: name.into(),
            csv: crate::csv::table(header, rows),
        }
    }
}

/// The download note under table `name` of the page at `here` (its path and query, if any).
fn table_note(here: &str, name: &str) -> impl IntoView + use<> {
    let sep = if here.contains('?') { '&' } else { '?' };
    download_note(
        format!("{here}{sep}format=csv&table={}", enc(name)),
        "this table",
    )
}

/// A figures table (`figures_table`) as CSV.
fn figures_csv(name: &str, rows: &[(String, String)]) -> TableCsv {
    use crate::csv::field;
    TableCsv::new(
        name,
        &["Figure", "Value"],
        rows.iter().map(|(n, v)| vec![field(n), field(v)]),
    )
}

/// A column header that sorts by `key` when followed.
fn th(label: &'static str, key: &'static str, s: &Sort, numeric: bool) -> impl IntoView {
    let (dir, aria) = if s.key == key {
        if s.desc {
            ("asc", Some("descending"))
        } else {
            ("desc", Some("ascending"))
        }
    } else {
        ("desc", None)
    };
    let sep = if s.base.is_empty() { "" } else { "&" };
    let href = format!("?{}{sep}sort={key}&dir={dir}", s.base);
    let arrow = match aria {
        Some("descending") => " ▼",
        Some(_) => " ▲",
        None => "",
    };
    // The sorted column is the table's key: on a phone it comes right after the link.
    let class = match (numeric, aria.is_some()) {
        (true, true) => "n key",
        (true, false) => "n",
        (false, true) => "key",
        (false, false) => "",
    };
    view! {
        <th scope="col" class=class aria-sort=aria>
            <a href=href>{label}{arrow}</a>
        </th>
    }
}

/// A filter's drop-down: "any", then each option (shown through `show`; the value is sent).
fn select(
    id: &'static str,
    label: &'static str,
    value: &str,
    options: &[String],
    show: fn(&str) -> String,
) -> impl IntoView {
    let opts = std::iter::once(String::new())
        .chain(options.iter().filter(|o| !o.is_empty()).cloned())
        .map(|o| {
            let selected = o == value;
            let shown = if o.is_empty() {
                "any".to_owned()
            } else {
                show(&o)
            };
            view! { <option value=o selected=selected>{shown}</option> }
        })
        .collect_view();
    view! { <label for=id>{label}<select id=id name=id>{opts}</select></label> }
}

/// The time-range selector of pages with charts.
fn range_select(ranges: &[String], current: &str) -> impl IntoView + use<> {
    let options = ranges
        .iter()
        .map(|r| {
            let selected = r == current;
            view! { <option value=r.clone() selected=selected>{r.clone()}</option> }
        })
        .collect_view();
    view! { <label for="range">"Time range"<select id="range" name="range">{options}</select></label> }
}

/// A name that may wrap where a reader expects it to (before a capital that follows a small
/// letter, after `/`, `_`, `.` or `:`) and nowhere mid-word.
fn breakable(name: &str) -> impl IntoView + use<> {
    let mut html = String::new();
    let mut prev: Option<char> = None;
    for c in name.chars() {
        if c.is_uppercase() && prev.is_some_and(char::is_lowercase) {
            html.push_str("<wbr>");
        }
        html.push_str(&chart::esc(c.encode_utf8(&mut [0; 4])));
        if matches!(c, '/' | '_' | '.' | ':') {
            html.push_str("<wbr>");
        }
        prev = Some(c);
    }
    view! { <span inner_html=html></span> }
}

/// The range selector of tables that default to the scheduled analysis' window: that window
/// (empty value) or one of `ranges` back from now.
fn range_or_window(ranges: &[String], current: &str) -> impl IntoView + use<> {
    let options = std::iter::once(String::new())
        .chain(ranges.iter().cloned())
        .map(|r| {
            let selected = r == current;
            let shown = if r.is_empty() {
                "the analysed window".to_owned()
            } else {
                format!("last {r}")
            };
            view! { <option value=r selected=selected>{shown}</option> }
        })
        .collect_view();
    view! { <label for="range">"Range"<select id="range" name="range">{options}</select></label> }
}

fn raw(html: String) -> impl IntoView {
    view! { <div inner_html=html></div> }
}

fn sev_class(s: &str) -> String {
    format!("sev-{s}")
}

/// A table of named figures (a finding's metrics, a step's replay): a row each, the name as
/// its heading and the figure right-aligned.
fn figures_table(rows: &[(String, String)]) -> impl IntoView + use<> {
    let rows = rows
        .iter()
        .map(|(name, value)| {
            view! { <tr><th scope="row">{name.clone()}</th><td class="n">{value.clone()}</td></tr> }
        })
        .collect_view();
    view! { <table><tbody>{rows}</tbody></table> }
}

/// What an empty table shows instead of bare headers: "None" and why, across its columns.
fn none_row(columns: usize, why: &str) -> AnyView {
    view! { <tr><td colspan=columns.to_string() class="note">{format!("None: {why}.")}</td></tr> }
        .into_any()
}

/// A page for a missing thing or a bad request.
pub fn problem(frame: Frame, message: String) -> String {
    document(frame, Nav::None, move || {
        view! { <h1>"Not here"</h1><p class="error" role="alert">{message}</p><p><a href="/">"Back to the overview"</a></p> }.into_any()
    })
}

#[cfg(test)]
mod tests;
