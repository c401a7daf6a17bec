//! `sample --once --format table`: one sampling cycle laid out for a person, in the spirit of
//! nvidia-smi, with each process's tenant and who holds each GPU. Absent readings print as "-"
//! (not measured), never as 0.

use std::fmt::Write;

use model::wire::v1::Snapshot;
use model::{GpuInfo, Tenant};

fn pct(v: Option<f32>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{:.0}%", v * 100.0))
}

fn mib(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{}MiB", v / (1024 * 1024)))
}

pub fn table(
    cluster: &str,
    node: &str,
    inventory: &[GpuInfo],
    snap: &Snapshot,
    tenants: &[Tenant],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster {cluster}  node {node}  {}",
        model::figures::count(inventory.len() as f64, "GPU", "GPUs")
    );
    let _ = writeln!(
        out,
        "{:<4} {:<44} {:<24} {:>6} {:>7} {:>19} {:>7} {:>5}",
        "GPU", "UUID", "MODEL", "UTIL", "SM", "MEMORY", "POWER", "TEMP"
    );
    for g in inventory {
        let s = snap.gpus.iter().find(|s| s.gpu_uuid == g.uuid);
        let util = s.and_then(|s| s.gpu_util);
        let mem = format!(
            "{} / {}",
            mib(s.and_then(|s| s.mem_used_bytes)),
            mib(s.and_then(|s| s.mem_total_bytes))
        );
        let _ = writeln!(
            out,
            "{:<4} {:<44} {:<24} {:>6} {:>7} {:>19} {:>7} {:>5}",
            g.index,
            g.uuid,
            g.model.chars().take(24).collect::<String>(),
            if g.mig_enabled && util.is_none() {
                "MIG".to_owned()
            } else {
                pct(util)
            },
            pct(s.and_then(|s| s.sm_active)),
            mem,
            s.and_then(|s| s.power_w)
                .map_or_else(|| "-".to_owned(), |p| format!("{p:.0}W")),
            s.and_then(|s| s.temp_c)
                .map_or_else(|| "-".to_owned(), |t| format!("{t:.0}C")),
        );
        for m in &g.mig_instances {
            let ms = snap
                .mig
                .iter()
                .find(|x| x.gpu_uuid == g.uuid && x.gi_id == m.gi_id && x.ci_id == m.ci_id);
            let _ = writeln!(
                out,
                "  └ MIG {:<10} GI {:<3} CI {:<3} memory {} / {}   utilization: {}",
                m.profile,
                m.gi_id,
                m.ci_id,
                mib(ms.and_then(|s| s.mem_used_bytes)),
                mib(ms.and_then(|s| s.mem_total_bytes)),
                ms.and_then(|s| s.sm_active).map_or_else(
                    || "not measurable without DCGM".to_owned(),
                    |v| pct(Some(v))
                ),
            );
        }
    }
    let _ = writeln!(
        out,
        "\n{:<4} {:>8} {:<8} {:>7} {:>6} {:>10}  TENANT",
        "GPU", "PID", "KIND", "GI/CI", "SM", "MEMORY"
    );
    for p in &snap.processes {
        let index = inventory
            .iter()
            .find(|g| g.uuid == p.gpu_uuid)
            .map_or(0, |g| g.index);
        let tenant = p
            .tenant
            .as_ref()
            .and_then(|k| tenants.iter().find(|t| &t.key == k))
            .map_or_else(
                || "(unattributed)".to_owned(),
                |t| format!("{} [{}]", t.display_name(), t.key),
            );
        let gi = match (p.gi_id, p.ci_id) {
            (Some(g), Some(c)) => format!("{g}/{c}"),
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<4} {:>8} {:<8} {:>7} {:>6} {:>10}  {}",
            index,
            p.pid,
            p.kind.as_str(),
            gi,
            pct(p.sm_util),
            mib(p.mem_used_bytes),
            tenant
        );
    }
    holders(&mut out, inventory, snap, tenants);
    for e in &snap.events {
        let _ = writeln!(
            out,
            "event: {} {} on {}{}",
            e.kind,
            e.code,
            e.gpu_uuid,
            e.message
                .as_ref()
                .map_or(String::new(), |m| format!(": {m}"))
        );
    }
    out
}

/// Who holds each GPU (the kubelet's assignments, Slurm's jobs), and whether anything of the
/// holder runs there: a holding without a process is what an idle allocation looks like.
fn holders(out: &mut String, inventory: &[GpuInfo], snap: &Snapshot, tenants: &[Tenant]) {
    if snap.allocations.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<4} {:>7} {:>6} {:>9}  HELD BY",
        "GPU", "GI/CI", "SHARE", "PROCESSES"
    );
    for a in &snap.allocations {
        let index = inventory
            .iter()
            .find(|g| g.uuid == a.gpu_uuid)
            .map_or_else(|| "?".to_owned(), |g| g.index.to_string());
        let gi = match (a.gi_id, a.ci_id) {
            (Some(g), Some(c)) => format!("{g}/{c}"),
            _ => "-".to_owned(),
        };
        let running = snap
            .processes
            .iter()
            .filter(|p| p.gpu_uuid == a.gpu_uuid && p.tenant.as_ref() == Some(&a.tenant))
            .count();
        let holder = tenants.iter().find(|t| t.key == a.tenant).map_or_else(
            || a.tenant.clone(),
            |t| format!("{} [{}]", t.display_name(), t.key),
        );
        let _ = writeln!(
            out,
            "{:<4} {:>7} {:>6.2} {:>9}  {}",
            index,
            gi,
            a.share,
            if running == 0 {
                "none".to_owned()
            } else {
                running.to_string()
            },
            holder
        );
    }
}
