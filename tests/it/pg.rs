//! The PostgreSQL backend through the real binary (`spoolite ingest --db
//! postgresql://…`), on the throwaway server of `support_pg`, and the contract's
//! tables compared whole with what SQLite holds after the same files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::pg_contract::Backend;
use crate::support::{
    event, ingest_command, ingest_json, json_batch, migrations_sql, pg_schema_version, sha256_hex,
    write,
};
use crate::support_pg::PgDb;

/// The contract's tables, every column but the times spoolite writes (which
/// differ from run to run), `change_seq` as its rank (the order is the
/// contract's, the numbers a backend's), sorted.
fn tables(backend: &Backend) -> Vec<Vec<Vec<String>>> {
    let minutes = |rows: Vec<Vec<String>>| -> Vec<Vec<String>> {
        // SQLite's minutes are real, PostgreSQL's numeric: compare the values.
        rows.into_iter()
            .map(|row| {
                row.into_iter()
                    .enumerate()
                    .map(|(at, value)| match value.parse::<f64>() {
                        Ok(number) if at >= 5 => format!("{number:.2}"),
                        _ => value,
                    })
                    .collect()
            })
            .collect()
    };
    vec![
        backend.rows(
            "SELECT idempotency_key, flight_id, event_kind, instant_utc,
                    source_revision{t}, payload, {retracted}{t}, batch_digest,
                    (dense_rank() OVER (ORDER BY change_seq)){t}
             FROM duty_event_all ORDER BY change_seq",
        ),
        backend.rows(
            "SELECT idempotency_key, (dense_rank() OVER (ORDER BY change_seq)){t}
             FROM duty_event ORDER BY idempotency_key",
        ),
        backend.rows(
            "SELECT batch_digest, batch_id, file_name, events_total{t}, inserted{t},
                    updated{t}, unchanged{t}, stale{t}, conflicts{t}, invalid{t}
             FROM ingest_inbox ORDER BY batch_digest",
        ),
        backend.rows(
            "SELECT batch_digest, file_name, record_index{t}, reason, detail, raw
             FROM quarantine ORDER BY batch_digest, record_index",
        ),
        backend.rows(
            "SELECT batch_digest, events_total{t}, rows_last_written{t}, quarantined{t}
             FROM batch_summary ORDER BY batch_digest",
        ),
        minutes(backend.rows(
            "SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                    block_minutes{t}, airborne_minutes{t}
             FROM flight_times ORDER BY flight_id",
        )),
    ]
}

/// An event of flight BA0117 with `retracted` when given.
fn flight_event(
    kind: &str,
    instant: &str,
    revision: i64,
    payload: &str,
    retracted: bool,
) -> String {
    let text = event("BA0117-20261129", kind, instant, Some(revision), payload);
    if retracted {
        format!("{},\"retracted\":true}}", &text[..text.len() - 1])
    } else {
        text
    }
}

/// Files that meet every row of the outcome table, retractions included, and an
/// invalid event, in the order they are ingested (the first is dropped twice).
pub(crate) fn outcome_table_files(dir: &Path) -> Vec<PathBuf> {
    let off = || {
        flight_event(
            "off_blocks",
            "2026-11-29T10:05:00Z",
            1,
            "{\"gate\":\"A1\"}",
            false,
        )
    };
    let first = json_batch(&[
        off(),
        flight_event("takeoff", "2026-11-29T10:20:00Z", 1, "{}", false),
        // A retraction of a key never seen: inserted, retracted.
        flight_event("landing", "2026-11-29T12:00:00Z", 2, "{}", true),
        flight_event("landing", "2026-11-29T12:07:00Z", 1, "{}", false),
        "{\"flight_id\":\"BA0117-20261129\",\"event_kind\":\"landing\"}".to_owned(),
    ]);
    let second = format!(
        "{{\"batch_id\":\"B2\",\"events\":[{}]}}",
        [
            // updated, then updated again within the file (the same instant).
            flight_event(
                "off_blocks",
                "2026-11-29T10:05:00Z",
                2,
                "{\"gate\":\"A2\"}",
                false
            ),
            flight_event("off_blocks", "2026-11-29T11:05:00+01:00", 3, "{}", false),
            // unchanged, then a conflict (same revision, other content).
            flight_event("takeoff", "2026-11-29T10:20:00Z", 1, "{}", false),
            flight_event("takeoff", "2026-11-29T10:20:00Z", 1, "{\"x\":1}", false),
            // stale: the original of the landing retracted at revision 2.
            flight_event("landing", "2026-11-29T12:00:00Z", 1, "{}", false),
            // inserted, then updated within the file.
            flight_event("on_blocks", "2026-11-29T12:15:00.5Z", 0, "{}", false),
            flight_event(
                "on_blocks",
                "2026-11-29T12:15:00.5Z",
                1,
                "{\"stand\":7}",
                false
            ),
        ]
        .join(",\n")
    );
    let third = [
        // A later revision brings the retracted landing back.
        flight_event("landing", "2026-11-29T12:00:00Z", 3, "{}", false),
        // The 12:07 landing is retracted: flight_times takes 12:00.
        flight_event("landing", "2026-11-29T12:07:00Z", 2, "{}", true),
        flight_event("off_blocks", "2026-11-29T10:05:00Z", 4, "{}", true),
    ]
    .join("\n")
        + "\n";
    let first = write(dir, "first.json", first);
    vec![
        first.clone(),
        write(dir, "second.json", second),
        write(dir, "third.ndjson", third),
        first,
    ]
}

/// `ingest --json` of each file in turn: the lines, without the time-free fields
/// removed (there are none): outcome, digest and counts.
fn ingest_each(db: &Path, files: &[PathBuf]) -> Vec<Value> {
    files
        .iter()
        .map(|file| {
            let (code, mut lines) = ingest_json(db, &[file]);
            assert_eq!(code, 0, "ingest {}: {lines:?}", file.display());
            assert_eq!(lines.len(), 1);
            lines.pop().expect("one line")
        })
        .collect()
}

#[test]
fn the_outcome_table_reads_the_same_from_sqlite_and_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = outcome_table_files(dir.path());
    let mut results = Vec::new();
    for backend in [Backend::sqlite(), Backend::postgres()] {
        let lines = ingest_each(&backend.db(), &files);
        results.push((lines, tables(&backend)));
    }
    let (sqlite_lines, sqlite_tables) = &results[0];
    let (pg_lines, pg_tables) = &results[1];
    assert_eq!(pg_lines, sqlite_lines);
    for (pg, sqlite) in pg_tables.iter().zip(sqlite_tables) {
        assert_eq!(pg, sqlite);
    }
    // The outcomes themselves, so that two backends agreeing on a wrong answer
    // would still fail.
    let outcome = |line: &Value| {
        let field = |name: &str| line[name].as_u64().unwrap_or(0);
        (
            line["outcome"].as_str().unwrap_or("").to_owned(),
            [
                field("inserted"),
                field("updated"),
                field("unchanged"),
                field("stale"),
                field("conflicts"),
                field("invalid"),
            ],
        )
    };
    let outcomes: Vec<_> = sqlite_lines.iter().map(outcome).collect();
    assert_eq!(
        outcomes,
        [
            ("processed".to_owned(), [4, 0, 0, 0, 0, 1]),
            ("processed".to_owned(), [1, 3, 1, 1, 1, 0]),
            ("processed".to_owned(), [0, 3, 0, 0, 0, 0]),
            ("skipped_duplicate".to_owned(), [0, 0, 0, 0, 0, 0]),
        ]
    );
    // The live rows and flight times after all of it.
    assert_eq!(
        pg_tables[5],
        [vec![
            "BA0117-20261129".to_owned(),
            "NULL".to_owned(),
            "2026-11-29T10:20:00Z".to_owned(),
            "2026-11-29T12:00:00Z".to_owned(),
            "2026-11-29T12:15:00.5Z".to_owned(),
            "NULL".to_owned(),
            "100.00".to_owned(),
        ]]
    );
}

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
    let versions: Vec<Vec<String>> = (1..=pg_schema_version())
        .map(|v| vec![v.to_string()])
        .collect();
    assert_eq!(
        db.query("SELECT version::text FROM spoolite_schema ORDER BY version"),
        versions
    );
    db.client()
        .batch_execute(&format!(
            "INSERT INTO spoolite_schema (version) VALUES ({})",
            pg_schema_version() + 1
        ))
        .expect("a newer version");
    let output = ingest_command(Path::new(&db.uri()))
        .arg(&file)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "schema version {}, newer than this spoolite knows ({})",
            pg_schema_version() + 1,
            pg_schema_version()
        )),
        "{stderr}"
    );
}

/// A landing of flight `BA{flight:04}-20261129` at minute `minute` of 2026-11-29.
fn landing(flight: i64, minute: i64, revision: i64, payload: &str) -> String {
    event(
        &format!("BA{flight:04}-20261129"),
        "landing",
        &format!("2026-11-29T{:02}:{:02}:00Z", minute / 60 % 24, minute % 60),
        Some(revision),
        payload,
    )
}

/// Creates the schema in `uri` with an empty file (one only still arriving, which
/// writes nothing else), so that the writers started next race on their batches.
fn create_schema(dir: &Path, uri: &Path) {
    let empty = write(dir, "empty.ndjson", "");
    let created = ingest_command(uri).arg(&empty).output().expect("run");
    assert!(created.status.code().is_some());
}

/// `spoolite ingest --json FILE` into `uri`, started, its stdout piped.
fn spawn_ingest(uri: &Path, file: &Path) -> std::process::Child {
    ingest_command(uri)
        .arg("--json")
        .arg(file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn the_same_bytes_from_two_writers_at_once_commit_once() {
    let db = PgDb::new();
    let uri = PathBuf::from(db.uri());
    let dir = tempfile::tempdir().expect("temp dir");
    let events: Vec<String> = (0..2000).map(|i| landing(i % 50, i, 1, "{}")).collect();
    let bytes = json_batch(&events);
    let first = write(dir.path(), "one.json", &bytes);
    let second = write(dir.path(), "two.json", &bytes);
    // The schema first, so that the two ingests race on the batch only.
    create_schema(dir.path(), &uri);
    let (a, b) = (spawn_ingest(&uri, &first), spawn_ingest(&uri, &second));
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

#[test]
fn the_postgres_schema_has_the_contract_tables_and_column_types() {
    let db = PgDb::new();
    db.client()
        .batch_execute(&migrations_sql(
            "schema/postgres",
            pg_schema_version() as usize,
        ))
        .expect("apply the schema");
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
            "slot text",
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
             INSERT INTO spoolite_event VALUES ('{0}', 'F', 'landing', '2026-11-29T10:05:00Z',
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
            .any(|line| line[0].contains("spoolite_event_pkey")),
        "{plan:?}"
    );
}

#[test]
fn writers_of_overlapping_files_at_once_apply_one_at_a_time() {
    let db = PgDb::new();
    let uri = PathBuf::from(db.uri());
    let dir = tempfile::tempdir().expect("temp dir");
    create_schema(dir.path(), &uri);
    // Four files of the same 500 keys, file n at revision n, each in its own order.
    let files: Vec<PathBuf> = (1..=4_i64)
        .map(|revision| {
            let lines: Vec<String> = (0..500_i64)
                // Multipliers prime to 500: each file holds every key once.
                .map(|i| (i * [1, 3, 7, 9][revision as usize - 1]) % 500)
                .map(|key| landing(key % 40, key, revision, &format!("{{\"from\":{revision}}}")))
                .collect();
            write(
                dir.path(),
                &format!("r{revision}.ndjson"),
                lines.join("\n") + "\n",
            )
        })
        .collect();
    let children: Vec<_> = files.iter().map(|file| spawn_ingest(&uri, file)).collect();
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
            "SELECT (next_seq > (SELECT max(change_seq) FROM spoolite_event))::text
             FROM spoolite_change_seq"
        ),
        [["true"]]
    );
}

#[test]
fn a_daemon_serves_a_spool_into_postgres_and_status_and_dry_run_read_it() {
    let db = PgDb::new();
    let uri = db.uri();
    let site = crate::support::Site::new();
    let mut daemon = crate::support_pg::start_daemon(&site, &uri, &[]);
    let batch = json_batch(&[
        event(
            "BA0117-20261129",
            "off_blocks",
            "2026-11-29T10:05:00Z",
            Some(1),
            "{}",
        ),
        event(
            "BA0117-20261129",
            "on_blocks",
            "2026-11-29T12:35:00Z",
            Some(1),
            "{}",
        ),
    ]);
    site.drop_file("a.json", &batch);
    daemon.wait(Duration::from_secs(20), "a.json archived", || {
        site.archived() == ["a.json"]
    });
    assert_eq!(
        db.query("SELECT file_name, inserted::text FROM ingest_inbox"),
        [["a.json", "2"]]
    );
    assert_eq!(
        db.query("SELECT block_minutes::text FROM flight_times"),
        [["150.00"]]
    );
    // status reads the database through the same URI.
    let output = crate::support::spoolite()
        .args(["status", "--json", "--spool"])
        .arg(&site.spool)
        .args(["--db", &uri])
        .output()
        .expect("status");
    let status: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("status JSON: {e}: {output:?}"));
    assert_eq!(status["batches"], 1, "{status}");
    assert_eq!(status["events"], 2, "{status}");
    daemon.signal(libc::SIGTERM);
    let stopped = daemon.wait_exit(Duration::from_secs(20), "the daemon to stop");
    assert_eq!(stopped.code(), Some(0), "{}", daemon.log());
    // A dry run of a second file counts its outcomes and writes nothing.
    let dir = tempfile::tempdir().expect("temp dir");
    let second = write(
        dir.path(),
        "b.ndjson",
        event(
            "BA0117-20261129",
            "on_blocks",
            "2026-11-29T12:35:00Z",
            Some(2),
            "{}",
        ) + "\n"
            + &event(
                "BA0118-20261129",
                "takeoff",
                "2026-11-29T13:00:00Z",
                None,
                "{}",
            )
            + "\n",
    );
    let before = db.rows("SELECT * FROM duty_event_all");
    let output = ingest_command(Path::new(&uri))
        .args(["--dry-run", "--json"])
        .arg(&second)
        .output()
        .expect("dry run");
    let line: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
    assert_eq!(
        (line["inserted"].as_u64(), line["updated"].as_u64()),
        (Some(1), Some(1)),
        "{line}"
    );
    assert_eq!(db.rows("SELECT * FROM duty_event_all"), before);
    assert_eq!(db.query("SELECT count(*)::text FROM ingest_inbox"), [["1"]]);
}

#[test]
fn a_file_larger_than_one_fetch_folds_the_same_on_both_backends() {
    let dir = tempfile::tempdir().expect("temp dir");
    // 25,000 events over 7,000 keys: three or four versions of each key, whose
    // runs cross the fold's fetches of 10,000 rows; revisions rise, fall and repeat.
    let lines: Vec<String> = (0..25_000_i64)
        .map(|i| {
            let key = i % 7000;
            let revision = [1, 3, 2, 3][(i / 7000) as usize % 4];
            let payload = if i % 11 == 0 { "{\"p\":1}" } else { "{}" };
            let text = event(
                &format!("BA{:04}-20261129", key % 300),
                if key % 2 == 0 { "takeoff" } else { "landing" },
                &format!(
                    "2026-11-29T{:02}:{:02}:{:02}Z",
                    key / 3600,
                    key / 60 % 60,
                    key % 60
                ),
                Some(revision),
                payload,
            );
            if i % 13 == 0 {
                format!("{},\"retracted\":true}}", &text[..text.len() - 1])
            } else {
                text
            }
        })
        .collect();
    let file = write(dir.path(), "big.ndjson", lines.join("\n") + "\n");
    let mut results = Vec::new();
    for backend in [Backend::sqlite(), Backend::postgres()] {
        let lines = ingest_each(&backend.db(), std::slice::from_ref(&file));
        results.push((lines, tables(&backend)));
    }
    assert_eq!(results[1].0, results[0].0);
    assert_eq!(results[1].1, results[0].1);
    let line = &results[0].0[0];
    assert_eq!(line["inserted"], 7000, "{line}");
    assert!(line["conflicts"].as_u64() > Some(0), "{line}");
}

/// Waits (bounded) until `daemon` has created the schema in `db`.
fn wait_for_the_schema(daemon: &mut crate::support::Daemon, db: &PgDb) {
    daemon.wait(Duration::from_secs(20), "the schema created", || {
        db.query("SELECT (to_regclass('spoolite_change_seq') IS NOT NULL)::text") == [["true"]]
    });
}

/// A daemon on a spool of its own, serving a new database with the schema made.
fn a_daemon_on_a_new_database() -> (PgDb, crate::support::Site, crate::support::Daemon) {
    let db = PgDb::new();
    let site = crate::support::Site::new();
    let mut daemon = crate::support_pg::start_daemon(&site, &db.uri(), &[]);
    wait_for_the_schema(&mut daemon, &db);
    (db, site, daemon)
}

/// Waits (bounded) until `count` sessions of `db` wait for a lock in a
/// statement holding `needle`.
fn wait_for_waiters(daemon: &mut crate::support::Daemon, db: &PgDb, needle: &str, count: usize) {
    let sql = format!(
        "SELECT count(*)::text FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND query LIKE '%{needle}%'"
    );
    daemon.wait(Duration::from_secs(20), needle, || {
        db.query(&sql) == [[count.to_string()]]
    });
}

/// A daemon waiting for a lock another writer holds (a lock of the file's
/// flight, then the counter row it numbers its rows under) stops at SIGTERM and
/// leaves the file in incoming/, having written nothing.
#[test]
fn a_daemon_waiting_for_another_writers_lock_stops_at_sigterm_and_leaves_the_file() {
    let holders = [
        (
            "SELECT pg_advisory_xact_lock(2, hashtext(lower('BA0117-20261129')))",
            "pg_advisory_xact_lock",
        ),
        (
            "SELECT 1 FROM spoolite_change_seq FOR UPDATE",
            "spoolite_change_seq",
        ),
    ];
    for (hold, waited_in) in holders {
        let (db, site, mut daemon) = a_daemon_on_a_new_database();
        let mut other = db.client();
        let mut applying = other.transaction().expect("begin");
        applying.execute(hold, &[]).expect("take the lock");
        let batch = json_batch(&[event(
            "BA0117-20261129",
            "takeoff",
            "2026-11-29T10:20:00Z",
            Some(1),
            "{}",
        )]);
        site.drop_file("a.json", &batch);
        wait_for_waiters(&mut daemon, &db, waited_in, 1);
        daemon.signal(libc::SIGTERM);
        let stopped = daemon.wait_exit(Duration::from_secs(10), "the daemon to stop");
        assert_eq!(stopped.code(), Some(0), "{hold}: {}", daemon.log());
        assert_eq!(
            site.waiting(),
            ["a.json"],
            "{hold}: the file stays in incoming/"
        );
        applying.rollback().expect("release the lock");
        assert_eq!(db.query("SELECT count(*)::text FROM ingest_inbox"), [["0"]]);
        assert_eq!(
            db.query("SELECT count(*)::text FROM duty_event_all"),
            [["0"]]
        );
    }
}

/// A file of more flights than a batch locks one by one waits for every
/// flight's lock (exclusive) while another writer holds it shared. It keeps its
/// place in the server's lock queue: a writer that asks for the shared lock
/// after it waits behind it, however long the wait (cut into 500 ms spans, each
/// span's end let the later writer pass), and gets it once the file is in. The
/// database's own `lock_timeout` (a site's setting) does not cut the wait short
/// either: the file would be tried again, behind the later writer.
#[test]
fn a_writer_waiting_for_every_flight_stays_ahead_of_writers_that_come_later() {
    let db = PgDb::new();
    db.server().admin(&format!(
        "ALTER DATABASE \"{}\" SET lock_timeout = '200ms'",
        db.name()
    ));
    let site = crate::support::Site::new();
    let mut daemon = crate::support_pg::start_daemon(&site, &db.uri(), &[]);
    wait_for_the_schema(&mut daemon, &db);
    let mut first = db.client();
    let mut applying = first.transaction().expect("begin");
    applying
        .execute("SELECT pg_advisory_xact_lock_shared(1, 0)", &[])
        .expect("take the shared lock");
    let ids = (0..300).map(|i| format!("BA{i:04}-20261129"));
    let events = takeoffs(ids, "2026-11-29T10:20:00Z");
    site.drop_file("every-flight.json", json_batch(&events));
    wait_for_waiters(&mut daemon, &db, "pg_advisory_xact_lock(1, 0)", 1);
    let mut later = db.client();
    let (granted, granted_at) = std::sync::mpsc::channel();
    let asking = std::thread::spawn(move || {
        let mut tx = later.transaction().expect("begin");
        tx.batch_execute("SET LOCAL statement_timeout = '60s'; SET LOCAL lock_timeout = 0")
            .expect("bound the wait");
        tx.execute("SELECT pg_advisory_xact_lock_shared(1, 0)", &[])
            .expect("the shared lock");
        let inbox: i64 = tx
            .query_one("SELECT count(*) FROM ingest_inbox", &[])
            .expect("count")
            .get(0);
        granted.send(inbox).expect("send");
        tx.rollback().expect("release");
    });
    wait_for_waiters(&mut daemon, &db, "pg_advisory_xact_lock_shared(1, 0)", 1);
    // Three of the old spans: the later writer must still be waiting.
    assert_eq!(
        granted_at.recv_timeout(Duration::from_millis(1500)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout),
        "the later writer passed the waiting file: {}",
        daemon.log()
    );
    applying.rollback().expect("release the shared lock");
    let inbox = granted_at
        .recv_timeout(Duration::from_secs(30))
        .expect("the later writer gets the lock once the file is in");
    assert_eq!(
        inbox, 1,
        "the file committed before the later writer's turn"
    );
    asking.join().expect("the later writer");
    assert_eq!(
        db.query("SELECT count(*)::text FROM duty_event_all"),
        [["300"]]
    );
    checked_and_stopped(&db.uri(), &mut [daemon]);
}

/// Crew member C0's duty of 2026-12-01, from 06:00 to `end`: its duty_start and
/// duty_end.
fn c0_duty(end: &str) -> [String; 2] {
    let id = "DUTY-C0-20261201";
    [
        event(
            id,
            "duty_start",
            "2026-12-01T06:00:00Z",
            Some(1),
            r#"{"crew":["C0"]}"#,
        ),
        event(id, "duty_end", end, Some(1), "{}"),
    ]
}

/// A flight of crew member C0: its off_blocks and on_blocks.
fn c0_flight(id: &str, off: &str, on: &str) -> [String; 2] {
    let crew = r#"{"crew":["C0"]}"#;
    [
        event(id, "off_blocks", off, Some(1), crew),
        event(id, "on_blocks", on, Some(1), crew),
    ]
}

/// A batch's statements run with the JIT compiler off. With the server's
/// defaults, once a station's files had put a few tens of thousands of rows in
/// the crew tables, the planner's estimate for the flight duty periods'
/// statement passed the JIT thresholds, and compiling it took 200 of its 220 ms
/// in the step writers take one at a time. A trigger notes the setting that
/// statement ran under.
#[test]
fn a_batch_computes_its_flight_duty_periods_without_the_jit_compiler() {
    let (db, site, mut daemon) = a_daemon_on_a_new_database();
    db.client()
        .batch_execute(
            "CREATE TABLE test_jit (setting text);
             CREATE FUNCTION test_note_jit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO test_jit VALUES (current_setting('jit'));
                 RETURN NULL;
             END $$;
             CREATE TRIGGER test_note_jit AFTER INSERT ON spoolite_crew_fdp
                 FOR EACH STATEMENT EXECUTE FUNCTION test_note_jit()",
        )
        .expect("the trigger");
    assert_eq!(db.query("SHOW jit"), [["on"]], "the server's default");
    let [start, end] = c0_duty("2026-12-01T10:00:00Z");
    let [off, on] = c0_flight(
        "LH0001-20261201",
        "2026-12-01T07:00:00Z",
        "2026-12-01T08:30:00Z",
    );
    site.drop_file("duty.json", json_batch(&[start, off, on, end]));
    daemon.wait(Duration::from_secs(20), "the file in", || {
        db.query("SELECT count(*)::text FROM ingest_inbox") == [["1"]]
    });
    assert_eq!(
        db.query("SELECT fdp_end_utc FROM crew_fdp"),
        [["2026-12-01T08:30:00Z"]]
    );
    assert_eq!(db.query("SELECT setting FROM test_jit"), [["off"]]);
    checked_and_stopped(&db.uri(), &mut [daemon]);
}

/// A takeoff at `at`, revision 1, of each flight of `ids`.
fn takeoffs(ids: impl Iterator<Item = String>, at: &str) -> Vec<String> {
    ids.map(|id| event(&id, "takeoff", at, Some(1), "{}"))
        .collect()
}

/// `spoolite check` of `uri` passes, and each daemon stops at SIGTERM with exit 0.
fn checked_and_stopped(uri: &str, daemons: &mut [crate::support::Daemon]) {
    let checked = crate::support::spoolite()
        .args(["check", "--db", uri])
        .output()
        .expect("spoolite check");
    assert_eq!(checked.status.code(), Some(0), "{checked:?}");
    for daemon in daemons {
        daemon.signal(libc::SIGTERM);
        assert!(
            daemon
                .wait_exit(Duration::from_secs(20), "the daemon to stop")
                .success()
        );
    }
}

/// Two writers of other flights apply side by side and meet only at the counter
/// row, where each computes the flight duty periods its rows touch from what
/// the writers before it committed. Held there together, a crew member's duty
/// with its first flight and, from the other spool, that member's second
/// flight: whichever commits second sees the first's rows, so the period ends at
/// the second flight's on-blocks. Computed before the counter (each from what
/// was committed when both were still open), it ended at the first flight's.
#[test]
fn writers_held_at_the_counter_compute_a_period_from_each_others_commits() {
    let db = PgDb::new();
    let uri = db.uri();
    let sites: Vec<_> = (0..2).map(|_| crate::support::Site::new()).collect();
    let mut daemons: Vec<_> = sites
        .iter()
        .map(|site| crate::support_pg::start_daemon(site, &uri, &[]))
        .collect();
    wait_for_the_schema(&mut daemons[0], &db);
    let mut other = db.client();
    let mut holding = other.transaction().expect("begin");
    holding
        .execute("SELECT 1 FROM spoolite_change_seq FOR UPDATE", &[])
        .expect("lock the counter");
    let duty = c0_duty("2026-12-01T18:00:00Z");
    let first = c0_flight(
        "LH0001-20261201",
        "2026-12-01T07:00:00Z",
        "2026-12-01T08:30:00Z",
    );
    let second = c0_flight(
        "LH0002-20261201",
        "2026-12-01T12:00:00Z",
        "2026-12-01T13:30:00Z",
    );
    sites[0].drop_file("duty.json", json_batch(&[&duty[..], &first[..]].concat()));
    sites[1].drop_file("second.json", json_batch(&second));
    // Both at the counter.
    wait_for_waiters(&mut daemons[0], &db, "spoolite_change_seq", 2);
    holding.rollback().expect("release the counter");
    for (daemon, site) in daemons.iter_mut().zip(&sites) {
        daemon.wait(Duration::from_secs(20), "the file archived", || {
            site.archived().len() == 1
        });
    }
    assert_eq!(
        db.query("SELECT duty_id, crew_id, fdp_start_utc, fdp_end_utc FROM crew_fdp"),
        [[
            "DUTY-C0-20261201",
            "C0",
            "2026-12-01T06:00:00Z",
            "2026-12-01T13:30:00Z"
        ]]
    );
    checked_and_stopped(&uri, &mut daemons);
}

/// A writer whose numbers another writer passed, by taking later ones and
/// committing first, gives its rows new numbers before it commits: every number
/// it commits is above every one committed before. Here the other writer is
/// the test's own transaction, holding the counter row while the daemon's batch
/// takes its numbers and waits, then committing a number above them.
#[test]
fn a_writer_passed_by_a_later_commit_numbers_its_rows_again() {
    let (db, site, mut daemon) = a_daemon_on_a_new_database();
    let uri = db.uri();
    let mut other = db.client();
    let mut passing = other.transaction().expect("begin");
    passing
        .execute("SELECT 1 FROM spoolite_change_seq FOR UPDATE", &[])
        .expect("lock the counter");
    let ids = (0..5).map(|n| format!("LH000{n}-20261201"));
    let events = takeoffs(ids, "2026-12-01T10:00:00Z");
    site.drop_file("a.json", json_batch(&events));
    // The batch at the counter.
    wait_for_waiters(&mut daemon, &db, "spoolite_change_seq", 1);
    // The batch's rows hold numbers from the sequence; a later one committed.
    let passed: i64 = passing
        .query_one(
            "UPDATE spoolite_change_seq SET next_seq = nextval('spoolite_change_seq_next') + 1
             RETURNING next_seq",
            &[],
        )
        .expect("pass the batch")
        .get(0);
    passing.commit().expect("commit");
    daemon.wait(Duration::from_secs(20), "a.json archived", || {
        site.archived() == ["a.json"]
    });
    let numbers = db.query("SELECT change_seq::text FROM duty_event_all ORDER BY change_seq");
    assert_eq!(numbers.len(), 5);
    for number in &numbers {
        let number: i64 = number[0].parse().expect("a number");
        assert!(number >= passed, "{numbers:?} against {passed}");
    }
    checked_and_stopped(&uri, &mut [daemon]);
}

/// A sequence of change_seq numbers behind the counter (a spoolite of schema 7
/// numbered from the counter after the upgrade, or a change made by hand) is
/// moved up by the next batch, whose numbers are above every committed one.
#[test]
fn a_batch_moves_up_a_sequence_left_behind_the_counter() {
    let db = PgDb::new();
    let uri = PathBuf::from(db.uri());
    let dir = tempfile::tempdir().expect("temp dir");
    let takeoff = |flight: &str| event(flight, "takeoff", "2026-12-01T10:00:00Z", Some(1), "{}");
    let first = write(
        dir.path(),
        "a.json",
        json_batch(&[takeoff("LH0001-20261201")]),
    );
    let (code, _) = ingest_json(&uri, &[&first]);
    assert_eq!(code, 0);
    db.client()
        .batch_execute("SELECT setval('spoolite_change_seq_next', 1, false)")
        .expect("set the sequence back");
    let second = write(
        dir.path(),
        "b.json",
        json_batch(&[takeoff("LH0002-20261201")]),
    );
    let (code, lines) = ingest_json(&uri, &[&second]);
    assert_eq!(
        (code, lines[0]["inserted"].as_u64()),
        (0, Some(1)),
        "{lines:?}"
    );
    assert_eq!(
        db.query("SELECT flight_id, change_seq::text FROM duty_event_all ORDER BY change_seq"),
        [["LH0001-20261201", "1"], ["LH0002-20261201", "2"]]
    );
    let checked = crate::support::spoolite()
        .arg("check")
        .arg("--db")
        .arg(&uri)
        .output()
        .expect("spoolite check");
    assert_eq!(checked.status.code(), Some(0), "{checked:?}");
}

/// A station's file of a few flights reads the event, flight and crew tables
/// through their indexes however many rows they hold: the plan of every
/// statement of its ingest (`auto_explain`) holds no sequential scan of them.
/// Before the batch's temporary tables were analysed, the planner took each for
/// 1,360 rows and computed the flights' times and crew rows by hash joins that
/// read the whole event table, so a file's cost grew with the database. With
/// autovacuum off: the load analyses the tables it wrote itself (before, the
/// station files after a load of 1M events cost 7× what they cost into an empty
/// database until autovacuum came by).
#[test]
fn a_small_file_reads_the_large_tables_through_their_indexes() {
    use spoolite_testkit::generate::{BatchSpec, Layout, write_batch_file};
    // No autovacuum: the statistics the station's file is planned with are those
    // the load's own batch left.
    let db = PgDb::on(crate::support_pg::Server::own("-c autovacuum=off"));
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = |offset, count| BatchSpec {
        offset,
        count,
        revision: 0,
        crew_changed: false,
        batch_id: format!("b{offset}"),
    };
    let base = dir.path().join("base.ndjson");
    write_batch_file(&base, 7, &spec(0, 30_000), Layout::Ndjson).expect("write base");
    let (code, lines) = ingest_json(Path::new(&db.uri()), &[&base]);
    assert_eq!((code, lines[0]["inserted"].as_u64()), (0, Some(30_000)));
    // A load of more than a tenth of the table analyses what it wrote.
    let analysed = db.query(
        "SELECT DISTINCT tablename::text FROM pg_stats
         WHERE tablename::text LIKE 'spoolite\\_%' ORDER BY 1",
    );
    assert_eq!(
        analysed.concat(),
        [
            "spoolite_crew_duty",
            "spoolite_crew_fdp",
            "spoolite_crew_flight",
            "spoolite_event",
            "spoolite_flight",
            "spoolite_flight_id",
            // The expression index's own statistics.
            "spoolite_flight_id_lower"
        ]
    );
    for setting in [
        "session_preload_libraries = 'auto_explain'",
        "auto_explain.log_min_duration = 0",
    ] {
        db.server()
            .admin(&format!("ALTER DATABASE {} SET {setting}", db.name()));
    }
    // Five new flights, their duties and crew, and one flight already stored.
    let station = dir.path().join("station.ndjson");
    write_batch_file(&station, 7, &spec(29_994, 36), Layout::Ndjson).expect("write station");
    let logged = db.server().log().len();
    let (code, lines) = ingest_json(Path::new(&db.uri()), &[&station]);
    assert_eq!(
        (code, lines[0]["inserted"].as_u64()),
        (0, Some(30)),
        "{lines:?}"
    );
    // A small file leaves the statistics as they were (and to autovacuum).
    let rows = "SELECT reltuples::bigint::text FROM pg_class WHERE relname = 'spoolite_event'";
    assert_eq!(db.query(rows), [["30000"]]);
    let log = db.server().log()[logged..].to_owned();
    assert!(log.contains("Index Scan"), "no plan was logged: {log}");
    for table in [
        "spoolite_event",
        "spoolite_flight",
        "spoolite_crew_flight",
        "spoolite_crew_duty",
        "spoolite_crew_fdp",
    ] {
        assert!(
            !log.contains(&format!("Seq Scan on {table} ")),
            "a sequential scan of {table}:\n{log}"
        );
    }
}
