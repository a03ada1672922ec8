//! SQLite's change feed: a page of `duty_event_all` after a `change_seq` per
//! query, on a read-only connection, with the cheap look (`PRAGMA data_version`)
//! that tells a follower whether anything was committed since it last read.

use std::path::Path;

use rusqlite::Connection;

use super::connect;
use crate::store::changes::{Change, PAGE_ROWS, PageError};
use crate::store::error::StoreError;

/// A read-only connection to a spoolite SQLite database of the current schema,
/// for reading its change feed.
pub(crate) struct SqliteChangeFeed {
    conn: Connection,
}

/// The columns of `duty_event_all`, in its order. `change_seq > ?1 ORDER BY
/// change_seq` walks the view's unique `change_seq` index.
const PAGE_SQL: &str = "SELECT idempotency_key, flight_id, event_kind, instant_utc, \
     source_revision, payload, retracted, slot, batch_digest, first_seen_at, updated_at, \
     change_seq \
     FROM duty_event_all WHERE change_seq > ?1 ORDER BY change_seq LIMIT ?2";

impl SqliteChangeFeed {
    /// Opens the existing database at `path` read-only (nothing is created, locked
    /// for writing or upgraded), and refuses a schema older than this spoolite's
    /// (`StoreError::OlderSchema`): only the daemon upgrades a database.
    pub fn open(path: &Path) -> Result<SqliteChangeFeed, StoreError> {
        let conn = connect::read_only(path)?;
        connect::wait_for_current_schema(&conn, path)?;
        Ok(SqliteChangeFeed { conn })
    }

    /// A number that changes whenever another connection commits to the database
    /// (`PRAGMA data_version`): a follower reads a page only when it moved.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("PRAGMA data_version", [], |row| row.get(0))?)
    }

    /// Hands `each` the rows with `change_seq > after`, in `change_seq` order, at
    /// most `rows` of them (and at most `PAGE_ROWS`), read in one statement.
    /// Returns how many were handed over; fewer than asked means the feed is read
    /// to its end, as of this read. An error of `each` stops the page and is
    /// returned as it is.
    pub(crate) fn page<E>(
        &self,
        after: i64,
        rows: usize,
        mut each: impl FnMut(Change) -> Result<(), E>,
    ) -> Result<usize, PageError<E>> {
        let rows = rows.min(PAGE_ROWS);
        let mut statement = self
            .conn
            .prepare_cached(PAGE_SQL)
            .map_err(|e| PageError::Store(e.into()))?;
        let limit = i64::try_from(rows).unwrap_or(i64::MAX);
        let mut cursor = statement
            .query(rusqlite::params![after, limit])
            .map_err(|e| PageError::Store(e.into()))?;
        let mut handed = 0;
        while let Some(row) = cursor.next().map_err(|e| PageError::Store(e.into()))? {
            let change = read_change(row).map_err(|e| PageError::Store(e.into()))?;
            debug_assert!(change.change_seq > after);
            each(change).map_err(PageError::Sink)?;
            handed += 1;
        }
        Ok(handed)
    }
}

fn read_change(row: &rusqlite::Row<'_>) -> rusqlite::Result<Change> {
    Ok(Change {
        idempotency_key: row.get(0)?,
        flight_id: row.get(1)?,
        event_kind: row.get(2)?,
        instant_utc: row.get(3)?,
        source_revision: row.get(4)?,
        payload: row.get(5)?,
        retracted: row.get::<_, i64>(6)? != 0,
        slot: row.get(7)?,
        batch_digest: row.get(8)?,
        first_seen_at: row.get(9)?,
        updated_at: row.get(10)?,
        change_seq: row.get(11)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore as Store;

    #[test]
    fn a_page_walks_the_change_seq_index() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        drop(Store::open(&path).expect("create"));
        let feed = SqliteChangeFeed::open(&path).expect("open feed");
        let plan: Vec<String> = feed
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {PAGE_SQL}"))
            .expect("explain")
            .query_map(rusqlite::params![0, 10], |row| row.get::<_, String>(3))
            .expect("plan")
            .collect::<Result<_, _>>()
            .expect("plan rows");
        let plan = plan.join("\n");
        assert!(
            plan.contains("spoolite_event_change_seq") && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
        let none = feed.page(0, 10, |_| Ok::<(), ()>(())).expect("page");
        assert_eq!(none, 0);
    }

    #[test]
    fn an_older_schema_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        let conn = Connection::open(&path).expect("create");
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (x); PRAGMA user_version=4;")
            .expect("old schema");
        drop(conn);
        match SqliteChangeFeed::open(&path) {
            Err(StoreError::OlderSchema { found: 4, .. }) => {}
            Err(other) => panic!("expected an older schema, got {other}"),
            Ok(_) => panic!("expected an older schema, got a feed"),
        }
    }
}
