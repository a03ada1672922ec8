//! PostgreSQL's commit in doubt. When the connection is lost after a batch's COMMIT
//! was sent and before it was acknowledged, the daemon cannot know whether the batch
//! went in; it remembers the file and what the batch came to (`store::InDoubt`), and
//! the next try of that file, which finds the digest in the inbox when the commit
//! happened or another writer committed the same bytes, asks the server which it was
//! (the transaction's id says it): the file is then processed, counted once with the
//! counts of that commit, not a duplicate of itself.

use std::ffi::{OsStr, OsString};

use crate::ingest::Outcome;
use crate::names;
use crate::store::{CommitStatus, InDoubt, Store, StoreError};

use super::LOG_TARGET;

/// Why the file waits when the server is still finishing the COMMIT in doubt.
pub(super) const STILL_COMMITTING: &str =
    "the server is still finishing the COMMIT sent before the connection was lost";

/// The file (by name) whose batch's COMMIT went unacknowledged, and what that batch
/// came to.
#[derive(Debug, Default)]
pub(super) struct CommitInDoubt {
    file: Option<(OsString, InDoubt)>,
}

/// What a try of a file comes to once a commit in doubt is settled.
#[derive(Debug)]
pub(super) enum Settlement {
    /// The outcome of the try, or the commit in doubt's when it was the one.
    Stands(Outcome),
    /// The server could not be asked: a fault, tried again later.
    Unanswered(StoreError),
    /// The server is still finishing that COMMIT: the file waits a back-off.
    StillCommitting,
}

impl CommitInDoubt {
    /// The COMMIT of the batch read from the file `name` went unacknowledged.
    pub(crate) fn doubt(&mut self, name: &OsStr, batch: InDoubt) {
        self.file = Some((name.to_owned(), batch));
    }

    /// The try of the file `name` (`recorded` as the log shows it) came to
    /// `outcome`: the outcome that stands once a doubt about this file and these
    /// bytes is settled, asking `store` when it must. Any other outcome stands as
    /// it is.
    pub(crate) fn settle(
        &mut self,
        name: &OsStr,
        recorded: &str,
        outcome: Outcome,
        store: &mut Store,
    ) -> Settlement {
        let Some(batch) = self.take_for(name, &outcome) else {
            return Settlement::Stands(outcome);
        };
        if let Outcome::Processed { .. } = outcome {
            log::info!(
                target: LOG_TARGET,
                "{}: the earlier COMMIT of its batch, unacknowledged when the connection was \
                 lost, had not happened; this try committed it",
                names::escaped(recorded)
            );
            return Settlement::Stands(outcome);
        }
        match store.commit_status(&batch.xid) {
            Ok(status) => self.resolve(name, recorded, status, batch, outcome),
            Err(error) => {
                self.doubt(name, batch);
                Settlement::Unanswered(error)
            }
        }
    }

    /// The doubt about the file `name`, when the try read the same bytes. Another
    /// file's doubt stays with the file it belongs to; this file's, when it holds
    /// other bytes now, is dropped.
    fn take_for(&mut self, name: &OsStr, outcome: &Outcome) -> Option<InDoubt> {
        let (doubted, batch) = self.file.take()?;
        if doubted != name {
            self.file = Some((doubted, batch));
            return None;
        }
        (outcome.digest() == Some(batch.digest.as_str())).then_some(batch)
    }

    /// What the server says of the COMMIT in doubt settles the try's outcome.
    fn resolve(
        &mut self,
        name: &OsStr,
        recorded: &str,
        status: CommitStatus,
        batch: InDoubt,
        outcome: Outcome,
    ) -> Settlement {
        let shown = names::escaped(recorded);
        match status {
            CommitStatus::Committed => {
                log::info!(
                    target: LOG_TARGET,
                    "{shown}: the COMMIT of its batch was carried out though the connection \
                     was lost before it was acknowledged (the server says so): processed once"
                );
                batch.finished.case_variants.log(&shown);
                Settlement::Stands(processed_once(batch))
            }
            CommitStatus::Aborted => {
                log::info!(
                    target: LOG_TARGET,
                    "{shown}: the earlier COMMIT of its batch, unacknowledged when the connection \
                     was lost, did not happen; another writer committed the same bytes"
                );
                Settlement::Stands(outcome)
            }
            CommitStatus::InProgress => {
                self.doubt(name, batch);
                Settlement::StillCommitting
            }
            CommitStatus::Unknown => {
                log::warn!(
                    target: LOG_TARGET,
                    "{shown}: the server no longer knows whether the unacknowledged COMMIT of \
                     its batch was the one the inbox holds; counted as a duplicate"
                );
                Settlement::Stands(outcome)
            }
        }
    }
}

/// The outcome of the commit that was in doubt: processed, with its counts.
fn processed_once(batch: InDoubt) -> Outcome {
    let finished = batch.finished;
    Outcome::Processed {
        digest: batch.digest,
        counts: finished.counts,
        resent_batch_id: batch.batch_id.filter(|_| finished.resent),
        reasons: finished.reasons,
    }
}
