//! Hour rollups as the analysis holds them: a series per GPU and per (tenant, GPU), the names
//! once and the hours after. The store builds them from its rollup tables; the analytics reads
//! them. A GPU's hour is kept lean ([`GpuHour`]): a week of a 10,000-GPU fleet is 1.7 million
//! of them.

use crate::rollup::TenantAgg;

/// What the analysis reads of a GPU's hour rollup: [`crate::rollup::GpuAgg`] without the fields no finding
/// uses (the histograms, SM, tensor and power sums), a quarter of its size.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuHour {
    pub samples: i32,
    pub gpu_util_n: i32,
    pub dram_active_n: i32,
    /// Samples with a throttle reason other than "idle".
    pub throttled_n: i32,
    pub covered_s: f64,
    pub gpu_util_sum: f64,
    pub dram_active_sum: f64,
    /// Sum over samples of the allocated share of the GPU (capped at 1 per sample).
    pub alloc_share_sum: f64,
    pub mem_used_max: Option<i64>,
    pub mem_total_max: Option<i64>,
    pub gpu_util_max: Option<f32>,
    pub power_max: Option<f32>,
    pub temp_max: Option<f32>,
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

/// One tenant's hour rollups on one GPU over a range, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSeries {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub tenant: String,
    /// (hour start, the hour's rollup), in time order.
    pub hours: Vec<(i64, TenantAgg)>,
}

/// Series of one kind being filled from rows that arrive in any order: rows of a key go to
/// its series (found by the key's text), and [`SeriesBuilder::finish`] puts the series in key
/// order and each one's hours in time order.
#[derive(Debug)]
pub struct SeriesBuilder<S> {
    index: std::collections::HashMap<String, usize>,
    key: String,
    series: Vec<S>,
}

impl<S> Default for SeriesBuilder<S> {
    fn default() -> Self {
        SeriesBuilder {
            index: Default::default(),
            key: String::new(),
            series: Vec::new(),
        }
    }
}

impl<S> SeriesBuilder<S> {
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
        let s = self.series(&[cluster, node, gpu], || GpuSeries {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            gpu: gpu.to_owned(),
            hours: Vec::new(),
        });
        s.hours.push((hour, agg));
    }
}

impl SeriesBuilder<TenantSeries> {
    /// Adds one tenant-hour.
    pub fn push(&mut self, [cluster, node, gpu, tenant]: [&str; 4], hour: i64, agg: TenantAgg) {
        let s = self.series(&[cluster, node, gpu, tenant], || TenantSeries {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            gpu: gpu.to_owned(),
            tenant: tenant.to_owned(),
            hours: Vec::new(),
        });
        s.hours.push((hour, agg));
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
    use crate::rollup::HOUR_MS;

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
}
