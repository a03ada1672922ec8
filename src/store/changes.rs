//! The change feed's types, above both backends: a row of `duty_event_all`
//! (`Change`), the most one page reads (`PAGE_ROWS`) and why a page stopped
//! (`PageError`). Each backend reads its pages in its own `changes`
//! (`sqlite::changes`, `postgres::changes`); `store::ChangeFeed` is either.

use super::error::StoreError;

/// The most rows one query reads. A page is read in one statement (one snapshot)
/// and handed over row by row, so memory holds one row at a time, and a reader that
/// writes slowly holds a read snapshot (and with it the WAL's checkpoint) for one
/// page at most.
pub(crate) const PAGE_ROWS: usize = 1000;

/// One row of `duty_event_all`, every column, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) idempotency_key: String,
    pub(crate) flight_id: String,
    pub(crate) event_kind: String,
    pub(crate) instant_utc: String,
    pub(crate) source_revision: i64,
    /// The canonical payload: compact JSON text of an object.
    pub(crate) payload: String,
    pub(crate) retracted: bool,
    /// The event's slot (NULL where none).
    pub(crate) slot: Option<String>,
    /// The batch that last wrote the row (NULL only if its inbox row were gone).
    pub(crate) batch_digest: Option<String>,
    pub(crate) first_seen_at: String,
    pub(crate) updated_at: String,
    pub(crate) change_seq: i64,
}

/// Why a page stopped: the database, or the caller's `each`.
#[derive(Debug)]
pub(crate) enum PageError<E> {
    Store(StoreError),
    Sink(E),
}
