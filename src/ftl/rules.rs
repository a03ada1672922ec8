//! The cumulative limits as data: each rule set's windows, what they measure and
//! their limits, and where each window starts for an instant T. No I/O.

use super::time::{MICROS_PER_DAY, MICROS_PER_HOUR, Micros, TimeBase};

/// Which regulator's cumulative limits `ftl` judges against (`--rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Rules {
    /// EASA ORO.FTL.210 and 235.
    Easa,
    /// FAA 14 CFR 117.23 and 117.25.
    Faa,
}

impl Rules {
    /// The name `--rules` takes and the JSON's `rules` field gives.
    pub fn name(self) -> &'static str {
        match self {
            Rules::Easa => "easa",
            Rules::Faa => "faa",
        }
    }

    /// The windows of the rule set, in the contract's order.
    pub fn limits(self) -> &'static [Limit] {
        match self {
            Rules::Easa => &EASA,
            Rules::Faa => &FAA,
        }
    }
}

/// What a window measures: block time of the flights flown as operating crew,
/// duty (either role, weighted by its type), flight duty periods, or the time
/// since the last qualifying rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Measure {
    FlightTime,
    Duty,
    Fdp,
    Rest,
}

impl Measure {
    /// The JSON's `measure` field.
    pub fn name(self) -> &'static str {
        match self {
            Measure::FlightTime => "flight_time",
            Measure::Duty => "duty",
            Measure::Fdp => "fdp",
            Measure::Rest => "rest",
        }
    }
}

/// Which free span ends a rest window: FAA 117.25(b)'s 30 consecutive hours free
/// from all duty, or EASA ORO.FTL.235(d)'s recurrent extended recovery rest (at
/// least 36 hours holding two local nights).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    Free30h,
    ExtendedRecovery,
}

/// Where a window starts: a length L before T (the window is T − L to T), the
/// first instant of a calendar span in the time base, or the end of the last
/// qualifying rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    Rolling(Micros),
    /// The calendar year of T.
    CalendarYear,
    /// The calendar month of T and the `n − 1` months before it.
    CalendarMonths(i64),
    /// The calendar day of T and the `n − 1` days before it.
    CalendarDays(i64),
    /// Since the last rest of this kind (each crew member's own start).
    SinceRest(Rest),
}

impl Span {
    /// The first instant of the window ending at `at`, where it is the same for
    /// every crew member (None for a rest window).
    pub fn start(self, at: Micros, base: &TimeBase) -> Option<Micros> {
        match self {
            Span::Rolling(length) => Some(at - length),
            Span::CalendarYear => Some(base.year_start(at)),
            Span::CalendarMonths(n) => Some(base.month_start(at, n - 1)),
            Span::CalendarDays(n) => Some(base.day_start(at, n - 1)),
            Span::SinceRest(_) => None,
        }
    }
}

/// One cumulative limit: a measure in a window, at most `limit_hours`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub measure: Measure,
    /// The JSON's `window` field.
    pub window: &'static str,
    pub span: Span,
    pub limit_hours: i64,
    /// Where the limit is written.
    pub source: &'static str,
}

impl Limit {
    pub fn limit_micros(&self) -> Micros {
        self.limit_hours * MICROS_PER_HOUR
    }
}

const fn limit(
    measure: Measure,
    window: &'static str,
    span: Span,
    limit_hours: i64,
    source: &'static str,
) -> Limit {
    Limit {
        measure,
        window,
        span,
        limit_hours,
        source,
    }
}

const DAY: Micros = MICROS_PER_DAY;
const HOUR: Micros = MICROS_PER_HOUR;

/// EASA ORO.FTL.210 (a) and (b), and ORO.FTL.235(d).
const EASA: [Limit; 7] = [
    limit(
        Measure::FlightTime,
        "28d",
        Span::Rolling(28 * DAY),
        100,
        "ORO.FTL.210(b)(1)",
    ),
    limit(
        Measure::FlightTime,
        "calendar_year",
        Span::CalendarYear,
        900,
        "ORO.FTL.210(b)(2)",
    ),
    limit(
        Measure::FlightTime,
        "12_calendar_months",
        Span::CalendarMonths(12),
        1000,
        "ORO.FTL.210(b)(3)",
    ),
    limit(
        Measure::Duty,
        "7d",
        Span::Rolling(7 * DAY),
        60,
        "ORO.FTL.210(a)(1)",
    ),
    limit(
        Measure::Duty,
        "14d",
        Span::Rolling(14 * DAY),
        110,
        "ORO.FTL.210(a)(2)",
    ),
    limit(
        Measure::Duty,
        "28d",
        Span::Rolling(28 * DAY),
        190,
        "ORO.FTL.210(a)(3)",
    ),
    limit(
        Measure::Rest,
        "since_extended_recovery_rest",
        Span::SinceRest(Rest::ExtendedRecovery),
        168,
        "ORO.FTL.235(d)",
    ),
];

/// FAA 14 CFR 117.23 (b) and (c), and 117.25(b).
const FAA: [Limit; 5] = [
    limit(
        Measure::FlightTime,
        "672h",
        Span::Rolling(672 * HOUR),
        100,
        "14 CFR 117.23(b)(1)",
    ),
    limit(
        Measure::FlightTime,
        "365_calendar_days",
        Span::CalendarDays(365),
        1000,
        "14 CFR 117.23(b)(2)",
    ),
    limit(
        Measure::Fdp,
        "168h",
        Span::Rolling(168 * HOUR),
        60,
        "14 CFR 117.23(c)(1)",
    ),
    limit(
        Measure::Fdp,
        "672h",
        Span::Rolling(672 * HOUR),
        190,
        "14 CFR 117.23(c)(2)",
    ),
    limit(
        Measure::Rest,
        "since_30h_free",
        Span::SinceRest(Rest::Free30h),
        138,
        "14 CFR 117.25(b)",
    ),
];
