//! The plan's reading and its exact worst-instant search, against figures
//! computed by hand.

use super::*;
use crate::ftl::Judge;
use crate::ftl::time::parse_instant;

fn t(text: &str) -> Micros {
    parse_instant(text).expect(text)
}

const H: Micros = 3_600_000_000;
const MIN: Micros = 60_000_000;

/// A history of daily flights 06:00–14:00 of crew C1 on the given November days,
/// as `ftl` reads them (no periods: none are asked of it here).
fn history(rules: Rules, at: Micros, days: std::ops::RangeInclusive<u32>) -> Judge {
    let mut judge = Judge::new(rules, at, TimeBase::utc());
    for day in days {
        let off = t(&format!("2026-11-{day:02}T06:00:00Z"));
        judge.add_flight(
            "C1",
            (Role::Operating, Function::FlightCrew),
            off,
            off + 8 * H,
        );
    }
    judge
}

fn plan_flight(off: &str, on: &str) -> String {
    format!(r#"{{"crew_id":"C1","kind":"flight","off_blocks":"{off}","on_blocks":"{on}"}}"#)
}

#[test]
fn a_plan_that_breaks_100_hours_in_28_days_two_weeks_ahead_names_the_first_instant() {
    // 88 h flown 18–28 November; planned 8 h on 14 December, 7:47 on the 15th,
    // 8 h on the 16th. The 28 days ending 15 December 13:47 hold all 88 h and
    // 15:47 planned: 103:47. On the 16th each planned minute replaces one of 18
    // November leaving the window: flat, so the earliest instant is the 15th.
    let at = t("2026-12-01T00:00:00Z");
    let text = [
        plan_flight("2026-12-14T06:00:00Z", "2026-12-14T14:00:00Z"),
        plan_flight("2026-12-15T06:00:00Z", "2026-12-15T13:47:00Z"),
        plan_flight("2026-12-16T06:00:00Z", "2026-12-16T14:00:00Z"),
    ]
    .join("\n");
    let plan = parse(&text, at).expect("a plan");
    let lines = judge(history(Rules::Easa, at, 18..=28), &plan);
    let line = &lines[0];
    assert_eq!(
        (line.limit.measure, line.limit.window),
        (Measure::FlightTime, "28d")
    );
    assert_eq!(line.worst, 103 * H + 47 * MIN);
    assert_eq!(line.worst_at, t("2026-12-15T13:47:00Z"));
    assert!(line.exceeded());
    assert_eq!(line.headroom(), -(3 * H + 47 * MIN));
    // The calendar year of T holds all of it at the horizon: 88 h + 23:47.
    assert_eq!(lines[1].worst, 111 * H + 47 * MIN);
    assert_eq!(lines[1].worst_at, t("2026-12-16T14:00:00Z"));
    // A plan that stops on the 14th stays within: 96 h at its end.
    let legal = parse(
        &plan_flight("2026-12-14T06:00:00Z", "2026-12-14T14:00:00Z"),
        at,
    )
    .expect("a plan");
    let lines = judge(history(Rules::Easa, at, 18..=28), &legal);
    assert_eq!(lines[0].worst, 96 * H);
    assert!(lines.iter().all(|line| !line.exceeded()), "{lines:?}");
}

#[test]
fn a_rolling_window_peaks_where_a_past_item_leaves_it_not_only_at_an_item_end() {
    // FAA 168 h of FDP. A past airport standby 28 Nov 22:00 – 29 Nov 10:00 (12 h)
    // leaves the window from 5 Dec 22:00 (its start + 168 h); a planned one
    // 5 Dec 20:00 – 6 Dec 08:00 enters from 20:00. The use climbs from 12 h to
    // 14 h by 22:00, stays flat while one enters as the other leaves, then falls:
    // the worst, 14 h, first at 5 Dec 22:00, which ends no item.
    let at = t("2026-12-01T00:00:00Z");
    let mut judge = Judge::new(Rules::Faa, at, TimeBase::utc());
    let past = (t("2026-11-28T22:00:00Z"), Some(t("2026-11-29T10:00:00Z")));
    judge.add_fdp("C1", past, Function::FlightCrew);
    judge.add_duty("C1", past, DutyType::AirportStandby, Function::FlightCrew);
    let text = r#"{"crew_id":"C1","kind":"duty","start":"2026-12-05T20:00:00Z","end":"2026-12-06T08:00:00Z","duty_type":"airport_standby"}"#;
    let plan = parse(text, at).expect("a plan");
    let lines = judge_lines(judge, &plan);
    let fdp = lines
        .iter()
        .find(|l| l.limit.window == "168h")
        .expect("168h");
    assert_eq!(
        (fdp.worst, fdp.worst_at),
        (14 * H, t("2026-12-05T22:00:00Z"))
    );
}

fn judge_lines(history: Judge, plan: &[Planned]) -> Vec<PlanLine> {
    judge(history, plan)
}

#[test]
fn history_is_cut_at_at_and_a_planned_flight_never_joins_a_stored_duty() {
    let at = t("2026-12-01T12:00:00Z");
    let mut judge = Judge::new(Rules::Faa, at, TimeBase::utc());
    // A duty open since 08:00 and its period: both end at --at for the plan.
    judge.add_duty(
        "C1",
        (t("2026-12-01T08:00:00Z"), None),
        DutyType::FlightDuty,
        Function::FlightCrew,
    );
    judge.add_fdp(
        "C1",
        (t("2026-12-01T08:00:00Z"), None),
        Function::FlightCrew,
    );
    // A flight stored after --at is left out.
    let later = t("2026-12-01T15:00:00Z");
    judge.add_flight(
        "C1",
        (Role::Operating, Function::FlightCrew),
        later,
        later + H,
    );
    // Planned: a flight right after --at, outside any planned duty: flight time,
    // no period.
    let text = plan_flight("2026-12-01T13:00:00Z", "2026-12-01T14:00:00Z");
    let plan = parse(&text, at).expect("a plan");
    let lines = judge_lines(judge, &plan);
    let of = |window: &str, measure: Measure| {
        lines
            .iter()
            .find(|l| l.limit.window == window && l.limit.measure == measure)
            .expect("a line")
            .worst
    };
    assert_eq!(of("672h", Measure::FlightTime), H);
    assert_eq!(of("168h", Measure::Fdp), 4 * H);
}

#[test]
fn rest_is_judged_when_each_planned_duty_would_begin_under_faa() {
    // Last duty ended 1 December 06:00; a duty planned 2 December 11:59 begins
    // after 29:59 free: E stays at the start of the first duty (free before it),
    // 30 Nov 20:00; one planned at 12:00 begins after 30 h: 0.
    let at = t("2026-12-01T08:00:00Z");
    let duty = (t("2026-11-30T20:00:00Z"), Some(t("2026-12-01T06:00:00Z")));
    for (start, expected) in [
        ("2026-12-02T11:59:00Z", 39 * H + 59 * MIN),
        ("2026-12-02T12:00:00Z", 0),
    ] {
        let mut judge = Judge::new(Rules::Faa, at, TimeBase::utc());
        judge.add_duty("C1", duty, DutyType::FlightDuty, Function::FlightCrew);
        let text = format!(
            r#"{{"crew_id":"C1","kind":"duty","start":"{start}","end":"2026-12-02T20:00:00Z"}}"#
        );
        let plan = parse(&text, at).expect("a plan");
        let lines = judge_lines(judge, &plan);
        let rest = lines
            .iter()
            .find(|l| l.limit.measure == Measure::Rest)
            .expect("rest");
        assert_eq!((rest.worst, rest.worst_at), (expected, t(start)), "{start}");
    }
}

#[test]
fn cabin_crew_planned_alone_have_no_faa_lines() {
    let at = t("2026-12-01T00:00:00Z");
    let text = r#"{"crew_id":"CC1","kind":"flight","off_blocks":"2026-12-02T06:00:00Z","on_blocks":"2026-12-02T08:00:00Z","function":"cabin_crew"}"#;
    let plan = parse(text, at).expect("a plan");
    let empty = |rules| Judge::new(rules, at, TimeBase::utc());
    assert!(judge(empty(Rules::Faa), &plan).is_empty());
    assert_eq!(judge(empty(Rules::Easa), &plan).len(), 7);
}

#[test]
fn every_bad_line_is_an_error_naming_it() {
    let at = t("2026-12-01T00:00:00Z");
    let good = plan_flight("2026-12-02T06:00:00Z", "2026-12-02T08:00:00Z");
    let cases = [
        ("{not json", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        (
            r#"{"crew_id":"C1","kind":"flight","off_blocks":"2026-12-02T06:00:00Z","on_blocks":"2026-12-02T08:00:00Z","seat":"1A"}"#,
            "unknown field \"seat\"",
        ),
        (
            r#"{"kind":"duty","start":"2026-12-02T06:00:00Z","end":"2026-12-02T08:00:00Z"}"#,
            "crew_id is missing",
        ),
        (
            r#"{"crew_id":"C1","kind":"duty","start":"2026-12-02T06:00:00","end":"2026-12-02T08:00:00Z"}"#,
            "start \"2026-12-02T06:00:00\" is not an RFC 3339 instant with an offset",
        ),
        (
            r#"{"crew_id":"C1","kind":"duty","start":"2026-12-02T08:00:00Z","end":"2026-12-02T06:00:00Z"}"#,
            "it ends (2026-12-02T06:00:00.000Z) before it starts (2026-12-02T08:00:00.000Z)",
        ),
        (
            r#"{"crew_id":"C1","kind":"duty","start":"2026-11-30T23:00:00Z","end":"2026-12-02T06:00:00Z"}"#,
            "before --at (2026-12-01T00:00:00.000Z; now unless given)",
        ),
        (
            r#"{"crew_id":"C1","kind":"standby","start":"2026-12-02T08:00:00Z"}"#,
            "kind \"standby\"",
        ),
        (
            r#"{"crew_id":"C1","kind":"duty","start":"2026-12-02T06:00:00Z","end":"2026-12-02T08:00:00Z","off_blocks":"2026-12-02T06:00:00Z"}"#,
            "a duty has no field off_blocks",
        ),
        (
            r#"{"crew_id":"C1","kind":"flight","off_blocks":"2026-12-02T06:00:00Z","on_blocks":"2026-12-02T08:00:00Z","role":"pilot"}"#,
            "role \"pilot\"",
        ),
        (
            r#"{"crew_id":"   ","kind":"flight","off_blocks":"2026-12-02T06:00:00Z","on_blocks":"2026-12-02T08:00:00Z"}"#,
            "crew_id must be",
        ),
    ];
    for (bad, why) in cases {
        let text = format!("{good}\n\n{bad}\n{good}\n");
        let error = parse(&text, at).expect_err(bad);
        assert_eq!(error.line, 3, "{bad}");
        assert!(error.to_string().starts_with("plan line 3: "), "{error}");
        assert!(error.why.contains(why), "{bad}: {error}");
    }
    assert_eq!(
        parse(&format!("{good}\n{good}"), at).expect("good").len(),
        2
    );
}
