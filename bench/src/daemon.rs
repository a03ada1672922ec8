//! A `spoolite run` started by the bench (latency, idle, backlog): its pid, its CPU
//! time from /proc, its log, and a stop by SIGTERM that checks the exit status. A
//! daemon that is dropped without `stop` (an error path) is stopped all the same.

use std::ffi::OsStr;
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use crate::BenchResult;

/// The longest wait for the daemon to stop after SIGTERM.
const STOP_WAIT_MAX: Duration = Duration::from_secs(30);

pub struct Daemon {
    child: Option<Child>,
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
        let log_file = File::create(log)?;
        let started = SystemTime::now();
        let child = Command::new(spoolite)
            .arg("run")
            .args(args)
            .env("RUST_LOG", "info")
            // Timestamped lines, as on a terminal, even when the bench itself runs
            // under systemd (the daemon logs for journald only when its stderr is
            // the journal stream, which a log file is not; removed to be sure).
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .spawn()
            .map_err(|e| format!("start {} run: {e}", spoolite.display()))?;
        Ok(Daemon {
            child: Some(child),
            started,
        })
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails when the daemon has exited; `log` is named in the message.
    pub fn check_running(&mut self, log: &Path) -> BenchResult<()> {
        let Some(child) = self.child.as_mut() else {
            return Err("the daemon was already stopped".into());
        };
        match child.try_wait()? {
            None => Ok(()),
            Some(status) => {
                Err(format!("the daemon exited ({status}); see {}", log.display()).into())
            }
        }
    }

    /// CPU time the daemon has used so far, user and system, all threads, from
    /// /proc/PID/stat (fields 14 and 15, in clock ticks).
    pub fn cpu_seconds(&self) -> BenchResult<f64> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
        // The command name in parentheses may hold spaces: count after its ')'.
        let rest = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest)
            .ok_or_else(|| format!("{path}: no ')' in {stat:?}"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state).
        let field = |n: usize| -> BenchResult<u64> {
            let text = fields
                .get(n - 3)
                .ok_or_else(|| format!("{path}: no field {n}"))?;
            Ok(text.parse()?)
        };
        let ticks = field(14)? + field(15)?;
        Ok(ticks as f64 / clock_ticks_per_second())
    }

    /// Sends SIGTERM and waits (bounded) for the exit; an exit status other than 0
    /// is an error.
    pub fn stop(mut self) -> BenchResult<()> {
        let status = self.terminate()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the daemon exited with {status} after SIGTERM, expected 0").into())
        }
    }

    fn terminate(&mut self) -> BenchResult<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            return Err("the daemon was already stopped".into());
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill has no memory-safety preconditions; pid is our own child,
            // not yet reaped, so the pid cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + STOP_WAIT_MAX;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the daemon did not stop within {STOP_WAIT_MAX:?} of SIGTERM; killed"
                )
                .into());
            }
            sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.terminate();
        }
    }
}

/// `sysconf(_SC_CLK_TCK)`, the unit of /proc's CPU times (100 on Linux).
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}
