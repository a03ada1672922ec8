//! `spoolite check` on PostgreSQL: one statement per check (see `store::check`).

use std::collections::VecDeque;

use postgres::types::ToSql;
use postgres::{Portal, Row, Transaction};

use super::{PgStore, SCHEMA_VERSION};
use crate::store::error::StoreError;
use crate::store::findings::{
    CrewLine, CrewSides, Crewed, FdpInput, FdpLine, FdpSides, Finding, OFFENDERS_SHOWN,
    SLOTS_COUNT, SLOTS_UNSETTLED, Unit, change_seq_finding, compare_crew, compare_fdp,
    data_quality_finding, events_finding, flight_times_finding, inbox_finding, quarantine_finding,
    slots_finding,
};

/// The relations spoolite's schema makes, tables and views.
const RELATIONS: &[&str] = &[
    "spoolite_schema",
    "ingest_inbox",
    "spoolite_event",
    "spoolite_change_seq",
    "spoolite_change_seq_next",
    "quarantine",
    "spoolite_flight_id",
    "spoolite_flight",
    "spoolite_crew_flight",
    "spoolite_crew_duty",
    "duty_event_all",
    "duty_event",
    "flight_times",
    "batch_summary",
    "crew_flight",
    "crew_duty",
];

/// The rows of a statement whose rows are `(offender, total)` (see the SQLite
/// side).
fn offenders(store: &mut PgStore, sql: &str) -> Result<(Vec<String>, i64), StoreError> {
    let params: [&(dyn ToSql + Sync); 1] = [&OFFENDERS_SHOWN];
    let rows = store.client.query(sql, &params)?;
    let total = rows.first().map_or(0, |row| row.get::<_, i64>(1));
    let first = rows.iter().map(|row| row.get::<_, String>(0)).collect();
    Ok((first, total))
}

fn count(store: &mut PgStore, sql: &str) -> Result<i64, StoreError> {
    Ok(store.client.query_one(sql, &[])?.get(0))
}

/// PostgreSQL keeps its own pages' checksums (when the cluster has them) and
/// has no `integrity_check` a reader may run; what stands in: the schema version
/// is this spoolite's, every table and view of the schema is there, the
/// `change_seq` counter is one row above every stored `change_seq`, and the
/// sequence batches number their rows from is not behind it.
pub(crate) fn integrity(store: &mut PgStore, _quick: bool) -> Result<Finding, StoreError> {
    let version = store.schema_version()?;
    let mut problems = Vec::new();
    if version != SCHEMA_VERSION {
        problems.push(format!(
            "schema version {version}, this spoolite's is {SCHEMA_VERSION}"
        ));
    }
    let names: Vec<String> = RELATIONS.iter().map(|name| name.to_string()).collect();
    let missing: Vec<String> = store
        .client
        .query(
            "SELECT name FROM unnest($1::text[]) AS name WHERE to_regclass(name) IS NULL
             ORDER BY name",
            &[&names],
        )?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("missing: {}", missing.join(", ")));
        return Ok(Finding::fails(problems.join("; ")));
    }
    let row = store.client.query_one(
        &format!(
            "SELECT (SELECT count(*) FROM spoolite_change_seq),
                    (SELECT min(next_seq) FROM spoolite_change_seq),
                    (SELECT max(change_seq) FROM spoolite_event),
                    {}",
            super::SEQUENCE_NEXT
        ),
        &[],
    )?;
    let (counters, next, largest, sequence): (i64, Option<i64>, Option<i64>, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    if let Some(next) = next
        && sequence < next
    {
        // A batch numbers its rows from the sequence (schema 8).
        problems.push(format!(
            "the sequence spoolite_change_seq_next gives {sequence}, below the next \
             change_seq {next}"
        ));
    }
    if counters != 1 {
        problems.push(format!("spoolite_change_seq holds {counters} rows, not 1"));
    } else if let (Some(next), Some(largest)) = (next, largest)
        && next <= largest
    {
        problems.push(format!(
            "the next change_seq {next} is not above the largest stored, {largest}"
        ));
    }
    if problems.is_empty() {
        return Ok(Finding::holds(format!(
            "schema version {version}, {} tables and views, the change_seq counter above \
             every row (PostgreSQL has no integrity_check; its page checksums are the \
             server's)",
            RELATIONS.len()
        )));
    }
    Ok(Finding::fails(problems.join("; ")))
}

pub(crate) fn inbox_counts(store: &mut PgStore) -> Result<Finding, StoreError> {
    let batches = count(store, "SELECT count(*) FROM ingest_inbox")?;
    let (first, total) = offenders(
        store,
        "SELECT batch_digest || ' (events_total ' || events_total || ', outcomes add up to '
                || (inserted + updated + unchanged + stale + conflicts + invalid) || ')',
                count(*) OVER ()
         FROM ingest_inbox
         WHERE events_total IS DISTINCT FROM
               inserted + updated + unchanged + stale + conflicts + invalid
         ORDER BY batch_digest
         LIMIT $1",
    )?;
    Ok(inbox_finding(batches, &first, total))
}

pub(crate) fn quarantine_counts(store: &mut PgStore) -> Result<Finding, StoreError> {
    let batches = count(store, "SELECT count(*) FROM ingest_inbox")?;
    let rows = count(store, "SELECT count(*) FROM quarantine")?;
    let (first, total) = offenders(
        store,
        "WITH q AS (SELECT batch_digest, count(*) AS n FROM quarantine GROUP BY batch_digest),
              bad AS (
                  SELECT i.batch_digest AS digest,
                         i.batch_digest || ' (conflicts + invalid ' || (i.conflicts + i.invalid)
                             || ', quarantine rows ' || coalesce(q.n, 0) || ')' AS what
                  FROM ingest_inbox AS i LEFT JOIN q ON q.batch_digest = i.batch_digest
                  WHERE coalesce(q.n, 0) IS DISTINCT FROM i.conflicts + i.invalid
                  UNION ALL
                  SELECT q.batch_digest, q.batch_digest || ' (no inbox row, quarantine rows '
                             || q.n || ')'
                  FROM q
                  WHERE NOT EXISTS (SELECT 1 FROM ingest_inbox AS i
                                    WHERE i.batch_digest = q.batch_digest))
         SELECT what, count(*) OVER () FROM bad ORDER BY digest LIMIT $1",
    )?;
    Ok(quarantine_finding(batches, rows, &first, total))
}

pub(crate) fn events_have_batch(store: &mut PgStore) -> Result<Finding, StoreError> {
    let events = count(store, "SELECT count(*) FROM spoolite_event")?;
    let (first, total) = offenders(
        store,
        "WITH per_batch AS (SELECT batch_digest, count(*) AS n FROM spoolite_event
                            GROUP BY batch_digest),
              orphan AS (SELECT batch_digest, n FROM per_batch AS p
                         WHERE NOT EXISTS (SELECT 1 FROM ingest_inbox AS i
                                           WHERE i.batch_digest = p.batch_digest))
         SELECT d.key || ' (batch_digest ' || coalesce(d.batch_digest, 'NULL') || ')',
                (SELECT sum(n)::bigint FROM orphan)
         FROM spoolite_event AS d
         WHERE d.batch_digest IN (SELECT batch_digest FROM orphan)
         ORDER BY d.key
         LIMIT $1",
    )?;
    Ok(events_finding(events, &first, total))
}

pub(crate) fn change_seq_distinct(store: &mut PgStore) -> Result<Finding, StoreError> {
    let events = count(store, "SELECT count(*) FROM spoolite_event")?;
    let (first, total) = offenders(
        store,
        "SELECT change_seq || ' (' || n || ' rows)', count(*) OVER ()
         FROM (SELECT change_seq, count(*) AS n FROM spoolite_event
               GROUP BY change_seq HAVING count(*) > 1) AS dup
         ORDER BY change_seq
         LIMIT $1",
    )?;
    Ok(change_seq_finding(events, &first, total))
}

/// Every slot holds at most one live row, and it is the slot's highest revision
/// (see the SQLite side).
pub(crate) fn slots(store: &mut PgStore) -> Result<Finding, StoreError> {
    let slots = count(store, SLOTS_COUNT)?;
    let (first, total) = offenders(store, &format!("{SLOTS_UNSETTLED} LIMIT $1"))?;
    Ok(slots_finding(slots, &first, total))
}

/// `flight_times` against the figures computed here from `duty_event`, both ways
/// (see the SQLite side).
pub(crate) fn flight_times(store: &mut PgStore) -> Result<Finding, StoreError> {
    let flights = count(store, "SELECT count(*) FROM flight_times")?;
    let (first, total) = offenders(
        store,
        "WITH live AS (
             SELECT flight_id,
                    min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'off_blocks') AS ob,
                    min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'takeoff') AS tk,
                    max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'landing') AS ld,
                    max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'on_blocks') AS onb
             FROM duty_event
             WHERE event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
             GROUP BY flight_id),
         expected AS (
             SELECT flight_id, ob || 'Z' AS off_blocks_utc, tk || 'Z' AS takeoff_utc,
                    ld || 'Z' AS landing_utc, onb || 'Z' AS on_blocks_utc,
                    CASE WHEN onb COLLATE \"C\" >= ob COLLATE \"C\" THEN
                        round(extract(epoch FROM (onb || 'Z')::timestamptz
                                                 - (ob || 'Z')::timestamptz) / 60, 2)
                    END AS block_minutes,
                    CASE WHEN ld COLLATE \"C\" >= tk COLLATE \"C\" THEN
                        round(extract(epoch FROM (ld || 'Z')::timestamptz
                                                 - (tk || 'Z')::timestamptz) / 60, 2)
                    END AS airborne_minutes
             FROM live),
         viewed AS (
             SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                    block_minutes, airborne_minutes
             FROM flight_times),
         differing AS (
             SELECT flight_id FROM (SELECT * FROM expected EXCEPT SELECT * FROM viewed) AS a
             UNION
             SELECT flight_id FROM (SELECT * FROM viewed EXCEPT SELECT * FROM expected) AS b)
         SELECT flight_id, count(*) OVER () FROM differing ORDER BY flight_id LIMIT $1",
    )?;
    Ok(flight_times_finding(flights, &first, total))
}

/// Each flight with an off-blocks by its live rows and the payload whose crew it
/// takes, in flight id order (see the SQLite side); the comparisons of times and
/// the order in byte order (COLLATE "C"), as the batches' and SQLite's.
const CREW_FLIGHT_LIVE: &str = "WITH times AS (
        SELECT flight_id,
               min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'off_blocks') AS ob,
               max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'on_blocks') AS onb,
               max(rtrim(instant_utc, 'Z') COLLATE \"C\")
                   FILTER (WHERE event_kind = 'crew_assignment') AS ca
        FROM duty_event
        WHERE event_kind IN ('off_blocks', 'on_blocks', 'crew_assignment')
        GROUP BY flight_id)
    SELECT t.flight_id, t.ob || 'Z', t.onb || 'Z',
           CASE WHEN t.onb COLLATE \"C\" >= t.ob COLLATE \"C\" THEN
               round(extract(epoch FROM (t.onb || 'Z')::timestamptz
                                        - (t.ob || 'Z')::timestamptz) / 60, 2)::float8
           END,
           coalesce(a.payload, d.payload)
    FROM times AS t
    JOIN duty_event AS d
        ON d.flight_id = t.flight_id AND d.event_kind = 'off_blocks'
        AND d.instant_utc = t.ob || 'Z'
    LEFT JOIN duty_event AS a
        ON a.flight_id = t.flight_id AND a.event_kind = 'crew_assignment'
        AND a.instant_utc = t.ca || 'Z'
    ORDER BY t.flight_id COLLATE \"C\"";

const CREW_FLIGHT_VIEWED: &str = "SELECT flight_id, crew_id, role, function, NULL::text,
        off_blocks_utc, on_blocks_utc, block_minutes::float8
    FROM spoolite_crew_flight ORDER BY flight_id COLLATE \"C\", crew_id COLLATE \"C\"";

/// Each duty with a live duty_start (see the SQLite side).
const CREW_DUTY_LIVE: &str = "WITH times AS (
        SELECT flight_id,
               min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'duty_start') AS st,
               max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'duty_end') AS en
        FROM duty_event
        WHERE event_kind IN ('duty_start', 'duty_end')
        GROUP BY flight_id),
    closed AS (
        SELECT flight_id, st,
               CASE WHEN en COLLATE \"C\" >= st COLLATE \"C\" THEN en END AS en
        FROM times WHERE st IS NOT NULL)
    SELECT c.flight_id, c.st || 'Z', c.en || 'Z',
           round(extract(epoch FROM (c.en || 'Z')::timestamptz
                                    - (c.st || 'Z')::timestamptz) / 60, 2)::float8,
           d.payload
    FROM closed AS c
    JOIN duty_event AS d
        ON d.flight_id = c.flight_id AND d.event_kind = 'duty_start'
        AND d.instant_utc = c.st || 'Z'
    ORDER BY c.flight_id COLLATE \"C\"";

const CREW_DUTY_VIEWED: &str = "SELECT duty_id, crew_id, role, function, duty_type,
        duty_start_utc, duty_end_utc, duty_minutes::float8
    FROM crew_duty ORDER BY duty_id COLLATE \"C\", crew_id COLLATE \"C\"";

/// The `crew_fdp` check's three sides, each by its crew index in crew id order.
const FDP_DUTIES: &str = "SELECT crew_id, duty_id, duty_start_utc, duty_end_utc, duty_type,
        function
    FROM spoolite_crew_duty ORDER BY crew_id";
const FDP_FLIGHTS: &str = "SELECT crew_id, flight_id, off_blocks_utc, on_blocks_utc,
        CASE WHEN block_minutes IS NOT NULL THEN 'block' ELSE 'none' END, role
    FROM spoolite_crew_flight ORDER BY crew_id";
const FDP_PERIODS: &str = "SELECT crew_id, duty_id, function, fdp_start_utc, fdp_end_utc,
        fdp_minutes::float8
    FROM spoolite_crew_fdp ORDER BY crew_id";

/// How many rows of each side one fetch brings.
const FETCH_ROWS: i32 = 10_000;

/// One side of a crew check: a portal fetched in chunks.
struct Side {
    portal: Portal,
    rows: VecDeque<Row>,
    done: bool,
}

impl Side {
    fn of(portal: Portal) -> Side {
        Side {
            portal,
            rows: VecDeque::new(),
            done: false,
        }
    }

    fn next(&mut self, tx: &mut Transaction<'_>) -> Result<Option<Row>, StoreError> {
        if self.rows.is_empty() && !self.done {
            self.rows.extend(tx.query_portal(&self.portal, FETCH_ROWS)?);
            self.done = self.rows.len() < FETCH_ROWS as usize;
        }
        Ok(self.rows.pop_front())
    }
}

/// A read-only REPEATABLE READ transaction: one snapshot for a check's portals.
fn snapshot(store: &mut PgStore) -> Result<Transaction<'_>, StoreError> {
    Ok(store
        .client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?)
}

/// Both sides of a crew check, two portals of one transaction.
struct Sides<'t> {
    tx: Transaction<'t>,
    live: Side,
    viewed: Side,
}

impl CrewSides for Sides<'_> {
    fn live(&mut self) -> Result<Option<Crewed>, StoreError> {
        let Some(row) = self.live.next(&mut self.tx)? else {
            return Ok(None);
        };
        Crewed::read(&row).map(Some)
    }

    fn viewed(&mut self) -> Result<Option<CrewLine>, StoreError> {
        let Some(row) = self.viewed.next(&mut self.tx)? else {
            return Ok(None);
        };
        CrewLine::read(&row).map(Some)
    }
}

/// A crew view against its live events, both read in one read-only REPEATABLE
/// READ transaction (one snapshot).
fn crew_view(
    store: &mut PgStore,
    view: &str,
    live_sql: &str,
    viewed_sql: &str,
    unit: Unit,
) -> Result<Finding, StoreError> {
    let mut tx = snapshot(store)?;
    let live = Side::of(tx.bind(live_sql, &[])?);
    let viewed = Side::of(tx.bind(viewed_sql, &[])?);
    let mut sides = Sides { tx, live, viewed };
    let finding = compare_crew(&mut sides, view, unit)?;
    sides.tx.rollback()?;
    Ok(finding)
}

/// The crew rows of flights (`crew_flight` and those without block time) against
/// the crew of each flight's latest live crew assignment or first live off-blocks.
pub(crate) fn crew_flight(store: &mut PgStore) -> Result<Finding, StoreError> {
    crew_view(
        store,
        "crew_flight",
        CREW_FLIGHT_LIVE,
        CREW_FLIGHT_VIEWED,
        Unit::Flight,
    )
}

/// `crew_duty` against the crew and type of each duty's first live duty_start.
pub(crate) fn crew_duty(store: &mut PgStore) -> Result<Finding, StoreError> {
    crew_view(
        store,
        "crew_duty",
        CREW_DUTY_LIVE,
        CREW_DUTY_VIEWED,
        Unit::Duty,
    )
}

/// The data quality counts over the whole database at now (see the SQLite side).
const DATA_QUALITY_SQL: &str = "WITH bounds AS (
        SELECT to_char(now() AT TIME ZONE 'UTC' - interval '1 day', 'YYYY-MM-DD\"T\"HH24:MI:SS')
                   COLLATE \"C\" AS day_ago,
               to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') COLLATE \"C\" AS now)
    SELECT
      (SELECT count(DISTINCT crew_id) FROM spoolite_crew_flight, bounds
       WHERE role = 'operating' AND on_blocks_utc IS NULL AND rtrim(off_blocks_utc, 'Z') < day_ago),
      (SELECT count(DISTINCT crew_id) FROM spoolite_crew_flight
       WHERE role = 'operating' AND on_blocks_utc IS NOT NULL AND block_minutes IS NULL),
      (SELECT count(DISTINCT crew_id) FROM spoolite_crew_duty, bounds
       WHERE duty_end_utc IS NULL AND rtrim(duty_start_utc, 'Z') < day_ago),
      (SELECT count(*) FROM (
         SELECT crew_id FROM (
           SELECT crew_id, rtrim(off_blocks_utc, 'Z') AS s,
                  max(rtrim(on_blocks_utc, 'Z')) OVER (PARTITION BY crew_id ORDER BY off_blocks_utc
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
           FROM spoolite_crew_flight WHERE role = 'operating' AND block_minutes IS NOT NULL) AS f
         WHERE reach > s
         UNION
         SELECT crew_id FROM (
           SELECT crew_id, rtrim(duty_start_utc, 'Z') AS s,
                  max(coalesce(rtrim(duty_end_utc, 'Z'), (SELECT now FROM bounds))) OVER (
                      PARTITION BY crew_id ORDER BY duty_start_utc
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
           FROM spoolite_crew_duty) AS d
         WHERE reach > s) AS o)";

/// The data quality counts (informational).
pub(crate) fn data_quality(store: &mut PgStore) -> Result<Finding, StoreError> {
    let row = store.client.query_one(DATA_QUALITY_SQL, &[])?;
    Ok(data_quality_finding([
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
    ]))
}

/// The `crew_fdp` check's three portals of one transaction.
struct FdpPortals<'t> {
    tx: Transaction<'t>,
    duties: Side,
    flights: Side,
    periods: Side,
}

impl FdpSides for FdpPortals<'_> {
    fn duty(&mut self) -> Result<Option<FdpInput>, StoreError> {
        (self.duties.next(&mut self.tx)?)
            .map(|row| FdpInput::read(&row))
            .transpose()
    }

    fn flight(&mut self) -> Result<Option<FdpInput>, StoreError> {
        (self.flights.next(&mut self.tx)?)
            .map(|row| FdpInput::read(&row))
            .transpose()
    }

    fn period(&mut self) -> Result<Option<FdpLine>, StoreError> {
        let Some(row) = self.periods.next(&mut self.tx)? else {
            return Ok(None);
        };
        FdpLine::read(&row).map(Some)
    }
}

/// `crew_fdp` against the periods the crew rows of duties and flights give, in one
/// read-only REPEATABLE READ transaction.
pub(crate) fn crew_fdp(store: &mut PgStore) -> Result<Finding, StoreError> {
    let mut tx = snapshot(store)?;
    let duties = Side::of(tx.bind(FDP_DUTIES, &[])?);
    let flights = Side::of(tx.bind(FDP_FLIGHTS, &[])?);
    let periods = Side::of(tx.bind(FDP_PERIODS, &[])?);
    let mut portals = FdpPortals {
        tx,
        duties,
        flights,
        periods,
    };
    let finding = compare_fdp(&mut portals)?;
    portals.tx.rollback()?;
    Ok(finding)
}
