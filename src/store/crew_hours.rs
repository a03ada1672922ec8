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
/// an instant as `rtrim(…, 'Z')` writes it (`YYYY-MM-DDTHH:MM:SS[.fraction]`),
/// which orders instants by time: the views' indexes are on that expression, so
/// a crew member's rows, and everyone's, up to `before` are an index range.
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

    /// Hands `each` every row of `crew_flight` (operating crew) and `crew_duty`
    /// (an open duty whatever its start) that may overlap `span`, of the crew
    /// named in `crew` (every crew member when it is empty), all read in one
    /// snapshot.
    pub fn read(
        &mut self,
        span: &CrewSpan,
        crew: &[String],
        each: impl FnMut(CrewRow<'_>),
    ) -> Result<(), StoreError> {
        match self {
            CrewHours::Sqlite(hours) => hours.read(span, crew, each),
            CrewHours::Postgres(hours) => hours.read(span, crew, each),
        }
    }
}
