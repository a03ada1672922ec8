//! The database: a SQLite file (`sqlite`), or a PostgreSQL database (`postgres`)
//! that many writers share, behind one `Store` and one `Batch` whose callers do
//! not tell them apart. What both backends share sits here, above them: which
//! database `--db` names (`db`), the contract's outcome rules as a pure fold
//! (`fold`) that decides what each backend writes, the fault classes (`error`),
//! the change feed's types (`changes`), what `ftl` reads (`crew_hours`), and `copy-db`'s move of a SQLite file
//! into PostgreSQL (`copy`). No backend imports from the other. The only module
//! that talks to a database.

pub(crate) mod backup;
pub(crate) mod changes;
pub mod check;
pub(crate) mod common;
pub(crate) mod copy;
pub mod crew_hours;
pub(crate) mod db;
pub(crate) mod error;
pub(crate) mod findings;
pub mod fold;
pub mod postgres;
pub(crate) mod rows;
pub mod sqlite;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub(crate) use common::Reasons;
pub use common::{FlightQuality, Totals};
pub use db::{Db, MissingFile, PgTarget, require_file};
pub use error::{CommitStatus, FaultClass, InDoubt, StoreError};
pub use fold::{Counts, Finished};
pub(crate) use sqlite::DatabaseFile;
pub use sqlite::SqliteStore;
pub use sqlite::connect::{BUSY_TIMEOUT, stop_waiting_for_locks};

use crate::batch::{Header, Record};
use changes::{Change, PageError};
use postgres::PgStore;
use postgres::changes::PgChangeFeed;
use sqlite::changes::SqliteChangeFeed;

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
    Sqlite(sqlite::batch::Batch<'c>),
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

/// A connection to a spoolite database of the current schema, for reading its
/// change feed: `--db` a SQLite file or a PostgreSQL URI. It only reads.
pub(crate) enum ChangeFeed {
    Sqlite(SqliteChangeFeed),
    Postgres(PgChangeFeed),
}

impl ChangeFeed {
    /// Opens the existing database `db` names for reading (nothing is created,
    /// locked for writing or upgraded), and refuses a schema older than this
    /// spoolite's (`StoreError::OlderSchema`): only the daemon upgrades a database.
    pub fn open(db: &Db) -> Result<ChangeFeed, StoreError> {
        Ok(match db {
            Db::Sqlite(path) => ChangeFeed::Sqlite(SqliteChangeFeed::open(path)?),
            Db::Postgres(target) => ChangeFeed::Postgres(PgChangeFeed::open(target)?),
        })
    }

    /// SQLite: a number that changes whenever another connection commits (see
    /// `SqliteChangeFeed::data_version`). PostgreSQL has no such number for a
    /// session to read: `None`, and a follower reads a page at each look.
    pub fn data_version(&mut self) -> Result<Option<i64>, StoreError> {
        match self {
            ChangeFeed::Sqlite(feed) => feed.data_version().map(Some),
            ChangeFeed::Postgres(_) => Ok(None),
        }
    }

    /// PostgreSQL: waits up to `timeout` for a commit of events (see
    /// `PgChangeFeed::wait_for_commit`); true when one came (or the connection
    /// closed), false when the time ran out. SQLite tells of commits through its
    /// files, not its connection: `None`, at once.
    pub fn wait_for_commit(&mut self, timeout: Duration) -> Result<Option<bool>, StoreError> {
        match self {
            ChangeFeed::Sqlite(_) => Ok(None),
            ChangeFeed::Postgres(feed) => feed.wait_for_commit(timeout).map(Some),
        }
    }

    /// Hands `each` the rows with `change_seq > after`, in `change_seq` order, at
    /// most `rows` of them (and at most `PAGE_ROWS`), read in one statement.
    /// Returns how many were handed over; fewer than asked means the feed is read
    /// to its end, as of this read. An error of `each` stops the page and is
    /// returned as it is.
    pub(crate) fn page<E>(
        &mut self,
        after: i64,
        rows: usize,
        each: impl FnMut(Change) -> Result<(), E>,
    ) -> Result<usize, PageError<E>> {
        match self {
            ChangeFeed::Sqlite(feed) => feed.page(after, rows, each),
            ChangeFeed::Postgres(feed) => feed.page(after, rows, each),
        }
    }
}

impl Store {
    /// Opens (creating if missing) the database `db` names and brings its schema
    /// up to date.
    pub fn open(db: &Db) -> Result<Store, StoreError> {
        Ok(match db {
            Db::Sqlite(path) => Store::Sqlite(SqliteStore::open(path)?),
            Db::Postgres(target) => Store::Postgres(PgStore::connect_writer(target)?),
        })
    }

    /// Opens an existing database without writing to it (for `status`; a dry run
    /// opens through `open_for_dry_run`); a PostgreSQL schema is neither created
    /// nor upgraded.
    pub fn open_read_only(db: &Db) -> Result<Store, StoreError> {
        Ok(match db {
            Db::Sqlite(path) => Store::Sqlite(SqliteStore::open_read_only(path)?),
            Db::Postgres(target) => Store::Postgres(PgStore::connect_reader(target)?),
        })
    }

    /// The database a dry run (`ingest --dry-run`) folds against, opened without
    /// writing to it: it creates, upgrades and locks nothing. A database that does
    /// not exist yet (a missing SQLite file, a PostgreSQL database no spoolite has
    /// written) is compared against an empty one in memory with the current
    /// schema; an older schema is refused, since the dry run's statements need the
    /// current one.
    pub fn open_for_dry_run(db: &Db) -> Result<Store, StoreError> {
        let empty = || Ok(Store::Sqlite(SqliteStore::open_empty_in_memory()?));
        match db {
            Db::Sqlite(path) if !path.exists() => empty(),
            Db::Sqlite(path) => {
                let store = SqliteStore::open_read_only(path)?;
                store.require_current_schema()?;
                Ok(Store::Sqlite(store))
            }
            Db::Postgres(target) => {
                let mut store = PgStore::connect_reader(target)?;
                if store.schema_version()? == 0 {
                    return empty();
                }
                store.require_current_schema()?;
                Ok(Store::Postgres(store))
            }
        }
    }

    /// Whether the database can still be used, for a daemon with nothing to
    /// ingest: PostgreSQL, one round trip on the open connection (a server
    /// stopped since fails it); SQLite, whether the path still leads to the file
    /// opened (one `stat`).
    pub fn probe(&mut self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.database_file().map_or(Ok(()), |f| f.check()),
            Store::Postgres(store) => store.probe(),
        }
    }

    /// SQLite: the database file this store opened for writing, by device and
    /// inode, for the daemon to tell, before it opens the path again, whether it
    /// is still that file. PostgreSQL: `None`.
    pub(crate) fn database_file(&self) -> Option<DatabaseFile> {
        match self {
            Store::Sqlite(store) => store.database_file().cloned(),
            Store::Postgres(_) => None,
        }
    }

    /// Whether a batch with this digest is already committed (a quick look;
    /// `begin` checks again in its transaction).
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
    /// indexes by sorting (`store::sqlite::rebuild`; on unless told). The benchmark turns
    /// it off to measure the write path that keeps them throughout. PostgreSQL
    /// has no such step.
    pub fn set_sorted_index_builds(&mut self, on: bool) {
        if let Store::Sqlite(store) = self {
            store.set_sorted_index_builds(on);
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

    /// The flights' data quality counts at now (one pass over the flights'
    /// off-blocks index).
    pub fn flight_quality(&mut self) -> Result<FlightQuality, StoreError> {
        match self {
            Store::Sqlite(store) => store.flight_quality(),
            Store::Postgres(store) => store.flight_quality(),
        }
    }

    /// Starts the transaction of one batch file, written as `file_name` at `now`.
    /// `None` when the batch is already in the inbox: a duplicate.
    pub(crate) fn begin(
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

    /// What a backend does once a batch with `counts` has committed: PostgreSQL
    /// analyses the tables after a large one (`PgStore::after_commit`); SQLite
    /// nothing.
    pub(crate) fn after_commit(&mut self, counts: &Counts) {
        match self {
            Store::Sqlite(_) => {}
            Store::Postgres(store) => store.after_commit(counts.inserted + counts.updated),
        }
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
