//! The idle daemon: `spoolite run --rescan 30s --metrics-file FILE` on an empty
//! spool, left to settle, then watched for a window: the CPU time it uses (from
//! /proc/PID/stat) and how often it lists incoming/ (the metrics file's counter
//! `spoolite_scans_total`).

use std::ffi::OsStr;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::BenchResult;
use crate::daemon::Daemon;

/// The longest wait for the daemon to write its metrics file the first time.
const START_WAIT_MAX: Duration = Duration::from_secs(30);
/// The counter the daemon increments on every listing of incoming/.
pub const SCANS_COUNTER: &str = "spoolite_scans_total";

/// What the idle run needs.
pub struct Plan<'a> {
    pub spoolite: &'a Path,
    pub dir: &'a Path,
    /// `--rescan` of the daemon.
    pub rescan: &'a str,
    /// How long the daemon runs, after its first metrics file, before the window.
    pub settle: Duration,
    /// The measured window.
    pub window: Duration,
}

/// What the window showed.
#[derive(Debug, Clone, Copy)]
pub struct Idle {
    /// The window as it was measured, seconds.
    pub window_s: f64,
    /// CPU seconds (user + system) the daemon used in the window.
    pub cpu_s: f64,
    /// Listings of incoming/ in the window, by the metrics file.
    pub scans: u64,
    /// The counter when the daemon was stopped (0: it does not count listings).
    pub scans_total: u64,
}

impl Idle {
    pub fn core_share(&self) -> f64 {
        self.cpu_s / self.window_s
    }

    pub fn scans_per_minute(&self) -> f64 {
        self.scans as f64 * 60.0 / self.window_s
    }
}

/// Runs the idle measurement.
pub fn measure(plan: &Plan) -> BenchResult<Idle> {
    if plan.dir.exists() {
        std::fs::remove_dir_all(plan.dir)?;
    }
    std::fs::create_dir_all(plan.dir)?;
    let spool = plan.dir.join("spool");
    let db = plan.dir.join("idle.db");
    let metrics = plan.dir.join("metrics.prom");
    let log = plan.dir.join("daemon.log");
    let args: [&OsStr; 8] = [
        "--spool".as_ref(),
        spool.as_os_str(),
        "--db".as_ref(),
        db.as_os_str(),
        "--rescan".as_ref(),
        plan.rescan.as_ref(),
        "--metrics-file".as_ref(),
        metrics.as_os_str(),
    ];
    let mut daemon = Daemon::start(plan.spoolite, args, &log)?;
    let deadline = Instant::now() + START_WAIT_MAX;
    while !metrics.exists() {
        daemon.check_running()?;
        if Instant::now() > deadline {
            return Err(format!(
                "the daemon wrote no {} within {START_WAIT_MAX:?}; see {}",
                metrics.display(),
                log.display()
            )
            .into());
        }
        sleep(Duration::from_millis(20));
    }
    sleep(plan.settle);
    daemon.check_running()?;
    let scans_before = scans(&metrics)?;
    let cpu_before = daemon.cpu_seconds()?;
    let opened = Instant::now();
    sleep(plan.window);
    let cpu_after = daemon.cpu_seconds()?;
    let window_s = opened.elapsed().as_secs_f64();
    let scans_after = scans(&metrics)?;
    daemon.stop()?;
    let scans_total = scans(&metrics)?;
    Ok(Idle {
        window_s,
        cpu_s: cpu_after - cpu_before,
        scans: scans_after.saturating_sub(scans_before),
        scans_total,
    })
}

/// The value of `spoolite_scans_total` in the metrics file.
fn scans(metrics: &Path) -> BenchResult<u64> {
    let text =
        std::fs::read_to_string(metrics).map_err(|e| format!("read {}: {e}", metrics.display()))?;
    counter(&text, SCANS_COUNTER)
        .ok_or_else(|| format!("{} has no sample of {SCANS_COUNTER}", metrics.display()).into())
}

/// The value of the sample `name` (no labels) in Prometheus text.
fn counter(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (sample, value) = line.split_once(' ')?;
            (sample == name).then(|| value.trim().parse::<f64>().ok())?
        })
        .map(|value| value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_reads_the_unlabelled_sample() {
        let text = "# HELP spoolite_scans_total Listings.\n# TYPE spoolite_scans_total counter\n\
                    spoolite_scans_total 42\nspoolite_scans_total_other 7\n";
        assert_eq!(counter(text, SCANS_COUNTER), Some(42));
        assert_eq!(counter("spoolite_files_waiting 1\n", SCANS_COUNTER), None);
    }
}
