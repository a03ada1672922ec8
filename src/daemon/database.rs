//! The database as the daemon holds it: the store (closed by a fault that can
//! outlive its connection, opened again at the next try), the back-off every file
//! waits out while the database fails, the outage that `status` and the metrics
//! tell, and SQLite's checkpoints once something was committed. Opening the store
//! and the idle look at a PostgreSQL server are the daemon's (`Daemon::open_store`,
//! `Daemon::probe`), which knows what `--db` names.

use std::time::{Duration, Instant, SystemTime};

use crate::clock::format_millis;
use crate::readiness::Backoff;
use crate::state::DatabaseFault;
use crate::store::{DatabaseFile, FaultClass, Store, StoreError};

use super::LOG_TARGET;
use super::report::Fault;

#[derive(Default)]
pub(super) struct Database {
    /// None until the database opens; dropped when a fault can outlive it.
    store: Option<Store>,
    retry: Backoff,
    outage: Option<Outage>,
    /// Something was committed since the last checkpoint.
    wal_dirty: bool,
    /// Something was committed since the flights' data quality was counted.
    quality_dirty: bool,
    /// SQLite: the database file first opened. The daemon opens the path again
    /// (after a fault) only while it leads to that file: it never creates a new
    /// database, nor writes into another file put in its place, by itself.
    first_file: Option<DatabaseFile>,
}

/// The database has failed every try since `since`.
#[derive(Debug, Clone)]
pub(super) struct Outage {
    pub(crate) since: SystemTime,
    /// As the state file writes it: `since` in spoolite's form, and the latest
    /// try's error and whether it reached the server.
    pub(crate) fault: DatabaseFault,
}

impl Database {
    pub(crate) fn new(store: Option<Store>) -> Database {
        Database {
            first_file: store.as_ref().and_then(Store::database_file),
            store,
            ..Database::default()
        }
    }

    /// `Err` when the database was opened before and its path no longer leads to
    /// that file (SQLite); `Ok` when it may be opened.
    pub(crate) fn may_open(&self) -> Result<(), StoreError> {
        self.first_file.as_ref().map_or(Ok(()), DatabaseFile::check)
    }

    pub(crate) fn is_open(&self) -> bool {
        self.store.is_some()
    }

    pub(crate) fn opened(&mut self, store: Store) {
        if self.first_file.is_none() {
            self.first_file = store.database_file();
        }
        self.store = Some(store);
    }

    #[cfg(test)]
    pub(crate) fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    pub(crate) fn store_mut(&mut self) -> Option<&mut Store> {
        self.store.as_mut()
    }

    /// How long every file still waits out the database's back-off, if it does.
    pub(crate) fn waiting(&self, now: Instant) -> Option<Duration> {
        self.retry.waiting(now)
    }

    pub(crate) fn outage(&self) -> Option<&Outage> {
        self.outage.as_ref()
    }

    /// The database failed at `wall` (`now` on the monotonic clock): every file
    /// waits one back-off; a fault that can outlive the connection closes it, so
    /// that the next try opens the database again.
    pub(crate) fn failed(&mut self, error: &StoreError, wall: SystemTime, now: Instant) -> Fault {
        if let FaultClass::Database { reopen: true } = error.class() {
            self.store = None;
        }
        let text = error.to_string();
        let mut log = self.retry.fail(now, &text);
        let lasting = error.lasts_until_restart();
        if lasting {
            // Said once: a reminder every 30 s would add nothing but noise.
            log = self.retry.same_error() == 1;
        }
        // Since the first failure; the error and whether the server can be reached
        // at all are the latest try's.
        let outage = self.outage.get_or_insert_with(|| Outage {
            since: wall,
            fault: DatabaseFault {
                since: format_millis(wall),
                error: String::new(),
                unreachable: false,
            },
        });
        outage.fault.error.clone_from(&text);
        outage.fault.unreachable = error.is_unreachable();
        Fault {
            error: text,
            database: true,
            attempts: self.retry.failures(),
            next_in: self.retry.delay(),
            log,
            lasting,
        }
    }

    /// A try worked: the back-off and the outage end. Returns whether there was one.
    pub(crate) fn recovered(&mut self) -> bool {
        let failures = self.retry.recover();
        if failures > 0 {
            log::info!(
                target: LOG_TARGET,
                "database usable again after {failures} failed attempts"
            );
        }
        self.outage.take().is_some()
    }

    /// A batch was committed: the next idle step checkpoints it, and the flights'
    /// data quality is counted again.
    pub(crate) fn committed(&mut self) {
        self.wal_dirty = true;
        self.quality_dirty = true;
    }

    /// Whether a batch was committed since the flights' data quality was counted.
    pub(crate) fn quality_dirty(&self) -> bool {
        self.quality_dirty
    }

    /// The flights' data quality was counted.
    pub(crate) fn quality_counted(&mut self) {
        self.quality_dirty = false;
    }

    /// With nothing ready: checkpoints what was committed since the last one, and
    /// tries again at the next idle step when a reader held it back. Returns
    /// whether a checkpoint ran.
    pub(crate) fn checkpoint(&mut self) -> bool {
        let Some(store) = self.store.as_ref().filter(|_| self.wal_dirty) else {
            return false;
        };
        match store.checkpoint() {
            Ok(complete) => {
                self.wal_dirty = !complete;
                if !complete {
                    log::debug!(
                        target: LOG_TARGET,
                        "checkpoint held back by a reader; trying again when idle"
                    );
                }
            }
            Err(error) => log::warn!(target: LOG_TARGET, "checkpoint: {error}"),
        }
        true
    }
}
