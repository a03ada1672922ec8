//! `spoolite check`'s database work: the list of checks, each a name and one
//! function per backend, printed in this order (`spoolite check` runs several at
//! once, on a connection each, the longest first). Adding a check is one entry in
//! `CHECKS` and a function in `sqlite::check` and `postgres::check`.
//!
//! Every check is one statement (SQLite: one read snapshot each, so a long check
//! holds back the WAL's checkpoint for no longer than its own statement; a
//! daemon's commits in between cannot make a check fail, since each statement
//! compares rows of one snapshot) and writes nothing. The crew checks are two
//! statements read side by side in one read transaction (one snapshot): the
//! flights or duties as their live events give them and the view's rows, both in
//! (id, crew id) byte order, merged here (`compare_crew`), so memory holds one
//! chunk of rows of each side, never a table. The `crew_fdp` check reads the crew
//! rows of duties and flights and the periods side by side in crew id order
//! (`compare_fdp`), one crew member's rows at a time.

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Store, StoreError};

pub use super::findings::Finding;

/// One check: its name as printed, and what runs it on each backend.
pub struct Check {
    pub name: &'static str,
    /// About how long it takes on SQLite at 10M events with the file in the page
    /// cache (BENCHMARKS.md, "check"): checks run at once start the longest first,
    /// so that the last to end is not a long one started late.
    pub at_10m_seconds: fn(&Options) -> u32,
    sqlite: fn(&SqliteStore, &Options) -> Result<Finding, StoreError>,
    postgres: fn(&mut PgStore, &Options) -> Result<Finding, StoreError>,
}

/// How the checks run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// `--quick`: SQLite's `quick_check` for `integrity` (every page, not every
    /// index entry against its row).
    pub quick: bool,
}

/// The checks, in the order they are printed.
pub const CHECKS: &[Check] = &[
    Check {
        name: "integrity",
        at_10m_seconds: |options| if options.quick { 10 } else { 500 },
        sqlite: |store, options| crate::store::sqlite::check::integrity(store, options.quick),
        postgres: |store, options| crate::store::postgres::check::integrity(store, options.quick),
    },
    Check {
        name: "inbox_counts",
        at_10m_seconds: |_| 0,
        sqlite: |store, _| crate::store::sqlite::check::inbox_counts(store),
        postgres: |store, _| crate::store::postgres::check::inbox_counts(store),
    },
    Check {
        name: "quarantine_counts",
        at_10m_seconds: |_| 0,
        sqlite: |store, _| crate::store::sqlite::check::quarantine_counts(store),
        postgres: |store, _| crate::store::postgres::check::quarantine_counts(store),
    },
    Check {
        name: "events_have_batch",
        at_10m_seconds: |_| 2,
        sqlite: |store, _| crate::store::sqlite::check::events_have_batch(store),
        postgres: |store, _| crate::store::postgres::check::events_have_batch(store),
    },
    Check {
        name: "change_seq_distinct",
        at_10m_seconds: |_| 2,
        sqlite: |store, _| crate::store::sqlite::check::change_seq_distinct(store),
        postgres: |store, _| crate::store::postgres::check::change_seq_distinct(store),
    },
    Check {
        name: "slots",
        at_10m_seconds: |_| 1,
        sqlite: |store, _| crate::store::sqlite::check::slots(store),
        postgres: |store, _| crate::store::postgres::check::slots(store),
    },
    Check {
        name: "flight_times",
        at_10m_seconds: |_| 14,
        sqlite: |store, _| crate::store::sqlite::check::flight_times(store),
        postgres: |store, _| crate::store::postgres::check::flight_times(store),
    },
    Check {
        name: "crew_flight",
        at_10m_seconds: |_| 26,
        sqlite: |store, _| crate::store::sqlite::check::crew_flight(store),
        postgres: |store, _| crate::store::postgres::check::crew_flight(store),
    },
    Check {
        name: "crew_duty",
        at_10m_seconds: |_| 31,
        sqlite: |store, _| crate::store::sqlite::check::crew_duty(store),
        postgres: |store, _| crate::store::postgres::check::crew_duty(store),
    },
    Check {
        name: "crew_fdp",
        at_10m_seconds: |_| 30,
        sqlite: |store, _| crate::store::sqlite::check::crew_fdp(store),
        postgres: |store, _| crate::store::postgres::check::crew_fdp(store),
    },
    Check {
        name: "data_quality",
        at_10m_seconds: |_| 10,
        sqlite: |store, _| crate::store::sqlite::check::data_quality(store),
        postgres: |store, _| crate::store::postgres::check::data_quality(store),
    },
];

impl Store {
    /// Runs one check on this database. An error is a check that could not run
    /// (the database cannot be read), not one that failed.
    pub fn check(&mut self, check: &Check, options: &Options) -> Result<Finding, StoreError> {
        match self {
            Store::Sqlite(store) => (check.sqlite)(store, options),
            Store::Postgres(store) => (check.postgres)(store, options),
        }
    }

    /// Refuses a database whose schema is older than this spoolite's: the
    /// checks read the current one (the daemon upgrades it).
    pub fn require_current_schema(&mut self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.require_current_schema(),
            Store::Postgres(store) => store.require_current_schema(),
        }
    }
}
