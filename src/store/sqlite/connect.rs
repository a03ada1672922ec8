//! Opening the SQLite database: the pragmas, each with its reason, the busy handler,
//! and the schema migrations in `schema/`. Exported so that every connection to a
//! spoolite database (the benchmark's included) is opened one way.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::store::error::StoreError;

/// The migrations, in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../schema/0001_initial.sql"),
    include_str!("../../../schema/0002_analyst_views.sql"),
    include_str!("../../../schema/0003_binary_key.sql"),
    include_str!("../../../schema/0004_times_sort.sql"),
    include_str!("../../../schema/0005_retractions_change_feed.sql"),
    include_str!("../../../schema/0006_flight_id_case.sql"),
    include_str!("../../../schema/0007_crew.sql"),
    include_str!("../../../schema/0008_analyst_speed.sql"),
    include_str!("../../../schema/0009_crew_flight_id.sql"),
    include_str!("../../../schema/0010_block_hours.sql"),
    include_str!("../../../schema/0011_crew_model.sql"),
    include_str!("../../../schema/0012_slots.sql"),
    include_str!("../../../schema/0013_slot_in_flight_index.sql"),
];

/// The schema version after whose SQL the crew rows of the events already stored
/// are built by the code each batch runs (`store::sqlite::crew`), in that
/// migration's transaction, when the crew tables are then empty. Schema 11 creates
/// the crew tables as that code writes them (with functions, duty types, flights
/// without block time and flight duty periods) and empties them, so the rows are
/// built at 11; earlier steps that create or copy crew rows (7, 9) leave what 11
/// replaces. The decision is the database's state, not the version a process first
/// saw (an upgrade from before 11 and a new database alike, all in the one
/// transaction of `migrate`). A later migration that changes what that code reads
/// or writes moves this to itself.
const CREW_VERSION: i64 = 11;

/// The schema version this spoolite writes: every migration applied.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a statement waits on another connection's lock before SQLITE_BUSY.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the busy handler sleeps between two looks at a lock.
const BUSY_SLEEP: Duration = Duration::from_millis(10);

/// Set once the process is stopping (SIGTERM, SIGINT): a wait on another
/// connection's lock gives up at once instead of after `BUSY_TIMEOUT`, so that a
/// stop is honoured within a second even while an analyst holds a lock.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Makes every wait on a lock give up (see `STOPPING`).
pub fn stop_waiting_for_locks() {
    STOPPING.store(true, Ordering::SeqCst);
}

/// Opens (creating if missing, with its folder) the database at `path` for writing,
/// with every pragma spoolite relies on, and brings its schema up to date.
pub fn read_write(path: &Path) -> Result<Connection, StoreError> {
    let open_error = |source| StoreError::Open {
        path: path.to_owned(),
        source,
    };
    if path.is_dir() {
        return Err(StoreError::NotAFile {
            path: path.to_owned(),
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| StoreError::CreateDir {
            path: parent.to_owned(),
            source: e,
        })?;
    }
    let mut conn = Connection::open(path).map_err(open_error)?;
    configure(&conn).map_err(open_error)?;
    persist_wal(&conn).map_err(open_error)?;
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Opens an existing database without writing to it (for `status` and
/// `ingest --dry-run`). An older schema is accepted: `status` reads what every
/// version has; a newer one is refused.
pub fn read_only(path: &Path) -> Result<Connection, StoreError> {
    let open_error = |source| StoreError::Open {
        path: path.to_owned(),
        source,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(open_error)?;
    wait_for_locks(&conn, true).map_err(open_error)?;
    configure_temp(&conn).map_err(open_error)?;
    let version = user_version(&conn).map_err(open_error)?;
    refuse_newer(path, version)?;
    Ok(conn)
}

/// An empty database in memory with the current schema: what a dry run compares
/// against when the database file does not exist yet.
pub fn empty_in_memory() -> Result<Connection, StoreError> {
    let path = Path::new(":memory:");
    let mut conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Applies the migrations the database at `path` lacks, all in one transaction,
/// `user_version` included: a reader sees the schema before or after, never half
/// made (PostgreSQL's migrations are one transaction too).
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    // A look without the write lock first: an analyst's lock must not keep a
    // daemon from starting on an up-to-date database.
    if user_version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = user_version(&tx)?;
    refuse_newer(path, found)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    // A new database gets one log line; an existing one a line before each step,
    // since a step may copy every row, and one once the whole upgrade committed.
    let fresh = found == 0;
    for next in found + 1..=SCHEMA_VERSION {
        if !fresh {
            log::info!(
                "database {}: upgrading schema to version {next}; on a large database \
                 this takes minutes",
                path.display()
            );
        }
        tx.execute_batch(MIGRATIONS[next as usize - 1])?;
        if next == CREW_VERSION && super::crew::empty(&tx)? {
            super::crew::recompute(&tx, super::crew::Scope::All, true, true)?;
            super::crew::periods(&tx, super::crew::Scope::All)?;
        }
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    if fresh && path != Path::new(":memory:") {
        log::info!(
            "database {}: created, schema version {SCHEMA_VERSION}",
            path.display()
        );
    } else if !fresh {
        log::info!(
            "database {}: schema upgraded from version {found} to {SCHEMA_VERSION}",
            path.display()
        );
    }
    Ok(())
}

/// Waits, at most `BUSY_TIMEOUT`, for the database a reader opened to have this
/// spoolite's schema: a daemon may be creating or upgrading it (one transaction,
/// which the reader sees whole once committed); then refuses an older one
/// (`StoreError::OlderSchema`): only the daemon upgrades a database.
pub(in crate::store) fn wait_for_current_schema(
    conn: &Connection,
    path: &Path,
) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    loop {
        let found = user_version(conn)?;
        if found >= SCHEMA_VERSION {
            return refuse_newer(path, found);
        }
        if started.elapsed() >= BUSY_TIMEOUT || STOPPING.load(Ordering::Relaxed) {
            return Err(StoreError::OlderSchema {
                path: path.to_owned(),
                found,
                known: SCHEMA_VERSION,
            });
        }
        std::thread::sleep(BUSY_SLEEP * 5);
    }
}

/// The number of migrations applied to the database (`PRAGMA user_version`).
pub(in crate::store) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
}

/// Refuses a database that a newer spoolite has migrated further than this one can.
fn refuse_newer(path: &Path, found: i64) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_owned(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Sets the pragmas spoolite relies on, each for a reason.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // Larger pages hold more keys per b-tree node: fewer pages touched per insert.
    // Takes effect only when the database is created.
    conn.pragma_update(None, "page_size", 16384)?;
    // WAL: analysts read while the daemon writes, and a crash rolls back cleanly.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a commit is on disk before the file leaves incoming/.
    conn.pragma_update(None, "synchronous", "FULL")?;
    // An analyst's lock delays a batch instead of failing it at once; the daemon
    // retries with back-off after this.
    wait_for_locks(conn, true)?;
    // quarantine's reference to its inbox row is checked at commit.
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // 32 MiB of page cache (negative means KiB): enough for the b-tree interior
    // pages of tens of millions of events, and a bounded share of the memory budget.
    conn.pragma_update(None, "cache_size", -32768)?;
    configure_temp(conn)?;
    // After a checkpoint, cut the WAL back to 64 MiB so a large batch does not leave
    // a large file behind.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    Ok(())
}

/// SQLite's own temporary data (a migration's sorts for its index builds) spills
/// to a file, not memory, with a bounded cache, so memory stays flat. A batch's
/// events are sorted by the store itself (`runs`), not in a temporary table.
fn configure_temp(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "temp_store", "FILE")?;
    conn.pragma_update(Some("temp"), "cache_size", -16384)?;
    Ok(())
}

/// Keeps the `-wal` and `-shm` files when the daemon closes the database, so that
/// analysts on a read-only account (who cannot create them in a folder they may not
/// write) can still open it while the daemon is stopped or restarting.
fn persist_wal(conn: &Connection) -> rusqlite::Result<()> {
    let mut on: std::ffi::c_int = 1;
    // SAFETY: the handle is open for the life of `conn`; PERSIST_WAL reads and
    // writes one int through the pointer, which lives across the call.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut on).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            None,
        ));
    }
    Ok(())
}

/// SQLite's busy handler: waits up to `BUSY_TIMEOUT` for a lock, unless stopping.
fn wait_for_lock(attempts: i32) -> bool {
    let waited = BUSY_SLEEP.saturating_mul(u32::try_from(attempts).unwrap_or(u32::MAX));
    if STOPPING.load(Ordering::Relaxed) || waited >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(BUSY_SLEEP);
    true
}

/// `wait_for_lock` as SQLite calls it.
unsafe extern "C" fn busy_callback(
    _: *mut std::ffi::c_void,
    attempts: std::ffi::c_int,
) -> std::ffi::c_int {
    std::ffi::c_int::from(wait_for_lock(attempts))
}

/// Waits on other connections' locks (`wait`) or fails at once when one is held.
pub(super) fn wait_for_locks(conn: &Connection, wait: bool) -> rusqlite::Result<()> {
    if !wait {
        return conn.busy_timeout(Duration::ZERO);
    }
    // SAFETY: the handle is open for the life of `conn`; the callback is a plain
    // function that touches no data behind the (null) pointer. rusqlite's own
    // `busy_handler` needs `&mut Connection`, which the callers here do not hold.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_busy_handler(
            conn.handle(),
            Some(busy_callback),
            std::ptr::null_mut(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            None,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waits_for_a_schema_being_made_and_then_sees_it_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        let writer = Connection::open(&path).expect("open");
        configure(&writer).expect("pragmas");
        let reader = read_only(&path).expect("open read-only");
        assert_eq!(user_version(&reader).expect("version"), 0);
        let made_at = path.clone();
        let making = std::thread::spawn(move || {
            let mut writer = writer;
            std::thread::sleep(Duration::from_millis(300));
            migrate(&mut writer, &made_at)
        });
        wait_for_current_schema(&reader, &path).expect("the schema, whole");
        assert_eq!(user_version(&reader).expect("version"), SCHEMA_VERSION);
        making.join().expect("join").expect("migrate");
    }
}
