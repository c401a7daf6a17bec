//! Query-string times and steps, parsed into checked domains before any arithmetic.

pub use model::time::{MAX_STEP_MS, MAX_TIME_MS};

/// A time of the query domain: RFC 3339, Unix ms, `now` or `now-DURATION`, within
/// 1970-01-01 to 9999-12-31 ([`MAX_TIME_MS`]); anything else is an error naming the value.
pub fn parse_time(s: &str, now: i64) -> Result<i64, String> {
    let out_of_domain =
        || format!("time {s:?} is outside 1970-01-01 to 9999-12-31 (Unix ms 0 to {MAX_TIME_MS})");
    if s.is_empty() {
        return Err(
            "time \"\" is empty; give RFC 3339, Unix milliseconds, `now` or `now-7d`".into(),
        );
    }
    let relative = s.strip_prefix("now").unwrap_or(s);
    let ms = if relative.is_empty() {
        now
    } else if let Some(ago) = relative.strip_prefix('-') {
        let d = model::time::parse_duration(ago).map_err(|e| format!("time {s:?}: {e}"))?;
        i64::try_from(d.as_millis())
            .ok()
            .and_then(|d| now.checked_sub(d))
            .ok_or_else(out_of_domain)?
    } else if let Ok(ms) = s.parse::<i64>() {
        ms
    } else {
        model::time::parse_rfc3339(s).ok_or_else(|| {
            format!("time {s:?} is not RFC 3339, Unix milliseconds, `now` or `now-7d`")
        })?
    };
    if (0..=MAX_TIME_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(out_of_domain())
    }
}

/// A step: seconds (`60`, `0.5`) or a duration (`5m`, `1h`), positive and at most
/// [`MAX_STEP_MS`]; `inf`, `NaN`, `1e300` and the like are refused, not saturated.
pub fn parse_step(s: &str) -> Result<i64, String> {
    let ms = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs * 1000.0 <= MAX_STEP_MS as f64 => {
            Some((secs * 1000.0).ceil() as i64)
        }
        Ok(_) => None,
        Err(_) => model::time::parse_duration(s)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .filter(|&ms| ms > 0 && ms <= MAX_STEP_MS),
    };
    ms.ok_or_else(|| {
        format!(
            "step {s:?} is not a duration like 60s or 1h between 1 ms and {} days",
            MAX_STEP_MS / 86_400_000
        )
    })
}

/// How many points `from..=to` at `step` makes, for a range and step already in their
/// domains (checked arithmetic: no input makes it overflow).
pub fn points(from_ms: i64, to_ms: i64, step_ms: i64) -> Option<i64> {
    if step_ms <= 0 || to_ms < from_ms {
        return None;
    }
    Some(to_ms.checked_sub(from_ms)? / step_ms + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_steps_stay_in_their_domains() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time("now", now), Ok(now));
        // schemathesis found `from=` read as now.
        assert!(parse_time("", now).unwrap_err().contains("empty"));
        assert_eq!(parse_time("now-1h", now), Ok(now - 3_600_000));
        assert!(parse_time("9223372036854775807", now).is_err());
        assert!(parse_time("now-999999999y", now).is_err());
        assert!(parse_time("-1", now).is_err());
        assert_eq!(parse_step("60"), Ok(60_000));
        for bad in [
            "inf",
            "NaN",
            "1e300",
            "18446744073709551616",
            "0",
            "-5",
            "11y",
        ] {
            assert!(parse_step(bad).is_err(), "{bad}");
        }
        assert_eq!(points(0, MAX_TIME_MS, 1), Some(MAX_TIME_MS + 1));
        assert_eq!(points(10, 0, 1), None);
    }
}
