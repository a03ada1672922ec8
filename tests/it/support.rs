//! Shared helpers: the binary (and a copy other users can run), temp folders,
//! whole-table dumps, bounded waits, and a site served by `spoolite run`.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::sync::OnceLock;
use std::time::Duration;

use spoolite_testkit::process::{self, LogMode, Process};
use tempfile::TempDir;

/// The spoolite binary under test.
pub fn spoolite() -> Command {
    spoolite_from(Path::new(env!("CARGO_BIN_EXE_spoolite")))
}

/// The spoolite binary under test, run as `uid` and `gid`: the copy of
/// `binary_for_other_users`, which that account can reach.
pub fn spoolite_as(uid: u32, gid: u32) -> Command {
    let mut command = spoolite_from(binary_for_other_users());
    command.uid(uid).gid(gid);
    command
}

/// The folder of `binary_for_other_users`, removed when the test process exits.
static FOR_OTHER_USERS: OnceLock<PathBuf> = OnceLock::new();

/// A copy of the spoolite binary that any account can run, for the tests that run
/// it as another user (nobody, an analyst): the one in the build's `target/` lies in
/// the clone, which may sit in a folder only its owner may enter (a home folder, a
/// `mktemp -d`), and the clone and its parents are not the tests' to open up. One
/// copy per test process, file and folder mode 0755, in the temp folder; it goes
/// when the process exits.
pub fn binary_for_other_users() -> &'static Path {
    FOR_OTHER_USERS.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("spoolite-for-other-users.")
            .tempdir()
            .expect("temp dir for the binary")
            .keep();
        // SAFETY: atexit only registers a function; the one given takes no arguments
        // and reads a static set before it can run.
        let registered = unsafe { libc::atexit(remove_binary_for_other_users) };
        assert_eq!(registered, 0, "atexit");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
        let_others_traverse(&dir);
        let binary = dir.join("spoolite");
        // Copied by another process: were the copy written here, a child that another
        // test forks meanwhile could inherit the file open for writing, and running
        // the copy would fail with "text file busy" until that child execs.
        let status = Command::new("cp")
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_spoolite"))
            .arg(&binary)
            .status()
            .expect("run cp");
        assert!(status.success(), "cp the binary to {}", binary.display());
        fs::set_permissions(&binary, fs::Permissions::from_mode(0o755)).expect("chmod binary");
        binary
    })
}

extern "C" fn remove_binary_for_other_users() {
    if let Some(dir) = FOR_OTHER_USERS.get().and_then(|binary| binary.parent()) {
        let _ = fs::remove_dir_all(dir);
    }
}

/// Makes every folder from `/` down to `dir` traversable (and listable) by other
/// users. Only folders in the temp folder are opened up: any other folder that is
/// closed to others (a private clone, a home folder) fails the test instead.
pub fn let_others_traverse(dir: &Path) {
    for ancestor in dir.ancestors() {
        let mode = fs::metadata(ancestor)
            .expect("stat ancestor")
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            assert!(
                ancestor.starts_with(std::env::temp_dir()),
                "{} is not traversable by others; run the tests with TMPDIR elsewhere",
                ancestor.display()
            );
            fs::set_permissions(ancestor, fs::Permissions::from_mode(mode | 0o005))
                .expect("chmod temp folder");
        }
    }
}

/// `program` (the binary under test or a copy of it) with no `RUST_LOG` or
/// `SPOOLITE_*` variable of the test runner's.
fn spoolite_from(program: &Path) -> Command {
    let mut command = Command::new(program);
    command.env_remove("RUST_LOG");
    // No SPOOLITE_* variable of the test runner's environment leaks in.
    for (key, _) in std::env::vars() {
        if key.starts_with("SPOOLITE_") {
            command.env_remove(key);
        }
    }
    command
}

/// Runs `spoolite ingest --db DB --json FILES...`; returns the exit code and the
/// parsed JSON lines, each without its `duration_ms` (checked to be a whole
/// number), which differs from run to run: the lines compare as outcomes.
pub fn ingest_json(db: &Path, files: &[&Path]) -> (i32, Vec<serde_json::Value>) {
    let output = ingest_command(db)
        .arg("--json")
        .args(files)
        .output()
        .expect("run spoolite");
    let mut lines = parse_lines(&output);
    for line in &mut lines {
        let duration = line.as_object_mut().and_then(|l| l.remove("duration_ms"));
        assert!(
            duration.as_ref().is_some_and(|d| d.is_u64()),
            "a whole number of milliseconds: {line}"
        );
    }
    (output.status.code().expect("exit code"), lines)
}

pub fn parse_lines(output: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
        })
        .collect()
}

/// Every row of `table` as text, ordered, so two databases compare as wholes.
/// `columns` picks the columns (all when empty).
pub fn dump(db: &Path, table: &str, columns: &[&str]) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open db");
    let columns = if columns.is_empty() {
        "*".to_owned()
    } else {
        columns.join(", ")
    };
    let sql = format!("SELECT {columns} FROM {table}");
    let mut statement = conn.prepare(&sql).expect("prepare dump");
    let width = statement.column_count();
    let mut rows: Vec<String> = statement
        .query_map([], |row| {
            let mut fields = Vec::with_capacity(width);
            for i in 0..width {
                let value: rusqlite::types::Value = row.get(i)?;
                fields.push(match value {
                    rusqlite::types::Value::Null => "NULL".to_owned(),
                    rusqlite::types::Value::Integer(n) => n.to_string(),
                    rusqlite::types::Value::Real(f) => f.to_string(),
                    rusqlite::types::Value::Text(t) => t,
                    rusqlite::types::Value::Blob(b) => format!("x'{}'", hex::encode(b)),
                });
            }
            Ok(fields.join("|"))
        })
        .expect("query dump")
        .collect::<Result<_, _>>()
        .expect("read dump");
    rows.sort();
    rows
}

/// The event columns of duty_event, which depend only on the set of files delivered.
pub const EVENT_COLUMNS: &[&str] = CONTENT_COLUMNS.split_at(6).0;

/// `EVENT_COLUMNS` and `retracted`: what a batch in any format must leave as the
/// same events sent as JSON do.
pub const CONTENT_COLUMNS: &[&str] = &[
    "idempotency_key",
    "flight_id",
    "event_kind",
    "instant_utc",
    "source_revision",
    "payload",
    "retracted",
];

/// `content` compressed as one gzip member.
pub fn gzip(content: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(content).expect("compress");
    encoder.finish().expect("compress")
}

/// The tables and views of the contract, which analysts read.
pub const CONTRACT_RELATIONS: [&str; 6] = [
    "duty_event_all",
    "duty_event",
    "flight_times",
    "batch_summary",
    "ingest_inbox",
    "quarantine",
];

pub use spoolite_testkit::COUNT_FIELDS;

/// Polls `condition` every 20 ms until it holds or `limit` passes; panics with
/// `what` on time-out.
pub fn wait_until(limit: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(
        process::wait_until(limit, POLL, condition),
        "timed out after {limit:?} waiting for {what}"
    );
}

/// Whether process `pid` has `path` open (by /proc/PID/fd).
pub fn has_open(pid: i32, path: &Path) -> bool {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries
        .filter_map(|e| e.ok())
        .any(|e| fs::read_link(e.path()).is_ok_and(|target| target == path))
}

/// Names of the regular files in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// One event as a JSON object text.
pub fn event(
    flight_id: &str,
    kind: &str,
    instant: &str,
    revision: Option<i64>,
    payload: &str,
) -> String {
    let revision = revision
        .map(|r| format!(",\"source_revision\":{r}"))
        .unwrap_or_default();
    format!(
        "{{\"flight_id\":\"{flight_id}\",\"event_kind\":\"{kind}\",\"instant_utc\":\"{instant}\"{revision},\"payload\":{payload}}}"
    )
}

/// The tests' most common event: BA0117-20261129 off blocks at 10:05 UTC.
pub fn off_blocks(revision: i64, payload: &str) -> String {
    event(
        "BA0117-20261129",
        "off_blocks",
        "2026-11-29T10:05:00Z",
        Some(revision),
        payload,
    )
}

/// A `.json` batch holding `events`.
/// A `.json` batch of one event: `flight` off blocks at 10:05 UTC.
pub fn one_event_batch(flight: &str) -> String {
    json_batch(&[event(
        flight,
        "off_blocks",
        "2026-12-01T10:05:00Z",
        None,
        "{}",
    )])
}

pub fn json_batch(events: &[String]) -> String {
    format!("{{\"events\":[{}]}}", events.join(",\n"))
}

pub fn write(dir: &Path, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write file");
    path
}

/// Every row `sql` returns, each as its values in text (NULL as `NULL`), in the
/// order the query gives.
pub fn query(db: &Path, sql: &str) -> Vec<Vec<String>> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open db");
    let mut statement = conn
        .prepare(sql)
        .unwrap_or_else(|e| panic!("prepare {sql:?}: {e}"));
    let width = statement.column_count();
    statement
        .query_map([], |row| {
            (0..width)
                .map(|i| row.get::<_, rusqlite::types::Value>(i).map(value_text))
                .collect()
        })
        .expect("run query")
        .collect::<Result<_, _>>()
        .expect("read rows")
}

fn value_text(value: rusqlite::types::Value) -> String {
    match value {
        rusqlite::types::Value::Null => "NULL".to_owned(),
        rusqlite::types::Value::Integer(n) => n.to_string(),
        rusqlite::types::Value::Real(f) => f.to_string(),
        rusqlite::types::Value::Text(t) => t,
        rusqlite::types::Value::Blob(b) => format!("x'{}'", hex::encode(b)),
    }
}

/// Ingests the file at `path` (holding `content`, with `options`) into `db` and
/// expects it rejected for `reason`: exit code 1, one line naming it with a detail
/// and its digest and no counts, and every table exactly as before. Returns the
/// line, for a caller to look at its detail.
pub fn rejected_whole(
    db: &Path,
    path: &Path,
    content: &[u8],
    options: &[&str],
    reason: &str,
) -> serde_json::Value {
    let name = path.file_name().expect("a file").to_string_lossy();
    let before = snapshot(db);
    let output = ingest_command(db)
        .arg("--json")
        .args(options)
        .arg(path)
        .output()
        .expect("run");
    let lines = parse_lines(&output);
    assert_eq!(output.status.code(), Some(1), "{name}: {lines:?}");
    assert_eq!(lines.len(), 1, "{name}: {lines:?}");
    let line = &lines[0];
    assert_eq!(line["file"], *name, "{line}");
    assert_eq!(line["outcome"], "rejected", "{name}: {line}");
    assert_eq!(line["reason"], reason, "{name}: {line}");
    assert!(
        line["detail"]
            .as_str()
            .is_some_and(|detail| !detail.trim().is_empty()),
        "{name}: {line}"
    );
    assert_eq!(line["sha256"], sha256_hex(content), "{name}");
    for field in COUNT_FIELDS {
        assert!(
            line.get(field).is_none(),
            "{name}: a rejected file has no counts: {line}"
        );
    }
    assert_eq!(snapshot(db), before, "{name} left a trace");
    line.clone()
}

/// The three tables analysts read and the flight numbers behind `duty_event`, every
/// column, each sorted: what a later state of the database must equal when nothing
/// may have changed.
pub fn snapshot(db: &Path) -> Vec<Vec<String>> {
    [
        "duty_event",
        "ingest_inbox",
        "quarantine",
        "spoolite_flight",
    ]
    .iter()
    .map(|table| dump(db, table, &[]))
    .collect()
}

/// The schema version this spoolite writes to a SQLite file: one per migration in
/// `schema/`.
pub fn sqlite_schema_version() -> i64 {
    migrations_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("schema"))
}

/// The schema version this spoolite writes to PostgreSQL: one per migration in
/// `schema/postgres/`.
pub fn pg_schema_version() -> i64 {
    migrations_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/postgres"))
}

fn migrations_in(dir: &Path) -> i64 {
    let sql = fs::read_dir(dir)
        .expect("list the migrations")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sql"))
        })
        .count();
    sql as i64
}

/// uid and gid of the analyst the tests play: nobody and nogroup.
pub const ANALYST: u32 = 65534;

/// Fails unless the tests run as root: a test that plays the analyst, or runs the
/// daemon as another account, runs spoolite under another uid.
pub fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs spoolite as another uid, so it runs as root"
    );
}

/// As on a packaged host: the folder `state` and the files in it are root's, and
/// the analysts' group (`ANALYST`) may read them and list the folder, and write
/// neither.
pub fn share_read_only_with_analyst(state: &Path) {
    for path in fs::read_dir(state)
        .expect("list")
        .map(|e| e.expect("entry").path())
    {
        std::os::unix::fs::chown(&path, Some(0), Some(ANALYST)).expect("chown file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod file");
    }
    std::os::unix::fs::chown(state, Some(0), Some(ANALYST)).expect("chown folder");
    fs::set_permissions(state, fs::Permissions::from_mode(0o750)).expect("chmod folder");
}

/// The first `count` migrations of `dir` (`schema/` or `schema/postgres/`), in
/// order: the schema a spoolite of that version made.
pub fn migrations_sql(dir: &str, count: usize) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .expect("list the migrations")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files[..count]
        .iter()
        .map(|f| fs::read_to_string(f).expect("read a migration"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Turns the SQLite database `db`, of the current schema, into the database
/// schema 6 made of the same batches: that schema built from its own migration
/// files, and the inbox, quarantine, flights and events copied into its layout
/// (the flight by its number, as schema 6 kept it).
pub fn downgrade_to_schema_6(db: &Path) {
    let old = db.with_extension("schema6");
    let conn = rusqlite::Connection::open(&old).expect("open");
    conn.execute_batch(&migrations_sql("schema", 6))
        .expect("schema 6");
    conn.execute("ATTACH ?1 AS c", [db.to_str().expect("a UTF-8 path")])
        .expect("attach");
    conn.execute_batch(
        "BEGIN;
         INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at,
             events_total, inserted, updated, unchanged, stale, conflicts, invalid,
             batch_ref, rows_last_written)
         SELECT batch_digest, batch_id, file_name, ingested_at, events_total, inserted,
             updated, unchanged, stale, conflicts, invalid, batch_ref, rows_last_written
         FROM c.ingest_inbox;
         INSERT INTO quarantine SELECT * FROM c.quarantine;
         INSERT INTO flight (ref, flight_id, off_blocks_utc, takeoff_utc, landing_utc,
             on_blocks_utc)
         SELECT ref, flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc
         FROM c.spoolite_flight;
         INSERT INTO duty_event_data (key, flight_ref, event_kind, instant_utc,
             source_revision, payload, retracted, batch_ref, first_seen_at, updated_at,
             change_seq)
         SELECT e.key, f.ref, e.event_kind, e.instant_utc, e.source_revision, e.payload,
             e.retracted, e.batch_ref, e.first_seen_at, e.updated_at, e.change_seq
         FROM c.spoolite_event AS e JOIN c.spoolite_flight AS f ON f.flight_id = e.flight_id
         ORDER BY e.rowid;
         PRAGMA user_version = 6;
         COMMIT;
         DETACH c;",
    )
    .expect("copy into schema 6");
    drop(conn);
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", db.display()));
    }
    fs::rename(&old, db).expect("put the schema 6 database in place");
}

/// Turns the SQLite database `db`, of the current schema, into the database
/// schema 11 made of the same batches (which hold no slot): no slot or
/// displaced column, views without `slot`.
pub fn downgrade_to_schema_11(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.execute_batch(
        "BEGIN;
         DROP INDEX spoolite_event_flight;
         CREATE INDEX spoolite_event_flight
             ON spoolite_event (flight_id, retracted, event_kind, instant_utc);
         DROP VIEW duty_event;
         DROP VIEW duty_event_all;
         ALTER TABLE spoolite_event DROP COLUMN slot;
         ALTER TABLE spoolite_event DROP COLUMN displaced;
         CREATE VIEW duty_event_all AS
         SELECT lower(hex(e.key)) AS idempotency_key, e.flight_id, e.event_kind,
                e.instant_utc, e.source_revision, e.payload, e.retracted,
                (SELECT i.batch_digest FROM ingest_inbox AS i WHERE i.batch_ref = e.batch_ref)
                    AS batch_digest,
                e.first_seen_at, e.updated_at, e.change_seq
         FROM spoolite_event AS e;
         CREATE VIEW duty_event AS
         SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload,
                batch_digest, first_seen_at, updated_at, change_seq
         FROM duty_event_all
         WHERE retracted = 0;
         PRAGMA user_version = 11;
         COMMIT;",
    )
    .expect("back to schema 11");
}

/// Turns the SQLite database `db`, of the current schema, into the database
/// schema 10 made of the same batches: crew rows of flights with block time only,
/// without function or duty type, no flight duty periods, negative minutes in
/// flight_times.
pub fn downgrade_to_schema_10(db: &Path) {
    downgrade_to_schema_11(db);
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.execute_batch(
        "BEGIN;
         DROP VIEW crew_flight;
         DROP VIEW crew_duty;
         DROP VIEW crew_fdp;
         DROP TABLE spoolite_crew_fdp;
         DROP VIEW flight_times;
         CREATE VIEW flight_times AS
         SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                block_minutes, airborne_minutes
         FROM spoolite_flight
         WHERE coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NOT NULL;
         CREATE TABLE crew_flight_10 (
             flight_ref INTEGER NOT NULL, crew_id TEXT NOT NULL,
             role TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
             flight_id TEXT NOT NULL, off_blocks_utc TEXT NOT NULL,
             on_blocks_utc TEXT NOT NULL, block_minutes REAL NOT NULL,
             PRIMARY KEY (flight_ref, crew_id)) WITHOUT ROWID;
         INSERT INTO crew_flight_10
         SELECT flight_ref, crew_id, role, flight_id, off_blocks_utc, on_blocks_utc,
                block_minutes
         FROM spoolite_crew_flight WHERE block_minutes IS NOT NULL;
         DROP TABLE spoolite_crew_flight;
         ALTER TABLE crew_flight_10 RENAME TO spoolite_crew_flight;
         CREATE INDEX spoolite_crew_flight_crew ON spoolite_crew_flight (crew_id, off_blocks_utc);
         CREATE INDEX spoolite_crew_flight_time ON spoolite_crew_flight (off_blocks_utc);
         CREATE TABLE crew_duty_10 (
             duty_ref INTEGER NOT NULL, crew_id TEXT NOT NULL,
             role TEXT NOT NULL CHECK (role IN ('operating', 'positioning')),
             duty_id TEXT NOT NULL, duty_start_utc TEXT NOT NULL, duty_end_utc TEXT,
             duty_minutes REAL, PRIMARY KEY (duty_ref, crew_id)) WITHOUT ROWID;
         INSERT INTO crew_duty_10
         SELECT duty_ref, crew_id, role, duty_id, duty_start_utc, duty_end_utc, duty_minutes
         FROM spoolite_crew_duty;
         DROP TABLE spoolite_crew_duty;
         ALTER TABLE crew_duty_10 RENAME TO spoolite_crew_duty;
         CREATE INDEX spoolite_crew_duty_crew ON spoolite_crew_duty (crew_id, duty_start_utc);
         CREATE INDEX spoolite_crew_duty_time ON spoolite_crew_duty (duty_start_utc);
         CREATE VIEW crew_flight AS
         SELECT crew_id, role, flight_id, off_blocks_utc, on_blocks_utc, block_minutes
         FROM spoolite_crew_flight;
         CREATE VIEW crew_duty AS
         SELECT crew_id, role, duty_id, duty_start_utc, duty_end_utc, duty_minutes
         FROM spoolite_crew_duty;
         PRAGMA user_version = 10;
         COMMIT;",
    )
    .expect("back to schema 10");
}

/// Turns the SQLite database `db`, of the current schema, into the database
/// schema 8 made of the same batches: crew rows without their flight's id, the
/// views through the flight's number, none of schema 10's indexes.
pub fn downgrade_to_schema_8(db: &Path) {
    downgrade_to_schema_10(db);
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.execute_batch(
        "BEGIN;
         DROP INDEX spoolite_event_off_blocks;
         DROP INDEX spoolite_flight_block;
         DROP VIEW crew_flight;
         DROP VIEW crew_duty;
         ALTER TABLE spoolite_crew_flight DROP COLUMN flight_id;
         ALTER TABLE spoolite_crew_duty DROP COLUMN duty_id;
         CREATE VIEW crew_flight AS
         SELECT c.crew_id, c.role, f.flight_id, c.off_blocks_utc, c.on_blocks_utc,
                c.block_minutes
         FROM spoolite_crew_flight AS c LEFT JOIN spoolite_flight AS f ON f.ref = c.flight_ref;
         CREATE VIEW crew_duty AS
         SELECT c.crew_id, c.role, f.flight_id AS duty_id, c.duty_start_utc, c.duty_end_utc,
                c.duty_minutes
         FROM spoolite_crew_duty AS c LEFT JOIN spoolite_flight AS f ON f.ref = c.duty_ref;
         PRAGMA user_version = 8;
         COMMIT;",
    )
    .expect("back to schema 8");
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('spoolite_crew_flight')")
        .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect())
        .expect("columns");
    assert!(!columns.contains(&"flight_id".to_owned()), "{columns:?}");
}

/// Lowercase hex SHA-256 of `bytes`: a batch digest or an idempotency key.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes.as_ref()))
}

/// `spoolite ingest` of `file` with the store's debug lines on stderr.
pub fn ingest_logged(db: &Path, file: &Path) -> String {
    let output = ingest_command(db)
        .arg(file)
        .env("RUST_LOG", "spoolite=debug")
        .output()
        .expect("run spoolite ingest");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `spoolite ingest --db DB`, for a test to add its options and files to.
pub fn ingest_command(db: &Path) -> Command {
    let mut command = spoolite();
    command.arg("ingest").arg("--db").arg(db);
    command
}

/// The packaged unit copied into `dir` as `spoolite.service`: `systemd-analyze
/// verify` checks that ExecStart's binary exists, so the copy runs the binary
/// under test; everything else is verified as shipped.
pub fn unit_copy(dir: &Path) -> PathBuf {
    let unit = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/spoolite.service"),
    )
    .expect("read unit");
    let exec = "ExecStart=/usr/bin/spoolite run\n";
    assert!(unit.contains(exec), "the unit runs {exec:?}");
    let copy = dir.join("spoolite.service");
    let binary = env!("CARGO_BIN_EXE_spoolite");
    fs::write(
        &copy,
        unit.replace(exec, &format!("ExecStart={binary} run\n")),
    )
    .expect("write unit copy");
    copy
}

/// Runs `systemd-analyze verify` on `unit` (a `unit_copy`, with any drop-in
/// folder beside it), which must pass and say nothing about the unit.
pub fn assert_unit_verifies(unit: &Path) {
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(unit)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "run systemd-analyze: {error}. The unit can only be verified with systemd's \
                 tools: install them (apt-get install systemd)"
            )
        });
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Warnings about the unit (an unknown key, a bad value) do not change the exit
    // code, so any line naming it fails the test too. Lines about other units of
    // the machine it runs on are not the unit's business.
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("spoolite"))
        .collect();
    assert!(
        output.status.success() && about_unit.is_empty(),
        "systemd-analyze verify {}: {}\n{stderr}",
        unit.display(),
        output.status
    );
}

// ---------------------------------------------------------------------------------
// A site served by the daemon
//
// daemon.rs and ops.rs each add, in an `impl Site` block of their own, the way they
// start daemons (`start` with `Settings`, `start_packaged` with the packaged unit's
// umask and options).

/// A spool and a database in a temporary folder, served by `spoolite run`
/// processes whose stderr all goes to one log file.
pub struct Site {
    pub dir: TempDir,
    pub spool: PathBuf,
    pub db: PathBuf,
    pub log: PathBuf,
}

impl Site {
    pub fn new() -> Site {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = dir.path().join("spool");
        let db = dir.path().join("state").join("spoolite.db");
        let log = dir.path().join("daemon.log");
        Site {
            dir,
            spool,
            db,
            log,
        }
    }

    pub fn incoming(&self) -> PathBuf {
        self.spool.join("incoming")
    }

    pub fn archive(&self) -> PathBuf {
        self.spool.join("archive")
    }

    pub fn rejected(&self) -> PathBuf {
        self.spool.join("rejected")
    }

    /// The site's daemon log: the stderr of every daemon started with `spawn`.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `spoolite run --spool SPOOL --db DB`, for a test to add its options to.
    pub fn run_command(&self) -> Command {
        self.command("run")
    }

    /// `spoolite status --spool SPOOL --db DB`, for a test to add its options to.
    pub fn status_command(&self) -> Command {
        self.command("status")
    }

    /// `spoolite run --spool SPOOL --db DB` as `uid` and `gid` (see `spoolite_as`).
    pub fn run_command_as(&self, uid: u32, gid: u32) -> Command {
        self.command_from(spoolite_as(uid, gid), "run")
    }

    /// `spoolite status --spool SPOOL --db DB` as `uid` and `gid` (see `spoolite_as`).
    pub fn status_command_as(&self, uid: u32, gid: u32) -> Command {
        self.command_from(spoolite_as(uid, gid), "status")
    }

    /// `spoolite SUBCOMMAND --spool SPOOL --db DB`.
    fn command(&self, subcommand: &str) -> Command {
        self.command_from(spoolite(), subcommand)
    }

    /// `command` (a spoolite) with `SUBCOMMAND --spool SPOOL --db DB`.
    fn command_from(&self, mut command: Command, subcommand: &str) -> Command {
        command
            .arg(subcommand)
            .arg("--spool")
            .arg(&self.spool)
            .arg("--db")
            .arg(&self.db);
        command
    }

    /// Starts `command` (a `spoolite run`), its stderr appended to the site's log.
    pub fn spawn(&self, command: &mut Command) -> Daemon {
        Daemon::spawn(command, &self.log)
    }

    /// Drops a file the way an upload does: written under a temp name, then renamed.
    pub fn drop_file(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let temp = write(&self.incoming(), &format!(".{name}.tmp"), content);
        let path = self.incoming().join(name);
        fs::rename(&temp, &path).expect("rename into incoming/");
        path
    }

    /// Files in archive/, sorted (every entry: hidden ones too).
    pub fn archived(&self) -> Vec<String> {
        names(&self.archive())
    }

    pub fn waiting(&self) -> Vec<String> {
        names(&self.incoming())
    }

    pub fn rejected_names(&self) -> Vec<String> {
        names(&self.rejected())
    }
}

/// A running `spoolite run`: the test kit's process harness
/// (`spoolite_testkit::process::Process`, reachable through this one: its `child`,
/// `cpu_seconds`, …), whose methods here panic on failure. Dropping it kills the
/// process (SIGKILL) and reaps it, so no test leaks one; a test that fails prints
/// the tail of the log.
pub struct Daemon {
    process: Process,
}

/// How often the waits below look.
const POLL: Duration = Duration::from_millis(20);

impl Daemon {
    /// Spawns `command` (a `spoolite run`) with stdin and stdout null and stderr
    /// appended to `log`.
    pub fn spawn(command: &mut Command, log: &Path) -> Daemon {
        // systemd's variables reach the daemon only when the test sets them, never
        // from a test runner that itself runs under systemd.
        for variable in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            if !command.get_envs().any(|(key, _)| key == variable) {
                command.env_remove(variable);
            }
        }
        let process = Process::spawn(command, log, LogMode::Append)
            .unwrap_or_else(|e| panic!("start spoolite run: {e}"));
        Daemon { process }
    }

    pub fn log(&self) -> String {
        self.process.log()
    }

    pub fn pid(&self) -> i32 {
        self.process.pid()
    }

    pub fn signal(&self, signal: libc::c_int) {
        if let Err(e) = self.process.signal(signal) {
            panic!("{e}");
        }
    }

    /// Panics, naming `what` and the exit status, when the daemon is gone.
    pub fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.process.exit_status().expect("try_wait") {
            panic!("spoolite run exited ({status}) while waiting for {what}");
        }
    }

    /// Waits for `condition` for at most `limit`, failing at once if the daemon dies.
    pub fn wait(&mut self, limit: Duration, what: &str, condition: impl FnMut() -> bool) {
        if let Err(e) = self.process.wait_for(limit, POLL, what, condition) {
            panic!("{e}");
        }
    }

    /// Waits at most `limit` for the process to end; returns how it ended.
    pub fn wait_exit(&mut self, limit: Duration, what: &str) -> ExitStatus {
        self.process
            .wait_exit(limit, POLL)
            .unwrap_or_else(|e| panic!("timed out after {limit:?} waiting for {what}: {e}"))
    }

    /// Waits until the daemon holds the spool's lock (its signal handlers are in
    /// place by then: a SIGTERM before that would meet the default action).
    pub fn wait_serving(&mut self, site: &Site) {
        if let Err(e) = self
            .process
            .wait_lock(&site.spool, Duration::from_secs(20), POLL)
        {
            panic!("{e}");
        }
    }

    /// kill -9, and reap the process.
    pub fn kill_hard(&mut self) {
        if let Err(e) = self.process.kill_hard() {
            panic!("kill spoolite: {e}");
        }
    }
}

impl std::ops::Deref for Daemon {
    type Target = Process;

    fn deref(&self) -> &Process {
        &self.process
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.process.exit_status() {
            let _ = self.process.kill_hard();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- last lines of {} ---\n{}",
                self.process.log_path().display(),
                self.process.log_tail(80)
            );
        }
    }
}

/// splitmix64: a small deterministic generator, so a failing run can be repeated.
pub use spoolite_testkit::Rng;
