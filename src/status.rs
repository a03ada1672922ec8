//! `spoolite status`: what an operator asks first, read from the database, the spool
//! folders, the spool's lock and the daemon's state file without changing any of
//! them, and without creating anything.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;

use crate::names;
use crate::spool::{self, LOCK_FILE, REASON_SUFFIX, Spool};
use crate::state::{self, DatabaseFault};
use crate::store::{Db, FlightQuality, Store, Totals};

/// Above this size the WAL is reported as a problem: checkpoints are being held
/// back, most likely by a long-running analyst read.
pub(crate) const WAL_WARN_BYTES: u64 = 256 * 1024 * 1024;

/// How many of the oldest waiting files, and of the oldest rejected ones, status
/// names.
pub(crate) const FILES_NAMED_MAX: usize = 5;
/// A reason file is read up to this size (spoolite writes a few hundred bytes).
const REASON_FILE_BYTES_MAX: u64 = 64 * 1024;

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
    /// Flights with a live off-blocks and no live on-blocks for over a day.
    pub(crate) flights_open: Option<u64>,
    /// Flights whose on-blocks is before their off-blocks.
    pub(crate) flights_negative_block: Option<u64>,
    pub(crate) last_ingest_at: Option<String>,
    /// Every regular file in incoming/, temp-named and unsettled ones included.
    pub(crate) incoming_waiting: Option<u64>,
    /// The entries of incoming/ that are not regular files (folders, links,
    /// FIFOs, sockets, devices): never taken, left in place.
    pub(crate) incoming_never_taken: Option<u64>,
    /// Seconds since the serving daemon first saw the file that has waited longest;
    /// null when nothing waits or no daemon has been watching.
    pub(crate) oldest_waiting_age_s: Option<u64>,
    /// The oldest few files in incoming/, in the order the daemon takes them
    /// (modification time, then name), each with what it waits for.
    pub(crate) oldest_waiting: Option<Vec<WaitingFile>>,
    /// Files in rejected/, reason files not counted.
    pub(crate) rejected_files: Option<u64>,
    /// The few files that have lain longest in rejected/, each with its reason.
    pub(crate) oldest_rejected: Option<Vec<RejectedFile>>,
    /// The serving daemon's database is failing, since when and why.
    pub(crate) database_fault: Option<DatabaseFault>,
    /// Bytes of the SQLite file (its WAL apart), or of the PostgreSQL database
    /// (`pg_database_size`).
    pub(crate) database_bytes: Option<u64>,
    pub(crate) wal_bytes: Option<u64>,
    pub(crate) wal_warning: bool,
    /// Bytes of the regular files in archive/, and how many they are.
    pub(crate) archive_bytes: Option<u64>,
    pub(crate) archive_files: Option<u64>,
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
    /// The first `FILES_NAMED_MAX` entries never taken, each with what it is.
    #[serde(skip)]
    pub(crate) never_taken_named: Vec<String>,
    /// What the serving daemon's state file says of the files it saw waiting, by
    /// name (the oldest 1000).
    #[serde(skip)]
    pub(crate) daemon_waiting: HashMap<String, state::WaitingFile>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ServedBy {
    /// The pid written in the lock file (null if it holds none).
    pub(crate) pid: Option<u32>,
    /// When the daemon took the lock: the lock file's modification time.
    pub(crate) since: String,
}

/// A file in incoming/ and what it waits for, as far as status can tell from the
/// spool and the serving daemon's state.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct WaitingFile {
    /// The name as recorded (each invalid byte as U+FFFD).
    pub(crate) file: String,
    pub(crate) state: WaitState,
    pub(crate) bytes: u64,
    pub(crate) modified_at: String,
    /// When the serving daemon first saw it; null when it has not seen it yet.
    pub(crate) first_seen_at: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WaitState {
    /// A name uploads use while they write (`.x`, `*.part`, `*.tmp`, `*~`…): never
    /// taken until renamed.
    TempName,
    /// No daemon serves the spool.
    NotServed,
    /// The serving daemon reports a database fault: every file waits for it.
    WaitingForDatabase,
    /// 0 bytes: still arriving, until --partial-timeout.
    Empty,
    /// The daemon saw it change less than --settle ago.
    Settling,
    /// Its content ends early: the rest may still come, until --partial-timeout.
    StillArriving,
    /// A try failed for a reason not in the file; the next one waits.
    BackingOff,
    /// Next in line, or being read now.
    Ready,
    /// The serving daemon has not told of it yet (it tells of the first 1000 in
    /// line, once a second).
    Pending,
}

impl WaitState {
    fn text(self) -> &'static str {
        match self {
            WaitState::TempName => "temp-named, taken once renamed",
            WaitState::NotServed => "no daemon serves the spool",
            WaitState::WaitingForDatabase => "waiting for the database",
            WaitState::Empty => "empty, so still arriving",
            WaitState::Settling => "settling",
            WaitState::StillArriving => "still arriving (its content ends early)",
            WaitState::BackingOff => "a try failed, waiting to try again",
            WaitState::Ready => "next in line, or being read",
            WaitState::Pending => "not yet told of by the daemon",
        }
    }
}

/// A file in rejected/ and why, from its `NAME.reason.json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct RejectedFile {
    /// Its name in rejected/ (each invalid byte as U+FFFD).
    pub(crate) file: String,
    /// The reason code; null when the reason file is missing or unreadable.
    pub(crate) reason: Option<String>,
    pub(crate) detail: Option<String>,
    pub(crate) rejected_at: Option<String>,
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
    let (totals, quality) = read_totals(db, &mut unreadable);
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
        flights_open: quality.map(|q| q.flights_open),
        flights_negative_block: quality.map(|q| q.flights_negative_block),
        database_bytes: totals.as_ref().and_then(|t| t.database_bytes),
        last_ingest_at: totals.and_then(|t| t.last_ingest_at),
        incoming_waiting: None,
        incoming_never_taken: None,
        never_taken_named: Vec::new(),
        oldest_waiting_age_s: None,
        oldest_waiting: None,
        rejected_files: None,
        oldest_rejected: None,
        database_fault: None,
        wal_bytes: None,
        wal_warning: false,
        archive_bytes: None,
        archive_files: None,
        settings_from: None,
        unreadable,
        lock_seen: !spool_exists,
        db_is_file: db.is_file(),
        daemon_waiting: HashMap::new(),
    };
    if let Some(path) = db.file().filter(|_| db_exists) {
        status.database_bytes = crate::sizes::file_bytes(path).ok();
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
    let wal_bytes = match crate::sizes::wal_path(db).metadata() {
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
    let incoming = list_in(&spool.incoming, "incoming/", status);
    let rejected = list_in(&spool.rejected, "rejected/", status);
    match crate::sizes::folder_size(&spool.archive) {
        Ok(size) => {
            status.archive_bytes = Some(size.bytes);
            status.archive_files = Some(size.files);
        }
        Err(e) => status.unreadable.push(format!("archive/: {}", cause(&e))),
    }
    status.incoming_waiting = incoming.as_ref().map(|entries| entries.len() as u64);
    if incoming.is_some()
        && let Ok(mut others) = not_regular(&spool.incoming)
    {
        others.sort();
        status.incoming_never_taken = Some(others.len() as u64);
        status.never_taken_named = others.into_iter().take(FILES_NAMED_MAX).collect();
    }
    status.rejected_files = rejected
        .as_ref()
        .map(|entries| entries.iter().filter(|e| is_rejected_file(&e.name)).count() as u64);
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
    status.oldest_waiting = incoming.map(|entries| oldest_waiting(entries, status));
    status.oldest_rejected = rejected.map(|entries| oldest_rejected(&spool.rejected, entries));
}

/// Whether a name in rejected/ is a rejected file: reason files are not, and
/// neither is a hidden temporary file a crash may leave while a reason file is
/// being written.
fn is_rejected_file(name: &OsStr) -> bool {
    !name.as_bytes().ends_with(REASON_SUFFIX.as_bytes()) && !name.as_bytes().starts_with(b".")
}

/// The regular files in `dir`, or `None` with the reason in `status.unreadable`.
fn list_in(dir: &Path, label: &str, status: &mut Status) -> Option<Vec<Entry>> {
    match regular_files(dir) {
        Ok(entries) => Some(entries),
        Err(e) => {
            status.unreadable.push(format!("{label}: {}", cause(&e)));
            None
        }
    }
}

/// The first `FILES_NAMED_MAX` of incoming/'s files in the order the daemon takes
/// them, each with what it waits for.
fn oldest_waiting(mut entries: Vec<Entry>, status: &Status) -> Vec<WaitingFile> {
    entries.sort_by(|a, b| {
        (a.meta.mtime(), a.meta.mtime_nsec(), a.name.as_bytes()).cmp(&(
            b.meta.mtime(),
            b.meta.mtime_nsec(),
            b.name.as_bytes(),
        ))
    });
    entries
        .iter()
        .take(FILES_NAMED_MAX)
        .map(|entry| {
            let file = names::lossy(&entry.name);
            let seen = status.daemon_waiting.get(&file);
            WaitingFile {
                first_seen_at: seen.map(|seen| seen.first_seen_at.clone()),
                state: wait_state(entry, seen, status),
                file,
                bytes: entry.meta.len(),
                modified_at: entry
                    .meta
                    .modified()
                    .map(crate::clock::format_millis)
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// What a file in incoming/ waits for, as far as status can tell: what the name
/// and size say first, then whether a daemon serves the spool and whether its
/// database fails.
fn wait_state(entry: &Entry, seen: Option<&state::WaitingFile>, status: &Status) -> WaitState {
    if spool::is_temp_name(&entry.name) {
        WaitState::TempName
    } else if status.lock_seen && status.served_by.is_none() {
        WaitState::NotServed
    } else if status.database_fault.is_some() {
        WaitState::WaitingForDatabase
    } else if entry.meta.len() == 0 {
        WaitState::Empty
    } else {
        match seen.map(|seen| seen.state.as_str()) {
            Some("settling") => WaitState::Settling,
            Some("still_arriving") => WaitState::StillArriving,
            Some("backing_off") => WaitState::BackingOff,
            Some("ready") => WaitState::Ready,
            _ => WaitState::Pending,
        }
    }
}

/// The `FILES_NAMED_MAX` files that have lain longest in rejected/ (by their reason
/// file's modification time, written when they were rejected; a file without one
/// by its own), each with what its reason file says.
fn oldest_rejected(dir: &Path, entries: Vec<Entry>) -> Vec<RejectedFile> {
    let times: HashMap<&OsStr, (i64, i64)> = entries
        .iter()
        .map(|e| (e.name.as_os_str(), (e.meta.mtime(), e.meta.mtime_nsec())))
        .collect();
    let mut files: Vec<((i64, i64), &OsStr)> = entries
        .iter()
        .filter(|e| is_rejected_file(&e.name))
        .map(|e| {
            let reason = reason_name(&e.name);
            let own = (e.meta.mtime(), e.meta.mtime_nsec());
            let at = times.get(reason.as_os_str()).copied().unwrap_or(own);
            (at, e.name.as_os_str())
        })
        .collect();
    files.sort_by(|a, b| (a.0, a.1.as_bytes()).cmp(&(b.0, b.1.as_bytes())));
    files
        .into_iter()
        .take(FILES_NAMED_MAX)
        .map(|(_, name)| rejected_file(dir, name))
        .collect()
}

/// `NAME.reason.json` of the file `name` in rejected/.
fn reason_name(name: &OsStr) -> OsString {
    let mut reason = name.to_owned();
    reason.push(REASON_SUFFIX);
    reason
}

/// What the reason file of `name` in `dir` says; its fields null when it is
/// missing, unreadable or not what spoolite writes.
fn rejected_file(dir: &Path, name: &OsStr) -> RejectedFile {
    let mut text = Vec::new();
    let read = crate::ingest::open_no_follow(&dir.join(reason_name(name)))
        .and_then(|file| file.take(REASON_FILE_BYTES_MAX).read_to_end(&mut text));
    let value: serde_json::Value = match read {
        Ok(_) => serde_json::from_slice(&text).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    let field = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    RejectedFile {
        file: names::lossy(name),
        reason: field("reason"),
        detail: field("detail"),
        rejected_at: field("rejected_at"),
    }
}

/// The database's figures, or `None` with the reason in `unreadable`; and the
/// flights' data quality counts where its schema has them (`None` for an older
/// one, which the daemon upgrades).
fn read_totals(db: &Db, unreadable: &mut Vec<String>) -> (Option<Totals>, Option<FlightQuality>) {
    // A PostgreSQL database is not a file: the connection says whether it exists.
    if let Some(Err(e)) = db.file().map(fs::metadata) {
        unreadable.push(format!("database {db}: {}", cause(&e)));
        return (None, None);
    }
    let mut store = match Store::open_read_only(db) {
        Ok(store) => store,
        Err(e) => {
            unreadable.push(format!("database {db}: {e}"));
            return (None, None);
        }
    };
    match store.totals() {
        Ok(totals) => {
            // An empty database has no flights (nor, while it is being made, the
            // tables to count them in).
            let quality = match totals.batches {
                0 => Some(FlightQuality::default()),
                _ => store.flight_quality().ok(),
            };
            (Some(totals), quality)
        }
        Err(e) => {
            unreadable.push(format!("database {db}: {e}"));
            (None, None)
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
    status.daemon_waiting = daemon_state
        .waiting
        .into_iter()
        .map(|file| (file.name.clone(), file))
        .collect();
}

/// An I/O error as a person reads it: "permission denied", "not found".
fn cause(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "does not exist".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

/// A regular file directly inside a folder.
struct Entry {
    name: OsString,
    meta: fs::Metadata,
}

/// The regular files directly inside `dir`, links not followed.
/// The entries of `dir` that are not regular files, each as `NAME: what it is`
/// (not followed: a link is named as a link).
fn not_regular(dir: &Path) -> io::Result<Vec<String>> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = match fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta.file_type(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let what = if kind.is_file() {
            continue;
        } else if kind.is_dir() {
            "a folder"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        out.push(format!(
            "{}: {what}",
            names::escaped(&names::lossy(&entry.file_name()))
        ));
    }
    Ok(out)
}

fn regular_files(dir: &Path) -> io::Result<Vec<Entry>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_file() {
            files.push(Entry {
                name: entry.file_name(),
                meta,
            });
        }
    }
    Ok(files)
}

/// What to do about what could not be read, for the message on stderr.
pub(crate) fn advice(status: &Status) -> &'static str {
    if status.served_by.is_some() && status.database_fault.is_some() {
        "the serving daemon reports the database fault above: do what it says"
    } else if status.db_exists && Path::new(&status.spool).is_dir() {
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
            // A named file's line is cut to fit; a path or a message stays whole,
            // to be copied.
            Some(columns) => wrap(
                &value,
                columns.saturating_sub(LABEL_WIDTH),
                label.is_empty(),
            ),
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
    let mut lines = Vec::new();
    database_lines(status, &mut lines);
    folder_lines(status, &mut lines);
    size_lines(status, &mut lines);
    lines
}

/// A count, or `unknown`.
fn figure(value: Option<u64>) -> String {
    value.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

/// Where the site is, who serves it, and what the database holds.
fn database_lines(status: &Status, lines: &mut Vec<(&'static str, String)>) {
    lines.push(("database", database_text(status)));
    lines.push(("spool", status.spool.clone()));
    lines.push(("daemon", daemon_text(status)));
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
    // Only when there is something to say: flights whose data can make a crew
    // figure wrong.
    if let (Some(open), Some(negative)) = (status.flights_open, status.flights_negative_block)
        && open + negative > 0
    {
        lines.push((
            "flights",
            format!("{open} without on-blocks for over a day, {negative} landed before leaving"),
        ));
    }
    let last = match (&status.last_ingest_at, status.batches) {
        (Some(at), _) => at.clone(),
        (None, Some(_)) => "never".to_owned(),
        (None, None) => "unknown".to_owned(),
    };
    lines.push(("last ingest", last));
}

/// What waits in incoming/ and why, what is never taken, and what was rejected.
fn folder_lines(status: &Status, lines: &mut Vec<(&'static str, String)>) {
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
    let waiting = status.oldest_waiting.iter().flatten();
    let named =
        waiting.map(|file| format!("{}: {}", names::escaped(&file.file), file.state.text()));
    push_named(lines, named, status.incoming_waiting);
    if let Some(never) = status.incoming_never_taken.filter(|n| *n > 0) {
        lines.push((
            "never taken",
            format!("{never} in incoming/ that are not regular files, left in place"),
        ));
        push_named(lines, status.never_taken_named.iter().cloned(), Some(never));
    }
    lines.push((
        "rejected",
        in_folder(status.rejected_files, "rejected/", ""),
    ));
    let rejected = status.oldest_rejected.iter().flatten();
    let named = rejected.map(|file| {
        let reason = file.reason.as_deref().unwrap_or("(no reason file)");
        format!("{}: {reason}", names::escaped(&file.file))
    });
    push_named(lines, named, status.rejected_files);
}

/// What the site takes on disk, where the settings came from, and what could
/// not be read.
fn size_lines(status: &Status, lines: &mut Vec<(&'static str, String)>) {
    lines.push(("database size", bytes_text(status.database_bytes)));
    // PostgreSQL keeps its own WAL: no line for it.
    if status.db_is_file {
        lines.push(("wal", wal_text(status)));
    }
    let archive = match (status.archive_bytes, status.archive_files) {
        (Some(bytes), Some(files)) => {
            let noun = if files == 1 { "file" } else { "files" };
            format!("{} in {files} {noun}", bytes_text(Some(bytes)))
        }
        _ => "unknown".to_owned(),
    };
    lines.push(("archive", archive));
    if let Some(settings) = &status.settings_from {
        let text = format!("{} from {}", settings.variables.join(", "), settings.file);
        lines.push(("settings", text));
    }
    for problem in &status.unreadable {
        lines.push(("cannot read", problem.clone()));
    }
}

/// The named files of a folder as lines of their own under its count, and how
/// many more there are.
fn push_named(
    lines: &mut Vec<(&'static str, String)>,
    named: impl Iterator<Item = String>,
    count: Option<u64>,
) {
    let mut shown = 0;
    for text in named {
        lines.push(("", text));
        shown += 1;
    }
    let more = count.unwrap_or(0).saturating_sub(shown);
    if more > 0 {
        lines.push(("", format!("and {more} more")));
    }
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

/// `N bytes (x KiB)`, or `unknown`.
fn bytes_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "unknown".to_owned(), crate::units::bytes_text)
}

fn daemon_text(status: &Status) -> String {
    match &status.served_by {
        Some(ServedBy {
            pid: Some(pid),
            since,
        }) => format!("serving, pid {pid}, since {since}"),
        Some(ServedBy { pid: None, since }) => format!("serving since {since}"),
        // A spool that is not there holds no lock file: whether a daemon serves
        // the database from another spool cannot be told.
        None if !Path::new(&status.spool).is_dir() => {
            "unknown: the spool does not exist".to_owned()
        }
        None if status.lock_seen => "not running".to_owned(),
        None => format!("unknown: cannot read {LOCK_FILE}"),
    }
}

/// `text` cut at spaces into lines of at most `width` characters; a word longer
/// than that stands alone on its line, cut in the middle with `…` to fit when
/// `cut_long` (a long file name; `--json` keeps it whole).
fn wrap(text: &str, width: usize, cut_long: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let word = match cut_long {
            true => cut_middle(word, width),
            false => word.into(),
        };
        let needed =
            current.chars().count() + usize::from(!current.is_empty()) + word.chars().count();
        if !current.is_empty() && needed > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(&word);
    }
    lines.push(current);
    lines
}

/// `word` when it fits in `width` characters, else its start and its end with `…`
/// between them, `width` characters in all (the end one longer when odd: a file
/// name's extension and time stamp are there).
fn cut_middle(word: &str, width: usize) -> std::borrow::Cow<'_, str> {
    let chars = word.chars().count();
    if chars <= width || width < 3 {
        return word.into();
    }
    let kept = width - 1;
    let head = kept / 2;
    let tail = kept - head;
    let start: String = word.chars().take(head).collect();
    let end: String = word.chars().skip(chars - tail).collect();
    format!("{start}…{end}").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_wrap_within_80_columns() {
        assert_eq!(wrap("a b c", 3, true), ["a b", "c"]);
        assert_eq!(wrap("abcdef g", 3, true), ["a…f", "g"]);
        assert_eq!(wrap("abcdef g", 3, false), ["abcdef", "g"]);
        assert_eq!(
            wrap("0123456789.json: ready", 8, true),
            ["012…son:", "ready"]
        );
        assert_eq!(cut_middle("0123456789", 10), "0123456789");
        assert_eq!(cut_middle("0123456789", 9), "0123…6789");
        assert_eq!(wrap("", 3, true), [""]);
    }

    #[test]
    fn every_line_fits_a_terminal_and_a_long_name_is_cut_in_the_middle() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::Sqlite(dir.path().join("s.db"));
        let mut status = gather(&dir.path().join("spool"), &db, SystemTime::now());
        let name = format!("EZY-ops-export-{}-20261205T0930Z.ndjson", "x".repeat(40));
        status.incoming_waiting = Some(1);
        status.oldest_waiting = Some(vec![WaitingFile {
            file: name.clone(),
            state: WaitState::Settling,
            bytes: 10,
            modified_at: "2026-12-05T09:30:00.000Z".to_owned(),
            first_seen_at: None,
        }]);
        let text = render(&status, Some(COLUMNS));
        for line in text.lines() {
            assert!(
                line.chars().count() <= COLUMNS,
                "{} columns: {line}",
                line.len()
            );
        }
        // The word cut is the name with its colon: 30 characters, `…`, the last 31.
        let word = format!("{name}:");
        let cut = format!("{}…{}", &word[..30], &word[word.len() - 31..]);
        assert!(
            text.contains(&format!("\n                  {cut}\n")),
            "{text}"
        );
        assert!(render(&status, None).contains(&format!("{name}: settling")));
    }

    #[test]
    fn a_long_path_stays_whole_on_a_terminal_to_be_copied() {
        let dir = tempfile::tempdir().expect("temp dir");
        let long = dir
            .path()
            .join("a-folder-name-long-enough-to-pass-eighty-columns/spoolite.db");
        let db = Db::Sqlite(long.clone());
        let status = gather(&dir.path().join("spool"), &db, SystemTime::now());
        let text = render(&status, Some(COLUMNS));
        assert!(text.contains(&long.display().to_string()), "{text}");
    }

    #[test]
    fn a_spool_that_is_not_there_says_nothing_of_a_daemon() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::Sqlite(dir.path().join("s.db"));
        let status = gather(&dir.path().join("nowhere"), &db, SystemTime::now());
        assert_eq!(daemon_text(&status), "unknown: the spool does not exist");
        std::fs::create_dir(dir.path().join("empty")).expect("mkdir");
        let status = gather(&dir.path().join("empty"), &db, SystemTime::now());
        assert_eq!(daemon_text(&status), "not running");
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
