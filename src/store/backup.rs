//! `spoolite backup`'s database work: a page-by-page copy of a SQLite database
//! into a new file, through SQLite's online backup API, while a daemon may go on
//! committing to the source; then `PRAGMA integrity_check` on the copy.
//!
//! The copy holds exactly the batches committed at one moment. The source
//! connection (read-only) opens a read transaction before the first page is
//! copied and holds it to the last: in WAL mode that fixes the snapshot every
//! step reads, so a commit of the daemon meanwhile goes into the WAL beyond the
//! snapshot and neither shows in the copy nor restarts it (the backup API starts
//! over when a step finds the source changed since the step before, which it
//! cannot while the source's transaction holds one snapshot). The daemon is not
//! held up: a reader blocks no writer in WAL mode; it only keeps checkpoints from
//! passing its snapshot, so the WAL grows by what is committed during the copy
//! and is checkpointed once it ends.
//!
//! `VACUUM INTO` would give the same snapshot, but it rebuilds every table and
//! index (minutes of CPU at 10M rows, against a copy of pages) and tells nothing
//! of its progress; the backup API copies pages as they are, in steps whose count
//! is the progress bar's.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::backup::{Backup, StepResult};

use super::StoreError;
use super::sqlite::connect;

/// Pages copied per step: 16 MiB at spoolite's 16 KiB pages, so that the
/// progress bar moves a few times a second.
const PAGES_PER_STEP: std::ffi::c_int = 1024;

/// How long a step may find the source or the copy busy before the backup gives
/// up (a step is busy only while another connection of this process writes).
const BUSY_FOR_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// The integrity problems named in an error, of those `integrity_check` reports.
const PROBLEMS_SHOWN: usize = 5;

/// How far the copy has come.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackupProgress {
    pub(crate) pages_done: u64,
    pub(crate) pages_total: u64,
    /// Bytes per page of the source.
    pub(crate) page_bytes: u64,
}

/// What the copy holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Copied {
    /// Rows of `ingest_inbox` in the copy: the batches committed at the moment
    /// the copy was taken.
    pub(crate) batches: u64,
    /// Pages copied, and their size.
    pub(crate) pages: u64,
    pub(crate) page_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BackupError {
    #[error("database {0} does not exist: name the database file with --db (SPOOLITE_DB)")]
    Missing(PathBuf),
    #[error(transparent)]
    Source(#[from] StoreError),
    #[error("read database {path}: {source}")]
    Read {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("write the copy {path}: {source}")]
    Write {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "the copy {path} fails integrity_check ({problems}); it is removed: run `spoolite \
         check` on the source, then back up again"
    )]
    Integrity { path: PathBuf, problems: String },
    #[error(
        "the copy {path} holds {copied} batches but the source held {source_batches} when the \
         copy began; it is removed"
    )]
    Mismatch {
        path: PathBuf,
        copied: u64,
        source_batches: u64,
    },
}

/// Copies the SQLite database at `source` into a new database file at `target`
/// (which must not hold a database: the caller removes what a killed backup left
/// there), checks the copy's integrity and counts its batches. The source is only
/// read. The copy is left closed, with no `-wal` beside it.
pub(crate) fn sqlite_to_file(
    source: &Path,
    target: &Path,
    progress: &dyn Fn(BackupProgress),
) -> Result<Copied, BackupError> {
    if !source.exists() {
        return Err(BackupError::Missing(source.to_owned()));
    }
    let read_error = |source_error| BackupError::Read {
        path: source.to_owned(),
        source: source_error,
    };
    let write_error = |source_error| BackupError::Write {
        path: target.to_owned(),
        source: source_error,
    };
    let from = connect::read_only(source)?;
    // The read transaction that fixes the snapshot: begun here, its snapshot taken
    // by the count, held until every page is copied.
    let snapshot = from.unchecked_transaction().map_err(read_error)?;
    let source_batches = count_batches(&snapshot).map_err(read_error)?;
    let page_bytes: i64 = snapshot
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .map_err(read_error)?;
    let page_bytes = page_bytes.unsigned_abs();
    let mut to = Connection::open(target).map_err(write_error)?;
    let pages = copy_pages(&snapshot, &mut to, page_bytes, progress).map_err(write_error)?;
    snapshot.finish().map_err(read_error)?;
    drop(from);
    check_integrity(&to, target)?;
    let batches = count_batches(&to).map_err(write_error)?;
    // Closing the last connection checkpoints the copy's WAL into it and removes
    // the WAL: the copy is one file.
    to.close().map_err(|(_, error)| write_error(error))?;
    if batches != source_batches {
        return Err(BackupError::Mismatch {
            path: target.to_owned(),
            copied: batches,
            source_batches,
        });
    }
    Ok(Copied {
        batches,
        pages,
        page_bytes,
    })
}

/// Copies every page of `from`'s snapshot into `to`, in steps, reporting each;
/// returns the pages copied.
fn copy_pages(
    from: &Connection,
    to: &mut Connection,
    page_bytes: u64,
    progress: &dyn Fn(BackupProgress),
) -> rusqlite::Result<u64> {
    let backup = Backup::new(from, to)?;
    let mut busy_since: Option<std::time::Instant> = None;
    loop {
        let step = backup.step(PAGES_PER_STEP)?;
        let now = backup.progress();
        let total = u64::try_from(now.pagecount).unwrap_or(0);
        let remaining = u64::try_from(now.remaining).unwrap_or(0);
        progress(BackupProgress {
            pages_done: total.saturating_sub(remaining),
            pages_total: total,
            page_bytes,
        });
        match step {
            StepResult::Done => return Ok(total),
            StepResult::More => busy_since = None,
            StepResult::Busy | StepResult::Locked => {
                let since = *busy_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > BUSY_FOR_MAX {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                        Some("the database stayed busy for 5 s".to_owned()),
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {}
        }
    }
}

/// `PRAGMA integrity_check` on the copy: `ok`, or the first problems it names.
fn check_integrity(conn: &Connection, path: &Path) -> Result<(), BackupError> {
    let write_error = |source| BackupError::Write {
        path: path.to_owned(),
        source,
    };
    let mut statement = conn
        .prepare("PRAGMA integrity_check")
        .map_err(write_error)?;
    let lines: Vec<String> = statement
        .query_map([], |row| row.get(0))
        .map_err(write_error)?
        .collect::<rusqlite::Result<_>>()
        .map_err(write_error)?;
    if lines == ["ok"] {
        return Ok(());
    }
    let mut problems = lines
        .iter()
        .take(PROBLEMS_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if lines.len() > PROBLEMS_SHOWN {
        problems.push_str(&format!("; and {} more", lines.len() - PROBLEMS_SHOWN));
    }
    Err(BackupError::Integrity {
        path: path.to_owned(),
        problems,
    })
}

fn count_batches(conn: &Connection) -> rusqlite::Result<u64> {
    let count: i64 = conn.query_row("SELECT count(*) FROM ingest_inbox", [], |row| row.get(0))?;
    Ok(count.unsigned_abs())
}
