//! Sorted index builds for a batch that is large against the table it goes
//! into: its rows arrive in key order, so every secondary index of
//! `spoolite_event` takes them as random inserts; dropping those indexes for the
//! apply and building them again before the commit (one sort each) costs less
//! once the batch is large against the table (`worth_it`; BENCHMARKS.md,
//! "Sorted index builds", has the crossover). It all happens
//! inside the batch's transaction: a reader sees the indexes before or after it,
//! a crash rolls the drop back with the rest.
//!
//! The definitions rebuilt are read from the schema itself (`sqlite_master`), so
//! a migration that changes an index changes what is built again.

use rusqlite::Connection;

use crate::store::error::StoreError;

/// The index the upserts' conflict target is: never dropped.
const KEY_INDEX: &str = "spoolite_event_key";

/// The secondary indexes of `spoolite_event`, dropped for one batch's apply.
#[must_use = "the dropped indexes must be built again before the commit"]
pub(super) struct Dropped {
    definitions: Vec<String>,
}

/// Whether a batch of `events` valid events drops the secondary indexes: when it
/// holds at least twice as many events as `spoolite_event` holds rows. Then,
/// even if every stored row is among its keys (`updated`, `unchanged`, which
/// write little or nothing), at least as many rows are inserted as were stored:
/// the table at least doubles. Measured on 1M stored rows: 1M new events cost
/// 30 % less CPU with the rebuild, 300k events 50 % more; on 4M rows, 1M events
/// 38 % more.
pub(super) fn worth_it(tx: &Connection, events: u64) -> Result<bool, StoreError> {
    // The largest rowid, not a count: as cheap on 10M rows as on none, never
    // below the count (rows are never deleted), so it errs towards keeping.
    let rows: i64 = tx.query_row(
        "SELECT coalesce(max(rowid), 0) FROM spoolite_event",
        [],
        |row| row.get(0),
    )?;
    Ok(events > 0 && events >= 2 * rows.max(0) as u64)
}

/// Drops every index of `spoolite_event` but the key's, remembering each one's
/// definition.
pub(super) fn drop_secondary(tx: &Connection) -> Result<Dropped, StoreError> {
    drop_indexes_of(tx, "spoolite_event")
}

/// Drops every index of `table` declared with `CREATE INDEX` (not a primary key,
/// nor the key's index), remembering each one's definition: the crew tables'
/// indexes, for a batch whose crew rows are many against them (`store::sqlite::crew`).
pub(super) fn drop_indexes_of(tx: &Connection, table: &str) -> Result<Dropped, StoreError> {
    let mut indexes = tx.prepare(
        "SELECT name, sql FROM sqlite_master
         WHERE type = 'index' AND tbl_name = ?2 AND sql IS NOT NULL
           AND name <> ?1
         ORDER BY name",
    )?;
    let found = indexes
        .query_map([KEY_INDEX, table], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut definitions = Vec::with_capacity(found.len());
    for (name, sql) in found {
        tx.execute_batch(&format!("DROP INDEX \"{}\"", name.replace('"', "\"\"")))?;
        definitions.push(sql);
    }
    Ok(Dropped { definitions })
}

impl Dropped {
    /// Builds the dropped indexes again, each by one sort of the table.
    pub(super) fn rebuild(self, tx: &Connection) -> Result<(), StoreError> {
        for sql in &self.definitions {
            tx.execute_batch(sql)?;
        }
        Ok(())
    }
}
