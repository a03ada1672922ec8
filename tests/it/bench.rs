//! The benchmark harness still runs: a smoke run (10k events, a 3 s idle window,
//! backlogs of 300 and 100 files, the fair floor built under target/perf-floor and
//! run, the analyst queries on a 30k-row database, section P on a PostgreSQL server
//! of its own with 3k events) on the debug binaries, so that
//! `spoolite-bench` cannot rot. Its figures are not checked: benchmarks are not
//! tests.

use std::process::Command;

#[test]
fn bench_smoke_run_completes_and_reports_every_figure() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_spoolite-bench"))
        .arg("--smoke")
        .arg("--out")
        .arg(dir.path())
        .arg("--spoolite")
        .arg(env!("CARGO_BIN_EXE_spoolite"))
        .output()
        .expect("run spoolite-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "spoolite-bench --smoke failed: {stderr}"
    );
    let results = std::fs::read_to_string(dir.path().join("results.md")).expect("results.md");
    for figure in [
        "the bench's floor",
        "fair floor `c21ixfr`",
        "fair floor `c21ixfr --batch-ref`",
        "`--dry-run`",
        "SHA-256",
        "updated",
        "unchanged",
        "drop-to-visible",
        "idle daemon",
        "spoolite_scans_total",
        "backlog of 300",
        "backlog of 100",
        "first and last 100 files",
        "flight_times, one day of off_blocks_utc",
        "duty_event by idempotency_key",
        "batch_summary for one file",
        "psql COPY floor",
        "4 `spoolite run` at once",
        "drop-to-visible against PostgreSQL",
    ] {
        assert!(
            results.contains(figure),
            "results.md has no {figure:?} row:\n{results}"
        );
    }
}
