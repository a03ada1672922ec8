-- spoolite schema 5: retractions, the change feed, flight times kept per flight,
-- and a key index analysts can use.
--
-- duty_event_data gains `retracted` (a tombstone: the row stays, under the same
-- revision rules, and leaves the live view) and `change_seq` (set whenever a row
-- is inserted or updated; larger for every later commit). duty_event_all reads
-- every stored row, duty_event the live ones, and every analyst view is built on
-- duty_event.
--
-- The key's only index is now on its lowercase hex, the form analysts write
-- (`WHERE idempotency_key = '…'` on either view uses it), instead of on its bytes,
-- which no query through a view could use. The upserts name that index as their
-- conflict target, so it is still the schema that holds one row per key.
--
-- A row names the batch that last wrote it by the batch's number in ingest_inbox
-- (`batch_ref`) instead of its 64-hex digest: the rows of one batch then append
-- to the end of that index, and each row is smaller by a 64-character digest. The views read the
-- digest through the inbox.
--
-- flight_times is read from four columns of `flight` that each batch keeps up to
-- date for the flights it touches, in its own transaction, instead of being
-- computed from every event on each read: one day of flights is then an index
-- range, not a pass over the whole table.

-- Views are dropped first: a table cannot be renamed while a view names it.
DROP VIEW flight_times;
DROP VIEW batch_summary;
DROP VIEW duty_event;

-- Batches numbered in the order they were ingested.
ALTER TABLE ingest_inbox ADD COLUMN batch_ref INTEGER;
UPDATE ingest_inbox SET batch_ref = numbered.n
FROM (SELECT rowid AS r, row_number() OVER (ORDER BY ingested_at, rowid) AS n
      FROM ingest_inbox) AS numbered
WHERE ingest_inbox.rowid = numbered.r;
CREATE UNIQUE INDEX ingest_inbox_batch_ref ON ingest_inbox (batch_ref);
-- How many rows of duty_event_data each batch is the last writer of, kept by each
-- batch (its own, and those of the batches whose rows it replaces) so that
-- batch_summary reads a number instead of counting a batch's rows.
ALTER TABLE ingest_inbox ADD COLUMN rows_last_written INTEGER NOT NULL DEFAULT 0;

CREATE TABLE duty_event_data_new (
    key              BLOB NOT NULL CHECK (typeof(key) = 'blob' AND length(key) = 32),
    -- A flight.ref and an ingest_inbox.batch_ref. Not declared foreign keys, for
    -- the reason given in schema 1: each row is written in the transaction that
    -- writes its flight and its inbox row.
    flight_ref       INTEGER NOT NULL,
    event_kind       TEXT NOT NULL,
    instant_utc      TEXT NOT NULL,
    source_revision  INTEGER NOT NULL CHECK (source_revision >= 0),
    payload          TEXT NOT NULL,
    retracted        INTEGER NOT NULL CHECK (retracted IN (0, 1)),
    batch_ref        INTEGER NOT NULL,
    first_seen_at    TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    change_seq       INTEGER NOT NULL
);

-- The rows stored so far are all live. Their change_seq follows the order they
-- were last written in (their updated_at, to the millisecond, ties by rowid),
-- the order they were committed in.
INSERT INTO duty_event_data_new (key, flight_ref, event_kind, instant_utc, source_revision,
                                 payload, retracted, batch_ref, first_seen_at, updated_at,
                                 change_seq)
SELECT d.key, d.flight_ref, d.event_kind, d.instant_utc, d.source_revision, d.payload, 0,
       i.batch_ref, d.first_seen_at, d.updated_at,
       row_number() OVER (ORDER BY d.updated_at, d.rowid)
FROM duty_event_data AS d LEFT JOIN ingest_inbox AS i ON i.batch_digest = d.batch_digest
ORDER BY d.updated_at, d.rowid;

DROP TABLE duty_event_data;
ALTER TABLE duty_event_data_new RENAME TO duty_event_data;

CREATE UNIQUE INDEX duty_event_data_key ON duty_event_data (lower(hex(key)));
CREATE UNIQUE INDEX duty_event_data_change_seq ON duty_event_data (change_seq);
-- A flight's rows, live or not. With retracted and event_kind in it, a count of
-- duty_event scans this index instead of every row (in flight order, so its join
-- to flight walks that table in order too), and one kind of a flight's events
-- is found without reading the others. An update that keeps retracted leaves it
-- alone.
CREATE INDEX duty_event_data_flight ON duty_event_data (flight_ref, retracted, event_kind);
CREATE INDEX duty_event_data_batch ON duty_event_data (batch_ref);
-- Live rows only: what the analyst views read (a time range of one kind on
-- duty_event_all, which holds retracted rows too, is not served by it).
CREATE INDEX duty_event_data_kind_instant ON duty_event_data (event_kind, rtrim(instant_utc, 'Z'))
    WHERE retracted = 0;

UPDATE ingest_inbox SET rows_last_written =
    (SELECT count(*) FROM duty_event_data AS d WHERE d.batch_ref = ingest_inbox.batch_ref);

-- flight is rebuilt with the first off-blocks and takeoff and the last landing
-- and on-blocks of each flight's live events, in canonical form (min and max by
-- time: rtrim(…, 'Z')), and its block and airborne minutes computed from them by
-- SQLite on every write (stored generated columns).
CREATE TABLE flight_new (
    ref               INTEGER PRIMARY KEY,
    flight_id         TEXT NOT NULL UNIQUE,
    off_blocks_utc    TEXT,
    takeoff_utc       TEXT,
    landing_utc       TEXT,
    on_blocks_utc     TEXT,
    block_minutes     REAL GENERATED ALWAYS AS (
        round((julianday(rtrim(on_blocks_utc, 'Z')) - julianday(rtrim(off_blocks_utc, 'Z'))) * 1440, 2)
    ) STORED,
    airborne_minutes  REAL GENERATED ALWAYS AS (
        round((julianday(rtrim(landing_utc, 'Z')) - julianday(rtrim(takeoff_utc, 'Z'))) * 1440, 2)
    ) STORED
);
INSERT INTO flight_new (ref, flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc)
SELECT f.ref, f.flight_id, t.off_blocks, t.takeoff, t.landing, t.on_blocks
FROM flight AS f LEFT JOIN (
    SELECT flight_ref,
           min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) || 'Z' AS off_blocks,
           min(CASE WHEN event_kind = 'takeoff' THEN rtrim(instant_utc, 'Z') END) || 'Z' AS takeoff,
           max(CASE WHEN event_kind = 'landing' THEN rtrim(instant_utc, 'Z') END) || 'Z' AS landing,
           max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) || 'Z' AS on_blocks
    FROM duty_event_data
    WHERE retracted = 0 AND event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
    GROUP BY flight_ref
) AS t ON t.flight_ref = f.ref
ORDER BY f.ref;
DROP TABLE flight;
ALTER TABLE flight_new RENAME TO flight;
-- Ordered by the first off-blocks and holding every time, so that a range of days
-- of flight_times (block minutes per day, say) needs no look-up by flight.
CREATE INDEX flight_off_blocks ON flight (off_blocks_utc, block_minutes, airborne_minutes,
                                          on_blocks_utc, takeoff_utc, landing_utc);

-- The flight by a LEFT JOIN on its unique number: every row has its flight, so it
-- reads as an inner join would, SQLite leaves it out of a query that is not an
-- aggregate and reads no flight column, and a filter on flight_id finds the
-- flight first. The batch digest by a subquery, evaluated only for the rows a
-- query returns: a count reads no inbox row. (A filter on batch_digest reads every
-- row; ingest_inbox.batch_ref and duty_event_data.batch_ref find a batch's rows.)
CREATE VIEW duty_event_all AS
SELECT lower(hex(d.key)) AS idempotency_key,
       f.flight_id,
       d.event_kind,
       d.instant_utc,
       d.source_revision,
       d.payload,
       d.retracted,
       (SELECT i.batch_digest FROM ingest_inbox AS i WHERE i.batch_ref = d.batch_ref)
           AS batch_digest,
       d.first_seen_at,
       d.updated_at,
       d.change_seq
FROM duty_event_data AS d
LEFT JOIN flight AS f ON f.ref = d.flight_ref;

CREATE VIEW duty_event AS
SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload,
       batch_digest, first_seen_at, updated_at, change_seq
FROM duty_event_all
WHERE retracted = 0;

CREATE VIEW flight_times AS
SELECT flight_id,
       off_blocks_utc,
       takeoff_utc,
       landing_utc,
       on_blocks_utc,
       block_minutes,
       airborne_minutes
FROM flight
WHERE coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NOT NULL;

-- One row per ingested batch: its inbox counts, how many rows it is still the last
-- writer of (retracted ones included), and how many of its events sit in quarantine.
CREATE VIEW batch_summary AS
SELECT i.batch_digest,
       i.batch_ref,
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
       i.rows_last_written,
       (SELECT count(*) FROM quarantine AS q WHERE q.batch_digest = i.batch_digest) AS quarantined
FROM ingest_inbox AS i;
