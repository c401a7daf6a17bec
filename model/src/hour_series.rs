//! Hour rollups as the analysis holds them: a series per GPU and per (tenant, GPU), the names
//! once and the hours after. The store builds them from its rollup tables; the analytics reads
//! them. Hours are kept lean ([`GpuHour`], [`TenantHour`]): a week of a 10,000-GPU fleet is
//! 1.7 million GPU-hours and 2 million tenant-hours.

use crate::rollup::{HOUR_MS, Hist, Mean, Stat, TenantAgg};

/// What the analysis reads of a GPU's hour rollup: [`crate::rollup::GpuAgg`] without the fields no finding
/// uses (the histograms, the utilization, SM, tensor and power sums), a quarter of its size.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuHour {
    pub samples: i32,
    /// Samples with a throttle reason other than "idle".
    pub throttled_n: i32,
    pub covered_s: f64,
    /// DCGM's DRAM activity (MIG bandwidth saturation reads it).
    pub dram_active: Mean,
    /// Sum over samples of the allocated share of the GPU (capped at 1 per sample).
    pub alloc_share_sum: f64,
    pub mem_used_max: Option<i64>,
    pub mem_total_max: Option<i64>,
    pub gpu_util_max: Option<f32>,
    pub power_max: Option<f32>,
    pub temp_max: Option<f32>,
    /// Samples whose energy is known, and the joules the GPU drew in them.
    pub energy_n: i32,
    pub energy_j: f64,
}

/// One GPU's hour rollups over a range, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSeries {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    /// (hour start, the hour's rollup), in time order.
    pub hours: Vec<(i64, GpuHour)>,
}

/// What the analysis reads of a tenant's hour rollup: [`TenantAgg`] without the fields no
/// finding uses, its effective-use histogram reduced to the hour's p95 (the series keeps the
/// histograms' sum) — less than half its size.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TenantHour {
    pub samples: i32,
    pub alloc_n: i32,
    pub eff_n: i32,
    pub eff_dcgm_n: i32,
    pub active_n: i32,
    pub idle_n: i32,
    pub covered_s: f64,
    pub alloc_share_sum: f64,
    pub eff_sum: f64,
    pub idle_lead_s: f64,
    pub idle_trail_s: f64,
    pub idle_max_s: f64,
    pub mem_used_max: Option<i64>,
    /// p95 of the per-sample effective use within the hour (GPU-equivalents).
    pub eff_p95: Option<f32>,
    /// Joules charged to the tenant, and of those, while its allocation ran no kernel.
    pub energy_j: f64,
    pub idle_energy_j: f64,
}

impl TenantHour {
    /// [`TenantAgg::allocated_gpu_hours`].
    pub fn allocated_gpu_hours(&self) -> f64 {
        crate::rollup::gpu_hours(self.alloc_share_sum, self.samples, self.covered_s)
    }

    /// [`TenantAgg::used_gpu_hours`].
    pub fn used_gpu_hours(&self) -> f64 {
        crate::rollup::gpu_hours(self.eff_sum, self.samples, self.covered_s)
    }

    /// [`TenantAgg::effective_gpu_hours`].
    pub fn effective_gpu_hours(&self) -> f64 {
        self.used_gpu_hours().min(self.allocated_gpu_hours())
    }

    /// [`TenantAgg::borrowed_gpu_hours`].
    pub fn borrowed_gpu_hours(&self) -> f64 {
        (self.used_gpu_hours() - self.allocated_gpu_hours()).max(0.0)
    }

    /// [`TenantAgg::all_idle`].
    pub fn all_idle(&self) -> bool {
        crate::rollup::all_idle(self.samples, self.idle_lead_s, self.covered_s)
    }
}

impl From<&TenantAgg> for TenantHour {
    fn from(a: &TenantAgg) -> TenantHour {
        TenantHour {
            samples: a.samples,
            alloc_n: a.alloc_n,
            eff_n: a.eff_n,
            eff_dcgm_n: a.eff_dcgm_n,
            active_n: a.active_n,
            idle_n: a.idle_n,
            covered_s: a.covered_s,
            alloc_share_sum: a.alloc_share_sum,
            eff_sum: a.eff_sum,
            idle_lead_s: a.idle_lead_s,
            idle_trail_s: a.idle_trail_s,
            idle_max_s: a.idle_max_s,
            mem_used_max: a.mem_used.max,
            eff_p95: a.eff_hist.quantile(0.95, None),
            energy_j: a.energy_j,
            idle_energy_j: a.idle_energy_j,
        }
    }
}

/// The rollup an hour came from, as far as it keeps it: the fields it dropped are zero and the
/// histogram empty (what merging hours into a holding's total reads is all there).
impl From<&TenantHour> for TenantAgg {
    fn from(h: &TenantHour) -> TenantAgg {
        TenantAgg {
            samples: h.samples,
            alloc_n: h.alloc_n,
            eff_n: h.eff_n,
            eff_dcgm_n: h.eff_dcgm_n,
            active_n: h.active_n,
            idle_n: h.idle_n,
            covered_s: h.covered_s,
            alloc_share_sum: h.alloc_share_sum,
            eff_sum: h.eff_sum,
            idle_lead_s: h.idle_lead_s,
            idle_trail_s: h.idle_trail_s,
            idle_max_s: h.idle_max_s,
            energy_j: h.energy_j,
            idle_energy_j: h.idle_energy_j,
            mem_used: Stat {
                max: h.mem_used_max,
                ..Stat::default()
            },
            ..TenantAgg::default()
        }
    }
}

/// One tenant's hour rollups on one GPU over a range, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSeries {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub tenant: String,
    /// (hour start, the hour's rollup), in time order.
    pub hours: Vec<(i64, TenantHour)>,
    /// The sum of the hours' effective-use histograms (for the range's quantiles).
    pub eff_hist: Hist,
}

impl TenantSeries {
    /// Adds an hour's rollup: its lean part to the hours, its histogram to the sum. Keep the
    /// hours in time order.
    pub fn push(&mut self, hour: i64, agg: &TenantAgg) {
        self.push_within(hour, agg, usize::MAX);
    }

    /// [`TenantSeries::push`], the hours' list growing to at most `most` places.
    fn push_within(&mut self, hour: i64, agg: &TenantAgg, most: usize) {
        self.eff_hist.merge(&agg.eff_hist);
        push_within(&mut self.hours, (hour, TenantHour::from(agg)), most);
    }
}

/// Series of one kind being filled from rows that arrive in any order: rows of a key go to
/// its series (found by the key's text), and [`SeriesBuilder::finish`] puts the series in key
/// order and each one's hours in time order.
///
/// A series never holds more hours than its range has (a rollup has one row per key and
/// hour), so a series' list grows by doubling only up to that count: a week's series that
/// reports every hour takes 168 places, not the 256 doubling would give it. Rows of a fleet
/// arrive hour by hour, so every series grows at once and doubling's slack would be the
/// fleet's.
#[derive(Debug)]
pub struct SeriesBuilder<S> {
    index: std::collections::HashMap<String, usize>,
    key: String,
    series: Vec<S>,
    /// The most hours one series can hold.
    most_hours: usize,
}

impl<S> Default for SeriesBuilder<S> {
    fn default() -> Self {
        SeriesBuilder {
            index: Default::default(),
            key: String::new(),
            series: Vec::new(),
            most_hours: usize::MAX,
        }
    }
}

/// Pushes `item`, growing a full list by doubling but never past `most` places.
fn push_within<T>(list: &mut Vec<T>, item: T, most: usize) {
    if list.len() == list.capacity() {
        let room = most.saturating_sub(list.len()).max(1);
        list.reserve_exact(list.len().max(4).min(room));
    }
    list.push(item);
}

impl<S> SeriesBuilder<S> {
    /// A builder for hour rows whose buckets lie in [from_ms, to_ms).
    pub fn for_range(from_ms: i64, to_ms: i64) -> Self {
        let span = to_ms.saturating_sub(crate::rollup::bucket_of(from_ms, HOUR_MS));
        let hours = span.saturating_add(HOUR_MS - 1) / HOUR_MS;
        SeriesBuilder {
            most_hours: usize::try_from(hours).unwrap_or(0).max(1),
            ..Self::default()
        }
    }

    /// The series of the key made of `parts`, made by `new` the first time it is seen.
    pub fn series(&mut self, parts: &[&str], new: impl FnOnce() -> S) -> &mut S {
        self.key.clear();
        for p in parts {
            // A separator no name holds (names are validated printable text).
            self.key.push_str(p);
            self.key.push('\u{0}');
        }
        let at = match self.index.get(self.key.as_str()) {
            Some(&at) => at,
            None => {
                self.series.push(new());
                self.index.insert(self.key.clone(), self.series.len() - 1);
                self.series.len() - 1
            }
        };
        &mut self.series[at]
    }
}

impl SeriesBuilder<GpuSeries> {
    /// Adds one GPU-hour.
    pub fn push(&mut self, cluster: &str, node: &str, gpu: &str, hour: i64, agg: GpuHour) {
        let most = self.most_hours;
        let s = self.series(&[cluster, node, gpu], || GpuSeries {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            gpu: gpu.to_owned(),
            hours: Vec::new(),
        });
        push_within(&mut s.hours, (hour, agg), most);
    }
}

impl SeriesBuilder<TenantSeries> {
    /// Adds one tenant-hour.
    pub fn push(&mut self, [cluster, node, gpu, tenant]: [&str; 4], hour: i64, agg: TenantAgg) {
        let most = self.most_hours;
        let s = self.series(&[cluster, node, gpu, tenant], || TenantSeries {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            gpu: gpu.to_owned(),
            tenant: tenant.to_owned(),
            ..TenantSeries::default()
        });
        s.push_within(hour, &agg, most);
    }
}

/// What [`SeriesBuilder::finish`] orders series by, and how a series puts its hours in order.
pub trait Series {
    /// (cluster, node, GPU, tenant — empty for a GPU's series).
    fn key(&self) -> [&str; 4];
    fn order_hours(&mut self);
}

impl Series for GpuSeries {
    fn key(&self) -> [&str; 4] {
        [&self.cluster, &self.node, &self.gpu, ""]
    }
    fn order_hours(&mut self) {
        self.hours.sort_unstable_by_key(|(h, _)| *h);
        self.hours.shrink_to_fit();
    }
}

impl Series for TenantSeries {
    fn key(&self) -> [&str; 4] {
        [&self.cluster, &self.node, &self.gpu, &self.tenant]
    }
    fn order_hours(&mut self) {
        self.hours.sort_unstable_by_key(|(h, _)| *h);
        self.hours.shrink_to_fit();
    }
}

impl<S: Series> SeriesBuilder<S> {
    /// The series in key order, each one's hours in time order.
    pub fn finish(self) -> Vec<S> {
        let mut out = self.series;
        out.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
        for s in &mut out {
            s.order_hours();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_in_any_order_become_series_in_key_and_time_order() {
        let mut b = SeriesBuilder::<GpuSeries>::default();
        let hour = |samples| GpuHour {
            samples,
            ..GpuHour::default()
        };
        b.push("c", "n2", "g1", 7_200_000, hour(3));
        b.push("c", "n1", "g2", 0, hour(1));
        b.push("c", "n2", "g1", 3_600_000, hour(2));
        // Names that only differ in where one ends and the next begins stay apart.
        b.push("c", "n1g", "2", 0, hour(9));
        let s = b.finish();
        let keys: Vec<_> = s
            .iter()
            .map(|s| (s.node.as_str(), s.gpu.as_str()))
            .collect();
        assert_eq!(keys, [("n1", "g2"), ("n1g", "2"), ("n2", "g1")]);
        let hours: Vec<_> = s[2].hours.iter().map(|(h, a)| (*h, a.samples)).collect();
        assert_eq!(hours, [(3_600_000, 2), (7_200_000, 3)]);

        let mut b = SeriesBuilder::<TenantSeries>::default();
        b.push(["c", "n", "g", "pod/b"], 0, TenantAgg::default());
        b.push(["c", "n", "g", "pod/a"], HOUR_MS, TenantAgg::default());
        b.push(["c", "n", "g", "pod/a"], 0, TenantAgg::default());
        let s = b.finish();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].tenant, "pod/a");
        assert_eq!(
            s[0].hours.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
            [0, HOUR_MS]
        );
    }

    #[test]
    fn a_series_never_takes_more_places_than_its_range_has_hours() {
        // 7 days and a half hour: 169 hour buckets.
        let mut b = SeriesBuilder::<GpuSeries>::for_range(HOUR_MS / 2, 7 * 24 * HOUR_MS + HOUR_MS);
        for h in 0..169 {
            b.push("c", "n", "g", h * HOUR_MS, GpuHour::default());
        }
        for h in 0..3 {
            b.push("c", "n", "short", h * HOUR_MS, GpuHour::default());
        }
        let s = b.finish();
        assert_eq!((s[0].hours.len(), s[0].hours.capacity()), (169, 169));
        assert_eq!(s[1].hours.len(), 3);
        // A builder for no range still takes every row.
        let mut list = Vec::new();
        for i in 0..10 {
            push_within(&mut list, i, 0);
        }
        assert_eq!(list.len(), 10);
    }
}

/// One hour of what a team held and used of a pool (a cluster's GPUs of one model), in
/// GPU-equivalents: its tenants' hour rollups summed (the demand forecast reads these).
#[derive(Debug, Clone, PartialEq)]
pub struct UseHour {
    pub cluster: String,
    /// The GPUs' model (the pool).
    pub model: String,
    /// The tenants' team as recorded (`None`: no team).
    pub team: Option<String>,
    pub hour_ms: i64,
    /// GPU-hours allocated in the hour: the mean GPU-equivalents held.
    pub allocated: f64,
    /// GPU-hours of measured work in the hour.
    pub used: f64,
}
