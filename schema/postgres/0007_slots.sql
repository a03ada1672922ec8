-- spoolite PostgreSQL schema 7: slots (the contract's section *Slots*), as
-- SQLite's schema 12 (schema/0012_slots.sql says what each column holds).
--
-- `retracted` is what a row reads; `displaced` says it reads retracted only
-- because its slot has a higher winner (it was sent live). Both columns are added
-- with constant defaults, which is what every row stored before slots is: no
-- table is rewritten.

ALTER TABLE spoolite_event ADD COLUMN slot text;
ALTER TABLE spoolite_event ADD COLUMN displaced boolean NOT NULL DEFAULT false
    CHECK (NOT displaced OR retracted);

CREATE INDEX spoolite_event_slot ON spoolite_event (flight_id, event_kind, slot, source_revision)
    WHERE slot IS NOT NULL;

DROP VIEW duty_event;
DROP VIEW duty_event_all;

CREATE VIEW duty_event_all AS
SELECT key AS idempotency_key,
       flight_id,
       event_kind,
       instant_utc,
       source_revision,
       payload,
       retracted,
       slot,
       batch_digest,
       first_seen_at,
       updated_at,
       change_seq
FROM spoolite_event;

CREATE VIEW duty_event AS
SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload,
       slot, batch_digest, first_seen_at, updated_at, change_seq
FROM duty_event_all
WHERE NOT retracted;
