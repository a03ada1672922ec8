//! The crew views `crew_flight` and `crew_duty` on both backends: a flight's crew
//! from its first live off-blocks, its block time, a duty open and closed, and what
//! corrections and retractions do to them.

use crate::pg_contract::Backend;
use crate::support::{event, ingest_json, json_batch, write};

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
