//! The PostgreSQL transaction of one batch file, in set-based steps with no round
//! trip per event:
//!
//! 1. `begin` claims the batch's digest in the inbox first
//!    (`INSERT … ON CONFLICT DO NOTHING`): a second writer of the same bytes waits
//!    on that row until the first commits, then finds it and skips the file (or,
//!    if the first rolled back, takes it over).
//! 2. `stage` COPYs each chunk's valid events into a temporary table and its
//!    invalid ones straight into quarantine.
//! 3. `finish` locks the one `change_seq_counter` row, which serialises the apply
//!    phase of every writer in commit order, then reads the staged events joined
//!    to their stored rows in key order (file order within a key) through a
//!    cursor, folds each key with `store::fold::KeyFold` exactly as SQLite does,
//!    COPYs the winners (each with the next `change_seq`) and conflicts out, applies
//!    the winners with one revision-guarded `INSERT … ON CONFLICT … DO UPDATE`,
//!    moves the counter on, fills in the inbox row's counts (reading back the
//!    transaction's id), and commits. A `COMMIT` that fails may have happened all
//!    the same: `StoreError::CommitInDoubt` carries the id and what the batch came
//!    to, so that the next try, which finds the digest in the inbox or takes the
//!    file over, can tell whether the commit was this one (`commit_status`).
//!
//! Memory is bounded by the cursor's fetch size, not by the number of events.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use postgres::{Client, Transaction};

use crate::batch::{Header, Record};
use crate::store::fold::{
    CONFLICT_REASON, Content, Counts, KeyFold, Outcome, Version, conflict_detail,
};
use crate::store::writer::{Finished, Reasons};
use crate::store::{CommitStatus, InDoubt, StoreError};

/// Rows read from the fold's cursor at a time.
const FETCH_ROWS: usize = 10_000;

/// One batch file's transaction; dropped without `finish`, it rolls back.
pub struct Batch<'c> {
    tx: Transaction<'c>,
    digest: String,
    /// The file's name and the time its rows are written at; `None` in a dry run.
    write: Option<(String, String)>,
    counts: Counts,
    reasons: Reasons,
    /// COPY text of the chunk being staged and of its quarantine rows.
    staged: Vec<u8>,
    quarantined: Vec<u8>,
}

const CREATE_STAGE: &str = "CREATE TEMP TABLE spoolite_stage (
        key text COLLATE \"C\" NOT NULL,
        idx bigint NOT NULL,
        revision bigint,
        retracted boolean NOT NULL,
        flight_id text NOT NULL,
        event_kind text NOT NULL,
        instant_utc text NOT NULL,
        payload text NOT NULL,
        raw text NOT NULL
    ) ON COMMIT DROP;
    CREATE TEMP TABLE spoolite_winner (
        key text COLLATE \"C\" NOT NULL,
        flight_id text NOT NULL,
        event_kind text NOT NULL,
        instant_utc text NOT NULL,
        source_revision bigint NOT NULL,
        payload text NOT NULL,
        retracted boolean NOT NULL,
        change_seq bigint NOT NULL
    ) ON COMMIT DROP";

/// Starts the transaction of one batch: claims its digest in the inbox (a dry
/// run, `write` `None`, only looks). `None`: the inbox holds it already.
pub(super) fn begin<'c>(
    client: &'c mut Client,
    digest: &str,
    write: Option<(&str, &str)>,
) -> Result<Option<Batch<'c>>, StoreError> {
    // READ COMMITTED: every statement after the counter lock sees what the writer
    // before committed (a snapshot per statement, taken after the lock is held).
    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::ReadCommitted)
        .start()?;
    let new = match write {
        Some((file_name, now)) => {
            tx.execute(
                "INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at,
                     events_total, inserted, updated, unchanged, stale, conflicts, invalid)
                 VALUES ($1, NULL, $2, $3, 0, 0, 0, 0, 0, 0, 0)
                 ON CONFLICT (batch_digest) DO NOTHING",
                &[&digest, &file_name, &now],
            )? == 1
        }
        None => tx
            .query_opt(
                "SELECT 1 FROM ingest_inbox WHERE batch_digest = $1",
                &[&digest],
            )?
            .is_none(),
    };
    if !new {
        tx.rollback()?;
        return Ok(None);
    }
    tx.batch_execute(CREATE_STAGE)?;
    Ok(Some(Batch {
        tx,
        digest: digest.to_owned(),
        write: write.map(|(name, now)| (name.to_owned(), now.to_owned())),
        counts: Counts::default(),
        reasons: Reasons::new(),
        staged: Vec::new(),
        quarantined: Vec::new(),
    }))
}

/// Appends `value` to COPY text as one field (text format: backslash escapes).
fn field(out: &mut Vec<u8>, value: &str) {
    for byte in value.bytes() {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(byte),
        }
    }
}

/// Appends the fields of one COPY row, tab separated, newline ended; `None` is NULL.
pub fn row(out: &mut Vec<u8>, fields: &[Option<&str>]) {
    for (at, value) in fields.iter().enumerate() {
        if at > 0 {
            out.push(b'\t');
        }
        match value {
            Some(value) => field(out, value),
            None => out.extend_from_slice(b"\\N"),
        }
    }
    out.push(b'\n');
}

fn bool_text(value: bool) -> &'static str {
    if value { "t" } else { "f" }
}

/// COPYs `data` (COPY text rows) with `sql` and empties it.
fn copy(tx: &mut Transaction<'_>, sql: &str, data: &mut Vec<u8>) -> Result<(), StoreError> {
    if data.is_empty() {
        return Ok(());
    }
    let mut writer = tx.copy_in(sql)?;
    writer.write_all(data).map_err(StoreError::Copy)?;
    writer.finish()?;
    data.clear();
    Ok(())
}

const COPY_STAGE: &str = "COPY spoolite_stage (key, idx, revision, retracted, flight_id,
    event_kind, instant_utc, payload, raw) FROM STDIN";
const COPY_QUARANTINE: &str = "COPY quarantine (batch_digest, file_name, record_index, reason,
    detail, raw, quarantined_at) FROM STDIN";
const COPY_WINNER: &str = "COPY spoolite_winner (key, flight_id, event_kind, instant_utc,
    source_revision, payload, retracted, change_seq) FROM STDIN";

/// The staged events joined to their stored rows, in key order, then file order.
const FOLD_CURSOR: &str = "DECLARE spoolite_fold NO SCROLL CURSOR FOR
    SELECT s.key, s.idx, s.revision, s.retracted, s.payload, s.raw, s.flight_id,
           s.event_kind, s.instant_utc, d.source_revision, d.payload, d.retracted
    FROM spoolite_stage AS s LEFT JOIN duty_event_data AS d ON d.key = s.key
    ORDER BY s.key, s.idx";

/// The winners applied in one statement. The `WHERE` is the revision guard: a
/// stored row is only ever replaced by a higher revision (which the fold has
/// already decided each winner is, so every row of `spoolite_winner` is written).
const APPLY: &str = "INSERT INTO duty_event_data AS d (key, flight_id, event_kind, instant_utc,
        source_revision, payload, retracted, batch_digest, first_seen_at, updated_at, change_seq)
    SELECT key, flight_id, event_kind, instant_utc, source_revision, payload, retracted,
           $1, $2, $2, change_seq
    FROM spoolite_winner ORDER BY key
    ON CONFLICT (key) DO UPDATE SET
        source_revision = excluded.source_revision,
        payload = excluded.payload,
        retracted = excluded.retracted,
        batch_digest = excluded.batch_digest,
        updated_at = excluded.updated_at,
        change_seq = excluded.change_seq
    WHERE excluded.source_revision > d.source_revision";

/// The key being folded: its columns (the same in every version of it).
#[derive(Default)]
struct KeyColumns {
    key: String,
    flight_id: String,
    event_kind: String,
    instant_utc: String,
}

/// How long one wait for the counter lock lasts before the stop flag is looked
/// at again (the wait then goes on).
const LOCK_WAIT: &str = "500ms";

impl Batch<'_> {
    /// Locks the `change_seq_counter` row until the commit and returns the next
    /// `change_seq`. While another writer applies, the wait is cut into spans of
    /// `LOCK_WAIT`, each in a savepoint (a lock timeout would otherwise abort the
    /// transaction), so that a stop is honoured while waiting.
    fn lock_counter(&mut self, stop: &AtomicBool) -> Result<i64, StoreError> {
        self.tx
            .batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_WAIT}'"))?;
        loop {
            let mut attempt = self.tx.savepoint("spoolite_counter_lock")?;
            match attempt.query_one(
                "SELECT next_seq FROM change_seq_counter WHERE one FOR UPDATE",
                &[],
            ) {
                Ok(row) => {
                    let next: i64 = row.get(0);
                    // Released, the savepoint's row lock passes to the transaction.
                    attempt.commit()?;
                    self.tx.batch_execute("SET LOCAL lock_timeout = 0")?;
                    return Ok(next);
                }
                Err(error)
                    if error.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
                {
                    attempt.rollback()?;
                    if stop.load(Ordering::Relaxed) {
                        return Err(StoreError::Stopped);
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

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
                        ],
                    );
                }
                Err(invalid) => {
                    let reason = invalid.reason.code();
                    if let Some((file_name, now)) = &self.write {
                        row(
                            &mut self.quarantined,
                            &[
                                Some(&self.digest),
                                Some(file_name),
                                Some(&index),
                                Some(reason),
                                Some(&invalid.detail),
                                Some(&record.raw),
                                Some(now),
                            ],
                        );
                    }
                    self.counts.invalid += 1;
                    *self.reasons.entry(reason).or_default() += 1;
                }
            }
            self.counts.events_total += 1;
        }
        copy(&mut self.tx, COPY_STAGE, &mut self.staged)?;
        copy(&mut self.tx, COPY_QUARANTINE, &mut self.quarantined)?;
        Ok(())
    }

    /// Folds the staged events onto their stored rows, writes the winners,
    /// conflicts and the inbox row's counts, and commits (a dry run rolls back).
    /// `stop` set from outside abandons the batch (rolled back) with
    /// `StoreError::Stopped`.
    pub fn finish(mut self, header: &Header, stop: &AtomicBool) -> Result<Finished, StoreError> {
        let default_revision = header.source_revision.unwrap_or(0);
        // The apply phase of every writer in turn, from here to the commit: the
        // stored rows read below are those the writer before committed, and the
        // change_seq taken here is larger than every one committed.
        let mut next_seq: i64 = if self.write.is_some() {
            self.lock_counter(stop)?
        } else {
            0
        };
        let first_seq = next_seq;
        self.tx.batch_execute(FOLD_CURSOR)?;
        let mut fold = KeyFold::new();
        let mut counts = Counts::default();
        let mut current: Option<KeyColumns> = None;
        let mut winners: Vec<u8> = Vec::new();
        let mut conflicts: Vec<u8> = Vec::new();
        let fetch = format!("FETCH {FETCH_ROWS} FROM spoolite_fold");
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(StoreError::Stopped);
            }
            let rows = self.tx.query(&fetch, &[])?;
            for stored in &rows {
                let key: &str = stored.get(0);
                if current.as_ref().is_none_or(|c| c.key != key) {
                    if let Some(done) = &current {
                        end_key(&fold, done, &mut next_seq, &mut winners);
                    }
                    let columns = current.get_or_insert_with(KeyColumns::default);
                    columns.key.clear();
                    columns.key.push_str(key);
                    columns.flight_id.clear();
                    columns.flight_id.push_str(stored.get(6));
                    columns.event_kind.clear();
                    columns.event_kind.push_str(stored.get(7));
                    columns.instant_utc.clear();
                    columns.instant_utc.push_str(stored.get(8));
                    let revision: Option<i64> = stored.get(9);
                    fold.start(revision.map(|revision| Version {
                        revision,
                        content: Content {
                            payload: stored.get(10),
                            retracted: stored.get(11),
                        },
                    }));
                }
                let revision: Option<i64> = stored.get(2);
                let incoming = Version {
                    revision: revision.unwrap_or(default_revision),
                    content: Content {
                        payload: stored.get(4),
                        retracted: stored.get(3),
                    },
                };
                let outcome = fold.offer(incoming);
                if outcome == Outcome::Conflict
                    && let Some((file_name, now)) = &self.write
                {
                    let index: i64 = stored.get(1);
                    row(
                        &mut conflicts,
                        &[
                            Some(&self.digest),
                            Some(file_name),
                            Some(&index.to_string()),
                            Some(CONFLICT_REASON),
                            Some(&conflict_detail(incoming)),
                            Some(stored.get(5)),
                            Some(now),
                        ],
                    );
                }
                counts.count(outcome);
            }
            let done = rows.len() < FETCH_ROWS;
            if done && let Some(last) = current.take() {
                end_key(&fold, &last, &mut next_seq, &mut winners);
            }
            if self.write.is_some() {
                copy(&mut self.tx, COPY_WINNER, &mut winners)?;
                copy(&mut self.tx, COPY_QUARANTINE, &mut conflicts)?;
            }
            if done {
                break;
            }
        }
        self.tx.batch_execute("CLOSE spoolite_fold")?;
        self.counts.add(&counts);
        if counts.conflicts > 0 {
            self.reasons.insert(CONFLICT_REASON, counts.conflicts);
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
                .query_opt(
                    "SELECT 1 FROM ingest_inbox WHERE batch_id = $1 AND batch_digest <> $2 LIMIT 1",
                    &[id, &self.digest],
                )?
                .is_some(),
        };
        let finished = Finished {
            counts,
            resent,
            reasons: self.reasons,
        };
        let Some((_, now)) = &self.write else {
            self.tx.rollback()?;
            return Ok(finished);
        };
        let written = self.tx.execute(APPLY, &[&self.digest, now])?;
        let expected = (next_seq - first_seq) as u64;
        if written != expected {
            return Err(StoreError::Disagreed(format!(
                "the revision guard wrote {written} rows where the outcome rules chose \
                 {expected}; the batch was rolled back"
            )));
        }
        self.tx.execute(
            "UPDATE change_seq_counter SET next_seq = $1 WHERE one",
            &[&next_seq],
        )?;
        let count = |n: u64| n as i64;
        // The transaction's id comes back with the counts (no round trip more): if
        // the COMMIT goes unacknowledged, the server can be asked about it later.
        let xid: String = self
            .tx
            .query_one(
                "UPDATE ingest_inbox SET batch_id = $2, events_total = $3, inserted = $4,
                     updated = $5, unchanged = $6, stale = $7, conflicts = $8, invalid = $9
                 WHERE batch_digest = $1
                 RETURNING pg_current_xact_id()::text",
                &[
                    &self.digest,
                    &header.batch_id,
                    &count(counts.events_total),
                    &count(counts.inserted),
                    &count(counts.updated),
                    &count(counts.unchanged),
                    &count(counts.stale),
                    &count(counts.conflicts),
                    &count(counts.invalid),
                ],
            )?
            .get(0);
        // An error here leaves the outcome open: the COMMIT may have been carried
        // out with its acknowledgement lost. The batch is not tried again blindly:
        // the next try finds its digest in the inbox or takes it over, and
        // `commit_status` tells whether this transaction was the one committed.
        match self.tx.commit() {
            Ok(()) => Ok(finished),
            Err(source) => Err(StoreError::CommitInDoubt {
                batch: Box::new(InDoubt {
                    digest: self.digest,
                    xid,
                    batch_id: header.batch_id.clone(),
                    finished,
                }),
                source,
            }),
        }
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

/// Ends the fold of a key: the version that won within this file, if one did, is
/// added to the winners with the next `change_seq`.
fn end_key(fold: &KeyFold, key: &KeyColumns, next_seq: &mut i64, winners: &mut Vec<u8>) {
    let Some(version) = fold.winner() else {
        return;
    };
    let revision = version.revision.to_string();
    let seq = next_seq.to_string();
    row(
        winners,
        &[
            Some(&key.key),
            Some(&key.flight_id),
            Some(&key.event_kind),
            Some(&key.instant_utc),
            Some(&revision),
            Some(version.content.payload),
            Some(bool_text(version.content.retracted)),
            Some(&seq),
        ],
    );
    *next_seq += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_escapes_what_would_end_a_field_or_a_row() {
        let mut out = Vec::new();
        row(&mut out, &[Some("a\tb\\c\nd\re"), None, Some("")]);
        assert_eq!(out, b"a\\tb\\\\c\\nd\\re\t\\N\t\n");
    }
}
