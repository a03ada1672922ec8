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

use rusqlite::{OptionalExtension, params};
use serde::Deserialize;
use serde_json::json;
use spoolite::batch::{BatchReader, Format};
use spoolite::ingest::{self, Outcome};
use spoolite::store::Store;

use crate::BenchResult;

/// Read buffer of the floor loop, the same as spoolite's.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// The batch digest of every floor row, and of the one inbox row the floor writes.
const FLOOR_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Where the floor writes: the store's own table behind the `duty_event` view, so
/// the floor stores exactly the rows spoolite stores, in the same layout.
const FLOOR_TABLE: &str = "duty_event_data";

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
    let mut store = match (args.dry_run, args.db.exists()) {
        (false, _) => Store::open(&args.db)?,
        (true, true) => {
            let mut store = Store::open_read_only(&args.db)?;
            store.require_current_schema(&args.db)?;
            store
        }
        (true, false) => Store::open_empty_in_memory()?,
    };
    store.set_sorted_index_builds(!args.keep_indexes);
    let stop = AtomicBool::new(false);
    let options = ingest::Options {
        file_bytes_max: u64::MAX,
        limits: spoolite::batch::Limits::default(),
        progress: None,
        dry_run: args.dry_run,
        stop: &stop,
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
    let mut conn = spoolite::store::open::read_write(&args.db)?;
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
    tx.execute(
        "INSERT INTO ingest_inbox (batch_ref, batch_digest, file_name, ingested_at, events_total,
             inserted, updated, unchanged, stale, conflicts, invalid)
         VALUES (1, ?1, 'floor', ?2, 0, 0, 0, 0, 0, 0, 0)",
        params![FLOOR_DIGEST, now],
    )?;
    let mut insert = tx.prepare(&format!(
        "INSERT INTO {FLOOR_TABLE} (key, flight_ref, event_kind, instant_utc,
             source_revision, payload, retracted, batch_ref, first_seen_at, updated_at,
             change_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 1, ?7, ?7, ?8)"
    ))?;
    // Each flight id is numbered once in `flight`, as the store does.
    let mut flight_lookup = tx.prepare("SELECT ref FROM flight WHERE flight_id = ?1")?;
    let mut flight_insert = tx.prepare("INSERT INTO flight (flight_id) VALUES (?1)")?;
    let mut rows = 0u64;
    while let Some(record) = reader
        .next_record()
        .map_err(|e| format!("read {name}: {e:?}"))?
    {
        let Ok(event) = record.event else { continue };
        let found: Option<i64> = flight_lookup
            .query_row([event.flight_id()], |row| row.get(0))
            .optional()?;
        let flight_ref = match found {
            Some(flight_ref) => flight_ref,
            None => flight_insert.insert([event.flight_id()])?,
        };
        insert.execute(params![
            event.key(),
            flight_ref,
            event.event_kind(),
            event.instant_utc(),
            event.revision().unwrap_or(0),
            event.payload(),
            now,
            rows as i64 + 1,
        ])?;
        rows += 1;
    }
    drop((insert, flight_lookup, flight_insert));
    tx.commit()?;
    let seconds = started.elapsed().as_secs_f64();
    let line = json!({"outcome": "floor", "seconds": seconds, "counts": {"inserted": rows}, "table": FLOOR_TABLE});
    println!("{line}");
    Ok(())
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
