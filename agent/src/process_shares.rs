//! Each process's share of its GPU, and when to ask NVML for it. `nvmlDeviceGetProcessUtilization`
//! is the costliest per-second call the agent has: 2.4 ms of CPU on an H200 (driver
//! 580.159.04), as much when no process runs (it answers NOT_FOUND), against 3–30 µs for each
//! of the device's own readings (docs/gpu-checks/2026-12-04-h200-580.159.04.md). What it
//! answers is one sample per process: its mean share since the timestamp given — measured there
//! under a load 2 s on and 2 s off, samples since 4 s before read 50 % every time while reads
//! 250 ms apart swung between 0 and 99 %. So reading it less often loses no time, only
//! resolution, and the cycle asks it only where the answer is not known otherwise:
//! - **no process** on the GPU: nothing to share, no call;
//! - **one process**: its share is the device's utilization — both are the share of time a
//!   kernel ran, and with one process every kernel is its own — no call;
//! - **two or more**: a read every `every` (`--process-utilization-every`), and at once when a
//!   process appears or the last read cannot split what the device does now (nobody used it
//!   then, somebody does now). Between reads the device's own utilization, read every cycle,
//!   is split in the proportions the last read measured, so an idle GPU reads idle at once and
//!   the tenants' sums stay the device's.
//!
//! The first cycle with a process asks once whatever the count, so that a GPU whose driver
//! refuses per-process utilization (NOT_SUPPORTED: some GeForce boards) is known to: its shares
//! stay unknown, a lone process's too, rather than appear and vanish as processes come and go.
//! Every share is a ratio (0–1). MIG GPUs have no per-process utilization in NVML: the cycle
//! does not ask, and the shares are unknown.

use std::collections::{BTreeSet, HashMap};

use model::UnixMillis;

/// One process's share of the GPU's SM time, memory bandwidth, encoder and decoder.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Share {
    pub sm: f32,
    pub mem: f32,
    pub enc: Option<f32>,
    pub dec: Option<f32>,
}

/// The device's own utilization this cycle (None where the GPU cannot tell).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DeviceUse {
    pub gpu: Option<f32>,
    pub mem: Option<f32>,
    pub enc: Option<f32>,
    pub dec: Option<f32>,
}

impl DeviceUse {
    /// The device's use as its sample this cycle reads it.
    pub(crate) fn of(sample: &model::GpuSample) -> DeviceUse {
        DeviceUse {
            gpu: sample.gpu_util,
            mem: sample.mem_util,
            enc: sample.enc_util,
            dec: sample.dec_util,
        }
    }
}

/// What the cycle does about one GPU's per-process shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Ask NVML for the shares since its last answer.
    Read,
    /// Derive them: from the device's use (one process), or by splitting it as last measured.
    Derive,
    /// Unknown: the GPU's driver has no per-process utilization.
    Unknown,
}

/// The last answer of NVML's per-process utilization on one GPU.
#[derive(Debug, Default)]
pub(crate) struct ShareClock {
    read_at: Option<UnixMillis>,
    /// What the last read measured, by pid: a process it had no sample for ran no kernel.
    measured: HashMap<u32, Share>,
    /// The processes on the GPU at the last read.
    pids: BTreeSet<u32>,
    /// The driver answered that it has no per-process utilization for this GPU.
    unsupported: bool,
}

impl ShareClock {
    /// Whether the cycle at `ts`, with `pids` on the GPU and the device at `device`, reads
    /// the shares from NVML.
    pub(crate) fn plan(
        &self,
        ts: UnixMillis,
        pids: &BTreeSet<u32>,
        device: DeviceUse,
        every_ms: i64,
    ) -> Plan {
        if self.unsupported {
            return Plan::Unknown;
        }
        if pids.is_empty() {
            return Plan::Derive;
        }
        // Nothing to derive from (every cycle with a process asks), or never asked yet.
        let (Some(gpu), Some(at)) = (device.gpu, self.read_at) else {
            return Plan::Read;
        };
        if pids.len() == 1 {
            return Plan::Derive;
        }
        let due = ts < at || ts - at >= every_ms;
        let newcomer = !pids.is_subset(&self.pids);
        let unsplittable = gpu > 0.0 && self.measured(pids, |s| s.sm) <= 0.0;
        if due || newcomer || unsplittable {
            Plan::Read
        } else {
            Plan::Derive
        }
    }

    /// What a read at `ts`, with `pids` on the GPU and the device at `device`, answered
    /// (`samples`: pid → share since the read before), kept for the reads to come; the shares
    /// this cycle. No sample at all while the GPU is busy means the driver has not sampled since
    /// the last read (it does every ~1/6 s), not that nobody ran: the last proportions stand.
    pub(crate) fn answer(
        &mut self,
        ts: UnixMillis,
        pids: &BTreeSet<u32>,
        device: DeviceUse,
        samples: HashMap<u32, Share>,
    ) -> HashMap<u32, Share> {
        if samples.is_empty() && device.gpu.is_some_and(|u| u > 0.0) {
            self.no_news(ts, pids);
            return self.derive(pids, device);
        }
        self.record(ts, pids, samples.clone());
        samples
    }

    /// Keeps what a read at `ts` measured (`samples`: pid → share) for the `pids` on the GPU.
    fn record(&mut self, ts: UnixMillis, pids: &BTreeSet<u32>, samples: HashMap<u32, Share>) {
        self.read_at = Some(ts);
        self.pids = pids.clone();
        self.measured = samples;
    }

    /// A read at `ts` with `pids` on the GPU found no sample newer than the last one seen while
    /// the GPU was busy: the driver had not sampled since. What the last read measured stands.
    fn no_news(&mut self, ts: UnixMillis, pids: &BTreeSet<u32>) {
        self.read_at = Some(ts);
        self.pids = pids.clone();
    }

    /// The driver has no per-process utilization for this GPU: no more reads, shares unknown.
    pub(crate) fn unsupported(&mut self) {
        self.unsupported = true;
    }

    /// The shares of `pids` without a read: the device's use for a lone process, else the
    /// device's use split as the last read measured (a process it had no sample for: 0).
    pub(crate) fn derive(&self, pids: &BTreeSet<u32>, device: DeviceUse) -> HashMap<u32, Share> {
        if pids.len() == 1 {
            let pid = *pids.first().expect("one pid");
            let share = Share {
                sm: device.gpu.unwrap_or(0.0),
                mem: device.mem.unwrap_or(0.0),
                enc: device.enc,
                dec: device.dec,
            };
            return HashMap::from([(pid, share)]);
        }
        let (sm, mem) = (
            self.measured(pids, |s| s.sm),
            self.measured(pids, |s| s.mem),
        );
        let (enc, dec) = (
            self.measured(pids, |s| s.enc.unwrap_or(0.0)),
            self.measured(pids, |s| s.dec.unwrap_or(0.0)),
        );
        let split = |now: Option<f32>, part: f32, whole: f32| -> f32 {
            match now {
                Some(n) if whole > 0.0 => n * part / whole,
                Some(_) => 0.0,
                None => part,
            }
        };
        pids.iter()
            .filter_map(|p| self.measured.get(p).map(|m| (*p, m)))
            .map(|(pid, m)| {
                let share = Share {
                    sm: split(device.gpu, m.sm, sm),
                    mem: split(device.mem, m.mem, mem),
                    enc: m.enc.map(|e| split(device.enc, e, enc)),
                    dec: m.dec.map(|d| split(device.dec, d, dec)),
                };
                (pid, share)
            })
            .collect()
    }

    /// The sum of `part` over what the last read measured of `pids`.
    fn measured(&self, pids: &BTreeSet<u32>, part: fn(&Share) -> f32) -> f32 {
        pids.iter()
            .filter_map(|p| self.measured.get(p))
            .map(part)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pids(p: &[u32]) -> BTreeSet<u32> {
        p.iter().copied().collect()
    }

    fn busy(gpu: f32) -> DeviceUse {
        DeviceUse {
            gpu: Some(gpu),
            mem: Some(gpu / 2.0),
            enc: None,
            dec: Some(0.0),
        }
    }

    fn share(sm: f32) -> Share {
        Share {
            sm,
            mem: sm / 2.0,
            enc: None,
            dec: Some(0.0),
        }
    }

    #[test]
    fn no_process_or_one_never_asks_and_one_holds_the_whole_device() {
        let mut c = ShareClock::default();
        assert_eq!(c.plan(0, &pids(&[]), busy(0.0), 10_000), Plan::Derive);
        // The first process is asked about once, to learn whether the driver can tell.
        assert_eq!(c.plan(0, &pids(&[7]), busy(0.8), 10_000), Plan::Read);
        c.record(0, &pids(&[7]), HashMap::from([(7, share(0.8))]));
        assert_eq!(c.plan(60_000, &pids(&[7]), busy(0.8), 10_000), Plan::Derive);
        assert_eq!(c.derive(&pids(&[7]), busy(0.8))[&7], share(0.8));
        // Without the device's own utilization a running process is asked about every cycle.
        let blind = DeviceUse::default();
        assert_eq!(c.plan(0, &pids(&[7]), blind, 10_000), Plan::Read);
        assert_eq!(c.plan(0, &pids(&[]), blind, 10_000), Plan::Derive);
        // A driver without per-process utilization: unknown from then on, whatever the count.
        c.unsupported();
        assert_eq!(c.plan(0, &pids(&[7]), busy(0.8), 10_000), Plan::Unknown);
        assert_eq!(c.plan(0, &pids(&[7, 8]), busy(0.8), 10_000), Plan::Unknown);
    }

    #[test]
    fn shared_gpus_are_read_on_their_clock_and_when_a_process_appears() {
        let mut c = ShareClock::default();
        let two = pids(&[1, 2]);
        assert_eq!(c.plan(0, &two, busy(0.5), 10_000), Plan::Read);
        c.record(0, &two, HashMap::from([(1, share(0.3)), (2, share(0.1))]));
        assert_eq!(c.plan(9_000, &two, busy(0.5), 10_000), Plan::Derive);
        assert_eq!(c.plan(10_000, &two, busy(0.5), 10_000), Plan::Read);
        // A clock that went back reads again rather than trusting the future.
        assert_eq!(c.plan(-1, &two, busy(0.5), 10_000), Plan::Read);
        // A newcomer is read at once; a process leaving is not a reason.
        assert_eq!(
            c.plan(1_000, &pids(&[1, 2, 3]), busy(0.5), 10_000),
            Plan::Read
        );
        assert_eq!(c.plan(1_000, &pids(&[1]), busy(0.5), 10_000), Plan::Derive);
        // `every` 0: every cycle reads.
        assert_eq!(c.plan(1, &two, busy(0.5), 0), Plan::Read);
    }

    #[test]
    fn between_reads_the_devices_use_is_split_as_last_measured() {
        let mut c = ShareClock::default();
        let two = pids(&[1, 2]);
        c.record(0, &two, HashMap::from([(1, share(0.3)), (2, share(0.1))]));
        let now = c.derive(&two, busy(0.8));
        assert!((now[&1].sm - 0.6).abs() < 1e-6 && (now[&2].sm - 0.2).abs() < 1e-6);
        assert!((now[&1].mem - 0.3).abs() < 1e-6);
        assert_eq!((now[&1].enc, now[&1].dec), (None, Some(0.0)));
        // An idle device is idle for every process at once.
        assert!(c.derive(&two, busy(0.0)).values().all(|s| s.sm == 0.0));
        // A process gone leaves the rest to split the device.
        let three = pids(&[1, 2, 3]);
        c.record(
            0,
            &three,
            HashMap::from([(1, share(0.3)), (2, share(0.1)), (3, share(0.4))]),
        );
        assert!((c.derive(&two, busy(0.4))[&1].sm - 0.3).abs() < 1e-6);
        // A process the read had no sample for has no share until the next read.
        c.record(0, &two, HashMap::from([(1, share(0.3))]));
        let now = c.derive(&two, busy(0.5));
        assert!((now[&1].sm - 0.5).abs() < 1e-6 && !now.contains_key(&2));
    }

    #[test]
    fn a_read_with_no_news_keeps_the_last_proportions_until_the_next_is_due() {
        let mut c = ShareClock::default();
        let two = pids(&[1, 2]);
        c.record(0, &two, HashMap::from([(1, share(0.3)), (2, share(0.1))]));
        c.no_news(10_000, &two);
        assert_eq!(c.plan(11_000, &two, busy(0.8), 10_000), Plan::Derive);
        assert!((c.derive(&two, busy(0.8))[&1].sm - 0.6).abs() < 1e-6);
        assert_eq!(c.plan(20_000, &two, busy(0.8), 10_000), Plan::Read);
    }

    #[test]
    fn use_the_last_read_cannot_split_is_read_at_once() {
        let mut c = ShareClock::default();
        let two = pids(&[1, 2]);
        c.record(0, &two, HashMap::new());
        assert_eq!(c.plan(1_000, &two, busy(0.0), 10_000), Plan::Derive);
        assert_eq!(c.plan(1_000, &two, busy(0.7), 10_000), Plan::Read);
    }
}
