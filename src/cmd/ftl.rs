//! `spoolite ftl` as a command: opens the database read-only, reads the rows of
//! `crew_flight`, `crew_duty` and `crew_fdp` that can overlap the rule set's
//! widest window in one pass, gathers them in a `Judge` and prints the table or
//! the JSON lines; `ftl plan` reads a plan and judges it on top of those rows
//! (`plan`), `ftl explain` traces one window (`explain`).

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::SystemTime;

use crate::cli::{FtlAction, FtlArgs, FtlExplainArgs, FtlPlanArgs};
use crate::ftl::span::{self, FULL, Weighted};
use crate::ftl::time::{self, MICROS_PER_SECOND, Micros, TimeBase};
use crate::ftl::{
    DutyType, Function, Judge, Limit, Line, Measure, Role, Rules, duty_weight, explain, plan,
    render,
};
use crate::store::crew_hours::{CrewHours, CrewRow, CrewSpan, EventRef, ExplainRow, ExplainRows};
use crate::store::{Db, MissingFile, StoreError, require_file};

/// Exit code when any limit is exceeded.
const EXIT_EXCEEDED: u8 = 1;
/// Exit code for an operating error (a missing, unreadable or older database).
const EXIT_ERROR: u8 = 2;

/// The largest plan read, in bytes: a year of every crew member's duties of a
/// large airline fits many times over.
const PLAN_BYTES_MAX: u64 = 64 << 20;

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
        "database {name} has schema version {found}, which has not the crew views of \
         this spoolite (crew_flight, crew_duty, crew_fdp); ftl only reads, so the daemon \
         must upgrade it first: start `spoolite run` (or run `spoolite ingest`) once \
         with this spoolite"
    )]
    NoViews { name: String, found: i64 },
    #[error("read crew hours: {0}")]
    Store(#[from] StoreError),
    #[error("read the plan {path}: {source}")]
    PlanFile { path: String, source: io::Error },
    #[error("the plan {path} is larger than {PLAN_BYTES_MAX} bytes")]
    PlanTooLarge { path: String },
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("{0}")]
    Explain(String),
}

/// `spoolite ftl`: exits 0 when no limit is exceeded, 1 when any is, 2 on an
/// operating error.
pub fn run(args: &FtlArgs) -> ExitCode {
    let at = args.at.unwrap_or_else(now);
    let outcome = match &args.action {
        None => judge_stored(args, at),
        Some(FtlAction::Plan(plan_args)) => judge_plan(args, plan_args, at),
        Some(FtlAction::Explain(explain_args)) => explain_window(args, explain_args, at),
    };
    let (text, exceeded) = match outcome {
        Ok(done) => done,
        Err(error) => {
            eprintln!("spoolite: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
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

/// `spoolite ftl`: the stored past at T; the text to print and whether anything
/// is exceeded.
fn judge_stored(args: &FtlArgs, at: Micros) -> Result<(String, bool), FtlError> {
    let crew = named_crew(&args.crew);
    let base = &args.time_zone;
    let mut hours = open(&args.db)?;
    let judge = read(&mut hours, args.rules, at, base, &crew)?;
    warn_without_rows(&mut hours, &judge, &crew)?;
    let mut lines = judge.lines(&crew);
    let exceeded = lines.iter().any(Line::exceeded);
    let text = if args.json {
        render::json_lines(&lines, args.rules, at)
    } else {
        crate::ftl::by_headroom(&mut lines);
        render::table(&lines, args.rules, at, base)
    };
    Ok((text, exceeded))
}

/// Warns on stderr of each crew id named that has no row in any window read
/// (its lines are zeros), naming the stored ids that differ from it only in
/// letter case.
fn warn_without_rows(
    hours: &mut CrewHours,
    judge: &Judge,
    crew: &[String],
) -> Result<(), FtlError> {
    for id in crew.iter().filter(|id| !judge.has_rows(id)) {
        let twins: Vec<String> = hours
            .case_twins(id)?
            .into_iter()
            .filter(|t| t != id)
            .collect();
        match twins.is_empty() {
            true => eprintln!(
                "spoolite: warning: crew id {id:?} has no flight, duty or flight duty period \
                 in any window: its lines are zeros"
            ),
            false => eprintln!(
                "spoolite: warning: crew id {id:?} has no flight, duty or flight duty period \
                 in any window: its lines are zeros; stored ids that differ only in letter \
                 case: {}",
                twins.join(", ")
            ),
        }
    }
    Ok(())
}

/// `spoolite ftl plan`: the plan judged on top of the stored past of the crew it
/// names.
fn judge_plan(
    args: &FtlArgs,
    plan_args: &FtlPlanArgs,
    at: Micros,
) -> Result<(String, bool), FtlError> {
    let text = read_plan(&plan_args.file)?;
    let planned = plan::parse(&text, at)?;
    let mut crew: Vec<String> = planned.iter().map(|item| item.crew_id.clone()).collect();
    crew.sort();
    crew.dedup();
    let base = &args.time_zone;
    let history = match crew.is_empty() {
        // An empty plan judges nothing: the database is not even asked.
        true => Judge::new(args.rules, at, base.clone()),
        false => read(&mut open(&args.db)?, args.rules, at, base, &crew)?,
    };
    let mut lines = plan::judge(history, &planned);
    let exceeded = lines.iter().any(plan::PlanLine::exceeded);
    let text = if args.json {
        render::plan_json_lines(&lines, args.rules)
    } else {
        lines.sort_by_key(plan::PlanLine::headroom);
        render::plan_table(&lines, args.rules, at, base)
    };
    Ok((text, exceeded))
}

/// The window `--window` (and `--measure`) names in `rules`.
fn named_limit(
    rules: Rules,
    window: &str,
    measure: Option<&str>,
) -> Result<&'static Limit, FtlError> {
    let found: Vec<&'static Limit> = rules
        .limits()
        .iter()
        .filter(|l| l.window == window && measure.is_none_or(|m| l.measure.name() == m))
        .collect();
    match found[..] {
        [limit] => Ok(limit),
        [] => {
            let names: Vec<String> = (rules.limits().iter())
                .map(|l| format!("{} {}", l.measure.name(), l.window))
                .collect();
            Err(FtlError::Explain(format!(
                "{} has no window {window}{}; its windows: {}",
                rules.name(),
                measure.map(|m| format!(" of {m}")).unwrap_or_default(),
                names.join(", ")
            )))
        }
        _ => Err(FtlError::Explain(format!(
            "{} names two windows {window} ({}): pass --measure",
            rules.name(),
            found
                .iter()
                .map(|l| l.measure.name())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// One line of `ftl explain` with its events.
struct ExplainLine {
    item: &'static str,
    id: Option<String>,
    start: Option<String>,
    end: Option<String>,
    weight: f64,
    micros: Micros,
    events: Vec<EventRef>,
}

/// `spoolite ftl explain`: the items behind one crew member's window at T.
fn explain_window(
    args: &FtlArgs,
    explain_args: &FtlExplainArgs,
    at: Micros,
) -> Result<(String, bool), FtlError> {
    let crew = named_crew(&args.crew);
    let [crew_id] = &crew[..] else {
        return Err(FtlError::Explain(format!(
            "explain takes exactly one --crew ID ({} given)",
            crew.len()
        )));
    };
    let rules = args.rules;
    let limit = named_limit(rules, &explain_args.window, explain_args.measure.as_deref())?;
    let base = &args.time_zone;
    let mut hours = open(&args.db)?;
    let from = limit.span.start(at, base);
    let reads_from = Judge::new(rules, at, base.clone()).duties_from();
    let bound = |at: Micros| time::format_seconds(at).trim_end_matches('Z').to_owned();
    let after = bound(from.unwrap_or(reads_from) - MICROS_PER_SECOND);
    let span = CrewSpan {
        duties_after: after.clone(),
        after,
        before: bound(at + MICROS_PER_SECOND),
        fdps: true,
    };
    let rows = hours.explain_rows(&span, crew_id)?;
    let (lines, total) = match (limit.measure, from) {
        (Measure::Rest, _) => rest_lines(&mut hours, &rows, limit, rules, at, base)?,
        (measure, Some(from)) => measured_lines(&mut hours, &rows, measure, rules, from, at)?,
        (_, None) => unreachable!("only a rest window starts per crew member"),
    };
    // The window's flags, as `spoolite ftl` gives them.
    let flags: Vec<&'static str> = read(&mut hours, rules, at, base, &crew)?
        .lines(&crew)
        .into_iter()
        .find(|line| std::ptr::eq(line.limit, limit))
        .map(|line| line.flags.iter().map(|flag| flag.code()).collect())
        .unwrap_or_default();
    let text = match args.json {
        true => explain_json(&lines, (crew_id, &flags), rules, at, limit),
        false => explain_table(&lines, (crew_id, &flags), rules, at, limit, total),
    };
    Ok((text, false))
}

/// Whether `row` counts under `rules`: FAA's limits are flight crew's alone.
fn judged(rules: Rules, row: &ExplainRow) -> bool {
    rules == Rules::Easa || row.function == Function::FlightCrew.as_str()
}

/// `row` as an item of `explain`, at `weight`; `None` when its instants do not
/// read (a view never holds such a row).
fn explain_item(row: &ExplainRow, weight: u16) -> Option<explain::Item> {
    Some(explain::Item {
        id: row.id.clone(),
        start: time::parse_instant(&row.start)?,
        end: match &row.end {
            Some(end) => Some(time::parse_instant(end)?),
            None => None,
        },
        weight,
    })
}

/// A rest window's line: the free span that ends the rest, with the duty end
/// where it begins and the duty start where it ends; and the minutes it holds.
fn rest_lines(
    hours: &mut CrewHours,
    rows: &ExplainRows,
    limit: &Limit,
    rules: Rules,
    at: Micros,
    base: &TimeBase,
) -> Result<(Vec<ExplainLine>, Micros), FtlError> {
    let duties = || rows.duties.iter().filter(|row| judged(rules, row));
    let busy: Vec<Weighted> = duties()
        .filter_map(|row| explain_item(row, FULL))
        .map(|i| Weighted {
            start: i.start,
            end: i.end.unwrap_or(at).min(at),
            weight: FULL,
        })
        .collect();
    let Some((free, used)) = explain::free_span(limit.span, &span::pieces(&busy), at, base) else {
        return Ok((Vec::new(), 0));
    };
    let mut events = Vec::new();
    // The duty that ends where the free span begins, and the one that begins
    // where it ends.
    for row in duties() {
        let start = time::parse_instant(&row.start);
        let end = row.end.as_deref().and_then(time::parse_instant);
        if free.start.is_some() && end == free.start {
            let text = row.end.as_deref().unwrap_or_default();
            events.extend(hours.event(&row.id, "duty_end", text)?);
        }
        if start == Some(free.end) && free.end < at {
            events.extend(hours.event(&row.id, "duty_start", &row.start)?);
        }
    }
    let line = ExplainLine {
        item: "free_span",
        id: None,
        start: free.start.map(time::format_millis),
        end: Some(time::format_millis(free.end)),
        weight: 1.0,
        micros: used,
        events,
    };
    Ok((vec![line], used))
}

/// A summed window's lines: each flight, duty or flight duty period with the
/// minutes it puts into the window from `from` to `at`, and their total.
fn measured_lines(
    hours: &mut CrewHours,
    rows: &ExplainRows,
    measure: Measure,
    rules: Rules,
    from: Micros,
    at: Micros,
) -> Result<(Vec<ExplainLine>, Micros), FtlError> {
    let (source, what): (&[ExplainRow], &'static str) = match measure {
        Measure::FlightTime => (&rows.flights, "flight"),
        Measure::Duty => (&rows.duties, "duty"),
        _ => (&rows.fdps, "fdp"),
    };
    let items: Vec<explain::Item> = source
        .iter()
        .filter(|row| {
            judged(rules, row) && (measure != Measure::FlightTime || row.role == "operating")
        })
        .filter_map(|row| {
            let weight = match measure {
                Measure::Duty => duty_weight(DutyType::from_text(&row.duty_type)),
                _ => FULL,
            };
            explain_item(row, weight)
        })
        .collect();
    let mut lines = Vec::new();
    let mut total: Micros = 0;
    for found in explain::lines(items, from, at) {
        total += found.micros;
        let row = source
            .iter()
            .find(|row| {
                row.id == found.item.id && time::parse_instant(&row.start) == Some(found.item.start)
            })
            .expect("an item comes from a row");
        let events = item_events(hours, measure, row, rows)?;
        lines.push(ExplainLine {
            item: what,
            id: Some(row.id.clone()),
            start: Some(row.start.clone()),
            end: row.end.clone(),
            weight: f64::from(found.item.weight) / f64::from(FULL),
            micros: found.micros,
            events,
        });
    }
    Ok((lines, total))
}

/// The events that set an item's start and end: a flight's off-blocks and
/// on-blocks, a duty's start and end, a period's duty start and the on-blocks
/// (or duty end) that ends it.
fn item_events(
    hours: &mut CrewHours,
    measure: Measure,
    row: &ExplainRow,
    rows: &crate::store::crew_hours::ExplainRows,
) -> Result<Vec<EventRef>, FtlError> {
    let mut events = Vec::new();
    let mut add = |hours: &mut CrewHours, id: &str, kind: &str, at: &str| -> Result<(), FtlError> {
        events.extend(hours.event(id, kind, at)?);
        Ok(())
    };
    match measure {
        Measure::FlightTime => {
            add(hours, &row.id, "off_blocks", &row.start)?;
            if let Some(end) = &row.end {
                add(hours, &row.id, "on_blocks", end)?;
            }
        }
        _ => {
            add(hours, &row.id, "duty_start", &row.start)?;
            let Some(end) = &row.end else {
                return Ok(events);
            };
            let duty_end = rows
                .duties
                .iter()
                .any(|d| d.id == row.id && d.end.as_ref() == Some(end));
            if measure == Measure::Duty || duty_end {
                add(hours, &row.id, "duty_end", end)?;
            } else if let Some(flight) = rows
                .flights
                .iter()
                .find(|f| f.role == "operating" && f.end.as_ref() == Some(end))
            {
                add(hours, &flight.id, "on_blocks", end)?;
            }
        }
    }
    Ok(events)
}

/// One `explain --json` object, with the contract's fields in its order.
#[derive(serde::Serialize)]
struct ExplainJson<'a> {
    crew_id: &'a str,
    rules: &'static str,
    at: &'a str,
    measure: &'static str,
    window: &'static str,
    item: &'static str,
    id: Option<&'a str>,
    start: Option<&'a str>,
    end: Option<&'a str>,
    weight: f64,
    minutes: f64,
    flags: &'a [&'static str],
    events: &'a [EventRef],
}

/// `explain --json`: one object per line.
fn explain_json(
    lines: &[ExplainLine],
    (crew_id, flags): (&str, &[&'static str]),
    rules: Rules,
    at: Micros,
    limit: &Limit,
) -> String {
    let at = time::format_millis(at);
    let mut out = String::new();
    for line in lines {
        let json = ExplainJson {
            crew_id,
            rules: rules.name(),
            at: &at,
            measure: limit.measure.name(),
            window: limit.window,
            item: line.item,
            id: line.id.as_deref(),
            start: line.start.as_deref(),
            end: line.end.as_deref(),
            weight: line.weight,
            minutes: render::minutes_hundredths(line.micros),
            flags,
            events: &line.events,
        };
        out.push_str(&serde_json::to_string(&json).expect("a line serialises"));
        out.push('\n');
    }
    out
}

/// `explain`'s text: a heading with the window's figure, one row per item, and
/// under each the events that bound it.
fn explain_table(
    lines: &[ExplainLine],
    (crew_id, flags): (&str, &[&'static str]),
    rules: Rules,
    at: Micros,
    limit: &Limit,
    total: Micros,
) -> String {
    let mut out = format!(
        "{crew_id}: {} {} {} at {}: {} minutes of {} ({} line{}){}\n",
        rules.name(),
        limit.measure.name(),
        limit.window,
        time::format_millis(at),
        render::minutes_hundredths(total),
        limit.limit_hours * 60,
        lines.len(),
        if lines.len() == 1 { "" } else { "s" },
        match flags.is_empty() {
            true => String::new(),
            false => format!(" ! {}", flags.join(", ")),
        }
    );
    for line in lines {
        out.push_str(&format!(
            "{:<9} {:<20} {:<24} {:<24} weight {:<4} {:>9} min\n",
            line.item,
            line.id.as_deref().unwrap_or("-"),
            line.start.as_deref().unwrap_or("(before any duty)"),
            line.end.as_deref().unwrap_or("(open)"),
            line.weight,
            format!("{:.2}", render::minutes_hundredths(line.micros)),
        ));
        for event in &line.events {
            out.push_str(&format!(
                "    {} {} revision {} key {} batch {} file {}\n",
                event.event_kind,
                event.instant_utc,
                event.source_revision,
                event.idempotency_key,
                event.batch_digest,
                event.file_name
            ));
        }
    }
    out
}

/// The plan's text, from a file or standard input (`-`), at most
/// `PLAN_BYTES_MAX` bytes.
fn read_plan(path: &std::path::Path) -> Result<String, FtlError> {
    let name = path.display().to_string();
    let failed = |source| FtlError::PlanFile {
        path: name.clone(),
        source,
    };
    let reader: Box<dyn Read> = match path.as_os_str() == "-" {
        true => Box::new(io::stdin().lock()),
        false => Box::new(std::fs::File::open(path).map_err(failed)?),
    };
    let mut bytes = Vec::new();
    reader
        .take(PLAN_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > PLAN_BYTES_MAX {
        return Err(FtlError::PlanTooLarge { path: name });
    }
    String::from_utf8(bytes)
        .map_err(|_| failed(io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")))
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

/// Reads the rows that can count at `at` (of the crew named, or everyone's) into
/// a judge.
fn read(
    hours: &mut CrewHours,
    rules: crate::ftl::Rules,
    at: Micros,
    base: &TimeBase,
    crew: &[String],
) -> Result<Judge, FtlError> {
    // One judge per view, each fed on its own thread, merged at the end.
    let mut judge = Judge::new(rules, at, base.clone());
    let mut duties = Judge::new(rules, at, base.clone());
    // Bounds a second wider than the span, in whole seconds (what lies between
    // counts nothing: `Judge` cuts every row at the window's start and at T).
    let bound = |at: Micros| time::format_seconds(at).trim_end_matches('Z').to_owned();
    let span = CrewSpan {
        after: bound(judge.reads_from() - MICROS_PER_SECOND),
        duties_after: bound(judge.duties_from() - MICROS_PER_SECOND),
        before: bound(at + MICROS_PER_SECOND),
        fdps: judge.reads_fdps(),
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
            "{unreadable} rows of crew_flight, crew_duty or crew_fdp hold a time that is not an instant; left out"
        );
    }
    Ok(judge)
}

/// Adds one row to the judge; `None` when a time in it is not an instant.
fn add_row(judge: &mut Judge, row: CrewRow<'_>) -> Option<()> {
    let function = |text: &str| Function::parse(text).unwrap_or(Function::FlightCrew);
    let maybe = |text: Option<&str>| match text {
        Some(text) => time::parse_instant(text).map(Some),
        None => Some(None),
    };
    match row {
        CrewRow::Flight {
            crew_id,
            role,
            function: listed,
            off_blocks_utc,
            on_blocks_utc,
            block_time,
        } => {
            let off_blocks = time::parse_instant(off_blocks_utc)?;
            let on_blocks = maybe(on_blocks_utc)?;
            let how = (Role::from_view(role), function(listed));
            match (block_time, on_blocks) {
                (true, Some(on_blocks)) => judge.add_flight(crew_id, how, off_blocks, on_blocks),
                _ => judge.add_unblocked(crew_id, how, off_blocks, on_blocks),
            }
        }
        CrewRow::Duty {
            crew_id,
            function: listed,
            duty_type,
            duty_start_utc,
            duty_end_utc,
        } => {
            let span = (time::parse_instant(duty_start_utc)?, maybe(duty_end_utc)?);
            let duty_type = DutyType::from_text(duty_type);
            judge.add_duty(crew_id, span, duty_type, function(listed));
        }
        CrewRow::Fdp {
            crew_id,
            function: listed,
            fdp_start_utc,
            fdp_end_utc,
        } => {
            let span = (time::parse_instant(fdp_start_utc)?, maybe(fdp_end_utc)?);
            judge.add_fdp(crew_id, span, function(listed));
        }
    }
    Some(())
}

/// The database for reading, with the crew views of this spoolite.
fn open(db: &Db) -> Result<CrewHours, FtlError> {
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
    Ok(hours)
}
