//! `spoolite run` end to end: the real daemon serving a temporary spool. Files waiting
//! at start and dropped later, a slow writer, temp names, real sftp uploads, truncated
//! files, entries that are never taken, kill -9 at random moments, an analyst holding
//! the write lock, a concurrent reader, a second daemon, SIGTERM mid-file, and
//! start-ups that must be refused. Every wait is bounded; a failing test prints the
//! daemon's log.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::{
    COUNT_FIELDS, Daemon, EVENT_COLUMNS, Rng, Site, dump, has_open, names, query, sha256_hex,
    wait_until, write,
};

// ---------------------------------------------------------------------------------
// The daemon under test
// ---------------------------------------------------------------------------------

/// The settings a daemon is started with; `FAST` unless a test needs otherwise.
#[derive(Debug, Clone, Copy)]
struct Settings {
    settle: Duration,
    partial_timeout: &'static str,
    rescan: &'static str,
}

/// Short settle so tests are quick; a rescan long enough that only the watch can
/// explain a prompt ingest.
const FAST: Settings = Settings {
    settle: Duration::from_millis(200),
    partial_timeout: "10m",
    rescan: "30s",
};

impl Site {
    /// Starts `spoolite run` on this site, its stderr appended to the site's log.
    fn start(&self, settings: Settings) -> Daemon {
        self.start_logging_to(settings, &self.log)
    }

    fn start_logging_to(&self, settings: Settings, log: &Path) -> Daemon {
        Daemon::spawn(
            self.run_command()
                .arg("--settle")
                .arg(format!("{}ms", settings.settle.as_millis()))
                .arg("--partial-timeout")
                .arg(settings.partial_timeout)
                .arg("--rescan")
                .arg(settings.rescan),
            log,
        )
    }

    /// Starts a daemon that must refuse to run; returns its exit status and stderr.
    fn refused_start(&self, what: &str) -> (ExitStatus, String) {
        let log = self.dir.path().join("refused.log");
        let mut daemon = self.start_logging_to(FAST, &log);
        let status = daemon.wait_exit(Duration::from_secs(10), what);
        (status, fs::read_to_string(&log).expect("read log"))
    }

    /// `batch_digest|file_name|events_total|inserted|…|invalid` of every inbox row.
    fn inbox(&self) -> Vec<String> {
        let columns: Vec<&str> = ["batch_digest", "file_name"]
            .into_iter()
            .chain(COUNT_FIELDS)
            .collect();
        dump(&self.db, "ingest_inbox", &columns)
    }

    fn inbox_digests(&self) -> BTreeSet<String> {
        dump(&self.db, "ingest_inbox", &["batch_digest"])
            .into_iter()
            .collect()
    }

    fn duty_events(&self) -> Vec<String> {
        dump(&self.db, "duty_event", EVENT_COLUMNS)
    }

    fn status(&self) -> Value {
        let output = self
            .status_command()
            .arg("--json")
            .output()
            .expect("run spoolite status");
        // 0 while a daemon serves the site, 3 once none does: both read every figure.
        assert!(
            matches!(output.status.code(), Some(0 | 3)),
            "status: {output:?}"
        );
        serde_json::from_slice(&output.stdout).expect("status --json is JSON")
    }
}

/// How many lines of `log` report `word` (`processed`, `skipped_duplicate`,
/// `rejected`) for the file `name`.
fn outcome_lines(log: &str, word: &str, name: &str) -> usize {
    let needle = format!("] {word} {name} ");
    log.lines().filter(|line| line.contains(&needle)).count()
}

/// Waits until the log holds the outcome line of `name` (written just after the move).
fn wait_logged(daemon: &mut Daemon, site: &Site, word: &str, name: &str) {
    daemon.wait(
        Duration::from_secs(10),
        &format!("`{word} {name}` in the log"),
        || outcome_lines(&site.log(), word, name) > 0,
    );
}

/// Position in `log` of the outcome line of `name`.
fn outcome_position(log: &str, word: &str, name: &str) -> usize {
    log.find(&format!("] {word} {name} "))
        .unwrap_or_else(|| panic!("no `{word} {name}` line in the log:\n{log}"))
}

fn set_mtime(path: &Path, seconds_since_epoch: u64) {
    File::options()
        .write(true)
        .open(path)
        .expect("open to set mtime")
        .set_modified(UNIX_EPOCH + Duration::from_secs(seconds_since_epoch))
        .expect("set mtime");
}

fn mtime(path: &Path) -> SystemTime {
    fs::metadata(path)
        .expect("metadata")
        .modified()
        .expect("mtime")
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

// ---------------------------------------------------------------------------------
// Events and their expected rows
// ---------------------------------------------------------------------------------

const KINDS: [&str; 6] = [
    "off_blocks",
    "takeoff",
    "landing",
    "on_blocks",
    "duty_start",
    "duty_end",
];

/// An event written in canonical form, so its stored row is known in advance.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ev {
    flight_id: String,
    kind: &'static str,
    instant: String,
    revision: i64,
    /// Canonical: compact, keys sorted.
    payload: String,
}

impl Ev {
    /// The `index`th event of a family: distinct indexes give distinct keys.
    fn new(family: &str, index: usize, revision: i64, payload: String) -> Ev {
        Ev {
            flight_id: format!("{family}{:05}-20261129", index / KINDS.len()),
            kind: KINDS[index % KINDS.len()],
            instant: format!(
                "2026-11-29T{:02}:{:02}:{:02}Z",
                (index / 3600) % 24,
                (index / 60) % 60,
                index % 60
            ),
            revision,
            payload,
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"flight_id\":\"{}\",\"event_kind\":\"{}\",\"instant_utc\":\"{}\",\"source_revision\":{},\"payload\":{}}}",
            self.flight_id, self.kind, self.instant, self.revision, self.payload
        )
    }

    fn key(&self) -> String {
        sha256_hex(format!("{}|{}|{}", self.flight_id, self.kind, self.instant))
    }

    /// The row `dump(db, "duty_event", EVENT_COLUMNS)` shows for this event.
    fn row(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}",
            self.key(),
            self.flight_id,
            self.kind,
            self.instant,
            self.revision,
            self.payload
        )
    }
}

/// `count` events of `family` with distinct keys, revision 1.
fn family(name: &str, count: usize) -> Vec<Ev> {
    (0..count)
        .map(|i| Ev::new(name, i, 1, format!("{{\"n\":{i},\"tail\":\"G-XWBA\"}}")))
        .collect()
}

fn ndjson(events: &[Ev]) -> String {
    events.iter().map(|e| e.json() + "\n").collect()
}

fn json_batch(events: &[Ev]) -> String {
    let events: Vec<String> = events.iter().map(Ev::json).collect();
    format!("{{\"events\":[\n{}\n]}}\n", events.join(",\n"))
}

/// What duty_event must hold after `events` were delivered in any order: the highest
/// revision of each key (the events are conflict-free), sorted as `dump` sorts.
fn expected_rows<'a>(events: impl IntoIterator<Item = &'a Ev>) -> Vec<String> {
    let mut best: BTreeMap<String, &Ev> = BTreeMap::new();
    for event in events {
        let slot = best.entry(event.key()).or_insert(event);
        if event.revision > slot.revision {
            *slot = event;
        }
    }
    let mut rows: Vec<String> = best.values().map(|e| e.row()).collect();
    rows.sort();
    rows
}

// ---------------------------------------------------------------------------------
// Taking files: when, which, in what order
// ---------------------------------------------------------------------------------

#[test]
fn files_waiting_at_start_go_in_oldest_first_and_later_drops_within_settle_plus_one_second() {
    let site = Site::new();
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    let (a, b, c) = (family("WA", 3), family("WB", 4), family("WC", 2));
    write(&site.incoming(), "a.json", json_batch(&a));
    write(&site.incoming(), "b.ndjson", ndjson(&b));
    write(&site.incoming(), "c.json", json_batch(&c));
    // Oldest first means modification time, then name: c, a, b.
    set_mtime(&site.incoming().join("c.json"), 978_307_200);
    set_mtime(&site.incoming().join("a.json"), 1_009_843_200);
    set_mtime(&site.incoming().join("b.ndjson"), 1_041_379_200);

    let mut daemon = site.start(FAST);
    daemon.wait(
        Duration::from_secs(30),
        "the waiting files archived",
        || site.archived() == ["a.json", "b.ndjson", "c.json"],
    );
    assert_eq!(site.waiting(), Vec::<String>::new());
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    for name in ["a.json", "b.ndjson", "c.json"] {
        wait_logged(&mut daemon, &site, "processed", name);
    }
    let log = site.log();
    let order = [
        outcome_position(&log, "processed", "c.json"),
        outcome_position(&log, "processed", "a.json"),
        outcome_position(&log, "processed", "b.ndjson"),
    ];
    assert!(
        order.is_sorted(),
        "not taken oldest first (c, a, b):\n{log}"
    );

    // Later drops: renamed in (no create or close event on the final name), and
    // written in place.
    let (d, e) = (family("WD", 5), family("WE", 6));
    let limit = FAST.settle + Duration::from_secs(1);
    let dropped = Instant::now();
    site.drop_file("d.json", json_batch(&d));
    daemon.wait(limit, "d.json (renamed in) archived", || {
        site.archived().contains(&"d.json".to_owned())
    });
    eprintln!("d.json went in after {:?}", dropped.elapsed());
    let dropped = Instant::now();
    write(&site.incoming(), "e.ndjson", ndjson(&e));
    daemon.wait(limit, "e.ndjson (written in place) archived", || {
        site.archived().contains(&"e.ndjson".to_owned())
    });
    eprintln!("e.ndjson went in after {:?}", dropped.elapsed());

    assert_eq!(
        site.duty_events(),
        expected_rows(a.iter().chain(&b).chain(&c).chain(&d).chain(&e))
    );
    let files: Vec<String> = dump(&site.db, "ingest_inbox", &["file_name"]);
    assert_eq!(
        files,
        ["a.json", "b.ndjson", "c.json", "d.json", "e.ndjson"]
    );
    assert_eq!(site.waiting(), Vec::<String>::new());
}

#[test]
fn a_slow_writer_is_ingested_once_and_complete() {
    let site = Site::new();
    let settings = Settings {
        settle: Duration::from_secs(1),
        ..FAST
    };
    let mut daemon = site.start(settings);
    let events = family("SLOW", 500);
    // Chunks end at line ends: every prefix is a valid NDJSON file, so only the
    // settle time keeps the daemon from taking it early.
    let chunks: Vec<String> = events.chunks(100).map(ndjson).collect();
    let path = site.incoming().join("slow.ndjson");
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("open slow.ndjson");
    for (i, chunk) in chunks.iter().enumerate() {
        file.write_all(chunk.as_bytes()).expect("write chunk");
        if i + 1 < chunks.len() {
            // The writer's pause: shorter than the settle time.
            std::thread::sleep(Duration::from_millis(500));
            daemon.assert_running("the slow writer");
            assert_eq!(site.archived(), Vec::<String>::new(), "after chunk {i}");
            assert_eq!(
                site.rejected_names(),
                Vec::<String>::new(),
                "after chunk {i}"
            );
            assert_eq!(site.waiting(), ["slow.ndjson"], "after chunk {i}");
        }
    }
    drop(file);
    daemon.wait(Duration::from_secs(30), "slow.ndjson archived", || {
        site.archived() == ["slow.ndjson"]
    });
    let content = fs::read(site.archive().join("slow.ndjson")).expect("read archived");
    assert_eq!(content, chunks.concat().as_bytes());
    assert_eq!(
        site.inbox(),
        [format!(
            "{}|slow.ndjson|500|500|0|0|0|0|0",
            sha256_hex(&content)
        )]
    );
    assert_eq!(site.duty_events(), expected_rows(&events));
    wait_logged(&mut daemon, &site, "processed", "slow.ndjson");
    let log = site.log();
    assert_eq!(outcome_lines(&log, "processed", "slow.ndjson"), 1, "{log}");
    assert_eq!(outcome_lines(&log, "rejected", "slow.ndjson"), 0, "{log}");
}

#[test]
fn temp_names_are_never_taken_and_a_part_upload_goes_in_after_its_rename() {
    let site = Site::new();
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let temp_names = [
        ".hidden.json",
        "a.json.tmp",
        "b.json.partial",
        "c.json.filepart",
        "d.json~",
        "E.JSON.PART",
    ];
    for (i, name) in temp_names.iter().enumerate() {
        write(
            &site.incoming(),
            name,
            json_batch(&family(&format!("TMP{i}"), 2)),
        );
    }
    let upload = family("UP", 4);
    write(&site.incoming(), "upload.json.part", json_batch(&upload));
    // A time gap of three settle times, then a sentinel: once the sentinel is in,
    // the daemon has looked at every temp name long after it settled.
    std::thread::sleep(FAST.settle * 3);
    let sentinel = family("SENT", 1);
    site.drop_file("sentinel.json", json_batch(&sentinel));
    daemon.wait(Duration::from_secs(20), "sentinel.json archived", || {
        site.archived() == ["sentinel.json"]
    });
    let mut expected_waiting: Vec<String> = temp_names.iter().map(|n| n.to_string()).collect();
    expected_waiting.push("upload.json.part".to_owned());
    expected_waiting.sort();
    assert_eq!(site.waiting(), expected_waiting);
    assert_eq!(site.inbox().len(), 1);

    fs::rename(
        site.incoming().join("upload.json.part"),
        site.incoming().join("upload.json"),
    )
    .expect("rename the upload");
    daemon.wait(Duration::from_secs(20), "upload.json archived", || {
        site.archived() == ["sentinel.json", "upload.json"]
    });
    expected_waiting.retain(|n| n != "upload.json.part");
    assert_eq!(site.waiting(), expected_waiting);
    assert_eq!(
        site.duty_events(),
        expected_rows(sentinel.iter().chain(&upload))
    );
    assert_eq!(site.rejected_names(), Vec::<String>::new());
}

const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// Runs OpenSSH's sftp client in batch mode against a local sftp-server (no ssh, no
/// network): the same requests an SFTP job makes.
fn sftp(site: &Site, batch: &str) {
    /// A child process that cannot outlive a failed wait.
    struct KilledOnDrop(Child);
    impl Drop for KilledOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    let batch_file = write(site.dir.path(), "sftp.batch", batch);
    let out = site.dir.path().join("sftp.out");
    let output = File::create(&out).expect("create sftp.out");
    let child = std::process::Command::new("sftp")
        .arg("-b")
        .arg(&batch_file)
        .arg("-D")
        .arg(SFTP_SERVER)
        .current_dir(site.dir.path())
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("clone"))
        .stderr(output)
        .spawn()
        .expect("run sftp (Debian package openssh-client)");
    let mut child = KilledOnDrop(child);
    let mut status = None;
    wait_until(Duration::from_secs(120), "sftp to finish", || {
        status = child.0.try_wait().expect("try_wait sftp");
        status.is_some()
    });
    let transcript = fs::read_to_string(&out).unwrap_or_default();
    assert!(
        status.expect("exited").success(),
        "sftp failed:\n{transcript}"
    );
}

#[test]
fn real_sftp_uploads_go_in_once_and_complete() {
    assert!(
        Path::new(SFTP_SERVER).exists(),
        "{SFTP_SERVER} is missing: install the Debian package openssh-sftp-server \
         (.ci/run does); the daemon must be tested against a real sftp upload"
    );
    let site = Site::new();
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let outbox = site.dir.path().join("outbox");
    fs::create_dir(&outbox).expect("mkdir outbox");
    let renamed = family("SFTPR", 20);
    let old = family("SFTPO", 30);
    // 50 MB in 5000 events: large payloads keep a debug build's parse time sane.
    let note = "x".repeat(10_000);
    let big: Vec<Ev> = (0..5000)
        .map(|i| {
            Ev::new(
                "SFTPBIG",
                i,
                2,
                format!("{{\"note\":\"{note}\",\"seq\":{i}}}"),
            )
        })
        .collect();
    let contents = [
        ("renamed.json", json_batch(&renamed)),
        ("old.ndjson", ndjson(&old)),
        ("big.json", json_batch(&big)),
    ];
    for (name, content) in &contents {
        write(&outbox, name, content);
    }
    assert!(contents[2].1.len() >= 50_000_000);
    set_mtime(&outbox.join("old.ndjson"), 978_307_200);
    let (out, inc) = (outbox.display(), site.incoming().display().to_string());
    let batch = format!(
        "put \"{out}/renamed.json\" \"{inc}/renamed.json.part\"\n\
         rename \"{inc}/renamed.json.part\" \"{inc}/renamed.json\"\n\
         put -p \"{out}/old.ndjson\" \"{inc}/old.ndjson\"\n\
         put \"{out}/big.json\" \"{inc}/big.json\"\n"
    );
    sftp(&site, &batch);

    daemon.wait(
        Duration::from_secs(240),
        "the three uploads archived",
        || site.archived() == ["big.json", "old.ndjson", "renamed.json"],
    );
    assert_eq!(site.waiting(), Vec::<String>::new());
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    assert_eq!(
        mtime(&site.archive().join("old.ndjson")),
        UNIX_EPOCH + Duration::from_secs(978_307_200),
        "put -p kept the old modification time"
    );
    for (name, _) in &contents {
        wait_logged(&mut daemon, &site, "processed", name);
    }
    let log = site.log();
    for (name, content) in &contents {
        assert_eq!(outcome_lines(&log, "processed", name), 1, "{name}");
        assert_eq!(outcome_lines(&log, "rejected", name), 0, "{name}");
        assert_eq!(
            fs::read(site.archive().join(name)).expect("read archived"),
            content.as_bytes(),
            "{name} arrived whole"
        );
    }
    let digests: BTreeSet<String> = contents.iter().map(|(_, c)| sha256_hex(c)).collect();
    assert_eq!(site.inbox_digests(), digests);
    assert_eq!(
        site.duty_events(),
        expected_rows(renamed.iter().chain(&old).chain(&big))
    );
}

// ---------------------------------------------------------------------------------
// Truncated files
// ---------------------------------------------------------------------------------

#[test]
fn truncated_files_wait_and_go_in_when_the_rest_arrives() {
    let site = Site::new();
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let json_events = family("TRJ", 10);
    let ndjson_events = family("TRN", 10);
    let mut utf8_events = family("TRU", 3);
    utf8_events[2].payload = "{\"crew\":\"Zoë\"}".to_owned();
    let files = [
        ("t.json", json_batch(&json_events).into_bytes()),
        ("u.ndjson", ndjson(&ndjson_events).into_bytes()),
        ("v.ndjson", ndjson(&utf8_events).into_bytes()),
    ];
    // Cut in the middle of an event; in v.ndjson, in the middle of `ë`.
    let cut_at = |name: &str, content: &[u8]| match name {
        "v.ndjson" => {
            let text = std::str::from_utf8(content).expect("utf8");
            text.find('ë').expect("ë") + 1
        }
        // Ten bytes into a line: never a line end, so the last line is cut.
        _ => {
            content[..content.len() / 2]
                .iter()
                .rposition(|&b| b == b'\n')
                .expect("a line end")
                + 10
        }
    };
    for (name, content) in &files {
        write(&site.incoming(), name, &content[..cut_at(name, content)]);
    }
    // The sentinel is newer: by the time it is taken, the cut files were taken
    // (oldest first) and found incomplete.
    std::thread::sleep(FAST.settle * 2);
    site.drop_file("sentinel.json", json_batch(&family("TRS", 1)));
    daemon.wait(Duration::from_secs(20), "sentinel.json archived", || {
        site.archived() == ["sentinel.json"]
    });
    std::thread::sleep(FAST.settle * 2);
    assert_eq!(site.waiting(), ["t.json", "u.ndjson", "v.ndjson"]);
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    assert_eq!(site.inbox().len(), 1);

    for (name, content) in &files {
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(site.incoming().join(name))
            .expect("open to append");
        file.write_all(&content[cut_at(name, content)..])
            .expect("append the rest");
    }
    daemon.wait(
        Duration::from_secs(30),
        "the completed files archived",
        || site.archived() == ["sentinel.json", "t.json", "u.ndjson", "v.ndjson"],
    );
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    let digests: BTreeSet<String> = files.iter().map(|(_, c)| sha256_hex(c)).collect();
    assert!(site.inbox_digests().is_superset(&digests));
    for (name, _) in &files {
        wait_logged(&mut daemon, &site, "processed", name);
    }
    let log = site.log();
    for (name, _) in &files {
        assert_eq!(outcome_lines(&log, "processed", name), 1, "{name}:\n{log}");
        assert_eq!(outcome_lines(&log, "rejected", name), 0, "{name}:\n{log}");
    }
    let rows = site.duty_events();
    for event in json_events.iter().chain(&ndjson_events).chain(&utf8_events) {
        assert!(rows.contains(&event.row()), "missing {}", event.row());
    }
}

#[test]
fn after_the_partial_timeout_cut_and_empty_files_are_rejected_with_a_reason_file() {
    let site = Site::new();
    let partial_timeout = Duration::from_secs(1);
    let settings = Settings {
        partial_timeout: "1s",
        ..FAST
    };
    let mut daemon = site.start(settings);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let full = json_batch(&family("PT", 6));
    let files: [(&str, &[u8], &str); 3] = [
        ("cut.json", &full.as_bytes()[..full.len() / 2], "truncated"),
        ("zero.json", b"", "empty"),
        ("blank.ndjson", b"\n\n\n", "empty"),
    ];
    let written = Instant::now();
    for (name, content, _) in &files {
        write(&site.incoming(), name, content);
    }
    daemon.wait(Duration::from_secs(20), "the three files rejected", || {
        site.waiting().is_empty()
    });
    let waited = written.elapsed();
    assert!(
        waited >= partial_timeout,
        "rejected after {waited:?}, before the partial timeout"
    );
    let mut expected: Vec<String> = files
        .iter()
        .flat_map(|(name, _, _)| [name.to_string(), format!("{name}.reason.json")])
        .collect();
    expected.sort();
    assert_eq!(site.rejected_names(), expected);
    for (name, content, reason) in &files {
        let data = fs::read(site.rejected().join(name)).expect("rejected data");
        assert_eq!(&data, content, "{name} moved unchanged");
        let why = read_json(&site.rejected().join(format!("{name}.reason.json")));
        assert_eq!(why["file"], *name, "{why}");
        assert_eq!(why["sha256"], sha256_hex(content), "{why}");
        assert_eq!(why["reason"], *reason, "{why}");
        assert!(
            why["detail"].as_str().is_some_and(|d| d.len() > 10),
            "{why}"
        );
        assert!(
            why["rejected_at"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{why}"
        );
    }
    assert_eq!(site.archived(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------
// Entries that are never taken
// ---------------------------------------------------------------------------------

fn mkfifo(path: &Path) {
    let c_path = CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

#[test]
fn links_fifos_sockets_and_folders_are_never_taken_and_the_daemon_stays_responsive() {
    let site = Site::new();
    let incoming = site.incoming();
    fs::create_dir_all(&incoming).expect("mkdir incoming");
    let outside_dir = site.dir.path().join("elsewhere");
    fs::create_dir(&outside_dir).expect("mkdir elsewhere");
    let outside_content = json_batch(&family("OUT", 3));
    let outside = write(&outside_dir, "outside.json", &outside_content);
    std::os::unix::fs::symlink(&outside, incoming.join("linked.json")).expect("symlink");
    std::os::unix::fs::symlink("/etc/passwd", incoming.join("passwd.ndjson")).expect("symlink");
    mkfifo(&incoming.join("fifo.json"));
    fs::create_dir(incoming.join("folder.json")).expect("mkdir folder.json");
    let inner_content = json_batch(&family("INNER", 2));
    write(&incoming.join("folder.json"), "inner.json", &inner_content);

    let mut daemon = site.start(FAST);
    // One more of each kind once the daemon runs; a socket too.
    std::os::unix::fs::symlink(&outside, incoming.join("late-link.json")).expect("symlink");
    mkfifo(&incoming.join("late-fifo.ndjson"));
    let _socket = std::os::unix::net::UnixListener::bind(incoming.join("socket.json"))
        .expect("bind a socket in incoming/");
    std::thread::sleep(FAST.settle * 2);

    let good = family("GOOD", 4);
    site.drop_file("good.json", json_batch(&good));
    daemon.wait(Duration::from_secs(20), "good.json archived", || {
        site.archived() == ["good.json"]
    });
    let good2 = family("GOODER", 4);
    site.drop_file("good2.ndjson", ndjson(&good2));
    daemon.wait(Duration::from_secs(20), "good2.ndjson archived", || {
        site.archived() == ["good.json", "good2.ndjson"]
    });

    let left = [
        "fifo.json",
        "folder.json",
        "late-fifo.ndjson",
        "late-link.json",
        "linked.json",
        "passwd.ndjson",
        "socket.json",
    ];
    assert_eq!(site.waiting(), left);
    let kind = |name: &str| {
        fs::symlink_metadata(incoming.join(name))
            .expect("still there")
            .file_type()
    };
    use std::os::unix::fs::FileTypeExt;
    assert!(kind("linked.json").is_symlink());
    assert!(kind("late-link.json").is_symlink());
    assert!(kind("passwd.ndjson").is_symlink());
    assert!(kind("fifo.json").is_fifo());
    assert!(kind("late-fifo.ndjson").is_fifo());
    assert!(kind("socket.json").is_socket());
    assert!(kind("folder.json").is_dir());
    assert_eq!(
        fs::read_link(incoming.join("linked.json")).expect("link"),
        outside
    );
    assert_eq!(
        fs::read_to_string(&outside).expect("outside batch"),
        outside_content
    );
    assert_eq!(names(&incoming.join("folder.json")), ["inner.json"]);
    assert_eq!(
        fs::read_to_string(incoming.join("folder.json").join("inner.json")).expect("inner"),
        inner_content
    );
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    assert_eq!(site.duty_events(), expected_rows(good.iter().chain(&good2)));
    assert_eq!(site.inbox().len(), 2);
    let log = site.log();
    for name in left {
        let mentions = log.lines().filter(|l| l.contains(name)).count();
        assert_eq!(mentions, 1, "{name} is logged once:\n{log}");
    }
    // Each named with the kind found.
    for (name, found) in [
        ("fifo.json", "a FIFO"),
        ("folder.json", "a folder"),
        ("linked.json", "a symbolic link"),
        ("socket.json", "a socket"),
    ] {
        let line = log.lines().find(|l| l.contains(name)).expect("logged");
        assert!(
            line.contains(&format!("is {found}, not a regular file")),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------------
// kill -9 at random moments
// ---------------------------------------------------------------------------------

/// One file the crash test drops.
struct CrashFile {
    name: String,
    content: Vec<u8>,
    good: bool,
}

/// The crash test's files: distinct good batches over a shared pool of keys
/// (conflict-free: a key's payload is a function of its revision), re-drops of the
/// same bytes under other names, and bad files. Returns them in drop order, with
/// the events of the distinct good files and how many invalid events those hold.
fn crash_files(rng: &mut Rng) -> (Vec<CrashFile>, Vec<Ev>, usize) {
    const POOL: usize = 600;
    let invalid_line = "{\"flight_id\":\"BAD|ID\",\"event_kind\":\"takeoff\",\"instant_utc\":\"2026-11-29T10:00:00Z\"}";
    let mut originals: Vec<CrashFile> = Vec::new();
    let mut all_events = Vec::new();
    let mut invalid = 0;
    for f in 0..90 {
        let big = f % 15 == 7;
        let count = if big {
            2000
        } else {
            rng.between(3, 60) as usize
        };
        let events: Vec<Ev> = (0..count)
            .map(|i| {
                // Big files write keys of their own; small ones share the pool.
                let index = if big {
                    POOL + f * 10_000 + i
                } else {
                    rng.index(POOL)
                };
                let revision = rng.between(0, 5) as i64;
                Ev::new(
                    "CR",
                    index,
                    revision,
                    format!("{{\"k\":{index},\"rev\":{revision}}}"),
                )
            })
            .collect();
        let with_invalid = f % 7 == 3;
        let mut lines: Vec<String> = events.iter().map(Ev::json).collect();
        if with_invalid {
            lines.insert(lines.len() / 2, invalid_line.to_owned());
            invalid += 1;
        }
        let (name, content) = if f % 2 == 0 {
            (
                format!("f{f:03}.json"),
                format!(
                    "{{\"batch_id\":\"crash-{f}\",\"events\":[\n{}\n]}}\n",
                    lines.join(",\n")
                ),
            )
        } else {
            (format!("f{f:03}.ndjson"), lines.join("\n") + "\n")
        };
        all_events.extend(events);
        originals.push(CrashFile {
            name,
            content: content.into_bytes(),
            good: true,
        });
    }
    let bad: [(&str, &[u8]); 6] = [
        ("bad.json", b"hello, this is not JSON\n"),
        ("bad.xls", b"flight_id,event_kind\nBA1,takeoff\n"),
        ("shape.json", b"{\"events\":[],\"extra\":1}\n"),
        ("count.json", b"{\"event_count\":2,\"events\":[]}\n"),
        ("bytes.ndjson", b"{\"flight_id\":\"\xff\xfe\"}\n{}\n"),
        ("bad.json", b"[1,2,3]\n"),
    ];
    let mut drops: Vec<CrashFile> = Vec::new();
    for round in 0..2 {
        for (name, content) in bad {
            let mut content = content.to_vec();
            if round == 1 {
                content.extend_from_slice(b"\n\n");
            }
            drops.push(CrashFile {
                name: name.to_owned(),
                content,
                good: false,
            });
        }
    }
    for j in 0..35 {
        let original = &originals[rng.index(originals.len())];
        // Half the re-drops keep the original name, so archive/ must number them.
        let name = if j % 2 == 0 {
            original.name.clone()
        } else {
            format!("again{j:02}-{}", original.name)
        };
        drops.push(CrashFile {
            name,
            content: original.content.clone(),
            good: true,
        });
    }
    // The originals first in random order, re-drops and bad files mixed among them.
    let mut order: Vec<CrashFile> = Vec::new();
    let mut rest = drops;
    for original in originals {
        order.push(original);
        if !rest.is_empty() && rng.between(0, 2) == 0 {
            let pick = rng.index(rest.len());
            order.push(rest.swap_remove(pick));
        }
    }
    order.extend(rest);
    (order, all_events, invalid)
}

/// Drops `file` into incoming/ by rename; a name still waiting there gets a prefix,
/// so nothing waiting is ever replaced.
fn drop_crash_file(site: &Site, file: &CrashFile, serial: usize) {
    let name = if site.incoming().join(&file.name).exists() {
        format!("busy{serial:03}-{}", file.name)
    } else {
        file.name.clone()
    };
    site.drop_file(&name, &file.content);
}

#[test]
fn kill_9_at_random_moments_loses_nothing_and_counts_nothing_twice() {
    let cycles: usize = std::env::var("SPOOLITE_CRASH_CYCLES")
        .ok()
        .map(|v| v.parse().expect("SPOOLITE_CRASH_CYCLES is a number"))
        .unwrap_or(20);
    let seed: u64 = std::env::var("SPOOLITE_CRASH_SEED")
        .ok()
        .map(|v| v.parse().expect("SPOOLITE_CRASH_SEED is a number"))
        .unwrap_or(0x5eed);
    eprintln!("crash test: {cycles} cycles, seed {seed}");
    let mut rng = Rng(seed);
    let (files, events, invalid) = crash_files(&mut rng);
    assert!(files.len() >= 100);
    let settings = Settings {
        settle: Duration::from_millis(100),
        ..FAST
    };
    let site = Site::new();
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");

    let incoming = fs::canonicalize(site.incoming()).expect("canonical incoming/");
    let mut kills_mid_file = 0;
    let per_cycle = files.len().div_ceil(cycles);
    let mut next = 0;
    for cycle in 0..cycles {
        let mut daemon = site.start(settings);
        let delay = Duration::from_millis(rng.between(50, 450));
        let started = Instant::now();
        // Half the cycle's files at once, the rest half-way to the kill.
        let batch_end = (next + per_cycle).min(files.len());
        let half = next + (batch_end - next) / 2;
        while next < half {
            drop_crash_file(&site, &files[next], next);
            next += 1;
        }
        std::thread::sleep((delay / 2).saturating_sub(started.elapsed()));
        while next < batch_end {
            drop_crash_file(&site, &files[next], next);
            next += 1;
        }
        if cycle % 2 == 0 {
            // A moment counted from the start.
            std::thread::sleep(delay.saturating_sub(started.elapsed()));
        } else {
            // A moment counted from when the daemon opens a file (if it does within
            // a second): lands in parsing, commit, rename and fsync far more often.
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline && !holds_a_file_in(daemon.pid(), &incoming) {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(rng.between(0, 60)));
        }
        if let Some(status) = daemon.child.try_wait().expect("try_wait") {
            panic!("cycle {cycle}: spoolite run exited on its own ({status})");
        }
        if holds_a_file_in(daemon.pid(), &incoming) {
            kills_mid_file += 1;
        }
        daemon.kill_hard();
    }
    while next < files.len() {
        drop_crash_file(&site, &files[next], next);
        next += 1;
    }
    let log = site.log();
    eprintln!(
        "{kills_mid_file} of {cycles} kills landed while a file was open; \
         before the last start: {} files waiting, {} outcome lines in the log",
        site.waiting().len(),
        log.lines()
            .filter(|l| ["] processed ", "] skipped_duplicate ", "] rejected "]
                .iter()
                .any(|w| l.contains(w)))
            .count()
    );

    let mut daemon = site.start(settings);
    daemon.wait_serving(&site);
    daemon.wait(Duration::from_secs(60), "incoming/ empty", || {
        site.waiting().is_empty()
    });
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(10), "exit after SIGTERM");
    assert!(status.success(), "SIGTERM: {status}");

    // Every file dropped is in archive/ (good ones, re-drops included) or rejected/.
    let contents = |dir: &Path, keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        let mut digests: Vec<String> = names(dir)
            .into_iter()
            .filter(|n| keep(n))
            .map(|n| sha256_hex(fs::read(dir.join(&n)).expect("read")))
            .collect();
        digests.sort();
        digests
    };
    let dropped = |good: bool| -> Vec<String> {
        let mut digests: Vec<String> = files
            .iter()
            .filter(|f| f.good == good)
            .map(|f| sha256_hex(&f.content))
            .collect();
        digests.sort();
        digests
    };
    assert_eq!(contents(&site.archive(), &|_| true), dropped(true));
    let is_reason = |n: &str| n.ends_with(".reason.json");
    let is_temp = |n: &str| n.starts_with('.');
    assert_eq!(
        contents(&site.rejected(), &|n| !is_reason(n) && !is_temp(n)),
        dropped(false)
    );

    // The database: exactly what the distinct good files say, once each.
    assert_eq!(site.duty_events(), expected_rows(&events));
    let distinct: BTreeSet<String> = dropped(true).into_iter().collect();
    assert_eq!(
        site.inbox().len(),
        distinct.len(),
        "one inbox row per digest"
    );
    assert_eq!(site.inbox_digests(), distinct);
    assert_eq!(
        query(&site.db, "SELECT count(*) FROM quarantine"),
        [[invalid.to_string()]]
    );
    assert_eq!(query(&site.db, "PRAGMA integrity_check"), [["ok"]]);
    let status = site.status();
    assert_eq!(status["incoming_waiting"], 0, "{status}");
    assert_eq!(status["batches"], distinct.len(), "{status}");
    assert_eq!(status["rejected_files"], dropped(false).len(), "{status}");

    // rejected/ holds each rejected file with its reason file, and nothing else.
    let rejected_entries = site.rejected_names();
    let orphans: Vec<&String> = rejected_entries
        .iter()
        .filter(|n| {
            n.strip_suffix(".reason.json")
                .is_some_and(|data| !rejected_entries.iter().any(|e| e == data))
        })
        .collect();
    assert!(
        orphans.is_empty(),
        "reason files without their data file in rejected/ (a kill between writing the \
         reason file and moving the file, then a second rejection under a new name): \
         {orphans:?}"
    );
    let data_without_reason: Vec<&String> = rejected_entries
        .iter()
        .filter(|n| !is_reason(n) && !is_temp(n))
        .filter(|n| !rejected_entries.contains(&format!("{n}.reason.json")))
        .collect();
    assert!(
        data_without_reason.is_empty(),
        "files in rejected/ without a reason file: {data_without_reason:?}"
    );
    // A kill while a reason file is being written may leave its hidden temp file;
    // the last restart removes it.
    let leftovers: Vec<&String> = rejected_entries.iter().filter(|n| is_temp(n)).collect();
    assert!(
        leftovers.is_empty(),
        "hidden temporary files left in rejected/: {leftovers:?}"
    );
}

/// What a kill between writing the reason file and moving the file leaves: the
/// reason file in rejected/, the file still in incoming/. The restart must not leave
/// the reason file without its file.
#[test]
fn a_reason_file_left_by_a_crash_before_the_move_is_not_left_orphaned() {
    let site = Site::new();
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    fs::create_dir_all(site.rejected()).expect("mkdir rejected");
    let content = b"hello, this is not JSON\n";
    write(&site.incoming(), "bad.json", content);
    let reason = serde_json::json!({
        "file": "bad.json",
        "sha256": sha256_hex(content),
        "reason": "not_json",
        "detail": "the file is not JSON",
        "rejected_at": "2026-11-29T10:05:00Z",
    });
    write(
        &site.rejected(),
        "bad.json.reason.json",
        format!("{reason:#}\n"),
    );
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "bad.json rejected", || {
        site.waiting().is_empty()
    });
    wait_logged(&mut daemon, &site, "rejected", "bad.json");
    let entries = site.rejected_names();
    let data: Vec<&String> = entries
        .iter()
        .filter(|n| !n.ends_with(".reason.json"))
        .collect();
    assert_eq!(data.len(), 1, "{entries:?}");
    assert_eq!(
        fs::read(site.rejected().join(data[0])).expect("rejected file"),
        content
    );
    assert_eq!(
        entries,
        [data[0].clone(), format!("{}.reason.json", data[0])],
        "rejected/ holds the file and its reason file, no orphan"
    );
}

// ---------------------------------------------------------------------------------
// Analysts: a lock held too long, and a reader during ingest
// ---------------------------------------------------------------------------------

#[test]
fn an_analyst_holding_the_write_lock_delays_files_but_loses_none() {
    let site = Site::new();
    let mut daemon = site.start(FAST);
    let first = family("LK0", 2);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    site.drop_file("first.json", json_batch(&first));
    daemon.wait(Duration::from_secs(20), "first.json archived", || {
        site.archived() == ["first.json"]
    });

    let analyst = rusqlite::Connection::open(&site.db).expect("analyst opens the db");
    analyst
        .busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    analyst
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("analyst takes the lock");
    let batches: Vec<(String, Vec<Ev>)> = (1..=3)
        .map(|i| (format!("locked{i}.json"), family(&format!("LK{i}"), 50)))
        .collect();
    for (name, events) in &batches {
        site.drop_file(name, json_batch(events));
    }
    let mut waiting: Vec<String> = batches.iter().map(|(n, _)| n.clone()).collect();
    waiting.sort();
    // Longer than the daemon's 5 s busy timeout: at least one attempt fails.
    let hold = Duration::from_secs(7);
    let locked = Instant::now();
    while locked.elapsed() < hold {
        daemon.assert_running("the analyst's lock");
        assert_eq!(site.waiting(), waiting, "moved while locked");
        assert_eq!(site.archived(), ["first.json"], "moved while locked");
        assert_eq!(site.rejected_names(), Vec::<String>::new());
        std::thread::sleep(Duration::from_millis(100));
    }
    analyst.execute_batch("COMMIT").expect("analyst releases");
    let released = Instant::now();
    daemon.wait(Duration::from_secs(40), "every file archived", || {
        site.waiting().is_empty()
    });
    eprintln!("all in {:?} after the release", released.elapsed());
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    let mut archived = waiting.clone();
    archived.push("first.json".to_owned());
    archived.sort();
    assert_eq!(site.archived(), archived);
    assert_eq!(
        site.duty_events(),
        expected_rows(first.iter().chain(batches.iter().flat_map(|(_, e)| e)))
    );
    assert_eq!(site.inbox().len(), 4);
}

/// One look of a reader: every inbox row's counts against the rows that carry its
/// digest, and rows whose batch has no inbox row, in one read transaction.
fn torn_reads(conn: &rusqlite::Connection) -> rusqlite::Result<(usize, Vec<String>)> {
    let tx = conn.unchecked_transaction()?;
    let mut problems = Vec::new();
    let mut statement = tx.prepare(
        "WITH d AS (SELECT batch_digest, count(*) AS n FROM duty_event GROUP BY batch_digest),
              q AS (SELECT batch_digest, count(*) AS n FROM quarantine GROUP BY batch_digest)
         SELECT i.batch_digest, i.inserted + i.updated, coalesce(d.n, 0),
                i.conflicts + i.invalid, coalesce(q.n, 0)
         FROM ingest_inbox AS i
         LEFT JOIN d ON d.batch_digest = i.batch_digest
         LEFT JOIN q ON q.batch_digest = i.batch_digest",
    )?;
    let rows: Vec<(String, i64, i64, i64, i64)> = statement
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    for (digest, written, events, quarantined, in_quarantine) in &rows {
        if written != events || quarantined != in_quarantine {
            problems.push(format!(
                "{digest}: inbox says {written} written and {quarantined} quarantined, \
                 the reader sees {events} events and {in_quarantine} quarantine rows"
            ));
        }
    }
    drop(statement);
    let orphans: i64 = tx.query_row(
        "SELECT (SELECT count(*) FROM duty_event WHERE batch_digest NOT IN
                   (SELECT batch_digest FROM ingest_inbox))
              + (SELECT count(*) FROM quarantine WHERE batch_digest NOT IN
                   (SELECT batch_digest FROM ingest_inbox))",
        [],
        |r| r.get(0),
    )?;
    if orphans != 0 {
        problems.push(format!("{orphans} rows of a batch without its inbox row"));
    }
    tx.commit()?;
    Ok((rows.len(), problems))
}

#[test]
fn a_concurrent_reader_never_sees_a_batch_half_written() {
    let site = Site::new();
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    site.drop_file("first.json", json_batch(&family("RD", 1)));
    daemon.wait(Duration::from_secs(20), "first.json archived", || {
        site.archived() == ["first.json"]
    });

    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (db, stop) = (site.db.clone(), stop.clone());
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open_with_flags(
                &db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .expect("reader opens the db");
            conn.busy_timeout(Duration::from_secs(5)).expect("busy");
            let (mut looks, mut seen, mut problems) = (0, BTreeSet::new(), Vec::new());
            while !stop.load(Ordering::SeqCst) {
                let (batches, found) = torn_reads(&conn).expect("reader query");
                looks += 1;
                seen.insert(batches);
                problems.extend(found);
            }
            (looks, seen, problems)
        })
    };
    let invalid = "{\"flight_id\":\"\",\"event_kind\":\"takeoff\",\"instant_utc\":\"2026-11-29T10:00:00Z\"}\n";
    let mut expected = 1;
    for f in 0..15 {
        let mut content = ndjson(&family(&format!("RD{f:02}X"), 1500));
        for _ in 0..(f % 4) {
            content.push_str(invalid);
        }
        site.drop_file(&format!("r{f:02}.ndjson"), content);
        expected += 1;
    }
    daemon.wait(Duration::from_secs(120), "every file archived", || {
        site.archived().len() == expected
    });
    stop.store(true, Ordering::SeqCst);
    let (looks, seen, problems) = reader.join().expect("reader thread");
    eprintln!("the reader looked {looks} times and saw inbox sizes {seen:?}");
    assert!(problems.is_empty(), "torn reads: {problems:#?}");
    assert!(
        seen.len() >= 4,
        "the reader saw too few states to judge: {seen:?}"
    );
    let (batches, problems) =
        torn_reads(&rusqlite::Connection::open(&site.db).expect("open")).expect("final look");
    assert_eq!((batches, problems), (16, Vec::new()));
}

// ---------------------------------------------------------------------------------
// One daemon per spool; stopping
// ---------------------------------------------------------------------------------

#[test]
fn a_second_daemon_on_the_same_spool_is_refused_naming_the_first() {
    let site = Site::new();
    let mut first = site.start(FAST);
    first.wait_serving(&site);
    let pid = first.pid();
    let started = Instant::now();
    let (status, stderr) = site.refused_start("the second daemon to exit");
    let took = started.elapsed();
    assert!(!status.success(), "second daemon: {status}\n{stderr}");
    assert!(took < Duration::from_secs(5), "refused only after {took:?}");
    assert!(
        stderr.contains(&format!("pid {pid}")),
        "stderr does not name pid {pid}:\n{stderr}"
    );
    // The first still serves.
    let events = family("SECOND", 2);
    site.drop_file("after.json", json_batch(&events));
    first.wait(Duration::from_secs(20), "after.json archived", || {
        site.archived() == ["after.json"]
    });
    assert_eq!(site.duty_events(), expected_rows(&events));
    first.signal(libc::SIGINT);
    let status = first.wait_exit(Duration::from_secs(5), "exit after SIGINT");
    assert!(status.success(), "SIGINT: {status}");
}

#[test]
fn sigterm_mid_file_exits_0_leaving_it_done_or_untouched_and_a_restart_finishes_it() {
    let site = Site::new();
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let events = family("TERM", 30_000);
    let content = ndjson(&events);
    let digest = sha256_hex(&content);
    let path = site.drop_file("big.ndjson", &content);
    let canonical = fs::canonicalize(&path).expect("canonical path");
    let pid = daemon.pid();
    daemon.wait(
        Duration::from_secs(30),
        "big.ndjson open in the daemon",
        || has_open(pid, &canonical),
    );
    daemon.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let status = daemon.wait_exit(Duration::from_secs(30), "exit after SIGTERM");
    let took = signalled.elapsed();
    assert!(status.success(), "SIGTERM: {status}");
    assert!(took <= Duration::from_secs(5), "stopped after {took:?}");

    assert_eq!(site.rejected_names(), Vec::<String>::new());
    let inbox = site.inbox_digests();
    if site.archived() == ["big.ndjson"] {
        eprintln!("SIGTERM landed after the commit");
        assert_eq!(site.waiting(), Vec::<String>::new());
        assert_eq!(inbox, BTreeSet::from([digest.clone()]));
    } else {
        eprintln!("SIGTERM rolled the file back");
        assert_eq!(site.archived(), Vec::<String>::new());
        assert_eq!(site.waiting(), ["big.ndjson"]);
        assert_eq!(
            fs::read(&path).expect("still in incoming/"),
            content.as_bytes()
        );
        assert_eq!(inbox, BTreeSet::new());
        assert_eq!(site.duty_events(), Vec::<String>::new());
    }

    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(120), "big.ndjson archived", || {
        site.archived() == ["big.ndjson"]
    });
    assert_eq!(site.inbox_digests(), BTreeSet::from([digest]));
    assert_eq!(site.duty_events(), expected_rows(&events));
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(5), "exit of an idle daemon");
    assert!(status.success(), "SIGTERM: {status}");
}

/// Whether process `pid` has a file of `dir` open (by /proc/PID/fd).
fn holds_a_file_in(pid: i32, dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries
        .filter_map(|e| e.ok())
        .any(|e| fs::read_link(e.path()).is_ok_and(|target| target.parent() == Some(dir)))
}

// ---------------------------------------------------------------------------------
// Start-ups that must be refused
// ---------------------------------------------------------------------------------

#[test]
fn spool_folders_on_different_filesystems_are_refused_at_start() {
    let site = Site::new();
    let shm = Path::new("/dev/shm");
    let here = fs::metadata(site.dir.path()).expect("temp dir").dev();
    assert!(
        shm.is_dir() && fs::metadata(shm).expect("/dev/shm").dev() != here,
        "this test needs a second filesystem: /dev/shm missing or on the same \
         filesystem as {}",
        site.dir.path().display()
    );
    let other = tempfile::tempdir_in(shm).expect("temp dir in /dev/shm");
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    std::os::unix::fs::symlink(other.path(), site.archive()).expect("symlink archive/");
    let waiting = write(&site.incoming(), "a.json", json_batch(&family("FS", 1)));

    let (status, stderr) = site.refused_start("the refused daemon to exit");
    assert!(!status.success(), "{status}\n{stderr}");
    assert!(
        stderr.contains("different filesystems"),
        "no clear message:\n{stderr}"
    );
    assert!(waiting.exists(), "the waiting file stays");
    assert_eq!(names(other.path()), Vec::<String>::new());
}

#[test]
fn a_spool_reached_through_a_symbolic_link_is_served() {
    let site = Site::new();
    let real = site.dir.path().join("real-spool");
    fs::create_dir(&real).expect("mkdir real-spool");
    std::os::unix::fs::symlink(&real, &site.spool).expect("symlink the spool");
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        real.join("incoming").is_dir()
    });
    let events = family("LINKED", 3);
    site.drop_file("a.json", json_batch(&events));
    daemon.wait(Duration::from_secs(20), "a.json archived", || {
        names(&real.join("archive")) == ["a.json"]
    });
    assert_eq!(site.duty_events(), expected_rows(&events));
}

#[test]
fn a_database_of_a_newer_schema_is_refused_at_start() {
    let site = Site::new();
    fs::create_dir_all(site.db.parent().expect("parent")).expect("mkdir state");
    rusqlite::Connection::open(&site.db)
        .expect("create db")
        .execute_batch("CREATE TABLE t (x); PRAGMA user_version = 99;")
        .expect("set user_version");
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    let waiting = write(&site.incoming(), "a.json", json_batch(&family("NEW", 1)));

    let (status, stderr) = site.refused_start("the refused daemon to exit");
    assert!(!status.success(), "{status}\n{stderr}");
    assert!(
        stderr.contains("99") && stderr.contains(&site.db.display().to_string()),
        "the message names neither the version nor the database:\n{stderr}"
    );
    assert!(waiting.exists(), "the waiting file stays");
    assert_eq!(query(&site.db, "PRAGMA user_version"), [["99"]]);
}

#[test]
fn a_postgresql_database_that_cannot_be_reached_is_waited_for_and_no_file_is_made_of_its_uri() {
    let site = Site::new();
    let dir = site.dir.path().join("here");
    fs::create_dir_all(&dir).expect("mkdir");
    // A socket folder with no server in it: nothing to connect to, and no TCP.
    let uri = format!(
        "postgresql://ops:s3cret@/spoolite?host={}",
        site.dir.path().join("no-server").display()
    );
    let mut command = crate::support::spoolite();
    command
        .current_dir(&dir)
        .args(["run", "--spool"])
        .arg(&site.spool)
        .args(["--db", &uri]);
    let mut daemon = site.spawn(&mut command);
    // A passing fault: the daemon serves the spool and tries again.
    daemon.wait(
        Duration::from_secs(20),
        "the connection fault logged",
        || fs::read_to_string(&site.log).is_ok_and(|log| log.contains("trying again")),
    );
    daemon.assert_running("while the database cannot be reached");
    let log = daemon.log();
    assert!(log.contains("PostgreSQL"), "{log}");
    assert!(!log.contains("s3cret"), "the password is logged:\n{log}");
    assert_eq!(names(&dir), Vec::<String>::new(), "a file made of the URI");
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(20), "the daemon to stop");
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
}

#[test]
fn an_unreadable_database_is_refused_at_start() {
    let site = Site::new();
    fs::create_dir_all(site.db.parent().expect("parent")).expect("mkdir state");
    fs::write(&site.db, "this is not a SQLite database\n".repeat(200)).expect("write");
    let (status, stderr) = site.refused_start("the refused daemon to exit");
    assert!(!status.success(), "{status}\n{stderr}");
    assert!(
        stderr.contains(&site.db.display().to_string()),
        "the message does not name the database:\n{stderr}"
    );
}

#[test]
fn quarantines_are_logged_at_warn_by_reason_and_no_name_splits_a_log_line() {
    let site = Site::new();
    let mut daemon = site.start(FAST);
    daemon.wait(Duration::from_secs(20), "incoming/ created", || {
        site.incoming().is_dir()
    });
    let name = "bad\nprocessed forged.ndjson";
    let lines = [
        r#"{"flight_id":"QW1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"}"#,
        r#"{"flight_id":"QW1","event_kind":"landing","instant_utc":"2026-11-29T10:05:00"}"#,
        r#"{"flight_id":"QW1","event_kind":"landing","instant_utc":"2026-11-29T1"#,
        r#"{"flight_id":"QW1","event_kind":"on_blocks","instant_utc":"yesterday"}"#,
    ];
    site.drop_file(name, format!("{}\n", lines.join("\n")));
    daemon.wait(Duration::from_secs(20), "the file archived", || {
        site.archived().len() == 1
    });
    daemon.wait(Duration::from_secs(5), "the quarantine line", || {
        site.log().contains("events quarantined")
    });
    let log = site.log();
    let escaped = "bad\\nprocessed forged.ndjson";
    let warn: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("events quarantined"))
        .collect();
    assert_eq!(warn.len(), 1, "{log}");
    assert!(warn[0].contains("WARN"), "{}", warn[0]);
    assert!(
        warn[0].contains(&format!(
            "{escaped}: 3 events quarantined: bad_instant=2 not_json=1"
        )),
        "{}",
        warn[0]
    );
    // Every line of the log is one of the daemon's, none begun by the file's name.
    for line in log.lines() {
        assert!(
            line.starts_with('['),
            "a line the name forged: {line:?}\n{log}"
        );
    }
    assert!(log.contains(&format!("processed {escaped} ")), "{log}");
}
