//! The backend contract: every method PostgreSQL (with Citus) and SQLite do the same way,
//! written once and expanded into each backend's `impl` by [`shared_methods!`]. What a backend
//! writes itself is what really differs: connecting and migrating, ingest (COPY and group
//! commit; multi-row INSERTs), partitions (`ensure_span`), retention, job locks, and the
//! column decoding of `read_rollups`, `replace_rollups` and `records`. `store/tests/conformance/`
//! runs every behaviour on each.

/// Every shared method for a backend: `write`/`read` name its pools (the same pool on
/// PostgreSQL), `dialect` its SQL, `numbered` how it returns a new row's id, `gpus` and
/// `per_insert` as [`crate::node_upkeep::node_upkeep_methods!`] takes them.
macro_rules! shared_methods {
    (
        write: $write:ident,
        read: $read:ident,
        dialect: $d:expr,
        numbered: $numbered:path,
        gpus: $gpus:expr,
        per_insert: $per_insert:expr $(,)?
    ) => {
        crate::inventory::inventory_methods!($read, $d);
        crate::analysis_runs::analysis_run_methods!($write, $read, $d);
        crate::secrets::secret_methods!($write, $d);
        crate::cluster_rollup::cluster_rollup_methods!($write, $d);
        crate::rollup_reads::rollup_read_methods!($read, $d);
        crate::node_upkeep::node_upkeep_methods!(
            $write,
            $read,
            $d,
            gpus: $gpus,
            per_insert: $per_insert
        );
        crate::audit::audit_methods!($write, $read, $numbered);
        crate::label_actions::label_action_methods!($write, $read, $numbered);
        crate::reclaim_cases::reclaim_case_methods!($write, $read, $numbered);
        crate::alerts::alert_methods!($write, $read, $numbered);
        crate::remote_write::journal_methods!($write, $read, $numbered);
        crate::reports::report_methods!($write, $read, $numbered);
        crate::waiting::waiting_methods!($write, $read, $numbered);
        crate::mechanisms::mechanism_methods!($write, $read, $numbered);
        crate::pair_hours::pair_hour_methods!($write, $read, $numbered, $d);
    };
}

pub(crate) use shared_methods;
