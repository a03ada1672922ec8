//! `spoolite ftl`: each crew member's flight time, duty, flight duty period and
//! rest against the cumulative limits of a rule set (EASA ORO.FTL.210 and 235,
//! FAA 14 CFR 117.23 and 117.25) at an instant T.
//!
//! The core is sans-I/O: `rules` holds the limits as data, `span` the arithmetic
//! of one crew member's time (unions, weights, free spans), `Judge` gathers each
//! crew member's flights and duties and measures every window, and `render`
//! turns the `Line`s into the text table or JSON lines. `command` reads the rows
//! of `crew_flight` and `crew_duty` through `store::CrewHours` and hands them to
//! a `Judge`.

pub mod explain;
pub mod plan;
pub mod render;
pub mod rules;
pub mod span;
pub mod time;

use std::collections::HashMap;

pub use crate::crew::{DutyType, Function};
pub use rules::{Limit, Measure, Rest, Rules, Span};
use span::{FULL, Weight, Weighted};
pub use time::{Micros, TimeBase};

/// A crew member's role on a flight or duty, as the views give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Operating,
    Positioning,
}

impl Role {
    /// The views' `role` text; anything but `positioning` is operating crew.
    pub fn from_view(text: &str) -> Role {
        match text {
            "positioning" => Role::Positioning,
            _ => Role::Operating,
        }
    }
}

/// How EASA's duty limits count a duty of a type: home standby at 25 % (CS
/// FTL.1.225(b)(3)), reserve not at all, every other type in full.
pub fn duty_weight(duty_type: DutyType) -> Weight {
    match duty_type {
        DutyType::HomeStandby => 250,
        DutyType::Reserve => 0,
        DutyType::FlightDuty | DutyType::AirportStandby | DutyType::GroundDuty => FULL,
    }
}

/// A flight flown as operating crew, with block time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flight {
    off_blocks: Micros,
    on_blocks: Micros,
    function: Function,
}

/// A duty; `end` None while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Duty {
    start: Micros,
    end: Option<Micros>,
    duty_type: DutyType,
    function: Function,
}

/// A flight duty period; `end` None while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fdp {
    start: Micros,
    end: Option<Micros>,
    function: Function,
}

/// A flight without block time of a crew member who operates it: no on-blocks,
/// or one before its off-blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unblocked {
    off_blocks: Micros,
    negative: bool,
    function: Function,
}

/// What could make a figure wrong (the contract's *Data quality*), in the order
/// the lines list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flag {
    /// A flight with an off-blocks and no on-blocks, its off-blocks over 24 h before T.
    OpenFlight,
    /// A flight whose on-blocks is before its off-blocks.
    NegativeBlock,
    /// A duty without an end, open for over 24 h at T.
    OpenDuty,
    /// Two flights with block time, or two duties, over each other.
    Overlap,
}

impl Flag {
    pub const ALL: [Flag; 4] = [
        Flag::OpenFlight,
        Flag::NegativeBlock,
        Flag::OpenDuty,
        Flag::Overlap,
    ];

    /// The code the JSON lists and the table's legend names.
    pub fn code(self) -> &'static str {
        match self {
            Flag::OpenFlight => "open_flight",
            Flag::NegativeBlock => "negative_block",
            Flag::OpenDuty => "open_duty",
            Flag::Overlap => "overlap",
        }
    }

    /// What it means, for the table's legend.
    pub fn meaning(self) -> &'static str {
        match self {
            Flag::OpenFlight => "a flight with an off-blocks and no on-blocks for over 24 h",
            Flag::NegativeBlock => "a flight whose on-blocks is before its off-blocks",
            Flag::OpenDuty => "a duty without an end for over 24 h",
            Flag::Overlap => "two flights or two duties over each other",
        }
    }
}

/// How far before T a rest window looks for the last qualifying rest: eight
/// weeks, where a rest is due every week.
pub const REST_LOOKBACK: Micros = 56 * time::MICROS_PER_DAY;

/// How long a flight may lack its on-blocks, or a duty its end, before a line
/// says so.
const OPEN_FOR: Micros = 24 * time::MICROS_PER_HOUR;

/// One crew member's flights, duties and flight duty periods, as read.
#[derive(Debug, Default)]
struct Items {
    flights: Vec<Flight>,
    duties: Vec<Duty>,
    fdps: Vec<Fdp>,
    unblocked: Vec<Unblocked>,
}

/// For each span (start, end), whether another of the list is over it, as
/// (start, overlapping), in start order.
fn overlapping(mut spans: Vec<(Micros, Micros)>) -> Vec<(Micros, bool)> {
    spans.sort_unstable();
    let mut out = Vec::with_capacity(spans.len());
    let mut reach = Micros::MIN;
    for (i, &(start, end)) in spans.iter().enumerate() {
        let before = start < reach;
        let after = spans.get(i + 1).is_some_and(|next| next.0 < end);
        out.push((start, before || after));
        reach = reach.max(end);
    }
    out
}

impl Items {
    /// Only what `rules` judges: under FAA Part 117, flight crew's.
    fn judged(&mut self, rules: Rules) {
        if rules == Rules::Faa {
            let flight_crew = |function: Function| function == Function::FlightCrew;
            self.flights.retain(|f| flight_crew(f.function));
            self.duties.retain(|d| flight_crew(d.function));
            self.fdps.retain(|p| flight_crew(p.function));
            self.unblocked.retain(|u| flight_crew(u.function));
        }
    }

    /// The flags of a window of `measure` spanning `from` to `at`: those of the
    /// flights whose off-blocks, or the duties whose start, lies in the span.
    fn flags(&self, measure: Measure, from: Micros, at: Micros) -> Vec<Flag> {
        let inside = |t: Micros| (from..=at).contains(&t);
        let mut flags = Vec::new();
        match measure {
            Measure::FlightTime => {
                let unblocked = self.unblocked.iter().filter(|u| inside(u.off_blocks));
                let (open, negative): (Vec<&Unblocked>, Vec<&Unblocked>) =
                    unblocked.partition(|u| !u.negative);
                if open.iter().any(|u| u.off_blocks < at - OPEN_FOR) {
                    flags.push(Flag::OpenFlight);
                }
                if !negative.is_empty() {
                    flags.push(Flag::NegativeBlock);
                }
                let spans = self.flights.iter().map(|f| (f.off_blocks, f.on_blocks));
                if overlapping(spans.collect())
                    .iter()
                    .any(|&(s, over)| over && inside(s))
                {
                    flags.push(Flag::Overlap);
                }
            }
            Measure::Duty | Measure::Fdp | Measure::Rest => {
                let open = self.duties.iter().filter(|d| d.end.is_none());
                if open
                    .filter(|d| inside(d.start))
                    .any(|d| d.start < at - OPEN_FOR)
                {
                    flags.push(Flag::OpenDuty);
                }
                let spans = (self.duties.iter())
                    .filter(|d| d.start < at)
                    .map(|d| (d.start, d.end.unwrap_or(at).min(at)));
                if overlapping(spans.collect())
                    .iter()
                    .any(|&(s, over)| over && inside(s))
                {
                    flags.push(Flag::Overlap);
                }
            }
        }
        flags
    }

    /// The flight duty periods of the duties held, by `crew::flight_duty_period`
    /// from the flights held (all operating), added to those held.
    fn derive_fdps(&mut self) {
        self.flights
            .sort_unstable_by_key(|f| (f.off_blocks, f.on_blocks));
        let flights: Vec<crate::crew::FlightSpan> = (self.flights.iter())
            .map(|f| crate::crew::FlightSpan {
                off_blocks: f.off_blocks,
                on_blocks: Some(f.on_blocks),
                operating: true,
            })
            .collect();
        for duty in &self.duties {
            let span = crate::crew::DutySpan {
                start: duty.start,
                end: duty.end,
                duty_type: duty.duty_type,
            };
            if let Some((start, end)) = crate::crew::flight_duty_period(&span, &flights) {
                self.fdps.push(Fdp {
                    start,
                    end,
                    function: duty.function,
                });
            }
        }
    }
}

/// Gathers each crew member's flights and duties and measures every window of
/// one rule set at T.
#[derive(Debug)]
pub struct Judge {
    rules: Rules,
    at: Micros,
    base: TimeBase,
    /// Each limit's window start, in `rules.limits()` order (None: a rest window,
    /// which starts where each crew member's last rest ended).
    starts: Vec<Option<Micros>>,
    crew: HashMap<String, Items>,
}

impl Judge {
    pub fn new(rules: Rules, at: Micros, base: TimeBase) -> Judge {
        Judge {
            rules,
            at,
            starts: rules
                .limits()
                .iter()
                .map(|l| l.span.start(at, &base))
                .collect(),
            base,
            crew: HashMap::new(),
        }
    }

    /// The earliest instant a flight can end at and still count: the widest
    /// flight time window's start.
    pub fn reads_from(&self) -> Micros {
        self.reads_from_of(|measure| measure == Measure::FlightTime)
            .unwrap_or(self.at)
    }

    /// The earliest instant a duty or a flight duty period can end at and still
    /// count: the widest duty or FDP window's start, and `REST_LOOKBACK` before T
    /// for the rest windows (a crew member with no qualifying rest in those weeks
    /// is far past any limit: their figure then counts from the first duty read).
    pub fn duties_from(&self) -> Micros {
        let windows = self.reads_from_of(|m| matches!(m, Measure::Duty | Measure::Fdp));
        let rest = self.at - REST_LOOKBACK;
        windows.map_or(rest, |from| from.min(rest))
    }

    /// Whether the rule set has a window of flight duty periods.
    pub fn reads_fdps(&self) -> bool {
        self.rules
            .limits()
            .iter()
            .any(|l| l.measure == Measure::Fdp)
    }

    fn reads_from_of(&self, which: impl Fn(Measure) -> bool) -> Option<Micros> {
        (self.rules.limits().iter().zip(&self.starts))
            .filter(|(limit, _)| which(limit.measure))
            .filter_map(|(_, start)| *start)
            .min()
    }

    pub fn at(&self) -> Micros {
        self.at
    }

    pub fn rules(&self) -> Rules {
        self.rules
    }

    pub fn time_base(&self) -> &TimeBase {
        &self.base
    }

    fn items(&mut self, crew_id: &str) -> &mut Items {
        if !self.crew.contains_key(crew_id) {
            self.crew.insert(crew_id.to_owned(), Items::default());
        }
        self.crew.get_mut(crew_id).expect("inserted above")
    }

    /// A flight's block time, from off-blocks to on-blocks: flight time (and,
    /// for `derive_fdps`, the end of a flight duty period) for operating crew
    /// only (positioning is duty, which `crew_duty` holds).
    pub fn add_flight(
        &mut self,
        crew_id: &str,
        (role, function): (Role, Function),
        off_blocks: Micros,
        on_blocks: Micros,
    ) {
        if role == Role::Operating && on_blocks >= off_blocks {
            self.items(crew_id).flights.push(Flight {
                off_blocks,
                on_blocks,
                function,
            });
        }
    }

    /// A duty, of either role; an open one (`end` None) counts up to T.
    pub fn add_duty(
        &mut self,
        crew_id: &str,
        (start, end): (Micros, Option<Micros>),
        duty_type: DutyType,
        function: Function,
    ) {
        let end = end.filter(|&end| end >= start);
        self.items(crew_id).duties.push(Duty {
            start,
            end,
            duty_type,
            function,
        });
    }

    /// A flight duty period (as `crew_fdp` holds it); an open one counts up to T.
    pub fn add_fdp(
        &mut self,
        crew_id: &str,
        (start, end): (Micros, Option<Micros>),
        function: Function,
    ) {
        let end = end.filter(|&end| end >= start);
        self.items(crew_id).fdps.push(Fdp {
            start,
            end,
            function,
        });
    }

    /// A flight without block time (no on-blocks, or one before its off-blocks),
    /// for the data quality flags; only operating crew's count.
    pub fn add_unblocked(
        &mut self,
        crew_id: &str,
        (role, function): (Role, Function),
        off_blocks: Micros,
        on_blocks: Option<Micros>,
    ) {
        if role == Role::Operating {
            self.items(crew_id).unblocked.push(Unblocked {
                off_blocks,
                negative: on_blocks.is_some(),
                function,
            });
        }
    }

    /// Adds each crew member's flight duty periods as their flights and duties
    /// held give them (`crew::flight_duty_period`): for items that come without
    /// stored periods (a plan, a table test).
    pub fn derive_fdps(&mut self) {
        self.crew.values_mut().for_each(Items::derive_fdps);
    }

    /// Adds what `other`, a judge of the same rules and T, gathered.
    pub fn merge(&mut self, other: Judge) {
        debug_assert!(self.rules == other.rules && self.at == other.at);
        for (crew_id, items) in other.crew {
            let held = self.items(&crew_id);
            held.flights.extend(items.flights);
            held.duties.extend(items.duties);
            held.fdps.extend(items.fdps);
            held.unblocked.extend(items.unblocked);
        }
    }

    /// Whether any row of `crew_id` was gathered.
    pub fn has_rows(&self, crew_id: &str) -> bool {
        self.crew.contains_key(crew_id)
    }

    /// Every crew member's items as gathered, for `plan::judge`.
    fn into_items(self) -> std::collections::BTreeMap<String, Items> {
        self.crew.into_iter().collect()
    }

    /// One crew member's use of every window, in `rules.limits()` order; None
    /// when every figure is zero (no flight time, duty or FDP in any window, and
    /// a rest that qualifies at T or nothing since it).
    fn measure(&self, items: &mut Items) -> Option<Vec<(Micros, Vec<Flag>)>> {
        let at = self.at;
        items.judged(self.rules);
        // Each span cut at T: nothing after T counts, an open duty runs to T.
        let cut = |start: Micros, end: Option<Micros>, weight: Weight| Weighted {
            start,
            end: end.unwrap_or(at).min(at),
            weight,
        };
        let flights: Vec<Weighted> = (items.flights.iter())
            .map(|f| cut(f.off_blocks, Some(f.on_blocks), FULL))
            .collect();
        let duties: Vec<Weighted> = (items.duties.iter())
            .map(|d| cut(d.start, d.end, duty_weight(d.duty_type)))
            .collect();
        let fdps: Vec<Weighted> = (items.fdps.iter())
            .map(|p| cut(p.start, p.end, FULL))
            .collect();
        let flight_time = span::pieces(&flights);
        let duty = span::pieces(&duties);
        let fdp = span::pieces(&fdps);
        let mut used = Vec::with_capacity(self.starts.len());
        let mut any = false;
        for (limit, start) in self.rules.limits().iter().zip(&self.starts) {
            let pieces = match limit.measure {
                Measure::FlightTime => &flight_time,
                Measure::Duty => &duty,
                Measure::Fdp => &fdp,
                Measure::Rest => {
                    let (since, from) = self.rest(limit.span, &duties);
                    any |= since > 0;
                    used.push((since, items.flags(Measure::Rest, from, at)));
                    continue;
                }
            };
            let from = start.unwrap_or(at);
            let minutes = span::inside(pieces, from, at);
            any |= minutes > 0;
            used.push((minutes, items.flags(limit.measure, from, at)));
        }
        any.then_some(used)
    }

    /// The use of a rest window: the time since the last qualifying rest, from
    /// the crew member's duties of any type (weight aside: a reserve is duty too),
    /// and E, where the window's span begins (T when there is none).
    fn rest(&self, span: Span, duties: &[Weighted]) -> (Micros, Micros) {
        let busy: Vec<Weighted> = duties
            .iter()
            .map(|duty| Weighted {
                weight: FULL,
                ..*duty
            })
            .collect();
        let free = span::free_spans(&span::pieces(&busy), self.at);
        let (used, found) = match span {
            Span::SinceRest(Rest::Free30h) => span::since_30h_free(&free, self.at),
            Span::SinceRest(Rest::ExtendedRecovery) => {
                span::since_recovery_rest(&free, self.at, &self.base)
            }
            _ => (0, None),
        };
        (used, found.map_or(self.at, |free| free.end))
    }

    /// One line per crew member and window: of every crew member with minutes in
    /// any window, or, when `named` is not empty, of exactly the crew named (each
    /// once, zeros for one without rows). In crew id then rule order.
    pub fn lines(mut self, named: &[String]) -> Vec<Line> {
        let limits = self.rules.limits();
        let mut crew: Vec<(String, Items)> = self.crew.drain().collect();
        if !named.is_empty() {
            crew.retain(|(id, _)| named.contains(id));
            for id in named {
                if !crew.iter().any(|(held, _)| held == id) {
                    crew.push((id.clone(), Items::default()));
                }
            }
        }
        crew.sort_by(|a, b| a.0.cmp(&b.0));
        let listed = !named.is_empty();
        crew.into_iter()
            .filter_map(|(crew_id, mut items)| {
                let used = match self.measure(&mut items) {
                    Some(used) => used,
                    None if listed => vec![(0, Vec::new()); limits.len()],
                    None => return None,
                };
                Some((crew_id, used))
            })
            .flat_map(|(crew_id, used)| {
                limits
                    .iter()
                    .zip(used)
                    .map(move |(limit, (used, flags))| Line {
                        crew_id: crew_id.clone(),
                        limit,
                        used,
                        flags,
                    })
            })
            .collect()
    }
}

/// One crew member's use of one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub crew_id: String,
    pub limit: &'static Limit,
    /// Microseconds inside the window.
    pub used: Micros,
    /// What could make the figure wrong, in `Flag` order.
    pub flags: Vec<Flag>,
}

impl Line {
    /// Used more than the limit: exactly at the limit is not exceeded.
    pub fn exceeded(&self) -> bool {
        self.used > self.limit.limit_micros()
    }

    /// What is left of the limit, negative when exceeded.
    pub fn headroom(&self) -> Micros {
        self.limit.limit_micros() - self.used
    }
}

/// Sorts lines least headroom first (the most urgent on top); the sort is
/// stable, so lines of equal headroom keep `Judge::lines`' crew id then rule
/// order.
pub fn by_headroom(lines: &mut [Line]) {
    lines.sort_by_key(Line::headroom);
}

#[cfg(test)]
mod tests;
