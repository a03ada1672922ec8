//! `spoolite ftl` against an independent computation from the live rows: the test
//! reads `duty_event` itself, applies the contract's crew, flight, duty and window
//! rules (written here, apart from the product's code, with jiff's calendar), and
//! compares every JSON line, for both rule sets at several instants, on SQLite
//! and on PostgreSQL. Then the exit codes, `--crew` of someone without rows, the
//! JSON fields, the table, the site defaults file and an analyst's read-only run.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use jiff::{Timestamp, ToSpan};
use serde_json::Value;

use crate::support::{ANALYST, assert_root, share_read_only_with_analyst};
use crate::support::{event, json_batch, let_others_traverse, query, spoolite, spoolite_as, write};
use crate::support_pg::PgDb;

/// The instants each rule set is judged at: one before the data, a year's and a month's first instant,
/// a time inside the data, one with a fraction, and one after the last event (the
/// open duties then count up to it).
const INSTANTS: [&str; 7] = [
    "2024-12-31T00:00:00Z",
    "2025-03-01T00:00:00Z",
    "2026-01-01T00:00:00Z",
    "2026-01-01T03:30:00Z",
    "2026-01-20T11:17:30.250Z",
    "2026-02-01T00:00:00Z",
    "2026-03-10T06:00:00Z",
];

// ---------------------------------------------------------------------------------
// The data: flights and duties of a small crew pool over fourteen months, with
// every crew shape of the contract, retractions, corrections and open duties.

/// A deterministic generator (a 64-bit LCG), so every run builds the same data.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// A1 flies most flights (and exceeds limits); the others fly few.
const POOL: [&str; 12] = [
    "A1", "B2", "C3", "D4", "E5", "F6", "G7", "H8", "J9", "K10", "L11", "M12",
];

fn utc(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The crew list of one flight as the payload holds it: plain ids, objects with
/// and without a role, positioning crew, and (now and then) a duplicate, an
/// unknown role, an id with spaces around it and elements of no known shape.
fn crew_json(random: &mut Lcg, flight: u64) -> String {
    let mut members: Vec<&str> = Vec::new();
    if random.below(5) < 3 {
        members.push(POOL[0]);
    }
    while members.len() < 2 + random.below(3) as usize {
        let member = POOL[1 + random.below(POOL.len() as u64 - 1) as usize];
        if !members.contains(&member) {
            members.push(member);
        }
    }
    let mut elements: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(n, id)| match (n, random.below(4)) {
            (0, _) => format!("\"{id}\""),
            (_, 0) => format!("{{\"id\":\"{id}\",\"role\":\"positioning\"}}"),
            (_, 1) => format!("{{\"id\":\" {id} \",\"role\":\"operating\",\"seat\":2}}"),
            (_, 2) => format!("{{\"id\":\"{id}\"}}"),
            _ => format!("\"{id}\""),
        })
        .collect();
    match flight % 7 {
        // The first member listed again as positioning: operating wins.
        0 => elements.push(format!(
            "{{\"id\":\"{}\",\"role\":\"positioning\"}}",
            members[0]
        )),
        1 => elements.push("{\"id\":\"ZZ9\",\"role\":\"captain\"}".to_owned()),
        2 => elements.push("17".to_owned()),
        3 => elements.push("{\"id\":\"   \"}".to_owned()),
        _ => {}
    }
    format!("[{}]", elements.join(","))
}

/// Batch files (their texts) of flights from 2025-01-01 to 2026-02-19: one or
/// two a day, each a duty of the same id an hour before off-blocks to half an
/// hour after on-blocks. Every 13th flight's on-blocks is retracted (some then
/// corrected), every 29th duty's end too, the last days' duties stay open, one
/// flight lands before it left and one duty ends before it starts.
fn batches() -> Vec<String> {
    let mut random = Lcg(21);
    let mut first = Vec::new();
    let mut second = Vec::new();
    let start: Timestamp = "2025-01-01T00:00:00Z".parse().expect("start");
    let mut flight = 0u64;
    for day in 0..415i64 {
        for _ in 0..1 + random.below(2) {
            flight += 1;
            let id = format!("FT{flight:05}");
            let off = start + (day * 86_400 + 300 * random.below(250) as i64).seconds();
            let block = (45 + random.below(600) as i64).minutes();
            let mut on = off + block;
            if flight == 100 {
                on = off - 10.minutes();
            }
            let crew = crew_json(&mut random, flight);
            let payload = format!("{{\"crew\":{crew},\"tail\":\"G-TEST\"}}");
            let bare = "{\"tail\":\"G-TEST\"}";
            let duty_end = match day {
                406 => off - 3.hours(),
                _ => on + 30.minutes(),
            };
            first.push(event(
                &id,
                "duty_start",
                &utc(off - 1.hours()),
                Some(1),
                &payload,
            ));
            first.push(event(&id, "off_blocks", &utc(off), Some(1), &payload));
            first.push(event(
                &id,
                "takeoff",
                &utc(off + 10.minutes()),
                Some(1),
                bare,
            ));
            first.push(event(&id, "on_blocks", &utc(on), Some(1), bare));
            if day < 410 {
                second.push(event(&id, "duty_end", &utc(duty_end), Some(1), bare));
            }
            if flight.is_multiple_of(13) {
                let retraction = event(&id, "on_blocks", &utc(on), Some(2), bare)
                    .replace("\"payload\"", "\"retracted\":true,\"payload\"");
                second.push(retraction);
                if flight.is_multiple_of(26) {
                    let corrected = on + 17.minutes();
                    second.push(event(&id, "on_blocks", &utc(corrected), Some(2), bare));
                }
            }
            if flight.is_multiple_of(29) && day < 410 {
                let retraction = event(&id, "duty_end", &utc(duty_end), Some(2), bare)
                    .replace("\"payload\"", "\"retracted\":true,\"payload\"");
                second.push(retraction);
                let corrected = duty_end + 20.minutes();
                second.push(event(&id, "duty_end", &utc(corrected), Some(2), bare));
            }
        }
    }
    vec![json_batch(&first), json_batch(&second)]
}

/// The batch files in `dir`.
fn batch_files(dir: &Path) -> Vec<PathBuf> {
    batches()
        .iter()
        .enumerate()
        .map(|(n, text)| write(dir, &format!("crew{n}.json"), text))
        .collect()
}

fn ingest(db: &str, files: &[PathBuf]) {
    let output = spoolite()
        .args(["ingest", "--db", db])
        .args(files)
        .output()
        .expect("run spoolite ingest");
    assert!(
        output.status.success(),
        "ingest: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

// ---------------------------------------------------------------------------------
// The independent computation

/// One live event as `duty_event` has it.
struct Live {
    flight_id: String,
    kind: String,
    at: Timestamp,
    payload: Value,
}

/// The crew of an event by the contract: `crew` an array of ids and `{id, role}`
/// objects; ids trimmed, 1–64 characters `!`–`~`; an unknown shape or role left
/// out; an id listed twice is operating if either listing is.
fn crew_of(payload: &Value) -> BTreeMap<String, bool> {
    let mut crew = BTreeMap::new();
    let Some(elements) = payload.get("crew").and_then(Value::as_array) else {
        return crew;
    };
    for element in elements {
        let (id, operating) = match element {
            Value::String(id) => (id.as_str(), true),
            Value::Object(object) => {
                let Some(id) = object.get("id").and_then(Value::as_str) else {
                    continue;
                };
                match object.get("role") {
                    None => (id, true),
                    Some(Value::String(role)) if role == "operating" => (id, true),
                    Some(Value::String(role)) if role == "positioning" => (id, false),
                    Some(_) => continue,
                }
            }
            _ => continue,
        };
        let id = id.trim();
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
            continue;
        }
        *crew.entry(id.to_owned()).or_insert(false) |= operating;
    }
    crew
}

/// A span of a crew member's time: flight time (operating crew) or duty.
struct Spell {
    crew_id: String,
    flight_time: bool,
    start: Timestamp,
    /// None: an open duty.
    end: Option<Timestamp>,
}

/// Every crew member's flights (operating only) and duties from the live events.
fn spells(events: &[Live]) -> Vec<Spell> {
    let mut by_flight: BTreeMap<&str, Vec<&Live>> = BTreeMap::new();
    for event in events {
        by_flight.entry(&event.flight_id).or_default().push(event);
    }
    let mut spells = Vec::new();
    for events in by_flight.values() {
        let first = |kind: &str| {
            events
                .iter()
                .filter(|e| e.kind == kind)
                .min_by_key(|e| e.at)
        };
        let last = |kind: &str| {
            events
                .iter()
                .filter(|e| e.kind == kind)
                .max_by_key(|e| e.at)
        };
        // A flight with an off-blocks; its block time when it has one (on-blocks
        // not before off-blocks), else none (it still ends a flight duty period).
        if let Some(off) = first("off_blocks") {
            let on = last("on_blocks").map(|on| on.at).filter(|on| *on >= off.at);
            for (crew_id, operating) in crew_of(&off.payload) {
                if operating {
                    spells.push(Spell {
                        crew_id,
                        flight_time: true,
                        start: off.at,
                        end: on,
                    });
                }
            }
        }
        if let Some(start) = first("duty_start") {
            let end = last("duty_end")
                .map(|e| e.at)
                .filter(|end| *end >= start.at);
            for crew_id in crew_of(&start.payload).into_keys() {
                spells.push(Spell {
                    crew_id,
                    flight_time: false,
                    start: start.at,
                    end,
                });
            }
        }
    }
    spells
}

/// A window of the contract's table: measure, name, start for T (None: a rest
/// window), limit in hours.
type Window = (
    &'static str,
    &'static str,
    fn(Timestamp) -> Option<Timestamp>,
    i64,
);

fn days_before(at: Timestamp, days: i64) -> Option<Timestamp> {
    Some(at - (days * 24).hours())
}

fn midnight(date: jiff::civil::Date) -> Timestamp {
    jiff::tz::Offset::UTC
        .to_timestamp(date.at(0, 0, 0, 0))
        .expect("a timestamp")
}

fn utc_date(at: Timestamp) -> jiff::civil::Date {
    jiff::tz::Offset::UTC.to_datetime(at).date()
}

fn year_start(at: Timestamp) -> Option<Timestamp> {
    Some(midnight(jiff::civil::date(utc_date(at).year(), 1, 1)))
}

fn twelve_months_start(at: Timestamp) -> Option<Timestamp> {
    let date = utc_date(at);
    Some(midnight(
        jiff::civil::date(date.year(), date.month(), 1) - 11.months(),
    ))
}

fn calendar_days_start(at: Timestamp) -> Option<Timestamp> {
    Some(midnight(utc_date(at) - 364.days()))
}

const EASA: [Window; 7] = [
    ("flight_time", "28d", |t| days_before(t, 28), 100),
    ("flight_time", "calendar_year", year_start, 900),
    (
        "flight_time",
        "12_calendar_months",
        twelve_months_start,
        1000,
    ),
    ("duty", "7d", |t| days_before(t, 7), 60),
    ("duty", "14d", |t| days_before(t, 14), 110),
    ("duty", "28d", |t| days_before(t, 28), 190),
    ("rest", "since_extended_recovery_rest", |_| None, 168),
];

const FAA: [Window; 5] = [
    ("flight_time", "672h", |t| Some(t - 672.hours()), 100),
    (
        "flight_time",
        "365_calendar_days",
        calendar_days_start,
        1000,
    ),
    ("fdp", "168h", |t| Some(t - 168.hours()), 60),
    ("fdp", "672h", |t| Some(t - 672.hours()), 190),
    ("rest", "since_30h_free", |_| None, 138),
];

/// One crew member's flights (operating; end None: no block time) and duties
/// (end None: open), as the live events give them, not yet cut at T.
#[derive(Default)]
struct Crew {
    flights: Vec<(Timestamp, Option<Timestamp>)>,
    duties: Vec<(Timestamp, Option<Timestamp>)>,
}

fn crews(spells: &[Spell]) -> BTreeMap<String, Crew> {
    let mut crews: BTreeMap<String, Crew> = BTreeMap::new();
    for spell in spells {
        let crew = crews.entry(spell.crew_id.clone()).or_default();
        match spell.flight_time {
            true => crew.flights.push((spell.start, spell.end)),
            false => crew.duties.push((spell.start, spell.end)),
        }
    }
    crews
}

/// The union of `spans` (start, end), merged in start order.
fn merged(mut spans: Vec<(Timestamp, Timestamp)>) -> Vec<(Timestamp, Timestamp)> {
    spans.retain(|(start, end)| end > start);
    spans.sort();
    let mut out: Vec<(Timestamp, Timestamp)> = Vec::new();
    for (start, end) in spans {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// Nanoseconds of the merged spans from `from` to `to`.
fn nanos_inside(merged: &[(Timestamp, Timestamp)], from: Timestamp, to: Timestamp) -> i128 {
    merged
        .iter()
        .map(|(start, end)| {
            let (start, end) = ((*start).max(from), (*end).min(to));
            if end > start {
                end.as_nanosecond() - start.as_nanosecond()
            } else {
                0
            }
        })
        .sum()
}

/// The crew member's FDPs (14 CFR 117.3): each flight duty from its start to the
/// on-blocks of the last flight whose off-blocks lies within it, or to the duty's
/// end when that flight has no block time.
fn fdps(crew: &Crew) -> Vec<(Timestamp, Option<Timestamp>)> {
    crew.duties
        .iter()
        .filter_map(|(start, end)| {
            let last = crew
                .flights
                .iter()
                .filter(|(off, _)| off >= start && end.is_none_or(|end| *off <= end))
                .max_by_key(|(off, _)| *off)?;
            Some((*start, last.1.or(*end)))
        })
        .collect()
}

/// Cut at T (nothing after counts, an open span runs to T) and merged.
fn cut(spans: &[(Timestamp, Option<Timestamp>)], at: Timestamp) -> Vec<(Timestamp, Timestamp)> {
    merged(
        spans
            .iter()
            .map(|(start, end)| (*start, end.unwrap_or(at).min(at)))
            .collect(),
    )
}

/// Whether the free time from `start` (None: from before any duty) to `end`
/// is a recurrent extended recovery rest: 36 h holding two local nights (UTC),
/// each 8 h of one 22:00–08:00.
fn recovery_rest(start: Option<Timestamp>, end: Timestamp) -> bool {
    let Some(start) = start else { return true };
    if end.as_second() - start.as_second() < 36 * 3600 {
        return false;
    }
    let mut date = utc_date(start) - 1.day();
    let mut nights = 0;
    while midnight(date) < end {
        let night_start = midnight(date) + 22.hours();
        let night_end = night_start + 10.hours();
        let overlap = end.min(night_end).as_second() - start.max(night_start).as_second();
        if overlap >= 8 * 3600 {
            nights += 1;
        }
        date = date.tomorrow().expect("a date");
    }
    nights >= 2
}

/// The rest window's use at T, in nanoseconds: FAA T − E (E the end of the last
/// 30 free hours), EASA S − E′ (0 while the span running at T qualifies).
fn rest_nanos(crew: &Crew, window: &str, at: Timestamp) -> i128 {
    let busy: Vec<(Timestamp, Timestamp)> = cut(&crew.duties, at)
        .into_iter()
        .filter(|(start, _)| *start < at)
        .collect();
    // Free spans, earliest first: before the first duty, the gaps, the one at T.
    let mut free: Vec<(Option<Timestamp>, Timestamp)> = Vec::new();
    let mut previous_end = None;
    for (start, end) in &busy {
        free.push((previous_end, *start));
        previous_end = Some(*end);
    }
    let on_duty = busy.last().is_some_and(|(_, end)| *end >= at);
    if !on_duty {
        free.push((previous_end, at));
    }
    let nanos = |from: Timestamp, to: Timestamp| to.as_nanosecond() - from.as_nanosecond();
    if window == "since_30h_free" {
        let e = free
            .iter()
            .rev()
            .find(|(start, end)| {
                start.is_none_or(|start| end.as_second() - start.as_second() >= 30 * 3600)
            })
            .map(|(_, end)| *end)
            .expect("the time before the first duty is free");
        return nanos(e, at);
    }
    let (s, earlier) = match free.last() {
        Some((start, end)) if !on_duty && *end == at => {
            if recovery_rest(*start, *end) {
                return 0;
            }
            (start.expect("qualifies when open"), &free[..free.len() - 1])
        }
        _ => (at, &free[..]),
    };
    let e = earlier
        .iter()
        .rev()
        .find(|(start, end)| recovery_rest(*start, *end))
        .map(|(_, end)| *end)
        .expect("the time before the first duty qualifies");
    nanos(e, s)
}

/// What `ftl --json` must print at `at`: per (crew, measure, window), the minutes
/// used (exact) and the limit in minutes, for every crew member with any.
fn expected(
    spells: &[Spell],
    windows: &[Window],
    at: Timestamp,
) -> BTreeMap<(String, String, String), (f64, i64)> {
    let mut out = BTreeMap::new();
    for (crew_id, crew) in crews(spells) {
        let flights: Vec<(Timestamp, Option<Timestamp>)> = crew
            .flights
            .iter()
            .filter_map(|(off, on)| Some((*off, Some((*on)?))))
            .collect();
        let flight_time = cut(&flights, at);
        let duty = cut(&crew.duties, at);
        let fdp = cut(&fdps(&crew), at);
        let used: Vec<i128> = windows
            .iter()
            .map(
                |(measure, window, start_of, _)| match (*measure, start_of(at)) {
                    ("flight_time", Some(from)) => nanos_inside(&flight_time, from, at),
                    ("duty", Some(from)) => nanos_inside(&duty, from, at),
                    ("fdp", Some(from)) => nanos_inside(&fdp, from, at),
                    ("rest", None) => rest_nanos(&crew, window, at),
                    other => panic!("no such window {other:?}"),
                },
            )
            .collect();
        if used.iter().all(|nanos| *nanos == 0) {
            continue;
        }
        for ((measure, window, _, limit), nanos) in windows.iter().zip(used) {
            out.insert(
                (crew_id.clone(), measure.to_string(), window.to_string()),
                (nanos as f64 / 60e9, limit * 60),
            );
        }
    }
    out
}

/// Runs `ftl --json` and checks every line against the independent figures;
/// returns the exit code.
fn check_against_independent(db: &str, events: &[Live], rules: &str, at: &str) -> i32 {
    let windows: &[Window] = if rules == "easa" { &EASA } else { &FAA };
    let t: Timestamp = at.parse().expect("instant");
    let want = expected(&spells(events), windows, t);
    let output = ftl(db, &["--json", "--rules", rules, "--at", at]);
    let lines = json_lines(&output);
    let mut got = BTreeMap::new();
    let mut any_exceeded = false;
    for line in &lines {
        let key = (
            text(line, "crew_id"),
            text(line, "measure"),
            text(line, "window"),
        );
        assert_eq!(text(line, "rules"), rules);
        assert_eq!(
            text(line, "at"),
            t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
        );
        let used = line["used_minutes"].as_f64().expect("used_minutes");
        let limit = line["limit_minutes"].as_i64().expect("limit_minutes");
        let headroom = line["headroom_minutes"].as_f64().expect("headroom_minutes");
        let exceeded = line["exceeded"].as_bool().expect("exceeded");
        let (want_used, want_limit) = want
            .get(&key)
            .unwrap_or_else(|| panic!("{rules} at {at}: a line nobody expects: {line}"));
        assert!(
            (used - want_used).abs() <= 0.005 + 1e-9,
            "{rules} at {at}: {line} against {want_used}"
        );
        assert_eq!(limit, *want_limit, "{line}");
        assert!(
            (headroom - (*want_limit as f64 - want_used)).abs() <= 0.005 + 1e-9,
            "{line}"
        );
        assert_eq!(exceeded, *want_used > *want_limit as f64, "{line}");
        any_exceeded |= exceeded;
        assert!(
            got.insert(key, ()).is_none(),
            "{rules} at {at}: a line twice: {line}"
        );
    }
    let want_keys: BTreeSet<_> = want.keys().cloned().collect();
    let got_keys: BTreeSet<_> = got.into_keys().collect();
    assert_eq!(got_keys, want_keys, "{rules} at {at}: the lines printed");
    let code = output.status.code().expect("exit code");
    assert_eq!(
        code,
        i32::from(any_exceeded),
        "{rules} at {at}: the exit code"
    );
    code
}

// ---------------------------------------------------------------------------------
// Running ftl

fn ftl(db: &str, args: &[&str]) -> Output {
    spoolite()
        .args(["ftl", "--db", db])
        .args(args)
        .env_remove("SPOOLITE_DEFAULTS_FILE")
        .output()
        .expect("run spoolite ftl")
}

fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
        })
        .collect()
}

fn text(line: &Value, field: &str) -> String {
    line[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {line}"))
        .to_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A SQLite database holding the test's batches, in a folder of its own.
fn sqlite_database() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("state").join("spoolite.db");
    let files = batch_files(dir.path());
    ingest(&db.to_string_lossy(), &files);
    (dir, db)
}

fn sqlite_events(db: &Path) -> Vec<Live> {
    query(
        db,
        "SELECT flight_id, event_kind, instant_utc, payload FROM duty_event",
    )
    .into_iter()
    .map(live)
    .collect()
}

fn live(row: Vec<String>) -> Live {
    Live {
        flight_id: row[0].clone(),
        kind: row[1].clone(),
        at: row[2].parse().expect("instant_utc"),
        payload: serde_json::from_str(&row[3]).expect("payload"),
    }
}

// ---------------------------------------------------------------------------------
// The tests

#[test]
fn ftl_on_sqlite_agrees_with_the_live_rows_for_both_rule_sets_at_every_instant() {
    let (_dir, db) = sqlite_database();
    let events = sqlite_events(&db);
    assert!(
        events.len() > 3000,
        "the data holds {} live events",
        events.len()
    );
    let db = db.to_string_lossy().into_owned();
    let mut codes = BTreeSet::new();
    for rules in ["easa", "faa"] {
        for at in INSTANTS {
            codes.insert(check_against_independent(&db, &events, rules, at));
        }
    }
    assert_eq!(
        codes,
        BTreeSet::from([0, 1]),
        "some instants exceed a limit, some none"
    );
}

#[test]
fn ftl_on_postgresql_agrees_with_the_live_rows_for_both_rule_sets_at_every_instant() {
    let pg = PgDb::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = pg.uri();
    ingest(&uri, &batch_files(dir.path()));
    let events: Vec<Live> = pg
        .query("SELECT flight_id, event_kind, instant_utc, payload::text FROM duty_event")
        .into_iter()
        .map(live)
        .collect();
    assert!(
        events.len() > 3000,
        "the data holds {} live events",
        events.len()
    );
    for rules in ["easa", "faa"] {
        for at in INSTANTS {
            check_against_independent(&uri, &events, rules, at);
        }
    }
}

#[test]
fn the_exit_code_says_whether_a_named_crew_member_exceeds_a_limit() {
    let (_dir, db) = sqlite_database();
    let events = sqlite_events(&db);
    let db = db.to_string_lossy().into_owned();
    let at = "2026-01-20T11:17:30.250Z";
    let t: Timestamp = at.parse().expect("instant");
    let want = expected(&spells(&events), &EASA, t);
    let exceeds = |crew: &str| {
        want.iter()
            .any(|((c, _, _), (used, limit))| c == crew && *used > *limit as f64)
    };
    let over: Vec<&str> = POOL.iter().copied().filter(|c| exceeds(c)).collect();
    let within: Vec<&str> = POOL.iter().copied().filter(|c| !exceeds(c)).collect();
    assert!(
        !over.is_empty() && !within.is_empty(),
        "the data has both: {over:?} {within:?}"
    );
    let output = ftl(&db, &["--at", at, "--crew", over[0]]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stdout(&output).contains("EXCEEDED"), "{}", stdout(&output));
    let output = ftl(&db, &["--at", at, "--crew", within[0]]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!stdout(&output).contains("EXCEEDED"), "{}", stdout(&output));
}

#[test]
fn a_named_crew_member_without_rows_gets_every_window_with_zeros() {
    let (_dir, db) = sqlite_database();
    let db = db.to_string_lossy().into_owned();
    let output = ftl(
        &db,
        &[
            "--json",
            "--at",
            "2026-01-20T12:00:00Z",
            "--crew",
            "NOBODY",
            "--crew",
            " NOBODY ",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines = json_lines(&output);
    let windows: Vec<(String, String, f64, i64, f64, bool)> = lines
        .iter()
        .map(|l| {
            (
                text(l, "measure"),
                text(l, "window"),
                l["used_minutes"].as_f64().expect("used"),
                l["limit_minutes"].as_i64().expect("limit"),
                l["headroom_minutes"].as_f64().expect("headroom"),
                l["exceeded"].as_bool().expect("exceeded"),
            )
        })
        .collect();
    let zero = |measure: &str, window: &str, limit: i64| {
        (
            measure.to_owned(),
            window.to_owned(),
            0.0,
            limit,
            limit as f64,
            false,
        )
    };
    assert_eq!(
        windows,
        [
            zero("flight_time", "28d", 6000),
            zero("flight_time", "calendar_year", 54000),
            zero("flight_time", "12_calendar_months", 60000),
            zero("duty", "7d", 3600),
            zero("duty", "14d", 6600),
            zero("duty", "28d", 11400),
            zero("rest", "since_extended_recovery_rest", 10080),
        ]
    );
    assert!(lines.iter().all(|l| text(l, "crew_id") == "NOBODY"));
    assert_eq!(
        stderr(&output),
        "spoolite: warning: crew id \"NOBODY\" has no flight, duty or flight duty period in \
         any window: its lines are zeros\n"
    );
    // An id of the wrong case: the warning names the stored one.
    let output = ftl(&db, &["--at", "2026-01-20T12:00:00Z", "--crew", "a1"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        stderr(&output).contains(
            "crew id \"a1\" has no flight, duty or flight duty period in any window: its lines \
             are zeros; stored ids that differ only in letter case: A1"
        ),
        "{}",
        stderr(&output)
    );
    let output = ftl(
        &db,
        &[
            "--rules",
            "faa",
            "--at",
            "2026-01-20T12:00:00Z",
            "--crew",
            "NOBODY",
        ],
    );
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output),
        "faa limits at 2026-01-20T12:00:00.000Z: 1 crew member, 0 windows exceeded\n\
         CREW    MEASURE      WINDOW             USED    LIMIT  HEADROOM\n\
         NOBODY  FDP          168h               0:00    60:00     60:00\n\
         NOBODY  flight time  672h               0:00   100:00    100:00\n\
         NOBODY  rest         since_30h_free     0:00   138:00    138:00\n\
         NOBODY  FDP          672h               0:00   190:00    190:00\n\
         NOBODY  flight time  365_calendar_days  0:00  1000:00   1000:00\n"
    );
}

#[test]
fn each_json_line_has_exactly_the_contracts_fields() {
    let (_dir, db) = sqlite_database();
    let output = ftl(
        &db.to_string_lossy(),
        &["--json", "--at", "2026-01-20T12:00:00+01:00"],
    );
    let lines = json_lines(&output);
    assert!(!lines.is_empty());
    for line in &lines {
        let fields: Vec<&str> = line
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = fields.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [
                "at",
                "crew_id",
                "exceeded",
                "flags",
                "headroom_minutes",
                "limit_minutes",
                "measure",
                "rules",
                "used_minutes",
                "window"
            ]
        );
        assert_eq!(
            text(line, "at"),
            "2026-01-20T11:00:00.000Z",
            "T in UTC as spoolite writes times"
        );
        assert_eq!(text(line, "rules"), "easa", "the default rule set");
    }
}

#[test]
fn the_table_lists_least_headroom_first_with_the_exceeded_marked() {
    let (_dir, db) = sqlite_database();
    let output = ftl(&db.to_string_lossy(), &["--at", "2026-01-20T11:17:30.250Z"]);
    let text = stdout(&output);
    let mut rows = text.lines();
    let heading = rows.next().expect("heading");
    assert!(
        heading.starts_with("easa limits at 2026-01-20T11:17:30.250Z: "),
        "{heading}"
    );
    let columns: Vec<&str> = rows.next().expect("columns").split_whitespace().collect();
    assert_eq!(
        columns,
        ["CREW", "MEASURE", "WINDOW", "USED", "LIMIT", "HEADROOM"]
    );
    let headroom = |row: &str| -> i64 {
        // Cells are two spaces or more apart (`flight time` has one inside).
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        let h = cells[5];
        let (hours, minutes) = h.trim_start_matches('-').split_once(':').expect("h:mm");
        let minutes = hours.parse::<i64>().expect("h") * 60 + minutes.parse::<i64>().expect("mm");
        if h.starts_with('-') {
            -minutes
        } else {
            minutes
        }
    };
    // The rows, then a legend line per data quality code found.
    let (rows, legend): (Vec<&str>, Vec<&str>) = rows.partition(|r| !r.starts_with("! "));
    assert!(!rows.is_empty());
    for line in &legend {
        let code = line[2..].split(':').next().expect("a code");
        assert!(
            ["open_flight", "negative_block", "open_duty", "overlap"].contains(&code),
            "{line}"
        );
        assert!(rows.iter().any(|r| r.starts_with('!')), "{text}");
    }
    let headrooms: Vec<i64> = rows.iter().map(|r| headroom(r)).collect();
    assert!(
        headrooms.windows(2).all(|w| w[0] <= w[1]),
        "least headroom first:\n{text}"
    );
    for (row, headroom) in rows.iter().zip(&headrooms) {
        assert_eq!(row.ends_with("EXCEEDED"), *headroom < 0, "{row}");
    }
    assert_eq!(output.status.code(), Some(i32::from(headrooms[0] < 0)));
}

#[test]
fn operating_errors_exit_2_with_a_sentence() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nowhere").join("spoolite.db");
    let output = ftl(&missing.to_string_lossy(), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("does not exist"),
        "{}",
        stderr(&output)
    );
    assert!(
        !missing.parent().expect("folder").exists(),
        "nothing is created"
    );

    let (_data, db) = sqlite_database();
    let output = ftl(&db.to_string_lossy(), &["--at", "2026-01-20 12:00"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("RFC 3339"), "{}", stderr(&output));
    assert!(output.stdout.is_empty());

    // A database of schema 6, before the crew views.
    let older = dir.path().join("older.db");
    let conn = rusqlite::Connection::open(&older).expect("create");
    for migration in [
        include_str!("../../schema/0001_initial.sql"),
        include_str!("../../schema/0002_analyst_views.sql"),
        include_str!("../../schema/0003_binary_key.sql"),
        include_str!("../../schema/0004_times_sort.sql"),
        include_str!("../../schema/0005_retractions_change_feed.sql"),
        include_str!("../../schema/0006_flight_id_case.sql"),
    ] {
        conn.execute_batch(migration).expect("migrate");
    }
    conn.execute_batch("PRAGMA user_version = 6")
        .expect("version");
    drop(conn);
    let output = ftl(&older.to_string_lossy(), &[]);
    assert_eq!(output.status.code(), Some(2));
    let said = stderr(&output);
    assert!(
        said.contains("schema version 6") && said.contains("spoolite run"),
        "{said}"
    );
    assert_eq!(
        query(&older, "PRAGMA user_version")[0][0],
        "6",
        "ftl upgrades nothing"
    );
}

#[test]
fn the_site_defaults_file_names_the_database_and_the_rules() {
    let (dir, db) = sqlite_database();
    let defaults = dir.path().join("defaults");
    fs::write(
        &defaults,
        format!("SPOOLITE_DB=\"{}\"\nSPOOLITE_RULES=faa\n", db.display()),
    )
    .expect("write defaults");
    let output = spoolite()
        .args([
            "ftl",
            "--json",
            "--at",
            "2026-01-20T12:00:00Z",
            "--crew",
            "A1",
        ])
        .env("SPOOLITE_DEFAULTS_FILE", &defaults)
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(
        output.status.code().is_some_and(|c| c < 2),
        "{}",
        stderr(&output)
    );
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 5);
    assert!(lines.iter().all(|l| text(l, "rules") == "faa"));
}

#[test]
fn an_analyst_who_may_not_write_the_folder_runs_ftl() {
    assert_root();
    let (dir, db) = sqlite_database();
    let state = db.parent().expect("state folder");
    let_others_traverse(dir.path());
    share_read_only_with_analyst(state);
    let files_before = crate::support::names(state);
    let as_root = ftl(
        &db.to_string_lossy(),
        &["--json", "--at", "2026-01-20T12:00:00Z"],
    );
    let output = spoolite_as(ANALYST, ANALYST)
        .args(["ftl", "--json", "--at", "2026-01-20T12:00:00Z", "--db"])
        .arg(&db)
        .env_remove("SPOOLITE_DEFAULTS_FILE")
        .current_dir("/")
        .output()
        .expect("run as the analyst");
    assert_eq!(
        output.status.code(),
        as_root.status.code(),
        "{}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), stdout(&as_root));
    assert_eq!(
        crate::support::names(state),
        files_before,
        "the analyst created nothing"
    );
}

/// The SQL of the canned query `name` in packaging/datasette/metadata.yml: the
/// lines of its `sql: |-` block.
fn canned_query(name: &str) -> String {
    let metadata = include_str!("../../packaging/datasette/metadata.yml");
    let start = metadata
        .find(&format!("      {name}:\n"))
        .unwrap_or_else(|| panic!("no canned query {name}"));
    let block = &metadata[start..];
    let sql_at = block.find("sql: |-\n").expect("its sql") + "sql: |-\n".len();
    block[sql_at..]
        .lines()
        .take_while(|line| line.starts_with("          ") || line.is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_datasette_crew_headroom_query_agrees_with_ftl() {
    let (_dir, db) = sqlite_database();
    let at = "2026-01-20T11:17:30Z";
    let output = ftl(&db.to_string_lossy(), &["--json", "--at", at]);
    // The query has the windows of minutes; rest it leaves to ftl.
    let mut from_ftl: Vec<(String, String, String, f64, bool)> = json_lines(&output)
        .iter()
        .filter(|l| text(l, "measure") != "rest")
        .map(|l| {
            (
                text(l, "crew_id"),
                text(l, "measure"),
                text(l, "window"),
                l["headroom_minutes"].as_f64().expect("headroom") / 60.0,
                l["exceeded"].as_bool().expect("exceeded"),
            )
        })
        .collect();
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open");
    let sql = canned_query("crew_headroom");
    let mut statement = conn.prepare(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut from_sql: Vec<(String, String, String, f64, bool)> = statement
        .query_map(rusqlite::named_params! {":at": at}, |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(5)?,
                row.get::<_, i64>(6)? == 1,
            ))
        })
        .expect("run")
        .collect::<Result<_, _>>()
        .expect("rows");
    let key = |r: &(String, String, String, f64, bool)| (r.0.clone(), r.1.clone(), r.2.clone());
    from_ftl.sort_by_key(key);
    from_sql.sort_by_key(key);
    assert_eq!(from_sql.len(), from_ftl.len());
    for (sql, ftl) in from_sql.iter().zip(&from_ftl) {
        assert_eq!(key(sql), key(ftl));
        assert!(
            (sql.3 - ftl.3).abs() < 0.011,
            "{sql:?} against ftl's {ftl:?}"
        );
        assert_eq!(sql.4, ftl.4, "{sql:?} against ftl's {ftl:?}");
    }
}

// ---------------------------------------------------------------------------------
// ftl plan and ftl explain

/// The instant the plan starts from: inside the data, with a fraction.
const PLAN_AT: &str = "2026-01-20T11:17:30.250Z";

/// A week planned for A1 (who flies most): each day a duty 05:00–15:00 with two
/// sectors, a positioning leg after them, and one day an airport standby; plus
/// a day of B2's.
fn plan_text() -> String {
    let mut lines = Vec::new();
    for day in 21..=27 {
        let at = |hh_mm: &str| format!("2026-01-{day}T{hh_mm}:00Z");
        lines.push(format!(
            r#"{{"crew_id":"A1","kind":"duty","start":"{}","end":"{}"}}"#,
            at("05:00"),
            at("15:00")
        ));
        lines.push(format!(
            r#"{{"crew_id":"A1","kind":"flight","off_blocks":"{}","on_blocks":"{}"}}"#,
            at("06:00"),
            at("08:47")
        ));
        lines.push(format!(
            r#"{{"crew_id":"A1","kind":"flight","off_blocks":"{}","on_blocks":"{}"}}"#,
            at("09:30"),
            at("12:05")
        ));
        lines.push(format!(
            r#"{{"crew_id":"A1","kind":"flight","off_blocks":"{}","on_blocks":"{}","role":"positioning"}}"#,
            at("13:00"),
            at("14:00")
        ));
    }
    lines.push(
        r#"{"crew_id":"A1","kind":"duty","start":"2026-01-28T18:00:00Z","end":"2026-01-29T06:00:00Z","duty_type":"airport_standby"}"#
            .to_owned(),
    );
    lines.push(
        r#"{"crew_id":"B2","kind":"duty","start":"2026-01-22T10:00:00Z","end":"2026-01-22T20:00:00Z"}"#
            .to_owned(),
    );
    lines.push(
        r#"{"crew_id":"B2","kind":"flight","off_blocks":"2026-01-22T11:00:00Z","on_blocks":"2026-01-22T19:00:00Z"}"#
            .to_owned(),
    );
    lines.join("\n") + "\n"
}

/// The plan's items of one crew member as the test reads them: (kind, start,
/// end, operating, duty type).
fn planned(text: &str, crew_id: &str) -> Vec<(String, Timestamp, Timestamp, bool, String)> {
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a plan line"))
        .filter(|item| item["crew_id"] == crew_id)
        .map(|item| {
            let kind = item["kind"].as_str().expect("kind").to_owned();
            let (from, to) = match kind.as_str() {
                "duty" => ("start", "end"),
                _ => ("off_blocks", "on_blocks"),
            };
            let at = |name: &str| -> Timestamp {
                item[name]
                    .as_str()
                    .expect("instant")
                    .parse()
                    .expect("an instant")
            };
            (
                kind,
                at(from),
                at(to),
                item["role"] != "positioning",
                item["duty_type"]
                    .as_str()
                    .unwrap_or("flight_duty")
                    .to_owned(),
            )
        })
        .collect()
}

/// What `ftl plan --json` must print for `crew_id`, computed in the test: the
/// stored past cut at --at, the plan's items (its periods from its own flights),
/// and every window's use at every whole minute from --at to the horizon, at
/// --at itself and at the last microsecond of each calendar day (where a
/// calendar window's use peaks before it starts again): its largest value and
/// the earliest instant. Rest windows at each planned duty's start (faa) or end
/// (easa).
fn expected_plan(
    events: &[Live],
    text: &str,
    crew_id: &str,
    windows: &[Window],
    rules: &str,
    at: Timestamp,
) -> BTreeMap<(String, String), (f64, String)> {
    let all = crews(&spells(events));
    let history = all.get(crew_id).map(|c| Crew {
        flights: c.flights.clone(),
        duties: c.duties.clone(),
    });
    let history = history.unwrap_or_default();
    let cut_at = |spans: &[(Timestamp, Option<Timestamp>)]| -> Vec<(Timestamp, Option<Timestamp>)> {
        spans
            .iter()
            .filter(|(start, _)| *start < at)
            .map(|(start, end)| (*start, Some(end.unwrap_or(at).min(at))))
            .collect()
    };
    let items = planned(text, crew_id);
    let planned_duties: Vec<(Timestamp, Option<Timestamp>)> = items
        .iter()
        .filter(|i| i.0 == "duty")
        .map(|i| (i.1, Some(i.2)))
        .collect();
    let planned_flights: Vec<(Timestamp, Option<Timestamp>)> = items
        .iter()
        .filter(|i| i.0 == "flight" && i.3)
        .map(|i| (i.1, Some(i.2)))
        .collect();
    // Periods: the stored ones (from all events) cut at --at, and the plan's.
    let mut periods = cut_at(&fdps(&history));
    for item in items.iter().filter(|i| i.0 == "duty") {
        let last = planned_flights
            .iter()
            .filter(|(off, _)| *off >= item.1 && *off <= item.2)
            .max_by_key(|(off, _)| *off);
        match (item.4.as_str(), last) {
            ("airport_standby", _) => periods.push((item.1, Some(item.2))),
            (_, Some((_, on))) => periods.push((item.1, *on)),
            _ => {}
        }
    }
    let stored_flights: Vec<(Timestamp, Option<Timestamp>)> = history
        .flights
        .iter()
        .filter_map(|(off, on)| Some((*off, Some((*on)?))))
        .collect();
    let mut flights = cut_at(&stored_flights);
    flights.extend(planned_flights.iter().copied());
    let mut duties = cut_at(&history.duties);
    duties.extend(planned_duties.iter().copied());
    let horizon = items.iter().map(|i| i.2).max().expect("planned items");
    let merged_of = |spans: &[(Timestamp, Option<Timestamp>)]| {
        merged(spans.iter().map(|(s, e)| (*s, e.expect("cut"))).collect())
    };
    let (flight_time, duty, fdp) = (merged_of(&flights), merged_of(&duties), merged_of(&periods));
    let mut grid = vec![at];
    let mut minute = Timestamp::from_second(at.as_second() / 60 * 60 + 60).expect("a minute");
    while minute <= horizon {
        grid.push(minute);
        minute += 1.minute();
    }
    let mut day = utc_date(at);
    while midnight(day.tomorrow().expect("a day")) <= horizon {
        day = day.tomorrow().expect("a day");
        grid.push(midnight(day) - 1.microsecond());
    }
    grid.sort();
    let with_plan = Crew {
        flights: Vec::new(),
        duties: duties.clone(),
    };
    let rest_at: Vec<Timestamp> = items
        .iter()
        .filter(|i| i.0 == "duty")
        .filter(|i| rules == "easa" || i.4 != "ground_duty")
        .map(|i| if rules == "faa" { i.1 } else { i.2 })
        .collect();
    let mut out = BTreeMap::new();
    for (measure, window, start_of, _) in windows {
        let mut worst: Option<(i128, Timestamp)> = None;
        let instants: &[Timestamp] = if *measure == "rest" { &rest_at } else { &grid };
        for &t in instants {
            let used = match (*measure, start_of(t)) {
                ("flight_time", Some(from)) => nanos_inside(&flight_time, from, t),
                ("duty", Some(from)) => nanos_inside(&duty, from, t),
                ("fdp", Some(from)) => nanos_inside(&fdp, from, t),
                _ => rest_nanos(&with_plan, window, t),
            };
            if worst.is_none_or(|(w, _)| used > w) {
                worst = Some((used, t));
            }
        }
        let (nanos, when) = worst.expect("an instant");
        out.insert(
            (measure.to_string(), window.to_string()),
            (
                nanos as f64 / 60e9,
                when.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            ),
        );
    }
    out
}

fn check_plan_against_independent(db: &str, events: &[Live]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = plan_text();
    let plan = write(dir.path(), "plan.ndjson", &text);
    let at: Timestamp = PLAN_AT.parse().expect("an instant");
    let mut codes = BTreeSet::new();
    for (rules, windows) in [("easa", &EASA[..]), ("faa", &FAA[..])] {
        let output = ftl(
            db,
            &[
                "plan",
                &plan.to_string_lossy(),
                "--json",
                "--rules",
                rules,
                "--at",
                PLAN_AT,
            ],
        );
        let lines = json_lines(&output);
        assert!(!lines.is_empty(), "{}", stderr(&output));
        for crew_id in ["A1", "B2"] {
            let want = expected_plan(events, &text, crew_id, windows, rules, at);
            let got: BTreeMap<(String, String), (f64, String)> = lines
                .iter()
                .filter(|l| l["crew_id"] == crew_id)
                .map(|l| {
                    (
                        (text_of(l, "measure"), text_of(l, "window")),
                        (
                            l["worst_used_minutes"].as_f64().expect("minutes"),
                            text_of(l, "worst_at"),
                        ),
                    )
                })
                .collect();
            assert_eq!(got.len(), want.len(), "{rules} {crew_id}: {got:?}");
            for (key, (minutes, when)) in &want {
                let (got_minutes, got_when) = &got[key];
                assert!(
                    (got_minutes - minutes).abs() <= 0.005 + 1e-9,
                    "{rules} {crew_id} {key:?}: {got_minutes} against {minutes}"
                );
                assert_eq!(
                    got_when, when,
                    "{rules} {crew_id} {key:?}: the worst instant"
                );
            }
        }
        let exceeded = lines.iter().any(|l| l["exceeded"] == true);
        let code = output.status.code().expect("exit code");
        assert_eq!(code, i32::from(exceeded), "{rules}: {}", stderr(&output));
        codes.insert(code);
        // B2's day alone exceeds nothing: exit 0.
        let b2: String = text
            .lines()
            .filter(|l| l.contains("\"B2\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let b2 = write(dir.path(), "b2.ndjson", &b2);
        let output = ftl(
            db,
            &[
                "plan",
                &b2.to_string_lossy(),
                "--rules",
                rules,
                "--at",
                PLAN_AT,
            ],
        );
        assert!(!stdout(&output).contains("EXCEEDED"), "{}", stdout(&output));
        codes.insert(output.status.code().expect("exit code"));
    }
    assert_eq!(
        codes,
        BTreeSet::from([0, 1]),
        "A1's week exceeds, B2's day does not"
    );
}

fn text_of(line: &Value, field: &str) -> String {
    text(line, field)
}

#[test]
fn ftl_plan_agrees_with_a_search_of_every_minute_on_sqlite() {
    let (_dir, db) = sqlite_database();
    let events = sqlite_events(&db);
    check_plan_against_independent(&db.to_string_lossy(), &events);
}

#[test]
fn ftl_plan_agrees_with_a_search_of_every_minute_on_postgresql() {
    let pg = PgDb::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = pg.uri();
    ingest(&uri, &batch_files(dir.path()));
    let events: Vec<Live> = pg
        .client()
        .query(
            "SELECT flight_id, event_kind, instant_utc, payload::text FROM duty_event",
            &[],
        )
        .expect("live rows")
        .iter()
        .map(|row| live((0..4).map(|i| row.get::<_, String>(i)).collect()))
        .collect();
    check_plan_against_independent(&uri, &events);
}

/// Every window of minutes of three crew members at three instants: explain's
/// lines add up to what ftl prints, each names the events that bound it, and those
/// are live events of its item in a batch of the inbox; a rest window's free span
/// ends where ftl's figure says.
fn check_explain_adds_up(db: &str, backend_rows: &dyn Fn(&str) -> Vec<Vec<String>>) {
    for rules in ["easa", "faa"] {
        for at in [
            "2026-01-01T03:30:00Z",
            "2026-01-20T11:17:30.250Z",
            "2026-03-10T06:00:00Z",
        ] {
            let lines = json_lines(&ftl(db, &["--json", "--rules", rules, "--at", at]));
            for crew_id in ["A1", "B2", "C3"] {
                for line in lines.iter().filter(|l| l["crew_id"] == crew_id) {
                    let (measure, window) = (text(line, "measure"), text(line, "window"));
                    let used = line["used_minutes"].as_f64().expect("used");
                    let args = [
                        "explain",
                        "--crew",
                        crew_id,
                        "--window",
                        &window,
                        "--measure",
                        &measure,
                        "--rules",
                        rules,
                        "--at",
                        at,
                        "--json",
                    ];
                    let output = ftl(db, &args);
                    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
                    let items = json_lines(&output);
                    let what = format!("{rules} {at} {crew_id} {measure} {window}");
                    if measure == "rest" {
                        assert!(items.len() <= 1, "{what}: {items:?}");
                        if let Some(item) = items.first() {
                            assert_eq!(item["item"], "free_span", "{what}");
                            assert!((item["minutes"].as_f64().expect("m") - used).abs() < 0.011);
                        }
                        continue;
                    }
                    let sum: f64 = items
                        .iter()
                        .map(|i| i["minutes"].as_f64().expect("m"))
                        .sum();
                    assert!(
                        (sum - used).abs() <= 0.005 * (items.len() as f64 + 1.0),
                        "{what}: the lines add up to {sum}, ftl says {used}: {items:?}"
                    );
                    for item in &items {
                        let events = item["events"].as_array().expect("events");
                        assert!(!events.is_empty(), "{what}: {item}");
                        for event in events {
                            let key = event["idempotency_key"].as_str().expect("key");
                            let found = backend_rows(&format!(
                                "SELECT d.instant_utc, i.file_name FROM duty_event AS d
                                 JOIN ingest_inbox AS i ON i.batch_digest = d.batch_digest
                                 WHERE d.idempotency_key = '{key}'"
                            ));
                            assert_eq!(
                                found,
                                [[text(event, "instant_utc"), text(event, "file_name")]],
                                "{what}: {event}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn ftl_explain_lines_add_up_to_ftls_figure_and_name_live_events_on_sqlite() {
    let (_dir, db) = sqlite_database();
    let rows = |sql: &str| query(&db, sql);
    check_explain_adds_up(&db.to_string_lossy(), &rows);
}

#[test]
fn ftl_explain_lines_add_up_to_ftls_figure_and_name_live_events_on_postgresql() {
    let pg = PgDb::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = pg.uri();
    ingest(&uri, &batch_files(dir.path()));
    let rows = |sql: &str| -> Vec<Vec<String>> {
        pg.client()
            .query(sql, &[])
            .expect("query")
            .iter()
            .map(|row| (0..row.len()).map(|i| row.get::<_, String>(i)).collect())
            .collect()
    };
    check_explain_adds_up(&uri, &rows);
}

#[test]
fn ftl_plan_and_explain_say_what_is_wrong_with_exit_2() {
    let (dir, db) = sqlite_database();
    let db = db.to_string_lossy().into_owned();
    let bad = write(
        dir.path(),
        "bad-plan.ndjson",
        "{\"crew_id\":\"A1\",\"kind\":\"duty\",\"start\":\"2026-01-21T05:00:00Z\",\"end\":\"2026-01-21T15:00:00Z\"}\n{\"crew_id\":\"A1\",\"kind\":\"nap\"}\n",
    );
    let output = ftl(&db, &["plan", &bad.to_string_lossy(), "--at", PLAN_AT]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty(), "nothing judged");
    assert!(
        stderr(&output).contains("plan line 2: kind \"nap\" is neither duty nor flight"),
        "{}",
        stderr(&output)
    );
    let output = ftl(&db, &["plan", "/nonexistent/plan.ndjson"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("read the plan /nonexistent/plan.ndjson"),
        "{}",
        stderr(&output)
    );
    let empty = write(dir.path(), "empty.ndjson", "\n");
    let output = ftl(&db, &["plan", &empty.to_string_lossy()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for (args, says) in [
        (vec!["explain", "--window", "28d"], "exactly one --crew"),
        (
            vec!["explain", "--crew", "A1", "--window", "28d"],
            "easa names two windows 28d (flight_time, duty): pass --measure",
        ),
        (
            vec!["explain", "--crew", "A1", "--window", "9d"],
            "easa has no window 9d",
        ),
    ] {
        let output = ftl(&db, &args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}
