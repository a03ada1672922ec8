//! `spoolite copy-db`'s database work: a workstation's SQLite database read in one
//! read transaction (a consistent snapshot, even of a live daemon's file, which is
//! never written) and COPYed into a PostgreSQL database in one transaction, table
//! by table (the inbox first, so that every event and quarantine row finds its
//! batch), then counted on both sides before the commit.
//!
//! The SQLite layout is mapped back to what analysts read: the 32-byte key to its
//! 64-hex text, `batch_ref` to the batch's digest,
//! `retracted` 0/1 to a boolean; the rows are read through the views that already
//! do this (`duty_event_all`). PostgreSQL's kept rows (its list of flight ids
//! `spoolite_flight_id`, the flights' times `spoolite_flight` and the crew rows)
//! are computed from the copied rows by the code its batches run. `change_seq` keeps its values
//! in an empty target (shifted above the target's counter in one that has had
//! rows), and the counter goes on above the largest copied.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use postgres::Transaction;
use rusqlite::Connection;
use rusqlite::types::ValueRef;

use super::postgres::PgStore;
use super::postgres::copy_text::row;
use super::sqlite::connect;
use super::{PgTarget, StoreError};

/// Bytes of COPY text gathered before they are sent.
const SEND_BYTES: usize = 1 << 20;

/// Rows between two progress reports.
const PROGRESS_ROWS: u64 = 10_000;

/// What to do with a target that already holds rows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CopyOptions {
    /// Copy into a target that holds rows, adding the source's batches to them;
    /// a batch or a key both hold is refused (the copy is rolled back).
    pub(crate) into_non_empty: bool,
}

/// How far the copy has come, over every table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyProgress {
    /// The table being copied.
    pub(crate) table: &'static str,
    pub(crate) rows_done: u64,
    pub(crate) rows_total: u64,
}

/// The rows of one database, as the verification counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// `ingest_inbox`.
    pub(crate) batches: u64,
    /// `duty_event_all`.
    pub(crate) events: u64,
    /// `duty_event`.
    pub(crate) live: u64,
    pub(crate) quarantined: u64,
    /// Flights with a stored row.
    pub(crate) flights: u64,
    /// `flight_times`.
    pub(crate) flight_times: u64,
}

impl Tally {
    fn rows(&self) -> u64 {
        self.batches + self.events + self.quarantined
    }

    /// Each figure with its name, in the order messages give them.
    fn named(&self) -> [(&'static str, u64); 6] {
        [
            ("ingest_inbox", self.batches),
            ("duty_event_all", self.events),
            ("duty_event", self.live),
            ("quarantine", self.quarantined),
            ("flights", self.flights),
            ("flight_times", self.flight_times),
        ]
    }
}

/// What a copy did.
#[derive(Debug, Clone)]
pub(crate) struct Copied {
    /// The source's rows, all of them copied.
    pub(crate) source: Tally,
    /// What was added to every copied `change_seq` (0 into a new database).
    pub(crate) change_seq_shift: i64,
    /// The next `change_seq` the target gives.
    pub(crate) next_change_seq: i64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CopyError {
    #[error("read source {}: no such file (copy-db reads an existing SQLite database)", .0.display())]
    SourceMissing(PathBuf),
    #[error(
        "read source {}: schema version {found}, older than this spoolite's ({known}); \
         copy-db only reads it, so upgrade it first (run `spoolite run` or `spoolite ingest` \
         with --db {} once)",
        path.display(), path.display()
    )]
    SourceOlder {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("read source {}: not a spoolite database (no schema)", .0.display())]
    SourceNotSpoolite(PathBuf),
    #[error("--to {0}: not a PostgreSQL URI (postgres://… or postgresql://…)")]
    TargetNotPostgres(String),
    #[error("read source {}: {source}", path.display())]
    Source { path: PathBuf, source: StoreError },
    #[error("copy into {target}: {source}")]
    Target { target: String, source: StoreError },
    #[error(
        "copy into {target}: it already holds {} batches, {} events and {} quarantined rows; \
         copy-db copies into an empty database so that the copy is the whole of it. Point \
         --to at a new database, or pass --into-non-empty to add the source's batches to \
         those rows (a batch or a key both hold is then refused)",
        before.batches, before.events, before.quarantined
    )]
    NotEmpty { target: String, before: Tally },
    #[error(
        "copy {table} into {target}: {detail}: the target already holds it, so the two \
         databases overlap; nothing was committed"
    )]
    Overlap {
        target: String,
        table: &'static str,
        detail: String,
    },
    #[error(
        "copy into {target}: the counts differ after the copy ({differences}); \
         nothing was committed"
    )]
    Mismatch { target: String, differences: String },
}

/// Copies the SQLite database `from` into the PostgreSQL database `to` (created
/// or upgraded as `spoolite ingest` would), in one transaction on the target,
/// verified by counting every table on both sides before the commit.
pub(crate) fn sqlite_into_postgres(
    from: &Path,
    to: &PgTarget,
    options: CopyOptions,
    progress: &dyn Fn(CopyProgress),
) -> Result<Copied, CopyError> {
    let target = to.name();
    let source_error = |source| CopyError::Source {
        path: from.to_owned(),
        source,
    };
    let target_error = |source: postgres::Error| CopyError::Target {
        target: target.clone(),
        source: source.into(),
    };
    let mut source = open_source(from)?;
    let mut store = PgStore::connect_writer(to).map_err(|source| CopyError::Target {
        target: target.clone(),
        source,
    })?;
    // The source's snapshot: every read below is in this one read transaction, so
    // a daemon committing meanwhile is seen wholly or not at all.
    let snapshot = source
        .transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)
        .map_err(|e| source_error(e.into()))?;
    let counted = source_tally(&snapshot).map_err(|e| source_error(e.into()))?;
    let mut tx = store.client.transaction().map_err(target_error)?;
    // Writers wait (analysts still read) until the copy commits, so that the
    // target is counted, filled and counted again with nothing in between.
    tx.batch_execute(
        "LOCK TABLE ingest_inbox, spoolite_event, quarantine, spoolite_change_seq
         IN EXCLUSIVE MODE",
    )
    .map_err(target_error)?;
    let before = target_tally(&mut tx).map_err(target_error)?;
    if before.rows() > 0 && !options.into_non_empty {
        return Err(CopyError::NotEmpty { target, before });
    }
    let shift = fill_target(
        &snapshot,
        &mut tx,
        (from, &target),
        (counted.rows(), before.rows() == 0),
        progress,
    )?;
    let next_change_seq = verify_target(&mut tx, &target, &counted, &before)?;
    tx.commit().map_err(target_error)?;
    drop(snapshot);
    Ok(Copied {
        source: counted,
        change_seq_shift: shift,
        next_change_seq,
    })
}

/// Fills the target (`tx`) from the source's snapshot: every table, its rows'
/// `change_seq` shifted above every one the target has given (so that a follower
/// of its feed sees them as changes after those), then the flight ids and the
/// flights' times and crew rows as their batches would have kept them. Returns
/// the shift. `empty`: the target held no row before, so every flight it holds
/// is a copied one.
fn fill_target(
    snapshot: &Connection,
    tx: &mut Transaction<'_>,
    (from, target): (&Path, &str),
    (rows, empty): (u64, bool),
    progress: &dyn Fn(CopyProgress),
) -> Result<i64, CopyError> {
    let target_error = |source: StoreError| CopyError::Target {
        target: target.to_owned(),
        source,
    };
    let shift = next_change_seq(tx).map_err(|e| target_error(e.into()))? - 1;
    let mut sent = Sent {
        done: 0,
        total: rows,
        progress,
    };
    for table in &TABLES {
        copy_table(snapshot, tx, table, shift, &mut sent).map_err(|e| match e {
            TableError::Source(source) => CopyError::Source {
                path: from.to_owned(),
                source,
            },
            TableError::Target(e) => overlap(target, table.name, e),
        })?;
    }
    // Every flight id the target now holds, for the look-up that tells a later
    // batch's id differing from one of them only in letter case.
    tx.execute(
        "INSERT INTO spoolite_flight_id (flight_id) SELECT DISTINCT flight_id FROM spoolite_event
         ON CONFLICT DO NOTHING",
        &[],
    )
    .map_err(|e| target_error(e.into()))?;
    // Into an empty target, every flight is a copied one: computed whole, every
    // period by one statement. Into one that held rows, the copied flights are
    // those whose rows' change_seq is above `shift`, and the periods those they
    // touch: at 10M events, the touches (one per operating crew row, each two
    // searches of the duties' crew index) took longer than the copy itself.
    let scope = match empty {
        true => super::postgres::crew::Scope::All,
        false => super::postgres::crew::Scope::ChangedAfter(shift),
    };
    super::postgres::crew::keep(tx, scope).map_err(target_error)?;
    Ok(shift)
}

/// Opens the source read-only, refusing a file that is missing, no spoolite
/// database, or of another schema than this spoolite's. Looked for first:
/// SQLite would report a missing file only as "unable to open", and nothing is
/// done to the target for a source that is not there.
fn open_source(from: &Path) -> Result<Connection, CopyError> {
    let source_error = |source| CopyError::Source {
        path: from.to_owned(),
        source,
    };
    if !from.exists() {
        return Err(CopyError::SourceMissing(from.to_owned()));
    }
    let source = connect::read_only(from).map_err(source_error)?;
    match connect::user_version(&source).map_err(|e| source_error(e.into()))? {
        0 => Err(CopyError::SourceNotSpoolite(from.to_owned())),
        found if found < connect::SCHEMA_VERSION => Err(CopyError::SourceOlder {
            path: from.to_owned(),
            found,
            known: connect::SCHEMA_VERSION,
        }),
        found if found > connect::SCHEMA_VERSION => Err(source_error(StoreError::NewerSchema {
            path: from.to_owned(),
            found,
            known: connect::SCHEMA_VERSION,
        })),
        _ => Ok(source),
    }
}

/// The target's next `change_seq`.
fn next_change_seq(tx: &mut Transaction<'_>) -> Result<i64, postgres::Error> {
    Ok(tx
        .query_one("SELECT next_seq FROM spoolite_change_seq WHERE one", &[])?
        .get(0))
}

/// Moves the target's counter past the copied `change_seq`s and counts every
/// table again: each must have grown by what the source holds. Returns the next
/// `change_seq`.
fn verify_target(
    tx: &mut Transaction<'_>,
    target: &str,
    counted: &Tally,
    before: &Tally,
) -> Result<i64, CopyError> {
    let target_error = |source: postgres::Error| CopyError::Target {
        target: target.to_owned(),
        source: source.into(),
    };
    tx.execute(
        "UPDATE spoolite_change_seq SET next_seq = greatest(next_seq,
             coalesce((SELECT max(change_seq) FROM spoolite_event), 0) + 1)
         WHERE one",
        &[],
    )
    .map_err(target_error)?;
    // And the sequence batches number their rows from, which must not be
    // behind the counter (writers wait on the tables' locks meanwhile). A
    // rollback of the copy leaves it moved: a gap in the numbers, no more.
    tx.execute(
        &format!(
            "SELECT setval('spoolite_change_seq_next', next_seq, false) FROM spoolite_change_seq
             WHERE next_seq > {}",
            super::postgres::SEQUENCE_NEXT
        ),
        &[],
    )
    .map_err(target_error)?;
    let after = target_tally(tx).map_err(target_error)?;
    let differences = differences(counted, before, &after);
    if !differences.is_empty() {
        return Err(CopyError::Mismatch {
            target: target.to_owned(),
            differences: differences.join(", "),
        });
    }
    next_change_seq(tx).map_err(target_error)
}

/// A unique key the target already holds (a batch digest, an idempotency key, a
/// quarantine row) is an overlap of the two databases; anything else is the
/// target's fault.
fn overlap(target: &str, table: &'static str, error: StoreError) -> CopyError {
    if let StoreError::Postgres(e) = &error
        && let Some(db) = e.as_db_error()
        && db.code() == &postgres::error::SqlState::UNIQUE_VIOLATION
    {
        return CopyError::Overlap {
            target: target.to_owned(),
            table,
            detail: db.detail().unwrap_or(db.message()).to_owned(),
        };
    }
    CopyError::Target {
        target: target.to_owned(),
        source: error,
    }
}

/// "source 4, copied 3" for each figure that differs. Into a target that held
/// rows, flights and flight times are not compared: a flight may be in both.
fn differences(source: &Tally, before: &Tally, after: &Tally) -> Vec<String> {
    let empty_before = before.rows() == 0;
    source
        .named()
        .iter()
        .zip(before.named())
        .zip(after.named())
        .filter(|(((name, _), _), _)| empty_before || !name.starts_with("flight"))
        .filter_map(|(((name, source), (_, before)), (_, after))| {
            let copied = after.saturating_sub(before);
            (copied != *source || after < before)
                .then(|| format!("{name}: {source} in the source, {copied} copied"))
        })
        .collect()
}

/// One table's copy: what is read from SQLite (columns in the order of the
/// COPY's) and where it goes.
struct Table {
    name: &'static str,
    select: &'static str,
    copy: &'static str,
}

/// In the order they are copied: an event's and a quarantine row's batch first.
/// `?1`, where a query has it, is the shift added to `change_seq`.
const TABLES: [Table; 3] = [
    Table {
        name: "ingest_inbox",
        select: "SELECT batch_digest, batch_id, file_name, ingested_at, events_total, inserted,
                        updated, unchanged, stale, conflicts, invalid
                 FROM ingest_inbox ORDER BY batch_ref",
        copy: "COPY ingest_inbox (batch_digest, batch_id, file_name, ingested_at, events_total,
                   inserted, updated, unchanged, stale, conflicts, invalid) FROM STDIN",
    },
    Table {
        name: "duty_event_all",
        // In key order: the target's primary key is then written in order. The
        // view's columns, and `displaced` (a row's own content), from the table
        // the view reads.
        select: "SELECT lower(hex(e.key)), e.flight_id, e.event_kind, e.instant_utc,
                        e.source_revision, e.payload, e.retracted, e.slot, e.displaced,
                        (SELECT i.batch_digest FROM ingest_inbox AS i
                         WHERE i.batch_ref = e.batch_ref),
                        e.first_seen_at, e.updated_at, e.change_seq + ?1
                 FROM spoolite_event AS e ORDER BY lower(hex(e.key))",
        copy: "COPY spoolite_event (key, flight_id, event_kind, instant_utc, source_revision,
                   payload, retracted, slot, displaced, batch_digest, first_seen_at,
                   updated_at, change_seq)
               FROM STDIN",
    },
    Table {
        name: "quarantine",
        select: "SELECT batch_digest, file_name, record_index, reason, detail, raw,
                        quarantined_at
                 FROM quarantine ORDER BY batch_digest, record_index",
        copy: "COPY quarantine (batch_digest, file_name, record_index, reason, detail, raw,
                   quarantined_at) FROM STDIN",
    },
];

/// Which side a table's copy failed on.
enum TableError {
    Source(StoreError),
    Target(StoreError),
}

/// Rows sent so far, for the progress reports.
struct Sent<'p> {
    done: u64,
    total: u64,
    progress: &'p dyn Fn(CopyProgress),
}

impl Sent<'_> {
    fn report(&self, table: &'static str) {
        (self.progress)(CopyProgress {
            table,
            rows_done: self.done,
            rows_total: self.total,
        });
    }
}

/// Streams one table's rows from the snapshot into a COPY, a bounded buffer at a
/// time.
fn copy_table(
    source: &Connection,
    tx: &mut Transaction<'_>,
    table: &Table,
    shift: i64,
    sent: &mut Sent<'_>,
) -> Result<(), TableError> {
    let from = |e: rusqlite::Error| TableError::Source(e.into());
    let to = |e: postgres::Error| TableError::Target(e.into());
    sent.report(table.name);
    let mut statement = source.prepare(table.select).map_err(from)?;
    let mut rows = if statement.parameter_count() == 1 {
        statement.query([shift])
    } else {
        statement.query([])
    }
    .map_err(from)?;
    let mut writer = tx.copy_in(table.copy).map_err(to)?;
    let mut buffer: Vec<u8> = Vec::with_capacity(SEND_BYTES + 4096);
    let mut fields: Vec<Option<String>> = Vec::new();
    while let Some(found) = rows.next().map_err(from)? {
        fields.clear();
        for at in 0..found.as_ref().column_count() {
            fields.push(text_of(found.get_ref(at).map_err(from)?));
        }
        let borrowed: Vec<Option<&str>> = fields.iter().map(Option::as_deref).collect();
        row(&mut buffer, &borrowed);
        sent.done += 1;
        if buffer.len() >= SEND_BYTES {
            writer
                .write_all(&buffer)
                .map_err(|e| TableError::Target(StoreError::Copy(e)))?;
            buffer.clear();
        }
        if sent.done.is_multiple_of(PROGRESS_ROWS) {
            sent.report(table.name);
        }
    }
    writer
        .write_all(&buffer)
        .map_err(|e| TableError::Target(StoreError::Copy(e)))?;
    writer.finish().map_err(to)?;
    sent.report(table.name);
    Ok(())
}

/// A SQLite value as COPY text: integers in decimal (PostgreSQL reads 0 and 1 as
/// booleans too), `None` for NULL. The rows read hold no blob (the views give
/// keys as hex) and no real.
fn text_of(value: ValueRef<'_>) -> Option<String> {
    match value {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Some(hex::encode(b)),
    }
}

fn source_tally(source: &Connection) -> rusqlite::Result<Tally> {
    source.query_row(
        "SELECT (SELECT count(*) FROM ingest_inbox),
                (SELECT count(*) FROM duty_event_all),
                (SELECT count(*) FROM duty_event),
                (SELECT count(*) FROM quarantine),
                (SELECT count(DISTINCT flight_id) FROM duty_event_all),
                (SELECT count(*) FROM flight_times)",
        [],
        |found| {
            let n = |at: usize| found.get::<_, i64>(at).map(|n| n as u64);
            Ok(Tally {
                batches: n(0)?,
                events: n(1)?,
                live: n(2)?,
                quarantined: n(3)?,
                flights: n(4)?,
                flight_times: n(5)?,
            })
        },
    )
}

fn target_tally(tx: &mut Transaction<'_>) -> Result<Tally, postgres::Error> {
    let found = tx.query_one(
        "SELECT (SELECT count(*) FROM ingest_inbox),
                (SELECT count(*) FROM spoolite_event),
                (SELECT count(*) FROM spoolite_event WHERE NOT retracted),
                (SELECT count(*) FROM quarantine),
                (SELECT count(DISTINCT flight_id) FROM spoolite_event),
                (SELECT count(*) FROM flight_times)",
        &[],
    )?;
    let n = |at: usize| found.get::<_, i64>(at) as u64;
    Ok(Tally {
        batches: n(0),
        events: n(1),
        live: n(2),
        quarantined: n(3),
        flights: n(4),
        flight_times: n(5),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_that_differ_are_named_and_flights_are_not_compared_after_rows() {
        let source = Tally {
            batches: 2,
            events: 5,
            live: 4,
            quarantined: 1,
            flights: 2,
            flight_times: 2,
        };
        assert!(differences(&source, &Tally::default(), &source).is_empty());
        let short = Tally {
            quarantined: 0,
            ..source
        };
        assert_eq!(
            differences(&source, &Tally::default(), &short),
            ["quarantine: 1 in the source, 0 copied"]
        );
        // Into a target with rows: the figures grow by the source's, but flights
        // may be shared.
        let before = Tally {
            batches: 1,
            events: 1,
            live: 1,
            quarantined: 0,
            flights: 1,
            flight_times: 1,
        };
        let after = Tally {
            batches: 3,
            events: 6,
            live: 5,
            quarantined: 1,
            flights: 2,
            flight_times: 2,
        };
        assert!(differences(&source, &before, &after).is_empty());
    }
}
