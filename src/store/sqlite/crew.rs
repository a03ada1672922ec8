//! The crew rows of a batch's flights and duties (`spoolite_crew_flight`,
//! `spoolite_crew_duty`, read through the views `crew_flight` and `crew_duty`),
//! computed again from their live rows in the batch's own transaction, after the
//! flights' times are (`flights`), so that they depend only on the live events.
//!
//! A flight or duty is noted (in a temporary table, so memory stays bounded) when
//! the batch holds an event of a kind its crew rows are made of, live or not,
//! whatever its outcome: noting one too many costs a recomputation that changes
//! nothing. Its rows are then deleted and written again: the crew of its first live
//! `off_blocks` (or `duty_start`) event by `crate::crew`'s rules, with its times.
//! The migration to schema 7 runs the same computation over every flight
//! (`Scope::All`), so a database upgraded holds the rows its batches would have
//! written.
//!
//! The first live `off_blocks` of a flight is the one event of the flight whose
//! instant is `flight.off_blocks_utc`: canonical instants are unique per instant
//! (trailing zeros of a fraction dropped), so two events at one time are one key.

use rusqlite::Connection;

use crate::crew;
use crate::store::StoreError;

/// The event kinds a flight's or duty's crew rows are made of.
const KINDS: [&str; 4] = ["off_blocks", "on_blocks", "duty_start", "duty_end"];

/// Whether an event of `event_kind` can change its flight's crew rows.
pub(super) fn is_crewed(event_kind: &str) -> bool {
    KINDS.contains(&event_kind)
}

/// Which flights' crew rows to compute: those the batch noted, or every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    Noted,
    All,
}

impl Scope {
    /// The flight numbers of the scope, as a subquery with the column `ref`.
    fn refs(self) -> &'static str {
        match self {
            Scope::Noted => "SELECT ref FROM temp.crew_recompute",
            Scope::All => "SELECT ref FROM spoolite_flight",
        }
    }
}

/// The flights whose crew rows are to be computed again, for the batch in progress.
const CREATE_NOTED: &str =
    "CREATE TEMP TABLE IF NOT EXISTS crew_recompute (ref INTEGER PRIMARY KEY)";

/// A batch's flights noted for their crew rows.
#[derive(Default)]
pub(super) struct Noted {
    /// Whether a flight was noted (the temporary table then exists and is in use).
    any: bool,
}

impl Noted {
    /// Notes that the batch holds an event that may change `flight_ref`'s crew rows.
    pub(super) fn note(&mut self, tx: &Connection, flight_ref: i64) -> Result<(), StoreError> {
        if !self.any {
            tx.execute_batch(CREATE_NOTED)?;
            tx.execute_batch("DELETE FROM temp.crew_recompute")?;
            self.any = true;
        }
        tx.prepare_cached("INSERT OR IGNORE INTO temp.crew_recompute (ref) VALUES (?1)")?
            .execute([flight_ref])?;
        Ok(())
    }

    /// Computes the noted flights' crew rows again; call once their times are.
    pub(super) fn finish(self, tx: &Connection) -> Result<(), StoreError> {
        if self.any {
            recompute(tx, Scope::Noted)?;
            tx.execute_batch("DELETE FROM temp.crew_recompute")?;
        }
        Ok(())
    }
}

/// The crew rows of the flights in `scope`, deleted and written again from their
/// live rows.
pub(super) fn recompute(tx: &Connection, scope: Scope) -> Result<(), StoreError> {
    let refs = scope.refs();
    if scope == Scope::All {
        tx.execute_batch("DELETE FROM spoolite_crew_flight; DELETE FROM spoolite_crew_duty;")?;
    } else {
        tx.execute(
            &format!("DELETE FROM spoolite_crew_flight WHERE flight_ref IN ({refs})"),
            [],
        )?;
        tx.execute(
            &format!("DELETE FROM spoolite_crew_duty WHERE duty_ref IN ({refs})"),
            [],
        )?;
    }
    flights(tx, refs)?;
    duties(tx, refs)
}

/// The noted flights' times and their first live off-blocks, the row whose crew
/// they take. The loops run in the order written (CROSS JOIN: SQLite keeps it): the
/// noted flights, each one's row, its off-blocks found by key columns; left to
/// itself the planner starts from the live rows' index of every off-blocks in the
/// table.
fn flights_sql(refs: &str) -> String {
    format!(
        "SELECT f.ref, f.off_blocks_utc, f.on_blocks_utc, f.block_minutes, d.payload
         FROM ({refs}) AS t
         CROSS JOIN spoolite_flight AS f ON f.ref = t.ref
         CROSS JOIN spoolite_event AS d
             ON d.flight_id = f.flight_id AND d.retracted = 0 AND d.event_kind = 'off_blocks'
             AND d.instant_utc = f.off_blocks_utc
         WHERE f.on_blocks_utc IS NOT NULL
             AND rtrim(f.on_blocks_utc, 'Z') >= rtrim(f.off_blocks_utc, 'Z')"
    )
}

/// The noted duties' start and end and their first live duty_start, whose crew
/// they take; in the order written, as `flights_sql` says why.
fn duties_sql(refs: &str) -> String {
    format!(
        "WITH times AS (
             SELECT t.ref, f.flight_id,
                    (SELECT min(rtrim(e.instant_utc, 'Z')) || 'Z' FROM spoolite_event AS e
                     WHERE e.flight_id = f.flight_id AND e.retracted = 0
                         AND e.event_kind = 'duty_start')
                        AS start_utc,
                    (SELECT max(rtrim(e.instant_utc, 'Z')) || 'Z' FROM spoolite_event AS e
                     WHERE e.flight_id = f.flight_id AND e.retracted = 0
                         AND e.event_kind = 'duty_end')
                        AS end_utc
             FROM ({refs}) AS t CROSS JOIN spoolite_flight AS f ON f.ref = t.ref
         ), closed AS (
             SELECT ref, flight_id, start_utc,
                    CASE WHEN rtrim(end_utc, 'Z') >= rtrim(start_utc, 'Z') THEN end_utc END
                        AS end_utc
             FROM times WHERE start_utc IS NOT NULL
         )
         SELECT c.ref, c.start_utc, c.end_utc,
                round((julianday(rtrim(c.end_utc, 'Z')) - julianday(rtrim(c.start_utc, 'Z')))
                      * 1440, 2),
                d.payload
         FROM closed AS c
         CROSS JOIN spoolite_event AS d
             ON d.flight_id = c.flight_id AND d.retracted = 0 AND d.event_kind = 'duty_start'
             AND d.instant_utc = c.start_utc"
    )
}

/// Writes the crew rows of the flights numbered by `refs` that have block time.
fn flights(tx: &Connection, refs: &str) -> Result<(), StoreError> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO spoolite_crew_flight
             (flight_ref, crew_id, role, off_blocks_utc, on_blocks_utc, block_minutes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut select = tx.prepare(&flights_sql(refs))?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let flight_ref: i64 = row.get(0)?;
        let off_blocks: String = row.get(1)?;
        let on_blocks: String = row.get(2)?;
        let minutes: f64 = row.get(3)?;
        let payload: String = row.get(4)?;
        for member in crew::of_payload(&payload) {
            insert.execute(rusqlite::params![
                flight_ref,
                member.id(),
                member.role().as_str(),
                off_blocks,
                on_blocks,
                minutes
            ])?;
        }
    }
    Ok(())
}

/// Writes the crew rows of the duties numbered by `refs` that have a live
/// `duty_start`: the first one's crew, and the last live `duty_end` unless it is
/// before the start (open: no end, no minutes).
fn duties(tx: &Connection, refs: &str) -> Result<(), StoreError> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO spoolite_crew_duty
             (duty_ref, crew_id, role, duty_start_utc, duty_end_utc, duty_minutes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut select = tx.prepare(&duties_sql(refs))?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let duty_ref: i64 = row.get(0)?;
        let start: String = row.get(1)?;
        let end: Option<String> = row.get(2)?;
        let minutes: Option<f64> = row.get(3)?;
        let payload: String = row.get(4)?;
        for member in crew::of_payload(&payload) {
            insert.execute(rusqlite::params![
                duty_ref,
                member.id(),
                member.role().as_str(),
                start,
                end,
                minutes
            ])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of `sql` on a database of the current schema.
    fn plan(sql: &str) -> Vec<String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        drop(crate::store::SqliteStore::open(&path).expect("create"));
        let conn = Connection::open(&path).expect("open");
        conn.execute_batch(CREATE_NOTED).expect("the noted flights");
        let mut explain = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("explain");
        explain
            .query_map([], |row| row.get::<_, String>(3))
            .expect("plan")
            .collect::<Result<_, _>>()
            .expect("plan rows")
    }

    #[test]
    fn a_batch_reads_the_rows_of_its_noted_flights_only() {
        for sql in [
            flights_sql(Scope::Noted.refs()),
            duties_sql(Scope::Noted.refs()),
        ] {
            let plan = plan(&sql);
            assert!(plan[0].contains("crew_recompute"), "{plan:?}");
            assert!(
                plan.iter()
                    .all(|step| !step.starts_with("SCAN") || step.contains("crew_recompute")),
                "{plan:?}"
            );
        }
    }
}
