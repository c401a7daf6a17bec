//! Writing a batch's samples on SQLite: multi-row INSERTs, one per raw table, sized to the
//! bind-parameter limit.

use model::wire::v1::Batch;
use sqlx::{QueryBuilder, Sqlite};

use crate::error::Result;
use crate::raw;
use crate::raw::rows::Cells;

/// SQLite's default limit on bind parameters per statement is 32766.
pub(super) const MAX_BINDS: usize = 32_000;

/// Inserts `items` with multi-row INSERTs (`head` is `INSERT INTO t (columns) `), as many
/// rows per statement as SQLite's bind limit allows for that many columns. Returns the rows
/// inserted.
pub(super) async fn insert_rows<'a, T>(
    tx: &mut sqlx::SqliteConnection,
    head: impl Into<String>,
    tail: &str,
    items: &'a [T],
    mut bind: impl FnMut(sqlx::query_builder::Separated<'_, 'a, Sqlite, &'static str>, &'a T),
) -> Result<u64> {
    let head = head.into();
    let columns = head
        .split_once('(')
        .map_or(1, |(_, cols)| cols.matches(',').count() + 1);
    let mut rows = 0;
    for chunk in items.chunks((MAX_BINDS / columns).max(1)) {
        let mut q = QueryBuilder::<Sqlite>::new(head.as_str());
        q.push_values(chunk, &mut bind);
        q.push(tail);
        rows += q.build().execute(&mut *tx).await?.rows_affected();
    }
    Ok(rows)
}

/// A batch's samples and events, one multi-row INSERT per raw table, each row's values bound
/// in the order of its table's columns (`raw::rows`).
pub(super) async fn insert_samples(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    b: &Batch,
) -> Result<u64> {
    let mut inserted = 0u64;
    for table in 0..raw::rows::COUNT {
        let head = match raw::TABLES.get(table) {
            Some(t) => format!("INSERT INTO {} ({}) ", t.hot, raw::columns(t)),
            None => format!("INSERT INTO {} ({}) ", raw::EVENTS, raw::EVENT_COLUMNS),
        };
        let rows = raw::rows::of(b, table);
        inserted += insert_rows(&mut *tx, head, "", &rows, |values, row| {
            raw::rows::write(&mut Binds(values), b, row)
        })
        .await?;
    }
    Ok(inserted)
}

/// A row's values as bind parameters of a multi-row INSERT (SQLite keeps times as ms).
pub(super) struct Binds<'s, 'q>(pub sqlx::query_builder::Separated<'s, 'q, Sqlite, &'static str>);

impl Cells for Binds<'_, '_> {
    fn null(&mut self) -> &mut Self {
        self.0.push_bind(None::<i64>);
        self
    }

    fn text(&mut self, v: &str) -> &mut Self {
        self.0.push_bind(v.to_owned());
        self
    }

    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.push_bind(v);
        self
    }

    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.push_bind(v);
        self
    }

    fn f32(&mut self, v: f32) -> &mut Self {
        self.0.push_bind(v);
        self
    }

    fn f64(&mut self, v: f64) -> &mut Self {
        self.0.push_bind(v);
        self
    }

    fn ts_ms(&mut self, ms: i64) -> &mut Self {
        self.i64(ms)
    }

    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.push_bind(v.to_vec());
        self
    }
}
