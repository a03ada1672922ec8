//! What `ftl` reads, on either backend: the rows of `crew_flight` (operating
//! crew only), `crew_duty` and `crew_fdp` that can overlap a span of time, for
//! every crew member or the named ones, in one read snapshot, handed over as text
//! as the views hold it. Which rows count, and how much, `ftl` decides.

pub use super::common::{CrewRow, CrewSpan, EventRef, ExplainRow, ExplainRows};
use super::postgres::crew_hours::PgCrewHours;
use super::sqlite::crew_hours::SqliteCrewHours;
use super::{Db, StoreError};

/// A read-only connection for `ftl`: nothing is created, locked for writing or
/// upgraded, so a role or account that may only read suffices.
pub enum CrewHours {
    Sqlite(SqliteCrewHours),
    Postgres(PgCrewHours),
}

impl CrewHours {
    /// Opens the existing database `db` names for reading; a newer schema is
    /// refused (`StoreError::NewerSchema`), an older one is left to `has_views`.
    pub fn open(db: &Db) -> Result<CrewHours, StoreError> {
        Ok(match db {
            Db::Sqlite(path) => CrewHours::Sqlite(SqliteCrewHours::open(path)?),
            Db::Postgres(target) => CrewHours::Postgres(PgCrewHours::open(target)?),
        })
    }

    /// The schema version recorded in the database.
    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.schema_version(),
            CrewHours::Postgres(hours) => hours.schema_version(),
        }
    }

    /// Whether the database has the crew views of this spoolite (an older schema
    /// has none, or not `crew_fdp`).
    pub fn has_views(&mut self) -> Result<bool, StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.has_views(),
            CrewHours::Postgres(hours) => hours.has_views(),
        }
    }

    /// Hands `flights` every row of `crew_flight` (operating crew, and their
    /// flights without block time begun in the span) and `duties`
    /// every row of `crew_duty` and then of `crew_fdp` (an open one whatever its
    /// start) that may overlap `span`, of the crew named in `crew` (every crew
    /// member when it is empty), all read in one snapshot. The two may be called
    /// at once, from two threads (SQLite reads the views side by side).
    pub fn read(
        &mut self,
        span: &CrewSpan,
        crew: &[String],
        flights: impl FnMut(CrewRow<'_>) + Send,
        duties: impl FnMut(CrewRow<'_>) + Send,
    ) -> Result<(), StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.read(span, crew, flights, duties),
            CrewHours::Postgres(hours) => hours.read(span, crew, flights, duties),
        }
    }

    /// One crew member's flights with block time, duties and flight duty periods
    /// (every role) that may overlap `span`, with their ids, read in one snapshot.
    pub fn explain_rows(
        &mut self,
        span: &CrewSpan,
        crew_id: &str,
    ) -> Result<ExplainRows, StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.explain_rows(span, crew_id),
            CrewHours::Postgres(hours) => hours.explain_rows(span, crew_id),
        }
    }

    /// The live event of `flight_id` of kind `event_kind` at `instant_utc` (the
    /// canonical text a view holds), with its batch's file name; None when there
    /// is none (a row that changed since it was read).
    pub fn event(
        &mut self,
        flight_id: &str,
        event_kind: &str,
        instant_utc: &str,
    ) -> Result<Option<EventRef>, StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.event(flight_id, event_kind, instant_utc),
            CrewHours::Postgres(hours) => hours.event(flight_id, event_kind, instant_utc),
        }
    }

    /// The stored crew ids that differ from `crew_id` only in letter case (at most
    /// a few), for the warning about an id without rows. Reads every crew row:
    /// asked only for an id that has none.
    pub fn case_twins(&mut self, crew_id: &str) -> Result<Vec<String>, StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.case_twins(crew_id),
            CrewHours::Postgres(hours) => hours.case_twins(crew_id),
        }
    }
}
