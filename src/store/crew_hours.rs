//! What `ftl` reads, on either backend: the rows of `crew_flight` (operating
//! crew only) and `crew_duty` that can overlap a span of time, for every crew
//! member or the named ones, in one read snapshot, handed over as text as the
//! views hold it. Which rows count, and how much, `ftl` decides.

use super::postgres::crew_hours::PgCrewHours;
use super::sqlite::crew_hours::SqliteCrewHours;
use super::{Db, StoreError};

/// One row of a view, borrowed for the call it is handed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrewRow<'a> {
    /// A `crew_flight` row of an operating crew member.
    Flight {
        crew_id: &'a str,
        role: &'a str,
        off_blocks_utc: &'a str,
        on_blocks_utc: &'a str,
    },
    /// A `crew_duty` row (either role); `duty_end_utc` is None while it is open.
    Duty {
        crew_id: &'a str,
        duty_start_utc: &'a str,
        duty_end_utc: Option<&'a str>,
    },
}

/// The span to read: rows that end after `after` and begin before `before`, each
/// in whole seconds and without its `Z` (`YYYY-MM-DDTHH:MM:SS`), a second wider
/// than what counts: compared with the views' canonical text, a plain `<` or `>`
/// then keeps every row that counts (the text orders instants by time but for
/// the fractions within one second), and reads the crew index as a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrewSpan {
    pub after: String,
    pub before: String,
}

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

    /// Whether the database has both views (an older schema has neither).
    pub fn has_views(&mut self) -> Result<bool, StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.has_views(),
            CrewHours::Postgres(hours) => hours.has_views(),
        }
    }

    /// Hands `flights` every row of `crew_flight` (operating crew) and `duties`
    /// every row of `crew_duty` (an open duty whatever its start) that may
    /// overlap `span`, of the crew named in `crew` (every crew member when it is
    /// empty), all read in one snapshot. The two may be called at once, from two
    /// threads (SQLite reads the views side by side).
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
}
