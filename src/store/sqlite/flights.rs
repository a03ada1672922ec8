//! A batch's flights: each numbered in `spoolite_flight` the first time the
//! database sees it, and its times (the first off-blocks and takeoff, the last landing and
//! on-blocks of its live events, which `flight_times` reads) kept up to date in
//! the batch's own transaction.
//!
//! A key's flight, kind and instant never change (the key is their digest), and
//! merging an instant a flight's times already hold changes nothing, so every
//! live version in the file can be merged as it is read, before any outcome is
//! known. One flight's events sit together in a file, so a flight is written once
//! per run of its events: inserted with its times when new, merged into the stored
//! ones otherwise. What merging cannot do is take an instant out: a flight whose
//! key ends the file not live, though the file held a live version of it or the
//! key was live before, is noted (in a temporary table, so memory stays bounded)
//! and its times computed again from its live rows once every row is written.
//!
//! A flight is found by the index of its lowered id (schema 6), which also finds
//! the other spellings of a new flight id that differ from it only in letter
//! case: the same one look-up per run of a flight's events, and one more index
//! entry per new flight. Such a spelling is numbered as a flight of its own (the
//! key is computed from the id as sent) and noted for the operator.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use super::crew;
use super::slotted::FlightSeen;
use crate::batch::event::before;
use crate::store::common::CaseVariants;
use crate::store::error::StoreError;

/// The event kinds a flight's times are made of, in the order of
/// `spoolite_flight`'s four columns; the first two count their earliest event, the
/// last two their latest.
const KINDS: [&str; 4] = ["off_blocks", "takeoff", "landing", "on_blocks"];

/// Whether `event_kind` is one a flight's times are made of.
pub(super) fn is_timed(event_kind: &str) -> bool {
    KINDS.contains(&event_kind)
}

/// Merges a run's times into the stored ones: per column the earlier (or, for
/// landing and on-blocks, the later) by time, `rtrim(…, 'Z')` ordering instants
/// by time; SQLite's two-argument `min`/`max` are NULL when either is.
const MERGE: &str = "UPDATE spoolite_flight SET
    off_blocks_utc = coalesce(min(rtrim(?2, 'Z'), rtrim(off_blocks_utc, 'Z')) || 'Z', ?2, off_blocks_utc),
    takeoff_utc = coalesce(min(rtrim(?3, 'Z'), rtrim(takeoff_utc, 'Z')) || 'Z', ?3, takeoff_utc),
    landing_utc = coalesce(max(rtrim(?4, 'Z'), rtrim(landing_utc, 'Z')) || 'Z', ?4, landing_utc),
    on_blocks_utc = coalesce(max(rtrim(?5, 'Z'), rtrim(on_blocks_utc, 'Z')) || 'Z', ?5, on_blocks_utc)
WHERE ref = ?1";

/// The flights whose times are to be computed again, for the batch in progress.
const CREATE_RECOMPUTE: &str =
    "CREATE TEMP TABLE IF NOT EXISTS flight_recompute (ref INTEGER PRIMARY KEY)";

/// The noted flights' times computed again from their live rows.
const RECOMPUTE: &str = "UPDATE spoolite_flight SET
    off_blocks_utc = (SELECT min(rtrim(instant_utc, 'Z')) || 'Z' FROM spoolite_event
                      WHERE flight_id = spoolite_flight.flight_id AND retracted = 0 AND event_kind = 'off_blocks'),
    takeoff_utc = (SELECT min(rtrim(instant_utc, 'Z')) || 'Z' FROM spoolite_event
                   WHERE flight_id = spoolite_flight.flight_id AND retracted = 0 AND event_kind = 'takeoff'),
    landing_utc = (SELECT max(rtrim(instant_utc, 'Z')) || 'Z' FROM spoolite_event
                   WHERE flight_id = spoolite_flight.flight_id AND retracted = 0 AND event_kind = 'landing'),
    on_blocks_utc = (SELECT max(rtrim(instant_utc, 'Z')) || 'Z' FROM spoolite_event
                     WHERE flight_id = spoolite_flight.flight_id AND retracted = 0 AND event_kind = 'on_blocks')
WHERE ref IN (SELECT ref FROM temp.flight_recompute)";

/// Every stored flight whose id, lowered, is the one given lowered: the flight
/// itself and its spellings that differ only in letter case, through the index on
/// `lower(flight_id)` (SQLite's `lower` folds ASCII letters only, and flight ids
/// are ASCII).
const SPELLINGS: &str =
    "SELECT ref, flight_id FROM spoolite_flight WHERE lower(flight_id) = lower(?1)";

/// The events of one flight read one after the other.
struct Run {
    flight_id: String,
    flight_ref: i64,
    /// Not yet in `spoolite_flight`: inserted, with its times, when the run ends.
    new: bool,
    /// The times of the run's live events, in `KINDS` order.
    times: [Option<String>; 4],
    /// What the run read of its flight's crew rows.
    crew: crew::RunCrew,
}

/// A batch's flights as its events are read, and those whose times must be
/// computed again at the end.
#[derive(Default)]
pub(super) struct Flights {
    run: Option<Run>,
    /// The number the next new flight gets (looked up at the batch's first).
    next_ref: Option<i64>,
    /// The number of the batch's first new flight: every flight numbered below
    /// it was stored before the batch (numbers are given in order).
    first_new_ref: Option<i64>,
    /// Whether a flight was noted for `finish` to compute again.
    any_recompute: bool,
    /// New flight ids that differ only in letter case from a stored one.
    case_variants: CaseVariants,
    /// The flights whose crew rows `finish` computes again.
    crew: crew::Noted,
}

/// The number of the stored flight `flight_id`, if there is one, and the stored
/// ids that differ from it only in letter case.
fn spellings(tx: &Connection, flight_id: &str) -> Result<(Option<i64>, Vec<String>), StoreError> {
    let mut found = None;
    let mut others = Vec::new();
    let mut statement = tx.prepare_cached(SPELLINGS)?;
    let mut rows = statement.query([flight_id])?;
    while let Some(row) = rows.next()? {
        match row.get_ref(1)? {
            ValueRef::Text(stored) if stored == flight_id.as_bytes() => found = Some(row.get(0)?),
            ValueRef::Text(other) => others.push(String::from_utf8_lossy(other).into_owned()),
            // flight_id is TEXT NOT NULL, written only by this module.
            _ => {}
        }
    }
    Ok((found, others))
}

impl Flights {
    /// The number of the flight of an event read from the file, given now if the
    /// flight is new; a live event of a timed kind adds its instant to the flight's
    /// times.
    pub(super) fn stage(
        &mut self,
        tx: &Connection,
        (flight_id, event_kind, instant_utc): (&str, &str, &str),
        retracted: bool,
        payload: &str,
    ) -> Result<i64, StoreError> {
        if self
            .run
            .as_ref()
            .is_none_or(|run| run.flight_id != flight_id)
        {
            self.end_run(tx)?;
            self.run = Some(self.start_run(tx, flight_id)?);
        }
        // A flight stored before the batch has its crew rows noted by the batch's
        // writes (`written`), not by what its runs read.
        let stored_before = self
            .run
            .as_ref()
            .is_some_and(|run| self.stored_before(run.flight_ref));
        let run = self.run.as_mut().expect("a run was started");
        if !stored_before {
            run.crew
                .read(run.new, (event_kind, instant_utc), retracted, payload);
        }
        if let Some(column) = KINDS.iter().position(|kind| *kind == event_kind)
            && !retracted
        {
            let held = &mut run.times[column];
            let replace = match held {
                None => true,
                Some(held) if column < 2 => before(instant_utc, held),
                Some(held) => before(held, instant_utc),
            };
            if replace {
                *held = Some(instant_utc.to_owned());
            }
        }
        Ok(run.flight_ref)
    }

    fn start_run(&mut self, tx: &Connection, flight_id: &str) -> Result<Run, StoreError> {
        let (found, others) = spellings(tx, flight_id)?;
        if found.is_none() {
            for other in &others {
                self.case_variants.note(flight_id, other);
            }
        }
        let (flight_ref, new) = match found {
            Some(flight_ref) => (flight_ref, false),
            None => {
                let next = match self.next_ref {
                    Some(next) => next,
                    None => tx.query_row(
                        "SELECT coalesce(max(ref), 0) + 1 FROM spoolite_flight",
                        [],
                        |row| row.get(0),
                    )?,
                };
                self.next_ref = Some(next + 1);
                self.first_new_ref.get_or_insert(next);
                (next, true)
            }
        };
        Ok(Run {
            flight_id: flight_id.to_owned(),
            flight_ref,
            new,
            times: Default::default(),
            crew: crew::RunCrew::default(),
        })
    }

    /// Writes the run of the flight read last: a new flight with its times, or
    /// the run's times merged into a stored flight's.
    pub(super) fn end_run(&mut self, tx: &Connection) -> Result<(), StoreError> {
        let Some(run) = self.run.take() else {
            return Ok(());
        };
        let [off_blocks, takeoff, landing, on_blocks] = &run.times;
        if run.new {
            tx.prepare_cached(
                "INSERT INTO spoolite_flight (ref, flight_id, off_blocks_utc, takeoff_utc, landing_utc,
                     on_blocks_utc) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                run.flight_ref,
                run.flight_id,
                off_blocks,
                takeoff,
                landing,
                on_blocks
            ])?;
        } else if run.times.iter().any(Option::is_some) {
            tx.prepare_cached(MERGE)?.execute(params![
                run.flight_ref,
                off_blocks,
                takeoff,
                landing,
                on_blocks
            ])?;
        }
        // After the flight's row: a new flight's crew rows read its minutes there.
        self.crew
            .end_run(tx, (run.flight_ref, &run.flight_id), run.crew)
    }

    /// What was seen of the flight of the event staged last when its run began.
    pub(super) fn seen(&self) -> FlightSeen {
        match &self.run {
            None => FlightSeen::Unknown,
            Some(run) if run.new => FlightSeen::First,
            Some(run) if self.stored_before(run.flight_ref) => FlightSeen::Stored,
            Some(_) => FlightSeen::Again,
        }
    }

    /// Whether the flight `flight_ref` was stored before the batch.
    fn stored_before(&self, flight_ref: i64) -> bool {
        self.first_new_ref.is_none_or(|first| flight_ref < first)
    }

    /// Notes, for `finish`, the crew rows of a flight stored before the batch
    /// when the batch writes a row of it of `event_kind`, a kind its crew rows are
    /// made of; call for every row inserted, and every row changed beyond its
    /// revision (`KeyEnd::changes_content`).
    pub(super) fn written(
        &mut self,
        tx: &Connection,
        flight_ref: i64,
        event_kind: &str,
    ) -> Result<(), StoreError> {
        if crew::is_crewed(event_kind) && self.stored_before(flight_ref) {
            self.crew.note(tx, flight_ref)?;
        }
        Ok(())
    }

    /// Notes that a key of `flight_ref` may have taken an instant out of its times.
    pub(super) fn recompute(&mut self, tx: &Connection, flight_ref: i64) -> Result<(), StoreError> {
        if !self.any_recompute {
            tx.execute_batch(CREATE_RECOMPUTE)?;
            tx.execute_batch("DELETE FROM temp.flight_recompute")?;
            self.any_recompute = true;
        }
        tx.prepare_cached("INSERT OR IGNORE INTO temp.flight_recompute (ref) VALUES (?1)")?
            .execute([flight_ref])?;
        Ok(())
    }

    /// Computes the noted flights' times again, then the crew rows of the flights
    /// and duties the batch holds events of; call once every row is written.
    /// Returns the new flight ids that differ only in letter case from another.
    /// `sorted`: the batch is large against the table (`rebuild::worth_it`).
    pub(super) fn finish(self, tx: &Connection, sorted: bool) -> Result<CaseVariants, StoreError> {
        if self.any_recompute {
            tx.execute_batch(RECOMPUTE)?;
            tx.execute_batch("DELETE FROM temp.flight_recompute")?;
        }
        self.crew.finish(tx, sorted)?;
        Ok(self.case_variants)
    }
}

#[cfg(test)]
mod tests {
    use super::before;

    #[test]
    fn instants_compare_by_time_fractions_included() {
        assert!(before("2026-11-29T10:05:00Z", "2026-11-29T10:05:00.5Z"));
        assert!(!before("2026-11-29T10:05:00.5Z", "2026-11-29T10:05:00Z"));
        assert!(before("2026-11-29T10:05:00.25Z", "2026-11-29T10:05:00.5Z"));
        assert!(!before("2026-11-29T10:05:00Z", "2026-11-29T10:05:00Z"));
    }
}
