//! What a PostgreSQL batch keeps per flight and duty besides its events: the
//! flights' times (`spoolite_flight`, which `flight_times` reads) and the crew rows
//! (`spoolite_crew_flight`, `spoolite_crew_duty`, `spoolite_crew_fdp`, read through
//! `crew_flight`, `crew_duty` and `crew_fdp`), each computed again from the live
//! rows of the flights the batch wrote an event of, in the batch's own
//! transaction. A flight duty period depends on every flight of its crew member
//! inside the duty, so the periods computed again are those of the duties written
//! and of the duties that hold the off-blocks of a flight row deleted or written
//! (SQLite's `store::sqlite::crew` says the same rules).
//!
//! Many writers commit at once, so a recomputation must never see a state older
//! than the last commit of what it recomputes. A batch runs it in two parts,
//! once its winners are applied:
//!
//! - `keep_flights`, the flights' times and crew rows, under the locks of the
//!   batch's flights (and duties), which it took before reading any stored row
//!   and holds until it commits: a flight's rows are written only by the holder
//!   of its lock, which reads the rows the last holder committed.
//! - `keep_periods`, the flight duty periods. A period also reads the member's
//!   other flights and duties, which writers of other flights change, so it is
//!   computed in the batch's last step, under the `spoolite_change_seq` row lock
//!   (`batch.rs`): writers pass it one at a time, and in READ COMMITTED each
//!   statement sees every batch committed before. A writer whose rows change a
//!   period computes it there itself, after every writer before it committed, so
//!   the last commit's periods are what stays.
//!
//! The crew rules are `crate::crew`'s, applied here to the payloads read back (a
//! page at a time through a cursor, so memory stays bounded), and the rows
//! COPY'd in: the same rules as SQLite's, with no second reading of them in SQL.

use postgres::Transaction;

use super::copy_text::{copy, row};
use crate::crew;
use crate::store::error::StoreError;

/// Rows read from a cursor at a time.
const FETCH_ROWS: usize = 10_000;

/// Which flights to compute again: those the batch wrote a winner of, every
/// flight id stored (the migration), or those of the rows with a `change_seq`
/// above a number (`copy-db`'s rows, numbered above every row the target had).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Written,
    All,
    ChangedAfter(i64),
}

impl Scope {
    /// The flight ids of the scope with an event of one of `kinds`, as a query
    /// with the column `flight_id`.
    fn flight_ids(self, kinds: &str) -> String {
        match self {
            Scope::Written => format!(
                "SELECT DISTINCT flight_id FROM spoolite_winner WHERE event_kind IN ({kinds})"
            ),
            // In the collation of spoolite_event.flight_id, whose index the
            // recomputation's joins use.
            Scope::ChangedAfter(seq) => format!(
                "SELECT DISTINCT flight_id FROM spoolite_event
                 WHERE change_seq > {seq} AND event_kind IN ({kinds})"
            ),
            Scope::All => {
                "SELECT flight_id COLLATE \"default\" AS flight_id FROM spoolite_flight_id"
                    .to_owned()
            }
        }
    }
}

/// The kinds a flight's times are made of.
const TIMED: &str = "'off_blocks', 'takeoff', 'landing', 'on_blocks'";
/// The kinds a flight's or duty's crew rows are made of.
const CREWED: &str = "'off_blocks', 'on_blocks', 'duty_start', 'duty_end', 'crew_assignment'";

/// The times of the noted flights computed from their live rows.
const TIMES: &str = "CREATE TEMP TABLE spoolite_times ON COMMIT DROP AS
    SELECT t.flight_id,
           min(rtrim(d.instant_utc, 'Z')) FILTER (WHERE d.event_kind = 'off_blocks') || 'Z'
               AS off_blocks_utc,
           min(rtrim(d.instant_utc, 'Z')) FILTER (WHERE d.event_kind = 'takeoff') || 'Z'
               AS takeoff_utc,
           max(rtrim(d.instant_utc, 'Z')) FILTER (WHERE d.event_kind = 'landing') || 'Z'
               AS landing_utc,
           max(rtrim(d.instant_utc, 'Z')) FILTER (WHERE d.event_kind = 'on_blocks') || 'Z'
               AS on_blocks_utc
    FROM spoolite_times_noted AS t
    LEFT JOIN spoolite_event AS d
        ON d.flight_id = t.flight_id AND NOT d.retracted
        AND d.event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
    GROUP BY t.flight_id;
    DELETE FROM spoolite_flight WHERE flight_id IN (
        SELECT flight_id FROM spoolite_times
        WHERE coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NULL);
    INSERT INTO spoolite_flight (flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc)
    SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc FROM spoolite_times
    WHERE coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NOT NULL
    ORDER BY flight_id
    ON CONFLICT (flight_id) DO UPDATE SET
        off_blocks_utc = excluded.off_blocks_utc,
        takeoff_utc = excluded.takeoff_utc,
        landing_utc = excluded.landing_utc,
        on_blocks_utc = excluded.on_blocks_utc;
    DROP TABLE spoolite_times;
    DROP TABLE spoolite_times_noted";

/// The (crew member, off-blocks) of the noted flights' operating crew rows, whose
/// duties' periods follow them: taken before the rows are deleted and after they
/// are written again.
const TOUCH: &str = "INSERT INTO spoolite_crew_touch (crew_id, at)
    SELECT crew_id, off_blocks_utc FROM spoolite_crew_flight
    WHERE flight_id IN (SELECT flight_id FROM spoolite_crew_noted) AND role = 'operating'";

/// The noted flights' crew rows deleted, to be written again.
const CREW_DELETE: &str = "
    DELETE FROM spoolite_crew_flight WHERE flight_id IN (SELECT flight_id FROM spoolite_crew_noted);
    DELETE FROM spoolite_crew_duty WHERE duty_id IN (SELECT flight_id FROM spoolite_crew_noted)";

/// Each noted flight with an off-blocks, its times, the minutes of its block time
/// (as flight_times has them; NULL without) and the payload whose crew it takes:
/// its latest live crew_assignment, else its first live off-blocks (the one event
/// at `off_blocks_utc`: canonical instants are unique per instant, so two events
/// at one time are one key).
const FLIGHTS_CURSOR: &str = "DECLARE spoolite_crew_rows NO SCROLL CURSOR FOR
    SELECT f.flight_id, f.off_blocks_utc, f.on_blocks_utc,
           CASE WHEN rtrim(f.on_blocks_utc, 'Z') >= rtrim(f.off_blocks_utc, 'Z') THEN
               round(extract(epoch FROM f.on_blocks_utc::timestamptz
                                        - f.off_blocks_utc::timestamptz) / 60, 2)::text
           END,
           coalesce(
               (SELECT a.payload FROM spoolite_event AS a
                WHERE a.flight_id = f.flight_id AND NOT a.retracted
                    AND a.event_kind = 'crew_assignment'
                ORDER BY rtrim(a.instant_utc, 'Z') DESC LIMIT 1),
               d.payload)
    FROM spoolite_crew_noted AS t
    JOIN spoolite_flight AS f ON f.flight_id = t.flight_id
    JOIN spoolite_event AS d
        ON d.flight_id = f.flight_id AND NOT d.retracted AND d.event_kind = 'off_blocks'
        AND d.instant_utc = f.off_blocks_utc
    WHERE f.off_blocks_utc IS NOT NULL";

/// Each noted duty with a live duty_start: its first start, its last end unless
/// that is before the start (open: NULL), its minutes and that start's payload.
const DUTIES_CURSOR: &str = "DECLARE spoolite_crew_rows NO SCROLL CURSOR FOR
    WITH times AS (
        SELECT t.flight_id AS duty_id,
               min(rtrim(d.instant_utc, 'Z')) FILTER (WHERE d.event_kind = 'duty_start') || 'Z'
                   AS start_utc,
               max(rtrim(d.instant_utc, 'Z')) FILTER (WHERE d.event_kind = 'duty_end') || 'Z'
                   AS end_utc
        FROM spoolite_crew_noted AS t
        JOIN spoolite_event AS d
            ON d.flight_id = t.flight_id AND NOT d.retracted
            AND d.event_kind IN ('duty_start', 'duty_end')
        GROUP BY t.flight_id
    ), closed AS (
        SELECT duty_id, start_utc,
               CASE WHEN rtrim(end_utc, 'Z') >= rtrim(start_utc, 'Z') THEN end_utc END AS end_utc
        FROM times WHERE start_utc IS NOT NULL
    )
    SELECT c.duty_id, c.start_utc, c.end_utc,
           round(extract(epoch FROM c.end_utc::timestamptz - c.start_utc::timestamptz) / 60, 2)::text,
           d.payload
    FROM closed AS c
    JOIN spoolite_event AS d
        ON d.flight_id = c.duty_id AND NOT d.retracted AND d.event_kind = 'duty_start'
        AND d.instant_utc = c.start_utc";

const COPY_CREW_FLIGHT: &str = "COPY spoolite_crew_flight (flight_id, crew_id, role,
    off_blocks_utc, on_blocks_utc, block_minutes, function) FROM STDIN";
const COPY_CREW_DUTY: &str = "COPY spoolite_crew_duty (duty_id, crew_id, role, duty_start_utc,
    duty_end_utc, duty_minutes, function, duty_type) FROM STDIN";

/// The duties whose periods are computed again: those noted, and each duty of a
/// touched crew member that holds the touched off-blocks (from its start to its
/// end, or on while open): the duties begun in the two days before it by the crew
/// index, and the open ones and those of over two days by a partial index of few
/// rows (see SQLite's `TOUCHED_DUTIES`); the exact test orders instants by time.
const FDP_NOTED: &str = "CREATE TEMP TABLE spoolite_fdp_noted ON COMMIT DROP AS
    SELECT flight_id AS duty_id FROM spoolite_crew_noted
    UNION
    SELECT d.duty_id FROM spoolite_crew_touch AS t
    JOIN spoolite_crew_duty AS d
        ON d.crew_id = t.crew_id AND d.duty_start_utc <= left(t.at, 19) || 'Z'
        AND d.duty_start_utc >= to_char((rtrim(t.at, 'Z') || 'Z')::timestamptz AT TIME ZONE 'UTC'
                - interval '2 days 1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS') COLLATE \"C\"
    WHERE rtrim(d.duty_start_utc, 'Z') <= rtrim(t.at, 'Z')
        AND (d.duty_end_utc IS NULL OR rtrim(d.duty_end_utc, 'Z') >= rtrim(t.at, 'Z'))
    UNION
    SELECT d.duty_id FROM spoolite_crew_touch AS t
    JOIN spoolite_crew_duty AS d
        ON d.crew_id = t.crew_id AND d.duty_start_utc <= left(t.at, 19) || 'Z'
    WHERE (d.duty_end_utc IS NULL OR d.duty_minutes > 2880)
        AND rtrim(d.duty_start_utc, 'Z') <= rtrim(t.at, 'Z')
        AND (d.duty_end_utc IS NULL OR rtrim(d.duty_end_utc, 'Z') >= rtrim(t.at, 'Z'))";

/// The flight duty period of each crew member of the duties `{duties}` (a query
/// with the column `duty_id`): an airport standby whole; a flight or ground duty
/// to the on-blocks of the member's last operating flight whose off-blocks lies in
/// it, or to the duty's end where that flight has no block time; none without
/// such a flight. Of several flights at that off-blocks, the one with the latest
/// on-blocks. The flights are one range of the crew index for that member, bounded
/// on both sides: from the start's second to the end's, or to `'~'`, past every
/// instant in the columns' byte order (`COLLATE "C"`), while the duty is open (an
/// `OR` there left the range open above, so a duty read every later flight of its
/// member); the exact test orders instants by time.
fn periods_sql(duties: &str) -> String {
    format!(
        "INSERT INTO spoolite_crew_fdp
             (duty_id, crew_id, function, fdp_start_utc, fdp_end_utc, fdp_minutes)
         SELECT d.duty_id, d.crew_id, d.function, d.duty_start_utc, e.end_utc,
                round(extract(epoch FROM e.end_utc::timestamptz
                                         - d.duty_start_utc::timestamptz) / 60, 2)
         FROM ({duties}) AS n
         JOIN spoolite_crew_duty AS d ON d.duty_id = n.duty_id
         LEFT JOIN LATERAL (
             SELECT f.off_blocks_utc, f.on_blocks_utc, f.block_minutes
             FROM spoolite_crew_flight AS f
             WHERE f.crew_id = d.crew_id
                 AND f.off_blocks_utc >= left(d.duty_start_utc, 19)
                 AND f.off_blocks_utc <= coalesce(left(d.duty_end_utc, 19) || 'Z', '~')
                 AND f.role = 'operating'
                 AND rtrim(f.off_blocks_utc, 'Z') >= rtrim(d.duty_start_utc, 'Z')
                 AND (d.duty_end_utc IS NULL
                      OR rtrim(f.off_blocks_utc, 'Z') <= rtrim(d.duty_end_utc, 'Z'))
             ORDER BY rtrim(f.off_blocks_utc, 'Z') DESC,
                      CASE WHEN f.block_minutes IS NOT NULL
                           THEN rtrim(f.on_blocks_utc, 'Z') END DESC NULLS LAST
             LIMIT 1
         ) AS l ON d.duty_type <> 'airport_standby'
         CROSS JOIN LATERAL (
             SELECT CASE WHEN d.duty_type = 'airport_standby' OR l.block_minutes IS NULL
                         THEN d.duty_end_utc ELSE l.on_blocks_utc END AS end_utc
         ) AS e
         WHERE d.duty_type = 'airport_standby'
             OR (d.duty_type IN ('flight_duty', 'ground_duty') AND l.off_blocks_utc IS NOT NULL)"
    )
}

/// Computes again the times, crew rows and flight duty periods of the flights in
/// `scope`, in the migration's or `copy-db`'s transaction (which hold their own
/// locks); a batch runs the two parts apart.
pub(crate) fn keep(tx: &mut Transaction<'_>, scope: Scope) -> Result<(), StoreError> {
    keep_flights(tx, scope)?;
    keep_periods(tx, scope)
}

/// Computes again the times and crew rows of the flights in `scope`, and notes
/// the crew members and times whose periods follow them (`keep_periods`); call
/// under the flights' locks, once the batch's winners are applied.
pub(crate) fn keep_flights(tx: &mut Transaction<'_>, scope: Scope) -> Result<(), StoreError> {
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE spoolite_times_noted ON COMMIT DROP AS {};
         CREATE TEMP TABLE spoolite_crew_noted ON COMMIT DROP AS {}",
        scope.flight_ids(TIMED),
        scope.flight_ids(CREWED),
    ))?;
    // The cursors below are read to their end: planned for their whole result,
    // not for their first tenth (PostgreSQL's default for a cursor took a
    // nested loop over every flight, and a copy of 1M events sat for minutes in
    // its first FETCH). Every temporary table is analysed once filled: without
    // statistics the planner takes one for 1,360 rows, and for a station's file
    // of a few dozen flights it read the whole event and crew tables (hash
    // joins) where an index search per flight is what the file needs, so a
    // file's cost grew with the database. A bulk scope also analyses the tables
    // it joins, which may have been filled in this transaction.
    tx.batch_execute("SET LOCAL cursor_tuple_fraction = 1.0")?;
    tx.batch_execute("ANALYZE spoolite_times_noted, spoolite_crew_noted")?;
    if scope != Scope::Written {
        tx.batch_execute("ANALYZE spoolite_event, spoolite_flight")?;
    }
    tx.batch_execute(TIMES)?;
    let all = scope == Scope::All;
    if !all {
        tx.batch_execute(
            "CREATE TEMP TABLE spoolite_crew_touch (crew_id text COLLATE \"C\", at text COLLATE \"C\")
             ON COMMIT DROP",
        )?;
        tx.batch_execute(TOUCH)?;
    }
    tx.batch_execute(CREW_DELETE)?;
    write_crew(tx, FLIGHTS_CURSOR, COPY_CREW_FLIGHT, Kind::Flight)?;
    write_crew(tx, DUTIES_CURSOR, COPY_CREW_DUTY, Kind::Duty)?;
    if !all {
        tx.batch_execute(TOUCH)?;
        tx.batch_execute("ANALYZE spoolite_crew_touch")?;
    }
    Ok(())
}

/// Computes again the flight duty periods that the flights and duties of
/// `keep_flights` hold or touch; call under the counter lock.
pub(crate) fn keep_periods(tx: &mut Transaction<'_>, scope: Scope) -> Result<(), StoreError> {
    // One round trip: a batch runs this in its last step, which writers take
    // one at a time.
    let steps = match scope {
        Scope::All => format!(
            "DELETE FROM spoolite_crew_fdp; {}",
            periods_sql("SELECT DISTINCT duty_id FROM spoolite_crew_duty")
        ),
        _ => format!(
            "{FDP_NOTED};
             ANALYZE spoolite_fdp_noted;
             DELETE FROM spoolite_crew_fdp
             WHERE duty_id IN (SELECT duty_id FROM spoolite_fdp_noted);
             {};
             DROP TABLE spoolite_fdp_noted; DROP TABLE spoolite_crew_touch",
            periods_sql("SELECT duty_id FROM spoolite_fdp_noted")
        ),
    };
    tx.batch_execute(&format!("{steps}; DROP TABLE spoolite_crew_noted"))?;
    Ok(())
}

/// Which crew rows a cursor's rows make.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flight,
    Duty,
}

/// Reads `cursor`'s rows (id, start, end, minutes, payload) a page at a time and
/// COPYs one row per crew member of each with `copy_sql`, page by page: with the
/// member's function, and a duty's type.
fn write_crew(
    tx: &mut Transaction<'_>,
    cursor: &str,
    copy_sql: &str,
    kind: Kind,
) -> Result<(), StoreError> {
    tx.batch_execute(cursor)?;
    let fetch = format!("FETCH {FETCH_ROWS} FROM spoolite_crew_rows");
    let mut out = Vec::new();
    loop {
        let rows = tx.query(&fetch, &[])?;
        for found in &rows {
            let id: &str = found.get(0);
            let start: &str = found.get(1);
            let end: Option<&str> = found.get(2);
            let minutes: Option<&str> = found.get(3);
            let payload: &str = found.get(4);
            let (crew, duty_type) = match kind {
                Kind::Flight => (crew::of_payload(payload), None),
                Kind::Duty => {
                    let (crew, duty_type) = crew::of_duty_payload(payload);
                    (crew, Some(duty_type.as_str()))
                }
            };
            for member in crew {
                let mut fields = vec![
                    Some(id),
                    Some(member.id()),
                    Some(member.role().as_str()),
                    Some(start),
                    end,
                    minutes,
                    Some(member.function().as_str()),
                ];
                if kind == Kind::Duty {
                    fields.push(duty_type);
                }
                row(&mut out, &fields);
            }
        }
        copy(tx, copy_sql, &mut out)?;
        if rows.len() < FETCH_ROWS {
            break;
        }
    }
    tx.batch_execute("CLOSE spoolite_crew_rows")?;
    Ok(())
}
