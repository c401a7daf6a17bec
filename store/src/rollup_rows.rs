//! A span's rollup rows, written once for both backends: PostgreSQL COPYs them, SQLite binds
//! them into multi-row INSERTs; either way through [`Cells`], in the order of
//! [`crate::sql::GPU_ROLLUP_COLUMNS`] and [`crate::sql::TENANT_ROLLUP_COLUMNS`] (the identity,
//! the bucket, then the aggregate's columns as `crate::rollup_columns` lists them).

use model::rollup::{GpuAgg, TenantAgg};

use crate::raw::rows::Cells;
use crate::rollup_columns::{GPU_AGG, TENANT_AGG, write_cells};

/// One GPU-bucket row: `identity` is (cluster, node, GPU).
pub(crate) fn gpu<W: Cells>(w: &mut W, identity: [&str; 3], bucket: i64, a: &GpuAgg) {
    for v in identity {
        w.text(v);
    }
    w.ts_ms(bucket);
    write_cells(w, a, &GPU_AGG);
}

/// One tenant-GPU-bucket row: `identity` is (cluster, node, GPU, tenant).
pub(crate) fn tenant<W: Cells>(w: &mut W, identity: [&str; 4], bucket: i64, a: &TenantAgg) {
    for v in identity {
        w.text(v);
    }
    w.ts_ms(bucket);
    write_cells(w, a, TENANT_AGG);
}
