//! `spoolite status`: what an operator asks first, read from the database and the
//! spool folders without changing either.

use std::fs;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;

use crate::spool::{REASON_SUFFIX, Spool};
use crate::store::{Store, StoreError};

/// Above this size the WAL is reported as a problem: checkpoints are being held
/// back, most likely by a long-running analyst read.
pub const WAL_WARN_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    pub spool: String,
    pub db: String,
    pub db_exists: bool,
    pub batches: u64,
    pub events: u64,
    pub quarantined: u64,
    pub last_ingest_at: Option<String>,
    pub incoming_waiting: u64,
    pub oldest_waiting_age_s: Option<u64>,
    pub rejected_files: u64,
    pub wal_bytes: u64,
    pub wal_warning: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("read {path}: {source}")]
    Read { path: String, source: io::Error },
}

pub fn gather(spool_dir: &Path, db: &Path) -> Result<Status, StatusError> {
    let spool = Spool::at(spool_dir);
    let db_exists = db.exists();
    let totals = if db_exists {
        Store::open_read_only(db)?.totals()?
    } else {
        Default::default()
    };
    let read_error = |path: &Path| {
        let path = path.display().to_string();
        move |source| StatusError::Read { path, source }
    };
    let now = SystemTime::now();
    let mut incoming_waiting = 0;
    let mut oldest: Option<SystemTime> = None;
    for (_, meta) in regular_files(&spool.incoming).map_err(read_error(&spool.incoming))? {
        incoming_waiting += 1;
        let mtime = meta.modified().unwrap_or(now);
        oldest = Some(oldest.map_or(mtime, |o| o.min(mtime)));
    }
    let rejected_files = regular_files(&spool.rejected)
        .map_err(read_error(&spool.rejected))?
        .iter()
        // Reason files are not rejected files, and neither is a hidden temporary
        // file a crash may leave while a reason file is being written.
        .filter(|(name, _)| !name.ends_with(REASON_SUFFIX) && !name.starts_with('.'))
        .count() as u64;
    let wal_bytes = wal_path(db).metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Status {
        spool: spool_dir.display().to_string(),
        db: db.display().to_string(),
        db_exists,
        batches: totals.batches,
        events: totals.events,
        quarantined: totals.quarantined,
        last_ingest_at: totals.last_ingest_at,
        incoming_waiting,
        oldest_waiting_age_s: oldest.map(|o| now.duration_since(o).unwrap_or_default().as_secs()),
        rejected_files,
        wal_bytes,
        wal_warning: wal_bytes > WAL_WARN_BYTES,
    })
}

/// The WAL file beside a database.
pub fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// Regular files directly inside `dir` (none when it does not exist yet).
fn regular_files(dir: &Path) -> io::Result<Vec<(String, fs::Metadata)>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        let meta = match fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_file() {
            files.push((entry.file_name().to_string_lossy().into_owned(), meta));
        }
    }
    Ok(files)
}

/// The human form, within 80 columns.
pub fn render(status: &Status) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| out.push_str(&format!("{label:<18}{value}\n"));
    line(
        "database",
        if status.db_exists {
            status.db.clone()
        } else {
            format!("{} (not created yet)", status.db)
        },
    );
    line("spool", status.spool.clone());
    line("batches", status.batches.to_string());
    line("events", status.events.to_string());
    line("quarantined", status.quarantined.to_string());
    line(
        "last ingest",
        status
            .last_ingest_at
            .clone()
            .unwrap_or_else(|| "never".into()),
    );
    let oldest = status
        .oldest_waiting_age_s
        .map(|s| format!(" (oldest {s} s)"))
        .unwrap_or_default();
    line(
        "waiting",
        format!("{} in incoming/{oldest}", status.incoming_waiting),
    );
    line(
        "rejected",
        format!("{} in rejected/", status.rejected_files),
    );
    let warning = if status.wal_warning {
        "  WARNING: checkpoints held back by a long read?"
    } else {
        ""
    };
    line("wal", format!("{} bytes{warning}", status.wal_bytes));
    out
}
