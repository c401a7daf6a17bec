//! Rows encoded for binary COPY: the batch's samples for the raw tables, in the order of the
//! group commit's COPY statements.

use model::wire::v1::Batch;

use crate::group_commit::COPIES;
use crate::pgcopy::CopyWriter;

/// Encodes one row per item for `statement` (`COPY t (columns) FROM STDIN …`), `write`
/// filling each row's fields; the field count follows from the column list. Synchronous, so
/// that nothing borrowed by the iterator lives across the send's await.
pub(super) fn prepare<T>(
    statement: &str,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut CopyWriter, T),
) -> CopyWriter {
    let fields = statement
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map_or(1, |(cols, _)| cols.matches(',').count() + 1) as i16;
    let mut writer = CopyWriter::new();
    for item in items {
        writer.row(fields);
        write(&mut writer, item);
    }
    writer
}

/// The batch's sample rows, encoded for the raw tables in the order of [`COPIES`], each row's
/// fields in the order of its table's columns (`raw::columns`: identity, `ts`, values).
pub(super) fn sample_rows(b: &Batch) -> [CopyWriter; 5] {
    let (c, n) = (b.cluster.as_str(), b.node.as_str());
    let iv = b.interval_ms as i32;
    let gpus = prepare(
        &COPIES[0],
        b.snapshots
            .iter()
            .flat_map(|s| s.gpus.iter().map(move |x| (s, x))),
        |w, (s, g)| {
            w.text(c)
                .text(n)
                .text(&g.gpu_uuid)
                .ts_ms(s.ts)
                .i32(iv)
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
                .opt_f32(g.dec_util)
                .opt_f32(g.sm_active)
                .opt_f32(g.sm_occupancy)
                .opt_f32(g.dram_active)
                .opt_f32(g.tensor_active)
                .opt_f32(g.gr_engine_active);
        },
    );
    let mig = prepare(
        &COPIES[1],
        b.snapshots
            .iter()
            .flat_map(|s| s.mig.iter().map(move |x| (s, x))),
        |w, (s, m)| {
            w.text(c)
                .text(n)
                .text(&m.gpu_uuid)
                .i32(m.gi_id as i32)
                .i32(m.ci_id as i32)
                .ts_ms(s.ts)
                .opt_i64(m.mem_used_bytes)
                .opt_i64(m.mem_total_bytes)
                .opt_f32(m.sm_active)
                .opt_f32(m.sm_occupancy)
                .opt_f32(m.dram_active)
                .opt_f32(m.tensor_active)
                .opt_f32(m.gr_engine_active);
        },
    );
    let processes = prepare(
        &COPIES[2],
        b.snapshots
            .iter()
            .flat_map(|s| s.processes.iter().map(move |x| (s, x))),
        |w, (s, p)| {
            w.text(c)
                .text(n)
                .text(&p.gpu_uuid)
                .i64(i64::from(p.pid))
                .ts_ms(p.start_time)
                .text(p.kind.as_str())
                .opt_i32(p.gi_id.map(|v| v as i32))
                .opt_i32(p.ci_id.map(|v| v as i32))
                .opt_text(p.tenant.as_deref())
                .ts_ms(s.ts)
                .opt_f32(p.sm_util)
                .opt_f32(p.mem_util)
                .opt_f32(p.enc_util)
                .opt_f32(p.dec_util)
                .opt_i64(p.mem_used_bytes);
        },
    );
    let allocations = prepare(
        &COPIES[3],
        b.snapshots
            .iter()
            .flat_map(|s| s.allocations.iter().map(move |x| (s, x))),
        |w, (s, a)| {
            w.text(c)
                .text(n)
                .text(&a.gpu_uuid)
                .text(&a.tenant)
                .opt_i32(a.gi_id.map(|v| v as i32))
                .opt_i32(a.ci_id.map(|v| v as i32))
                .opt_i32(a.replica.map(|v| v as i32))
                .ts_ms(s.ts)
                .f32(a.share);
        },
    );
    let events = prepare(
        &COPIES[4],
        b.snapshots
            .iter()
            .flat_map(|s| s.events.iter().map(move |x| (s, x))),
        |w, (_, e)| {
            w.text(c)
                .text(n)
                .text(&e.gpu_uuid)
                .ts_ms(e.ts)
                .text(&e.kind)
                .i64(e.code)
                .opt_text(e.message.as_deref());
        },
    );
    [gpus, mig, processes, allocations, events]
}
