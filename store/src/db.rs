//! What the store's shared code asks of a backend's database: the dialect it speaks, how a
//! statement runs on a pool or inside a transaction, and which Rust types it binds and reads.
//! [`Tables`] holds a backend's pools; every table written the same way on PostgreSQL and
//! SQLite is an `impl<DB: Db> Tables<DB>` in its own module, written once.
//!
//! sqlx states what a database can bind or run as bounds on other types (`i64: Encode<DB>`,
//! `&mut DB::Connection: Executor`), which Rust does not carry along with `DB: Database`; so
//! [`Db`] names each as a bound on the database itself ([`Binds`], [`Reads`]) or as a method
//! its two implementations answer with sqlx's own calls.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures_util::stream::BoxStream;
use sqlx::query::Query;
use sqlx::{Database, Decode, Encode, Pool, Postgres, Row, Sqlite, Type};

use crate::dialect::Dialect;

/// A statement being bound, for the database `DB`.
pub(crate) type Stmt<'q, DB> = Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// A backend's pools: `write` for statements that change data, `read` for the rest (the same
/// pool on PostgreSQL; the writer and a pool of read-only connections on SQLite).
#[derive(Debug)]
pub(crate) struct Tables<DB: Database> {
    pub write: Pool<DB>,
    pub read: Pool<DB>,
    /// Day starts (ms) whose time partitions are known to exist (PostgreSQL; SQLite has none).
    pub known_days: Arc<Mutex<HashSet<i64>>>,
}

impl<DB: Database> Tables<DB> {
    pub(crate) fn new(write: Pool<DB>, read: Pool<DB>) -> Self {
        Tables {
            write,
            read,
            known_days: Arc::default(),
        }
    }
}

impl<DB: Database> Clone for Tables<DB> {
    fn clone(&self) -> Self {
        Tables {
            write: self.write.clone(),
            read: self.read.clone(),
            known_days: self.known_days.clone(),
        }
    }
}

/// A value of type `T` can be bound to a statement (living for `'q`) for this database.
pub(crate) trait Binds<'q, T>: Database {
    fn bind(q: Stmt<'q, Self>, value: T) -> Stmt<'q, Self>;
}

impl<'q, DB: Database, T> Binds<'q, T> for DB
where
    T: Encode<'q, DB> + Type<DB> + Send + 'q,
{
    fn bind(q: Stmt<'q, Self>, value: T) -> Stmt<'q, Self> {
        q.bind(value)
    }
}

/// A column of this database's rows can be read as a `T`, by name or by position.
pub(crate) trait Reads<T>: Database {
    fn get(row: &Self::Row, column: &str) -> sqlx::Result<T>;
    fn get_at(row: &Self::Row, column: usize) -> sqlx::Result<T>;
}

impl<DB: Database, T> Reads<T> for DB
where
    T: for<'r> Decode<'r, DB> + Type<DB>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    fn get(row: &Self::Row, column: &str) -> sqlx::Result<T> {
        row.try_get(column)
    }
    fn get_at(row: &Self::Row, column: usize) -> sqlx::Result<T> {
        row.try_get(column)
    }
}

/// Where a statement runs: on a pool, or on a connection (a transaction's).
pub(crate) enum On<'e, DB: Database> {
    Pool(&'e Pool<DB>),
    Conn(&'e mut DB::Connection),
}

impl<'e, DB: Database> From<&'e Pool<DB>> for On<'e, DB> {
    fn from(pool: &'e Pool<DB>) -> Self {
        On::Pool(pool)
    }
}

impl<'e, DB: Database> From<&'e mut sqlx::pool::PoolConnection<DB>> for On<'e, DB> {
    fn from(conn: &'e mut sqlx::pool::PoolConnection<DB>) -> Self {
        On::Conn(&mut **conn)
    }
}

impl<'e, 't, DB: Database> From<&'e mut sqlx::Transaction<'t, DB>> for On<'e, DB> {
    fn from(tx: &'e mut sqlx::Transaction<'t, DB>) -> Self {
        On::Conn(&mut **tx)
    }
}

/// A column of this database's rows can be read as text borrowed from the row.
pub(crate) trait ReadsText: Database {
    fn text_at(row: &Self::Row, column: usize) -> sqlx::Result<&str>;
}

impl<DB: Database> ReadsText for DB
where
    for<'r> &'r str: Decode<'r, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    fn text_at(row: &Self::Row, column: usize) -> sqlx::Result<&str> {
        row.try_get(column)
    }
}

/// A database the store's shared code runs on: PostgreSQL (with Citus) or SQLite.
pub(crate) trait Db:
    Database
    + for<'q> Binds<'q, i64>
    + for<'q> Binds<'q, Option<i64>>
    + for<'q> Binds<'q, i32>
    + for<'q> Binds<'q, f64>
    + for<'q> Binds<'q, Option<f64>>
    + for<'q> Binds<'q, Option<f32>>
    + for<'q> Binds<'q, Option<Vec<u8>>>
    + for<'q> Binds<'q, bool>
    + for<'q> Binds<'q, String>
    + for<'q> Binds<'q, Option<String>>
    + for<'q> Binds<'q, &'q str>
    + for<'q> Binds<'q, &'q String>
    + for<'q> Binds<'q, Option<i32>>
    + for<'q> Binds<'q, Option<&'q str>>
    + for<'q> Binds<'q, &'q [u8]>
    + for<'q> Binds<'q, Vec<u8>>
    + Reads<i64>
    + Reads<Option<i64>>
    + Reads<i32>
    + Reads<Option<i32>>
    + Reads<f64>
    + Reads<Option<f64>>
    + Reads<Option<f32>>
    + ReadsText
    + Reads<bool>
    + Reads<String>
    + Reads<Option<String>>
    + Reads<Vec<u8>>
    + Reads<Option<Vec<u8>>>
{
    const DIALECT: Dialect;

    /// A list of names (a node's GPUs) as one bind value: an array on PostgreSQL, a JSON
    /// array on SQLite (the dialect's SQL reads it back so).
    type List: for<'q> Encode<'q, Self> + Type<Self> + Send + Sync + 'static;
    fn list(items: &[String]) -> Self::List;

    /// Runs a statement; the rows it changed.
    fn execute<'q: 'e, 'e>(
        on: On<'e, Self>,
        q: Stmt<'q, Self>,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send + 'e;

    /// Runs a query; every row it answers.
    fn fetch_all<'q: 'e, 'e>(
        on: On<'e, Self>,
        q: Stmt<'q, Self>,
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'e;

    /// Runs a query; its first row, if any.
    fn fetch_optional<'q: 'e, 'e>(
        on: On<'e, Self>,
        q: Stmt<'q, Self>,
    ) -> impl Future<Output = sqlx::Result<Option<Self::Row>>> + Send + 'e;

    /// Runs a query; its rows as they arrive.
    fn fetch<'q: 'e, 'e>(
        on: On<'e, Self>,
        q: Stmt<'q, Self>,
    ) -> BoxStream<'e, sqlx::Result<Self::Row>>;
}

macro_rules! db_impl {
    ($db:ty, $dialect:expr, list: $list:ty = $to_list:expr) => {
        impl Db for $db {
            const DIALECT: Dialect = $dialect;
            type List = $list;
            fn list(items: &[String]) -> $list {
                $to_list(items)
            }
            fn execute<'q: 'e, 'e>(
                on: On<'e, Self>,
                q: Stmt<'q, Self>,
            ) -> impl Future<Output = sqlx::Result<u64>> + Send + 'e {
                async move {
                    let done = match on {
                        On::Pool(p) => q.execute(p).await?,
                        On::Conn(c) => q.execute(c).await?,
                    };
                    Ok(done.rows_affected())
                }
            }
            fn fetch_all<'q: 'e, 'e>(
                on: On<'e, Self>,
                q: Stmt<'q, Self>,
            ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'e {
                async move {
                    match on {
                        On::Pool(p) => q.fetch_all(p).await,
                        On::Conn(c) => q.fetch_all(c).await,
                    }
                }
            }
            fn fetch_optional<'q: 'e, 'e>(
                on: On<'e, Self>,
                q: Stmt<'q, Self>,
            ) -> impl Future<Output = sqlx::Result<Option<Self::Row>>> + Send + 'e {
                async move {
                    match on {
                        On::Pool(p) => q.fetch_optional(p).await,
                        On::Conn(c) => q.fetch_optional(c).await,
                    }
                }
            }
            fn fetch<'q: 'e, 'e>(
                on: On<'e, Self>,
                q: Stmt<'q, Self>,
            ) -> BoxStream<'e, sqlx::Result<Self::Row>> {
                match on {
                    On::Pool(p) => q.fetch(p),
                    On::Conn(c) => q.fetch(c),
                }
            }
        }
    };
}

db_impl!(
    Postgres,
    Dialect::Postgres,
    list: Vec<String> = <[String]>::to_vec
);
db_impl!(
    Sqlite,
    Dialect::Sqlite,
    list: String = |items: &[String]| serde_json::to_string(items).expect("strings serialize")
);

/// Binding and running a statement through [`Db`].
pub(crate) trait StmtExt<'q, DB: Db>: Sized {
    /// The statement itself.
    fn stmt(self) -> Stmt<'q, DB>;

    /// Binds the next parameter.
    fn arg<T>(self, value: T) -> Stmt<'q, DB>
    where
        DB: Binds<'q, T>,
    {
        DB::bind(self.stmt(), value)
    }
    /// Runs the statement; the rows it changed.
    fn run<'e>(
        self,
        on: impl Into<On<'e, DB>>,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send + 'e
    where
        'q: 'e,
    {
        DB::execute(on.into(), self.stmt())
    }
    /// Every row the query answers.
    fn all<'e>(
        self,
        on: impl Into<On<'e, DB>>,
    ) -> impl Future<Output = sqlx::Result<Vec<DB::Row>>> + Send + 'e
    where
        'q: 'e,
    {
        DB::fetch_all(on.into(), self.stmt())
    }
    /// The query's first row, if any.
    fn optional<'e>(
        self,
        on: impl Into<On<'e, DB>>,
    ) -> impl Future<Output = sqlx::Result<Option<DB::Row>>> + Send + 'e
    where
        'q: 'e,
    {
        DB::fetch_optional(on.into(), self.stmt())
    }
    /// The query's first row; `RowNotFound` without one.
    fn one<'e>(
        self,
        on: impl Into<On<'e, DB>>,
    ) -> impl Future<Output = sqlx::Result<DB::Row>> + Send + 'e
    where
        'q: 'e,
    {
        let row = DB::fetch_optional(on.into(), self.stmt());
        async move { row.await?.ok_or(sqlx::Error::RowNotFound) }
    }
    /// The rows as they arrive.
    fn stream<'e>(self, on: impl Into<On<'e, DB>>) -> BoxStream<'e, sqlx::Result<DB::Row>>
    where
        'q: 'e,
    {
        DB::fetch(on.into(), self.stmt())
    }
    /// The first column of the query's first row; `RowNotFound` without one.
    fn scalar<'e, T>(
        self,
        on: impl Into<On<'e, DB>>,
    ) -> impl Future<Output = sqlx::Result<T>> + Send + 'e
    where
        'q: 'e,
        DB: Reads<T>,
    {
        let row = self.one(on);
        async move { row.await?.at(0) }
    }
    /// The first column of the query's first row, if there is one.
    fn scalar_opt<'e, T>(
        self,
        on: impl Into<On<'e, DB>>,
    ) -> impl Future<Output = sqlx::Result<Option<T>>> + Send + 'e
    where
        'q: 'e,
        DB: Reads<T>,
    {
        let row = self.optional(on);
        async move { row.await?.map(|r| r.at(0)).transpose() }
    }
}

impl<'q, DB: Db> StmtExt<'q, DB> for Stmt<'q, DB> {
    fn stmt(self) -> Stmt<'q, DB> {
        self
    }
}

/// Reading a row's columns through [`Db`].
pub(crate) trait RowExt: Row {
    /// The column named `column` as a `T`.
    fn col<T>(&self, column: &str) -> sqlx::Result<T>
    where
        Self::Database: Reads<T>;
    /// The column at `column` as a `T`.
    fn at<T>(&self, column: usize) -> sqlx::Result<T>
    where
        Self::Database: Reads<T>;
    /// The column at `column` as text borrowed from the row.
    fn text_at(&self, column: usize) -> sqlx::Result<&str>
    where
        Self::Database: ReadsText;
}

impl<R: Row> RowExt for R
where
    R::Database: Database<Row = R>,
{
    fn col<T>(&self, column: &str) -> sqlx::Result<T>
    where
        R::Database: Reads<T>,
    {
        <R::Database as Reads<T>>::get(self, column)
    }
    fn at<T>(&self, column: usize) -> sqlx::Result<T>
    where
        R::Database: Reads<T>,
    {
        <R::Database as Reads<T>>::get_at(self, column)
    }
    fn text_at(&self, column: usize) -> sqlx::Result<&str>
    where
        R::Database: ReadsText,
    {
        <R::Database as ReadsText>::text_at(self, column)
    }
}

/// Starts a statement on `sql` for the database `DB`.
pub(crate) fn stmt<DB: Db>(sql: &str) -> Stmt<'_, DB> {
    sqlx::query(sql)
}
