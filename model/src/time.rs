//! The time domain every timestamp is checked against, and how times are written.

use std::time::{Duration, UNIX_EPOCH};

/// The time domain of queries and stored data, in Unix ms: 1970-01-01 to
/// 9999-12-31T23:59:59.999Z (what RFC 3339 can write).
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// The longest step a series query may ask for: ten years.
pub const MAX_STEP_MS: i64 = 10 * 366 * 86_400_000;

/// Unix ms as RFC 3339 UTC with milliseconds (`2026-11-24T18:20:23.000Z`), the form of every
/// time the API, exports and logs write. Times before 1970 are written as the epoch.
pub fn rfc3339(ms: i64) -> String {
    let ms = ms.clamp(0, MAX_TIME_MS);
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// (year, month, day) of a day counted from 1970-01-01 (proleptic Gregorian).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Howard Hinnant's algorithm (public domain description of the Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day, counted from 1970-01-01, of a (year, month, day).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix ms now.
pub fn now_ms() -> i64 {
    UNIX_EPOCH
        .elapsed()
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .try_into()
        .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_round_trip_over_the_domain() {
        for days in (-1000..3_000_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2026, 11, 24), 20_781);
    }

    #[test]
    fn rfc3339_writes_utc_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_544_423_007), "2026-11-24T18:20:23.007Z");
        assert_eq!(rfc3339(MAX_TIME_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
    }
}
