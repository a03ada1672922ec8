-- spoolite schema 3: duty_event becomes a view over storage laid out for ingest
-- speed. Analysts read duty_event exactly as before; the README shows how to look a
-- row up by key using the index.
--
-- duty_event_data stores the idempotency key as its 32 bytes instead of 64 hex
-- characters: the key's index, which a batch's inserts walk in key order, is half
-- the size.
--
-- flight numbers each flight id once. duty_event_data refers to it by number, and
-- the index for looking events up by flight is on that number. A new flight gets
-- the next number, so a batch of new flights appends to the end of that index
-- instead of writing one random page of it per event, which is what made a large
-- database slow to grow: flight ids of one batch spread over every flight number
-- the database holds. The flight table is one row per flight, not per event; a
-- batch numbers its new flights in one pass in flight_id order.

CREATE TABLE flight (
    ref        INTEGER PRIMARY KEY,
    flight_id  TEXT NOT NULL UNIQUE
);

CREATE TABLE duty_event_data (
    key              BLOB PRIMARY KEY NOT NULL
                     CHECK (typeof(key) = 'blob' AND length(key) = 32),
    -- A flight.ref. Not a declared foreign key, for the reason given in schema 1
    -- for batch_digest: the row and its flight row are written in one transaction.
    flight_ref       INTEGER NOT NULL,
    event_kind       TEXT NOT NULL,
    instant_utc      TEXT NOT NULL,
    source_revision  INTEGER NOT NULL CHECK (source_revision >= 0),
    payload          TEXT NOT NULL,
    -- The batch that last wrote the row (an ingest_inbox.batch_digest), as hex text
    -- so that joins on it need no unhex() (absent from SQLite before 3.41).
    batch_digest     TEXT NOT NULL,
    first_seen_at    TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);

INSERT INTO flight (flight_id)
SELECT DISTINCT flight_id FROM duty_event ORDER BY flight_id;

-- Lowercase hex sorts like the bytes it spells, so the copy goes in key order.
INSERT INTO duty_event_data (key, flight_ref, event_kind, instant_utc, source_revision,
                             payload, batch_digest, first_seen_at, updated_at)
SELECT unhex(e.idempotency_key), f.ref, e.event_kind, e.instant_utc, e.source_revision,
       e.payload, e.batch_digest, e.first_seen_at, e.updated_at
FROM duty_event AS e JOIN flight AS f ON f.flight_id = e.flight_id
ORDER BY e.idempotency_key;

DROP TABLE duty_event;

CREATE INDEX duty_event_data_flight ON duty_event_data (flight_ref);
CREATE INDEX duty_event_data_kind_instant ON duty_event_data (event_kind, instant_utc);
CREATE INDEX duty_event_data_batch ON duty_event_data (batch_digest);

CREATE VIEW duty_event AS
SELECT lower(hex(d.key)) AS idempotency_key,
       f.flight_id,
       d.event_kind,
       d.instant_utc,
       d.source_revision,
       d.payload,
       d.batch_digest,
       d.first_seen_at,
       d.updated_at
FROM duty_event_data AS d JOIN flight AS f ON f.ref = d.flight_ref;
