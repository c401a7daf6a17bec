//! The SQL dialects the store speaks; each module that writes SQL for both backends matches on
//! it for the few places they differ.

/// The SQL dialects the store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    /// A time column as epoch milliseconds: PostgreSQL keeps `timestamptz`, SQLite the
    /// milliseconds themselves.
    pub fn epoch_ms(self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("(extract(epoch from {col}) * 1000)::bigint"),
            Dialect::Sqlite => col.to_owned(),
        }
    }
}
