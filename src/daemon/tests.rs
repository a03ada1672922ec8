//! In-process tests of the daemon step, driven with chosen instants: no sleeps, no
//! process. Every instant the daemon reads, the step's `now` and its clock's, is the
//! test's `ManualClock`, so that hours pass in no time. The end-to-end tests that
//! kill the real binary live in tests/it/.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant, SystemTime};

use super::take::ProgressLog;
use super::*;
use crate::clock::format_millis;
use crate::state;

/// A clock that moves only when the test sets it: its monotonic and wall times are
/// one origin each plus the same offset. Clones share the offset, so that the test
/// keeps one and the daemon reads another.
#[derive(Debug, Clone)]
struct ManualClock {
    origin: Instant,
    wall_origin: SystemTime,
    offset_ns: Arc<AtomicU64>,
}

impl ManualClock {
    fn new() -> ManualClock {
        ManualClock {
            origin: Instant::now(),
            wall_origin: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            offset_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock to `offset` past its origin.
    fn set(&self, offset: Duration) {
        let nanos = u64::try_from(offset.as_nanos()).expect("an offset of under 584 years");
        self.offset_ns.store(nanos, Ordering::SeqCst);
    }

    fn offset(&self) -> Duration {
        Duration::from_nanos(self.offset_ns.load(Ordering::SeqCst))
    }

    /// The wall time at `seconds` past the origin.
    fn wall_at(&self, seconds: u64) -> SystemTime {
        self.wall_origin + Duration::from_secs(seconds)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.offset()
    }
    fn wall(&self) -> SystemTime {
        self.wall_origin + self.offset()
    }
}

const SETTLE: Duration = Duration::from_secs(2);
const PARTIAL: Duration = Duration::from_secs(60);
const RESCAN: Duration = Duration::from_secs(30);

struct Harness {
    _dir: tempfile::TempDir,
    spool: Spool,
    db: PathBuf,
    metrics_file: Option<PathBuf>,
    daemon: Daemon,
    clock: ManualClock,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_db(|dir| dir.join("spoolite.db"), true)
    }

    /// A daemon on a fresh spool; `open` says whether the database opens at start.
    fn with_db(db: impl Fn(&Path) -> PathBuf, open: bool) -> Harness {
        Harness::build(db, open, PARTIAL, None)
    }

    /// A daemon with this `--partial-timeout`, writing a metrics file.
    fn with_partial_timeout(partial_timeout: Duration) -> Harness {
        let db = |dir: &Path| dir.join("spoolite.db");
        Harness::build(db, true, partial_timeout, Some("spoolite.prom"))
    }

    fn build(
        db: impl Fn(&Path) -> PathBuf,
        open: bool,
        partial_timeout: Duration,
        metrics_file: Option<&str>,
    ) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = Spool::create(&dir.path().join("spool")).expect("spool");
        let db = db(dir.path());
        let store = open.then(|| Store::open(&Db::Sqlite(db.clone())).expect("open store"));
        let config = Config {
            spool: spool.root.clone(),
            db: Db::Sqlite(db.clone()),
            settle: SETTLE,
            partial_timeout,
            rescan: RESCAN,
            file_bytes_max: 1 << 30,
            limits: Limits::default(),
            metrics_file: metrics_file.map(|name| dir.path().join(name)),
            archive_keep: None,
        };
        let metrics_file = config.metrics_file.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let clock = ManualClock::new();
        let daemon = Daemon::new(spool.clone(), store, config, stop, Box::new(clock.clone()));
        Harness {
            _dir: dir,
            spool,
            db,
            metrics_file,
            daemon,
            clock,
        }
    }

    /// Sets the clock to `seconds` past its origin and steps the daemon then.
    /// Steps at `seconds` and expects the report that a file waits for the rest
    /// of its bytes.
    fn expect_still_arriving_at(&mut self, seconds: f64) {
        match self.at(seconds) {
            Report::Waiting {
                why: Left::StillArriving { .. },
                ..
            } => {}
            other => panic!("expected a wait for the rest, got {other:?}"),
        }
    }

    fn at(&mut self, seconds: f64) -> Report {
        self.clock.set(Duration::from_secs_f64(seconds));
        self.daemon.step(self.clock.now())
    }

    /// Steps at `seconds` until the daemon is idle; returns the reports before that.
    fn until_idle(&mut self, seconds: f64) -> Vec<Report> {
        let mut reports = Vec::new();
        for _ in 0..100_000 {
            match self.at(seconds) {
                Report::Idle { .. } => return reports,
                report => reports.push(report),
            }
        }
        panic!("never idle: {:?}", reports.last());
    }

    fn drop_file(&self, name: &str, content: &str) {
        fs::write(self.spool.incoming.join(name), content).expect("write");
    }

    fn archived(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.spool.archive)
            .expect("archive/")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn scans(&self) -> u64 {
        self.daemon.publisher.metrics().scans
    }
}

fn batch(flight: &str) -> String {
    format!(
        r#"{{"events":[{{"flight_id":"{flight}","event_kind":"off_blocks","instant_utc":"2026-12-01T10:05:00Z"}}]}}"#
    )
}

fn took(report: &Report) -> (&str, &'static str) {
    match report {
        Report::Took { name, outcome, .. } => (name.as_str(), outcome.word()),
        other => panic!("expected a file taken, got {other:?}"),
    }
}

#[test]
fn a_file_is_taken_once_it_has_settled_and_not_before() {
    let mut h = Harness::new();
    h.drop_file("a.json", &batch("A1"));
    match h.at(0.0) {
        Report::Idle { wake_in } => assert_eq!(wake_in, Some(SETTLE)),
        other => panic!("taken before settling: {other:?}"),
    }
    // Not notified and not due: no listing, nothing taken.
    assert!(matches!(h.at(1.0), Report::Idle { .. }));
    assert_eq!(h.scans(), 1);
    let report = h.at(2.0);
    assert_eq!(took(&report), ("a.json", "processed"));
    assert_eq!(h.archived(), ["a.json"]);
}

#[test]
fn an_idle_daemon_lists_the_folder_only_when_rung_or_at_the_rescan() {
    let mut h = Harness::new();
    for second in 0..29 {
        assert!(matches!(h.at(f64::from(second)), Report::Idle { .. }));
    }
    assert_eq!(h.scans(), 1, "listed without a reason");
    assert!(matches!(h.at(30.0), Report::Idle { .. }));
    assert_eq!(h.scans(), 2, "the rescan lists again");
    h.daemon.notify();
    assert!(matches!(h.at(31.0), Report::Idle { .. }));
    assert_eq!(h.scans(), 3, "a ring lists again");
}

#[test]
fn a_backlog_is_taken_oldest_first_with_a_bounded_number_of_listings() {
    let mut h = Harness::new();
    let files = 300;
    for i in 0..files {
        let name = format!("f{i:04}.json");
        h.drop_file(&name, &batch(&format!("BL{i}")));
        // Oldest first by modification time: the last dropped is the oldest here.
        let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 - i as u64);
        fs::File::options()
            .write(true)
            .open(h.spool.incoming.join(&name))
            .and_then(|f| f.set_modified(mtime))
            .expect("set mtime");
    }
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    let reports = h.until_idle(2.0);
    let taken: Vec<&str> = reports.iter().map(|r| took(r).0).collect();
    let mut expected: Vec<String> = (0..files).map(|i| format!("f{i:04}.json")).collect();
    expected.reverse();
    assert_eq!(taken, expected);
    assert!(
        h.scans() <= 3,
        "{} listings for a backlog of {files}",
        h.scans()
    );
}

#[test]
fn a_cut_file_waits_for_the_partial_timeout_then_is_rejected() {
    let mut h = Harness::new();
    h.drop_file("cut.json", r#"{"events":[{"flight_id":"C1""#);
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    h.expect_still_arriving_at(2.0);
    // Nothing more until the timeout, counted from the last change (at 0 s).
    for second in [3.0, 30.0, 59.0] {
        assert!(matches!(h.at(second), Report::Idle { .. }), "at {second}");
    }
    let report = h.at(60.0);
    assert_eq!(took(&report), ("cut.json", "rejected"));
    let reason = fs::read_to_string(h.spool.rejected.join("cut.json.reason.json")).expect("reason");
    assert!(reason.contains("\"truncated\""), "{reason}");
    assert!(reason.contains("--partial-timeout"), "{reason}");
}

#[test]
fn the_rest_of_a_cut_file_arriving_makes_it_go_in() {
    let mut h = Harness::new();
    let whole = batch("R1");
    h.drop_file("r.json", &whole[..20]);
    h.at(0.0);
    assert!(matches!(h.at(2.0), Report::Waiting { .. }));
    h.drop_file("r.json", &whole);
    h.daemon.notify();
    // The change restarts the settle time.
    assert!(matches!(h.at(3.0), Report::Idle { .. }));
    assert_eq!(took(&h.at(5.0)), ("r.json", "processed"));
}

#[test]
fn a_database_that_cannot_be_opened_holds_files_back_and_is_opened_again() {
    // The database path is a folder at first: SQLite cannot open it.
    let mut h = Harness::with_db(|dir| dir.join("db"), false);
    fs::create_dir_all(&h.db).expect("mkdir");
    h.drop_file("a.json", &batch("DB1"));
    // The first listing finds nothing ready, and looks at the database: a fault,
    // told without a file in hand.
    match h.at(0.0) {
        Report::RetryLater { name, fault } => {
            assert!(
                name.is_empty() && fault.database && fault.attempts == 1,
                "{fault:?}"
            );
        }
        other => panic!("expected a database fault, got {other:?}"),
    }
    let mut attempts = Vec::new();
    let mut t = 2.0;
    for _ in 0..3 {
        match h.until_idle(t).pop() {
            Some(Report::RetryLater { fault, .. }) => {
                assert!(fault.database, "{fault:?}");
                attempts.push(fault.attempts);
                t += fault.next_in.as_secs_f64();
            }
            other => panic!("expected a database fault, got {other:?}"),
        }
    }
    assert_eq!(attempts, [2, 3, 4], "the back-off counts its own attempts");
    assert!(h.daemon.publisher.state().database_fault.is_some());
    fs::remove_dir(&h.db).expect("rmdir");
    let reports = h.until_idle(t + 30.0);
    assert_eq!(
        took(reports.last().expect("a report")),
        ("a.json", "processed")
    );
    assert_eq!(h.daemon.publisher.state().database_fault, None);
}

#[test]
fn a_file_that_cannot_be_read_waits_alone_while_later_files_flow() {
    let mut h = Harness::new();
    h.drop_file("a.json", &batch("RD1"));
    h.drop_file("b.json", &batch("RD2"));
    // A name the daemon lists but cannot open as it listed it: replaced by a folder
    // between the listing and the take would be gone; a file that vanishes is
    // simply forgotten, and the other file goes in.
    h.at(0.0);
    fs::remove_file(h.spool.incoming.join("a.json")).expect("rm");
    let reports = h.until_idle(2.0);
    let taken: Vec<(&str, &str)> = reports
        .iter()
        .filter(|r| matches!(r, Report::Took { .. }))
        .map(took)
        .collect();
    assert_eq!(taken, [("b.json", "processed")]);
    assert_eq!(h.archived(), ["b.json"]);
}

#[test]
fn a_value_the_database_refuses_rejects_only_its_file_after_a_few_tries() {
    let mut h = Harness::new();
    h.daemon
        .database
        .store()
        .expect("open")
        .limit_value_bytes_for_tests(2000);
    let big = format!(
        r#"{{"events":[{{"flight_id":"TB1","event_kind":"off_blocks","instant_utc":"2026-12-01T10:05:00Z","payload":{{"note":"{}"}}}}]}}"#,
        "x".repeat(4000)
    );
    h.drop_file("big.json", &big);
    h.drop_file("small.json", &batch("TB2"));
    h.at(0.0);
    let mut t = 2.0;
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        for report in h.until_idle(t) {
            match &report {
                Report::Took { .. } => outcomes.push(took(&report).0.to_owned()),
                Report::RetryLater { fault, .. } => assert!(!fault.database, "{fault:?}"),
                _ => {}
            }
        }
        t += 31.0;
    }
    assert_eq!(outcomes, ["small.json", "big.json"]);
    let reason = fs::read_to_string(h.spool.rejected.join("big.json.reason.json")).expect("reason");
    assert!(reason.contains("\"too_large\""), "{reason}");
}

#[test]
fn a_long_file_logs_its_progress_every_10_s_and_a_short_one_never() {
    let t0 = ManualClock::new().now();
    let mut log = ProgressLog { last: t0 };
    let at = |s: u64| t0 + Duration::from_secs(s);
    let due: Vec<u64> = (0..=35).filter(|&s| log.due(at(s))).collect();
    assert_eq!(due, [10, 20, 30]);
}

#[test]
fn rings_in_quick_succession_cost_one_listing_per_gap() {
    let mut h = Harness::new();
    h.at(0.0);
    assert_eq!(h.scans(), 1);
    let mut t = 1.0;
    // A burst: a ring every 5 ms for half a second.
    for _ in 0..100 {
        h.daemon.notify();
        h.at(t);
        t += 0.005;
    }
    let listings = h.scans() - 1;
    assert!(
        (9..=11).contains(&listings),
        "{listings} listings for 100 rings in 0.5 s"
    );
    // A lone ring later is listed at once.
    h.daemon.notify();
    h.at(t + 1.0);
    assert_eq!(h.scans() - 1, listings + 1);
}

#[test]
fn a_cut_file_waits_out_a_two_hour_partial_timeout_on_the_clock_alone_then_is_rejected() {
    const TWO_HOURS: Duration = Duration::from_secs(2 * 3600);
    let mut h = Harness::with_partial_timeout(TWO_HOURS);
    h.drop_file("cut.json", r#"{"events":[{"flight_id":"C2""#);
    let incoming = h.spool.incoming.join("cut.json");
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    h.expect_still_arriving_at(2.0);
    // An hour on, a rescan looks again: the file still waits, and the state and
    // metrics files tell since when, by the clock.
    assert!(matches!(h.at(3600.0), Report::Idle { .. }));
    assert!(incoming.exists(), "taken before the partial timeout");
    let state = state::read(&h.spool.root)
        .expect("read")
        .expect("a state file");
    assert_eq!(state.files_waiting, 1);
    let seen = format_millis(h.clock.wall_at(0));
    assert_eq!(state.oldest_waiting_seen_at.as_deref(), Some(seen.as_str()));
    // Nothing in it changed since the file was found still arriving, so it was
    // not written again.
    assert_eq!(state.written_at, format_millis(h.clock.wall_at(2)));
    assert_eq!(state.waiting[0].state, "still_arriving");
    let metrics_file = h.metrics_file.as_ref().expect("a metrics file");
    let metrics = fs::read_to_string(metrics_file).expect("metrics");
    assert!(
        metrics.contains("\nspoolite_oldest_waiting_age_seconds 3600\n"),
        "{metrics}"
    );
    // A second before the timeout the daemon asks to be woken in that second.
    match h.at(7199.0) {
        Report::Idle { wake_in } => assert_eq!(wake_in, Some(Duration::from_secs(1))),
        other => panic!("taken a second early: {other:?}"),
    }
    assert!(incoming.exists(), "taken before the partial timeout");
    let report = h.at(7200.0);
    assert_eq!(took(&report), ("cut.json", "rejected"));
    assert!(!incoming.exists());
    assert!(h.spool.rejected.join("cut.json").exists());
    let reason = fs::read_to_string(h.spool.rejected.join("cut.json.reason.json")).expect("reason");
    let reason: serde_json::Value = serde_json::from_str(&reason).expect("reason JSON");
    assert_eq!(reason["reason"], "truncated");
    let detail = reason["detail"].as_str().expect("a detail");
    assert!(
        detail.contains("it has not changed for 2h (--partial-timeout)"),
        "{detail}"
    );
    assert_eq!(
        reason["rejected_at"],
        format_millis(h.clock.wall_at(7200)).as_str()
    );
}

#[test]
fn a_batch_is_recorded_as_ingested_at_the_clocks_time_hours_after_it_was_dropped() {
    let mut h = Harness::new();
    h.drop_file("late.json", &batch("L1"));
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    // Five hours without a step: the next one lists the folder and takes the file.
    let report = h.at(5.0 * 3600.0);
    assert_eq!(took(&report), ("late.json", "processed"));
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let db = rusqlite::Connection::open_with_flags(&h.db, flags).expect("open read-only");
    let ingested_at: String = db
        .query_row("SELECT ingested_at FROM ingest_inbox", [], |row| row.get(0))
        .expect("one inbox row");
    assert_eq!(ingested_at, format_millis(h.clock.wall_at(5 * 3600)));
}

/// The database file deleted, or another put in its place, under a serving daemon:
/// every file waits, the fault is said once, and the daemon never creates a new
/// database by itself; the old file put back, it goes on.
#[test]
fn a_database_file_deleted_or_replaced_under_the_daemon_holds_files_back() {
    let mut h = Harness::new();
    h.drop_file("one.json", &batch("G1"));
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    assert_eq!(took(&h.at(2.0)), ("one.json", "processed"));

    let aside = h.db.with_extension("aside");
    fs::rename(&h.db, &aside).expect("move the database away");
    h.drop_file("two.json", &batch("G2"));
    h.daemon.notify();
    // The listing finds nothing ready yet and looks at the database: gone.
    let first = h.at(3.0);
    let Report::RetryLater { name, fault } = &first else {
        panic!("expected a database fault, got {first:?}");
    };
    assert_eq!(name, "");
    assert!(fault.database && fault.lasting && fault.log, "{fault:?}");
    assert!(fault.error.contains("is gone"), "{}", fault.error);
    // Tried again after each back-off, said no more, and no database made.
    let mut second = 3.0;
    for _ in 0..5 {
        second += 31.0;
        match h.at(second) {
            Report::RetryLater { fault, .. } => {
                assert!(!fault.log, "said again: {fault:?}");
                assert!(fault.error.contains("is gone"), "{}", fault.error);
            }
            other => panic!("expected the fault again, got {other:?}"),
        }
    }
    assert!(!h.db.exists(), "the daemon created a new database");
    assert_eq!(h.archived(), ["one.json"]);
    assert!(h.daemon.publisher.state().database_fault.is_some());

    // Another database, made elsewhere and renamed to the path: the same, as a
    // replacement.
    let other = h.db.with_extension("other");
    drop(Store::open(&Db::Sqlite(other.clone())).expect("another database"));
    fs::rename(&other, &h.db).expect("put another database at the path");
    second += 31.0;
    let replaced = h.until_idle(second);
    let errors: Vec<&str> = replaced
        .iter()
        .filter_map(|r| match r {
            Report::RetryLater { fault, .. } => Some(fault.error.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("was replaced")),
        "{replaced:?}"
    );
    assert_eq!(h.archived(), ["one.json"]);

    // The old file back at its path: the daemon goes on into it.
    fs::rename(&aside, &h.db).expect("put the database back");
    second += 31.0;
    let reports = h.until_idle(second);
    assert_eq!(
        took(reports.last().expect("a report")),
        ("two.json", "processed")
    );
    assert_eq!(h.archived(), ["one.json", "two.json"]);
    let mut store = Store::open(&Db::Sqlite(h.db.clone())).expect("open");
    assert_eq!(store.totals().expect("totals").batches, 2);
}

fn line(flight: &str) -> String {
    format!(
        "{{\"flight_id\":\"{flight}\",\"event_kind\":\"off_blocks\",\"instant_utc\":\"2026-12-01T10:05:00Z\"}}\n"
    )
}

/// A writer that wrote under the final name, paused past the settle time at a line
/// boundary, and wrote on after the move: the file goes back to incoming/ and is
/// taken again, so that archive/ holds only bytes whose digest is in the inbox.
#[test]
fn an_archived_file_written_to_within_the_partial_timeout_is_taken_again() {
    let mut h = Harness::with_partial_timeout(PARTIAL);
    h.drop_file("pause.ndjson", &line("P1"));
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    assert_eq!(took(&h.at(2.0)), ("pause.ndjson", "processed"));
    assert_eq!(h.archived(), ["pause.ndjson"]);
    assert_eq!(h.daemon.archived.len(), 1);

    let archived = h.spool.archive.join("pause.ndjson");
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(&archived)
        .expect("open");
    std::io::Write::write_all(&mut file, line("P2").as_bytes()).expect("write on");
    drop(file);
    let whole = fs::read(&archived).expect("read");
    h.daemon.notify();
    assert!(matches!(h.at(3.0), Report::Idle { .. }));
    assert!(h.archived().is_empty(), "{:?}", h.archived());
    assert!(h.spool.incoming.join("pause.ndjson").exists());
    assert_eq!(h.daemon.publisher.metrics().files_changed_after_archive, 1);

    assert!(matches!(h.at(4.0), Report::Idle { .. }));
    let report = h.at(5.0);
    let Report::Took {
        outcome: crate::ingest::Outcome::Processed { counts, digest, .. },
        ..
    } = &report
    else {
        panic!("expected the file processed again, got {report:?}");
    };
    assert_eq!((counts.inserted, counts.unchanged), (1, 1), "{counts:?}");
    assert_eq!(h.archived(), ["pause.ndjson"]);
    use sha2::Digest;
    assert_eq!(*digest, hex::encode(sha2::Sha256::digest(&whole)));
    let mut store = Store::open(&Db::Sqlite(h.db.clone())).expect("open");
    assert!(store.contains_batch(digest).expect("inbox"));

    // Unchanged past the partial timeout: no longer watched.
    h.daemon.notify();
    assert!(matches!(h.at(5.0 + 61.0), Report::Idle { .. }));
    assert_eq!(h.daemon.archived.len(), 0);
}

impl Harness {
    /// The daemon stopped and another started on the same spool at the same wall
    /// time, with a monotonic clock of its own (as after a restart), taking over
    /// what the state file tells.
    fn restart(&mut self) {
        let offset = self.clock.offset();
        let clock = ManualClock {
            origin: Instant::now() + Duration::from_secs(3600),
            ..ManualClock::new()
        };
        clock.set(offset);
        let store = Store::open(&Db::Sqlite(self.db.clone())).expect("open store");
        let config = self.daemon.config.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let before = state::read(&self.spool.root)
            .expect("read the state file")
            .expect("a state file");
        self.daemon = Daemon::new(
            self.spool.clone(),
            Some(store),
            config,
            stop,
            Box::new(clock.clone()),
        );
        self.daemon.remember(&before);
        self.clock = clock;
    }
}

/// A cut file's first sight and its partial timeout go on across a restart.
#[test]
fn a_cut_files_age_and_partial_timeout_survive_a_restart() {
    let mut h = Harness::with_partial_timeout(PARTIAL);
    h.drop_file("cut.json", r#"{"events":[{"flight_id":"C1""#);
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    h.expect_still_arriving_at(2.0);
    assert!(matches!(h.at(40.0), Report::Idle { .. }));
    let written = state::read(&h.spool.root).expect("read").expect("state");
    assert_eq!(written.waiting.len(), 1, "{written:?}");
    assert_eq!(written.waiting[0].name, "cut.json");
    assert_eq!(written.waiting[0].state, "still_arriving");
    assert_eq!(
        written.waiting[0].first_seen_at,
        format_millis(h.clock.wall_at(0))
    );

    h.restart();
    // The first listing after the restart: still seen first at 0 s.
    h.expect_still_arriving_at(41.0);
    assert!(matches!(h.at(42.0), Report::Idle { .. }));
    let state = h.daemon.publisher.state();
    assert_eq!(
        state.oldest_waiting_seen_at.as_deref(),
        Some(format_millis(h.clock.wall_at(0)).as_str())
    );
    // Rejected 60 s after its last change (at 0 s), not 60 s after the restart.
    assert!(matches!(h.at(59.0), Report::Idle { .. }));
    let report = h.at(60.0);
    assert_eq!(took(&report), ("cut.json", "rejected"));
}

/// A file archived just before a restart and written to after it: the new daemon
/// watches it for what is left of its partial timeout.
#[test]
fn an_archived_files_watch_goes_on_across_a_restart() {
    let mut h = Harness::with_partial_timeout(PARTIAL);
    h.drop_file("pause.ndjson", &line("R1"));
    assert!(matches!(h.at(0.0), Report::Idle { .. }));
    assert_eq!(took(&h.at(2.0)), ("pause.ndjson", "processed"));
    let written = state::read(&h.spool.root).expect("read").expect("state");
    assert_eq!(written.archived_watched.len(), 1, "{written:?}");
    assert_eq!(
        written.archived_watched[0].until,
        format_millis(h.clock.wall_at(62))
    );

    h.clock.set(Duration::from_secs(10));
    h.restart();
    assert_eq!(h.daemon.archived.len(), 1);
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(h.spool.archive.join("pause.ndjson"))
        .expect("open");
    std::io::Write::write_all(&mut file, line("R2").as_bytes()).expect("write on");
    drop(file);
    h.daemon.notify();
    assert!(matches!(h.at(11.0), Report::Idle { .. }));
    assert!(h.spool.incoming.join("pause.ndjson").exists());
    let reports = h.until_idle(13.0);
    assert_eq!(
        took(reports.last().expect("a report")),
        ("pause.ndjson", "processed")
    );
    assert_eq!(h.archived(), ["pause.ndjson"]);

    // A watch whose time is over is not taken over.
    h.clock.set(Duration::from_secs(13 + 61));
    assert!(matches!(h.at(13.0 + 61.0), Report::Idle { .. }));
    h.restart();
    assert_eq!(h.daemon.archived.len(), 0);
}
