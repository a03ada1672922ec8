//! `spoolite copy-db`: a SQLite database made by real `spoolite ingest` runs,
//! copied into PostgreSQL, compared as whole views with its source (times and
//! `change_seq` included: a copy keeps them) and with the same files ingested
//! straight into PostgreSQL (every column but spoolite's own times); what follows a
//! copy (re-drops skip, new rows go on above the copied `change_seq`); the
//! refusals (a target with rows, overlapping batches or keys) and the failures
//! (a missing source, counts that differ), each leaving the target as it was.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tempfile::TempDir;

use crate::pg::outcome_table_files;
use crate::pg_conn::TlsServer;
use crate::pg_contract::{Backend, Times, assert_views_equal, views};
use crate::support::{
    event, ingest_command, ingest_json, json_batch, pg_schema_version, query, spoolite, write,
};
use crate::support_pg::PgDb;

/// `spoolite copy-db --from FROM --to TO` with `extra` options.
fn copy_db(from: &Path, to: &str, extra: &[&str]) -> Output {
    spoolite()
        .arg("copy-db")
        .arg("--from")
        .arg(from)
        .args(["--to", to])
        .args(extra)
        .output()
        .expect("run spoolite copy-db")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `ingest --json` of each file in turn (each must exit 0): the outcome lines.
fn ingest_each(db: &Path, files: &[PathBuf]) -> Vec<Value> {
    files
        .iter()
        .flat_map(|file| {
            let (code, lines) = ingest_json(db, &[file]);
            assert_eq!(code, 0, "ingest {}: {lines:?}", file.display());
            lines
        })
        .collect()
}

/// The outcome table's files (retractions, a conflict, an invalid event, a
/// re-drop) and a file of a second flight with a `batch_id`, in their order.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files = outcome_table_files(dir);
    files.push(write(
        dir,
        "second-flight.ndjson",
        [
            event(
                "EZY8421-20270102",
                "duty_start",
                "2027-01-01T23:30:00Z",
                Some(1),
                r#"{"crew":["C1",{"id":"C2","role":"positioning"}]}"#,
            ),
            event(
                "EZY8421-20270102",
                "takeoff",
                "2027-01-02T06:10:00Z",
                Some(1),
                "{\"runway\":\"27L\"}",
            ),
            "{\"flight_id\":\"EZY8421-20270102\"}".to_owned(),
        ]
        .join("\n")
            + "\n",
    ));
    files
}

/// A SQLite database the files were ingested into, beside them.
struct Source {
    dir: TempDir,
    backend: Backend,
    files: Vec<PathBuf>,
}

impl Source {
    fn new() -> Source {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = files(dir.path());
        let backend = Backend::sqlite();
        ingest_each(&backend.db(), &files);
        Source {
            dir,
            backend,
            files,
        }
    }

    fn db(&self) -> PathBuf {
        self.backend.db()
    }

    fn max_change_seq(&self) -> i64 {
        query(&self.db(), "SELECT max(change_seq) FROM duty_event_all")[0][0]
            .parse()
            .expect("a number")
    }
}

/// Every table and view of a PostgreSQL database, and its counter, as text: what
/// "left unchanged" compares.
fn whole(db: &PgDb) -> Vec<Vec<String>> {
    let mut tables = vec![
        db.rows("SELECT * FROM spoolite_event"),
        db.rows("SELECT * FROM ingest_inbox"),
        db.rows("SELECT * FROM quarantine"),
        db.rows("SELECT * FROM spoolite_change_seq"),
        db.rows("SELECT * FROM spoolite_flight_id"),
    ];
    tables.push(db.rows("SELECT version FROM spoolite_schema"));
    tables
}

#[test]
fn a_copy_reads_as_its_source_and_as_the_same_files_ingested_into_postgres() {
    let source = Source::new();
    let source_bytes = std::fs::read(source.db()).expect("read the source");
    let target = Backend::postgres();
    let Backend::Postgres(target_db) = &target else {
        unreachable!()
    };
    let output = copy_db(&source.db(), &target_db.uri(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary = String::from_utf8_lossy(&output.stdout);
    let max = source.max_change_seq();
    assert!(
        summary.starts_with(
            "copied 4 batches, 7 events (2 retracted), 3 quarantined rows and 2 flights from "
        ),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "counts verified; the next change_seq is {}\n",
            max + 1
        )),
        "{summary}"
    );
    assert_eq!(summary.lines().count(), 1, "one summary line: {summary}");

    // Whole views, spoolite's own times and change_seq included: the copy's are
    // the source's.
    assert_views_equal(
        &views(&target, Times::Included),
        &views(&source.backend, Times::Included),
        "the copy against its SQLite source",
    );
    // And as if the files had been ingested into PostgreSQL in the first place
    // (times differ between two runs; change_seq is given alike by both backends).
    let direct = Backend::postgres();
    ingest_each(&direct.db(), &source.files);
    assert_views_equal(
        &views(&target, Times::Left),
        &views(&direct, Times::Left),
        "the copy against a direct ingest into PostgreSQL",
    );
    assert_eq!(
        target.lines("SELECT flight_id FROM spoolite_flight_id"),
        direct.lines("SELECT flight_id FROM spoolite_flight_id"),
        "the copy lists the flight ids a direct ingest lists"
    );
    assert_eq!(
        target_db.query("SELECT next_seq::text FROM spoolite_change_seq"),
        [[(max + 1).to_string()]]
    );
    assert_eq!(
        target_db.query("SELECT max(version)::text FROM spoolite_schema"),
        [[pg_schema_version().to_string()]],
        "the target's schema is made as ingest makes it"
    );
    assert_eq!(
        std::fs::read(source.db()).expect("read the source"),
        source_bytes,
        "the source is only read"
    );
}

#[test]
fn after_a_copy_re_drops_skip_and_new_rows_get_change_seq_above_the_copied() {
    let source = Source::new();
    let target = PgDb::new();
    let output = copy_db(&source.db(), &target.uri(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let copied = whole(&target);
    let uri = PathBuf::from(target.uri());
    let lines = ingest_each(&uri, &source.files);
    for line in &lines {
        assert_eq!(line["outcome"], "skipped_duplicate", "{line}");
    }
    assert_eq!(whole(&target), copied, "re-drops change nothing");

    // A new file: a key of the copy updated, a key of its own inserted.
    let max = source.max_change_seq();
    let new = write(
        source.dir.path(),
        "later.ndjson",
        event(
            "EZY8421-20270102",
            "takeoff",
            "2027-01-02T06:10:00Z",
            Some(2),
            "{\"runway\":\"09R\"}",
        ) + "\n"
            + &event(
                "EZY8421-20270102",
                "landing",
                "2027-01-02T08:40:00Z",
                Some(1),
                "{}",
            )
            + "\n",
    );
    let lines = ingest_each(&uri, &[new]);
    assert_eq!(lines[0]["outcome"], "processed", "{}", lines[0]);
    assert_eq!(
        (lines[0]["inserted"].as_u64(), lines[0]["updated"].as_u64()),
        (Some(1), Some(1))
    );
    let changed = target.query(&format!(
        "SELECT event_kind, (change_seq - {max})::text FROM duty_event_all
         WHERE change_seq > {max} ORDER BY change_seq"
    ));
    assert_eq!(changed.len(), 2, "{changed:?}");
    let mut seqs: Vec<&str> = changed.iter().map(|row| row[1].as_str()).collect();
    seqs.sort();
    assert_eq!(seqs, ["1", "2"], "the counter went on from the copied ones");
    assert_eq!(
        target.query(&format!(
            "SELECT count(*)::text FROM duty_event_all WHERE change_seq <= {max}"
        )),
        [["6"]],
        "the other copied rows keep their change_seq"
    );
}

/// A duty of crew member `crew` with two of their flights in it, and one flight
/// after it: two crew rows of flights, one of a duty, one flight duty period.
fn duty_with_flights(dir: &Path, name: &str, crew: &str, day: &str) -> PathBuf {
    let payload = format!(r#"{{"crew":["{crew}"]}}"#);
    let lines = [
        ("D", "duty_start", "05:00:00"),
        ("D", "duty_end", "16:00:00"),
        ("A", "off_blocks", "06:00:00"),
        ("A", "on_blocks", "08:30:00"),
        ("B", "off_blocks", "10:00:00"),
        ("B", "on_blocks", "13:15:00"),
        ("C", "off_blocks", "18:00:00"),
        ("C", "on_blocks", "19:00:00"),
    ]
    .map(|(flight, kind, time)| {
        let instant = format!("{day}T{time}Z");
        event(
            &format!("{flight}-{crew}"),
            kind,
            &instant,
            Some(1),
            &payload,
        )
    });
    write(dir, name, lines.join("\n") + "\n")
}

#[test]
fn a_copy_holds_the_crew_rows_and_flight_duty_periods_of_its_source() {
    // Into an empty target every flight is computed whole; into one holding
    // rows, the copied flights and the periods they touch.
    let dir = tempfile::tempdir().expect("temp dir");
    let source = Backend::sqlite();
    ingest_each(
        &source.db(),
        &[duty_with_flights(
            dir.path(),
            "c1.ndjson",
            "C1",
            "2027-03-01",
        )],
    );
    let expected = crate::crew::crew_views(&source);
    assert_eq!(
        expected.2,
        ["C1|flight_crew|D-C1|2027-03-01T05:00:00Z|2027-03-01T13:15:00Z|49500"],
        "the source's one period, to the second flight's on-blocks"
    );
    let target = Backend::postgres();
    let output = copy_db(&source.db(), &target.db().to_string_lossy(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        crate::crew::crew_views(&target),
        expected,
        "into an empty target"
    );

    let more = Backend::sqlite();
    ingest_each(
        &more.db(),
        &[duty_with_flights(
            dir.path(),
            "c2.ndjson",
            "C2",
            "2027-03-02",
        )],
    );
    let output = copy_db(
        &more.db(),
        &target.db().to_string_lossy(),
        &["--into-non-empty"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let both = Backend::postgres();
    ingest_each(
        &both.db(),
        &[
            duty_with_flights(dir.path(), "c1.ndjson", "C1", "2027-03-01"),
            duty_with_flights(dir.path(), "c2.ndjson", "C2", "2027-03-02"),
        ],
    );
    let into_non_empty = crate::crew::crew_views(&target);
    assert_eq!(into_non_empty.2.len(), 2, "{into_non_empty:?}");
    assert_eq!(
        into_non_empty,
        crate::crew::crew_views(&both),
        "into a target holding rows, as both files ingested"
    );
}

#[test]
fn a_target_holding_rows_is_refused_and_left_unchanged() {
    let source = Source::new();
    let target = PgDb::new();
    let own = write(
        source.dir.path(),
        "own.json",
        json_batch(&[event(
            "LH400-20261130",
            "takeoff",
            "2026-11-30T08:00:00Z",
            Some(1),
            "{}",
        )]),
    );
    ingest_each(Path::new(&target.uri()), &[own]);
    let before = whole(&target);
    let output = copy_db(&source.db(), &target.uri(), &[]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains("already holds 1 batches, 1 events and 0 quarantined rows"),
        "{message}"
    );
    assert!(message.contains("--into-non-empty"), "{message}");
    assert!(output.stdout.is_empty());
    assert_eq!(whole(&target), before);
}

#[test]
fn into_non_empty_adds_the_sources_batches_above_the_targets_change_seq_and_refuses_overlaps() {
    let source = Source::new();
    let dir = source.dir.path();
    let own = write(
        dir,
        "own.json",
        json_batch(&[
            event(
                "LH400-20261130",
                "takeoff",
                "2026-11-30T08:00:00Z",
                Some(1),
                "{}",
            ),
            event(
                "LH400-20261130",
                "landing",
                "2026-11-30T09:10:00Z",
                Some(1),
                "{}",
            ),
        ]),
    );
    let target = PgDb::new();
    ingest_each(Path::new(&target.uri()), std::slice::from_ref(&own));
    let output = copy_db(&source.db(), &target.uri(), &["--into-non-empty"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(
        summary.contains("(each copied change_seq raised by 2, above the target's)"),
        "{summary}"
    );
    // The source's rows, each change_seq raised by the target's two; the target's
    // own rows as they were.
    let copied = target.query(
        "SELECT idempotency_key, (change_seq - 2)::text, updated_at FROM duty_event_all
         WHERE flight_id <> 'LH400-20261130' ORDER BY idempotency_key",
    );
    let expected = query(
        &source.db(),
        "SELECT idempotency_key, change_seq, updated_at FROM duty_event_all
         ORDER BY idempotency_key",
    );
    assert_eq!(copied, expected);
    assert_eq!(
        target.query(
            "SELECT string_agg(change_seq::text, ',' ORDER BY change_seq) FROM duty_event_all
             WHERE flight_id = 'LH400-20261130'"
        ),
        [["1,2"]]
    );
    assert_eq!(
        target.query("SELECT count(*)::text FROM ingest_inbox"),
        [["5"]]
    );
    let max = source.max_change_seq() + 2;
    assert_eq!(
        target.query("SELECT next_seq::text FROM spoolite_change_seq"),
        [[(max + 1).to_string()]]
    );

    // The same source again: its batches are there already. Refused, unchanged.
    let before = whole(&target);
    let output = copy_db(&source.db(), &target.uri(), &["--into-non-empty"]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains("copy ingest_inbox into")
            && message.contains("already exists")
            && message.contains("overlap; nothing was committed"),
        "{message}"
    );
    assert_eq!(whole(&target), before);

    // Another database whose batches are new to the target but one of whose keys
    // is not: refused too, naming the key.
    let other = Backend::sqlite();
    let takeoff = write(
        dir,
        "lh-takeoff-again.json",
        json_batch(&[event(
            "LH400-20261130",
            "takeoff",
            "2026-11-30T08:00:00Z",
            Some(5),
            "{\"late\":true}",
        )]),
    );
    ingest_each(&other.db(), &[takeoff]);
    let output = copy_db(&other.db(), &target.uri(), &["--into-non-empty"]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    let key = crate::support::sha256_hex("LH400-20261130|takeoff|2026-11-30T08:00:00Z");
    assert!(
        message.contains("copy duty_event_all into") && message.contains(&key),
        "{message}"
    );
    assert_eq!(whole(&target), before);
}

#[test]
fn a_missing_source_is_a_clear_error_and_the_target_is_not_touched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nowhere.db");
    let target = PgDb::new();
    let output = copy_db(&missing, &target.uri(), &[]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert_eq!(
        message,
        format!(
            "spoolite: read source {}: no such file (copy-db reads an existing SQLite database)\n",
            missing.display()
        )
    );
    assert!(!missing.exists(), "nothing is created in its place");
    assert_eq!(
        target.query("SELECT (to_regclass('spoolite_schema') IS NULL)::text"),
        [["true"]]
    );
    // A SQLite file of someone else's tables is no spoolite database.
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .expect("create")
        .execute_batch("CREATE TABLE t (x)")
        .expect("a table");
    let output = copy_db(&other, &target.uri(), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "spoolite: read source {}: not a spoolite database (no schema)\n",
            other.display()
        )
    );
    // A source of a newer spoolite is refused, not read with today's columns.
    let newer = dir.path().join("newer.db");
    rusqlite::Connection::open(&newer)
        .expect("create")
        .execute_batch("CREATE TABLE t (x); PRAGMA user_version = 99")
        .expect("a newer schema");
    let output = copy_db(&newer, &target.uri(), &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("schema version 99, newer than"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        target.query("SELECT (to_regclass('spoolite_schema') IS NULL)::text"),
        [["true"]]
    );
    // A target that is not PostgreSQL is refused before anything is read.
    let source = Source::new();
    let output = copy_db(&source.db(), &source.db().display().to_string(), &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("not a PostgreSQL URI"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn counts_that_differ_after_the_copy_roll_it_back() {
    let source = Source::new();
    let target = PgDb::new();
    // Connecting creates the schema (an empty file is only still arriving).
    let empty = write(source.dir.path(), "empty.ndjson", "");
    let created = ingest_command(Path::new(&target.uri()))
        .arg(&empty)
        .output()
        .expect("run");
    assert!(created.status.code().is_some());
    // A trigger that silently drops every quarantine row: the copy must notice.
    target
        .client()
        .batch_execute(
            "CREATE FUNCTION drop_row() RETURNS trigger LANGUAGE plpgsql
                 AS $$ BEGIN RETURN NULL; END $$;
             CREATE TRIGGER drop_quarantine BEFORE INSERT ON quarantine
                 FOR EACH ROW EXECUTE FUNCTION drop_row();",
        )
        .expect("create the trigger");
    let before = whole(&target);
    let output = copy_db(&source.db(), &target.uri(), &[]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(
        message.contains("the counts differ after the copy (quarantine: 3 in the source, 0 copied); nothing was committed"),
        "{message}"
    );
    assert_eq!(whole(&target), before);
    assert_eq!(
        target.query("SELECT count(*)::text FROM ingest_inbox"),
        [["0"]]
    );
}

#[test]
fn a_database_being_written_is_copied_as_last_committed() {
    let source = Source::new();
    let committed = views(&source.backend, Times::Included);
    // A writer holds the write lock with a batch not yet committed, as a daemon
    // in the middle of a file does.
    let mut writer = rusqlite::Connection::open(source.db()).expect("open the source");
    let tx = writer
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("take the write lock");
    tx.execute_batch(&format!(
        "INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at, events_total,
             inserted, updated, unchanged, stale, conflicts, invalid, batch_ref)
         VALUES ('{}', NULL, 'half.json', '2026-12-01T10:00:00.000Z', 0, 0, 0, 0, 0, 0, 0, 99)",
        "ef".repeat(32)
    ))
    .expect("an uncommitted batch");
    let target = Backend::postgres();
    let output = copy_db(&source.db(), &target.db().display().to_string(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    tx.rollback().expect("roll back");
    assert_views_equal(
        &views(&target, Times::Included),
        &committed,
        "what was committed when the copy began",
    );
}

#[test]
fn the_targets_password_comes_from_the_password_file() {
    let tls = TlsServer::shared();
    let (target, role, password) = tls.database();
    let source = Source::new();
    let secret = write(source.dir.path(), "db-password", format!("{password}\n"));
    let uri = tls.uri(&target, &role, "127.0.0.1", "sslmode=require");
    // Without it the server refuses the connection: nothing is copied.
    let output = copy_db(&source.db(), &uri, &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let secret_arg = secret.display().to_string();
    let output = copy_db(&source.db(), &uri, &["--db-password-file", &secret_arg]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    assert!(
        !shown.contains(&password),
        "the password was shown: {shown}"
    );
    assert_eq!(
        target.query("SELECT count(*)::text FROM ingest_inbox"),
        [["4"]]
    );
}
