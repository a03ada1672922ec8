//! A backlog: many one-event files put into incoming/ of a stopped daemon's spool,
//! then `spoolite run --settle 0ms` started and left to work them off. Each file's
//! time is the millisecond timestamp of its outcome line in the daemon's log,
//! written right after the file was renamed into archive/; the daemon's start is its
//! `serving spool` line (database open, watch in place, about to list incoming/).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use crate::BenchResult;
use crate::daemon::Daemon;
use crate::generate::{self, BatchSpec, Layout};

/// Events of the backlog files start here, far from every other file's events.
const BACKLOG_OFFSET: u64 = 700_000_000;
/// How often the daemon's log is read for new outcome lines.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The run fails when no file is archived for this long.
const STALL_MAX: Duration = Duration::from_secs(60);
/// The longest wait for the `serving spool` line.
const START_WAIT_MAX: Duration = Duration::from_secs(60);

/// What one backlog run needs.
pub struct Plan<'a> {
    pub spoolite: &'a Path,
    pub dir: &'a Path,
    pub seed: u64,
    pub files: u64,
}

/// One backlog worked off.
#[derive(Debug, Clone)]
pub struct Backlog {
    pub files: u64,
    /// From the spawn of the daemon to the last file archived, seconds.
    pub from_spawn_s: f64,
    /// From the `serving spool` line, seconds.
    ready_s: f64,
    /// Seconds from the `serving spool` line to each file's outcome line, in order.
    done_s: Vec<f64>,
}

impl Backlog {
    /// Files per second from the daemon's start to the last file.
    pub fn rate(&self) -> f64 {
        self.files as f64 / self.ready_s
    }

    /// Files per second over the first `n` files: from the start to the n-th.
    pub fn first_rate(&self, n: usize) -> f64 {
        let n = n.clamp(1, self.done_s.len());
        n as f64 / self.done_s[n - 1]
    }

    /// Files per second over the last `n` files: from the one before them to the
    /// last.
    pub fn last_rate(&self, n: usize) -> f64 {
        let len = self.done_s.len();
        let n = n.clamp(1, len);
        let before = if n == len {
            0.0
        } else {
            self.done_s[len - n - 1]
        };
        n as f64 / (self.done_s[len - 1] - before)
    }
}

/// Writes the backlog, runs the daemon until every file is archived, stops it.
pub fn measure(plan: &Plan) -> BenchResult<Backlog> {
    if plan.dir.exists() {
        std::fs::remove_dir_all(plan.dir)?;
    }
    let spool = plan.dir.join("spool");
    let incoming = spool.join("incoming");
    for folder in ["incoming", "archive", "rejected"] {
        std::fs::create_dir_all(spool.join(folder))?;
    }
    write_files(plan, &incoming)?;
    let db = plan.dir.join("backlog.db");
    let log = plan.dir.join("daemon.log");
    let args: [&OsStr; 6] = [
        "--spool".as_ref(),
        spool.as_os_str(),
        "--db".as_ref(),
        db.as_os_str(),
        "--settle".as_ref(),
        "0ms".as_ref(),
    ];
    let mut daemon = Daemon::start(plan.spoolite, args, &log)?;
    let spawned = daemon.started;
    let lines = follow(&mut daemon, &log, plan.files)?;
    daemon.stop()?;
    let archived = std::fs::read_dir(spool.join("archive"))?.count() as u64;
    let left = std::fs::read_dir(&incoming)?.count();
    if archived != plan.files || left != 0 {
        return Err(format!(
            "after {} outcome lines: {archived} files in archive/, {left} left in incoming/; expected {} and 0",
            plan.files, plan.files
        )
        .into());
    }
    let ready = lines.ready;
    let last = *lines.done.last().ok_or("no file was archived")?;
    Ok(Backlog {
        files: plan.files,
        from_spawn_s: seconds_between(spawned, last),
        ready_s: seconds_between(ready, last),
        done_s: lines
            .done
            .iter()
            .map(|&at| seconds_between(ready, at))
            .collect(),
    })
}

/// The one-event files `backlog-000000.json` …, written oldest first, so that the
/// daemon's order (modification time, then name) is the order of their numbers.
fn write_files(plan: &Plan, incoming: &Path) -> BenchResult<()> {
    let mut bytes = Vec::new();
    for number in 0..plan.files {
        let spec = BatchSpec {
            offset: BACKLOG_OFFSET + number,
            count: 1,
            revision: 1,
            crew_changed: false,
            batch_id: format!("backlog-{number:06}"),
        };
        bytes.clear();
        generate::write_batch(&mut bytes, plan.seed, &spec, Layout::Json)?;
        File::create(incoming.join(format!("backlog-{number:06}.json")))?.write_all(&bytes)?;
    }
    Ok(())
}

/// The times read from the daemon's log.
struct Lines {
    ready: SystemTime,
    done: Vec<SystemTime>,
}

/// Reads the daemon's log as it grows until `files` outcome lines are in.
fn follow(daemon: &mut Daemon, log: &Path, files: u64) -> BenchResult<Lines> {
    let mut reader = File::open(log)?;
    let mut pending = String::new();
    let mut ready: Option<SystemTime> = None;
    let mut done: Vec<SystemTime> = Vec::new();
    let started = Instant::now();
    let mut progressed = Instant::now();
    while (done.len() as u64) < files {
        let before = done.len();
        read_new(&mut reader, &mut pending)?;
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            match parse_line(line.trim_end())? {
                Some(Logged::Ready(at)) => ready = Some(at),
                Some(Logged::Archived(at)) => done.push(at),
                None => {}
            }
        }
        if done.len() > before {
            progressed = Instant::now();
        }
        if (done.len() as u64) >= files {
            break;
        }
        daemon.check_running()?;
        if ready.is_none() && started.elapsed() > START_WAIT_MAX {
            return Err(format!(
                "no `serving spool` line within {START_WAIT_MAX:?}; see {}",
                log.display()
            )
            .into());
        }
        if progressed.elapsed() > STALL_MAX {
            return Err(format!(
                "{} of {files} files archived, then none for {STALL_MAX:?}; see {}",
                done.len(),
                log.display()
            )
            .into());
        }
        sleep(POLL_INTERVAL);
    }
    let ready = ready.ok_or("the log has outcome lines but no `serving spool` line")?;
    Ok(Lines { ready, done })
}

fn read_new(reader: &mut File, pending: &mut String) -> BenchResult<()> {
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes)?;
    // A line cut in the middle of a character is completed by the next read.
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let back = (error.as_bytes().len() - valid) as i64;
            reader.seek(SeekFrom::Current(-back))?;
            String::from_utf8_lossy(&error.as_bytes()[..valid]).into_owned()
        }
    };
    pending.push_str(&text);
    Ok(())
}

#[derive(Debug, PartialEq)]
enum Logged {
    Ready(SystemTime),
    Archived(SystemTime),
}

/// One line of the daemon's log (`[2026-12-01T10:02:43.806Z INFO  target] message`):
/// the start line, a `processed` line, or nothing of interest. Any other outcome
/// (a backlog file skipped or rejected) is an error: every file is new and valid.
fn parse_line(line: &str) -> BenchResult<Option<Logged>> {
    let Some(rest) = line.strip_prefix('[') else {
        return Ok(None);
    };
    let Some((stamp, rest)) = rest.split_once(' ') else {
        return Ok(None);
    };
    let Some((_, message)) = rest.split_once("] ") else {
        return Ok(None);
    };
    let word = message.split(' ').next().unwrap_or_default();
    let logged = match word {
        "serving" if message.starts_with("serving spool ") => Logged::Ready,
        "processed" => Logged::Archived,
        "skipped_duplicate" | "rejected" => {
            return Err(format!("a backlog file was not processed: {message}").into());
        }
        _ => return Ok(None),
    };
    let at: jiff::Timestamp = stamp
        .parse()
        .map_err(|e| format!("log time {stamp:?}: {e}"))?;
    Ok(Some(logged(system_time(at)?)))
}

fn system_time(at: jiff::Timestamp) -> BenchResult<SystemTime> {
    let millis =
        u64::try_from(at.as_millisecond()).map_err(|_| format!("log time {at} is before 1970"))?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(millis))
}

fn seconds_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        system_time(text.parse().unwrap()).unwrap()
    }

    #[test]
    fn parse_line_reads_the_start_and_the_outcome_lines() {
        assert_eq!(
            parse_line(
                "[2026-12-01T10:02:41.613Z INFO  spoolite::daemon] serving spool ./spool into ./spoolite.db (settle 0ns)"
            )
            .unwrap(),
            Some(Logged::Ready(at("2026-12-01T10:02:41.613Z")))
        );
        assert_eq!(
            parse_line(
                "[2026-12-01T10:02:43.806Z INFO  spoolite::daemon] processed backlog-000001.json 0eed9b00 events=1 inserted=1 3ms"
            )
            .unwrap(),
            Some(Logged::Archived(at("2026-12-01T10:02:43.806Z")))
        );
        assert_eq!(
            parse_line("[2026-12-01T10:02:41.613Z INFO  spoolite::store] database created")
                .unwrap(),
            None
        );
        assert_eq!(parse_line("   Compiling spoolite").unwrap(), None);
        assert!(
            parse_line("[2026-12-01T10:02:43.806Z WARN  spoolite::daemon] rejected x.json")
                .is_err()
        );
    }

    #[test]
    fn rates_count_the_first_and_the_last_files() {
        let backlog = Backlog {
            files: 4,
            from_spawn_s: 5.0,
            ready_s: 4.0,
            done_s: vec![1.0, 2.0, 3.0, 4.0],
        };
        assert_eq!(backlog.rate(), 1.0);
        assert_eq!(backlog.first_rate(2), 1.0);
        assert_eq!(backlog.last_rate(2), 1.0);
        let uneven = Backlog {
            done_s: vec![2.0, 4.0, 4.5, 5.0],
            ready_s: 5.0,
            ..backlog
        };
        assert_eq!(uneven.first_rate(2), 0.5);
        assert_eq!(uneven.last_rate(2), 2.0);
        assert_eq!(uneven.last_rate(4), 0.8);
    }
}
