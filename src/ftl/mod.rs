//! `spoolite ftl`: each crew member's flight time and duty against the cumulative
//! limits of a rule set (EASA ORO.FTL.210, FAA 14 CFR 117.23) at an instant T.
//!
//! The core is sans-I/O: `rules` holds the limits as data, `Judge` sums the
//! minutes of each crew member's flights and duties inside every window, and
//! `render` turns the `Line`s into the text table or JSON lines. `command` reads
//! the rows of `crew_flight` and `crew_duty` through `store::CrewHours` and hands
//! them to a `Judge`.

pub mod command;
pub mod render;
pub mod rules;
pub mod time;

use std::collections::HashMap;

pub use rules::{Limit, Measure, Rules, Span};
pub use time::Micros;

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

/// The minutes (in microseconds) of the span `start` to `end` that lie inside the
/// window `window_start` to `at`: nothing before the window or after T counts.
pub fn inside(start: Micros, end: Micros, window_start: Micros, at: Micros) -> Micros {
    (end.min(at) - start.max(window_start)).max(0)
}

/// Sums, per crew member, the time inside each window of one rule set at T.
#[derive(Debug)]
pub struct Judge {
    rules: Rules,
    at: Micros,
    /// Each limit's window start, in `rules.limits()` order.
    starts: Vec<Micros>,
    used: HashMap<String, Vec<Micros>>,
}

impl Judge {
    pub fn new(rules: Rules, at: Micros) -> Judge {
        Judge {
            rules,
            at,
            starts: rules.limits().iter().map(|l| l.span.start(at)).collect(),
            used: HashMap::new(),
        }
    }

    /// The earliest instant a row can end at and still count: the widest
    /// window's start.
    pub fn reads_from(&self) -> Micros {
        self.starts.iter().copied().min().unwrap_or(self.at)
    }

    pub fn at(&self) -> Micros {
        self.at
    }

    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// A flight's block time, from off-blocks to on-blocks: flight time for
    /// operating crew only (positioning is duty, which `crew_duty` holds).
    pub fn add_flight(&mut self, crew_id: &str, role: Role, off_blocks: Micros, on_blocks: Micros) {
        if role == Role::Operating {
            self.add(crew_id, Measure::FlightTime, off_blocks, on_blocks);
        }
    }

    /// A duty, of either role; an open one (`end` None) counts up to T.
    pub fn add_duty(&mut self, crew_id: &str, start: Micros, end: Option<Micros>) {
        self.add(crew_id, Measure::Duty, start, end.unwrap_or(self.at));
    }

    fn add(&mut self, crew_id: &str, measure: Measure, start: Micros, end: Micros) {
        let limits = self.rules.limits();
        let minutes = |(limit, window_start): (&Limit, &Micros)| match limit.measure == measure {
            true => inside(start, end, *window_start, self.at),
            false => 0,
        };
        if limits.iter().zip(&self.starts).all(|w| minutes(w) == 0) {
            return;
        }
        let used = match self.used.get_mut(crew_id) {
            Some(used) => used,
            None => self
                .used
                .entry(crew_id.to_owned())
                .or_insert_with(|| vec![0; limits.len()]),
        };
        for (slot, window) in used.iter_mut().zip(limits.iter().zip(&self.starts)) {
            *slot += minutes(window);
        }
    }

    /// Adds what `other`, a judge of the same rules and T, summed.
    pub fn merge(&mut self, other: Judge) {
        debug_assert!(self.rules == other.rules && self.at == other.at);
        for (crew_id, used) in other.used {
            match self.used.get_mut(&crew_id) {
                Some(held) => held
                    .iter_mut()
                    .zip(used)
                    .for_each(|(held, more)| *held += more),
                None => {
                    self.used.insert(crew_id, used);
                }
            }
        }
    }

    /// One line per crew member and window: of every crew member with minutes in
    /// any window, or, when `named` is not empty, of exactly the crew named (each
    /// once, zeros for one without rows). In crew id then rule order.
    pub fn lines(mut self, named: &[String]) -> Vec<Line> {
        let limits = self.rules.limits();
        let mut crew: Vec<(String, Vec<Micros>)> = if named.is_empty() {
            self.used.drain().collect()
        } else {
            named
                .iter()
                .map(|id| {
                    let used = self.used.get(id).cloned();
                    (id.clone(), used.unwrap_or_else(|| vec![0; limits.len()]))
                })
                .collect()
        };
        crew.sort_by(|a, b| a.0.cmp(&b.0));
        crew.dedup_by(|a, b| a.0 == b.0);
        crew.into_iter()
            .flat_map(|(crew_id, used)| {
                limits.iter().zip(used).map(move |(limit, used)| Line {
                    crew_id: crew_id.clone(),
                    limit,
                    used,
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
