//! In-process tests of the daemon step, driven with chosen instants: no sleeps, no
//! process. The end-to-end tests that kill the real binary live in tests/it/.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use super::take::ProgressLog;
use super::*;

/// A wall clock that stands still: what is written down does not matter here.
struct StillClock;

impl Clock for StillClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
}

const SETTLE: Duration = Duration::from_secs(2);
const PARTIAL: Duration = Duration::from_secs(60);
const RESCAN: Duration = Duration::from_secs(30);

struct Harness {
    _dir: tempfile::TempDir,
    spool: Spool,
    db: PathBuf,
    daemon: Daemon,
    t0: Instant,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_db(|dir| dir.join("spoolite.db"), true)
    }

    /// A daemon on a fresh spool; `open` says whether the database opens at start.
    fn with_db(db: impl Fn(&Path) -> PathBuf, open: bool) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = Spool::create(&dir.path().join("spool")).expect("spool");
        let db = db(dir.path());
        let store = open.then(|| Store::open(&db).expect("open store"));
        let config = Config {
            spool: spool.root.clone(),
            db: db.clone(),
            settle: SETTLE,
            partial_timeout: PARTIAL,
            rescan: RESCAN,
            file_bytes_max: 1 << 30,
            limits: Limits::default(),
            metrics_file: None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let daemon = Daemon::new(spool.clone(), store, config, stop, Box::new(StillClock));
        Harness {
            _dir: dir,
            spool,
            db,
            daemon,
            t0: Instant::now(),
        }
    }

    fn at(&mut self, seconds: f64) -> Report {
        let now = self.t0 + Duration::from_secs_f64(seconds);
        self.daemon.step(now)
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
    match h.at(2.0) {
        Report::Waiting {
            why: Left::StillArriving { .. },
            ..
        } => {}
        other => panic!("expected a wait for the rest, got {other:?}"),
    }
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
    h.at(0.0);
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
    assert_eq!(attempts, [1, 2, 3], "the back-off counts its own attempts");
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
    let t0 = Instant::now();
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
