//! What the label work counts: advisory label writes by outcome, GPU Operator changes planned,
//! and approved changes run, by how they ended.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// Advisory writes: `written` or `failed`. Changes run: the action's final state
    /// (`applied`, `unchanged`, `refused`, `rolled_back`, `failed`).
    pub outcome: &'static str,
}

model::metric_set! {
    pub struct LabelMetrics {
        advisory_writes: Family<OutcomeLabels, Counter> => "label_advisory_writes",
            "Nodes whose gpulens.io/ advisory labels were converged after an analysis, by outcome (written, failed)";
        planned: Counter => "label_actions_planned",
            "GPU Operator changes recorded as planned actions (apply-with-approval)";
        runs: Family<OutcomeLabels, Counter> => "label_action_runs",
            "Approved GPU Operator changes run, by final state (applied, unchanged, refused, rolled_back, failed)";
    }
}

impl LabelMetrics {
    /// One node's advisory labels converged (or not).
    pub fn advisory_write(&self, written: bool) {
        let outcome = if written { "written" } else { "failed" };
        self.advisory_writes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// An approved change ran and ended in `state`.
    pub fn run(&self, state: &'static str) {
        self.runs
            .get_or_create(&OutcomeLabels { outcome: state })
            .inc();
    }
}
