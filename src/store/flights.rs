//! `flight_times` kept up to date in the batch's own transaction: each flight's
//! first off-blocks and takeoff and last landing and on-blocks of its live events,
//! in four columns of `flight` that the view reads.
//!
//! A key's flight, kind and instant never change (the key is their digest), so a
//! flight's times change only when one of its keys becomes live (inserted live, or
//! brought back from a retraction), which can only widen them, or stops being live
//! (retracted), which may narrow them. The first kind is merged in memory and
//! written flight by flight, a bounded number at a time; the second makes the
//! flight's times be computed again from its live rows once the batch's rows are
//! all written.

use std::collections::{BTreeSet, HashMap};

use rusqlite::{Connection, params};

use super::StoreError;

/// Flights whose merged times are held in memory before they are written: bounds
/// the memory (four short strings a flight) whatever the batch's size.
const FLUSH_FLIGHTS: usize = 16_384;

/// The event kinds a flight's times are made of, in the order of `flight`'s four
/// columns; the first two count their earliest event, the last two their latest.
const KINDS: [&str; 4] = ["off_blocks", "takeoff", "landing", "on_blocks"];

/// Merges the times a batch adds into the stored ones: per column the earlier (or,
/// for landing and on-blocks, the later) by time, `rtrim(…, 'Z')` ordering
/// instants by time; SQLite's two-argument `min`/`max` are NULL when either is.
const MERGE: &str = "UPDATE flight SET
    off_blocks_utc = coalesce(min(rtrim(?2, 'Z'), rtrim(off_blocks_utc, 'Z')) || 'Z', ?2, off_blocks_utc),
    takeoff_utc = coalesce(min(rtrim(?3, 'Z'), rtrim(takeoff_utc, 'Z')) || 'Z', ?3, takeoff_utc),
    landing_utc = coalesce(max(rtrim(?4, 'Z'), rtrim(landing_utc, 'Z')) || 'Z', ?4, landing_utc),
    on_blocks_utc = coalesce(max(rtrim(?5, 'Z'), rtrim(on_blocks_utc, 'Z')) || 'Z', ?5, on_blocks_utc)
WHERE ref = ?1";

/// A flight's times computed again from its live rows.
const RECOMPUTE: &str = "UPDATE flight SET
    off_blocks_utc = (SELECT min(rtrim(instant_utc, 'Z')) || 'Z' FROM duty_event_data
                      WHERE flight_ref = ?1 AND retracted = 0 AND event_kind = 'off_blocks'),
    takeoff_utc = (SELECT min(rtrim(instant_utc, 'Z')) || 'Z' FROM duty_event_data
                   WHERE flight_ref = ?1 AND retracted = 0 AND event_kind = 'takeoff'),
    landing_utc = (SELECT max(rtrim(instant_utc, 'Z')) || 'Z' FROM duty_event_data
                   WHERE flight_ref = ?1 AND retracted = 0 AND event_kind = 'landing'),
    on_blocks_utc = (SELECT max(rtrim(instant_utc, 'Z')) || 'Z' FROM duty_event_data
                     WHERE flight_ref = ?1 AND retracted = 0 AND event_kind = 'on_blocks')
WHERE ref = ?1";

/// The changes one batch makes to its flights' times, until they are written.
#[derive(Default)]
pub(super) struct FlightTimes {
    /// Per flight, the times its newly live events add, not yet merged.
    pending: HashMap<i64, [Option<String>; 4]>,
    /// Flights with an event that stopped being live.
    recompute: BTreeSet<i64>,
}

/// Whether `instant` comes before `other` in time (canonical instants: the text
/// without its `Z` sorts in time order).
fn before(instant: &str, other: &str) -> bool {
    instant.trim_end_matches('Z') < other.trim_end_matches('Z')
}

impl FlightTimes {
    /// Notes that a key of `flight_ref` went from `live_before` to `live_after`.
    pub(super) fn changed(
        &mut self,
        tx: &Connection,
        (flight_ref, event_kind, instant_utc): (i64, &str, &str),
        live_before: bool,
        live_after: bool,
    ) -> Result<(), StoreError> {
        let Some(column) = KINDS.iter().position(|kind| *kind == event_kind) else {
            return Ok(());
        };
        match (live_before, live_after) {
            (false, true) => {
                let held = &mut self.pending.entry(flight_ref).or_default()[column];
                let earliest = column < 2;
                let replace = match held {
                    None => true,
                    Some(held) if earliest => before(instant_utc, held),
                    Some(held) => before(held, instant_utc),
                };
                if replace {
                    *held = Some(instant_utc.to_owned());
                }
                if self.pending.len() >= FLUSH_FLIGHTS {
                    self.flush(tx)?;
                }
            }
            (true, false) => {
                self.recompute.insert(flight_ref);
            }
            _ => {}
        }
        Ok(())
    }

    /// Writes every change noted; call once the batch's rows are all written.
    pub(super) fn finish(mut self, tx: &Connection) -> Result<(), StoreError> {
        self.flush(tx)?;
        let mut recompute = tx.prepare_cached(RECOMPUTE)?;
        for flight_ref in std::mem::take(&mut self.recompute) {
            recompute.execute([flight_ref])?;
        }
        Ok(())
    }

    fn flush(&mut self, tx: &Connection) -> Result<(), StoreError> {
        let mut merge = tx.prepare_cached(MERGE)?;
        for (flight_ref, [off_blocks, takeoff, landing, on_blocks]) in self.pending.drain() {
            merge.execute(params![flight_ref, off_blocks, takeoff, landing, on_blocks])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::before;

    #[test]
    fn instants_compare_by_time_fractions_included() {
        assert!(before("2026-11-29T10:05:00Z", "2026-11-29T10:05:00.5Z"));
        assert!(!before("2026-11-29T10:05:00.5Z", "2026-11-29T10:05:00Z"));
        assert!(before("2026-11-29T10:05:00.25Z", "2026-11-29T10:05:00.5Z"));
        assert!(!before("2026-11-29T10:05:00Z", "2026-11-29T10:05:00Z"));
    }
}
