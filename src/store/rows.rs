//! Rows of either backend, read by column: the `Columns` trait each backend
//! implements for its own row type, and the types of `common` made from a row in
//! one place.

use super::common::{EventRef, ExplainRow};
use super::error::StoreError;

/// A value of a column that either backend's row can give (text, a number, a
/// flag, or one of them or NULL).
pub(crate) trait ColumnValue:
    rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a>
{
}

impl<T: rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a>> ColumnValue for T {}

/// A row of a query on either backend, read by column (from 0): each type both
/// backends read from a row (a check's sides, `ftl explain`'s rows) is made from
/// its columns in one place. Each backend implements it for its own row.
pub(crate) trait Columns {
    fn column<T: ColumnValue>(&self, at: usize) -> Result<T, StoreError>;
}

impl ExplainRow {
    /// The row of an `EXPLAIN_*_SQL` query: id, role, function, duty type, start,
    /// end.
    pub(crate) fn read(row: &impl Columns) -> Result<ExplainRow, StoreError> {
        Ok(ExplainRow {
            id: row.column(0)?,
            role: row.column(1)?,
            function: row.column(2)?,
            duty_type: row.column(3)?,
            start: row.column(4)?,
            end: row.column(5)?,
        })
    }
}

impl EventRef {
    /// The row of an `EVENT_SQL` query: key, kind, instant, revision, batch
    /// digest, file name.
    pub(crate) fn read(row: &impl Columns) -> Result<EventRef, StoreError> {
        Ok(EventRef {
            idempotency_key: row.column(0)?,
            event_kind: row.column(1)?,
            instant_utc: row.column(2)?,
            source_revision: row.column(3)?,
            batch_digest: row.column(4)?,
            file_name: row.column(5)?,
        })
    }
}
