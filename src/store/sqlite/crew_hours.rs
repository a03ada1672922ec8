//! SQLite's side of `ftl`: the rows of `crew_flight` and `crew_duty` that can
//! overlap a span, on a read-only connection, in one read transaction.

use std::path::Path;

use rusqlite::Connection;

use super::connect;
use crate::store::StoreError;
use crate::store::crew_hours::{CrewRow, CrewSpan};

/// Operating crew's flights whose block time may overlap the span (`?1` the
/// span's start, `?2` its end).
const FLIGHTS_SQL: &str = "SELECT crew_id, role, off_blocks_utc, on_blocks_utc FROM crew_flight \
     WHERE role = 'operating' AND rtrim(off_blocks_utc, 'Z') < ?2 \
     AND rtrim(on_blocks_utc, 'Z') > ?1";

/// Duties that may overlap the span: begun before its end, and not ended before
/// its start (an open one, whenever it began).
const DUTIES_SQL: &str = "SELECT crew_id, duty_start_utc, duty_end_utc FROM crew_duty \
     WHERE rtrim(duty_start_utc, 'Z') < ?2 \
     AND (duty_end_utc IS NULL OR rtrim(duty_end_utc, 'Z') > ?1)";

/// Only the crew named in `?3`, a JSON array of ids.
const NAMED: &str = " AND crew_id IN (SELECT value FROM json_each(?3))";

/// A read-only connection to a spoolite SQLite database, for `ftl`.
pub struct SqliteCrewHours {
    conn: Connection,
}

impl SqliteCrewHours {
    pub fn open(path: &Path) -> Result<SqliteCrewHours, StoreError> {
        Ok(SqliteCrewHours {
            conn: connect::read_only(path)?,
        })
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(connect::user_version(&self.conn)?)
    }

    pub fn has_views(&self) -> Result<bool, StoreError> {
        let found: i64 = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'view' \
             AND name IN ('crew_flight', 'crew_duty')",
            [],
            |row| row.get(0),
        )?;
        Ok(found == 2)
    }

    pub fn read(
        &mut self,
        span: &CrewSpan,
        crew: &[String],
        mut each: impl FnMut(CrewRow<'_>),
    ) -> Result<(), StoreError> {
        let named = serde_json::to_string(crew).expect("a list of strings serialises");
        let sql = |base: &str| match crew.is_empty() {
            true => base.to_owned(),
            false => format!("{base}{NAMED}"),
        };
        // One read transaction: both views are read from the same snapshot.
        let tx = self.conn.unchecked_transaction()?;
        {
            let mut flights = tx.prepare(&sql(FLIGHTS_SQL))?;
            let mut rows = match crew.is_empty() {
                true => flights.query((&span.after, &span.before))?,
                false => flights.query((&span.after, &span.before, &named))?,
            };
            while let Some(row) = rows.next()? {
                each(CrewRow::Flight {
                    crew_id: text(row, 0)?,
                    role: text(row, 1)?,
                    off_blocks_utc: text(row, 2)?,
                    on_blocks_utc: text(row, 3)?,
                });
            }
            let mut duties = tx.prepare(&sql(DUTIES_SQL))?;
            let mut rows = match crew.is_empty() {
                true => duties.query((&span.after, &span.before))?,
                false => duties.query((&span.after, &span.before, &named))?,
            };
            while let Some(row) = rows.next()? {
                each(CrewRow::Duty {
                    crew_id: text(row, 0)?,
                    duty_start_utc: text(row, 1)?,
                    duty_end_utc: text_or_null(row, 2)?,
                });
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// Column `at` of `row` as text, borrowed.
fn text<'r>(row: &'r rusqlite::Row<'_>, at: usize) -> rusqlite::Result<&'r str> {
    row.get_ref(at)?.as_str().map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(at, rusqlite::types::Type::Text, Box::new(error))
    })
}

/// Column `at` of `row` as text, or None for NULL.
fn text_or_null<'r>(row: &'r rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Option<&'r str>> {
    row.get_ref(at)?.as_str_or_null().map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(at, rusqlite::types::Type::Text, Box::new(error))
    })
}
