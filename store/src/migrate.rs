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

pub const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_initial.sql",
        sql: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "0002_cluster_rollups.sql",
        sql: include_str!("../../migrations/postgres/0002_cluster_rollups.sql"),
    },
    Migration {
        version: 3,
        name: "0003_tenant_effective_use.sql",
        sql: include_str!("../../migrations/postgres/0003_tenant_effective_use.sql"),
    },
    Migration {
        version: 4,
        name: "0004_label_actions.sql",
        sql: include_str!("../../migrations/postgres/0004_label_actions.sql"),
    },
    Migration {
        version: 5,
        name: "0005_alerts.sql",
        sql: include_str!("../../migrations/postgres/0005_alerts.sql"),
    },
    Migration {
        version: 6,
        name: "0006_reports.sql",
        sql: include_str!("../../migrations/postgres/0006_reports.sql"),
    },
    Migration {
        version: 7,
        name: "0007_dcgm_field_counts.sql",
        sql: include_str!("../../migrations/postgres/0007_dcgm_field_counts.sql"),
    },
    Migration {
        version: 8,
        name: "0008_remote_write_journal.sql",
        sql: include_str!("../../migrations/postgres/0008_remote_write_journal.sql"),
    },
    Migration {
        version: 9,
        name: "0009_label_previous_value.sql",
        sql: include_str!("../../migrations/postgres/0009_label_previous_value.sql"),
    },
    Migration {
        version: 10,
        name: "0010_node_range_indexes.sql",
        sql: include_str!("../../migrations/postgres/0010_node_range_indexes.sql"),
    },
    Migration {
        version: 11,
        name: "0011_sealed_blocks.sql",
        sql: include_str!("../../migrations/postgres/0011_sealed_blocks.sql"),
    },
    Migration {
        version: 12,
        name: "0012_secrets.sql",
        sql: include_str!("../../migrations/postgres/0012_secrets.sql"),
    },
    Migration {
        version: 13,
        name: "0013_waiting_work.sql",
        sql: include_str!("../../migrations/postgres/0013_waiting_work.sql"),
    },
];

pub const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_initial.sql",
        sql: include_str!("../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "0002_cluster_rollups.sql",
        sql: include_str!("../../migrations/sqlite/0002_cluster_rollups.sql"),
    },
    Migration {
        version: 3,
        name: "0003_tenant_effective_use.sql",
        sql: include_str!("../../migrations/sqlite/0003_tenant_effective_use.sql"),
    },
    Migration {
        version: 4,
        name: "0004_label_actions.sql",
        sql: include_str!("../../migrations/sqlite/0004_label_actions.sql"),
    },
    Migration {
        version: 5,
        name: "0005_alerts.sql",
        sql: include_str!("../../migrations/sqlite/0005_alerts.sql"),
    },
    Migration {
        version: 6,
        name: "0006_reports.sql",
        sql: include_str!("../../migrations/sqlite/0006_reports.sql"),
    },
    Migration {
        version: 7,
        name: "0007_dcgm_field_counts.sql",
        sql: include_str!("../../migrations/sqlite/0007_dcgm_field_counts.sql"),
    },
    Migration {
        version: 8,
        name: "0008_remote_write_journal.sql",
        sql: include_str!("../../migrations/sqlite/0008_remote_write_journal.sql"),
    },
    Migration {
        version: 9,
        name: "0009_label_previous_value.sql",
        sql: include_str!("../../migrations/sqlite/0009_label_previous_value.sql"),
    },
    Migration {
        version: 10,
        name: "0010_node_range_indexes.sql",
        sql: include_str!("../../migrations/sqlite/0010_node_range_indexes.sql"),
    },
    Migration {
        version: 11,
        name: "0011_sealed_blocks.sql",
        sql: include_str!("../../migrations/sqlite/0011_sealed_blocks.sql"),
    },
    Migration {
        version: 12,
        name: "0012_secrets.sql",
        sql: include_str!("../../migrations/sqlite/0012_secrets.sql"),
    },
    Migration {
        version: 13,
        name: "0013_waiting_work.sql",
        sql: include_str!("../../migrations/sqlite/0013_waiting_work.sql"),
    },
];

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
}
