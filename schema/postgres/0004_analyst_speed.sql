-- spoolite PostgreSQL schema 4: the plain query is the fast one, and storage
-- stands apart (SQLite's schema 8 says the same of its own).
--
-- Storage is named spoolite_* beside the contract's tables and views:
-- duty_event_data becomes spoolite_event and change_seq_counter
-- spoolite_change_seq (views follow a renamed table). The live rows' index is on
-- instant_utc as analysts compare it (COLLATE "C": byte order, as in SQLite), not
-- on rtrim(instant_utc, 'Z'): a plain range of one kind is an index range, and
-- GROUP BY event_kind of duty_event can read that index alone. updated_at gets an
-- index, so a page sorted by it reads its first entries.
ALTER TABLE duty_event_data RENAME TO spoolite_event;
ALTER TABLE change_seq_counter RENAME TO spoolite_change_seq;
ALTER INDEX duty_event_data_batch RENAME TO spoolite_event_batch;
ALTER INDEX duty_event_data_flight_kind RENAME TO spoolite_event_flight_kind;
DROP INDEX duty_event_data_kind_instant;
CREATE INDEX spoolite_event_kind_instant ON spoolite_event (event_kind, instant_utc)
    WHERE NOT retracted;
CREATE INDEX spoolite_event_updated_at ON spoolite_event (updated_at);
ALTER TABLE spoolite_event RENAME CONSTRAINT duty_event_data_pkey TO spoolite_event_pkey;
ALTER TABLE spoolite_event RENAME CONSTRAINT duty_event_data_change_seq_key
    TO spoolite_event_change_seq_key;
ALTER TABLE spoolite_event RENAME CONSTRAINT duty_event_data_batch_digest_fkey
    TO spoolite_event_batch_digest_fkey;
