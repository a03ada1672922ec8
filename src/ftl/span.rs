//! The arithmetic of one crew member's time: the union of overlapping spans (an
//! instant counts once, at the highest weight covering it), the part of that
//! union inside a window, and the free spans between duties that end a rest
//! window. No I/O.

use super::time::{MICROS_PER_HOUR, Micros, TimeBase};

/// A weight in thousandths: 1000 counts in full, 250 a quarter, 0 not at all.
pub type Weight = u16;

/// In full.
pub const FULL: Weight = 1000;

/// A stretch of time from `start` to `end` (empty when `end <= start`) that
/// counts at `weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weighted {
    pub start: Micros,
    pub end: Micros,
    pub weight: Weight,
}

/// The union of spans as disjoint pieces in time order, each at the highest
/// weight covering it; pieces of weight 0 are kept (they still cover time) and
/// neighbours of one weight are joined.
pub fn pieces(spans: &[Weighted]) -> Vec<Weighted> {
    // Each span's start and end as a change of the weights that cover an instant.
    let mut edges: Vec<(Micros, bool, Weight)> = Vec::with_capacity(spans.len() * 2);
    for span in spans.iter().filter(|span| span.end > span.start) {
        edges.push((span.start, true, span.weight));
        edges.push((span.end, false, span.weight));
    }
    edges.sort_unstable_by_key(|&(at, _, _)| at);
    // How many spans of each weight cover the instant; weights are few.
    let mut covering: Vec<(Weight, u32)> = Vec::new();
    let mut out: Vec<Weighted> = Vec::new();
    let mut from = None;
    for (at, opens, weight) in edges {
        let highest = covering.iter().map(|&(w, _)| w).max();
        if let (Some(start), Some(weight)) = (from, highest)
            && at > start
        {
            match out.last_mut() {
                Some(last) if last.end == start && last.weight == weight => last.end = at,
                _ => out.push(Weighted {
                    start,
                    end: at,
                    weight,
                }),
            }
        }
        from = Some(at);
        match covering.iter().position(|&(w, _)| w == weight) {
            Some(at) if opens => covering[at].1 += 1,
            Some(at) => {
                covering[at].1 -= 1;
                if covering[at].1 == 0 {
                    covering.swap_remove(at);
                }
            }
            None => covering.push((weight, 1)),
        }
    }
    out
}

/// The weighted time of `pieces` (disjoint, in time order) that lies from `from`
/// to `to`, in microseconds.
pub fn inside(pieces: &[Weighted], from: Micros, to: Micros) -> Micros {
    let first = pieces.partition_point(|piece| piece.end <= from);
    pieces[first..]
        .iter()
        .take_while(|piece| piece.start < to)
        .map(|piece| {
            let length = (piece.end.min(to) - piece.start.max(from)).max(0);
            weighted(length, piece.weight)
        })
        .sum()
}

/// `length` at `weight`.
pub fn weighted(length: Micros, weight: Weight) -> Micros {
    match weight {
        FULL => length,
        _ => length * Micros::from(weight) / Micros::from(FULL),
    }
}

/// A time free from all duty: from `start` (None: from before the first duty)
/// to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Free {
    pub start: Option<Micros>,
    pub end: Micros,
}

impl Free {
    fn length(&self) -> Option<Micros> {
        self.start.map(|start| self.end - start)
    }
}

/// FAA 117.25(b): thirty consecutive hours free from all duty.
pub const FREE_30H: Micros = 30 * MICROS_PER_HOUR;
/// ORO.FTL.235(d): a recurrent extended recovery rest of at least 36 hours.
pub const RECOVERY_REST: Micros = 36 * MICROS_PER_HOUR;
/// ORO.FTL.105: a local night counts when 8 hours of it are free.
pub const LOCAL_NIGHT_FREE: Micros = 8 * MICROS_PER_HOUR;

/// The free spans of a crew member at or before `at`, latest first: the one
/// running at `at` (when free then), then each gap between duties, then the time
/// before the first duty. `busy` holds the pieces of every duty.
pub fn free_spans(busy: &[Weighted], at: Micros) -> Vec<Free> {
    let busy: Vec<(Micros, Micros)> = busy
        .iter()
        .filter(|piece| piece.start < at)
        .map(|piece| (piece.start, piece.end.min(at)))
        .collect();
    let mut out = Vec::with_capacity(busy.len() + 1);
    match busy.last() {
        None => {
            out.push(Free {
                start: None,
                end: at,
            });
            return out;
        }
        Some(&(_, end)) if end < at => out.push(Free {
            start: Some(end),
            end: at,
        }),
        Some(_) => {}
    }
    for pair in busy.windows(2).rev() {
        // Pieces are disjoint and joined when they touch, so each gap is real.
        out.push(Free {
            start: Some(pair[0].1),
            end: pair[1].0,
        });
    }
    out.push(Free {
        start: None,
        end: busy[0].0,
    });
    out
}

/// Whether a free span is FAA 117.25(b)'s 30 consecutive hours.
pub fn is_30h_free(free: &Free) -> bool {
    free.length().is_none_or(|length| length >= FREE_30H)
}

/// Whether a free span is a recurrent extended recovery rest (ORO.FTL.235(d)):
/// at least 36 hours holding two local nights, each 8 free hours within one
/// 22:00–08:00 night of the time base (ORO.FTL.105).
pub fn is_recovery_rest(free: &Free, base: &TimeBase) -> bool {
    let Some(start) = free.start else {
        return true;
    };
    if free.end - start < RECOVERY_REST {
        return false;
    }
    // The nights that can overlap the span: from the one that began the evening
    // before its first local day, one after another until two fit.
    let mut nights = 0;
    let mut back = 1;
    loop {
        let (night_start, night_end) = base.night(start, back);
        if night_start >= free.end {
            return false;
        }
        let overlap = night_end.min(free.end) - night_start.max(start);
        if overlap >= LOCAL_NIGHT_FREE {
            nights += 1;
            if nights == 2 {
                return true;
            }
        }
        back -= 1;
    }
}

/// FAA: E, the latest instant at or before T that ends 30 free hours (T when the
/// span running at T holds them); the rest window's use is T − E.
pub fn since_30h_free(free: &[Free], at: Micros) -> (Micros, Option<Free>) {
    match free.iter().find(|span| is_30h_free(span)) {
        Some(span) => (at - span.end, Some(*span)),
        // The time before the first duty always qualifies, so this is unreachable
        // for a list `free_spans` made; count from T.
        None => (0, None),
    }
}

/// EASA: S − E′, where S is the start of the free span running at T (T when on
/// duty) and E′ the end of the last recovery rest before S; 0 while the span
/// running at T is itself one. Also the free span that gives E′ (or the running
/// one).
pub fn since_recovery_rest(free: &[Free], at: Micros, base: &TimeBase) -> (Micros, Option<Free>) {
    let (s, earlier) = match free.first() {
        Some(running) if running.end == at => {
            if is_recovery_rest(running, base) {
                return (0, Some(*running));
            }
            // A running span with no start is the time before any duty: it
            // qualifies above, so this one has a start.
            (running.start.unwrap_or(at), &free[1..])
        }
        _ => (at, free),
    };
    match earlier.iter().find(|span| is_recovery_rest(span, base)) {
        Some(span) => (s - span.end, Some(*span)),
        None => (0, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ftl::time::parse_instant;

    fn at(text: &str) -> Micros {
        parse_instant(text).expect(text)
    }

    fn span(start: &str, end: &str, weight: Weight) -> Weighted {
        Weighted {
            start: at(start),
            end: at(end),
            weight,
        }
    }

    const H: Micros = MICROS_PER_HOUR;

    #[test]
    fn overlapping_spans_count_each_instant_once_at_the_highest_weight() {
        let spans = [
            span("2026-12-01T06:00:00Z", "2026-12-01T14:00:00Z", FULL),
            span("2026-12-01T10:00:00Z", "2026-12-01T18:00:00Z", FULL),
            // A home standby under the duties and past them: a quarter after 18:00.
            span("2026-12-01T04:00:00Z", "2026-12-01T22:00:00Z", 250),
            span("2026-12-02T00:00:00Z", "2026-12-02T01:00:00Z", 0),
        ];
        let pieces = pieces(&spans);
        assert_eq!(
            pieces,
            vec![
                span("2026-12-01T04:00:00Z", "2026-12-01T06:00:00Z", 250),
                span("2026-12-01T06:00:00Z", "2026-12-01T18:00:00Z", FULL),
                span("2026-12-01T18:00:00Z", "2026-12-01T22:00:00Z", 250),
                span("2026-12-02T00:00:00Z", "2026-12-02T01:00:00Z", 0),
            ]
        );
        let all = inside(&pieces, i64::MIN / 2, i64::MAX / 2);
        assert_eq!(all, 12 * H + 6 * H / 4);
        // Clipped at both ends.
        let part = inside(
            &pieces,
            at("2026-12-01T05:00:00Z"),
            at("2026-12-01T07:00:00Z"),
        );
        assert_eq!(part, H / 4 + H);
    }

    #[test]
    fn two_open_duties_starting_a_day_apart_count_a_week_as_a_week() {
        // Both open at T, so both run to T: the union is T − the first start.
        let t = at("2026-12-08T00:00:00Z");
        let spans = [
            Weighted {
                start: at("2026-12-01T00:00:00Z"),
                end: t,
                weight: FULL,
            },
            Weighted {
                start: at("2026-12-02T00:00:00Z"),
                end: t,
                weight: FULL,
            },
        ];
        assert_eq!(inside(&pieces(&spans), t - 7 * 24 * H, t), 7 * 24 * H);
    }

    #[test]
    fn faa_rest_counts_from_the_end_of_the_last_30_free_hours() {
        let busy = pieces(&[
            span("2026-12-01T06:00:00Z", "2026-12-01T16:00:00Z", FULL),
            // 30 h free exactly: 16:00 to 22:00 the next day.
            span("2026-12-02T22:00:00Z", "2026-12-03T08:00:00Z", FULL),
            // 29 h 59 min free: not enough.
            span("2026-12-04T13:59:00Z", "2026-12-04T20:00:00Z", FULL),
        ]);
        let t = at("2026-12-05T10:00:00Z");
        let free = free_spans(&busy, t);
        let (used, span) = since_30h_free(&free, t);
        assert_eq!(span.map(|span| span.end), Some(at("2026-12-02T22:00:00Z")));
        assert_eq!(used, t - at("2026-12-02T22:00:00Z"));
        // 30 h after the last duty, the span running at T qualifies: E = T.
        let later = at("2026-12-06T02:00:00Z");
        assert_eq!(since_30h_free(&free_spans(&busy, later), later).0, 0);
        let short = later - 60 * 1_000_000;
        assert_eq!(
            since_30h_free(&free_spans(&busy, short), short).0,
            short - at("2026-12-02T22:00:00Z")
        );
        // Before the first duty the crew member is free: E is its start.
        let during = at("2026-12-01T12:00:00Z");
        assert_eq!(since_30h_free(&free_spans(&busy, during), during).0, 6 * H);
    }

    #[test]
    fn easa_recovery_rest_needs_36_hours_and_two_local_nights() {
        let utc = TimeBase::utc();
        let free = |start: &str, end: &str| Free {
            start: Some(at(start)),
            end: at(end),
        };
        // 36 h from 20:00 to 08:00 two days on: nights 1st–2nd and 2nd–3rd whole.
        assert!(is_recovery_rest(
            &free("2026-12-01T20:00:00Z", "2026-12-03T08:00:00Z"),
            &utc
        ));
        // A minute short of 36 h.
        assert!(!is_recovery_rest(
            &free("2026-12-01T20:01:00Z", "2026-12-03T08:00:00Z"),
            &utc
        ));
        // 36 h from 12:00 to 00:00: the second night holds only 2 free hours.
        assert!(!is_recovery_rest(
            &free("2026-12-01T12:00:00Z", "2026-12-03T00:00:00Z"),
            &utc
        ));
        // 8 h of a night is enough: from 00:00 (8 h of 22:00–08:00 left) for 36 h;
        // a minute later, that night holds 7:59 and only one night fits.
        assert!(is_recovery_rest(
            &free("2026-12-02T00:00:00Z", "2026-12-03T12:00:00Z"),
            &utc
        ));
        assert!(!is_recovery_rest(
            &free("2026-12-02T00:01:00Z", "2026-12-03T12:01:00Z"),
            &utc
        ));
        // In Madrid (UTC+1) the first span begins at 01:00 local: 7 h of that night.
        let madrid = TimeBase::named("Europe/Madrid").expect("zone");
        assert!(!is_recovery_rest(
            &free("2026-12-02T00:00:00Z", "2026-12-03T12:00:00Z"),
            &madrid
        ));
    }

    #[test]
    fn easa_rest_counts_from_the_end_of_one_recovery_rest_to_the_start_of_the_next() {
        let utc = TimeBase::utc();
        let busy = pieces(&[
            span("2026-12-01T06:00:00Z", "2026-12-01T16:00:00Z", FULL),
            // Free 16:00 on the 1st to 06:00 on the 3rd: 38 h, nights 1–2 and 2–3.
            span("2026-12-03T06:00:00Z", "2026-12-03T16:00:00Z", FULL),
            span("2026-12-04T06:00:00Z", "2026-12-04T16:00:00Z", FULL),
        ]);
        // On duty at T: S = T; E′ = the 3rd at 06:00.
        let t = at("2026-12-04T10:00:00Z");
        let (used, span) = since_recovery_rest(&free_spans(&busy, t), t, &utc);
        assert_eq!(used, t - at("2026-12-03T06:00:00Z"));
        assert_eq!(span.map(|span| span.end), Some(at("2026-12-03T06:00:00Z")));
        // Free at T but not yet a recovery rest: S is the last duty's end.
        let t = at("2026-12-05T10:00:00Z");
        let (used, _) = since_recovery_rest(&free_spans(&busy, t), t, &utc);
        assert_eq!(
            used,
            at("2026-12-04T16:00:00Z") - at("2026-12-03T06:00:00Z")
        );
        // Once the running span holds 36 h and two nights: 0.
        let t = at("2026-12-06T08:00:00Z");
        assert_eq!(since_recovery_rest(&free_spans(&busy, t), t, &utc).0, 0);
    }
}
