//! A batch's rows for the raw tables, written once for both backends: [`of`] lists the rows of
//! one table and [`write`](fn@write) puts a row's cells, in the order of [`super::columns`] (identity,
//! `ts`, values), into whatever the backend writes them with — binary COPY on PostgreSQL, bind
//! parameters of a multi-row INSERT on SQLite — through [`Cells`].

use model::profiling::{self, PerRatio};
use model::wire::v1::Batch;
use model::{Allocation, GpuEvent, GpuSample, MigSample, ProcessSample};

/// The raw tables ingest writes, in the order [`of`] takes them: the four that seal
/// ([`super::TABLES`]), then the GPU events.
pub(crate) const COUNT: usize = 5;

/// Where a row's cells go, one typed cell at a time; `None` is SQL NULL.
pub(crate) trait Cells {
    fn null(&mut self) -> &mut Self;
    fn text(&mut self, v: &str) -> &mut Self;
    fn i32(&mut self, v: i32) -> &mut Self;
    fn i64(&mut self, v: i64) -> &mut Self;
    fn f32(&mut self, v: f32) -> &mut Self;
    fn f64(&mut self, v: f64) -> &mut Self;
    /// A time, in ms since the epoch.
    fn ts_ms(&mut self, ms: i64) -> &mut Self;
    fn bytes(&mut self, v: &[u8]) -> &mut Self;

    fn opt_bytes(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            Some(v) => self.bytes(v),
            None => self.null(),
        }
    }
    fn opt_text(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => self.text(v),
            None => self.null(),
        }
    }
    fn opt_i32(&mut self, v: Option<i32>) -> &mut Self {
        match v {
            Some(v) => self.i32(v),
            None => self.null(),
        }
    }
    fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(v) => self.i64(v),
            None => self.null(),
        }
    }
    fn opt_f32(&mut self, v: Option<f32>) -> &mut Self {
        match v {
            Some(v) => self.f32(v),
            None => self.null(),
        }
    }
    fn opt_f64(&mut self, v: Option<f64>) -> &mut Self {
        match v {
            Some(v) => self.f64(v),
            None => self.null(),
        }
    }
}

/// One row of a batch, with the time of the snapshot it came in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Row<'b> {
    Gpu(i64, &'b GpuSample),
    Mig(i64, &'b MigSample),
    Process(i64, &'b ProcessSample),
    Allocation(i64, &'b Allocation),
    Event(&'b GpuEvent),
}

/// The batch's rows of raw table `table` (an index below [`COUNT`]).
pub(crate) fn of(b: &Batch, table: usize) -> Vec<Row<'_>> {
    let s = b.snapshots.iter();
    match table {
        0 => s
            .flat_map(|s| s.gpus.iter().map(|x| Row::Gpu(s.ts, x)))
            .collect(),
        1 => s
            .flat_map(|s| s.mig.iter().map(|x| Row::Mig(s.ts, x)))
            .collect(),
        2 => s
            .flat_map(|s| s.processes.iter().map(|x| Row::Process(s.ts, x)))
            .collect(),
        3 => s
            .flat_map(|s| s.allocations.iter().map(|x| Row::Allocation(s.ts, x)))
            .collect(),
        4 => s.flat_map(|s| s.events.iter().map(Row::Event)).collect(),
        _ => unreachable!("raw table {table} of {COUNT}"),
    }
}

/// Writes `row` of batch `b`: the node's identity, then the row's own columns.
pub(crate) fn write<W: Cells>(w: &mut W, b: &Batch, row: &Row<'_>) {
    w.text(&b.cluster).text(&b.node);
    match *row {
        Row::Gpu(ts, g) => gpu(w, b.interval_ms as i32, ts, g),
        Row::Mig(ts, m) => {
            w.text(&m.gpu_uuid)
                .i32(m.gi_id as i32)
                .i32(m.ci_id as i32)
                .ts_ms(ts)
                .opt_i64(m.mem_used_bytes)
                .opt_i64(m.mem_total_bytes);
            ratios(w, profiling::of_mig(m));
        }
        Row::Process(ts, p) => {
            w.text(&p.gpu_uuid)
                .i64(i64::from(p.pid))
                .ts_ms(p.start_time)
                .text(p.kind.as_str())
                .opt_i32(p.gi_id.map(|v| v as i32))
                .opt_i32(p.ci_id.map(|v| v as i32))
                .opt_text(p.tenant.as_deref())
                .ts_ms(ts)
                .opt_f32(p.sm_util)
                .opt_f32(p.mem_util)
                .opt_f32(p.enc_util)
                .opt_f32(p.dec_util)
                .opt_i64(p.mem_used_bytes);
        }
        Row::Allocation(ts, a) => {
            w.text(&a.gpu_uuid)
                .text(&a.tenant)
                .opt_i32(a.gi_id.map(|v| v as i32))
                .opt_i32(a.ci_id.map(|v| v as i32))
                .opt_i32(a.replica.map(|v| v as i32))
                .ts_ms(ts)
                .f32(a.share);
        }
        Row::Event(e) => {
            w.text(&e.gpu_uuid)
                .ts_ms(e.ts)
                .text(&e.kind)
                .i64(e.code)
                .opt_text(e.message.as_deref());
        }
    }
}

fn gpu<W: Cells>(w: &mut W, interval_ms: i32, ts: i64, g: &GpuSample) {
    w.text(&g.gpu_uuid)
        .ts_ms(ts)
        .i32(interval_ms)
        .opt_f32(g.gpu_util)
        .opt_f32(g.mem_util)
        .opt_i64(g.mem_used_bytes)
        .opt_i64(g.mem_total_bytes)
        .opt_f32(g.power_w)
        .opt_f64(g.energy_j)
        .opt_f32(g.temp_c)
        .opt_i32(g.sm_clock_mhz)
        .opt_i32(g.mem_clock_mhz)
        .opt_i64(g.throttle_reasons)
        .opt_i64(g.pcie_rx_bytes_per_s)
        .opt_i64(g.pcie_tx_bytes_per_s)
        .opt_i64(g.nvlink_rx_bytes_per_s)
        .opt_i64(g.nvlink_tx_bytes_per_s)
        .opt_i64(g.ecc_corrected)
        .opt_i64(g.ecc_uncorrected)
        .opt_i32(g.retired_pages)
        .opt_i32(g.remapped_rows)
        .opt_f32(g.enc_util)
        .opt_f32(g.dec_util);
    ratios(w, profiling::of_gpu(g));
}

/// The DCGM profiling columns GPUs and MIG instances share, in [`model::profiling`] order.
fn ratios<W: Cells>(w: &mut W, values: PerRatio<Option<f32>>) {
    for v in values.0 {
        w.opt_f32(v);
    }
}
