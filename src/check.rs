//! `spoolite check`: runs every check of `store::check::CHECKS` on a database
//! opened read-only (an analyst's account suffices), prints one line (or one
//! JSON object) per check, and exits 0 when all hold, 1 when any fails, 2 when
//! the database cannot be read (a check that could not run says why, and the
//! rest still run). On a terminal, stderr shows which check runs and for how long.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::CheckArgs;
use crate::store::Store;
use crate::store::check::{CHECKS, Check, Finding, Options};

/// Exit code when any check fails.
const EXIT_FAILED: u8 = 1;
/// Exit code when the database cannot be read.
const EXIT_ERROR: u8 = 2;

/// The width of the name column of the text lines.
const NAME_WIDTH: usize = 20;

pub fn run(args: &CheckArgs) -> ExitCode {
    let mut store = match Store::open_read_only(&args.db).and_then(|mut store| {
        store.require_current_schema()?;
        Ok(store)
    }) {
        Ok(store) => store,
        Err(error) => {
            eprintln!("spoolite: check {}: {error}", args.db);
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let terminal = std::io::stderr().is_terminal();
    let options = Options { quick: args.quick };
    let mut code = 0;
    for (at, check) in CHECKS.iter().enumerate() {
        let started = Instant::now();
        let shown = format!("{}/{} {}", at + 1, CHECKS.len(), check.name);
        let result = with_progress(terminal, &shown, || store.check(check, &options));
        let elapsed = started.elapsed();
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
    }
    ExitCode::from(code)
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

/// Runs `work` with, on a terminal, a line on stderr naming the check (`2/6
/// inbox_counts`) and the seconds it has taken so far (a check is one statement:
/// there is no fraction done to show), cleared when it ends.
fn with_progress<T>(terminal: bool, shown: &str, work: impl FnOnce() -> T) -> T {
    if !terminal {
        return work();
    }
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template("check {spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    spinner.set_message(shown.to_owned());
    spinner.enable_steady_tick(Duration::from_millis(200));
    let result = work();
    spinner.finish_and_clear();
    result
}
