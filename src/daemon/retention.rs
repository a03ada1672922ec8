//! `--archive-keep`: files that have lain in archive/ longer than the keep are
//! deleted, at start and at each `--rescan`, a bounded amount of work per pass.
//!
//! A file's time in archive/ counts from its move there, read from its change time
//! (ctime): the rename into archive/ sets it, nothing a user can do sets it back,
//! and it survives a daemon's restart, so the clock of a file already in archive/
//! goes on. Its modification time is not used: an upload may keep the source's
//! (`sftp -p`, `rsync -t`), which would have a just-archived file look years old.
//! A file whose change time moves later (a `chmod`, a hard link) is only kept
//! longer. Only regular files are deleted; a file the archive watch still
//! watches (`daemon::archived`: archived within `--partial-timeout`) is left for
//! a later pass, so the watch never loses a file it may have to move back.
//!
//! Each pass looks at no more than `EXAMINED_PER_PASS` entries (one `lstat` each)
//! and deletes no more than `DELETED_PER_PASS`; a pass that stops early resumes
//! the folder's listing where it stopped at the next (skipping the entries it
//! looked at, by count: a file listed in between may wait one more round). The
//! inbox rows of deleted files stay: a re-drop is still a duplicate.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant, SystemTime};

use crate::spool::Spool;

use super::LOG_TARGET;

/// At most this many entries of archive/ are looked at (one `lstat` each) per
/// pass: a pass over a folder of years of files takes milliseconds, not minutes.
pub(super) const EXAMINED_PER_PASS: usize = 10_000;

/// At most this many files are deleted per pass (one `unlink` each, then one
/// `fsync` of the folder): at the default 30 s `--rescan`, 120,000 an hour.
pub(super) const DELETED_PER_PASS: usize = 1_000;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Pass {
    pub(crate) examined: usize,
    pub(crate) deleted: usize,
    /// Old files left because the archive watch still watches them.
    pub(crate) watched: usize,
    pub(crate) failed: usize,
    pub(crate) first_error: Option<String>,
    /// Whether the pass reached the folder's end (the next starts at its head).
    pub(crate) reached_end: bool,
}

#[derive(Debug)]
pub(super) struct Retention {
    keep: Option<Duration>,
    every: Duration,
    next_at: Option<Instant>,
    /// Entries of the listing to skip at the next pass: those this sweep has
    /// looked at already, less those it deleted.
    resume_after: usize,
}

impl Retention {
    /// `keep` unset: never deletes. Passes come at most every `every` (the
    /// rescan), the first at the first look.
    pub(super) fn new(keep: Option<Duration>, every: Duration) -> Retention {
        Retention {
            keep,
            every,
            next_at: None,
            resume_after: 0,
        }
    }

    /// Whether a pass is due at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.keep.is_some() && self.next_at.is_none_or(|at| now >= at)
    }

    /// One pass over archive/ at `now` (wall time `wall`), leaving the files
    /// `watched` names; logs what it did when it deleted or failed to delete any.
    pub(super) fn pass(
        &mut self,
        spool: &Spool,
        watched: &HashSet<OsString>,
        wall: SystemTime,
        now: Instant,
    ) -> Pass {
        self.next_at = Some(now + self.every);
        let Some(keep) = self.keep else {
            return Pass::default();
        };
        let pass = self.sweep(spool, watched, keep, wall);
        if pass.reached_end {
            self.resume_after = 0;
        } else {
            self.resume_after += pass.examined - pass.deleted;
        }
        if pass.deleted > 0 {
            if let Err(error) = crate::spool::sync_dir(&spool.archive) {
                log::warn!(target: LOG_TARGET, "archive/: fsync after deleting: {error}");
            }
            log::info!(
                target: LOG_TARGET,
                "archive/: deleted {} there longer than --archive-keep {} (looked at \
                 {}{}); their inbox rows stay",
                files(pass.deleted),
                shown(keep),
                pass.examined,
                if pass.reached_end { "" } else { ", more at the next pass" },
            );
        }
        if pass.failed > 0 {
            log::warn!(
                target: LOG_TARGET,
                "archive/: {} older than --archive-keep {} could not be deleted: {}",
                files(pass.failed),
                shown(keep),
                pass.first_error.as_deref().unwrap_or("")
            );
        }
        pass
    }

    fn sweep(
        &self,
        spool: &Spool,
        watched: &HashSet<OsString>,
        keep: Duration,
        wall: SystemTime,
    ) -> Pass {
        let mut pass = Pass::default();
        let entries = match std::fs::read_dir(&spool.archive) {
            Ok(entries) => entries,
            Err(error) => {
                pass.failed += 1;
                pass.first_error = Some(format!("list {}: {error}", spool.archive.display()));
                pass.reached_end = true;
                return pass;
            }
        };
        let mut entries = entries.skip(self.resume_after);
        loop {
            if pass.examined >= EXAMINED_PER_PASS || pass.deleted >= DELETED_PER_PASS {
                return pass;
            }
            let Some(entry) = entries.next() else {
                pass.reached_end = true;
                return pass;
            };
            pass.examined += 1;
            let Ok(entry) = entry else { continue };
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue; // gone since the listing
            };
            if !meta.file_type().is_file() || !arrived_before(&meta, wall, keep) {
                continue;
            }
            if watched.contains(&entry.file_name()) {
                pass.watched += 1;
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => pass.deleted += 1,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    pass.failed += 1;
                    if pass.first_error.is_none() {
                        pass.first_error = Some(format!(
                            "{}: {error}",
                            crate::names::escaped(&entry.file_name().to_string_lossy())
                        ));
                    }
                }
            }
        }
    }
}

/// Whether the file has lain in archive/ longer than `keep` at `wall`, by its
/// change time (the move's).
fn arrived_before(meta: &std::fs::Metadata, wall: SystemTime, keep: Duration) -> bool {
    let Ok(since_epoch) = u64::try_from(meta.ctime()) else {
        return false;
    };
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    let arrived = SystemTime::UNIX_EPOCH + Duration::new(since_epoch, nanos);
    wall.duration_since(arrived).is_ok_and(|age| age > keep)
}

/// `1 file`, `2 files`.
fn files(n: usize) -> String {
    format!("{n} {}", if n == 1 { "file" } else { "files" })
}

/// A keep as an operator wrote it, roughly: `400d`, `36h`, `2s`.
fn shown(keep: Duration) -> String {
    let secs = keep.as_secs();
    match secs {
        0 => format!("{}ms", keep.as_millis()),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool() -> (tempfile::TempDir, Spool) {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = Spool::create(&dir.path().join("spool")).expect("spool");
        (dir, spool)
    }

    fn names(spool: &Spool) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&spool.archive)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn without_a_keep_nothing_is_ever_due_or_deleted() {
        let (_dir, spool) = spool();
        std::fs::write(spool.archive.join("a.json"), "{}").expect("write");
        let mut retention = Retention::new(None, Duration::from_secs(30));
        let now = Instant::now();
        assert!(!retention.due(now));
        let later = SystemTime::now() + Duration::from_secs(10 * 365 * 86_400);
        assert_eq!(
            retention.pass(&spool, &HashSet::new(), later, now),
            Pass::default()
        );
        assert_eq!(names(&spool), ["a.json"]);
    }

    #[test]
    fn old_files_go_young_and_watched_ones_stay_and_the_pass_is_bounded() {
        let (_dir, spool) = spool();
        let count = DELETED_PER_PASS + 5;
        for i in 0..count {
            std::fs::write(spool.archive.join(format!("f{i:05}.json")), "{}").expect("write");
        }
        std::fs::create_dir(spool.archive.join("a-folder")).expect("folder");
        let watched: HashSet<OsString> = [OsString::from("f00000.json")].into();
        let keep = Duration::from_secs(3600);
        let mut retention = Retention::new(Some(keep), Duration::from_secs(30));
        let now = Instant::now();
        assert!(retention.due(now));
        // An hour on, nothing is older than the keep.
        let soon = SystemTime::now() + Duration::from_secs(1800);
        let pass = retention.pass(&spool, &watched, soon, now);
        assert_eq!(
            (pass.deleted, pass.examined, pass.reached_end),
            (0, count + 1, true)
        );
        assert!(!retention.due(now + Duration::from_secs(29)));
        assert!(retention.due(now + Duration::from_secs(30)));
        // Two hours on, every file but the watched one goes, a bounded number a pass.
        let later = SystemTime::now() + Duration::from_secs(7200);
        let first = retention.pass(&spool, &watched, later, now + Duration::from_secs(30));
        assert_eq!(first.deleted, DELETED_PER_PASS);
        assert!(!first.reached_end);
        let second = retention.pass(&spool, &watched, later, now + Duration::from_secs(60));
        assert_eq!(second.deleted, count - 1 - DELETED_PER_PASS);
        assert!(second.reached_end);
        assert_eq!(first.watched + second.watched, 1);
        assert_eq!(names(&spool), ["a-folder", "f00000.json"]);
    }

    #[test]
    fn a_keep_is_shown_in_its_unit() {
        assert_eq!(shown(Duration::from_secs(400 * 86_400)), "400d");
        assert_eq!(shown(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(shown(Duration::from_secs(2)), "2s");
        assert_eq!(shown(Duration::from_millis(500)), "500ms");
    }
}
