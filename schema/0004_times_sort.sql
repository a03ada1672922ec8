-- spoolite schema 4: times that sort.
--
-- Times spoolite writes (ingested_at, first_seen_at, updated_at, quarantined_at) now
-- carry exactly three fraction digits, 2026-12-01T09:43:49.150Z, so that as text
-- they sort in time order. Earlier versions dropped trailing zeros (…49.15Z sorted
-- after the later …49.152Z); this rewrites the rows already stored. Every row of one
-- batch shares one time, so only the batches written at a whole 10 ms are touched.
--
-- instant_utc keeps its canonical form (the idempotency key is computed from it),
-- which sorts as text except between instants of one second with fractions of
-- different lengths (10:05:00.5Z before 10:05:00Z). rtrim(instant_utc, 'Z') sorts
-- correctly, so the index analysts use to find a time range of one kind is built on
-- it; the README shows the expression.

-- '…SS' + '.' + the fraction padded to three digits + 'Z'; fractions of more than
-- three digits were never written.
UPDATE ingest_inbox
SET ingested_at = substr(ingested_at, 1, 19) || '.'
    || substr(substr(rtrim(ingested_at, 'Z'), 21) || '000', 1, 3) || 'Z'
WHERE length(ingested_at) <> 24;

UPDATE duty_event_data
SET first_seen_at = substr(first_seen_at, 1, 19) || '.'
        || substr(substr(rtrim(first_seen_at, 'Z'), 21) || '000', 1, 3) || 'Z',
    updated_at = substr(updated_at, 1, 19) || '.'
        || substr(substr(rtrim(updated_at, 'Z'), 21) || '000', 1, 3) || 'Z'
WHERE length(first_seen_at) <> 24 OR length(updated_at) <> 24;

UPDATE quarantine
SET quarantined_at = substr(quarantined_at, 1, 19) || '.'
    || substr(substr(rtrim(quarantined_at, 'Z'), 21) || '000', 1, 3) || 'Z'
WHERE length(quarantined_at) <> 24;

DROP INDEX duty_event_data_kind_instant;
CREATE INDEX duty_event_data_kind_instant ON duty_event_data (event_kind, rtrim(instant_utc, 'Z'));
