//! The batch's events that have a slot, noted for the slot rules (the contract's
//! *Slots*) in the temporary table `spoolite_slotted`, with their place in the
//! file.
//!
//! Only a busy slot, one that holds or will hold more than one row, can hold a
//! conflict or a row to displace: a slot of one row reads as sent. A first ingest
//! of corrected times names mostly slots of one row, so an event is noted only
//! where its slot may be busy, judged one run of a flight's events at a time
//! (the runs `flights` numbers):
//!
//! - a run of a flight stored before the batch: all its events (a stored row may
//!   share their slot);
//! - a run of a flight the database does not hold: the events of each slot the
//!   run names more than once, or all of them once the run is longer than
//!   `RUN_NOTES`;
//! - a second run of a flight in the batch (a file in time order rather than
//!   flight order): the runs before it were judged alone, so every event with a
//!   slot the batch staged is noted, read back from its sorted runs once they
//!   are all staged (`Runs::each_staged`).
//!
//! Any superset of the busy slots' events is correct: `BUSY_SLOTS` keeps only
//! the slots that are busy.

use std::ops::Range;

use rusqlite::{Connection, Statement, params};

use super::runs::{Runs, Staged};
use crate::store::error::StoreError;

/// The events of one run held in memory to find its repeated slots; a longer
/// run has all its events noted.
const RUN_NOTES: usize = 256;

/// The batch's events that may share a busy slot.
const CREATE_SLOTTED: &str = "CREATE TEMP TABLE IF NOT EXISTS spoolite_slotted (
        flight_id TEXT NOT NULL,
        event_kind TEXT NOT NULL,
        slot TEXT NOT NULL,
        record_index INTEGER NOT NULL,
        key BLOB NOT NULL,
        revision INTEGER,
        flight_ref INTEGER NOT NULL,
        PRIMARY KEY (flight_id, event_kind, slot, record_index)
    ) WITHOUT ROWID;
    DELETE FROM temp.spoolite_slotted;";

/// An event noted twice (a run's, then read back from the runs) is one row.
const NOTE: &str = "INSERT OR IGNORE INTO temp.spoolite_slotted
        (flight_id, event_kind, slot, record_index, key, revision, flight_ref)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// The slots noted that hold, or will hold, more than one row: more than one
/// event of the batch, or a stored row besides.
pub(super) const BUSY_SLOTS: &str = "DROP TABLE IF EXISTS temp.spoolite_busy_slot;
    CREATE TEMP TABLE spoolite_busy_slot AS
    WITH named AS (
        SELECT flight_id, event_kind, slot, min(flight_ref) AS flight_ref, count(*) AS staged
        FROM temp.spoolite_slotted GROUP BY flight_id, event_kind, slot
    )
    SELECT flight_id, event_kind, slot, flight_ref FROM named AS n
    WHERE n.staged > 1 OR EXISTS (
        SELECT 1 FROM spoolite_event AS e
        WHERE e.flight_id = n.flight_id AND e.event_kind = n.event_kind AND e.slot = n.slot
    );";

/// Each busy slot's stored rows (record index -1), then its events in file
/// order: what `SlotClaims` meets, slot by slot.
pub(super) const BUSY_SLOT_EVENTS: &str =
    "SELECT b.flight_id, b.event_kind, b.slot, -1, e.key, e.source_revision
     FROM temp.spoolite_busy_slot AS b JOIN spoolite_event AS e
         ON e.flight_id = b.flight_id AND e.event_kind = b.event_kind AND e.slot = b.slot
     UNION ALL
     SELECT s.flight_id, s.event_kind, s.slot, s.record_index, s.key, s.revision
     FROM temp.spoolite_busy_slot AS b JOIN temp.spoolite_slotted AS s
         ON s.flight_id = b.flight_id AND s.event_kind = b.event_kind AND s.slot = b.slot
     ORDER BY 1, 2, 3, 4";

/// The busy slots, to settle once the batch's rows are written.
pub(super) const BUSY_SLOT_LIST: &str =
    "SELECT flight_id, event_kind, slot, flight_ref FROM temp.spoolite_busy_slot";

/// A slot's rows, as they read once the batch's rows are written.
pub(super) const SLOT_ROWS: &str =
    "SELECT rowid, source_revision, retracted, displaced, batch_ref FROM spoolite_event
     WHERE flight_id = ?1 AND event_kind = ?2 AND slot = ?3";

/// A row of a settled slot that reads as it did, but for `retracted` and
/// `displaced`.
pub(super) const SET_SLOT_ROW: &str =
    "UPDATE spoolite_event SET retracted = ?2, displaced = ?3 WHERE rowid = ?1";

/// A live row its slot displaces: this batch's change.
pub(super) const DISPLACE_SLOT_ROW: &str =
    "UPDATE spoolite_event SET retracted = 1, displaced = 1, batch_ref = ?2, updated_at = ?3,
         change_seq = ?4
     WHERE rowid = ?1";

/// What the database and the batch held of an event's flight when its run began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum FlightSeen {
    /// Neither holds an event of it: the run's events are all it has.
    First,
    /// Stored before the batch.
    Stored,
    /// An earlier run of the batch.
    Again,
    /// Not known (a dry run numbers no flight).
    #[default]
    Unknown,
}

/// One event of the run in memory: its kind and slot in `Slotted::texts`.
struct Note {
    index: u64,
    key: [u8; 32],
    revision: Option<i64>,
    event_kind: Range<usize>,
    slot: Range<usize>,
}

/// One row of `spoolite_slotted`.
struct Row<'a> {
    flight_id: &'a str,
    event_kind: &'a str,
    slot: &'a str,
    index: u64,
    key: &'a [u8; 32],
    revision: Option<i64>,
    flight_ref: i64,
}

impl<'a> Row<'a> {
    fn of(event: &Staged<'a>, slot: &'a str) -> Row<'a> {
        Row {
            flight_id: event.flight_id,
            event_kind: event.event_kind,
            slot,
            index: event.index,
            key: event.key,
            revision: event.revision,
            flight_ref: event.flight_ref,
        }
    }

    fn insert(&self, note: &mut Statement<'_>) -> Result<(), StoreError> {
        note.execute(params![
            self.flight_id,
            self.event_kind,
            self.slot,
            self.index as i64,
            &self.key[..],
            self.revision,
            self.flight_ref
        ])?;
        Ok(())
    }
}

/// The noting of a batch's events that have a slot.
#[derive(Default)]
pub(super) struct Slotted {
    /// Whether `spoolite_slotted` was made for this batch and may hold rows.
    table: bool,
    /// Whether every slotted event is to be read back from the runs at the end.
    read_back: bool,
    /// The run being read: its flight, and what was seen of it when it began.
    flight_ref: Option<i64>,
    flight_id: String,
    seen: FlightSeen,
    /// The run's events held back (a run of a `First` flight, while short).
    notes: Vec<Note>,
    texts: String,
    /// The run outgrew `RUN_NOTES`: its events are noted as they come.
    long: bool,
}

impl Slotted {
    /// Takes the next staged event of the file (with a slot or not), `seen`
    /// telling what its flight was when its run began.
    pub(super) fn stage(
        &mut self,
        tx: &Connection,
        event: &Staged<'_>,
        seen: FlightSeen,
    ) -> Result<(), StoreError> {
        if self.read_back {
            return Ok(());
        }
        if self.flight_ref != Some(event.flight_ref) {
            self.end_run(tx)?;
            self.flight_ref = Some(event.flight_ref);
            self.seen = seen;
        }
        let Some(slot) = event.slot else {
            return Ok(());
        };
        match self.seen {
            FlightSeen::Again | FlightSeen::Unknown => {
                self.read_back = true;
                self.notes.clear();
                Ok(())
            }
            FlightSeen::Stored => self.note(tx, event, slot),
            FlightSeen::First if self.long => self.note(tx, event, slot),
            FlightSeen::First if self.notes.len() == RUN_NOTES => {
                self.long = true;
                self.note_held(tx, |_| true)?;
                self.note(tx, event, slot)
            }
            FlightSeen::First => {
                if self.notes.is_empty() {
                    self.flight_id.clear();
                    self.flight_id.push_str(event.flight_id);
                }
                let event_kind = self.push_text(event.event_kind);
                let slot = self.push_text(slot);
                self.notes.push(Note {
                    index: event.index,
                    key: *event.key,
                    revision: event.revision,
                    event_kind,
                    slot,
                });
                Ok(())
            }
        }
    }

    /// Ends the staging: the last run judged, and every slotted event read back
    /// from `runs` where a flight came in more than one run. Returns whether
    /// `spoolite_slotted` holds any event.
    pub(super) fn finish(&mut self, tx: &Connection, runs: &Runs) -> Result<bool, StoreError> {
        self.end_run(tx)?;
        if self.read_back {
            self.make_table(tx)?;
            let mut note = tx.prepare_cached(NOTE)?;
            runs.each_staged(StoreError::Spill, |event| match event.slot {
                Some(slot) => Row::of(event, slot).insert(&mut note),
                None => Ok(()),
            })?;
        }
        Ok(self.table)
    }

    /// Judges the run read last: a `First` flight's events of the slots it
    /// named more than once are noted.
    fn end_run(&mut self, tx: &Connection) -> Result<(), StoreError> {
        if self.notes.len() > 1 {
            let mut order: Vec<usize> = (0..self.notes.len()).collect();
            let name = |at: usize| {
                let note = &self.notes[at];
                (
                    &self.texts[note.event_kind.clone()],
                    &self.texts[note.slot.clone()],
                )
            };
            order.sort_by(|&a, &b| name(a).cmp(&name(b)));
            let mut repeated = vec![false; self.notes.len()];
            for pair in order.windows(2) {
                if name(pair[0]) == name(pair[1]) {
                    repeated[pair[0]] = true;
                    repeated[pair[1]] = true;
                }
            }
            if repeated.contains(&true) {
                self.note_held(tx, |at| repeated[at])?;
            }
        }
        self.notes.clear();
        self.texts.clear();
        self.long = false;
        Ok(())
    }

    /// Notes the events held back that `which` picks (by place in `notes`).
    fn note_held(
        &mut self,
        tx: &Connection,
        which: impl Fn(usize) -> bool,
    ) -> Result<(), StoreError> {
        self.make_table(tx)?;
        let mut note = tx.prepare_cached(NOTE)?;
        for (at, held) in self.notes.iter().enumerate() {
            if which(at) {
                let row = Row {
                    flight_id: &self.flight_id,
                    event_kind: &self.texts[held.event_kind.clone()],
                    slot: &self.texts[held.slot.clone()],
                    index: held.index,
                    key: &held.key,
                    revision: held.revision,
                    flight_ref: self.flight_ref.unwrap_or_default(),
                };
                row.insert(&mut note)?;
            }
        }
        self.notes.clear();
        self.texts.clear();
        Ok(())
    }

    /// Notes one event at once.
    fn note(&mut self, tx: &Connection, event: &Staged<'_>, slot: &str) -> Result<(), StoreError> {
        self.make_table(tx)?;
        Row::of(event, slot).insert(&mut *tx.prepare_cached(NOTE)?)
    }

    fn make_table(&mut self, tx: &Connection) -> Result<(), StoreError> {
        if !self.table {
            tx.execute_batch(CREATE_SLOTTED)?;
            self.table = true;
        }
        Ok(())
    }

    fn push_text(&mut self, text: &str) -> Range<usize> {
        let start = self.texts.len();
        self.texts.push_str(text);
        start..self.texts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every look-up of a slot's rows is a search of the flight index or of a
    /// row by its rowid, never a scan of the event table (which grows to
    /// millions of rows while a batch names a few slots).
    #[test]
    fn a_slots_rows_are_found_through_an_index() {
        let setup = format!(
            "{CREATE_SLOTTED} CREATE TEMP TABLE spoolite_busy_slot (flight_id, event_kind, \
             slot, flight_ref);"
        );
        for sql in [
            BUSY_SLOTS
                .split_once(';')
                .map(|(_, create)| create)
                .unwrap_or_default(),
            BUSY_SLOT_EVENTS,
            SLOT_ROWS,
            SET_SLOT_ROW,
            DISPLACE_SLOT_ROW,
        ] {
            let mut sql = sql.replace("CREATE TEMP TABLE spoolite_busy_slot AS", "");
            for n in 1..=4 {
                sql = sql.replace(&format!("?{n}"), "'1'");
            }
            let plan = super::super::query_plan(&setup, &sql);
            let events: Vec<&String> = plan
                .iter()
                .filter(|step| step.contains(" e ") || step.contains("spoolite_event "))
                .collect();
            assert!(!events.is_empty(), "{sql}: {plan:?}");
            for step in events {
                assert!(
                    step.starts_with("SEARCH")
                        && (step.contains(
                            "INDEX spoolite_event_flight (flight_id=? AND event_kind=? AND slot=?)"
                        ) || step.contains("INTEGER PRIMARY KEY (rowid=?)")),
                    "{sql}: {plan:?}"
                );
            }
        }
    }
}
