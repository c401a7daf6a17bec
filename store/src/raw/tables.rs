//! The raw tables declared: each one's hot and sealed names, identity and value columns — the
//! one list the backends' writers, sealing, readers, partitions and retention go by.

use model::profiling;
use model::sealed::Kind;

/// The type of an identity column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyType {
    Text,
    Int,
    /// A 32-bit integer (PostgreSQL `integer`): a wider stored value does not decode.
    Int32,
    /// A timestamp, carried as epoch milliseconds.
    Time,
}

/// One raw table: its hot and sealed names, identity columns (`cluster, node, gpu_uuid`
/// first) and per-second value columns.
#[derive(Debug)]
pub(crate) struct RawTable {
    pub hot: &'static str,
    pub sealed: &'static str,
    pub key: &'static [(&'static str, KeyType)],
    pub values: &'static [(&'static str, Kind)],
}

use KeyType::{Int as KInt, Int32, Text, Time};
use model::sealed::Kind::{F32, F64, Int};

pub(crate) const GPU_KEY: [(&str, KeyType); 3] =
    [("cluster", Text), ("node", Text), ("gpu_uuid", Text)];

/// A GPU's own readings; the profiling ratios follow ([`GPU_VALUES`]).
const GPU_DEVICE_VALUES: [(&str, Kind); 21] = [
    ("interval_ms", Int),
    ("gpu_util", F32),
    ("mem_util", F32),
    ("mem_used_bytes", Int),
    ("mem_total_bytes", Int),
    ("power_w", F32),
    ("energy_j", F64),
    ("temp_c", F32),
    ("sm_clock_mhz", Int),
    ("mem_clock_mhz", Int),
    ("throttle_reasons", Int),
    ("pcie_rx_bytes_per_s", Int),
    ("pcie_tx_bytes_per_s", Int),
    ("nvlink_rx_bytes_per_s", Int),
    ("nvlink_tx_bytes_per_s", Int),
    ("ecc_corrected", Int),
    ("ecc_uncorrected", Int),
    ("retired_pages", Int),
    ("remapped_rows", Int),
    ("enc_util", F32),
    ("dec_util", F32),
];

/// A MIG instance's own readings; the profiling ratios follow ([`MIG_VALUES`]).
const MIG_DEVICE_VALUES: [(&str, Kind); 2] = [("mem_used_bytes", Int), ("mem_total_bytes", Int)];

/// `device`'s columns, then one `real` column per profiling ratio ([`model::profiling`], in
/// its order: a sealed block's columns are positional). `M` is their sum (checked when this
/// is evaluated, at compile time).
const fn with_ratios<const N: usize, const M: usize>(
    device: [(&'static str, Kind); N],
) -> [(&'static str, Kind); M] {
    assert!(M == N + profiling::COUNT);
    let mut out = [("", F32); M];
    let mut i = 0;
    while i < N {
        out[i] = device[i];
        i += 1;
    }
    while i < M {
        out[i] = (profiling::RATIOS[i - N].name, F32);
        i += 1;
    }
    out
}

const GPU_VALUES: [(&str, Kind); 21 + profiling::COUNT] = with_ratios(GPU_DEVICE_VALUES);
const MIG_VALUES: [(&str, Kind); 2 + profiling::COUNT] = with_ratios(MIG_DEVICE_VALUES);

pub(crate) const GPU: RawTable = RawTable {
    hot: "gpu_samples",
    sealed: "gpu_blocks",
    key: &GPU_KEY,
    values: &GPU_VALUES,
};

pub(crate) const MIG: RawTable = RawTable {
    hot: "mig_samples",
    sealed: "mig_blocks",
    key: &[
        ("cluster", Text),
        ("node", Text),
        ("gpu_uuid", Text),
        ("gi_id", Int32),
        ("ci_id", Int32),
    ],
    values: &MIG_VALUES,
};

pub(crate) const PROCESS: RawTable = RawTable {
    hot: "process_samples",
    sealed: "process_blocks",
    key: &[
        ("cluster", Text),
        ("node", Text),
        ("gpu_uuid", Text),
        ("pid", KInt),
        ("start_time", Time),
        ("kind", Text),
        ("gi_id", Int32),
        ("ci_id", Int32),
        ("tenant_key", Text),
    ],
    values: &[
        ("sm_util", F32),
        ("mem_util", F32),
        ("enc_util", F32),
        ("dec_util", F32),
        ("mem_used_bytes", Int),
    ],
};

pub(crate) const ALLOCATION: RawTable = RawTable {
    hot: "allocation_samples",
    sealed: "allocation_blocks",
    key: &[
        ("cluster", Text),
        ("node", Text),
        ("gpu_uuid", Text),
        ("tenant_key", Text),
        ("gi_id", Int32),
        ("ci_id", Int32),
        ("replica", Int32),
    ],
    values: &[("share", F32)],
};

/// The four raw tables that seal (GPU events are rare and stay rows).
pub(crate) const TABLES: [&RawTable; 4] = [&GPU, &MIG, &PROCESS, &ALLOCATION];

/// The GPU events table: written from batches like the others, never sealed.
pub(crate) const EVENTS: &str = "gpu_events";

/// The events table's columns, in the order its writers put them.
pub(crate) const EVENT_COLUMNS: &str = "cluster, node, gpu_uuid, ts, kind, code, message";

/// A raw table's hot columns in the order every writer puts them: identity, `ts`, values. The
/// COPY statements (PostgreSQL) and multi-row INSERTs (SQLite) are built from it, so a column
/// is declared once, here.
pub(crate) fn columns(t: &RawTable) -> String {
    t.key
        .iter()
        .map(|(c, _)| *c)
        .chain(["ts"])
        .chain(t.values.iter().map(|(c, _)| *c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every raw table, the one list the backends' partitions, retention, Citus distribution
/// and size reports iterate: each kind's rows, the events, then each kind's sealed blocks.
pub(crate) const NAMES: [&str; 9] = [
    GPU.hot,
    MIG.hot,
    PROCESS.hot,
    ALLOCATION.hot,
    EVENTS,
    GPU.sealed,
    MIG.sealed,
    PROCESS.sealed,
    ALLOCATION.sealed,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns a CREATE TABLE in `sql` gives `table`, in order.
    fn created_columns(sql: &str, table: &str) -> Vec<String> {
        let head = format!("CREATE TABLE {table} (");
        let Some(at) = sql.find(&head) else {
            return Vec::new();
        };
        let body = &sql[at + head.len()..];
        let body = &body[..body.find("\n)").expect("the table's closing line")];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("--") && !l.starts_with("PRIMARY"))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }

    /// Every writer's column list comes from `columns` (COPY on PostgreSQL, INSERT on SQLite):
    /// it must name exactly the columns both backends' migrations create, and the events' too.
    #[test]
    fn the_declared_columns_are_the_tables_columns_on_both_backends() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        for backend in ["postgres", "sqlite"] {
            let initial =
                std::fs::read_to_string(root.join(backend).join("0001_initial.sql")).unwrap();
            // The writers name their columns, so the order may differ from the table's.
            let sorted = |mut v: Vec<String>| {
                v.sort();
                v
            };
            for t in TABLES {
                let declared: Vec<String> = columns(t).split(", ").map(str::to_owned).collect();
                assert_eq!(
                    sorted(created_columns(&initial, t.hot)),
                    sorted(declared),
                    "{backend}: {}",
                    t.hot
                );
            }
            let events: Vec<String> = EVENT_COLUMNS.split(", ").map(str::to_owned).collect();
            let created = created_columns(&initial, EVENTS);
            assert!(
                created.iter().filter(|c| *c != "id").eq(events.iter()),
                "{backend}: {EVENTS} has {created:?}"
            );
        }
    }
}
