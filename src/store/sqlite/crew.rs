//! The crew rows of a batch's flights and duties (`spoolite_crew_flight`,
//! `spoolite_crew_duty`, `spoolite_crew_fdp`, read through the views
//! `crew_flight`, `crew_duty` and `crew_fdp`), computed again from their live rows
//! in the batch's own transaction, after the flights' times are (`flights`), so
//! that they depend only on the live events.
//!
//! A new flight whose run of events holds each kind its crew rows are made of at
//! most once, none retracted (the common case, and every flight of a first
//! ingest), has its flight and duty rows made as the run ends, from the events
//! as read: each of them is inserted as read, so they are its live events. Into
//! empty crew tables the rows go at once, with the tables' secondary indexes
//! dropped and built again at the end; into stored ones they are held in a
//! temporary table and inserted at the batch's end in crew order, one pass along
//! the crew indexes. Reading the rows back would cost a random read of a payload
//! per flight (BENCHMARKS.md, "Crew rows as they are read").
//!
//! Any other flight or duty is noted (in a temporary table, so memory stays
//! bounded): one the batch made, when its runs hold an event of a kind its crew
//! rows are made of, live or not, whatever its outcome (noting one too many
//! costs a recomputation that changes nothing); one stored before the batch,
//! when the batch inserts a row of such a kind or changes one's payload or
//! liveness (`Flights::written`: a batch of `unchanged` events, or of new
//! revisions of the same payloads, rewrites no crew row). Its rows are then deleted and
//! written again once every row is written: the crew of its latest live
//! `crew_assignment` or else its first live `off_blocks` (a duty: of its first
//! `duty_start`) by `crate::crew`'s rules, with its times.
//!
//! A flight duty period depends on the duty and on every flight of the crew
//! member inside it, whatever its id, so the periods are computed last, by SQL
//! over the crew rows just written: of every duty when the crew tables were empty
//! or most of them was rewritten, else of the duties whose rows the batch wrote
//! and of the duties that hold the off-blocks of a flight row the batch deleted
//! or wrote, for that flight's crew members (`temp.crew_touch`).
//! Those are taken in crew order, each one's span of its crew member's flights
//! one range of the crew index.
//!
//! The upgrade to schema 11 (`CREW_VERSION` in `connect`) empties the crew tables
//! and runs the read-back computation over every flight (`Scope::All`), so a
//! database upgraded holds the rows its batches would have written. Each row
//! holds its flight's id as well as its number, so that the views read one table.
//!
//! The first live `off_blocks` of a flight is the one event of the flight whose
//! instant is `flight.off_blocks_utc`: canonical instants are unique per instant
//! (trailing zeros of a fraction dropped), so two events at one time are one key.

use rusqlite::Connection;

use super::rebuild;
use crate::batch::event::before;
use crate::crew;
use crate::store::error::StoreError;

/// The event kinds a flight's or duty's crew rows are made of.
const KINDS: [&str; 5] = [
    "off_blocks",
    "on_blocks",
    "duty_start",
    "duty_end",
    "crew_assignment",
];

/// Whether an event of `event_kind` can change its flight's crew rows.
pub(super) fn is_crewed(event_kind: &str) -> bool {
    KINDS.contains(&event_kind)
}

/// Which flights' crew rows to compute: those the batch noted, or every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    Noted,
    All,
}

impl Scope {
    /// The flight numbers of the scope, as a subquery with the column `ref`.
    fn refs(self) -> &'static str {
        match self {
            Scope::Noted => "SELECT ref FROM temp.crew_recompute",
            Scope::All => "SELECT ref FROM spoolite_flight",
        }
    }
}

/// The flights whose crew rows are to be computed again, for the batch in progress.
const CREATE_NOTED: &str =
    "CREATE TEMP TABLE IF NOT EXISTS crew_recompute (ref INTEGER PRIMARY KEY)";

/// What the flight duty periods of a batch depend on: the duties whose periods
/// are computed again, and the (crew member, off-blocks) of each operating flight
/// row deleted or written, whose duties around that instant follow.
const CREATE_FDP_NOTED: &str =
    "CREATE TEMP TABLE IF NOT EXISTS crew_fdp_noted (ref INTEGER PRIMARY KEY);
    CREATE TEMP TABLE IF NOT EXISTS crew_touch (
        crew_id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (crew_id, at)) WITHOUT ROWID;
    DELETE FROM temp.crew_fdp_noted;
    DELETE FROM temp.crew_touch;";

/// A batch's flights noted for their crew rows, and the crew tables' indexes
/// dropped while its new flights' rows are written.
#[derive(Default)]
pub(super) struct Noted {
    /// Whether a flight was noted (the temporary table then exists and is in use).
    any: bool,
    /// The crew tables' secondary indexes, dropped before the first rows of a
    /// new flight went into empty crew tables (a first ingest), built again by
    /// `finish` with one sort each.
    dropped: Option<[rebuild::Dropped; 2]>,
    /// Whether the crew tables were looked at for being empty.
    looked: bool,
    /// Whether `temp.crew_fdp_noted` and `temp.crew_touch` exist and are in use.
    fdp_noted: bool,
    /// Whether new flights' and duties' crew rows are held (`CREATE_HELD`).
    held: bool,
}

impl Noted {
    /// Makes the tables of what the flight duty periods depend on ready.
    fn fdp_tables(&mut self, tx: &Connection) -> Result<(), StoreError> {
        if !self.fdp_noted {
            tx.execute_batch(CREATE_FDP_NOTED)?;
            self.fdp_noted = true;
        }
        Ok(())
    }

    /// Notes that the batch holds an event that may change `flight_ref`'s crew rows.
    pub(super) fn note(&mut self, tx: &Connection, flight_ref: i64) -> Result<(), StoreError> {
        if !self.any {
            tx.execute_batch(CREATE_NOTED)?;
            tx.execute_batch("DELETE FROM temp.crew_recompute")?;
            self.any = true;
        }
        tx.prepare_cached("INSERT OR IGNORE INTO temp.crew_recompute (ref) VALUES (?1)")?
            .execute([flight_ref])?;
        Ok(())
    }

    /// The crew rows of a run's flight: the rows of what the run read when that
    /// is all there is to them (a new flight, `Read::Plain`), else the flight
    /// noted for `finish`.
    pub(super) fn end_run(
        &mut self,
        tx: &Connection,
        flight: (i64, &str),
        run: RunCrew,
    ) -> Result<(), StoreError> {
        let plain = match run.read {
            Read::None => return Ok(()),
            Read::Noted => return self.note(tx, flight.0),
            Read::Plain(plain) => plain,
        };
        if !self.looked {
            self.looked = true;
            if empty(tx)? {
                self.dropped = Some([
                    rebuild::drop_indexes_of(tx, "spoolite_crew_flight")?,
                    rebuild::drop_indexes_of(tx, "spoolite_crew_duty")?,
                ]);
            }
        }
        let Plain {
            off_blocks,
            on_blocks,
            duty_start,
            duty_end,
            assignment,
        } = *plain;
        // A first ingest computes every period at the end; any other batch notes
        // what the periods of the duties around these rows depend on, and holds
        // the rows for one insert in crew order (into empty tables without their
        // indexes, they go straight in).
        let noting = self.dropped.is_none();
        let (flight_row, duty_row) = match noting {
            true => {
                if !self.held {
                    tx.execute_batch(CREATE_HELD)?;
                    self.held = true;
                }
                (HELD_FLIGHT_ROW, HELD_DUTY_ROW)
            }
            false => (FLIGHT_ROW, DUTY_ROW),
        };
        if let Some((start, off_blocks_crew)) = &off_blocks {
            let crew = match &assignment {
                Some(assigned) => assigned,
                None => off_blocks_crew,
            };
            let times = FlightTimes::new(start, on_blocks.as_deref());
            write_flight_members(tx, flight_row, flight, &times, crew)?;
            if noting && crew.iter().any(|m| m.role() == crew::Role::Operating) {
                self.fdp_tables(tx)?;
                let mut touch = tx.prepare_cached(TOUCH_ROW)?;
                for member in crew.iter().filter(|m| m.role() == crew::Role::Operating) {
                    touch.execute([member.id(), start.as_str()])?;
                }
            }
        }
        if let Some((start, crew, duty_type)) = &duty_start {
            let end = duty_end.as_deref().filter(|end| !before(end, start));
            write_duty_members(tx, duty_row, flight, (start, end), crew, *duty_type)?;
            if noting && !crew.is_empty() {
                self.fdp_tables(tx)?;
                tx.prepare_cached("INSERT OR IGNORE INTO temp.crew_fdp_noted (ref) VALUES (?1)")?
                    .execute([flight.0])?;
            }
        }
        Ok(())
    }

    /// Inserts the held crew rows of the batch's new flights and duties, computes
    /// the noted flights' crew rows again (call once their times are) and builds
    /// the dropped indexes.
    /// `sorted`: the batch is large against the table (`rebuild::worth_it`), so
    /// the crew tables' indexes are dropped and built again by sorting too, as
    /// they are when the batch noted many flights (`many_noted`).
    pub(super) fn finish(mut self, tx: &Connection, sorted: bool) -> Result<(), StoreError> {
        // First: the noted flights' rows are deleted and written again below,
        // and a flight new in the batch whose events came back later in the
        // file is among them.
        if self.held {
            let started = std::time::Instant::now();
            tx.execute_batch(INSERT_HELD)?;
            log::debug!("inserted the held crew rows in {:?}", started.elapsed());
        }
        let mut all_periods = self.dropped.is_some();
        if self.any {
            let started = std::time::Instant::now();
            let drop = self.dropped.is_none() && (sorted || many_noted(tx)?);
            all_periods |= drop;
            self.fdp_tables(tx)?;
            // Every flight noted (a correction of every flight's crew): the crew
            // tables are emptied whole instead of row by row (every period is
            // then computed below, `all_periods`).
            let every = drop && every_noted(tx)?;
            let scope = match every {
                true => Scope::All,
                false => Scope::Noted,
            };
            recompute(tx, scope, drop, all_periods)?;
            log::debug!(
                "computed the crew rows of the noted flights again in {:?}{}",
                started.elapsed(),
                match drop {
                    true => ", their indexes dropped and built again",
                    false => "",
                }
            );
        }
        for indexes in self.dropped.take().into_iter().flatten() {
            indexes.rebuild(tx)?;
        }
        if all_periods {
            periods(tx, Scope::All)?;
        } else if self.fdp_noted {
            periods(tx, Scope::Noted)?;
        }
        if self.any {
            tx.execute_batch("DELETE FROM temp.crew_recompute")?;
        }
        if self.fdp_noted {
            tx.execute_batch("DELETE FROM temp.crew_fdp_noted; DELETE FROM temp.crew_touch;")?;
        }
        Ok(())
    }
}

/// Whether the batch noted at least a third of the stored flights: their crew rows
/// are then deleted and written again with the crew tables' secondary indexes
/// dropped, and those built again by one sort each, which then costs less than a
/// random delete and insert per row in each index (measured on 1M events with 12 %
/// and 34 % of the flights noted: BENCHMARKS.md, "A correction of every flight's
/// crew").
fn many_noted(tx: &Connection) -> Result<bool, StoreError> {
    Ok(tx.query_row(
        "SELECT 3 * (SELECT count(*) FROM temp.crew_recompute)
             >= (SELECT coalesce(max(ref), 0) FROM spoolite_flight)",
        [],
        |row| row.get(0),
    )?)
}

/// Whether the batch noted every stored flight.
fn every_noted(tx: &Connection) -> Result<bool, StoreError> {
    Ok(tx.query_row(
        "SELECT (SELECT count(*) FROM temp.crew_recompute)
             = (SELECT count(*) FROM spoolite_flight)",
        [],
        |row| row.get(0),
    )?)
}

/// Whether both crew tables are empty: a first ingest, whose crew rows are best
/// indexed by one sort each after they are written.
pub(super) fn empty(tx: &Connection) -> Result<bool, StoreError> {
    Ok(tx.query_row(
        "SELECT NOT EXISTS (SELECT 1 FROM spoolite_crew_flight)
             AND NOT EXISTS (SELECT 1 FROM spoolite_crew_duty)",
        [],
        |row| row.get(0),
    )?)
}

/// What a run of one flight's events read of its crew rows.
#[derive(Default)]
pub(super) struct RunCrew {
    read: Read,
}

#[derive(Default)]
enum Read {
    /// No event a crew row is made of.
    #[default]
    None,
    /// A new flight's events, each kind at most once and none retracted: each
    /// is inserted as read (a new flight has no stored rows, and one version of
    /// a key is its only one), so its crew rows are what the run read.
    Plain(Box<Plain>),
    /// Anything else: the crew rows are computed from the live rows at the end.
    Noted,
}

/// The crew-row events of a new flight's run, each kind at most once.
#[derive(Default)]
struct Plain {
    off_blocks: Option<(String, Vec<crew::Member>)>,
    on_blocks: Option<String>,
    duty_start: Option<(String, Vec<crew::Member>, crew::DutyType)>,
    duty_end: Option<String>,
    /// The crew of the flight's one `crew_assignment`, which gives its crew.
    assignment: Option<Vec<crew::Member>>,
}

impl RunCrew {
    /// Reads one event of the run. `new`: the flight is not yet stored, so the
    /// run's events are all its events (if it comes back later in the file, that
    /// run is not new and notes it for `finish`, which writes its rows again).
    pub(super) fn read(
        &mut self,
        new: bool,
        (event_kind, instant_utc): (&str, &str),
        retracted: bool,
        payload: &str,
    ) {
        if !is_crewed(event_kind) {
            return;
        }
        if matches!(self.read, Read::None) {
            self.read = match new {
                true => Read::Plain(Box::default()),
                false => Read::Noted,
            };
        }
        let Read::Plain(plain) = &mut self.read else {
            return;
        };
        if retracted || !plain.take(event_kind, instant_utc, payload) {
            self.read = Read::Noted;
        }
    }
}

impl Plain {
    /// Takes an event of a kind not read before in the run; `false` if one was.
    fn take(&mut self, event_kind: &str, instant_utc: &str, payload: &str) -> bool {
        let with_crew = || (instant_utc.to_owned(), crew::of_payload(payload));
        match event_kind {
            "off_blocks" if self.off_blocks.is_none() => self.off_blocks = Some(with_crew()),
            "duty_start" if self.duty_start.is_none() => {
                let (crew, duty_type) = crew::of_duty_payload(payload);
                self.duty_start = Some((instant_utc.to_owned(), crew, duty_type))
            }
            "crew_assignment" if self.assignment.is_none() => {
                self.assignment = Some(crew::of_payload(payload))
            }
            "on_blocks" if self.on_blocks.is_none() => {
                self.on_blocks = Some(instant_utc.to_owned())
            }
            "duty_end" if self.duty_end.is_none() => self.duty_end = Some(instant_utc.to_owned()),
            _ => return false,
        }
        true
    }
}

/// The columns of a flight's crew row, in the order `FLIGHT_ROW` binds them.
macro_rules! flight_columns {
    () => {
        "flight_ref, crew_id, role, function, flight_id, off_blocks_utc, on_blocks_utc, block_minutes"
    };
}

/// The columns of a duty's crew row, in the order `DUTY_ROW` binds them.
macro_rules! duty_columns {
    () => {
        "duty_ref, crew_id, role, function, duty_id, duty_start_utc, duty_end_utc, duty_minutes, duty_type"
    };
}

/// A crew row of a flight: its number, the member's id, role and function, its
/// id, the two times (no on-blocks: NULL), the minutes of its block time (none:
/// NULL).
const FLIGHT_ROW: &str = concat!(
    "INSERT INTO spoolite_crew_flight (",
    flight_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
);

/// A crew row of a duty, as `FLIGHT_ROW` (no end: open, no minutes), with its type.
const DUTY_ROW: &str = concat!(
    "INSERT INTO spoolite_crew_duty (",
    duty_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
);

/// The crew rows of a batch's new flights and duties, held until the batch's end
/// (`Noted::finish`) and then inserted in crew order: one pass along the crew
/// indexes instead of a random insert into them per row, which cost 20 of the 24 s
/// of staging 1M events into 2M (BENCHMARKS.md, "Growth: crew rows and periods in
/// crew order").
/// Plain tables, without keys: rows appended in the order written.
const CREATE_HELD: &str = concat!(
    "CREATE TEMP TABLE IF NOT EXISTS crew_flight_held (",
    flight_columns!(),
    "); CREATE TEMP TABLE IF NOT EXISTS crew_duty_held (",
    duty_columns!(),
    "); DELETE FROM temp.crew_flight_held; DELETE FROM temp.crew_duty_held;"
);

/// A held crew row of a flight, as `FLIGHT_ROW`.
const HELD_FLIGHT_ROW: &str = concat!(
    "INSERT INTO temp.crew_flight_held (",
    flight_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
);

/// A held crew row of a duty, as `DUTY_ROW`.
const HELD_DUTY_ROW: &str = concat!(
    "INSERT INTO temp.crew_duty_held (",
    duty_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
);

/// The held rows into the crew tables, in the order of their crew indexes.
const INSERT_HELD: &str = concat!(
    "INSERT INTO spoolite_crew_flight (",
    flight_columns!(),
    ") SELECT ",
    flight_columns!(),
    " FROM temp.crew_flight_held ORDER BY crew_id, off_blocks_utc;
    INSERT INTO spoolite_crew_duty (",
    duty_columns!(),
    ") SELECT ",
    duty_columns!(),
    " FROM temp.crew_duty_held ORDER BY crew_id, duty_start_utc;
    DELETE FROM temp.crew_flight_held;
    DELETE FROM temp.crew_duty_held;"
);

/// A crew member's operating flight at an off-blocks, whose duties' periods follow.
const TOUCH_ROW: &str = "INSERT OR IGNORE INTO temp.crew_touch (crew_id, at) VALUES (?1, ?2)";

/// The minutes from `?1` to `?2`, computed as `spoolite_flight.block_minutes` is;
/// once per flight or duty, not once per crew member (two dates parsed and a
/// number rounded through text cost as much as the row's insert).
const MINUTES: &str =
    "SELECT round((julianday(rtrim(?2, 'Z')) - julianday(rtrim(?1, 'Z'))) * 1440, 2)";

/// The minutes from `start` to `end`, none without an end.
fn minutes(tx: &Connection, start: &str, end: Option<&str>) -> Result<Option<f64>, StoreError> {
    Ok(match end {
        Some(end) => tx
            .prepare_cached(MINUTES)?
            .query_row([start, end], |row| row.get(0))?,
        None => None,
    })
}

/// A flight's times as its crew rows hold them: the off-blocks, the on-blocks
/// (None without one) and whether there is block time (on-blocks not before
/// off-blocks).
struct FlightTimes<'a> {
    off_blocks: &'a str,
    on_blocks: Option<&'a str>,
    block_time: bool,
}

impl<'a> FlightTimes<'a> {
    fn new(off_blocks: &'a str, on_blocks: Option<&'a str>) -> FlightTimes<'a> {
        let block_time = on_blocks.is_some_and(|on| !before(on, off_blocks));
        FlightTimes {
            off_blocks,
            on_blocks,
            block_time,
        }
    }
}

/// Writes one row per crew member of the flight `(number, id)` by `insert`
/// (`FLIGHT_ROW` or `HELD_FLIGHT_ROW`), the minutes computed once for all of them
/// (none without block time).
fn write_flight_members(
    tx: &Connection,
    insert: &str,
    (flight_ref, flight_id): (i64, &str),
    times: &FlightTimes<'_>,
    crew: &[crew::Member],
) -> Result<(), StoreError> {
    if crew.is_empty() {
        return Ok(());
    }
    let minutes = match times.block_time {
        true => minutes(tx, times.off_blocks, times.on_blocks)?,
        false => None,
    };
    let mut insert = tx.prepare_cached(insert)?;
    for member in crew {
        insert.execute(rusqlite::params![
            flight_ref,
            member.id(),
            member.role().as_str(),
            member.function().as_str(),
            flight_id,
            times.off_blocks,
            times.on_blocks,
            minutes
        ])?;
    }
    Ok(())
}

/// Writes one row per crew member of the duty `(number, id)` by `insert`
/// (`DUTY_ROW` or `HELD_DUTY_ROW`), as `write_flight_members` (no end: open, no
/// minutes).
fn write_duty_members(
    tx: &Connection,
    insert: &str,
    (duty_ref, duty_id): (i64, &str),
    (start, end): (&str, Option<&str>),
    crew: &[crew::Member],
    duty_type: crew::DutyType,
) -> Result<(), StoreError> {
    if crew.is_empty() {
        return Ok(());
    }
    let minutes = minutes(tx, start, end)?;
    let mut insert = tx.prepare_cached(insert)?;
    for member in crew {
        insert.execute(rusqlite::params![
            duty_ref,
            member.id(),
            member.role().as_str(),
            member.function().as_str(),
            duty_id,
            start,
            end,
            minutes,
            duty_type.as_str()
        ])?;
    }
    Ok(())
}

/// The crew rows of the flights in `scope`, deleted and written again from their
/// live rows; the caller computes the periods after (`periods`). With `sorted`, the
/// crew tables' secondary indexes are dropped first and built again after, by one
/// sort each, instead of taking a random insert per row (a first ingest of 1M
/// events writes about a million crew rows). `all_periods`: the caller computes
/// every period again after (`write_rows`).
pub(super) fn recompute(
    tx: &Connection,
    scope: Scope,
    sorted: bool,
    all_periods: bool,
) -> Result<(), StoreError> {
    let dropped = match sorted {
        true => Some([
            rebuild::drop_indexes_of(tx, "spoolite_crew_flight")?,
            rebuild::drop_indexes_of(tx, "spoolite_crew_duty")?,
        ]),
        false => None,
    };
    write_rows(tx, scope, all_periods)?;
    for indexes in dropped.into_iter().flatten() {
        indexes.rebuild(tx)?;
    }
    Ok(())
}

/// Deletes the crew rows of the flights in `scope` and writes them again.
/// `all_periods`: every period is computed again after, so the noted flights'
/// rows need not note which periods they touch (`temp.crew_touch`,
/// `temp.crew_fdp_noted`).
fn write_rows(tx: &Connection, scope: Scope, all_periods: bool) -> Result<(), StoreError> {
    let refs = scope.refs();
    let noting = scope == Scope::Noted && !all_periods;
    if scope == Scope::All {
        tx.execute_batch("DELETE FROM spoolite_crew_flight; DELETE FROM spoolite_crew_duty;")?;
    } else {
        if noting {
            // The periods around the flight rows about to go, and of the duties.
            touch(tx, refs)?;
            tx.execute(
                &format!("INSERT OR IGNORE INTO temp.crew_fdp_noted (ref) {refs}"),
                [],
            )?;
        }
        tx.execute(
            &format!("DELETE FROM spoolite_crew_flight WHERE flight_ref IN ({refs})"),
            [],
        )?;
        tx.execute(
            &format!("DELETE FROM spoolite_crew_duty WHERE duty_ref IN ({refs})"),
            [],
        )?;
    }
    flights(tx, refs)?;
    if noting {
        touch(tx, refs)?;
    }
    duties(tx, refs)
}

/// Notes the (crew member, off-blocks) of the operating crew rows of the flights
/// numbered by `refs`, whose duties' periods follow them.
fn touch(tx: &Connection, refs: &str) -> Result<(), StoreError> {
    tx.execute(
        &format!(
            "INSERT OR IGNORE INTO temp.crew_touch (crew_id, at)
             SELECT c.crew_id, c.off_blocks_utc FROM ({refs}) AS t
             CROSS JOIN spoolite_crew_flight AS c ON c.flight_ref = t.ref
             WHERE c.role = 'operating'"
        ),
        [],
    )?;
    Ok(())
}

/// The duties whose periods a batch computes again, beyond those it noted: each
/// duty of a touched crew member that holds the touched off-blocks (from its
/// start to its end, or on while open). Two index ranges find them without
/// reading every duty of the crew member: the duties begun in the two days before
/// the instant, and the open ones and those of over two days (a partial index of
/// few rows); the exact test orders instants by time.
const TOUCHED_DUTIES: &str = "INSERT OR IGNORE INTO temp.crew_fdp_noted (ref)
    SELECT d.duty_ref FROM temp.crew_touch AS t
    CROSS JOIN spoolite_crew_duty AS d INDEXED BY spoolite_crew_duty_crew
        ON d.crew_id = t.crew_id AND d.duty_start_utc <= substr(t.at, 1, 19) || 'Z'
        AND d.duty_start_utc >= strftime('%Y-%m-%dT%H:%M:%S', rtrim(t.at, 'Z'), '-2 days', '-1 second')
    WHERE rtrim(d.duty_start_utc, 'Z') <= rtrim(t.at, 'Z')
        AND (d.duty_end_utc IS NULL OR rtrim(d.duty_end_utc, 'Z') >= rtrim(t.at, 'Z'))
    UNION
    SELECT d.duty_ref FROM temp.crew_touch AS t
    CROSS JOIN spoolite_crew_duty AS d INDEXED BY spoolite_crew_duty_long
        ON d.crew_id = t.crew_id AND d.duty_start_utc <= substr(t.at, 1, 19) || 'Z'
    WHERE (d.duty_end_utc IS NULL OR d.duty_minutes > 2880)
        AND rtrim(d.duty_start_utc, 'Z') <= rtrim(t.at, 'Z')
        AND (d.duty_end_utc IS NULL OR rtrim(d.duty_end_utc, 'Z') >= rtrim(t.at, 'Z'))";

/// The noted duties that can have a period, in crew order: the period of each is
/// a look-up of its crew member's flights in the crew index, and its row an insert
/// into the periods' primary key, both in crew order too; taken in the order of
/// their numbers instead, each is a random read of the crew index (BENCHMARKS.md,
/// "Growth: crew rows and periods in crew order").
const NOTED_DUTIES: &str = "CREATE TEMP TABLE IF NOT EXISTS crew_fdp_duty (
        crew_id TEXT NOT NULL, duty_start_utc TEXT NOT NULL, duty_ref INTEGER NOT NULL,
        duty_id TEXT NOT NULL, function TEXT NOT NULL, duty_type TEXT NOT NULL,
        duty_end_utc TEXT,
        PRIMARY KEY (crew_id, duty_start_utc, duty_ref)) WITHOUT ROWID;
    DELETE FROM temp.crew_fdp_duty;
    INSERT INTO temp.crew_fdp_duty
    SELECT d.crew_id, d.duty_start_utc, d.duty_ref, d.duty_id, d.function, d.duty_type,
           d.duty_end_utc
    FROM temp.crew_fdp_noted AS t
    CROSS JOIN spoolite_crew_duty AS d ON d.duty_ref = t.ref
    WHERE d.duty_type IN ('flight_duty', 'ground_duty', 'airport_standby')
    ORDER BY d.crew_id, d.duty_start_utc, d.duty_ref";

/// The flight duty period of each duty in `{duties}` (columns as
/// `spoolite_crew_duty`'s; see the module's doc): the last operating flight of its
/// crew member whose off-blocks lies in the duty, by the crew index's range of
/// that crew member (from the duty's start's second to its end's; the exact test
/// orders instants by time), of several at that off-blocks the one with the latest
/// on-blocks (`crew::flight_duty_period`), then its on-blocks, or the duty's end
/// where it has no block time.
fn periods_sql(duties: &str) -> String {
    format!(
        "WITH last AS MATERIALIZED (
             SELECT d.duty_ref, d.crew_id, d.duty_id, d.function, d.duty_type,
                    d.duty_start_utc, d.duty_end_utc,
                    CASE WHEN d.duty_type <> 'airport_standby' THEN (
                        SELECT CASE WHEN f.block_minutes IS NOT NULL THEN f.on_blocks_utc
                                    ELSE '' END
                        FROM spoolite_crew_flight AS f
                        WHERE f.crew_id = d.crew_id
                            AND f.off_blocks_utc >= substr(d.duty_start_utc, 1, 19)
                            AND f.off_blocks_utc <= coalesce(substr(d.duty_end_utc, 1, 19) || 'Z', '~')
                            AND f.role = 'operating'
                            AND rtrim(f.off_blocks_utc, 'Z') >= rtrim(d.duty_start_utc, 'Z')
                            AND (d.duty_end_utc IS NULL
                                 OR rtrim(f.off_blocks_utc, 'Z') <= rtrim(d.duty_end_utc, 'Z'))
                        ORDER BY rtrim(f.off_blocks_utc, 'Z') DESC,
                                 CASE WHEN f.block_minutes IS NOT NULL
                                      THEN rtrim(f.on_blocks_utc, 'Z') END DESC
                        LIMIT 1)
                    END AS flight_end
             FROM {duties} AS d
             WHERE d.duty_type IN ('flight_duty', 'ground_duty', 'airport_standby')
         ), ends AS (
             SELECT duty_ref, crew_id, duty_id, function, duty_start_utc,
                    CASE WHEN duty_type = 'airport_standby' OR flight_end = ''
                         THEN duty_end_utc ELSE flight_end END AS end_utc
             FROM last
             WHERE duty_type = 'airport_standby' OR flight_end IS NOT NULL
         )
         INSERT INTO spoolite_crew_fdp
             (duty_ref, crew_id, duty_id, function, fdp_start_utc, fdp_end_utc, fdp_minutes)
         SELECT duty_ref, crew_id, duty_id, function, duty_start_utc, end_utc,
                round((julianday(rtrim(end_utc, 'Z')) - julianday(rtrim(duty_start_utc, 'Z')))
                      * 1440, 2)
         FROM ends"
    )
}

/// Computes the flight duty periods again: of every duty (`Scope::All`: `all_periods`,
/// the table's index dropped and built again by one sort), or of the duties noted
/// and touched (by `periods_sql`, a look-up of each duty's crew member's flights).
pub(super) fn periods(tx: &Connection, scope: Scope) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    match scope {
        Scope::All => {
            tx.execute_batch("DELETE FROM spoolite_crew_fdp")?;
            let dropped = rebuild::drop_indexes_of(tx, "spoolite_crew_fdp")?;
            all_periods(tx)?;
            dropped.rebuild(tx)?;
        }
        Scope::Noted => {
            tx.execute_batch(TOUCHED_DUTIES)?;
            tx.execute_batch(
                "DELETE FROM spoolite_crew_fdp WHERE duty_ref IN (SELECT ref FROM temp.crew_fdp_noted)",
            )?;
            tx.execute_batch(NOTED_DUTIES)?;
            tx.execute_batch(&periods_sql("temp.crew_fdp_duty"))?;
            tx.execute_batch("DELETE FROM temp.crew_fdp_duty")?;
        }
    }
    log::debug!(
        "computed the flight duty periods of {} duties again in {:?}",
        match scope {
            Scope::All => "all",
            Scope::Noted => "the noted",
        },
        started.elapsed()
    );
    Ok(())
}

/// The noted flights with an off-blocks, their times and the payload whose crew
/// they take: their latest live crew_assignment (by instant, the index's range of
/// the flight's live assignments), else their first live off-blocks. The loops
/// run in the order written (CROSS JOIN: SQLite keeps it): the noted flights, each
/// one's row, its off-blocks found by key columns; left to itself the planner
/// starts from the live rows' index of every off-blocks in the table.
fn flights_sql(refs: &str) -> String {
    format!(
        "SELECT f.ref, f.flight_id, f.off_blocks_utc, f.on_blocks_utc,
                coalesce(
                    (SELECT a.payload FROM spoolite_event AS a
                     WHERE a.flight_id = f.flight_id AND a.retracted = 0
                         AND a.event_kind = 'crew_assignment'
                     ORDER BY rtrim(a.instant_utc, 'Z') DESC LIMIT 1),
                    d.payload)
         FROM ({refs}) AS t
         CROSS JOIN spoolite_flight AS f ON f.ref = t.ref
         CROSS JOIN spoolite_event AS d
             ON d.flight_id = f.flight_id AND d.retracted = 0 AND d.event_kind = 'off_blocks'
             AND d.instant_utc = f.off_blocks_utc
         WHERE f.off_blocks_utc IS NOT NULL"
    )
}

/// The noted duties' start and end and their first live duty_start, whose crew
/// they take; in the order written, as `flights_sql` says why. Each flight's
/// duty rows are read once, one range of the flight index (the two kinds sort
/// next to each other), grouped in the noted flights' order. The first
/// duty_start is found through that index too: by the kind and instant index the
/// planner prefers, one instant's duty_starts of every flight (ten on average at
/// 1M events) are each a read of the table to test its flight id.
fn duties_sql(refs: &str) -> String {
    format!(
        "WITH times AS (
             SELECT t.ref, f.flight_id,
                    min(rtrim(e.instant_utc, 'Z')) FILTER (WHERE e.event_kind = 'duty_start')
                        || 'Z' AS start_utc,
                    max(rtrim(e.instant_utc, 'Z')) FILTER (WHERE e.event_kind = 'duty_end')
                        || 'Z' AS end_utc
             FROM ({refs}) AS t
             CROSS JOIN spoolite_flight AS f ON f.ref = t.ref
             CROSS JOIN spoolite_event AS e INDEXED BY spoolite_event_flight
                 ON e.flight_id = f.flight_id AND e.event_kind IN ('duty_end', 'duty_start')
                 AND e.retracted = 0
             GROUP BY t.ref
         ), closed AS (
             SELECT ref, flight_id, start_utc,
                    CASE WHEN rtrim(end_utc, 'Z') >= rtrim(start_utc, 'Z') THEN end_utc END
                        AS end_utc
             FROM times WHERE start_utc IS NOT NULL
         )
         SELECT c.ref, c.flight_id, c.start_utc, c.end_utc, d.payload
         FROM closed AS c
         CROSS JOIN spoolite_event AS d INDEXED BY spoolite_event_flight
             ON d.flight_id = c.flight_id AND d.retracted = 0 AND d.event_kind = 'duty_start'
             AND d.instant_utc = c.start_utc"
    )
}

/// Every duty of a crew member that can have a period, in crew id order (a sort:
/// the duties of one crew member lie all over the table).
const ALL_DUTIES: &str = "SELECT crew_id, duty_ref, duty_id, function, duty_type,
        duty_start_utc, duty_end_utc
    FROM spoolite_crew_duty
    WHERE duty_type IN ('flight_duty', 'ground_duty', 'airport_standby')
    ORDER BY +crew_id";

/// Every operating crew row of a flight, in crew id order, with whether it has
/// block time.
const ALL_FLIGHTS: &str = "SELECT crew_id, off_blocks_utc, on_blocks_utc,
        block_minutes IS NOT NULL
    FROM spoolite_crew_flight WHERE role = 'operating'
    ORDER BY +crew_id";

/// A period's row, its minutes computed as every crew row's are.
const PERIOD_ROW: &str = "INSERT INTO spoolite_crew_fdp
        (duty_ref, crew_id, duty_id, function, fdp_start_utc, fdp_end_utc, fdp_minutes)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6,
            round((julianday(rtrim(?6, 'Z')) - julianday(rtrim(?5, 'Z'))) * 1440, 2))";

/// One crew row of a duty, as `all_periods` reads it.
struct DutyRow {
    crew_id: String,
    duty_ref: i64,
    duty_id: String,
    function: String,
    duty_type: String,
    start: String,
    end: Option<String>,
}

/// One operating crew row of a flight, as `all_periods` reads it.
struct FlightRow {
    crew_id: String,
    off_blocks: String,
    on_blocks: Option<String>,
    block_time: bool,
}

/// The period of every duty, by `crew::flight_duty_period` over each crew
/// member's duties and flights: both tables read once each, sorted by crew id and
/// merged, one crew member's rows in memory at a time, the periods written in the
/// table's key order (crew id, start). A look-up of each duty's
/// flights (`periods_sql`) costs a random read of the crew index per duty, which
/// at 10M events was most of an upgrade's time.
fn all_periods(tx: &Connection) -> Result<(), StoreError> {
    let micros = |text: &str| crate::ftl::time::parse_instant(text).unwrap_or(i64::MIN);
    let mut duties_statement = tx.prepare(ALL_DUTIES)?;
    let mut duties = duties_statement.query_map([], |row| {
        Ok(DutyRow {
            crew_id: row.get(0)?,
            duty_ref: row.get(1)?,
            duty_id: row.get(2)?,
            function: row.get(3)?,
            duty_type: row.get(4)?,
            start: row.get(5)?,
            end: row.get(6)?,
        })
    })?;
    let mut flights_statement = tx.prepare(ALL_FLIGHTS)?;
    let mut flights = flights_statement.query_map([], |row| {
        Ok(FlightRow {
            crew_id: row.get(0)?,
            off_blocks: row.get(1)?,
            on_blocks: row.get(2)?,
            block_time: row.get(3)?,
        })
    })?;
    let mut insert = tx.prepare(PERIOD_ROW)?;
    let mut next_flight = flights.next().transpose()?;
    let mut next_duty = duties.next().transpose()?;
    while let Some(first) = next_duty.take() {
        // One crew member's duties, and their flights in off-blocks order.
        let crew_id = first.crew_id.clone();
        let mut of_crew = vec![first];
        next_duty = duties.next().transpose()?;
        while let Some(duty) = next_duty.take_if(|d| d.crew_id == crew_id) {
            of_crew.push(duty);
            next_duty = duties.next().transpose()?;
        }
        while next_flight.as_ref().is_some_and(|f| f.crew_id < crew_id) {
            next_flight = flights.next().transpose()?;
        }
        let mut crew_flights: Vec<(crew::FlightSpan, FlightRow)> = Vec::new();
        while let Some(flight) = next_flight.take_if(|f| f.crew_id == crew_id) {
            let span = crew::FlightSpan {
                off_blocks: micros(&flight.off_blocks),
                on_blocks: match (&flight.on_blocks, flight.block_time) {
                    (Some(on), true) => Some(micros(on)),
                    _ => None,
                },
                operating: true,
            };
            crew_flights.push((span, flight));
            next_flight = flights.next().transpose()?;
        }
        crew_flights.sort_by_key(|(span, _)| span.off_blocks);
        let spans: Vec<crew::FlightSpan> = crew_flights.iter().map(|(span, _)| *span).collect();
        // In the table's key order: at its end, not all over it.
        of_crew.sort_by(|a, b| (&a.start, a.duty_ref).cmp(&(&b.start, b.duty_ref)));
        for duty in &of_crew {
            let span = crew::DutySpan {
                start: micros(&duty.start),
                end: duty.end.as_deref().map(micros),
                duty_type: crew::DutyType::from_text(&duty.duty_type),
            };
            let Some((_, end)) = crew::flight_duty_period(&span, &spans) else {
                continue;
            };
            // The end as the rows write it: the duty's own, or that on-blocks.
            let end_text = match end {
                None => None,
                Some(end) if Some(end) == span.end => duty.end.clone(),
                Some(end) => crew_flights
                    .iter()
                    .find(|(s, _)| s.on_blocks == Some(end))
                    .and_then(|(_, f)| f.on_blocks.clone()),
            };
            insert.execute(rusqlite::params![
                duty.duty_ref,
                crew_id,
                duty.duty_id,
                duty.function,
                duty.start,
                end_text
            ])?;
        }
    }
    Ok(())
}

/// Writes the crew rows of the flights numbered by `refs` that have an off-blocks.
fn flights(tx: &Connection, refs: &str) -> Result<(), StoreError> {
    let mut select = tx.prepare(&flights_sql(refs))?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let flight_id: String = row.get(1)?;
        let (off_blocks, on_blocks): (String, Option<String>) = (row.get(2)?, row.get(3)?);
        let crew = crew::of_payload(&row.get::<_, String>(4)?);
        let flight = (row.get(0)?, flight_id.as_str());
        let times = FlightTimes::new(&off_blocks, on_blocks.as_deref());
        write_flight_members(tx, FLIGHT_ROW, flight, &times, &crew)?;
    }
    Ok(())
}

/// Writes the crew rows of the duties numbered by `refs` that have a live
/// `duty_start`: the first one's crew and type, and the last live `duty_end`
/// unless it is before the start (open: no end, no minutes).
fn duties(tx: &Connection, refs: &str) -> Result<(), StoreError> {
    let mut select = tx.prepare(&duties_sql(refs))?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let duty_id: String = row.get(1)?;
        let (start, end): (String, Option<String>) = (row.get(2)?, row.get(3)?);
        let (crew, duty_type) = crew::of_duty_payload(&row.get::<_, String>(4)?);
        let duty = (row.get(0)?, duty_id.as_str());
        write_duty_members(
            tx,
            DUTY_ROW,
            duty,
            (&start, end.as_deref()),
            &crew,
            duty_type,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sql: &str) -> Vec<String> {
        super::super::query_plan(CREATE_NOTED, sql)
    }

    #[test]
    fn a_batch_reads_the_rows_of_its_noted_flights_only() {
        for sql in [
            flights_sql(Scope::Noted.refs()),
            duties_sql(Scope::Noted.refs()),
        ] {
            // The only table scanned is the noted flights' (a scan of `times`
            // reads the rows the noted flights' loop yields).
            let plan = plan(&sql);
            let scans: Vec<&String> = plan.iter().filter(|s| s.starts_with("SCAN")).collect();
            assert!(scans[0].contains("crew_recompute"), "{plan:?}");
            assert!(
                scans
                    .iter()
                    .all(|step| step.contains("crew_recompute") || *step == "SCAN times"),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn a_noted_duty_reads_its_own_span_of_its_crew_members_flights_once() {
        // Bounded only below, an open-ended range read every later flight of
        // the crew member for each duty, and the period's subquery ran once per
        // use of its result: 65 of the 125 s of 1M events into 2M.
        let setup = format!("{CREATE_FDP_NOTED}{NOTED_DUTIES}");
        let plan = super::super::query_plan(&setup, &periods_sql("temp.crew_fdp_duty"));
        let searches: Vec<&String> = plan.iter().filter(|s| s.starts_with("SEARCH")).collect();
        assert_eq!(searches.len(), 1, "{plan:?}");
        assert!(
            searches[0].contains(
                "INDEX spoolite_crew_flight_crew (crew_id=? AND off_blocks_utc>? AND off_blocks_utc<?)"
            ),
            "{plan:?}"
        );
        // The duties are read in crew order, from the table sorted so.
        assert!(plan.iter().any(|s| s == "SCAN d"), "{plan:?}");
    }

    #[test]
    fn a_noted_duty_finds_its_first_duty_start_in_its_flights_rows() {
        // By the kind and instant index, every flight's duty_start at that
        // instant is read from the table to test its flight id: at 1M events a
        // correction of every flight spent 8 of its 24 s there.
        let plan = plan(&duties_sql(Scope::Noted.refs()));
        let searches: Vec<&String> = plan
            .iter()
            .filter(|step| step.starts_with("SEARCH e ") || step.starts_with("SEARCH d "))
            .collect();
        assert_eq!(searches.len(), 2, "{plan:?}");
        assert!(
            searches
                .iter()
                .all(|step| step
                    .contains("INDEX spoolite_event_flight (flight_id=? AND event_kind=?)")),
            "{plan:?}"
        );
    }
}
