//! Shared helpers: the binary, temp folders, whole-table dumps, bounded waits, and a
//! site served by `spoolite run`.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::time::Duration;

use spoolite_testkit::process::{self, LogMode, Process};
use tempfile::TempDir;

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
    let output = ingest_command(db)
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

/// The counts of a processed file, in the order of its `--json` line and of the
/// inbox's columns.
pub const COUNT_FIELDS: [&str; 7] = [
    "events_total",
    "inserted",
    "updated",
    "unchanged",
    "stale",
    "conflicts",
    "invalid",
];

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

/// The three tables analysts read and the flight numbers behind `duty_event`, every
/// column, each sorted: what a later state of the database must equal when nothing
/// may have changed.
pub fn snapshot(db: &Path) -> Vec<Vec<String>> {
    ["duty_event", "ingest_inbox", "quarantine", "flight"]
        .iter()
        .map(|table| dump(db, table, &[]))
        .collect()
}

/// Lowercase hex SHA-256 of `bytes`: a batch digest or an idempotency key.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes.as_ref()))
}

/// `spoolite ingest --db DB`, for a test to add its options and files to.
pub fn ingest_command(db: &Path) -> Command {
    let mut command = spoolite();
    command.arg("ingest").arg("--db").arg(db);
    command
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

    /// `spoolite SUBCOMMAND --spool SPOOL --db DB`.
    fn command(&self, subcommand: &str) -> Command {
        let mut command = spoolite();
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
