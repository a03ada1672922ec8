//! The daemon against faults a real site produces, through the real binary: an idle
//! daemon that must do nothing, a database that is read-only at start, a file that
//! cannot be read, a stop while an analyst holds the lock. The unprivileged cases run
//! the daemon as uid 65534 (nobody), since root reads and writes through permissions.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::assert_root;
use crate::support::*;

/// The unprivileged account the daemon runs as in these tests.
const NOBODY: u32 = 65534;

/// The value of an unlabelled sample in a Prometheus text file, if present.
fn metric(path: &Path, name: &str) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Hands the site's folders to nobody, so a daemon running as nobody can serve it.
fn give_to_nobody(site: &Site) {
    fs::set_permissions(site.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let_others_traverse(site.dir.path());
    for dir in [
        site.spool.clone(),
        site.incoming(),
        site.archive(),
        site.rejected(),
        site.db.parent().expect("state").to_owned(),
    ] {
        fs::create_dir_all(&dir).expect("mkdir");
        std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
}

/// `spoolite run` as nobody, with a short settle and back-off-friendly rescan.
fn start_as_nobody(site: &Site) -> Daemon {
    let mut command = site.run_command_as(NOBODY, NOBODY);
    command.args(["--settle", "200ms", "--rescan", "30s"]);
    let mut daemon = site.spawn(&mut command);
    daemon.wait_serving(site);
    daemon
}

#[test]
fn an_idle_daemon_lists_incoming_at_most_twice_in_10_s_and_a_burst_costs_few_listings() {
    let site = Site::new();
    let metrics = site.dir.path().join("spoolite.prom");
    let mut daemon = site.spawn(site.run_command().args([
        "--settle",
        "300ms",
        "--rescan",
        "30s",
        "--metrics-file",
        metrics.to_str().expect("UTF-8 path"),
    ]));
    daemon.wait(Duration::from_secs(20), "the metrics file", || {
        metric(&metrics, "spoolite_scans_total").is_some()
    });
    let before = metric(&metrics, "spoolite_scans_total").expect("scans");
    let rewrites_before = fs::metadata(&metrics)
        .expect("stat")
        .modified()
        .expect("mtime");
    // Ten seconds of nothing: an observation window, not a wait for an event.
    std::thread::sleep(Duration::from_secs(10));
    daemon.assert_running("the idle window");
    let idle = metric(&metrics, "spoolite_scans_total").expect("scans") - before;
    assert!(idle <= 2.0, "{idle} listings of incoming/ in 10 s of idle");
    let rewritten = fs::metadata(&metrics)
        .expect("stat")
        .modified()
        .expect("mtime");
    assert!(
        rewritten == rewrites_before || idle > 0.0,
        "the metrics file was rewritten while no figure changed"
    );

    // A burst of 100 uploads: each written under a temp name, then all renamed.
    let burst_start = metric(&metrics, "spoolite_scans_total").expect("scans");
    let temps: Vec<_> = (0..100)
        .map(|i| {
            write(
                &site.incoming(),
                &format!(".burst{i:03}.json.tmp"),
                one_event_batch(&format!("BU{i}")),
            )
        })
        .collect();
    for (i, temp) in temps.iter().enumerate() {
        fs::rename(temp, site.incoming().join(format!("burst{i:03}.json"))).expect("rename");
    }
    daemon.wait(Duration::from_secs(60), "the burst archived", || {
        site.archived().len() == 100
    });
    daemon.wait(Duration::from_secs(10), "the metrics caught up", || {
        metric(&metrics, "spoolite_files_total{outcome=\"processed\"}") == Some(100.0)
    });
    let burst = metric(&metrics, "spoolite_scans_total").expect("scans") - burst_start;
    assert!(burst <= 20.0, "{burst} listings for a burst of 100 files");
    assert_eq!(
        query(&site.db, "SELECT count(*) FROM duty_event"),
        [["100"]]
    );
}

#[test]
fn a_database_read_only_at_start_holds_files_back_and_recovers_without_a_restart() {
    assert_root();
    let site = Site::new();
    give_to_nobody(&site);
    let state = site.db.parent().expect("state").to_owned();
    // The database's folder cannot be written by the daemon's user.
    fs::set_permissions(&state, fs::Permissions::from_mode(0o555)).expect("chmod state");
    let mut daemon = start_as_nobody(&site);
    site.drop_file("early.json", one_event_batch("RO1"));
    daemon.wait(Duration::from_secs(20), "the database fault logged", || {
        site.log().contains("waits in incoming/") || site.log().contains("trying again")
    });
    daemon.assert_running("a read-only database");
    assert_eq!(site.waiting(), ["early.json"]);
    assert!(
        site.rejected_names().is_empty(),
        "{:?}",
        site.rejected_names()
    );

    fs::set_permissions(&state, fs::Permissions::from_mode(0o755)).expect("chmod state");
    let fixed = Instant::now();
    // At most 30 s of back-off plus the settle time after the fault clears.
    daemon.wait(Duration::from_secs(35), "early.json archived", || {
        site.archived() == ["early.json"]
    });
    eprintln!("in {:?} after the folder became writable", fixed.elapsed());
    assert_eq!(query(&site.db, "SELECT count(*) FROM duty_event"), [["1"]]);
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(5), "exit after SIGTERM");
    assert!(status.success(), "{status}");
}

#[test]
fn a_file_that_cannot_be_read_waits_alone_while_later_files_go_in() {
    assert_root();
    let site = Site::new();
    give_to_nobody(&site);
    let mut daemon = start_as_nobody(&site);
    let locked = write(&site.incoming(), ".locked.json.tmp", one_event_batch("UR1"));
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).expect("chmod 000");
    fs::rename(&locked, site.incoming().join("locked.json")).expect("rename");
    daemon.wait(Duration::from_secs(20), "the read fault logged", || {
        site.log().contains("locked.json waits in incoming/")
    });
    site.drop_file("later.json", one_event_batch("UR2"));
    daemon.wait(Duration::from_secs(20), "later.json archived", || {
        site.archived() == ["later.json"]
    });
    assert_eq!(site.waiting(), ["locked.json"]);
    assert!(
        site.rejected_names().is_empty(),
        "{:?}",
        site.rejected_names()
    );

    fs::set_permissions(
        site.incoming().join("locked.json"),
        fs::Permissions::from_mode(0o644),
    )
    .expect("chmod 644");
    daemon.wait(Duration::from_secs(35), "locked.json archived", || {
        site.archived() == ["later.json", "locked.json"]
    });
    assert_eq!(query(&site.db, "SELECT count(*) FROM duty_event"), [["2"]]);
}

/// A daemon started with `--settle settle` that has made its database (it archived
/// `first.json`), and an analyst's connection holding the write lock of it.
fn served_then_locked(site: &Site, settle: &str) -> (Daemon, rusqlite::Connection) {
    let mut daemon = site.spawn(site.run_command().args(["--settle", settle]));
    daemon.wait_serving(site);
    site.drop_file("first.json", one_event_batch("LK1"));
    daemon.wait(Duration::from_secs(20), "first.json archived", || {
        site.archived() == ["first.json"]
    });
    let analyst = rusqlite::Connection::open(&site.db).expect("analyst opens the db");
    analyst
        .execute_batch("BEGIN IMMEDIATE")
        .expect("analyst takes the write lock");
    (daemon, analyst)
}

#[test]
fn sigterm_while_an_analyst_holds_the_write_lock_exits_0_within_a_second() {
    let site = Site::new();
    let (mut daemon, analyst) = served_then_locked(&site, "0ms");
    site.drop_file("second.json", one_event_batch("LK2"));
    // The daemon has the file open while it waits for the lock.
    let path = fs::canonicalize(site.incoming().join("second.json")).expect("path");
    let pid = daemon.pid();
    daemon.wait(Duration::from_secs(20), "second.json taken", || {
        has_open(pid, &path)
    });
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_millis(1500), "exit within a second");
    assert!(status.success(), "{status}");
    analyst.execute_batch("COMMIT").expect("release");
    assert_eq!(
        site.waiting(),
        ["second.json"],
        "left untouched in incoming/"
    );
    assert_eq!(
        query(&site.db, "SELECT count(*) FROM ingest_inbox"),
        [["1"]]
    );
}

/// 20,000 events of one flight family at revision `revision`: each rewrite of the
/// file updates every row.
fn version(revision: i64) -> String {
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(&event(
            &format!("RW{i:05}"),
            "off_blocks",
            "2026-11-29T10:05:00Z",
            Some(revision),
            &format!("{{\"version\":{revision}}}"),
        ));
        text.push('\n');
    }
    text
}

#[test]
fn a_file_rewritten_in_place_at_many_moments_of_its_ingest_ends_with_its_last_content() {
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args(["--settle", "0ms"]));
    daemon.wait_serving(&site);
    let path = site.incoming().join("big.ndjson");
    // Rewrites land at different moments: as the daemon opens the file, during its
    // read, its apply, its commit, or after it was moved (a new file then).
    let delays_ms = [0u64, 3, 10, 30, 60, 120, 250];
    let last = delays_ms.len() as i64;
    fs::write(&path, version(0)).expect("first version");
    let canonical = fs::canonicalize(&path).expect("canonical path");
    let pid = daemon.pid();
    for (k, delay) in delays_ms.iter().enumerate() {
        daemon.wait(
            Duration::from_secs(30),
            "the daemon to open the file",
            || has_open(pid, &canonical) || !path.exists(),
        );
        std::thread::sleep(Duration::from_millis(*delay));
        fs::write(&path, version(k as i64 + 1)).expect("rewrite in place");
    }
    daemon.wait(Duration::from_secs(60), "incoming/ empty", || {
        site.waiting().is_empty()
    });
    let digests: Vec<String> = query(&site.db, "SELECT batch_digest FROM ingest_inbox")
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    for name in site.archived() {
        let bytes = fs::read(site.archive().join(&name)).expect("archived file");
        assert!(
            digests.contains(&sha256_hex(&bytes)),
            "archive/{name} holds bytes whose digest is not in the inbox"
        );
    }
    let log = site.log();
    // Every batch committed is told, with its digest, even one whose file changed
    // between its commit and its move.
    for digest in &digests {
        assert!(
            log.contains(digest.as_str()),
            "inbox digest {digest} never logged:\n{log}"
        );
    }
    let changed = log.matches("changed while it was ingested").count();
    eprintln!(
        "{changed} of {} rewrites caught during an ingest",
        delays_ms.len()
    );
    let final_content = version(last);
    assert!(
        digests.contains(&sha256_hex(&final_content)),
        "the last content is ingested"
    );
    assert_eq!(
        query(
            &site.db,
            "SELECT DISTINCT source_revision, payload FROM duty_event"
        ),
        [[last.to_string(), format!("{{\"version\":{last}}}")]]
    );
    assert_eq!(
        query(&site.db, "SELECT count(*) FROM duty_event"),
        [["20000"]]
    );
}

/// The daemon's peak resident memory so far, in bytes (VmHWM).
pub(crate) fn peak_rss_bytes(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

#[test]
fn an_oversized_event_costs_only_itself_and_memory_stays_within_the_limit() {
    const LIMIT: u64 = 1 << 20;
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args([
        "--settle",
        "0ms",
        "--event-bytes-max",
        &LIMIT.to_string(),
    ]));
    daemon.wait_serving(&site);
    // 64 times the limit, in an NDJSON line and in an element of a .json batch.
    let blob = "x".repeat(64 << 20);
    let huge = format!(
        r#"{{"flight_id":"OV1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z","payload":{{"blob":"{blob}"}}}}"#
    );
    let fine = |flight: &str| event(flight, "landing", "2026-11-29T11:05:00Z", None, "{}");
    site.drop_file("huge.ndjson", format!("{huge}\n{}\n", fine("OV2")));
    site.drop_file(
        "huge.json",
        format!("{{\"events\":[{huge},{}]}}", fine("OV3")),
    );
    site.drop_file("after.json", json_batch(&[fine("OV4")]));
    daemon.wait(Duration::from_secs(60), "every file archived", || {
        site.archived().len() == 3
    });
    assert!(
        site.rejected_names().is_empty(),
        "{:?}",
        site.rejected_names()
    );
    assert_eq!(
        query(
            &site.db,
            "SELECT flight_id FROM duty_event ORDER BY flight_id"
        ),
        [["OV2"], ["OV3"], ["OV4"]]
    );
    let quarantined = query(
        &site.db,
        "SELECT file_name, record_index, reason, length(CAST(raw AS BLOB)) FROM quarantine
         ORDER BY file_name",
    );
    assert_eq!(quarantined.len(), 2, "{quarantined:?}");
    for row in &quarantined {
        assert_eq!(
            row[1..3],
            ["0".to_owned(), "too_large".to_owned()],
            "{row:?}"
        );
        let raw: u64 = row[3].parse().expect("length");
        assert!(
            raw <= LIMIT && raw > LIMIT - 4,
            "raw of {raw} bytes: {row:?}"
        );
    }
    let peak = peak_rss_bytes(daemon.pid());
    let bound = (128 << 20) + 4 * LIMIT;
    assert!(
        peak <= bound,
        "peak RSS {} MiB over 128 MiB + 4 × --event-bytes-max",
        peak >> 20
    );
}

#[test]
fn in_the_packaged_layout_the_daemon_publishes_its_state_and_a_failing_write_warns_once() {
    assert_root();
    for with_state_folder in [true, false] {
        let site = Site::new();
        give_to_nobody(&site);
        // As postinst leaves it: the spool root is root's (the SFTP chroot), the lock
        // and (here, first) the daemon's own folder exist in advance.
        std::os::unix::fs::chown(&site.spool, Some(0), Some(0)).expect("chown root");
        let lock = write(&site.spool, "spoolite.lock", "");
        std::os::unix::fs::chown(&lock, Some(NOBODY), Some(NOBODY)).expect("chown lock");
        let state_dir = site.spool.join(".spoolite");
        if with_state_folder {
            fs::create_dir(&state_dir).expect("mkdir .spoolite");
            std::os::unix::fs::chown(&state_dir, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
        let mut daemon = start_as_nobody(&site);
        for i in 0..3 {
            site.drop_file(&format!("p{i}.json"), one_event_batch(&format!("PK{i}")));
            daemon.wait(Duration::from_secs(20), "the file archived", || {
                site.archived().len() == i + 1
            });
            // Publishes are a second apart: wait for the next one.
            let written = site.log().matches("state.json").count();
            daemon.wait(Duration::from_secs(5), "a publish", || {
                !with_state_folder
                    || fs::read_to_string(state_dir.join("state.json"))
                        .is_ok_and(|t| t.contains("\"files_waiting\": 0"))
                    || site.log().matches("state.json").count() > written
            });
        }
        let log = site.log();
        let warnings = log.lines().filter(|l| l.contains("state.json")).count();
        if with_state_folder {
            assert_eq!(warnings, 0, "{log}");
            let state = fs::read_to_string(state_dir.join("state.json")).expect("state");
            assert!(
                state.contains(&format!("\"pid\": {}", daemon.pid())),
                "{state}"
            );
        } else {
            assert_eq!(warnings, 1, "one warning, not one a second:\n{log}");
        }
        daemon.signal(libc::SIGTERM);
        assert!(daemon.wait_exit(Duration::from_secs(5), "exit").success());
    }
}

#[test]
fn a_file_held_back_by_a_locked_database_shows_as_being_read_then_the_fault_never_settling() {
    let site = Site::new();
    // The database made first: the lock is an analyst's on a working site, not on
    // a file the daemon has yet to create.
    let (mut daemon, analyst) = served_then_locked(&site, "1s");
    site.drop_file("held.json", one_event_batch("LK3"));
    let state_of_held = || -> (String, bool) {
        let output = site
            .status_command()
            .arg("--json")
            .output()
            .expect("status");
        let status: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("status --json");
        let state = status["oldest_waiting"][0]["state"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (state, !status["database_fault"].is_null())
    };
    // The daemon reads the file and waits for the lock (5 s) before its first try
    // fails: all that while status says it is being read, not that it settles.
    let path = fs::canonicalize(site.incoming().join("held.json")).expect("path");
    let pid = daemon.pid();
    daemon.wait(Duration::from_secs(20), "held.json taken", || {
        has_open(pid, &path)
    });
    let (state, fault) = state_of_held();
    assert_eq!((state.as_str(), fault), ("ready", false));
    daemon.wait(Duration::from_secs(20), "the fault shown", || {
        state_of_held() == ("waiting_for_database".to_owned(), true)
    });
    analyst.execute_batch("COMMIT").expect("release");
    daemon.wait(Duration::from_secs(40), "held.json archived", || {
        site.archived() == ["first.json", "held.json"]
    });
}
