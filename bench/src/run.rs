//! The benchmark run: generates the files, runs each section in order (first
//! ingest and the floors, re-drop, updates, growth, analyst queries, peer, latency,
//! idle, backlog, memory, PostgreSQL), and writes
//! the table to stdout and OUT/results.md. A section that fails becomes a row that
//! says why; the others still run.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::child::{self, ChildReport};
use crate::fairfloor::{self, Variant};
use crate::files::{READ_BUFFER_BYTES, warm};
use crate::generate::{self, BatchSpec, Layout};
use crate::station;
use crate::table::{self, Floor, Row, Target};
use crate::{
    BenchResult, Options, analyst, backlog, datasette, idle, latency, machine, peer, postgres,
    progress,
};

// The targets against the floors of `../shared/perf-floor` are in
// `fairfloor::VARIANTS`.
/// Issue 5's target against the bench's own floor, kept as a second line.
const FLOOR_RATIO_MAX: f64 = 1.5;
/// Issue 36's targets for section 4 and the growth figure.
const UNCHANGED_RATIO_MAX: f64 = 0.35;
const UPDATED_RATIO_MAX: f64 = 1.0;
const DRY_RUN_RATIO_MAX: f64 = 0.35;
const REDROP_RATIO_MAX: f64 = 1.2;
const RSS_BYTES_MAX: u64 = 128 * 1024 * 1024;
const RSS_SPREAD_MAX: f64 = 0.10;
const GROWTH_RATIO_MIN: f64 = 0.5;
/// Section 5's rows of the floor's own growth, beside spoolite's.
const FLOOR_GROWTH: &str = "the bulk+crew floor's own growth";
/// Issue 20: each analyst query on PostgreSQL within this many times SQLite's.
const PG_ANALYST_RATIO_MAX: f64 = 2.0;
const PEER_SPEEDUP_MIN: f64 = 10.0;
/// 0.3 s of CPU per 60 s idle.
const IDLE_CORE_SHARE_MAX: f64 = 0.005;
/// A large backlog's files/s against a small one's, and its first window's against
/// its last (either way round).
const BACKLOG_RATIO_MIN: f64 = 0.8;
const BACKLOG_SPREAD_MAX: f64 = 1.5;

/// The idle daemon's --rescan, and how long it runs before the window opens.
const IDLE_RESCAN: &str = "30s";
const IDLE_SETTLE: Duration = Duration::from_secs(5);

/// A generated batch file.
#[derive(Debug, Clone)]
struct BatchFile {
    path: PathBuf,
    bytes: u64,
    events: u64,
}

/// The files built from the main events: the first version in both formats, the
/// newer revision, and the newer revision again under another batch_id.
#[derive(Debug, Clone)]
struct MainFiles {
    json: BatchFile,
    ndjson: BatchFile,
    /// The .ndjson file gzipped, as a site sends it.
    ndjson_gz: BatchFile,
    updates: BatchFile,
    updates_again: BatchFile,
}

/// Why the fair floor was not run, and whether that is a failure (or the smoke
/// run's skip).
#[derive(Debug, Clone)]
struct FloorMissing {
    why: String,
    failed: bool,
}

/// One measured first ingest.
#[derive(Debug, Clone, Copy)]
struct Ingested {
    /// `ingest_file` alone (the floor: its loop alone).
    seconds: f64,
    /// The child process from spawn to exit: opening the database, and closing it
    /// (the WAL checkpoint) included.
    wall_s: f64,
    peak_rss_bytes: u64,
}

struct Bench {
    options: Options,
    data: PathBuf,
    dbs: PathBuf,
    rows: Vec<Row>,
    notes: Vec<String>,
    problems: Vec<String>,
    main: Option<MainFiles>,
    first_json: Option<Ingested>,
    /// The same first ingest with the secondary indexes kept throughout (no
    /// sorted builds): the write path that sections 4 and 5 take.
    first_json_kept: Option<Ingested>,
    first_ndjson: Option<Ingested>,
    /// The growth section's database and its rows, kept for section A.
    grown_db: Option<(PathBuf, u64)>,
    /// The fair floor once built (or why not), for every section that runs it.
    fair: Option<Result<fairfloor::Built, FloorMissing>>,
}

type Section = fn(&mut Bench) -> BenchResult<()>;

/// Runs the whole benchmark described by `options`.
pub fn bench(options: Options) -> BenchResult<ExitCode> {
    let data = options.out.join("data");
    let dbs = options.out.join("db");
    std::fs::create_dir_all(&data)?;
    std::fs::create_dir_all(&dbs)?;
    let mut bench = Bench {
        options,
        data,
        dbs,
        rows: Vec::new(),
        notes: Vec::new(),
        problems: Vec::new(),
        main: None,
        first_json: None,
        first_json_kept: None,
        first_ndjson: None,
        grown_db: None,
        fair: None,
    };
    let sections: [(&str, &str, Section); 13] = [
        ("0", "generate files", Bench::generate),
        ("1–2", "first ingest and floors", Bench::first_ingest),
        ("3", "re-drop", Bench::redrop),
        ("4", "updates", Bench::updates),
        ("5", "growth", Bench::growth),
        ("A", "analyst queries", Bench::analyst),
        ("6", "sqlite-utils peer", Bench::peer),
        ("7", "latency", Bench::latency),
        ("8", "idle", Bench::idle),
        ("9", "backlog", Bench::backlog),
        ("F", "formats and slots", Bench::formats),
        ("M", "memory flatness", Bench::flatness),
        ("P", "PostgreSQL", Bench::postgres),
    ];
    for (number, name, section) in sections {
        if chosen(&bench.options.only, number) {
            bench.attempt(number, name, section);
        }
    }
    bench.finish()
}

/// Whether `--only` picks the section `number` ("1–2" answers to 1 and 2). The
/// generated files (section 0) are made for every section but the daemon's idle and
/// backlog, which make their own.
fn chosen(only: &[String], number: &str) -> bool {
    let picked = |n: &str| only.iter().any(|o| o == n);
    only.is_empty()
        || number.split('–').any(picked)
        || number == "0" && only.iter().any(|o| o != "8" && o != "9" && o != "F")
}

impl Bench {
    fn events(&self) -> u64 {
        self.options.events
    }

    fn main_files(&self) -> BenchResult<MainFiles> {
        self.main
            .clone()
            .ok_or_else(|| "the files were not generated".into())
    }

    /// Runs one section; a failure becomes a row and a problem.
    fn attempt(&mut self, number: &str, name: &str, section: Section) {
        progress(&format!("section {number}: {name}"));
        let started = Instant::now();
        if let Err(error) = section(self) {
            self.rows
                .push(Row::skipped(number, name, error.to_string()));
            self.problems.push(format!("{name}: {error}"));
        }
        progress(&format!(
            "section {number} done in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }

    fn generate(&mut self) -> BenchResult<()> {
        let spec = BatchSpec {
            offset: 0,
            count: self.events(),
            revision: 1,
            crew_changed: false,
            batch_id: "bench-events".into(),
        };
        let newer = BatchSpec {
            revision: 2,
            crew_changed: true,
            batch_id: "bench-updates".into(),
            ..spec.clone()
        };
        let newer_again = BatchSpec {
            batch_id: "bench-updates-again".into(),
            ..newer.clone()
        };
        let ndjson = self.write(&spec, Layout::Ndjson, "events.ndjson")?;
        let ndjson_gz = gzipped(&ndjson)?;
        self.main = Some(MainFiles {
            json: self.write(&spec, Layout::Json, "events.json")?,
            ndjson,
            ndjson_gz,
            updates: self.write(&newer, Layout::Json, "updates.json")?,
            updates_again: self.write(&newer_again, Layout::Json, "updates-again.json")?,
        });
        Ok(())
    }

    fn write(&self, spec: &BatchSpec, layout: Layout, name: &str) -> BenchResult<BatchFile> {
        let path = self.data.join(name);
        let bytes = generate::write_batch_file(&path, self.options.seed, spec, layout)?;
        Ok(BatchFile {
            path,
            bytes,
            events: spec.count,
        })
    }

    /// Sections 1 and 2: the .json file into an empty database once, beside the
    /// bench's floor, and its dry run; then `--repeat` rounds of the .ndjson file
    /// into an empty database, the bench's floor, and the fair floor's variants,
    /// interleaved, each on a fresh database with the file just read (page cache).
    fn first_ingest(&mut self) -> BenchResult<()> {
        let files = self.main_files()?;
        let json = &files.json;
        warm(&json.path)?;
        let ingested = self.ingest_expecting("first-json.db", json, "inserted")?;
        let floor = self.own_floor("json", json)?;
        self.first_ingest_rows("json", json, ingested, floor);
        self.first_json = Some(ingested);
        self.dry_run(json, ingested)?;
        let db = self.fresh_db("first-json-kept.db")?;
        let kept = self.ingest_into_with(&db, json, "inserted", &["--keep-indexes"])?;
        remove_db(&db)?;
        self.first_json_kept = Some(kept);
        let ratio = kept.seconds / ingested.seconds;
        self.rows.push(Row::info(
            "1",
            &format!(
                "first ingest, {} events .json, the indexes kept throughout (no sorted builds)",
                table::count(json.events)
            ),
            table::timed(json.events, kept.seconds),
            format!(
                "first ingest as shipped {} ({ratio:.2}×)",
                table::seconds(ingested.seconds)
            ),
        ));

        let ndjson = &files.ndjson;
        let fair = self.fair_floor();
        let (mut spoolite, mut own) = (Vec::new(), Vec::new());
        let (mut gz_runs, mut gunzip_runs) = (Vec::new(), Vec::new());
        let variants = fairfloor::VARIANTS;
        let mut floors: Vec<Vec<fairfloor::FloorRun>> =
            variants.iter().map(|_| Vec::new()).collect();
        let rounds = self.options.repeat.max(1);
        for round in 1..=rounds {
            progress(&format!(
                ".ndjson first ingest and floors, round {round} of {rounds}"
            ));
            warm(&ndjson.path)?;
            spoolite.push(self.ingest_expecting("first-ndjson.db", ndjson, "inserted")?);
            remove_db(&self.dbs.join("first-ndjson.db"))?;
            warm(&files.ndjson_gz.path)?;
            gz_runs.push(self.ingest_expecting(
                "first-ndjson-gz.db",
                &files.ndjson_gz,
                "inserted",
            )?);
            remove_db(&self.dbs.join("first-ndjson-gz.db"))?;
            gunzip_runs.push(gunzip_seconds(&files.ndjson_gz.path)?);
            warm(&ndjson.path)?;
            own.push(self.own_floor("ndjson", ndjson)?);
            if let Ok(built) = &fair {
                for (variant, runs) in variants.iter().zip(floors.iter_mut()) {
                    warm(&ndjson.path)?;
                    let db = self.fresh_db("fair-floor.db")?;
                    runs.push(fairfloor::run(
                        &built.exe,
                        *variant,
                        &db,
                        &ndjson.path,
                        ndjson.events,
                    )?);
                    remove_db(&db)?;
                }
            }
        }
        let ingested = median_ingest(&spoolite);
        let floor = median_ingest(&own);
        self.first_ingest_rows("ndjson", ndjson, ingested, floor);
        self.gzip_row(&files.ndjson_gz, ingested, &gz_runs, &gunzip_runs);
        self.first_ndjson = Some(ingested);
        match fair {
            Ok(built) => {
                for (variant, runs) in variants.iter().zip(&floors) {
                    self.fair_floor_row(ndjson, &spoolite, *variant, runs);
                }
                let runs: Vec<String> = variants
                    .iter()
                    .zip(&floors)
                    .map(|(variant, runs)| {
                        format!(
                            "`{}` (its own elapsed_s, median, {})",
                            variant.command_line(),
                            table::seconds(median_of(runs, |r| r.elapsed_s))
                        )
                    })
                    .collect();
                self.notes.push(format!(
                    "fair floor: `spoolite-perf-limit` from {} ({} file(s) copied, `cargo build --release` {:.1} s), run as {}; spoolite's `ingest_file` alone (median) {}",
                    built.source.display(),
                    built.files_copied,
                    built.build_seconds,
                    runs.join(", "),
                    table::seconds(ingested.seconds),
                ));
            }
            Err(missing) => {
                for variant in variants {
                    self.rows.push(Row::skipped(
                        "1–2",
                        &format!(
                            "first ingest .ndjson against the fair floor `{}`",
                            variant.name
                        ),
                        missing.why.clone(),
                    ));
                }
                if missing.failed {
                    self.problems.push(format!("fair floor: {}", missing.why));
                } else {
                    self.notes
                        .push(format!("fair floor not run: {}", missing.why));
                }
            }
        }
        Ok(())
    }

    /// The fair floor, copied and built (once a run); or why not. The smoke run builds it only
    /// when a build is there already (an unchanged copy costs cargo a second; a
    /// first release build takes minutes on two cores), and otherwise skips it;
    /// the full run always builds it.
    fn fair_floor(&mut self) -> Result<fairfloor::Built, FloorMissing> {
        if let Some(fair) = &self.fair {
            return fair.clone();
        }
        let fair = self.build_fair_floor();
        self.fair = Some(fair.clone());
        fair
    }

    fn build_fair_floor(&self) -> Result<fairfloor::Built, FloorMissing> {
        let failed = |why: String| FloorMissing { why, failed: true };
        let source = match fairfloor::resolve(self.options.perf_floor.as_deref()) {
            Ok(source) => source,
            // A smoke run proves the bench works; the floor's source lies outside
            // the repository, so a clone alone runs without it and says so.
            Err(why) if self.options.smoke => {
                let why = format!("smoke run without the fair floor: {why}");
                progress(&format!("fair floor: {why}"));
                return Err(FloorMissing { why, failed: false });
            }
            Err(why) => return Err(failed(why)),
        };
        let copy = fairfloor::build_dir().map_err(|e| failed(e.to_string()))?;
        if self.options.smoke && !fairfloor::is_built(&copy) {
            let why = format!(
                "smoke run: no build of the fair floor under {} yet, and a first release \
                 build takes minutes, so the smoke run skips building it (the full run \
                 builds it there; smoke runs after that reuse it)",
                copy.display()
            );
            progress(&format!("fair floor: {why}"));
            return Err(FloorMissing { why, failed: false });
        }
        progress(&format!(
            "fair floor: copying {} to {} and running `cargo build --release` there",
            source.display(),
            copy.display()
        ));
        let built = fairfloor::build(&source, &copy).map_err(|e| failed(e.to_string()))?;
        progress(&format!(
            "fair floor: {} ({} file(s) copied, built in {:.1} s)",
            built.exe.display(),
            built.files_copied,
            built.build_seconds
        ));
        Ok(built)
    }

    /// The bench's own floor on `file`, a fresh database.
    fn own_floor(&mut self, extension: &str, file: &BatchFile) -> BenchResult<Ingested> {
        let floor_db = self.fresh_db(&format!("floor-{extension}.db"))?;
        let (floor, floor_run) = child::run_child("__floor", &floor_db, &file.path)?;
        expect(&floor, "floor", "inserted", file.events)?;
        remove_db(&floor_db)?;
        let note = format!(
            "the bench's floor .{extension}: wrote into `{}`",
            floor.table.as_deref().unwrap_or("?")
        );
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
        Ok(Ingested {
            seconds: floor.seconds,
            wall_s: floor_run.wall.as_secs_f64(),
            peak_rss_bytes: floor_run.peak_rss_bytes,
        })
    }

    /// The row of spoolite's .ndjson first ingest against one fair floor variant:
    /// both timed as processes, spawn to exit (the floor's own time runs to its
    /// database's close, WAL checkpoint included; so does a process's).
    fn fair_floor_row(
        &mut self,
        file: &BatchFile,
        spoolite: &[Ingested],
        variant: Variant,
        runs: &[fairfloor::FloorRun],
    ) {
        let n = file.events;
        let ours = median_of(spoolite, |r| r.wall_s);
        let floor = median_of(runs, |r| r.wall_s);
        let ratio = ours / floor;
        self.rows.push(
            Row::info(
                "1–2",
                &format!(
                    "first ingest, {} events .ndjson, empty db, process time (median of {}, interleaved)",
                    table::count(n),
                    spoolite.len()
                ),
                table::timed(n, ours),
                format!(
                    "fair floor `{}` {} = {}, peak RSS {}",
                    variant.name,
                    table::seconds(floor),
                    table::rate(n, floor),
                    table::mebibytes(runs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0))
                ),
            )
            .times(
                ratio,
                &format!("`{}`", variant.name),
                Target::AtMost(variant.limit),
                variant.target,
            ),
        );
    }

    /// The .json file as `spoolite ingest --dry-run` runs it before the first ingest
    /// (no database yet: against an empty one in memory).
    fn dry_run(&mut self, file: &BatchFile, first: Ingested) -> BenchResult<()> {
        let db = self.fresh_db("dry-run.db")?;
        warm(&file.path)?;
        let (report, _) = child::run_child_with("__ingest", &["--dry-run"], &db, &file.path)?;
        expect(&report, "processed", "inserted", file.events)?;
        if db.exists() {
            return Err("the dry run created its database".into());
        }
        let ratio = report.seconds / first.seconds;
        self.rows.push(
            Row::info(
                "1",
                &format!(
                    "`--dry-run` of the {} events .json, no database yet",
                    table::count(file.events)
                ),
                table::timed(file.events, report.seconds),
                format!("first ingest {}", table::seconds(first.seconds)),
            )
            .times(
                ratio,
                "first ingest",
                Target::AtMost(DRY_RUN_RATIO_MAX),
                "≤ 0.35× first ingest",
            ),
        );
        Ok(())
    }

    /// Section F: the same flights' movements as NDJSON without and with a slot, as
    /// CSV flight rows and as one AIDX message (`formats`), each into an empty
    /// database, `--repeat` rounds interleaved; each format's rate against the
    /// plain NDJSON's of the same rounds, and the slots' cost.
    fn formats(&mut self) -> BenchResult<()> {
        let flights = (self.events() / 4).max(1);
        let sizes = crate::formats::write_all(&self.data, flights)?;
        let files: Vec<BatchFile> = crate::formats::NAMES
            .iter()
            .zip(sizes)
            .map(|(name, bytes)| BatchFile {
                path: self.data.join(name),
                bytes,
                events: flights * 4,
            })
            .collect();
        let mut runs: Vec<Vec<Ingested>> = files.iter().map(|_| Vec::new()).collect();
        let rounds = self.options.repeat.max(1);
        for round in 1..=rounds {
            progress(&format!("formats, round {round} of {rounds}"));
            for (file, runs) in files.iter().zip(runs.iter_mut()) {
                warm(&file.path)?;
                runs.push(self.ingest_expecting("formats.db", file, "inserted")?);
                remove_db(&self.dbs.join("formats.db"))?;
            }
        }
        let medians: Vec<Ingested> = runs.iter().map(|r| median_ingest(r)).collect();
        let plain = medians[0];
        let mut reading = Vec::with_capacity(files.len());
        for file in &files {
            reading.push(crate::formats::read_alone(&file.path, rounds)?);
        }
        let section_1 = self.first_ndjson;
        for (i, what, target, goal) in [
            (
                1,
                "NDJSON, every event with a slot",
                Target::AtLeast(1.0 / 1.1),
                "slots cost ≤ 10 % (issue 35)",
            ),
            (
                2,
                "CSV flight rows (slot 1)",
                Target::AtLeast(0.8),
                "≥ 0.8× the NDJSON rate (issue 35)",
            ),
            (
                3,
                "AIDX XML, one leg per flight (RepeatNumber 1)",
                Target::AtLeast(0.8),
                "≥ 0.8× the NDJSON rate (issue 35)",
            ),
        ] {
            let file = &files[i];
            let ingested = medians[i];
            let ratio = plain.seconds / ingested.seconds;
            let against_1 = section_1
                .map(|n| {
                    format!(
                        "; section 1's .ndjson {}",
                        table::rate(self.events(), n.seconds)
                    )
                })
                .unwrap_or_default();
            self.rows.push(
                Row::info(
                    "F",
                    &format!(
                        "first ingest, {} events as {what} ({}), empty db (median of {}, interleaved)",
                        table::count(file.events),
                        table::mebibytes(file.bytes),
                        runs[i].len()
                    ),
                    format!(
                        "{} = {}; peak RSS {}; reading alone {}",
                        table::seconds(ingested.seconds),
                        table::rate(file.events, ingested.seconds),
                        table::mebibytes(ingested.peak_rss_bytes),
                        table::seconds(reading[i])
                    ),
                    format!(
                        "the same flights as NDJSON without a slot {} = {}; reading alone \
                         {}{against_1}",
                        table::seconds(plain.seconds),
                        table::rate(files[0].events, plain.seconds),
                        table::seconds(reading[0])
                    ),
                )
                .judged(ratio, format!("{ratio:.2}× the NDJSON rate"), target, goal),
            );
        }
        Ok(())
    }

    /// The .ndjson.gz first ingest against the .ndjson one of the same rounds, with
    /// the decompression alone beside it.
    fn gzip_row(&mut self, gz: &BatchFile, ndjson: Ingested, runs: &[Ingested], gunzip: &[f64]) {
        let ingested = median_ingest(runs);
        let ratio = ndjson.seconds / ingested.seconds;
        let unzip = gunzip.iter().copied().fold(f64::INFINITY, f64::min);
        self.rows.push(
            Row::info(
                "1",
                &format!(
                    "first ingest, {} events .ndjson.gz ({}), empty db (median of {}, interleaved with .ndjson)",
                    table::count(gz.events),
                    table::mebibytes(gz.bytes),
                    runs.len()
                ),
                format!(
                    "{} = {}; decompression alone {}; peak RSS {}",
                    table::seconds(ingested.seconds),
                    table::rate(gz.events, ingested.seconds),
                    table::seconds(unzip),
                    table::mebibytes(ingested.peak_rss_bytes)
                ),
                format!(".ndjson {}", table::seconds(ndjson.seconds)),
            )
            .judged(
                ratio,
                format!("{ratio:.2}× the .ndjson rate"),
                Target::AtLeast(0.8),
                "≥ 0.8× the .ndjson rate (issue 35)",
            ),
        );
    }

    fn first_ingest_rows(
        &mut self,
        extension: &str,
        file: &BatchFile,
        ingested: Ingested,
        floor: Ingested,
    ) {
        let n = file.events;
        let bench_floor = Floor {
            seconds: floor.seconds,
            events: n,
            limit: FLOOR_RATIO_MAX,
            baseline: "the bench's floor",
            ratio: "the bench's floor",
        };
        let measure = format!(
            "first ingest, {} events .{extension} ({}), empty db",
            table::count(n),
            table::mebibytes(file.bytes)
        );
        let value = format!(
            "{} = {}, {}",
            table::seconds(ingested.seconds),
            table::rate(n, ingested.seconds),
            table::throughput(file.bytes, ingested.seconds)
        );
        self.rows.push(Row::against_floor(
            "1–2",
            &measure,
            value,
            ingested.seconds,
            &bench_floor,
            "≤ 1.5× the bench's floor (issue 5)",
        ));
        let rss = ingested.peak_rss_bytes;
        self.rows.push(
            Row::info(
                "1",
                &format!("peak RSS, first ingest .{extension}"),
                table::mebibytes(rss),
                format!("floor {}", table::mebibytes(floor.peak_rss_bytes)),
            )
            .judged(
                rss as f64,
                String::new(),
                Target::AtMost(RSS_BYTES_MAX as f64),
                "≤ 128 MiB",
            ),
        );
    }

    /// Ingests `file` into a new database `db_name` in a child; every event must
    /// have the outcome `count`.
    fn ingest_expecting(
        &self,
        db_name: &str,
        file: &BatchFile,
        count: &str,
    ) -> BenchResult<Ingested> {
        let db = self.fresh_db(db_name)?;
        self.ingest_into(&db, file, count)
    }

    fn ingest_into(&self, db: &Path, file: &BatchFile, count: &str) -> BenchResult<Ingested> {
        self.ingest_into_with(db, file, count, &[])
    }

    fn ingest_into_with(
        &self,
        db: &Path,
        file: &BatchFile,
        count: &str,
        flags: &[&str],
    ) -> BenchResult<Ingested> {
        progress(&format!(
            "ingest {} into {} {}",
            file.path.display(),
            db.display(),
            flags.join(" ")
        ));
        let (report, measured) = child::run_child_with("__ingest", flags, db, &file.path)?;
        expect(&report, "processed", count, file.events)?;
        Ok(Ingested {
            seconds: report.seconds,
            wall_s: measured.wall.as_secs_f64(),
            peak_rss_bytes: measured.peak_rss_bytes,
        })
    }

    /// Section 3: the .json file again into the database that holds it, against
    /// reading the file once through SHA-256.
    fn redrop(&mut self) -> BenchResult<()> {
        let files = self.main_files()?;
        let db = self.dbs.join("first-json.db");
        if self.first_json.is_none() {
            return Err("needs the first .json ingest".into());
        }
        let mut redrops = Vec::new();
        let mut hashes = Vec::new();
        for _ in 0..self.options.repeat.max(1) {
            hashes.push(sha256_seconds(&files.json.path)?);
            let (report, _) = child::run_child("__ingest", &db, &files.json.path)?;
            expect(&report, "skipped_duplicate", "", 0)?;
            redrops.push(report.seconds);
        }
        let (redrop, hash) = (table::median(&redrops), table::median(&hashes));
        let ratio = redrop / hash;
        let runs = redrops.len();
        self.rows.push(
            Row::info(
                "3",
                &format!("re-drop of the .json file (median of {runs})"),
                table::seconds(redrop),
                format!(
                    "SHA-256 of the file {} = {}",
                    table::seconds(hash),
                    table::throughput(files.json.bytes, hash)
                ),
            )
            .times(
                ratio,
                "SHA-256",
                Target::AtMost(REDROP_RATIO_MAX),
                "≤ 1.2× SHA-256",
            ),
        );
        Ok(())
    }

    /// Section 4: a newer revision of every event on the full table, then the same
    /// events under another batch_id.
    fn updates(&mut self) -> BenchResult<()> {
        let files = self.main_files()?;
        let first = self.first_json.ok_or("needs the first .json ingest")?;
        let db = self.dbs.join("first-json.db");
        let updated = self.ingest_into(&db, &files.updates, "updated")?;
        let unchanged = self.ingest_into(&db, &files.updates_again, "unchanged")?;
        remove_db(&db)?;
        let n = self.events();
        for (what, run, limit, target) in [
            (
                "every event `updated`",
                updated,
                UPDATED_RATIO_MAX,
                "≤ 1.0× first ingest (issue 36)",
            ),
            (
                "every event `unchanged`",
                unchanged,
                UNCHANGED_RATIO_MAX,
                "≤ 0.35× first ingest (issue 36)",
            ),
        ] {
            let against = [
                ("first ingest", Some(first)),
                ("first ingest, indexes kept", self.first_json_kept),
            ];
            for (name, first) in against {
                let Some(first) = first else { continue };
                let ratio = run.seconds / first.seconds;
                self.rows.push(
                    Row::info(
                        "4",
                        &format!("{} events, {what}, full table", table::count(n)),
                        table::timed(n, run.seconds),
                        format!("{name} {}", table::seconds(first.seconds)),
                    )
                    .times(ratio, name, Target::AtMost(limit), target),
                );
            }
        }
        Ok(())
    }

    /// Section 6: sqlite-utils upserts the same rows, keys precomputed.
    fn peer(&mut self) -> BenchResult<()> {
        if self.options.skip_peer {
            self.rows.push(Row::skipped(
                "6",
                "sqlite-utils upsert",
                "--skip-peer".into(),
            ));
            return Ok(());
        }
        let files = self.main_files()?;
        let exe = match peer::install(&self.options.out) {
            Ok(exe) => exe,
            Err(why) => {
                self.rows
                    .push(Row::skipped("6", "sqlite-utils upsert", why));
                return Ok(());
            }
        };
        let n = self.events();
        let digest = sha256_hex(&files.json.path)?;
        let rows = self.data.join("rows.ndjson");
        let now = spoolite::clock::now_utc();
        let spec = BatchSpec {
            offset: 0,
            count: n,
            revision: 1,
            crew_changed: false,
            batch_id: String::new(),
        };
        generate::write_rows_file(&rows, self.options.seed, &spec, &digest, &now)?;
        let db = self.fresh_db("peer.db")?;
        peer::create_db(&db)?;
        progress(&format!("sqlite-utils upsert of {} rows", table::count(n)));
        let measured = peer::upsert(&exe, &db, &rows)?;
        let stored = peer::rows_in(&db)?;
        if stored != n {
            return Err(format!("sqlite-utils stored {stored} rows, expected {n}").into());
        }
        remove_db(&db)?;
        let peer_seconds = measured.wall.as_secs_f64();
        self.notes.push(format!(
            "peer: {}, peak RSS {}",
            peer::version(&exe),
            table::mebibytes(measured.peak_rss_bytes)
        ));
        for (extension, first) in [("json", self.first_json), ("ndjson", self.first_ndjson)] {
            let Some(first) = first else { continue };
            let speedup = peer_seconds / first.seconds;
            self.rows.push(
                Row::info(
                    "6",
                    &format!("speed-up over `sqlite-utils upsert`, .{extension}"),
                    table::timed(n, first.seconds),
                    format!("sqlite-utils {}", table::timed(n, peer_seconds)),
                )
                .judged(
                    speedup,
                    format!("{speedup:.1}× faster"),
                    Target::AtLeast(PEER_SPEEDUP_MIN),
                    "≥ 10×",
                ),
            );
        }
        Ok(())
    }

    /// Section 5: the .json file into a database that already holds
    /// `--growth-base` rows, built from files of `--events` each.
    fn growth(&mut self) -> BenchResult<()> {
        let base = self.options.growth_base;
        if base == 0 {
            self.rows
                .push(Row::skipped("5", "growth", "--growth-base 0".into()));
            return Ok(());
        }
        let files = self.main_files()?;
        let first = self.first_json.ok_or("needs the first .json ingest")?;
        let db = self.fresh_db("growth.db")?;
        let rates = self.build_base(&db, base)?;
        let grown = self.ingest_into(&db, &files.json, "inserted")?;
        let db_bytes = std::fs::metadata(&db)?.len();
        let n = self.events();
        let against = [
            ("empty db", Some(first)),
            ("empty db, indexes kept", self.first_json_kept),
        ];
        for (name, first) in against {
            let Some(first) = first else { continue };
            let ratio = first.seconds / grown.seconds;
            self.rows.push(
                Row::info(
                    "5",
                    &format!(
                        "{} new events into a {}-row db",
                        table::count(n),
                        table::count(base)
                    ),
                    table::timed(n, grown.seconds),
                    format!("{name}: {}", table::rate(n, first.seconds)),
                )
                .times(
                    ratio,
                    name,
                    Target::AtLeast(GROWTH_RATIO_MIN),
                    "≥ 0.5× empty (issue 36)",
                ),
            );
        }
        self.notes.push(format!(
            "growth base: {} files, ev/s per file in order: {}; database after growth {}; peak RSS of the growth ingest {}",
            rates.len(),
            table::rates_list(&rates),
            table::mebibytes(db_bytes),
            table::mebibytes(grown.peak_rss_bytes)
        ));
        // The growth rows stand whatever the station's files come to.
        let mut rows = base + files.json.events;
        match self.station_file(&db, rows) {
            Ok(added) => rows += added,
            Err(error) => {
                let measure = "a station's file into the growth database";
                self.rows
                    .push(Row::skipped("5", measure, error.to_string()));
                self.problems.push(format!("5, {measure}: {error}"));
            }
        }
        if chosen(&self.options.only, "A") {
            self.grown_db = Some((db, rows));
        } else {
            remove_db(&db)?;
        }
        if let Err(error) = self.floor_growth(base, &files.ndjson) {
            self.rows
                .push(Row::skipped("5", FLOOR_GROWTH, error.to_string()));
            self.problems.push(format!("5, {FLOOR_GROWTH}: {error}"));
        }
        Ok(())
    }

    /// A station's file into the growth database (`rows` events) against the same
    /// file into an empty one (`station`); returns the events it added.
    fn station_file(&mut self, db: &Path, rows: u64) -> BenchResult<u64> {
        let empty = self.fresh_db("station-empty.db")?;
        let files = station::Files::write(&self.data, self.options.seed, rows)?;
        let added = files.events();
        let (row, note) = files.compare(
            &self.spoolite()?,
            ("5", rows),
            &db.to_string_lossy(),
            &empty.to_string_lossy(),
        )?;
        remove_db(&empty)?;
        self.rows.push(row);
        self.notes.push(note);
        Ok(added)
    }

    /// Fills `db` with `base` events that share no key with the main file, in
    /// files of --events each, by `spoolite ingest`; returns the events/s of each
    /// file.
    fn build_base(&self, db: &Path, base: u64) -> BenchResult<Vec<f64>> {
        self.build_base_by(base, ("growth-base.json", Layout::Json), |file, _| {
            Ok(self.ingest_into(db, file, "inserted")?.seconds)
        })
    }

    /// Writes the growth base's files one by one (`name` in `layout`, batches
    /// `name-N`, --events each, `base` events in all) and hands each to `ingest`
    /// with its place (0 first), which returns its seconds; returns the events/s
    /// of each file.
    fn build_base_by(
        &self,
        base: u64,
        (name, layout): (&str, Layout),
        mut ingest: impl FnMut(&BatchFile, usize) -> BenchResult<f64>,
    ) -> BenchResult<Vec<f64>> {
        let per_file = self.events().max(1);
        let mut rates = Vec::new();
        let mut built = 0;
        while built < base {
            let count = per_file.min(base - built);
            let spec = BatchSpec {
                offset: self.events() + built,
                count,
                revision: 1,
                crew_changed: false,
                batch_id: format!("{name}-{}", rates.len()),
            };
            let file = self.write(&spec, layout, name)?;
            let seconds = ingest(&file, rates.len());
            std::fs::remove_file(&file.path)?;
            rates.push(count as f64 / seconds?);
            built += count;
        }
        Ok(rates)
    }

    /// The bulk+crew floor's own growth beside spoolite's: its base of `base`
    /// events built as spoolite's was (the same events in the same files, as
    /// .ndjson, in the same order; the first into an empty database with its
    /// indexes built after, the others with them kept), then the main .ndjson
    /// file into it with its indexes kept (`c21ixfr+crew`) against `bulk+crew` of
    /// that file into an empty database, and the station's files into it against
    /// an empty database; every run timed as a process. What the floor comes to
    /// at this size is what the growth targets ask of any writer of spoolite's
    /// layout. (The floor keeps its indexes for the main file whatever the base;
    /// spoolite builds its own again when the file is large against the table,
    /// which a base of at least half the file is not.)
    fn floor_growth(&mut self, base: u64, ndjson: &BatchFile) -> BenchResult<()> {
        // Section 5 runs after section 1 (it needs the first ingest), which
        // reported a floor that could not be built already.
        let built = match self.fair_floor() {
            Ok(built) => built,
            Err(missing) => {
                self.rows.push(Row::skipped("5", FLOOR_GROWTH, missing.why));
                return Ok(());
            }
        };
        let dbs = [
            "floor-growth.db",
            "floor-empty.db",
            "floor-station-empty.db",
        ]
        .map(|name| self.dbs.join(name));
        // The databases go before (a run cut short may have left them) and after,
        // whether every run went through or not (the first is as large as
        // spoolite's growth database).
        let remove = |dbs: &[PathBuf; 3]| dbs.iter().try_for_each(|db| remove_db(db));
        remove(&dbs)?;
        let measured = self.floor_growth_into(base, ndjson, &built.exe, &dbs);
        remove(&dbs)?;
        measured
    }

    /// `floor_growth`'s runs of the floor `exe`, into the databases `[grown,
    /// empty, small]`: the one it grows, the main file's empty one, the station
    /// files' empty one.
    fn floor_growth_into(
        &mut self,
        base: u64,
        ndjson: &BatchFile,
        exe: &Path,
        [grown_db, empty_db, small_db]: &[PathBuf; 3],
    ) -> BenchResult<()> {
        let floor = |variant, db: &Path, file: &Path, rows| {
            fairfloor::run(exe, variant, db, file, rows).map(|run| run.wall_s)
        };
        progress(&format!(
            "5: the floor's base of {} events",
            table::count(base)
        ));
        let layout = ("floor-growth-base.ndjson", Layout::Ndjson);
        let rates = self.build_base_by(base, layout, |file, at| {
            let variant = match at {
                0 => fairfloor::BULK_CREW,
                _ => fairfloor::C21IXFR_CREW,
            };
            floor(variant, grown_db, &file.path, file.events)
        })?;
        let n = ndjson.events;
        warm(&ndjson.path)?;
        progress("5: the floor's growth");
        let grown = floor(fairfloor::C21IXFR_CREW, grown_db, &ndjson.path, n)?;
        warm(&ndjson.path)?;
        let into_empty = floor(fairfloor::BULK_CREW, empty_db, &ndjson.path, n)?;
        let mut row = Row::info(
            "5",
            &format!(
                "{FLOOR_GROWTH}: {} new events into its {}-row db (`{}`, indexes kept), \
                 process time",
                table::count(n),
                table::count(base),
                fairfloor::C21IXFR_CREW.name
            ),
            format!("floor: {}", table::timed(n, grown)),
            format!(
                "`{}` into an empty db: {}",
                fairfloor::BULK_CREW.name,
                table::rate(n, into_empty)
            ),
        );
        let ratio = into_empty / grown;
        row.ratio = format!("{ratio:.2}× its empty db (not judged: the floor)");
        self.rows.push(row);
        self.notes.push(format!(
            "the floor's growth base: {} files, ev/s per file in order (process time): {}",
            rates.len(),
            table::rates_list(&rates)
        ));
        let rows = base + n;
        let files = station::Files::write(&self.data, self.options.seed, rows)?;
        let variant = fairfloor::C21IXFR_CREW;
        let who = format!("the floor `{}`", variant.name);
        let (mut row, runs) = files.compare_with(
            ("5", rows),
            &who,
            (&grown_db.to_string_lossy(), &small_db.to_string_lossy()),
            |into, file| floor(variant, Path::new(into), file, station::EVENTS),
        )?;
        row.value = format!("floor: {}", row.value);
        row.ratio = format!("{:.2}× the empty db (not judged: the floor)", runs.ratio);
        self.rows.push(row);
        self.notes.push(runs.text);
        Ok(())
    }

    /// Peak RSS of a first ingest of --events/10, --events and --events-max events;
    /// judged is the growth from --events up (the "at 1M and flat to 5M"):
    /// a smaller file fills less of one sorted run, and is shown beside.
    fn flatness(&mut self) -> BenchResult<()> {
        let first = self.first_json.ok_or("needs the first .json ingest")?;
        let n = self.events();
        let mut points = Vec::new();
        if n / 10 > 0 {
            points.push((n / 10, self.first_ingest_of(n / 10)?));
        }
        points.push((n, first.peak_rss_bytes));
        if let Some(max) = self.options.events_max.filter(|&m| m > n) {
            points.push((max, self.first_ingest_of(max)?));
        }
        let sizes: Vec<f64> = points
            .iter()
            .filter(|&&(events, _)| events >= n)
            .map(|&(_, rss)| rss as f64)
            .collect();
        let (low, high) = sizes
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let spread = high / low - 1.0;
        let shown: Vec<String> = points
            .iter()
            .map(|&(events, rss)| format!("{}: {}", table::count(events), table::mebibytes(rss)))
            .collect();
        self.rows.push(
            Row::info(
                "M",
                "peak RSS of a first .json ingest by size",
                shown.join(" · "),
                String::new(),
            )
            .judged(
                spread,
                format!("spread {:.1} % from {} up", spread * 100.0, table::count(n)),
                Target::AtMost(RSS_SPREAD_MAX),
                "≤ 10 %",
            ),
        );
        Ok(())
    }

    /// Peak RSS of a first ingest of `events` events (a file of their own).
    fn first_ingest_of(&self, events: u64) -> BenchResult<u64> {
        let spec = BatchSpec {
            offset: 0,
            count: events,
            revision: 1,
            crew_changed: false,
            batch_id: format!("flat-{events}"),
        };
        let file = self.write(&spec, Layout::Json, &format!("flat-{events}.json"))?;
        let db_name = format!("flat-{events}.db");
        let ingested = self.ingest_expecting(&db_name, &file, "inserted")?;
        remove_db(&self.dbs.join(db_name))?;
        std::fs::remove_file(&file.path)?;
        Ok(ingested.peak_rss_bytes)
    }

    /// The spoolite binary the daemon sections run.
    fn spoolite(&self) -> BenchResult<PathBuf> {
        let spoolite = match &self.options.spoolite {
            Some(path) => path.clone(),
            None => std::env::current_exe()?.with_file_name("spoolite"),
        };
        if !spoolite.exists() {
            return Err(format!(
                "no spoolite binary at {}; run `cargo build --release --workspace` or pass --spoolite",
                spoolite.display()
            )
            .into());
        }
        Ok(spoolite)
    }

    /// Section 7: files dropped into a running daemon, each a lone file (judged),
    /// then back to back (a stream, reported).
    fn latency(&mut self) -> BenchResult<()> {
        let spoolite = self.spoolite()?;
        let settle = spoolite::cli::parse_duration(&self.options.settle)?.as_secs_f64();
        let dir = self.options.out.join("latency");
        for (kind, pause) in [
            ("lone files", latency::LONE_FILE_PAUSE),
            ("back to back", Duration::ZERO),
        ] {
            let plan = latency::Plan {
                spoolite: &spoolite,
                dir: &dir,
                seed: self.options.seed,
                files: self.options.latency_files,
                events_per_file: self.options.latency_events,
                settle: &self.options.settle,
                postgres: None,
                pause,
            };
            let samples = latency::measure(&plan)?;
            let median = table::median(&samples);
            let p99 = table::percentile(&samples, 99.0);
            let measure = format!(
                "drop-to-visible, {} files of {} events, {kind}, --settle {}",
                samples.len(),
                self.options.latency_events,
                self.options.settle
            );
            let over = median - settle;
            let row = Row::info(
                "7",
                &format!("{measure}: median"),
                table::seconds(median),
                format!("settle {}", table::seconds(settle)),
            );
            self.rows.push(if pause.is_zero() {
                row
            } else {
                latency::judged_over_settle(row, over)
            });
            self.rows.push(Row::info(
                "7",
                &format!("{measure}: p99"),
                table::seconds(p99),
                format!("settle {}", table::seconds(settle)),
            ));
            std::fs::remove_dir_all(&dir)?;
        }
        Ok(())
    }

    /// Section P: spoolite against PostgreSQL, on a server of the run's own.
    fn postgres(&mut self) -> BenchResult<()> {
        let spoolite = self.spoolite()?;
        let file = if self.options.smoke {
            let spec = BatchSpec {
                offset: 0,
                count: postgres::SMOKE_EVENTS,
                revision: 1,
                crew_changed: false,
                batch_id: String::new(),
            };
            self.write(&spec, Layout::Ndjson, "pg-events.ndjson")?
        } else {
            self.main_files()?.ndjson
        };
        let plan = postgres::Plan {
            out: &self.options.out,
            file: &file.path,
            events: file.events,
            spoolite: &spoolite,
            seed: self.options.seed,
            repeat: self.options.repeat,
            latency_files: self.options.latency_files,
            latency_events: self.options.latency_events,
            settle: &self.options.settle,
        };
        let mut report = postgres::Report {
            rows: &mut self.rows,
            notes: &mut self.notes,
            problems: &mut self.problems,
        };
        postgres::run(&plan, &mut report)
    }

    /// Section 8: the daemon on an empty spool, doing nothing.
    fn idle(&mut self) -> BenchResult<()> {
        let spoolite = self.spoolite()?;
        let dir = self.options.out.join("idle");
        let window = Duration::from_secs(self.options.idle_seconds.max(1));
        let plan = idle::Plan {
            spoolite: &spoolite,
            dir: &dir,
            rescan: IDLE_RESCAN,
            settle: if self.options.smoke {
                Duration::from_secs(1)
            } else {
                IDLE_SETTLE
            },
            window,
        };
        let idle = idle::measure(&plan)?;
        let measure = format!(
            "idle daemon, empty spool, --rescan {IDLE_RESCAN}, over {:.0} s",
            idle.window_s
        );
        let share = idle.core_share();
        self.rows.push(
            Row::info(
                "8",
                &format!("{measure}: CPU (user + system)"),
                format!(
                    "{} = {:.1} s per 60 s",
                    table::seconds(idle.cpu_s),
                    share * 60.0
                ),
                String::new(),
            )
            .judged(
                share,
                format!("{:.2} % of a core", share * 100.0),
                Target::AtMost(IDLE_CORE_SHARE_MAX),
                "≤ 0.3 s per 60 s (0.5 % of a core)",
            ),
        );
        self.rows.push(Row::info(
            "8",
            &format!(
                "{measure}: listings of incoming/ (`{}`)",
                idle::SCANS_COUNTER
            ),
            format!(
                "{:.1} per minute ({} in the window)",
                idle.scans_per_minute(),
                idle.scans
            ),
            format!("--rescan {IDLE_RESCAN}: 2 per minute"),
        ));
        if idle.scans_total == 0 {
            self.notes.push(format!(
                "idle: `{}` was 0 when the daemon stopped, start-up listing included: this daemon does not count its listings, so the listings figure is not a measurement",
                idle::SCANS_COUNTER
            ));
        }
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    /// Section 9: a backlog of one-event files in a stopped daemon's spool, worked
    /// off from the start, against a small backlog.
    fn backlog(&mut self) -> BenchResult<()> {
        let spoolite = self.spoolite()?;
        let large = self.options.backlog_files;
        let small = self.options.backlog_compare;
        let window = self.options.backlog_window;
        if large == 0 || small == 0 || window == 0 || window > large {
            return Err(format!(
                "needs --backlog-files ≥ --backlog-window > 0 and --backlog-compare > 0 \
                 (have {large}, {window}, {small})"
            )
            .into());
        }
        let run = |files: u64| -> BenchResult<backlog::Backlog> {
            let dir = self.options.out.join(format!("backlog-{files}"));
            progress(&format!("backlog of {files} files"));
            let plan = backlog::Plan {
                spoolite: &spoolite,
                dir: &dir,
                seed: self.options.seed,
                files,
            };
            let measured = backlog::measure(&plan)?;
            std::fs::remove_dir_all(&dir)?;
            Ok(measured)
        };
        let comparison = run(small)?;
        let backlog = run(large)?;
        let n = usize::try_from(window)?;
        let measure = format!(
            "backlog of {} one-event files in a stopped daemon's incoming/, `--settle 0ms`",
            table::count(large)
        );
        let (rate, compared) = (backlog.rate(), comparison.rate());
        let ratio = rate / compared;
        self.rows.push(
            Row::info(
                "9",
                &format!("{measure}: all archived"),
                format!(
                    "{} from start = {}",
                    table::seconds(backlog.from_spawn_s),
                    files_rate(rate)
                ),
                format!(
                    "backlog of {}: {}",
                    table::count(small),
                    files_rate(compared)
                ),
            )
            .times(
                ratio,
                &format!("the {} backlog", table::count(small)),
                Target::AtLeast(BACKLOG_RATIO_MIN),
                &format!("≥ 0.8× the {} backlog", table::count(small)),
            ),
        );
        let (first, last) = (backlog.first_rate(n), backlog.last_rate(n));
        let apart = first.max(last) / first.min(last);
        let faster = if last > first { "last" } else { "first" };
        self.rows.push(
            Row::info(
                "9",
                &format!("{measure}: first and last {} files", table::count(window)),
                format!("first {} · last {}", files_rate(first), files_rate(last)),
                String::new(),
            )
            .judged(
                apart,
                format!("{apart:.2}× apart ({faster} faster)"),
                Target::AtMost(BACKLOG_SPREAD_MAX),
                "within 1.5× of each other",
            ),
        );
        Ok(())
    }

    /// Section A: the analysts' queries on the growth section's database (or one of
    /// `--analyst-rows` rows built here), through rusqlite, the `sqlite3` shell and
    /// PostgreSQL (the same rows), then Datasette's pages while a daemon ingests.
    /// The database is `db/analyst/spoolite.db`: Datasette names a database by its
    /// file's stem, and the metadata describes `spoolite`.
    fn analyst(&mut self) -> BenchResult<()> {
        let wanted = self.options.analyst_rows;
        let served = self.dbs.join("analyst").join("spoolite.db");
        std::fs::create_dir_all(self.dbs.join("analyst"))?;
        remove_db(&served)?;
        let given = self.options.analyst_db.clone();
        let (rows, built_here) = match (self.grown_db.take(), wanted) {
            (grown, _) if given.is_some() => {
                if let Some((db, _)) = grown {
                    remove_db(&db)?;
                }
                let given = given.ok_or("no --analyst-db")?;
                (copy_db(&given, &served)?, false)
            }
            (Some((db, rows)), None) => {
                rename_db(&db, &served)?;
                (rows, false)
            }
            (Some((db, rows)), Some(w)) if w == rows => {
                rename_db(&db, &served)?;
                (rows, false)
            }
            (grown, wanted) => {
                if let Some((db, _)) = grown {
                    remove_db(&db)?;
                }
                let rows = wanted.unwrap_or(self.options.growth_base);
                if rows == 0 {
                    return Err("needs --analyst-rows or --growth-base above 0".into());
                }
                progress(&format!(
                    "analyst database: {} rows in files of {}",
                    table::count(rows),
                    table::count(self.events())
                ));
                self.build_base(&served, rows)?;
                (rows, true)
            }
        };
        let result = self.analyst_queries(&served, rows, built_here);
        remove_db(&served)?;
        result
    }

    fn analyst_queries(&mut self, db: &Path, rows: u64, built_here: bool) -> BenchResult<()> {
        let conn = analyst::open(db)?;
        let samples = analyst::Samples::take(&conn)?;
        let errors = self.options.out.join("analyst-sqlite3.err");
        let mut shell = match analyst::Shell::open(db, &errors) {
            Ok(shell) => Some(shell),
            Err(why) => {
                self.notes
                    .push(format!("analyst queries: no sqlite3 shell ({why})"));
                None
            }
        };
        let mut pg = if self.options.analyst_skip_pg {
            self.notes
                .push("A: no PostgreSQL column: --analyst-skip-pg".to_owned());
            None
        } else {
            self.analyst_pg(db, rows)
        };
        let bundled = rusqlite::version();
        let shell_version = shell.as_ref().map(|s| s.version.clone());
        let at = format!(
            "{}-row db{}",
            table::count(rows),
            if self.options.analyst_db.is_some() {
                " (--analyst-db)"
            } else if built_here {
                ""
            } else {
                " of section 5"
            }
        );
        for query in analyst::queries(&samples) {
            progress(&format!("analyst query: {}", query.name));
            let (ours, returned) = analyst::time_rusqlite(&conn, &query.sql)?;
            let theirs = match shell.as_mut() {
                Some(shell) => Some(shell.time(&query.sql)?),
                None => None,
            };
            let slowest = theirs
                .as_ref()
                .map_or(ours.median_s, |t| t.median_s.max(ours.median_s));
            let mut value = format!("rusqlite {}", table::seconds(ours.median_s));
            if let Some(theirs) = &theirs {
                value.push_str(&format!(" · sqlite3 {}", table::seconds(theirs.median_s)));
            }
            let on_pg = match (pg.as_mut(), query.pg_sql()) {
                (Some((_, client)), Some(sql)) => Some(analyst::time_pg(client, sql)),
                _ => None,
            };
            if let Some(Ok(timed)) = &on_pg {
                value.push_str(&format!(" · PostgreSQL {}", table::seconds(timed.median_s)));
            }
            let mut plan = format!(
                "{} row(s); plan: {}",
                table::thousands(returned),
                analyst::one_line(&ours.plan)
            );
            if let Some(theirs) = theirs.as_ref().filter(|t| t.plan != ours.plan) {
                plan.push_str(&format!(
                    " (sqlite3 {}: {})",
                    shell_version.as_deref().unwrap_or("?"),
                    analyst::one_line(&theirs.plan)
                ));
            }
            let measure = format!("{}, {at}", query.name);
            let mut row = Row::info("A", &measure, value, plan);
            let target = query.target_text();
            if !target.is_empty() {
                let plan_ok = query.plan_ok(&ours.plan)
                    && theirs.as_ref().is_none_or(|t| query.plan_ok(&t.plan));
                let mut shown = format!("slower {}", table::seconds(slowest));
                if query.check != analyst::PlanCheck::Any {
                    shown = format!(
                        "{}, {shown}",
                        if plan_ok {
                            "plan as asked"
                        } else {
                            "plan NOT as asked"
                        }
                    );
                }
                let limit = query.target_s.unwrap_or(f64::MAX);
                let compared = if plan_ok { slowest } else { f64::INFINITY };
                row = row.judged(compared, shown, Target::AtMost(limit), &target);
            }
            self.rows.push(row);
            // SQLite's figure the PostgreSQL one is held to: the shell's (the
            // issue's targets are on it), else rusqlite's.
            let sqlite_s = theirs.as_ref().map_or(ours.median_s, |t| t.median_s);
            match on_pg {
                Some(Ok(timed)) => {
                    let ratio = timed.median_s / sqlite_s;
                    self.rows.push(
                        Row::info(
                            "A",
                            &format!("{}, PostgreSQL", query.name),
                            table::seconds(timed.median_s),
                            format!("plan: {}", analyst::one_line(&timed.plan)),
                        )
                        .times(
                            ratio,
                            &format!("SQLite's {}", table::seconds(sqlite_s)),
                            Target::AtMost(PG_ANALYST_RATIO_MAX),
                            "≤ 2× SQLite",
                        ),
                    );
                    self.notes.push(format!(
                        "A, {}, PostgreSQL: median of {} warm runs after one unmeasured{}",
                        query.name,
                        timed.runs,
                        match &query.pg {
                            analyst::Pg::Form(sql) => format!("; its form there: `{sql}`"),
                            _ => String::new(),
                        }
                    ));
                }
                Some(Err(error)) => {
                    let measure = format!("{}, PostgreSQL", query.name);
                    self.rows
                        .push(Row::skipped("A", &measure, error.to_string()));
                    self.problems.push(format!("A, {measure}: {error}"));
                }
                None => {
                    if let (Some(_), analyst::Pg::NotRun(why)) = (&pg, &query.pg) {
                        self.notes
                            .push(format!("A, {}: not run on PostgreSQL ({why})", query.name));
                    }
                }
            }
            let mut note = format!(
                "A, {}: `{}`; median of {} warm runs after one unmeasured (rusqlite, bundled SQLite {bundled})",
                query.name,
                query.sql.split_whitespace().collect::<Vec<_>>().join(" "),
                ours.runs
            );
            if let (Some(theirs), Some(version)) = (&theirs, &shell_version) {
                note.push_str(&format!(
                    " and {} (sqlite3 {version} -readonly)",
                    theirs.runs
                ));
            }
            self.notes.push(note);
        }
        if let Some(shell) = shell {
            shell.close()?;
        }
        if let Some((server, client)) = pg.take() {
            drop(client);
            server.stop()?;
        }
        drop(conn);
        let complaints = std::fs::read_to_string(&errors).unwrap_or_default();
        if !complaints.trim().is_empty() {
            return Err(format!("sqlite3 reported errors: {}", complaints.trim()).into());
        }
        self.analyst_datasette(db, rows, &samples)
    }

    /// A PostgreSQL server of the section's own holding the same rows (`spoolite
    /// copy-db` from the SQLite file, then `VACUUM (ANALYZE)`: what autovacuum does
    /// after a bulk insert, done at once so that no figure depends on when it
    /// runs); `None`, with a note or a row saying why, when there is none.
    fn analyst_pg(
        &mut self,
        db: &Path,
        rows: u64,
    ) -> Option<(postgres::Server, ::postgres::Client)> {
        let server = match postgres::Server::start(&self.options.out) {
            Ok(server) => server,
            Err(why) => {
                self.notes.push(format!(
                    "A: no PostgreSQL column: no PostgreSQL server could be started ({why})"
                ));
                return None;
            }
        };
        let filled = (|| -> BenchResult<::postgres::Client> {
            self.notes
                .push(format!("A, PostgreSQL: {}", server.describe()?));
            let uri = server.fresh_db("analyst", true)?;
            progress(&format!(
                "A: spoolite copy-db of {} rows into PostgreSQL",
                table::count(rows)
            ));
            let started = Instant::now();
            let output = std::process::Command::new(self.spoolite()?)
                .arg("copy-db")
                .arg("--from")
                .arg(db)
                .arg("--to")
                .arg(&uri)
                .output()?;
            if !output.status.success() {
                return Err(format!(
                    "spoolite copy-db: {}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )
                .into());
            }
            let copied_s = started.elapsed().as_secs_f64();
            let mut client = server.connect("analyst")?;
            let started = Instant::now();
            client.batch_execute("VACUUM (ANALYZE)")?;
            let vacuumed_s = started.elapsed().as_secs_f64();
            self.notes.push(format!(
                "A, PostgreSQL: the SQLite file's {} rows copied by `spoolite copy-db --from FILE --to URI` in {}, then `VACUUM (ANALYZE)` in {} (what autovacuum does after a bulk insert, done at once); each query through the postgres crate's simple query protocol (as psql), the server's defaults",
                table::count(rows),
                table::seconds(copied_s),
                table::seconds(vacuumed_s)
            ));
            Ok(client)
        })();
        match filled {
            Ok(client) => Some((server, client)),
            Err(error) => {
                self.rows
                    .push(Row::skipped("A", "PostgreSQL column", error.to_string()));
                self.problems.push(format!("A, PostgreSQL column: {error}"));
                let _ = server.stop();
                None
            }
        }
    }

    /// Section A's Datasette rows (see `datasette`): each page's first and warm
    /// answer, and the slowest; a page that does not answer 200, or says "SQL
    /// query took too long", is a MISS.
    fn analyst_datasette(
        &mut self,
        db: &Path,
        rows: u64,
        samples: &analyst::Samples,
    ) -> BenchResult<()> {
        let version = datasette::VERSION;
        let venv = match datasette::venv() {
            Ok(venv) => venv,
            Err(why) => {
                self.rows.push(Row::skipped(
                    "A",
                    &format!("Datasette {version} pages"),
                    format!("Datasette could not be installed: {why}"),
                ));
                return Ok(());
            }
        };
        let plan = datasette::Plan {
            db,
            dir: &self.options.out.join("datasette"),
            spoolite: &self.spoolite()?,
            seed: self.options.seed,
            first_offset: self.events() + rows,
            flight_id: &samples.flight_id,
        };
        let served = datasette::run(&plan, &venv)?;
        let at = format!("{}-row db, daemon ingesting", table::count(rows));
        for page in &served.pages {
            let shown = match &page.failure {
                Some(why) => why.clone(),
                None => "HTTP 200".to_owned(),
            };
            self.rows.push(
                Row::info(
                    "A",
                    &format!("Datasette {version} `{}`, {at}", page.path),
                    format!(
                        "first {} · warm {}",
                        table::seconds(page.first_ms / 1000.0),
                        table::seconds(page.warm_ms / 1000.0)
                    ),
                    page.notes.join("; "),
                )
                .judged(
                    if page.failure.is_some() { 1.0 } else { 0.0 },
                    shown,
                    Target::AtMost(0.0),
                    "200, never \"SQL query took too long\"",
                ),
            );
        }
        if let Some(slowest) = served.pages.iter().max_by(|a, b| {
            a.warm_ms
                .max(a.first_ms)
                .total_cmp(&b.warm_ms.max(b.first_ms))
        }) {
            self.rows.push(Row::info(
                "A",
                &format!("Datasette {version}: the slowest page, {at}"),
                table::seconds(slowest.warm_ms.max(slowest.first_ms) / 1000.0),
                format!("`{}`", slowest.path),
            ));
        }
        self.notes.push(format!(
            "A, Datasette {version}: `datasette serve spoolite.db -m packaging/datasette/metadata.yml`, default settings (mutable, sql_time_limit_ms 1000, facet_time_limit_ms 200); each page asked twice, from connect to last byte; meanwhile `spoolite run` ingested {} of the {} files of {} events dropped one by one, each once the one before was committed ({} → {} rows once all were in)",
            served.files_committed_during,
            served.files_dropped,
            table::thousands(datasette::LIVE_EVENTS_PER_FILE),
            table::thousands(served.rows_before),
            table::thousands(served.rows_after)
        ));
        Ok(())
    }

    /// A path for a new database, with any old one (and its WAL) removed.
    fn fresh_db(&self, name: &str) -> BenchResult<PathBuf> {
        let path = self.dbs.join(name);
        remove_db(&path)?;
        Ok(path)
    }

    /// Prints the table and writes results.md; exit 1 when any section failed.
    fn finish(self) -> BenchResult<ExitCode> {
        let mut text = format!(
            "# spoolite-bench results\n\n- run at: {}\n- command: `{}`\n{}\n\n{}",
            spoolite::clock::now_utc(),
            std::env::args().collect::<Vec<_>>().join(" "),
            machine::describe(&self.options.out),
            table::render(&self.rows)
        );
        if !self.notes.is_empty() {
            text.push_str("\nNotes:\n\n");
            for note in &self.notes {
                text.push_str(&format!("- {note}\n"));
            }
        }
        if !self.problems.is_empty() {
            text.push_str("\nProblems (the bench exits 1):\n\n");
            for problem in &self.problems {
                text.push_str(&format!("- {problem}\n"));
            }
        }
        println!("{text}");
        std::fs::write(self.options.out.join("results.md"), &text)?;
        Ok(if self.problems.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
}

/// Checks a child's outcome and that `count` equals `expected` (`count` empty: no
/// count to check).
fn expect(report: &ChildReport, outcome: &str, count: &str, expected: u64) -> BenchResult<()> {
    if report.outcome != outcome {
        return Err(format!("outcome {:?}, expected {outcome:?}", report.outcome).into());
    }
    if !count.is_empty() && report.count(count) != expected {
        return Err(format!(
            "{count} = {}, expected {expected} (counts {:?})",
            report.count(count),
            report.counts
        )
        .into());
    }
    Ok(())
}

/// Copies a closed database file (and its WAL, if any) to `to`; returns its
/// stored event rows.
fn copy_db(from: &Path, to: &Path) -> BenchResult<u64> {
    for suffix in ["", "-wal"] {
        let mut source = from.as_os_str().to_owned();
        source.push(suffix);
        let mut target = to.as_os_str().to_owned();
        target.push(suffix);
        match std::fs::copy(&source, &target) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => {}
            Err(e) => return Err(format!("copy {}: {e}", PathBuf::from(source).display()).into()),
        }
    }
    let rows: i64 = rusqlite::Connection::open(to)?.query_row(
        "SELECT count(*) FROM spoolite_event",
        [],
        |row| row.get(0),
    )?;
    progress(&format!(
        "analyst database: {} rows copied from {}",
        table::count(u64::try_from(rows)?),
        from.display()
    ));
    Ok(u64::try_from(rows)?)
}

/// Moves a closed database file (and its WAL and shared-memory files) to `to`.
fn rename_db(from: &Path, to: &Path) -> BenchResult<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut source = from.as_os_str().to_owned();
        source.push(suffix);
        let mut target = to.as_os_str().to_owned();
        target.push(suffix);
        match std::fs::rename(&source, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => {}
            Err(e) => return Err(format!("move {}: {e}", PathBuf::from(source).display()).into()),
        }
    }
    Ok(())
}

/// Removes a database file and its WAL and shared-memory files, if present.
fn remove_db(path: &Path) -> BenchResult<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("remove {}: {e}", PathBuf::from(name).display()).into()),
        }
    }
    Ok(())
}

/// Seconds to SHA-256 the file in this process, 256 KiB at a time.
fn sha256_seconds(path: &Path) -> BenchResult<f64> {
    let started = Instant::now();
    sha256_hex(path)?;
    Ok(started.elapsed().as_secs_f64())
}

fn sha256_hex(path: &Path) -> BenchResult<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; READ_BUFFER_BYTES];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The median of `f` over `runs`.
/// `file` gzipped beside it (`NAME.gz`, default level), as a site sends it.
fn gzipped(file: &BatchFile) -> BenchResult<BatchFile> {
    let mut path = file.path.clone().into_os_string();
    path.push(".gz");
    let path = PathBuf::from(path);
    let mut encoder = flate2::write::GzEncoder::new(
        std::io::BufWriter::new(std::fs::File::create(&path)?),
        flate2::Compression::default(),
    );
    std::io::copy(&mut std::fs::File::open(&file.path)?, &mut encoder)?;
    encoder.finish()?.into_inner().map_err(|e| e.into_error())?;
    Ok(BatchFile {
        bytes: std::fs::metadata(&path)?.len(),
        path,
        events: file.events,
    })
}

/// How long decompressing the gzip file `path` alone takes, into nothing.
fn gunzip_seconds(path: &Path) -> BenchResult<f64> {
    let started = std::time::Instant::now();
    let mut decoder =
        flate2::read::MultiGzDecoder::new(std::io::BufReader::new(std::fs::File::open(path)?));
    std::io::copy(&mut decoder, &mut std::io::sink())?;
    Ok(started.elapsed().as_secs_f64())
}

fn median_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    table::median(&runs.iter().map(f).collect::<Vec<_>>())
}

/// The median times of `runs`, and the largest peak RSS among them.
fn median_ingest(runs: &[Ingested]) -> Ingested {
    Ingested {
        seconds: median_of(runs, |r| r.seconds),
        wall_s: median_of(runs, |r| r.wall_s),
        peak_rss_bytes: runs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0),
    }
}

/// `1,234 files/s`.
fn files_rate(per_second: f64) -> String {
    format!("{} files/s", table::thousands(per_second.round() as u64))
}
