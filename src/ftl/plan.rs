//! `spoolite ftl plan`: a planned future judged on top of the stored past. No
//! I/O: `parse` reads the plan's NDJSON text, `judge` takes each named crew
//! member's stored flights, duties and flight duty periods (cut at `--at`) with
//! their planned items and finds, for every window, the largest use at any
//! instant from `--at` to the end of their last planned item.
//!
//! The search is exact, not a scan: a window's use is piecewise linear in the
//! instant T (the weighted time of a fixed set of pieces inside a window that
//! moves with T), so its largest value, and the earliest instant it is reached,
//! lie where the slope changes or the window jumps: at `--at`, at the horizon, at
//! a piece's start or end, at a piece's start or end plus the window's length (a
//! rolling window), and at the last microsecond before a calendar period ends (a
//! calendar window, whose start jumps forward there).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::rules::{Limit, Measure, Rest, Rules, Span};
use super::span::{self, FULL, Weighted};
use super::time::{self, Micros, TimeBase};
use super::{Duty, Fdp, Flight, Items, Judge, Role, duty_weight};
use crate::crew::{self, DutyType, Function};

/// The fields a planned item may have.
const FIELDS: [&str; 9] = [
    "crew_id",
    "kind",
    "start",
    "end",
    "off_blocks",
    "on_blocks",
    "duty_type",
    "role",
    "function",
];

/// One planned item of one crew member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub crew_id: String,
    pub item: PlannedItem,
    pub role: Role,
    pub function: Function,
}

/// A planned duty (its type) or flight (operating or positioning as `role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannedItem {
    Duty {
        start: Micros,
        end: Micros,
        duty_type: DutyType,
    },
    Flight {
        off_blocks: Micros,
        on_blocks: Micros,
    },
}

impl PlannedItem {
    fn span(&self) -> (Micros, Micros) {
        match *self {
            PlannedItem::Duty { start, end, .. } => (start, end),
            PlannedItem::Flight {
                off_blocks,
                on_blocks,
            } => (off_blocks, on_blocks),
        }
    }
}

/// A plan that cannot be judged: the line (from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan line {line}: {why}")]
pub struct PlanError {
    pub line: usize,
    pub why: String,
}

/// Reads a plan: NDJSON lines (blank ones skipped), each one planned item. Every
/// item must start at or after `at` and end at or after its start.
pub fn parse(text: &str, at: Micros) -> Result<Vec<Planned>, PlanError> {
    let mut items = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fail = |why: String| PlanError {
            line: index + 1,
            why,
        };
        let value: Value = serde_json::from_str(line)
            .map_err(|error| fail(format!("not a JSON object ({error})")))?;
        let Value::Object(object) = value else {
            return Err(fail("not a JSON object".to_owned()));
        };
        let item = item(&object).map_err(fail)?;
        let (start, end) = item.item.span();
        if end < start {
            return Err(fail(format!(
                "it ends ({}) before it starts ({})",
                time::format_millis(end),
                time::format_millis(start)
            )));
        }
        if start < at {
            return Err(fail(format!(
                "it starts ({}) before --at ({}; now unless given): the past is the \
                 database's, so give --at an instant before the plan",
                time::format_millis(start),
                time::format_millis(at)
            )));
        }
        items.push(item);
    }
    Ok(items)
}

/// One line's object as a planned item, or why not.
fn item(object: &Map<String, Value>) -> Result<Planned, String> {
    if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(format!(
            "unknown field {unknown:?} (a planned item has {})",
            FIELDS.join(", ")
        ));
    }
    let fields = Fields(object);
    let crew_id = crew::crew_id(fields.required("crew_id")?)
        .ok_or("crew_id must be 1-64 characters from ! to ~ once trimmed")?
        .to_owned();
    let role = match fields.text("role")? {
        None | Some("operating") => Role::Operating,
        Some("positioning") => Role::Positioning,
        Some(other) => {
            return Err(format!(
                "role {other:?} is neither operating nor positioning"
            ));
        }
    };
    let function = match fields.text("function")? {
        None => Function::FlightCrew,
        Some(other) => Function::parse(other)
            .ok_or_else(|| format!("function {other:?} is neither flight_crew nor cabin_crew"))?,
    };
    let item = match fields.required("kind")? {
        "duty" => {
            fields.none_of("duty", &["off_blocks", "on_blocks"])?;
            PlannedItem::Duty {
                start: fields.instant("start")?,
                end: fields.instant("end")?,
                duty_type: (fields.text("duty_type")?)
                    .map_or(DutyType::FlightDuty, DutyType::from_text),
            }
        }
        "flight" => {
            fields.none_of("flight", &["start", "end", "duty_type"])?;
            PlannedItem::Flight {
                off_blocks: fields.instant("off_blocks")?,
                on_blocks: fields.instant("on_blocks")?,
            }
        }
        other => return Err(format!("kind {other:?} is neither duty nor flight")),
    };
    Ok(Planned {
        crew_id,
        item,
        role,
        function,
    })
}

/// A planned item's object, read field by field with a message for each way a
/// field can be wrong.
struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    /// The string field `name`, if present.
    fn text(&self, name: &str) -> Result<Option<&'a str>, String> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(format!("{name} must be a string, not {other}")),
        }
    }

    /// The string field `name`, which must be present.
    fn required(&self, name: &str) -> Result<&'a str, String> {
        self.text(name)?.ok_or_else(|| format!("{name} is missing"))
    }

    /// The instant field `name`, which must be present.
    fn instant(&self, name: &str) -> Result<Micros, String> {
        let value = self.required(name)?;
        time::parse_instant(value.trim()).ok_or_else(|| {
            format!(
                "{name} {value:?} is not an RFC 3339 instant with an offset (2026-12-02T05:00:00Z)"
            )
        })
    }

    /// Refuses any of `fields`, which a `kind` has not.
    fn none_of(&self, kind: &str, fields: &[&str]) -> Result<(), String> {
        match fields.iter().find(|field| self.0.contains_key(**field)) {
            Some(field) => Err(format!("a {kind} has no field {field}")),
            None => Ok(()),
        }
    }
}

/// One crew member's judgement of one window over the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanLine {
    pub crew_id: String,
    pub limit: &'static Limit,
    /// The largest use at any instant from `--at` to the horizon.
    pub worst: Micros,
    /// The earliest instant where it occurs.
    pub worst_at: Micros,
    /// The flags of the window at `worst_at`.
    pub flags: Vec<super::Flag>,
}

impl PlanLine {
    pub fn exceeded(&self) -> bool {
        self.worst > self.limit.limit_micros()
    }

    pub fn headroom(&self) -> Micros {
        self.limit.limit_micros() - self.worst
    }
}

/// The stored past of one crew member, cut at `at`: what starts after `at` is
/// left out, what runs past it or is open ends there.
fn history_cut(items: &mut Items, at: Micros) {
    items.flights.retain(|f| f.off_blocks < at);
    for flight in &mut items.flights {
        flight.on_blocks = flight.on_blocks.min(at);
    }
    items.duties.retain(|d| d.start < at);
    for duty in &mut items.duties {
        duty.end = Some(duty.end.unwrap_or(at).min(at));
    }
    items.fdps.retain(|p| p.start < at);
    for fdp in &mut items.fdps {
        fdp.end = Some(fdp.end.unwrap_or(at).min(at));
    }
}

/// Judges every crew member the plan names: `history` holds their stored items
/// (read as `ftl` reads them at `--at`, periods from `crew_fdp`), `plan` their
/// planned ones. Lines in crew id then rule order.
pub fn judge(history: Judge, plan: &[Planned]) -> Vec<PlanLine> {
    let (rules, at, base) = (history.rules(), history.at(), history.time_base().clone());
    let base = &base;
    let mut history = history.into_items();
    let mut planned: BTreeMap<&str, Vec<&Planned>> = BTreeMap::new();
    for item in plan {
        planned.entry(&item.crew_id).or_default().push(item);
    }
    let mut lines = Vec::new();
    for (crew_id, items) in planned {
        let mut held = history.remove(crew_id).unwrap_or_default();
        history_cut(&mut held, at);
        let horizon = (items.iter())
            .map(|item| item.item.span().1)
            .max()
            .unwrap_or(at);
        let planned_only = plan_items(&items);
        held.flights.extend(planned_only.flights.iter().copied());
        held.duties.extend(planned_only.duties.iter().copied());
        held.fdps.extend(planned_only.fdps.iter().copied());
        held.judged(rules);
        if held.flights.is_empty() && held.duties.is_empty() && held.fdps.is_empty() {
            // Nothing this rule set judges (under FAA: cabin crew only).
            continue;
        }
        let rest_at = rest_instants(rules, &items);
        let crew = Crew::new(&held, base);
        for limit in rules.limits() {
            let (worst, worst_at) = crew.worst(limit, at, horizon, &rest_at);
            let from = crew.window_start(limit, worst_at);
            lines.push(PlanLine {
                crew_id: crew_id.to_owned(),
                limit,
                worst,
                worst_at,
                flags: held.flags(limit.measure, from, worst_at),
            });
        }
    }
    lines
}

/// The planned items of one crew member as a judge holds them, with the flight
/// duty periods of the planned duties by their planned flights (a planned flight
/// never joins a stored duty).
fn plan_items(items: &[&Planned]) -> Items {
    let mut out = Items::default();
    for item in items {
        match item.item {
            PlannedItem::Duty {
                start,
                end,
                duty_type,
            } => out.duties.push(Duty {
                start,
                end: Some(end),
                duty_type,
                function: item.function,
            }),
            PlannedItem::Flight {
                off_blocks,
                on_blocks,
            } if item.role == Role::Operating => out.flights.push(Flight {
                off_blocks,
                on_blocks,
                function: item.function,
            }),
            PlannedItem::Flight { .. } => {}
        }
    }
    out.derive_fdps();
    out
}

/// The instants a rest window is judged at: the start of each planned duty under
/// FAA (may a reserve or flight duty period begin then? a ground duty aside), its
/// end under EASA.
fn rest_instants(rules: Rules, items: &[&Planned]) -> Vec<Micros> {
    let mut out: Vec<Micros> = items
        .iter()
        .filter_map(|item| match (rules, item.item) {
            (
                Rules::Faa,
                PlannedItem::Duty {
                    duty_type: DutyType::GroundDuty,
                    ..
                },
            ) => None,
            (Rules::Faa, PlannedItem::Duty { start, .. }) => Some(start),
            (Rules::Easa, PlannedItem::Duty { end, .. }) => Some(end),
            _ => None,
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// One crew member's pieces per measure, for the search.
struct Crew<'b> {
    flight_time: Vec<Weighted>,
    duty: Vec<Weighted>,
    fdp: Vec<Weighted>,
    /// Every duty in full, for rest.
    busy: Vec<Weighted>,
    base: &'b TimeBase,
}

impl<'b> Crew<'b> {
    fn new(items: &Items, base: &'b TimeBase) -> Crew<'b> {
        let closed = |start: Micros, end: Option<Micros>| end.unwrap_or(start);
        let flights: Vec<Weighted> = (items.flights.iter())
            .map(|f| Weighted {
                start: f.off_blocks,
                end: f.on_blocks,
                weight: FULL,
            })
            .collect();
        let duties: Vec<Weighted> = (items.duties.iter())
            .map(|d| Weighted {
                start: d.start,
                end: closed(d.start, d.end),
                weight: duty_weight(d.duty_type),
            })
            .collect();
        let fdps: Vec<Weighted> = (items.fdps.iter())
            .map(|p: &Fdp| Weighted {
                start: p.start,
                end: closed(p.start, p.end),
                weight: FULL,
            })
            .collect();
        let busy: Vec<Weighted> = duties
            .iter()
            .map(|d| Weighted { weight: FULL, ..*d })
            .collect();
        Crew {
            flight_time: span::pieces(&flights),
            duty: span::pieces(&duties),
            fdp: span::pieces(&fdps),
            busy: span::pieces(&busy),
            base,
        }
    }

    fn pieces(&self, measure: Measure) -> &[Weighted] {
        match measure {
            Measure::FlightTime => &self.flight_time,
            Measure::Duty => &self.duty,
            Measure::Fdp => &self.fdp,
            Measure::Rest => &self.busy,
        }
    }

    /// The largest use of `limit`'s window from `at` to `horizon`, and the
    /// earliest instant it occurs (a rest window: at `rest_at`'s instants).
    fn worst(
        &self,
        limit: &Limit,
        at: Micros,
        horizon: Micros,
        rest_at: &[Micros],
    ) -> (Micros, Micros) {
        let pieces = self.pieces(limit.measure);
        let in_range = |t: &Micros| (at..=horizon).contains(t);
        let mut candidates: Vec<Micros> = vec![at, horizon];
        let edges = pieces.iter().flat_map(|p| [p.start, p.end]);
        match limit.span {
            Span::Rolling(length) => {
                candidates.extend(edges.flat_map(|e| [e, e + length]).filter(in_range));
            }
            Span::CalendarYear | Span::CalendarMonths(_) | Span::CalendarDays(_) => {
                candidates.extend(edges.filter(in_range));
                let mut t = at;
                // The last microsecond of each calendar period that ends in range.
                while let Some(next) =
                    next_period(limit.span, t, self.base).filter(|n| *n <= horizon)
                {
                    candidates.push(next - 1);
                    t = next;
                }
            }
            Span::SinceRest(_) => {
                candidates = rest_at.to_vec();
                if candidates.is_empty() {
                    // No planned duty: judged as at --at.
                    candidates.push(at);
                }
            }
        }
        candidates.retain(|t| *t >= at);
        candidates.sort_unstable();
        candidates.dedup();
        let mut worst = (Micros::MIN, at);
        for t in candidates {
            let used = self.used(limit, t);
            if used > worst.0 {
                worst = (used, t);
            }
        }
        (worst.0.max(0), worst.1)
    }

    /// Where `limit`'s window begins at `t`: a rest window at E, the end of the
    /// last qualifying rest (`t` when there is none).
    fn window_start(&self, limit: &Limit, t: Micros) -> Micros {
        match limit.span {
            Span::SinceRest(rest) => {
                let free = span::free_spans(&self.busy, t);
                let found = match rest {
                    Rest::Free30h => span::since_30h_free(&free, t).1,
                    Rest::ExtendedRecovery => span::since_recovery_rest(&free, t, self.base).1,
                };
                found.map_or(t, |free| free.end)
            }
            window => window.start(t, self.base).unwrap_or(t),
        }
    }

    /// The use of `limit`'s window at `t`: nothing after `t` counts.
    fn used(&self, limit: &Limit, t: Micros) -> Micros {
        match limit.span {
            Span::SinceRest(rest) => {
                let free = span::free_spans(&self.busy, t);
                match rest {
                    Rest::Free30h => span::since_30h_free(&free, t).0,
                    Rest::ExtendedRecovery => span::since_recovery_rest(&free, t, self.base).0,
                }
            }
            window => {
                let start = window.start(t, self.base).unwrap_or(t);
                span::inside(self.pieces(limit.measure), start, t)
            }
        }
    }
}

/// The first instant of the calendar period after the one holding `t`.
fn next_period(span: Span, t: Micros, base: &TimeBase) -> Option<Micros> {
    let next = match span {
        Span::CalendarDays(_) => base.day_start(t, -1),
        Span::CalendarMonths(_) => base.month_start(t, -1),
        Span::CalendarYear => base.year_start(base.month_start(base.year_start(t), -12)),
        _ => return None,
    };
    (next > t).then_some(next)
}

#[cfg(test)]
mod tests;
