//! What a site takes on disk, for the metrics file and `status`: the SQLite
//! database file, its WAL, and the regular files in archive/. A disk that fills
//! up is then seen while it fills, not once it is full.
//!
//! The database and its WAL are one `stat` each. archive/ grows without bound
//! unless `--archive-keep` trims it, so the daemon does not list it for every
//! publish: it keeps a running total (`ArchiveTally`), counted in full at start
//! and once per `--rescan` interval (which also catches what others removed or
//! added), and raised by each file the daemon archives in between. `status`, a
//! one-shot command, counts archive/ itself: one `readdir` and one `lstat` per
//! file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the site takes on disk; `None` where a size is not known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SiteSizes {
    pub(crate) database_bytes: Option<u64>,
    pub(crate) wal_bytes: Option<u64>,
    pub(crate) archive_bytes: Option<u64>,
}

/// The regular files of a folder (links not followed, subfolders not entered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FolderSize {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

/// Counts the regular files directly inside `dir` and their bytes. A file that
/// goes while it is counted is left out.
pub(crate) fn folder_size(dir: &Path) -> io::Result<FolderSize> {
    let mut size = FolderSize::default();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_file() {
            size.files += 1;
            size.bytes += meta.len();
        }
    }
    Ok(size)
}

/// The size of the file at `path`; 0 when there is none (a WAL only exists
/// while a connection has the database open).
pub(crate) fn file_bytes(path: &Path) -> io::Result<u64> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// The WAL file beside a SQLite database.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// The daemon's running total of archive/: counted in full when due, raised by
/// each file the daemon moves there in between.
#[derive(Debug, Default)]
pub(crate) struct ArchiveTally {
    size: Option<FolderSize>,
    counted_at: Option<Instant>,
}

impl ArchiveTally {
    /// A file of `bytes` was moved into archive/.
    pub(crate) fn archived(&mut self, bytes: u64) {
        if let Some(size) = &mut self.size {
            size.files += 1;
            size.bytes += bytes;
        }
    }

    /// Something left archive/ (a file taken back to incoming/): the next look
    /// counts it all again.
    pub(crate) fn recount(&mut self) {
        self.counted_at = None;
    }

    /// The bytes in archive/ at `now`: the running total, counted again in full
    /// when it never was, was marked for a recount, or is `every` old. `None`
    /// while archive/ cannot be listed (logged by the caller's listing of it).
    pub(crate) fn bytes(&mut self, archive: &Path, now: Instant, every: Duration) -> Option<u64> {
        let due = self
            .counted_at
            .is_none_or(|at| now.saturating_duration_since(at) >= every);
        if due {
            self.size = folder_size(archive).ok();
            self.counted_at = Some(now);
        }
        self.size.map(|size| size.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_counts_its_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.json"), b"12345").unwrap();
        fs::write(dir.path().join(".hidden"), b"123").unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("sub").join("inner"), b"1234567").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        assert_eq!(
            folder_size(dir.path()).unwrap(),
            FolderSize { files: 2, bytes: 8 }
        );
        assert_eq!(file_bytes(&dir.path().join("missing")).unwrap(), 0);
    }

    #[test]
    fn the_tally_counts_when_due_and_adds_what_is_archived_between() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.json"), b"12345").unwrap();
        let mut tally = ArchiveTally::default();
        let start = Instant::now();
        let every = Duration::from_secs(30);
        assert_eq!(tally.bytes(dir.path(), start, every), Some(5));
        // A file the daemon archives is added without a listing; one that
        // appears behind its back waits for the next count.
        fs::write(dir.path().join("b.json"), b"123").unwrap();
        tally.archived(3);
        fs::write(dir.path().join("c.json"), b"1").unwrap();
        assert_eq!(tally.bytes(dir.path(), start + every / 2, every), Some(8));
        assert_eq!(tally.bytes(dir.path(), start + every, every), Some(9));
        fs::remove_file(dir.path().join("a.json")).unwrap();
        tally.recount();
        assert_eq!(tally.bytes(dir.path(), start + every, every), Some(4));
    }
}
