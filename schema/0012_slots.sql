-- spoolite schema 12: slots (the contract's section *Slots*).
--
-- Events with the same flight_id, event_kind and slot are versions of one movement
-- whose time may be corrected. Each is stored under its own key, in `slot`; within
-- a slot the row with the highest source_revision wins and every other row reads
-- retracted. `retracted` is what a row reads (what every view, index and crew row
-- goes by); `displaced` says the row reads retracted only because its slot has a
-- higher winner, so its own content (what it was sent as: live) is `retracted = 1
-- AND displaced = 1`. A row that reads live is never displaced.
--
-- Both columns are added with constant defaults (no slot, not displaced), which is
-- what every row stored before slots is: no table is rewritten.

ALTER TABLE spoolite_event ADD COLUMN slot TEXT;
ALTER TABLE spoolite_event ADD COLUMN displaced INTEGER NOT NULL DEFAULT 0
    CHECK (displaced IN (0, 1) AND (displaced = 0 OR retracted = 1));

-- A slot's rows, for the batch that writes into it: rows without a slot (most)
-- are not in it.
CREATE INDEX spoolite_event_slot ON spoolite_event (flight_id, event_kind, slot, source_revision)
    WHERE slot IS NOT NULL;

DROP VIEW duty_event;
DROP VIEW duty_event_all;

CREATE VIEW duty_event_all AS
SELECT lower(hex(e.key)) AS idempotency_key,
       e.flight_id,
       e.event_kind,
       e.instant_utc,
       e.source_revision,
       e.payload,
       e.retracted,
       e.slot,
       (SELECT i.batch_digest FROM ingest_inbox AS i WHERE i.batch_ref = e.batch_ref)
           AS batch_digest,
       e.first_seen_at,
       e.updated_at,
       e.change_seq
FROM spoolite_event AS e;

CREATE VIEW duty_event AS
SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload,
       slot, batch_digest, first_seen_at, updated_at, change_seq
FROM duty_event_all
WHERE retracted = 0;
