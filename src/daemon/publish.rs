//! What the daemon tells the outside while it runs: the metrics file (`--metrics-file`)
//! and the state file (`SPOOL/.spoolite/state.json`), rewritten when a figure changed
//! and at most once a second, the state file only when it differs. A write that
//! fails is logged once, and its recovery, not once a second.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::clock::{Clock, Reading, format_millis};
use crate::ingest::Outcome;
use crate::metrics::Metrics;
use crate::state::{self, DaemonState, WaitingFile};

use super::LOG_TARGET;
use super::database::Outage;
use super::schedule::WaitingFiles;

/// The metrics and state files are rewritten at most this often.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

pub(super) struct Publisher {
    metrics: Metrics,
    metrics_file: Option<PathBuf>,
    /// The spool's root, where the state file lies.
    spool_root: PathBuf,
    /// A figure (counts, waiting files, listings, a fault) changed since the last
    /// publish.
    figures_changed: bool,
    published_at: Option<Instant>,
    state: DaemonState,
    state_written: Option<DaemonState>,
    /// The metrics or state files whose last write failed (logged once).
    failing: HashSet<PathBuf>,
}

impl Publisher {
    /// For a daemon that started serving the spool at `root` at `since`.
    pub(crate) fn new(
        metrics_file: Option<PathBuf>,
        root: PathBuf,
        since: SystemTime,
    ) -> Publisher {
        let state = DaemonState {
            pid: std::process::id(),
            since: format_millis(since),
            ..DaemonState::default()
        };
        Publisher {
            metrics: Metrics::default(),
            metrics_file,
            spool_root: root,
            figures_changed: true,
            published_at: None,
            state,
            state_written: None,
            failing: HashSet::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The state as last published.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &DaemonState {
        &self.state
    }

    /// Whether the state file last written shows the file `name` as settling: a
    /// take that waits on a lock would leave status saying so for seconds.
    pub(crate) fn shows_settling(&self, name: &std::ffi::OsStr) -> bool {
        let name = crate::names::lossy(name);
        self.state
            .waiting
            .iter()
            .any(|file| file.name == name && file.state == "settling")
    }

    /// A figure changed: the next publish writes it.
    pub(crate) fn changed(&mut self) {
        self.figures_changed = true;
    }

    /// incoming/ was listed.
    pub(crate) fn listed(&mut self) {
        self.metrics.scans += 1;
        self.figures_changed = true;
    }

    /// Counts a file taken from incoming/ at `wall`, and how long it took.
    pub(crate) fn taken(&mut self, outcome: &Outcome, elapsed: Duration, wall: SystemTime) {
        self.metrics.observe_outcome(outcome, elapsed, wall);
    }

    /// The archived files under watch, for the state file.
    pub(crate) fn archived_watched(&mut self, files: Vec<state::ArchivedFile>) {
        self.state.archived_watched = files;
    }

    /// `files` archived files changed after their move and went back to incoming/.
    pub(crate) fn changed_after_archive(&mut self, files: u64) {
        self.metrics.files_changed_after_archive += files;
        self.figures_changed = true;
    }

    /// What the site takes on disk, for the metrics file.
    pub(crate) fn sizes(&mut self, sizes: crate::sizes::SiteSizes) {
        self.metrics.database_bytes = sizes.database_bytes;
        self.metrics.wal_bytes = sizes.wal_bytes;
        self.metrics.archive_bytes = sizes.archive_bytes;
    }

    /// The flights' data quality counts, for the metrics file.
    pub(crate) fn flight_quality(&mut self, quality: crate::store::FlightQuality) {
        if self.metrics.flight_quality != Some(quality) {
            self.metrics.flight_quality = Some(quality);
            self.figures_changed = true;
        }
    }

    /// How long until a figure that changed may be written, when one did.
    pub(crate) fn wait(&self, now: Instant) -> Option<Duration> {
        self.figures_changed.then(|| self.publish_wait(now))
    }

    /// Whether a figure changed and the once-a-second limit lets it be written now.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.wait(now) == Some(Duration::ZERO)
    }

    /// How long until the once-a-second limit lets the figures be written again.
    fn publish_wait(&self, now: Instant) -> Duration {
        self.published_at.map_or(Duration::ZERO, |at| {
            (at + PUBLISH_EVERY).saturating_duration_since(now)
        })
    }

    /// Writes (when it differs) the state file and the metrics file, from the
    /// waiting files and the database's outage; call when `due`.
    pub(crate) fn publish(
        &mut self,
        waiting: WaitingFiles,
        outage: Option<&Outage>,
        now: Instant,
        clock: &dyn Clock,
    ) {
        self.figures_changed = false;
        self.published_at = Some(now);
        self.write(waiting, outage, now, clock);
    }

    /// Writes the state and metrics files now, outside the once-a-second limit and
    /// without using it up (a take that follows is written as soon as it ends).
    pub(crate) fn publish_unmetered(
        &mut self,
        waiting: WaitingFiles,
        outage: Option<&Outage>,
        now: Instant,
        clock: &dyn Clock,
    ) {
        self.write(waiting, outage, now, clock);
    }

    fn write(
        &mut self,
        waiting: WaitingFiles,
        outage: Option<&Outage>,
        now: Instant,
        clock: &dyn Clock,
    ) {
        self.refresh(waiting, outage, now, clock);
        // The state file first: whoever sees the metrics change (an alert) and
        // then asks `status` reads a state file at least as new.
        self.write_state(clock);
        if let Some(path) = self.metrics_file.clone() {
            let written = self.metrics.write(&path);
            self.note_write(&path, written);
        }
    }

    /// Writes the state file, when it differs from the one last written.
    fn write_state(&mut self, clock: &dyn Clock) {
        let unchanged = self.state_written.as_ref().is_some_and(|written| {
            let mut current = self.state.clone();
            current.written_at.clone_from(&written.written_at);
            current == *written
        });
        if unchanged {
            return;
        }
        self.state.written_at = format_millis(clock.wall());
        let written = state::write(&self.spool_root, &self.state);
        let path = state::path(&self.spool_root);
        if self.note_write(&path, written) {
            self.state_written = Some(self.state.clone());
        }
    }

    /// The figures of waiting files and of the database.
    fn refresh(
        &mut self,
        waiting: WaitingFiles,
        outage: Option<&Outage>,
        now: Instant,
        clock: &dyn Clock,
    ) {
        let oldest = waiting.oldest_seen;
        let age = oldest.map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.metrics.files_waiting = waiting.count;
        self.metrics.oldest_waiting_age_s = age;
        // The wall time of the first sight, from the two clocks read together: the
        // step's `now` may be seconds old (a file that waited on a lock).
        let reading = Reading::of(clock);
        let wall_of = |at: Instant| format_millis(reading.wall_of(at));
        self.state.files_waiting = waiting.count;
        self.state.oldest_waiting_seen_at = oldest.map(wall_of);
        self.state.waiting = waiting
            .files
            .into_iter()
            .map(|file| WaitingFile {
                name: crate::names::lossy(&file.name),
                state: file.state.to_owned(),
                first_seen_at: wall_of(file.first_seen),
                changed_at: wall_of(file.changed_at),
                version: file.version,
            })
            .collect();
        self.metrics.database_failing_since_unix_s = outage.map(|outage| {
            let since = outage
                .since
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            since.as_secs_f64()
        });
        self.metrics.database_unreachable = outage.is_some_and(|outage| outage.fault.unreachable);
        self.state.database_fault = outage.map(|outage| outage.fault.clone());
    }

    /// Logs a failed write of the metrics or state file once, and its recovery, not
    /// once a second; returns whether it was written.
    fn note_write(&mut self, path: &Path, written: std::io::Result<()>) -> bool {
        match written {
            Ok(()) => {
                if self.failing.remove(path) {
                    log::info!(target: LOG_TARGET, "{} is written again", path.display());
                }
                true
            }
            Err(error) => {
                if self.failing.insert(path.to_owned()) {
                    log::warn!(
                        target: LOG_TARGET,
                        "write {}: {error}; trying again at every change, logged when it works",
                        path.display()
                    );
                }
                false
            }
        }
    }
}
