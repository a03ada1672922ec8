//! The SQLite transaction of one batch file: its flights numbered as its events
//! are staged, its valid events sorted in bounded runs (`runs`), then merged in key
//! order (file order within a key) and each key's versions folded (`fold`) onto its
//! stored row, and the results written by the write path: the winner with one
//! revision-guarded upsert, conflicts and invalid events to quarantine, the inbox
//! row. A key's first version is inserted outright, and its stored row looked up
//! only when that insert meets one. A dry run folds the same way with no write path.
//!
//! Slots (the contract's *Slots*) add two steps around the fold. The file's
//! events whose slot may be busy (hold more than one row) are also noted, with
//! their place in the file, in a temporary table (`slotted`); before the fold,
//! each busy slot's events are met in file order with its stored rows
//! (`SlotClaims`), and an event whose revision another key of its slot holds is
//! a conflict the fold skips. After the fold, each busy slot is settled
//! (`settle_slots`): its highest revision reads as it was sent, every other row
//! reads retracted (`displaced`), and a row that read live and no longer does
//! is written as this batch's change.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::{
    Connection, OptionalExtension, Statement, Transaction, TransactionBehavior, params,
};

use super::DatabaseFile;
use super::flights::{self, Flights};
use super::rebuild;
use super::runs::{Runs, Staged};
use super::slotted::{self, BUSY_SLOTS, FlightSeen, Slotted};
use crate::batch::{Event, Header, Record};
use crate::store::common::{CaseVariants, Quarantined};
use crate::store::error::StoreError;
use crate::store::fold::{
    CONFLICT_REASON, Content, Counts, FileFold, Finished, KeyEnd, KeySink, SlotClaims, Tally,
    Version, slot_conflict_detail,
};

/// Rows applied between two looks at the stop flag.
const STOP_CHECK_ROWS: u64 = 4096;

/// The transaction of one batch file: stage its events, quarantine what is invalid,
/// then `finish` applies the outcome rules and writes the inbox row. Dropping it
/// without finishing rolls everything back.
pub struct Batch<'c> {
    tx: Transaction<'c>,
    /// Where the results go: written (`Writer`), or nowhere in a dry run
    /// (`DryRun`), which classifies every event through the same fold.
    effects: Box<dyn Effects>,
    tally: Tally,
    /// The valid events staged so far, being sorted.
    runs: Runs,
    /// The time spent in `stage` (logged at debug level: how much of the read the
    /// writer's thread was busy).
    staging: std::time::Duration,
    /// The staged events that have a slot, noted where their slot may be busy.
    slotted: Slotted,
}

/// Where a batch's results go: `Writer` writes them, `DryRun` drops them. The
/// staging, the runs and the fold (`FileFold`) are the same for both.
pub(super) trait Effects {
    /// The transaction the batch runs in: a write lock at once, or a read.
    fn behavior(&self) -> TransactionBehavior;

    /// Takes what the batch numbers its rows from, in its transaction.
    fn begin(&mut self, tx: &Connection) -> Result<(), StoreError>;

    /// The flight number of a valid event being staged, and what was seen of
    /// its flight when its run of events began.
    fn flight_ref(
        &mut self,
        tx: &Connection,
        event: &Event,
    ) -> Result<(i64, FlightSeen), StoreError>;

    /// Quarantines an event of the file.
    fn quarantine(&self, tx: &Connection, event: Quarantined<'_>) -> Result<(), StoreError>;

    /// Folds the staged events (`valid` of them) onto their stored rows and
    /// writes what the fold says.
    fn apply(&mut self, tx: &Connection, staged: Apply<'_>) -> Result<FileFold, StoreError>;

    /// The batch's new flight ids that differ only in letter case from another,
    /// once `apply` is done (a dry run numbers no flight and notes none).
    fn case_variants(&mut self) -> CaseVariants;

    /// Ends the transaction: the inbox row and the commit, or a rollback.
    fn end(
        self: Box<Self>,
        tx: Transaction<'_>,
        header: &Header,
        counts: &Counts,
    ) -> Result<(), StoreError>;
}

/// What `Effects::apply` folds: the staged events' runs, how many valid events
/// they hold, the revision of an event that names none, and the stop flag.
pub(super) struct Apply<'s> {
    runs: Runs,
    valid: u64,
    default_revision: i64,
    stop: &'s AtomicBool,
    /// The file's events (by place in the file) that the slot rules made conflicts.
    slot_conflicts: HashSet<u64>,
    /// Whether any event was noted in `spoolite_slotted`: the busy slots are
    /// settled.
    slotted: bool,
}

/// The write path of one batch: the file its rows are written as (its digest, its
/// name, the time every row of it is written at, its number in the inbox), its
/// flights, and the next `change_seq` to give a row it writes.
pub(super) struct Writer {
    digest: String,
    file_name: String,
    now: String,
    batch_ref: i64,
    next_change_seq: Cell<i64>,
    /// Rows written: inserted, or replacing a row of a batch in `replaced`.
    rows_written: Cell<i64>,
    /// Per batch, how many of the rows it last wrote this batch replaced, so that
    /// each inbox row's `rows_last_written` stays a count kept, not computed.
    replaced: RefCell<HashMap<i64, i64>>,
    /// The batch's flights, numbered and their times kept as events are staged.
    flights: Flights,
    /// What `flights` found once the apply was done.
    case_variants: CaseVariants,
    /// Whether a batch large against the table drops and builds again its
    /// secondary indexes (`store::sqlite::rebuild`).
    pub(super) sorted_index_builds: bool,
    /// The database file, checked again just before the commit.
    file: Option<DatabaseFile>,
}

impl Writer {
    pub(super) fn new(
        digest: &str,
        file_name: &str,
        now: &str,
        file: Option<DatabaseFile>,
    ) -> Writer {
        Writer {
            digest: digest.to_owned(),
            file_name: file_name.to_owned(),
            now: now.to_owned(),
            batch_ref: 0,
            next_change_seq: Cell::new(0),
            rows_written: Cell::new(0),
            replaced: RefCell::new(HashMap::new()),
            flights: Flights::default(),
            case_variants: CaseVariants::default(),
            sorted_index_builds: true,
            file,
        }
    }
}

/// A dry run's effects: nothing is written, and no write lock is taken, so a dry
/// run works on a read-only connection and never holds the daemon up.
pub(super) struct DryRun;

/// Starts the transaction of one batch: `None` when the inbox already holds its
/// digest.
pub(super) fn begin<'c>(
    conn: &'c mut Connection,
    runs: Runs,
    digest: &str,
    mut effects: Box<dyn Effects>,
) -> Result<Option<Batch<'c>>, StoreError> {
    let tx = conn.transaction_with_behavior(effects.behavior())?;
    if super::inbox_has(&tx, digest)? {
        return Ok(None);
    }
    effects.begin(&tx)?;
    Ok(Some(Batch {
        tx,
        effects,
        tally: Tally::default(),
        runs,
        staging: std::time::Duration::ZERO,
        slotted: Slotted::default(),
    }))
}

impl Batch<'_> {
    /// Adds a run of records, in file order: valid events, their flights numbered,
    /// to the runs being sorted, invalid ones to quarantine.
    pub fn stage(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        for record in records {
            match &record.event {
                Ok(event) => {
                    self.stage_event(event, record)?;
                    self.tally.read_valid();
                }
                Err(invalid) => {
                    let event = Quarantined::invalid(record, invalid);
                    self.effects.quarantine(&self.tx, event)?;
                    self.tally.read_invalid(event.reason);
                }
            }
        }
        self.staging += started.elapsed();
        Ok(())
    }

    fn stage_event(&mut self, event: &Event, record: &Record) -> Result<(), StoreError> {
        let (flight_ref, seen) = self.effects.flight_ref(&self.tx, event)?;
        let staged = Staged {
            key: event.key(),
            index: record.index,
            flight_ref,
            flight_id: event.flight_id(),
            revision: event.revision(),
            retracted: event.retracted(),
            event_kind: event.event_kind(),
            instant_utc: event.instant_utc(),
            payload: event.payload(),
            raw: &record.raw,
            slot: event.slot(),
        };
        self.slotted.stage(&self.tx, &staged, seen)?;
        self.runs.push(&staged).map_err(StoreError::Spill)
    }

    /// The events the slot rules make conflicts: each slot's events in file order,
    /// met with the slot's stored rows (`SlotClaims`).
    fn slot_conflicts(&self, default_revision: i64) -> Result<HashSet<u64>, StoreError> {
        let mut conflicts = HashSet::new();
        self.tx.execute_batch(BUSY_SLOTS)?;
        // Each busy slot's stored rows first (record_index -1), then its events
        // in file order.
        let mut events = self.tx.prepare(slotted::BUSY_SLOT_EVENTS)?;
        let mut rows = events.query([])?;
        let mut claims = SlotClaims::default();
        while let Some(row) = rows.next()? {
            let slot = [text(row, 0)?, text(row, 1)?, text(row, 2)?];
            let index: i64 = row.get(3)?;
            let key: [u8; 32] = row.get(4)?;
            let revision = row.get::<_, Option<i64>>(5)?.unwrap_or(default_revision);
            if claims.meet(slot, &key, revision, index < 0) {
                conflicts.insert(index as u64);
            }
        }
        Ok(conflicts)
    }

    /// Applies the staged events in key order (file order within a key), writes the
    /// inbox row and commits; a dry run rolls back instead.
    /// `stop` set from outside abandons the batch (rolled back) with
    /// `StoreError::Stopped`.
    pub fn finish(mut self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        log::debug!(
            "staged {} events in {:?} of the writer's time",
            self.tally.events(),
            self.staging
        );
        let default_revision = header.source_revision.unwrap_or(0);
        let started = std::time::Instant::now();
        let slotted = self.slotted.finish(&self.tx, &self.runs)?;
        let slot_conflicts = match slotted {
            true => self.slot_conflicts(default_revision)?,
            false => HashSet::new(),
        };
        let runs = std::mem::replace(&mut self.runs, Runs::new(Vec::new(), 0));
        let valid = self.tally.valid();
        let staged = Apply {
            runs,
            valid,
            default_revision,
            stop,
            slot_conflicts,
            slotted,
        };
        let fold = self.effects.apply(&self.tx, staged)?;
        log::debug!(
            "applied {} staged events in {:?}",
            fold.counts().outcomes(),
            started.elapsed()
        );
        let resent = match &header.batch_id {
            None => false,
            Some(id) => self
                .tx
                .prepare_cached("SELECT 1 FROM ingest_inbox WHERE batch_id = ?1")?
                .query_row([id], |_| Ok(()))
                .optional()?
                .is_some(),
        };
        let mut finished = self.tally.finish(&fold, resent);
        finished.case_variants = self.effects.case_variants();
        self.effects.end(self.tx, header, &finished.counts)?;
        Ok(finished)
    }
}

impl Effects for Writer {
    fn behavior(&self) -> TransactionBehavior {
        TransactionBehavior::Immediate
    }

    fn begin(&mut self, tx: &Connection) -> Result<(), StoreError> {
        // Under the write lock, so no other batch takes the same numbers; a row's
        // change_seq is larger than every one committed before.
        self.batch_ref = tx.query_row(
            "SELECT coalesce(max(batch_ref), 0) + 1 FROM ingest_inbox",
            [],
            |row| row.get(0),
        )?;
        self.next_change_seq.set(tx.query_row(
            "SELECT coalesce(max(change_seq), 0) + 1 FROM spoolite_event",
            [],
            |row| row.get(0),
        )?);
        Ok(())
    }

    fn flight_ref(
        &mut self,
        tx: &Connection,
        event: &Event,
    ) -> Result<(i64, FlightSeen), StoreError> {
        let flight_ref = self.flights.stage(
            tx,
            (event.flight_id(), event.event_kind(), event.instant_utc()),
            event.retracted(),
            event.payload(),
        )?;
        Ok((flight_ref, self.flights.seen()))
    }

    /// Writes one quarantine row.
    fn quarantine(&self, tx: &Connection, event: Quarantined<'_>) -> Result<(), StoreError> {
        tx.prepare_cached(
            "INSERT INTO quarantine
                 (batch_digest, file_name, record_index, reason, detail, raw, quarantined_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            self.digest,
            self.file_name,
            event.index as i64,
            event.reason,
            event.detail,
            event.raw,
            self.now
        ])?;
        Ok(())
    }

    fn apply(&mut self, tx: &Connection, staged: Apply<'_>) -> Result<FileFold, StoreError> {
        let Apply {
            runs,
            valid,
            default_revision,
            stop,
            slot_conflicts,
            slotted,
        } = staged;
        let mut flights = std::mem::take(&mut self.flights);
        flights.end_run(tx)?;
        let dropped = match self.sorted_index_builds && rebuild::worth_it(tx, valid)? {
            true => Some(rebuild::drop_secondary(tx)?),
            false => None,
        };
        let fold = self.write(
            tx,
            runs,
            default_revision,
            stop,
            &slot_conflicts,
            &mut flights,
        )?;
        let sorted = dropped.is_some();
        if let Some(dropped) = dropped {
            let built = std::time::Instant::now();
            dropped.rebuild(tx)?;
            log::debug!("built the secondary indexes again in {:?}", built.elapsed());
        }
        // After the rebuild: a slot's rows are found through its index.
        if slotted {
            self.settle_slots(tx, &mut flights)?;
        }
        // After the rebuild: a flight's times are recomputed through the index on
        // flight_id.
        self.case_variants = flights.finish(tx, sorted)?;
        Ok(fold)
    }

    fn case_variants(&mut self) -> CaseVariants {
        std::mem::take(&mut self.case_variants)
    }

    fn end(
        self: Box<Self>,
        tx: Transaction<'_>,
        header: &Header,
        counts: &Counts,
    ) -> Result<(), StoreError> {
        self.commit(tx, header, counts)
    }
}

impl Effects for DryRun {
    fn behavior(&self) -> TransactionBehavior {
        TransactionBehavior::Deferred
    }

    fn begin(&mut self, _: &Connection) -> Result<(), StoreError> {
        Ok(())
    }

    /// A dry run numbers no flight: it writes nothing.
    fn flight_ref(&mut self, _: &Connection, _: &Event) -> Result<(i64, FlightSeen), StoreError> {
        Ok((0, FlightSeen::Unknown))
    }

    fn quarantine(&self, _: &Connection, _: Quarantined<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    fn apply(&mut self, tx: &Connection, staged: Apply<'_>) -> Result<FileFold, StoreError> {
        let Apply {
            runs,
            default_revision,
            stop,
            slot_conflicts,
            ..
        } = staged;
        let mut keys = LookOnly {
            lookup: tx.prepare(LOOKUP)?,
        };
        fold_runs(runs, default_revision, stop, &slot_conflicts, &mut keys)
    }

    fn case_variants(&mut self) -> CaseVariants {
        CaseVariants::default()
    }

    fn end(self: Box<Self>, tx: Transaction<'_>, _: &Header, _: &Counts) -> Result<(), StoreError> {
        Ok(tx.rollback()?)
    }
}

/// A stored row of a slot, as `Writer::settle_slots` reads it.
struct SlotRow {
    rowid: i64,
    revision: i64,
    retracted: bool,
    displaced: bool,
    batch_ref: i64,
}

/// The columns of a key's row besides its version, from its first event (every
/// version of a key has the same ones: the key is their digest). Reused from key to
/// key, like the fold's own buffer.
#[derive(Default)]
struct KeyColumns {
    key: [u8; 32],
    flight_ref: i64,
    flight_id: String,
    event_kind: String,
    instant_utc: String,
}

impl KeyColumns {
    fn take(&mut self, row: &Staged<'_>) {
        self.key = *row.key;
        self.flight_ref = row.flight_ref;
        self.flight_id.clear();
        self.flight_id.push_str(row.flight_id);
        self.event_kind.clear();
        self.event_kind.push_str(row.event_kind);
        self.instant_utc.clear();
        self.instant_utc.push_str(row.instant_utc);
    }
}

/// The stored version of a key, found through the key's index (on its hex): its
/// own content (a row its slot displaced was sent live), the batch that wrote it,
/// and whether its slot displaced it.
const LOOKUP: &str = "SELECT source_revision, payload, retracted AND NOT displaced, batch_ref,
         slot, displaced
     FROM spoolite_event WHERE lower(hex(key)) = lower(hex(?1))";

/// Folds the merged runs, in key order (file order within a key), through
/// `sink` (`FileFold::step`), looking at the stop flag every `STOP_CHECK_ROWS`
/// rows. Returns the fold, with its counts.
fn fold_runs<S>(
    runs: Runs,
    default_revision: i64,
    stop: &AtomicBool,
    slot_conflicts: &HashSet<u64>,
    sink: &mut S,
) -> Result<FileFold, StoreError>
where
    S: for<'r> KeySink<Row<'r> = Staged<'r>, Error = StoreError>,
{
    let mut fold = FileFold::new();
    let mut applied: u64 = 0;
    runs.for_each(StoreError::Spill, |row| {
        applied += 1;
        if applied.is_multiple_of(STOP_CHECK_ROWS) && stop.load(Ordering::Relaxed) {
            return Err(StoreError::Stopped);
        }
        let incoming = Version {
            revision: row.revision.unwrap_or(default_revision),
            content: Content {
                payload: row.payload,
                retracted: row.retracted,
                slot: row.slot,
            },
        };
        if slot_conflicts.contains(&row.index) {
            fold.count_slot_conflict();
            let slot = row.slot.unwrap_or_default();
            let detail = slot_conflict_detail(incoming.revision, slot);
            return sink.slot_conflict(row, &detail);
        }
        fold.step(sink, row.key, row, incoming)
    })?;
    fold.end_last_key(sink)?;
    Ok(fold)
}

/// A dry run's keys: each started from its stored row, nothing written.
struct LookOnly<'t> {
    lookup: Statement<'t>,
}

impl KeySink for LookOnly<'_> {
    type Row<'r> = Staged<'r>;
    type Error = StoreError;

    fn start(
        &mut self,
        fold: &mut FileFold,
        row: &Staged<'_>,
        _: Version<'_>,
    ) -> Result<(), StoreError> {
        start_from_stored(&mut self.lookup, row.key, fold).map(drop)
    }

    fn end(&mut self, _: KeyEnd<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    fn quarantine(&mut self, _: &Staged<'_>, _: &'static str, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The writer's keys. A key is expected to be new while the last one was: its
/// first version is then inserted outright, and looked up only when the insert
/// meets a stored row; after a key that was stored, the next one is looked up
/// first. Either way the fold decides from the stored row or the proof that there
/// is none. A row written notes its flight's crew rows (`Flights::written`).
struct WriteKeys<'w, 't> {
    writer: &'w Writer,
    tx: &'t Connection,
    flights: &'w mut Flights,
    insert_new: Statement<'t>,
    lookup: Statement<'t>,
    /// The upserts that set `retracted` (1) or leave it (0), each prepared at the
    /// first winner that needs it: prepared before the apply, SQLite's lookaside
    /// memory ran short during it (five times the fallbacks to malloc) and the
    /// ingest took 1.9% more instructions (cachegrind, 20k events).
    upserts: [Option<Statement<'t>>; 2],
    expect_new: bool,
    /// The batch that wrote the table's row of the key being folded (`None`: no
    /// row), whose `rows_last_written` a write over it takes one from.
    table_batch: Option<i64>,
    /// The table's row of that key reads retracted because its slot displaced it.
    table_displaced: bool,
    columns: KeyColumns,
}

impl KeySink for WriteKeys<'_, '_> {
    type Row<'r> = Staged<'r>;
    type Error = StoreError;

    fn start(
        &mut self,
        fold: &mut FileFold,
        row: &Staged<'_>,
        first: Version<'_>,
    ) -> Result<(), StoreError> {
        self.columns.take(row);
        self.table_displaced = false;
        if self.expect_new && self.writer.insert_new(&mut self.insert_new, row, first)? {
            fold.start_key_inserted(row.key, first);
            self.table_batch = Some(self.writer.batch_ref);
            return self
                .flights
                .written(self.tx, row.flight_ref, row.event_kind);
        }
        let stored = start_from_stored(&mut self.lookup, row.key, fold)?;
        self.expect_new = stored.is_none();
        self.table_batch = stored.map(|(batch, _)| batch);
        self.table_displaced = stored.is_some_and(|(_, displaced)| displaced);
        Ok(())
    }

    fn end(&mut self, ended: KeyEnd<'_>) -> Result<(), StoreError> {
        let columns = &self.columns;
        if let Some(version) = ended.write {
            // The stored row's `retracted` differs from the version's, or its slot
            // displaced it (the write reads as sent; the slot is settled after).
            let retracted_changes = self.table_displaced
                || ended
                    .table_live
                    .is_some_and(|live| live == version.content.retracted);
            let upsert = match &mut self.upserts[usize::from(retracted_changes)] {
                Some(upsert) => upsert,
                slot => slot.insert(
                    self.writer
                        .prepare_row_statement(self.tx, &upsert_sql(retracted_changes))?,
                ),
            };
            self.writer.upsert(upsert, columns, version)?;
            if let Some(batch_ref) = self.table_batch {
                *self
                    .writer
                    .replaced
                    .borrow_mut()
                    .entry(batch_ref)
                    .or_default() += 1;
            }
            // A new revision of the same payload, live as before, leaves the crew
            // rows as they are.
            if ended.changes_content {
                self.flights
                    .written(self.tx, columns.flight_ref, &columns.event_kind)?;
            }
        }
        // A row its slot displaced reads retracted whatever the fold found: a
        // live version the file staged of it was merged into its flight's times.
        let left_live = ended.left_live || self.table_displaced;
        if left_live && flights::is_timed(&columns.event_kind) {
            self.flights.recompute(self.tx, columns.flight_ref)?;
        }
        Ok(())
    }

    fn quarantine(
        &mut self,
        row: &Staged<'_>,
        reason: &'static str,
        detail: &str,
    ) -> Result<(), StoreError> {
        let event = Quarantined {
            index: row.index,
            raw: row.raw,
            reason,
            detail,
        };
        self.writer.quarantine(self.tx, event)
    }

    fn slot_conflict(&mut self, row: &Staged<'_>, detail: &str) -> Result<(), StoreError> {
        self.quarantine(row, CONFLICT_REASON, detail)?;
        // Its instant was merged into its flight's times as it was staged.
        if !row.retracted && flights::is_timed(row.event_kind) {
            self.flights.recompute(self.tx, row.flight_ref)?;
        }
        Ok(())
    }
}

/// Starts the fold of `key` from its stored row; returns the batch that last
/// wrote that row and whether its slot displaced it (`None`: it has none).
fn start_from_stored(
    lookup: &mut Statement<'_>,
    key: &[u8; 32],
    fold: &mut FileFold,
) -> Result<Option<(i64, bool)>, StoreError> {
    let mut rows = lookup.query([key])?;
    let Some(row) = rows.next()? else {
        fold.start_key(key, None);
        return Ok(None);
    };
    let slot = match row.get_ref(4)? {
        rusqlite::types::ValueRef::Null => None,
        _ => Some(text(row, 4)?),
    };
    let stored = Version {
        revision: row.get(0)?,
        content: Content {
            payload: text(row, 1)?,
            retracted: row.get(2)?,
            slot,
        },
    };
    fold.start_key(key, Some(stored));
    Ok(Some((row.get(3)?, row.get(5)?)))
}

/// Column `index` of `row` as text borrowed from SQLite, valid until the row
/// moves on: the fold copies what it keeps into a buffer of its own.
fn text<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'r str> {
    let value = row.get_ref(index)?;
    value.as_str().map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(index, value.data_type(), Box::new(error))
    })
}

/// The columns of a new row, in the order `insert_new_sql` and `upsert_sql` bind
/// them: the row's own values (1-7), the batch's (8, 9), its change_seq (10), its
/// slot (11).
const ROW_COLUMNS: &str = "(key, flight_id, event_kind, instant_utc, source_revision, payload,
         retracted, batch_ref, first_seen_at, updated_at, change_seq, slot)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11)";

/// The conflict target of both statements: the unique index of the key's hex.
const KEY_INDEX: &str = "lower(hex(key))";

/// The insert of a key's first version in the file, when the key is expected to
/// be new: it inserts or, meeting a stored row, does nothing (and the row is then
/// looked up and folded).
fn insert_new_sql() -> String {
    format!("INSERT INTO spoolite_event {ROW_COLUMNS} ON CONFLICT ({KEY_INDEX}) DO NOTHING")
}

/// The upsert of the version of a key that won within a file. The `WHERE` is the
/// revision guard: a row is only ever replaced by a higher revision.
///
/// `retracted` is set only when `set_retracted`: SQLite rewrites every index that
/// holds a column the `SET` names, and the analysts' index of live rows holds
/// `retracted` (in its `WHERE`), so an update that keeps it leaves that index alone.
fn upsert_sql(set_retracted: bool) -> String {
    let retracted = if set_retracted {
        "retracted = excluded.retracted, displaced = 0,"
    } else {
        ""
    };
    format!(
        "INSERT INTO spoolite_event {ROW_COLUMNS}
     ON CONFLICT ({KEY_INDEX}) DO UPDATE SET
         source_revision = excluded.source_revision,
         payload = excluded.payload,
         {retracted}
         batch_ref = excluded.batch_ref,
         updated_at = excluded.updated_at,
         change_seq = excluded.change_seq
     WHERE excluded.source_revision > spoolite_event.source_revision"
    )
}

/// Binds a row's own values (key, flight, kind, instant, `version`) and its
/// `change_seq` to a statement of `prepare_row_statement` and executes it; returns
/// the rows changed.
fn execute_row(
    statement: &mut Statement<'_>,
    (key, flight_id, event_kind, instant_utc): (&[u8; 32], &str, &str, &str),
    version: Version<'_>,
    change_seq: i64,
) -> Result<usize, StoreError> {
    statement.raw_bind_parameter(1, key)?;
    statement.raw_bind_parameter(2, flight_id)?;
    statement.raw_bind_parameter(3, event_kind)?;
    statement.raw_bind_parameter(4, instant_utc)?;
    statement.raw_bind_parameter(5, version.revision)?;
    statement.raw_bind_parameter(6, version.content.payload)?;
    statement.raw_bind_parameter(7, version.content.retracted)?;
    statement.raw_bind_parameter(10, change_seq)?;
    statement.raw_bind_parameter(11, version.content.slot)?;
    Ok(statement.raw_execute()?)
}

impl Writer {
    /// Folds the merged events and writes every winner and conflict
    /// (`WriteKeys`).
    fn write(
        &self,
        tx: &Connection,
        runs: Runs,
        default_revision: i64,
        stop: &AtomicBool,
        slot_conflicts: &HashSet<u64>,
        flights: &mut Flights,
    ) -> Result<FileFold, StoreError> {
        let mut keys = WriteKeys {
            writer: self,
            tx,
            flights,
            insert_new: self.prepare_row_statement(tx, &insert_new_sql())?,
            lookup: tx.prepare(LOOKUP)?,
            upserts: [None, None],
            expect_new: true,
            table_batch: None,
            table_displaced: false,
            columns: KeyColumns::default(),
        };
        fold_runs(runs, default_revision, stop, slot_conflicts, &mut keys)
    }

    /// Settles every busy slot the batch's events name (`BUSY_SLOTS`; a slot of
    /// one row reads as sent already): its row of the highest
    /// revision reads as it was sent, every other row reads retracted
    /// (`displaced` when it was sent live). A row that read live and no longer
    /// does, and that this batch had not written, is written as this batch's
    /// change (`updated_at`, `change_seq`, `batch_ref`); a row that already read
    /// retracted keeps them. The flight of a slot whose rows changed has its times
    /// and crew rows computed again.
    fn settle_slots(&self, tx: &Connection, flights: &mut Flights) -> Result<(), StoreError> {
        let mut slots = tx.prepare(slotted::BUSY_SLOT_LIST)?;
        let mut rows_of = tx.prepare(slotted::SLOT_ROWS)?;
        let mut set = tx.prepare(slotted::SET_SLOT_ROW)?;
        let mut displace = tx.prepare(slotted::DISPLACE_SLOT_ROW)?;
        // One busy slot at a time (a temporary table the settling does not
        // write), so that memory holds one slot's rows, not every busy slot.
        let mut slots = slots.query([])?;
        while let Some(busy) = slots.next()? {
            let (flight_id, event_kind, slot) = (text(busy, 0)?, text(busy, 1)?, text(busy, 2)?);
            let flight_ref: i64 = busy.get(3)?;
            let rows = rows_of
                .query_map(params![flight_id, event_kind, slot], |row| {
                    Ok(SlotRow {
                        rowid: row.get(0)?,
                        revision: row.get(1)?,
                        retracted: row.get(2)?,
                        displaced: row.get(3)?,
                        batch_ref: row.get(4)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let Some(winner) = rows.iter().map(|row| row.revision).max() else {
                continue;
            };
            let mut changed = false;
            for row in &rows {
                let own = row.retracted && !row.displaced;
                let (retracted, displaced) = match row.revision == winner {
                    true => (own, false),
                    false => (true, !own),
                };
                if (retracted, displaced) == (row.retracted, row.displaced) {
                    continue;
                }
                changed = true;
                if !row.retracted && retracted && row.batch_ref != self.batch_ref {
                    displace.execute(params![
                        row.rowid,
                        self.batch_ref,
                        self.now,
                        self.change_seq()
                    ])?;
                    self.wrote_row();
                    *self.replaced.borrow_mut().entry(row.batch_ref).or_default() += 1;
                } else {
                    set.execute(params![row.rowid, retracted, displaced])?;
                }
            }
            if changed {
                if flights::is_timed(event_kind) {
                    flights.recompute(tx, flight_ref)?;
                }
                flights.written(tx, flight_ref, event_kind)?;
            }
        }
        Ok(())
    }

    /// The `change_seq` of the next row written, once it is written.
    fn change_seq(&self) -> i64 {
        self.next_change_seq.get()
    }

    /// Counts a row written with `change_seq()`: this batch is now its last writer.
    fn wrote_row(&self) {
        self.next_change_seq.set(self.next_change_seq.get() + 1);
        self.rows_written.set(self.rows_written.get() + 1);
    }

    /// Prepares `sql` (`insert_new_sql` or `upsert_sql`) with what every row of
    /// the batch shares bound once: a statement's bindings outlive its executions,
    /// so each row binds only its own values.
    fn prepare_row_statement<'t>(
        &self,
        tx: &'t Connection,
        sql: &str,
    ) -> Result<Statement<'t>, StoreError> {
        let mut statement = tx.prepare(sql)?;
        statement.raw_bind_parameter(8, self.batch_ref)?;
        statement.raw_bind_parameter(9, &self.now)?;
        Ok(statement)
    }

    /// Inserts `first`, a key's first version in the file, unless the key has a
    /// stored row; returns whether it did.
    fn insert_new(
        &self,
        insert_new: &mut Statement<'_>,
        row: &Staged<'_>,
        first: Version<'_>,
    ) -> Result<bool, StoreError> {
        let columns = (row.key, row.flight_id, row.event_kind, row.instant_utc);
        let inserted = execute_row(insert_new, columns, first, self.change_seq())? == 1;
        if inserted {
            self.wrote_row();
        }
        Ok(inserted)
    }

    /// Writes the version of `key` that won within this file. The `WHERE` of the
    /// upsert is the revision guard: a row is only ever replaced by a higher
    /// revision, which the fold has already decided this one is.
    fn upsert(
        &self,
        upsert: &mut Statement<'_>,
        columns: &KeyColumns,
        version: Version<'_>,
    ) -> Result<(), StoreError> {
        let columns = (
            &columns.key,
            columns.flight_id.as_str(),
            columns.event_kind.as_str(),
            columns.instant_utc.as_str(),
        );
        let changed = execute_row(upsert, columns, version, self.change_seq())?;
        assert_eq!(
            changed, 1,
            "the revision guard agrees with the outcome rules"
        );
        self.wrote_row();
        Ok(())
    }

    /// Writes the inbox row with the batch's counts and commits.
    fn commit(
        self,
        tx: Transaction<'_>,
        header: &Header,
        counts: &Counts,
    ) -> Result<(), StoreError> {
        let mut replaced = self.replaced.take();
        tx.execute(
            "INSERT INTO ingest_inbox (batch_ref, batch_digest, batch_id, file_name, ingested_at,
                 events_total, inserted, updated, unchanged, stale, conflicts, invalid,
                 rows_last_written)
             VALUES (?12, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?13)",
            params![
                self.digest,
                header.batch_id,
                self.file_name,
                self.now,
                counts.events_total as i64,
                counts.inserted as i64,
                counts.updated as i64,
                counts.unchanged as i64,
                counts.stale as i64,
                counts.conflicts as i64,
                counts.invalid as i64,
                self.batch_ref,
                self.rows_written.get() - replaced.remove(&self.batch_ref).unwrap_or(0),
            ],
        )?;
        let mut less = tx.prepare(
            "UPDATE ingest_inbox SET rows_last_written = rows_last_written - ?2
             WHERE batch_ref = ?1",
        )?;
        for (batch_ref, rows) in replaced {
            less.execute([batch_ref, rows])?;
        }
        drop(less);
        if let Some(file) = &self.file {
            file.check()?;
        }
        let started = std::time::Instant::now();
        tx.commit()?;
        log::debug!("committed in {:?}", started.elapsed());
        // Moved away between the look above and the commit: the batch went into a
        // file no longer at the path, so its file must not be archived.
        if let Some(file) = &self.file {
            file.check()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Event;
    use crate::store::sqlite::{SqliteStore as Store, runs};

    /// Numbers below a bound, drawn from `seed` (xorshift): the same every run.
    fn draws(mut state: u64) -> impl FnMut(u64) -> u64 {
        move |below| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        }
    }

    /// `count` events over a few flights and keys, several versions of most keys
    /// spread over the file (revisions 0-3, two payloads, some without a revision
    /// of their own), and an invalid one now and then: every outcome occurs.
    fn records(count: u64, salt: u64) -> Vec<Record> {
        let mut next = draws(0x9e37_79b9_7f4a_7c15_u64 ^ salt);
        (0..count)
            .map(|index| {
                let flight = next(7);
                let minute = next(40);
                let revision = match next(5) {
                    4 => String::new(),
                    r => format!(r#","source_revision":{r}"#),
                };
                let instant = if next(50) == 0 { "never" } else { "10:00:00Z" };
                let raw = format!(
                    r#"{{"flight_id":"BA{flight:04}","event_kind":"landing","instant_utc":"2026-11-29T{}"{revision},"payload":{{"p":{}}}}}"#,
                    instant.replace("00:00", &format!("{minute:02}:00")),
                    next(2)
                );
                let event = Event::parse(&raw, 64);
                Record { index, raw, event }
            })
            .collect()
    }

    /// Ingests `files` one after the other into a new database with runs of
    /// `run_bytes`; returns each file's dry-run and real counts and the tables
    /// (`duty_event_all`, `quarantine`, `ingest_inbox`, the flight ids, the
    /// displaced rows' keys).
    fn ingest(
        files: &[Vec<Record>],
        run_bytes: usize,
    ) -> (Vec<(Counts, Counts)>, [Vec<String>; 5]) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("writer.db");
        let mut store = Store::open(&path).expect("open");
        store.set_run_bytes_for_tests(run_bytes);
        let header = Header {
            batch_id: None,
            source_revision: Some(2),
        };
        let stop = AtomicBool::new(false);
        let mut counts = Vec::new();
        for (number, records) in files.iter().enumerate() {
            let digest = format!("{number:064}");
            let mut dry = store.begin_dry_run(&digest).expect("dry").expect("new");
            for chunk in records.chunks(100) {
                dry.stage(chunk).expect("stage");
            }
            let dry = dry.finish(&header, &stop).expect("dry finish").counts;
            let mut batch = store
                .begin(&digest, "f.ndjson", "2026-12-01T00:00:00.000Z")
                .expect("begin")
                .expect("new");
            for chunk in records.chunks(100) {
                batch.stage(chunk).expect("stage");
            }
            counts.push((dry, batch.finish(&header, &stop).expect("finish").counts));
        }
        let dump = |sql: &str| -> Vec<String> {
            let mut statement = store.conn.prepare(sql).expect("prepare");
            let rows = statement
                .query_map([], |row| {
                    Ok((0..row.as_ref().column_count())
                        .map(|i| format!("{:?}", row.get_ref(i).expect("column")))
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .expect("query");
            rows.map(|row| row.expect("row")).collect()
        };
        let tables = [
            dump("SELECT * FROM duty_event_all ORDER BY idempotency_key"),
            dump("SELECT rowid, * FROM quarantine ORDER BY rowid"),
            dump("SELECT * FROM ingest_inbox ORDER BY rowid"),
            dump("SELECT flight_id FROM spoolite_flight ORDER BY flight_id"),
            dump("SELECT lower(hex(key)) FROM spoolite_event WHERE displaced ORDER BY 1"),
        ];
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .filter(|name| !name.to_string_lossy().starts_with("writer.db"))
            .collect();
        assert!(left.is_empty(), "run files left behind: {left:?}");
        (counts, tables)
    }

    #[test]
    fn spilled_runs_decide_and_write_exactly_as_one_run_in_memory() {
        let files = [records(3000, 1), records(3000, 2)];
        let (counts, tables) = ingest(&files, runs::RUN_BYTES);
        let (spilled_counts, spilled_tables) = ingest(&files, 4096);
        assert_eq!(spilled_counts, counts);
        assert_eq!(spilled_tables, tables);
        let mut total = Counts::default();
        for (dry, real) in &counts {
            assert_eq!(dry, real, "a dry run counts as the ingest does");
            total.add(real);
        }
        let every = [
            total.inserted,
            total.updated,
            total.unchanged,
            total.stale,
            total.conflicts,
            total.invalid,
        ];
        assert!(every.iter().all(|&count| count > 0), "{total:?}");
    }

    /// Events of `flights` flights with slots, each flight's in file order: an
    /// off-blocks or landing at one of 30 minutes, its slot its minute's tenth
    /// (so several keys share a slot), revisions 0-4 or none, two payloads, now
    /// and then a retraction. Flight 0 has more events than a run holds back.
    fn slotted(flights: u64, salt: u64) -> Vec<Vec<String>> {
        let mut next = draws(0x2545_f491_4f6c_dd1d_u64 ^ salt);
        (0..flights)
            .map(|flight| {
                let count = if flight == 0 { 700 } else { 1 + next(6) };
                (0..count)
                    .map(|_| {
                        let kind = ["off_blocks", "landing"][next(2) as usize];
                        let minute = next(30);
                        let revision = match next(6) {
                            5 => String::new(),
                            r => format!(r#","source_revision":{r}"#),
                        };
                        format!(
                            r#"{{"flight_id":"SL{flight:03}","event_kind":"{kind}","instant_utc":"2026-11-29T10:{minute:02}:00Z"{revision},"slot":"{}","retracted":{},"payload":{{"p":{}}}}}"#,
                            minute / 10,
                            next(9) == 0,
                            next(2)
                        )
                    })
                    .collect()
            })
            .collect()
    }

    /// `flights`' events as a file: one flight after the other, or taken in
    /// turns (each flight's events still in their order).
    fn file_of(flights: &[Vec<String>], in_turns: bool) -> Vec<Record> {
        let lines: Vec<&String> = match in_turns {
            false => flights.iter().flatten().collect(),
            true => {
                let longest = flights.iter().map(Vec::len).max().unwrap_or(0);
                (0..longest)
                    .flat_map(|at| flights.iter().filter_map(move |f| f.get(at)))
                    .collect()
            }
        };
        lines
            .into_iter()
            .enumerate()
            .map(|(index, raw)| Record {
                index: index as u64,
                raw: raw.clone(),
                event: Event::parse(raw, 64),
            })
            .collect()
    }

    /// A slot's events meet in file order whether a flight's events come in one
    /// run or in many (a file in time order): the same outcomes and rows, and a
    /// dry run (which notes every slotted event) counts the same.
    #[test]
    fn slots_decide_alike_whether_a_flights_events_come_together_or_in_turns() {
        let first = slotted(40, 1);
        let second = slotted(40, 2);
        let together = [file_of(&first, false), file_of(&second, false)];
        let in_turns = [file_of(&first, true), file_of(&second, true)];
        let (counts, tables) = ingest(&together, runs::RUN_BYTES);
        let (turns_counts, turns_tables) = ingest(&in_turns, 4096);
        for (dry, real) in counts.iter().chain(&turns_counts) {
            assert_eq!(dry, real, "a dry run counts as the ingest does");
        }
        let real = |counts: &[(Counts, Counts)]| counts.iter().map(|c| c.1).collect::<Vec<_>>();
        assert_eq!(real(&turns_counts), real(&counts));
        assert_eq!(turns_tables[0], tables[0], "duty_event_all");
        assert_eq!(turns_tables[3], tables[3], "flights");
        let mut total = Counts::default();
        counts.iter().for_each(|(_, real)| total.add(real));
        assert!(
            total.conflicts > 0 && total.stale > 0 && total.updated > 0,
            "{total:?}"
        );
        assert_eq!(turns_tables[4], tables[4], "displaced rows");
        assert!(!tables[4].is_empty(), "some rows are displaced");
    }

    /// The database file moved away after its batch began: the commit is refused
    /// before it happens (and, were it to slip in between, reported after it), so
    /// that the daemon never archives a file whose batch went into a file that is no
    /// longer at the path.
    #[test]
    fn a_batch_whose_database_file_moved_away_is_not_committed_as_if_it_were_there() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("moved.db");
        let mut store = Store::open(&path).expect("open");
        let header = Header {
            batch_id: None,
            source_revision: None,
        };
        let stop = AtomicBool::new(false);
        let mut batch = store
            .begin(
                &format!("{:064}", 1),
                "f.ndjson",
                "2026-12-01T00:00:00.000Z",
            )
            .expect("begin")
            .expect("new");
        batch.stage(&records(20, 1)).expect("stage");
        std::fs::rename(&path, dir.path().join("aside.db")).expect("move away");
        match batch.finish(&header, &stop) {
            Err(StoreError::Gone { path: named }) => assert_eq!(named, path),
            other => panic!("expected the database gone, got {other:?}"),
        }
        // No batch begins, and nothing was committed into the file moved away
        // (closing the connection checkpoints its WAL into it).
        assert!(matches!(
            store.begin(
                &format!("{:064}", 2),
                "g.ndjson",
                "2026-12-01T00:00:00.000Z"
            ),
            Err(StoreError::Gone { .. })
        ));
        drop(store);
        let aside = Store::open(&dir.path().join("aside.db")).expect("open aside");
        assert_eq!(aside.totals().expect("totals").batches, 0);
        assert!(!path.exists(), "a database was made at the path");
    }
}
