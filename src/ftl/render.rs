//! `ftl`'s output: the text table a person reads at a glance, and the JSON lines
//! with the contract's fields. No I/O: both return text.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;

use super::plan::PlanLine;
use super::time::{MICROS_PER_MINUTE, Micros, TimeBase, format_millis};
use super::{Flag, Line, Measure, Rules};

/// The mark on a window whose limit is exceeded.
pub const EXCEEDED: &str = "EXCEEDED";

/// Hundredths of a minute in microseconds: the JSON's minutes are rounded to 0.01.
const MICROS_PER_HUNDREDTH: Micros = MICROS_PER_MINUTE / 100;

/// One JSON line, with the contract's fields in its order.
#[derive(Debug, Serialize)]
struct JsonLine<'a> {
    crew_id: &'a str,
    rules: &'static str,
    at: &'a str,
    measure: &'static str,
    window: &'static str,
    used_minutes: f64,
    limit_minutes: i64,
    headroom_minutes: f64,
    exceeded: bool,
    flags: Vec<&'static str>,
}

/// The flags' codes.
fn codes(flags: &[Flag]) -> Vec<&'static str> {
    flags.iter().map(|flag| flag.code()).collect()
}

/// The mark of a line with flags, and the legend after a table: one line per
/// code found, with how many crew members it concerns.
const FLAGGED: &str = "!";

fn legend<'a>(out: &mut String, lines: impl Iterator<Item = (&'a str, &'a [Flag])>) {
    let mut crew: Vec<(Flag, &str)> = lines
        .flat_map(|(crew_id, flags)| flags.iter().map(move |flag| (*flag, crew_id)))
        .collect();
    crew.sort_unstable();
    crew.dedup();
    for flag in Flag::ALL {
        let n = crew.iter().filter(|(f, _)| *f == flag).count();
        if n > 0 {
            let _ = writeln!(
                out,
                "{FLAGGED} {}: {n} crew member{}: {}",
                flag.code(),
                if n == 1 { "" } else { "s" },
                flag.meaning()
            );
        }
    }
}

/// The used time in hundredths of a minute, rounded half up.
fn used_hundredths(line: &Line) -> i64 {
    hundredths(line.used)
}

/// Microseconds in hundredths of a minute, rounded half up.
fn hundredths(micros: Micros) -> i64 {
    (micros + MICROS_PER_HUNDREDTH / 2) / MICROS_PER_HUNDREDTH
}

/// One JSON line per crew member and window, in the order given. `used_minutes`
/// is rounded to 0.01 and `headroom_minutes` is the limit less that figure, so
/// the two always add up to `limit_minutes`; `exceeded` compares the exact
/// microseconds.
pub fn json_lines(lines: &[Line], rules: Rules, at: Micros) -> String {
    let at = format_millis(at);
    let mut out = String::new();
    for line in lines {
        let used = used_hundredths(line);
        let limit_minutes = line.limit.limit_hours * 60;
        let json = JsonLine {
            crew_id: &line.crew_id,
            rules: rules.name(),
            at: &at,
            measure: line.limit.measure.name(),
            window: line.limit.window,
            used_minutes: used as f64 / 100.0,
            limit_minutes,
            headroom_minutes: (limit_minutes * 100 - used) as f64 / 100.0,
            exceeded: line.exceeded(),
            flags: codes(&line.flags),
        };
        out.push_str(&serde_json::to_string(&json).expect("a line serialises"));
        out.push('\n');
    }
    out
}

/// `h:mm`, with a minus sign when negative.
fn hours_minutes(minutes: i64) -> String {
    let sign = if minutes < 0 { "-" } else { "" };
    let minutes = minutes.unsigned_abs();
    format!("{sign}{}:{:02}", minutes / 60, minutes % 60)
}

fn measure_text(measure: Measure) -> &'static str {
    match measure {
        Measure::FlightTime => "flight time",
        Measure::Duty => "duty",
        Measure::Fdp => "FDP",
        Measure::Rest => "rest",
    }
}

/// The text table: a heading that names the rule set, T and what was found, then
/// one row per crew member and window in the order given (`by_headroom`: least
/// headroom first). Used time is shown rounded up to the whole minute and the
/// headroom is the limit less that, so the table never shows more room than
/// there is. Rows are never wrapped: each is one line, however long.
pub fn table(lines: &[Line], rules: Rules, at: Micros, base: &TimeBase) -> String {
    let mut crew: Vec<&str> = lines.iter().map(|l| l.crew_id.as_str()).collect();
    crew.sort_unstable();
    crew.dedup();
    let exceeded = lines.iter().filter(|l| l.exceeded()).count();
    let zone = match base.name() {
        "UTC" => String::new(),
        name => format!(" (calendar and nights in {name})"),
    };
    let mut out = format!(
        "{} limits at {}{zone}: {} crew member{}, {} window{} exceeded\n",
        rules.name(),
        format_millis(at),
        crew.len(),
        if crew.len() == 1 { "" } else { "s" },
        exceeded,
        if exceeded == 1 { "" } else { "s" },
    );
    if lines.is_empty() {
        out.push_str(
            "no crew member has flight time, duty or a flight duty period in any window\n",
        );
        return out;
    }
    // Borrowed where the text is already held: the table of every crew member
    // has hundreds of thousands of rows.
    let rows: Vec<[Cow<'_, str>; 7]> = lines
        .iter()
        .map(|line| {
            let used = (line.used + MICROS_PER_MINUTE - 1) / MICROS_PER_MINUTE;
            let limit = line.limit.limit_hours * 60;
            let crew: Cow<'_, str> = match line.flags.is_empty() {
                true => Cow::Borrowed(line.crew_id.as_str()),
                false => Cow::Owned(format!("{FLAGGED}{}", line.crew_id)),
            };
            [
                crew,
                Cow::Borrowed(measure_text(line.limit.measure)),
                Cow::Borrowed(line.limit.window),
                Cow::Owned(hours_minutes(used)),
                Cow::Owned(format!("{}:00", line.limit.limit_hours)),
                Cow::Owned(hours_minutes(limit - used)),
                Cow::Borrowed(if line.exceeded() { EXCEEDED } else { "" }),
            ]
        })
        .collect();
    let heading = ["CREW", "MEASURE", "WINDOW", "USED", "LIMIT", "HEADROOM", ""].map(Cow::Borrowed);
    columns(
        &mut out,
        &heading,
        &rows,
        &[false, false, false, true, true, true, false],
    );
    legend(
        &mut out,
        lines
            .iter()
            .map(|l| (l.crew_id.as_str(), l.flags.as_slice())),
    );
    out
}

/// One JSON line of `ftl plan`, with the contract's fields.
#[derive(Debug, Serialize)]
struct PlanJsonLine<'a> {
    crew_id: &'a str,
    rules: &'static str,
    measure: &'static str,
    window: &'static str,
    worst_used_minutes: f64,
    worst_at: String,
    limit_minutes: i64,
    headroom_minutes: f64,
    exceeded: bool,
    flags: Vec<&'static str>,
}

/// One JSON line per crew member and window of a plan, in the order given;
/// minutes rounded to 0.01 as `json_lines` rounds them.
pub fn plan_json_lines(lines: &[PlanLine], rules: Rules) -> String {
    let mut out = String::new();
    for line in lines {
        let worst = hundredths(line.worst);
        let limit_minutes = line.limit.limit_hours * 60;
        let json = PlanJsonLine {
            crew_id: &line.crew_id,
            rules: rules.name(),
            measure: line.limit.measure.name(),
            window: line.limit.window,
            worst_used_minutes: worst as f64 / 100.0,
            worst_at: format_millis(line.worst_at),
            limit_minutes,
            headroom_minutes: (limit_minutes * 100 - worst) as f64 / 100.0,
            exceeded: line.exceeded(),
            flags: codes(&line.flags),
        };
        out.push_str(&serde_json::to_string(&json).expect("a line serialises"));
        out.push('\n');
    }
    out
}

/// The plan's table: a heading, then one row per crew member and window in the
/// order given (least headroom first), the worst use rounded up to the minute and
/// the instant it first occurs.
pub fn plan_table(lines: &[PlanLine], rules: Rules, at: Micros, base: &TimeBase) -> String {
    let mut crew: Vec<&str> = lines.iter().map(|l| l.crew_id.as_str()).collect();
    crew.sort_unstable();
    crew.dedup();
    let exceeded = lines.iter().filter(|l| l.exceeded()).count();
    let zone = match base.name() {
        "UTC" => String::new(),
        name => format!(" (calendar and nights in {name})"),
    };
    let mut out = format!(
        "{} limits over the plan from {}{zone}: {} crew member{}, {} window{} exceeded\n",
        rules.name(),
        format_millis(at),
        crew.len(),
        if crew.len() == 1 { "" } else { "s" },
        exceeded,
        if exceeded == 1 { "" } else { "s" },
    );
    if lines.is_empty() {
        out.push_str("the plan names no crew member this rule set judges\n");
        return out;
    }
    let rows: Vec<[String; 8]> = lines
        .iter()
        .map(|line| {
            let worst = (line.worst + MICROS_PER_MINUTE - 1) / MICROS_PER_MINUTE;
            let limit = line.limit.limit_hours * 60;
            let crew = match line.flags.is_empty() {
                true => line.crew_id.clone(),
                false => format!("{FLAGGED}{}", line.crew_id),
            };
            [
                crew,
                measure_text(line.limit.measure).to_owned(),
                line.limit.window.to_owned(),
                hours_minutes(worst),
                format_millis(line.worst_at),
                format!("{}:00", line.limit.limit_hours),
                hours_minutes(limit - worst),
                if line.exceeded() { EXCEEDED } else { "" }.to_owned(),
            ]
        })
        .collect();
    let heading = [
        "CREW", "MEASURE", "WINDOW", "WORST", "AT", "LIMIT", "HEADROOM", "",
    ]
    .map(str::to_owned);
    let right = [false, false, false, true, false, true, true, false];
    columns(&mut out, &heading, &rows, &right);
    legend(
        &mut out,
        lines
            .iter()
            .map(|l| (l.crew_id.as_str(), l.flags.as_slice())),
    );
    out
}

/// Microseconds as minutes rounded to 0.01.
pub fn minutes_hundredths(micros: Micros) -> f64 {
    hundredths(micros) as f64 / 100.0
}

/// Writes `heading` and `rows` as columns two spaces apart, each as wide as its
/// widest cell, aligned right where `right` says; a row's trailing blanks cut, so
/// that an empty last cell leaves no space behind. Rows are never wrapped.
fn columns<C: AsRef<str>, const N: usize>(
    out: &mut String,
    heading: &[C; N],
    rows: &[[C; N]],
    right: &[bool; N],
) {
    let mut widths = [0; N];
    for row in std::iter::once(heading).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.as_ref().chars().count());
        }
    }
    for row in std::iter::once(heading).chain(rows) {
        let start = out.len();
        for (at, cell) in row.iter().enumerate() {
            let (cell, width) = (cell.as_ref(), widths[at]);
            match right[at] {
                true => write!(out, "{cell:>width$}  "),
                false => write!(out, "{cell:<width$}  "),
            }
            .expect("writing to a String");
        }
        let kept = out[start..].trim_end().len();
        out.truncate(start + kept);
        out.push('\n');
    }
}
