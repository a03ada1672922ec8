//! The benchmark harness still runs: a smoke run (10k events, a 3 s idle window,
//! backlogs of 300 and 100 files, the fair floor run when a build of it is under
//! target/perf-floor (a clone alone has no floor source: its rows then say why), the
//! analyst queries on a 30k-row database (on SQLite, PostgreSQL and
//! Datasette), section P on a PostgreSQL server
//! of its own with 3k events) on the debug binaries, so that
//! `spoolite-bench` cannot rot. Its figures are not checked: benchmarks are not
//! tests.
//!
//! The daemon it runs is the workspace's `spoolite`, which another package builds:
//! the test has cargo build it (a no-op when it is up to date) beside
//! `spoolite-bench`, whichever packages the test run was asked for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use spoolite_testkit::process::{LogMode, Process};

/// The longest a build of `spoolite` may take (a first debug build on a busy
/// 2-core machine).
const BUILD_WAIT_MAX: Duration = Duration::from_secs(30 * 60);

/// `cargo build -p spoolite --bin spoolite` into the target folder `spoolite-bench`
/// was built in, in its profile; returns the binary.
fn spoolite_beside_the_bench(scratch: &Path) -> PathBuf {
    let bench = Path::new(env!("CARGO_BIN_EXE_spoolite-bench"));
    let profile_dir = bench.parent().expect("the bench binary's folder");
    let target_dir = profile_dir.parent().expect("the target folder");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args([
            "build",
            "--quiet",
            "--package",
            "spoolite",
            "--bin",
            "spoolite",
        ])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cargo.arg("--release");
        }
        other => panic!("spoolite-bench was built into {other:?}, not debug/ or release/"),
    }
    let log = scratch.join("cargo-build.log");
    let mut build = Process::spawn(&mut cargo, &log, LogMode::Truncate).expect("start cargo");
    let status = build
        .wait_exit(BUILD_WAIT_MAX, Duration::from_millis(100))
        .unwrap_or_else(|e| panic!("cargo build -p spoolite: {e}\n{}", build.log()));
    assert!(
        status.success(),
        "cargo build -p spoolite failed ({status}):\n{}",
        build.log()
    );
    let spoolite = profile_dir.join("spoolite");
    assert!(
        spoolite.is_file(),
        "the build made no {}",
        spoolite.display()
    );
    spoolite
}

#[test]
fn bench_smoke_run_completes_and_reports_every_figure() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spoolite = spoolite_beside_the_bench(dir.path());
    let output = Command::new(env!("CARGO_BIN_EXE_spoolite-bench"))
        .arg("--smoke")
        .arg("--out")
        .arg(dir.path())
        .arg("--spoolite")
        .arg(&spoolite)
        .output()
        .expect("run spoolite-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "spoolite-bench --smoke failed ({}):\n{}\n--- its progress (stderr) ---\n{stderr}",
        output.status,
        problem_lines(&stdout)
    );
    let results = std::fs::read_to_string(dir.path().join("results.md")).expect("results.md");
    for figure in [
        "the bench's floor",
        "fair floor `c21ixfr`",
        "fair floor `c21ixfr --batch-ref`",
        "`--dry-run`",
        ".ndjson.gz",
        "SHA-256",
        "updated",
        "unchanged",
        "drop-to-visible",
        "idle daemon",
        "spoolite_scans_total",
        "backlog of 300",
        "backlog of 100",
        "first and last 100 files",
        "Datasette's facet SQL on event_kind",
        "block hours per tail in",
        "a row by key (idempotency_key, 64 lowercase hex), PostgreSQL",
        // Pages timed, or a row saying why Datasette could not be installed.
        "Datasette 0.65.5",
        "psql COPY floor",
        "4 `spoolite run` at once",
        "drop-to-visible against PostgreSQL",
        // Measured beside spoolite's growth, or a row saying why the floor was not run.
        "the bulk+crew floor's own growth",
    ] {
        assert!(
            results.contains(figure),
            "results.md has no {figure:?} row:\n{results}"
        );
    }
    // A station's file into a large database, on SQLite (section 5) and PostgreSQL.
    assert_eq!(
        results
            .lines()
            .filter(
                |row| row.contains("a station's file of 500 new events into a")
                    && row.contains("`spoolite ingest`")
            )
            .count(),
        2,
        "results.md has not two station-file rows:\n{results}"
    );
}

/// The "Problems" section of the bench's results (its stdout), the lines that say
/// why it exited 1; or the whole stdout when it has none (it failed before writing
/// the table).
fn problem_lines(stdout: &str) -> String {
    match stdout.find("\nProblems") {
        Some(at) => stdout[at + 1..].trim_end().to_owned(),
        None => format!("--- its stdout (no Problems section) ---\n{stdout}"),
    }
}
