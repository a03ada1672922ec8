//! `spoolite check` on SQLite: one statement per check, on the read-only
//! connection (see `store::check`).

use rusqlite::Connection;

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::check::{
    CrewLine, CrewSides, Crewed, Finding, OFFENDERS_SHOWN, change_seq_finding, compare_crew,
    events_finding, flight_times_finding, inbox_finding, listed, quarantine_finding,
};

/// The rows of a statement whose rows are `(offender, total)`, the total the same
/// on each row (`count(*) OVER ()`): the first offenders and how many there are.
fn offenders(conn: &Connection, sql: &str) -> Result<(Vec<String>, i64), StoreError> {
    let mut statement = conn.prepare(sql)?;
    let mut rows = statement.query([OFFENDERS_SHOWN])?;
    let mut first = Vec::new();
    let mut total = 0;
    while let Some(row) = rows.next()? {
        first.push(row.get::<_, String>(0)?);
        total = row.get::<_, i64>(1)?;
    }
    Ok((first, total))
}

fn count(conn: &Connection, sql: &str) -> Result<i64, StoreError> {
    Ok(conn.query_row(sql, [], |row| row.get(0))?)
}

/// `PRAGMA integrity_check`: every page, every index entry against its row, the
/// schema's NOT NULL constraints; with `quick`, `PRAGMA quick_check`: the same
/// but the index entries, linear in the database's size (at 10M rows 49 s
/// against 503 s, on a busy machine: BENCHMARKS.md).
pub(crate) fn integrity(store: &SqliteStore, quick: bool) -> Result<Finding, StoreError> {
    let pragma = if quick {
        "quick_check"
    } else {
        "integrity_check"
    };
    let mut statement = store.conn.prepare(&format!("PRAGMA {pragma}(100)"))?;
    let problems: Vec<String> = statement
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    if problems == ["ok"] {
        let pages = count(&store.conn, "PRAGMA page_count")?;
        return Ok(Finding::holds(format!(
            "PRAGMA {pragma}: ok ({pages} pages)"
        )));
    }
    let shown: Vec<String> = problems
        .iter()
        .take(OFFENDERS_SHOWN as usize)
        .cloned()
        .collect();
    let more = if problems.len() >= 100 {
        " or more"
    } else {
        ""
    };
    Ok(Finding::fails(format!(
        "PRAGMA {pragma} found {} problems{more}: {}",
        problems.len(),
        listed(&shown, problems.len() as i64)
    )))
}

pub(crate) fn inbox_counts(store: &SqliteStore) -> Result<Finding, StoreError> {
    let batches = count(&store.conn, "SELECT count(*) FROM ingest_inbox")?;
    let (first, total) = offenders(
        &store.conn,
        "SELECT batch_digest || ' (events_total ' || events_total || ', outcomes add up to '
                || (inserted + updated + unchanged + stale + conflicts + invalid) || ')',
                count(*) OVER ()
         FROM ingest_inbox
         WHERE events_total IS NOT inserted + updated + unchanged + stale + conflicts + invalid
         ORDER BY batch_digest
         LIMIT ?1",
    )?;
    Ok(inbox_finding(batches, &first, total))
}

pub(crate) fn quarantine_counts(store: &SqliteStore) -> Result<Finding, StoreError> {
    let batches = count(&store.conn, "SELECT count(*) FROM ingest_inbox")?;
    let rows = count(&store.conn, "SELECT count(*) FROM quarantine")?;
    let (first, total) = offenders(
        &store.conn,
        "WITH q AS (SELECT batch_digest, count(*) AS n FROM quarantine GROUP BY batch_digest),
              bad AS (
                  SELECT i.batch_digest AS digest,
                         i.batch_digest || ' (conflicts + invalid ' || (i.conflicts + i.invalid)
                             || ', quarantine rows ' || coalesce(q.n, 0) || ')' AS what
                  FROM ingest_inbox AS i LEFT JOIN q ON q.batch_digest = i.batch_digest
                  WHERE coalesce(q.n, 0) IS NOT i.conflicts + i.invalid
                  UNION ALL
                  SELECT q.batch_digest, q.batch_digest || ' (no inbox row, quarantine rows '
                             || q.n || ')'
                  FROM q
                  WHERE NOT EXISTS (SELECT 1 FROM ingest_inbox AS i
                                    WHERE i.batch_digest = q.batch_digest))
         SELECT what, count(*) OVER () FROM bad ORDER BY digest LIMIT ?1",
    )?;
    Ok(quarantine_finding(batches, rows, &first, total))
}

pub(crate) fn events_have_batch(store: &SqliteStore) -> Result<Finding, StoreError> {
    let events = count(&store.conn, "SELECT count(*) FROM spoolite_event")?;
    // Grouped by batch first, through the index on batch_ref: one probe of the
    // inbox per batch, not per event.
    let (first, total) = offenders(
        &store.conn,
        "WITH per_batch AS (SELECT batch_ref, count(*) AS n FROM spoolite_event
                            GROUP BY batch_ref),
              orphan AS (SELECT batch_ref, n FROM per_batch AS p
                         WHERE NOT EXISTS (SELECT 1 FROM ingest_inbox AS i
                                           WHERE i.batch_ref = p.batch_ref))
         SELECT lower(hex(d.key)) || ' (batch_ref ' || quote(d.batch_ref) || ')',
                (SELECT sum(n) FROM orphan)
         FROM spoolite_event AS d
         WHERE d.batch_ref IN (SELECT batch_ref FROM orphan)
            OR d.batch_ref IS NULL
         ORDER BY d.key
         LIMIT ?1",
    )?;
    Ok(events_finding(events, &first, total))
}

pub(crate) fn change_seq_distinct(store: &SqliteStore) -> Result<Finding, StoreError> {
    let events = count(&store.conn, "SELECT count(*) FROM spoolite_event")?;
    let (first, total) = offenders(
        &store.conn,
        "SELECT change_seq || ' (' || n || ' rows)', count(*) OVER ()
         FROM (SELECT change_seq, count(*) AS n FROM spoolite_event
               GROUP BY change_seq HAVING count(*) > 1)
         ORDER BY change_seq
         LIMIT ?1",
    )?;
    Ok(change_seq_finding(events, &first, total))
}

/// `flight_times` against the same figures computed here from the live rows
/// (`duty_event`'s: `spoolite_event` not retracted, read in one pass over the
/// table, not through an index: at 10M rows the plan through the kind index,
/// a look-up of each row, had not ended after 150 s where this one takes 78–88 s
/// on a busy machine), both ways: a flight the view lacks, one it has too many, and one
/// whose times or minutes differ are each one differing flight.
pub(crate) fn flight_times(store: &SqliteStore) -> Result<Finding, StoreError> {
    let flights = count(&store.conn, "SELECT count(*) FROM flight_times")?;
    let (first, total) = offenders(
        &store.conn,
        "WITH live AS (
             SELECT flight_id,
                    min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) AS ob,
                    min(CASE WHEN event_kind = 'takeoff' THEN rtrim(instant_utc, 'Z') END) AS tk,
                    max(CASE WHEN event_kind = 'landing' THEN rtrim(instant_utc, 'Z') END) AS ld,
                    max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) AS onb
             FROM spoolite_event NOT INDEXED
             WHERE retracted = 0
               AND event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
             GROUP BY flight_id),
         expected AS (
             SELECT flight_id, ob || 'Z' AS off_blocks_utc, tk || 'Z' AS takeoff_utc,
                    ld || 'Z' AS landing_utc, onb || 'Z' AS on_blocks_utc,
                    round((julianday(onb) - julianday(ob)) * 1440, 2) AS block_minutes,
                    round((julianday(ld) - julianday(tk)) * 1440, 2) AS airborne_minutes
             FROM live),
         viewed AS (
             SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                    block_minutes, airborne_minutes
             FROM flight_times),
         differing AS (
             SELECT flight_id FROM (SELECT * FROM expected EXCEPT SELECT * FROM viewed)
             UNION
             SELECT flight_id FROM (SELECT * FROM viewed EXCEPT SELECT * FROM expected))
         SELECT flight_id, count(*) OVER () FROM differing ORDER BY flight_id LIMIT ?1",
    )?;
    Ok(flight_times_finding(flights, &first, total))
}

/// Each flight with block time by its live rows (its first off-blocks and last
/// on-blocks, read in one pass over the table as `flight_times` does; on-blocks
/// not before off-blocks) and the payload of that first off-blocks, in flight id
/// order. The loops run in the order written (CROSS JOIN): each flight's times,
/// then its off-blocks row found by key columns, not every live off-blocks by the
/// kind index with a look-up of each.
const CREW_FLIGHT_LIVE: &str = "WITH times AS (
        SELECT flight_id,
               min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) AS ob,
               max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) AS onb
        FROM spoolite_event NOT INDEXED
        WHERE retracted = 0 AND event_kind IN ('off_blocks', 'on_blocks')
        GROUP BY flight_id)
    SELECT t.flight_id, t.ob || 'Z', t.onb || 'Z',
           round((julianday(t.onb) - julianday(t.ob)) * 1440, 2), d.payload
    FROM times AS t
    CROSS JOIN spoolite_event AS d
        ON d.flight_id = t.flight_id AND d.retracted = 0 AND d.event_kind = 'off_blocks'
        AND d.instant_utc = t.ob || 'Z'
    WHERE t.onb >= t.ob
    ORDER BY t.flight_id";

const CREW_FLIGHT_VIEWED: &str = "SELECT coalesce(flight_id, '') AS id, crew_id, role,
        off_blocks_utc, on_blocks_utc, block_minutes
    FROM crew_flight ORDER BY id, crew_id";

/// Each duty with a live duty_start: its first start, its last live end unless
/// that is before the start (open: NULL), the payload of that start.
const CREW_DUTY_LIVE: &str = "WITH times AS (
        SELECT flight_id,
               min(CASE WHEN event_kind = 'duty_start' THEN rtrim(instant_utc, 'Z') END) AS st,
               max(CASE WHEN event_kind = 'duty_end' THEN rtrim(instant_utc, 'Z') END) AS en
        FROM spoolite_event NOT INDEXED
        WHERE retracted = 0 AND event_kind IN ('duty_start', 'duty_end')
        GROUP BY flight_id),
    closed AS (
        SELECT flight_id, st, CASE WHEN en >= st THEN en END AS en
        FROM times WHERE st IS NOT NULL)
    SELECT c.flight_id, c.st || 'Z', c.en || 'Z',
           round((julianday(c.en) - julianday(c.st)) * 1440, 2), d.payload
    FROM closed AS c
    CROSS JOIN spoolite_event AS d
        ON d.flight_id = c.flight_id AND d.retracted = 0 AND d.event_kind = 'duty_start'
        AND d.instant_utc = c.st || 'Z'
    ORDER BY c.flight_id";

const CREW_DUTY_VIEWED: &str = "SELECT coalesce(duty_id, '') AS id, crew_id, role,
        duty_start_utc, duty_end_utc, duty_minutes
    FROM crew_duty ORDER BY id, crew_id";

/// Both sides of a crew check, two statements stepped side by side.
struct Sides<'s> {
    live: rusqlite::Rows<'s>,
    viewed: rusqlite::Rows<'s>,
}

impl CrewSides for Sides<'_> {
    fn live(&mut self) -> Result<Option<Crewed>, StoreError> {
        let Some(row) = self.live.next()? else {
            return Ok(None);
        };
        Ok(Some(Crewed {
            id: row.get(0)?,
            from: row.get(1)?,
            to: row.get(2)?,
            minutes: row.get(3)?,
            payload: row.get(4)?,
        }))
    }

    fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError> {
        let Some(row) = self.viewed.next()? else {
            return Ok(None);
        };
        Ok(Some(CrewLine {
            id: row.get(0)?,
            crew_id: row.get(1)?,
            role: row.get(2)?,
            from: row.get(3)?,
            to: row.get(4)?,
            minutes: row.get(5)?,
        }))
    }
}

/// A crew view against its live events, both read in one read transaction.
fn crew_view(
    store: &SqliteStore,
    view: &str,
    live_sql: &str,
    viewed_sql: &str,
    unit: (&str, &str),
) -> Result<Finding, StoreError> {
    let tx = store.conn.unchecked_transaction()?;
    let mut live = tx.prepare(live_sql)?;
    let mut viewed = tx.prepare(viewed_sql)?;
    let mut sides = Sides {
        live: live.query([])?,
        viewed: viewed.query([])?,
    };
    compare_crew(&mut sides, view, unit)
}

/// `crew_flight` against the crew of each flight's first live off-blocks.
pub(crate) fn crew_flight(store: &SqliteStore) -> Result<Finding, StoreError> {
    crew_view(
        store,
        "crew_flight",
        CREW_FLIGHT_LIVE,
        CREW_FLIGHT_VIEWED,
        ("flight with block time", "flights with block time"),
    )
}

/// `crew_duty` against the crew of each duty's first live duty_start.
pub(crate) fn crew_duty(store: &SqliteStore) -> Result<Finding, StoreError> {
    crew_view(
        store,
        "crew_duty",
        CREW_DUTY_LIVE,
        CREW_DUTY_VIEWED,
        ("duty", "duties"),
    )
}
