-- spoolite schema 8: the plain query is the fast one, and storage stands apart.
--
-- Analysts write SQL the plain way (`SELECT event_kind, count(*) FROM duty_event
-- GROUP BY event_kind`, an `instant_utc` range, `ORDER BY updated_at DESC`), and
-- each such query must read one index, not every row joined to its flight. So:
--
-- * Storage is named `spoolite_*`, beside the contract's tables and views, so that
--   `.tables` and Datasette show what to read: duty_event_data becomes
--   spoolite_event and flight becomes spoolite_flight.
-- * Each event row holds its flight id (it held a number into `flight`): the views
--   duty_event_all and duty_event then read one table, so an aggregate or a filter
--   on them is an aggregate or a filter on that table (SQLite keeps a LEFT JOIN
--   under an aggregate, which had joined every row to its flight). One flight's
--   rows are found by (flight_id, retracted, event_kind, instant_utc), which also
--   answers the batches' own look-ups of a flight's first or last instant of a
--   kind without reading a row (the crew rows' recompute reads two per flight).
--   (Flight ids of new days land all over that index, one random leaf page each,
--   where the flight number of schema 5 appended: the price of growth for a plain
--   filter on flight_id.)
-- * The live rows' index is on (event_kind, instant_utc, retracted), the column as
--   analysts compare it, instead of on rtrim(instant_utc, 'Z'): a plain range
--   `event_kind = 'landing' AND instant_utc >= '2026-11-01' AND instant_utc <
--   '2026-12-01'` is a SEARCH of it, GROUP BY event_kind walks it without reading
--   a row (with retracted in it, it covers what the view's filter reads), and a
--   count of duty_event counts its entries. It orders instants as text, which is
--   time order for every instant but those of one second written with fractions
--   of different lengths (README, "Instants").
-- * `updated_at` gets an index, so a page sorted by it (Datasette's column sort)
--   reads 101 entries.
--
-- The rows are copied in rowid order; rowids, keys, change_seq and every other
-- value stay as they were.

DROP VIEW flight_times;
DROP VIEW batch_summary;
DROP VIEW duty_event;
DROP VIEW duty_event_all;

CREATE TABLE spoolite_event (
    key              BLOB NOT NULL CHECK (typeof(key) = 'blob' AND length(key) = 32),
    flight_id        TEXT NOT NULL,
    event_kind       TEXT NOT NULL,
    instant_utc      TEXT NOT NULL,
    source_revision  INTEGER NOT NULL CHECK (source_revision >= 0),
    payload          TEXT NOT NULL,
    retracted        INTEGER NOT NULL CHECK (retracted IN (0, 1)),
    -- An ingest_inbox.batch_ref, not a declared foreign key (schema 1 says why):
    -- each row is written in the transaction that writes its inbox row.
    batch_ref        INTEGER NOT NULL,
    first_seen_at    TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    change_seq       INTEGER NOT NULL
);
INSERT INTO spoolite_event (rowid, key, flight_id, event_kind, instant_utc, source_revision,
                            payload, retracted, batch_ref, first_seen_at, updated_at,
                            change_seq)
SELECT d.rowid, d.key, f.flight_id, d.event_kind, d.instant_utc, d.source_revision,
       d.payload, d.retracted, d.batch_ref, d.first_seen_at, d.updated_at, d.change_seq
FROM duty_event_data AS d JOIN flight AS f ON f.ref = d.flight_ref
ORDER BY d.rowid;
DROP TABLE duty_event_data;
ALTER TABLE flight RENAME TO spoolite_flight;
-- Its indexes under names of its own (SQLite renames the automatic one).
DROP INDEX flight_off_blocks;
CREATE INDEX spoolite_flight_off_blocks ON spoolite_flight (off_blocks_utc, block_minutes,
    airborne_minutes, on_blocks_utc, takeoff_utc, landing_utc);
DROP INDEX flight_id_lower;
CREATE INDEX spoolite_flight_id_lower ON spoolite_flight (lower(flight_id));

-- The key's lowercase hex: the upserts' conflict target and what
-- `WHERE idempotency_key = '…'` on either view finds.
CREATE UNIQUE INDEX spoolite_event_key ON spoolite_event (lower(hex(key)));
CREATE UNIQUE INDEX spoolite_event_change_seq ON spoolite_event (change_seq);
CREATE INDEX spoolite_event_flight ON spoolite_event (flight_id, retracted, event_kind, instant_utc);
CREATE INDEX spoolite_event_batch ON spoolite_event (batch_ref);
CREATE INDEX spoolite_event_kind_instant ON spoolite_event (event_kind, instant_utc, retracted)
    WHERE retracted = 0;
CREATE INDEX spoolite_event_updated_at ON spoolite_event (updated_at);

-- The batch digest by a subquery, evaluated only for the rows a query returns: a
-- count or a GROUP BY reads no inbox row.
CREATE VIEW duty_event_all AS
SELECT lower(hex(e.key)) AS idempotency_key,
       e.flight_id,
       e.event_kind,
       e.instant_utc,
       e.source_revision,
       e.payload,
       e.retracted,
       (SELECT i.batch_digest FROM ingest_inbox AS i WHERE i.batch_ref = e.batch_ref)
           AS batch_digest,
       e.first_seen_at,
       e.updated_at,
       e.change_seq
FROM spoolite_event AS e;

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
FROM spoolite_flight
WHERE coalesce(off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc) IS NOT NULL;

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
