//! The store's errors, and what each means for the daemon: wait for the database,
//! hold back one file, or refuse to start.

use std::path::PathBuf;

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
    #[error(
        "--db {path} names a PostgreSQL database, which this spoolite cannot write; \
         point --db at a SQLite file"
    )]
    Unsupported { path: PathBuf },
    #[error("create database folder {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Writing or reading back the sorted runs of a large batch (next to the
    /// database) failed: a full or failing disk, like the database's own.
    #[error("sort a batch's events: {0}")]
    Spill(std::io::Error),
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
            StoreError::Sqlite(e) | StoreError::Open { source: e, .. } => e.sqlite_error_code(),
            StoreError::CreateDir { .. } => return FaultClass::Database { reopen: true },
            StoreError::Spill(_) => return FaultClass::Database { reopen: false },
            StoreError::NewerSchema { .. }
            | StoreError::OlderSchema { .. }
            | StoreError::NotAFile { .. }
            | StoreError::Unsupported { .. } => {
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
    pub fn is_fatal_at_start(&self) -> bool {
        let code = match self {
            StoreError::Sqlite(e) | StoreError::Open { source: e, .. } => e.sqlite_error_code(),
            StoreError::NewerSchema { .. }
            | StoreError::NotAFile { .. }
            | StoreError::Unsupported { .. } => return true,
            _ => return false,
        };
        matches!(
            code,
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
        )
    }

    /// A lock held by another connection: waiting helps.
    pub fn is_busy(&self) -> bool {
        let code = match self {
            StoreError::Sqlite(e) | StoreError::Open { source: e, .. } => e.sqlite_error_code(),
            StoreError::NewerSchema { .. }
            | StoreError::OlderSchema { .. }
            | StoreError::CreateDir { .. }
            | StoreError::NotAFile { .. }
            | StoreError::Unsupported { .. }
            | StoreError::Spill(_)
            | StoreError::Stopped => None,
        };
        matches!(
            code,
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}
