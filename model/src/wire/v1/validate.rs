//! What a collector checks before it stores a batch: version, limits, identifiers, value
//! ranges, timestamps and tenant references; the first problem found is the answer, naming
//! the field.

use super::batch::{self, Batch, Snapshot, VERSION};
use super::readings::{self, Domain, Value};
use crate::UnixMillis;

/// Limits a collector enforces on every batch.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_snapshots: usize,
    /// Rows of all kinds (GPU, MIG, process, allocation, event) across the batch.
    pub max_rows: usize,
    pub max_tenants: usize,
    pub max_string_len: usize,
    /// How far a sample timestamp may lie in the future of the collector's clock.
    pub max_future_ms: i64,
    /// How far in the past a sample may lie (the raw retention).
    pub max_age_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_snapshots: 3_600,
            max_rows: 500_000,
            max_tenants: 10_000,
            max_string_len: 256,
            max_future_ms: 5 * 60 * 1000,
            max_age_ms: 7 * 24 * 3600 * 1000,
        }
    }
}

/// Why a batch was refused. The message names the offending field and value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

fn invalid(msg: impl Into<String>) -> Invalid {
    Invalid(msg.into())
}

impl Batch {
    /// Checks everything a collector must check before storing anything: version, limits,
    /// identifiers, value ranges, timestamps and tenant references. Each section has its own
    /// check below; the first problem found is the answer, naming the field.
    pub fn validate(&self, limits: &Limits, now: UnixMillis) -> Result<(), Invalid> {
        self.check_header(limits)?;
        let tenant_keys = self.check_tenants(limits)?;
        self.check_inventory(limits)?;
        let window = Window {
            earliest: now - limits.max_age_ms,
            latest: now + limits.max_future_ms,
        };
        let mut seen_ts = set_for(self.snapshots.len());
        for (i, s) in self.snapshots.iter().enumerate() {
            if s.ts < window.earliest || s.ts > window.latest {
                return Err(invalid(format!(
                    "snapshots[{i}].ts {} is outside the accepted range [{}, {}] (ms since the epoch; at most {} days old and {} minutes ahead of the collector's clock)",
                    s.ts,
                    window.earliest,
                    window.latest,
                    limits.max_age_ms / 86_400_000,
                    limits.max_future_ms / 60_000
                )));
            }
            if !seen_ts.insert(s.ts) {
                return Err(invalid(format!(
                    "snapshots[{i}].ts {} appears twice in the batch",
                    s.ts
                )));
            }
            let at = |what: &str| format!("snapshots[{i}].{what}");
            check_gpus(s, &at, limits)?;
            check_mig(s, &at, limits)?;
            check_processes(s, &at, limits, &tenant_keys, window.latest)?;
            check_allocations(s, &at, limits, &tenant_keys)?;
            check_events(s, &at, limits, window)?;
        }
        Ok(())
    }

    /// Version, identity, sequence, interval and the batch's size.
    fn check_header(&self, limits: &Limits) -> Result<(), Invalid> {
        if self.version != VERSION {
            return Err(invalid(format!(
                "unsupported protocol version {}; this collector speaks version {VERSION}",
                self.version
            )));
        }
        for (field, value) in [("cluster", &self.cluster), ("node", &self.node)] {
            crate::names::check_subdomain(value)
                .map_err(|why| invalid(format!("{field} {why}")))?;
        }
        check_name(|| "agent_id".into(), &self.agent_id, limits)?;
        if self.seq == 0 {
            return Err(invalid("seq must start at 1"));
        }
        if self.seq > i64::MAX as u64 {
            return Err(invalid(format!("seq {} is larger than 2^63-1", self.seq)));
        }
        if self.interval_ms == 0 || self.interval_ms > 3_600_000 {
            return Err(invalid(format!(
                "interval_ms must be between 1 and 3600000, got {}",
                self.interval_ms
            )));
        }
        if self.snapshots.len() > limits.max_snapshots {
            return Err(invalid(format!(
                "batch has {} snapshots; the limit is {}",
                self.snapshots.len(),
                limits.max_snapshots
            )));
        }
        let rows = self.row_count();
        if rows > limits.max_rows {
            return Err(invalid(format!(
                "batch has {rows} rows; the limit is {}",
                limits.max_rows
            )));
        }
        if self.tenants.len() > limits.max_tenants {
            return Err(invalid(format!(
                "batch has {} tenants; the limit is {}",
                self.tenants.len(),
                limits.max_tenants
            )));
        }
        Ok(())
    }

    /// The tenants: names, their text fields, no key twice. Returns the keys, which samples
    /// must reference.
    fn check_tenants(&self, limits: &Limits) -> Result<Set<&str>, Invalid> {
        let mut tenant_keys = set_for(self.tenants.len());
        for (i, t) in self.tenants.iter().enumerate() {
            check_name(|| format!("tenants[{i}].key"), &t.key, limits)?;
            for field in &crate::tenant::TEXT_FIELDS {
                if let Some(v) = (field.read)(t) {
                    check_text(|| format!("tenants[{i}].{}", field.name), v, limits)?;
                }
            }
            if !tenant_keys.insert(t.key.as_str()) {
                return Err(invalid(format!(
                    "tenants[{i}].key {:?} appears twice",
                    t.key
                )));
            }
        }
        Ok(tenant_keys)
    }

    /// The inventory: names, sharing modes, sizes, MIG instances, no GPU twice.
    fn check_inventory(&self, limits: &Limits) -> Result<(), Invalid> {
        let mut gpu_uuids = set_for(self.inventory.as_ref().map_or(0, Vec::len));
        if let Some(inventory) = &self.inventory {
            for (i, g) in inventory.iter().enumerate() {
                check_name(|| format!("inventory[{i}].uuid"), &g.uuid, limits)?;
                check_text(|| format!("inventory[{i}].model"), &g.model, limits)?;
                check_in(
                    Domain::Bytes,
                    || format!("inventory[{i}].memory_total_bytes"),
                    Value::I64(g.memory_total_bytes),
                )?;
                if let Some(pci) = &g.pci_bus_id {
                    check_name(|| format!("inventory[{i}].pci_bus_id"), pci, limits)?;
                }
                if g.index > MAX_GPU_INDEX {
                    return Err(invalid(format!(
                        "inventory[{i}].index {} is not a GPU index (0 to {MAX_GPU_INDEX})",
                        g.index
                    )));
                }
                if !(1..=MAX_REPLICA + 1).contains(&g.replicas) {
                    return Err(invalid(format!(
                        "inventory[{i}].replicas must be between 1 and {}, got {}",
                        MAX_REPLICA + 1,
                        g.replicas
                    )));
                }
                for (j, m) in g.mig_instances.iter().enumerate() {
                    check_mig_instance(
                        |f| format!("inventory[{i}].mig_instances[{j}].{f}"),
                        m,
                        limits,
                    )?;
                }
                if !gpu_uuids.insert(g.uuid.as_str()) {
                    return Err(invalid(format!(
                        "inventory[{i}].uuid {:?} appears twice",
                        g.uuid
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The accepted range of sample and event times, around the collector's clock.
#[derive(Debug, Clone, Copy)]
struct Window {
    earliest: UnixMillis,
    latest: UnixMillis,
}

/// A snapshot's GPU readings: names, ratios, byte counts, counters and physical ranges.
fn check_gpus(s: &Snapshot, at: &dyn Fn(&str) -> String, limits: &Limits) -> Result<(), Invalid> {
    let mut gpus_here = set_for(s.gpus.len());
    for (j, g) in s.gpus.iter().enumerate() {
        let at = |f: &str| at(&format!("gpus[{j}].{f}"));
        check_name(|| at("gpu_uuid"), &g.gpu_uuid, limits)?;
        if !gpus_here.insert(batch::gpu_key(g)) {
            return Err(invalid(format!(
                "{} {:?} appears twice in one snapshot",
                at("gpu_uuid"),
                g.gpu_uuid
            )));
        }
        check_readings(g, at)?;
    }
    Ok(())
}

/// A snapshot's MIG instance readings.
fn check_mig(s: &Snapshot, at: &dyn Fn(&str) -> String, limits: &Limits) -> Result<(), Invalid> {
    let mut mig_here = set_for(s.mig.len());
    for (j, m) in s.mig.iter().enumerate() {
        let at = |f: &str| at(&format!("mig[{j}].{f}"));
        check_name(|| at("gpu_uuid"), &m.gpu_uuid, limits)?;
        check_mig_id(|| at("gi_id"), Some(m.gi_id))?;
        check_mig_id(|| at("ci_id"), Some(m.ci_id))?;
        if !mig_here.insert(batch::mig_key(m)) {
            return Err(invalid(format!(
                "{} ({}, {}, {}) appears twice in one snapshot",
                at("gpu_uuid"),
                m.gpu_uuid,
                m.gi_id,
                m.ci_id
            )));
        }
        check_readings(m, at)?;
    }
    Ok(())
}

/// A snapshot's processes: pids, start times, readings, tenant references.
fn check_processes(
    s: &Snapshot,
    at: &dyn Fn(&str) -> String,
    limits: &Limits,
    tenant_keys: &Set<&str>,
    latest: UnixMillis,
) -> Result<(), Invalid> {
    let mut procs_here = set_for(s.processes.len());
    for (j, p) in s.processes.iter().enumerate() {
        let at = |f: &str| at(&format!("processes[{j}].{f}"));
        check_name(|| at("gpu_uuid"), &p.gpu_uuid, limits)?;
        check_mig_id(|| at("gi_id"), p.gi_id)?;
        check_mig_id(|| at("ci_id"), p.ci_id)?;
        if p.pid > MAX_PID {
            return Err(invalid(format!(
                "{} {} is above Linux's largest pid {MAX_PID}",
                at("pid"),
                p.pid
            )));
        }
        if p.start_time < 0 || p.start_time > latest {
            return Err(invalid(format!(
                "{} {} is not a start time between 1970 and the collector's clock (+{} minutes)",
                at("start_time"),
                p.start_time,
                limits.max_future_ms / 60_000
            )));
        }
        if !procs_here.insert(batch::process_key(p)) {
            return Err(invalid(format!(
                "{} (pid {}, started {}) appears twice in one snapshot",
                at("gpu_uuid"),
                p.pid,
                p.start_time
            )));
        }
        check_readings(p, at)?;
        if let Some(t) = &p.tenant
            && !tenant_keys.contains(t.as_str())
        {
            return Err(invalid(format!(
                "{} {t:?} is not among the batch's tenants",
                at("tenant")
            )));
        }
    }
    Ok(())
}

/// A snapshot's allocations: device, replica, tenant reference, share.
fn check_allocations(
    s: &Snapshot,
    at: &dyn Fn(&str) -> String,
    limits: &Limits,
    tenant_keys: &Set<&str>,
) -> Result<(), Invalid> {
    let mut allocs_here = set_for(s.allocations.len());
    for (j, a) in s.allocations.iter().enumerate() {
        let at = |f: &str| at(&format!("allocations[{j}].{f}"));
        check_name(|| at("gpu_uuid"), &a.gpu_uuid, limits)?;
        check_mig_id(|| at("gi_id"), a.gi_id)?;
        check_mig_id(|| at("ci_id"), a.ci_id)?;
        if a.replica.is_some_and(|r| r > MAX_REPLICA) {
            return Err(invalid(format!(
                "{} must be at most {MAX_REPLICA}",
                at("replica")
            )));
        }
        if !allocs_here.insert(batch::allocation_key(a)) {
            return Err(invalid(format!(
                "{} ({}, {}) appears twice in one snapshot",
                at("gpu_uuid"),
                a.gpu_uuid,
                a.tenant
            )));
        }
        if !tenant_keys.contains(a.tenant.as_str()) {
            return Err(invalid(format!(
                "{} {:?} is not among the batch's tenants",
                at("tenant"),
                a.tenant
            )));
        }
        if !(a.share > 0.0 && a.share <= 1.0) {
            return Err(invalid(format!(
                "{} must be in (0, 1], got {}",
                at("share"),
                a.share
            )));
        }
    }
    Ok(())
}

/// A snapshot's events: names, text, times inside the window, no event twice.
fn check_events(
    s: &Snapshot,
    at: &dyn Fn(&str) -> String,
    limits: &Limits,
    window: Window,
) -> Result<(), Invalid> {
    let (earliest, latest) = (window.earliest, window.latest);
    let mut events_here = set_for(s.events.len());
    for (j, e) in s.events.iter().enumerate() {
        let at = |f: &str| at(&format!("events[{j}].{f}"));
        check_name(|| at("gpu_uuid"), &e.gpu_uuid, limits)?;
        check_name(|| at("kind"), &e.kind, limits)?;
        if let Some(m) = &e.message {
            check_text(|| at("message"), m, limits)?;
        }
        check_in(Domain::NonNegative, || at("code"), Value::I64(e.code))?;
        if e.ts < earliest || e.ts > latest {
            return Err(invalid(format!(
                "{} {} is outside the accepted range",
                at("ts"),
                e.ts
            )));
        }
        if !events_here.insert(batch::event_key(e)) {
            return Err(invalid(format!(
                "{} ({}, {}, {} {}) appears twice in one snapshot",
                at("gpu_uuid"),
                e.gpu_uuid,
                e.ts,
                e.kind,
                e.code
            )));
        }
    }
    Ok(())
}

/// Identifiers: non-empty, bounded, printable, no whitespace or control characters.
fn check_name(field: impl Fn() -> String, value: &str, limits: &Limits) -> Result<(), Invalid> {
    if value.is_empty() {
        return Err(invalid(format!("{} must not be empty", field())));
    }
    // Nearly every name is printable ASCII without spaces: one pass over the bytes settles it.
    // Anything else takes the checks below, which name what is wrong.
    if value.len() <= limits.max_string_len && value.bytes().all(|b| b > b' ' && b < 0x7f) {
        return Ok(());
    }
    check_text(&field, value, limits)?;
    if has(value, char::is_whitespace) {
        return Err(invalid(format!(
            "{} {value:?} must not contain whitespace",
            field()
        )));
    }
    Ok(())
}

/// Whether `value` passes as an identifier of a batch under the default limits (what the
/// ingest accepts for UUIDs, bus ids and tenant keys), for producers that drop a value rather
/// than have the batch refused.
pub fn is_name(value: &str) -> bool {
    check_name(String::new, value, &Limits::default()).is_ok()
}

/// Whether `value` passes as free text of a batch under the default limits (what the ingest
/// accepts for GPU models, MIG profiles and tenant fields), for producers that drop a value
/// rather than have the batch refused.
pub fn is_text(value: &str) -> bool {
    check_text(String::new, value, &Limits::default()).is_ok()
}

/// Free text: bounded and free of control characters.
fn check_text(field: impl Fn() -> String, value: &str, limits: &Limits) -> Result<(), Invalid> {
    if value.len() > limits.max_string_len {
        return Err(invalid(format!(
            "{} is {} bytes long; the limit is {}",
            field(),
            value.len(),
            limits.max_string_len
        )));
    }
    if !value.bytes().all(|b| (b' '..0x7f).contains(&b)) && has(value, char::is_control) {
        return Err(invalid(format!(
            "{} {value:?} contains control characters",
            field()
        )));
    }
    Ok(())
}

/// Whether any character of `value` is one `class` picks; ASCII text (nearly every name) is
/// checked byte by byte without decoding.
fn has(value: &str, class: fn(char) -> bool) -> bool {
    if value.is_ascii() {
        value.bytes().any(|b| class(b as char))
    } else {
        value.chars().any(class)
    }
}

/// The sets that find a key twice in a batch. A batch is hostile input: the hasher is seeded
/// at random per set (foldhash's, several times faster than the standard SipHash on these
/// short keys), and a batch's size is bounded before any set is filled.
pub(super) type Set<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// A set sized for `n` keys, so that filling it never grows it. `n` is a length of the batch,
/// which `check_header` has bounded before any set is built.
pub(super) fn set_for<T>(n: usize) -> Set<T> {
    Set::with_capacity_and_hasher(n, Default::default())
}

// The per-value checks take the field's name lazily: valid batches (nearly all of them)
// never pay for building it.

/// A row's readings against their domains (`readings.rs`): the first outside names itself.
fn check_readings<R: readings::Row>(row: &R, at: impl Fn(&str) -> String) -> Result<(), Invalid> {
    match readings::outside(row).next() {
        Some(o) => Err(invalid(o.domain.refusal(&at(o.name), o.value))),
        None => Ok(()),
    }
}

/// A value of the batch other than a row's readings against `domain` (`readings.rs`, which
/// says why one does not fit).
fn check_in(domain: Domain, field: impl Fn() -> String, value: Value) -> Result<(), Invalid> {
    match domain.holds(value) {
        true => Ok(()),
        false => Err(invalid(domain.refusal(&field(), value))),
    }
}

/// The largest MIG GPU or compute instance id accepted. NVML's ids are small (an H100 or A100
/// has at most 7 GPU instances; ids seen in practice stay below 16); the bound keeps every id
/// inside the store's 32-bit columns with a wide margin.
pub const MAX_MIG_ID: u32 = 1023;
/// The largest GPU index accepted: NVML numbers a node's GPUs from 0 (eight or sixteen in a
/// server); the bound keeps it inside the store's 32-bit column.
pub const MAX_GPU_INDEX: u32 = 1023;
/// Linux's largest pid (`PID_MAX_LIMIT` on 64-bit kernels, 2^22).
pub const MAX_PID: u32 = 4_194_304;
/// The most replicas a time-sliced or MPS GPU is advertised with, as replica ids go.
pub const MAX_REPLICA: u32 = 1023;

fn check_mig_id(field: impl Fn() -> String, value: Option<u32>) -> Result<(), Invalid> {
    match value {
        Some(v) if v > MAX_MIG_ID => Err(invalid(format!(
            "{} {v} is not a MIG instance id (0 to {MAX_MIG_ID})",
            field()
        ))),
        _ => Ok(()),
    }
}

/// The most memory slices a MIG placement may reach: an A100, H100 or H200 has 8; the bound
/// leaves room for larger parts and keeps `start + size` far inside the store's 32-bit columns.
pub const MAX_MIG_SLICES: u32 = 64;

/// One MIG instance of the inventory: its profile, ids, memory, compute slices and placement
/// (`placement_start + placement_size` memory slices, at least one, within [`MAX_MIG_SLICES`]).
fn check_mig_instance(
    at: impl Fn(&str) -> String,
    m: &crate::MigInstanceInfo,
    limits: &Limits,
) -> Result<(), Invalid> {
    check_text(|| at("profile"), &m.profile, limits)?;
    check_mig_id(|| at("gi_id"), Some(m.gi_id))?;
    check_mig_id(|| at("ci_id"), Some(m.ci_id))?;
    check_in(
        Domain::Bytes,
        || at("memory_total_bytes"),
        Value::I64(m.memory_total_bytes),
    )?;
    if let Some(uuid) = &m.uuid {
        check_name(|| at("uuid"), uuid, limits)?;
    }
    let slices = 1..=MAX_MIG_SLICES;
    for (field, value) in [
        ("compute_slices", m.compute_slices),
        ("placement_size", m.placement_size),
    ] {
        if let Some(v) = value.filter(|v| !slices.contains(v)) {
            return Err(invalid(format!(
                "{} must be between 1 and {MAX_MIG_SLICES} slices, got {v}",
                at(field)
            )));
        }
    }
    let start = m.placement_start.unwrap_or(0);
    let end = u64::from(start) + u64::from(m.placement_size.unwrap_or(1));
    if end > u64::from(MAX_MIG_SLICES) {
        return Err(invalid(format!(
            "{} {start} places the instance past memory slice {MAX_MIG_SLICES}",
            at("placement_start")
        )));
    }
    Ok(())
}
