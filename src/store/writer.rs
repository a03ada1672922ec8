//! The SQLite transaction of one batch file: its flights numbered as its events
//! are staged, its valid events sorted in bounded runs (`runs`), then merged in key
//! order (file order within a key) and each key's versions folded (`fold`) onto its
//! stored row, and the results written by the write path: the winner with one
//! revision-guarded upsert, conflicts and invalid events to quarantine, the inbox
//! row. A key's first version is inserted outright, and its stored row looked up
//! only when that insert meets one. A dry run folds the same way with no write path.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::{Connection, OptionalExtension, Statement, Transaction, params};

use super::StoreError;
use super::flights::{self, Flights};
use super::fold::{CONFLICT_REASON, Content, Counts, KeyFold, Outcome, Version, conflict_detail};
use super::rebuild;
use super::runs::{Runs, Staged};
use crate::batch::{Event, Header, Record};

/// Rows applied between two looks at the stop flag.
const STOP_CHECK_ROWS: u64 = 4096;

/// The transaction of one batch file: stage its events, quarantine what is invalid,
/// then `finish` applies the outcome rules and writes the inbox row. Dropping it
/// without finishing rolls everything back.
pub struct Batch<'c> {
    tx: Transaction<'c>,
    /// Where the results go; `None` in a dry run, which classifies every event
    /// through the same fold and writes nothing.
    writer: Option<Writer>,
    counts: Counts,
    /// Quarantined events by reason code.
    reasons: Reasons,
    /// The valid events staged so far, being sorted.
    runs: Runs,
    /// The batch's flights, numbered and their times kept as events are staged.
    flights: Flights,
    /// The time spent in `stage` (logged at debug level: how much of the read the
    /// writer's thread was busy).
    staging: std::time::Duration,
}

/// What a committed (or, in a dry run, classified) batch came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub counts: Counts,
    /// Another batch with the same `batch_id` and other bytes was ingested before.
    pub resent: bool,
    /// Quarantined events by reason code.
    pub reasons: Reasons,
}

/// Quarantined events of one batch by reason code (`conflict`, `bad_instant`, …).
pub type Reasons = std::collections::BTreeMap<&'static str, u64>;

/// The write path of one batch: the file its rows are written as (its digest, its
/// name, the time every row of it is written at, its number in the inbox) and the
/// next `change_seq` to give a row it writes.
pub(super) struct Writer {
    pub(super) digest: String,
    pub(super) file_name: String,
    pub(super) now: String,
    batch_ref: i64,
    next_change_seq: Cell<i64>,
    /// Rows written: inserted, or replacing a row of a batch in `replaced`.
    rows_written: Cell<i64>,
    /// Per batch, how many of the rows it last wrote this batch replaced, so that
    /// each inbox row's `rows_last_written` stays a count kept, not computed.
    replaced: RefCell<HashMap<i64, i64>>,
    /// Whether a batch large against the table drops and builds again its
    /// secondary indexes (`store::rebuild`).
    pub(super) sorted_index_builds: bool,
}

impl Writer {
    pub(super) fn new(digest: &str, file_name: &str, now: &str) -> Writer {
        Writer {
            digest: digest.to_owned(),
            file_name: file_name.to_owned(),
            now: now.to_owned(),
            batch_ref: 0,
            next_change_seq: Cell::new(0),
            rows_written: Cell::new(0),
            replaced: RefCell::new(HashMap::new()),
            sorted_index_builds: true,
        }
    }
}

/// Starts the transaction of one batch: `None` when the inbox already holds its
/// digest. With a `writer` it takes the write lock at once (`BEGIN IMMEDIATE`);
/// without one it only reads, so a dry run works on a read-only connection and
/// never holds the daemon up.
pub(super) fn begin<'c>(
    conn: &'c mut Connection,
    runs: Runs,
    digest: &str,
    writer: Option<Writer>,
) -> Result<Option<Batch<'c>>, StoreError> {
    let behavior = if writer.is_some() {
        rusqlite::TransactionBehavior::Immediate
    } else {
        rusqlite::TransactionBehavior::Deferred
    };
    let tx = conn.transaction_with_behavior(behavior)?;
    if super::inbox_has(&tx, digest)? {
        return Ok(None);
    }
    let mut writer = writer;
    if let Some(writer) = &mut writer {
        // Under the write lock, so no other batch takes the same numbers; a row's
        // change_seq is larger than every one committed before.
        writer.batch_ref = tx.query_row(
            "SELECT coalesce(max(batch_ref), 0) + 1 FROM ingest_inbox",
            [],
            |row| row.get(0),
        )?;
        writer.next_change_seq.set(tx.query_row(
            "SELECT coalesce(max(change_seq), 0) + 1 FROM duty_event_data",
            [],
            |row| row.get(0),
        )?);
    }
    Ok(Some(Batch {
        tx,
        writer,
        counts: Counts::default(),
        reasons: Reasons::new(),
        runs,
        flights: Flights::default(),
        staging: std::time::Duration::ZERO,
    }))
}

impl Batch<'_> {
    /// Adds a run of records, in file order: valid events, their flights numbered,
    /// to the runs being sorted, invalid ones to quarantine.
    pub fn stage(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        for record in records {
            match &record.event {
                Ok(event) => self.stage_event(event, record)?,
                Err(invalid) => {
                    let reason = invalid.reason.code();
                    if let Some(writer) = &self.writer {
                        writer.quarantine(
                            &self.tx,
                            record.index,
                            reason,
                            &invalid.detail,
                            &record.raw,
                        )?;
                    }
                    self.counts.invalid += 1;
                    *self.reasons.entry(reason).or_default() += 1;
                }
            }
            self.counts.events_total += 1;
        }
        self.staging += started.elapsed();
        Ok(())
    }

    fn stage_event(&mut self, event: &Event, record: &Record) -> Result<(), StoreError> {
        let flight_ref = match self.writer {
            Some(_) => self.flights.stage(
                &self.tx,
                (event.flight_id(), event.event_kind(), event.instant_utc()),
                event.retracted(),
            )?,
            // A dry run numbers no flight: it writes nothing.
            None => 0,
        };
        self.runs
            .push(&Staged {
                key: event.key(),
                index: record.index,
                flight_ref,
                revision: event.revision(),
                retracted: event.retracted(),
                event_kind: event.event_kind(),
                instant_utc: event.instant_utc(),
                payload: event.payload(),
                raw: &record.raw,
            })
            .map_err(StoreError::Spill)
    }

    /// Applies the staged events in key order (file order within a key), writes the
    /// inbox row and commits; a dry run rolls back instead.
    /// `stop` set from outside abandons the batch (rolled back) with
    /// `StoreError::Stopped`.
    pub fn finish(mut self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        log::debug!(
            "staged {} events in {:?} of the writer's time",
            self.counts.events_total,
            self.staging
        );
        let default_revision = header.source_revision.unwrap_or(0);
        let started = std::time::Instant::now();
        let runs = std::mem::replace(&mut self.runs, Runs::new(Vec::new(), 0));
        let applied = match &self.writer {
            Some(writer) => {
                let mut flights = std::mem::take(&mut self.flights);
                flights.end_run(&self.tx)?;
                let valid = self.counts.events_total - self.counts.invalid;
                let dropped =
                    match writer.sorted_index_builds && rebuild::worth_it(&self.tx, valid)? {
                        true => Some(rebuild::drop_secondary(&self.tx)?),
                        false => None,
                    };
                let counts = writer.apply(&self.tx, runs, default_revision, stop, &mut flights)?;
                if let Some(dropped) = dropped {
                    let built = std::time::Instant::now();
                    dropped.rebuild(&self.tx)?;
                    log::debug!("built the secondary indexes again in {:?}", built.elapsed());
                }
                // After the rebuild: a flight's times are recomputed through the
                // index on flight_ref.
                flights.finish(&self.tx)?;
                counts
            }
            None => {
                let mut lookup = self.tx.prepare(LOOKUP)?;
                let start = |row: &Staged<'_>, _: Version<'_>, fold: &mut KeyFold| {
                    start_from_stored(&mut lookup, row.key, fold).map(|row| Start::Stored { row })
                };
                fold_merged(runs, default_revision, stop, start, |_| Ok(()))?
            }
        };
        log::debug!(
            "applied {} staged events in {:?}",
            applied.outcomes(),
            started.elapsed()
        );
        self.counts.add(&applied);
        if applied.conflicts > 0 {
            self.reasons.insert(CONFLICT_REASON, applied.conflicts);
        }
        let counts = self.counts;
        assert_eq!(
            counts.events_total,
            counts.outcomes(),
            "every event has one outcome"
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
        let finished = Finished {
            counts,
            resent,
            reasons: self.reasons,
        };
        match self.writer {
            Some(writer) => writer.commit(self.tx, header, &counts)?,
            None => self.tx.rollback()?,
        }
        Ok(finished)
    }
}

/// What the fold of the staged events leaves for the write path to do.
enum Effect<'a> {
    /// The event at `index` in the file (its text `raw`) conflicts: quarantine it.
    Conflict {
        index: u64,
        version: Version<'a>,
        raw: &'a str,
    },
    /// `version` won for `key`: write it, with the rest of its row, over the row
    /// the batch `replaces` wrote (`None`: no row).
    Write {
        key: &'a [u8; 32],
        columns: &'a KeyColumns,
        version: Version<'a>,
        replaces: Option<i64>,
        /// The stored row's `retracted` differs from the version's.
        retracted_changes: bool,
    },
    /// A key of the flight `flight_ref`, of a timed kind, ends the file not live
    /// though it was live before or the file held a live version of it (which its
    /// flight's times took in as it was read): they must be computed again.
    Untimed { flight_ref: i64 },
}

/// How the fold of a key was started, by the backend, from its first version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// From the key's stored row, looked up (`None`: it has none).
    Stored { row: Option<StoredRow> },
    /// From no row: the first version was inserted outright, which proves the key
    /// had none, and is in the table as the fold's first winner, written by the
    /// batch `batch_ref`.
    Inserted { batch_ref: i64 },
}

/// What the fold needs of a key's stored row besides its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StoredRow {
    /// Not retracted.
    live: bool,
    /// The batch that last wrote it.
    batch_ref: i64,
}

/// The columns of a key's row besides its version, from its first event (every
/// version of a key has the same ones: the key is their digest). Reused from key to
/// key, like the fold's own buffer.
#[derive(Default)]
struct KeyColumns {
    key: [u8; 32],
    flight_ref: i64,
    event_kind: String,
    instant_utc: String,
}

impl KeyColumns {
    fn take(&mut self, row: &Staged<'_>) {
        self.key = *row.key;
        self.flight_ref = row.flight_ref;
        self.event_kind.clear();
        self.event_kind.push_str(row.event_kind);
        self.instant_utc.clear();
        self.instant_utc.push_str(row.instant_utc);
    }
}

/// The stored version of a key, found through the key's index (on its hex).
const LOOKUP: &str = "SELECT source_revision, payload, retracted, batch_ref FROM duty_event_data
     WHERE lower(hex(key)) = lower(hex(?1))";

/// The key being folded: its columns, whether the table already holds what the
/// fold would write (its first version, inserted outright, still winning), whether
/// its stored row was live, and whether the file holds a live version of it.
struct Current {
    columns: KeyColumns,
    written: bool,
    live_before: bool,
    offered_live: bool,
    /// The batch that wrote the row the table holds for the key (`None`: none).
    table_batch: Option<i64>,
    /// Whether the row the table holds for the key is live (`None`: no row).
    table_live: Option<bool>,
}

/// Folds the merged events key by key onto their stored rows and hands `effect`
/// what is to be written; returns the counts of the staged (valid) events'
/// outcomes. The same for a real ingest and a dry run: `start` (which starts a
/// key's fold from its first version) and `effect` differ.
fn fold_merged(
    runs: Runs,
    default_revision: i64,
    stop: &AtomicBool,
    mut start: impl FnMut(&Staged<'_>, Version<'_>, &mut KeyFold) -> Result<Start, StoreError>,
    mut effect: impl FnMut(Effect<'_>) -> Result<(), StoreError>,
) -> Result<Counts, StoreError> {
    let mut fold = KeyFold::new();
    let mut counts = Counts::default();
    let mut current: Option<Current> = None;
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
            },
        };
        let first = current
            .as_ref()
            .is_none_or(|key| key.columns.key != *row.key);
        if first {
            if let Some(done) = &current {
                end_key(&fold, done, &mut effect)?;
            }
            let key = current.get_or_insert_with(|| Current {
                columns: KeyColumns::default(),
                written: false,
                live_before: false,
                offered_live: false,
                table_batch: None,
                table_live: None,
            });
            key.columns.take(row);
            key.offered_live = false;
            (
                key.written,
                key.live_before,
                key.table_batch,
                key.table_live,
            ) = match start(row, incoming, &mut fold)? {
                Start::Inserted { batch_ref } => (
                    true,
                    false,
                    Some(batch_ref),
                    Some(!incoming.content.retracted),
                ),
                Start::Stored { row } => (
                    false,
                    row.is_some_and(|row| row.live),
                    row.map(|row| row.batch_ref),
                    row.map(|row| row.live),
                ),
            };
        }
        let outcome = fold.offer(incoming);
        if let Some(key) = &mut current {
            key.offered_live |= !incoming.content.retracted;
            if first && key.written {
                assert_eq!(outcome, Outcome::Inserted, "an insert proves no stored row");
            } else if outcome.wins() {
                key.written = false;
            }
        }
        if outcome == Outcome::Conflict {
            effect(Effect::Conflict {
                index: row.index,
                version: incoming,
                raw: row.raw,
            })?;
        }
        counts.count(outcome);
        Ok(())
    })?;
    if let Some(done) = &current {
        end_key(&fold, done, &mut effect)?;
    }
    Ok(counts)
}

/// Starts the fold of `key` from its stored row; returns what else the fold needs
/// of that row (`None`: it has none).
fn start_from_stored(
    lookup: &mut Statement<'_>,
    key: &[u8; 32],
    fold: &mut KeyFold,
) -> Result<Option<StoredRow>, StoreError> {
    let mut rows = lookup.query([key])?;
    let Some(row) = rows.next()? else {
        fold.start(None);
        return Ok(None);
    };
    let stored = Version {
        revision: row.get(0)?,
        content: Content {
            payload: text(row, 1)?,
            retracted: row.get(2)?,
        },
    };
    let found = StoredRow {
        live: !stored.content.retracted,
        batch_ref: row.get(3)?,
    };
    fold.start(Some(stored));
    Ok(Some(found))
}

/// Column `index` of `row` as text borrowed from SQLite, valid until the row
/// moves on: the fold copies what it keeps into a buffer of its own.
fn text<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'r str> {
    let value = row.get_ref(index)?;
    value.as_str().map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(index, value.data_type(), Box::new(error))
    })
}

/// Ends the fold of a key: hands `effect` the version of the key that won within
/// this file, if one did and the table does not hold it yet, and says when the
/// key's flight times must be computed again.
fn end_key(
    fold: &KeyFold,
    done: &Current,
    effect: &mut impl FnMut(Effect<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    if let Some(version) = fold.winner()
        && !done.written
    {
        effect(Effect::Write {
            key: &done.columns.key,
            columns: &done.columns,
            version,
            replaces: done.table_batch,
            retracted_changes: done
                .table_live
                .is_some_and(|live| live == version.content.retracted),
        })?;
    }
    let live_after = fold.latest().is_some_and(|v| !v.content.retracted);
    if !live_after
        && (done.live_before || done.offered_live)
        && flights::is_timed(&done.columns.event_kind)
    {
        effect(Effect::Untimed {
            flight_ref: done.columns.flight_ref,
        })?;
    }
    Ok(())
}

/// The columns of a new row, in the order `insert_new_sql` and `upsert_sql` bind
/// them: the row's own values (1-7), the batch's (8, 9), its change_seq (10).
const ROW_COLUMNS: &str = "(key, flight_ref, event_kind, instant_utc, source_revision, payload,
         retracted, batch_ref, first_seen_at, updated_at, change_seq)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10)";

/// The conflict target of both statements: the unique index of the key's hex.
const KEY_INDEX: &str = "lower(hex(key))";

/// The insert of a key's first version in the file, when the key is expected to
/// be new: it inserts or, meeting a stored row, does nothing (and the row is then
/// looked up and folded).
fn insert_new_sql() -> String {
    format!("INSERT INTO duty_event_data {ROW_COLUMNS} ON CONFLICT ({KEY_INDEX}) DO NOTHING")
}

/// The upsert of the version of a key that won within a file. The `WHERE` is the
/// revision guard: a row is only ever replaced by a higher revision.
///
/// `retracted` is set only when `set_retracted`: SQLite rewrites every index that
/// holds a column the `SET` names, and the analysts' index of live rows holds
/// `retracted` (in its `WHERE`), so an update that keeps it leaves that index alone.
fn upsert_sql(set_retracted: bool) -> String {
    let retracted = if set_retracted {
        "retracted = excluded.retracted,"
    } else {
        ""
    };
    format!(
        "INSERT INTO duty_event_data {ROW_COLUMNS}
     ON CONFLICT ({KEY_INDEX}) DO UPDATE SET
         source_revision = excluded.source_revision,
         payload = excluded.payload,
         {retracted}
         batch_ref = excluded.batch_ref,
         updated_at = excluded.updated_at,
         change_seq = excluded.change_seq
     WHERE excluded.source_revision > duty_event_data.source_revision"
    )
}

/// Binds a row's own values (key, flight, kind, instant, `version`) and its
/// `change_seq` to a statement of `prepare_row_statement` and executes it; returns
/// the rows changed.
fn execute_row(
    statement: &mut Statement<'_>,
    (key, flight_ref, event_kind, instant_utc): (&[u8; 32], i64, &str, &str),
    version: Version<'_>,
    change_seq: i64,
) -> Result<usize, StoreError> {
    statement.raw_bind_parameter(1, key)?;
    statement.raw_bind_parameter(2, flight_ref)?;
    statement.raw_bind_parameter(3, event_kind)?;
    statement.raw_bind_parameter(4, instant_utc)?;
    statement.raw_bind_parameter(5, version.revision)?;
    statement.raw_bind_parameter(6, version.content.payload)?;
    statement.raw_bind_parameter(7, version.content.retracted)?;
    statement.raw_bind_parameter(10, change_seq)?;
    Ok(statement.raw_execute()?)
}

impl Writer {
    /// Folds the merged events and writes every winner and conflict. A key is
    /// expected to be new while the last one was: its first version is then
    /// inserted outright, and looked up only when the insert meets a stored row;
    /// after a key that was stored, the next one is looked up first. Either way
    /// the fold decides from the stored row or the proof that there is none.
    fn apply(
        &self,
        tx: &Connection,
        runs: Runs,
        default_revision: i64,
        stop: &AtomicBool,
        flights: &mut Flights,
    ) -> Result<Counts, StoreError> {
        let mut insert_new = self.prepare_row_statement(tx, &insert_new_sql())?;
        let mut lookup = tx.prepare(LOOKUP)?;
        let mut expect_new = true;
        let start = |row: &Staged<'_>, first: Version<'_>, fold: &mut KeyFold| {
            if expect_new && self.insert_new(&mut insert_new, row, first)? {
                fold.start(None);
                return Ok(Start::Inserted {
                    batch_ref: self.batch_ref,
                });
            }
            let row = start_from_stored(&mut lookup, row.key, fold)?;
            expect_new = row.is_none();
            Ok(Start::Stored { row })
        };
        // The upsert is prepared at the first winner that needs it: prepared before
        // the apply, SQLite's lookaside memory ran short during it (five times the
        // fallbacks to malloc) and the ingest took 1.9% more instructions
        // (cachegrind, 20k events).
        let mut upserts: [Option<Statement<'_>>; 2] = [None, None];
        fold_merged(runs, default_revision, stop, start, |effect| match effect {
            Effect::Conflict {
                index,
                version,
                raw,
            } => self.quarantine(tx, index, CONFLICT_REASON, &conflict_detail(version), raw),
            Effect::Write {
                key,
                columns,
                version,
                replaces,
                retracted_changes,
            } => {
                let upsert = match &mut upserts[usize::from(retracted_changes)] {
                    Some(upsert) => upsert,
                    slot => {
                        slot.insert(self.prepare_row_statement(tx, &upsert_sql(retracted_changes))?)
                    }
                };
                self.upsert(upsert, key, columns, version)?;
                if let Some(batch_ref) = replaces {
                    *self.replaced.borrow_mut().entry(batch_ref).or_default() += 1;
                }
                Ok(())
            }
            Effect::Untimed { flight_ref } => flights.recompute(tx, flight_ref),
        })
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
        let columns = (row.key, row.flight_ref, row.event_kind, row.instant_utc);
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
        key: &[u8; 32],
        columns: &KeyColumns,
        version: Version<'_>,
    ) -> Result<(), StoreError> {
        let columns = (
            key,
            columns.flight_ref,
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

    /// Writes one quarantine row: the event at `index` in the file.
    fn quarantine(
        &self,
        tx: &Connection,
        index: u64,
        reason: &str,
        detail: &str,
        raw: &str,
    ) -> Result<(), StoreError> {
        tx.prepare_cached(
            "INSERT INTO quarantine
                 (batch_digest, file_name, record_index, reason, detail, raw, quarantined_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            self.digest,
            self.file_name,
            index as i64,
            reason,
            detail,
            raw,
            self.now
        ])?;
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
        let started = std::time::Instant::now();
        tx.commit()?;
        log::debug!("committed in {:?}", started.elapsed());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Event;
    use crate::store::{SqliteStore as Store, runs};

    /// `count` events over a few flights and keys, several versions of most keys
    /// spread over the file (revisions 0-3, two payloads, some without a revision
    /// of their own), and an invalid one now and then: every outcome occurs.
    fn records(count: u64, salt: u64) -> Vec<Record> {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ salt;
        let mut next = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
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
    /// `run_bytes`; returns each file's dry-run and real counts and the tables.
    fn ingest(files: &[Vec<Record>], run_bytes: usize) -> (Vec<(Counts, Counts)>, Vec<String>) {
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
        let mut tables = dump("SELECT * FROM duty_event ORDER BY idempotency_key");
        tables.extend(dump("SELECT rowid, * FROM quarantine ORDER BY rowid"));
        tables.extend(dump("SELECT * FROM ingest_inbox ORDER BY rowid"));
        tables.extend(dump("SELECT flight_id FROM flight ORDER BY flight_id"));
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
}
