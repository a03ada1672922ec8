//! The SQLite transaction of one batch file: its events staged in a temporary
//! table, then read back in key order (file order within a key), each key's stored
//! row looked up and the file's versions of it folded (`fold`), and the results
//! written by the write path: the winner with one revision-guarded upsert,
//! conflicts and invalid events to quarantine, the inbox row. A dry run folds the
//! same way with no write path.

use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::{Connection, OptionalExtension, Row, Statement, Transaction, params};

use super::StoreError;
use super::fold::{CONFLICT_REASON, Content, Counts, KeyFold, Outcome, Version, conflict_detail};
use crate::batch::{Header, Record};

/// Rows applied between two looks at the stop flag.
const STOP_CHECK_ROWS: u64 = 4096;

/// The transaction of one batch file: stage its events, quarantine what is invalid,
/// then `finish` applies the outcome rules and writes the inbox row. Dropping it
/// without finishing rolls everything back.
pub struct Batch<'c> {
    tx: Transaction<'c>,
    /// Where the results go; `None` in a dry run, which classifies every event
    /// through the same fold and writes nothing but the temporary staging table.
    writer: Option<Writer>,
    counts: Counts,
    /// Quarantined events by reason code.
    reasons: Reasons,
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
/// name, the time every row of it is written at) and the statements that write.
pub(super) struct Writer {
    pub(super) digest: String,
    pub(super) file_name: String,
    pub(super) now: String,
}

/// Starts the transaction of one batch: `None` when the inbox already holds its
/// digest. With a `writer` it takes the write lock at once (`BEGIN IMMEDIATE`);
/// without one it only reads, so a dry run works on a read-only connection and
/// never holds the daemon up.
pub(super) fn begin<'c>(
    conn: &'c mut Connection,
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
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS staging (
             key BLOB NOT NULL, seq INTEGER NOT NULL, flight_id TEXT NOT NULL,
             event_kind TEXT NOT NULL, instant_utc TEXT NOT NULL,
             source_revision INTEGER, payload TEXT NOT NULL, raw TEXT NOT NULL);
         DELETE FROM temp.staging;",
    )?;
    Ok(Some(Batch {
        tx,
        writer,
        counts: Counts::default(),
        reasons: Reasons::new(),
    }))
}

impl Batch<'_> {
    /// Adds a run of records, in file order: valid events to the staging table,
    /// invalid ones to quarantine. The statements are prepared once per run.
    pub fn stage(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let mut staging = self
            .tx
            .prepare_cached("INSERT INTO temp.staging VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")?;
        for record in records {
            let index = record.index as i64;
            match &record.event {
                Ok(event) => {
                    staging.execute(params![
                        event.key(),
                        index,
                        event.flight_id(),
                        event.event_kind(),
                        event.instant_utc(),
                        event.revision(),
                        event.payload(),
                        record.raw,
                    ])?;
                }
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
        Ok(())
    }

    /// Applies the staged events in key order (file order within a key), writes the
    /// inbox row and commits; a dry run rolls back instead.
    /// `stop` set from outside abandons the batch (rolled back) with
    /// `StoreError::Stopped`.
    pub fn finish(mut self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        let default_revision = header.source_revision.unwrap_or(0);
        let started = std::time::Instant::now();
        let applied = match &self.writer {
            Some(writer) => writer.apply(&self.tx, default_revision, stop)?,
            None => fold_staged(&self.tx, default_revision, stop, |_| Ok(()))?,
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
    /// `version` won for `key`: write it, with the rest of its row.
    Write {
        key: &'a [u8; 32],
        columns: &'a KeyColumns,
        version: Version<'a>,
    },
}

/// The columns of a key's row besides its version, from the winning event (every
/// version of a key has the same ones: the key is their digest). Reused from key to
/// key, like the fold's own buffer.
#[derive(Default)]
struct KeyColumns {
    /// `None` only in a dry run, which numbers no new flight.
    flight_ref: Option<i64>,
    event_kind: String,
    instant_utc: String,
}

impl KeyColumns {
    /// Takes the columns of a staged row (`STAGED`'s order).
    fn take(&mut self, row: &Row<'_>) -> rusqlite::Result<()> {
        self.flight_ref = row.get(2)?;
        self.event_kind.clear();
        self.event_kind.push_str(text(row, 3)?);
        self.instant_utc.clear();
        self.instant_utc.push_str(text(row, 4)?);
        Ok(())
    }
}

/// Column `index` of `row` as text borrowed from SQLite, valid until the row
/// moves on: the fold copies what it keeps into buffers of its own, so the apply
/// allocates nothing per event.
fn text<'r>(row: &'r Row<'_>, index: usize) -> rusqlite::Result<&'r str> {
    let value = row.get_ref(index)?;
    value.as_str().map_err(|error| {
        rusqlite::Error::FromSqlConversionFailure(index, value.data_type(), Box::new(error))
    })
}

/// The staged events in key order, file order within a key. The flight numbers are
/// looked up as the staging table is read in file order, where one flight's events
/// sit together, before SQLite sorts by key. A dry run's new flights have none.
const STAGED: &str = "SELECT s.key, s.seq, f.ref, s.event_kind, s.instant_utc, s.source_revision,
            s.payload, s.raw
     FROM temp.staging AS s LEFT JOIN flight AS f ON f.flight_id = s.flight_id
     ORDER BY s.key, s.seq";

/// The stored version of a key.
const LOOKUP: &str = "SELECT source_revision, payload FROM duty_event_data WHERE key = ?1";

/// Reads the staged events back in key order, folds each key's versions onto its
/// stored row and hands `effect` what is to be written; returns the counts of the
/// staged (valid) events' outcomes. The same for a real ingest and a dry run: only
/// `effect` differs.
fn fold_staged(
    tx: &Connection,
    default_revision: i64,
    stop: &AtomicBool,
    mut effect: impl FnMut(Effect<'_>) -> Result<(), StoreError>,
) -> Result<Counts, StoreError> {
    let mut staged = tx.prepare(STAGED)?;
    let mut rows = staged.query([])?;
    let mut lookup = tx.prepare(LOOKUP)?;
    let mut fold = KeyFold::new();
    let mut columns = KeyColumns::default();
    let mut counts = Counts::default();
    // The key being folded.
    let mut key: Option<[u8; 32]> = None;
    let mut applied: u64 = 0;
    while let Some(row) = rows.next()? {
        applied += 1;
        if applied.is_multiple_of(STOP_CHECK_ROWS) && stop.load(Ordering::Relaxed) {
            return Err(StoreError::Stopped);
        }
        let row_key: [u8; 32] = row.get(0)?;
        if key != Some(row_key) {
            if let Some(done) = &key {
                write_winner(&fold, done, &columns, &mut effect)?;
            }
            start_key(&mut lookup, &row_key, &mut fold)?;
            key = Some(row_key);
        }
        let incoming = Version {
            revision: row.get::<_, Option<i64>>(5)?.unwrap_or(default_revision),
            content: Content::live(text(row, 6)?),
        };
        let outcome = fold.offer(incoming);
        if outcome.wins() {
            columns.take(row)?;
        } else if outcome == Outcome::Conflict {
            let index: i64 = row.get(1)?;
            effect(Effect::Conflict {
                index: index as u64,
                version: incoming,
                raw: text(row, 7)?,
            })?;
        }
        counts.count(outcome);
    }
    if let Some(done) = &key {
        write_winner(&fold, done, &columns, &mut effect)?;
    }
    Ok(counts)
}

/// Starts the fold of `key` from its stored row.
fn start_key(
    lookup: &mut Statement<'_>,
    key: &[u8; 32],
    fold: &mut KeyFold,
) -> Result<(), StoreError> {
    let mut rows = lookup.query([key])?;
    let stored = match rows.next()? {
        Some(row) => Some(Version {
            revision: row.get(0)?,
            content: Content::live(text(row, 1)?),
        }),
        None => None,
    };
    fold.start(stored);
    Ok(())
}

/// Hands the version of `key` that won within this file, if one did, to `effect`.
fn write_winner(
    fold: &KeyFold,
    key: &[u8; 32],
    columns: &KeyColumns,
    effect: &mut impl FnMut(Effect<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    match fold.winner() {
        Some(version) => effect(Effect::Write {
            key,
            columns,
            version,
        }),
        None => Ok(()),
    }
}

/// The upsert of the version of a key that won within a file. The `WHERE` is the
/// revision guard: a row is only ever replaced by a higher revision.
const UPSERT: &str = "INSERT INTO duty_event_data (key, flight_ref, event_kind, instant_utc,
         source_revision, payload, batch_digest, first_seen_at, updated_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)
     ON CONFLICT (key) DO UPDATE SET
         source_revision = excluded.source_revision,
         payload = excluded.payload,
         batch_digest = excluded.batch_digest,
         updated_at = excluded.updated_at
     WHERE excluded.source_revision > duty_event_data.source_revision";

impl Writer {
    /// Numbers the batch's new flights, then folds the staged events and writes
    /// every winner and conflict.
    fn apply(
        &self,
        tx: &Connection,
        default_revision: i64,
        stop: &AtomicBool,
    ) -> Result<Counts, StoreError> {
        self.number_flights(tx)?;
        // The upsert is prepared at the first winner, once the staged rows are
        // sorted and the first key looked up: prepared before them, SQLite's
        // lookaside memory ran short during the apply (five times the fallbacks to
        // malloc) and the ingest took 1.9% more instructions (cachegrind, 20k
        // events).
        let mut upsert: Option<Statement<'_>> = None;
        fold_staged(tx, default_revision, stop, |effect| match effect {
            Effect::Conflict {
                index,
                version,
                raw,
            } => self.quarantine(tx, index, CONFLICT_REASON, &conflict_detail(version), raw),
            Effect::Write {
                key,
                columns,
                version,
            } => {
                let upsert = match &mut upsert {
                    Some(upsert) => upsert,
                    None => upsert.insert(tx.prepare(UPSERT)?),
                };
                self.upsert(upsert, key, columns, version)
            }
        })
    }

    /// Numbers the batch's new flights in flight_id order: one pass along the index
    /// of ids instead of a random insert per flight. Each staged flight ends up
    /// referred to: a key new to the table is inserted, and a stored key already
    /// has its flight.
    fn number_flights(&self, tx: &Connection) -> Result<(), StoreError> {
        tx.execute(
            "INSERT INTO flight (flight_id)
             SELECT DISTINCT flight_id FROM temp.staging WHERE true ORDER BY flight_id
             ON CONFLICT (flight_id) DO NOTHING",
            [],
        )?;
        Ok(())
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
        let flight_ref = columns
            .flight_ref
            .expect("the apply numbers every staged flight first");
        let changed = upsert.execute(params![
            key,
            flight_ref,
            columns.event_kind,
            columns.instant_utc,
            version.revision,
            version.content.payload,
            self.digest,
            self.now,
        ])?;
        assert_eq!(
            changed, 1,
            "the revision guard agrees with the outcome rules"
        );
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
        tx.execute(
            "INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at, events_total,
                 inserted, updated, unchanged, stale, conflicts, invalid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
            ],
        )?;
        let started = std::time::Instant::now();
        tx.execute("DELETE FROM temp.staging", [])?;
        tx.commit()?;
        log::debug!("committed in {:?}", started.elapsed());
        Ok(())
    }
}
