//! `spoolite backup`: a copy taken while a real daemon ingests a stream of files
//! holds exactly the batches committed at one moment (compared whole with a
//! database built by ingesting those files, in the copy's order), passes
//! integrity_check, and a daemon started on it skips every file it had; an
//! existing FILE, a PostgreSQL database and a backup killed mid-copy leave
//! nothing at FILE.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::{ANALYST, assert_root, share_read_only_with_analyst};
use crate::support::{
    Daemon, Site, event, let_others_traverse, names, query, spoolite, spoolite_as, write,
};

const WAIT: Duration = Duration::from_secs(30);

/// `spoolite ingest` of `files` into `db`, expected to succeed.
fn ingest<P: AsRef<std::ffi::OsStr>>(db: &Path, files: impl IntoIterator<Item = P>) {
    let output = spoolite()
        .arg("ingest")
        .arg("--db")
        .arg(db)
        .args(files)
        .output()
        .expect("run spoolite ingest");
    assert!(output.status.success(), "ingest: {}", stderr(&output));
}

/// Files in the stream the daemon ingests while the copies are taken.
const STREAM_FILES: usize = 90;

/// Events of a file's own flights (inserts), beside its shared ones.
const OWN_EVENTS: usize = 200;

/// File `i` of the stream: events of flights of its own, and an off-blocks of
/// five shared flights whose revision and payload make the outcome depend on the
/// order of the files (updates, stale versions, conflicts and unchanged ones).
fn stream_file(i: usize) -> String {
    let mut lines = Vec::new();
    for e in 0..OWN_EVENTS {
        let flight = format!("TS{i:03}{:03}-20261201", e / 4);
        let kind = ["off_blocks", "takeoff", "landing", "on_blocks"][e % 4];
        let instant = format!("2026-12-01T{:02}:{:02}:00Z", 6 + e % 4, e % 60);
        lines.push(event(&flight, kind, &instant, Some(1), "{}"));
    }
    for shared in 0..5 {
        let flight = format!("SH{shared:03}-20261201");
        let revision = ((i * 7 + shared) % 5) as i64;
        let payload = format!("{{\"gate\":\"G{}\"}}", i % 3);
        lines.push(event(
            &flight,
            "off_blocks",
            "2026-12-01T05:00:00Z",
            Some(revision),
            &payload,
        ));
    }
    lines.join("\n") + "\n"
}

fn stream_name(i: usize) -> String {
    format!("stream-{i:03}.ndjson")
}

/// `spoolite backup --db DB --to TO`.
fn backup(db: &Path, to: &Path) -> Output {
    backup_command(db, to)
        .output()
        .expect("run spoolite backup")
}

fn backup_command(db: &Path, to: &Path) -> Command {
    let mut command = spoolite();
    command
        .arg("backup")
        .arg("--db")
        .arg(db)
        .arg("--to")
        .arg(to);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every relation analysts read, every column but the times spoolite writes
/// (`*_at`, which differ from run to run), with its rows sorted.
fn tables(db: &Path) -> BTreeMap<String, Vec<Vec<String>>> {
    [
        "duty_event_all",
        "duty_event",
        "flight_times",
        "batch_summary",
        "ingest_inbox",
        "quarantine",
        "crew_flight",
        "crew_duty",
        "spoolite_flight",
    ]
    .iter()
    .map(|relation| {
        let columns: Vec<String> = query(
            db,
            &format!("SELECT name FROM pragma_table_info('{relation}') ORDER BY cid"),
        )
        .into_iter()
        .map(|row| row[0].clone())
        .filter(|name| !name.ends_with("_at"))
        .collect();
        assert!(!columns.is_empty(), "{relation} has columns");
        let mut rows = query(
            db,
            &format!("SELECT {} FROM {relation}", columns.join(", ")),
        );
        rows.sort();
        ((*relation).to_owned(), rows)
    })
    .collect()
}

fn integrity(db: &Path) -> Vec<Vec<String>> {
    query(db, "PRAGMA integrity_check")
}

/// The file names of the copy's inbox, in the order they were ingested.
fn inbox_order(db: &Path) -> Vec<String> {
    query(db, "SELECT file_name FROM ingest_inbox ORDER BY rowid")
        .into_iter()
        .map(|row| row[0].clone())
        .collect()
}

/// Whether the database exists with its schema (the daemon creates it).
fn has_inbox(db: &Path) -> bool {
    db.exists()
        && !query(
            db,
            "SELECT 1 FROM sqlite_master WHERE name = 'ingest_inbox'",
        )
        .is_empty()
}

fn batches(db: &Path) -> usize {
    query(db, "SELECT count(*) FROM ingest_inbox")[0][0]
        .parse()
        .expect("a count")
}

/// Checks a copy against the files: whole tables equal to a fresh database built
/// by `spoolite ingest` of the files of its inbox, in its order; returns those
/// files' names.
fn assert_holds_one_moment(copy: &Path, files: &Path, scratch: &Path) -> Vec<String> {
    assert_eq!(integrity(copy), vec![vec!["ok".to_owned()]]);
    let order = inbox_order(copy);
    let fresh = scratch.join(format!(
        "{}-replayed.db",
        copy.file_name().expect("name").to_string_lossy()
    ));
    if !order.is_empty() {
        ingest(&fresh, order.iter().map(|name| files.join(name)));
    }
    assert_eq!(
        tables(copy),
        tables(&fresh),
        "the copy {} equals its {} files replayed",
        copy.display(),
        order.len()
    );
    order
}

#[test]
fn a_backup_taken_while_the_daemon_ingests_holds_the_batches_of_one_moment() {
    let site = Site::new();
    let files = site.dir.path().join("files");
    fs::create_dir_all(&files).expect("mkdir files");
    let contents: Vec<String> = (0..STREAM_FILES).map(stream_file).collect();
    for (i, content) in contents.iter().enumerate() {
        write(&files, &stream_name(i), content);
    }
    let mut daemon = Daemon::spawn(
        site.run_command()
            .args(["--settle", "50ms", "--rescan", "1s"]),
        &site.log,
    );
    daemon.wait_serving(&site);
    // The stream: one file every few milliseconds, from a thread, while the
    // copies are taken.
    let dropper = {
        let (incoming, files) = (site.incoming(), files.clone());
        std::thread::spawn(move || {
            for i in 0..STREAM_FILES {
                let name = stream_name(i);
                let temp = incoming.join(format!(".{name}.tmp"));
                fs::copy(files.join(&name), &temp).expect("copy into incoming/");
                fs::rename(&temp, incoming.join(&name)).expect("rename into incoming/");
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    let copies_dir = site.dir.path().join("copies");
    fs::create_dir_all(&copies_dir).expect("mkdir copies");
    let mut copies = Vec::new();
    for (k, after) in [5, 30, 60].into_iter().enumerate() {
        daemon.wait(WAIT, &format!("{after} batches committed"), || {
            has_inbox(&site.db) && batches(&site.db) >= after
        });
        let copy = copies_dir.join(format!("copy-{k}.db"));
        let output = backup(&site.db, &copy);
        assert!(output.status.success(), "backup: {}", stderr(&output));
        // stderr is no terminal here: no progress bar, nothing at all.
        assert_eq!(stderr(&output), "");
        // No side file is left beside the copy (no -wal, no temporary file): it
        // is one file.
        // (The copies before it have side files of the test's own reads.)
        let name = format!("copy-{k}.db");
        let beside: Vec<String> = names(&copies_dir)
            .into_iter()
            .filter(|n| n.starts_with(&name) || n.starts_with('.'))
            .collect();
        assert_eq!(beside, [name]);
        let summary = stdout(&output);
        assert_eq!(summary.lines().count(), 1, "one summary line: {summary}");
        let size = fs::metadata(&copy).expect("the copy").len();
        let held = batches(&copy);
        assert!(
            summary.contains(&format!("{held} batches, {size} bytes")),
            "the summary tells the batches and the size: {summary}"
        );
        assert!(held >= after, "the copy holds what was committed before it");
        copies.push(copy);
    }
    dropper.join().expect("the dropper");
    daemon.wait(WAIT, "every file ingested", || {
        batches(&site.db) == STREAM_FILES
    });
    let mut held = Vec::new();
    for copy in &copies {
        let order = assert_holds_one_moment(copy, &files, site.dir.path());
        held.push(order);
    }
    assert!(
        held.iter().any(|order| order.len() < STREAM_FILES),
        "a copy was taken before the stream ended"
    );
    // The source's own order is the one its copies saw, each a prefix of it.
    let source_order = inbox_order(&site.db);
    for order in &held {
        assert_eq!(order[..], source_order[..order.len()]);
    }

    // A daemon started on the earliest copy, with every file dropped again, skips
    // each file the copy had and processes the rest.
    daemon.signal(libc::SIGTERM);
    daemon.wait_exit(WAIT, "the first daemon to stop");
    let restored = Site::new();
    fs::create_dir_all(restored.db.parent().expect("state")).expect("mkdir state");
    fs::copy(&copies[0], &restored.db).expect("restore the copy");
    let mut daemon = Daemon::spawn(
        restored
            .run_command()
            .args(["--settle", "50ms", "--rescan", "1s"]),
        &restored.log,
    );
    daemon.wait_serving(&restored);
    for (i, content) in contents.iter().enumerate() {
        restored.drop_file(&stream_name(i), content);
    }
    daemon.wait(WAIT, "every re-dropped file archived", || {
        restored.archived().len() == STREAM_FILES && restored.waiting().is_empty()
    });
    let expected: Vec<String> = (0..STREAM_FILES)
        .map(|i| {
            let name = stream_name(i);
            let word = if held[0].contains(&name) {
                "skipped_duplicate"
            } else {
                "processed"
            };
            format!("] {word} {name} ")
        })
        .collect();
    // The outcome line is logged just after the move.
    daemon.wait(WAIT, "an outcome line for every file", || {
        let log = restored.log();
        expected.iter().all(|line| log.contains(line))
    });
    let log = restored.log();
    assert_eq!(
        log.matches("] skipped_duplicate ").count(),
        held[0].len(),
        "{log}"
    );
    assert_eq!(batches(&restored.db), STREAM_FILES);
}

#[test]
fn an_existing_file_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let batch = write(dir.path(), "one.ndjson", stream_file(1));
    ingest(&db, [&batch]);
    let existing = write(dir.path(), "yesterday.db", b"last night's copy\x00\x01");
    let before = fs::read(&existing).expect("read");
    let output = backup(&db, &existing);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("exists and is left as it is"),
        "{}",
        stderr(&output)
    );
    assert_eq!(fs::read(&existing).expect("read"), before);
    assert!(stdout(&output).is_empty());
    // The database itself is a FILE that exists, too.
    let output = backup(&db, &db);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(batches(&db), 1);
    let left = names(dir.path());
    assert!(
        left.iter().all(|n| !n.starts_with('.')),
        "no temporary copy is left: {left:?}"
    );
}

#[test]
fn a_missing_database_is_an_error_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let to = dir.path().join("copy.db");
    let output = backup(&dir.path().join("nothing.db"), &to);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("does not exist"),
        "{}",
        stderr(&output)
    );
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    // And a folder for the copy that does not exist.
    let db = write(dir.path(), "one.ndjson", stream_file(2));
    let db = {
        let path = dir.path().join("spoolite.db");
        ingest(&path, [&db]);
        path
    };
    let output = backup(&db, &dir.path().join("no-such-folder").join("copy.db"));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no-such-folder does not exist"),
        "{}",
        stderr(&output)
    );
    assert!(!dir.path().join("no-such-folder").exists());
}

#[test]
fn postgresql_is_refused_with_the_servers_own_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let to = dir.path().join("copy.db");
    let output = spoolite()
        .arg("backup")
        .arg("--db")
        .arg("postgresql:///spoolite?host=/run/postgresql")
        .arg("--to")
        .arg(&to)
        .output()
        .expect("run spoolite backup");
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("PostgreSQL")
            && message.contains("pg_dump")
            && message.contains("pg_basebackup"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(names(dir.path()).is_empty());
}

/// A database of about `mib` MiB: one small batch, and a table of the test's own
/// that only makes the file large (the copy is of pages, whatever they hold).
fn large_database(dir: &Path, mib: usize) -> PathBuf {
    let db = dir.join("large.db");
    let batch = write(dir, "one.ndjson", stream_file(7));
    ingest(&db, [&batch]);
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.execute_batch(&format!(
        "CREATE TABLE test_padding (bytes BLOB);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {mib})
         INSERT INTO test_padding SELECT randomblob(1048576) FROM n;
         PRAGMA wal_checkpoint(TRUNCATE);"
    ))
    .expect("pad");
    db
}

#[test]
fn a_backup_killed_mid_copy_leaves_no_file_and_the_next_one_succeeds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = large_database(dir.path(), 400);
    let copies = dir.path().join("copies");
    fs::create_dir_all(&copies).expect("mkdir");
    let to = copies.join("spoolite-2026-12-02.db");
    let temp = copies.join(".spoolite-2026-12-02.db.spoolite-backup-tmp");
    let mut child = backup_command(&db, &to)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start spoolite backup");
    // Killed once the copy has begun: its temporary file holds pages.
    let deadline = Instant::now() + WAIT;
    while fs::metadata(&temp).map_or(true, |m| m.len() == 0) {
        assert!(
            Instant::now() < deadline,
            "the temporary copy never appeared"
        );
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the backup ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    assert!(!to.exists(), "no FILE after a killed backup");
    assert!(temp.exists(), "the temporary copy is what is left");

    let output = backup(&db, &to);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        names(&copies),
        ["spoolite-2026-12-02.db"],
        "the leftover was replaced"
    );
    assert_eq!(integrity(&to), vec![vec!["ok".to_owned()]]);
    assert_eq!(tables(&to), tables(&db));
    assert_eq!(
        query(&to, "SELECT count(*), sum(length(bytes)) FROM test_padding"),
        query(&db, "SELECT count(*), sum(length(bytes)) FROM test_padding"),
    );
}

#[test]
fn an_analyst_who_may_only_read_the_database_backs_it_up() {
    assert_root();
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    fs::create_dir_all(&state).expect("mkdir");
    let db = state.join("spoolite.db");
    let batch = write(dir.path(), "one.ndjson", stream_file(3));
    ingest(&db, [&batch]);
    let_others_traverse(dir.path());
    share_read_only_with_analyst(&state);
    let before = fs::read(&db).expect("read the database");
    let copies = dir.path().join("copies");
    fs::create_dir_all(&copies).expect("mkdir");
    std::os::unix::fs::chown(&copies, Some(ANALYST), Some(ANALYST)).expect("chown copies");
    let to = copies.join("mine.db");
    let output = spoolite_as(ANALYST, ANALYST)
        .arg("backup")
        .arg("--db")
        .arg(&db)
        .arg("--to")
        .arg(&to)
        .current_dir("/")
        .output()
        .expect("run spoolite backup");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(tables(&to), tables(&db));
    assert!(
        fs::read(&db).expect("read the database") == before,
        "the source is as it was"
    );
}

// ---------------------------------------------------------------------------------
// The packaged timer and service

fn packaging(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(name)
}

/// The shell command of the unit's `KEY=/bin/sh -c '…'` line, as systemd hands it
/// to the shell (`$$` and `%%` unescaped), running the binary under test.
fn unit_shell_command(unit: &str, key: &str) -> String {
    let prefix = format!("{key}=/bin/sh -c '");
    let line = unit
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {key}= shell command in the unit"));
    let script = line[prefix.len()..]
        .strip_suffix('\'')
        .expect("the command is one quoted word");
    script
        .replace("$$", "$")
        .replace("%%", "%")
        .replace("/usr/bin/spoolite", env!("CARGO_BIN_EXE_spoolite"))
}

#[test]
fn the_packaged_backup_units_verify_and_keep_the_newest_copies() {
    let units = tempfile::tempdir().expect("temp dir");
    for name in ["spoolite-backup.service", "spoolite-backup.timer"] {
        fs::copy(packaging(name), units.path().join(name)).expect("copy unit");
    }
    crate::support::assert_unit_verifies(&units.path().join("spoolite-backup.service"));
    crate::support::assert_unit_verifies(&units.path().join("spoolite-backup.timer"));

    // The unit's two commands, run as systemd runs them, into a folder holding
    // five older copies, a temporary file a killed run left two days ago and a
    // file of the operator's.
    let unit = fs::read_to_string(packaging("spoolite-backup.service")).expect("read unit");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = large_database(dir.path(), 1);
    let backups = dir.path().join("backups");
    fs::create_dir_all(&backups).expect("mkdir");
    for day in 1..=5 {
        write(
            &backups,
            &format!("spoolite-2026-11-0{day}T031500Z.db"),
            "old",
        );
    }
    let leftover = write(
        &backups,
        ".spoolite-2026-11-06T031500Z.db.spoolite-backup-tmp",
        "half",
    );
    fs::File::options()
        .write(true)
        .open(&leftover)
        .expect("open")
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(2 * 86400))
        .expect("age the leftover");
    write(&backups, "notes.txt", "the operator's");
    let no_defaults = write(dir.path(), "defaults.env", "");
    for key in ["ExecStart", "ExecStartPost"] {
        let output = Command::new("/bin/sh")
            .arg("-c")
            .arg(unit_shell_command(&unit, key))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SPOOLITE_DB", &db)
            .env("SPOOLITE_DEFAULTS_FILE", &no_defaults)
            .env("BACKUP_DIR", &backups)
            .env("BACKUP_KEEP", "3")
            .output()
            .expect("run the unit's command");
        assert!(output.status.success(), "{key}: {}", stderr(&output));
    }
    let left = names(&backups);
    assert_eq!(left.len(), 4, "{left:?}");
    let new = &left[3];
    assert!(
        new.starts_with("spoolite-20")
            && new.ends_with("Z.db")
            && new.as_str() > "spoolite-2026-11-06",
        "{left:?}"
    );
    assert_eq!(
        left[..3],
        [
            "notes.txt",
            "spoolite-2026-11-04T031500Z.db",
            "spoolite-2026-11-05T031500Z.db"
        ]
    );
    assert_eq!(tables(&backups.join(new)), tables(&db));
}
