//! The daemon: one step takes at most one file from incoming/ through ingest to
//! archive/ or rejected/ and says what happened; the loop only waits for the doorbell
//! or a timer, calls the step, logs its report, and stops when told to.
//!
//! A listing of incoming/ starts a pass: every file ready then is queued, oldest
//! first, and taken one step at a time before the folder is listed again, so a
//! backlog costs the same per file whatever its size. The folder is listed again
//! only when the doorbell rang, a timer (settle, partial timeout, back-off, rescan)
//! came due, or at start.
//!
//! The daemon reads every instant from the step's `now` and from the `Clock` it is
//! given, which it hands to `ingest` for the time written into the inbox, so that
//! its tests choose them all. Its parts: `schedule` (the tracked files, the queue,
//! the timers and a file's retries), `take` (one file through `ingest` and out of
//! incoming/), `archived` (the files archived within `--partial-timeout`, watched
//! for a writer that wrote on), `database` (the store, its back-off and checkpoints), `in_doubt`
//! (PostgreSQL's unacknowledged commits), `publish` (the metrics and state files)
//! and `report` (what a step did, and its log lines).

mod archived;
mod database;
mod in_doubt;
mod publish;
mod report;
mod retention;
mod schedule;
mod take;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::batch::Limits;
use crate::clock::{Clock, SystemClock};
use crate::names;
use crate::readiness::Rules;
use crate::service::Notifier;
use crate::spool::{Spool, SpoolError};
use crate::state::DaemonState;
use crate::store::{Db, Store, StoreError};
use crate::units::duration_text;

use archived::Archived;
use database::Database;
use in_doubt::CommitInDoubt;
use publish::Publisher;

use crate::sizes::{self, ArchiveTally, SiteSizes};
pub(crate) use report::{Left, Report, log_report};
use retention::Retention;
use schedule::Schedule;

/// Every part of the daemon logs under this target, the module's own, so that its
/// lines read as they did when it was one file.
const LOG_TARGET: &str = module_path!();

/// How often the flights' data quality is counted when no batch came.
const QUALITY_COUNT_EVERY: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
pub struct Config {
    pub spool: PathBuf,
    pub db: Db,
    pub settle: Duration,
    pub partial_timeout: Duration,
    pub rescan: Duration,
    pub file_bytes_max: u64,
    pub limits: Limits,
    pub metrics_file: Option<PathBuf>,
    /// `--archive-keep`: how long a file stays in archive/ (`None`: for ever).
    pub archive_keep: Option<Duration>,
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

pub(crate) struct Daemon {
    spool: Spool,
    config: Config,
    stop: Arc<AtomicBool>,
    clock: Box<dyn Clock + Send>,
    schedule: Schedule,
    archived: Archived,
    retention: Retention,
    database: Database,
    in_doubt: CommitInDoubt,
    publisher: Publisher,
    /// The running total of archive/ (`sizes`).
    archive_tally: ArchiveTally,
    /// When the flights' data quality was last counted (`count_quality`).
    quality_counted_at: Option<Instant>,
}

impl Daemon {
    pub(crate) fn new(
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
        let schedule = Schedule::new(rules, config.rescan);
        let retention = Retention::new(config.archive_keep, config.rescan);
        let publisher = Publisher::new(
            config.metrics_file.clone(),
            spool.root.clone(),
            clock.wall(),
        );
        Daemon {
            spool,
            config,
            stop,
            clock,
            schedule,
            archived: Archived::default(),
            retention,
            database: Database::new(store),
            in_doubt: CommitInDoubt::default(),
            publisher,
            archive_tally: ArchiveTally::default(),
            quality_counted_at: None,
        }
    }

    /// Takes over what the daemon before this one told in its state file of the
    /// files it left waiting, so that their ages and `--partial-timeout` go on, and
    /// of the archived files it watched, for what is left of their watch.
    pub(crate) fn remember(&mut self, before: &DaemonState) {
        let reading = crate::clock::Reading::of(&*self.clock);
        // A time ahead of the wall clock (set back since) counts as now.
        let instant = |text: &str| -> Option<Instant> {
            let then = crate::clock::parse_millis(text)?;
            Some(reading.instant_of(then).min(reading.now))
        };
        let files = before
            .waiting
            .iter()
            .filter_map(|file| {
                let remembered = schedule::Remembered {
                    first_seen: instant(&file.first_seen_at)?,
                    changed_at: instant(&file.changed_at)?,
                    version: file.version.clone(),
                };
                Some((file.name.clone(), remembered))
            })
            .collect();
        self.schedule.remember(files);
        self.archived
            .remember(&before.archived_watched, &*self.clock);
    }

    /// The doorbell rang: something in incoming/ may have appeared or changed.
    pub(crate) fn notify(&mut self) {
        self.schedule.notify();
    }

    /// Takes at most one file, oldest first, and says what happened.
    pub(crate) fn step(&mut self, now: Instant) -> Report {
        let report = self.work(now);
        self.record(&report, now);
        report
    }

    fn work(&mut self, now: Instant) -> Report {
        if self.schedule.queue_is_empty() && self.schedule.listing_due(now) {
            self.look_at_archived(now);
            self.keep_archive(now);
            self.schedule.list(&self.spool, now);
            self.publisher.listed();
            if self.schedule.queue_is_empty()
                && let Some(report) = self.probe(now)
            {
                return report;
            }
        }
        if !self.schedule.queue_is_empty() && self.archived.look_due(now) {
            self.look_at_archived(now);
        }
        let database_wait = self.database.waiting(now);
        if self.schedule.queue_is_empty() || database_wait.is_some() {
            self.idle(now);
            let others = [self.publisher.wait(now), database_wait];
            return Report::Idle {
                wake_in: Some(self.schedule.wake_in(now, others)),
            };
        }
        if !self.database.is_open()
            && let Some(report) = self.open_store(now)
        {
            return report;
        }
        let name = self.schedule.next().expect("the queue is not empty");
        match self.schedule.not_ready(&self.spool.incoming, &name, now) {
            None => {
                // A take can wait seconds on a lock: status must see the file as
                // being read meanwhile, not as the settling it last heard of.
                if self.publisher.shows_settling(&name) {
                    self.write_figures(now, false);
                }
                self.take(name, now)
            }
            Some(why) => Report::Waiting {
                name: names::lossy(&name),
                why,
            },
        }
    }

    /// Moves back to incoming/ the archived files a writer changed since, so that
    /// the listing that follows finds them.
    fn look_at_archived(&mut self, now: Instant) {
        let moved = self.archived.look(&self.spool, now);
        if !moved.is_empty() {
            self.publisher.changed_after_archive(moved.len() as u64);
            self.archive_tally.recount();
        }
    }

    /// `--archive-keep`: at start and at most once a `--rescan`, just after the
    /// look at the watched files (so that a watch that just ended frees its file),
    /// deletes the files that have lain in archive/ longer than the keep.
    fn keep_archive(&mut self, now: Instant) {
        if self.retention.due(now) {
            let watched = self.archived.names();
            self.retention
                .pass(&self.spool, &watched, self.clock.wall(), now);
        }
    }

    /// Opens the database after a fault (or when it could not be opened at start).
    /// Returns what to report when it fails.
    fn open_store(&mut self, now: Instant) -> Option<Report> {
        if let Err(error) = self.database.may_open() {
            return Some(self.database_fault(None, String::new(), &error, now));
        }
        match Store::open(&self.config.db) {
            Ok(store) => {
                self.database.opened(store);
                None
            }
            Err(error) => Some(self.database_fault(None, String::new(), &error, now)),
        }
    }

    /// With nothing to ingest, a look at the database at each listing (twice a
    /// minute when idle, with the default rescan), so that `status` and the
    /// metrics tell an outage, and its end, without a file waiting: PostgreSQL,
    /// one round trip to the server; SQLite, whether the path still leads to the
    /// file opened. Not while the database waits out a back-off.
    fn probe(&mut self, now: Instant) -> Option<Report> {
        if self.database.waiting(now).is_some() {
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

    /// With nothing ready: checkpoint what was committed, count the flights' data
    /// quality when due, publish the figures.
    fn idle(&mut self, now: Instant) {
        // A checkpoint moves the WAL's bytes into the database: new sizes.
        if self.database.checkpoint() {
            self.publisher.changed();
        }
        self.count_quality(now);
        self.publish(now);
    }

    /// Counts the flights whose data can make a crew figure wrong, for the metrics
    /// file (none without one): at start, after batches at most once per
    /// `--rescan` (a pass over the flights' index), and hourly besides (a flight
    /// without on-blocks becomes "open" a day after its off-blocks). A failure is
    /// left to the next count: the batches' own tries report the database's faults.
    fn count_quality(&mut self, now: Instant) {
        if self.config.metrics_file.is_none() {
            return;
        }
        let due = self.quality_counted_at.is_none_or(|at| {
            let since = now.saturating_duration_since(at);
            (self.database.quality_dirty() && since >= self.config.rescan)
                || since >= QUALITY_COUNT_EVERY
        });
        let Some(store) = self.database.store_mut().filter(|_| due) else {
            return;
        };
        self.quality_counted_at = Some(now);
        match store.flight_quality() {
            Ok(quality) => {
                self.database.quality_counted();
                self.publisher.flight_quality(quality);
            }
            Err(error) => {
                log::debug!(target: LOG_TARGET, "count the flights' data quality: {error}")
            }
        }
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
        if self.publisher.due(now) {
            self.write_figures(now, true);
        }
    }

    /// Writes the metrics and state files now; `metered`: as the once-a-second
    /// publish.
    fn write_figures(&mut self, now: Instant, metered: bool) {
        let waiting = self.schedule.waiting(now, crate::state::WAITING_KEPT_MAX);
        let archived = self
            .archived
            .kept(crate::state::ARCHIVED_KEPT_MAX, &*self.clock);
        self.publisher.archived_watched(archived);
        let sizes = self.sizes(now);
        self.publisher.sizes(sizes);
        let outage = self.database.outage();
        if metered {
            self.publisher.publish(waiting, outage, now, &*self.clock);
        } else {
            self.publisher
                .publish_unmetered(waiting, outage, now, &*self.clock);
        }
    }
}

impl Daemon {
    /// What the site takes on disk now: a `stat` of the SQLite file and of its
    /// WAL (PostgreSQL's are the server's to tell), and archive/'s running total.
    fn sizes(&mut self, now: Instant) -> SiteSizes {
        let archive_bytes = self
            .archive_tally
            .bytes(&self.spool.archive, now, self.config.rescan);
        let file = self.config.db.file();
        SiteSizes {
            database_bytes: file.and_then(|path| sizes::file_bytes(path).ok()),
            wal_bytes: file.and_then(|path| sizes::file_bytes(&sizes::wal_path(path)).ok()),
            archive_bytes,
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
    let store = open_at_start(&config.db)?;
    // The watch goes in before the first listing, so nothing dropped between the
    // two is missed.
    let _watcher = crate::watch::watch(&spool.incoming, doorbell.clone()).map_err(|source| {
        DaemonError::Watch {
            path: spool.incoming.clone(),
            source,
        }
    })?;
    // Without it a write in archive/ is seen at the next listing: a warning.
    let _archive_watcher = crate::watch::watch_archive(&spool.archive, doorbell)
        .map_err(|error| {
            log::warn!(
                "watch {}: {error}; writes to archived files are seen at the rescan",
                spool.archive.display()
            )
        })
        .ok();
    log_serving(&config);
    let mut notifier = Notifier::from_env();
    let longest_sleep = notifier
        .watchdog_every()
        .map_or(config.rescan, |w| w.min(config.rescan));
    let clock = SystemClock;
    let before = state_before(&spool);
    let mut daemon = Daemon::new(spool, store, config, stop.clone(), Box::new(clock));
    if let Some(before) = &before {
        daemon.remember(before);
    }
    notifier.ready();
    while !stop.load(Ordering::SeqCst) {
        if wake.try_recv().is_ok() {
            daemon.notify();
        }
        let report = daemon.step(clock.now());
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

/// The store, opened at start. A database that cannot be used for a passing
/// reason (read-only, locked, disk full) does not stop the daemon (`None`): it
/// serves and tries again with back-off.
fn open_at_start(db: &Db) -> Result<Option<Store>, DaemonError> {
    match Store::open(db) {
        Ok(store) => Ok(Some(store)),
        Err(error) if error.is_fatal_at_start() => Err(error.into()),
        Err(error) => {
            log::warn!("{error}; serving the spool and trying again");
            Ok(None)
        }
    }
}

/// The start-up line: what is served, into what, with which timings.
fn log_serving(config: &Config) {
    log::info!(
        "serving spool {} into {} (settle {}, partial timeout {}, rescan {}, archive keep {})",
        config.spool.display(),
        config.db,
        duration_text(config.settle),
        duration_text(config.partial_timeout),
        duration_text(config.rescan),
        config
            .archive_keep
            .map_or("for ever".to_owned(), duration_text)
    );
}

/// What the daemon before this one told `status` (when each waiting file was
/// first seen), so that those ages go on across a restart.
fn state_before(spool: &Spool) -> Option<DaemonState> {
    crate::state::read(&spool.root).unwrap_or_else(|error| {
        log::warn!(
            "read {}: {error}; the ages of waiting files start again",
            crate::state::path(&spool.root).display()
        );
        None
    })
}

#[cfg(test)]
mod tests;
