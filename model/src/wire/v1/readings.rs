//! The readings of a snapshot's rows, each with its domain (docs/ingest.md, "Domains"), in one
//! table per kind of row. Validation checks a row against its table; a producer clears by the
//! same table the readings its driver answered outside them ([`Snapshot::clear_out_of_domain`]),
//! so a GPU in trouble that reports 4,294,967,295 °C loses that one reading, not the batch with
//! every GPU of its node.

use std::fmt;

use super::batch::Snapshot;
use crate::profiling::{self, Place, RatioSpec};
use crate::{GpuSample, MigSample, ProcessSample};

/// The most memory one GPU, MIG instance or process may report: 16 TiB, far above any GPU's
/// memory (the same bound as the DCGM frame-buffer fields in `crate::dcgm`). It also keeps
/// every sum the rollups take over a batch's rows far from `i64::MAX`.
pub const MAX_MEMORY_BYTES: i64 = 1 << 44;

/// The highest power draw accepted, in watts: far above any board's (a GB200 superchip draws
/// about 2,700 W), and the bound dcgm-exporter's power field is read with.
pub const MAX_POWER_W: f64 = 10_000.0;
/// The accepted GPU temperatures, in °C (the bounds dcgm-exporter's temperature is read with).
pub const MIN_TEMP_C: f64 = -50.0;
pub const MAX_TEMP_C: f64 = 200.0;

/// The highest clock accepted, in MHz: far above any GPU's (an H100 boosts to 1,980 MHz, its
/// memory to 2,619), and the bound dcgm-exporter's clock fields are read with. It keeps a
/// driver's 4,294,967,295 from passing as a clock.
pub const MAX_CLOCK_MHZ: f64 = 100_000.0;

/// A reading's value as the wire holds it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Value {
    F32(f32),
    F64(f64),
    I64(i64),
}

impl Value {
    fn as_f64(self) -> f64 {
        match self {
            Value::F32(v) => f64::from(v),
            Value::F64(v) => v,
            Value::I64(v) => v as f64,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::F32(v) => v.fmt(f),
            Value::F64(v) => v.fmt(f),
            Value::I64(v) => v.fmt(f),
        }
    }
}

/// What a reading may be.
#[derive(Debug, Clone, Copy)]
pub(super) enum Domain {
    /// 0 to 1.
    Ratio,
    /// 0 to [`MAX_MEMORY_BYTES`].
    Bytes,
    /// Counts, rates, clocks, bit masks: 0 or more.
    NonNegative,
    /// Finite, within these bounds (inclusive).
    Between(f64, f64),
}

impl Domain {
    pub(super) fn holds(self, v: Value) -> bool {
        let x = v.as_f64();
        match self {
            Domain::Ratio => (0.0..=1.0).contains(&x),
            Domain::Bytes => (0.0..=MAX_MEMORY_BYTES as f64).contains(&x),
            Domain::NonNegative => x >= 0.0,
            Domain::Between(min, max) => x.is_finite() && x >= min && x <= max,
        }
    }

    /// Why `v` does not fit, naming `field`.
    pub(super) fn refusal(self, field: &str, v: Value) -> String {
        match self {
            Domain::Ratio => format!("{field} is a ratio between 0 and 1, got {v}"),
            Domain::Bytes => {
                format!("{field} must be between 0 and {MAX_MEMORY_BYTES} bytes (16 TiB), got {v}")
            }
            Domain::NonNegative => format!("{field} must not be negative, got {v}"),
            Domain::Between(min, max) => {
                format!("{field} must be between {min} and {max}, got {v}")
            }
        }
    }
}

/// One reading of a row of kind `R`: its name on the wire, its domain, a read and a clear of
/// the same field.
pub(super) struct Reading<R> {
    name: &'static str,
    domain: Domain,
    get: fn(&R) -> Option<Value>,
    clear: fn(&mut R),
}

impl<R> Reading<R> {
    /// The reading's value in `row` when it lies outside its domain.
    fn outside(&self, row: &R) -> Option<Value> {
        (self.get)(row).filter(|v| !self.domain.holds(*v))
    }
}

macro_rules! reading {
    ($row:ty, $field:ident, $domain:expr, $value:ident) => {
        Reading::<$row> {
            name: stringify!($field),
            domain: $domain,
            get: |r| r.$field.map(|v| Value::$value(v.into())),
            clear: |r| r.$field = None,
        }
    };
}

/// A GPU row's readings besides the profiling ratios (`crate::profiling` declares those).
const GPU: &[Reading<GpuSample>] = &[
    reading!(GpuSample, gpu_util, Domain::Ratio, F32),
    reading!(GpuSample, mem_util, Domain::Ratio, F32),
    reading!(GpuSample, enc_util, Domain::Ratio, F32),
    reading!(GpuSample, dec_util, Domain::Ratio, F32),
    reading!(GpuSample, mem_used_bytes, Domain::Bytes, I64),
    reading!(GpuSample, mem_total_bytes, Domain::Bytes, I64),
    reading!(GpuSample, pcie_rx_bytes_per_s, Domain::NonNegative, I64),
    reading!(GpuSample, pcie_tx_bytes_per_s, Domain::NonNegative, I64),
    reading!(GpuSample, nvlink_rx_bytes_per_s, Domain::NonNegative, I64),
    reading!(GpuSample, nvlink_tx_bytes_per_s, Domain::NonNegative, I64),
    reading!(GpuSample, ecc_corrected, Domain::NonNegative, I64),
    reading!(GpuSample, ecc_uncorrected, Domain::NonNegative, I64),
    reading!(
        GpuSample,
        sm_clock_mhz,
        Domain::Between(0.0, MAX_CLOCK_MHZ),
        I64
    ),
    reading!(
        GpuSample,
        mem_clock_mhz,
        Domain::Between(0.0, MAX_CLOCK_MHZ),
        I64
    ),
    reading!(GpuSample, retired_pages, Domain::NonNegative, I64),
    reading!(GpuSample, remapped_rows, Domain::NonNegative, I64),
    reading!(GpuSample, throttle_reasons, Domain::NonNegative, I64),
    reading!(GpuSample, power_w, Domain::Between(0.0, MAX_POWER_W), F32),
    reading!(
        GpuSample,
        temp_c,
        Domain::Between(MIN_TEMP_C, MAX_TEMP_C),
        F32
    ),
    reading!(GpuSample, energy_j, Domain::Between(0.0, f64::MAX), F64),
];

/// A MIG row's readings besides the profiling ratios.
const MIG: &[Reading<MigSample>] = &[
    reading!(MigSample, mem_used_bytes, Domain::Bytes, I64),
    reading!(MigSample, mem_total_bytes, Domain::Bytes, I64),
];

/// A process row's readings.
const PROCESS: &[Reading<ProcessSample>] = &[
    reading!(ProcessSample, sm_util, Domain::Ratio, F32),
    reading!(ProcessSample, mem_util, Domain::Ratio, F32),
    reading!(ProcessSample, enc_util, Domain::Ratio, F32),
    reading!(ProcessSample, dec_util, Domain::Ratio, F32),
    reading!(ProcessSample, mem_used_bytes, Domain::Bytes, I64),
];

/// A kind of row with readings: its table, where it keeps the profiling ratios, and its GPU.
/// Validation and [`Snapshot::clear_out_of_domain`] both go through [`outside`].
pub(super) trait Row: Sized + 'static {
    /// Its snapshot list as [`Cleared::reading`] names it ("" for GPU rows, "mig.", …).
    const PREFIX: &'static str;
    /// Its readings besides the profiling ratios.
    const READINGS: &'static [Reading<Self>];
    /// Where it keeps a profiling ratio (`crate::profiling` declares them); None for a row
    /// without them.
    fn ratio(spec: &'static RatioSpec) -> Option<&'static Place<Self>>;
    fn gpu(&self) -> &str;
}

impl Row for GpuSample {
    const PREFIX: &'static str = "";
    const READINGS: &'static [Reading<Self>] = GPU;
    fn ratio(spec: &'static RatioSpec) -> Option<&'static Place<Self>> {
        Some(&spec.gpu)
    }
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

impl Row for MigSample {
    const PREFIX: &'static str = "mig.";
    const READINGS: &'static [Reading<Self>] = MIG;
    fn ratio(spec: &'static RatioSpec) -> Option<&'static Place<Self>> {
        Some(&spec.mig)
    }
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

impl Row for ProcessSample {
    const PREFIX: &'static str = "processes.";
    const READINGS: &'static [Reading<Self>] = PROCESS;
    fn ratio(_: &'static RatioSpec) -> Option<&'static Place<Self>> {
        None
    }
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

/// A reading of a row outside its domain: its name, domain and value, and where it lives.
pub(super) struct Outside<R: 'static> {
    pub(super) name: &'static str,
    pub(super) domain: Domain,
    pub(super) value: Value,
    field: Field<R>,
}

/// Where a reading lives in its row: a table's field, or a profiling ratio's place.
enum Field<R: 'static> {
    Table(fn(&mut R)),
    Ratio(&'static Place<R>),
}

impl<R> Outside<R> {
    /// Makes the reading absent in `row`.
    fn clear(&self, row: &mut R) {
        match self.field {
            Field::Table(clear) => clear(row),
            Field::Ratio(place) => *(place.set)(row) = None,
        }
    }
}

/// Every reading of `row` outside its domain, its table's first, then its profiling ratios.
pub(super) fn outside<R: Row>(row: &R) -> impl Iterator<Item = Outside<R>> + '_ {
    let table = R::READINGS.iter().filter_map(|r| {
        r.outside(row).map(|value| Outside {
            name: r.name,
            domain: r.domain,
            value,
            field: Field::Table(r.clear),
        })
    });
    let ratios = profiling::RATIOS.iter().filter_map(|spec| {
        let place = R::ratio(spec)?;
        let value = (place.get)(row).map(Value::F32)?;
        (!Domain::Ratio.holds(value)).then_some(Outside {
            name: spec.name,
            domain: Domain::Ratio,
            value,
            field: Field::Ratio(place),
        })
    });
    table.chain(ratios)
}

/// A reading [`Snapshot::clear_out_of_domain`] cleared: whose, which, and what it said.
#[derive(Debug, Clone, PartialEq)]
pub struct Cleared {
    pub gpu_uuid: String,
    /// Its name on the wire (`temp_c`, `processes.mem_used_bytes`, `mig.sm_active`).
    pub reading: String,
    /// The value as the producer had it.
    pub value: String,
}

impl Snapshot {
    /// Clears (makes absent) every reading outside its domain, the ones validation would
    /// refuse the batch for, and says which: "not measured" in place of a value no GPU can
    /// have. Identifiers, times and references are left as they are.
    pub fn clear_out_of_domain(&mut self) -> Vec<Cleared> {
        let mut cleared = Vec::new();
        self.gpus
            .iter_mut()
            .for_each(|g| clear_row(g, &mut cleared));
        self.mig.iter_mut().for_each(|m| clear_row(m, &mut cleared));
        self.processes
            .iter_mut()
            .for_each(|p| clear_row(p, &mut cleared));
        cleared
    }
}

/// Clears `row`'s readings outside their domains, noting each in `cleared`.
fn clear_row<R: Row>(row: &mut R, cleared: &mut Vec<Cleared>) {
    let found: Vec<Outside<R>> = outside(row).collect();
    for o in found {
        cleared.push(Cleared {
            gpu_uuid: row.gpu().to_owned(),
            reading: format!("{}{}", R::PREFIX, o.name),
            value: o.value.to_string(),
        });
        o.clear(row);
    }
}

#[cfg(test)]
#[path = "readings_tests.rs"]
mod tests;
