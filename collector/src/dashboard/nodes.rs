//! `/nodes`, `/nodes/{node}` and `/gpus/{uuid}`: nodes, and each GPU with its charts, MIG
//! instances and occupants.

use super::page::*;
use super::series::*;
use model::inventory::Sharing;
use model::profiling::{self, Ratio};
use model::rollup::NodeRollup;

#[derive(Debug, Deserialize)]
pub struct NodesQuery {
    /// Part of a node's, cluster's or GPU model's name (case-insensitive).
    pub q: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
    /// `csv`: the table as a download, with the same rows and columns.
    pub format: Option<String>,
}

pub async fn nodes(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<NodesQuery>,
) -> PageOrCsv {
    let csv = wants_csv(q.format.as_deref())?;
    let now = model::time::now_ms();
    let a = analysis(&state).await?;
    let list = state.shared.store.nodes().await?;
    let gpus = state.shared.store.gpus(None).await?;
    let by_node = funnel_by_node(a.as_deref());
    let needle = q.q.as_deref().unwrap_or("").trim().to_lowercase();
    let mut rows: Vec<pages::NodeRow> = list
        .iter()
        .map(|n| node_row(n, &gpus, &by_node, a.as_deref(), now))
        .filter(|r| {
            needle.is_empty()
                || [&r.node, &r.cluster, &r.models]
                    .iter()
                    .any(|s| s.to_lowercase().contains(&needle))
        })
        .collect();
    // By name, A to Z, unless another order is asked for.
    let sq = SortQuery {
        sort: q.sort.clone(),
        dir: q
            .dir
            .clone()
            .or_else(|| q.sort.is_none().then(|| "asc".to_owned())),
    };
    sorted(&mut rows, &sq, "node", |r, k| match k {
        "cluster" => text(&r.cluster),
        "status" => text(&r.status),
        "gpus" => num(r.gpus as f64),
        "util" => num(r.util.unwrap_or(-1.0)),
        "class" => text(&r.class),
        "last" => text(&r.last_sample),
        _ => text(&r.node),
    });
    if csv {
        return Ok(csv_download("nodes", pages::nodes_csv(&rows)));
    }
    let mut f = frame(&state, &caller, "Nodes");
    f.refresh_s = Some(60);
    let base = query_string(&[("q", q.q.as_deref().unwrap_or(""))]);
    Ok(Html(pages::nodes(
        f,
        rows,
        q.q.unwrap_or_default(),
        sort_state(base, &sq, "node"),
    ))
    .into_response())
}

/// One node, or one GPU of it (`only`).
async fn node_page(
    state: &DashboardState,
    caller: &Caller,
    node: &str,
    only: Option<&str>,
    q: &RangeQuery,
) -> PageOrCsv {
    let range = q.range.as_deref();
    let now = model::time::now_ms();
    let (range, span) = range_ms(range);
    let (from, to) = (now - span, now);
    let Some(n) = state
        .shared
        .store
        .nodes()
        .await?
        .into_iter()
        .find(|n| n.node == node)
    else {
        return Err(not_found(format!("no node named {node:?} has reported")));
    };
    let gpus: Vec<_> = state
        .shared
        .store
        .gpus(Some(node))
        .await?
        .into_iter()
        .filter(|g| only.is_none_or(|u| g.uuid == u))
        .collect();
    let rollups = state
        .shared
        .store
        .rollups(store::Rollups::Hour, &n.cluster, node, from, to)
        .await?;
    let a = analysis(state).await?;
    let known: HashMap<String, String> = state
        .shared
        .store
        .tenants()
        .await?
        .iter()
        .map(|t| (t.key().to_string(), t.display_name()))
        .collect();
    let name = |k: &str| {
        known.get(k).cloned().unwrap_or_else(|| match &a {
            Some(a) => name_of(a, k),
            None => k.to_owned(),
        })
    };
    let newest = rollups.tenants.keys().map(|(_, _, b)| *b).max();
    let mut panels: Vec<pages::GpuPanel> = gpus
        .iter()
        .map(|g| gpu_panel(g, &rollups, newest, &name, (from, to)))
        .collect();
    // Who holds which MIG instance: the raw allocations of the last day.
    for p in panels.iter_mut().filter(|p| !p.mig.is_empty()) {
        let held = state
            .shared
            .store
            .mig_holders(&p.uuid, to - 86_400_000, to + 60_000)
            .await?;
        for m in &mut p.mig {
            m.holders = held
                .iter()
                .filter(|(gi, _)| *gi == m.gi)
                .map(|(_, k)| (k.clone(), name(k)))
                .collect();
        }
    }
    share_scales(&mut panels);
    let labels = a
        .as_ref()
        .and_then(|a| {
            crate::labels::advisory_labels(a, a.generated_ms)
                .remove(&(n.cluster.clone(), node.to_owned()))
        })
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    let mechanisms = in_place(state, a.as_deref(), &n.cluster, node, &gpus).await?;
    let title = match only {
        Some(_) if !gpus.is_empty() => format!("GPU {} of {node}", gpus[0].index),
        _ => format!("Node {node}"),
    };
    let mut f = frame(state, caller, title);
    f.refresh_s = Some(60);
    let v = pages::NodeView {
        cluster: n.cluster.clone(),
        node: node.to_owned(),
        status: shown_status(&n, a.as_deref(), now),
        range: range.into(),
        ranges: ranges(),
        gpu: only.map(str::to_owned),
        gpus: panels,
        labels,
        findings: a
            .as_deref()
            .map(|a| {
                a.findings
                    .iter()
                    .filter(|f| f.cluster == n.cluster && f.node == node)
                    .filter(|f| only.is_none_or(|u| f.gpu.as_deref() == Some(u)))
                    .map(|f| {
                        (
                            f.id.clone(),
                            f.severity.as_str().to_owned(),
                            f.summary.clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        mechanisms,
    };
    page_or_table(q.asked(), "node", v, pages::node_tables, |v| {
        pages::node(f, v)
    })
}

/// The per-GPU sharing mechanisms a node has: seen there by the demand poll, or configured
/// for its pool (`[analytics.mechanisms]`, as the newest analysis' plan of the pool has it).
async fn in_place(
    state: &DashboardState,
    a: Option<&Analysis>,
    cluster: &str,
    node: &str,
    gpus: &[store::GpuRecord],
) -> Result<Vec<String>, store::StoreError> {
    use analytics::mechanism::Mechanism;
    let seen: Vec<Mechanism> = state
        .shared
        .store
        .node_mechanisms()
        .await?
        .into_iter()
        .filter(|m| m.cluster == cluster && m.node == node)
        .filter_map(|m| Mechanism::parse(&m.mechanism))
        .collect();
    let pool = a.and_then(|a| {
        let model = &gpus.first()?.model;
        a.plan
            .pools
            .iter()
            .find(|p| p.cluster == cluster && &p.model == model)
    });
    let configured = pool
        .map(|p| {
            p.has
                .iter()
                .filter(|m| !p.seen.iter().any(|(s, _)| s == *m))
                .copied()
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut out: Vec<String> = seen
        .iter()
        .map(|m| format!("{} (seen)", m.declared().name))
        .collect();
    out.extend(
        configured
            .iter()
            .filter(|m| !seen.contains(m))
            .map(|m| format!("{} (configured)", m.declared().name)),
    );
    Ok(out)
}

pub async fn node(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(node): Path<String>,
    Query(q): Query<RangeQuery>,
) -> PageOrCsv {
    node_page(&state, &caller, &node, None, &q).await
}

pub async fn gpu(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(uuid): Path<String>,
    Query(q): Query<RangeQuery>,
) -> PageOrCsv {
    let Some(g) = state
        .shared
        .store
        .gpus(None)
        .await?
        .into_iter()
        .find(|g| g.uuid == uuid)
    else {
        return Err(not_found(format!("no GPU {uuid:?} has reported")));
    };
    node_page(&state, &caller, &g.node, Some(&uuid), &q).await
}

/// The analysis' funnel rows by (cluster, node).
fn funnel_by_node(a: Option<&Analysis>) -> HashMap<(&str, &str), &analytics::FunnelRow> {
    a.map(|a| {
        a.funnel
            .by_node
            .iter()
            .map(|r| {
                (
                    (r.cluster.as_deref().unwrap_or("default"), r.key.as_str()),
                    r,
                )
            })
            .collect()
    })
    .unwrap_or_default()
}

/// A node's status as the pages show it: whether it reports, and whether the newest analysis
/// found hardware errors on it (such a node is not plainly "reporting").
fn shown_status(n: &store::NodeRecord, a: Option<&Analysis>, now: i64) -> String {
    let status = node_status(n, now);
    let hardware = a.is_some_and(|a| {
        a.findings.iter().any(|f| {
            f.kind == analytics::FindingKind::Hardware && f.cluster == n.cluster && f.node == n.node
        })
    });
    if hardware && status == "reporting" {
        "reporting, hardware errors".into()
    } else {
        status.into()
    }
}

/// One node's row: its GPUs' models and sharing, and its effective use from the funnel.
fn node_row(
    n: &store::NodeRecord,
    gpus: &[store::GpuRecord],
    by_node: &HashMap<(&str, &str), &analytics::FunnelRow>,
    a: Option<&Analysis>,
    now: i64,
) -> pages::NodeRow {
    let mine: Vec<_> = gpus
        .iter()
        .filter(|g| g.node == n.node && g.cluster == n.cluster)
        .collect();
    let models: BTreeSet<&str> = mine.iter().map(|g| g.model.as_str()).collect();
    let sharing: BTreeSet<String> = mine
        .iter()
        .map(|g| web::format::sharing(g.sharing.as_str()))
        .collect();
    let f = by_node.get(&(n.cluster.as_str(), n.node.as_str()));
    let util = f.and_then(|r| {
        r.capacity_gpu_hours
            .filter(|c| *c > 0.0 && r.effective_signal != "none")
            .map(|c| r.effective_gpu_hours / c * 100.0)
    });
    pages::NodeRow {
        cluster: n.cluster.clone(),
        node: n.node.clone(),
        status: shown_status(n, a, now),
        gpus: n.gpu_count,
        models: models.into_iter().collect::<Vec<_>>().join(", "),
        sharing_words: sharing.into_iter().collect::<Vec<_>>().join(", "),
        util,
        class: f
            .map(|r| {
                crate::labels::utilization_class(
                    r.effective_gpu_hours,
                    r.capacity_gpu_hours,
                    &r.effective_signal,
                )
                .to_owned()
            })
            .unwrap_or_else(|| "unknown".into()),
        last_sample: n.last_sample_ms.map(time).unwrap_or_else(|| "never".into()),
        energy_kwh: f.and_then(|r| r.energy).map(|e| e.kwh),
    }
}

/// Allocated and effective GPU-hours per tenant: over the range and in the newest hour.
type Occupancy<'a> = BTreeMap<&'a str, (f64, f64)>;

fn occupancy<'a>(
    uuid: &str,
    rollups: &'a NodeRollup,
    newest: Option<i64>,
) -> (Occupancy<'a>, Occupancy<'a>) {
    let mut range_use = Occupancy::new();
    let mut now_use = Occupancy::new();
    for ((gpu, tenant, bucket), t) in &rollups.tenants {
        if gpu != uuid || t.alloc_n == 0 {
            continue;
        }
        let (al, ef) = (t.allocated_gpu_hours(), t.effective_gpu_hours());
        let e = range_use.entry(tenant).or_default();
        e.0 += al;
        e.1 += ef;
        if Some(*bucket) == newest {
            let e = now_use.entry(tenant).or_default();
            e.0 += al;
            e.1 += ef;
        }
    }
    (range_use, now_use)
}

fn occupants(m: Occupancy<'_>, name: &dyn Fn(&str) -> String) -> Vec<pages::Occupant> {
    let mut v: Vec<pages::Occupant> = m
        .into_iter()
        .map(|(k, (al, ef))| pages::Occupant {
            key: k.to_owned(),
            name: name(k),
            allocated_hours: al,
            effective_hours: ef,
        })
        .collect();
    v.sort_by(|x, y| y.allocated_hours.total_cmp(&x.allocated_hours));
    v
}

/// One GPU's panel: its MIG instances, occupants and charts.
fn gpu_panel(
    g: &store::GpuRecord,
    rollups: &NodeRollup,
    newest: Option<i64>,
    name: &dyn Fn(&str) -> String,
    range: (i64, i64),
) -> pages::GpuPanel {
    let (range_use, now_use) = occupancy(&g.uuid, rollups, newest);
    pages::GpuPanel {
        uuid: g.uuid.clone(),
        index: g.index,
        model: g.model.clone(),
        sharing_words: web::format::sharing(g.sharing.as_str()),
        memory_gib: g.memory_total_bytes as f64 / GIB,
        mig: g
            .mig_instances
            .iter()
            .map(|m| pages::MigRow {
                profile: m.profile.clone(),
                gi: m.gi_id,
                ci: m.ci_id,
                memory_gib: m.memory_total_bytes as f64 / GIB,
                placement: match (m.placement_start, m.placement_size) {
                    (Some(s), Some(1)) => format!("slice {s}"),
                    (Some(s), Some(z)) => format!("slices {s}–{}", s + z - 1),
                    _ => "–".into(),
                },
                holders: Vec::new(),
            })
            .collect(),
        now: occupants(now_use, name),
        range: occupants(range_use, name),
        charts: gpu_charts(g, rollups, range),
    }
}

/// A GPU's hourly charts: utilization and SM activity, memory, power, temperature, and the
/// other DCGM profiling ratios where it reports them.
fn gpu_charts(g: &store::GpuRecord, rollups: &NodeRollup, (from, to): (i64, i64)) -> Vec<Chart> {
    let series = |f: &dyn Fn(&model::rollup::GpuAgg) -> Option<f64>| -> Vec<(i64, Option<f64>)> {
        rollups
            .gpus
            .iter()
            .filter(|((u, _), _)| u == &g.uuid)
            .map(|((_, b), agg)| (*b, f(agg)))
            .collect()
    };
    let chart =
        |title: String, unit: &str, y_max: Option<f64>, lines: Vec<Line>, empty: &str| Chart {
            title,
            unit: unit.into(),
            from_ms: from,
            to_ms: to,
            y_max,
            lines,
            empty_note: empty.into(),
            ..Chart::default()
        };
    let line = |name: &str, points| Line {
        name: name.into(),
        points,
    };
    let mut charts = vec![
        chart(
            format!("GPU {} utilization and SM activity", g.index),
            "%",
            Some(100.0),
            vec![
                line(
                    "GPU utilization (NVML)",
                    series(&|x| x.gpu_util.mean().map(|v| v * 100.0)),
                ),
                line(
                    "SM activity (DCGM)",
                    series(&|x| x.ratios.get(Ratio::SmActive).mean().map(|v| v * 100.0)),
                ),
            ],
            "No utilization samples in this range.",
        ),
        chart(
            format!("GPU {} memory used", g.index),
            "GiB",
            Some(g.memory_total_bytes as f64 / GIB),
            vec![line(
                "memory used",
                series(&|x| x.mem_used.mean().map(|v| v / GIB)),
            )],
            "No memory samples in this range.",
        ),
        chart(
            format!("GPU {} power", g.index),
            "W",
            None,
            vec![line("power", series(&|x| x.power.mean()))],
            "Power is not reported for this device.",
        ),
        chart(
            format!("GPU {} temperature", g.index),
            "°C",
            None,
            vec![line("temperature", series(&|x| x.temp.mean()))],
            "Temperature is not reported for this device.",
        ),
    ];
    // The other DCGM profiling ratios ([`model::profiling`]), those this GPU reported.
    let profiling: Vec<Line> = profiling::RATIOS
        .iter()
        .filter(|r| r.ratio != Ratio::SmActive)
        .map(|r| {
            let i = r.ratio;
            line(
                r.title,
                series(&|x| x.ratios.get(i).mean().map(|v| v * 100.0)),
            )
        })
        .filter(|l| l.points.iter().any(|(_, v)| v.is_some()))
        .collect();
    if !profiling.is_empty() {
        charts.push(chart(
            format!("GPU {} DCGM profiling", g.index),
            "%",
            Some(100.0),
            profiling,
            "",
        ));
    }
    if g.sharing == Sharing::Mig
        && charts[0].lines[0].points.iter().all(|(_, v)| v.is_none())
        && charts[0].lines[1].points.iter().any(|(_, v)| v.is_some())
    {
        // NVML reports no device utilization while MIG is enabled; DCGM's SM activity is the
        // measure.
        charts[0].lines.remove(0);
        charts[0].title = format!(
            "GPU {} SM activity (NVML reports no utilization in MIG mode)",
            g.index
        );
    } else if charts[0].lines[1].points.iter().all(|(_, v)| v.is_none()) {
        // Say why the line is missing instead of listing a series that is not drawn.
        charts[0].lines.truncate(1);
        charts[0].title = if g.sharing == Sharing::Mig {
            format!(
                "GPU {} utilization (per-instance SM activity is not measurable without DCGM)",
                g.index
            )
        } else {
            format!(
                "GPU {} utilization (SM activity is not measurable without DCGM)",
                g.index
            )
        };
    }
    charts
}

/// Charts in the same place of every GPU panel share a unit: give them one y scale (the
/// largest top among them), so the GPUs of a node compare at a glance.
fn share_scales(panels: &mut [pages::GpuPanel]) {
    let slots = panels.iter().map(|p| p.charts.len()).max().unwrap_or(0);
    for i in 0..slots {
        let top = panels
            .iter()
            .filter_map(|p| p.charts.get(i))
            .flat_map(|c| {
                c.lines
                    .iter()
                    .flat_map(|l| l.points.iter().filter_map(|(_, v)| *v))
                    .chain(c.y_max)
            })
            .fold(0.0_f64, f64::max);
        if top > 0.0 {
            for c in panels.iter_mut().filter_map(|p| p.charts.get_mut(i)) {
                c.y_max = Some(top);
            }
        }
    }
}
