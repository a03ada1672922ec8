//! When the daemon looks at incoming/ and which file it takes next: the files
//! tracked since the last listing, the queue of the current pass, the timers that
//! make the folder be listed again (settle, partial timeout, a file's back-off,
//! `--rescan`, the doorbell's gap), and the back-off of a failing listing or file.
//! The rules themselves are `readiness`'s; this holds what they are applied to.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::names;
use crate::readiness::{Backoff, Readiness, Rules, Tracked};
use crate::spool::{self, FileIdentity, Spool};

use super::LOG_TARGET;
use super::report::{Fault, Left};

/// Listings caused by the doorbell are at least this far apart, so that a burst of
/// uploads (each ringing) costs a few listings, not one per file; a lone file is
/// listed at once.
const RING_LISTING_GAP: Duration = Duration::from_millis(50);

pub(super) struct Schedule {
    rules: Rules,
    rescan: Duration,
    /// Every regular file of incoming/ at the last listing, temp-named ones too.
    tracked: HashMap<OsString, Tracked<FileIdentity>>,
    /// Entries of incoming/ that are never taken, logged once each.
    ignored: HashSet<OsString>,
    /// The files of the current pass that were ready when it was listed.
    queue: VecDeque<OsString>,
    /// The doorbell rang since the last listing (or none happened yet).
    notified: bool,
    /// When the folder must be listed again even without a ring.
    list_at: Option<Instant>,
    /// When it was last listed.
    listed_at: Option<Instant>,
    list_retry: Backoff,
    /// What the daemon before this one told of the files it saw (the state file),
    /// by name, until the first listing has used it.
    remembered: HashMap<String, Remembered>,
}

/// A file that the daemon before this one saw: when first, when it last changed,
/// and its version then.
#[derive(Debug, Clone)]
pub(super) struct Remembered {
    pub(crate) first_seen: Instant,
    pub(crate) changed_at: Instant,
    pub(crate) version: FileIdentity,
}

/// The files waiting in incoming/, as the metrics and the state file tell them.
#[derive(Debug, Clone)]
pub(super) struct WaitingFiles {
    pub(crate) count: u64,
    /// When the daemon first saw the one that has waited longest.
    pub(crate) oldest_seen: Option<Instant>,
    /// The ones seen first, oldest first (at most `state::WAITING_KEPT_MAX`).
    pub(crate) files: Vec<Listed>,
}

/// A file waiting in incoming/, as the state file tells it.
#[derive(Debug, Clone)]
pub(super) struct Listed {
    pub(crate) name: OsString,
    pub(crate) state: &'static str,
    pub(crate) first_seen: Instant,
    pub(crate) changed_at: Instant,
    pub(crate) version: FileIdentity,
}

impl Schedule {
    pub(crate) fn new(rules: Rules, rescan: Duration) -> Schedule {
        Schedule {
            rules,
            rescan,
            tracked: HashMap::new(),
            ignored: HashSet::new(),
            queue: VecDeque::new(),
            notified: true,
            list_at: None,
            listed_at: None,
            list_retry: Backoff::default(),
            remembered: HashMap::new(),
        }
    }

    /// What the daemon before this one saw of the files it left waiting: the first
    /// listing gives those still there their first sight and last change.
    pub(crate) fn remember(&mut self, files: HashMap<String, Remembered>) {
        self.remembered = files;
    }

    /// The doorbell rang, or something changed that the next listing is to see.
    pub(crate) fn notify(&mut self) {
        self.notified = true;
    }

    pub(crate) fn queue_is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The next file of the pass, oldest first.
    pub(crate) fn next(&mut self) -> Option<OsString> {
        self.queue.pop_front()
    }

    /// A file that was not taken after all stays first in line.
    pub(crate) fn put_back(&mut self, name: &OsStr) {
        self.queue.push_front(name.to_owned());
    }

    /// A file left incoming/ (taken, or gone): forget it.
    pub(crate) fn forget(&mut self, name: &OsStr) {
        self.tracked.remove(name);
    }

    pub(crate) fn listing_due(&self, now: Instant) -> bool {
        self.ring_listing_wait(now) == Some(Duration::ZERO)
            || self.list_at.is_none_or(|at| now >= at)
    }

    /// After a ring, how long until the listing it asks for may run.
    fn ring_listing_wait(&self, now: Instant) -> Option<Duration> {
        if !self.notified {
            return None;
        }
        let at = self
            .listed_at
            .map_or(now, |listed| listed + RING_LISTING_GAP);
        Some(at.saturating_duration_since(now))
    }

    /// The shortest wait until something is due: the next listing, or one of
    /// `others` (a publish held back, the database's back-off).
    pub(crate) fn wake_in(&self, now: Instant, others: [Option<Duration>; 2]) -> Duration {
        let listing = self
            .list_at
            .map_or(self.rescan, |at| at.saturating_duration_since(now));
        [Some(listing), self.ring_listing_wait(now)]
            .into_iter()
            .chain(others)
            .flatten()
            .min()
            .unwrap_or(self.rescan)
    }

    /// Makes the next listing come at most `wake` from now.
    fn due_in(&mut self, wake: Duration, now: Instant) {
        let at = now + wake;
        self.list_at = Some(self.list_at.map_or(at, |list_at| list_at.min(at)));
    }

    /// Lists incoming/, notes what changed, and queues every file that is ready.
    pub(crate) fn list(&mut self, spool: &Spool, now: Instant) {
        self.notified = false;
        self.listed_at = Some(now);
        let listing = match spool.list_incoming() {
            Ok(listing) => {
                if self.list_retry.failures() > 0 {
                    log::info!(
                        target: LOG_TARGET,
                        "listing {} works again",
                        spool.incoming.display()
                    );
                    self.list_retry.recover();
                }
                listing
            }
            Err(error) => {
                let error = error.to_string();
                if self.list_retry.fail(now, &error) {
                    log::error!(target: LOG_TARGET, "list {}: {error}", spool.incoming.display());
                }
                self.list_at = Some(now + self.list_retry.delay());
                return;
            }
        };
        self.note_ignored(listing.ignored);
        self.track(&listing.files, now);
        self.queue_ready(&listing.files, now);
    }

    /// Queues the files that are ready, oldest first (by modification time, then
    /// name), and sets the next listing for the soonest of the others.
    fn queue_ready(&mut self, files: &[spool::Waiting], now: Instant) {
        let mut list_at = now + self.rescan;
        let mut candidates: Vec<&spool::Waiting> = files
            .iter()
            .filter(|f| !spool::is_temp_name(&f.name))
            .collect();
        candidates.sort_by(|a, b| {
            a.mtime
                .cmp(&b.mtime)
                .then_with(|| a.name.as_encoded_bytes().cmp(b.name.as_encoded_bytes()))
        });
        for file in candidates {
            match self.tracked[&file.name].readiness(&self.rules, now) {
                Readiness::Ready => self.queue.push_back(file.name.clone()),
                Readiness::Wait { wake_in, .. } => list_at = list_at.min(now + wake_in),
            }
        }
        self.list_at = Some(list_at);
    }

    /// Notes new files and changes, and forgets files that are gone.
    fn track(&mut self, files: &[spool::Waiting], now: Instant) {
        let names: HashSet<&OsStr> = files.iter().map(|f| f.name.as_os_str()).collect();
        self.tracked
            .retain(|name, _| names.contains(name.as_os_str()));
        for file in files {
            match self.tracked.get_mut(&file.name) {
                Some(tracked) => {
                    tracked.observe(file.identity.clone(), now);
                }
                None => {
                    let identity = file.identity.clone();
                    // The same file (device and inode) the daemon before saw under
                    // the name: a new file under an old name starts afresh.
                    let before =
                        self.remembered
                            .remove(&names::lossy(&file.name))
                            .filter(|before| {
                                (before.version.dev, before.version.ino)
                                    == (identity.dev, identity.ino)
                            });
                    let tracked = match before {
                        Some(before) => Tracked::remembered(
                            identity,
                            &before.version,
                            before.first_seen,
                            before.changed_at,
                            now,
                        ),
                        None => Tracked::new(identity, now),
                    };
                    self.tracked.insert(file.name.clone(), tracked);
                }
            }
        }
        self.remembered.clear();
    }

    fn note_ignored(&mut self, ignored: Vec<(OsString, &'static str)>) {
        for (name, kind) in &ignored {
            if !self.ignored.contains(name) {
                log::warn!(
                    target: LOG_TARGET,
                    "incoming/{} is {kind}, not a regular file: left in place, never taken",
                    names::escaped(&names::lossy(name))
                );
            }
        }
        self.ignored = ignored.into_iter().map(|(name, _)| name).collect();
    }

    /// A file queued at the listing may have changed or gone since (a long pass
    /// over a backlog): one look in `incoming` before it is taken; why it is left
    /// there for now, if it is.
    pub(crate) fn not_ready(
        &mut self,
        incoming: &Path,
        name: &OsStr,
        now: Instant,
    ) -> Option<Left> {
        let Some(tracked) = self.tracked.get_mut(name) else {
            return Some(Left::Gone);
        };
        match std::fs::symlink_metadata(incoming.join(name)) {
            Ok(meta) if meta.is_file() => {
                if tracked.observe(FileIdentity::of(&meta), now) {
                    let wake = wake_in(tracked.readiness(&self.rules, now));
                    self.due_in(wake, now);
                    return Some(Left::Changed { committed: None });
                }
                None
            }
            // Gone, or replaced by something that is not a regular file: the next
            // listing says what it is.
            _ => {
                self.tracked.remove(name);
                self.notified = true;
                Some(Left::Gone)
            }
        }
    }

    /// A taken file's content was found still arriving: true when it may wait for
    /// the rest (the next listing comes when its wait ends), false when it has
    /// waited the partial timeout and is to be rejected.
    pub(crate) fn still_arriving(&mut self, name: &OsStr, now: Instant) -> bool {
        let tracked = self.tracked.get_mut(name).expect("taken files are tracked");
        if !tracked.still_arriving(&self.rules, now) {
            return false;
        }
        let wake = wake_in(tracked.readiness(&self.rules, now));
        self.due_in(wake, now);
        true
    }

    /// This file failed: it alone waits its back-off (the next listing comes when
    /// that ends). `None` when the file is no longer tracked.
    pub(crate) fn file_failed(
        &mut self,
        name: &OsStr,
        error: String,
        now: Instant,
    ) -> Option<Fault> {
        let tracked = self.tracked.get_mut(name)?;
        let log = tracked.retry.fail(now, &error);
        let next_in = tracked.retry.delay();
        let attempts = tracked.retry.failures();
        self.due_in(next_in, now);
        Some(Fault {
            error,
            database: false,
            attempts,
            next_in,
            log,
            lasting: false,
        })
    }

    /// How many of this file's last failures in a row had the same error.
    pub(crate) fn same_error_tries(&self, name: &OsStr) -> u32 {
        self.tracked.get(name).map_or(0, |t| t.retry.same_error())
    }

    /// The version of the file seen at the listing.
    pub(crate) fn listed_version(&self, name: &OsStr) -> Option<FileIdentity> {
        self.tracked.get(name).map(|t| t.version().clone())
    }

    /// The files waiting (one pass over the tracked files: done when publishing, at
    /// most once a second, not on every step of a backlog), the `kept` first in
    /// line named with why they wait.
    pub(crate) fn waiting(&self, now: Instant, kept: usize) -> WaitingFiles {
        // The `kept` first in the order they are taken (modification time, then
        // name), as `status` names them, chosen before anything is copied.
        let mut files: Vec<(&OsString, &Tracked<FileIdentity>)> = self.tracked.iter().collect();
        let order = |a: &(&OsString, &Tracked<FileIdentity>),
                     b: &(&OsString, &Tracked<FileIdentity>)| {
            let (va, vb) = (a.1.version(), b.1.version());
            (va.mtime_s, va.mtime_ns, a.0.as_encoded_bytes()).cmp(&(
                vb.mtime_s,
                vb.mtime_ns,
                b.0.as_encoded_bytes(),
            ))
        };
        if files.len() > kept && kept > 0 {
            files.select_nth_unstable_by(kept - 1, order);
        }
        files.truncate(kept);
        files.sort_by(order);
        let files = files
            .into_iter()
            .map(|(name, tracked)| Listed {
                name: name.clone(),
                state: if spool::is_temp_name(name) {
                    "temp_name"
                } else {
                    match tracked.readiness(&self.rules, now) {
                        Readiness::Ready => "ready",
                        Readiness::Wait { why, .. } => why.code(),
                    }
                },
                first_seen: tracked.first_seen,
                changed_at: tracked.changed_at(),
                version: tracked.version().clone(),
            })
            .collect();
        WaitingFiles {
            count: self.tracked.len() as u64,
            oldest_seen: self.tracked.values().map(|t| t.first_seen).min(),
            files,
        }
    }
}

/// How long a file has to wait, given its readiness.
fn wake_in(readiness: Readiness) -> Duration {
    match readiness {
        Readiness::Ready => Duration::ZERO,
        Readiness::Wait { wake_in, .. } => wake_in,
    }
}
