//! The files archived within the last `--partial-timeout`, watched for a writer that
//! went on writing after the move: one that wrote under the final name and paused
//! past `--settle` at a line boundary of an NDJSON file, so that the file looked
//! complete. A watched file whose size or modification time changes is logged and
//! moved back to incoming/, to be taken again (its events already stored come out
//! `unchanged`, the new ones `inserted`), so that archive/ only ever holds bytes
//! whose digest is in the inbox, whatever the writer did.
//!
//! The daemon looks at them before each listing of incoming/ and, during a long
//! pass, at most once a second; a write in archive/ rings the doorbell
//! (`watch::watch_archive`), and the rescan covers a lost event. A watch that ends
//! (its time is over, or the 10,000 newest push it out) ends after a last look.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::clock::{Clock, Reading, format_millis, parse_millis};
use crate::names;
use crate::spool::{FileIdentity, Spool};
use crate::state::ArchivedFile;

use super::LOG_TARGET;

/// At most this many archived files are watched at once; beyond it the oldest
/// watch ends early (a backlog of small files archives thousands a minute).
pub(super) const WATCHED_MAX: usize = 10_000;

#[derive(Debug)]
struct Watched {
    /// Its name in archive/.
    name: OsString,
    /// The digest of the bytes committed.
    digest: String,
    /// The file as it was read before its move.
    read: FileIdentity,
    until: Instant,
}

/// An archived file that changed and was moved back to incoming/.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MovedBack {
    /// Its name in archive/, as recorded.
    pub(crate) archived: String,
    /// Its name in incoming/ now, as recorded.
    pub(crate) incoming: String,
}

#[derive(Debug, Default)]
pub(super) struct Archived {
    /// In the order they were archived, so the oldest watch ends first.
    watched: VecDeque<Watched>,
    looked_at: Option<Instant>,
}

/// During a long pass the watched files are looked at this often.
const LOOK_EVERY: Duration = Duration::from_secs(1);

impl Archived {
    /// Watches `name`, just archived with the bytes of `digest`, until `until`.
    /// `read` is the file as it was read and found unchanged just before its move
    /// (a look after the move could miss a write made in between). Returns the
    /// oldest watched file when it had to make room and that file had changed.
    pub(crate) fn watch(
        &mut self,
        spool: &Spool,
        name: &OsStr,
        read: &FileIdentity,
        digest: &str,
        until: Instant,
    ) -> Option<MovedBack> {
        // The oldest watch ends early, after a last look.
        let last = if self.watched.len() >= WATCHED_MAX {
            self.watched
                .pop_front()
                .and_then(|oldest| look_at(spool, &oldest).err().flatten())
        } else {
            None
        };
        self.watched.push_back(Watched {
            name: name.to_owned(),
            digest: digest.to_owned(),
            read: read.clone(),
            until,
        });
        last
    }

    /// Whether a look is due during a long pass (at most once a second while
    /// files are watched), so that a backlog does not leave them unwatched.
    pub(crate) fn look_due(&self, now: Instant) -> bool {
        !self.watched.is_empty()
            && self
                .looked_at
                .is_none_or(|at| now.saturating_duration_since(at) >= LOOK_EVERY)
    }

    /// The newest `kept` watches, as the state file keeps them (`clock` turns
    /// their ends into wall times).
    pub(crate) fn kept(&self, kept: usize, clock: &dyn Clock) -> Vec<ArchivedFile> {
        let reading = Reading::of(clock);
        let skip = self.watched.len().saturating_sub(kept);
        self.watched
            .iter()
            .skip(skip)
            .filter_map(|watched| {
                let name = watched.name.to_str()?.to_owned();
                Some(ArchivedFile {
                    name,
                    sha256: watched.digest.clone(),
                    until: format_millis(reading.wall_of(watched.until)),
                    version: watched.read.clone(),
                })
            })
            .collect()
    }

    /// Takes over the watches a daemon before this one kept, for what is left of
    /// their time.
    pub(crate) fn remember(&mut self, kept: &[ArchivedFile], clock: &dyn Clock) {
        let reading = Reading::of(clock);
        for file in kept {
            let Some(until) = parse_millis(&file.until).filter(|&until| until > reading.wall)
            else {
                continue; // over, or not a time
            };
            if self.watched.len() >= WATCHED_MAX {
                break;
            }
            self.watched.push_back(Watched {
                name: OsString::from(&file.name),
                digest: file.sha256.clone(),
                read: file.version.clone(),
                until: reading.instant_of(until),
            });
        }
    }

    /// The names in archive/ of the files watched, which `--archive-keep` leaves.
    pub(crate) fn names(&self) -> std::collections::HashSet<OsString> {
        self.watched.iter().map(|w| w.name.clone()).collect()
    }

    /// How many files are watched.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.watched.len()
    }

    /// Ends the watches that are over, and moves back to incoming/ every watched
    /// file that changed; says which.
    pub(crate) fn look(&mut self, spool: &Spool, now: Instant) -> Vec<MovedBack> {
        self.looked_at = Some(now);
        let mut moved = Vec::new();
        self.watched
            .retain(|watched| match look_at(spool, watched) {
                // A watch that is over ends after this last look.
                Ok(still_watched) => still_watched && now < watched.until,
                Err(back) => {
                    moved.extend(back);
                    false
                }
            });
        moved
    }
}

/// One look at a watched file: `Ok(true)` while it is unchanged, `Ok(false)` when
/// it is no longer ours to watch (deleted, renamed, another file under its
/// name), `Err` when it changed: moved back to incoming/ (`None` when that failed,
/// logged).
fn look_at(spool: &Spool, watched: &Watched) -> Result<bool, Option<MovedBack>> {
    let Ok(meta) = std::fs::symlink_metadata(spool.archive.join(&watched.name)) else {
        return Ok(false);
    };
    let seen = FileIdentity::of(&meta);
    if (seen.dev, seen.ino) != (watched.read.dev, watched.read.ino) {
        return Ok(false);
    }
    if !seen.written_since(&watched.read) {
        return Ok(true);
    }
    Err(move_back(spool, watched, &seen))
}

/// Logs the change of an archived file and moves it back to incoming/; `None`
/// (logged) when the move fails, and the file is no longer watched.
fn move_back(spool: &Spool, watched: &Watched, seen: &FileIdentity) -> Option<MovedBack> {
    let archived = names::lossy(&watched.name);
    let now_digest = digest_of(&spool.archive.join(&watched.name))
        .unwrap_or_else(|error| format!("unknown ({error})"));
    let change = format!(
        "archive/{} changed after it was archived (size {} -> {} bytes): a writer wrote on \
         under its final name; committed sha256 {}, now {now_digest}",
        names::escaped(&archived),
        watched.read.size,
        seen.size,
        watched.digest,
    );
    match spool.unarchive(&watched.name) {
        Ok(back) => {
            let incoming = names::lossy(&back);
            log::warn!(
                target: LOG_TARGET,
                "{change}; moved back to incoming/{} to be taken again",
                names::escaped(&incoming)
            );
            Some(MovedBack { archived, incoming })
        }
        Err(error) => {
            log::error!(
                target: LOG_TARGET,
                "{change}; moving it back to incoming/ failed: {error}; move it there by hand"
            );
            None
        }
    }
}

/// The SHA-256 of a file's bytes, in lowercase hex.
fn digest_of(path: &std::path::Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(hex::encode(hasher.finalize())),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
