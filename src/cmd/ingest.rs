//! `spoolite ingest`: each file through the same `ingest` as the daemon's, a line
//! per file, a progress bar on a terminal, and an exit code for the worst outcome.

use std::io::IsTerminal;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::IngestArgs;
use crate::ingest::{self, Outcome};
use crate::names;
use crate::report;
use crate::store::{FaultClass, Store};

/// Exit code when any file was rejected.
pub(super) const EXIT_REJECTED: u8 = 1;
/// Exit code for an operating error (database, permissions, bad arguments).
const EXIT_ERROR: u8 = 2;

pub fn ingest(args: &IngestArgs) -> ExitCode {
    // An argument that names no batch file is the operator's error: nothing is
    // ingested (or created) until every one does.
    if refuse_what_is_no_batch_file(&args.files) {
        return ExitCode::from(EXIT_ERROR);
    }
    let opened = match args.dry_run {
        false => Store::open(&args.db.db),
        true => Store::open_for_dry_run(&args.db.db),
    };
    let mut store = match opened {
        Ok(store) => store,
        Err(error) => {
            eprintln!("spoolite: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let stop = AtomicBool::new(false);
    let bars = std::io::stderr().is_terminal();
    let codes = args
        .files
        .iter()
        .map(|path| ingest_one(args, &mut store, path, &stop, bars));
    ExitCode::from(codes.max().unwrap_or(0))
}

/// Names on stderr each path that names no batch file; whether there was one.
fn refuse_what_is_no_batch_file(files: &[std::path::PathBuf]) -> bool {
    let mut refused = false;
    for (path, why) in files
        .iter()
        .filter_map(|path| Some((path, not_a_batch_file(path)?)))
    {
        let shown_path = names::escaped(&path.to_string_lossy());
        eprintln!("spoolite: ingest {shown_path}: {why}");
        refused = true;
    }
    refused
}

/// Ingests one file, with a progress bar when `bars`, and prints its line;
/// returns its exit code (0, `EXIT_REJECTED` or `EXIT_ERROR`).
fn ingest_one(
    args: &IngestArgs,
    store: &mut Store,
    path: &Path,
    stop: &AtomicBool,
    bars: bool,
) -> u8 {
    // The name as recorded goes into JSON (which escapes it); the text line and
    // the logs get the escaped form, so that no name can split or forge a line.
    let file = names::base_name(path);
    let shown = names::escaped(&file);
    let bar = bars.then(|| ProgressLine::start(&shown, path));
    let report_progress = |progress: ingest::Progress| {
        if let Some(bar) = &bar {
            bar.update(progress);
        }
    };
    let options = ingest::Options {
        file_bytes_max: args.file_bytes_max.file_bytes_max,
        // A file named on the command line is taken as it stands.
        limits: crate::batch::Limits {
            settled: true,
            ..args.event_bytes_max.limits()
        },
        progress: bar
            .as_ref()
            .map(|_| &report_progress as &dyn Fn(ingest::Progress)),
        dry_run: args.dry_run,
        stop,
        clock: &crate::clock::SystemClock,
    };
    let started = Instant::now();
    let result = ingest_waiting_out_locks(store, path, &shown, options);
    let elapsed = started.elapsed();
    if let Some(bar) = &bar {
        bar.finish();
    }
    match result {
        Ok(outcome) => {
            print_outcome(args, (&file, &shown), &outcome, elapsed);
            match outcome {
                Outcome::Rejected { .. } => EXIT_REJECTED,
                _ => 0,
            }
        }
        Err(error) => {
            // The error may name the path itself: escaped too, it stays one line.
            eprintln!("spoolite: {}", names::escaped(&error_line(path, &error)));
            EXIT_ERROR
        }
    }
}

/// Why `path` names nothing `ingest` reads, an operator's error: standard input,
/// a folder, a symbolic link (never followed, as in incoming/), a FIFO, a socket or
/// a device. `None` for a regular file, and for a path that does not exist (the
/// read says so).
fn not_a_batch_file(path: &Path) -> Option<String> {
    const STDIN: &str = "standard input and pipes are not read, since a batch's format \
                         comes from its file name: save the input to a file (e.g. \
                         batch.ndjson) and name that file";
    if path.as_os_str() == "-" || is_stdin_or_pipe(path) {
        return Some(STDIN.to_owned());
    }
    let kind = std::fs::symlink_metadata(path).ok()?.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some(format!(
            "a folder is not a batch file: name the files in it (e.g. {})",
            path.join("*.json").display()
        ));
    }
    if kind.is_symlink() {
        let target = std::fs::read_link(path).unwrap_or_default();
        return Some(format!(
            "a symbolic link is not followed: name the file it points to ({})",
            target.display()
        ));
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    Some(format!("{what} is not a batch file: name a regular file"))
}

/// Whether `path` is a name of standard input or of a pipe (`/dev/stdin`,
/// `/dev/fd/N`, `/proc/self/fd/N`: the names a shell's `<(…)` gives).
fn is_stdin_or_pipe(path: &Path) -> bool {
    path == Path::new("/dev/stdin")
        || path.starts_with("/dev/fd")
        || path.starts_with("/proc/self/fd")
}

/// An ingest error as one line that names the file once: after `path` unless
/// the error names it already (a file that cannot be read or changed).
fn error_line(path: &Path, error: &ingest::IngestError) -> String {
    let shown_path = path.display().to_string();
    match error {
        ingest::IngestError::Read { path, .. } | ingest::IngestError::Changed { path }
            if *path == shown_path =>
        {
            error.to_string()
        }
        _ => format!("{shown_path}: {error}"),
    }
}

/// Prints one file's outcome line (text or JSON) and warns of a re-sent batch.
fn print_outcome(
    args: &IngestArgs,
    (file, shown): (&str, &str),
    outcome: &Outcome,
    elapsed: Duration,
) {
    if args.json {
        let mut line = report::outcome_json(file, outcome);
        // The time the text line gives in seconds, in whole milliseconds.
        line["duration_ms"] = json!(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
        if args.dry_run {
            line["dry_run"] = json!(true);
        }
        println!("{line}");
    } else {
        let dry = if args.dry_run {
            " (dry run: nothing written)"
        } else {
            ""
        };
        println!(
            "{} {:.2}s{dry}",
            report::outcome_line(shown, outcome),
            elapsed.as_secs_f64()
        );
    }
    if let Outcome::Processed {
        resent_batch_id: Some(id),
        ..
    } = outcome
    {
        log::warn!(
            "{shown}: batch_id {id:?} was ingested before with other bytes (a re-sent batch)"
        );
    }
}

/// How long `ingest` keeps trying a file while the database is locked (by the
/// daemon ingesting a large batch, or an analyst): a backfill script should wait
/// for a lock, not fail on it.
const LOCKED_WAIT_MAX: Duration = Duration::from_secs(120);

/// Ingests one file, trying again with back-off while the database is locked.
fn ingest_waiting_out_locks(
    store: &mut Store,
    path: &Path,
    shown: &str,
    options: ingest::Options,
) -> Result<Outcome, ingest::IngestError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(250);
    loop {
        match ingest::ingest_file(store, path, options) {
            Err(ingest::IngestError::Store(error))
                if error.is_busy() && started.elapsed() < LOCKED_WAIT_MAX =>
            {
                log::warn!("{shown}: {error}; trying again in {delay:?}");
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            // A value the database refuses is in the file: trying again cannot help.
            Err(ingest::IngestError::Store(error)) if error.class() == FaultClass::InFile => {
                return Ok(Outcome::Rejected {
                    digest: None,
                    rejection: ingest::refused_by_database(&error, 1),
                });
            }
            result => return result,
        }
    }
}

/// The progress bar of one file on a terminal's stderr: events, megabytes, rate and
/// time left. Only made when stderr is a terminal.
struct ProgressLine {
    bar: indicatif::ProgressBar,
    started: Instant,
}

impl ProgressLine {
    fn start(shown: &str, path: &Path) -> ProgressLine {
        let total = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        // Hidden until its text is set, so that no half-made bar is drawn.
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::hidden(),
        );
        let style = indicatif::ProgressStyle::with_template("{prefix} [{bar:20}] {wide_msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(shown.to_owned());
        let line = ProgressLine {
            bar,
            started: Instant::now(),
        };
        line.update(ingest::Progress {
            bytes_total: total,
            ..Default::default()
        });
        line.bar
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
        line.bar.tick();
        line
    }

    fn update(&self, progress: ingest::Progress) {
        self.bar.set_length(progress.bytes_total);
        self.bar.set_position(progress.bytes_done);
        self.bar
            .set_message(progress_text(progress, self.started.elapsed()));
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

const MB: f64 = 1_000_000.0;

/// What the bar says beside itself: `1,234 events  12.3/45.6 MB  8.1 MB/s  4s left`.
fn progress_text(progress: ingest::Progress, elapsed: Duration) -> String {
    let done = progress.bytes_done as f64;
    let total = progress.bytes_total as f64;
    let seconds = elapsed.as_secs_f64();
    let events = if progress.events == 1 {
        "event"
    } else {
        "events"
    };
    let mut text = format!(
        "{} {events}  {:.1}/{:.1} MB",
        progress.events,
        done / MB,
        total / MB
    );
    if seconds > 0.0 && done > 0.0 {
        let rate = done / seconds;
        text.push_str(&format!("  {:.1} MB/s", rate / MB));
        let left = ((total - done).max(0.0) / rate).ceil() as u64;
        text.push_str(&format!("  {} left", duration_text(left)));
    }
    text
}

/// `45s`, `3m05s`, `1h02m`.
fn duration_text(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_the_database_refuses_is_the_files_rejection_not_an_operating_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = crate::store::Db::Sqlite(dir.path().join("spoolite.db"));
        let mut store = Store::open(&db).expect("open");
        store.limit_value_bytes_for_tests(2000);
        let file = dir.path().join("big.json");
        let payload = "x".repeat(4000);
        std::fs::write(
            &file,
            format!(
                r#"{{"events":[{{"flight_id":"TB1","event_kind":"takeoff","instant_utc":"2026-12-01T10:05:00Z","payload":{{"note":"{payload}"}}}}]}}"#
            ),
        )
        .expect("write");
        let stop = std::sync::atomic::AtomicBool::new(false);
        let options = ingest::Options {
            file_bytes_max: u64::MAX,
            limits: crate::batch::Limits::default(),
            progress: None,
            dry_run: false,
            stop: &stop,
            clock: &crate::clock::SystemClock,
        };
        match ingest_waiting_out_locks(&mut store, &file, "big.json", options) {
            Ok(Outcome::Rejected { rejection, .. }) => {
                assert_eq!(rejection.reason.code(), "too_large");
                assert!(
                    rejection.detail.contains("--event-bytes-max"),
                    "{}",
                    rejection.detail
                );
            }
            other => panic!("expected a too_large rejection, got {other:?}"),
        }
    }

    #[test]
    fn the_progress_bar_says_events_megabytes_rate_and_time_left() {
        let progress = |bytes_done, bytes_total, events| ingest::Progress {
            bytes_done,
            bytes_total,
            events,
        };
        assert_eq!(
            progress_text(progress(0, 45_600_000, 0), Duration::ZERO),
            "0 events  0.0/45.6 MB"
        );
        assert_eq!(
            progress_text(
                progress(12_300_000, 45_600_000, 1234),
                Duration::from_secs(2)
            ),
            "1234 events  12.3/45.6 MB  6.2 MB/s  6s left"
        );
        assert_eq!(
            progress_text(progress(1_000_000, 400_000_000, 9), Duration::from_secs(1)),
            "9 events  1.0/400.0 MB  1.0 MB/s  6m39s left"
        );
        assert_eq!(
            progress_text(progress(100, 200, 1), Duration::ZERO),
            "1 event  0.0/0.0 MB"
        );
        assert_eq!(duration_text(3720), "1h02m");
    }
}
