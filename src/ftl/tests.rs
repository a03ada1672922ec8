//! Table tests of the window arithmetic: one `check` per case, each naming T, the
//! rule set, the flights and duties, and the minutes expected in every window.

use super::time::parse_instant;
use super::*;

fn t(text: &str) -> Micros {
    parse_instant(text).expect(text)
}

/// What a case adds to the judge.
#[derive(Clone, Copy)]
enum Row {
    /// Crew id, role, off-blocks, on-blocks.
    Flight(&'static str, Role, &'static str, &'static str),
    /// Crew id, start, end (None: open), a flight duty.
    Duty(&'static str, &'static str, Option<&'static str>),
    /// Crew id, start, end (None: open), its type.
    Typed(&'static str, &'static str, Option<&'static str>, DutyType),
}

use Role::{Operating, Positioning};
use Row::{Duty, Flight, Typed};

/// Judges `rows` at `at` and compares each crew member's minutes per window, in
/// the rule set's order (`expected`: crew id, minutes per window), with exactly
/// the crew expected.
fn check(rules: Rules, at: &str, rows: &[Row], expected: &[(&str, &[f64])]) {
    check_in(&TimeBase::utc(), rules, at, rows, expected)
}

/// `check` with calendar days, months, years and nights in `base`.
fn check_in(base: &TimeBase, rules: Rules, at: &str, rows: &[Row], expected: &[(&str, &[f64])]) {
    let mut judge = Judge::new(rules, t(at), base.clone());
    let flight_crew = Function::FlightCrew;
    for row in rows {
        match *row {
            Flight(crew, role, off, on) => {
                judge.add_flight(crew, (role, flight_crew), t(off), t(on))
            }
            Duty(crew, start, end) => {
                let span = (t(start), end.map(t));
                judge.add_duty(crew, span, DutyType::FlightDuty, flight_crew)
            }
            Typed(crew, start, end, duty_type) => {
                judge.add_duty(crew, (t(start), end.map(t)), duty_type, flight_crew)
            }
        }
    }
    // The periods as `crew_fdp` would hold them.
    judge.derive_fdps();
    let lines = judge.lines(&[]);
    let mut got: Vec<(String, Vec<f64>)> = Vec::new();
    for line in lines {
        let minutes = line.used as f64 / 60e6;
        match got.last_mut() {
            Some((crew, used)) if *crew == line.crew_id => used.push(minutes),
            _ => got.push((line.crew_id.clone(), vec![minutes])),
        }
    }
    let expected: Vec<(String, Vec<f64>)> = expected
        .iter()
        .map(|(crew, used)| (crew.to_string(), used.to_vec()))
        .collect();
    assert_eq!(got, expected, "{rules:?} at {at}");
}

#[test]
fn a_flight_straddling_a_window_start_counts_only_its_minutes_inside() {
    // T − 28 days is 2026-11-03T12:00Z; the flight began two hours before it.
    check(
        Rules::Easa,
        "2026-12-01T12:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2026-11-03T10:00:00Z",
            "2026-11-03T13:30:00Z",
        )],
        &[("A", &[90.0, 210.0, 210.0, 0.0, 0.0, 0.0, 0.0])],
    );
    // FAA's 672 hours are the same 28 days.
    check(
        Rules::Faa,
        "2026-12-01T12:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2026-11-03T10:00:00Z",
            "2026-11-03T13:30:00Z",
        )],
        &[("A", &[90.0, 210.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn nothing_after_t_counts_and_a_flight_after_t_is_no_flight() {
    check(
        Rules::Easa,
        "2026-12-01T12:00:00Z",
        &[
            Flight(
                "A",
                Operating,
                "2026-12-01T11:00:00Z",
                "2026-12-01T14:00:00Z",
            ),
            Flight(
                "B",
                Operating,
                "2026-12-01T12:00:00Z",
                "2026-12-01T14:00:00Z",
            ),
            Duty("C", "2026-12-01T13:00:00Z", Some("2026-12-01T15:00:00Z")),
        ],
        &[("A", &[60.0, 60.0, 60.0, 0.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn the_calendar_year_starts_on_its_first_day_and_the_12_months_on_the_first_of_a_month() {
    // T in the first hours of the year: the calendar year holds only those, the
    // 12 calendar months run from 2026-02-01.
    check(
        Rules::Easa,
        "2027-01-01T02:00:00Z",
        &[
            Flight(
                "A",
                Operating,
                "2026-12-31T23:00:00Z",
                "2027-01-01T01:00:00Z",
            ),
            Flight(
                "A",
                Operating,
                "2026-01-31T23:00:00Z",
                "2026-02-01T01:00:00Z",
            ),
        ],
        &[("A", &[120.0, 60.0, 180.0, 0.0, 0.0, 0.0, 0.0])],
    );
    // At the very first instant of a year, the calendar year is empty.
    check(
        Rules::Easa,
        "2027-01-01T00:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2026-12-31T22:00:00Z",
            "2026-12-31T23:00:00Z",
        )],
        &[("A", &[60.0, 0.0, 60.0, 0.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn leap_years_have_their_29th_of_february() {
    // 28 days before 2024-03-01T12:00Z is 2024-02-02T12:00Z (February has 29
    // days); the 365 calendar days of 2025-02-28 begin on 2024-03-01, so of a
    // flight across 2024-02-29's midnight only the minutes after it count.
    check(
        Rules::Easa,
        "2024-03-01T12:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2024-02-02T11:00:00Z",
            "2024-02-02T13:00:00Z",
        )],
        &[("A", &[60.0, 120.0, 120.0, 0.0, 0.0, 0.0, 0.0])],
    );
    check(
        Rules::Faa,
        "2025-02-28T12:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2024-02-29T23:00:00Z",
            "2024-03-01T01:00:00Z",
        )],
        &[("A", &[0.0, 60.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn an_open_duty_counts_from_its_start_to_t() {
    check(
        Rules::Easa,
        "2026-12-01T12:00:00Z",
        &[Duty("A", "2026-12-01T04:30:00Z", None)],
        &[("A", &[0.0, 0.0, 0.0, 450.0, 450.0, 450.0, 450.0])],
    );
    // Its FDP runs to its last flight's on-blocks; the rest window, to T.
    check(
        Rules::Faa,
        "2026-12-01T12:00:00Z",
        &[
            Duty("A", "2026-12-01T04:30:00Z", None),
            Flight(
                "A",
                Operating,
                "2026-12-01T05:30:00Z",
                "2026-12-01T07:00:00Z",
            ),
        ],
        &[("A", &[90.0, 90.0, 150.0, 150.0, 450.0])],
    );
    // A closed duty ending after T counts up to T only.
    check(
        Rules::Easa,
        "2026-12-01T12:00:00Z",
        &[Duty(
            "A",
            "2026-12-01T10:00:00Z",
            Some("2026-12-01T20:00:00Z"),
        )],
        &[("A", &[0.0, 0.0, 0.0, 120.0, 120.0, 120.0, 120.0])],
    );
}

#[test]
fn positioning_adds_duty_not_flight_time() {
    check(
        Rules::Easa,
        "2026-12-01T12:00:00Z",
        &[
            Flight(
                "P",
                Positioning,
                "2026-12-01T08:00:00Z",
                "2026-12-01T10:00:00Z",
            ),
            Duty("P", "2026-12-01T07:00:00Z", Some("2026-12-01T10:30:00Z")),
            Flight(
                "O",
                Operating,
                "2026-12-01T08:00:00Z",
                "2026-12-01T10:00:00Z",
            ),
            Duty("O", "2026-12-01T07:00:00Z", Some("2026-12-01T10:30:00Z")),
        ],
        &[
            ("O", &[120.0, 120.0, 120.0, 210.0, 210.0, 210.0, 210.0]),
            ("P", &[0.0, 0.0, 0.0, 210.0, 210.0, 210.0, 210.0]),
        ],
    );
}

#[test]
fn crew_without_minutes_in_any_window_are_left_out_unless_named() {
    let mut judge = Judge::new(Rules::Faa, t("2026-12-01T12:00:00Z"), TimeBase::utc());
    judge.add_flight(
        "OLD",
        (Operating, Function::FlightCrew),
        t("2024-01-01T08:00:00Z"),
        t("2024-01-01T09:00:00Z"),
    );
    judge.add_flight(
        "POS",
        (Positioning, Function::FlightCrew),
        t("2026-12-01T08:00:00Z"),
        t("2026-12-01T09:00:00Z"),
    );
    judge.add_duty(
        "NEW",
        (t("2026-12-01T11:00:00Z"), None),
        DutyType::FlightDuty,
        Function::FlightCrew,
    );
    let crew = |lines: &[Line]| -> Vec<(String, &str, Micros)> {
        lines
            .iter()
            .map(|l| (l.crew_id.clone(), l.limit.window, l.used))
            .collect()
    };
    assert_eq!(
        crew(&judge.lines(&[])),
        // A flight duty without a flight has no FDP; its hour is rest's.
        [
            ("NEW".to_owned(), "672h", 0),
            ("NEW".to_owned(), "365_calendar_days", 0),
            ("NEW".to_owned(), "168h", 0),
            ("NEW".to_owned(), "672h", 0),
            ("NEW".to_owned(), "since_30h_free", 60 * 60_000_000),
        ]
    );
    let mut judge = Judge::new(Rules::Faa, t("2026-12-01T12:00:00Z"), TimeBase::utc());
    judge.add_duty(
        "NEW",
        (t("2026-12-01T11:00:00Z"), None),
        DutyType::FlightDuty,
        Function::FlightCrew,
    );
    let named = ["NOBODY".to_owned()];
    let lines = judge.lines(&named);
    assert_eq!(
        crew(&lines),
        [
            ("NOBODY".to_owned(), "672h", 0),
            ("NOBODY".to_owned(), "365_calendar_days", 0),
            ("NOBODY".to_owned(), "168h", 0),
            ("NOBODY".to_owned(), "672h", 0),
            ("NOBODY".to_owned(), "since_30h_free", 0),
        ]
    );
}

#[test]
fn exactly_at_the_limit_is_not_exceeded_and_a_microsecond_more_is() {
    let at = t("2026-12-01T12:00:00Z");
    let mut judge = Judge::new(Rules::Faa, at, TimeBase::utc());
    // 60 h of FDP in the 168 hours: an airport standby is FDP throughout.
    let standby = DutyType::AirportStandby;
    judge.add_duty(
        "AT",
        (at - 60 * 3_600_000_000, None),
        standby,
        Function::FlightCrew,
    );
    judge.add_duty(
        "OVER",
        (at - 60 * 3_600_000_000 - 1, None),
        standby,
        Function::FlightCrew,
    );
    judge.derive_fdps();
    let lines = judge.lines(&[]);
    let of = |crew: &str| -> Vec<bool> {
        lines
            .iter()
            .filter(|l| l.crew_id == crew)
            .map(Line::exceeded)
            .collect()
    };
    assert_eq!(of("AT"), [false, false, false, false, false]);
    assert_eq!(of("OVER"), [false, false, true, false, false]);
    let over = lines
        .iter()
        .find(|l| l.crew_id == "OVER" && l.limit.window == "168h")
        .expect("the line");
    assert_eq!(over.headroom(), -1);
}

#[test]
fn the_rule_sets_have_the_contracts_windows_and_limits() {
    let table = |rules: Rules| -> Vec<(&str, &str, i64)> {
        rules
            .limits()
            .iter()
            .map(|l| (l.measure.name(), l.window, l.limit_hours))
            .collect()
    };
    assert_eq!(
        table(Rules::Easa),
        [
            ("flight_time", "28d", 100),
            ("flight_time", "calendar_year", 900),
            ("flight_time", "12_calendar_months", 1000),
            ("duty", "7d", 60),
            ("duty", "14d", 110),
            ("duty", "28d", 190),
            ("rest", "since_extended_recovery_rest", 168),
        ]
    );
    assert_eq!(
        table(Rules::Faa),
        [
            ("flight_time", "672h", 100),
            ("flight_time", "365_calendar_days", 1000),
            ("fdp", "168h", 60),
            ("fdp", "672h", 190),
            ("rest", "since_30h_free", 138),
        ]
    );
    // The reads cover the widest window: 12 calendar months can reach 366 days.
    let judge = Judge::new(Rules::Easa, t("2025-01-31T23:00:00Z"), TimeBase::utc());
    assert_eq!(judge.reads_from(), t("2024-02-01T00:00:00Z"));
}

#[test]
fn the_table_puts_least_headroom_first_and_marks_what_is_exceeded() {
    let at = t("2026-12-01T12:00:00Z");
    let mut judge = Judge::new(Rules::Faa, at, TimeBase::utc());
    let standby = DutyType::AirportStandby;
    judge.add_duty(
        "C2",
        (at - 61 * 3_600_000_000 - 30_000_000, None),
        standby,
        Function::FlightCrew,
    );
    judge.add_flight(
        "C1",
        (Operating, Function::FlightCrew),
        at - 90 * 60_000_000,
        at,
    );
    judge.derive_fdps();
    let mut lines = judge.lines(&[]);
    by_headroom(&mut lines);
    let text = render::table(&lines, Rules::Faa, at, &TimeBase::utc());
    assert_eq!(
        text,
        "faa limits at 2026-12-01T12:00:00.000Z: 2 crew members, 1 window exceeded\n\
         CREW  MEASURE      WINDOW              USED    LIMIT  HEADROOM\n\
         !C2   FDP          168h               61:01    60:00     -1:01  EXCEEDED\n\
         C1    FDP          168h                0:00    60:00     60:00\n\
         !C2   rest         since_30h_free     61:01   138:00     76:59\n\
         C1    flight time  672h                1:30   100:00     98:30\n\
         C2    flight time  672h                0:00   100:00    100:00\n\
         !C2   FDP          672h               61:01   190:00    128:59\n\
         C1    rest         since_30h_free      0:00   138:00    138:00\n\
         C1    FDP          672h                0:00   190:00    190:00\n\
         C1    flight time  365_calendar_days   1:30  1000:00    998:30\n\
         C2    flight time  365_calendar_days   0:00  1000:00   1000:00\n\
         ! open_duty: 1 crew member: a duty without an end for over 24 h\n"
    );
    let json = render::json_lines(&lines[..1], Rules::Faa, at);
    assert_eq!(
        json,
        "{\"crew_id\":\"C2\",\"rules\":\"faa\",\"at\":\"2026-12-01T12:00:00.000Z\",\
         \"measure\":\"fdp\",\"window\":\"168h\",\"used_minutes\":3660.5,\"limit_minutes\":3600,\
         \"headroom_minutes\":-60.5,\"exceeded\":true,\"flags\":[\"open_duty\"]}\n"
    );
}

#[test]
fn an_fdp_ends_at_the_last_operating_flights_on_blocks_not_with_the_duty() {
    // Report 05:00, two sectors, then a positioning leg and post-flight duty to
    // 15:00: the FDP is 05:00–11:00 (14 CFR 117.3), the duty 05:00–15:00.
    let rows = [
        Duty("A", "2026-12-01T05:00:00Z", Some("2026-12-01T15:00:00Z")),
        Flight(
            "A",
            Operating,
            "2026-12-01T06:00:00Z",
            "2026-12-01T08:00:00Z",
        ),
        Flight(
            "A",
            Operating,
            "2026-12-01T09:00:00Z",
            "2026-12-01T11:00:00Z",
        ),
        Flight(
            "A",
            Positioning,
            "2026-12-01T12:00:00Z",
            "2026-12-01T13:30:00Z",
        ),
    ];
    // Rest: free from 15:00, 1 h at T; the last 30 free hours ended at 05:00.
    check(
        Rules::Faa,
        "2026-12-01T16:00:00Z",
        &rows,
        &[("A", &[240.0, 240.0, 360.0, 360.0, 660.0])],
    );
    check(
        Rules::Easa,
        "2026-12-01T16:00:00Z",
        &rows,
        &[("A", &[240.0, 240.0, 240.0, 600.0, 600.0, 600.0, 600.0])],
    );
    // T between the sectors: the FDP runs to T (its end, 11:00, is after T).
    check(
        Rules::Faa,
        "2026-12-01T08:30:00Z",
        &rows,
        &[("A", &[120.0, 120.0, 210.0, 210.0, 210.0])],
    );
}

#[test]
fn an_airport_standby_is_fdp_and_an_fdp_after_it_is_not_counted_twice() {
    // Airport standby 04:00–10:00, called out to a flight duty 10:00–14:00 with
    // one sector 11:00–13:00: FDP 04:00–13:00 (117.21(b)), duty 04:00–14:00.
    let rows = [
        Typed(
            "S",
            "2026-12-01T04:00:00Z",
            Some("2026-12-01T10:00:00Z"),
            DutyType::AirportStandby,
        ),
        Duty("S", "2026-12-01T10:00:00Z", Some("2026-12-01T14:00:00Z")),
        Flight(
            "S",
            Operating,
            "2026-12-01T11:00:00Z",
            "2026-12-01T13:00:00Z",
        ),
    ];
    check(
        Rules::Faa,
        "2026-12-01T18:00:00Z",
        &rows,
        &[("S", &[120.0, 120.0, 540.0, 540.0, 840.0])],
    );
}

#[test]
fn easa_weighs_home_standby_a_quarter_and_reserve_not_at_all() {
    // Home standby 00:00–12:00 under a duty 08:00–16:00: 8 h at a quarter, then
    // 8 h in full; a reserve 20:00–23:00 adds nothing to duty but is not rest.
    let rows = [
        Typed(
            "W",
            "2026-12-01T00:00:00Z",
            Some("2026-12-01T12:00:00Z"),
            DutyType::HomeStandby,
        ),
        Duty("W", "2026-12-01T08:00:00Z", Some("2026-12-01T16:00:00Z")),
        Typed(
            "W",
            "2026-12-01T20:00:00Z",
            Some("2026-12-01T23:00:00Z"),
            DutyType::Reserve,
        ),
    ];
    check(
        Rules::Easa,
        "2026-12-01T23:00:00Z",
        &rows,
        &[("W", &[0.0, 0.0, 0.0, 600.0, 600.0, 600.0, 1380.0])],
    );
    // A home standby or a reserve holds no FDP; FAA counts no duty as such.
    check(
        Rules::Faa,
        "2026-12-01T23:00:00Z",
        &rows,
        &[("W", &[0.0, 0.0, 0.0, 0.0, 1380.0])],
    );
}

#[test]
fn two_open_duties_count_each_instant_once() {
    // Two duty starts without ends, a day apart, judged a week after the first:
    // the union is the week, not 7 + 6 days.
    check(
        Rules::Easa,
        "2026-12-08T00:00:00Z",
        &[
            Duty("O", "2026-12-01T00:00:00Z", None),
            Duty("O", "2026-12-02T00:00:00Z", None),
        ],
        &[("O", &[0.0, 0.0, 0.0, 10080.0, 10080.0, 10080.0, 10080.0])],
    );
    // Two flights logged over each other count their overlap once.
    check(
        Rules::Easa,
        "2026-12-02T00:00:00Z",
        &[
            Flight(
                "O",
                Operating,
                "2026-12-01T06:00:00Z",
                "2026-12-01T09:00:00Z",
            ),
            Flight(
                "O",
                Operating,
                "2026-12-01T08:00:00Z",
                "2026-12-01T10:00:00Z",
            ),
        ],
        &[("O", &[240.0, 240.0, 240.0, 0.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn calendar_windows_begin_at_local_midnight_of_the_time_base() {
    // 2027 begins at 2026-12-31T23:00Z in Madrid (UTC+1): of a flight 22:00Z to
    // 00:00Z, one hour is in Madrid's 2027 and none in UTC's.
    let rows = [Flight(
        "M",
        Operating,
        "2026-12-31T22:00:00Z",
        "2027-01-01T00:00:00Z",
    )];
    let madrid = TimeBase::named("Europe/Madrid").expect("zone");
    let at = "2027-01-01T00:30:00Z";
    check_in(
        &madrid,
        Rules::Easa,
        at,
        &rows,
        &[("M", &[120.0, 60.0, 120.0, 0.0, 0.0, 0.0, 0.0])],
    );
    check(
        Rules::Easa,
        at,
        &rows,
        &[("M", &[120.0, 0.0, 120.0, 0.0, 0.0, 0.0, 0.0])],
    );
    // Auckland (UTC+13): at 01:00 local on 2027-01-01 the 365 calendar days
    // began at 2026-01-02 local, 2026-01-01T11:00Z; in UTC at 2026-01-01T00:00Z.
    let rows = [Flight(
        "N",
        Operating,
        "2026-01-01T10:00:00Z",
        "2026-01-01T12:00:00Z",
    )];
    let auckland = TimeBase::named("Pacific/Auckland").expect("zone");
    let at = "2026-12-31T12:00:00Z";
    check_in(
        &auckland,
        Rules::Faa,
        at,
        &rows,
        &[("N", &[0.0, 60.0, 0.0, 0.0, 0.0])],
    );
    check(
        Rules::Faa,
        at,
        &rows,
        &[("N", &[0.0, 120.0, 0.0, 0.0, 0.0])],
    );
    // Across Madrid's change to summer time (2026-03-29, a 23-hour day): the 365
    // calendar days of 2026-03-30 begin on 2025-03-31 at 00:00 CEST, 22:00Z.
    let rows = [Flight(
        "D",
        Operating,
        "2025-03-30T21:00:00Z",
        "2025-03-30T23:00:00Z",
    )];
    check_in(
        &madrid,
        Rules::Faa,
        "2026-03-30T12:00:00Z",
        &rows,
        &[("D", &[0.0, 60.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn rest_is_judged_at_30_and_36_hours_to_the_minute() {
    let at = "2026-12-05T12:00:00Z";
    let flight = Flight(
        "R",
        Operating,
        "2026-12-03T21:00:00Z",
        "2026-12-03T23:00:00Z",
    );
    // FAA: off duty from 06:00 the day before, 30 h at T: rest 0 …
    let rows = [
        Duty("R", "2026-12-03T20:00:00Z", Some("2026-12-04T06:00:00Z")),
        flight,
    ];
    check(
        Rules::Faa,
        at,
        &rows,
        &[("R", &[120.0, 120.0, 180.0, 180.0, 0.0])],
    );
    // … and with a minute less, E is the duty's start (free before it): 40 h.
    let rows = [
        Duty("R", "2026-12-03T20:00:00Z", Some("2026-12-04T06:01:00Z")),
        flight,
    ];
    check(
        Rules::Faa,
        at,
        &rows,
        &[("R", &[120.0, 120.0, 180.0, 180.0, 2400.0])],
    );
    // EASA: free from 00:00, 36 h at T holding the nights 3–4 (8 h) and 4–5: 0 …
    let rows = [
        Duty("R", "2026-12-03T20:00:00Z", Some("2026-12-04T00:00:00Z")),
        flight,
    ];
    check(
        Rules::Easa,
        at,
        &rows,
        &[("R", &[120.0, 120.0, 120.0, 240.0, 240.0, 240.0, 0.0])],
    );
    // … and from 00:01 it is not yet a recovery rest: S − E′ is 00:01 − 20:00.
    let rows = [
        Duty("R", "2026-12-03T20:00:00Z", Some("2026-12-04T00:01:00Z")),
        flight,
    ];
    check(
        Rules::Easa,
        at,
        &rows,
        &[("R", &[120.0, 120.0, 120.0, 241.0, 241.0, 241.0, 241.0])],
    );
}

#[test]
fn cabin_crew_are_judged_under_easa_and_have_no_faa_lines() {
    let at = t("2026-12-01T12:00:00Z");
    let cabin = Function::CabinCrew;
    let judged = |rules: Rules| {
        let mut judge = Judge::new(rules, at, TimeBase::utc());
        let duty = (t("2026-12-01T05:00:00Z"), Some(t("2026-12-01T11:00:00Z")));
        judge.add_duty("CC1", duty, DutyType::FlightDuty, cabin);
        let (off, on) = (t("2026-12-01T06:00:00Z"), t("2026-12-01T09:00:00Z"));
        judge.add_flight("CC1", (Operating, cabin), off, on);
        judge.derive_fdps();
        judge.lines(&[])
    };
    let easa = judged(Rules::Easa);
    assert_eq!(easa.len(), 7);
    assert_eq!(easa[0].used, 3 * 3_600_000_000);
    assert!(judged(Rules::Faa).is_empty());
}

#[test]
fn missing_or_wrong_data_flags_the_lines_of_the_windows_it_concerns() {
    let at = t("2026-12-10T12:00:00Z");
    let how = (Operating, Function::FlightCrew);
    let mut judge = Judge::new(Rules::Easa, at, TimeBase::utc());
    // Q: a flight without on-blocks for 25 h (in every flight time window), one
    // whose on-blocks is before its off-blocks 20 days back (28 days and the
    // calendar windows, not 7 days' duty), two flights over each other.
    judge.add_unblocked("Q", how, at - 25 * 3_600_000_000, None);
    judge.add_unblocked(
        "Q",
        how,
        t("2026-11-20T10:00:00Z"),
        Some(t("2026-11-20T09:00:00Z")),
    );
    judge.add_flight(
        "Q",
        how,
        t("2026-12-09T06:00:00Z"),
        t("2026-12-09T09:00:00Z"),
    );
    judge.add_flight(
        "Q",
        how,
        t("2026-12-09T08:00:00Z"),
        t("2026-12-09T10:00:00Z"),
    );
    // R: a flight without on-blocks for 23 h is not yet open; a duty open for
    // 30 h; two duties 20 days back over each other (in 28 days, not 7 or 14).
    judge.add_unblocked("R", how, at - 23 * 3_600_000_000, None);
    let duty = |start: &str, end: Option<&str>| (t(start), end.map(t));
    let flight_duty = DutyType::FlightDuty;
    judge.add_duty(
        "R",
        duty("2026-12-09T06:00:00Z", None),
        flight_duty,
        Function::FlightCrew,
    );
    judge.add_duty(
        "R",
        duty("2026-11-20T06:00:00Z", Some("2026-11-20T12:00:00Z")),
        flight_duty,
        Function::FlightCrew,
    );
    judge.add_duty(
        "R",
        duty("2026-11-20T11:00:00Z", Some("2026-11-20T14:00:00Z")),
        flight_duty,
        Function::FlightCrew,
    );
    let lines = judge.lines(&[]);
    let flags = |crew: &str| -> Vec<(&str, Vec<&str>)> {
        lines
            .iter()
            .filter(|l| l.crew_id == crew)
            .map(|l| (l.limit.window, l.flags.iter().map(|f| f.code()).collect()))
            .collect()
    };
    assert_eq!(
        flags("Q"),
        [
            ("28d", vec!["open_flight", "negative_block", "overlap"]),
            (
                "calendar_year",
                vec!["open_flight", "negative_block", "overlap"]
            ),
            (
                "12_calendar_months",
                vec!["open_flight", "negative_block", "overlap"]
            ),
            ("7d", vec![]),
            ("14d", vec![]),
            ("28d", vec![]),
            ("since_extended_recovery_rest", vec![]),
        ]
    );
    assert_eq!(
        flags("R"),
        [
            ("28d", vec![]),
            ("calendar_year", vec![]),
            ("12_calendar_months", vec![]),
            ("7d", vec!["open_duty"]),
            ("14d", vec!["open_duty"]),
            ("28d", vec!["open_duty", "overlap"]),
            ("since_extended_recovery_rest", vec!["open_duty"]),
        ]
    );
}
