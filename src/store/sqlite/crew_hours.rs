//! SQLite's side of `ftl`: the rows of `crew_flight`, `crew_duty` and `crew_fdp`
//! that can overlap a span, on read-only connections, as one snapshot.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::connect;
use crate::store::common::{CrewRow, CrewSpan, EventRef, ExplainRow, ExplainRows};
use crate::store::error::StoreError;

/// Operating crew's flights whose block time may overlap the span (`?1` the
/// span's start, `?2` its end), and those without block time begun in it, read
/// from the crew flight rows behind `crew_flight` (which shows the first kind) in
/// one pass. The bounds are a second wider than the span and written without
/// their `Z`, so a plain comparison of the canonical text (which orders instants
/// by time but for fractions within one second) keeps every row that counts;
/// `ftl` cuts each row at the window's start and at T. The unary `+` keeps the
/// planner off the time index: the span is most of the table, which a scan reads
/// in a fraction of the time a look-up per row takes (BENCHMARKS.md, "Crew rows
/// as they are read, `ftl` side by side"); the crew index still serves `--crew`.
const FLIGHTS_SQL: &str = "SELECT crew_id, role, function, off_blocks_utc, on_blocks_utc, \
     block_minutes IS NOT NULL FROM spoolite_crew_flight \
     WHERE role = 'operating' AND +off_blocks_utc < ?2 \
     AND (+on_blocks_utc > ?1 OR (block_minutes IS NULL AND +off_blocks_utc > ?1))";

/// Duties that may overlap the span: begun before its end, and not ended before
/// its start (an open one, whenever it began).
const DUTIES_SQL: &str = "SELECT crew_id, function, duty_type, duty_start_utc, duty_end_utc \
     FROM crew_duty WHERE +duty_start_utc < ?2 AND (duty_end_utc IS NULL OR +duty_end_utc > ?1)";

/// Flight duty periods that may overlap the span, as `DUTIES_SQL`.
const FDPS_SQL: &str = "SELECT crew_id, function, fdp_start_utc, fdp_end_utc FROM crew_fdp \
     WHERE +fdp_start_utc < ?2 AND (fdp_end_utc IS NULL OR +fdp_end_utc > ?1)";

/// Only the crew named in `?3`, a JSON array of ids.
const NAMED: &str = " AND crew_id IN (SELECT value FROM json_each(?3))";

/// One crew member's rows for `ftl explain` (`?3` the crew id), as the reads of
/// `ftl` bound them: flights with block time (every role), duties, periods.
/// The flights have no upper bound: a period's last flight may come after T.
const EXPLAIN_FLIGHTS_SQL: &str = "SELECT flight_id, role, function, '', off_blocks_utc, \
     on_blocks_utc FROM crew_flight WHERE crew_id = ?3 AND on_blocks_utc > ?1 \
     AND ?2 IS NOT NULL";
const EXPLAIN_DUTIES_SQL: &str = "SELECT duty_id, role, function, duty_type, duty_start_utc, \
     duty_end_utc FROM crew_duty WHERE crew_id = ?3 AND duty_start_utc < ?2 \
     AND (duty_end_utc IS NULL OR duty_end_utc > ?1)";
const EXPLAIN_FDPS_SQL: &str = "SELECT duty_id, '', function, '', fdp_start_utc, fdp_end_utc \
     FROM crew_fdp WHERE crew_id = ?3 AND fdp_start_utc < ?2 \
     AND (fdp_end_utc IS NULL OR fdp_end_utc > ?1)";

/// A live event by its flight, kind and instant (an index search: of the flight
/// index, or of a kind and instant), with its batch's file name.
pub(in crate::store) const EVENT_SQL: &str = "SELECT d.idempotency_key, d.event_kind, \
     d.instant_utc, d.source_revision, d.batch_digest, i.file_name \
     FROM duty_event AS d JOIN ingest_inbox AS i ON i.batch_digest = d.batch_digest \
     WHERE d.flight_id = ?1 AND d.event_kind = ?2 AND d.instant_utc = ?3";

/// The stored crew ids equal to `?1` but for letter case.
const CASE_TWINS_SQL: &str = "SELECT crew_id FROM spoolite_crew_duty WHERE lower(crew_id) = lower(?1) \
     UNION SELECT crew_id FROM spoolite_crew_flight WHERE lower(crew_id) = lower(?1) \
     ORDER BY 1 LIMIT 5";

/// What tells two read transactions apart: the last batch committed and the
/// schema version. Every transaction that writes crew rows is a batch (which
/// writes its inbox row) or a migration (which changes the version).
const MARK_SQL: &str = "SELECT (SELECT coalesce(max(batch_ref), 0) FROM ingest_inbox), user_version FROM pragma_user_version";

/// How many times `read` opens its two transactions again when a commit landed
/// between them, before it reads both views on one connection.
const SNAPSHOT_TRIES: usize = 3;

/// A read-only connection to a spoolite SQLite database, for `ftl`.
pub struct SqliteCrewHours {
    conn: Connection,
    path: PathBuf,
}

impl SqliteCrewHours {
    pub fn open(path: &Path) -> Result<SqliteCrewHours, StoreError> {
        Ok(SqliteCrewHours {
            conn: connect::read_only(path)?,
            path: path.to_owned(),
        })
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(connect::user_version(&self.conn)?)
    }

    pub fn has_views(&self) -> Result<bool, StoreError> {
        let found: i64 = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'view' \
             AND name IN ('crew_flight', 'crew_duty', 'crew_fdp')",
            [],
            |row| row.get(0),
        )?;
        Ok(found == 3)
    }

    /// One crew member's rows for `ftl explain`, in one read transaction.
    pub fn explain_rows(
        &mut self,
        span: &CrewSpan,
        crew_id: &str,
    ) -> Result<ExplainRows, StoreError> {
        let tx = self.conn.unchecked_transaction()?;
        let read = |sql: &str| -> Result<Vec<ExplainRow>, StoreError> {
            let mut statement = tx.prepare(sql)?;
            let mut rows = statement.query((&span.after, &span.before, crew_id))?;
            let mut read = Vec::new();
            while let Some(row) = rows.next()? {
                read.push(ExplainRow::read(row)?);
            }
            Ok(read)
        };
        let rows = ExplainRows {
            flights: read(EXPLAIN_FLIGHTS_SQL)?,
            duties: read(EXPLAIN_DUTIES_SQL)?,
            fdps: read(EXPLAIN_FDPS_SQL)?,
        };
        tx.commit()?;
        Ok(rows)
    }

    pub fn case_twins(&mut self, crew_id: &str) -> Result<Vec<String>, StoreError> {
        let mut statement = self.conn.prepare(CASE_TWINS_SQL)?;
        let twins = statement.query_map([crew_id], |row| row.get(0))?;
        Ok(twins.collect::<Result<_, _>>()?)
    }

    pub fn event(
        &mut self,
        flight_id: &str,
        event_kind: &str,
        instant_utc: &str,
    ) -> Result<Option<EventRef>, StoreError> {
        let mut statement = self.conn.prepare_cached(EVENT_SQL)?;
        let mut rows = statement.query((flight_id, event_kind, instant_utc))?;
        let Some(row) = rows.next()? else {
            return Ok(None);
        };
        EventRef::read(row).map(Some)
    }

    /// Reads the two views at once, each on its own connection and thread (a
    /// scan of each is most of `ftl`'s time), in two read transactions that see
    /// the same commits: each is opened and its mark read (`MARK_SQL`), and if a
    /// commit landed between the two, both are opened again. After
    /// `SNAPSHOT_TRIES` such commits the views are read one after the other in
    /// one transaction.
    pub fn read(
        &mut self,
        span: &CrewSpan,
        crew: &[String],
        flights: impl FnMut(CrewRow<'_>) + Send,
        duties: impl FnMut(CrewRow<'_>) + Send,
    ) -> Result<(), StoreError> {
        let query = Query::new(span, crew);
        let mut second = Some(connect::read_only(&self.path)?);
        for _ in 0..SNAPSHOT_TRIES {
            let other = second.as_ref().expect("kept until both are read");
            self.conn.execute_batch("BEGIN")?;
            other.execute_batch("BEGIN")?;
            let marks = (mark(&self.conn)?, mark(other)?);
            if marks.0 == marks.1 {
                let other = second.take().expect("kept until both are read");
                let (conn, query) = (&self.conn, &query);
                return std::thread::scope(|scope| {
                    let duties_read = scope.spawn(move || {
                        let read = query.duties(&other, duties);
                        other.execute_batch("COMMIT")?;
                        read
                    });
                    let flights_read = query.flights(conn, flights);
                    conn.execute_batch("COMMIT")?;
                    let duties_read = duties_read.join().expect("the duties' thread panicked");
                    flights_read.and(duties_read)
                });
            }
            self.conn.execute_batch("COMMIT")?;
            other.execute_batch("COMMIT")?;
        }
        let tx = self.conn.unchecked_transaction()?;
        query.flights(&tx, flights)?;
        query.duties(&tx, duties)?;
        tx.commit()?;
        Ok(())
    }
}

/// The mark of the read transaction open on `conn` (its first read starts it).
fn mark(conn: &Connection) -> Result<(i64, i64), StoreError> {
    Ok(conn.query_row(MARK_SQL, [], |row| Ok((row.get(0)?, row.get(1)?)))?)
}

/// The span and the crew named, as the two statements take them.
struct Query<'a> {
    span: &'a CrewSpan,
    /// The crew named, as a JSON array; None for everyone.
    named: Option<String>,
}

impl<'a> Query<'a> {
    fn new(span: &'a CrewSpan, crew: &[String]) -> Query<'a> {
        let named = (!crew.is_empty())
            .then(|| serde_json::to_string(crew).expect("a list of strings serialises"));
        Query { span, named }
    }

    fn rows<'s>(
        &self,
        statement: &'s mut rusqlite::Statement<'_>,
        after: &str,
    ) -> rusqlite::Result<rusqlite::Rows<'s>> {
        match &self.named {
            None => statement.query((after, &self.span.before)),
            Some(named) => statement.query((after, &self.span.before, named)),
        }
    }

    fn sql(&self, base: &str) -> String {
        match self.named {
            None => base.to_owned(),
            Some(_) => format!("{base}{NAMED}"),
        }
    }

    fn flights(
        &self,
        conn: &Connection,
        mut each: impl FnMut(CrewRow<'_>),
    ) -> Result<(), StoreError> {
        let mut statement = conn.prepare(&self.sql(FLIGHTS_SQL))?;
        let mut rows = self.rows(&mut statement, &self.span.after)?;
        while let Some(row) = rows.next()? {
            each(CrewRow::Flight {
                crew_id: text(row, 0)?,
                role: text(row, 1)?,
                function: text(row, 2)?,
                off_blocks_utc: text(row, 3)?,
                on_blocks_utc: text_or_null(row, 4)?,
                block_time: row.get(5)?,
            });
        }
        Ok(())
    }

    fn duties(
        &self,
        conn: &Connection,
        mut each: impl FnMut(CrewRow<'_>),
    ) -> Result<(), StoreError> {
        let mut statement = conn.prepare(&self.sql(DUTIES_SQL))?;
        let mut rows = self.rows(&mut statement, &self.span.duties_after)?;
        while let Some(row) = rows.next()? {
            each(CrewRow::Duty {
                crew_id: text(row, 0)?,
                function: text(row, 1)?,
                duty_type: text(row, 2)?,
                duty_start_utc: text(row, 3)?,
                duty_end_utc: text_or_null(row, 4)?,
            });
        }
        drop(rows);
        if !self.span.fdps {
            return Ok(());
        }
        let mut statement = conn.prepare(&self.sql(FDPS_SQL))?;
        let mut rows = self.rows(&mut statement, &self.span.duties_after)?;
        while let Some(row) = rows.next()? {
            each(CrewRow::Fdp {
                crew_id: text(row, 0)?,
                function: text(row, 1)?,
                fdp_start_utc: text(row, 2)?,
                fdp_end_utc: text_or_null(row, 3)?,
            });
        }
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
