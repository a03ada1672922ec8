-- spoolite PostgreSQL schema 1: the contract's tables and views, as the SQLite
-- schema 5 reads, for a database that many spoolite writers share.
--
-- Keys and digests are stored as the text analysts read (64 lowercase hex
-- characters, held by a CHECK), not as bytea behind a hex view: the view's column
-- is then the indexed column itself, so `WHERE idempotency_key = '…'` is a
-- primary-key search with no expression index, and the upsert's conflict target is
-- the primary key. The cost is 32 bytes more per key in the row and its index;
-- whether bytea earns that back is to be measured on a large database.
-- COLLATE "C" makes text order byte order (hex order is key order) whatever the
-- database's locale, and compares fastest.
--
-- The times spoolite writes (ingested_at, first_seen_at, updated_at,
-- quarantined_at) are text with three fraction digits, as in SQLite, so both
-- backends read identically and sort in time order as text. instant_utc and
-- payload are the canonical texts (the key is computed from them).
--
-- Applied by spoolite in one transaction under an advisory lock, so that writers
-- starting together on an empty database apply it once; `spoolite_schema` records
-- each version applied.

CREATE TABLE spoolite_schema (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ingest_inbox (
    batch_digest  text COLLATE "C" PRIMARY KEY CHECK (batch_digest ~ '^[0-9a-f]{64}$'),
    batch_id      text,
    file_name     text NOT NULL,
    ingested_at   text NOT NULL,
    events_total  bigint NOT NULL,
    inserted      bigint NOT NULL,
    updated       bigint NOT NULL,
    unchanged     bigint NOT NULL,
    stale         bigint NOT NULL,
    conflicts     bigint NOT NULL,
    invalid       bigint NOT NULL,
    CHECK (events_total = inserted + updated + unchanged + stale + conflicts + invalid)
);
CREATE INDEX ingest_inbox_batch_id ON ingest_inbox (batch_id);
CREATE INDEX ingest_inbox_ingested_at ON ingest_inbox (ingested_at);

CREATE TABLE duty_event_data (
    key              text COLLATE "C" PRIMARY KEY CHECK (key ~ '^[0-9a-f]{64}$'),
    flight_id        text NOT NULL,
    event_kind       text NOT NULL,
    instant_utc      text COLLATE "C" NOT NULL,
    source_revision  bigint NOT NULL CHECK (source_revision >= 0),
    payload          text NOT NULL,
    retracted        boolean NOT NULL,
    -- The batch that last wrote the row, an ingest_inbox.batch_digest, written in
    -- the transaction that writes that inbox row.
    batch_digest     text COLLATE "C" NOT NULL REFERENCES ingest_inbox (batch_digest),
    first_seen_at    text NOT NULL,
    updated_at       text NOT NULL,
    change_seq       bigint NOT NULL UNIQUE
);
CREATE INDEX duty_event_data_batch ON duty_event_data (batch_digest);
-- What flight_times aggregates: a flight's live timed rows.
CREATE INDEX duty_event_data_flight_kind ON duty_event_data (flight_id, event_kind)
    WHERE NOT retracted;
-- Live rows only: what the analyst views read.
CREATE INDEX duty_event_data_kind_instant
    ON duty_event_data (event_kind, rtrim(instant_utc, 'Z'))
    WHERE NOT retracted;

-- The next change_seq to give, in one row that a writer locks (FOR UPDATE) from
-- the moment it reads stored rows until it commits: writers apply one at a time,
-- in commit order, and every change_seq committed later is larger.
CREATE TABLE change_seq_counter (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    next_seq  bigint NOT NULL CHECK (next_seq >= 1)
);
INSERT INTO change_seq_counter (one, next_seq) VALUES (true, 1);

CREATE TABLE quarantine (
    batch_digest    text COLLATE "C" NOT NULL REFERENCES ingest_inbox (batch_digest),
    file_name       text NOT NULL,
    record_index    bigint NOT NULL CHECK (record_index >= 0),
    reason          text NOT NULL,
    detail          text NOT NULL,
    raw             text NOT NULL,
    quarantined_at  text NOT NULL,
    PRIMARY KEY (batch_digest, record_index)
);
CREATE INDEX quarantine_reason ON quarantine (reason);

CREATE VIEW duty_event_all AS
SELECT key AS idempotency_key,
       flight_id,
       event_kind,
       instant_utc,
       source_revision,
       payload,
       retracted,
       batch_digest,
       first_seen_at,
       updated_at,
       change_seq
FROM duty_event_data;

CREATE VIEW duty_event AS
SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload,
       batch_digest, first_seen_at, updated_at, change_seq
FROM duty_event_all
WHERE NOT retracted;

-- The first off-blocks and takeoff and the last landing and on-blocks of each
-- flight's live events, ordered by time (rtrim(…, 'Z') in byte order), computed
-- from the live rows on each read: no per-flight row for concurrent writers to
-- lock. Minutes as in SQLite, rounded to two places.
CREATE VIEW flight_times AS
SELECT flight_id,
       off_blocks_utc,
       takeoff_utc,
       landing_utc,
       on_blocks_utc,
       round(extract(epoch FROM on_blocks_utc::timestamptz - off_blocks_utc::timestamptz) / 60, 2)
           AS block_minutes,
       round(extract(epoch FROM landing_utc::timestamptz - takeoff_utc::timestamptz) / 60, 2)
           AS airborne_minutes
FROM (
    SELECT flight_id,
           min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'off_blocks') || 'Z' AS off_blocks_utc,
           min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'takeoff') || 'Z' AS takeoff_utc,
           max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'landing') || 'Z' AS landing_utc,
           max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'on_blocks') || 'Z' AS on_blocks_utc
    FROM duty_event_data
    WHERE NOT retracted AND event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
    GROUP BY flight_id
) AS times;

-- One row per ingested batch: its inbox counts, how many rows it is still the last
-- writer of (retracted ones included), and how many of its events sit in quarantine.
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
       (SELECT count(*) FROM duty_event_data AS d WHERE d.batch_digest = i.batch_digest)
           AS rows_last_written,
       (SELECT count(*) FROM quarantine AS q WHERE q.batch_digest = i.batch_digest)
           AS quarantined
FROM ingest_inbox AS i;
