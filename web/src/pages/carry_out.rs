//! A step page's "what it interrupts" and "carry it out" parts: the workloads the
//! step drains, moves, restarts or stops, with their teams and each move's pod-spec change;
//! how long the workflow may hold the node; where the generated config goes; and, where the
//! label workflow is off, the commands that carry it out by hand and what turning it on takes.

use super::*;

/// One workload a step interrupts.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptRow {
    /// `namespace/pod/container`, a Slurm job or a user.
    pub workload: String,
    pub team: String,
    /// drained | moved | restarted | stopped
    pub how: String,
    /// What its pod spec needs at its new place (YAML to merge), where it moves.
    pub change: Option<String>,
}

/// How a step is carried out, in the collector's own terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CarryOut {
    pub interrupts: Vec<InterruptRow>,
    /// How long the interruption may last, by the workflow's own limits.
    pub timing: Option<String>,
    /// Where the generated config goes and the label that selects it.
    pub config_place: Option<String>,
    /// With the label workflow off: the commands that carry it out by hand.
    pub by_hand: Option<String>,
    /// With the label workflow off: what turning it on takes.
    pub turn_on: Option<String>,
}

/// The "What it interrupts" section.
pub fn interrupts(c: &CarryOut, here: &str) -> impl IntoView + use<> {
    if c.interrupts.is_empty() {
        return view! { <h2>"What it interrupts"</h2><p class="note">"Nothing running now: no workload holds a GPU this step touches."</p> }.into_any();
    }
    let rows = c
        .interrupts
        .iter()
        .map(|r| {
            view! {
                <tr>
                    <td>{r.workload.clone()}</td>
                    <td>{r.team.clone()}</td>
                    <td>{r.how.clone()}</td>
                    <td>{r.change.clone().map_or_else(|| view! { <span class="note">"no spec change"</span> }.into_any(), |c| view! { <pre>{c}</pre> }.into_any())}</td>
                </tr>
            }
        })
        .collect_view();
    let timing = c.timing.clone().map(|t| view! { <p class="note">{t}</p> });
    view! {
        <h2>"What it interrupts"</h2>
        <div class="scroll"><table>
            <thead><tr><th scope="col">"Workload"</th><th scope="col">"Team"</th><th scope="col" class="key">"How"</th><th scope="col">"Its pod-spec change"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table></div>
        {table_note(here, "interrupts")}
        {timing}
    }
    .into_any()
}

/// Where the config goes, and the commands by hand where the workflow is off.
pub fn by_hand(c: &CarryOut) -> impl IntoView + use<> {
    let place = c.config_place.clone().map(|p| view! { <p>{p}</p> });
    let commands = c.by_hand.clone().map(|text| {
        view! {
            <h3>"By hand"</h3>
            <pre>{text}</pre>
        }
    });
    let on = c.turn_on.clone().map(|t| view! { <p class="note">{t}</p> });
    view! { {place}{commands}{on} }
}

/// The "What it interrupts" table as CSV.
pub fn interrupts_csv(c: &CarryOut) -> TableCsv {
    use crate::csv::field;
    TableCsv::new(
        "interrupts",
        &["Workload", "Team", "How", "Its pod-spec change"],
        c.interrupts.iter().map(|r| {
            vec![
                field(&r.workload),
                field(&r.team),
                field(&r.how),
                field(r.change.as_deref().unwrap_or("")),
            ]
        }),
    )
}
