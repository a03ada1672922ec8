//! What a check found, and the comparisons both backends' checks share: the
//! findings' wording, and the crew checks' merge of two sorted sides
//! (`compare_crew`, `compare_fdp`). Imports no backend: both stand on it.

use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::store::error::StoreError;
use crate::store::rows::Columns;

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether the invariant holds.
    pub ok: bool,
    /// What was looked at when it holds (`12345 batches, each adds up`), what was
    /// found when it does not (how many rows, the first few offenders).
    pub detail: String,
}

impl Finding {
    pub(crate) fn holds(detail: impl Into<String>) -> Finding {
        Finding {
            ok: true,
            detail: detail.into(),
        }
    }

    pub(crate) fn fails(detail: impl Into<String>) -> Finding {
        Finding {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// How many offenders a failing check names.
pub(crate) const OFFENDERS_SHOWN: i64 = 5;

/// The data quality counts over the whole database at now: how many crew
/// members each code concerns (the contract's *Data quality*; `ftl` flags the
/// lines). Informational: it always holds.
pub(crate) fn data_quality_finding(counts: [i64; 4]) -> Finding {
    let codes = ["open_flight", "negative_block", "open_duty", "overlap"];
    let parts: Vec<String> = codes
        .iter()
        .zip(counts)
        .map(|(code, n)| format!("{code} {}", plural(n, "crew member", "crew members")))
        .collect();
    Finding::holds(format!(
        "{} (informational: data that can make a crew figure wrong; never fails)",
        parts.join(", ")
    ))
}

/// The first offenders as a list, `a, b, c` and `…` when there are more.
pub(crate) fn listed(first: &[String], total: i64) -> String {
    let mut text = first.join(", ");
    if total > first.len() as i64 {
        text.push_str(", …");
    }
    text
}

/// `1 row` / `2 rows`.
pub(crate) fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(crate) fn inbox_finding(batches: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each adds up",
            plural(batches, "batch", "batches")
        ));
    }
    Finding::fails(format!(
        "{} of {} whose events_total is not inserted + updated + unchanged + stale + \
         conflicts + invalid: {}",
        total,
        plural(batches, "batch", "batches"),
        listed(first, total)
    ))
}

pub(crate) fn quarantine_finding(batches: i64, rows: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, {}, each batch's number conflicts + invalid",
            plural(batches, "batch", "batches"),
            plural(rows, "quarantine row", "quarantine rows")
        ));
    }
    Finding::fails(format!(
        "{} whose quarantine rows do not number conflicts + invalid: {}",
        plural(total, "batch", "batches"),
        listed(first, total)
    ))
}

pub(crate) fn events_finding(events: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each names an inbox row",
            plural(events, "event row", "event rows")
        ));
    }
    Finding::fails(format!(
        "{} of {} name no inbox row; first keys: {}",
        total,
        plural(events, "event row", "event rows"),
        listed(first, total)
    ))
}

pub(crate) fn change_seq_finding(events: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each change_seq once",
            plural(events, "event row", "event rows")
        ));
    }
    Finding::fails(format!(
        "{} held by more than one row: {}",
        plural(total, "change_seq value", "change_seq values"),
        listed(first, total)
    ))
}

/// How many slots the events name (both backends).
pub(crate) const SLOTS_COUNT: &str = "SELECT count(*) FROM (SELECT DISTINCT flight_id, event_kind,
        slot FROM spoolite_event WHERE slot IS NOT NULL) AS named";

/// The slots with a live row other than their highest revision, or with two live
/// rows, named, each with how many there are in all (both backends; each adds its
/// `LIMIT`).
pub(crate) const SLOTS_UNSETTLED: &str = "WITH s AS (
        SELECT flight_id, event_kind, slot, source_revision, retracted,
               max(source_revision) OVER (PARTITION BY flight_id, event_kind, slot) AS top
        FROM spoolite_event WHERE slot IS NOT NULL
    ), bad AS (
        SELECT flight_id, event_kind, slot FROM s
        GROUP BY flight_id, event_kind, slot
        HAVING sum(CASE WHEN retracted THEN 0 ELSE 1 END) > 1
            OR sum(CASE WHEN NOT retracted AND source_revision < top THEN 1 ELSE 0 END) > 0
    )
    SELECT flight_id || ' ' || event_kind || ' slot ' || slot, count(*) OVER ()
    FROM bad ORDER BY 1";

pub(crate) fn slots_finding(slots: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each with at most one live row, its highest revision",
            plural(slots, "slot", "slots")
        ));
    }
    Finding::fails(format!(
        "{} with a live row other than the highest revision: {}",
        plural(total, "slot", "slots"),
        listed(first, total)
    ))
}

pub(crate) fn flight_times_finding(flights: i64, first: &[String], total: i64) -> Finding {
    if total == 0 {
        return Finding::holds(format!(
            "{}, each equal to its live events",
            plural(flights, "flight", "flights")
        ));
    }
    Finding::fails(format!(
        "{} whose flight_times row differs from what its live events give (or that \
         one side lacks): {}",
        plural(total, "flight", "flights"),
        listed(first, total)
    ))
}

/// One crew row of a flight or duty as the crew checks compare it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CrewLine {
    /// The flight id or the duty id.
    pub id: String,
    pub crew_id: String,
    pub role: String,
    pub function: String,
    /// A duty's type (None for a flight).
    pub duty_type: Option<String>,
    /// Off-blocks or the duty's start.
    pub from: String,
    /// On-blocks (none without one) or the duty's end (none while open).
    pub to: Option<String>,
    /// Block time (none without) or the duty's minutes (none while open).
    pub minutes: Option<f64>,
}

impl CrewLine {
    /// A row of a crew view's side: id, crew id, role, function, duty type,
    /// from, to, minutes.
    pub(crate) fn read(row: &impl Columns) -> Result<CrewLine, StoreError> {
        Ok(CrewLine {
            id: row.column(0)?,
            crew_id: row.column(1)?,
            role: row.column(2)?,
            function: row.column(3)?,
            duty_type: row.column(4)?,
            from: row.column(5)?,
            to: row.column(6)?,
            minutes: row.column(7)?,
        })
    }

    /// The same row but for its key: role, function, type, times and minutes
    /// rounded to 0.01.
    fn same(&self, other: &CrewLine) -> bool {
        let cents = |minutes: Option<f64>| minutes.map(|m| (m * 100.0).round() as i64);
        self.role == other.role
            && self.function == other.function
            && self.duty_type == other.duty_type
            && self.from == other.from
            && self.to == other.to
            && cents(self.minutes) == cents(other.minutes)
    }

    fn named(&self) -> String {
        format!("{} (crew {})", self.id, self.crew_id)
    }
}

/// A flight with an off-blocks, or a duty with a live `duty_start`, as its live
/// events give it, with the payload of the event whose crew (and, for a duty,
/// type) it takes.
pub(crate) struct Crewed {
    pub id: String,
    pub from: String,
    pub to: Option<String>,
    pub minutes: Option<f64>,
    pub payload: String,
}

impl Crewed {
    /// A row of a crew check's live side: id, from, to, minutes, payload.
    pub(crate) fn read(row: &impl Columns) -> Result<Crewed, StoreError> {
        Ok(Crewed {
            id: row.column(0)?,
            from: row.column(1)?,
            to: row.column(2)?,
            minutes: row.column(3)?,
            payload: row.column(4)?,
        })
    }
}

/// What a crew check's live side lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Flight,
    Duty,
}

impl Unit {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Unit::Flight => ("flight", "flights"),
            Unit::Duty => ("duty", "duties"),
        }
    }
}

/// The two sides of a crew check, each ordered by id then crew id, in byte order.
pub(crate) trait CrewSides {
    /// The next flight or duty by its live events, in id order.
    fn live(&mut self) -> Result<Option<Crewed>, StoreError>;
    /// The view's next row, in (id, crew id) order.
    fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError>;
}

/// The live side's rows: each flight's or duty's crew, in crew id order.
struct LiveLines {
    unit: Unit,
    /// The rest of the crew of the flight or duty read last.
    pending: VecDeque<CrewLine>,
    /// How many flights or duties were read.
    units: i64,
}

impl LiveLines {
    fn next(&mut self, sides: &mut impl CrewSides) -> Result<Option<CrewLine>, StoreError> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Ok(Some(line));
            }
            let Some(crewed) = sides.live()? else {
                return Ok(None);
            };
            self.units += 1;
            let (crew, duty_type) = match self.unit {
                Unit::Flight => (crate::crew::of_payload(&crewed.payload), None),
                Unit::Duty => {
                    let (crew, duty_type) = crate::crew::of_duty_payload(&crewed.payload);
                    (crew, Some(duty_type.as_str().to_owned()))
                }
            };
            self.pending.extend(crew.into_iter().map(|member| CrewLine {
                id: crewed.id.clone(),
                crew_id: member.id().to_owned(),
                role: member.role().as_str().to_owned(),
                function: member.function().as_str().to_owned(),
                duty_type: duty_type.clone(),
                from: crewed.from.clone(),
                to: crewed.to.clone(),
                minutes: crewed.minutes,
            }));
        }
    }
}

/// Merges the view's rows with the rows the live events give, by `crate::crew`'s
/// rules (the rules the batches apply: this verifies storage, not the rules): a
/// row one side lacks and a row whose role, function, type, times or minutes
/// differ are each one differing row. `unit`: what the live side lists.
pub(crate) fn compare_crew(
    sides: &mut impl CrewSides,
    view: &str,
    unit: Unit,
) -> Result<Finding, StoreError> {
    let unit_names = unit.names();
    let mut lines = LiveLines {
        unit,
        pending: VecDeque::new(),
        units: 0,
    };
    let (mut rows, mut differing, mut first) = (0_i64, 0_i64, Vec::new());
    let mut live = lines.next(sides)?;
    let mut viewed = sides.viewed()?;
    loop {
        let order = match (&live, &viewed) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(l), Some(v)) => {
                (l.id.as_str(), l.crew_id.as_str()).cmp(&(v.id.as_str(), v.crew_id.as_str()))
            }
        };
        let offender = match (order, &live, &viewed) {
            (Ordering::Less, Some(l), _) => Some(l.named()),
            (Ordering::Greater, _, Some(v)) => Some(v.named()),
            (Ordering::Equal, Some(l), Some(v)) => (!l.same(v)).then(|| v.named()),
            _ => unreachable!("an order of rows that exist"),
        };
        if let Some(named) = offender {
            differing += 1;
            if first.len() < OFFENDERS_SHOWN as usize {
                first.push(named);
            }
        }
        if order != Ordering::Greater {
            live = lines.next(sides)?;
        }
        if order != Ordering::Less {
            rows += 1;
            viewed = sides.viewed()?;
        }
    }
    if differing == 0 {
        return Ok(Finding::holds(format!(
            "{} of {}, each equal to its live events",
            plural(rows, "crew row", "crew rows"),
            plural(lines.units, unit_names.0, unit_names.1)
        )));
    }
    Ok(Finding::fails(format!(
        "{} of {view} unlike what the live events give (or that one side lacks): {}",
        plural(differing, "row", "rows"),
        listed(&first, differing)
    )))
}

/// One crew row of a duty or flight as the `crew_fdp` check reads it, with the
/// instants as text (compared by time once parsed).
#[derive(Debug, Clone)]
pub(crate) struct FdpInput {
    pub crew_id: String,
    pub id: String,
    pub from: String,
    pub to: Option<String>,
    /// A duty's type; for a flight, whether it has block time ("block") or not.
    pub kind: String,
    /// A duty's function; for a flight, its role.
    pub tag: String,
}

impl FdpInput {
    /// A row of the duties' or the flights' side: crew id, id, from, to, kind,
    /// tag.
    pub(crate) fn read(row: &impl Columns) -> Result<FdpInput, StoreError> {
        Ok(FdpInput {
            crew_id: row.column(0)?,
            id: row.column(1)?,
            from: row.column(2)?,
            to: row.column(3)?,
            kind: row.column(4)?,
            tag: row.column(5)?,
        })
    }
}

/// One row of `crew_fdp` as the check compares it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FdpLine {
    pub crew_id: String,
    pub duty_id: String,
    pub function: String,
    pub from: String,
    pub to: Option<String>,
    pub minutes: Option<f64>,
}

impl FdpLine {
    /// A row of the periods' side: crew id, duty id, function, from, to, minutes.
    pub(crate) fn read(row: &impl Columns) -> Result<FdpLine, StoreError> {
        Ok(FdpLine {
            crew_id: row.column(0)?,
            duty_id: row.column(1)?,
            function: row.column(2)?,
            from: row.column(3)?,
            to: row.column(4)?,
            minutes: row.column(5)?,
        })
    }
}

/// The three sides of the `crew_fdp` check, each in crew id (byte) order: the
/// crew rows of duties, of flights (with or without block time), and the periods.
pub(crate) trait FdpSides {
    fn duty(&mut self) -> Result<Option<FdpInput>, StoreError>;
    fn flight(&mut self) -> Result<Option<FdpInput>, StoreError>;
    fn period(&mut self) -> Result<Option<FdpLine>, StoreError>;
}

/// One stream of rows of one crew member at a time, in crew id order.
struct Grouped<T> {
    next: Option<T>,
}

impl<T> Grouped<T> {
    /// The rows of `crew_id` at the head of the stream, taken.
    fn take(
        &mut self,
        crew_id: &str,
        key: impl Fn(&T) -> &str,
        mut more: impl FnMut() -> Result<Option<T>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        while self.next.as_ref().is_some_and(|row| key(row) == crew_id) {
            out.push(self.next.take().expect("checked above"));
            self.next = more()?;
        }
        Ok(out)
    }
}

/// The crew member's periods as the crew rows give them, by
/// `crate::crew::flight_duty_period` (the rule `ftl plan` applies; the batches
/// apply it in SQL): each duty's, in duty id order.
fn expected_periods(duties: &[FdpInput], flights: &[FdpInput]) -> Vec<FdpLine> {
    use crate::ftl::time::parse_instant;
    let at = |text: &str| parse_instant(text).unwrap_or(i64::MIN);
    let mut spans: Vec<(crate::crew::FlightSpan, &FdpInput)> = flights
        .iter()
        .map(|f| {
            let span = crate::crew::FlightSpan {
                off_blocks: at(&f.from),
                on_blocks: (f.kind == "block")
                    .then(|| f.to.as_deref().map(at))
                    .flatten(),
                operating: f.tag == "operating",
            };
            (span, f)
        })
        .collect();
    spans.sort_by_key(|(span, _)| span.off_blocks);
    let ends: std::collections::HashMap<i64, &str> = spans
        .iter()
        .filter_map(|(span, f)| Some((span.on_blocks?, f.to.as_deref()?)))
        .collect();
    let flight_spans: Vec<crate::crew::FlightSpan> = spans.iter().map(|(span, _)| *span).collect();
    let mut out: Vec<FdpLine> = duties
        .iter()
        .filter_map(|d| {
            let span = crate::crew::DutySpan {
                start: at(&d.from),
                end: d.to.as_deref().map(at),
                duty_type: crate::crew::DutyType::from_text(&d.kind),
            };
            let (_, end) = crate::crew::flight_duty_period(&span, &flight_spans)?;
            // The end as the rows write it: the duty's own, or that on-blocks.
            let to = match end {
                None => None,
                Some(end) if Some(end) == span.end => d.to.clone(),
                Some(end) => ends.get(&end).map(|text| (*text).to_owned()),
            };
            let minutes = end.map(|end| ((end - span.start) as f64 / 600_000.0).round() / 100.0);
            Some(FdpLine {
                crew_id: d.crew_id.clone(),
                duty_id: d.id.clone(),
                function: d.tag.clone(),
                from: d.from.clone(),
                to,
                minutes,
            })
        })
        .collect();
    out.sort_by(|a, b| a.duty_id.cmp(&b.duty_id));
    out
}

/// `crew_fdp` against the periods the crew rows of duties and flights give, one
/// crew member at a time (memory holds one crew member's rows): a period one side
/// lacks, or whose function, times or minutes differ, is one differing row.
pub(crate) fn compare_fdp(sides: &mut impl FdpSides) -> Result<Finding, StoreError> {
    let mut duties = Grouped {
        next: sides.duty()?,
    };
    let mut flights = Grouped {
        next: sides.flight()?,
    };
    let mut periods = Grouped {
        next: sides.period()?,
    };
    let (mut rows, mut crew, mut differing, mut first) = (0_i64, 0_i64, 0_i64, Vec::new());
    loop {
        let heads = [
            duties.next.as_ref().map(|d| d.crew_id.clone()),
            flights.next.as_ref().map(|f| f.crew_id.clone()),
            periods.next.as_ref().map(|p| p.crew_id.clone()),
        ];
        let Some(crew_id) = heads.into_iter().flatten().min() else {
            break;
        };
        let of_duties = duties.take(&crew_id, |d| &d.crew_id, || sides.duty())?;
        let of_flights = flights.take(&crew_id, |f| &f.crew_id, || sides.flight())?;
        let mut viewed = periods.take(&crew_id, |p| &p.crew_id, || sides.period())?;
        viewed.sort_by(|a, b| a.duty_id.cmp(&b.duty_id));
        let expected = expected_periods(&of_duties, &of_flights);
        crew += 1;
        rows += viewed.len() as i64;
        // Minutes within a hundredth: the rows' are rounded by SQL from the
        // same instants, a tie of a fraction of a second may round either way.
        let cents = |m: Option<f64>| m.map(|m| (m * 100.0).round() as i64);
        let near = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() <= 1,
            (a, b) => a == b,
        };
        let same = |a: &FdpLine, b: &FdpLine| {
            a.function == b.function
                && a.from == b.from
                && a.to == b.to
                && near(cents(a.minutes), cents(b.minutes))
        };
        let mut expected = expected.into_iter().peekable();
        let mut viewed = viewed.into_iter().peekable();
        loop {
            let order = match (expected.peek(), viewed.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(e), Some(v)) => e.duty_id.cmp(&v.duty_id),
            };
            let offender = match order {
                Ordering::Less => expected.next().map(|e| e.duty_id),
                Ordering::Greater => viewed.next().map(|v| v.duty_id),
                Ordering::Equal => {
                    let (e, v) = (
                        expected.next().expect("peeked"),
                        viewed.next().expect("peeked"),
                    );
                    (!same(&e, &v)).then_some(v.duty_id)
                }
            };
            if let Some(duty_id) = offender {
                differing += 1;
                if first.len() < OFFENDERS_SHOWN as usize {
                    first.push(format!("{duty_id} (crew {crew_id})"));
                }
            }
        }
    }
    if differing == 0 {
        return Ok(Finding::holds(format!(
            "{} of {}, each equal to what their duties and flights give",
            plural(rows, "flight duty period", "flight duty periods"),
            plural(crew, "crew member", "crew members")
        )));
    }
    Ok(Finding::fails(format!(
        "{} of crew_fdp unlike what the crew's duties and flights give (or that one side \
         lacks): {}",
        plural(differing, "row", "rows"),
        listed(&first, differing)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides from lists, in order.
    struct Lists {
        live: VecDeque<Crewed>,
        viewed: VecDeque<CrewLine>,
    }

    impl CrewSides for Lists {
        fn live(&mut self) -> Result<Option<Crewed>, StoreError> {
            Ok(self.live.pop_front())
        }
        fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError> {
            Ok(self.viewed.pop_front())
        }
    }

    fn crewed(id: &str, payload: &str) -> Crewed {
        Crewed {
            id: id.to_owned(),
            from: "2026-12-01T08:00:00Z".to_owned(),
            to: Some("2026-12-01T09:00:00Z".to_owned()),
            minutes: Some(60.0),
            payload: payload.to_owned(),
        }
    }

    fn line(id: &str, crew_id: &str, role: &str, minutes: f64) -> CrewLine {
        CrewLine {
            id: id.to_owned(),
            crew_id: crew_id.to_owned(),
            role: role.to_owned(),
            function: "flight_crew".to_owned(),
            duty_type: None,
            from: "2026-12-01T08:00:00Z".to_owned(),
            to: Some("2026-12-01T09:00:00Z".to_owned()),
            minutes: Some(minutes),
        }
    }

    fn compare(viewed: Vec<CrewLine>) -> Finding {
        let mut lists = Lists {
            live: VecDeque::from([
                crewed("A", r#"{"crew":["C2",{"id":"C1","role":"positioning"}]}"#),
                crewed("B", r#"{"crew":"not a list"}"#),
                crewed("C", r#"{"crew":["C3"]}"#),
            ]),
            viewed: viewed.into(),
        };
        compare_crew(&mut lists, "crew_flight", Unit::Flight).expect("compare")
    }

    #[test]
    fn the_view_equal_to_the_live_crew_holds() {
        let finding = compare(vec![
            line("A", "C1", "positioning", 60.0),
            line("A", "C2", "operating", 60.001),
            line("C", "C3", "operating", 60.0),
        ]);
        assert_eq!(
            finding,
            Finding::holds("3 crew rows of 3 flights, each equal to its live events")
        );
    }

    #[test]
    fn a_row_missing_extra_or_different_is_each_one_offender() {
        let finding = compare(vec![
            line("A", "C1", "operating", 60.0),
            line("A", "C9", "operating", 60.0),
            line("C", "C3", "operating", 60.01),
        ]);
        assert_eq!(
            finding,
            Finding::fails(
                "4 rows of crew_flight unlike what the live events give (or that one side \
                 lacks): A (crew C1), A (crew C2), A (crew C9), C (crew C3)"
            )
        );
    }
}
