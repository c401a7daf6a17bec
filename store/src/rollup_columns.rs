//! The aggregate columns of the rollup tables, each declared once — its column and the
//! aggregate field it holds, whose type says how it is stored — in [`GPU_AGG`] (GPU and cluster
//! rollups) and [`TENANT_AGG`]; and the columns the analysis and interference read by position
//! ([`GPU_HOUR`], [`DEVICE_MINUTE`], [`TENANT_MINUTE`]). The column lists, the COPY and
//! multi-row INSERT writers (`crate::rollup_rows`), the bound cluster-rollup INSERT and the
//! readers of both backends are made from these tables, so a new rollup column is one line here
//! (and its migrations).

use std::sync::LazyLock;

use model::hour_series::GpuHour;
use model::pair_hours::{DeviceMinute, TenantMinute};
use model::profiling::{self, RatioSpec};
use model::rollup::{GpuAgg, Hist, TenantAgg};

use crate::db::{Db, Reads, RowExt, Stmt, StmtExt};
use crate::raw::rows::Cells;

/// Where a column's value lives in its aggregate, typed as the column stores it. A histogram
/// is stored as its bytes, `NULL` when empty.
pub(crate) enum Slot<'a> {
    I32(&'a mut i32),
    I64(&'a mut i64),
    F64(&'a mut f64),
    OptF32(&'a mut Option<f32>),
    OptI64(&'a mut Option<i64>),
    Hist(&'a mut Hist),
}

/// One column of an aggregate `A`: its name and where its value lives.
pub(crate) struct Column<A> {
    pub name: &'static str,
    slot: SlotOf<A>,
}

/// Where a column's value lives: a field, or the `usize`th of a family (a profiling ratio).
enum SlotOf<A> {
    Field(for<'a> fn(&'a mut A) -> Slot<'a>),
    Indexed(for<'a> fn(&'a mut A, usize) -> Slot<'a>, usize),
}

impl<A> Clone for SlotOf<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for SlotOf<A> {}

impl<A> Clone for Column<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Column<A> {}

impl<A> Column<A> {
    const fn new(name: &'static str, slot: for<'a> fn(&'a mut A) -> Slot<'a>) -> Self {
        Column {
            name,
            slot: SlotOf::Field(slot),
        }
    }

    /// Where this column's value lives in `a`.
    fn slot<'a>(&self, a: &'a mut A) -> Slot<'a> {
        match self.slot {
            SlotOf::Field(f) => f(a),
            SlotOf::Indexed(f, i) => f(a, i),
        }
    }
}

/// Every aggregate column of a GPU rollup row ([`GpuAgg`]), in insert order: its own, then
/// each profiling ratio's ([`ratio_columns`]).
pub(crate) static GPU_AGG: LazyLock<Vec<Column<GpuAgg>>> = LazyLock::new(|| {
    GPU_DEVICE_AGG
        .iter()
        .copied()
        .chain(profiling::RATIOS.iter().flat_map(ratio_columns))
        .collect()
});

/// A GPU rollup row's columns other than the profiling ratios'.
const GPU_DEVICE_AGG: &[Column<GpuAgg>] = &[
    Column::new("samples", |a| Slot::I32(&mut a.samples)),
    Column::new("covered_s", |a| Slot::F64(&mut a.covered_s)),
    Column::new("gpu_util_n", |a| Slot::I32(&mut a.gpu_util.n)),
    Column::new("gpu_util_sum", |a| Slot::F64(&mut a.gpu_util.sum)),
    Column::new("gpu_util_max", |a| Slot::OptF32(&mut a.gpu_util.max)),
    Column::new("gpu_util_hist", |a| Slot::Hist(&mut a.gpu_util_hist)),
    Column::new("busy_n", |a| Slot::I32(&mut a.busy_n)),
    Column::new("mem_used_n", |a| Slot::I32(&mut a.mem_used.n)),
    Column::new("mem_used_sum", |a| Slot::F64(&mut a.mem_used.sum)),
    Column::new("mem_used_max", |a| Slot::OptI64(&mut a.mem_used.max)),
    Column::new("mem_total_max", |a| Slot::OptI64(&mut a.mem_total_max)),
    Column::new("power_n", |a| Slot::I32(&mut a.power.n)),
    Column::new("power_sum", |a| Slot::F64(&mut a.power.sum)),
    Column::new("power_max", |a| Slot::OptF32(&mut a.power.max)),
    Column::new("temp_n", |a| Slot::I32(&mut a.temp.n)),
    Column::new("temp_sum", |a| Slot::F64(&mut a.temp.sum)),
    Column::new("temp_max", |a| Slot::OptF32(&mut a.temp.max)),
    Column::new("throttled_n", |a| Slot::I32(&mut a.throttled_n)),
    Column::new("alloc_share_sum", |a| Slot::F64(&mut a.alloc_share_sum)),
    Column::new("energy_n", |a| Slot::I32(&mut a.energy_n)),
    Column::new("energy_j", |a| Slot::F64(&mut a.energy_j)),
];

/// One profiling ratio's rollup columns ([`model::profiling::RollupColumns`]).
fn ratio_columns(spec: &RatioSpec) -> Vec<Column<GpuAgg>> {
    let cols = spec.ratio.rollup_columns();
    let at = |name, slot: for<'a> fn(&'a mut GpuAgg, usize) -> Slot<'a>| Column {
        name,
        slot: SlotOf::Indexed(slot, spec.ratio.index()),
    };
    let mut out = vec![
        at(cols.n, |a, i| Slot::I32(&mut a.ratios.0[i].n)),
        at(cols.sum, |a, i| Slot::F64(&mut a.ratios.0[i].sum)),
    ];
    if let (Some(max), Some(hist)) = (cols.max, cols.hist) {
        out.push(at(max, |a, i| Slot::OptF32(&mut a.ratios.0[i].max)));
        out.push(at(hist, |a, i| Slot::Hist(&mut a.ratios.0[i].hist)));
    }
    out
}

/// Every aggregate column of a tenant rollup row ([`TenantAgg`]), in insert order.
pub(crate) const TENANT_AGG: &[Column<TenantAgg>] = &[
    Column::new("samples", |a| Slot::I32(&mut a.samples)),
    Column::new("covered_s", |a| Slot::F64(&mut a.covered_s)),
    Column::new("alloc_share_sum", |a| Slot::F64(&mut a.alloc_share_sum)),
    Column::new("alloc_n", |a| Slot::I32(&mut a.alloc_n)),
    Column::new("present_n", |a| Slot::I32(&mut a.present_n)),
    Column::new("sm_util_n", |a| Slot::I32(&mut a.sm_util.n)),
    Column::new("sm_util_sum", |a| Slot::F64(&mut a.sm_util.sum)),
    Column::new("sm_util_max", |a| Slot::OptF32(&mut a.sm_util.max)),
    Column::new("busy_n", |a| Slot::I32(&mut a.busy_n)),
    Column::new("mem_used_n", |a| Slot::I32(&mut a.mem_used.n)),
    Column::new("mem_used_sum", |a| Slot::F64(&mut a.mem_used.sum)),
    Column::new("mem_used_max", |a| Slot::OptI64(&mut a.mem_used.max)),
    Column::new("processes_max", |a| Slot::I32(&mut a.processes_max)),
    Column::new("eff_n", |a| Slot::I32(&mut a.eff_n)),
    Column::new("eff_sum", |a| Slot::F64(&mut a.eff_sum)),
    Column::new("eff_dcgm_n", |a| Slot::I32(&mut a.eff_dcgm_n)),
    Column::new("eff_hist", |a| Slot::Hist(&mut a.eff_hist)),
    Column::new("active_n", |a| Slot::I32(&mut a.active_n)),
    Column::new("idle_n", |a| Slot::I32(&mut a.idle_n)),
    Column::new("idle_lead_s", |a| Slot::F64(&mut a.idle_lead_s)),
    Column::new("idle_trail_s", |a| Slot::F64(&mut a.idle_trail_s)),
    Column::new("idle_max_s", |a| Slot::F64(&mut a.idle_max_s)),
    Column::new("energy_j", |a| Slot::F64(&mut a.energy_j)),
    Column::new("idle_energy_j", |a| Slot::F64(&mut a.idle_energy_j)),
];

/// The columns of a GPU hour rollup the analysis reads ([`GpuHour`]), read by position (1.7
/// million rows a week at 10,000 GPUs).
pub(crate) const GPU_HOUR: &[Column<GpuHour>] = &[
    Column::new("samples", |a| Slot::I32(&mut a.samples)),
    Column::new("throttled_n", |a| Slot::I32(&mut a.throttled_n)),
    Column::new("covered_s", |a| Slot::F64(&mut a.covered_s)),
    Column::new("dram_active_n", |a| Slot::I32(&mut a.dram_active.n)),
    Column::new("dram_active_sum", |a| Slot::F64(&mut a.dram_active.sum)),
    Column::new("alloc_share_sum", |a| Slot::F64(&mut a.alloc_share_sum)),
    Column::new("mem_used_max", |a| Slot::OptI64(&mut a.mem_used_max)),
    Column::new("mem_total_max", |a| Slot::OptI64(&mut a.mem_total_max)),
    Column::new("gpu_util_max", |a| Slot::OptF32(&mut a.gpu_util_max)),
    Column::new("power_max", |a| Slot::OptF32(&mut a.power_max)),
    Column::new("temp_max", |a| Slot::OptF32(&mut a.temp_max)),
    Column::new("energy_n", |a| Slot::I32(&mut a.energy_n)),
    Column::new("energy_j", |a| Slot::F64(&mut a.energy_j)),
];

/// The columns of a GPU minute rollup interference reads ([`DeviceMinute`]; the bucket in ms),
/// read by position.
pub(crate) const DEVICE_MINUTE: &[Column<DeviceMinute>] = &[
    Column::new("bucket", |a| Slot::I64(&mut a.bucket)),
    Column::new("gpu_util_n", |a| Slot::I32(&mut a.gpu_util_n)),
    Column::new("gpu_util_sum", |a| Slot::F64(&mut a.gpu_util_sum)),
    Column::new("dram_active_n", |a| Slot::I32(&mut a.dram_active_n)),
    Column::new("dram_active_sum", |a| Slot::F64(&mut a.dram_active_sum)),
];

/// The columns of a tenant minute rollup interference reads ([`TenantMinute`]; the bucket in
/// ms), read by position.
pub(crate) const TENANT_MINUTE: &[Column<TenantMinute>] = &[
    Column::new("bucket", |a| Slot::I64(&mut a.bucket)),
    Column::new("samples", |a| Slot::I32(&mut a.samples)),
    Column::new("active_n", |a| Slot::I32(&mut a.active_n)),
    Column::new("sm_util_n", |a| Slot::I32(&mut a.sm_util_n)),
    Column::new("sm_util_sum", |a| Slot::F64(&mut a.sm_util_sum)),
    Column::new("alloc_n", |a| Slot::I32(&mut a.alloc_n)),
    Column::new("alloc_share_sum", |a| Slot::F64(&mut a.alloc_share_sum)),
    Column::new("eff_n", |a| Slot::I32(&mut a.eff_n)),
    Column::new("eff_sum", |a| Slot::F64(&mut a.eff_sum)),
];

/// The column list: `prefix` and the columns, comma-separated.
pub(crate) fn names<A>(prefix: &str, columns: &[Column<A>]) -> String {
    let names: Vec<&str> = columns.iter().map(|c| c.name).collect();
    format!("{prefix}{}", names.join(", "))
}

/// Writes the aggregate `a`'s cells to `w`, in list order. `a` is copied first so that each
/// column's one accessor (`&mut`, which reading rows needs) serves here too: the aggregates are
/// flat numbers and fixed-size histograms, so the copy is under a kilobyte on the stack (760 bytes for a GPU row), no
/// allocation, beside the one each stored histogram makes anyway.
pub(crate) fn write_cells<A: Clone, W: Cells>(w: &mut W, a: &A, columns: &[Column<A>]) {
    let mut a = a.clone();
    for c in columns {
        match c.slot(&mut a) {
            Slot::I32(v) => w.i32(*v),
            Slot::I64(v) => w.i64(*v),
            Slot::F64(v) => w.f64(*v),
            Slot::OptF32(v) => w.opt_f32(*v),
            Slot::OptI64(v) => w.opt_i64(*v),
            Slot::Hist(h) => w.opt_bytes(h.to_stored().as_deref()),
        };
    }
}

/// Binds the aggregate `a`'s values to the statement `q` in list order (`a` copied as in
/// [`write_cells`]).
pub(crate) fn bind_values<'q, DB: Db, A: Clone>(
    mut q: Stmt<'q, DB>,
    a: &A,
    columns: &[Column<A>],
) -> Stmt<'q, DB> {
    let mut a = a.clone();
    for c in columns {
        q = match c.slot(&mut a) {
            Slot::I32(v) => q.arg(*v),
            Slot::I64(v) => q.arg(*v),
            Slot::F64(v) => q.arg(*v),
            Slot::OptF32(v) => q.arg(*v),
            Slot::OptI64(v) => q.arg(*v),
            Slot::Hist(h) => q.arg(h.to_stored()),
        };
    }
    q
}

/// Reads an aggregate from the row `r` by column name (either backend).
pub(crate) fn read_named<DB: Db, A: Default>(
    r: &DB::Row,
    columns: &[Column<A>],
) -> sqlx::Result<A> {
    let mut a = A::default();
    for c in columns {
        read_cell::<DB>(r, At::Name(c.name), c.slot(&mut a))?;
    }
    Ok(a)
}

/// Reads a value from the row `r` by position: its columns start at index `first` (after those
/// the caller reads itself) and follow the list's order.
pub(crate) fn read_at<DB: Db, A: Default>(
    r: &DB::Row,
    first: usize,
    columns: &[Column<A>],
) -> sqlx::Result<A> {
    let mut a = A::default();
    for (i, c) in columns.iter().enumerate() {
        read_cell::<DB>(r, At::Index(first + i), c.slot(&mut a))?;
    }
    Ok(a)
}

/// A column of a row: by name or by position.
#[derive(Clone, Copy)]
enum At<'a> {
    Name(&'a str),
    Index(usize),
}

impl At<'_> {
    fn read<DB: Db + Reads<T>, T>(self, r: &DB::Row) -> sqlx::Result<T> {
        match self {
            At::Name(n) => r.col(n),
            At::Index(i) => r.at(i),
        }
    }
}

/// The column `at` into its slot.
fn read_cell<DB: Db>(r: &DB::Row, at: At<'_>, slot: Slot<'_>) -> sqlx::Result<()> {
    match slot {
        Slot::I32(v) => *v = at.read::<DB, _>(r)?,
        Slot::I64(v) => *v = at.read::<DB, _>(r)?,
        Slot::F64(v) => *v = at.read::<DB, _>(r)?,
        Slot::OptF32(v) => *v = at.read::<DB, _>(r)?,
        Slot::OptI64(v) => *v = at.read::<DB, _>(r)?,
        Slot::Hist(h) => {
            let bytes: Option<Vec<u8>> = at.read::<DB, _>(r)?;
            *h = bytes.map(|b| Hist::from_bytes(&b)).unwrap_or_default();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use model::rollup::{self, GpuAgg, TenantAgg};

    use crate::raw::rows::Cells;

    /// Records what a writer is given: each cell's kind and value, as text.
    #[derive(Default)]
    struct Tape(Vec<String>);

    impl Cells for Tape {
        fn null(&mut self) -> &mut Self {
            self.0.push("null".into());
            self
        }
        fn text(&mut self, v: &str) -> &mut Self {
            self.0.push(format!("text {v}"));
            self
        }
        fn i32(&mut self, v: i32) -> &mut Self {
            self.0.push(format!("i32 {v}"));
            self
        }
        fn i64(&mut self, v: i64) -> &mut Self {
            self.0.push(format!("i64 {v}"));
            self
        }
        fn f32(&mut self, v: f32) -> &mut Self {
            self.0.push(format!("f32 {v}"));
            self
        }
        fn f64(&mut self, v: f64) -> &mut Self {
            self.0.push(format!("f64 {v}"));
            self
        }
        fn ts_ms(&mut self, ms: i64) -> &mut Self {
            self.0.push(format!("ts {ms}"));
            self
        }
        fn bytes(&mut self, v: &[u8]) -> &mut Self {
            self.0.push(format!("bytes {}", v.len()));
            self
        }
    }

    fn gpu_agg() -> GpuAgg {
        let mut a = GpuAgg::default();
        for (i, v) in [0.25f32, 0.75].into_iter().enumerate() {
            a.add(
                &rollup::RawGpu {
                    gpu_uuid: "GPU-1".into(),
                    ts: i as i64 * 1000,
                    interval_ms: 1000,
                    gpu_util: Some(v),
                    ratios: {
                        let mut r = model::profiling::PerRatio::default();
                        *r.get_mut(model::profiling::Ratio::SmActive) = Some(v);
                        r
                    },
                    mem_used_bytes: Some(7),
                    power_w: Some(300.0),
                    ..Default::default()
                },
                0.5,
            );
        }
        a
    }

    #[test]
    fn every_column_is_written_once_in_the_order_named() {
        let names = super::names("", &super::GPU_AGG);
        let mut tape = Tape::default();
        let a = gpu_agg();
        super::write_cells(&mut tape, &a, &super::GPU_AGG);
        let cols: Vec<&str> = names.split(", ").collect();
        assert_eq!(cols.len(), tape.0.len(), "{cols:?} {:?}", tape.0);
        let cell = |name: &str| &tape.0[cols.iter().position(|c| *c == name).unwrap()];
        assert_eq!(cell("samples"), "i32 2");
        assert_eq!(cell("gpu_util_n"), "i32 2");
        assert_eq!(cell("gpu_util_sum"), "f64 1");
        assert_eq!(cell("gpu_util_max"), "f32 0.75");
        assert_eq!(cell("gpu_util_hist"), "bytes 80");
        assert_eq!(cell("mem_used_max"), "i64 7");
        assert_eq!(cell("temp_max"), "null");
        assert_eq!(cell("tensor_active_n"), "i32 0");
        let mut unique = cols.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), cols.len(), "a column named twice");

        let names = super::names("x, ", super::TENANT_AGG);
        let mut tape = Tape::default();
        super::write_cells(&mut tape, &TenantAgg::default(), super::TENANT_AGG);
        assert_eq!(names.split(", ").count(), tape.0.len() + 1);
        assert!(names.starts_with("x, samples, covered_s, "));
    }

    /// Each table's columns after every migration of `backend`, in order (CREATE TABLE, its
    /// `LIKE` form, and ALTER TABLE with one or more ADD COLUMN: what the rollup tables'
    /// migrations use).
    fn migrated_columns(backend: &str) -> std::collections::HashMap<String, Vec<String>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(backend);
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let mut tables = std::collections::HashMap::<String, Vec<String>>::new();
        for file in files {
            let sql = std::fs::read_to_string(file).unwrap();
            let mut lines = sql.lines();
            while let Some(line) = lines.next() {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["CREATE", "TABLE", name, "(LIKE", source, ..] => {
                        let columns = tables[*source].clone();
                        tables.insert(name.to_string(), columns);
                    }
                    ["CREATE", "TABLE", name, "("] => {
                        let columns = lines
                            .by_ref()
                            .take_while(|l| !l.starts_with(')'))
                            .map(str::trim)
                            .filter(|l| !l.is_empty() && !l.starts_with("--"))
                            .filter(|l| !l.starts_with("PRIMARY") && !l.starts_with("UNIQUE"))
                            .filter_map(|l| l.split_whitespace().next())
                            .map(str::to_owned)
                            .collect();
                        tables.insert(name.to_string(), columns);
                    }
                    ["ALTER", "TABLE", name, ..] => {
                        // The statement runs to its `;`, one ADD COLUMN or several.
                        let mut statement = line.to_owned();
                        while !statement.contains(';') {
                            let Some(next) = lines.next() else { break };
                            statement.push(' ');
                            statement.push_str(next);
                        }
                        let added = statement.split("ADD COLUMN").skip(1);
                        let columns = tables.entry(name.to_string()).or_default();
                        columns.extend(
                            added
                                .filter_map(|a| a.split_whitespace().next())
                                .map(str::to_owned),
                        );
                    }
                    _ => {}
                }
            }
        }
        tables
    }

    /// The writers name every column of the lists, so the lists must be exactly the columns the
    /// migrations give each rollup table, on both backends.
    #[test]
    fn the_lists_are_the_rollup_tables_columns_on_both_backends() {
        let sorted = |cols: &str| {
            let mut v: Vec<String> = cols.split(", ").map(str::to_owned).collect();
            v.sort();
            v
        };
        for backend in ["postgres", "sqlite"] {
            let tables = migrated_columns(backend);
            for (table, list) in [
                ("gpu_rollup_1m", crate::sql::GPU_ROLLUP_COLUMNS.as_str()),
                ("gpu_rollup_1h", crate::sql::GPU_ROLLUP_COLUMNS.as_str()),
                (
                    "cluster_rollup_1h",
                    crate::sql::CLUSTER_ROLLUP_COLUMNS.as_str(),
                ),
                (
                    "tenant_rollup_1m",
                    crate::sql::TENANT_ROLLUP_COLUMNS.as_str(),
                ),
                (
                    "tenant_rollup_1h",
                    crate::sql::TENANT_ROLLUP_COLUMNS.as_str(),
                ),
            ] {
                let mut created = tables[table].clone();
                created.sort();
                assert_eq!(created, sorted(list), "{backend}: {table}");
            }
        }
    }

    /// The series queries name rollup columns of their own (`series::METRICS`): each must be a
    /// column of its family's list, or the query fails only when someone asks for it.
    #[test]
    fn every_column_a_series_reads_is_a_rollup_column() {
        use crate::series::{Family, METRICS};
        let (gpu, tenant) = (
            crate::sql::GPU_ROLLUP_COLUMNS.as_str(),
            crate::sql::TENANT_ROLLUP_COLUMNS.as_str(),
        );
        for m in METRICS.iter() {
            let columns: Vec<&str> = match m.family {
                Family::Gpu => gpu.split(", ").collect(),
                Family::Tenant => tenant.split(", ").collect(),
            };
            let named = [Some(m.n_col), Some(m.sum_col), m.max_col, m.hist_col];
            for col in named.into_iter().flatten() {
                assert!(
                    columns.contains(&col),
                    "{}: {col} is not a rollup column",
                    m.name
                );
            }
        }
    }
}
