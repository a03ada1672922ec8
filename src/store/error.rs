//! The store's errors, and what each means for the daemon: wait for the database,
//! hold back one file, or refuse to start.

use std::path::PathBuf;

use super::fold::Finished;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("stopped before the batch was committed; it was rolled back")]
    Stopped,
    #[error("open database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "database {path} has schema version {found}, newer than this spoolite knows ({known}); \
         run a newer spoolite or point --db at another file"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "database {path} has schema version {found}, older than this spoolite's ({known}); \
         a dry run upgrades nothing, so run the daemon or `spoolite ingest` once first"
    )]
    OlderSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("database {path} is a folder, not a file; point --db at a file")]
    NotAFile { path: PathBuf },
    /// The database file the daemon opened is no longer at its path (deleted or
    /// renamed): nothing is written until it is back, or a restart opens what is
    /// then at the path.
    #[error(
        "database {path} is gone (deleted or renamed since spoolite opened it): nothing \
         more is written until it is back at the path, or spoolite is restarted to create \
         a new database there"
    )]
    Gone { path: PathBuf },
    /// Another file lies at the database's path than the one the daemon opened.
    #[error(
        "database {path} was replaced by another file since spoolite opened it: nothing \
         more is written until the old one is back, or spoolite is restarted to write into \
         the file now at the path"
    )]
    Replaced { path: PathBuf },
    #[error("create database folder {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", sqlite_text(.0))]
    Sqlite(#[from] rusqlite::Error),
    #[error("connect to PostgreSQL database {db}: {}", pg_text(.source))]
    PgConnect {
        /// The URI without its password.
        db: String,
        source: postgres::Error,
    },
    /// A connection that could not be made for a reason the URI, its files or the
    /// server's settings hold (TLS, the CA file, the password file, the password):
    /// the message says what to do.
    #[error("connect to PostgreSQL database {db}: {problem}")]
    PgConnection {
        /// The URI without its password.
        db: String,
        problem: String,
    },
    /// The server's own message (and its detail, through the error's causes) is
    /// in the text: the `postgres` crate's display alone says only "db error".
    #[error("database: {}", pg_text(.0))]
    Postgres(#[from] postgres::Error),
    /// The COMMIT of a batch was sent and no acknowledgement came back (the
    /// connection was lost, or the server ended the session): the batch may or
    /// may not be committed. The next try of its file settles it by the inbox, and
    /// `InDoubt::xid` tells whether the commit that happened was this one.
    #[error(
        "the connection was lost during the COMMIT of this batch, which may or may not \
         have happened; the next try settles it by the inbox: {}",
        pg_text(.source)
    )]
    CommitInDoubt {
        batch: Box<InDoubt>,
        source: postgres::Error,
    },
    /// Sending a batch's rows to PostgreSQL (COPY) failed.
    #[error("send a batch's rows to the database: {0}")]
    Copy(std::io::Error),
    /// The database did not do what the outcome rules decided (a bug, not a fault
    /// of the file or the database): the batch is rolled back and tried again.
    #[error("{0}")]
    Disagreed(String),
    /// Writing or reading back the sorted runs of a large batch (next to the
    /// database) failed: a full or failing disk, like the database's own.
    #[error("sort a batch's events: {0}")]
    Spill(std::io::Error),
}

/// A SQLite error as a person reads it: SQLite's own words, which mostly name the
/// database already (`database is locked`, `attempt to write a readonly
/// database`), and `database: ` before those that do not (`disk I/O error`).
fn sqlite_text(error: &rusqlite::Error) -> String {
    let text = error.to_string();
    if text.contains("database") {
        text
    } else {
        format!("database: {text}")
    }
}

/// A PostgreSQL error as a person reads it, on one line: the client's words and
/// the server's (`db error: ERROR: canceling statement due to statement timeout`),
/// which the client error's own text leaves out.
fn pg_text(error: &postgres::Error) -> String {
    with_causes(error).replace('\n', " ")
}

/// A batch whose COMMIT went unacknowledged: what it would have come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InDoubt {
    pub(crate) digest: String,
    /// The transaction's id (`pg_current_xact_id()`), which the server can be
    /// asked about on another connection (`pg_xact_status`).
    pub(crate) xid: String,
    /// The batch's `batch_id`, when it declares one.
    pub(crate) batch_id: Option<String>,
    pub(crate) finished: Finished,
}

/// What the server says of a transaction whose COMMIT went unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStatus {
    Committed,
    Aborted,
    /// The session that sent the COMMIT is still finishing it.
    InProgress,
    /// The server no longer knows (the id is too old).
    Unknown,
}

/// What a database fault means for the daemon (ARCHITECTURE.md has the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultClass {
    /// The database cannot be used now (locked, busy, read-only, disk full, I/O,
    /// cannot open): every file waits, with one back-off. `reopen` says the fault can
    /// outlive the connection (a connection opened read-only stays read-only), so
    /// the next try opens the database again.
    Database { reopen: bool },
    /// Something in this file the database refuses (a value too big): only this
    /// file waits; after a few tries with the same error it is rejected.
    InFile,
    /// Anything else: only this file waits and is tried again, never rejected for
    /// it, since the fault may not be in the file.
    ThisFile,
}

impl StoreError {
    /// How the daemon treats this fault.
    pub fn class(&self) -> FaultClass {
        use rusqlite::ErrorCode::*;
        let code = match self {
            StoreError::PgConnect { .. } | StoreError::PgConnection { .. } => {
                return FaultClass::Database { reopen: true };
            }
            StoreError::Postgres(e) => return postgres_class(e),
            StoreError::CommitInDoubt { .. } => return FaultClass::Database { reopen: true },
            StoreError::Copy(_) => return FaultClass::Database { reopen: true },
            StoreError::Disagreed(_) => return FaultClass::ThisFile,
            StoreError::Sqlite(e) | StoreError::Open { source: e, .. } => e.sqlite_error_code(),
            StoreError::CreateDir { .. } => return FaultClass::Database { reopen: true },
            StoreError::Spill(_) => return FaultClass::Database { reopen: false },
            // The connection is closed (its WAL, still at the path, goes back into
            // the file it belongs to, and leaves the path); the daemon opens the
            // path again only once it leads to the file first opened.
            StoreError::Gone { .. } | StoreError::Replaced { .. } => {
                return FaultClass::Database { reopen: true };
            }
            StoreError::NewerSchema { .. }
            | StoreError::OlderSchema { .. }
            | StoreError::NotAFile { .. } => {
                return FaultClass::Database { reopen: true };
            }
            StoreError::Stopped => return FaultClass::ThisFile,
        };
        match code {
            Some(DatabaseBusy | DatabaseLocked) => FaultClass::Database { reopen: false },
            Some(DiskFull) => FaultClass::Database { reopen: false },
            Some(
                ReadOnly
                | CannotOpen
                | SystemIoFailure
                | PermissionDenied
                | NotADatabase
                | DatabaseCorrupt
                | FileLockingProtocolFailed
                | OutOfMemory,
            ) => FaultClass::Database { reopen: true },
            Some(TooBig) => FaultClass::InFile,
            _ => FaultClass::ThisFile,
        }
    }

    /// A fault that will not pass by itself when the daemon starts: refuse to start
    /// (a file that is not a database, a newer schema), naming the database.
    pub(crate) fn is_fatal_at_start(&self) -> bool {
        let code = match self {
            StoreError::PgConnect { .. }
            | StoreError::PgConnection { .. }
            | StoreError::Postgres(_)
            | StoreError::CommitInDoubt { .. }
            | StoreError::Copy(_)
            | StoreError::Disagreed(_) => return false,
            StoreError::Sqlite(e) | StoreError::Open { source: e, .. } => e.sqlite_error_code(),
            StoreError::NewerSchema { .. } | StoreError::NotAFile { .. } => return true,
            _ => return false,
        };
        matches!(
            code,
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
        )
    }

    /// The database server cannot be reached, or the connection to it was lost:
    /// what `status` and the metrics call "unreachable".
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            // A server that answered (no such database or role, too many
            // connections) was reached: failing, not unreachable.
            StoreError::PgConnect { source, .. } => source.as_db_error().is_none(),
            StoreError::Copy(_) => true,
            StoreError::Postgres(e) | StoreError::CommitInDoubt { source: e, .. } => {
                connection_lost(e)
            }
            _ => false,
        }
    }

    /// A fault that does not pass by itself while the daemon runs: the database
    /// file gone or replaced, which the daemon never opens again on its own.
    pub(crate) fn lasts_until_restart(&self) -> bool {
        matches!(self, StoreError::Gone { .. } | StoreError::Replaced { .. })
    }

    /// A lock held by another connection: waiting helps.
    pub(crate) fn is_busy(&self) -> bool {
        let code = match self {
            StoreError::Sqlite(e) | StoreError::Open { source: e, .. } => e.sqlite_error_code(),
            StoreError::NewerSchema { .. }
            | StoreError::OlderSchema { .. }
            | StoreError::CreateDir { .. }
            | StoreError::NotAFile { .. }
            | StoreError::Gone { .. }
            | StoreError::Replaced { .. }
            | StoreError::Spill(_)
            | StoreError::PgConnect { .. }
            | StoreError::PgConnection { .. }
            | StoreError::Postgres(_)
            | StoreError::CommitInDoubt { .. }
            | StoreError::Copy(_)
            | StoreError::Disagreed(_)
            | StoreError::Stopped => None,
        };
        matches!(
            code,
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

/// The error ended the connection: it closed, or the server ended the session
/// (an administrator, a shutdown, a crash).
fn connection_lost(error: &postgres::Error) -> bool {
    match error.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
    }
}

/// How the daemon treats a PostgreSQL error. Everything the contract calls a
/// passing fault (the server unreachable or restarting, a dropped connection, a
/// serialization failure, a deadlock) waits for the database and is retried,
/// never rejected; a lost connection is opened again.
fn postgres_class(error: &postgres::Error) -> FaultClass {
    let Some(code) = error.code() else {
        // No SQLSTATE: the connection closed, or I/O on it failed.
        return FaultClass::Database { reopen: true };
    };
    let code = code.code();
    if code == "40001" // serialization failure
        || code == "40P01" // deadlock detected
        || code.starts_with("53") // insufficient resources: disk full, out of memory
        || code.starts_with("55")
    // lock not available, object in use
    {
        return FaultClass::Database { reopen: false };
    }
    // A statement timeout or a cancel (57014) is under operator intervention: the
    // session's settings are those of when it connected, so a `statement_timeout`
    // the administrator has since lifted is only dropped by a new connection.
    if code.starts_with("08") // connection exception
        || code.starts_with("57") // operator intervention: shutdown, crash, cannot connect now
        || code.starts_with("58") // system error (I/O)
        || code == "25006" // read-only transaction (a standby)
        || code == "25P03"
    // idle-in-transaction timeout: the server ended the session
    {
        return FaultClass::Database { reopen: true };
    }
    let too_large = || {
        error
            .as_db_error()
            .is_some_and(|db| db.message().contains("too large"))
    };
    if code == "54000" || code == "22023" && too_large() {
        return FaultClass::InFile;
    }
    FaultClass::ThisFile
}

/// An error's text followed by its causes' (the `postgres` crate's own text says
/// only "db error" or "error performing TLS handshake"; the server's message and
/// OpenSSL's reason are its causes).
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        let more = error.to_string();
        // Some causes repeat their own cause's text in theirs.
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = error.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error SQLite gives a second writer while another holds the write lock.
    fn locked_error() -> rusqlite::Error {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.db");
        let holder = rusqlite::Connection::open(&path).expect("open");
        holder
            .execute_batch("PRAGMA journal_mode = WAL; BEGIN IMMEDIATE")
            .expect("take the write lock");
        let other = rusqlite::Connection::open(&path).expect("open");
        other
            .busy_timeout(std::time::Duration::ZERO)
            .expect("no busy wait");
        other
            .execute_batch("BEGIN IMMEDIATE")
            .expect_err("the lock is held")
    }

    #[test]
    fn a_sqlite_error_names_the_database_once() {
        assert_eq!(
            StoreError::Sqlite(locked_error()).to_string(),
            "database is locked"
        );
        let io = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some("disk I/O error".to_owned()),
        );
        assert_eq!(
            StoreError::Sqlite(io).to_string(),
            "database: disk I/O error"
        );
    }
}
