//! What a backend does its own way under the tables written once: the time partitions a range
//! of rows needs, how a span's rollup rows are written, and how many sealed blocks one
//! statement carries. PostgreSQL and SQLite implement [`Backend`] in their modules; the
//! generic code that needs it (`node_upkeep.rs`, `span.rs`) asks for `DB: Backend`.

use std::future::Future;

use model::rollup::NodeRollup;

use crate::db::{Db, Tables};
use crate::error::Result;
use crate::raw::RawTable;
use crate::series::Rollups;

/// A node's rows in [from, to).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeRange<'a> {
    pub cluster: &'a str,
    pub node: &'a str,
    pub from: i64,
    pub to: i64,
}

/// What a backend does its own way.
pub(crate) trait Backend: Db {
    /// Makes sure the time partitions of `days` (their starts, ms) exist: PostgreSQL creates
    /// the missing ones; SQLite has none.
    fn ensure_days<'a>(
        tables: &'a Tables<Self>,
        days: &'a [i64],
    ) -> impl Future<Output = Result<()>> + Send + 'a;

    /// Replaces the rollup rows of width `res` in `range` with `r`, inside `tx`: PostgreSQL
    /// COPYs them, SQLite binds multi-row INSERTs.
    fn replace_rollups<'a>(
        tx: &'a mut sqlx::Transaction<'_, Self>,
        res: Rollups,
        range: NodeRange<'a>,
        r: &'a NodeRollup,
    ) -> impl Future<Output = Result<()>> + Send + 'a;

    /// How many sealed blocks of `table` one INSERT carries.
    fn blocks_per_insert(table: &RawTable) -> usize;
}
