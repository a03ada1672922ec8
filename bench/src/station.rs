//! A station's file into a large database against the same file into an empty
//! one (issue 36: a file's cost must not grow with the database), on SQLite
//! (section 5, into the growth database) and on PostgreSQL (section P, into a
//! database holding the main file).
//!
//! `FILES` files of `EVENTS` new events each, the generator's next days after
//! everything the large database holds, each ingested by `spoolite ingest --json
//! --db DB FILE` (or, for the floor's figure beside spoolite's in section 5, by
//! the floor) into the large database and then into the empty one (a database
//! holding the schema and the files before it), timed as processes, spawn to
//! exit. One file goes into each first and is not counted: it warms both
//! databases (and makes the empty one's schema where nothing made it before).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::child;
use crate::generate::{self, BatchSpec, Layout};
use crate::table::{self, Row, Target};
use crate::{BenchResult, progress};

/// Events in a station's file, as the issue measures them.
pub const EVENTS: u64 = 500;
/// Files counted, besides the one that goes in first.
const FILES: u64 = 5;
/// Issue 36's target: a file into the large database at most this times its
/// cost into the empty one.
const RATIO_MAX: f64 = 1.5;

/// The station's files: their paths, the first one not counted.
pub struct Files {
    paths: Vec<PathBuf>,
    /// Where the ingests' logs go (each run's replaces the one before).
    log: PathBuf,
}

impl Files {
    /// Writes the files into `dir`, their events from `offset` on (past every
    /// event of the large database).
    pub fn write(dir: &Path, seed: u64, offset: u64) -> BenchResult<Files> {
        let mut paths = Vec::new();
        for at in 0..=FILES {
            let spec = BatchSpec {
                offset: offset + at * EVENTS,
                count: EVENTS,
                revision: 1,
                crew_changed: false,
                batch_id: format!("station-{at}"),
            };
            let path = dir.join(format!("station-{at}.ndjson"));
            generate::write_batch_file(&path, seed, &spec, Layout::Ndjson)?;
            paths.push(path);
        }
        Ok(Files {
            paths,
            log: dir.join("station-ingest.log"),
        })
    }

    /// The events of every file, the one not counted included: what the large
    /// database holds more after `compare`.
    pub fn events(&self) -> u64 {
        self.paths.len() as u64 * EVENTS
    }

    /// Ingests each file into `large` and then into `empty` (`--db` values) with
    /// `spoolite ingest`, and returns the row judged against the target and a note
    /// of every run.
    pub fn compare(
        self,
        spoolite: &Path,
        section: (&str, u64),
        large: &str,
        empty: &str,
    ) -> BenchResult<(Row, String)> {
        let log = self.log.clone();
        let who = "`spoolite ingest`";
        let (row, runs) = self.compare_with(section, who, (large, empty), |db, path| {
            Ok(ingest(spoolite, db, path, &log, EVENTS)?.wall.as_secs_f64())
        })?;
        let row = row.times(
            runs.ratio,
            "the empty db",
            Target::AtMost(RATIO_MAX),
            "≤ 1.5× empty (issue 36)",
        );
        Ok((row, runs.text))
    }

    /// Ingests each file into `large` and then into `empty` by `seconds` (the
    /// time one file took into one database, by the program `who` names), and
    /// returns the row, not yet judged, and the runs.
    pub fn compare_with(
        self,
        (section, large_rows): (&str, u64),
        who: &str,
        (large, empty): (&str, &str),
        mut seconds: impl FnMut(&str, &Path) -> BenchResult<f64>,
    ) -> BenchResult<(Row, Runs)> {
        let mut timed = || -> BenchResult<(Vec<f64>, Vec<f64>)> {
            let (mut into_large, mut into_empty) = (Vec::new(), Vec::new());
            for (at, path) in self.paths.iter().enumerate() {
                progress(&format!(
                    "{section}: station file {at} of {FILES} into the large and the empty database"
                ));
                let (large_s, empty_s) = (seconds(large, path)?, seconds(empty, path)?);
                if at > 0 {
                    into_large.push(large_s);
                    into_empty.push(empty_s);
                }
            }
            Ok((into_large, into_empty))
        };
        let timed = timed();
        // The files go whether every run went through or not.
        for path in &self.paths {
            std::fs::remove_file(path)?;
        }
        let (into_large, into_empty) = timed?;
        let (large_s, empty_s) = (table::median(&into_large), table::median(&into_empty));
        let row = Row::info(
            section,
            &format!(
                "a station's file of {EVENTS} new events into a {}-row database, \
                 {who}, process time, median of {FILES}",
                table::count(large_rows)
            ),
            table::timed(EVENTS, large_s),
            format!("empty db: {}", table::seconds(empty_s)),
        );
        let text = format!(
            "{section}, {who}, station files in order: into the {}-row database {} · \
             into the empty one {}",
            table::count(large_rows),
            table::seconds_list(&into_large),
            table::seconds_list(&into_empty)
        );
        Ok((
            row,
            Runs {
                ratio: large_s / empty_s,
                text,
            },
        ))
    }
}

/// The counted runs of `compare_with`: the ratio of the medians (large against
/// empty) and every run in order, as a note.
pub struct Runs {
    pub ratio: f64,
    pub text: String,
}

/// `spoolite ingest --json --db DB FILE` as a process, timed spawn to exit, its
/// log into `log`; every one of `events` must be inserted.
pub fn ingest(
    spoolite: &Path,
    db: &str,
    file: &Path,
    log: &Path,
    events: u64,
) -> BenchResult<child::Measured> {
    let mut command = Command::new(spoolite);
    command
        .args(["ingest", "--json", "--db", db])
        .arg(file)
        .stderr(Stdio::from(File::create(log)?));
    let see_log = |e: Box<dyn std::error::Error>| format!("{e}; see {}", log.display());
    let measured = child::measure(command).map_err(see_log)?;
    check_ingested(&measured.stdout, events).map_err(see_log)?;
    Ok(measured)
}

/// Checks `spoolite ingest --json`'s line: processed, every event inserted.
fn check_ingested(stdout: &str, events: u64) -> BenchResult<()> {
    let line: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("spoolite ingest printed {stdout:?}: {e}"))?;
    let inserted = line["inserted"].as_u64();
    if line["outcome"] != "processed" || inserted != Some(events) {
        return Err(format!("spoolite ingest: {line}, expected {events} inserted").into());
    }
    Ok(())
}
