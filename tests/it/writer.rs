//! The writer's sorted runs seen from outside: a large file's runs spill next to
//! the database as unnamed files, so a process killed mid-ingest leaves none.

use std::fs;
use std::ops::Range;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// Whether process `pid` holds a file in `dir` that has no name there (an
/// `O_TMPFILE`, or one removed since it was opened).
fn holds_an_unnamed_file_in(pid: u32, dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries.filter_map(|entry| entry.ok()).any(|entry| {
        fs::read_link(entry.path()).is_ok_and(|target| {
            target.parent() == Some(dir) && target.to_string_lossy().ends_with(" (deleted)")
        })
    })
}

/// Events `events` of a series of distinct events of about 230 bytes, six to a
/// flight, one a line.
fn large_file(events: Range<usize>) -> String {
    events
        .map(|i| {
            let instant = format!(
                "2026-11-29T{:02}:{:02}:{:02}Z",
                i % 24,
                (i / 24) % 60,
                i % 60
            );
            let payload = r#"{"tail":"G-XWBA","crew":["C123","C456","C789"]}"#;
            event(
                &format!("F{:06}-20261129", i / 6),
                "takeoff",
                &instant,
                Some(1),
                payload,
            ) + "\n"
        })
        .collect()
}

/// `spoolite ingest FILE` into `db`, started, with stdout and stderr null.
fn start_ingest(db: &Path, file: &Path) -> Child {
    ingest_command(db)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn")
}

#[test]
fn a_large_file_killed_while_its_runs_spill_leaves_no_file_next_to_the_database() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    fs::create_dir_all(&state).expect("mkdir");
    let db = state.join("spoolite.db");
    // 150,000 events: more than one 32 MiB run once encoded with their raw text.
    let count = 150_000;
    let file = write(dir.path(), "large.ndjson", large_file(0..count));
    let state = fs::canonicalize(&state).expect("canonical state/");
    let only_the_database = ["spoolite.db", "spoolite.db-shm", "spoolite.db-wal"];

    let mut child = start_ingest(&db, &file);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut spilled = false;
    while Instant::now() < deadline && !spilled {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        spilled = holds_an_unnamed_file_in(child.id(), &state);
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9");
    child.wait().expect("wait");
    assert!(spilled, "the ingest never held a run file in {state:?}");
    let left = names(&state);
    assert!(
        left.iter()
            .all(|name| only_the_database.contains(&name.as_str())),
        "{left:?}"
    );

    let (code, lines) = ingest_json(&db, &[&file]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["inserted"], count, "{lines:?}");
    let left = names(&state);
    assert!(
        left.iter()
            .all(|name| only_the_database.contains(&name.as_str())),
        "{left:?}"
    );
}

/// The indexes of the database as `sqlite_master` defines them.
fn index_definitions(db: &Path) -> Vec<Vec<String>> {
    query(
        db,
        "SELECT name, coalesce(sql, '') FROM sqlite_master WHERE type = 'index' ORDER BY name",
    )
}

const REBUILT: &str = "built the secondary indexes again";

#[test]
fn a_batch_large_against_the_table_builds_its_indexes_again_even_when_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let first = write(dir.path(), "first.ndjson", large_file(0..6));
    ingest_logged(&db, &first);
    let schema = index_definitions(&db);
    assert!(
        schema
            .iter()
            .any(|row| row[0] == "spoolite_event_kind_instant"),
        "{schema:?}"
    );

    // 150,000 events into 6 rows: the secondary indexes are dropped for the
    // apply. Killed at moments across the ingest (it takes seconds: 40,000 events
    // took 1.4 s on a quiet machine, within the last kill), each time the
    // transaction, the drop included, is rolled back: the indexes are there, whole.
    let file = write(dir.path(), "large.ndjson", large_file(6..150_006));
    for kill_after_ms in [150, 400, 900, 1600] {
        let mut child = start_ingest(&db, &file);
        let deadline = Instant::now() + Duration::from_millis(kill_after_ms);
        while Instant::now() < deadline && child.try_wait().expect("try_wait").is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the ingest ended before the kill at {kill_after_ms} ms"
        );
        child.kill().expect("kill -9");
        child.wait().expect("wait");
        assert_eq!(
            index_definitions(&db),
            schema,
            "killed after {kill_after_ms} ms"
        );
        assert_eq!(query(&db, "PRAGMA integrity_check"), [["ok"]]);
    }

    let log = ingest_logged(&db, &file);
    assert!(log.contains(REBUILT), "{log}");
    assert_eq!(index_definitions(&db), schema);
    // Every index holds every row of the table, as a build by the schema does.
    assert_eq!(query(&db, "PRAGMA integrity_check"), [["ok"]]);
    assert_eq!(
        query(&db, "SELECT count(*) FROM spoolite_event"),
        [["150006"]]
    );
    let plan = query(
        &db,
        "EXPLAIN QUERY PLAN SELECT count(*) FROM duty_event
         WHERE event_kind = 'takeoff' AND instant_utc >= '2026-11-29T10'",
    );
    assert!(
        plan.iter().any(|row| row
            .iter()
            .any(|cell| cell.contains("spoolite_event_kind_instant"))),
        "{plan:?}"
    );

    // A file small against the table keeps the indexes and inserts into them.
    let small = write(dir.path(), "small.ndjson", large_file(150_006..150_106));
    let log = ingest_logged(&db, &small);
    assert!(!log.contains(REBUILT), "{log}");
    assert_eq!(query(&db, "PRAGMA integrity_check"), [["ok"]]);
}
