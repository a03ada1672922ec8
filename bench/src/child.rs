//! The measured work, each piece run in a child process of its own so that the peak
//! RSS reported is that work's alone: the hidden subcommands (`__ingest`, `__floor`)
//! and the parent's side, which spawns them and reads their peak RSS from `wait4`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rusqlite::{OptionalExtension, ToSql, params_from_iter};
use serde::Deserialize;
use serde_json::json;
use spoolite::batch::{BatchReader, Format};
use spoolite::ingest::{self, Outcome};
use spoolite::store::{Db, Store};

use crate::BenchResult;

/// Read buffer of the floor loop, the same as spoolite's.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// The batch digest of every floor row, and of the one inbox row the floor writes.
const FLOOR_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Where the floor writes: the store's own table behind the `duty_event` view, so
/// the floor stores exactly the rows spoolite stores, in the same layout.
const FLOOR_TABLE: &str = "spoolite_event";

/// Arguments of the hidden subcommands.
#[derive(Debug, clap::Args)]
pub struct ChildArgs {
    /// The database, created through `Store::open` when missing.
    #[arg(long)]
    pub db: PathBuf,
    /// `__ingest` only: classify every event and roll back, as `spoolite ingest
    /// --dry-run` does (read-only on an existing database, else against an empty one
    /// in memory).
    #[arg(long)]
    pub dry_run: bool,
    /// `__ingest` only: keep the secondary indexes throughout, even for a batch
    /// large against the table (`Store::set_sorted_index_builds(false)`).
    #[arg(long)]
    pub keep_indexes: bool,
    /// The batch file.
    pub file: PathBuf,
}

/// What a child reports on its stdout, one JSON line.
#[derive(Debug, Deserialize)]
pub struct ChildReport {
    /// `processed`, `skipped_duplicate`, `rejected`, or `floor`.
    pub outcome: String,
    pub seconds: f64,
    #[serde(default)]
    pub counts: BTreeMap<String, u64>,
    /// The table the floor wrote to.
    #[serde(default)]
    pub table: Option<String>,
}

impl ChildReport {
    pub fn count(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }
}

/// A finished child: its report, its peak RSS and its wall time.
#[derive(Debug)]
pub struct Measured {
    pub stdout: String,
    pub peak_rss_bytes: u64,
    pub wall: Duration,
}

/// `__ingest`: one file through `spoolite::ingest::ingest_file`, timed around that
/// call alone. With `--dry-run` the store is opened as `spoolite ingest --dry-run`
/// opens it.
pub fn ingest(args: &ChildArgs) -> BenchResult<()> {
    let db = Db::Sqlite(args.db.clone());
    let mut store = match args.dry_run {
        false => Store::open(&db)?,
        true => Store::open_for_dry_run(&db)?,
    };
    store.set_sorted_index_builds(!args.keep_indexes);
    let stop = AtomicBool::new(false);
    let options = ingest::Options {
        file_bytes_max: u64::MAX,
        limits: spoolite::batch::Limits::default(),
        progress: None,
        dry_run: args.dry_run,
        stop: &stop,
        clock: &spoolite::clock::SystemClock,
    };
    let started = Instant::now();
    let outcome = ingest::ingest_file(&mut store, &args.file, options)?;
    let seconds = started.elapsed().as_secs_f64();
    let mut line = json!({"outcome": outcome.word(), "seconds": seconds});
    match &outcome {
        Outcome::Processed { counts, .. } => line["counts"] = serde_json::to_value(counts)?,
        Outcome::Rejected { rejection, .. } => line["detail"] = json!(rejection.detail),
        Outcome::SkippedDuplicate { .. } => {}
    }
    println!("{line}");
    Ok(())
}

/// `__floor`: the least work that stores the same rows. Parse with spoolite's
/// reader, compute the key, one plain prepared INSERT per row, one transaction, the
/// store's schema and pragmas; no outcomes, no staging, no inbox check.
pub fn floor(args: &ChildArgs) -> BenchResult<()> {
    let mut conn = spoolite::store::sqlite::connect::read_write(&args.db)?;
    let name = args.file.to_string_lossy();
    let format = Format::from_name(&name).ok_or_else(|| format!("{name}: not a batch file"))?;
    let started = Instant::now();
    let file = File::open(&args.file)?;
    let mut reader = BatchReader::new(
        format,
        BufReader::with_capacity(READ_BUFFER_BYTES, file),
        spoolite::batch::Limits::default(),
    );
    let now = spoolite::clock::now_utc();
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    // The one inbox row: batch 1, every count 0.
    let inbox = Insert::for_table(&tx, "ingest_inbox", &inbox_values())?;
    let zero = 0i64;
    let inbox_values: [&dyn ToSql; 11] = [
        &1i64,
        &FLOOR_DIGEST,
        &"floor",
        &now,
        &zero,
        &zero,
        &zero,
        &zero,
        &zero,
        &zero,
        &zero,
    ];
    tx.prepare(&inbox.sql)?
        .execute(params_from_iter(inbox.values(&inbox_values)))?;
    let insert_columns = Insert::for_table(&tx, FLOOR_TABLE, ROW_VALUES)?;
    let mut insert = tx.prepare(&insert_columns.sql)?;
    // Each flight id is numbered once in `spoolite_flight`, as the store does.
    let mut flight_lookup = tx.prepare("SELECT ref FROM spoolite_flight WHERE flight_id = ?1")?;
    let flight_columns = Insert::for_table(&tx, "spoolite_flight", &["flight_id"])?;
    let mut flight_insert = tx.prepare(&flight_columns.sql)?;
    let mut rows = 0u64;
    while let Some(record) = reader
        .next_record()
        .map_err(|e| format!("read {name}: {e:?}"))?
    {
        let Ok(event) = record.event else { continue };
        let found: Option<i64> = flight_lookup
            .query_row([event.flight_id()], |row| row.get(0))
            .optional()?;
        if found.is_none() {
            flight_insert.insert(params_from_iter(
                flight_columns.values(&[&event.flight_id() as &dyn ToSql]),
            ))?;
        }
        let change_seq = rows as i64 + 1;
        let values: [&dyn ToSql; 11] = [
            &event.key(),
            &event.flight_id(),
            &event.event_kind(),
            &event.instant_utc(),
            &event.revision().unwrap_or(0),
            &event.payload(),
            &0i64,
            &1i64,
            &now,
            &now,
            &change_seq,
        ];
        insert.execute(params_from_iter(insert_columns.values(&values)))?;
        rows += 1;
    }
    drop((insert, flight_lookup, flight_insert));
    tx.commit()?;
    let seconds = started.elapsed().as_secs_f64();
    let line = json!({"outcome": "floor", "seconds": seconds, "counts": {"inserted": rows}, "table": FLOOR_TABLE});
    println!("{line}");
    Ok(())
}

/// The columns of the floor's inbox row it has values for, in the order of its
/// values: its number, digest, name and time, then the outcome counts.
fn inbox_values() -> Vec<&'static str> {
    ["batch_ref", "batch_digest", "file_name", "ingested_at"]
        .into_iter()
        .chain(spoolite_testkit::COUNT_FIELDS)
        .collect()
}

/// The columns of `FLOOR_TABLE` the floor has values for, in the order of each
/// row's values.
const ROW_VALUES: &[&str] = &[
    "key",
    "flight_id",
    "event_kind",
    "instant_utc",
    "source_revision",
    "payload",
    "retracted",
    "batch_ref",
    "first_seen_at",
    "updated_at",
    "change_seq",
];

/// An INSERT of a row into a table of the store, its column list read from the
/// database (`PRAGMA table_xinfo`) rather than written here, so that a migration
/// that adds, drops or reorders columns does not need the bench changed: of the
/// columns the floor has values for, those the table has; every other column of
/// the table must be one the database fills itself (NULL allowed, a default, a
/// generated column, or the rowid), else the floor fails naming it.
#[derive(Debug)]
struct Insert {
    sql: String,
    /// For each parameter of `sql`, the position of its value among the floor's.
    picks: Vec<usize>,
}

impl Insert {
    /// The INSERT into `table`, whose columns the floor has values for in the order
    /// `names` gives.
    fn for_table(conn: &rusqlite::Connection, table: &str, names: &[&str]) -> BenchResult<Insert> {
        let mut columns = Vec::new();
        let mut picks = Vec::new();
        let mut info = conn.prepare(&format!("PRAGMA table_xinfo({table})"))?;
        let mut rows = info.query([])?;
        while let Some(row) = rows.next()? {
            let name: String = row.get("name")?;
            if let Some(at) = names.iter().position(|n| *n == name) {
                columns.push(name);
                picks.push(at);
                continue;
            }
            let not_null: bool = row.get("notnull")?;
            let default: Option<String> = row.get("dflt_value")?;
            // 2 and 3: a generated column (virtual, stored).
            let hidden: i64 = row.get("hidden")?;
            let rowid = row.get::<_, i64>("pk")? == 1
                && row
                    .get::<_, String>("type")?
                    .eq_ignore_ascii_case("INTEGER");
            if not_null && default.is_none() && hidden == 0 && !rowid {
                return Err(format!(
                    "{table}.{name} is NOT NULL without a default, and the bench's floor \
                     has no value for it (bench/src/child.rs)"
                )
                .into());
            }
        }
        if columns.is_empty() {
            return Err(
                format!("the database has no table {table} (or none of its columns)").into(),
            );
        }
        let parameters: Vec<String> = (1..=columns.len()).map(|n| format!("?{n}")).collect();
        Ok(Insert {
            sql: format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                columns.join(", "),
                parameters.join(", ")
            ),
            picks,
        })
    }

    /// The statement's parameters, picked from the floor's `values` (in the order
    /// of the `names` it was made with).
    fn values<'v>(&self, values: &'v [&'v dyn ToSql]) -> impl Iterator<Item = &'v dyn ToSql> {
        self.picks.iter().map(move |&at| values[at])
    }
}

/// Runs this binary's hidden subcommand `which` on `file` and `db` in a child.
pub fn run_child(which: &str, db: &Path, file: &Path) -> BenchResult<(ChildReport, Measured)> {
    run_child_with(which, &[], db, file)
}

/// `run_child` with more flags for the subcommand (`--dry-run`).
pub fn run_child_with(
    which: &str,
    flags: &[&str],
    db: &Path,
    file: &Path,
) -> BenchResult<(ChildReport, Measured)> {
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(which).args(flags).arg("--db").arg(db).arg(file);
    let measured = measure(command)?;
    let report: ChildReport = serde_json::from_str(measured.stdout.trim()).map_err(|e| {
        format!(
            "{which} {}: unreadable report {:?}: {e}",
            file.display(),
            measured.stdout
        )
    })?;
    Ok((report, measured))
}

/// Runs `command` to its end with stdout captured; its peak RSS comes from `wait4`,
/// which reports that one child's resource use.
pub fn measure(mut command: Command) -> BenchResult<Measured> {
    command.stdout(Stdio::piped());
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|e| format!("start {command:?}: {e}"))?;
    let mut stdout = String::new();
    let read = match child.stdout.take() {
        Some(mut pipe) => pipe.read_to_string(&mut stdout).map(drop),
        None => Ok(()),
    };
    let (status, usage) = wait4(child.id())?;
    let wall = started.elapsed();
    read?;
    if !status.success() {
        return Err(format!("{command:?} failed: {status}").into());
    }
    Ok(Measured {
        stdout,
        // Linux reports ru_maxrss in KiB.
        peak_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        wall,
    })
}

/// Waits for child `pid` and returns its exit status and resource use.
fn wait4(pid: u32) -> io::Result<(ExitStatus, libc::rusage)> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is a plain C struct for which all-zero bytes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live locals of the right types.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            return Ok((ExitStatus::from_raw(status), usage));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's tables as `Store::open` makes them today.
    fn store_db() -> (tempfile::TempDir, rusqlite::Connection) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("floor.db");
        drop(Store::open(&Db::Sqlite(db.clone())).expect("open the store"));
        let conn = rusqlite::Connection::open(&db).expect("open");
        (dir, conn)
    }

    #[test]
    fn the_floor_writes_every_column_it_has_a_value_for_and_leaves_the_rest_to_the_database() {
        let (_dir, conn) = store_db();
        let rows = Insert::for_table(&conn, FLOOR_TABLE, ROW_VALUES).expect("rows");
        assert_eq!(
            rows.sql,
            "INSERT INTO spoolite_event (key, flight_id, event_kind, instant_utc, \
             source_revision, payload, retracted, batch_ref, first_seen_at, updated_at, \
             change_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        );
        let inbox = Insert::for_table(&conn, "ingest_inbox", &inbox_values()).expect("inbox");
        // batch_id may be NULL and rows_last_written has a default.
        assert!(!inbox.sql.contains("batch_id") && !inbox.sql.contains("rows_last_written"));
        assert_eq!(inbox.picks.len(), inbox_values().len(), "{}", inbox.sql);
        let flight = Insert::for_table(&conn, "spoolite_flight", &["flight_id"]).expect("flight");
        assert_eq!(
            flight.sql,
            "INSERT INTO spoolite_flight (flight_id) VALUES (?1)"
        );
    }

    #[test]
    fn a_column_the_floor_cannot_fill_fails_naming_it_and_a_dropped_one_is_left_out() {
        let conn = rusqlite::Connection::open_in_memory().expect("open");
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, b TEXT NOT NULL, a TEXT NOT NULL,
                 note TEXT, n INTEGER NOT NULL DEFAULT 0,
                 twice INTEGER GENERATED ALWAYS AS (n * 2) STORED)",
        )
        .expect("create");
        let insert = Insert::for_table(&conn, "t", &["a", "b", "gone"]).expect("insert");
        assert_eq!(insert.sql, "INSERT INTO t (b, a) VALUES (?1, ?2)");
        let values: [&dyn ToSql; 3] = [&"A", &"B", &"never"];
        conn.execute(&insert.sql, params_from_iter(insert.values(&values)))
            .expect("insert");
        let row: (String, String) = conn
            .query_row("SELECT a, b FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("read");
        assert_eq!(row, ("A".to_owned(), "B".to_owned()));
        let error = Insert::for_table(&conn, "t", &["a"]).expect_err("b has no value");
        assert!(error.to_string().contains("t.b is NOT NULL"), "{error}");
    }
}
