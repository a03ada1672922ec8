//! Shared helpers: the binary, temp folders, whole-table dumps, bounded waits.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The spoolite binary under test.
pub fn spoolite() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spoolite"));
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
/// parsed JSON lines.
pub fn ingest_json(db: &Path, files: &[&Path]) -> (i32, Vec<serde_json::Value>) {
    let output = spoolite()
        .arg("ingest")
        .arg("--db")
        .arg(db)
        .arg("--json")
        .args(files)
        .output()
        .expect("run spoolite");
    let lines = parse_lines(&output);
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
pub const EVENT_COLUMNS: &[&str] = &[
    "idempotency_key",
    "flight_id",
    "event_kind",
    "instant_utc",
    "source_revision",
    "payload",
];

/// Polls `condition` every 20 ms until it holds or `limit` passes; panics with
/// `what` on time-out.
pub fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// A `.json` batch holding `events`.
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

/// The three tables analysts read, every column, each sorted: what a later state of
/// the database must equal when nothing may have changed.
pub fn snapshot(db: &Path) -> Vec<Vec<String>> {
    ["duty_event", "ingest_inbox", "quarantine"]
        .iter()
        .map(|table| dump(db, table, &[]))
        .collect()
}

/// Lowercase hex SHA-256 of `bytes`: a batch digest or an idempotency key.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes.as_ref()))
}
