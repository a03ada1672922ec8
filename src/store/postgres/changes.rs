//! Reading the change feed from PostgreSQL: the rows of `duty_event_all` after a
//! `change_seq`, in `change_seq` order, a bounded page per statement, with the same
//! `Change` rows as SQLite's feed.
//!
//! Why a follower that reads `change_seq > last` never skips a row: in its last
//! step, just before its commit, a writer locks the `spoolite_change_seq` row
//! (`FOR UPDATE`), which holds the next number above every committed one, makes
//! each of its rows' numbers at least that (`batch.rs`: they come from a
//! sequence, and a row another writer's commit passed takes a new one), moves it
//! past them and commits. The next writer's lock waits for that transaction to
//! end, and PostgreSQL makes a commit visible before it releases the
//! transaction's locks, so every writer's numbers are larger than every number
//! committed before, and its commit becomes visible only after theirs. What one statement's snapshot sees is therefore
//! always every `change_seq` up to some number: no row can later commit under a
//! number a reader has already passed.
//!
//! A follower waits for commits without polling: the feed's connection listens on
//! `NOTIFY_CHANNEL`, which a trigger of `spoolite_event` notifies when a
//! transaction that wrote events commits (schema 6). It listens before its first
//! read, so a commit after that read is always told.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};

use super::PgStore;
use crate::store::changes::{Change, PAGE_ROWS, PageError};
use crate::store::db::PgTarget;
use crate::store::error::StoreError;

/// The columns of `duty_event_all`, in its order. `change_seq > $1 ORDER BY
/// change_seq` walks the unique index on `spoolite_event.change_seq`.
const PAGE_SQL: &str = "SELECT idempotency_key, flight_id, event_kind, instant_utc, \
     source_revision, payload, retracted, slot, batch_digest, first_seen_at, \
     updated_at, change_seq \
     FROM duty_event_all WHERE change_seq > $1 ORDER BY change_seq LIMIT $2";

/// The channel `schema/postgres/0006_change_notify.sql` notifies.
const NOTIFY_CHANNEL: &str = "spoolite_changes";

/// A connection to a spoolite PostgreSQL database of the current schema, for
/// reading its change feed. It only reads: a role with SELECT suffices.
pub(crate) struct PgChangeFeed {
    client: Client,
    page: Statement,
}

impl PgChangeFeed {
    /// Connects to the database `db` names and refuses a schema older (only the
    /// daemon upgrades a database) or newer than this spoolite's.
    pub fn open(target: &PgTarget) -> Result<PgChangeFeed, StoreError> {
        let mut store = PgStore::connect_reader(target)?;
        store.require_current_schema()?;
        let mut client = store.client;
        let page = client.prepare(PAGE_SQL)?;
        client.batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))?;
        Ok(PgChangeFeed { client, page })
    }

    /// Waits up to `timeout` for a commit of events after this feed's last read:
    /// true when one was told (every notification received so far is taken, one
    /// read covers them all), or when the connection has closed, so that the
    /// caller's next read meets the fault; false when the time ran out.
    pub(crate) fn wait_for_commit(&mut self, timeout: Duration) -> Result<bool, StoreError> {
        let told = {
            let mut notifications = self.client.notifications();
            let mut told = notifications.timeout_iter(timeout).next()?.is_some();
            while notifications.iter().next()?.is_some() {
                told = true;
            }
            told
        };
        Ok(told || self.client.is_closed())
    }

    /// Hands `each` the rows with `change_seq > after`, in `change_seq` order, at
    /// most `rows` of them (and at most `PAGE_ROWS`), read in one statement (one
    /// snapshot) and handed over as they arrive. Returns how many were handed
    /// over; fewer than asked means the feed is read to its end, as of this read.
    /// An error of `each` stops the page and is returned as it is.
    pub(crate) fn page<E>(
        &mut self,
        after: i64,
        rows: usize,
        mut each: impl FnMut(Change) -> Result<(), E>,
    ) -> Result<usize, PageError<E>> {
        let rows = rows.min(PAGE_ROWS);
        let limit = i64::try_from(rows).unwrap_or(i64::MAX);
        let params: [&(dyn postgres::types::ToSql + Sync); 2] = [&after, &limit];
        let mut found = self
            .client
            .query_raw(&self.page, params)
            .map_err(|e| PageError::Store(e.into()))?;
        let mut handed = 0;
        while let Some(row) = found.next().map_err(|e| PageError::Store(e.into()))? {
            let change = read_change(&row).map_err(|e| PageError::Store(e.into()))?;
            debug_assert!(change.change_seq > after);
            each(change).map_err(PageError::Sink)?;
            handed += 1;
        }
        Ok(handed)
    }
}

fn read_change(row: &postgres::Row) -> Result<Change, postgres::Error> {
    Ok(Change {
        idempotency_key: row.try_get(0)?,
        flight_id: row.try_get(1)?,
        event_kind: row.try_get(2)?,
        instant_utc: row.try_get(3)?,
        source_revision: row.try_get(4)?,
        payload: row.try_get(5)?,
        retracted: row.try_get(6)?,
        slot: row.try_get(7)?,
        batch_digest: row.try_get(8)?,
        first_seen_at: row.try_get(9)?,
        updated_at: row.try_get(10)?,
        change_seq: row.try_get(11)?,
    })
}
