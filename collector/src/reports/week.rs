//! ISO weeks (`2026-W46`) in a time zone: Monday 00:00 to the next Monday 00:00, local time.

use std::fmt;

use jiff::civil::{ISOWeekDate, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// One ISO week.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IsoWeek {
    pub year: i16,
    pub week: i8,
}

impl fmt::Display for IsoWeek {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-W{:02}", self.year, self.week)
    }
}

impl std::str::FromStr for IsoWeek {
    type Err = String;

    /// `2026-W46` (also `2026W46`, lower-case `w`).
    fn from_str(s: &str) -> Result<IsoWeek, String> {
        let bad = || format!("{s:?} is not an ISO week like 2026-W46");
        let t = s.trim().to_ascii_uppercase();
        let (y, w) = t.split_once('W').ok_or_else(bad)?;
        let year: i16 = y.trim_end_matches('-').parse().map_err(|_| bad())?;
        let week: i8 = w.parse().map_err(|_| bad())?;
        ISOWeekDate::new(year, week, Weekday::Monday)
            .map_err(|_| format!("{year} has no ISO week {week}"))?;
        Ok(IsoWeek { year, week })
    }
}

/// Parses an IANA time zone name (`UTC`, `Europe/Berlin`).
pub fn zone(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name).map_err(|e| format!("time zone {name:?}: {e}"))
}

impl IsoWeek {
    /// The week that holds `ms` in `tz`.
    pub fn containing(ms: i64, tz: &TimeZone) -> IsoWeek {
        let date = Timestamp::from_millisecond(ms)
            .unwrap_or(Timestamp::UNIX_EPOCH)
            .to_zoned(tz.clone())
            .date()
            .iso_week_date();
        IsoWeek {
            year: date.year(),
            week: date.week(),
        }
    }

    /// The last week that has ended by `ms` in `tz`.
    pub fn last_complete(ms: i64, tz: &TimeZone) -> IsoWeek {
        IsoWeek::containing(ms, tz).previous()
    }

    pub fn previous(self) -> IsoWeek {
        let monday = ISOWeekDate::new(self.year, self.week, Weekday::Monday)
            .expect("a valid week")
            .date();
        let before = monday
            .checked_sub(7.days())
            .expect("in range")
            .iso_week_date();
        IsoWeek {
            year: before.year(),
            week: before.week(),
        }
    }

    /// Start and end (exclusive) in Unix milliseconds: local midnights, so a week with a
    /// daylight-saving change is 167 or 169 hours long.
    pub fn bounds(self, tz: &TimeZone) -> (i64, i64) {
        let monday = ISOWeekDate::new(self.year, self.week, Weekday::Monday)
            .expect("a valid week")
            .date();
        let next = monday.checked_add(7.days()).expect("in range");
        let ms = |d: jiff::civil::Date| {
            d.to_zoned(tz.clone())
                .expect("local midnight exists")
                .timestamp()
                .as_millisecond()
        };
        (ms(monday), ms(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_parse_print_and_bound() {
        let w: IsoWeek = "2026-W46".parse().unwrap();
        assert_eq!(w.to_string(), "2026-W46");
        assert_eq!("2026w46".parse::<IsoWeek>().unwrap(), w);
        assert!("2026-W54".parse::<IsoWeek>().is_err());
        assert!("last week".parse::<IsoWeek>().is_err());
        let utc = zone("UTC").unwrap();
        // 2026-W46 is Monday 9 to Sunday 15 November 2026.
        let (from, to) = w.bounds(&utc);
        assert_eq!(from, 1_794_182_400_000);
        assert_eq!(to - from, 7 * 86_400_000);
        assert_eq!(IsoWeek::containing(from, &utc), w);
        assert_eq!(IsoWeek::containing(to - 1, &utc), w);
        assert_eq!(IsoWeek::containing(to, &utc).previous(), w);
        // Year boundaries: 2026-W01 starts on Monday 29 December 2025.
        let first: IsoWeek = "2026-W01".parse().unwrap();
        assert_eq!(first.previous().to_string(), "2025-W52");
        // Time zones move the bounds; a DST change makes the week an hour longer.
        let berlin = zone("Europe/Berlin").unwrap();
        let (bf, _) = w.bounds(&berlin);
        assert_eq!(from - bf, 3_600_000);
        let autumn: IsoWeek = "2026-W43".parse().unwrap();
        let (af, at) = autumn.bounds(&berlin);
        assert_eq!(at - af, 169 * 3_600_000);
        assert!(zone("Mars/Olympus").is_err());
    }
}
