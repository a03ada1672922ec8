//! The PostgreSQL transaction of one batch file, in set-based steps with no round
//! trip per event:
//!
//! 1. `begin` claims the batch's digest in the inbox first
//!    (`INSERT … ON CONFLICT DO NOTHING`): a second writer of the same bytes waits
//!    on that row until the first commits, then finds it and skips the file (or,
//!    if the first rolled back, takes it over).
//! 2. `stage` COPYs each chunk's valid events into a temporary table and its
//!    invalid ones straight into quarantine; the flight id of each run of one
//!    flight's events goes into a temporary table of its own.
//! 3. `finish` takes a lock on each flight id the file names (`lock_flights`:
//!    transaction advisory locks, in one order for every writer), so that writers
//!    of other flights apply side by side and two writers of one flight one after
//!    the other. It then reads the staged events joined to their stored rows in
//!    key order (file order within a key) through a cursor, folds each key with
//!    `store::fold::FileFold` exactly as SQLite does, COPYs the winners and
//!    conflicts out, adds the batch's new flight ids to `spoolite_flight_id`
//!    (noting those that differ from another only in letter case), applies the
//!    winners with one revision-guarded `INSERT … ON CONFLICT … DO UPDATE`, and
//!    computes the flights' times and crew rows again (`crew::keep_flights`).
//! 4. Last, in a short critical section: it locks the one `spoolite_change_seq`
//!    row, computes the flight duty periods its rows touch (which read other
//!    flights' rows: `crew::keep_periods`), makes every number of its rows larger
//!    than every committed one (`RENUMBER`) and moves the counter past them,
//!    fills in the inbox row's counts (reading back the transaction's id), and
//!    commits, which releases every lock. The rows take their numbers from the
//!    sequence `spoolite_change_seq_next` as they are written; only a row whose
//!    number another writer passed by committing first is written again. A
//!    `COMMIT` that fails may have happened all the same:
//!    `StoreError::CommitInDoubt` carries the id and what the batch came to, so
//!    that the next try, which finds the digest in the inbox or takes the file
//!    over, can tell whether the commit was this one (`commit_status`).
//!
//! Slots (the contract's *Slots*) add two steps, as on SQLite: before the fold,
//! the staged events that have a slot are met slot by slot in file order with the
//! slot's stored rows (`SlotClaims`, through a cursor of its own), and those whose
//! revision another key holds are conflicts the fold skips; after the winners
//! are applied, every slot the file named is settled (`SETTLE_SLOTS`): only its
//! highest revision reads as sent, the rest read retracted, and a row that read
//! live and no longer does takes one of this batch's `change_seq`s.
//!
//! Memory is bounded by the cursor's fetch size, not by the number of events (and
//! by the slot conflicts found, which are few).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, SimpleQueryMessage, Transaction};

use super::SEQUENCE_NEXT;
use super::connect::Canceller;
use super::copy_text::{copy, row};

use crate::batch::{Header, Record};
use crate::store::common::{CASE_VARIANTS_SHOWN, CaseVariants, Quarantined};
use crate::store::error::{CommitStatus, InDoubt, StoreError};
use crate::store::fold::{
    CONFLICT_REASON, Content, Counts, FileFold, Finished, KeyEnd, KeySink, SlotClaims, Tally,
    Version, slot_conflict_detail,
};

/// Rows read from the fold's cursor at a time.
const FETCH_ROWS: usize = 10_000;

/// One batch file's transaction; dropped without `finish`, it rolls back.
pub struct Batch<'c> {
    tx: Transaction<'c>,
    digest: String,
    /// Where the results go: written (`Write`), or nowhere in a dry run
    /// (`DryRun`), which classifies every event through the same fold.
    effects: Box<dyn Effects>,
    tally: Tally,
    /// COPY text of the chunk being staged.
    staged: Vec<u8>,
    /// The flight id of the last valid event staged (a run of one flight's
    /// events is told to the effects once).
    last_flight: String,
    /// Whether a staged event has a slot.
    slotted: bool,
}

/// Where a batch's results go: `Write` writes them, `DryRun` drops them. The
/// staging, the cursor and the fold (`FileFold`) are the same for both.
pub(super) trait Effects {
    /// Claims the batch's digest in the inbox (a dry run only looks); `false`:
    /// the inbox holds it already.
    fn claim(&self, tx: &mut Transaction<'_>, digest: &str) -> Result<bool, StoreError>;

    /// Quarantines an event of the batch `digest`, sent with the next `flush`.
    fn quarantine(&mut self, digest: &str, event: Quarantined<'_>);

    /// Starts the apply phase: locks the staged events' flights (`lock_flights`).
    fn lock(&mut self, tx: &mut Transaction<'_>, stop: &AtomicBool) -> Result<(), StoreError>;

    /// The version of a key that won within the file, sent with the next `flush`.
    fn winner(&mut self, key: &KeyColumns, version: Version<'_>);

    /// A flight id of the file and the position of its event that starts a run
    /// of them (one call per run of a flight's events, not per event).
    fn flight(&mut self, flight_id: &str, index: u64);

    /// Sends what was gathered since the last flush.
    fn flush(&mut self, tx: &mut Transaction<'_>) -> Result<(), StoreError>;

    /// Ends the transaction: the winners applied, the slots the file named
    /// settled (`slotted`: it named any), the changed rows numbered, the counter
    /// moved and the inbox row's counts written before the commit; or a
    /// rollback. `stop` set abandons a wait for a lock.
    fn end(
        self: Box<Self>,
        tx: Transaction<'_>,
        batch: Ending<'_>,
        finished: Finished,
        stop: &AtomicBool,
    ) -> Result<Finished, StoreError>;
}

/// What `Effects::end` needs of the batch besides its transaction.
pub(super) struct Ending<'b> {
    digest: String,
    header: &'b Header,
    /// The file named a slot.
    slotted: bool,
}

/// The write path of one batch: the file its rows are written as, the time they
/// are written at, the rows gathered for the next COPY, and the winners' count.
pub(super) struct Write {
    file_name: String,
    now: String,
    quarantined: Vec<u8>,
    winners: Vec<u8>,
    /// The winners the fold chose, each a row the apply must write.
    chosen: u64,
    /// COPY text of runs' flight ids, for `spoolite_stage_flight`.
    flights: Vec<u8>,
    /// The file's flight ids in lower case, up to one more than
    /// `FLIGHT_LOCKS_MAX` (then the file locks every flight).
    flight_names: HashSet<String>,
    /// Cancels a wait for a lock when the process stops (`wait_for_locks`).
    canceller: Canceller,
}

/// Bytes of runs' flight ids gathered before they are sent (a few thousand
/// flights), so that staging them costs a round trip now and then, not per chunk.
const FLIGHTS_SEND_BYTES: usize = 256 * 1024;

/// A dry run's effects: the inbox is only looked at, nothing is written, no lock
/// is taken, and the transaction is rolled back.
pub(super) struct DryRun;

/// A batch's statements are compiled by no JIT: the planner's estimate for a
/// station's file, once its tables hold a few tens of thousands of rows, passes
/// `jit_above_cost` and the optimising thresholds, and the compilation of the
/// flight duty periods' statement then took 200 of its 220 ms, in the step that
/// writers take one at a time (`keep_periods`). Nothing a batch runs reads
/// enough rows to win the compilation back.
const NO_JIT: &str = "SET LOCAL jit = off";

const CREATE_STAGE: &str = "CREATE TEMP TABLE spoolite_stage (
        key text COLLATE \"C\" NOT NULL,
        idx bigint NOT NULL,
        revision bigint,
        retracted boolean NOT NULL,
        flight_id text NOT NULL,
        event_kind text NOT NULL,
        instant_utc text NOT NULL,
        payload text NOT NULL,
        raw text NOT NULL,
        slot text
    ) ON COMMIT DROP;
    CREATE TEMP TABLE spoolite_winner (
        key text COLLATE \"C\" NOT NULL,
        flight_id text NOT NULL,
        event_kind text NOT NULL,
        instant_utc text NOT NULL,
        source_revision bigint NOT NULL,
        payload text NOT NULL,
        retracted boolean NOT NULL,
        slot text
    ) ON COMMIT DROP;
    CREATE TEMP TABLE spoolite_stage_flight (
        flight_id text COLLATE \"C\" NOT NULL,
        idx bigint NOT NULL
    ) ON COMMIT DROP";

impl Write {
    /// The write path of a batch written as `file_name` at `now`.
    pub(super) fn new(file_name: &str, now: &str, canceller: Canceller) -> Write {
        Write {
            canceller,
            file_name: file_name.to_owned(),
            now: now.to_owned(),
            quarantined: Vec::new(),
            winners: Vec::new(),
            chosen: 0,
            flights: Vec::new(),
            flight_names: HashSet::new(),
        }
    }
}

/// Starts the transaction of one batch: claims its digest in the inbox (a dry
/// run only looks). `None`: the inbox holds it already.
pub(super) fn begin<'c>(
    client: &'c mut Client,
    digest: &str,
    effects: Box<dyn Effects>,
) -> Result<Option<Batch<'c>>, StoreError> {
    // READ COMMITTED: every statement after a lock is granted sees what the
    // writer that held it before committed (a snapshot per statement).
    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::ReadCommitted)
        .start()?;
    if !effects.claim(&mut tx, digest)? {
        tx.rollback()?;
        return Ok(None);
    }
    tx.batch_execute(&format!("{NO_JIT}; {CREATE_STAGE}"))?;
    Ok(Some(Batch {
        tx,
        digest: digest.to_owned(),
        effects,
        tally: Tally::default(),
        staged: Vec::new(),
        last_flight: String::new(),
        slotted: false,
    }))
}

fn bool_text(value: bool) -> &'static str {
    if value { "t" } else { "f" }
}

const COPY_STAGE: &str = "COPY spoolite_stage (key, idx, revision, retracted, flight_id,
    event_kind, instant_utc, payload, raw, slot) FROM STDIN";
const COPY_QUARANTINE: &str = "COPY quarantine (batch_digest, file_name, record_index, reason,
    detail, raw, quarantined_at) FROM STDIN";
const COPY_STAGE_FLIGHT: &str = "COPY spoolite_stage_flight (flight_id, idx) FROM STDIN";
const COPY_WINNER: &str = "COPY spoolite_winner (key, flight_id, event_kind, instant_utc,
    source_revision, payload, retracted, slot) FROM STDIN";

/// The staged events joined to their stored rows, in key order, then file order.
/// A stored row's `retracted` is its own, as sent (a row its slot displaced was
/// sent live).
const FOLD_CURSOR: &str = "DECLARE spoolite_fold NO SCROLL CURSOR FOR
    SELECT s.key, s.idx, s.revision, s.retracted, s.payload, s.raw, s.flight_id,
           s.event_kind, s.instant_utc, d.source_revision, d.payload,
           d.retracted AND NOT d.displaced, s.slot, d.slot
    FROM spoolite_stage AS s LEFT JOIN spoolite_event AS d ON d.key = s.key
    ORDER BY s.key, s.idx";

/// The slots the staged events name, slot by slot: first the slot's stored rows
/// (`idx` -1), then its staged events in file order.
const SLOT_CURSOR: &str = "DECLARE spoolite_slots NO SCROLL CURSOR FOR
    WITH named AS (
        SELECT DISTINCT flight_id, event_kind, slot FROM spoolite_stage WHERE slot IS NOT NULL
    )
    SELECT d.flight_id, d.event_kind, d.slot, -1::bigint AS idx, d.key, d.source_revision
    FROM spoolite_event AS d JOIN named AS n
        ON d.flight_id = n.flight_id AND d.event_kind = n.event_kind AND d.slot = n.slot
    UNION ALL
    SELECT flight_id, event_kind, slot, idx, key, revision
    FROM spoolite_stage WHERE slot IS NOT NULL
    ORDER BY 1, 2, 3, 4";

/// Settles the slots the staged events name, once the winners are applied: the
/// rows to change go into `spoolite_settle`, with what each is to read (its own
/// content when it holds its slot's highest revision, else retracted, and
/// `displaced` when it was sent live).
const SETTLE_SLOTS: &str = "CREATE TEMP TABLE spoolite_settle ON COMMIT DROP AS
    WITH named AS (
        SELECT DISTINCT flight_id, event_kind, slot FROM spoolite_stage WHERE slot IS NOT NULL
    ), rows AS (
        SELECT d.key, d.retracted, d.displaced, d.batch_digest,
               d.retracted AND NOT d.displaced AS own,
               d.source_revision = max(d.source_revision)
                   OVER (PARTITION BY d.flight_id, d.event_kind, d.slot) AS wins
        FROM spoolite_event AS d JOIN named AS n
            ON d.flight_id = n.flight_id AND d.event_kind = n.event_kind AND d.slot = n.slot
    ), settled AS (
        SELECT key, retracted, displaced, batch_digest,
               CASE WHEN wins THEN own ELSE true END AS to_retracted,
               CASE WHEN wins THEN false ELSE NOT own END AS to_displaced
        FROM rows
    )
    SELECT key, retracted, batch_digest, to_retracted, to_displaced FROM settled
    WHERE (retracted, displaced) IS DISTINCT FROM (to_retracted, to_displaced)";

/// The settled rows that read live and no longer do, and that another batch
/// wrote: written as this batch's change (`$1` its digest, `$2` its time), each
/// with the next number of the sequence (after the winners'), in key order.
const DISPLACE: &str = "UPDATE spoolite_event AS d
    SET retracted = true, displaced = s.to_displaced, batch_digest = $1, updated_at = $2,
        change_seq = s.seq
    FROM (SELECT key, to_displaced, nextval('spoolite_change_seq_next') AS seq
          FROM (SELECT key, to_displaced FROM spoolite_settle
                WHERE NOT retracted AND to_retracted AND batch_digest IS DISTINCT FROM $1
                ORDER BY key) AS o) AS s
    WHERE d.key = s.key";

/// The other settled rows: only what they read changes.
const RESETTLE: &str = "UPDATE spoolite_event AS d
    SET retracted = s.to_retracted, displaced = s.to_displaced
    FROM spoolite_settle AS s
    WHERE d.key = s.key
      AND NOT (NOT s.retracted AND s.to_retracted AND s.batch_digest IS DISTINCT FROM $1)";

/// The winners applied in one statement, each with the next number of the
/// sequence, in key order (taken after the sort). The `WHERE` is the revision
/// guard: a stored row is only ever replaced by a higher revision (which the
/// fold has already decided each winner is, so every row of `spoolite_winner`
/// is written).
const APPLY: &str = "INSERT INTO spoolite_event AS d (key, flight_id, event_kind, instant_utc,
        source_revision, payload, retracted, batch_digest, first_seen_at, updated_at, change_seq,
        slot)
    SELECT key, flight_id, event_kind, instant_utc, source_revision, payload, retracted,
           $1, $2, $2, nextval('spoolite_change_seq_next'), slot
    FROM spoolite_winner ORDER BY key
    ON CONFLICT (key) DO UPDATE SET
        source_revision = excluded.source_revision,
        payload = excluded.payload,
        retracted = excluded.retracted,
        displaced = false,
        batch_digest = excluded.batch_digest,
        updated_at = excluded.updated_at,
        change_seq = excluded.change_seq
    WHERE excluded.source_revision > d.source_revision";

/// The rows of the batch `$1` (every row it wrote: a digest is written once)
/// whose number is below `$2`, the counter's next, given new numbers from the
/// sequence: another writer took numbers after theirs and committed first. Run
/// under the counter lock, just before the commit.
const RENUMBER: &str = "UPDATE spoolite_event SET change_seq = nextval('spoolite_change_seq_next')
    WHERE batch_digest = $1 AND change_seq < $2";

/// Whether the inbox holds a batch with the batch id `$2` and other bytes than
/// `$1`'s.
const RESENT: &str =
    "EXISTS (SELECT 1 FROM ingest_inbox WHERE batch_id = $2 AND batch_digest <> $1)";

/// Adds the batch's new flight ids to `spoolite_flight_id` and returns, at most
/// `CASE_VARIANTS_SHOWN` of them in file order, each new id with a spelling that
/// differs only in letter case, stored before (the statement's snapshot does not
/// see its own insert) or new in the file before it, and how many such pairs
/// there are in all. Run under the flights' locks (`lock_flights`, taken of each
/// id in lower case): a writer of an id differing only in case has committed it
/// or waits.
const NOTE_FLIGHT_IDS: &str = "WITH sent AS (
        SELECT flight_id, min(idx) AS idx FROM spoolite_stage_flight GROUP BY flight_id
    ), new AS (
        INSERT INTO spoolite_flight_id (flight_id) SELECT flight_id FROM sent
        ON CONFLICT DO NOTHING RETURNING flight_id
    ), new_sent AS (
        SELECT flight_id, idx FROM new JOIN sent USING (flight_id)
    ), pairs AS (
        SELECT n.flight_id AS sent, n.idx, k.flight_id AS other
        FROM new_sent AS n JOIN spoolite_flight_id AS k ON lower(k.flight_id) = lower(n.flight_id)
        UNION ALL
        SELECT n.flight_id, n.idx, m.flight_id
        FROM new_sent AS n
        JOIN new_sent AS m ON lower(m.flight_id) = lower(n.flight_id) AND m.idx < n.idx
    )
    SELECT sent, other, count(*) OVER () FROM pairs ORDER BY idx, other LIMIT $1";

/// The key being folded: its columns (the same in every version of it).
#[derive(Default)]
pub(super) struct KeyColumns {
    key: String,
    flight_id: String,
    event_kind: String,
    instant_utc: String,
}

impl KeyColumns {
    /// The columns of a row of the fold's cursor (`FOLD_CURSOR`).
    fn take(&mut self, row: &postgres::Row) {
        for (column, at) in [
            (&mut self.key, 0),
            (&mut self.flight_id, 6),
            (&mut self.event_kind, 7),
            (&mut self.instant_utc, 8),
        ] {
            column.clear();
            column.push_str(row.get(at));
        }
    }
}

/// How often a wait for a lock looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// How often a stop's cancel request is sent again while the wait goes on (a
/// request can be lost on its way, e.g. through a connection pooler).
const CANCEL_AGAIN: Duration = Duration::from_secs(1);

/// Runs `sql` (one statement or several), which takes locks held until the
/// commit, and returns the text of its rows' first column: one round trip when
/// the locks are free. While another writer holds one of them the statement
/// waits in the server's lock queue, keeping its place there however long the
/// wait (`lock_timeout` is set to none for it, whatever the server or role
/// says: a timeout would give the place up). A watcher thread beside it asks
/// the server to cancel it once `stop` is set, and asks again every
/// `CANCEL_AGAIN` until it returns. The server acts on a request when it gets
/// to it, so one may cancel a later statement of the batch instead: once `stop`
/// is set the batch is given up (`Stopped`) whatever the statement returned,
/// and the caller rolls it back.
fn wait_for_locks(
    tx: &mut Transaction<'_>,
    sql: &str,
    stop: &AtomicBool,
    canceller: &Canceller,
) -> Result<Vec<String>, StoreError> {
    let sql = format!("SET LOCAL lock_timeout = 0; {sql}");
    let token = tx.cancel_token();
    let waiting = AtomicBool::new(true);
    let watch = || {
        let mut sent: Option<Instant> = None;
        let mut warned = false;
        loop {
            std::thread::park_timeout(STOP_POLL);
            if !waiting.load(Ordering::Acquire) {
                return;
            }
            if !stop.load(Ordering::Relaxed) || sent.is_some_and(|at| at.elapsed() < CANCEL_AGAIN) {
                continue;
            }
            // The postgres crate builds a runtime for the request, and may panic
            // if it cannot: the stop then waits, the daemon goes on.
            let cancel = std::panic::catch_unwind(AssertUnwindSafe(|| canceller.cancel(&token)));
            match cancel {
                Ok(Ok(())) => sent = Some(Instant::now()),
                Ok(Err(error)) if !warned => {
                    log::warn!(
                        "could not cancel a wait for a lock to stop ({error}); trying again"
                    );
                    warned = true;
                }
                _ => {}
            }
        }
    };
    let done = std::thread::scope(|scope| {
        let watcher = std::thread::Builder::new()
            .name("spoolite-lock-wait".to_owned())
            .spawn_scoped(scope, watch);
        if let Err(error) = &watcher {
            log::warn!("no thread to watch a wait for a lock ({error}): a stop waits for it");
        }
        let done = tx.simple_query(&sql);
        waiting.store(false, Ordering::Release);
        if let Ok(watcher) = &watcher {
            watcher.thread().unpark();
        }
        done
    });
    if stop.load(Ordering::Relaxed) {
        return Err(StoreError::Stopped);
    }
    let messages = done?;
    Ok(messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("").to_owned()),
            _ => None,
        })
        .collect())
}

/// The most flights whose locks a batch takes one by one; a file of more locks
/// them all at once (`lock_flights`). Each lock is an entry of the server's lock
/// table, whose room is `max_locks_per_transaction` (64 by default) for each of
/// its connections: a station's file names a few dozen flights.
const FLIGHT_LOCKS_MAX: usize = 256;

/// The two-key advisory locks a batch takes: `(ALL_FLIGHTS, 0)` shared to lock
/// flights one by one, exclusive to lock them all; `(ONE_FLIGHT, hash)` for a
/// flight.
const ALL_FLIGHTS: i32 = 1;
const ONE_FLIGHT: i32 = 2;

/// Locks the staged events' flights for the rest of the transaction, so that no
/// other writer changes a row of them meanwhile: each flight id in lower case
/// (ids differing only in letter case share a lock), or, for a file of more than
/// `FLIGHT_LOCKS_MAX` flights, every flight at once. Every writer takes its
/// locks in one order (the all-flights lock, then the flights by their keys,
/// then the counter row), so two writers never wait for each other in a circle.
fn lock_flights(
    tx: &mut Transaction<'_>,
    every_flight: bool,
    stop: &AtomicBool,
    canceller: &Canceller,
) -> Result<(), StoreError> {
    let sql = match every_flight {
        true => format!("SELECT pg_advisory_xact_lock({ALL_FLIGHTS}, 0)"),
        false => format!(
            "SELECT pg_advisory_xact_lock_shared({ALL_FLIGHTS}, 0);
             SELECT pg_advisory_xact_lock({ONE_FLIGHT}, h)
             FROM (SELECT DISTINCT hashtext(lower(flight_id)) AS h FROM spoolite_stage
                   ORDER BY h) AS s"
        ),
    };
    wait_for_locks(tx, &sql, stop, canceller)?;
    Ok(())
}

/// Locks the `spoolite_change_seq` row until the commit and returns the next
/// `change_seq`: the last lock a batch takes, held from just before its commit.
fn lock_counter(
    tx: &mut Transaction<'_>,
    stop: &AtomicBool,
    canceller: &Canceller,
) -> Result<i64, StoreError> {
    let rows = wait_for_locks(
        tx,
        "SELECT next_seq FROM spoolite_change_seq WHERE one FOR UPDATE",
        stop,
        canceller,
    )?;
    rows.first()
        .and_then(|next| next.parse().ok())
        .ok_or_else(|| StoreError::Disagreed(format!("the change_seq counter read {rows:?}")))
}

impl Batch<'_> {
    /// Adds a run of records, in file order: valid events to the staging table,
    /// invalid ones to quarantine (one COPY each per run).
    pub fn stage(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let mut index = String::new();
        let mut revision = String::new();
        for record in records {
            index.clear();
            write!(index, "{}", record.index).expect("write to a String");
            match &record.event {
                Ok(event) => {
                    if event.flight_id() != self.last_flight {
                        self.last_flight.clear();
                        self.last_flight.push_str(event.flight_id());
                        self.effects.flight(event.flight_id(), record.index);
                    }
                    revision.clear();
                    if let Some(r) = event.revision() {
                        write!(revision, "{r}").expect("write to a String");
                    }
                    row(
                        &mut self.staged,
                        &[
                            Some(&hex::encode(event.key())),
                            Some(&index),
                            event.revision().map(|_| revision.as_str()),
                            Some(bool_text(event.retracted())),
                            Some(event.flight_id()),
                            Some(event.event_kind()),
                            Some(event.instant_utc()),
                            Some(event.payload()),
                            Some(&record.raw),
                            event.slot(),
                        ],
                    );
                    self.slotted |= event.slot().is_some();
                    self.tally.read_valid();
                }
                Err(invalid) => {
                    let event = Quarantined::invalid(record, invalid);
                    self.effects.quarantine(&self.digest, event);
                    self.tally.read_invalid(event.reason);
                }
            }
        }
        copy(&mut self.tx, COPY_STAGE, &mut self.staged)?;
        self.effects.flush(&mut self.tx)
    }

    /// Folds the staged events onto their stored rows, writes the winners,
    /// conflicts and the inbox row's counts, and commits (a dry run rolls back).
    /// `stop` set from outside abandons the batch (rolled back) with
    /// `StoreError::Stopped`.
    pub fn finish(mut self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        // The staged rows' statistics: without them the planner takes a
        // temporary table for 1,360 rows, and for a station's file it read the
        // whole event table (a hash join) to find a few dozen keys.
        self.tx.batch_execute("ANALYZE spoolite_stage")?;
        // From here to the commit no other writer changes a row of these
        // flights: the stored rows read below are those the last writer of each
        // committed.
        self.effects.lock(&mut self.tx, stop)?;
        let default_revision = header.source_revision.unwrap_or(0);
        let slot_conflicts = match self.slotted {
            true => self.slot_conflicts(default_revision)?,
            false => HashSet::new(),
        };
        let fold = self.fold_staged(default_revision, &slot_conflicts, stop)?;
        // Whether the batch id was sent before is asked in `end`, once the
        // writers before have committed theirs.
        let finished = self.tally.finish(&fold, false);
        let ending = Ending {
            digest: self.digest,
            header,
            slotted: self.slotted,
        };
        self.effects.end(self.tx, ending, finished, stop)
    }

    /// The staged events the slot rules make conflicts: each slot's events in
    /// file order, met with the slot's stored rows (`SlotClaims`).
    fn slot_conflicts(&mut self, default_revision: i64) -> Result<HashSet<u64>, StoreError> {
        self.tx.batch_execute(SLOT_CURSOR)?;
        let mut conflicts = HashSet::new();
        let mut claims = SlotClaims::default();
        let fetch = format!("FETCH {FETCH_ROWS} FROM spoolite_slots");
        loop {
            let rows = self.tx.query(&fetch, &[])?;
            for row in &rows {
                let slot: [&str; 3] = [row.get(0), row.get(1), row.get(2)];
                let idx: i64 = row.get(3);
                let key = key_bytes(row.get(4))?;
                let revision: Option<i64> = row.get(5);
                let revision = revision.unwrap_or(default_revision);
                if claims.meet(slot, &key, revision, idx < 0) {
                    conflicts.insert(idx as u64);
                }
            }
            if rows.len() < FETCH_ROWS {
                break;
            }
        }
        self.tx.batch_execute("CLOSE spoolite_slots")?;
        Ok(conflicts)
    }

    /// Reads the staged events joined to their stored rows through a cursor, a
    /// page at a time, and folds them (`FileFold::step`, through `CursorKeys`);
    /// what each page decides is sent before the next is read.
    fn fold_staged(
        &mut self,
        default_revision: i64,
        slot_conflicts: &HashSet<u64>,
        stop: &AtomicBool,
    ) -> Result<FileFold, StoreError> {
        self.tx.batch_execute(FOLD_CURSOR)?;
        let mut fold = FileFold::new();
        let mut keys = CursorKeys {
            effects: &mut *self.effects,
            digest: &self.digest,
            columns: KeyColumns::default(),
        };
        let fetch = format!("FETCH {FETCH_ROWS} FROM spoolite_fold");
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(StoreError::Stopped);
            }
            let rows = self.tx.query(&fetch, &[])?;
            for row in &rows {
                let key: &str = row.get(0);
                let revision: Option<i64> = row.get(2);
                let slot: Option<&str> = row.get(12);
                let incoming = Version {
                    revision: revision.unwrap_or(default_revision),
                    content: Content {
                        payload: row.get(4),
                        retracted: row.get(3),
                        slot,
                    },
                };
                let idx: i64 = row.get(1);
                if slot_conflicts.contains(&(idx as u64)) {
                    fold.count_slot_conflict();
                    let detail = slot_conflict_detail(incoming.revision, slot.unwrap_or_default());
                    keys.quarantine(row, CONFLICT_REASON, &detail)?;
                    continue;
                }
                fold.step(&mut keys, key.as_bytes(), row, incoming)?;
            }
            let done = rows.len() < FETCH_ROWS;
            if done {
                fold.end_last_key(&mut keys)?;
            }
            keys.effects.flush(&mut self.tx)?;
            if done {
                break;
            }
        }
        self.tx.batch_execute("CLOSE spoolite_fold")?;
        Ok(fold)
    }
}

/// The fold's keys from the cursor's rows (`FOLD_CURSOR`): each started from the
/// stored row the cursor joined to it; winners and conflicts buffered in the
/// effects, sent a page at a time.
struct CursorKeys<'b> {
    effects: &'b mut dyn Effects,
    digest: &'b str,
    columns: KeyColumns,
}

impl KeySink for CursorKeys<'_> {
    type Row<'r> = postgres::Row;
    type Error = StoreError;

    fn start(
        &mut self,
        fold: &mut FileFold,
        row: &postgres::Row,
        _: Version<'_>,
    ) -> Result<(), StoreError> {
        self.columns.take(row);
        let revision: Option<i64> = row.get(9);
        let stored = revision.map(|revision| Version {
            revision,
            content: Content {
                payload: row.get(10),
                retracted: row.get(11),
                slot: row.get(13),
            },
        });
        let key: &str = row.get(0);
        fold.start_key(key.as_bytes(), stored);
        Ok(())
    }

    fn end(&mut self, ended: KeyEnd<'_>) -> Result<(), StoreError> {
        if let Some(version) = ended.write {
            self.effects.winner(&self.columns, version);
        }
        Ok(())
    }

    fn quarantine(
        &mut self,
        row: &postgres::Row,
        reason: &'static str,
        detail: &str,
    ) -> Result<(), StoreError> {
        let index: i64 = row.get(1);
        let event = Quarantined {
            index: index as u64,
            raw: row.get(5),
            reason,
            detail,
        };
        self.effects.quarantine(self.digest, event);
        Ok(())
    }
}

impl Effects for Write {
    fn claim(&self, tx: &mut Transaction<'_>, digest: &str) -> Result<bool, StoreError> {
        let claimed = tx.execute(
            "INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at,
                 events_total, inserted, updated, unchanged, stale, conflicts, invalid)
             VALUES ($1, NULL, $2, $3, 0, 0, 0, 0, 0, 0, 0)
             ON CONFLICT (batch_digest) DO NOTHING",
            &[&digest, &self.file_name, &self.now],
        )?;
        Ok(claimed == 1)
    }

    fn quarantine(&mut self, digest: &str, event: Quarantined<'_>) {
        row(
            &mut self.quarantined,
            &[
                Some(digest),
                Some(&self.file_name),
                Some(&event.index.to_string()),
                Some(event.reason),
                Some(event.detail),
                Some(event.raw),
                Some(&self.now),
            ],
        );
    }

    fn lock(&mut self, tx: &mut Transaction<'_>, stop: &AtomicBool) -> Result<(), StoreError> {
        let every_flight = self.flight_names.len() > FLIGHT_LOCKS_MAX;
        lock_flights(tx, every_flight, stop, &self.canceller)
    }

    fn winner(&mut self, key: &KeyColumns, version: Version<'_>) {
        let revision = version.revision.to_string();
        row(
            &mut self.winners,
            &[
                Some(&key.key),
                Some(&key.flight_id),
                Some(&key.event_kind),
                Some(&key.instant_utc),
                Some(&revision),
                Some(version.content.payload),
                Some(bool_text(version.content.retracted)),
                version.content.slot,
            ],
        );
        self.chosen += 1;
    }

    fn flight(&mut self, flight_id: &str, index: u64) {
        row(
            &mut self.flights,
            &[Some(flight_id), Some(&index.to_string())],
        );
        if self.flight_names.len() <= FLIGHT_LOCKS_MAX {
            self.flight_names.insert(flight_id.to_lowercase());
        }
    }

    fn flush(&mut self, tx: &mut Transaction<'_>) -> Result<(), StoreError> {
        copy(tx, COPY_WINNER, &mut self.winners)?;
        copy(tx, COPY_QUARANTINE, &mut self.quarantined)?;
        if self.flights.len() >= FLIGHTS_SEND_BYTES {
            copy(tx, COPY_STAGE_FLIGHT, &mut self.flights)?;
        }
        Ok(())
    }

    fn end(
        mut self: Box<Self>,
        mut tx: Transaction<'_>,
        batch: Ending<'_>,
        mut finished: Finished,
        stop: &AtomicBool,
    ) -> Result<Finished, StoreError> {
        let Ending {
            digest,
            header,
            slotted,
        } = batch;
        copy(&mut tx, COPY_STAGE_FLIGHT, &mut self.flights)?;
        tx.batch_execute("ANALYZE spoolite_stage_flight, spoolite_winner")?;
        finished.case_variants = note_flight_ids(&mut tx)?;
        let first = sequence_not_behind(&mut tx, 0)?;
        let written = tx.execute(APPLY, &[&digest, &self.now])?;
        if written != self.chosen {
            return Err(StoreError::Disagreed(format!(
                "the revision guard wrote {written} rows where the outcome rules chose {}; \
                 the batch was rolled back",
                self.chosen
            )));
        }
        let mut changed = written;
        if slotted {
            tx.batch_execute(SETTLE_SLOTS)?;
            changed += tx.execute(DISPLACE, &[&digest, &self.now])?;
            tx.execute(RESETTLE, &[&digest])?;
        }
        // Under the flights' locks: no other writer's rows of them can be newer
        // than what it reads.
        super::crew::keep_flights(&mut tx, super::crew::Scope::Written)?;
        // The critical section: every writer passes it one at a time, so the
        // periods computed here read every period's rows as committed, every
        // number of the batch is made larger than every one committed, and the
        // commit that ends it makes them visible before the next writer passes.
        let next = lock_counter(&mut tx, stop, &self.canceller)?;
        super::crew::keep_periods(&mut tx, super::crew::Scope::Written)?;
        // Every number of the batch is at least `first`, so none is to be given
        // again unless one below the counter's next may be among them.
        if changed > 0 && first < next {
            // The sequence gives every number once, in increasing order: the new
            // numbers are at least its next, at least the counter's next
            // (`sequence_not_behind`).
            sequence_not_behind(&mut tx, next)?;
            tx.execute(RENUMBER, &[&digest, &next])?;
        }
        let xid;
        (xid, finished.resent) =
            write_inbox_counts(&mut tx, &digest, header, &finished.counts, changed > 0)?;
        // An error here leaves the outcome open: the COMMIT may have been carried
        // out with its acknowledgement lost. The batch is not tried again blindly:
        // the next try finds its digest in the inbox or takes it over, and
        // `commit_status` tells whether this transaction was the one committed.
        match tx.commit() {
            Ok(()) => Ok(finished),
            Err(source) => Err(StoreError::CommitInDoubt {
                batch: Box::new(InDoubt {
                    digest,
                    xid,
                    batch_id: header.batch_id.clone(),
                    finished,
                }),
                source,
            }),
        }
    }
}

/// Moves the sequence of `change_seq` numbers up to the counter's next (or to
/// `next`, when that is higher: the counter as locked) when it is behind, and
/// returns its next number. Only a spoolite of schema 7 still
/// writing after the upgrade (it numbers from the counter) or a change made by
/// hand puts it behind; a number it then gave twice, were another session to
/// take one meanwhile, the unique index on `change_seq` refuses (the batch is
/// tried again).
fn sequence_not_behind(tx: &mut Transaction<'_>, next: i64) -> Result<i64, StoreError> {
    // The sequence's next as it stands (every number this session takes later
    // is at least that) and the counter's as committed: read before the apply,
    // so that a lone writer's rows take the numbers from the counter's next on,
    // without a gap, as on SQLite.
    let row = tx.query_one(
        &format!("SELECT {SEQUENCE_NEXT}, (SELECT next_seq FROM spoolite_change_seq WHERE one)"),
        &[],
    )?;
    let (sequence, counter): (i64, i64) = (row.get(0), row.get(1));
    let next = next.max(counter);
    if sequence >= next {
        return Ok(sequence);
    }
    log::warn!(
        "the sequence spoolite_change_seq_next was at {sequence}, below the next change_seq \
         {next}: moved up (a spoolite of schema 7 still writing?)"
    );
    tx.execute(
        "SELECT setval('spoolite_change_seq_next', $1, false)",
        &[&next],
    )?;
    Ok(next)
}

/// Whether the inbox holds a batch with `header`'s batch id and other bytes.
fn resent(tx: &mut Transaction<'_>, digest: &str, header: &Header) -> Result<bool, StoreError> {
    let Some(id) = &header.batch_id else {
        return Ok(false);
    };
    Ok(tx
        .query_one(&format!("SELECT {RESENT}"), &[&digest, id])?
        .get(0))
}

/// Runs `NOTE_FLIGHT_IDS`: the batch's new flight ids that differ only in letter
/// case from another.
fn note_flight_ids(tx: &mut Transaction<'_>) -> Result<CaseVariants, StoreError> {
    let shown = CASE_VARIANTS_SHOWN as i64;
    let mut variants = CaseVariants::default();
    let mut total = 0;
    for found in tx.query(NOTE_FLIGHT_IDS, &[&shown])? {
        variants.note(found.get(0), found.get(1));
        total = found.get::<_, i64>(2) as u64;
    }
    variants.set_total(total);
    Ok(variants)
}

/// Fills in the inbox row's counts and, when the batch changed rows (`$10`),
/// moves the counter past the last number this session took (every number of
/// the batch is at most that), in one statement and one round trip. Returns the
/// transaction's id, read back with them, so that if the COMMIT goes
/// unacknowledged the server can be asked about it later, and whether the batch
/// id was sent before (`RESENT`).
fn write_inbox_counts(
    tx: &mut Transaction<'_>,
    digest: &str,
    header: &Header,
    counts: &Counts,
    changed: bool,
) -> Result<(String, bool), StoreError> {
    use postgres::types::Type;
    let count = |n: u64| n as i64;
    let outcomes = [
        count(counts.events_total),
        count(counts.inserted),
        count(counts.updated),
        count(counts.unchanged),
        count(counts.stale),
        count(counts.conflicts),
        count(counts.invalid),
    ];
    let mut params: Vec<(&(dyn postgres::types::ToSql + Sync), Type)> =
        vec![(&digest, Type::TEXT), (&header.batch_id, Type::TEXT)];
    params.extend(outcomes.iter().map(|n| (n as _, Type::INT8)));
    params.push((&changed, Type::BOOL));
    let row = tx.query_typed_one(
        &format!(
            "WITH pass AS (
                 UPDATE spoolite_change_seq
                 SET next_seq = greatest(next_seq, currval('spoolite_change_seq_next') + 1)
                 WHERE one AND $10
             )
             UPDATE ingest_inbox SET batch_id = $2, events_total = $3, inserted = $4,
                 updated = $5, unchanged = $6, stale = $7, conflicts = $8, invalid = $9
             WHERE batch_digest = $1
             RETURNING pg_current_xact_id()::text, {RESENT}"
        ),
        &params,
    )?;
    Ok((row.get(0), row.get(1)))
}

impl Effects for DryRun {
    fn claim(&self, tx: &mut Transaction<'_>, digest: &str) -> Result<bool, StoreError> {
        let found = tx.query_opt(
            "SELECT 1 FROM ingest_inbox WHERE batch_digest = $1",
            &[&digest],
        )?;
        Ok(found.is_none())
    }

    fn quarantine(&mut self, _: &str, _: Quarantined<'_>) {}

    fn lock(&mut self, _: &mut Transaction<'_>, _: &AtomicBool) -> Result<(), StoreError> {
        Ok(())
    }

    fn winner(&mut self, _: &KeyColumns, _: Version<'_>) {}

    fn flight(&mut self, _: &str, _: u64) {}

    fn flush(&mut self, _: &mut Transaction<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    fn end(
        self: Box<Self>,
        mut tx: Transaction<'_>,
        batch: Ending<'_>,
        mut finished: Finished,
        _: &AtomicBool,
    ) -> Result<Finished, StoreError> {
        finished.resent = resent(&mut tx, &batch.digest, batch.header)?;
        tx.rollback()?;
        Ok(finished)
    }
}

/// What the server says of transaction `xid` (a `pg_current_xact_id()` as text),
/// asked on a connection of its own after a COMMIT went unacknowledged.
pub(super) fn commit_status(client: &mut Client, xid: &str) -> Result<CommitStatus, StoreError> {
    let status: Option<String> = client
        .query_one("SELECT pg_xact_status($1::text::xid8)", &[&xid])?
        .get(0);
    Ok(match status.as_deref() {
        Some("committed") => CommitStatus::Committed,
        Some("aborted") => CommitStatus::Aborted,
        Some("in progress") => CommitStatus::InProgress,
        _ => CommitStatus::Unknown,
    })
}

/// A key as the cursor reads it (64 lowercase hex characters), as its 32 bytes.
fn key_bytes(key: &str) -> Result<[u8; 32], StoreError> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(key, &mut bytes).map_err(|error| {
        StoreError::Disagreed(format!("a stored key is not 64 hex characters: {error}"))
    })?;
    Ok(bytes)
}
