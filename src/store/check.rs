//! `spoolite check`'s database work: the list of checks, each a name and one
//! function per backend, run in this order. Adding a check is one entry in
//! `CHECKS` and a function in `sqlite::check` and `postgres::check`.
//!
//! Every check is one statement (SQLite: one read snapshot each, so a long check
//! holds back the WAL's checkpoint for no longer than its own statement; a
//! daemon's commits in between cannot make a check fail, since each statement
//! compares rows of one snapshot) and writes nothing.

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Store, StoreError};

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether the invariant holds.
    pub ok: bool,
    /// What was looked at when it holds (`12345 batches, each adds up`), what was
    /// found when it does not (how many rows, the first few offenders).
    pub detail: String,
}

impl Finding {
    pub(crate) fn holds(detail: impl Into<String>) -> Finding {
        Finding {
            ok: true,
            detail: detail.into(),
        }
    }

    pub(crate) fn fails(detail: impl Into<String>) -> Finding {
        Finding {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// One check: its name as printed, and what runs it on each backend.
pub struct Check {
    pub name: &'static str,
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

/// How many offenders a failing check names.
pub(crate) const OFFENDERS_SHOWN: i64 = 5;

/// The checks, in the order they run and are printed.
pub const CHECKS: &[Check] = &[
    Check {
        name: "integrity",
        sqlite: |store, options| super::sqlite::check::integrity(store, options.quick),
        postgres: |store, options| super::postgres::check::integrity(store, options.quick),
    },
    Check {
        name: "inbox_counts",
        sqlite: |store, _| super::sqlite::check::inbox_counts(store),
        postgres: |store, _| super::postgres::check::inbox_counts(store),
    },
    Check {
        name: "quarantine_counts",
        sqlite: |store, _| super::sqlite::check::quarantine_counts(store),
        postgres: |store, _| super::postgres::check::quarantine_counts(store),
    },
    Check {
        name: "events_have_batch",
        sqlite: |store, _| super::sqlite::check::events_have_batch(store),
        postgres: |store, _| super::postgres::check::events_have_batch(store),
    },
    Check {
        name: "change_seq_distinct",
        sqlite: |store, _| super::sqlite::check::change_seq_distinct(store),
        postgres: |store, _| super::postgres::check::change_seq_distinct(store),
    },
    Check {
        name: "flight_times",
        sqlite: |store, _| super::sqlite::check::flight_times(store),
        postgres: |store, _| super::postgres::check::flight_times(store),
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

/// The first offenders as a list, `a, b, c` and `…` when there are more.
pub(crate) fn listed(first: &[String], total: i64) -> String {
    let mut text = first.join(", ");
    if total > first.len() as i64 {
        text.push_str(", …");
    }
    text
}

/// `1 row` / `2 rows`.
pub(crate) fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(crate) fn inbox_finding(batches: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each adds up",
            plural(batches, "batch", "batches")
        ));
    }
    Finding::fails(format!(
        "{} of {} whose events_total is not inserted + updated + unchanged + stale + \
         conflicts + invalid: {}",
        total,
        plural(batches, "batch", "batches"),
        listed(first, total)
    ))
}

pub(crate) fn quarantine_finding(batches: i64, rows: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, {}, each batch's number conflicts + invalid",
            plural(batches, "batch", "batches"),
            plural(rows, "quarantine row", "quarantine rows")
        ));
    }
    Finding::fails(format!(
        "{} whose quarantine rows do not number conflicts + invalid: {}",
        plural(total, "batch", "batches"),
        listed(first, total)
    ))
}

pub(crate) fn events_finding(events: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each names an inbox row",
            plural(events, "event row", "event rows")
        ));
    }
    Finding::fails(format!(
        "{} of {} name no inbox row; first keys: {}",
        total,
        plural(events, "event row", "event rows"),
        listed(first, total)
    ))
}

pub(crate) fn change_seq_finding(events: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each change_seq once",
            plural(events, "event row", "event rows")
        ));
    }
    Finding::fails(format!(
        "{} held by more than one row: {}",
        plural(total, "change_seq value", "change_seq values"),
        listed(first, total)
    ))
}

pub(crate) fn flight_times_finding(flights: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each equal to its live events",
            plural(flights, "flight", "flights")
        ));
    }
    Finding::fails(format!(
        "{} whose flight_times row differs from what its live events give (or that \
         one side lacks): {}",
        plural(total, "flight", "flights"),
        listed(first, total)
    ))
}
