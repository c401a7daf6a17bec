//! The time domain every timestamp is checked against, and how times are written (the
//! calendar is jiff's).

use std::time::{Duration, UNIX_EPOCH};

/// The time domain of queries and stored data, in Unix ms: 1970-01-01 to
/// 9999-12-31T23:59:59.999Z (what RFC 3339 can write).
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// The longest step a series query may ask for: ten years.
pub const MAX_STEP_MS: i64 = 10 * 366 * 86_400_000;

/// Unix ms as RFC 3339 UTC with milliseconds (`2026-11-24T18:20:23.000Z`), the form of every
/// time the API, exports and logs write. Times before 1970 are written as the epoch.
pub fn rfc3339(ms: i64) -> String {
    // jiff's timestamps end on 9999-12-30 (they leave room for any offset); its calendar
    // dates reach the domain's last day, and a day's time is a remainder.
    let ms = ms.clamp(0, MAX_TIME_MS);
    let (y, m, d) = civil_from_days(ms.div_euclid(86_400_000));
    let rest = ms.rem_euclid(86_400_000);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// The first day of the calendar, 1970-01-01.
const EPOCH_DAY: jiff::civil::Date = jiff::civil::date(1970, 1, 1);

/// (year, month, day) of a day counted from 1970-01-01 (proleptic Gregorian); days outside
/// the years 1 to 9999 are taken as the nearest day in them.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let first = jiff::civil::date(1, 1, 1);
    let last = jiff::civil::date(9999, 12, 31);
    let day = i32::try_from(days)
        .ok()
        .and_then(|n| {
            EPOCH_DAY
                .checked_add(jiff::Span::new().try_days(n).ok()?)
                .ok()
        })
        .unwrap_or(if days < 0 { first } else { last })
        .clamp(first, last);
    (
        i64::from(day.year()),
        i64::from(day.month()),
        i64::from(day.day()),
    )
}

/// The day, counted from 1970-01-01, of a (year, month, day); `None` for no such date.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> Option<i64> {
    let day = jiff::civil::Date::new(
        i16::try_from(y).ok()?,
        i8::try_from(m).ok()?,
        i8::try_from(d).ok()?,
    )
    .ok()?;
    Some(day.duration_since(EPOCH_DAY).as_secs().div_euclid(86_400))
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
        // Years 1 to 9999: what RFC 3339 writes.
        for days in (-719_162..2_932_897).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            assert_eq!(days_from_civil(y, m, d), Some(days));
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(days_from_civil(2026, 11, 24), Some(20_781));
        assert_eq!(days_from_civil(2024, 2, 29), Some(19_782));
        assert_eq!(days_from_civil(2026, 2, 29), None);
        assert_eq!(days_from_civil(2026, 13, 1), None);
        assert_eq!(civil_from_days(i64::MAX), (9999, 12, 31));
        assert_eq!(civil_from_days(i64::MIN), (1, 1, 1));
    }

    #[test]
    fn rfc3339_writes_utc_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_544_423_007), "2026-11-24T18:20:23.007Z");
        assert_eq!(rfc3339(MAX_TIME_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
    }
}
