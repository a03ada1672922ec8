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

/// Where calendar days, months and years begin and what a local night is
/// (`--time-zone`): an IANA zone read from the time zone database built into
/// spoolite, so that a workstation's own zoneinfo (missing, or of another
/// release) cannot change a figure. Windows of consecutive hours or days are
/// lengths of time and do not ask it.
#[derive(Debug, Clone)]
pub struct TimeBase {
    name: String,
    zone: jiff::tz::TimeZone,
}

/// A `--time-zone` that the built-in database does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--time-zone {0:?}: no such time zone; give an IANA name such as Europe/Madrid, \
     America/New_York or UTC"
)]
pub struct UnknownZone(pub String);

impl TimeBase {
    /// UTC, the default.
    pub fn utc() -> TimeBase {
        TimeBase {
            name: "UTC".to_owned(),
            zone: jiff::tz::TimeZone::UTC,
        }
    }

    /// The zone of an IANA name (matched without regard to case, as the
    /// database does), from the built-in database only.
    pub fn named(name: &str) -> Result<TimeBase, UnknownZone> {
        let name = name.trim();
        let zone = jiff::tz::TimeZoneDatabase::bundled()
            .get(name)
            .map_err(|_| UnknownZone(name.to_owned()))?;
        let name = zone.iana_name().unwrap_or(name).to_owned();
        Ok(TimeBase { name, zone })
    }

    /// The zone's IANA name, as the database spells it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local date of an instant.
    fn date(&self, at: Micros) -> jiff::civil::Date {
        self.zone.to_datetime(timestamp(at)).date()
    }

    /// The first instant of a local date (00:00, or the first instant after a
    /// gap when a change of offset skips midnight).
    fn start_of(&self, date: jiff::civil::Date) -> Micros {
        self.at_local(date.to_datetime(jiff::civil::Time::midnight()))
    }

    /// The instant of a local wall-clock time: in a gap (clocks put forward),
    /// the instant the gap ends; in a fold (clocks put back), the earlier one.
    fn at_local(&self, datetime: jiff::civil::DateTime) -> Micros {
        self.zone
            .to_ambiguous_timestamp(datetime)
            .compatible()
            .map(|t| t.as_microsecond())
            .unwrap_or_else(|_| {
                self.zone
                    .to_timestamp(datetime)
                    .map_or(0, |t| t.as_microsecond())
            })
    }

    /// The first instant of the local day of `at` less `days_back` days.
    pub fn day_start(&self, at: Micros, days_back: i64) -> Micros {
        let date = self.date(at);
        let back = date
            .checked_sub(jiff::Span::new().days(days_back))
            .unwrap_or(date);
        self.start_of(back)
    }

    /// The first instant of the local month that lies `months_back` months
    /// before the month of `at` (0: the month of `at` itself).
    pub fn month_start(&self, at: Micros, months_back: i64) -> Micros {
        let date = self.date(at).first_of_month();
        let back = date
            .checked_sub(jiff::Span::new().months(months_back))
            .unwrap_or(date);
        self.start_of(back)
    }

    /// The first instant of the local calendar year of `at`.
    pub fn year_start(&self, at: Micros) -> Micros {
        let date = self.date(at);
        self.start_of(jiff::civil::date(date.year(), 1, 1))
    }

    /// The local night that begins at 22:00 on the local date of `at` less
    /// `days_back` days: from that 22:00 to 08:00 the next morning, as instants
    /// (9 or 11 hours long across a change of offset).
    pub fn night(&self, at: Micros, days_back: i64) -> (Micros, Micros) {
        let date = self.date(at);
        let evening = date
            .checked_sub(jiff::Span::new().days(days_back))
            .unwrap_or(date);
        let morning = evening.tomorrow().unwrap_or(evening);
        (
            self.at_local(evening.to_datetime(jiff::civil::time(22, 0, 0, 0))),
            self.at_local(morning.to_datetime(jiff::civil::time(8, 0, 0, 0))),
        )
    }
}

/// An instant as jiff's timestamp (every instant of years 0001–9999 is one).
fn timestamp(at: Micros) -> jiff::Timestamp {
    jiff::Timestamp::from_microsecond(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
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
        let utc = TimeBase::utc();
        let t = at("2024-03-15T08:00:00Z");
        assert_eq!(utc.year_start(t), at("2024-01-01T00:00:00Z"));
        assert_eq!(utc.month_start(t, 0), at("2024-03-01T00:00:00Z"));
        assert_eq!(utc.month_start(t, 11), at("2023-04-01T00:00:00Z"));
        assert_eq!(utc.day_start(t, 364), at("2023-03-17T00:00:00Z"));
        assert_eq!(
            utc.month_start(at("2024-12-31T23:59:59Z"), 11),
            at("2024-01-01T00:00:00Z")
        );
        assert_eq!(
            utc.month_start(at("2025-01-01T00:00:00Z"), 11),
            at("2024-02-01T00:00:00Z")
        );
        assert_eq!(
            utc.year_start(at("2025-01-01T00:00:00Z")),
            at("2025-01-01T00:00:00Z")
        );
    }

    #[test]
    fn calendar_windows_start_at_local_midnight_in_the_time_base() {
        // Madrid is UTC+1 in winter: 2026-01-01T00:00 local is 2025-12-31T23:00Z,
        // so an instant of New Year's Eve 23:30Z is already in 2026 there.
        let madrid = TimeBase::named("Europe/Madrid").expect("zone");
        let new_year = at("2025-12-31T23:30:00Z");
        assert_eq!(madrid.year_start(new_year), at("2025-12-31T23:00:00Z"));
        assert_eq!(
            TimeBase::utc().year_start(new_year),
            at("2025-01-01T00:00:00Z")
        );
        // Across the change to summer time (2026-03-29): the local day of
        // 2026-03-30 began at 22:00Z the day before, the 29th at 23:00Z.
        let after = at("2026-03-30T12:00:00Z");
        assert_eq!(madrid.day_start(after, 0), at("2026-03-29T22:00:00Z"));
        assert_eq!(madrid.day_start(after, 1), at("2026-03-28T23:00:00Z"));
        assert_eq!(madrid.month_start(after, 0), at("2026-02-28T23:00:00Z"));
        // Auckland is UTC+13 in its summer: its 2027 begins at 11:00Z on the
        // last day of 2026, and 365 calendar days end at its local midnight.
        let auckland = TimeBase::named("pacific/auckland").expect("zone");
        assert_eq!(auckland.name(), "Pacific/Auckland");
        let t = at("2026-12-31T12:00:00Z");
        assert_eq!(auckland.year_start(t), at("2026-12-31T11:00:00Z"));
        assert_eq!(auckland.day_start(t, 364), at("2026-01-01T11:00:00Z"));
        assert_eq!(auckland.month_start(t, 11), at("2026-01-31T11:00:00Z"));
        assert!(TimeBase::named("Mars/Olympus_Mons").is_err());
    }

    #[test]
    fn a_local_night_is_22_to_08_in_the_time_base_and_longer_when_clocks_go_back() {
        let madrid = TimeBase::named("Europe/Madrid").expect("zone");
        // 2026-10-24 22:00 CEST (UTC+2) to 10-25 08:00 CET (UTC+1): 11 hours.
        let (start, end) = madrid.night(at("2026-10-25T12:00:00Z"), 1);
        assert_eq!(start, at("2026-10-24T20:00:00Z"));
        assert_eq!(end, at("2026-10-25T07:00:00Z"));
        let (start, end) = TimeBase::utc().night(at("2026-10-25T12:00:00Z"), 0);
        assert_eq!(
            (start, end),
            (at("2026-10-25T22:00:00Z"), at("2026-10-26T08:00:00Z"))
        );
    }
}
