//! The raw per-second tables, written once for both backends: each is a hot table of rows
//! (what ingest writes) and a sealed table of blocks (what the seal pass makes of rows older
//! than the hot window: one row per series and [`BLOCK_MS`], its samples encoded by
//! [`model::sealed`]). A series is one value of the table's identity columns (a GPU; one
//! process; one allocation; one MIG instance).
//!
//! Every reader of raw samples goes through [`read_sql`]: one statement returning the hot rows
//! and the blocks of the range together, so it sees one snapshot whatever a concurrent seal
//! pass moves (PostgreSQL and SQLite both read a statement from one snapshot).

use std::collections::BTreeMap;

use model::profiling::{self, PerRatio};
use model::rollup::{RawAllocation, RawGpu, RawMig, RawProcess};
use model::sealed::{self, Columns, Kind};

use crate::db::{Db, On, RowExt, Stmt, StmtExt, stmt};
use crate::dialect::Dialect;
use crate::error::{Result, StoreError};
use crate::records::HealthRecord;

pub(crate) mod rows;
mod tables;

pub(crate) use tables::{
    ALLOCATION, EVENT_COLUMNS, EVENTS, GPU, KeyType, MIG, NAMES, PROCESS, RawTable, TABLES, columns,
};

/// How long a block spans; blocks start on its multiples. Ten minutes: a block's fixed cost
/// (its row's header and identity, two or three index entries: about 400 bytes) is then under
/// one byte per second, and the rows a rollup reads are still hot (docs/storage.md).
pub const BLOCK_MS: i64 = 600_000;

/// The most one seal transaction takes of one node: an hour of its samples.
pub const SEAL_STEP_MS: i64 = 3_600_000;

/// One identity column's value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    Text(Option<String>),
    Int(Option<i64>),
}

/// A series' identity columns, shared by all of its records.
pub(crate) type SeriesKey = std::sync::Arc<[Key]>;

/// One raw sample, as either form stores it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub key: SeriesKey,
    pub ts: i64,
    pub values: Vec<Option<u64>>,
}

impl RawTable {
    fn kinds(&self) -> Vec<Kind> {
        self.values.iter().map(|v| v.1).collect()
    }

    /// The position of value column `name` (a programming error when absent).
    pub fn value(&self, name: &str) -> usize {
        self.values
            .iter()
            .position(|v| v.0 == name)
            .unwrap_or_else(|| panic!("{} has no value column {name}", self.hot))
    }

    /// The position of identity column `name`.
    pub fn key_at(&self, name: &str) -> usize {
        self.key
            .iter()
            .position(|v| v.0 == name)
            .unwrap_or_else(|| panic!("{} has no identity column {name}", self.hot))
    }
}

impl Record {
    pub fn text(&self, at: usize) -> Option<&str> {
        match &self.key[at] {
            Key::Text(v) => v.as_deref(),
            Key::Int(_) => None,
        }
    }

    pub fn int_key(&self, at: usize) -> Option<i64> {
        match &self.key[at] {
            Key::Int(v) => *v,
            Key::Text(_) => None,
        }
    }

    pub fn f32(&self, at: usize) -> Option<f32> {
        self.values[at].map(|b| f32::from_bits(b as u32))
    }

    pub fn int(&self, at: usize) -> Option<i64> {
        self.values[at].map(|b| b as i64)
    }

    /// Value `at` of `t` as an f64, whatever its kind.
    pub fn number(&self, t: &RawTable, at: usize) -> Option<f64> {
        self.values[at].map(|b| t.values[at].1.as_f64(b))
    }
}

/// What a read selects besides the time range: equalities on identity columns (text ones),
/// and at most one identity column that must be NULL or must not be.
#[derive(Debug, Default, Clone)]
pub(crate) struct Filter<'a> {
    pub eq: Vec<(&'static str, &'a str)>,
    pub null: Option<(&'static str, bool)>,
}

impl<'a> Filter<'a> {
    pub fn node(cluster: &'a str, node: &'a str) -> Filter<'a> {
        Filter {
            eq: vec![("cluster", cluster), ("node", node)],
            null: None,
        }
    }

    /// The values to bind, in order, before the range's three (from, to, from's block start).
    pub fn binds(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.eq.iter().map(|e| e.1)
    }
}

/// Whether a row is a block, as a 64-bit integer in both dialects.
fn flag(d: Dialect, v: u8) -> String {
    match d {
        Dialect::Postgres => format!("{v}::bigint"),
        Dialect::Sqlite => v.to_string(),
    }
}

fn key_expr(d: Dialect, (name, ty): (&str, KeyType)) -> String {
    match (d, ty) {
        (Dialect::Postgres, KeyType::Time) => {
            format!("(extract(epoch from {name}) * 1000)::bigint")
        }
        (Dialect::Postgres, KeyType::Int | KeyType::Int32) => format!("{name}::bigint"),
        _ => name.to_owned(),
    }
}

fn value_expr(d: Dialect, (name, kind): (&str, Kind)) -> String {
    match (d, kind) {
        (Dialect::Postgres, Kind::Int) => format!("{name}::bigint"),
        (Dialect::Postgres, _) => format!("{name}::float8"),
        _ => name.to_owned(),
    }
}

fn null_value(d: Dialect, kind: Kind) -> &'static str {
    match (d, kind) {
        (Dialect::Postgres, Kind::Int) => "NULL::bigint",
        (Dialect::Postgres, _) => "NULL::float8",
        _ => "NULL",
    }
}

fn keys(t: &RawTable, d: Dialect) -> String {
    t.key
        .iter()
        .map(|k| key_expr(d, *k))
        .collect::<Vec<_>>()
        .join(", ")
}

fn values(t: &RawTable, d: Dialect) -> String {
    t.values
        .iter()
        .map(|v| value_expr(d, *v))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statement reading `t`'s samples in a range: hot rows and blocks together, each row
/// `sealed flag, identity…, ts, values…, data`. Binds: the filter's values, then from, to
/// (ms) and from's block start.
pub(crate) fn read_sql(t: &RawTable, d: Dialect, f: &Filter<'_>) -> String {
    let mut cond: Vec<String> =
        f.eq.iter()
            .enumerate()
            .map(|(i, (c, _))| format!("{c} = {}", d.param(i + 1)))
            .collect();
    if let Some((c, null)) = f.null {
        cond.push(format!("{c} IS {}NULL", if null { "" } else { "NOT " }));
    }
    let n = f.eq.len();
    let cond = if cond.is_empty() {
        String::new()
    } else {
        format!("{} AND ", cond.join(" AND "))
    };
    let (from, to, block_from) = (
        d.time_param(n + 1),
        d.time_param(n + 2),
        d.time_param(n + 3),
    );
    let nulls = t
        .values
        .iter()
        .map(|v| null_value(d, v.1))
        .collect::<Vec<_>>()
        .join(", ");
    let no_data = match d {
        Dialect::Postgres => "NULL::bytea",
        Dialect::Sqlite => "NULL",
    };
    format!(
        "SELECT {hot_flag} AS sealed, {keys}, {ts} AS ts, {vals}, {no_data} AS data FROM {hot} WHERE {cond}ts >= {from} AND ts < {to} \
         UNION ALL SELECT {sealed_flag}, {keys}, {start}, {nulls}, data FROM {sealed} WHERE {cond}block_start >= {block_from} AND block_start < {to}",
        hot_flag = flag(d, 0),
        sealed_flag = flag(d, 1),
        keys = keys(t, d),
        ts = key_expr(d, ("ts", KeyType::Time)),
        vals = values(t, d),
        hot = t.hot,
        start = key_expr(d, ("block_start", KeyType::Time)),
        sealed = t.sealed,
    )
}

/// The start of the block holding `ms`.
pub fn block_of(ms: i64) -> i64 {
    ms - ms.rem_euclid(BLOCK_MS)
}

/// Reads one row of [`read_sql`]: the hot row's record, or the block's records inside
/// [from, to). A block that does not decode is an error for the caller to count.
fn read_row<DB: Db>(
    t: &RawTable,
    r: &DB::Row,
    (from, to): (i64, i64),
    out: &mut Vec<Record>,
) -> std::result::Result<(), String> {
    let e = |e: sqlx::Error| e.to_string();
    let sealed: i64 = r.at(0).map_err(e)?;
    let mut key = Vec::with_capacity(t.key.len());
    for (i, (_, ty)) in t.key.iter().enumerate() {
        key.push(match ty {
            KeyType::Text => Key::Text(r.at::<Option<String>>(1 + i).map_err(e)?),
            ty => {
                let v = r.at::<Option<i64>>(1 + i).map_err(e)?;
                if *ty == KeyType::Int32 && v.is_some_and(|v| i32::try_from(v).is_err()) {
                    return Err(format!("{} {v:?} does not fit 32 bits", t.key[i].0));
                }
                Key::Int(v)
            }
        });
    }
    let at = 1 + t.key.len();
    let ts: i64 = r.at(at).map_err(e)?;
    if sealed == 0 {
        let mut values = Vec::with_capacity(t.values.len());
        for (i, (_, kind)) in t.values.iter().enumerate() {
            values.push(match kind {
                sealed::Kind::Int => r
                    .at::<Option<i64>>(at + 1 + i)
                    .map_err(e)?
                    .map(|v| v as u64),
                k => r
                    .at::<Option<f64>>(at + 1 + i)
                    .map_err(e)?
                    .map(|v| k.bits_of_f64(v)),
            });
        }
        out.push(Record {
            key: key.into(),
            ts,
            values,
        });
    } else {
        let data: Vec<u8> = r.at(at + 1 + t.values.len()).map_err(e)?;
        unseal(t, key.into(), &data, from, to, out).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The samples of `t` in [from, to) that `f` selects — hot rows and sealed blocks, read in one
/// statement ([`read_sql`]); a row or block that does not decode is skipped and counted in
/// `undecodable`.
pub(crate) async fn records<DB: Db>(
    on: On<'_, DB>,
    t: &RawTable,
    f: &Filter<'_>,
    (from, to): (i64, i64),
    undecodable: &mut usize,
) -> Result<Vec<Record>> {
    let sql = read_sql(t, DB::DIALECT, f);
    let mut query = stmt::<DB>(&sql);
    for v in f.binds() {
        query = query.arg(v);
    }
    let rows = query.arg(from).arg(to).arg(block_of(from)).all(on).await?;
    let mut out = Vec::new();
    for r in &rows {
        if let Err(e) = read_row::<DB>(t, r, (from, to), &mut out) {
            skipped(t, &e, undecodable);
        }
    }
    Ok(out)
}

/// Counts a sample or block a reader skipped, logging the first of a read.
pub(crate) fn skipped(t: &RawTable, error: &str, undecodable: &mut usize) {
    if *undecodable == 0 {
        tracing::error!(
            table = t.hot,
            error,
            "a stored raw sample or sealed block cannot be read: skipped (a rollup counts it in gpulens_rollup_undecodable_rows_total); the read goes on"
        );
    }
    *undecodable += 1;
}

/// A GPU's health counters from a backend's `latest_health` row: cluster, node, gpu_uuid, then the
/// newest hot row's ts and three counters (NULL without one), then the newest block's data
/// (NULL without one); the newer of the two wins.
pub(crate) fn health<DB: Db>(r: &DB::Row) -> sqlx::Result<HealthRecord> {
    let hot_ts: Option<i64> = r.at(3)?;
    let mut newest = hot_ts.map(|ts| (ts, [r.at::<Option<i64>>(4), r.at(5), r.at(6)]));
    let data: Option<Vec<u8>> = r.at(7)?;
    if let Some(block) = data.and_then(|d| newest_in_block(&d))
        && newest.as_ref().is_none_or(|(ts, _)| block.0 > *ts)
    {
        newest = Some((block.0, block.1.map(Ok)));
    }
    let [ecc, retired, remapped] = newest.map_or([Ok(None), Ok(None), Ok(None)], |n| n.1);
    Ok(HealthRecord {
        cluster: r.at(0)?,
        node: r.at(1)?,
        gpu_uuid: r.at(2)?,
        ecc_uncorrected: ecc?,
        retired_pages: retired?,
        remapped_rows: remapped?,
    })
}

/// The newest sample's health counters (uncorrected ECC errors, retired pages, remapped rows)
/// in a block of [`GPU`]; None when the block does not decode or is empty.
pub(crate) fn newest_in_block(data: &[u8]) -> Option<(i64, [Option<i64>; 3])> {
    let t = &GPU;
    let cols = sealed::decode(&t.kinds(), data).ok()?;
    let (row, &ts) = cols.ts.iter().enumerate().max_by_key(|(_, ts)| **ts)?;
    let at = ["ecc_uncorrected", "retired_pages", "remapped_rows"]
        .map(|c| cols.values[t.value(c)][row].map(|b| b as i64));
    Some((ts, at))
}

/// The records of one stored block that fall in [from, to).
pub(crate) fn unseal(
    t: &RawTable,
    key: SeriesKey,
    data: &[u8],
    from: i64,
    to: i64,
    out: &mut Vec<Record>,
) -> std::result::Result<(), sealed::BlockError> {
    let cols = sealed::decode(&t.kinds(), data)?;
    for (r, &ts) in cols.ts.iter().enumerate() {
        if ts >= from && ts < to {
            out.push(Record {
                key: key.clone(),
                ts,
                values: cols.values.iter().map(|c| c[r]).collect(),
            });
        }
    }
    Ok(())
}

/// One block to store: its series, start, sample count and encoded samples.
#[derive(Debug)]
pub(crate) struct Block {
    pub key: SeriesKey,
    pub start: i64,
    pub n: usize,
    pub data: Vec<u8>,
}

/// Groups sealed-off rows into blocks: one per series and [`BLOCK_MS`] (more when one holds
/// more than [`sealed::MAX_ROWS`] samples), samples in time order.
pub(crate) fn seal(t: &RawTable, records: Vec<Record>) -> Vec<Block> {
    let mut series: BTreeMap<(SeriesKey, i64), Vec<Record>> = BTreeMap::new();
    for r in records {
        series
            .entry((r.key.clone(), block_of(r.ts)))
            .or_default()
            .push(r);
    }
    let kinds = t.kinds();
    let mut out = Vec::new();
    for ((key, start), mut rows) in series {
        rows.sort_by_key(|r| r.ts);
        for chunk in rows.chunks(sealed::MAX_ROWS) {
            let cols = Columns {
                ts: chunk.iter().map(|r| r.ts).collect(),
                values: (0..kinds.len())
                    .map(|c| chunk.iter().map(|r| r.values[c]).collect())
                    .collect(),
            };
            out.push(Block {
                key: key.clone(),
                start,
                n: chunk.len(),
                data: sealed::encode(&kinds, &cols),
            });
        }
    }
    out
}

/// A node's hot rows before a cutoff. Binds: cluster, node, the node's GPUs (PostgreSQL: one
/// array; SQLite: a JSON array; the GPU index finds the rows), cutoff (ms).
fn node_rows_before(d: Dialect) -> String {
    let gpus = match d {
        Dialect::Postgres => "gpu_uuid = ANY($3)",
        Dialect::Sqlite => "gpu_uuid IN (SELECT value FROM json_each(?3))",
    };
    format!(
        "cluster = {} AND node = {} AND {gpus} AND ts < {}",
        d.param(1),
        d.param(2),
        d.time_param(4)
    )
}

/// The statement moving a node's rows older than a cutoff out of `t`'s hot table, returning
/// them as [`read_sql`]'s hot rows (without the data column). Binds: cluster, node, the
/// node's GPUs (PostgreSQL: one array; SQLite: a JSON array), cutoff (ms).
pub(crate) fn take_sql(t: &RawTable, d: Dialect) -> String {
    let delete = format!("DELETE FROM {} WHERE {}", t.hot, node_rows_before(d));
    let columns = format!(
        "{flag} AS sealed, {keys}, {ts} AS ts, {vals}",
        flag = flag(d, 0),
        keys = keys(t, d),
        ts = key_expr(d, ("ts", KeyType::Time)),
        vals = values(t, d),
    );
    match d {
        // Citus allows only immutable functions in RETURNING (the epoch of a timestamptz is
        // not): the conversion happens outside the DELETE.
        Dialect::Postgres => {
            format!("WITH taken AS ({delete} RETURNING *) SELECT {columns} FROM taken")
        }
        Dialect::Sqlite => format!("{delete} RETURNING {columns}"),
    }
}

/// The statement finding a node's oldest hot sample older than a cutoff in `t` (epoch ms, NULL
/// when none). Binds as [`take_sql`]'s.
pub(crate) fn oldest_sql(t: &RawTable, d: Dialect) -> String {
    format!(
        "SELECT {} FROM {} WHERE {}",
        key_expr(d, ("min(ts)", KeyType::Time)),
        t.hot,
        node_rows_before(d)
    )
}

/// The head of a multi-row INSERT of blocks into `t`'s sealed table, and one row's
/// placeholders numbered from `first`.
pub(crate) fn insert_sql(t: &RawTable, d: Dialect, rows: usize) -> String {
    let per = binds_per_block(t);
    let tuples: Vec<String> = (0..rows)
        .map(|r| {
            let base = r * per;
            let mut cols: Vec<String> = t
                .key
                .iter()
                .enumerate()
                .map(|(i, (_, ty))| match ty {
                    KeyType::Time => d.time_param(base + i + 1),
                    _ => d.param(base + i + 1),
                })
                .collect();
            let k = t.key.len();
            cols.push(d.time_param(base + k + 1));
            cols.push(d.param(base + k + 2));
            cols.push(d.param(base + k + 3));
            format!("({})", cols.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO {} ({}, block_start, n, data) VALUES {}",
        t.sealed,
        t.key.iter().map(|k| k.0).collect::<Vec<_>>().join(", "),
        tuples.join(", ")
    )
}

/// The records of the rows [`take_sql`] returned, or why one does not decode (the seal then
/// stops, and its delete is rolled back: a row is never lost).
pub(crate) fn taken<DB: Db>(t: &RawTable, rows: &[DB::Row]) -> Result<Vec<Record>> {
    let mut taken = Vec::with_capacity(rows.len());
    for r in rows {
        read_row::<DB>(t, r, (i64::MIN, i64::MAX), &mut taken)
            .map_err(|e| StoreError::Internal(format!("sealing {}: {e}", t.hot)))?;
    }
    Ok(taken)
}

/// Binds `blocks` to a statement of [`insert_sql`], in its order.
pub(crate) fn bind_blocks<'q, DB: Db>(mut q: Stmt<'q, DB>, blocks: &'q [Block]) -> Stmt<'q, DB> {
    for b in blocks {
        for k in b.key.iter() {
            q = match k {
                Key::Text(v) => q.arg(v.as_deref()),
                Key::Int(v) => q.arg(*v),
            };
        }
        q = q
            .arg(b.start)
            .arg(i32::try_from(b.n).expect("a block holds at most MAX_ROWS"))
            .arg(b.data.as_slice());
    }
    q
}

/// Binds per block row of [`insert_sql`].
pub(crate) fn binds_per_block(t: &RawTable) -> usize {
    t.key.len() + 3
}

/// The columns a rollup reads, out of records of [`GPU`].
pub(crate) fn gpus(records: &[Record]) -> Vec<RawGpu> {
    let t = &GPU;
    let uuid = t.key_at("gpu_uuid");
    let ratios: PerRatio<usize> =
        PerRatio(std::array::from_fn(|i| t.value(profiling::RATIOS[i].name)));
    let [interval, util, used, total, power, energy, temp, throttle] = [
        "interval_ms",
        "gpu_util",
        "mem_used_bytes",
        "mem_total_bytes",
        "power_w",
        "energy_j",
        "temp_c",
        "throttle_reasons",
    ]
    .map(|c| t.value(c));
    records
        .iter()
        .map(|r| RawGpu {
            gpu_uuid: r.text(uuid).unwrap_or_default().to_owned(),
            ts: r.ts,
            interval_ms: r.int(interval).unwrap_or_default() as i32,
            gpu_util: r.f32(util),
            ratios: PerRatio(ratios.0.map(|c| r.f32(c))),
            mem_used_bytes: r.int(used),
            mem_total_bytes: r.int(total),
            power_w: r.f32(power),
            energy_j: r.number(t, energy),
            temp_c: r.f32(temp),
            throttle_reasons: r.int(throttle),
        })
        .collect()
}

/// The columns a rollup reads, out of records of [`ALLOCATION`].
pub(crate) fn allocations(records: &[Record]) -> Vec<RawAllocation> {
    let t = &ALLOCATION;
    let [uuid, tenant, gi] = ["gpu_uuid", "tenant_key", "gi_id"].map(|c| t.key_at(c));
    let share = t.value("share");
    records
        .iter()
        .filter_map(|r| {
            Some(RawAllocation {
                gpu_uuid: r.text(uuid)?.to_owned(),
                ts: r.ts,
                tenant_key: r.text(tenant)?.to_owned(),
                gi_id: r.int_key(gi).map(|v| v as i32),
                share: r.f32(share)?,
            })
        })
        .collect()
}

/// The columns a rollup reads, out of records of [`PROCESS`].
pub(crate) fn processes(records: &[Record]) -> Vec<RawProcess> {
    let t = &PROCESS;
    let [uuid, tenant, gi] = ["gpu_uuid", "tenant_key", "gi_id"].map(|c| t.key_at(c));
    let [sm, used] = ["sm_util", "mem_used_bytes"].map(|c| t.value(c));
    records
        .iter()
        .map(|r| RawProcess {
            gpu_uuid: r.text(uuid).unwrap_or_default().to_owned(),
            ts: r.ts,
            tenant_key: r.text(tenant).map(str::to_owned),
            gi_id: r.int_key(gi).map(|v| v as i32),
            sm_util: r.f32(sm),
            mem_used_bytes: r.int(used),
        })
        .collect()
}

/// The columns a rollup reads, out of records of [`MIG`].
pub(crate) fn mig(records: &[Record]) -> Vec<RawMig> {
    let t = &MIG;
    let [uuid, gi] = ["gpu_uuid", "gi_id"].map(|c| t.key_at(c));
    let sm = t.value("sm_active");
    records
        .iter()
        .filter_map(|r| {
            Some(RawMig {
                gpu_uuid: r.text(uuid)?.to_owned(),
                ts: r.ts,
                gi_id: r.int_key(gi)? as i32,
                sm_active: r.f32(sm),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::sealed::Kind::F32;
    use tables::GPU_KEY;

    fn rec(gpu: &str, ts: i64, v: f32) -> Record {
        Record {
            key: vec![
                Key::Text(Some("c".into())),
                Key::Text(Some("n".into())),
                Key::Text(Some(gpu.into())),
            ]
            .into(),
            ts,
            values: vec![Some(u64::from(v.to_bits()))],
        }
    }

    const ONE: RawTable = RawTable {
        hot: "h",
        sealed: "s",
        key: &GPU_KEY,
        values: &[("v", F32)],
    };

    #[test]
    fn rows_seal_into_one_block_per_series_and_span_and_come_back() {
        let rows = vec![
            rec("a", BLOCK_MS + 1_000, 0.5),
            rec("a", BLOCK_MS, 0.25),
            rec("b", BLOCK_MS, 1.0),
            rec("a", 2 * BLOCK_MS, 0.75),
        ];
        let blocks = seal(&ONE, rows.clone());
        assert_eq!(
            blocks.iter().map(|b| (b.start, b.n)).collect::<Vec<_>>(),
            vec![(BLOCK_MS, 2), (2 * BLOCK_MS, 1), (BLOCK_MS, 1)]
        );
        let mut back = Vec::new();
        for b in &blocks {
            unseal(&ONE, b.key.clone(), &b.data, 0, i64::MAX, &mut back).unwrap();
        }
        back.sort_by_key(|x| (x.key.clone(), x.ts));
        let mut want = rows;
        want.sort_by_key(|x| (x.key.clone(), x.ts));
        assert_eq!(back, want);
        // A range reads only its own samples out of a block.
        let mut part = Vec::new();
        unseal(
            &ONE,
            blocks[0].key.clone(),
            &blocks[0].data,
            BLOCK_MS + 500,
            BLOCK_MS + 10_000,
            &mut part,
        )
        .unwrap();
        assert_eq!(
            part.iter().map(|r| r.ts).collect::<Vec<_>>(),
            vec![BLOCK_MS + 1_000]
        );
    }

    #[test]
    fn every_table_reads_with_one_statement_per_dialect() {
        for t in TABLES {
            let pg = read_sql(t, Dialect::Postgres, &Filter::node("c", "n"));
            assert!(
                pg.contains(&format!(
                    "FROM {} WHERE cluster = $1 AND node = $2",
                    t.sealed
                )),
                "{pg}"
            );
            assert!(
                pg.contains("block_start >= to_timestamp($5::bigint"),
                "{pg}"
            );
            let lite = read_sql(
                t,
                Dialect::Sqlite,
                &Filter {
                    eq: vec![],
                    null: Some(("gi_id", false)),
                },
            );
            assert!(lite.contains("gi_id IS NOT NULL AND ts >= ?1"), "{lite}");
            let ins = insert_sql(t, Dialect::Sqlite, 2);
            assert_eq!(ins.matches('?').count(), 2 * binds_per_block(t), "{ins}");
        }
    }
}
