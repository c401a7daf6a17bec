//! [`RatioAgg`]: one DCGM profiling ratio over one bucket, kept as its declaration says
//! ([`crate::profiling::Rollup`]).

use super::hist::Hist;
use super::stat::max_opt;
use crate::profiling::Rollup;

/// A profiling ratio over one bucket: how many samples had it and their sum, and for a
/// [`Rollup::Distribution`] ratio also its peak and histogram (which stay empty otherwise, as
/// the rollup tables have no columns for them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RatioAgg {
    pub n: i32,
    pub sum: f64,
    pub max: Option<f32>,
    pub hist: Hist,
}

impl RatioAgg {
    pub fn add(&mut self, v: f32, rollup: Rollup) {
        self.n += 1;
        self.sum += f64::from(v);
        if rollup == Rollup::Distribution {
            self.max = max_opt(self.max, Some(v));
            self.hist.add(v);
        }
    }

    pub fn merge(&mut self, o: &RatioAgg) {
        self.n += o.n;
        self.sum += o.sum;
        self.max = max_opt(self.max, o.max);
        self.hist.merge(&o.hist);
    }

    /// The mean over the samples that had the ratio; `None` when none had it.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_distribution_keeps_its_peak_and_histogram() {
        let (mut mean, mut dist) = (RatioAgg::default(), RatioAgg::default());
        for v in [0.2, 0.8] {
            mean.add(v, Rollup::Mean);
            dist.add(v, Rollup::Distribution);
        }
        assert_eq!((mean.n, mean.max, mean.hist.count()), (2, None, 0));
        assert_eq!((dist.n, dist.max, dist.hist.count()), (2, Some(0.8), 2));
        let mut merged = dist.clone();
        merged.merge(&dist);
        assert_eq!((merged.n, merged.hist.count()), (4, 4));
        assert!((merged.mean().unwrap() - 0.5).abs() < 1e-6);
    }
}
