//! `spoolite check`: runs every check of `store::check::CHECKS` on a database
//! opened read-only (an analyst's account suffices), `--jobs` of them at once on
//! a connection each, prints one line (or one JSON object) per check in their
//! order, and exits 0 when all hold, 1 when any fails, 2 when the database cannot
//! be read (a check that could not run says why, and the rest still run). On a
//! terminal, stderr shows which checks run and for how long.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::CheckArgs;
use crate::store::check::{CHECKS, Check, Finding, Options};
use crate::store::{Db, Store, StoreError};

/// Exit code when any check fails.
const EXIT_FAILED: u8 = 1;
/// Exit code when the database cannot be read.
const EXIT_ERROR: u8 = 2;

/// The width of the name column of the text lines.
const NAME_WIDTH: usize = 20;

pub fn run(args: &CheckArgs) -> ExitCode {
    let open = || {
        Store::open_read_only(&args.db).and_then(|mut store| {
            store.require_current_schema()?;
            Ok(store)
        })
    };
    let first = match open() {
        Ok(store) => store,
        Err(error) => {
            eprintln!("spoolite: check {}: {error}", args.db);
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let options = Options { quick: args.quick };
    // A connection that cannot be opened beside the first (a server's connection
    // limit) leaves its checks to the others.
    let jobs = usize::from(args.jobs).min(CHECKS.len());
    let mut stores = vec![first];
    stores.extend((1..jobs).map_while(|_| open().ok()));
    if stores.len() < jobs {
        log::warn!(
            "check {}: {} of {jobs} connections opened; the checks run {} at a time",
            args.db,
            stores.len(),
            stores.len()
        );
    }
    if let Db::Sqlite(path) = &args.db {
        prewarm(path);
    }
    let terminal = std::io::stderr().is_terminal();
    let mut code = 0;
    run_checks(stores, &options, terminal, |check, result, elapsed| {
        let (status, finding) = match result {
            Ok(finding) => {
                if !finding.ok {
                    code = code.max(EXIT_FAILED);
                }
                (if finding.ok { "ok" } else { "FAIL" }, finding)
            }
            Err(error) => {
                code = EXIT_ERROR;
                let detail = format!("could not be run: {error}");
                ("ERROR", Finding::fails(detail))
            }
        };
        print_line(args.json, check, status, &finding, elapsed);
    });
    ExitCode::from(code)
}

/// The size of a read of the database file by `prewarm`.
const PREWARM_READ_BYTES: usize = 1 << 20;

/// Reads the SQLite database file once from start to end, on a thread of its
/// own, when it fits twice in the memory available: the checks read every page
/// (`quick_check`) and every event's payload, in b-tree order, one page at a
/// time, which from a disk is many times slower than the same pages read in file
/// order (at 10M events, 6.0 GiB: 134 s for `quick_check` alone against 6.7 s for
/// the whole file; BENCHMARKS.md, "check"). The pages so read are in the page
/// cache when the checks come to them. A file that would not fit is not read: its
/// pages would be gone again before their turn. The thread is left to end with
/// the process; an error only ends it.
fn prewarm(path: &Path) {
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    let file_bytes = file.metadata().map_or(0, |m| m.len());
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| available_bytes(&text));
    if available.is_none_or(|available| file_bytes.saturating_mul(2) > available) {
        log::debug!(
            "check: {file_bytes} bytes, {available:?} available: the file is not read ahead"
        );
        return;
    }
    log::debug!("check: reading the database file ahead ({file_bytes} bytes)");
    std::thread::spawn(move || {
        let mut file = file;
        let mut buffer = vec![0; PREWARM_READ_BYTES];
        while matches!(std::io::Read::read(&mut file, &mut buffer), Ok(read) if read > 0) {}
    });
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn available_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// What one check gave and how long it took.
type Ran = (Result<Finding, StoreError>, Duration);

/// Runs every check of `CHECKS`, as many at once as there are `stores` (one
/// thread each, taking the next check of the longest-first order until none is
/// left), and hands each result to `report` in `CHECKS`' order, as soon as it and
/// every check before it have ended.
fn run_checks(
    stores: Vec<Store>,
    options: &Options,
    terminal: bool,
    mut report: impl FnMut(&Check, Result<Finding, StoreError>, Duration),
) {
    let mut order: Vec<usize> = (0..CHECKS.len()).collect();
    order.sort_by_key(|&at| std::cmp::Reverse((CHECKS[at].at_10m_seconds)(options)));
    let next = AtomicUsize::new(0);
    let progress = Progress::new(terminal);
    std::thread::scope(|scope| {
        let (send, receive) = mpsc::channel::<(usize, Ran)>();
        for mut store in stores {
            let (send, order, next, progress) = (send.clone(), &order, &next, &progress);
            scope.spawn(move || {
                while let Some(&at) = order.get(next.fetch_add(1, AtomicOrdering::Relaxed)) {
                    progress.started(at);
                    let started = Instant::now();
                    let result = store.check(&CHECKS[at], options);
                    progress.ended(at);
                    if send.send((at, (result, started.elapsed()))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(send);
        let mut ended: Vec<Option<Ran>> = (0..CHECKS.len()).map(|_| None).collect();
        let mut printed = 0;
        for (at, ran) in receive {
            ended[at] = Some(ran);
            while let Some((result, elapsed)) = ended.get_mut(printed).and_then(Option::take) {
                progress.suspend(|| report(&CHECKS[printed], result, elapsed));
                printed += 1;
            }
        }
    });
    progress.finish();
}

/// On a terminal, a line on stderr naming the checks that run and the seconds
/// the command has taken so far (a check is one statement: there is no fraction
/// done to show), above which the result lines are printed; cleared at the end.
struct Progress {
    spinner: Option<indicatif::ProgressBar>,
    running: Mutex<Vec<usize>>,
}

impl Progress {
    fn new(terminal: bool) -> Progress {
        let spinner = terminal.then(|| {
            let spinner = indicatif::ProgressBar::new_spinner();
            spinner.set_style(
                indicatif::ProgressStyle::with_template("check {spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            spinner.enable_steady_tick(Duration::from_millis(200));
            spinner
        });
        Progress {
            spinner,
            running: Mutex::new(Vec::new()),
        }
    }

    fn started(&self, at: usize) {
        self.update(|running| running.push(at));
    }

    fn ended(&self, at: usize) {
        self.update(|running| running.retain(|&other| other != at));
    }

    fn update(&self, change: impl FnOnce(&mut Vec<usize>)) {
        let Some(spinner) = &self.spinner else {
            return;
        };
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut running);
        running.sort_unstable();
        let names: Vec<String> = running
            .iter()
            .map(|&at| format!("{}/{} {}", at + 1, CHECKS.len(), CHECKS[at].name))
            .collect();
        spinner.set_message(names.join(", "));
    }

    fn suspend(&self, work: impl FnOnce()) {
        match &self.spinner {
            Some(spinner) => spinner.suspend(work),
            None => work(),
        }
    }

    fn finish(&self) {
        if let Some(spinner) = &self.spinner {
            spinner.finish_and_clear();
        }
    }
}

fn print_line(json: bool, check: &Check, status: &str, finding: &Finding, elapsed: Duration) {
    let mut out = std::io::stdout().lock();
    let line = if json {
        json!({
            "check": check.name,
            "ok": finding.ok,
            "detail": finding.detail,
        })
        .to_string()
    } else {
        format!(
            "{status:<5} {:<NAME_WIDTH$} {} ({:.2}s)",
            check.name,
            finding.detail,
            elapsed.as_secs_f64()
        )
    };
    // A closed stdout (`| head`) ends nothing early: the exit code still tells.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_available_is_read_from_meminfo() {
        let meminfo = "MemTotal:       24683604 kB\nMemFree:        23442000 kB\n\
                       MemAvailable:   23281000 kB\nBuffers:           10 kB\n";
        assert_eq!(available_bytes(meminfo), Some(23_281_000 * 1024));
        assert_eq!(available_bytes("MemTotal: 1 kB\n"), None);
        assert_eq!(available_bytes("MemAvailable: many kB\n"), None);
    }
}
