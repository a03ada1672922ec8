//! The crew views `crew_flight` and `crew_duty` on both backends: a flight's crew
//! from its first live off-blocks, its block time, a duty open and closed, and what
//! corrections and retractions do to them.

use std::collections::BTreeMap;

use crate::pg_contract::Backend;
use crate::support::{downgrade_to_schema_6, downgrade_to_schema_8, downgrade_to_schema_10};
use crate::support::{event, ingest_json, json_batch, spoolite, write};

/// The three crew views, as `crew_flight`, `crew_duty` and `crew_fdp` read them,
/// with every column.
pub(crate) fn crew_views(db: &Backend) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        db.lines(
            "SELECT crew_id, role, function, flight_id, off_blocks_utc, on_blocks_utc,
                    cast(round(block_minutes * 100) AS bigint){t}
             FROM crew_flight",
        ),
        db.lines(
            "SELECT crew_id, role, function, duty_type, duty_id, duty_start_utc,
                    coalesce(duty_end_utc, 'NULL'),
                    coalesce(cast(round(duty_minutes * 100) AS bigint){t}, 'NULL')
             FROM crew_duty",
        ),
        crew_fdp(db),
    )
}

/// `crew_fdp` as `crew_id|function|duty_id|start|end|centi-minutes`, sorted.
pub(crate) fn crew_fdp(db: &Backend) -> Vec<String> {
    db.lines(
        "SELECT crew_id, function, duty_id, fdp_start_utc, coalesce(fdp_end_utc, 'NULL'),
                coalesce(cast(round(fdp_minutes * 100) AS bigint){t}, 'NULL')
         FROM crew_fdp",
    )
}

/// An instant's milliseconds since the epoch.
fn millis(instant: &str) -> i64 {
    let at: jiff::Timestamp = instant.parse().expect("a canonical instant");
    at.as_millisecond()
}

/// Minutes between two instants in hundredths, rounded (what the views' minutes,
/// rounded to 0.01, read times 100).
fn centi_minutes(from: &str, to: &str) -> i64 {
    let ms = millis(to) - millis(from);
    (ms as f64 / 600.0).round() as i64
}

/// One crew member's listing on a flight or duty, as the live rows give it.
struct Listed {
    crew_id: String,
    operating: bool,
    function: &'static str,
    id: String,
    start: (i64, String),
    /// The end, when there is one (and it is not before the start).
    end: Option<(i64, String)>,
}

/// The three crew views as the contract defines them, computed in the test from
/// `duty_event`'s live rows (with `spoolite::crew`'s rules, table-tested on their
/// own, for the crew of a payload), sorted and written like `crew_views`.
pub(crate) fn crew_from_live_rows(db: &Backend) -> (Vec<String>, Vec<String>, Vec<String>) {
    if !db.has_schema() {
        return (Vec::new(), Vec::new(), Vec::new());
    }
    // Per flight id and kind: the earliest (with its payload) and the latest
    // (with its payload).
    type Span = ((i64, String, String), (i64, String, String));
    let mut spans: BTreeMap<(String, String), Span> = BTreeMap::new();
    for row in db.rows(
        "SELECT flight_id, event_kind, instant_utc, payload FROM duty_event
         WHERE event_kind IN ('off_blocks', 'on_blocks', 'duty_start', 'duty_end',
                              'crew_assignment')",
    ) {
        let [flight, kind, instant, payload] = &row[..] else {
            unreachable!("four columns")
        };
        let at = millis(instant);
        let point = (at, instant.clone(), payload.clone());
        let span = spans
            .entry((flight.clone(), kind.clone()))
            .or_insert_with(|| (point.clone(), point.clone()));
        if at < span.0.0 {
            span.0 = point.clone();
        }
        if at > span.1.0 {
            span.1 = point;
        }
    }
    let mut flights: Vec<Listed> = Vec::new();
    let mut duties: Vec<(Listed, &'static str)> = Vec::new();
    for ((id, kind), ((start_at, start, payload), _)) in &spans {
        let listed = |member: &spoolite::crew::Member, end: Option<(i64, String)>| Listed {
            crew_id: member.id().to_owned(),
            operating: member.role() == spoolite::crew::Role::Operating,
            function: member.function().as_str(),
            id: id.clone(),
            start: (*start_at, start.clone()),
            end,
        };
        match kind.as_str() {
            "off_blocks" => {
                // The latest live crew assignment gives the crew, else this.
                let crew = match spans.get(&(id.clone(), "crew_assignment".into())) {
                    Some((_, (_, _, assigned))) => spoolite::crew::of_payload(assigned),
                    None => spoolite::crew::of_payload(payload),
                };
                let end = spans
                    .get(&(id.clone(), "on_blocks".into()))
                    .map(|(_, (at, end, _))| (*at, end.clone()))
                    .filter(|(end_at, _)| end_at >= start_at);
                flights.extend(crew.iter().map(|member| listed(member, end.clone())));
            }
            "duty_start" => {
                let (crew, duty_type) = spoolite::crew::of_duty_payload(payload);
                let end = spans
                    .get(&(id.clone(), "duty_end".into()))
                    .map(|(_, (at, end, _))| (*at, end.clone()))
                    .filter(|(end_at, _)| end_at >= start_at);
                duties.extend(
                    crew.iter()
                        .map(|member| (listed(member, end.clone()), duty_type.as_str())),
                );
            }
            _ => {}
        }
    }
    let minutes = |l: &Listed| match &l.end {
        Some((_, end)) => centi_minutes(&l.start.1, end).to_string(),
        None => "NULL".to_owned(),
    };
    let end_text = |l: &Listed| l.end.as_ref().map_or("NULL".to_owned(), |e| e.1.clone());
    let role = |l: &Listed| {
        if l.operating {
            "operating"
        } else {
            "positioning"
        }
    };
    let mut flight_rows: Vec<String> = flights
        .iter()
        .filter(|l| l.end.is_some())
        .map(|l| {
            format!(
                "{}|{}|{}|{}|{}|{}|{}",
                l.crew_id,
                role(l),
                l.function,
                l.id,
                l.start.1,
                end_text(l),
                minutes(l)
            )
        })
        .collect();
    let mut duty_rows: Vec<String> = duties
        .iter()
        .map(|(l, duty_type)| {
            format!(
                "{}|{}|{}|{duty_type}|{}|{}|{}|{}",
                l.crew_id,
                role(l),
                l.function,
                l.id,
                l.start.1,
                end_text(l),
                minutes(l)
            )
        })
        .collect();
    // Flight duty periods: an airport standby whole; a flight or ground duty to
    // the on-blocks of the member's last operating flight whose off-blocks lies in
    // it (to the duty's end when that flight has no block time).
    let mut fdp_rows = Vec::new();
    for (duty, duty_type) in &duties {
        let end = match *duty_type {
            "airport_standby" => duty.end.clone(),
            "flight_duty" | "ground_duty" => {
                let last = flights
                    .iter()
                    .filter(|f| f.crew_id == duty.crew_id && f.operating)
                    .filter(|f| {
                        f.start.0 >= duty.start.0
                            && duty.end.as_ref().is_none_or(|e| f.start.0 <= e.0)
                    })
                    .max_by_key(|f| f.start.0);
                match last {
                    None => continue,
                    Some(flight) if flight.end.is_some() => flight.end.clone(),
                    Some(_) => duty.end.clone(),
                }
            }
            _ => continue,
        };
        let fdp = Listed {
            crew_id: duty.crew_id.clone(),
            operating: true,
            function: duty.function,
            id: duty.id.clone(),
            start: duty.start.clone(),
            end,
        };
        fdp_rows.push(format!(
            "{}|{}|{}|{}|{}|{}",
            fdp.crew_id,
            fdp.function,
            fdp.id,
            fdp.start.1,
            end_text(&fdp),
            minutes(&fdp)
        ));
    }
    flight_rows.sort();
    duty_rows.sort();
    fdp_rows.sort();
    (flight_rows, duty_rows, fdp_rows)
}

/// `crew_flight` as `crew_id|role|flight_id|off|on|centi-minutes`, sorted.
pub(crate) fn crew_flight(db: &Backend) -> Vec<String> {
    db.lines(
        "SELECT crew_id, role, flight_id, off_blocks_utc, on_blocks_utc,
                cast(round(block_minutes * 100) AS bigint){t}
         FROM crew_flight",
    )
}

/// `crew_duty` as `crew_id|role|duty_id|start|end|centi-minutes`, sorted.
pub(crate) fn crew_duty(db: &Backend) -> Vec<String> {
    db.lines(
        "SELECT crew_id, role, duty_id, duty_start_utc, coalesce(duty_end_utc, 'NULL'),
                coalesce(cast(round(duty_minutes * 100) AS bigint){t}, 'NULL')
         FROM crew_duty",
    )
}

/// Ingests `before.json`: one flight, off and on blocks at `(off, on)` with the
/// crew of `payload`, so that a later file's batch goes into stored crew tables.
fn ingest_a_flight_before(
    db: &Backend,
    dir: &std::path::Path,
    flight: &str,
    payload: &str,
    (off, on): (&str, &str),
) {
    let events = [
        timed(flight, "off_blocks", off, 1, payload),
        timed(flight, "on_blocks", on, 1, "{}"),
    ];
    ingest(db, dir, "before.json", &events);
}

/// Ingests one batch of `events` as `name` and expects it processed.
fn ingest(db: &Backend, dir: &std::path::Path, name: &str, events: &[String]) {
    let path = write(dir, name, json_batch(events));
    let (code, lines) = ingest_json(&db.db(), &[&path]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "processed", "{lines:?}");
}

fn timed(flight: &str, kind: &str, instant: &str, revision: i64, payload: &str) -> String {
    event(flight, kind, instant, Some(revision), payload)
}

fn retracted(flight: &str, kind: &str, instant: &str, revision: i64) -> String {
    let text = timed(flight, kind, instant, revision, "{}");
    format!(
        "{},\"retracted\":true}}",
        text.strip_suffix('}').expect("an object")
    )
}

const FL: &str = "BA0117-20261129";
const OFF: &str = "2026-11-29T10:05:00Z";
const ON: &str = "2026-11-29T12:35:00Z";

/// The story of one flight and one duty, batch by batch, with the views after each.
pub(crate) fn check_crew_story(db: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let crew =
        r#"{"crew":[" C1 ",{"id":"C2","role":"positioning"},{"id":"C1","role":"positioning"},7]}"#;
    // Off-blocks alone: no block time, no row.
    ingest(
        db,
        dir.path(),
        "a.json",
        &[timed(FL, "off_blocks", OFF, 1, crew)],
    );
    assert_eq!(crew_flight(db), Vec::<String>::new());
    // On-blocks: 150 minutes for each of its crew, operating wins for C1.
    ingest(
        db,
        dir.path(),
        "b.json",
        &[timed(FL, "on_blocks", ON, 1, "{}")],
    );
    assert_eq!(
        crew_flight(db),
        [
            format!("C1|operating|{FL}|{OFF}|{ON}|15000"),
            format!("C2|positioning|{FL}|{OFF}|{ON}|15000"),
        ]
    );
    // A return to ramp: a second off-blocks, later, with other crew, keeps the
    // first one's crew; a later on-blocks lengthens the block time.
    ingest(
        db,
        dir.path(),
        "c.json",
        &[
            timed(
                FL,
                "off_blocks",
                "2026-11-29T10:40:00Z",
                1,
                r#"{"crew":["C9"]}"#,
            ),
            timed(FL, "on_blocks", "2026-11-29T12:50:00Z", 1, "{}"),
        ],
    );
    let late_on = "2026-11-29T12:50:00Z";
    assert_eq!(
        crew_flight(db),
        [
            format!("C1|operating|{FL}|{OFF}|{late_on}|16500"),
            format!("C2|positioning|{FL}|{OFF}|{late_on}|16500"),
        ]
    );
    // The later on-blocks retracted: its minutes go back.
    ingest(
        db,
        dir.path(),
        "d.json",
        &[retracted(FL, "on_blocks", late_on, 2)],
    );
    assert_eq!(
        crew_flight(db),
        [
            format!("C1|operating|{FL}|{OFF}|{ON}|15000"),
            format!("C2|positioning|{FL}|{OFF}|{ON}|15000"),
        ]
    );
    // A corrected crew list on the first off-blocks moves the minutes.
    ingest(
        db,
        dir.path(),
        "e.json",
        &[timed(
            FL,
            "off_blocks",
            OFF,
            2,
            r#"{"crew":["C3"],"tail":"G-XWBA"}"#,
        )],
    );
    assert_eq!(
        crew_flight(db),
        [format!("C3|operating|{FL}|{OFF}|{ON}|15000")]
    );
    // The first off-blocks retracted: the return to ramp's becomes the first.
    ingest(
        db,
        dir.path(),
        "f.json",
        &[retracted(FL, "off_blocks", OFF, 3)],
    );
    let ramp = "2026-11-29T10:40:00Z";
    assert_eq!(
        crew_flight(db),
        [format!("C9|operating|{FL}|{ramp}|{ON}|11500")]
    );
    // Every on-blocks retracted: no block time, no row.
    ingest(
        db,
        dir.path(),
        "g.json",
        &[retracted(FL, "on_blocks", ON, 2)],
    );
    assert_eq!(crew_flight(db), Vec::<String>::new());

    // A duty: open while it has no duty_end.
    let duty = "DUTY-C1-20261129";
    let start = "2026-11-29T08:45:00Z";
    ingest(
        db,
        dir.path(),
        "h.json",
        &[timed(
            duty,
            "duty_start",
            start,
            1,
            r#"{"crew":["C1","C2"]}"#,
        )],
    );
    assert_eq!(
        crew_duty(db),
        [
            format!("C1|operating|{duty}|{start}|NULL|NULL"),
            format!("C2|operating|{duty}|{start}|NULL|NULL"),
        ]
    );
    // An end before its start leaves it open; a later one closes it.
    ingest(
        db,
        dir.path(),
        "i.json",
        &[timed(duty, "duty_end", "2026-11-29T08:00:00Z", 1, "{}")],
    );
    assert_eq!(crew_duty(db).len(), 2);
    assert!(crew_duty(db).iter().all(|row| row.ends_with("|NULL|NULL")));
    let end = "2026-11-29T13:15:30Z";
    ingest(
        db,
        dir.path(),
        "j.json",
        &[timed(duty, "duty_end", end, 1, "{}")],
    );
    assert_eq!(
        crew_duty(db),
        [
            format!("C1|operating|{duty}|{start}|{end}|27050"),
            format!("C2|operating|{duty}|{start}|{end}|27050"),
        ]
    );
    // An earlier duty_start with another crew takes over.
    let earlier = "2026-11-29T08:30:00Z";
    ingest(
        db,
        dir.path(),
        "k.json",
        &[timed(
            duty,
            "duty_start",
            earlier,
            1,
            r#"{"crew":[{"id":"C4","role":"positioning"}]}"#,
        )],
    );
    assert_eq!(
        crew_duty(db),
        [format!("C4|positioning|{duty}|{earlier}|{end}|28550")]
    );
}

#[test]
fn the_crew_views_follow_corrections_and_retractions() {
    check_crew_story(&Backend::sqlite());
}

#[test]
fn the_crew_views_follow_corrections_and_retractions_on_postgres() {
    check_crew_story(&Backend::postgres());
}

/// A file of events already stored (the same events re-sent under another batch
/// id: every one `unchanged`) rewrites no crew row of the flights stored before
/// it; a later file that writes one of a stored flight's crew-kind events (its
/// on-blocks) brings that flight's rows, and only that flight's, up to date.
#[test]
fn a_resent_file_of_unchanged_events_rewrites_no_crew_row() {
    let db = Backend::sqlite();
    let dir = tempfile::tempdir().expect("temp dir");
    let other = "BA0200-20261129";
    let duty = "D-C7-20261129";
    let first = [
        timed(FL, "off_blocks", OFF, 1, r#"{"crew":["C1","C2"]}"#),
        timed(FL, "on_blocks", ON, 1, "{}"),
        timed(other, "off_blocks", OFF, 1, r#"{"crew":["C3"]}"#),
        timed(duty, "duty_start", OFF, 1, r#"{"crew":["C7"]}"#),
    ];
    ingest(&db, dir.path(), "a.json", &first);
    let before = crew_views(&db);
    assert_eq!(before.0.len(), 2, "{before:?}");
    assert_eq!(before.1.len(), 1, "{before:?}");
    // Every write to the crew tables from here on leaves a line in crew_writes.
    let conn = rusqlite::Connection::open(db.db()).expect("open");
    let mut probe = String::from("CREATE TABLE crew_writes (what TEXT NOT NULL);");
    for table in ["spoolite_crew_flight", "spoolite_crew_duty"] {
        for (op, row) in [("INSERT", "new"), ("DELETE", "old"), ("UPDATE", "new")] {
            probe.push_str(&format!(
                "CREATE TRIGGER {table}_{op} AFTER {op} ON {table}
                 BEGIN INSERT INTO crew_writes VALUES ('{op} {table} ' || {row}.crew_id); END;"
            ));
        }
    }
    conn.execute_batch(&probe).expect("triggers");
    let writes = || crate::support::query(&db.db(), "SELECT what FROM crew_writes ORDER BY what");
    let resent = format!(
        "{{\"batch_id\":\"resent\",\"events\":[{}]}}",
        first.join(",\n")
    );
    let path = write(dir.path(), "a-again.json", resent);
    let (code, lines) = ingest_json(&db.db(), &[&path]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "processed", "{lines:?}");
    assert_eq!(lines[0]["unchanged"], 4, "{lines:?}");
    assert_eq!(writes(), Vec::<Vec<String>>::new());
    assert_eq!(crew_views(&db), before);
    // A new revision of every event with the same payloads: every row is
    // `updated`, no crew row changes, none is written.
    let revised: Vec<String> = first
        .iter()
        .map(|e| e.replace("\"source_revision\":1", "\"source_revision\":2"))
        .collect();
    assert_ne!(revised, first);
    let (code, lines) = ingest_json(
        &db.db(),
        &[&write(dir.path(), "a-2.json", json_batch(&revised))],
    );
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["updated"], 4, "{lines:?}");
    assert_eq!(writes(), Vec::<Vec<String>>::new());
    assert_eq!(crew_views(&db), before);
    // A new revision of the duty's start with another crew rewrites that duty's rows.
    ingest(
        &db,
        dir.path(),
        "a-3.json",
        &[timed(duty, "duty_start", OFF, 3, r#"{"crew":["C8"]}"#)],
    );
    assert_eq!(
        writes(),
        [
            vec!["DELETE spoolite_crew_duty C7".to_owned()],
            vec!["INSERT spoolite_crew_duty C8".to_owned()],
        ]
    );
    conn.execute("DELETE FROM crew_writes", []).expect("clear");
    // The other flight's on-blocks: its crew rows are written, nobody else's.
    let on = "2026-11-29T11:05:00Z";
    ingest(
        &db,
        dir.path(),
        "b.json",
        &[timed(other, "on_blocks", on, 1, "{}")],
    );
    // (Its rows without block time go, and come back with it.)
    assert_eq!(
        writes(),
        [
            vec!["DELETE spoolite_crew_flight C3".to_owned()],
            vec!["INSERT spoolite_crew_flight C3".to_owned()]
        ]
    );
    assert_eq!(
        crew_flight(&db),
        [
            format!("C1|operating|{FL}|{OFF}|{ON}|15000"),
            format!("C2|operating|{FL}|{OFF}|{ON}|15000"),
            format!("C3|operating|{other}|{OFF}|{on}|6000"),
        ]
    );
    assert_eq!(crew_views(&db), crew_from_live_rows(&db));
}

/// The crew tables' indexes, as the schema defines them.
fn crew_indexes(db: &Backend) -> Vec<Vec<String>> {
    crate::support::query(
        &db.db(),
        "SELECT name, sql FROM sqlite_master
         WHERE type = 'index' AND tbl_name LIKE 'spoolite_crew%' ORDER BY name",
    )
}

/// Ingests `events` as `name` with the debug log on; returns the log.
fn ingest_logged(db: &Backend, dir: &std::path::Path, name: &str, events: &[String]) -> String {
    let path = write(dir, name, json_batch(events));
    crate::support::ingest_logged(&db.db(), &path)
}

/// A correction of a few flights' crew (under a third of the flights) rewrites
/// their rows through the crew tables' indexes; one of a third of them or more
/// drops those indexes, writes the rows and builds the indexes again. Either way
/// the views end as the live events give them, and the indexes as the schema has
/// them.
#[test]
fn a_correction_of_most_flights_crew_writes_it_with_the_indexes_built_again() {
    let db = Backend::sqlite();
    let dir = tempfile::tempdir().expect("temp dir");
    let day = |flight: usize| format!("BA{:04}-20261129", 100 + flight);
    let duty = |flight: usize| format!("D-{flight}-20261129");
    let events = |revision: i64, crew: &str| -> Vec<String> {
        (0..9)
            .flat_map(|flight| {
                let payload = format!(r#"{{"crew":["{crew}{flight}","{crew}9{flight}"]}}"#);
                [
                    timed(&day(flight), "off_blocks", OFF, revision, &payload),
                    timed(&day(flight), "on_blocks", ON, revision, "{}"),
                    timed(&duty(flight), "duty_start", OFF, revision, &payload),
                    timed(&duty(flight), "duty_end", ON, revision, "{}"),
                ]
            })
            .collect()
    };
    ingest(&db, dir.path(), "a.json", &events(1, "A"));
    let indexes = crew_indexes(&db);
    assert_eq!(indexes.len(), 6, "{indexes:?}");
    assert_eq!(crew_flight(&db).len(), 18);
    // A correction of the first `n` of the 18 flights and duties (the flights
    // first): five stay below a third, through the indexes; six are a third.
    let first = |n: usize, revision: i64, crew: &str| -> Vec<String> {
        let ids: Vec<String> = (0..9).map(day).chain((0..9).map(duty)).take(n).collect();
        events(revision, crew)
            .into_iter()
            .filter(|event| ids.iter().any(|id| event.contains(&format!("\"{id}\""))))
            .collect()
    };
    let log = ingest_logged(&db, dir.path(), "b.json", &first(5, 2, "B"));
    assert!(
        log.contains("computed the crew rows of the noted flights again"),
        "{log}"
    );
    assert!(!log.contains("indexes dropped"), "{log}");
    assert_eq!(crew_views(&db), crew_from_live_rows(&db));
    assert!(crew_flight(&db).contains(&format!("B0|operating|{}|{OFF}|{ON}|15000", day(0))));
    assert_eq!(crew_indexes(&db), indexes);
    let log = ingest_logged(&db, dir.path(), "b6.json", &first(6, 3, "E"));
    assert!(
        log.contains("their indexes dropped and built again"),
        "{log}"
    );
    assert_eq!(crew_views(&db), crew_from_live_rows(&db));
    assert_eq!(crew_indexes(&db), indexes);
    // Every flight and duty: the indexes dropped and built again.
    let log = ingest_logged(&db, dir.path(), "c.json", &events(4, "C"));
    assert!(
        log.contains("their indexes dropped and built again"),
        "{log}"
    );
    let (flights, duties, fdps) = crew_views(&db);
    assert_eq!((flights.len(), duties.len(), fdps.len()), (18, 18, 18));
    assert!(
        flights.iter().all(|row| row.starts_with('C')),
        "{flights:?}"
    );
    assert_eq!((flights, duties, fdps), crew_from_live_rows(&db));
    assert_eq!(crew_indexes(&db), indexes);
    let integrity = crate::support::query(&db.db(), "PRAGMA integrity_check");
    assert_eq!(integrity, [vec!["ok".to_owned()]]);
}

/// A first file in which a flight comes back after another flight's events (an
/// earlier off-blocks with another crew), a duty's events repeated, and a flight
/// whose events are all read once: the first run of each is a new flight's, the
/// second is not, and the rows end as the live events give them.
/// `stored`: a flight of another day is in the database first, so that the
/// file's new flights' crew rows are held and inserted in crew order at its end
/// (SQLite), not written as each flight's run ends into empty tables.
fn check_a_flight_back_later_in_its_first_file(db: &Backend, stored: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let before = "BA0100-20261128";
    let mut stored_rows = Vec::new();
    if stored {
        let times = ("2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z");
        ingest_a_flight_before(db, dir.path(), before, r#"{"crew":["C5","C9"]}"#, times);
        stored_rows = vec![
            format!("C5|operating|{before}|2026-11-28T10:00:00Z|2026-11-28T11:00:00Z|6000"),
            format!("C9|operating|{before}|2026-11-28T10:00:00Z|2026-11-28T11:00:00Z|6000"),
        ];
    }
    let other = "BA0200-20261129";
    let duty = "D-C7-20261129";
    let early = "2026-11-29T09:55:00Z";
    let events = [
        timed(FL, "off_blocks", OFF, 1, r#"{"crew":["C1","C2"]}"#),
        timed(FL, "on_blocks", ON, 1, "{}"),
        timed(
            duty,
            "duty_start",
            "2026-11-29T08:00:00Z",
            1,
            r#"{"crew":["C7"]}"#,
        ),
        timed(duty, "duty_end", "2026-11-29T16:00:00Z", 1, "{}"),
        timed(
            other,
            "off_blocks",
            "2026-11-29T11:00:00Z",
            1,
            r#"{"crew":["C3"]}"#,
        ),
        timed(other, "on_blocks", "2026-11-29T12:00:00Z", 1, "{}"),
        timed(FL, "off_blocks", early, 1, r#"{"crew":["C5"]}"#),
        timed(duty, "duty_end", "2026-11-29T17:00:00Z", 1, "{}"),
    ];
    ingest(db, dir.path(), "first.json", &events);
    let mut expected = vec![
        format!("C3|operating|{other}|2026-11-29T11:00:00Z|2026-11-29T12:00:00Z|6000"),
        format!("C5|operating|{FL}|{early}|{ON}|16000"),
    ];
    expected.extend(stored_rows);
    expected.sort();
    assert_eq!(crew_flight(db), expected);
    assert_eq!(
        crew_duty(db),
        [format!(
            "C7|operating|{duty}|2026-11-29T08:00:00Z|2026-11-29T17:00:00Z|54000"
        )]
    );
    assert_eq!(crew_views(db), crew_from_live_rows(db));
}

#[test]
fn a_flight_back_later_in_its_first_file_takes_its_earliest_off_blocks_crew() {
    check_a_flight_back_later_in_its_first_file(&Backend::sqlite(), false);
}

#[test]
fn a_flight_back_later_in_a_file_into_a_stored_database_takes_its_earliest_off_blocks_crew() {
    check_a_flight_back_later_in_its_first_file(&Backend::sqlite(), true);
}

#[test]
fn a_flight_back_later_in_its_first_file_takes_its_earliest_off_blocks_crew_on_postgres() {
    check_a_flight_back_later_in_its_first_file(&Backend::postgres(), false);
}

/// Batches of several flights and duties, with corrections and retractions: what
/// the migration test builds the crew rows of.
fn migration_batches() -> Vec<String> {
    let mut batches = Vec::new();
    for day in 1..=3 {
        let mut events = Vec::new();
        for n in 0..6 {
            let flight = format!("SP{n:03}-2026110{day}");
            let off = format!("2026-11-0{day}T{:02}:05:00Z", 6 + n);
            let on = format!("2026-11-0{day}T{:02}:47:30.5Z", 7 + n);
            let crew = format!(
                r#"{{"crew":["C{n}",{{"id":"C{}","role":"positioning"}},{{"id":" C{n} "}}]}}"#,
                n + 1
            );
            events.push(timed(&flight, "off_blocks", &off, 1, &crew));
            events.push(timed(&flight, "on_blocks", &on, 1, "{}"));
            if n == 2 {
                events.push(retracted(&flight, "on_blocks", &on, 2));
            }
            let duty = format!("D{n}-2026110{day}");
            let start = format!("2026-11-0{day}T{:02}:05:00Z", 5 + n);
            events.push(timed(&duty, "duty_start", &start, 1, &crew));
            if n % 2 == 0 {
                let end = format!("2026-11-0{day}T{:02}:30:00Z", 9 + n);
                events.push(timed(&duty, "duty_end", &end, 1, "{}"));
            }
        }
        batches.push(json_batch(&events));
    }
    // A corrected crew list.
    batches.push(json_batch(&[timed(
        "SP001-20261101",
        "off_blocks",
        "2026-11-01T07:05:00Z",
        2,
        r#"{"crew":["C9"]}"#,
    )]));
    batches
}

/// `flight_times` and the crew views, as read.
fn kept_rows(db: &Backend) -> Vec<Vec<String>> {
    let (flights, duties, fdps) = crew_views(db);
    let times = db.lines(
        "SELECT flight_id, off_blocks_utc, coalesce(on_blocks_utc, 'NULL'),
                coalesce(cast(round(block_minutes * 100) AS bigint){t}, 'NULL')
         FROM flight_times",
    );
    vec![flights, duties, times, fdps]
}

/// Ingests `migration_batches` into `db`, takes the crew schema away (as a
/// database of the version before it), lets spoolite migrate it again, and
/// expects the rows the batches had kept.
fn check_migration_builds_the_rows_batches_keep(db: &Backend, downgrade: &dyn Fn(&Backend)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let paths: Vec<_> = migration_batches()
        .iter()
        .enumerate()
        .map(|(i, text)| write(dir.path(), &format!("b{i}.json"), text))
        .collect();
    let all: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let (code, lines) = ingest_json(&db.db(), &all);
    assert_eq!(code, 0, "{lines:?}");
    let kept = kept_rows(db);
    assert!(kept[0].len() >= 25 && kept[1].len() >= 30, "{kept:?}");
    assert!(kept[1].iter().any(|row| row.ends_with("|NULL|NULL")));
    assert_eq!(
        (kept[0].clone(), kept[1].clone(), kept[3].clone()),
        crew_from_live_rows(db)
    );
    downgrade(db);
    // A re-drop: nothing to ingest, but the store is opened and migrated.
    let (code, lines) = ingest_json(&db.db(), &all[..1]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "skipped_duplicate");
    assert_eq!(
        kept_rows(db),
        kept,
        "the migration builds what the batches kept"
    );
    // And every invariant holds (on PostgreSQL: the sequence of change_seq
    // numbers that schema 8 adds starts at the counter).
    check_passes(db);
}

/// The file of a SQLite backend.
fn sqlite_path(db: &Backend) -> &std::path::Path {
    let Backend::Sqlite { path, .. } = db else {
        unreachable!("a SQLite database")
    };
    path
}

#[test]
fn the_migrations_from_schema_6_build_the_crew_rows_batches_keep() {
    check_migration_builds_the_rows_batches_keep(&Backend::sqlite(), &|db| {
        let path = sqlite_path(db);
        downgrade_to_schema_6(path);
    });
}

/// Schema 8 kept the crew rows without their flight's id: migration 9 copies
/// them with it (and builds none again).
#[test]
fn the_migration_from_schema_8_keeps_the_crew_rows_batches_keep() {
    check_migration_builds_the_rows_batches_keep(&Backend::sqlite(), &|db| {
        let path = sqlite_path(db);
        downgrade_to_schema_8(path);
    });
}

/// Schema 10 kept no function, duty type, flight duty period or flight without
/// block time: migration 11 builds the crew rows again from the live events.
#[test]
fn the_migration_from_schema_10_builds_the_crew_model_batches_keep() {
    check_migration_builds_the_rows_batches_keep(&Backend::sqlite(), &|db| {
        downgrade_to_schema_10(sqlite_path(db));
    });
}

/// An upgrade from schema 6 stopped once steps 7 and 8 had committed leaves a
/// database at schema 8 with empty crew tables: step 9 builds the rows then.
#[test]
fn an_upgrade_stopped_at_schema_8_builds_the_crew_rows_at_9() {
    check_migration_builds_the_rows_batches_keep(&Backend::sqlite(), &|db| {
        let path = sqlite_path(db);
        downgrade_to_schema_8(path);
        rusqlite::Connection::open(path)
            .and_then(|conn| {
                conn.execute_batch(
                    "DELETE FROM spoolite_crew_flight; DELETE FROM spoolite_crew_duty;",
                )
            })
            .expect("empty the crew tables");
    });
}

#[test]
fn the_migrations_from_postgres_schema_2_build_the_rows_batches_keep() {
    let schema_1 = include_str!("../../schema/postgres/0001_initial.sql");
    let start = schema_1
        .find("CREATE VIEW flight_times")
        .expect("schema 1 has flight_times");
    let end = start + schema_1[start..].find(";\n").expect("its end") + 1;
    let flight_times_1 = schema_1[start..end].to_owned();
    check_migration_builds_the_rows_batches_keep(&Backend::postgres(), &|db| {
        let Backend::Postgres(pg) = db else {
            unreachable!("a PostgreSQL database")
        };
        pg.client()
            .batch_execute(&format!(
                "DROP VIEW crew_flight; DROP VIEW crew_duty; DROP VIEW crew_fdp;
                 DROP VIEW flight_times;
                 DROP SEQUENCE spoolite_change_seq_next;
                 DROP TRIGGER spoolite_event_changes ON spoolite_event;
                 DROP FUNCTION spoolite_notify_changes();
                 DROP VIEW duty_event; DROP VIEW duty_event_all;
                 DROP INDEX spoolite_event_slot;
                 ALTER TABLE spoolite_event DROP COLUMN slot, DROP COLUMN displaced;
                 CREATE VIEW duty_event_all AS
                 SELECT key AS idempotency_key, flight_id, event_kind, instant_utc,
                        source_revision, payload, retracted, batch_digest, first_seen_at,
                        updated_at, change_seq
                 FROM spoolite_event;
                 CREATE VIEW duty_event AS
                 SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision,
                        payload, batch_digest, first_seen_at, updated_at, change_seq
                 FROM duty_event_all WHERE NOT retracted;
                 DROP TABLE spoolite_crew_flight; DROP TABLE spoolite_crew_duty;
                 DROP TABLE spoolite_crew_fdp;
                 DROP TABLE spoolite_flight;
                 ALTER TABLE spoolite_event RENAME TO duty_event_data;
                 ALTER TABLE spoolite_change_seq RENAME TO change_seq_counter;
                 ALTER INDEX spoolite_event_batch RENAME TO duty_event_data_batch;
                 ALTER INDEX spoolite_event_flight_kind RENAME TO duty_event_data_flight_kind;
                 DROP INDEX spoolite_event_kind_instant;
                 DROP INDEX spoolite_event_updated_at;
                 CREATE INDEX duty_event_data_kind_instant
                     ON duty_event_data (event_kind, rtrim(instant_utc, 'Z')) WHERE NOT retracted;
                 ALTER TABLE duty_event_data RENAME CONSTRAINT spoolite_event_pkey
                     TO duty_event_data_pkey;
                 ALTER TABLE duty_event_data RENAME CONSTRAINT spoolite_event_change_seq_key
                     TO duty_event_data_change_seq_key;
                 ALTER TABLE duty_event_data RENAME CONSTRAINT spoolite_event_batch_digest_fkey
                     TO duty_event_data_batch_digest_fkey;
                 {flight_times_1}
                 DELETE FROM spoolite_schema WHERE version >= 3;"
            ))
            .expect("back to schema 2");
    });
}

/// The crew model, batch by batch: a flight's crew from its latest crew
/// assignment, cabin crew, duty types, and flight duty periods that follow a
/// flight of another id inside the duty (added, cut to no block time, retracted)
/// without an event of the duty itself; then a flight's negative block time.
fn check_the_crew_model(db: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let at = |hh_mm: &str| format!("2026-12-01T{hh_mm}:00Z");
    let crew = r#"{"crew":["P1",{"id":"C1","function":"cabin_crew"}]}"#;
    let (d1, d2, d3) = ("D1-20261201", "D2-20261201", "D3-20261201");
    let (f1, f2, f3, f4) = ("F1-20261201", "F2-20261201", "F3-20261201", "F4-20261201");
    ingest(
        db,
        dir.path(),
        "roster.json",
        &[
            timed(d1, "duty_start", &at("05:00"), 1, crew),
            timed(d1, "duty_end", &at("15:00"), 1, "{}"),
            timed(f1, "off_blocks", &at("06:00"), 1, crew),
            timed(f1, "on_blocks", &at("08:00"), 1, "{}"),
            // The movement feed's crew is not the crew system's: the latest
            // assignment gives F2's crew (P1 and P2, not C1, not X9).
            timed(f2, "crew_assignment", &at("04:00"), 1, crew),
            timed(
                f2,
                "crew_assignment",
                &at("04:30"),
                1,
                r#"{"crew":["P1","P2"]}"#,
            ),
            timed(f2, "off_blocks", &at("09:00"), 1, r#"{"crew":["X9"]}"#),
            timed(f2, "on_blocks", &at("11:00"), 1, "{}"),
            timed(
                f3,
                "off_blocks",
                &at("12:00"),
                1,
                r#"{"crew":[{"id":"P1","role":"positioning"}]}"#,
            ),
            timed(f3, "on_blocks", &at("13:30"), 1, "{}"),
            timed(
                d2,
                "duty_start",
                &at("16:00"),
                1,
                r#"{"crew":["P2"],"duty_type":"airport_standby"}"#,
            ),
            timed(d2, "duty_end", &at("20:00"), 1, "{}"),
            timed(
                d3,
                "duty_start",
                &at("16:00"),
                1,
                r#"{"crew":["P3"],"duty_type":"home_standby"}"#,
            ),
        ],
    );
    let (flights, duties, fdps) = crew_views(db);
    assert_eq!(
        flights,
        [
            format!(
                "C1|operating|cabin_crew|{f1}|{}|{}|12000",
                at("06:00"),
                at("08:00")
            ),
            format!(
                "P1|operating|flight_crew|{f1}|{}|{}|12000",
                at("06:00"),
                at("08:00")
            ),
            format!(
                "P1|operating|flight_crew|{f2}|{}|{}|12000",
                at("09:00"),
                at("11:00")
            ),
            format!(
                "P1|positioning|flight_crew|{f3}|{}|{}|9000",
                at("12:00"),
                at("13:30")
            ),
            format!(
                "P2|operating|flight_crew|{f2}|{}|{}|12000",
                at("09:00"),
                at("11:00")
            ),
        ]
    );
    assert_eq!(
        duties,
        [
            format!(
                "C1|operating|cabin_crew|flight_duty|{d1}|{}|{}|60000",
                at("05:00"),
                at("15:00")
            ),
            format!(
                "P1|operating|flight_crew|flight_duty|{d1}|{}|{}|60000",
                at("05:00"),
                at("15:00")
            ),
            format!(
                "P2|operating|flight_crew|airport_standby|{d2}|{}|{}|24000",
                at("16:00"),
                at("20:00")
            ),
            format!(
                "P3|operating|flight_crew|home_standby|{d3}|{}|NULL|NULL",
                at("16:00")
            ),
        ]
    );
    // The FDP ends at the last operating sector's on-blocks, not with the duty;
    // the airport standby is one whole; the home standby has none.
    assert_eq!(
        fdps,
        [
            format!("C1|cabin_crew|{d1}|{}|{}|18000", at("05:00"), at("08:00")),
            format!("P1|flight_crew|{d1}|{}|{}|36000", at("05:00"), at("11:00")),
            format!("P2|flight_crew|{d2}|{}|{}|24000", at("16:00"), at("20:00")),
        ]
    );
    assert_eq!(crew_views(db), crew_from_live_rows(db));
    let p1_fdp = |db: &Backend| -> String {
        crew_fdp(db)
            .into_iter()
            .find(|row| row.starts_with("P1|"))
            .expect("P1's period")
    };
    // A later sector of P1 inside the duty, in a batch of its own: the period
    // follows it.
    ingest(
        db,
        dir.path(),
        "late.json",
        &[
            timed(f4, "off_blocks", &at("13:45"), 1, r#"{"crew":["P1"]}"#),
            timed(f4, "on_blocks", &at("14:30"), 1, "{}"),
        ],
    );
    assert_eq!(
        p1_fdp(db),
        format!("P1|flight_crew|{d1}|{}|{}|57000", at("05:00"), at("14:30"))
    );
    assert_eq!(crew_views(db), crew_from_live_rows(db));
    // Its on-blocks withdrawn: a last flight without block time ends the period
    // with the duty.
    ingest(
        db,
        dir.path(),
        "cut.json",
        &[retracted(f4, "on_blocks", &at("14:30"), 2)],
    );
    assert_eq!(
        p1_fdp(db),
        format!("P1|flight_crew|{d1}|{}|{}|60000", at("05:00"), at("15:00"))
    );
    assert_eq!(crew_views(db), crew_from_live_rows(db));
    // The flight withdrawn: back to F2's on-blocks.
    ingest(
        db,
        dir.path(),
        "gone.json",
        &[retracted(f4, "off_blocks", &at("13:45"), 2)],
    );
    assert_eq!(
        p1_fdp(db),
        format!("P1|flight_crew|{d1}|{}|{}|36000", at("05:00"), at("11:00"))
    );
    assert_eq!(crew_views(db), crew_from_live_rows(db));
    // An on-blocks on the wrong date: no block time anywhere, no negative figure.
    let f5 = "F5-20261201";
    ingest(
        db,
        dir.path(),
        "wrong-date.json",
        &[
            timed(f5, "off_blocks", &at("10:00"), 1, r#"{"crew":["P9"]}"#),
            timed(f5, "on_blocks", "2026-11-30T12:00:00Z", 1, "{}"),
        ],
    );
    assert_eq!(
        db.lines(&format!(
            "SELECT coalesce(block_minutes{{t}}, 'NULL') FROM flight_times WHERE flight_id = '{f5}'"
        )),
        ["NULL"]
    );
    assert!(crew_flight(db).iter().all(|row| !row.contains(f5)));
    assert_eq!(crew_views(db), crew_from_live_rows(db));
}

#[test]
fn the_crew_model_gives_assignments_functions_duty_types_and_fdps() {
    check_the_crew_model(&Backend::sqlite());
}

#[test]
fn the_crew_model_gives_assignments_functions_duty_types_and_fdps_on_postgres() {
    check_the_crew_model(&Backend::postgres());
}

/// A flight that comes in a later batch inside a duty of five days, and inside a
/// duty open for two weeks: both periods follow it (the duties of over two days
/// and the open ones are found apart from the two days before a flight).
fn check_long_and_open_duties_follow_a_later_flight(db: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    ingest(
        db,
        dir.path(),
        "duties.json",
        &[
            timed(
                "LONG-1",
                "duty_start",
                "2026-11-20T00:00:00Z",
                1,
                r#"{"crew":["P5"]}"#,
            ),
            timed("LONG-1", "duty_end", "2026-11-25T00:00:00Z", 1, "{}"),
            timed(
                "OPEN-1",
                "duty_start",
                "2026-11-10T00:00:00Z",
                1,
                r#"{"crew":["P6"]}"#,
            ),
        ],
    );
    assert_eq!(crew_fdp(db), Vec::<String>::new());
    ingest(
        db,
        dir.path(),
        "flight.json",
        &[
            timed(
                "FL-9",
                "off_blocks",
                "2026-11-24T10:00:00Z",
                1,
                r#"{"crew":["P5","P6"]}"#,
            ),
            timed("FL-9", "on_blocks", "2026-11-24T12:00:00Z", 1, "{}"),
        ],
    );
    assert_eq!(
        crew_fdp(db),
        [
            "P5|flight_crew|LONG-1|2026-11-20T00:00:00Z|2026-11-24T12:00:00Z|648000",
            "P6|flight_crew|OPEN-1|2026-11-10T00:00:00Z|2026-11-24T12:00:00Z|2088000",
        ]
    );
    assert_eq!(crew_views(db), crew_from_live_rows(db));
}

#[test]
fn long_and_open_duties_follow_a_later_flight() {
    check_long_and_open_duties_follow_a_later_flight(&Backend::sqlite());
}

#[test]
fn long_and_open_duties_follow_a_later_flight_on_postgres() {
    check_long_and_open_duties_follow_a_later_flight(&Backend::postgres());
}

/// Two sectors of one crew member from one off-blocks in a duty (an overlap the
/// data quality check counts): the later on-blocks ends the flight duty period
/// on both backends, in whichever order the flights are stored, and `check`
/// computes the same. PostgreSQL had taken either one, and `check` failed.
/// `stored`: a flight of another crew member is in the database first, so the
/// periods are those of the noted duties (SQL over the crew index) rather than a
/// first ingest's every period (`all_periods`).
fn check_tied_off_blocks_end_the_period_at_the_later_on_blocks(db: &Backend, stored: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    if stored {
        let times = ("2026-11-19T07:00:00Z", "2026-11-19T08:00:00Z");
        ingest_a_flight_before(db, dir.path(), "OTHER-F", r#"{"crew":["Q1"]}"#, times);
    }
    let crew = r#"{"crew":["P7"]}"#;
    // A flight off blocks at the duty's end, to the fraction, is in it; one a
    // fraction of a second later is not.
    let fractions = r#"{"crew":["P8"]}"#;
    ingest(
        db,
        dir.path(),
        "tied.json",
        &[
            timed("TIE-D", "duty_start", "2026-11-20T06:00:00Z", 1, crew),
            timed("TIE-D", "duty_end", "2026-11-20T14:00:00Z", 1, "{}"),
            timed("TIE-A", "off_blocks", "2026-11-20T07:00:00Z", 1, crew),
            timed("TIE-A", "on_blocks", "2026-11-20T12:00:00Z", 1, "{}"),
            timed("TIE-B", "off_blocks", "2026-11-20T07:00:00Z", 1, crew),
            timed("TIE-B", "on_blocks", "2026-11-20T08:00:00Z", 1, "{}"),
            timed("TIE-C", "off_blocks", "2026-11-20T07:00:00Z", 1, crew),
            timed("FR-D", "duty_start", "2026-11-21T06:00:00Z", 1, fractions),
            timed("FR-D", "duty_end", "2026-11-21T10:00:00.5Z", 1, "{}"),
            timed("FR-A", "off_blocks", "2026-11-21T10:00:00.5Z", 1, fractions),
            timed("FR-A", "on_blocks", "2026-11-21T11:00:00Z", 1, "{}"),
            timed("FR-B", "off_blocks", "2026-11-21T10:00:00.7Z", 1, fractions),
            timed("FR-B", "on_blocks", "2026-11-21T12:00:00Z", 1, "{}"),
        ],
    );
    assert_eq!(
        crew_fdp(db),
        [
            "P7|flight_crew|TIE-D|2026-11-20T06:00:00Z|2026-11-20T12:00:00Z|36000",
            "P8|flight_crew|FR-D|2026-11-21T06:00:00Z|2026-11-21T11:00:00Z|30000",
        ]
    );
    check_passes(db);
}

/// `spoolite check` of `db` passes.
fn check_passes(db: &Backend) {
    let checked = spoolite()
        .arg("check")
        .arg("--db")
        .arg(db.db())
        .output()
        .expect("spoolite check");
    assert_eq!(checked.status.code(), Some(0), "{checked:?}");
}

#[test]
fn tied_off_blocks_end_the_period_at_the_later_on_blocks() {
    check_tied_off_blocks_end_the_period_at_the_later_on_blocks(&Backend::sqlite(), false);
}

#[test]
fn tied_off_blocks_end_the_period_at_the_later_on_blocks_in_a_stored_database() {
    check_tied_off_blocks_end_the_period_at_the_later_on_blocks(&Backend::sqlite(), true);
}

#[test]
fn tied_off_blocks_end_the_period_at_the_later_on_blocks_on_postgres() {
    check_tied_off_blocks_end_the_period_at_the_later_on_blocks(&Backend::postgres(), false);
}

#[test]
fn tied_off_blocks_end_the_period_at_the_later_on_blocks_in_a_stored_database_on_postgres() {
    check_tied_off_blocks_end_the_period_at_the_later_on_blocks(&Backend::postgres(), true);
}

/// The rows inserted into `spoolite_crew_flight` and the entries of its crew
/// index read so far, as the server's statistics count them once they count at
/// least `inserted` rows: each `spoolite ingest`'s server process reports its
/// statistics as it ends, a moment after the process exits.
fn crew_index_reads(db: &crate::support_pg::PgDb, inserted: i64) -> (i64, i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let row = &db.query(
            "SELECT t.n_tup_ins::text, i.idx_tup_read::text
             FROM pg_stat_user_tables AS t, pg_stat_user_indexes AS i
             WHERE t.relname = 'spoolite_crew_flight'
                 AND i.indexrelname = 'spoolite_crew_flight_crew'",
        )[0];
        let number = |at: usize| -> i64 { row[at].parse().expect("a count") };
        if number(0) >= inserted {
            return (number(0), number(1));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the statistics count {} crew rows inserted, not {inserted}",
            number(0)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_duty_before_many_stored_flights_reads_only_its_own_span_of_them_on_postgres() {
    // A crew member's 150 flights are stored; a file then brings a duty before
    // them with one flight in it. Its period reads the member's flights from the
    // duty's start to its end in the crew index, not every later one.
    let backend = Backend::postgres();
    let Backend::Postgres(db) = &backend else {
        unreachable!()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let crew = r#"{"crew":["C7"]}"#;
    // C7's flights, and 20 other crew members' on the same days, so that the
    // planner searches the crew index rather than read the table.
    let mut later = Vec::new();
    for day in 1..=150 {
        // `day` days after 2027-01-01, as `YYYY-MM-DD`.
        let date = jiff::civil::date(2027, 1, 1)
            .checked_add(jiff::Span::new().days(day))
            .expect("a date in 2027");
        for other in 0..=20 {
            let (flight, payload) = match other {
                0 => (format!("LX{day:04}-2027"), crew.to_owned()),
                _ => (
                    format!("LX{day:04}-{other:02}"),
                    format!(r#"{{"crew":["C{}"]}}"#, 1000 + other),
                ),
            };
            for (kind, time) in [("off_blocks", "08:00:00"), ("on_blocks", "09:00:00")] {
                let instant = format!("{date}T{time}Z");
                later.push(event(&flight, kind, &instant, Some(1), &payload));
            }
        }
    }
    let stored = write(dir.path(), "later.ndjson", later.join("\n") + "\n");
    let (code, lines) = ingest_json(&backend.db(), &[&stored]);
    assert_eq!(code, 0, "{lines:?}");
    let (inserted, before) = crew_index_reads(db, 150 * 21);
    // The planner's figures for the table as it now is, taken now: no
    // automatic ANALYZE comes between the two files.
    db.query("ANALYZE spoolite_crew_flight");

    let duty = [
        event(
            "D-2026",
            "duty_start",
            "2026-12-20T05:00:00Z",
            Some(1),
            crew,
        ),
        event("D-2026", "duty_end", "2026-12-20T14:00:00Z", Some(1), crew),
        event(
            "LX0000-2026",
            "off_blocks",
            "2026-12-20T06:00:00Z",
            Some(1),
            crew,
        ),
        event(
            "LX0000-2026",
            "on_blocks",
            "2026-12-20T08:30:00Z",
            Some(1),
            crew,
        ),
    ];
    let earlier = write(dir.path(), "earlier.ndjson", duty.join("\n") + "\n");
    let (code, lines) = ingest_json(&backend.db(), &[&earlier]);
    assert_eq!(code, 0, "{lines:?}");
    let read = crew_index_reads(db, inserted + 1).1 - before;
    assert_eq!(
        crew_fdp(&backend),
        ["C7|flight_crew|D-2026|2026-12-20T05:00:00Z|2026-12-20T08:30:00Z|21000"]
    );
    assert!(
        (1..10).contains(&read),
        "the duty's period read {read} entries of the crew index (its member has 151 flights)"
    );
}
