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
//! chunk of rows of each side, never a table.

use std::cmp::Ordering;
use std::collections::VecDeque;

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

/// How many offenders a failing check names.
pub(crate) const OFFENDERS_SHOWN: i64 = 5;

/// The checks, in the order they are printed.
pub const CHECKS: &[Check] = &[
    Check {
        name: "integrity",
        at_10m_seconds: |options| if options.quick { 10 } else { 500 },
        sqlite: |store, options| super::sqlite::check::integrity(store, options.quick),
        postgres: |store, options| super::postgres::check::integrity(store, options.quick),
    },
    Check {
        name: "inbox_counts",
        at_10m_seconds: |_| 0,
        sqlite: |store, _| super::sqlite::check::inbox_counts(store),
        postgres: |store, _| super::postgres::check::inbox_counts(store),
    },
    Check {
        name: "quarantine_counts",
        at_10m_seconds: |_| 0,
        sqlite: |store, _| super::sqlite::check::quarantine_counts(store),
        postgres: |store, _| super::postgres::check::quarantine_counts(store),
    },
    Check {
        name: "events_have_batch",
        at_10m_seconds: |_| 2,
        sqlite: |store, _| super::sqlite::check::events_have_batch(store),
        postgres: |store, _| super::postgres::check::events_have_batch(store),
    },
    Check {
        name: "change_seq_distinct",
        at_10m_seconds: |_| 2,
        sqlite: |store, _| super::sqlite::check::change_seq_distinct(store),
        postgres: |store, _| super::postgres::check::change_seq_distinct(store),
    },
    Check {
        name: "flight_times",
        at_10m_seconds: |_| 14,
        sqlite: |store, _| super::sqlite::check::flight_times(store),
        postgres: |store, _| super::postgres::check::flight_times(store),
    },
    Check {
        name: "crew_flight",
        at_10m_seconds: |_| 26,
        sqlite: |store, _| super::sqlite::check::crew_flight(store),
        postgres: |store, _| super::postgres::check::crew_flight(store),
    },
    Check {
        name: "crew_duty",
        at_10m_seconds: |_| 31,
        sqlite: |store, _| super::sqlite::check::crew_duty(store),
        postgres: |store, _| super::postgres::check::crew_duty(store),
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

/// One row of `crew_flight` or `crew_duty` as the crew checks compare it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CrewLine {
    /// The flight id or the duty id.
    pub id: String,
    pub crew_id: String,
    pub role: String,
    /// Off-blocks or the duty's start.
    pub from: String,
    /// On-blocks or the duty's end (none while open).
    pub to: Option<String>,
    pub minutes: Option<f64>,
}

impl CrewLine {
    /// The same row but for its key: role, times and minutes rounded to 0.01.
    fn same(&self, other: &CrewLine) -> bool {
        let cents = |minutes: Option<f64>| minutes.map(|m| (m * 100.0).round() as i64);
        self.role == other.role
            && self.from == other.from
            && self.to == other.to
            && cents(self.minutes) == cents(other.minutes)
    }

    fn named(&self) -> String {
        format!("{} (crew {})", self.id, self.crew_id)
    }
}

/// A flight with block time, or a duty with a live `duty_start`, as its live
/// events give it, with the payload of the event whose crew it takes.
pub(crate) struct Crewed {
    pub id: String,
    pub from: String,
    pub to: Option<String>,
    pub minutes: Option<f64>,
    pub payload: String,
}

/// The two sides of a crew check, each ordered by id then crew id, in byte order.
pub(crate) trait CrewSides {
    /// The next flight or duty by its live events, in id order.
    fn live(&mut self) -> Result<Option<Crewed>, StoreError>;
    /// The view's next row, in (id, crew id) order.
    fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError>;
}

/// The live side's rows: each flight's or duty's crew, in crew id order.
#[derive(Default)]
struct LiveLines {
    /// The rest of the crew of the flight or duty read last.
    pending: VecDeque<CrewLine>,
    /// How many flights or duties were read.
    units: i64,
}

impl LiveLines {
    fn next(&mut self, sides: &mut impl CrewSides) -> Result<Option<CrewLine>, StoreError> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Ok(Some(line));
            }
            let Some(crewed) = sides.live()? else {
                return Ok(None);
            };
            self.units += 1;
            self.pending
                .extend(
                    crate::crew::of_payload(&crewed.payload)
                        .into_iter()
                        .map(|member| CrewLine {
                            id: crewed.id.clone(),
                            crew_id: member.id().to_owned(),
                            role: member.role().as_str().to_owned(),
                            from: crewed.from.clone(),
                            to: crewed.to.clone(),
                            minutes: crewed.minutes,
                        }),
                );
        }
    }
}

/// Merges the view's rows with the rows the live events give, by `crate::crew`'s
/// rules (the rules the batches apply: this verifies storage, not the rules): a
/// row one side lacks and a row whose role, times or minutes differ are each one
/// differing row. `unit` names what the live side lists (`flight`, `duty`).
pub(crate) fn compare_crew(
    sides: &mut impl CrewSides,
    view: &str,
    unit: (&str, &str),
) -> Result<Finding, StoreError> {
    let mut lines = LiveLines::default();
    let (mut rows, mut differing, mut first) = (0_i64, 0_i64, Vec::new());
    let mut live = lines.next(sides)?;
    let mut viewed = sides.viewed()?;
    loop {
        let order = match (&live, &viewed) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(l), Some(v)) => {
                (l.id.as_str(), l.crew_id.as_str()).cmp(&(v.id.as_str(), v.crew_id.as_str()))
            }
        };
        let offender = match (order, &live, &viewed) {
            (Ordering::Less, Some(l), _) => Some(l.named()),
            (Ordering::Greater, _, Some(v)) => Some(v.named()),
            (Ordering::Equal, Some(l), Some(v)) => (!l.same(v)).then(|| v.named()),
            _ => unreachable!("an order of rows that exist"),
        };
        if let Some(named) = offender {
            differing += 1;
            if first.len() < OFFENDERS_SHOWN as usize {
                first.push(named);
            }
        }
        if order != Ordering::Greater {
            live = lines.next(sides)?;
        }
        if order != Ordering::Less {
            rows += 1;
            viewed = sides.viewed()?;
        }
    }
    if differing == 0 {
        return Ok(Finding::holds(format!(
            "{} of {}, each equal to its live events",
            plural(rows, "crew row", "crew rows"),
            plural(lines.units, unit.0, unit.1)
        )));
    }
    Ok(Finding::fails(format!(
        "{} of {view} unlike what the live events give (or that one side lacks): {}",
        plural(differing, "row", "rows"),
        listed(&first, differing)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides from lists, in order.
    struct Lists {
        live: VecDeque<Crewed>,
        viewed: VecDeque<CrewLine>,
    }

    impl CrewSides for Lists {
        fn live(&mut self) -> Result<Option<Crewed>, StoreError> {
            Ok(self.live.pop_front())
        }
        fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError> {
            Ok(self.viewed.pop_front())
        }
    }

    fn crewed(id: &str, payload: &str) -> Crewed {
        Crewed {
            id: id.to_owned(),
            from: "2026-12-01T08:00:00Z".to_owned(),
            to: Some("2026-12-01T09:00:00Z".to_owned()),
            minutes: Some(60.0),
            payload: payload.to_owned(),
        }
    }

    fn line(id: &str, crew_id: &str, role: &str, minutes: f64) -> CrewLine {
        CrewLine {
            id: id.to_owned(),
            crew_id: crew_id.to_owned(),
            role: role.to_owned(),
            from: "2026-12-01T08:00:00Z".to_owned(),
            to: Some("2026-12-01T09:00:00Z".to_owned()),
            minutes: Some(minutes),
        }
    }

    fn compare(viewed: Vec<CrewLine>) -> Finding {
        let mut lists = Lists {
            live: VecDeque::from([
                crewed("A", r#"{"crew":["C2",{"id":"C1","role":"positioning"}]}"#),
                crewed("B", r#"{"crew":"not a list"}"#),
                crewed("C", r#"{"crew":["C3"]}"#),
            ]),
            viewed: viewed.into(),
        };
        compare_crew(&mut lists, "crew_flight", ("flight", "flights")).expect("compare")
    }

    #[test]
    fn the_view_equal_to_the_live_crew_holds() {
        let finding = compare(vec![
            line("A", "C1", "positioning", 60.0),
            line("A", "C2", "operating", 60.001),
            line("C", "C3", "operating", 60.0),
        ]);
        assert_eq!(
            finding,
            Finding::holds("3 crew rows of 3 flights, each equal to its live events")
        );
    }

    #[test]
    fn a_row_missing_extra_or_different_is_each_one_offender() {
        let finding = compare(vec![
            line("A", "C1", "operating", 60.0),
            line("A", "C9", "operating", 60.0),
            line("C", "C3", "operating", 60.01),
        ]);
        assert_eq!(
            finding,
            Finding::fails(
                "4 rows of crew_flight unlike what the live events give (or that one side \
                 lacks): A (crew C1), A (crew C2), A (crew C9), C (crew C3)"
            )
        );
    }
}
