//! Held-out replay on every scenario — each step carries its twin's result, the plan
//! its score — and the verdicts `tests/scenarios/weekly-batch.toml` works out; the days ahead
//! (`analytics::ahead`) on every scenario, and what `tests/scenarios/memory-growth.toml` works
//! out: a step held-out replay passes that the cache's growing memory outgrows.

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
    days_ahead_as_worked_out(label, a);
}

/// Every step's look ahead is consistent; memory-growth's step is flagged as its comment works
/// out.
fn days_ahead_as_worked_out(label: &str, a: &analytics::Analysis) {
    for r in &a.recommendations {
        let reclaim = matches!(r.proposal, Proposal::Reclaim { .. });
        assert_eq!(r.ahead.is_none(), reclaim, "{label}: {}", r.id);
        if let Some(x) = &r.ahead {
            assert_eq!(
                x.growing.is_empty(),
                !x.why.contains("although memory grows") && x.outgrown_in_days.is_none(),
                "{label}: {x:?}"
            );
            assert!(x.worth_gpu_hours >= 0.0);
            assert!(x.worth_gpu_hours <= r.replay.gpus_freed.max(0.0) * x.days * 24.0 + 1e-6);
            assert!(
                x.outgrown_in_days
                    .is_none_or(|d| (0.0..x.days).contains(&d))
            );
        }
    }
    if label.ends_with("memory-growth.toml") {
        assert_eq!(a.plan.gpus_freed, 1, "{label}");
        assert_eq!(a.recommendations.len(), 1, "{label}");
        let r = &a.recommendations[0];
        let h = r.held_out.as_ref().unwrap();
        assert_eq!(h.verdict, Verdict::Held, "{label}: {h:?}");
        let x = r
            .ahead
            .as_ref()
            .unwrap_or_else(|| panic!("{label}: the step has no look ahead"));
        let days = x
            .outgrown_in_days
            .unwrap_or_else(|| panic!("{label}: {x:?}"));
        assert!(
            (1.5..3.0).contains(&days),
            "{label}: outgrown in {days:.2} days"
        );
        assert_eq!(x.growing.len(), 1, "{label}: {x:?}");
        assert!((3.0..5.0).contains(&x.growing[0].1), "{label}: {x:?}");
        assert!(x.why.starts_with("outgrown in"), "{label}: {}", x.why);
        assert!(r.confidence <= 0.5, "{label}: {}", r.confidence);
    }
}
