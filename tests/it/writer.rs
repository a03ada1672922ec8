//! The writer's sorted runs seen from outside: a large file's runs spill next to
//! the database as unnamed files, so a process killed mid-ingest leaves none.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

/// Whether process `pid` holds a file in `dir` that has no name there (an
/// `O_TMPFILE`, or one removed since it was opened).
fn holds_an_unnamed_file_in(pid: u32, dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries.filter_map(|entry| entry.ok()).any(|entry| {
        fs::read_link(entry.path()).is_ok_and(|target| {
            target.parent() == Some(dir) && target.to_string_lossy().ends_with(" (deleted)")
        })
    })
}

/// `count` distinct events of about 230 bytes, six to a flight.
fn large_file(count: usize) -> String {
    (0..count)
        .map(|i| {
            let instant = format!(
                "2026-11-29T{:02}:{:02}:{:02}Z",
                i % 24,
                (i / 24) % 60,
                i % 60
            );
            let payload = r#"{"tail":"G-XWBA","crew":["C123","C456","C789"]}"#;
            event(
                &format!("F{:06}-20261129", i / 6),
                "takeoff",
                &instant,
                Some(1),
                payload,
            ) + "\n"
        })
        .collect()
}

#[test]
fn a_large_file_killed_while_its_runs_spill_leaves_no_file_next_to_the_database() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    fs::create_dir_all(&state).expect("mkdir");
    let db = state.join("spoolite.db");
    // 150,000 events: more than one 32 MiB run once encoded with their raw text.
    let count = 150_000;
    let file = write(dir.path(), "large.ndjson", large_file(count));
    let state = fs::canonicalize(&state).expect("canonical state/");
    let only_the_database = ["spoolite.db", "spoolite.db-shm", "spoolite.db-wal"];

    let mut child = ingest_command(&db)
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut spilled = false;
    while Instant::now() < deadline && !spilled {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        spilled = holds_an_unnamed_file_in(child.id(), &state);
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9");
    child.wait().expect("wait");
    assert!(spilled, "the ingest never held a run file in {state:?}");
    let left = names(&state);
    assert!(
        left.iter()
            .all(|name| only_the_database.contains(&name.as_str())),
        "{left:?}"
    );

    let (code, lines) = ingest_json(&db, &[&file]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["inserted"], count, "{lines:?}");
    let left = names(&state);
    assert!(
        left.iter()
            .all(|name| only_the_database.contains(&name.as_str())),
        "{left:?}"
    );
}
