//! The PostgreSQL backend through the real binary (`spoolite ingest --db
//! postgresql://…`), on the throwaway server of `support_pg`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{event, ingest_command, json_batch, sha256_hex, write};
use crate::support_pg::PgDb;

#[test]
fn postgres_records_its_schema_version_and_refuses_a_newer_one() {
    let db = PgDb::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write(dir.path(), "a.ndjson", "");
    // Connecting creates the schema (an empty file is only still arriving).
    let output = ingest_command(Path::new(&db.uri()))
        .arg(&file)
        .output()
        .expect("run");
    assert!(output.status.code().is_some());
    assert_eq!(
        db.query("SELECT version::text FROM spoolite_schema"),
        [["1"]]
    );
    db.client()
        .batch_execute("INSERT INTO spoolite_schema (version) VALUES (2)")
        .expect("a newer version");
    let output = ingest_command(Path::new(&db.uri()))
        .arg(&file)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("schema version 2, newer than this spoolite knows (1)"),
        "{stderr}"
    );
}

#[test]
fn the_same_bytes_from_two_writers_at_once_commit_once() {
    let db = PgDb::new();
    let uri = PathBuf::from(db.uri());
    let dir = tempfile::tempdir().expect("temp dir");
    let events: Vec<String> = (0..2000)
        .map(|i| {
            event(
                &format!("BA{:04}-20261129", i % 50),
                "landing",
                &format!("2026-11-29T{:02}:{:02}:00Z", i / 60 % 24, i % 60),
                Some(1),
                "{}",
            )
        })
        .collect();
    let bytes = json_batch(&events);
    let first = write(dir.path(), "one.json", &bytes);
    let second = write(dir.path(), "two.json", &bytes);
    // Create the schema first (an empty file is only still arriving), so that
    // the two ingests race on the batch only.
    let empty = write(dir.path(), "empty.ndjson", "");
    let created = ingest_command(&uri).arg(&empty).output().expect("run");
    assert!(created.status.code().is_some());
    let spawn = |file: &Path| {
        ingest_command(&uri)
            .arg("--json")
            .arg(file)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let (a, b) = (spawn(&first), spawn(&second));
    let mut outcomes: Vec<String> = [a, b]
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("wait");
            assert_eq!(output.status.code(), Some(0));
            let line: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
            assert_eq!(line["sha256"], sha256_hex(&bytes));
            line["outcome"].as_str().expect("outcome").to_owned()
        })
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["processed", "skipped_duplicate"]);
    assert_eq!(
        db.query("SELECT count(*)::text, sum(inserted)::text FROM ingest_inbox"),
        [["1", "2000"]]
    );
    assert_eq!(
        db.query("SELECT count(*)::text, count(DISTINCT change_seq)::text, max(change_seq)::text FROM duty_event_all"),
        [["2000", "2000", "2000"]]
    );
}

/// The PostgreSQL schema as `schema/postgres/` holds it.
const SCHEMA_1: &str = include_str!("../../schema/postgres/0001_initial.sql");

#[test]
fn the_postgres_schema_has_the_contract_tables_and_column_types() {
    let db = PgDb::new();
    db.client().batch_execute(SCHEMA_1).expect("apply schema 1");
    let columns = |table: &str| {
        db.query(&format!(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_name = '{table}' ORDER BY ordinal_position"
        ))
        .into_iter()
        .map(|row| format!("{} {}", row[0], row[1]))
        .collect::<Vec<_>>()
    };
    assert_eq!(
        columns("duty_event_all"),
        [
            "idempotency_key text",
            "flight_id text",
            "event_kind text",
            "instant_utc text",
            "source_revision bigint",
            "payload text",
            "retracted boolean",
            "batch_digest text",
            "first_seen_at text",
            "updated_at text",
            "change_seq bigint",
        ]
    );
    let mut live = columns("duty_event_all");
    live.retain(|column| column != "retracted boolean");
    assert_eq!(columns("duty_event"), live);
    assert_eq!(
        columns("ingest_inbox"),
        [
            "batch_digest text",
            "batch_id text",
            "file_name text",
            "ingested_at text",
            "events_total bigint",
            "inserted bigint",
            "updated bigint",
            "unchanged bigint",
            "stale bigint",
            "conflicts bigint",
            "invalid bigint",
        ]
    );
    assert_eq!(
        columns("quarantine"),
        [
            "batch_digest text",
            "file_name text",
            "record_index bigint",
            "reason text",
            "detail text",
            "raw text",
            "quarantined_at text",
        ]
    );
    assert_eq!(
        columns("flight_times"),
        [
            "flight_id text",
            "off_blocks_utc text",
            "takeoff_utc text",
            "landing_utc text",
            "on_blocks_utc text",
            "block_minutes numeric",
            "airborne_minutes numeric",
        ]
    );
    assert_eq!(columns("batch_summary")[..11], columns("ingest_inbox")[..]);
    // A key or a digest that is not 64 lowercase hex characters is refused.
    let mut client = db.client();
    let bad = client.batch_execute(
        "INSERT INTO ingest_inbox VALUES (repeat('A', 64), NULL, 'f', 't', 0, 0, 0, 0, 0, 0, 0)",
    );
    assert!(bad.is_err(), "an uppercase digest is refused");
    client
        .batch_execute(&format!(
            "INSERT INTO ingest_inbox VALUES ('{0}', NULL, 'f', 't', 1, 1, 0, 0, 0, 0, 0);
             INSERT INTO duty_event_data VALUES ('{0}', 'F', 'landing', '2026-11-29T10:05:00Z',
                 1, '{{}}', false, '{0}', 't', 't', 1)",
            "ab".repeat(32)
        ))
        .expect("a row of hex keys");
    // Counts that do not add up are refused.
    let bad = client.batch_execute(&format!(
        "INSERT INTO ingest_inbox VALUES ('{}', NULL, 'f', 't', 2, 1, 0, 0, 0, 0, 0)",
        "cd".repeat(32)
    ));
    assert!(bad.is_err(), "events_total is the sum of the outcomes");
    // The key look-up through the view is a primary-key search.
    let plan = db.query(&format!(
        "EXPLAIN SELECT * FROM duty_event_all WHERE idempotency_key = '{}'",
        "ab".repeat(32)
    ));
    assert!(
        plan.iter()
            .any(|line| line[0].contains("duty_event_data_pkey")),
        "{plan:?}"
    );
}

#[test]
fn writers_of_overlapping_files_at_once_apply_one_at_a_time() {
    let db = PgDb::new();
    let uri = PathBuf::from(db.uri());
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = write(dir.path(), "empty.ndjson", "");
    let created = ingest_command(&uri).arg(&empty).output().expect("run");
    assert!(created.status.code().is_some());
    // Four files of the same 500 keys, file n at revision n, each in its own order.
    let files: Vec<PathBuf> = (1..=4_i64)
        .map(|revision| {
            let lines: Vec<String> = (0..500_i64)
                .map(|i| (i * (revision * 2 + 1)) % 500)
                .map(|key| {
                    event(
                        &format!("BA{:04}-20261129", key % 40),
                        "landing",
                        &format!("2026-11-29T{:02}:{:02}:00Z", key / 60, key % 60),
                        Some(revision),
                        &format!("{{\"from\":{revision}}}"),
                    )
                })
                .collect();
            write(
                dir.path(),
                &format!("r{revision}.ndjson"),
                lines.join("\n") + "\n",
            )
        })
        .collect();
    let children: Vec<_> = files
        .iter()
        .map(|file| {
            ingest_command(&uri)
                .arg("--json")
                .arg(file)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().expect("wait");
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    }
    // Whatever the commit order: each key inserted once, every other version
    // updated or stale, the highest revision stored, counts reconciled.
    assert_eq!(
        db.query(
            "SELECT count(*)::text, sum(inserted)::text, sum(updated + stale)::text,
                    sum(unchanged + conflicts + invalid)::text
             FROM ingest_inbox"
        ),
        [["4", "500", "1500", "0"]]
    );
    assert_eq!(
        db.query(
            "SELECT count(*)::text, min(source_revision)::text, min(payload),
                    count(DISTINCT change_seq)::text
             FROM duty_event_all"
        ),
        [["500", "4", "{\"from\":4}", "500"]]
    );
    // The change feed in commit order: a later commit's rows have larger
    // change_seq than an earlier one's, and none is above the counter.
    let by_batch = db.query(
        "SELECT min(change_seq)::text, max(change_seq)::text FROM duty_event_all
         GROUP BY batch_digest ORDER BY min(change_seq)",
    );
    for pair in by_batch.windows(2) {
        let end: i64 = pair[0][1].parse().expect("number");
        let next: i64 = pair[1][0].parse().expect("number");
        assert!(end < next, "{by_batch:?}");
    }
    assert_eq!(
        db.query(
            "SELECT (next_seq > (SELECT max(change_seq) FROM duty_event_data))::text
             FROM change_seq_counter"
        ),
        [["true"]]
    );
}
