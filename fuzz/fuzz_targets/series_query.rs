//! The series query's times and step: any text for `from`, `to` and `step` (split on `&`).
//! Invariants: nothing panics; accepted times lie in 1970..=9999; accepted steps are positive
//! and bounded; the point count of any accepted range is computed without overflow.
#![no_main]

use intake::query::{MAX_STEP_MS, MAX_TIME_MS, parse_step, parse_time, points};
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_800_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '&');
    let (from, to, step) = (parts.next(), parts.next(), parts.next());
    let from = from.map(|f| parse_time(f, NOW));
    let to = to.map(|t| parse_time(t, NOW));
    let step = step.map(parse_step);
    for t in [&from, &to].into_iter().flatten() {
        if let Ok(ms) = t {
            assert!((0..=MAX_TIME_MS).contains(ms));
        }
    }
    if let Some(Ok(s)) = step {
        assert!(s > 0 && s <= MAX_STEP_MS);
        if let (Some(Ok(f)), Some(Ok(t))) = (from, to) {
            let n = points(f.min(t), f.max(t), s);
            assert!(n.is_some_and(|n| n >= 1));
        }
    }
});
