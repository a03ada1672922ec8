//! The daemon: one step takes at most one file from incoming/ through ingest to
//! archive/ or rejected/; the loop only waits for the doorbell or a timer, calls the
//! step, and stops when told to.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use crate::clock::now_utc;
use crate::ingest::{self, IngestError, Outcome};
use crate::metrics::Metrics;
use crate::names;
use crate::report;
use crate::service::Notifier;
use crate::spool::{self, FileIdentity, MoveError, Spool, SpoolError};
use crate::store::{Store, StoreError};

/// The longest wait between two tries of a file or of the database.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The first wait after a failed try.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct Config {
    pub spool: PathBuf,
    pub db: PathBuf,
    pub settle: Duration,
    pub partial_timeout: Duration,
    pub rescan: Duration,
    pub file_bytes_max: u64,
    pub limits: crate::batch::Limits,
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Spool(#[from] SpoolError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("watch {path}: {source}")]
    Watch {
        path: PathBuf,
        source: notify::Error,
    },
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A file was taken (ingested, skipped, rejected, or left to retry): call again.
    Worked,
    /// Nothing is ready; something may be in `wake_in` (a file settling, a retry).
    Idle { wake_in: Option<Duration> },
}

/// What the daemon remembers of a file in incoming/.
#[derive(Debug, Clone)]
struct Tracked {
    size: u64,
    mtime: SystemTime,
    /// When spoolite last saw its size or modification time change.
    changed_at: Instant,
    /// Its content was found cut short at this version: wait for a change or for
    /// the partial timeout.
    partial: bool,
    retry: Backoff,
}

/// Bounded exponential back-off with a log line at most once per interval.
#[derive(Debug, Clone, Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    logged_at: Option<Instant>,
}

impl Backoff {
    fn delay(&self) -> Duration {
        let shift = self.failures.saturating_sub(1).min(16);
        BACKOFF_FIRST.saturating_mul(1 << shift).min(BACKOFF_MAX)
    }

    /// Records a failure; returns whether it should be logged now.
    fn fail(&mut self, now: Instant) -> bool {
        self.failures += 1;
        self.retry_at = Some(now + self.delay());
        let log = self
            .logged_at
            .is_none_or(|at| now.duration_since(at) >= BACKOFF_MAX);
        if log {
            self.logged_at = Some(now);
        }
        log
    }

    fn waiting(&self, now: Instant) -> Option<Duration> {
        self.retry_at
            .and_then(|at| at.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// Clears the back-off; returns how many failures came before.
    fn recover(&mut self) -> u32 {
        std::mem::take(self).failures
    }
}

pub struct Daemon {
    spool: Spool,
    store: Store,
    config: Config,
    stop: Arc<AtomicBool>,
    tracked: HashMap<OsString, Tracked>,
    /// Entries of incoming/ that are never taken, logged once each.
    ignored: HashSet<OsString>,
    /// Faults of the database, which hold every file back.
    store_retry: Backoff,
    /// The last fault listing incoming/ (logged once per interval).
    list_retry: Backoff,
    metrics: Metrics,
    /// Something was committed since the last checkpoint.
    wal_dirty: bool,
}

impl Daemon {
    pub fn new(spool: Spool, store: Store, config: Config, stop: Arc<AtomicBool>) -> Daemon {
        Daemon {
            spool,
            store,
            config,
            stop,
            tracked: HashMap::new(),
            ignored: HashSet::new(),
            store_retry: Backoff::default(),
            list_retry: Backoff::default(),
            metrics: Metrics::default(),
            wal_dirty: false,
        }
    }

    /// Takes at most one ready file, oldest first.
    pub fn step(&mut self) -> Step {
        let now = Instant::now();
        if let Some(wait) = self.store_retry.waiting(now) {
            return Step::Idle {
                wake_in: Some(wait),
            };
        }
        let listing = match self.spool.list_incoming() {
            Ok(listing) => {
                if self.list_retry.failures > 0 {
                    log::info!("listing {} works again", self.spool.incoming.display());
                    self.list_retry.recover();
                }
                listing
            }
            Err(error) => {
                if self.list_retry.fail(now) {
                    log::error!("list {}: {error}", self.spool.incoming.display());
                }
                return Step::Idle {
                    wake_in: self.list_retry.waiting(now),
                };
            }
        };
        self.note_ignored(&listing.ignored);
        self.observe_waiting(&listing.files);
        let mut files: Vec<spool::Waiting> = listing
            .files
            .into_iter()
            .filter(|f| !spool::is_temp_name(&f.name))
            .collect();
        self.track(&files, now);
        files.sort_by(|a, b| {
            a.mtime
                .cmp(&b.mtime)
                .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
        });

        let mut wake_in: Option<Duration> = None;
        let mut wake = |d: Duration| wake_in = Some(wake_in.map_or(d, |w| w.min(d)));
        for file in &files {
            let tracked = &self.tracked[&file.name];
            let still = now.duration_since(tracked.changed_at);
            if let Some(left) = self
                .config
                .settle
                .checked_sub(still)
                .filter(|d| !d.is_zero())
            {
                wake(left);
                continue;
            }
            if tracked.partial
                && let Some(left) = self
                    .config
                    .partial_timeout
                    .checked_sub(still)
                    .filter(|d| !d.is_zero())
            {
                wake(left);
                continue;
            }
            if let Some(left) = tracked.retry.waiting(now) {
                wake(left);
                continue;
            }
            self.take(&file.name, &file.identity);
            return Step::Worked;
        }
        self.idle();
        Step::Idle { wake_in }
    }

    /// With nothing ready: checkpoint what was committed, publish the metrics.
    fn idle(&mut self) {
        if self.wal_dirty {
            match self.store.checkpoint() {
                Ok(complete) => {
                    self.wal_dirty = !complete;
                    if !complete {
                        log::debug!("checkpoint held back by a reader; trying again when idle");
                    }
                }
                Err(error) => log::warn!("checkpoint: {error}"),
            }
        }
        self.publish_metrics();
    }

    fn observe_waiting(&mut self, files: &[spool::Waiting]) {
        let now = SystemTime::now();
        self.metrics.files_waiting = files.len() as u64;
        self.metrics.oldest_waiting_age_s = files
            .iter()
            .map(|f| {
                now.duration_since(f.mtime)
                    .unwrap_or_default()
                    .as_secs_f64()
            })
            .fold(0.0, f64::max);
    }

    fn observe_outcome(&mut self, outcome: &Outcome, elapsed: Duration) {
        self.metrics.observe_duration(elapsed);
        match outcome {
            Outcome::Processed { counts, .. } => {
                self.metrics.files_processed += 1;
                self.metrics.events.add(counts);
            }
            Outcome::SkippedDuplicate { .. } => self.metrics.files_skipped += 1,
            Outcome::Rejected { .. } => self.metrics.files_rejected += 1,
        }
        if !matches!(outcome, Outcome::Rejected { .. }) {
            let unix = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            self.metrics.last_success_unix_s = Some(unix.as_secs_f64());
        }
        self.metrics.files_waiting = self.metrics.files_waiting.saturating_sub(1);
        self.publish_metrics();
    }

    fn publish_metrics(&mut self) {
        if let Some(path) = &self.config.metrics_file
            && let Err(error) = self.metrics.write(path)
        {
            log::warn!("write metrics {}: {error}", path.display());
        }
    }

    fn note_ignored(&mut self, ignored: &[OsString]) {
        for name in ignored {
            if self.ignored.insert(name.clone()) {
                let name = names::escaped(&names::lossy(name));
                log::warn!(
                    "incoming/{name} is not a regular file (folder, link, FIFO, socket or device): \
                     left in place, never taken"
                );
            }
        }
        self.ignored.retain(|name| ignored.contains(name));
    }

    /// Notes new files and changes, and forgets files that are gone.
    fn track(&mut self, files: &[spool::Waiting], now: Instant) {
        let names: HashSet<&OsStr> = files.iter().map(|f| f.name.as_os_str()).collect();
        self.tracked
            .retain(|name, _| names.contains(name.as_os_str()));
        for file in files {
            let fresh = Tracked {
                size: file.size,
                mtime: file.mtime,
                changed_at: now,
                partial: false,
                retry: Backoff::default(),
            };
            let tracked = self
                .tracked
                .entry(file.name.clone())
                .or_insert_with(|| fresh.clone());
            if tracked.size != file.size || tracked.mtime != file.mtime {
                *tracked = Tracked {
                    retry: tracked.retry.clone(),
                    ..fresh
                };
            }
        }
    }

    /// Ingests one file and moves it, or leaves it for later. `listed` is the file
    /// as the listing saw it: it is moved only if it is still that file.
    fn take(&mut self, raw_name: &OsStr, listed: &FileIdentity) {
        let started = Instant::now();
        let path = self.spool.incoming.join(raw_name);
        let recorded = names::lossy(raw_name);
        let name = &names::escaped(&recorded);
        let options = ingest::Options {
            file_bytes_max: self.config.file_bytes_max,
            limits: self.config.limits,
            progress: None,
            dry_run: false,
            stop: &self.stop,
        };
        let result = ingest::ingest_file(&mut self.store, &path, options);
        let now = Instant::now();
        if !matches!(result, Err(IngestError::Store(_))) {
            let failures = self.store_retry.recover();
            if failures > 0 {
                log::info!("database usable again after {failures} failed attempts");
            }
        }
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(IngestError::Stopped) => {
                log::info!("stopping: {name} rolled back and left in incoming/");
                return;
            }
            Err(IngestError::Store(error)) => {
                if self.store_retry.fail(now) {
                    let attempts = self.store_retry.failures;
                    let wait = self.store_retry.delay();
                    log::warn!(
                        "{name} waits in incoming/: {error} ({attempts} failed attempts, next in {wait:?})"
                    );
                }
                return;
            }
            Err(error) => {
                self.retry_later(raw_name, &error.to_string(), now);
                return;
            }
        };
        let tracked = self
            .tracked
            .get_mut(raw_name)
            .expect("taken files are tracked");
        if let Outcome::Rejected { rejection, .. } = &outcome {
            let still = now.duration_since(tracked.changed_at);
            if rejection.reason.may_still_arrive() && still < self.config.partial_timeout {
                if !tracked.partial {
                    log::info!(
                        "{name} looks incomplete ({}); waiting for the rest",
                        rejection.detail
                    );
                }
                tracked.partial = true;
                return;
            }
        }
        let moved = match &outcome {
            Outcome::Rejected { .. } => {
                let rejected_at = now_utc();
                let reason = |_: &str| report::reason_json(&recorded, &outcome, &rejected_at);
                self.spool
                    .reject(raw_name, listed, outcome.digest(), reason)
            }
            _ => self.spool.archive(raw_name, listed),
        };
        if matches!(outcome, Outcome::Processed { .. }) {
            self.wal_dirty = true;
        }
        let millis = started.elapsed().as_millis();
        let line = report::outcome_line(name, &outcome);
        match moved {
            Ok(final_name) if final_name != recorded => {
                let final_name = names::escaped(&final_name);
                log::info!("{line} {millis}ms (kept as {final_name})")
            }
            Ok(_) if matches!(outcome, Outcome::Rejected { .. }) => log::warn!("{line} {millis}ms"),
            Ok(_) => log::info!("{line} {millis}ms"),
            Err(MoveError::Changed) => {
                // Its bytes may not be the ones just read: taken again from the start.
                log::info!("{line} {millis}ms");
                log::info!(
                    "{name} changed while it was ingested: left in incoming/ to be taken again"
                );
                return;
            }
            Err(MoveError::Io(error)) => {
                log::info!("{line} {millis}ms");
                self.retry_later(raw_name, &format!("move it out of incoming/: {error}"), now);
                return;
            }
        }
        self.observe_outcome(&outcome, started.elapsed());
        if let Outcome::Processed {
            resent_batch_id: Some(id),
            ..
        } = &outcome
        {
            log::warn!(
                "{name}: batch_id {id:?} was ingested before with other bytes (a re-sent batch)"
            );
        }
        self.tracked.remove(raw_name);
    }

    fn retry_later(&mut self, raw_name: &OsStr, why: &str, now: Instant) {
        let Some(tracked) = self.tracked.get_mut(raw_name) else {
            return;
        };
        let name = names::escaped(&names::lossy(raw_name));
        if tracked.retry.fail(now) {
            let attempts = tracked.retry.failures;
            let wait = tracked.retry.delay();
            log::warn!(
                "{name} waits in incoming/: {why} ({attempts} failed attempts, next in {wait:?})"
            );
        }
    }
}

/// Runs the daemon until `stop` is set (and `doorbell` rung). Start-up problems are
/// returned; problems while running are logged and retried.
pub fn run(
    config: Config,
    stop: Arc<AtomicBool>,
    doorbell: Sender<()>,
    wake: Receiver<()>,
) -> Result<(), DaemonError> {
    let spool = Spool::create(&config.spool)?;
    let _lock = spool.lock()?;
    match spool.remove_stale_temp_files() {
        Ok(removed) if !removed.is_empty() => {
            log::info!("removed temporary files a crash left in rejected/: {removed:?}");
        }
        Ok(_) => {}
        Err(error) => log::warn!("clean rejected/ of temporary files: {error}"),
    }
    let store = Store::open(&config.db)?;
    // The watch goes in before the first listing, so nothing dropped between the
    // two is missed.
    let _watcher =
        crate::watch::watch(&spool.incoming, doorbell).map_err(|source| DaemonError::Watch {
            path: spool.incoming.clone(),
            source,
        })?;
    log::info!(
        "serving spool {} into {} (settle {:?}, partial timeout {:?}, rescan {:?})",
        config.spool.display(),
        config.db.display(),
        config.settle,
        config.partial_timeout,
        config.rescan
    );
    let mut notifier = Notifier::from_env();
    let longest_sleep = notifier
        .watchdog_every()
        .map_or(config.rescan, |w| w.min(config.rescan));
    let mut daemon = Daemon::new(spool, store, config, stop.clone());
    notifier.ready();
    while !stop.load(Ordering::SeqCst) {
        let step = daemon.step();
        notifier.ping_if_due();
        if let Step::Idle { wake_in } = step {
            let wait = wake_in.map_or(longest_sleep, |w| w.min(longest_sleep));
            let _ = wake.recv_timeout(wait);
        }
    }
    notifier.stopping();
    log::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_logs_once_per_interval() {
        let mut backoff = Backoff::default();
        let now = Instant::now();
        assert!(backoff.fail(now));
        assert_eq!(backoff.delay(), Duration::from_millis(250));
        assert!(!backoff.fail(now));
        assert_eq!(backoff.delay(), Duration::from_millis(500));
        for _ in 0..20 {
            backoff.fail(now);
        }
        assert_eq!(backoff.delay(), BACKOFF_MAX);
        assert!(backoff.fail(now + BACKOFF_MAX));
        assert_eq!(backoff.recover(), 23);
        assert_eq!(backoff.waiting(now), None);
    }
}
