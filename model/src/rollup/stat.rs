//! The two shapes every per-sample reading of a rollup takes: a [`Mean`] (how many samples had
//! the reading and their sum) and a [`Stat`] (the same with the peak). Both merge exactly, which
//! is what lets minute rows become hour rows and hours chain into any range.

/// Count and sum of a reading over the samples that had it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mean {
    pub n: i32,
    pub sum: f64,
}

impl Mean {
    pub fn add(&mut self, v: f64) {
        self.n += 1;
        self.sum += v;
    }

    pub fn merge(&mut self, o: &Mean) {
        self.n += o.n;
        self.sum += o.sum;
    }

    /// The mean over the samples that had the reading; `None` when none had it.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// A reading that can be summed and compared: the value types of rollup columns.
pub trait Reading: Copy + PartialOrd {
    fn as_f64(self) -> f64;
}

impl Reading for f32 {
    fn as_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Reading for i64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

/// Count, sum and peak of a reading over the samples that had it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stat<T> {
    pub n: i32,
    pub sum: f64,
    pub max: Option<T>,
}

impl<T: Reading> Stat<T> {
    pub fn add(&mut self, v: T) {
        self.n += 1;
        self.sum += v.as_f64();
        self.max = max_opt(self.max, Some(v));
    }

    pub fn merge(&mut self, o: &Stat<T>) {
        self.n += o.n;
        self.sum += o.sum;
        self.max = max_opt(self.max, o.max);
    }

    /// [`Mean::mean`] of the count and sum.
    pub fn mean(&self) -> Option<f64> {
        Mean {
            n: self.n,
            sum: self.sum,
        }
        .mean()
    }
}

/// The larger of two optional values; either alone when the other is missing.
pub(crate) fn max_opt<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y > x { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_equals_adding_everything_to_one() {
        let (a, b) = ([0.2f32, 0.9, 0.4], [0.7f32, 0.1]);
        let mut all = Stat::default();
        a.iter().chain(&b).for_each(|v| all.add(*v));
        let (mut left, mut right) = (Stat::default(), Stat::default());
        a.iter().for_each(|v| left.add(*v));
        b.iter().for_each(|v| right.add(*v));
        left.merge(&right);
        assert_eq!((left.n, left.max), (5, Some(0.9)));
        assert!((left.sum - all.sum).abs() < 1e-9);
        assert!((left.mean().unwrap() - 2.3 / 5.0).abs() < 1e-6);
        let mut m = Mean::default();
        m.merge(&Mean { n: 2, sum: 3.0 });
        m.add(1.0);
        assert_eq!(m.mean(), Some(4.0 / 3.0));
    }

    #[test]
    fn nothing_recorded_has_no_mean_and_no_peak() {
        let mut s = Stat::<i64>::default();
        assert_eq!((s.mean(), s.max), (None, None));
        s.merge(&Stat::default());
        assert_eq!((s.n, s.mean(), s.max), (0, None, None));
        assert_eq!(Mean::default().mean(), None);
    }
}
