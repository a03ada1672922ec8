//! `spoolite ftl` as a command: opens the database read-only, reads the rows of
//! `crew_flight` and `crew_duty` that can overlap the rule set's widest window in
//! one pass, sums them in a `Judge` and prints the table or the JSON lines.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::SystemTime;

use super::time::{self, MICROS_PER_DAY, MICROS_PER_SECOND, Micros, TimeBase};
use super::{DutyType, Judge, Line, Role, render};
use crate::cli::FtlArgs;
use crate::store::crew_hours::{CrewHours, CrewRow, CrewSpan};
use crate::store::{Db, MissingFile, StoreError, require_file};

/// How far past T the rows of a duty running at T are read: the flights that may
/// end its flight duty period (a duty runs a day at most, but for one left open).
const FDP_LOOKAHEAD: Micros = MICROS_PER_DAY;

/// Exit code when any limit is exceeded.
const EXIT_EXCEEDED: u8 = 1;
/// Exit code for an operating error (a missing, unreadable or older database).
const EXIT_ERROR: u8 = 2;

#[derive(Debug, thiserror::Error)]
enum FtlError {
    #[error(transparent)]
    File(#[from] MissingFile),
    #[error(
        "database {0} holds no spoolite tables yet; start `spoolite run` (or run \
         `spoolite ingest`) once, or point --db at the site's database"
    )]
    NoSchema(String),
    #[error(
        "database {name} has schema version {found}, which has no crew views (crew_flight, \
         crew_duty); ftl only reads, so the daemon must upgrade it first: start \
         `spoolite run` (or run `spoolite ingest`) once with this spoolite"
    )]
    NoViews { name: String, found: i64 },
    #[error("read crew hours: {0}")]
    Store(#[from] StoreError),
}

/// `spoolite ftl`: exits 0 when no limit is exceeded, 1 when any is, 2 on an
/// operating error.
pub fn run(args: &FtlArgs) -> ExitCode {
    let at = args.at.unwrap_or_else(now);
    let crew = named_crew(&args.crew);
    let base = args.time_zone.clone();
    let mut lines = match judge(&args.db, args.rules, at, &base, &crew) {
        Ok(lines) => lines,
        Err(error) => {
            eprintln!("spoolite: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let exceeded = lines.iter().any(Line::exceeded);
    let text = if args.json {
        render::json_lines(&lines, args.rules, at)
    } else {
        super::by_headroom(&mut lines);
        render::table(&lines, args.rules, at, &base)
    };
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A closed stdout (`| head`) is the reader's choice, not an error.
        Err(error) if error.kind() != io::ErrorKind::BrokenPipe => {
            eprintln!("spoolite: write to stdout: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
        _ => {}
    }
    match exceeded {
        true => ExitCode::from(EXIT_EXCEEDED),
        false => ExitCode::SUCCESS,
    }
}

/// Now, to the millisecond (the precision `at` is printed with).
fn now() -> Micros {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX / 1000) * 1000
}

/// The `--crew` ids, trimmed as the views' ids are, each once.
fn named_crew(crew: &[String]) -> Vec<String> {
    let mut named: Vec<String> = crew.iter().map(|id| id.trim().to_owned()).collect();
    named.sort();
    named.dedup();
    named
}

/// Reads the rows that can count at `at` and judges them.
fn judge(
    db: &Db,
    rules: super::Rules,
    at: Micros,
    base: &TimeBase,
    crew: &[String],
) -> Result<Vec<Line>, FtlError> {
    if let Some(path) = db.file() {
        require_file(path)?;
    }
    let mut hours = CrewHours::open(db)?;
    if !hours.has_views()? {
        let found = hours.schema_version()?;
        let name = db.name();
        return Err(match found {
            0 => FtlError::NoSchema(name),
            _ => FtlError::NoViews { name, found },
        });
    }
    // One judge per view, each fed on its own thread, merged at the end.
    let mut judge = Judge::new(rules, at, base.clone());
    let mut duties = Judge::new(rules, at, base.clone());
    // Bounds a second wider than the span, in whole seconds (what lies between
    // counts nothing: `Judge` cuts every row at the window's start and at T).
    // Rows up to a day past T are read too: a duty running at T has its flight
    // duty period end at its last flight's on-blocks, which may come after T.
    let bound = |at: Micros| time::format_seconds(at).trim_end_matches('Z').to_owned();
    let span = CrewSpan {
        after: bound(judge.reads_from() - MICROS_PER_SECOND),
        before: bound(at + FDP_LOOKAHEAD + MICROS_PER_SECOND),
    };
    let (mut unreadable, mut unreadable_duties) = (0u64, 0u64);
    hours.read(
        &span,
        crew,
        |row| unreadable += u64::from(add_row(&mut judge, row).is_none()),
        |row| unreadable_duties += u64::from(add_row(&mut duties, row).is_none()),
    )?;
    judge.merge(duties);
    unreadable += unreadable_duties;
    if unreadable > 0 {
        log::warn!(
            "{unreadable} rows of crew_flight or crew_duty hold a time that is not an instant; left out"
        );
    }
    Ok(judge.lines(crew))
}

/// Adds one row to the judge; `None` when a time in it is not an instant.
fn add_row(judge: &mut Judge, row: CrewRow<'_>) -> Option<()> {
    match row {
        CrewRow::Flight {
            crew_id,
            role,
            off_blocks_utc,
            on_blocks_utc,
        } => {
            let off_blocks = time::parse_instant(off_blocks_utc)?;
            let on_blocks = time::parse_instant(on_blocks_utc)?;
            judge.add_flight(crew_id, Role::from_view(role), off_blocks, on_blocks);
        }
        CrewRow::Duty {
            crew_id,
            duty_start_utc,
            duty_end_utc,
        } => {
            let start = time::parse_instant(duty_start_utc)?;
            let end = match duty_end_utc {
                Some(end) => Some(time::parse_instant(end)?),
                None => None,
            };
            judge.add_duty(crew_id, start, end, DutyType::FlightDuty);
        }
    }
    Some(())
}
