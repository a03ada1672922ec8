//! Table tests of the window arithmetic: one `check` per case, each naming T, the
//! rule set, the flights and duties, and the minutes expected in every window.

use super::time::parse_instant;
use super::*;

fn t(text: &str) -> Micros {
    parse_instant(text).expect(text)
}

/// What a case adds to the judge.
enum Row {
    /// Crew id, role, off-blocks, on-blocks.
    Flight(&'static str, Role, &'static str, &'static str),
    /// Crew id, start, end (None: open).
    Duty(&'static str, &'static str, Option<&'static str>),
}

use Role::{Operating, Positioning};
use Row::{Duty, Flight};

/// Judges `rows` at `at` and compares each crew member's minutes per window, in
/// the rule set's order (`expected`: crew id, minutes per window), with exactly
/// the crew expected.
fn check(rules: Rules, at: &str, rows: &[Row], expected: &[(&str, &[f64])]) {
    let mut judge = Judge::new(rules, t(at));
    for row in rows {
        match *row {
            Flight(crew, role, off, on) => judge.add_flight(crew, role, t(off), t(on)),
            Duty(crew, start, end) => judge.add_duty(crew, t(start), end.map(t)),
        }
    }
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
        &[("A", &[90.0, 210.0, 210.0, 0.0, 0.0, 0.0])],
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
        &[("A", &[90.0, 210.0, 0.0, 0.0])],
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
        &[("A", &[60.0, 60.0, 60.0, 0.0, 0.0, 0.0])],
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
        &[("A", &[120.0, 60.0, 180.0, 0.0, 0.0, 0.0])],
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
        &[("A", &[60.0, 0.0, 60.0, 0.0, 0.0, 0.0])],
    );
}

#[test]
fn leap_years_have_their_29th_of_february() {
    // 28 days before 2024-03-01T12:00Z is 2024-02-02T12:00Z (February has 29
    // days); 365 days before 2025-02-28T12:00Z is 2024-02-29T12:00Z.
    check(
        Rules::Easa,
        "2024-03-01T12:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2024-02-02T11:00:00Z",
            "2024-02-02T13:00:00Z",
        )],
        &[("A", &[60.0, 120.0, 120.0, 0.0, 0.0, 0.0])],
    );
    check(
        Rules::Faa,
        "2025-02-28T12:00:00Z",
        &[Flight(
            "A",
            Operating,
            "2024-02-29T11:00:00Z",
            "2024-02-29T13:00:00Z",
        )],
        &[("A", &[0.0, 60.0, 0.0, 0.0])],
    );
}

#[test]
fn an_open_duty_counts_from_its_start_to_t() {
    check(
        Rules::Faa,
        "2026-12-01T12:00:00Z",
        &[Duty("A", "2026-12-01T04:30:00Z", None)],
        &[("A", &[0.0, 0.0, 450.0, 450.0])],
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
        &[("A", &[0.0, 0.0, 0.0, 120.0, 120.0, 120.0])],
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
            ("O", &[120.0, 120.0, 120.0, 210.0, 210.0, 210.0]),
            ("P", &[0.0, 0.0, 0.0, 210.0, 210.0, 210.0]),
        ],
    );
}

#[test]
fn crew_without_minutes_in_any_window_are_left_out_unless_named() {
    let mut judge = Judge::new(Rules::Faa, t("2026-12-01T12:00:00Z"));
    judge.add_flight(
        "OLD",
        Operating,
        t("2024-01-01T08:00:00Z"),
        t("2024-01-01T09:00:00Z"),
    );
    judge.add_flight(
        "POS",
        Positioning,
        t("2026-12-01T08:00:00Z"),
        t("2026-12-01T09:00:00Z"),
    );
    judge.add_duty("NEW", t("2026-12-01T11:00:00Z"), None);
    let crew = |lines: &[Line]| -> Vec<(String, &str, Micros)> {
        lines
            .iter()
            .map(|l| (l.crew_id.clone(), l.limit.window, l.used))
            .collect()
    };
    assert_eq!(
        crew(&judge.lines(&[])),
        [
            ("NEW".to_owned(), "672h", 0),
            ("NEW".to_owned(), "365d", 0),
            ("NEW".to_owned(), "168h", 60 * 60_000_000),
            ("NEW".to_owned(), "672h", 60 * 60_000_000),
        ]
    );
    let mut judge = Judge::new(Rules::Faa, t("2026-12-01T12:00:00Z"));
    judge.add_duty("NEW", t("2026-12-01T11:00:00Z"), None);
    let named = ["NOBODY".to_owned()];
    let lines = judge.lines(&named);
    assert_eq!(
        crew(&lines),
        [
            ("NOBODY".to_owned(), "672h", 0),
            ("NOBODY".to_owned(), "365d", 0),
            ("NOBODY".to_owned(), "168h", 0),
            ("NOBODY".to_owned(), "672h", 0),
        ]
    );
}

#[test]
fn exactly_at_the_limit_is_not_exceeded_and_a_microsecond_more_is() {
    let at = t("2026-12-01T12:00:00Z");
    let mut judge = Judge::new(Rules::Faa, at);
    // 60 h of duty in the 168 hours.
    judge.add_duty("AT", at - 60 * 3_600_000_000, None);
    judge.add_duty("OVER", at - 60 * 3_600_000_000 - 1, None);
    let lines = judge.lines(&[]);
    let of = |crew: &str| -> Vec<bool> {
        lines
            .iter()
            .filter(|l| l.crew_id == crew)
            .map(Line::exceeded)
            .collect()
    };
    assert_eq!(of("AT"), [false, false, false, false]);
    assert_eq!(of("OVER"), [false, false, true, false]);
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
        ]
    );
    assert_eq!(
        table(Rules::Faa),
        [
            ("flight_time", "672h", 100),
            ("flight_time", "365d", 1000),
            ("duty", "168h", 60),
            ("duty", "672h", 190),
        ]
    );
    // The reads cover the widest window: 12 calendar months can reach 366 days.
    let judge = Judge::new(Rules::Easa, t("2025-01-31T23:00:00Z"));
    assert_eq!(judge.reads_from(), t("2024-02-01T00:00:00Z"));
}

#[test]
fn the_table_puts_least_headroom_first_and_marks_what_is_exceeded() {
    let at = t("2026-12-01T12:00:00Z");
    let mut judge = Judge::new(Rules::Faa, at);
    judge.add_duty("C2", at - 61 * 3_600_000_000 - 30_000_000, None);
    judge.add_flight("C1", Operating, at - 90 * 60_000_000, at);
    let mut lines = judge.lines(&[]);
    by_headroom(&mut lines);
    let text = render::table(&lines, Rules::Faa, at);
    assert_eq!(
        text,
        "faa limits at 2026-12-01T12:00:00.000Z: 2 crew members, 1 window exceeded\n\
         CREW  MEASURE      WINDOW   USED    LIMIT  HEADROOM\n\
         C2    duty         168h    61:01    60:00     -1:01  EXCEEDED\n\
         C1    duty         168h     0:00    60:00     60:00\n\
         C1    flight time  672h     1:30   100:00     98:30\n\
         C2    flight time  672h     0:00   100:00    100:00\n\
         C2    duty         672h    61:01   190:00    128:59\n\
         C1    duty         672h     0:00   190:00    190:00\n\
         C1    flight time  365d     1:30  1000:00    998:30\n\
         C2    flight time  365d     0:00  1000:00   1000:00\n"
    );
    let json = render::json_lines(&lines[..1], Rules::Faa, at);
    assert_eq!(
        json,
        "{\"crew_id\":\"C2\",\"rules\":\"faa\",\"at\":\"2026-12-01T12:00:00.000Z\",\
         \"measure\":\"duty\",\"window\":\"168h\",\"used_minutes\":3660.5,\"limit_minutes\":3600,\
         \"headroom_minutes\":-60.5,\"exceeded\":true}\n"
    );
}
