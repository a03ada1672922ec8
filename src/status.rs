//! `spoolite status`: what an operator asks first, read from the database, the spool
//! folders, the spool's lock and the daemon's state file without changing any of
//! them, and without creating anything.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::spool::{LOCK_FILE, REASON_SUFFIX, Spool};
use crate::state::{self, DatabaseFault};
use crate::store::{Db, Store, Totals};

/// Above this size the WAL is reported as a problem: checkpoints are being held
/// back, most likely by a long-running analyst read.
pub(crate) const WAL_WARN_BYTES: u64 = 256 * 1024 * 1024;

/// Exit code: a daemon serves the spool.
pub(crate) const EXIT_SERVED: u8 = 0;
/// Exit code: a daemon serves the spool but reports a database fault (LSB "dead
/// or failing"), so that `spoolite status || alert` sees it.
pub(crate) const EXIT_FAILING: u8 = 1;
/// Exit code: the spool or the database does not exist or cannot be read.
pub(crate) const EXIT_UNREADABLE: u8 = 2;
/// Exit code: the site exists but no daemon serves it (LSB "program is not running").
pub(crate) const EXIT_NOT_SERVED: u8 = 3;

/// What status tells; a figure it could not read is `None` (null), and
/// `unreadable` says why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) spool: String,
    pub(crate) db: String,
    pub(crate) db_exists: bool,
    /// The daemon that holds the spool's lock, if one does.
    pub(crate) served_by: Option<ServedBy>,
    pub(crate) batches: Option<u64>,
    /// Live events (`duty_event`).
    pub(crate) events: Option<u64>,
    /// Retracted events, which `events` does not count.
    pub(crate) retracted_events: Option<u64>,
    pub(crate) quarantined: Option<u64>,
    pub(crate) last_ingest_at: Option<String>,
    /// Every regular file in incoming/, temp-named and unsettled ones included.
    pub(crate) incoming_waiting: Option<u64>,
    /// Seconds since the serving daemon first saw the file that has waited longest;
    /// null when nothing waits or no daemon has been watching.
    pub(crate) oldest_waiting_age_s: Option<u64>,
    /// Files in rejected/, reason files not counted.
    pub(crate) rejected_files: Option<u64>,
    /// The serving daemon's database is failing, since when and why.
    pub(crate) database_fault: Option<DatabaseFault>,
    pub(crate) wal_bytes: Option<u64>,
    pub(crate) wal_warning: bool,
    /// Where settings came from, when the site defaults file gave some.
    pub(crate) settings_from: Option<SettingsFrom>,
    /// What could not be read, each `what: why`.
    pub(crate) unreadable: Vec<String>,
    /// Whether the lock could be looked at (if not, `served_by` null means unknown).
    #[serde(skip)]
    pub(crate) lock_seen: bool,
    /// Whether the database is a file (SQLite), which exists or not and keeps a
    /// WAL beside it, rather than one on a server.
    #[serde(skip)]
    pub(crate) db_is_file: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ServedBy {
    /// The pid written in the lock file (null if it holds none).
    pub(crate) pid: Option<u32>,
    /// When the daemon took the lock: the lock file's modification time.
    pub(crate) since: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct SettingsFrom {
    pub(crate) file: String,
    pub(crate) variables: Vec<String>,
}

/// Whether a daemon holds the spool's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Served {
    By(ServedBy),
    Not,
    Unknown,
}

impl Status {
    /// The exit code the contract gives this status.
    pub(crate) fn exit_code(&self) -> u8 {
        if !self.unreadable.is_empty() {
            EXIT_UNREADABLE
        } else if self.served_by.is_some() && self.database_fault.is_some() {
            EXIT_FAILING
        } else if self.served_by.is_some() {
            EXIT_SERVED
        } else {
            EXIT_NOT_SERVED
        }
    }
}

/// Reads everything status tells. Never fails: what cannot be read is listed in
/// `unreadable` and its figures are null.
pub(crate) fn gather(spool_dir: &Path, db: &Db, now: SystemTime) -> Status {
    let mut unreadable = Vec::new();
    let totals = read_totals(db, &mut unreadable);
    // A PostgreSQL database is no file: it exists when it could be read.
    let db_exists = match db.file() {
        Some(path) => path.exists(),
        None => totals.is_some(),
    };
    let spool_exists = spool_is_folder(spool_dir, &mut unreadable);
    let mut status = Status {
        spool: spool_dir.display().to_string(),
        db: db.name(),
        db_exists,
        served_by: None,
        batches: totals.as_ref().map(|t| t.batches),
        events: totals.as_ref().map(|t| t.events),
        retracted_events: totals.as_ref().map(|t| t.retracted_events),
        quarantined: totals.as_ref().map(|t| t.quarantined),
        last_ingest_at: totals.and_then(|t| t.last_ingest_at),
        incoming_waiting: None,
        oldest_waiting_age_s: None,
        rejected_files: None,
        database_fault: None,
        wal_bytes: None,
        wal_warning: false,
        settings_from: None,
        unreadable,
        lock_seen: !spool_exists,
        db_is_file: db.is_file(),
    };
    if let Some(path) = db.file().filter(|_| db_exists) {
        read_wal_size(path, &mut status);
    }
    if spool_exists {
        read_spool(spool_dir, now, &mut status);
    }
    status
}

/// Whether `spool_dir` is a folder, with the reason in `unreadable` when not.
fn spool_is_folder(spool_dir: &Path, unreadable: &mut Vec<String>) -> bool {
    match fs::metadata(spool_dir) {
        Ok(meta) if meta.is_dir() => true,
        Ok(_) => {
            unreadable.push(format!("spool {}: not a folder", spool_dir.display()));
            false
        }
        Err(e) => {
            unreadable.push(format!("spool {}: {}", spool_dir.display(), cause(&e)));
            false
        }
    }
}

/// The size of the SQLite file `db`'s WAL, and whether it is too large.
fn read_wal_size(db: &Path, status: &mut Status) {
    let wal_bytes = match wal_path(db).metadata() {
        Ok(meta) => Some(meta.len()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(0),
        Err(_) => None,
    };
    status.wal_bytes = wal_bytes;
    status.wal_warning = wal_bytes.is_some_and(|b| b > WAL_WARN_BYTES);
}

/// What the spool's folders, its lock and the serving daemon's state file tell.
fn read_spool(spool_dir: &Path, now: SystemTime, status: &mut Status) {
    let spool = Spool::at(spool_dir);
    status.incoming_waiting = count_in(&spool.incoming, "incoming/", status, |_| true);
    status.rejected_files = count_in(&spool.rejected, "rejected/", status, |name| {
        // Reason files are not rejected files, and neither is a hidden temporary
        // file a crash may leave while a reason file is being written.
        !name.ends_with(REASON_SUFFIX) && !name.starts_with('.')
    });
    match served(spool_dir) {
        Ok(Served::By(by)) => {
            read_daemon_state(spool_dir, &by, now, status);
            status.served_by = Some(by);
            status.lock_seen = true;
        }
        Ok(Served::Not) => status.lock_seen = true,
        Ok(Served::Unknown) => {}
        Err(e) => status
            .unreadable
            .push(format!("{LOCK_FILE}: {}", cause(&e))),
    }
}

/// The database's figures, or `None` with the reason in `unreadable`.
fn read_totals(db: &Db, unreadable: &mut Vec<String>) -> Option<Totals> {
    // A PostgreSQL database is not a file: the connection says whether it exists.
    if let Some(Err(e)) = db.file().map(fs::metadata) {
        unreadable.push(format!("database {db}: {}", cause(&e)));
        return None;
    }
    match Store::open_read_only(db).and_then(|mut store| store.totals()) {
        Ok(totals) => Some(totals),
        Err(e) => {
            unreadable.push(format!("database {db}: {e}"));
            None
        }
    }
}

/// The number of regular files in `dir` whose names `counts`, or `None` with the
/// reason in `status.unreadable`.
fn count_in(
    dir: &Path,
    label: &str,
    status: &mut Status,
    counts: impl Fn(&str) -> bool,
) -> Option<u64> {
    match regular_files(dir) {
        Ok(names) => Some(names.iter().filter(|name| counts(name)).count() as u64),
        Err(e) => {
            status.unreadable.push(format!("{label}: {}", cause(&e)));
            None
        }
    }
}

/// Who holds the spool's lock. The lock file is opened read-only and never
/// created; a shared lock that cannot be had means a daemon holds the exclusive
/// one. A lock file that does not exist means no daemon has ever served the spool.
fn served(spool_dir: &Path) -> io::Result<Served> {
    let path = spool_dir.join(LOCK_FILE);
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Served::Not),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Served::Not),
        Err(fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            // A lock that cannot be read for its pid still proves a daemon holds it.
            let _ = file.read_to_string(&mut text);
            let since = file
                .metadata()
                .and_then(|m| m.modified())
                .map(crate::clock::format_millis);
            match since {
                Ok(since) => Ok(Served::By(ServedBy {
                    pid: text.trim().parse().ok(),
                    since,
                })),
                Err(_) => Ok(Served::Unknown),
            }
        }
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Takes from the daemon's state file what only the daemon knows: when it first
/// saw the file waiting longest, and a database fault. Only a state file written
/// by the daemon that serves the spool now counts; anything older is history.
fn read_daemon_state(spool_dir: &Path, by: &ServedBy, now: SystemTime, status: &mut Status) {
    let daemon_state = match state::read(spool_dir) {
        Ok(Some(daemon_state)) => daemon_state,
        Ok(None) => return,
        Err(e) => {
            status.unreadable.push(format!(
                "{}: {}",
                state::path(spool_dir).display(),
                cause(&e)
            ));
            return;
        }
    };
    if by.pid != Some(daemon_state.pid) {
        return;
    }
    status.oldest_waiting_age_s = daemon_state
        .oldest_waiting_seen_at
        .as_deref()
        .and_then(|seen| seen.parse::<jiff::Timestamp>().ok())
        .map(|seen| {
            let now = jiff::Timestamp::try_from(now).unwrap_or(seen);
            u64::try_from(now.as_second() - seen.as_second()).unwrap_or(0)
        });
    status.database_fault = daemon_state.database_fault;
}

/// An I/O error as a person reads it: "permission denied", "not found".
fn cause(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

/// The WAL file beside a database.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// Names of the regular files directly inside `dir`.
fn regular_files(dir: &Path) -> io::Result<Vec<String>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_file() {
            files.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    Ok(files)
}

/// What to do about what could not be read, for the message on stderr.
pub(crate) fn advice(status: &Status) -> &'static str {
    if status.db_exists && Path::new(&status.spool).is_dir() {
        "run status as a user who may read the spool and the database (e.g. \
         `sudo -u spoolite spoolite status`)"
    } else {
        "start `spoolite run` once, or point --spool/--db at the site"
    }
}

/// Width of the label column of the text form.
const LABEL_WIDTH: usize = 18;
/// On a terminal, the text form fits this many columns (a long path excepted).
pub(crate) const COLUMNS: usize = 80;

/// The human form: within `columns` when given (a terminal), else each value on
/// one line, so that grep and scripts see it whole.
pub(crate) fn render(status: &Status, columns: Option<usize>) -> String {
    let mut out = String::new();
    for (label, value) in lines(status) {
        let values = match columns {
            Some(columns) => wrap(&value, columns.saturating_sub(LABEL_WIDTH)),
            None => vec![value],
        };
        for (i, text) in values.iter().enumerate() {
            let label = if i == 0 { label } else { "" };
            out.push_str(&format!("{label:<LABEL_WIDTH$}{text}\n"));
        }
    }
    out
}

/// The text form's lines, each a label and its value, in order.
fn lines(status: &Status) -> Vec<(&'static str, String)> {
    let figure = |value: Option<u64>| value.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    let mut lines = vec![
        ("database", database_text(status)),
        ("spool", status.spool.clone()),
        ("daemon", daemon_text(status)),
    ];
    if let Some(fault) = &status.database_fault {
        let state = if fault.unreachable {
            "unreachable"
        } else {
            "failing"
        };
        let text = format!("{state} since {}: {}", fault.since, fault.error);
        lines.push(("database fault", text));
    }
    lines.push(("batches", figure(status.batches)));
    lines.push(("events", figure(status.events)));
    lines.push(("quarantined", figure(status.quarantined)));
    let last = match (&status.last_ingest_at, status.batches) {
        (Some(at), _) => at.clone(),
        (None, Some(_)) => "never".to_owned(),
        (None, None) => "unknown".to_owned(),
    };
    lines.push(("last ingest", last));
    let oldest = status
        .oldest_waiting_age_s
        .map(|s| format!(" (oldest seen {s} s ago)"))
        .unwrap_or_default();
    let in_folder = |count: Option<u64>, folder: &str, more: &str| {
        count.map_or_else(
            || "unknown".to_owned(),
            |n| format!("{n} in {folder}{more}"),
        )
    };
    lines.push((
        "waiting",
        in_folder(status.incoming_waiting, "incoming/", &oldest),
    ));
    lines.push((
        "rejected",
        in_folder(status.rejected_files, "rejected/", ""),
    ));
    // PostgreSQL keeps its own WAL: no line for it.
    if status.db_is_file {
        lines.push(("wal", wal_text(status)));
    }
    if let Some(settings) = &status.settings_from {
        let text = format!("{} from {}", settings.variables.join(", "), settings.file);
        lines.push(("settings", text));
    }
    for problem in &status.unreadable {
        lines.push(("cannot read", problem.clone()));
    }
    lines
}

fn database_text(status: &Status) -> String {
    if status.db_exists {
        status.db.clone()
    } else if !status.db_is_file {
        // The server may be down as well as the database missing: stderr says.
        format!("{} (cannot be read)", status.db)
    } else {
        format!("{} (does not exist)", status.db)
    }
}

fn wal_text(status: &Status) -> String {
    let warning = if status.wal_warning {
        "  WARNING: checkpoints held back by a long read?"
    } else {
        ""
    };
    status.wal_bytes.map_or_else(
        || "unknown".to_owned(),
        |bytes| format!("{bytes} bytes{warning}"),
    )
}

fn daemon_text(status: &Status) -> String {
    match &status.served_by {
        Some(ServedBy {
            pid: Some(pid),
            since,
        }) => format!("serving, pid {pid}, since {since}"),
        Some(ServedBy { pid: None, since }) => format!("serving since {since}"),
        None if status.lock_seen => "not running".to_owned(),
        None => format!("unknown: cannot read {LOCK_FILE}"),
    }
}

/// `text` cut at spaces into lines of at most `width` characters (a word longer
/// than that stands alone on its line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let needed =
            current.chars().count() + usize::from(!current.is_empty()) + word.chars().count();
        if !current.is_empty() && needed > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(current);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_wrap_within_80_columns() {
        assert_eq!(wrap("a b c", 3), ["a b", "c"]);
        assert_eq!(wrap("abcdef g", 3), ["abcdef", "g"]);
        assert_eq!(wrap("", 3), [""]);
    }

    #[test]
    fn long_values_wrap_on_a_terminal_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::Sqlite(dir.path().join("s.db"));
        let mut status = gather(&dir.path().join("spool"), &db, SystemTime::now());
        let error = "database is locked, and has been for long enough that this line is long";
        status.database_fault = Some(DatabaseFault {
            since: "2026-12-01T09:00:00.000Z".to_owned(),
            error: error.to_owned(),
            unreachable: false,
        });
        let fault_line = |text: &str| -> Vec<String> {
            let start = text.find("database fault").expect("a fault line");
            let lines: Vec<&str> = text[start..].lines().collect();
            let end = lines[1..]
                .iter()
                .position(|line| !line.starts_with(' '))
                .map_or(lines.len(), |n| n + 1);
            lines[..end].iter().map(|line| line.to_string()).collect()
        };
        let whole = format!("database fault    failing since 2026-12-01T09:00:00.000Z: {error}");
        assert_eq!(fault_line(&render(&status, None)), [whole]);
        let wrapped = fault_line(&render(&status, Some(COLUMNS)));
        assert_eq!(
            wrapped,
            [
                "database fault    failing since 2026-12-01T09:00:00.000Z: database is locked,",
                "                  and has been for long enough that this line is long",
            ]
        );
    }
}
