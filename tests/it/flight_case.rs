//! Flight ids that differ only in letter case: each spelling is kept as sent (its
//! own flight, the key computed from it), and the batch that brings a new spelling
//! is logged at warn level with both, once per pair; on both backends, through
//! `spoolite ingest` and the daemon, on a database made by the previous schema and
//! on one filled by `copy-db`.

use std::path::Path;
use std::time::Duration;

use crate::pg_contract::Backend;
use crate::support::{
    Site, event, ingest_command, json_batch, migrations_sql, pg_schema_version, sha256_hex,
    spoolite, sqlite_schema_version, write,
};
use crate::support_pg::PgDb;

/// The warning for `sent`, new in the file `file`, beside `other`, stored.
fn warning(file: &str, sent: &str, other: &str) -> String {
    format!(
        "{file}: flight id {sent:?} differs only in letter case from {other:?}, already \
         stored; kept as sent, as a flight of its own"
    )
}

/// The warn-level lines about letter case in a log, each from its message on.
fn case_warnings(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| line.contains("letter case"))
        .map(|line| {
            assert!(line.contains(" WARN "), "logged at warn level: {line}");
            let at = line.find("] ").map_or(0, |at| at + 2);
            line[at..].to_owned()
        })
        .collect()
}

/// `spoolite ingest --db DB FILE`, which must process it; returns its warnings
/// about letter case.
fn ingest(db: &Path, file: &Path) -> Vec<String> {
    let output = ingest_command(db).arg(file).output().expect("run ingest");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("processed "), "{stdout}");
    case_warnings(&stderr)
}

fn at(flight_id: &str, kind: &str, time: &str) -> String {
    event(
        flight_id,
        kind,
        &format!("2026-11-29T{time}Z"),
        Some(1),
        "{}",
    )
}

/// The first file: two flights.
fn day() -> String {
    json_batch(&[
        at("BA0117-20261129", "off_blocks", "10:05:00"),
        at("EZY8421-20261129", "off_blocks", "11:00:00"),
    ])
}

/// The second: one of them spelled in lower case, another flight whose id
/// differs otherwise, and the other flight as before.
fn late() -> String {
    json_batch(&[
        at("ba0117-20261129", "landing", "12:05:00"),
        at("BA0117-20261130", "off_blocks", "10:05:00"),
        at("EZY8421-20261129", "takeoff", "11:10:00"),
    ])
}

/// Two spellings across files: two flights, the second told once, and never
/// again once both are stored.
fn check_across_files(backend: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = backend.db();
    let day = write(dir.path(), "day.json", day());
    assert_eq!(ingest(&db, &day), Vec::<String>::new());
    let late = write(dir.path(), "late.json", late());
    assert_eq!(
        ingest(&db, &late),
        [warning("late.json", "ba0117-20261129", "BA0117-20261129")]
    );
    let again = write(
        dir.path(),
        "again.json",
        json_batch(&[
            at("ba0117-20261129", "takeoff", "10:20:00"),
            at("BA0117-20261129", "takeoff", "10:21:00"),
        ]),
    );
    assert_eq!(ingest(&db, &again), Vec::<String>::new());
    assert_eq!(
        backend.lines("SELECT flight_id, coalesce(off_blocks_utc, '-'), coalesce(landing_utc, '-') FROM flight_times"),
        [
            "BA0117-20261129|2026-11-29T10:05:00Z|-",
            "BA0117-20261130|2026-11-29T10:05:00Z|-",
            "EZY8421-20261129|2026-11-29T11:00:00Z|-",
            "ba0117-20261129|-|2026-11-29T12:05:00Z",
        ]
    );
    assert_eq!(
        backend.lines("SELECT flight_id, event_kind FROM duty_event WHERE lower(flight_id) = 'ba0117-20261129'"),
        [
            "BA0117-20261129|off_blocks",
            "BA0117-20261129|takeoff",
            "ba0117-20261129|landing",
            "ba0117-20261129|takeoff",
        ]
    );
}

/// Three spellings of one flight in one file, each after the first told once per
/// other spelling before it; ids that differ otherwise are not told.
fn check_within_one_file(backend: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = backend.db();
    let lines = [
        at("BA0117-20261129", "off_blocks", "10:05:00"),
        at("ba0117-20261129", "takeoff", "10:20:00"),
        at("BA0117-20261129", "landing", "12:05:00"),
        at("ba0117-20261129", "on_blocks", "12:15:00"),
        at("Ba0117-20261129", "duty_end", "13:00:00"),
        at("BA0118-20261129", "off_blocks", "10:05:00"),
        at("BA0117-20261128", "off_blocks", "10:05:00"),
    ];
    let one = write(dir.path(), "one.ndjson", lines.join("\n") + "\n");
    assert_eq!(
        ingest(&db, &one),
        [
            warning("one.ndjson", "ba0117-20261129", "BA0117-20261129"),
            warning("one.ndjson", "Ba0117-20261129", "BA0117-20261129"),
            warning("one.ndjson", "Ba0117-20261129", "ba0117-20261129"),
        ]
    );
    assert_eq!(
        backend.lines("SELECT flight_id, count(*){t} FROM duty_event GROUP BY flight_id"),
        [
            "BA0117-20261128|1",
            "BA0117-20261129|2",
            "BA0118-20261129|1",
            "Ba0117-20261129|1",
            "ba0117-20261129|2",
        ]
    );
}

/// Many new spellings in one file: the first few told one by one, the rest
/// counted.
fn check_many(backend: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = backend.db();
    let ids: Vec<String> = (0..13).map(|n| format!("BA{n:04}-20261129")).collect();
    let upper: Vec<String> = ids
        .iter()
        .map(|id| at(id, "off_blocks", "10:05:00"))
        .collect();
    let lower: Vec<String> = ids
        .iter()
        .map(|id| at(&id.to_lowercase(), "off_blocks", "10:05:00"))
        .collect();
    let first = write(dir.path(), "upper.json", json_batch(&upper));
    assert_eq!(ingest(&db, &first), Vec::<String>::new());
    let second = write(dir.path(), "lower.json", json_batch(&lower));
    let mut expected: Vec<String> = ids[..10]
        .iter()
        .map(|id| warning("lower.json", &id.to_lowercase(), id))
        .collect();
    expected.push(
        "lower.json: 3 more flight ids differ only in letter case from one already stored; \
         kept as sent"
            .to_owned(),
    );
    assert_eq!(ingest(&db, &second), expected);
    assert_eq!(
        backend.lines("SELECT flight_id FROM flight_times").len(),
        26
    );
}

#[test]
fn many_new_spellings_in_one_file_are_told_ten_then_counted_on_sqlite() {
    check_many(&Backend::sqlite());
}

#[test]
fn many_new_spellings_in_one_file_are_told_ten_then_counted_on_postgres() {
    check_many(&Backend::postgres());
}

#[test]
fn two_spellings_of_a_flight_across_files_are_two_flights_told_once_on_sqlite() {
    check_across_files(&Backend::sqlite());
}

#[test]
fn two_spellings_of_a_flight_across_files_are_two_flights_told_once_on_postgres() {
    check_across_files(&Backend::postgres());
}

#[test]
fn spellings_of_a_flight_within_one_file_are_told_once_per_pair_on_sqlite() {
    check_within_one_file(&Backend::sqlite());
}

#[test]
fn spellings_of_a_flight_within_one_file_are_told_once_per_pair_on_postgres() {
    check_within_one_file(&Backend::postgres());
}

#[test]
fn the_daemon_logs_a_second_spelling_naming_the_file() {
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args(["--settle", "100ms"]));
    daemon.wait_serving(&site);
    site.drop_file("day.json", day());
    daemon.wait(Duration::from_secs(20), "day.json archived", || {
        site.archived() == ["day.json"]
    });
    site.drop_file("late.json", late());
    daemon.wait(Duration::from_secs(20), "late.json archived", || {
        site.archived().len() == 2
    });
    daemon.wait(Duration::from_secs(5), "the warning logged", || {
        !case_warnings(&site.log()).is_empty()
    });
    assert_eq!(
        case_warnings(&site.log()),
        [warning("late.json", "ba0117-20261129", "BA0117-20261129")]
    );
}

/// Runs SQL of the test's own on the database.
fn execute(backend: &Backend, sql: &str) {
    match backend {
        Backend::Sqlite { path, .. } => rusqlite::Connection::open(path)
            .and_then(|conn| conn.execute_batch(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
        Backend::Postgres(db) => db
            .client()
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    }
}

/// `day.json` as an older schema stored it (SQLite schema 5, PostgreSQL schema
/// 1): that schema made from its own migration files, and the file's inbox row and
/// two events written in its layout.
fn day_in_an_older_schema(backend: &Backend) {
    let digest = sha256_hex(day());
    let key = |flight: &str| {
        sha256_hex(format!(
            "{flight}|off_blocks|2026-11-29T{}Z",
            match flight {
                "BA0117-20261129" => "10:05:00",
                _ => "11:00:00",
            }
        ))
    };
    let (ba, ezy) = (key("BA0117-20261129"), key("EZY8421-20261129"));
    let at = "2026-11-29T12:00:00.000Z";
    let sql = match backend {
        Backend::Sqlite { .. } => format!(
            "{schema}
             PRAGMA user_version = 5;
             INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at,
                 events_total, inserted, updated, unchanged, stale, conflicts, invalid,
                 batch_ref, rows_last_written)
             VALUES ('{digest}', NULL, 'day.json', '{at}', 2, 2, 0, 0, 0, 0, 0, 1, 2);
             INSERT INTO flight (ref, flight_id, off_blocks_utc) VALUES
                 (1, 'BA0117-20261129', '2026-11-29T10:05:00Z'),
                 (2, 'EZY8421-20261129', '2026-11-29T11:00:00Z');
             INSERT INTO duty_event_data VALUES
                 (x'{ba}', 1, 'off_blocks', '2026-11-29T10:05:00Z', 1, '{{}}', 0, 1, '{at}', '{at}', 1),
                 (x'{ezy}', 2, 'off_blocks', '2026-11-29T11:00:00Z', 1, '{{}}', 0, 1, '{at}', '{at}', 2);",
            schema = migrations_sql("schema", 5),
        ),
        Backend::Postgres(_) => format!(
            "{schema}
             INSERT INTO spoolite_schema (version) VALUES (1);
             INSERT INTO ingest_inbox VALUES
                 ('{digest}', NULL, 'day.json', '{at}', 2, 2, 0, 0, 0, 0, 0);
             INSERT INTO duty_event_data VALUES
                 ('{ba}', 'BA0117-20261129', 'off_blocks', '2026-11-29T10:05:00Z', 1, '{{}}',
                  false, '{digest}', '{at}', '{at}', 1),
                 ('{ezy}', 'EZY8421-20261129', 'off_blocks', '2026-11-29T11:00:00Z', 1, '{{}}',
                  false, '{digest}', '{at}', '{at}', 2);
             UPDATE change_seq_counter SET next_seq = 3;",
            schema = migrations_sql("schema/postgres", 1),
        ),
    };
    execute(backend, &sql);
}

/// A database as an older schema left it, holding `day.json`, takes the current
/// schema on open and tells the second spelling of a flight stored before it.
fn check_upgrade(backend: &Backend, after: &str, expected: &[String]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = backend.db();
    day_in_an_older_schema(backend);
    let day = write(dir.path(), "day.json", day());
    assert_eq!(
        ingest_command(&db)
            .arg(&day)
            .output()
            .expect("run")
            .status
            .code(),
        Some(0)
    );
    let late = write(dir.path(), "late.json", late());
    assert_eq!(
        ingest(&db, &late),
        [warning("late.json", "ba0117-20261129", "BA0117-20261129")]
    );
    assert_eq!(backend.lines(after), expected);
}

#[test]
fn a_schema_5_sqlite_database_gains_the_index_of_lowered_flight_ids() {
    check_upgrade(
        &Backend::sqlite(),
        "SELECT name FROM sqlite_schema WHERE tbl_name = 'spoolite_flight' AND type = 'index'
         UNION ALL SELECT 'version ' || user_version FROM pragma_user_version",
        &[
            "spoolite_flight_block".to_owned(),
            "spoolite_flight_id_lower".to_owned(),
            "spoolite_flight_off_blocks".to_owned(),
            "sqlite_autoindex_spoolite_flight_1".to_owned(),
            format!("version {}", sqlite_schema_version()),
        ],
    );
}

#[test]
fn a_schema_1_postgres_database_gains_its_list_of_flight_ids() {
    let mut expected: Vec<String> = [
        "BA0117-20261129",
        "BA0117-20261130",
        "EZY8421-20261129",
        "ba0117-20261129",
    ]
    .map(str::to_owned)
    .to_vec();
    expected.extend((1..=pg_schema_version()).map(|v| format!("version {v}")));
    expected.sort();
    check_upgrade(
        &Backend::postgres(),
        "SELECT flight_id FROM spoolite_flight_id
         UNION ALL SELECT 'version ' || version FROM spoolite_schema",
        &expected,
    );
}

#[test]
fn a_postgres_database_filled_by_copy_db_tells_a_second_spelling_of_a_copied_flight() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("station.db");
    let day = write(dir.path(), "day.json", day());
    assert_eq!(ingest(&source, &day), Vec::<String>::new());
    let target = PgDb::new();
    let output = spoolite()
        .arg("copy-db")
        .arg("--from")
        .arg(&source)
        .args(["--to", &target.uri()])
        .output()
        .expect("run copy-db");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let late = write(dir.path(), "late.json", late());
    assert_eq!(
        ingest(Path::new(&target.uri()), &late),
        [warning("late.json", "ba0117-20261129", "BA0117-20261129")]
    );
}
