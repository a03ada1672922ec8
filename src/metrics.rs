//! The daemon's counters, written as Prometheus text for node_exporter's textfile
//! collector: temp file, fsync, rename, so a scrape never reads half a file.

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::ingest::Outcome;

use crate::store::Counts;

/// Upper bounds of the ingest duration histogram, in seconds.
const DURATION_BUCKETS_S: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

#[derive(Debug, Clone, Default)]
pub(crate) struct Metrics {
    pub(crate) files_processed: u64,
    pub(crate) files_skipped: u64,
    pub(crate) files_rejected: u64,
    /// Archived files that changed after their move and went back to incoming/.
    pub(crate) files_changed_after_archive: u64,
    pub(crate) events: Counts,
    /// Unix time of the last file processed or skipped.
    pub(crate) last_success_unix_s: Option<f64>,
    pub(crate) files_waiting: u64,
    pub(crate) oldest_waiting_age_s: f64,
    /// Listings of incoming/ since the daemon started.
    pub(crate) scans: u64,
    /// Unix time of the first failed try of the database while it keeps failing.
    pub(crate) database_failing_since_unix_s: Option<f64>,
    /// The latest failed try could not reach the database server.
    pub(crate) database_unreachable: bool,
    /// What the site takes on disk (`sizes`): the SQLite file and its WAL (not
    /// known for PostgreSQL, whose server's exporter tells its own), and the
    /// regular files in archive/. A size not known is left out of the file.
    pub(crate) database_bytes: Option<u64>,
    pub(crate) wal_bytes: Option<u64>,
    pub(crate) archive_bytes: Option<u64>,
    /// The flights whose data can make a crew figure wrong, as last counted
    /// (`Daemon::count_quality`); left out until counted.
    pub(crate) flight_quality: Option<crate::store::FlightQuality>,
    duration_counts: [u64; DURATION_BUCKETS_S.len()],
    duration_count: u64,
    duration_sum_s: f64,
}

impl Metrics {
    /// Counts a file taken from incoming/ and how long it took.
    pub(crate) fn observe_outcome(
        &mut self,
        outcome: &Outcome,
        elapsed: Duration,
        now: SystemTime,
    ) {
        self.observe_duration(elapsed);
        match outcome {
            Outcome::Processed { counts, .. } => {
                self.files_processed += 1;
                self.events.add(counts);
            }
            Outcome::SkippedDuplicate { .. } => self.files_skipped += 1,
            Outcome::Rejected { .. } => self.files_rejected += 1,
        }
        if !matches!(outcome, Outcome::Rejected { .. }) {
            let unix = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            self.last_success_unix_s = Some(unix.as_secs_f64());
        }
    }

    pub(crate) fn observe_duration(&mut self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        for (bound, count) in DURATION_BUCKETS_S
            .iter()
            .zip(self.duration_counts.iter_mut())
        {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.duration_count += 1;
        self.duration_sum_s += seconds;
    }

    /// The Prometheus text exposition of these metrics.
    pub(crate) fn render(&self) -> String {
        let mut text = Exposition::default();
        self.render_taken(&mut text);
        self.render_waiting(&mut text);
        self.render_database(&mut text);
        self.render_sizes(&mut text);
        self.render_scans(&mut text);
        self.render_durations(&mut text);
        text.out
    }

    /// What became of the files taken and their events, and when the last went in.
    fn render_taken(&self, text: &mut Exposition) {
        text.family(
            "spoolite_files_total",
            "counter",
            "Batch files taken from incoming/, by outcome.",
            &[
                by_outcome("processed", self.files_processed),
                by_outcome("skipped_duplicate", self.files_skipped),
                by_outcome("rejected", self.files_rejected),
            ],
        );
        text.family(
            "spoolite_files_changed_after_archive_total",
            "counter",
            "Archived files that changed after their move (a writer still writing under the \
             final name) and went back to incoming/ to be taken again.",
            &[sample("", &self.files_changed_after_archive)],
        );
        let e = &self.events;
        text.family(
            "spoolite_events_total",
            "counter",
            "Events of processed files, by outcome.",
            &[
                by_outcome("inserted", e.inserted),
                by_outcome("updated", e.updated),
                by_outcome("unchanged", e.unchanged),
                by_outcome("stale", e.stale),
                by_outcome("conflict", e.conflicts),
                by_outcome("invalid", e.invalid),
            ],
        );
        text.family(
            "spoolite_last_success_timestamp_seconds",
            "gauge",
            "Unix time of the last file processed or skipped as a duplicate (0: none yet).",
            &[sample("", &self.last_success_unix_s.unwrap_or(0.0))],
        );
    }

    fn render_waiting(&self, text: &mut Exposition) {
        text.family(
            "spoolite_files_waiting",
            "gauge",
            "Regular files waiting in incoming/.",
            &[sample("", &self.files_waiting)],
        );
        text.family(
            "spoolite_oldest_waiting_age_seconds",
            "gauge",
            "Seconds since the daemon first saw the file that has waited longest in incoming/.",
            &[sample("", &self.oldest_waiting_age_s)],
        );
    }

    fn render_database(&self, text: &mut Exposition) {
        let failing = self.database_failing_since_unix_s;
        text.family(
            "spoolite_database_up",
            "gauge",
            "1 while the database works; 0 from a failed try until a try works again.",
            &[sample("", &u8::from(failing.is_none()))],
        );
        text.family(
            "spoolite_database_unreachable",
            "gauge",
            "1 while the latest try could not reach the database server (no connection, or it was lost).",
            &[sample(
                "",
                &u8::from(failing.is_some() && self.database_unreachable),
            )],
        );
        text.family(
            "spoolite_database_failing_since_timestamp_seconds",
            "gauge",
            "Unix time of the first failed try of the database while it keeps failing (0: it works).",
            &[sample("", &failing.unwrap_or(0.0))],
        );
    }

    fn render_sizes(&self, text: &mut Exposition) {
        let sizes = [
            (
                "spoolite_database_bytes",
                "Bytes of the SQLite database file.",
                self.database_bytes,
            ),
            (
                "spoolite_wal_bytes",
                "Bytes of the SQLite database's write-ahead log (its -wal file).",
                self.wal_bytes,
            ),
            (
                "spoolite_archive_bytes",
                "Bytes of the regular files in archive/ (counted in full at start and once \
                 per --rescan, raised by each file archived in between).",
                self.archive_bytes,
            ),
        ];
        for (name, help, bytes) in sizes {
            if let Some(bytes) = bytes {
                text.family(name, "gauge", help, &[sample("", &bytes)]);
            }
        }
        if let Some(quality) = self.flight_quality {
            text.family(
                "spoolite_flights_open",
                "gauge",
                "Flights with a live off-blocks and no live on-blocks for over a day: their \
                 block time counts nothing (counted again after batches, at most once per \
                 --rescan, and hourly).",
                &[sample("", &quality.flights_open)],
            );
            text.family(
                "spoolite_flights_negative_block",
                "gauge",
                "Flights whose on-blocks is before their off-blocks: no block time is counted.",
                &[sample("", &quality.flights_negative_block)],
            );
        }
    }

    fn render_scans(&self, text: &mut Exposition) {
        text.family(
            "spoolite_scans_total",
            "counter",
            "Listings of incoming/ since the daemon started.",
            &[sample("", &self.scans)],
        );
    }

    fn render_durations(&self, text: &mut Exposition) {
        let mut buckets: Vec<(String, String)> = DURATION_BUCKETS_S
            .iter()
            .zip(self.duration_counts)
            .map(|(bound, count)| sample(&format!("_bucket{{le=\"{bound}\"}}"), &count))
            .collect();
        buckets.push(sample("_bucket{le=\"+Inf\"}", &self.duration_count));
        buckets.push(sample("_sum", &self.duration_sum_s));
        buckets.push(sample("_count", &self.duration_count));
        text.family(
            "spoolite_ingest_duration_seconds",
            "histogram",
            "Time to ingest and move one file.",
            &buckets,
        );
    }

    /// Writes the metrics to `path` atomically.
    pub(crate) fn write(&self, path: &Path) -> io::Result<()> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        crate::spool::write_atomic(dir, &name, self.render().as_bytes())
    }
}

/// The exposition text being written, one metric family at a time.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    /// A family's `HELP` and `TYPE` lines, then its samples: each is the name, a
    /// suffix (labels, or `_sum` and the like) and the value.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: &[(String, String)]) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (suffix, value) in samples {
            let _ = writeln!(self.out, "{name}{suffix} {value}");
        }
    }
}

/// A sample's suffix and its value as written.
fn sample(suffix: &str, value: &dyn std::fmt::Display) -> (String, String) {
    (suffix.to_owned(), value.to_string())
}

/// A sample labelled with an outcome.
fn by_outcome(word: &str, value: u64) -> (String, String) {
    sample(&format!("{{outcome=\"{word}\"}}"), &value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_database_is_down_since_its_first_failed_try() {
        let metrics = Metrics {
            database_failing_since_unix_s: Some(1_764_582_229.5),
            database_unreachable: true,
            ..Metrics::default()
        };
        let text = metrics.render();
        assert!(text.contains("\nspoolite_database_up 0\n"), "{text}");
        assert!(
            text.contains("\nspoolite_database_unreachable 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\nspoolite_database_failing_since_timestamp_seconds 1764582229.5\n"),
            "{text}"
        );
    }

    #[test]
    fn exposition_groups_samples_under_their_family() {
        let mut metrics = Metrics {
            files_processed: 2,
            files_waiting: 1,
            ..Metrics::default()
        };
        metrics.observe_duration(Duration::from_millis(20));
        let text = metrics.render();
        assert!(text.contains(
            "# TYPE spoolite_files_total counter\nspoolite_files_total{outcome=\"processed\"} 2\n"
        ));
        assert!(text.contains("spoolite_ingest_duration_seconds_bucket{le=\"0.01\"} 0\n"));
        assert!(text.contains("spoolite_ingest_duration_seconds_bucket{le=\"0.025\"} 1\n"));
        assert!(text.contains("spoolite_ingest_duration_seconds_count 1\n"));
        assert!(text.contains("# TYPE spoolite_files_waiting gauge\nspoolite_files_waiting 1\n"));
        assert!(text.contains("\nspoolite_database_up 1\n"));
        assert!(text.contains("\nspoolite_database_failing_since_timestamp_seconds 0\n"));
        // Every sample line belongs to the family declared above it.
        let mut family = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap();
            } else if !line.starts_with('#') {
                assert!(line.starts_with(family), "{line} under {family}");
            }
        }
    }
}
