//! The bench's batch files are the test kit's deterministic ones
//! (`spoolite_testkit::generate`); what only the bench writes is here: the same
//! events as flat rows with their keys, for the sqlite-utils peer.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

pub use spoolite_testkit::generate::{
    BatchSpec, Event, Layout, WRITE_BUFFER_BYTES, for_each_event, write_batch, write_batch_file,
};

/// Writes the events of `spec` as flat NDJSON rows with their keys, the input
/// sqlite-utils needs to upsert the same rows.
pub fn write_rows_file(
    path: &Path,
    seed: u64,
    spec: &BatchSpec,
    digest: &str,
    now: &str,
) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, File::create(path)?);
    for_each_event(seed, spec, |event| write_row(event, &mut out, digest, now))?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(std::fs::metadata(path)?.len())
}

/// A flat `duty_event` row with the key computed (by spoolite's own function), for
/// sqlite-utils.
fn write_row(event: &Event, out: &mut impl Write, digest: &str, now: &str) -> io::Result<()> {
    let instant = event.instant();
    let key =
        spoolite::batch::event::idempotency_key(event.flight_id(), event.event_kind(), &instant);
    let payload = serde_json::to_string(&event.canonical_payload()).map_err(io::Error::other)?;
    writeln!(
        out,
        r#"{{"idempotency_key":"{}","flight_id":"{}","event_kind":"{}","instant_utc":"{}","source_revision":{},"payload":{},"batch_digest":"{}","first_seen_at":"{}","updated_at":"{}"}}"#,
        hex::encode(key),
        event.flight_id(),
        event.event_kind(),
        instant,
        event.revision(),
        payload,
        digest,
        now,
        now
    )
}
