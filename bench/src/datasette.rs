//! Section A's Datasette rows: Datasette `VERSION` (pinned, the same release and
//! venv cache as tests/it/datasette.rs) serves section A's database with its
//! default settings and packaging/datasette/metadata.yml, in its default mutable
//! mode (read-only with SQLite's locking, not `--immutable`), while a `spoolite
//! run` daemon ingests files into the same database. Every table and view page,
//! the `event_kind` facet, the two sorts and a `flight_id` filter are fetched
//! twice (the first answer and a warm one); a page fails unless both answer 200,
//! and none may say "SQL query took too long".
//!
//! Datasette cuts off a facet that passes its `facet_time_limit_ms` (200 ms) and a
//! page count that passes `sql_time_limit_ms` (1 s) without failing the page:
//! those are reported as notes of the page, not failures.
//!
//! The venv is made (`python3 -m venv`, `pip install datasette==VERSION`) under
//! the build's target folder unless a complete one is there; with no python3, venv
//! or PyPI the rows say why and section A goes on.

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::daemon::Daemon;
use crate::generate::{self, BatchSpec, Layout};
use crate::{BenchResult, progress};

/// The Datasette release served (tests/it/datasette.rs pins the same).
pub const VERSION: &str = "0.65.5";
/// The metadata analysts serve it with.
const METADATA: &str = include_str!("../../packaging/datasette/metadata.yml");
/// The bounds on making the venv.
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
const PIP_TIMEOUT: Duration = Duration::from_secs(300);
/// The bounds on Datasette listening and on one answer.
const LISTEN_WAIT_MAX: Duration = Duration::from_secs(120);
const ANSWER_WAIT_MAX: Duration = Duration::from_secs(120);
/// The daemon's `serving spool` line, and every live file committed at the end.
const SERVING_WAIT_MAX: Duration = Duration::from_secs(120);
const INGESTED_WAIT_MAX: Duration = Duration::from_secs(180);
/// The files the daemon ingests while Datasette serves: this many of this many
/// events each, dropped one by one while the pages are fetched, each once the one
/// before is committed.
const LIVE_FILES: u64 = 40;
pub const LIVE_EVENTS_PER_FILE: u64 = 5_000;
const LIVE_FILE_EVERY: Duration = Duration::from_millis(500);
/// What Datasette answers when a query passes `sql_time_limit_ms`.
const TOO_LONG: &str = "SQL query took too long";

/// What the Datasette run needs.
pub struct Plan<'a> {
    /// Section A's database, a file named `spoolite.db` (Datasette names the
    /// database by the file's stem, and the metadata describes `spoolite`).
    pub db: &'a Path,
    /// A folder of its own (emptied first): the spool, the logs, the metadata.
    pub dir: &'a Path,
    pub spoolite: &'a Path,
    pub seed: u64,
    /// The first event of the live files (beyond the database's rows: inserts).
    pub first_offset: u64,
    /// The flight of the `?flight_id=` filter.
    pub flight_id: &'a str,
}

/// One request, asked twice.
#[derive(Debug, Clone)]
pub struct Page {
    pub path: String,
    pub first_ms: f64,
    pub warm_ms: f64,
    /// Why the page failed (non-200, "SQL query took too long").
    pub failure: Option<String>,
    /// What Datasette cut off without failing the page (a facet, the count).
    pub notes: Vec<String>,
}

/// The pages, and what the daemon did meanwhile.
#[derive(Debug)]
pub struct Served {
    pub pages: Vec<Page>,
    pub files_dropped: u64,
    /// Live files committed (inbox rows) when the last page had answered.
    pub files_committed_during: u64,
    pub rows_before: u64,
    pub rows_after: u64,
}

/// The build's target folder (the bench runs from target/<profile>/), where the
/// venv is kept.
fn target_dir() -> BenchResult<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_owned)
        .ok_or_else(|| format!("{} lies in no target/<profile>/", exe.display()).into())
}

/// The venv holding Datasette `VERSION`, made unless a complete one is cached
/// (the file `spoolite-installed`, written last, names the version).
pub fn venv() -> BenchResult<PathBuf> {
    let target = target_dir()?;
    let venv = target.join(format!("datasette-venv-{VERSION}"));
    let done = venv.join("spoolite-installed");
    if fs::read_to_string(&done).is_ok_and(|t| t.trim() == VERSION) {
        return Ok(venv);
    }
    progress(&format!(
        "Datasette {VERSION}: making a venv in {}",
        venv.display()
    ));
    if venv.exists() {
        fs::remove_dir_all(&venv)?;
    }
    let log = target.join(format!("datasette-venv-{VERSION}.log"));
    let _ = fs::remove_file(&log);
    run_bounded(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        VENV_TIMEOUT,
        "python3 -m venv (Debian: python3-venv)",
        &log,
    )?;
    run_bounded(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args(["--no-input", "--progress-bar", "off", "--timeout", "30"])
            .args(["--retries", "3"])
            .arg(format!("datasette=={VERSION}")),
        PIP_TIMEOUT,
        &format!("pip install datasette=={VERSION} (PyPI reachable?)"),
        &log,
    )?;
    fs::write(&done, VERSION)?;
    Ok(venv)
}

/// Runs `command` with its output in `log`, for at most `limit`; an error names
/// `what` and the end of the log.
fn run_bounded(command: &mut Command, limit: Duration, what: &str, log: &Path) -> BenchResult<()> {
    let out = fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .map_err(|e| format!("{what}: cannot start {:?}: {e}", command.get_program()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            return Err(format!("{what}: {status}: {}", tail(log, 5)).into());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what}: gave up after {limit:?}: {}", tail(log, 5)).into());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join(" / ")
}

/// A running `datasette serve`, killed and reaped when dropped.
struct Datasette {
    child: Child,
    port: u16,
}

impl Datasette {
    /// `datasette serve DB -m METADATA` on a free port of 127.0.0.1, every setting
    /// at its default.
    fn serve(venv: &Path, db: &Path, metadata: &Path, log: &Path) -> BenchResult<Datasette> {
        let out = fs::File::create(log)?;
        let child = Command::new(venv.join("bin/datasette"))
            .arg("serve")
            .arg(db)
            .arg("-m")
            .arg(metadata)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("start datasette serve: {e}"))?;
        let mut server = Datasette { child, port: 0 };
        // Uvicorn names the port it bound once it listens.
        let marker = "Uvicorn running on http://127.0.0.1:";
        let deadline = Instant::now() + LISTEN_WAIT_MAX;
        while server.port == 0 {
            if let Some(status) = server.child.try_wait()? {
                return Err(format!("datasette serve exited ({status}): {}", tail(log, 5)).into());
            }
            if Instant::now() > deadline {
                return Err(format!("datasette did not listen within {LISTEN_WAIT_MAX:?}").into());
            }
            let text = fs::read_to_string(log).unwrap_or_default();
            if let Some(rest) = text.split(marker).nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                server.port = digits.parse()?;
            } else {
                thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(server)
    }
}

impl Drop for Datasette {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` over HTTP/1.0 (the body ends with the connection): the status, the
/// body, the milliseconds from connecting to the last byte.
fn get(port: u16, path: &str) -> BenchResult<(u16, String, f64)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(ANSWER_WAIT_MAX))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no end of headers"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("GET {path}: bad status line {head:?}"))?;
    Ok((status, body.to_owned(), ms))
}

/// Why one answer fails the page, if it does; what it cut off.
fn judge(path: &str, status: u16, body: &str, notes: &mut Vec<String>) -> Option<String> {
    if body.contains(TOO_LONG) {
        return Some(format!("HTTP {status}: {TOO_LONG}"));
    }
    if status != 200 {
        let first: String = body.chars().take(160).collect();
        return Some(format!("HTTP {status}: {first}"));
    }
    let json: Value = match serde_json::from_str(body) {
        Ok(json) => json,
        Err(e) => return Some(format!("not JSON: {e}")),
    };
    for facet in json["facets_timed_out"].as_array().into_iter().flatten() {
        let note = format!(
            "facet {} cut off by the 200 ms facet limit",
            facet.as_str().unwrap_or("?")
        );
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    let note = "row count cut off by the 1 s limit".to_owned();
    if json
        .get("filtered_table_rows_count")
        .is_some_and(Value::is_null)
        && !notes.contains(&note)
    {
        notes.push(note);
    }
    if path.contains("_facet=event_kind") && json["facet_results"].get("event_kind").is_none() {
        let note = "no event_kind facet in the answer".to_owned();
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    None
}

/// Every table and view of the database (the storage tables too: their pages are
/// hidden from Datasette's lists but answer).
fn relations(db: &Path) -> BenchResult<Vec<String>> {
    let conn = crate::analyst::open(db)?;
    let mut statement = conn.prepare(
        "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')
         AND name NOT LIKE 'sqlite_%' ORDER BY type DESC, name",
    )?;
    let names = statement
        .query_map([], |row| row.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(names)
}

/// The live files' inbox rows, and the rows of duty_event_all.
fn progress_of(db: &Path) -> BenchResult<(u64, u64)> {
    let conn = crate::analyst::open(db)?;
    let files: i64 = conn.query_row(
        "SELECT count(*) FROM ingest_inbox WHERE file_name LIKE 'datasette-live-%'",
        [],
        |row| row.get(0),
    )?;
    let rows: i64 = conn.query_row("SELECT count(*) FROM duty_event_all", [], |row| row.get(0))?;
    Ok((u64::try_from(files)?, u64::try_from(rows)?))
}

/// Serves the database, runs the daemon, fetches every page; stops both.
pub fn run(plan: &Plan, venv: &Path) -> BenchResult<Served> {
    if plan.dir.exists() {
        fs::remove_dir_all(plan.dir)?;
    }
    let spool = plan.dir.join("spool");
    let staged = plan.dir.join("staged");
    for folder in [spool.join("incoming"), staged.clone()] {
        fs::create_dir_all(folder)?;
    }
    let mut files = Vec::new();
    for number in 0..LIVE_FILES {
        let spec = BatchSpec {
            offset: plan.first_offset + number * LIVE_EVENTS_PER_FILE,
            count: LIVE_EVENTS_PER_FILE,
            revision: 1,
            crew_changed: false,
            batch_id: format!("datasette-live-{number:03}"),
        };
        let name = format!("datasette-live-{number:03}.ndjson");
        generate::write_batch_file(&staged.join(&name), plan.seed, &spec, Layout::Ndjson)?;
        files.push(name);
    }
    let (_, rows_before) = progress_of(plan.db)?;
    let metadata = plan.dir.join("metadata.yml");
    fs::write(&metadata, METADATA)?;
    let server = Datasette::serve(venv, plan.db, &metadata, &plan.dir.join("datasette.log"))?;
    let args: [&OsStr; 8] = [
        "--spool".as_ref(),
        spool.as_os_str(),
        "--db".as_ref(),
        plan.db.as_os_str(),
        "--settle".as_ref(),
        "0ms".as_ref(),
        "--rescan".as_ref(),
        "30s".as_ref(),
    ];
    let mut daemon = Daemon::start(plan.spoolite, args, &plan.dir.join("daemon.log"))?;
    daemon.wait_log_line(SERVING_WAIT_MAX, "serving spool")?;
    // Files are dropped one at a time, the next once the last is committed (or
    // after LIVE_FILE_EVERY), so the daemon writes throughout the fetches.
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let stop = Arc::clone(&stop);
        let incoming = spool.join("incoming");
        let db = plan.db.to_owned();
        thread::spawn(move || -> Result<u64, String> {
            let mut dropped = 0;
            for name in files {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                fs::rename(staged.join(&name), incoming.join(&name)).map_err(|e| e.to_string())?;
                dropped += 1;
                thread::sleep(LIVE_FILE_EVERY);
                while !stop.load(Ordering::Relaxed)
                    && progress_of(&db).map_err(|e| e.to_string())?.0 < dropped
                {
                    thread::sleep(LIVE_FILE_EVERY);
                }
            }
            Ok(dropped)
        })
    };
    let mut paths: Vec<String> = relations(plan.db)?
        .into_iter()
        .map(|name| format!("/spoolite/{name}.json"))
        .collect();
    paths.extend([
        "/spoolite/duty_event.json?_facet=event_kind".to_owned(),
        "/spoolite/duty_event.json?_sort_desc=updated_at".to_owned(),
        "/spoolite/duty_event.json?_sort_desc=change_seq".to_owned(),
        format!("/spoolite/duty_event.json?flight_id={}", plan.flight_id),
    ]);
    let mut pages = Vec::new();
    let fetched = (|| -> BenchResult<()> {
        for path in paths {
            progress(&format!("Datasette: {path}"));
            let mut notes = Vec::new();
            let (status, body, first_ms) = get(server.port, &path)?;
            let mut failure = judge(&path, status, &body, &mut notes);
            let (status, body, warm_ms) = get(server.port, &path)?;
            let again = judge(&path, status, &body, &mut notes);
            failure = failure.or(again);
            daemon.check_running()?;
            pages.push(Page {
                path,
                first_ms,
                warm_ms,
                failure,
                notes,
            });
        }
        Ok(())
    })();
    let (committed_during, _) = progress_of(plan.db)?;
    stop.store(true, Ordering::Relaxed);
    let dropped = feeder.join().map_err(|_| "the file feeder panicked")??;
    drop(server);
    fetched?;
    // Every dropped file must be committed before the daemon is stopped.
    let deadline = Instant::now() + INGESTED_WAIT_MAX;
    let rows_after = loop {
        let (files, rows) = progress_of(plan.db)?;
        if files == dropped {
            break rows;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the daemon committed {files} of {dropped} live files in {INGESTED_WAIT_MAX:?}"
            )
            .into());
        }
        daemon.check_running()?;
        thread::sleep(Duration::from_millis(100));
    };
    daemon.stop()?;
    Ok(Served {
        pages,
        files_dropped: dropped,
        files_committed_during: committed_during,
        rows_before,
        rows_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_fails_on_a_time_out_or_a_status_and_notes_what_was_cut_off() {
        let mut notes = Vec::new();
        let path = "/spoolite/duty_event.json?_facet=event_kind";
        let too_long = r#"{"ok": false, "error": "SQL query took too long. The time limit is controlled by the sql_time_limit_ms configuration option.", "status": 400}"#;
        assert!(judge(path, 400, too_long, &mut notes).is_some_and(|why| why.contains(TOO_LONG)));
        assert!(judge(path, 500, "{}", &mut notes).is_some_and(|why| why.starts_with("HTTP 500")));
        let cut = r#"{"rows": [], "facet_results": {}, "facets_timed_out": ["event_kind"], "filtered_table_rows_count": null}"#;
        assert_eq!(judge(path, 200, cut, &mut notes), None);
        assert_eq!(
            notes,
            [
                "facet event_kind cut off by the 200 ms facet limit",
                "row count cut off by the 1 s limit",
                "no event_kind facet in the answer"
            ]
        );
        let mut notes = Vec::new();
        let whole = r#"{"rows": [], "facet_results": {"event_kind": {}}, "facets_timed_out": [], "filtered_table_rows_count": 7}"#;
        assert_eq!(judge(path, 200, whole, &mut notes), None);
        assert!(notes.is_empty());
    }
}
