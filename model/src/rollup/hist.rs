//! [`Hist`]: the fixed histogram rollups keep of a ratio, from which quantiles are read.

/// Bins of a histogram, each 0.05 wide.
pub const HIST_BINS: usize = 20;

/// A fixed histogram of ratios in [0, 1].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hist(pub [u32; HIST_BINS]);

impl Hist {
    pub fn add(&mut self, v: f32) {
        let bin = ((f64::from(v) * HIST_BINS as f64) as usize).min(HIST_BINS - 1);
        self.0[bin] += 1;
    }

    pub fn merge(&mut self, other: &Hist) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    pub fn count(&self) -> u64 {
        self.0.iter().map(|&c| u64::from(c)).sum()
    }

    /// The q-quantile: the midpoint of the bin holding it, capped by the known maximum.
    pub fn quantile(&self, q: f64, max: Option<f32>) -> Option<f32> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = (q * n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.0.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let mid = (i as f32 + 0.5) / HIST_BINS as f32;
                return Some(match max {
                    Some(m) => mid.min(m),
                    None => mid,
                });
            }
        }
        max
    }

    /// What a rollup row stores: the counts, or NULL for an empty histogram.
    pub fn to_stored(&self) -> Option<Vec<u8>> {
        (self.count() > 0).then(|| self.to_bytes())
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|c| c.to_le_bytes()).collect()
    }

    /// Reads a histogram back; anything of the wrong length reads as empty.
    pub fn from_bytes(b: &[u8]) -> Hist {
        let mut h = Hist::default();
        if b.len() == HIST_BINS * 4 {
            for (i, chunk) in b.chunks_exact(4).enumerate() {
                h.0[i] = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
            }
        }
        h
    }
}
