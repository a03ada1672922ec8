//! The database: a SQLite file, or a PostgreSQL database (`postgres`) that many
//! writers share, behind one `Store` and one `Batch` whose callers do not tell
//! them apart. For SQLite: opening it (`open`: pragmas, migrations), one
//! transaction per batch file (`writer`, with its flights kept by `flights`), the
//! change feed's reads (`changes`); for both, the contract's outcome rules as a
//! pure fold (`fold`) that decides what each backend writes. The only module that
//! talks to a database.

pub mod changes;
mod error;
mod flights;
pub mod fold;
pub mod open;
pub mod postgres;
mod rebuild;
mod runs;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use rusqlite::{Connection, OptionalExtension};

pub use error::{CommitStatus, FaultClass, InDoubt, StoreError};
pub use fold::Counts;
pub use open::{BUSY_TIMEOUT, stop_waiting_for_locks};
pub use writer::{Finished, Reasons};

use crate::batch::{Header, Record};
use postgres::PgStore;

/// `--db` as logs and messages name it: a PostgreSQL URI without its password.
pub fn db_name(db: &Path) -> String {
    if postgres::is_uri(db) {
        postgres::redacted(&db.to_string_lossy())
    } else {
        db.display().to_string()
    }
}

/// What `status` reads from the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub batches: u64,
    pub events: u64,
    pub quarantined: u64,
    pub last_ingest_at: Option<String>,
}

/// The database a spoolite writes: `--db` a SQLite file, or a PostgreSQL URI
/// (`postgres://…`, `postgresql://…`). Each method does the same for both.
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// One batch file's transaction on either backend (see `writer::Batch` and
/// `postgres::Batch`): stage its records, then finish; dropped, it rolls back.
#[allow(
    clippy::large_enum_variant,
    reason = "one per batch file, held on the stack while it is ingested, never in a collection"
)]
pub enum Batch<'c> {
    Sqlite(writer::Batch<'c>),
    Postgres(postgres::Batch<'c>),
}

impl Batch<'_> {
    /// Adds a run of records, in file order.
    pub fn stage(&mut self, records: &[Record]) -> Result<(), StoreError> {
        match self {
            Batch::Sqlite(batch) => batch.stage(records),
            Batch::Postgres(batch) => batch.stage(records),
        }
    }

    /// Applies the outcome rules, writes the inbox row and commits (a dry run
    /// rolls back); `stop` set abandons the batch with `StoreError::Stopped`.
    pub fn finish(self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        match self {
            Batch::Sqlite(batch) => batch.finish(header, stop),
            Batch::Postgres(batch) => batch.finish(header, stop),
        }
    }
}

impl Store {
    /// Opens (creating if missing) the database `db` names and brings its schema
    /// up to date.
    pub fn open(db: &Path) -> Result<Store, StoreError> {
        if postgres::is_uri(db) {
            return Ok(Store::Postgres(PgStore::connect(db, true)?));
        }
        Ok(Store::Sqlite(SqliteStore::open(db)?))
    }

    /// Opens an existing database without writing to it (for `status` and
    /// `ingest --dry-run`); a PostgreSQL schema is neither created nor upgraded.
    pub fn open_read_only(db: &Path) -> Result<Store, StoreError> {
        if postgres::is_uri(db) {
            return Ok(Store::Postgres(PgStore::connect(db, false)?));
        }
        Ok(Store::Sqlite(SqliteStore::open_read_only(db)?))
    }

    /// An empty SQLite database in memory with the current schema: what a dry run
    /// compares against when the database file does not exist yet.
    pub fn open_empty_in_memory() -> Result<Store, StoreError> {
        Ok(Store::Sqlite(SqliteStore::open_empty_in_memory()?))
    }

    /// Refuses a database whose schema is older than this spoolite's.
    pub fn require_current_schema(&mut self, db: &Path) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.require_current_schema(db),
            Store::Postgres(store) => store.require_current_schema(),
        }
    }

    /// Whether the database holds no spoolite schema yet: a PostgreSQL database
    /// no spoolite has written (a dry run compares against an empty one instead).
    /// A SQLite file is checked by `require_current_schema`: `false`.
    pub fn has_no_schema(&mut self) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(_) => Ok(false),
            Store::Postgres(store) => Ok(store.schema_version()? == 0),
        }
    }

    /// Whether a batch with this digest is already committed (a quick look;
    /// `begin` checks again in its transaction).
    /// Whether the database can still be used, for a daemon with nothing to
    /// ingest: PostgreSQL, one round trip on the open connection (a server
    /// stopped since fails it); SQLite, a local file, nothing to look at.
    pub fn probe(&mut self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Postgres(store) => store.probe(),
        }
    }

    pub fn contains_batch(&mut self, digest: &str) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => store.contains_batch(digest),
            Store::Postgres(store) => store.contains_batch(digest),
        }
    }

    /// What became of a PostgreSQL transaction whose COMMIT went unacknowledged
    /// (`StoreError::CommitInDoubt`). A SQLite commit is never in doubt: `Unknown`.
    pub fn commit_status(&mut self, xid: &str) -> Result<CommitStatus, StoreError> {
        match self {
            Store::Sqlite(_) => Ok(CommitStatus::Unknown),
            Store::Postgres(store) => store.commit_status(xid),
        }
    }

    /// SQLite: whether a batch large against the table builds its secondary
    /// indexes by sorting (`store::rebuild`; on unless told). The benchmark turns
    /// it off to measure the write path that keeps them throughout. PostgreSQL
    /// has no such step.
    pub fn set_sorted_index_builds(&mut self, on: bool) {
        if let Store::Sqlite(store) = self {
            store.sorted_index_builds = on;
        }
    }

    /// SQLite: copies the WAL back into the database (see
    /// `SqliteStore::checkpoint`). PostgreSQL checkpoints by itself: `true`.
    pub fn checkpoint(&self) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => store.checkpoint(),
            Store::Postgres(_) => Ok(true),
        }
    }

    pub fn totals(&mut self) -> Result<Totals, StoreError> {
        match self {
            Store::Sqlite(store) => store.totals(),
            Store::Postgres(store) => store.totals(),
        }
    }

    /// Starts the transaction of one batch file, written as `file_name` at `now`.
    /// `None` when the batch is already in the inbox: a duplicate.
    pub fn begin(
        &mut self,
        digest: &str,
        file_name: &str,
        now: &str,
    ) -> Result<Option<Batch<'_>>, StoreError> {
        Ok(match self {
            Store::Sqlite(store) => store.begin(digest, file_name, now)?.map(Batch::Sqlite),
            Store::Postgres(store) => store.begin(digest, file_name, now)?.map(Batch::Postgres),
        })
    }

    /// Starts a dry run of one batch file: the same fold, nothing written.
    pub fn begin_dry_run(&mut self, digest: &str) -> Result<Option<Batch<'_>>, StoreError> {
        Ok(match self {
            Store::Sqlite(store) => store.begin_dry_run(digest)?.map(Batch::Sqlite),
            Store::Postgres(store) => store.begin_dry_run(digest)?.map(Batch::Postgres),
        })
    }

    /// The SQLite store behind a test's `Store`.
    #[cfg(test)]
    fn sqlite_for_tests(&self) -> &SqliteStore {
        match self {
            Store::Sqlite(store) => store,
            Store::Postgres(_) => panic!("a SQLite store was expected"),
        }
    }

    /// See `SqliteStore::limit_value_bytes_for_tests`.
    #[cfg(test)]
    pub(crate) fn limit_value_bytes_for_tests(&self, bytes: i32) {
        self.sqlite_for_tests().limit_value_bytes_for_tests(bytes);
    }
}

/// A SQLite database file (or, for a dry run, an empty one in memory).
pub struct SqliteStore {
    conn: Connection,
    /// Where a large batch's sorted runs spill, in order of preference: the
    /// database's folder (the same disk, already writable by the daemon), then,
    /// for a dry run on a folder the reader may not write, the system's.
    spill_dirs: Vec<PathBuf>,
    /// The size of a sorted run of a batch's events (`runs::RUN_BYTES` but in
    /// tests, which make runs small to spill a few events).
    run_bytes: usize,
    /// See `Store::set_sorted_index_builds`.
    sorted_index_builds: bool,
}

/// The folder of the database file at `path`.
fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and brings its schema up
    /// to date.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            conn: open::read_write(path)?,
            spill_dirs: vec![folder_of(path)],
            run_bytes: runs::RUN_BYTES,
            sorted_index_builds: true,
        })
    }

    /// Opens an existing database without writing to it (for `status` and
    /// `ingest --dry-run`). An older schema is accepted: `status` reads what every
    /// version has; see `require_current_schema`.
    pub fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            conn: open::read_only(path)?,
            spill_dirs: vec![folder_of(path), std::env::temp_dir()],
            run_bytes: runs::RUN_BYTES,
            sorted_index_builds: true,
        })
    }

    /// An empty database in memory with the current schema: what a dry run
    /// compares against when the database file does not exist yet.
    pub fn open_empty_in_memory() -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            conn: open::empty_in_memory()?,
            spill_dirs: vec![std::env::temp_dir()],
            run_bytes: runs::RUN_BYTES,
            sorted_index_builds: true,
        })
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(open::user_version(&self.conn)?)
    }

    /// Refuses a database whose schema is older than this spoolite's: a dry run
    /// opened read-only cannot upgrade it, and its statements need the current one.
    pub fn require_current_schema(&self, path: &Path) -> Result<(), StoreError> {
        let found = self.schema_version()?;
        if found < open::SCHEMA_VERSION {
            return Err(StoreError::OlderSchema {
                path: path.to_owned(),
                found,
                known: open::SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// Lowers SQLite's limit on one value's size, so that tests can meet a value the
    /// database refuses (SQLITE_TOOBIG) without gigabytes of input.
    #[cfg(test)]
    pub(crate) fn limit_value_bytes_for_tests(&self, bytes: i32) {
        // SAFETY: the handle is open for the life of `self.conn`.
        unsafe {
            rusqlite::ffi::sqlite3_limit(
                self.conn.handle(),
                rusqlite::ffi::SQLITE_LIMIT_LENGTH,
                bytes,
            );
        }
    }

    /// Makes a batch's sorted runs `bytes` long, so that tests spill a few events.
    #[cfg(test)]
    pub(crate) fn set_run_bytes_for_tests(&mut self, bytes: usize) {
        self.run_bytes = bytes;
    }

    /// Whether a batch with this digest is already committed (a quick look before
    /// taking the write lock; `Store::begin` checks again under the lock).
    pub fn contains_batch(&self, digest: &str) -> Result<bool, StoreError> {
        inbox_has(&self.conn, digest)
    }

    /// Copies the WAL back into the database and truncates it, as far as readers
    /// allow, without waiting for them: an analyst's long read holds back only
    /// the frames it still needs. Returns whether the WAL was fully checkpointed.
    pub fn checkpoint(&self) -> Result<bool, StoreError> {
        open::wait_for_locks(&self.conn, false)?;
        let result = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        open::wait_for_locks(&self.conn, true)?;
        match result.map_err(StoreError::from) {
            Ok(busy) => Ok(busy == 0),
            Err(e) if e.is_busy() => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn totals(&self) -> Result<Totals, StoreError> {
        let count = |sql: &str| -> Result<u64, StoreError> {
            Ok(self.conn.query_row(sql, [], |row| row.get::<_, i64>(0))? as u64)
        };
        // A daemon creating the database has made the file but not yet committed its
        // schema: nothing is ingested yet, which is not an error.
        if self.schema_version()? == 0 && count("SELECT count(*) FROM sqlite_schema")? == 0 {
            return Ok(Totals::default());
        }
        Ok(Totals {
            batches: count("SELECT count(*) FROM ingest_inbox")?,
            // The view joins every row to its flight; the table has the same rows.
            // A database not yet upgraded (status reads any version) has the table
            // under the view's name.
            events: count(if self.schema_version()? >= 3 {
                "SELECT count(*) FROM duty_event_data"
            } else {
                "SELECT count(*) FROM duty_event"
            })?,
            quarantined: count("SELECT count(*) FROM quarantine")?,
            last_ingest_at: self.conn.query_row(
                "SELECT max(ingested_at) FROM ingest_inbox",
                [],
                |row| row.get(0),
            )?,
        })
    }

    /// How a batch's events are sorted: in runs of what size, spilled where.
    fn spill(&self) -> runs::Runs {
        runs::Runs::new(self.spill_dirs.clone(), self.run_bytes)
    }

    /// Starts the `BEGIN IMMEDIATE` transaction for one batch file, written as
    /// `file_name` at `now`. Returns `None` when the batch is already in the inbox:
    /// a duplicate, with nothing to do.
    pub fn begin(
        &mut self,
        digest: &str,
        file_name: &str,
        now: &str,
    ) -> Result<Option<writer::Batch<'_>>, StoreError> {
        let mut writer = writer::Writer::new(digest, file_name, now);
        writer.sorted_index_builds = self.sorted_index_builds;
        let runs = self.spill();
        writer::begin(&mut self.conn, runs, digest, Some(writer))
    }

    /// Starts a dry run of one batch file: the same staging and outcome fold as
    /// `begin`, in a read transaction with no write path. Outcomes are counted,
    /// nothing is written to the database, and no write lock is taken, so a dry
    /// run works on a read-only connection and never holds the daemon up. `None`
    /// when the batch is already in the inbox.
    pub fn begin_dry_run(&mut self, digest: &str) -> Result<Option<writer::Batch<'_>>, StoreError> {
        let runs = self.spill();
        writer::begin(&mut self.conn, runs, digest, None)
    }
}

/// Whether the inbox holds a batch with this digest.
fn inbox_has(conn: &Connection, digest: &str) -> Result<bool, StoreError> {
    let found = conn
        .prepare_cached("SELECT 1 FROM ingest_inbox WHERE batch_digest = ?1")?
        .query_row([digest], |_| Ok(()))
        .optional()?;
    Ok(found.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_file_whose_schema_is_not_committed_yet_reads_as_empty() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        // As a daemon leaves it between creating the file and committing schema 1.
        let conn = Connection::open(&path).expect("create");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        drop(conn);
        let store = SqliteStore::open_read_only(&path).expect("open read-only");
        assert_eq!(store.totals().expect("totals"), Totals::default());
        // A file of someone else's tables is no spoolite database: an error.
        Connection::open(&path)
            .expect("open")
            .execute_batch("CREATE TABLE other (x)")
            .expect("create other");
        let store = SqliteStore::open_read_only(&path).expect("open read-only");
        assert!(store.totals().is_err());
    }
}
