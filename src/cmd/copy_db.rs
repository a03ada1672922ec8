//! `spoolite copy-db --from FILE --to URI`: moves a workstation's SQLite database
//! into PostgreSQL when one workstation is outgrown, every table with it (the
//! inbox too, so that files ingested before are still skipped as duplicates).
//! The database work is `store::copy`; this is the command around it:
//! a progress bar on a terminal, one summary line, the exit code.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use crate::cli::CopyDbArgs;
use crate::store::Db;
use crate::store::copy::{self, CopyError, CopyOptions, CopyProgress};

/// Exit code when the target was refused: it holds rows (without
/// `--into-non-empty`), or rows the source holds too.
const EXIT_REFUSED: u8 = 1;
/// Exit code for any other error: the source missing or unreadable, the target
/// unreachable, counts that differ after the copy.
const EXIT_ERROR: u8 = 2;

pub fn run(args: &CopyDbArgs) -> ExitCode {
    let Db::Postgres(to) = &args.to else {
        eprintln!("spoolite: {}", CopyError::TargetNotPostgres(args.to.name()));
        return ExitCode::from(EXIT_ERROR);
    };
    let bar = std::io::stderr().is_terminal().then(progress_bar);
    let report = |progress: CopyProgress| {
        if let Some(bar) = &bar {
            bar.set_length(progress.rows_total);
            bar.set_position(progress.rows_done);
            bar.set_message(progress.table);
        }
    };
    let started = Instant::now();
    let options = CopyOptions {
        into_non_empty: args.into_non_empty,
    };
    let result = copy::sqlite_into_postgres(&args.from, to, options, &report);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    match result {
        Ok(copied) => {
            let source = copied.source;
            let shifted = if copied.change_seq_shift > 0 {
                format!(
                    " (each copied change_seq raised by {}, above the target's)",
                    copied.change_seq_shift
                )
            } else {
                String::new()
            };
            println!(
                "copied {} batches, {} events ({} retracted), {} quarantined rows and {} \
                 flights from {} into {} in {:.2}s; counts verified; the next change_seq \
                 is {}{shifted}",
                source.batches,
                source.events,
                source.events - source.live,
                source.quarantined,
                source.flights,
                args.from.display(),
                to.name(),
                started.elapsed().as_secs_f64(),
                copied.next_change_seq,
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("spoolite: {error}");
            let refused = matches!(
                error,
                CopyError::NotEmpty { .. } | CopyError::Overlap { .. }
            );
            ExitCode::from(if refused { EXIT_REFUSED } else { EXIT_ERROR })
        }
    }
}

/// Rows copied of every table's, with the table being copied beside it.
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "copy-db [{bar:20}] {human_pos}/{human_len} rows  {eta} left  {wide_msg}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}
