//! The SQLite backend: one database file that one daemon writes and analysts
//! read. `connect` opens it (pragmas, the busy handler, the migrations in
//! `schema/`); `batch` is one file's transaction, its valid events sorted in
//! bounded runs (`runs`), folded by `store::fold` and written, its flights kept
//! by `flights`, its indexes built again by sorting when it is large
//! (`rebuild`); `changes` reads the change feed.

pub(crate) mod batch;
pub(crate) mod changes;
pub(crate) mod check;
pub mod connect;
mod crew;
pub mod crew_hours;
mod flights;
mod rebuild;
mod runs;
mod slotted;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension};

use crate::store::common::Totals;
use crate::store::error::StoreError;

/// A SQLite database file (or, for a dry run, an empty one in memory).
pub struct SqliteStore {
    conn: Connection,
    /// The file, as errors name it (`:memory:` for a dry run's empty database).
    path: PathBuf,
    /// Where a large batch's sorted runs spill, in order of preference: the
    /// database's folder (the same disk, already writable by the daemon), then,
    /// for a dry run on a folder the reader may not write, the system's.
    spill_dirs: Vec<PathBuf>,
    /// The size of a sorted run of a batch's events (`runs::RUN_BYTES` but in
    /// tests, which make runs small to spill a few events).
    run_bytes: usize,
    /// See `Store::set_sorted_index_builds`.
    sorted_index_builds: bool,
    /// The file opened for writing, checked before each batch and its commit.
    file: Option<DatabaseFile>,
}

/// The database file a writer opened, by device and inode: a file deleted, renamed
/// or replaced under a running daemon is noticed before the next commit, which
/// would otherwise go into a file that no longer lies at the path (and vanish at
/// the next start).
#[derive(Debug, Clone)]
pub(crate) struct DatabaseFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl DatabaseFile {
    /// The file now at `path`, just opened.
    fn opened(path: &Path) -> Result<DatabaseFile, StoreError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|_| StoreError::Gone {
            path: path.to_owned(),
        })?;
        Ok(DatabaseFile {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// `Err` when the path no longer leads to the opened file. A look that fails
    /// for another reason (a folder not searchable any more) is left to SQLite's
    /// own statements to report.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == (self.dev, self.ino) => Ok(()),
            Ok(_) => Err(StoreError::Replaced {
                path: self.path.clone(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::Gone {
                path: self.path.clone(),
            }),
            Err(_) => Ok(()),
        }
    }
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
        let conn = connect::read_write(path)?;
        Ok(SqliteStore {
            conn,
            path: path.to_owned(),
            spill_dirs: vec![folder_of(path)],
            run_bytes: runs::RUN_BYTES,
            sorted_index_builds: true,
            file: Some(DatabaseFile::opened(path)?),
        })
    }

    /// Opens an existing database without writing to it (for `status` and
    /// `ingest --dry-run`). An older schema is accepted: `status` reads what every
    /// version has; see `require_current_schema`.
    pub fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            conn: connect::read_only(path)?,
            path: path.to_owned(),
            spill_dirs: vec![folder_of(path), std::env::temp_dir()],
            run_bytes: runs::RUN_BYTES,
            sorted_index_builds: true,
            file: None,
        })
    }

    /// An empty database in memory with the current schema: what a dry run
    /// compares against when the database file does not exist yet.
    pub fn open_empty_in_memory() -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            conn: connect::empty_in_memory()?,
            path: PathBuf::from(":memory:"),
            spill_dirs: vec![std::env::temp_dir()],
            run_bytes: runs::RUN_BYTES,
            sorted_index_builds: true,
            file: None,
        })
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(connect::user_version(&self.conn)?)
    }

    /// Refuses a database whose schema is older than this spoolite's: a dry run
    /// opened read-only cannot upgrade it, and its statements need the current one.
    pub fn require_current_schema(&self) -> Result<(), StoreError> {
        connect::wait_for_current_schema(&self.conn, &self.path)
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

    /// See `Store::set_sorted_index_builds`.
    pub(crate) fn set_sorted_index_builds(&mut self, on: bool) {
        self.sorted_index_builds = on;
    }

    /// The file opened for writing (`None` read-only or in memory).
    pub(crate) fn database_file(&self) -> Option<&DatabaseFile> {
        self.file.as_ref()
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
        connect::wait_for_locks(&self.conn, false)?;
        let result = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        connect::wait_for_locks(&self.conn, true)?;
        match result.map_err(StoreError::from) {
            Ok(busy) => Ok(busy == 0),
            Err(e) if e.is_busy() => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn flight_quality(&self) -> Result<crate::store::common::FlightQuality, StoreError> {
        let (open, negative): (i64, i64) = self.conn.query_row(
            "SELECT count(*) FILTER (WHERE on_blocks_utc IS NULL
                         AND rtrim(off_blocks_utc, 'Z') < strftime('%Y-%m-%dT%H:%M:%S', 'now', '-1 day')),
                    count(*) FILTER (WHERE block_minutes < 0)
             FROM spoolite_flight WHERE off_blocks_utc IS NOT NULL",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok(crate::store::common::FlightQuality {
            flights_open: open.max(0) as u64,
            flights_negative_block: negative.max(0) as u64,
        })
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
            // Through the views, which read one table (schema 8 on: a count of
            // duty_event counts the entries of the live rows' index, one of
            // duty_event_all the table's). A database not yet upgraded (status
            // reads any version) has no tombstones before schema 5; in schemas 3
            // and 4 the table stands under the name duty_event_data.
            events: count(match self.schema_version()? {
                3 | 4 => "SELECT count(*) FROM duty_event_data",
                _ => "SELECT count(*) FROM duty_event",
            })?,
            retracted_events: match self.schema_version()? {
                5.. => {
                    count("SELECT count(*) FROM duty_event_all")?
                        - count("SELECT count(*) FROM duty_event")?
                }
                _ => 0,
            },
            quarantined: count("SELECT count(*) FROM quarantine")?,
            last_ingest_at: self.conn.query_row(
                "SELECT max(ingested_at) FROM ingest_inbox",
                [],
                |row| row.get(0),
            )?,
            // The file's own size, which status reads with a stat.
            database_bytes: None,
        })
    }

    /// How a batch's events are sorted: in runs of what size, spilled where.
    fn spill(&self) -> runs::Runs {
        runs::Runs::new(self.spill_dirs.clone(), self.run_bytes)
    }

    /// Starts the `BEGIN IMMEDIATE` transaction for one batch file, written as
    /// `file_name` at `now`. Returns `None` when the batch is already in the inbox:
    /// a duplicate, with nothing to do.
    pub(crate) fn begin(
        &mut self,
        digest: &str,
        file_name: &str,
        now: &str,
    ) -> Result<Option<batch::Batch<'_>>, StoreError> {
        if let Some(file) = &self.file {
            file.check()?;
        }
        let mut writer = batch::Writer::new(digest, file_name, now, self.file.clone());
        writer.sorted_index_builds = self.sorted_index_builds;
        let runs = self.spill();
        batch::begin(&mut self.conn, runs, digest, Box::new(writer))
    }

    /// Starts a dry run of one batch file: the same staging and outcome fold as
    /// `begin`, in a read transaction with no write path. Outcomes are counted,
    /// nothing is written to the database, and no write lock is taken, so a dry
    /// run works on a read-only connection and never holds the daemon up. `None`
    /// when the batch is already in the inbox.
    pub fn begin_dry_run(&mut self, digest: &str) -> Result<Option<batch::Batch<'_>>, StoreError> {
        let runs = self.spill();
        batch::begin(&mut self.conn, runs, digest, Box::new(batch::DryRun))
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

/// The plan (`EXPLAIN QUERY PLAN`'s steps) of `sql` on an empty database of the
/// current schema, once `setup` has run on it: for the tests that pin a plan.
#[cfg(test)]
pub(super) fn query_plan(setup: &str, sql: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("spoolite.db");
    drop(SqliteStore::open(&path).expect("create"));
    let conn = Connection::open(&path).expect("open");
    conn.execute_batch(setup).expect("setup");
    let mut explain = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("explain");
    explain
        .query_map([], |row| row.get::<_, String>(3))
        .expect("plan")
        .collect::<Result<_, _>>()
        .expect("plan rows")
}

impl crate::store::rows::Columns for rusqlite::Row<'_> {
    fn column<T: crate::store::rows::ColumnValue>(&self, at: usize) -> Result<T, StoreError> {
        Ok(self.get(at)?)
    }
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
