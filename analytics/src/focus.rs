//! Cost and usage in the FinOps Foundation's FOCUS format, version 1.2
//! (<https://focus.finops.org/>, the specification's `specification/columns/*.md`): one row
//! per tenant, GPU and UTC day, so a finance tool reads who held which GPU for how long at
//! what price. The allocation-based cost fills FOCUS' cost columns; the usage-based cost
//! (effective use × the price) and the difference, the idle cost, are extension columns
//! (`x_` prefix, as FOCUS allows), so the waste shows beside the bill. Mapping in
//! docs/cost.md, "FOCUS export".

use std::collections::HashMap;

use model::inventory::Sharing;
use model::rollup::HOUR_MS;

use crate::config::Config;
use crate::energy::J_PER_KWH;
use crate::funnel::NO_TEAM;
use crate::holdings::Holding;
use crate::input::Input;

/// The FOCUS version the columns follow.
pub const VERSION: &str = "1.2";

const DAY_MS: i64 = 24 * HOUR_MS;

/// A FOCUS data type, as the specification's content constraints name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Decimal,
    /// `YYYY-MM-DDTHH:mm:ssZ` (UTC).
    DateTime,
    /// A JSON object of string keys and values (Tags).
    KeyValue,
}

/// One column: its FOCUS name, type, and whether it may be empty (null).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
    pub nullable: bool,
}

const fn col(name: &'static str, kind: Kind, nullable: bool) -> Column {
    Column {
        name,
        kind,
        nullable,
    }
}

/// The columns written, in order: FOCUS 1.2's mandatory columns, the conditional ones that
/// apply to a GPU-hour charge (resource, sub-account, pricing and consumption, tags), then
/// gpulens' extension columns.
pub const COLUMNS: [Column; 39] = [
    col("BilledCost", Kind::Decimal, false),
    col("BillingAccountId", Kind::String, false),
    col("BillingAccountName", Kind::String, true),
    col("BillingCurrency", Kind::String, false),
    col("BillingPeriodEnd", Kind::DateTime, false),
    col("BillingPeriodStart", Kind::DateTime, false),
    col("ChargeCategory", Kind::String, false),
    col("ChargeClass", Kind::String, true),
    col("ChargeDescription", Kind::String, true),
    col("ChargeFrequency", Kind::String, true),
    col("ChargePeriodEnd", Kind::DateTime, false),
    col("ChargePeriodStart", Kind::DateTime, false),
    col("ConsumedQuantity", Kind::Decimal, true),
    col("ConsumedUnit", Kind::String, true),
    col("ContractedCost", Kind::Decimal, false),
    col("ContractedUnitPrice", Kind::Decimal, true),
    col("EffectiveCost", Kind::Decimal, false),
    col("InvoiceIssuerName", Kind::String, false),
    col("ListCost", Kind::Decimal, false),
    col("ListUnitPrice", Kind::Decimal, true),
    col("PricingCategory", Kind::String, true),
    col("PricingQuantity", Kind::Decimal, true),
    col("PricingUnit", Kind::String, true),
    col("ProviderName", Kind::String, false),
    col("PublisherName", Kind::String, false),
    col("ResourceId", Kind::String, true),
    col("ResourceName", Kind::String, true),
    col("ResourceType", Kind::String, true),
    col("ServiceCategory", Kind::String, false),
    col("ServiceName", Kind::String, false),
    col("SubAccountId", Kind::String, true),
    col("SubAccountName", Kind::String, true),
    col("Tags", Kind::KeyValue, true),
    col("x_UsageBasedCost", Kind::Decimal, false),
    col("x_IdleCost", Kind::Decimal, false),
    col("x_EffectiveGpuHours", Kind::Decimal, false),
    col("x_EnergyKWh", Kind::Decimal, true),
    col("x_IdleEnergyKWh", Kind::Decimal, true),
    col("x_EmissionsKgCO2e", Kind::Decimal, true),
];

/// What one row says: a tenant on a GPU over one UTC day (clipped to the export's range).
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub from_ms: i64,
    pub to_ms: i64,
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub gpu_index: i64,
    pub model: String,
    pub sharing: Sharing,
    pub team: String,
    pub tenant: String,
    /// The tenant's readable name (a pod, a job, a user), its key where unknown.
    pub tenant_name: String,
    pub price: f64,
    pub allocated_gpu_hours: f64,
    pub effective_gpu_hours: f64,
    /// None where the GPU's energy is unknown.
    pub energy_kwh: Option<f64>,
    pub idle_energy_kwh: Option<f64>,
    /// None without a grid intensity.
    pub co2e_kg: Option<f64>,
}

impl Charge {
    /// Whether the day holds anything: allocated time, use, or energy.
    fn is_charged(&self) -> bool {
        self.allocated_gpu_hours > 0.0
            || self.effective_gpu_hours > 0.0
            || self.energy_kwh.is_some_and(|e| e > 0.0)
    }

    /// Allocated GPU-hours × the price: the bill.
    pub fn cost(&self) -> f64 {
        self.allocated_gpu_hours * self.price
    }

    /// Effective GPU-hours × the price: what the work done would cost.
    pub fn usage_cost(&self) -> f64 {
        self.effective_gpu_hours * self.price
    }
}

/// Every tenant's charges over [from, to) of the input, by day, in (day, cluster, node, GPU,
/// tenant) order; a day a holding had no allocation, use or energy gives no row.
pub fn charges(input: &Input, holdings: &[Holding], cfg: &Config) -> Vec<Charge> {
    let gpus: HashMap<&str, &crate::input::GpuRef> =
        input.gpus.iter().map(|g| (g.uuid.as_str(), g)).collect();
    let known = crate::energy::measured_gpus(input);
    let tenants: HashMap<(&str, &str), &crate::input::TenantRef> = input
        .tenants
        .iter()
        .map(|t| ((t.cluster.as_str(), t.key.as_str()), t))
        .collect();
    let mut out = Vec::new();
    for h in holdings {
        let g = gpus.get(h.gpu.as_str());
        let model = g.map_or("unknown", |g| g.model.as_str());
        let sharing = g.map(|g| g.sharing).unwrap_or_default();
        let t = tenants.get(&(h.cluster.as_str(), h.tenant.as_str()));
        let energy_known = known.contains(h.gpu.as_str());
        let mut day: Option<Charge> = None;
        for (hour, r) in &h.rows {
            let start = hour.div_euclid(DAY_MS) * DAY_MS;
            if day
                .as_ref()
                .is_some_and(|d| d.from_ms != start.max(input.from_ms))
            {
                out.extend(day.take().filter(Charge::is_charged));
            }
            let d = day.get_or_insert_with(|| Charge {
                from_ms: start.max(input.from_ms),
                to_ms: (start + DAY_MS).min(input.to_ms),
                cluster: h.cluster.clone(),
                node: h.node.clone(),
                gpu: h.gpu.clone(),
                gpu_index: g.map_or(-1, |g| g.index),
                model: model.to_owned(),
                sharing,
                team: t
                    .and_then(|t| t.team.clone())
                    .unwrap_or_else(|| NO_TEAM.to_owned()),
                tenant: h.tenant.clone(),
                tenant_name: t.map_or_else(|| h.tenant.clone(), |t| t.name.clone()),
                price: cfg.price_for(&h.cluster, model, sharing),
                allocated_gpu_hours: 0.0,
                effective_gpu_hours: 0.0,
                energy_kwh: energy_known.then_some(0.0),
                idle_energy_kwh: energy_known.then_some(0.0),
                co2e_kg: (energy_known && cfg.carbon.is_set()).then_some(0.0),
            });
            d.allocated_gpu_hours += r.allocated_gpu_hours();
            d.effective_gpu_hours += r.effective_gpu_hours();
            let kwh = r.energy_j / J_PER_KWH;
            d.energy_kwh = d.energy_kwh.map(|e| e + kwh);
            d.idle_energy_kwh = d.idle_energy_kwh.map(|e| e + r.idle_energy_j / J_PER_KWH);
            let g_per_kwh = cfg.carbon.intensity(&h.cluster, *hour).unwrap_or(0.0);
            d.co2e_kg = d.co2e_kg.map(|c| c + kwh * g_per_kwh / 1000.0);
        }
        out.extend(day.filter(Charge::is_charged));
    }
    out.sort_by(|a, b| {
        (a.from_ms, &a.cluster, &a.node, &a.gpu, &a.tenant)
            .cmp(&(b.from_ms, &b.cluster, &b.node, &b.gpu, &b.tenant))
    });
    out
}

/// FOCUS' Date/Time format: `YYYY-MM-DDTHH:mm:ssZ`, UTC.
pub fn date_time(ms: i64) -> String {
    let s = model::time::rfc3339(ms.div_euclid(1000) * 1000);
    s.replace(".000Z", "Z")
}

/// The first instant of `ms`'s UTC month and of the next: the billing period.
pub fn month_of(ms: i64) -> (i64, i64) {
    let days = ms.div_euclid(DAY_MS);
    let (y, m, _) = model::time::civil_from_days(days);
    let start = model::time::days_from_civil(y, m, 1).unwrap_or(days);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let end = model::time::days_from_civil(ny, nm, 1).unwrap_or(days + 1);
    (start * DAY_MS, end * DAY_MS)
}

/// The cell values of `c`'s row, in [`COLUMNS`] order, unquoted (None: null). Decimals are
/// written with ten decimal places, so the rows' sums are the analysis' to well under a cent.
pub fn cells(c: &Charge, currency: &str) -> Vec<Option<String>> {
    let dec = |v: f64| Some(format!("{v:.10}"));
    let (bill_from, bill_to) = month_of(c.from_ms);
    let cost = c.cost();
    let usage = c.usage_cost();
    let sharing = c.sharing.as_str();
    let tags = serde_json::json!({
        "gpulens/cluster": c.cluster,
        "gpulens/node": c.node,
        "gpulens/gpu-model": c.model,
        "gpulens/sharing": sharing,
        "gpulens/team": c.team,
        "gpulens/tenant": c.tenant,
    });
    let s = |v: &str| Some(v.to_owned());
    vec![
        dec(cost),
        s(&c.cluster),
        s(&c.cluster),
        s(currency),
        Some(date_time(bill_to)),
        Some(date_time(bill_from)),
        s("Usage"),
        None,
        Some(format!(
            "{} on {} GPU {} ({}, {sharing}): {:.4} GPU-hours allocated at {:.4} {currency}",
            c.tenant_name, c.node, c.gpu_index, c.model, c.allocated_gpu_hours, c.price
        )),
        s("Usage-Based"),
        Some(date_time(c.to_ms)),
        Some(date_time(c.from_ms)),
        dec(c.allocated_gpu_hours),
        s("GPU-Hours"),
        dec(cost),
        dec(c.price),
        dec(cost),
        s(&c.cluster),
        dec(cost),
        dec(c.price),
        s("Standard"),
        dec(c.allocated_gpu_hours),
        s("GPU-Hours"),
        s(&c.cluster),
        s("gpulens"),
        s(&c.gpu),
        Some(format!("{} GPU {}", c.node, c.gpu_index)),
        s("GPU"),
        s("Compute"),
        s("GPU time"),
        s(&c.team),
        s(&c.team),
        Some(tags.to_string()),
        dec(usage),
        dec(cost - usage),
        dec(c.effective_gpu_hours),
        c.energy_kwh.and_then(dec),
        c.idle_energy_kwh.and_then(dec),
        c.co2e_kg.and_then(dec),
    ]
}

/// Whether `value` is a valid cell of `column` (None: null). Errors say what is wrong.
pub fn check_cell(column: &Column, value: Option<&str>) -> Result<(), String> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return if column.nullable {
            Ok(())
        } else {
            Err(format!("{} must not be null", column.name))
        };
    };
    let ok = match column.kind {
        Kind::String => true,
        Kind::Decimal => v.parse::<f64>().is_ok_and(f64::is_finite) && !v.contains(['e', 'E']),
        Kind::DateTime => {
            v.len() == 20
                && v.ends_with('Z')
                && v.parse::<jiff::Timestamp>().is_ok()
                && v.as_bytes()[10] == b'T'
        }
        Kind::KeyValue => serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(v)
            .is_ok_and(|m| m.values().all(|x| x.is_string())),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} = {v:?} is not a FOCUS {:?}",
            column.name, column.kind
        ))
    }
}
