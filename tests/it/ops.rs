//! Tests of what ops engineers and analysts use: the packaging, status, metrics and
//! read-only access.
//!
//! The daemon runs as the real binary in temporary folders, with the umask of the
//! packaged unit (0027). The read-only analyst is a child process with uid and gid
//! 65534 (nobody/nogroup), which reads the database through the group of a setgid
//! folder exactly as the `spoolite-read` group does on an installed workstation.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::{ANALYST, assert_root};
use crate::support::{
    COUNT_FIELDS, Daemon, Site, assert_unit_verifies, dump, event, ingest_command, json_batch,
    let_others_traverse, off_blocks, parse_lines, query, sha256_hex, spoolite, spoolite_as,
    unit_copy,
};

/// The longest any single wait of these tests may take.
const WAIT: Duration = Duration::from_secs(30);

/// The repository root, where packaging/ lives.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------
// Fixtures: two days of flights, and what the analyst views must make of them.

/// LH400's takeoff, which day 1 sends and day 2 again at the same revision with
/// another `payload`: a conflict.
fn lh400_takeoff(payload: &str) -> String {
    event(
        "LH400-20261130",
        "takeoff",
        "2026-11-30T08:14:00Z",
        Some(1),
        payload,
    )
}

/// BA0117's landing as day 2 (which updates day 1's) and day 3 (stale) write it.
fn ba0117_landing(revision: i64, payload: &str) -> String {
    event(
        "BA0117-20261129",
        "landing",
        "2026-11-29T21:40:12.25Z",
        Some(revision),
        payload,
    )
}

/// Day 1: the first events of two flights and a duty start; every event new.
fn day1() -> String {
    json_batch(&[
        off_blocks(1, r#"{"gate":"B32"}"#),
        event(
            "BA0117-20261129",
            "takeoff",
            "2026-11-29T10:21:30.5Z",
            Some(1),
            "{}",
        ),
        event(
            "BA0117-20261129",
            "landing",
            "2026-11-29T22:40:12.25+01:00",
            Some(1),
            r#"{"runway":"27L"}"#,
        ),
        event(
            "LH400-20261130",
            "off_blocks",
            "2026-11-30T08:00:00-00:00",
            Some(1),
            "{}",
        ),
        lh400_takeoff(r#"{"runway":"26R"}"#),
        event(
            "DUTY-ONLY-1",
            "duty_start",
            "2026-11-29T06:00:00Z",
            Some(1),
            r#"{"crew":["C123"]}"#,
        ),
    ])
    .replacen('{', r#"{"batch_id":"OPS-2026-11-29","#, 1)
}

/// Day 2 (NDJSON): one update, one conflict, one invalid event, six new events,
/// among them a flight that returned to stand and went off blocks again.
fn day2() -> String {
    let lines = [
        ba0117_landing(2, r#"{"runway":"27R"}"#),
        event(
            "BA0117-20261129",
            "on_blocks",
            "2026-11-29T16:47:12.5-05:00",
            Some(1),
            "{}",
        ),
        event(
            "EZY8421-20270102",
            "off_blocks",
            "2027-01-01T23:30:00Z",
            Some(1),
            "{}",
        ),
        event(
            "EZY8421-20270102",
            "off_blocks",
            "2027-01-01T23:52:00Z",
            Some(1),
            r#"{"note":"second push after return to stand"}"#,
        ),
        event(
            "EZY8421-20270102",
            "takeoff",
            "2027-01-02T01:05:00.123456789+01:00",
            Some(1),
            "{}",
        ),
        event(
            "EZY8421-20270102",
            "landing",
            "2027-01-02T02:10:00Z",
            Some(1),
            "{}",
        ),
        event(
            "EZY8421-20270102",
            "on_blocks",
            "2027-01-02T02:18:30Z",
            Some(1),
            "{}",
        ),
        lh400_takeoff(r#"{"runway":"08L"}"#),
        r#"{"flight_id":"XX1-20261130","event_kind":"landing","instant_utc":"2026-11-30T10:00:00"}"#
            .to_owned(),
    ];
    lines.map(|line| line + "\n").concat()
}

/// Day 3 (NDJSON): one unchanged event and one stale one.
fn day3() -> String {
    [
        event(
            "BA0117-20261129",
            "off_blocks",
            "2026-11-29T11:05:00+01:00",
            Some(1),
            r#"{"gate":"B32"}"#,
        ),
        ba0117_landing(1, r#"{"runway":"27L"}"#),
    ]
    .map(|line| line + "\n")
    .concat()
}

/// `flight_times` after day 1 and day 2, every column, as `dump` writes rows.
///
/// BA0117: block 10:05:00 → 21:47:12.5 = 702.2083 min; airborne 10:21:30.5 →
/// 21:40:12.25 = 678.6958 min. EZY8421: the first off-blocks counts, across
/// midnight: 23:30:00 → 02:18:30 = 168.5 min; airborne 00:05:00.123456789 →
/// 02:10:00 = 124.998 min, rounded to 125. LH400 has not landed.
fn expected_flight_times() -> Vec<String> {
    vec![
        "BA0117-20261129|2026-11-29T10:05:00Z|2026-11-29T10:21:30.5Z|2026-11-29T21:40:12.25Z|2026-11-29T21:47:12.5Z|702.21|678.7".to_owned(),
        "EZY8421-20270102|2027-01-01T23:30:00Z|2027-01-02T00:05:00.123456789Z|2027-01-02T02:10:00Z|2027-01-02T02:18:30Z|168.5|125".to_owned(),
        "LH400-20261130|2026-11-30T08:00:00Z|2026-11-30T08:14:00Z|NULL|NULL|NULL|NULL".to_owned(),
    ]
}

/// `batch_summary` after day 1 and day 2, every column but `ingested_at`, as `dump`
/// writes rows. Day 2's update of the BA0117 landing leaves day 1 the last writer
/// of five rows.
fn expected_batch_summary() -> Vec<String> {
    let mut rows = vec![
        format!(
            "{}|OPS-2026-11-29|day1.json|6|6|0|0|0|0|0|5|0",
            sha256_hex(day1())
        ),
        format!("{}|NULL|day2.ndjson|9|6|1|0|0|1|1|7|2", sha256_hex(day2())),
    ];
    rows.sort();
    rows
}

/// The contract's columns of batch_summary but the time spoolite wrote
/// (`ingested_at`), in its order.
fn batch_summary_but_time() -> Vec<&'static str> {
    ["batch_digest", "batch_id", "file_name"]
        .into_iter()
        .chain(COUNT_FIELDS)
        .chain(["rows_last_written", "quarantined"])
        .collect()
}

/// Both analyst views, every column, sorted.
fn views(db: &Path) -> [Vec<String>; 2] {
    [
        dump(db, "flight_times", &[]),
        dump(db, "batch_summary", &[]),
    ]
}

// ---------------------------------------------------------------------------------
// Daemons run on a site as the packaged unit runs them.

/// Sets for `command` (a `spoolite run`) what the packaged unit sets: the umask
/// 0027, and debug logging.
fn packaged(command: &mut Command) -> &mut Command {
    command.env("RUST_LOG", "debug");
    // SAFETY: umask is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0o027);
            Ok(())
        });
    }
    command
}

impl Site {
    /// Starts `spoolite run` as the packaged unit does, with a short settle time and
    /// `extra` options, and waits until its folders exist.
    fn start_packaged(&self, extra: &[&str]) -> Daemon {
        let mut daemon = self.spawn(packaged(self.run_command().args(with_defaults(extra))));
        daemon.wait(WAIT, "the daemon creates its folders", || {
            self.incoming().is_dir() && self.db.exists()
        });
        daemon
    }

    /// Drops a file and waits until the daemon has moved it to archive/ or rejected/.
    fn deliver(&self, daemon: &mut Daemon, name: &str, content: impl AsRef<[u8]>) {
        let before = self.moved();
        self.drop_file(name, content);
        daemon.wait(WAIT, &format!("{name} leaves incoming/"), || {
            !self.incoming().join(name).exists() && self.moved() > before
        });
    }

    /// Files in archive/ and rejected/, reason files included.
    fn moved(&self) -> usize {
        count_files(&self.archive()) + count_files(&self.rejected())
    }
}

/// `extra` options of `spoolite run`, with a short settle time and rescan interval
/// unless `extra` sets them.
fn with_defaults(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
    for (option, value) in [("--settle", "150ms"), ("--rescan", "1s")] {
        if !extra.contains(&option) {
            args.extend([option.to_owned(), value.to_owned()]);
        }
    }
    args
}

/// The regular files directly in `dir`: how many, and their bytes.
fn folder_size(dir: &Path) -> (u64, u64) {
    let mut size = (0, 0);
    for entry in fs::read_dir(dir).expect("list") {
        let meta = fs::symlink_metadata(entry.expect("entry").path()).expect("stat");
        if meta.is_file() {
            size = (size.0 + 1, size.1 + meta.len());
        }
    }
    size
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |entries| entries.count())
}

impl Daemon {
    /// SIGTERM, then waits (bounded) for exit 0.
    fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let status = self.wait_exit(WAIT, "the daemon to exit after SIGTERM");
        assert_eq!(
            status.code(),
            Some(0),
            "exit after SIGTERM; log:\n{}",
            self.log()
        );
    }
}

/// Sets a file's modification time `age` in the past.
fn age_file(path: &Path, age: Duration) {
    let file = fs::File::options()
        .write(true)
        .open(path)
        .expect("open to set mtime");
    file.set_modified(SystemTime::now() - age)
        .expect("set mtime");
}

fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

// ---------------------------------------------------------------------------------
// 1. The systemd unit and the environment file

/// The unit's settings: `(section, key)` → every value assigned, in order.
fn unit_settings(text: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut settings: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("unit line without '=': {line:?}"));
        settings
            .entry((section.clone(), key.trim().to_owned()))
            .or_default()
            .push(value.trim().to_owned());
    }
    settings
}

#[test]
fn the_systemd_unit_verifies() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_unit_verifies(&unit_copy(dir.path()));
}

#[test]
fn the_unit_runs_the_daemon_as_the_contract_and_the_packaging_need() {
    let unit = fs::read_to_string(repo().join("packaging/spoolite.service")).expect("read unit");
    let settings = unit_settings(&unit);
    let one = |section: &str, key: &str| -> String {
        let values = settings
            .get(&(section.to_owned(), key.to_owned()))
            .unwrap_or_else(|| panic!("[{section}] {key}= missing"));
        assert_eq!(values.len(), 1, "[{section}] {key}= set more than once");
        values[0].clone()
    };
    for (key, value) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("WatchdogSec", "5min"),
        ("Restart", "on-failure"),
        ("User", "spoolite"),
        ("Group", "spoolite"),
        ("SupplementaryGroups", "spoolite-drop"),
        ("UMask", "0027"),
        ("KillSignal", "SIGTERM"),
        ("TimeoutStopSec", "30"),
        ("EnvironmentFile", "-/etc/default/spoolite"),
        ("ExecStart", "/usr/bin/spoolite run"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", "/var/spool/spoolite /var/lib/spoolite"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX"),
    ] {
        assert_eq!(one("Service", key), value, "[Service] {key}=");
    }
    assert_eq!(one("Install", "WantedBy"), "multi-user.target");
    // The packaged paths: inside ReadWritePaths=, and the ones postinst creates.
    let environment = &settings[&("Service".to_owned(), "Environment".to_owned())];
    assert_eq!(
        environment,
        &[
            "SPOOLITE_SPOOL=/var/spool/spoolite",
            "SPOOLITE_DB=/var/lib/spoolite/spoolite.db"
        ]
    );
    let postinst = fs::read_to_string(repo().join("packaging/postinst")).expect("read postinst");
    for line in [
        "SPOOL=/var/spool/spoolite",
        "STATE=/var/lib/spoolite",
        "ensure_dir \"$SPOOL/incoming\" spoolite spoolite-drop 2770",
        "ensure_dir \"$STATE\" spoolite spoolite-read 2750",
        "#DEBHELPER#",
    ] {
        assert!(postinst.contains(line), "postinst lacks {line:?}");
    }
}

/// `(variable, default)` of every option of `spoolite run --help`.
fn run_options_env() -> Vec<(String, Option<String>)> {
    let output = spoolite()
        .args(["run", "--help"])
        .output()
        .expect("run --help");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).expect("help is UTF-8");
    let options: Vec<(String, Option<String>)> = help
        .lines()
        .filter_map(|line| {
            let env = line
                .split("[env: ")
                .nth(1)?
                .split(['=', ']'])
                .next()?
                .to_owned();
            let default = line
                .split("[default: ")
                .nth(1)
                .and_then(|rest| rest.split(']').next())
                .map(str::to_owned);
            Some((env, default))
        })
        .collect();
    assert!(options.len() >= 7, "options with variables: {options:?}");
    options
}

/// The packaged paths, which the environment file sets (for the one-shot commands
/// an operator types; the unit sets them too): every other line is a comment.
const PACKAGED_SETTINGS: [(&str, &str); 2] = [
    ("SPOOLITE_SPOOL", "/var/spool/spoolite"),
    ("SPOOLITE_DB", "/var/lib/spoolite/spoolite.db"),
];

#[test]
fn the_environment_file_lists_every_variable_of_spoolite_run() {
    let example =
        fs::read_to_string(repo().join("packaging/spoolite.env")).expect("read spoolite.env");
    let shown: BTreeMap<&str, &str> = example
        .lines()
        .filter_map(|line| line.strip_prefix('#').unwrap_or(line).split_once('='))
        .filter(|(name, _)| name.starts_with("SPOOLITE_") || *name == "RUST_LOG")
        .collect();
    // What the file sets: the packaged paths, and nothing else.
    let set: Vec<(&str, &str)> = example
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            line.split_once('=')
                .unwrap_or_else(|| panic!("not VARIABLE=value: {line:?}"))
        })
        .collect();
    assert_eq!(set, PACKAGED_SETTINGS, "the lines the example sets");
    for (variable, default) in run_options_env() {
        let shown = shown
            .get(variable.as_str())
            .unwrap_or_else(|| panic!("spoolite.env does not mention {variable}="));
        match PACKAGED_SETTINGS.iter().find(|(name, _)| *name == variable) {
            // The packaged paths, not the binary's defaults.
            Some((_, packaged)) => assert_eq!(shown, packaged),
            None => {
                if let Some(default) = default {
                    assert_eq!(*shown, default, "{variable}: the example shows the default");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// 2. sd_notify: READY=1 after start-up, WATCHDOG=1 while idle, STOPPING=1 at the end

/// Collects the sd_notify datagrams a daemon sends to a socket of the test's own.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("socket timeout");
        NotifySocket { socket, path }
    }

    /// The next message, waiting at most `WAIT`.
    fn next(&self, daemon: &Daemon) -> String {
        let start = Instant::now();
        let mut buffer = [0u8; 4096];
        loop {
            match self.socket.recv(&mut buffer) {
                Ok(n) => return String::from_utf8_lossy(&buffer[..n]).into_owned(),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    assert!(
                        start.elapsed() < WAIT,
                        "no sd_notify message for {WAIT:?}; daemon log:\n{}",
                        daemon.log()
                    );
                }
                Err(e) => panic!("receive sd_notify: {e}"),
            }
        }
    }
}

#[test]
fn the_daemon_tells_systemd_it_is_ready_alive_and_stopping() {
    let site = Site::new();
    let notify = NotifySocket::bind(site.dir.path());
    // A file already waiting before start-up: READY=1 comes after the database is
    // open and migrated, and the daemon then takes the file.
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    fs::write(site.incoming().join("early.json"), day1()).expect("write early file");
    let mut daemon = site.spawn(packaged(
        site.run_command()
            // The loop would sleep 30 s between rescans: only the watchdog wakes it.
            .args(["--settle", "100ms", "--rescan", "30s"])
            .env("NOTIFY_SOCKET", &notify.path)
            .env("WATCHDOG_USEC", "300000"),
    ));
    assert_eq!(notify.next(&daemon), "READY=1");
    assert_eq!(
        query(&site.db, "PRAGMA user_version"),
        [[crate::support::sqlite_schema_version().to_string()]],
        "at READY=1 the schema is migrated"
    );
    // Half of WATCHDOG_USEC: a ping every 150 ms. Five pings take 750 ms at that
    // pace, much less than one rescan.
    let start = Instant::now();
    for _ in 0..5 {
        assert_eq!(notify.next(&daemon), "WATCHDOG=1");
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "five pings took {:?}",
        start.elapsed()
    );
    daemon.wait(WAIT, "the waiting file is archived", || {
        site.archive().join("early.json").exists()
    });
    daemon.signal(libc::SIGTERM);
    loop {
        let message = notify.next(&daemon);
        if message == "STOPPING=1" {
            break;
        }
        assert_eq!(message, "WATCHDOG=1", "only pings before STOPPING=1");
    }
    daemon.stop();
}

#[test]
fn a_start_up_error_exits_2_without_ready() {
    let site = Site::new();
    let notify = NotifySocket::bind(site.dir.path());
    // The database path is a folder: the database cannot be opened.
    fs::create_dir_all(&site.db).expect("mkdir in the database's place");
    let mut daemon = site.spawn(packaged(
        site.run_command().env("NOTIFY_SOCKET", &notify.path),
    ));
    let status = daemon.wait_exit(WAIT, "the daemon to exit");
    assert_eq!(status.code(), Some(2), "log:\n{}", daemon.log());
    assert!(
        daemon.log().contains(&site.db.display().to_string()),
        "the message names the database: {}",
        daemon.log()
    );
    let mut buffer = [0u8; 4096];
    notify
        .socket
        .set_nonblocking(true)
        .expect("non-blocking socket");
    let mut messages = Vec::new();
    while let Ok(n) = notify.socket.recv(&mut buffer) {
        messages.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
    }
    assert!(
        !messages.iter().any(|m| m == "READY=1"),
        "READY=1 sent by a daemon that failed to start: {messages:?}"
    );
}

// ---------------------------------------------------------------------------------
// 3. status

/// Drops day 1, day 2, a `.csv` and a `.json` that is no batch, through a daemon;
/// returns the site with the daemon stopped.
fn site_with_history() -> Site {
    let site = Site::new();
    let mut daemon = site.start_packaged(&[]);
    site.deliver(&mut daemon, "day1.json", day1());
    site.deliver(&mut daemon, "day2.ndjson", day2());
    site.deliver(
        &mut daemon,
        "roster.xls",
        "flight,kind\nBA0117,off_blocks\n",
    );
    site.deliver(&mut daemon, "list.json", "[1, 2, 3]\n");
    daemon.stop();
    site
}

/// Runs `command` (a `spoolite status`); returns its exit code, stdout and stderr.
fn run_status(command: &mut Command) -> (i32, String, String) {
    let output = command.output().expect("run spoolite status");
    let text = String::from_utf8(output.stdout).expect("status is UTF-8");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().expect("exit code"), text, stderr)
}

/// `status --json` of the site: the exit code and the one object printed.
fn status_json_code(site: &Site) -> (i32, Value) {
    let (code, stdout, stderr) = run_status(site.status_command().arg("--json"));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "status --json prints one object: {stdout}{stderr}"
    );
    let value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{stdout}: {e}"));
    (code, value)
}

/// `status --json` of a site that must be served (exit 0).
fn status_json(site: &Site) -> Value {
    let (code, status) = status_json_code(site);
    assert_eq!(code, 0, "{status}");
    status
}

/// Fails unless every line of `text` fits 80 columns.
fn assert_fits_80_columns(text: &str) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "status line wider than 80 columns ({}): {line:?}",
            line.chars().count()
        );
    }
}

/// The text form of the site's status and its exit code.
fn status_text_code(site: &Site) -> (i32, String) {
    let (code, text, _) = run_status(&mut site.status_command());
    assert_fits_80_columns(&text);
    (code, text)
}

/// The line of `text` that starts with `label`, with the label taken off.
fn status_line<'t>(text: &'t str, label: &str) -> &'t str {
    text.lines()
        .find_map(|line| line.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} line in status:\n{text}"))
        .trim()
}

/// The lock file's modification time as status writes `since`.
fn lock_since(site: &Site) -> String {
    let modified = fs::metadata(site.spool.join("spoolite.lock"))
        .and_then(|m| m.modified())
        .expect("lock file mtime");
    spoolite::clock::format_millis(modified)
}

/// A folder uploaded with `put -r`, a link and a FIFO are never taken: status
/// counts them apart from the waiting files and its text names each.
#[test]
fn status_counts_and_names_the_entries_of_incoming_that_are_never_taken() {
    let site = site_with_history();
    fs::create_dir_all(site.incoming().join("roster-dir")).expect("mkdir");
    std::os::unix::fs::symlink("/etc/hostname", site.incoming().join("linked.json"))
        .expect("symlink");
    let fifo = std::ffi::CString::new(
        site.incoming()
            .join("pipe.ndjson")
            .to_str()
            .expect("UTF-8")
            .as_bytes(),
    )
    .expect("a path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0, "mkfifo");
    // No daemon serves the site (exit 3): status tells all the same.
    let (_, status) = status_json_code(&site);
    assert_eq!(status["incoming_never_taken"], 3, "{status}");
    assert_eq!(status["incoming_waiting"], 0, "{status}");
    let (_, text) = status_text_code(&site);
    assert_eq!(
        status_line(&text, "never taken"),
        "3 in incoming/ that are not regular files, left in place"
    );
    for named in [
        "linked.json: a symbolic link",
        "pipe.ndjson: a FIFO",
        "roster-dir: a folder",
    ] {
        assert!(
            text.lines().any(|line| line.trim() == named),
            "{named}: {text}"
        );
    }
}

#[test]
fn status_reports_every_number_an_operator_asks_for() {
    let site = site_with_history();
    // A daemon that settles nothing for an hour: what is dropped now stays waiting.
    let mut daemon = site.start_packaged(&["--settle", "1h"]);
    daemon.wait_serving(&site);
    site.drop_file("late.json", day3());
    let upload = site.incoming().join("day4.json.part");
    fs::write(&upload, "{\"events\":[").expect("write upload");
    age_file(&site.incoming().join("late.json"), Duration::from_secs(90));
    age_file(&upload, Duration::from_secs(3600));
    // The idle daemon checkpoints: the WAL is cut back to nothing.
    let wal = PathBuf::from(format!("{}-wal", site.db.display()));
    daemon.wait(WAIT, "the idle checkpoint truncates the WAL", || {
        fs::metadata(&wal).is_ok_and(|m| m.len() == 0)
    });

    let mut status = Value::Null;
    daemon.wait(WAIT, "the daemon tells of both waiting files", || {
        status = status_json(&site);
        status["oldest_waiting"][1]["state"] == "settling"
            && status["oldest_waiting"][0]["first_seen_at"].is_string()
    });
    // The age runs from when the daemon first saw a file, never from its
    // modification time (an upload may keep an hour-old one): at most the few
    // seconds this test has run.
    let age = status["oldest_waiting_age_s"].take();
    assert!(
        age.as_u64().is_some_and(|a| a < 300),
        "the .part file's hour-old mtime is no hour of waiting: {age}"
    );
    for file in status["oldest_waiting"].as_array_mut().expect("files") {
        let seen = file["first_seen_at"].take();
        assert!(seen.is_string(), "{seen}");
    }
    let last_ingest = query(&site.db, "SELECT max(ingested_at) FROM ingest_inbox");
    let late = site.incoming().join("late.json");
    let (archive_files, archive_bytes) = folder_size(&site.archive());
    assert!(archive_files >= 2, "the site has archived files");
    let database_bytes = fs::metadata(&site.db).expect("the database").len();
    let expected = json!({
        "spool": site.spool.display().to_string(),
        "db": site.db.display().to_string(),
        "db_exists": true,
        "served_by": {"pid": daemon.pid(), "since": lock_since(&site)},
        "batches": 2,
        "events": 12,
        "retracted_events": 0,
        "quarantined": 2,
        // A flight of the files has an off-blocks of days ago and no on-blocks.
        "flights_open": 1,
        "flights_negative_block": 0,
        "last_ingest_at": last_ingest[0][0],
        "incoming_waiting": 2,
        "incoming_never_taken": 0,
        "oldest_waiting_age_s": null,
        // In the order the daemon takes them: modification time, then name.
        "oldest_waiting": [
            waiting_file(&upload, "temp_name"),
            waiting_file(&late, "settling"),
        ],
        "rejected_files": 2,
        // In the order they were rejected.
        "oldest_rejected": [
            rejected_file(&site, "roster.xls", "unsupported_type"),
            rejected_file(&site, "list.json", "bad_shape"),
        ],
        "database_fault": null,
        "database_bytes": database_bytes,
        "wal_bytes": 0,
        "wal_warning": false,
        "archive_bytes": archive_bytes,
        "archive_files": archive_files,
        "settings_from": null,
        "unreadable": [],
    });
    assert_eq!(status, expected);

    let (code, text) = status_text_code(&site);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        status_line(&text, "database"),
        site.db.display().to_string()
    );
    assert_eq!(
        status_line(&text, "spool"),
        site.spool.display().to_string()
    );
    assert_eq!(
        status_line(&text, "daemon"),
        format!("serving, pid {}, since {}", daemon.pid(), lock_since(&site))
    );
    assert_eq!(status_line(&text, "batches"), "2");
    assert_eq!(status_line(&text, "events"), "12");
    assert_eq!(status_line(&text, "quarantined"), "2");
    assert_eq!(status_line(&text, "last ingest"), last_ingest[0][0]);
    assert!(
        status_line(&text, "waiting").starts_with("2 in incoming/"),
        "{text}"
    );
    assert_eq!(status_line(&text, "rejected"), "2 in rejected/");
    assert_eq!(
        lines_after(&text, "waiting", 2),
        [
            "day4.json.part: temp-named, taken once renamed",
            "late.json: settling",
        ]
    );
    assert_eq!(
        lines_after(&text, "rejected", 2),
        ["roster.xls: unsupported_type", "list.json: bad_shape"]
    );
    assert_eq!(status_line(&text, "wal"), "0 bytes");
    // The size beside the bytes in the largest unit it fills one of: never
    // "0.0 MiB" for a small archive.
    let mib = |bytes: u64| match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1048576 => format!("{bytes} bytes ({:.1} KiB)", bytes as f64 / 1024.0),
        _ => format!("{bytes} bytes ({:.1} MiB)", bytes as f64 / 1048576.0),
    };
    assert_eq!(status_line(&text, "database size"), mib(database_bytes));
    assert_eq!(
        status_line(&text, "archive"),
        format!("{} in {archive_files} files", mib(archive_bytes))
    );
    daemon.stop();

    // The site is still there, but nobody serves it: exit 3, every figure all the
    // same, and the lock file (which the daemon leaves) is not taken for a daemon.
    let (code, status) = status_json_code(&site);
    assert_eq!(code, 3, "{status}");
    assert_eq!(status["served_by"], Value::Null);
    assert_eq!(status["batches"], 2);
    assert_eq!(status["incoming_waiting"], 2);
    assert_eq!(
        status["oldest_waiting_age_s"],
        Value::Null,
        "nobody watches"
    );
    assert_eq!(
        status["oldest_waiting"],
        json!([
            waiting_file(&upload, "temp_name"),
            waiting_file(&late, "not_served"),
        ])
    );
    let (code, text) = status_text_code(&site);
    assert_eq!(code, 3);
    assert_eq!(status_line(&text, "daemon"), "not running");
    assert_eq!(status_line(&text, "events"), "12");
    assert_eq!(
        lines_after(&text, "waiting", 2),
        [
            "day4.json.part: temp-named, taken once renamed",
            "late.json: no daemon serves the spool",
        ]
    );
}

/// What `status --json` says of the file at `path` in incoming/ in `state`.
fn waiting_file(path: &Path, state: &str) -> Value {
    let meta = fs::metadata(path).expect("stat waiting file");
    json!({
        "file": path.file_name().expect("a name").to_string_lossy(),
        "state": state,
        "bytes": meta.len(),
        "modified_at": spoolite::clock::format_millis(meta.modified().expect("mtime")),
        "first_seen_at": null,
    })
}

/// What `status --json` says of `name` in rejected/: what its reason file says.
fn rejected_file(site: &Site, name: &str, reason: &str) -> Value {
    let path = site.rejected().join(format!("{name}.reason.json"));
    let text = fs::read_to_string(&path).expect("read reason file");
    let written: Value = serde_json::from_str(&text).expect("reason JSON");
    assert_eq!(written["reason"], reason, "{text}");
    json!({
        "file": name,
        "reason": reason,
        "detail": written["detail"],
        "rejected_at": written["rejected_at"],
    })
}

/// The `n` lines after the line of `text` that starts with `label`, which have
/// no label of their own, trimmed.
fn lines_after<'t>(text: &'t str, label: &str, n: usize) -> Vec<&'t str> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in status:\n{text}"));
    let after: Vec<&str> = lines[at + 1..].iter().take(n).copied().collect();
    assert!(
        after.iter().all(|line| line.starts_with("  ")),
        "{n} lines without a label after {label:?}:\n{text}"
    );
    after.iter().map(|line| line.trim()).collect()
}

#[test]
fn status_of_a_site_not_yet_started_is_an_error_and_creates_nothing() {
    let site = Site::new();
    let (code, status) = status_json_code(&site);
    assert_eq!(code, 2, "{status}");
    assert_eq!(
        status,
        json!({
            "spool": site.spool.display().to_string(),
            "db": site.db.display().to_string(),
            "db_exists": false,
            "served_by": null,
            "batches": null,
            "events": null,
            "retracted_events": null,
            "quarantined": null,
            "flights_open": null,
            "flights_negative_block": null,
            "last_ingest_at": null,
            "incoming_waiting": null,
            "incoming_never_taken": null,
            "oldest_waiting_age_s": null,
            "oldest_waiting": null,
            "rejected_files": null,
            "oldest_rejected": null,
            "database_fault": null,
            "database_bytes": null,
            "wal_bytes": null,
            "wal_warning": false,
            "archive_bytes": null,
            "archive_files": null,
            "settings_from": null,
            "unreadable": [
                format!("database {}: does not exist", site.db.display()),
                format!("spool {}: does not exist", site.spool.display()),
            ],
        })
    );
    let (code, text, stderr) = run_status(&mut site.status_command());
    assert_eq!(code, 2);
    assert_fits_80_columns(&text);
    assert!(
        status_line(&text, "database").ends_with("(does not exist)"),
        "{text}"
    );
    // No spool, no lock file: whether a daemon serves the database from another
    // spool cannot be told.
    assert_eq!(
        status_line(&text, "daemon"),
        "unknown: the spool does not exist"
    );
    assert_eq!(status_line(&text, "events"), "unknown");
    for needle in [
        site.spool.display().to_string(),
        site.db.display().to_string(),
        "start `spoolite run` once, or point --spool/--db at the site".to_owned(),
    ] {
        assert!(
            stderr.contains(&needle),
            "stderr names {needle:?}: {stderr}"
        );
    }
    // The help says so too, and promises no folder.
    let output = spoolite()
        .args(["status", "--help"])
        .output()
        .expect("status --help");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(!help.contains("are created"), "{help}");
    assert!(help.contains("Creates nothing"), "{help}");
    assert!(
        !site.db.exists() && !site.spool.exists() && !site.db.parent().expect("parent").exists(),
        "status created something"
    );
}

#[test]
fn status_names_a_missing_database_beside_an_existing_spool() {
    let site = Site::new();
    for dir in [site.incoming(), site.archive(), site.rejected()] {
        fs::create_dir_all(dir).expect("mkdir spool folder");
    }
    site.drop_file("a.json", day1());
    let (code, status) = status_json_code(&site);
    assert_eq!(code, 2, "{status}");
    assert_eq!(
        status["incoming_waiting"], 1,
        "what could be read: {status}"
    );
    assert_eq!(status["events"], Value::Null);
    assert_eq!(
        status["unreadable"],
        json!([format!("database {}: does not exist", site.db.display())])
    );
    assert!(!site.db.exists() && !site.spool.join("spoolite.lock").exists());
}

/// Holds the spool's lock as a daemon does (exclusive flock, the pid written in the
/// file) for as long as the returned file lives.
fn hold_lock(site: &Site, pid: u32) -> fs::File {
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(site.spool.join("spoolite.lock"))
        .expect("open lock file");
    file.lock().expect("flock the lock file");
    writeln!(file, "{pid}").expect("write pid");
    file
}

/// Writes the daemon's state file by hand.
fn write_state(site: &Site, state: &Value) {
    let mut text = serde_json::to_string_pretty(state).expect("state JSON");
    text.push('\n');
    fs::create_dir_all(site.spool.join(".spoolite")).expect("mkdir .spoolite");
    fs::write(site.spool.join(".spoolite").join("state.json"), text).expect("write state file");
}

/// A site whose database and folders exist (made by a daemon that has stopped).
fn stopped_site() -> Site {
    let site = Site::new();
    let daemon = site.start_packaged(&[]);
    daemon.stop();
    site
}

#[test]
fn status_tells_the_wait_from_when_the_serving_daemon_first_saw_the_file() {
    let site = stopped_site();
    let upload = site.drop_file("old.json", day1());
    // SFTP `put -p` keeps a time of last week.
    age_file(&upload, Duration::from_secs(7 * 24 * 3600));
    let pid = 4_000_000; // beyond pid_max: no live process is named
    let lock = hold_lock(&site, pid);
    let seen = spoolite::clock::format_millis(SystemTime::now() - Duration::from_secs(125));
    let fault_since = spoolite::clock::format_millis(SystemTime::now() - Duration::from_secs(60));
    let fault = json!({"since": fault_since, "error": "database is locked"});
    write_state(
        &site,
        &json!({
            "pid": pid, "since": lock_since(&site), "written_at": spoolite::clock::now_utc(),
            "files_waiting": 1, "oldest_waiting_seen_at": seen, "database_fault": fault,
        }),
    );
    let (code, status) = status_json_code(&site);
    assert_eq!(code, 1, "served, the database failing: {status}");
    assert_eq!(
        status["served_by"],
        json!({"pid": pid, "since": lock_since(&site)})
    );
    let age = status["oldest_waiting_age_s"].as_u64().expect("an age");
    assert!((125..125 + 30).contains(&age), "{status}");
    assert_eq!(status["database_fault"], fault);
    let (code, text) = status_text_code(&site);
    // Served, but the database fails: LSB's "dead or failing".
    assert_eq!(code, 1, "{text}");
    let shown_age: u64 = status_line(&text, "waiting")
        .strip_prefix("1 in incoming/ (oldest seen ")
        .and_then(|rest| rest.strip_suffix(" s ago)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!((125..125 + 30).contains(&shown_age), "{text}");
    assert!(
        status_line(&text, "database fault")
            .starts_with(&format!("failing since {fault_since}: database is locked")),
        "{text}"
    );

    // A state file left by another daemon (an earlier run) tells nothing.
    write_state(
        &site,
        &json!({
            "pid": pid + 1, "since": lock_since(&site), "written_at": spoolite::clock::now_utc(),
            "files_waiting": 1, "oldest_waiting_seen_at": seen, "database_fault": fault,
        }),
    );
    let (code, status) = status_json_code(&site);
    assert_eq!(status["oldest_waiting_age_s"], Value::Null, "{status}");
    assert_eq!(status["database_fault"], Value::Null, "{status}");
    assert_eq!(code, 0, "served, and no fault of this daemon's: {status}");

    // Nobody serves the spool: the same state file is history, not news.
    drop(lock);
    let (code, status) = status_json_code(&site);
    assert_eq!(code, 3, "{status}");
    assert_eq!(status["served_by"], Value::Null);
    assert_eq!(status["oldest_waiting_age_s"], Value::Null);
    assert_eq!(status["database_fault"], Value::Null);
}

#[test]
fn status_run_by_an_analyst_who_cannot_read_incoming_prints_the_database() {
    assert_root();
    let site = analyst_site_with_day1();
    site.drop_file("waiting.json", day2());
    // The spool root is the daemon's (0750 under the unit's umask); let the analyst
    // through it, not into incoming/ or rejected/.
    fs::set_permissions(&site.spool, fs::Permissions::from_mode(0o755)).expect("chmod spool");
    for dir in [site.incoming(), site.rejected()] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let mut command = site.status_command_as(ANALYST, ANALYST);
    command.arg("--json");
    let (code, stdout, stderr) = run_status(&mut command);
    assert_eq!(code, 2, "{stdout}{stderr}");
    let status: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(status["batches"], 1, "{status}");
    assert_eq!(status["events"], 6);
    assert_eq!(status["quarantined"], 0);
    assert!(status["last_ingest_at"].is_string());
    assert_eq!(status["incoming_waiting"], Value::Null);
    assert_eq!(status["rejected_files"], Value::Null);
    assert_eq!(status["served_by"], Value::Null, "nobody serves it");
    assert_eq!(
        status["unreadable"],
        json!([
            "incoming/: permission denied",
            "rejected/: permission denied",
            // The unit's umask leaves archive/ the daemon's as well.
            "archive/: permission denied",
            // The packaged lock is the daemon's, 0640: who serves the spool is not
            // the analyst's to see.
            "spoolite.lock: permission denied"
        ])
    );
    assert!(stderr.contains("incoming/: permission denied"), "{stderr}");
}

// ---------------------------------------------------------------------------------
// 4. The metrics file

/// One sample of a text exposition.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A metric family: its type and its samples in file order.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: Option<String>,
    samples: Vec<Sample>,
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `{a="x",b="y"}` (the braces taken off) with the format's escapes.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("label without =\": {text:?}"));
        assert!(is_metric_name(name), "label name {name:?}");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => panic!("bad escape {other:?} in {text:?}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value in {text:?}"),
            }
        };
        assert!(
            labels.insert(name.to_owned(), value).is_none(),
            "label {name} twice in {text:?}"
        );
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    labels
}

fn parse_value(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => text
            .parse()
            .unwrap_or_else(|e| panic!("sample value {text:?}: {e}")),
    }
}

/// Parses a whole Prometheus text exposition, checking it as node_exporter's
/// textfile collector would: every sample under a `# TYPE` declared before it,
/// names and label sets unique, values numbers, the text ending in a newline.
fn parse_exposition(text: &str) -> BTreeMap<String, Family> {
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut seen: BTreeSet<(String, BTreeMap<String, String>)> = BTreeSet::new();
    for line in text.lines() {
        assert!(!line.trim().is_empty(), "blank line in the exposition");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let family = families.entry(name.to_owned()).or_default();
            assert!(family.help.is_none(), "HELP of {name} twice");
            family.help = Some(help.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("TYPE without a type: {line:?}"));
            assert!(is_metric_name(name), "family name {name:?}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "type {kind:?}"
            );
            let family = families.entry(name.to_owned()).or_default();
            assert!(family.kind.is_empty(), "TYPE of {name} twice");
            assert!(
                family.samples.is_empty(),
                "TYPE of {name} after its samples"
            );
            family.kind = kind.to_owned();
            current = Some(name.to_owned());
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment line {line:?}");
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("sample without a value: {line:?}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (
                name,
                parse_labels(
                    labels
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("unclosed labels: {line:?}")),
                ),
            ),
            None => (series, BTreeMap::new()),
        };
        assert!(is_metric_name(name), "sample name {name:?}");
        let family_name = current
            .clone()
            .unwrap_or_else(|| panic!("sample before any TYPE: {line:?}"));
        let family = families.get_mut(&family_name).expect("current family");
        let suffixes: &[&str] = match family.kind.as_str() {
            "histogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["", "_sum", "_count"],
            _ => &[""],
        };
        assert!(
            suffixes
                .iter()
                .any(|suffix| name == format!("{family_name}{suffix}")),
            "sample {name} does not belong to the {} family {family_name}",
            family.kind
        );
        assert!(
            seen.insert((name.to_owned(), labels.clone())),
            "series {series} twice"
        );
        let value = parse_value(value);
        if family.kind == "counter" {
            assert!(value >= 0.0, "counter {series} is {value}");
        }
        family.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    for (name, family) in &families {
        assert!(!family.kind.is_empty(), "{name} has HELP but no TYPE");
        assert!(!family.samples.is_empty(), "{name} has no samples");
        if family.kind == "histogram" {
            check_histogram(name, family);
        }
    }
    families
}

/// Buckets ascending by `le`, counts cumulative, `+Inf` equal to `_count`.
fn check_histogram(name: &str, family: &Family) {
    let buckets: Vec<(f64, f64)> = family
        .samples
        .iter()
        .filter(|s| s.name.ends_with("_bucket"))
        .map(|s| {
            let le = s
                .labels
                .get("le")
                .unwrap_or_else(|| panic!("{name} bucket without le"));
            (parse_value(le), s.value)
        })
        .collect();
    assert!(!buckets.is_empty(), "{name} has no buckets");
    for pair in buckets.windows(2) {
        assert!(
            pair[0].0 < pair[1].0,
            "{name}: le not ascending: {buckets:?}"
        );
        assert!(
            pair[0].1 <= pair[1].1,
            "{name}: counts not cumulative: {buckets:?}"
        );
    }
    let (last_le, last_count) = *buckets.last().expect("a bucket");
    assert_eq!(last_le, f64::INFINITY, "{name}: the last bucket is +Inf");
    let single = |suffix: &str| -> f64 {
        let found: Vec<&Sample> = family
            .samples
            .iter()
            .filter(|s| s.name == format!("{name}{suffix}"))
            .collect();
        assert_eq!(found.len(), 1, "{name}{suffix}");
        found[0].value
    };
    assert_eq!(last_count, single("_count"), "{name}: +Inf bucket = _count");
    assert!(single("_sum") >= 0.0, "{name}_sum");
}

/// The value of the sample `name{labels}`.
fn sample(families: &BTreeMap<String, Family>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    families
        .values()
        .flat_map(|family| &family.samples)
        .find(|s| s.name == name && s.labels == labels)
        .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
        .value
}

/// A flight without on-blocks for two days and one that lands before it leaves:
/// `status --json`, its text and the metrics file count them.
#[test]
fn flights_that_can_make_a_crew_figure_wrong_are_counted_in_status_and_metrics() {
    let site = Site::new();
    let metrics = site.dir.path().join("textfile").join("spoolite.prom");
    fs::create_dir_all(metrics.parent().expect("parent")).expect("mkdir textfile");
    let mut daemon = site.start_packaged(&[
        "--metrics-file",
        metrics.to_str().expect("UTF-8 path"),
        "--rescan",
        "1s",
    ]);
    daemon.wait(WAIT, "the first metrics file", || metrics.exists());
    let two_days_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(48);
    let at = |ts: jiff::Timestamp| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let events = [
        event(
            "OPEN-1",
            "off_blocks",
            &at(two_days_ago),
            Some(1),
            r#"{"crew":["C1"]}"#,
        ),
        event(
            "BACK-1",
            "off_blocks",
            "2026-11-30T10:00:00Z",
            Some(1),
            r#"{"crew":["C1"]}"#,
        ),
        event("BACK-1", "on_blocks", "2026-11-29T12:00:00Z", Some(1), "{}"),
        event(
            "FINE-1",
            "off_blocks",
            "2026-11-30T10:00:00Z",
            Some(1),
            r#"{"crew":["C2"]}"#,
        ),
        event("FINE-1", "on_blocks", "2026-11-30T12:00:00Z", Some(1), "{}"),
    ];
    site.deliver(&mut daemon, "quality.json", json_batch(&events));
    let mut families = BTreeMap::new();
    daemon.wait(WAIT, "the metrics count the two flights", || {
        families = parse_exposition(&fs::read_to_string(&metrics).unwrap_or_default());
        families.contains_key("spoolite_flights_open")
            && sample(&families, "spoolite_flights_open", &[]) == 1.0
    });
    assert_eq!(
        sample(&families, "spoolite_flights_negative_block", &[]),
        1.0
    );
    let status = status_json(&site);
    assert_eq!(
        (&status["flights_open"], &status["flights_negative_block"]),
        (&json!(1), &json!(1))
    );
    let (code, text) = status_text_code(&site);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        status_line(&text, "flights"),
        "1 without on-blocks for over a day, 1 landed before leaving"
    );
    daemon.stop();
}

#[test]
fn the_metrics_file_counts_files_and_events_by_outcome() {
    let started = unix_now_s();
    let site = Site::new();
    let metrics = site.dir.path().join("textfile").join("spoolite.prom");
    fs::create_dir_all(metrics.parent().expect("parent")).expect("mkdir textfile");
    let mut daemon =
        site.start_packaged(&["--metrics-file", metrics.to_str().expect("UTF-8 path")]);
    daemon.wait(WAIT, "the first metrics file", || metrics.exists());
    let first = parse_exposition(&fs::read_to_string(&metrics).expect("read metrics"));
    assert_eq!(
        sample(&first, "spoolite_files_total", &[("outcome", "processed")]),
        0.0
    );
    assert_eq!(
        sample(&first, "spoolite_last_success_timestamp_seconds", &[]),
        0.0
    );

    site.deliver(&mut daemon, "day1.json", day1());
    site.deliver(&mut daemon, "day1 (resent).json", day1());
    site.deliver(&mut daemon, "day2.ndjson", day2());
    site.deliver(&mut daemon, "day3.ndjson", day3());
    site.deliver(&mut daemon, "roster.xls", "flight,kind\n");
    // An upload in progress waits and is counted. Its modification time says an
    // hour ago (an SFTP `put -p` keeps the source's), but the daemon has seen it
    // only now: its waiting age runs from then.
    let upload_seen = unix_now_s();
    let upload = site.incoming().join("day4.json.part");
    fs::write(&upload, "{\"events\":[").expect("write upload");
    age_file(&upload, Duration::from_secs(3600));

    let mut families = BTreeMap::new();
    daemon.wait(
        WAIT,
        "the metrics show every file and the waiting upload",
        || {
            let text = fs::read_to_string(&metrics).unwrap_or_default();
            families = parse_exposition(&text);
            sample(
                &families,
                "spoolite_files_total",
                &[("outcome", "rejected")],
            ) == 1.0
                && sample(&families, "spoolite_files_waiting", &[]) == 1.0
        },
    );
    let kinds: BTreeMap<&str, &str> = families
        .iter()
        .map(|(name, family)| (name.as_str(), family.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("spoolite_archive_bytes", "gauge"),
            ("spoolite_database_bytes", "gauge"),
            ("spoolite_database_failing_since_timestamp_seconds", "gauge"),
            ("spoolite_database_unreachable", "gauge"),
            ("spoolite_database_up", "gauge"),
            ("spoolite_events_total", "counter"),
            ("spoolite_files_changed_after_archive_total", "counter"),
            ("spoolite_files_total", "counter"),
            ("spoolite_files_waiting", "gauge"),
            ("spoolite_flights_negative_block", "gauge"),
            ("spoolite_flights_open", "gauge"),
            ("spoolite_ingest_duration_seconds", "histogram"),
            ("spoolite_last_success_timestamp_seconds", "gauge"),
            ("spoolite_oldest_waiting_age_seconds", "gauge"),
            ("spoolite_scans_total", "counter"),
            ("spoolite_wal_bytes", "gauge"),
        ])
    );
    assert_eq!(
        sample(&families, "spoolite_files_changed_after_archive_total", &[]),
        0.0
    );
    for (outcome, count) in [
        ("processed", 3.0),
        ("skipped_duplicate", 1.0),
        ("rejected", 1.0),
    ] {
        assert_eq!(
            sample(&families, "spoolite_files_total", &[("outcome", outcome)]),
            count,
            "files {outcome}"
        );
    }
    for (outcome, count) in [
        ("inserted", 12.0),
        ("updated", 1.0),
        ("unchanged", 1.0),
        ("stale", 1.0),
        ("conflict", 1.0),
        ("invalid", 1.0),
    ] {
        assert_eq!(
            sample(&families, "spoolite_events_total", &[("outcome", outcome)]),
            count,
            "events {outcome}"
        );
    }
    assert_eq!(
        families["spoolite_files_total"].samples.len(),
        3,
        "one sample per file outcome"
    );
    assert_eq!(
        families["spoolite_events_total"].samples.len(),
        6,
        "one sample per event outcome"
    );
    let last_success = sample(&families, "spoolite_last_success_timestamp_seconds", &[]);
    assert!(
        (started..=unix_now_s()).contains(&last_success),
        "last success {last_success} within the test ({started}..)"
    );
    let oldest = sample(&families, "spoolite_oldest_waiting_age_seconds", &[]);
    assert!(
        (0.0..=unix_now_s() - upload_seen + 1.0).contains(&oldest),
        "oldest waiting age {oldest}: counted from the modification time, not from first sight"
    );
    // Every file taken is timed, the rejected one too.
    assert_eq!(
        sample(&families, "spoolite_ingest_duration_seconds_count", &[]),
        5.0
    );
    let sum = sample(&families, "spoolite_ingest_duration_seconds_sum", &[]);
    assert!(sum > 0.0 && sum < 60.0, "duration sum {sum}");
    // The sizes are the files': once the idle daemon has checkpointed and
    // published, the three equal what a stat of each finds.
    let wal = PathBuf::from(format!("{}-wal", site.db.display()));
    let mut seen = (0.0, 0.0, 0.0);
    let mut on_disk = (0.0, 0.0, 0.0);
    daemon.wait(
        WAIT,
        "the sizes in the metrics are the files' sizes",
        || {
            let families = parse_exposition(&fs::read_to_string(&metrics).unwrap_or_default());
            seen = (
                sample(&families, "spoolite_database_bytes", &[]),
                sample(&families, "spoolite_wal_bytes", &[]),
                sample(&families, "spoolite_archive_bytes", &[]),
            );
            let len = |path: &Path| fs::metadata(path).map_or(0, |m| m.len()) as f64;
            on_disk = (
                len(&site.db),
                len(&wal),
                folder_size(&site.archive()).1 as f64,
            );
            seen == on_disk
        },
    );
    assert!(seen.0 > 0.0 && seen.2 > 0.0, "{seen:?}");
    assert_eq!(
        seen.2,
        [day1(), day1(), day2(), day3()]
            .iter()
            .map(|content| content.len() as f64)
            .sum::<f64>(),
        "archive/ holds the four files taken"
    );
    daemon.stop();
    // Written through a temporary file renamed over it (a dot name node_exporter
    // ignores, which may be seen while the daemon runs); none is left behind.
    let leftovers: Vec<String> = fs::read_dir(metrics.parent().expect("parent"))
        .expect("list textfile folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name != "spoolite.prom")
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    parse_exposition(&fs::read_to_string(&metrics).expect("read metrics"));
}

// ---------------------------------------------------------------------------------
// 5. An analyst on a read-only account

/// A Python sqlite3 session running as the analyst (uid and gid 65534), opened with
/// `file:...?mode=ro` exactly as the README tells analysts. Each `ask` sends one SQL
/// statement and reads back `{"rows": [...]}` or `{"error": "..."}`.
struct Analyst {
    child: Child,
    stdin: ChildStdin,
    answers: mpsc::Receiver<String>,
}

const ANALYST_SCRIPT: &str = r#"
import json, sqlite3, sys, urllib.parse
uri = "file:" + urllib.parse.quote(sys.argv[1]) + "?mode=ro"
conn = sqlite3.connect(uri, uri=True, isolation_level=None)
for line in sys.stdin:
    try:
        answer = {"rows": [list(row) for row in conn.execute(line)]}
    except sqlite3.Error as error:
        answer = {"error": str(error)}
    print(json.dumps(answer), flush=True)
"#;

/// The system's Python: one the analyst's uid can run (not one under /root).
fn system_python() -> &'static str {
    let python = "/usr/bin/python3";
    assert!(
        Path::new(python).exists(),
        "{python} is missing: the read-only analyst test runs Python's sqlite3 as uid \
         {ANALYST}; install python3"
    );
    python
}

impl Analyst {
    fn open(db: &Path) -> Analyst {
        let mut child = Command::new(system_python())
            .arg("-c")
            .arg(ANALYST_SCRIPT)
            .arg(db)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
            .uid(ANALYST)
            .gid(ANALYST)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python3 as the analyst");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Analyst {
            child,
            stdin,
            answers,
        }
    }

    fn ask(&mut self, sql: &str) -> Value {
        writeln!(self.stdin, "{sql}").expect("send SQL to the analyst");
        self.stdin.flush().expect("flush");
        let line = self
            .answers
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("no answer to {sql:?} within {WAIT:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("answer {line:?}: {e}"))
    }

    /// The rows of a query that must succeed.
    fn rows(&mut self, sql: &str) -> Value {
        let answer = self.ask(sql);
        assert!(answer.get("error").is_none(), "{sql}: {answer}");
        answer["rows"].clone()
    }

    fn count(&mut self, table: &str) -> u64 {
        self.rows(&format!("SELECT count(*) FROM {table}"))[0][0]
            .as_u64()
            .expect("a count")
    }
}

impl Drop for Analyst {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A site in the packaged layout, where a daemon has taken day 1 and stopped: the
/// state folder belongs to the daemon's user with the analysts' group, setgid, group
/// may read and list but not write, and the analyst can reach it.
fn analyst_site_with_day1() -> Site {
    let site = Site::new();
    let state = site.db.parent().expect("state folder").to_owned();
    fs::create_dir_all(&state).expect("mkdir state");
    std::os::unix::fs::chown(&state, Some(0), Some(ANALYST)).expect("chown state");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o2750)).expect("chmod state");
    let_others_traverse(site.dir.path());
    let mut daemon = site.start_packaged(&[]);
    site.deliver(&mut daemon, "day1.json", day1());
    daemon.stop();
    site
}

#[test]
fn an_analyst_who_cannot_write_the_folder_reads_across_a_restart() {
    assert_root();
    let site = analyst_site_with_day1();

    // -wal and -shm persist, with the database's owner, group and mode.
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", site.db.display()));
        let meta = fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{} after the daemon stopped: {e}", path.display()));
        assert_eq!(
            (meta.mode() & 0o7777, meta.gid()),
            (0o640, ANALYST),
            "{}: mode and group",
            path.display()
        );
    }

    let mut analyst = Analyst::open(&site.db);
    assert_eq!(analyst.count("duty_event"), 6);
    assert_eq!(analyst.count("ingest_inbox"), 1);
    assert_eq!(analyst.count("flight_times"), 2);
    let refused = analyst.ask("CREATE TABLE notes (text)");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("readonly")),
        "the analyst cannot write: {refused}"
    );

    // The daemon starts again while the analyst is connected.
    let mut daemon = site.start_packaged(&[]);
    assert_eq!(
        analyst.rows("BEGIN"),
        json!([]),
        "a read transaction starts"
    );
    assert_eq!(analyst.count("duty_event"), 6);
    // A long read does not hold back ingestion, and keeps its snapshot.
    site.deliver(&mut daemon, "day2.ndjson", day2());
    daemon.wait(WAIT, "day 2 is committed", || {
        query(&site.db, "SELECT count(*) FROM ingest_inbox") == [["2"]]
    });
    assert_eq!(analyst.count("duty_event"), 6, "the snapshot of the read");
    analyst.rows("COMMIT");
    assert_eq!(analyst.count("duty_event"), 12, "a new read sees day 2");
    assert_eq!(analyst.count("ingest_inbox"), 2);
    assert_eq!(
        analyst.rows("SELECT flight_id, block_minutes FROM flight_times ORDER BY flight_id"),
        json!([
            ["BA0117-20261129", 702.21],
            ["EZY8421-20270102", 168.5],
            ["LH400-20261130", null]
        ])
    );
    daemon.stop();

    // A new analyst session after the daemon is gone again.
    drop(analyst);
    let mut analyst = Analyst::open(&site.db);
    assert_eq!(analyst.count("duty_event"), 12);
    assert_eq!(analyst.count("quarantine"), 2);
}

// ---------------------------------------------------------------------------------
// 6. Re-drops leave the analyst views unchanged

#[test]
fn re_drops_leave_the_views_unchanged() {
    let site = Site::new();
    let mut daemon = site.start_packaged(&[]);
    site.deliver(&mut daemon, "day1.json", day1());
    site.deliver(&mut daemon, "day2.ndjson", day2());

    assert_eq!(dump(&site.db, "flight_times", &[]), expected_flight_times());
    assert_eq!(
        dump(&site.db, "batch_summary", &batch_summary_but_time()),
        expected_batch_summary()
    );
    assert_eq!(
        dump(&site.db, "batch_summary", &["ingested_at"]),
        dump(&site.db, "ingest_inbox", &["ingested_at"]),
    );
    let before = views(&site.db);

    // The same bytes again, under the same names and others, through the daemon.
    site.deliver(&mut daemon, "day1.json", day1());
    site.deliver(&mut daemon, "day2.ndjson", day2());
    site.deliver(&mut daemon, "day1 (copy).JSON", day1());
    site.deliver(&mut daemon, "DAY2.jsonl", day2());
    assert_eq!(
        crate::support::names(&site.archive()),
        [
            "DAY2.jsonl",
            "day1 (copy).JSON",
            "day1.1.json",
            "day1.json",
            "day2.1.ndjson",
            "day2.ndjson"
        ]
    );
    assert_eq!(views(&site.db), before, "after re-drops through the daemon");
    daemon.stop();

    // And through `spoolite ingest`.
    let again = site.dir.path().join("again.json");
    fs::write(&again, day1()).expect("write again.json");
    let (code, lines) = crate::support::ingest_json(&site.db, &[&again]);
    assert_eq!(
        (code, lines[0]["outcome"].as_str()),
        (0, Some("skipped_duplicate"))
    );
    assert_eq!(views(&site.db), before, "after a re-drop through ingest");

    // The same events in other bytes are a new batch: flight_times does not move;
    // batch_summary gains one row that changed nothing and is the last writer of
    // nothing (five events unchanged, the landing stale since day 2 revised it).
    let pretty = serde_json::to_string_pretty(
        &serde_json::from_str::<Value>(&day1()).expect("day1 is JSON"),
    )
    .expect("pretty JSON");
    let mut daemon = site.start_packaged(&[]);
    site.deliver(&mut daemon, "day1-resent.json", &pretty);
    assert_eq!(dump(&site.db, "flight_times", &[]), before[0]);
    let mut expected = expected_batch_summary();
    expected.push(format!(
        "{}|OPS-2026-11-29|day1-resent.json|6|0|0|5|1|0|0|0|0",
        sha256_hex(&pretty)
    ));
    expected.sort();
    assert_eq!(
        dump(&site.db, "batch_summary", &batch_summary_but_time()),
        expected
    );
    daemon.stop();
}

// ---------------------------------------------------------------------------------
// 7. ingest --dry-run and key

/// The bytes of the database and its WAL.
fn database_bytes(db: &Path) -> [Vec<u8>; 2] {
    [
        fs::read(db).expect("read database"),
        fs::read(format!("{}-wal", db.display())).unwrap_or_default(),
    ]
}

#[test]
fn a_dry_run_classifies_against_the_database_and_writes_nothing() {
    let site = Site::new();
    fs::create_dir_all(site.db.parent().expect("parent")).expect("mkdir state");
    let day1_path = site.dir.path().join("day1.json");
    let day2_path = site.dir.path().join("day2.ndjson");
    fs::write(&day1_path, day1()).expect("write day1");
    fs::write(&day2_path, day2()).expect("write day2");
    let (code, _) = crate::support::ingest_json(&site.db, &[&day1_path]);
    assert_eq!(code, 0);

    let tables = crate::support::snapshot(&site.db);
    let bytes = database_bytes(&site.db);
    let output = ingest_command(&site.db)
        .args(["--json", "--dry-run"])
        .arg(&day1_path)
        .arg(&day2_path)
        .output()
        .expect("run ingest --dry-run");
    assert_eq!(output.status.code(), Some(0));
    let mut lines = parse_lines(&output);
    for line in &mut lines {
        assert!(line["duration_ms"].is_u64(), "{line}");
        line.as_object_mut()
            .expect("an object")
            .remove("duration_ms");
    }
    assert_eq!(
        lines,
        [
            json!({"file": "day1.json", "outcome": "skipped_duplicate",
                   "sha256": sha256_hex(day1()), "dry_run": true}),
            json!({"file": "day2.ndjson", "outcome": "processed", "sha256": sha256_hex(day2()),
                   "events_total": 9, "inserted": 6, "updated": 1, "unchanged": 0,
                   "stale": 0, "conflicts": 1, "invalid": 1, "dry_run": true}),
        ]
    );
    assert_eq!(crate::support::snapshot(&site.db), tables, "the tables");
    assert_eq!(
        database_bytes(&site.db),
        bytes,
        "the database and WAL bytes"
    );

    // The text form says so too.
    let output = ingest_command(&site.db)
        .arg("--dry-run")
        .arg(&day2_path)
        .output()
        .expect("run ingest --dry-run");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("processed day2.ndjson ") && text.contains("(dry run: nothing written)"),
        "{text}"
    );
    assert_eq!(database_bytes(&site.db), bytes);
}

/// Runs `command` (a `spoolite ingest --db DB`) with `--json --dry-run BATCH`,
/// which must exit 0 (`what` heads the message with its stderr) and process the
/// file; returns its line.
fn processed_dry_run(command: &mut Command, batch: &Path, what: &str) -> serde_json::Value {
    let output = command
        .args(["--json", "--dry-run"])
        .arg(batch)
        .output()
        .expect("run ingest --dry-run");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{what}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = parse_lines(&output);
    assert_eq!(lines[0]["outcome"], "processed");
    lines.swap_remove(0)
}

#[test]
fn a_dry_run_against_a_missing_database_creates_nothing() {
    let site = Site::new();
    let batch = site.dir.path().join("day1.json");
    fs::write(&batch, day1()).expect("write day1");
    let line = processed_dry_run(&mut ingest_command(&site.db), &batch, "");
    assert_eq!(line["inserted"], 6);
    let state = site.db.parent().expect("state folder");
    assert!(
        !state.exists(),
        "a dry run wrote {:?} into {}",
        crate::support::names(state),
        state.display()
    );
}

#[test]
fn a_dry_run_needs_no_write_access_to_the_database() {
    assert_root();
    let site = analyst_site_with_day1();

    // The analyst tries tomorrow's file before it is sent.
    let batch = site.dir.path().join("day2.ndjson");
    fs::write(&batch, day2()).expect("write day2");
    let tables = crate::support::snapshot(&site.db);
    let mut command = spoolite_as(ANALYST, ANALYST);
    command
        .arg("ingest")
        .arg("--db")
        .arg(&site.db)
        .env_clear()
        .current_dir("/");
    let line = processed_dry_run(
        &mut command,
        &batch,
        "a dry run by an account that may only read the database: ",
    );
    assert_eq!(line["events_total"], 9);
    assert_eq!(crate::support::snapshot(&site.db), tables);
}

#[test]
fn key_prints_what_an_analyst_looks_a_row_up_by() {
    let site = Site::new();
    fs::create_dir_all(site.db.parent().expect("parent")).expect("mkdir state");
    let batch = site.dir.path().join("day2.ndjson");
    fs::write(&batch, day2()).expect("write day2");
    assert_eq!(crate::support::ingest_json(&site.db, &[&batch]).0, 0);

    let output = spoolite()
        .args([
            "key",
            " EZY8421-20270102 ",
            "TakeOff",
            "2027-01-02T01:05:00.123456789+01:00",
        ])
        .output()
        .expect("run key");
    assert_eq!(output.status.code(), Some(0));
    let key = sha256_hex("EZY8421-20270102|takeoff|2027-01-02T00:05:00.123456789Z");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "flight_id        EZY8421-20270102\nevent_kind       takeoff\n\
             instant_utc      2027-01-02T00:05:00.123456789Z\nidempotency_key  {key}\n"
        )
    );
    assert_eq!(
        query(
            &site.db,
            &format!(
                "SELECT flight_id, instant_utc FROM duty_event WHERE idempotency_key = '{key}'"
            )
        ),
        [["EZY8421-20270102", "2027-01-02T00:05:00.123456789Z"]]
    );
    // The README's look-up by key, on either view, goes through the key's index.
    for view in ["duty_event", "duty_event_all"] {
        let by_key = format!("SELECT * FROM {view} WHERE idempotency_key = '{key}'");
        let plan = query(&site.db, &format!("EXPLAIN QUERY PLAN {by_key}"));
        let steps: Vec<&str> = plan.iter().map(|row| row[3].as_str()).collect();
        assert_eq!(
            steps[0], "SEARCH e USING INDEX spoolite_event_key (<expr>=?)",
            "{steps:?}"
        );
        assert!(
            steps
                .iter()
                .all(|step| step.starts_with("SEARCH") || step.starts_with("CORRELATED")),
            "{steps:?}"
        );
        assert_eq!(query(&site.db, &by_key).len(), 1, "{view}");
        // The key in upper case finds nothing, as the README says; lower() mends it.
        let upper = key.to_ascii_uppercase();
        let by_upper = format!("SELECT * FROM {view} WHERE idempotency_key = '{upper}'");
        assert!(query(&site.db, &by_upper).is_empty());
        let mended = format!("SELECT * FROM {view} WHERE idempotency_key = lower('{upper}')");
        assert_eq!(query(&site.db, &mended), query(&site.db, &by_key));
    }

    let output = spoolite()
        .args(["key", "EZY8421-20270102", "takeoff", "2027-01-02T01:05:00"])
        .output()
        .expect("run key");
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad_instant"), "{stderr}");
}

// ---------------------------------------------------------------------------------
// 8. Settings from the environment and the defaults file, logs, ingest's lines

/// `spoolite status --spool SPOOL --db DB` of `site` with the variable `name`.
fn status_with(site: &Site, name: &str, value: &str) -> (i32, String, String) {
    run_status(site.status_command().env(name, value))
}

#[test]
fn boolean_options_from_the_environment_take_the_usual_words() {
    let site = stopped_site();
    for word in ["1", "true", "yes", "on", "TRUE", "Yes"] {
        let (code, stdout, stderr) = status_with(&site, "SPOOLITE_JSON", word);
        assert_eq!(code, 3, "SPOOLITE_JSON={word}: {stderr}");
        assert!(stdout.starts_with('{'), "SPOOLITE_JSON={word}: {stdout}");
    }
    // An empty value is no value: the default, text.
    for word in ["0", "false", "no", "off", ""] {
        let (code, stdout, stderr) = status_with(&site, "SPOOLITE_JSON", word);
        assert_eq!(code, 3, "SPOOLITE_JSON={word}: {stderr}");
        assert!(
            stdout.starts_with("database"),
            "SPOOLITE_JSON={word}: {stdout}"
        );
    }
    let (code, stdout, stderr) = status_with(&site, "SPOOLITE_JSON", "maybe");
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains(
            "invalid value 'maybe' for '--json' (from the environment variable SPOOLITE_JSON)"
        ),
        "{stderr}"
    );
    // The same words for ingest's flags.
    let batch = site.dir.path().join("probe.json");
    fs::write(&batch, day1()).expect("write batch");
    let before = crate::support::snapshot(&site.db);
    let output = ingest_command(&site.db)
        .arg(&batch)
        .env("SPOOLITE_JSON", "on")
        .env("SPOOLITE_DRY_RUN", "1")
        .output()
        .expect("run ingest");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = parse_lines(&output);
    assert_eq!(lines[0]["dry_run"], true, "{lines:?}");
    assert_eq!(crate::support::snapshot(&site.db), before);
}

/// Runs `command`, which must end as a usage error (exit 2); returns its stderr.
fn usage_error(command: &mut Command) -> String {
    let output = command.output().expect("run spoolite");
    assert_eq!(output.status.code(), Some(2));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_invalid_value_from_the_environment_names_its_variable() {
    let site = Site::new();
    let stderr = usage_error(site.run_command().env("SPOOLITE_SETTLE", "5"));
    assert!(
        stderr.contains(
            "invalid value '5' for '--settle <DURATION>' (from the environment variable \
             SPOOLITE_SETTLE): \"5\" needs a unit: ms, s, m, h or d"
        ),
        "{stderr}"
    );
    assert!(!site.spool.exists() && !site.db.exists());
    // On the command line the option speaks for itself, whatever the environment.
    let stderr = usage_error(
        site.run_command()
            .args(["--settle", "5"])
            .env("SPOOLITE_SETTLE", "5"),
    );
    assert!(
        stderr.contains("invalid value '5' for '--settle <DURATION>': \"5\" needs a unit"),
        "{stderr}"
    );
    let stderr = usage_error(
        ingest_command(&site.db)
            .arg(site.dir.path().join("none.json"))
            .env("SPOOLITE_FILE_BYTES_MAX", "lots"),
    );
    assert!(
        stderr.contains("(from the environment variable SPOOLITE_FILE_BYTES_MAX)"),
        "{stderr}"
    );
    // An empty value means the default.
    let mut daemon = site.spawn(site.run_command().env("SPOOLITE_SETTLE", ""));
    daemon.wait_serving(&site);
    daemon.wait(WAIT, "the start-up line", || {
        daemon_log_has(&site, "(settle 2s,")
    });
    daemon.stop();
}

fn daemon_log_has(site: &Site, needle: &str) -> bool {
    site.log().contains(needle)
}

/// The packaged environment file with its paths moved to `site`'s, written into the
/// site's folder as `name`.
fn packaged_defaults(site: &Site, name: &str) -> PathBuf {
    let packaged =
        fs::read_to_string(repo().join("packaging/spoolite.env")).expect("read spoolite.env");
    let text = packaged
        .replace(
            "SPOOLITE_SPOOL=/var/spool/spoolite\n",
            &format!("SPOOLITE_SPOOL={}\n", site.spool.display()),
        )
        .replace(
            "SPOOLITE_DB=/var/lib/spoolite/spoolite.db\n",
            &format!("SPOOLITE_DB=\"{}\"\n", site.db.display()),
        );
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(site.dir.path().to_str().expect("UTF-8")))
            .count(),
        2,
        "the packaged file sets both paths"
    );
    let path = site.dir.path().join(name);
    fs::write(&path, text).expect("write defaults file");
    path
}

#[test]
fn one_shot_commands_act_on_the_site_of_the_packaged_defaults_file() {
    let site = Site::new();
    let defaults = packaged_defaults(&site, "defaults");
    let mut daemon = site.start_packaged(&[]);
    daemon.wait_serving(&site);
    // An operator somewhere else, no flags.
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let bare = |subcommand: &str| {
        let mut command = spoolite();
        command
            .arg(subcommand)
            .env("SPOOLITE_DEFAULTS_FILE", &defaults)
            .current_dir(elsewhere.path());
        command
    };
    let (code, stdout, stderr) = run_status(bare("status").arg("--json"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let status: Value = serde_json::from_str(&stdout).expect("status JSON");
    assert_eq!(status["spool"], site.spool.display().to_string());
    assert_eq!(status["db"], site.db.display().to_string());
    assert_eq!(
        status["settings_from"],
        json!({"file": defaults.display().to_string(),
               "variables": ["SPOOLITE_SPOOL", "SPOOLITE_DB"]})
    );
    let (code, text, _) = run_status(&mut bare("status"));
    assert_eq!(code, 0);
    assert_fits_80_columns(&text);
    assert_eq!(
        status_line(&text, "settings"),
        format!("SPOOLITE_SPOOL, SPOOLITE_DB from {}", defaults.display())
    );
    let batch = elsewhere.path().join("backfill.json");
    fs::write(&batch, day1()).expect("write batch");
    let output = bare("ingest")
        .arg("--json")
        .arg(&batch)
        .output()
        .expect("run ingest");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        query(&site.db, "SELECT file_name FROM ingest_inbox"),
        [["backfill.json"]]
    );
    assert_eq!(
        crate::support::names(elsewhere.path()),
        ["backfill.json"],
        "nothing made where the operator stands"
    );

    // The environment and the command line win over the file.
    let other = site.dir.path().join("other.db");
    let (code, stdout, _) = run_status(bare("status").arg("--json").env("SPOOLITE_DB", &other));
    assert_eq!(code, 2);
    let status: Value = serde_json::from_str(&stdout).expect("status JSON");
    assert_eq!(status["db"], other.display().to_string());
    assert_eq!(
        status["settings_from"]["variables"],
        json!(["SPOOLITE_SPOOL"])
    );
    let (code, stdout, _) = run_status(bare("status").arg("--json").arg("--db").arg(&other));
    assert_eq!(code, 2);
    let status: Value = serde_json::from_str(&stdout).expect("status JSON");
    assert_eq!(status["db"], other.display().to_string());

    // A bad value in the file is named with the file, and every other line it
    // cannot use is told at the same time, not after the value is mended.
    let mut bad = fs::read_to_string(&defaults).expect("read defaults");
    bad.push_str("SPOOLITE_FILE_BYTES_MAX=lots\nSPOOLITE_SETTEL=2s\n");
    fs::write(&defaults, bad).expect("write defaults");
    let output = bare("ingest").arg(&batch).output().expect("run ingest");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "(from SPOOLITE_FILE_BYTES_MAX in {})",
            defaults.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("SPOOLITE_SETTEL is no setting of spoolite"),
        "{stderr}"
    );
    daemon.stop();

    // `run` reads a defaults file only when SPOOLITE_DEFAULTS_FILE names one (its
    // unit hands it /etc/default/spoolite), and then as every command does: a bad
    // value is named with the file, before anything is made.
    let second = Site::new();
    fs::write(&defaults, "SPOOLITE_SETTLE=5\n").expect("write defaults");
    let output = second
        .run_command()
        .env("SPOOLITE_DEFAULTS_FILE", &defaults)
        .current_dir(elsewhere.path())
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("(from SPOOLITE_SETTLE in {})", defaults.display())),
        "{stderr}"
    );
    assert!(!second.spool.exists());
}

/// `<N>` of a journal line, when it has one.
fn priority_of(line: &str) -> Option<u8> {
    let rest = line.strip_prefix('<')?;
    let (digit, _) = rest.split_once('>')?;
    digit.parse().ok()
}

#[test]
fn under_systemd_every_log_line_carries_its_priority_and_no_timestamp() {
    let site = Site::new();
    // systemd names the journal stream it connects to stderr; the log file plays it.
    let log = fs::File::create(&site.log).expect("create log");
    let meta = log.metadata().expect("stat log");
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let mut daemon = site.spawn(
        site.run_command()
            .args(with_defaults(&[]))
            .env("RUST_LOG", "debug")
            .env("JOURNAL_STREAM", &stream),
    );
    daemon.wait_serving(&site);
    site.deliver(&mut daemon, "day1.json", day1());
    site.deliver(&mut daemon, "list.json", "[1, 2, 3]\n");
    daemon.stop();
    let log = site.log();
    assert!(log.lines().count() >= 4, "{log}");
    for line in log.lines() {
        let priority = priority_of(line).unwrap_or_else(|| panic!("no priority: {line:?}"));
        assert!([3, 4, 6, 7].contains(&priority), "{line:?}");
        assert!(
            !line[3..].starts_with('['),
            "no timestamp (journald adds one): {line:?}"
        );
    }
    let starting = |prefix: &str| log.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(starting("<6>processed day1.json "), 1, "{log}");
    assert_eq!(starting("<4>rejected list.json "), 1, "{log}");

    // A JOURNAL_STREAM inherited from elsewhere is not this stderr: usual lines.
    let mut daemon = site.spawn(
        site.run_command()
            .args(with_defaults(&[]))
            .env("JOURNAL_STREAM", "1:2"),
    );
    daemon.wait_serving(&site);
    daemon.stop();
    let later: Vec<String> = site
        .log()
        .lines()
        .skip(log.lines().count())
        .map(String::from)
        .collect();
    assert!(!later.is_empty());
    for line in &later {
        assert!(
            line.starts_with("[20") && priority_of(line).is_none(),
            "a timestamped line: {line:?}"
        );
    }
}

#[test]
fn ingest_lines_carry_the_time_taken_and_escape_names_and_nothing_more() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let day1_path = dir.path().join("day1.json");
    fs::write(&day1_path, day1()).expect("write day1");
    let forged = dir.path().join("x.json\nprocessed forged.json");
    let one = event(
        "XX1-20261201",
        "duty_start",
        "2026-12-01T06:00:00Z",
        None,
        "{}",
    );
    fs::write(&forged, json_batch(&[one])).expect("write forged");
    // The database exists first: its creation is logged, and this is about the rest.
    let empty = dir.path().join("empty.json");
    fs::write(&empty, "{\"events\": []}").expect("write empty batch");
    let (code, _) = crate::support::ingest_json(&db, &[&empty]);
    assert_eq!(code, 0);
    let output = ingest_command(&db)
        .arg(&day1_path)
        .arg(&forged)
        .output()
        .expect("run ingest");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line per file, no name splits one: {stdout}"
    );
    assert!(lines[0].starts_with("processed day1.json "), "{stdout}");
    assert!(
        lines[1].starts_with("processed x.json\\nprocessed forged.json "),
        "{stdout}"
    );
    for line in &lines {
        // `… 0.02s`: seconds with two decimals, last on the line.
        let last = line.rsplit(' ').next().expect("a last word");
        let (whole, decimals) = last
            .strip_suffix('s')
            .and_then(|n| n.split_once('.'))
            .unwrap_or_else(|| panic!("no elapsed time at the end: {line:?}"));
        assert!(
            !whole.is_empty()
                && whole.chars().all(|c| c.is_ascii_digit())
                && decimals.len() == 2
                && decimals.chars().all(|c| c.is_ascii_digit()),
            "{line:?}"
        );
    }
    // stderr is no terminal here: no progress bar, nothing at all.
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    // JSON escapes the name itself: the name as recorded.
    let (code, lines) = crate::support::ingest_json(&dir.path().join("json.db"), &[&forged]);
    assert_eq!(code, 0);
    assert_eq!(lines[0]["file"], "x.json\nprocessed forged.json");
    // An operating error names the file on one line too.
    let missing = dir.path().join("gone.json\nprocessed forged.json");
    let output = ingest_command(&db)
        .arg(&missing)
        .output()
        .expect("run ingest");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("gone.json\\nprocessed forged.json"),
        "{stderr}"
    );
}

#[test]
fn status_text_in_a_pipe_keeps_each_value_on_one_line() {
    let site = stopped_site();
    let pid = 4_000_000; // beyond pid_max: no live process is named
    let _lock = hold_lock(&site, pid);
    let since = spoolite::clock::format_millis(SystemTime::now() - Duration::from_secs(60));
    // A PostgreSQL server's words run long.
    let error = "connect to PostgreSQL database postgresql://spoolite@db.ops.example/spoolite: \
                 db error: FATAL: remaining connection slots are reserved for roles with the \
                 SUPERUSER attribute";
    write_state(
        &site,
        &json!({
            "pid": pid, "since": lock_since(&site), "written_at": spoolite::clock::now_utc(),
            "files_waiting": 0, "oldest_waiting_seen_at": null,
            "database_fault": {"since": since, "error": error},
        }),
    );
    // The harness reads stdout through a pipe: no terminal.
    let (code, text, stderr) = run_status(&mut site.status_command());
    assert_eq!(code, 1, "{text}{stderr}");
    let fault = format!("database fault    failing since {since}: {error}");
    assert!(
        text.lines().any(|line| line == fault),
        "the fault on one line, as grep needs it:\n{text}"
    );
    let labels: Vec<&str> = text
        .lines()
        .map(|line| line.split("  ").next().unwrap_or(""))
        .collect();
    assert!(
        labels.iter().all(|label| !label.is_empty()),
        "no continuation lines:\n{text}"
    );
}

#[test]
fn status_names_the_oldest_waiting_files_with_what_they_wait_for_and_rejected_ones_with_why() {
    let site = stopped_site();
    let pid = 4_000_000; // beyond pid_max: no live process is named
    let _lock = hold_lock(&site, pid);
    let state = |fault: Value| {
        json!({
            "pid": pid, "since": lock_since(&site), "written_at": spoolite::clock::now_utc(),
            "files_waiting": 7, "oldest_waiting_seen_at": spoolite::clock::now_utc(),
            "database_fault": fault,
        })
    };
    let fault = json!({"since": spoolite::clock::now_utc(), "error": "database is locked"});
    write_state(&site, &state(fault));
    // Seven files, a minute apart, the oldest first; one temp-named, one empty.
    let waiting = [
        ("a.json", "{\"events\":[]}"),
        (".b.json.tmp", "{\"events\":["),
        ("c.ndjson", ""),
        ("d.json", "{\"events\":[]}"),
        ("e.json", "{\"events\":[]}"),
        ("f.json", "{\"events\":[]}"),
        ("g.json", "{\"events\":[]}"),
    ];
    for (i, (name, content)) in waiting.iter().enumerate() {
        let path = crate::support::write(&site.incoming(), name, content);
        age_file(&path, Duration::from_secs(60 * (10 - i as u64)));
    }
    // Rejected files: two days, a day and an hour ago, one without a reason file.
    let reject = |name: &str, reason: Option<&str>, age_s: u64| {
        let path = crate::support::write(&site.rejected(), name, "[1]\n");
        age_file(&path, Duration::from_secs(9 * 24 * 3600));
        if let Some(reason) = reason {
            let reason_file = site.rejected().join(format!("{name}.reason.json"));
            let text = json!({"file": name, "sha256": sha256_hex("[1]\n"), "reason": reason,
                "detail": format!("{reason} detail"), "rejected_at": format!("{age_s} s ago")});
            fs::write(&reason_file, text.to_string()).expect("write reason file");
            age_file(&reason_file, Duration::from_secs(age_s));
        }
    };
    reject("new.json", Some("not_json"), 3600);
    reject("old.1.json", Some("bad_shape"), 24 * 3600);
    reject("oldest.json", Some("truncated"), 2 * 24 * 3600);
    reject("orphan.json", None, 0);
    for n in 0..3 {
        reject(&format!("recent{n}.xls"), Some("unsupported_type"), 60 - n);
    }

    let (code, status) = status_json_code(&site);
    assert_eq!(code, 1, "served, the database failing: {status}");
    let names_states = |status: &Value| -> Vec<(String, String)> {
        status["oldest_waiting"]
            .as_array()
            .unwrap_or_else(|| panic!("{status}"))
            .iter()
            .map(|f| {
                (
                    f["file"].as_str().unwrap_or("?").to_owned(),
                    f["state"].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect()
    };
    let expect = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        names_states(&status),
        expect(&[
            ("a.json", "waiting_for_database"),
            (".b.json.tmp", "temp_name"),
            ("c.ndjson", "waiting_for_database"),
            ("d.json", "waiting_for_database"),
            ("e.json", "waiting_for_database"),
        ])
    );
    assert_eq!(
        status["oldest_waiting"][0],
        waiting_file(&site.incoming().join("a.json"), "waiting_for_database")
    );
    assert_eq!(status["rejected_files"], 7);
    assert_eq!(
        status["oldest_rejected"],
        json!([
            {"file": "orphan.json", "reason": null, "detail": null, "rejected_at": null},
            {"file": "oldest.json", "reason": "truncated", "detail": "truncated detail",
             "rejected_at": "172800 s ago"},
            {"file": "old.1.json", "reason": "bad_shape", "detail": "bad_shape detail",
             "rejected_at": "86400 s ago"},
            {"file": "new.json", "reason": "not_json", "detail": "not_json detail",
             "rejected_at": "3600 s ago"},
            {"file": "recent0.xls", "reason": "unsupported_type",
             "detail": "unsupported_type detail", "rejected_at": "60 s ago"},
        ])
    );
    let (code, text, _) = run_status(&mut site.status_command());
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        lines_after(&text, "waiting", 6),
        [
            "a.json: waiting for the database",
            ".b.json.tmp: temp-named, taken once renamed",
            "c.ndjson: waiting for the database",
            "d.json: waiting for the database",
            "e.json: waiting for the database",
            "and 2 more",
        ]
    );
    assert_eq!(
        lines_after(&text, "rejected", 6),
        [
            "orphan.json: (no reason file)",
            "oldest.json: truncated",
            "old.1.json: bad_shape",
            "new.json: not_json",
            "recent0.xls: unsupported_type",
            "and 2 more",
        ]
    );

    // Once the database works again, each file says what it waits for itself, as
    // far as the daemon's state file tells (the daemon saw a.json and d.json).
    let seen_at = spoolite::clock::now_utc();
    let seen = |name: &str, state: &str| {
        json!({"name": name, "state": state, "first_seen_at": seen_at, "changed_at": seen_at,
            "version": {"dev": 0, "ino": 0, "size": 0, "mtime_s": 0, "mtime_ns": 0,
                "ctime_s": 0, "ctime_ns": 0}})
    };
    let mut told = state(Value::Null);
    told["waiting"] = json!([
        seen("a.json", "still_arriving"),
        seen("d.json", "backing_off")
    ]);
    write_state(&site, &told);
    let (code, status) = status_json_code(&site);
    assert_eq!(code, 0, "{status}");
    assert_eq!(
        names_states(&status),
        expect(&[
            ("a.json", "still_arriving"),
            (".b.json.tmp", "temp_name"),
            ("c.ndjson", "empty"),
            ("d.json", "backing_off"),
            ("e.json", "pending"),
        ])
    );
    assert_eq!(status["oldest_waiting"][0]["first_seen_at"], seen_at);
    assert_eq!(status["oldest_waiting"][4]["first_seen_at"], Value::Null);
    let (_, text, _) = run_status(&mut site.status_command());
    assert_eq!(
        lines_after(&text, "waiting", 5),
        [
            "a.json: still arriving (its content ends early)",
            ".b.json.tmp: temp-named, taken once renamed",
            "c.ndjson: empty, so still arriving",
            "d.json: a try failed, waiting to try again",
            "e.json: not yet told of by the daemon",
        ]
    );
}

#[test]
fn run_serves_the_site_the_named_defaults_file_sets_and_says_so() {
    let site = Site::new();
    let defaults = crate::support::write(
        site.dir.path(),
        "second-site.env",
        format!(
            "SPOOLITE_SPOOL={}\nSPOOLITE_DB={}\nSPOOLITE_SETTLE=0ms\n",
            site.spool.display(),
            site.db.display()
        ),
    );
    // Started by hand from another folder, with no --spool or --db: the file's site
    // is served, and no second, empty site appears in the current folder.
    let here = tempfile::tempdir().expect("temp dir");
    let mut command = spoolite();
    command
        .arg("run")
        .current_dir(here.path())
        .env("SPOOLITE_DEFAULTS_FILE", &defaults)
        .env_remove("SPOOLITE_SPOOL")
        .env_remove("SPOOLITE_DB");
    let mut daemon = site.spawn(&mut command);
    daemon.wait_serving(&site);
    site.drop_file("a.json", crate::support::one_event_batch("DF1"));
    daemon.wait(Duration::from_secs(20), "a.json archived", || {
        site.archived() == ["a.json"]
    });
    assert_eq!(crate::support::names(here.path()), Vec::<String>::new());
    let log = site.log();
    let said = format!(
        "settings SPOOLITE_SPOOL, SPOOLITE_DB, SPOOLITE_SETTLE from the defaults file {}",
        defaults.display()
    );
    assert!(log.contains(&said), "{log}");

    // A named file that does not exist: refused, naming it, before anything is made.
    let output = spoolite()
        .arg("run")
        .current_dir(here.path())
        .env("SPOOLITE_DEFAULTS_FILE", here.path().join("missing.env"))
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing.env"), "{stderr}");
    assert_eq!(crate::support::names(here.path()), Vec::<String>::new());
}
