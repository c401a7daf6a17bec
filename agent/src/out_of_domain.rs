//! What a driver answers that no batch may hold (docs/ingest.md, "Domains"): readings no GPU
//! can have — 4,294,967,295 °C, more memory in use than any GPU holds — and rows no snapshot
//! may hold — a pid of 2^32 − 1 from NVML structures of another version, a process listed twice,
//! two equal XID errors within one millisecond. The collector refuses a batch holding one, and
//! with it every other reading of the node in that batch — an hour of them after an outage — so
//! each snapshot has the readings cleared (sent as absent) and the rows dropped before it is
//! batched. Each (GPU, reading or list) is logged the first time;
//! `gpulens_agent_readings_out_of_domain_total` and `gpulens_agent_rows_dropped_total` count
//! every one. Tenants get the same ([`model::wire::v1::drop_impossible_tenants`]): a field that
//! is not text — an account a Slurm task rewrote in its environment, a user name holding an
//! escape — is cleared, a tenant whose key cannot be sent goes (its processes sent
//! unattributed); logged once per field, counted in
//! `gpulens_agent_tenant_values_taken_out_total`.

use std::collections::HashSet;

use model::Tenant;
use model::wire::v1::{Cleared, DroppedRow, Snapshot, TakenFromTenant};

/// What one snapshot had taken out.
#[derive(Debug, Default)]
pub struct TakenOut {
    pub cleared: Vec<Cleared>,
    pub dropped: Vec<DroppedRow>,
    pub tenants: Vec<TakenFromTenant>,
}

/// The (GPU, reading or list) pairs already logged, bounded by the node's GPUs times their
/// readings and lists; and the tenant fields (tenants come and go: once per field).
#[derive(Debug, Default)]
pub struct OutOfDomain {
    logged: HashSet<(String, String)>,
}

impl OutOfDomain {
    /// Drops the tenants and the snapshot's rows no batch may hold and clears their values
    /// outside their domains, logs each (GPU, reading or list; tenant field) the first time,
    /// and says what it took out.
    pub fn take_out(&mut self, snapshot: &mut Snapshot, tenants: &mut Vec<Tenant>) -> TakenOut {
        let taken_from_tenants =
            model::wire::v1::drop_impossible_tenants(tenants, std::slice::from_mut(snapshot));
        for t in &taken_from_tenants {
            if self
                .logged
                .insert((String::new(), format!("tenants.{}", t.field)))
            {
                tracing::warn!(
                    tenant = %t.tenant,
                    field = t.field,
                    why = %t.why,
                    "took out a tenant value no batch may hold (logged once per field)"
                );
            }
        }
        let dropped = snapshot.drop_impossible_rows();
        for d in &dropped {
            if self
                .logged
                .insert((d.gpu_uuid.clone(), format!("{} rows", d.rows)))
            {
                tracing::warn!(
                    gpu_uuid = %d.gpu_uuid,
                    rows = %d.rows,
                    why = %d.why,
                    "dropped a row no batch may hold (logged once per GPU and list)"
                );
            }
        }
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
        TakenOut {
            cleared,
            dropped,
            tenants: taken_from_tenants,
        }
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
            let taken = guard.take_out(&mut s, &mut Vec::new());
            metrics.count_taken_out(&taken);
            assert_eq!(s.gpus[0].temp_c, None);
            assert_eq!(s.gpus[0].power_w, Some(300.0));
        }
        // Two equal XID errors within one millisecond: one row goes.
        let mut storm = hot("GPU-1", 61.0);
        let xid = model::GpuEvent {
            gpu_uuid: "GPU-1".into(),
            ts: storm.ts,
            kind: "xid".into(),
            code: 13,
            message: None,
        };
        storm.events = vec![xid.clone(), xid];
        metrics.count_taken_out(&guard.take_out(&mut storm, &mut Vec::new()));
        assert_eq!(storm.events.len(), 1);
        let mut fine = hot("GPU-2", 61.0);
        assert!(
            guard
                .take_out(&mut fine, &mut Vec::new())
                .cleared
                .is_empty()
        );
        assert_eq!(fine.gpus[0].temp_c, Some(61.0));
        let text = metrics.encode();
        assert!(
            text.contains(
                "gpulens_agent_readings_out_of_domain_total{gpu_uuid=\"GPU-1\",reading=\"temp_c\"} 3"
            ),
            "{text}"
        );
        assert!(!text.contains("reading=\"power_w\""), "{text}");
        assert!(
            text.contains("gpulens_agent_rows_dropped_total{gpu_uuid=\"GPU-1\",rows=\"events\"} 1"),
            "{text}"
        );
        // A job's account a task rewrote into an escape sequence: cleared, counted by field.
        let mut job = model::Tenant::host_user(5001, Some("mkoch".into()));
        job.account = Some("physics\u{1b}[2J".into());
        for _ in 0..2 {
            let mut tenants = vec![job.clone()];
            metrics.count_taken_out(&guard.take_out(&mut hot("GPU-2", 61.0), &mut tenants));
            assert_eq!(tenants[0].account, None);
            assert_eq!(tenants[0].user.as_deref(), Some("mkoch"));
        }
        let text = metrics.encode();
        assert!(
            text.contains("gpulens_agent_tenant_values_taken_out_total{field=\"account\"} 2"),
            "{text}"
        );
        // Logged once per GPU and reading or list, or tenant field, however many cycles
        // repeat it.
        assert_eq!(guard.logged.len(), 3);
    }
}
