-- spoolite schema 1: events, the inbox of ingested batches, and quarantine.
-- Idempotency lives here: duty_event's primary key is the idempotency key, and
-- ingest_inbox's primary key is the batch digest, so a batch or an event can only
-- ever be stored once.

CREATE TABLE ingest_inbox (
    batch_digest  TEXT PRIMARY KEY NOT NULL CHECK (length(batch_digest) = 64),
    batch_id      TEXT,
    file_name     TEXT NOT NULL,
    ingested_at   TEXT NOT NULL,
    events_total  INTEGER NOT NULL,
    inserted      INTEGER NOT NULL,
    updated       INTEGER NOT NULL,
    unchanged     INTEGER NOT NULL,
    stale         INTEGER NOT NULL,
    conflicts     INTEGER NOT NULL,
    invalid       INTEGER NOT NULL,
    CHECK (events_total = inserted + updated + unchanged + stale + conflicts + invalid)
);
CREATE INDEX ingest_inbox_batch_id ON ingest_inbox (batch_id);
CREATE INDEX ingest_inbox_ingested_at ON ingest_inbox (ingested_at);

CREATE TABLE duty_event (
    idempotency_key  TEXT PRIMARY KEY NOT NULL CHECK (length(idempotency_key) = 64),
    flight_id        TEXT NOT NULL,
    event_kind       TEXT NOT NULL,
    instant_utc      TEXT NOT NULL,
    source_revision  INTEGER NOT NULL CHECK (source_revision >= 0),
    payload          TEXT NOT NULL,
    -- The batch that last wrote the row (an ingest_inbox.batch_digest). Not a
    -- declared foreign key on purpose: a deferred foreign key makes SQLite keep a
    -- statement journal for every insert, which multiplied the bytes written per
    -- event by fifty. The row and its inbox row are written in one transaction.
    batch_digest     TEXT NOT NULL,
    first_seen_at    TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX duty_event_flight_instant ON duty_event (flight_id, instant_utc);
CREATE INDEX duty_event_kind_instant ON duty_event (event_kind, instant_utc);
CREATE INDEX duty_event_batch ON duty_event (batch_digest);

CREATE TABLE quarantine (
    batch_digest    TEXT NOT NULL
                    REFERENCES ingest_inbox (batch_digest) DEFERRABLE INITIALLY DEFERRED,
    file_name       TEXT NOT NULL,
    record_index    INTEGER NOT NULL CHECK (record_index >= 0),
    reason          TEXT NOT NULL,
    detail          TEXT NOT NULL,
    raw             TEXT NOT NULL,
    quarantined_at  TEXT NOT NULL,
    PRIMARY KEY (batch_digest, record_index)
);
CREATE INDEX quarantine_reason ON quarantine (reason);
