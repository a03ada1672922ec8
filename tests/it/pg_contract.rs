//! The contract's ingest laws on both backends from one test body: the
//! order/repetition property, bad whole files and canonical forms, run against
//! SQLite and PostgreSQL alike, compared as whole views. `Backend` is a database
//! of either kind that a test body takes; `views` reads the contract's views of
//! one the same way on both.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::Value;
use tempfile::TempDir;

use crate::ingest::{
    bad_whole_files, broken_batch, broken_lines, check_order_and_repetition, edges_ndjson,
    key_vectors_batch, one_instant_files, scenario,
};
use crate::retractions::{check_change_seq_laws, files_and_deliveries};
use crate::support::{COUNT_FIELDS, ingest_command, ingest_json, parse_lines, query, write};
use crate::support_pg::PgDb;

/// One database of either backend.
pub enum Backend {
    Sqlite { _dir: TempDir, path: PathBuf },
    Postgres(PgDb),
}

impl Backend {
    pub fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        Backend::Sqlite { _dir: dir, path }
    }

    pub fn postgres() -> Backend {
        Backend::Postgres(PgDb::new())
    }

    /// The database, borrowed, as a test body that reads either backend takes it.
    pub fn as_db(&self) -> DbRef<'_> {
        match self {
            Backend::Sqlite { path, .. } => DbRef::Sqlite(path),
            Backend::Postgres(db) => DbRef::Postgres(db),
        }
    }

    /// What `--db` is given.
    pub fn db(&self) -> PathBuf {
        self.as_db().db()
    }

    /// Rows of a query written for both backends (see `DbRef::rows`).
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        self.as_db().rows(sql)
    }

    /// Makes a PostgreSQL database as new: no schema, no rows (a SQLite one is
    /// made anew by `sqlite`).
    pub fn empty_again(&self) {
        let Backend::Postgres(db) = self else {
            panic!("a SQLite database is made anew, not emptied");
        };
        db.client()
            .batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            .expect("empty the database");
    }

    /// Whether spoolite has made its schema yet (a SQLite file exists once it has).
    pub fn has_schema(&self) -> bool {
        match self {
            Backend::Sqlite { path, .. } => path.exists(),
            Backend::Postgres(db) => {
                db.query("SELECT (to_regclass('duty_event_all') IS NOT NULL)::text") == [["true"]]
            }
        }
    }

    /// `rows` with each row's values joined by `|`, sorted.
    pub fn lines(&self, sql: &str) -> Vec<String> {
        let mut lines: Vec<String> = self
            .rows(sql)
            .into_iter()
            .map(|row| row.join("|"))
            .collect();
        lines.sort();
        lines
    }
}

/// A database of either backend, borrowed from whatever holds it (a `Backend`, a
/// test's SQLite file, a `PgDb`): for the test bodies that run on both.
#[derive(Clone, Copy)]
pub enum DbRef<'a> {
    Sqlite(&'a Path),
    Postgres(&'a PgDb),
}

impl DbRef<'_> {
    /// What `--db` is given.
    pub fn db(self) -> PathBuf {
        match self {
            DbRef::Sqlite(path) => path.to_owned(),
            DbRef::Postgres(db) => PathBuf::from(db.uri()),
        }
    }

    /// Rows of a query written for both backends, as text: `{retracted}` becomes
    /// the column as 0/1 and `{t}` a cast to text (PostgreSQL's values are read as
    /// text); SQLite's integers read in decimal.
    pub fn rows(self, sql: &str) -> Vec<Vec<String>> {
        match self {
            DbRef::Sqlite(path) => query(
                path,
                &sql.replace("{retracted}", "retracted").replace("{t}", ""),
            ),
            DbRef::Postgres(db) => db.query(
                &sql.replace("{retracted}", "retracted::int")
                    .replace("{t}", "::text"),
            ),
        }
    }
}

impl<'a> From<&'a Path> for DbRef<'a> {
    fn from(path: &'a Path) -> DbRef<'a> {
        DbRef::Sqlite(path)
    }
}

impl<'a> From<&'a PathBuf> for DbRef<'a> {
    fn from(path: &'a PathBuf) -> DbRef<'a> {
        DbRef::Sqlite(path)
    }
}

impl<'a> From<&'a PgDb> for DbRef<'a> {
    fn from(db: &'a PgDb) -> DbRef<'a> {
        DbRef::Postgres(db)
    }
}

/// Whether `views` reads the times spoolite writes (`ingested_at`, `first_seen_at`,
/// `updated_at`, `quarantined_at`), which differ between two runs of the same
/// files but must survive a copy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Times {
    Included,
    Left,
}

/// The contract's views, every column both backends have (`batch_summary`'s
/// `batch_ref` is SQLite's own), `change_seq` as stored, sorted: `duty_event_all`,
/// `duty_event`, `ingest_inbox`, `quarantine`, `batch_summary`, `flight_times`.
pub fn views(backend: &Backend, times: Times) -> Vec<(&'static str, Vec<String>)> {
    let crew = crate::crew::crew_views(backend);
    let t = |columns: &str| -> String {
        if times == Times::Included {
            columns.to_owned()
        } else {
            String::new()
        }
    };
    let minutes = |rows: Vec<String>| -> Vec<String> {
        // SQLite's minutes are real (100.0 reads "100"), PostgreSQL's numeric
        // ("100.00"): compare the values, to two places.
        rows.into_iter()
            .map(|line| {
                line.split('|')
                    .enumerate()
                    .map(|(at, value)| match value.parse::<f64>() {
                        Ok(number) if at >= 5 => format!("{number:.2}"),
                        _ => value.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect()
    };
    vec![
        (
            "duty_event_all",
            backend.lines(&format!(
                "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision{{t}},
                        payload, {{retracted}}{{t}}, batch_digest, {} change_seq{{t}}
                 FROM duty_event_all",
                t("first_seen_at, updated_at,")
            )),
        ),
        (
            "duty_event",
            backend.lines(&format!(
                "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision{{t}},
                        payload, batch_digest, {} change_seq{{t}}
                 FROM duty_event",
                t("first_seen_at, updated_at,")
            )),
        ),
        (
            "ingest_inbox",
            backend.lines(&format!(
                "SELECT batch_digest, coalesce(batch_id, 'NULL'), file_name, {} events_total{{t}},
                        inserted{{t}}, updated{{t}}, unchanged{{t}}, stale{{t}}, conflicts{{t}},
                        invalid{{t}}
                 FROM ingest_inbox",
                t("ingested_at,")
            )),
        ),
        (
            "quarantine",
            backend.lines(&format!(
                "SELECT batch_digest, file_name, record_index{{t}}, reason, detail, raw {}
                 FROM quarantine",
                t(", quarantined_at")
            )),
        ),
        (
            "batch_summary",
            backend.lines(&format!(
                "SELECT batch_digest, coalesce(batch_id, 'NULL'), file_name, {} events_total{{t}},
                        inserted{{t}}, updated{{t}}, unchanged{{t}}, stale{{t}}, conflicts{{t}},
                        invalid{{t}}, rows_last_written{{t}}, quarantined{{t}}
                 FROM batch_summary",
                t("ingested_at,")
            )),
        ),
        (
            "flight_times",
            minutes(backend.lines(
                "SELECT flight_id, coalesce(off_blocks_utc, 'NULL'), coalesce(takeoff_utc, 'NULL'),
                        coalesce(landing_utc, 'NULL'), coalesce(on_blocks_utc, 'NULL'),
                        coalesce(block_minutes{t}, 'NULL'), coalesce(airborne_minutes{t}, 'NULL')
                 FROM flight_times",
            )),
        ),
        ("crew_flight", crew.0),
        ("crew_duty", crew.1),
        ("crew_fdp", crew.2),
    ]
}

/// Asserts that two databases' views are equal, naming the first view that is not.
pub fn assert_views_equal(
    left: &[(&'static str, Vec<String>)],
    right: &[(&'static str, Vec<String>)],
    what: &str,
) {
    assert_eq!(left.len(), right.len());
    for ((name, left), (_, right)) in left.iter().zip(right) {
        assert_eq!(left, right, "{name}: {what}");
    }
}

/// The property of `tests/it/ingest.rs` (the same body, `check_order_and_repetition`)
/// on PostgreSQL. Two databases serve every case, emptied to no schema at all
/// before each (as new: spoolite creates the schema again), since making and
/// dropping a database per case (a checkpoint each) would take most of the time.
/// Fewer cases than SQLite's, to stay within seconds.
#[test]
fn order_and_repetition_of_conflict_free_files_do_not_matter_on_postgres() {
    let (drawn, other) = (Backend::postgres(), Backend::postgres());
    let config = ProptestConfig {
        cases: 8,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&scenario(), |scenario| {
        drawn.empty_again();
        other.empty_again();
        check_order_and_repetition(&scenario, &drawn, &other);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// The change_seq laws of `tests/it/retractions.rs` (the same body,
/// `check_change_seq_laws`) on PostgreSQL, on one database emptied to no schema
/// before each case.
#[test]
fn change_seq_follows_the_laws_over_random_files_and_re_drops_on_postgres() {
    let db = Backend::postgres();
    let config = ProptestConfig {
        cases: 8,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&files_and_deliveries(), |(files, deliveries)| {
        db.empty_again();
        check_change_seq_laws(&files, &deliveries, &db);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A processed file's counts, in `COUNT_FIELDS` order.
fn counts(line: &Value) -> Vec<u64> {
    COUNT_FIELDS
        .iter()
        .map(|field| line[field].as_u64().unwrap_or(u64::MAX))
        .collect()
}

#[test]
fn canonical_forms_and_invalid_events_read_the_same_from_sqlite_and_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The files of ingest.rs's canonical-form and invalid-event tests, in turn
    // into one database of each backend.
    let mut files: Vec<(&str, String)> = vec![("vectors.json", key_vectors_batch())];
    files.extend(one_instant_files());
    files.push(("broken.json", broken_batch()));
    files.push(("lines.ndjson", broken_lines().1));
    files.push(("edges.ndjson", edges_ndjson()));
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|(name, content)| write(dir.path(), name, content))
        .collect();
    let mut results = Vec::new();
    for backend in [Backend::sqlite(), Backend::postgres()] {
        let lines: Vec<Value> = paths
            .iter()
            .map(|path| {
                let (code, mut lines) = ingest_json(&backend.db(), &[path]);
                assert_eq!(code, 0, "{}: {lines:?}", path.display());
                assert_eq!(lines.len(), 1, "{lines:?}");
                lines.pop().expect("one line")
            })
            .collect();
        results.push((lines, views(&backend, Times::Left)));
    }
    let (sqlite_lines, sqlite_views) = &results[0];
    let (pg_lines, pg_views) = &results[1];
    assert_eq!(pg_lines, sqlite_lines);
    assert_views_equal(pg_views, sqlite_views, "PostgreSQL against SQLite");
    // The counts ingest.rs asserts on SQLite (but the first of one instant's
    // forms, which updates a key vector's row here), so that two backends
    // agreeing on a wrong answer would still fail.
    let expected: [&[u64]; 7] = [
        &[5, 5, 0, 0, 0, 0, 0],
        &[1, 0, 1, 0, 0, 0, 0],
        &[1, 0, 0, 1, 0, 0, 0],
        &[1, 0, 0, 1, 0, 0, 0],
        &[1, 0, 0, 1, 0, 0, 0],
        &[11, 1, 0, 0, 0, 0, 10],
        &[4, 1, 0, 0, 0, 0, 3],
    ];
    for (line, expected) in pg_lines.iter().zip(expected) {
        assert_eq!(line["outcome"], "processed", "{line}");
        assert_eq!(counts(line), expected, "{line}");
    }
    let edges = &pg_lines[7];
    assert!(
        counts(edges)[1] > 0 && counts(edges)[6] > 0,
        "edges.ndjson stores some events and quarantines others: {edges}"
    );
}

#[test]
fn bad_whole_files_are_rejected_alike_on_both_backends_and_leave_no_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (seed, files, good) = bad_whole_files();
    let seed = write(dir.path(), "seed.json", seed);
    let good = write(dir.path(), "good.json", good);
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|file| write(dir.path(), file.name, &file.content))
        .collect();
    let mut results = Vec::new();
    for backend in [Backend::sqlite(), Backend::postgres()] {
        let (code, lines) = ingest_json(&backend.db(), &[&seed]);
        assert_eq!((code, &lines[0]["outcome"]), (0, &Value::from("processed")));
        let before = views(&backend, Times::Included);
        let mut rejected = Vec::new();
        for (file, path) in files.iter().zip(&paths) {
            let output = ingest_command(&backend.db())
                .arg("--json")
                .args(file.options)
                .arg(path)
                .output()
                .expect("run");
            let mut lines = parse_lines(&output);
            assert_eq!(output.status.code(), Some(1), "{}: {lines:?}", file.name);
            assert_eq!(lines.len(), 1, "{}: {lines:?}", file.name);
            let mut line = lines.pop().expect("one line");
            // The time taken differs from backend to backend and run to run.
            let duration = line.as_object_mut().and_then(|l| l.remove("duration_ms"));
            assert!(
                duration.is_some_and(|d| d.is_u64()),
                "{}: {line}",
                file.name
            );
            assert_eq!(line["outcome"], "rejected", "{}: {line}", file.name);
            assert_eq!(line["reason"], file.reason, "{}: {line}", file.name);
            assert_views_equal(
                &views(&backend, Times::Included),
                &before,
                &format!("{} left a trace", file.name),
            );
            rejected.push(line);
        }
        // None of those left an inbox row: the good file's bytes are still new.
        let (code, lines) = ingest_json(&backend.db(), &[&good]);
        assert_eq!(code, 0, "{lines:?}");
        assert_eq!(counts(&lines[0]), [3, 1, 1, 0, 0, 0, 1], "{}", lines[0]);
        results.push((rejected, views(&backend, Times::Left)));
    }
    assert_eq!(results[1].0, results[0].0, "the same reasons and details");
    assert_views_equal(&results[1].1, &results[0].1, "PostgreSQL against SQLite");
}
