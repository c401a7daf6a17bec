//! The aggregate columns of the rollup tables, each declared once — its column, its cell type
//! and the aggregate field it holds — in [`gpu_agg_columns!`] (GPU and cluster rollups) and
//! [`tenant_agg_columns!`]. The column lists, the COPY and multi-row INSERT writers
//! (`crate::rollup_rows`), the bound cluster-rollup INSERT and the readers of both backends are
//! made from these lists, so a new rollup column is one line here (and its migration).
//!
//! A list macro takes another macro's path and its arguments, and calls it with the arguments
//! in parentheses followed by `column: kind = field.path` entries. The kinds: `i32`, `f64`,
//! `opt_f32`, `opt_i64` (a nullable column) and `hist` (a [`model::rollup::Hist`], stored as
//! bytes, `NULL` when empty).

/// Every aggregate column of a GPU rollup row ([`model::rollup::GpuAgg`]), in insert order.
macro_rules! gpu_agg_columns {
    ($($then:ident)::+ ($($args:tt)*)) => {
        $($then)::+! { ($($args)*)
            samples: i32 = samples,
            covered_s: f64 = covered_s,
            gpu_util_n: i32 = gpu_util.n,
            gpu_util_sum: f64 = gpu_util.sum,
            gpu_util_max: opt_f32 = gpu_util.max,
            gpu_util_hist: hist = gpu_util_hist,
            busy_n: i32 = busy_n,
            sm_active_n: i32 = sm_active.n,
            sm_active_sum: f64 = sm_active.sum,
            sm_active_max: opt_f32 = sm_active.max,
            sm_active_hist: hist = sm_active_hist,
            sm_occupancy_sum: f64 = sm_occupancy.sum,
            tensor_active_sum: f64 = tensor_active.sum,
            dram_active_sum: f64 = dram_active.sum,
            mem_used_n: i32 = mem_used.n,
            mem_used_sum: f64 = mem_used.sum,
            mem_used_max: opt_i64 = mem_used.max,
            mem_total_max: opt_i64 = mem_total_max,
            power_n: i32 = power.n,
            power_sum: f64 = power.sum,
            power_max: opt_f32 = power.max,
            temp_n: i32 = temp.n,
            temp_sum: f64 = temp.sum,
            temp_max: opt_f32 = temp.max,
            throttled_n: i32 = throttled_n,
            alloc_share_sum: f64 = alloc_share_sum,
            sm_occupancy_n: i32 = sm_occupancy.n,
            tensor_active_n: i32 = tensor_active.n,
            dram_active_n: i32 = dram_active.n,
            energy_n: i32 = energy_n,
            energy_j: f64 = energy_j,
        }
    };
}
pub(crate) use gpu_agg_columns;

/// Every aggregate column of a tenant rollup row ([`model::rollup::TenantAgg`]), in insert
/// order.
macro_rules! tenant_agg_columns {
    ($($then:ident)::+ ($($args:tt)*)) => {
        $($then)::+! { ($($args)*)
            samples: i32 = samples,
            covered_s: f64 = covered_s,
            alloc_share_sum: f64 = alloc_share_sum,
            alloc_n: i32 = alloc_n,
            present_n: i32 = present_n,
            sm_util_n: i32 = sm_util.n,
            sm_util_sum: f64 = sm_util.sum,
            sm_util_max: opt_f32 = sm_util.max,
            busy_n: i32 = busy_n,
            mem_used_n: i32 = mem_used.n,
            mem_used_sum: f64 = mem_used.sum,
            mem_used_max: opt_i64 = mem_used.max,
            processes_max: i32 = processes_max,
            eff_n: i32 = eff_n,
            eff_sum: f64 = eff_sum,
            eff_dcgm_n: i32 = eff_dcgm_n,
            eff_hist: hist = eff_hist,
            active_n: i32 = active_n,
            idle_n: i32 = idle_n,
            idle_lead_s: f64 = idle_lead_s,
            idle_trail_s: f64 = idle_trail_s,
            idle_max_s: f64 = idle_max_s,
            energy_j: f64 = energy_j,
            idle_energy_j: f64 = idle_energy_j,
        }
    };
}
pub(crate) use tenant_agg_columns;

/// The columns of a GPU hour rollup the analysis reads ([`model::hour_series::GpuHour`]), read by
/// position ([`read_at!`]: 1.7 million rows a week at 10,000 GPUs).
macro_rules! gpu_hour_columns {
    ($($then:ident)::+ ($($args:tt)*)) => {
        $($then)::+! { ($($args)*)
            samples: i32 = samples,
            throttled_n: i32 = throttled_n,
            covered_s: f64 = covered_s,
            dram_active_n: i32 = dram_active.n,
            dram_active_sum: f64 = dram_active.sum,
            alloc_share_sum: f64 = alloc_share_sum,
            mem_used_max: opt_i64 = mem_used_max,
            mem_total_max: opt_i64 = mem_total_max,
            gpu_util_max: opt_f32 = gpu_util_max,
            power_max: opt_f32 = power_max,
            temp_max: opt_f32 = temp_max,
            energy_n: i32 = energy_n,
            energy_j: f64 = energy_j,
        }
    };
}
pub(crate) use gpu_hour_columns;

/// The columns of a GPU minute rollup interference reads ([`model::pair_hours::DeviceMinute`]; the
/// bucket in ms), read by position.
macro_rules! device_minute_columns {
    ($($then:ident)::+ ($($args:tt)*)) => {
        $($then)::+! { ($($args)*)
            bucket: i64 = bucket,
            gpu_util_n: i32 = gpu_util_n,
            gpu_util_sum: f64 = gpu_util_sum,
            dram_active_n: i32 = dram_active_n,
            dram_active_sum: f64 = dram_active_sum,
        }
    };
}
pub(crate) use device_minute_columns;

/// The columns of a tenant minute rollup interference reads ([`model::pair_hours::TenantMinute`];
/// the bucket in ms), read by position.
macro_rules! tenant_minute_columns {
    ($($then:ident)::+ ($($args:tt)*)) => {
        $($then)::+! { ($($args)*)
            bucket: i64 = bucket,
            samples: i32 = samples,
            active_n: i32 = active_n,
            sm_util_n: i32 = sm_util_n,
            sm_util_sum: f64 = sm_util_sum,
            alloc_n: i32 = alloc_n,
            alloc_share_sum: f64 = alloc_share_sum,
            eff_n: i32 = eff_n,
            eff_sum: f64 = eff_sum,
        }
    };
}
pub(crate) use tenant_minute_columns;

/// The column list: `prefix` and the columns, comma-separated (a string literal).
macro_rules! names {
    (($prefix:literal) $first:ident: $fk:ident = $($ff:ident).+
        $(, $col:ident: $k:ident = $($f:ident).+)* $(,)?) => {
        concat!($prefix, stringify!($first) $(, ", ", stringify!($col))*)
    };
}
pub(crate) use names;

/// Writes the aggregate `a`'s cells to `w` (a [`crate::raw::rows::Cells`]), in list order.
macro_rules! write_cells {
    (($w:expr, $a:expr) $($col:ident: $k:ident = $($f:ident).+),* $(,)?) => {{
        let (w, a) = ($w, $a);
        $( crate::rollup_columns::cell!(w, $k, a.$($f).+); )*
    }};
}
pub(crate) use write_cells;

macro_rules! cell {
    ($w:ident, hist, $v:expr) => {
        $w.opt_bytes($v.to_stored().as_deref())
    };
    ($w:ident, $k:ident, $v:expr) => {
        $w.$k($v)
    };
}
pub(crate) use cell;

/// Binds the aggregate `a`'s values to the query `q` in list order, with `q`'s method `bind`
/// (`bind` on a query, `push_bind` on a multi-row builder); the query with them.
macro_rules! bind_values {
    (($q:expr, $a:expr, $bind:ident) $($col:ident: $k:ident = $($f:ident).+),* $(,)?) => {{
        let a = $a;
        $q $( .$bind(crate::rollup_columns::bound!($k, a.$($f).+)) )*
    }};
}
pub(crate) use bind_values;

macro_rules! bound {
    (hist, $v:expr) => {
        $v.to_stored()
    };
    ($k:ident, $v:expr) => {
        $v
    };
}
pub(crate) use bound;

/// Reads an aggregate of type `agg` from the row `r` by column name (either backend);
/// `hist` is the backend's type of a histogram's bytes. Needs a `?`-able context.
macro_rules! read_agg {
    (($r:expr, $agg:path, $hist:ty) $($col:ident: $k:ident = $($f:ident).+),* $(,)?) => {{
        let r = $r;
        let hist = |v: Option<$hist>| v.map(|b| rollup::Hist::from_bytes(&b)).unwrap_or_default();
        let mut a = <$agg>::default();
        $( a.$($f).+ = crate::rollup_columns::read_cell!(r, hist, $k, stringify!($col)); )*
        a
    }};
}
pub(crate) use read_agg;

/// Reads a value of type `t` from the row `r` by position: its columns start at index `first`
/// (after those the caller reads itself) and follow the list's order. Needs a `?`-able context.
macro_rules! read_at {
    (($r:expr, $t:path, $first:expr) $($col:ident: $k:ident = $($f:ident).+),* $(,)?) => {{
        let r = $r;
        let mut at: usize = $first;
        let mut a = <$t>::default();
        $(
            a.$($f).+ = r.try_get(at)?;
            at += 1;
        )*
        let _ = at;
        a
    }};
}
pub(crate) use read_at;

macro_rules! read_cell {
    ($r:ident, $hist:ident, hist, $col:expr) => {
        $hist($r.try_get($col)?)
    };
    ($r:ident, $hist:ident, $k:ident, $col:expr) => {
        $r.try_get($col)?
    };
}
pub(crate) use read_cell;

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
                    sm_active: Some(v),
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
        let names = gpu_agg_columns!(names(""));
        let mut tape = Tape::default();
        let a = gpu_agg();
        gpu_agg_columns!(write_cells(&mut tape, &a));
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

        let names = tenant_agg_columns!(names("x, "));
        let mut tape = Tape::default();
        tenant_agg_columns!(write_cells(&mut tape, &TenantAgg::default()));
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
                ("gpu_rollup_1m", crate::sql::GPU_ROLLUP_COLUMNS),
                ("gpu_rollup_1h", crate::sql::GPU_ROLLUP_COLUMNS),
                ("cluster_rollup_1h", crate::sql::CLUSTER_ROLLUP_COLUMNS),
                ("tenant_rollup_1m", crate::sql::TENANT_ROLLUP_COLUMNS),
                ("tenant_rollup_1h", crate::sql::TENANT_ROLLUP_COLUMNS),
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
            crate::sql::GPU_ROLLUP_COLUMNS,
            crate::sql::TENANT_ROLLUP_COLUMNS,
        );
        for m in METRICS {
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
