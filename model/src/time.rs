//! The time domain every timestamp is checked against, and how times and durations are
//! read and written — through jiff, the one time library here (its calendar, its RFC 3339
//! parser, its "friendly" durations).

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

/// Unix ms as RFC 3339 UTC in whole seconds (`2026-11-24T18:20:23Z`), for formats that want
/// no fraction; the milliseconds are dropped, not rounded.
pub fn rfc3339_seconds(ms: i64) -> String {
    let with_ms = rfc3339(ms);
    format!("{}Z", &with_ms[..with_ms.len() - 5])
}

/// Unix ms of an RFC 3339 time (`2026-11-24T18:20:23Z`, `…T18:20:23.5+01:00`, a space or a
/// lowercase `t` for the `T`); without an offset the time is taken as UTC, and a date alone
/// as its midnight. Any year 1 to 9999 is read, so the caller checks the domain; `None` for
/// anything else.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let pieces = jiff::fmt::temporal::Pieces::parse(s).ok()?;
    if pieces.time_zone_annotation().is_some() {
        return None;
    }
    let day = day_number(pieces.date());
    let time = pieces.time().unwrap_or(jiff::civil::Time::midnight());
    let in_day = i64::from(time.hour()) * 3_600_000
        + i64::from(time.minute()) * 60_000
        + i64::from(time.second()) * 1000
        + i64::from(time.millisecond());
    let offset_s = pieces
        .offset()
        .map_or(0, |o| i64::from(o.to_numeric_offset().seconds()));
    Some(day * 86_400_000 + in_day - offset_s * 1000)
}

/// A duration as people write it: `30s`, `5m`, `1h30m`, `1.5h`, `7d`, `2 weeks`,
/// `90 minutes`, `0`; a day is 24 hours and a week 7 days. Months and years are refused (they
/// have no one length), as are negative durations and anything else, with a message that
/// names the text.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let span: jiff::Span = text
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 30s, 5m, 1h30m or 7d"))?;
    if span.get_years() != 0 || span.get_months() != 0 {
        return Err(format!(
            "{s:?}: months and years have no one length; give days or weeks"
        ));
    }
    if span.is_negative() {
        return Err(format!("{s:?} is negative"));
    }
    span.to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .ok()
        .and_then(|d| Duration::try_from(d).ok())
        .ok_or_else(|| format!("{s:?} is too long a duration"))
}

/// A duration in the shortest words [`parse_duration`] reads back: `30s`, `1h 30m`, `7d`,
/// `250ms`; days are the largest unit, and zero is `0s`.
pub fn format_duration(d: Duration) -> String {
    use jiff::fmt::friendly::{Designator, SpanPrinter};
    let span = jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| jiff::Span::try_from(d).ok())
        .and_then(|span| {
            span.round(
                jiff::SpanRound::new()
                    .largest(jiff::Unit::Day)
                    .days_are_24_hours(),
            )
            .ok()
        });
    match span {
        Some(span) => SpanPrinter::new()
            .designator(Designator::Compact)
            .span_to_string(&span),
        None => format!("{}s", d.as_secs()),
    }
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
    Some(day_number(day))
}

/// The day, counted from 1970-01-01, of a calendar date.
fn day_number(day: jiff::civil::Date) -> i64 {
    day.duration_since(EPOCH_DAY).as_secs().div_euclid(86_400)
}

/// A span in ms, saturating at `i64::MAX` rather than wrapping.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Unix ms now.
pub fn now_ms() -> i64 {
    millis(UNIX_EPOCH.elapsed().unwrap_or(Duration::ZERO))
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
    fn durations_read_as_people_write_them_and_write_back_the_same() {
        let secs = Duration::from_secs;
        for (text, want) in [
            ("30s", secs(30)),
            ("5m", secs(300)),
            ("1h30m", secs(5400)),
            ("1h 30m", secs(5400)),
            ("90 minutes", secs(5400)),
            ("1.5h", secs(5400)),
            ("7d", secs(7 * 86_400)),
            ("7days", secs(7 * 86_400)),
            ("2 weeks", secs(14 * 86_400)),
            ("250ms", Duration::from_millis(250)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
            assert_eq!(parse_duration(&format_duration(want)), Ok(want), "{text}");
        }
        assert_eq!(format_duration(secs(5400)), "1h 30m");
        assert_eq!(format_duration(secs(7 * 86_400)), "7d");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        for bad in [
            "",
            "5",
            "1M",
            "1 month",
            "2y",
            "-5m",
            "5m ago",
            "5 parsecs",
            "1e9h",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn rfc3339_reads_offsets_separators_and_the_whole_domain() {
        assert_eq!(
            parse_rfc3339("2026-11-24T18:20:23.007Z"),
            Some(1_795_544_423_007)
        );
        assert_eq!(
            parse_rfc3339("2026-11-24 18:20:23.007z"),
            Some(1_795_544_423_007)
        );
        assert_eq!(
            parse_rfc3339("2026-11-24t19:20:23.007+01:00"),
            Some(1_795_544_423_007)
        );
        assert_eq!(
            parse_rfc3339("2026-11-24T18:20:23.007"),
            Some(1_795_544_423_007)
        );
        assert_eq!(parse_rfc3339("1970-01-01"), Some(0));
        assert_eq!(parse_rfc3339("9999-12-31T23:59:59.999Z"), Some(MAX_TIME_MS));
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(-1000));
        for bad in [
            "",
            "now",
            "2026-13-01T00:00:00Z",
            "2026-02-29",
            "2026-11-24T25:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        for ms in [0, 1_795_544_423_007, MAX_TIME_MS] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
            assert_eq!(parse_rfc3339(&rfc3339_seconds(ms)), Some(ms / 1000 * 1000));
        }
        assert_eq!(rfc3339_seconds(1_795_544_423_007), "2026-11-24T18:20:23Z");
    }

    #[test]
    fn rfc3339_writes_utc_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_544_423_007), "2026-11-24T18:20:23.007Z");
        assert_eq!(rfc3339(MAX_TIME_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
    }
}
