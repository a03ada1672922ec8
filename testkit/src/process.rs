//! A `spoolite run` process for a test or the bench: spawned with stdin and stdout
//! null and its stderr (the log) in a file, waited for with bounded polls (a
//! condition, a log line, the spool's lock naming it, its exit), stopped by SIGTERM
//! with a bounded wait or killed; its CPU time read from /proc. A `Process` dropped
//! while it runs is killed (SIGKILL) and reaped, so that none is leaked.
//!
//! Every wait takes its limit and fails, with a sentence naming what it waited
//! for, when the limit passes or the process exits first.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

/// How the log file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// Appended to (several daemons of one site share a log).
    Append,
    /// Created afresh.
    Truncate,
}

/// A spawned process whose stderr goes to a log file.
pub struct Process {
    /// The child; a caller may look at it (`try_wait`), the methods below reap it.
    pub child: Child,
    log: PathBuf,
    /// When it was spawned.
    pub started: SystemTime,
    /// How it ended, once reaped through the methods below.
    status: Option<ExitStatus>,
}

impl Process {
    /// Spawns `command` with stdin and stdout null and stderr to `log`. The
    /// command's environment is the caller's to set.
    pub fn spawn(command: &mut Command, log: &Path, mode: LogMode) -> Result<Process, String> {
        let stderr = match mode {
            LogMode::Append => fs::OpenOptions::new().create(true).append(true).open(log),
            LogMode::Truncate => fs::File::create(log),
        }
        .map_err(|e| format!("open {}: {e}", log.display()))?;
        let started = SystemTime::now();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| {
                format!(
                    "start {} {:?}: {e}",
                    Path::new(command.get_program()).display(),
                    command.get_args().collect::<Vec<_>>()
                )
            })?;
        Ok(Process {
            child,
            log: log.to_owned(),
            started,
            status: None,
        })
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a pid fits an i32")
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The log as it stands (empty when it cannot be read).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// How the process ended, or `None` while it runs (a zombie is reaped here).
    pub fn exit_status(&mut self) -> Result<Option<ExitStatus>, String> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .map_err(|e| format!("wait for pid {}: {e}", self.child.id()))?;
        }
        Ok(self.status)
    }

    /// Fails, naming its exit status and the log, when the process has exited.
    pub fn check_running(&mut self) -> Result<(), String> {
        match self.exit_status()? {
            None => Ok(()),
            Some(status) => Err(format!(
                "the daemon exited ({status}); see {}",
                self.log.display()
            )),
        }
    }

    /// Sends `signal`; fails when it cannot be sent (the process was reaped already).
    pub fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        if self.status.is_some() {
            return Err(format!(
                "pid {} was reaped already; signal {signal} not sent",
                self.pid()
            ));
        }
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet (a zombie
        // at most), so it cannot name another process.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "kill({}, {signal}): {}",
                self.pid(),
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Polls `condition` every `poll` until it holds. Fails when the process exits
    /// first (it is looked at before each look at the condition) or `limit` passes.
    pub fn wait_for(
        &mut self,
        limit: Duration,
        poll: Duration,
        what: &str,
        mut condition: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let mut exited = None;
        let held = wait_until(limit, poll, || match self.exit_status() {
            Ok(None) => condition(),
            Ok(Some(status)) => {
                exited = Some(format!("exited ({status})"));
                true
            }
            Err(e) => {
                exited = Some(e);
                true
            }
        });
        match (exited, held) {
            (Some(how), _) => Err(format!(
                "the daemon {how} while waiting for {what}; see {}",
                self.log.display()
            )),
            (None, true) => Ok(()),
            (None, false) => Err(format!(
                "timed out after {limit:?} waiting for {what}; see {}",
                self.log.display()
            )),
        }
    }

    /// Waits (bounded) for a line of the log holding `needle`.
    pub fn wait_log_line(&mut self, limit: Duration, needle: &str) -> Result<(), String> {
        let log = self.log.clone();
        self.wait_for(
            limit,
            Duration::from_millis(10),
            &format!("a `{}` line", needle.trim()),
            || fs::read_to_string(&log).is_ok_and(|text| text.contains(needle)),
        )
    }

    /// Waits (bounded) until `SPOOL/spoolite.lock` names this process: spoolite
    /// writes its pid there once it holds the spool, and its signal handlers are
    /// in place by then (a SIGTERM before that would meet the default action).
    pub fn wait_lock(
        &mut self,
        spool: &Path,
        limit: Duration,
        poll: Duration,
    ) -> Result<(), String> {
        let lock = spool.join("spoolite.lock");
        let pid = self.pid().to_string();
        self.wait_for(limit, poll, "the lock file to name the daemon", || {
            fs::read_to_string(&lock).is_ok_and(|text| text.trim() == pid)
        })
    }

    /// Waits at most `limit` for the process to end; returns how it ended.
    pub fn wait_exit(&mut self, limit: Duration, poll: Duration) -> Result<ExitStatus, String> {
        let mut status = None;
        let mut failed = None;
        wait_until(limit, poll, || match self.exit_status() {
            Ok(found) => {
                status = found;
                status.is_some()
            }
            Err(e) => {
                failed = Some(e);
                true
            }
        });
        match (status, failed) {
            (_, Some(e)) => Err(e),
            (Some(status), None) => Ok(status),
            (None, None) => Err(format!(
                "pid {} did not exit within {limit:?}; see {}",
                self.pid(),
                self.log.display()
            )),
        }
    }

    /// SIGTERM, then a wait of at most `limit`; a process that does not stop in
    /// time is killed (SIGKILL), reaped, and an error.
    pub fn terminate(&mut self, limit: Duration) -> Result<ExitStatus, String> {
        if let Some(status) = self.exit_status()? {
            return Ok(status);
        }
        self.signal(libc::SIGTERM)?;
        match self.wait_exit(limit, Duration::from_millis(10)) {
            Ok(status) => Ok(status),
            Err(_) => {
                let _ = self.kill_hard();
                Err(format!(
                    "the daemon did not stop within {limit:?} of SIGTERM; killed"
                ))
            }
        }
    }

    /// SIGKILL, and reap the process; returns how it ended.
    pub fn kill_hard(&mut self) -> Result<ExitStatus, String> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        self.signal(libc::SIGKILL)?;
        let status = self
            .child
            .wait()
            .map_err(|e| format!("reap pid {}: {e}", self.child.id()))?;
        self.status = Some(status);
        Ok(status)
    }

    /// CPU time the process has used so far, user and system, all threads, from
    /// /proc/PID/stat (fields 14 and 15, in clock ticks).
    pub fn cpu_seconds(&self) -> Result<f64, String> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
        // The command name in parentheses may hold spaces: count after its ')'.
        let rest = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest)
            .ok_or_else(|| format!("{path}: no ')' in {stat:?}"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state).
        let field = |n: usize| -> Result<u64, String> {
            let text = fields
                .get(n - 3)
                .ok_or_else(|| format!("{path}: no field {n}"))?;
            text.parse()
                .map_err(|e| format!("{path}: field {n} {text:?}: {e}"))
        };
        let ticks = field(14)? + field(15)?;
        Ok(ticks as f64 / clock_ticks_per_second())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.exit_status() {
            let _ = self.kill_hard();
        }
    }
}

/// Polls `condition` every `poll` until it holds (true) or `limit` passes (false).
pub fn wait_until(limit: Duration, poll: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !condition() {
        if start.elapsed() >= limit {
            return false;
        }
        sleep(poll);
    }
    true
}

/// The processor time the machine has spent since it started, in seconds, every
/// process's: each state of `/proc/stat`'s first line but idle and waiting for
/// I/O (user, nice, system, irq, softirq, steal; guest is within user).
pub fn machine_cpu_seconds() -> Result<f64, String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    let line = stat.lines().next().ok_or("/proc/stat is empty")?;
    let mut busy = 0;
    for (at, field) in line.split_whitespace().skip(1).take(8).enumerate() {
        let ticks: u64 = field
            .parse()
            .map_err(|e| format!("/proc/stat: {field:?}: {e}"))?;
        if at != 3 && at != 4 {
            busy += ticks;
        }
    }
    Ok(busy as f64 / clock_ticks_per_second())
}

/// `sysconf(_SC_CLK_TCK)`, the unit of /proc's CPU times (100 on Linux).
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str, log: &Path) -> Process {
        Process::spawn(
            Command::new("sh").args(["-c", script]),
            log,
            LogMode::Truncate,
        )
        .expect("spawn sh")
    }

    #[test]
    fn waits_for_a_log_line_and_stops_by_sigterm() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("log");
        let mut process = shell(
            "trap 'exit 0' TERM; echo 'serving spool x' >&2; while :; do sleep 0.05; done",
            &log,
        );
        process
            .wait_log_line(Duration::from_secs(20), "serving spool ")
            .expect("the line");
        process.check_running().expect("running");
        assert!(process.cpu_seconds().expect("cpu") >= 0.0);
        let status = process.terminate(Duration::from_secs(20)).expect("stops");
        assert!(status.success(), "{status}");
        assert!(process.check_running().is_err());
        assert!(process.signal(libc::SIGTERM).is_err(), "reaped: no signal");
    }

    #[test]
    fn a_wait_fails_when_the_process_exits_or_the_limit_passes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut gone = shell("exit 3", &dir.path().join("gone.log"));
        let error = gone
            .wait_for(
                Duration::from_secs(20),
                Duration::from_millis(5),
                "x",
                || false,
            )
            .expect_err("it exited");
        assert!(
            error.contains("exited") && error.contains("waiting for x"),
            "{error}"
        );
        assert_eq!(
            gone.wait_exit(Duration::ZERO, Duration::ZERO)
                .ok()
                .and_then(|s| s.code()),
            Some(3)
        );

        let mut running = shell("sleep 30", &dir.path().join("running.log"));
        let error = running
            .wait_for(
                Duration::from_millis(50),
                Duration::from_millis(5),
                "y",
                || false,
            )
            .expect_err("the limit passed");
        assert!(error.starts_with("timed out after"), "{error}");
        let status = running.kill_hard().expect("killed");
        assert!(!status.success());
    }
}
