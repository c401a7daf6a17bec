//! A small migration runner: the SQL files of `migrations/<backend>/` are compiled into the
//! binary, applied in order inside a transaction each, and recorded with a SHA-256 checksum.
//! An applied migration whose text changed is refused: migrations are an API.

use sha2::{Digest, Sha256};

use crate::error::StoreError;

/// One migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// The migrations of both backends, each file named once: `migrations/postgres/<file>` and
/// `migrations/sqlite/<file>` exist for every number (a test compares them), so adding one is a
/// line here and the two files.
macro_rules! migrations {
    ($($version:literal => $file:literal,)*) => {
        pub const POSTGRES: &[Migration] = &[$(Migration {
            version: $version,
            name: $file,
            sql: include_str!(concat!("../../migrations/postgres/", $file)),
        },)*];
        pub const SQLITE: &[Migration] = &[$(Migration {
            version: $version,
            name: $file,
            sql: include_str!(concat!("../../migrations/sqlite/", $file)),
        },)*];
    };
}

migrations! {
    1 => "0001_initial.sql",
    2 => "0002_cluster_rollups.sql",
    3 => "0003_tenant_effective_use.sql",
    4 => "0004_label_actions.sql",
    5 => "0005_alerts.sql",
    6 => "0006_reports.sql",
    7 => "0007_dcgm_field_counts.sql",
    8 => "0008_remote_write_journal.sql",
    9 => "0009_label_previous_value.sql",
    10 => "0010_node_range_indexes.sql",
    11 => "0011_sealed_blocks.sql",
    12 => "0012_secrets.sql",
    13 => "0013_waiting_work.sql",
    14 => "0014_reclaim_cases.sql",
    15 => "0015_pair_hours.sql",
    16 => "0016_node_mechanisms.sql",
    17 => "0017_use_rollups.sql",
    18 => "0018_energy.sql",
    19 => "0019_gr_engine_rollups.sql",
}

pub fn checksum(sql: &str) -> String {
    Sha256::digest(sql.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Decides what to apply given what the database has recorded.
pub fn to_apply(
    all: &'static [Migration],
    applied: &[(i64, String)],
) -> Result<Vec<&'static Migration>, StoreError> {
    for (version, sum) in applied {
        match all.iter().find(|m| m.version == *version) {
            Some(m) if checksum(m.sql) != *sum => {
                return Err(StoreError::Internal(format!(
                    "migration {} was changed after it was applied (checksum mismatch); restore it and add a new migration instead",
                    m.name
                )));
            }
            Some(_) => {}
            None => {
                return Err(StoreError::Internal(format!(
                    "the database has migration version {version}, which this gpulens does not know; it was migrated by a newer version"
                )));
            }
        }
    }
    Ok(all
        .iter()
        .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edited_and_unknown_migrations_are_refused() {
        assert_eq!(to_apply(POSTGRES, &[]).unwrap().len(), POSTGRES.len());
        let pending = to_apply(POSTGRES, &[(1, checksum(POSTGRES[0].sql))]).unwrap();
        assert_eq!(
            pending.iter().map(|m| m.version).collect::<Vec<_>>(),
            (2..=POSTGRES.len() as i64).collect::<Vec<_>>()
        );
        let all: Vec<_> = POSTGRES
            .iter()
            .map(|m| (m.version, checksum(m.sql)))
            .collect();
        assert!(to_apply(POSTGRES, &all).unwrap().is_empty());
        let err = to_apply(POSTGRES, &[(1, "0".into())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed after it was applied"), "{err}");
        let err = to_apply(SQLITE, &[(99, "x".into())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("newer version"), "{err}");
    }

    #[test]
    fn both_backends_have_the_same_tables() {
        let tables = |sql: &str| {
            let mut t: Vec<String> = sql
                .lines()
                .filter_map(|l| l.strip_prefix("CREATE TABLE "))
                .map(|l| l.split_whitespace().next().unwrap().to_owned())
                .collect();
            t.sort();
            t
        };
        for (pg, lite) in POSTGRES.iter().zip(SQLITE) {
            assert_eq!((pg.version, pg.name), (lite.version, lite.name));
            assert_eq!(tables(pg.sql), tables(lite.sql));
        }
        assert_eq!(POSTGRES.len(), SQLITE.len());
    }

    /// A file in either folder that the list does not name would never be applied.
    #[test]
    fn every_migration_file_is_listed_once_in_order() {
        for (dir, list) in [("postgres", POSTGRES), ("sqlite", SQLITE)] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../migrations")
                .join(dir);
            let mut files: Vec<String> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".sql"))
                .collect();
            files.sort();
            let listed: Vec<&str> = list.iter().map(|m| m.name).collect();
            assert_eq!(files, listed, "migrations/{dir}");
            for (i, m) in list.iter().enumerate() {
                assert_eq!(m.version, i as i64 + 1);
                assert!(
                    m.name.starts_with(&format!("{:04}_", m.version)),
                    "{}",
                    m.name
                );
            }
        }
    }
}
