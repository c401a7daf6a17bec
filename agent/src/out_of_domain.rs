//! Readings a driver answered outside the wire protocol's domains (docs/ingest.md, "Domains"):
//! a GPU in trouble reports 4,294,967,295 °C, or more memory in use than any GPU has. The
//! collector refuses a batch holding one, and with it every other reading of the node in that
//! batch — an hour of them after an outage — so each snapshot has them cleared (sent as
//! absent) before it is batched. Each (GPU, reading) is logged the first time;
//! `gpulens_agent_readings_out_of_domain_total` counts every one.

use std::collections::HashSet;

use model::wire::v1::{Cleared, Snapshot};

/// The (GPU, reading) pairs already logged; bounded by the node's GPUs times their readings.
#[derive(Debug, Default)]
pub struct OutOfDomain {
    logged: HashSet<(String, String)>,
}

impl OutOfDomain {
    /// Clears the snapshot's readings outside their domains, logs each (GPU, reading) the
    /// first time, and says what it cleared.
    pub fn clear(&mut self, snapshot: &mut Snapshot) -> Vec<Cleared> {
        let cleared = snapshot.clear_out_of_domain();
        for c in &cleared {
            if self.logged.insert((c.gpu_uuid.clone(), c.reading.clone())) {
                tracing::warn!(
                    gpu_uuid = %c.gpu_uuid,
                    reading = %c.reading,
                    value = %c.value,
                    "the GPU reported a value this reading cannot have; sent as absent (logged once per GPU and reading)"
                );
            }
        }
        cleared
    }
}

#[cfg(test)]
mod tests {
    use model::GpuSample;

    use super::*;
    use crate::metrics::AgentMetrics;

    fn hot(uuid: &str, temp_c: f32) -> Snapshot {
        Snapshot {
            ts: 1_800_000_000_000,
            gpus: vec![GpuSample {
                gpu_uuid: uuid.into(),
                temp_c: Some(temp_c),
                power_w: Some(300.0),
                ..GpuSample::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn each_cycle_is_cleared_and_counted_and_the_gpu_named() {
        let metrics = AgentMetrics::new();
        let mut guard = OutOfDomain::default();
        for _ in 0..3 {
            let mut s = hot("GPU-1", 4_294_967_300.0);
            let cleared = guard.clear(&mut s);
            metrics.count_out_of_domain(&cleared);
            assert_eq!(s.gpus[0].temp_c, None);
            assert_eq!(s.gpus[0].power_w, Some(300.0));
        }
        let mut fine = hot("GPU-2", 61.0);
        assert!(guard.clear(&mut fine).is_empty());
        assert_eq!(fine.gpus[0].temp_c, Some(61.0));
        let text = metrics.encode();
        assert!(
            text.contains(
                "gpulens_agent_readings_out_of_domain_total{gpu_uuid=\"GPU-1\",reading=\"temp_c\"} 3"
            ),
            "{text}"
        );
        assert!(!text.contains("reading=\"power_w\""), "{text}");
        // Logged once per GPU and reading, however many cycles repeat it.
        assert_eq!(guard.logged.len(), 1);
    }
}
