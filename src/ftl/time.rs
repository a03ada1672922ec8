//! Instants as `ftl` computes with them: whole microseconds since 1970-01-01 UTC,
//! read from the views' text (the canonical `instant_utc` form), the calendar
//! arithmetic the calendar windows need, and the text bounds that a view's text
//! column can be compared with.

use crate::batch::event::{self, civil_from_days};

/// Microseconds since 1970-01-01T00:00:00Z (negative before). An `i64` spans
/// ±292,000 years, so every instant of years 0001–9999 fits.
pub type Micros = i64;

pub const MICROS_PER_SECOND: Micros = 1_000_000;
pub const MICROS_PER_MINUTE: Micros = 60 * MICROS_PER_SECOND;
pub const MICROS_PER_HOUR: Micros = 60 * MICROS_PER_MINUTE;
pub const MICROS_PER_DAY: Micros = 24 * MICROS_PER_HOUR;

/// Reads an instant in the canonical UTC form `YYYY-MM-DDTHH:MM:SS[.fraction]Z`
/// that spoolite stores (digits of the fraction past microseconds are dropped);
/// any other RFC 3339 instant is read too, more slowly. `None` when it is none.
pub fn parse_instant(text: &str) -> Option<Micros> {
    parse_canonical(text).or_else(|| parse_any(text))
}

/// The fast path for the canonical form, which every row of the views has.
fn parse_canonical(text: &str) -> Option<Micros> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || *b.last()? != b'Z'
    {
        return None;
    }
    let number = |at: usize, len: usize| -> Option<i64> {
        b[at..at + len].iter().try_fold(0i64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let (year, month, day) = (number(0, 4)?, number(5, 2)?, number(8, 2)?);
    let (hour, minute, second) = (number(11, 2)?, number(14, 2)?, number(17, 2)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut micros = 0;
    let fraction = &b[19..b.len() - 1];
    if let Some((&b'.', digits)) = fraction.split_first() {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        for place in 0..6 {
            let digit = digits.get(place).map_or(0, |d| i64::from(d - b'0'));
            micros = micros * 10 + digit;
        }
    } else if !fraction.is_empty() {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(seconds * MICROS_PER_SECOND + micros)
}

/// Any RFC 3339 instant with an offset (`--at 2026-12-01T10:00:00+02:00`).
fn parse_any(text: &str) -> Option<Micros> {
    let timestamp: jiff::Timestamp = text.trim().parse().ok()?;
    Some(timestamp.as_microsecond())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as spoolite writes times (milliseconds, truncated
/// towards the past).
pub fn format_millis(at: Micros) -> String {
    let (date, seconds) = split(at);
    let millis = at.rem_euclid(MICROS_PER_SECOND) / 1000;
    format!("{date}T{seconds}.{millis:03}Z")
}

/// `YYYY-MM-DDTHH:MM:SSZ`, whole seconds (truncated towards the past): a bound to
/// compare a view's text column with.
pub fn format_seconds(at: Micros) -> String {
    let (date, seconds) = split(at);
    format!("{date}T{seconds}Z")
}

/// The date and the `HH:MM:SS` of an instant.
fn split(at: Micros) -> (String, String) {
    let seconds = at.div_euclid(MICROS_PER_SECOND);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!(
            "{:02}:{:02}:{:02}",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60
        ),
    )
}

/// The first instant of the calendar month that lies `months_back` months before
/// the month of `at` (0: the month of `at` itself), in UTC.
pub fn month_start(at: Micros, months_back: i64) -> Micros {
    let (year, month, _) = civil_from_days(at.div_euclid(MICROS_PER_DAY));
    let index = year * 12 + (month - 1) - months_back;
    let (year, month) = (index.div_euclid(12), index.rem_euclid(12) + 1);
    days_from_civil(year, month, 1) * MICROS_PER_DAY
}

/// The first instant of the calendar year of `at`, in UTC.
pub fn year_start(at: Micros) -> Micros {
    let (year, _, _) = civil_from_days(at.div_euclid(MICROS_PER_DAY));
    days_from_civil(year, 1, 1) * MICROS_PER_DAY
}

/// The days of `month` (1–12) in `year`: the calendar of the event parser.
fn days_in_month(year: i64, month: i64) -> i64 {
    // Years are 0001–9999 and months 1–12 wherever this is asked.
    i64::from(event::days_in_month(year as i32, month as i32))
}

/// Days from 1970-01-01 to a date: the calendar of the event parser.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    event::days_from_civil(year, month as i32, day as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Micros {
        parse_instant(text).expect(text)
    }

    #[test]
    fn canonical_and_other_forms_read_to_the_same_microsecond() {
        assert_eq!(at("1970-01-01T00:00:00Z"), 0);
        assert_eq!(at("1970-01-01T00:00:01.5Z"), 1_500_000);
        assert_eq!(at("1970-01-01T00:00:00.0000019Z"), 1);
        assert_eq!(at("2026-12-01T12:00:00+02:00"), at("2026-12-01T10:00:00Z"));
        assert_eq!(at("1969-12-31T23:59:59Z"), -1_000_000);
        assert_eq!(parse_instant("2026-02-29T00:00:00Z"), None);
        assert_eq!(parse_instant("2026-12-01T10:00:00"), None);
        assert_eq!(parse_instant("2026-12-01T10:00:00.Z"), None);
        assert_eq!(parse_instant("yesterday"), None);
    }

    #[test]
    fn formats_are_those_spoolite_writes() {
        let t = at("2024-02-29T23:59:59.999999Z");
        assert_eq!(format_millis(t), "2024-02-29T23:59:59.999Z");
        assert_eq!(format_seconds(t), "2024-02-29T23:59:59Z");
        assert_eq!(
            format_millis(at("0001-01-01T00:00:00Z")),
            "0001-01-01T00:00:00.000Z"
        );
        assert_eq!(format_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn calendar_windows_start_on_the_first_day_in_utc() {
        let t = at("2024-03-15T08:00:00Z");
        assert_eq!(year_start(t), at("2024-01-01T00:00:00Z"));
        assert_eq!(month_start(t, 0), at("2024-03-01T00:00:00Z"));
        assert_eq!(month_start(t, 11), at("2023-04-01T00:00:00Z"));
        assert_eq!(
            month_start(at("2024-12-31T23:59:59Z"), 11),
            at("2024-01-01T00:00:00Z")
        );
        assert_eq!(
            month_start(at("2025-01-01T00:00:00Z"), 11),
            at("2024-02-01T00:00:00Z")
        );
        assert_eq!(
            year_start(at("2025-01-01T00:00:00Z")),
            at("2025-01-01T00:00:00Z")
        );
    }
}
