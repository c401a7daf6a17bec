//! The SQL dialects the store speaks; each module that writes SQL for both backends matches on
//! it for the few places they differ.

/// The SQL dialects the store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}
