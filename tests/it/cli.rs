//! Tests of the command line as an operator meets it: the site defaults file (its
//! typos, the lines it cannot use, a named file that is missing), `--help`, the
//! warnings and errors of options, and the names of the signals that stop a
//! process.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Site, event, ingest_command, json_batch, spoolite, wait_until};

/// The longest any single wait of these tests may take.
const WAIT: Duration = Duration::from_secs(30);

/// The commands, as `spoolite --help` lists them.
const COMMANDS: [&str; 9] = [
    "run", "ingest", "status", "changes", "ftl", "key", "copy-db", "backup", "check",
];

/// A folder with a defaults file `site.env` holding `text`, where `{dir}` stands for
/// the folder.
fn defaults_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("site.env");
    let text = text.replace("{dir}", &dir.path().display().to_string());
    fs::write(&file, text).expect("write defaults file");
    (dir, file)
}

/// `spoolite status --json` with `SPOOLITE_DEFAULTS_FILE=file`: the exit code, the
/// object printed and stderr.
fn status_with_defaults(file: &Path) -> (i32, Value, String) {
    let output = spoolite()
        .args(["status", "--json"])
        .env("SPOOLITE_DEFAULTS_FILE", file)
        .output()
        .expect("run spoolite status");
    let status = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("status JSON: {e}: {output:?}"));
    (exit_code(&output), status, stderr_of(&output))
}

fn exit_code(output: &Output) -> i32 {
    output.status.code().expect("exit code")
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The lines of `stderr` that report on `file`, each from the file's name on.
fn reports_on(stderr: &str, file: &Path) -> Vec<String> {
    let name = file.display().to_string();
    stderr
        .lines()
        .filter_map(|line| line.find(&name).map(|at| line[at..].to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------------
// The site defaults file

#[test]
fn a_typo_in_the_defaults_file_is_reported_with_its_line_and_not_listed_as_applied() {
    let (dir, file) = defaults_file(
        "# the site\nSPOOLITE_SPOOL={dir}/spool\nSPOOLITE_DB={dir}/s.db\n\
         SPOOLITE_SETTLE=5s\nSPOOLITE_BOGUS=1\n",
    );
    let (code, status, stderr) = status_with_defaults(&file);
    // No daemon has made the site: exit 2, what could be read printed all the same.
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        reports_on(&stderr, &file),
        [format!(
            "{}:5: SPOOLITE_BOGUS is no setting of spoolite (no option reads it: a typo?); \
             ignored",
            file.display()
        )],
        "{stderr}"
    );
    // What status reads came from the file; the daemon's SPOOLITE_SETTLE and the
    // typo are not status's settings.
    assert_eq!(
        status["spool"],
        dir.path().join("spool").display().to_string()
    );
    assert_eq!(status["db"], dir.path().join("s.db").display().to_string());
    assert_eq!(
        status["settings_from"],
        json!({"file": file.display().to_string(),
               "variables": ["SPOOLITE_SPOOL", "SPOOLITE_DB"]})
    );
}

#[test]
fn a_line_the_defaults_file_cannot_use_is_reported_and_the_rest_applies() {
    let (dir, file) = defaults_file(
        "SPOOLITE_SPOOL=\"{dir}/spool\"\nexport SPOOLITE_DB={dir}/s.db\nSPOOLITE_DB\n",
    );
    let (code, status, stderr) = status_with_defaults(&file);
    assert_eq!(code, 2, "{stderr}");
    let name = file.display();
    assert_eq!(
        reports_on(&stderr, &file),
        [
            format!(
                "{name}:2: \"export SPOOLITE_DB\" is not a variable name: an EnvironmentFile= \
                 takes no `export`, write SPOOLITE_DB=… alone; ignored"
            ),
            format!("{name}:3: \"SPOOLITE_DB\" is not NAME=value (it has no '='); ignored"),
        ],
        "{stderr}"
    );
    assert_eq!(
        status["spool"],
        dir.path().join("spool").display().to_string()
    );
    assert_eq!(
        status["db"], "./spoolite.db",
        "the default, as under systemd"
    );
    assert_eq!(
        status["settings_from"]["variables"],
        json!(["SPOOLITE_SPOOL"])
    );
}

#[test]
fn a_defaults_file_named_that_does_not_exist_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("site.env");
    let expected = format!(
        "spoolite: read the defaults file {} (named by SPOOLITE_DEFAULTS_FILE): No such file \
         or directory (os error 2); name a file that exists, or unset SPOOLITE_DEFAULTS_FILE \
         to read /etc/default/spoolite\n",
        missing.display()
    );
    let output = spoolite()
        .arg("status")
        .env("SPOOLITE_DEFAULTS_FILE", &missing)
        .current_dir(dir.path())
        .output()
        .expect("run spoolite status");
    assert_eq!(exit_code(&output), 2);
    assert_eq!(stderr_of(&output), expected);
    assert!(output.stdout.is_empty(), "{output:?}");
    // ingest ingests nothing under settings it could not read.
    let batch = dir.path().join("batch.json");
    write_takeoff_batch(&batch);
    let db = dir.path().join("s.db");
    let output = ingest_command(&db)
        .arg(&batch)
        .env("SPOOLITE_DEFAULTS_FILE", &missing)
        .output()
        .expect("run spoolite ingest");
    assert_eq!(exit_code(&output), 2);
    assert_eq!(stderr_of(&output), expected);
    assert!(output.stdout.is_empty() && !db.exists(), "{output:?}");
}

// ---------------------------------------------------------------------------------
// --help

/// `spoolite ARGS`'s stdout, which must succeed, with `COLUMNS` as given.
fn help(args: &[&str], columns: Option<&str>) -> String {
    let mut command = spoolite();
    command.args(args).env_remove("COLUMNS");
    if let Some(columns) = columns {
        command.env("COLUMNS", columns);
    }
    let output = command.output().expect("run spoolite --help");
    assert_eq!(exit_code(&output), 0, "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

#[test]
fn the_command_list_gives_each_command_one_short_line() {
    let text = help(&["--help"], None);
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter(|line| !line.trim_start().starts_with("help "))
        .collect();
    let names: Vec<&str> = listed
        .iter()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(names, COMMANDS, "{text}");
    for line in listed {
        assert!(line.chars().count() <= 80, "{line:?}");
    }
    // The long text stays with the command.
    let status = help(&["status", "--help"], None);
    assert!(status.contains("quarantined records"), "{status}");
}

#[test]
fn no_line_of_any_help_is_wider_than_100_columns() {
    for columns in [None, Some("250")] {
        let mut pages = vec![help(&["--help"], columns)];
        for command in COMMANDS {
            pages.push(help(&[command, "--help"], columns));
            pages.push(help(&[command, "-h"], columns));
        }
        for page in &pages {
            for line in page.lines() {
                assert!(
                    line.chars().count() <= 100,
                    "COLUMNS={columns:?}: {} columns: {line:?}",
                    line.chars().count()
                );
            }
        }
    }
}

/// The `[env: …]` notes of `spoolite run --help` run with the variables `set`.
fn env_notes(set: &[(&str, &str)]) -> Vec<String> {
    let mut command = spoolite();
    command.args(["run", "--help"]);
    for (name, value) in set {
        command.env(name, value);
    }
    let output = command.output().expect("run spoolite run --help");
    assert_eq!(exit_code(&output), 0);
    let text = String::from_utf8(output.stdout).expect("help is UTF-8");
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("[env: "))
        .map(|note| note.trim_end_matches(']').to_owned())
        .collect()
}

#[test]
fn help_names_each_variable_and_shows_a_value_only_when_one_is_set() {
    let unset = env_notes(&[]);
    assert!(unset.contains(&"SPOOLITE_SPOOL".to_owned()), "{unset:?}");
    assert!(unset.len() >= 9, "{unset:?}");
    for note in &unset {
        assert!(
            note.starts_with("SPOOLITE_") && !note.contains('='),
            "{note:?}"
        );
    }
    let set = env_notes(&[
        ("SPOOLITE_SPOOL", "/srv/spool"),
        (
            "SPOOLITE_DB",
            "postgresql://spoolite:secret@db.example/spoolite",
        ),
        ("SPOOLITE_SETTLE", ""),
    ]);
    assert!(
        set.contains(&"SPOOLITE_SPOOL=/srv/spool".to_owned()),
        "{set:?}"
    );
    // A URI may hold a password: named, never shown. An empty variable is unset.
    assert!(set.contains(&"SPOOLITE_DB".to_owned()), "{set:?}");
    assert!(set.contains(&"SPOOLITE_SETTLE".to_owned()), "{set:?}");
    assert!(!set.iter().any(|note| note.contains("secret")), "{set:?}");
}

// ---------------------------------------------------------------------------------
// Options

#[test]
fn a_switch_with_a_word_it_does_not_take_lists_the_words_it_takes() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (args, variable) in [
        (&["status"][..], "SPOOLITE_JSON"),
        (&["ingest", "x.json"][..], "SPOOLITE_DRY_RUN"),
        (&["changes"][..], "SPOOLITE_FOLLOW"),
    ] {
        let output = spoolite()
            .args(args)
            .env(variable, "maybe")
            .current_dir(dir.path())
            .output()
            .expect("run spoolite");
        assert_eq!(exit_code(&output), 2, "{output:?}");
        let stderr = stderr_of(&output);
        assert!(
            stderr.contains(&format!(
                "(from the environment variable {variable}): \"maybe\" is not a yes or a no: \
                 use 1, true, yes or on, or 0, false, no or off"
            )),
            "{stderr}"
        );
    }
}

/// Starts `spoolite run` on `site` with `args`, waits for its start-up line and
/// stops it with `signal`; returns what it logged.
fn start_and_stop(site: &Site, args: &[&str], signal: libc::c_int) -> String {
    let before = site.log().len();
    let mut daemon = site.spawn(site.run_command().args(args));
    daemon.wait_serving(site);
    daemon.wait(WAIT, "the start-up line", || {
        site.log()[before..].contains("serving spool")
    });
    daemon.signal(signal);
    let status = daemon.wait_exit(WAIT, "the daemon to stop");
    assert_eq!(status.code(), Some(0), "{status}");
    site.log()[before..].to_owned()
}

const SETTLE_0_WARNING: &str = "--settle 0s: a file is taken the moment it is seen, so one \
    that its sender writes under its final name can be read before it is whole; give \
    --settle a few seconds (default 2s) unless every sender uploads under a temporary name";

#[test]
fn settle_0s_is_warned_of_at_start_up() {
    let site = Site::new();
    let log = start_and_stop(&site, &["--settle", "0s"], libc::SIGTERM);
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].ends_with(SETTLE_0_WARNING), "{log}");
    // From its variable too; a settle of some time is not warned of.
    let mut daemon = site.spawn(site.run_command().env("SPOOLITE_SETTLE", "0ms"));
    daemon.wait_serving(&site);
    daemon.wait(WAIT, "the warning", || {
        site.log().matches(SETTLE_0_WARNING).count() == 2
    });
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
    let log = start_and_stop(&site, &["--settle", "100ms"], libc::SIGTERM);
    assert!(!log.contains("--settle 0s"), "{log}");
}

// ---------------------------------------------------------------------------------
// Signals

#[test]
fn the_daemon_logs_the_signal_that_stops_it_by_name() {
    let site = Site::new();
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let log = start_and_stop(&site, &[], signal);
        assert!(
            log.contains(&format!(
                "{name}: finishing the current file, then stopping"
            )),
            "{log}"
        );
        assert!(!log.contains("signal "), "{log}");
    }
}

#[test]
fn a_follower_logs_the_signal_that_stops_it_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let batch = dir.path().join("batch.json");
    write_takeoff_batch(&batch);
    assert_eq!(
        exit_code(&ingest_command(&db).arg(&batch).output().expect("ingest")),
        0
    );
    let log = dir.path().join("follower.log");
    let mut child = spoolite()
        .args(["changes", "--follow", "--db"])
        .arg(&db)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(fs::File::create(&log).expect("create log"))
        .spawn()
        .expect("start spoolite changes --follow");
    // Its first line is printed once its signal handlers are in place.
    let stdout = child.stdout.take().expect("stdout");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    lines.recv_timeout(WAIT).expect("the follower's first line");
    let pid = i32::try_from(child.id()).expect("pid fits");
    // SAFETY: kill(2) on the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut status = None;
    wait_until(WAIT, "the follower to stop", || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    let log = fs::read_to_string(&log).expect("read log");
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert!(!log.contains("signal "), "{log}");
}

/// Writes a `.json` batch of one event, BA1 taking off, at `path`.
fn write_takeoff_batch(path: &Path) {
    let one = event(
        "BA1-20261201",
        "takeoff",
        "2026-12-01T06:00:00Z",
        None,
        "{}",
    );
    fs::write(path, json_batch(&[one])).expect("write batch");
}
