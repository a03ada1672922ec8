//! A `spoolite run` started by the bench (latency, idle, backlog, section P): the
//! test kit's process harness (`spoolite_testkit::process`) with the bench's
//! environment for the daemon, and a stop by SIGTERM that checks the exit status.
//! A daemon that is dropped without `stop` (an error path) is stopped all the same.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use spoolite_testkit::process::{LogMode, Process};

use crate::BenchResult;

/// The longest wait for the daemon to stop after SIGTERM.
const STOP_WAIT_MAX: Duration = Duration::from_secs(30);

pub struct Daemon {
    process: Process,
    /// When it was spawned.
    pub started: SystemTime,
}

impl Daemon {
    /// Starts `spoolite run ARGS` with its log (stderr) in `log`. The log level is
    /// always `info`, whatever RUST_LOG says: the backlog figures are read from the
    /// outcome lines, and a debug log would slow every section down.
    pub fn start<I, S>(spoolite: &Path, args: I, log: &Path) -> BenchResult<Daemon>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(spoolite);
        command
            .arg("run")
            .args(args)
            .env("RUST_LOG", "info")
            // Timestamped lines, as on a terminal, even when the bench itself runs
            // under systemd (the daemon logs for journald only when its stderr is
            // the journal stream, which a log file is not; removed to be sure).
            .env_remove("JOURNAL_STREAM");
        let process = Process::spawn(&mut command, log, LogMode::Truncate)
            .map_err(|e| format!("start {} run: {e}", spoolite.display()))?;
        Ok(Daemon {
            started: process.started,
            process,
        })
    }

    /// Fails when the daemon has exited; its log is named in the message.
    pub fn check_running(&mut self) -> BenchResult<()> {
        Ok(self.process.check_running()?)
    }

    /// Waits (bounded) for a line of the log holding `needle`, failing at once if
    /// the daemon exits.
    pub fn wait_log_line(&mut self, limit: Duration, needle: &str) -> BenchResult<()> {
        Ok(self.process.wait_log_line(limit, needle)?)
    }

    /// CPU time the daemon has used so far, user and system, all threads.
    pub fn cpu_seconds(&self) -> BenchResult<f64> {
        Ok(self.process.cpu_seconds()?)
    }

    /// Sends SIGTERM and waits (bounded) for the exit; an exit status other than 0
    /// is an error.
    pub fn stop(mut self) -> BenchResult<()> {
        let status = self.process.terminate(STOP_WAIT_MAX)?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the daemon exited with {status} after SIGTERM, expected 0").into())
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.process.exit_status() {
            let _ = self.process.terminate(STOP_WAIT_MAX);
        }
    }
}
