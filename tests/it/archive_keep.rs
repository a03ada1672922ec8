//! `spoolite run --archive-keep`: files go from archive/ once they have lain there
//! longer than the keep, counted from their move there (not their modification
//! time, nor the daemon's start); their inbox rows stay; rejected/ keeps its files.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{Daemon, Site, event, json_batch, one_event_batch, query, write};

const WAIT: Duration = Duration::from_secs(20);

/// The daemon's options here: files taken at once, watches over within a second,
/// a listing (and a pass of the keep) every 300 ms unless `rescan` says otherwise.
fn start(site: &Site, keep: &str, rescan: &str) -> Daemon {
    start_watching(site, keep, rescan, "1s")
}

/// `start` with the archive watch's `--partial-timeout`.
fn start_watching(site: &Site, keep: &str, rescan: &str, watch: &str) -> Daemon {
    let mut command = site.run_command();
    command.args([
        "--settle",
        "100ms",
        "--partial-timeout",
        watch,
        "--rescan",
        rescan,
        "--archive-keep",
        keep,
    ]);
    let mut daemon = site.spawn(&mut command);
    daemon.wait_serving(site);
    daemon
}

/// How many lines of the log report `word` for the file `name`.
fn outcome_lines(log: &str, word: &str, name: &str) -> usize {
    let needle = format!("] {word} {name} ");
    log.lines().filter(|line| line.contains(&needle)).count()
}

/// Drops `name` with a modification time two days old, as `sftp -p` keeps it.
fn drop_two_days_old(site: &Site, name: &str, content: &str) {
    let temp = write(&site.incoming(), &format!(".{name}.tmp"), content);
    File::options()
        .write(true)
        .open(&temp)
        .expect("open")
        .set_modified(SystemTime::now() - Duration::from_secs(2 * 86_400))
        .expect("set mtime");
    fs::rename(&temp, site.incoming().join(name)).expect("rename into incoming/");
}

/// When `path` entered its folder: its change time.
fn changed_at(path: &Path) -> SystemTime {
    let meta = fs::metadata(path).expect("stat");
    UNIX_EPOCH + Duration::new(meta.ctime() as u64, meta.ctime_nsec() as u32)
}

fn inbox_rows(site: &Site) -> Vec<Vec<String>> {
    query(
        &site.db,
        "SELECT file_name FROM ingest_inbox ORDER BY file_name",
    )
}

#[test]
fn old_archived_files_go_and_young_ones_rejected_ones_and_inbox_rows_stay() {
    let site = Site::new();
    let mut daemon = start(&site, "3s", "300ms");
    site.drop_file("old.json", one_event_batch("AK1"));
    site.drop_file("broken.json", "{\"events\": [");
    site.drop_file("bad.json", "not json at all");
    daemon.wait(WAIT, "old.json archived, bad.json rejected", || {
        site.archived().contains(&"old.json".to_owned())
            && site.rejected_names().contains(&"bad.json".to_owned())
    });
    let old_arrived = changed_at(&site.archive().join("old.json"));
    // Two seconds on, a file whose modification time is two days old arrives.
    std::thread::sleep(Duration::from_secs(2));
    drop_two_days_old(&site, "young.json", &one_event_batch("AK2"));
    daemon.wait(WAIT, "young.json archived", || {
        site.archived().contains(&"young.json".to_owned())
    });
    let young_arrived = changed_at(&site.archive().join("young.json"));
    assert!(young_arrived >= old_arrived + Duration::from_millis(1900));
    daemon.wait(WAIT, "old.json deleted from archive/", || {
        !site.archived().contains(&"old.json".to_owned())
    });
    // old.json went once its 3 s were over; young.json has been there about one.
    assert!(
        site.archived().contains(&"young.json".to_owned()),
        "a file just archived stays, whatever its modification time: {:?}",
        site.archived()
    );
    assert!(SystemTime::now() < young_arrived + Duration::from_secs(3));
    // The pass logs its count once its deletions are done.
    daemon.wait(WAIT, "the pass's log line", || {
        site.log()
            .contains("archive/: deleted 1 file there longer than --archive-keep 3s")
    });
    // The inbox keeps the batch: the same bytes again are a duplicate.
    site.drop_file("old.json", one_event_batch("AK1"));
    daemon.wait(WAIT, "the re-drop skipped", || {
        outcome_lines(&site.log(), "skipped_duplicate", "old.json") == 1
    });
    // young.json goes too, three seconds after it arrived.
    daemon.wait(WAIT, "young.json deleted", || {
        !site.archived().contains(&"young.json".to_owned())
    });
    assert!(SystemTime::now() > young_arrived + Duration::from_secs(3));
    assert_eq!(inbox_rows(&site), [["old.json"], ["young.json"]]);
    // rejected/ keeps its files, long past the keep.
    let rejected = site.rejected_names();
    assert!(rejected.contains(&"bad.json".to_owned()), "{rejected:?}");
    assert!(
        rejected.contains(&"bad.json.reason.json".to_owned()),
        "{rejected:?}"
    );
    assert!(
        rejected.iter().any(|n| n.starts_with("broken.json")),
        "{rejected:?}"
    );
    assert!(
        SystemTime::now() > changed_at(&site.rejected().join("bad.json")) + Duration::from_secs(3)
    );
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
}

#[test]
fn a_restart_does_not_reset_the_clock_of_archived_files() {
    let site = Site::new();
    // A rescan an hour away: only the pass at start can delete anything.
    let mut daemon = start(&site, "2s", "1h");
    site.drop_file("kept.json", one_event_batch("AK3"));
    daemon.wait(WAIT, "kept.json archived", || {
        site.archived().contains(&"kept.json".to_owned())
    });
    let arrived = changed_at(&site.archive().join("kept.json"));
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
    drop(daemon);
    // Past the keep while no daemon runs.
    let past = arrived + Duration::from_millis(2500);
    if let Ok(left) = past.duration_since(SystemTime::now()) {
        std::thread::sleep(left);
    }
    assert!(site.archived().contains(&"kept.json".to_owned()));
    let started = SystemTime::now();
    let mut daemon = start(&site, "2s", "1h");
    daemon.wait(WAIT, "kept.json deleted at start", || {
        !site.archived().contains(&"kept.json".to_owned())
    });
    // Had the clock started again with the daemon, it would have stayed 2 s and
    // then waited for the next pass, an hour away.
    assert!(
        SystemTime::now() < started + Duration::from_secs(2),
        "deleted by the start's pass"
    );
    assert_eq!(inbox_rows(&site), [["kept.json"]]);
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
}

#[test]
fn a_file_the_archive_watch_still_watches_stays_past_the_keep() {
    let site = Site::new();
    let mut daemon = start_watching(&site, "500ms", "200ms", "4s");
    site.drop_file("watched.json", one_event_batch("AK4"));
    daemon.wait(WAIT, "watched.json archived", || {
        site.archived().contains(&"watched.json".to_owned())
    });
    let arrived = changed_at(&site.archive().join("watched.json"));
    // Past the keep, within the watch: it stays, so a late writer is still caught.
    std::thread::sleep(Duration::from_secs(2));
    assert!(site.archived().contains(&"watched.json".to_owned()));
    daemon.wait(WAIT, "watched.json deleted once its watch ended", || {
        !site.archived().contains(&"watched.json".to_owned())
    });
    assert!(SystemTime::now() >= arrived + Duration::from_secs(4));
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
}

/// The watch lasts `--partial-timeout` from the file's move into archive/, which
/// comes after its ingest: counted from the step's start, a file whose ingest
/// took a second or more lost that much of its watch, and the keep deleted it
/// early (one station-sized file was enough on a loaded machine).
#[test]
fn a_slow_ingest_does_not_shorten_the_archive_watch() {
    let site = Site::new();
    let mut daemon = start_watching(&site, "100ms", "100ms", "2s");
    let events: Vec<String> = (0..40_000)
        .map(|i| {
            event(
                &format!("AK5-{i:05}"),
                "off_blocks",
                "2026-12-01T10:05:00Z",
                None,
                "{}",
            )
        })
        .collect();
    let started = SystemTime::now();
    site.drop_file("slow.json", json_batch(&events));
    daemon.wait(WAIT, "slow.json archived", || {
        site.archived().contains(&"slow.json".to_owned())
    });
    let arrived = changed_at(&site.archive().join("slow.json"));
    assert!(
        arrived >= started + Duration::from_millis(500),
        "the ingest took long enough to matter"
    );
    daemon.wait(WAIT, "slow.json deleted once its watch ended", || {
        !site.archived().contains(&"slow.json".to_owned())
    });
    assert!(SystemTime::now() >= arrived + Duration::from_secs(2));
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
}
