//! Waiting between attempts, once for every sender of gpulens (agents, `gpulens simulate`,
//! alert delivery): each wait doubles up to a cap, jittered so that clients which failed
//! together do not come back together, and never shorter than the server's `Retry-After`.

use std::time::Duration;

/// The waits of one sender between failed attempts.
#[derive(Debug, Clone)]
pub struct Delays {
    initial: Duration,
    max: Duration,
    delay: Duration,
    state: u64,
}

impl Delays {
    /// Waits from `initial`, doubling up to `max`; `seed` tells this sender's jitter apart
    /// from others' (a sequence number, a process id).
    pub fn new(initial: Duration, max: Duration, seed: u64) -> Delays {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
        Delays {
            initial,
            max,
            delay: initial,
            state: (seed ^ nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1,
        }
    }

    /// The wait before the next attempt: between half and all of the current delay, at least
    /// `retry_after`; the delay then doubles, up to the cap.
    pub fn next(&mut self, retry_after: Option<Duration>) -> Duration {
        let jittered = self.delay.mul_f64(0.5 + 0.5 * self.unit());
        self.delay = (self.delay * 2).min(self.max);
        retry_after.map_or(jittered, |r| r.max(jittered))
    }

    /// After a success: the next failure waits the initial delay again.
    pub fn reset(&mut self) {
        self.delay = self.initial;
    }

    /// A number in [0, 1) (xorshift; no RNG dependency needed).
    fn unit(&mut self) -> f64 {
        let mut z = self.state;
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        self.state = z;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The wait after `failures` failed attempts when the count is all that is kept (the alert
/// outbox stores attempts, not a sender): `base` doubled per failure, up to `cap`.
pub fn doubled(base: Duration, failures: u32, cap: Duration) -> Duration {
    base.saturating_mul(1u32 << failures.min(20)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_the_cap_with_jitter_and_honour_retry_after() {
        let ms = Duration::from_millis;
        let mut d = Delays::new(ms(200), ms(1000), 7);
        let waits: Vec<Duration> = (0..5).map(|_| d.next(None)).collect();
        for (w, full) in waits.iter().zip([200, 400, 800, 1000, 1000]) {
            assert!(*w >= ms(full / 2) && *w <= ms(full), "{waits:?}");
        }
        assert_eq!(d.next(Some(ms(5000))), ms(5000));
        d.reset();
        assert!(d.next(None) <= ms(200));
        // Two senders seeded apart do not wait alike.
        let (mut a, mut b) = (
            Delays::new(ms(1000), ms(1000), 1),
            Delays::new(ms(1000), ms(1000), 2),
        );
        assert!((0..8).any(|_| a.next(None) != b.next(None)));
        assert_eq!(
            doubled(Duration::from_secs(1), 3, Duration::from_secs(60)),
            Duration::from_secs(8)
        );
        assert_eq!(
            doubled(Duration::from_secs(1), 40, Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }
}
