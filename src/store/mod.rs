//! The SQLite database: opening it (`open`: pragmas, migrations) and one
//! `BEGIN IMMEDIATE` transaction per batch that applies the contract's outcome
//! rules. The only module that talks to SQLite.

mod error;
pub mod fold;
pub mod open;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

pub use error::{FaultClass, StoreError};
pub use fold::Counts;
pub use open::{BUSY_TIMEOUT, stop_waiting_for_locks};

use crate::batch::{Header, Record};

/// Rows applied between two looks at the stop flag.
const STOP_CHECK_ROWS: u64 = 4096;

/// What `status` reads from the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub batches: u64,
    pub events: u64,
    pub quarantined: u64,
    pub last_ingest_at: Option<String>,
}

pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating if missing) the database at `path` and brings its schema up
    /// to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            conn: open::read_write(path)?,
        })
    }

    /// Opens an existing database without writing to it (for `status` and
    /// `ingest --dry-run`). An older schema is accepted: `status` reads what every
    /// version has; see `require_current_schema`.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            conn: open::read_only(path)?,
        })
    }

    /// An empty database in memory with the current schema: what a dry run
    /// compares against when the database file does not exist yet.
    pub fn open_empty_in_memory() -> Result<Store, StoreError> {
        Ok(Store {
            conn: open::empty_in_memory()?,
        })
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(open::user_version(&self.conn)?)
    }

    /// Refuses a database whose schema is older than this spoolite's: a dry run
    /// opened read-only cannot upgrade it, and its statements need the current one.
    pub fn require_current_schema(&self, path: &Path) -> Result<(), StoreError> {
        let found = self.schema_version()?;
        if found < open::SCHEMA_VERSION {
            return Err(StoreError::OlderSchema {
                path: path.to_owned(),
                found,
                known: open::SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// Lowers SQLite's limit on one value's size, so that tests can meet a value the
    /// database refuses (SQLITE_TOOBIG) without gigabytes of input.
    #[cfg(test)]
    pub(crate) fn limit_value_bytes_for_tests(&self, bytes: i32) {
        // SAFETY: the handle is open for the life of `self.conn`.
        unsafe {
            rusqlite::ffi::sqlite3_limit(
                self.conn.handle(),
                rusqlite::ffi::SQLITE_LIMIT_LENGTH,
                bytes,
            );
        }
    }

    /// Whether a batch with this digest is already committed (a quick look before
    /// taking the write lock; `Batch::begin` checks again under the lock).
    pub fn contains_batch(&self, digest: &str) -> Result<bool, StoreError> {
        inbox_has(&self.conn, digest)
    }

    /// Copies the WAL back into the database and truncates it, as far as readers
    /// allow, without waiting for them: an analyst's long read holds back only
    /// the frames it still needs. Returns whether the WAL was fully checkpointed.
    pub fn checkpoint(&self) -> Result<bool, StoreError> {
        open::wait_for_locks(&self.conn, false)?;
        let result = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        open::wait_for_locks(&self.conn, true)?;
        match result.map_err(StoreError::from) {
            Ok(busy) => Ok(busy == 0),
            Err(e) if e.is_busy() => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn totals(&self) -> Result<Totals, StoreError> {
        let count = |sql: &str| -> Result<u64, StoreError> {
            Ok(self.conn.query_row(sql, [], |row| row.get::<_, i64>(0))? as u64)
        };
        Ok(Totals {
            batches: count("SELECT count(*) FROM ingest_inbox")?,
            // The view joins every row to its flight; the table has the same rows.
            // A database not yet upgraded (status reads any version) has the table
            // under the view's name.
            events: count(if self.schema_version()? >= 3 {
                "SELECT count(*) FROM duty_event_data"
            } else {
                "SELECT count(*) FROM duty_event"
            })?,
            quarantined: count("SELECT count(*) FROM quarantine")?,
            last_ingest_at: self.conn.query_row(
                "SELECT max(ingested_at) FROM ingest_inbox",
                [],
                |row| row.get(0),
            )?,
        })
    }

    /// Starts the transaction for one batch file. Returns `None` when the batch is
    /// already in the inbox: a duplicate, with nothing to do.
    ///
    /// With `dry_run` the transaction only reads: outcomes are counted, nothing is
    /// written but the temporary staging table, and no write lock is taken, so a
    /// dry run works on a read-only connection and never holds the daemon up.
    pub fn begin(
        &mut self,
        digest: &str,
        file_name: &str,
        now: &str,
        dry_run: bool,
    ) -> Result<Option<Batch<'_>>, StoreError> {
        let behavior = if dry_run {
            TransactionBehavior::Deferred
        } else {
            TransactionBehavior::Immediate
        };
        let tx = self.conn.transaction_with_behavior(behavior)?;
        if inbox_has(&tx, digest)? {
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
            digest: digest.to_owned(),
            file_name: file_name.to_owned(),
            now: now.to_owned(),
            counts: Counts::default(),
            reasons: Reasons::new(),
            dry_run,
        }))
    }
}

/// Whether the inbox holds a batch with this digest.
fn inbox_has(conn: &Connection, digest: &str) -> Result<bool, StoreError> {
    let found = conn
        .prepare_cached("SELECT 1 FROM ingest_inbox WHERE batch_digest = ?1")?
        .query_row([digest], |_| Ok(()))
        .optional()?;
    Ok(found.is_some())
}

/// The transaction of one batch file: stage its events, quarantine what is invalid,
/// then `commit` applies the outcome rules and writes the inbox row. Dropping it
/// without committing rolls everything back.
pub struct Batch<'c> {
    tx: rusqlite::Transaction<'c>,
    digest: String,
    file_name: String,
    now: String,
    counts: Counts,
    /// Quarantined events by reason code.
    reasons: Reasons,
    /// Count outcomes, write nothing (see `Store::begin`).
    dry_run: bool,
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

/// What the stored row (or the file's earlier version of it) holds for a key.
struct Current {
    revision: i64,
    payload: String,
    stored: bool,
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
                    self.quarantine(
                        record.index,
                        invalid.reason.code(),
                        &invalid.detail,
                        &record.raw,
                    )?;
                    self.counts.invalid += 1;
                    *self.reasons.entry(invalid.reason.code()).or_default() += 1;
                }
            }
            self.counts.events_total += 1;
        }
        Ok(())
    }

    fn quarantine(
        &self,
        index: u64,
        reason: &str,
        detail: &str,
        raw: &str,
    ) -> Result<(), StoreError> {
        if self.dry_run {
            return Ok(());
        }
        self.tx
            .prepare_cached(
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

    /// Applies the staged events in key order (file order within a key), writes the
    /// inbox row and commits; a dry run rolls back instead.
    /// `stop` set from outside abandons the batch (rolled back) with
    /// `StoreError::Stopped`.
    pub fn finish(mut self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        let default_revision = header.source_revision.unwrap_or(0);
        let started = std::time::Instant::now();
        let applied = self.apply_staged(default_revision, stop)?;
        log::debug!(
            "applied {} staged events in {:?}",
            applied.outcomes(),
            started.elapsed()
        );
        self.counts.add(&applied);
        if applied.conflicts > 0 {
            self.reasons.insert("conflict", applied.conflicts);
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
            reasons: std::mem::take(&mut self.reasons),
        };
        if self.dry_run {
            self.tx.rollback()?;
            return Ok(finished);
        }
        self.tx.execute(
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
        self.tx.execute("DELETE FROM temp.staging", [])?;
        self.tx.commit()?;
        log::debug!("committed in {:?}", started.elapsed());
        Ok(finished)
    }

    /// Returns the counts of the staged (valid) events' outcomes.
    fn apply_staged(&self, default_revision: i64, stop: &AtomicBool) -> Result<Counts, StoreError> {
        let mut counts = Counts::default();
        if !self.dry_run {
            // Number the batch's new flights first, in flight_id order: one pass along
            // the index of ids instead of a random insert per flight. Each staged
            // flight ends up referred to: a key new to the table is inserted, and a
            // stored key already has its flight.
            self.tx.execute(
                "INSERT INTO flight (flight_id)
                 SELECT DISTINCT flight_id FROM temp.staging WHERE true ORDER BY flight_id
                 ON CONFLICT (flight_id) DO NOTHING",
                [],
            )?;
        }
        // The flight numbers are looked up as the staging table is read in file order,
        // where one flight's events sit together, before SQLite sorts by key. A dry
        // run's new flights have none.
        let mut staged = self.tx.prepare(
            "SELECT s.key, s.seq, f.ref, s.event_kind, s.instant_utc, s.source_revision,
                    s.payload, s.raw
             FROM temp.staging AS s LEFT JOIN flight AS f ON f.flight_id = s.flight_id
             ORDER BY s.key, s.seq",
        )?;
        let mut rows = staged.query([])?;
        let mut lookup = self
            .tx
            .prepare("SELECT source_revision, payload FROM duty_event_data WHERE key = ?1")?;
        let mut upsert = self.tx.prepare(UPSERT)?;
        // The key being applied, its state so far and the last event that won.
        let mut group: Option<([u8; 32], Current, Option<Winner>)> = None;
        let mut applied: u64 = 0;
        while let Some(row) = rows.next()? {
            applied += 1;
            if applied.is_multiple_of(STOP_CHECK_ROWS) && stop.load(Ordering::Relaxed) {
                return Err(StoreError::Stopped);
            }
            let key: [u8; 32] = row.get(0)?;
            let revision = row.get::<_, Option<i64>>(5)?.unwrap_or(default_revision);
            let payload: String = row.get(6)?;
            if group.as_ref().is_none_or(|(k, _, _)| *k != key) {
                if let Some((key, current, winner)) = group.take() {
                    self.write(&mut upsert, &key, &current, winner)?;
                }
                let current = current(&mut lookup, &key)?;
                group = Some((key, current, None));
            }
            let (_, current, winner) = group.as_mut().expect("a group is open");
            let outcome = if !current.stored && winner.is_none() {
                Outcome::Inserted
            } else if revision > current.revision {
                Outcome::Updated
            } else if revision < current.revision {
                Outcome::Stale
            } else if payload == current.payload {
                Outcome::Unchanged
            } else {
                Outcome::Conflict
            };
            match outcome {
                Outcome::Inserted | Outcome::Updated => {
                    current.revision = revision;
                    current.payload.clone_from(&payload);
                    *winner = Some(Winner {
                        flight_ref: row.get(2)?,
                        event_kind: row.get(3)?,
                        instant_utc: row.get(4)?,
                        revision,
                        payload,
                    });
                }
                Outcome::Conflict => {
                    let seq: i64 = row.get(1)?;
                    let raw: String = row.get(7)?;
                    let detail = format!(
                        "source_revision {revision} is already stored with a different payload"
                    );
                    self.quarantine(seq as u64, "conflict", &detail, &raw)?;
                }
                Outcome::Stale | Outcome::Unchanged => {}
            }
            *match outcome {
                Outcome::Inserted => &mut counts.inserted,
                Outcome::Updated => &mut counts.updated,
                Outcome::Unchanged => &mut counts.unchanged,
                Outcome::Stale => &mut counts.stale,
                Outcome::Conflict => &mut counts.conflicts,
            } += 1;
        }
        if let Some((key, current, winner)) = group.take() {
            self.write(&mut upsert, &key, &current, winner)?;
        }
        Ok(counts)
    }

    /// Writes the version of `key` that won within this file, if one did. The
    /// `WHERE` of the upsert is the revision guard: a row is only ever replaced by a
    /// higher revision.
    fn write(
        &self,
        upsert: &mut rusqlite::Statement<'_>,
        key: &[u8; 32],
        current: &Current,
        winner: Option<Winner>,
    ) -> Result<(), StoreError> {
        let Some(winner) = winner.filter(|_| !self.dry_run) else {
            return Ok(());
        };
        debug_assert_eq!(current.revision, winner.revision);
        let flight_ref = winner
            .flight_ref
            .expect("the apply numbers every staged flight first");
        let changed = upsert.execute(params![
            key,
            flight_ref,
            winner.event_kind,
            winner.instant_utc,
            winner.revision,
            winner.payload,
            self.digest,
            self.now,
        ])?;
        assert_eq!(
            changed, 1,
            "the revision guard agrees with the outcome rules"
        );
        Ok(())
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

/// The stored revision and payload for `key`, if any.
fn current(lookup: &mut rusqlite::Statement<'_>, key: &[u8; 32]) -> Result<Current, StoreError> {
    let stored = lookup
        .query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(match stored {
        Some((revision, payload)) => Current {
            revision,
            payload,
            stored: true,
        },
        None => Current {
            revision: -1,
            payload: String::new(),
            stored: false,
        },
    })
}

struct Winner {
    /// None only in a dry run, which numbers no new flight.
    flight_ref: Option<i64>,
    event_kind: String,
    instant_utc: String,
    revision: i64,
    payload: String,
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Inserted,
    Updated,
    Unchanged,
    Stale,
    Conflict,
}
