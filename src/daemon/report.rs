//! What one step of the daemon did (`Report`), and how that is told in the log
//! (`log_report`): outcomes at info (rejections and quarantines at warn), faults once
//! per interval with their count.

use std::time::Duration;

use crate::ingest::Outcome;
use crate::names;
use crate::report::outcome_line;
use crate::store::Reasons;

use super::LOG_TARGET;

/// What one step did.
#[derive(Debug)]
pub(crate) enum Report {
    /// A file was taken: processed, skipped as a duplicate or rejected, and moved
    /// out of incoming/ as `final_name`.
    Took {
        name: String,
        outcome: Outcome,
        final_name: String,
        elapsed: Duration,
    },
    /// A file was looked at and left in incoming/ for now.
    Waiting { name: String, why: Left },
    /// A try failed for a reason that is not in the file; it (or, for a database
    /// fault, every file) is tried again after a back-off.
    RetryLater { name: String, fault: Fault },
    /// A stop was asked for while a file was in hand: it was rolled back and left
    /// untouched in incoming/.
    Stopped { name: String },
    /// Nothing to do until `wake_in` passes or the doorbell rings.
    Idle { wake_in: Option<Duration> },
}

/// Why a file was left in incoming/.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Left {
    /// Its content ends early: the rest may still come (`detail` says where).
    StillArriving { detail: String },
    /// It changed since it was listed or while it was read: it is taken again once
    /// it has settled. `committed` is what was committed of the bytes that were read,
    /// when they were (the change came between the commit and the move): that batch
    /// is in the inbox, and its file is not in archive/.
    Changed { committed: Option<Box<Outcome>> },
    /// It is gone (moved or deleted by someone else) or no longer a regular file.
    Gone,
}

/// A passing fault, and whether it holds back every file or this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) error: String,
    /// The database failed: every file waits.
    pub(crate) database: bool,
    /// Failures in a row of what failed (the database, or this file).
    pub(crate) attempts: u32,
    pub(crate) next_in: Duration,
    /// Whether this failure is to be logged (the first, then once per 30 s).
    pub(crate) log: bool,
    /// The fault does not pass by itself (the database file gone or replaced):
    /// logged once, as an error.
    pub(crate) lasting: bool,
}

/// Logs what a step did: outcomes at info (rejections and quarantines at warn),
/// faults once per interval with their count.
pub(crate) fn log_report(report: &Report) {
    match report {
        Report::Took {
            name,
            outcome,
            final_name,
            elapsed,
        } => log_took(name, outcome, final_name, *elapsed),
        Report::Waiting { name, why } => log_waiting(name, why),
        Report::RetryLater { name, fault } if fault.log => log_retry(name, fault),
        Report::Stopped { name } => log::info!(
            target: LOG_TARGET,
            "stopping: {} rolled back and left in incoming/",
            names::escaped(name)
        ),
        Report::RetryLater { .. } | Report::Idle { .. } => {}
    }
}

/// The outcome line of a file taken, with how long it took and the name it was
/// kept under when that differs; then what a processed file quarantined, and
/// whether its batch was sent before with other bytes.
fn log_took(name: &str, outcome: &Outcome, final_name: &str, elapsed: Duration) {
    let line = outcome_line(&names::escaped(name), outcome);
    let millis = elapsed.as_millis();
    let kept = if final_name != name {
        format!(" (kept as {})", names::escaped(final_name))
    } else {
        String::new()
    };
    match outcome {
        Outcome::Rejected { .. } => log::warn!(target: LOG_TARGET, "{line} {millis}ms{kept}"),
        _ => log::info!(target: LOG_TARGET, "{line} {millis}ms{kept}"),
    }
    if let Outcome::Processed {
        reasons,
        resent_batch_id,
        ..
    } = outcome
    {
        if !reasons.is_empty() {
            log_quarantined(name, reasons);
        }
        if let Some(id) = resent_batch_id {
            log::warn!(
                target: LOG_TARGET,
                "{}: batch_id {id:?} was ingested before with other bytes (a re-sent batch)",
                names::escaped(name)
            );
        }
    }
}

/// How many events of a processed file went to quarantine, by reason code.
fn log_quarantined(name: &str, reasons: &Reasons) {
    let total: u64 = reasons.values().sum();
    let by_reason: Vec<String> = reasons
        .iter()
        .map(|(code, n)| format!("{code}={n}"))
        .collect();
    let events = if total == 1 { "event" } else { "events" };
    log::warn!(
        target: LOG_TARGET,
        "{}: {total} {events} quarantined: {}",
        names::escaped(name),
        by_reason.join(" ")
    );
}

fn log_waiting(name: &str, why: &Left) {
    let shown = names::escaped(name);
    match why {
        Left::StillArriving { detail } => log::info!(
            target: LOG_TARGET,
            "{shown} looks incomplete ({detail}); waiting for the rest"
        ),
        Left::Changed { committed: None } => log::info!(
            target: LOG_TARGET,
            "{shown} changed while it was ingested; left in incoming/ to be taken again"
        ),
        Left::Changed {
            committed: Some(outcome),
        } => log::warn!(
            target: LOG_TARGET,
            "{}; then the file changed while it was ingested, before it could be moved: \
             the batch read is committed (its bytes are not in archive/), the file is \
             left in incoming/ to be taken again",
            outcome_line(&shown, outcome)
        ),
        Left::Gone => log::debug!(target: LOG_TARGET, "{shown} is gone from incoming/"),
    }
}

/// A fault, logged when `Fault::log` says so: the first, then once per 30 s.
fn log_retry(name: &str, fault: &Fault) {
    let what = if name.is_empty() {
        "files wait in incoming/".to_owned()
    } else {
        format!("{} waits in incoming/", names::escaped(name))
    };
    let failed = if fault.database {
        "database failed"
    } else {
        "file failed"
    };
    if fault.lasting {
        log::error!(target: LOG_TARGET, "{what}: {}", fault.error);
        return;
    }
    let times = match fault.attempts {
        1 => "once".to_owned(),
        n => format!("{n} times in a row"),
    };
    log::warn!(
        target: LOG_TARGET,
        "{what}: {} ({failed} {times}, next try in {:?})",
        fault.error,
        fault.next_in
    );
}
