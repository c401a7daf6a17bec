//! Issue 75: held-out replay on every scenario — each step carries its twin's result, the plan
//! its score — and the verdicts `tests/scenarios/weekly-batch.toml` works out.

use analytics::held_out::Verdict;
use analytics::{Proposal, RecKind};

/// Every scenario's window (two days) is long enough for a day held out: the plan has a score,
/// each step a result, and the score counts what its results say.
pub(crate) fn every_step_is_tested_on_the_day_it_did_not_see(label: &str, a: &analytics::Analysis) {
    let score = a
        .plan
        .held_out
        .as_ref()
        .unwrap_or_else(|| panic!("{label}: no held-out score"));
    assert_eq!(score.note, None, "{label}");
    assert_eq!(score.to_ms - score.split_ms, 24 * 3_600_000, "{label}");
    assert!(score.steps_held <= score.steps && score.gpus_held <= score.gpus_freed + 1e-9);
    for r in &a.recommendations {
        let h = r
            .held_out
            .as_ref()
            .unwrap_or_else(|| panic!("{label}: {} has no held-out result", r.id));
        assert!(!h.why.is_empty(), "{label}");
        assert!((0.0..=1.0).contains(&r.confidence), "{label}");
        if h.verdict == Verdict::Failed {
            assert!(
                h.working_again || h.memory_overflow_hours > 0.0 || h.contention_hours_added > 0.0,
                "{label}: {} failed without a reason: {h:?}",
                r.id
            );
        }
    }
    if label.ends_with("weekly-batch.toml") {
        // The plan from Thursday reclaims the report pod; on Friday it worked.
        assert_eq!(
            (score.steps, score.steps_held),
            (1, 0),
            "{label}: {score:?}"
        );
        assert_eq!(score.steps_ratio(), Some(0.0), "{label}");
        // Today's plan sees Friday: no reclaim.
        assert!(
            a.recommendations
                .iter()
                .all(|r| r.kind != RecKind::Reclaim
                    && !matches!(r.proposal, Proposal::Reclaim { .. })),
            "{label}: {:?}",
            a.recommendations
                .iter()
                .map(|r| &r.summary)
                .collect::<Vec<_>>()
        );
    }
}
