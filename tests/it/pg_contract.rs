//! The contract's ingest laws on both backends from one test body: the
//! order/repetition property, bad whole files and canonical forms, run against
//! SQLite and PostgreSQL alike, compared as whole views. `Backend` is a database
//! of either kind that a test body takes; `views` reads the contract's views of
//! one the same way on both.

use std::path::PathBuf;

use proptest::prelude::*;
use tempfile::TempDir;

use crate::ingest::{check_order_and_repetition, scenario};
use crate::retractions::{check_change_seq_laws, files_and_deliveries};
use crate::support::query;
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

    /// What `--db` is given.
    pub fn db(&self) -> PathBuf {
        match self {
            Backend::Sqlite { path, .. } => path.clone(),
            Backend::Postgres(db) => PathBuf::from(db.uri()),
        }
    }

    /// Rows of a query written for both backends, as text: `{retracted}` becomes
    /// the column as 0/1 and `{t}` a cast to text (PostgreSQL's values are read as
    /// text); SQLite's integers read in decimal.
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        match self {
            Backend::Sqlite { path, .. } => query(
                path,
                &sql.replace("{retracted}", "retracted").replace("{t}", ""),
            ),
            Backend::Postgres(db) => db.query(
                &sql.replace("{retracted}", "retracted::int")
                    .replace("{t}", "::text"),
            ),
        }
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
