//! Section P: spoolite against PostgreSQL, on a server of the run's own. The bench
//! makes it with `initdb` in OUT/pg (as the `postgres` OS user when it runs as root:
//! the server refuses root), starts it listening on a unix socket in that folder
//! and on no TCP address, with the server's defaults otherwise (`fsync`,
//! `synchronous_commit` and `full_page_writes` on), and stops and removes it at the
//! end. Then:
//!
//! - **first ingest against a floor:** `spoolite ingest --db URI` of the `.ndjson`
//!   file into a database holding spoolite's schema and nothing else, against
//!   `psql` writing the same rows into such a database with `COPY` into a
//!   temporary table and one `INSERT … SELECT … ON CONFLICT (key) DO UPDATE … WHERE
//!   excluded.source_revision > …`, one transaction; both timed as processes,
//!   spawn to exit, median of `--repeat` interleaved rounds;
//! - **a station's file** into a database holding the main file against the same
//!   file into an empty one (`station`);
//! - **daemons at once:** 1, 2 and 4 `spoolite run`, each on its own spool, the
//!   files a station sends (`STATION_FILES` of `STATION_EVENTS` events) shared out
//!   between them, one database, with the machine's processor time (every
//!   process's, the server's included) per 1,000 events: on a machine of few
//!   processors they, not the daemons, bound what more daemons can add;
//! - **drop-to-visible latency** through `latency::measure` with a PostgreSQL `--db`.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write as _};
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use spoolite_testkit::pg;

use crate::child;
use crate::daemon::Daemon;
use crate::files;
use crate::generate::{self, BatchSpec, Layout};
use crate::latency;
use crate::station;
use crate::table::{self, Floor, Row, Target};
use crate::{BenchResult, progress};

/// The superuser `initdb` makes; the bench connects as it (trust, socket only).
const SUPERUSER: &str = "spoolite_bench";
/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECS: u32 = 120;

/// The batch digest of the floor's one inbox row and of every row it writes.
const FLOOR_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Issue 13's target: spoolite's first ingest at most this times the floor's.
const FLOOR_RATIO_MAX: f64 = 1.5;
/// The daemon runs: files of a station's size, this many of them (fewer in a
/// run of fewer events, as the smoke run).
const STATION_EVENTS: u64 = 500;
const STATION_FILES: u64 = 240;
/// The daemon runs: this many daemons at once, and what 2 and 4 are held to
/// against one (issue 36).
const DAEMONS: [u64; 3] = [1, 2, 4];
const DAEMONS_RATIO_MIN: [f64; 3] = [1.0, 1.6, 2.5];
/// The share of the machine's ceiling (`ceiling`) that more daemons must reach
/// when the processors, not spoolite, bound them.
const CEILING_SHARE_MIN: f64 = 0.8;
/// The longest the daemon runs may go without a file committed.
const DAEMON_STALL_MAX: Duration = Duration::from_secs(300);
/// The longest wait for a daemon's `serving spool` line.
const SERVING_WAIT_MAX: Duration = Duration::from_secs(60);
/// How often the database is looked at during a daemon run.
const DAEMON_POLL: Duration = Duration::from_millis(5);

/// The events of section P in the smoke run (a file of its own): enough to go
/// through every part, few enough to keep the smoke run short.
pub const SMOKE_EVENTS: u64 = 3000;

/// What section P needs from the run.
pub struct Plan<'a> {
    pub out: &'a Path,
    /// The `.ndjson` file section P ingests (section 0's; in the smoke run one of
    /// `SMOKE_EVENTS`) and its events.
    pub file: &'a Path,
    pub events: u64,
    pub spoolite: &'a Path,
    pub seed: u64,
    pub repeat: u32,
    pub latency_files: u64,
    pub latency_events: u64,
    pub settle: &'a str,
}

/// Where section P's rows, notes and failed parts go.
pub struct Report<'a> {
    pub rows: &'a mut Vec<Row>,
    pub notes: &'a mut Vec<String>,
    pub problems: &'a mut Vec<String>,
}

/// Runs section P: starts the server, measures, stops and removes it. A part that
/// fails becomes a row and a problem; the others still run.
pub fn run(plan: &Plan, report: &mut Report) -> BenchResult<()> {
    let server = Server::start(plan.out)?;
    report.notes.push(format!("P: {}", server.describe()?));
    let parts: [(&str, Part); 4] = [
        (
            "first ingest into PostgreSQL against psql's COPY",
            first_ingest,
        ),
        (
            "a station's file into a database of the main file against an empty one",
            station_file,
        ),
        ("daemons at once into one PostgreSQL database", daemons),
        ("drop-to-visible against PostgreSQL", latency),
    ];
    for (name, part) in parts {
        progress(&format!("P: {name}"));
        if let Err(error) = part(plan, &server, report) {
            report.rows.push(Row::skipped("P", name, error.to_string()));
            report.problems.push(format!("P, {name}: {error}"));
        }
    }
    server.stop()
}

type Part = fn(&Plan, &Server, &mut Report) -> BenchResult<()>;

/// The throwaway server, the test kit's (`spoolite_testkit::pg`): `DIR/data` holds
/// the cluster, `DIR` the socket and `server.log`.
pub struct Server {
    pg: pg::Server,
}

impl Server {
    /// Makes and starts the server in OUT/pg (or, when the `postgres` user cannot
    /// reach that folder or its socket path is too long, in a folder of its own
    /// in the temporary folder, or in /tmp when that one is closed to the
    /// `postgres` user too, and says so).
    pub fn start(out: &Path) -> BenchResult<Server> {
        let wanted = std::path::absolute(out)?.join("pg");
        progress(&format!(
            "P: initdb in {} (or a folder of its own in the temporary folder)",
            wanted.display()
        ));
        let pg = pg::Server::start(pg::Config {
            superuser: SUPERUSER.to_owned(),
            place: pg::Place::At {
                dir: wanted,
                or_temp: Some("spoolite-bench-pg-".to_owned()),
            },
            // The only settings changed are the socket's: no TCP, the socket in
            // the folder.
            settings: String::new(),
            wait_secs: PG_CTL_WAIT_SECS,
        })?;
        Ok(Server { pg })
    }

    /// The libpq URI of database `name`, as a user passes it to `--db`.
    pub fn uri(&self, name: &str) -> String {
        self.pg.uri(name)
    }

    pub fn connect(&self, name: &str) -> BenchResult<::postgres::Client> {
        self.pg
            .connect(name)
            .map_err(|e| format!("connect to {}: {e}", self.uri(name)).into())
    }

    /// Runs `sql` in the `postgres` database.
    pub fn admin(&self, sql: &str) -> BenchResult<()> {
        self.pg.admin(sql).map_err(|e| format!("{sql}: {e}").into())
    }

    /// A new, empty database `name` (any old one dropped); with `schema`, spoolite's
    /// schema is put in through the library (`Store::open`), as a first writer would.
    pub fn fresh_db(&self, name: &str, schema: bool) -> BenchResult<String> {
        self.drop_db(name)?;
        self.pg.create_db(name)?;
        let uri = self.uri(name);
        if schema {
            drop(spoolite::store::Store::open(&spoolite::store::Db::parse(
                uri.as_ref(),
            ))?);
        }
        Ok(uri)
    }

    fn drop_db(&self, name: &str) -> BenchResult<()> {
        Ok(self.pg.drop_db(name)?)
    }

    /// Writes every dirty buffer out, so that no run pays for the one before.
    fn checkpoint(&self) -> BenchResult<()> {
        self.admin("CHECKPOINT")
    }

    /// The server's version and the settings the figures depend on.
    pub fn describe(&self) -> BenchResult<String> {
        let mut client = self.connect("postgres")?;
        let version: String = client.query_one("SHOW server_version", &[])?.get(0);
        let mut settings = Vec::new();
        for name in [
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "wal_level",
            "shared_buffers",
            "max_wal_size",
            "checkpoint_timeout",
        ] {
            let value: String = client.query_one(&format!("SHOW {name}"), &[])?.get(0);
            settings.push(format!("{name} {value}"));
        }
        let dir = self.pg.socket_dir();
        let mut text = format!(
            "PostgreSQL {version} made by initdb in {} (disk: {}), unix socket only, \
             the server's defaults: {}; {}",
            dir.display(),
            disk(dir),
            settings.join(", "),
            psql_version(&self.pg.psql())
        );
        if let Some(why) = self.pg.moved() {
            let _ = write!(text, " (not in OUT/pg: {why})");
        }
        Ok(text)
    }

    /// Stops the server (`pg_ctl stop -m fast`) and removes its folder (a server
    /// that does not stop so is stopped `-m immediate` on drop).
    pub fn stop(self) -> BenchResult<()> {
        Ok(self.pg.shut_down()?)
    }
}

fn psql_version(psql: &Path) -> String {
    Command::new(psql)
        .arg("--version")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "psql: version unknown".into())
}

/// The `df` line of the file system holding `path`.
fn disk(path: &Path) -> String {
    Command::new("df")
        .args(["-h", "--output=source,fstype"])
        .arg(path)
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .nth(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The first ingest against the floor, `--repeat` interleaved rounds.
fn first_ingest(plan: &Plan, server: &Server, report: &mut Report) -> BenchResult<()> {
    let data = plan.out.join("data");
    let rows = data.join("pg-floor-rows.copy");
    let script = data.join("pg-floor.sql");
    progress("P: the floor's COPY rows, keyed and canonicalised by the spoolite library");
    let events = write_floor_rows(plan.file, &rows)?;
    if events != plan.events {
        return Err(format!(
            "{} holds {events} valid events, expected {}",
            plan.file.display(),
            plan.events
        )
        .into());
    }
    std::fs::write(&script, floor_script(&rows, events))?;
    let psql = server.pg.psql();
    let log = data.join("pg-ingest.log");
    let (mut ours, mut floors, mut rss) = (Vec::new(), Vec::new(), 0u64);
    for round in 0..plan.repeat.max(1) {
        let uri = server.fresh_db("first_ingest", true)?;
        files::warm(plan.file)?;
        server.checkpoint()?;
        progress(&format!("P: round {}: spoolite ingest", round + 1));
        let measured = station::ingest(plan.spoolite, &uri, plan.file, &log, events)?;
        ours.push(measured.wall.as_secs_f64());
        rss = rss.max(measured.peak_rss_bytes);
        // Each database is dropped before the next run, so that no autovacuum of
        // its rows runs beside that one.
        let stored = if round == 0 {
            Some(row_sum(server, "first_ingest")?)
        } else {
            None
        };
        server.drop_db("first_ingest")?;

        let floor_uri = server.fresh_db("floor", true)?;
        files::warm(&rows)?;
        server.checkpoint()?;
        progress(&format!("P: round {}: the psql floor", round + 1));
        let mut floor = Command::new(&psql);
        floor
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(&floor_uri)
            .arg("-f")
            .arg(&script);
        let measured = child::measure(floor)?;
        floors.push(measured.wall.as_secs_f64());
        if let Some(ours) = stored {
            let floor = row_sum(server, "floor")?;
            if ours.0 != events as i64 || ours != floor {
                return Err(format!(
                    "the floor's rows differ from spoolite's: spoolite {ours:?}, floor \
                     {floor:?} (rows, checksum), expected {events} rows"
                )
                .into());
            }
        }
        server.drop_db("floor")?;
    }
    std::fs::remove_file(&rows)?;
    let (spoolite_s, floor_s) = (table::median(&ours), table::median(&floors));
    let n = plan.events;
    let floor = Floor {
        seconds: floor_s,
        events: n,
        limit: FLOOR_RATIO_MAX,
        baseline: "psql COPY floor",
        ratio: "the psql floor",
    };
    let measure = format!(
        "first ingest into PostgreSQL, {} events .ndjson, `spoolite ingest --db URI`, \
         process time, median of {} interleaved",
        table::count(n),
        ours.len()
    );
    report.rows.push(Row::against_floor(
        "P",
        &measure,
        table::timed(n, spoolite_s),
        spoolite_s,
        &floor,
        "≤ 1.5× the psql floor (issue 13)",
    ));
    report.notes.push(format!(
        "P, first ingest: rounds in order, spoolite {} · floor {}; peak RSS of `spoolite \
         ingest` {}; the floor's rows checked equal to spoolite's in round 1 (every \
         column but the times, the batch digest and change_seq)",
        table::seconds_list(&ours),
        table::seconds_list(&floors),
        table::mebibytes(rss)
    ));
    Ok(())
}

/// A station's file into a database holding the main file's events against the
/// same file into an empty one (`station`).
fn station_file(plan: &Plan, server: &Server, report: &mut Report) -> BenchResult<()> {
    let large = server.fresh_db("station_large", true)?;
    let empty = server.fresh_db("station_empty", true)?;
    progress(&format!(
        "P: the main file into the station files' large database ({} events)",
        table::count(plan.events)
    ));
    let log = plan.out.join("data").join("pg-station-base.log");
    station::ingest(plan.spoolite, &large, plan.file, &log, plan.events)?;
    server.checkpoint()?;
    let files = station::Files::write(&plan.out.join("data"), plan.seed, plan.events)?;
    let compared = files.compare(plan.spoolite, ("P", plan.events), &large, &empty);
    server.drop_db("station_large")?;
    server.drop_db("station_empty")?;
    let (row, note) = compared?;
    report.rows.push(row);
    report.notes.push(note);
    Ok(())
}

/// Writes the rows spoolite stores for `file`'s events as COPY text, in file order:
/// key (64 hex), flight_id, event_kind, instant_utc, source_revision, payload,
/// retracted, change_seq (the event's position). Returns how many. An event without
/// a revision takes the header's as it stands before the first event (none in
/// `.ndjson`); the floor's table is checked against spoolite's all the same.
fn write_floor_rows(file: &Path, out: &Path) -> BenchResult<u64> {
    let name = file.to_string_lossy();
    let format = spoolite::batch::Format::from_name(&name)
        .ok_or_else(|| format!("{name}: not a batch file"))?;
    let mut reader = spoolite::batch::BatchReader::new(
        format,
        BufReader::with_capacity(256 * 1024, File::open(file)?),
        spoolite::batch::Limits::default(),
    );
    let default_revision = reader.header().source_revision.unwrap_or(0);
    let mut writer = BufWriter::with_capacity(256 * 1024, File::create(out)?);
    let mut line = Vec::new();
    let mut count = 0u64;
    while let Some(record) = reader
        .next_record()
        .map_err(|e| format!("read {name}: {e:?}"))?
    {
        let Ok(event) = record.event else { continue };
        count += 1;
        line.clear();
        let key = hex::encode(event.key());
        let revision = event.revision().unwrap_or(default_revision).to_string();
        let seq = count.to_string();
        let fields: [Option<&str>; 8] = [
            Some(&key),
            Some(event.flight_id()),
            Some(event.event_kind()),
            Some(event.instant_utc()),
            Some(&revision),
            Some(event.payload()),
            Some(if event.retracted() { "t" } else { "f" }),
            Some(&seq),
        ];
        spoolite::store::postgres::copy_row(&mut line, &fields);
        writer.write_all(&line)?;
    }
    writer
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    Ok(count)
}

/// The floor's psql script: one inbox row (the rows' batch), the rows COPYed into a
/// temporary table, one revision-guarded upsert, the change_seq counter moved on;
/// one transaction.
fn floor_script(rows: &Path, events: u64) -> String {
    let now = spoolite::clock::now_utc();
    let path = rows.display().to_string().replace('\'', "''");
    format!(
        "BEGIN;
INSERT INTO ingest_inbox (batch_digest, batch_id, file_name, ingested_at, events_total,
    inserted, updated, unchanged, stale, conflicts, invalid)
VALUES ('{FLOOR_DIGEST}', 'floor', 'floor', '{now}', {events}, {events}, 0, 0, 0, 0, 0);
CREATE TEMP TABLE floor_rows (
    key text COLLATE \"C\" NOT NULL,
    flight_id text NOT NULL,
    event_kind text NOT NULL,
    instant_utc text NOT NULL,
    source_revision bigint NOT NULL,
    payload text NOT NULL,
    retracted boolean NOT NULL,
    change_seq bigint NOT NULL
) ON COMMIT DROP;
\\copy floor_rows FROM '{path}'
INSERT INTO spoolite_event AS d (key, flight_id, event_kind, instant_utc, source_revision,
    payload, retracted, batch_digest, first_seen_at, updated_at, change_seq)
SELECT key, flight_id, event_kind, instant_utc, source_revision, payload, retracted,
       '{FLOOR_DIGEST}', '{now}', '{now}', change_seq
FROM floor_rows
ON CONFLICT (key) DO UPDATE SET
    source_revision = excluded.source_revision,
    payload = excluded.payload,
    retracted = excluded.retracted,
    batch_digest = excluded.batch_digest,
    updated_at = excluded.updated_at,
    change_seq = excluded.change_seq
WHERE excluded.source_revision > d.source_revision;
UPDATE spoolite_change_seq SET next_seq = {next};
SELECT setval('spoolite_change_seq_next', {next}, false);
COMMIT;
",
        next = events + 1
    )
}

/// The rows of database `name` and a checksum of them: every column but the times,
/// the batch digest and `change_seq` (spoolite numbers a file's rows in key order,
/// the floor in file order), so that spoolite's and the floor's compare.
fn row_sum(server: &Server, name: &str) -> BenchResult<(i64, Option<String>)> {
    const SUM: &str = "SELECT count(*), sum(('x' || left(md5(concat_ws('|', key, flight_id,
        event_kind, instant_utc, source_revision, payload, retracted)), 15))::bit(60)::bigint)::text
        FROM spoolite_event";
    let row = server.connect(name)?.query_one(SUM, &[])?;
    Ok((row.get(0), row.get(1)))
}

/// 1, 2 and 4 daemons, `--repeat` interleaved rounds, each into an empty
/// database.
fn daemons(plan: &Plan, server: &Server, report: &mut Report) -> BenchResult<()> {
    let root = plan.out.join("pg-daemons");
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let files = root.join("files");
    std::fs::create_dir_all(&files)?;
    let count = (plan.events / STATION_EVENTS).clamp(4, STATION_FILES);
    let mut names = Vec::new();
    for at in 0..count {
        let name = format!("station-{at:03}.ndjson");
        let spec = BatchSpec {
            offset: at * STATION_EVENTS,
            count: STATION_EVENTS,
            revision: 1,
            crew_changed: false,
            batch_id: String::new(),
        };
        generate::write_batch_file(&files.join(&name), plan.seed, &spec, Layout::Ndjson)?;
        names.push(name);
    }
    let events = count * STATION_EVENTS;
    let mut runs: Vec<Vec<DaemonRun>> = vec![Vec::new(); DAEMONS.len()];
    for round in 0..plan.repeat.max(1) {
        for (at, &daemons) in DAEMONS.iter().enumerate() {
            progress(&format!("P: round {}: {daemons} daemon(s)", round + 1));
            let dir = root.join(format!("run-{daemons}"));
            let run = daemon_run(plan, server, &dir, &files, &names, daemons, events)?;
            runs[at].push(run);
            std::fs::remove_dir_all(&dir)?;
        }
    }
    std::fs::remove_dir_all(&root)?;
    let medians: Vec<DaemonRun> = runs.iter().map(|runs| DaemonRun::median(runs)).collect();
    let one = medians[0];
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for (at, &daemons) in DAEMONS.iter().enumerate() {
        let run = medians[at];
        let measure = format!(
            "{daemons} `spoolite run` at once, each its own spool, {} station files of {} \
             events shared out, one database, median of {}; the machine's CPU {:.2} s per 1k \
             events, {:.2} of {processors} processors busy",
            names.len(),
            STATION_EVENTS,
            runs[at].len(),
            run.cpu_seconds / events as f64 * 1000.0,
            run.cpu_seconds / run.seconds,
        );
        let mut row = Row::info(
            "P",
            &measure,
            table::timed(events, run.seconds),
            format!("1 daemon: {}", table::rate(events, one.seconds)),
        );
        let ratio = one.seconds / run.seconds;
        row = match daemons {
            1 => row,
            _ => row.times(
                ratio,
                "one daemon's ev/s",
                Target::AtLeast(DAEMONS_RATIO_MIN[at]),
                &format!("≥ {:.1}× (issue 36)", DAEMONS_RATIO_MIN[at]),
            ),
        };
        report.rows.push(row);
        if daemons > 1 {
            // What the processors allow: one daemon's busy share of them, times
            // as many daemons as fit.
            let ceiling = (processors / (one.cpu_seconds / one.seconds)).min(daemons as f64);
            let measure = format!(
                "{daemons} daemons against the ceiling the processors set: {processors} \
                 processors over one daemon's {:.2} busy, at most {daemons}",
                one.cpu_seconds / one.seconds
            );
            report.rows.push(
                Row::info(
                    "P",
                    &measure,
                    format!("{ratio:.2}×"),
                    format!("{ceiling:.2}×"),
                )
                .judged(
                    ratio / ceiling,
                    format!("{:.0} % of the ceiling", 100.0 * ratio / ceiling),
                    Target::AtLeast(CEILING_SHARE_MIN),
                    "≥ 80 % (issue 36)",
                ),
            );
        }
    }
    Ok(())
}

/// One daemon run's time, from the first file renamed until the last inbox
/// row committed, and the processor time the machine spent meanwhile.
#[derive(Clone, Copy, Debug)]
struct DaemonRun {
    seconds: f64,
    cpu_seconds: f64,
}

impl DaemonRun {
    /// The run of the median time.
    fn median(runs: &[DaemonRun]) -> DaemonRun {
        let mut sorted = runs.to_vec();
        sorted.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        sorted[sorted.len() / 2]
    }
}

/// One daemon run: `count` daemons started on fresh spools of a fresh database,
/// ready; then the files renamed into their incoming/ folders (file `i` to daemon
/// `i % count`); returns the seconds from the first rename until the last file's
/// inbox row is committed, and the machine's processor time meanwhile.
fn daemon_run(
    plan: &Plan,
    server: &Server,
    dir: &Path,
    files: &Path,
    names: &[String],
    count: u64,
    events: u64,
) -> BenchResult<DaemonRun> {
    // No schema: the daemons create it as they start, as on a new site, so a
    // spoolite of another schema version (`--spoolite`) is measured alike.
    let uri = server.fresh_db("daemons", false)?;
    let mut running = Vec::new();
    for number in 0..count {
        let home = dir.join(format!("daemon-{number}"));
        let (spool, staging) = (home.join("spool"), home.join("staging"));
        std::fs::create_dir_all(&staging)?;
        for name in names.iter().skip(number as usize).step_by(count as usize) {
            std::fs::hard_link(files.join(name), staging.join(name))?;
        }
        let log = home.join("daemon.log");
        let args: [&std::ffi::OsStr; 8] = [
            "--spool".as_ref(),
            spool.as_os_str(),
            "--db".as_ref(),
            uri.as_ref(),
            "--settle".as_ref(),
            "0ms".as_ref(),
            "--rescan".as_ref(),
            "30s".as_ref(),
        ];
        let daemon = Daemon::start(plan.spoolite, args, &log)?;
        running.push((daemon, spool, staging));
    }
    for (daemon, _, _) in &mut running {
        // Database open, watch in place.
        daemon.wait_log_line(SERVING_WAIT_MAX, "serving spool ")?;
    }
    server.checkpoint()?;
    let mut client = server.connect("daemons")?;
    let cpu_before = spoolite_testkit::process::machine_cpu_seconds()?;
    let started = Instant::now();
    for (_, spool, staging) in &running {
        for entry in std::fs::read_dir(staging)? {
            let entry = entry?;
            std::fs::rename(entry.path(), spool.join("incoming").join(entry.file_name()))?;
        }
    }
    let expected = names.len() as i64;
    let mut progressed = (Instant::now(), 0i64);
    let taken = loop {
        let done: i64 = client
            .query_one("SELECT count(*) FROM ingest_inbox", &[])?
            .get(0);
        if done >= expected {
            break DaemonRun {
                seconds: started.elapsed().as_secs_f64(),
                cpu_seconds: spoolite_testkit::process::machine_cpu_seconds()? - cpu_before,
            };
        }
        if done > progressed.1 {
            progressed = (Instant::now(), done);
        }
        for (daemon, _, _) in &mut running {
            daemon.check_running()?;
        }
        if progressed.0.elapsed() > DAEMON_STALL_MAX {
            return Err(format!(
                "{done} of {expected} files committed, then none for {DAEMON_STALL_MAX:?}; \
                 see {}",
                dir.display()
            )
            .into());
        }
        sleep(DAEMON_POLL);
    };
    for (daemon, _, _) in running {
        daemon.stop()?;
    }
    let row = client.query_one(
        "SELECT (SELECT sum(inserted) FROM ingest_inbox)::bigint,
                (SELECT count(*) FROM spoolite_event)",
        &[],
    )?;
    let (inserted, stored): (i64, i64) = (row.get(0), row.get(1));
    if inserted != events as i64 || stored != events as i64 {
        return Err(format!(
            "{count} daemon(s): {inserted} inserted, {stored} rows, expected {events}"
        )
        .into());
    }
    drop(client);
    server.drop_db("daemons")?;
    Ok(taken)
}

/// Drop-to-visible: the latency section's run with a PostgreSQL `--db`, each a
/// lone file (judged), then back to back (a stream, reported).
fn latency(plan: &Plan, server: &Server, report: &mut Report) -> BenchResult<()> {
    let settle = spoolite::cli::parse_duration(plan.settle)?.as_secs_f64();
    for (kind, pause) in [
        ("lone files", latency::LONE_FILE_PAUSE),
        ("back to back", Duration::ZERO),
    ] {
        let uri = server.fresh_db("latency", false)?;
        server.checkpoint()?;
        let dir = plan.out.join("pg-latency");
        let latency_plan = latency::Plan {
            spoolite: plan.spoolite,
            dir: &dir,
            seed: plan.seed,
            files: plan.latency_files,
            events_per_file: plan.latency_events,
            settle: plan.settle,
            postgres: Some(&uri),
            pause,
        };
        let samples = latency::measure(&latency_plan)?;
        std::fs::remove_dir_all(&dir)?;
        server.drop_db("latency")?;
        let median = table::median(&samples);
        let p95 = table::percentile(&samples, 95.0);
        let measure = format!(
            "drop-to-visible against PostgreSQL, {} files of {} events, {kind}, --settle {}",
            samples.len(),
            plan.latency_events,
            plan.settle
        );
        let settle_text = format!("settle {}", table::seconds(settle));
        for (what, value) in [("median", median), ("p95", p95)] {
            let over = value - settle;
            let row = Row::info(
                "P",
                &format!("{measure}: {what}"),
                table::seconds(value),
                settle_text.clone(),
            );
            // The target is the median's; the p95 is reported, as section
            // 7 reports its p99.
            report.rows.push(if pause.is_zero() || what != "median" {
                row
            } else {
                latency::judged_over_settle(row, over)
            });
        }
    }
    Ok(())
}
