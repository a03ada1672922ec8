//! Taking one file: through `ingest` into the database, a commit in doubt settled,
//! a cut file awaited until `--partial-timeout` says to reject it, then moved to
//! archive/ or rejected/; or, when something fails, what that means for this file
//! (a back-off of its own, or the database's for every file).

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::time::{Duration, Instant};

use crate::batch::{Limits, RejectReason, Rejection};
use crate::clock::{Clock, format_millis};
use crate::ingest::{self, IngestError, Ingested, Outcome, Progress};
use crate::names;
use crate::spool::{FileIdentity, MoveError};
use crate::store::{FaultClass, StoreError};

use super::in_doubt::{STILL_COMMITTING, Settlement};
use super::{Daemon, LOG_TARGET, Left, Report};

/// Tries of one file that the database refuses for something in the file (a value
/// too big, say) before the file is rejected.
const IN_FILE_TRIES_MAX: u32 = 3;
/// A file that takes longer than this is logged with its progress, this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

impl Daemon {
    /// Ingests one file and moves it, or leaves it for later.
    pub(super) fn take(&mut self, name: OsString, now: Instant) -> Report {
        self.take_as(name, now, false)
    }

    /// `take`; `settled`: the file has not changed for `--partial-timeout` and is
    /// read as it stands (`batch::Limits::settled`).
    fn take_as(&mut self, name: OsString, now: Instant, settled: bool) -> Report {
        let recorded = names::lossy(&name);
        let started = self.clock.now();
        let ingested = match self.ingest(&name, &recorded, started, settled) {
            Ok(ingested) => ingested,
            Err(error) => return self.ingest_failed(&name, recorded, error, now),
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
            if self.schedule.still_arriving(&name, now) {
                return Report::Waiting {
                    name: recorded,
                    why: Left::StillArriving {
                        detail: rejection.detail.clone(),
                    },
                };
            }
            // A CSV file whose last record has no line end is taken as it stands
            // once it has waited out the partial timeout.
            if rejection.reason == RejectReason::Unended && !settled {
                return self.take_as(name, now, true);
            }
            waited_out(rejection, self.config.partial_timeout);
        }
        let read = FileIdentity::of(&ingested.opened);
        self.finish(&name, recorded, outcome, &read, started, now)
    }

    /// The file through `ingest`, its progress logged when it takes long.
    fn ingest(
        &mut self,
        name: &OsStr,
        recorded: &str,
        started: Instant,
        settled: bool,
    ) -> Result<Ingested, IngestError> {
        let path = self.spool.incoming.join(name);
        let clock: &dyn Clock = &*self.clock;
        let progress = progress_logger(recorded.to_owned(), started, clock);
        let options = ingest::Options {
            file_bytes_max: self.config.file_bytes_max,
            limits: Limits {
                settled,
                ..self.config.limits
            },
            progress: Some(&progress),
            dry_run: false,
            stop: &self.stop,
            clock,
        };
        let store = self
            .database
            .store_mut()
            .expect("the store is open before a take");
        ingest::ingest(store, &path, options)
    }

    /// What an ingest that failed for a reason not in the file means for it.
    fn ingest_failed(
        &mut self,
        name: &OsStr,
        recorded: String,
        error: IngestError,
        now: Instant,
    ) -> Report {
        match error {
            IngestError::Stopped => Report::Stopped { name: recorded },
            IngestError::Changed { .. } => self.changed(recorded),
            IngestError::Store(error) => {
                if let StoreError::CommitInDoubt { batch, .. } = &error {
                    self.in_doubt.doubt(name, (**batch).clone());
                }
                self.store_fault(name, recorded, error, now)
            }
            IngestError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                self.schedule.forget(name);
                Report::Waiting {
                    name: recorded,
                    why: Left::Gone,
                }
            }
            error @ IngestError::Read { .. } => {
                self.file_fault(name, recorded, error.to_string(), now)
            }
        }
    }

    /// After a COMMIT of this file's batch went unacknowledged, the try that finds
    /// its digest in the inbox settles it (`in_doubt`). `Err`: what to report when
    /// the server cannot say yet.
    fn settle_in_doubt(
        &mut self,
        name: &OsStr,
        recorded: &str,
        outcome: Outcome,
        now: Instant,
    ) -> Result<Outcome, Box<Report>> {
        let store = self
            .database
            .store_mut()
            .expect("the store is open after a take");
        match self.in_doubt.settle(name, recorded, outcome, store) {
            Settlement::Stands(outcome) => Ok(outcome),
            Settlement::Unanswered(error) => Err(Box::new(self.store_fault(
                name,
                recorded.to_owned(),
                error,
                now,
            ))),
            Settlement::StillCommitting => Err(Box::new(self.file_fault(
                name,
                recorded.to_owned(),
                STILL_COMMITTING.to_owned(),
                now,
            ))),
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
                self.spool
                    .reject(name, read, outcome.digest(), reason)
                    .map(OsString::from)
            }
            _ => self.spool.archive(name, read),
        };
        let committed = matches!(outcome, Outcome::Processed { .. });
        let final_name = match moved {
            Ok(final_name) => final_name,
            Err(MoveError::Changed) => {
                if committed {
                    self.database.committed();
                }
                let outcome = committed.then(|| Box::new(outcome));
                return self.changed_after_commit(recorded, outcome);
            }
            Err(MoveError::Io(error)) => {
                let why = format!("move it out of incoming/: {error}");
                return self.file_fault(name, recorded, why, now);
            }
        };
        if committed {
            self.database.committed();
        }
        if !matches!(outcome, Outcome::Rejected { .. }) {
            self.archive_tally.archived(read.size);
        }
        if !matches!(outcome, Outcome::Rejected { .. })
            && let Some(digest) = outcome.digest()
        {
            // For --partial-timeout after its move (the contract), which comes
            // after the ingest: from the step's start, a slow ingest shortened
            // the watch, and `--archive-keep` could delete the file within it.
            let until = self.clock.now() + self.config.partial_timeout;
            let last = self
                .archived
                .watch(&self.spool, &final_name, read, digest, until);
            if last.is_some() {
                self.publisher.changed_after_archive(1);
                self.archive_tally.recount();
            }
        }
        self.schedule.forget(name);
        Report::Took {
            name: recorded,
            outcome,
            final_name: names::lossy(&final_name),
            elapsed: self.clock.now().saturating_duration_since(started),
        }
    }

    /// The file changed while it was read: leave it, and look again soon.
    fn changed(&mut self, recorded: String) -> Report {
        self.changed_after_commit(recorded, None)
    }

    /// The file changed after what was read of it was committed (`committed`) or
    /// not: leave it, and look again soon.
    fn changed_after_commit(
        &mut self,
        recorded: String,
        committed: Option<Box<Outcome>>,
    ) -> Report {
        self.schedule.notify();
        Report::Waiting {
            name: recorded,
            why: Left::Changed { committed },
        }
    }

    /// The store failed: the database, this file, or something in this file (a
    /// value too big), which rejects the file after a few tries.
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
                let tries = self.schedule.same_error_tries(name);
                if tries < IN_FILE_TRIES_MAX {
                    return report;
                }
                let rejection = ingest::refused_by_database(&error, tries);
                let outcome = Outcome::Rejected {
                    digest: None,
                    rejection,
                };
                // The version listed: a file changed since is not rejected unread.
                let Some(listed) = self.schedule.listed_version(name) else {
                    return report;
                };
                let started = self.clock.now();
                self.finish(name, recorded, outcome, &listed, started, now)
            }
        }
    }

    /// The database failed: every file waits one back-off, and this one (`name`,
    /// when a file was in hand) stays first in line.
    pub(super) fn database_fault(
        &mut self,
        name: Option<&OsStr>,
        recorded: String,
        error: &StoreError,
        now: Instant,
    ) -> Report {
        let fault = self.database.failed(error, self.clock.wall(), now);
        if let Some(name) = name {
            self.schedule.put_back(name);
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
        match self.schedule.file_failed(name, error, now) {
            Some(fault) => Report::RetryLater {
                name: recorded,
                fault,
            },
            None => Report::Idle { wake_in: None },
        }
    }
}

/// A cut file that has not changed for the partial timeout is rejected: its detail
/// says so instead of "it may still be arriving".
fn waited_out(rejection: &mut Rejection, partial_timeout: Duration) {
    let cut = rejection
        .detail
        .strip_suffix("; it may still be arriving")
        .unwrap_or(&rejection.detail);
    rejection.detail = format!(
        "{cut}, and it has not changed for {} (--partial-timeout): send it again whole",
        crate::units::duration_text(partial_timeout)
    );
}

/// When to log the progress of a long file: once it has taken `PROGRESS_EVERY`,
/// and every `PROGRESS_EVERY` after.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProgressLog {
    pub(crate) last: Instant,
}

impl ProgressLog {
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last) < PROGRESS_EVERY {
            return false;
        }
        self.last = now;
        true
    }
}

/// Logs the progress of a file that takes longer than `PROGRESS_EVERY`, that often,
/// by the daemon's clock.
fn progress_logger(name: String, started: Instant, clock: &dyn Clock) -> impl Fn(Progress) {
    let log = Cell::new(ProgressLog { last: started });
    move |progress: Progress| {
        let now = clock.now();
        let mut due = log.get();
        if !due.due(now) {
            return;
        }
        log.set(due);
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        log::info!(
            target: LOG_TARGET,
            "{}: {} events so far, {:.0} of {:.0} MiB read, {:.0} s",
            names::escaped(&name),
            progress.events,
            mib(progress.bytes_done),
            mib(progress.bytes_total),
            now.duration_since(started).as_secs_f64()
        );
    }
}
