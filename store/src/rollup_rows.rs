//! A span's rollup rows, written once for both backends: PostgreSQL COPYs them, SQLite binds
//! them into multi-row INSERTs; either way through [`Cells`], in the order of
//! [`crate::sql::GPU_ROLLUP_COLUMNS`] and [`crate::sql::TENANT_ROLLUP_COLUMNS`].

use model::rollup::{GpuAgg, TenantAgg};

use crate::raw::rows::Cells;

/// One GPU-bucket row: `identity` is (cluster, node, GPU).
pub(crate) fn gpu<W: Cells>(w: &mut W, identity: [&str; 3], bucket: i64, a: &GpuAgg) {
    for v in identity {
        w.text(v);
    }
    w.ts_ms(bucket);
    w.i32(a.samples)
        .f64(a.covered_s)
        .i32(a.gpu_util.n)
        .f64(a.gpu_util.sum)
        .opt_f32(a.gpu_util.max)
        .opt_bytes(a.gpu_util_hist.to_stored().as_deref())
        .i32(a.busy_n)
        .i32(a.sm_active.n)
        .f64(a.sm_active.sum)
        .opt_f32(a.sm_active.max)
        .opt_bytes(a.sm_active_hist.to_stored().as_deref())
        .f64(a.sm_occupancy.sum)
        .f64(a.tensor_active.sum)
        .f64(a.dram_active.sum)
        .i32(a.mem_used.n)
        .f64(a.mem_used.sum)
        .opt_i64(a.mem_used.max)
        .opt_i64(a.mem_total_max)
        .i32(a.power.n)
        .f64(a.power.sum)
        .opt_f32(a.power.max)
        .i32(a.temp.n)
        .f64(a.temp.sum)
        .opt_f32(a.temp.max)
        .i32(a.throttled_n)
        .f64(a.alloc_share_sum)
        .i32(a.sm_occupancy.n)
        .i32(a.tensor_active.n)
        .i32(a.dram_active.n);
}

/// One tenant-GPU-bucket row: `identity` is (cluster, node, GPU, tenant).
pub(crate) fn tenant<W: Cells>(w: &mut W, identity: [&str; 4], bucket: i64, a: &TenantAgg) {
    for v in identity {
        w.text(v);
    }
    w.ts_ms(bucket);
    w.i32(a.samples)
        .f64(a.covered_s)
        .f64(a.alloc_share_sum)
        .i32(a.alloc_n)
        .i32(a.present_n)
        .i32(a.sm_util.n)
        .f64(a.sm_util.sum)
        .opt_f32(a.sm_util.max)
        .i32(a.busy_n)
        .i32(a.mem_used.n)
        .f64(a.mem_used.sum)
        .opt_i64(a.mem_used.max)
        .i32(a.processes_max)
        .i32(a.eff_n)
        .f64(a.eff_sum)
        .i32(a.eff_dcgm_n)
        .opt_bytes(a.eff_hist.to_stored().as_deref())
        .i32(a.active_n)
        .i32(a.idle_n)
        .f64(a.idle_lead_s)
        .f64(a.idle_trail_s)
        .f64(a.idle_max_s);
}
