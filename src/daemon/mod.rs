//! The daemon: one step takes at most one file from incoming/ through ingest to
//! archive/ or rejected/ and says what happened; the loop only waits for the doorbell
//! or a timer, calls the step, logs its report, and stops when told to.
//!
//! A listing of incoming/ starts a pass: every file ready then is queued, oldest
//! first, and taken one step at a time before the folder is listed again, so a
//! backlog costs the same per file whatever its size. The folder is listed again
//! only when the doorbell rang, a timer (settle, partial timeout, back-off, rescan)
//! came due, or at start.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::batch::Limits;
use crate::clock::{Clock, SystemClock, format_millis};
use crate::ingest::{self, IngestError, Outcome, Progress};
use crate::names;
use crate::readiness::{Backoff, Readiness, Rules, Tracked};
use crate::service::Notifier;
use crate::spool::{self, FileIdentity, MoveError, Spool, SpoolError};
use crate::store::{CommitStatus, FaultClass, InDoubt, Store, StoreError};

mod database;
mod publish;
mod report;

use database::Database;
use publish::{Publisher, WaitingFiles};
pub use report::{Fault, Left, Report, log_report};

/// Every part of the daemon logs under this target, the module's own, so that its
/// lines read as they did when it was one file.
const LOG_TARGET: &str = module_path!();

/// Tries of one file that the database refuses for something in the file (a value
/// too big, say) before the file is rejected.
const IN_FILE_TRIES_MAX: u32 = 3;
/// Listings caused by the doorbell are at least this far apart, so that a burst of
/// uploads (each ringing) costs a few listings, not one per file; a lone file is
/// listed at once.
const RING_LISTING_GAP: Duration = Duration::from_millis(50);
/// A file that takes longer than this is logged with its progress, this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Config {
    pub spool: PathBuf,
    pub db: PathBuf,
    pub settle: Duration,
    pub partial_timeout: Duration,
    pub rescan: Duration,
    pub file_bytes_max: u64,
    pub limits: Limits,
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

pub struct Daemon {
    spool: Spool,
    config: Config,
    rules: Rules,
    stop: Arc<AtomicBool>,
    clock: Box<dyn Clock + Send>,
    database: Database,
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
    publisher: Publisher,
    /// The file (by name) whose batch's COMMIT went unacknowledged, and what that
    /// batch came to: its next try asks the server which commit the inbox holds.
    in_doubt: Option<(OsString, InDoubt)>,
}

impl Daemon {
    pub fn new(
        spool: Spool,
        store: Option<Store>,
        config: Config,
        stop: Arc<AtomicBool>,
        clock: Box<dyn Clock + Send>,
    ) -> Daemon {
        let rules = Rules {
            settle: config.settle,
            partial_timeout: config.partial_timeout,
        };
        let publisher = Publisher::new(
            config.metrics_file.clone(),
            spool.root.clone(),
            clock.wall(),
        );
        Daemon {
            spool,
            config,
            rules,
            stop,
            clock,
            database: Database::new(store),
            tracked: HashMap::new(),
            ignored: HashSet::new(),
            queue: VecDeque::new(),
            notified: true,
            list_at: None,
            listed_at: None,
            list_retry: Backoff::default(),
            publisher,
            in_doubt: None,
        }
    }

    /// The doorbell rang: something in incoming/ may have appeared or changed.
    pub fn notify(&mut self) {
        self.notified = true;
    }

    /// Takes at most one file, oldest first, and says what happened.
    pub fn step(&mut self, now: Instant) -> Report {
        let report = self.work(now);
        self.record(&report, now);
        report
    }

    fn work(&mut self, now: Instant) -> Report {
        if self.queue.is_empty() && self.listing_due(now) {
            self.list(now);
            if self.queue.is_empty()
                && let Some(report) = self.probe(now)
            {
                return report;
            }
        }
        let database_wait = self.database.waiting(now);
        if self.queue.is_empty() || database_wait.is_some() {
            self.idle(now);
            return Report::Idle {
                wake_in: Some(self.soonest(now, database_wait)),
            };
        }
        if !self.database.is_open()
            && let Some(report) = self.open_store(now)
        {
            return report;
        }
        let name = self.queue.pop_front().expect("the queue is not empty");
        match self.not_ready(&name, now) {
            None => self.take(name, now),
            Some(report) => report,
        }
    }

    /// A file queued at the listing may have changed or gone since (a long pass
    /// over a backlog): one look before it is taken; what to report if it is not
    /// to be taken now.
    fn not_ready(&mut self, name: &OsStr, now: Instant) -> Option<Report> {
        let recorded = || names::lossy(name);
        let Some(tracked) = self.tracked.get_mut(name) else {
            return Some(Report::Waiting {
                name: recorded(),
                why: Left::Gone,
            });
        };
        match std::fs::symlink_metadata(self.spool.incoming.join(name)) {
            Ok(meta) if meta.is_file() => {
                if tracked.observe(FileIdentity::of(&meta), now) {
                    let wake = wake_in(tracked.readiness(&self.rules, now));
                    self.due_in(wake, now);
                    return Some(Report::Waiting {
                        name: recorded(),
                        why: Left::Changed { committed: None },
                    });
                }
                None
            }
            // Gone, or replaced by something that is not a regular file: the next
            // listing says what it is.
            _ => {
                self.tracked.remove(name);
                self.notified = true;
                Some(Report::Waiting {
                    name: recorded(),
                    why: Left::Gone,
                })
            }
        }
    }

    /// Makes the next listing come at most `wake` from now.
    fn due_in(&mut self, wake: Duration, now: Instant) {
        let at = now + wake;
        self.list_at = Some(self.list_at.map_or(at, |list_at| list_at.min(at)));
    }

    fn listing_due(&self, now: Instant) -> bool {
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

    /// The shortest wait until something is due: the next listing, a publish of the
    /// metrics held back by the once-a-second limit, `extra`.
    fn soonest(&self, now: Instant, extra: Option<Duration>) -> Duration {
        let listing = self
            .list_at
            .map_or(self.config.rescan, |at| at.saturating_duration_since(now));
        let publish = self.publisher.wait(now);
        [Some(listing), self.ring_listing_wait(now), publish, extra]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.config.rescan)
    }

    /// Lists incoming/, notes what changed, and queues every file that is ready.
    fn list(&mut self, now: Instant) {
        self.notified = false;
        self.listed_at = Some(now);
        self.publisher.listed();
        let mut list_at = now + self.config.rescan;
        let listing = match self.spool.list_incoming() {
            Ok(listing) => {
                if self.list_retry.failures() > 0 {
                    log::info!("listing {} works again", self.spool.incoming.display());
                    self.list_retry.recover();
                }
                listing
            }
            Err(error) => {
                let error = error.to_string();
                if self.list_retry.fail(now, &error) {
                    log::error!("list {}: {error}", self.spool.incoming.display());
                }
                self.list_at = Some(now + self.list_retry.delay());
                return;
            }
        };
        self.note_ignored(listing.ignored);
        self.track(&listing.files, now);
        let mut candidates: Vec<&spool::Waiting> = listing
            .files
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
                    self.tracked
                        .insert(file.name.clone(), Tracked::new(file.identity.clone(), now));
                }
            }
        }
    }

    fn note_ignored(&mut self, ignored: Vec<OsString>) {
        for name in &ignored {
            if !self.ignored.contains(name) {
                log::warn!(
                    "incoming/{} is not a regular file (folder, link, FIFO, socket or device): \
                     left in place, never taken",
                    names::escaped(&names::lossy(name))
                );
            }
        }
        self.ignored = ignored.into_iter().collect();
    }

    /// Opens the database after a fault (or when it could not be opened at start).
    /// Returns what to report when it fails.
    fn open_store(&mut self, now: Instant) -> Option<Report> {
        match Store::open(&self.config.db) {
            Ok(store) => {
                self.database.opened(store);
                None
            }
            Err(error) => Some(self.database_fault(None, String::new(), &error, now)),
        }
    }

    /// PostgreSQL, with nothing to ingest: a look at the server at each listing
    /// (twice a minute when idle, with the default rescan), so that `status` and
    /// the metrics tell an outage, and its end, without a file waiting. Not while
    /// the database waits out a back-off. SQLite: nothing.
    fn probe(&mut self, now: Instant) -> Option<Report> {
        if !crate::store::postgres::is_uri(&self.config.db) || self.database.waiting(now).is_some()
        {
            return None;
        }
        if !self.database.is_open()
            && let Some(report) = self.open_store(now)
        {
            return Some(report);
        }
        match self.database.store_mut()?.probe() {
            Ok(()) => {
                if self.database.recovered() {
                    self.publisher.changed();
                }
                None
            }
            Err(error) => Some(self.database_fault(None, String::new(), &error, now)),
        }
    }

    /// Ingests one file and moves it, or leaves it for later.
    fn take(&mut self, name: OsString, now: Instant) -> Report {
        let recorded = names::lossy(&name);
        let started = Instant::now();
        let path = self.spool.incoming.join(&name);
        let progress = progress_logger(recorded.clone(), started);
        let options = ingest::Options {
            file_bytes_max: self.config.file_bytes_max,
            limits: self.config.limits,
            progress: Some(&progress),
            dry_run: false,
            stop: &self.stop,
            clock: &*self.clock,
        };
        let store = self
            .database
            .store_mut()
            .expect("the store is open before a take");
        let ingested = match ingest::ingest(store, &path, options) {
            Ok(ingested) => ingested,
            Err(IngestError::Stopped) => return Report::Stopped { name: recorded },
            Err(IngestError::Changed { .. }) => return self.changed(recorded),
            Err(IngestError::Store(error)) => {
                if let StoreError::CommitInDoubt { batch, .. } = &error {
                    self.in_doubt = Some((name.clone(), (**batch).clone()));
                }
                return self.store_fault(&name, recorded, error, now);
            }
            Err(IngestError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                self.tracked.remove(&name);
                return Report::Waiting {
                    name: recorded,
                    why: Left::Gone,
                };
            }
            Err(error @ IngestError::Read { .. }) => {
                return self.file_fault(&name, recorded, error.to_string(), now);
            }
        };
        let mut outcome = match self.settle_in_doubt(&name, &recorded, ingested.outcome, now) {
            Ok(outcome) => outcome,
            Err(report) => return *report,
        };
        if matches!(
            outcome,
            Outcome::Processed { .. } | Outcome::SkippedDuplicate { .. }
        ) {
            self.database.recovered();
        }
        if let Outcome::Rejected { rejection, .. } = &mut outcome
            && rejection.reason.may_still_arrive()
        {
            let tracked = self
                .tracked
                .get_mut(&name)
                .expect("taken files are tracked");
            if tracked.still_arriving(&self.rules, now) {
                let wake = wake_in(tracked.readiness(&self.rules, now));
                self.due_in(wake, now);
                return Report::Waiting {
                    name: recorded,
                    why: Left::StillArriving {
                        detail: rejection.detail.clone(),
                    },
                };
            }
            let cut = rejection
                .detail
                .strip_suffix("; it may still be arriving")
                .unwrap_or(&rejection.detail);
            rejection.detail = format!(
                "{cut}, and it has not changed for {:?} (--partial-timeout): send it again whole",
                self.config.partial_timeout
            );
        }
        let read = FileIdentity::of(&ingested.opened);
        self.finish(&name, recorded, outcome, &read, started, now)
    }

    /// After a COMMIT of this file's batch went unacknowledged, the try that finds
    /// its digest in the inbox asks the server whether that commit was the one
    /// (the transaction's id says it): then the file is processed, counted once
    /// with the counts of that commit, not a duplicate of itself. Any other
    /// outcome stands as it is. `Err`: what to report when the server cannot say yet.
    fn settle_in_doubt(
        &mut self,
        name: &OsStr,
        recorded: &str,
        outcome: Outcome,
        now: Instant,
    ) -> Result<Outcome, Box<Report>> {
        let Some((doubted, batch)) = self.in_doubt.take() else {
            return Ok(outcome);
        };
        let same = doubted == name && outcome.digest() == Some(batch.digest.as_str());
        if !same {
            // Another file, or this one with other bytes now: the doubt stays with
            // the file it belongs to.
            if doubted != name {
                self.in_doubt = Some((doubted, batch));
            }
            return Ok(outcome);
        }
        if let Outcome::Processed { .. } = outcome {
            log::info!(
                "{}: the earlier COMMIT of its batch, unacknowledged when the connection was \
                 lost, had not happened; this try committed it",
                names::escaped(recorded)
            );
            return Ok(outcome);
        }
        let store = self
            .database
            .store_mut()
            .expect("the store is open after a take");
        let status = match store.commit_status(&batch.xid) {
            Ok(status) => status,
            Err(error) => {
                self.in_doubt = Some((doubted, batch));
                return Err(Box::new(self.store_fault(
                    name,
                    recorded.to_owned(),
                    error,
                    now,
                )));
            }
        };
        let shown = names::escaped(recorded);
        match status {
            CommitStatus::Committed => {
                log::info!(
                    "{shown}: the COMMIT of its batch was carried out though the connection \
                     was lost before it was acknowledged (the server says so): processed once"
                );
                let finished = batch.finished;
                Ok(Outcome::Processed {
                    digest: batch.digest,
                    counts: finished.counts,
                    resent_batch_id: batch.batch_id.filter(|_| finished.resent),
                    reasons: finished.reasons,
                })
            }
            CommitStatus::Aborted => {
                log::info!(
                    "{shown}: the earlier COMMIT of its batch, unacknowledged when the connection \
                     was lost, did not happen; another writer committed the same bytes"
                );
                Ok(outcome)
            }
            CommitStatus::InProgress => {
                self.in_doubt = Some((doubted, batch));
                let why = "the server is still finishing the COMMIT sent before the connection \
                           was lost"
                    .to_owned();
                Err(Box::new(self.file_fault(
                    name,
                    recorded.to_owned(),
                    why,
                    now,
                )))
            }
            CommitStatus::Unknown => {
                log::warn!(
                    "{shown}: the server no longer knows whether the unacknowledged COMMIT of \
                     its batch was the one the inbox holds; counted as a duplicate"
                );
                Ok(outcome)
            }
        }
    }

    /// Moves a taken file to archive/ or rejected/.
    fn finish(
        &mut self,
        name: &OsStr,
        recorded: String,
        outcome: Outcome,
        read: &FileIdentity,
        started: Instant,
        now: Instant,
    ) -> Report {
        let moved = match &outcome {
            Outcome::Rejected { .. } => {
                let rejected_at = format_millis(self.clock.wall());
                let reason =
                    |_: &str| crate::report::reason_json(&recorded, &outcome, &rejected_at);
                self.spool.reject(name, read, outcome.digest(), reason)
            }
            _ => self.spool.archive(name, read),
        };
        let final_name = match moved {
            Ok(final_name) => final_name,
            Err(MoveError::Changed) => {
                let committed = matches!(outcome, Outcome::Processed { .. });
                if committed {
                    self.database.committed();
                }
                let mut report = self.changed(recorded);
                if let Report::Waiting {
                    why: Left::Changed { committed: c },
                    ..
                } = &mut report
                {
                    *c = committed.then(|| Box::new(outcome));
                }
                return report;
            }
            Err(MoveError::Io(error)) => {
                let why = format!("move it out of incoming/: {error}");
                return self.file_fault(name, recorded, why, now);
            }
        };
        if matches!(outcome, Outcome::Processed { .. }) {
            self.database.committed();
        }
        self.tracked.remove(name);
        Report::Took {
            name: recorded,
            outcome,
            final_name,
            elapsed: started.elapsed(),
        }
    }

    /// The file changed while it was read: leave it, and look again soon.
    fn changed(&mut self, recorded: String) -> Report {
        self.notified = true;
        Report::Waiting {
            name: recorded,
            why: Left::Changed { committed: None },
        }
    }

    fn store_fault(
        &mut self,
        name: &OsStr,
        recorded: String,
        error: StoreError,
        now: Instant,
    ) -> Report {
        match error.class() {
            FaultClass::Database { .. } => self.database_fault(Some(name), recorded, &error, now),
            FaultClass::ThisFile => self.file_fault(name, recorded, error.to_string(), now),
            FaultClass::InFile => {
                let report = self.file_fault(name, recorded.clone(), error.to_string(), now);
                let tries = self.tracked.get(name).map_or(0, |t| t.retry.same_error());
                if tries < IN_FILE_TRIES_MAX {
                    return report;
                }
                let rejection = ingest::refused_by_database(&error, tries);
                let outcome = Outcome::Rejected {
                    digest: None,
                    rejection,
                };
                // The version listed: a file changed since is not rejected unread.
                let Some(listed) = self.tracked.get(name).map(|t| t.version().clone()) else {
                    return report;
                };
                self.finish(name, recorded, outcome, &listed, Instant::now(), now)
            }
        }
    }

    /// The database failed: every file waits one back-off, and this one (`name`,
    /// when a file was in hand) stays first in line.
    fn database_fault(
        &mut self,
        name: Option<&OsStr>,
        recorded: String,
        error: &StoreError,
        now: Instant,
    ) -> Report {
        let fault = self.database.failed(error, self.clock.wall(), now);
        if let Some(name) = name {
            self.queue.push_front(name.to_owned());
        }
        Report::RetryLater {
            name: recorded,
            fault,
        }
    }

    /// This file failed: it alone waits its back-off; later files keep flowing.
    fn file_fault(
        &mut self,
        name: &OsStr,
        recorded: String,
        error: String,
        now: Instant,
    ) -> Report {
        let Some(tracked) = self.tracked.get_mut(name) else {
            return Report::Idle { wake_in: None };
        };
        let log = tracked.retry.fail(now, &error);
        let next_in = tracked.retry.delay();
        let attempts = tracked.retry.failures();
        self.due_in(next_in, now);
        Report::RetryLater {
            name: recorded,
            fault: Fault {
                error,
                database: false,
                attempts,
                next_in,
                log,
            },
        }
    }

    /// With nothing ready: checkpoint what was committed, publish the figures.
    fn idle(&mut self, now: Instant) {
        self.database.checkpoint();
        self.publish(now);
    }

    /// Updates the figures from what a step did.
    fn record(&mut self, report: &Report, now: Instant) {
        match report {
            Report::Took {
                outcome, elapsed, ..
            } => self.publisher.taken(outcome, *elapsed, self.clock.wall()),
            // A batch committed before its file changed counts like any other.
            Report::Waiting {
                why: Left::Changed {
                    committed: Some(outcome),
                },
                ..
            } => self
                .publisher
                .taken(outcome, Duration::ZERO, self.clock.wall()),
            _ => {}
        }
        if !matches!(report, Report::Idle { .. }) {
            self.publisher.changed();
            self.publish(now);
        }
    }

    /// Writes the metrics and state files when a figure changed, at most once a
    /// second.
    fn publish(&mut self, now: Instant) {
        if !self.publisher.due(now) {
            return;
        }
        let waiting = WaitingFiles {
            count: self.tracked.len() as u64,
            oldest_seen: self.tracked.values().map(|t| t.first_seen).min(),
        };
        let outage = self.database.outage();
        self.publisher.publish(waiting, outage, now, &*self.clock);
    }
}

/// When to log the progress of a long file: once it has taken `PROGRESS_EVERY`,
/// and every `PROGRESS_EVERY` after.
#[derive(Debug, Clone, Copy)]
struct ProgressLog {
    last: Instant,
}

impl ProgressLog {
    fn due(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last) < PROGRESS_EVERY {
            return false;
        }
        self.last = now;
        true
    }
}

/// Logs the progress of a file that takes longer than `PROGRESS_EVERY`, that often.
fn progress_logger(name: String, started: Instant) -> impl Fn(Progress) {
    let log = std::cell::Cell::new(ProgressLog { last: started });
    move |progress: Progress| {
        let now = Instant::now();
        let mut due = log.get();
        if !due.due(now) {
            return;
        }
        log.set(due);
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        log::info!(
            "{}: {} events so far, {:.0} of {:.0} MiB read, {:.0} s",
            names::escaped(&name),
            progress.events,
            mib(progress.bytes_done),
            mib(progress.bytes_total),
            now.duration_since(started).as_secs_f64()
        );
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
    // A database that cannot be used for a passing reason (read-only, locked, disk
    // full) does not stop the daemon: it serves and tries again with back-off.
    let store = match Store::open(&config.db) {
        Ok(store) => Some(store),
        Err(error) if error.is_fatal_at_start() => return Err(error.into()),
        Err(error) => {
            log::warn!("{error}; serving the spool and trying again");
            None
        }
    };
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
        crate::store::db_name(&config.db),
        config.settle,
        config.partial_timeout,
        config.rescan
    );
    let mut notifier = Notifier::from_env();
    let longest_sleep = notifier
        .watchdog_every()
        .map_or(config.rescan, |w| w.min(config.rescan));
    let clock = Box::new(SystemClock);
    let mut daemon = Daemon::new(spool, store, config, stop.clone(), clock);
    notifier.ready();
    while !stop.load(Ordering::SeqCst) {
        if wake.try_recv().is_ok() {
            daemon.notify();
        }
        let report = daemon.step(Instant::now());
        log_report(&report);
        notifier.ping_if_due();
        if let Report::Idle { wake_in } = report {
            let wait = wake_in.map_or(longest_sleep, |w| w.min(longest_sleep));
            if wake.recv_timeout(wait).is_ok() {
                daemon.notify();
            }
        }
    }
    notifier.stopping();
    log::info!("stopped");
    Ok(())
}

/// How long a file has to wait, given its readiness.
fn wake_in(readiness: Readiness) -> Duration {
    match readiness {
        Readiness::Ready => Duration::ZERO,
        Readiness::Wait { wake_in, .. } => wake_in,
    }
}

#[cfg(test)]
mod tests;
