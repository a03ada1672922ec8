//! The types both backends use and neither owns: a batch's quarantine reasons
//! and case variants, an event bound for
//! quarantine, what `status` reads, and the rows `ftl` reads. Imports no backend:
//! the backends stand on it, and the enums that choose a backend stand on them.

use crate::batch::Record;

/// Quarantined events of one batch by reason code (`conflict`, `bad_instant`, …).
pub(crate) type Reasons = std::collections::BTreeMap<&'static str, u64>;

/// Flight ids that a batch brought into the database and that differ only in
/// letter case from one it held before (or one the batch brought earlier in the
/// file): each kept as sent, since the key is computed from it, and told to the
/// operator. Pairs beyond `CASE_VARIANTS_SHOWN` are only counted, so memory stays
/// bounded whatever the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CaseVariants {
    /// `(as sent, the other spelling)`, in the order noted, at most
    /// `CASE_VARIANTS_SHOWN`.
    shown: Vec<(String, String)>,
    total: u64,
}

/// Pairs of spellings a batch's log names one by one; the rest are counted.
pub(crate) const CASE_VARIANTS_SHOWN: usize = 10;

impl CaseVariants {
    /// Notes that `sent`, new to the database, differs from `other` only in case.
    pub(crate) fn note(&mut self, sent: &str, other: &str) {
        if self.shown.len() < CASE_VARIANTS_SHOWN {
            self.shown.push((sent.to_owned(), other.to_owned()));
        }
        self.total += 1;
    }

    /// Sets how many pairs there are in all, those noted included, when more
    /// were found than noted.
    pub(crate) fn set_total(&mut self, total: u64) {
        self.total = total.max(self.total);
    }

    /// Logs each pair at warn level, naming the file (`shown_name`, escaped for a
    /// log line), then how many more there are.
    pub(crate) fn log(&self, shown_name: &str) {
        for message in self.messages(shown_name) {
            log::warn!("{message}");
        }
    }

    /// The lines `log` writes.
    fn messages(&self, shown_name: &str) -> Vec<String> {
        let mut messages: Vec<String> = self
            .shown
            .iter()
            .map(|(sent, other)| {
                format!(
                    "{shown_name}: flight id {sent:?} differs only in letter case from \
                     {other:?}, already stored; kept as sent, as a flight of its own"
                )
            })
            .collect();
        let more = self.total - self.shown.len() as u64;
        if more > 0 {
            let ids = if more == 1 {
                "id differs"
            } else {
                "ids differ"
            };
            messages.push(format!(
                "{shown_name}: {more} more flight {ids} only in letter case from one already \
                 stored; kept as sent"
            ));
        }
        messages
    }
}

/// An event bound for quarantine: its place in the file (from 0), its text as
/// sent, and why (a reason code and a detail a person can act on).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quarantined<'a> {
    pub(crate) index: u64,
    pub(crate) raw: &'a str,
    pub(crate) reason: &'static str,
    pub(crate) detail: &'a str,
}

impl<'a> Quarantined<'a> {
    /// `record`, whose event is `invalid`.
    pub(crate) fn invalid(
        record: &'a Record,
        invalid: &'a crate::batch::Invalid,
    ) -> Quarantined<'a> {
        Quarantined {
            index: record.index,
            raw: &record.raw,
            reason: invalid.reason.code(),
            detail: &invalid.detail,
        }
    }
}

/// What `status` reads from the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub(crate) batches: u64,
    /// Live events: the rows of `duty_event`.
    pub(crate) events: u64,
    /// Retracted events: the rows of `duty_event_all` that `duty_event` leaves out.
    pub(crate) retracted_events: u64,
    pub(crate) quarantined: u64,
    pub(crate) last_ingest_at: Option<String>,
    /// The database's size as its server tells it (PostgreSQL's
    /// `pg_database_size`); `None` for a SQLite file, whose size is the file's.
    pub(crate) database_bytes: Option<u64>,
}

/// The flights whose data can make a crew figure wrong (the contract's *Data
/// quality*), for `status --json` and the metrics: those with a live off-blocks
/// and no live on-blocks for over a day, and those whose on-blocks is before
/// their off-blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlightQuality {
    pub flights_open: u64,
    pub flights_negative_block: u64,
}

// ---------------------------------------------------------------------------------
// What `ftl` reads (`crew_hours`)

/// One row of a view, borrowed for the call it is handed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrewRow<'a> {
    /// A flight of an operating crew member: a `crew_flight` row (with block
    /// time) or a flight without block time (no on-blocks, or one before its
    /// off-blocks), which counts nothing but the data quality flags.
    Flight {
        crew_id: &'a str,
        role: &'a str,
        function: &'a str,
        off_blocks_utc: &'a str,
        on_blocks_utc: Option<&'a str>,
        block_time: bool,
    },
    /// A `crew_duty` row (either role); `duty_end_utc` is None while it is open.
    Duty {
        crew_id: &'a str,
        function: &'a str,
        duty_type: &'a str,
        duty_start_utc: &'a str,
        duty_end_utc: Option<&'a str>,
    },
    /// A `crew_fdp` row; `fdp_end_utc` is None while it is open.
    Fdp {
        crew_id: &'a str,
        function: &'a str,
        fdp_start_utc: &'a str,
        fdp_end_utc: Option<&'a str>,
    },
}

/// One item of one crew member for `ftl explain`, owned: a flight with block
/// time (`crew_flight`), a duty (`crew_duty`) or a flight duty period
/// (`crew_fdp`), with its id (the flight or duty id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainRow {
    pub id: String,
    pub role: String,
    pub function: String,
    /// A duty's type (a flight or period: empty).
    pub duty_type: String,
    pub start: String,
    pub end: Option<String>,
}

/// One crew member's items that may overlap a span, for `ftl explain`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExplainRows {
    pub flights: Vec<ExplainRow>,
    pub duties: Vec<ExplainRow>,
    pub fdps: Vec<ExplainRow>,
}

/// A live event as `ftl explain` names it: what set an item's start or end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EventRef {
    pub idempotency_key: String,
    pub event_kind: String,
    pub instant_utc: String,
    pub source_revision: i64,
    pub batch_digest: String,
    pub file_name: String,
}

/// The span to read: rows that end after `after` and begin before `before`, each
/// in whole seconds and without its `Z` (`YYYY-MM-DDTHH:MM:SS`), a second wider
/// than what counts: compared with the views' canonical text, a plain `<` or `>`
/// then keeps every row that counts (the text orders instants by time but for
/// the fractions within one second), and reads the crew index as a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrewSpan {
    /// Where the flights' rows begin to count.
    pub after: String,
    /// Where the duties' and periods' rows begin to count.
    pub duties_after: String,
    pub before: String,
    /// Whether the periods are read at all (a rule set without FDP windows needs none).
    pub fdps: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_variants_beyond_the_few_shown_are_counted_not_kept() {
        let mut variants = CaseVariants::default();
        assert!(variants.messages("f.json").is_empty());
        variants.note("ba1", "BA1");
        assert_eq!(
            variants.messages("f.json"),
            [
                "f.json: flight id \"ba1\" differs only in letter case from \"BA1\", already \
                 stored; kept as sent, as a flight of its own"
            ]
        );
        for n in 2..=CASE_VARIANTS_SHOWN + 2 {
            variants.note(&format!("ba{n}"), &format!("BA{n}"));
        }
        assert_eq!(variants.shown.len(), CASE_VARIANTS_SHOWN);
        let messages = variants.messages("f.json");
        assert_eq!(messages.len(), CASE_VARIANTS_SHOWN + 1);
        assert_eq!(
            messages[CASE_VARIANTS_SHOWN],
            "f.json: 2 more flight ids differ only in letter case from one already stored; \
             kept as sent"
        );
        // A count from elsewhere (PostgreSQL's, over every pair) includes those noted.
        variants.set_total(CASE_VARIANTS_SHOWN as u64 + 1);
        assert_eq!(
            variants.messages("f.json")[CASE_VARIANTS_SHOWN],
            "f.json: 2 more flight ids differ only in letter case from one already stored; \
             kept as sent"
        );
        variants.set_total(CASE_VARIANTS_SHOWN as u64 + 3);
        assert!(variants.messages("f.json")[CASE_VARIANTS_SHOWN].contains(": 3 more flight ids"));
    }
}
