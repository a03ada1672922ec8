-- spoolite schema 2: views for analysts. Views hold no data of their own, so a
-- re-dropped batch, which changes no table, changes no view either.

-- One row per flight with its block and airborne times, wherever the events exist.
-- Several events of one kind for a flight (a return to stand, say) take the first
-- off-blocks and takeoff and the last landing and on-blocks. rtrim(instant, 'Z')
-- sorts in time order because canonical instants have no trailing zeros.
CREATE VIEW flight_times AS
WITH per_flight AS (
    SELECT flight_id,
           min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) AS off_blocks,
           min(CASE WHEN event_kind = 'takeoff' THEN rtrim(instant_utc, 'Z') END) AS takeoff,
           max(CASE WHEN event_kind = 'landing' THEN rtrim(instant_utc, 'Z') END) AS landing,
           max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) AS on_blocks
    FROM duty_event
    WHERE event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
    GROUP BY flight_id
)
SELECT flight_id,
       off_blocks || 'Z' AS off_blocks_utc,
       takeoff || 'Z' AS takeoff_utc,
       landing || 'Z' AS landing_utc,
       on_blocks || 'Z' AS on_blocks_utc,
       round((julianday(on_blocks) - julianday(off_blocks)) * 1440, 2) AS block_minutes,
       round((julianday(landing) - julianday(takeoff)) * 1440, 2) AS airborne_minutes
FROM per_flight;

-- One row per ingested batch: its inbox counts, how many rows it is still the last
-- writer of, and how many of its events sit in quarantine.
CREATE VIEW batch_summary AS
SELECT i.batch_digest,
       i.batch_id,
       i.file_name,
       i.ingested_at,
       i.events_total,
       i.inserted,
       i.updated,
       i.unchanged,
       i.stale,
       i.conflicts,
       i.invalid,
       (SELECT count(*) FROM duty_event AS d WHERE d.batch_digest = i.batch_digest) AS rows_last_written,
       (SELECT count(*) FROM quarantine AS q WHERE q.batch_digest = i.batch_digest) AS quarantined
FROM ingest_inbox AS i;
