//! File names against the real daemon: names as long as the filesystem allows, names
//! that are not UTF-8, and a file rewritten in place while it is ingested. Each test
//! ends with a SIGTERM that must stop the daemon at once.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Site, has_open, query, sha256_hex};

/// How long a daemon may take to stop after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(2);

/// How long a file may take to go in or out.
const MOVE_LIMIT: Duration = Duration::from_secs(20);

/// `spoolite run` with no settle time, so that each file is taken at once.
fn start(site: &Site) -> Daemon {
    let mut daemon = site.spawn(
        site.run_command()
            .args(["--settle", "0ms", "--partial-timeout", "10m"])
            .args(["--rescan", "1s"]),
    );
    daemon.wait_serving(site);
    daemon
}

/// SIGTERM, then the daemon must exit 0 within `STOP_LIMIT`.
fn stop(mut daemon: Daemon) {
    daemon.assert_running("SIGTERM");
    daemon.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let status = daemon.wait_exit(STOP_LIMIT * 5, "exit after SIGTERM");
    let took = signalled.elapsed();
    assert!(status.success(), "SIGTERM: {status}");
    assert!(took <= STOP_LIMIT, "stopped after {took:?}");
}

/// Drops `content` as incoming/`name` by a rename from a short temporary name
/// (`Site::drop_file` adds to the name, which a name of 254 bytes has no room for).
fn drop_named(site: &Site, name: &OsStr, content: &[u8]) {
    let temp = site.incoming().join(".upload.tmp");
    fs::write(&temp, content).expect("write upload");
    fs::rename(&temp, site.incoming().join(name)).expect("rename into incoming/");
}

/// The raw names in `dir`.
fn entries(dir: &Path) -> Vec<OsString> {
    let mut names: Vec<OsString> = fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.expect("dir entry").file_name()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// A name of `len` bytes ending in `extension`.
fn long_name(len: usize, extension: &str) -> OsString {
    let stem = "b".repeat(len - extension.len());
    OsString::from(format!("{stem}{extension}"))
}

/// A valid `.json` batch of `count` events of flight `flight`.
fn batch(flight: &str, count: usize) -> String {
    let events: Vec<String> = (0..count)
        .map(|i| {
            format!(
                "{{\"flight_id\":\"{flight}-20261129\",\"event_kind\":\"off_blocks\",\
                 \"instant_utc\":\"2026-11-29T10:{:02}:{:02}Z\",\"payload\":{{\"tail\":\"G-XWBA\"}}}}",
                (i / 60) % 60,
                i % 60
            )
        })
        .collect();
    format!("{{\"events\":[\n{}\n]}}\n", events.join(",\n"))
}

/// The same events as NDJSON lines.
fn ndjson(flight: &str, count: usize) -> String {
    (0..count)
        .map(|i| {
            format!(
                "{{\"flight_id\":\"{flight}{:05}-20261129\",\"event_kind\":\"landing\",\
                 \"instant_utc\":\"2026-11-29T10:05:00Z\",\"payload\":{{\"tail\":\"G-XWBA\"}}}}\n",
                i
            )
        })
        .collect()
}

fn inbox(site: &Site) -> Vec<Vec<String>> {
    query(
        &site.db,
        "SELECT batch_digest, file_name FROM ingest_inbox ORDER BY file_name, batch_digest",
    )
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_broken_file_with_a_240_byte_name_is_rejected_with_its_reason_file_and_later_files_go_in() {
    let site = Site::new();
    let mut daemon = start(&site);
    let content = b"hello, this is not JSON\n";
    let mut names = Vec::new();
    // 240 bytes: the reason file's name would be 252; 250 bytes: it would be 262,
    // so the stem is cut. Each twice, so the second one gets a counter as well.
    for len in [240, 250, 240, 250] {
        let name = long_name(len, ".json");
        drop_named(&site, &name, content);
        names.push(name);
        daemon.wait(MOVE_LIMIT, "the broken file rejected", || {
            entries(&site.incoming()).is_empty()
        });
    }
    drop_named(
        &site,
        OsStr::new("small.json"),
        batch("BA0117", 3).as_bytes(),
    );
    daemon.wait(MOVE_LIMIT, "small.json archived", || {
        site.archived() == ["small.json"]
    });

    let rejected = entries(&site.rejected());
    assert_eq!(rejected.len(), 8, "{rejected:?}");
    let data: Vec<&OsString> = rejected
        .iter()
        .filter(|n| !n.as_bytes().ends_with(b".reason.json"))
        .collect();
    assert_eq!(data.len(), 4, "{rejected:?}");
    let mut dropped_as = Vec::new();
    for name in data {
        assert!(name.len() <= 255, "{name:?} is {} bytes", name.len());
        assert!(name.as_bytes().ends_with(b".json"), "{name:?}");
        assert_eq!(
            fs::read(site.rejected().join(name)).expect("rejected"),
            content
        );
        let mut reason_name = name.clone();
        reason_name.push(".reason.json");
        assert!(reason_name.len() <= 255, "{reason_name:?}");
        let reason = read_json(&site.rejected().join(&reason_name));
        assert_eq!(reason["reason"], "not_json", "{reason}");
        assert_eq!(reason["sha256"], sha256_hex(content));
        dropped_as.push(reason["file"].as_str().expect("file").to_owned());
    }
    dropped_as.sort();
    let mut expected: Vec<String> = names.iter().map(|n| n.to_string_lossy().into()).collect();
    expected.sort();
    assert_eq!(dropped_as, expected, "`file` holds the name as dropped");
    assert_eq!(inbox(&site).len(), 1);
    stop(daemon);
}

#[test]
fn a_valid_file_with_a_254_byte_name_dropped_twice_ends_with_both_copies_in_archive() {
    let site = Site::new();
    let mut daemon = start(&site);
    let name = long_name(254, ".json");
    let copies = [batch("BA0117", 2), batch("BA0118", 2), batch("BA0117", 2)];
    for (i, content) in copies.iter().enumerate() {
        drop_named(&site, &name, content.as_bytes());
        daemon.wait(MOVE_LIMIT, "the long-named file archived", || {
            entries(&site.archive()).len() == i + 1
        });
    }
    assert_eq!(entries(&site.incoming()), Vec::<OsString>::new());
    let archived = entries(&site.archive());
    let mut contents = Vec::new();
    for moved in &archived {
        assert!(moved.len() <= 255, "{moved:?} is {} bytes", moved.len());
        assert!(moved.as_bytes().ends_with(b".json"), "{moved:?}");
        contents.push(fs::read_to_string(site.archive().join(moved)).expect("archived"));
    }
    assert!(archived.contains(&name), "{archived:?}");
    contents.sort();
    let mut expected = copies.to_vec();
    expected.sort();
    assert_eq!(contents, expected);
    // The third copy repeats the first's bytes: a duplicate, archived all the same.
    let recorded = name.to_string_lossy().into_owned();
    assert_eq!(inbox(&site), {
        let mut rows: Vec<Vec<String>> = copies[..2]
            .iter()
            .map(|c| vec![sha256_hex(c), recorded.clone()])
            .collect();
        rows.sort();
        rows
    });
    stop(daemon);
}

#[test]
fn a_file_whose_name_is_not_utf8_is_ingested_archived_and_recorded_with_u_fffd() {
    let site = Site::new();
    let mut daemon = start(&site);
    let good = OsStr::from_bytes(b"caf\xe9-\xff.json");
    let bad = OsStr::from_bytes(b"bad-\xfe.json");
    let content = batch("BA0119", 2);
    drop_named(&site, good, content.as_bytes());
    daemon.wait(MOVE_LIMIT, "the non-UTF-8 name archived", || {
        entries(&site.archive()) == [good]
    });
    drop_named(&site, bad, b"not JSON");
    daemon.wait(MOVE_LIMIT, "the broken non-UTF-8 name rejected", || {
        entries(&site.rejected()).len() == 2
    });
    assert_eq!(
        fs::read(site.archive().join(good)).expect("archived"),
        content.as_bytes()
    );
    assert_eq!(
        inbox(&site),
        [vec![
            sha256_hex(&content),
            "caf\u{fffd}-\u{fffd}.json".to_owned()
        ]]
    );
    let mut reason_name = bad.to_owned();
    reason_name.push(".reason.json");
    assert_eq!(
        entries(&site.rejected()),
        [bad.to_owned(), reason_name.clone()]
    );
    let reason = read_json(&site.rejected().join(&reason_name));
    assert_eq!(reason["file"], "bad-\u{fffd}.json");
    let log = site.log();
    assert!(
        log.contains("processed caf\u{fffd}-\u{fffd}.json "),
        "{log}"
    );
    assert!(!log.contains("never taken"), "{log}");
    stop(daemon);
}

/// Rewrites `path` in place: the same size, one byte of a payload changed, the old
/// modification time put back (as an SFTP client that preserves times does).
/// `None` when the daemon moved the file away first (its stat or open finds
/// nothing): nothing was rewritten.
fn rewrite_in_place(path: &Path, content: &str) -> Option<String> {
    let gone = |error: &std::io::Error| error.kind() == std::io::ErrorKind::NotFound;
    let rewritten = content.replacen("G-XWBA", "G-XWBB", 1);
    let mtime = match fs::metadata(path) {
        Ok(meta) => meta.modified().expect("mtime"),
        Err(error) if gone(&error) => return None,
        Err(error) => panic!("stat {}: {error}", path.display()),
    };
    let mut file = match fs::OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(error) if gone(&error) => return None,
        Err(error) => panic!("open {} for rewrite: {error}", path.display()),
    };
    file.write_all(rewritten.as_bytes()).expect("rewrite");
    file.set_modified(mtime).expect("put the mtime back");
    Some(rewritten)
}

#[test]
fn a_file_rewritten_in_place_while_it_is_ingested_is_archived_only_with_its_digest_in_the_inbox() {
    let site = Site::new();
    let mut daemon = start(&site);
    let pid = daemon.pid();
    // Big enough that the apply after the read takes a while: the rewrite lands
    // between the daemon's read and its move.
    let content = ndjson("RW", 30_000);
    let name = OsStr::new("rewrite.ndjson");
    drop_named(&site, name, content.as_bytes());
    let path = fs::canonicalize(site.incoming().join(name)).expect("canonical path");
    daemon.wait(MOVE_LIMIT, "rewrite.ndjson open in the daemon", || {
        has_open(pid, &path) || !path.exists()
    });
    // Closed: read to its end, the transaction still going. Poll tightly, the
    // window is short.
    let deadline = Instant::now() + MOVE_LIMIT;
    while has_open(pid, &path) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The daemon may move it between any two looks: then nothing is rewritten.
    let rewritten = rewrite_in_place(&path, &content);
    daemon.wait(MOVE_LIMIT * 3, "rewrite.ndjson archived", || {
        site.archived() == ["rewrite.ndjson"] && entries(&site.incoming()).is_empty()
    });
    let archived = fs::read(site.archive().join(name)).expect("archived");
    let digests: Vec<String> = inbox(&site).into_iter().map(|row| row[0].clone()).collect();
    assert!(
        digests.contains(&sha256_hex(&archived)),
        "archive/ holds bytes whose digest is not in the inbox ({digests:?})"
    );
    match rewritten {
        Some(rewritten) => {
            eprintln!("rewritten before the move");
            assert_eq!(archived, rewritten.as_bytes());
            let log = site.log();
            assert!(log.contains("changed while it was ingested"), "{log}");
        }
        None => eprintln!("moved before the rewrite could land"),
    }
    stop(daemon);
}

#[test]
fn sigterm_while_long_names_are_rejected_exits_0_at_once_leaving_each_file_whole() {
    let site = Site::new();
    let mut daemon = start(&site);
    let content = b"{\"events\": not JSON\n";
    let names: Vec<OsString> = (240..=250).map(|len| long_name(len, ".json")).collect();
    for name in &names {
        drop_named(&site, name, content);
    }
    // The daemon is at work on them (the first is out) when the signal comes.
    daemon.wait(MOVE_LIMIT, "a long-named file rejected", || {
        entries(&site.incoming()).len() < names.len()
    });
    stop(daemon);
    // Each file is either still waiting or rejected beside its reason file.
    let waiting = entries(&site.incoming());
    let rejected = entries(&site.rejected());
    let data: Vec<&OsString> = rejected
        .iter()
        .filter(|n| !n.as_bytes().ends_with(b".reason.json"))
        .collect();
    assert_eq!(
        waiting.len() + data.len(),
        names.len(),
        "{waiting:?} {rejected:?}"
    );
    assert_eq!(rejected.len(), data.len() * 2, "{rejected:?}");
    for name in &waiting {
        assert!(names.contains(name), "{name:?}");
        assert_eq!(
            fs::read(site.incoming().join(name)).expect("waiting"),
            content
        );
    }
    for name in data {
        let mut reason_name = name.clone();
        reason_name.push(".reason.json");
        let reason = read_json(&site.rejected().join(&reason_name));
        assert_eq!(reason["reason"], "not_json", "{reason}");
    }
}
