//! `spoolite check`: passes on databases built by the test corpora on both
//! backends, names each invariant an analyst with write access broke with a
//! plain SQL statement, exits 2 when the database cannot be read, and runs on an
//! account that may only read.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::ingest::{broken_lines, edges_ndjson, key_vectors_batch};
use crate::pg::outcome_table_files;
use crate::pg_contract::Backend;
use crate::support::{ANALYST, assert_root, share_read_only_with_analyst};
use crate::support::{ingest_json, let_others_traverse, parse_lines, spoolite, spoolite_as, write};

/// The checks, in the order they are printed.
const CHECKS: [&str; 11] = [
    "integrity",
    "inbox_counts",
    "quarantine_counts",
    "events_have_batch",
    "change_seq_distinct",
    "slots",
    "flight_times",
    "crew_flight",
    "crew_duty",
    "crew_fdp",
    "data_quality",
];

/// The flight of the outcome table's files.
const FLIGHT: &str = "BA0117-20261129";

fn check(db: &Path, json: bool) -> Output {
    let mut command = spoolite();
    command.arg("check").arg("--db").arg(db);
    if json {
        command.arg("--json");
    }
    command.output().expect("run spoolite check")
}

/// A flight with block time and crew (one positioning, one listed twice), a
/// flight whose on-blocks is before its off-blocks, a closed duty and an open one
/// (its end before its start), with crew.
fn crew_ndjson() -> String {
    [
        r#"{"flight_id":"LH0400-20261201","event_kind":"off_blocks","instant_utc":"2026-12-01T08:00:00Z","source_revision":1,"payload":{"crew":["C1",{"id":"C2","role":"positioning"},"C1"]}}"#,
        r#"{"flight_id":"LH0400-20261201","event_kind":"on_blocks","instant_utc":"2026-12-01T09:30:20Z","source_revision":1,"payload":{}}"#,
        r#"{"flight_id":"LH0402-20261201","event_kind":"off_blocks","instant_utc":"2026-12-01T12:00:00Z","source_revision":1,"payload":{"crew":["C3"]}}"#,
        r#"{"flight_id":"LH0402-20261201","event_kind":"on_blocks","instant_utc":"2026-12-01T11:00:00Z","source_revision":1,"payload":{}}"#,
        r#"{"flight_id":"DUTY-C1-20261201","event_kind":"duty_start","instant_utc":"2026-12-01T07:00:00Z","source_revision":1,"payload":{"crew":["C1","C2"]}}"#,
        r#"{"flight_id":"DUTY-C1-20261201","event_kind":"duty_end","instant_utc":"2026-12-01T10:00:00.25Z","source_revision":1,"payload":{}}"#,
        r#"{"flight_id":"DUTY-C3-20261201","event_kind":"duty_start","instant_utc":"2026-12-01T11:00:00Z","source_revision":1,"payload":{"crew":["C3"]}}"#,
        r#"{"flight_id":"DUTY-C3-20261201","event_kind":"duty_end","instant_utc":"2026-12-01T10:59:00Z","source_revision":1,"payload":{}}"#,
    ]
    .map(|line| format!("{line}\n"))
    .concat()
}

/// Ingests every corpus of retractions, conflicts and invalid events into `db`.
fn fill(dir: &Path, db: &Path) {
    let mut files = outcome_table_files(dir);
    files.push(write(dir, "edges.ndjson", edges_ndjson()));
    files.push(write(dir, "vectors.json", key_vectors_batch()));
    files.push(write(dir, "broken.ndjson", broken_lines().1));
    files.push(write(dir, "crew.ndjson", crew_ndjson()));
    for file in &files {
        let (code, lines) = ingest_json(db, &[file]);
        assert_eq!(code, 0, "ingest {}: {lines:?}", file.display());
    }
}

/// The JSON lines of `check --json`, each checked for its shape: exactly
/// `check`, `ok` and `detail`.
fn json_lines(output: &Output) -> Vec<(String, bool, String)> {
    parse_lines(output)
        .into_iter()
        .map(|line| {
            let object = line.as_object().expect("an object");
            let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
            keys.sort();
            assert_eq!(keys, ["check", "detail", "ok"], "{line}");
            (
                line["check"].as_str().expect("check").to_owned(),
                line["ok"].as_bool().expect("ok"),
                line["detail"].as_str().expect("detail").to_owned(),
            )
        })
        .collect()
}

/// The failing checks' names and details, from `check --json`, which must exit 1.
fn failing(db: &Path, what: &str) -> Vec<(String, String)> {
    let output = check(db, true);
    let lines = json_lines(&output);
    let names: Vec<&str> = lines.iter().map(|(name, ..)| name.as_str()).collect();
    assert_eq!(names, CHECKS, "{output:?}");
    assert_eq!(output.status.code(), Some(1), "{what}: {output:?}");
    lines
        .into_iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(name, _, detail)| (name, detail))
        .collect()
}

fn assert_all_hold(db: &Path) {
    let output = check(db, false);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), CHECKS.len(), "{text}");
    for (line, name) in lines.iter().zip(CHECKS) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[..2], ["ok", name], "{line}");
    }
    let output = check(db, true);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = json_lines(&output);
    let names: Vec<&str> = lines.iter().map(|(name, ..)| name.as_str()).collect();
    assert_eq!(names, CHECKS);
    assert!(lines.iter().all(|(_, ok, _)| *ok), "{lines:?}");
}

#[test]
fn every_check_holds_on_the_corpora_of_both_backends() {
    let dir = tempfile::tempdir().expect("temp dir");
    for backend in [Backend::sqlite(), Backend::postgres()] {
        fill(dir.path(), &backend.db());
        assert_all_hold(&backend.db());
        // The details tell what was looked at.
        let lines = json_lines(&check(&backend.db(), true));
        let batches = backend.rows("SELECT count(*){t} FROM ingest_inbox")[0][0].clone();
        assert_eq!(lines[1].2, format!("{batches} batches, each adds up"));
        // The corpora hold no slot.
        assert_eq!(
            lines[5].2,
            "0 slots, each with at most one live row, its highest revision"
        );
        let flights = backend.rows("SELECT count(*){t} FROM flight_times")[0][0].clone();
        assert_eq!(
            lines[6].2,
            format!("{flights} flights, each equal to its live events")
        );
        // Every flight with an off-blocks has its crew rows, with block time or not.
        let crew = backend.rows("SELECT count(*){t} FROM spoolite_crew_flight")[0][0].clone();
        let flights = backend
            .rows("SELECT count(*){t} FROM flight_times WHERE off_blocks_utc IS NOT NULL")[0][0]
            .clone();
        assert_eq!(
            lines[7].2,
            format!("{crew} crew rows of {flights} flights, each equal to its live events")
        );
        let crew = backend.rows("SELECT count(*){t} FROM crew_duty")[0][0].clone();
        let duties = backend.rows(
            "SELECT count(DISTINCT flight_id){t} FROM duty_event WHERE event_kind = 'duty_start'",
        )[0][0]
            .clone();
        assert_eq!(
            lines[8].2,
            format!("{crew} crew rows of {duties} duties, each equal to its live events")
        );
        let periods = backend.rows("SELECT count(*){t} FROM crew_fdp")[0][0].clone();
        let members = backend.rows(
            "SELECT count(*){t} FROM (SELECT crew_id FROM spoolite_crew_flight
                 UNION SELECT crew_id FROM spoolite_crew_duty
                 UNION SELECT crew_id FROM spoolite_crew_fdp) AS c",
        )[0][0]
            .clone();
        assert_eq!(
            lines[9].2,
            format!(
                "{periods} flight duty periods of {members} crew members, each equal to what \
                 their duties and flights give"
            )
        );
        // The corpus's data quality: C3's flight lands before it leaves (and no
        // duty has been open for a day: DUTY-C3 is, since 2026-12-01, so once that
        // is a day ago, C3 is counted there too).
        let open_duty = if jiff::Timestamp::now() > "2026-12-02T11:00:00Z".parse().expect("t") {
            1
        } else {
            0
        };
        assert_eq!(
            lines[10].2,
            format!(
                "open_flight 0 crew members, negative_block 1 crew member, open_duty {open_duty} \
                 crew member{}, overlap 0 crew members (informational: data that can make a crew \
                 figure wrong; never fails)",
                if open_duty == 1 { "" } else { "s" }
            )
        );
        // The periods: C1's duty to its flight's on-blocks; C3's open duty holds a
        // flight without block time (on-blocks before off-blocks): open too.
        assert_eq!(
            backend.rows(
                "SELECT crew_id, duty_id, fdp_start_utc, coalesce(fdp_end_utc, 'open')
                 FROM crew_fdp WHERE duty_id LIKE 'DUTY-%' ORDER BY crew_id"
            ),
            [
                [
                    "C1",
                    "DUTY-C1-20261201",
                    "2026-12-01T07:00:00Z",
                    "2026-12-01T09:30:20Z"
                ],
                ["C3", "DUTY-C3-20261201", "2026-12-01T11:00:00Z", "open"]
            ]
        );
        // The crew corpus's rows are there (two members of LH0400, none of the flight
        // whose on-blocks is before its off-blocks, three of the two duties).
        assert_eq!(
            backend.rows(
                "SELECT flight_id, crew_id, role FROM crew_flight WHERE flight_id LIKE 'LH04%'
                 ORDER BY crew_id"
            ),
            [
                ["LH0400-20261201", "C1", "operating"],
                ["LH0400-20261201", "C2", "positioning"]
            ]
        );
        assert_eq!(
            backend.rows(
                "SELECT duty_id, crew_id, coalesce(duty_end_utc, 'open') FROM crew_duty
                 WHERE duty_id LIKE 'DUTY-%' ORDER BY duty_id, crew_id"
            ),
            [
                ["DUTY-C1-20261201", "C1", "2026-12-01T10:00:00.25Z"],
                ["DUTY-C1-20261201", "C2", "2026-12-01T10:00:00.25Z"],
                ["DUTY-C3-20261201", "C3", "open"]
            ]
        );
    }
}

/// A database of the outcome table's files (retractions, a conflict, an invalid
/// event) and the crew corpus: the digest of the first file, and a key of the
/// second's.
fn outcome_database(dir: &Path, backend: &Backend) -> (String, String) {
    let mut files = outcome_table_files(dir);
    files.push(write(dir, "crew.ndjson", crew_ndjson()));
    for file in files {
        let (code, lines) = ingest_json(&backend.db(), &[&file]);
        assert_eq!(code, 0, "{lines:?}");
    }
    let first = backend
        .rows("SELECT batch_digest FROM ingest_inbox WHERE file_name = 'first.json'")[0][0]
        .clone();
    let key = backend
        .rows("SELECT idempotency_key FROM duty_event_all WHERE event_kind = 'takeoff'")[0][0]
        .clone();
    (first, key)
}

/// Each tampering: its name, the SQL (with `{first}` the first batch's digest and
/// `{key}` a key), the checks it breaks and what their detail names.
type Tamper = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
);

fn tamper_and_check(backend_of: fn() -> Backend, tampers: &[Tamper], run: fn(&Backend, &str)) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (what, sql, broken, named) in tampers {
        let backend = backend_of();
        let (first, key) = outcome_database(dir.path(), &backend);
        assert_all_hold(&backend.db());
        let sql = sql.replace("{first}", &first).replace("{key}", &key);
        run(&backend, &sql);
        let found = failing(&backend.db(), what);
        let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, *broken, "{what}: {found:?}");
        let named = named
            .replace("{first}", &first)
            .replace("{key}", &key)
            .replace("{flight}", FLIGHT);
        for (name, detail) in &found {
            if name != "integrity" {
                assert!(
                    detail.contains(&named),
                    "{what}: {name}: {detail:?} names {named}"
                );
            }
        }
    }
}

/// Tamperings of the crew tables written the same on both backends.
const CREW_TAMPERS: &[Tamper] = &[
    (
        "a crew member's role",
        "UPDATE spoolite_crew_flight SET role = 'positioning' WHERE crew_id = 'C1'",
        // Positioning ends no flight duty period: C1's period no longer agrees.
        &["crew_flight", "crew_fdp"],
        "(crew C1)",
    ),
    (
        "a crew member's function",
        "UPDATE spoolite_crew_duty SET function = 'cabin_crew' WHERE crew_id = 'C2'",
        &["crew_duty"],
        "1 row of crew_duty unlike what the live events give (or that one side lacks): \
             DUTY-C1-20261201 (crew C2)",
    ),
    (
        "a flight duty period's end",
        "UPDATE spoolite_crew_fdp SET fdp_end_utc = '2026-12-01T10:00:00Z' WHERE crew_id = 'C1'",
        &["crew_fdp"],
        "1 row of crew_fdp unlike what the crew's duties and flights give (or that one side \
             lacks): DUTY-C1-20261201 (crew C1)",
    ),
    (
        "a flight duty period deleted",
        "DELETE FROM spoolite_crew_fdp WHERE crew_id = 'C3'",
        &["crew_fdp"],
        "DUTY-C3-20261201 (crew C3)",
    ),
    (
        "a crew member's minutes",
        "UPDATE spoolite_crew_flight SET block_minutes = block_minutes + 0.01
             WHERE crew_id = 'C2'",
        &["crew_flight"],
        "LH0400-20261201 (crew C2)",
    ),
    (
        "a crew duty row deleted",
        "DELETE FROM spoolite_crew_duty WHERE crew_id = 'C2'",
        &["crew_duty"],
        "1 row of crew_duty unlike what the live events give (or that one side lacks): \
             DUTY-C1-20261201 (crew C2)",
    ),
];

#[test]
fn each_tampered_invariant_of_a_sqlite_database_fails_its_check() {
    let tampers: &[Tamper] = &[
        (
            "an inbox count",
            "PRAGMA ignore_check_constraints = ON;
             UPDATE ingest_inbox SET inserted = inserted + 1 WHERE batch_digest = '{first}'",
            &["inbox_counts"],
            "{first} (events_total 5, outcomes add up to 6)",
        ),
        (
            "a quarantine row",
            "DELETE FROM quarantine WHERE batch_digest = '{first}'",
            &["quarantine_counts"],
            "{first} (conflicts + invalid 1, quarantine rows 0)",
        ),
        (
            "a stored event's batch",
            "UPDATE spoolite_event SET batch_ref = 99 WHERE lower(hex(key)) = '{key}'",
            &["events_have_batch"],
            "{key} (batch_ref 99)",
        ),
        (
            "a derived table",
            "UPDATE spoolite_flight SET on_blocks_utc = '2026-11-29T13:00:00Z'",
            &["flight_times"],
            "{flight}",
        ),
        (
            "a change_seq, once its unique index is dropped",
            "DROP INDEX spoolite_event_change_seq;
             UPDATE spoolite_event SET change_seq = (SELECT max(change_seq) FROM spoolite_event)
             WHERE lower(hex(key)) = '{key}'",
            &["change_seq_distinct"],
            " (2 rows)",
        ),
        (
            "a live event retracted behind the derived table's back",
            "UPDATE spoolite_event SET retracted = 1 WHERE lower(hex(key)) = '{key}'",
            &["flight_times"],
            "{flight}",
        ),
        (
            "a duty's end retracted behind the crew rows' back",
            "UPDATE spoolite_event SET retracted = 1
             WHERE event_kind = 'duty_end' AND flight_id = 'DUTY-C1-20261201'",
            &["crew_duty"],
            "2 rows of crew_duty unlike what the live events give (or that one side lacks): \
             DUTY-C1-20261201 (crew C1), DUTY-C1-20261201 (crew C2)",
        ),
        (
            "a crew row of no flight",
            "INSERT INTO spoolite_crew_flight (flight_ref, crew_id, role, flight_id,
                 off_blocks_utc, on_blocks_utc, block_minutes)
             VALUES (999999, 'C9', 'operating', 'GONE-20261201', '2026-12-01T08:00:00Z',
                 '2026-12-01T09:00:00Z', 60.0)",
            &["crew_flight"],
            "lacks): GONE-20261201 (crew C9)",
        ),
        (
            "a crew row's flight id",
            "UPDATE spoolite_crew_flight SET flight_id = 'LH0402-20261201' WHERE crew_id = 'C1'",
            &["crew_flight"],
            "2 rows of crew_flight unlike what the live events give (or that one side lacks): \
             LH0400-20261201 (crew C1), LH0402-20261201 (crew C1)",
        ),
        (
            "a flight's row deleted under its crew rows",
            "DELETE FROM spoolite_flight WHERE flight_id = 'LH0400-20261201'",
            // The crew rows hold the flight's id: crew_flight still shows them, but
            // its check reads rows of no flight apart (after the others) and
            // names them, unless no live flight comes after them.
            &["flight_times", "crew_flight"],
            "LH0400-20261201",
        ),
    ];
    let tampers = [tampers, CREW_TAMPERS].concat();
    tamper_and_check(Backend::sqlite, &tampers, |backend, sql| {
        let conn = rusqlite::Connection::open(backend.db()).expect("open as an analyst");
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    });
}

#[test]
fn each_tampered_invariant_of_a_postgres_database_fails_its_check() {
    let tampers: &[Tamper] = &[
        (
            "an inbox count",
            "ALTER TABLE ingest_inbox DROP CONSTRAINT ingest_inbox_check;
             UPDATE ingest_inbox SET inserted = inserted + 1 WHERE batch_digest = '{first}'",
            &["inbox_counts"],
            "{first} (events_total 5, outcomes add up to 6)",
        ),
        (
            "a quarantine row",
            "DELETE FROM quarantine WHERE batch_digest = '{first}'",
            &["quarantine_counts"],
            "{first} (conflicts + invalid 1, quarantine rows 0)",
        ),
        (
            "a stored event's batch, past the foreign key",
            "SET session_replication_role = replica;
             UPDATE spoolite_event SET batch_digest = repeat('e', 64) WHERE key = '{key}'",
            &["events_have_batch"],
            "{key} (batch_digest eeee",
        ),
        (
            "a derived view",
            "ALTER VIEW flight_times RENAME TO flight_times_before;
             CREATE VIEW flight_times AS
             SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                    block_minutes, airborne_minutes + 1 AS airborne_minutes
             FROM flight_times_before",
            &["flight_times"],
            "{flight}",
        ),
        (
            "a change_seq, once its unique constraint is dropped",
            "ALTER TABLE spoolite_event DROP CONSTRAINT spoolite_event_change_seq_key;
             UPDATE spoolite_event SET change_seq = (SELECT max(change_seq) FROM spoolite_event)
             WHERE key = '{key}'",
            &["change_seq_distinct"],
            " (2 rows)",
        ),
        (
            "the change_seq counter set back",
            "UPDATE spoolite_change_seq SET next_seq = 1",
            &["integrity"],
            "",
        ),
        (
            "the sequence of change_seq numbers set back",
            "SELECT setval('spoolite_change_seq_next', 1)",
            &["integrity"],
            "the sequence spoolite_change_seq_next gives 2, below the next change_seq",
        ),
        (
            "a view dropped",
            "DROP VIEW batch_summary",
            &["integrity"],
            "",
        ),
        (
            "a duty's end retracted behind the crew rows' back",
            "UPDATE spoolite_event SET retracted = true
             WHERE event_kind = 'duty_end' AND flight_id = 'DUTY-C1-20261201'",
            &["crew_duty"],
            "2 rows of crew_duty unlike what the live events give (or that one side lacks): \
             DUTY-C1-20261201 (crew C1), DUTY-C1-20261201 (crew C2)",
        ),
    ];
    let tampers = [tampers, CREW_TAMPERS].concat();
    tamper_and_check(Backend::postgres, &tampers, |backend, sql| {
        let Backend::Postgres(db) = backend else {
            unreachable!("a PostgreSQL backend")
        };
        db.client()
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    });
}

#[test]
fn a_database_that_cannot_be_read_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.db");
    let output = check(&missing, false);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing.db"), "{stderr}");
    assert!(!missing.exists(), "check creates nothing");
    // Not a database at all.
    let junk = write(dir.path(), "junk.db", "not a database, just text");
    let output = check(&junk, true);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}

/// `--jobs N` runs N checks at once, each on its own connection: whatever N, the
/// lines are the same, in the same order, with the same exit code.
#[test]
fn checks_run_at_once_print_what_one_at_a_time_prints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let backend = Backend::sqlite();
    let (first, _) = outcome_database(dir.path(), &backend);
    let conn = rusqlite::Connection::open(backend.db()).expect("open as an analyst");
    conn.execute_batch(&format!(
        "DELETE FROM quarantine WHERE batch_digest = '{first}';
         DELETE FROM spoolite_crew_duty WHERE crew_id = 'C2';"
    ))
    .expect("tamper");
    let run = |jobs: &str| {
        let output = spoolite()
            .args(["check", "--json", "--jobs", jobs, "--db"])
            .arg(backend.db())
            .output()
            .expect("run spoolite check");
        (output.status.code(), json_lines(&output))
    };
    let one = run("1");
    assert_eq!(one.0, Some(1), "{one:?}");
    let names: Vec<&str> = one.1.iter().map(|(name, ..)| name.as_str()).collect();
    assert_eq!(names, CHECKS);
    let failed: Vec<&str> = one
        .1
        .iter()
        .filter(|l| !l.1)
        .map(|l| l.0.as_str())
        .collect();
    assert_eq!(failed, ["quarantine_counts", "crew_duty"]);
    for jobs in ["2", "3", "8", "64"] {
        assert_eq!(run(jobs), one, "--jobs {jobs}");
    }
    let refused = spoolite()
        .args(["check", "--jobs", "0", "--db"])
        .arg(backend.db())
        .output()
        .expect("run spoolite check");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

#[test]
fn an_analyst_who_may_only_read_runs_every_check() {
    assert_root();
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    fs::create_dir(&state).expect("state folder");
    let db: PathBuf = state.join("spoolite.db");
    fill(dir.path(), &db);
    let_others_traverse(dir.path());
    share_read_only_with_analyst(&state);
    let before = crate::support::names(&state);
    let output = spoolite_as(ANALYST, ANALYST)
        .arg("check")
        .arg("--json")
        .arg("--db")
        .arg(&db)
        .current_dir("/")
        .output()
        .expect("run check");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = json_lines(&output);
    assert!(lines.iter().all(|(_, ok, _)| *ok), "{lines:?}");
    assert_eq!(
        crate::support::names(&state),
        before,
        "the analyst created nothing"
    );
}
