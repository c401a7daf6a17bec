//! The DCGM profiling ratios gpulens carries, declared once in [`RATIOS`]: each one's wire and
//! column name, dcgm-exporter field, title, how its rollups keep it and where it lives in a GPU
//! and a MIG sample. The wire's validation, the dcgm-exporter mapping, the agent's merge, the
//! raw columns, the rollup arithmetic and columns, the series and the node page all read this
//! table, so a new ratio is a member of [`Ratio`], its row here, its field in
//! [`GpuSample`] and [`MigSample`], and the migrations that add its columns (ARCHITECTURE.md
//! counts them).

use std::sync::LazyLock;

use crate::{GpuSample, MigSample};

/// A DCGM profiling ratio (0–1). Its members are in [`RATIOS`] order (a test checks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ratio {
    SmActive,
    SmOccupancy,
    DramActive,
    TensorActive,
    GrEngineActive,
    /// A stand-in ratio that exists only to show what adding one takes (`store`'s
    /// `dummy_field` test).
    #[cfg(feature = "dummy-field")]
    DummyActive,
}

/// What a ratio's rollups keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollup {
    /// The count and sum of its readings: `<name>_n`, `<name>_sum`.
    Mean,
    /// Those, its peak and its histogram (`<name>_max`, `<name>_hist`): for the reading the
    /// effective use rests on.
    Distribution,
}

/// Where a ratio lives in a sample: a read and a write of the same field.
#[derive(Clone, Copy)]
pub struct Place<S> {
    pub get: fn(&S) -> Option<f32>,
    pub set: fn(&mut S) -> &mut Option<f32>,
}

/// One profiling ratio, declared.
pub struct RatioSpec {
    pub ratio: Ratio,
    /// Its name on the wire, in raw columns, in series queries; rollup columns add `_n`,
    /// `_sum` (and `_max`, `_hist`).
    pub name: &'static str,
    /// The dcgm-exporter series that reports it.
    pub dcgm: &'static str,
    /// What the dashboard calls it.
    pub title: &'static str,
    pub rollup: Rollup,
    pub gpu: Place<GpuSample>,
    pub mig: Place<MigSample>,
}

/// Every profiling ratio, in [`Ratio`] order.
pub const RATIOS: &[RatioSpec] = &[
    RatioSpec {
        ratio: Ratio::SmActive,
        name: "sm_active",
        dcgm: "DCGM_FI_PROF_SM_ACTIVE",
        title: "SM activity",
        rollup: Rollup::Distribution,
        gpu: Place {
            get: |g| g.sm_active,
            set: |g| &mut g.sm_active,
        },
        mig: Place {
            get: |m| m.sm_active,
            set: |m| &mut m.sm_active,
        },
    },
    RatioSpec {
        ratio: Ratio::SmOccupancy,
        name: "sm_occupancy",
        dcgm: "DCGM_FI_PROF_SM_OCCUPANCY",
        title: "SM occupancy",
        rollup: Rollup::Mean,
        gpu: Place {
            get: |g| g.sm_occupancy,
            set: |g| &mut g.sm_occupancy,
        },
        mig: Place {
            get: |m| m.sm_occupancy,
            set: |m| &mut m.sm_occupancy,
        },
    },
    RatioSpec {
        ratio: Ratio::DramActive,
        name: "dram_active",
        dcgm: "DCGM_FI_PROF_DRAM_ACTIVE",
        title: "DRAM activity",
        rollup: Rollup::Mean,
        gpu: Place {
            get: |g| g.dram_active,
            set: |g| &mut g.dram_active,
        },
        mig: Place {
            get: |m| m.dram_active,
            set: |m| &mut m.dram_active,
        },
    },
    RatioSpec {
        ratio: Ratio::TensorActive,
        name: "tensor_active",
        dcgm: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        title: "tensor pipe activity",
        rollup: Rollup::Mean,
        gpu: Place {
            get: |g| g.tensor_active,
            set: |g| &mut g.tensor_active,
        },
        mig: Place {
            get: |m| m.tensor_active,
            set: |m| &mut m.tensor_active,
        },
    },
    RatioSpec {
        ratio: Ratio::GrEngineActive,
        name: "gr_engine_active",
        dcgm: "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        title: "graphics engine activity",
        rollup: Rollup::Mean,
        gpu: Place {
            get: |g| g.gr_engine_active,
            set: |g| &mut g.gr_engine_active,
        },
        mig: Place {
            get: |m| m.gr_engine_active,
            set: |m| &mut m.gr_engine_active,
        },
    },
    #[cfg(feature = "dummy-field")]
    RatioSpec {
        ratio: Ratio::DummyActive,
        name: "dummy_active",
        dcgm: "DCGM_FI_PROF_DUMMY_ACTIVE",
        title: "dummy activity",
        rollup: Rollup::Mean,
        gpu: Place {
            get: |g| g.dummy_active,
            set: |g| &mut g.dummy_active,
        },
        mig: Place {
            get: |m| m.dummy_active,
            set: |m| &mut m.dummy_active,
        },
    },
];

/// How many profiling ratios there are.
pub const COUNT: usize = RATIOS.len();

/// Profiling ratios may come out a hair above 1 from DCGM's float arithmetic; readers clamp
/// them to 1 after the check.
pub const RATIO_SLACK: f64 = 1.0001;

impl Ratio {
    /// Every ratio, in declaration order.
    pub fn all() -> impl Iterator<Item = Ratio> {
        RATIOS.iter().map(|s| s.ratio)
    }

    pub fn spec(self) -> &'static RatioSpec {
        &RATIOS[self as usize]
    }

    /// Its wire and column name.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The ratio named `name` on the wire; None for any other name.
    pub fn parse(name: &str) -> Option<Ratio> {
        RATIOS.iter().find(|s| s.name == name).map(|s| s.ratio)
    }

    /// The ratio dcgm-exporter reports as `series`; None for any other series.
    pub fn of_dcgm(series: &str) -> Option<Ratio> {
        RATIOS.iter().find(|s| s.dcgm == series).map(|s| s.ratio)
    }

    /// Its index in [`RATIOS`] and in every per-ratio array.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its columns in the GPU and cluster rollup tables.
    pub fn rollup_columns(self) -> &'static RollupColumns {
        static COLUMNS: LazyLock<Vec<RollupColumns>> =
            LazyLock::new(|| RATIOS.iter().map(RollupColumns::of).collect());
        &COLUMNS[self.index()]
    }
}

/// A ratio's rollup columns: `<name>_n` and `<name>_sum`, and for a [`Rollup::Distribution`]
/// `<name>_max` and `<name>_hist`.
#[derive(Debug)]
pub struct RollupColumns {
    pub n: &'static str,
    pub sum: &'static str,
    pub max: Option<&'static str>,
    pub hist: Option<&'static str>,
}

impl RollupColumns {
    /// Made once per ratio (the names live as long as the program).
    fn of(spec: &RatioSpec) -> RollupColumns {
        let col = |suffix: &str| -> &'static str {
            Box::leak(format!("{}_{suffix}", spec.name).into_boxed_str())
        };
        let distribution = spec.rollup == Rollup::Distribution;
        RollupColumns {
            n: col("n"),
            sum: col("sum"),
            max: distribution.then(|| col("max")),
            hist: distribution.then(|| col("hist")),
        }
    }
}

/// One value per profiling ratio, indexed by [`Ratio`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerRatio<T>(pub [T; COUNT]);

impl<T: Default> Default for PerRatio<T> {
    fn default() -> Self {
        PerRatio(std::array::from_fn(|_| T::default()))
    }
}

impl<T> PerRatio<T> {
    pub fn get(&self, r: Ratio) -> &T {
        &self.0[r.index()]
    }

    pub fn get_mut(&mut self, r: Ratio) -> &mut T {
        &mut self.0[r.index()]
    }

    /// Each ratio with its value.
    pub fn iter(&self) -> impl Iterator<Item = (&'static RatioSpec, &T)> {
        RATIOS.iter().zip(self.0.iter())
    }
}

/// Every ratio of one GPU sample.
pub fn of_gpu(g: &GpuSample) -> PerRatio<Option<f32>> {
    PerRatio(std::array::from_fn(|i| (RATIOS[i].gpu.get)(g)))
}

/// Every ratio of one MIG sample.
pub fn of_mig(m: &MigSample) -> PerRatio<Option<f32>> {
    PerRatio(std::array::from_fn(|i| (RATIOS[i].mig.get)(m)))
}

impl PerRatio<Option<f32>> {
    /// Fills what a GPU sample lacks from these ratios (a reading the sample has wins).
    pub fn fill_gpu(&self, g: &mut GpuSample) {
        for (spec, v) in self.iter() {
            let slot = (spec.gpu.set)(g);
            *slot = slot.or(*v);
        }
    }

    /// Fills what a MIG sample lacks from these ratios.
    pub fn fill_mig(&self, m: &mut MigSample) {
        for (spec, v) in self.iter() {
            let slot = (spec.mig.set)(m);
            *slot = slot.or(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_enum_and_names_are_distinct() {
        for (i, s) in RATIOS.iter().enumerate() {
            assert_eq!(s.ratio.index(), i, "{} out of order", s.name);
            assert_eq!(Ratio::parse(s.name), Some(s.ratio));
            assert_eq!(Ratio::of_dcgm(s.dcgm), Some(s.ratio));
            assert!(s.dcgm.starts_with("DCGM_FI_PROF_"), "{}", s.dcgm);
        }
        let mut names: Vec<_> = RATIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNT);
    }

    #[test]
    fn each_place_reads_and_writes_its_own_field() {
        for (i, s) in RATIOS.iter().enumerate() {
            let (mut g, mut m) = (GpuSample::default(), MigSample::default());
            *(s.gpu.set)(&mut g) = Some(i as f32 / 10.0);
            *(s.mig.set)(&mut m) = Some(i as f32 / 10.0);
            let (gs, ms) = (of_gpu(&g), of_mig(&m));
            for r in Ratio::all() {
                let want = (r == s.ratio).then_some(i as f32 / 10.0);
                assert_eq!((*gs.get(r), *ms.get(r)), (want, want), "{}", s.name);
            }
        }
    }

    #[test]
    fn filling_keeps_what_the_sample_has() {
        let mut g = GpuSample {
            sm_active: Some(0.5),
            ..GpuSample::default()
        };
        let mut from = PerRatio::<Option<f32>>::default();
        *from.get_mut(Ratio::SmActive) = Some(0.9);
        *from.get_mut(Ratio::DramActive) = Some(0.3);
        from.fill_gpu(&mut g);
        assert_eq!((g.sm_active, g.dram_active), (Some(0.5), Some(0.3)));
    }
}
