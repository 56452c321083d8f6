//! RFC 3339 times, both ways, by hand: the one format this service writes
//! (`2026-01-02T03:04:05.678Z`, UTC, milliseconds: log lines, the audit's
//! times, tasks, webhooks) and the strict form it reads (the list's
//! `created_after` and `created_before`). Proleptic Gregorian calendar,
//! Howard Hinnant's day arithmetic.
//!
//! It owns text and numbers only: it never reads the clock or knows what a
//! time is for. A leap second (`:60`) is refused rather than guessed at.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// `2026-01-02T03:04:05.678Z`: RFC 3339, UTC, milliseconds. A clock before
/// 1970 prints the epoch.
pub fn rfc3339_millis(time: SystemTime) -> String {
    let mut out = String::with_capacity(24);
    push_rfc3339_millis(&mut out, time);
    out
}

/// `rfc3339_millis`, appended to `out` without allocating.
pub(crate) fn push_rfc3339_millis(out: &mut String, time: SystemTime) {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let second_of_day = secs % 86_400;
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
        since_epoch.subsec_millis()
    );
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar: Howard Hinnant's `civil_from_days`, which counts in 400-year eras
/// starting on March 1st so that the leap day is the last day of a year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Unix seconds of a strict RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS`, an
/// optional fraction of one to nine digits, then `Z` or `±HH:MM` (`T` and `Z`
/// in either case, as the RFC allows). `None` for anything else, including
/// day 31 of a 30-day month and leap seconds.
pub fn parse_unix_secs(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let (month, day) = (digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let (fraction, zone) = split_fraction(&b[19..])?;
    let offset = zone_offset_secs(zone)?;
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(secs as f64 + fraction)
}

/// The fraction after the seconds (`0.0` when there is none) and the zone
/// that follows it.
fn split_fraction(rest: &[u8]) -> Option<(f64, &[u8])> {
    let Some(after_dot) = rest.strip_prefix(b".") else {
        return Some((0.0, rest));
    };
    let len = after_dot.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=9).contains(&len) {
        return None;
    }
    let value = digits(&after_dot[..len])? as f64 / 10f64.powi(len as i32);
    Some((value, &after_dot[len..]))
}

/// Seconds east of UTC of `Z` or `±HH:MM`.
fn zone_offset_secs(zone: &[u8]) -> Option<i64> {
    match zone {
        [b'Z' | b'z'] => Some(0),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let secs = hours * 3600 + minutes * 60;
            Some(if *sign == b'-' { -secs } else { secs })
        }
        _ => None,
    }
}

/// The value of a run of ASCII digits; `None` if any byte is not one.
fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |n, c| {
        c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
    })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// (year, month, day) to days since 1970-01-01: the inverse of
/// `civil_from_days`, in the same 400-year eras.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn timestamps_match_known_dates() {
        let cases = [
            (at(0, 0), "1970-01-01T00:00:00.000Z"),
            (at(86_399, 999), "1970-01-01T23:59:59.999Z"),
            (at(68_169_600, 0), "1972-02-29T00:00:00.000Z"),
            (at(951_782_400, 1), "2000-02-29T00:00:00.001Z"),
            (at(951_868_800, 0), "2000-03-01T00:00:00.000Z"),
            (at(1_234_567_890, 120), "2009-02-13T23:31:30.120Z"),
            (at(1_709_251_199, 0), "2024-02-29T23:59:59.000Z"),
            (at(1_735_689_599, 500), "2024-12-31T23:59:59.500Z"),
            (at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z"), // 2100 is not a leap year
            (at(253_402_300_799, 0), "9999-12-31T23:59:59.000Z"),
            (
                UNIX_EPOCH - Duration::from_secs(5),
                "1970-01-01T00:00:00.000Z",
            ),
        ];
        for (time, expected) in cases {
            assert_eq!(rfc3339_millis(time), expected);
        }
    }

    #[test]
    fn every_day_follows_the_one_before() {
        // Walk 1970 to 2399 day by day (2000 is a leap year; 2100, 2200 and 2300
        // are not): each date is the one before plus a day.
        let month_length = |y: i64, m: u32| match m {
            4 | 6 | 9 | 11 => 30,
            2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
            2 => 28,
            _ => 31,
        };
        let mut previous = civil_from_days(0);
        assert_eq!(previous, (1970, 1, 1));
        for days in 1..157_000 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = previous;
            let expected = if pd < month_length(py, pm) {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), expected, "day {days}");
            previous = (y, m, d);
        }
    }

    #[test]
    fn parse_reads_back_every_day_written() {
        for days in (-800_000..2_900_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        let secs = 1_234_567_890u64;
        let written = rfc3339_millis(at(secs, 120));
        assert_eq!(parse_unix_secs(&written), Some(secs as f64 + 0.12));
    }

    #[test]
    fn parse_takes_offsets_fractions_and_either_case() {
        let noon_utc = 1_796_644_800.0; // 2026-12-07T12:00:00Z
        for text in [
            "2026-12-07T12:00:00Z",
            "2026-12-07t12:00:00z",
            "2026-12-07T13:30:00+01:30",
            "2026-12-07T07:00:00-05:00",
            "2026-12-07T12:00:00.000000000Z",
            "2026-12-07T12:00:00+00:00",
        ] {
            assert_eq!(parse_unix_secs(text), Some(noon_utc), "{text}");
        }
        assert_eq!(
            parse_unix_secs("2026-12-07T12:00:00.5Z"),
            Some(noon_utc + 0.5)
        );
    }

    #[test]
    fn parse_refuses_what_is_not_strict_rfc_3339() {
        for text in [
            "",
            "2026-12-07",
            "2026-12-07 12:00:00Z",
            "2026-12-07T12:00:00",
            "2026-12-07T12:00Z",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-12-07T24:00:00Z",
            "2026-12-07T23:59:60Z",
            "2026-12-07T12:00:00.Z",
            "2026-12-07T12:00:00.1234567890Z",
            "2026-12-07T12:00:00+0100",
            "2026-12-07T12:00:00+24:00",
            "2026-12-07T12:00:00ZZ",
            "+026-12-07T12:00:00Z",
            "2026-1a-07T12:00:00Z",
            "1780000000",
        ] {
            assert_eq!(parse_unix_secs(text), None, "{text:?}");
        }
        assert_eq!(
            parse_unix_secs("2024-02-29T00:00:00Z"),
            Some(1_709_164_800.0)
        );
    }
}
