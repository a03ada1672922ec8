//! `spoolite changes`: the change feed against `duty_event_all` read directly, its
//! window (`--since`, `--limit`), retractions, `--follow` while batches commit and
//! while the daemon is killed and restarted, its ends (signals, a closed stdout),
//! an analyst account, and the Python example of an exactly-once downstream job.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::pg_contract::DbRef;
use crate::support::{ANALYST, assert_root, share_read_only_with_analyst};
use crate::support::{
    Daemon, Site, event, ingest_json, json_batch, let_others_traverse, off_blocks, query, spoolite,
    spoolite_as, wait_until,
};

/// The longest any single wait of these tests may take.
const WAIT: Duration = Duration::from_secs(30);

/// The columns of duty_event_all, in its order: what every line holds.
pub(crate) const COLUMNS: &str = "idempotency_key, flight_id, event_kind, instant_utc, \
                                  source_revision, payload, retracted, batch_digest, \
                                  first_seen_at, updated_at, change_seq";

/// The rows of `duty_event_all` matching `filter` (a WHERE clause, or empty), in
/// change_seq order, read by the test's own connection to a database of either
/// backend, each as the JSON object its line must be.
pub(crate) fn feed_rows<'a>(db: impl Into<DbRef<'a>>, filter: &str) -> Vec<Value> {
    // Every column of COLUMNS; ordered by the column, not by its text.
    let sql = format!(
        "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision{{t}}, \
         payload, {{retracted}}{{t}}, coalesce(slot, ''), batch_digest, first_seen_at, \
         updated_at, change_seq{{t}} \
         FROM duty_event_all {filter} ORDER BY duty_event_all.change_seq"
    );
    db.into().rows(&sql).into_iter().map(row_object).collect()
}

/// `feed_rows` after change_seq `since`.
pub(crate) fn feed_after<'a>(db: impl Into<DbRef<'a>>, since: i64) -> Vec<Value> {
    feed_rows(db, &format!("WHERE change_seq > {since}"))
}

fn row_object(row: Vec<String>) -> Value {
    let int = |text: &str| text.parse::<i64>().expect("an integer column");
    json!({
        "idempotency_key": row[0],
        "flight_id": row[1],
        "event_kind": row[2],
        "instant_utc": row[3],
        "source_revision": int(&row[4]),
        "payload": serde_json::from_str::<Value>(&row[5]).expect("payload is JSON"),
        "retracted": match row[6].as_str() { "0" => false, "1" => true, other => panic!("retracted {other}") },
        // A slot is never empty: empty is none.
        "slot": (!row[7].is_empty()).then(|| row[7].clone()),
        "batch_digest": row[8],
        "first_seen_at": row[9],
        "updated_at": row[10],
        "change_seq": int(&row[11]),
    })
}

/// `spoolite changes --db DB ARGS`: exit code, parsed lines, raw stdout, stderr.
pub(crate) fn changes(db: &Path, args: &[&str]) -> (i32, Vec<Value>, String, String) {
    let output = spoolite()
        .arg("changes")
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("run spoolite changes");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 output");
    let lines = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (
        output.status.code().expect("exit code"),
        lines,
        stdout,
        stderr,
    )
}

/// Checks `changes --since SINCE --limit LIMIT` against `all`, the whole feed.
pub(crate) fn assert_window(db: &Path, all: &[Value], since: i64, limit: usize) {
    let (code, lines, _, stderr) = changes(
        db,
        &["--since", &since.to_string(), "--limit", &limit.to_string()],
    );
    assert_eq!(code, 0, "{stderr}");
    let want: Vec<Value> = all
        .iter()
        .filter(|row| seq(row) > since)
        .take(limit)
        .cloned()
        .collect();
    assert_eq!(lines, want, "--since {since} --limit {limit}");
}

pub(crate) fn seq(line: &Value) -> i64 {
    line["change_seq"]
        .as_i64()
        .expect("change_seq is an integer")
}

/// The highest change_seq of a database of either backend (0 when it has none).
pub(crate) fn max_seq<'a>(db: impl Into<DbRef<'a>>) -> i64 {
    db.into()
        .rows("SELECT coalesce(max(change_seq), 0){t} FROM duty_event_all")[0][0]
        .parse()
        .expect("max")
}

/// A retraction of an event: the same identity with a higher revision.
pub(crate) fn retraction(flight_id: &str, kind: &str, instant: &str, revision: i64) -> String {
    format!(
        "{{\"flight_id\":\"{flight_id}\",\"event_kind\":\"{kind}\",\"instant_utc\":\"{instant}\",\
         \"source_revision\":{revision},\"retracted\":true}}"
    )
}

/// Ingests `events` as one `.json` batch named `name`, which must be processed.
pub(crate) fn ingest_batch(dir: &Path, db: &Path, name: &str, events: &[String]) {
    let file = crate::support::write(dir, name, json_batch(events));
    let (code, lines) = ingest_json(db, &[&file]);
    assert_eq!(code, 0, "{lines:?}");
}

// The feed fixtures of both backends (pg_feed.rs's adds a conflict, an invalid
// event and a fourth file) share their batches' events.

/// The first batch of a feed fixture: three inserts, one with a payload holding a
/// number no float holds; `takeoff_payload` is the third's payload.
pub(crate) fn first_events(takeoff_payload: &str) -> [String; 3] {
    let big = r#"{"crew":["C1","C2"],"n":123456789012345678901234567890}"#;
    [
        off_blocks(1, big),
        event(
            "BA0117-20261129",
            "on_blocks",
            "2026-11-29T12:05:00Z",
            Some(1),
            "{}",
        ),
        event(
            "BA0118-20261129",
            "takeoff",
            "2026-11-29T13:00:00+01:00",
            Some(1),
            takeoff_payload,
        ),
    ]
}

/// An update of the first batch's off_blocks and a stale version of its takeoff.
pub(crate) fn update_and_stale() -> [String; 2] {
    [
        off_blocks(2, "{\"crew\":[\"C1\"]}"),
        event(
            "BA0118-20261129",
            "takeoff",
            "2026-11-29T12:00:00Z",
            Some(0),
            "{}",
        ),
    ]
}

/// A new event twice in one batch: inserted, then unchanged.
pub(crate) fn landing_twice() -> [String; 2] {
    let landing = event(
        "BA0119-20261129",
        "landing",
        "2026-11-29T15:30:00.5Z",
        Some(1),
        "{}",
    );
    [landing.clone(), landing]
}

/// Retractions: of the first batch's on_blocks, and of a key never seen.
pub(crate) fn retractions() -> [String; 2] {
    [
        retraction("BA0117-20261129", "on_blocks", "2026-11-29T12:05:00Z", 2),
        retraction("BA0999-20261129", "off_blocks", "2026-11-29T08:00:00Z", 5),
    ]
}

/// A database holding inserts, an update, a stale and an unchanged event, a re-drop
/// and retractions (one of a key never seen).
fn database_with_changes() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("state").join("spoolite.db");
    let first = first_events("{\"tail\":\"G-XWBA\"}");
    ingest_batch(dir.path(), &db, "first.json", &first);
    let second = [update_and_stale(), landing_twice()].concat();
    ingest_batch(dir.path(), &db, "second.json", &second);
    // A re-drop changes nothing.
    let again = dir.path().join("first.json");
    assert_eq!(ingest_json(&db, &[&again]).0, 0);
    ingest_batch(dir.path(), &db, "third.json", &retractions());
    (dir, db)
}

#[test]
fn changes_prints_every_row_of_duty_event_all_in_change_seq_order() {
    let (_dir, db) = database_with_changes();
    let (code, lines, stdout, stderr) = changes(&db, &[]);
    assert_eq!(code, 0, "{stderr}");
    let expected = feed_rows(&db, "");
    assert_eq!(expected.len(), 5, "the fixture: five keys");
    assert_eq!(lines, expected);
    let seqs: Vec<i64> = lines.iter().map(seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // Every column of the view, and only those.
    let columns: Vec<String> = query(
        &db,
        "SELECT name FROM pragma_table_info('duty_event_all') ORDER BY cid",
    )
    .into_iter()
    .map(|row| row[0].clone())
    .collect();
    for line in &lines {
        let mut keys: Vec<&String> = line.as_object().expect("an object").keys().collect();
        keys.sort();
        let mut want: Vec<&String> = columns.iter().collect();
        want.sort();
        assert_eq!(keys, want);
        assert!(line["payload"].is_object());
        assert!(line["retracted"].is_boolean());
    }
    // Each line names its columns in the view's order, and a payload's numbers stay
    // exactly as written.
    let first = stdout.lines().next().expect("a line");
    let positions: Vec<usize> = columns
        .iter()
        .map(|c| first.find(&format!("\"{c}\":")).expect("column named"))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{first}");
    assert!(
        !stdout.contains("123456789012345678901234567890"),
        "that version was replaced"
    );
    assert!(stdout.contains(r#""payload":{"crew":["C1"]}"#), "{stdout}");
}

#[test]
fn a_payload_keeps_every_digit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let big = r#"{"n":123456789012345678901234567890,"x":1.50}"#;
    ingest_batch(
        dir.path(),
        &db,
        "a.json",
        &[event("TB1", "takeoff", "2026-12-01T10:00:00Z", None, big)],
    );
    let (code, _, stdout, stderr) = changes(&db, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&format!("\"payload\":{big}")), "{stdout}");
}

#[test]
fn since_and_limit_pick_a_window_of_the_feed() {
    let (_dir, db) = database_with_changes();
    let all = feed_rows(&db, "");
    let last = max_seq(&db);
    for since in 0..=last + 1 {
        let (code, lines, _, stderr) = changes(&db, &["--since", &since.to_string()]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            lines,
            feed_rows(&db, &format!("WHERE change_seq > {since}")),
            "--since {since}"
        );
        for limit in [0, 1, 2, 100] {
            assert_window(&db, &all, since, limit);
        }
    }
    // The variables do what the options do.
    let output = spoolite()
        .arg("changes")
        .env("SPOOLITE_DB", &db)
        .env("SPOOLITE_SINCE", "2")
        .env("SPOOLITE_LIMIT", "1")
        .output()
        .expect("run");
    assert!(output.status.success());
    let line: Value = serde_json::from_slice(&output.stdout).expect("one line");
    assert_eq!(line, feed_rows(&db, "WHERE change_seq > 2")[0]);
    // A negative --since is a usage error.
    assert_eq!(changes(&db, &["--since", "-1"]).0, 2);
}

#[test]
fn a_retracted_row_prints_retracted_true() {
    let (_dir, db) = database_with_changes();
    let (_, lines, _, _) = changes(&db, &[]);
    let retracted: Vec<&Value> = lines
        .iter()
        .filter(|line| line["retracted"] == json!(true))
        .collect();
    let names: Vec<(&str, &str)> = retracted
        .iter()
        .map(|line| {
            (
                line["flight_id"].as_str().expect("flight"),
                line["event_kind"].as_str().expect("kind"),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("BA0117-20261129", "on_blocks"),
            ("BA0999-20261129", "off_blocks")
        ]
    );
    let on_blocks = retracted[0];
    assert_eq!(on_blocks["source_revision"], json!(2));
    assert_eq!(on_blocks["payload"], json!({}));
    assert_eq!(retracted[1]["source_revision"], json!(5));
    // The live view leaves both out; the feed is where a follower learns of them.
    let live = query(&db, "SELECT count(*) FROM duty_event")[0][0].clone();
    assert_eq!(live, "3");
    // A later revision brings the event back: a new line, retracted false.
    let dir = tempfile::tempdir().expect("temp dir");
    let back = event(
        "BA0117-20261129",
        "on_blocks",
        "2026-11-29T12:05:00Z",
        Some(3),
        "{}",
    );
    ingest_batch(dir.path(), &db, "back.json", &[back]);
    let (_, lines, _, _) = changes(
        &db,
        &[
            "--since",
            &lines.iter().map(seq).max().expect("max").to_string(),
        ],
    );
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["retracted"], json!(false));
    assert_eq!(lines[0]["source_revision"], json!(3));
}

#[test]
fn a_missing_database_is_an_error_and_nothing_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("state").join("spoolite.db");
    for args in [&[][..], &["--follow"][..]] {
        let (code, lines, _, stderr) = changes(&db, args);
        assert_eq!(code, 2, "{stderr}");
        assert!(lines.is_empty());
        assert!(
            stderr.contains("does not exist") && stderr.contains(&db.display().to_string()),
            "{stderr}"
        );
    }
    assert!(!db.parent().expect("folder").exists(), "nothing is created");
}

#[test]
fn an_older_schema_must_be_upgraded_by_the_daemon_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let conn = rusqlite::Connection::open(&db).expect("create");
    for migration in [
        include_str!("../../schema/0001_initial.sql"),
        include_str!("../../schema/0002_analyst_views.sql"),
        include_str!("../../schema/0003_binary_key.sql"),
        include_str!("../../schema/0004_times_sort.sql"),
    ] {
        conn.execute_batch(migration).expect("migrate");
    }
    conn.execute_batch("PRAGMA user_version = 4")
        .expect("version");
    drop(conn);
    let (code, lines, _, stderr) = changes(&db, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(lines.is_empty());
    assert!(
        stderr.contains("older") && stderr.contains("spoolite run"),
        "{stderr}"
    );
    let version = query(&db, "PRAGMA user_version")[0][0].clone();
    assert_eq!(version, "4", "changes upgrades nothing");
}

#[test]
fn the_site_defaults_file_names_the_database() {
    let (dir, db) = database_with_changes();
    let defaults = dir.path().join("defaults");
    fs::write(&defaults, format!("SPOOLITE_DB=\"{}\"\n", db.display())).expect("write defaults");
    let output = spoolite()
        .arg("changes")
        .env("SPOOLITE_DEFAULTS_FILE", &defaults)
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 5);
}

#[test]
fn help_explains_every_option() {
    let output = spoolite()
        .args(["changes", "--help"])
        .output()
        .expect("run");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for option in [
        "--db",
        "--since",
        "--limit",
        "--follow",
        "SPOOLITE_DB",
        "SPOOLITE_SINCE",
        "SPOOLITE_LIMIT",
        "SPOOLITE_FOLLOW",
    ] {
        assert!(help.contains(option), "{option} in {help}");
    }
}

// ---------------------------------------------------------------------------------
// Following

/// A running `spoolite changes --follow`, its stdout read line by line on a thread.
/// Dropping it kills the process and reaps it.
pub(crate) struct Follower {
    pub(crate) child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far, parsed.
    pub(crate) seen: Vec<Value>,
}

impl Follower {
    pub(crate) fn start(command: &mut Command) -> Follower {
        let mut child = command
            .arg("--follow")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start spoolite changes --follow");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    pub(crate) fn on(db: &Path, args: &[&str]) -> Follower {
        let mut command = spoolite();
        command.arg("changes").arg("--db").arg(db).args(args);
        Follower::start(&mut command)
    }

    /// A follower of `db` (with `args`) that has read the rows already committed.
    pub(crate) fn caught_up<'a>(db: impl Into<DbRef<'a>>, args: &[&str]) -> Follower {
        let db = db.into();
        let mut follower = Follower::on(&db.db(), args);
        follower.read_through(max_seq(db), "the rows already committed");
        follower
    }

    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits")
    }

    /// The next line, within `limit`.
    pub(crate) fn next_within(&mut self, limit: Duration, what: &str) -> Value {
        let line = self
            .lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no line within {limit:?} ({what}): {e}"));
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        self.seen.push(value.clone());
        value
    }

    /// Reads lines until one with `change_seq >= seq`; returns the lines read.
    pub(crate) fn read_through(&mut self, seq_wanted: i64, what: &str) -> Vec<Value> {
        let start = Instant::now();
        let mut read = Vec::new();
        while read.last().is_none_or(|line| seq(line) < seq_wanted) {
            let left = WAIT.checked_sub(start.elapsed()).unwrap_or_default();
            read.push(self.next_within(left, what));
        }
        read
    }

    pub(crate) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.pid());
    }

    pub(crate) fn wait_exit(&mut self, limit: Duration, what: &str) -> ExitStatus {
        let mut status = None;
        wait_until(limit, what, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }

    /// Sends `signal`, which must end the follower with exit 0 at once (within
    /// 1.5 s).
    pub(crate) fn stop_with(&mut self, signal: libc::c_int) {
        let sent = Instant::now();
        self.signal(signal);
        let status = self.wait_exit(WAIT, "the follower to stop");
        assert_eq!(status.code(), Some(0), "signal {signal}: {status}");
        assert!(
            sent.elapsed() < Duration::from_millis(1500),
            "signal {signal}: {:?}",
            sent.elapsed()
        );
    }

    /// Ingests round `round` into `db` as `name`: takeoffs of new keys of flights
    /// `one` and `two`, and a later revision of `one`'s first; the follower must
    /// print the round's rows within `within` of the commit.
    pub(crate) fn assert_follows_a_commit<'a>(
        &mut self,
        dir: &Path,
        db: impl Into<DbRef<'a>>,
        name: &str,
        (one, two): (&str, &str),
        round: u32,
        within: Duration,
    ) {
        let db = db.into();
        let before = max_seq(db);
        let events = [
            takeoff(one, round, 1),
            takeoff(two, round, 1),
            takeoff(one, 0, i64::from(round) + 2),
        ];
        ingest_batch(dir, &db.db(), name, &events);
        let committed = Instant::now();
        let lines = self.read_through(max_seq(db), "a later commit");
        let waited = committed.elapsed();
        assert!(waited < within, "round {round}: {waited:?}");
        assert_eq!(lines, feed_after(db, before), "round {round}");
    }

    /// The lines printed after the last one read, once the process has ended.
    pub(crate) fn rest(&mut self) -> Vec<Value> {
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(WAIT) {
            let value: Value = serde_json::from_str(&line).expect("a JSON line");
            self.seen.push(value.clone());
            rest.push(value);
        }
        rest
    }

    /// Seconds of CPU (user and system) the process has used, in clock ticks.
    pub(crate) fn cpu_ticks(&self) -> u64 {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("read stat");
        // Fields after the command name, which is in parentheses: utime is the
        // 12th of them and stime the 13th.
        let after = &stat[stat.rfind(')').expect("comm") + 2..];
        let fields: Vec<&str> = after.split(' ').collect();
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A takeoff on 2026-12-01 at 10:`minute`.
pub(crate) fn takeoff(flight: &str, minute: u32, revision: i64) -> String {
    event(
        flight,
        "takeoff",
        &format!("2026-12-01T10:{minute:02}:00Z"),
        Some(revision),
        "{}",
    )
}

#[test]
fn follow_prints_each_later_commit_within_moments() {
    let (dir, db) = database_with_changes();
    let mut follower = Follower::caught_up(&db, &[]);
    assert_eq!(follower.seen, feed_rows(&db, ""));
    // The notification of the commit, not the one-second fallback, brings the
    // lines: five commits in a row each within 400 ms.
    for round in 0..5u32 {
        follower.assert_follows_a_commit(
            dir.path(),
            &db,
            &format!("follow{round}.json"),
            ("FW1", "FW2"),
            round,
            Duration::from_millis(400),
        );
    }
    follower.signal(libc::SIGTERM);
    assert!(follower.wait_exit(WAIT, "the follower to stop").success());
    assert!(follower.rest().is_empty());
}

/// A follower of `db` with `--limit LIMIT`, which holds fewer rows than that but
/// for three more that `dir`'s next batch writes: it ends with exit 0 when it has
/// printed the first LIMIT rows of the feed.
pub(crate) fn assert_a_follower_stops_at_its_limit<'a>(
    dir: &Path,
    db: impl Into<DbRef<'a>>,
    limit: usize,
) {
    let db = db.into();
    let mut follower = Follower::caught_up(db, &["--limit", &limit.to_string()]);
    ingest_batch(
        dir,
        &db.db(),
        "more.json",
        &[
            takeoff("FL1", 1, 1),
            takeoff("FL2", 1, 1),
            takeoff("FL3", 1, 1),
        ],
    );
    let status = follower.wait_exit(WAIT, "the follower to reach its limit");
    assert!(status.success(), "{status}");
    let rest = follower.rest();
    assert_eq!(follower.seen.len(), limit, "{rest:?}");
    assert_eq!(follower.seen, feed_rows(db, "")[..limit]);
}

#[test]
fn follow_with_a_limit_stops_at_the_limit() {
    let (dir, db) = database_with_changes();
    assert_a_follower_stops_at_its_limit(dir.path(), &db, 7);
}

/// A follower of `db` that has read every row uses (almost) no CPU while nothing
/// is committed.
pub(crate) fn assert_an_idle_follower_uses_no_cpu<'a>(db: impl Into<DbRef<'a>>) {
    let mut follower = Follower::caught_up(db, &[]);
    let before = follower.cpu_ticks();
    let start = Instant::now();
    // A measurement over a fixed span: CPU used while nothing happens (a
    // follower waits on the file system or the connection, and reads nothing).
    std::thread::sleep(Duration::from_secs(3));
    let used = follower.cpu_ticks() - before;
    assert!(
        used <= 2,
        "{used} ticks of CPU in {:?} while idle",
        start.elapsed()
    );
    assert!(follower.child.try_wait().expect("try_wait").is_none());
}

#[test]
fn an_idle_follower_uses_no_cpu() {
    let (_dir, db) = database_with_changes();
    assert_an_idle_follower_uses_no_cpu(&db);
}

#[test]
fn sigterm_and_sigint_end_a_follower_with_exit_0_at_once() {
    let (_dir, db) = database_with_changes();
    for signal in [libc::SIGTERM, libc::SIGINT] {
        Follower::caught_up(&db, &[]).stop_with(signal);
    }
}

/// A follower of `db` whose reader goes away after its first line ends, once
/// `then` has run, with exit 0 and nothing on stderr (`what` heads the messages).
pub(crate) fn assert_a_closed_stdout_ends_a_follower(db: &Path, then: impl FnOnce(), what: &str) {
    let mut child = spoolite()
        .arg("changes")
        .arg("--db")
        .arg(db)
        .arg("--follow")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("read a line");
    assert!(line.starts_with('{'), "{line}");
    drop(reader);
    then();
    let mut status = None;
    wait_until(WAIT, "the follower to notice its reader has gone", || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    let output = child.wait_with_output().expect("stderr");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.expect("ended").code(), Some(0), "{what}{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn a_closed_stdout_ends_a_follower_with_exit_0() {
    let (dir, db) = database_with_changes();
    for trigger_output in [true, false] {
        let output = || {
            if trigger_output {
                let name = format!("after-close-{}.json", max_seq(&db));
                ingest_batch(dir.path(), &db, &name, &[takeoff("CL1", 1, max_seq(&db))]);
            }
        };
        assert_a_closed_stdout_ends_a_follower(&db, output, &format!("output {trigger_output}: "));
    }
}

/// Starts `spoolite run` on the site with a short settle time.
fn start_daemon(site: &Site) -> Daemon {
    let mut daemon = site.spawn(
        site.run_command()
            .args(["--settle", "100ms", "--rescan", "1s"]),
    );
    daemon.wait_serving(site);
    daemon
}

/// File `file` of round `round`: new keys and later revisions of earlier ones, some
/// of them retractions (and a retraction taken back in a later round).
fn crash_batch(round: i64, file: i64) -> String {
    let revision = round * 10 + file + 1;
    let events: Vec<String> = (0..24)
        .map(|k| {
            let flight = format!("KR{:02}", (k + round * 7 + file * 3) % 40);
            let kind = ["off_blocks", "on_blocks"][usize::try_from(k % 2).expect("0 or 1")];
            let instant = format!("2026-12-01T{:02}:05:00Z", 6 + k % 2 * 3);
            if (k + round + file) % 6 == 0 {
                retraction(&flight, kind, &instant, revision)
            } else {
                event(
                    &flight,
                    kind,
                    &instant,
                    Some(revision),
                    &format!("{{\"round\":{round},\"file\":{file}}}"),
                )
            }
        })
        .collect();
    json_batch(&events)
}

#[test]
fn a_follower_sees_each_change_once_while_the_daemon_is_killed_and_restarted() {
    let site = Site::new();
    let mut daemon = start_daemon(&site);
    site.drop_file("r0-0.json", crash_batch(0, 0));
    daemon.wait(WAIT, "the first batch to be archived", || {
        site.archived().len() == 1
    });
    let mut follower = Follower::on(&site.db, &[]);
    let mut dropped = 1;
    for round in 1..=5 {
        let archived = site.archived().len();
        for file in 0..3 {
            site.drop_file(&format!("r{round}-{file}.json"), crash_batch(round, file));
            dropped += 1;
        }
        // Killed as soon as one of the round's batches is in, with others on the way.
        daemon.wait(WAIT, "a batch of the round to be archived", || {
            site.archived().len() > archived
        });
        daemon.kill_hard();
        // The follower outlives the daemon, and goes on with the next one.
        assert!(follower.child.try_wait().expect("try_wait").is_none());
        daemon = start_daemon(&site);
    }
    daemon.wait(WAIT, "every batch to be archived", || {
        site.archived().len() == dropped && site.waiting().is_empty()
    });
    assert!(
        site.rejected_names().is_empty(),
        "{:?}",
        site.rejected_names()
    );
    let last = max_seq(&site.db);
    if follower.seen.last().is_none_or(|line| seq(line) < last) {
        follower.read_through(last, "the last change");
    }
    follower.signal(libc::SIGTERM);
    assert!(follower.wait_exit(WAIT, "the follower to stop").success());
    follower.rest();
    let seen = &follower.seen;
    // Never one change_seq twice, never a lower one.
    let seqs: Vec<i64> = seen.iter().map(seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(seqs.last(), Some(&last));
    // The latest line of each key is its row, whole, and every key has one.
    let mut latest: BTreeMap<String, Value> = BTreeMap::new();
    for line in seen {
        let key = line["idempotency_key"].as_str().expect("key").to_owned();
        latest.insert(key, line.clone());
    }
    let rows: BTreeMap<String, Value> = feed_rows(&site.db, "")
        .into_iter()
        .map(|row| {
            (
                row["idempotency_key"].as_str().expect("key").to_owned(),
                row,
            )
        })
        .collect();
    assert_eq!(latest, rows);
    assert!(rows.values().any(|row| row["retracted"] == json!(true)));
}

// ---------------------------------------------------------------------------------
// An analyst account

#[test]
fn an_analyst_who_may_not_write_the_folder_follows_the_feed() {
    assert_root();
    let (dir, db) = database_with_changes();
    let state = db.parent().expect("state folder");
    let_others_traverse(dir.path());
    // As on a packaged host: the folder and the files are the daemon's, the
    // analysts' group may read them and list the folder, and write neither.
    share_read_only_with_analyst(state);
    let files_before = crate::support::names(state);
    let mut command = spoolite_as(ANALYST, ANALYST);
    command.arg("changes").arg("--db").arg(&db).current_dir("/");
    let mut follower = Follower::start(&mut command);
    let lines = follower.read_through(max_seq(&db), "the rows already committed");
    assert_eq!(lines, feed_rows(&db, ""));
    let batch_dir = tempfile::tempdir().expect("temp dir");
    ingest_batch(
        batch_dir.path(),
        &db,
        "analyst.json",
        &[takeoff("AN1", 1, 1)],
    );
    let lines = follower.read_through(max_seq(&db), "a commit after the analyst started");
    assert_eq!(lines.len(), 1);
    follower.signal(libc::SIGTERM);
    assert!(follower.wait_exit(WAIT, "the follower to stop").success());
    assert_eq!(
        crate::support::names(state),
        files_before,
        "the analyst created nothing"
    );
}

// ---------------------------------------------------------------------------------
// The README's downstream job

fn example_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/examples/follow_changes.py")
}

/// Runs the example job once; returns its checkpoint.
fn run_example(db: &Path, state: &Path) -> i64 {
    let output = Command::new("python3")
        .arg(example_script())
        .arg("--db")
        .arg(db)
        .arg("--state")
        .arg(state)
        .arg("--spoolite")
        .arg(env!("CARGO_BIN_EXE_spoolite"))
        .env_remove("SPOOLITE_DB")
        .output()
        .expect("python3 runs the example (install python3)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .trim()
        .strip_prefix("checkpoint ")
        .expect("checkpoint line")
        .parse()
        .expect("a number")
}

#[test]
fn the_python_example_handles_each_change_exactly_once() {
    let (dir, db) = database_with_changes();
    let state = dir.path().join("job.db");
    // What the example's ledger must hold of a line: change_seq, key, retracted.
    let ledger_row = |line: &Value| {
        vec![
            seq(line).to_string(),
            line["idempotency_key"].as_str().expect("key").to_owned(),
            u8::from(line["retracted"] == json!(true)).to_string(),
        ]
    };
    let mut printed: Vec<Vec<String>> = changes(&db, &[]).1.iter().map(ledger_row).collect();
    let first = run_example(&db, &state);
    assert_eq!(first, max_seq(&db));
    // More batches: updates of handled keys, a retraction, new flights.
    let more = [
        event(
            "BA0117-20261129",
            "on_blocks",
            "2026-11-29T12:07:00Z",
            Some(1),
            "{}",
        ),
        event(
            "BA0118-20261129",
            "takeoff",
            "2026-11-29T12:00:00Z",
            Some(4),
            "{\"tail\":\"G-XWBB\"}",
        ),
        event(
            "BA0200-20261129",
            "off_blocks",
            "2026-11-29T16:00:00Z",
            Some(1),
            "{}",
        ),
        event(
            "BA0200-20261129",
            "on_blocks",
            "2026-11-29T17:45:30Z",
            Some(1),
            "{}",
        ),
    ];
    ingest_batch(dir.path(), &db, "more.json", &more);
    ingest_batch(
        dir.path(),
        &db,
        "retract.json",
        &[retraction(
            "BA0119-20261129",
            "landing",
            "2026-11-29T15:30:00.5Z",
            2,
        )],
    );
    printed.extend(
        changes(&db, &["--since", &first.to_string()])
            .1
            .iter()
            .map(ledger_row),
    );
    let second = run_example(&db, &state);
    assert_eq!(second, max_seq(&db));
    assert!(second > first);
    // Every change handled once: the ledger is exactly what the feed printed.
    let handled = query(
        &state,
        "SELECT change_seq, idempotency_key, retracted FROM handled ORDER BY change_seq",
    );
    assert_eq!(handled, printed);
    assert_eq!(
        query(&state, "SELECT change_seq FROM checkpoint")[0][0],
        second.to_string()
    );
    // Its live events are spoolite's, and its block minutes spoolite's flight_times'.
    let live = query(
        &state,
        "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision FROM live_event ORDER BY idempotency_key",
    );
    let want = query(
        &db,
        "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision FROM duty_event ORDER BY idempotency_key",
    );
    assert_eq!(live, want);
    let minutes = query(
        &state,
        "SELECT flight_id, block_minutes FROM block_minutes WHERE block_minutes IS NOT NULL ORDER BY flight_id",
    );
    let want = query(
        &db,
        "SELECT flight_id, block_minutes FROM flight_times WHERE block_minutes IS NOT NULL ORDER BY flight_id",
    );
    assert_eq!(minutes, want);
    assert_eq!(minutes.len(), 2, "{minutes:?}");
    // A run with nothing new changes nothing.
    let before = query(&state, "SELECT * FROM handled");
    assert_eq!(run_example(&db, &state), second);
    assert_eq!(query(&state, "SELECT * FROM handled"), before);
}

#[test]
fn the_analysts_guide_shows_the_example_as_it_is() {
    let guide = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/analysing.md"))
        .expect("read docs/analysing.md");
    let section = &guide[guide.find("## Following changes").expect("the section")..];
    let start = section.find("```python\n").expect("a Python block") + "```python\n".len();
    let shown = &section[start..start + section[start..].find("```").expect("its end")];
    let script = fs::read_to_string(example_script()).expect("read the example");
    assert!(
        script.contains(shown),
        "the guide's excerpt differs from the script:\n{shown}"
    );
}

#[test]
fn a_feed_longer_than_a_page_reads_whole_and_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    // 2,500 rows: three pages of the store's 1,000.
    let events: Vec<String> = (0..2500)
        .map(|i| {
            takeoff(
                &format!("PG{i:04}"),
                u32::try_from(i % 60).expect("minute"),
                1,
            )
        })
        .collect();
    ingest_batch(dir.path(), &db, "big.json", &events);
    let all = feed_rows(&db, "");
    assert_eq!(all.len(), 2500);
    let (code, lines, _, stderr) = changes(&db, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines, all);
    for (since, limit) in [(0, 1000), (0, 1001), (999, 1500), (1500, 5000)] {
        assert_window(&db, &all, since, limit);
    }
}

#[test]
fn a_reader_never_sees_a_schema_half_made_while_the_daemon_creates_the_database() {
    for round in 0..5 {
        let site = Site::new();
        fs::create_dir_all(site.db.parent().expect("state")).expect("mkdir");
        let (done, finished) = mpsc::channel();
        let db = site.db.clone();
        // A reader that looks as fast as it can from the moment the file exists.
        let reader = std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            let started = Instant::now();
            let mut conn = None;
            while finished.try_recv().is_err() && started.elapsed() < WAIT {
                if conn.is_none() && db.exists() {
                    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
                    conn = rusqlite::Connection::open_with_flags(&db, flags).ok();
                }
                let Some(conn) = &conn else { continue };
                if let Ok(version) =
                    conn.query_row("PRAGMA user_version", [], |row| row.get::<_, i64>(0))
                {
                    seen.insert(version);
                }
            }
            seen
        });
        let mut daemon = site.spawn(&mut site.run_command());
        daemon.wait_serving(&site);
        // Then `changes`, as the analyst who starts it right after the daemon made
        // the file.
        daemon.wait(WAIT, "the database file", || site.db.exists());
        let output = site_changes(&site);
        done.send(()).expect("stop the reader");
        let seen = reader.join().expect("reader");
        let current = query(&site.db, "PRAGMA user_version")[0][0]
            .parse::<i64>()
            .expect("n");
        assert!(
            seen.iter().all(|v| *v == 0 || *v == current),
            "round {round}: a reader saw schema versions {seen:?} (current {current})"
        );
        assert!(output.status.success(), "{output:?}");
    }
}

/// `spoolite changes --db DB` of `site`, once.
fn site_changes(site: &Site) -> std::process::Output {
    spoolite()
        .args(["changes", "--db"])
        .arg(&site.db)
        .output()
        .expect("run changes")
}
