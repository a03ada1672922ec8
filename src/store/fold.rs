//! The contract's outcome rules as one pure fold, the same for every backend:
//! `decide` meets one incoming version of a key with the stored one; `KeyFold`
//! folds a file's versions of one key, in file order, into their outcomes and the
//! version left to write; `FileFold` is the loop over a file's keys that every
//! backend drives (which version of each key the file writes, and whether a key
//! left live rows behind), and `Tally` counts a file's events so that each gets
//! exactly one outcome. No I/O: a backend fetches the stored rows, offers the
//! file's versions and writes what the fold says, so two backends cannot decide
//! differently.

use std::cmp::Ordering;

use super::common::{CaseVariants, Reasons};

/// What two versions of one key with the same revision are compared on: the
/// canonical payload together with `retracted` and `slot` (the contract's
/// *content*). `retracted` is the version's own, as sent: a row its slot
/// displaced keeps its own content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Content<'a> {
    /// The canonical payload text (compact JSON, keys sorted): equal payloads are
    /// equal texts, so text equality is content equality.
    pub payload: &'a str,
    /// Whether the event is retracted (a tombstone of its key).
    pub(crate) retracted: bool,
    /// The event's slot (section *Slots*), which never changes for a key.
    pub(crate) slot: Option<&'a str>,
}

impl<'a> Content<'a> {
    /// A live (not retracted) event's content, without a slot.
    pub fn live(payload: &'a str) -> Content<'a> {
        Content {
            payload,
            retracted: false,
            slot: None,
        }
    }
}

/// One version of a key: the stored row's or an incoming event's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version<'a> {
    pub revision: i64,
    pub content: Content<'a>,
}

/// What one incoming version of a key comes to (the contract's outcome table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No version of the key was stored: the incoming one is.
    Inserted,
    /// A higher revision than the stored one: it replaces it.
    Updated,
    /// The same revision with the same content: nothing changes.
    Unchanged,
    /// A lower revision than the stored one: nothing changes.
    Stale,
    /// The same revision with other content: nothing changes, the incoming event
    /// goes to quarantine.
    Conflict,
    /// The key is stored (or came earlier in the file) with another slot: the
    /// event is invalid (`slot_changed`), whatever its revision, and nothing
    /// changes.
    SlotChanged,
}

impl Outcome {
    /// Whether the incoming version becomes the key's row.
    pub(crate) fn wins(self) -> bool {
        matches!(self, Outcome::Inserted | Outcome::Updated)
    }
}

/// The outcome of `incoming` against the key's `stored` version (`None`: the key
/// has none). Within a file, `stored` is the version the file's earlier events of
/// the key left (see `KeyFold`).
pub(crate) fn decide(stored: Option<Version<'_>>, incoming: Version<'_>) -> Outcome {
    let Some(stored) = stored else {
        return Outcome::Inserted;
    };
    // A key's slot never changes; this comes before the outcome table.
    if stored.content.slot != incoming.content.slot {
        return Outcome::SlotChanged;
    }
    match incoming.revision.cmp(&stored.revision) {
        Ordering::Greater => Outcome::Updated,
        Ordering::Less => Outcome::Stale,
        Ordering::Equal if incoming.content == stored.content => Outcome::Unchanged,
        Ordering::Equal => Outcome::Conflict,
    }
}

/// The quarantine reason code of a conflicting event.
pub(crate) const CONFLICT_REASON: &str = "conflict";

/// The quarantine reason code of an event whose key is stored with another slot.
pub(crate) const SLOT_CHANGED_REASON: &str = "slot_changed";

/// The quarantine reason and detail of an event whose `outcome` quarantines it
/// (`Conflict`, `SlotChanged`), the same from every backend; `met_slot` is the
/// slot of the version it met.
pub(crate) fn quarantined_as(
    outcome: Outcome,
    met_slot: Option<Option<&str>>,
    incoming: Version<'_>,
) -> (&'static str, String) {
    match outcome {
        Outcome::SlotChanged => {
            let slot = |slot: Option<&str>| match slot {
                Some(slot) => format!("slot {slot:?}"),
                None => "no slot".to_owned(),
            };
            (
                SLOT_CHANGED_REASON,
                format!(
                    "the key is stored with {}, and this event has {}: a key's slot never \
                     changes (send the event under its stored slot)",
                    slot(met_slot.flatten()),
                    slot(incoming.content.slot)
                ),
            )
        }
        _ => (CONFLICT_REASON, conflict_detail(incoming)),
    }
}

/// The quarantine detail of an event whose revision another key of its slot
/// holds.
pub(crate) fn slot_conflict_detail(revision: i64, slot: &str) -> String {
    format!(
        "source_revision {revision} is already held by another event of slot {slot:?} of \
         this flight and kind; a higher source_revision replaces it"
    )
}
/// The quarantine `detail` of a conflicting event, the same from every backend.
pub fn conflict_detail(incoming: Version<'_>) -> String {
    format!(
        "source_revision {} is already stored with other content (its payload, \
         whether it is retracted, or its slot differs); a higher source_revision replaces it",
        incoming.revision
    )
}

/// A file's versions of one key, folded in file order: the fold starts from the
/// stored row, and each version that wins becomes what the next one meets, so that
/// several versions of a key in one file collapse as if applied one at a time.
///
/// One `KeyFold` serves every key of a batch (`start` for each), so the payload
/// buffer is allocated once per batch rather than once per key.
#[derive(Debug, Default)]
pub struct KeyFold {
    /// The latest version: the stored one, or the file's last that won. `revision`,
    /// `payload`, `retracted` and `slot` mean nothing while `present` is false.
    revision: i64,
    payload: String,
    retracted: bool,
    slot: Option<String>,
    /// Whether the key has a version yet (stored, or inserted by this file).
    present: bool,
    /// Whether a version of this file won, so that the latest one is to be written.
    won: bool,
}

impl KeyFold {
    pub fn new() -> KeyFold {
        KeyFold::default()
    }

    /// Starts the next key from its stored version (`None`: never stored).
    pub fn start(&mut self, stored: Option<Version<'_>>) {
        self.won = false;
        self.present = false;
        if let Some(stored) = stored {
            self.keep(stored);
        }
    }

    /// Meets the key's next version in file order: its outcome, and, when it wins,
    /// it becomes the latest version.
    pub fn offer(&mut self, incoming: Version<'_>) -> Outcome {
        let outcome = decide(self.latest(), incoming);
        if outcome.wins() {
            self.keep(incoming);
            self.won = true;
        }
        outcome
    }

    /// The version the file leaves for the key when one of its versions won: what
    /// the backend writes. `None` when the stored row stays as it was.
    pub fn winner(&self) -> Option<Version<'_>> {
        self.latest().filter(|_| self.won)
    }

    /// The key's version as the file has left it so far: the stored one, or the
    /// file's last that won (`None`: the key has none). What the next one meets.
    pub(crate) fn latest(&self) -> Option<Version<'_>> {
        self.present.then_some(Version {
            revision: self.revision,
            content: Content {
                payload: &self.payload,
                retracted: self.retracted,
                slot: self.slot.as_deref(),
            },
        })
    }

    fn keep(&mut self, version: Version<'_>) {
        self.revision = version.revision;
        self.payload.clear();
        self.payload.push_str(version.content.payload);
        self.retracted = version.content.retracted;
        if self.slot.as_deref() != version.content.slot {
            self.slot = version.content.slot.map(str::to_owned);
        }
        self.present = true;
    }
}

/// What a committed (or, in a dry run, classified) batch came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub(crate) counts: Counts,
    /// Another batch with the same `batch_id` and other bytes was ingested before.
    pub(crate) resent: bool,
    /// Quarantined events by reason code.
    pub(crate) reasons: Reasons,
    /// The batch's flight ids new to the database that differ only in letter
    /// case from another one, each logged once the batch is committed.
    pub(crate) case_variants: CaseVariants,
}

/// The outcome counts of one batch, as written to its inbox row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub events_total: u64,
    pub inserted: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub stale: u64,
    pub conflicts: u64,
    pub invalid: u64,
}

impl Counts {
    /// Counts one valid event's outcome (not in `events_total`, which counts every
    /// event of the file as it is read).
    pub fn count(&mut self, outcome: Outcome) {
        *match outcome {
            Outcome::Inserted => &mut self.inserted,
            Outcome::Updated => &mut self.updated,
            Outcome::Unchanged => &mut self.unchanged,
            Outcome::Stale => &mut self.stale,
            Outcome::Conflict => &mut self.conflicts,
            Outcome::SlotChanged => &mut self.invalid,
        } += 1;
    }

    /// Events with an outcome, invalid ones included: `events_total` once every
    /// event of a file has one.
    pub(crate) fn outcomes(&self) -> u64 {
        self.inserted + self.updated + self.unchanged + self.stale + self.conflicts + self.invalid
    }

    pub fn add(&mut self, other: &Counts) {
        self.events_total += other.events_total;
        self.inserted += other.inserted;
        self.updated += other.updated;
        self.unchanged += other.unchanged;
        self.stale += other.stale;
        self.conflicts += other.conflicts;
        self.invalid += other.invalid;
    }
}

/// A file's fold, key by key: the backend hands it the file's valid versions in
/// key order (file order within a key) through `step`, which has the backend's
/// `KeySink` start each key from its stored row (`start_key`), or from the insert
/// of its first version that proved it had none (`start_key_inserted`), and
/// write what each key's end says (`KeyEnd`). The fold counts every version's
/// outcome.
#[derive(Debug, Default)]
pub(crate) struct FileFold {
    fold: KeyFold,
    counts: Counts,
    /// The key being folded (its bytes as the backend names it), if one is.
    key: Vec<u8>,
    open: Option<KeyState>,
}

/// What the fold knows of the key being folded besides its versions.
#[derive(Debug, Clone, Copy)]
struct KeyState {
    /// The table already holds the fold's latest version: the first version was
    /// inserted outright and no later one has won.
    written: bool,
    /// The key's stored row was live when the file met it.
    live_before: bool,
    /// The file offered a live version of the key.
    offered_live: bool,
    /// Whether the table's row for the key is live (`None`: it has none), as the
    /// file found it or as the backend inserted it.
    table_live: Option<bool>,
    /// No version has been offered yet.
    fresh: bool,
    /// A version won over one of other content (payload or `retracted`).
    content_changed: bool,
}

/// What a key's end leaves for the backend to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyEnd<'a> {
    /// The version the file leaves for the key, to be written over the table's
    /// row; `None` when the table holds it already (nothing won, or the first
    /// version was inserted outright and nothing won after it).
    pub(crate) write: Option<Version<'a>>,
    /// Whether the table's row for the key is live before that write (`None`: it
    /// has none).
    pub(crate) table_live: Option<bool>,
    /// The key ends the file not live, though its stored row was live or the file
    /// held a live version of it (whatever that version's outcome): what was
    /// taken from its live versions (a flight's times, merged as the file is
    /// staged) must be computed again.
    pub(crate) left_live: bool,
    /// Whether that write changes the row beyond its revision: some version that
    /// won on the way met other content (payload or `retracted`), or no row
    /// (every insert counts); `false` when nothing is written.
    pub(crate) changes_content: bool,
}

impl FileFold {
    pub(crate) fn new() -> FileFold {
        FileFold::default()
    }

    /// Whether `key` is not the key being folded: the backend ends that one
    /// (`end_key`) and starts this one.
    pub(crate) fn is_next_key(&self, key: &[u8]) -> bool {
        self.open.is_none() || self.key != key
    }

    /// Starts `key` from its stored version (`None`: it has none).
    pub(crate) fn start_key(&mut self, key: &[u8], stored: Option<Version<'_>>) {
        self.begin(key);
        let live = stored.map(|version| !version.content.retracted);
        self.fold.start(stored);
        self.open = Some(KeyState {
            written: false,
            live_before: live == Some(true),
            offered_live: false,
            table_live: live,
            fresh: true,
            content_changed: false,
        });
    }

    /// Starts `key` whose first version `first` the backend has already written
    /// as its row, an insert that proves it had none stored: `first` must be
    /// offered next, and is `Inserted`.
    pub(crate) fn start_key_inserted(&mut self, key: &[u8], first: Version<'_>) {
        self.begin(key);
        self.fold.start(None);
        self.open = Some(KeyState {
            written: true,
            live_before: false,
            offered_live: false,
            table_live: Some(!first.content.retracted),
            fresh: true,
            content_changed: false,
        });
    }

    fn begin(&mut self, key: &[u8]) {
        assert!(self.open.is_none(), "the key before was ended");
        self.key.clear();
        self.key.extend_from_slice(key);
    }

    /// Meets the key's next version in file order and counts its outcome.
    pub(crate) fn offer(&mut self, incoming: Version<'_>) -> Outcome {
        let state = self
            .open
            .as_mut()
            .expect("a key is started before its versions");
        let same_content = self
            .fold
            .latest()
            .is_some_and(|latest| latest.content == incoming.content);
        let outcome = self.fold.offer(incoming);
        state.content_changed |= outcome.wins() && !same_content;
        if state.fresh && state.written {
            assert_eq!(outcome, Outcome::Inserted, "an insert proves no stored row");
        } else if outcome.wins() {
            state.written = false;
        }
        state.fresh = false;
        state.offered_live |= !incoming.content.retracted;
        self.counts.count(outcome);
        outcome
    }

    /// Ends the key being folded (`None`: none is): what the backend writes.
    pub(crate) fn end_key(&mut self) -> Option<KeyEnd<'_>> {
        let state = self.open.take()?;
        let live_after = self.fold.latest().is_some_and(|v| !v.content.retracted);
        let write = self.fold.winner().filter(|_| !state.written);
        Some(KeyEnd {
            write,
            table_live: state.table_live,
            left_live: !live_after && (state.live_before || state.offered_live),
            changes_content: write.is_some() && state.content_changed,
        })
    }

    /// The outcomes counted so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Folds the file's next version, `row`'s (versions come in key order, file
    /// order within a key): when it opens a new key, ends the key before through
    /// `sink` and has `sink` start this one; then offers it, and has `sink`
    /// quarantine it when it conflicts. Every backend's loop over a file's keys
    /// is this call per row and `end_last_key` after the last.
    pub(crate) fn step<S: KeySink>(
        &mut self,
        sink: &mut S,
        key: &[u8],
        row: &S::Row<'_>,
        version: Version<'_>,
    ) -> Result<(), S::Error> {
        if self.is_next_key(key) {
            if let Some(ended) = self.end_key() {
                sink.end(ended)?;
            }
            sink.start(self, row, version)?;
        }
        let outcome = self.offer(version);
        if matches!(outcome, Outcome::Conflict | Outcome::SlotChanged) {
            // Neither changes the key's latest version: it is the one met.
            let met = self.fold.latest().map(|latest| latest.content.slot);
            let (reason, detail) = quarantined_as(outcome, met, version);
            sink.quarantine(row, reason, &detail)?;
        }
        Ok(())
    }

    /// Counts a version the slot rules made a conflict (`SlotClaims`): it is not
    /// offered to its key, and the backend quarantines it.
    pub(crate) fn count_slot_conflict(&mut self) {
        self.counts.count(Outcome::Conflict);
    }

    /// Ends the file's last key through `sink`, once every version was folded.
    pub(crate) fn end_last_key<S: KeySink>(&mut self, sink: &mut S) -> Result<(), S::Error> {
        match self.end_key() {
            Some(ended) => sink.end(ended),
            None => Ok(()),
        }
    }
}

/// What a backend does as `FileFold::step` goes through a file's keys: the
/// small part of the per-key loop that differs between SQLite and PostgreSQL.
pub(crate) trait KeySink {
    /// A version as the backend read it (a merged run's row, a cursor's row).
    type Row<'r>;
    type Error;

    /// Starts the key of `row`, whose version `first` comes first in the file:
    /// `fold.start_key` from its stored row, or `fold.start_key_inserted` when the
    /// backend inserted `first` as the key's row. The key's columns (flight, kind,
    /// instant) are `row`'s until the next start.
    fn start(
        &mut self,
        fold: &mut FileFold,
        row: &Self::Row<'_>,
        first: Version<'_>,
    ) -> Result<(), Self::Error>;

    /// Writes what the end of the key started last says.
    fn end(&mut self, ended: KeyEnd<'_>) -> Result<(), Self::Error>;

    /// Quarantines `row` with `reason` and `detail` (a conflict, a changed slot).
    fn quarantine(
        &mut self,
        row: &Self::Row<'_>,
        reason: &'static str,
        detail: &str,
    ) -> Result<(), Self::Error>;

    /// Quarantines `row`, which the slot rules made a conflict (`SlotClaims`)
    /// and which is not offered to its key; a backend that took something from
    /// it as it was staged (a flight's times) takes it out again.
    fn slot_conflict(&mut self, row: &Self::Row<'_>, detail: &str) -> Result<(), Self::Error> {
        self.quarantine(row, CONFLICT_REASON, detail)
    }
}

/// A file's events as they are read and folded: every one is counted as read
/// (`read_valid`, `read_invalid`) and gets exactly one outcome, which `finish`
/// asserts.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    counts: Counts,
    /// Quarantined events by reason code.
    reasons: Reasons,
}

impl Tally {
    /// A valid event read: its outcome comes from the fold.
    pub(crate) fn read_valid(&mut self) {
        self.counts.events_total += 1;
    }

    /// An invalid event read, quarantined with `reason`: that is its outcome.
    pub(crate) fn read_invalid(&mut self, reason: &'static str) {
        self.counts.events_total += 1;
        self.counts.invalid += 1;
        *self.reasons.entry(reason).or_default() += 1;
    }

    /// Events read so far.
    pub(crate) fn events(&self) -> u64 {
        self.counts.events_total
    }

    /// Valid events read so far.
    pub(crate) fn valid(&self) -> u64 {
        self.counts.events_total - self.counts.invalid
    }

    /// What the file came to, once `fold` has met its every valid event.
    pub(crate) fn finish(mut self, fold: &FileFold, resent: bool) -> Finished {
        assert!(fold.open.is_none(), "every key was ended");
        let applied = fold.counts();
        self.counts.add(&applied);
        if applied.conflicts > 0 {
            self.reasons.insert(CONFLICT_REASON, applied.conflicts);
        }
        if applied.invalid > 0 {
            *self.reasons.entry(SLOT_CHANGED_REASON).or_default() += applied.invalid;
        }
        assert_eq!(
            self.counts.events_total,
            self.counts.outcomes(),
            "every event has one outcome"
        );
        Finished {
            counts: self.counts,
            resent,
            reasons: self.reasons,
            case_variants: CaseVariants::default(),
        }
    }
}

/// The slot rule that spans keys (section *Slots*): an event whose revision
/// another key of its slot holds is a conflict. A backend hands the rows of the
/// slots a file names slot by slot (flight, kind and slot), each slot's stored
/// rows first, then the file's events in file order (`meet`); each key holds the
/// highest revision stored or offered for it that was not a conflict (a lower or
/// equal one leaves it as it was, as the outcome table does). Memory holds one
/// slot's keys.
#[derive(Debug, Default)]
pub(crate) struct SlotClaims {
    /// The slot being met: flight id, event kind and slot.
    slot: [String; 3],
    held: Vec<([u8; 32], i64)>,
}

impl SlotClaims {
    /// Meets the next row of `slot` (a new slot starts with none held): a stored
    /// row's key holds its revision; for an event of the file, whether it is a
    /// conflict (another key holds `revision`), and if not its key now holds the
    /// higher of its revision and what it held.
    pub(crate) fn meet(
        &mut self,
        slot: [&str; 3],
        key: &[u8; 32],
        revision: i64,
        stored: bool,
    ) -> bool {
        if self.slot != slot {
            self.slot = slot.map(str::to_owned);
            self.held.clear();
        }
        // No two stored keys of a slot hold one revision.
        self.conflicts(key, revision) && !stored
    }

    fn conflicts(&mut self, key: &[u8; 32], revision: i64) -> bool {
        if self.held.iter().any(|(k, r)| k != key && *r == revision) {
            return true;
        }
        match self.held.iter_mut().find(|(k, _)| k == key) {
            Some((_, held)) => *held = (*held).max(revision),
            None => self.held.push((*key, revision)),
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;

    /// A version written `(revision, payload)`, live.
    type V = (i64, &'static str);

    fn version((revision, payload): V) -> Version<'static> {
        Version {
            revision,
            content: Content::live(payload),
        }
    }

    fn retracted((revision, payload): V) -> Version<'static> {
        Version {
            revision,
            content: Content {
                payload,
                retracted: true,
                slot: None,
            },
        }
    }

    /// Folds `file` (one key's versions in file order) onto `stored`, and checks
    /// each outcome and the version left to write.
    fn check(
        stored: Option<Version<'static>>,
        file: &[Version<'static>],
        outcomes: &[Outcome],
        winner: Option<Version<'static>>,
    ) {
        let mut fold = KeyFold::new();
        fold.start(stored);
        let got: Vec<Outcome> = file.iter().map(|v| fold.offer(*v)).collect();
        assert_eq!(got, outcomes, "stored {stored:?}, file {file:?}");
        assert_eq!(fold.winner(), winner, "stored {stored:?}, file {file:?}");
    }

    #[test]
    fn each_row_of_the_outcome_table() {
        let stored = Some(version((3, "{\"a\":1}")));
        // none, any incoming: inserted, the new row.
        check(
            None,
            &[version((0, "{}"))],
            &[Inserted],
            Some(version((0, "{}"))),
        );
        // revision r, revision > r: updated, the incoming row.
        let higher = version((4, "{\"a\":2}"));
        check(stored, &[higher], &[Updated], Some(higher));
        // A higher revision wins whatever its content, the same included.
        let same_content = version((4, "{\"a\":1}"));
        check(stored, &[same_content], &[Updated], Some(same_content));
        // revision r, revision < r: stale, unchanged.
        check(stored, &[version((2, "{\"a\":2}"))], &[Stale], None);
        check(stored, &[version((0, "{\"a\":1}"))], &[Stale], None);
        // revision r, revision = r, same content: unchanged.
        check(stored, &[version((3, "{\"a\":1}"))], &[Unchanged], None);
        // revision r, revision = r, different content: conflict, unchanged.
        check(stored, &[version((3, "{\"a\":2}"))], &[Conflict], None);
        check(stored, &[version((3, "{}"))], &[Conflict], None);
    }

    #[test]
    fn content_is_the_payload_together_with_retracted() {
        let stored = Some(version((3, "{}")));
        // The same payload and revision, but one of them retracted: other content.
        check(stored, &[retracted((3, "{}"))], &[Conflict], None);
        let stored_retracted = Some(retracted((3, "{}")));
        check(stored_retracted, &[version((3, "{}"))], &[Conflict], None);
        check(
            stored_retracted,
            &[retracted((3, "{}"))],
            &[Unchanged],
            None,
        );
        // A retraction of a key never seen is inserted as a retracted row, so the
        // original, with a lower revision, is stale.
        let retraction = retracted((2, "{}"));
        check(None, &[retraction], &[Inserted], Some(retraction));
        check(Some(retraction), &[version((1, "{}"))], &[Stale], None);
        // A later revision that is not retracted brings the event back.
        let back = version((3, "{}"));
        check(Some(retraction), &[back], &[Updated], Some(back));
        // A retraction is an update like any other.
        let retraction = retracted((4, "{}"));
        check(Some(back), &[retraction], &[Updated], Some(retraction));
    }

    #[test]
    fn decide_is_the_table_alone() {
        let stored = version((3, "x"));
        assert_eq!(decide(None, stored), Inserted);
        assert_eq!(decide(Some(stored), version((4, "x"))), Updated);
        assert_eq!(decide(Some(stored), version((2, "x"))), Stale);
        assert_eq!(decide(Some(stored), version((3, "x"))), Unchanged);
        assert_eq!(decide(Some(stored), version((3, "y"))), Conflict);
        assert_eq!(decide(Some(stored), retracted((3, "x"))), Conflict);
    }

    #[test]
    fn versions_of_one_key_in_one_file_meet_the_last_that_won() {
        // Insert, then update, then stale, then conflict, then unchanged: each meets
        // the file's latest version, not the stored one.
        check(
            None,
            &[
                version((1, "a")),
                version((2, "b")),
                version((1, "c")),
                version((2, "c")),
                version((2, "b")),
            ],
            &[Inserted, Updated, Stale, Conflict, Unchanged],
            Some(version((2, "b"))),
        );
        // A second version with the revision of the first but other content
        // conflicts with the first, though nothing was stored.
        check(
            None,
            &[version((0, "a")), version((0, "b"))],
            &[Inserted, Conflict],
            Some(version((0, "a"))),
        );
        // Only the last winner is written; a lower one after it is stale.
        check(
            Some(version((1, "a"))),
            &[version((3, "c")), version((2, "b"))],
            &[Updated, Stale],
            Some(version((3, "c"))),
        );
        check(
            Some(version((1, "a"))),
            &[version((2, "b")), version((3, "c"))],
            &[Updated, Updated],
            Some(version((3, "c"))),
        );
        // Versions that all lose leave nothing to write.
        check(
            Some(version((5, "a"))),
            &[version((3, "b")), version((5, "a")), version((5, "b"))],
            &[Stale, Unchanged, Conflict],
            None,
        );
        // The same event twice in one file: inserted, then unchanged.
        check(
            None,
            &[version((1, "a")), version((1, "a"))],
            &[Inserted, Unchanged],
            Some(version((1, "a"))),
        );
    }

    #[test]
    fn one_fold_serves_key_after_key() {
        let mut fold = KeyFold::new();
        fold.start(None);
        assert_eq!(fold.offer(version((7, "long payload"))), Inserted);
        // The next key starts from its own stored row, not the previous key's.
        fold.start(Some(version((1, "b"))));
        assert_eq!(fold.winner(), None);
        assert_eq!(fold.offer(version((1, "b"))), Unchanged);
        assert_eq!(fold.winner(), None);
        fold.start(None);
        assert_eq!(fold.winner(), None);
        assert_eq!(fold.offer(version((0, "c"))), Inserted);
        assert_eq!(fold.winner(), Some(version((0, "c"))));
    }

    #[test]
    fn a_file_of_several_keys_counts_each_outcome_once() {
        // Key by key, in key order and file order within a key, as backends feed it.
        let keys: [(Option<Version<'static>>, &[Version<'static>]); 3] = [
            (
                None,
                &[
                    version((1, "a")),
                    version((2, "b")),
                    version((1, "z")),
                    version((2, "z")),
                ],
            ),
            (
                Some(version((2, "a"))),
                &[version((2, "a")), version((3, "b"))],
            ),
            (
                Some(version((2, "a"))),
                &[version((1, "a")), version((2, "b"))],
            ),
        ];
        let mut fold = KeyFold::new();
        let mut counts = Counts::default();
        let mut writes = Vec::new();
        for (stored, file) in keys {
            fold.start(stored);
            for incoming in file {
                counts.count(fold.offer(*incoming));
                counts.events_total += 1;
            }
            writes.extend(fold.winner().map(|v| v.revision));
        }
        let expected = Counts {
            events_total: 8,
            inserted: 1,
            updated: 2,
            unchanged: 1,
            stale: 2,
            conflicts: 2,
            invalid: 0,
        };
        assert_eq!(counts, expected);
        assert_eq!(counts.outcomes(), counts.events_total);
        assert_eq!(writes, [2, 3]);
    }

    #[test]
    fn a_conflict_says_which_revision() {
        assert_eq!(
            conflict_detail(version((7, "{}"))),
            "source_revision 7 is already stored with other content (its payload, \
             whether it is retracted, or its slot differs); a higher source_revision \
             replaces it"
        );
    }

    /// One key through a `FileFold`: started from `stored` (or, with `inserted`,
    /// from the insert of the file's first version), offered `file`; returns the
    /// outcomes and the key's end.
    fn fold_key(
        stored: Option<Version<'static>>,
        inserted: bool,
        file: &[Version<'static>],
    ) -> (Vec<Outcome>, Option<Version<'static>>, Option<bool>, bool) {
        let mut fold = FileFold::new();
        assert!(fold.is_next_key(b"k"));
        if inserted {
            fold.start_key_inserted(b"k", file[0]);
        } else {
            fold.start_key(b"k", stored);
        }
        assert!(!fold.is_next_key(b"k") && fold.is_next_key(b"other"));
        let outcomes = file.iter().map(|v| fold.offer(*v)).collect();
        let end = fold.end_key().expect("a key is open");
        let write = end.write.map(|v| {
            let version = file
                .iter()
                .find(|f| **f == v)
                .expect("a version of the file");
            *version
        });
        let ended = (outcomes, write, end.table_live, end.left_live);
        assert_eq!(fold.end_key(), None, "ended once");
        ended
    }

    /// Whether the end of one key folded onto `stored` changes the row's content.
    fn changes(
        stored: Option<Version<'static>>,
        inserted: bool,
        file: &[Version<'static>],
    ) -> bool {
        let mut fold = FileFold::new();
        if inserted {
            fold.start_key_inserted(b"k", file[0]);
        } else {
            fold.start_key(b"k", stored);
        }
        for v in file {
            fold.offer(*v);
        }
        fold.end_key().expect("a key is open").changes_content
    }

    #[test]
    fn a_key_end_changes_content_only_beyond_a_new_revision_of_the_same_payload() {
        let live = version((1, "{\"crew\":[\"C1\"]}"));
        let same = version((2, "{\"crew\":[\"C1\"]}"));
        let other = version((2, "{\"crew\":[\"C2\"]}"));
        let gone = retracted((2, "{\"crew\":[\"C1\"]}"));
        let back = version((3, "{\"crew\":[\"C1\"]}"));
        // Nothing written: nothing changes.
        assert!(!changes(Some(live), false, &[live]));
        // The same payload, live as before, at a higher revision.
        assert!(!changes(Some(live), false, &[same]));
        // Another payload; a retraction; a retracted row live again.
        assert!(changes(Some(live), false, &[other]));
        assert!(changes(Some(live), false, &[gone]));
        assert!(changes(Some(gone), false, &[back]));
        // A new key, and a later version over one inserted outright: nothing is
        // known of the row, so it counts as changed.
        assert!(changes(None, false, &[live]));
        assert!(changes(None, true, &[live, same]));
    }

    #[test]
    fn a_key_end_says_what_to_write_and_whether_live_rows_were_left() {
        let live = version((1, "{}"));
        let higher = version((2, "{}"));
        let gone = retracted((2, "{}"));
        // A new key: its version is written.
        assert_eq!(
            fold_key(None, false, &[live]),
            (vec![Inserted], Some(live), None, false)
        );
        // Inserted outright: the table holds it, nothing more to write...
        assert_eq!(
            fold_key(None, true, &[live]),
            (vec![Inserted], None, Some(true), false)
        );
        // ... unless a later version of the file won.
        assert_eq!(
            fold_key(None, true, &[live, higher]),
            (vec![Inserted, Updated], Some(higher), Some(true), false)
        );
        // A live stored row retracted: written, and its live rows left behind.
        assert_eq!(
            fold_key(Some(live), false, &[gone]),
            (vec![Updated], Some(gone), Some(true), true)
        );
        // A new key offered live, then retracted in the same file: left too.
        assert_eq!(
            fold_key(None, false, &[live, gone]),
            (vec![Inserted, Updated], Some(gone), None, true)
        );
        // A conflict and a stale version write nothing and leave nothing.
        let other = version((1, "{\"x\":1}"));
        assert_eq!(
            fold_key(Some(live), false, &[other, version((0, "{}"))]),
            (vec![Conflict, Stale], None, Some(true), false)
        );
        // A retracted row that stays retracted, offered a stale live version:
        // that version's instant was taken into its flight's times as the file
        // was staged, so they are computed again.
        assert_eq!(
            fold_key(Some(gone), false, &[version((1, "{}"))]),
            (vec![Stale], None, Some(false), true)
        );
        assert_eq!(
            fold_key(Some(gone), false, &[retracted((1, "{}"))]),
            (vec![Stale], None, Some(false), false)
        );
    }

    #[test]
    fn a_tally_gives_every_event_one_outcome_and_names_the_conflicts() {
        let mut tally = Tally::default();
        let mut fold = FileFold::new();
        fold.start_key(b"a", Some(version((1, "{}"))));
        for incoming in [version((1, "{\"x\":1}")), version((2, "{}"))] {
            tally.read_valid();
            fold.offer(incoming);
        }
        tally.read_invalid("bad_instant");
        assert_eq!((tally.events(), tally.valid()), (3, 2));
        fold.end_key();
        let finished = tally.finish(&fold, false);
        assert_eq!(
            (
                finished.counts.conflicts,
                finished.counts.updated,
                finished.counts.invalid
            ),
            (1, 1, 1)
        );
        let reasons: Vec<_> = finished.reasons.into_iter().collect();
        assert_eq!(reasons, [("bad_instant", 1), ("conflict", 1)]);
    }

    #[test]
    #[should_panic(expected = "every event has one outcome")]
    fn a_tally_refuses_an_event_the_fold_never_met() {
        let mut tally = Tally::default();
        tally.read_valid();
        tally.finish(&FileFold::new(), false);
    }
}
