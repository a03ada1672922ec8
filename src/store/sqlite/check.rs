//! `spoolite check` on SQLite: one statement per check, on the read-only
//! connection (see `store::check`).

use std::cmp::Ordering;

use rusqlite::Connection;

use super::SqliteStore;
use crate::store::error::StoreError;
use crate::store::findings::{
    CrewLine, CrewSides, Crewed, FdpInput, FdpLine, FdpSides, Finding, OFFENDERS_SHOWN,
    SLOTS_COUNT, SLOTS_UNSETTLED, Unit, change_seq_finding, compare_crew, compare_fdp,
    data_quality_finding, events_finding, flight_times_finding, inbox_finding, listed,
    quarantine_finding, slots_finding,
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

/// Every slot holds at most one live row, and it is the slot's highest revision
/// (the contract's *Slots*), through the slots' partial index.
pub(crate) fn slots(store: &SqliteStore) -> Result<Finding, StoreError> {
    let slots = count(&store.conn, SLOTS_COUNT)?;
    let (first, total) = offenders(&store.conn, &format!("{SLOTS_UNSETTLED} LIMIT ?1"))?;
    Ok(slots_finding(slots, &first, total))
}

/// Each flight's times and minutes as its live rows give them (`duty_event`'s:
/// `spoolite_event` not retracted), in flight id order: one scan of the covering
/// `(flight_id, retracted, event_kind, instant_utc)` index, grouped as it goes.
/// The unary `+` keeps the planner off the live rows' kind index, through which
/// each row would be looked up (at 10M rows that plan had not ended after 150 s).
const FLIGHT_TIMES_LIVE: &str = "SELECT flight_id, ob || 'Z', tk || 'Z', ld || 'Z', onb || 'Z',
        CASE WHEN onb >= ob THEN round((julianday(onb) - julianday(ob)) * 1440, 2) END,
        CASE WHEN ld >= tk THEN round((julianday(ld) - julianday(tk)) * 1440, 2) END
    FROM (SELECT flight_id,
                 min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) AS ob,
                 min(CASE WHEN event_kind = 'takeoff' THEN rtrim(instant_utc, 'Z') END) AS tk,
                 max(CASE WHEN event_kind = 'landing' THEN rtrim(instant_utc, 'Z') END) AS ld,
                 max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) AS onb
          FROM spoolite_event
          WHERE +retracted = 0
            AND +event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
          GROUP BY flight_id)
    ORDER BY flight_id";

/// `flight_times` in flight id order (its flight id index).
const FLIGHT_TIMES_VIEWED: &str = "SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc,
        on_blocks_utc, block_minutes, airborne_minutes
    FROM flight_times ORDER BY flight_id";

/// A flight's row on one side of the `flight_times` check: its id, then its times
/// and minutes as SQLite values.
type TimesRow = (String, Vec<rusqlite::types::Value>);

fn times_row(rows: &mut rusqlite::Rows<'_>) -> Result<Option<TimesRow>, StoreError> {
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let values = (1..7)
        .map(|at| row.get::<_, rusqlite::types::Value>(at))
        .collect::<Result<_, _>>()?;
    Ok(Some((row.get(0)?, values)))
}

/// `flight_times` against the same figures computed from the live rows, the two
/// sides read in flight id order and merged, both ways: a flight the view lacks,
/// one it has too many, and one whose times or minutes differ are each one
/// differing flight. (Two `EXCEPT`s of the two sides took 30 s of temporary
/// b-trees at 10M rows; BENCHMARKS.md, "check".)
pub(crate) fn flight_times(store: &SqliteStore) -> Result<Finding, StoreError> {
    let tx = store.conn.unchecked_transaction()?;
    let mut live = tx.prepare(FLIGHT_TIMES_LIVE)?;
    let mut viewed = tx.prepare(FLIGHT_TIMES_VIEWED)?;
    let (mut live, mut viewed) = (live.query([])?, viewed.query([])?);
    let (mut flights, mut total, mut first) = (0_i64, 0_i64, Vec::new());
    let (mut l, mut v) = (times_row(&mut live)?, times_row(&mut viewed)?);
    loop {
        let order = match (&l, &v) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(l), Some(v)) => l.0.cmp(&v.0),
        };
        let differing = match (order, &l, &v) {
            (Ordering::Less, Some(l), _) => Some(l.0.clone()),
            (Ordering::Greater, _, Some(v)) => Some(v.0.clone()),
            (Ordering::Equal, Some(l), Some(v)) => (l.1 != v.1).then(|| v.0.clone()),
            _ => unreachable!("an order of rows that exist"),
        };
        if let Some(flight_id) = differing {
            total += 1;
            if first.len() < OFFENDERS_SHOWN as usize {
                first.push(flight_id);
            }
        }
        if order != Ordering::Greater {
            l = times_row(&mut live)?;
        }
        if order != Ordering::Less {
            flights += 1;
            v = times_row(&mut viewed)?;
        }
    }
    Ok(flight_times_finding(flights, &first, total))
}

/// Each flight with an off-blocks by its live rows (its first off-blocks and last
/// on-blocks, read in one pass over the flight index as `flight_times` is; minutes
/// where on-blocks is not before off-blocks) and the payload whose crew it takes:
/// its latest live crew_assignment, else that first off-blocks; in flight id
/// order. The loops run in the order written (CROSS JOIN): each flight's times,
/// then its off-blocks row found by key columns, not every live off-blocks by the
/// kind index with a look-up of each.
const CREW_FLIGHT_LIVE: &str = "WITH times AS (
        SELECT flight_id,
               min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) AS ob,
               max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) AS onb,
               max(CASE WHEN event_kind = 'crew_assignment' THEN rtrim(instant_utc, 'Z') END)
                   AS ca
        FROM spoolite_event
        WHERE +retracted = 0 AND +event_kind IN ('off_blocks', 'on_blocks', 'crew_assignment')
        GROUP BY flight_id)
    SELECT t.flight_id, t.ob || 'Z', t.onb || 'Z',
           CASE WHEN t.onb >= t.ob THEN round((julianday(t.onb) - julianday(t.ob)) * 1440, 2) END,
           coalesce(a.payload, d.payload)
    FROM times AS t
    CROSS JOIN spoolite_event AS d
        ON d.flight_id = t.flight_id AND d.retracted = 0 AND d.event_kind = 'off_blocks'
        AND d.instant_utc = t.ob || 'Z'
    LEFT JOIN spoolite_event AS a INDEXED BY spoolite_event_flight
        ON a.flight_id = t.flight_id AND a.retracted = 0 AND a.event_kind = 'crew_assignment'
        AND a.instant_utc = t.ca || 'Z'
    ORDER BY t.flight_id";

/// The crew rows of flights (with or without block time) in (flight id, crew id)
/// order without a sort: each flight by its id's index (which holds its number),
/// then its crew rows by their key, those that hold that flight's id. A crew row
/// whose flight is gone or whose id is another is not among them: `Sides` reads
/// those after.
const CREW_FLIGHT_VIEWED: &str = "SELECT c.flight_id, c.crew_id, c.role, c.function, NULL,
        c.off_blocks_utc, c.on_blocks_utc, c.block_minutes
    FROM spoolite_flight AS f
    CROSS JOIN spoolite_crew_flight AS c ON c.flight_ref = f.ref AND c.flight_id = f.flight_id
    ORDER BY f.flight_id, c.crew_id";

const CREW_FLIGHT_ORPHANS: Orphans = Orphans {
    count: "SELECT count(*) FROM spoolite_crew_flight",
    rows: "SELECT flight_id, crew_id, role, function, NULL, off_blocks_utc, on_blocks_utc,
            block_minutes
        FROM spoolite_crew_flight AS c
        WHERE NOT EXISTS (SELECT 1 FROM spoolite_flight AS f
                          WHERE f.ref = c.flight_ref AND f.flight_id = c.flight_id)
        ORDER BY flight_id, crew_id",
};

/// Each duty with a live duty_start: its first start, its last live end unless
/// that is before the start (open: NULL), the payload of that start.
const CREW_DUTY_LIVE: &str = "WITH times AS (
        SELECT flight_id,
               min(CASE WHEN event_kind = 'duty_start' THEN rtrim(instant_utc, 'Z') END) AS st,
               max(CASE WHEN event_kind = 'duty_end' THEN rtrim(instant_utc, 'Z') END) AS en
        FROM spoolite_event
        WHERE +retracted = 0 AND +event_kind IN ('duty_start', 'duty_end')
        GROUP BY flight_id),
    closed AS (
        SELECT flight_id, st, CASE WHEN en >= st THEN en END AS en
        FROM times WHERE st IS NOT NULL)
    SELECT c.flight_id, c.st || 'Z', c.en || 'Z',
           round((julianday(c.en) - julianday(c.st)) * 1440, 2), d.payload
    FROM closed AS c
    CROSS JOIN spoolite_event AS d INDEXED BY spoolite_event_flight
        ON d.flight_id = c.flight_id AND d.retracted = 0 AND d.event_kind = 'duty_start'
        AND d.instant_utc = c.st || 'Z'
    ORDER BY c.flight_id";

/// `crew_duty`'s rows in (duty id, crew id) order, as `CREW_FLIGHT_VIEWED`.
const CREW_DUTY_VIEWED: &str = "SELECT c.duty_id, c.crew_id, c.role, c.function, c.duty_type,
        c.duty_start_utc, c.duty_end_utc, c.duty_minutes
    FROM spoolite_flight AS f
    CROSS JOIN spoolite_crew_duty AS c ON c.duty_ref = f.ref AND c.duty_id = f.flight_id
    ORDER BY f.flight_id, c.crew_id";

const CREW_DUTY_ORPHANS: Orphans = Orphans {
    count: "SELECT count(*) FROM spoolite_crew_duty",
    rows: "SELECT duty_id, crew_id, role, function, duty_type, duty_start_utc, duty_end_utc,
            duty_minutes
        FROM spoolite_crew_duty AS c
        WHERE NOT EXISTS (SELECT 1 FROM spoolite_flight AS f
                          WHERE f.ref = c.duty_ref AND f.flight_id = c.duty_id)
        ORDER BY duty_id, crew_id",
};

/// The `crew_fdp` check's three sides in crew id order: the crew rows of duties
/// and flights sorted (the `+` keeps the planner off the crew indexes, through
/// which each row would be looked up at random), the periods in their key's order.
const FDP_DUTIES: &str = "SELECT crew_id, duty_id, duty_start_utc, duty_end_utc, duty_type,
        function
    FROM spoolite_crew_duty ORDER BY +crew_id";
const FDP_FLIGHTS: &str = "SELECT crew_id, flight_id, off_blocks_utc, on_blocks_utc,
        CASE WHEN block_minutes IS NOT NULL THEN 'block' ELSE 'none' END, role
    FROM spoolite_crew_flight ORDER BY +crew_id";
const FDP_PERIODS: &str = "SELECT crew_id, duty_id, function, fdp_start_utc, fdp_end_utc,
        fdp_minutes
    FROM spoolite_crew_fdp ORDER BY crew_id";

/// A crew table's rows that name no flight by both its number and its id,
/// read only when the table holds more rows than the view's join gave.
#[derive(Clone, Copy)]
struct Orphans {
    count: &'static str,
    rows: &'static str,
}

/// Both sides of a crew check, two statements stepped side by side; after the
/// view's rows, those of its table that name no flight by its number and id
/// (`Orphans`), out of order: each counts once as a row the live events lack,
/// but when a live row not yet merged is the same.
struct Sides<'c, 's> {
    tx: &'c Connection,
    live: rusqlite::Rows<'s>,
    viewed: rusqlite::Rows<'s>,
    /// The view's rows read so far.
    seen: i64,
    orphans: Orphans,
    orphan_rows: Option<rusqlite::Rows<'s>>,
    orphan_statement: Option<&'s mut rusqlite::Statement<'c>>,
}

impl CrewSides for Sides<'_, '_> {
    fn live(&mut self) -> Result<Option<Crewed>, StoreError> {
        let Some(row) = self.live.next()? else {
            return Ok(None);
        };
        Crewed::read(row).map(Some)
    }

    fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError> {
        if self.orphan_rows.is_none() {
            if let Some(row) = self.viewed.next()? {
                self.seen += 1;
                return CrewLine::read(row).map(Some);
            }
            let Some(statement) = self.orphan_statement.take() else {
                return Ok(None);
            };
            if count(self.tx, self.orphans.count)? == self.seen {
                return Ok(None);
            }
            self.orphan_rows = Some(statement.query([])?);
        }
        let orphans = self.orphan_rows.as_mut().expect("opened above");
        match orphans.next()? {
            Some(row) => CrewLine::read(row).map(Some),
            None => Ok(None),
        }
    }
}

/// A crew view against its live events, both read in one read transaction.
fn crew_view(
    store: &SqliteStore,
    view: &str,
    live_sql: &str,
    (viewed_sql, orphans): (&str, Orphans),
    unit: Unit,
) -> Result<Finding, StoreError> {
    let tx = store.conn.unchecked_transaction()?;
    let mut live = tx.prepare(live_sql)?;
    let mut viewed = tx.prepare(viewed_sql)?;
    let mut orphan_statement = tx.prepare(orphans.rows)?;
    let mut sides = Sides {
        tx: &tx,
        live: live.query([])?,
        viewed: viewed.query([])?,
        seen: 0,
        orphans,
        orphan_rows: None,
        orphan_statement: Some(&mut orphan_statement),
    };
    compare_crew(&mut sides, view, unit)
}

/// The crew rows of flights (`crew_flight` and those without block time) against
/// the crew of each flight's latest live crew assignment or first live off-blocks.
pub(crate) fn crew_flight(store: &SqliteStore) -> Result<Finding, StoreError> {
    crew_view(
        store,
        "crew_flight",
        CREW_FLIGHT_LIVE,
        (CREW_FLIGHT_VIEWED, CREW_FLIGHT_ORPHANS),
        Unit::Flight,
    )
}

/// `crew_duty` against the crew and type of each duty's first live duty_start.
pub(crate) fn crew_duty(store: &SqliteStore) -> Result<Finding, StoreError> {
    crew_view(
        store,
        "crew_duty",
        CREW_DUTY_LIVE,
        (CREW_DUTY_VIEWED, CREW_DUTY_ORPHANS),
        Unit::Duty,
    )
}

/// How many crew members have an operating flight without on-blocks for over a
/// day, one whose on-blocks is before its off-blocks, and a duty open for over a
/// day, at now. Each a scan of its table (`+crew_id`: through the crew index, for
/// its order, each row was looked up at random, a minute at 10M events), the few
/// rows that pass counted apart.
const DATA_QUALITY_SQL: &str = "WITH day_ago(t) AS (SELECT strftime('%Y-%m-%dT%H:%M:%S', 'now', '-1 day'))
    SELECT
      (SELECT count(DISTINCT +crew_id) FROM spoolite_crew_flight, day_ago
       WHERE role = 'operating' AND on_blocks_utc IS NULL AND rtrim(off_blocks_utc, 'Z') < day_ago.t),
      (SELECT count(DISTINCT +crew_id) FROM spoolite_crew_flight
       WHERE role = 'operating' AND on_blocks_utc IS NOT NULL AND block_minutes IS NULL),
      (SELECT count(DISTINCT +crew_id) FROM spoolite_crew_duty, day_ago
       WHERE duty_end_utc IS NULL AND rtrim(duty_start_utc, 'Z') < day_ago.t)";

/// Every operating flight with block time and every duty (an open one to now),
/// each as (crew id, start, end) without the `Z`, sorted by crew id: a sort of
/// narrow rows, where a window function over them took five times as long.
const OVERLAP_SOURCES: [&str; 2] = [
    "SELECT crew_id, rtrim(off_blocks_utc, 'Z'), rtrim(on_blocks_utc, 'Z')
     FROM spoolite_crew_flight WHERE role = 'operating' AND block_minutes IS NOT NULL
     ORDER BY +crew_id",
    "SELECT crew_id, rtrim(duty_start_utc, 'Z'),
            coalesce(rtrim(duty_end_utc, 'Z'), strftime('%Y-%m-%dT%H:%M:%S', 'now'))
     FROM spoolite_crew_duty ORDER BY +crew_id",
];

/// The crew ids whose spans of `sql` (`OVERLAP_SOURCES`) hold two over each other,
/// in crew id order: a crew member has such a pair exactly when two of their spans
/// next to each other in start order are.
fn overlapping_crew(tx: &Connection, sql: &str) -> Result<Vec<String>, StoreError> {
    let mut statement = tx.prepare(sql)?;
    let mut rows = statement.query([])?;
    let mut out: Vec<String> = Vec::new();
    let mut crew: Option<String> = None;
    let mut spans: Vec<(String, String)> = Vec::new();
    let mut close = |crew: &Option<String>, spans: &mut Vec<(String, String)>| {
        spans.sort_unstable();
        if let Some(id) = crew
            && spans.windows(2).any(|pair| pair[1].0 < pair[0].1)
        {
            out.push(id.clone());
        }
        spans.clear();
    };
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        if crew.as_ref() != Some(&id) {
            close(&crew, &mut spans);
            crew = Some(id);
        }
        spans.push((row.get(1)?, row.get(2)?));
    }
    close(&crew, &mut spans);
    Ok(out)
}

/// The data quality counts (informational), in one read transaction.
pub(crate) fn data_quality(store: &SqliteStore) -> Result<Finding, StoreError> {
    let tx = store.conn.unchecked_transaction()?;
    let [open, negative, open_duty]: [i64; 3] = tx.query_row(DATA_QUALITY_SQL, [], |row| {
        Ok([row.get(0)?, row.get(1)?, row.get(2)?])
    })?;
    let flights = overlapping_crew(&tx, OVERLAP_SOURCES[0])?;
    let duties = overlapping_crew(&tx, OVERLAP_SOURCES[1])?;
    // Both in crew id order: the crew members in either, once.
    let mut both: Vec<&String> = flights.iter().chain(&duties).collect();
    both.sort_unstable();
    both.dedup();
    Ok(data_quality_finding([
        open,
        negative,
        open_duty,
        both.len() as i64,
    ]))
}

/// The `crew_fdp` check's three statements, stepped side by side.
struct FdpRows<'s> {
    duties: rusqlite::Rows<'s>,
    flights: rusqlite::Rows<'s>,
    periods: rusqlite::Rows<'s>,
}

impl FdpSides for FdpRows<'_> {
    fn duty(&mut self) -> Result<Option<FdpInput>, StoreError> {
        self.duties.next()?.map(FdpInput::read).transpose()
    }

    fn flight(&mut self) -> Result<Option<FdpInput>, StoreError> {
        self.flights.next()?.map(FdpInput::read).transpose()
    }

    fn period(&mut self) -> Result<Option<FdpLine>, StoreError> {
        let Some(row) = self.periods.next()? else {
            return Ok(None);
        };
        FdpLine::read(row).map(Some)
    }
}

/// `crew_fdp` against the periods the crew rows of duties and flights give, all
/// read in one read transaction.
pub(crate) fn crew_fdp(store: &SqliteStore) -> Result<Finding, StoreError> {
    let tx = store.conn.unchecked_transaction()?;
    let mut duties = tx.prepare(FDP_DUTIES)?;
    let mut flights = tx.prepare(FDP_FLIGHTS)?;
    let mut periods = tx.prepare(FDP_PERIODS)?;
    let mut rows = FdpRows {
        duties: duties.query([])?,
        flights: flights.query([])?,
        periods: periods.query([])?,
    };
    compare_fdp(&mut rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sql: &str) -> Vec<String> {
        super::super::query_plan("", sql)
    }

    #[test]
    fn the_live_sides_scan_the_covering_flight_index_in_flight_id_order() {
        for sql in [FLIGHT_TIMES_LIVE, CREW_FLIGHT_LIVE, CREW_DUTY_LIVE] {
            let plan = plan(sql);
            assert!(
                plan.iter()
                    .any(|step| step.contains("COVERING INDEX spoolite_event_flight")),
                "{plan:?}"
            );
            assert!(
                !plan
                    .iter()
                    .any(|step| step.contains("spoolite_event_kind_instant")),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn the_data_quality_counts_scan_their_tables_not_the_crew_indexes() {
        let plan = plan(DATA_QUALITY_SQL);
        assert!(
            plan.iter().all(
                |step| !step.contains("_crew_flight_crew") && !step.contains("_crew_duty_crew")
            ),
            "{plan:?}"
        );
    }

    #[test]
    fn the_viewed_sides_come_in_order_without_a_sort() {
        for sql in [FLIGHT_TIMES_VIEWED, CREW_FLIGHT_VIEWED, CREW_DUTY_VIEWED] {
            let plan = plan(sql);
            assert!(
                !plan.iter().any(|step| step.contains("TEMP B-TREE")),
                "{plan:?}"
            );
        }
    }
}
