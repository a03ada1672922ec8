//! Nothing lost silently, through the real binary: a writer that pauses under the
//! final name and writes after its file was archived, the database file deleted or
//! replaced under a serving daemon, and a cut file's first sight across a restart.

use std::fs;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);

/// `spoolite status` of the site: its exit code and its text.
fn status(site: &Site, json: bool) -> (i32, String) {
    let mut command: Command = site.status_command();
    if json {
        command.arg("--json");
    }
    let output = command.output().expect("run spoolite status");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code().expect("exit code"), text)
}

fn serve(site: &Site) -> Daemon {
    let mut daemon = site.spawn(
        site.run_command()
            .args(["--settle", "100ms", "--rescan", "1s"]),
    );
    daemon.wait_serving(site);
    daemon
}

fn stop(mut daemon: Daemon) {
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(10), "exit after SIGTERM");
    assert!(status.success(), "{status}");
}

#[test]
fn a_database_deleted_under_a_serving_daemon_holds_files_until_a_restart() {
    let site = Site::new();
    let mut daemon = serve(&site);
    site.drop_file("one.json", one_event_batch("DEL1"));
    daemon.wait(WAIT, "one.json archived", || {
        site.archived() == ["one.json"]
    });
    // As an operator's `rm s.db s.db-wal s.db-shm`.
    for suffix in ["", "-wal", "-shm"] {
        let mut path = site.db.clone().into_os_string();
        path.push(suffix);
        let _ = fs::remove_file(path);
    }
    site.drop_file("two.json", one_event_batch("DEL2"));
    daemon.wait(WAIT, "the fault logged", || site.log().contains("is gone"));
    assert_eq!(site.waiting(), ["two.json"]);
    assert_eq!(site.archived(), ["one.json"]);
    assert!(
        !site.db.exists(),
        "a new database was created by the daemon"
    );
    let line = site
        .log()
        .lines()
        .find(|l| l.contains("is gone"))
        .expect("the line")
        .to_owned();
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&site.db.display().to_string()), "{line}");
    // The state file is written at most once a second.
    let mut said = (0, String::new());
    wait_until(WAIT, "status tells the fault", || {
        said = status(&site, false);
        said.1.contains("is gone")
    });
    assert_ne!(said.0, 0, "{}", said.1);
    assert!(!said.1.contains("start `spoolite run` once"), "{}", said.1);
    assert!(said.1.contains("the serving daemon reports"), "{}", said.1);
    daemon.assert_running("the database gone");

    stop(daemon);
    let daemon = serve(&site);
    wait_until(WAIT, "two.json archived after the restart", || {
        site.archived() == ["one.json", "two.json"]
    });
    // What was in the deleted file is gone with it; the new one holds two.json.
    assert_eq!(
        query(&site.db, "SELECT flight_id FROM duty_event"),
        [["DEL2"]]
    );
    assert_eq!(site.log().matches("is gone").count(), 1, "{}", site.log());
    stop(daemon);
}

#[test]
fn a_database_replaced_under_a_serving_daemon_is_written_only_after_a_restart() {
    let site = Site::new();
    let mut daemon = serve(&site);
    site.drop_file("one.json", one_event_batch("REP1"));
    daemon.wait(WAIT, "one.json archived", || {
        site.archived() == ["one.json"]
    });
    // Another database, made aside and renamed over the daemon's.
    let other = site.dir.path().join("other.db");
    let other_batch = write(site.dir.path(), "other.json", one_event_batch("OTHER"));
    let (code, _) = ingest_json(&other, &[&other_batch]);
    assert_eq!(code, 0);
    fs::rename(&other, &site.db).expect("replace the database");
    let before = snapshot(&site.db);

    site.drop_file("two.json", one_event_batch("REP2"));
    daemon.wait(WAIT, "the fault logged", || {
        site.log().contains("was replaced")
    });
    assert_eq!(site.waiting(), ["two.json"]);
    assert_eq!(snapshot(&site.db), before, "the replacement was written to");
    let mut said = (0, String::new());
    wait_until(WAIT, "status tells the fault", || {
        said = status(&site, true);
        said.1.contains("was replaced")
    });
    assert_eq!(said.0, 1, "{}", said.1);

    stop(daemon);
    let daemon = serve(&site);
    wait_until(WAIT, "two.json archived after the restart", || {
        site.archived() == ["one.json", "two.json"]
    });
    assert_eq!(
        query(
            &site.db,
            "SELECT flight_id FROM duty_event ORDER BY flight_id"
        ),
        [["OTHER"], ["REP2"]]
    );
    stop(daemon);
}

fn ndjson_line(flight: &str) -> String {
    event(flight, "off_blocks", "2026-12-01T10:05:00Z", None, "{}") + "\n"
}

#[test]
fn a_writer_that_pauses_under_the_final_name_loses_nothing() {
    let site = Site::new();
    let metrics = site.dir.path().join("spoolite.prom");
    let mut daemon = site.spawn(
        site.run_command()
            .args(["--settle", "200ms", "--rescan", "1s"])
            .arg("--metrics-file")
            .arg(&metrics),
    );
    daemon.wait_serving(&site);
    // As `( echo line1; sleep 4; echo line2 ) > incoming/pause.ndjson`: the writer
    // keeps its descriptor, and writes on after the daemon moved the file.
    let mut writer = fs::File::create(site.incoming().join("pause.ndjson")).expect("create");
    writer
        .write_all(ndjson_line("PAUSE1").as_bytes())
        .expect("line 1");
    writer.flush().expect("flush");
    daemon.wait(WAIT, "line 1 archived", || {
        site.archived() == ["pause.ndjson"]
    });
    writer
        .write_all(ndjson_line("PAUSE2").as_bytes())
        .expect("line 2");
    drop(writer);
    let whole = (ndjson_line("PAUSE1") + &ndjson_line("PAUSE2")).into_bytes();

    daemon.wait(WAIT, "both lines stored", || {
        site.db.exists()
            && query(&site.db, "SELECT count(*) FROM duty_event") == [["2"]]
            && site.archived() == ["pause.ndjson"]
    });
    assert!(site.waiting().is_empty(), "{:?}", site.waiting());
    // archive/ holds only bytes whose digest is in the inbox.
    let archived = fs::read(site.archive().join("pause.ndjson")).expect("read");
    assert_eq!(archived, whole);
    let digests = query(
        &site.db,
        "SELECT batch_digest FROM ingest_inbox ORDER BY batch_ref",
    );
    assert_eq!(digests.len(), 2, "{digests:?}");
    assert_eq!(digests[1][0], sha256_hex(&whole));
    assert_eq!(
        query(
            &site.db,
            "SELECT flight_id FROM duty_event ORDER BY flight_id"
        ),
        [["PAUSE1"], ["PAUSE2"]]
    );
    let log = site.log();
    let warning = log
        .lines()
        .find(|l| l.contains("changed after it was archived"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains(&digests[0][0]), "{warning}");
    assert!(warning.contains(&sha256_hex(&whole)), "{warning}");
    assert!(
        warning.contains("moved back to incoming/pause.ndjson"),
        "{warning}"
    );
    daemon.wait(WAIT, "the metric counts it", || {
        fs::read_to_string(&metrics)
            .unwrap_or_default()
            .contains("spoolite_files_changed_after_archive_total 1\n")
    });
    stop(daemon);
}

/// `status --json` of the site, parsed.
fn status_json(site: &Site) -> serde_json::Value {
    let output = site
        .status_command()
        .arg("--json")
        .output()
        .expect("run spoolite status");
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

#[test]
fn a_cut_files_age_goes_on_across_a_restart() {
    let site = Site::new();
    let mut daemon = serve(&site);
    let pid = daemon.pid();
    site.drop_file("cut.json", r#"{"events":[{"flight_id":"CUT1""#);
    let mut before = 0.0;
    daemon.wait(WAIT, "the cut file has waited 3 s", || {
        let status = status_json(&site);
        before = status["oldest_waiting_age_s"].as_f64().unwrap_or(0.0);
        before >= 3.0
    });
    stop(daemon);

    let daemon = serve(&site);
    assert_ne!(daemon.pid(), pid);
    let mut after = serde_json::Value::Null;
    wait_until(WAIT, "the new daemon's state file", || {
        after = status_json(&site);
        // The age is told only from the serving daemon's own state file.
        after["served_by"]["pid"] == daemon.pid() && after["oldest_waiting_age_s"].is_number()
    });
    let age = after["oldest_waiting_age_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no age: {after}"));
    assert!(
        age >= before,
        "age {age} s after the restart, {before} s before: {after}"
    );
    assert_eq!(site.waiting(), ["cut.json"]);
    stop(daemon);
}
